/* The builder unit: exposes credits x RUs x 2 registered bulk slots (regular and re-send),
 * collects bulk k from every RU, validates every fragment of every event, hands each built
 * event to the next stage (the on_event callback) and then returns each slot to its RU with an
 * acknowledgement. Bulks already built are recognised by id and only acknowledged. Events that
 * miss an RU leave flagged: source lost (the RU died or went away) or timeout. A bulk is
 * delivered only while the RUs' leases hold (lease.c) and its consumer has room (has_room);
 * one ready without them waits (held). */
#include <stdlib.h>
#include <string.h>

#include "evb_internal.h"
#include "sddaq/bigbuf.h"
#include "sddaq/clock.h"
#include "sddaq/log.h"

#define LOG "evb"

enum { RU_LIVE = 0, RU_DONE, RU_DEAD };

struct bu_set {
    bool used;
    bool resent;
    bool held;      /* ready, waiting for the leases or for room behind */
    bool timed_out; /* held after its event timeout */
    bool said_silent; /* warned that it waits past its timeout for a silent RU */
    uint64_t k;
    uint64_t first_ns;
    const uint8_t *bulk[SDD_EVB_MAX_NODES]; /* per RU, NULL until it arrived */
    uint32_t slot[SDD_EVB_MAX_NODES];       /* UINT32_MAX: handed over by the local RU */
};

struct evb_bu {
    uint32_t b;
    sdd_mr *mr;
    uint8_t *mem;
    size_t bytes, mapped;
    struct bu_set *sets;
    uint32_t nsets, nused, nheld;
    uint8_t ru_state[SDD_EVB_MAX_NODES];
    uint64_t *built; /* bit k: bulk-set k was built here */
    uint64_t next_scan_ns;
    uint64_t local_ns; /* building time spent inside the local RU's step */
    uint64_t acks_staged; /* bulks delivered whose acknowledgements wait for a flush */
    uint64_t delivered;   /* bulks delivered (build calls): the delivery numbers */
    uint64_t acked;       /* the last delivery whose acknowledgements were staged */
    uint64_t committed;   /* deliveries no RU can re-send (sdd_evb_node_committed) */
    uint64_t events_acked, events_committed; /* events built up to `acked`, `committed` */
    uint64_t doubt_ns; /* acks of bulks in doubt left at this time; 0: none in doubt */
};

sdd_err evb_bu_create(struct sdd_evb_node *n)
{
    struct evb_bu *bu = calloc(1, sizeof(*bu));
    if (bu == NULL) {
        return SDD_ENOMEM;
    }
    n->bu = bu;
    bu->b = (uint32_t)n->bu_of[n->self];
    uint32_t C = n->o.credits;
    bu->bytes = (size_t)n->nru * 2 * C * n->slot_size;
    bu->mem = sdd_bigbuf_alloc(bu->bytes, n->huge_pages, &bu->mapped);
    /* Remote RUs hold at most 2C slots each; the local RU at most its whole pool. */
    bu->nsets = n->nru * 2 * C + n->nbu * (C + 1) + 4;
    bu->sets = calloc(bu->nsets, sizeof(*bu->sets));
    bu->built = calloc((n->nbulks + 63) / 64, 8);
    if (bu->mem == NULL || bu->sets == NULL || bu->built == NULL) {
        return SDD_ENOMEM;
    }
    memset(bu->mem, 0, bu->bytes); /* fault every page in now, not on the data path */
    return sdd_mr_reg(n->ep, bu->mem, bu->bytes, SDD_ACCESS_LOCAL | SDD_ACCESS_REMOTE_WRITE,
                      &bu->mr);
}

void evb_bu_destroy(struct sdd_evb_node *n)
{
    struct evb_bu *bu = n->bu;
    if (bu == NULL) {
        return;
    }
    sdd_mr_close(bu->mr);
    sdd_bigbuf_free(bu->mem, bu->mapped);
    free(bu->sets);
    free(bu->built);
    free(bu);
    n->bu = NULL;
}

