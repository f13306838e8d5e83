/* A consumer that stops releasing slots, under both full-ring policies. It holds every slot
 * while the emulator keeps sending; the frames it holds must stay intact (never refilled).
 * Block: the receiver stops reading, the kernel drops, and SO_RXQ_OVFL plus the frame gaps
 * account for every packet (received + lost = sent). Drop-newest: the receiver keeps reading
 * and discards frames it has no slot for (received + overrun = sent, nothing lost). After the
 * consumer releases, a second burst of frames flows normally. A stale release of a slot the
 * receiver has refilled and put in the ready ring (not yet taken) is refused, and the frame in
 * it arrives intact. */
#include "rotest.h"

#define PPF     8
#define PAYLOAD 1024
#define SLOTS   4
#define PHASE1  100
#define PHASE2  10

/* Send frames [first, first + frames) at pps; no CHECKs here (it runs on other threads). */
static sdd_err send_frames(uint16_t port, uint64_t first, uint64_t frames, double pps,
                           struct sdd_ro_emu_stats *st)
{
    struct sdd_ro_emu_opts o;
    sdd_ro_emu_opts_default(&o, SDD_RO_FMT_STREAM);
    o.geom =
        (struct sdd_ro_geometry){.stream_id = 1, .packets_per_frame = PPF, .payload_size = PAYLOAD};
    o.first_frame = first;
    o.frames = frames;
    o.rate_pps = pps;
    sdd_ro_emu *e = NULL;
    sdd_err err = sdd_ro_emu_create(&o, "127.0.0.1", port, &e);
    if (err == SDD_OK) {
        err = sdd_ro_emu_run(e);
        sdd_ro_emu_stats(e, st);
    }
    sdd_ro_emu_destroy(e);
    return err;
}

struct sender {
    uint16_t port;
    struct sdd_ro_emu_stats st;
    sdd_err err;
    pthread_t thread;
};

static void *sender_main(void *arg)
{
    struct sender *s = arg;
    s->err = send_frames(s->port, 1, PHASE1, 20000, &s->st);
    return NULL;
}

/* Wait until the receiver has read nothing new for 300 ms (at most 20 s). */
static void wait_quiet(sdd_ro_rx *rx)
{
    struct sdd_ro_counters c;
    uint64_t last = UINT64_MAX, since = sdd_now_ns(), deadline = since + 20 * SDD_NS_PER_S;
    while (sdd_now_ns() < deadline) {
        sdd_ro_rx_counters(rx, &c);
        if (c.datagrams != last) {
            last = c.datagrams;
            since = sdd_now_ns();
        } else if (sdd_now_ns() - since > 300 * SDD_NS_PER_MS) {
            return;
        }
        sdd_sleep_ns(10 * SDD_NS_PER_MS);
    }
}

