/* The NA62 emulator's material: a cycle of packets made by the caller (from the RICH
 * generator, say), indexed once, then replayed with fresh sequence numbers and burst ids so
 * that a receiver sees one endless, consistent stream per board. */
#include "readout/na62_cycle.h"

#include <stdlib.h>
#include <string.h>

#include "core/le.h"
#include "sddaq/readout.h"

enum { NA_LENGTH = 8, NA_SEQ = 12, NA_BURST = 16 };

void ro_na62_cycle_fini(struct ro_na62_cycle *c)
{
    free(c->bytes);
    free(c->offset);
    free(c->length);
    free(c->board);
    free(c->index);
    memset(c, 0, sizeof(*c));
}

/* Count the packets, checking each; -1 when the bytes are not a clean sequence of them. */
static long count_packets(const uint8_t *p, size_t bytes)
{
    long n = 0;
    for (size_t off = 0; off < bytes; n++) {
        struct sdd_ro_packet pk;
        size_t left = bytes - off;
        if (left < SDD_RO_NA62_HEADER) {
            return -1;
        }
        size_t len = get_le32(p + off + NA_LENGTH);
        if (len > left || sdd_ro_parse(SDD_RO_FMT_NA62, p + off, len, NULL, &pk) != SDD_RO_OK) {
            return -1;
        }
        off += len;
    }
    return n;
}

sdd_err ro_na62_cycle_init(struct ro_na62_cycle *c, const void *packets, size_t bytes)
{
    memset(c, 0, sizeof(*c));
    if (packets == NULL || bytes == 0 || bytes > UINT32_MAX) {
        return SDD_EINVAL;
    }
    long n = count_packets(packets, bytes);
    if (n <= 0) {
        return SDD_EINVAL;
    }
    c->npackets = (uint32_t)n;
    c->bytes = malloc(bytes);
    c->offset = calloc((size_t)n, sizeof(*c->offset));
    c->length = calloc((size_t)n, sizeof(*c->length));
    c->board = calloc((size_t)n, sizeof(*c->board));
    c->index = calloc((size_t)n, sizeof(*c->index));
    if (c->bytes == NULL || c->offset == NULL || c->length == NULL || c->board == NULL ||
        c->index == NULL) {
        ro_na62_cycle_fini(c);
        return SDD_ENOMEM;
    }
    memcpy(c->bytes, packets, bytes);
    size_t off = 0;
    for (uint32_t i = 0; i < c->npackets; i++) {
        struct sdd_ro_packet pk;
        uint32_t len = get_le32(c->bytes + off + NA_LENGTH);
        (void)sdd_ro_parse(SDD_RO_FMT_NA62, c->bytes + off, len, NULL, &pk);
        c->offset[i] = (uint32_t)off;
        c->length[i] = (uint16_t)len;
        c->board[i] = (uint8_t)pk.stream_id;
        c->index[i] = c->count[pk.stream_id]++;
        off += len;
    }
    c->mean_length = (double)bytes / c->npackets;
    return SDD_OK;
}

size_t ro_na62_cycle_build(const struct ro_na62_cycle *c, uint64_t n, uint8_t *out)
{
    uint64_t pass = n / c->npackets;
    uint32_t i = (uint32_t)(n % c->npackets);
    size_t len = c->length[i];
    memcpy(out, c->bytes + c->offset[i], len);
    put_le32(out + NA_SEQ, (uint32_t)(pass * c->count[c->board[i]] + c->index[i]));
    put_le32(out + NA_BURST, (uint32_t)pass);
    return len;
}
