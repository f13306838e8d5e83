/* sddaq trigger rich: options and the event source shared by the RICH subcommands (internal to
 * the tool). */
#ifndef SDDAQ_TOOLS_TRIGGER_RICH_H
#define SDDAQ_TOOLS_TRIGGER_RICH_H

#include <stdbool.h>
#include <stdint.h>

#include "sddaq/trigger.h"

/* Entry point from `sddaq trigger`: argv[0] is "rich", argv[1] the mode. */
int cmd_trigger_rich(int argc, char **argv);

struct rich_cli {
    uint64_t events; /* 0 = the mode's default (with -i: the whole file) */
    uint64_t seed;
    const char *input;
    const char *output;
    int method; /* -1 = both (score, bench), else sdd_rich_method */
    sdd_rich_fit fit;
    sdd_rich_simd simd;
    float noise;     /* noise hits per event (Poisson mean); < 0 = generator default */
    float match;     /* scoring window, mm */
    float window;    /* ring-hit window of the finder, mm */
    float claim;     /* hits a found ring takes out of the search, mm; < 0 = default */
    float max_rms;   /* ring quality cut, mm; 0 = default */
    float eps;       /* Ptolemy tolerance; 0 = default */
    int threshold;   /* histogram threshold; 0 = default */
    int min_hits;    /* hits a ring needs; 0 = default */
    uint32_t buffer; /* events per receive buffer */
    uint32_t merge_window;
    int threads;      /* bench: 0 = one per CPU */
    bool single_pass; /* --multi-ring off: the histogram finder's single greedy pass */
    bool json;
    bool smoke;
};

/* Events from the generator or a file. */
struct rich_source {
    sdd_rich_gen *gen;
    sdd_rich_file *file;
    sdd_rich_geom geom;
    uint64_t left;
};

int rich_source_open(struct rich_source *s, const struct rich_cli *o, uint64_t def_events);
/* Up to max events into evs; returns the count (0 at the end) or -1 on error (printed). */
long rich_source_read(struct rich_source *s, sdd_rich_event *evs, size_t max);
void rich_source_close(struct rich_source *s);

/* Processing options from the command line for one method, geometry of the events. */
void rich_cli_proc_opts(const struct rich_cli *o, const sdd_rich_geom *g, sdd_rich_method m,
                        sdd_rich_proc_opts *out);

const char *rich_method_name(sdd_rich_method m);
const char *rich_simd_name(sdd_rich_simd s);

int rich_bench(const struct rich_cli *o);

#endif
