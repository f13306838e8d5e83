/* Software triggers. This part: the CMS-style L1 track finder (seed 000 §5.3-5.4). Stubs from
 * six barrel layers of one detector sector are turned into straight lines in the
 * (q/pT, phi_T) Hough plane; a track candidate is a map cell crossed by stubs from at least
 * min_layers distinct layers. Two maps cover the same plane with equal cell area: rectangular
 * bins and flat-top hexagons. A truth-level generator, an event file format and a scorer
 * against truth come with them. Formats are specified in docs/formats.md, the algorithms in
 * docs/trigger.md.
 *
 * Units: metres, radians, GeV/c, tesla. phi is measured from the sector centre. q/pT is in
 * c/GeV (charge over transverse momentum). */
#ifndef SDDAQ_TRIGGER_H
#define SDDAQ_TRIGGER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sddaq/api.h"
#include "sddaq/err.h"
#include "sddaq/hist.h"
#include "sddaq/ring.h"
#include "sddaq/rich.h"     /* the NA62-style RICH L0 trigger */
#include "sddaq/rich_gpu.h" /* its ring finder on a CUDA GPU */

/* ---- Stubs ---------------------------------------------------------------------------- */

#define SDD_STUB_PACKED_BYTES 6  /* 48-bit packed stub */
#define SDD_HOUGH_MAX_LAYERS  7  /* layer ids 0..6; the 3-bit field's 7 is never valid */
#define SDD_HOUGH_MAX_DIM     32 /* map columns and rows at most 32 (one 32-bit word per column) */
#define SDD_HOUGH_CELL_SLOTS  30 /* stub-index slots per cell, as in the seed's cell layout */
#define SDD_HOUGH_MAX_STUBS   4096 /* stubs per sector event accepted by the finder */

/* Ranges of the packed fields (docs/formats.md "Hough stub"). */
#define SDD_STUB_R_MIN    0.2f
#define SDD_STUB_R_MAX    1.2f
#define SDD_STUB_PHI_MAX  0.25f /* phi in [-0.25, 0.25) rad */
#define SDD_STUB_Z_MAX    1.2f  /* z in [-1.2, 1.2) m */
#define SDD_STUB_BEND_MAX 0.5f  /* bend in [-0.5, 0.5) c/GeV, 32 steps */

enum sdd_stub_flags {
    SDD_STUB_VALID = 1u << 0,   /* set on every real stub; a packed stub without it is rejected */
    SDD_STUB_OVERLAP = 1u << 1, /* lies in the overlap with a neighbouring sector (sent to both) */
};

/* Unpacked stub: what the finder works on. */
typedef struct sdd_stub {
    float r;       /* radius, m */
    float phi;     /* azimuth relative to the sector centre, rad */
    float z;       /* m */
    float bend;    /* the front end's q/pT estimate from the stub bend, c/GeV */
    uint8_t layer; /* 0 = innermost */
    uint8_t flags; /* sdd_stub_flags */
} sdd_stub;

/* Pack one stub into 6 bytes (little-endian 48-bit word). Values are quantised to the field
 * steps. Returns SDD_EINVAL when a value is not finite or lies outside its field's range,
 * layer >= 7, the VALID flag is missing or an unknown flag bit is set; out is untouched
 * then. */
SDD_API sdd_err sdd_stub_pack(const sdd_stub *s, uint8_t out[SDD_STUB_PACKED_BYTES]);

/* Unpack one stub; every quantity comes back at the centre of its quantisation step. Returns
 * SDD_ECORRUPT for a stub without the VALID bit or with layer 7; s is untouched then. */
SDD_API sdd_err sdd_stub_unpack(const uint8_t in[SDD_STUB_PACKED_BYTES], sdd_stub *s);

/* Unpack a run of packed stubs. len must be a multiple of 6 (else SDD_EPROTO) and hold at
 * most max stubs (else SDD_ETOOBIG); a bad stub fails the whole run with SDD_ECORRUPT and
 * *bad_index (when not NULL) names it. On success *n is the number of stubs written. */
SDD_API sdd_err sdd_stubs_unpack(const void *buf, size_t len, sdd_stub *out, size_t max, size_t *n,
                                 size_t *bad_index);

/* ---- Sector geometry and the Hough map ------------------------------------------------- */

