/* A readout receiver feeds the event builder (issue 7's readout source): the emulator sends
 * frames with injected loss, the receiver drops the damaged ones, and the RU of a one-node
 * event builder (RU and BU in one process, over tcp) turns frames into fragments. Every event
 * must be built exactly once; those whose frame arrived carry that frame's bytes (the
 * emulator's pattern, packet by packet), and exactly the frames the emulator damaged leave
 * as events flagged missing their source. */
#include <stdlib.h>

#include "../readout/rotest.h"
#include "sddaq/evb.h"

#define EVENTS  3000
#define PPF     4
#define PAYLOAD 512
#define STREAM  3
#define FIRST   1 /* the emulator's first frame id */

struct evb_seen {
    uint64_t events, complete, missing, bad_content, twice, other;
    uint8_t built[EVENTS];
};

static void on_event(const struct sdd_evb_event *ev, void *arg)
{
    struct evb_seen *s = arg;
    s->events++;
    if (ev->event_id >= EVENTS || s->built[ev->event_id]++ != 0) {
        s->twice++;
        return;
    }
    if (ev->npresent == 1 && ev->flags == 0) {
        s->complete++;
        const struct sdd_evb_frag_hdr *h = ev->frags[0];
        const uint8_t *p = (const uint8_t *)(h + 1);
        bool ok = h->length == PPF * PAYLOAD;
        for (uint32_t k = 0; ok && k < PPF; k++) {
            ok = sdd_ro_pattern_check(STREAM, FIRST + ev->event_id, k, p + k * PAYLOAD, PAYLOAD);
        }
        s->bad_content += !ok;
    } else if (ev->npresent == 0 && ev->flags == SDD_EVB_EV_MISSING &&
               ev->src_flags[0] == SDD_EVB_EV_MISSING) {
        s->missing++;
    } else {
        s->other++;
    }
}

int main(void)
{
    struct sdd_ro_rx_opts ro;
    sdd_ro_rx_opts_default(&ro, SDD_RO_FMT_STREAM);
    ro.geom = (struct sdd_ro_geometry){
        .stream_id = STREAM, .packets_per_frame = PPF, .payload_size = PAYLOAD};
    ro.slots = 64;
    ro.missing = SDD_RO_MISSING_DROP;
    ro.frame_timeout_ms = 50;
    sdd_ro_rx *rx = NULL;
    CHECK_OK(sdd_ro_rx_create(&ro, &rx));
    CHECK_REQUIRE(rx != NULL);
    CHECK_OK(sdd_ro_rx_start(rx));
    sdd_evb_ro_feed *feed = NULL;
    CHECK_OK(sdd_evb_ro_feed_create(rx, FIRST, ro.window, ro.slots, 300, &feed));
    CHECK_REQUIRE(feed != NULL);

    static struct evb_seen seen;
    struct sdd_evb_opts eo;
    sdd_evb_opts_default(&eo);
    eo.provider = "tcp";
    eo.host = "127.0.0.1";
    eo.nnodes = 1;
    eo.events = EVENTS;
    eo.bulk = 16;
    eo.src = (struct sdd_evb_source_opts){.dist = SDD_EVB_SIZE_FIXED, .mean = PPF * PAYLOAD};
    eo.verify = SDD_EVB_VERIFY_HEADER;
    eo.crc = true;
    eo.feed = sdd_evb_ro_feed_bind(feed);
    eo.on_event = on_event;
    eo.on_event_arg = &seen;
    sdd_evb_node *node = NULL;
    sdd_err err = sdd_evb_node_create(&eo, &node);
    if (err == SDD_ENOPROV) {
        return check_skip("no tcp provider");
    }
    CHECK_REQUIRE(err == SDD_OK);
    const char *hosts[] = {"127.0.0.1"};
    uint16_t ports[] = {sdd_evb_node_port(node)};
    CHECK_OK(sdd_evb_node_connect(node, hosts, ports, 10000));

    struct emu_job job = {.port = sdd_ro_rx_port(rx)};
    sdd_ro_emu_opts_default(&job.o, SDD_RO_FMT_STREAM);
    job.o.geom = ro.geom;
    job.o.frames = EVENTS;
    job.o.first_frame = FIRST;
    job.o.rate_pps = 20000; /* the socket buffer holds it all: the kernel drops nothing */
    job.o.loss = 0.004;
    job.o.seed = 17;
    emu_job_start(&job);
    err = sdd_evb_node_run(node);
    emu_job_join(&job);
    CHECK_OK(err);

    struct sdd_evb_ro_feed_stats fs;
    sdd_evb_ro_feed_stats(feed, &fs);
    struct sdd_ro_counters c;
    sdd_ro_rx_counters(rx, &c);
    printf("%llu events: %llu complete, %llu missing (emulator damaged %llu frames); feed: "
           "%llu frames, %llu missing, %llu late, %llu overflow\n",
           (unsigned long long)seen.events, (unsigned long long)seen.complete,
           (unsigned long long)seen.missing, (unsigned long long)job.st.damaged_frames,
           (unsigned long long)fs.frames, (unsigned long long)fs.missing,
           (unsigned long long)fs.late, (unsigned long long)fs.overflow);
    CHECK(job.st.damaged_frames > 0); /* else the missing path went untested */
    CHECK_EQ(c.kernel_drops, 0);
    CHECK_EQ(seen.events, EVENTS);
    CHECK_EQ(seen.twice, 0);
    CHECK_EQ(seen.other, 0);
    CHECK_EQ(seen.bad_content, 0);
    CHECK_EQ(seen.missing, job.st.damaged_frames);
    CHECK_EQ(seen.complete, EVENTS - job.st.damaged_frames);
    CHECK_EQ(fs.frames, seen.complete);
    CHECK_EQ(fs.missing, seen.missing);
    CHECK_EQ(fs.late + fs.overflow, 0);
    CHECK_EQ(c.frames_dropped, job.st.damaged_frames - job.st.empty_frames);

    sdd_evb_node_destroy(node);
    sdd_evb_ro_feed_destroy(feed);
    sdd_ro_rx_destroy(rx);
    return check_finish();
}
