/* Histogram ring finder (REFERENCE §5.5): for each of 8x8 candidate centres, a histogram of the
 * distances to the spot's hits in 16 mm bins; the highest pair of adjacent bins over all
 * centres is a ring candidate, refined by the algebraic fit; its hits are taken out of the
 * histograms (each hit's bins are kept, so removal is a decrement, not a rebuild) and the
 * search repeats. The histogram kernel is written for the vectoriser, 64 centres across the
 * lanes, and built twice: for the baseline target and for x86-64-v4 (AVX-512), chosen at run
 * time. Both builds do the same float operations (no contraction), so they give the same rings. */
#include <math.h>

#include "trigger/rich_impl.h"

#define RICH_MAX_VETO 3 /* peaks that may fail per spot before the search gives up */

/* Candidate centres, row-major: centre c at (CX[c], CY[c]), 32 mm apart over +-112 mm. */
static const float CX[RICH_CENTRES] __attribute__((aligned(64))) = {
#define ROW -112, -80, -48, -16, 16, 48, 80, 112
    ROW, ROW, ROW, ROW, ROW,
    ROW, ROW, ROW
#undef ROW
};
static const float CY[RICH_CENTRES] __attribute__((aligned(64))) = {
#define ROW(v) v, v, v, v, v, v, v, v
    ROW(-112), ROW(-80), ROW(-48), ROW(-16), ROW(16),
    ROW(48),   ROW(80),  ROW(112)
#undef ROW
};

/* Bins of a PM at (x, y) for every centre; bin RICH_NBINS for 256 mm and beyond. */
static void pm_bins(float x, float y, uint8_t *restrict bh)
{
    for (int c = 0; c < RICH_CENTRES; c++) {
        float dx = x - CX[c], dy = y - CY[c];
        float d = sqrtf(dx * dx + dy * dy) * (1.0f / RICH_BIN);
        bh[c] = (uint8_t)(d < (float)RICH_NBINS ? (int)d : RICH_NBINS);
    }
}

void rich_hist_table(uint8_t (*table)[RICH_CENTRES], const float *x, const float *y, int npm)
{
    for (int i = 0; i < npm; i++) {
        pm_bins(x[i], y[i], table[i]);
    }
}

/* hist[b][c] += sign for the bins of one hit (only the bins peaks are searched in). */
static inline __attribute__((always_inline)) void hist_add(uint8_t (*restrict hist)[RICH_CENTRES],
                                                           const uint8_t *restrict bh, uint8_t sign)
{
    for (int b = RICH_BIN_LO; b < RICH_BIN_HI; b++) {
        for (int c = 0; c < RICH_CENTRES; c++) {
            hist[b][c] = (uint8_t)(hist[b][c] + (bh[c] == b ? sign : 0));
        }
    }
}

/* Highest hist[b][c] + hist[b+1][c]; ties go to the lowest b, then the lowest c. */
static inline __attribute__((always_inline)) unsigned
peak(uint8_t (*restrict hist)[RICH_CENTRES], const uint8_t (*restrict veto)[RICH_CENTRES],
     int *bbest, int *cbest)
{
    unsigned rowmax[RICH_NBINS] = {0};
    for (int b = RICH_BIN_LO; b < RICH_BIN_HI - 1; b++) {
        uint8_t m = 0;
        for (int c = 0; c < RICH_CENTRES; c++) {
            uint8_t v = (uint8_t)((hist[b][c] + hist[b + 1][c]) & ~veto[b][c]);
            m = v > m ? v : m;
        }
        rowmax[b] = m;
    }
    unsigned best = 0;
    int bb = RICH_BIN_LO;
    for (int b = RICH_BIN_LO; b < RICH_BIN_HI - 1; b++) {
        if (rowmax[b] > best) {
            best = rowmax[b];
            bb = b;
        }
    }
    int cb = 0;
    for (int c = 0; c < RICH_CENTRES; c++) {
        if ((unsigned)((hist[bb][c] + hist[bb + 1][c]) & ~veto[bb][c] & 0xFF) == best) {
            cb = c;
            break;
        }
    }
    *bbest = bb;
    *cbest = cb;
    return best;
}

