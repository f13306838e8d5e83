/* An event-builder node: options, the fabric endpoint, the TCP bootstrap with every other node,
 * control messages (heartbeats, acknowledgements with credits, end of run), failure detection,
 * and the single-threaded loop that drives the node's RU and BU. */
#include <inttypes.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "evb_internal.h"
#include "sddaq/bigbuf.h"
#include "sddaq/clock.h"
#include "sddaq/log.h"

#define LOG "evb"

void sdd_evb_opts_default(struct sdd_evb_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->nnodes = 2;
    o->events = 100000;
    o->bulk = 64;
    o->credits = 0; /* auto: sdd_evb_credits() */
    o->src.dist = SDD_EVB_SIZE_FIXED;
    o->src.mean = 1024;
    o->src.sigma = 0.5;
    o->src.seed = 1;
    o->verify = SDD_EVB_VERIFY_FULL;
    o->hb_ms = 100;
    o->dead_ms = 2000;
    o->event_timeout_ms = 5000;
    o->spin_us = -1;
}

static const char *const transfer_names[] = {"auto", "write", "read"}; /* enum order */
static const char *const announce_names[] = {"imm", "with-write", "after-done"}; /* enum order */

const char *sdd_evb_announce_name(uint32_t a)
{
    return a < sizeof(announce_names) / sizeof(announce_names[0]) ? announce_names[a] : "?";
}

int sdd_evb_transfer_parse(const char *s)
{
    for (int i = 0; s != NULL && i <= SDD_EVB_TRANSFER_READ; i++) {
        if (strcmp(s, transfer_names[i]) == 0) {
            return i;
        }
    }
    return -1;
}

const char *sdd_evb_transfer_name(sdd_evb_transfer t)
{
    return (unsigned)t <= SDD_EVB_TRANSFER_READ ? transfer_names[t] : "auto";
}

static bool is_shm(const char *provider)
{
    return provider != NULL && strncmp(provider, "shm", 3) == 0;
}

/* Every shm node is on this host: do they outnumber its CPUs (not this process's affinity: a
 * launcher may have pinned the node to one)? */
static bool shm_nodes_outnumber_cpus(const struct sdd_evb_opts *o, const char *provider)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    return is_shm(provider) && o->nnodes > (uint32_t)(cpus > 0 ? cpus : 1);
}

/* Measured (docs/PERFORMANCE.md, session 20, pairs): over shm with more nodes than CPUs the
 * 20 us spin costs about 5-15 % of the builder's events/s; with a CPU per node it gains up to
 * 20 %. Over tcp it made no difference either way (the polls are system calls). */
static uint64_t spin_ns(const struct sdd_evb_opts *o, const char *provider)
{
    if (o->spin_us >= 0) {
        return (uint64_t)o->spin_us * SDD_NS_PER_US;
    }
    return shm_nodes_outnumber_cpus(o, provider) ? 0 : 20 * SDD_NS_PER_US;
}

bool sdd_evb_transfer_reads(const struct sdd_evb_opts *o, const char *provider)
{
    if (o->transfer != SDD_EVB_TRANSFER_AUTO) {
        return o->transfer == SDD_EVB_TRANSFER_READ;
    }
    /* Measured (docs/PERFORMANCE.md, pairs): reads gain ~6 % over shm with CMA and a CPU per
     * node (up to 30 % in some VM states); they lose 20-40 % with more nodes than CPUs, ~8 %
     * over shm without CMA and ~25 % over tcp, where rxm emulates them. */
    return is_shm(provider) && !shm_nodes_outnumber_cpus(o, provider) && sdd_shm_has_cma();
}

static uint64_t hash_add(uint64_t h, uint64_t v)
{
    return evb_mix64(h ^ v);
}

static uint32_t max_payload(const struct sdd_evb_source_opts *s)
{
    uint32_t max = s->max != 0 ? s->max : 4 * s->mean;
    if (s->dist == SDD_EVB_SIZE_FIXED) {
        uint32_t v = s->mean < s->min ? s->min : s->mean;
        return v > max ? max : v;
    }
    return max;
}

/* One bulk slot: the bulk header, then per event its metadata and a fragment of the largest
 * payload, in whole cache lines. */
static uint64_t slot_bytes(const struct sdd_evb_opts *o)
{
    uint64_t per_event = sizeof(struct sdd_evb_frag_meta) + evb_frag_bytes(max_payload(&o->src));
    return (sizeof(struct sdd_evb_bulk_hdr) + (uint64_t)o->bulk * per_event + 63) & ~63ull;
}

