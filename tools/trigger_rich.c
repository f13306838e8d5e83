/* sddaq trigger rich: generate RICH events with truth into a file, run the event finder, merge
 * and ring finders over them as packed receive buffers and score the rings against truth,
 * compare the methods and fits (score), and benchmark (trigger_rich_bench.c). */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "trigger.h"
#include "trigger_rich.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: sddaq trigger rich gen -o FILE [options]  write generated events to a file\n"
            "       sddaq trigger rich run [options]          find rings, score against truth\n"
            "       sddaq trigger rich score [options]        every method and fit side by side\n"
            "       sddaq trigger rich bench [options]        events/s per core and on all\n"
            "                                                 cores, latency per buffer,\n"
            "                                                 the buffers as one stream\n"
            "\n"
            "  -n, --events N     events (default: gen/run/score 10000, bench 65536; with -i\n"
            "                     every event of the file)\n"
            "  -s, --seed S       generator seed (default 1)\n"
            "  -i FILE            read events from a file instead of generating them\n"
            "  -o FILE            gen: the event file; run: a CSV of the rings\n"
            "      --method M     hist or ptolemy (default hist; score and bench: both)\n"
            "      --fit F        crawford (default) or taubin\n"
            "      --simd V       finder vectors: auto (default: the widest here), portable,\n"
            "                     avx2 or avx512\n"
            "      --noise X      noise hits per event, Poisson mean (default 2)\n"
            "      --window W     a hit belongs to a ring when |d - R| < W mm (default 13)\n"
            "      --threshold T  histogram peak needed for a ring candidate (default 5)\n"
            "      --max-rms X    drop rings whose hits scatter more than X mm RMS about the\n"
            "                     circle (default 8)\n"
            "      --claim C      histogram: a found ring takes its hits within C mm out of\n"
            "                     the search, leaving the rest of its window to crossing\n"
            "                     rings (default 7; 0: the whole window)\n"
            "      --min-hits N   hits a ring needs (default 6)\n"
            "      --eps E        Ptolemy tolerance |2 max - sum| / max (default 0.008)\n"
            "      --multi-ring on|off  histogram: resolve spots with several rings (competing\n"
            "                     peaks, hit re-assignment, second search; default on)\n"
            "      --match W      a ring is found when centre and radius lie within W mm of\n"
            "                     the truth (default 9, half the PM pitch)\n"
            "      --buffer N     events per receive buffer (default 1024)\n"
            "      --merge-window T  fuse board events within T ticks (default 1)\n"
            "  -t, --threads N    bench: threads for the all-cores figure, and for the\n"
            "                     latency with each buffer split over them (default: CPUs)\n"
            "      --gpu          bench: the CUDA ring finder next to the CPU's (ring finding\n"
            "                     alone per GPU variant, the chain with the event finder and\n"
            "                     merge on the CPU, latency per buffer; default 262144 events)\n"
            "      --gpu-block N  bench --gpu: threads per block (default: per variant)\n"
            "      --gpu-inflight N  bench --gpu: buffers each chain thread keeps on the GPU,\n"
            "                     2 to 8 (default 2)\n"
            "      --smoke        bench: a tiny run for ctest\n"
            "      --json         one JSON object instead of the table\n");
}

const char *rich_method_name(sdd_rich_method m)
{
    return m == SDD_RICH_PTOLEMY ? "ptolemy" : "hist";
}

const char *rich_simd_name(sdd_rich_simd s)
{
    static const char *const names[] = {"auto", "portable", "avx512", "avx2"};
    return (unsigned)s < sizeof(names) / sizeof(names[0]) ? names[s] : "auto";
}

static const char *fit_name(sdd_rich_fit f)
{
    return f == SDD_RICH_FIT_CRAWFORD ? "crawford" : "taubin";
}

