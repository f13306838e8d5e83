/* How built events move between the stages of a node: the view a builder unit hands on, the
 * pooled copy made for a stage with threads of its own, inline stages run in the producer's
 * thread, bounded rings with backpressure, counters batched per thread, and the end of a
 * stage's input. */
#include <stdlib.h>
#include <string.h>

#include "run_internal.h"
#include "sddaq/clock.h"


void run_lat_init(struct run_lat *l)
{
    sdd_hist_init(&l->own);
    sdd_hist_init(&l->shared);
    l->next_ns = 0;
    pthread_mutex_init(&l->lock, NULL);
}

void run_lat_flush(struct run_lat *l)
{
    pthread_mutex_lock(&l->lock);
    l->shared = l->own;
    pthread_mutex_unlock(&l->lock);
}

void run_lat_record(struct run_lat *l, uint64_t ns, uint64_t now)
{
    sdd_hist_record(&l->own, ns);
    if (now >= l->next_ns) {
        run_lat_flush(l);
        l->next_ns = now + 200000000ull;
    }
}

void run_item_release(struct sdd_run *r, struct run_item *it)
{
    (void)r; /* every item knows its pool */
    if (it->pooled && atomic_fetch_sub(&it->refs, 1) == 1) {
        sdd_pool_put(it->pool, it);
    }
}

/* ---- batched counters ---------------------------------------------------------------------- */

static __thread struct run_counts *tls_counts;
static __thread struct sdd_run *tls_run;

sdd_err run_counts_attach(struct sdd_run *r)
{
    tls_counts = calloc(r->n, sizeof(*tls_counts));
    tls_run = r;
    return tls_counts != NULL ? SDD_OK : SDD_ENOMEM;
}

struct run_counts *run_counts(const struct run_stage *s)
{
    return &tls_counts[s->idx];
}

void run_counts_flush(void)
{
    struct sdd_run *r = tls_run;
    for (size_t i = 0; tls_counts != NULL && i < r->n; i++) {
        struct run_counts *c = &tls_counts[i];
        if (c->events_in == 0 && c->events_out == 0 && c->rejected == 0) {
            continue;
        }
        struct run_stage *s = &r->st[i];
        sdd_metric_add(s->m.events_in, c->events_in);
        sdd_metric_add(s->m.bytes_in, c->bytes_in);
        sdd_metric_add(s->m.events_out, c->events_out);
        sdd_metric_add(s->m.bytes_out, c->bytes_out);
        atomic_fetch_add(&s->kept, c->kept);
        atomic_fetch_add(&s->rejected, c->rejected);
        memset(c, 0, sizeof(*c));
    }
}

void run_counts_detach(void)
{
    run_counts_flush();
    free(tls_counts);
    tls_counts = NULL;
}

/* ---- hand-over ------------------------------------------------------------------------------ */

static __thread struct run_stash *tls_stash; /* a builder unit's thread: run_stash_init */

uint32_t run_bufs_per_event(const struct run_stage *s)
{
    uint32_t n = 0;
    bool queued = false;
    for (size_t i = 0; i < s->nout; i++) {
        if (s->out[i]->inline_run) {
            n += run_bufs_per_event(s->out[i]);
        } else {
            queued = true; /* run_emit copies once for all of them */
        }
    }
    return n + queued;
}

sdd_err run_stash_init(struct run_stash *st, uint32_t cap)
{
    st->n = 0;
    st->cap = cap;
    st->buf = cap > 0 ? malloc(cap * sizeof(*st->buf)) : NULL;
    if (cap > 0 && st->buf == NULL) {
        st->cap = 0;
        return SDD_ENOMEM;
    }
    tls_stash = st;
    return SDD_OK;
}

bool run_stash_fill(struct sdd_run *r, struct run_stash *st, uint32_t want)
{
    want = want < st->cap ? want : st->cap;
    if (st->n < want) {
        st->n += sdd_pool_get_burst(r->items, st->buf + st->n, want - st->n);
    }
    return st->n >= want;
}

