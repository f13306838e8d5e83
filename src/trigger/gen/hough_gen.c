/* Truth-level stub generator for one detector sector (REFERENCE.md §4.6): signal tracks with q/pT
 * flat inside the Hough map, soft pileup tracks with a 1/pT^2 spectrum, random noise stubs.
 * Tracks are exact helices through the beam line; stubs are smeared, cut like a front end cuts
 * them and sent through the 48-bit packing, so an event looks exactly like one read from a file
 * or a hardware stream. */
#include <math.h>
#include <stdlib.h>

#include "sddaq/log.h"
#include "sddaq/trigger.h"
#include "trigger/gen/rng.h"

/* Pileup means tuned so an event holds about 80 stubs at PU 140 and 160 at PU 200 (the seed's
 * test load), 60 % of the non-signal stubs from pileup tracks and 40 % noise. Measured with the
 * default options over 40000 events: a signal track leaves 5.5 stubs (16.4 per event), a
 * pileup track 1.6 (60 % miss the sector); PU 140 gives 79.9 stubs (38.1 pileup, 25.5 noise),
 * PU 200 gives 159.7 (85.8 pileup, 57.5 noise). Retune when the stub cuts change. */
static const struct pu_point {
    float pu, pileup_tracks, noise_stubs;
} pu_points[] = {
    {0.0f, 0.0f, 0.0f},
    {140.0f, 24.0f, 25.5f},
    {200.0f, 54.0f, 57.5f},
};

#define PU_POINTS       (sizeof(pu_points) / sizeof(pu_points[0]))
#define RADIUS_JITTER   0.005  /* a stub's radius varies by +-5 mm around its layer's */
#define PILEUP_PHI0_MAX 0.7    /* pileup tracks start this far either side of the centre */
#define NOISE_Z_MAX     1.1    /* noise stubs are flat in z within +-1.1 m */
#define MEAN_MAX        1.0e6f /* a larger Poisson mean is a mistake, not a load */

struct sdd_hough_gen {
    sdd_hough_gen_opts o;
    double k;
    struct gen_rng rng;
    uint64_t next_id;
    uint64_t truncated; /* events cut at SDD_HOUGH_EVENT_MAX_STUBS or _TRACKS */
    bool cut;           /* the event being built was cut */
};

/* A helix as the stub builder needs it. */
struct helix {
    double rho, phi0, z0, eta;
};

void sdd_hough_gen_opts_default(sdd_hough_gen_opts *o)
{
    *o = (sdd_hough_gen_opts){
        .seed = 1,
        .signal_mean = 3.0f,
        .pileup_pt_min = 1.5f,
        .layer_eff = 0.98f,
        .double_stub_prob = 0.02f,
        .pitch = 90e-6f,
        .bend_sigma = 0.1f,
        .z0_sigma = 0.05f,
        .eta_max = 1.0f,
    };
    sdd_hough_geom_default(&o->geom);
    sdd_hough_gen_opts_pileup(o, 200.0f);
}

sdd_err sdd_hough_gen_opts_pileup(sdd_hough_gen_opts *o, float pu)
{
    if (!isfinite(pu) || pu < 0.0f) {
        SDD_ERROR("trigger", "pileup %g: must be finite and >= 0", (double)pu);
        return SDD_EINVAL;
    }
    /* The segment that holds pu; past the last point the last segment extrapolates. */
    size_t i = 1;
    while (i + 1 < PU_POINTS && pu > pu_points[i].pu) {
        i++;
    }
    const struct pu_point *a = &pu_points[i - 1], *b = &pu_points[i];
    float t = (pu - a->pu) / (b->pu - a->pu);
    o->pileup_tracks = a->pileup_tracks + t * (b->pileup_tracks - a->pileup_tracks);
    o->noise_stubs = a->noise_stubs + t * (b->noise_stubs - a->noise_stubs);
    return SDD_OK;
}

static bool in_range(float v, float lo, float hi)
{
    return isfinite(v) && v >= lo && v <= hi;
}

static sdd_err check_opts(const sdd_hough_gen_opts *o)
{
    const char *why = NULL;
    if (sdd_hough_geom_check(&o->geom) != SDD_OK) {
        return SDD_EINVAL; /* the check logged why */
    }
    if (!in_range(o->signal_mean, 0.0f, MEAN_MAX) || !in_range(o->pileup_tracks, 0.0f, MEAN_MAX) ||
        !in_range(o->noise_stubs, 0.0f, MEAN_MAX)) {
        why = "signal_mean, pileup_tracks and noise_stubs must lie in [0, 1e6]";
    } else if (!in_range(o->layer_eff, 0.0f, 1.0f) || !in_range(o->double_stub_prob, 0.0f, 1.0f)) {
        why = "layer_eff and double_stub_prob must lie in [0, 1]";
    } else if (!isfinite(o->pileup_pt_min) || o->pileup_pt_min <= 0.0f) {
        why = "pileup_pt_min must be positive";
    } else if (!in_range(o->pitch, 0.0f, INFINITY) || !in_range(o->bend_sigma, 0.0f, INFINITY) ||
               !in_range(o->z0_sigma, 0.0f, INFINITY) || !in_range(o->eta_max, 0.0f, INFINITY)) {
        why = "pitch, bend_sigma, z0_sigma and eta_max must be finite and >= 0";
    }
    if (why != NULL) {
        SDD_ERROR("trigger", "bad generator options: %s", why);
        return SDD_EINVAL;
    }
    return SDD_OK;
}