typedef struct sdd_hough_geom {
    float bfield;       /* T; 3.8 */
    float pivot_r;      /* reference radius r_T of phi_T, m; 0.6 */
    float phi_half;     /* map covers phi_T in [-phi_half, +phi_half]; pi/32 + 0.05 */
    float sector_half;  /* the sector proper, |phi_T| <= pi/32; the rest is overlap */
    float qpt_max;      /* map covers q/pT in [-qpt_max, +qpt_max] = 1/pT_min; 0.5 */
    float bend_window;  /* a stub fills only columns within this of its bend; 0.25; <= 0 off */
    uint8_t ncols;      /* q/pT bins, 1..32; 32 */
    uint8_t nrows;      /* phi_T bins, 1..32; 32 */
    uint8_t nlayers;    /* 1..7; 6 */
    uint8_t min_layers; /* candidate rule: stubs from at least this many layers; 5 */
    float layer_r[SDD_HOUGH_MAX_LAYERS]; /* nominal layer radii (generator), m */
} sdd_hough_geom;

/* Defaults of REFERENCE.md §4: 3.8 T, barrel radii 0.23 0.36 0.51 0.68 0.89 1.08 m, 32x32. */
SDD_API void sdd_hough_geom_default(sdd_hough_geom *g);

/* SDD_EINVAL with a logged reason when a field is out of range or inconsistent. */
SDD_API sdd_err sdd_hough_geom_check(const sdd_hough_geom *g);

/* k = 0.299792458 * B / 2: k * r * q/pT is the bending angle at radius r (rad). */
SDD_API float sdd_hough_curvature_k(const sdd_hough_geom *g);

typedef enum sdd_hough_shape {
    SDD_HOUGH_RECT = 0, /* ncols x nrows rectangular bins */
    SDD_HOUGH_HEX = 1,  /* flat-top hexagons of equal area, odd columns shifted by half a cell */
} sdd_hough_shape;

typedef enum sdd_hough_impl {
    SDD_HOUGH_FAST = 0, /* layer bit-planes in L1, stub lists only for candidate cells */
    SDD_HOUGH_SEED = 1, /* literal port of the seed's cell layout (30 slots + mask + counter per
                         * cell, whole map cleared per event): the reference and the baseline */
} sdd_hough_impl;

/* The vector code of the FAST finder. Every choice gives the same output. */
typedef enum sdd_hough_simd {
    SDD_HOUGH_SIMD_AUTO = 0,   /* AVX512 where the CPU has it, else X8 */
    SDD_HOUGH_SIMD_X8 = 1,     /* 8-lane vectors, stub by stub (an AVX2 build where the CPU
                                * has AVX2; portable C elsewhere) */
    SDD_HOUGH_SIMD_AVX512 = 2, /* 16 stubs at a time, column by column (x86-64-v4);
                                * sdd_hough_create gives SDD_ENOTSUP on other CPUs */
} sdd_hough_simd;

typedef struct sdd_hough_opts {
    sdd_hough_geom geom;
    sdd_hough_shape shape;
    sdd_hough_impl impl;
    sdd_hough_simd simd; /* FAST only; sdd_hough_get_opts() reports the one taken */
    bool merge;          /* merge clusters of neighbouring candidate cells into one track */
    /* Cell test: a stub counts for a cell when its line crosses the cell shrunk by cell_scale
     * about its centre. 1 (default) = the line crosses the cell; smaller values accept only
     * lines through the cell's core: fewer fakes, some efficiency lost (docs/trigger.md).
     * Both maps, range (0, 1]. */
    float cell_scale;
} sdd_hough_opts;

/* geom = defaults, RECT, FAST, SIMD AUTO, no merge, cell_scale 1. */
SDD_API void sdd_hough_opts_default(sdd_hough_opts *o);

enum sdd_hough_track_flags {
    SDD_TRACK_OVERFLOW = 1u << 0, /* the cell counted more stubs than SDD_HOUGH_CELL_SLOTS */
    SDD_TRACK_MERGED = 1u << 1,   /* stands for a cluster of several candidate cells */
};

