/* sddaq trigger: options and event sources shared by the Hough subcommands (internal to the
 * tool). */
#ifndef SDDAQ_TOOLS_TRIGGER_H
#define SDDAQ_TOOLS_TRIGGER_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "sddaq/trigger.h"

#define TRIG_MAX_PU    16
#define TRIG_MAX_CELLS (SDD_HOUGH_MAX_DIM * SDD_HOUGH_MAX_DIM) /* enough for every candidate */

struct trig_opts {
    float pu[TRIG_MAX_PU]; /* pileup levels; gen, run and bench use pu[0] */
    int npu;
    bool pu_given;
    uint64_t events; /* 0 = the subcommand's default (with -i: every event of the file) */
    uint64_t seed;
    sdd_hough_shape shape;
    bool shape_given;
    sdd_hough_impl impl;
    bool impl_given;
    sdd_hough_simd simd; /* the fast impl's vector path (auto by default) */
    bool merge;
    float bend_window;
    bool bend_given;
    float cell_scale[2]; /* per sdd_hough_shape: the cell test's shrink factor (1 = exact) */
    double pt_min;       /* efficiency threshold, GeV/c */
    const char *input;
    const char *output;
    bool json;
    int threads; /* bench: batch threads (0 = one per CPU) */
    int rounds;  /* bench: alternating rounds (0 = default) */
    int passes;  /* bench: timed passes over the event set per round (0 = default) */
    bool smoke;  /* bench: a tiny run for ctest */
};

/* Where events come from: a generator (seeded, N events) or an event file. */
struct trig_source {
    sdd_hough_gen *gen;
    sdd_hough_file *file;
    sdd_hough_geom geom; /* of the events: the generator's or the file's */
    uint64_t left;       /* events still to deliver; UINT64_MAX = until end of file */
    uint64_t delivered;
};

/* Open the source the options describe, for pileup level pu when generating; events is the
 * number to deliver (0 = all of a file). Prints a message and returns nonzero on error. */
/* "auto", "x8" or "avx512". */
const char *trig_simd_name(sdd_hough_simd s);

/* The vector path a fast finder with these options takes on this CPU, or NULL when it cannot
 * be had (avx512 asked for on a CPU without it). */
const char *trig_simd_taken(const struct trig_opts *o);

int trig_source_open(struct trig_source *src, const struct trig_opts *o, float pu, uint64_t events);

/* 1 = an event was delivered, 0 = the source is done, -1 = error (printed). Stubs come as a
 * detector delivers them, through their packed 48-bit form: the generator and the file reader
 * both do that. */
int trig_source_next(struct trig_source *src, sdd_hough_event *ev);
void trig_source_close(struct trig_source *src);

/* Finder options for the events' geometry with the command-line choices applied. */
void trig_finder_opts(const struct trig_opts *o, const sdd_hough_geom *events_geom,
                      sdd_hough_shape shape, sdd_hough_impl impl, bool merge, sdd_hough_opts *out);

const char *trig_shape_name(sdd_hough_shape s);
const char *trig_impl_name(sdd_hough_impl i);

int trig_score(const struct trig_opts *o);
int trig_bench(const struct trig_opts *o);

/* A minimal JSON writer: members are separated and nested for the caller; non-finite numbers
 * come out as null. */
#define TJ_MAX_DEPTH 8

struct tjson {
    FILE *f;
    int depth;
    bool first[TJ_MAX_DEPTH];
    char close[TJ_MAX_DEPTH];
};

void tj_begin(struct tjson *j, FILE *f);
/* Open an object or array; key is NULL inside arrays and at the top level. */
void tj_obj(struct tjson *j, const char *key);
void tj_arr(struct tjson *j, const char *key);
void tj_end(struct tjson *j);
/* Close whatever is open and end the line. */
void tj_finish(struct tjson *j);
void tj_num(struct tjson *j, const char *key, double v);
void tj_uint(struct tjson *j, const char *key, uint64_t v);
void tj_str(struct tjson *j, const char *key, const char *v);
void tj_bool(struct tjson *j, const char *key, bool v);

/* The members of a score summary (efficiency, fakes, duplicates, resolutions). */
void trig_json_summary(struct tjson *j, const sdd_hough_score *s, const sdd_hough_summary *m);

#endif
