/* The histogram ring finder's steps for AVX-512 (x86-64-v4), chosen at run time: the 64
 * candidate centres across the lanes of one vector. They do the same integer counts as the
 * portable steps of rich_hist_core.h, so both give the same rings. Everything in this file
 * builds for x86-64-v4, the search's static copies of the fits, refinement and re-assignment
 * from the shared headers too (popcnt and BMI for their bit masks; the trigger sources build
 * with -ffp-contract=off, so the same bits): only rich_hist_spot_avx512() is called from
 * outside, on an AVX-512 CPU. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,bmi,bmi2,popcnt,lzcnt")
#endif
#include "trigger/rich_hist_core.h"
#include "trigger/rich_x86.h"

#ifdef RICH_HAVE_V4

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

/* update_portable(): each row adds one where an added hit's bin byte equals the row, and
 * subtracts one for a removed hit's. */
RICH_TARGET_V4 static void update_avx512(sdd_rich_finder *f, uint64_t add, uint64_t sub)
{
    enum { ROWS = RICH_BIN_HI - RICH_BIN_LO };
    const __m512i minus1 = _mm512_set1_epi8(-1);
    __m512i acc[ROWS];
#pragma GCC unroll 16
    for (int b = 0; b < ROWS; b++) {
        acc[b] = _mm512_load_si512((const void *)f->hist[b + RICH_BIN_LO]);
    }
    for (uint64_t m = add; m != 0; m &= m - 1) {
        __m512i bins = _mm512_load_si512((const void *)f->bins[__builtin_ctzll(m)]);
#pragma GCC unroll 16
        for (int b = 0; b < ROWS; b++) {
            __mmask64 k = _mm512_cmpeq_epi8_mask(bins, _mm512_set1_epi8((char)(b + RICH_BIN_LO)));
            acc[b] = _mm512_mask_sub_epi8(acc[b], k, acc[b], minus1);
        }
    }
    for (uint64_t m = sub; m != 0; m &= m - 1) {
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

/* Take a ring's hits out. */
RICH_TARGET_V4 static void remove_avx512(sdd_rich_finder *f, uint64_t hits)
{
    update_avx512(f, 0, hits);
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
    unsigned best = rich_max_u8x16(
        _mm_max_epu8(_mm256_castsi256_si128(m256), _mm256_extracti128_si256(m256, 1)));
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

/* seed_portable() with a gather of every hit's bin byte for centre c: 16 hits a vector. */
RICH_TARGET_V4 static uint64_t seed_avx512(const sdd_rich_finder *f, const struct rich_spot *s,
                                           uint64_t alive, int b, int c)
{
    const void *base = (const uint8_t *)f->pm_bins + (c & ~3);
    const __m128i shift = _mm_cvtsi32_si128((c & 3) * 8);
    const __m512i lo = _mm512_set1_epi32(b), hi = _mm512_set1_epi32(b + 1);
    const __m512i byte = _mm512_set1_epi32(0xFF);
    uint64_t seed = 0;
    for (unsigned h = 0; h < s->n; h += 16) {
        __mmask16 live = (__mmask16)(alive >> h);
        __m512i pm = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const void *)&s->pm[h]));
        __m512i v = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), live,
                                                _mm512_slli_epi32(pm, 6), base, 1);
        v = _mm512_and_si512(_mm512_srl_epi32(v, shift), byte);
        __mmask16 k =
            _mm512_mask_cmpeq_epi32_mask(live, v, lo) | _mm512_mask_cmpeq_epi32_mask(live, v, hi);
        seed |= (uint64_t)k << h;
    }
    return seed;
}

RICH_TARGET_V4 unsigned rich_hist_spot_avx512(sdd_rich_finder *f, const struct rich_spot *s,
                                              struct rich_cand *out, unsigned max)
{
    hist_build_avx512(f, s);
    return hist_spot(f, s, out, max, peak_avx512, remove_avx512, update_avx512, seed_avx512);
}
#endif
