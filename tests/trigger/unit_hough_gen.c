/* The truth-level stub generator and the event file (src/trigger/gen/): a seed gives the same
 * events and another seed others; PU 0 is signal only; the mean stub count lands on the tuned
 * loads at PU 140 and 200; every stub lies on its truth helix within the smear and the
 * quantisation, with the bend, z, truth layer masks and overlap flags consistent; the event
 * limits hold under absurd loads; a file reads back exactly what was written and then ends, and
 * every kind of truncation or corruption is SDD_ECORRUPT (a newer version SDD_ENOTSUP); bad
 * options and unstorable events are SDD_EINVAL. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "sddaq/log.h"
#include "sddaq/trigger.h"

#define PHI_STEP  (2.0 * SDD_STUB_PHI_MAX / 16384.0)
#define R_STEP    ((SDD_STUB_R_MAX - SDD_STUB_R_MIN) / 4096.0)
#define Z_STEP    (2.0 * SDD_STUB_Z_MAX / 4096.0)
#define BEND_STEP (2.0 * SDD_STUB_BEND_MAX / 32.0)

static sdd_hough_event *new_event(void)
{
    sdd_hough_event *ev = malloc(sizeof(*ev));
    CHECK_REQUIRE(ev != NULL);
    return ev;
}

static sdd_hough_gen *new_gen(const sdd_hough_gen_opts *o)
{
    sdd_hough_gen *g = NULL;
    CHECK_OK(sdd_hough_gen_create(o, &g));
    CHECK_REQUIRE(g != NULL);
    return g;
}

static bool stub_eq(const sdd_stub *a, const sdd_stub *b)
{
    return a->r == b->r && a->phi == b->phi && a->z == b->z && a->bend == b->bend &&
           a->layer == b->layer && a->flags == b->flags;
}

static bool track_eq(const sdd_truth_track *a, const sdd_truth_track *b)
{
    return a->qpt == b->qpt && a->phi0 == b->phi0 && a->phi_t == b->phi_t && a->z0 == b->z0 &&
           a->eta == b->eta && a->layers == b->layers && a->kind == b->kind;
}

static bool event_eq(const sdd_hough_event *a, const sdd_hough_event *b)
{
    if (a->id != b->id || a->nstubs != b->nstubs || a->ntracks != b->ntracks) {
        return false;
    }
    for (uint32_t i = 0; i < a->nstubs; i++) {
        if (!stub_eq(&a->stubs[i], &b->stubs[i]) || a->stub_track[i] != b->stub_track[i]) {
            return false;
        }
    }
    for (uint32_t i = 0; i < a->ntracks; i++) {
        if (!track_eq(&a->tracks[i], &b->tracks[i])) {
            return false;
        }
    }
    return true;
}

/* Truth indices in range and each track's layer mask made of exactly its stubs' layers. */
static bool event_consistent(const sdd_hough_event *ev)
{
    uint8_t layers[SDD_HOUGH_EVENT_MAX_TRACKS] = {0};
    if (ev->nstubs > SDD_HOUGH_EVENT_MAX_STUBS || ev->ntracks > SDD_HOUGH_EVENT_MAX_TRACKS) {
        return false;
    }
    for (uint32_t i = 0; i < ev->nstubs; i++) {
        int t = ev->stub_track[i];
        if (t < -1 || t >= (int)ev->ntracks || !(ev->stubs[i].flags & SDD_STUB_VALID)) {
            return false;
        }
        if (t >= 0) {
            layers[t] |= (uint8_t)(1u << ev->stubs[i].layer);
        }
    }
    for (uint32_t t = 0; t < ev->ntracks; t++) {
        if (ev->tracks[t].layers != layers[t] ||
            (ev->tracks[t].kind == SDD_TRUTH_PILEUP && layers[t] == 0)) {
            return false;
        }
    }
    return true;
}

static void test_determinism(void)
{
    sdd_hough_gen_opts o;
    sdd_hough_gen_opts_default(&o);
    o.seed = 7;
    sdd_hough_gen *a = new_gen(&o), *b = new_gen(&o);
    o.seed = 8;
    sdd_hough_gen *c = new_gen(&o);
    sdd_hough_event *ea = new_event(), *eb = new_event(), *ec = new_event();
    int same = 0, differ = 0, ids = 0;
    for (int i = 0; i < 100; i++) {
        sdd_hough_gen_next(a, ea);
        sdd_hough_gen_next(b, eb);
        sdd_hough_gen_next(c, ec);
        same += event_eq(ea, eb);
        differ += !event_eq(ea, ec);
        ids += ea->id == (uint64_t)i && ec->id == (uint64_t)i;
    }
    CHECK_EQ(same, 100);
    CHECK_EQ(differ, 100);
    CHECK_EQ(ids, 100);
    sdd_hough_gen_destroy(a);
    sdd_hough_gen_destroy(b);
    sdd_hough_gen_destroy(c);
    free(ea);
    free(eb);
    free(ec);
}

