/* The fits and per-hit kernels of the RICH ring finder, in the one source that the CPU build
 * (C) and the GPU build (CUDA, src/trigger/cuda/) share: the algebraic circle fits (REFERENCE
 * §5.7: Crawford's non-iterative fit, NIM 211 (1983) 223, and Taubin's fit in Chernov's Newton
 * form, both on centred data), the portable per-hit kernels (hits within a window of a circle,
 * moments, residuals) and the refinement both ring finders share (seed hits -> fit -> hits
 * within the window -> fit again).
 *
 * Kernels: sums are kept in 16 lanes (lane i takes hits i, i+16, i+32, i+48) and then added in
 * a fixed tree (lanes i and i+8, i and i+4, ...), so the AVX-512 build in rich_kern.c gives the
 * same bits. The fits run in double: the Taubin polynomial has terms of order R^6 (about 1e13
 * mm^6), where float would lose the centre. */
#ifndef SDDAQ_TRIGGER_RICH_FIT_CORE_H
#define SDDAQ_TRIGGER_RICH_FIT_CORE_H

#include <math.h>

#include "trigger/rich_dev.h"
#include "trigger/rich_impl.h"

#define RICH_LANES        16
#define RICH_REFINE_STEPS 4 /* window scales 2.5, 1.5, 1, 1 */

/* Lane sums of 16 -> 1 in the fixed tree. */
RICH_DEV float rich_lane_tree(const float *a)
{
    float b[8], c[4], d[2];
    for (int i = 0; i < 8; i++) {
        b[i] = a[i] + a[i + 8];
    }
    for (int i = 0; i < 4; i++) {
        c[i] = b[i] + b[i + 4];
    }
    for (int i = 0; i < 2; i++) {
        d[i] = c[i] + c[i + 2];
    }
    return d[0] + d[1];
}

#define NMOM 10 /* uu vv uv uuu vvv uvv vuu zz uz vz */

/* The lane sums into moments, shared by both builds. */
RICH_DEV void rich_store_moments(float sw, float xm, float ym, const float *sums,
                                 struct rich_moments *m)
{
    m->n = sw;
    m->xm = xm;
    m->ym = ym;
    m->uu = sums[0];
    m->vv = sums[1];
    m->uv = sums[2];
    m->uuu = sums[3];
    m->vvv = sums[4];
    m->uvv = sums[5];
    m->vuu = sums[6];
    m->zz = sums[7];
    m->uz = sums[8];
    m->vz = sums[9];
}

RICH_DEV uint64_t on_circle_portable(const struct rich_spot *s, uint64_t alive,
                                     const sdd_rich_circle *c, float window)
{
    /* |d - R| < w  <=>  (R - w)^2 < d^2 < (R + w)^2 for R > w: no square root per hit. */
    float lo = c->r > window ? (c->r - window) * (c->r - window) : 0.0f;
    float hi = (c->r + window) * (c->r + window);
    uint8_t in[SDD_RICH_MAX_HITS];
    unsigned n = (s->n + RICH_LANES - 1) & ~(unsigned)(RICH_LANES - 1);
    for (unsigned i = 0; i < n; i++) {
        float dx = s->x[i] - c->cx, dy = s->y[i] - c->cy;
        float d2 = dx * dx + dy * dy;
        in[i] = d2 > lo && d2 < hi;
    }
    uint64_t sel = 0;
    for (unsigned i = 0; i < n; i++) {
        sel |= (uint64_t)in[i] << i;
    }
    return sel & alive;
}

