/* RICH buffer processing, the work of one stage step: event finder over a receive buffer,
 * merge of the boards' events by timestamp, then the ring finder on every merged event. All
 * memory is taken at create for the largest buffer, so a run allocates nothing. With a split,
 * the merged events are shared out in blocks to a team of threads, one finder each; the
 * helpers start on the first blocks while the calling thread still merges the rest. Before
 * that, the first helper indexes the second half of the buffer's packets while the caller
 * indexes the first (whoever comes first takes the second half; the counts are one walk's). Buffers
 * go through slots, one per buffer in flight (opts.inflight): with a GPU, a buffer's rings are
 * found there while the next buffer is found and merged into the next slot. */
#include <stdatomic.h>
#include <stdlib.h>

#include "sddaq/cpu.h"
#include "sddaq/rich_gpu.h"
#include "sddaq/team.h"
#include "trigger/rich_impl.h"

#define SPLIT_MAX   64
#define SPLIT_BLOCK 16 /* events a member takes at a time: small enough to balance the work */

/* One buffer in flight: its merged events and their rings. */
struct proc_slot {
    sdd_rich_batch batch;
    uint8_t *nrings; /* on the CPU; with a GPU they stay in its pinned memory */
    sdd_rich_ring *rings;
    sdd_rich_gpu *gpu; /* NULL unless the rings are found on a GPU */
    uint64_t total;    /* rings found (on the CPU) */
    sdd_err err;       /* from the GPU's submit */
};

struct sdd_rich_proc {
    sdd_rich_proc_opts o;
    sdd_rich_finder *finder; /* finders[0] */
    sdd_rich_finder *finders[SPLIT_MAX];
    sdd_team *team; /* NULL without a split */
    struct proc_slot slots[SDD_RICH_PROC_MAX_INFLIGHT];
    uint64_t started, finished; /* buffer i goes through slots[i % o.inflight] */
    struct proc_slot *cur;      /* the slot being filled */
    const void *buf; /* the buffer being processed, and its length */
    size_t len;
    /* The event finder in two parts: the caller publishes where the buffer is cut (ef_cut,
     * SIZE_MAX until then); the part past it goes to whoever claims it first (ef_claimed),
     * into idx2 and ef2, and ef_done says it is there. */
    _Atomic size_t ef_cut;
    _Atomic bool ef_claimed;
    _Atomic bool ef_done;
    sdd_rich_index idx2;
    sdd_rich_ef_stats ef2;
    _Atomic uint32_t next;      /* the next block to take */
    _Atomic uint32_t merged;    /* events merged so far (the merge publishes them) */
    _Atomic bool merge_done;    /* merged holds them all */
    struct {
        _Alignas(64) uint64_t rings;
    } part[SPLIT_MAX]; /* rings found by each member */
    sdd_rich_carry *carry; /* a stream's buffer: its carry, number, and whether it ends it */
    uint64_t seq;
    bool flush;
    sdd_rich_index idx;
    sdd_rich_index held_idx; /* events to hold back merged at once (the carry is full) */
    uint32_t *held;
    sdd_rich_ef_stats ef;
    sdd_rich_merge_stats merge;
};

void sdd_rich_proc_opts_default(sdd_rich_proc_opts *o)
{
    sdd_rich_find_opts_default(&o->find);
    o->window = 1;
    o->max_bytes = 1u << 20;
    o->max_rings = 8;
    o->split = 1;
    o->gpu = false;
    o->inflight = 1;
    o->stream = false;
}

static sdd_err slot_init(struct proc_slot *sl, const sdd_rich_proc_opts *o, uint32_t cap)
{
    sdd_err err = sdd_rich_batch_init(&sl->batch, cap);
    if (err == SDD_OK && o->gpu) {
        sdd_rich_gpu_opts go;
        sdd_rich_gpu_opts_default(&go);
        go.find = o->find;
        go.max_events = cap;
        go.max_rings = o->max_rings;
        go.times = false; /* nobody reads them here; three CUDA calls a buffer less */
        err = sdd_rich_gpu_create(&go, &sl->gpu);
    } else if (err == SDD_OK) {
        sl->nrings = calloc(cap, 1);
        sl->rings = calloc((size_t)cap * o->max_rings, sizeof(sdd_rich_ring));
        err = sl->nrings && sl->rings ? SDD_OK : SDD_ENOMEM;
    }
    return err;
}

