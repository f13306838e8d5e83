/* Detector readout over UDP: packet formats and their strict parser, detector emulators that
 * send, and a receiver that lands payloads straight into a persistent ring of frame-sized
 * slots, assembles frames by (frame id, packet id), accounts for every packet and hands filled
 * slots to one consumer thread.
 *
 * Formats (byte tables in docs/formats.md), both with a 48-byte little-endian header:
 *   SDD_RO_FMT_STREAM    sddaq's generic stream: magic, version, stream, frame and packet ids,
 *                        packets per frame, payload length, send time, CRC-32C of the header.
 *   SDD_RO_FMT_JUNGFRAU  the PSI slsDetector layout (REFERENCE.md §6.2): 128 packets of 8192
 *                        bytes per frame; sddaq's emulator puts the send time in `timestamp`
 *                        and a CRC-32C of the header in `debug`.
 * and, with a 24-byte header:
 *   SDD_RO_FMT_NA62      NA62-like multi-event packets of the TEL62 readout boards (the RICH
 *                        packet of docs/formats.md, as sdd_rich_pack builds them): magic,
 *                        version, board, event count, length, per-board sequence number,
 *                        burst id, first timestamp, then the events. Datagrams of this format
 *                        are not assembled into frames but packed back to back into the
 *                        slots, as NaNet's receive buffers hold them, for an event finder.
 *
 * Receive path today: recvmmsg. io_uring (Debian liburing) is a planned second backend behind
 * the same receiver; see docs/readout.md. */
#ifndef SDDAQ_READOUT_H
#define SDDAQ_READOUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sddaq/api.h"
#include "sddaq/err.h"
#include "sddaq/hist.h"

/* ---- Packet formats ------------------------------------------------------------------------ */

typedef enum {
    SDD_RO_FMT_STREAM = 0,
    SDD_RO_FMT_JUNGFRAU = 1,
    SDD_RO_FMT_NA62 = 2,
} sdd_ro_format;

#define SDD_RO_HEADER_SIZE 48
/* Largest UDP payload over IPv4 (65,507 bytes) less the header. */
#define SDD_RO_MAX_PAYLOAD (65507u - SDD_RO_HEADER_SIZE)
/* Most packets one frame may have (bounds the per-frame bitmaps: 8 KiB). */
#define SDD_RO_MAX_PACKETS 65536u

#define SDD_RO_STREAM_MAGIC   0x4F524453u /* bytes "SDRO" */
#define SDD_RO_STREAM_VERSION 1u
/* Stream header flags: only bit 0 is defined; set bits above it make a packet malformed. */
#define SDD_RO_FLAG_PATTERN 0x1u /* payload carries the test pattern (sdd_ro_pattern_fill) */

#define SDD_RO_JF_PACKETS  128u
#define SDD_RO_JF_PAYLOAD  8192u
#define SDD_RO_JF_DET_TYPE 3u
#define SDD_RO_JF_VERSION  2u

/* NA62 packets: header bytes, the largest packet (one datagram on a 1500-byte MTU). */
#define SDD_RO_NA62_HEADER  24
#define SDD_RO_NA62_MAX     1472u
#define SDD_RO_NA62_MAGIC   0x5032364Eu /* bytes "N62P" */
#define SDD_RO_NA62_VERSION 1u
#define SDD_RO_NA62_EOB       0x21424F45u              /* "EOB!": an end-of-burst packet's body */
#define SDD_RO_NA62_EOB_BYTES (SDD_RO_NA62_HEADER + 8) /* header, "EOB!", data packets sent */
/* NA62 packet flag: an end-of-burst packet (no events; packet_id = the board's data packets
 * in that burst). */
#define SDD_RO_FLAG_NA62_EOB 0x2u

/* Frame id reserved as "no frame"; a packet that carries it is malformed. */
#define SDD_RO_FRAME_NONE UINT64_MAX