int rich_source_open(struct rich_source *s, const struct rich_cli *o, uint64_t def_events)
{
    memset(s, 0, sizeof(*s));
    if (o->input != NULL) {
        sdd_err err = sdd_rich_file_open(o->input, &s->file);
        if (err != SDD_OK) {
            fprintf(stderr, "sddaq trigger rich: %s: %s\n", o->input, sdd_strerror(err));
            return -1;
        }
        s->geom = *sdd_rich_file_geom(s->file);
        s->left = o->events ? o->events : UINT64_MAX;
        return 0;
    }
    sdd_rich_gen_opts g;
    sdd_rich_gen_opts_default(&g);
    g.seed = o->seed;
    if (o->noise >= 0) {
        g.noise_mean = o->noise;
    }
    sdd_err err = sdd_rich_gen_create(&g, &s->gen);
    if (err != SDD_OK) {
        fprintf(stderr, "sddaq trigger rich: generator: %s\n", sdd_strerror(err));
        return -1;
    }
    s->geom = g.geom;
    s->left = o->events ? o->events : def_events;
    return 0;
}

long rich_source_read(struct rich_source *s, sdd_rich_event *evs, size_t max)
{
    size_t n = 0;
    while (n < max && s->left > 0) {
        if (s->gen != NULL) {
            sdd_rich_gen_next(s->gen, &evs[n]);
        } else {
            int rc = sdd_rich_file_read(s->file, &evs[n]);
            if (rc < 0) {
                fprintf(stderr, "sddaq trigger rich: event file: %s\n", sdd_strerror(rc));
                return -1;
            }
            if (rc == 0) {
                s->left = 0;
                break;
            }
        }
        n++;
        s->left--;
    }
    return (long)n;
}

void rich_source_close(struct rich_source *s)
{
    sdd_rich_gen_destroy(s->gen);
    sdd_rich_file_close(s->file);
    memset(s, 0, sizeof(*s));
}

void rich_cli_proc_opts(const struct rich_cli *o, const sdd_rich_geom *g, sdd_rich_method m,
                        sdd_rich_proc_opts *out)
{
    sdd_rich_proc_opts_default(out);
    out->find.geom = *g;
    out->find.method = m;
    out->find.fit = o->fit;
    out->find.simd = o->simd;
    out->find.multi_ring = !o->single_pass;
    if (o->window > 0) {
        out->find.window = o->window;
    }
    if (o->min_hits > 0) {
        out->find.min_hits = (uint8_t)o->min_hits;
    }
    if (o->eps > 0) {
        out->find.ptolemy_eps = o->eps;
    }
    if (o->claim >= 0) {
        out->find.claim = o->claim;
    }
    if (o->max_rms > 0) {
        out->find.max_rms = o->max_rms;
    }
    if (o->threshold > 0) {
        out->find.threshold = (uint8_t)o->threshold;
    }
    out->window = o->merge_window;
    /* Room for the worst case: every event on every board with 64 hits, plus packet headers. */
    out->max_bytes =
        (size_t)o->buffer * SDD_RICH_MAX_BOARDS * sdd_rich_evt_bytes(SDD_RICH_MAX_HITS);
}

/* ---- gen -------------------------------------------------------------------------------- */

