/* sddaq trigger rich: options and the event source shared by the RICH subcommands (internal to
 * the tool). */
#ifndef SDDAQ_TOOLS_TRIGGER_RICH_H
#define SDDAQ_TOOLS_TRIGGER_RICH_H

#include <stdbool.h>
#include <stdint.h>

#include "sddaq/trigger.h"

/* Entry point from `sddaq trigger`: argv[0] is "rich", argv[1] the mode. */
int cmd_trigger_rich(int argc, char **argv);

/* bench --gpu: the most buffers a chain thread keeps on the GPU at once. */
#define RICH_CHAIN_MAX_INFLIGHT 8

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
    bool gpu;         /* bench: the CUDA ring finder (sddaq/rich_gpu.h) */
    uint32_t gpu_block; /* bench --gpu: threads per block, 0 = each placement's default */
    uint32_t gpu_inflight; /* bench --gpu: the chain's buffers in flight per thread, 0 = 2 */
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
/* bench --gpu (trigger_rich_gpu_bench.c). */
int rich_gpu_bench(const struct rich_cli *o);

/* Events packed as the boards send them, `per` events to a receive buffer of cap bytes. */
struct rich_packed {
    size_t nbuf;
    uint8_t **buf;
    size_t *len;
    uint64_t events;
};

int rich_pack_buffers(const sdd_rich_pmtab *t, const sdd_rich_event *evs, size_t n, uint32_t per,
                      size_t cap, struct rich_packed *p);
void rich_packed_free(struct rich_packed *p);

/* Latency percentiles of k samples in ns (sorts them): nearest rank. */
struct rich_lat {
    double p50_us, p99_us, max_us;
    uint64_t samples;
};

void rich_lat_summary(uint64_t *t, size_t k, struct rich_lat *l);

/* Median, min and max of n values (sorts them). */
struct rich_mmm {
    double med, min, max;
};

struct rich_mmm rich_summarize(double *v, int n);

/* Run fn on n threads at once, thread i with (char *)args + i * size; the wall time from the
 * first start to the last join in ns, or 0 when a thread could not be started (those that
 * started are joined). */
uint64_t rich_time_threads(int n, void *(*fn)(void *), void *args, size_t size);

#endif
