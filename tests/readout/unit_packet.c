/* Readout packet formats: encode/parse round trips for both layouts, one malformed datagram
 * per refusal reason (each must give exactly that reason), every single-bit header flip
 * refused, the CRC-32C check value, and the payload pattern. */
#include <string.h>

#include "check.h"
#include "sddaq/readout.h"

#define PAYLOAD 1024

static uint8_t dgram[SDD_RO_HEADER_SIZE + SDD_RO_JF_PAYLOAD + 64];

static const struct sdd_ro_geometry geom = {
    .stream_id = 7, .packets_per_frame = 16, .payload_size = PAYLOAD};

static struct sdd_ro_packet good(void)
{
    return (struct sdd_ro_packet){.frame_id = 42,
                                  .send_ns = 123456789,
                                  .stream_id = 7,
                                  .packet_id = 15,
                                  .packets_per_frame = 16,
                                  .payload_len = PAYLOAD,
                                  .flags = SDD_RO_FLAG_PATTERN};
}

/* Encode p and parse it back as a datagram of len bytes. */
static bool same(const struct sdd_ro_packet *a, const struct sdd_ro_packet *b)
{
    return a->frame_id == b->frame_id && a->send_ns == b->send_ns && a->stream_id == b->stream_id &&
           a->packet_id == b->packet_id && a->packets_per_frame == b->packets_per_frame &&
           a->payload_len == b->payload_len && a->flags == b->flags;
}

static sdd_ro_reason roundtrip(sdd_ro_format fmt, struct sdd_ro_packet p, size_t len,
                               const struct sdd_ro_geometry *g, struct sdd_ro_packet *out)
{
    CHECK_OK(sdd_ro_encode(fmt, &p, dgram));
    return sdd_ro_parse(fmt, dgram, len, g, out);
}

static void test_crc(void)
{
    CHECK_EQ(sdd_ro_crc32c("123456789", 9), 0xE3069283u); /* the CRC-32C check value */
    CHECK_EQ(sdd_ro_crc32c("", 0), 0);
}

static void test_stream_roundtrip(void)
{
    struct sdd_ro_packet in = good(), out;
    memset(&out, 0, sizeof(out));
    CHECK_EQ(roundtrip(SDD_RO_FMT_STREAM, in, SDD_RO_HEADER_SIZE + PAYLOAD, &geom, &out),
             SDD_RO_OK);
    CHECK(same(&in, &out));
    CHECK_EQ(roundtrip(SDD_RO_FMT_STREAM, in, SDD_RO_HEADER_SIZE + PAYLOAD, NULL, &out), SDD_RO_OK);
    /* Extremes that are valid. */
    in.frame_id = SDD_RO_FRAME_NONE - 1;
    in.packet_id = 0;
    in.send_ns = UINT64_MAX;
    CHECK_EQ(roundtrip(SDD_RO_FMT_STREAM, in, SDD_RO_HEADER_SIZE + PAYLOAD, &geom, &out),
             SDD_RO_OK);
    CHECK_EQ(out.frame_id, SDD_RO_FRAME_NONE - 1);
    CHECK(out.send_ns == UINT64_MAX);
}

static void expect_reason(sdd_ro_format fmt, struct sdd_ro_packet p, size_t len,
                          const struct sdd_ro_geometry *g, sdd_ro_reason want)
{
    struct sdd_ro_packet out;
    memset(&out, 0xAB, sizeof(out));
    struct sdd_ro_packet before = out;
    sdd_ro_reason r = roundtrip(fmt, p, len, g, &out);
    if (r != want) {
        fprintf(stderr, "  got %s, want %s\n", sdd_ro_reason_name(r), sdd_ro_reason_name(want));
    }
    CHECK_EQ(r, want);
    CHECK(same(&out, &before)); /* out untouched on refusal */
}

