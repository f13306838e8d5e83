/* Links between nodes other than the event builder's (docs/run.md, "Several nodes"): a builder
 * unit or a processing stage on one node feeding a processing stage, a writer or a feedback
 * stage on another, over the fabric. Each such link has its own endpoint pair. The receiving
 * node listens on fabric.port + 256 + the link's index in the topology, registers
 * fabric.buffers slots of fabric.buffer_size bytes and posts a receive in each; the sending
 * node connects and sends one message per event (a header, then the serialized event) while it
 * holds credits: it starts with `credits` (at most the slots), and the receiver gives them back
 * in batches as it re-posts slots. After the producing stage has finished, an END message
 * closes the stream; the receiving stage then sees one producer fewer.
 *
 * In the run, the remote end of the link stands in for the link: on the sending node the
 * (not local) `to` stage gets a ring and the sender thread; on the receiving node the (not
 * local) `from` stage gets the receiver thread and counts what it delivered. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "run_internal.h"
#include "sddaq/clock.h"
#include "sddaq/log.h"

#define LOG "run"

#define LINK_MAGIC     0x4b4e4c53u /* "SLNK" */
#define LINK_PORT_BASE 256         /* fabric.port + 256 + link index */
#define LINK_CTL_SLOTS 8           /* the sender's receives for credit messages */

enum link_msg { LINK_DATA = 1, LINK_END, LINK_CREDIT };

/* A message: this header, then (DATA) `count` events, each a link_ev and its serialized
 * bytes, padded to 8. */
struct link_hdr {
    uint32_t magic, type;
    uint32_t count;   /* DATA: events in the message; END: DATA messages sent before it (a
                         large message may complete after a later small one) */
    uint32_t credits; /* CREDIT: slots given back */
    uint64_t bytes;   /* of the whole message */
};

struct link_ev {
    uint64_t id, built_ns;
    uint32_t flags, tflags, kept, ntracks;
    uint32_t bytes, pad;
};

static size_t ev_span(uint32_t bytes)
{
    return sizeof(struct link_ev) + (((size_t)bytes + 7) & ~(size_t)7);
}

struct run_link {
    struct sdd_run *r;
    size_t index;
    struct run_stage *from, *to;
    bool sender;
    sdd_ep *ep;
    sdd_listener *lis;
    sdd_peer *peer;
    sdd_mr *mr;
    uint8_t *mem;
    size_t slot;    /* bytes of one slot */
    uint32_t slots; /* receiver: data slots; sender: send slots */
    uint32_t credits;
    char where[SDD_CFG_HOST_MAX + 16];
};

bool run_link_sends(const struct run_link *k)
{
    return k->sender;
}

bool run_link_crosses(const sdd_config *cfg, const struct sdd_cfg_link *l)
{
    const struct sdd_cfg_stage *a = &cfg->stages[sdd_config_find_stage(cfg, l->from)];
    const struct sdd_cfg_stage *b = &cfg->stages[sdd_config_find_stage(cfg, l->to)];
    return strcmp(a->node, b->node) != 0 && !(a->type == SDD_STAGE_RU && b->type == SDD_STAGE_BU);
}

/* The links that may cross: from a builder unit or a processing stage, into a processing,
 * writer or feedback stage. */
bool run_link_allowed(const struct sdd_cfg_stage *a, const struct sdd_cfg_stage *b)
{
    return (a->type == SDD_STAGE_BU || a->type == SDD_STAGE_PROCESS) &&
           (b->type == SDD_STAGE_PROCESS || b->type == SDD_STAGE_WRITER ||
            b->type == SDD_STAGE_FEEDBACK);
}

static const struct sdd_cfg_node *node_of(const sdd_config *cfg, const struct sdd_cfg_stage *s)
{
    return &cfg->nodes[sdd_config_find_node(cfg, s->node)];
}

static sdd_err open_ep(struct run_link *k)
{
    const sdd_config *cfg = k->r->cfg;
    struct sdd_ep_opts eo;
    sdd_ep_opts_default(&eo);
    eo.provider = sdd_cfg_provider_name(cfg->fabric.provider); /* "auto" as sdd_ep_open knows it */
    eo.peer_timeout_ms = 2000; /* a dead node fails its links within seconds, as in the evb */
    eo.op_timeout_ms = 8000;
    sdd_err err = sdd_ep_open(&eo, &k->ep);
    if (err != SDD_OK) {
        return err;
    }
    size_t bytes = k->slot * (k->slots + LINK_CTL_SLOTS);
    k->mem = aligned_alloc(4096, (bytes + 4095) & ~(size_t)4095);
    if (k->mem == NULL) {
        return SDD_ENOMEM;
    }
    memset(k->mem, 0, bytes);
    return sdd_mr_reg(k->ep, k->mem, bytes, SDD_ACCESS_LOCAL, &k->mr);
}