uint64_t sdd_evb_host_bulk_bytes(const struct sdd_evb_opts *o, const char *provider,
                                 uint32_t credits)
{
    uint64_t nru = 0, nbu = 0;
    for (uint32_t i = 0; i < o->nnodes && i < SDD_EVB_MAX_NODES; i++) {
        uint8_t r = o->roles[i] != 0 ? o->roles[i] : (SDD_EVB_ROLE_RU | SDD_EVB_ROLE_BU);
        nru += (r & SDD_EVB_ROLE_RU) != 0;
        nbu += (r & SDD_EVB_ROLE_BU) != 0;
    }
    uint64_t host = o->host_nodes != 0 ? o->host_nodes : (is_shm(provider) ? o->nnodes : 1);
    /* Over the whole run, each BU's 2 x C slots per RU and each RU's (C + 1) bulks per BU hold
     * nru x nbu x (3C + 1) slots; a host holds its share of them. */
    uint64_t run = slot_bytes(o) * nru * nbu * (3 * (uint64_t)credits + 1);
    return o->nnodes != 0 ? run * host / o->nnodes : run;
}

uint32_t sdd_evb_credits_fit(const struct sdd_evb_opts *o, const char *provider, uint32_t max)
{
    uint32_t c = max;
    while (c > 1 && sdd_evb_host_bulk_bytes(o, provider, c) > EVB_CACHE_BYTES) {
        c--;
    }
    return c > 0 ? c : 1;
}

uint32_t sdd_evb_host_nodes(const char *const *hosts, uint32_t n)
{
    uint32_t most = 0;
    for (uint32_t a = 0; a < n; a++) {
        uint32_t same = 0;
        for (uint32_t b = 0; b < n; b++) {
            same += strcmp(hosts[a], hosts[b]) == 0;
        }
        most = same > most ? same : most;
    }
    return most;
}

/* The most credits auto starts from (see EVB_READ_CREDITS). */
static uint32_t auto_credit_ceiling(const struct sdd_evb_opts *o, const char *provider)
{
    if (!is_shm(provider) || !sdd_evb_transfer_reads(o, provider)) {
        return EVB_AUTO_CREDITS;
    }
    uint64_t c = EVB_READ_INFLIGHT / slot_bytes(o);
    return c < EVB_AUTO_CREDITS ? EVB_AUTO_CREDITS
                                : (c > EVB_READ_CREDITS ? EVB_READ_CREDITS : (uint32_t)c);
}

uint32_t sdd_evb_credits(const struct sdd_evb_opts *o, const char *provider)
{
    return o->credits != 0 ? o->credits
                           : sdd_evb_credits_fit(o, provider, auto_credit_ceiling(o, provider));
}

static sdd_err check_opts(const struct sdd_evb_opts *o)
{
    if (o->nnodes == 0 || o->nnodes > SDD_EVB_MAX_NODES || o->node >= o->nnodes) {
        SDD_ERROR(LOG, "node %u of %u: need 1..%d nodes", o->node, o->nnodes, SDD_EVB_MAX_NODES);
        return SDD_EINVAL;
    }
    if (o->bulk == 0 || o->bulk > 65536 || o->credits > EVB_MAX_CREDITS) {
        SDD_ERROR(LOG, "bulk must be 1..65536 and credits 1..%d (0: auto)", EVB_MAX_CREDITS);
        return SDD_EINVAL;
    }
    if (o->events == 0 || o->src.mean == 0 || (o->src.max != 0 && o->src.max < o->src.min) ||
        o->src.dist > SDD_EVB_SIZE_LOGNORMAL || o->rate < 0) {
        SDD_ERROR(LOG, "bad events, fragment size or rate");
        return SDD_EINVAL;
    }
    if (o->verify > SDD_EVB_VERIFY_FULL || o->transfer > SDD_EVB_TRANSFER_READ) {
        SDD_ERROR(LOG, "bad verify or transfer mode");
        return SDD_EINVAL;
    }
    if ((o->feed.payload == NULL) != (o->feed.ready == NULL)) {
        SDD_ERROR(LOG, "a feed needs both ready and payload");
        return SDD_EINVAL;
    }
    /* dead_ms / 2 is the lease a heartbeat renews (lease.c): at least two heartbeats long. */
    if (o->hb_ms == 0 || o->dead_ms < 4 * o->hb_ms || o->event_timeout_ms == 0) {
        SDD_ERROR(LOG, "need hb_ms > 0, dead_ms >= 4 * hb_ms, event_timeout_ms > 0");
        return SDD_EINVAL;
    }
    if (slot_bytes(o) > (1u << 30)) {
        SDD_ERROR(LOG, "a bulk of %u events of up to %u bytes exceeds 1 GiB", o->bulk,
                  max_payload(&o->src));
        return SDD_ETOOBIG;
    }
    return SDD_OK;
}

