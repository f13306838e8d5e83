/* The histogram ring finder's steps for AVX2 (x86-64-v3), chosen at run time where there is no
 * AVX-512: the 64 candidate centres are two 32-byte vectors. They do the same integer counts
 * as the portable steps of rich_hist_core.h, so every build gives the same rings.
 * Everything in this file builds for x86-64-v3, the search's static copies of the fits,
 * refinement and re-assignment from the shared headers too (popcnt, BMI; never FMA, so the
 * same bits): only rich_hist_spot_avx2() is called from outside, on an AVX2 CPU. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#pragma GCC target("avx2,bmi,bmi2,popcnt,lzcnt")
#endif
#include "trigger/rich_hist_core.h"
#include "trigger/rich_x86.h"

#ifdef RICH_HAVE_V3

enum { ROWS = RICH_BIN_HI - RICH_BIN_LO };

/* Rows [LO, HI) of centres half*32 .. half*32+31 gain one for each hit of add, lose one for
 * each of sub: a row adds where a hit's bin byte equals it. Sixteen registers hold one half's
 * rows, not both, so the halves take turns. */
RICH_V3_INLINE void update_half(sdd_rich_finder *f, int half, uint64_t add, uint64_t sub)
{
    __m256i acc[ROWS];
#pragma GCC unroll 16
    for (int b = 0; b < ROWS; b++) {
        acc[b] = _mm256_load_si256((const void *)&f->hist[b + RICH_BIN_LO][32 * half]);
    }
    for (uint64_t m = add; m != 0; m &= m - 1) {
        __m256i bins = _mm256_load_si256((const void *)(f->bins[__builtin_ctzll(m)] + 32 * half));
#pragma GCC unroll 16
        for (int b = 0; b < ROWS; b++) { /* equal bytes are -1: subtracting adds one */
            __m256i eq = _mm256_cmpeq_epi8(bins, _mm256_set1_epi8((char)(b + RICH_BIN_LO)));
            acc[b] = _mm256_sub_epi8(acc[b], eq);
        }
    }
    for (uint64_t m = sub; m != 0; m &= m - 1) {
        __m256i bins = _mm256_load_si256((const void *)(f->bins[__builtin_ctzll(m)] + 32 * half));
#pragma GCC unroll 16
        for (int b = 0; b < ROWS; b++) {
            __m256i eq = _mm256_cmpeq_epi8(bins, _mm256_set1_epi8((char)(b + RICH_BIN_LO)));
            acc[b] = _mm256_add_epi8(acc[b], eq);
        }
    }
#pragma GCC unroll 16
    for (int b = 0; b < ROWS; b++) {
        _mm256_store_si256((void *)&f->hist[b + RICH_BIN_LO][32 * half], acc[b]);
    }
}

RICH_TARGET_V3 static void update_avx2(sdd_rich_finder *f, uint64_t add, uint64_t sub)
{
    update_half(f, 0, add, sub);
    update_half(f, 1, add, sub);
}

RICH_TARGET_V3 static void remove_avx2(sdd_rich_finder *f, uint64_t hits)
{
    update_avx2(f, 0, hits);
}

/* hist_build(): only the searched rows are counted (the others are never read). */
RICH_TARGET_V3 static void hist_build_avx2(sdd_rich_finder *f, const struct rich_spot *s)
{
    for (unsigned h = 0; h < s->n; h++) {
        f->bins[h] = f->pm_bins[s->pm[h]];
    }
    const __m256i zero = _mm256_setzero_si256();
#pragma GCC unroll 16
    for (int b = RICH_BIN_LO; b < RICH_BIN_HI; b++) {
        _mm256_store_si256((void *)&f->hist[b][0], zero);
        _mm256_store_si256((void *)&f->hist[b][32], zero);
    }
    uint64_t all = s->n == 64 ? ~0ull : (1ull << s->n) - 1;
    update_avx2(f, all, 0);
}

