/* Internals shared by the Hough finders: the finder object, the candidate list both
 * implementations produce, and the steps that turn candidates into tracks. */
#ifndef SDDAQ_TRIGGER_HOUGH_IMPL_H
#define SDDAQ_TRIGGER_HOUGH_IMPL_H

#include "trigger/hough_line.h"

#define HOUGH_MAX_CELLS   (SDD_HOUGH_MAX_DIM * SDD_HOUGH_MAX_DIM)
#define HOUGH_PADDED_COLS (2 * SDD_HOUGH_MAX_DIM)
#define HOUGH_X16_LANES   16 /* stubs per block on the AVX-512 path */

/* A candidate cell: the seed's cell layout (layer mask, counter, 30 slots), kept only for
 * cells that pass the layer rule. */
struct hough_cand {
    uint8_t col, row, layers, nlayers;
    uint16_t count;
    /* Room past the kept slots for branch-free appends: one index (portable path) or a
     * whole 16-lane store that starts at a slot below 32 (AVX-512 path). */
    uint16_t stubs[32 + HOUGH_X16_LANES];
};

/* The seed's map cell: 32-bit mask, counter and slots, 128 bytes. */
struct hough_seed_cell {
    uint32_t layers;
    uint32_t count;
    uint32_t stubs[SDD_HOUGH_CELL_SLOTS];
};

/* The AVX-512 path works on blocks of 16 stubs of one layer, padded: up to this many
 * positions. */
#define HOUGH_ORDER_SLOTS (SDD_HOUGH_MAX_STUBS + SDD_HOUGH_MAX_LAYERS * HOUGH_X16_LANES)

struct sdd_hough {
    sdd_hough_opts opts;
    struct hough_frame frame;
    /* Hot state of the fast finder: one row bit per column and layer (7 x 64 x 4 B, padded). */
    /* Planes and candidate rows are padded past the last column, so that a stub's window of
     * columns (which starts at its first column) never needs a bounds check. */
    _Alignas(64) uint32_t planes[SDD_HOUGH_MAX_LAYERS][HOUGH_PADDED_COLS];
    _Alignas(64) uint32_t cand_rows[HOUGH_PADDED_COLS];       /* candidate bits per column */
    uint16_t cand_cell[SDD_HOUGH_MAX_DIM][SDD_HOUGH_MAX_DIM]; /* candidate index of a cell */
    int window_blocks;                                        /* 8-column blocks per stub */
    uint16_t cand_base[SDD_HOUGH_MAX_DIM + 1];                /* first candidate index per column */
    float col_qpt[SDD_HOUGH_MAX_DIM];                         /* cell centres, */
    float row_phi[2][SDD_HOUGH_MAX_DIM]; /* by column parity (hex odd columns shift) */
    unsigned ncands;
    struct hough_cand cands[HOUGH_MAX_CELLS];
    /* Stubs with a valid layer in (layer, index) order (hough_layer_order). */
    size_t norder;
    size_t group[SDD_HOUGH_MAX_LAYERS + 1];
    _Alignas(64) uint16_t order[HOUGH_ORDER_SLOTS];
    struct hough_line lines[SDD_HOUGH_MAX_STUBS];
    union {
        /* Pass 1 -> 2: each stub's row masks for columns c0 .. c0 + 8 * window_blocks - 1. */
        _Alignas(64) uint32_t stub_rows[SDD_HOUGH_MAX_STUBS][SDD_HOUGH_MAX_DIM];
        /* AVX-512 path: position p's row masks in column c at x16_rows[c * norder + p]. */
        _Alignas(64) uint32_t x16_rows[SDD_HOUGH_MAX_DIM * HOUGH_ORDER_SLOTS];
    };
    const sdd_stub *in; /* the stubs of the event being found (for the output step) */
    bool use_x16;       /* the AVX-512 path */
    struct hough_seed_cell (*seed_map)[SDD_HOUGH_MAX_DIM]; /* SEED impl only */
};

/* The indices of the stubs with layer < nlayers, grouped by layer, ascending in each: layer
 * l's at order[group[l]] .. order[group[l + 1] - 1], each group padded with HOUGH_ORDER_PAD
 * to a multiple of pad (a power of two). Returns group[nlayers]. */
#define HOUGH_ORDER_PAD 0xffffu
size_t hough_layer_order(const sdd_stub *stubs, size_t n, unsigned nlayers, unsigned pad,
                         uint16_t *order, size_t *group);

/* Candidate bits per column from the planes, and each candidate's cell, index and layer
 * mask (stub lists empty); returns the candidate count. */
unsigned hough_mark_candidates(sdd_hough *h);

/* True when this CPU can run the AVX-512 path. */
bool hough_x16_supported(void);

/* 8-column blocks that cover the widest column range the bend window allows. */
int hough_window_blocks(const struct hough_frame *f);

/* Each fills h->cands (in (col, row) order, stubs in (layer, index) order), h->cand_rows and
 * h->ncands. */
void hough_find_fast(sdd_hough *h, const sdd_stub *stubs, size_t n);
void hough_find_seed(sdd_hough *h, const sdd_stub *stubs, size_t n);
void hough_find_x16(sdd_hough *h, const sdd_stub *stubs, size_t n);

/* Turn h->cands into tracks, merging clusters when asked; returns the track count. */
size_t hough_emit(sdd_hough *h, sdd_hough_track *out, size_t max_out);

/* Bits set at and above min of nlayers stacked bit words: a bit-sliced counter per row. */
static inline uint32_t hough_at_least(const uint32_t *words, int nwords, size_t stride, int min)
{
    uint32_t s0 = 0, s1 = 0, s2 = 0;
    for (int l = 0; l < nwords; l++) {
        uint32_t w = words[(size_t)l * stride];
        uint32_t c0 = s0 & w;
        s0 ^= w;
        uint32_t c1 = s1 & c0;
        s1 ^= c0;
        s2 |= c1;
    }
    /* Compare the 3-bit count (s2 s1 s0) with the constant min, most significant bit first. */
    uint32_t m2 = (min & 4) ? UINT32_MAX : 0, m1 = (min & 2) ? UINT32_MAX : 0;
    uint32_t m0 = (min & 1) ? UINT32_MAX : 0;
    uint32_t low = (s1 & ~m1) | (~(s1 ^ m1) & (s0 | ~m0));
    return (s2 & ~m2) | (~(s2 ^ m2) & low);
}

#endif
