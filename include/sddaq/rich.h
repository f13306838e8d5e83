/* Software triggers, part two: the NA62-style RICH L0 trigger (seeds 003 §2 and 004, REFERENCE
 * §5). TEL62-like readout boards send multi-event packets of PM hits; an event finder indexes
 * the variable-size events of a receive buffer and validates each one, a merger fuses the
 * boards' events that share a timestamp window, and ring finders reconstruct the Cherenkov
 * rings of each event: a distance-histogram finder (8x8 candidate centres) and a multi-ring
 * finder built on Ptolemy's theorem (Almagest triplets), both refined by the Crawford or Taubin
 * algebraic circle fit. A truth-level generator, an event file format and a scorer come with
 * them. Formats are in docs/formats.md ("RICH ..."), algorithms in docs/trigger.md.
 *
 * Units: millimetres in the frame of each spot (its centre is the origin), 25 ns ticks for
 * timestamps, GeV/c for momenta. Included by sddaq/trigger.h. */
#ifndef SDDAQ_RICH_H
#define SDDAQ_RICH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sddaq/api.h"
#include "sddaq/err.h"
#include "sddaq/hist.h"
#include "sddaq/ring.h"

/* ---- Geometry ------------------------------------------------------------------------------ */

#define SDD_RICH_SPOTS      2    /* two spots of PMs, one per mirror set */
#define SDD_RICH_SPOT_PMS   1024 /* PM index field: bits 0..9 of a channel */
#define SDD_RICH_CHANNELS   (SDD_RICH_SPOTS * SDD_RICH_SPOT_PMS)
#define SDD_RICH_MAX_HITS   64 /* hits per event, after the merge too */
#define SDD_RICH_MAX_BOARDS 4

typedef struct sdd_rich_geom {
    float pitch;             /* hexagonal PM grid pitch, mm; 18 */
    float disc_radius;       /* PMs whose centre lies in this disc about the spot centre; 300 */
    float focal;             /* mirror focal length, mm; 17000 (ring radius R = focal * theta) */
    float n_minus_1;         /* radiator refractive index minus one; 62e-6 (neon) */
    uint8_t boards_per_spot; /* 1 (a board reads a spot) or 2 (left and right half); 2 */
} sdd_rich_geom;

/* Defaults of REFERENCE §5.8: about 1000 PMs per spot, 4 boards. */
SDD_API void sdd_rich_geom_default(sdd_rich_geom *g);

/* SDD_EINVAL with a logged reason when a field is out of range or the disc holds more than
 * SDD_RICH_SPOT_PMS PMs. */
SDD_API sdd_err sdd_rich_geom_check(const sdd_rich_geom *g);

/* PMs per spot (the same for both spots), or a negative sdd_err for a bad geometry. */
SDD_API int sdd_rich_geom_npm(const sdd_rich_geom *g);

/* Boards: spot * boards_per_spot + (x >= 0 when there are two halves). */
SDD_API unsigned sdd_rich_geom_nboards(const sdd_rich_geom *g);

/* Ring radius of a particle of mass m and momentum p (GeV/c), 0 below threshold. */
SDD_API float sdd_rich_ring_radius(const sdd_rich_geom *g, float mass, float p);

/* The PM table: centre of every channel, and the board that reads it. Built once from a
 * geometry (not for the data path); read-only afterwards, so threads may share one. */
typedef struct sdd_rich_pmtab sdd_rich_pmtab;

SDD_API sdd_err sdd_rich_pmtab_create(const sdd_rich_geom *g, sdd_rich_pmtab **out);
SDD_API void sdd_rich_pmtab_destroy(sdd_rich_pmtab *t);
/* Centre of channel ch (bit 10 = spot, bits 0..9 = PM); false for a channel with no PM. */
SDD_API bool sdd_rich_pmtab_pos(const sdd_rich_pmtab *t, unsigned ch, float *x, float *y);
/* The board that reads channel ch; -1 for a channel with no PM. */
SDD_API int sdd_rich_pmtab_board(const sdd_rich_pmtab *t, unsigned ch);
/* Channel of the PM nearest to (x, y) in spot s, -1 when no PM centre lies within one pitch. */
SDD_API int sdd_rich_pmtab_nearest(const sdd_rich_pmtab *t, unsigned spot, float x, float y);

