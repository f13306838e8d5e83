/* Histogram ring finder (REFERENCE §5.5): for each of 8x8 candidate centres, a histogram of the
 * distances to the spot's hits in 16 mm bins; the highest pair of adjacent bins over all
 * centres is a ring candidate, refined by the algebraic fit; its hits are taken out of the
 * histograms (each hit's bins are kept, so removal is a decrement, not a rebuild) and the
 * search repeats. In spots with several rings, competing peaks are refined too, hits are then
 * re-assigned to their nearest ring and the left-over hits searched again (docs/trigger.md
 * "Multi-ring spots"; opts.multi_ring off leaves the single greedy pass). The histogram kernel
 * is written for the vectoriser, 64 centres across the lanes, and built twice: for the
 * baseline target and for x86-64-v4 (AVX-512), chosen at run time. Both builds do the same
 * float operations (no contraction), so they give the same rings. */
#include <math.h>

#include "trigger/rich_impl.h"

#define RICH_MAX_VETO 3 /* peaks that may fail per spot before the search gives up */
#define RICH_EM_STEPS 3 /* hit re-assignment steps */
/* When a ring leaves at least RICH_ALT_LEFT hits for others, the next RICH_ALT_PEAKS peaks
 * down to RICH_ALT_MARGIN below the first (other centres, or radii more than a bin away) are
 * refined too, and the ring that holds the most hits is taken. */
#define RICH_ALT_PEAKS  2
#define RICH_ALT_MARGIN 3
#define RICH_ALT_LEFT   4
#define RICH_ALT_NB     1 /* bin pairs either side of a tried peak that are skipped too */

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

/* Peak search, peak hits and histogram updates, in a portable and an AVX-512 build. */
typedef unsigned (*peak_fn)(sdd_rich_finder *f, int *b, int *c);
typedef void (*remove_fn)(sdd_rich_finder *f, uint64_t hits);
typedef void (*update_fn)(sdd_rich_finder *f, uint64_t add, uint64_t sub);
typedef uint64_t (*seed_fn)(const sdd_rich_finder *f, const struct rich_spot *s, uint64_t alive,
                            int b, int c);

static unsigned peak_portable(sdd_rich_finder *f, int *b, int *c)
{
    return peak(f->hist, (const uint8_t(*)[RICH_CENTRES])f->veto, b, c);
}

/* The hits of alive in bins b and b + 1 of centre c: the peak's hits. */
static uint64_t seed_portable(const sdd_rich_finder *f, const struct rich_spot *s, uint64_t alive,
                              int b, int c)
{
    (void)s;
    uint64_t seed = 0;
    for (uint64_t m = alive; m != 0; m &= m - 1) {
        int h = __builtin_ctzll(m);
        seed |= (uint64_t)(f->bins[h][c] == b || f->bins[h][c] == b + 1) << h;
    }
    return seed;
}

static void remove_portable(sdd_rich_finder *f, uint64_t hits)
{
    for (uint64_t m = hits; m != 0; m &= m - 1) {
        hist_add(f->hist, f->bins[__builtin_ctzll(m)], (uint8_t)0xFF);
    }
}

/* Add the hits of add to the histograms and take those of sub out. */
static void update_portable(sdd_rich_finder *f, uint64_t add, uint64_t sub)
{
    for (uint64_t m = add; m != 0; m &= m - 1) {
        hist_add(f->hist, f->bins[__builtin_ctzll(m)], 1);
    }
    remove_portable(f, sub);
}

/* Vetoes set while alternatives are tried, to be undone (earlier ones stay). */
struct veto_log {
    unsigned n;
    uint8_t b[(RICH_ALT_PEAKS + 1) * (2 * RICH_ALT_NB + 1)];
    uint8_t c[(RICH_ALT_PEAKS + 1) * (2 * RICH_ALT_NB + 1)];
};

/* Veto the peak (b, c) and the pairs that overlap it at the same centre. */
static void veto_near(sdd_rich_finder *f, struct veto_log *log, int b, int c)
{
    for (int k = b - RICH_ALT_NB; k <= b + RICH_ALT_NB; k++) {
        if (k >= RICH_BIN_LO && k < RICH_BIN_HI - 1 && f->veto[k][c] == 0) {
            f->veto[k][c] = 0xFF;
            log->b[log->n] = (uint8_t)k;
            log->c[log->n] = (uint8_t)c;
            log->n++;
        }
    }
}

static void veto_undo(sdd_rich_finder *f, const struct veto_log *log)
{
    for (unsigned i = 0; i < log->n; i++) {
        f->veto[log->b[i]][log->c[i]] = 0;
    }
}

/* Rings from the histograms of the hits of *held, highest peak first; with alts, competing
 * peaks are refined too. Each ring's claimed hits leave *held and the histograms. */
