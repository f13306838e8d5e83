/* RICH truth-level generator (REFERENCE §5.8): 0-3 rings per event from a particle mix,
 * Poisson photons per ring growing with theta^2, radial jitter, snapping to the nearest PM with
 * a PM efficiency and one hit per PM, Poisson noise hits, at most 64 hits; timestamps at the
 * configured rate with a minimum spacing so that events never share a merge window. */
#include <math.h>
#include <stdlib.h>

#include "sddaq/log.h"
#include "trigger/gen/rng.h"
#include "trigger/rich_impl.h"

static const float MASS[SDD_RICH_NPARTICLES] = {0.13957f, 0.10566f, 0.000511f};

struct sdd_rich_gen {
    sdd_rich_gen_opts o;
    sdd_rich_pmtab *tab;
    struct gen_rng rng;
    uint64_t next_id;
    uint32_t ts;
    float r_max; /* beta = 1 ring radius */
};

void sdd_rich_gen_opts_default(sdd_rich_gen_opts *o)
{
    memset(o, 0, sizeof(*o));
    sdd_rich_geom_default(&o->geom);
    o->seed = 1;
    o->ring_prob[0] = 0.10f;
    o->ring_prob[1] = 0.60f;
    o->ring_prob[2] = 0.25f;
    o->ring_prob[3] = 0.05f;
    o->mix[SDD_RICH_PION] = 0.6f;
    o->mix[SDD_RICH_MUON] = 0.3f;
    o->mix[SDD_RICH_ELECTRON] = 0.1f;
    o->p_min = 15.0f;
    o->p_max = 35.0f;
    o->hits_mean = 15.0f;
    o->pm_eff = 0.9f;
    o->jitter = 2.0f;
    o->centre_max = 100.0f;
    o->noise_mean = 2.0f;
    o->tick_mean = 4.0f;
    o->tick_min = 2;
}

static bool probs_ok(const float *p, int n)
{
    float sum = 0.0f;
    for (int i = 0; i < n; i++) {
        if (!(p[i] >= 0.0f)) {
            return false;
        }
        sum += p[i];
    }
    return sum > 0.0f && isfinite(sum);
}

sdd_err sdd_rich_gen_create(const sdd_rich_gen_opts *o, sdd_rich_gen **out)
{
    if (o == NULL || out == NULL) {
        return SDD_EINVAL;
    }
    const char *why = NULL;
    if (!probs_ok(o->ring_prob, SDD_RICH_MAX_TRUTH + 1) || !probs_ok(o->mix, SDD_RICH_NPARTICLES)) {
        why = "ring probabilities and particle mix must be >= 0 with a positive sum";
    } else if (!(o->p_min > 0.0f && o->p_max >= o->p_min && o->p_max < 1e4f)) {
        why = "momentum range";
    } else if (!(o->hits_mean >= 0.0f && o->hits_mean <= 200.0f) ||
               !(o->pm_eff >= 0.0f && o->pm_eff <= 1.0f) || !(o->jitter >= 0.0f) ||
               !(o->centre_max >= 0.0f) || !(o->noise_mean >= 0.0f && o->noise_mean <= 64.0f)) {
        why = "hits_mean, pm_eff, jitter, centre_max or noise_mean out of range";
    } else if (!(o->tick_mean >= (float)o->tick_min && o->tick_mean < 1e6f) || o->tick_min == 0) {
        why = "tick_min must be >= 1 and tick_mean >= tick_min";
    }
    if (why != NULL) {
        SDD_ERROR(RICH_LOG, "generator: %s", why);
        return SDD_EINVAL;
    }
    sdd_rich_gen *g = calloc(1, sizeof(*g));
    if (g == NULL) {
        return SDD_ENOMEM;
    }
    sdd_err err = sdd_rich_pmtab_create(&o->geom, &g->tab);
    if (err != SDD_OK) {
        free(g);
        return err;
    }
    g->o = *o;
    rng_seed(&g->rng, o->seed);
    g->r_max = sdd_rich_ring_radius(&o->geom, 0.0f, 1.0f);
    *out = g;
    return SDD_OK;
}

void sdd_rich_gen_destroy(sdd_rich_gen *g)
{
    if (g != NULL) {
        sdd_rich_pmtab_destroy(g->tab);
        free(g);
    }
}

const sdd_rich_pmtab *sdd_rich_gen_pmtab(const sdd_rich_gen *g)
{
    return g->tab;
}

static int pick(struct gen_rng *r, const float *p, int n)
{
    float sum = 0.0f;
    for (int i = 0; i < n; i++) {
        sum += p[i];
    }
    double u = rng_unit(r) * sum;
    for (int i = 0; i < n; i++) {
        if (u < p[i]) {
            return i;
        }
        u -= p[i];
    }
    return n - 1;
}