/* ---- Packets (docs/formats.md "RICH packet") ------------------------------------------------ */

#define SDD_RICH_PKT_MAGIC     0x5032364Eu /* "N62P" little-endian */
#define SDD_RICH_PKT_VERSION   1
#define SDD_RICH_PKT_HEADER    24
#define SDD_RICH_EVT_SIGNATURE 0xCAFEBABEu
#define SDD_RICH_EVT_HEADER    16
#define SDD_RICH_PKT_MAX       1472 /* one UDP datagram on a 1500 B MTU */
#define SDD_RICH_EOB_MAGIC     0x21424F45u /* "EOB!": body of an end-of-burst packet */
#define SDD_RICH_EOB_BYTES     32          /* header + magic + packet count */

/* A hit is a 16-bit word: channel in bits 0..10 (bit 10 = spot, 0..9 = PM), fine time (1/32 of
 * a 25 ns tick) in bits 11..15. */
#define SDD_RICH_HIT_CHANNEL(w) ((unsigned)(w)&0x7FFu)
#define SDD_RICH_HIT_FINE(w)    ((unsigned)(w) >> 11)
#define SDD_RICH_HIT(ch, fine)  ((uint16_t)(((ch)&0x7FFu) | (((fine)&0x1Fu) << 11)))

/* Bytes an event of n hits takes in a packet: header + hits, padded to 4 bytes. */
static inline size_t sdd_rich_evt_bytes(size_t n)
{
    return SDD_RICH_EVT_HEADER + ((2 * n + 3) & ~(size_t)3);
}

/* Builds one packet in a caller's buffer. */
typedef struct sdd_rich_pkt_builder {
    uint8_t *buf;
    size_t cap; /* at most SDD_RICH_PKT_MAX is used */
    size_t len;
    uint16_t nevents;
    uint8_t board;
} sdd_rich_pkt_builder;

/* Start a packet of board `board` in buf (cap bytes, the caller keeps ownership). SDD_EINVAL
 * when cap < SDD_RICH_PKT_HEADER. */
SDD_API sdd_err sdd_rich_pkt_begin(sdd_rich_pkt_builder *b, void *buf, size_t cap, uint8_t board,
                                   uint32_t seq, uint32_t burst_id);
/* Append an event; SDD_ETOOBIG when it does not fit (the packet is unchanged), SDD_EINVAL for
 * more than SDD_RICH_MAX_HITS hits or a timestamp >= 2^31. */
SDD_API sdd_err sdd_rich_pkt_add(sdd_rich_pkt_builder *b, uint32_t timestamp, uint8_t fine,
                                 const uint16_t *hits, size_t n);
/* Finish the header; returns the packet's length in bytes. */
SDD_API size_t sdd_rich_pkt_end(sdd_rich_pkt_builder *b);
/* Write the end-of-burst packet a board sends after its last packet of burst burst_id: no
 * events, its own sequence number seq (one past the burst's last data packet) and the count
 * of data packets the board sent in that burst, so a receiver can count the ones it never got
 * at either end. Returns SDD_RICH_EOB_BYTES, or 0 when cap is smaller. */
SDD_API size_t sdd_rich_pkt_eob(void *buf, size_t cap, uint8_t board, uint32_t seq,
                                uint32_t burst_id, uint32_t packets);

/* ---- Event finder and merge --------------------------------------------------------------- */

/* Why input was dropped. Every malformed packet or event is counted under exactly one reason
 * and skipped; the finder then scans on for the next magic or signature (4-byte steps). */
