/* sddaq trigger hough bench: per-event latency of the Hough finder on one core and aggregate
 * throughput with one pinned finder per core, for both maps and both implementations on the
 * same pre-generated events. The `seed` implementation (a literal port of the seed's cell
 * layout) runs beside `fast` in every round as the naive reference. Variants alternate in
 * rounds (A B A B ...) and each figure is reported as the median over rounds with its min-max,
 * since a shared machine is noisy. Unpacking the 48-bit stubs is timed separately: the seed's
 * GPU figures (compute only) do not include it. */
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sddaq/clock.h"
#include "sddaq/cpu.h"
#include "trigger.h"

#define GPU_RECT_US   3.73 /* seed Table 5.1, K40c computation, rectangular */
#define GPU_HEX_US    4.94 /* seed Table 5.1, hexagonal */
#define CMS_BUDGET_US 4.0
#define MAX_VARIANTS  4
#define MAX_THREADS   256

/* The events as the finder sees them, in one flat array, and in their packed form. */
struct bench_set {
    uint64_t n;
    uint32_t *off; /* first stub of event i */
    uint32_t *cnt; /* stubs of event i */
    sdd_stub *stubs;
    uint8_t *packed; /* SDD_STUB_PACKED_BYTES per stub, same order */
    uint64_t total;
    uint32_t smin, smax;
};

struct round_stats {
    double mean, p50, p99, max, evs; /* us, us, us, us, events/s */
};

struct variant {
    sdd_hough_opts fo;
    sdd_hough *h;
    struct round_stats *single; /* per round */
    double *batch;              /* aggregate events/s per round */
    double cands;               /* candidates per event */
    sdd_hough *workers[MAX_THREADS];
};

/* Start line of a batch run: workers warm up, check in, and time from the moment all have. */
struct start_line {
    atomic_int ready;
    atomic_bool abort;
    int threads;
};

struct worker {
    pthread_t thread;
    int cpu;
    sdd_hough *h;
    sdd_hough_track *out;
    const struct bench_set *set;
    int passes;
    struct start_line *start;
    uint64_t t0, t1, events;
};

struct summary3 {
    double median, min, max;
};

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median and range of v[0..n-1] taken `stride` doubles apart (one field of a struct array). */
static struct summary3 over_rounds(const double *v, int n, size_t stride)
{
    double tmp[4096];
    n = n < 4096 ? n : 4096;
    for (int i = 0; i < n; i++) {
        tmp[i] = v[(size_t)i * stride];
    }
    qsort(tmp, (size_t)n, sizeof(double), cmp_double);
    struct summary3 s = {NAN, NAN, NAN};
    if (n > 0) {
        s.min = tmp[0];
        s.max = tmp[n - 1];
        s.median = n % 2 ? tmp[n / 2] : (tmp[n / 2 - 1] + tmp[n / 2]) / 2;
    }
    return s;
}

#define FIELD_STRIDE (sizeof(struct round_stats) / sizeof(double))

static struct summary3 single_stat(const struct variant *v, int rounds, size_t field)
{
    return over_rounds((const double *)v->single + field, rounds, FIELD_STRIDE);
}

static void set_free(struct bench_set *s)
{
    free(s->off);
    free(s->cnt);
    free(s->stubs);
    free(s->packed);
}