/* Room for every lit PM of an event before the cap: rings of up to ~60 photons and noise. */
#define GEN_MAX_LIT 512

struct lit {
    unsigned n;
    uint16_t ch[GEN_MAX_LIT];
    int8_t ring[GEN_MAX_LIT];
};

static void light(struct lit *l, int ch, int ring)
{
    if (ch < 0 || l->n == GEN_MAX_LIT) {
        return;
    }
    for (unsigned i = 0; i < l->n; i++) {
        if (l->ch[i] == ch) {
            return; /* one hit per PM: a second photon adds nothing */
        }
    }
    l->ch[l->n] = (uint16_t)ch;
    l->ring[l->n] = (int8_t)ring;
    l->n++;
}

void sdd_rich_gen_next(sdd_rich_gen *g, sdd_rich_event *ev)
{
    const sdd_rich_gen_opts *o = &g->o;
    struct gen_rng *r = &g->rng;
    memset(ev, 0, sizeof(*ev));
    struct lit l = {.n = 0};
    ev->id = g->next_id++;
    ev->nrings = (uint8_t)pick(r, o->ring_prob, SDD_RICH_MAX_TRUTH + 1);
    for (int k = 0; k < ev->nrings; k++) {
        sdd_rich_truth *t = &ev->rings[k];
        t->particle = (uint8_t)pick(r, o->mix, SDD_RICH_NPARTICLES);
        t->p = (float)rng_uniform(r, o->p_min, o->p_max);
        t->r = sdd_rich_ring_radius(&o->geom, MASS[t->particle], t->p);
        t->spot = (uint8_t)rng_below(r, SDD_RICH_SPOTS);
        double rho = o->centre_max * sqrt(rng_unit(r)), phi = rng_uniform(r, 0, 2 * M_PI);
        t->cx = (float)(rho * cos(phi));
        t->cy = (float)(rho * sin(phi));
        double frac = g->r_max > 0 ? t->r / g->r_max : 0;
        uint32_t nph = rng_poisson(r, o->hits_mean * frac * frac);
        for (uint32_t i = 0; i < nph; i++) {
            double a = rng_uniform(r, 0, 2 * M_PI);
            double rr = t->r + o->jitter * rng_gauss(r);
            if (rng_unit(r) >= o->pm_eff) {
                continue;
            }
            float x = (float)(t->cx + rr * cos(a)), y = (float)(t->cy + rr * sin(a));
            light(&l, sdd_rich_pmtab_nearest(g->tab, t->spot, x, y), k);
        }
    }
    uint32_t nnoise = rng_poisson(r, o->noise_mean);
    int npm = g->tab->npm;
    for (uint32_t i = 0; i < nnoise; i++) {
        unsigned spot = rng_below(r, SDD_RICH_SPOTS);
        light(&l, (int)(spot * SDD_RICH_SPOT_PMS + rng_below(r, (uint32_t)npm)), -1);
    }
    /* Shuffle (the boards deliver hits in no ring order), then cap: the hits lost to the cap
     * are a random choice. */
    for (unsigned i = l.n; i > 1; i--) {
        unsigned j = rng_below(r, i);
        uint16_t c = l.ch[i - 1];
        int8_t rg = l.ring[i - 1];
        l.ch[i - 1] = l.ch[j];
        l.ring[i - 1] = l.ring[j];
        l.ch[j] = c;
        l.ring[j] = rg;
    }
    unsigned n = l.n < SDD_RICH_MAX_HITS ? l.n : SDD_RICH_MAX_HITS;
    ev->fine = (uint8_t)rng_below(r, 32);
    for (unsigned i = 0; i < n; i++) {
        unsigned fine = (ev->fine + rng_below(r, 3)) & 31u; /* a little time spread */
        ev->hits[i] = SDD_RICH_HIT(l.ch[i], fine);
        ev->hit_ring[i] = l.ring[i];
        if (l.ring[i] >= 0) {
            ev->rings[l.ring[i]].nhits++;
        }
    }
    ev->nhits = (uint8_t)n;
    /* Spacing: tick_min plus an exponential tail, so the mean is tick_mean. */
    double extra = -log(rng_unit_open0(r)) * (o->tick_mean - (float)o->tick_min);
    uint32_t step = o->tick_min + (uint32_t)floor(extra + rng_unit(r));
    ev->timestamp = g->ts;
    g->ts += step;
    if (g->ts >= (1u << 31)) {
        g->ts = 0; /* a new burst */
    }
}