static void test_pileup_points(void)
{
    sdd_hough_gen_opts o, p140, p200;
    sdd_hough_gen_opts_default(&o);
    sdd_hough_gen_opts_default(&p140);
    sdd_hough_gen_opts_default(&p200);
    CHECK_OK(sdd_hough_gen_opts_pileup(&p140, 140.0f));
    CHECK(p200.pileup_tracks > p140.pileup_tracks && p200.noise_stubs > p140.noise_stubs);
    CHECK_OK(sdd_hough_gen_opts_pileup(&o, 200.0f));
    CHECK(o.pileup_tracks == p200.pileup_tracks && o.noise_stubs == p200.noise_stubs);
    CHECK_OK(sdd_hough_gen_opts_pileup(&o, 0.0f));
    CHECK(o.pileup_tracks == 0.0f && o.noise_stubs == 0.0f);
    CHECK_OK(sdd_hough_gen_opts_pileup(&o, 70.0f));
    CHECK(fabsf(o.pileup_tracks - p140.pileup_tracks / 2) < 1e-4f);
    CHECK(fabsf(o.noise_stubs - p140.noise_stubs / 2) < 1e-4f);
    CHECK_OK(sdd_hough_gen_opts_pileup(&o, 170.0f));
    CHECK(fabsf(o.pileup_tracks - (p140.pileup_tracks + p200.pileup_tracks) / 2) < 1e-3f);
    CHECK_OK(sdd_hough_gen_opts_pileup(&o, 260.0f)); /* extrapolates the 140-200 line */
    CHECK(fabsf(o.pileup_tracks - (2 * p200.pileup_tracks - p140.pileup_tracks)) < 1e-3f);
    CHECK(fabsf(o.noise_stubs - (2 * p200.noise_stubs - p140.noise_stubs)) < 1e-3f);

    sdd_hough_gen_opts keep = o;
    CHECK_EQ(sdd_hough_gen_opts_pileup(&o, -1.0f), SDD_EINVAL);
    CHECK_EQ(sdd_hough_gen_opts_pileup(&o, NAN), SDD_EINVAL);
    CHECK_EQ(sdd_hough_gen_opts_pileup(&o, INFINITY), SDD_EINVAL);
    CHECK(o.pileup_tracks == keep.pileup_tracks && o.noise_stubs == keep.noise_stubs);
}

static void test_pu0_signal_only(void)
{
    sdd_hough_gen_opts o;
    sdd_hough_gen_opts_default(&o);
    CHECK_OK(sdd_hough_gen_opts_pileup(&o, 0.0f));
    sdd_hough_gen *g = new_gen(&o);
    sdd_hough_event *ev = new_event();
    int noise = 0, pileup = 0, consistent = 0;
    uint64_t tracks = 0;
    for (int i = 0; i < 1000; i++) {
        sdd_hough_gen_next(g, ev);
        for (uint32_t s = 0; s < ev->nstubs; s++) {
            noise += ev->stub_track[s] < 0;
        }
        for (uint32_t t = 0; t < ev->ntracks; t++) {
            pileup += ev->tracks[t].kind != SDD_TRUTH_SIGNAL;
        }
        tracks += ev->ntracks;
        consistent += event_consistent(ev);
    }
    CHECK_EQ(noise, 0);
    CHECK_EQ(pileup, 0);
    CHECK_EQ(consistent, 1000);
    CHECK(tracks > 2800 && tracks < 3200); /* Poisson(3) per event */
    sdd_hough_gen_destroy(g);
    free(ev);
}

/* Mean stubs per event over 2000 events at a pileup level, and the share of events whose first
 * stub is noise (zero without the shuffle: signal stubs are made first). */