static int set_load(struct bench_set *set, const struct trig_opts *o, uint64_t events,
                    sdd_hough_geom *geom)
{
    struct trig_source src;
    if (trig_source_open(&src, o, o->pu[0], events) != 0) {
        return -1;
    }
    *geom = src.geom;
    uint64_t cap = o->input ? 1024 : events, stub_cap = cap * 256;
    sdd_hough_event *ev = malloc(sizeof(*ev));
    *set = (struct bench_set){.smin = UINT32_MAX};
    set->off = malloc(cap * sizeof(*set->off));
    set->cnt = malloc(cap * sizeof(*set->cnt));
    set->stubs = malloc(stub_cap * sizeof(*set->stubs));
    int rc = ev != NULL && set->off != NULL && set->cnt != NULL && set->stubs != NULL ? 0 : -1;
    while (rc == 0 && (rc = trig_source_next(&src, ev)) == 1) {
        rc = 0;
        if (set->n == cap || set->total + ev->nstubs > stub_cap) {
            cap = set->n == cap ? cap * 2 : cap;
            stub_cap = set->total + ev->nstubs > stub_cap ? stub_cap * 2 + ev->nstubs : stub_cap;
            uint32_t *off = realloc(set->off, cap * sizeof(*off));
            set->off = off ? off : set->off;
            uint32_t *cnt = realloc(set->cnt, cap * sizeof(*cnt));
            set->cnt = cnt ? cnt : set->cnt;
            sdd_stub *st = realloc(set->stubs, stub_cap * sizeof(*st));
            set->stubs = st ? st : set->stubs;
            if (off == NULL || cnt == NULL || st == NULL) {
                rc = -1;
                break;
            }
        }
        set->off[set->n] = (uint32_t)set->total;
        set->cnt[set->n] = ev->nstubs;
        memcpy(set->stubs + set->total, ev->stubs, ev->nstubs * sizeof(sdd_stub));
        set->total += ev->nstubs;
        set->smin = ev->nstubs < set->smin ? ev->nstubs : set->smin;
        set->smax = ev->nstubs > set->smax ? ev->nstubs : set->smax;
        set->n++;
    }
    free(ev);
    trig_source_close(&src);
    if (rc == 0 && set->n == 0) {
        fprintf(stderr, "sddaq trigger hough bench: no events\n");
        rc = -1;
    }
    if (rc == 0) {
        set->packed = malloc(set->total * SDD_STUB_PACKED_BYTES + 1);
        rc = set->packed ? 0 : -1;
        for (uint64_t i = 0; rc == 0 && i < set->total; i++) {
            rc = sdd_stub_pack(&set->stubs[i], set->packed + i * SDD_STUB_PACKED_BYTES);
        }
        if (rc != 0) {
            fprintf(stderr, "sddaq trigger hough bench: cannot pack the events' stubs\n");
        }
    }
    if (rc != 0) {
        set_free(set);
        return -1;
    }
    return 0;
}

/* The CPUs this process may run on, in order. */
static int allowed_cpus(int *cpus, int max)
{
    cpu_set_t mask;
    int n = 0;
    if (sched_getaffinity(0, sizeof(mask), &mask) == 0) {
        for (int c = 0; c < CPU_SETSIZE && n < max; c++) {
            if (CPU_ISSET(c, &mask)) {
                cpus[n++] = c;
            }
        }
    }
    if (n == 0) {
        cpus[n++] = 0;
    }
    return n;
}

/* Smallest cost of one pair of clock readings, which every latency sample includes. */
static uint64_t timer_overhead(void)
{
    uint64_t best = UINT64_MAX;
    for (int i = 0; i < 10000; i++) {
        uint64_t a = sdd_now_ns(), b = sdd_now_ns();
        best = b - a < best ? b - a : best;
    }
    return best;
}

static void summarize_round(const sdd_hist *h, struct round_stats *r)
{
    struct sdd_hist_summary s;
    sdd_hist_summarize(h, &s);
    r->mean = s.mean / 1e3;
    r->p50 = (double)s.p50 / 1e3;
    r->p99 = (double)s.p99 / 1e3;
    r->max = (double)s.max / 1e3;
    r->evs = s.mean > 0 ? 1e9 / s.mean : 0;
}

