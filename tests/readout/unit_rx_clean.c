/* Exact content delivery over real loopback UDP: an emulator sends frames at a moderate rate,
 * the receiver assembles them, and a consumer checks every byte of every frame against the
 * test pattern. With no loss every frame must arrive complete, in order, and the counters must
 * say exactly that. Both formats: the generic stream and Jungfrau-like 1 MiB frames. */
#include "rotest.h"

static void run(sdd_ro_format fmt, uint32_t ppf, uint32_t payload, uint64_t frames, double pps,
                uint32_t batch, bool busy_poll)
{
    struct sdd_ro_rx_opts ro;
    sdd_ro_rx_opts_default(&ro, fmt);
    ro.geom =
        (struct sdd_ro_geometry){.stream_id = 5, .packets_per_frame = ppf, .payload_size = payload};
    ro.verify = true;
    ro.batch = batch;
    ro.busy_poll = busy_poll;
    sdd_ro_rx *rx = NULL;
    CHECK_OK(sdd_ro_rx_create(&ro, &rx));
    CHECK_REQUIRE(rx != NULL);
    void *base;
    size_t region;
    sdd_ro_rx_region(rx, &base, &region);
    CHECK(base != NULL && region >= (size_t)ro.slots * ppf * payload);
    CHECK_OK(sdd_ro_rx_start(rx));
    CHECK_EQ(sdd_ro_rx_start(rx), SDD_EBUSY);
    struct consumer cons;
    consumer_start(&cons, rx, payload);

    struct emu_job job = {.port = sdd_ro_rx_port(rx)};
    sdd_ro_emu_opts_default(&job.o, fmt);
    job.o.geom = ro.geom;
    job.o.frames = frames;
    job.o.first_frame = 1000;
    job.o.rate_pps = pps;
    emu_job_start(&job);
    emu_job_join(&job);
    CHECK_EQ(job.st.packets, frames * ppf);
    CHECK_EQ(job.st.datagrams, frames * ppf);
    CHECK(wait_datagrams(rx, job.st.datagrams));
    CHECK_OK(sdd_ro_rx_stop(rx));
    consumer_join(&cons);

    struct sdd_ro_counters c;
    sdd_ro_rx_counters(rx, &c);
    CHECK_EQ(c.kernel_drops, 0);
    CHECK_EQ(c.datagrams, frames * ppf);
    CHECK_EQ(c.received, frames * ppf);
    CHECK_EQ(c.lost, 0);
    CHECK_EQ(c.corrupt, 0);
    CHECK_EQ(c.duplicate, 0);
    CHECK_EQ(c.reordered, 0);
    CHECK_EQ(c.late, 0);
    CHECK_EQ(c.overrun, 0);
    CHECK_EQ(c.pattern_errors, 0);
    CHECK_EQ(c.frames_complete, frames);
    CHECK_EQ(c.frames_partial + c.frames_dropped + c.frames_lost + c.frames_overrun, 0);
    /* In-order traffic lands in place. Copied are the first batch (read before any packet
     * told the receiver where the stream is) and first packets of frames for which no slot
     * was free when the batch was set up (the consumer is a thread: timing decides). */
    CHECK(c.zero_copy >= c.received * 9 / 10);
    printf("%s: %llu frames, %llu of %llu packets landed in place\n",
           fmt == SDD_RO_FMT_JUNGFRAU ? "jungfrau" : "stream", (unsigned long long)frames,
           (unsigned long long)c.zero_copy, (unsigned long long)c.received);

    CHECK_EQ(cons.s.frames, frames);
    CHECK_EQ(cons.s.complete, frames);
    CHECK_EQ(cons.s.packets, frames * ppf);
    CHECK_EQ(cons.s.bad_payload, 0);
    CHECK_EQ(cons.s.bad_flags, 0);
    CHECK_EQ(cons.s.bad_bitmap, 0);
    CHECK_EQ(cons.s.out_of_order, 0);
    CHECK_EQ(cons.s.twice, 0);
    CHECK_EQ(cons.s.first_id, 1000);
    CHECK_EQ(cons.s.last_id, 1000 + frames - 1);

    sdd_hist lat;
    sdd_ro_rx_latency(rx, &lat);
    CHECK_EQ(sdd_hist_count(&lat), frames);
    struct sdd_ro_frame *f;
    CHECK_EQ(sdd_ro_rx_next(rx, &f, 0), SDD_ECLOSED);
    sdd_ro_rx_destroy(rx);
}

/* A frame that never completes is closed by the idle timeout, while the receiver runs, and
 * delivered partial with its bitmap. */
