/* Fixed-size buffer pools. A pool carves one contiguous, aligned memory region into `count`
 * buffers of equal stride, so the whole region can be registered with the fabric once
 * (sdd_pool_base(), sdd_pool_region_size()). Free buffers sit in an MPMC ring; get and put are
 * lock-free and safe from any number of threads. Every pointer handed back is checked: a
 * pointer that is not the start of one of this pool's buffers, or a buffer that is already in
 * the pool (double put), is refused with SDD_EINVAL and counted, never stored, so a buggy
 * caller cannot corrupt the pool. Buffer contents are not initialised or cleared. */
#ifndef SDDAQ_POOL_H
#define SDDAQ_POOL_H

#include <stddef.h>
#include <stdint.h>

#include "sddaq/api.h"
#include "sddaq/err.h"

/* Alignment used when the caller passes 0. */
#define SDD_POOL_DEFAULT_ALIGN 64

/* Most buffers one pool can hold. */
#define SDD_POOL_MAX_COUNT (1u << 30)

typedef struct sdd_pool sdd_pool;

/* Create a pool of `count` buffers of at least `buf_size` bytes in one allocated region.
 * align:  alignment of the region and of every buffer; a power of two, 0 means
 *         SDD_POOL_DEFAULT_ALIGN (64). The buffer stride is buf_size rounded up to align.
 * out:    receives the pool on success, untouched on failure.
 * Returns SDD_OK; SDD_EINVAL for buf_size 0, count 0 or > SDD_POOL_MAX_COUNT, align not a power
 * of two, or out NULL; SDD_ETOOBIG when stride * count overflows; SDD_ENOMEM.
 * All buffers start in the pool. The pool owns the region; free both with sdd_pool_destroy().
 * Allocates; not for the data path. */
SDD_API sdd_err sdd_pool_create(size_t buf_size, size_t count, size_t align, sdd_pool **out);

/* Create a pool over caller memory [mem, mem + mem_size). The first buffer starts at mem
 * rounded up to align; as many whole buffers as fit are used, at most SDD_POOL_MAX_COUNT
 * (sdd_pool_count() says how many).
 * Returns SDD_OK; SDD_EINVAL for mem or out NULL, buf_size 0, align not a power of two (0 means
 * 64), or memory too small for one buffer; SDD_ENOMEM for the bookkeeping.
 * The caller keeps owning mem: it must outlive the pool and is not freed by sdd_pool_destroy().
 * Allocates its bookkeeping; not for the data path. */
SDD_API sdd_err sdd_pool_create_from(void *mem, size_t mem_size, size_t buf_size, size_t align,
                                     sdd_pool **out);

/* Free the pool and, for sdd_pool_create(), its region. NULL is a no-op. Buffers still held by
 * callers become invalid; no thread may use the pool during or after this call. */
SDD_API void sdd_pool_destroy(sdd_pool *pool);

/* Start of the buffer region (the first buffer), aligned as requested. Any thread. */
SDD_API void *sdd_pool_base(const sdd_pool *pool);

/* Bytes from sdd_pool_base() to the end of the last buffer: count * stride. Register
 * [base, base + region_size) with the fabric to cover every buffer. Any thread. */
SDD_API size_t sdd_pool_region_size(const sdd_pool *pool);

/* Usable bytes per buffer: the stride (buf_size rounded up to the alignment), >= the buf_size
 * asked for. Any thread. */
SDD_API size_t sdd_pool_buf_size(const sdd_pool *pool);

/* Number of buffers the pool manages. Any thread. */
SDD_API size_t sdd_pool_count(const sdd_pool *pool);

/* Take one free buffer; NULL when none is free. It may also return NULL, transiently, while
 * another thread is in the middle of putting a buffer back. The caller owns the buffer until
 * it puts it back. Any thread; lock-free, never blocks. */
SDD_API void *sdd_pool_get(sdd_pool *pool);

/* Take up to n free buffers into bufs[0..n-1]; returns how many (0..n). The caller owns them.
 * Any thread; lock-free, never blocks. */
SDD_API unsigned sdd_pool_get_burst(sdd_pool *pool, void **bufs, unsigned n);

/* Give a buffer back; ownership returns to the pool.
 * Returns SDD_OK, or SDD_EINVAL when buf is NULL, outside the region, not at the start of a
 * buffer, or already in the pool; such a pointer is ignored (the pool is unchanged) and
 * counted in sdd_pool_bad_puts(), and the first one is logged as a warning.
 * Any thread; lock-free. It spins (yielding) only in the rare case that a thread which is
 * taking a buffer was preempted inside the ring at the slot this put needs. */
SDD_API sdd_err sdd_pool_put(sdd_pool *pool, void *buf);

/* Give back bufs[0..n-1]. Returns how many were accepted; each refused pointer (see
 * sdd_pool_put) is skipped, counted and left with the caller. Any thread; as sdd_pool_put. */
SDD_API unsigned sdd_pool_put_burst(sdd_pool *pool, void *const *bufs, unsigned n);

/* Index (0..count-1) of the buffer that starts at buf, or SDD_EINVAL when buf is not the start
 * of one of this pool's buffers. Does not log or count. Any thread. */
SDD_API int sdd_pool_index(const sdd_pool *pool, const void *buf);

/* Buffer number idx, or NULL when idx >= count. Does not take the buffer. Any thread. */
SDD_API void *sdd_pool_at(const sdd_pool *pool, size_t idx);

/* Approximate number of free buffers (exact when no other thread is using the pool). */
SDD_API size_t sdd_pool_available(const sdd_pool *pool);

/* How many puts were refused (foreign, misaligned, NULL or double) since creation. */
SDD_API uint64_t sdd_pool_bad_puts(const sdd_pool *pool);

#endif
