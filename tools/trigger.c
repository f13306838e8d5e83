/* sddaq trigger hough: generate sector events with truth, write and read event files, run the
 * CMS-style Hough track finder on them and score it against truth, compare the rectangular and
 * hexagonal maps, and benchmark the finder (trigger_bench.c). */
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
            "usage: sddaq trigger hough gen -o FILE [options]  write generated events to a file\n"
            "       sddaq trigger hough run [options]          find tracks, score against truth\n"
            "       sddaq trigger hough score [options]        rect vs hex maps, with and without\n"
            "                                                  merge, per pileup level\n"
            "       sddaq trigger hough bench [options]        finder latency per event and\n"
            "                                                  throughput per core\n"
            "       sddaq trigger rich gen|run|score|bench     NA62 RICH ring finder (see\n"
            "                                                  sddaq trigger rich --help)\n"
            "\n"
            "  -p, --pu P         pileup (default 200; score: a list, default 0,140,200)\n"
            "  -n, --events N     events (default: gen/run 1000, score/bench 2000; with -i\n"
            "                     every event of the file)\n"
            "  -s, --seed S       generator seed (default 1)\n"
            "      --map M        rect or hex (default rect; bench: both)\n"
            "      --impl I       fast or seed, the literal port of the seed's cell layout\n"
            "                     (default fast; bench: both)\n"
            "      --simd V       the fast impl's vectors: auto (default), x8 (8 lanes, AVX2\n"
            "                     where the CPU has it) or avx512 (16 stubs at a time)\n"
            "      --merge        merge clusters of neighbouring candidate cells\n"
            "      --bend-window W  a stub fills only q/pT columns within W c/GeV of its bend\n"
            "                     (default 0.25; 0 = off)\n"
            "      --rect-scale S, --hex-scale S  a stub counts for a cell when its line\n"
            "                     crosses the cell shrunk by S about its centre (0 < S <= 1,\n"
            "                     default 1: crosses the cell)\n"
            "      --pt-min X     efficiency counts tracks with pT >= X GeV/c (default 3)\n"
            "  -i FILE            read events from an event file instead of generating\n"
            "  -o FILE            gen: the event file; run: candidates as CSV\n"
            "  -t, --threads T    bench: batch threads, one per CPU by default\n"
            "      --rounds R     bench: rounds of alternating variants (default 5)\n"
            "      --passes P     bench: timed passes over the events per round (default 3)\n"
            "      --smoke        bench: a tiny run (a few hundred events, one round)\n"
            "      --json         one JSON object on stdout instead of tables\n");
}

/* ---- JSON output --------------------------------------------------------------------------- */

void tj_begin(struct tjson *j, FILE *f)
{
    *j = (struct tjson){.f = f};
    j->first[0] = true;
}

static void tj_string(struct tjson *j, const char *s)
{
    fputc('"', j->f);
    for (const unsigned char *p = (const unsigned char *)s; *p != '\0'; p++) {
        if (*p == '"' || *p == '\\') {
            fprintf(j->f, "\\%c", *p);
        } else if (*p < 0x20) {
            fprintf(j->f, "\\u%04x", *p);
        } else {
            fputc(*p, j->f);
        }
    }
    fputc('"', j->f);
}

/* The comma before a member and its key (NULL inside arrays and at the top). */
static void tj_key(struct tjson *j, const char *key)
{
    if (!j->first[j->depth]) {
        fputc(',', j->f);
    }
    j->first[j->depth] = false;
    if (key != NULL) {
        tj_string(j, key);
        fputc(':', j->f);
    }
}

static void tj_open(struct tjson *j, const char *key, char kind)
{
    tj_key(j, key);
    fputc(kind, j->f);
    if (j->depth + 1 < TJ_MAX_DEPTH) {
        j->depth++;
    }
    j->first[j->depth] = true;
    j->close[j->depth] = kind == '{' ? '}' : ']';
}

void tj_obj(struct tjson *j, const char *key)
{
    tj_open(j, key, '{');
}

void tj_arr(struct tjson *j, const char *key)
{
    tj_open(j, key, '[');
}