sdd_mr *evb_bu_mr(const struct sdd_evb_node *n)
{
    return n->bu->mr;
}

/* Give a slot back to its RU: an acknowledgement that carries the credit. */
static void release(struct sdd_evb_node *n, uint32_t ru, uint64_t k, uint32_t slot, bool dup)
{
    if (slot == UINT32_MAX) {
        evb_ru_on_ack(n, n->bu->b, k, slot, dup);
    } else {
        evb_ctl_send(n, n->ru_node[ru], CTL_ACK, k, slot, dup ? 1 : 0);
    }
}

static uint32_t events_in(const struct sdd_evb_node *n, uint64_t k)
{
    uint64_t first = k * n->o.bulk;
    return (uint32_t)(n->o.events - first < n->o.bulk ? n->o.events - first : n->o.bulk);
}

static void build(struct sdd_evb_node *n, struct bu_set *s, bool timed_out)
{
    struct evb_bu *bu = n->bu;
    const struct sdd_evb_frag_hdr *frags[SDD_EVB_MAX_NODES];
    uint32_t src_flags[SDD_EVB_MAX_NODES];
    uint64_t present[1];
    uint32_t nev = events_in(n, s->k);
    uint64_t delivery = ++bu->delivered;
    bool check = n->o.verify != SDD_EVB_VERIFY_NONE;
    bool payload = n->o.verify == SDD_EVB_VERIFY_FULL;
    for (uint32_t i = 0; i < nev; i++) {
        uint64_t id = s->k * n->o.bulk + i;
        struct sdd_evb_event ev = {.event_id = id,
                                   .nsources = n->nru,
                                   .present = present,
                                   .frags = frags,
                                   .src_flags = src_flags,
                                   .batch_end = i + 1 == nev,
                                   .delivery = delivery};
        present[0] = 0;
        for (uint32_t r = 0; r < n->nru; r++) {
            frags[r] = NULL;
            src_flags[r] = 0;
            const uint8_t *b = s->bulk[r];
            if (b == NULL) {
                src_flags[r] = SDD_EVB_EV_MISSING |
                               (bu->ru_state[r] == RU_DEAD ? SDD_EVB_EV_SRC_LOST
                                                           : (timed_out ? SDD_EVB_EV_TIMEOUT : 0));
                n->st.frags_missing++;
            } else {
                const struct sdd_evb_frag_meta *m =
                    (const void *)(b + sizeof(struct sdd_evb_bulk_hdr));
                bool ok = evb_bulk_entry_ok(b, i, id);
                if (ok && check) {
                    sdd_evb_frag_check c = sdd_evb_frag_validate(b + m[i].offset, m[i].length,
                                                                 (uint16_t)r, id, payload);
                    if (c != SDD_EVB_FRAG_OK) {
                        ok = false;
                        if (sdd_log_enabled(SDD_LOG_DEBUG, LOG)) {
                            SDD_DEBUG(LOG, "event %llu source %u: %s", (unsigned long long)id, r,
                                      sdd_evb_frag_check_name(c));
                        }
                    }
                }
                const struct sdd_evb_frag_hdr *fh = (const void *)(b + m[i].offset);
                if (ok && (fh->flags & SDD_EVB_FRAG_EMPTY)) {
                    src_flags[r] = SDD_EVB_EV_MISSING; /* its readout had nothing */
                    n->st.frags_missing++;
                } else if (ok) {
                    frags[r] = (const void *)(b + m[i].offset);
                    present[0] |= 1ull << r;
                    ev.npresent++;
                    ev.bytes += (uint32_t)(sizeof(struct sdd_evb_frag_hdr) + frags[r]->length);
                    n->st.frags_ok++;
                } else {
                    src_flags[r] = SDD_EVB_EV_CORRUPT;
                    n->st.frags_corrupt++;
                }
            }
            ev.flags |= src_flags[r];
        }
        if (s->resent) {
            ev.flags |= SDD_EVB_EV_RESENT;
        }
        n->st.events_built++;
        n->st.bytes_built += ev.bytes;
        if ((ev.flags & ~(uint32_t)SDD_EVB_EV_RESENT) == 0) {
            n->st.events_complete++;
        }
        if (ev.flags & SDD_EVB_EV_MISSING) {
            n->st.events_incomplete++;
        }
        if (ev.flags & SDD_EVB_EV_CORRUPT) {
            n->st.events_corrupt++;
        }
        if (n->o.on_event) {
            n->o.on_event(&ev, n->o.on_event_arg);
        }
    }
    bu->built[s->k / 64] |= 1ull << (s->k % 64);
    bool remote = false;
    for (uint32_t r = 0; r < n->nru; r++) {
        if (s->bulk[r] != NULL) {
            release(n, r, s->k, s->slot[r], false);
            remote |= s->slot[r] != UINT32_MAX;
        }
    }
    bu->acks_staged += remote; /* they leave at the next flush: evb_bu_acks_left */
    bu->acked = delivery;
    bu->events_acked = n->st.events_built;
    s->used = false;
    bu->nused--;
}

