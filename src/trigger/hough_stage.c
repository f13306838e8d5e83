/* Hough processing stage: one thread that takes stub blocks off an input ring, runs the track
 * finder on each and publishes a result on an output ring. Results come from a fixed pool of
 * `depth`, allocated at start; the consumer hands them back through a second SPSC ring (the
 * free list, consumer -> stage), so both directions are lock-free and the data path never
 * allocates. When every result is out with the consumer, or the output ring is full, the stage
 * waits (spins briefly, then sleeps): backpressure reaches the input ring, nothing is dropped. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "sddaq/clock.h"
#include "sddaq/cpu.h"
#include "sddaq/log.h"
#include "sddaq/trigger.h"

#define SPIN_LIMIT    256                  /* empty polls before the stage starts to sleep */
#define IDLE_SLEEP_NS (50 * SDD_NS_PER_US) /* sleep between polls once spinning gave nothing */

enum { STAGE_STARTING = 0, STAGE_RUNNING = 1, STAGE_FAILED = 2 };

struct sdd_hough_stage {
    sdd_hough *finder;
    sdd_spsc *in;
    sdd_spsc *out;
    sdd_spsc *free_list; /* results handed back by the consumer (it produces, we consume) */
    sdd_hough_result *results;
    sdd_hough_track *tracks; /* depth x max_tracks, results[i].tracks points into it */
    sdd_stub *stubs;         /* SDD_HOUGH_MAX_STUBS, the unpacked current block */
    unsigned depth;
    unsigned max_tracks;
    int cpu;
    pthread_t thread;
    atomic_int state; /* STAGE_*, set by the thread once it has pinned itself */
    sdd_err pin_err;
    _Alignas(64) atomic_bool stop;
    /* Written by the stage thread only, read by stop() after the join. */
    _Alignas(64) uint64_t blocks;
    uint64_t rejected;
    uint64_t ntracks;
    sdd_hist latency;
};

/* One step of waiting: spin for a while, then sleep, so an idle stage costs little CPU while a
 * busy one reacts within a few hundred nanoseconds. */
static void backoff(unsigned *spins)
{
    if (*spins < SPIN_LIMIT) {
        (*spins)++;
        sdd_cpu_relax();
    } else {
        sdd_sleep_ns(IDLE_SLEEP_NS);
    }
}

static bool stopping(sdd_hough_stage *st)
{
    /* Pairs with the release store in sdd_hough_stage_stop(): every block the producer
     * enqueued before stopping is visible to the dequeue that follows. */
    return atomic_load_explicit(&st->stop, memory_order_acquire);
}

/* Take the next block, or return false once stop was asked for and the input ring is empty. */
static bool next_block(sdd_hough_stage *st, sdd_hough_block_ref **ref)
{
    unsigned spins = 0;
    for (;;) {
        void *p;
        if (sdd_spsc_dequeue(st->in, &p) == SDD_OK) {
            *ref = p;
            return true;
        }
        if (stopping(st)) {
            /* The flag was seen after an empty poll: poll once more, since the producer may
             * have enqueued its last block between the two loads. */
            if (sdd_spsc_dequeue(st->in, &p) == SDD_OK) {
                *ref = p;
                return true;
            }
            return false;
        }
        backoff(&spins);
    }
}

/* A free result; waits while the consumer holds all of them. */
static sdd_hough_result *take_result(sdd_hough_stage *st)
{
    unsigned spins = 0;
    void *p;
    while (sdd_spsc_dequeue(st->free_list, &p) != SDD_OK) {
        backoff(&spins);
    }
    return p;
}

static void process(sdd_hough_stage *st, const sdd_hough_block_ref *ref, sdd_hough_result *r)
{
    r->input = ref;
    r->sector = 0;
    r->ntracks = 0;
    size_t n = 0;
    uint16_t sector = 0;
    sdd_err err = SDD_EINVAL;
    if (ref != NULL && ref->data != NULL) {
        err = sdd_stub_block_read(ref->data, ref->len, &sector, st->stubs, SDD_HOUGH_MAX_STUBS, &n);
    }
    if (err == SDD_OK) {
        r->sector = sector;
        int found = sdd_hough_find(st->finder, st->stubs, n, r->tracks, st->max_tracks);
        if (found < 0) {
            err = found;
        } else {
            r->ntracks = (uint32_t)found;
        }
    }
    r->status = err;
    st->blocks++;
    if (err != SDD_OK) {
        st->rejected++;
    }
    st->ntracks += r->ntracks;
}

static void *stage_main(void *arg)
{
    sdd_hough_stage *st = arg;
    if (st->cpu >= 0) {
        st->pin_err = sdd_cpu_pin_self(st->cpu);
    }
    /* Pairs with the acquire load in sdd_hough_stage_start(), which then reads pin_err. */
    atomic_store_explicit(&st->state, st->pin_err == SDD_OK ? STAGE_RUNNING : STAGE_FAILED,
                          memory_order_release);
    if (st->pin_err != SDD_OK) {
        return NULL;
    }
    for (;;) {
        /* A result first, then the block: while the consumer holds every result, blocks stay
         * in the input ring and its producer sees the ring fill up. */
        sdd_hough_result *r = take_result(st);
        sdd_hough_block_ref *ref = NULL;
        if (!next_block(st, &ref)) {
            break; /* r stays unused; stop() frees the whole pool */
        }
        uint64_t t0 = sdd_now_ns();
        process(st, ref, r);
        unsigned spins = 0;
        for (;;) {
            uint64_t t1 = sdd_now_ns();
            r->latency_ns = t1 - t0; /* written before the enqueue publishes r */
            if (sdd_spsc_enqueue(st->out, r) == SDD_OK) {
                sdd_hist_record(&st->latency, t1 - t0);
                break;
            }
            backoff(&spins);
        }
    }
    return NULL;
}

