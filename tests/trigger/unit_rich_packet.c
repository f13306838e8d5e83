/* RICH packets, event finder and merge (src/trigger/rich_packet.c, rich_event_finder.c,
 * rich_merge.c): built packets index back exactly; every kind of corruption (bad magic,
 * version, board, packet length, truncation at every byte, bad signature, event length, hit
 * count, channel, timestamp, event count) is counted under its own reason and skipped while the
 * good events around it survive; random damage never reads out of bounds (ASan) and never
 * indexes more events than the buffer can hold; the merge fuses boards within the window,
 * drops repeated channels, caps at 64 hits and counts out-of-order input. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "sddaq/log.h"
#include "sddaq/trigger.h"

static sdd_rich_pmtab *tab;

/* A channel of board b (PM n of its half). */
static uint16_t channel_of(unsigned b, unsigned n)
{
    unsigned k = 0;
    for (unsigned ch = 0; ch < SDD_RICH_CHANNELS; ch++) {
        if (sdd_rich_pmtab_board(tab, ch) == (int)b && k++ == n) {
            return (uint16_t)ch;
        }
    }
    CHECK_REQUIRE(false);
    return 0;
}

/* One packet of board b with nev events of 1..5 hits at timestamps t0, t0+4, ... */
static size_t make_packet(uint8_t *buf, unsigned b, unsigned nev, uint32_t t0)
{
    sdd_rich_pkt_builder pb;
    CHECK_OK(sdd_rich_pkt_begin(&pb, buf, SDD_RICH_PKT_MAX, (uint8_t)b, 7, 0));
    for (unsigned e = 0; e < nev; e++) {
        uint16_t hits[5];
        unsigned n = 1 + e % 5;
        for (unsigned i = 0; i < n; i++) {
            hits[i] = SDD_RICH_HIT(channel_of(b, e + 3 * i), i);
        }
        CHECK_OK(sdd_rich_pkt_add(&pb, t0 + 4 * e, 3, hits, n));
    }
    return sdd_rich_pkt_end(&pb);
}

static uint32_t run_finder(const uint8_t *buf, size_t len, sdd_rich_index *idx,
                           sdd_rich_ef_stats *st)
{
    memset(st, 0, sizeof(*st));
    return sdd_rich_find_events(buf, len, tab, idx, st);
}

static uint64_t dropped(const sdd_rich_ef_stats *s)
{
    return s->bad_magic + s->bad_version + s->bad_board + s->bad_pkt_length + s->truncated +
           s->bad_signature + s->bad_evt_length + s->too_many_hits + s->bad_channel +
           s->bad_timestamp + s->count_mismatch;
}

