/* Lock-free pointer rings: SPSC (cached indices, one release store per burst) and MPMC
 * (Vyukov's bounded queue with per-slot sequence numbers, burst claims with one CAS). */
#include <stdalign.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sddaq/ring.h"

#define CACHE_LINE 64

/* Each group below sits on its own cache line. A producer touches only its private line, the
 * line it publishes its index on, and the slots; the consumer likewise. The private copies
 * of mask and capacity spare each side a read of a line the other side writes. */
struct sdd_spsc {
    /* Producer-private: never read by the consumer. */
    alignas(CACHE_LINE) uint32_t prod_tail; /* next position to write */
    uint32_t prod_head_cache;               /* consumer's head as last seen */
    uint32_t prod_mask;
    uint32_t capacity;

    /* Published by the producer, read by the consumer. */
    alignas(CACHE_LINE) _Atomic uint32_t tail;

    /* Consumer-private: never read by the producer. */
    alignas(CACHE_LINE) uint32_t cons_head; /* next position to read */
    uint32_t cons_tail_cache;               /* producer's tail as last seen */
    uint32_t cons_mask;

    /* Published by the consumer, read by the producer. */
    alignas(CACHE_LINE) _Atomic uint32_t head;

    alignas(CACHE_LINE) void *slots[];
};

/* One slot of the MPMC ring. seq == pos: free for the producer of position pos;
 * seq == pos + 1: holds the object of position pos, ready for its consumer. */
struct mpmc_slot {
    _Atomic uint64_t seq;
    void *obj;
};

struct sdd_mpmc {
    /* Read-only after create. */
    alignas(CACHE_LINE) uint64_t mask;
    uint32_t capacity;

    alignas(CACHE_LINE) _Atomic uint64_t enq_pos; /* next position producers claim */
    alignas(CACHE_LINE) _Atomic uint64_t deq_pos; /* next position consumers claim */

    alignas(CACHE_LINE) struct mpmc_slot slots[];
};

/* Round up to a power of two; 0 when capacity is 0 or above the limit. */
static uint32_t ring_size(size_t capacity)
{
    if (capacity == 0 || capacity > SDD_RING_MAX_CAPACITY) {
        return 0;
    }
    uint32_t size = 1;
    while (size < capacity) {
        size <<= 1;
    }
    return size;
}

/* aligned_alloc wants the size to be a multiple of the alignment. */
static void *alloc_lines(size_t bytes)
{
    size_t rounded = (bytes + CACHE_LINE - 1) & ~(size_t)(CACHE_LINE - 1);
    return aligned_alloc(CACHE_LINE, rounded);
}

/* ---- SPSC ---------------------------------------------------------------------------------- */

sdd_err sdd_spsc_create(size_t capacity, sdd_spsc **out)
{
    uint32_t size = ring_size(capacity);
    if (size == 0 || out == NULL) {
        return SDD_EINVAL;
    }
    sdd_spsc *r = alloc_lines(sizeof(*r) + (size_t)size * sizeof(r->slots[0]));
    if (r == NULL) {
        return SDD_ENOMEM;
    }
    memset(r, 0, sizeof(*r));
    r->prod_mask = size - 1;
    r->cons_mask = size - 1;
    r->capacity = size;
    atomic_init(&r->tail, 0);
    atomic_init(&r->head, 0);
    *out = r;
    return SDD_OK;
}

void sdd_spsc_destroy(sdd_spsc *r)
{
    free(r);
}

unsigned sdd_spsc_enqueue_burst(sdd_spsc *r, void *const *objs, unsigned n)
{
    uint32_t tail = r->prod_tail;
    uint32_t free_slots = r->capacity - (tail - r->prod_head_cache);
    if (free_slots < n) {
        /* Acquire pairs with the consumer's release store of head in sdd_spsc_dequeue_burst:
         * the consumer has finished reading the slots it gave back before we overwrite them. */
        r->prod_head_cache = atomic_load_explicit(&r->head, memory_order_acquire);
        free_slots = r->capacity - (tail - r->prod_head_cache);
        if (free_slots < n) {
            n = free_slots;
        }
    }
    if (n == 0) {
        return 0;
    }
    uint32_t mask = r->prod_mask;
    for (unsigned i = 0; i < n; i++) {
        r->slots[(tail + i) & mask] = objs[i];
    }
    r->prod_tail = tail + n;
    /* Release: the slot writes above become visible before the new tail (write, then commit). */
    atomic_store_explicit(&r->tail, tail + n, memory_order_release);
    return n;
}

unsigned sdd_spsc_dequeue_burst(sdd_spsc *r, void **objs, unsigned n)
{
    uint32_t head = r->cons_head;
    uint32_t avail = r->cons_tail_cache - head;
    if (avail < n) {
        /* Acquire pairs with the producer's release store of tail in sdd_spsc_enqueue_burst:
         * the slots up to the new tail are fully written. */
        r->cons_tail_cache = atomic_load_explicit(&r->tail, memory_order_acquire);
        avail = r->cons_tail_cache - head;
        if (avail < n) {
            n = avail;
        }
    }
    if (n == 0) {
        return 0;
    }
    uint32_t mask = r->cons_mask;
    for (unsigned i = 0; i < n; i++) {
        objs[i] = r->slots[(head + i) & mask];
    }
    r->cons_head = head + n;
    /* Release: our slot reads complete before the producer may reuse the slots. */
    atomic_store_explicit(&r->head, head + n, memory_order_release);
    return n;
}