/* Why a datagram was refused. The receiver counts each reason (corrupt_by[]). */
#define SDD_RO_REASON_MAP(X)                                                          \
    X(OK, "valid")                                                                    \
    X(SHORT, "shorter than the header")                                               \
    X(OVERSIZE, "longer than header plus the stream's payload")                       \
    X(MAGIC, "wrong magic (stream) or detector type (jungfrau)")                      \
    X(VERSION, "unknown format version")                                              \
    X(CHECKSUM, "header checksum mismatch")                                           \
    X(RESERVED, "reserved flag bits or fields not zero")                              \
    X(LENGTH, "payload length field disagrees with the datagram")                     \
    X(GEOMETRY, "packets per frame or payload size out of range or not the stream's") \
    X(PACKET_ID, "packet id not below packets per frame")                             \
    X(FRAME_ID, "reserved frame id")                                                  \
    X(STREAM, "stream (module) id not this receiver's")

typedef enum {
#define SDD_RO_REASON_ENUM(name, msg) SDD_RO_##name,
    SDD_RO_REASON_MAP(SDD_RO_REASON_ENUM)
#undef SDD_RO_REASON_ENUM
        SDD_RO_REASON_COUNT
} sdd_ro_reason;

/* One packet's header fields, decoded. payload_len is the payload bytes after the header.
 * NA62: stream_id is the board, frame_id its sequence number, packet_id 0 (end of burst: the
 * board's data packets in the burst), packets_per_frame 1, send_ns 0 (the boards send no time
 * of their own). */
struct sdd_ro_packet {
    uint64_t frame_id;
    uint64_t send_ns; /* sender's sdd_now_ns() when the datagram left */
    uint32_t stream_id;
    uint32_t packet_id;
    uint32_t packets_per_frame;
    uint32_t payload_len;
    uint32_t flags; /* stream: SDD_RO_FLAG_*; na62: SDD_RO_FLAG_NA62_EOB; jungfrau: 0 */
};

/* What a receiver expects of every packet of its stream. */
struct sdd_ro_geometry {
    uint32_t stream_id;
    uint32_t packets_per_frame;
    uint32_t payload_size;
};

/* Short name ("CHECKSUM") and message for a reason; never NULL. */
SDD_API const char *sdd_ro_reason_name(sdd_ro_reason r);
SDD_API const char *sdd_ro_reason_message(sdd_ro_reason r);

/* Validate and decode one datagram.
 * buf, len: the datagram; only the first min(len, SDD_RO_HEADER_SIZE) bytes are read, so the
 *           payload may live elsewhere (scatter receive) as long as len is its full length.
 * expect:   the stream's geometry, or NULL to check only what the format itself fixes.
 * out:      written only when the result is SDD_RO_OK.
 * Checks, in order: length, magic, version, checksum, reserved bits, length field, geometry,
 * packet id, frame id, stream id; returns the first that fails. NA62 (no checksum): length,
 * magic, version, length field (equal to the datagram, a multiple of 4), event count (not 0,
 * unless it is a 32-byte end-of-burst packet: SDD_RO_FLAG_NA62_EOB, packet_id its count). Any
 * bytes are safe: no read past buf + min(len, 48). Pure function; any thread. */
SDD_API sdd_ro_reason sdd_ro_parse(sdd_ro_format fmt, const void *buf, size_t len,
                                   const struct sdd_ro_geometry *expect, struct sdd_ro_packet *out);

/* Write the 48-byte header for p into hdr, checksum included. Fields are written as given,
 * valid or not (tests build malformed packets with it); jungfrau keeps the low 16 bits of
 * stream_id and ignores packets_per_frame, payload_len and flags. Returns SDD_OK or SDD_EINVAL
 * (NULL argument, unknown format). Any thread. */
SDD_API sdd_err sdd_ro_encode(sdd_ro_format fmt, const struct sdd_ro_packet *p, void *hdr);

/* CRC-32C (Castagnoli) of len bytes, as used by the header checksums. Any thread. */
SDD_API uint32_t sdd_ro_crc32c(const void *buf, size_t len);