RICH_DEV bool moments_portable(const struct rich_spot *s, uint64_t mask, bool z_sums,
                               struct rich_moments *mo)
{
    (void)z_sums; /* always: the GPU build calls this one too */
    unsigned n = (s->n + RICH_LANES - 1) & ~(unsigned)(RICH_LANES - 1);
    float w[SDD_RICH_MAX_HITS];
    for (unsigned i = 0; i < n; i++) {
        w[i] = (float)((mask >> i) & 1);
    }
    float a[3][RICH_LANES] = {{0}};
    for (unsigned i = 0; i < n; i++) {
        a[0][i % RICH_LANES] += w[i];
        a[1][i % RICH_LANES] += w[i] * s->x[i];
        a[2][i % RICH_LANES] += w[i] * s->y[i];
    }
    float sw = rich_lane_tree(a[0]);
    if (sw < 3.0f) {
        return false;
    }
    float xm = rich_lane_tree(a[1]) / sw, ym = rich_lane_tree(a[2]) / sw;
    float m[NMOM][RICH_LANES] = {{0}};
    for (unsigned i = 0; i < n; i++) {
        unsigned l = i % RICH_LANES;
        float u = s->x[i] - xm, v = s->y[i] - ym;
        float wu = w[i] * u, wv = w[i] * v;
        float z = u * u + v * v, wz = w[i] * z;
        m[0][l] += wu * u;
        m[1][l] += wv * v;
        m[2][l] += wu * v;
        m[3][l] += wu * u * u;
        m[4][l] += wv * v * v;
        m[5][l] += wu * v * v;
        m[6][l] += wv * u * u;
        m[7][l] += wz * z;
        m[8][l] += wz * u;
        m[9][l] += wz * v;
    }
    float sums[NMOM];
    for (int k = 0; k < NMOM; k++) {
        sums[k] = rich_lane_tree(m[k]);
    }
    rich_store_moments(sw, xm, ym, sums, mo);
    return true;
}

/* The squares of every hit's residual first, then their sum over mask in index order. */
RICH_DEV float rich_sum_masked(const float *res2, uint64_t mask)
{
    float sum = 0.0f;
    for (uint64_t k = mask; k != 0; k &= k - 1) {
        sum += res2[rich_ctz64(k)];
    }
    return sum;
}

RICH_DEV float residuals_portable(const struct rich_spot *s, uint64_t mask,
                                  const sdd_rich_circle *c)
{
    float res2[SDD_RICH_MAX_HITS];
    unsigned n = (s->n + RICH_LANES - 1) & ~(unsigned)(RICH_LANES - 1);
    for (unsigned i = 0; i < n; i++) {
        float dx = s->x[i] - c->cx, dy = s->y[i] - c->cy;
        float res = sqrtf(dx * dx + dy * dy) - c->r;
        res2[i] = res * res;
    }
    return rich_sum_masked(res2, mask);
}

/* Hits go to the ring they lie closest to (|d - R| < window); ties to the earlier ring. */
RICH_DEV void assign_portable(const struct rich_spot *s, uint64_t all, const struct rich_cand *r,
                              unsigned k, float window, uint64_t *own)
{
    for (unsigned j = 0; j < k; j++) {
        own[j] = 0;
    }
    for (uint64_t m = all; m != 0; m &= m - 1) {
        int i = rich_ctz64(m);
        float best = window;
        unsigned bj = k;
        for (unsigned j = 0; j < k; j++) {
            float dx = s->x[i] - r[j].c.cx, dy = s->y[i] - r[j].c.cy;
            float res = fabsf(sqrtf(dx * dx + dy * dy) - r[j].c.r);
            if (res < best) {
                best = res;
                bj = j;
            }
        }
        if (bj < k) {
            own[bj] |= 1ull << i;
        }
    }
}

/* Points whose scatter matrix is this close to singular (relative) are collinear for the
 * fits: no circle is defined, and one would come out with a radius of kilometres. */
#define COLLINEAR_REL 1e-7

RICH_DEV bool rich_degenerate(const struct rich_moments *m)
{
    double tr = m->uu + m->vv;
    double det = m->uu * m->vv - m->uv * m->uv;
    return !(tr > 0.0) || !(det > COLLINEAR_REL * tr * tr);
}

RICH_DEV sdd_err rich_circle_from(const struct rich_moments *m, double uc, double vc, double r2,
                                  sdd_rich_circle *c)
{
    if (!isfinite(uc) || !isfinite(vc) || !(r2 > 0.0) || !isfinite(r2)) {
        return SDD_EINVAL;
    }
    c->cx = (float)(m->xm + uc);
    c->cy = (float)(m->ym + vc);
    c->r = (float)sqrt(r2);
    return SDD_OK;
}

