/* The RICH trigger as a stage of a run (process algorithm `rich`): each item it takes is a
 * receive buffer of NA62 packets from a source read straight into it (run_direct.c); the
 * event finder, the merge of the boards and the ring finder run on it (sdd_rich_proc), and
 * every merged event with at least one ring leaves as a record of its own (docs/formats.md,
 * "RICH trigger record") for the writers behind. Events without a ring are rejected. Counts
 * are in events: in = merged events found, out = kept. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "core/le.h"
#include "run_internal.h"
#include "sddaq/clock.h"
#include "sddaq/log.h"
#include "sddaq/trigger.h"

#define LOG "run"

#define RICH_RECORD_MAGIC 0x52484352u /* "RCHR" */
#define RICH_RECORD_HDR   12
#define RICH_RECORD_RING  28

/* Largest record: header, SDD_RICH_MAX_HITS channels, max_rings rings. */
static size_t record_max(uint32_t max_rings)
{
    return RICH_RECORD_HDR + 2 * (size_t)SDD_RICH_MAX_HITS + RICH_RECORD_RING * (size_t)max_rings;
}

size_t run_rich_record_bytes(void)
{
    sdd_rich_proc_opts po;
    sdd_rich_proc_opts_default(&po); /* run_rich_thread keeps its max_rings */
    return record_max(po.max_rings);
}

/* Event i of a processed buffer as a record; returns its bytes. */
static uint32_t rich_record(const sdd_rich_output *o, uint32_t i, uint8_t *buf)
{
    const sdd_rich_batch *b = o->events;
    uint32_t nr = o->nrings[i] < o->max_rings ? o->nrings[i] : o->max_rings;
    uint32_t nh = b->nhits[i];
    put_le32(buf, RICH_RECORD_MAGIC);
    put_le32(buf + 4, b->timestamp[i]);
    buf[8] = (uint8_t)nh;
    buf[9] = (uint8_t)nr;
    buf[10] = b->boards[i];
    buf[11] = 0;
    uint8_t *p = buf + RICH_RECORD_HDR;
    for (uint32_t h = 0; h < nh; h++, p += 2) {
        put_le16(p, b->hits[b->first[i] + h]);
    }
    const sdd_rich_ring *rg = &o->rings[(size_t)i * o->max_rings];
    for (uint32_t k = 0; k < nr; k++, p += RICH_RECORD_RING) {
        float f[4] = {rg[k].cx, rg[k].cy, rg[k].r, rg[k].quality};
        for (int j = 0; j < 4; j++) {
            uint32_t u;
            memcpy(&u, &f[j], sizeof(u));
            put_le32(p + 4 * j, u);
        }
        p[16] = rg[k].spot;
        p[17] = rg[k].nhits;
        put_le16(p + 18, 0);
        put_le64(p + 20, rg[k].hits);
    }
    return (uint32_t)(p - buf);
}

static uint64_t malformed(const sdd_rich_ef_stats *e)
{
    return e->bad_magic + e->bad_version + e->bad_board + e->bad_pkt_length + e->truncated +
           e->bad_signature + e->bad_evt_length + e->too_many_hits + e->bad_channel +
           e->bad_timestamp + e->count_mismatch + e->index_full;
}

/* A buffer started (sdd_rich_proc_start) whose events are not decided yet: its item (NULL: the
 * end of the stream) and number. */
struct started {
    struct run_item *it;
    uint64_t id;
};

/* Start buffer `in` (NULL: the events the last one held back) in the proc. */
static sdd_err start_buffer(struct run_stage *s, sdd_rich_proc *p, struct run_item *in,
                            struct started *st)
{
    st->it = in;
    st->id = in != NULL ? in->id : atomic_load(&s->rich_seq_end);
    if (in == NULL) {
        return sdd_rich_proc_start_flush(p, s->rich_carry, st->id);
    }
    return sdd_rich_proc_start(p, in->data, in->bytes, s->rich_carry, st->id);
}

/* The oldest started buffer's events decided, the kept ones sent on. False when the run is
 * aborted. */
static bool decide_buffer(struct run_stage *s, sdd_rich_proc *p, const struct started *st)
{
    struct sdd_run *r = s->run;
    struct run_counts *c = run_counts(s);
    sdd_rich_output o;
    if (sdd_rich_proc_finish(p, &o) != SDD_OK) {
        sdd_metric_add(s->m.errors, 1);
        return true;
    }
    for (uint32_t i = 0; i < o.events->n; i++) {
        c->events_in++;
        c->bytes_in += 2u * o.events->nhits[i];
        if (o.nrings[i] == 0) {
            c->rejected++;
            continue;
        }
        struct run_item *rec = run_record_new(r);
        if (rec == NULL) {
            return false;
        }
        rec->bytes = rich_record(&o, i, rec->data);
        rec->id = (st->id << 16) | i; /* buffer number, event in the buffer */
        rec->built_ns = st->it != NULL ? st->it->built_ns : sdd_now_ns();
        atomic_store(&rec->ntracks, o.nrings[i]);
        c->kept++;
        c->events_out++;
        c->bytes_out += rec->bytes;
        atomic_fetch_add(&s->tracks, o.nrings[i]);
        run_emit(s, rec, true);
        run_item_release(r, rec);
    }
    return true;
}

/* A worker's buffers in flight, oldest first. */
struct worker {
    struct run_stage *s;
    unsigned t;
    sdd_rich_proc *p;
    uint32_t inflight; /* the proc's opts.inflight */
    bool going;        /* false once the run is aborted: items are only released */
    uint64_t busy;
    struct started fifo[SDD_RICH_PROC_MAX_INFLIGHT];
    uint32_t head, n;
};