void tj_end(struct tjson *j)
{
    if (j->depth > 0) {
        fputc(j->close[j->depth], j->f);
        j->depth--;
    }
}

void tj_finish(struct tjson *j)
{
    while (j->depth > 0) {
        tj_end(j);
    }
    fputc('\n', j->f);
    fflush(j->f);
}

void tj_num(struct tjson *j, const char *key, double v)
{
    tj_key(j, key);
    if (isfinite(v)) {
        fprintf(j->f, "%.6g", v);
    } else {
        fputs("null", j->f); /* JSON has no NaN or infinity */
    }
}

void tj_uint(struct tjson *j, const char *key, uint64_t v)
{
    tj_key(j, key);
    fprintf(j->f, "%" PRIu64, v);
}

void tj_str(struct tjson *j, const char *key, const char *v)
{
    tj_key(j, key);
    tj_string(j, v);
}

void tj_bool(struct tjson *j, const char *key, bool v)
{
    tj_key(j, key);
    fputs(v ? "true" : "false", j->f);
}

/* ---- names, options, event sources --------------------------------------------------------- */

const char *trig_shape_name(sdd_hough_shape s)
{
    return s == SDD_HOUGH_HEX ? "hex" : "rect";
}

const char *trig_impl_name(sdd_hough_impl i)
{
    return i == SDD_HOUGH_SEED ? "seed" : "fast";
}

const char *trig_simd_name(sdd_hough_simd s)
{
    return s == SDD_HOUGH_SIMD_AVX512 ? "avx512" : s == SDD_HOUGH_SIMD_X8 ? "x8" : "auto";
}

const char *trig_simd_taken(const struct trig_opts *o)
{
    sdd_hough_opts ho;
    sdd_hough_opts_default(&ho);
    ho.simd = o->simd;
    sdd_hough *h = NULL;
    if (sdd_hough_create(&ho, &h) != SDD_OK) {
        return NULL;
    }
    const char *name = trig_simd_name(sdd_hough_get_opts(h)->simd);
    sdd_hough_destroy(h);
    return name;
}

void trig_finder_opts(const struct trig_opts *o, const sdd_hough_geom *events_geom,
                      sdd_hough_shape shape, sdd_hough_impl impl, bool merge, sdd_hough_opts *out)
{
    sdd_hough_opts_default(out);
    out->geom = *events_geom;
    if (o->bend_given) {
        out->geom.bend_window = o->bend_window;
    }
    out->shape = shape;
    out->impl = impl;
    out->simd = o->simd;
    out->merge = merge;
    out->cell_scale = o->cell_scale[shape];
}

int trig_source_open(struct trig_source *src, const struct trig_opts *o, float pu, uint64_t events)
{
    *src = (struct trig_source){.left = events > 0 ? events : UINT64_MAX};
    sdd_err err;
    if (o->input != NULL) {
        err = sdd_hough_file_open(o->input, &src->file);
        if (err != SDD_OK) {
            fprintf(stderr, "sddaq trigger: %s: %s\n", o->input, sdd_strerror(err));
            return 1;
        }
        src->geom = *sdd_hough_file_geom(src->file);
        return 0;
    }
    sdd_hough_gen_opts g;
    sdd_hough_gen_opts_default(&g);
    err = sdd_hough_gen_opts_pileup(&g, pu);
    if (err != SDD_OK) {
        fprintf(stderr, "sddaq trigger: pileup %g: %s\n", pu, sdd_strerror(err));
        return 1;
    }
    g.seed = o->seed;
    if (o->bend_given) {
        g.geom.bend_window = o->bend_window;
    }
    err = sdd_hough_gen_create(&g, &src->gen);
    if (err != SDD_OK) {
        fprintf(stderr, "sddaq trigger: generator: %s\n", sdd_strerror(err));
        return 1;
    }
    src->geom = g.geom;
    return 0;
}