static void slot_fini(struct proc_slot *sl)
{
    sdd_rich_gpu_destroy(sl->gpu);
    sdd_rich_batch_fini(&sl->batch);
    free(sl->nrings);
    free(sl->rings);
}

sdd_err sdd_rich_proc_create(const sdd_rich_proc_opts *o, sdd_rich_proc **out)
{
    if (o == NULL || out == NULL || o->max_bytes == 0 || o->max_bytes > (1u << 30) ||
        o->max_rings == 0 || o->max_rings > 64 || o->split > SPLIT_MAX ||
        o->inflight > SDD_RICH_PROC_MAX_INFLIGHT || (o->gpu && o->split > 1) ||
        (o->inflight > 1 && o->split > 1)) {
        return SDD_EINVAL;
    }
    sdd_rich_proc *p = calloc(1, sizeof(*p));
    if (p == NULL) {
        return SDD_ENOMEM;
    }
    p->o = *o;
    p->o.split = o->split > 0 ? o->split : 1;
    p->o.inflight = o->inflight > 0 ? o->inflight : 1;
    /* An event takes at least its 16-byte header; a stream's buffer adds the events held
     * from the one before (at most as many bytes again). */
    uint32_t cap = 2 * (uint32_t)(o->max_bytes / SDD_RICH_EVT_HEADER + 1);
    sdd_err err = SDD_OK;
    for (uint32_t i = 0; i < p->o.split && err == SDD_OK; i++) {
        err = sdd_rich_finder_create(&o->find, &p->finders[i]);
    }
    p->finder = p->finders[0];
    if (err == SDD_OK && p->o.split > 1) {
        err = sdd_team_create(p->o.split, NULL, &p->team);
    }
    for (uint32_t i = 0; i < p->o.inflight && err == SDD_OK; i++) {
        err = slot_init(&p->slots[i], &p->o, cap);
    }
    p->cur = &p->slots[0];
    if (err == SDD_OK) {
        err = sdd_rich_index_init(&p->idx, cap);
    }
    if (err == SDD_OK) {
        err = sdd_rich_index_init(&p->held_idx, cap);
    }
    if (err == SDD_OK && p->o.split > 1) {
        err = sdd_rich_index_init(&p->idx2, cap);
    }
    if (err == SDD_OK) {
        p->held = calloc(cap, sizeof(uint32_t));
        err = p->held != NULL ? SDD_OK : SDD_ENOMEM;
    }
    if (err != SDD_OK) {
        sdd_rich_proc_destroy(p);
        return err;
    }
    *out = p;
    return SDD_OK;
}

void sdd_rich_proc_destroy(sdd_rich_proc *p)
{
    if (p == NULL) {
        return;
    }
    sdd_team_destroy(p->team);
    for (uint32_t i = 0; i < SDD_RICH_PROC_MAX_INFLIGHT; i++) {
        slot_fini(&p->slots[i]);
    }
    for (uint32_t i = 0; i < SPLIT_MAX; i++) {
        sdd_rich_finder_destroy(p->finders[i]);
    }
    sdd_rich_index_fini(&p->idx);
    sdd_rich_index_fini(&p->held_idx);
    sdd_rich_index_fini(&p->idx2);
    free(p->held);
    free(p);
}

const sdd_rich_finder *sdd_rich_proc_finder(const sdd_rich_proc *p)
{
    return p->finder;
}

/* The ring finder over merged events [first, end); the rings found. */
static uint64_t find_range(sdd_rich_proc *p, sdd_rich_finder *f, uint32_t first, uint32_t end)
{
    uint64_t total = 0;
    for (uint32_t e = first; e < end; e++) {
        const sdd_rich_batch *b = &p->cur->batch;
        sdd_rich_ring *r = p->cur->rings + (size_t)e * p->o.max_rings;
        int k = sdd_rich_find(f, b->hits + b->first[e], b->nhits[e], r, p->o.max_rings);
        p->cur->nrings[e] = (uint8_t)(k > 0 ? k : 0);
        total += p->cur->nrings[e];
    }
    return total;
}

/* The second part of the buffer's events, [cut, len), into idx2 and ef2. */
static void find_second_part(sdd_rich_proc *p, size_t cut)
{
    p->idx2.n = 0;
    p->ef2 = (sdd_rich_ef_stats){0};
    rich_find_events_from(p->buf, cut, p->len, p->finder->tab, &p->idx2, &p->ef2);
    atomic_store_explicit(&p->ef_done, true, memory_order_release);
}

