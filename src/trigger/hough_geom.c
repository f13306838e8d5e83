/* Hough sector geometry: defaults, validation and the curvature constant. */
#include <math.h>

#include "sddaq/log.h"
#include "sddaq/trigger.h"

static const float default_layer_r[] = {0.23f, 0.36f, 0.51f, 0.68f, 0.89f, 1.08f};

void sdd_hough_geom_default(sdd_hough_geom *g)
{
    *g = (sdd_hough_geom){
        .bfield = 3.8f,
        .pivot_r = 0.6f,
        .sector_half = (float)(M_PI / 32.0),
        .phi_half = (float)(M_PI / 32.0) + 0.05f,
        .qpt_max = 0.5f,
        .bend_window = 0.25f,
        .ncols = 32,
        .nrows = 32,
        .nlayers = 6,
        .min_layers = 5,
    };
    for (int i = 0; i < 6; i++) {
        g->layer_r[i] = default_layer_r[i];
    }
}

static bool positive(float v)
{
    return isfinite(v) && v > 0.0f;
}

sdd_err sdd_hough_geom_check(const sdd_hough_geom *g)
{
    const char *why = NULL;
    if (!positive(g->bfield) || !positive(g->pivot_r) || !positive(g->qpt_max)) {
        why = "bfield, pivot_r and qpt_max must be positive";
    } else if (!positive(g->phi_half) || !positive(g->sector_half) ||
               g->sector_half > g->phi_half) {
        why = "need 0 < sector_half <= phi_half";
    } else if (!isfinite(g->bend_window)) {
        why = "bend_window must be finite (<= 0 turns the bend filter off)";
    } else if (g->ncols < 1 || g->ncols > SDD_HOUGH_MAX_DIM || g->nrows < 1 ||
               g->nrows > SDD_HOUGH_MAX_DIM) {
        why = "ncols and nrows must be 1..32";
    } else if (g->nlayers < 1 || g->nlayers > SDD_HOUGH_MAX_LAYERS) {
        why = "nlayers must be 1..7";
    } else if (g->min_layers < 1 || g->min_layers > g->nlayers) {
        why = "min_layers must be 1..nlayers";
    } else {
        for (int i = 0; i < g->nlayers; i++) {
            if (!(g->layer_r[i] >= SDD_STUB_R_MIN && g->layer_r[i] < SDD_STUB_R_MAX)) {
                why = "layer radii must lie in [0.2, 1.2) m";
            }
        }
    }
    if (why != NULL) {
        SDD_ERROR("trigger", "bad Hough geometry: %s", why);
        return SDD_EINVAL;
    }
    return SDD_OK;
}

float sdd_hough_curvature_k(const sdd_hough_geom *g)
{
    return 0.299792458f * g->bfield / 2.0f;
}