/* Deterministic test payload of a packet: len bytes that depend on (stream, frame, packet) and
 * the byte offset, so a receiver can tell a misplaced or damaged payload. Any thread. */
SDD_API void sdd_ro_pattern_fill(uint32_t stream, uint64_t frame, uint32_t packet, void *buf,
                                 size_t len);

/* True when buf holds exactly what sdd_ro_pattern_fill() writes for these ids. */
SDD_API bool sdd_ro_pattern_check(uint32_t stream, uint64_t frame, uint32_t packet, const void *buf,
                                  size_t len);

/* ---- Emulator (sender) --------------------------------------------------------------------- */

typedef struct sdd_ro_emu sdd_ro_emu;

struct sdd_ro_emu_opts {
    sdd_ro_format format;
    struct sdd_ro_geometry geom; /* jungfrau: 128 x 8192 fixed */
    uint64_t first_frame;        /* id of the first frame (default 1) */
    uint64_t frames;             /* frames to send; 0 = until seconds pass or stop */
    double seconds;              /* stop after this long; 0 = no limit */
    double rate_pps;             /* datagrams per second; 0 = as fast as possible */
    double rate_gbps;            /* alternative to rate_pps: UDP payload Gb/s incl. header */
    uint32_t burst;              /* datagrams sent back to back per pacing step (default 32) */
    uint32_t batch;              /* datagrams per sendmmsg (default 32, at most 1024) */
    uint32_t gso;                /* datagrams per UDP_SEGMENT send (generic segmentation
                                    offload: one pass through the stack for up to 64 datagrams
                                    of at most 64 KiB together); 0 or 1 = off (default) */
    bool pattern;                /* fill payloads with sdd_ro_pattern_fill (default true) */
    /* Injection: each packet independently, with these probabilities, is lost (never sent),
     * corrupted (one header bit flipped), duplicated (sent twice back to back) or delayed by
     * reorder_distance datagrams; at most one of the four per packet. Sum must be <= 1. */
    double loss, corrupt, duplicate, reorder;
    uint32_t reorder_distance; /* default 3, at most 64 */
    uint64_t seed;             /* injection seed (default 1); same seed, same injections */
    uint64_t clean_first;      /* the first this many datagrams go out without faults, so a
                                  receiver can lock on (default 0) */
    int cpu;                   /* pin the sending thread; -1 = no pinning (default) */
    int sndbuf;                /* SO_SNDBUF bytes; 0 = system default */
    /* SDD_RO_FMT_NA62: one cycle of packets, back to back (as sdd_rich_pack writes them). The
     * emulator sends the cycle over and over, each pass with the next burst id and the boards'
     * sequence numbers running on; `frames` then counts datagrams. Read at create only. */
    const void *na62_packets;
    size_t na62_bytes;
};

/* What the emulator did, exactly. A receiver that lost nothing in the kernel sees:
 * received = packets - lost - corrupted, lost (its count) = lost + corrupted, corrupt =
 * corrupted, duplicate = duplicated, reordered = reordered, frames complete = frames -
 * damaged_frames, frames lost = empty_frames (except at the very start and end of the stream,
 * which it cannot see). */
struct sdd_ro_emu_stats {
    uint64_t frames;         /* frames generated */
    uint64_t packets;        /* packets generated (frames x packets per frame) */
    uint64_t datagrams;      /* datagrams handed to the kernel, duplicates included */
    uint64_t bytes;          /* UDP payload bytes of those datagrams */
    uint64_t lost;           /* packets never sent */
    uint64_t corrupted;      /* packets sent with a flipped header bit (once) */
    uint64_t duplicated;     /* packets sent twice */
    uint64_t reordered;      /* packets sent after a packet with a higher (frame, packet) id */
    uint64_t damaged_frames; /* frames with at least one packet lost or corrupted */
    uint64_t empty_frames;   /* frames with every packet lost or corrupted */
    uint64_t send_retries;   /* sendmmsg calls retried (ENOBUFS, EAGAIN, ECONNREFUSED, EINTR) */
    uint64_t unseen;         /* NA62: packets lost or corrupted after their board's last intact
                                one; no receiver can tell those are missing */
    uint64_t elapsed_ns;     /* first to last send */
};