static void node_layout(struct sdd_evb_node *n)
{
    const struct sdd_evb_opts *o = &n->o;
    n->self = o->node;
    for (uint32_t i = 0; i < o->nnodes; i++) {
        uint8_t r = o->roles[i] != 0 ? o->roles[i] : (SDD_EVB_ROLE_RU | SDD_EVB_ROLE_BU);
        n->o.roles[i] = r;
        n->ru_of[i] = n->bu_of[i] = -1;
        if (r & SDD_EVB_ROLE_RU) {
            n->ru_node[n->nru] = i;
            n->ru_of[i] = (int)n->nru++;
        }
        if (r & SDD_EVB_ROLE_BU) {
            n->bu_node[n->nbu] = i;
            n->bu_of[i] = (int)n->nbu++;
        }
    }
    n->nbulks = (o->events + o->bulk - 1) / o->bulk;
    n->max_payload = max_payload(&o->src);
    n->slot_size = (size_t)slot_bytes(o);
    uint64_t h = 0x45564200ull;
    h = hash_add(h, o->nnodes);
    for (uint32_t i = 0; i < o->nnodes; i++) {
        h = hash_add(h, n->o.roles[i]);
    }
    h = hash_add(h, o->events);
    h = hash_add(h, o->bulk);
    h = hash_add(h, o->src.dist);
    h = hash_add(h, o->src.mean);
    h = hash_add(h, o->src.min);
    h = hash_add(h, o->src.max);
    h = hash_add(h, o->src.seed);
    h = hash_add(h, (uint64_t)(o->src.sigma * 1e6));
    h = hash_add(h, o->verify);
    h = hash_add(h, o->crc);
    n->cfg_hash = h;
}

static sdd_err post_ctl_rx(struct sdd_evb_node *n, uint32_t i)
{
    return sdd_ep_post_recv(n->ep, n->ctl_rx + (size_t)i * EVB_CTL_BATCH,
                            EVB_CTL_BATCH * sizeof(struct evb_ctl), n->ctl_mr, &n->ctl_rx_tag[i]);
}
/* How bulks are announced (docs/evb.md, "Announcing a written bulk"): by immediate data where
 * the provider handles it well, else by a message, right behind the write where the provider
 * orders it after the data, else once the write completed. SDDAQ_EVB_ANNOUNCE=imm|with-write|
 * after-done overrides, for measurements (with-write only where the order holds). */
static sdd_evb_announce choose_announce(const struct sdd_ep_info *info)
{
    sdd_evb_announce msg =
        info->send_after_write ? SDD_EVB_ANNOUNCE_WITH_WRITE : SDD_EVB_ANNOUNCE_AFTER_DONE;
    const char *want = getenv("SDDAQ_EVB_ANNOUNCE");
    if (want != NULL && strcmp(want, "imm") == 0) {
        return SDD_EVB_ANNOUNCE_IMM;
    }
    if (want != NULL && strcmp(want, "after-done") == 0) {
        return SDD_EVB_ANNOUNCE_AFTER_DONE;
    }
    if (want != NULL && strcmp(want, "with-write") == 0) {
        return msg;
    }
    return info->write_imm_ok ? SDD_EVB_ANNOUNCE_IMM : msg;
}

