/* The stages behind the event builder: process (hough, prescale, none), writer and feedback,
 * each a set of threads draining a bounded ring of pooled built events, and the hand-over
 * between them (references counted per receiving stage, a full ring holds its producer). */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "run_internal.h"
#include "sddaq/clock.h"
#include "sddaq/cpu.h"
#include "sddaq/log.h"
#include "sddaq/trigger.h"

#define LOG "run"

static void pause_us(long us)
{
    struct timespec ts = {0, us * 1000};
    nanosleep(&ts, NULL);
}

void run_lat_init(struct run_lat *l)
{
    sdd_hist_init(&l->own);
    sdd_hist_init(&l->shared);
    l->next_ns = 0;
    pthread_mutex_init(&l->lock, NULL);
}

void run_lat_flush(struct run_lat *l)
{
    pthread_mutex_lock(&l->lock);
    l->shared = l->own;
    pthread_mutex_unlock(&l->lock);
}

void run_lat_record(struct run_lat *l, uint64_t ns, uint64_t now)
{
    sdd_hist_record(&l->own, ns);
    if (now >= l->next_ns) {
        run_lat_flush(l);
        l->next_ns = now + 200000000ull;
    }
}

void run_item_release(struct sdd_run *r, struct run_item *it)
{
    if (it->pooled && atomic_fetch_sub(&it->refs, 1) == 1) {
        sdd_pool_put(r->items, it);
    }
}

/* ---- batched counters ---------------------------------------------------------------------- */

static __thread struct run_counts *tls_counts;
static __thread struct sdd_run *tls_run;

sdd_err run_counts_attach(struct sdd_run *r)
{
    tls_counts = calloc(r->n, sizeof(*tls_counts));
    tls_run = r;
    return tls_counts != NULL ? SDD_OK : SDD_ENOMEM;
}

struct run_counts *run_counts(const struct run_stage *s)
{
    return &tls_counts[s->idx];
}

void run_counts_flush(void)
{
    struct sdd_run *r = tls_run;
    for (size_t i = 0; tls_counts != NULL && i < r->n; i++) {
        struct run_counts *c = &tls_counts[i];
        if (c->events_in == 0 && c->events_out == 0 && c->rejected == 0) {
            continue;
        }
        struct run_stage *s = &r->st[i];
        sdd_metric_add(s->m.events_in, c->events_in);
        sdd_metric_add(s->m.bytes_in, c->bytes_in);
        sdd_metric_add(s->m.events_out, c->events_out);
        sdd_metric_add(s->m.bytes_out, c->bytes_out);
        atomic_fetch_add(&s->kept, c->kept);
        atomic_fetch_add(&s->rejected, c->rejected);
        memset(c, 0, sizeof(*c));
    }
}

void run_counts_detach(void)
{
    run_counts_flush();
    free(tls_counts);
    tls_counts = NULL;
}

/* ---- hand-over ------------------------------------------------------------------------------ */

/* A pooled copy of a view, with refs references; NULL when the run is aborted meanwhile. */
static struct run_item *materialize(struct run_stage *s, const struct run_item *v, uint32_t refs)
{
    struct sdd_run *r = s->run;
    struct run_item *it;
    /* No free buffer: the stages behind are slower than building. Wait; the BU returns no
     * credits meanwhile, which slows the RUs down. */
    while ((it = sdd_pool_get(r->items)) == NULL) {
        if (atomic_load(&r->phase) == RUN_PHASE_ABORT) {
            return NULL;
        }
        pause_us(20);
    }
    long n = sdd_evb_event_serialize(v->ev, it->data, r->item_bytes);
    if (n < 0) { /* cannot happen with item_bytes sized from the largest fragment */
        sdd_pool_put(r->items, it);
        return NULL;
    }
    it->flags = v->flags;
    it->id = v->id;
    it->built_ns = v->built_ns;
    it->bytes = (uint32_t)n;
    atomic_store(&it->ntracks, atomic_load(&v->ntracks));
    atomic_store(&it->kept, atomic_load(&v->kept));
    atomic_store(&it->tflags, atomic_load(&v->tflags));
    it->pooled = true;
    it->ev = NULL;
    atomic_store(&it->refs, refs);
    return it;
}

static void run_inline(struct run_stage *s, struct run_item *it);

