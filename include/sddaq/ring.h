/* Bounded lock-free rings of object pointers (void *) for handing buffer references between
 * threads of one process without copying. Two kinds share one API shape:
 *
 *   sdd_spsc  one producer thread, one consumer thread (DPDK rte_ring SP/SC, Rigtorp's SPSC
 *             queue): each side keeps a private copy of the other side's index and reads the
 *             shared one only when the copy says the ring looks full or empty.
 *   sdd_mpmc  any number of producer and consumer threads (Vyukov's bounded MPMC queue): every
 *             slot carries a sequence number, so a slot claimed by a producer that has not yet
 *             written it is never handed to a consumer.
 *
 * Capacity is a power of two; indices run freely and are reduced with `idx & mask`. Burst calls
 * return how many objects they moved (DPDK "burst" semantics): 0..n, partial results allowed.
 * Rings store the pointer values only; ownership of what they point to passes from the
 * enqueuing thread to the thread that dequeues them. NULL may be stored like any other value.
 * Nothing here blocks, allocates (except create) or makes a system call on the data path. */
#ifndef SDDAQ_RING_H
#define SDDAQ_RING_H

#include <stddef.h>

#include "sddaq/api.h"
#include "sddaq/err.h"

/* Largest capacity a ring can have (after rounding up to a power of two). */
#define SDD_RING_MAX_CAPACITY (1u << 30)

typedef struct sdd_spsc sdd_spsc;
typedef struct sdd_mpmc sdd_mpmc;

/* ---- Single producer, single consumer ------------------------------------------------------ */

/* Create an empty SPSC ring that holds at least `capacity` pointers.
 * capacity: rounded up to the next power of two; all of it is usable.
 * out:      receives the ring on success, untouched on failure.
 * Returns SDD_OK, SDD_EINVAL (capacity 0, > SDD_RING_MAX_CAPACITY, or out NULL) or SDD_ENOMEM.
 * The caller owns the ring and frees it with sdd_spsc_destroy(). Not for the data path. */
SDD_API sdd_err sdd_spsc_create(size_t capacity, sdd_spsc **out);

/* Free a ring; NULL is a no-op. Pointers still queued are dropped (they are not freed). No
 * thread may use the ring during or after this call. */
SDD_API void sdd_spsc_destroy(sdd_spsc *r);

/* Enqueue up to n pointers from objs[0..n-1], in order.
 * Returns how many were enqueued, 0..n: fewer than n when the ring fills (partial allowed);
 * objs[0..ret-1] now belong to the consumer, the rest stay with the caller.
 * Thread safety: only the single producer thread may call this (and sdd_spsc_enqueue), at the
 * same time as the consumer dequeues. Never blocks. */
SDD_API unsigned sdd_spsc_enqueue_burst(sdd_spsc *r, void *const *objs, unsigned n);

/* Dequeue up to n pointers into objs[0..n-1] in FIFO order.
 * Returns how many were dequeued, 0..n (fewer when the ring runs empty); objs[ret..n-1] are
 * not written. Thread safety: only the single consumer thread may call this (and
 * sdd_spsc_dequeue), concurrently with the producer. Never blocks. */
SDD_API unsigned sdd_spsc_dequeue_burst(sdd_spsc *r, void **objs, unsigned n);

/* Number of pointers in the ring. Exact when called by the producer or consumer with the other
 * side idle; otherwise a snapshot that may be stale by the time it returns (always within
 * 0..capacity). Any thread; never blocks. */
SDD_API unsigned sdd_spsc_count(const sdd_spsc *r);

/* The ring's capacity (a power of two). Any thread. */
SDD_API unsigned sdd_spsc_capacity(const sdd_spsc *r);

/* Enqueue one pointer. Returns SDD_OK, or SDD_EAGAIN when the ring is full (obj stays with the
 * caller). Producer thread only; never blocks. */
static inline sdd_err sdd_spsc_enqueue(sdd_spsc *r, void *obj)
{
    return sdd_spsc_enqueue_burst(r, &obj, 1) == 1 ? SDD_OK : SDD_EAGAIN;
}