static double mean_stubs(float pu, double *first_noise)
{
    sdd_hough_gen_opts o;
    sdd_hough_gen_opts_default(&o);
    o.seed = 12345;
    CHECK_OK(sdd_hough_gen_opts_pileup(&o, pu));
    sdd_hough_gen *g = new_gen(&o);
    sdd_hough_event *ev = new_event();
    uint64_t total = 0, noise_first = 0;
    int consistent = 0;
    for (int i = 0; i < 2000; i++) {
        sdd_hough_gen_next(g, ev);
        total += ev->nstubs;
        noise_first += ev->nstubs > 0 && ev->stub_track[0] < 0;
        consistent += event_consistent(ev);
    }
    CHECK_EQ(consistent, 2000);
    sdd_hough_gen_destroy(g);
    free(ev);
    *first_noise = noise_first / 2000.0;
    return total / 2000.0;
}

static void test_mean_load(void)
{
    double first_noise;
    double m140 = mean_stubs(140.0f, &first_noise);
    printf("PU140: %.1f stubs per event\n", m140);
    CHECK(m140 >= 70.0 && m140 <= 90.0);
    double m200 = mean_stubs(200.0f, &first_noise);
    printf("PU200: %.1f stubs per event, first stub noise in %.2f\n", m200, first_noise);
    CHECK(m200 >= 145.0 && m200 <= 175.0);
    CHECK(first_noise > 0.25 && first_noise < 0.47); /* noise is ~36 % of the stubs */
}

struct physics {
    int stubs, phi_bad, bend_bad, z_bad, overlap_bad, overlap_checked, truth_bad, noise_bad;
    double pull_sq, bend_sq; /* phi pulls of all track stubs; bend residuals at |q/pT| < 0.2 */
    int nbend;
};

static void check_stub(const sdd_hough_geom *geom, double k, const sdd_hough_event *ev, uint32_t i,
                       struct physics *p)
{
    const sdd_stub *s = &ev->stubs[i];
    double r = s->r;
    /* The overlap flag is decided on the unquantised values: skip stubs near the edge. */
    double phi_t = s->phi + k * (r - geom->pivot_r) * s->bend;
    double margin = PHI_STEP + k * fabs(r - geom->pivot_r) * BEND_STEP + 1e-4;
    if (fabs(fabs(phi_t) - geom->sector_half) > margin) {
        p->overlap_checked++;
        p->overlap_bad += !!(s->flags & SDD_STUB_OVERLAP) != (fabs(phi_t) > geom->sector_half);
    }
    int t = ev->stub_track[i];
    if (t < 0) {
        p->noise_bad += fabs(s->z) > 1.1 + Z_STEP || s->layer >= geom->nlayers ||
                        fabs(r - geom->layer_r[s->layer]) > 0.005 + R_STEP;
        return;
    }
    const sdd_truth_track *tr = &ev->tracks[t];
    double rho = tr->qpt;
    p->stubs++;
    /* r is known to half a step, which moves the helix by k*rho*dr. */
    double sigma = 90e-6 / sqrt(12.0) / r;
    double dphi = s->phi - (tr->phi0 - asin(k * r * rho));
    double quant = PHI_STEP / 2 + k * fabs(rho) * R_STEP / 2 + 1e-6;
    p->phi_bad += fabs(dphi) > 5 * sigma + quant;
    /* The pull includes the uniform quantisation errors of phi and (through the helix) r. */
    double dr_phi = k * fabs(rho) * R_STEP;
    double sigma_all = sqrt(sigma * sigma + (PHI_STEP * PHI_STEP + dr_phi * dr_phi) / 12.0);
    p->pull_sq += (dphi / sigma_all) * (dphi / sigma_all);
    double dbend = s->bend - rho;
    p->bend_bad += fabs(dbend) > 6 * 0.1 + BEND_STEP / 2;
    if (fabs(rho) < 0.2) {
        p->bend_sq += dbend * dbend;
        p->nbend++;
    }
    double dz = s->z - (tr->z0 + r * sinh(tr->eta));
    p->z_bad += fabs(dz) > Z_STEP / 2 + fabs(sinh(tr->eta)) * R_STEP / 2 + 1e-5;
}

static void check_truth(const sdd_hough_geom *geom, double k, const sdd_truth_track *t,
                        struct physics *p)
{
    double want_phi_t = t->phi0 - asin(k * geom->pivot_r * t->qpt);
    bool ok = fabs(t->phi_t - want_phi_t) < 1e-6 && fabs(t->eta) <= 1.0f;
    if (t->kind == SDD_TRUTH_SIGNAL) {
        ok = ok && fabs(t->qpt) <= geom->qpt_max && fabs(t->phi_t) <= geom->phi_half;
    } else {
        ok = ok && fabs(t->qpt) <= 1.0 / 1.5 + 1e-6 && fabs(t->phi0) <= 0.7;
    }
    p->truth_bad += !ok;
}

