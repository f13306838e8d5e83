/* Buffer pool: one aligned region cut into equal buffers, free list in an MPMC ring, and one
 * state byte per buffer so that foreign pointers and double puts are refused, not stored. */
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

#include "sddaq/log.h"
#include "sddaq/pool.h"
#include "sddaq/ring.h"

/* Per-buffer state. Only a successful CAS OUT -> FREE lets a buffer into the ring, so the ring
 * never holds a buffer twice and never holds more than count entries (it cannot overflow). */
enum { BUF_OUT = 0, BUF_FREE = 1 };

/* Buffers handed to the ring per burst when filling it and in sdd_pool_put_burst. */
#define PUT_CHUNK 64

struct sdd_pool {
    unsigned char *base;
    size_t region_size;
    size_t stride;
    unsigned stride_shift; /* log2(stride) when stride is a power of two, else 0 */
    bool stride_pow2;
    size_t count;
    bool owns_region;
    sdd_mpmc *free_ring;
    _Atomic unsigned char *state;
    _Atomic uint64_t bad_puts;
};

static bool is_pow2(size_t x)
{
    return x != 0 && (x & (x - 1)) == 0;
}

/* Common tail of both constructors: bookkeeping over an already placed region. */
static sdd_err pool_setup(unsigned char *base, size_t stride, size_t count, bool owns,
                          sdd_pool **out)
{
    void *batch[PUT_CHUNK];
    sdd_err err = SDD_ENOMEM;
    sdd_pool *p = calloc(1, sizeof(*p));
    if (p == NULL) {
        goto out;
    }
    p->base = base;
    p->stride = stride;
    p->count = count;
    p->region_size = stride * count;
    p->owns_region = owns;
    p->stride_pow2 = is_pow2(stride);
    if (p->stride_pow2) {
        while (((size_t)1 << p->stride_shift) < stride) {
            p->stride_shift++;
        }
    }
    atomic_init(&p->bad_puts, 0);
    p->state = malloc(count * sizeof(p->state[0]));
    if (p->state == NULL) {
        goto out_free_pool;
    }
    err = sdd_mpmc_create(count, &p->free_ring);
    if (err != SDD_OK) {
        goto out_free_state;
    }
    /* Fill the ring in index order, in bursts; a fresh ring of capacity >= count takes all. */
    for (size_t i = 0; i < count;) {
        unsigned n = 0;
        while (n < PUT_CHUNK && i < count) {
            atomic_init(&p->state[i], BUF_FREE);
            batch[n++] = base + i * stride;
            i++;
        }
        unsigned done = sdd_mpmc_enqueue_burst(p->free_ring, batch, n);
        if (done != n) {
            err = SDD_EINVAL; /* cannot happen: capacity >= count */
            goto out_free_ring;
        }
    }
    *out = p;
    return SDD_OK;

out_free_ring:
    sdd_mpmc_destroy(p->free_ring);
out_free_state:
    free(p->state);
out_free_pool:
    free(p);
out:
    return err;
}

static size_t effective_align(size_t align)
{
    return align == 0 ? SDD_POOL_DEFAULT_ALIGN : align;
}

sdd_err sdd_pool_create(size_t buf_size, size_t count, size_t align, sdd_pool **out)
{
    align = effective_align(align);
    if (buf_size == 0 || count == 0 || count > SDD_POOL_MAX_COUNT || !is_pow2(align) ||
        out == NULL) {
        return SDD_EINVAL;
    }
    if (buf_size > SIZE_MAX - (align - 1)) {
        return SDD_ETOOBIG;
    }
    size_t stride = (buf_size + align - 1) & ~(align - 1);
    if (stride > SIZE_MAX / count) {
        return SDD_ETOOBIG;
    }
    size_t bytes = stride * count; /* a multiple of align, as aligned_alloc wants */
    size_t mem_align = align < sizeof(void *) ? sizeof(void *) : align;
    void *mem = NULL;
    if (posix_memalign(&mem, mem_align, bytes) != 0) {
        return SDD_ENOMEM;
    }
    sdd_err err = pool_setup(mem, stride, count, true, out);
    if (err != SDD_OK) {
        free(mem);
    }
    return err;
}

sdd_err sdd_pool_create_from(void *mem, size_t mem_size, size_t buf_size, size_t align,
                             sdd_pool **out)
{
    align = effective_align(align);
    if (mem == NULL || buf_size == 0 || !is_pow2(align) || out == NULL ||
        buf_size > SIZE_MAX - (align - 1)) {
        return SDD_EINVAL;
    }
    size_t stride = (buf_size + align - 1) & ~(align - 1);
    uintptr_t start = (uintptr_t)mem;
    size_t pad = (size_t)((align - (start & (align - 1))) & (align - 1));
    if (pad >= mem_size || (mem_size - pad) / stride == 0) {
        return SDD_EINVAL;
    }
    size_t count = (mem_size - pad) / stride;
    if (count > SDD_POOL_MAX_COUNT) {
        count = SDD_POOL_MAX_COUNT;
    }
    return pool_setup((unsigned char *)mem + pad, stride, count, false, out);
}