int trig_source_next(struct trig_source *src, sdd_hough_event *ev)
{
    if (src->left == 0) {
        return 0;
    }
    if (src->file != NULL) {
        int rc = sdd_hough_file_read(src->file, ev);
        if (rc < 0) {
            fprintf(stderr, "sddaq trigger: event file: event %" PRIu64 ": %s\n", src->delivered,
                    sdd_strerror(rc));
            return -1;
        }
        if (rc == 0) {
            return 0;
        }
    } else {
        sdd_err err = sdd_hough_gen_next(src->gen, ev);
        if (err != SDD_OK) {
            fprintf(stderr, "sddaq trigger: generator: %s\n", sdd_strerror(err));
            return -1;
        }
    }
    src->left--;
    src->delivered++;
    return 1;
}

void trig_source_close(struct trig_source *src)
{
    if (src->file != NULL) {
        sdd_hough_file_close(src->file);
    }
    sdd_hough_gen_destroy(src->gen);
    *src = (struct trig_source){0};
}

static void describe_source(const struct trig_opts *o, float pu, char *buf, size_t len)
{
    if (o->input != NULL) {
        snprintf(buf, len, "file %s", o->input);
    } else {
        snprintf(buf, len, "generated, PU %g, seed %" PRIu64, pu, o->seed);
    }
}

/* ---- gen ----------------------------------------------------------------------------------- */

static int hough_gen(const struct trig_opts *o)
{
    if (o->output == NULL) {
        fprintf(stderr, "sddaq trigger hough gen: -o FILE is required\n");
        return 2;
    }
    struct trig_source src;
    if (trig_source_open(&src, o, o->pu[0], o->events ? o->events : (o->input ? 0 : 1000)) != 0) {
        return 1;
    }
    sdd_hough_event *ev = malloc(sizeof(*ev));
    sdd_hough_file *f = NULL;
    sdd_err err = ev == NULL ? SDD_ENOMEM : sdd_hough_file_create(o->output, &src.geom, &f);
    if (err != SDD_OK) {
        fprintf(stderr, "sddaq trigger hough gen: %s: %s\n", o->output, sdd_strerror(err));
        free(ev);
        trig_source_close(&src);
        return 1;
    }
    uint64_t n = 0, stubs = 0, smin = UINT64_MAX, smax = 0, kinds[3] = {0}, overlap = 0;
    uint64_t tracks[2] = {0};
    int rc = 0;
    while ((rc = trig_source_next(&src, ev)) == 1) {
        err = sdd_hough_file_write(f, ev);
        if (err != SDD_OK) {
            fprintf(stderr, "sddaq trigger hough gen: %s: event %" PRIu64 ": %s\n", o->output, n,
                    sdd_strerror(err));
            rc = -1;
            break;
        }
        n++;
        stubs += ev->nstubs;
        smin = ev->nstubs < smin ? ev->nstubs : smin;
        smax = ev->nstubs > smax ? ev->nstubs : smax;
        for (uint32_t i = 0; i < ev->nstubs; i++) {
            int t = ev->stub_track[i];
            if (t < 0 || (uint32_t)t >= ev->ntracks) {
                kinds[2]++;
            } else {
                kinds[ev->tracks[t].kind == SDD_TRUTH_PILEUP ? 1 : 0]++;
            }
            overlap += (ev->stubs[i].flags & SDD_STUB_OVERLAP) != 0;
        }
        for (uint32_t t = 0; t < ev->ntracks; t++) {
            tracks[ev->tracks[t].kind == SDD_TRUTH_PILEUP ? 1 : 0]++;
        }
    }
    err = sdd_hough_file_close(f);
    if (err != SDD_OK && rc == 0) {
        fprintf(stderr, "sddaq trigger hough gen: %s: %s\n", o->output, sdd_strerror(err));
        rc = -1;
    }
    trig_source_close(&src);
    free(ev);
    if (rc < 0) {
        remove(o->output); /* half a file would pass for a short one */
        return 1;
    }
    double mean = n ? (double)stubs / (double)n : 0, all = stubs ? (double)stubs : 1;
    if (n == 0) {
        smin = 0;
    }
    if (o->json) {
        struct tjson j;
        tj_begin(&j, stdout);
        tj_obj(&j, NULL);
        tj_str(&j, "file", o->output);
        tj_uint(&j, "events", n);
        if (o->input == NULL) {
            tj_num(&j, "pu", o->pu[0]);
            tj_uint(&j, "seed", o->seed);
        }
        tj_num(&j, "stubs_mean", mean);
        tj_uint(&j, "stubs_min", smin);
        tj_uint(&j, "stubs_max", smax);
        tj_num(&j, "signal_share", (double)kinds[0] / all);
        tj_num(&j, "pileup_share", (double)kinds[1] / all);
        tj_num(&j, "noise_share", (double)kinds[2] / all);
        tj_num(&j, "overlap_share", (double)overlap / all);
        tj_num(&j, "signal_tracks_mean", n ? (double)tracks[0] / (double)n : 0);
        tj_num(&j, "pileup_tracks_mean", n ? (double)tracks[1] / (double)n : 0);
        tj_end(&j);
        tj_finish(&j);
    } else {
        char what[512];
        describe_source(o, o->pu[0], what, sizeof(what));
        printf("wrote %" PRIu64 " events to %s (%s)\n", n, o->output, what);
        printf("stubs/event   mean %.1f  min %" PRIu64 "  max %" PRIu64 "\n", mean, smin, smax);
        printf("stub shares   signal %.1f %%  pileup %.1f %%  noise %.1f %%  (in sector overlap "
               "%.1f %%)\n",
               100.0 * (double)kinds[0] / all, 100.0 * (double)kinds[1] / all,
               100.0 * (double)kinds[2] / all, 100.0 * (double)overlap / all);
        printf("tracks/event  signal %.2f  pileup %.2f\n", n ? (double)tracks[0] / (double)n : 0,
               n ? (double)tracks[1] / (double)n : 0);
    }
    return 0;
}