sdd_err sdd_evb_node_create(const struct sdd_evb_opts *opts, sdd_evb_node **out)
{
    if (opts == NULL || out == NULL) {
        return SDD_EINVAL;
    }
    sdd_err err = check_opts(opts);
    if (err != SDD_OK) {
        return err;
    }
    struct sdd_evb_node *n = calloc(1, sizeof(*n));
    if (n == NULL) {
        return SDD_ENOMEM;
    }
    n->o = *opts;
    n->lease_ns = (uint64_t)opts->dead_ms * SDD_NS_PER_MS / 2;
    node_layout(n);
    if (n->nru == 0 || n->nbu == 0) {
        SDD_ERROR(LOG, "a run needs at least one RU and one BU");
        free(n);
        return SDD_EINVAL;
    }

    struct sdd_ep_opts eo;
    sdd_ep_opts_default(&eo);
    eo.provider = opts->provider;
    /* Silence is the heartbeats' to judge, at dead_ms; the bootstrap socket's keepalive only
     * backs them up. At dead_ms itself it allowed one probe a second and timed out between two
     * healthy hosts of a loaded VM, and it gave up a BU sooner after its last word than the
     * lease (lease.c) assumes. At 2 x dead_ms of 1 s (evb.failover) it once took a healthy
     * peer for dead under a loaded ctest -j2, and two survivors then built every event each
     * (docs/evb.md, "Two nodes cut apart"). So at least 10 s: a process that dies still
     * closes its socket at once, and a silent host is the heartbeats' to find. */
    eo.peer_timeout_ms = 2 * opts->dead_ms > 10000 ? 2 * opts->dead_ms : 10000;
    eo.wait_mode = (sdd_wait_mode)opts->wait_mode;
    eo.op_timeout_ms = opts->dead_ms * 4 > 10000 ? opts->dead_ms * 4 : 10000;
    err = sdd_ep_open(&eo, &n->ep);
    if (err != SDD_OK) {
        goto out_free;
    }
    n->info = sdd_ep_info(n->ep);
    if (is_shm(n->info->provider)) {
        /* A peer stopped holding a lock of shm's stalls every poster to that region until
         * the lock watches kill it; that stall must end well inside a lease (dead_ms / 2),
         * or a survivor takes it for its own and fences (lease.c). */
        sdd_fabric_shm_fence_within(opts->dead_ms / 8);
    }
    n->announce = choose_announce(n->info);
    n->pull = sdd_evb_transfer_reads(&n->o, n->info->provider);
    /* Writes in pieces are safe from a dead target; reads and whole writes are not. */
    if (is_shm(n->info->provider) && !sdd_shm_has_cma() && (n->pull || n->info->write_chunk == 0)) {
        SDD_WARN(LOG,
                 "shm without cross-memory attach (FI_SHM_DISABLE_CMA, or Yama's "
                 "ptrace_scope > 0) and %s: a peer that dies or stalls can hold this "
                 "node's transfers in libfabric; prefer tcp (docs/evb.md, \"shm and "
                 "SIGKILL\")",
                 n->pull ? "bulks read by the BUs" : "writes in one piece");
    }
    n->spin_ns = spin_ns(&n->o, n->info->provider);
    n->o.credits = sdd_evb_credits(&n->o, n->info->provider);
    n->cfg_hash = hash_add(hash_add(n->cfg_hash, n->pull), n->o.credits);
    n->huge_pages = sdd_bigbuf_huge_for(n->info->provider);
    size_t ctl_bytes = sizeof(struct evb_ctl) * EVB_CTL_BATCH * (EVB_CTL_RX + EVB_CTL_TX);
    n->ctl_rx = aligned_alloc(64, ctl_bytes);
    if (n->ctl_rx == NULL) {
        err = SDD_ENOMEM;
        goto out_free;
    }
    memset(n->ctl_rx, 0, ctl_bytes);
    n->ctl_tx = n->ctl_rx + (size_t)EVB_CTL_RX * EVB_CTL_BATCH;
    err = sdd_mr_reg(n->ep, n->ctl_rx, ctl_bytes, SDD_ACCESS_LOCAL, &n->ctl_mr);
    if (err != SDD_OK) {
        goto out_free;
    }
    for (uint32_t i = 0; i < EVB_CTL_RX; i++) {
        n->ctl_rx_tag[i] = (struct evb_tag){TAG_CTL_RX, i};
        err = post_ctl_rx(n, i);
        if (err != SDD_OK) {
            SDD_ERROR(LOG, "post receive: %s", sdd_strerror(err));
            goto out_free;
        }
    }
    for (uint32_t i = 0; i < EVB_CTL_TX; i++) {
        n->ctl_tx_tag[i] = (struct evb_tag){TAG_CTL_TX, i};
    }
    if (n->bu_of[n->self] >= 0 &&
        ((err = evb_bu_create(n)) != SDD_OK || (err = evb_pull_create(n)) != SDD_OK)) {
        goto out_free;
    }
    if (n->ru_of[n->self] >= 0 && (err = evb_ru_create(n)) != SDD_OK) {
        goto out_free;
    }
    err = sdd_ep_listen(n->ep, opts->host, opts->port, &n->lis);
    if (err != SDD_OK) {
        SDD_ERROR(LOG, "listen on %s:%u: %s", opts->host ? opts->host : "*", opts->port,
                  sdd_strerror(err));
        goto out_free;
    }
    *out = n;
    return SDD_OK;
out_free:
    sdd_evb_node_destroy(n);
    return err;
}

uint16_t sdd_evb_node_port(const sdd_evb_node *n)
{
    return n->lis ? sdd_listener_port(n->lis) : 0;
}

static sdd_err check_hello(struct sdd_evb_node *n, sdd_peer *p, uint32_t *node)
{
    size_t len = 0;
    const struct evb_hello *h = sdd_peer_info(p, &len);
    if (h == NULL || len != sizeof(*h) || h->magic != EVB_HELLO_MAGIC || h->node >= n->o.nnodes ||
        h->node == n->self) {
        SDD_ERROR(LOG, "peer %s sent a bad hello", sdd_peer_name(p));
        return SDD_EPROTO;
    }
    if (h->cfg_hash != n->cfg_hash) {
        SDD_ERROR(LOG, "node %u (%s) runs with different options", h->node, sdd_peer_name(p));
        return SDD_EPROTO;
    }
    if (n->peers[h->node].peer != NULL) {
        SDD_ERROR(LOG, "node %u connected twice", h->node);
        return SDD_EPROTO;
    }
    n->peers[h->node].slots = h->slots;
    n->peers[h->node].pool = h->pool;
    *node = h->node;
    return SDD_OK;
}