/* One track candidate: a map cell (or, merged, the best cell of a cluster) and its stubs. */
typedef struct sdd_hough_track {
    float qpt;      /* cell centre, c/GeV */
    float phi_t;    /* cell centre, rad */
    uint8_t col;    /* q/pT column */
    uint8_t row;    /* phi_T row */
    uint8_t layers; /* bit L set when a stub of layer L crosses the cell */
    uint8_t nlayers;
    uint16_t nstubs; /* stubs that crossed the cell; only the first SDD_HOUGH_CELL_SLOTS kept */
    uint16_t flags;  /* sdd_hough_track_flags */
    uint16_t ncells; /* cells in the merged cluster (1 when not merged) */
    /* Indices into the input stub array, by layer (innermost first), then ascending. */
    uint16_t stubs[SDD_HOUGH_CELL_SLOTS];
} sdd_hough_track;

typedef struct sdd_hough sdd_hough;

/* Build a finder. The finder is not thread safe: one per thread. Not for the data path. */
SDD_API sdd_err sdd_hough_create(const sdd_hough_opts *opts, sdd_hough **out);
SDD_API void sdd_hough_destroy(sdd_hough *h);
SDD_API const sdd_hough_opts *sdd_hough_get_opts(const sdd_hough *h);

/* Find the track candidates of one sector event. Stubs with layer >= geom.nlayers are
 * ignored. Tracks come out in (col, row) order and only the first max_out are written.
 * Returns the number of candidates found (may exceed max_out, like snprintf), or
 * SDD_ETOOBIG for more than SDD_HOUGH_MAX_STUBS stubs. No allocation, no locks. */
SDD_API int sdd_hough_find(sdd_hough *h, const sdd_stub *stubs, size_t n, sdd_hough_track *out,
                           size_t max_out);

/* Map geometry, for scoring, tests and plots. */

/* Centre of cell (col, row) in (q/pT, phi_T). */
SDD_API void sdd_hough_cell_centre(const sdd_hough_geom *g, sdd_hough_shape shape, int col, int row,
                                   float *qpt, float *phi_t);

/* The cell that contains the point, false when it lies outside every cell. */
SDD_API bool sdd_hough_cell_at(const sdd_hough_geom *g, sdd_hough_shape shape, float qpt,
                               float phi_t, int *col, int *row);

/* Neighbours of a cell inside the map (8 for rect, 6 for hex in the interior). Writes up to
 * 8 (col, row) pairs and returns their count. */
SDD_API int sdd_hough_neighbours(const sdd_hough_geom *g, sdd_hough_shape shape, int col, int row,
                                 int cols_out[8], int rows_out[8]);

/* Rows of column col crossed by a stub's line phi_T = phi + k (r - r_T) q/pT, as a bit mask
 * (bit = row), ignoring the bend window. The finder uses exactly this test. */
SDD_API uint32_t sdd_hough_column_rows(const sdd_hough_geom *g, sdd_hough_shape shape,
                                       const sdd_stub *s, int col);

/* ---- Truth-level generator and event files --------------------------------------------- */

#define SDD_HOUGH_EVENT_MAX_STUBS  1024
#define SDD_HOUGH_EVENT_MAX_TRACKS 512

enum sdd_truth_kind {
    SDD_TRUTH_SIGNAL = 0, /* hard-scatter track, q/pT uniform within the map */
    SDD_TRUTH_PILEUP = 1, /* soft track, 1/pT^2 spectrum */
};

typedef struct sdd_truth_track {
    float qpt;   /* c/GeV */
    float phi0;  /* at the beam line, relative to the sector centre, rad */
    float phi_t; /* at the pivot radius, rad */
    float z0;    /* m */
    float eta;
    uint8_t layers; /* bit L set when the track left a stub in layer L of this sector */
    uint8_t kind;   /* sdd_truth_kind */
} sdd_truth_track;

/* One sector event with its truth. The arrays are inside, so an event can be copied. */
typedef struct sdd_hough_event {
    uint64_t id;
    uint32_t nstubs;
    uint32_t ntracks;
    sdd_stub stubs[SDD_HOUGH_EVENT_MAX_STUBS];
    int16_t stub_track[SDD_HOUGH_EVENT_MAX_STUBS]; /* truth track index, -1 for noise */
    sdd_truth_track tracks[SDD_HOUGH_EVENT_MAX_TRACKS];
} sdd_hough_event;