typedef struct sdd_rich_ef_stats {
    uint64_t packets; /* good packet headers */
    uint64_t events;  /* events indexed */
    uint64_t hits;
    uint64_t bad_magic;      /* a word where a packet should start is not the magic */
    uint64_t bad_version;    /* unknown version */
    uint64_t bad_board;      /* board id beyond the geometry's boards */
    uint64_t bad_pkt_length; /* length < header, not a multiple of 4, or > SDD_RICH_PKT_MAX */
    uint64_t truncated;      /* packet length runs past the end of the buffer */
    uint64_t bad_signature;  /* a word where an event should start is not the signature */
    uint64_t bad_evt_length; /* event length disagrees with its hit count or runs past the
                              * packet */
    uint64_t too_many_hits;  /* more than SDD_RICH_MAX_HITS */
    uint64_t bad_channel;    /* a hit on a channel with no PM or of another board */
    uint64_t bad_timestamp;  /* timestamp >= 2^31 */
    uint64_t count_mismatch; /* packets whose n_events disagrees with the events found */
    uint64_t index_full;     /* good events dropped because the index was full */
    uint64_t skipped_bytes;  /* bytes passed over while resynchronising */
} sdd_rich_ef_stats;

/* The event index of one receive buffer, structure of arrays (capacity cap events). */
typedef struct sdd_rich_index {
    uint32_t cap;
    uint32_t n;
    uint32_t *offset; /* of the event header in the buffer */
    uint32_t *timestamp;
    uint32_t *burst; /* its packet's burst_id: timestamps count from the start of a burst */
    uint8_t *nhits;
    uint8_t *board;
    uint32_t *order; /* scratch of the merge */
} sdd_rich_index;

SDD_API sdd_err sdd_rich_index_init(sdd_rich_index *idx, uint32_t cap);
SDD_API void sdd_rich_index_fini(sdd_rich_index *idx);

/* Index the events of a receive buffer of back-to-back packets (len bytes, < 4 GiB; read only,
 * the caller keeps it). Every length is checked against the buffer before a read; no byte
 * outside [buf, buf + len) is ever read. Hits are checked against the PM table (t may be NULL:
 * no channel check). Adds to *st (not cleared). Returns the number of events indexed. */
SDD_API uint32_t sdd_rich_find_events(const void *buf, size_t len, const sdd_rich_pmtab *t,
                                      sdd_rich_index *idx, sdd_rich_ef_stats *st);

/* Merged events: whole-detector events, structure of arrays, hits as channel numbers. */
typedef struct sdd_rich_batch {
    uint32_t cap; /* events; hits room is cap * SDD_RICH_MAX_HITS */
    uint32_t n;
    uint32_t *timestamp;
    uint32_t *first; /* index of the event's first hit in hits[]; the merge packs them tight */
    uint8_t *nhits;
    uint8_t *boards; /* bit b: board b contributed */
    uint16_t *hits;  /* channels (fine time stripped) */
    uint32_t *seen;  /* scratch of the merge: per channel, the generation that saw it */
    uint32_t gen;
} sdd_rich_batch;

SDD_API sdd_err sdd_rich_batch_init(sdd_rich_batch *b, uint32_t cap);
SDD_API void sdd_rich_batch_fini(sdd_rich_batch *b);

typedef struct sdd_rich_merge_stats {
    uint64_t in_events, out_events;
    uint64_t fused;        /* board events added to an event started by another board */
    uint64_t dup_channels; /* repeated channels dropped */
    uint64_t overflow;     /* hits dropped beyond SDD_RICH_MAX_HITS */
    uint64_t unordered;    /* board events older than their board's previous one */
    uint64_t batch_full;   /* events dropped because the batch was full */
    uint64_t held;         /* board events held back for the next buffer (a stream) */
    uint64_t carry_full;   /* times the held events did not fit and were merged at once */
    uint64_t late;         /* buffers merged alone: their turn had been given up */
} sdd_rich_merge_stats;

/* Merge the indexed events of buf: a k-way merge of the boards' time-ordered streams (by burst,
 * then timestamp); board events whose timestamps lie within `window` ticks of the first one of
 * a group are fused (hits concatenated, repeated channels dropped, timestamp = the earliest).
 * Events come out in time order. idx must come from sdd_rich_find_events() on the same buffer. Adds to *st.
 * Returns the number of merged events. */
SDD_API uint32_t sdd_rich_merge(const void *buf, const sdd_rich_index *idx, uint32_t window,
                                sdd_rich_batch *out, sdd_rich_merge_stats *st);

/* ---- Circle fits ---------------------------------------------------------------------------- */