/* Decide the oldest buffer in flight and let its item go. */
static void finish_oldest(struct worker *w)
{
    struct started st = w->fifo[w->head];
    w->head = (w->head + 1) % SDD_RICH_PROC_MAX_INFLIGHT;
    w->n--;
    uint64_t t0 = sdd_now_ns();
    if (w->going) {
        w->going = decide_buffer(w->s, w->p, &st);
    } else {
        sdd_rich_output o; /* the run is aborted: nothing more leaves */
        (void)sdd_rich_proc_finish(w->p, &o);
    }
    uint64_t done = sdd_now_ns();
    w->busy += done - t0;
    if (st.it != NULL) {
        run_lat_record(&w->s->lat[w->t], done - st.it->built_ns, done);
        run_item_release(w->s->run, st.it);
    }
    run_counts_flush();
}

/* Start a buffer (in NULL: the end of the stream); an item that cannot be started is counted
 * and let go. */
static void start_one(struct worker *w, struct run_item *in)
{
    if (w->n == w->inflight) { /* every slot taken: the oldest makes room */
        finish_oldest(w);
    }
    uint64_t t0 = sdd_now_ns();
    struct started *st = &w->fifo[(w->head + w->n) % SDD_RICH_PROC_MAX_INFLIGHT];
    sdd_err err = start_buffer(w->s, w->p, in, st);
    w->busy += sdd_now_ns() - t0;
    if (err == SDD_OK) {
        w->n++;
        return;
    }
    sdd_metric_add(w->s->m.errors, 1);
    if (in != NULL) {
        uint64_t done = sdd_now_ns();
        run_lat_record(&w->s->lat[w->t], done - in->built_ns, done);
        run_item_release(w->s->run, in);
    }
}

void *run_rich_thread(void *arg)
{
    struct run_worker_arg *wa = arg;
    struct run_stage *s = wa->s;
    unsigned t = wa->t;
    struct sdd_run *r = s->run;
    run_pin_worker(s, t);
    sdd_rich_proc_opts po;
    sdd_rich_proc_opts_default(&po);
    po.max_bytes = run_direct_buffer_bytes();
    po.split = s->cfg->process.split;
    const struct sdd_cfg_rich_finder *fc = &s->cfg->process.finder;
    po.find.method = fc->method != 0 ? SDD_RICH_PTOLEMY : SDD_RICH_HIST;
    po.find.fit = fc->fit != 0 ? SDD_RICH_FIT_CRAWFORD : SDD_RICH_FIT_TAUBIN;
    po.find.multi_ring = fc->multi_ring != 0;
    po.find.window = fc->window;
    po.find.threshold = (uint8_t)fc->threshold;
    po.find.min_hits = (uint8_t)fc->min_hits;
    po.find.claim = fc->claim;
    po.find.max_rms = fc->max_rms;
    po.gpu = fc->gpu != 0;
    /* Without a GPU the rings are found at the start, so one buffer in flight is enough. */
    po.inflight = fc->inflight != SDD_CFG_AUTO ? fc->inflight : po.gpu ? 2 : 1;
    struct worker w = {.s = s, .t = t, .inflight = po.inflight, .going = true};
    sdd_err err =
        r->record_bytes < record_max(po.max_rings) ? SDD_ETOOBIG : sdd_rich_proc_create(&po, &w.p);
    if (err != SDD_OK) {
        run_fail(r, s, err, "cannot create the RICH event and ring finders");
    }
    if (run_counts_attach(r) != SDD_OK) {
        run_fail(r, s, SDD_ENOMEM, "no memory for the worker's counters");
    }
    for (;;) {
        /* With buffers in flight, the next one is started if it is there; if not, the oldest
         * is decided rather than left waiting for it. */
        void *taken = NULL;
        if (w.n > 0 && !run_take(s, &taken)) {
            finish_oldest(&w);
            continue;
        }
        struct run_item *it = taken != NULL ? taken : run_next_item(s);
        if (it == NULL) {
            break;
        }
        uint64_t end = it->id + 1, seen = atomic_load(&s->rich_seq_end);
        if (w.p != NULL && w.going) {
            start_one(&w, it); /* it may be let go here */
        } else {
            uint64_t done = sdd_now_ns();
            run_lat_record(&s->lat[t], done - it->built_ns, done);
            run_item_release(r, it);
        }
        while (seen < end && !atomic_compare_exchange_weak(&s->rich_seq_end, &seen, end)) {
        }
        run_counts_flush();
    }
    while (w.n > 0) {
        finish_oldest(&w);
    }
    /* The last worker out decides the events the last buffer held back. */
    if (atomic_fetch_add(&s->rich_done, 1) + 1 == s->nthreads && s->rich_carry != NULL &&
        w.p != NULL && w.going) {
        start_one(&w, NULL);
        while (w.n > 0) {
            finish_oldest(&w);
        }
    }
    sdd_rich_proc *p = w.p;
    run_counts_detach();
    atomic_fetch_add(&s->busy_ns, w.busy);
    if (p != NULL) {
        sdd_rich_ef_stats ef;
        sdd_rich_merge_stats ms;
        sdd_rich_proc_stats(p, &ef, &ms);
        sdd_metric_add(s->m.errors, malformed(&ef)); /* counted, flagged, skipped */
        if (ms.carry_full + ms.late > 0) { /* events that may have been cut at a boundary */
            SDD_WARN(LOG,
                     "%s: %" PRIu64 " times the events held for the next buffer did not fit, "
                     "%" PRIu64 " buffers came after their turn: merged on their own",
                     s->cfg->name, ms.carry_full, ms.late);
        }
        sdd_rich_proc_destroy(p);
    }
    return run_worker_done(wa);
}