/* The first helper's share of the event finder, if the caller has not taken it. */
static void help_find_events(sdd_rich_proc *p)
{
    size_t cut;
    while ((cut = atomic_load_explicit(&p->ef_cut, memory_order_acquire)) == SIZE_MAX) {
        sdd_cpu_relax();
    }
    if (!atomic_exchange_explicit(&p->ef_claimed, true, memory_order_acq_rel)) {
        find_second_part(p, cut);
    }
}

static void add_ef_stats(sdd_rich_ef_stats *to, const sdd_rich_ef_stats *from)
{
    _Static_assert(sizeof(*to) % sizeof(uint64_t) == 0, "the counts are all uint64_t");
    uint64_t *t = (uint64_t *)to;
    const uint64_t *f = (const uint64_t *)from;
    for (size_t i = 0; i < sizeof(*to) / sizeof(uint64_t); i++) {
        t[i] += f[i];
    }
}

/* sdd_rich_find_events() of the buffer with a helper (p->team, member 1) indexing the packets
 * of its second half: the same index and counts as one walk. The caller takes that half too
 * if the helper has not started on it when the first is done. Neither part can fill its index
 * (an event takes 16 bytes at least, the index holds twice max_bytes / 16), so no walk counts
 * index_full and each part's count_mismatch test is the whole walk's. */
static void find_events_shared(sdd_rich_proc *p, const void *buf, size_t len)
{
    const sdd_rich_pmtab *t = p->finder->tab;
    size_t cut = rich_packet_split(buf, len, t, len / 2);
    atomic_store_explicit(&p->ef_cut, cut, memory_order_release);
    sdd_rich_find_events(buf, cut, t, &p->idx, &p->ef);
    if (!atomic_exchange_explicit(&p->ef_claimed, true, memory_order_acq_rel)) {
        rich_find_events_from(buf, cut, len, t, &p->idx, &p->ef);
        return;
    }
    while (!atomic_load_explicit(&p->ef_done, memory_order_acquire)) {
        sdd_cpu_relax();
    }
    sdd_rich_index *a = &p->idx;
    const sdd_rich_index *b = &p->idx2;
    if (a->n + b->n > a->cap) { /* cannot happen (above); walked again, not overrun */
        rich_find_events_from(buf, cut, len, t, a, &p->ef);
        return;
    }
    memcpy(a->offset + a->n, b->offset, b->n * sizeof(*b->offset));
    memcpy(a->timestamp + a->n, b->timestamp, b->n * sizeof(*b->timestamp));
    memcpy(a->burst + a->n, b->burst, b->n * sizeof(*b->burst));
    memcpy(a->nhits + a->n, b->nhits, b->n);
    memcpy(a->board + a->n, b->board, b->n);
    a->n += b->n;
    add_ef_stats(&p->ef, &p->ef2);
}

/* The buffer's events into p->idx: with a team (only find_share() merges then), shared with
 * its first helper. */
static void find_events(sdd_rich_proc *p, const void *buf, size_t len)
{
    if (p->team != NULL) {
        find_events_shared(p, buf, len);
    } else {
        sdd_rich_find_events(buf, len, p->finder->tab, &p->idx, &p->ef);
    }
}

/* Merge the entries `which` of idx (in the buffer or the carry) at once, after the events
 * already merged: the events to hold back when the carry has no room for them. */
static void merge_now(sdd_rich_proc *p, const struct rich_merge_in *base, const sdd_rich_index *idx,
                      const uint32_t *which, uint32_t n, _Atomic uint32_t *merged)
{
    sdd_rich_index *h = &p->held_idx;
    h->n = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t k = which[i];
        h->offset[h->n] = idx->offset[k];
        h->timestamp[h->n] = idx->timestamp[k];
        h->burst[h->n] = idx->burst[k];
        h->nhits[h->n] = idx->nhits[k];
        h->board[h->n++] = idx->board[k];
    }
    struct rich_merge_in in = *base;
    in.until = UINT64_MAX;
    in.append = true;
    rich_merge_publish(&in, h, &p->cur->batch, &p->merge, merged, NULL, NULL);
}

/* A stream's buffer: its events found at once, then, in its turn, merged after the events the
 * buffer before held back; what the next buffer may still add to is held back in turn. */
