/* The persistent slot ring and the consumer hand-over. Slots are frame-sized buffers of one
 * page-aligned pool region (registrable with a transport); free slots live in the pool, filled
 * ones travel to the single consumer through an SPSC ring that can hold every slot, and the
 * consumer gives them back to the pool. A slot's state says who owns it, so a release of a
 * slot the consumer does not hold is refused instead of letting the receiver refill it. */
#include <stdlib.h>
#include <string.h>

#include "readout/rx_internal.h"
#include "sddaq/clock.h"
#include "sddaq/cpu.h"
#include "sddaq/log.h"

sdd_err ro_slots_init(sdd_ro_rx *rx)
{
    uint32_t n = rx->o.slots;
    size_t bitmap_bytes = rx->bit_words * sizeof(uint64_t);
    sdd_err err = sdd_pool_create(rx->slot_bytes, n, 4096, &rx->pool);
    if (err != SDD_OK) {
        return err;
    }
    err = sdd_spsc_create(n, &rx->ready);
    if (err != SDD_OK) {
        return err;
    }
    sdd_notify_init(&rx->ready_note);
    sdd_notify_init(&rx->free_note);
    /* Touch every page now, so the first pass over the ring does not page-fault inside the
     * kernel's copy, and the memory is resident for registration with a transport. */
    memset(sdd_pool_base(rx->pool), 0, sdd_pool_region_size(rx->pool));
    rx->slots = calloc(n, sizeof(*rx->slots));
    rx->slot_bitmaps = calloc(n, bitmap_bytes);
    if (rx->slots == NULL || rx->slot_bitmaps == NULL) {
        return SDD_ENOMEM;
    }
    for (uint32_t i = 0; i < n; i++) {
        struct ro_slot *s = &rx->slots[i];
        s->f.data = sdd_pool_at(rx->pool, i);
        s->f.bytes = rx->slot_bytes;
        s->f.slot = i;
        s->f.stream_id = rx->o.geom.stream_id;
        s->f.packets = rx->ppf;
        s->bitmap = rx->slot_bitmaps + i * bitmap_bytes;
        s->f.bitmap = s->bitmap;
        atomic_init(&s->state, SLOT_FREE);
    }
    return SDD_OK;
}

void ro_slots_fini(sdd_ro_rx *rx)
{
    free(rx->slot_bitmaps);
    free(rx->slots);
    sdd_spsc_destroy(rx->ready);
    sdd_pool_destroy(rx->pool);
}

struct ro_slot *ro_slot_get(sdd_ro_rx *rx)
{
    void *buf = sdd_pool_get(rx->pool);
    if (buf == NULL) {
        return NULL;
    }
    struct ro_slot *s = &rx->slots[sdd_pool_index(rx->pool, buf)];
    atomic_store_explicit(&s->state, SLOT_FILLING, memory_order_relaxed);
    /* The consumer may have scribbled on the view while it held the slot. */
    s->f.data = buf;
    s->f.bytes = rx->slot_bytes;
    s->f.slot = (uint32_t)(s - rx->slots);
    s->f.bitmap = s->bitmap;
    s->f.stream_id = rx->o.geom.stream_id;
    s->f.packets = rx->ppf;
    return s;
}

struct ro_slot *ro_slot_acquire(sdd_ro_rx *rx)
{
    struct ro_slot *s = ro_slot_get(rx);
    if (s != NULL || rx->o.full == SDD_RO_FULL_DROP_NEWEST) {
        return s;
    }
    /* Block: the socket is not read meanwhile, so the kernel drops and SO_RXQ_OVFL counts.
     * Sleep until the consumer releases a slot (or stop; the 1 ms bound is only a backstop). */
    uint64_t t0 = sdd_now_ns();
    while (s == NULL && !atomic_load_explicit(&rx->stop, memory_order_relaxed)) {
        uint32_t seq = sdd_notify_prepare(&rx->free_note);
        s = ro_slot_get(rx);
        if (s != NULL) {
            sdd_notify_cancel(&rx->free_note);
            break;
        }
        sdd_notify_wait(&rx->free_note, seq, SDD_NS_PER_MS);
        s = ro_slot_get(rx);
    }
    rx->c.blocked_ns += sdd_now_ns() - t0;
    return s;
}

void ro_slot_free(sdd_ro_rx *rx, struct ro_slot *s)
{
    atomic_store_explicit(&s->state, SLOT_FREE, memory_order_relaxed);
    sdd_pool_put(rx->pool, sdd_pool_at(rx->pool, (size_t)(s - rx->slots)));
}

