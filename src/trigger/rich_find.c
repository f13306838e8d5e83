/* RICH ring finder object: splits an event's hits by spot through the PM table, runs the chosen
 * method on each spot and turns its candidates into rings; also the fit refinement both methods
 * share (seed hits -> fit -> hits within the window -> fit again). */
#include <math.h>
#include <stdlib.h>

#include "sddaq/log.h"
#include "trigger/rich_fit_core.h"

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

bool rich_avx2_supported(void)
{
#ifdef RICH_HAVE_V3
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("bmi") &&
           __builtin_cpu_supports("bmi2") && __builtin_cpu_supports("popcnt") &&
           __builtin_cpu_supports("lzcnt");
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
    } else if (o->simd > SDD_RICH_SIMD_AVX2) {
        why = "unknown simd choice";
    }
    if (why != NULL) {
        SDD_ERROR(RICH_LOG, "finder: %s", why);
        return SDD_EINVAL;
    }
    bool avx = rich_avx512_supported(), avx2 = rich_avx2_supported();
    if ((o->simd == SDD_RICH_SIMD_AVX512 && !avx) || (o->simd == SDD_RICH_SIMD_AVX2 && !avx2)) {
        SDD_ERROR(RICH_LOG, "finder: %s asked for, but this CPU or build lacks x86-64-v%d",
                  o->simd == SDD_RICH_SIMD_AVX2 ? "avx2" : "avx512",
                  o->simd == SDD_RICH_SIMD_AVX2 ? 3 : 4);
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
    /* auto: the widest vectors this CPU has. */
    f->avx512 = (o->simd == SDD_RICH_SIMD_AUTO || o->simd == SDD_RICH_SIMD_AVX512) && avx;
    f->avx2 =
        !f->avx512 && (o->simd == SDD_RICH_SIMD_AUTO || o->simd == SDD_RICH_SIMD_AVX2) && avx2;
    f->opts.simd = f->avx512 ? SDD_RICH_SIMD_AVX512
                   : f->avx2 ? SDD_RICH_SIMD_AVX2
                             : SDD_RICH_SIMD_PORTABLE;
    f->kern = &rich_kern_portable;
    if (f->avx512) {
        f->kern = &rich_kern_avx512;
    }
#ifdef RICH_HAVE_V3
    if (f->avx2) {
        f->kern = &rich_kern_avx2;
    }
#endif
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

int sdd_rich_find(sdd_rich_finder *f, const uint16_t *hits, size_t n, sdd_rich_ring *out,
                  size_t max_out)
{
    if (n > SDD_RICH_MAX_HITS) {
        return SDD_ETOOBIG;
    }
    return rich_find_event(f, hits, n, out, max_out,
                           f->opts.method == SDD_RICH_HIST ? rich_hist_spot : rich_ptolemy_spot);
}