/* One variant on this core: a warm-up pass, then timed passes, each call timed alone. */
static void run_single(struct variant *v, const struct bench_set *set, int passes,
                       sdd_hough_track *out, sdd_hist *h, bool count)
{
    for (uint64_t e = 0; e < set->n; e++) {
        sdd_hough_find(v->h, set->stubs + set->off[e], set->cnt[e], out, TRIG_MAX_CELLS);
    }
    uint64_t cands = 0;
    for (int p = 0; p < passes; p++) {
        for (uint64_t e = 0; e < set->n; e++) {
            uint64_t t0 = sdd_now_ns();
            int c =
                sdd_hough_find(v->h, set->stubs + set->off[e], set->cnt[e], out, TRIG_MAX_CELLS);
            uint64_t t1 = sdd_now_ns();
            sdd_hist_record(h, t1 - t0);
            cands += c > 0 ? (uint64_t)c : 0;
        }
    }
    if (count) {
        v->cands = (double)cands / (double)(set->n * (uint64_t)passes);
    }
}

static int run_unpack(const struct bench_set *set, int passes, sdd_stub *buf, sdd_hist *h)
{
    for (int p = 0; p <= passes; p++) { /* pass 0 warms up */
        for (uint64_t e = 0; e < set->n; e++) {
            size_t n = 0;
            const uint8_t *src = set->packed + (size_t)set->off[e] * SDD_STUB_PACKED_BYTES;
            uint64_t t0 = sdd_now_ns();
            sdd_err err = sdd_stubs_unpack(src, (size_t)set->cnt[e] * SDD_STUB_PACKED_BYTES, buf,
                                           SDD_HOUGH_MAX_STUBS, &n, NULL);
            uint64_t t1 = sdd_now_ns();
            if (err != SDD_OK || n != set->cnt[e]) {
                fprintf(stderr, "sddaq trigger hough bench: unpack: %s\n", sdd_strerror(err));
                return -1;
            }
            if (p > 0) {
                sdd_hist_record(h, t1 - t0);
            }
        }
    }
    return 0;
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    sdd_cpu_pin_self(w->cpu); /* a failure is logged; the figure is then unpinned */
    const struct bench_set *set = w->set;
    for (uint64_t e = 0; e < set->n; e++) {
        sdd_hough_find(w->h, set->stubs + set->off[e], set->cnt[e], w->out, TRIG_MAX_CELLS);
    }
    /* Pairs with the other workers' increments: all have warmed up once this count is full. */
    atomic_fetch_add_explicit(&w->start->ready, 1, memory_order_acq_rel);
    while (atomic_load_explicit(&w->start->ready, memory_order_acquire) < w->start->threads) {
        if (atomic_load_explicit(&w->start->abort, memory_order_relaxed)) {
            return NULL;
        }
        sched_yield(); /* more threads than CPUs must not starve the ones still warming up */
    }
    w->t0 = sdd_now_ns();
    for (int p = 0; p < w->passes; p++) {
        for (uint64_t e = 0; e < set->n; e++) {
            sdd_hough_find(w->h, set->stubs + set->off[e], set->cnt[e], w->out, TRIG_MAX_CELLS);
        }
    }
    w->t1 = sdd_now_ns();
    w->events = set->n * (uint64_t)w->passes;
    return NULL;
}

/* One finder per thread, each over the whole event set; aggregate events/s from the first
 * start to the last finish. */
static double run_batch(struct variant *v, const struct bench_set *set, int passes,
                        struct worker *w, int threads, const int *cpus, int ncpus)
{
    struct start_line start = {.threads = threads};
    atomic_init(&start.ready, 0);
    atomic_init(&start.abort, false);
    int started = 0;
    for (int i = 0; i < threads; i++) {
        w[i].cpu = cpus[i % ncpus];
        w[i].h = v->workers[i];
        w[i].set = set;
        w[i].passes = passes;
        w[i].start = &start;
        w[i].t0 = w[i].t1 = w[i].events = 0;
        if (pthread_create(&w[i].thread, NULL, worker_main, &w[i]) != 0) {
            break;
        }
        started++;
    }
    if (started < threads) {
        fprintf(stderr, "sddaq trigger hough bench: cannot start %d threads\n", threads);
        atomic_store_explicit(&start.abort, true, memory_order_relaxed);
    }
    uint64_t first = UINT64_MAX, last = 0, events = 0;
    for (int i = 0; i < started; i++) {
        pthread_join(w[i].thread, NULL);
        first = w[i].t0 < first ? w[i].t0 : first;
        last = w[i].t1 > last ? w[i].t1 : last;
        events += w[i].events;
    }
    if (started < threads) {
        return -1;
    }
    return last > first ? (double)events * 1e9 / (double)(last - first) : 0;
}

