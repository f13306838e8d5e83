/* sddaq trigger hough score: the rectangular and hexagonal maps, with and without cluster
 * merging, on identical events per pileup level. Efficiency at the chosen pT threshold and at
 * 2 GeV/c, fakes, duplicates and candidates per event with their standard errors, and the
 * hex/rect fake ratio with an error that accounts for both maps seeing the same events. Every
 * level is computed before anything is printed, so a broken input leaves no half table. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trigger.h"

enum { SC_MAPS = 2, SC_MERGE = 2, SC_THR = 2 };

/* Sums of a pair of per-event quantities, for means, errors and their covariance. */
struct moments {
    double n, x, xx, y, yy, xy;
};

struct score_cell {
    sdd_hough_opts fo;
    sdd_hough_score s[SC_THR]; /* at pt_min and at 2 GeV/c */
    double cands, cands_sq;
};

struct level {
    float pu;
    struct score_cell cells[SC_MAPS][SC_MERGE];
    double ratio[SC_MERGE], ratio_err[SC_MERGE]; /* hex/rect fakes per event */
};

static void moments_add(struct moments *m, double x, double y)
{
    m->n++;
    m->x += x;
    m->xx += x * x;
    m->y += y;
    m->yy += y * y;
    m->xy += x * y;
}

/* Standard error of the mean of a quantity with this sum and sum of squares over n events. */
static double sem(double n, double sum, double sq)
{
    if (n < 2) {
        return 0;
    }
    double mean = sum / n, var = (sq - n * mean * mean) / (n - 1);
    return var > 0 ? sqrt(var / n) : 0;
}

/* mean(y) / mean(x) and its first-order error. The maps see the same events, so their fake
 * counts are correlated; the covariance term keeps the error from being overstated. NaN when
 * x never fired. */
static void ratio(const struct moments *m, double *r, double *err)
{
    *r = NAN;
    *err = NAN;
    if (m->n < 2 || m->x <= 0) {
        return;
    }
    double n = m->n, mx = m->x / n, my = m->y / n;
    double vx = (m->xx - n * mx * mx) / (n - 1) / n, vy = (m->yy - n * my * my) / (n - 1) / n;
    double cxy = (m->xy - n * mx * my) / (n - 1) / n;
    *r = my / mx;
    if (my > 0) {
        double rel = vx / (mx * mx) + vy / (my * my) - 2 * cxy / (mx * my);
        *err = *r * sqrt(rel > 0 ? rel : 0);
    } else {
        *err = sqrt(vy > 0 ? vy : 0) / mx;
    }
}

/* Both maps, with and without merge, on the same events of one pileup level. */
static int score_level(const struct trig_opts *o, float pu, sdd_hough_event *ev,
                       sdd_hough_track *tracks, struct level *lv)
{
    struct trig_source src;
    uint64_t events = o->events ? o->events : (o->input ? 0 : 2000);
    if (trig_source_open(&src, o, pu, events) != 0) {
        return -1;
    }
    memset(lv, 0, sizeof(*lv));
    lv->pu = pu;
    sdd_hough *h[SC_MAPS][SC_MERGE] = {{NULL}};
    struct moments fakes[SC_MERGE];
    memset(fakes, 0, sizeof(fakes));
    int rc = 0;
    for (int s = 0; s < SC_MAPS && rc == 0; s++) {
        for (int g = 0; g < SC_MERGE && rc == 0; g++) {
            struct score_cell *c = &lv->cells[s][g];
            trig_finder_opts(o, &src.geom, s ? SDD_HOUGH_HEX : SDD_HOUGH_RECT, o->impl, g != 0,
                             &c->fo);
            sdd_hough_score_init(&c->s[0], o->pt_min);
            sdd_hough_score_init(&c->s[1], 2.0);
            sdd_err err = sdd_hough_create(&c->fo, &h[s][g]);
            if (err != SDD_OK) {
                fprintf(stderr, "sddaq trigger hough score: finder: %s\n", sdd_strerror(err));
                rc = -1;
            }
        }
    }
    while (rc == 0 && (rc = trig_source_next(&src, ev)) == 1) {
        rc = 0;
        for (int g = 0; g < SC_MERGE && rc == 0; g++) {
            double f[SC_MAPS] = {0};
            for (int s = 0; s < SC_MAPS && rc == 0; s++) {
                struct score_cell *c = &lv->cells[s][g];
                int found = sdd_hough_find(h[s][g], ev->stubs, ev->nstubs, tracks, TRIG_MAX_CELLS);
                if (found < 0) {
                    fprintf(stderr, "sddaq trigger hough score: event %" PRIu64 ": %s\n", ev->id,
                            sdd_strerror(found));
                    rc = -1;
                    break;
                }
                size_t kept = (size_t)found < TRIG_MAX_CELLS ? (size_t)found : TRIG_MAX_CELLS;
                uint64_t fakes_before = c->s[0].fakes;
                for (int t = 0; t < SC_THR; t++) {
                    sdd_hough_score_event(&c->s[t], &c->fo.geom, ev, tracks, kept);
                }
                f[s] = (double)(c->s[0].fakes - fakes_before);
                c->cands += found;
                c->cands_sq += (double)found * found;
            }
            moments_add(&fakes[g], f[0], f[1]);
        }
    }
    for (int g = 0; g < SC_MERGE; g++) {
        ratio(&fakes[g], &lv->ratio[g], &lv->ratio_err[g]);
    }
    for (int s = 0; s < SC_MAPS; s++) {
        for (int g = 0; g < SC_MERGE; g++) {
            sdd_hough_destroy(h[s][g]);
        }
    }
    trig_source_close(&src);
    return rc;
}

