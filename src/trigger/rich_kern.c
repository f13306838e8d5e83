/* The ring finder's per-hit kernels for AVX-512, with the same results as the portable ones
 * of rich_fit_core.h (the same float operations in the same order: 16 lanes, then the fixed
 * tree); Ptolemy's concyclic test in both builds, and its extremes and farthest-hit search and
 * the hit assignment in the portable one (the AVX-512 build takes the AVX2 ones of
 * rich_kern_avx2.c). */
#include <math.h>

#include "trigger/rich_fit_core.h"

static uint64_t concyclic_portable(const struct rich_spot *s, uint64_t alive, int a, int b, int c,
                                   const float dist[3], float eps)
{
    float ab = dist[0], ac = dist[1], bc = dist[2];
    unsigned n = (s->n + RICH_LANES - 1) & ~(unsigned)(RICH_LANES - 1);
    uint8_t in[SDD_RICH_MAX_HITS];
    for (unsigned d = 0; d < n; d++) {
        float ax = s->x[a] - s->x[d], ay = s->y[a] - s->y[d];
        float bx = s->x[b] - s->x[d], by = s->y[b] - s->y[d];
        float cx = s->x[c] - s->x[d], cy = s->y[c] - s->y[d];
        float ad = sqrtf(ax * ax + ay * ay), bd = sqrtf(bx * bx + by * by);
        float cd = sqrtf(cx * cx + cy * cy);
        float p1 = ab * cd, p2 = ac * bd, p3 = ad * bc;
        float mx = p1 > p2 ? p1 : p2;
        mx = mx > p3 ? mx : p3;
        float dev = fabsf(2.0f * mx - (p1 + p2 + p3));
        in[d] = dev <= eps * mx;
    }
    uint64_t sel = 0;
    for (unsigned d = 0; d < n; d++) {
        sel |= (uint64_t)in[d] << d;
    }
    return sel & alive;
}

static void extremes_portable(const struct rich_spot *s, uint64_t alive, int ext[RICH_NDIR])
{
    float best_p[RICH_NDIR];
    for (int k = 0; k < RICH_NDIR; k++) {
        ext[k] = -1;
        best_p[k] = -INFINITY;
    }
    for (uint64_t m = alive; m != 0; m &= m - 1) {
        int h = __builtin_ctzll(m);
        for (int k = 0; k < RICH_NDIR; k++) {
            float p = s->x[h] * RICH_DIRX[k] + s->y[h] * RICH_DIRY[k];
            if (p > best_p[k]) {
                best_p[k] = p;
                ext[k] = h;
            }
        }
    }
}

static int farthest_portable(const struct rich_spot *s, uint64_t alive, int a, int b)
{
    int best = -1;
    float best_d = -1.0f;
    for (uint64_t m = alive; m != 0; m &= m - 1) {
        int i = __builtin_ctzll(m);
        float da =
            (s->x[i] - s->x[a]) * (s->x[i] - s->x[a]) + (s->y[i] - s->y[a]) * (s->y[i] - s->y[a]);
        if (b >= 0) {
            float db = (s->x[i] - s->x[b]) * (s->x[i] - s->x[b]) +
                       (s->y[i] - s->y[b]) * (s->y[i] - s->y[b]);
            da = db < da ? db : da; /* fminf without the call: no NaN here */
        }
        if (da > best_d) {
            best_d = da;
            best = i;
        }
    }
    return best;
}

const struct rich_kern rich_kern_portable = {
    on_circle_portable, moments_portable,  residuals_portable, concyclic_portable,
    assign_portable,    extremes_portable, farthest_portable};

#ifdef RICH_HAVE_V4
#include <immintrin.h>

/* The same tree as rich_lane_tree(): 16 -> 8 (i, i+8) -> 4 (i, i+4) -> 2 (i, i+2) -> 1. */
RICH_TARGET_V4 static float tree_v(__m512 v)
{
    __m256 b = _mm256_add_ps(_mm512_castps512_ps256(v),
                             _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    __m128 c = _mm_add_ps(_mm256_castps256_ps128(b), _mm256_extractf128_ps(b, 1));
    __m128 d = _mm_add_ps(c, _mm_movehl_ps(c, c));
    __m128 e = _mm_add_ss(d, _mm_shuffle_ps(d, d, 1));
    return _mm_cvtss_f32(e);
}

RICH_TARGET_V4 static uint64_t on_circle_avx512(const struct rich_spot *s, uint64_t alive,
                                                const sdd_rich_circle *c, float window)
{
    float lo = c->r > window ? (c->r - window) * (c->r - window) : 0.0f;
    float hi = (c->r + window) * (c->r + window);
    const __m512 cx = _mm512_set1_ps(c->cx), cy = _mm512_set1_ps(c->cy);
    const __m512 vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi);
    uint64_t sel = 0;
    for (unsigned q = 0; q < s->n; q += RICH_LANES) {
        __m512 dx = _mm512_sub_ps(_mm512_load_ps(s->x + q), cx);
        __m512 dy = _mm512_sub_ps(_mm512_load_ps(s->y + q), cy);
        __m512 d2 = _mm512_add_ps(_mm512_mul_ps(dx, dx), _mm512_mul_ps(dy, dy));
        __mmask16 in =
            _mm512_mask_cmp_ps_mask(_mm512_cmp_ps_mask(d2, vlo, _CMP_GT_OQ), d2, vhi, _CMP_LT_OQ);
        sel |= (uint64_t)in << q;
    }
    return sel & alive;
}

