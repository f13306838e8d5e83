/* The Hough finders: single tracks found with the right parameters, the 5-of-6 rule at its
 * edge, known fake configurations, the fast finder agreeing exactly with the seed-layout
 * reference on dense random events, merging, cell overflow, and bad input. */
#include <stdlib.h>
#include <string.h>

#include "hough_test.h"

#define MAX_TRACKS 2048

/* The vector path the FAST finders of this round use; main runs every one the CPU has. */
static sdd_hough_simd g_simd;

static sdd_hough *make(sdd_hough_shape shape, sdd_hough_impl impl, bool merge)
{
    sdd_hough_opts o;
    sdd_hough_opts_default(&o);
    o.shape = shape;
    o.impl = impl;
    o.simd = g_simd;
    o.merge = merge;
    sdd_hough *h = NULL;
    CHECK_OK(sdd_hough_create(&o, &h));
    CHECK_REQUIRE(h != NULL);
    return h;
}

static sdd_hough_track tracks[MAX_TRACKS], tracks2[MAX_TRACKS];

/* A clean track through a cell centre: merged, it is one track with all six stubs in the
 * truth cell; unmerged, the truth cell is among the candidates with six layers. */
static void test_single_tracks(sdd_hough_shape shape, sdd_hough_impl impl)
{
    sdd_hough *merged = make(shape, impl, true), *plain = make(shape, impl, false);
    const sdd_hough_geom *g = &sdd_hough_get_opts(plain)->geom;
    uint64_t rng = 77 + (uint64_t)shape * 2 + (uint64_t)impl;
    int exact = 0, runs = 400;
    for (int it = 0; it < runs; it++) {
        /* |q/pT| <= 0.25 keeps the linearisation error far below a cell. */
        int col = 8 + (int)(check_rand(&rng) % 16), row = 1 + (int)(check_rand(&rng) % 30);
        float qpt, phi_t;
        sdd_hough_cell_centre(g, shape, col, row, &qpt, &phi_t);
        sdd_stub stubs[6];
        for (int l = 0; l < 6; l++) {
            stubs[l] = ht_track_stub(g, qpt, phi_t, l);
        }
        int n = sdd_hough_find(merged, stubs, 6, tracks, MAX_TRACKS);
        CHECK_EQ(n, 1);
        /* The centroid of the full-layer cells lies within half a cell of the truth: the
         * helix is not exactly the linearised line, so the cluster is not exactly symmetric. */
        float dq = 2.0f * g->qpt_max / g->ncols, dp = 2.0f * g->phi_half / g->nrows;
        if (n == 1 && abs(tracks[0].col - col) <= 1 && abs(tracks[0].row - row) <= 1 &&
            tracks[0].nstubs == 6 && tracks[0].layers == 0x3f &&
            fabsf(tracks[0].qpt - qpt) <= 0.5f * dq &&
            fabsf(tracks[0].phi_t - phi_t) <= 0.5f * dp) {
            exact++;
        }
        for (int k = 0; k < n && k < 1; k++) {
            for (int s = 0; s < 6; s++) {
                CHECK_EQ(tracks[0].stubs[s], s);
            }
        }
        n = sdd_hough_find(plain, stubs, 6, tracks, MAX_TRACKS);
        bool truth_cell = false;
        for (int k = 0; k < n; k++) {
            CHECK(tracks[k].nlayers >= 5);
            truth_cell |= tracks[k].col == col && tracks[k].row == row && tracks[k].nlayers == 6;
        }
        CHECK(truth_cell);
    }
    CHECK_EQ(exact, runs);
    sdd_hough_destroy(merged);
    sdd_hough_destroy(plain);
}

/* Five layers make a candidate, four do not; a sixth-layer stub from elsewhere changes
 * nothing; layers at or above nlayers are ignored. */