/* ---- run ----------------------------------------------------------------------------------- */

static int write_csv_event(FILE *csv, const sdd_hough_event *ev, const sdd_hough_track *t, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        fprintf(csv, "%" PRIu64 ",%u,%u,%.6f,%.6f,%u,%u,%u,", ev->id, t[i].col, t[i].row,
                (double)t[i].qpt, (double)t[i].phi_t, t[i].layers, t[i].nstubs, t[i].flags);
        unsigned kept = t[i].nstubs < SDD_HOUGH_CELL_SLOTS ? t[i].nstubs : SDD_HOUGH_CELL_SLOTS;
        for (unsigned k = 0; k < kept; k++) {
            fprintf(csv, k ? ";%u" : "%u", t[i].stubs[k]);
        }
        fputc('\n', csv);
    }
    return ferror(csv) ? -1 : 0;
}

void trig_json_summary(struct tjson *j, const sdd_hough_score *s, const sdd_hough_summary *m)
{
    tj_num(j, "pt_min", s->pt_min);
    tj_uint(j, "events", s->events);
    tj_uint(j, "reconstructable", s->reconstructable);
    tj_uint(j, "found", s->found);
    tj_num(j, "efficiency", m->efficiency);
    tj_num(j, "efficiency_err", m->efficiency_err);
    tj_num(j, "fakes_per_event", m->fakes_per_event);
    tj_num(j, "fakes_err", m->fakes_err);
    tj_num(j, "dups_per_event", m->dups_per_event);
    tj_num(j, "dups_err", m->dups_err);
    tj_num(j, "candidates_per_event", m->candidates_per_event);
    tj_uint(j, "overflow", s->overflow);
    tj_num(j, "qpt_res", m->qpt_res);
    tj_num(j, "qpt_bias", m->qpt_bias);
    tj_num(j, "phi_res", m->phi_res);
    tj_num(j, "phi_bias", m->phi_bias);
}

