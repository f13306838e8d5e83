/* sddaq rmem: shared pieces of the remote-memory subcommands (internal to the tool). */
#ifndef SDDAQ_TOOLS_RMEM_H
#define SDDAQ_TOOLS_RMEM_H

#include <stdbool.h>
#include <stdint.h>

#include "sddaq/hist.h"
#include "sddaq/rmem.h"

struct rmem_tool_opts {
    struct sdd_rmem_opts rmem;
    char host[256];
    uint16_t port;
    uint64_t size;         /* serve: region bytes; bench: largest transfer */
    uint64_t element;      /* serve --ksb: element bytes (0 = plain region) */
    double rate;           /* serve --ksb: pushes per second */
    double seconds;        /* how long to run (0 = until interrupted / count reached) */
    uint64_t count;        /* ping, clone, bench: samples */
    const char *providers; /* bench: comma list */
    bool json;
};

int rmem_serve(const struct rmem_tool_opts *o);
int rmem_clone(const struct rmem_tool_opts *o);
int rmem_ping(const struct rmem_tool_opts *o);
int rmem_bench(const struct rmem_tool_opts *o);

/* Print one latency histogram as a table row or a JSON object. */
void rmem_print_hist(const char *provider, const char *what, const sdd_hist *h, bool json);

#endif
