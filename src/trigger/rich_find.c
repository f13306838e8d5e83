/* RICH ring finder object: splits an event's hits by spot through the PM table, runs the chosen
 * method on each spot and turns its candidates into rings; also the fit refinement both methods
 * share (seed hits -> fit -> hits within the window -> fit again). */
#include <math.h>
#include <stdlib.h>

#include "sddaq/log.h"
#include "trigger/rich_impl.h"

void sdd_rich_find_opts_default(sdd_rich_find_opts *o)
{
    memset(o, 0, sizeof(*o));
    sdd_rich_geom_default(&o->geom);
    o->method = SDD_RICH_HIST;
    o->fit = SDD_RICH_FIT_CRAWFORD;
    o->simd = SDD_RICH_SIMD_AUTO;
    o->min_hits = 6;
    o->threshold = 5;
    o->max_rings = 3;
    o->window = 13.0f;
    o->claim = 7.0f;
    o->max_rms = 8.0f;
    o->ptolemy_eps = 0.008f;
    o->multi_ring = true;
}

bool rich_avx512_supported(void)
{
#ifdef RICH_HAVE_V4
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2") &&
           __builtin_cpu_supports("popcnt") && __builtin_cpu_supports("lzcnt");
#else
    return false;
#endif
}

sdd_err sdd_rich_finder_create(const sdd_rich_find_opts *o, sdd_rich_finder **out)
{
    if (o == NULL || out == NULL) {
        return SDD_EINVAL;
    }
    const char *why = NULL;
    if (o->method != SDD_RICH_HIST && o->method != SDD_RICH_PTOLEMY) {
        why = "unknown method";
    } else if (o->fit != SDD_RICH_FIT_TAUBIN && o->fit != SDD_RICH_FIT_CRAWFORD) {
        why = "unknown fit";
    } else if (o->min_hits < 3 || o->min_hits > SDD_RICH_MAX_HITS) {
        why = "min_hits must lie in [3, 64]";
    } else if (o->threshold < 3 || o->max_rings == 0 || o->max_rings > 8) {
        why = "threshold must be >= 3 and max_rings in [1, 8]";
    } else if (!(o->window > 0.0f && o->window < 100.0f) || !(o->max_rms > 0.0f) ||
               !(o->ptolemy_eps > 0.0f && o->ptolemy_eps < 1.0f)) {
        why = "window, max_rms or ptolemy_eps out of range";
    } else if (!(o->claim >= 0.0f && o->claim <= o->window)) {
        why = "claim must lie in [0, window]";
    } else if (o->simd > SDD_RICH_SIMD_AVX512) {
        why = "unknown simd choice";
    }
    if (why != NULL) {
        SDD_ERROR(RICH_LOG, "finder: %s", why);
        return SDD_EINVAL;
    }
    bool avx = rich_avx512_supported();
    if (o->simd == SDD_RICH_SIMD_AVX512 && !avx) {
        SDD_ERROR(RICH_LOG, "finder: avx512 asked for, but this CPU or build lacks x86-64-v4");
        return SDD_ENOTSUP;
    }
    sdd_rich_finder *f = aligned_alloc(64, (sizeof(*f) + 63) & ~(size_t)63);
    if (f == NULL) {
        return SDD_ENOMEM;
    }
    memset(f, 0, sizeof(*f));
    sdd_err err = sdd_rich_pmtab_create(&o->geom, &f->tab);
    if (err != SDD_OK) {
        free(f);
        return err;
    }
    f->pm_bins = aligned_alloc(64, (size_t)f->tab->npm * RICH_CENTRES);
    if (f->pm_bins == NULL) {
        sdd_rich_pmtab_destroy(f->tab);
        free(f);
        return SDD_ENOMEM;
    }
    rich_hist_table(f->pm_bins, f->tab->x, f->tab->y, f->tab->npm);
    f->opts = *o;
    /* No particle gives a ring larger than beta = 1 does: a bigger circle is hits of several
     * rings that happen to fit one. */
    f->r_max = sdd_rich_ring_radius(&o->geom, 0.0f, 1.0f) + o->window;
    f->avx512 = o->simd != SDD_RICH_SIMD_PORTABLE && avx;
    f->opts.simd = f->avx512 ? SDD_RICH_SIMD_AVX512 : SDD_RICH_SIMD_PORTABLE;
    f->kern = f->avx512 ? &rich_kern_avx512 : &rich_kern_portable;
    *out = f;
    return SDD_OK;
}

void sdd_rich_finder_destroy(sdd_rich_finder *f)
{
    if (f != NULL) {
        sdd_rich_pmtab_destroy(f->tab);
        free(f->pm_bins);
        free(f);
    }
}

const sdd_rich_find_opts *sdd_rich_finder_opts(const sdd_rich_finder *f)
{
    return &f->opts;
}

const sdd_rich_pmtab *sdd_rich_finder_pmtab(const sdd_rich_finder *f)
{
    return f->tab;
}

/* Crawford's fit of the hits of mask (no Newton steps: the refinement's steps); the moments
 * stay in *m for the final fit. */
