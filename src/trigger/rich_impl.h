/* Internals shared by the RICH trigger files (never installed): the PM table's layout, the
 * little-endian load and store helpers of the packet code, and the finder object. */
#ifndef SDDAQ_TRIGGER_RICH_IMPL_H
#define SDDAQ_TRIGGER_RICH_IMPL_H

#include <string.h>
#ifndef __cplusplus
#include <stdatomic.h>
#endif

#include "sddaq/rich.h"

#define RICH_LOG "rich"

/* GCC on x86-64 builds the AVX-512 and the AVX2 kernels (target attributes, chosen at run
 * time). The AVX2 ones leave out FMA: the build never fuses, so no kernel may. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__)
#define RICH_HAVE_V4 1
#define RICH_TARGET_V4 \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,bmi,bmi2,popcnt,lzcnt")))
#define RICH_HAVE_V3   1
#define RICH_TARGET_V3 __attribute__((target("avx2,bmi,bmi2,popcnt,lzcnt")))
#endif

/* C11 and the CUDA C++ build (src/trigger/cuda/) spell alignment differently. */
#ifdef __cplusplus
#define RICH_ALIGN64 alignas(64)
#else
#define RICH_ALIGN64 _Alignas(64)
#endif

/* Hexagonal grid: rows of PMs at y = j * pitch * sqrt(3)/2, x = (i + (j odd) / 2) * pitch.
 * A (row, column) lookup gives the PM index for the nearest-PM search. */
#define RICH_GRID_HALF 40 /* rows and columns -40..40 around the centre */
#define RICH_GRID_DIM  (2 * RICH_GRID_HALF + 1)

struct sdd_rich_pmtab {
    sdd_rich_geom geom;
    int npm;         /* PMs per spot */
    float row_pitch; /* pitch * sqrt(3) / 2 */
    /* By channel (spot * SDD_RICH_SPOT_PMS + pm); NaN for channels with no PM. */
    float x[SDD_RICH_CHANNELS];
    float y[SDD_RICH_CHANNELS];
    int8_t board[SDD_RICH_CHANNELS];            /* -1: no PM */
    int16_t grid[RICH_GRID_DIM][RICH_GRID_DIM]; /* [row][col] -> pm, -1 outside the disc */
};

static inline uint16_t rich_ld16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

static inline uint32_t rich_ld32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static inline void rich_st16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static inline void rich_st32(uint8_t *p, uint32_t v)
{
    rich_st16(p, (uint16_t)v);
    rich_st16(p + 2, (uint16_t)(v >> 16));
}

/* Histogram finder: 8x8 candidate centres 32 mm apart over +-128 mm, distance bins of 16 mm
 * over [0, 256); bin RICH_NBINS collects everything farther. */
#define RICH_GRID    8
#define RICH_CENTRES (RICH_GRID * RICH_GRID)
#define RICH_CELL    32.0f
#define RICH_BIN     16.0f
#define RICH_NBINS   16
#define RICH_BIN_LO  4     /* rows counted: [64, 224) mm, what rings of 80-200 mm give about */
#define RICH_BIN_HI  14    /* centres up to 23 mm off (REFERENCE §5.8: R <= 190 mm) */
#define RICH_R_MIN   40.0f /* fitted radii below this are not rings */
/* Candidate centre c (row-major) lies at (RICH_CENTRE_X(c), RICH_CENTRE_Y(c)): -112 to 112 mm. */
#define RICH_CENTRE_X(c) (RICH_CELL * (float)((c) % RICH_GRID) - 112.0f)
#define RICH_CENTRE_Y(c) (RICH_CELL * (float)((c) / RICH_GRID) - 112.0f)

/* The hits of one spot, as the finders see them. */
struct rich_spot {
    unsigned n;
    RICH_ALIGN64 float x[SDD_RICH_MAX_HITS];
    RICH_ALIGN64 float y[SDD_RICH_MAX_HITS];
    uint16_t pm[SDD_RICH_MAX_HITS]; /* PM index within the spot */
    uint8_t src[SDD_RICH_MAX_HITS]; /* index in the caller's hit list */
};

