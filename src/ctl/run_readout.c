/* Detector readout as a source of a run (docs/run.md): a `udp` source is a readout receiver
 * (sddaq/readout.h) listening on `listen`; an `emu-stream` or `emu-jungfrau` source is that
 * receiver plus a detector emulator sending to it over loopback from a thread of its own.
 * Frame f + 1 of the stream becomes event f of the run (emulators start at frame 1), handed to
 * the source's RU through sdd_evb_ro_feed: a frame the receiver dropped or never saw leaves as
 * an empty fragment, so its event is built flagged as missing this source. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "run_readout.h"
#include "sddaq/clock.h"
#include "sddaq/log.h"

#define LOG "run"

#define FIRST_FRAME 1
#define IDLE_MS     500 /* a stream silent this long: what came so far is decided */

struct run_readout {
    struct sdd_ro_rx_opts ro;
    sdd_ro_rx *rx;
    sdd_evb_ro_feed *feed;
    struct sdd_ro_emu_opts eo;
    struct run_emu em;
    bool closed;          /* the receiver is stopped: every event not yet decided is missing */
    char where[SDD_CFG_HOST_MAX + 8]; /* "host:port" */
};

static sdd_ro_format format_of(const struct sdd_cfg_source *s)
{
    return s->kind == SDD_SRC_EMU_JUNGFRAU ||
                   (s->kind == SDD_SRC_UDP && s->frame.format == SDD_FRAME_JUNGFRAU)
               ? SDD_RO_FMT_JUNGFRAU
               : SDD_RO_FMT_STREAM;
}

bool run_readout_kind(sdd_source_kind k)
{
    return k == SDD_SRC_UDP || k == SDD_SRC_EMU_STREAM || k == SDD_SRC_EMU_JUNGFRAU;
}

uint32_t run_readout_frame_bytes(const struct sdd_cfg_source *s)
{
    if (format_of(s) == SDD_RO_FMT_JUNGFRAU) {
        return 128u * 8192u;
    }
    return s->frame.packets * (uint32_t)s->frame.payload;
}

void run_split_hostport(const char *hp, char *host, size_t len, uint16_t *port)
{
    const char *colon = strrchr(hp, ':');
    size_t n = colon != NULL ? (size_t)(colon - hp) : strlen(hp);
    snprintf(host, len, "%.*s", (int)(n < len ? n : len - 1), hp);
    *port = colon != NULL ? (uint16_t)strtoul(colon + 1, NULL, 10) : 0;
}

sdd_err run_readout_create(const struct sdd_cfg_stage *stage, uint32_t stream, uint64_t frames,
                           uint32_t bulk, struct run_readout **out)
{
    const struct sdd_cfg_source *s = &stage->source;
    struct run_readout *rd = calloc(1, sizeof(*rd));
    if (rd == NULL) {
        return SDD_ENOMEM;
    }
    sdd_ro_format fmt = format_of(s);
    sdd_ro_rx_opts_default(&rd->ro, fmt);
    if (fmt == SDD_RO_FMT_STREAM) {
        rd->ro.geom.packets_per_frame = s->frame.packets;
        rd->ro.geom.payload_size = (uint32_t)s->frame.payload;
    }
    rd->ro.geom.stream_id = stream;
    rd->ro.missing = s->frame.missing == SDD_FRAME_PAD       ? SDD_RO_MISSING_PAD
                     : s->frame.missing == SDD_FRAME_PARTIAL ? SDD_RO_MISSING_PARTIAL
                                                             : SDD_RO_MISSING_DROP;
    /* The RU holds a bulk's frames until the bulk is built, while the receiver assembles its
     * window: room for both, twice over. */
    rd->ro.slots = 2 * bulk + rd->ro.window + 8;
    char host[SDD_CFG_HOST_MAX] = "127.0.0.1";
    uint16_t port = 0;
    if (s->kind == SDD_SRC_UDP) {
        run_split_hostport(s->listen, host, sizeof(host), &port);
    }
    rd->ro.host = host;
    rd->ro.port = port;
    sdd_err err = sdd_ro_rx_create(&rd->ro, &rd->rx);
    rd->ro.host = NULL; /* host lives on this stack only */
    if (err == SDD_OK) {
        snprintf(rd->where, sizeof(rd->where), "%s:%u", host, sdd_ro_rx_port(rd->rx));
        err = sdd_ro_rx_start(rd->rx);
    }
    if (err == SDD_OK) {
        err = sdd_evb_ro_feed_create(rd->rx, FIRST_FRAME, rd->ro.window, rd->ro.slots, IDLE_MS,
                                     &rd->feed);
    }
    if (err == SDD_OK && s->kind != SDD_SRC_UDP) {
        sdd_ro_emu_opts_default(&rd->eo, fmt);
        rd->eo.geom = rd->ro.geom;
        rd->eo.first_frame = FIRST_FRAME;
        rd->eo.frames = frames; /* 0: until stopped */
        rd->eo.rate_pps = s->rate * rd->ro.geom.packets_per_frame;
        rd->eo.loss = s->frame.loss;
        rd->eo.seed = s->seed + stream;
        err = sdd_ro_emu_create(&rd->eo, "127.0.0.1", sdd_ro_rx_port(rd->rx), &rd->em.emu);
        rd->em.rx = rd->rx;
        rd->em.name = stage->name;
    }
    if (err != SDD_OK) {
        SDD_ERROR(LOG, "%s: cannot set up the readout (%s): %s", stage->name,
                  rd->where[0] ? rd->where : host, sdd_strerror(err));
        run_readout_destroy(rd);
        return err;
    }
    *out = rd;
    return SDD_OK;
}