/* The fits from their moments (SDD_EINVAL for degenerate points). */
RICH_DEV sdd_err rich_solve_crawford(const struct rich_moments *m, sdd_rich_circle *c)
{
    if (rich_degenerate(m)) {
        return SDD_EINVAL;
    }
    double b1 = 0.5 * (m->uuu + m->uvv), b2 = 0.5 * (m->vvv + m->vuu);
    double det = m->uu * m->vv - m->uv * m->uv;
    double uc = (b1 * m->vv - b2 * m->uv) / det;
    double vc = (m->uu * b2 - m->uv * b1) / det;
    return rich_circle_from(m, uc, vc, uc * uc + vc * vc + (m->uu + m->vv) / m->n, c);
}

RICH_DEV sdd_err rich_solve_taubin(const struct rich_moments *mo, sdd_rich_circle *c)
{
    if (rich_degenerate(mo)) {
        return SDD_EINVAL;
    }
    double dn = mo->n;
    double mxx = mo->uu / dn, myy = mo->vv / dn, mxy = mo->uv / dn;
    double mxz = mo->uz / dn, myz = mo->vz / dn, mzz = mo->zz / dn;
    double mz = mxx + myy, cov = mxx * myy - mxy * mxy;
    double a3 = 4.0 * mz;
    double a2 = -3.0 * mz * mz - mzz;
    double a1 = mzz * mz + 4.0 * cov * mz - mxz * mxz - myz * myz - mz * mz * mz;
    double a0 =
        mxz * mxz * myy + myz * myz * mxx - mzz * cov - 2.0 * mxz * myz * mxy + mz * mz * cov;
    /* Newton from 0 towards the smallest root of the characteristic polynomial; it decreases
     * monotonically there, so a step that grows |P| or goes negative means "stay at 0". */
    double xr = 0.0, yv = 1e300;
    for (int it = 0; it < 20; it++) {
        double yold = yv;
        yv = a0 + xr * (a1 + xr * (a2 + xr * a3));
        if (fabs(yv) > fabs(yold)) {
            xr = 0.0;
            break;
        }
        double dy = a1 + xr * (2.0 * a2 + xr * 3.0 * a3);
        if (dy == 0.0) {
            break;
        }
        double xold = xr;
        xr = xold - yv / dy;
        if (!isfinite(xr) || xr < 0.0) {
            xr = 0.0;
            break;
        }
        if (fabs(xr - xold) <= 1e-10 * fabs(xr)) {
            break;
        }
    }
    double det = xr * xr - xr * mz + cov;
    if (!(fabs(det) > 0.0)) {
        return SDD_EINVAL;
    }
    double uc = (mxz * (myy - xr) - myz * mxy) / (2.0 * det);
    double vc = (myz * (mxx - xr) - mxz * mxy) / (2.0 * det);
    return rich_circle_from(mo, uc, vc, uc * uc + vc * vc + mz, c);
}

/* The finder's kernels: its table on the CPU (portable or AVX-512); on the GPU, those of
 * src/trigger/cuda/rich_gpu_kernel.cuh (the portable ones, or the same operations shared out
 * over the lanes of a warp). */
#ifdef __CUDACC__
static __device__ bool rich_gpu_moments(const sdd_rich_finder *f, const struct rich_spot *s,
                                        uint64_t mask, struct rich_moments *m);
static __device__ float rich_gpu_residuals(const sdd_rich_finder *f, const struct rich_spot *s,
                                           uint64_t mask, const sdd_rich_circle *c);
static __device__ uint64_t rich_gpu_on_circle(const sdd_rich_finder *f, const struct rich_spot *s,
                                              uint64_t alive, const sdd_rich_circle *c,
                                              float window);
#endif

RICH_DEV bool rich_moments_of(const sdd_rich_finder *f, const struct rich_spot *s, uint64_t mask,
                              struct rich_moments *m)
{
#ifdef __CUDA_ARCH__
    return rich_gpu_moments(f, s, mask, m);
#else
    return f->kern->moments(s, mask, f->opts.fit == SDD_RICH_FIT_TAUBIN, m);
#endif
}

