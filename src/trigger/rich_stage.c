/* RICH processing stage: one thread takes receive-buffer refs off an input ring, runs the event
 * finder, merge and ring finder on each (sdd_rich_proc_run, or sdd_rich_proc_run_stream over a
 * carry of its own when the buffers are one stream) and passes the ref on. The results live in
 * the stage's proc, so only one buffer is out with the consumer at a time: the stage waits for
 * sdd_rich_stage_release() before it overwrites them. Lock-free handoff, no allocation after
 * start. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "sddaq/clock.h"
#include "sddaq/cpu.h"
#include "sddaq/log.h"
#include "trigger/rich_impl.h"

#define SPIN_LIMIT    256
#define IDLE_SLEEP_NS (20 * SDD_NS_PER_US)

struct sdd_rich_stage {
    sdd_rich_proc *proc;
    sdd_rich_carry *carry; /* the buffers are one stream (opts.stream); else NULL */
    uint64_t seq;          /* the next buffer's number in the stream */
    sdd_spsc *in, *out;
    int cpu;
    pthread_t thread;
    atomic_int started; /* 0 starting, 1 running, 2 failed */
    _Alignas(64) atomic_bool stop;
    _Alignas(64) atomic_bool out_held; /* a result is with the consumer */
    _Alignas(64) uint64_t buffers;     /* stage thread only, read after the join */
    sdd_hist latency;
};

static void backoff(unsigned *spins)
{
    if (*spins < SPIN_LIMIT) {
        (*spins)++;
        sdd_cpu_relax();
    } else {
        sdd_sleep_ns(IDLE_SLEEP_NS);
    }
}

/* One ref's buffer: alone, in its turn in the stream, or the stream's end (no data). */
static sdd_err process(sdd_rich_stage *st, sdd_rich_buffer_ref *ref)
{
    if (st->carry == NULL) {
        return sdd_rich_proc_run(st->proc, ref->data, ref->len, &ref->out);
    }
    uint64_t seq = st->seq++;
    if (ref->data == NULL && ref->len == 0) {
        return sdd_rich_proc_flush(st->proc, st->carry, seq, &ref->out);
    }
    return sdd_rich_proc_run_stream(st->proc, ref->data, ref->len, st->carry, seq, &ref->out);
}

static void *stage_main(void *arg)
{
    sdd_rich_stage *st = arg;
    if (st->cpu >= 0 && sdd_cpu_pin_self(st->cpu) != SDD_OK) {
        atomic_store_explicit(&st->started, 2, memory_order_release);
        return NULL;
    }
    atomic_store_explicit(&st->started, 1, memory_order_release);
    unsigned spins = 0;
    for (;;) {
        void *p = NULL;
        if (sdd_spsc_dequeue(st->in, &p) != SDD_OK) {
            /* Pairs with the release store in stop(): refs enqueued before it are visible. */
            if (atomic_load_explicit(&st->stop, memory_order_acquire) &&
                sdd_spsc_dequeue(st->in, &p) != SDD_OK) {
                break;
            }
            if (p == NULL) {
                backoff(&spins);
                continue;
            }
        }
        spins = 0;
        uint64_t t0 = sdd_now_ns();
        /* Pairs with the release store in sdd_rich_stage_release(): the consumer is done with
         * the previous results before they are overwritten. */
        while (atomic_load_explicit(&st->out_held, memory_order_acquire)) {
            backoff(&spins);
        }
        spins = 0;
        sdd_rich_buffer_ref *ref = p;
        ref->status = process(st, ref);
        atomic_store_explicit(&st->out_held, true, memory_order_relaxed);
        ref->latency_ns = sdd_now_ns() - t0;
        sdd_hist_record(&st->latency, ref->latency_ns);
        st->buffers++;
        while (sdd_spsc_enqueue(st->out, ref) != SDD_OK) {
            backoff(&spins);
        }
        spins = 0;
    }
    return NULL;
}

static void stage_free(sdd_rich_stage *st)
{
    sdd_rich_carry_destroy(st->carry);
    sdd_rich_proc_destroy(st->proc);
    free(st);
}

sdd_err sdd_rich_stage_start(const sdd_rich_proc_opts *o, sdd_spsc *in, sdd_spsc *out, int cpu,
                             sdd_rich_stage **out_stage)
{
    if (in == NULL || out == NULL || out_stage == NULL) {
        return SDD_EINVAL;
    }
    sdd_rich_stage *st = aligned_alloc(64, (sizeof(*st) + 63) & ~(size_t)63);
    if (st == NULL) {
        return SDD_ENOMEM;
    }
    memset(st, 0, sizeof(*st));
    sdd_err err = sdd_rich_proc_create(o, &st->proc);
    if (err == SDD_OK && o->stream) {
        err = sdd_rich_carry_create(o->max_bytes, &st->carry);
    }
    if (err != SDD_OK) {
        sdd_rich_proc_destroy(st->proc);
        free(st);
        return err;
    }
    st->in = in;
    st->out = out;
    st->cpu = cpu;
    sdd_hist_init(&st->latency);
    atomic_init(&st->started, 0);
    atomic_init(&st->stop, false);
    atomic_init(&st->out_held, false);
    if (pthread_create(&st->thread, NULL, stage_main, st) != 0) {
        stage_free(st);
        return SDD_EOS;
    }
    int s;
    while ((s = atomic_load_explicit(&st->started, memory_order_acquire)) == 0) {
        sdd_sleep_ns(10 * SDD_NS_PER_US);
    }
    if (s == 2) {
        pthread_join(st->thread, NULL);
        stage_free(st);
        SDD_ERROR(RICH_LOG, "stage: cannot pin to cpu %d", cpu);
        return SDD_EOS;
    }
    *out_stage = st;
    return SDD_OK;
}

void sdd_rich_stage_release(sdd_rich_stage *st, sdd_rich_buffer_ref *ref)
{
    (void)ref;
    atomic_store_explicit(&st->out_held, false, memory_order_release);
}

void sdd_rich_stage_stop(sdd_rich_stage *st, sdd_hist *latency, uint64_t *buffers)
{
    if (st == NULL) {
        return;
    }
    atomic_store_explicit(&st->stop, true, memory_order_release);
    pthread_join(st->thread, NULL);
    if (latency != NULL) {
        *latency = st->latency;
    }
    if (buffers != NULL) {
        *buffers = st->buffers;
    }
    uint32_t held = st->carry != NULL ? sdd_rich_carry_events(st->carry) : 0;
    if (held > 0) {
        SDD_WARN(RICH_LOG,
                 "stage stopped with %u board events held for a stream end that was "
                 "never queued: not merged",
                 held);
    }
    stage_free(st);
}
