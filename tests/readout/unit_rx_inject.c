/* Injected faults yield exactly the expected counters and flags. The emulator loses,
 * corrupts, duplicates and delays packets from a fixed seed and reports exactly what it did;
 * the receiver, under each missing-packet policy, must count the same: lost = lost +
 * corrupted, corrupt = corrupted (by reason), duplicate, reordered; frames complete, partial
 * (padded or not) or dropped as the damage says; delivered payloads intact, padding zero. */
#include "rotest.h"

static const char *const policy_names[] = {"drop", "pad", "partial"};

static void run(sdd_ro_format fmt, sdd_ro_missing policy, uint32_t ppf, uint32_t payload,
                uint64_t frames, double rate, uint64_t seed, bool gro)
{
    struct sdd_ro_rx_opts ro;
    sdd_ro_rx_opts_default(&ro, fmt);
    ro.geom =
        (struct sdd_ro_geometry){.stream_id = 2, .packets_per_frame = ppf, .payload_size = payload};
    ro.missing = policy;
    ro.verify = true;
    ro.gro = gro;
    sdd_ro_rx *rx = NULL;
    CHECK_OK(sdd_ro_rx_create(&ro, &rx));
    CHECK_REQUIRE(rx != NULL);
    CHECK_OK(sdd_ro_rx_start(rx));
    struct consumer cons;
    consumer_start(&cons, rx, payload);

    struct emu_job job = {.port = sdd_ro_rx_port(rx)};
    sdd_ro_emu_opts_default(&job.o, fmt);
    job.o.geom = ro.geom;
    job.o.frames = frames;
    job.o.rate_pps = rate;
    job.o.seed = seed;
    job.o.loss = job.o.corrupt = job.o.duplicate = job.o.reorder = rate > 0 ? 0.02 : 0;
    job.o.reorder_distance = 5;
    job.o.gso = gro ? 16 : 0; /* the same datagrams, sent in runs the receiver gets whole */
    emu_job_start(&job);
    emu_job_join(&job);
    const struct sdd_ro_emu_stats *st = &job.st;
    CHECK(wait_datagrams(rx, st->datagrams));
    CHECK_OK(sdd_ro_rx_stop(rx));
    consumer_join(&cons);

    struct sdd_ro_counters c;
    sdd_ro_rx_counters(rx, &c);
    printf("%s/%s%s seed %llu: injected lost %llu corrupt %llu dup %llu reordered %llu, "
           "damaged frames %llu of %llu (empty %llu)\n",
           fmt == SDD_RO_FMT_JUNGFRAU ? "jungfrau" : "stream", policy_names[policy],
           gro ? "/gro" : "", (unsigned long long)seed, (unsigned long long)st->lost,
           (unsigned long long)st->corrupted, (unsigned long long)st->duplicated,
           (unsigned long long)st->reordered, (unsigned long long)st->damaged_frames,
           (unsigned long long)st->frames, (unsigned long long)st->empty_frames);
    /* The test is only meaningful when faults of every kind were injected. */
    CHECK(st->lost > 0 && st->corrupted > 0 && st->duplicated > 0 && st->reordered > 0);
    CHECK_REQUIRE(c.kernel_drops == 0); /* else the kernel, not the emulator, lost packets */
    CHECK_EQ(c.datagrams, st->datagrams);
    CHECK_EQ(c.corrupt, st->corrupted);
    CHECK_EQ(c.corrupt_by[SDD_RO_MAGIC] + c.corrupt_by[SDD_RO_VERSION] +
                 c.corrupt_by[SDD_RO_CHECKSUM],
             st->corrupted);
    CHECK_EQ(c.received, st->packets - st->lost - st->corrupted);
    CHECK_EQ(c.lost, st->lost + st->corrupted);
    CHECK_EQ(c.duplicate, st->duplicated);
    CHECK_EQ(c.reordered, st->reordered);
    CHECK_EQ(c.late, 0);
    CHECK_EQ(c.overrun, 0);
    CHECK_EQ(c.pattern_errors, 0);
    CHECK_EQ(c.resyncs, 0);
    if (gro) {
        CHECK(c.coalesced > 0); /* else this run did not test the GRO path */
    } else {
        CHECK_EQ(c.coalesced, 0);
    }
    uint64_t incomplete = st->damaged_frames - st->empty_frames;
    CHECK_EQ(c.frames_complete, st->frames - st->damaged_frames);
    CHECK_EQ(c.frames_lost, st->empty_frames);
    CHECK_EQ(c.frames_overrun, 0);
    if (policy == SDD_RO_MISSING_DROP) {
        CHECK_EQ(c.frames_dropped, incomplete);
        CHECK_EQ(c.frames_partial, 0);
        CHECK_EQ(cons.s.frames, c.frames_complete);
        CHECK_EQ(cons.s.packets, c.frames_complete * ppf);
    } else {
        CHECK_EQ(c.frames_partial, incomplete);
        CHECK_EQ(c.frames_dropped, 0);
        CHECK_EQ(cons.s.frames, c.frames_complete + incomplete);
        CHECK_EQ(cons.s.packets, c.received);
    }
    CHECK_EQ(cons.s.complete, c.frames_complete);
    CHECK_EQ(cons.s.padded, policy == SDD_RO_MISSING_PAD ? incomplete : 0);
    CHECK_EQ(cons.s.bad_payload, 0);
    CHECK_EQ(cons.s.bad_flags, 0);
    CHECK_EQ(cons.s.bad_bitmap, 0);
    /* Incomplete frames close when the window passes them, after newer complete ones: the
     * order may differ from frame-id order, but no frame comes twice. */
    CHECK_EQ(cons.s.twice, 0);
    sdd_ro_rx_destroy(rx);
}