static void good_buffer(sdd_rich_index *idx)
{
    uint8_t buf[4 * SDD_RICH_PKT_MAX];
    size_t len = 0;
    for (unsigned b = 0; b < 4; b++) {
        len += make_packet(buf + len, b, 10, 100);
    }
    sdd_rich_ef_stats st;
    CHECK_EQ(run_finder(buf, len, idx, &st), 40);
    CHECK_EQ(st.packets, 4);
    CHECK_EQ(dropped(&st), 0);
    CHECK_EQ(st.skipped_bytes, 0);
    CHECK_EQ(idx->board[0], 0);
    CHECK_EQ(idx->board[39], 3);
    CHECK_EQ(idx->timestamp[9], 136);
    CHECK_EQ(idx->nhits[4], 5);
    /* Merge: four boards at equal timestamps fuse into 10 events of all their hits. */
    sdd_rich_batch batch;
    CHECK_OK(sdd_rich_batch_init(&batch, 64));
    sdd_rich_merge_stats ms = {0};
    CHECK_EQ(sdd_rich_merge(buf, idx, 1, &batch, &ms), 10);
    CHECK_EQ(ms.fused, 30);
    CHECK_EQ(batch.boards[0], 0xF);
    CHECK_EQ(batch.nhits[4], 20);
    CHECK_EQ(batch.timestamp[1], 104);
    CHECK_EQ(ms.dup_channels + ms.overflow + ms.unordered, 0);
    /* Window 0 and timestamps 4 apart: still fused (equal stamps); other boards shifted by 2
     * and window 1: not fused. */
    size_t l2 = make_packet(buf, 0, 10, 100);
    l2 += make_packet(buf + l2, 1, 10, 102);
    run_finder(buf, l2, idx, &(sdd_rich_ef_stats){0});
    memset(&ms, 0, sizeof(ms));
    CHECK_EQ(sdd_rich_merge(buf, idx, 1, &batch, &ms), 20);
    memset(&ms, 0, sizeof(ms));
    CHECK_EQ(sdd_rich_merge(buf, idx, 2, &batch, &ms), 10);
    CHECK_EQ(batch.timestamp[0], 100);
    /* A one-event packet sent twice (the same timestamp): its channels repeat and are dropped
     * once; the count says so. */
    sdd_rich_pkt_builder pb;
    uint16_t three[3] = {channel_of(2, 0), channel_of(2, 5), channel_of(2, 0)};
    CHECK_OK(sdd_rich_pkt_begin(&pb, buf, SDD_RICH_PKT_MAX, 2, 0, 0));
    CHECK_OK(sdd_rich_pkt_add(&pb, 50, 0, three, 3));
    size_t l3 = sdd_rich_pkt_end(&pb);
    memcpy(buf + l3, buf, l3);
    run_finder(buf, 2 * l3, idx, &(sdd_rich_ef_stats){0});
    memset(&ms, 0, sizeof(ms));
    CHECK_EQ(sdd_rich_merge(buf, idx, 1, &batch, &ms), 1);
    CHECK_EQ(ms.dup_channels, 1 + 3);
    CHECK_EQ(batch.nhits[0], 2);
    /* Out of order within a board: counted, events still come out. */
    size_t l4 = make_packet(buf, 1, 2, 500);
    l4 += make_packet(buf + l4, 1, 2, 100);
    run_finder(buf, l4, idx, &(sdd_rich_ef_stats){0});
    memset(&ms, 0, sizeof(ms));
    CHECK_EQ(sdd_rich_merge(buf, idx, 1, &batch, &ms), 4);
    CHECK(ms.unordered >= 1);
    sdd_rich_batch_fini(&batch);
}

/* A board's end-of-burst packet between two data packets: a good packet without events, not
 * a damaged one; an end of burst cut short by the buffer's end is truncated. */
static void end_of_burst(sdd_rich_index *idx)
{
    uint8_t buf[3 * SDD_RICH_PKT_MAX];
    size_t len = make_packet(buf, 0, 10, 100);
    len += sdd_rich_pkt_eob(buf + len, SDD_RICH_EOB_BYTES, 0, 8, 0, 2);
    len += make_packet(buf + len, 1, 10, 100);
    sdd_rich_ef_stats st;
    CHECK_EQ(run_finder(buf, len, idx, &st), 20);
    CHECK_EQ(st.packets, 3);
    CHECK_EQ(dropped(&st), 0);
    CHECK_EQ(st.skipped_bytes, 0);
    size_t cut = make_packet(buf, 0, 10, 100) + SDD_RICH_EOB_BYTES - 4;
    CHECK_EQ(run_finder(buf, cut, idx, &st), 10);
    CHECK_EQ(st.truncated, 1);
}