static void run(sdd_ro_full policy)
{
    struct sdd_ro_rx_opts ro;
    sdd_ro_rx_opts_default(&ro, SDD_RO_FMT_STREAM);
    ro.geom =
        (struct sdd_ro_geometry){.stream_id = 1, .packets_per_frame = PPF, .payload_size = PAYLOAD};
    ro.slots = SLOTS;
    ro.window = 2;
    ro.full = policy;
    ro.verify = true;
    /* Block: a small socket buffer, so the stalled receiver makes the kernel drop. */
    ro.rcvbuf = policy == SDD_RO_FULL_BLOCK ? 64 << 10 : 8 << 20;
    sdd_ro_rx *rx = NULL;
    CHECK_OK(sdd_ro_rx_create(&ro, &rx));
    CHECK_REQUIRE(rx != NULL);
    CHECK_OK(sdd_ro_rx_start(rx));

    struct sender snd = {.port = sdd_ro_rx_port(rx)};
    CHECK_REQUIRE(pthread_create(&snd.thread, NULL, sender_main, &snd) == 0);
    /* The stalled consumer: take every slot, release none. */
    struct sdd_ro_frame *held[SLOTS];
    int nheld = 0;
    uint64_t deadline = sdd_now_ns() + 20 * SDD_NS_PER_S;
    while (nheld < SLOTS && sdd_now_ns() < deadline) {
        if (sdd_ro_rx_next(rx, &held[nheld], 100) == SDD_OK) {
            nheld++;
        }
    }
    pthread_join(snd.thread, NULL);
    CHECK_OK(snd.err);
    CHECK_REQUIRE(nheld == SLOTS);
    wait_quiet(rx);
    /* Nothing more can come while every slot is held. */
    struct sdd_ro_frame *extra;
    CHECK_EQ(sdd_ro_rx_next(rx, &extra, 50), SDD_EAGAIN);
    struct seen held_seen = {0};
    for (int i = 0; i < nheld; i++) {
        check_frame(held[i], PAYLOAD, &held_seen);
    }
    CHECK_EQ(held_seen.complete, SLOTS);
    CHECK_EQ(held_seen.bad_payload, 0); /* not overwritten while held */
    for (int i = 0; i < nheld; i++) {
        CHECK_OK(sdd_ro_rx_release(rx, held[i]));
    }
    CHECK_EQ(sdd_ro_rx_release(rx, held[0]), SDD_EINVAL); /* double release */
    CHECK_EQ(sdd_ro_rx_release(rx, (struct sdd_ro_frame *)&held_seen), SDD_EINVAL);
    CHECK_EQ(sdd_ro_rx_release(rx, NULL), SDD_EINVAL);

    struct consumer cons;
    consumer_start(&cons, rx, PAYLOAD);
    struct sdd_ro_emu_stats st2;
    CHECK_OK(send_frames(sdd_ro_rx_port(rx), PHASE1 + 1, PHASE2, 5000, &st2));
    wait_quiet(rx);
    CHECK_OK(sdd_ro_rx_stop(rx));
    consumer_join(&cons);

    struct sdd_ro_counters c;
    sdd_ro_rx_counters(rx, &c);
    uint64_t sent = snd.st.packets + st2.packets;
    printf("%s: sent %llu, received %llu, lost %llu (kernel drops %llu), overrun %llu, "
           "frames complete %llu, lost %llu, overrun %llu, blocked %.1f ms\n",
           policy == SDD_RO_FULL_BLOCK ? "block" : "drop-newest", (unsigned long long)sent,
           (unsigned long long)c.received, (unsigned long long)c.lost,
           (unsigned long long)c.kernel_drops, (unsigned long long)c.overrun,
           (unsigned long long)c.frames_complete, (unsigned long long)c.frames_lost,
           (unsigned long long)c.frames_overrun, c.blocked_ns / 1e6);
    CHECK_EQ(c.corrupt, 0);
    CHECK_EQ(c.duplicate, 0);
    CHECK_EQ(c.pattern_errors, 0);
    CHECK_EQ(c.resyncs, 0);
    CHECK_EQ(cons.s.bad_payload, 0);
    CHECK_EQ(cons.s.bad_flags, 0);
    CHECK_EQ(cons.s.twice, 0);
    /* The frames after the stall all arrive whole. */
    CHECK(cons.s.complete >= PHASE2);
    CHECK_EQ(cons.s.last_id, PHASE1 + PHASE2);
    if (policy == SDD_RO_FULL_BLOCK) {
        CHECK(c.blocked_ns > 0);
        CHECK(c.kernel_drops > 0);
        CHECK_EQ(c.overrun, 0);
        CHECK_EQ(c.received + c.lost, sent);
        CHECK_EQ(c.received, c.datagrams);
        CHECK_EQ(c.lost, c.kernel_drops); /* the socket dropped every missing packet */
    } else {
        CHECK_REQUIRE(c.kernel_drops == 0);
        CHECK(c.overrun > 0);
        CHECK(c.frames_overrun > 0);
        CHECK_EQ(c.lost, 0);
        CHECK_EQ(c.blocked_ns, 0);
        CHECK_EQ(c.received + c.overrun, sent);
        CHECK_EQ(c.frames_complete + c.frames_overrun, PHASE1 + PHASE2);
        CHECK_EQ(c.overrun, c.frames_overrun * PPF);
    }
    CHECK_EQ(c.frames_complete, SLOTS + cons.s.complete);
    sdd_ro_rx_destroy(rx);
}

/* Two slots, block policy: frame 1 is taken, frame 2 waits in the ready ring, frame 3 in the
 * socket. Frame 1 is released, the receiver refills its slot with frame 3 and hands it over;
 * releasing frame 1 again must not free the slot now in the ring. */
static void stale_release(void)
{
    struct sdd_ro_rx_opts ro;
    sdd_ro_rx_opts_default(&ro, SDD_RO_FMT_STREAM);
    ro.geom =
        (struct sdd_ro_geometry){.stream_id = 1, .packets_per_frame = PPF, .payload_size = PAYLOAD};
    ro.slots = 2;
    ro.window = 1;
    ro.full = SDD_RO_FULL_BLOCK;
    ro.verify = true;
    ro.rcvbuf = 8 << 20; /* frame 3 waits in the socket while both slots are taken */
    sdd_ro_rx *rx = NULL;
    CHECK_OK(sdd_ro_rx_create(&ro, &rx));
    CHECK_REQUIRE(rx != NULL);
    CHECK_OK(sdd_ro_rx_start(rx));
    struct sdd_ro_emu_stats st;
    CHECK_OK(send_frames(sdd_ro_rx_port(rx), 1, 3, 1000, &st));
    struct sdd_ro_frame *f1 = NULL, *f = NULL;
    CHECK_OK(sdd_ro_rx_next(rx, &f1, 5000));
    CHECK_REQUIRE(f1 != NULL);
    CHECK_EQ(f1->frame_id, 1);
    CHECK_OK(sdd_ro_rx_release(rx, f1));
    CHECK(wait_datagrams(rx, 3 * PPF)); /* frame 3 read into frame 1's slot */
    sdd_sleep_ns(20 * SDD_NS_PER_MS);   /* and handed over to the ready ring */
    CHECK_EQ(sdd_ro_rx_release(rx, f1), SDD_EINVAL);
    struct seen seen = {0};
    for (uint64_t id = 2; id <= 3; id++) {
        CHECK_OK(sdd_ro_rx_next(rx, &f, 5000));
        CHECK_REQUIRE(f != NULL);
        CHECK_EQ(f->frame_id, id);
        check_frame(f, PAYLOAD, &seen);
        CHECK_OK(sdd_ro_rx_release(rx, f));
    }
    CHECK_EQ(seen.complete, 2);
    CHECK_EQ(seen.bad_payload, 0);
    CHECK_OK(sdd_ro_rx_stop(rx));
    sdd_ro_rx_destroy(rx);
}

int main(void)
{
    stale_release();
    run(SDD_RO_FULL_BLOCK);
    run(SDD_RO_FULL_DROP_NEWEST);
    return check_finish();
}