/* tree_v() of sixteen vectors at once, the k-th sum in lane k: the same pairs added in the
 * same order (16 -> 8 -> 4 -> 2 -> 1 lanes per vector), but with the partial sums of several
 * vectors packed into one register, which takes 30 shuffles instead of 64. */
RICH_TARGET_V4 static __m512 tree16_v(const __m512 *v)
{
    __m512 b[8], c[4], d[2];
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++) { /* [lanes 0-7 of 2k, of 2k+1] + [lanes 8-15 of each] */
        __m512 lo = _mm512_shuffle_f32x4(v[2 * k], v[2 * k + 1], _MM_SHUFFLE(1, 0, 1, 0));
        __m512 hi = _mm512_shuffle_f32x4(v[2 * k], v[2 * k + 1], _MM_SHUFFLE(3, 2, 3, 2));
        b[k] = _mm512_add_ps(lo, hi);
    }
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) { /* quarters: [0-3 of each of four] + [4-7 of each] */
        __m512 lo = _mm512_shuffle_f32x4(b[2 * k], b[2 * k + 1], _MM_SHUFFLE(2, 0, 2, 0));
        __m512 hi = _mm512_shuffle_f32x4(b[2 * k], b[2 * k + 1], _MM_SHUFFLE(3, 1, 3, 1));
        c[k] = _mm512_add_ps(lo, hi);
    }
#pragma GCC unroll 2
    for (int k = 0; k < 2; k++) { /* in each 128-bit lane: elements 0, 1 + elements 2, 3 */
        __m512 lo = _mm512_shuffle_ps(c[2 * k], c[2 * k + 1], _MM_SHUFFLE(1, 0, 1, 0));
        __m512 hi = _mm512_shuffle_ps(c[2 * k], c[2 * k + 1], _MM_SHUFFLE(3, 2, 3, 2));
        d[k] = _mm512_add_ps(lo, hi);
    }
    __m512 lo = _mm512_shuffle_ps(d[0], d[1], _MM_SHUFFLE(2, 0, 2, 0));
    __m512 hi = _mm512_shuffle_ps(d[0], d[1], _MM_SHUFFLE(3, 1, 3, 1));
    /* Lane 4j + i now holds the sum of vector j + 4i: one permute puts sum k in lane k. */
    __m512 sum = _mm512_add_ps(lo, hi);
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    return _mm512_permutexvar_ps(order, sum);
}

RICH_TARGET_V4 static bool moments_avx512(const struct rich_spot *s, uint64_t mask, bool z_sums,
                                          struct rich_moments *mo)
{
    (void)z_sums; /* always: sixteen lanes hold them at no cost */
    /* A sum of ones is exact: the weight sum is the hit count. */
    unsigned nw = (unsigned)__builtin_popcountll(mask);
    if (nw < 3) {
        return false;
    }
    float sw = (float)nw;
    const __m512 one = _mm512_set1_ps(1.0f);
    __m512 ax = _mm512_setzero_ps(), ay = ax;
    for (unsigned q = 0; q < s->n; q += RICH_LANES) {
        __m512 w = _mm512_maskz_mov_ps((__mmask16)(mask >> q), one);
        ax = _mm512_add_ps(ax, _mm512_mul_ps(w, _mm512_load_ps(s->x + q)));
        ay = _mm512_add_ps(ay, _mm512_mul_ps(w, _mm512_load_ps(s->y + q)));
    }
    float xm = tree_v(ax) / sw, ym = tree_v(ay) / sw;
    const __m512 vxm = _mm512_set1_ps(xm), vym = _mm512_set1_ps(ym);
    __m512 m[16];
#pragma GCC unroll 16
    for (int k = 0; k < 16; k++) {
        m[k] = _mm512_setzero_ps();
    }
    for (unsigned q = 0; q < s->n; q += RICH_LANES) {
        __m512 w = _mm512_maskz_mov_ps((__mmask16)(mask >> q), one);
        __m512 u = _mm512_sub_ps(_mm512_load_ps(s->x + q), vxm);
        __m512 v = _mm512_sub_ps(_mm512_load_ps(s->y + q), vym);
        __m512 wu = _mm512_mul_ps(w, u), wv = _mm512_mul_ps(w, v);
        __m512 z = _mm512_add_ps(_mm512_mul_ps(u, u), _mm512_mul_ps(v, v));
        __m512 wz = _mm512_mul_ps(w, z);
        m[0] = _mm512_add_ps(m[0], _mm512_mul_ps(wu, u));
        m[1] = _mm512_add_ps(m[1], _mm512_mul_ps(wv, v));
        m[2] = _mm512_add_ps(m[2], _mm512_mul_ps(wu, v));
        m[3] = _mm512_add_ps(m[3], _mm512_mul_ps(_mm512_mul_ps(wu, u), u));
        m[4] = _mm512_add_ps(m[4], _mm512_mul_ps(_mm512_mul_ps(wv, v), v));
        m[5] = _mm512_add_ps(m[5], _mm512_mul_ps(_mm512_mul_ps(wu, v), v));
        m[6] = _mm512_add_ps(m[6], _mm512_mul_ps(_mm512_mul_ps(wv, u), u));
        m[7] = _mm512_add_ps(m[7], _mm512_mul_ps(wz, z));
        m[8] = _mm512_add_ps(m[8], _mm512_mul_ps(wz, u));
        m[9] = _mm512_add_ps(m[9], _mm512_mul_ps(wz, v));
    }
    float sums[16];
    _mm512_storeu_ps(sums, tree16_v(m));
    rich_store_moments(sw, xm, ym, sums, mo);
    return true;
}

