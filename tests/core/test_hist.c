/* Histograms: empty state, exact small values, bucket mapping over the whole uint64_t range,
 * quantiles of known distributions within the documented 1/64 relative error, exact min/max
 * and mean, record_n, merge equal to recording everything in one histogram, reset. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "sddaq/hist.h"

/* The documented bound: |quantile - true sample| <= true sample / 64. */
static int within_error(uint64_t got, uint64_t want)
{
    uint64_t diff = got > want ? got - want : want - got;
    return diff <= want / 64;
}

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a;
    uint64_t y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* The sample of rank ceil(q * n) in sorted[], the definition sdd_hist_quantile uses. */
static uint64_t true_quantile(const uint64_t *sorted, size_t n, double q)
{
    double r = ceil(q * (double)n);
    size_t rank = r < 1 ? 1 : (r > (double)n ? n : (size_t)r);
    return sorted[rank - 1];
}

static void test_empty(void)
{
    static sdd_hist h;
    sdd_hist_init(&h);
    CHECK_EQ(sdd_hist_count(&h), 0);
    CHECK_EQ(sdd_hist_quantile(&h, 0.0), 0);
    CHECK_EQ(sdd_hist_quantile(&h, 0.5), 0);
    CHECK_EQ(sdd_hist_quantile(&h, 1.0), 0);
    CHECK(sdd_hist_mean(&h) == 0.0);
    struct sdd_hist_summary s;
    memset(&s, 0xff, sizeof(s));
    sdd_hist_summarize(&h, &s);
    CHECK_EQ(s.count, 0);
    CHECK_EQ(s.min, 0);
    CHECK_EQ(s.p50, 0);
    CHECK_EQ(s.p999, 0);
    CHECK_EQ(s.max, 0);
    CHECK(s.mean == 0.0);
    /* Recording zero times changes nothing. */
    sdd_hist_record_n(&h, 12345, 0);
    CHECK_EQ(sdd_hist_count(&h), 0);
    CHECK_EQ(h.min, UINT64_MAX);
    CHECK_EQ(h.max, 0);
    CHECK(sizeof(sdd_hist) <= 16 * 1024);
}

static void test_exact_small_values(void)
{
    static sdd_hist h;
    sdd_hist_init(&h);
    /* 0..31 once each: every quantile lands on an exact value. */
    for (uint64_t v = 0; v < 32; v++) {
        sdd_hist_record(&h, v);
    }
    CHECK_EQ(sdd_hist_count(&h), 32);
    for (uint64_t k = 1; k <= 32; k++) {
        CHECK_EQ(sdd_hist_quantile(&h, (double)k / 32.0), k - 1);
    }
    CHECK_EQ(sdd_hist_quantile(&h, 0.0), 0);
    CHECK_EQ(sdd_hist_quantile(&h, 1.0), 31);
    CHECK(fabs(sdd_hist_mean(&h) - 15.5) < 1e-9);

    /* Each small value alone, with a far outlier: the median is still exact. */
    for (uint64_t v = 0; v < 32; v++) {
        sdd_hist_init(&h);
        sdd_hist_record(&h, v);
        sdd_hist_record(&h, v);
        sdd_hist_record(&h, 1000000);
        CHECK_EQ(sdd_hist_quantile(&h, 0.5), v);
    }
}