struct sdd_evb_feed run_readout_bind(struct run_readout *rd)
{
    return sdd_evb_ro_feed_bind(rd->feed);
}

/* Wait until the receiver has read every datagram sent (or the kernel counted it dropped), or
 * read none for RUN_READOUT_GRACE_MS. A receiver behind its consumers (waiting for a free
 * slot) still has datagrams in its socket: stopped then, it would lose them uncounted. */
static void drain(struct run_emu *e)
{
    struct sdd_ro_emu_stats sent;
    sdd_ro_emu_stats(e->emu, &sent);
    uint64_t seen = UINT64_MAX, quiet_since = sdd_now_ns();
    while (!atomic_load(&e->stopped)) {
        struct sdd_ro_counters c;
        sdd_ro_rx_counters(e->rx, &c);
        uint64_t now = sdd_now_ns();
        if (c.datagrams + c.kernel_drops >= sent.datagrams) {
            break;
        }
        if (c.datagrams != seen) {
            seen = c.datagrams;
            quiet_since = now;
        } else if (now - quiet_since >= RUN_READOUT_GRACE_MS * SDD_NS_PER_MS) {
            break;
        }
        sdd_sleep_ns(10 * SDD_NS_PER_MS);
    }
}

static void *emu_main(void *arg)
{
    struct run_emu *e = arg;
    sdd_err err = sdd_ro_emu_run(e->emu);
    if (err != SDD_OK) {
        SDD_ERROR(LOG, "%s: emulator stopped: %s", e->name, sdd_strerror(err));
    }
    if (!atomic_load(&e->stopped)) {
        /* The stream is over: once its last packets are in, what never came is missing, and
         * the run can end. */
        drain(e);
        sdd_ro_rx_stop(e->rx);
    }
    return NULL;
}

sdd_err run_emu_start(struct run_emu *e)
{
    if (e->emu == NULL || e->running) {
        return SDD_OK;
    }
    if (pthread_create(&e->th, NULL, emu_main, e) != 0) {
        return SDD_ENOMEM;
    }
    e->running = true;
    return SDD_OK;
}

void run_emu_stop(struct run_emu *e)
{
    if (e->running) {
        atomic_store(&e->stopped, true);
        sdd_ro_emu_stop(e->emu);
        pthread_join(e->th, NULL);
        e->running = false;
    }
}

sdd_err run_readout_start(struct run_readout *rd)
{
    return run_emu_start(&rd->em);
}

void run_readout_stop(struct run_readout *rd)
{
    if (rd != NULL) {
        run_emu_stop(&rd->em);
    }
}

void run_readout_close(struct run_readout *rd)
{
    if (rd != NULL && !rd->closed) {
        rd->closed = true;
        sdd_ro_rx_stop(rd->rx);
    }
}

void run_readout_counts(const struct run_readout *rd, struct run_readout_counts *c)
{
    struct sdd_evb_ro_feed_stats fs;
    sdd_evb_ro_feed_stats(rd->feed, &fs);
    struct sdd_ro_counters rc;
    sdd_ro_rx_counters(rd->rx, &rc);
    c->frames = fs.frames;
    c->missing = fs.missing;
    c->packets_lost = rc.lost;
    c->corrupt = rc.corrupt;
    c->bytes = rc.bytes;
}

const char *run_readout_where(const struct run_readout *rd)
{
    return rd->where;
}

const sdd_ro_rx *run_readout_rx(const struct run_readout *rd)
{
    return rd->rx;
}

void run_readout_destroy(struct run_readout *rd)
{
    if (rd == NULL) {
        return;
    }
    run_readout_stop(rd);
    sdd_ro_emu_destroy(rd->em.emu);
    sdd_evb_ro_feed_destroy(rd->feed); /* releases held frames: before the receiver goes */
    if (rd->rx != NULL) {
        sdd_ro_rx_stop(rd->rx);
        sdd_ro_rx_destroy(rd->rx);
    }
    free(rd);
}
