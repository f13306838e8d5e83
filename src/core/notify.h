/* A wake-up between a producer and the threads that consume what it publishes (a readout
 * receiver and its consumer, a stage and the next), so that a side with nothing to do sleeps
 * until the other has news instead of polling (which, on a shared CPU, takes time from the
 * side that works). The waker pays a fence and a load when nobody sleeps, and one futex call
 * when someone does. Waiters still sleep with a timeout, which bounds what a missed wake-up
 * could cost. Linux futexes; private to the process. */
#ifndef SDDAQ_CORE_NOTIFY_H
#define SDDAQ_CORE_NOTIFY_H

#include <limits.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

struct sdd_notify {
    _Atomic uint32_t seq;      /* bumped on each wake-up of a sleeper */
    _Atomic uint32_t sleeping; /* waiters that announced they are about to sleep */
};

static inline void sdd_notify_init(struct sdd_notify *n)
{
    atomic_init(&n->seq, 0);
    atomic_init(&n->sleeping, 0);
}

/* Waiter, step 1: announce; then look once more for work (the fence orders the announcement
 * before that look, against the waker's fence between its publication and its check). */
static inline uint32_t sdd_notify_prepare(struct sdd_notify *n)
{
    uint32_t seq = atomic_load_explicit(&n->seq, memory_order_relaxed);
    atomic_fetch_add_explicit(&n->sleeping, 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_seq_cst);
    return seq;
}

/* Waiter, step 2 (after finding no work): sleep until woken or timeout_ns pass. */
static inline void sdd_notify_wait(struct sdd_notify *n, uint32_t seq, uint64_t timeout_ns)
{
    struct timespec ts = {.tv_sec = (time_t)(timeout_ns / 1000000000u),
                          .tv_nsec = (long)(timeout_ns % 1000000000u)};
    (void)syscall(SYS_futex, &n->seq, FUTEX_WAIT_PRIVATE, seq, &ts, NULL, 0);
    atomic_fetch_sub_explicit(&n->sleeping, 1, memory_order_relaxed);
}

/* Waiter: found work after preparing; no sleep. */
static inline void sdd_notify_cancel(struct sdd_notify *n)
{
    atomic_fetch_sub_explicit(&n->sleeping, 1, memory_order_relaxed);
}

/* Waker, after publishing work: wake one waiter if any sleeps or is about to. */
static inline void sdd_notify_wake(struct sdd_notify *n)
{
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&n->sleeping, memory_order_relaxed)) {
        atomic_fetch_add_explicit(&n->seq, 1, memory_order_relaxed);
        (void)syscall(SYS_futex, &n->seq, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
    }
}

/* Waker: wake every waiter unconditionally (stop, end of input). */
static inline void sdd_notify_wake_always(struct sdd_notify *n)
{
    atomic_fetch_add_explicit(&n->seq, 1, memory_order_seq_cst);
    (void)syscall(SYS_futex, &n->seq, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

#endif