static bool consumer_has_room(struct sdd_evb_node *n, const struct bu_set *s)
{
    return n->o.has_room == NULL || n->o.has_room(events_in(n, s->k), n->o.on_event_arg);
}

/* Build s now if every live remote RU's lease holds and no bulk is in doubt (evb_bu_acks_left),
 * else hold it for evb_bu_step. The clock is read here, not taken from the loop turn: the check
 * must be as near the hand-off as can be (docs/evb.md, the fencing window). */
static void deliver(struct sdd_evb_node *n, struct bu_set *s, bool timed_out)
{
    if (s->held) {
        return;
    }
    bool lease = n->bu->doubt_ns == 0 && evb_lease_ok(n, sdd_now_ns());
    if (!lease || !consumer_has_room(n, s)) {
        s->held = true;
        s->timed_out = timed_out;
        n->bu->nheld++;
        n->st.lease_waits += !lease;
        n->st.room_waits += lease;
        return;
    }
    build(n, s, timed_out);
}

static bool set_ready(const struct sdd_evb_node *n, const struct bu_set *s)
{
    for (uint32_t r = 0; r < n->nru; r++) {
        if (s->bulk[r] == NULL && n->bu->ru_state[r] == RU_LIVE) {
            return false;
        }
    }
    return true;
}

static void bulk_arrived_(struct sdd_evb_node *n, uint32_t ru, const uint8_t *p, size_t avail,
                          uint32_t slot);

/* Wall time spent building counts as BU work, also when the local RU's step called it. */
static void bulk_arrived(struct sdd_evb_node *n, uint32_t ru, const uint8_t *p, size_t avail,
                         uint32_t slot)
{
    uint64_t t0 = sdd_now_ns();
    bulk_arrived_(n, ru, p, avail, slot);
    uint64_t dt = sdd_now_ns() - t0;
    n->st.bu_busy_ns += dt;
    if (slot == UINT32_MAX) {
        n->bu->local_ns += dt;
    }
}