static uint32_t merge_stream(sdd_rich_proc *p, const void *buf, size_t len,
                             _Atomic uint32_t *merged)
{
    sdd_rich_carry *c = p->carry;
    find_events(p, buf, len);
    p->cur->batch.n = 0;
    struct rich_merge_in in = {
        .buf = buf, .window = p->o.window, .until = UINT64_MAX, .append = true};
    if (!rich_carry_take(c, p->seq)) {
        p->merge.late++; /* its turn was given up: the events around it are merged already */
        return rich_merge_publish(&in, &p->idx, &p->cur->batch, &p->merge, merged, NULL, NULL);
    }
    in.carry = rich_carry_bytes(c);
    unsigned nboards = sdd_rich_geom_nboards(&p->finder->tab->geom);
    uint64_t until = rich_carry_horizon(c, &p->idx, nboards);
    in.until = p->flush ? UINT64_MAX : until;
    rich_carry_index(c, &p->idx); /* after the buffer's: the merge takes them first */
    uint32_t nheld = 0;
    rich_merge_publish(&in, &p->idx, &p->cur->batch, &p->merge, merged, p->held, &nheld);
    if (nheld > 0 && !rich_carry_keep(c, buf, &p->idx, p->held, nheld)) {
        p->merge.carry_full++;
        merge_now(p, &in, &p->idx, p->held, nheld, merged);
        nheld = 0;
    }
    if (nheld == 0) {
        rich_carry_clear(c);
    }
    p->merge.held += nheld;
    rich_carry_give(c, p->seq);
    return p->cur->batch.n;
}

/* The events of the buffer: found, then merged by timestamp. */
static uint32_t find_and_merge(sdd_rich_proc *p, const void *buf, size_t len,
                               _Atomic uint32_t *merged)
{
    if (p->carry != NULL) {
        uint32_t n = merge_stream(p, buf, len, merged);
        if (merged != NULL) {
            atomic_store_explicit(merged, n, memory_order_release);
        }
        return n;
    }
    find_events(p, buf, len);
    const struct rich_merge_in in = {.buf = buf, .window = p->o.window, .until = UINT64_MAX};
    return rich_merge_publish(&in, &p->idx, &p->cur->batch, &p->merge, merged, NULL, NULL);
}

/* A team member's part: the caller finds and merges the events first; then every member takes
 * blocks of merged events until none is left, waiting for a block the merge has not reached. */
static void find_share(void *arg, unsigned who)
{
    sdd_rich_proc *p = arg;
    if (who == 0) {
        find_and_merge(p, p->buf, p->len, &p->merged);
        atomic_store_explicit(&p->merge_done, true, memory_order_release);
    } else if (who == 1) {
        help_find_events(p);
    }
    uint64_t total = 0;
    for (;;) {
        uint32_t first = atomic_fetch_add_explicit(&p->next, SPLIT_BLOCK, memory_order_relaxed);
        uint32_t end = first + SPLIT_BLOCK, have;
        for (;;) {
            /* done before the count: once the merge is done, the count read is the final one */
            bool all = atomic_load_explicit(&p->merge_done, memory_order_acquire);
            have = atomic_load_explicit(&p->merged, memory_order_acquire);
            if (all || have >= end) {
                break;
            }
            sdd_cpu_relax();
        }
        if (first >= have) {
            break;
        }
        total += find_range(p, p->finders[who], first, end < have ? end : have);
    }
    p->part[who].rings = total;
}

/* Start the buffer in p->cur (its carry, seq and flush set): its events found and merged,
 * their rings found here, or on the GPU (submitted). */
static void start_slot(sdd_rich_proc *p, const void *buf, size_t len)
{
    struct proc_slot *sl = p->cur;
    sl->err = SDD_OK;
    if (sl->gpu != NULL) {
        find_and_merge(p, buf, len, NULL);
        sl->err = sdd_rich_gpu_submit(sl->gpu, &sl->batch);
    } else if (p->team == NULL) {
        uint32_t nev = find_and_merge(p, buf, len, NULL);
        p->part[0].rings = find_range(p, p->finder, 0, nev);
    } else {
        /* published to the helpers by team_run */
        p->buf = buf;
        p->len = len;
        atomic_store_explicit(&p->next, 0, memory_order_relaxed);
        atomic_store_explicit(&p->merged, 0, memory_order_relaxed);
        atomic_store_explicit(&p->merge_done, false, memory_order_relaxed);
        atomic_store_explicit(&p->ef_cut, SIZE_MAX, memory_order_relaxed);
        atomic_store_explicit(&p->ef_claimed, false, memory_order_relaxed);
        atomic_store_explicit(&p->ef_done, false, memory_order_relaxed);
        sdd_team_run(p->team, find_share, p);
    }
    if (sl->gpu == NULL) {
        uint64_t total = 0;
        for (uint32_t i = 0; i < p->o.split; i++) {
            total += p->part[i].rings;
        }
        sl->total = total;
    }
}