/* ---- output -------------------------------------------------------------------------------- */

static double gpu_ref(const struct variant *v)
{
    return v->fo.shape == SDD_HOUGH_HEX ? GPU_HEX_US : GPU_RECT_US;
}

static const struct variant *find_variant(const struct variant *vs, int nv, sdd_hough_shape s,
                                          sdd_hough_impl i)
{
    for (int k = 0; k < nv; k++) {
        if (vs[k].fo.shape == s && vs[k].fo.impl == i) {
            return &vs[k];
        }
    }
    return NULL;
}

/* Per round a/b of the mean latencies, median and range over rounds. */
static struct summary3 mean_ratio(const struct variant *a, const struct variant *b, int rounds)
{
    double r[4096];
    int n = rounds < 4096 ? rounds : 4096;
    for (int i = 0; i < n; i++) {
        r[i] = b->single[i].mean > 0 ? a->single[i].mean / b->single[i].mean : NAN;
    }
    return over_rounds(r, n, 1);
}

static void j_summary(struct tjson *j, const char *key, struct summary3 s)
{
    tj_obj(j, key);
    tj_num(j, "median", s.median);
    tj_num(j, "min", s.min);
    tj_num(j, "max", s.max);
    tj_end(j);
}

static char *fmt3(char *buf, size_t len, struct summary3 s, double scale, int prec)
{
    snprintf(buf, len, "%.*f [%.*f-%.*f]", prec, s.median * scale, prec, s.min * scale, prec,
             s.max * scale);
    return buf;
}

