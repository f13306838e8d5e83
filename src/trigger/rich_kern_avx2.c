/* The ring finder's per-hit kernels for AVX2 (x86-64-v3, the vectors of most x86 servers
 * without AVX-512), with the same results as the portable ones of rich_fit_core.h: the 16 lanes
 * are two 8-float vectors (lanes 0-7 and 8-15), the same float operations run in each lane and
 * the lane sums are added in the same fixed tree, so every build gives the same bits. */
#include <math.h>

#include "trigger/rich_fit_core.h"
#include "trigger/rich_x86.h"

#ifdef RICH_HAVE_V3

/* Weights 1.0f or 0.0f for 8 hits from 8 bits of a mask (lane i: bit i). */
RICH_V3_INLINE __m256 weights8(unsigned bits)
{
    const __m256i sel = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    __m256i on = _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32((int)bits), sel), sel);
    return _mm256_and_ps(_mm256_castsi256_ps(on), _mm256_set1_ps(1.0f));
}

/* rich_lane_tree() of lanes 0-7 (lo) and 8-15 (hi): 16 -> 8 (i, i+8) -> 4 -> 2 -> 1. */
RICH_V3_INLINE float tree_v(__m256 lo, __m256 hi)
{
    __m256 b = _mm256_add_ps(lo, hi);
    __m128 c = _mm_add_ps(_mm256_castps256_ps128(b), _mm256_extractf128_ps(b, 1));
    __m128 d = _mm_add_ps(c, _mm_movehl_ps(c, c));
    __m128 e = _mm_add_ss(d, _mm_shuffle_ps(d, d, 1));
    return _mm_cvtss_f32(e);
}

/* The 8 -> 1 part of the tree for eight vectors at once, sum k in lane k: the same pairs
 * (i, i+4), (i, i+2), (0, 1) of each vector, with partial sums of several vectors packed
 * into one register. */
RICH_V3_INLINE __m256 tree8_v(const __m256 *b)
{
    __m256 c[4], d[2];
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) { /* [0-3 of 2k, 0-3 of 2k+1] + [4-7 of each] */
        __m256 lo = _mm256_permute2f128_ps(b[2 * k], b[2 * k + 1], 0x20);
        __m256 hi = _mm256_permute2f128_ps(b[2 * k], b[2 * k + 1], 0x31);
        c[k] = _mm256_add_ps(lo, hi);
    }