static sdd_err start(sdd_rich_proc *p, const void *buf, size_t len, sdd_rich_carry *c, uint64_t seq,
                     bool flush)
{
    if (p->started - p->finished == p->o.inflight) {
        return SDD_EBUSY;
    }
    if (len > p->o.max_bytes || (buf == NULL && len > 0)) {
        if (c != NULL && rich_carry_take(c, seq)) { /* refused, but the stream goes on */
            rich_carry_give(c, seq);
        }
        return SDD_ETOOBIG;
    }
    p->carry = c;
    p->seq = seq;
    p->flush = flush;
    p->cur = &p->slots[p->started % p->o.inflight];
    start_slot(p, buf, len);
    p->started++;
    return SDD_OK;
}

sdd_err sdd_rich_proc_start(sdd_rich_proc *p, const void *buf, size_t len, sdd_rich_carry *c,
                            uint64_t seq)
{
    return start(p, buf, len, c, seq, false);
}

sdd_err sdd_rich_proc_start_flush(sdd_rich_proc *p, sdd_rich_carry *c, uint64_t seq)
{
    return c != NULL ? start(p, NULL, 0, c, seq, true) : SDD_EINVAL;
}

uint32_t sdd_rich_proc_pending(const sdd_rich_proc *p)
{
    return (uint32_t)(p->started - p->finished);
}

sdd_err sdd_rich_proc_finish(sdd_rich_proc *p, sdd_rich_output *out)
{
    if (p->started == p->finished) {
        return SDD_EINVAL;
    }
    struct proc_slot *sl = &p->slots[p->finished++ % p->o.inflight];
    out->events = &sl->batch;
    out->nrings = sl->nrings;
    out->rings = sl->rings;
    out->max_rings = p->o.max_rings;
    out->total_rings = sl->total;
    if (sl->gpu == NULL) {
        return SDD_OK;
    }
    /* with a GPU, the rings stay in its pinned memory until its next submit */
    int64_t total =
        sl->err == SDD_OK ? sdd_rich_gpu_wait(sl->gpu, &out->nrings, &out->rings) : sl->err;
    if (total < 0) {
        out->nrings = NULL;
        out->rings = NULL;
        return (sdd_err)total;
    }
    out->total_rings = (uint64_t)total;
    return SDD_OK;
}

/* A start and a finish, with none waiting. */
static sdd_err run_one(sdd_rich_proc *p, const void *buf, size_t len, sdd_rich_carry *c,
                       uint64_t seq, bool flush, sdd_rich_output *out)
{
    if (p->started != p->finished) {
        return SDD_EBUSY;
    }
    sdd_err err = start(p, buf, len, c, seq, flush);
    return err == SDD_OK ? sdd_rich_proc_finish(p, out) : err;
}

sdd_err sdd_rich_proc_run(sdd_rich_proc *p, const void *buf, size_t len, sdd_rich_output *out)
{
    return run_one(p, buf, len, NULL, 0, false, out);
}

sdd_err sdd_rich_proc_run_stream(sdd_rich_proc *p, const void *buf, size_t len, sdd_rich_carry *c,
                                 uint64_t seq, sdd_rich_output *out)
{
    return c != NULL ? run_one(p, buf, len, c, seq, false, out) : SDD_EINVAL;
}

sdd_err sdd_rich_proc_flush(sdd_rich_proc *p, sdd_rich_carry *c, uint64_t seq, sdd_rich_output *out)
{
    return c != NULL ? run_one(p, NULL, 0, c, seq, true, out) : SDD_EINVAL;
}

void sdd_rich_proc_stats(const sdd_rich_proc *p, sdd_rich_ef_stats *ef, sdd_rich_merge_stats *m)
{
    if (ef != NULL) {
        *ef = p->ef;
    }
    if (m != NULL) {
        *m = p->merge;
    }
}