sdd_err sdd_evb_node_connect(sdd_evb_node *n, const char *const *hosts, const uint16_t *ports,
                             int timeout_ms)
{
    struct evb_hello me = {.magic = EVB_HELLO_MAGIC, .node = n->self, .cfg_hash = n->cfg_hash};
    if (n->bu) {
        sdd_mr_rkey(evb_bu_mr(n), &me.slots);
    }
    if (n->ru && n->pull) {
        sdd_mr_rkey(evb_ru_mr(n), &me.pool);
    }
    uint64_t deadline = sdd_now_ns() + (uint64_t)timeout_ms * SDD_NS_PER_MS;
    sdd_err err = SDD_OK;
    for (uint32_t j = 0; j < n->self; j++) {
        sdd_peer *p = NULL;
        for (;;) {
            int left = (int)((deadline - sdd_now_ns()) / SDD_NS_PER_MS);
            err =
                sdd_ep_connect(n->ep, hosts[j], ports[j], &me, sizeof(me), left > 0 ? left : 1, &p);
            if (err != SDD_ECONNREFUSED || sdd_now_ns() >= deadline) {
                break;
            }
            sdd_sleep_ns(20 * SDD_NS_PER_MS);
        }
        if (err != SDD_OK) {
            SDD_ERROR(LOG, "connect to node %u at %s:%u: %s", j, hosts[j], ports[j],
                      sdd_strerror(err));
            return err;
        }
        uint32_t who = 0;
        if ((err = check_hello(n, p, &who)) != SDD_OK || who != j) {
            sdd_peer_close(p);
            return err != SDD_OK ? err : SDD_EPROTO;
        }
        n->peers[j].peer = p;
    }
    for (uint32_t k = n->self + 1; k < n->o.nnodes; k++) {
        sdd_peer *p = NULL;
        int left = (int)((deadline - sdd_now_ns()) / SDD_NS_PER_MS);
        err = sdd_listener_accept(n->lis, &me, sizeof(me), left > 0 ? left : 1, &p);
        if (err != SDD_OK) {
            SDD_ERROR(LOG, "accept: %s", sdd_strerror(err));
            return err;
        }
        uint32_t who = 0;
        if ((err = check_hello(n, p, &who)) != SDD_OK || who < n->self) {
            sdd_peer_close(p);
            return err != SDD_OK ? err : SDD_EPROTO;
        }
        n->peers[who].peer = p;
    }
    uint64_t now = sdd_now_ns();
    for (uint32_t j = 0; j < n->o.nnodes; j++) {
        n->peers[j].alive = j != n->self;
        n->peers[j].last_rx_ns = 0; /* not heard yet: the start barrier waits for everyone */
    }
    n->connected = true;
    n->next_hb_ns = now;
    SDD_DEBUG(LOG, "node %u connected to %u peers (%s)", n->self, n->o.nnodes - 1,
              n->info->provider);
    return SDD_OK;
}

/* Lost RU node `node` while it may have given this BU up (lease.c): deliver nothing more. */
static void fence(struct sdd_evb_node *n, uint32_t node, const char *why)
{
    n->fenced = true;
    n->st.fenced = 1;
    SDD_ERROR(LOG,
              "node %u: lost RU node %u (%s) after its lease lapsed; this node %s, so the RUs "
              "may have given its bulks to others: it drops them and leaves the run (fenced)",
              n->self, node, why, evb_lease_stalled_past(n, node) ? "stalled" : "is cut off");
    if (n->bu) {
        evb_bu_fence(n);
    }
}

bool sdd_evb_node_gave_up(const sdd_evb_node *n, uint32_t peer)
{
    return n != NULL && peer < n->o.nnodes &&
           atomic_load_explicit(&n->gave_up[peer], memory_order_acquire);
}

void evb_peer_dead(struct sdd_evb_node *n, uint32_t node, const char *why)
{
    struct evb_peer *p = &n->peers[node];
    if (!p->alive || n->fenced) {
        return;
    }
    if (evb_lease_must_fence(n, node, sdd_now_ns())) {
        fence(n, node, why);
        return;
    }
    p->alive = false;
    atomic_store_explicit(&n->gave_up[node], true, memory_order_release);
    /* Only a peer we still need is a failure; others leave at the end of the run. */
    bool needed = (n->bu_of[node] >= 0 && n->ru && !evb_ru_finished(n)) ||
                  (n->ru_of[node] >= 0 && n->bu && !p->done);
    sdd_log(needed ? SDD_LOG_WARN : SDD_LOG_DEBUG, LOG, "node %u: peer node %u is gone (%s)",
            n->self, node, why);
    if (p->peer) {
        sdd_peer_abort(p->peer); /* given up: nothing waits for what it has not taken */
        p->peer = NULL;
    }
    if (n->bu_of[node] >= 0 && n->ru) {
        evb_ru_on_bu_dead(n, (uint32_t)n->bu_of[node]);
    }
    if (n->ru_of[node] >= 0 && n->bu) {
        evb_bu_on_ru_gone(n, (uint32_t)n->ru_of[node], !p->done);
    }
}

