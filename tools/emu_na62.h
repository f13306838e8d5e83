/* What `sddaq emu na62` sends: a cycle of RICH events packed as the readout boards send them. */
#ifndef SDDAQ_TOOLS_EMU_NA62_H
#define SDDAQ_TOOLS_EMU_NA62_H

#include <stddef.h>
#include <stdint.h>

#include "sddaq/err.h"

/* Generate `events` events of the default RICH geometry and mix from `seed` and pack them into
 * packets of at most one datagram; *bytes (malloc'd, the caller frees) holds them back to
 * back. */
sdd_err emu_na62_cycle(uint64_t seed, uint32_t events, uint8_t **bytes, size_t *len);

#endif
