/* One cycle of NA62-like packets that the emulator sends over and over (na62_cycle.c). */
#ifndef SDDAQ_READOUT_NA62_CYCLE_H
#define SDDAQ_READOUT_NA62_CYCLE_H

#include <stddef.h>
#include <stdint.h>

#include "sddaq/err.h"

struct ro_na62_cycle {
    uint8_t *bytes;      /* the packets, back to back (a private copy) */
    uint32_t npackets;   /* packets in a cycle */
    uint32_t ndgrams;    /* datagrams in a cycle: the packets, then each board's end of burst */
    uint32_t *offset;    /* of datagram i in bytes (packets only) */
    uint16_t *length;    /* of datagram i */
    uint8_t *board;      /* of datagram i */
    uint32_t *index;     /* of datagram i among its board's datagrams in the cycle */
    uint32_t count[256]; /* packets of each board in a cycle (its end of burst not included) */
    double mean_length;  /* of the datagrams */
};

/* Index and copy a cycle; SDD_EINVAL unless it is a whole number of valid packets (magic,
 * version, length within the datagram limit, a multiple of 4, at least one event). */
sdd_err ro_na62_cycle_init(struct ro_na62_cycle *c, const void *packets, size_t bytes);
void ro_na62_cycle_fini(struct ro_na62_cycle *c);

/* Datagram n (0, 1, ...): datagram n mod ndgrams of pass n / ndgrams — a packet of the cycle,
 * or after them each board's end-of-burst packet — with that pass as burst id and the board's
 * sequence number running on from pass to pass. Writes it to out (room for SDD_RO_NA62_MAX
 * bytes) and returns its length. */
size_t ro_na62_cycle_build(const struct ro_na62_cycle *c, uint64_t n, uint8_t *out);

static inline uint8_t ro_na62_cycle_board(const struct ro_na62_cycle *c, uint64_t n)
{
    return c->board[n % c->ndgrams];
}

#endif