static void bulk_arrived_(struct sdd_evb_node *n, uint32_t ru, const uint8_t *p, size_t avail,
                          uint32_t slot)
{
    struct evb_bu *bu = n->bu;
    const struct sdd_evb_bulk_hdr *h = (const void *)p;
    uint64_t k = avail >= sizeof(*h) ? h->bulk_id : UINT64_MAX;
    enum evb_bulk_verdict v = evb_bulk_check(p, avail, ru, n->o.bulk, n->o.events);
    if (v != EVB_BULK_OK) {
        bool say = evb_count_bad(n);
        if (say && v == EVB_BULK_PAST_END) {
            SDD_WARN(LOG,
                     "BU %u: dropped bulk %llu from RU %u, past the end this node agreed (%llu "
                     "bulks): that RU did not agree, the run split (%llu bulks dropped so far)",
                     bu->b, (unsigned long long)k, ru, (unsigned long long)n->nbulks,
                     (unsigned long long)n->st.bulks_bad);
        } else if (say) {
            SDD_WARN(LOG,
                     "BU %u: dropped a malformed bulk from RU %u (slot %u; %llu dropped so far)",
                     bu->b, ru, slot, (unsigned long long)n->st.bulks_bad);
        }
        release(n, ru, k, slot, true);
        return;
    }
    n->st.bytes_rx += h->bytes;
    if (bu->built[k / 64] & (1ull << (k % 64))) {
        n->st.bulks_dup++;
        release(n, ru, k, slot, true);
        return;
    }
    struct bu_set *s = NULL, *fresh = NULL;
    for (uint32_t i = 0; i < bu->nsets; i++) {
        if (bu->sets[i].used && bu->sets[i].k == k) {
            s = &bu->sets[i];
            break;
        }
        if (!bu->sets[i].used && fresh == NULL) {
            fresh = &bu->sets[i];
        }
    }
    if (s == NULL) {
        if (fresh == NULL) {
            if (evb_count_bad(n)) {
                SDD_ERROR(LOG, "BU %u: no room for bulk %llu (more bulks than credits)", bu->b,
                          (unsigned long long)k);
            }
            release(n, ru, k, slot, true);
            return;
        }
        s = fresh;
        memset(s, 0, sizeof(*s));
        s->used = true;
        s->k = k;
        s->first_ns = sdd_now_ns();
        bu->nused++;
    }
    if (s->bulk[ru] != NULL) {
        n->st.bulks_dup++;
        release(n, ru, k, slot, true);
        return;
    }
    s->bulk[ru] = p;
    s->slot[ru] = slot;
    if (h->flags & SDD_EVB_BULK_RESENT) {
        s->resent = true;
    }
    if (set_ready(n, s)) {
        deliver(n, s, false);
    }
}

void evb_bu_on_write(struct sdd_evb_node *n, uint32_t ru, uint32_t slot, size_t len)
{
    uint32_t C = n->o.credits;
    if (ru >= n->nru || slot >= 2 * C || n->ru_node[ru] == n->self) {
        if (evb_count_bad(n)) {
            SDD_WARN(LOG, "BU %u: write with bad immediate data (ru %u slot %u)", n->bu->b, ru,
                     slot);
        }
        return;
    }
    n->st.bulks_rx++;
    size_t avail = len != 0 && len <= n->slot_size ? len : n->slot_size;
    bulk_arrived(n, ru, evb_bu_slot(n, ru, slot), avail, slot);
}

uint8_t *evb_bu_slot(const struct sdd_evb_node *n, uint32_t ru, uint32_t slot)
{
    return n->bu->mem + ((size_t)ru * 2 * n->o.credits + slot) * n->slot_size;
}

void evb_bu_on_local(struct sdd_evb_node *n, uint32_t ru, const void *bulk, size_t len)
{
    n->st.bulks_rx_local++;
    bulk_arrived(n, ru, bulk, len, UINT32_MAX);
}

void evb_bu_on_built_elsewhere(struct sdd_evb_node *n, uint64_t k)
{
    struct evb_bu *bu = n->bu;
    if (bu == NULL || k >= n->nbulks || (bu->built[k / 64] & (1ull << (k % 64)))) {
        return;
    }
    bu->built[k / 64] |= 1ull << (k % 64); /* re-sends still to come are duplicates */
    for (uint32_t i = 0; i < bu->nsets; i++) {
        struct bu_set *s = &bu->sets[i];
        if (!s->used || s->k != k) {
            continue;
        }
        for (uint32_t r = 0; r < n->nru; r++) {
            if (s->bulk[r] != NULL) {
                n->st.bulks_dup++;
                release(n, r, k, s->slot[r], true);
            }
        }
        bu->nheld -= s->held;
        s->used = false;
        bu->nused--;
    }
}

