/* The readout packet formats: strict parsing of a datagram's 48-byte header into its fields
 * with a reason code for every refusal, encoding (for emulators and tests), and the CRC-32C
 * that both formats use as header checksum. Needs only src/core/crc32c.c (the fuzz target
 * links the two alone). */
#include <string.h>

#include "core/le.h"
#include "sddaq/crc32c.h"
#include "sddaq/readout.h"

/* ---- Checksums (CRC-32C, sddaq/crc32c.h) ---------------------------------------------------- */

uint32_t sdd_ro_crc32c(const void *buf, size_t len)
{
    return sdd_crc32c(0, buf, len);
}

/* The jungfrau checksum lives in `debug` (bytes 40..43), so it covers the other 44 bytes. */
static uint32_t jf_crc(const uint8_t *h)
{
    return sdd_crc32c(sdd_crc32c(0, h, 40), h + 44, 4);
}

/* ---- Reasons -------------------------------------------------------------------------------- */

static const char *const reason_names[] = {
#define SDD_RO_REASON_NAME(name, msg) #name,
    SDD_RO_REASON_MAP(SDD_RO_REASON_NAME)
#undef SDD_RO_REASON_NAME
};

static const char *const reason_messages[] = {
#define SDD_RO_REASON_MSG(name, msg) msg,
    SDD_RO_REASON_MAP(SDD_RO_REASON_MSG)
#undef SDD_RO_REASON_MSG
};

const char *sdd_ro_reason_name(sdd_ro_reason r)
{
    return (unsigned)r < SDD_RO_REASON_COUNT ? reason_names[r] : "UNKNOWN";
}

const char *sdd_ro_reason_message(sdd_ro_reason r)
{
    return (unsigned)r < SDD_RO_REASON_COUNT ? reason_messages[r] : "unknown reason";
}

/* ---- Generic stream header ------------------------------------------------------------------ */

enum {
    ST_MAGIC = 0,
    ST_VERSION = 4,
    ST_FLAGS = 6,
    ST_STREAM = 8,
    ST_PACKET = 12,
    ST_FRAME = 16,
    ST_PPF = 24,
    ST_PAYLOAD = 28,
    ST_SEND_NS = 32,
    ST_RESERVED = 40,
    ST_CRC = 44,
};

static sdd_ro_reason parse_stream(const uint8_t *h, size_t len,
                                  const struct sdd_ro_geometry *expect, struct sdd_ro_packet *out)
{
    size_t max_payload = expect != NULL ? expect->payload_size : SDD_RO_MAX_PAYLOAD;
    if (len < SDD_RO_HEADER_SIZE) {
        return SDD_RO_SHORT;
    }
    if (len - SDD_RO_HEADER_SIZE > max_payload) {
        return SDD_RO_OVERSIZE;
    }
    if (get_le32(h + ST_MAGIC) != SDD_RO_STREAM_MAGIC) {
        return SDD_RO_MAGIC;
    }
    if (get_le16(h + ST_VERSION) != SDD_RO_STREAM_VERSION) {
        return SDD_RO_VERSION;
    }
    if (get_le32(h + ST_CRC) != sdd_ro_crc32c(h, ST_CRC)) {
        return SDD_RO_CHECKSUM;
    }
    uint32_t flags = get_le16(h + ST_FLAGS);
    if ((flags & ~SDD_RO_FLAG_PATTERN) != 0 || get_le32(h + ST_RESERVED) != 0) {
        return SDD_RO_RESERVED;
    }
    struct sdd_ro_packet p = {
        .frame_id = get_le64(h + ST_FRAME),
        .send_ns = get_le64(h + ST_SEND_NS),
        .stream_id = get_le32(h + ST_STREAM),
        .packet_id = get_le32(h + ST_PACKET),
        .packets_per_frame = get_le32(h + ST_PPF),
        .payload_len = get_le32(h + ST_PAYLOAD),
        .flags = flags,
    };
    if (p.payload_len != len - SDD_RO_HEADER_SIZE) {
        return SDD_RO_LENGTH;
    }
    if (p.packets_per_frame == 0 || p.packets_per_frame > SDD_RO_MAX_PACKETS ||
        p.payload_len == 0 ||
        (expect != NULL && (p.packets_per_frame != expect->packets_per_frame ||
                            p.payload_len != expect->payload_size))) {
        return SDD_RO_GEOMETRY;
    }
    if (p.packet_id >= p.packets_per_frame) {
        return SDD_RO_PACKET_ID;
    }
    if (p.frame_id == SDD_RO_FRAME_NONE) {
        return SDD_RO_FRAME_ID;
    }
    if (expect != NULL && p.stream_id != expect->stream_id) {
        return SDD_RO_STREAM;
    }
    *out = p;
    return SDD_RO_OK;
}

