/* The histogram ring finder's search (REFERENCE §5.5), in the one source that the CPU build (C,
 * rich_hist.c) and the GPU build (CUDA, src/trigger/cuda/) share: for each of 8x8 candidate
 * centres a histogram of the distances to the spot's hits in 16 mm bins; the highest pair of
 * adjacent bins over all centres is a ring candidate, refined by the algebraic fit; its hits
 * are taken out of the histograms (each hit's bins are kept, so removal is a decrement, not a
 * rebuild) and the search repeats. In spots with several rings, competing peaks are refined
 * too, hits are then re-assigned to their nearest ring and the left-over hits searched again
 * (docs/trigger.md "Multi-ring spots"; opts.multi_ring off leaves the single greedy pass).
 * The search takes its histogram steps as functions, so rich_hist.c can hand it AVX-512 ones;
 * the portable steps here are the GPU's. */
#ifndef SDDAQ_TRIGGER_RICH_HIST_CORE_H
#define SDDAQ_TRIGGER_RICH_HIST_CORE_H

#include "trigger/rich_fit_core.h"

#define RICH_MAX_VETO 3 /* peaks that may fail per spot before the search gives up */
#define RICH_EM_STEPS 3 /* hit re-assignment steps */
/* When a ring leaves at least RICH_ALT_LEFT hits for others, the next RICH_ALT_PEAKS peaks
 * down to RICH_ALT_MARGIN below the first (other centres, or radii more than a bin away) are
 * refined too, and the ring that holds the most hits is taken. */
#define RICH_ALT_PEAKS  2
#define RICH_ALT_MARGIN 3
#define RICH_ALT_LEFT   4
#define RICH_ALT_NB     1 /* bin pairs either side of a tried peak that are skipped too */

/* hist[b][c] += sign for the bins of one hit (only the bins peaks are searched in). */
RICH_DEV_INLINE void hist_add(uint8_t (*RICH_RESTRICT hist)[RICH_CENTRES],
                              const uint8_t *RICH_RESTRICT bh, uint8_t sign)
{
    for (int b = RICH_BIN_LO; b < RICH_BIN_HI; b++) {
        for (int c = 0; c < RICH_CENTRES; c++) {
            hist[b][c] = (uint8_t)(hist[b][c] + (bh[c] == b ? sign : 0));
        }
    }
}

/* Highest hist[b][c] + hist[b+1][c]; ties go to the lowest b, then the lowest c. */
RICH_DEV_INLINE unsigned peak(uint8_t (*RICH_RESTRICT hist)[RICH_CENTRES],
                              const uint8_t (*RICH_RESTRICT veto)[RICH_CENTRES], int *bbest,
                              int *cbest)
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
RICH_DEV_INLINE void hist_build(sdd_rich_finder *f, const struct rich_spot *s)
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

RICH_DEV unsigned peak_portable(sdd_rich_finder *f, int *b, int *c)
{
    return peak(f->hist, (const uint8_t(*)[RICH_CENTRES])f->veto, b, c);
}

/* The hits of alive in bins b and b + 1 of centre c: the peak's hits. */
RICH_DEV uint64_t seed_portable(const sdd_rich_finder *f, const struct rich_spot *s, uint64_t alive,
                                int b, int c)
{
    (void)s;
    uint64_t seed = 0;
    for (uint64_t m = alive; m != 0; m &= m - 1) {
        int h = rich_ctz64(m);
        seed |= (uint64_t)(f->bins[h][c] == b || f->bins[h][c] == b + 1) << h;
    }
    return seed;
}

RICH_DEV void remove_portable(sdd_rich_finder *f, uint64_t hits)
{
    for (uint64_t m = hits; m != 0; m &= m - 1) {
        hist_add(f->hist, f->bins[rich_ctz64(m)], (uint8_t)0xFF);
    }
}