/* The 64-hit cap holds after fusing two full boards. */
static void merge_cap(sdd_rich_index *idx)
{
    uint8_t buf[2 * SDD_RICH_PKT_MAX];
    size_t len = 0;
    for (unsigned b = 0; b < 2; b++) {
        sdd_rich_pkt_builder pb;
        uint16_t hits[SDD_RICH_MAX_HITS];
        for (unsigned i = 0; i < SDD_RICH_MAX_HITS; i++) {
            hits[i] = channel_of(b, i);
        }
        CHECK_OK(sdd_rich_pkt_begin(&pb, buf + len, SDD_RICH_PKT_MAX, (uint8_t)b, 0, 0));
        CHECK_OK(sdd_rich_pkt_add(&pb, 9, 0, hits, SDD_RICH_MAX_HITS));
        CHECK_EQ(sdd_rich_pkt_add(&pb, 9, 0, hits, SDD_RICH_MAX_HITS + 1), SDD_EINVAL);
        CHECK_EQ(sdd_rich_pkt_add(&pb, 1u << 31, 0, hits, 1), SDD_EINVAL);
        len += sdd_rich_pkt_end(&pb);
    }
    sdd_rich_batch batch;
    CHECK_OK(sdd_rich_batch_init(&batch, 4));
    sdd_rich_merge_stats ms = {0};
    run_finder(buf, len, idx, &(sdd_rich_ef_stats){0});
    CHECK_EQ(sdd_rich_merge(buf, idx, 1, &batch, &ms), 1);
    CHECK_EQ(batch.nhits[0], SDD_RICH_MAX_HITS);
    CHECK_EQ(ms.overflow, SDD_RICH_MAX_HITS);
    sdd_rich_batch_fini(&batch);
}

static void put32(uint8_t *p, uint32_t v)
{
    memcpy(p, &v, 4); /* the test runs on little-endian machines only */
}

/* Three packets; the middle one is damaged by `damage`. Good events of packets 1 and 3 must
 * all come through, and the damage must land in the expected counter. */
static void damaged(sdd_rich_index *idx, const char *what, void (*damage)(uint8_t *pkt),
                    size_t counter_off, uint32_t min_events)
{
    uint8_t buf[3 * SDD_RICH_PKT_MAX];
    size_t a = make_packet(buf, 0, 6, 10);
    size_t b = make_packet(buf + a, 1, 6, 10);
    size_t c = make_packet(buf + a + b, 2, 6, 10);
    damage(buf + a);
    sdd_rich_ef_stats st;
    uint32_t n = run_finder(buf, a + b + c, idx, &st);
    uint64_t count;
    memcpy(&count, (const uint8_t *)&st + counter_off, 8);
    if (n < min_events || count == 0) {
        fprintf(stderr, "damage '%s': %u events, counter %llu\n", what, n,
                (unsigned long long)count);
    }
    CHECK(n >= min_events);
    CHECK(n <= 18);
    CHECK(count >= 1);
    CHECK_EQ(idx->board[0], 0);
    CHECK_EQ(idx->board[n - 1], 2);
}

static void d_magic(uint8_t *p)
{
    p[0] ^= 0xFF;
}
static void d_version(uint8_t *p)
{
    p[4] = 9;
}
static void d_board(uint8_t *p)
{
    p[5] = 200;
}
static void d_pktlen(uint8_t *p)
{
    put32(p + 8, 13);
}
static void d_pktlen_big(uint8_t *p)
{
    put32(p + 8, 4 * SDD_RICH_PKT_MAX);
}
static void d_signature(uint8_t *p)
{
    p[24] ^= 1;
}
static void d_evtlen(uint8_t *p)
{
    put32(p + 24 + 12, 400);
}
static void d_nhits(uint8_t *p)
{
    p[24 + 10] = 200;
}
static void d_channel(uint8_t *p)
{
    p[24 + 16] = 0xFF;
    p[24 + 17] = 0x07;
} /* 2047: no PM */
static void d_timestamp(uint8_t *p)
{
    p[24 + 7] = 0x80;
}
static void d_count(uint8_t *p)
{
    p[6] = 2;
}
static void d_evtboard(uint8_t *p)
{
    p[24 + 9] = 3;
}

#define OFF(field) offsetof(sdd_rich_ef_stats, field)

