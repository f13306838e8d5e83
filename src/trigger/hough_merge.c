/* From candidate cells to tracks. Without merging each candidate cell is a track. With
 * merging, candidate cells that touch (8 neighbours in the rect map, 6 in the hex map) form
 * one cluster when they share all but one of min_layers stubs (duplicates of one track),
 * reported once (see cluster_track) with the union of their stubs. Merging removes the
 * neighbour duplicates that bleeding clusters make; docs/trigger.md shows what it costs. */
#include <math.h>
#include <string.h>

#include "trigger/hough_impl.h"

static unsigned cand_index(const sdd_hough *h, int col, int row)
{
    uint32_t below = h->cand_rows[col] & ((1u << row) - 1u);
    return h->cand_base[col] + (unsigned)__builtin_popcount(below);
}

static void to_track(const sdd_hough *h, const struct hough_cand *c, sdd_hough_track *t)
{
    t->qpt = h->col_qpt[c->col];
    t->phi_t = h->row_phi[c->col & 1][c->row];
    t->col = c->col;
    t->row = c->row;
    t->layers = c->layers;
    t->nlayers = c->nlayers;
    t->nstubs = c->count;
    t->flags = c->count > SDD_HOUGH_CELL_SLOTS ? SDD_TRACK_OVERFLOW : 0;
    t->ncells = 1;
    /* All 30 slots in four 8-lane copies (the last two overlap), zero past the kept ones:
     * no branch on the count. */
    _Static_assert(SDD_HOUGH_CELL_SLOTS == 30, "four 8-slot copies cover the slots");
    typedef int16_t i16x8 __attribute__((vector_size(16))); /* signed compares: SSE2 has them */
    const i16x8 lane = {0, 1, 2, 3, 4, 5, 6, 7};
    int16_t count = (int16_t)(c->count < 32 ? c->count : 32);
    const i16x8 kept = {count, count, count, count, count, count, count, count};
    for (int at = 0; at < 32; at += 8) {
        i16x8 v;
        int from = at < 24 ? at : SDD_HOUGH_CELL_SLOTS - 8; /* the last copy overlaps */
        memcpy(&v, &c->stubs[from], sizeof(v));
        v &= lane + (int16_t)from < kept;
        memcpy(&t->stubs[from], &v, sizeof(v));
    }
}

/* A merged track carries the union of its cells' stubs (in (layer, index) order; the first
 * 30 kept, the rest counted): the duplicates it replaces each held part of the track. */
static void union_stubs(const sdd_hough *h, const uint16_t *cells, unsigned n, sdd_hough_track *t)
{
    uint64_t seen[SDD_HOUGH_MAX_STUBS / 64] = {0};
    unsigned top = 0, most = 0;
    bool overflow = false;
    uint8_t layers = 0;
    for (unsigned i = 0; i < n; i++) {
        const struct hough_cand *c = &h->cands[cells[i]];
        unsigned kept = c->count < SDD_HOUGH_CELL_SLOTS ? c->count : SDD_HOUGH_CELL_SLOTS;
        overflow |= c->count > SDD_HOUGH_CELL_SLOTS;
        most = c->count > most ? c->count : most;
        layers |= c->layers;
        for (unsigned k = 0; k < kept; k++) {
            unsigned s = c->stubs[k];
            seen[s / 64] |= 1ull << (s % 64);
            top = s / 64 + 1 > top ? s / 64 + 1 : top;
        }
    }
    unsigned count = 0;
    for (unsigned l = 0; l < SDD_HOUGH_MAX_LAYERS; l++) {
        if (!(layers & (1u << l))) {
            continue;
        }
        for (unsigned w = 0; w < top; w++) {
            for (uint64_t bits = seen[w]; bits != 0; bits &= bits - 1) {
                unsigned s = w * 64 + (unsigned)__builtin_ctzll(bits);
                if (h->in[s].layer != l) {
                    continue;
                }
                if (count < SDD_HOUGH_CELL_SLOTS) {
                    t->stubs[count] = (uint16_t)s;
                }
                count++;
            }
        }
    }
    /* Stubs beyond a full cell's slots are known only by its counter. */
    t->nstubs = (uint16_t)(count > most ? count : most);
    t->layers = layers;
    t->nlayers = (uint8_t)__builtin_popcount(layers);
    if (overflow || count > SDD_HOUGH_CELL_SLOTS) {
        t->flags |= SDD_TRACK_OVERFLOW;
    }
}

/* The cluster's track: the centroid of its cells with the most layers (a clean track's
 * full-layer cells lie point-symmetric around the cell that holds it), reported with the
 * full-layer cell nearest that centroid (more stubs, then map order, break ties). */