struct sdd_rich_finder {
    sdd_rich_find_opts opts;
    sdd_rich_pmtab *tab;
    bool avx512; /* the histogram runs the AVX-512 build, Ptolemy the x86-64-v3 one */
    bool avx2;   /* both run the AVX2 (x86-64-v3) build (never both flags) */
    bool coop;   /* GPU: the 32 lanes of a warp work on this finder together (cuda/) */
    const struct rich_kern *kern;
    float r_max; /* largest ring radius the geometry can give (beta = 1) plus the window */
    struct rich_spot spot[SDD_RICH_SPOTS];
    /* Every PM's distance bin to every candidate centre (both spots share the grid): PMs and
     * centres are fixed, so the histogram's distances are a table lookup, 64 bytes per hit. */
    uint8_t (*pm_bins)[RICH_CENTRES];
    const uint8_t *bins[SDD_RICH_MAX_HITS]; /* the current spot's hits' rows of pm_bins */
    /* The counts [bin][centre]. */
    RICH_ALIGN64 uint8_t hist[RICH_NBINS + 1][RICH_CENTRES];
    /* 0xFF at (bin, centre) pairs whose peak gave no ring; zero between spots. */
    RICH_ALIGN64 uint8_t veto[RICH_NBINS][RICH_CENTRES];
};

/* A ring candidate within one spot: hits as a mask over the spot's hits. */
struct rich_cand {
    sdd_rich_circle c;
    uint64_t hits;
    unsigned nhits;
    float rms;
};

/* The finders of one spot; rings are appended to out (room for max), return the count. */
unsigned rich_hist_spot(sdd_rich_finder *f, const struct rich_spot *s, struct rich_cand *out,
                        unsigned max);
unsigned rich_ptolemy_spot(sdd_rich_finder *f, const struct rich_spot *s, struct rich_cand *out,
                           unsigned max);
/* rich_ptolemy_spot() built for x86-64-v3 (only where rich_avx2_supported()). */
unsigned rich_ptolemy_spot_v3(sdd_rich_finder *f, const struct rich_spot *s, struct rich_cand *out,
                              unsigned max);
/* rich_hist_spot() with the AVX-512 histogram steps (only where rich_avx512_supported()). */
unsigned rich_hist_spot_avx512(sdd_rich_finder *f, const struct rich_spot *s, struct rich_cand *out,
                               unsigned max);
/* rich_hist_spot() with the AVX2 histogram steps (only where rich_avx2_supported()). */
unsigned rich_hist_spot_avx2(sdd_rich_finder *f, const struct rich_spot *s, struct rich_cand *out,
                             unsigned max);

/* Sums over points centred on their centroid (xm, ym): u = x - xm, v = y - ym, z = u^2 + v^2. */
struct rich_moments {
    double n, xm, ym;
    double uu, vv, uv, uuu, vvv, uvv, vuu, zz, uz, vz;
};

/* Ptolemy's directions: x, x+y, y, y-x, -x, ... (45 degree steps). */
#define RICH_NDIR 8
static const float RICH_DIRX[RICH_NDIR] = {1,  0.70710678f,  0, -0.70710678f,
                                           -1, -0.70710678f, 0, 0.70710678f};
static const float RICH_DIRY[RICH_NDIR] = {0, 0.70710678f,  1,  0.70710678f,
                                           0, -0.70710678f, -1, -0.70710678f};

/* The finder's per-hit kernels, in a portable and an AVX-512 build that give identical
 * results (same float operations, sums in the same order: 16 lanes, then a fixed tree).
 * on_circle: the hits of alive within `window` of circle c (|d - R| < window).
 * concyclic: Ptolemy's test of every hit against a triplet.
 * residuals: the sum of (d - R)^2 over the hits of mask, added hit after hit in index order.
 * moments: the moments of the hits of mask, summed in float (hits of a spot are within a
 * few hundred mm: relative 1e-7 is ample for a ring), for the fits; false for fewer than 3.
 * x and y must be readable (finite) up to the next multiple of 16 past n. */
struct rich_kern {
    uint64_t (*on_circle)(const struct rich_spot *s, uint64_t alive, const sdd_rich_circle *c,
                          float window);
    /* z: also the sums of z = u^2 + v^2 (zz, uz, vz), which only Taubin's fit reads; without
     * it a kernel may leave them 0. */
    bool (*moments)(const struct rich_spot *s, uint64_t mask, bool z, struct rich_moments *m);
    float (*residuals)(const struct rich_spot *s, uint64_t mask, const sdd_rich_circle *c);
    /* The hits of alive that pass Ptolemy's test |2 max - sum| <= eps max with hits a, b, c
     * (ab, ac, bc: their distances). */
    uint64_t (*concyclic)(const struct rich_spot *s, uint64_t alive, int a, int b, int c,
                          const float dist[3], float eps);
    /* Each hit of all to the ring of r[0..k) it lies closest to, |d - R| < window (ties to
     * the earlier ring): own[j], the hits of ring j. */
    void (*assign)(const struct rich_spot *s, uint64_t all, const struct rich_cand *r, unsigned k,
                   float window, uint64_t *own);
    /* Ptolemy's triplets. ext[k]: the first alive hit with the largest x RICH_DIRX[k] +
     * y RICH_DIRY[k] (-1 when alive is empty). */
    void (*extremes)(const struct rich_spot *s, uint64_t alive, int ext[RICH_NDIR]);
    /* The first alive hit farthest from hit a (b < 0) or with the largest of the smaller
     * squared distances to a and to b; -1 when alive is empty. */
    int (*farthest)(const struct rich_spot *s, uint64_t alive, int a, int b);
};