RICH_TARGET_V4 static float residuals_avx512(const struct rich_spot *s, uint64_t mask,
                                             const sdd_rich_circle *c)
{
    _Alignas(64) float res2[SDD_RICH_MAX_HITS];
    const __m512 cx = _mm512_set1_ps(c->cx), cy = _mm512_set1_ps(c->cy);
    const __m512 r = _mm512_set1_ps(c->r);
    for (unsigned q = 0; q < s->n; q += RICH_LANES) {
        __m512 dx = _mm512_sub_ps(_mm512_load_ps(s->x + q), cx);
        __m512 dy = _mm512_sub_ps(_mm512_load_ps(s->y + q), cy);
        __m512 d = _mm512_sqrt_ps(_mm512_add_ps(_mm512_mul_ps(dx, dx), _mm512_mul_ps(dy, dy)));
        __m512 res = _mm512_sub_ps(d, r);
        _mm512_store_ps(res2 + q, _mm512_mul_ps(res, res));
    }
    return rich_sum_masked(res2, mask);
}

RICH_TARGET_V4 static uint64_t concyclic_avx512(const struct rich_spot *s, uint64_t alive, int a,
                                                int b, int c, const float dist[3], float eps)
{
    const __m512 ab = _mm512_set1_ps(dist[0]), ac = _mm512_set1_ps(dist[1]);
    const __m512 bc = _mm512_set1_ps(dist[2]), veps = _mm512_set1_ps(eps);
    const __m512 two = _mm512_set1_ps(2.0f);
    const __m512 axv = _mm512_set1_ps(s->x[a]), ayv = _mm512_set1_ps(s->y[a]);
    const __m512 bxv = _mm512_set1_ps(s->x[b]), byv = _mm512_set1_ps(s->y[b]);
    const __m512 cxv = _mm512_set1_ps(s->x[c]), cyv = _mm512_set1_ps(s->y[c]);
    uint64_t sel = 0;
    for (unsigned q = 0; q < s->n; q += RICH_LANES) {
        __m512 x = _mm512_load_ps(s->x + q), y = _mm512_load_ps(s->y + q);
        __m512 ax = _mm512_sub_ps(axv, x), ay = _mm512_sub_ps(ayv, y);
        __m512 bx = _mm512_sub_ps(bxv, x), by = _mm512_sub_ps(byv, y);
        __m512 cx = _mm512_sub_ps(cxv, x), cy = _mm512_sub_ps(cyv, y);
        __m512 ad = _mm512_sqrt_ps(_mm512_add_ps(_mm512_mul_ps(ax, ax), _mm512_mul_ps(ay, ay)));
        __m512 bd = _mm512_sqrt_ps(_mm512_add_ps(_mm512_mul_ps(bx, bx), _mm512_mul_ps(by, by)));
        __m512 cd = _mm512_sqrt_ps(_mm512_add_ps(_mm512_mul_ps(cx, cx), _mm512_mul_ps(cy, cy)));
        __m512 p1 = _mm512_mul_ps(ab, cd), p2 = _mm512_mul_ps(ac, bd), p3 = _mm512_mul_ps(ad, bc);
        /* p1 > p2 ? p1 : p2, then against p3, as the portable code (no NaN here). */
        __m512 mx = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(p1, p2, _CMP_GT_OQ), p2, p1);
        mx = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(mx, p3, _CMP_GT_OQ), p3, mx);
        __m512 dev = _mm512_abs_ps(
            _mm512_sub_ps(_mm512_mul_ps(two, mx), _mm512_add_ps(_mm512_add_ps(p1, p2), p3)));
        __mmask16 in = _mm512_cmp_ps_mask(dev, _mm512_mul_ps(veps, mx), _CMP_LE_OQ);
        sel |= (uint64_t)in << q;
    }
    return sel & alive;
}

const struct rich_kern rich_kern_avx512 = {on_circle_avx512,  moments_avx512,   residuals_avx512,
                                           concyclic_avx512,  rich_assign_avx2, rich_extremes_avx2,
                                           rich_farthest_avx2};
#else
const struct rich_kern rich_kern_avx512 = {on_circle_portable, moments_portable, residuals_portable,
                                           concyclic_portable, assign_portable,  extremes_portable,
                                           farthest_portable};
#endif