/* Without double stubs every track stub must lie on its helix. */
static void test_physics(void)
{
    sdd_hough_gen_opts o;
    sdd_hough_gen_opts_default(&o);
    o.double_stub_prob = 0.0f;
    o.seed = 99;
    sdd_hough_gen *g = new_gen(&o);
    sdd_hough_event *ev = new_event();
    double k = sdd_hough_curvature_k(&o.geom);
    struct physics p = {0};
    int consistent = 0;
    for (int n = 0; n < 500; n++) {
        sdd_hough_gen_next(g, ev);
        consistent += event_consistent(ev);
        for (uint32_t i = 0; i < ev->nstubs; i++) {
            check_stub(&o.geom, k, ev, i, &p);
        }
        for (uint32_t t = 0; t < ev->ntracks; t++) {
            check_truth(&o.geom, k, &ev->tracks[t], &p);
        }
    }
    double pull = sqrt(p.pull_sq / p.stubs), bend_rms = sqrt(p.bend_sq / p.nbend);
    printf("physics: %d track stubs, phi pull RMS %.3f, bend RMS %.4f, %d overlap checks\n",
           p.stubs, pull, bend_rms, p.overlap_checked);
    CHECK_EQ(consistent, 500);
    CHECK(p.stubs > 20000);
    CHECK_EQ(p.phi_bad, 0);
    CHECK_EQ(p.bend_bad, 0);
    CHECK_EQ(p.z_bad, 0);
    CHECK_EQ(p.truth_bad, 0);
    CHECK_EQ(p.noise_bad, 0);
    CHECK_EQ(p.overlap_bad, 0);
    CHECK(p.overlap_checked > 50000);
    CHECK(pull > 0.97 && pull < 1.03); /* the smear is pitch/sqrt(12), not more, not less */
    CHECK(bend_rms > 0.095 && bend_rms < 0.105);
    sdd_hough_gen_destroy(g);
    free(ev);
}

/* Double stubs: same track and layer, 2 to 5 pitches apart in r*phi. */
static void test_double_stubs(void)
{
    sdd_hough_gen_opts o;
    sdd_hough_gen_opts_default(&o);
    o.double_stub_prob = 0.5f;
    sdd_hough_gen *g = new_gen(&o);
    sdd_hough_event *ev = new_event();
    int pairs = 0, bad = 0;
    for (int n = 0; n < 200; n++) {
        sdd_hough_gen_next(g, ev);
        for (uint32_t i = 0; i < ev->nstubs; i++) {
            for (uint32_t j = i + 1; j < ev->nstubs; j++) {
                const sdd_stub *a = &ev->stubs[i], *b = &ev->stubs[j];
                if (ev->stub_track[i] < 0 || ev->stub_track[i] != ev->stub_track[j] ||
                    a->layer != b->layer) {
                    continue;
                }
                pairs++;
                double pitches = fabs(a->phi - b->phi) * a->r / 90e-6;
                /* Both carry the smear and the quantisation; allow 1.5 pitches of it. */
                bad += pitches < 0.5 || pitches > 6.5 || a->z != b->z;
            }
        }
    }
    printf("double stubs: %d pairs\n", pairs);
    CHECK(pairs > 1000);
    CHECK_EQ(bad, 0);
    sdd_hough_gen_destroy(g);
    free(ev);
}

/* Loads far beyond the limits: events stop at them and stay consistent. */
static void test_limits(void)
{
    sdd_hough_gen_opts o;
    sdd_hough_gen_opts_default(&o);
    o.pileup_tracks = 5000.0f;
    o.noise_stubs = 3000.0f;
    o.signal_mean = 800.0f;
    sdd_hough_gen *g = new_gen(&o);
    sdd_hough_event *ev = new_event();
    int full = 0, consistent = 0;
    for (int n = 0; n < 20; n++) {
        sdd_hough_gen_next(g, ev);
        consistent += event_consistent(ev);
        full +=
            ev->nstubs == SDD_HOUGH_EVENT_MAX_STUBS || ev->ntracks == SDD_HOUGH_EVENT_MAX_TRACKS;
    }
    CHECK_EQ(consistent, 20);
    CHECK_EQ(full, 20);
    sdd_hough_gen_destroy(g);
    free(ev);
}