static int hough_run(const struct trig_opts *o)
{
    struct trig_source src;
    if (trig_source_open(&src, o, o->pu[0], o->events ? o->events : (o->input ? 0 : 1000)) != 0) {
        return 1;
    }
    sdd_hough_opts fo;
    trig_finder_opts(o, &src.geom, o->shape, o->impl, o->merge, &fo);
    sdd_hough *h = NULL;
    sdd_err err = sdd_hough_create(&fo, &h);
    sdd_hough_event *ev = malloc(sizeof(*ev));
    sdd_hough_track *tracks = malloc(TRIG_MAX_CELLS * sizeof(*tracks));
    FILE *csv = NULL;
    int rc = -1;
    if (err != SDD_OK || ev == NULL || tracks == NULL) {
        fprintf(stderr, "sddaq trigger hough run: finder: %s\n",
                sdd_strerror(err != SDD_OK ? err : SDD_ENOMEM));
        goto out;
    }
    fo.simd = sdd_hough_get_opts(h)->simd; /* the path taken */
    if (o->output != NULL) {
        csv = fopen(o->output, "w");
        if (csv == NULL) {
            fprintf(stderr, "sddaq trigger hough run: %s: %s\n", o->output, strerror(errno));
            goto out;
        }
        fprintf(csv, "event,col,row,qpt,phi_t,layers,nstubs,flags,stubs\n");
    }
    sdd_hough_score score;
    sdd_hough_score_init(&score, o->pt_min);
    uint64_t cmin = UINT64_MAX, cmax = 0, n = 0;
    while ((rc = trig_source_next(&src, ev)) == 1) {
        int found = sdd_hough_find(h, ev->stubs, ev->nstubs, tracks, TRIG_MAX_CELLS);
        if (found < 0) {
            fprintf(stderr, "sddaq trigger hough run: event %" PRIu64 ": %s\n", ev->id,
                    sdd_strerror(found));
            rc = -1;
            break;
        }
        size_t kept = (size_t)found < TRIG_MAX_CELLS ? (size_t)found : TRIG_MAX_CELLS;
        sdd_hough_score_event(&score, &fo.geom, ev, tracks, kept);
        cmin = (uint64_t)found < cmin ? (uint64_t)found : cmin;
        cmax = (uint64_t)found > cmax ? (uint64_t)found : cmax;
        n++;
        if (csv != NULL && write_csv_event(csv, ev, tracks, kept) != 0) {
            fprintf(stderr, "sddaq trigger hough run: %s: write failed\n", o->output);
            rc = -1;
            break;
        }
    }
    if (rc < 0) {
        goto out;
    }
    if (csv != NULL) {
        int bad = fclose(csv) != 0;
        csv = NULL;
        if (bad) {
            fprintf(stderr, "sddaq trigger hough run: %s: write failed\n", o->output);
            rc = -1;
            goto out;
        }
    }
    cmin = n ? cmin : 0;
    sdd_hough_summary m;
    sdd_hough_score_summarize(&score, &m);
    char what[512];
    describe_source(o, o->pu[0], what, sizeof(what));
    if (o->json) {
        struct tjson j;
        tj_begin(&j, stdout);
        tj_obj(&j, NULL);
        tj_str(&j, "source", what);
        tj_str(&j, "map", trig_shape_name(fo.shape));
        tj_str(&j, "impl", trig_impl_name(fo.impl));
        tj_str(&j, "simd", trig_simd_name(fo.simd));
        tj_bool(&j, "merge", fo.merge);
        tj_num(&j, "bend_window", fo.geom.bend_window > 0 ? fo.geom.bend_window : 0);
        tj_uint(&j, "candidates_min", cmin);
        tj_uint(&j, "candidates_max", cmax);
        trig_json_summary(&j, &score, &m);
        tj_end(&j);
        tj_finish(&j);
    } else {
        printf("events        %" PRIu64 " (%s)\n", n, what);
        printf("finder        %s map %ux%u, %s impl, merge %s, bend window ",
               trig_shape_name(fo.shape), fo.geom.ncols, fo.geom.nrows, trig_impl_name(fo.impl),
               fo.merge ? "on" : "off");
        if (fo.geom.bend_window > 0) {
            printf("%.3g c/GeV\n", fo.geom.bend_window);
        } else {
            printf("off\n");
        }
        printf("candidates    %.2f per event (min %" PRIu64 ", max %" PRIu64 ")\n",
               m.candidates_per_event, cmin, cmax);
        printf("efficiency    %.4f +- %.4f  (%" PRIu64 " of %" PRIu64
               " tracks with pT >= %g GeV/c)\n",
               m.efficiency, m.efficiency_err, score.found, score.reconstructable, score.pt_min);
        printf("fakes         %.3f +- %.3f per event\n", m.fakes_per_event, m.fakes_err);
        printf("duplicates    %.3f +- %.3f per event\n", m.dups_per_event, m.dups_err);
        printf("overflow      %" PRIu64 " candidates with more than %d stubs\n", score.overflow,
               SDD_HOUGH_CELL_SLOTS);
        printf("q/pT          resolution %.4f c/GeV, bias %+.4f\n", m.qpt_res, m.qpt_bias);
        printf("phi_T         resolution %.3f mrad, bias %+.3f\n", m.phi_res * 1e3,
               m.phi_bias * 1e3);
    }
    rc = 0;
out:
    if (csv != NULL) {
        fclose(csv);
    }
    free(tracks);
    free(ev);
    sdd_hough_destroy(h);
    trig_source_close(&src);
    return rc == 0 ? 0 : 1;
}

