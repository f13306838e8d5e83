/* The readout unit: generates the fragments of its emulated source into multi-event bulks,
 * sends bulk k to BU schedule(k) in an order rotated by its own index, by RMA write with
 * immediate data into a slot the BU granted (or by pointer to its own BU), keeps each bulk
 * until its BU acknowledges it, and sends a dead BU's unacknowledged bulks to the survivors.
 * The bulk pool holds (credits + 1) x BUs bulks: credits in flight per BU plus the one cycle
 * of N bulks that the rotation makes it hold back. */
#include <stdlib.h>
#include <string.h>

#include "evb_internal.h"
#include "sddaq/bigbuf.h"
#include "sddaq/clock.h"
#include "sddaq/log.h"

#define LOG "evb"

enum bstate { B_FREE = 0, B_READY, B_SENT, B_RESEND };

struct ru_bulk {
    struct evb_tag tag;
    uint8_t *buf;
    uint32_t bytes;
    uint32_t nev;
    uint64_t id;
    int state;
    int bu; /* target BU of the current send */
    uint32_t slot;
    int writes; /* RMA writes of this buffer still in flight */
    bool acked;
    bool resent;
};

struct evb_ru {
    uint32_t r;
    sdd_mr *mr;
    uint8_t *mem;
    size_t mapped; /* of mem, for sdd_bigbuf_free */
    uint32_t npool;
    struct ru_bulk *pool;
    uint64_t gen_next;       /* next bulk to generate */
    uint64_t send_seq;       /* next position in the rotated send order */
    uint64_t nseq;           /* positions in the run: whole cycles of nbu */
    uint64_t busy;           /* bulks not free */
    uint64_t resend_pending; /* re-sent bulks not yet acknowledged */
    uint64_t frag_no;
    uint64_t t0;
    uint64_t free_slots[SDD_EVB_MAX_NODES]; /* per BU: bit s = slot s granted and unused */
    bool bu_dead[SDD_EVB_MAX_NODES];
    uint32_t nresend;
    bool done_sent;
    uint64_t hold_at; /* generate bulks below this only (sdd_evb_node_hold*); UINT64_MAX = all */
    /* Per BU, the last bulks it acknowledged as built (k + 1; 0 = none): when it dies, the
     * survivor that takes its bulk k over learns that k was built, so the other RUs' re-sends
     * of k are not built a second time. */
    uint64_t built_by[SDD_EVB_MAX_NODES][EVB_ACK_MEMORY];
    uint32_t built_next[SDD_EVB_MAX_NODES];
};

sdd_err evb_ru_create(struct sdd_evb_node *n)
{
    struct evb_ru *ru = calloc(1, sizeof(*ru));
    if (ru == NULL) {
        return SDD_ENOMEM;
    }
    n->ru = ru;
    ru->r = (uint32_t)n->ru_of[n->self];
    ru->hold_at = UINT64_MAX;
    ru->npool = n->nbu * (n->o.credits + 1);
    ru->pool = calloc(ru->npool, sizeof(*ru->pool));
    size_t bytes = (size_t)ru->npool * n->slot_size;
    ru->mem = sdd_bigbuf_alloc(bytes, n->huge_pages, &ru->mapped);
    if (ru->pool == NULL || ru->mem == NULL) {
        return SDD_ENOMEM;
    }
    memset(ru->mem, 0, bytes); /* fault every page in now, not on the data path */
    unsigned access = SDD_ACCESS_LOCAL | (n->pull ? SDD_ACCESS_REMOTE_READ : 0);
    sdd_err err = sdd_mr_reg(n->ep, ru->mem, bytes, access, &ru->mr);
    if (err != SDD_OK) {
        return err;
    }
    for (uint32_t i = 0; i < ru->npool; i++) {
        ru->pool[i].tag = (struct evb_tag){TAG_BULK, i};
        ru->pool[i].buf = ru->mem + (size_t)i * n->slot_size;
    }
    uint64_t all = n->o.credits * 2 >= 64 ? ~0ull : (1ull << (n->o.credits * 2)) - 1;
    for (uint32_t b = 0; b < n->nbu; b++) {
        ru->free_slots[b] = all;
    }
    ru->nseq = (n->nbulks + n->nbu - 1) / n->nbu * n->nbu;
    return SDD_OK;
}

