/* Malformed datagrams over a real socket: empty, short, oversize (up to the largest UDP
 * datagram), wrong magic and version, bad checksum, reserved bits, wrong length, geometry,
 * impossible packet and frame ids, a foreign stream, and random garbage, sent in the middle
 * of a frame. Each is counted under its reason and dropped; the frame around them arrives
 * intact. Then: a duplicate of a closed frame, a frame id far ahead (resync), a late packet
 * for a frame the window pushed out, and a frame that never came. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "rotest.h"

#define PPF     8
#define PAYLOAD 256
#define STREAM  9
#define GARBAGE 20

static int fd = -1;
static struct sockaddr_in to;
static uint64_t sent;
static uint8_t buf[65507];

static void send_raw(const void *data, size_t len)
{
    ssize_t n = sendto(fd, data, len, 0, (const struct sockaddr *)&to, sizeof(to));
    CHECK_EQ(n, (ssize_t)len);
    sent++;
}

static struct sdd_ro_packet pkt(uint64_t frame, uint32_t packet)
{
    return (struct sdd_ro_packet){.frame_id = frame,
                                  .send_ns = sdd_now_ns(),
                                  .stream_id = STREAM,
                                  .packet_id = packet,
                                  .packets_per_frame = PPF,
                                  .payload_len = PAYLOAD,
                                  .flags = SDD_RO_FLAG_PATTERN};
}

/* Send p with a pattern payload of payload_bytes (the header may claim otherwise). */
static void send_pkt(struct sdd_ro_packet p, size_t payload_bytes)
{
    CHECK_OK(sdd_ro_encode(SDD_RO_FMT_STREAM, &p, buf));
    sdd_ro_pattern_fill(p.stream_id, p.frame_id, p.packet_id, buf + SDD_RO_HEADER_SIZE,
                        payload_bytes);
    send_raw(buf, SDD_RO_HEADER_SIZE + payload_bytes);
}

static void send_frame(uint64_t frame, uint32_t from, uint32_t to_packet)
{
    for (uint32_t q = from; q < to_packet; q++) {
        send_pkt(pkt(frame, q), PAYLOAD);
    }
}

static void send_malformed(void)
{
    send_raw(buf, 0);
    send_raw(buf, 20);
    struct sdd_ro_packet p = pkt(1, 4);
    p.payload_len = PAYLOAD + 100;
    send_pkt(p, PAYLOAD + 100);
    memset(buf, 0xFF, sizeof(buf));
    send_raw(buf, sizeof(buf));
    CHECK_OK(sdd_ro_encode(SDD_RO_FMT_STREAM, &(struct sdd_ro_packet){0}, buf)); /* reset */
    p = pkt(1, 4);
    CHECK_OK(sdd_ro_encode(SDD_RO_FMT_STREAM, &p, buf));
    buf[1] ^= 0x40; /* magic */
    send_raw(buf, SDD_RO_HEADER_SIZE + PAYLOAD);
    buf[1] ^= 0x40;
    buf[5] = 7; /* version */
    send_raw(buf, SDD_RO_HEADER_SIZE + PAYLOAD);
    buf[5] = 0;
    buf[30] ^= 0x01; /* payload length: the checksum catches it */
    send_raw(buf, SDD_RO_HEADER_SIZE + PAYLOAD);
    p.flags = 0x8000;
    send_pkt(p, PAYLOAD);
    p = pkt(1, 4);
    send_pkt(p, PAYLOAD - 56); /* header says PAYLOAD: length */
    p.packets_per_frame = 4;
    p.packet_id = 2;
    send_pkt(p, PAYLOAD);
    p = pkt(1, PPF); /* packet id = packets per frame */
    send_pkt(p, PAYLOAD);
    p = pkt(SDD_RO_FRAME_NONE, 4);
    send_pkt(p, PAYLOAD);
    p = pkt(1, 4);
    p.stream_id = STREAM + 1;
    send_pkt(p, PAYLOAD);
    uint64_t rng = 0x1234567;
    for (int i = 0; i < GARBAGE; i++) {
        for (size_t k = 0; k < SDD_RO_HEADER_SIZE + PAYLOAD; k++) {
            buf[k] = (uint8_t)check_rand(&rng);
        }
        send_raw(buf, SDD_RO_HEADER_SIZE + PAYLOAD);
    }
}