static void test_stream_reasons(void)
{
    const size_t len = SDD_RO_HEADER_SIZE + PAYLOAD;
    struct sdd_ro_packet p = good();
    expect_reason(SDD_RO_FMT_STREAM, p, 0, &geom, SDD_RO_SHORT);
    expect_reason(SDD_RO_FMT_STREAM, p, SDD_RO_HEADER_SIZE - 1, &geom, SDD_RO_SHORT);
    expect_reason(SDD_RO_FMT_STREAM, p, len + 1, &geom, SDD_RO_OVERSIZE);
    expect_reason(SDD_RO_FMT_STREAM, p, SDD_RO_HEADER_SIZE + SDD_RO_MAX_PAYLOAD + 1, NULL,
                  SDD_RO_OVERSIZE);
    expect_reason(SDD_RO_FMT_STREAM, p, len - 1, &geom, SDD_RO_LENGTH);
    p.flags = 0x2;
    expect_reason(SDD_RO_FMT_STREAM, p, len, &geom, SDD_RO_RESERVED);
    p = good();
    p.packets_per_frame = 8; /* packet 15 of 8 is impossible too, but geometry comes first */
    expect_reason(SDD_RO_FMT_STREAM, p, len, &geom, SDD_RO_GEOMETRY);
    p.packets_per_frame = 0;
    expect_reason(SDD_RO_FMT_STREAM, p, len, NULL, SDD_RO_GEOMETRY);
    p.packets_per_frame = SDD_RO_MAX_PACKETS + 1;
    expect_reason(SDD_RO_FMT_STREAM, p, len, NULL, SDD_RO_GEOMETRY);
    p = good();
    p.payload_len = 0;
    expect_reason(SDD_RO_FMT_STREAM, p, SDD_RO_HEADER_SIZE, NULL, SDD_RO_GEOMETRY);
    p = good();
    p.payload_len = PAYLOAD - 8;
    expect_reason(SDD_RO_FMT_STREAM, p, len - 8, &geom, SDD_RO_GEOMETRY);
    p = good();
    p.packet_id = 16;
    expect_reason(SDD_RO_FMT_STREAM, p, len, &geom, SDD_RO_PACKET_ID);
    p.packet_id = UINT32_MAX;
    expect_reason(SDD_RO_FMT_STREAM, p, len, NULL, SDD_RO_PACKET_ID);
    p = good();
    p.frame_id = SDD_RO_FRAME_NONE;
    expect_reason(SDD_RO_FMT_STREAM, p, len, &geom, SDD_RO_FRAME_ID);
    p = good();
    p.stream_id = 8;
    expect_reason(SDD_RO_FMT_STREAM, p, len, &geom, SDD_RO_STREAM);
    struct sdd_ro_packet out;
    CHECK_EQ(roundtrip(SDD_RO_FMT_STREAM, p, len, NULL, &out), SDD_RO_OK); /* no expectation */

    /* Damage after encoding: magic, version, checksum, reserved word (checksum caught). */
    struct sdd_ro_packet q = good();
    CHECK_OK(sdd_ro_encode(SDD_RO_FMT_STREAM, &q, dgram));
    dgram[0] ^= 1;
    CHECK_EQ(sdd_ro_parse(SDD_RO_FMT_STREAM, dgram, len, &geom, &out), SDD_RO_MAGIC);
    dgram[0] ^= 1;
    dgram[4] = 2;
    CHECK_EQ(sdd_ro_parse(SDD_RO_FMT_STREAM, dgram, len, &geom, &out), SDD_RO_VERSION);
    dgram[4] = 1;
    dgram[20] ^= 0x80;
    CHECK_EQ(sdd_ro_parse(SDD_RO_FMT_STREAM, dgram, len, &geom, &out), SDD_RO_CHECKSUM);
    dgram[20] ^= 0x80;
    CHECK_EQ(sdd_ro_parse(SDD_RO_FMT_STREAM, dgram, len, &geom, &out), SDD_RO_OK);
    CHECK_EQ(sdd_ro_parse((sdd_ro_format)9, dgram, len, &geom, &out), SDD_RO_MAGIC);
    CHECK_EQ(sdd_ro_parse(SDD_RO_FMT_STREAM, NULL, len, &geom, &out), SDD_RO_SHORT);
}