unsigned sdd_spsc_count(const sdd_spsc *r)
{
    /* Relaxed: a snapshot for monitoring; no slot is read through it. Head first, so that the
     * later tail is never older than it and the difference cannot go negative. */
    uint32_t head = atomic_load_explicit(&r->head, memory_order_relaxed);
    uint32_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
    uint32_t n = tail - head;
    return n > r->capacity ? r->capacity : n;
}

unsigned sdd_spsc_capacity(const sdd_spsc *r)
{
    return r->capacity;
}

/* ---- MPMC ---------------------------------------------------------------------------------- */

sdd_err sdd_mpmc_create(size_t capacity, sdd_mpmc **out)
{
    uint32_t size = ring_size(capacity);
    if (size == 0 || out == NULL) {
        return SDD_EINVAL;
    }
    if (size < 2) {
        size = 2;
    }
    sdd_mpmc *r = alloc_lines(sizeof(*r) + (size_t)size * sizeof(r->slots[0]));
    if (r == NULL) {
        return SDD_ENOMEM;
    }
    memset(r, 0, sizeof(*r));
    r->mask = size - 1;
    r->capacity = size;
    atomic_init(&r->enq_pos, 0);
    atomic_init(&r->deq_pos, 0);
    for (uint32_t i = 0; i < size; i++) {
        atomic_init(&r->slots[i].seq, i);
        r->slots[i].obj = NULL;
    }
    *out = r;
    return SDD_OK;
}

void sdd_mpmc_destroy(sdd_mpmc *r)
{
    free(r);
}

/* Count the consecutive slots from pos on, up to n, whose sequence equals pos + i + offset
 * (offset 0: free for producers; 1: filled for consumers). *first gets the signed distance of
 * the first slot, which tells "ring full/empty" (< 0) from "pos is stale" (> 0). */
static unsigned scan_ready(sdd_mpmc *r, uint64_t pos, unsigned n, uint64_t offset, int64_t *first)
{
    unsigned k = 0;
    while (k < n) {
        const struct mpmc_slot *s = &r->slots[(pos + k) & r->mask];
        /* Acquire pairs with the release store of seq that made the slot ready: for a
         * producer, the consumer's store in sdd_mpmc_dequeue_burst (it has read the old object);
         * for a consumer, the producer's store in sdd_mpmc_enqueue_burst (the object is written).
         */
        uint64_t seq = atomic_load_explicit(&s->seq, memory_order_acquire);
        int64_t diff = (int64_t)(seq - (pos + k + offset));
        if (k == 0) {
            *first = diff;
        }
        if (diff != 0) {
            break;
        }
        k++;
    }
    return k;
}

unsigned sdd_mpmc_enqueue_burst(sdd_mpmc *r, void *const *objs, unsigned n)
{
    if (n == 0) {
        return 0;
    }
    uint64_t pos = atomic_load_explicit(&r->enq_pos, memory_order_relaxed);
    unsigned k;
    for (;;) {
        int64_t first = 0;
        k = scan_ready(r, pos, n, 0, &first);
        if (k == 0) {
            if (first < 0) {
                return 0; /* slot pos still holds last lap's object: full */
            }
            pos = atomic_load_explicit(&r->enq_pos, memory_order_relaxed);
            continue;
        }
        /* Relaxed CAS: it only arbitrates between producers; the slot data is published by the
         * per-slot release stores below. On failure pos is reloaded and we scan again. */
        if (atomic_compare_exchange_weak_explicit(&r->enq_pos, &pos, pos + k, memory_order_relaxed,
                                                  memory_order_relaxed)) {
            break;
        }
    }
    for (unsigned i = 0; i < k; i++) {
        struct mpmc_slot *s = &r->slots[(pos + i) & r->mask];
        s->obj = objs[i];
        /* Release: the object is written before the slot reads as filled (write, then commit). */
        atomic_store_explicit(&s->seq, pos + i + 1, memory_order_release);
    }
    return k;
}

unsigned sdd_mpmc_dequeue_burst(sdd_mpmc *r, void **objs, unsigned n)
{
    if (n == 0) {
        return 0;
    }
    uint64_t pos = atomic_load_explicit(&r->deq_pos, memory_order_relaxed);
    unsigned k;
    for (;;) {
        int64_t first = 0;
        k = scan_ready(r, pos, n, 1, &first);
        if (k == 0) {
            if (first < 0) {
                return 0; /* slot pos not yet filled (empty, or its producer not committed) */
            }
            pos = atomic_load_explicit(&r->deq_pos, memory_order_relaxed);
            continue;
        }
        if (atomic_compare_exchange_weak_explicit(&r->deq_pos, &pos, pos + k, memory_order_relaxed,
                                                  memory_order_relaxed)) {
            break;
        }
    }
    for (unsigned i = 0; i < k; i++) {
        struct mpmc_slot *s = &r->slots[(pos + i) & r->mask];
        objs[i] = s->obj;
        /* Release: our read of the object completes before the slot reads as free for the
         * producer of the next lap (position pos + i + capacity). */
        atomic_store_explicit(&s->seq, pos + i + r->mask + 1, memory_order_release);
    }
    return k;
}

unsigned sdd_mpmc_count(const sdd_mpmc *r)
{
    /* Relaxed snapshot for monitoring; deq first so the difference cannot go negative. */
    uint64_t deq = atomic_load_explicit(&r->deq_pos, memory_order_relaxed);
    uint64_t enq = atomic_load_explicit(&r->enq_pos, memory_order_relaxed);
    uint64_t n = enq - deq;
    if ((int64_t)n < 0) {
        return 0;
    }
    return n > r->capacity ? r->capacity : (unsigned)n;
}

unsigned sdd_mpmc_capacity(const sdd_mpmc *r)
{
    return r->capacity;
}