sdd_err sdd_hough_gen_create(const sdd_hough_gen_opts *opts, sdd_hough_gen **out)
{
    sdd_err e = check_opts(opts);
    if (e != SDD_OK) {
        return e;
    }
    sdd_hough_gen *g = calloc(1, sizeof(*g));
    if (g == NULL) {
        return SDD_ENOMEM;
    }
    g->o = *opts;
    g->k = sdd_hough_curvature_k(&opts->geom);
    rng_seed(&g->rng, opts->seed);
    *out = g;
    return SDD_OK;
}

void sdd_hough_gen_destroy(sdd_hough_gen *g)
{
    if (g == NULL) {
        return;
    }
    if (g->truncated > 0) {
        SDD_INFO("trigger", "generator: %llu events were cut at the event limits",
                 (unsigned long long)g->truncated);
    }
    free(g);
}

/* Append one stub unless the front end would not send it to this sector: outside the z or phi
 * window, or a bend beyond the pT cut. Returns whether it was added. */
static bool add_stub(sdd_hough_gen *g, sdd_hough_event *ev, int layer, double r, double phi,
                     double z, double bend, int16_t track)
{
    if (fabs(z) >= SDD_STUB_Z_MAX || fabs(bend) >= SDD_STUB_BEND_MAX || phi < -SDD_STUB_PHI_MAX ||
        phi >= SDD_STUB_PHI_MAX) {
        return false;
    }
    if (ev->nstubs >= SDD_HOUGH_EVENT_MAX_STUBS) {
        g->cut = true;
        return false;
    }
    sdd_stub s = {
        .r = (float)r,
        .phi = (float)phi,
        .z = (float)z,
        .bend = (float)bend,
        .layer = (uint8_t)layer,
        .flags = SDD_STUB_VALID,
    };
    /* The front end flags what the neighbour sector also gets, judged by its own estimate. */
    double phi_t = phi + g->k * (r - g->o.geom.pivot_r) * bend;
    if (fabs(phi_t) > g->o.geom.sector_half) {
        s.flags |= SDD_STUB_OVERLAP;
    }
    /* A value that rounds onto a field's edge fails to pack: a front end would drop it too. */
    uint8_t packed[SDD_STUB_PACKED_BYTES];
    if (sdd_stub_pack(&s, packed) != SDD_OK ||
        sdd_stub_unpack(packed, &ev->stubs[ev->nstubs]) != SDD_OK) {
        return false;
    }
    ev->stub_track[ev->nstubs++] = track;
    return true;
}

static double layer_radius(sdd_hough_gen *g, int layer)
{
    return g->o.geom.layer_r[layer] + rng_uniform(&g->rng, -RADIUS_JITTER, RADIUS_JITTER);
}

/* Stubs of one helix; returns the mask of layers that got one. */
static uint8_t track_stubs(sdd_hough_gen *g, sdd_hough_event *ev, const struct helix *h,
                           int16_t track)
{
    const sdd_hough_gen_opts *o = &g->o;
    uint8_t layers = 0;
    for (int L = 0; L < o->geom.nlayers; L++) {
        if (rng_unit(&g->rng) >= o->layer_eff) {
            continue;
        }
        double r = layer_radius(g, L);
        double a = g->k * r * h->rho;
        if (fabs(a) >= 1.0) {
            continue; /* the track curls up before this layer */
        }
        double sigma_phi = o->pitch / sqrt(12.0) / r;
        double phi = h->phi0 - asin(a) + sigma_phi * rng_gauss(&g->rng);
        double z = h->z0 + r * sinh(h->eta);
        double bend = h->rho + o->bend_sigma * rng_gauss(&g->rng);
        if (add_stub(g, ev, L, r, phi, z, bend, track)) {
            layers |= (uint8_t)(1u << L);
        }
        if (rng_unit(&g->rng) < o->double_stub_prob) {
            /* A second cluster a few strips away in the same module. */
            double strips = 2.0 + rng_below(&g->rng, 4);
            double sign = rng_unit(&g->rng) < 0.5 ? -1.0 : 1.0;
            double phi2 = phi + sign * strips * o->pitch / r;
            double bend2 = h->rho + o->bend_sigma * rng_gauss(&g->rng);
            if (add_stub(g, ev, L, r, phi2, z, bend2, track)) {
                layers |= (uint8_t)(1u << L);
            }
        }
    }
    return layers;
}

static void random_vertex(sdd_hough_gen *g, struct helix *h)
{
    h->z0 = g->o.z0_sigma * rng_gauss(&g->rng);
    h->eta = rng_uniform(&g->rng, -g->o.eta_max, g->o.eta_max);
}

