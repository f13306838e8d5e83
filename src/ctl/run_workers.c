/* The threads of the stages behind the event builder: process (hough) workers, writers and
 * the feedback publisher, each draining its stage's ring of pooled built events. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "run_internal.h"
#include "sddaq/clock.h"
#include "sddaq/cpu.h"
#include "sddaq/log.h"
#include "sddaq/trigger.h"

#define LOG "run"

/* A worker's end: its last latencies out, and the stage finished when it was the last. */
void *run_worker_done(struct run_worker_arg *wa)
{
    struct run_stage *s = wa->s;
    run_lat_flush(&s->lat[wa->t]);
    atomic_fetch_add(&s->cpu_ns, sdd_thread_cpu_ns()); /* the thread lived for this stage */
    free(wa);
    if (atomic_fetch_sub(&s->live, 1) == 1) {
        run_stage_finished(s);
        run_wake(s->run);
    }
    return NULL;
}

void run_pin_worker(struct run_stage *s, unsigned t)
{
    if (s->cfg->cores[0] == '\0') {
        return;
    }
    int cpus[SDD_CFG_CPU_LIMIT + 1];
    int n = sdd_cpu_parse_list(s->cfg->cores, cpus, SDD_CFG_CPU_LIMIT + 1);
    if (n > 0) {
        sdd_cpu_pin_self(cpus[t % (unsigned)n]);
    }
}

/* ---- process -------------------------------------------------------------------------------- */

struct hough_worker {
    sdd_hough *h;
    sdd_stub stubs[SDD_HOUGH_MAX_STUBS];
    sdd_hough_track tracks[64];
    float max_qpt;       /* 1 / min_pt */
    uint32_t candidates; /* of the last event */
};

/* Gather every present fragment's stubs and find tracks: the number of candidates with
 * pT >= min_pt (all candidates in w->candidates), or a negative sdd_err when the event's stub
 * blocks cannot be read. */
static int hough_decide(struct hough_worker *w, const struct run_item *it)
{
    const uint8_t *ev = it->data;
    struct sdd_evb_event_hdr h;
    if (it->bytes < sizeof(h)) {
        return SDD_ECORRUPT;
    }
    memcpy(&h, ev, sizeof(h));
    size_t words = ((size_t)h.nsources + 63) / 64;
    size_t table = sizeof(h) + words * 8;
    if (table + (size_t)h.nsources * sizeof(struct sdd_evb_event_entry) > it->bytes) {
        return SDD_ECORRUPT;
    }
    size_t nstubs = 0;
    for (uint32_t s = 0; s < h.nsources; s++) {
        struct sdd_evb_event_entry e;
        memcpy(&e, ev + table + s * sizeof(e), sizeof(e));
        if (e.length == 0) {
            continue; /* absent source: decide on what came */
        }
        if (e.length < sizeof(struct sdd_evb_frag_hdr) || e.offset > it->bytes ||
            e.length > it->bytes - e.offset) {
            return SDD_ECORRUPT;
        }
        struct sdd_evb_frag_hdr fh;
        memcpy(&fh, ev + e.offset, sizeof(fh));
        if (fh.length > e.length - sizeof(fh)) {
            return SDD_ECORRUPT;
        }
        size_t got = 0;
        uint16_t sector;
        sdd_err err = sdd_stub_block_read(ev + e.offset + sizeof(fh), fh.length, &sector,
                                          w->stubs + nstubs, SDD_HOUGH_MAX_STUBS - nstubs, &got);
        if (err != SDD_OK) {
            return err;
        }
        nstubs += got;
    }
    int n = sdd_hough_find(w->h, w->stubs, nstubs, w->tracks, 64);
    if (n < 0) {
        return n;
    }
    /* Tracks beyond the 64 kept are not looked at: an event with that many candidates has
     * more than enough activity to be kept when one of the first 64 passes. */
    int found = 0;
    for (int i = 0; i < n && i < 64; i++) {
        found += fabsf(w->tracks[i].qpt) <= w->max_qpt;
    }
    w->candidates = (uint32_t)n;
    return found;
}

