/* Log-linear histogram: bucket bounds, quantiles, merge and summaries. Recording is inline in
 * the header. */
#include <math.h>
#include <string.h>

#include "sddaq/hist.h"

void sdd_hist_init(sdd_hist *h)
{
    memset(h, 0, sizeof(*h));
    h->min = UINT64_MAX;
}

void sdd_hist_reset(sdd_hist *h)
{
    sdd_hist_init(h);
}

void sdd_hist_record_n(sdd_hist *h, uint64_t v, uint64_t n)
{
    if (n == 0) {
        return;
    }
    h->buckets[sdd_hist_bucket(v)] += n;
    h->count += n;
    h->sum += v * n;
    if (v < h->min) {
        h->min = v;
    }
    if (v > h->max) {
        h->max = v;
    }
}

void sdd_hist_merge(sdd_hist *dst, const sdd_hist *src)
{
    if (src->count == 0) {
        return;
    }
    for (unsigned i = 0; i < SDD_HIST_BUCKETS; i++) {
        dst->buckets[i] += src->buckets[i];
    }
    dst->count += src->count;
    dst->sum += src->sum;
    if (src->min < dst->min) {
        dst->min = src->min;
    }
    if (src->max > dst->max) {
        dst->max = src->max;
    }
}

/* Middle of bucket i: exact for row 0, lower + width / 2 above. Never overflows: the top
 * bucket's lower bound is 2^64 - 2^58. */
static uint64_t bucket_mid(unsigned i)
{
    if (i < SDD_HIST_SUB_COUNT) {
        return i;
    }
    unsigned shift = i / SDD_HIST_SUB_COUNT - 1;
    uint64_t sub = i % SDD_HIST_SUB_COUNT;
    uint64_t lower = (SDD_HIST_SUB_COUNT + sub) << shift;
    uint64_t half = shift == 0 ? 0 : (uint64_t)1 << (shift - 1);
    return lower + half;
}

uint64_t sdd_hist_quantile(const sdd_hist *h, double q)
{
    if (h->count == 0) {
        return 0;
    }
    if (!(q > 0.0)) { /* also NaN */
        return h->min;
    }
    if (q >= 1.0) {
        return h->max;
    }
    /* Rank in 1..count. Doubles hold counts exactly up to 2^53, ample for any real run. */
    double want = ceil(q * (double)h->count);
    uint64_t rank = want < 1.0 ? 1 : (want >= (double)h->count ? h->count : (uint64_t)want);
    uint64_t seen = 0;
    unsigned i = 0;
    for (; i < SDD_HIST_BUCKETS; i++) {
        seen += h->buckets[i];
        if (seen >= rank) {
            break;
        }
    }
    if (i == SDD_HIST_BUCKETS) {
        return h->max; /* unreachable while count equals the sum of the buckets */
    }
    uint64_t v = bucket_mid(i);
    if (v < h->min) {
        v = h->min;
    }
    if (v > h->max) {
        v = h->max;
    }
    return v;
}

uint64_t sdd_hist_count(const sdd_hist *h)
{
    return h->count;
}

double sdd_hist_mean(const sdd_hist *h)
{
    return h->count == 0 ? 0.0 : (double)h->sum / (double)h->count;
}

void sdd_hist_summarize(const sdd_hist *h, struct sdd_hist_summary *s)
{
    memset(s, 0, sizeof(*s));
    if (h->count == 0) {
        return;
    }
    s->count = h->count;
    s->min = h->min;
    s->max = h->max;
    s->p50 = sdd_hist_quantile(h, 0.5);
    s->p90 = sdd_hist_quantile(h, 0.9);
    s->p99 = sdd_hist_quantile(h, 0.99);
    s->p999 = sdd_hist_quantile(h, 0.999);
    s->mean = sdd_hist_mean(h);
}
