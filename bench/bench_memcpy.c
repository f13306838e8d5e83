/* Single-thread memcpy probe: the copy bandwidth (GB/s, 10^9 B/s) and time per copy of one
 * core for transfer sizes from 8 B to 16 MiB. bench/transport.sh prints it beside the transport
 * numbers as the ceiling a shared-memory transport that copies once can approach. Source and
 * destination are reused across copies, so small sizes are cache-hot, as a transport's
 * registered buffers are.
 *
 * Usage: bench_memcpy [--sizes LIST] [--time-ms MS] [--reps N] [--json] [--smoke]
 *   LIST   sizes as "8,4096,64K" or "8:16M" (powers of two from..to); K/M/G suffixes.
 *   MS     target time of one sample (default 20); each size reports the median of N samples.
 *   --json one JSON object per size on stdout; the readable table then goes to stderr.
 *   --smoke a tiny, fast run for ctest. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sddaq/clock.h"

#define MAX_SIZES 64
#define MAX_REPS  31
#define MAX_SIZE  (1ull << 30)

struct opts {
    uint64_t sizes[MAX_SIZES];
    int nsizes;
    double time_ms;
    int reps;
    int json;
};

/* Parse "64", "4K", "16M" (binary suffixes). Returns 0 on success. */
static int parse_size(const char *s, const char *end, uint64_t *out)
{
    char *stop;
    unsigned long long v;
    uint64_t mult = 1;

    if (s == end || *s < '0' || *s > '9') {
        return -1;
    }
    v = strtoull(s, &stop, 10);
    if (stop < end) {
        switch (*stop) {
        case 'k':
        case 'K':
            mult = 1ull << 10;
            break;
        case 'm':
        case 'M':
            mult = 1ull << 20;
            break;
        case 'g':
        case 'G':
            mult = 1ull << 30;
            break;
        default:
            return -1;
        }
        stop++;
    }
    if (stop != end || v == 0 || v > MAX_SIZE / mult) {
        return -1;
    }
    *out = (uint64_t)v * mult;
    return 0;
}

/* Parse a size list: comma-separated sizes or one "from:to" range of powers of two. */
static int parse_sizes(const char *list, struct opts *o)
{
    const char *colon = strchr(list, ':');
    const char *p = list;

    o->nsizes = 0;
    if (colon) {
        uint64_t lo, hi;

        if (parse_size(list, colon, &lo) != 0 ||
            parse_size(colon + 1, colon + 1 + strlen(colon + 1), &hi) != 0 || lo > hi) {
            return -1;
        }
        for (uint64_t s = lo; s <= hi && o->nsizes < MAX_SIZES; s *= 2) {
            o->sizes[o->nsizes++] = s;
        }
        return 0;
    }
    while (*p) {
        const char *comma = strchr(p, ',');
        const char *end = comma ? comma : p + strlen(p);

        if (o->nsizes == MAX_SIZES || parse_size(p, end, &o->sizes[o->nsizes]) != 0) {
            return -1;
        }
        o->nsizes++;
        p = comma ? comma + 1 : end;
    }
    return o->nsizes > 0 ? 0 : -1;
}

/* Copy n times; the empty asm with a memory clobber makes every copy observable, so the
 * compiler can neither drop nor merge them. */