/* ---- command line -------------------------------------------------------------------------- */

static int parse_float(const char *s, float *out)
{
    double v = 0;
    if (cli_parse_double(s, &v) != 0 || !isfinite((float)v)) {
        return -1;
    }
    *out = (float)v;
    return 0;
}

static int parse_pu_list(const char *s, struct trig_opts *o)
{
    char buf[256];
    if (strlen(s) >= sizeof(buf)) {
        return -1;
    }
    snprintf(buf, sizeof(buf), "%s", s);
    o->npu = 0;
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t != NULL; t = strtok_r(NULL, ",", &save)) {
        if (o->npu == TRIG_MAX_PU || parse_float(t, &o->pu[o->npu]) != 0 || o->pu[o->npu] < 0) {
            return -1;
        }
        o->npu++;
    }
    return o->npu > 0 ? 0 : -1;
}

static int parse_count(const char *s, int *out)
{
    uint64_t v = 0;
    if (cli_parse_size(s, &v) != 0 || v == 0 || v > 4096) {
        return -1;
    }
    *out = (int)v;
    return 0;
}

enum {
    OPT_MAP = 256,
    OPT_IMPL,
    OPT_SIMD,
    OPT_MERGE,
    OPT_BEND,
    OPT_RECT_SCALE,
    OPT_HEX_SCALE,
    OPT_PTMIN,
    OPT_ROUNDS,
    OPT_PASSES,
    OPT_SMOKE,
    OPT_JSON,
};