static void corruption(sdd_rich_index *idx)
{
    damaged(idx, "magic", d_magic, OFF(bad_magic), 12);
    damaged(idx, "version", d_version, OFF(bad_version), 12);
    damaged(idx, "board", d_board, OFF(bad_board), 12);
    damaged(idx, "packet length", d_pktlen, OFF(bad_pkt_length), 12);
    damaged(idx, "packet length too big", d_pktlen_big, OFF(bad_pkt_length), 12);
    damaged(idx, "signature", d_signature, OFF(bad_signature), 17);
    damaged(idx, "event length", d_evtlen, OFF(bad_evt_length), 17);
    damaged(idx, "hit count", d_nhits, OFF(too_many_hits), 17);
    damaged(idx, "channel", d_channel, OFF(bad_channel), 17);
    damaged(idx, "timestamp", d_timestamp, OFF(bad_timestamp), 17);
    damaged(idx, "event count", d_count, OFF(count_mismatch), 18);
    damaged(idx, "event board", d_evtboard, OFF(bad_board), 17);
}

/* Every truncation of a two-packet buffer: the events wholly inside are found, the rest is
 * counted, nothing is read past the end (ASan). Each cut is copied to a buffer of exactly its
 * length so that an overread would hit the redzone. */
static void truncation(sdd_rich_index *idx)
{
    uint8_t full[2 * SDD_RICH_PKT_MAX];
    size_t a = make_packet(full, 0, 5, 10);
    size_t len = a + make_packet(full + a, 1, 5, 10);
    for (size_t cut = 0; cut <= len; cut++) {
        uint8_t *buf = malloc(cut ? cut : 1);
        CHECK_REQUIRE(buf != NULL);
        memcpy(buf, full, cut);
        sdd_rich_ef_stats st;
        uint32_t n = run_finder(buf, cut, idx, &st);
        if (cut == len || cut == a) {
            CHECK_EQ(n, cut == len ? 10 : 5);
            CHECK_EQ(dropped(&st), 0);
        } else if (cut > 0) {
            CHECK(dropped(&st) >= 1);
            CHECK(n < 10);
        }
        free(buf);
    }
}

/* Random damage: never out of bounds, never more events than headers fit, and the counters
 * account for every packet that is neither good nor skipped. */
static void random_damage(sdd_rich_index *idx)
{
    uint64_t rng = 77;
    uint8_t full[4 * SDD_RICH_PKT_MAX];
    size_t len = 0;
    for (unsigned b = 0; b < 4; b++) {
        len += make_packet(full + len, b, 20, 10);
    }
    for (int t = 0; t < 3000; t++) {
        size_t cut = len - check_rand(&rng) % 64;
        uint8_t *buf = malloc(cut);
        CHECK_REQUIRE(buf != NULL);
        memcpy(buf, full, cut);
        int flips = 1 + (int)(check_rand(&rng) % 8);
        for (int i = 0; i < flips; i++) {
            buf[check_rand(&rng) % cut] ^= (uint8_t)(1u << (check_rand(&rng) % 8));
        }
        sdd_rich_ef_stats st;
        uint32_t n = run_finder(buf, cut, idx, &st);
        if (n > cut / SDD_RICH_EVT_HEADER || n > 80) {
            CHECK(false);
        }
        for (uint32_t k = 0; k < n; k++) {
            if (idx->offset[k] + 16 + 2 * idx->nhits[k] > cut || idx->nhits[k] > 64) {
                CHECK(false);
            }
        }
        free(buf);
    }
    CHECK(true);
}

/* A full index drops the rest and says so. */
/* A hit on another board's PM, or on no PM, is caught at every place of events of 1 to 64
 * hits (sizes around the 8- and 16-wide steps a faster check would take); the clean event
 * passes. */
static void channel_positions(sdd_rich_index *idx)
{
    static const unsigned SIZES[] = {1, 2, 7, 8, 9, 16, 17, 64};
    uint8_t buf[SDD_RICH_PKT_MAX];
    for (size_t z = 0; z < sizeof(SIZES) / sizeof(SIZES[0]); z++) {
        unsigned n = SIZES[z];
        for (unsigned bad = 0; bad <= n; bad++) { /* bad == n: none */
            for (int kind = 0; kind < 2 && (kind == 0 || bad < n); kind++) {
                uint16_t hits[SDD_RICH_MAX_HITS];
                for (unsigned i = 0; i < n; i++) {
                    hits[i] = SDD_RICH_HIT(channel_of(1, i), 0);
                }
                if (bad < n) {
                    hits[bad] = kind == 0 ? channel_of(2, bad) : SDD_RICH_CHANNELS - 1;
                }
                sdd_rich_pkt_builder pb;
                CHECK_OK(sdd_rich_pkt_begin(&pb, buf, sizeof(buf), 1, 7, 0));
                CHECK_OK(sdd_rich_pkt_add(&pb, 100, 3, hits, n));
                size_t len = sdd_rich_pkt_end(&pb);
                sdd_rich_ef_stats st;
                uint32_t found = run_finder(buf, len, idx, &st);
                CHECK_EQ(found, bad < n ? 0u : 1u);
                CHECK_EQ(st.bad_channel, bad < n ? 1u : 0u);
            }
        }
    }
}