void ro_slot_deliver(sdd_ro_rx *rx, struct ro_slot *s)
{
    /* Held only once the consumer takes it: a release of a slot still in the ring (a double
     * release after the receiver refilled it) must be refused. */
    atomic_store_explicit(&s->state, SLOT_READY, memory_order_relaxed);
    /* The ring's release store publishes the slot's data and fields to the consumer. */
    unsigned n = sdd_spsc_enqueue_burst(rx->ready, (void *const *)&s, 1);
    if (n != 1) {
        /* Impossible by construction (the ring holds every slot); never lose it silently. */
        SDD_ERROR("readout", "ready ring full: slot %u returned to the pool", s->f.slot);
        ro_slot_free(rx, s);
        return;
    }
    sdd_notify_wake(&rx->ready_note);
}

/* The consumer took slot obj from the ready ring: it holds it now. */
static struct sdd_ro_frame *take(void *obj)
{
    struct ro_slot *s = obj;
    atomic_store_explicit(&s->state, SLOT_HELD, memory_order_relaxed);
    return &s->f;
}

sdd_err sdd_ro_rx_next(sdd_ro_rx *rx, struct sdd_ro_frame **out, int timeout_ms)
{
    if (rx == NULL || out == NULL) {
        return SDD_EINVAL;
    }
    uint64_t deadline =
        timeout_ms < 0 ? UINT64_MAX : sdd_now_ns() + (uint64_t)timeout_ms * SDD_NS_PER_MS;
    uint64_t napping_since = 0;
    for (unsigned spins = 0;; spins++) {
        void *obj;
        /* Pairs with the release in sdd_spsc_enqueue_burst (ro_slot_deliver). */
        if (sdd_spsc_dequeue(rx->ready, &obj) == SDD_OK) {
            *out = take(obj);
            return SDD_OK;
        }
        /* Acquire pairs with the thread's release of done after its last delivery, so one
         * more look at the ring after seeing done cannot miss a frame. */
        if (atomic_load_explicit(&rx->done, memory_order_acquire)) {
            if (sdd_spsc_dequeue(rx->ready, &obj) == SDD_OK) {
                *out = take(obj);
                return SDD_OK;
            }
            return SDD_ECLOSED;
        }
        uint64_t now = sdd_now_ns();
        if (timeout_ms == 0 || now >= deadline) {
            return SDD_EAGAIN;
        }
        /* Spin about a microsecond, then nap in short sleeps while frames come often, and
         * once none came for a millisecond, sleep until the receiver hands one over. Naps
         * cost the receiver nothing; a wake-up per frame (a system call and two context
         * switches when consumer and receiver share a CPU) would cost it more than the frame
         * at tens of thousands of frames a second. An idle consumer uses no CPU. */
        if (spins < 64) {
            sdd_cpu_relax();
            continue;
        }
        if (napping_since == 0) {
            napping_since = now;
        }
        if (now - napping_since < SDD_NS_PER_MS) {
            sdd_sleep_ns(20 * SDD_NS_PER_US);
            continue;
        }
        uint32_t seq = sdd_notify_prepare(&rx->ready_note);
        if (sdd_spsc_dequeue(rx->ready, &obj) == SDD_OK) {
            sdd_notify_cancel(&rx->ready_note);
            *out = take(obj);
            return SDD_OK;
        }
        if (atomic_load_explicit(&rx->done, memory_order_acquire)) {
            sdd_notify_cancel(&rx->ready_note);
            continue; /* the check above drains and returns */
        }
        uint64_t left = deadline - now;
        sdd_notify_wait(&rx->ready_note, seq,
                        left < 100 * SDD_NS_PER_MS ? left : 100 * SDD_NS_PER_MS);
    }
}

sdd_err sdd_ro_rx_release(sdd_ro_rx *rx, struct sdd_ro_frame *f)
{
    if (rx == NULL || f == NULL) {
        return SDD_EINVAL;
    }
    uintptr_t first = (uintptr_t)rx->slots, p = (uintptr_t)f;
    if (p < first || (p - first) % sizeof(struct ro_slot) != 0 ||
        (p - first) / sizeof(struct ro_slot) >= rx->o.slots) {
        atomic_fetch_add_explicit(&rx->bad_releases, 1, memory_order_relaxed);
        return SDD_EINVAL;
    }
    size_t idx = (p - first) / sizeof(struct ro_slot);
    struct ro_slot *s = &rx->slots[idx];
    int held = SLOT_HELD;
    if (!atomic_compare_exchange_strong_explicit(&s->state, &held, SLOT_FREE, memory_order_relaxed,
                                                 memory_order_relaxed)) {
        atomic_fetch_add_explicit(&rx->bad_releases, 1, memory_order_relaxed);
        return SDD_EINVAL;
    }
    /* From the pool, not f->data, which the consumer could have overwritten. The pool's ring
     * hands the slot back to the receiver with release/acquire ordering. */
    sdd_pool_put(rx->pool, sdd_pool_at(rx->pool, idx));
    sdd_notify_wake(&rx->free_note);
    return SDD_OK;
}
