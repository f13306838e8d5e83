/* Multi-ring finder after the Almagest method (REFERENCE §5.6, Lamanna NIM A 766 (2014) 241):
 * pick triplets of hits likely to lie on one ring, the extreme hits of the spot in eight
 * directions taken 90 degrees apart, and test every other hit against each triplet with
 * Ptolemy's theorem (no circle is computed for the test). The triplet with most concyclic hits
 * seeds a ring; the fit refines it, its hits are removed, and the search repeats. */
#include <math.h>

#include "trigger/rich_fit_core.h"

#define NDIR 8 /* extreme hits along x, x+y, y, y-x, -x, ... (45 degree steps) */

static const float DIRX[NDIR] = {1, 0.70710678f, 0, -0.70710678f, -1, -0.70710678f, 0, 0.70710678f};
static const float DIRY[NDIR] = {0, 0.70710678f, 1, 0.70710678f, 0, -0.70710678f, -1, -0.70710678f};

/* The alive hit farthest from a (b < 0), or with the largest min(|a|, |b|) distance. */
static int farthest(const struct rich_spot *s, uint64_t alive, int a, int b)
{
    int best = -1;
    float best_d = -1.0f;
    for (uint64_t m = alive; m != 0; m &= m - 1) {
        int i = __builtin_ctzll(m);
        float da =
            (s->x[i] - s->x[a]) * (s->x[i] - s->x[a]) + (s->y[i] - s->y[a]) * (s->y[i] - s->y[a]);
        if (b >= 0) {
            float db = (s->x[i] - s->x[b]) * (s->x[i] - s->x[b]) +
                       (s->y[i] - s->y[b]) * (s->y[i] - s->y[b]);
            da = fminf(da, db);
        }
        if (da > best_d) {
            best_d = da;
            best = i;
        }
    }
    return best;
}

unsigned rich_ptolemy_spot(sdd_rich_finder *f, const struct rich_spot *s, struct rich_cand *out,
                           unsigned max)
{
    uint64_t alive = s->n == 64 ? ~0ull : (1ull << s->n) - 1;
    unsigned found = 0;
    while (found < max && rich_popcount64(alive) >= f->opts.min_hits) {
        int ext[NDIR];
        float best_p[NDIR];
        for (int k = 0; k < NDIR; k++) {
            ext[k] = -1;
            best_p[k] = -INFINITY;
        }
        for (uint64_t m = alive; m != 0; m &= m - 1) {
            int h = __builtin_ctzll(m);
            for (int k = 0; k < NDIR; k++) {
                float p = s->x[h] * DIRX[k] + s->y[h] * DIRY[k];
                if (p > best_p[k]) {
                    best_p[k] = p;
                    ext[k] = h;
                }
            }
        }
        /* Two kinds of triplet per direction k: the extremes at 0, 90 and 180 degrees (three
         * points of one ring when it is alone or outermost on that side), and the extreme A
         * with the hit B farthest from it and the hit C farthest from both (a wide triangle
         * inside one ring when rings overlap). */
        uint64_t sels[2 * NDIR];
        int counts[2 * NDIR], ncand = 0;
        for (int k = 0; k < 2 * NDIR; k++) {
            int a = ext[k % NDIR], b, c;
            if (k < NDIR) {
                b = ext[(k + 2) % NDIR];
                c = ext[(k + 4) % NDIR];
            } else {
                b = farthest(s, alive, a, -1);
                c = farthest(s, alive, a, b);
            }
            if (a < 0 || b < 0 || c < 0 || a == b || b == c || a == c) {
                continue;
            }
            float dist[3] = {hypotf(s->x[a] - s->x[b], s->y[a] - s->y[b]),
                             hypotf(s->x[a] - s->x[c], s->y[a] - s->y[c]),
                             hypotf(s->x[b] - s->x[c], s->y[b] - s->y[c])};
            uint64_t sel = f->kern->concyclic(s, alive, a, b, c, dist, f->opts.ptolemy_eps);
            sel |= (1ull << a) | (1ull << b) | (1ull << c);
            int n = (int)rich_popcount64(sel);
            if (n >= f->opts.threshold) {
                sels[ncand] = sel;
                counts[ncand++] = n;
            }
        }
        /* Most concyclic hits first; the first candidate that refines into a ring wins. */
        bool got = false;
        while (!got && ncand > 0) {
            int bi = 0;
            for (int i = 1; i < ncand; i++) {
                bi = counts[i] > counts[bi] ? i : bi;
            }
            got = rich_refine(f, s, alive, sels[bi], 0, &out[found]);
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