/* One record of a message whose length on_ctl_message checked. */
static void on_ctl(struct sdd_evb_node *n, const struct evb_ctl *m, uint64_t now)
{
    if (m->magic != EVB_CTL_MAGIC || m->from >= n->o.nnodes || m->from == n->self) {
        SDD_WARN(LOG, "dropped a malformed control record (type %u)", m->type);
        return;
    }
    struct evb_peer *p = &n->peers[m->from];
    if (!p->alive) {
        return;
    }
    p->last_rx_ns = now;
    switch (m->type) {
    case CTL_HB:
        evb_lease_on_hb(n, m->from, m->a, m->d, m->c, now);
        break;
    case CTL_ACK:
        if (n->ru && n->bu_of[m->from] >= 0) {
            evb_ru_on_ack(n, (uint32_t)n->bu_of[m->from], m->a, m->b, m->c != 0);
        }
        break;
    case CTL_BULK:
        if (n->bu && n->ru_of[m->from] >= 0) {
            evb_bu_on_write(n, (uint32_t)n->ru_of[m->from], m->b, m->c);
        }
        break;
    case CTL_PULL:
        if (n->bu && n->ru_of[m->from] >= 0) {
            evb_pull_on_announce(n, (uint32_t)n->ru_of[m->from], m->b, m->c, m->d, m->a, now);
        }
        break;
    case CTL_BUILT:
        if (n->bu) {
            evb_bu_on_built_elsewhere(n, m->a);
        }
        break;
    case CTL_DONE:
        if (n->ru_of[m->from] >= 0 && !p->done) {
            p->done = true;
            if (n->bu) {
                evb_bu_on_ru_gone(n, (uint32_t)n->ru_of[m->from], false);
            }
        }
        break;
    default:
        SDD_WARN(LOG, "dropped a control message of unknown type %u", m->type);
        break;
    }
}

/* A received message: 1 to EVB_CTL_BATCH records. */
static void on_ctl_message(struct sdd_evb_node *n, const struct evb_ctl *m, size_t len,
                           uint64_t now)
{
    if (len == 0 || len % sizeof(*m) != 0 || len > EVB_CTL_BATCH * sizeof(*m)) {
        SDD_WARN(LOG, "dropped a malformed control message (%zu bytes)", len);
        return;
    }
    for (size_t k = 0; k < len / sizeof(*m); k++) {
        on_ctl(n, &m[k], now);
    }
}

static void handle_cqe(struct sdd_evb_node *n, const struct sdd_cqe *c, uint64_t now)
{
    if (n->fenced) {
        /* Nothing more is built or acknowledged; only finished sends free their buffers. */
        bool tagged = c->kind != SDD_CQE_PEER_DOWN && c->kind != SDD_CQE_REMOTE_WRITE &&
                      c->ctx != NULL && c->ctx != SDD_CTX_SILENT;
        const struct evb_tag *t = tagged ? c->ctx : NULL;
        if (t != NULL && t->kind == TAG_CTL_TX) {
            n->ctl_tx_busy[t->idx] = false;
        }
        return;
    }
    if (c->kind == SDD_CQE_PEER_DOWN) {
        for (uint32_t j = 0; j < n->o.nnodes; j++) {
            if (n->peers[j].peer == c->peer && c->peer != NULL) {
                evb_peer_dead(n, j, sdd_errname(c->status));
            }
        }
        return;
    }
    if (c->kind == SDD_CQE_REMOTE_WRITE) {
        uint32_t ru = (uint32_t)(c->imm >> 16) & 0xffff, slot = (uint32_t)c->imm & 0xffff;
        if (ru < n->nru) {
            n->peers[n->ru_node[ru]].last_rx_ns = now;
        }
        if (n->bu) {
            evb_bu_on_write(n, ru, slot, c->len);
        }
        if (c->ctx != NULL && c->ctx != SDD_CTX_SILENT) { /* FI_RX_CQ_DATA: a receive was used */
            const struct evb_tag *t = c->ctx;
            if (t->kind == TAG_CTL_RX) {
                post_ctl_rx(n, t->idx);
            }
        }
        return;
    }
    if (c->ctx == NULL || c->ctx == SDD_CTX_SILENT) {
        return;
    }
    const struct evb_tag *t = c->ctx;
    switch (t->kind) {
    case TAG_CTL_RX:
        if (c->status == SDD_OK) {
            on_ctl_message(n, n->ctl_rx + (size_t)t->idx * EVB_CTL_BATCH, c->len, now);
        }
        if (c->status != SDD_ECANCELED) {
            post_ctl_rx(n, t->idx);
        }
        break;
    case TAG_CTL_TX:
        n->ctl_tx_busy[t->idx] = false;
        break;
    case TAG_BULK:
        evb_ru_on_write_done(n, t->idx, c->status);
        break;
    case TAG_PULL:
        evb_pull_on_done(n, t->idx, c->status);
        break;
    }
}