RICH_DEV float rich_residuals_of(const sdd_rich_finder *f, const struct rich_spot *s, uint64_t mask,
                                 const sdd_rich_circle *c)
{
#ifdef __CUDA_ARCH__
    return rich_gpu_residuals(f, s, mask, c);
#else
    return f->kern->residuals(s, mask, c);
#endif
}

RICH_DEV void rich_assign_of(const sdd_rich_finder *f, const struct rich_spot *s, uint64_t all,
                             const struct rich_cand *r, unsigned k, uint64_t *own)
{
#ifdef __CUDA_ARCH__
    assign_portable(s, all, r, k, f->opts.window, own);
#else
    f->kern->assign(s, all, r, k, f->opts.window, own);
#endif
}

RICH_DEV uint64_t rich_on_circle_of(const sdd_rich_finder *f, const struct rich_spot *s,
                                    uint64_t alive, const sdd_rich_circle *c, float window)
{
#ifdef __CUDA_ARCH__
    return rich_gpu_on_circle(f, s, alive, c, window);
#else
    return f->kern->on_circle(s, alive, c, window);
#endif
}

/* Crawford's fit of the hits of mask (no Newton steps: the refinement's steps); the moments
 * stay in *m for the final fit. */
RICH_DEV bool rich_fit_mask(const sdd_rich_finder *f, const struct rich_spot *s, uint64_t mask,
                            struct rich_moments *m, sdd_rich_circle *c)
{
    return rich_moments_of(f, s, mask, m) && rich_solve_crawford(m, c) == SDD_OK;
}

/* The chosen fit of the hits of mask (moments m, Crawford's circle c) and the ring cuts; a
 * ring of fewer than need hits (>= min_hits) is refused before the fit. */
RICH_DEV bool rich_accept(const sdd_rich_finder *f, const struct rich_spot *s, uint64_t mask,
                          unsigned need, const struct rich_moments *m, sdd_rich_circle c,
                          struct rich_cand *out)
{
    unsigned n = rich_popcount64(mask);
    if (n < need || n < f->opts.min_hits ||
        (f->opts.fit == SDD_RICH_FIT_TAUBIN && rich_solve_taubin(m, &c) != SDD_OK)) {
        return false;
    }
    if (!(c.r >= RICH_R_MIN && c.r <= f->r_max)) {
        return false;
    }
    float rms = sqrtf(rich_residuals_of(f, s, mask, &c) / (float)n);
    if (!(rms <= f->opts.max_rms)) {
        return false;
    }
    out->c = c;
    out->hits = mask;
    out->nhits = n;
    out->rms = rms;
    return true;
}

/* Fit the hits of seed, then take every alive hit within a closing window (2.5, 1.5, 1 x the
 * window) of the circle and fit again, until the hits are stable. True when the result passes
 * the ring cuts and holds at least need hits (0: min_hits is enough); *out holds it then.
 * It gives up as soon as a window step holds fewer than need hits (a shortcut for candidates
 * that must beat a ring: they seldom gain hits as the window closes in). */
RICH_DEV bool rich_refine(const sdd_rich_finder *f, const struct rich_spot *s, uint64_t alive,
                          uint64_t seed, unsigned need, struct rich_cand *out)
{
    /* The seed comes from a coarse centre (up to 23 mm off) or three hits, so the first fit
     * may be off by more than the final window: the window closes in over the steps, each
     * with Crawford's fit (no Newton steps); the chosen fit gives the final circle. */
    uint64_t mask = seed;
    sdd_rich_circle c;
    struct rich_moments m; /* always those of mask */
    if (!rich_fit_mask(f, s, mask, &m, &c)) {
        return false;
    }
    for (int it = 0; it < RICH_REFINE_STEPS; it++) {
        float scale = it == 0 ? 2.5f : it == 1 ? 1.5f : 1.0f;
        uint64_t sel = rich_on_circle_of(f, s, alive, &c, f->opts.window * scale);
        if (rich_popcount64(sel) < need) {
            return false; /* a candidate that must beat a ring of need hits seldom recovers */
        }
        if (sel == mask) {
            if (scale == 1.0f) {
                break;
            }
            continue;
        }
        mask = sel;
        if (!rich_fit_mask(f, s, mask, &m, &c)) {
            return false;
        }
    }
    return rich_accept(f, s, mask, need, &m, c, out);
}