static void pu_label(const struct trig_opts *o, const struct level *lv, char *buf, size_t len)
{
    snprintf(buf, len, o->input ? "file" : "%g", lv->pu);
}

static void row_json(const struct trig_opts *o, struct tjson *j, const struct level *lv,
                     const struct score_cell *c)
{
    double n = (double)c->s[0].events;
    tj_obj(j, NULL);
    if (o->input != NULL) {
        tj_str(j, "pu", "file");
    } else {
        tj_num(j, "pu", lv->pu);
    }
    tj_str(j, "map", trig_shape_name(c->fo.shape));
    tj_bool(j, "merge", c->fo.merge);
    tj_num(j, "candidates_per_event", n > 0 ? c->cands / n : 0);
    tj_num(j, "candidates_err", sem(n, c->cands, c->cands_sq));
    for (int t = 0; t < SC_THR; t++) {
        sdd_hough_summary m;
        sdd_hough_score_summarize(&c->s[t], &m);
        tj_obj(j, t == 0 ? "at_pt_min" : "at_2gev");
        trig_json_summary(j, &c->s[t], &m);
        tj_end(j);
    }
    tj_end(j);
}

static void print_json(const struct trig_opts *o, const struct level *lv, int nlv)
{
    const sdd_hough_geom *g = &lv[0].cells[0][0].fo.geom;
    struct tjson j;
    tj_begin(&j, stdout);
    tj_obj(&j, NULL);
    if (o->input != NULL) {
        tj_str(&j, "file", o->input);
    } else {
        tj_uint(&j, "seed", o->seed);
    }
    tj_str(&j, "impl", trig_impl_name(o->impl));
    tj_num(&j, "pt_min", o->pt_min);
    tj_num(&j, "bend_window", g->bend_window > 0 ? g->bend_window : 0);
    tj_num(&j, "rect_scale", o->cell_scale[SDD_HOUGH_RECT]);
    tj_num(&j, "hex_scale", o->cell_scale[SDD_HOUGH_HEX]);
    tj_arr(&j, "rows");
    for (int p = 0; p < nlv; p++) {
        for (int m = 0; m < SC_MERGE; m++) {
            for (int s = 0; s < SC_MAPS; s++) {
                row_json(o, &j, &lv[p], &lv[p].cells[s][m]);
            }
        }
    }
    tj_end(&j);
    tj_arr(&j, "hex_rect_fake_ratio");
    for (int p = 0; p < nlv; p++) {
        for (int m = 0; m < SC_MERGE; m++) {
            tj_obj(&j, NULL);
            if (o->input != NULL) {
                tj_str(&j, "pu", "file");
            } else {
                tj_num(&j, "pu", lv[p].pu);
            }
            tj_bool(&j, "merge", m != 0);
            tj_num(&j, "ratio", lv[p].ratio[m]);
            tj_num(&j, "err", lv[p].ratio_err[m]);
            tj_end(&j);
        }
    }
    tj_finish(&j);
}

