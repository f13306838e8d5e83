/* The Almagest (Ptolemy) multi-ring finder's search, in the one source that its two builds
 * share: rich_ptolemy.c (any x86-64) and rich_ptolemy_v3.c (x86-64-v3: popcnt and BMI for
 * the bit masks; never FMA, so the same bits).
 *
 * Multi-ring finder after the Almagest method (REFERENCE §5.6, Lamanna NIM A 766 (2014) 241):
 * pick triplets of hits likely to lie on one ring, the extreme hits of the spot in eight
 * directions taken 90 degrees apart, and test every other hit against each triplet with
 * Ptolemy's theorem (no circle is computed for the test). The triplet with most concyclic hits
 * seeds a ring; the fit refines it, its hits are removed, and the search repeats. */
#ifndef SDDAQ_TRIGGER_RICH_PTOLEMY_CORE_H
#define SDDAQ_TRIGGER_RICH_PTOLEMY_CORE_H

#include <math.h>

#include "trigger/rich_fit_core.h"

/* |a - b| as glibc's hypotf computes it (in double, rounded once to float; the same bits in
 * 200 M random pairs), without the library call, which took a tenth of the method's time. */
static float distance(const struct rich_spot *s, int a, int b)
{
    double dx = s->x[a] - s->x[b], dy = s->y[a] - s->y[b];
    return (float)sqrt(dx * dx + dy * dy);
}

/* The finder of one spot (rich_spot_fn). */
static unsigned ptolemy_spot(sdd_rich_finder *f, const struct rich_spot *s, struct rich_cand *out,
                             unsigned max)
{
    uint64_t alive = s->n == 64 ? ~0ull : (1ull << s->n) - 1;
    unsigned found = 0;
    while (found < max && rich_popcount64(alive) >= f->opts.min_hits) {
        int ext[RICH_NDIR];
        f->kern->extremes(s, alive, ext);
        /* Two kinds of triplet per direction k: the extremes at 0, 90 and 180 degrees (three
         * points of one ring when it is alone or outermost on that side), and the extreme A
         * with the hit B farthest from it and the hit C farthest from both (a wide triangle
         * inside one ring when rings overlap). A hit is often the extreme of neighbouring
         * directions: B and C are looked for once per A. */
        int tri[2 * RICH_NDIR][3];
        bool ok[2 * RICH_NDIR];
        for (int k = 0; k < 2 * RICH_NDIR; k++) {
            int a = ext[k % RICH_NDIR], b = -1, c = -1;
            if (k < RICH_NDIR) {
                b = ext[(k + 2) % RICH_NDIR];
                c = ext[(k + 4) % RICH_NDIR];
            } else {
                for (int j = RICH_NDIR; j < k && b < 0; j++) {
                    b = tri[j][0] == a ? tri[j][1] : -1;
                    c = tri[j][0] == a ? tri[j][2] : -1;
                }
                if (b < 0) { /* a is a hit: alive is not empty */
                    b = f->kern->farthest(s, alive, a, -1);
                    c = f->kern->farthest(s, alive, a, b);
                }
            }
            tri[k][0] = a;
            tri[k][1] = b;
            tri[k][2] = c;
            ok[k] = a >= 0 && b >= 0 && c >= 0 && a != b && b != c && a != c;
        }
        /* The sides of every triplet in one loop, so that the square roots overlap (one
         * triplet at a time, each waited for the last one's concyclic test). */
        float dist[2 * RICH_NDIR][3];
        for (int k = 0; k < 2 * RICH_NDIR; k++) {
            int a = ok[k] ? tri[k][0] : 0, b = ok[k] ? tri[k][1] : 0, c = ok[k] ? tri[k][2] : 0;
            dist[k][0] = distance(s, a, b);
            dist[k][1] = distance(s, a, c);
            dist[k][2] = distance(s, b, c);
        }
        uint64_t sels[2 * RICH_NDIR];
        int counts[2 * RICH_NDIR], ncand = 0;
        for (int k = 0; k < 2 * RICH_NDIR; k++) {
            if (!ok[k]) {
                continue;
            }
            uint64_t sel = f->kern->concyclic(s, alive, tri[k][0], tri[k][1], tri[k][2], dist[k],
                                              f->opts.ptolemy_eps);
            sel |= (1ull << tri[k][0]) | (1ull << tri[k][1]) | (1ull << tri[k][2]);
            int n = (int)rich_popcount64(sel);
            if (n >= f->opts.threshold) {
                sels[ncand] = sel;
                counts[ncand++] = n;
            }
        }
        /* Most concyclic hits first; the first candidate that refines into a ring wins (the
         * refinement depends on the hits alone: hits that failed once fail again). */
        bool got = false;
        uint64_t failed[2 * RICH_NDIR];
        int nfailed = 0;
        while (!got && ncand > 0) {
            int bi = 0;
            for (int i = 1; i < ncand; i++) {
                bi = counts[i] > counts[bi] ? i : bi;
            }
            bool seen = false;
            for (int i = 0; i < nfailed && !seen; i++) {
                seen = failed[i] == sels[bi];
            }
            got = !seen && rich_refine(f, s, alive, sels[bi], 0, &out[found]);
            if (!got && !seen) {
                failed[nfailed++] = sels[bi];
            }
            sels[bi] = sels[ncand - 1];
            counts[bi] = counts[ncand - 1];
            ncand--;
        }
        if (!got) {
            break;
        }
        alive &= ~out[found].hits;
        found++;
    }
    return found;
}

#endif