/* Material for an NA62 emulator: `events` events of the RICH trigger's default geometry and
 * mix, generated from `seed` and packed as the TEL62 boards send them (sdd_rich_pack, packets
 * of at most one datagram); *bytes (malloc'd, the caller frees) holds the packets back to
 * back, *len their bytes. */
SDD_API sdd_err sdd_ro_na62_cycle(uint64_t seed, uint32_t events, uint8_t **bytes, size_t *len);

/* Defaults for a format: stream 0, 16 packets x 1024 B (jungfrau: 128 x 8192; na62: one
 * packet of at most 1472 B per "frame"), as fast as possible, no injection, pattern on. */
SDD_API void sdd_ro_emu_opts_default(struct sdd_ro_emu_opts *o, sdd_ro_format fmt);

/* Create an emulator that sends to host:port (numeric IPv4 or a name). Opens and connects a UDP
 * socket and allocates its buffers. Returns SDD_OK; SDD_EINVAL for bad options (geometry out of
 * range or not jungfrau's, probabilities outside [0, 1] or summing above 1, batch 0 or > 1024);
 * SDD_EINVAL also for NA62 packets that are not a clean cycle of valid packets.
 * SDD_ENOENT for an unknown host; SDD_ENOMEM; an OS error. Caller owns *out. */
SDD_API sdd_err sdd_ro_emu_create(const struct sdd_ro_emu_opts *o, const char *host, uint16_t port,
                                  sdd_ro_emu **out);

/* Send the whole stream on the calling thread (pinned if o->cpu >= 0); blocks until every frame
 * is sent, the time is up or sdd_ro_emu_stop() is called. Returns SDD_OK (also when stopped) or
 * the OS error of a send that cannot be retried. Call once per emulator. */
SDD_API sdd_err sdd_ro_emu_run(sdd_ro_emu *e);

/* Ask a running sdd_ro_emu_run() to return after its current batch. Any thread. */
SDD_API void sdd_ro_emu_stop(sdd_ro_emu *e);

/* Copy the counts so far. Exact once sdd_ro_emu_run() has returned; any thread. */
SDD_API void sdd_ro_emu_stats(const sdd_ro_emu *e, struct sdd_ro_emu_stats *out);

/* Close the socket and free; NULL is a no-op. Not while sdd_ro_emu_run() runs. */
SDD_API void sdd_ro_emu_destroy(sdd_ro_emu *e);

/* ---- Receiver ------------------------------------------------------------------------------ */

typedef struct sdd_ro_rx sdd_ro_rx;

/* What to do with a frame that closes with packets missing. */
typedef enum {
    SDD_RO_MISSING_DROP = 0, /* discard it (counted frames_dropped) */
    SDD_RO_MISSING_PAD,      /* deliver with missing packets zero-filled, flagged */
    SDD_RO_MISSING_PARTIAL,  /* deliver as is; missing packets' bytes are unspecified */
} sdd_ro_missing;

/* What to do when a new frame needs a slot and the consumer holds them all. */
typedef enum {
    SDD_RO_FULL_BLOCK = 0,   /* stop reading the socket until a slot comes back; the kernel
                                drops (counted kernel_drops via SO_RXQ_OVFL, and as lost) */
    SDD_RO_FULL_DROP_NEWEST, /* discard the new frame's packets (counted overrun) */
} sdd_ro_full;