sdd_mr *evb_ru_mr(const struct sdd_evb_node *n)
{
    return n->ru->mr;
}

void evb_ru_destroy(struct sdd_evb_node *n)
{
    struct evb_ru *ru = n->ru;
    if (ru == NULL) {
        return;
    }
    sdd_mr_close(ru->mr);
    sdd_bigbuf_free(ru->mem, ru->mapped);
    free(ru->pool);
    free(ru);
    n->ru = NULL;
}

/* Where bulk k goes: BU k mod N while it lives; a dead BU's bulks spread over the survivors in
 * an order that every RU derives from k and the dead set alone. */
static int schedule(const struct sdd_evb_node *n, uint64_t k)
{
    const struct evb_ru *ru = n->ru;
    uint32_t nb = n->nbu;
    uint32_t p = (uint32_t)(k % nb);
    if (!ru->bu_dead[p]) {
        return (int)p;
    }
    for (uint32_t j = 0; j + 1 < nb; j++) {
        uint32_t c = (uint32_t)((p + 1 + ((k / nb + j) % (nb - 1))) % nb);
        if (!ru->bu_dead[c]) {
            return (int)c;
        }
    }
    return -1;
}

/* One fragment from the feed at dst: the payload first, then the header around it. */
static long feed_fragment(struct sdd_evb_node *n, uint8_t *dst, uint64_t ev, uint32_t *len)
{
    const struct sdd_evb_opts *o = &n->o;
    uint16_t source = (uint16_t)n->ru->r;
    size_t cap = n->max_payload;
    long got = o->feed.payload(o->feed.arg, ev, dst + sizeof(struct sdd_evb_frag_hdr), cap);
    bool empty = got < 0;
    *len = empty ? 0 : (uint32_t)((size_t)got < cap ? (size_t)got : cap);
    long w =
        sdd_evb_source_fill(dst, evb_frag_bytes((uint32_t)cap), source, ev, *len, false, o->crc);
    if (empty) {
        ((struct sdd_evb_frag_hdr *)dst)->flags |= SDD_EVB_FRAG_EMPTY;
    }
    return w;
}

/* Whether the feed (if any) can give every event of bulk k now. */
static bool feed_ready(const struct sdd_evb_node *n, uint64_t k)
{
    const struct sdd_evb_opts *o = &n->o;
    if (o->feed.payload == NULL) {
        return true;
    }
    uint64_t end = (k + 1) * o->bulk < o->events ? (k + 1) * o->bulk : o->events;
    return o->feed.ready(o->feed.arg) >= end;
}

static void generate(struct sdd_evb_node *n, struct ru_bulk *b, uint64_t k)
{
    struct evb_ru *ru = n->ru;
    const struct sdd_evb_opts *o = &n->o;
    uint64_t first = k * o->bulk;
    uint32_t nev = (uint32_t)(o->events - first < o->bulk ? o->events - first : o->bulk);
    uint16_t source = (uint16_t)ru->r;
    struct sdd_evb_bulk_hdr *h = (void *)b->buf;
    struct sdd_evb_frag_meta *meta = (void *)(b->buf + sizeof(*h));
    size_t off = sizeof(*h) + (size_t)nev * sizeof(*meta);
    bool fill = o->verify == SDD_EVB_VERIFY_FULL;
    for (uint32_t i = 0; i < nev; i++) {
        uint64_t ev = first + i;
        uint32_t len = 0;
        long w;
        if (o->feed.payload != NULL) {
            w = feed_fragment(n, b->buf + off, ev, &len);
        } else {
            len = sdd_evb_source_size(&o->src, source, ev);
            w = sdd_evb_source_fill(b->buf + off, n->slot_size - off, source, ev, len, fill,
                                    o->crc);
        }
        /* The slot is sized for the largest fragment, so this cannot fail. */
        meta[i] = (struct sdd_evb_frag_meta){ev, (uint32_t)off, (uint32_t)w};
        if (o->corrupt_every != 0 && ++ru->frag_no % o->corrupt_every == 0) {
            uint8_t *f = b->buf + off;
            if (len > 0) {
                f[sizeof(struct sdd_evb_frag_hdr) + len / 2] ^= 0x5a;
            } else {
                ((struct sdd_evb_frag_hdr *)f)->magic ^= 1;
            }
        }
        off += (size_t)w;
    }
    *h = (struct sdd_evb_bulk_hdr){.magic = SDD_EVB_BULK_MAGIC,
                                   .version = SDD_EVB_VERSION,
                                   .source = source,
                                   .nfrag = nev,
                                   .bytes = (uint32_t)off,
                                   .bulk_id = k,
                                   .first_event = first,
                                   .ru = ru->r};
    b->bytes = (uint32_t)off;
    b->nev = nev;
    b->id = k;
    b->state = B_READY;
    b->acked = false;
    b->resent = false;
    b->writes = 0;
    ru->busy++;
    n->st.events_generated += nev;
}

