/* The Hough finder object: options, the choice of implementation, and the output step that
 * turns candidate cells into tracks (one per cell, or one per cluster when merging). */
#include <stdlib.h>
#include <string.h>

#include "sddaq/log.h"
#include "trigger/hough_impl.h"

void sdd_hough_opts_default(sdd_hough_opts *o)
{
    *o = (sdd_hough_opts){
        .shape = SDD_HOUGH_RECT, .impl = SDD_HOUGH_FAST, .merge = false, .cell_scale = 1.0f};
    sdd_hough_geom_default(&o->geom);
}

sdd_err sdd_hough_create(const sdd_hough_opts *opts, sdd_hough **out)
{
    if (opts == NULL || out == NULL ||
        (opts->shape != SDD_HOUGH_RECT && opts->shape != SDD_HOUGH_HEX) ||
        (opts->impl != SDD_HOUGH_FAST && opts->impl != SDD_HOUGH_SEED) ||
        (opts->simd != SDD_HOUGH_SIMD_AUTO && opts->simd != SDD_HOUGH_SIMD_X8 &&
         opts->simd != SDD_HOUGH_SIMD_AVX512) ||
        !(opts->cell_scale > 0.0f && opts->cell_scale <= 1.0f)) {
        return SDD_EINVAL;
    }
    sdd_err err = sdd_hough_geom_check(&opts->geom);
    if (err != SDD_OK) {
        return err;
    }
    bool x16 =
        opts->impl == SDD_HOUGH_FAST && opts->simd != SDD_HOUGH_SIMD_X8 && hough_x16_supported();
    if (opts->impl == SDD_HOUGH_FAST && opts->simd == SDD_HOUGH_SIMD_AVX512 && !x16) {
        SDD_ERROR("trigger", "the AVX-512 Hough finder needs an x86-64-v4 CPU");
        return SDD_ENOTSUP;
    }
    sdd_hough *h = aligned_alloc(64, (sizeof(*h) + 63) & ~(size_t)63);
    if (h == NULL) {
        return SDD_ENOMEM;
    }
    memset(h, 0, sizeof(*h));
    h->opts = *opts;
    h->use_x16 = x16;
    if (opts->impl == SDD_HOUGH_FAST) {
        h->opts.simd = x16 ? SDD_HOUGH_SIMD_AVX512 : SDD_HOUGH_SIMD_X8;
    }
    hough_frame_init(&h->frame, &opts->geom, opts->shape);
    h->frame.cell_scale = opts->cell_scale;
    h->window_blocks = hough_window_blocks(&h->frame);
    for (int i = 0; i < SDD_HOUGH_MAX_DIM; i++) {
        float unused;
        sdd_hough_cell_centre(&opts->geom, opts->shape, i, 0, &h->col_qpt[i], &unused);
        for (int parity = 0; parity < 2; parity++) {
            sdd_hough_cell_centre(&opts->geom, opts->shape, parity, i, &unused,
                                  &h->row_phi[parity][i]);
        }
    }
    if (opts->impl == SDD_HOUGH_SEED) {
        h->seed_map = calloc(SDD_HOUGH_MAX_DIM, sizeof(*h->seed_map));
        if (h->seed_map == NULL) {
            free(h);
            return SDD_ENOMEM;
        }
    }
    *out = h;
    return SDD_OK;
}

void sdd_hough_destroy(sdd_hough *h)
{
    if (h != NULL) {
        free(h->seed_map);
        free(h);
    }
}

bool hough_x16_supported(void)
{
#if defined(SDDAQ_HOUGH_X16)
    /* hough_find_x16.c is built for x86-64-v4: AVX-512 F, BW, CD, DQ, VL over x86-64-v3. */
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx2") &&
           __builtin_cpu_supports("bmi2") && __builtin_cpu_supports("fma");
#else
    return false;
#endif
}

size_t hough_layer_order(const sdd_stub *stubs, size_t n, unsigned nlayers, unsigned pad,
                         uint16_t *order, size_t *group)
{
    /* A counting sort. The counts of layers 0-3 and 4-7 sit 16 bits each in two words (n <=
     * 4096), so the counting loop carries no store-to-load dependency. Layer 7 stands for
     * every layer >= nlayers: counted, never kept. */
    uint64_t low = 0, high = 0;
    /* The stubs are usually cold (just received): ask for all their lines at once. */
    for (size_t b = 0; b < n * sizeof(*stubs); b += 64) {
        __builtin_prefetch((const char *)stubs + b);
    }
    for (size_t s = 0; s < n; s++) {
        unsigned l = stubs[s].layer < nlayers ? stubs[s].layer : 7;
        uint64_t one = 1ull << (16 * (l & 3)), upper = l >> 2;
        low += one * (1 - upper); /* multiplies, not a branch on a random layer */
        high += one * upper;
    }
    size_t next[SDD_HOUGH_MAX_LAYERS], pos = 0;
    for (unsigned l = 0; l < nlayers; l++) {
        size_t count = ((l < 4 ? low : high) >> (16 * (l & 3))) & 0xffff;
        group[l] = next[l] = pos;
        pos += (count + pad - 1) / pad * pad;
    }
    group[nlayers] = pos;
    for (size_t s = 0; s < n; s++) {
        unsigned l = stubs[s].layer;
        if (l < nlayers) {
            order[next[l]++] = (uint16_t)s;
        }
    }
    for (unsigned l = 0; l < nlayers; l++) {
        for (size_t p = next[l]; p < group[l + 1]; p++) {
            order[p] = HOUGH_ORDER_PAD;
        }
    }
    return pos;
}

const sdd_hough_opts *sdd_hough_get_opts(const sdd_hough *h)
{
    return &h->opts;
}

int sdd_hough_find(sdd_hough *h, const sdd_stub *stubs, size_t n, sdd_hough_track *out,
                   size_t max_out)
{
    if (n > SDD_HOUGH_MAX_STUBS) {
        return SDD_ETOOBIG;
    }
    h->in = stubs;
    if (h->opts.impl == SDD_HOUGH_SEED) {
        hough_find_seed(h, stubs, n);
    } else if (h->use_x16) {
        hough_find_x16(h, stubs, n);
    } else {
        hough_find_fast(h, stubs, n);
    }
    int found = (int)hough_emit(h, out, max_out);
    h->in = NULL;
    return found;
}