static void test_timeout(void)
{
    struct sdd_ro_rx_opts ro;
    sdd_ro_rx_opts_default(&ro, SDD_RO_FMT_STREAM);
    ro.geom = (struct sdd_ro_geometry){.stream_id = 4, .packets_per_frame = 16, .payload_size = 64};
    ro.missing = SDD_RO_MISSING_PARTIAL;
    ro.frame_timeout_ms = 50;
    sdd_ro_rx *rx = NULL;
    CHECK_OK(sdd_ro_rx_create(&ro, &rx));
    CHECK_REQUIRE(rx != NULL);
    CHECK_OK(sdd_ro_rx_start(rx));
    struct emu_job job = {.port = sdd_ro_rx_port(rx)};
    sdd_ro_emu_opts_default(&job.o, SDD_RO_FMT_STREAM);
    job.o.geom = ro.geom;
    job.o.frames = 1;
    job.o.loss = 0.3; /* seed 1: some of the 16 packets, not all */
    emu_job_start(&job);
    emu_job_join(&job);
    CHECK(job.st.lost > 0 && job.st.lost < 16);
    struct sdd_ro_frame *f = NULL;
    CHECK_OK(sdd_ro_rx_next(rx, &f, 10000)); /* before any stop: the timeout closed it */
    if (f != NULL) {
        struct seen s = {0};
        check_frame(f, 64, &s);
        CHECK_EQ(s.bad_payload + s.bad_bitmap + s.bad_flags, 0);
        CHECK_EQ(f->received, 16 - job.st.lost);
        CHECK(f->flags == SDD_RO_FRAME_PARTIAL);
        CHECK_OK(sdd_ro_rx_release(rx, f));
    }
    CHECK_OK(sdd_ro_rx_stop(rx)); /* counters are published after the hand-over */
    struct sdd_ro_counters c;
    sdd_ro_rx_counters(rx, &c);
    CHECK_EQ(c.frames_partial, 1);
    CHECK_EQ(c.lost, job.st.lost);
    sdd_ro_rx_destroy(rx);
}

static void test_bad_options(void)
{
    struct sdd_ro_rx_opts ro;
    sdd_ro_rx *rx = NULL;
    sdd_ro_rx_opts_default(&ro, SDD_RO_FMT_STREAM);
    ro.slots = ro.window; /* needs at least one more slot than open frames */
    CHECK_EQ(sdd_ro_rx_create(&ro, &rx), SDD_EINVAL);
    sdd_ro_rx_opts_default(&ro, SDD_RO_FMT_JUNGFRAU);
    ro.geom.payload_size = 4096;
    CHECK_EQ(sdd_ro_rx_create(&ro, &rx), SDD_EINVAL);
    sdd_ro_rx_opts_default(&ro, SDD_RO_FMT_STREAM);
    ro.geom.packets_per_frame = SDD_RO_MAX_PACKETS;
    ro.geom.payload_size = SDD_RO_MAX_PAYLOAD;
    CHECK_EQ(sdd_ro_rx_create(&ro, &rx), SDD_ETOOBIG);
    CHECK(rx == NULL);

    struct sdd_ro_emu_opts eo;
    sdd_ro_emu *e = NULL;
    sdd_ro_emu_opts_default(&eo, SDD_RO_FMT_STREAM);
    eo.loss = 0.6;
    eo.corrupt = 0.6;
    CHECK_EQ(sdd_ro_emu_create(&eo, "127.0.0.1", 9, &e), SDD_EINVAL);
    sdd_ro_emu_opts_default(&eo, SDD_RO_FMT_STREAM);
    eo.batch = 0;
    CHECK_EQ(sdd_ro_emu_create(&eo, "127.0.0.1", 9, &e), SDD_EINVAL);
    sdd_ro_emu_opts_default(&eo, SDD_RO_FMT_STREAM);
    CHECK_EQ(sdd_ro_emu_create(&eo, "127.0.0.1", 0, &e), SDD_EINVAL); /* no DNS in tests */
    CHECK(e == NULL);
    sdd_ro_rx_destroy(NULL);
    sdd_ro_emu_destroy(NULL);
}

int main(void)
{
    test_bad_options();
    run(SDD_RO_FMT_STREAM, 16, 1024, 400, 40000, 32, false);
    run(SDD_RO_FMT_STREAM, 16, 1024, 400, 40000, 32, true);
    run(SDD_RO_FMT_STREAM, 3, 1000, 300, 20000, 1, false); /* odd sizes, one per call */
    run(SDD_RO_FMT_JUNGFRAU, SDD_RO_JF_PACKETS, SDD_RO_JF_PAYLOAD, 24, 5000, 32, false);
    test_timeout();
    return check_finish();
}