#pragma GCC unroll 2
    for (int k = 0; k < 2; k++) { /* in each 128-bit lane: elements 0, 1 + elements 2, 3 */
        __m256 lo = _mm256_shuffle_ps(c[2 * k], c[2 * k + 1], _MM_SHUFFLE(1, 0, 1, 0));
        __m256 hi = _mm256_shuffle_ps(c[2 * k], c[2 * k + 1], _MM_SHUFFLE(3, 2, 3, 2));
        d[k] = _mm256_add_ps(lo, hi);
    }
    __m256 lo = _mm256_shuffle_ps(d[0], d[1], _MM_SHUFFLE(2, 0, 2, 0));
    __m256 hi = _mm256_shuffle_ps(d[0], d[1], _MM_SHUFFLE(3, 1, 3, 1));
    /* Lanes hold the sums of vectors 0, 2, 4, 6 | 1, 3, 5, 7: one permute orders them. */
    __m256 sum = _mm256_add_ps(lo, hi);
    return _mm256_permutevar8x32_ps(sum, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* tree8_v() of two vectors: the same pairs, (i, i+4), (i, i+2), (0, 1), a vector in each
 * 128-bit half. */
RICH_V3_INLINE void tree2_v(__m256 a, __m256 b, float *sa, float *sb)
{
    __m256 c =
        _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
    __m256 d = _mm256_add_ps(c, _mm256_shuffle_ps(c, c, _MM_SHUFFLE(3, 2, 3, 2)));
    __m256 e = _mm256_add_ps(d, _mm256_shuffle_ps(d, d, _MM_SHUFFLE(1, 1, 1, 1)));
    *sa = _mm_cvtss_f32(_mm256_castps256_ps128(e));
    *sb = _mm_cvtss_f32(_mm256_extractf128_ps(e, 1));
}

/* |d - R| < w as (R - w)^2 < d^2 < (R + w)^2, 8 hits: their bits. */
RICH_V3_INLINE unsigned on_circle8(const float *x, const float *y, __m256 cx, __m256 cy, __m256 lo,
                                   __m256 hi)
{
    __m256 dx = _mm256_sub_ps(_mm256_load_ps(x), cx);
    __m256 dy = _mm256_sub_ps(_mm256_load_ps(y), cy);
    __m256 d2 = _mm256_add_ps(_mm256_mul_ps(dx, dx), _mm256_mul_ps(dy, dy));
    __m256 in = _mm256_and_ps(_mm256_cmp_ps(d2, lo, _CMP_GT_OQ), _mm256_cmp_ps(d2, hi, _CMP_LT_OQ));
    return (unsigned)_mm256_movemask_ps(in);
}

RICH_TARGET_V3 static uint64_t on_circle_avx2(const struct rich_spot *s, uint64_t alive,
                                              const sdd_rich_circle *c, float window)
{
    float lo = c->r > window ? (c->r - window) * (c->r - window) : 0.0f;
    float hi = (c->r + window) * (c->r + window);
    const __m256 cx = _mm256_set1_ps(c->cx), cy = _mm256_set1_ps(c->cy);
    const __m256 vlo = _mm256_set1_ps(lo), vhi = _mm256_set1_ps(hi);
    uint64_t sel = 0;
    for (unsigned q = 0; q < s->n; q += 8) {
        sel |= (uint64_t)on_circle8(s->x + q, s->y + q, cx, cy, vlo, vhi) << q;
    }
    return sel & alive;
}

/* The ten moment lane sums of lanes h*8 .. h*8+7 (hits q + h*8 + i for q = 0, 16, ...); without
 * z_sums the first seven (Crawford's fit reads no more), which leaves the sums in registers. */
RICH_V3_INLINE void moments_half(const struct rich_spot *s, uint64_t mask, unsigned h, __m256 xm,
                                 __m256 ym, bool z_sums, __m256 *m)
{
#pragma GCC unroll 10
    for (int k = 0; k < NMOM; k++) {
        m[k] = _mm256_setzero_ps();
    }
    for (unsigned q = h * 8; q < s->n; q += RICH_LANES) {
        __m256 w = weights8((unsigned)(mask >> q) & 0xFF);
        __m256 u = _mm256_sub_ps(_mm256_load_ps(s->x + q), xm);
        __m256 v = _mm256_sub_ps(_mm256_load_ps(s->y + q), ym);
        __m256 wu = _mm256_mul_ps(w, u), wv = _mm256_mul_ps(w, v);
        m[0] = _mm256_add_ps(m[0], _mm256_mul_ps(wu, u));
        m[1] = _mm256_add_ps(m[1], _mm256_mul_ps(wv, v));
        m[2] = _mm256_add_ps(m[2], _mm256_mul_ps(wu, v));
        m[3] = _mm256_add_ps(m[3], _mm256_mul_ps(_mm256_mul_ps(wu, u), u));
        m[4] = _mm256_add_ps(m[4], _mm256_mul_ps(_mm256_mul_ps(wv, v), v));
        m[5] = _mm256_add_ps(m[5], _mm256_mul_ps(_mm256_mul_ps(wu, v), v));
        m[6] = _mm256_add_ps(m[6], _mm256_mul_ps(_mm256_mul_ps(wv, u), u));
        if (z_sums) {
            __m256 z = _mm256_add_ps(_mm256_mul_ps(u, u), _mm256_mul_ps(v, v));
            __m256 wz = _mm256_mul_ps(w, z);
            m[7] = _mm256_add_ps(m[7], _mm256_mul_ps(wz, z));
            m[8] = _mm256_add_ps(m[8], _mm256_mul_ps(wz, u));
            m[9] = _mm256_add_ps(m[9], _mm256_mul_ps(wz, v));
        }
    }
}

RICH_TARGET_V3 static bool moments_avx2(const struct rich_spot *s, uint64_t mask, bool z_sums,
                                        struct rich_moments *mo)
{
    /* A sum of ones is exact: the weight sum is the hit count. */
    unsigned nw = (unsigned)__builtin_popcountll(mask);
    if (nw < 3) {
        return false;
    }
    float sw = (float)nw;
    /* Lanes 0-7 take hits q .. q+7, lanes 8-15 hits q+8 .. q+15, q = 0, 16, ...: two named
     * sums each (an array indexed by the half went through memory at every step). */
    __m256 ax0 = _mm256_setzero_ps(), ax1 = ax0, ay0 = ax0, ay1 = ax0;
    for (unsigned q = 0; q < s->n; q += RICH_LANES) {
        __m256 w = weights8((unsigned)(mask >> q) & 0xFF);
        ax0 = _mm256_add_ps(ax0, _mm256_mul_ps(w, _mm256_load_ps(s->x + q)));
        ay0 = _mm256_add_ps(ay0, _mm256_mul_ps(w, _mm256_load_ps(s->y + q)));
        if (q + 8 < s->n) {
            w = weights8((unsigned)(mask >> (q + 8)) & 0xFF);
            ax1 = _mm256_add_ps(ax1, _mm256_mul_ps(w, _mm256_load_ps(s->x + q + 8)));
            ay1 = _mm256_add_ps(ay1, _mm256_mul_ps(w, _mm256_load_ps(s->y + q + 8)));
        }
    }
    float xm = tree_v(ax0, ax1) / sw, ym = tree_v(ay0, ay1) / sw;
    const __m256 vxm = _mm256_set1_ps(xm), vym = _mm256_set1_ps(ym);
    /* One half of the lanes at a time keeps the sums in registers. */
    __m256 lo[NMOM], hi[NMOM], b[NMOM];
    if (z_sums) { /* a copy each, so neither tests z_sums per hit */
        moments_half(s, mask, 0, vxm, vym, true, lo);
        moments_half(s, mask, 1, vxm, vym, true, hi);
    } else {
        moments_half(s, mask, 0, vxm, vym, false, lo);
        moments_half(s, mask, 1, vxm, vym, false, hi);
    }
#pragma GCC unroll 16
    for (int k = 0; k < NMOM; k++) {
        b[k] = _mm256_add_ps(lo[k], hi[k]);
    }
    float sums[NMOM];
    _mm256_storeu_ps(sums, tree8_v(b));
    tree2_v(b[8], b[9], &sums[8], &sums[9]);
    rich_store_moments(sw, xm, ym, sums, mo);
    return true;
}

RICH_TARGET_V3 static float residuals_avx2(const struct rich_spot *s, uint64_t mask,
                                           const sdd_rich_circle *c)
{
    _Alignas(32) float res2[SDD_RICH_MAX_HITS];
    const __m256 cx = _mm256_set1_ps(c->cx), cy = _mm256_set1_ps(c->cy);
    const __m256 r = _mm256_set1_ps(c->r);
    for (unsigned q = 0; q < s->n; q += 8) {
        __m256 dx = _mm256_sub_ps(_mm256_load_ps(s->x + q), cx);
        __m256 dy = _mm256_sub_ps(_mm256_load_ps(s->y + q), cy);
        __m256 d = _mm256_sqrt_ps(_mm256_add_ps(_mm256_mul_ps(dx, dx), _mm256_mul_ps(dy, dy)));
        __m256 res = _mm256_sub_ps(d, r);
        _mm256_store_ps(res2 + q, _mm256_mul_ps(res, res));
    }
    return rich_sum_masked(res2, mask);
}

RICH_V3_INLINE __m256 dist2_8(__m256 px, __m256 py, __m256 x, __m256 y)
{
    __m256 dx = _mm256_sub_ps(x, px), dy = _mm256_sub_ps(y, py);
    return _mm256_add_ps(_mm256_mul_ps(dx, dx), _mm256_mul_ps(dy, dy));
}

/* The same bits as sqrt((px - x)^2 + (py - y)^2): a difference squares alike either way. */
RICH_V3_INLINE __m256 dist8(__m256 px, __m256 py, __m256 x, __m256 y)
{
    return _mm256_sqrt_ps(dist2_8(px, py, x, y));
}

RICH_TARGET_V3 static uint64_t concyclic_avx2(const struct rich_spot *s, uint64_t alive, int a,
                                              int b, int c, const float dist[3], float eps)
{
    const __m256 ab = _mm256_set1_ps(dist[0]), ac = _mm256_set1_ps(dist[1]);
    const __m256 bc = _mm256_set1_ps(dist[2]), veps = _mm256_set1_ps(eps);
    const __m256 two = _mm256_set1_ps(2.0f), sign = _mm256_set1_ps(-0.0f);
    const __m256 axv = _mm256_set1_ps(s->x[a]), ayv = _mm256_set1_ps(s->y[a]);
    const __m256 bxv = _mm256_set1_ps(s->x[b]), byv = _mm256_set1_ps(s->y[b]);
    const __m256 cxv = _mm256_set1_ps(s->x[c]), cyv = _mm256_set1_ps(s->y[c]);
    uint64_t sel = 0;
    for (unsigned q = 0; q < s->n; q += 8) {
        __m256 x = _mm256_load_ps(s->x + q), y = _mm256_load_ps(s->y + q);
        __m256 ad = dist8(axv, ayv, x, y), bd = dist8(bxv, byv, x, y);
        __m256 cd = dist8(cxv, cyv, x, y);
        __m256 p1 = _mm256_mul_ps(ab, cd), p2 = _mm256_mul_ps(ac, bd), p3 = _mm256_mul_ps(ad, bc);
        /* p1 > p2 ? p1 : p2, then against p3, as the portable code (no NaN here). */
        __m256 mx = _mm256_blendv_ps(p2, p1, _mm256_cmp_ps(p1, p2, _CMP_GT_OQ));
        mx = _mm256_blendv_ps(p3, mx, _mm256_cmp_ps(mx, p3, _CMP_GT_OQ));
        __m256 dev = _mm256_andnot_ps(
            sign, _mm256_sub_ps(_mm256_mul_ps(two, mx), _mm256_add_ps(_mm256_add_ps(p1, p2), p3)));
        __m256 in = _mm256_cmp_ps(dev, _mm256_mul_ps(veps, mx), _CMP_LE_OQ);
        sel |= (uint64_t)(unsigned)_mm256_movemask_ps(in) << q;
    }
    return sel & alive;
}

/* assign_portable(), eight hits a step: each ring's residual in every lane, the lane keeps the
 * first ring with the smallest (the same strict comparison in the same ring order). */
RICH_TARGET_V3 void rich_assign_avx2(const struct rich_spot *s, uint64_t all,
                                     const struct rich_cand *r, unsigned k, float window,
                                     uint64_t *own)
{
    for (unsigned j = 0; j < k; j++) {
        own[j] = 0;
    }
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (unsigned q = 0; q < s->n; q += 8) {
        unsigned in = (unsigned)(all >> q) & 0xFF;
        if (in == 0) {
            continue;
        }
        __m256 x = _mm256_load_ps(s->x + q), y = _mm256_load_ps(s->y + q);
        __m256 best = _mm256_set1_ps(window);
        __m256i bj = _mm256_set1_epi32((int)k);
        for (unsigned j = 0; j < k; j++) {
            __m256 d = dist8(x, y, _mm256_set1_ps(r[j].c.cx), _mm256_set1_ps(r[j].c.cy));
            __m256 res = _mm256_andnot_ps(sign, _mm256_sub_ps(d, _mm256_set1_ps(r[j].c.r)));
            __m256 closer = _mm256_cmp_ps(res, best, _CMP_LT_OQ);
            best = _mm256_blendv_ps(best, res, closer);
            bj = _mm256_blendv_epi8(bj, _mm256_set1_epi32((int)j), _mm256_castps_si256(closer));
        }
        for (unsigned j = 0; j < k; j++) {
            __m256i is = _mm256_cmpeq_epi32(bj, _mm256_set1_epi32((int)j));
            unsigned bits = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(is)) & in;
            own[j] |= (uint64_t)bits << q;
        }
    }
}