static void test_layer_rule(sdd_hough_shape shape)
{
    sdd_hough *h = make(shape, SDD_HOUGH_FAST, true);
    const sdd_hough_geom *g = &sdd_hough_get_opts(h)->geom;
    float qpt, phi_t;
    sdd_hough_cell_centre(g, shape, 16, 16, &qpt, &phi_t);
    sdd_stub stubs[8];
    for (int l = 0; l < 6; l++) {
        stubs[l] = ht_track_stub(g, qpt, phi_t, l);
    }
    int n = sdd_hough_find(h, stubs + 1, 5, tracks, MAX_TRACKS);
    CHECK_EQ(n, 1);
    CHECK_EQ(tracks[0].layers, 0x3e);
    CHECK_EQ(sdd_hough_find(h, stubs + 2, 4, tracks, MAX_TRACKS), 0);
    /* Four real layers plus a stub of layer 7 and one of layer 6 (>= nlayers): no track. */
    stubs[6] = stubs[0];
    stubs[6].layer = 6;
    stubs[7] = stubs[1];
    stubs[7].layer = 7;
    CHECK_EQ(sdd_hough_find(h, stubs + 2, 6, tracks, MAX_TRACKS), 0);
    /* Stubs whose bend points far away fill other columns: no track. */
    for (int l = 0; l < 6; l++) {
        stubs[l].bend = qpt > 0 ? qpt - 0.6f : qpt + 0.6f;
    }
    CHECK_EQ(sdd_hough_find(h, stubs, 6, tracks, MAX_TRACKS), 0);
    sdd_hough_destroy(h);
}

/* Five unrelated stubs, one per layer, whose lines meet in one cell: a candidate that the
 * scorer must call a fake (a known fake configuration of the Hough transform). */
static void test_known_fake(sdd_hough_shape shape)
{
    sdd_hough *h = make(shape, SDD_HOUGH_FAST, true);
    const sdd_hough_geom *g = &sdd_hough_get_opts(h)->geom;
    static sdd_hough_event ev;
    memset(&ev, 0, sizeof(ev));
    float qpt, phi_t;
    sdd_hough_cell_centre(g, shape, 20, 10, &qpt, &phi_t);
    for (int l = 0; l < 5; l++) {
        ev.stubs[l] = ht_line_stub(g, qpt, phi_t, l);
        ev.stub_track[l] = -1;
    }
    /* And one real track elsewhere, found. */
    float tq, tp;
    sdd_hough_cell_centre(g, shape, 12, 24, &tq, &tp);
    for (int l = 0; l < 6; l++) {
        ev.stubs[5 + l] = ht_track_stub(g, tq, tp, l);
        ev.stub_track[5 + l] = 0;
    }
    ev.nstubs = 11;
    ev.ntracks = 1;
    ev.tracks[0] = (sdd_truth_track){.qpt = tq, .phi_t = tp, .layers = 0x3f};
    int n = sdd_hough_find(h, ev.stubs, ev.nstubs, tracks, MAX_TRACKS);
    CHECK_EQ(n, 2);
    sdd_hough_score sc;
    sdd_hough_score_init(&sc, 2.0);
    sdd_hough_score_event(&sc, g, &ev, tracks, (size_t)n);
    CHECK_EQ(sc.events, 1);
    CHECK_EQ(sc.candidates, 2);
    CHECK_EQ(sc.fakes, 1);
    CHECK_EQ(sc.reconstructable, 1);
    CHECK_EQ(sc.found, 1);
    CHECK_EQ(sc.duplicates, 0);
    sdd_hough_summary sum;
    sdd_hough_score_summarize(&sc, &sum);
    CHECK(sum.efficiency == 1.0);
    CHECK(sum.fakes_per_event == 1.0);
    CHECK(sum.qpt_res <= g->qpt_max / g->ncols && sum.phi_res <= g->phi_half / g->nrows);
    sdd_hough_destroy(h);
}