static uint8_t *slot_at(const struct run_link *k, uint32_t i)
{
    return k->mem + (size_t)i * k->slot;
}

static sdd_err post_slot(struct run_link *k, uint32_t i)
{
    return sdd_ep_post_recv(k->ep, slot_at(k, i), k->slot, k->mr, (void *)(uintptr_t)(i + 1));
}

static sdd_err link_create(struct sdd_run *r, size_t index, struct run_link **out)
{
    const sdd_config *cfg = r->cfg;
    const struct sdd_cfg_link *l = &cfg->links[index];
    struct run_link *k = calloc(1, sizeof(*k));
    if (k == NULL) {
        return SDD_ENOMEM;
    }
    k->r = r;
    k->index = index;
    k->from = &r->st[sdd_config_find_stage(cfg, l->from)];
    k->to = &r->st[sdd_config_find_stage(cfg, l->to)];
    k->sender = k->from->local;
    /* Slots of fabric.buffer_size (several events travel in one message); the receiver has
     * fabric.buffers of them, the sender one per credit. */
    k->slot = cfg->fabric.buffer_size;
    k->credits = l->credits < cfg->fabric.buffers ? l->credits : cfg->fabric.buffers;
    k->slots = k->sender ? k->credits : cfg->fabric.buffers;
    const struct sdd_cfg_node *dst = node_of(cfg, k->to->cfg);
    uint16_t port = (uint16_t)(cfg->fabric.port + LINK_PORT_BASE + index);
    snprintf(k->where, sizeof(k->where), "%s:%u", dst->host, port);
    size_t one = sizeof(struct link_hdr) + ev_span((uint32_t)r->item_bytes);
    sdd_err err = one > k->slot ? SDD_ETOOBIG : open_ep(k);
    if (err == SDD_OK && !k->sender) {
        for (uint32_t i = 0; i < k->slots && err == SDD_OK; i++) {
            err = post_slot(k, i);
        }
        if (err == SDD_OK) {
            err = sdd_ep_listen(k->ep, dst->host, port, &k->lis);
        }
    }
    for (uint32_t i = 0; k->sender && err == SDD_OK && i < LINK_CTL_SLOTS; i++) {
        err = post_slot(k, k->slots + i);
    }
    if (err != SDD_OK) {
        SDD_ERROR(LOG, "%s -> %s: cannot set up the fabric link (%s): %s", l->from, l->to, k->where,
                  err == SDD_ETOOBIG ? "an event is larger than fabric.buffer_size"
                                     : sdd_strerror(err));
        run_link_free(k);
        return err;
    }
    *out = k;
    return SDD_OK;
}

sdd_err run_link_setup(struct sdd_run *r, struct run_link **links)
{
    const sdd_config *cfg = r->cfg;
    for (size_t i = 0; i < cfg->n_links; i++) {
        const struct sdd_cfg_link *l = &cfg->links[i];
        if (!run_link_crosses(cfg, l)) {
            continue;
        }
        struct run_stage *from = &r->st[sdd_config_find_stage(cfg, l->from)];
        struct run_stage *to = &r->st[sdd_config_find_stage(cfg, l->to)];
        if (!from->local && !to->local) {
            continue; /* between two other nodes */
        }
        sdd_err err = link_create(r, i, &links[i]);
        if (err != SDD_OK) {
            return err;
        }
        struct run_stage *proxy = from->local ? to : from;
        proxy->link = links[i];
        proxy->nthreads = 1;
    }
    return SDD_OK;
}

/* An error on a link is the run's failure unless the run is already being aborted (then the
 * error is a consequence, and the reason is already set). */
static bool run_aborted(struct sdd_run *r)
{
    return atomic_load(&r->phase) == RUN_PHASE_ABORT;
}

/* Completions within wait_ms: their count, or the (negative) sdd_err when one failed or the peer
 * went away (the link is then over). Every completion returned names one of our slots. */