/* extremes_portable() with the eight directions in the lanes: each hit, in order, replaces a
 * lane's best only when strictly larger, as the portable loop does per direction. */
RICH_TARGET_V3 void rich_extremes_avx2(const struct rich_spot *s, uint64_t alive,
                                       int ext[RICH_NDIR])
{
    const __m256 dx = _mm256_loadu_ps(RICH_DIRX), dy = _mm256_loadu_ps(RICH_DIRY);
    __m256 best = _mm256_set1_ps(-INFINITY);
    __m256i idx = _mm256_set1_epi32(-1);
    for (uint64_t m = alive; m != 0; m &= m - 1) {
        int h = __builtin_ctzll(m);
        __m256 p = _mm256_add_ps(_mm256_mul_ps(_mm256_set1_ps(s->x[h]), dx),
                                 _mm256_mul_ps(_mm256_set1_ps(s->y[h]), dy));
        __m256 more = _mm256_cmp_ps(p, best, _CMP_GT_OQ);
        best = _mm256_blendv_ps(best, p, more);
        idx = _mm256_blendv_epi8(idx, _mm256_set1_epi32(h), _mm256_castps_si256(more));
    }
    _mm256_storeu_si256((__m256i *)(void *)ext, idx);
}

/* farthest_portable(), eight hits a step: each lane keeps its first largest (strictly larger
 * replaces), then the lanes give the largest with the lowest hit index, the portable loop's
 * first of equals. Lanes outside alive get -2, below every distance and the start (-1). */