int cmd_trigger(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"pu", required_argument, NULL, 'p'},
        {"events", required_argument, NULL, 'n'},
        {"seed", required_argument, NULL, 's'},
        {"map", required_argument, NULL, OPT_MAP},
        {"impl", required_argument, NULL, OPT_IMPL},
        {"simd", required_argument, NULL, OPT_SIMD},
        {"merge", no_argument, NULL, OPT_MERGE},
        {"bend-window", required_argument, NULL, OPT_BEND},
        {"rect-scale", required_argument, NULL, OPT_RECT_SCALE},
        {"hex-scale", required_argument, NULL, OPT_HEX_SCALE},
        {"pt-min", required_argument, NULL, OPT_PTMIN},
        {"threads", required_argument, NULL, 't'},
        {"rounds", required_argument, NULL, OPT_ROUNDS},
        {"passes", required_argument, NULL, OPT_PASSES},
        {"smoke", no_argument, NULL, OPT_SMOKE},
        {"json", no_argument, NULL, OPT_JSON},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        usage(stdout);
        return 0;
    }
    if (argc >= 2 && strcmp(argv[1], "rich") == 0) {
        return cmd_trigger_rich(argc - 1, argv + 1);
    }
    if (argc < 3 || strcmp(argv[1], "hough") != 0) {
        if (argc >= 2 && strcmp(argv[1], "hough") != 0) {
            fprintf(stderr, "sddaq trigger: unknown trigger '%s'\n", argv[1]);
        }
        usage(stderr);
        return 2;
    }
    const char *mode = argv[2];
    if (strcmp(mode, "--help") == 0 || strcmp(mode, "-h") == 0) {
        usage(stdout);
        return 0;
    }
    struct trig_opts o = {
        .pu = {200}, .npu = 1, .seed = 1, .pt_min = 3.0, .cell_scale = {1.0f, 1.0f}};
    bool bad = false;
    int c;
    optind = 3;
    while (!bad && (c = getopt_long(argc, argv, "p:n:s:i:o:t:h", longopts, NULL)) != -1) {
        char *end = NULL;
        switch (c) {
        case 'p':
            bad = parse_pu_list(optarg, &o) != 0;
            o.pu_given = true;
            break;
        case 'n':
            bad = cli_parse_size(optarg, &o.events) != 0 || o.events == 0;
            break;
        case 's':
            errno = 0;
            o.seed = strtoull(optarg, &end, 0);
            bad = errno != 0 || end == optarg || *end != '\0' || optarg[0] == '-';
            break;
        case OPT_MAP:
            o.shape_given = true;
            if (strcmp(optarg, "rect") == 0) {
                o.shape = SDD_HOUGH_RECT;
            } else if (strcmp(optarg, "hex") == 0) {
                o.shape = SDD_HOUGH_HEX;
            } else {
                bad = true;
            }
            break;
        case OPT_IMPL:
            o.impl_given = true;
            if (strcmp(optarg, "fast") == 0) {
                o.impl = SDD_HOUGH_FAST;
            } else if (strcmp(optarg, "seed") == 0) {
                o.impl = SDD_HOUGH_SEED;
            } else {
                bad = true;
            }
            break;
        case OPT_SIMD:
            if (strcmp(optarg, "auto") == 0) {
                o.simd = SDD_HOUGH_SIMD_AUTO;
            } else if (strcmp(optarg, "x8") == 0) {
                o.simd = SDD_HOUGH_SIMD_X8;
            } else if (strcmp(optarg, "avx512") == 0) {
                o.simd = SDD_HOUGH_SIMD_AVX512;
            } else {
                bad = true;
            }
            break;
        case OPT_MERGE:
            o.merge = true;
            break;
        case OPT_BEND:
            bad = parse_float(optarg, &o.bend_window) != 0 || o.bend_window < 0;
            o.bend_given = true;
            break;
        case OPT_RECT_SCALE:
        case OPT_HEX_SCALE: {
            float *v = &o.cell_scale[c == OPT_HEX_SCALE ? SDD_HOUGH_HEX : SDD_HOUGH_RECT];
            bad = parse_float(optarg, v) != 0 || !(*v > 0 && *v <= 1);
            break;
        }
        case OPT_PTMIN: {
            float v = 0;
            bad = parse_float(optarg, &v) != 0 || v <= 0;
            o.pt_min = v;
            break;
        }
        case 'i':
            o.input = optarg;
            break;
        case 'o':
            o.output = optarg;
            break;
        case 't':
            bad = parse_count(optarg, &o.threads) != 0;
            break;
        case OPT_ROUNDS:
            bad = parse_count(optarg, &o.rounds) != 0;
            break;
        case OPT_PASSES:
            bad = parse_count(optarg, &o.passes) != 0;
            break;
        case OPT_SMOKE:
            o.smoke = true;
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
        cli_report_bad("sddaq trigger hough", c, optarg, bad);
    }
    if (cli_args_done("sddaq trigger hough", bad, optind, argc, argv) != 0) {
        usage(stderr);
        return 2;
    }
    if (strcmp(mode, "score") != 0 && o.npu > 1) {
        fprintf(stderr, "sddaq trigger hough %s: --pu takes one value\n", mode);
        return 2;
    }
    if (strcmp(mode, "gen") == 0) {
        return hough_gen(&o);
    }
    if (strcmp(mode, "run") == 0) {
        return hough_run(&o);
    }
    if (strcmp(mode, "score") == 0) {
        return trig_score(&o);
    }
    if (strcmp(mode, "bench") == 0) {
        return trig_bench(&o);
    }
    fprintf(stderr, "sddaq trigger hough: unknown mode '%s'\n", mode);
    usage(stderr);
    return 2;
}