static void heartbeat(struct sdd_evb_node *n, uint64_t now)
{
    if (now < n->next_hb_ns) {
        return;
    }
    n->next_hb_ns = now + (uint64_t)n->o.hb_ms * SDD_NS_PER_MS;
    for (uint32_t j = 0; j < n->o.nnodes && !n->fenced; j++) { /* fenced: it says no more */
        struct evb_peer *p = &n->peers[j];
        if (!p->alive) {
            continue;
        }
        /* Silent while this process listened: after its own stall, what the peer sent meanwhile
         * is still queued, so the count starts again when it runs. */
        uint64_t since = p->last_rx_ns > n->pause_end_ns ? p->last_rx_ns : n->pause_end_ns;
        if (p->last_rx_ns != 0 && now - since > (uint64_t)n->o.dead_ms * SDD_NS_PER_MS) {
            evb_peer_dead(n, j, "silent past dead_ms");
            continue;
        }
        evb_ctl_send_d(n, j, CTL_HB, now, 0, 0, p->echo_ns);
    }
}

static bool all_heard(const struct sdd_evb_node *n)
{
    for (uint32_t j = 0; j < n->o.nnodes; j++) {
        if (n->peers[j].alive && n->peers[j].last_rx_ns == 0) {
            return false;
        }
    }
    return true;
}

static uint64_t cpu_ns(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (uint64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * SDD_NS_PER_S +
           (uint64_t)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * SDD_NS_PER_US;
}

/* Nothing to do: spin briefly (a completion usually follows within microseconds while data
 * flows; not when nodes outnumber the CPUs, see spin_ns), then sleep on the completion fd for at
 * most 200 us, or, where the provider has no wait fd (shm), yield the core so that the peer
 * processes sharing it can make the progress we wait for. Sleeping a whole millisecond, as a
 * generic wait would, stalls a pipeline that moves a bulk every few tens of microseconds. */
static void idle(struct sdd_evb_node *n, int wait_ms)
{
    struct sdd_cqe cq[64];
    uint64_t t0 = sdd_now_ns(), now = t0;
    if (n->o.wait_mode != SDD_WAIT_BLOCK) {
        uint64_t spin =
            n->o.wait_mode == SDD_WAIT_SPIN ? (uint64_t)wait_ms * SDD_NS_PER_MS : n->spin_ns;
        while (now - t0 < spin) {
            int got = sdd_ep_poll(n->ep, cq, 64);
            now = sdd_now_ns();
            if (got > 0) {
                for (int i = 0; i < got; i++) {
                    handle_cqe(n, &cq[i], now);
                }
                return;
            }
        }
        if (n->o.wait_mode == SDD_WAIT_SPIN) {
            return;
        }
    }
    if (sdd_ep_writes_in_pieces(n->ep) > 0) {
        sched_yield(); /* their targets make room without a completion to wake us */
        return;
    }
    uint64_t cap = 200 * SDD_NS_PER_US;
    if (n->ru) {
        uint64_t w = evb_ru_wait_ns(n, now);
        cap = w > cap
                  ? (w < (uint64_t)wait_ms * SDD_NS_PER_MS ? w : (uint64_t)wait_ms * SDD_NS_PER_MS)
                  : cap;
    }
    if (!n->info->wait_fd) {
        if (cap > 200 * SDD_NS_PER_US) {
            sdd_sleep_ns(cap / 4); /* rate-limited source: nothing due for a while */
        } else {
            sched_yield();
        }
        return;
    }
    if (sdd_ep_trywait(n->ep) != SDD_OK) {
        return;
    }
    struct pollfd pfd = {.fd = sdd_ep_fd(n->ep), .events = POLLIN};
    struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)(cap < 999999999 ? cap : 999999999)};
    ppoll(&pfd, 1, &ts, NULL);
}