/* The histograms of a spot's hits, portable form. */
static inline __attribute__((always_inline)) void hist_build(sdd_rich_finder *f,
                                                             const struct rich_spot *s)
{
    memset(f->hist, 0, sizeof(f->hist));
    for (unsigned h = 0; h < s->n; h++) {
        f->bins[h] = f->pm_bins[s->pm[h]];
        hist_add(f->hist, f->bins[h], 1);
    }
}

/* Peak search, refinement and hit removal on built histograms. */
typedef unsigned (*peak_fn)(sdd_rich_finder *f, int *b, int *c);
typedef void (*remove_fn)(sdd_rich_finder *f, uint64_t hits);

static unsigned peak_portable(sdd_rich_finder *f, int *b, int *c)
{
    return peak(f->hist, (const uint8_t(*)[RICH_CENTRES])f->veto, b, c);
}

static void remove_portable(sdd_rich_finder *f, uint64_t hits)
{
    for (uint64_t m = hits; m != 0; m &= m - 1) {
        hist_add(f->hist, f->bins[__builtin_ctzll(m)], (uint8_t)0xFF);
    }
}

static inline __attribute__((always_inline)) unsigned
hist_search(sdd_rich_finder *f, const struct rich_spot *s, struct rich_cand *out, unsigned max,
            peak_fn peak_at, remove_fn remove)
{
    uint64_t alive = s->n == 64 ? ~0ull : (1ull << s->n) - 1;
    unsigned found = 0, failed = 0;
    int vetoed[RICH_MAX_VETO][2];
    while (found < max) {
        int b, c;
        if (peak_at(f, &b, &c) < f->opts.threshold) {
            break;
        }
        uint64_t seed = 0;
        for (uint64_t m = alive; m != 0; m &= m - 1) {
            int h = __builtin_ctzll(m);
            seed |= (uint64_t)(f->bins[h][c] == b || f->bins[h][c] == b + 1) << h;
        }
        struct rich_cand *r = &out[found];
        if (!rich_refine(f, s, alive, seed, r)) {
            /* This peak gives no ring; the next one may (a ring hidden behind a stronger
             * pile of crossing rings and noise), a few times at most. */
            if (failed == RICH_MAX_VETO) {
                break;
            }
            vetoed[failed][0] = b;
            vetoed[failed][1] = c;
            failed++;
            f->veto[b][c] = 0xFF;
            continue;
        }
        found++;
        alive &= ~r->hits;
        remove(f, r->hits);
    }
    for (unsigned k = 0; k < failed; k++) {
        f->veto[vetoed[k][0]][vetoed[k][1]] = 0;
    }
    return found;
}

static unsigned hist_spot_portable(sdd_rich_finder *f, const struct rich_spot *s,
                                   struct rich_cand *out, unsigned max)
{
    hist_build(f, s);
    return hist_search(f, s, out, max, peak_portable, remove_portable);
}

#ifdef RICH_HAVE_V4
#include <immintrin.h>

/* The histograms with the searched rows held in registers: per hit, its PM's bins for all 64
 * centres are one byte vector, and each row adds one where a byte equals its bin. */
RICH_TARGET_V4 static void hist_build_avx512(sdd_rich_finder *f, const struct rich_spot *s)
{
    enum { ROWS = RICH_BIN_HI - RICH_BIN_LO };
    const __m512i minus1 = _mm512_set1_epi8(-1);
    __m512i acc[ROWS]; /* fully unrolled loops keep these in registers */
#pragma GCC unroll 16
    for (int b = 0; b < ROWS; b++) {
        acc[b] = _mm512_setzero_si512();
    }
    for (unsigned h = 0; h < s->n; h++) {
        const uint8_t *row = f->pm_bins[s->pm[h]];
        f->bins[h] = row;
        __m512i bins = _mm512_load_si512((const void *)row);
#pragma GCC unroll 16
        for (int b = 0; b < ROWS; b++) {
            __mmask64 k = _mm512_cmpeq_epi8_mask(bins, _mm512_set1_epi8((char)(b + RICH_BIN_LO)));
            acc[b] = _mm512_mask_sub_epi8(acc[b], k, acc[b], minus1);
        }
    }
#pragma GCC unroll 16
    for (int b = 0; b < ROWS; b++) {
        _mm512_store_si512((void *)f->hist[b + RICH_BIN_LO], acc[b]);
    }
}