static void encode_stream(const struct sdd_ro_packet *p, uint8_t *h)
{
    put_le32(h + ST_MAGIC, SDD_RO_STREAM_MAGIC);
    put_le16(h + ST_VERSION, SDD_RO_STREAM_VERSION);
    put_le16(h + ST_FLAGS, (uint16_t)p->flags);
    put_le32(h + ST_STREAM, p->stream_id);
    put_le32(h + ST_PACKET, p->packet_id);
    put_le64(h + ST_FRAME, p->frame_id);
    put_le32(h + ST_PPF, p->packets_per_frame);
    put_le32(h + ST_PAYLOAD, p->payload_len);
    put_le64(h + ST_SEND_NS, p->send_ns);
    put_le32(h + ST_RESERVED, 0);
    put_le32(h + ST_CRC, sdd_ro_crc32c(h, ST_CRC));
}

/* ---- Jungfrau-like header (PSI slsDetector layout, REFERENCE.md §6.2) ----------------------- */

enum {
    JF_FRAME = 0,
    JF_EXP_LENGTH = 8,
    JF_PACKET = 12,
    JF_BUNCH = 16,
    JF_TIMESTAMP = 24,
    JF_MOD = 32,
    JF_ROW = 34,
    JF_COLUMN = 36,
    JF_RESERVED = 38,
    JF_DEBUG = 40,
    JF_ROUND = 44,
    JF_DET_TYPE = 46,
    JF_VERSION = 47,
};

static sdd_ro_reason parse_jungfrau(const uint8_t *h, size_t len,
                                    const struct sdd_ro_geometry *expect, struct sdd_ro_packet *out)
{
    if (len < SDD_RO_HEADER_SIZE) {
        return SDD_RO_SHORT;
    }
    if (len > SDD_RO_HEADER_SIZE + SDD_RO_JF_PAYLOAD) {
        return SDD_RO_OVERSIZE;
    }
    if (h[JF_DET_TYPE] != SDD_RO_JF_DET_TYPE) {
        return SDD_RO_MAGIC;
    }
    if (h[JF_VERSION] != SDD_RO_JF_VERSION) {
        return SDD_RO_VERSION;
    }
    if (get_le32(h + JF_DEBUG) != jf_crc(h)) {
        return SDD_RO_CHECKSUM;
    }
    if (get_le16(h + JF_RESERVED) != 0) {
        return SDD_RO_RESERVED;
    }
    if (len != SDD_RO_HEADER_SIZE + SDD_RO_JF_PAYLOAD) {
        return SDD_RO_LENGTH;
    }
    if (expect != NULL && (expect->packets_per_frame != SDD_RO_JF_PACKETS ||
                           expect->payload_size != SDD_RO_JF_PAYLOAD)) {
        return SDD_RO_GEOMETRY;
    }
    struct sdd_ro_packet p = {
        .frame_id = get_le64(h + JF_FRAME),
        .send_ns = get_le64(h + JF_TIMESTAMP),
        .stream_id = get_le16(h + JF_MOD),
        .packet_id = get_le32(h + JF_PACKET),
        .packets_per_frame = SDD_RO_JF_PACKETS,
        .payload_len = SDD_RO_JF_PAYLOAD,
        .flags = 0,
    };
    if (p.packet_id >= SDD_RO_JF_PACKETS) {
        return SDD_RO_PACKET_ID;
    }
    if (p.frame_id == SDD_RO_FRAME_NONE) {
        return SDD_RO_FRAME_ID;
    }
    if (expect != NULL && p.stream_id != expect->stream_id) {
        return SDD_RO_STREAM;
    }
    *out = p;
    return SDD_RO_OK;
}