typedef struct sdd_rich_circle {
    float cx, cy, r;
} sdd_rich_circle;

/* Algebraic circle fits through n points (non-iterative Crawford; Taubin with a few Newton
 * steps). SDD_EINVAL for n < 3 or for points that are (nearly) collinear or coincide, so that
 * no circle is defined; c is untouched then. Exact circles come back to float precision. */
SDD_API sdd_err sdd_rich_fit_crawford(const float *x, const float *y, size_t n, sdd_rich_circle *c);
SDD_API sdd_err sdd_rich_fit_taubin(const float *x, const float *y, size_t n, sdd_rich_circle *c);

/* Ptolemy's test: with p1 = |AB||CD|, p2 = |AC||BD|, p3 = |AD||BC|, the four points are
 * concyclic when the largest equals the sum of the other two. Returns |2 max - sum| / max
 * (0 = concyclic; 1 when all distances vanish). */
SDD_API float sdd_rich_ptolemy(const float a[2], const float b[2], const float c[2],
                               const float d[2]);

/* ---- Ring finders --------------------------------------------------------------------------- */

typedef enum sdd_rich_method {
    SDD_RICH_HIST = 0,    /* 8x8 candidate centres, distance histogram, fit refinement */
    SDD_RICH_PTOLEMY = 1, /* Almagest triplets tested with Ptolemy's theorem, fit refinement */
} sdd_rich_method;

typedef enum sdd_rich_fit {
    SDD_RICH_FIT_TAUBIN = 0,
    SDD_RICH_FIT_CRAWFORD = 1,
} sdd_rich_fit;

/* The vector code of the finder's kernels (histogram, hit selection, moments, Ptolemy's test).
 * Every choice gives the same rings, bit for bit. */
typedef enum sdd_rich_simd {
    SDD_RICH_SIMD_AUTO = 0,     /* AVX-512 where the CPU has it, else AVX2, else portable */
    SDD_RICH_SIMD_PORTABLE = 1, /* plain C (the compiler's baseline vectors) */
    SDD_RICH_SIMD_AVX512 = 2,   /* x86-64-v4; create gives SDD_ENOTSUP on other CPUs */
    SDD_RICH_SIMD_AVX2 = 3,     /* x86-64-v3 vectors; SDD_ENOTSUP on other CPUs */
} sdd_rich_simd;

typedef struct sdd_rich_find_opts {
    sdd_rich_geom geom;
    sdd_rich_method method;
    sdd_rich_fit fit;
    sdd_rich_simd simd; /* sdd_rich_finder_opts() reports the one taken */
    uint8_t min_hits;   /* a ring needs this many hits; spots with fewer are skipped as noise; 6 */
    uint8_t threshold;  /* histogram peak (two adjacent bins) needed for a candidate; 5 */
    uint8_t max_rings;  /* per spot; 3 */
    float window;       /* a hit belongs to a ring when |d - R| < window, mm; 13 (a PM's
                         * corner lies 10.4 mm from its centre, plus jitter) */
    float claim;        /* histogram: a found ring takes out of the search only its hits with
                         * |d - R| < claim, mm; the rest of its window stays for the next
                         * ring (crossing rings share that band); 7. 0 takes the whole window */
    float max_rms;      /* rings with a larger RMS radial residual are dropped, mm; 8 */
    float ptolemy_eps;  /* Ptolemy tolerance |2 max - sum| / max; 0.008 */
    bool multi_ring;    /* histogram: resolve spots with several rings (competing peaks, hit
                         * re-assignment, a second search; docs/trigger.md); true. False gives
                         * the single greedy pass: fewer rings in crowded spots, ~0.1 us/event
                         * less */
} sdd_rich_find_opts;

SDD_API void sdd_rich_find_opts_default(sdd_rich_find_opts *o);

/* One reconstructed ring. */
typedef struct sdd_rich_ring {
    float cx, cy, r; /* mm, spot frame */
    float quality;   /* RMS of the radial residuals of its hits, mm (smaller is better) */
    uint64_t hits;   /* bit i: hit i of the input list belongs to the ring */
    uint8_t spot;
    uint8_t nhits;
    uint8_t flags; /* 0; reserved */
    uint8_t pad;
} sdd_rich_ring;