static uint64_t copy_loop(void *dst, const void *src, size_t size, uint64_t n)
{
    uint64_t t0 = sdd_now_ns();

    for (uint64_t i = 0; i < n; i++) {
        memcpy(dst, src, size);
        __asm__ __volatile__("" : : "r"(dst), "r"(src) : "memory");
    }
    return sdd_now_ns() - t0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

/* Median ns per copy of `reps` samples, each about time_ms long. Returns a negative value when
 * the buffers cannot be allocated. */
static double measure(uint64_t size, double time_ms, int reps)
{
    size_t alloc = (size_t)((size + 4095) & ~4095ull);
    unsigned char *src = aligned_alloc(4096, alloc);
    unsigned char *dst = aligned_alloc(4096, alloc);
    double samples[MAX_REPS];
    double target_ns = time_ms * 1e6;
    double result = -1.0;
    uint64_t n = 1;

    if (!src || !dst) {
        goto out_free;
    }
    /* Touch every page so page faults stay out of the timing, and give the source non-zero
     * content. */
    for (size_t i = 0; i < alloc; i++) {
        src[i] = (unsigned char)(i * 131u + 7u);
    }
    memset(dst, 0, alloc);

    /* Calibrate: grow n until one sample takes at least a tenth of the target. */
    for (;;) {
        uint64_t ns = copy_loop(dst, src, (size_t)size, n);

        if ((double)ns >= target_ns / 10.0 || n >= (1ull << 40)) {
            double per = (double)ns / (double)n;
            double want = per > 0.0 ? target_ns / per : (double)n * 10.0;

            n = want < 1.0 ? 1 : (uint64_t)want;
            break;
        }
        n *= 10;
    }
    for (int r = 0; r < reps; r++) {
        samples[r] = (double)copy_loop(dst, src, (size_t)size, n) / (double)n;
    }
    qsort(samples, (size_t)reps, sizeof(samples[0]), cmp_double);
    result = samples[reps / 2];
    if (dst[size - 1] != src[size - 1]) {
        result = -1.0; /* cannot happen; reading dst also keeps the copies alive */
    }

out_free:
    free(src);
    free(dst);
    return result;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: bench_memcpy [--sizes LIST] [--time-ms MS] [--reps N] [--json] "
               "[--smoke]\n"
               "  LIST: \"8,4096,64K\" or \"8:16M\" (powers of two); default 8:16M\n");
}

int main(int argc, char **argv)
{
    struct opts o = {.time_ms = 20.0, .reps = 5};
    FILE *table;
    int rc = 0;

    parse_sizes("8:16M", &o);
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--smoke") == 0) {
            parse_sizes("8,4K,1M", &o);
            o.time_ms = 2.0;
            o.reps = 3;
        } else if (strcmp(argv[i], "--json") == 0) {
            o.json = 1;
        } else if (strcmp(argv[i], "--sizes") == 0 && i + 1 < argc) {
            if (parse_sizes(argv[++i], &o) != 0) {
                fprintf(stderr, "bench_memcpy: bad size list '%s'\n", argv[i]);
                return 2;
            }
        } else if (strcmp(argv[i], "--time-ms") == 0 && i + 1 < argc) {
            o.time_ms = atof(argv[++i]);
            if (!(o.time_ms > 0.0 && o.time_ms <= 10000.0)) {
                fprintf(stderr, "bench_memcpy: --time-ms wants 0 < MS <= 10000\n");
                return 2;
            }
        } else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
            o.reps = atoi(argv[++i]);
            if (o.reps < 1 || o.reps > MAX_REPS) {
                fprintf(stderr, "bench_memcpy: --reps wants 1..%d\n", MAX_REPS);
                return 2;
            }
        } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return 0;
        } else {
            usage(stderr);
            return 2;
        }
    }

    table = o.json ? stderr : stdout;
    fprintf(table, "# memcpy, one thread, median of %d samples of ~%.0f ms\n", o.reps, o.time_ms);
    fprintf(table, "%12s %14s %10s\n", "bytes", "ns/copy", "GB/s");
    for (int i = 0; i < o.nsizes; i++) {
        uint64_t size = o.sizes[i];
        double ns = measure(size, o.time_ms, o.reps);
        double gbps;

        if (ns < 0.0) {
            fprintf(stderr, "bench_memcpy: cannot allocate 2 x %" PRIu64 " bytes\n", size);
            rc = 1;
            continue;
        }
        gbps = ns > 0.0 ? (double)size / ns : 0.0; /* bytes per ns = GB/s */
        fprintf(table, "%12" PRIu64 " %14.3f %10.2f\n", size, ns, gbps);
        if (o.json) {
            printf("{\"tool\":\"memcpy\",\"size\":%" PRIu64
                   ",\"ns_per_copy\":%.4f,\"GBps\":%.4f}\n",
                   size, ns, gbps);
            fflush(stdout);
        }
    }
    return rc;
}