static void add_track(sdd_hough_event *ev, const struct helix *h, double phi_t, uint8_t layers,
                      uint8_t kind)
{
    ev->tracks[ev->ntracks++] = (sdd_truth_track){
        .qpt = (float)h->rho,
        .phi0 = (float)h->phi0,
        .phi_t = (float)phi_t,
        .z0 = (float)h->z0,
        .eta = (float)h->eta,
        .layers = layers,
        .kind = kind,
    };
}

/* Signal tracks are kept in the truth even without a stub: they count against efficiency. */
static void signal_tracks(sdd_hough_gen *g, sdd_hough_event *ev)
{
    const sdd_hough_geom *geom = &g->o.geom;
    uint32_t n = rng_poisson(&g->rng, g->o.signal_mean);
    for (uint32_t i = 0; i < n; i++) {
        if (ev->ntracks >= SDD_HOUGH_EVENT_MAX_TRACKS) {
            g->cut = true;
            return;
        }
        struct helix h;
        h.rho = rng_uniform(&g->rng, -geom->qpt_max, geom->qpt_max);
        double phi_t = rng_uniform(&g->rng, -geom->phi_half, geom->phi_half);
        random_vertex(g, &h);
        double a = g->k * geom->pivot_r * h.rho;
        if (fabs(a) >= 1.0) {
            continue; /* curls up inside the pivot radius: no phi_T exists */
        }
        h.phi0 = phi_t + asin(a);
        int16_t t = (int16_t)ev->ntracks;
        uint8_t layers = track_stubs(g, ev, &h, t);
        add_track(ev, &h, phi_t, layers, SDD_TRUTH_SIGNAL);
    }
}

/* Pileup tracks enter the truth only when they left a stub in this sector. */
static void pileup_tracks(sdd_hough_gen *g, sdd_hough_event *ev)
{
    uint32_t n = rng_poisson(&g->rng, g->o.pileup_tracks);
    for (uint32_t i = 0; i < n; i++) {
        if (ev->ntracks >= SDD_HOUGH_EVENT_MAX_TRACKS || ev->nstubs >= SDD_HOUGH_EVENT_MAX_STUBS) {
            g->cut = true;
            return;
        }
        struct helix h;
        double pt = g->o.pileup_pt_min / rng_unit_open0(&g->rng);
        double q = rng_unit(&g->rng) < 0.5 ? -1.0 : 1.0;
        h.rho = q / pt;
        h.phi0 = rng_uniform(&g->rng, -PILEUP_PHI0_MAX, PILEUP_PHI0_MAX);
        random_vertex(g, &h);
        double a = g->k * g->o.geom.pivot_r * h.rho;
        if (fabs(a) >= 1.0) {
            continue;
        }
        uint8_t layers = track_stubs(g, ev, &h, (int16_t)ev->ntracks);
        if (layers != 0) {
            add_track(ev, &h, h.phi0 - asin(a), layers, SDD_TRUTH_PILEUP);
        }
    }
}

static void noise_stubs(sdd_hough_gen *g, sdd_hough_event *ev)
{
    uint32_t n = rng_poisson(&g->rng, g->o.noise_stubs);
    for (uint32_t i = 0; i < n; i++) {
        if (ev->nstubs >= SDD_HOUGH_EVENT_MAX_STUBS) {
            g->cut = true;
            return;
        }
        int L = (int)rng_below(&g->rng, g->o.geom.nlayers);
        double r = layer_radius(g, L);
        double phi = rng_uniform(&g->rng, -SDD_STUB_PHI_MAX, SDD_STUB_PHI_MAX);
        double z = rng_uniform(&g->rng, -NOISE_Z_MAX, NOISE_Z_MAX);
        double bend = rng_uniform(&g->rng, -SDD_STUB_BEND_MAX, SDD_STUB_BEND_MAX);
        add_stub(g, ev, L, r, phi, z, bend, -1);
    }
}

/* A detector delivers stubs in no particular order; nothing downstream may rely on one. */
static void shuffle(sdd_hough_gen *g, sdd_hough_event *ev)
{
    for (uint32_t i = ev->nstubs; i > 1; i--) {
        uint32_t j = rng_below(&g->rng, i);
        sdd_stub s = ev->stubs[i - 1];
        ev->stubs[i - 1] = ev->stubs[j];
        ev->stubs[j] = s;
        int16_t t = ev->stub_track[i - 1];
        ev->stub_track[i - 1] = ev->stub_track[j];
        ev->stub_track[j] = t;
    }
}

sdd_err sdd_hough_gen_next(sdd_hough_gen *g, sdd_hough_event *ev)
{
    ev->id = g->next_id++;
    ev->nstubs = 0;
    ev->ntracks = 0;
    g->cut = false;
    signal_tracks(g, ev);
    pileup_tracks(g, ev);
    noise_stubs(g, ev);
    shuffle(g, ev);
    if (g->cut && g->truncated++ == 0) {
        SDD_WARN("trigger",
                 "generator: event %llu cut at %d stubs / %d tracks; lower the pileup means",
                 (unsigned long long)ev->id, SDD_HOUGH_EVENT_MAX_STUBS, SDD_HOUGH_EVENT_MAX_TRACKS);
    }
    return SDD_OK;
}