typedef struct sdd_rich_finder sdd_rich_finder;

/* Build a finder (allocates; not for the data path). One per thread. */
SDD_API sdd_err sdd_rich_finder_create(const sdd_rich_find_opts *o, sdd_rich_finder **out);
SDD_API void sdd_rich_finder_destroy(sdd_rich_finder *f);
SDD_API const sdd_rich_find_opts *sdd_rich_finder_opts(const sdd_rich_finder *f);
SDD_API const sdd_rich_pmtab *sdd_rich_finder_pmtab(const sdd_rich_finder *f);

/* Find the rings of one event: n hit words or channels (fine-time bits are ignored), at most
 * SDD_RICH_MAX_HITS (else SDD_ETOOBIG); channels without a PM are ignored. Rings come out spot
 * by spot, strongest first; at most max_out are written. Returns the number of rings written.
 * No allocation, no locks. */
SDD_API int sdd_rich_find(sdd_rich_finder *f, const uint16_t *hits, size_t n, sdd_rich_ring *out,
                          size_t max_out);

/* ---- Generator with truth and event files --------------------------------------------------- */

#define SDD_RICH_MAX_TRUTH 3

enum sdd_rich_particle {
    SDD_RICH_PION = 0,
    SDD_RICH_MUON = 1,
    SDD_RICH_ELECTRON = 2,
    SDD_RICH_NPARTICLES = 3,
};

typedef struct sdd_rich_truth {
    float cx, cy, r; /* mm, spot frame */
    float p;         /* GeV/c */
    uint8_t spot;
    uint8_t particle; /* sdd_rich_particle */
    uint8_t nhits;    /* distinct PMs the ring lit, after the 64-hit cap */
    uint8_t pad;
} sdd_rich_truth;

/* One whole-detector event with truth. */
typedef struct sdd_rich_event {
    uint64_t id;
    uint32_t timestamp; /* 25 ns ticks since the start of the burst */
    uint8_t fine;
    uint8_t nhits;
    uint8_t nrings;
    uint8_t pad;
    uint16_t hits[SDD_RICH_MAX_HITS];   /* hit words, in random order */
    int8_t hit_ring[SDD_RICH_MAX_HITS]; /* truth ring index, -1 for noise */
    sdd_rich_truth rings[SDD_RICH_MAX_TRUTH];
} sdd_rich_event;

typedef struct sdd_rich_gen_opts {
    sdd_rich_geom geom;
    uint64_t seed;
    float ring_prob[SDD_RICH_MAX_TRUTH + 1]; /* 0..3 rings; 0.1 0.6 0.25 0.05 */
    float mix[SDD_RICH_NPARTICLES];          /* pion, muon, electron; 0.6 0.3 0.1 */
    float p_min, p_max;                      /* GeV/c, uniform; 15, 35 */
    float hits_mean;   /* photons of a beta = 1 ring: Poisson(hits_mean (theta/theta_max)^2); 15 */
    float pm_eff;      /* 0.9 */
    float jitter;      /* radial photon spread, mm (gaussian); 2 */
    float centre_max;  /* centres uniform in a disc of this radius about the spot centre; 100 */
    float noise_mean;  /* Poisson mean of noise hits per event; 2 */
    float tick_mean;   /* mean ticks between events (4 = 10 MHz at 25 ns); >= tick_min */
    uint32_t tick_min; /* smallest spacing, so events never share a merge window; 2 */
} sdd_rich_gen_opts;

SDD_API void sdd_rich_gen_opts_default(sdd_rich_gen_opts *o);

typedef struct sdd_rich_gen sdd_rich_gen;

SDD_API sdd_err sdd_rich_gen_create(const sdd_rich_gen_opts *o, sdd_rich_gen **out);
SDD_API void sdd_rich_gen_destroy(sdd_rich_gen *g);
SDD_API const sdd_rich_pmtab *sdd_rich_gen_pmtab(const sdd_rich_gen *g);
/* The next event (deterministic for a seed and call sequence). */
SDD_API void sdd_rich_gen_next(sdd_rich_gen *g, sdd_rich_event *ev);

