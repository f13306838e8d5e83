/* The fast Hough finder. The seed keeps, per cell, a layer mask, a counter and 30 stub slots
 * (128 KiB for 32 x 32 cells, far beyond L1). Here the hot state is one 32-bit row mask per
 * column and layer (under 2 KiB with padding): a stub ORs a contiguous band of rows into each
 * column its bend allows, a bit-sliced counter finds the cells with enough layers, and only
 * for those few cells does a second pass collect stub lists. Stub lines are set up 8 at a
 * time and the column work runs 8 columns at a time in GCC vector types; an x86-64-v3 clone
 * (AVX2, POPCNT, BMI) is picked at load time. */
#include <string.h>

#include "trigger/hough_impl.h"

/* Eight columns at a time with GCC vector types (one AVX2 register); each lane computes
 * exactly hough_band(). A stub's window starts at its first column and spans a fixed number
 * of blocks for the whole map (3 with the default bend window), so the loop has no
 * data-dependent branches. (16-lane vectors were tried: GCC 12 lowers their variable shifts
 * to scalar code, 2-4x slower.) */
/* An x86-64-v3 (AVX2) clone chosen at load time. Not under TSan: its runtime is not ready
 * when the ifunc resolver runs, and the process dies before main. */
#if defined(__x86_64__) && !defined(__SANITIZE_THREAD__)
#define HOUGH_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define HOUGH_CLONES
#endif

#pragma GCC diagnostic ignored "-Wpsabi" /* static, inlined helpers: no ABI to keep */
typedef int32_t i32x8 __attribute__((vector_size(32)));
typedef uint32_t u32x8 __attribute__((vector_size(32), aligned(4)));
#define BLOCK 8

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
    const i32x8 lane = {0, 1, 2, 3, 4, 5, 6, 7};
    for (int b = 0; b < nblocks; b++) {
        i32x8 col = lane + (l.c0 + BLOCK * b);
        i32x8 off = shape == SDD_HOUGH_HEX ? ((col & 1) * HOUGH_FX_HALF) : (i32x8){0};
        i32x8 base = l.slope * col - off;
        i32x8 lo = l.lo + base, hi = l.hi + base;
        i32x8 j0 = (lo + (HOUGH_FX_ONE - 1)) >> 16; /* ceil */
        i32x8 j1 = hi >> 16;
        j0 &= ~(j0 < 0);
        i32x8 over = j1 > nrows - 1;
        j1 = (j1 & ~over) | ((nrows - 1) & over);
        i32x8 width = j1 - j0;
        i32x8 empty = width < 0;
        i32x8 big = j0 > 31;
        i32x8 shift = (j0 & ~big) | (31 & big);
        u32x8 band = ((u32x8){0} + UINT32_MAX) >> (u32x8)(31 - (width & ~empty));
        band <<= (u32x8)shift;
        band &= (u32x8)(~empty & (col <= l.c1));
        *(u32x8 *)(out + BLOCK * b) = band;
    }
}

typedef float f32x8 __attribute__((vector_size(32)));

static inline __attribute__((always_inline)) i32x8 sel_i(i32x8 m, i32x8 a, i32x8 b)
{
    return (m & a) | (~m & b);
}

static inline __attribute__((always_inline)) f32x8 sel_f(i32x8 m, f32x8 a, f32x8 b)
{
    return (f32x8)((m & (i32x8)a) | (~m & (i32x8)b));
}

static inline __attribute__((always_inline)) i32x8 isfinite_x8(f32x8 v)
{
    return ((i32x8)v & 0x7fffffff) < 0x7f800000;
}

static inline __attribute__((always_inline)) f32x8 to_f(i32x8 v)
{
    return __builtin_convertvector(v, f32x8);
}

static inline __attribute__((always_inline)) i32x8 to_i(f32x8 v)
{
    return __builtin_convertvector(v, i32x8);
}

static inline __attribute__((always_inline)) f32x8 clamp_f(f32x8 v, float lo, float hi)
{
    v = sel_f(v < lo, (f32x8){0} + lo, v);
    return sel_f(v > hi, (f32x8){0} + hi, v);
}

static inline __attribute__((always_inline)) i32x8 to_fx_x8(f32x8 rows, float limit)
{
    return to_i(clamp_f(rows, -limit, limit) * (float)HOUGH_FX_ONE);
}

/* hough_line_init (use_bend) for eight stubs, lane by lane the same float operations in the
 * same order, so the lines are bit-identical to the scalar ones. Lines that fill nothing (bad
 * input, layer out of range, empty bend window) get c0 = 1, c1 = 0. */
