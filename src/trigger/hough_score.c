/* Quality of Hough candidates against generator truth (REFERENCE.md §4.6): a candidate
 * matches a truth track when its kept stubs of that track cover at least min_layers layers;
 * efficiency counts reconstructable tracks (pT above threshold, phi_T inside the sector
 * proper, stubs in enough layers) with a match; fakes are candidates matching nothing;
 * duplicates are matches beyond the first of one track. */
#include <math.h>
#include <string.h>

#include "sddaq/trigger.h"

void sdd_hough_score_init(sdd_hough_score *s, double pt_min)
{
    memset(s, 0, sizeof(*s));
    s->pt_min = pt_min;
}

static bool reconstructable(const sdd_hough_score *s, const sdd_hough_geom *g,
                            const sdd_truth_track *t)
{
    return t->qpt != 0.0f && 1.0 / fabs((double)t->qpt) >= s->pt_min &&
           fabsf(t->phi_t) <= g->sector_half && __builtin_popcount(t->layers) >= g->min_layers;
}

/* The truth track a candidate matches (the one with most layers among its stubs; on a tie the
 * lower truth index, so that the order of the stub list does not matter), or -1. */
static int matched_track(const sdd_hough_geom *g, const sdd_hough_event *ev,
                         const sdd_hough_track *c)
{
    int ids[SDD_HOUGH_CELL_SLOTS];
    uint8_t layers[SDD_HOUGH_CELL_SLOTS];
    int n = 0;
    unsigned kept = c->nstubs < SDD_HOUGH_CELL_SLOTS ? c->nstubs : SDD_HOUGH_CELL_SLOTS;
    for (unsigned k = 0; k < kept; k++) {
        unsigned si = c->stubs[k];
        if (si >= ev->nstubs || ev->stub_track[si] < 0) {
            continue;
        }
        int id = ev->stub_track[si];
        int slot = 0;
        while (slot < n && ids[slot] != id) {
            slot++;
        }
        if (slot == n) {
            ids[n] = id;
            layers[n++] = 0;
        }
        layers[slot] |= (uint8_t)(1u << ev->stubs[si].layer);
    }
    int best = -1, best_layers = g->min_layers - 1;
    for (int i = 0; i < n; i++) {
        int nl = __builtin_popcount(layers[i]);
        if (nl > best_layers || (nl == best_layers && best >= 0 && ids[i] < best)) {
            best_layers = nl;
            best = ids[i];
        }
    }
    return best;
}

void sdd_hough_score_event(sdd_hough_score *s, const sdd_hough_geom *g, const sdd_hough_event *ev,
                           const sdd_hough_track *tracks, size_t ntracks)
{
    uint16_t matches[SDD_HOUGH_EVENT_MAX_TRACKS] = {0};
    /* Sums of the matching candidates' parameters: a track's estimate is their mean (any
     * single pick, such as the first in map order, would bias the residuals). */
    double sum_q[SDD_HOUGH_EVENT_MAX_TRACKS], sum_p[SDD_HOUGH_EVENT_MAX_TRACKS];
    uint64_t fakes = 0, dups = 0;
    for (size_t c = 0; c < ntracks; c++) {
        int t = matched_track(g, ev, &tracks[c]);
        if (tracks[c].flags & SDD_TRACK_OVERFLOW) {
            s->overflow++;
        }
        if (t < 0 || (uint32_t)t >= ev->ntracks) {
            fakes++;
            continue;
        }
        if (matches[t]++ == 0) {
            sum_q[t] = 0.0;
            sum_p[t] = 0.0;
        } else {
            dups++;
        }
        sum_q[t] += tracks[c].qpt;
        sum_p[t] += tracks[c].phi_t;
    }
    for (uint32_t t = 0; t < ev->ntracks; t++) {
        const sdd_truth_track *tt = &ev->tracks[t];
        if (!reconstructable(s, g, tt)) {
            continue;
        }
        s->reconstructable++;
        if (matches[t] == 0) {
            continue;
        }
        s->found++;
        double dq = sum_q[t] / matches[t] - tt->qpt, dp = sum_p[t] / matches[t] - tt->phi_t;
        s->nres++;
        s->dqpt_sum += dq;
        s->dqpt_sq += dq * dq;
        s->dphi_sum += dp;
        s->dphi_sq += dp * dp;
    }
    s->events++;
    s->candidates += ntracks;
    s->fakes += fakes;
    s->duplicates += dups;
    s->fakes_sq += (double)(fakes * fakes);
    s->dups_sq += (double)(dups * dups);
}

/* Mean of per-event counts and the standard error of that mean. */
static void mean_err(uint64_t sum, double sum_sq, uint64_t n, double *mean, double *err)
{
    *mean = n ? (double)sum / (double)n : 0.0;
    double var = n > 1 ? (sum_sq - (double)n * *mean * *mean) / (double)(n - 1) : 0.0;
    *err = n > 1 && var > 0.0 ? sqrt(var / (double)n) : 0.0;
}

void sdd_hough_score_summarize(const sdd_hough_score *s, sdd_hough_summary *o)
{
    memset(o, 0, sizeof(*o));
    if (s->reconstructable > 0) {
        double n = (double)s->reconstructable, p = (double)s->found / n;
        o->efficiency = p;
        o->efficiency_err = sqrt(p * (1.0 - p) / n);
    }
    mean_err(s->fakes, s->fakes_sq, s->events, &o->fakes_per_event, &o->fakes_err);
    mean_err(s->duplicates, s->dups_sq, s->events, &o->dups_per_event, &o->dups_err);
    o->candidates_per_event = s->events ? (double)s->candidates / (double)s->events : 0.0;
    if (s->nres > 0) {
        double n = (double)s->nres;
        o->qpt_bias = s->dqpt_sum / n;
        o->phi_bias = s->dphi_sum / n;
        o->qpt_res = sqrt(s->dqpt_sq / n);
        o->phi_res = sqrt(s->dphi_sq / n);
    }
}