typedef struct sdd_hough_gen_opts {
    sdd_hough_geom geom;
    uint64_t seed;
    float signal_mean;      /* Poisson mean of signal tracks per sector event; 3 */
    float pileup_tracks;    /* Poisson mean of pileup tracks per sector event */
    float pileup_pt_min;    /* GeV/c; 1.5 */
    float noise_stubs;      /* Poisson mean of random noise stubs per sector event */
    float layer_eff;        /* 0.98 */
    float double_stub_prob; /* same-layer second stub; 0.02 */
    float pitch;            /* sensor pitch in r-phi, m; 90e-6 */
    float bend_sigma;       /* bend resolution, c/GeV; 0.1 */
    float z0_sigma;         /* m; 0.05 */
    float eta_max;          /* 1.0 */
} sdd_hough_gen_opts;

/* Defaults of REFERENCE.md §4.6 at PU 200 (see sdd_hough_gen_opts_pileup). */
SDD_API void sdd_hough_gen_opts_default(sdd_hough_gen_opts *o);

/* Set pileup_tracks and noise_stubs for a pileup level: PU 0 gives signal only, PU 140 about
 * 80 stubs per sector event (the real tt-bar PU140 density), PU 200 about 160 (the seed's
 * test load, twice the real count); other values interpolate linearly between these points
 * and extrapolate from the last two. Returns SDD_EINVAL for a negative or non-finite pu. */
SDD_API sdd_err sdd_hough_gen_opts_pileup(sdd_hough_gen_opts *o, float pu);

typedef struct sdd_hough_gen sdd_hough_gen;

SDD_API sdd_err sdd_hough_gen_create(const sdd_hough_gen_opts *opts, sdd_hough_gen **out);
SDD_API void sdd_hough_gen_destroy(sdd_hough_gen *g);

/* Generate the next event into ev (deterministic for a given seed and call sequence). Stubs
 * are in random order, as a detector delivers them, and have been through the 48-bit packed
 * form, so they equal what an event file or a hardware stream delivers. Returns SDD_OK. */
SDD_API sdd_err sdd_hough_gen_next(sdd_hough_gen *g, sdd_hough_event *ev);

/* Event files (docs/formats.md "Hough event file"): a header with the geometry, then events
 * of packed stubs with their truth. Readers check every length and field; a truncated or
 * corrupt file is SDD_ECORRUPT with the event number logged, a newer format version
 * SDD_ENOTSUP, an I/O failure SDD_EIO; after a read error every later read returns it again.
 * create overwrites an existing file; writing to a file opened for reading is SDD_EINVAL.
 * A file handle, like a generator, belongs to one thread at a time. */
typedef struct sdd_hough_file sdd_hough_file;

SDD_API sdd_err sdd_hough_file_create(const char *path, const sdd_hough_geom *g,
                                      sdd_hough_file **out);
SDD_API sdd_err sdd_hough_file_open(const char *path, sdd_hough_file **out);
/* The geometry stored in the file's header. */
SDD_API const sdd_hough_geom *sdd_hough_file_geom(const sdd_hough_file *f);
SDD_API sdd_err sdd_hough_file_write(sdd_hough_file *f, const sdd_hough_event *ev);
/* 1 = an event was read, 0 = end of file, negative sdd_err on error. Stubs come back
 * unpacked from their packed form, so exactly as a hardware stream would deliver them. */
SDD_API int sdd_hough_file_read(sdd_hough_file *f, sdd_hough_event *ev);
/* Close; for a written file, flush and report a failed write as SDD_EIO. */
SDD_API sdd_err sdd_hough_file_close(sdd_hough_file *f);

/* ---- Quality against truth -------------------------------------------------------------- */

typedef struct sdd_hough_score {
    double pt_min; /* efficiency counts truth tracks with pT >= this; 3 GeV/c */
    uint64_t events;
    uint64_t reconstructable; /* tracks with pT >= pt_min, phi_T in the map, >= min_layers */
    uint64_t found;           /* reconstructable tracks matched by at least one candidate */
    uint64_t candidates;
    uint64_t fakes;      /* candidates that match no truth track */
    uint64_t duplicates; /* matches beyond the first of one track */
    uint64_t overflow;   /* candidates whose cell overflowed its slots */
    double fakes_sq;     /* sum over events of fakes^2, for the error of the mean */
    double dups_sq;
    uint64_t nres; /* residual sums over the best match of each found track */
    double dqpt_sum, dqpt_sq, dphi_sum, dphi_sq;
} sdd_hough_score;