static inline __attribute__((always_inline)) void lines_x8(const struct hough_frame *f,
                                                           unsigned nlayers, const sdd_stub *st,
                                                           struct hough_line *out, int count)
{
    f32x8 r, phi, bend;
    i32x8 layer;
    for (int i = 0; i < BLOCK; i++) {
        r[i] = st[i].r;
        phi[i] = st[i].phi;
        bend[i] = st[i].bend;
        layer[i] = st[i].layer;
    }
    f32x8 c = f->k * (r - f->pivot_r);
    i32x8 live = isfinite_x8(phi) & isfinite_x8(c) & isfinite_x8(bend);
    /* Zero the dead lanes' input so that no float -> int conversion sees a NaN or inf. */
    phi = sel_f(live, phi, (f32x8){0});
    c = sel_f(live, c, (f32x8){0});
    bend = sel_f(live, bend, (f32x8){0});
    live &= layer < (int)nlayers;
    i32x8 first = {0}, last = (i32x8){0} + (f->ncols - 1);
    if (f->bend_window > 0.0f) {
        float reach = f->bend_window + f->col_half;
        f32x8 va = clamp_f((bend - reach - f->q0) * f->inv_dx, -2.0f, 40.0f);
        f32x8 vb = clamp_f((bend + reach - f->q0) * f->inv_dx, -2.0f, 40.0f);
        i32x8 a = to_i(va), b = to_i(vb);
        a -= va > to_f(a); /* ceil: the mask is -1 where true */
        b += vb < to_f(b); /* floor */
        first = sel_i(a > first, a, first);
        last = sel_i(b < last, b, last);
    }
    live &= first <= last;
    f32x8 at_left = (phi - c * f->qpt_max + f->phi_half) * f->row_scale;
    f32x8 lo0, hi0, slope;
    if (f->shape == SDD_HOUGH_HEX) {
        const float inv_sqrt3 = 0.57735026918962576f;
        f32x8 b = c * f->hex_slope;
        i32x8 abs_mask = (i32x8){0} + 0x7fffffff;
        f32x8 h = (f32x8)((i32x8)b & abs_mask);
        f32x8 up = (f32x8)((i32x8)(0.5f * HOUGH_SQRT3 - 0.5f * b) & abs_mask);
        f32x8 down = (f32x8)((i32x8)(0.5f * HOUGH_SQRT3 + 0.5f * b) & abs_mask);
        h = sel_f(up > h, up, h);
        h = sel_f(down > h, down, h);
        f32x8 reach = h * f->cell_scale * inv_sqrt3;
        f32x8 centre0 = (at_left + b) * inv_sqrt3 - 0.5f;
        lo0 = centre0 - reach;
        hi0 = centre0 + reach;
        slope = 1.5f * b * inv_sqrt3;
    } else {
        f32x8 v = c * f->dx * f->row_scale;
        float half = 0.5f * f->cell_scale;
        f32x8 centre0 = at_left + 0.5f * v;
        f32x8 spread = (f32x8)((i32x8)v & ((i32x8){0} + 0x7fffffff)) * half;
        lo0 = centre0 - spread - (0.5f + half);
        hi0 = centre0 + spread - (0.5f - half);
        slope = v;
    }
    i32x8 lo = to_fx_x8(lo0, 1024.0f), hi = to_fx_x8(hi0, 1024.0f);
    i32x8 sl = to_fx_x8(slope, 64.0f);
    first = sel_i(live, first, (i32x8){0} + 1);
    last = sel_i(live, last, (i32x8){0});
    for (int i = 0; i < count; i++) {
        out[i] = (struct hough_line){.lo = lo[i],
                                     .hi = hi[i],
                                     .slope = sl[i],
                                     .c0 = (int16_t)first[i],
                                     .c1 = (int16_t)last[i],
                                     .layer = (uint8_t)layer[i]};
    }
}

/* First pass: all lines, eight stubs at a time; then each stub's row masks, kept for the
 * second pass, ORed into its layer's plane. */
HOUGH_CLONES static void fill_planes(sdd_hough *h, const sdd_stub *stubs, size_t n)
{
    const struct hough_frame *f = &h->frame;
    unsigned nlayers = h->opts.geom.nlayers;
    int nblocks = h->window_blocks;
    memset(h->planes, 0, sizeof(h->planes));
    size_t s = 0;
    for (; s + BLOCK <= n; s += BLOCK) {
        lines_x8(f, nlayers, &stubs[s], &h->lines[s], BLOCK);
    }
    if (s < n) {
        sdd_stub tail[BLOCK] = {0};
        memcpy(tail, &stubs[s], (n - s) * sizeof(*tail));
        lines_x8(f, nlayers, tail, &h->lines[s], (int)(n - s));
    }
    for (s = 0; s < n; s++) {
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
            *(u32x8 *)(plane + BLOCK * b) |= *(const u32x8 *)(masks + BLOCK * b);
        }
    }
}

/* Candidate bits per column, each candidate's index and layer mask. */
HOUGH_CLONES static unsigned mark_candidates(sdd_hough *h)
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
HOUGH_CLONES static void collect_stubs(sdd_hough *h, size_t n)
{
    const i32x8 lane_bit = {1, 2, 4, 8, 16, 32, 64, 128};
    int nblocks = h->window_blocks;
    for (size_t s = 0; s < n; s++) {
        const struct hough_line *l = &h->lines[s];
        if (l->c0 > l->c1) {
            continue;
        }
        const uint32_t *rows = h->stub_rows[s];
        const uint32_t *cand = &h->cand_rows[l->c0];
        uint32_t hit[SDD_HOUGH_MAX_DIM];
        i32x8 acc = {0};
        for (int b = 0; b < nblocks; b++) {
            u32x8 v = *(const u32x8 *)(rows + BLOCK * b) & *(const u32x8 *)(cand + BLOCK * b);
            *(u32x8 *)(hit + BLOCK * b) = v;
            acc |= (v != 0) & (lane_bit << (BLOCK * b));
        }
        uint32_t cols =
            (uint32_t)(acc[0] | acc[1] | acc[2] | acc[3] | acc[4] | acc[5] | acc[6] | acc[7]);
        for (; cols != 0; cols &= cols - 1) {
            int k = __builtin_ctz(cols);
            const uint16_t *cell = h->cand_cell[l->c0 + k];
            for (uint32_t bits = hit[k]; bits != 0; bits &= bits - 1) {
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
    h->ncands = mark_candidates(h);
    if (h->ncands > 0) {
        collect_stubs(h, n);
    }
}