static int link_poll(struct run_link *k, struct sdd_cqe *cq, int max, int wait_ms)
{
    sdd_err gone = k->peer != NULL ? sdd_peer_status(k->peer) : SDD_OK;
    if (gone != SDD_OK) {
        return (int)gone; /* the fabric declared the other node dead or gone */
    }
    int n = sdd_ep_wait(k->ep, cq, max, wait_ms);
    for (int i = 0; i < n; i++) {
        if (cq[i].kind == SDD_CQE_PEER_DOWN) {
            return (int)(cq[i].status != SDD_OK ? cq[i].status : SDD_EPEERDEAD);
        }
        uintptr_t slot = (uintptr_t)cq[i].ctx;
        if (cq[i].status == SDD_ECANCELED) {
            return (int)SDD_EPEERDEAD; /* tcp cancels the sends pending on a dropped connection */
        }
        if (cq[i].status != SDD_OK) {
            return (int)cq[i].status;
        }
        if (slot == 0 || slot > (uintptr_t)k->slots + LINK_CTL_SLOTS) {
            return (int)SDD_EPROTO; /* not ours: cannot happen */
        }
    }
    return n;
}

static sdd_err send_msg(struct run_link *k, uint32_t slot, size_t len)
{
    return sdd_ep_post_send(k->ep, k->peer, slot_at(k, slot), len, k->mr,
                            (void *)(uintptr_t)(slot + 1));
}

/* ---- sending node ---------------------------------------------------------------------------- */

struct sender {
    struct run_link *k;
    struct run_stage *s; /* the stand-in: its counters */
    bool *busy;          /* send slots in flight */
    uint32_t inflight;
    uint32_t sent; /* DATA messages */
    bool open;     /* a message is being filled in slot cur */
    uint32_t cur;
    size_t fill; /* its bytes so far */
    uint32_t count;
};

static sdd_err sender_drive(struct sender *sd, int wait_ms)
{
    struct run_link *k = sd->k;
    struct sdd_cqe cq[32];
    int n = link_poll(k, cq, 32, wait_ms);
    if (n < 0) {
        return (sdd_err)n;
    }
    for (int i = 0; i < n; i++) {
        uint32_t slot = (uint32_t)((uintptr_t)cq[i].ctx - 1);
        if (cq[i].kind == SDD_CQE_SEND) {
            sd->busy[slot] = false;
            sd->inflight--;
        } else if (cq[i].kind == SDD_CQE_RECV) {
            const struct link_hdr *h = (const void *)slot_at(k, slot);
            if (h->magic == LINK_MAGIC && h->type == LINK_CREDIT) {
                k->credits += h->credits;
            }
            sdd_err err = post_slot(k, slot);
            if (err != SDD_OK) {
                return err;
            }
        }
    }
    return SDD_OK;
}

/* A free send slot, once a credit is there too. */
static sdd_err sender_slot(struct sender *sd, uint32_t *slot)
{
    struct run_link *k = sd->k;
    for (;;) {
        if (k->credits > 0) {
            for (uint32_t i = 0; i < k->slots; i++) {
                if (!sd->busy[i]) {
                    *slot = i;
                    return SDD_OK;
                }
            }
        }
        if (run_aborted(k->r)) {
            return SDD_ECANCELED;
        }
        sdd_err err = sender_drive(sd, 1);
        if (err != SDD_OK) {
            return err;
        }
    }
}

/* Send the message being filled (DATA), or an END message. */
static sdd_err send_message(struct sender *sd, uint32_t type)
{
    struct run_link *k = sd->k;
    if (type == LINK_DATA && !sd->open) {
        return SDD_OK;
    }
    sdd_err err = SDD_OK;
    if (!sd->open && (err = sender_slot(sd, &sd->cur)) != SDD_OK) {
        return err;
    }
    struct link_hdr *h = (void *)slot_at(k, sd->cur);
    *h = (struct link_hdr){.magic = LINK_MAGIC,
                           .type = type,
                           .count = type == LINK_DATA ? sd->count : sd->sent,
                           .bytes = type == LINK_DATA ? sd->fill : sizeof(*h)};
    while ((err = send_msg(k, sd->cur, h->bytes)) == SDD_EAGAIN) {
        if ((err = sender_drive(sd, 1)) != SDD_OK) { /* queues full: completions first */
            break;
        }
    }
    if (err == SDD_OK) {
        sd->busy[sd->cur] = true;
        sd->inflight++;
        k->credits--;
        sd->sent += type == LINK_DATA;
    }
    /* Sent, or lost with the link: counted either way. */
    atomic_fetch_add(err == SDD_OK ? &sd->s->link_moved : &sd->s->link_dropped,
                     type == LINK_DATA ? sd->count : 0);
    sd->open = false;
    sd->count = 0;
    return err;
}