static void bulk_free(struct evb_ru *ru, struct ru_bulk *b)
{
    b->state = B_FREE;
    ru->busy--;
}

/* b went to BU t's slot: the slot is taken until the acknowledgement. */
static int sent(struct sdd_evb_node *n, struct ru_bulk *b, int t, uint32_t slot)
{
    n->ru->free_slots[t] &= ~(1ull << slot);
    b->state = B_SENT;
    b->bu = t;
    b->slot = slot;
    n->st.bulks_sent++;
    n->st.bytes_sent += b->bytes;
    return 1;
}

/* Send b to its scheduled BU. Returns 1 sent, 0 must wait, -1 no BU left. */
static int send_bulk(struct sdd_evb_node *n, struct ru_bulk *b, bool resend)
{
    struct evb_ru *ru = n->ru;
    int t = schedule(n, b->id);
    if (t < 0) {
        return -1;
    }
    uint32_t node = n->bu_node[t];
    if (resend) {
        ((struct sdd_evb_bulk_hdr *)b->buf)->flags |= SDD_EVB_BULK_RESENT;
    }
    if (node == n->self) {
        b->state = B_SENT;
        b->bu = t;
        n->st.bulks_local++;
        evb_bu_on_local(n, ru->r, b->buf, b->bytes);
        return 1;
    }
    uint32_t C = n->o.credits;
    uint64_t mask = ru->free_slots[t];
    uint64_t fo = resend ? mask >> C : 0, reg = mask & ((1ull << C) - 1);
    uint32_t slot;
    if (fo != 0) {
        slot = C + (uint32_t)__builtin_ctzll(fo);
    } else if (reg != 0) {
        slot = (uint32_t)__builtin_ctzll(reg);
    } else {
        return 0;
    }
    if (n->pull) { /* the BU reads it; the buffer stays ours until its acknowledgement */
        evb_ctl_send_d(n, node, CTL_PULL, b->id, slot, (uint32_t)b->bytes,
                       (uint64_t)(b->buf - ru->mem));
        return sent(n, b, t, slot);
    }
    uint64_t off = ((uint64_t)ru->r * 2 * C + slot) * n->slot_size;
    uint64_t imm = ((uint64_t)ru->r << 16) | slot;
    sdd_err err = n->announce == SDD_EVB_ANNOUNCE_IMM
                      ? sdd_ep_post_write_imm(n->ep, n->peers[node].peer, b->buf, b->bytes, ru->mr,
                                              &n->peers[node].slots, off, imm, &b->tag)
                      : sdd_ep_post_write(n->ep, n->peers[node].peer, b->buf, b->bytes, ru->mr,
                                          &n->peers[node].slots, off, &b->tag);
    if (err == SDD_EAGAIN) {
        return 0;
    }
    if (err != SDD_OK) {
        evb_peer_dead(n, node, sdd_errname(err));
        return 0;
    }
    b->writes++;
    if (n->announce == SDD_EVB_ANNOUNCE_WITH_WRITE) {
        evb_ctl_send(n, node, CTL_BULK, b->id, slot, b->bytes);
    }
    return sent(n, b, t, slot);
}