RICH_TARGET_V3 int rich_farthest_avx2(const struct rich_spot *s, uint64_t alive, int a, int b)
{
    const __m256 ax = _mm256_set1_ps(s->x[a]), ay = _mm256_set1_ps(s->y[a]);
    const __m256 bx = _mm256_set1_ps(s->x[b < 0 ? a : b]), by = _mm256_set1_ps(s->y[b < 0 ? a : b]);
    const __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    const __m256 out = _mm256_set1_ps(-2.0f);
    __m256 best = _mm256_set1_ps(-1.0f);
    __m256i idx = _mm256_set1_epi32(-1), lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (unsigned q = 0; q < s->n; q += 8, lane = _mm256_add_epi32(lane, _mm256_set1_epi32(8))) {
        int in = (int)(alive >> q) & 0xFF;
        if (in == 0) {
            continue;
        }
        __m256 x = _mm256_load_ps(s->x + q), y = _mm256_load_ps(s->y + q);
        __m256 d = dist2_8(ax, ay, x, y);
        if (b >= 0) {
            d = _mm256_min_ps(dist2_8(bx, by, x, y), d); /* db < da ? db : da */
        }
        __m256i live = _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(in), bit), bit);
        d = _mm256_blendv_ps(out, d, _mm256_castsi256_ps(live));
        __m256 more = _mm256_cmp_ps(d, best, _CMP_GT_OQ);
        best = _mm256_blendv_ps(best, d, more);
        idx = _mm256_blendv_epi8(idx, lane, _mm256_castps_si256(more));
    }
    /* The largest in every lane, then the lowest index of the lanes that hold it (-1 read as
     * unsigned is the largest: it wins only when no lane has a hit). */
    __m256 top = _mm256_max_ps(best, _mm256_permute2f128_ps(best, best, 1));
    top = _mm256_max_ps(top, _mm256_shuffle_ps(top, top, _MM_SHUFFLE(1, 0, 3, 2)));
    top = _mm256_max_ps(top, _mm256_shuffle_ps(top, top, _MM_SHUFFLE(2, 3, 0, 1)));
    __m256i at = _mm256_blendv_epi8(_mm256_set1_epi32(-1), idx,
                                    _mm256_castps_si256(_mm256_cmp_ps(best, top, _CMP_EQ_OQ)));
    at = _mm256_min_epu32(at, _mm256_permute2x128_si256(at, at, 1));
    at = _mm256_min_epu32(at, _mm256_shuffle_epi32(at, _MM_SHUFFLE(1, 0, 3, 2)));
    at = _mm256_min_epu32(at, _mm256_shuffle_epi32(at, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm256_cvtsi256_si32(at);
}

const struct rich_kern rich_kern_avx2 = {on_circle_avx2,    moments_avx2,     residuals_avx2,
                                         concyclic_avx2,    rich_assign_avx2, rich_extremes_avx2,
                                         rich_farthest_avx2};
#endif
