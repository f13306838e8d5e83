/* sddaq trigger rich bench: throughput of event finding + merge + ring finding over packed
 * receive buffers, per core and on all cores (one proc per thread, each over the same buffers),
 * and the latency of one buffer of 128..1024 events (p50, p99, max), per method. Also the event
 * finder and merge alone, and the finder alone, so the cost splits by step. */
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sddaq/clock.h"
#include "sddaq/cpu.h"
#include "trigger.h"
#include "trigger_rich.h"

#define LAT_SIZES 4
static const uint32_t LAT_EVENTS[LAT_SIZES] = {128, 256, 512, 1024};

void rich_packed_free(struct rich_packed *p)
{
    for (size_t i = 0; i < p->nbuf; i++) {
        free(p->buf[i]);
    }
    free(p->buf);
    free(p->len);
    memset(p, 0, sizeof(*p));
}

int rich_pack_buffers(const sdd_rich_pmtab *t, const sdd_rich_event *evs, size_t n, uint32_t per,
                      size_t cap, struct rich_packed *p)
{
    memset(p, 0, sizeof(*p));
    p->nbuf = (n + per - 1) / per;
    p->buf = calloc(p->nbuf, sizeof(*p->buf));
    p->len = calloc(p->nbuf, sizeof(*p->len));
    if (p->buf == NULL || p->len == NULL) {
        return -1;
    }
    uint32_t seq[SDD_RICH_MAX_BOARDS] = {0};
    for (size_t b = 0; b < p->nbuf; b++) {
        size_t first = b * per, k = n - first < per ? n - first : per;
        p->buf[b] = malloc(cap);
        if (p->buf[b] == NULL) {
            return -1;
        }
        int64_t len = sdd_rich_pack(t, evs + first, k, SDD_RICH_PKT_MAX, p->buf[b], cap, seq);
        if (len < 0) {
            return -1;
        }
        p->len[b] = (size_t)len;
        p->events += k;
    }
    return 0;
}

uint64_t rich_time_threads(int n, void *(*fn)(void *), void *args, size_t size)
{
    pthread_t *t = calloc((size_t)n, sizeof(*t));
    if (t == NULL) {
        return 0;
    }
    uint64_t t0 = sdd_now_ns();
    int started = 0;
    for (; started < n; started++) {
        if (pthread_create(&t[started], NULL, fn, (char *)args + (size_t)started * size) != 0) {
            break;
        }
    }
    for (int i = 0; i < started; i++) {
        pthread_join(t[i], NULL);
    }
    uint64_t dt = sdd_now_ns() - t0;
    free(t);
    return started == n && dt > 0 ? dt : 0;
}

struct worker {
    const struct rich_packed *p;
    sdd_rich_proc *proc;
    sdd_rich_carry *carry; /* the buffers as one stream (each pass ends it), as a stage does */
    uint64_t seq;
    int passes;
    uint64_t rings;
    int rc;
};

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    for (int pass = 0; pass < w->passes; pass++) {
        for (size_t b = 0; b < w->p->nbuf; b++) {
            sdd_rich_output out;
            sdd_err err = w->carry != NULL
                              ? sdd_rich_proc_run_stream(w->proc, w->p->buf[b], w->p->len[b],
                                                         w->carry, w->seq++, &out)
                              : sdd_rich_proc_run(w->proc, w->p->buf[b], w->p->len[b], &out);
            if (err != SDD_OK) {
                w->rc = -1;
                return NULL;
            }
            w->rings += out.total_rings;
        }
        sdd_rich_output out;
        if (w->carry != NULL && sdd_rich_proc_flush(w->proc, w->carry, w->seq++, &out) != SDD_OK) {
            w->rc = -1;
            return NULL;
        }
    }
    return NULL;
}

/* Events/s of nthreads procs, each over every buffer `passes` times (as a stream: each with
 * its own carry). */
