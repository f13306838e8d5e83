/* Readout straight into a trigger (docs/run.md, "Readout into a trigger"): a source whose
 * datagrams are NA62 TEL62 multi-event packets — a `udp` source with frame format `na62`, or
 * an `emu-na62` emulator sending over loopback — has no event builder behind it. Its receiver
 * packs the packets back to back into receive buffers, as NaNet's do; each filled buffer is
 * copied into a pooled item and handed to the stages linked to the source (the RICH trigger,
 * a prescaler, a writer). The event finder of the trigger stage then finds the events. */
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "readout/na62_cycle.h"
#include "run_internal.h"
#include "sddaq/clock.h"
#include "sddaq/log.h"
#include "sddaq/readout.h"
#include "sddaq/trigger.h"

#define LOG "run"

#define DIRECT_SLOTS     64    /* receive buffers in the receiver's ring */
#define DIRECT_PACKETS   64    /* packets per receive buffer (NaNet: buffers of 64 kB) */
#define DIRECT_CYCLE_MAX 32768 /* events an emulator generates once and sends over again */

struct run_direct {
    struct run_stage *s;
    sdd_ro_rx *rx;
    struct run_emu em;    /* emu-na62 */
    uint8_t *cycle;       /* emu-na62: the packets it sends over and over */
    uint64_t sent_events; /* emu-na62 with an event count: what it sends in all */
    pthread_t th;
    bool th_started;
    char where[SDD_CFG_HOST_MAX + 8];
    struct run_ro_metrics *xm;   /* the receiver's own counters */
    struct sdd_ro_counters told; /* source thread: what went into the stage's counters */
    uint64_t told_dropped;       /* and the most lost + overrun told */
};

bool run_direct_source(const struct sdd_cfg_stage *s)
{
    return s->type == SDD_STAGE_SOURCE &&
           (s->source.kind == SDD_SRC_EMU_NA62 ||
            (s->source.kind == SDD_SRC_UDP && s->source.frame.format == SDD_FRAME_NA62));
}

size_t run_direct_buffer_bytes(void)
{
    return (size_t)DIRECT_PACKETS * SDD_RO_NA62_MAX;
}

/* Datagrams the emulator sends per cycle of back-to-back NA62 packets: the packets and each
 * board's end of burst (0: not a valid cycle). */
static uint64_t count_datagrams(const uint8_t *p, size_t len)
{
    struct ro_na62_cycle c;
    if (ro_na62_cycle_init(&c, p, len) != SDD_OK) {
        return 0;
    }
    uint64_t n = c.ndgrams;
    ro_na62_cycle_fini(&c);
    return n;
}

/* The emulator: C generated RICH events packed as the boards would, sent over and over
 * (whole cycles: a run of N events sends ceil(N / C) cycles of C = min(N, 32768)). */
static sdd_err make_emulator(struct run_direct *d, uint64_t events)
{
    const struct sdd_cfg_source *src = &d->s->cfg->source;
    uint32_t c = events > 0 && events < DIRECT_CYCLE_MAX ? (uint32_t)events : DIRECT_CYCLE_MAX;
    size_t len = 0;
    sdd_err err = sdd_ro_na62_cycle(src->seed, c, &d->cycle, &len);
    if (err != SDD_OK) {
        return err;
    }
    uint64_t per_cycle = count_datagrams(d->cycle, len);
    if (per_cycle == 0) {
        return SDD_EINVAL;
    }
    uint64_t cycles = events > 0 ? (events + c - 1) / c : 0;
    d->sent_events = cycles * c;
    struct sdd_ro_emu_opts eo;
    sdd_ro_emu_opts_default(&eo, SDD_RO_FMT_NA62);
    eo.na62_packets = d->cycle;
    eo.na62_bytes = len;
    eo.frames = cycles * per_cycle;                  /* datagrams; 0: until stopped */
    eo.rate_pps = src->rate * (double)per_cycle / c; /* rate: events per second */
    eo.seed = src->seed;
    d->em.rx = d->rx;
    d->em.name = d->s->cfg->name;
    return sdd_ro_emu_create(&eo, "127.0.0.1", sdd_ro_rx_port(d->rx), &d->em.emu);
}

