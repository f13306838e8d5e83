/* The fast Hough finder, AVX-512 path: the same cells and output as hough_find_fast.c, with
 * the work turned around. Stubs are grouped by layer, each group padded to whole blocks of 16,
 * and the map is filled column by column for 16 stubs at a time; each column's row masks are
 * kept in that order. A layer's plane is then an OR over its blocks, and a candidate cell's
 * stub list is one test and one compress per block: no walk over bits, no unpredictable
 * branches. Built with -march=x86-64-v4 (CMake sets SDDAQ_HOUGH_X16) and called only when
 * hough_x16_supported() says the CPU can run it. */
#include "trigger/hough_impl.h"

#if defined(SDDAQ_HOUGH_X16) && defined(__AVX512F__) && defined(__AVX512BW__) && \
    defined(__AVX512VL__) && defined(__AVX512DQ__)

#include <immintrin.h>
#include <stddef.h>
#include <string.h>

#define HV_LANES HOUGH_X16_LANES
#include "trigger/hough_lines_vec.h"

#define LANES HOUGH_X16_LANES

/* One column's row masks for 16 lines: bits ceil(lo) .. floor(hi) inside the map, in columns
 * first .. last only; lo carries + (1 - 2^-16) and hi + 1, so the shifts give ceil(lo) and
 * floor(hi) + 1. The same cells as hough_band(): 2^e - 2^j0 with e clamped to [j0, nrows];
 * vpsllvd gives 0 for shifts of 32 and more, which the wrap-around of 0 - 2^j0 needs. */
static inline __attribute__((always_inline)) __m512i band(__m512i lo, __m512i hi, __m512i first,
                                                          __m512i last, __m512i col, __m512i nrows)
{
    const __m512i one = _mm512_set1_epi32(1);
    __m512i j0 = _mm512_max_epi32(_mm512_srai_epi32(lo, 16), _mm512_setzero_si512());
    __m512i e = _mm512_min_epi32(_mm512_srai_epi32(hi, 16), nrows);
    e = _mm512_max_epi32(e, j0);
    __mmask16 in = _mm512_mask_cmple_epi32_mask(_mm512_cmple_epi32_mask(first, col), col, last);
    return _mm512_maskz_sub_epi32(in, _mm512_sllv_epi32(one, e), _mm512_sllv_epi32(one, j0));
}

/* Every column of one block of 16 lines; odd hex columns sit half a row higher. */
static inline __attribute__((always_inline)) void block_columns(sdd_hough_shape shape,
                                                                const struct hough_frame *f,
                                                                const struct hv_lines *l,
                                                                uint32_t *rows, unsigned stride)
{
    __m512i slope = (__m512i)l->slope, first = (__m512i)l->first, last = (__m512i)l->last;
    __m512i lo = _mm512_add_epi32((__m512i)l->lo, _mm512_set1_epi32(HOUGH_FX_ONE - 1));
    __m512i hi = _mm512_add_epi32((__m512i)l->hi, _mm512_set1_epi32(HOUGH_FX_ONE));
    const __m512i nrows = _mm512_set1_epi32(f->nrows);
    const __m512i odd = _mm512_set1_epi32(shape == SDD_HOUGH_HEX ? HOUGH_FX_HALF : 0);
    __m512i col = _mm512_setzero_si512();
    const __m512i one = _mm512_set1_epi32(1);
    for (int c = 0; c < f->ncols; c++) {
        __m512i lo_c = lo, hi_c = hi;
        if (c & 1) {
            lo_c = _mm512_sub_epi32(lo_c, odd);
            hi_c = _mm512_sub_epi32(hi_c, odd);
        }
        _mm512_store_si512(rows + (size_t)c * stride, band(lo_c, hi_c, first, last, col, nrows));
        lo = _mm512_add_epi32(lo, slope);
        hi = _mm512_add_epi32(hi, slope);
        col = _mm512_add_epi32(col, one);
    }
}

/* Pass 1: lines and every column's row masks, block by block. The stubs' fields are
 * gathered straight from the caller's array; padding lanes are dead. */
__attribute__((noinline)) static void fill_rows(sdd_hough *h, const sdd_stub *stubs)
{
    _Static_assert(sizeof(sdd_stub) == 5 * sizeof(float), "gathers step over 5 words a stub");
    const struct hough_frame *f = &h->frame;
    const float *base = (const float *)stubs;
    const __m512i pad = _mm512_set1_epi32(HOUGH_ORDER_PAD);
    for (size_t p = 0; p < h->norder; p += LANES) {
        __m512i idx = _mm512_cvtepu16_epi32(_mm256_load_si256((const __m256i *)&h->order[p]));
        __mmask16 live = _mm512_cmpneq_epi32_mask(idx, pad);
        __m512i at = _mm512_mullo_epi32(_mm512_maskz_mov_epi32(live, idx), _mm512_set1_epi32(5));
        hv_f r = (hv_f)_mm512_i32gather_ps(at, base + offsetof(sdd_stub, r) / 4, 4);
        hv_f phi = (hv_f)_mm512_i32gather_ps(at, base + offsetof(sdd_stub, phi) / 4, 4);
        hv_f bend = (hv_f)_mm512_i32gather_ps(at, base + offsetof(sdd_stub, bend) / 4, 4);
        struct hv_lines l;
        hv_lines_init(f, r, phi, bend, (hv_i)_mm512_movm_epi32(live), &l);
        if (f->shape == SDD_HOUGH_HEX) {
            block_columns(SDD_HOUGH_HEX, f, &l, h->x16_rows + p, h->norder);
        } else {
            block_columns(SDD_HOUGH_RECT, f, &l, h->x16_rows + p, h->norder);
        }
    }
}