void evb_bu_fence(struct sdd_evb_node *n)
{
    struct evb_bu *bu = n->bu;
    /* Nothing more is delivered: the events past the mark stay uncommitted for good. */
    n->st.events_uncommitted = n->st.events_built - bu->events_committed;
    for (uint32_t i = 0; i < bu->nsets; i++) {
        struct bu_set *s = &bu->sets[i];
        for (uint32_t r = 0; s->used && r < n->nru; r++) {
            n->st.bulks_fenced += s->bulk[r] != NULL;
        }
        s->used = false;
    }
    bu->nused = 0;
    bu->nheld = 0;
}

void evb_bu_on_ru_gone(struct sdd_evb_node *n, uint32_t ru, bool dead)
{
    struct evb_bu *bu = n->bu;
    if (ru >= n->nru || bu->ru_state[ru] != RU_LIVE) {
        return;
    }
    bu->ru_state[ru] = dead ? RU_DEAD : RU_DONE;
    if (dead) {
        n->st.ru_failures++;
        SDD_WARN(LOG, "BU %u: RU %u lost; its events leave flagged incomplete", bu->b, ru);
    }
    for (uint32_t i = 0; i < bu->nsets; i++) {
        if (bu->sets[i].used && set_ready(n, &bu->sets[i])) {
            deliver(n, &bu->sets[i], false);
        }
    }
}

/* Called after a flush: moves the committed mark. A bulk's events are committed once its
 * acknowledgements were posted and every lease held at a moment after the post (deliver
 * checked them before the hand-off). A lease that holds now holds past the post: no RU can
 * give this BU up before dead_ms / 2 from now (lease.c), and what was posted to it is already
 * in its shm region or on its way in a kernel socket, read well before then. If one has
 * lapsed, this process stalled (or its RUs fell silent) while it delivered or posted — over
 * shm a post spins on the RU's region lock while that RU's progress holds it, and a SIGSTOP
 * can land there — and an RU may have given the bulk to another BU: the acknowledgements may
 * have come too late for it. (Over tcp an acknowledgement can still wait in libfabric's own
 * queue when the socket is full: a stall then is not seen.) Such bulks are in doubt
 * (counted, said) until every live remote RU echoes a heartbeat sent after them (it read them
 * first, and had not given this BU up: it does not answer one it gave up), or until this BU
 * fences (they never commit: the node's consumers drop them). */
void evb_bu_acks_left(struct sdd_evb_node *n)
{
    struct evb_bu *bu = n->bu;
    if (bu == NULL || bu->committed == bu->acked || !evb_ctl_idle(n)) {
        return; /* nothing new, or some acknowledgements still wait to be posted */
    }
    uint64_t now = sdd_now_ns();
    bool lapsed = bu->acks_staged > 0 && !evb_lease_ok(n, now);
    if (bu->doubt_ns == 0 && lapsed) {
        bu->doubt_ns = now;
        n->st.bulks_in_doubt += bu->acks_staged;
        SDD_WARN(LOG,
                 "BU %u: %llu bulk(s) delivered across a stall (in doubt): committed only "
                 "once the RUs confirm them; a consumer drops them if this BU fences",
                 bu->b, (unsigned long long)bu->acks_staged);
        /* An RU that read those acknowledgements before giving this BU up has them, heard
         * from it just now and will not give it up: ask for its echo at once, so the mark
         * moves before anything else can happen. One that gave it up does not answer. */
        evb_lease_ask_now(n, now);
        evb_ctl_flush(n);
    }
    bu->acks_staged = 0;
    if (bu->doubt_ns != 0 && !evb_lease_echoed_since(n, bu->doubt_ns, now)) {
        return;
    }
    bu->doubt_ns = 0;
    bu->committed = bu->acked;
    bu->events_committed = bu->events_acked;
}