static int rich_gen_cmd(const struct rich_cli *o)
{
    if (o->output == NULL) {
        fprintf(stderr, "sddaq trigger rich gen: -o FILE is required\n");
        return 2;
    }
    if (o->input != NULL) {
        fprintf(stderr, "sddaq trigger rich gen: -i makes no sense here\n");
        return 2;
    }
    struct rich_source src;
    if (rich_source_open(&src, o, 10000) != 0) {
        return 1;
    }
    sdd_rich_file *f = NULL;
    sdd_err err = sdd_rich_file_create(o->output, &src.geom, &f);
    if (err != SDD_OK) {
        fprintf(stderr, "sddaq trigger rich gen: %s: %s\n", o->output, sdd_strerror(err));
        rich_source_close(&src);
        return 1;
    }
    sdd_rich_event ev;
    uint64_t n = 0, hits = 0, rings = 0, noise = 0, good = 0, bytes = 0;
    uint64_t by[SDD_RICH_MAX_TRUTH + 1] = {0};
    const sdd_rich_pmtab *t = sdd_rich_gen_pmtab(src.gen);
    uint8_t pkt[8 * SDD_RICH_PKT_MAX];
    while (err == SDD_OK && rich_source_read(&src, &ev, 1) == 1) {
        err = sdd_rich_file_write(f, &ev);
        n++;
        hits += ev.nhits;
        rings += ev.nrings;
        by[ev.nrings]++;
        for (unsigned i = 0; i < ev.nhits; i++) {
            noise += ev.hit_ring[i] < 0;
        }
        for (unsigned k = 0; k < ev.nrings; k++) {
            good += ev.rings[k].nhits >= SDD_RICH_GOOD_HITS;
        }
        /* Bytes on the wire without the packet headers: the boards' event records. */
        int64_t b = sdd_rich_pack(t, &ev, 1, SDD_RICH_PKT_MAX, pkt, sizeof(pkt), NULL);
        bytes += b > 0 ? (uint64_t)b : 0;
    }
    sdd_err cerr = sdd_rich_file_close(f);
    rich_source_close(&src);
    if (err != SDD_OK || cerr != SDD_OK) {
        fprintf(stderr, "sddaq trigger rich gen: %s: %s\n", o->output,
                sdd_strerror(err != SDD_OK ? err : cerr));
        return 1;
    }
    double dn = n ? (double)n : 1.0;
    printf("wrote %" PRIu64 " events to %s\n", n, o->output);
    printf("hits/event %.2f (noise %.2f), rings/event %.3f (0/1/2/3: %.3f %.3f %.3f %.3f), "
           "rings with >= %d hits %.1f %%\n",
           hits / dn, noise / dn, rings / dn, by[0] / dn, by[1] / dn, by[2] / dn, by[3] / dn,
           SDD_RICH_GOOD_HITS, rings ? 100.0 * (double)good / (double)rings : 0.0);
    printf("bytes/event in single-event packets %.1f (with the 24-byte packet headers)\n",
           bytes / dn);
    return 0;
}

/* ---- run and score ---------------------------------------------------------------------- */

struct run_result {
    sdd_rich_score score;
    sdd_rich_ef_stats ef;
    sdd_rich_merge_stats merge;
    uint64_t events;
    const char *simd;
};

/* The merged event with timestamp ts (the batch is in time order), or -1. */
static long find_ts(const sdd_rich_batch *b, uint32_t ts)
{
    long lo = 0, hi = (long)b->n - 1;
    while (lo <= hi) {
        long mid = (lo + hi) / 2;
        if (b->timestamp[mid] == ts) {
            return mid;
        }
        if (b->timestamp[mid] < ts) {
            lo = mid + 1;
        } else {
            hi = mid - 1;
        }
    }
    return -1;
}

static int run_method(const struct rich_cli *o, sdd_rich_method m, sdd_rich_fit fit, FILE *csv,
                      struct run_result *res)
{
    struct rich_cli oo = *o;
    oo.fit = fit;
    struct rich_source src;
    if (rich_source_open(&src, &oo, 10000) != 0) {
        return 1;
    }
    sdd_rich_proc_opts po;
    rich_cli_proc_opts(&oo, &src.geom, m, &po);
    sdd_rich_proc *p = NULL;
    sdd_err err = sdd_rich_proc_create(&po, &p);
    sdd_rich_event *evs = malloc(o->buffer * sizeof(*evs));
    uint8_t *buf = malloc(po.max_bytes);
    int rc = 0;
    if (err != SDD_OK || evs == NULL || buf == NULL) {
        fprintf(stderr, "sddaq trigger rich run: %s\n",
                sdd_strerror(err != SDD_OK ? err : SDD_ENOMEM));
        rc = 1;
        goto out_free;
    }
    res->simd = rich_simd_name(sdd_rich_finder_opts(sdd_rich_proc_finder(p))->simd);
    sdd_rich_score_init(&res->score, o->match);
    res->events = 0;
    const sdd_rich_pmtab *tab = sdd_rich_finder_pmtab(sdd_rich_proc_finder(p));
    uint32_t seq[SDD_RICH_MAX_BOARDS] = {0};
    long n;
    while ((n = rich_source_read(&src, evs, o->buffer)) > 0) {
        int64_t len = sdd_rich_pack(tab, evs, (size_t)n, SDD_RICH_PKT_MAX, buf, po.max_bytes, seq);
        sdd_rich_output out;
        if (len < 0 || sdd_rich_proc_run(p, buf, (size_t)len, &out) != SDD_OK) {
            fprintf(stderr, "sddaq trigger rich run: packing or processing failed\n");
            rc = 1;
            goto out_free;
        }
        for (long e = 0; e < n; e++) {
            long k = find_ts(out.events, evs[e].timestamp);
            const sdd_rich_ring *r = k >= 0 ? out.rings + (size_t)k * out.max_rings : NULL;
            size_t nr = k >= 0 ? out.nrings[k] : 0;
            sdd_rich_score_event(&res->score, &evs[e], r, nr);
            for (size_t j = 0; csv != NULL && j < nr; j++) {
                fprintf(csv, "%" PRIu64 ",%u,%.3f,%.3f,%.3f,%u,%.3f\n", evs[e].id, r[j].spot,
                        (double)r[j].cx, (double)r[j].cy, (double)r[j].r, r[j].nhits,
                        (double)r[j].quality);
            }
        }
        res->events += (uint64_t)n;
    }
    if (n < 0) {
        rc = 1;
    }
    sdd_rich_proc_stats(p, &res->ef, &res->merge);
out_free:
    free(buf);
    free(evs);
    sdd_rich_proc_destroy(p);
    rich_source_close(&src);
    return rc;
}