struct sdd_ro_rx_opts {
    sdd_ro_format format;
    struct sdd_ro_geometry geom; /* NA62: a slot holds packets_per_frame packets of up to
                                    payload_size (1472) bytes; stream_id is not checked */
    const char *host;            /* address to bind (default "127.0.0.1"); "0.0.0.0" = all */
    uint16_t port;               /* 0 = any free port (sdd_ro_rx_port() tells which) */
    uint32_t slots;              /* frame slots in the ring (default 16, at least window + 1) */
    uint32_t window;             /* frames assembled at once (default 4, 1..64) */
    uint32_t batch;              /* datagrams per recvmmsg (default 32, 1..1024) */
    sdd_ro_missing missing;
    sdd_ro_full full;
    uint32_t frame_timeout_ms; /* close open frames after this long without a packet (100) */
    uint64_t resync_frames;    /* a frame id this far from the window restarts assembly (1024) */
    int rcvbuf;                /* SO_RCVBUF(FORCE) bytes (default 8 MiB); 0 = system default */
    int cpu;                   /* pin the receiver thread; -1 = no pinning (default) */
    bool busy_poll;            /* spin on MSG_DONTWAIT instead of blocking in recvmmsg */
    bool gro;                  /* UDP generic receive offload: the kernel hands over runs of
                                  a stream's datagrams (up to 64 KiB) in one piece; payloads
                                  are then copied once into their slots instead of landing in
                                  place. Pays off for small datagrams at high rates. */
    bool verify;               /* check every placed payload against the test pattern */
};

/* Frame flags. */
#define SDD_RO_FRAME_COMPLETE 0x1u /* every packet arrived */
#define SDD_RO_FRAME_PARTIAL  0x2u /* packets missing; bitmap says which arrived */
#define SDD_RO_FRAME_PADDED   0x4u /* missing packets' bytes are zero (SDD_RO_MISSING_PAD) */

/* A filled slot. Lives in the receiver; the consumer may read and write data[] and read the
 * rest between sdd_ro_rx_next() and sdd_ro_rx_release(). */
struct sdd_ro_frame {
    uint8_t *data; /* packet p's payload at data + p * payload_size */
    size_t bytes;  /* packets_per_frame * payload_size */
    uint64_t frame_id;
    uint32_t stream_id;
    uint32_t packets;      /* packets per frame */
    uint32_t received;     /* packets that arrived */
    uint32_t flags;        /* SDD_RO_FRAME_* */
    const uint8_t *bitmap; /* bit p (byte p / 8, bit p % 8) set: packet p arrived */
    uint64_t t_first_ns;   /* receive time of the frame's first packet (sdd_now_ns) */
    uint64_t t_ready_ns;   /* when it was handed to the consumer */
    uint32_t slot;         /* slot index, 0..slots-1 */
};

/* Counters. Packet accounting, for a stream whose frames all closed: every valid packet of a
 * known frame is received, duplicate, late or overrun; every packet that never arrived is lost
 * (kernel_drops tells how many of those the socket dropped). */
struct sdd_ro_counters {
    uint64_t datagrams; /* datagrams read from the socket */
    uint64_t bytes;     /* their bytes */
    uint64_t received;  /* valid packets placed into a frame */
    uint64_t lost;      /* packets missing when their frame closed (or whole frames) */
    uint64_t reordered; /* arrived after a packet with a higher (frame, packet) id */
    uint64_t duplicate; /* a packet already placed */
    uint64_t late;      /* for a frame already closed without it */
    uint64_t corrupt;   /* refused by the parser, all reasons */
    uint64_t corrupt_by[SDD_RO_REASON_COUNT];
    uint64_t overrun;        /* packets discarded because no slot was free (drop-newest) */
    uint64_t pattern_errors; /* verify: placed payloads that were not the expected pattern */
    uint64_t kernel_drops;   /* SO_RXQ_OVFL: datagrams the socket dropped (0 if unsupported) */
    uint64_t frames_complete;
    uint64_t frames_partial; /* delivered with packets missing (padded or partial) */
    uint64_t frames_dropped; /* closed incomplete and discarded (SDD_RO_MISSING_DROP) */
    uint64_t frames_lost;    /* never saw a packet of (inside the ids seen) */
    uint64_t frames_overrun; /* discarded for want of a slot (drop-newest) */
    uint64_t resyncs;        /* frame id jumps beyond resync_frames */
    uint64_t blocked_ns;     /* time spent waiting for a slot (block policy) */
    uint64_t zero_copy;      /* packets whose payload landed in place (no copy) */
    uint64_t coalesced;      /* gro: datagrams that came several to one receive */
    uint64_t end_of_burst;   /* NA62: end-of-burst packets (not packed into slots) */
    uint64_t open_bursts;    /* NA62: boards whose latest burst has had no end-of-burst packet
                                yet; packets lost after their last one are not counted */
};

