/* hough_line_init for HV_LANES stubs at once, in GCC vector types: lane by lane the same
 * float operations in the same order, so the lines are bit-identical to the scalar ones.
 * The includer defines HV_LANES (8 for the AVX2 path, 16 for the AVX-512 one) and includes
 * this header once. */
#ifndef SDDAQ_TRIGGER_HOUGH_LINES_VEC_H
#define SDDAQ_TRIGGER_HOUGH_LINES_VEC_H

#include "trigger/hough_line.h"

#ifndef HV_LANES
#error "define HV_LANES before including hough_lines_vec.h"
#endif

#define HV_INLINE static inline __attribute__((always_inline))

#pragma GCC diagnostic ignored "-Wpsabi" /* static, inlined helpers: no ABI to keep */
typedef int32_t hv_i __attribute__((vector_size(4 * HV_LANES)));
typedef uint32_t hv_u __attribute__((vector_size(4 * HV_LANES), aligned(4)));
typedef float hv_f __attribute__((vector_size(4 * HV_LANES)));

/* HV_LANES lines: band edges and slope in 16.16 fixed point, first and last column. */
struct hv_lines {
    hv_i lo, hi, slope, first, last;
};

HV_INLINE hv_i hv_sel_i(hv_i m, hv_i a, hv_i b)
{
    return (m & a) | (~m & b);
}

HV_INLINE hv_f hv_sel_f(hv_i m, hv_f a, hv_f b)
{
    return (hv_f)((m & (hv_i)a) | (~m & (hv_i)b));
}

HV_INLINE hv_i hv_isfinite(hv_f v)
{
    return ((hv_i)v & 0x7fffffff) < 0x7f800000;
}

HV_INLINE hv_f hv_abs(hv_f v)
{
    return (hv_f)((hv_i)v & 0x7fffffff);
}

HV_INLINE hv_f hv_clamp(hv_f v, float lo, float hi)
{
    v = hv_sel_f(v < lo, (hv_f){0} + lo, v);
    return hv_sel_f(v > hi, (hv_f){0} + hi, v);
}

HV_INLINE hv_i hv_to_fx(hv_f rows, float limit)
{
    return __builtin_convertvector(hv_clamp(rows, -limit, limit) * (float)HOUGH_FX_ONE, hv_i);
}

/* Lines for the stubs (r, phi, bend); lanes not in `live` (bad layer, padding), non-finite
 * input and an empty bend window give first = 1, last = 0: the line fills nothing. */
HV_INLINE void hv_lines_init(const struct hough_frame *f, hv_f r, hv_f phi, hv_f bend, hv_i live,
                             struct hv_lines *out)
{
    hv_f c = f->k * (r - f->pivot_r);
    live &= hv_isfinite(phi) & hv_isfinite(c) & hv_isfinite(bend);
    /* Zero the dead lanes' input so that no float -> int conversion sees a NaN or inf. */
    phi = hv_sel_f(live, phi, (hv_f){0});
    c = hv_sel_f(live, c, (hv_f){0});
    bend = hv_sel_f(live, bend, (hv_f){0});
    hv_i first = {0}, last = (hv_i){0} + (f->ncols - 1);
    if (f->bend_window > 0.0f) {
        float reach = f->bend_window + f->col_half;
        hv_f va = hv_clamp((bend - reach - f->q0) * f->inv_dx, -2.0f, 40.0f);
        hv_f vb = hv_clamp((bend + reach - f->q0) * f->inv_dx, -2.0f, 40.0f);
        hv_i a = __builtin_convertvector(va, hv_i), b = __builtin_convertvector(vb, hv_i);
        a -= va > __builtin_convertvector(a, hv_f); /* ceil: the mask is -1 where true */
        b += vb < __builtin_convertvector(b, hv_f); /* floor */
        first = hv_sel_i(a > first, a, first);
        last = hv_sel_i(b < last, b, last);
    }
    live &= first <= last;
    hv_f at_left = (phi - c * f->qpt_max + f->phi_half) * f->row_scale;
    hv_f lo0, hi0, slope;
    if (f->shape == SDD_HOUGH_HEX) {
        const float inv_sqrt3 = 0.57735026918962576f;
        hv_f b = c * f->hex_slope;
        hv_f h = hv_abs(b);
        hv_f up = hv_abs(0.5f * HOUGH_SQRT3 - 0.5f * b);
        hv_f down = hv_abs(0.5f * HOUGH_SQRT3 + 0.5f * b);
        h = hv_sel_f(up > h, up, h);
        h = hv_sel_f(down > h, down, h);
        hv_f reach = h * f->cell_scale * inv_sqrt3;
        hv_f centre0 = (at_left + b) * inv_sqrt3 - 0.5f;
        lo0 = centre0 - reach;
        hi0 = centre0 + reach;
        slope = 1.5f * b * inv_sqrt3;
    } else {
        hv_f v = c * f->dx * f->row_scale;
        float half = 0.5f * f->cell_scale;
        hv_f centre0 = at_left + 0.5f * v;
        hv_f spread = hv_abs(v) * half;
        lo0 = centre0 - spread - (0.5f + half);
        hi0 = centre0 + spread - (0.5f - half);
        slope = v;
    }
    out->lo = hv_to_fx(lo0, 1024.0f);
    out->hi = hv_to_fx(hi0, 1024.0f);
    out->slope = hv_to_fx(slope, 64.0f);
    out->first = hv_sel_i(live, first, (hv_i){0} + 1);
    out->last = hv_sel_i(live, last, (hv_i){0});
}

#endif