/* Add an event to the message being filled; a full one goes out first. */
static sdd_err add_item(struct sender *sd, const struct run_item *it)
{
    struct run_link *k = sd->k;
    size_t span = ev_span(it->bytes);
    sdd_err err = SDD_OK;
    if (sd->open && sd->fill + span > k->slot) {
        err = send_message(sd, LINK_DATA);
    }
    if (err == SDD_OK && !sd->open && (err = sender_slot(sd, &sd->cur)) == SDD_OK) {
        sd->open = true;
        sd->fill = sizeof(struct link_hdr);
        sd->count = 0;
    }
    if (err != SDD_OK) {
        return err;
    }
    uint8_t *p = slot_at(k, sd->cur) + sd->fill;
    struct link_ev e = {.id = it->id,
                        .built_ns = it->built_ns,
                        .flags = it->flags,
                        .tflags = atomic_load(&it->tflags),
                        .kept = atomic_load(&it->kept),
                        .ntracks = atomic_load(&it->ntracks),
                        .bytes = it->bytes};
    memcpy(p, &e, sizeof(e));
    memcpy(p + sizeof(e), it->data, it->bytes);
    sd->fill += span;
    sd->count++;
    return SDD_OK;
}

static sdd_err sender_connect(struct run_link *k)
{
    const struct sdd_cfg_node *dst = node_of(k->r->cfg, k->to->cfg);
    uint16_t port = (uint16_t)(k->r->cfg->fabric.port + LINK_PORT_BASE + k->index);
    uint64_t deadline = sdd_now_ns() + 30 * SDD_NS_PER_S;
    for (;;) {
        sdd_err err =
            sdd_ep_connect(k->ep, dst->host, port, &k->index, sizeof(k->index), 2000, &k->peer);
        if (err != SDD_ECONNREFUSED || sdd_now_ns() > deadline ||
            run_aborted(k->r)) {
            return err;
        }
        sdd_sleep_ns(20 * SDD_NS_PER_MS);
    }
}

void *run_link_send_thread(void *arg)
{
    struct run_worker_arg *wa = arg;
    struct run_stage *s = wa->s; /* the remote `to` stage, standing in for the link */
    struct run_link *k = s->link;
    struct sdd_run *r = s->run;
    struct sender sd = {.k = k, .s = s, .busy = calloc(k->slots, sizeof(bool))};
    struct run_gate gate = {0};
    bool fenced;
    sdd_err err = sd.busy == NULL ? SDD_ENOMEM : sender_connect(k);
    if (err != SDD_OK) {
        run_fail(r, k->from, err, "cannot connect its fabric link");
    }
    for (;;) {
        /* Events waiting are packed into one message; when none is, what was packed goes.
         * Each waits for its builder's commit first (run_gate.c). */
        if (gate.n == 0 && sdd_mpmc_count(s->in) == 0) {
            if (err == SDD_OK && (err = send_message(&sd, LINK_DATA)) != SDD_OK &&
                !run_aborted(r)) {
                run_fail(r, k->from, err, "its fabric link failed");
            }
        }
        struct run_item *it = run_gate_next(s, &gate, &fenced);
        if (it == NULL) {
            break;
        }
        if (!fenced && err == SDD_OK && (err = add_item(&sd, it)) != SDD_OK && !run_aborted(r)) {
            run_fail(r, k->from, err, "its fabric link failed");
        }
        if (fenced || err != SDD_OK) {
            atomic_fetch_add(&s->link_dropped, 1); /* counted; the stages behind go on */
        }
        run_item_release(r, it);
    }
    run_gate_fini(&gate);
    if (err == SDD_OK) {
        err = send_message(&sd, LINK_END);
    }
    while (err == SDD_OK && sd.inflight > 0) {
        err = sender_drive(&sd, 10);
    }
    free(sd.busy);
    return run_worker_done(wa);
}

/* ---- receiving node -------------------------------------------------------------------------- */

static sdd_err give_credits(struct run_link *k, uint32_t n, uint32_t slot)
{
    struct link_hdr *h = (void *)slot_at(k, slot);
    *h = (struct link_hdr){
        .magic = LINK_MAGIC, .type = LINK_CREDIT, .credits = n, .bytes = sizeof(*h)};
    return send_msg(k, slot, sizeof(*h));
}