static double throughput(const sdd_rich_proc_opts *po, const struct rich_packed *p, int nthreads,
                         int passes, bool stream)
{
    struct worker *w = calloc((size_t)nthreads, sizeof(*w));
    double rate = -1;
    int made = 0;
    if (w == NULL) {
        return -1;
    }
    for (; made < nthreads; made++) {
        w[made].p = p;
        w[made].passes = passes;
        if (sdd_rich_proc_create(po, &w[made].proc) != SDD_OK ||
            (stream && sdd_rich_carry_create(po->max_bytes, &w[made].carry) != SDD_OK)) {
            made++;
            goto out;
        }
    }
    for (int i = 0; i < nthreads; i++) { /* warm: caches, tables, page faults */
        worker_main(&(struct worker){.p = p, .proc = w[i].proc, .passes = 1});
    }
    uint64_t dt = rich_time_threads(nthreads, worker_main, w, sizeof(*w));
    bool ok = dt > 0;
    for (int i = 0; i < nthreads; i++) {
        ok &= w[i].rc == 0;
    }
    if (ok) {
        rate = (double)p->events * passes * nthreads / ((double)dt * 1e-9);
    }
out:
    for (int i = 0; i < made; i++) {
        sdd_rich_proc_destroy(w[i].proc);
        sdd_rich_carry_destroy(w[i].carry);
    }
    free(w);
    return rate;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Time every buffer of p once per pass (after a warm pass), its ring finding split over
 * `split` threads; appends the samples (ns) to t. */
static int latency(const sdd_rich_proc_opts *po, uint32_t split, const struct rich_packed *p,
                   int passes, uint64_t *t, size_t *nt)
{
    sdd_rich_proc_opts so = *po;
    so.split = split;
    sdd_rich_proc *proc = NULL;
    if (sdd_rich_proc_create(&so, &proc) != SDD_OK) {
        return -1;
    }
    sdd_rich_output out;
    for (size_t b = 0; b < p->nbuf; b++) {
        sdd_rich_proc_run(proc, p->buf[b], p->len[b], &out); /* warm */
    }
    for (int pass = 0; pass < passes; pass++) {
        for (size_t b = 0; b < p->nbuf; b++) {
            uint64_t t0 = sdd_now_ns();
            sdd_rich_proc_run(proc, p->buf[b], p->len[b], &out);
            t[(*nt)++] = sdd_now_ns() - t0;
        }
    }
    sdd_rich_proc_destroy(proc);
    return 0;
}

void rich_lat_summary(uint64_t *t, size_t k, struct rich_lat *l)
{
    qsort(t, k, sizeof(*t), cmp_u64);
    l->samples = k;
    /* Nearest rank: the smallest sample with at least q of them at or below it. */
    l->p50_us = (double)t[(size_t)ceil(0.50 * (double)k) - 1] / 1e3;
    l->p99_us = (double)t[(size_t)ceil(0.99 * (double)k) - 1] / 1e3;
    l->max_us = (double)t[k - 1] / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

struct rich_mmm rich_summarize(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return (struct rich_mmm){v[n / 2], v[0], v[n - 1]};
}

/* ns per event of the event finder + merge alone (no ring finding); *ef_ns gets the event
 * finder's share. */
static double ef_merge_ns(const sdd_rich_proc_opts *po, const struct rich_packed *p, int passes,
                          double *ef_ns)
{
    sdd_rich_finder *f = NULL;
    sdd_rich_index idx;
    sdd_rich_batch batch;
    uint32_t cap = (uint32_t)(po->max_bytes / SDD_RICH_EVT_HEADER + 1);
    if (sdd_rich_finder_create(&po->find, &f) != SDD_OK) {
        return -1;
    }
    if (sdd_rich_index_init(&idx, cap) != SDD_OK || sdd_rich_batch_init(&batch, cap) != SDD_OK) {
        sdd_rich_finder_destroy(f);
        return -1;
    }
    sdd_rich_ef_stats es = {0};
    sdd_rich_merge_stats ms = {0};
    uint64_t t0 = 0, in_finder = 0;
    for (int pass = -1; pass < passes; pass++) {
        if (pass == 0) {
            t0 = sdd_now_ns();
            in_finder = 0;
        }
        for (size_t b = 0; b < p->nbuf; b++) {
            uint64_t tf = sdd_now_ns();
            sdd_rich_find_events(p->buf[b], p->len[b], sdd_rich_finder_pmtab(f), &idx, &es);
            in_finder += sdd_now_ns() - tf;
            sdd_rich_merge(p->buf[b], &idx, po->window, &batch, &ms);
        }
    }
    double ns = (double)(sdd_now_ns() - t0) / ((double)p->events * passes);
    *ef_ns = (double)in_finder / ((double)p->events * passes);
    sdd_rich_index_fini(&idx);
    sdd_rich_batch_fini(&batch);
    sdd_rich_finder_destroy(f);
    return ns;
}

#define BENCH_ROUNDS 3

struct method_result {
    bool run;
    const char *simd;
    sdd_rich_proc_opts po[LAT_SIZES + 1]; /* [0]: --buffer events; then the latency sizes */
    double one[BENCH_ROUNDS], stream[BENCH_ROUNDS], all[BENCH_ROUNDS], efm[BENCH_ROUNDS];
    double ef[BENCH_ROUNDS];     /* the event finder's share of efm */
    uint64_t *lat[2][LAT_SIZES]; /* [0]: one thread per buffer; [1]: split over all */
    size_t nlat[2][LAT_SIZES];
};

int rich_bench(const struct rich_cli *o)
{
    uint64_t nev = o->events ? o->events : (o->smoke ? 2048 : 65536);
    int passes = o->smoke ? 1 : 3;
    int rounds = o->smoke ? 1 : BENCH_ROUNDS;
    int nthreads = o->threads > 0 ? o->threads : sdd_cpu_count();
    if (nthreads < 1) {
        nthreads = 1;
    }
    struct rich_cli oo = *o;
    oo.events = nev;
    struct rich_source src;
    if (rich_source_open(&src, &oo, nev) != 0) {
        return 1;
    }
    sdd_rich_event *evs = malloc(nev * sizeof(*evs));
    long n = evs != NULL ? rich_source_read(&src, evs, nev) : -1;
    sdd_rich_geom geom = src.geom;
    rich_source_close(&src);
    sdd_rich_pmtab *tab = NULL;
    if (n <= 0 || sdd_rich_pmtab_create(&geom, &tab) != SDD_OK) {
        fprintf(stderr, "sddaq trigger rich bench: no events\n");
        free(evs);
        return 1;
    }
    int rc = 0;
    struct method_result res[2];
    struct rich_packed pk[LAT_SIZES + 1];
    memset(res, 0, sizeof(res));
    memset(pk, 0, sizeof(pk));
    /* Setup: the same events packed once per buffer size, a finder per method. */
    for (int m = 0; m < 2 && rc == 0; m++) {
        res[m].run = o->method < 0 || o->method == m;
        for (int s = 0; s <= LAT_SIZES && res[m].run; s++) {
            struct rich_cli lo = *o;
            lo.buffer = s == 0 ? o->buffer : LAT_EVENTS[s - 1];
            rich_cli_proc_opts(&lo, &geom, (sdd_rich_method)m, &res[m].po[s]);
        }
        if (!res[m].run) {
            continue;
        }
        sdd_rich_proc *probe = NULL;
        if (sdd_rich_proc_create(&res[m].po[0], &probe) != SDD_OK) {
            fprintf(stderr, "sddaq trigger rich bench: cannot build the finder\n");
            rc = 1;
            break;
        }
        res[m].simd = rich_simd_name(sdd_rich_finder_opts(sdd_rich_proc_finder(probe))->simd);
        sdd_rich_proc_destroy(probe);
        for (int k = 0; k < 2; k++) {
            for (int s = 0; s < LAT_SIZES; s++) {
                size_t nb = ((size_t)n + LAT_EVENTS[s] - 1) / LAT_EVENTS[s];
                res[m].lat[k][s] = malloc(nb * (size_t)passes * (size_t)rounds * sizeof(uint64_t));
                rc |= res[m].lat[k][s] == NULL;
            }
        }
    }
    for (int s = 0; s <= LAT_SIZES && rc == 0; s++) {
        int m = res[0].run ? 0 : 1;
        uint32_t per = s == 0 ? o->buffer : LAT_EVENTS[s - 1];
        if (rich_pack_buffers(tab, evs, (size_t)n, per, res[m].po[s].max_bytes, &pk[s]) != 0) {
            rc = 1;
        }
    }
    /* Rounds, the methods alternating within each. */
    for (int r = 0; r < rounds && rc == 0; r++) {
        for (int m = 0; m < 2 && rc == 0; m++) {
            if (!res[m].run) {
                continue;
            }
            for (int k = 0; k < 2; k++) { /* which goes first alternates by round */
                bool stream = (k + r) % 2 == 1;
                double v = throughput(&res[m].po[0], &pk[0], 1, passes, stream);
                *(stream ? &res[m].stream[r] : &res[m].one[r]) = v;
            }
            res[m].all[r] = throughput(&res[m].po[0], &pk[0], nthreads, passes, false);
            res[m].efm[r] = ef_merge_ns(&res[m].po[0], &pk[0], passes, &res[m].ef[r]);
            for (int k = 0; k < (nthreads > 1 ? 2 : 1); k++) {
                for (int s = 0; s < LAT_SIZES && rc == 0; s++) {
                    rc = latency(&res[m].po[s + 1], k ? (uint32_t)nthreads : 1, &pk[s + 1], passes,
                                 res[m].lat[k][s], &res[m].nlat[k][s]);
                }
            }
            if (res[m].one[r] <= 0 || res[m].stream[r] <= 0 || res[m].all[r] <= 0) {
                rc = 1;
            }
        }
    }
    if (rc != 0) {
        fprintf(stderr, "sddaq trigger rich bench: a run failed\n");
    }
    struct tjson j;
    if (rc == 0 && o->json) {
        tj_begin(&j, stdout);
        tj_obj(&j, NULL);
        tj_uint(&j, "events", (uint64_t)n);
        tj_uint(&j, "buffer_events", o->buffer);
        tj_uint(&j, "threads", (uint64_t)nthreads);
        tj_uint(&j, "rounds", (uint64_t)rounds);
        tj_bool(&j, "multi_ring", !o->single_pass);
        tj_arr(&j, "methods");
    } else if (rc == 0) {
        printf("%ld events, buffers of %u events, %d rounds of %d passes, %d threads for the "
               "all-core figure; median [min-max] over rounds%s\n",
               n, o->buffer, rounds, passes, nthreads,
               o->single_pass ? "; histogram multi-ring steps off" : "");
    }
    for (int m = 0; m < 2 && rc == 0; m++) {
        if (!res[m].run) {
            continue;
        }
        /* the stream's cost: per round, against the plain run just before it */
        double ratio[BENCH_ROUNDS];
        for (int r = 0; r < rounds; r++) {
            ratio[r] = res[m].stream[r] / res[m].one[r];
        }
        struct rich_mmm one = rich_summarize(res[m].one, rounds),
                        all = rich_summarize(res[m].all, rounds),
                        stream = rich_summarize(ratio, rounds);
        struct rich_mmm efm = rich_summarize(res[m].efm, rounds);
        struct rich_mmm ef = rich_summarize(res[m].ef, rounds);
        struct rich_lat lat[2][LAT_SIZES];
        int nsplit = nthreads > 1 ? 2 : 1;
        for (int k = 0; k < nsplit; k++) {
            for (int s = 0; s < LAT_SIZES; s++) {
                rich_lat_summary(res[m].lat[k][s], res[m].nlat[k][s], &lat[k][s]);
            }
        }
        if (o->json) {
            tj_obj(&j, NULL);
            tj_str(&j, "method", rich_method_name((sdd_rich_method)m));
            tj_str(&j, "simd", res[m].simd);
            tj_num(&j, "events_per_s_1core", one.med);
            tj_num(&j, "events_per_s_1core_min", one.min);
            tj_num(&j, "events_per_s_1core_max", one.max);
            tj_num(&j, "events_per_s_all", all.med);
            tj_num(&j, "events_per_s_all_min", all.min);
            tj_num(&j, "events_per_s_all_max", all.max);
            tj_num(&j, "ns_per_event_1core", 1e9 / one.med);
            tj_num(&j, "stream_ratio_1core", stream.med);
            tj_num(&j, "ef_merge_ns_per_event", efm.med);
            tj_num(&j, "event_finder_ns_per_event", ef.med);
            for (int k = 0; k < nsplit; k++) {
                tj_arr(&j, k ? "latency_split" : "latency");
                for (int s = 0; s < LAT_SIZES; s++) {
                    tj_obj(&j, NULL);
                    tj_uint(&j, "buffer_events", LAT_EVENTS[s]);
                    tj_uint(&j, "threads", k ? (uint64_t)nthreads : 1);
                    tj_uint(&j, "samples", lat[k][s].samples);
                    tj_num(&j, "p50_us", lat[k][s].p50_us);
                    tj_num(&j, "p99_us", lat[k][s].p99_us);
                    tj_num(&j, "max_us", lat[k][s].max_us);
                    tj_end(&j);
                }
                tj_end(&j);
            }
            tj_end(&j);
        } else {
            printf("%s (%s)\n", rich_method_name((sdd_rich_method)m), res[m].simd);
            printf("  events/s, 1 core      %.0f [%.0f-%.0f]\n", one.med, one.min, one.max);
            printf("  events/s, all cores   %.0f [%.0f-%.0f]\n", all.med, all.min, all.max);
            printf("  ns/event, 1 core      %.0f\n", 1e9 / one.med);
            printf("  as a stream / alone   %.3f [%.3f-%.3f] (1 core, paired per round)\n",
                   stream.med, stream.min, stream.max);
            printf("  event finder + merge  %.1f [%.1f-%.1f] ns/event\n", efm.med, efm.min,
                   efm.max);
            printf("    of which the finder %.1f [%.1f-%.1f] ns/event\n", ef.med, ef.min, ef.max);
            for (int k = 0; k < nsplit; k++) {
                printf(k ? "  split over %d threads  events  p50 us  p99 us  max us  (buffers)\n"
                         : "  latency per buffer    events  p50 us  p99 us  max us  (buffers)\n",
                       nthreads);
                for (int s = 0; s < LAT_SIZES; s++) {
                    printf("                        %6u %7.0f %7.0f %7.0f  (%" PRIu64 ")\n",
                           LAT_EVENTS[s], lat[k][s].p50_us, lat[k][s].p99_us, lat[k][s].max_us,
                           lat[k][s].samples);
                }
            }
        }
    }
    if (rc == 0 && o->json) {
        tj_finish(&j);
    }
    for (int m = 0; m < 2; m++) {
        for (int s = 0; s < LAT_SIZES; s++) {
            free(res[m].lat[0][s]);
            free(res[m].lat[1][s]);
        }
    }
    for (int s = 0; s <= LAT_SIZES; s++) {
        rich_packed_free(&pk[s]);
    }
    sdd_rich_pmtab_destroy(tab);
    free(evs);
    return rc;
}