/* The chosen fit of the hits of mask and the ring cuts, no window steps (hits already
 * assigned). True when the result passes the cuts; *out holds it then. */
RICH_DEV bool rich_fit_hits(const sdd_rich_finder *f, const struct rich_spot *s, uint64_t mask,
                            struct rich_cand *out)
{
    sdd_rich_circle c;
    struct rich_moments m;
    return rich_fit_mask(f, s, mask, &m, &c) && rich_accept(f, s, mask, 0, &m, c, out);
}

/* The finder of one spot: rings are appended to out (room for max); returns the count. */
typedef unsigned (*rich_spot_fn)(sdd_rich_finder *f, const struct rich_spot *s,
                                 struct rich_cand *out, unsigned max);

#if SDD_RICH_SPOTS != 2
#error "rich_find_event() splits the hits into two spots"
#endif
/* sdd_rich_find() past its argument check (n <= SDD_RICH_MAX_HITS): the hits split by spot,
 * each spot's rings from find_spot, written as rings. */
RICH_DEV_INLINE int rich_find_event(sdd_rich_finder *f, const uint16_t *hits, size_t n,
                                    sdd_rich_ring *out, size_t max_out, rich_spot_fn find_spot)
{
    const sdd_rich_pmtab *t = f->tab;
    /* The counts stay in a register, spot 0's in the low half, spot 1's in the high: through
     * s->n, each hit would wait for the previous one's store. No branch on the spot either
     * (the hits of both come mixed). */
    uint32_t counts = 0;
    const uintptr_t s0 = (uintptr_t)&f->spot[0], s1 = (uintptr_t)&f->spot[1];
    for (size_t i = 0; i < n; i++) {
        unsigned ch = SDD_RICH_HIT_CHANNEL(hits[i]);
        if (t->board[ch] < 0) {
            continue;
        }
        unsigned sp = ch / SDD_RICH_SPOT_PMS, shift = 16 * sp;
        /* the spot by a mask, not a multiply (GCC redid that for every field) */
        uintptr_t pick = (uintptr_t)0 - sp;
        struct rich_spot *s = (struct rich_spot *)(s0 ^ ((s0 ^ s1) & pick));
        unsigned k = (counts >> shift) & 0xFFFFu;
        counts += 1u << shift;
        s->x[k] = t->x[ch];
        s->y[k] = t->y[ch];
        s->pm[k] = (uint16_t)(ch % SDD_RICH_SPOT_PMS);
        s->src[k] = (uint8_t)i;
    }
    f->spot[0].n = counts & 0xFFFFu;
    f->spot[1].n = counts >> 16;
    size_t written = 0;
    for (unsigned sp = 0; sp < SDD_RICH_SPOTS; sp++) {
        const struct rich_spot *s = &f->spot[sp];
        if (s->n < f->opts.min_hits) {
            continue; /* noise: too few hits for a ring */
        }
        struct rich_cand cand[8];
        unsigned nc = find_spot(f, s, cand, f->opts.max_rings);
        for (unsigned k = 0; k < nc && written < max_out; k++) {
            /* The hits in a register first: or-ing them into the ring waited on its stores. */
            uint64_t owned = 0;
            for (uint64_t m = cand[k].hits; m != 0; m &= m - 1) {
                owned |= 1ull << s->src[rich_ctz64(m)];
            }
            sdd_rich_ring *r = &out[written++];
            /* Every byte, the tail padding too: a GPU's result block holds the last batch's
             * bytes there, and rings are compared whole. */
            memset(r, 0, sizeof(*r));
            r->cx = cand[k].c.cx;
            r->cy = cand[k].c.cy;
            r->r = cand[k].c.r;
            r->quality = cand[k].rms;
            r->hits = owned;
            r->spot = (uint8_t)sp;
            r->nhits = (uint8_t)cand[k].nhits;
        }
    }
    return (int)written;
}

#endif