/* Random dense events: random stubs plus a few tracks. */
static size_t random_event(uint64_t *rng, const sdd_hough_geom *g, sdd_stub *stubs, size_t n)
{
    size_t k = 0;
    while (k < n) {
        if (check_rand(rng) % 4 == 0 && k + 6 <= n) {
            float q = ht_uniform(rng, -g->qpt_max, g->qpt_max);
            float p = ht_uniform(rng, -g->phi_half, g->phi_half);
            for (int l = 0; l < 6; l++) {
                stubs[k] = ht_track_stub(g, q, p, l);
                stubs[k].bend += ht_uniform(rng, -0.15f, 0.15f);
                stubs[k].phi += ht_uniform(rng, -1e-4f, 1e-4f);
                k++;
            }
            continue;
        }
        if (check_rand(rng) % 50 == 0) { /* a layer out of range, or a NaN: fills nothing */
            bool bad_layer = check_rand(rng) % 2;
            stubs[k++] = (sdd_stub){.r = g->layer_r[2],
                                    .phi = bad_layer ? 0.01f : NAN,
                                    .layer = (uint8_t)(bad_layer ? 6 + check_rand(rng) % 250 : 3)};
            continue;
        }
        stubs[k++] =
            (sdd_stub){.r = g->layer_r[check_rand(rng) % 6] + ht_uniform(rng, -0.005f, 0.005f),
                       .phi = ht_uniform(rng, -0.25f, 0.25f),
                       .bend = ht_uniform(rng, -0.5f, 0.5f),
                       .layer = (uint8_t)(check_rand(rng) % 6),
                       .flags = SDD_STUB_VALID};
    }
    return k;
}

static bool same_tracks(const sdd_hough_track *a, const sdd_hough_track *b, int n)
{
    for (int i = 0; i < n; i++) {
        unsigned kept = a[i].nstubs < SDD_HOUGH_CELL_SLOTS ? a[i].nstubs : SDD_HOUGH_CELL_SLOTS;
        if (a[i].col != b[i].col || a[i].row != b[i].row || a[i].layers != b[i].layers ||
            a[i].nlayers != b[i].nlayers || a[i].nstubs != b[i].nstubs ||
            a[i].flags != b[i].flags || a[i].ncells != b[i].ncells || a[i].qpt != b[i].qpt ||
            a[i].phi_t != b[i].phi_t ||
            memcmp(a[i].stubs, b[i].stubs, kept * sizeof(a[i].stubs[0])) != 0) {
            return false;
        }
    }
    return true;
}

static void test_fast_equals_seed(sdd_hough_shape shape, bool merge, bool bend, float scale)
{
    sdd_hough_opts o;
    sdd_hough_opts_default(&o);
    o.shape = shape;
    o.simd = g_simd;
    o.merge = merge;
    o.cell_scale = scale;
    if (!bend) {
        o.geom.bend_window = 0.0f;
    }
    sdd_hough *fast = NULL, *seed = NULL;
    CHECK_OK(sdd_hough_create(&o, &fast));
    o.impl = SDD_HOUGH_SEED;
    CHECK_OK(sdd_hough_create(&o, &seed));
    CHECK_REQUIRE(fast != NULL && seed != NULL);
    static sdd_stub stubs[400];
    uint64_t rng = 4242 + (uint64_t)shape * 3 + merge + (uint64_t)bend * 7;
    int equal = 0, events = 300;
    long total = 0;
    for (int e = 0; e < events; e++) {
        size_t n = random_event(&rng, &o.geom, stubs, 40 + check_rand(&rng) % 360);
        int a = sdd_hough_find(fast, stubs, n, tracks, MAX_TRACKS);
        int b = sdd_hough_find(seed, stubs, n, tracks2, MAX_TRACKS);
        total += a;
        if (a == b && a <= MAX_TRACKS && same_tracks(tracks, tracks2, a)) {
            equal++;
        }
    }
    CHECK_EQ(equal, events);
    CHECK(total > events); /* the comparison saw candidates */
    sdd_hough_destroy(fast);
    sdd_hough_destroy(seed);
}

/* Two tracks far apart stay two tracks when merged; a track's neighbour cells merge. */
static void test_merge(sdd_hough_shape shape)
{
    sdd_hough *plain = make(shape, SDD_HOUGH_FAST, false),
              *merged = make(shape, SDD_HOUGH_FAST, true);
    const sdd_hough_geom *g = &sdd_hough_get_opts(plain)->geom;
    sdd_stub stubs[12];
    ht_cell_track(g, shape, 10, 8, stubs, 6);
    ht_cell_track(g, shape, 22, 25, stubs + 6, 6);
    int np = sdd_hough_find(plain, stubs, 12, tracks, MAX_TRACKS);
    int nm = sdd_hough_find(merged, stubs, 12, tracks2, MAX_TRACKS);
    CHECK_EQ(nm, 2);
    CHECK(np >= nm);
    int cells = 0;
    for (int i = 0; i < nm; i++) {
        cells += tracks2[i].ncells;
        CHECK_EQ(tracks2[i].nlayers, 6);
        CHECK(((tracks2[i].flags & SDD_TRACK_MERGED) != 0) == (tracks2[i].ncells > 1));
    }
    CHECK_EQ(cells, np); /* every candidate cell belongs to exactly one cluster */
    sdd_hough_destroy(plain);
    sdd_hough_destroy(merged);
}