static void print_table(const struct trig_opts *o, const struct bench_set *set,
                        const sdd_hough_geom *g, const struct variant *vs, int nv,
                        const struct round_stats *unpack, int rounds, int passes, int threads,
                        const int *cpus, int ncpus, uint64_t overhead)
{
    char src[256], a[64], b[64], c[64], d[64];
    if (o->input) {
        snprintf(src, sizeof(src), "file %s", o->input);
    } else {
        snprintf(src, sizeof(src), "generated, PU %g, seed %" PRIu64, o->pu[0], o->seed);
    }
    printf("events      %" PRIu64 " (%s), %.1f stubs/event [%u-%u]\n", set->n, src,
           (double)set->total / (double)set->n, set->smin, set->smax);
    printf("finder      %ux%u maps, bend window ", g->ncols, g->nrows);
    float bw = o->bend_given ? o->bend_window : g->bend_window;
    printf(bw > 0 ? "%.3g c/GeV" : "off", bw);
    printf(", merge %s; fast impl on %s vectors\n", o->merge ? "on" : "off",
           trig_simd_taken(o) ? trig_simd_taken(o) : "(unavailable)");
    printf("method      %d round(s), variants alternating; each turn a warm-up pass, then %d timed "
           "pass(es);\n            figures: median over rounds [min-max]; clock pair %" PRIu64
           " ns, included\n\n",
           rounds, passes, overhead);
    printf("single core, us per event (seed GPU compute and CMS budget for reference)\n");
    printf("%-4s %-4s %7s  %-20s %-20s %-20s %8s  %-22s %7s %7s %6s\n", "map", "impl", "cands",
           "mean", "p50", "p99", "max", "kevents/s per core", "x_seed", "GPU_us", "CMS_us");
    for (int k = 0; k < nv; k++) {
        const struct variant *v = &vs[k];
        struct summary3 mx = single_stat(v, rounds, 3);
        char x[32] = "-";
        const struct variant *base = find_variant(vs, nv, v->fo.shape, SDD_HOUGH_SEED);
        if (v->fo.impl == SDD_HOUGH_FAST && base != NULL) {
            snprintf(x, sizeof(x), "%.1f", mean_ratio(base, v, rounds).median);
        }
        printf("%-4s %-4s %7.2f  %-20s %-20s %-20s %8.2f  %-22s %7s %7.2f %6.2f\n",
               trig_shape_name(v->fo.shape), trig_impl_name(v->fo.impl), v->cands,
               fmt3(a, sizeof(a), single_stat(v, rounds, 0), 1, 2),
               fmt3(b, sizeof(b), single_stat(v, rounds, 1), 1, 2),
               fmt3(c, sizeof(c), single_stat(v, rounds, 2), 1, 2), mx.max,
               fmt3(d, sizeof(d), single_stat(v, rounds, 4), 1e-3, 1), x, gpu_ref(v),
               CMS_BUDGET_US);
    }
    printf("%-4s %-4s %7s  %-20s %-20s %-20s %8.2f  (not in the GPU figures)\n", "-", "unpk", "",
           fmt3(a, sizeof(a), over_rounds(&unpack->mean, rounds, FIELD_STRIDE), 1, 3),
           fmt3(b, sizeof(b), over_rounds(&unpack->p50, rounds, FIELD_STRIDE), 1, 3),
           fmt3(c, sizeof(c), over_rounds(&unpack->p99, rounds, FIELD_STRIDE), 1, 3),
           over_rounds(&unpack->max, rounds, FIELD_STRIDE).max);
    printf("(kevents/s = thousand events per second; x_seed = seed impl mean / this mean, per "
           "round; unpk = "
           "sdd_stubs_unpack of the packed 48-bit stubs)\n");
    for (int i = 0; i < 2; i++) {
        const struct variant *r = find_variant(vs, nv, SDD_HOUGH_RECT, (sdd_hough_impl)i);
        const struct variant *h = find_variant(vs, nv, SDD_HOUGH_HEX, (sdd_hough_impl)i);
        if (r != NULL && h != NULL) {
            printf("hex/rect mean time, %s impl: %s (seed GPU %.2f)\n",
                   trig_impl_name((sdd_hough_impl)i),
                   fmt3(a, sizeof(a), mean_ratio(h, r, rounds), 1, 2), GPU_HEX_US / GPU_RECT_US);
        }
    }
    printf("\nbatch, %d thread(s) pinned to CPU", threads);
    for (int i = 0; i < threads && i < 16; i++) {
        printf("%s%d", i ? "," : " ", cpus[i % ncpus]);
    }
    printf(", one finder each over all events\n");
    printf("%-4s %-4s %-26s %12s %10s\n", "map", "impl", "kevents/s aggregate", "per thread",
           "x 1 core");
    for (int k = 0; k < nv; k++) {
        const struct variant *v = &vs[k];
        struct summary3 agg = over_rounds(v->batch, rounds, 1);
        struct summary3 one = single_stat(v, rounds, 4);
        printf("%-4s %-4s %-26s %12.1f %10.2f\n", trig_shape_name(v->fo.shape),
               trig_impl_name(v->fo.impl), fmt3(a, sizeof(a), agg, 1e-3, 1),
               agg.median / threads / 1e3, one.median > 0 ? agg.median / one.median : 0);
    }
}