int evb_ru_step(struct sdd_evb_node *n, uint64_t now)
{
    struct evb_ru *ru = n->ru;
    const struct sdd_evb_opts *o = &n->o;
    int work = 0;
    if (ru->t0 == 0) {
        ru->t0 = now;
    }
    /* Bulks of a dead BU first: their events are the oldest. */
    for (uint32_t i = 0; ru->nresend > 0 && i < ru->npool; i++) {
        struct ru_bulk *b = &ru->pool[i];
        if (b->state != B_RESEND || b->writes > 0) {
            continue; /* a write to the dead BU must fail before the buffer goes again */
        }
        int s = send_bulk(n, b, true);
        if (s < 0) {
            SDD_ERROR(LOG, "RU %u: no builder unit left", ru->r);
            return SDD_EPEERDEAD;
        }
        if (s > 0) {
            ru->nresend--;
            n->st.bulks_resent++;
            work++;
        }
    }
    /* Generate ahead, up to the pool and the rate. */
    for (int burst = 0; burst < 4 && ru->gen_next < ru->hold_at && ru->gen_next < n->nbulks;
         burst++) {
        struct ru_bulk *b = &ru->pool[ru->gen_next % ru->npool];
        if (b->state != B_FREE) {
            break;
        }
        if (o->rate > 0) {
            double allowed = (double)(now - ru->t0) * 1e-9 * o->rate;
            if ((double)(ru->gen_next * o->bulk) > allowed) {
                break;
            }
        }
        if (!feed_ready(n, ru->gen_next)) {
            break;
        }
        generate(n, b, ru->gen_next++);
        work++;
    }
    /* Send in the rotated order: RU r starts each cycle with BU r+1 and ends with its own. */
    while (ru->send_seq < ru->nseq) {
        uint64_t c = ru->send_seq / n->nbu, pos = ru->send_seq % n->nbu;
        uint64_t k = c * n->nbu + (ru->r + 1 + pos) % n->nbu;
        if (k >= n->nbulks) {
            ru->send_seq++;
            continue;
        }
        if (k >= ru->gen_next) {
            break;
        }
        struct ru_bulk *b = &ru->pool[k % ru->npool];
        int s = send_bulk(n, b, false);
        if (s < 0) {
            SDD_ERROR(LOG, "RU %u: no builder unit left", ru->r);
            return SDD_EPEERDEAD;
        }
        if (s == 0) {
            break;
        }
        ru->send_seq++;
        work++;
    }
    if (!ru->done_sent && ru->gen_next == n->nbulks && ru->send_seq == ru->nseq && ru->busy == 0) {
        ru->done_sent = true;
        for (uint32_t b = 0; b < n->nbu; b++) {
            if (ru->bu_dead[b]) {
                continue;
            }
            if (n->bu_node[b] == n->self) {
                evb_bu_on_ru_gone(n, ru->r, false);
            } else {
                evb_ctl_send(n, n->bu_node[b], CTL_DONE, n->nbulks, 0, 0);
            }
        }
        work++;
    }
    return work;
}

uint64_t evb_ru_wait_ns(const struct sdd_evb_node *n, uint64_t now)
{
    const struct evb_ru *ru = n->ru;
    if (n->o.rate <= 0 || ru->gen_next >= n->nbulks || ru->t0 == 0) {
        return 0;
    }
    double due = (double)(ru->gen_next * n->o.bulk) / n->o.rate * 1e9 + (double)ru->t0;
    return due > (double)now ? (uint64_t)(due - (double)now) : 0;
}

static void maybe_free(struct sdd_evb_node *n, struct ru_bulk *b)
{
    if (b->state == B_SENT && b->acked && b->writes == 0) {
        bulk_free(n->ru, b);
    }
}

void evb_ru_on_ack(struct sdd_evb_node *n, uint32_t bu, uint64_t k, uint32_t slot, bool dup)
{
    struct evb_ru *ru = n->ru;
    if (slot < 2 * n->o.credits) {
        ru->free_slots[bu] |= 1ull << slot;
    }
    struct ru_bulk *b = &ru->pool[k % ru->npool];
    if (b->id != k || b->state != B_SENT || (uint32_t)b->bu != bu || b->acked) {
        return; /* stale: the bulk went elsewhere after this BU was declared dead */
    }
    b->acked = true;
    if (!dup) {
        ru->built_by[bu][ru->built_next[bu]++ % EVB_ACK_MEMORY] = k + 1;
    }
    if (b->resent && --ru->resend_pending == 0 && ru->nresend == 0) {
        n->st.fail_resend_ns = sdd_now_ns();
    }
    maybe_free(n, b);
}