static void stage_free(sdd_hough_stage *st)
{
    sdd_spsc_destroy(st->free_list);
    sdd_hough_destroy(st->finder);
    free(st->stubs);
    free(st->tracks);
    free(st->results);
    free(st);
}

sdd_err sdd_hough_stage_start(const sdd_hough_opts *opts, sdd_spsc *in, sdd_spsc *out,
                              unsigned depth, unsigned max_tracks, int cpu,
                              sdd_hough_stage **out_stage)
{
    if (opts == NULL || in == NULL || out == NULL || out_stage == NULL || depth == 0 ||
        depth > SDD_RING_MAX_CAPACITY ||
        (size_t)depth * max_tracks > SIZE_MAX / sizeof(sdd_hough_track)) {
        SDD_ERROR("trigger", "hough stage: bad arguments (depth %u, max_tracks %u)", depth,
                  max_tracks);
        return SDD_EINVAL;
    }
    sdd_hough_stage *st = calloc(1, sizeof(*st));
    if (st == NULL) {
        return SDD_ENOMEM;
    }
    st->in = in;
    st->out = out;
    st->depth = depth;
    st->max_tracks = max_tracks;
    st->cpu = cpu;
    atomic_init(&st->state, STAGE_STARTING);
    atomic_init(&st->stop, false);
    sdd_hist_init(&st->latency);
    sdd_err err = sdd_hough_create(opts, &st->finder);
    if (err != SDD_OK) {
        goto out_free;
    }
    err = sdd_spsc_create(depth, &st->free_list);
    if (err != SDD_OK) {
        goto out_free;
    }
    st->results = calloc(depth, sizeof(*st->results));
    st->stubs = malloc(SDD_HOUGH_MAX_STUBS * sizeof(*st->stubs));
    if (max_tracks > 0) {
        st->tracks = calloc((size_t)depth * max_tracks, sizeof(*st->tracks));
    }
    if (st->results == NULL || st->stubs == NULL || (max_tracks > 0 && st->tracks == NULL)) {
        err = SDD_ENOMEM;
        goto out_free;
    }
    for (unsigned i = 0; i < depth; i++) {
        st->results[i].tracks = max_tracks > 0 ? st->tracks + (size_t)i * max_tracks : NULL;
        /* This thread fills the free list before the stage thread exists; afterwards the
         * consumer is its only producer (pthread_create orders the two). */
        sdd_spsc_enqueue(st->free_list, &st->results[i]);
    }
    int rc = pthread_create(&st->thread, NULL, stage_main, st);
    if (rc != 0) {
        SDD_ERROR("trigger", "hough stage: pthread_create: errno %d", rc);
        err = sdd_err_from_errno(rc);
        goto out_free;
    }
    int state;
    unsigned spins = 0;
    /* Pairs with the release store in stage_main(). */
    while ((state = atomic_load_explicit(&st->state, memory_order_acquire)) == STAGE_STARTING) {
        backoff(&spins);
    }
    if (state == STAGE_FAILED) {
        pthread_join(st->thread, NULL);
        err = st->pin_err;
        goto out_free;
    }
    *out_stage = st;
    return SDD_OK;

out_free:
    stage_free(st);
    return err;
}

void sdd_hough_stage_release(sdd_hough_stage *st, sdd_hough_result *r)
{
    if (st == NULL || r == NULL) {
        return;
    }
    if (r < st->results || r >= st->results + st->depth) {
        SDD_ERROR("trigger", "hough stage: released a result that is not from this stage");
        return;
    }
    /* The free list has room for every result, so a result released once always fits; it
     * only overflows when results are released more often than they were handed out. */
    if (sdd_spsc_enqueue(st->free_list, r) != SDD_OK) {
        SDD_ERROR("trigger", "hough stage: a result was released twice");
    }
}

void sdd_hough_stage_stop(sdd_hough_stage *st, sdd_hough_stage_stats *stats)
{
    if (st == NULL) {
        return;
    }
    /* The thread still turns every queued block into a result, and each needs a free result
     * and room on `out`: a consumer that holds all results while blocks remain must keep
     * draining from another thread until this returns, or the join waits for it. */
    /* Pairs with the acquire load in stopping(). */
    atomic_store_explicit(&st->stop, true, memory_order_release);
    pthread_join(st->thread, NULL);
    if (stats != NULL) {
        stats->blocks = st->blocks;
        stats->rejected = st->rejected;
        stats->tracks = st->ntracks;
        stats->latency = st->latency;
    }
    stage_free(st);
}