typedef struct sdd_hough_summary {
    double efficiency, efficiency_err; /* fraction, binomial error */
    double fakes_per_event, fakes_err; /* mean and its standard error */
    double dups_per_event, dups_err;
    double candidates_per_event;
    double qpt_res, phi_res; /* RMS of cell centre - truth */
    double qpt_bias, phi_bias;
} sdd_hough_summary;

SDD_API void sdd_hough_score_init(sdd_hough_score *s, double pt_min);

/* Score the candidates of one event. A candidate matches truth track t when its kept stubs of
 * t cover at least geom.min_layers distinct layers. */
SDD_API void sdd_hough_score_event(sdd_hough_score *s, const sdd_hough_geom *g,
                                   const sdd_hough_event *ev, const sdd_hough_track *tracks,
                                   size_t ntracks);

SDD_API void sdd_hough_score_summarize(const sdd_hough_score *s, sdd_hough_summary *out);

/* ---- Processing stage ------------------------------------------------------------------- */

/* A stub block is how a sector event travels as a payload (a fragment of a built event):
 * 8-byte header (magic "SH", version 1, flags, u16 sector, u16 stub count) then the packed
 * stubs (docs/formats.md). */
#define SDD_STUB_BLOCK_HEADER 8

/* Write a stub block for n stubs into buf; returns the bytes written, SDD_ETOOBIG when cap
 * is too small or n > 65535, SDD_EINVAL for a stub that cannot be packed. */
SDD_API int sdd_stub_block_write(void *buf, size_t cap, uint16_t sector, const sdd_stub *stubs,
                                 size_t n);

/* Validate and unpack a stub block: SDD_EPROTO for a bad magic, version, nonzero flags byte
 * or length, SDD_ECORRUPT for a bad stub, SDD_ETOOBIG for more than max stubs. */
SDD_API sdd_err sdd_stub_block_read(const void *buf, size_t len, uint16_t *sector, sdd_stub *out,
                                    size_t max, size_t *n);

typedef struct sdd_hough_stage sdd_hough_stage;

/* A processing-stage result, owned by the stage; hand it back with
 * sdd_hough_stage_release(). */
typedef struct sdd_hough_result {
    const void *input; /* the sdd_hough_block_ref taken from `in` (the caller owns it) */
    sdd_err status;    /* SDD_OK or why the block was rejected (then sector = ntracks = 0) */
    uint16_t sector;
    uint32_t ntracks;    /* tracks found (tracks[] holds at most max_tracks of them) */
    uint64_t latency_ns; /* block taken off the input ring -> result published */
    sdd_hough_track *tracks;
} sdd_hough_result;

typedef struct sdd_hough_stage_stats {
    uint64_t blocks, rejected, tracks; /* blocks counts rejected ones too */
    sdd_hist latency;                  /* ns per block */
} sdd_hough_stage_stats;

/* A stage thread: takes stub blocks (struct sdd_hough_block_ref pointers) from `in`, runs
 * the finder and puts sdd_hough_result pointers on `out`. Blocks keep their owners; results
 * come from a pool of `depth` and wait when the consumer holds all of them (backpressure).
 * cpu >= 0 pins the thread; a failed pin fails the start. Only the one thread that consumes
 * `out` may call sdd_hough_stage_release(). */
typedef struct sdd_hough_block_ref {
    const void *data;
    size_t len;
} sdd_hough_block_ref;

SDD_API sdd_err sdd_hough_stage_start(const sdd_hough_opts *opts, sdd_spsc *in, sdd_spsc *out,
                                      unsigned depth, unsigned max_tracks, int cpu,
                                      sdd_hough_stage **out_stage);
SDD_API void sdd_hough_stage_release(sdd_hough_stage *st, sdd_hough_result *r);
/* Stop after the input ring is empty, join the thread, fill stats, free. Results not yet
 * released are freed too. Blocks while blocks remain queued, so the caller must not hold
 * every result while it stops (the stage could never finish). */
SDD_API void sdd_hough_stage_stop(sdd_hough_stage *st, sdd_hough_stage_stats *stats);

#endif