void run_stash_free(struct sdd_run *r, struct run_stash *st)
{
    if (st->n > 0) {
        sdd_pool_put_burst(r->items, st->buf, st->n);
    }
    free(st->buf);
    st->buf = NULL;
    st->n = st->cap = 0;
    if (tls_stash == st) {
        tls_stash = NULL;
    }
}

static struct run_item *item_from(struct sdd_run *r, sdd_pool *pool)
{
    struct run_item *it;
    /* No free buffer: the stages behind are slower than their input. Wait; a BU returns no
     * credits meanwhile, which slows the RUs down (a receiver fills its ring and counts). A
     * BU took its delivery's buffers before it began (run_stash_fill), and never waits here. */
    while ((it = pool == r->items && tls_stash != NULL && tls_stash->n > 0
                     ? tls_stash->buf[--tls_stash->n]
                     : sdd_pool_get(pool)) == NULL) {
        if (atomic_load(&r->phase) == RUN_PHASE_ABORT) {
            return NULL;
        }
        sdd_sleep_ns(SDD_NS_PER_US * 20);
    }
    memset(it, 0, sizeof(*it));
    it->pooled = true;
    it->pool = pool;
    atomic_store(&it->kept, 1);
    atomic_store(&it->refs, 1);
    return it;
}

struct run_item *run_item_new(struct sdd_run *r)
{
    return item_from(r, r->items);
}

struct run_item *run_record_new(struct sdd_run *r)
{
    return item_from(r, r->records); /* made with the rich stage that calls this */
}

/* Queue it on the stage's ring and wake a sleeping consumer. A full ring holds the producer
 * back (backpressure) until a consumer takes something and wakes it; the timeout only bounds
 * a missed wake-up. */
static void enqueue(struct run_stage *to, void *it)
{
    for (unsigned tries = 0; sdd_mpmc_enqueue(to->in, it) != SDD_OK; tries++) {
        if (tries == 0) {
            sdd_sleep_ns(SDD_NS_PER_US * 20); /* usually room by then; no wake-up asked */
            continue;
        }
        uint32_t seq = sdd_notify_prepare(&to->room_note);
        if (sdd_mpmc_enqueue(to->in, it) == SDD_OK) {
            sdd_notify_cancel(&to->room_note);
            break;
        }
        sdd_notify_wait(&to->room_note, seq, SDD_NS_PER_US * 200);
    }
    sdd_notify_wake(&to->in_note);
}

/* A pooled copy of a view, with refs references; NULL when the run is aborted meanwhile. */
static struct run_item *materialize(struct run_stage *s, const struct run_item *v, uint32_t refs)
{
    struct sdd_run *r = s->run;
    struct run_item *it = run_item_new(r);
    if (it == NULL) {
        return NULL;
    }
    long n = sdd_evb_event_serialize(v->ev, it->data, r->item_bytes);
    if (n < 0) { /* cannot happen with item_bytes sized from the largest fragment */
        sdd_pool_put(r->items, it);
        return NULL;
    }
    it->flags = v->flags;
    it->id = v->id;
    it->built_ns = v->built_ns;
    it->delivery = v->delivery;
    it->commit = v->commit;
    it->bytes = (uint32_t)n;
    atomic_store(&it->ntracks, atomic_load(&v->ntracks));
    atomic_store(&it->kept, atomic_load(&v->kept));
    atomic_store(&it->tflags, atomic_load(&v->tflags));
    it->pooled = true;
    it->ev = NULL;
    atomic_store(&it->refs, refs);
    return it;
}

static void run_inline(struct run_stage *s, struct run_item *it);