int main(void)
{
    struct sdd_ro_rx_opts ro;
    sdd_ro_rx_opts_default(&ro, SDD_RO_FMT_STREAM);
    ro.geom = (struct sdd_ro_geometry){
        .stream_id = STREAM, .packets_per_frame = PPF, .payload_size = PAYLOAD};
    ro.window = 2;
    ro.verify = true;
    ro.frame_timeout_ms = 60000; /* only stop closes the last frame */
    sdd_ro_rx *rx = NULL;
    CHECK_OK(sdd_ro_rx_create(&ro, &rx));
    CHECK_REQUIRE(rx != NULL);
    CHECK_OK(sdd_ro_rx_start(rx));
    struct consumer cons;
    consumer_start(&cons, rx, PAYLOAD);

    fd = socket(AF_INET, SOCK_DGRAM, 0);
    CHECK_REQUIRE(fd >= 0);
    to = (struct sockaddr_in){.sin_family = AF_INET, .sin_port = htons(sdd_ro_rx_port(rx))};
    inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);

    send_frame(1, 0, 4);
    send_malformed();
    send_frame(1, 4, PPF); /* frame 1 complete around the garbage */
    send_frame(2, 0, PPF);
    send_pkt(pkt(1, 3), PAYLOAD);          /* duplicate of a closed frame */
    send_frame(5000, 0, PPF);              /* far ahead: resync, complete */
    send_frame(5001, 0, PPF - 1);          /* incomplete ... */
    send_frame(5003, 0, 1);                /* ... pushed out by 5003; 5002 never came */
    send_pkt(pkt(5001, PPF - 1), PAYLOAD); /* too late */
    CHECK(wait_datagrams(rx, sent));
    CHECK_OK(sdd_ro_rx_stop(rx));
    consumer_join(&cons);
    close(fd);

    struct sdd_ro_counters c;
    sdd_ro_rx_counters(rx, &c);
    for (int r = 1; r < SDD_RO_REASON_COUNT; r++) {
        printf("%-10s %llu\n", sdd_ro_reason_name((sdd_ro_reason)r),
               (unsigned long long)c.corrupt_by[r]);
    }
    CHECK_EQ(c.datagrams, sent);
    CHECK_EQ(c.corrupt_by[SDD_RO_OK], 0);
    CHECK_EQ(c.corrupt_by[SDD_RO_SHORT], 2);
    CHECK_EQ(c.corrupt_by[SDD_RO_OVERSIZE], 2);
    /* Random bytes almost surely fail at the magic; the seed is fixed, so exactly. */
    CHECK_EQ(c.corrupt_by[SDD_RO_MAGIC], 1 + GARBAGE);
    CHECK_EQ(c.corrupt_by[SDD_RO_VERSION], 1);
    CHECK_EQ(c.corrupt_by[SDD_RO_CHECKSUM], 1);
    CHECK_EQ(c.corrupt_by[SDD_RO_RESERVED], 1);
    CHECK_EQ(c.corrupt_by[SDD_RO_LENGTH], 1);
    CHECK_EQ(c.corrupt_by[SDD_RO_GEOMETRY], 1);
    CHECK_EQ(c.corrupt_by[SDD_RO_PACKET_ID], 1);
    CHECK_EQ(c.corrupt_by[SDD_RO_FRAME_ID], 1);
    CHECK_EQ(c.corrupt_by[SDD_RO_STREAM], 1);
    CHECK_EQ(c.corrupt, 13 + GARBAGE);
    CHECK_EQ(c.received, 3 * PPF + (PPF - 1) + 1);
    CHECK_EQ(c.duplicate, 1);
    CHECK_EQ(c.late, 1);
    CHECK_EQ(c.resyncs, 1);
    CHECK_EQ(c.frames_complete, 3);
    CHECK_EQ(c.frames_dropped, 2); /* 5001 and 5003, by the default drop policy */
    CHECK_EQ(c.frames_lost, 1);    /* 5002 */
    CHECK_EQ(c.lost, 1 + PPF + (PPF - 1));
    CHECK_EQ(c.pattern_errors, 0);
    CHECK_EQ(c.kernel_drops, 0);
    CHECK_EQ(cons.s.frames, 3);
    CHECK_EQ(cons.s.complete, 3);
    CHECK_EQ(cons.s.bad_payload, 0);
    CHECK_EQ(cons.s.first_id, 1);
    CHECK_EQ(cons.s.last_id, 5000);
    sdd_ro_rx_destroy(rx);
    return check_finish();
}