/* r[i] = the OR of v[i]'s 16 lanes: a reduction tree that halves the vector count at each
 * level (48 instructions for 16 vectors; one reduction each would take about 150). */
static inline __attribute__((always_inline)) __m512i or_lanes_x16(const __m512i v[16])
{
    __m512i w[8], x[4], y[2];
    for (int i = 0; i < 8; i++) { /* 256-bit halves: w[i] = v[2i] | v[2i+1], 8 lanes each */
        w[i] = _mm512_or_si512(_mm512_shuffle_i64x2(v[2 * i], v[2 * i + 1], 0x44),
                               _mm512_shuffle_i64x2(v[2 * i], v[2 * i + 1], 0xee));
    }
    for (int i = 0; i < 4; i++) { /* 128-bit chunks: chunk k of x[i] is v[4i+k], 4 lanes */
        x[i] = _mm512_or_si512(_mm512_shuffle_i64x2(w[2 * i], w[2 * i + 1], 0x88),
                               _mm512_shuffle_i64x2(w[2 * i], w[2 * i + 1], 0xdd));
    }
    for (int i = 0; i < 2; i++) { /* chunk k of y[i]: v[8i+k] then v[8i+4+k], 2 lanes each */
        y[i] = _mm512_or_si512(_mm512_unpacklo_epi64(x[2 * i], x[2 * i + 1]),
                               _mm512_unpackhi_epi64(x[2 * i], x[2 * i + 1]));
    }
    __m512i a = _mm512_or_si512(y[0], _mm512_shuffle_epi32(y[0], _MM_PERM_CDAB));
    __m512i b = _mm512_or_si512(y[1], _mm512_shuffle_epi32(y[1], _MM_PERM_CDAB));
    /* Chunk k now holds v[k], v[8+k], v[4+k], v[12+k]: put lane m at m. */
    __m512i r = _mm512_mask_blend_epi32(0xaaaa, a, b);
    const __m512i to = _mm512_setr_epi32(0, 4, 8, 12, 2, 6, 10, 14, 1, 5, 9, 13, 3, 7, 11, 15);
    return _mm512_permutexvar_epi32(to, r);
}

/* A layer's plane word in a column: the OR of its group's row masks there. */
__attribute__((noinline)) static void fill_planes(sdd_hough *h)
{
    unsigned nlayers = h->opts.geom.nlayers;
    memset(h->planes, 0, sizeof(h->planes));
    for (unsigned l = 0; l < nlayers; l++) {
        for (int c0 = 0; c0 < h->frame.ncols; c0 += LANES) {
            __m512i acc[LANES];
            for (int i = 0; i < LANES; i++) {
                const uint32_t *rows = h->x16_rows + (size_t)(c0 + i) * h->norder;
                acc[i] = _mm512_setzero_si512();
                /* Columns past ncols read the next layer's or the padding's rows: unused. */
                for (size_t p = h->group[l]; p < h->group[l + 1] && c0 + i < h->frame.ncols;
                     p += LANES) {
                    acc[i] = _mm512_or_si512(acc[i], _mm512_load_si512(rows + p));
                }
            }
            _mm512_store_si512(&h->planes[l][c0], or_lanes_x16(acc));
        }
    }
}

/* hough_mark_candidates() for this path: the layer count is bit-sliced over 16 columns at a
 * time, each column's per-row layer masks are spread to bytes, and the candidates are listed
 * by compressing row numbers, so that no loop runs over bits. */