void run_emit(struct run_stage *s, struct run_item *it, bool kept)
{
    struct run_stage *queued[RUN_MAX_OUT];
    uint32_t nq = 0;
    for (size_t i = 0; i < s->nout; i++) {
        struct run_stage *to = s->out[i];
        if (!kept && to->cfg->type != SDD_STAGE_FEEDBACK) {
            continue;
        }
        if (to->inline_run) {
            run_inline(to, it);
        } else {
            queued[nq++] = to;
        }
    }
    if (nq == 0) {
        return;
    }
    struct run_item *p = it;
    if (!it->pooled) {
        p = materialize(s, it, nq);
        if (p == NULL) {
            sdd_metric_add(s->m.dropped, nq);
            return;
        }
    } else {
        atomic_fetch_add(&p->refs, nq);
    }
    for (uint32_t i = 0; i < nq; i++) {
        enqueue(queued[i], p);
    }
}

void run_deliver(struct run_stage *to, struct run_item *it)
{
    if (to->inline_run) {
        run_inline(to, it);
        run_item_release(to->run, it);
        return;
    }
    enqueue(to, it); /* the caller's reference goes along */
}

/* A process (none, prescale) or null-writer stage, run in the thread of its producer. */
static void run_inline(struct run_stage *s, struct run_item *it)
{
    struct run_counts *c = run_counts(s);
    c->events_in++;
    c->bytes_in += it->bytes;
    if (s->cfg->type == SDD_STAGE_WRITER) {
        c->events_out++; /* a null writer: counted, not stored */
        c->bytes_out += it->bytes;
        return;
    }
    const struct sdd_cfg_process *pc = &s->cfg->process;
    bool kept = pc->algorithm != SDD_ALGO_PRESCALE || it->id % pc->factor == 0;
    atomic_store_explicit(&it->kept, kept, memory_order_relaxed);
    c->kept += kept;
    c->rejected += !kept;
    if (kept) {
        c->events_out++;
        c->bytes_out += it->bytes;
    }
    run_emit(s, it, kept);
}

void run_stage_finished(struct run_stage *s)
{
    if (atomic_exchange(&s->finished, true)) {
        return;
    }
    for (size_t i = 0; i < s->nout; i++) {
        struct run_stage *to = s->out[i];
        /* An inline stage ends with the last of its producers; a threaded one is told. */
        if (atomic_fetch_sub(&to->producers, 1) == 1) {
            if (to->inline_run) {
                run_stage_finished(to);
            } else {
                sdd_notify_wake_always(&to->in_note);
            }
        }
    }
}

bool run_take(struct run_stage *s, void **item)
{
    if (sdd_mpmc_dequeue(s->in, item) != SDD_OK) {
        return false;
    }
    sdd_notify_wake(&s->room_note); /* a producer held back by a full ring may go on */
    return true;
}

struct run_item *run_next_item(struct run_stage *s)
{
    void *p;
    long sleep_us = 50;
    for (unsigned idle = 0;; idle++) {
        if (run_take(s, &p)) {
            return p;
        }
        if (atomic_load(&s->producers) <= 0) {
            /* Producers are gone; whatever they queued before leaving is visible now. */
            return run_take(s, &p) ? p : NULL;
        }
        if (idle == 64) {
            run_counts_flush(); /* idle: a good moment to publish */
        }
        if (idle == 65) {
            /* A first plain nap: under load the next item comes within it, and asking every
             * producer for a wake-up would cost a futex call and a switch per item (measured:
             * the default chain at 0.55 x). */
            sdd_sleep_ns(SDD_NS_PER_US * sleep_us);
        } else if (idle > 65) {
            /* The ring stayed empty through the nap: a low rate. Sleep until a producer queues
             * something (it wakes us), or the timeout: that only bounds a missed wake-up. */
            uint32_t seq = sdd_notify_prepare(&s->in_note);
            if (run_take(s, &p)) {
                sdd_notify_cancel(&s->in_note);
                return p;
            }
            if (atomic_load(&s->producers) <= 0) {
                sdd_notify_cancel(&s->in_note);
                continue; /* the check above ends it */
            }
            sdd_notify_wait(&s->in_note, seq, SDD_NS_PER_US * sleep_us);
            sleep_us = sleep_us < 1000 ? sleep_us * 2 : 1000;
        }
    }
}