/* 40 stubs through one cell: the counter goes on, 30 indices are kept, the track is flagged. */
static void test_overflow(sdd_hough_impl impl)
{
    sdd_hough *h = make(SDD_HOUGH_RECT, impl, true);
    const sdd_hough_geom *g = &sdd_hough_get_opts(h)->geom;
    sdd_stub stubs[40];
    ht_cell_track(g, SDD_HOUGH_RECT, 16, 16, stubs, 40);
    int n = sdd_hough_find(h, stubs, 40, tracks, MAX_TRACKS);
    CHECK_EQ(n, 1);
    CHECK_EQ(tracks[0].nstubs, 40);
    CHECK(tracks[0].flags & SDD_TRACK_OVERFLOW);
    /* The kept ones are the first 30 in (layer, index) order; stub i is in layer i % 6. */
    int kept = 0;
    for (int l = 0; l < 6; l++) {
        for (int i = l; i < 40 && kept < SDD_HOUGH_CELL_SLOTS; i += 6) {
            CHECK_EQ(tracks[0].stubs[kept], i);
            kept++;
        }
    }
    sdd_hough_destroy(h);
}

/* Shrinking the cells: five lines that meet near a cell's edge make a candidate with full
 * cells and none with cells shrunk to 0.3, while a clean track through a centre survives. */
static void test_cell_scale(sdd_hough_shape shape)
{
    sdd_hough_opts o;
    sdd_hough_opts_default(&o);
    o.shape = shape;
    o.cell_scale = 0.3f;
    sdd_hough *tight = NULL, *full = make(shape, SDD_HOUGH_FAST, false);
    CHECK_OK(sdd_hough_create(&o, &tight));
    CHECK_REQUIRE(tight != NULL);
    float q, p, row = 2.0f * o.geom.phi_half / o.geom.nrows;
    sdd_hough_cell_centre(&o.geom, shape, 16, 16, &q, &p);
    sdd_stub stubs[6];
    for (int l = 0; l < 5; l++) {
        stubs[l] = ht_line_stub(&o.geom, q, p + 0.49f * row, l);
    }
    int nfull = sdd_hough_find(full, stubs, 5, tracks, MAX_TRACKS);
    bool edge_cell = false;
    for (int i = 0; i < nfull; i++) {
        edge_cell |= tracks[i].col == 16 && tracks[i].row == 16;
    }
    CHECK(edge_cell);
    CHECK_EQ(sdd_hough_find(tight, stubs, 5, tracks2, MAX_TRACKS), 0);
    for (int l = 0; l < 6; l++) {
        stubs[l] = ht_track_stub(&o.geom, q, p, l);
    }
    int ntight = sdd_hough_find(tight, stubs, 6, tracks2, MAX_TRACKS);
    bool centre = false;
    for (int i = 0; i < ntight; i++) {
        centre |= tracks2[i].col == 16 && tracks2[i].row == 16 && tracks2[i].nlayers == 6;
    }
    CHECK(centre);
    o.cell_scale = 0.0f;
    sdd_hough *bad = NULL;
    CHECK_EQ(sdd_hough_create(&o, &bad), SDD_EINVAL);
    o.cell_scale = 1.5f;
    CHECK_EQ(sdd_hough_create(&o, &bad), SDD_EINVAL);
    sdd_hough_destroy(tight);
    sdd_hough_destroy(full);
}

