/* The NA62 emulator's material: a cycle of packets made by the caller (from the RICH
 * generator, say), indexed once, then replayed with fresh sequence numbers and burst ids so
 * that a receiver sees one endless, consistent stream per board. Each pass is a burst: it ends
 * with an end-of-burst packet from every board that sent in it. */
#include "readout/na62_cycle.h"

#include <stdlib.h>
#include <string.h>

#include "core/le.h"
#include "sddaq/readout.h"
#include "sddaq/rich.h"

enum { NA_BOARD = 5, NA_LENGTH = 8, NA_SEQ = 12, NA_BURST = 16 };

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
        if (len > left || sdd_ro_parse(SDD_RO_FMT_NA62, p + off, len, NULL, &pk) != SDD_RO_OK ||
            (pk.flags & SDD_RO_FLAG_NA62_EOB)) {
            return -1; /* the ends of bursts are the emulator's to add */
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
    c->ndgrams = c->npackets;
    const uint8_t *in = packets;
    for (size_t off = 0; off < bytes; off += get_le32(in + off + NA_LENGTH)) {
        if (c->count[in[off + NA_BOARD]]++ == 0) {
            c->ndgrams++; /* one end of burst per board that sends */
        }
    }
    memset(c->count, 0, sizeof(c->count));
    size_t m = c->ndgrams;
    c->bytes = malloc(bytes);
    c->offset = calloc(m, sizeof(*c->offset));
    c->length = calloc(m, sizeof(*c->length));
    c->board = calloc(m, sizeof(*c->board));
    c->index = calloc(m, sizeof(*c->index));
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
    uint32_t k = c->npackets;
    for (unsigned b = 0; b < 256; b++) {
        if (c->count[b] > 0) {
            c->length[k] = SDD_RICH_EOB_BYTES;
            c->board[k] = (uint8_t)b;
            c->index[k++] = c->count[b];
        }
    }
    c->mean_length =
        (double)(bytes + (size_t)(c->ndgrams - c->npackets) * SDD_RICH_EOB_BYTES) / c->ndgrams;
    return SDD_OK;
}

size_t ro_na62_cycle_build(const struct ro_na62_cycle *c, uint64_t n, uint8_t *out)
{
    uint64_t pass = n / c->ndgrams;
    uint32_t i = (uint32_t)(n % c->ndgrams);
    uint8_t b = c->board[i];
    /* Each pass, a board's sequence number moves on by its packets and its end of burst. */
    uint32_t seq = (uint32_t)(pass * (c->count[b] + 1) + c->index[i]);
    if (i >= c->npackets) {
        return sdd_rich_pkt_eob(out, SDD_RO_NA62_MAX, b, seq, (uint32_t)pass, c->count[b]);
    }
    size_t len = c->length[i];
    memcpy(out, c->bytes + c->offset[i], len);
    put_le32(out + NA_SEQ, seq);
    put_le32(out + NA_BURST, (uint32_t)pass);
    return len;
}
