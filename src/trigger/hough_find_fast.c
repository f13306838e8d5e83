/* The fast Hough finder, portable path. The seed keeps, per cell, a layer mask, a counter
 * and 30 stub slots (128 KiB for 32 x 32 cells, far beyond L1). Here the hot state is one
 * 32-bit row mask per column and layer (under 2 KiB with padding): a stub ORs a contiguous
 * band of rows into each column its bend allows, a bit-sliced counter finds the cells with
 * enough layers, and only for those few cells does a second pass collect stub lists. Stub
 * lines are set up 8 at a time and the column work runs 8 columns at a time in GCC vector
 * types; an x86-64-v3 clone (AVX2, POPCNT, BMI) is picked at load time. CPUs with AVX-512
 * take hough_find_x16.c instead, which must give the same output. */
#include <string.h>

#include "trigger/hough_impl.h"

/* An x86-64-v3 (AVX2) clone chosen at load time. Not under TSan: its runtime is not ready
 * when the ifunc resolver runs, and the process dies before main. */
#if defined(__x86_64__) && !defined(__SANITIZE_THREAD__)
#define HOUGH_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define HOUGH_CLONES
#endif

#define HV_LANES 8
#include "trigger/hough_lines_vec.h"
#define BLOCK HV_LANES

/* Eight columns at a time with GCC vector types (one AVX2 register); each lane computes
 * exactly hough_band(). A stub's window starts at its first column and spans a fixed number
 * of blocks for the whole map (3 with the default bend window), so the loop has no
 * data-dependent branches. */
int hough_window_blocks(const struct hough_frame *f)
{
    int cols = f->ncols;
    if (f->bend_window > 0.0f) {
        /* c1 - c0 <= 2 reach / dx, plus one for the rounding of each end. */
        int span = (int)(2.0f * (f->bend_window + f->col_half) * f->inv_dx) + 2;
        cols = span < cols ? span : cols;
    }
    return (cols + BLOCK - 1) / BLOCK;
}

static inline __attribute__((always_inline)) void
window_masks(sdd_hough_shape shape, int nrows, int nblocks, struct hough_line l, uint32_t *out)
{
    const hv_i lane = {0, 1, 2, 3, 4, 5, 6, 7};
    for (int b = 0; b < nblocks; b++) {
        hv_i col = lane + (l.c0 + BLOCK * b);
        hv_i off = shape == SDD_HOUGH_HEX ? ((col & 1) * HOUGH_FX_HALF) : (hv_i){0};
        hv_i base = l.slope * col - off;
        hv_i lo = l.lo + base, hi = l.hi + base;
        hv_i j0 = (lo + (HOUGH_FX_ONE - 1)) >> 16; /* ceil */
        hv_i j1 = hi >> 16;
        j0 &= ~(j0 < 0);
        hv_i over = j1 > nrows - 1;
        j1 = (j1 & ~over) | ((nrows - 1) & over);
        hv_i width = j1 - j0;
        hv_i empty = width < 0;
        hv_i big = j0 > 31;
        hv_i shift = (j0 & ~big) | (31 & big);
        hv_u band = ((hv_u){0} + UINT32_MAX) >> (hv_u)(31 - (width & ~empty));
        band <<= (hv_u)shift;
        band &= (hv_u)(~empty & (col <= l.c1));
        *(hv_u *)(out + BLOCK * b) = band;
    }
}

/* Lines for BLOCK stubs; count says how many of them to keep. */
static inline __attribute__((always_inline)) void lines_block(const struct hough_frame *f,
                                                              unsigned nlayers, const sdd_stub *st,
                                                              struct hough_line *out, int count)
{
    hv_f r, phi, bend;
    hv_i layer;
    for (int i = 0; i < BLOCK; i++) {
        r[i] = st[i].r;
        phi[i] = st[i].phi;
        bend[i] = st[i].bend;
        layer[i] = st[i].layer;
    }
    struct hv_lines l;
    hv_lines_init(f, r, phi, bend, layer < (int)nlayers, &l);
    for (int i = 0; i < count; i++) {
        out[i] = (struct hough_line){.lo = l.lo[i],
                                     .hi = l.hi[i],
                                     .slope = l.slope[i],
                                     .c0 = (int16_t)l.first[i],
                                     .c1 = (int16_t)l.last[i],
                                     .layer = (uint8_t)layer[i]};
    }
}

/* First pass: all lines, eight stubs at a time; then each stub's row masks, kept for the
 * second pass, ORed into its layer's plane. Stubs are visited in (layer, index) order, the
 * order of the stub lists. */
