/* Options that `sddaq emu` and `sddaq readout` share: a stream's geometry. */
#ifndef SDDAQ_TOOLS_READOUT_OPTS_H
#define SDDAQ_TOOLS_READOUT_OPTS_H

#include <stdbool.h>

#include "sddaq/readout.h"

/* getopt letters of the geometry options: -i stream id, -k packets per frame, -s payload. */
#define RO_GEOMETRY_LETTERS "i:k:s:"

/* Apply geometry option c with value arg to g. Returns 1 when c was one and arg valid (sets
 * *shape_given for -k and -s), -1 when c was one and arg is not valid, 0 when c is another. */
int ro_cli_geometry(int c, const char *arg, struct sdd_ro_geometry *g, bool *shape_given);

#endif
