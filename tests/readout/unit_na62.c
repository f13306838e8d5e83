/* NA62-like multi-event packets through the readout: the header parser refuses each kind of
 * damage under its own reason; a cycle of packets from the RICH generator, replayed by the
 * emulator, arrives packed back to back in the slots so that the trigger's event finder finds
 * every event in them; injected loss, corruption, duplicates and reordering give exactly the
 * counts the emulator predicts from the boards' sequence numbers. Each pass of the cycle ends
 * with every board's end-of-burst packet, so packets lost at a burst's end are counted too;
 * hand-made datagrams check that for lost packets at both ends of a burst. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "rotest.h"
#include "sddaq/trigger.h"

/* The receiver and the packet builder agree on an end of burst's size. */
_Static_assert(SDD_RO_NA62_EOB_BYTES == SDD_RICH_EOB_BYTES, "end-of-burst size");

/* The readout and the trigger describe the same packet. */
_Static_assert(SDD_RO_NA62_MAGIC == SDD_RICH_PKT_MAGIC, "magic");
_Static_assert(SDD_RO_NA62_VERSION == SDD_RICH_PKT_VERSION, "version");
_Static_assert(SDD_RO_NA62_HEADER == SDD_RICH_PKT_HEADER, "header size");
_Static_assert(SDD_RO_NA62_MAX == SDD_RICH_PKT_MAX, "largest packet");
_Static_assert(SDD_RO_NA62_EOB == SDD_RICH_EOB_MAGIC, "end of burst");

#define CYCLE_EVENTS 3000

struct cycle {
    uint8_t *bytes;
    int64_t len;
    uint32_t packets;
    uint32_t boards;       /* boards that send in a cycle: as many ends of burst */
    uint64_t board_events; /* events the event finder indexes in one cycle */
};

static void make_cycle(struct cycle *c)
{
    sdd_rich_gen_opts go;
    sdd_rich_gen_opts_default(&go);
    go.seed = 62;
    sdd_rich_gen *g = NULL;
    CHECK_OK(sdd_rich_gen_create(&go, &g));
    CHECK_REQUIRE(g != NULL);
    sdd_rich_event *evs = calloc(CYCLE_EVENTS, sizeof(*evs));
    CHECK_REQUIRE(evs != NULL);
    for (int i = 0; i < CYCLE_EVENTS; i++) {
        sdd_rich_gen_next(g, &evs[i]);
    }
    size_t cap = (size_t)CYCLE_EVENTS * 256;
    c->bytes = malloc(cap);
    CHECK_REQUIRE(c->bytes != NULL);
    c->len = sdd_rich_pack(sdd_rich_gen_pmtab(g), evs, CYCLE_EVENTS, SDD_RICH_PKT_MAX, c->bytes,
                           cap, NULL);
    CHECK_REQUIRE(c->len > 0);
    sdd_rich_index idx;
    CHECK_OK(sdd_rich_index_init(&idx, CYCLE_EVENTS * SDD_RICH_MAX_BOARDS));
    sdd_rich_ef_stats st = {0};
    c->board_events = sdd_rich_find_events(c->bytes, (size_t)c->len, NULL, &idx, &st);
    c->packets = (uint32_t)st.packets;
    c->boards = 0;
    bool sends[SDD_RICH_MAX_BOARDS] = {false};
    for (uint32_t i = 0; i < idx.n; i++) {
        c->boards += !sends[idx.board[i]];
        sends[idx.board[i]] = true;
    }
    CHECK(c->board_events >= CYCLE_EVENTS / 2);
    sdd_rich_index_fini(&idx);
    free(evs);
    sdd_rich_gen_destroy(g);
}

static void put32(uint8_t *p, uint32_t v)
{
    memcpy(p, &v, 4); /* the machine is little-endian, like the format */
}