int sdd_evb_node_poll(sdd_evb_node *n, int wait_ms)
{
    if (!n->connected) {
        return SDD_EINVAL;
    }
    if (n->fenced) {
        return SDD_EFENCED;
    }
    struct sdd_cqe cq[64];
    uint64_t now = sdd_now_ns();
    evb_lease_turn(n, now);
    int work = 0;
    int got = sdd_ep_poll(n->ep, cq, 64);
    if (got < 0) {
        SDD_ERROR(LOG, "endpoint failed: %s", sdd_strerror(got));
        return got;
    }
    for (int i = 0; i < got; i++) {
        handle_cqe(n, &cq[i], now);
    }
    work += got;
    work += evb_ctl_flush(n);
    evb_bu_acks_left(n);
    work += evb_pull_step(n);
    heartbeat(n, now);
    if (n->fenced) {
        return SDD_EFENCED;
    }
    if (n->st.start_ns == 0) {
        if (!all_heard(n)) {
            evb_ctl_flush(n);
            if (got == 0) {
                got = sdd_ep_wait(n->ep, cq, 64, 1);
                now = sdd_now_ns();
                for (int i = 0; i < got; i++) {
                    handle_cqe(n, &cq[i], now);
                }
            }
            return 1;
        }
        n->st.start_ns = sdd_now_ns();
        n->st.cpu_ns = cpu_ns();
    }
    if (n->ru) {
        uint64_t t0 = sdd_now_ns();
        int w = evb_ru_step(n, t0);
        if (w < 0) {
            return w;
        }
        work += w;
        uint64_t local = evb_bu_take_local_ns(n);
        uint64_t dt = w ? sdd_now_ns() - t0 : 0;
        n->st.ru_busy_ns += dt > local ? dt - local : 0;
    }
    if (n->bu) {
        uint64_t t0 = sdd_now_ns();
        int w = evb_bu_step(n, t0);
        work += w;
        n->st.bu_busy_ns += w ? sdd_now_ns() - t0 : 0;
    }
    work += evb_ctl_flush(n); /* this turn's records, one message per peer */
    evb_bu_acks_left(n);
    bool fin = (!n->ru || evb_ru_finished(n)) && (!n->bu || evb_bu_finished(n)) &&
               evb_ctl_idle(n) && evb_pull_busy(n) == 0;
    if (fin) {
        if (n->st.end_ns == 0) {
            n->st.end_ns = sdd_now_ns();
            n->st.cpu_ns = cpu_ns() - n->st.cpu_ns;
        }
        return 0;
    }
    if (work == 0 && wait_ms > 0) {
        idle(n, wait_ms);
    }
    return 1;
}

sdd_err sdd_evb_node_run(sdd_evb_node *n)
{
    int r;
    while ((r = sdd_evb_node_poll(n, 1)) > 0) {
    }
    return r;
}

void sdd_evb_node_hold(sdd_evb_node *n)
{
    if (n->ru) {
        evb_ru_hold(n);
    }
}

sdd_err sdd_evb_node_hold_at(sdd_evb_node *n, uint64_t bulks)
{
    return n->ru ? evb_ru_hold_at(n, bulks) : SDD_OK;
}

void sdd_evb_node_resume(sdd_evb_node *n)
{
    if (n->ru) {
        evb_ru_resume(n);
    }
}

uint64_t sdd_evb_node_generated(const sdd_evb_node *n)
{
    return n->ru ? evb_ru_generated(n) : 0;
}

sdd_err sdd_evb_node_end(sdd_evb_node *n, uint64_t bulks)
{
    if (bulks == 0 || bulks > n->nbulks || (n->ru && bulks < evb_ru_generated(n))) {
        SDD_ERROR(LOG, "node %u: cannot end the run at %" PRIu64 " bulks (run has %" PRIu64
                  ", %" PRIu64 " generated here)", n->self, bulks, n->nbulks,
                  sdd_evb_node_generated(n));
        return SDD_EINVAL;
    }
    /* Later bulk ids are refused by the BU's header check from now on. The BU's bitmap of
     * built bulks keeps its size: an upper bound. */
    n->nbulks = bulks;
    if (bulks * n->o.bulk < n->o.events) {
        n->o.events = bulks * n->o.bulk;
    }
    return n->ru ? evb_ru_end(n, bulks) : SDD_OK;
}

void sdd_evb_node_stats(const sdd_evb_node *n, struct sdd_evb_stats *out)
{
    *out = n->st;
    out->transfer = n->pull ? SDD_EVB_TRANSFER_READ : SDD_EVB_TRANSFER_WRITE;
    out->announce = n->announce;
    out->spin_us = (uint32_t)(n->spin_ns / SDD_NS_PER_US);
    out->credits = n->o.credits;
    if (out->end_ns == 0 && out->start_ns != 0) {
        out->end_ns = sdd_now_ns();
        out->cpu_ns = cpu_ns() - n->st.cpu_ns;
    }
}

void sdd_evb_node_destroy(sdd_evb_node *n)
{
    if (n == NULL) {
        return;
    }
    if (n->ep) {
        /* Let queued acknowledgements and DONEs leave before the goodbye. */
        evb_ctl_flush(n);
        for (int i = 0; i < 200 && !evb_ctl_idle(n); i++) {
            struct sdd_cqe cq[64];
            int got = sdd_ep_wait(n->ep, cq, 64, 1);
            uint64_t now = sdd_now_ns();
            for (int k = 0; k < got; k++) {
                handle_cqe(n, &cq[k], now);
            }
            evb_ctl_flush(n);
        }
        for (uint32_t j = 0; j < n->o.nnodes; j++) {
            if (n->peers[j].peer) {
                sdd_peer_close(n->peers[j].peer);
                n->peers[j].peer = NULL;
            }
        }
    }
    evb_ru_destroy(n);
    evb_pull_destroy(n);
    evb_bu_destroy(n);
    sdd_mr_close(n->ctl_mr);
    sdd_ep_close(n->ep);
    free(n->ctl_rx);
    free(n->backlog);
    free(n->backlog_to);
    free(n);
}