static void test_opts_validation(void)
{
    sdd_hough_gen_opts good;
    sdd_hough_gen_opts_default(&good);
    sdd_hough_gen_opts bad[24];
    int n = 0;
    for (int i = 0; i < 24; i++) {
        bad[i] = good;
    }
    bad[n++].geom.ncols = 0;
    bad[n++].geom.nlayers = 8;
    bad[n++].geom.bfield = NAN;
    bad[n++].layer_eff = 1.01f;
    bad[n++].layer_eff = -0.1f;
    bad[n++].layer_eff = NAN;
    bad[n++].double_stub_prob = 2.0f;
    bad[n++].signal_mean = -1.0f;
    bad[n++].signal_mean = INFINITY;
    bad[n++].pileup_tracks = -0.5f;
    bad[n++].pileup_tracks = NAN;
    bad[n++].noise_stubs = -1.0f;
    bad[n++].noise_stubs = 1e9f;
    bad[n++].pileup_pt_min = 0.0f;
    bad[n++].pileup_pt_min = NAN;
    bad[n++].pitch = -1e-6f;
    bad[n++].bend_sigma = INFINITY;
    bad[n++].z0_sigma = -1.0f;
    bad[n++].eta_max = NAN;
    for (int i = 0; i < n; i++) {
        sdd_hough_gen *g = (sdd_hough_gen *)&good; /* must stay untouched */
        sdd_err e = sdd_hough_gen_create(&bad[i], &g);
        if (e != SDD_EINVAL) {
            fprintf(stderr, "bad options #%d accepted (%d)\n", i, e);
        }
        CHECK_EQ(e, SDD_EINVAL);
        CHECK(g == (sdd_hough_gen *)&good);
    }
    /* The edges of the ranges are fine. */
    sdd_hough_gen_opts edge = good;
    edge.layer_eff = 1.0f;
    edge.double_stub_prob = 0.0f;
    edge.signal_mean = 0.0f;
    edge.bend_sigma = 0.0f;
    sdd_hough_gen *g = NULL;
    CHECK_OK(sdd_hough_gen_create(&edge, &g));
    sdd_hough_gen_destroy(g);
    sdd_hough_gen_destroy(NULL);
}

/* ---- files ---- */

static char tmp_path[64];

static void make_tmp(void)
{
    strcpy(tmp_path, "/tmp/sddaq-hough-XXXXXX");
    int fd = mkstemp(tmp_path);
    CHECK_REQUIRE(fd >= 0);
    close(fd);
}

static size_t slurp(uint8_t **out)
{
    FILE *f = fopen(tmp_path, "rb");
    CHECK_REQUIRE(f != NULL);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    *out = malloc((size_t)n + 64);
    CHECK_REQUIRE(*out != NULL && fread(*out, 1, (size_t)n, f) == (size_t)n);
    fclose(f);
    return (size_t)n;
}

static void spit(const uint8_t *buf, size_t n)
{
    FILE *f = fopen(tmp_path, "wb");
    CHECK_REQUIRE(f != NULL && fwrite(buf, 1, n, f) == n);
    fclose(f);
}

/* Write n generated events (PU 200) to tmp_path, keeping copies in evs. */
static void write_events(sdd_hough_event *evs, int n, sdd_hough_geom *geom)
{
    sdd_hough_gen_opts o;
    sdd_hough_gen_opts_default(&o);
    o.seed = 4242;
    *geom = o.geom;
    sdd_hough_gen *g = new_gen(&o);
    sdd_hough_file *f = NULL;
    CHECK_OK(sdd_hough_file_create(tmp_path, &o.geom, &f));
    CHECK_REQUIRE(f != NULL);
    for (int i = 0; i < n; i++) {
        sdd_hough_gen_next(g, &evs[i]);
        CHECK_OK(sdd_hough_file_write(f, &evs[i]));
    }
    CHECK_OK(sdd_hough_file_close(f));
    sdd_hough_gen_destroy(g);
}

static bool geom_eq(const sdd_hough_geom *a, const sdd_hough_geom *b)
{
    bool eq = a->bfield == b->bfield && a->pivot_r == b->pivot_r && a->phi_half == b->phi_half &&
              a->sector_half == b->sector_half && a->qpt_max == b->qpt_max &&
              a->bend_window == b->bend_window && a->ncols == b->ncols && a->nrows == b->nrows &&
              a->nlayers == b->nlayers && a->min_layers == b->min_layers;
    for (int i = 0; i < a->nlayers; i++) {
        eq = eq && a->layer_r[i] == b->layer_r[i];
    }
    return eq;
}