/* Pack events as the boards send them: each board's hits of each event (boards with no hit
 * send nothing for it) into packets of at most pkt_max bytes, packets of the boards
 * interleaved as they would arrive, back to back in buf. Returns the bytes written, or
 * SDD_ETOOBIG when buf is too small. *seq (one per board, may be NULL) numbers the packets. */
SDD_API int64_t sdd_rich_pack(const sdd_rich_pmtab *t, const sdd_rich_event *evs, size_t n,
                              size_t pkt_max, void *buf, size_t cap, uint32_t *seq);

/* Event files (docs/formats.md "RICH event file"): header with the geometry, then events with
 * their truth. Same contract as the Hough files: every length and field is checked, a broken
 * file is SDD_ECORRUPT, a newer version SDD_ENOTSUP, I/O errors SDD_EIO, and after an error
 * every later read returns it again. */
typedef struct sdd_rich_file sdd_rich_file;

SDD_API sdd_err sdd_rich_file_create(const char *path, const sdd_rich_geom *g, sdd_rich_file **out);
SDD_API sdd_err sdd_rich_file_open(const char *path, sdd_rich_file **out);
SDD_API const sdd_rich_geom *sdd_rich_file_geom(const sdd_rich_file *f);
SDD_API sdd_err sdd_rich_file_write(sdd_rich_file *f, const sdd_rich_event *ev);
/* 1 = an event was read, 0 = end of file, negative sdd_err on error. */
SDD_API int sdd_rich_file_read(sdd_rich_file *f, sdd_rich_event *ev);
SDD_API sdd_err sdd_rich_file_close(sdd_rich_file *f);

/* ---- Quality against truth ------------------------------------------------------------------ */

#define SDD_RICH_GOOD_HITS 10 /* "good" rings: truth rings with at least this many hits */

typedef struct sdd_rich_score {
    float match; /* a found ring matches a truth ring of its spot when the centres lie
                  * within match mm and the radii within match mm; 9 */
    uint64_t events;
    uint64_t truth[SDD_RICH_MAX_TRUTH + 1]; /* truth rings, by the event's ring count */
    uint64_t found[SDD_RICH_MAX_TRUTH + 1]; /* of those, matched */
    uint64_t good[SDD_RICH_MAX_TRUTH + 1];  /* truth rings with >= SDD_RICH_GOOD_HITS hits */
    uint64_t good_found[SDD_RICH_MAX_TRUTH + 1];
    uint64_t rings;      /* rings found */
    uint64_t fakes;      /* found rings matching no truth ring */
    uint64_t duplicates; /* further found rings matching an already matched truth ring */
    uint64_t fake_events[SDD_RICH_MAX_TRUTH + 1]; /* fakes by the event's truth ring count */
    uint64_t events_by[SDD_RICH_MAX_TRUTH + 1];
    uint64_t nres;
    double dx_sq, dy_sq, dr_sum, dr_sq, dc_sum;
} sdd_rich_score;

typedef struct sdd_rich_summary {
    double efficiency, efficiency_err;     /* all truth rings */
    double good_efficiency, good_err;      /* rings with >= 10 hits */
    double eff_by[SDD_RICH_MAX_TRUTH + 1]; /* by the event's ring count (NaN when none) */
    double good_eff_by[SDD_RICH_MAX_TRUTH + 1];
    double fakes_per_event;
    double fakes_by[SDD_RICH_MAX_TRUTH + 1];
    double dups_per_event;
    double centre_res; /* RMS of the centre offset per coordinate, mm */
    double radius_res; /* RMS of found - true radius, mm */
    double radius_bias;
} sdd_rich_summary;

SDD_API void sdd_rich_score_init(sdd_rich_score *s, float match);
SDD_API void sdd_rich_score_event(sdd_rich_score *s, const sdd_rich_event *ev,
                                  const sdd_rich_ring *rings, size_t n);
SDD_API void sdd_rich_score_merge(sdd_rich_score *dst, const sdd_rich_score *src);
SDD_API void sdd_rich_score_summarize(const sdd_rich_score *s, sdd_rich_summary *out);