__attribute__((noinline)) static unsigned mark_candidates(sdd_hough *h)
{
    const sdd_hough_geom *g = &h->opts.geom;
    const hv_u ones = (hv_u){0} + UINT32_MAX;
    const hv_u m2 = ones * (g->min_layers >> 2 & 1), m1 = ones * (g->min_layers >> 1 & 1),
               m0 = ones * (g->min_layers & 1);
    for (int c0 = 0; c0 < SDD_HOUGH_MAX_DIM; c0 += LANES) {
        hv_u s0 = {0}, s1 = {0}, s2 = {0};
        for (int l = 0; l < g->nlayers; l++) {
            hv_u w = *(const hv_u *)&h->planes[l][c0];
            hv_u carry0 = s0 & w;
            s0 ^= w;
            hv_u carry1 = s1 & carry0;
            s1 ^= carry0;
            s2 |= carry1;
        }
        /* count >= min, most significant bit first (as hough_at_least) */
        hv_u low = (s1 & ~m1) | (~(s1 ^ m1) & (s0 | ~m0));
        *(hv_u *)&h->cand_rows[c0] = (s2 & ~m2) | (~(s2 ^ m2) & low);
    }
    /* Layer mask of every cell of two columns at a time, one byte per cell. */
    _Alignas(64) uint8_t layer_of[SDD_HOUGH_MAX_DIM][SDD_HOUGH_MAX_DIM];
    for (int c = 0; c < SDD_HOUGH_MAX_DIM; c += 2) {
        __m512i bytes = _mm512_setzero_si512();
        for (int l = 0; l < g->nlayers; l++) {
            uint64_t two = h->planes[l][c] | (uint64_t)h->planes[l][c + 1] << 32;
            bytes = _mm512_or_si512(bytes, _mm512_maskz_set1_epi8(two, (char)(1 << l)));
        }
        _mm512_store_si512(layer_of[c], bytes);
    }
    /* Candidate cells in (col, row) order: rows by compression, then one flat loop. */
    int32_t list_row[HOUGH_MAX_CELLS + LANES], list_col[HOUGH_MAX_CELLS + LANES];
    const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    unsigned total = 0;
    for (int c = 0; c < SDD_HOUGH_MAX_DIM; c++) {
        h->cand_base[c] = (uint16_t)total;
        uint32_t bits = h->cand_rows[c];
        for (int half = 0; half < 2; half++) {
            __mmask16 m = (__mmask16)(bits >> (16 * half));
            __m512i rows = _mm512_add_epi32(iota, _mm512_set1_epi32(16 * half));
            _mm512_storeu_si512(&list_row[total], _mm512_maskz_compress_epi32(m, rows));
            _mm512_storeu_si512(&list_col[total], _mm512_set1_epi32(c));
            total += (unsigned)__builtin_popcount(m);
        }
    }
    h->cand_base[SDD_HOUGH_MAX_DIM] = (uint16_t)total;
    for (unsigned k = 0; k < total; k++) {
        struct hough_cand *c = &h->cands[k];
        uint8_t layers = layer_of[list_col[k]][list_row[k]];
        c->col = (uint8_t)list_col[k];
        c->row = (uint8_t)list_row[k];
        c->layers = layers;
        c->nlayers = (uint8_t)__builtin_popcount(layers);
        c->count = 0;
    }
    return total;
}

/* Pass 2: each candidate's stubs are the positions whose mask in its column has its row's
 * bit; they come out in position order, which is (layer, index) order. */
__attribute__((noinline)) static void collect_stubs(sdd_hough *h)
{
    /* Locals, so that the stores into the slots cannot be taken to change them. */
    const size_t norder = h->norder;
    const uint16_t *order = h->order;
    const uint32_t *all_rows = h->x16_rows;
    struct hough_cand *cands = h->cands;
    uint16_t spill[2 * LANES];
    for (unsigned k = 0, ncands = h->ncands; k < ncands; k++) {
        struct hough_cand *c = &cands[k];
        const uint32_t *rows = all_rows + (size_t)c->col * norder;
        const __m512i bit = _mm512_set1_epi32((int)(1u << c->row));
        unsigned count = 0;
        for (size_t p = 0; p < norder; p += LANES) {
            __mmask16 hit = _mm512_test_epi32_mask(_mm512_load_si512(rows + p), bit);
            __m512i idx = _mm512_cvtepu16_epi32(_mm256_load_si256((const __m256i *)&order[p]));
            idx = _mm512_maskz_compress_epi32(hit, idx);
            /* Straight into the slots while they last (a store from slot < 32 fits), then
             * into a spill buffer: the kept slots are the first 30. */
            uint16_t *to = count < 32 ? c->stubs + count : spill;
            _mm256_storeu_si256((__m256i *)to, _mm512_cvtepi32_epi16(idx));
            count += (unsigned)__builtin_popcount(hit);
        }
        c->count = (uint16_t)count;
    }
}

void hough_find_x16(sdd_hough *h, const sdd_stub *stubs, size_t n)
{
    h->norder = hough_layer_order(stubs, n, h->opts.geom.nlayers, LANES, h->order, h->group);
    fill_rows(h, stubs);
    fill_planes(h);
    h->ncands = mark_candidates(h);
    collect_stubs(h);
}

#else

/* Not built for AVX-512: hough_x16_supported() is false and this is never called. */
void hough_find_x16(sdd_hough *h, const sdd_stub *stubs, size_t n)
{
    hough_find_fast(h, stubs, n);
}

#endif