static void test_file_round_trip(void)
{
    enum { N = 50 };
    sdd_hough_event *evs = malloc(N * sizeof(*evs));
    CHECK_REQUIRE(evs != NULL);
    sdd_hough_geom geom;
    write_events(evs, N, &geom);

    sdd_hough_file *f = NULL;
    CHECK_OK(sdd_hough_file_open(tmp_path, &f));
    CHECK_REQUIRE(f != NULL);
    CHECK(geom_eq(sdd_hough_file_geom(f), &geom));
    sdd_hough_event *ev = new_event();
    int same = 0;
    for (int i = 0; i < N; i++) {
        CHECK_EQ(sdd_hough_file_read(f, ev), 1);
        same += event_eq(ev, &evs[i]);
    }
    CHECK_EQ(same, N);
    CHECK_EQ(sdd_hough_file_read(f, ev), 0);
    CHECK_EQ(sdd_hough_file_read(f, ev), 0);
    CHECK_EQ(sdd_hough_file_write(f, ev), SDD_EINVAL); /* opened for reading */
    CHECK_OK(sdd_hough_file_close(f));
    CHECK_OK(sdd_hough_file_close(NULL));

    /* An empty event and a full one. */
    sdd_hough_event *full = &evs[0], *empty = &evs[1];
    memset(empty, 0, sizeof(*empty));
    empty->id = UINT64_MAX;
    full->id = 3;
    full->ntracks = SDD_HOUGH_EVENT_MAX_TRACKS;
    full->nstubs = SDD_HOUGH_EVENT_MAX_STUBS;
    for (uint32_t t = 0; t < full->ntracks; t++) {
        sdd_truth_track *tr = &full->tracks[t];
        *tr = (sdd_truth_track){.qpt = -0.1f * (float)t, .phi0 = 0.5f, .eta = -1.0f};
        tr->layers = (uint8_t)(t & 0x7f); /* the file does not judge masks against stubs */
        tr->kind = (uint8_t)(t & 1);
    }
    for (uint32_t i = 0; i < full->nstubs; i++) {
        full->stubs[i] = evs[2].stubs[i % evs[2].nstubs];
        full->stub_track[i] = (int16_t)((int)(i % (SDD_HOUGH_EVENT_MAX_TRACKS + 1)) - 1);
    }
    sdd_hough_file *w = NULL;
    CHECK_OK(sdd_hough_file_create(tmp_path, &geom, &w));
    CHECK_OK(sdd_hough_file_write(w, empty));
    CHECK_OK(sdd_hough_file_write(w, full));
    CHECK_OK(sdd_hough_file_close(w));
    CHECK_OK(sdd_hough_file_open(tmp_path, &f));
    CHECK_EQ(sdd_hough_file_read(f, ev), 1);
    CHECK(event_eq(ev, empty));
    CHECK_EQ(sdd_hough_file_read(f, ev), 1);
    CHECK(event_eq(ev, full));
    CHECK_EQ(sdd_hough_file_read(f, ev), 0);
    CHECK_OK(sdd_hough_file_close(f));
    free(ev);
    free(evs);
}

/* Events the writer refuses, each SDD_EINVAL without a trace in the file. */
static void test_write_validation(void)
{
    sdd_hough_event *ev = new_event(), *back = new_event();
    sdd_hough_gen_opts o;
    sdd_hough_gen_opts_default(&o);
    sdd_hough_gen *g = new_gen(&o);
    do {
        sdd_hough_gen_next(g, ev);
    } while (ev->ntracks == 0 || ev->nstubs == 0);
    sdd_hough_file *f = NULL;
    CHECK_OK(sdd_hough_file_create(tmp_path, &o.geom, &f));

    sdd_hough_event *bad = new_event();
    for (int kind = 0; kind < 7; kind++) {
        *bad = *ev;
        switch (kind) {
        case 0:
            bad->stub_track[0] = (int16_t)bad->ntracks;
            break;
        case 1:
            bad->stub_track[0] = -2;
            break;
        case 2:
            bad->stubs[0].phi = 0.3f;
            break;
        case 3:
            bad->tracks[0].kind = 2;
            break;
        case 4:
            bad->tracks[0].eta = NAN;
            break;
        case 5:
            bad->nstubs = SDD_HOUGH_EVENT_MAX_STUBS + 1;
            break;
        default:
            bad->ntracks = SDD_HOUGH_EVENT_MAX_TRACKS + 1;
            break;
        }
        CHECK_EQ(sdd_hough_file_write(f, bad), SDD_EINVAL);
    }
    CHECK_OK(sdd_hough_file_write(f, ev));
    CHECK_OK(sdd_hough_file_close(f));
    CHECK_OK(sdd_hough_file_open(tmp_path, &f));
    CHECK_EQ(sdd_hough_file_read(f, back), 1);
    CHECK(event_eq(back, ev));
    CHECK_EQ(sdd_hough_file_read(f, back), 0);
    CHECK_OK(sdd_hough_file_close(f));

    sdd_hough_geom geom = o.geom;
    geom.nrows = 0;
    f = (sdd_hough_file *)ev;
    CHECK_EQ(sdd_hough_file_create(tmp_path, &geom, &f), SDD_EINVAL);
    CHECK(f == (sdd_hough_file *)ev);
    CHECK_EQ(sdd_hough_file_create("/nonexistent-dir/x.hough", &o.geom, &f), SDD_ENOENT);
    CHECK_EQ(sdd_hough_file_open("/nonexistent-dir/x.hough", &f), SDD_ENOENT);
    sdd_hough_gen_destroy(g);
    free(bad);
    free(back);
    free(ev);
}