/* ---- Processing a receive buffer (the stage's work) ----------------------------------------- */

/* Event finder + merge + ring finder on one receive buffer. Owns its index, batch and finder,
 * sized at create for buffers of up to max_bytes. One per thread. */
typedef struct sdd_rich_proc sdd_rich_proc;

typedef struct sdd_rich_proc_opts {
    sdd_rich_find_opts find;
    uint32_t window;    /* merge window, ticks; 1 */
    size_t max_bytes;   /* largest receive buffer; 1 MiB */
    uint32_t max_rings; /* ring slots per event kept in the result; 8 */
    uint32_t split;     /* threads that share each buffer's ring finding, the caller included:
                           1 (default; 0 means 1) .. 64. More than one cuts a buffer's latency,
                           not the work: the helpers are started at create (sddaq/team.h). */
    bool gpu;           /* find the rings on a CUDA GPU (sddaq/rich_gpu.h, its default layout);
                           the events are still found and merged here. create gives
                           SDD_ENOTSUP without a GPU, SDD_EINVAL with a split or Ptolemy */
    uint32_t inflight;  /* buffers started and not yet finished (sdd_rich_proc_start):
                           1 (default; 0 means 1) .. SDD_RICH_PROC_MAX_INFLIGHT. With gpu, 2 or
                           more let the CPU find and merge the next buffer while the GPU finds
                           the rings of the last; each takes a batch and a GPU object.
                           SDD_EINVAL with a split */
    bool stream;        /* the stage (sdd_rich_stage_start) only: merge its buffers as one
                           stream (sdd_rich_proc_run_stream), so that an event cut by a buffer
                           boundary comes out whole; a ref with data NULL and len 0 ends the
                           stream. false (default): each buffer is merged alone */
} sdd_rich_proc_opts;

#define SDD_RICH_PROC_MAX_INFLIGHT 8

SDD_API void sdd_rich_proc_opts_default(sdd_rich_proc_opts *o);

/* What one buffer gave: merged events (batch), per event its rings. Owned by the proc and
 * valid until the next run. */
typedef struct sdd_rich_output {
    const sdd_rich_batch *events;
    const uint8_t *nrings;      /* per merged event: rings found (at most max_rings kept) */
    const sdd_rich_ring *rings; /* event i's rings at rings[i * max_rings] */
    uint32_t max_rings;
    uint64_t total_rings;
} sdd_rich_output;

SDD_API sdd_err sdd_rich_proc_create(const sdd_rich_proc_opts *o, sdd_rich_proc **out);
SDD_API void sdd_rich_proc_destroy(sdd_rich_proc *p);
SDD_API const sdd_rich_finder *sdd_rich_proc_finder(const sdd_rich_proc *p);
/* Process one buffer. SDD_ETOOBIG for len > max_bytes, SDD_EIO when the GPU fails (gpu; logged).
 * Statistics accumulate in the proc. */
SDD_API sdd_err sdd_rich_proc_run(sdd_rich_proc *p, const void *buf, size_t len,
                                  sdd_rich_output *out);
SDD_API void sdd_rich_proc_stats(const sdd_rich_proc *p, sdd_rich_ef_stats *ef,
                                 sdd_rich_merge_stats *merge);

/* A stream of receive buffers, as a readout receiver fills them: the boards' packets of one
 * moment can land on both sides of a buffer boundary. sdd_rich_proc_run_stream() holds back
 * the merged events that a later buffer may still add to (those whose window reaches the
 * oldest last event any board sent in this buffer) in a carry, and merges them with the next
 * buffer's events, so every event is merged whole, once. Buffers are numbered 0, 1, 2, ...
 * (seq); procs on several threads may share one carry: each finds its buffer's events at
 * once and waits for its turn, in seq order, only to merge (a buffer that does not come within
 * a second is skipped; if it comes later it is merged alone). sdd_rich_proc_flush() merges what
 * is held at the end of the stream. Events are ordered by burst, then timestamp, so a new
 * burst closes the old one's events. The output holds the events merged in this buffer's turn
 * (held ones from before included, those held for the next not). */