/* Dequeue one pointer into *obj. Returns SDD_OK, or SDD_EAGAIN when the ring is empty (*obj is
 * not written). Consumer thread only; never blocks. */
static inline sdd_err sdd_spsc_dequeue(sdd_spsc *r, void **obj)
{
    void *o;
    if (sdd_spsc_dequeue_burst(r, &o, 1) != 1) {
        return SDD_EAGAIN;
    }
    *obj = o;
    return SDD_OK;
}

/* ---- Multiple producers, multiple consumers ------------------------------------------------ */

/* Create an empty MPMC ring that holds at least `capacity` pointers.
 * capacity: rounded up to the next power of two and to at least 2 (the per-slot sequence
 *           scheme cannot tell "full" from "free" with a single slot); all of it is usable.
 * out:      receives the ring on success, untouched on failure.
 * Returns SDD_OK, SDD_EINVAL (capacity 0, > SDD_RING_MAX_CAPACITY, or out NULL) or SDD_ENOMEM.
 * The caller owns the ring and frees it with sdd_mpmc_destroy(). Not for the data path. */
SDD_API sdd_err sdd_mpmc_create(size_t capacity, sdd_mpmc **out);

/* Free a ring; NULL is a no-op. Pointers still queued are dropped. No thread may use the ring
 * during or after this call. */
SDD_API void sdd_mpmc_destroy(sdd_mpmc *r);

/* Enqueue up to n pointers from objs[0..n-1].
 * Burst is NOT all-or-nothing: it claims as many consecutive free slots as it finds, up to n,
 * with one atomic compare-and-swap, and returns that number (0..n). objs[0..ret-1] now belong
 * to the consumers; the rest stay with the caller. The objects of one call occupy consecutive
 * positions, so a single consumer sees them in order and never interleaved with another
 * producer's objects.
 * Returns 0 when the ring is full, and also, transiently, when the next slot is still being
 * read by a consumer that claimed it and was preempted before releasing it.
 * Thread safety: any number of threads, concurrently with any number of consumers. Lock-free
 * claim (a failed CAS means another thread made progress); never blocks. */
SDD_API unsigned sdd_mpmc_enqueue_burst(sdd_mpmc *r, void *const *objs, unsigned n);

/* Dequeue up to n pointers into objs[0..n-1], in ring order. Not all-or-nothing: returns how
 * many consecutive filled slots it claimed (0..n); objs[ret..n-1] are not written.
 * Returns 0 when the ring is empty, and also, transiently, when the next slot was claimed by a
 * producer that has not yet written it (its object becomes visible once the producer commits;
 * a consumer never reads a slot before that).
 * Thread safety: any number of threads, concurrently with producers. Never blocks. */
SDD_API unsigned sdd_mpmc_dequeue_burst(sdd_mpmc *r, void **objs, unsigned n);

/* Approximate number of pointers in the ring (claimed positions, committed or not), within
 * 0..capacity. Exact when no other thread is using the ring. Any thread; never blocks. */
SDD_API unsigned sdd_mpmc_count(const sdd_mpmc *r);

/* The ring's capacity (a power of two, >= 2). Any thread. */
SDD_API unsigned sdd_mpmc_capacity(const sdd_mpmc *r);

/* Enqueue one pointer. Returns SDD_OK, or SDD_EAGAIN when the ring is full (obj stays with the
 * caller). Any thread; never blocks. */
static inline sdd_err sdd_mpmc_enqueue(sdd_mpmc *r, void *obj)
{
    return sdd_mpmc_enqueue_burst(r, &obj, 1) == 1 ? SDD_OK : SDD_EAGAIN;
}

/* Dequeue one pointer into *obj. Returns SDD_OK, or SDD_EAGAIN when the ring is empty (*obj is
 * not written). Any thread; never blocks. */
static inline sdd_err sdd_mpmc_dequeue(sdd_mpmc *r, void **obj)
{
    void *o;
    if (sdd_mpmc_dequeue_burst(r, &o, 1) != 1) {
        return SDD_EAGAIN;
    }
    *obj = o;
    return SDD_OK;
}

#endif