static void print_json(const struct trig_opts *o, const struct bench_set *set,
                       const sdd_hough_geom *g, const struct variant *vs, int nv,
                       const struct round_stats *unpack, int rounds, int passes, int threads,
                       const int *cpus, int ncpus, uint64_t overhead)
{
    static const char *names[] = {"mean_us", "p50_us", "p99_us", "max_us", "events_per_s"};
    struct tjson j;
    tj_begin(&j, stdout);
    tj_obj(&j, NULL);
    tj_str(&j, "bench", "trigger_hough");
    tj_uint(&j, "events", set->n);
    if (o->input) {
        tj_str(&j, "file", o->input);
    } else {
        tj_num(&j, "pu", o->pu[0]);
        tj_uint(&j, "seed", o->seed);
    }
    tj_num(&j, "stubs_per_event", (double)set->total / (double)set->n);
    tj_uint(&j, "stubs_min", set->smin);
    tj_uint(&j, "stubs_max", set->smax);
    float bw = o->bend_given ? o->bend_window : g->bend_window;
    tj_num(&j, "bend_window", bw > 0 ? bw : 0);
    tj_bool(&j, "merge", o->merge);
    tj_uint(&j, "rounds", (uint64_t)rounds);
    tj_uint(&j, "passes", (uint64_t)passes);
    tj_uint(&j, "threads", (uint64_t)threads);
    tj_arr(&j, "cpus");
    for (int i = 0; i < threads; i++) {
        tj_num(&j, NULL, cpus[i % ncpus]);
    }
    tj_end(&j);
    tj_uint(&j, "clock_pair_ns", overhead);
    tj_obj(&j, "reference");
    tj_num(&j, "seed_gpu_rect_us", GPU_RECT_US);
    tj_num(&j, "seed_gpu_hex_us", GPU_HEX_US);
    tj_num(&j, "cms_budget_us", CMS_BUDGET_US);
    tj_end(&j);
    tj_arr(&j, "variants");
    for (int k = 0; k < nv; k++) {
        const struct variant *v = &vs[k];
        tj_obj(&j, NULL);
        tj_str(&j, "map", trig_shape_name(v->fo.shape));
        tj_str(&j, "impl", trig_impl_name(v->fo.impl));
        tj_num(&j, "candidates_per_event", v->cands);
        tj_obj(&j, "single");
        for (size_t f = 0; f < FIELD_STRIDE; f++) {
            j_summary(&j, names[f], single_stat(v, rounds, f));
        }
        const struct variant *base = find_variant(vs, nv, v->fo.shape, SDD_HOUGH_SEED);
        if (v->fo.impl == SDD_HOUGH_FAST && base != NULL) {
            j_summary(&j, "speedup_vs_seed", mean_ratio(base, v, rounds));
        }
        tj_end(&j);
        tj_obj(&j, "batch");
        j_summary(&j, "events_per_s", over_rounds(v->batch, rounds, 1));
        tj_end(&j);
        tj_num(&j, "seed_gpu_us", gpu_ref(v));
        tj_end(&j);
    }
    tj_end(&j);
    tj_obj(&j, "unpack");
    for (size_t f = 0; f < FIELD_STRIDE; f++) {
        j_summary(&j, names[f], over_rounds((const double *)unpack + f, rounds, FIELD_STRIDE));
    }
    tj_end(&j);
    tj_finish(&j);
}

/* ---- driver -------------------------------------------------------------------------------- */