static sdd_err direct_create(struct sdd_run *r, struct run_stage *s, struct run_direct **out)
{
    const struct sdd_cfg_source *src = &s->cfg->source;
    struct run_direct *d = calloc(1, sizeof(*d));
    if (d == NULL) {
        return SDD_ENOMEM;
    }
    d->s = s;
    struct sdd_ro_rx_opts ro;
    sdd_ro_rx_opts_default(&ro, SDD_RO_FMT_NA62);
    ro.geom.packets_per_frame = DIRECT_PACKETS;
    ro.geom.payload_size = SDD_RO_NA62_MAX;
    ro.slots = DIRECT_SLOTS;
    char host[SDD_CFG_HOST_MAX] = "127.0.0.1";
    uint16_t port = 0;
    if (src->kind == SDD_SRC_UDP) {
        run_split_hostport(src->listen, host, sizeof(host), &port);
    }
    ro.host = host;
    ro.port = port;
    sdd_err err = sdd_ro_rx_create(&ro, &d->rx);
    if (err == SDD_OK) {
        snprintf(d->where, sizeof(d->where), "%s:%u", host, sdd_ro_rx_port(d->rx));
        err = sdd_ro_rx_start(d->rx);
    }
    if (err == SDD_OK && src->kind == SDD_SRC_EMU_NA62) {
        uint64_t events = r->o.events > 0 ? r->o.events : r->cfg->run.events;
        err = make_emulator(d, events);
    }
    if (err == SDD_OK) {
        err = run_ro_metrics_register(r->metrics, s, d->rx, &d->xm);
    }
    if (err != SDD_OK) {
        SDD_ERROR(LOG, "%s: cannot set up the readout (%s): %s", s->cfg->name,
                  d->where[0] ? d->where : host, sdd_strerror(err));
        run_direct_free(d);
        return err;
    }
    snprintf(s->detail, sizeof(s->detail), "%s %s, NA62 packets into %u-packet buffers",
             sdd_source_kind_name(src->kind), d->where, DIRECT_PACKETS);
    *out = d;
    return SDD_OK;
}

sdd_err run_direct_setup(struct sdd_run *r)
{
    for (size_t i = 0; i < r->n; i++) {
        struct run_stage *s = &r->st[i];
        if (!run_direct_source(s->cfg)) {
            continue;
        }
        if (r->multi) {
            SDD_ERROR(LOG, "%s: readout straight into a trigger runs on one node for now",
                      s->cfg->name);
            return SDD_ENOTSUP;
        }
        sdd_err err = direct_create(r, s, &s->direct);
        if (err != SDD_OK) {
            return err;
        }
        r->ndirect++;
    }
    size_t need = run_direct_buffer_bytes();
    r->item_bytes = r->ndirect > 0 && r->item_bytes < need ? need : r->item_bytes;
    return SDD_OK;
}

/* emu-na62: packets sent that the receiver neither read nor found missing by the boards'
 * sequence numbers, which see a gap only once a later packet (or end of burst) comes: those
 * lost after each board's last packet read (the run stopped, or the socket overflowed at the
 * end). */
static uint64_t never_seen(const struct run_direct *d, const struct sdd_ro_counters *rc)
{
    if (d->em.emu == NULL) {
        /* A udp source: the boards' ends of burst told it what they sent, except in a burst
         * still open at the stop. */
        if (rc->open_bursts > 0) {
            SDD_INFO(LOG,
                     "%s: %" PRIu64 " boards were mid-burst at the stop: packets they lost "
                     "after their last one received are not counted",
                     d->s->cfg->name, rc->open_bursts);
        }
        return 0;
    }
    struct sdd_ro_emu_stats sent;
    sdd_ro_emu_stats(d->em.emu, &sent);
    uint64_t seen = rc->datagrams + rc->lost;
    if (sent.datagrams <= seen) {
        return 0;
    }
    SDD_WARN(LOG, "%s: %" PRIu64 " of the %" PRIu64 " packets sent never came (counted as dropped)",
             d->s->cfg->name, sent.datagrams - seen, sent.datagrams);
    return sent.datagrams - seen;
}

/* Move what the receiver counted since the last call into the stage's counters, so /metrics
 * shows loss while the run goes on; at the end, also the packets that never came. */
static void tell_counters(struct run_direct *d, bool end)
{
    struct sdd_ro_counters rc;
    sdd_ro_rx_counters(d->rx, &rc);
    struct run_stage *s = d->s;
    sdd_metric_add(s->m.bytes_in, rc.bytes - d->told.bytes);
    sdd_metric_add(s->m.errors, rc.corrupt - d->told.corrupt);
    /* lost goes down by one when a packet counted lost comes after all: what was told stays
     * told (a counter), so only a rise is added. */
    uint64_t dropped = rc.lost + rc.overrun;
    sdd_metric_add(s->m.dropped, (dropped > d->told_dropped ? dropped - d->told_dropped : 0) +
                                     (end ? never_seen(d, &rc) : 0));
    d->told_dropped = dropped > d->told_dropped ? dropped : d->told_dropped;
    d->told = rc;
}