static void index_full(void)
{
    sdd_rich_index small;
    CHECK_OK(sdd_rich_index_init(&small, 3));
    uint8_t buf[SDD_RICH_PKT_MAX];
    size_t len = make_packet(buf, 0, 5, 10);
    sdd_rich_ef_stats st = {0};
    CHECK_EQ(sdd_rich_find_events(buf, len, tab, &small, &st), 3);
    CHECK_EQ(st.index_full, 2);
    sdd_rich_index_fini(&small);
    sdd_rich_index_fini(NULL);
}

/* Packing whole events: every board's share comes back, in order. */
static void pack_roundtrip(sdd_rich_index *idx)
{
    sdd_rich_gen_opts go;
    sdd_rich_gen_opts_default(&go);
    sdd_rich_gen *g = NULL;
    CHECK_OK(sdd_rich_gen_create(&go, &g));
    static sdd_rich_event evs[300];
    uint64_t hits = 0, nonempty = 0;
    for (int i = 0; i < 300; i++) {
        sdd_rich_gen_next(g, &evs[i]);
        hits += evs[i].nhits;
        nonempty += evs[i].nhits > 0;
    }
    size_t cap = 300 * 4 * sdd_rich_evt_bytes(64);
    uint8_t *buf = malloc(cap);
    CHECK_REQUIRE(buf != NULL);
    int64_t len = sdd_rich_pack(tab, evs, 300, SDD_RICH_PKT_MAX, buf, cap, NULL);
    CHECK_REQUIRE(len > 0);
    CHECK_EQ(sdd_rich_pack(tab, evs, 300, SDD_RICH_PKT_MAX, buf, 100, NULL), SDD_ETOOBIG);
    sdd_rich_ef_stats st;
    run_finder(buf, (size_t)len, idx, &st);
    CHECK_EQ(dropped(&st), 0);
    CHECK_EQ(st.hits, hits);
    sdd_rich_batch batch;
    CHECK_OK(sdd_rich_batch_init(&batch, 400));
    sdd_rich_merge_stats ms = {0};
    CHECK_EQ(sdd_rich_merge(buf, idx, 1, &batch, &ms), nonempty);
    uint64_t merged_hits = 0;
    for (uint32_t e = 0; e < batch.n; e++) {
        CHECK_EQ(batch.first[e], merged_hits); /* packed tight, as the GPU copy takes them */
        merged_hits += batch.nhits[e];
        CHECK(e == 0 || batch.timestamp[e] > batch.timestamp[e - 1]);
    }
    CHECK_EQ(merged_hits, hits);
    sdd_rich_batch_fini(&batch);
    free(buf);
    sdd_rich_gen_destroy(g);
}

int main(void)
{
    sdd_log_configure("none");
    sdd_rich_geom geom;
    sdd_rich_geom_default(&geom);
    CHECK_OK(sdd_rich_pmtab_create(&geom, &tab));
    sdd_rich_index idx;
    CHECK_OK(sdd_rich_index_init(&idx, 4096));
    good_buffer(&idx);
    end_of_burst(&idx);
    merge_cap(&idx);
    corruption(&idx);
    channel_positions(&idx);
    truncation(&idx);
    random_damage(&idx);
    index_full();
    pack_roundtrip(&idx);
    sdd_rich_index_fini(&idx);
    sdd_rich_pmtab_destroy(tab);
    return check_finish();
}