/* Open tmp_path and read to the end: the count of good events before the first non-1 result,
 * which lands in *last; 0 for open errors too, with the open error in *last. */
static int read_all(int *last)
{
    sdd_hough_file *f = NULL;
    sdd_err e = sdd_hough_file_open(tmp_path, &f);
    if (e != SDD_OK) {
        *last = e;
        return 0;
    }
    sdd_hough_event *ev = new_event();
    int n = 0, r;
    while ((r = sdd_hough_file_read(f, ev)) == 1) {
        n++;
    }
    *last = r;
    if (r < 0) {
        CHECK_EQ(sdd_hough_file_read(f, ev), r); /* the error sticks */
    }
    CHECK_OK(sdd_hough_file_close(f));
    free(ev);
    return n;
}

enum { CORRUPT_N = 3 };

/* Expect good events and then a result after damaging a copy of the file with fn. */
static void expect_damage(const uint8_t *orig, size_t len, size_t cut, size_t at, uint32_t value,
                          int value_bytes, int want_good, int want_last, const char *what)
{
    uint8_t *buf = malloc(len + 64);
    CHECK_REQUIRE(buf != NULL);
    memcpy(buf, orig, len);
    for (int i = 0; i < value_bytes; i++) {
        buf[at + (size_t)i] = (uint8_t)(value >> (8 * i));
    }
    spit(buf, cut);
    int last;
    int good = read_all(&last);
    if (good != want_good || last != want_last) {
        fprintf(stderr, "%s: %d good events then %d, want %d then %d\n", what, good, last,
                want_good, want_last);
    }
    CHECK_EQ(good, want_good);
    CHECK_EQ(last, want_last);
    free(buf);
}