static uint64_t ef_dropped(const sdd_rich_ef_stats *s)
{
    return s->bad_magic + s->bad_version + s->bad_board + s->bad_pkt_length + s->truncated +
           s->bad_signature + s->bad_evt_length + s->too_many_hits + s->bad_channel +
           s->bad_timestamp + s->count_mismatch + s->index_full;
}

static void json_result(struct tjson *j, const struct run_result *r)
{
    sdd_rich_summary m;
    sdd_rich_score_summarize(&r->score, &m);
    tj_uint(j, "events", r->events);
    tj_num(j, "match_mm", r->score.match);
    tj_num(j, "efficiency", m.efficiency);
    tj_num(j, "efficiency_err", m.efficiency_err);
    tj_num(j, "efficiency_10hits", m.good_efficiency);
    tj_num(j, "efficiency_10hits_err", m.good_err);
    tj_arr(j, "efficiency_by_rings");
    for (int k = 1; k <= SDD_RICH_MAX_TRUTH; k++) {
        tj_num(j, NULL, m.eff_by[k]);
    }
    tj_end(j);
    tj_arr(j, "efficiency_10hits_by_rings");
    for (int k = 1; k <= SDD_RICH_MAX_TRUTH; k++) {
        tj_num(j, NULL, m.good_eff_by[k]);
    }
    tj_end(j);
    tj_num(j, "fakes_per_event", m.fakes_per_event);
    tj_arr(j, "fakes_by_rings");
    for (int k = 0; k <= SDD_RICH_MAX_TRUTH; k++) {
        tj_num(j, NULL, m.fakes_by[k]);
    }
    tj_end(j);
    tj_num(j, "duplicates_per_event", m.dups_per_event);
    tj_num(j, "centre_res_mm", m.centre_res);
    tj_num(j, "radius_res_mm", m.radius_res);
    tj_num(j, "radius_bias_mm", m.radius_bias);
    tj_uint(j, "rings", r->score.rings);
    tj_uint(j, "packets", r->ef.packets);
    tj_uint(j, "board_events", r->ef.events);
    tj_uint(j, "dropped", ef_dropped(&r->ef));
    tj_uint(j, "merged_events", r->merge.out_events);
}

static void print_result(const char *what, const struct run_result *r)
{
    sdd_rich_summary m;
    sdd_rich_score_summarize(&r->score, &m);
    printf("%-18s eff %6.2f %%  >=10 hits %6.2f %% (1/2/3 rings %6.2f %6.2f %6.2f)  "
           "fakes/ev %.4f  dups/ev %.4f  centre %.2f mm  radius %.2f mm (bias %+.2f)\n",
           what, 100 * m.efficiency, 100 * m.good_efficiency, 100 * m.good_eff_by[1],
           100 * m.good_eff_by[2], 100 * m.good_eff_by[3], m.fakes_per_event, m.dups_per_event,
           m.centre_res, m.radius_res, m.radius_bias);
}