static void encode_jungfrau(const struct sdd_ro_packet *p, uint8_t *h)
{
    memset(h, 0, SDD_RO_HEADER_SIZE);
    put_le64(h + JF_FRAME, p->frame_id);
    put_le32(h + JF_PACKET, p->packet_id);
    put_le64(h + JF_BUNCH, p->frame_id); /* emulator's choice; receivers do not check it */
    put_le64(h + JF_TIMESTAMP, p->send_ns);
    put_le16(h + JF_MOD, (uint16_t)p->stream_id);
    h[JF_DET_TYPE] = SDD_RO_JF_DET_TYPE;
    h[JF_VERSION] = SDD_RO_JF_VERSION;
    put_le32(h + JF_DEBUG, jf_crc(h));
}

/* ---- NA62-like multi-event packet header (docs/formats.md "RICH packet") ------------------ */

enum {
    NA_MAGIC = 0,
    NA_VERSION = 4,
    NA_BOARD = 5,
    NA_EVENTS = 6,
    NA_LENGTH = 8,
    NA_SEQ = 12,
};

/* The header only: the events inside are the event finder's to check. */
static sdd_ro_reason parse_na62(const uint8_t *h, size_t len, struct sdd_ro_packet *out)
{
    if (len < SDD_RO_NA62_HEADER) {
        return SDD_RO_SHORT;
    }
    if (len > SDD_RO_NA62_MAX) {
        return SDD_RO_OVERSIZE;
    }
    if (get_le32(h + NA_MAGIC) != SDD_RO_NA62_MAGIC) {
        return SDD_RO_MAGIC;
    }
    if (h[NA_VERSION] != SDD_RO_NA62_VERSION) {
        return SDD_RO_VERSION;
    }
    if (get_le32(h + NA_LENGTH) != len || len % 4 != 0) {
        return SDD_RO_LENGTH;
    }
    /* No events: only an end-of-burst packet, which carries its board's packet count. */
    bool eob = get_le16(h + NA_EVENTS) == 0;
    if (eob &&
        (len != SDD_RO_NA62_EOB_BYTES || get_le32(h + SDD_RO_NA62_HEADER) != SDD_RO_NA62_EOB)) {
        return SDD_RO_GEOMETRY;
    }
    *out = (struct sdd_ro_packet){
        .frame_id = get_le32(h + NA_SEQ),
        .stream_id = h[NA_BOARD],
        .packet_id = eob ? get_le32(h + SDD_RO_NA62_HEADER + 4) : 0,
        .packets_per_frame = 1,
        .payload_len = (uint32_t)(len - SDD_RO_NA62_HEADER),
        .flags = eob ? SDD_RO_FLAG_NA62_EOB : 0,
    };
    return SDD_RO_OK;
}

/* ---- Entry points --------------------------------------------------------------------------- */

sdd_ro_reason sdd_ro_parse(sdd_ro_format fmt, const void *buf, size_t len,
                           const struct sdd_ro_geometry *expect, struct sdd_ro_packet *out)
{
    if (buf == NULL || out == NULL) {
        return SDD_RO_SHORT;
    }
    switch (fmt) {
    case SDD_RO_FMT_STREAM:
        return parse_stream(buf, len, expect, out);
    case SDD_RO_FMT_JUNGFRAU:
        return parse_jungfrau(buf, len, expect, out);
    case SDD_RO_FMT_NA62:
        return parse_na62(buf, len, out);
    }
    return SDD_RO_MAGIC; /* no format of ours */
}

sdd_err sdd_ro_encode(sdd_ro_format fmt, const struct sdd_ro_packet *p, void *hdr)
{
    if (p == NULL || hdr == NULL) {
        return SDD_EINVAL;
    }
    switch (fmt) {
    case SDD_RO_FMT_STREAM:
        encode_stream(p, hdr);
        return SDD_OK;
    case SDD_RO_FMT_JUNGFRAU:
        encode_jungfrau(p, hdr);
        return SDD_OK;
    case SDD_RO_FMT_NA62:
        return SDD_EINVAL; /* built by the trigger's packer (sdd_rich_pkt_*), not here */
    }
    return SDD_EINVAL;
}