/* The pair sums of row b for one half of the centres, vetoed pairs zero. */
RICH_V3_INLINE __m256i pair_at(const sdd_rich_finder *f, int b, int half)
{
    __m256i row = _mm256_load_si256((const void *)&f->hist[b][32 * half]);
    __m256i next = _mm256_load_si256((const void *)&f->hist[b + 1][32 * half]);
    __m256i veto = _mm256_load_si256((const void *)&f->veto[b][32 * half]);
    return _mm256_andnot_si256(veto, _mm256_add_epi8(row, next));
}

/* peak(): the overall maximum first, then the first row and centre that hold it (the same tie
 * rule: lowest bin, then lowest centre). */
RICH_TARGET_V3 static unsigned peak_avx2(sdd_rich_finder *f, int *bbest, int *cbest)
{
    /* The pair sums are kept for the second pass: it reads about two thirds of the rows. */
    __m256i pair[RICH_BIN_HI - 1 - RICH_BIN_LO][2];
    __m256i mx = _mm256_setzero_si256();
#pragma GCC unroll 16
    for (int b = RICH_BIN_LO; b < RICH_BIN_HI - 1; b++) {
        pair[b - RICH_BIN_LO][0] = pair_at(f, b, 0);
        pair[b - RICH_BIN_LO][1] = pair_at(f, b, 1);
        mx = _mm256_max_epu8(mx,
                             _mm256_max_epu8(pair[b - RICH_BIN_LO][0], pair[b - RICH_BIN_LO][1]));
    }
    unsigned best =
        rich_max_u8x16(_mm_max_epu8(_mm256_castsi256_si128(mx), _mm256_extracti128_si256(mx, 1)));
    *bbest = RICH_BIN_LO;
    *cbest = 0;
    if (best == 0) {
        return 0; /* as peak(): nothing above zero, position irrelevant below the threshold */
    }
    const __m256i want = _mm256_set1_epi8((char)best);
    for (int b = RICH_BIN_LO; b < RICH_BIN_HI - 1; b++) {
        const __m256i *row = pair[b - RICH_BIN_LO];
        uint64_t lo = (uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(row[0], want));
        uint64_t hi = (uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(row[1], want));
        uint64_t k = lo | hi << 32;
        if (k != 0) {
            *bbest = b;
            *cbest = __builtin_ctzll(k);
            break;
        }
    }
    return best;
}

/* seed_portable() from the hits' coordinates instead of the table: centre c's distances as
 * rich_hist_table() computes them (the same float operations, no FMA, so the same bits), and
 * bin b or b + 1 is b <= d / RICH_BIN < b + 2. Eight hits a step, no table row per hit. */
RICH_TARGET_V3 static uint64_t seed_avx2(const sdd_rich_finder *f, const struct rich_spot *s,
                                         uint64_t alive, int b, int c)
{
    (void)f;
    const __m256 cx = _mm256_set1_ps(RICH_CENTRE_X(c)), cy = _mm256_set1_ps(RICH_CENTRE_Y(c));
    const __m256 lo = _mm256_set1_ps((float)b), hi = _mm256_set1_ps((float)(b + 2));
    const __m256 scale = _mm256_set1_ps(1.0f / RICH_BIN);
    uint64_t seed = 0;
    for (unsigned q = 0; q < s->n; q += 8) {
        __m256 dx = _mm256_sub_ps(_mm256_load_ps(s->x + q), cx);
        __m256 dy = _mm256_sub_ps(_mm256_load_ps(s->y + q), cy);
        __m256 d = _mm256_mul_ps(
            _mm256_sqrt_ps(_mm256_add_ps(_mm256_mul_ps(dx, dx), _mm256_mul_ps(dy, dy))), scale);
        __m256 in =
            _mm256_and_ps(_mm256_cmp_ps(d, lo, _CMP_GE_OQ), _mm256_cmp_ps(d, hi, _CMP_LT_OQ));
        seed |= (uint64_t)(unsigned)_mm256_movemask_ps(in) << q;
    }
    return seed & alive;
}

RICH_TARGET_V3 unsigned rich_hist_spot_avx2(sdd_rich_finder *f, const struct rich_spot *s,
                                            struct rich_cand *out, unsigned max)
{
    hist_build_avx2(f, s);
    return hist_spot(f, s, out, max, peak_avx2, remove_avx2, update_avx2, seed_avx2);
}
#endif