static void test_bucket_mapping(void)
{
    /* Boundaries: contiguous indices, each power of two starts a new row. */
    CHECK_EQ(sdd_hist_bucket(0), 0);
    CHECK_EQ(sdd_hist_bucket(31), 31);
    CHECK_EQ(sdd_hist_bucket(32), 32);
    CHECK_EQ(sdd_hist_bucket(63), 63);
    CHECK_EQ(sdd_hist_bucket(64), 64);
    CHECK_EQ(sdd_hist_bucket(65), 64);
    CHECK_EQ(sdd_hist_bucket(66), 65);
    CHECK_EQ(sdd_hist_bucket(UINT64_MAX), SDD_HIST_BUCKETS - 1);
    CHECK_EQ(sdd_hist_bucket((uint64_t)1 << 63), SDD_HIST_BUCKETS - 32);
    /* Monotonic across every power of two and its neighbours. */
    int nonmono = 0;
    for (unsigned e = 1; e < 64; e++) {
        uint64_t p = (uint64_t)1 << e;
        nonmono += sdd_hist_bucket(p - 1) > sdd_hist_bucket(p);
        nonmono += sdd_hist_bucket(p) > sdd_hist_bucket(p + 1);
    }
    CHECK_EQ(nonmono, 0);

    /* Random values over the whole range, each between two far outliers: the median reports
     * the value's own bucket within the bound. Values near 2^64 must not overflow. */
    static sdd_hist h;
    uint64_t seed = 1;
    int out_of_bound = 0;
    for (int i = 0; i < 20000; i++) {
        uint64_t v = splitmix(&seed) >> (splitmix(&seed) % 64);
        if (i == 0) {
            v = UINT64_MAX - 1;
        }
        sdd_hist_init(&h);
        sdd_hist_record(&h, 0);
        sdd_hist_record(&h, v);
        sdd_hist_record(&h, UINT64_MAX);
        out_of_bound += !within_error(sdd_hist_quantile(&h, 0.5), v);
    }
    CHECK_EQ(out_of_bound, 0);
}

static void test_uniform_distribution(void)
{
    static sdd_hist h;
    sdd_hist_init(&h);
    const uint64_t n = 100000;
    for (uint64_t v = 1; v <= n; v++) {
        sdd_hist_record(&h, v);
    }
    /* Sample of rank ceil(q * n) is exactly that rank. */
    const double qs[] = {0.001, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 0.999, 0.9999};
    for (size_t i = 0; i < sizeof(qs) / sizeof(qs[0]); i++) {
        uint64_t want = (uint64_t)ceil(qs[i] * (double)n);
        uint64_t got = sdd_hist_quantile(&h, qs[i]);
        if (!within_error(got, want)) {
            fprintf(stderr, "uniform q=%g: got %" PRIu64 ", want %" PRIu64 "\n", qs[i], got, want);
        }
        CHECK(within_error(got, want));
    }
    CHECK_EQ(sdd_hist_quantile(&h, 0.0), 1);
    CHECK_EQ(sdd_hist_quantile(&h, 1.0), n);
    CHECK(fabs(sdd_hist_mean(&h) - (double)(n + 1) / 2.0) < 1e-6);
    struct sdd_hist_summary s;
    sdd_hist_summarize(&h, &s);
    CHECK_EQ(s.count, n);
    CHECK_EQ(s.min, 1);
    CHECK_EQ(s.max, n);
    CHECK(within_error(s.p50, 50000));
    CHECK(within_error(s.p90, 90000));
    CHECK(within_error(s.p99, 99000));
    CHECK(within_error(s.p999, 99900));
    CHECK(s.p50 <= s.p90 && s.p90 <= s.p99 && s.p99 <= s.p999 && s.p999 <= s.max);
}

/* Heavy-tailed latencies (log-uniform over 100 ns .. 10 ms plus rare spikes) against the
 * exact quantiles of the sorted samples. */
static void test_heavy_tail_distribution(void)
{
    static sdd_hist h;
    sdd_hist_init(&h);
    const size_t n = 200000;
    uint64_t *v = malloc(n * sizeof(*v));
    CHECK_REQUIRE(v != NULL);
    uint64_t seed = 42;
    for (size_t i = 0; i < n; i++) {
        double u = (double)(splitmix(&seed) >> 11) / 9007199254740992.0; /* [0,1) */
        v[i] = (uint64_t)(100.0 * pow(1e5, u));
        if (splitmix(&seed) % 1000 == 0) {
            v[i] *= 1000; /* spike */
        }
        sdd_hist_record(&h, v[i]);
    }
    qsort(v, n, sizeof(*v), cmp_u64);
    const double qs[] = {0.0001, 0.01, 0.1, 0.5, 0.9, 0.99, 0.999, 0.9999, 0.99999};
    int out_of_bound = 0;
    for (size_t i = 0; i < sizeof(qs) / sizeof(qs[0]); i++) {
        uint64_t want = true_quantile(v, n, qs[i]);
        uint64_t got = sdd_hist_quantile(&h, qs[i]);
        if (!within_error(got, want)) {
            fprintf(stderr, "heavy tail q=%g: got %" PRIu64 ", want %" PRIu64 "\n", qs[i], got,
                    want);
            out_of_bound++;
        }
    }
    CHECK_EQ(out_of_bound, 0);
    CHECK_EQ(sdd_hist_quantile(&h, 0.0), v[0]);
    CHECK_EQ(sdd_hist_quantile(&h, 1.0), v[n - 1]);
    /* Out-of-range q is clamped; NaN counts as 0. */
    CHECK_EQ(sdd_hist_quantile(&h, -1.0), v[0]);
    CHECK_EQ(sdd_hist_quantile(&h, 7.0), v[n - 1]);
    CHECK_EQ(sdd_hist_quantile(&h, NAN), v[0]);
    free(v);
}

