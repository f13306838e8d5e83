/* Log-linear latency histogram for uint64_t values (nanoseconds), HdrHistogram-like. Values
 * below 2^SDD_HIST_SUB_BITS (32) are counted exactly; above that each power-of-two range
 * [2^e, 2^(e+1)) is split into 2^SDD_HIST_SUB_BITS equal sub-buckets, so a bucket's width is
 * at most 1/32 of its lower bound. The whole uint64_t range is covered by a fixed array
 * (60 x 32 counters, 15 KiB), so the struct can be embedded or kept per thread without malloc
 * and recording never allocates.
 *
 * Accuracy: sdd_hist_quantile() returns the middle of the bucket that holds the requested
 * sample, clamped to [min, max]. A bucket is at most 1/32 (3.1 %) of its lower bound wide, so
 * the result differs from the true sample by at most half of that, 1/64 (1.6 %) of the true
 * value; it is exact for values below 32 and for q = 0 (min) and q = 1 (max).
 *
 * Thread safety: a histogram has one writer and no concurrent readers; keep one per thread and
 * combine them with sdd_hist_merge() once the writers are done (or paused). */
#ifndef SDDAQ_HIST_H
#define SDDAQ_HIST_H

#include <stdint.h>

#include "sddaq/api.h"

/* Linear sub-buckets per power of two: 2^5 = 32, worst relative bucket width 1/32. */
#define SDD_HIST_SUB_BITS  5
#define SDD_HIST_SUB_COUNT (1u << SDD_HIST_SUB_BITS)
/* Bucket rows: one exact row (0..31) plus one per exponent 5..63. */
#define SDD_HIST_ROWS    (64 - SDD_HIST_SUB_BITS + 1)
#define SDD_HIST_BUCKETS (SDD_HIST_ROWS * SDD_HIST_SUB_COUNT)

/* Public so it can be embedded; treat the fields as read-only outside hist.c/hist.h.
 * sum wraps modulo 2^64 (after about 584 years of nanoseconds). */
struct sdd_hist {
    uint64_t count;
    uint64_t min; /* UINT64_MAX while empty */
    uint64_t max; /* 0 while empty */
    uint64_t sum;
    uint64_t buckets[SDD_HIST_BUCKETS];
};
typedef struct sdd_hist sdd_hist;

struct sdd_hist_summary {
    uint64_t count, min, p50, p90, p99, p999, max;
    double mean;
};

/* Bucket index of value v (0..SDD_HIST_BUCKETS-1). Row 0 holds 0..31 exactly; row r >= 1
 * holds [2^(r+4), 2^(r+5)) in 32 sub-buckets of width 2^(r-1). */
static inline unsigned sdd_hist_bucket(uint64_t v)
{
    if (v < SDD_HIST_SUB_COUNT) {
        return (unsigned)v;
    }
    unsigned e = 63u - (unsigned)__builtin_clzll(v); /* v >= 32, so e >= 5 */
    unsigned shift = e - SDD_HIST_SUB_BITS;
    return ((shift + 1) << SDD_HIST_SUB_BITS) + (unsigned)((v >> shift) & (SDD_HIST_SUB_COUNT - 1));
}

/* Reset h to empty. h: caller-owned storage (stack, struct member, per-thread). Never fails. */
SDD_API void sdd_hist_init(sdd_hist *h);

/* Same as sdd_hist_init(): empty the histogram. */
SDD_API void sdd_hist_reset(sdd_hist *h);

/* Record one value. A handful of instructions, no allocation, no atomics: the caller must be
 * the histogram's only writer. */
static inline void sdd_hist_record(sdd_hist *h, uint64_t v)
{
    h->buckets[sdd_hist_bucket(v)]++;
    h->count++;
    h->sum += v;
    if (v < h->min) {
        h->min = v;
    }
    if (v > h->max) {
        h->max = v;
    }
}

/* Record value v n times (n = 0 changes nothing). Same rules as sdd_hist_record(). */
SDD_API void sdd_hist_record_n(sdd_hist *h, uint64_t v, uint64_t n);

/* Add every sample of src to dst (src unchanged). The result equals a histogram that recorded
 * both sets of values. Neither may be written concurrently. dst == src doubles it. */
SDD_API void sdd_hist_merge(sdd_hist *dst, const sdd_hist *src);

/* Value at quantile q: the sample of rank ceil(q * count) (at least 1), reported as the middle
 * of its bucket clamped to [min, max] (see the accuracy note above). q = 0 returns min and q = 1
 * returns max exactly; q below 0 or NaN is treated as 0, above 1 as 1. Returns 0 when empty. */
SDD_API uint64_t sdd_hist_quantile(const sdd_hist *h, double q);

/* Number of recorded values. */
SDD_API uint64_t sdd_hist_count(const sdd_hist *h);

/* Exact arithmetic mean of the recorded values (sum / count, barring wrap of sum); 0 when
 * empty. */
SDD_API double sdd_hist_mean(const sdd_hist *h);

/* Fill *s with count, min, p50, p90, p99, p99.9, max and mean; all zero when empty. */
SDD_API void sdd_hist_summarize(const sdd_hist *h, struct sdd_hist_summary *s);

#endif