extern const struct rich_kern rich_kern_portable;
extern const struct rich_kern rich_kern_avx512; /* only where rich_avx512_supported() */
extern const struct rich_kern rich_kern_avx2;   /* only where rich_avx2_supported() */
#ifdef RICH_HAVE_V3
/* AVX2 steps the AVX-512 kernels share: Ptolemy's (eight directions fill 8 lanes) and the
 * hit assignment (a ring per step, eight hits in the lanes). */
void rich_assign_avx2(const struct rich_spot *s, uint64_t all, const struct rich_cand *r,
                      unsigned k, float window, uint64_t *own);
void rich_extremes_avx2(const struct rich_spot *s, uint64_t alive, int ext[RICH_NDIR]);
int rich_farthest_avx2(const struct rich_spot *s, uint64_t alive, int a, int b);
#endif

#ifndef __cplusplus
/* sdd_rich_merge() that also stores the count of merged events into *merged (release) every
 * RICH_PUBLISH events and at the end, so other threads can work on them while it goes on;
 * merged may be NULL. */
#define RICH_PUBLISH 16
/* An index entry whose offset has this bit is an event held back from an earlier buffer, in
 * the carry's bytes (buffers are at most 1 GiB, so the bit is free). */
#define RICH_CARRY_BIT 0x80000000u
/* Where the merge reads the indexed events, and how it ends. */
struct rich_merge_in {
    const uint8_t *buf;   /* offsets without RICH_CARRY_BIT */
    const uint8_t *carry; /* offsets with it */
    uint32_t window;
    uint64_t until; /* stop at the first event whose window reaches this time (rich_when), one
                     * a later buffer may still add to; held[] gets the entries not merged */
    bool append;    /* add to out's events instead of starting over */
};
/* When indexed event k happened: its burst, then its timestamp (ticks since the burst began). */
static inline uint64_t rich_when(const sdd_rich_index *idx, uint32_t k)
{
    return (uint64_t)idx->burst[k] << 32 | idx->timestamp[k];
}
uint32_t rich_merge_publish(const struct rich_merge_in *in, const sdd_rich_index *idx,
                            sdd_rich_batch *out, sdd_rich_merge_stats *st, _Atomic uint32_t *merged,
                            uint32_t *held, uint32_t *nheld);
/* rich_carry.c: the turn (buffer order) and the events held for the next buffer. */
bool rich_carry_take(sdd_rich_carry *c, uint64_t seq);
void rich_carry_give(sdd_rich_carry *c, uint64_t seq);
const uint8_t *rich_carry_bytes(const sdd_rich_carry *c);
void rich_carry_index(const sdd_rich_carry *c, sdd_rich_index *idx);
bool rich_carry_keep(sdd_rich_carry *c, const uint8_t *buf, const sdd_rich_index *idx,
                     const uint32_t *held, uint32_t n);
void rich_carry_clear(sdd_rich_carry *c);
uint64_t rich_carry_horizon(sdd_rich_carry *c, const sdd_rich_index *idx, unsigned nboards);
/* Index the events of buf's packets in [from, len) after those already in idx
 * (sdd_rich_find_events() without the reset): from is 0, or a position the walk from 0 passes
 * (rich_packet_split), for the walk's second part. */
uint32_t rich_find_events_from(const void *buf, size_t from, size_t len, const sdd_rich_pmtab *t,
                               sdd_rich_index *idx, sdd_rich_ef_stats *st);
/* Where a walk over buf can be cut in two: the end of the first whole packet at or past near
 * (len if none), for two threads to index [0, cut) and [cut, len) with the counts and
 * index of one walk. */
size_t rich_packet_split(const void *buf, size_t len, const sdd_rich_pmtab *t, size_t near);
#endif

/* Fill the PM-to-centre bin table for npm PMs at (x[i], y[i]). */
void rich_hist_table(uint8_t (*table)[RICH_CENTRES], const float *x, const float *y, int npm);

/* The AVX-512 histogram can run here (x86-64-v4 CPU and a compiler that built it). */
bool rich_avx512_supported(void);
/* The AVX2 histogram can run here (x86-64-v3 vectors, and a compiler that built them). */
bool rich_avx2_supported(void);

#endif
