/* A stub as a line in the Hough map: the row coordinates of the band it crosses in each
 * column, and the columns its bend allows. The band edges are 16.16 fixed-point row
 * coordinates, so the per-column work is integer adds and shifts (an arithmetic shift is an
 * exact floor) and vectorises well. Every finder and the public geometry calls use these
 * same inline functions, so the fast finder, the seed-layout reference and
 * sdd_hough_column_rows() agree bit for bit (the trigger sources build with
 * -ffp-contract=off so that the float set-up is the same everywhere too). */
#ifndef SDDAQ_TRIGGER_HOUGH_LINE_H
#define SDDAQ_TRIGGER_HOUGH_LINE_H

#include <math.h>
#include <stdint.h>

#include "sddaq/trigger.h"

#define HOUGH_SQRT3 1.7320508075688772f

/* Constants of one map, derived once from the geometry. */
struct hough_frame {
    sdd_hough_shape shape;
    int ncols, nrows;
    float k, pivot_r, qpt_max, phi_half, bend_window;
    float dx;         /* q/pT step between column centres */
    float inv_dx;     /* 1 / dx: the data path multiplies, it never divides */
    float hex_slope;  /* hex: Y per X per unit of c (row_scale / col_scale) */
    float cell_scale; /* cells shrunk about their centres by this for the crossing test */
    float q0;         /* q/pT of column 0's centre */
    float col_half;   /* q/pT half-extent of a column (for the bend window) */
    float row_scale;  /* rect: rows per rad; hex: Y units per rad */
    float col_scale;  /* hex: X units per c/GeV */
};

#define HOUGH_FX_ONE  65536 /* 16.16 fixed point */
#define HOUGH_FX_HALF 32768

/* One stub, ready for the column loop: in column i it crosses rows ceil(lo + slope*i - off_i)
 * to floor(hi + slope*i - off_i), in 16.16 fixed point, off_i = 0.5 on odd hex columns. c0 > c1
 * means the stub fills nothing. */
struct hough_line {
    int32_t lo, hi, slope;
    int16_t c0, c1;
    uint8_t layer;
};

void hough_frame_init(struct hough_frame *f, const sdd_hough_geom *g, sdd_hough_shape shape);

/* Clamp before converting so that no float -> int conversion can overflow. */
static inline float hough_clamp_rows(float v)
{
    v = v < -2.0f ? -2.0f : v;
    return v > 40.0f ? 40.0f : v;
}

/* Exact floor and ceil of a clamped value, written with truncation so that they vectorise
 * without SSE4.1 rounding instructions or libm calls. */
static inline int hough_floor(float v)
{
    int t = (int)v;
    return t - (int)(v < (float)t);
}

static inline int hough_ceil(float v)
{
    int t = (int)v;
    return t + (int)(v > (float)t);
}

/* The rows of one column crossed by a line band, as a bit mask. Branch-free; every finder
 * computes rows with exactly this expression (the fast finder has an 8-lane copy). */
static inline uint32_t hough_band(sdd_hough_shape shape, int nrows, const struct hough_line *l,
                                  int col)
{
    int32_t off = shape == SDD_HOUGH_HEX ? HOUGH_FX_HALF * (col & 1) : 0;
    int32_t lo = l->lo + l->slope * col - off;
    int32_t hi = l->hi + l->slope * col - off;
    int j0 = (lo + HOUGH_FX_ONE - 1) >> 16; /* ceil */
    int j1 = hi >> 16;
    j0 = j0 < 0 ? 0 : j0;
    j1 = j1 > nrows - 1 ? nrows - 1 : j1;
    int width = j1 - j0;
    int shift = j0 > 31 ? 31 : j0;
    uint32_t band = (UINT32_MAX >> (31 - (width < 0 ? 0 : width))) << shift;
    uint32_t live = (uint32_t)(width >= 0) & (uint32_t)(col >= l->c0) & (uint32_t)(col <= l->c1);
    return band & (0u - live);
}

/* A row coordinate in 16.16 fixed point; the clamp keeps every later sum inside int32 and
 * is far outside any map (32 rows). */
static inline int32_t hough_to_fx(float rows, float limit)
{
    rows = rows < -limit ? -limit : rows;
    rows = rows > limit ? limit : rows;
    return (int32_t)(rows * (float)HOUGH_FX_ONE);
}

/* The vertex half-height of a flat-top hexagon of circumradius 1 seen along slope b. */
static inline float hough_hex_reach(float b)
{
    float h = fabsf(b);
    float up = fabsf(0.5f * HOUGH_SQRT3 - 0.5f * b);
    float down = fabsf(0.5f * HOUGH_SQRT3 + 0.5f * b);
    h = up > h ? up : h;
    return down > h ? down : h;
}

/* Fill l for stub s; use_bend = false ignores the bend window. Non-finite input gives a line
 * that fills nothing. hough_lines_vec.h is the vector copy (8 or 16 lanes): change both
 * together. */
static inline void hough_line_init(const struct hough_frame *f, const sdd_stub *s, bool use_bend,
                                   struct hough_line *l)
{
    /* phi_T(x) = phi + c x with c = k (r - r_T): the linearised track through the pivot. */
    float c = f->k * (s->r - f->pivot_r);
    l->layer = s->layer;
    if (!isfinite(s->phi) || !isfinite(c) || !isfinite(s->bend)) {
        l->c0 = 1;
        l->c1 = 0;
        l->lo = l->hi = l->slope = 0;
        return;
    }
    int first = 0, last = f->ncols - 1;
    if (use_bend && f->bend_window > 0.0f) {
        float reach = f->bend_window + f->col_half;
        int a = hough_ceil(hough_clamp_rows((s->bend - reach - f->q0) * f->inv_dx));
        int b = hough_floor(hough_clamp_rows((s->bend + reach - f->q0) * f->inv_dx));
        first = a > first ? a : first;
        last = b < last ? b : last;
    }
    l->c0 = (int16_t)first;
    l->c1 = (int16_t)last;
    float at_left = (s->phi - c * f->qpt_max + f->phi_half) * f->row_scale;
    float lo0, hi0, slope;
    if (f->shape == SDD_HOUGH_HEX) {
        const float inv_sqrt3 = 0.57735026918962576f;
        float b = c * f->hex_slope;
        float reach = hough_hex_reach(b) * f->cell_scale * inv_sqrt3;
        float centre0 = (at_left + b) * inv_sqrt3 - 0.5f;
        lo0 = centre0 - reach;
        hi0 = centre0 + reach;
        slope = 1.5f * b * inv_sqrt3;
    } else {
        /* Over the (scaled) column the line spans centre +- |v| half rows; cell j (scaled)
         * spans j + 0.5 +- half: rows from ceil(lo0) to floor(hi0) overlap. */
        float v = c * f->dx * f->row_scale;
        float half = 0.5f * f->cell_scale;
        float centre0 = at_left + 0.5f * v;
        float spread = fabsf(v) * half;
        lo0 = centre0 - spread - (0.5f + half);
        hi0 = centre0 + spread - (0.5f - half);
        slope = v;
    }
    l->lo = hough_to_fx(lo0, 1024.0f);
    l->hi = hough_to_fx(hi0, 1024.0f);
    l->slope = hough_to_fx(slope, 64.0f);
}

#endif