typedef struct sdd_rich_carry sdd_rich_carry;
/* max_bytes: room for held events, as the procs' max_bytes. */
SDD_API sdd_err sdd_rich_carry_create(size_t max_bytes, sdd_rich_carry **out);
SDD_API void sdd_rich_carry_destroy(sdd_rich_carry *c);
/* Board events held now (for tests and metrics). */
SDD_API uint32_t sdd_rich_carry_events(const sdd_rich_carry *c);
SDD_API sdd_err sdd_rich_proc_run_stream(sdd_rich_proc *p, const void *buf, size_t len,
                                         sdd_rich_carry *c, uint64_t seq, sdd_rich_output *out);
/* The end of the stream after buffer seq - 1: the held events, merged and decided. */
SDD_API sdd_err sdd_rich_proc_flush(sdd_rich_proc *p, sdd_rich_carry *c, uint64_t seq,
                                    sdd_rich_output *out);

/* The same in two steps, for a pipeline: start finds and merges the buffer's events and
 * starts their ring finding (on the CPU it finds them too); finish gives the oldest started
 * buffer's output, waiting for the GPU when it has them. Up to opts.inflight buffers may be
 * started before a finish, so with a GPU the next buffer's events are found and merged while
 * the GPU works. start: carry NULL for a buffer on its own, else the stream's buffer seq;
 * SDD_EBUSY when opts.inflight buffers wait for their finish, SDD_ETOOBIG as run. finish:
 * SDD_EINVAL when none was started, SDD_EIO when the GPU failed; its output is valid until
 * the next start. sdd_rich_proc_run and its stream and flush forms are a start and a finish,
 * and need none waiting (SDD_EBUSY). */
SDD_API sdd_err sdd_rich_proc_start(sdd_rich_proc *p, const void *buf, size_t len,
                                    sdd_rich_carry *c, uint64_t seq);
/* The end of a stream, as sdd_rich_proc_flush, started. */
SDD_API sdd_err sdd_rich_proc_start_flush(sdd_rich_proc *p, sdd_rich_carry *c, uint64_t seq);
SDD_API sdd_err sdd_rich_proc_finish(sdd_rich_proc *p, sdd_rich_output *out);
/* Buffers started and not finished. */
SDD_API uint32_t sdd_rich_proc_pending(const sdd_rich_proc *p);

/* A stage thread: takes sdd_rich_buffer_ref pointers from `in`, processes each buffer and puts
 * the same pointer on `out` with its results filled in. Buffers and refs stay the caller's.
 * The thread stops once asked and `in` is empty. cpu >= 0 pins it (a failed pin fails the
 * start). The ref's output is valid until the consumer calls sdd_rich_stage_release() on it:
 * the stage works on the next buffer only after that (one result in flight: deterministic
 * latency, no copies).
 * With opts.stream the buffers are one stream, in the order they are queued: a ref's output
 * holds the events merged in its turn, some from earlier buffers, and events the next buffer
 * may still add to wait for it. Queue a ref with data NULL and len 0 to end the stream: its
 * output holds the events still waiting. A stage stopped with events waiting logs how many
 * board events it did not merge. */
typedef struct sdd_rich_buffer_ref {
    const void *data;
    size_t len;
    sdd_err status;      /* set by the stage */
    sdd_rich_output out; /* set by the stage */
    uint64_t latency_ns; /* taken off `in` -> published on `out` */
} sdd_rich_buffer_ref;

typedef struct sdd_rich_stage sdd_rich_stage;

SDD_API sdd_err sdd_rich_stage_start(const sdd_rich_proc_opts *o, sdd_spsc *in, sdd_spsc *out,
                                     int cpu, sdd_rich_stage **out_stage);
SDD_API void sdd_rich_stage_release(sdd_rich_stage *st, sdd_rich_buffer_ref *ref);
/* Stop once `in` is empty, join, fill stats (may be NULL), free. Blocks; while buffers remain
 * queued the consumer must keep releasing results, or the stage cannot finish. */
SDD_API void sdd_rich_stage_stop(sdd_rich_stage *st, sdd_hist *latency, uint64_t *buffers);

#endif