static void test_bad_input(void)
{
    sdd_hough_opts o;
    sdd_hough_opts_default(&o);
    sdd_hough *h = NULL;
    o.shape = (sdd_hough_shape)5;
    CHECK_EQ(sdd_hough_create(&o, &h), SDD_EINVAL);
    sdd_hough_opts_default(&o);
    o.geom.nrows = 0;
    CHECK_EQ(sdd_hough_create(&o, &h), SDD_EINVAL);
    CHECK(h == NULL);
    h = make(SDD_HOUGH_HEX, SDD_HOUGH_FAST, false);
    static sdd_stub many[SDD_HOUGH_MAX_STUBS + 1];
    CHECK_EQ(sdd_hough_find(h, many, SDD_HOUGH_MAX_STUBS + 1, tracks, MAX_TRACKS), SDD_ETOOBIG);
    /* Non-finite values are ignored, not a crash. */
    sdd_stub odd[3] = {{.r = NAN, .layer = 1},
                       {.r = 0.5f, .phi = INFINITY, .layer = 2},
                       {.r = 0.5f, .bend = NAN, .layer = 3}};
    CHECK_EQ(sdd_hough_find(h, odd, 3, tracks, MAX_TRACKS), 0);
    CHECK_EQ(sdd_hough_find(h, odd, 0, tracks, MAX_TRACKS), 0);
    /* A short output array gets the first tracks; the return value says how many exist. */
    const sdd_hough_geom *g = &sdd_hough_get_opts(h)->geom;
    sdd_stub stubs[12];
    ht_cell_track(g, SDD_HOUGH_HEX, 6, 6, stubs, 6);
    ht_cell_track(g, SDD_HOUGH_HEX, 26, 26, stubs + 6, 6);
    int all = sdd_hough_find(h, stubs, 12, tracks, MAX_TRACKS);
    memset(tracks2, 0xee, sizeof(tracks2));
    CHECK_EQ(sdd_hough_find(h, stubs, 12, tracks2, 1), all);
    CHECK(same_tracks(tracks, tracks2, 1));
    CHECK_EQ(tracks2[1].col, 0xee); /* untouched */
    sdd_hough_destroy(h);
    sdd_hough_destroy(NULL);
}

/* The simd option: AUTO reports the path taken; AVX512 where the CPU lacks it is refused. */
static bool simd_available(sdd_hough_simd simd)
{
    sdd_hough_opts o;
    sdd_hough_opts_default(&o);
    o.simd = simd;
    sdd_hough *h = NULL;
    sdd_err err = sdd_hough_create(&o, &h);
    if (err == SDD_ENOTSUP) {
        CHECK_EQ(simd, SDD_HOUGH_SIMD_AVX512);
        CHECK(h == NULL);
        return false;
    }
    CHECK_OK(err);
    CHECK_REQUIRE(h != NULL);
    CHECK_EQ(sdd_hough_get_opts(h)->simd, simd);
    sdd_hough_destroy(h);
    o.simd = (sdd_hough_simd)7;
    CHECK_EQ(sdd_hough_create(&o, &h), SDD_EINVAL);
    return true;
}

static void test_fast(sdd_hough_simd simd)
{
    g_simd = simd;
    for (int shape = SDD_HOUGH_RECT; shape <= SDD_HOUGH_HEX; shape++) {
        sdd_hough_shape s = (sdd_hough_shape)shape;
        test_single_tracks(s, SDD_HOUGH_FAST);
        test_layer_rule(s);
        test_known_fake(s);
        test_merge(s);
        test_cell_scale(s);
        for (int merge = 0; merge <= 1; merge++) {
            test_fast_equals_seed(s, merge, true, 1.0f);
            test_fast_equals_seed(s, merge, false, 1.0f);
            test_fast_equals_seed(s, merge, true, 0.9f);
        }
    }
    test_overflow(SDD_HOUGH_FAST);
    test_bad_input();
}

int main(void)
{
    for (int shape = SDD_HOUGH_RECT; shape <= SDD_HOUGH_HEX; shape++) {
        test_single_tracks((sdd_hough_shape)shape, SDD_HOUGH_SEED);
    }
    test_overflow(SDD_HOUGH_SEED);
    const sdd_hough_simd paths[] = {SDD_HOUGH_SIMD_X8, SDD_HOUGH_SIMD_AVX512};
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
        if (simd_available(paths[i])) {
            test_fast(paths[i]);
        } else {
            printf("this CPU has no AVX-512: the AVX-512 Hough path is not tested here\n");
        }
    }
    return check_finish();
}