void sdd_pool_destroy(sdd_pool *pool)
{
    if (pool == NULL) {
        return;
    }
    sdd_mpmc_destroy(pool->free_ring);
    free(pool->state);
    if (pool->owns_region) {
        free(pool->base);
    }
    free(pool);
}

void *sdd_pool_base(const sdd_pool *pool)
{
    return pool->base;
}

size_t sdd_pool_region_size(const sdd_pool *pool)
{
    return pool->region_size;
}

size_t sdd_pool_buf_size(const sdd_pool *pool)
{
    return pool->stride;
}

size_t sdd_pool_count(const sdd_pool *pool)
{
    return pool->count;
}

/* Index of a buffer known to lie inside the region. */
static size_t index_of(const sdd_pool *pool, const void *buf)
{
    size_t off = (size_t)((const unsigned char *)buf - pool->base);
    return pool->stride_pow2 ? off >> pool->stride_shift : off / pool->stride;
}

/* Integer arithmetic on addresses: comparing unrelated pointers would be undefined. */
int sdd_pool_index(const sdd_pool *pool, const void *buf)
{
    uintptr_t p = (uintptr_t)buf;
    uintptr_t base = (uintptr_t)pool->base;
    if (buf == NULL || p < base || p - base >= pool->region_size) {
        return SDD_EINVAL;
    }
    size_t off = (size_t)(p - base);
    size_t idx = index_of(pool, buf);
    if (idx * pool->stride != off) {
        return SDD_EINVAL; /* inside the region but not at a buffer start */
    }
    return (int)idx;
}

void *sdd_pool_at(const sdd_pool *pool, size_t idx)
{
    if (idx >= pool->count) {
        return NULL;
    }
    return pool->base + idx * pool->stride;
}

static void mark_taken(sdd_pool *pool, void *const *bufs, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        size_t idx = index_of(pool, bufs[i]);
        /* Relaxed: the buffer itself was handed over by the ring's acquire/release pair; the
         * state byte has its own modification order, which is all the CAS in put relies on. */
        atomic_store_explicit(&pool->state[idx], BUF_OUT, memory_order_relaxed);
    }
}

void *sdd_pool_get(sdd_pool *pool)
{
    void *buf;
    if (sdd_mpmc_dequeue(pool->free_ring, &buf) != SDD_OK) {
        return NULL;
    }
    mark_taken(pool, &buf, 1);
    return buf;
}

unsigned sdd_pool_get_burst(sdd_pool *pool, void **bufs, unsigned n)
{
    unsigned got = sdd_mpmc_dequeue_burst(pool->free_ring, bufs, n);
    mark_taken(pool, bufs, got);
    return got;
}

static void refuse(sdd_pool *pool, const void *buf, const char *why)
{
    uint64_t before = atomic_fetch_add_explicit(&pool->bad_puts, 1, memory_order_relaxed);
    if (before == 0) {
        SDD_WARN("core", "pool %p: refused put of %p (%s); further refusals are only counted",
                 (void *)pool, buf, why);
    }
}

/* Validate one returned buffer and flip its state to FREE; false when refused. */
static bool accept(sdd_pool *pool, void *buf)
{
    int idx = sdd_pool_index(pool, buf);
    if (idx < 0) {
        refuse(pool, buf, buf == NULL ? "NULL" : "not a buffer of this pool");
        return false;
    }
    unsigned char expected = BUF_OUT;
    if (!atomic_compare_exchange_strong_explicit(&pool->state[idx], &expected, BUF_FREE,
                                                 memory_order_relaxed, memory_order_relaxed)) {
        refuse(pool, buf, "already in the pool");
        return false;
    }
    return true;
}

/* The ring has room for every accepted buffer, but a slot may still be held by a consumer that
 * claimed it and was preempted before releasing it; wait that out. */
static void enqueue_all(sdd_pool *pool, void *const *bufs, unsigned n)
{
    unsigned done = 0;
    unsigned spins = 0;
    while (done < n) {
        unsigned k = sdd_mpmc_enqueue_burst(pool->free_ring, bufs + done, n - done);
        done += k;
        if (k == 0 && ++spins >= 16) {
            sched_yield();
            spins = 0;
        }
    }
}

sdd_err sdd_pool_put(sdd_pool *pool, void *buf)
{
    if (!accept(pool, buf)) {
        return SDD_EINVAL;
    }
    enqueue_all(pool, &buf, 1);
    return SDD_OK;
}

unsigned sdd_pool_put_burst(sdd_pool *pool, void *const *bufs, unsigned n)
{
    void *ok[PUT_CHUNK];
    unsigned accepted = 0;
    unsigned nok = 0;
    for (unsigned i = 0; i < n; i++) {
        if (accept(pool, bufs[i])) {
            ok[nok++] = bufs[i];
        }
        if (nok == PUT_CHUNK) {
            enqueue_all(pool, ok, nok);
            accepted += nok;
            nok = 0;
        }
    }
    enqueue_all(pool, ok, nok);
    return accepted + nok;
}

size_t sdd_pool_available(const sdd_pool *pool)
{
    return sdd_mpmc_count(pool->free_ring);
}

uint64_t sdd_pool_bad_puts(const sdd_pool *pool)
{
    return atomic_load_explicit(&pool->bad_puts, memory_order_relaxed);
}