void evb_ru_on_write_done(struct sdd_evb_node *n, uint32_t idx, sdd_err status)
{
    struct evb_ru *ru = n->ru;
    if (ru == NULL || idx >= ru->npool) {
        return;
    }
    struct ru_bulk *b = &ru->pool[idx];
    b->writes--;
    if (status == SDD_OK && n->announce == SDD_EVB_ANNOUNCE_AFTER_DONE && b->state == B_SENT &&
        !b->acked && !ru->bu_dead[b->bu]) {
        evb_ctl_send(n, n->bu_node[b->bu], CTL_BULK, b->id, b->slot, b->bytes);
    }
    if (status != SDD_OK && status != SDD_ECANCELED && b->state == B_SENT && !b->acked &&
        !ru->bu_dead[b->bu]) {
        evb_peer_dead(n, n->bu_node[b->bu], sdd_errname(status));
    }
    maybe_free(n, b);
}

void evb_ru_on_bu_dead(struct sdd_evb_node *n, uint32_t bu)
{
    struct evb_ru *ru = n->ru;
    if (ru->bu_dead[bu]) {
        return;
    }
    ru->bu_dead[bu] = true;
    if (ru->done_sent) {
        return; /* the run is over for this RU: a BU leaving now is no failure */
    }
    n->st.bu_failures++;
    if (n->st.fail_detect_ns == 0) {
        n->st.fail_detect_ns = sdd_now_ns();
    }
    uint32_t moved = 0;
    for (uint32_t i = 0; i < ru->npool; i++) {
        struct ru_bulk *b = &ru->pool[i];
        if (b->state == B_SENT && (uint32_t)b->bu == bu && !b->acked) {
            b->state = B_RESEND;
            if (!b->resent) {
                b->resent = true;
                ru->resend_pending++;
            }
            ru->nresend++;
            moved++;
        }
    }
    SDD_INFO(LOG, "RU %u: BU %u dead, %u unacknowledged bulks go to the survivors", ru->r, bu,
             moved);
    /* What it acknowledged, it built: tell each bulk's new BU (docs/evb.md, "Failures"). */
    for (uint32_t i = 0; i < EVB_ACK_MEMORY; i++) {
        uint64_t k1 = ru->built_by[bu][i];
        int to = k1 != 0 ? schedule(n, k1 - 1) : -1;
        if (to < 0) {
            continue;
        }
        if (n->bu_node[to] == n->self) {
            evb_bu_on_built_elsewhere(n, k1 - 1);
        } else {
            evb_ctl_send(n, n->bu_node[to], CTL_BUILT, k1 - 1, 0, 0);
        }
    }
    if (moved == 0 && ru->resend_pending == 0) {
        n->st.fail_resend_ns = sdd_now_ns();
    }
}

bool evb_ru_finished(const struct sdd_evb_node *n)
{
    return n->ru == NULL || n->ru->done_sent;
}

void evb_ru_hold(struct sdd_evb_node *n)
{
    n->ru->hold_at = n->ru->gen_next;
}

sdd_err evb_ru_hold_at(struct sdd_evb_node *n, uint64_t bulks)
{
    if (bulks < n->ru->gen_next) {
        return SDD_EINVAL;
    }
    /* Whole cycles of the rotated schedule: an RU sends bulk k only after the bulks before it
     * in its order, which may be k + 1 (RU r starts each cycle with BU r + 1). */
    n->ru->hold_at = (bulks + n->nbu - 1) / n->nbu * n->nbu;
    return SDD_OK;
}

uint64_t evb_ru_generated(const struct sdd_evb_node *n)
{
    return n->ru->gen_next;
}

sdd_err evb_ru_end(struct sdd_evb_node *n, uint64_t bulks)
{
    struct evb_ru *ru = n->ru;
    if (bulks < ru->gen_next) {
        return SDD_EINVAL;
    }
    ru->nseq = (bulks + n->nbu - 1) / n->nbu * n->nbu;
    ru->hold_at = UINT64_MAX;
    return SDD_OK;
}

void evb_ru_resume(struct sdd_evb_node *n)
{
    n->ru->hold_at = UINT64_MAX;
}