static int rich_run_cmd(const struct rich_cli *o)
{
    FILE *csv = NULL;
    if (o->output != NULL) {
        csv = fopen(o->output, "w");
        if (csv == NULL) {
            fprintf(stderr, "sddaq trigger rich run: %s: %s\n", o->output, strerror(errno));
            return 1;
        }
        fprintf(csv, "event,spot,cx,cy,r,nhits,quality\n");
    }
    sdd_rich_method m = o->method < 0 ? SDD_RICH_HIST : (sdd_rich_method)o->method;
    struct run_result r;
    int rc = run_method(o, m, o->fit, csv, &r);
    if (csv != NULL && fclose(csv) != 0) {
        fprintf(stderr, "sddaq trigger rich run: %s: write failed\n", o->output);
        rc = 1;
    }
    if (rc != 0) {
        return rc;
    }
    sdd_rich_summary s;
    sdd_rich_score_summarize(&r.score, &s);
    if (o->json) {
        struct tjson j;
        tj_begin(&j, stdout);
        tj_obj(&j, NULL);
        tj_str(&j, "source", o->input != NULL ? o->input : "generator");
        tj_str(&j, "method", rich_method_name(m));
        tj_str(&j, "fit", fit_name(o->fit));
        tj_str(&j, "simd", r.simd);
        tj_bool(&j, "multi_ring", !o->single_pass);
        json_result(&j, &r);
        tj_finish(&j);
        return 0;
    }
    printf("events %" PRIu64
           ", method %s, fit %s, simd %s, buffers of %u events, match %.1f mm%s\n",
           r.events, rich_method_name(m), fit_name(o->fit), r.simd, o->buffer, (double)o->match,
           o->single_pass ? ", multi-ring off" : "");
    printf("truth rings %" PRIu64 ", found rings %" PRIu64 "\n",
           r.score.truth[1] + r.score.truth[2] + r.score.truth[3], r.score.rings);
    printf("efficiency %.2f %% +- %.2f (1/2/3-ring events %.2f %.2f %.2f %%)\n", 100 * s.efficiency,
           100 * s.efficiency_err, 100 * s.eff_by[1], 100 * s.eff_by[2], 100 * s.eff_by[3]);
    printf("efficiency >= %d hits %.2f %% +- %.2f (1/2/3-ring events %.2f %.2f %.2f %%)\n",
           SDD_RICH_GOOD_HITS, 100 * s.good_efficiency, 100 * s.good_err, 100 * s.good_eff_by[1],
           100 * s.good_eff_by[2], 100 * s.good_eff_by[3]);
    printf("fakes %.4f per event (0/1/2/3-ring events %.4f %.4f %.4f %.4f), duplicates %.4f\n",
           s.fakes_per_event, s.fakes_by[0], s.fakes_by[1], s.fakes_by[2], s.fakes_by[3],
           s.dups_per_event);
    printf("resolution centre %.2f mm per coordinate, radius %.2f mm (bias %+.2f mm)\n",
           s.centre_res, s.radius_res, s.radius_bias);
    printf("event finder: %" PRIu64 " packets, %" PRIu64 " board events, %" PRIu64
           " dropped; merge: %" PRIu64 " events, %" PRIu64 " fused\n",
           r.ef.packets, r.ef.events, ef_dropped(&r.ef), r.merge.out_events, r.merge.fused);
    return 0;
}

static int rich_score_cmd(const struct rich_cli *o)
{
    struct tjson j;
    if (o->json) {
        tj_begin(&j, stdout);
        tj_obj(&j, NULL);
        tj_bool(&j, "multi_ring", !o->single_pass);
        tj_arr(&j, "results");
    } else {
        printf("match window %.1f mm; efficiency for all truth rings and for rings with >= %d "
               "hits%s\n",
               (double)o->match, SDD_RICH_GOOD_HITS,
               o->single_pass ? "; histogram multi-ring steps off" : "");
    }
    for (int m = 0; m < 2; m++) {
        if (o->method >= 0 && o->method != m) {
            continue;
        }
        for (int f = 0; f < 2; f++) {
            struct run_result r;
            if (run_method(o, (sdd_rich_method)m, (sdd_rich_fit)f, NULL, &r) != 0) {
                return 1;
            }
            char what[64];
            snprintf(what, sizeof(what), "%s+%s", rich_method_name((sdd_rich_method)m),
                     fit_name((sdd_rich_fit)f));
            if (o->json) {
                tj_obj(&j, NULL);
                tj_str(&j, "method", rich_method_name((sdd_rich_method)m));
                tj_str(&j, "fit", fit_name((sdd_rich_fit)f));
                json_result(&j, &r);
                tj_end(&j);
            } else {
                print_result(what, &r);
            }
        }
    }
    if (o->json) {
        tj_finish(&j);
    }
    return 0;
}

