/* Internals shared by the Hough finders: the finder object, the candidate list both
 * implementations produce, and the steps that turn candidates into tracks. */
#ifndef SDDAQ_TRIGGER_HOUGH_IMPL_H
#define SDDAQ_TRIGGER_HOUGH_IMPL_H

#include "trigger/hough_line.h"

#define HOUGH_MAX_CELLS   (SDD_HOUGH_MAX_DIM * SDD_HOUGH_MAX_DIM)
#define HOUGH_PADDED_COLS (2 * SDD_HOUGH_MAX_DIM)

/* A candidate cell: the seed's cell layout (layer mask, counter, 30 slots), kept only for
 * cells that pass the layer rule. */
struct hough_cand {
    uint8_t col, row, layers, nlayers;
    uint16_t count;
    uint16_t stubs[SDD_HOUGH_CELL_SLOTS + 1]; /* +1: a scratch slot for branch-free appends */
};

/* The seed's map cell: 32-bit mask, counter and slots, 128 bytes. */
struct hough_seed_cell {
    uint32_t layers;
    uint32_t count;
    uint32_t stubs[SDD_HOUGH_CELL_SLOTS];
};

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
    struct hough_line lines[SDD_HOUGH_MAX_STUBS];
    /* Pass 1 -> 2: each stub's row masks for columns c0 .. c0 + 8 * window_blocks - 1. */
    _Alignas(64) uint32_t stub_rows[SDD_HOUGH_MAX_STUBS][SDD_HOUGH_MAX_DIM];
    struct hough_seed_cell (*seed_map)[SDD_HOUGH_MAX_DIM]; /* SEED impl only */
};

/* 8-column blocks that cover the widest column range the bend window allows. */
int hough_window_blocks(const struct hough_frame *f);

/* Each fills h->cands (in (col, row) order, stubs ascending), h->cand_rows and h->ncands. */
void hough_find_fast(sdd_hough *h, const sdd_stub *stubs, size_t n);
void hough_find_seed(sdd_hough *h, const sdd_stub *stubs, size_t n);

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