static inline __attribute__((always_inline)) unsigned
hist_search(sdd_rich_finder *f, const struct rich_spot *s, uint64_t *held, struct rich_cand *out,
            unsigned max, bool alts, peak_fn peak_at, remove_fn remove, seed_fn seed_at)
{
    uint64_t alive = *held;
    unsigned found = 0, failed = 0;
    int vetoed[RICH_MAX_VETO][2];
    while (found < max) {
        int b, c;
        unsigned pk = peak_at(f, &b, &c);
        if (pk < f->opts.threshold) {
            break;
        }
        struct rich_cand *r = &out[found];
        bool ok = rich_refine(f, s, alive, seed_at(f, s, alive, b, c), 0, r);
        if (ok && alts && (unsigned)__builtin_popcountll(alive & ~r->hits) >= RICH_ALT_LEFT) {
            /* Other peaks nearly as high: keep the ring that holds the most hits. One with
             * fewer cannot win, so its refinement stops as soon as it falls short. */
            struct veto_log log = {0};
            veto_near(f, &log, b, c);
            for (int p = 0; p < RICH_ALT_PEAKS; p++) {
                int b2, c2;
                unsigned pk2 = peak_at(f, &b2, &c2);
                if (pk2 < f->opts.threshold || pk2 + RICH_ALT_MARGIN < pk) {
                    break;
                }
                veto_near(f, &log, b2, c2);
                uint64_t seed2 = seed_at(f, s, alive, b2, c2);
                if ((seed2 & ~r->hits) == 0) {
                    continue; /* the same ring seen from a neighbouring cell */
                }
                struct rich_cand alt;
                if (rich_refine(f, s, alive, seed2, r->nhits, &alt) &&
                    (alt.nhits > r->nhits || (alt.nhits == r->nhits && alt.rms < r->rms))) {
                    *r = alt;
                }
            }
            veto_undo(f, &log);
        }
        if (!ok) {
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
        /* The ring leaves the search with only its hits close to the circle: the window's
         * outer band also catches hits of a crossing ring, which that ring still needs. */
        uint64_t taken = f->opts.claim > 0.0f ? f->kern->on_circle(s, r->hits, &r->c, f->opts.claim)
                                               : r->hits;
        alive &= ~taken;
        remove(f, taken);
    }
    for (unsigned k = 0; k < failed; k++) {
        f->veto[vetoed[k][0]][vetoed[k][1]] = 0;
    }
    *held = alive;
    return found;
}

/* Hits go to the ring they lie closest to (|d - R| < window); ties to the earlier ring. */
static void assign(const sdd_rich_finder *f, const struct rich_spot *s, uint64_t all,
                   const struct rich_cand *r, unsigned k, uint64_t *own)
{
    for (unsigned j = 0; j < k; j++) {
        own[j] = 0;
    }
    for (uint64_t m = all; m != 0; m &= m - 1) {
        int i = __builtin_ctzll(m);
        float best = f->opts.window;
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

/* Rings found one after another each took every hit within the window, also hits of a ring
 * found later, and a circle through hits of two crossing rings may have been taken first.
 * Give every hit to the ring it lies closest to and refit, a few times (until nothing moves);
 * a ring left with too few hits (a circle through hits of two rings, once those rings claim
 * them back) is dropped. Returns the rings kept (in order); *left: the hits no ring holds. */
static unsigned reassign(const sdd_rich_finder *f, const struct rich_spot *s, uint64_t all,
                         struct rich_cand *r, unsigned k, uint64_t *left)
{
    for (int it = 0; it < RICH_EM_STEPS && k > 0; it++) {
        uint64_t own[8];
        assign(f, s, all, r, k, own);
        bool changed = false;
        unsigned w = 0;
        for (unsigned j = 0; j < k; j++) {
            if (own[j] == r[j].hits) {
                r[w++] = r[j];
                continue;
            }
            changed = true;
            struct rich_cand c;
            if (rich_fit_hits(f, s, own[j], &c)) {
                r[w++] = c;
            }
        }
        k = w;
        if (!changed) {
            break;
        }
    }
    uint64_t h = 0;
    for (unsigned j = 0; j < k; j++) {
        h |= r[j].hits;
    }
    *left = all & ~h;
    return k;
}

/* A ring claims only the core of its window (opts.claim), so a later ring may hold hits of
 * an earlier one; a hit is one photon, so such rings share out their hits as reassign does. */
static unsigned disjoint(const sdd_rich_finder *f, const struct rich_spot *s, uint64_t all,
                         struct rich_cand *r, unsigned k)
{
    uint64_t seen = 0, shared = 0;
    for (unsigned j = 0; j < k; j++) {
        shared |= seen & r[j].hits;
        seen |= r[j].hits;
    }
    if (shared == 0) {
        return k;
    }
    uint64_t left;
    return reassign(f, s, all, r, k, &left);
}

/* The search, then for spots that may hold several rings: re-assignment, and a search of the
 * hits no ring holds (they can make a ring of their own only once they are min_hits). */
static inline __attribute__((always_inline)) unsigned
hist_spot(sdd_rich_finder *f, const struct rich_spot *s, struct rich_cand *out, unsigned max,
          peak_fn peak_at, remove_fn remove, update_fn update, seed_fn seed_at)
{
    uint64_t all = s->n == 64 ? ~0ull : (1ull << s->n) - 1;
    bool multi = f->opts.multi_ring;
    uint64_t held = all; /* the hits the histograms hold */
    unsigned k = hist_search(f, s, &held, out, max, multi, peak_at, remove, seed_at);
    if (!multi || k == 0 || (k == 1 && (unsigned)__builtin_popcountll(held) < f->opts.min_hits)) {
        return disjoint(f, s, all, out, k);
    }
    uint64_t left;
    k = reassign(f, s, all, out, k, &left);
    if (k < max && (unsigned)__builtin_popcountll(left) >= f->opts.min_hits) {
        update(f, left & ~held, held & ~left);
        held = left;
        k += hist_search(f, s, &held, out + k, max - k, false, peak_at, remove, seed_at);
    }
    return disjoint(f, s, all, out, k);
}

static unsigned hist_spot_portable(sdd_rich_finder *f, const struct rich_spot *s,
                                   struct rich_cand *out, unsigned max)
{
    hist_build(f, s);
    return hist_spot(f, s, out, max, peak_portable, remove_portable, update_portable,
                     seed_portable);
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

RICH_TARGET_V4 static unsigned hist_spot_avx512(sdd_rich_finder *f, const struct rich_spot *s,
                                                struct rich_cand *out, unsigned max)
{
    hist_build_avx512(f, s);
    return hist_spot(f, s, out, max, peak_avx512, remove_avx512, update_avx512, seed_avx512);
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