/* ---- command line -------------------------------------------------------------------------- */

static int parse_float(const char *s, float *out, float lo, float hi)
{
    double v = 0;
    if (cli_parse_double(s, &v) != 0 || !(v >= lo && v <= hi)) {
        return -1;
    }
    *out = (float)v;
    return 0;
}

static int parse_u32(const char *s, uint32_t *out, uint64_t lo, uint64_t hi)
{
    uint64_t v = 0;
    if (cli_parse_size(s, &v) != 0 || v < lo || v > hi) {
        return -1;
    }
    *out = (uint32_t)v;
    return 0;
}

enum {
    OPT_METHOD = 256,
    OPT_FIT,
    OPT_SIMD,
    OPT_NOISE,
    OPT_WINDOW,
    OPT_THRESHOLD,
    OPT_MAX_RMS,
    OPT_CLAIM,
    OPT_EPS,
    OPT_MIN_HITS,
    OPT_MULTI_RING,
    OPT_MATCH,
    OPT_BUFFER,
    OPT_MERGE_WINDOW,
    OPT_SMOKE,
    OPT_JSON,
    OPT_GPU,
    OPT_GPU_BLOCK,
    OPT_GPU_INFLIGHT,
};

int cmd_trigger_rich(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"events", required_argument, NULL, 'n'},
        {"seed", required_argument, NULL, 's'},
        {"method", required_argument, NULL, OPT_METHOD},
        {"fit", required_argument, NULL, OPT_FIT},
        {"simd", required_argument, NULL, OPT_SIMD},
        {"noise", required_argument, NULL, OPT_NOISE},
        {"window", required_argument, NULL, OPT_WINDOW},
        {"threshold", required_argument, NULL, OPT_THRESHOLD},
        {"max-rms", required_argument, NULL, OPT_MAX_RMS},
        {"claim", required_argument, NULL, OPT_CLAIM},
        {"eps", required_argument, NULL, OPT_EPS},
        {"min-hits", required_argument, NULL, OPT_MIN_HITS},
        {"multi-ring", required_argument, NULL, OPT_MULTI_RING},
        {"match", required_argument, NULL, OPT_MATCH},
        {"buffer", required_argument, NULL, OPT_BUFFER},
        {"merge-window", required_argument, NULL, OPT_MERGE_WINDOW},
        {"threads", required_argument, NULL, 't'},
        {"smoke", no_argument, NULL, OPT_SMOKE},
        {"gpu", no_argument, NULL, OPT_GPU},
        {"gpu-block", required_argument, NULL, OPT_GPU_BLOCK},
        {"gpu-inflight", required_argument, NULL, OPT_GPU_INFLIGHT},
        {"json", no_argument, NULL, OPT_JSON},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int early = cli_help_or_missing(argc, argv, usage);
    if (early >= 0) {
        return early;
    }
    const char *mode = argv[1];
    struct rich_cli o = {.seed = 1,
                         .method = -1,
                         .fit = SDD_RICH_FIT_CRAWFORD,
                         .simd = SDD_RICH_SIMD_AUTO,
                         .noise = -1,
                         .claim = -1,
                         .match = 9.0f,
                         .buffer = 1024,
                         .merge_window = 1};
    bool bad = false;
    int c;
    optind = 2;
    while (!bad && (c = getopt_long(argc, argv, "n:s:i:o:t:h", longopts, NULL)) != -1) {
        char *end = NULL;
        uint32_t u = 0;
        switch (c) {
        case 'n':
            bad = cli_parse_size(optarg, &o.events) != 0 || o.events == 0;
            break;
        case 's':
            errno = 0;
            o.seed = strtoull(optarg, &end, 0);
            bad = errno != 0 || end == optarg || *end != '\0' || optarg[0] == '-';
            break;
        case 'i':
            o.input = optarg;
            break;
        case 'o':
            o.output = optarg;
            break;
        case OPT_METHOD:
            o.method = strcmp(optarg, "hist") == 0      ? SDD_RICH_HIST
                       : strcmp(optarg, "ptolemy") == 0 ? SDD_RICH_PTOLEMY
                                                        : -2;
            bad = o.method == -2;
            break;
        case OPT_FIT:
            bad = strcmp(optarg, "taubin") != 0 && strcmp(optarg, "crawford") != 0;
            o.fit = strcmp(optarg, "crawford") == 0 ? SDD_RICH_FIT_CRAWFORD : SDD_RICH_FIT_TAUBIN;
            break;
        case OPT_SIMD:
            if (strcmp(optarg, "auto") == 0) {
                o.simd = SDD_RICH_SIMD_AUTO;
            } else if (strcmp(optarg, "portable") == 0) {
                o.simd = SDD_RICH_SIMD_PORTABLE;
            } else if (strcmp(optarg, "avx512") == 0) {
                o.simd = SDD_RICH_SIMD_AVX512;
            } else if (strcmp(optarg, "avx2") == 0) {
                o.simd = SDD_RICH_SIMD_AVX2;
            } else {
                bad = true;
            }
            break;
        case OPT_NOISE:
            bad = parse_float(optarg, &o.noise, 0, 64) != 0;
            break;
        case OPT_WINDOW:
            bad = parse_float(optarg, &o.window, 0.1f, 99) != 0;
            break;
        case OPT_CLAIM:
            bad = parse_float(optarg, &o.claim, 0, 99) != 0;
            break;
        case OPT_MAX_RMS:
            bad = parse_float(optarg, &o.max_rms, 0.1f, 100) != 0;
            break;
        case OPT_MIN_HITS:
            bad = parse_u32(optarg, &u, 3, 64) != 0;
            o.min_hits = (int)u;
            break;
        case OPT_MULTI_RING:
            bad = strcmp(optarg, "on") != 0 && strcmp(optarg, "off") != 0;
            o.single_pass = strcmp(optarg, "off") == 0;
            break;
        case OPT_EPS:
            bad = parse_float(optarg, &o.eps, 0.001f, 0.9f) != 0;
            break;
        case OPT_MATCH:
            bad = parse_float(optarg, &o.match, 0.1f, 1000) != 0;
            break;
        case OPT_THRESHOLD:
            bad = parse_u32(optarg, &u, 3, 64) != 0;
            o.threshold = (int)u;
            break;
        case OPT_BUFFER:
            bad = parse_u32(optarg, &o.buffer, 1, 65536) != 0;
            break;
        case OPT_MERGE_WINDOW:
            bad = parse_u32(optarg, &o.merge_window, 0, 1000) != 0;
            break;
        case 't':
            bad = parse_u32(optarg, &u, 1, 256) != 0;
            o.threads = (int)u;
            break;
        case OPT_SMOKE:
            o.smoke = true;
            break;
        case OPT_GPU:
            o.gpu = true;
            break;
        case OPT_GPU_BLOCK:
            bad = parse_u32(optarg, &o.gpu_block, 32, 1024) != 0 || o.gpu_block % 32 != 0;
            break;
        case OPT_GPU_INFLIGHT:
            bad = parse_u32(optarg, &o.gpu_inflight, 2, RICH_CHAIN_MAX_INFLIGHT) != 0;
            break;
        case OPT_JSON:
            o.json = true;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            bad = true;
        }
        cli_report_bad("sddaq trigger rich", c, optarg, bad);
    }
    if (cli_args_done("sddaq trigger rich", bad, optind, argc, argv) != 0) {
        usage(stderr);
        return 2;
    }
    if (strcmp(mode, "gen") == 0) {
        return rich_gen_cmd(&o);
    }
    if (strcmp(mode, "run") == 0) {
        return rich_run_cmd(&o);
    }
    if (strcmp(mode, "score") == 0) {
        return rich_score_cmd(&o);
    }
    if (strcmp(mode, "bench") == 0) {
        return o.gpu ? rich_gpu_bench(&o) : rich_bench(&o);
    }
    fprintf(stderr, "sddaq trigger rich: unknown mode '%s'\n", mode);
    usage(stderr);
    return 2;
}