void run_emit(struct run_stage *s, struct run_item *it, bool kept)
{
    struct run_stage *queued[RUN_MAX_OUT];
    uint32_t nq = 0;
    for (size_t i = 0; i < s->nout; i++) {
        struct run_stage *to = s->out[i];
        if (!kept && to->cfg->type != SDD_STAGE_FEEDBACK) {
            continue;
        }
        if (to->inline_run) {
            run_inline(to, it);
        } else {
            queued[nq++] = to;
        }
    }
    if (nq == 0) {
        return;
    }
    struct run_item *p = it;
    if (!it->pooled) {
        p = materialize(s, it, nq);
        if (p == NULL) {
            sdd_metric_add(s->m.dropped, nq);
            return;
        }
    } else {
        atomic_fetch_add(&p->refs, nq);
    }
    for (uint32_t i = 0; i < nq; i++) {
        while (sdd_mpmc_enqueue(queued[i]->in, p) != SDD_OK) {
            pause_us(20); /* backpressure: the next stage is full */
        }
    }
}

/* A process (none, prescale) or null-writer stage, run in the thread of its producer. */
static void run_inline(struct run_stage *s, struct run_item *it)
{
    struct run_counts *c = run_counts(s);
    c->events_in++;
    c->bytes_in += it->bytes;
    if (s->cfg->type == SDD_STAGE_WRITER) {
        c->events_out++; /* a null writer: counted, not stored */
        c->bytes_out += it->bytes;
        return;
    }
    const struct sdd_cfg_process *pc = &s->cfg->process;
    bool kept = pc->algorithm != SDD_ALGO_PRESCALE || it->id % pc->factor == 0;
    atomic_store_explicit(&it->kept, kept, memory_order_relaxed);
    c->kept += kept;
    c->rejected += !kept;
    if (kept) {
        c->events_out++;
        c->bytes_out += it->bytes;
    }
    run_emit(s, it, kept);
}

void run_stage_finished(struct run_stage *s)
{
    if (atomic_exchange(&s->finished, true)) {
        return;
    }
    for (size_t i = 0; i < s->nout; i++) {
        struct run_stage *to = s->out[i];
        /* An inline stage ends with the last of its producers. */
        if (atomic_fetch_sub(&to->producers, 1) == 1 && to->inline_run) {
            run_stage_finished(to);
        }
    }
}

/* Next item of s's input; NULL once every producer finished and the ring is empty. Spins a
 * little, then sleeps 50 us doubling up to 1 ms while there is nothing (DESIGN: spin briefly,
 * then block). */
static struct run_item *next_item(struct run_stage *s)
{
    void *p;
    long sleep_us = 50;
    for (unsigned idle = 0;; idle++) {
        if (sdd_mpmc_dequeue(s->in, &p) == SDD_OK) {
            return p;
        }
        if (atomic_load(&s->producers) <= 0) {
            /* Producers are gone; whatever they queued before leaving is visible now. */
            if (sdd_mpmc_dequeue(s->in, &p) == SDD_OK) {
                return p;
            }
            return NULL;
        }
        if (idle == 64) {
            run_counts_flush(); /* idle: a good moment to publish */
        }
        if (idle > 64) {
            pause_us(sleep_us);
            sleep_us = sleep_us < 1000 ? sleep_us * 2 : 1000;
        }
    }
}

static void pin_worker(struct run_stage *s, unsigned t)
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

struct worker_arg {
    struct run_stage *s;
    unsigned t;
};