static void test_parse(const struct cycle *c)
{
    uint8_t buf[2048];
    struct sdd_ro_packet p;
    uint32_t len;
    memcpy(&len, c->bytes + 8, 4);
    memcpy(buf, c->bytes, len);
    CHECK_EQ(sdd_ro_parse(SDD_RO_FMT_NA62, buf, len, NULL, &p), SDD_RO_OK);
    CHECK_EQ(p.payload_len, len - SDD_RO_NA62_HEADER);
    CHECK_EQ(sdd_ro_parse(SDD_RO_FMT_NA62, buf, 23, NULL, &p), SDD_RO_SHORT);
    CHECK_EQ(sdd_ro_parse(SDD_RO_FMT_NA62, buf, 1500, NULL, &p), SDD_RO_OVERSIZE);
    CHECK_EQ(sdd_ro_parse(SDD_RO_FMT_NA62, buf, len - 4, NULL, &p), SDD_RO_LENGTH);
    buf[0] ^= 1;
    CHECK_EQ(sdd_ro_parse(SDD_RO_FMT_NA62, buf, len, NULL, &p), SDD_RO_MAGIC);
    buf[0] ^= 1;
    buf[4] = 7;
    CHECK_EQ(sdd_ro_parse(SDD_RO_FMT_NA62, buf, len, NULL, &p), SDD_RO_VERSION);
    buf[4] = SDD_RO_NA62_VERSION;
    buf[6] = buf[7] = 0;
    CHECK_EQ(sdd_ro_parse(SDD_RO_FMT_NA62, buf, len, NULL, &p), SDD_RO_GEOMETRY);
    put32(buf + 8, 26); /* not a multiple of 4 */
    CHECK_EQ(sdd_ro_parse(SDD_RO_FMT_NA62, buf, 26, NULL, &p), SDD_RO_LENGTH);
    /* The emulator refuses a cycle that is not whole packets. */
    struct sdd_ro_emu_opts o;
    sdd_ro_emu_opts_default(&o, SDD_RO_FMT_NA62);
    o.na62_packets = c->bytes;
    o.na62_bytes = (size_t)c->len - 4;
    sdd_ro_emu *e = NULL;
    CHECK_EQ(sdd_ro_emu_create(&o, "127.0.0.1", 9, &e), SDD_EINVAL);
}

/* A started NA62 receiver on an ephemeral port, with a ring of 32 slots. */
static sdd_ro_rx *start_receiver(void)
{
    struct sdd_ro_rx_opts ro;
    sdd_ro_rx_opts_default(&ro, SDD_RO_FMT_NA62);
    ro.slots = 32;
    sdd_ro_rx *rx = NULL;
    CHECK_OK(sdd_ro_rx_create(&ro, &rx));
    CHECK_REQUIRE(rx != NULL);
    CHECK_OK(sdd_ro_rx_start(rx));
    return rx;
}

/* One packet of one one-hit event of board 0 with this sequence number, burst 5. */
static size_t data_packet(uint8_t *buf, uint32_t seq)
{
    sdd_rich_pkt_builder b;
    CHECK_OK(sdd_rich_pkt_begin(&b, buf, SDD_RICH_PKT_MAX, 0, seq, 5));
    uint16_t hit = SDD_RICH_HIT(3, 0);
    CHECK_OK(sdd_rich_pkt_add(&b, 100 + seq, 0, &hit, 1));
    return sdd_rich_pkt_end(&b);
}

/* Board 0's burst of packets 0..9 and its end of burst (10), of which only 2..6 and the end
 * of burst arrive: 2 lost before the first received, 3 after the last, all counted. Board 1
 * sends packets 0..3 and no end of burst: its burst stays open, nothing counted lost. */
