/* Quality of found rings against truth: efficiency (all truth rings, and rings with at least
 * SDD_RICH_GOOD_HITS hits), fakes, duplicates and centre/radius resolution, by the event's
 * truth ring count. A found ring matches a truth ring of its spot when both the centre and the
 * radius lie within the match window. */
#include <math.h>

#include "trigger/rich_impl.h"

void sdd_rich_score_init(sdd_rich_score *s, float match)
{
    memset(s, 0, sizeof(*s));
    s->match = match;
}

static bool matches(const sdd_rich_truth *t, const sdd_rich_ring *r, float w, float *dc)
{
    float dx = r->cx - t->cx, dy = r->cy - t->cy;
    *dc = sqrtf(dx * dx + dy * dy);
    return r->spot == t->spot && *dc < w && fabsf(r->r - t->r) < w;
}

void sdd_rich_score_event(sdd_rich_score *s, const sdd_rich_event *ev, const sdd_rich_ring *rings,
                          size_t n)
{
    unsigned m = ev->nrings <= SDD_RICH_MAX_TRUTH ? ev->nrings : SDD_RICH_MAX_TRUTH;
    s->events++;
    s->events_by[m]++;
    s->rings += n;
    unsigned matched_rings = 0, found_truth = 0;
    for (size_t j = 0; j < n; j++) {
        for (unsigned k = 0; k < m; k++) {
            float dc;
            if (matches(&ev->rings[k], &rings[j], s->match, &dc)) {
                matched_rings++;
                break;
            }
        }
    }
    for (unsigned k = 0; k < m; k++) {
        const sdd_rich_truth *t = &ev->rings[k];
        bool good = t->nhits >= SDD_RICH_GOOD_HITS;
        s->truth[m]++;
        s->good[m] += good;
        int best = -1;
        float best_dc = INFINITY;
        for (size_t j = 0; j < n; j++) {
            float dc;
            if (matches(t, &rings[j], s->match, &dc) && dc < best_dc) {
                best_dc = dc;
                best = (int)j;
            }
        }
        if (best < 0) {
            continue;
        }
        found_truth++;
        s->found[m]++;
        s->good_found[m] += good;
        double dx = rings[best].cx - t->cx, dy = rings[best].cy - t->cy;
        double dr = rings[best].r - t->r;
        s->nres++;
        s->dx_sq += dx * dx;
        s->dy_sq += dy * dy;
        s->dr_sum += dr;
        s->dr_sq += dr * dr;
        s->dc_sum += best_dc;
    }
    uint64_t fakes = n - matched_rings;
    s->fakes += fakes;
    s->fake_events[m] += fakes;
    s->duplicates += matched_rings > found_truth ? matched_rings - found_truth : 0;
}

void sdd_rich_score_merge(sdd_rich_score *d, const sdd_rich_score *s)
{
    d->events += s->events;
    for (int m = 0; m <= SDD_RICH_MAX_TRUTH; m++) {
        d->truth[m] += s->truth[m];
        d->found[m] += s->found[m];
        d->good[m] += s->good[m];
        d->good_found[m] += s->good_found[m];
        d->fake_events[m] += s->fake_events[m];
        d->events_by[m] += s->events_by[m];
    }
    d->rings += s->rings;
    d->fakes += s->fakes;
    d->duplicates += s->duplicates;
    d->nres += s->nres;
    d->dx_sq += s->dx_sq;
    d->dy_sq += s->dy_sq;
    d->dr_sum += s->dr_sum;
    d->dr_sq += s->dr_sq;
    d->dc_sum += s->dc_sum;
}

static double ratio(uint64_t a, uint64_t b)
{
    return b > 0 ? (double)a / (double)b : NAN;
}

static double binom_err(uint64_t a, uint64_t b)
{
    if (b == 0) {
        return NAN;
    }
    double p = (double)a / (double)b;
    return sqrt(p * (1.0 - p) / (double)b);
}

void sdd_rich_score_summarize(const sdd_rich_score *s, sdd_rich_summary *o)
{
    uint64_t truth = 0, found = 0, good = 0, good_found = 0;
    for (int m = 0; m <= SDD_RICH_MAX_TRUTH; m++) {
        truth += s->truth[m];
        found += s->found[m];
        good += s->good[m];
        good_found += s->good_found[m];
        o->eff_by[m] = ratio(s->found[m], s->truth[m]);
        o->good_eff_by[m] = ratio(s->good_found[m], s->good[m]);
        o->fakes_by[m] = ratio(s->fake_events[m], s->events_by[m]);
    }
    o->efficiency = ratio(found, truth);
    o->efficiency_err = binom_err(found, truth);
    o->good_efficiency = ratio(good_found, good);
    o->good_err = binom_err(good_found, good);
    o->fakes_per_event = ratio(s->fakes, s->events);
    o->dups_per_event = ratio(s->duplicates, s->events);
    o->centre_res = s->nres ? sqrt((s->dx_sq + s->dy_sq) / (2.0 * (double)s->nres)) : NAN;
    o->radius_bias = s->nres ? s->dr_sum / (double)s->nres : NAN;
    o->radius_res = s->nres ? sqrt(s->dr_sq / (double)s->nres) : NAN;
}