int trig_bench(const struct trig_opts *o)
{
    uint64_t events = o->events ? o->events : (o->smoke ? 300 : 2000);
    int rounds = o->rounds ? o->rounds : (o->smoke ? 1 : 5);
    int passes = o->passes ? o->passes : (o->smoke ? 1 : 3);
    int cpus[MAX_THREADS];
    int ncpus = allowed_cpus(cpus, MAX_THREADS);
    int threads = o->threads ? o->threads : ncpus;
    if (threads > MAX_THREADS) {
        fprintf(stderr, "sddaq trigger hough bench: at most %d threads\n", MAX_THREADS);
        return 2;
    }
    struct bench_set set;
    sdd_hough_geom geom;
    if (set_load(&set, o, o->input ? o->events : events, &geom) != 0) {
        return 1;
    }
    struct variant vs[MAX_VARIANTS];
    int nv = 0;
    memset(vs, 0, sizeof(vs));
    for (int s = 0; s < 2; s++) {
        for (int i = 0; i < 2; i++) {
            if ((o->shape_given && (int)o->shape != s) || (o->impl_given && (int)o->impl != i)) {
                continue;
            }
            trig_finder_opts(o, &geom, (sdd_hough_shape)s, (sdd_hough_impl)i, o->merge, &vs[nv].fo);
            nv++;
        }
    }
    struct worker *w = calloc((size_t)threads, sizeof(*w));
    sdd_hough_track *out = malloc(TRIG_MAX_CELLS * sizeof(*out));
    sdd_stub *buf = malloc(SDD_HOUGH_MAX_STUBS * sizeof(*buf));
    struct round_stats *unpack = calloc((size_t)rounds, sizeof(*unpack));
    sdd_hist *h = malloc(sizeof(*h));
    int rc = w && out && buf && unpack && h ? 0 : -1;
    for (int i = 0; rc == 0 && i < threads; i++) {
        w[i].out = malloc(TRIG_MAX_CELLS * sizeof(*w[i].out));
        rc = w[i].out ? 0 : -1;
    }
    for (int k = 0; rc == 0 && k < nv; k++) {
        vs[k].single = calloc((size_t)rounds, sizeof(*vs[k].single));
        vs[k].batch = calloc((size_t)rounds, sizeof(*vs[k].batch));
        rc = vs[k].single && vs[k].batch ? 0 : -1;
        if (rc == 0 && sdd_hough_create(&vs[k].fo, &vs[k].h) != SDD_OK) {
            rc = -1;
        }
        for (int i = 0; rc == 0 && i < threads; i++) {
            rc = sdd_hough_create(&vs[k].fo, &vs[k].workers[i]) == SDD_OK ? 0 : -1;
        }
    }
    if (rc != 0) {
        fprintf(stderr, "sddaq trigger hough bench: setup failed (memory or finder options)\n");
        goto out;
    }
    /* Single-core figures from the last allowed CPU, away from CPU 0's interrupts. */
    sdd_cpu_pin_self(cpus[ncpus - 1]);
    uint64_t overhead = timer_overhead();
    for (int r = 0; r < rounds && rc == 0; r++) {
        for (int k = 0; k < nv; k++) {
            sdd_hist_init(h);
            run_single(&vs[k], &set, passes, out, h, r == 0);
            summarize_round(h, &vs[k].single[r]);
        }
        sdd_hist_init(h);
        rc = run_unpack(&set, passes, buf, h);
        summarize_round(h, &unpack[r]);
        for (int k = 0; k < nv && rc == 0; k++) {
            vs[k].batch[r] = run_batch(&vs[k], &set, passes, w, threads, cpus, ncpus);
            rc = vs[k].batch[r] < 0 ? -1 : 0;
        }
    }
    if (rc != 0) {
        goto out;
    }
    if (o->json) {
        print_json(o, &set, &geom, vs, nv, unpack, rounds, passes, threads, cpus, ncpus, overhead);
    } else {
        print_table(o, &set, &geom, vs, nv, unpack, rounds, passes, threads, cpus, ncpus, overhead);
    }
out:
    for (int k = 0; k < nv; k++) {
        sdd_hough_destroy(vs[k].h);
        for (int i = 0; i < threads; i++) {
            sdd_hough_destroy(vs[k].workers[i]);
        }
        free(vs[k].single);
        free(vs[k].batch);
    }
    for (int i = 0; w != NULL && i < threads; i++) {
        free(w[i].out);
    }
    free(w);
    free(out);
    free(buf);
    free(unpack);
    free(h);
    set_free(&set);
    return rc == 0 ? 0 : 1;
}
