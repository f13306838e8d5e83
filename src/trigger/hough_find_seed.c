/* The seed's Hough finder, ported literally (seed 000 §5.3.4): every cell holds a 32-bit
 * layer mask, a stub counter and 30 stub slots (128 B, 128 KiB per 32 x 32 map). Each stub
 * marks every cell its line crosses (OR the layer bit, bump the counter, store the index if
 * a slot is free); then every cell is scanned for the layer rule. It is the reference the
 * fast finder must agree with, and the baseline it is measured against. */
#include <string.h>

#include "trigger/hough_impl.h"

static void clear_map(sdd_hough *h)
{
    const struct hough_frame *f = &h->frame;
    /* The counters make stale slots harmless, so only mask and counter are reset. */
    for (int i = 0; i < f->ncols; i++) {
        for (int j = 0; j < f->nrows; j++) {
            h->seed_map[i][j].layers = 0;
            h->seed_map[i][j].count = 0;
        }
    }
}

static void mark_cells(sdd_hough *h, const sdd_stub *stubs, size_t n)
{
    const struct hough_frame *f = &h->frame;
    /* Stubs in (layer, index) order, so that each cell's slots fill in the order the stub
     * lists are defined in. */
    h->norder = hough_layer_order(stubs, n, h->opts.geom.nlayers, 1, h->order, h->group);
    for (size_t k = 0; k < h->norder; k++) {
        unsigned s = h->order[k];
        struct hough_line l;
        hough_line_init(f, &stubs[s], true, &l);
        for (int i = l.c0; i <= l.c1; i++) {
            uint32_t rows = hough_band(f->shape, f->nrows, &l, i);
            for (; rows != 0; rows &= rows - 1) {
                int j = __builtin_ctz(rows);
                struct hough_seed_cell *c = &h->seed_map[i][j];
                c->layers |= 1u << l.layer;
                uint32_t slot = c->count++;
                if (slot < SDD_HOUGH_CELL_SLOTS) {
                    c->stubs[slot] = s;
                }
            }
        }
    }
}

static void scan_cells(sdd_hough *h)
{
    const struct hough_frame *f = &h->frame;
    unsigned total = 0;
    memset(h->cand_rows, 0, sizeof(h->cand_rows));
    for (int i = 0; i < f->ncols; i++) {
        h->cand_base[i] = (uint16_t)total;
        for (int j = 0; j < f->nrows; j++) {
            const struct hough_seed_cell *c = &h->seed_map[i][j];
            int nl = __builtin_popcount(c->layers);
            if (nl < h->opts.geom.min_layers) {
                continue;
            }
            struct hough_cand *out = &h->cands[total++];
            *out = (struct hough_cand){.col = (uint8_t)i,
                                       .row = (uint8_t)j,
                                       .layers = (uint8_t)c->layers,
                                       .nlayers = (uint8_t)nl,
                                       .count = (uint16_t)c->count};
            unsigned kept = c->count < SDD_HOUGH_CELL_SLOTS ? c->count : SDD_HOUGH_CELL_SLOTS;
            for (unsigned k = 0; k < kept; k++) {
                out->stubs[k] = (uint16_t)c->stubs[k];
            }
            h->cand_rows[i] |= 1u << j;
        }
    }
    for (int i = f->ncols; i <= SDD_HOUGH_MAX_DIM; i++) {
        h->cand_base[i] = (uint16_t)total;
    }
    h->ncands = total;
}

void hough_find_seed(sdd_hough *h, const sdd_stub *stubs, size_t n)
{
    clear_map(h);
    mark_cells(h, stubs, n);
    scan_cells(h);
}