static void cluster_track(const sdd_hough *h, const uint16_t *cells, unsigned n, sdd_hough_track *t)
{
    const sdd_hough_geom *g = &h->opts.geom;
    float cq[HOUGH_MAX_CELLS], cp[HOUGH_MAX_CELLS];
    int most = 0;
    for (unsigned i = 0; i < n; i++) {
        int nl = h->cands[cells[i]].nlayers;
        most = nl > most ? nl : most;
    }
    double sq = 0, sp = 0;
    unsigned m = 0;
    for (unsigned i = 0; i < n; i++) {
        const struct hough_cand *c = &h->cands[cells[i]];
        cq[i] = h->col_qpt[c->col];
        cp[i] = h->row_phi[c->col & 1][c->row];
        if (c->nlayers == most) {
            sq += cq[i];
            sp += cp[i];
            m++;
        }
    }
    float mq = (float)(sq / m), mp = (float)(sp / m);
    float row_step = 2.0f * g->phi_half / (float)g->nrows;
    unsigned best = 0;
    float best_d = INFINITY;
    for (unsigned i = 0; i < n; i++) {
        const struct hough_cand *c = &h->cands[cells[i]];
        if (c->nlayers != most) {
            continue;
        }
        float dq = (cq[i] - mq) / h->frame.dx, dp = (cp[i] - mp) / row_step;
        float d = dq * dq + dp * dp;
        const struct hough_cand *b = &h->cands[cells[best]];
        if (d < best_d - 1e-4f ||
            (d <= best_d + 1e-4f &&
             (c->count > b->count || (c->count == b->count && cells[i] < cells[best])))) {
            best = i;
            best_d = d < best_d ? d : best_d;
        }
    }
    to_track(h, &h->cands[cells[best]], t);
    t->qpt = mq;
    t->phi_t = mp;
    t->ncells = (uint16_t)n;
    if (n > 1) {
        t->flags |= SDD_TRACK_MERGED;
        union_stubs(h, cells, n, t);
    }
}

/* Stubs two candidates have in common among their kept lists. */
static unsigned shared_stubs(const struct hough_cand *a, const struct hough_cand *b)
{
    unsigned na = a->count < SDD_HOUGH_CELL_SLOTS ? a->count : SDD_HOUGH_CELL_SLOTS;
    unsigned nb = b->count < SDD_HOUGH_CELL_SLOTS ? b->count : SDD_HOUGH_CELL_SLOTS;
    unsigned same = 0;
    for (unsigned i = 0; i < na; i++) {
        for (unsigned k = 0; k < nb; k++) {
            same += a->stubs[i] == b->stubs[k];
        }
    }
    return same;
}

/* Flood one cluster from candidate `start`, clearing its cells from `open`; returns the
 * number of cells written to `cells`. */
static unsigned flood(const sdd_hough *h, unsigned start, uint32_t open[SDD_HOUGH_MAX_DIM],
                      uint16_t *cells)
{
    uint16_t stack[HOUGH_MAX_CELLS];
    unsigned top = 0, count = 0;
    const struct hough_cand *s = &h->cands[start];
    open[s->col] &= ~(1u << s->row);
    stack[top++] = (uint16_t)start;
    while (top > 0) {
        unsigned idx = stack[--top];
        const struct hough_cand *c = &h->cands[idx];
        cells[count++] = (uint16_t)idx;
        int nc[8], nr[8];
        int nn = sdd_hough_neighbours(&h->opts.geom, h->opts.shape, c->col, c->row, nc, nr);
        for (int k = 0; k < nn; k++) {
            if (!(open[nc[k]] & (1u << nr[k]))) {
                continue;
            }
            /* Only duplicates join: a neighbour that shares at least min_layers - 1 stubs.
             * Touching cells of two different tracks (or a fake bridge) stay apart. */
            unsigned ni = cand_index(h, nc[k], nr[k]);
            if (shared_stubs(c, &h->cands[ni]) + 1 >= h->opts.geom.min_layers) {
                open[nc[k]] &= ~(1u << nr[k]);
                stack[top++] = (uint16_t)ni;
            }
        }
    }
    return count;
}

size_t hough_emit(sdd_hough *h, sdd_hough_track *out, size_t max_out)
{
    if (!h->opts.merge) {
        for (unsigned i = 0; i < h->ncands && i < max_out; i++) {
            to_track(h, &h->cands[i], &out[i]);
        }
        return h->ncands;
    }
    uint32_t open[SDD_HOUGH_MAX_DIM];
    for (int i = 0; i < SDD_HOUGH_MAX_DIM; i++) {
        open[i] = h->cand_rows[i];
    }
    size_t ntracks = 0;
    for (unsigned i = 0; i < h->ncands; i++) {
        const struct hough_cand *c = &h->cands[i];
        if (!(open[c->col] & (1u << c->row))) {
            continue;
        }
        uint16_t cells[HOUGH_MAX_CELLS];
        unsigned size = flood(h, i, open, cells);
        if (ntracks < max_out) {
            cluster_track(h, cells, size, &out[ntracks]);
        }
        ntracks++;
    }
    return ntracks;
}