static void test_corrupt_files(void)
{
    sdd_hough_event *evs = malloc(CORRUPT_N * sizeof(*evs));
    CHECK_REQUIRE(evs != NULL);
    sdd_hough_geom geom;
    write_events(evs, CORRUPT_N, &geom);
    uint8_t *orig;
    size_t len = slurp(&orig);

    /* Layout: 72-byte header; event 0 at 72: magic, length, id, nstubs, ntracks, stubs,
     * truth indices, tracks. */
    const size_t e0 = 72, body0 = e0 + 8;
    uint32_t ns = evs[0].nstubs, nt = evs[0].ntracks;
    size_t rec0 = 8 + 16 + 8 * (size_t)ns + 24 * (size_t)nt;
    size_t e1 = e0 + rec0;
    CHECK_REQUIRE(ns > 0 && nt > 0);
    CHECK_EQ(orig[e0 + 4] | orig[e0 + 5] << 8, rec0 - 8);
    const size_t stubs0 = body0 + 16, truth0 = stubs0 + 6 * ns, tracks0 = truth0 + 2 * ns;

    expect_damage(orig, len, len, 0, 0, 0, CORRUPT_N, 0, "intact");
    expect_damage(orig, len, 72, 0, 0, 0, 0, 0, "header only");
    expect_damage(orig, len, len - 1, 0, 0, 0, CORRUPT_N - 1, SDD_ECORRUPT, "last byte cut");
    expect_damage(orig, len, e1 + 3, 0, 0, 0, 1, SDD_ECORRUPT, "cut in a record header");
    expect_damage(orig, len, e1 + 8, 0, 0, 0, 1, SDD_ECORRUPT, "cut after a record header");
    expect_damage(orig, len, e1 + 30, 0, 0, 0, 1, SDD_ECORRUPT, "cut mid-event");
    expect_damage(orig, len, 40, 0, 0, 0, 0, SDD_ECORRUPT, "cut in the file header");
    expect_damage(orig, len, 0, 0, 0, 0, 0, SDD_ECORRUPT, "empty file");

    expect_damage(orig, len, len, 0, 'X', 1, 0, SDD_ECORRUPT, "file magic");
    expect_damage(orig, len, len, 8, 2, 4, 0, SDD_ENOTSUP, "file version 2");
    expect_damage(orig, len, len, 12, 71, 4, 0, SDD_ECORRUPT, "header length 71");
    expect_damage(orig, len, len, 12, 1u << 20, 4, 0, SDD_ECORRUPT, "header length 1 MiB");
    expect_damage(orig, len, len, 40, 0, 1, 0, SDD_ECORRUPT, "ncols 0");
    expect_damage(orig, len, len, 16, 0x7FC00000u, 4, 0, SDD_ECORRUPT, "bfield NaN");
    expect_damage(orig, len, len, 44 + 6 * 4, 0x7F800000u, 4, 0, SDD_ECORRUPT,
                  "unused radius infinite");

    expect_damage(orig, len, len, e0, 'e', 1, 0, SDD_ECORRUPT, "event magic");
    expect_damage(orig, len, len, e1 + 3, '2', 1, 1, SDD_ECORRUPT, "second event's magic");
    expect_damage(orig, len, len, e0 + 4, (uint32_t)(rec0 - 8 + 1), 4, 0, SDD_ECORRUPT,
                  "record length + 1");
    expect_damage(orig, len, len, e0 + 4, (uint32_t)(rec0 - 8 - 1), 4, 0, SDD_ECORRUPT,
                  "record length - 1");
    expect_damage(orig, len, len, e0 + 4, 0xFFFFFFFFu, 4, 0, SDD_ECORRUPT, "record length huge");
    expect_damage(orig, len, len, e0 + 4, 15, 4, 0, SDD_ECORRUPT, "record length 15");
    expect_damage(orig, len, len, body0 + 8, ns + 1, 4, 0, SDD_ECORRUPT, "nstubs + 1");
    expect_damage(orig, len, len, body0 + 8, 100000, 4, 0, SDD_ECORRUPT, "nstubs huge");
    expect_damage(orig, len, len, body0 + 12, nt - 1, 4, 0, SDD_ECORRUPT, "ntracks - 1");
    expect_damage(orig, len, len, stubs0 + 5, 0, 1, 0, SDD_ECORRUPT, "stub without VALID");
    expect_damage(orig, len, len, truth0, nt, 2, 0, SDD_ECORRUPT, "truth index = ntracks");
    expect_damage(orig, len, len, truth0 + 2 * (ns - 1), 0xFFFE, 2, 0, SDD_ECORRUPT,
                  "truth index -2");
    expect_damage(orig, len, len, truth0, 0x7FFF, 2, 0, SDD_ECORRUPT, "truth index 32767");
    expect_damage(orig, len, len, tracks0 + 8, 0x7F800000u, 4, 0, SDD_ECORRUPT,
                  "track phi_t infinite");
    expect_damage(orig, len, len, tracks0 + 20, 0x80, 1, 0, SDD_ECORRUPT, "layer bit 7");
    expect_damage(orig, len, len, tracks0 + 21, 2, 1, 0, SDD_ECORRUPT, "kind 2");
    expect_damage(orig, len, len, tracks0 + 22, 1, 1, 0, SDD_ECORRUPT, "reserved nonzero");

    /* A longer header (a later minor version) is skipped over. */
    uint8_t *longer = malloc(len + 16);
    CHECK_REQUIRE(longer != NULL);
    memcpy(longer, orig, 72);
    memset(longer + 72, 0xEE, 16);
    memcpy(longer + 88, orig + 72, len - 72);
    longer[12] = 88;
    spit(longer, len + 16);
    int last;
    CHECK_EQ(read_all(&last), CORRUPT_N);
    CHECK_EQ(last, 0);

    free(longer);
    free(orig);
    free(evs);
}

int main(void)
{
    /* The corrupt-file cases log an error each, as they should; keep the output readable. */
    sdd_log_configure("none");
    test_determinism();
    test_pileup_points();
    test_pu0_signal_only();
    test_mean_load();
    test_physics();
    test_double_stubs();
    test_limits();
    test_opts_validation();
    make_tmp();
    test_file_round_trip();
    test_write_validation();
    test_corrupt_files();
    unlink(tmp_path);
    return check_finish();
}
