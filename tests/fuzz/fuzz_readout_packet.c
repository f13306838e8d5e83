/* libFuzzer target for the readout packet parser (src/readout/packet.c), which takes raw UDP
 * datagrams from the network. The input is parsed as a datagram of both formats, with and
 * without a stream's expected geometry, then once more with its header checksum made right, so
 * the fuzzer reaches the field checks behind it. Nothing may crash or read out of bounds (ASan
 * watches); a packet accepted must satisfy every rule the parser promises, and must encode
 * back to a header that parses to the same fields.
 *
 * Build and run from the repository root (not part of the CMake build):
 *   clang -g -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined -Iinclude -Isrc \
 *       tests/fuzz/fuzz_readout_packet.c src/readout/packet.c src/core/err.c src/core/log.c \
 *       -lpthread -o fuzz_readout_packet
 *   mkdir -p corpus && ./fuzz_readout_packet -max_total_time=60 corpus */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sddaq/readout.h"

static int same(const struct sdd_ro_packet *a, const struct sdd_ro_packet *b)
{
    return a->frame_id == b->frame_id && a->send_ns == b->send_ns && a->stream_id == b->stream_id &&
           a->packet_id == b->packet_id && a->packets_per_frame == b->packets_per_frame &&
           a->payload_len == b->payload_len && a->flags == b->flags;
}

static void check_one(sdd_ro_format fmt, const uint8_t *data, size_t size,
                      const struct sdd_ro_geometry *g)
{
    struct sdd_ro_packet p;
    sdd_ro_reason r = sdd_ro_parse(fmt, data, size, g, &p);
    if ((unsigned)r >= SDD_RO_REASON_COUNT) {
        abort();
    }
    if (r != SDD_RO_OK) {
        return;
    }
    if (size != SDD_RO_HEADER_SIZE + (size_t)p.payload_len || p.packets_per_frame == 0 ||
        p.packets_per_frame > SDD_RO_MAX_PACKETS || p.packet_id >= p.packets_per_frame ||
        p.frame_id == SDD_RO_FRAME_NONE) {
        abort();
    }
    if (g != NULL && (p.stream_id != g->stream_id || p.payload_len != g->payload_size ||
                      p.packets_per_frame != g->packets_per_frame)) {
        abort();
    }
    uint8_t hdr[SDD_RO_HEADER_SIZE];
    struct sdd_ro_packet back;
    if (sdd_ro_encode(fmt, &p, hdr) != SDD_OK ||
        sdd_ro_parse(fmt, hdr, size, g, &back) != SDD_RO_OK || !same(&back, &p)) {
        abort();
    }
}

/* NA62: the header's claims must hold for an accepted datagram (no encoder to round-trip). */
static void check_na62(const uint8_t *data, size_t size)
{
    struct sdd_ro_packet p;
    sdd_ro_reason r = sdd_ro_parse(SDD_RO_FMT_NA62, data, size, NULL, &p);
    if ((unsigned)r >= SDD_RO_REASON_COUNT) {
        abort();
    }
    if (r == SDD_RO_OK && (size < SDD_RO_NA62_HEADER || size > SDD_RO_NA62_MAX || size % 4 != 0 ||
                           p.payload_len != size - SDD_RO_NA62_HEADER || p.stream_id > 255)) {
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* A copy of exactly size bytes, so ASan sees any read past the datagram. */
    uint8_t *copy = malloc(size > 0 ? size : 1);
    if (copy == NULL) {
        return 0;
    }
    memcpy(copy, data, size);
    const struct sdd_ro_geometry stream = {
        .stream_id = 1, .packets_per_frame = 4, .payload_size = 16};
    const struct sdd_ro_geometry jf = {
        .stream_id = 1, .packets_per_frame = SDD_RO_JF_PACKETS, .payload_size = SDD_RO_JF_PAYLOAD};
    check_one(SDD_RO_FMT_STREAM, copy, size, NULL);
    check_one(SDD_RO_FMT_STREAM, copy, size, &stream);
    check_one(SDD_RO_FMT_JUNGFRAU, copy, size, NULL);
    check_one(SDD_RO_FMT_JUNGFRAU, copy, size, &jf);
    check_na62(copy, size);
    if (size >= 12) {
        /* NA62: make magic, version and length right, so the fuzzer gets past them. */
        uint32_t magic = SDD_RO_NA62_MAGIC, len = (uint32_t)size;
        memcpy(copy, &magic, 4);
        copy[4] = SDD_RO_NA62_VERSION;
        memcpy(copy + 8, &len, 4);
        check_na62(copy, size);
        memcpy(copy, data, 12);
    }
    if (size >= SDD_RO_HEADER_SIZE) {
        /* Stream: CRC-32C of bytes 0..43 at 44. Jungfrau: of the other 44 bytes at 40. */
        uint32_t crc = sdd_ro_crc32c(copy, 44);
        memcpy(copy + 44, &crc, 4); /* little-endian host, as the format */
        check_one(SDD_RO_FMT_STREAM, copy, size, NULL);
        check_one(SDD_RO_FMT_STREAM, copy, size, &stream);
        uint8_t other[44];
        memcpy(other, copy, 40);
        memcpy(other + 40, copy + 44, 4);
        crc = sdd_ro_crc32c(other, 44);
        memcpy(copy + 40, &crc, 4);
        check_one(SDD_RO_FMT_JUNGFRAU, copy, size, NULL);
        check_one(SDD_RO_FMT_JUNGFRAU, copy, size, &jf);
    }
    free(copy);
    return 0;
}

#include "fuzz_standalone.h"