/* Defaults for a format (see the field comments); geometry as sdd_ro_emu_opts_default, but
 * NA62 slots of 64 packets of 1472 bytes. */
SDD_API void sdd_ro_rx_opts_default(struct sdd_ro_rx_opts *o, sdd_ro_format fmt);

/* Create a receiver: bind its UDP socket, allocate the slot ring (one page-aligned region,
 * sdd_ro_rx_region) and assembly state. Nothing is read until sdd_ro_rx_start().
 * Returns SDD_OK; SDD_EINVAL for bad options; SDD_ETOOBIG when a slot (packets x payload)
 * exceeds 1 GiB; SDD_ENOMEM; an OS error (bind). Caller owns *out. */
SDD_API sdd_err sdd_ro_rx_create(const struct sdd_ro_rx_opts *o, sdd_ro_rx **out);

/* The bound UDP port. Any thread. */
SDD_API uint16_t sdd_ro_rx_port(const sdd_ro_rx *rx);

/* The slot region [*base, *base + *len) to register with a transport, so a next stage can move
 * slots without a copy. Any thread. */
SDD_API void sdd_ro_rx_region(const sdd_ro_rx *rx, void **base, size_t *len);

/* Start the receiver thread. Returns SDD_OK, SDD_EBUSY if already started, or SDD_EOS. */
SDD_API sdd_err sdd_ro_rx_start(sdd_ro_rx *rx);

/* Stop the receiver thread: it closes every open frame (by the missing-packet policy), hands
 * the delivered ones to the consumer and exits. Blocks until it has. Frames already handed over
 * stay valid until released or destroyed. Returns SDD_OK (also when not started). Not from the
 * consumer's own callbacks; any other thread. */
SDD_API sdd_err sdd_ro_rx_stop(sdd_ro_rx *rx);

/* Take the next filled slot, waiting up to timeout_ms (0 = do not wait, < 0 = forever, until
 * a frame comes or the receiver has stopped and nothing is left).
 * Returns SDD_OK with *out set (the consumer owns the slot until sdd_ro_rx_release);
 * SDD_EAGAIN on timeout; SDD_ECLOSED when stopped and drained.
 * Thread safety: one consumer thread. Waits by spinning about 1 µs, then in 20 µs naps, and
 * after 1 ms without a frame sleeps until the receiver hands one over (an idle consumer uses
 * no CPU). */
SDD_API sdd_err sdd_ro_rx_next(sdd_ro_rx *rx, struct sdd_ro_frame **out, int timeout_ms);

/* Give a slot back to the receiver. Returns SDD_OK, or SDD_EINVAL (counted, nothing changes)
 * for a frame that is not this receiver's or not held by the consumer (double release).
 * Consumer thread; never blocks. */
SDD_API sdd_err sdd_ro_rx_release(sdd_ro_rx *rx, struct sdd_ro_frame *f);

/* Snapshot of the counters, published by the receiver after each batch. Any thread. */
SDD_API void sdd_ro_rx_counters(const sdd_ro_rx *rx, struct sdd_ro_counters *out);

/* Copy the send -> slot-ready latency histogram (ns): one sample per complete frame, from the
 * send time of the packet that completed it to its hand-over. Valid after sdd_ro_rx_stop(). */
SDD_API void sdd_ro_rx_latency(const sdd_ro_rx *rx, sdd_hist *out);

/* Stop if running, then free everything (held frames become invalid); NULL is a no-op. */
SDD_API void sdd_ro_rx_destroy(sdd_ro_rx *rx);

#endif