HOUGH_CLONES static void fill_planes(sdd_hough *h, const sdd_stub *stubs, size_t n)
{
    const struct hough_frame *f = &h->frame;
    unsigned nlayers = h->opts.geom.nlayers;
    int nblocks = h->window_blocks;
    memset(h->planes, 0, sizeof(h->planes));
    size_t s = 0;
    for (; s + BLOCK <= n; s += BLOCK) {
        lines_block(f, nlayers, &stubs[s], &h->lines[s], BLOCK);
    }
    if (s < n) {
        sdd_stub tail[BLOCK] = {0};
        memcpy(tail, &stubs[s], (n - s) * sizeof(*tail));
        lines_block(f, nlayers, tail, &h->lines[s], (int)(n - s));
    }
    h->norder = hough_layer_order(stubs, n, nlayers, 1, h->order, h->group);
    for (size_t k = 0; k < h->norder; k++) {
        s = h->order[k];
        struct hough_line l = h->lines[s];
        if (l.c0 > l.c1) {
            continue;
        }
        uint32_t *masks = h->stub_rows[s];
        if (f->shape == SDD_HOUGH_HEX) {
            window_masks(SDD_HOUGH_HEX, f->nrows, nblocks, l, masks);
        } else {
            window_masks(SDD_HOUGH_RECT, f->nrows, nblocks, l, masks);
        }
        uint32_t *plane = &h->planes[l.layer][l.c0];
        for (int b = 0; b < nblocks; b++) {
            *(hv_u *)(plane + BLOCK * b) |= *(const hv_u *)(masks + BLOCK * b);
        }
    }
}

HOUGH_CLONES unsigned hough_mark_candidates(sdd_hough *h)
{
    const sdd_hough_geom *g = &h->opts.geom;
    unsigned total = 0;
    for (int i = 0; i < SDD_HOUGH_MAX_DIM; i++) {
        h->cand_rows[i] =
            hough_at_least(&h->planes[0][i], g->nlayers, HOUGH_PADDED_COLS, g->min_layers);
    }
    for (int i = 0; i < SDD_HOUGH_MAX_DIM; i++) {
        h->cand_base[i] = (uint16_t)total;
        for (uint32_t bits = h->cand_rows[i]; bits != 0; bits &= bits - 1) {
            int j = __builtin_ctz(bits);
            h->cand_cell[i][j] = (uint16_t)total;
            struct hough_cand *c = &h->cands[total++];
            uint8_t layers = 0;
            for (int l = 0; l < g->nlayers; l++) {
                layers |= (uint8_t)(((h->planes[l][i] >> j) & 1u) << l);
            }
            c->col = (uint8_t)i;
            c->row = (uint8_t)j;
            c->layers = layers;
            c->nlayers = (uint8_t)__builtin_popcount(layers);
            c->count = 0;
        }
    }
    h->cand_base[SDD_HOUGH_MAX_DIM] = (uint16_t)total;
    return total;
}

/* Second pass: append each stub to the candidate cells its band crosses. The columns with a
 * hit come out as one bit mask, so the scalar work is only for real hits. */
HOUGH_CLONES static void collect_stubs(sdd_hough *h)
{
    const hv_i lane_bit = {1, 2, 4, 8, 16, 32, 64, 128};
    int nblocks = h->window_blocks;
    for (size_t k = 0; k < h->norder; k++) {
        unsigned s = h->order[k];
        const struct hough_line *l = &h->lines[s];
        if (l->c0 > l->c1) {
            continue;
        }
        const uint32_t *rows = h->stub_rows[s];
        const uint32_t *cand = &h->cand_rows[l->c0];
        uint32_t hit[SDD_HOUGH_MAX_DIM];
        hv_i acc = {0};
        for (int b = 0; b < nblocks; b++) {
            hv_u v = *(const hv_u *)(rows + BLOCK * b) & *(const hv_u *)(cand + BLOCK * b);
            *(hv_u *)(hit + BLOCK * b) = v;
            acc |= (v != 0) & (lane_bit << (BLOCK * b));
        }
        uint32_t cols =
            (uint32_t)(acc[0] | acc[1] | acc[2] | acc[3] | acc[4] | acc[5] | acc[6] | acc[7]);
        for (; cols != 0; cols &= cols - 1) {
            int at = __builtin_ctz(cols);
            const uint16_t *cell = h->cand_cell[l->c0 + at];
            for (uint32_t bits = hit[at]; bits != 0; bits &= bits - 1) {
                struct hough_cand *c = &h->cands[cell[__builtin_ctz(bits)]];
                /* Past the last slot, keep overwriting the scratch slot: no branch. */
                unsigned slot = c->count < SDD_HOUGH_CELL_SLOTS ? c->count : SDD_HOUGH_CELL_SLOTS;
                c->stubs[slot] = (uint16_t)s;
                c->count++;
            }
        }
    }
}

void hough_find_fast(sdd_hough *h, const sdd_stub *stubs, size_t n)
{
    fill_planes(h, stubs, n);
    h->ncands = hough_mark_candidates(h);
    if (h->ncands > 0) {
        collect_stubs(h);
    }
}