uint64_t sdd_evb_node_committed(const sdd_evb_node *n)
{
    if (n->bu == NULL) {
        return 0;
    }
    if (n->st.end_ns != 0 && !n->fenced) {
        return n->bu->delivered; /* every RU finished: none will re-send anything */
    }
    return n->bu->committed;
}

/* A set that misses a live remote RU not heard for a heartbeat period keeps waiting past its
 * timeout: that RU may be cut off from this node, and once it gives this BU up it re-sends the
 * bulk to another, which would build the same events again from the other fragments (each
 * event split in two, both written). It is built once the RU is heard again, or, once the RU
 * is declared dead, as evb_bu_on_ru_gone decides (flagged source lost, or fenced). Taking a
 * late heartbeat for silence only delays the set until the next one. Left open: a set that
 * timed out less than a heartbeat period after a cut began (docs/evb.md, "Failures"). */
static bool waits_on_silent_ru(struct sdd_evb_node *n, struct bu_set *s, uint64_t now)
{
    uint64_t quiet = (uint64_t)n->o.hb_ms * SDD_NS_PER_MS;
    for (uint32_t r = 0; r < n->nru; r++) {
        uint32_t node = n->ru_node[r];
        uint64_t heard = n->peers[node].last_rx_ns;
        if (s->bulk[r] == NULL && n->bu->ru_state[r] == RU_LIVE && node != n->self &&
            now - heard > quiet) {
            if (!s->said_silent) {
                SDD_WARN(LOG,
                         "BU %u: bulk %llu waits past its timeout for RU %u, silent for %llu ms "
                         "(cut off, or dead: it is built when the RU is heard or declared dead)",
                         n->bu->b, (unsigned long long)s->k, r,
                         (unsigned long long)((now - heard) / SDD_NS_PER_MS));
                s->said_silent = true;
            }
            return true;
        }
    }
    return false;
}

int evb_bu_step(struct sdd_evb_node *n, uint64_t now)
{
    struct evb_bu *bu = n->bu;
    int work = 0;
    if (bu->nheld > 0 && bu->doubt_ns == 0 && evb_lease_ok(n, now)) {
        for (uint32_t i = 0; i < bu->nsets && bu->nheld > 0; i++) {
            struct bu_set *s = &bu->sets[i];
            if (s->used && s->held) {
                if (!consumer_has_room(n, s)) {
                    break; /* the rest wait with it */
                }
                s->held = false;
                bu->nheld--;
                build(n, s, s->timed_out);
                work++;
            }
        }
    }
    if (bu->nused == 0 || now < bu->next_scan_ns) {
        return work;
    }
    bu->next_scan_ns = now + 10 * SDD_NS_PER_MS;
    uint64_t limit = (uint64_t)n->o.event_timeout_ms * SDD_NS_PER_MS;
    for (uint32_t i = 0; i < bu->nsets; i++) {
        struct bu_set *s = &bu->sets[i];
        if (s->used && !s->held && now - s->first_ns > limit && !waits_on_silent_ru(n, s, now)) {
            SDD_WARN(LOG, "BU %u: bulk %llu timed out incomplete", bu->b, (unsigned long long)s->k);
            deliver(n, s, true);
            work++;
        }
    }
    return work;
}

uint64_t evb_bu_take_local_ns(struct sdd_evb_node *n)
{
    uint64_t v = n->bu ? n->bu->local_ns : 0;
    if (n->bu) {
        n->bu->local_ns = 0;
    }
    return v;
}

bool evb_bu_finished(const struct sdd_evb_node *n)
{
    const struct evb_bu *bu = n->bu;
    if (bu == NULL) {
        return true;
    }
    for (uint32_t r = 0; r < n->nru; r++) {
        if (bu->ru_state[r] == RU_LIVE) {
            return false;
        }
    }
    return bu->nused == 0;
}