/* The source's thread: every filled receive buffer becomes an item for the linked stages. */
static void *direct_main(void *arg)
{
    struct run_direct *d = arg;
    struct run_stage *s = d->s;
    struct sdd_run *r = s->run;
    if (run_counts_attach(r) != SDD_OK) {
        run_fail(r, s, SDD_ENOMEM, "no memory for the source's counters");
    }
    uint64_t seq = 0;
    for (;;) {
        struct sdd_ro_frame *f = NULL;
        sdd_err err = sdd_ro_rx_next(d->rx, &f, 20);
        if (err == SDD_EAGAIN) {
            if (atomic_load(&r->phase) == RUN_PHASE_ABORT) {
                break;
            }
            run_counts_flush(); /* idle: a good moment to publish */
            tell_counters(d, false);
            continue;
        }
        if (err != SDD_OK) {
            break; /* the receiver stopped and everything it had was taken */
        }
        struct run_item *it = run_item_new(r);
        if (it != NULL) {
            memcpy(it->data, f->data, f->bytes);
            it->bytes = (uint32_t)f->bytes;
            it->id = seq++;
            it->built_ns = f->t_first_ns; /* ages count from the buffer's first packet */
        }
        sdd_ro_rx_release(d->rx, f);
        if (it == NULL) {
            break;
        }
        struct run_counts *c = run_counts(s);
        c->events_out++;
        c->bytes_out += it->bytes;
        run_emit(s, it, true);
        run_item_release(r, it);
        if ((seq & 63) == 0) {
            run_counts_flush();
            tell_counters(d, false);
        }
    }
    run_counts_detach();
    tell_counters(d, true);
    atomic_store(&s->live, 0);
    run_stage_finished(s);
    run_wake(r);
    return NULL;
}

sdd_err run_direct_start(struct sdd_run *r)
{
    for (size_t i = 0; i < r->n; i++) {
        struct run_direct *d = r->st[i].direct;
        if (d == NULL) {
            continue;
        }
        atomic_store(&d->s->live, 1);
        if (pthread_create(&d->th, NULL, direct_main, d) != 0) {
            atomic_store(&d->s->live, 0);
            return SDD_ENOMEM;
        }
        d->th_started = true;
        /* An emulator that ran out of events stops the receiver, and the source ends. */
        if (run_emu_start(&d->em) != SDD_OK) {
            return SDD_ENOMEM;
        }
    }
    return SDD_OK;
}

void run_direct_stop(struct sdd_run *r)
{
    for (size_t i = 0; i < r->n; i++) {
        struct run_direct *d = r->st[i].direct;
        if (d != NULL) {
            run_emu_stop(&d->em);
            sdd_ro_rx_stop(d->rx); /* what came is handed over; then the source ends */
        }
    }
}

void run_direct_join(struct sdd_run *r)
{
    for (size_t i = 0; i < r->n; i++) {
        struct run_direct *d = r->st[i].direct;
        if (d != NULL && d->th_started) {
            pthread_join(d->th, NULL);
            d->th_started = false;
        }
    }
}

uint64_t run_direct_sent(const struct sdd_run *r)
{
    uint64_t n = 0;
    for (size_t i = 0; i < r->n; i++) {
        n += r->st[i].direct != NULL ? r->st[i].direct->sent_events : 0;
    }
    return n;
}

void run_direct_free(struct run_direct *d)
{
    if (d == NULL) {
        return;
    }
    run_emu_stop(&d->em);
    if (d->rx != NULL) {
        sdd_ro_rx_stop(d->rx);
    }
    if (d->th_started) {
        pthread_join(d->th, NULL);
    }
    sdd_ro_emu_destroy(d->em.emu);
    run_ro_metrics_remove(d->xm); /* they read the receiver */
    sdd_ro_rx_destroy(d->rx);
    free(d->cycle);
    free(d);
}

void run_direct_destroy(struct sdd_run *r)
{
    for (size_t i = 0; r->st != NULL && i < r->n; i++) {
        run_direct_free(r->st[i].direct);
        r->st[i].direct = NULL;
    }
}