static void *process_thread(void *arg)
{
    struct worker_arg *wa = arg;
    struct run_stage *s = wa->s;
    unsigned t = wa->t;
    struct sdd_run *r = s->run;
    const struct sdd_cfg_process *pc = &s->cfg->process;
    pin_worker(s, t);
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
    while ((it = next_item(s)) != NULL) {
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
    run_lat_flush(&s->lat[t]);
    if (w != NULL) {
        sdd_hough_destroy(w->h);
        free(w);
    }
    free(wa);
    if (atomic_fetch_sub(&s->live, 1) == 1) {
        run_stage_finished(s);
    }
    return NULL;
}

/* ---- writer and feedback ------------------------------------------------------------------- */

static void *writer_thread(void *arg)
{
    struct worker_arg *wa = arg;
    struct run_stage *s = wa->s;
    struct sdd_run *r = s->run;
    pin_worker(s, 0);
    bool broken = false;
    uint64_t busy = 0;
    struct run_item *it;
    while ((it = next_item(s)) != NULL) {
        uint64_t t0 = sdd_now_ns();
        sdd_metric_add(s->m.events_in, 1);
        sdd_metric_add(s->m.bytes_in, it->bytes);
        if (!broken) {
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
        if (broken) {
            sdd_metric_add(s->m.dropped, 1);
        }
        uint64_t done = sdd_now_ns();
        busy += done - t0;
        run_lat_record(&s->lat[0], done - it->built_ns, done);
        run_item_release(r, it);
    }
    atomic_fetch_add(&s->busy_ns, busy);
    run_lat_flush(&s->lat[0]);
    free(wa);
    if (atomic_fetch_sub(&s->live, 1) == 1) {
        run_stage_finished(s);
    }
    return NULL;
}

static void *feedback_thread(void *arg)
{
    struct worker_arg *wa = arg;
    struct run_stage *s = wa->s;
    struct sdd_run *r = s->run;
    pin_worker(s, 0);
    struct run_item *it;
    while ((it = next_item(s)) != NULL) {
        sdd_metric_add(s->m.events_in, 1);
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
    run_lat_flush(&s->lat[0]);
    free(wa);
    if (atomic_fetch_sub(&s->live, 1) == 1) {
        run_stage_finished(s);
    }
    return NULL;
}

/* ---- setup ---------------------------------------------------------------------------------- */

static bool is_default_path(const sdd_config *cfg, const struct sdd_cfg_stage *c)
{
    char def[SDD_CFG_PATH_MAX + 256];
    snprintf(def, sizeof(def), "%s/%s_%s.%s", cfg->run.output_dir, cfg->run.name, c->name,
             c->writer.format == SDD_WRITER_HDF5 ? "h5" : "raw");
    return strcmp(def, c->writer.path) == 0;
}

static bool exists(const char *path)
{
    struct stat sb;
    char partial[SDD_CFG_PATH_MAX + 16];
    snprintf(partial, sizeof(partial), "%s%s", path, SDD_STORE_PARTIAL_SUFFIX);
    return stat(path, &sb) == 0 || stat(partial, &sb) == 0;
}

/* Writers on default paths get a run number, the first for which none of their files exist,
 * so that running the same topology again never refuses or overwrites. */
static void number_run(struct sdd_run *r)
{
    for (uint64_t n = 1; n < 1000000; n++) {
        bool free_number = true;
        for (size_t i = 0; i < r->n && free_number; i++) {
            struct run_stage *s = &r->st[i];
            const struct sdd_cfg_stage *c = s->cfg;
            if (!s->local || c->type != SDD_STAGE_WRITER || c->writer.format == SDD_WRITER_NULL) {
                continue;
            }
            if (is_default_path(r->cfg, c)) {
                snprintf(s->path, sizeof(s->path), "%s/%s_run%06" PRIu64 "_%s.%s",
                         r->cfg->run.output_dir, r->cfg->run.name, n, c->name,
                         c->writer.format == SDD_WRITER_HDF5 ? "h5" : "raw");
            } else {
                snprintf(s->path, sizeof(s->path), "%s", c->writer.path);
            }
            free_number = !exists(s->path) || !is_default_path(r->cfg, c);
        }
        if (free_number) {
            r->run_number = n;
            return;
        }
    }
}

static sdd_err make_dirs(const char *path)
{
    char buf[SDD_CFG_PATH_MAX];
    snprintf(buf, sizeof(buf), "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            if (mkdir(buf, 0777) != 0 && errno != EEXIST) {
                return sdd_err_from_errno(errno);
            }
            *p = '/';
        }
    }
    return SDD_OK;
}

static sdd_err open_writer(struct sdd_run *r, struct run_stage *s, const char *topology)
{
    const struct sdd_cfg_writer *wc = &s->cfg->writer;
    struct sdd_store_opts so = {0};
    so.kind = wc->format == SDD_WRITER_HDF5  ? SDD_STORE_HDF5
              : wc->format == SDD_WRITER_RAW ? SDD_STORE_RAW
                                             : SDD_STORE_NULL;
    so.path = s->path;
    so.run_number = r->run_number;
    so.topology = topology;
    if (so.kind != SDD_STORE_NULL) {
        sdd_err err = make_dirs(s->path);
        if (err != SDD_OK) {
            SDD_ERROR(LOG, "%s: cannot create the directory of %s: %s", s->cfg->name, s->path,
                      sdd_strerror(err));
            return err;
        }
    }
    sdd_err err = sdd_store_open(&so, &s->store);
    if (err != SDD_OK) {
        SDD_ERROR(LOG, "%s: cannot open %s: %s", s->cfg->name, s->path, sdd_strerror(err));
        return err;
    }
    snprintf(s->detail, sizeof(s->detail), "%s",
             so.kind == SDD_STORE_NULL ? "(null writer: counted, not stored)" : s->path);
    return SDD_OK;
}

static sdd_err open_feedback(struct sdd_run *r, struct run_stage *s)
{
    struct sdd_rmem_opts ro;
    sdd_rmem_opts_default(&ro);
    ro.provider = r->evb_opts.provider;
    ro.port = (uint16_t)s->cfg->feedback.port;
    long node = sdd_config_find_node(r->cfg, s->cfg->node);
    ro.host = node >= 0 ? r->cfg->nodes[node].host : NULL;
    size_t cells = s->cfg->feedback.size / sizeof(struct sdd_run_feedback);
    sdd_err err = sdd_ksb_serve_cells(&ro, sizeof(struct sdd_run_feedback), cells < 3 ? 3 : cells,
                                      &s->ksb);
    if (err != SDD_OK) {
        SDD_ERROR(LOG, "%s: cannot serve the feedback buffer: %s", s->cfg->name,
                  sdd_strerror(err));
        return err;
    }
    snprintf(s->detail, sizeof(s->detail), "%s:%u (sdd_ksb_clone, struct sdd_run_feedback)",
             ro.host ? ro.host : "0.0.0.0", sdd_rmem_server_port(sdd_ksb_server(s->ksb)));
    return SDD_OK;
}

/* Stages whose work is smaller than a hand-over to another thread run inline. */
static bool runs_inline(const struct sdd_cfg_stage *c)
{
    return (c->type == SDD_STAGE_PROCESS && (c->process.algorithm == SDD_ALGO_NONE ||
                                             c->process.algorithm == SDD_ALGO_PRESCALE)) ||
           (c->type == SDD_STAGE_WRITER && c->writer.format == SDD_WRITER_NULL);
}

sdd_err run_stages_setup(struct sdd_run *r)
{
    const sdd_config *cfg = r->cfg;
    size_t slots = 64;
    for (size_t i = 0; i < r->n; i++) {
        r->st[i].inline_run = runs_inline(r->st[i].cfg);
    }
    for (size_t i = 0; i < cfg->n_links; i++) {
        const struct sdd_cfg_link *l = &cfg->links[i];
        struct run_stage *from = &r->st[sdd_config_find_stage(cfg, l->from)];
        struct run_stage *to = &r->st[sdd_config_find_stage(cfg, l->to)];
        if (from->cfg->type == SDD_STAGE_SOURCE || from->cfg->type == SDD_STAGE_RU) {
            if (to->cfg->type != SDD_STAGE_RU && to->cfg->type != SDD_STAGE_BU) {
                SDD_ERROR(LOG, "%s -> %s: `sddaq run` links sources only to ru stages for now",
                          l->from, l->to);
                return SDD_ENOTSUP;
            }
            continue; /* the event builder's own links */
        }
        if (!from->local) {
            continue; /* another node's (run.c refused links that cross nodes here) */
        }
        if (from->nout == RUN_MAX_OUT) {
            SDD_ERROR(LOG, "%s: at most %d output links", l->from, RUN_MAX_OUT);
            return SDD_ENOTSUP;
        }
        from->out[from->nout++] = to;
        to->first_decision |= from->cfg->type == SDD_STAGE_BU && to->cfg->type == SDD_STAGE_PROCESS;
        atomic_fetch_add(&to->producers, 1);
        if (to->in == NULL && !to->inline_run) {
            sdd_err err = sdd_mpmc_create(l->depth, &to->in);
            if (err != SDD_OK) {
                return err;
            }
            slots += sdd_mpmc_capacity(to->in);
        }
    }
    /* Buffers for every ring slot and the events in the workers' hands, within 256 MiB. */
    size_t by_memory = ((size_t)256 << 20) / (sizeof(struct run_item) + r->item_bytes);
    size_t count = slots + 64 < by_memory ? slots + 64 : by_memory;
    sdd_err err = sdd_pool_create(sizeof(struct run_item) + r->item_bytes, count < 64 ? 64 : count,
                                  64, &r->items);
    if (err != SDD_OK) {
        return err;
    }
    char *topology = NULL;
    err = sdd_config_emit(cfg, &topology, NULL);
    if (err != SDD_OK) {
        return err;
    }
    number_run(r);
    for (size_t i = 0; i < r->n && err == SDD_OK; i++) {
        struct run_stage *s = &r->st[i];
        const struct sdd_cfg_stage *c = s->cfg;
        if (!s->local) {
            continue;
        }
        for (unsigned t = 0; t < RUN_MAX_THREADS; t++) {
            run_lat_init(&s->lat[t]);
        }
        if (c->type == SDD_STAGE_PROCESS) {
            if (c->process.algorithm == SDD_ALGO_RICH) {
                SDD_ERROR(LOG, "%s: the rich algorithm is not run by `sddaq run` yet (use "
                               "`sddaq trigger rich`)", c->name);
                err = SDD_ENOTSUP;
            } else if (c->process.threads > RUN_MAX_THREADS) {
                SDD_ERROR(LOG, "%s: at most %d threads", c->name, RUN_MAX_THREADS);
                err = SDD_ENOTSUP;
            }
            s->nthreads = s->inline_run ? 0 : c->process.threads;
        } else if (c->type == SDD_STAGE_WRITER && s->inline_run) {
            snprintf(s->detail, sizeof(s->detail), "(null writer: counted, not stored)");
        } else if (c->type == SDD_STAGE_WRITER) {
            s->nthreads = 1;
            err = open_writer(r, s, topology);
        } else if (c->type == SDD_STAGE_FEEDBACK) {
            s->nthreads = 1;
            err = open_feedback(r, s);
        }
    }
    free(topology);
    return err;
}

sdd_err run_stages_start(struct sdd_run *r)
{
    /* Sinks first, then the stages that feed them. */
    static const sdd_stage_type order[] = {SDD_STAGE_WRITER, SDD_STAGE_FEEDBACK,
                                           SDD_STAGE_PROCESS};
    for (size_t k = 0; k < sizeof(order) / sizeof(order[0]); k++) {
        for (size_t i = 0; i < r->n; i++) {
            struct run_stage *s = &r->st[i];
            if (!s->local || s->cfg->type != order[k]) {
                continue;
            }
            void *(*fn)(void *) = order[k] == SDD_STAGE_WRITER     ? writer_thread
                                  : order[k] == SDD_STAGE_FEEDBACK ? feedback_thread
                                                                   : process_thread;
            atomic_store(&s->live, s->nthreads);
            for (unsigned t = 0; t < s->nthreads; t++) {
                struct worker_arg *wa = malloc(sizeof(*wa));
                if (wa == NULL) {
                    return SDD_ENOMEM;
                }
                *wa = (struct worker_arg){s, t};
                if (pthread_create(&s->th[t], NULL, fn, wa) != 0) {
                    free(wa);
                    /* The threads that did start must still see their input end. */
                    atomic_fetch_sub(&s->live, s->nthreads - t);
                    return SDD_ENOMEM;
                }
                s->started++;
            }
        }
    }
    return SDD_OK;
}

void run_stages_close(struct sdd_run *r)
{
    for (size_t i = 0; i < r->n; i++) {
        struct run_stage *s = &r->st[i];
        if (s->store != NULL) {
            uint64_t t0 = sdd_now_ns();
            sdd_err err = sdd_store_close(s->store, &s->store_sum);
            atomic_fetch_add(&s->busy_ns, sdd_now_ns() - t0); /* the last flush is writing too */
            s->store = NULL;
            if (err != SDD_OK) {
                run_fail(r, s, err, "closing the run file failed");
                snprintf(s->detail, sizeof(s->detail), "%s%s (incomplete)", s->path,
                         SDD_STORE_PARTIAL_SUFFIX);
            } else if (s->cfg->writer.format != SDD_WRITER_NULL) {
                snprintf(s->detail, sizeof(s->detail), "%s", s->path);
            }
        }
        if (s->ksb != NULL) {
            sdd_ksb_close(s->ksb);
            s->ksb = NULL;
        }
        sdd_mpmc_destroy(s->in);
        s->in = NULL;
    }
    sdd_pool_destroy(r->items);
    r->items = NULL;
}