/* Every single-bit flip of either header is refused (as the emulator's corruption is). */
static void test_bit_flips(sdd_ro_format fmt)
{
    struct sdd_ro_packet p = good();
    struct sdd_ro_geometry g = geom;
    size_t len = SDD_RO_HEADER_SIZE + PAYLOAD;
    if (fmt == SDD_RO_FMT_JUNGFRAU) {
        p.packets_per_frame = g.packets_per_frame = SDD_RO_JF_PACKETS;
        p.payload_len = g.payload_size = SDD_RO_JF_PAYLOAD;
        len = SDD_RO_HEADER_SIZE + SDD_RO_JF_PAYLOAD;
    }
    CHECK_OK(sdd_ro_encode(fmt, &p, dgram));
    struct sdd_ro_packet out;
    CHECK_EQ(sdd_ro_parse(fmt, dgram, len, &g, &out), SDD_RO_OK);
    int refused = 0;
    for (int bit = 0; bit < SDD_RO_HEADER_SIZE * 8; bit++) {
        dgram[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        refused += sdd_ro_parse(fmt, dgram, len, &g, &out) != SDD_RO_OK;
        dgram[bit / 8] ^= (uint8_t)(1u << (bit % 8));
    }
    CHECK_EQ(refused, SDD_RO_HEADER_SIZE * 8);
}

static void test_jungfrau(void)
{
    const struct sdd_ro_geometry jg = {
        .stream_id = 3, .packets_per_frame = SDD_RO_JF_PACKETS, .payload_size = SDD_RO_JF_PAYLOAD};
    const size_t len = SDD_RO_HEADER_SIZE + SDD_RO_JF_PAYLOAD;
    struct sdd_ro_packet p = {.frame_id = 99, .send_ns = 5, .stream_id = 3, .packet_id = 127};
    struct sdd_ro_packet out;
    CHECK_EQ(roundtrip(SDD_RO_FMT_JUNGFRAU, p, len, &jg, &out), SDD_RO_OK);
    CHECK_EQ(out.frame_id, 99);
    CHECK_EQ(out.send_ns, 5);
    CHECK_EQ(out.packet_id, 127);
    CHECK_EQ(out.packets_per_frame, SDD_RO_JF_PACKETS);
    CHECK_EQ(out.payload_len, SDD_RO_JF_PAYLOAD);
    CHECK_EQ(dgram[46], 3); /* detType Jungfrau */
    CHECK_EQ(dgram[47], 2); /* version */
    expect_reason(SDD_RO_FMT_JUNGFRAU, p, 47, &jg, SDD_RO_SHORT);
    expect_reason(SDD_RO_FMT_JUNGFRAU, p, len + 1, &jg, SDD_RO_OVERSIZE);
    expect_reason(SDD_RO_FMT_JUNGFRAU, p, len - 1, &jg, SDD_RO_LENGTH);
    p.packet_id = 128;
    expect_reason(SDD_RO_FMT_JUNGFRAU, p, len, &jg, SDD_RO_PACKET_ID);
    p.packet_id = 0;
    p.frame_id = SDD_RO_FRAME_NONE;
    expect_reason(SDD_RO_FMT_JUNGFRAU, p, len, &jg, SDD_RO_FRAME_ID);
    p.frame_id = 1;
    p.stream_id = 4;
    expect_reason(SDD_RO_FMT_JUNGFRAU, p, len, &jg, SDD_RO_STREAM);
    p.stream_id = 3;
    CHECK_OK(sdd_ro_encode(SDD_RO_FMT_JUNGFRAU, &p, dgram));
    dgram[46] = 1; /* an Eiger header */
    CHECK_EQ(sdd_ro_parse(SDD_RO_FMT_JUNGFRAU, dgram, len, &jg, &out), SDD_RO_MAGIC);
    dgram[46] = 3;
    dgram[47] = 1;
    CHECK_EQ(sdd_ro_parse(SDD_RO_FMT_JUNGFRAU, dgram, len, &jg, &out), SDD_RO_VERSION);
    dgram[47] = 2;
    dgram[38] = 1; /* reserved, with the checksum fixed up: the reserved check must see it */
    uint8_t tmp[44];
    memcpy(tmp, dgram, 40);
    memcpy(tmp + 40, dgram + 44, 4);
    uint32_t crc = sdd_ro_crc32c(tmp, 44);
    memcpy(dgram + 40, &crc, 4); /* little-endian host */
    CHECK_EQ(sdd_ro_parse(SDD_RO_FMT_JUNGFRAU, dgram, len, &jg, &out), SDD_RO_RESERVED);
}

static void test_pattern(void)
{
    uint8_t a[1003], b[1003];
    sdd_ro_pattern_fill(1, 2, 3, a, sizeof(a));
    CHECK(sdd_ro_pattern_check(1, 2, 3, a, sizeof(a)));
    CHECK(!sdd_ro_pattern_check(1, 2, 4, a, sizeof(a)));
    CHECK(!sdd_ro_pattern_check(1, 3, 3, a, sizeof(a)));
    CHECK(!sdd_ro_pattern_check(2, 2, 3, a, sizeof(a)));
    memcpy(b, a, sizeof(a));
    b[1002] ^= 1; /* the last, partial word counts */
    CHECK(!sdd_ro_pattern_check(1, 2, 3, b, sizeof(b)));
    b[1002] ^= 1;
    b[500] ^= 0x10;
    CHECK(!sdd_ro_pattern_check(1, 2, 3, b, sizeof(b)));
    /* Two halves of one payload are not interchangeable: words depend on the offset. */
    CHECK(memcmp(a, a + 8, 8) != 0);
}

static void test_names(void)
{
    for (int r = 0; r < SDD_RO_REASON_COUNT; r++) {
        CHECK(strlen(sdd_ro_reason_name((sdd_ro_reason)r)) > 0);
        CHECK(strlen(sdd_ro_reason_message((sdd_ro_reason)r)) > 0);
    }
    CHECK(strcmp(sdd_ro_reason_name(SDD_RO_CHECKSUM), "CHECKSUM") == 0);
    CHECK(strcmp(sdd_ro_reason_name((sdd_ro_reason)99), "UNKNOWN") == 0);
}

int main(void)
{
    test_crc();
    test_stream_roundtrip();
    test_stream_reasons();
    test_bit_flips(SDD_RO_FMT_STREAM);
    test_bit_flips(SDD_RO_FMT_JUNGFRAU);
    test_jungfrau();
    test_pattern();
    test_names();
    return check_finish();
}