/* Same seed, same injections: the emulator is deterministic. */
static void test_deterministic(void)
{
    struct sdd_ro_rx_opts ro;
    sdd_ro_rx_opts_default(&ro, SDD_RO_FMT_STREAM);
    sdd_ro_rx *rx = NULL;
    CHECK_OK(sdd_ro_rx_create(&ro, &rx)); /* a sink; never started */
    struct sdd_ro_emu_stats a, b;
    for (int round = 0; round < 2; round++) {
        struct sdd_ro_emu_opts o;
        sdd_ro_emu_opts_default(&o, SDD_RO_FMT_STREAM);
        o.frames = 50;
        o.seed = 77;
        o.loss = o.corrupt = o.duplicate = o.reorder = 0.05;
        o.pattern = false;
        sdd_ro_emu *e = NULL;
        CHECK_OK(sdd_ro_emu_create(&o, "127.0.0.1", sdd_ro_rx_port(rx), &e));
        CHECK_OK(sdd_ro_emu_run(e));
        sdd_ro_emu_stats(e, round == 0 ? &a : &b);
        sdd_ro_emu_destroy(e);
    }
    CHECK_EQ(a.lost, b.lost);
    CHECK_EQ(a.corrupted, b.corrupted);
    CHECK_EQ(a.duplicated, b.duplicated);
    CHECK_EQ(a.reordered, b.reordered);
    CHECK_EQ(a.datagrams, b.datagrams);
    CHECK_EQ(a.datagrams, a.packets - a.lost + a.duplicated);
    sdd_ro_rx_destroy(rx);
}

int main(void)
{
    test_deterministic();
    for (int p = SDD_RO_MISSING_DROP; p <= SDD_RO_MISSING_PARTIAL; p++) {
        run(SDD_RO_FMT_STREAM, (sdd_ro_missing)p, 16, 512, 600, 30000, 11 + (uint64_t)p, false);
    }
    /* GRO: the emulator sends runs of datagrams with segmentation offload; the receiver must
     * split them and count exactly the same. */
    run(SDD_RO_FMT_STREAM, SDD_RO_MISSING_PAD, 16, 512, 600, 30000, 21, true);
    run(SDD_RO_FMT_STREAM, SDD_RO_MISSING_DROP, 16, 1000, 600, 30000, 22, true);
    /* 8 KiB datagrams: slower, so that even a sanitizer build keeps up without kernel drops. */
    run(SDD_RO_FMT_JUNGFRAU, SDD_RO_MISSING_PAD, SDD_RO_JF_PACKETS, SDD_RO_JF_PAYLOAD, 40, 5000, 5,
        false);
    run(SDD_RO_FMT_JUNGFRAU, SDD_RO_MISSING_PARTIAL, SDD_RO_JF_PACKETS, SDD_RO_JF_PAYLOAD, 40, 5000,
        6, true);
    return check_finish();
}