/* Take a ring's hits out: each row subtracts one where the hit's bin byte equals the row. */
RICH_TARGET_V4 static void remove_avx512(sdd_rich_finder *f, uint64_t hits)
{
    enum { ROWS = RICH_BIN_HI - RICH_BIN_LO };
    const __m512i minus1 = _mm512_set1_epi8(-1);
    __m512i acc[ROWS];
#pragma GCC unroll 16
    for (int b = 0; b < ROWS; b++) {
        acc[b] = _mm512_load_si512((const void *)f->hist[b + RICH_BIN_LO]);
    }
    for (uint64_t m = hits; m != 0; m &= m - 1) {
        __m512i bins = _mm512_load_si512((const void *)f->bins[__builtin_ctzll(m)]);
#pragma GCC unroll 16
        for (int b = 0; b < ROWS; b++) {
            __mmask64 k = _mm512_cmpeq_epi8_mask(bins, _mm512_set1_epi8((char)(b + RICH_BIN_LO)));
            acc[b] = _mm512_mask_add_epi8(acc[b], k, acc[b], minus1);
        }
    }
#pragma GCC unroll 16
    for (int b = 0; b < ROWS; b++) {
        _mm512_store_si512((void *)f->hist[b + RICH_BIN_LO], acc[b]);
    }
}

/* peak() with the pair sums as byte vectors: the overall maximum first, then the first row
 * and lane that hold it (the same tie rule: lowest bin, then lowest centre). */
RICH_TARGET_V4 static unsigned peak_avx512(sdd_rich_finder *f, int *bbest, int *cbest)
{
    __m512i pair[RICH_NBINS];
    __m512i mx = _mm512_setzero_si512();
    __m512i row = _mm512_load_si512((const void *)f->hist[RICH_BIN_LO]);
#pragma GCC unroll 16
    for (int b = RICH_BIN_LO; b < RICH_BIN_HI - 1; b++) {
        __m512i next = _mm512_load_si512((const void *)f->hist[b + 1]);
        __m512i veto = _mm512_load_si512((const void *)f->veto[b]);
        pair[b] = _mm512_andnot_si512(veto, _mm512_add_epi8(row, next));
        mx = _mm512_max_epu8(mx, pair[b]);
        row = next;
    }
    __m256i m256 = _mm256_max_epu8(_mm512_castsi512_si256(mx), _mm512_extracti64x4_epi64(mx, 1));
    __m128i m = _mm_max_epu8(_mm256_castsi256_si128(m256), _mm256_extracti128_si256(m256, 1));
    m = _mm_max_epu8(m, _mm_srli_si128(m, 8));
    m = _mm_max_epu8(m, _mm_srli_si128(m, 4));
    m = _mm_max_epu8(m, _mm_srli_si128(m, 2));
    m = _mm_max_epu8(m, _mm_srli_si128(m, 1));
    unsigned best = (unsigned)_mm_cvtsi128_si32(m) & 0xFF;
    *bbest = RICH_BIN_LO;
    *cbest = 0;
    if (best == 0) {
        return 0; /* as peak(): nothing above zero, position irrelevant below the threshold */
    }
    const __m512i want = _mm512_set1_epi8((char)best);
#pragma GCC unroll 16
    for (int b = RICH_BIN_LO; b < RICH_BIN_HI - 1; b++) {
        uint64_t k = _mm512_cmpeq_epi8_mask(pair[b], want);
        if (k != 0) {
            *bbest = b;
            *cbest = __builtin_ctzll(k);
            break;
        }
    }
    return best;
}

RICH_TARGET_V4 static unsigned hist_spot_avx512(sdd_rich_finder *f, const struct rich_spot *s,
                                                struct rich_cand *out, unsigned max)
{
    hist_build_avx512(f, s);
    return hist_search(f, s, out, max, peak_avx512, remove_avx512);
}
#endif

unsigned rich_hist_spot(sdd_rich_finder *f, const struct rich_spot *s, struct rich_cand *out,
                        unsigned max)
{
#ifdef RICH_HAVE_V4
    if (f->avx512) {
        return hist_spot_avx512(f, s, out, max);
    }
#endif
    return hist_spot_portable(f, s, out, max);
}