/* Add the hits of add to the histograms and take those of sub out. */
RICH_DEV void update_portable(sdd_rich_finder *f, uint64_t add, uint64_t sub)
{
    for (uint64_t m = add; m != 0; m &= m - 1) {
        hist_add(f->hist, f->bins[rich_ctz64(m)], 1);
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
RICH_DEV void veto_near(sdd_rich_finder *f, struct veto_log *log, int b, int c)
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

RICH_DEV void veto_undo(sdd_rich_finder *f, const struct veto_log *log)
{
    for (unsigned i = 0; i < log->n; i++) {
        f->veto[log->b[i]][log->c[i]] = 0;
    }
}

/* Rings from the histograms of the hits of *held, highest peak first; with alts, competing
 * peaks are refined too. Each ring's claimed hits leave the search: *unclaimed is left with the
 * hits no ring took. They leave the histograms only when another peak is looked for (after the
 * last ring the search mostly ends), so *held is left with the hits the histograms hold. */
RICH_DEV_INLINE unsigned hist_search(sdd_rich_finder *f, const struct rich_spot *s, uint64_t *held,
                                     uint64_t *unclaimed, struct rich_cand *out, unsigned max,
                                     bool alts, peak_fn peak_at, remove_fn remove, seed_fn seed_at)
{
    uint64_t alive = *held, counted = *held;
    unsigned found = 0, failed = 0;
    int vetoed[RICH_MAX_VETO][2];
    /* A peak counts each unclaimed hit once at most, and a ring takes only those: with fewer
     * of them than the threshold or than min_hits, no peak gives a ring. Stopping there leaves
     * the same rings as searching on would, without its peak scans and refinements. */
    unsigned need = f->opts.threshold > f->opts.min_hits ? f->opts.threshold : f->opts.min_hits;
    while (found < max && rich_popcount64(alive) >= need) {
        if (counted != alive) {
            remove(f, counted & ~alive);
            counted = alive;
        }
        int b, c;
        unsigned pk = peak_at(f, &b, &c);
        if (pk < f->opts.threshold) {
            break;
        }
        struct rich_cand *r = &out[found];
        bool ok = rich_refine(f, s, alive, seed_at(f, s, alive, b, c), 0, r);
        if (ok && alts && rich_popcount64(alive & ~r->hits) >= RICH_ALT_LEFT) {
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
        uint64_t taken =
            f->opts.claim > 0.0f ? rich_on_circle_of(f, s, r->hits, &r->c, f->opts.claim) : r->hits;
        alive &= ~taken;
    }
    for (unsigned k = 0; k < failed; k++) {
        f->veto[vetoed[k][0]][vetoed[k][1]] = 0;
    }
    *held = counted;
    *unclaimed = alive;
    return found;
}

/* Rings found one after another each took every hit within the window, also hits of a ring
 * found later, and a circle through hits of two crossing rings may have been taken first.
 * Give every hit to the ring it lies closest to and refit, a few times (until nothing moves);
 * a ring left with too few hits (a circle through hits of two rings, once those rings claim
 * them back) is dropped. Returns the rings kept (in order); *left: the hits no ring holds. */
RICH_DEV unsigned reassign(const sdd_rich_finder *f, const struct rich_spot *s, uint64_t all,
                           struct rich_cand *r, unsigned k, uint64_t *left)
{
    for (int it = 0; it < RICH_EM_STEPS && k > 0; it++) {
        uint64_t own[8];
        rich_assign_of(f, s, all, r, k, own);
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
RICH_DEV unsigned disjoint(const sdd_rich_finder *f, const struct rich_spot *s, uint64_t all,
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
RICH_DEV_INLINE unsigned hist_spot(sdd_rich_finder *f, const struct rich_spot *s,
                                   struct rich_cand *out, unsigned max, peak_fn peak_at,
                                   remove_fn remove, update_fn update, seed_fn seed_at)
{
    uint64_t all = s->n == 64 ? ~0ull : (1ull << s->n) - 1;
    bool multi = f->opts.multi_ring;
    uint64_t held = all; /* the hits the histograms hold */
    uint64_t unclaimed;
    unsigned k = hist_search(f, s, &held, &unclaimed, out, max, multi, peak_at, remove, seed_at);
    if (!multi || k == 0 || (k == 1 && rich_popcount64(unclaimed) < f->opts.min_hits)) {
        return disjoint(f, s, all, out, k);
    }
    uint64_t left;
    k = reassign(f, s, all, out, k, &left);
    if (k < max && rich_popcount64(left) >= f->opts.min_hits) {
        update(f, left & ~held, held & ~left);
        held = left;
        k +=
            hist_search(f, s, &held, &unclaimed, out + k, max - k, false, peak_at, remove, seed_at);
    }
    return disjoint(f, s, all, out, k);
}

RICH_DEV unsigned hist_spot_portable(sdd_rich_finder *f, const struct rich_spot *s,
                                     struct rich_cand *out, unsigned max)
{
    hist_build(f, s);
    return hist_spot(f, s, out, max, peak_portable, remove_portable, update_portable,
                     seed_portable);
}

#endif
