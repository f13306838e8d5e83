/* Helpers for the Hough tests: random numbers and stubs laid exactly on a track. */
#ifndef SDDAQ_TESTS_HOUGH_TEST_H
#define SDDAQ_TESTS_HOUGH_TEST_H

#include <math.h>

#include "check.h"
#include "sddaq/trigger.h"

/* Uniform in [lo, hi). */
static inline float ht_uniform(uint64_t *rng, float lo, float hi)
{
    return lo + (hi - lo) * (float)((double)(check_rand(rng) >> 11) * 0x1.0p-53);
}

/* The stub a track with (qpt, phi_t) leaves in layer `layer` at the nominal radius, without
 * smearing: phi = phi0 - asin(k r qpt) with phi0 = phi_t + asin(k r_T qpt). */
static inline sdd_stub ht_track_stub(const sdd_hough_geom *g, float qpt, float phi_t, int layer)
{
    double k = sdd_hough_curvature_k(g), r = g->layer_r[layer];
    double phi0 = phi_t + asin(k * g->pivot_r * qpt);
    sdd_stub s = {.r = (float)r,
                  .phi = (float)(phi0 - asin(k * r * qpt)),
                  .z = 0.1f,
                  .bend = qpt,
                  .layer = (uint8_t)layer,
                  .flags = SDD_STUB_VALID};
    return s;
}

/* A stub in `layer` whose linearised line passes exactly through (qpt, phi_t) but that
 * belongs to no track: its bend says qpt, its phi is what the line needs. */
static inline sdd_stub ht_line_stub(const sdd_hough_geom *g, float qpt, float phi_t, int layer)
{
    double k = sdd_hough_curvature_k(g), r = g->layer_r[layer];
    sdd_stub s = {.r = (float)r,
                  .phi = (float)(phi_t - k * (r - g->pivot_r) * qpt),
                  .z = -0.2f,
                  .bend = qpt,
                  .layer = (uint8_t)layer,
                  .flags = SDD_STUB_VALID};
    return s;
}

/* n stubs (layers 0..5 repeating) of a clean track through the centre of cell (col, row). */
static inline void ht_cell_track(const sdd_hough_geom *g, sdd_hough_shape shape, int col, int row,
                                 sdd_stub *out, int n)
{
    float q, p;
    sdd_hough_cell_centre(g, shape, col, row, &q, &p);
    for (int i = 0; i < n; i++) {
        out[i] = ht_track_stub(g, q, p, i % 6);
    }
}

#endif