static void test_end_of_burst(void)
{
    uint8_t buf[SDD_RICH_PKT_MAX];
    struct sdd_ro_packet p;
    CHECK_EQ(sdd_rich_pkt_eob(buf, sizeof(buf), 0, 10, 5, 10), (size_t)SDD_RICH_EOB_BYTES);
    CHECK_EQ(sdd_ro_parse(SDD_RO_FMT_NA62, buf, SDD_RICH_EOB_BYTES, NULL, &p), SDD_RO_OK);
    CHECK_EQ(p.flags, SDD_RO_FLAG_NA62_EOB);
    CHECK_EQ(p.packet_id, 10);
    CHECK_EQ(p.frame_id, 10);
    CHECK_EQ(sdd_rich_pkt_eob(buf, SDD_RICH_EOB_BYTES - 1, 0, 10, 5, 10), 0);
    buf[SDD_RICH_PKT_HEADER] ^= 1; /* no events and no end-of-burst body: refused */
    CHECK_EQ(sdd_ro_parse(SDD_RO_FMT_NA62, buf, SDD_RICH_EOB_BYTES, NULL, &p), SDD_RO_GEOMETRY);

    sdd_ro_rx *rx = start_receiver();
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    CHECK_REQUIRE(fd >= 0);
    struct sockaddr_in to = {.sin_family = AF_INET,
                             .sin_port = htons(sdd_ro_rx_port(rx)),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    uint64_t sent = 0;
    for (uint32_t seq = 2; seq <= 6; seq++, sent++) {
        size_t len = data_packet(buf, seq);
        CHECK(sendto(fd, buf, len, 0, (struct sockaddr *)&to, sizeof(to)) == (ssize_t)len);
    }
    size_t len = sdd_rich_pkt_eob(buf, sizeof(buf), 0, 10, 5, 10);
    CHECK(sendto(fd, buf, len, 0, (struct sockaddr *)&to, sizeof(to)) == (ssize_t)len);
    sent++;
    for (uint32_t seq = 0; seq < 4; seq++, sent++) {
        len = data_packet(buf, seq);
        buf[5] = 1; /* board 1 */
        buf[SDD_RICH_PKT_HEADER + 9] = 1;
        CHECK(sendto(fd, buf, len, 0, (struct sockaddr *)&to, sizeof(to)) == (ssize_t)len);
    }
    close(fd);
    CHECK(wait_datagrams(rx, sent));
    CHECK_OK(sdd_ro_rx_stop(rx));
    struct sdd_ro_counters c;
    sdd_ro_rx_counters(rx, &c);
    CHECK_EQ(c.received, 9);
    CHECK_EQ(c.end_of_burst, 1);
    CHECK_EQ(c.lost, 5);
    CHECK_EQ(c.open_bursts, 1);
    CHECK_EQ(c.corrupt, 0);
    sdd_ro_rx_destroy(rx);
}

/* Takes every slot, indexes its events with the trigger's event finder, releases it. */
struct finder {
    sdd_ro_rx *rx;
    uint64_t buffers, packets, events, bad;
    pthread_t thread;
};

static void *finder_main(void *arg)
{
    struct finder *f = arg;
    sdd_rich_index idx;
    if (sdd_rich_index_init(&idx, 64 * 1024) != SDD_OK) {
        f->bad++;
        return NULL;
    }
    struct sdd_ro_frame *fr;
    sdd_err err;
    while ((err = sdd_ro_rx_next(f->rx, &fr, 100)) != SDD_ECLOSED) {
        if (err != SDD_OK) {
            continue;
        }
        sdd_rich_ef_stats st = {0};
        f->events += sdd_rich_find_events(fr->data, fr->bytes, NULL, &idx, &st);
        f->packets += st.packets;
        f->bad += st.bad_magic + st.bad_version + st.bad_pkt_length + st.truncated +
                  st.bad_signature + st.bad_evt_length + st.count_mismatch + st.skipped_bytes;
        f->bad += st.packets != fr->received;
        f->buffers++;
        sdd_ro_rx_release(f->rx, fr);
    }
    sdd_rich_index_fini(&idx);
    return NULL;
}

static void run(const struct cycle *cy, double fault, uint64_t seed)
{
    sdd_ro_rx *rx = start_receiver();
    struct finder fin = {.rx = rx};
    CHECK_REQUIRE(pthread_create(&fin.thread, NULL, finder_main, &fin) == 0);

    const uint64_t passes = 20;
    struct emu_job job = {.port = sdd_ro_rx_port(rx)};
    sdd_ro_emu_opts_default(&job.o, SDD_RO_FMT_NA62);
    job.o.na62_packets = cy->bytes;
    job.o.na62_bytes = (size_t)cy->len;
    job.o.frames = passes * (cy->packets + cy->boards); /* datagrams: whole bursts */
    job.o.rate_pps = 40000;
    job.o.seed = seed;
    job.o.loss = job.o.corrupt = job.o.duplicate = job.o.reorder = fault;
    job.o.reorder_distance = 6;
    job.o.clean_first = cy->packets; /* every board's first packet arrives intact */
    emu_job_start(&job);
    emu_job_join(&job);
    const struct sdd_ro_emu_stats *st = &job.st;
    CHECK(wait_datagrams(rx, st->datagrams));
    CHECK_OK(sdd_ro_rx_stop(rx));
    pthread_join(fin.thread, NULL);

    struct sdd_ro_counters c;
    sdd_ro_rx_counters(rx, &c);
    printf("na62 fault %.2f: %llu datagrams, lost %llu corrupt %llu dup %llu reordered %llu "
           "unseen %llu; %llu slots, %llu events\n",
           fault, (unsigned long long)st->datagrams, (unsigned long long)st->lost,
           (unsigned long long)st->corrupted, (unsigned long long)st->duplicated,
           (unsigned long long)st->reordered, (unsigned long long)st->unseen,
           (unsigned long long)fin.buffers, (unsigned long long)fin.events);
    CHECK_REQUIRE(c.kernel_drops == 0);
    CHECK_EQ(c.datagrams, st->datagrams);
    CHECK_EQ(c.corrupt, st->corrupted);
    CHECK_EQ(c.corrupt_by[SDD_RO_MAGIC] + c.corrupt_by[SDD_RO_VERSION], st->corrupted);
    CHECK_EQ(c.duplicate, st->duplicated);
    CHECK_EQ(c.reordered, st->reordered);
    CHECK_EQ(c.lost, st->lost + st->corrupted - st->unseen);
    /* Packets kept, and ends of burst counted but not kept. */
    CHECK_EQ(c.received + c.end_of_burst, st->datagrams - st->corrupted - st->duplicated);
    /* A board's burst is still open at the end only when its last end of burst never came. */
    CHECK_EQ(c.open_bursts == 0, st->unseen == 0);
    CHECK_EQ(c.late, 0);
    CHECK_EQ(c.overrun, 0);
    CHECK_EQ(c.resyncs, 0);
    /* Every packet kept reached the event finder whole, in slots it could parse. */
    CHECK_EQ(fin.bad, 0);
    CHECK_EQ(fin.packets, c.received);
    CHECK_EQ(fin.buffers, c.frames_complete);
    if (fault == 0) {
        CHECK_EQ(c.lost, 0);
        CHECK_EQ(c.end_of_burst, passes * cy->boards);
        CHECK_EQ(fin.events, passes * cy->board_events);
    } else {
        CHECK(st->lost > 0 && st->corrupted > 0 && st->duplicated > 0 && st->reordered > 0);
        CHECK(fin.events < passes * cy->board_events);
    }
    sdd_ro_rx_destroy(rx);
}

int main(void)
{
    struct cycle cy;
    make_cycle(&cy);
    printf("cycle: %u packets, %lld bytes, %llu board events\n", cy.packets, (long long)cy.len,
           (unsigned long long)cy.board_events);
    test_parse(&cy);
    test_end_of_burst();
    run(&cy, 0, 1);
    run(&cy, 0.02, 7);
    run(&cy, 0.02, 8);
    free(cy.bytes);
    return check_finish();
}