static void print_table(const struct trig_opts *o, const struct level *lv, int nlv)
{
    const sdd_hough_geom *g = &lv[0].cells[0][0].fo.geom;
    char a[32], b[32], c[32], d[32], e[32], f[32];
    if (o->input != NULL) {
        printf("events of %s; ", o->input);
    } else {
        printf("generated events, seed %" PRIu64 "; ", o->seed);
    }
    printf("%s impl, %ux%u maps, bend window ", trig_impl_name(o->impl), g->ncols, g->nrows);
    printf(g->bend_window > 0 ? "%.3g c/GeV" : "off", g->bend_window);
    printf(", cell scale rect %.3g hex %.3g\n", o->cell_scale[SDD_HOUGH_RECT],
           o->cell_scale[SDD_HOUGH_HEX]);
    printf("per event; errors are standard errors of the mean (efficiency: binomial)\n");
    snprintf(a, sizeof(a), "eff(pT>=%g)", o->pt_min);
    printf("%-5s %-4s %-5s %7s  %-15s %-15s %-15s %-13s %-13s %6s\n", "PU", "map", "merge",
           "events", a, "eff(pT>=2)", "fakes", "duplicates", "candidates", "ovfl");
    for (int p = 0; p < nlv; p++) {
        for (int m = 0; m < SC_MERGE; m++) {
            for (int s = 0; s < SC_MAPS; s++) {
                const struct score_cell *cell = &lv[p].cells[s][m];
                sdd_hough_summary m0, m1;
                sdd_hough_score_summarize(&cell->s[0], &m0);
                sdd_hough_score_summarize(&cell->s[1], &m1);
                double n = (double)cell->s[0].events;
                snprintf(a, sizeof(a), "%.4f+-%.4f", m0.efficiency, m0.efficiency_err);
                snprintf(b, sizeof(b), "%.4f+-%.4f", m1.efficiency, m1.efficiency_err);
                snprintf(c, sizeof(c), "%.3f+-%.3f", m0.fakes_per_event, m0.fakes_err);
                snprintf(d, sizeof(d), "%.3f+-%.3f", m0.dups_per_event, m0.dups_err);
                snprintf(e, sizeof(e), "%.2f+-%.2f", n > 0 ? cell->cands / n : 0,
                         sem(n, cell->cands, cell->cands_sq));
                pu_label(o, &lv[p], f, sizeof(f));
                printf("%-5s %-4s %-5s %7.0f  %-15s %-15s %-15s %-13s %-13s %6" PRIu64 "\n", f,
                       trig_shape_name(cell->fo.shape), m ? "on" : "off", n, a, b, c, d, e,
                       cell->s[0].overflow);
            }
        }
    }
    printf("\nhex/rect fakes per event (same events, error propagated with their covariance)\n");
    for (int p = 0; p < nlv; p++) {
        for (int m = 0; m < SC_MERGE; m++) {
            pu_label(o, &lv[p], f, sizeof(f));
            printf("PU %-5s merge %-3s  ", f, m ? "on" : "off");
            if (isfinite(lv[p].ratio[m])) {
                printf("%.3f +- %.3f\n", lv[p].ratio[m], lv[p].ratio_err[m]);
            } else {
                printf("n/a (the rect map made no fakes)\n");
            }
        }
    }
}

int trig_score(const struct trig_opts *o)
{
    static const float default_pu[] = {0, 140, 200};
    const float *pu = o->pu_given ? o->pu : default_pu;
    int npu = o->pu_given ? o->npu : 3;
    if (o->input != NULL) {
        npu = 1; /* the file's events, whatever pileup made them */
    }
    sdd_hough_event *ev = malloc(sizeof(*ev));
    sdd_hough_track *tracks = malloc(TRIG_MAX_CELLS * sizeof(*tracks));
    struct level *lv = calloc((size_t)npu, sizeof(*lv));
    int rc = ev && tracks && lv ? 0 : -1;
    if (rc != 0) {
        fprintf(stderr, "sddaq trigger hough score: %s\n", sdd_strerror(SDD_ENOMEM));
    }
    for (int p = 0; p < npu && rc == 0; p++) {
        rc = score_level(o, pu[p], ev, tracks, &lv[p]);
    }
    if (rc == 0 && o->json) {
        print_json(o, lv, npu);
    } else if (rc == 0) {
        print_table(o, lv, npu);
    }
    free(lv);
    free(tracks);
    free(ev);
    return rc == 0 ? 0 : 1;
}