/* One message: its events delivered into the `to` stage, each copied into a pool buffer so
 * that the slot can take the next message at once. False at END or on a malformed message
 * (*err set; every length is checked before it is used). */
static bool deliver(struct run_link *k, struct run_stage *s, const uint8_t *msg, size_t len,
                    uint64_t *expect, sdd_err *err)
{
    struct link_hdr h;
    if (len < sizeof(h)) {
        *err = SDD_EPROTO;
        return false;
    }
    memcpy(&h, msg, sizeof(h));
    if (h.magic != LINK_MAGIC || h.bytes != len || (h.type != LINK_DATA && h.type != LINK_END)) {
        *err = SDD_EPROTO;
        return false;
    }
    if (h.type == LINK_END) {
        *expect = h.count; /* DATA messages to wait for */
        return true;
    }
    size_t off = sizeof(h);
    for (uint32_t i = 0; i < h.count; i++) {
        struct link_ev e;
        if (len - off < sizeof(e)) {
            *err = SDD_EPROTO;
            return false;
        }
        memcpy(&e, msg + off, sizeof(e));
        if (e.bytes > k->r->item_bytes || len - off < ev_span(e.bytes)) {
            *err = SDD_EPROTO;
            return false;
        }
        struct run_item *it = run_item_new(k->r);
        if (it == NULL) {
            *err = SDD_ECANCELED;
            return false;
        }
        memcpy(it->data, msg + off + sizeof(e), e.bytes);
        it->bytes = e.bytes;
        it->id = e.id;
        it->built_ns = e.built_ns;
        it->flags = e.flags;
        atomic_store(&it->tflags, e.tflags);
        atomic_store(&it->kept, e.kept);
        atomic_store(&it->ntracks, e.ntracks);
        atomic_fetch_add(&s->link_moved, 1);
        run_deliver(k->to, it); /* with our reference */
        off += ev_span(e.bytes);
    }
    return true;
}

void *run_link_recv_thread(void *arg)
{
    struct run_worker_arg *wa = arg;
    struct run_stage *s = wa->s; /* the remote `from` stage, standing in for the link */
    struct run_link *k = s->link;
    struct sdd_run *r = s->run;
    if (run_counts_attach(r) != SDD_OK) {
        run_fail(r, k->to, SDD_ENOMEM, "no memory for the link's counters");
    }
    sdd_err err = sdd_listener_accept(k->lis, &k->index, sizeof(k->index), 30000, &k->peer);
    if (err != SDD_OK) {
        run_fail(r, k->to, err, "no fabric link from its producer's node");
    }
    uint32_t owed = 0, batch = k->credits / 4 > 0 ? k->credits / 4 : 1, ctl = 0;
    uint64_t got = 0, expect = UINT64_MAX; /* DATA messages; how many END announced */
    bool going = err == SDD_OK;
    while (going) {
        struct sdd_cqe cq[32];
        int n = link_poll(k, cq, 32, 1);
        if (n < 0) {
            err = (sdd_err)n;
            break;
        }
        for (int i = 0; i < n && going; i++) {
            uint32_t slot = (uint32_t)((uintptr_t)cq[i].ctx - 1);
            if (cq[i].kind != SDD_CQE_RECV) {
                continue; /* a credit message went out */
            }
            uint64_t was = expect;
            going = deliver(k, s, slot_at(k, slot), cq[i].len, &expect, &err);
            got += going && expect == was; /* a DATA message (END sets expect) */
            sdd_err e = post_slot(k, slot);
            err = err == SDD_OK ? e : err;
            owed++;
        }
        if (owed >= batch && going && err == SDD_OK) {
            sdd_err e = give_credits(k, owed, k->slots + ctl % LINK_CTL_SLOTS);
            if (e == SDD_OK) {
                owed = 0;
                ctl++;
            } else if (e != SDD_EAGAIN) { /* EAGAIN: queues full, give them next time */
                err = e;
            }
        }
        run_counts_flush();
        going = going && got != expect && err == SDD_OK &&
                !run_aborted(r);
    }
    if (err != SDD_OK && !run_aborted(r)) {
        run_fail(r, k->to, err, "its fabric link failed");
    }
    run_counts_detach();
    run_stage_finished(s); /* the `to` stage has one producer fewer */
    return run_worker_done(wa);
}

void run_link_free(struct run_link *k)
{
    if (k == NULL) {
        return;
    }
    sdd_ep_close(k->ep); /* peers, the listener and the region with it */
    free(k->mem);
    free(k);
}