void *run_process_thread(void *arg)
{
    struct run_worker_arg *wa = arg;
    struct run_stage *s = wa->s;
    unsigned t = wa->t;
    struct sdd_run *r = s->run;
    const struct sdd_cfg_process *pc = &s->cfg->process;
    run_pin_worker(s, t);
    struct hough_worker *w = NULL;
    if (pc->algorithm == SDD_ALGO_HOUGH) {
        sdd_hough_opts ho;
        sdd_hough_opts_default(&ho);
        w = calloc(1, sizeof(*w));
        sdd_err err = w == NULL ? SDD_ENOMEM : sdd_hough_create(&ho, &w->h);
        if (w != NULL) {
            w->max_qpt = 1.0f / pc->min_pt;
        }
        if (err != SDD_OK) {
            run_fail(r, s, err, "cannot create the Hough track finder");
        }
    }
    if (run_counts_attach(r) != SDD_OK) {
        run_fail(r, s, SDD_ENOMEM, "no memory for the worker's counters");
    }
    struct run_item *it;
    uint64_t busy = 0;
    while ((it = run_next_item(s)) != NULL) {
        uint64_t t0 = sdd_now_ns();
        struct run_counts *c = run_counts(s);
        c->events_in++;
        c->bytes_in += it->bytes;
        bool kept = true;
        if (w != NULL && w->h != NULL) {
            int n = hough_decide(w, it);
            if (n < 0) {
                atomic_fetch_or(&it->tflags, RUN_FLAG_TRIGGER_ERROR); /* kept and flagged */
                sdd_metric_add(s->m.errors, 1);
            } else {
                atomic_store(&it->ntracks, w->candidates);
                kept = n > 0;
                atomic_fetch_add(&s->tracks, w->candidates);
            }
        }
        atomic_store(&it->kept, kept);
        c->kept += kept;
        c->rejected += !kept;
        if (kept) {
            c->events_out++;
            c->bytes_out += it->bytes;
        }
        uint64_t done = sdd_now_ns();
        busy += done - t0;
        run_lat_record(&s->lat[t], done - it->built_ns, done);
        run_emit(s, it, kept);
        run_item_release(r, it);
        if ((c->events_in & 63) == 0) {
            run_counts_flush();
        }
    }
    run_counts_detach();
    atomic_fetch_add(&s->busy_ns, busy);
    if (w != NULL) {
        sdd_hough_destroy(w->h);
        free(w);
    }
    return run_worker_done(wa);
}

/* ---- writer and feedback ------------------------------------------------------------------- */

void *run_writer_thread(void *arg)
{
    struct run_worker_arg *wa = arg;
    struct run_stage *s = wa->s;
    struct sdd_run *r = s->run;
    run_pin_worker(s, 0);
    bool broken = false, fenced;
    uint64_t busy = 0;
    struct run_gate gate = {0};
    struct run_item *it;
    while ((it = run_gate_next(s, &gate, &fenced)) != NULL) {
        uint64_t t0 = sdd_now_ns();
        sdd_metric_add(s->m.events_in, 1);
        sdd_metric_add(s->m.bytes_in, it->bytes);
        if (fenced) {
            sdd_metric_add(s->m.dropped, 1); /* its builder fenced: a survivor built it */
        } else if (!broken) {
            struct sdd_store_rec rec = {.id = it->id, .time_ns = it->built_ns,
                                        .flags = it->flags | atomic_load(&it->tflags),
                                        .data = it->data, .size = it->bytes};
            sdd_err err = sdd_store_write(s->store, &rec);
            if (err != SDD_OK) {
                broken = true; /* the file stays NAME.partial; later events count as drops */
                run_fail(r, s, err, "writing failed");
            } else {
                sdd_metric_add(s->m.events_out, 1);
                sdd_metric_add(s->m.bytes_out, it->bytes);
            }
        }
        if (broken && !fenced) {
            sdd_metric_add(s->m.dropped, 1);
        }
        uint64_t done = sdd_now_ns();
        busy += done - t0;
        run_lat_record(&s->lat[0], done - it->built_ns, done);
        run_item_release(r, it);
    }
    run_gate_end(&gate, s, "events not written");
    atomic_fetch_add(&s->busy_ns, busy);
    return run_worker_done(wa);
}

void *run_feedback_thread(void *arg)
{
    struct run_worker_arg *wa = arg;
    struct run_stage *s = wa->s;
    struct sdd_run *r = s->run;
    run_pin_worker(s, 0);
    struct run_gate gate = {0};
    struct run_item *it;
    bool fenced;
    /* Decisions leave the node too: the same gate as a writer's, so that the control system
     * never gets a decision twice for an event a fenced builder held (docs/run.md). */
    while ((it = run_gate_next(s, &gate, &fenced)) != NULL) {
        sdd_metric_add(s->m.events_in, 1);
        if (fenced) {
            sdd_metric_add(s->m.dropped, 1);
            run_item_release(r, it);
            continue;
        }
        struct sdd_run_feedback *f = &s->fb;
        f->event_id = it->id;
        f->ntracks = atomic_load(&it->ntracks);
        f->kept = atomic_load(&it->kept);
        f->decided++;
        f->kept_total += f->kept;
        f->tracks_total += f->ntracks;
        f->built_ns = it->built_ns;
        f->decided_ns = sdd_now_ns();
        f->event_flags = it->flags | atomic_load(&it->tflags);
        sdd_err err = sdd_ksb_push(s->ksb, f, sizeof(*f));
        if (err != SDD_OK) {
            sdd_metric_add(s->m.errors, 1);
        } else {
            sdd_metric_add(s->m.events_out, 1);
        }
        run_lat_record(&s->lat[0], f->decided_ns - it->built_ns, f->decided_ns);
        run_item_release(r, it);
    }
    run_gate_end(&gate, s, "decisions not published");
    return run_worker_done(wa);
}