static void test_min_max_mean_exact(void)
{
    static sdd_hist h;
    sdd_hist_init(&h);
    sdd_hist_record(&h, 1000003);
    sdd_hist_record(&h, 7777777777ull);
    sdd_hist_record(&h, 123456789);
    CHECK_EQ(sdd_hist_quantile(&h, 0.0), 1000003);
    CHECK_EQ(sdd_hist_quantile(&h, 1.0), 7777777777ull);
    /* Quantiles in the top and bottom buckets never leave [min, max]. */
    CHECK(sdd_hist_quantile(&h, 0.99) <= 7777777777ull);
    CHECK(sdd_hist_quantile(&h, 0.01) >= 1000003);
    CHECK(fabs(sdd_hist_mean(&h) - (1000003.0 + 7777777777.0 + 123456789.0) / 3.0) < 1e-3);

    /* A single value: every quantile is that value exactly. */
    sdd_hist_init(&h);
    sdd_hist_record(&h, 987654321);
    CHECK_EQ(sdd_hist_quantile(&h, 0.0), 987654321);
    CHECK_EQ(sdd_hist_quantile(&h, 0.5), 987654321);
    CHECK_EQ(sdd_hist_quantile(&h, 1.0), 987654321);
}

static void test_record_n_and_merge(void)
{
    static sdd_hist a, b, all, n5, one5;
    sdd_hist_init(&a);
    sdd_hist_init(&b);
    sdd_hist_init(&all);
    uint64_t seed = 7;
    for (int i = 0; i < 50000; i++) {
        uint64_t v = splitmix(&seed) >> (splitmix(&seed) % 60);
        sdd_hist_record(i % 3 ? &a : &b, v);
        sdd_hist_record(&all, v);
    }
    sdd_hist_merge(&a, &b);
    CHECK(memcmp(&a, &all, sizeof(a)) == 0);
    CHECK_EQ(sdd_hist_count(&a), 50000);

    /* Merging an empty histogram changes nothing; merging into an empty one copies. */
    static sdd_hist empty, copy;
    sdd_hist_init(&empty);
    sdd_hist_merge(&a, &empty);
    CHECK(memcmp(&a, &all, sizeof(a)) == 0);
    sdd_hist_init(&copy);
    sdd_hist_merge(&copy, &all);
    CHECK(memcmp(&copy, &all, sizeof(all)) == 0);

    /* record_n(v, 5) equals five record(v). */
    sdd_hist_init(&n5);
    sdd_hist_init(&one5);
    sdd_hist_record(&n5, 3);
    sdd_hist_record(&one5, 3);
    sdd_hist_record_n(&n5, 4096, 5);
    for (int i = 0; i < 5; i++) {
        sdd_hist_record(&one5, 4096);
    }
    CHECK(memcmp(&n5, &one5, sizeof(n5)) == 0);

    /* Reset returns to the empty state. */
    sdd_hist_reset(&all);
    CHECK(memcmp(&all, &empty, sizeof(all)) == 0);
}

int main(void)
{
    test_empty();
    test_exact_small_values();
    test_bucket_mapping();
    test_uniform_distribution();
    test_heavy_tail_distribution();
    test_min_max_mean_exact();
    test_record_n_and_merge();
    return check_finish();
}