static bool fit_mask(const sdd_rich_finder *f, const struct rich_spot *s, uint64_t mask,
                     struct rich_moments *m, sdd_rich_circle *c)
{
    return f->kern->moments(s, mask, m) && rich_solve_crawford(m, c) == SDD_OK;
}

/* The chosen fit of the hits of mask (moments m, Crawford's circle c) and the ring cuts; a
 * ring of fewer than need hits (>= min_hits) is refused before the fit. */
static bool accept(const sdd_rich_finder *f, const struct rich_spot *s, uint64_t mask,
                   unsigned need, const struct rich_moments *m, sdd_rich_circle c,
                   struct rich_cand *out)
{
    unsigned n = (unsigned)__builtin_popcountll(mask);
    if (n < need || n < f->opts.min_hits ||
        (f->opts.fit == SDD_RICH_FIT_TAUBIN && rich_solve_taubin(m, &c) != SDD_OK)) {
        return false;
    }
    if (!(c.r >= RICH_R_MIN && c.r <= f->r_max)) {
        return false;
    }
    float rms = sqrtf(f->kern->residuals(s, mask, &c) / (float)n);
    if (!(rms <= f->opts.max_rms)) {
        return false;
    }
    out->c = c;
    out->hits = mask;
    out->nhits = n;
    out->rms = rms;
    return true;
}

bool rich_refine(const sdd_rich_finder *f, const struct rich_spot *s, uint64_t alive, uint64_t seed,
                 unsigned need, struct rich_cand *out)
{
    /* The seed comes from a coarse centre (up to 23 mm off) or three hits, so the first fit
     * may be off by more than the final window: the window closes in over the steps, each
     * with Crawford's fit (no Newton steps); the chosen fit gives the final circle. */
    static const float SCALE[] = {2.5f, 1.5f, 1.0f, 1.0f};
    uint64_t mask = seed;
    sdd_rich_circle c;
    struct rich_moments m; /* always those of mask */
    if (!fit_mask(f, s, mask, &m, &c)) {
        return false;
    }
    for (size_t it = 0; it < sizeof(SCALE) / sizeof(SCALE[0]); it++) {
        uint64_t sel = f->kern->on_circle(s, alive, &c, f->opts.window * SCALE[it]);
        if ((unsigned)__builtin_popcountll(sel) < need) {
            return false; /* a candidate that must beat a ring of need hits seldom recovers */
        }
        if (sel == mask) {
            if (SCALE[it] == 1.0f) {
                break;
            }
            continue;
        }
        mask = sel;
        if (!fit_mask(f, s, mask, &m, &c)) {
            return false;
        }
    }
    return accept(f, s, mask, need, &m, c, out);
}

bool rich_fit_hits(const sdd_rich_finder *f, const struct rich_spot *s, uint64_t mask,
                   struct rich_cand *out)
{
    sdd_rich_circle c;
    struct rich_moments m;
    return fit_mask(f, s, mask, &m, &c) && accept(f, s, mask, 0, &m, c, out);
}

int sdd_rich_find(sdd_rich_finder *f, const uint16_t *hits, size_t n, sdd_rich_ring *out,
                  size_t max_out)
{
    if (n > SDD_RICH_MAX_HITS) {
        return SDD_ETOOBIG;
    }
    const sdd_rich_pmtab *t = f->tab;
    /* The counts stay in registers: through s->n, each hit would wait for the previous
     * one's store. */
    unsigned n0 = 0, n1 = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned ch = SDD_RICH_HIT_CHANNEL(hits[i]);
        if (t->board[ch] < 0) {
            continue;
        }
        unsigned sp = ch / SDD_RICH_SPOT_PMS;
        struct rich_spot *s = &f->spot[sp];
        unsigned k = sp != 0 ? n1 : n0;
        n0 += sp == 0;
        n1 += sp != 0;
        s->x[k] = t->x[ch];
        s->y[k] = t->y[ch];
        s->pm[k] = (uint16_t)(ch % SDD_RICH_SPOT_PMS);
        s->src[k] = (uint8_t)i;
    }
    f->spot[0].n = n0;
    f->spot[1].n = n1;
    size_t written = 0;
    for (unsigned sp = 0; sp < SDD_RICH_SPOTS; sp++) {
        const struct rich_spot *s = &f->spot[sp];
        if (s->n < f->opts.min_hits) {
            continue; /* noise: too few hits for a ring */
        }
        struct rich_cand cand[8];
        unsigned nc = f->opts.method == SDD_RICH_HIST
                          ? rich_hist_spot(f, s, cand, f->opts.max_rings)
                          : rich_ptolemy_spot(f, s, cand, f->opts.max_rings);
        for (unsigned k = 0; k < nc && written < max_out; k++) {
            sdd_rich_ring *r = &out[written++];
            r->cx = cand[k].c.cx;
            r->cy = cand[k].c.cy;
            r->r = cand[k].c.r;
            r->quality = cand[k].rms;
            r->spot = (uint8_t)sp;
            r->nhits = (uint8_t)cand[k].nhits;
            r->flags = 0;
            r->pad = 0;
            r->hits = 0;
            for (uint64_t m = cand[k].hits; m != 0; m &= m - 1) {
                r->hits |= 1ull << s->src[__builtin_ctzll(m)];
            }
        }
    }
    return (int)written;
}
