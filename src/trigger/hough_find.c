/* The Hough finder object: options, the choice of implementation, and the output step that
 * turns candidate cells into tracks (one per cell, or one per cluster when merging). */
#include <stdlib.h>
#include <string.h>

#include "sddaq/log.h"
#include "trigger/hough_impl.h"

void sdd_hough_opts_default(sdd_hough_opts *o)
{
    *o = (sdd_hough_opts){
        .shape = SDD_HOUGH_RECT, .impl = SDD_HOUGH_FAST, .merge = false, .cell_scale = 1.0f};
    sdd_hough_geom_default(&o->geom);
}

sdd_err sdd_hough_create(const sdd_hough_opts *opts, sdd_hough **out)
{
    if (opts == NULL || out == NULL ||
        (opts->shape != SDD_HOUGH_RECT && opts->shape != SDD_HOUGH_HEX) ||
        (opts->impl != SDD_HOUGH_FAST && opts->impl != SDD_HOUGH_SEED) ||
        !(opts->cell_scale > 0.0f && opts->cell_scale <= 1.0f)) {
        return SDD_EINVAL;
    }
    sdd_err err = sdd_hough_geom_check(&opts->geom);
    if (err != SDD_OK) {
        return err;
    }
    sdd_hough *h = aligned_alloc(64, (sizeof(*h) + 63) & ~(size_t)63);
    if (h == NULL) {
        return SDD_ENOMEM;
    }
    memset(h, 0, sizeof(*h));
    h->opts = *opts;
    hough_frame_init(&h->frame, &opts->geom, opts->shape);
    h->frame.cell_scale = opts->cell_scale;
    h->window_blocks = hough_window_blocks(&h->frame);
    for (int i = 0; i < SDD_HOUGH_MAX_DIM; i++) {
        float unused;
        sdd_hough_cell_centre(&opts->geom, opts->shape, i, 0, &h->col_qpt[i], &unused);
        for (int parity = 0; parity < 2; parity++) {
            sdd_hough_cell_centre(&opts->geom, opts->shape, parity, i, &unused,
                                  &h->row_phi[parity][i]);
        }
    }
    if (opts->impl == SDD_HOUGH_SEED) {
        h->seed_map = calloc(SDD_HOUGH_MAX_DIM, sizeof(*h->seed_map));
        if (h->seed_map == NULL) {
            free(h);
            return SDD_ENOMEM;
        }
    }
    *out = h;
    return SDD_OK;
}

void sdd_hough_destroy(sdd_hough *h)
{
    if (h != NULL) {
        free(h->seed_map);
        free(h);
    }
}

const sdd_hough_opts *sdd_hough_get_opts(const sdd_hough *h)
{
    return &h->opts;
}

int sdd_hough_find(sdd_hough *h, const sdd_stub *stubs, size_t n, sdd_hough_track *out,
                   size_t max_out)
{
    if (n > SDD_HOUGH_MAX_STUBS) {
        return SDD_ETOOBIG;
    }
    if (h->opts.impl == SDD_HOUGH_SEED) {
        hough_find_seed(h, stubs, n);
    } else {
        hough_find_fast(h, stubs, n);
    }
    return (int)hough_emit(h, out, max_out);
}
