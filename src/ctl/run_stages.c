/* Setting the stages behind the event builder up and down: rings and the event pool from the
 * links, which stages run inline, writers (run numbers, directories, files) and feedback
 * buffers, starting their threads sinks first, and closing files and buffers at the end. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "run_internal.h"
#include "sddaq/clock.h"
#include "sddaq/log.h"

#define LOG "run"

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

static bool has_rich_stage(const struct sdd_run *r)
{
    for (size_t i = 0; i < r->n; i++) {
        const struct sdd_cfg_stage *c = r->st[i].cfg;
        if (r->st[i].local && c->type == SDD_STAGE_PROCESS &&
            c->process.algorithm == SDD_ALGO_RICH) {
            return true;
        }
    }
    return false;
}

sdd_err run_stages_setup(struct sdd_run *r)
{
    const sdd_config *cfg = r->cfg;
    size_t slots = 64;
    r->links = calloc(cfg->n_links > 0 ? cfg->n_links : 1, sizeof(*r->links));
    if (r->links == NULL) {
        return SDD_ENOMEM;
    }
    sdd_err lerr = run_link_setup(r, r->links);
    if (lerr != SDD_OK) {
        return lerr;
    }
    for (size_t i = 0; i < r->n; i++) {
        r->st[i].inline_run = r->st[i].link == NULL && runs_inline(r->st[i].cfg);
    }
    for (size_t i = 0; i < cfg->n_links; i++) {
        const struct sdd_cfg_link *l = &cfg->links[i];
        struct run_stage *from = &r->st[sdd_config_find_stage(cfg, l->from)];
        struct run_stage *to = &r->st[sdd_config_find_stage(cfg, l->to)];
        bool direct = run_direct_source(from->cfg);
        if ((from->cfg->type == SDD_STAGE_SOURCE && !direct) || from->cfg->type == SDD_STAGE_RU) {
            if (to->cfg->type != SDD_STAGE_RU && to->cfg->type != SDD_STAGE_BU) {
                SDD_ERROR(LOG, "%s -> %s: `sddaq run` links this source only to ru stages (only "
                               "NA62 packets, from emu-na62 or a udp source with frame format "
                               "na62, go straight into a trigger)",
                          l->from, l->to);
                return SDD_ENOTSUP;
            }
            continue; /* the event builder's own links */
        }
        if (direct && (to->cfg->type == SDD_STAGE_RU || to->cfg->type == SDD_STAGE_BU)) {
            SDD_ERROR(LOG, "%s -> %s: NA62 packets are not fragments of one event: they go "
                           "straight into a trigger (process rich), a prescale or a writer",
                      l->from, l->to);
            return SDD_ENOTSUP;
        }
        bool process = to->cfg->type == SDD_STAGE_PROCESS;
        bool rich = process && to->cfg->process.algorithm == SDD_ALGO_RICH;
        if (rich && !direct) {
            SDD_ERROR(LOG, "%s -> %s: the rich trigger takes receive buffers of NA62 packets: "
                           "link it from an emu-na62 source or a udp source with frame format "
                           "na62", l->from, l->to);
            return SDD_ENOTSUP;
        }
        if (direct && process && to->cfg->process.algorithm == SDD_ALGO_HOUGH) {
            SDD_ERROR(LOG, "%s -> %s: the hough trigger takes built events, not receive buffers "
                           "of NA62 packets", l->from, l->to);
            return SDD_ENOTSUP;
        }
        to->direct_fed |= direct;
        to->first_decision |= direct && rich; /* its events are the run's events */
        if (!from->local && !(to->local && r->links[i] != NULL)) {
            continue; /* another node's; a link into this node has its stand-in as producer */
        }
        if (from->nout == RUN_MAX_OUT) {
            SDD_ERROR(LOG, "%s: at most %d output links", l->from, RUN_MAX_OUT);
            return SDD_ENOTSUP;
        }
        from->out[from->nout++] = to;
        if (from->cfg->type == SDD_STAGE_BU && from->local) {
            /* A writer behind holds a poll turn's events until the builder commits them
             * (run_gate.c); the builder sets its next bulk's buffers aside before delivering
             * it (run_evb.c, the stash): a bulk more per output for that. */
            slots += from->cfg->evb.bulk_size;
        }
        to->first_decision |= from->cfg->type == SDD_STAGE_BU && to->cfg->type == SDD_STAGE_PROCESS;
        atomic_fetch_add(&to->producers, 1);
        to->nproducers++;
        if (to->in == NULL && !to->inline_run) {
            sdd_notify_init(&to->in_note);
            sdd_notify_init(&to->room_note);
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
    if (has_rich_stage(r)) {
        r->record_bytes = run_rich_record_bytes();
        err = sdd_pool_create(sizeof(struct run_item) + r->record_bytes, count < 64 ? 64 : count,
                              64, &r->records);
        if (err != SDD_OK) {
            return err;
        }
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
        if (!s->local && s->link == NULL) {
            continue;
        }
        for (unsigned t = 0; t < RUN_MAX_THREADS; t++) {
            run_lat_init(&s->lat[t]);
        }
        if (!s->local) {
            continue; /* a fabric link's stand-in: one thread (run_stages_start) */
        }
        if (c->type == SDD_STAGE_PROCESS) {
            if (c->process.algorithm == SDD_ALGO_RICH && !s->direct_fed) {
                SDD_ERROR(LOG, "%s: the rich trigger takes receive buffers of NA62 packets: "
                               "link it from an emu-na62 source or a udp source with frame "
                               "format na62", c->name);
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

/* One thread for a stage, or its stand-in for a fabric link. */
static sdd_err start_threads(struct run_stage *s, void *(*fn)(void *))
{
    atomic_store(&s->live, s->nthreads);
    for (unsigned t = 0; t < s->nthreads; t++) {
        struct run_worker_arg *wa = malloc(sizeof(*wa));
        if (wa == NULL) {
            atomic_fetch_sub(&s->live, s->nthreads - t);
            return SDD_ENOMEM;
        }
        *wa = (struct run_worker_arg){s, t};
        if (pthread_create(&s->th[t], NULL, fn, wa) != 0) {
            free(wa);
            /* The threads that did start must still see their input end. */
            atomic_fetch_sub(&s->live, s->nthreads - t);
            return SDD_ENOMEM;
        }
        s->started++;
    }
    return SDD_OK;
}

sdd_err run_stages_start(struct sdd_run *r)
{
    /* Fabric links first: a receiving end waits for its sender to connect. */
    for (size_t i = 0; i < r->n; i++) {
        struct run_stage *s = &r->st[i];
        sdd_err err = s->link == NULL ? SDD_OK
                      : start_threads(s, run_link_sends(s->link) ? run_link_send_thread
                                                                 : run_link_recv_thread);
        if (err != SDD_OK) {
            return err;
        }
    }
    /* Sinks first, then the stages that feed them. */
    static const sdd_stage_type order[] = {SDD_STAGE_WRITER, SDD_STAGE_FEEDBACK,
                                           SDD_STAGE_PROCESS};
    for (size_t k = 0; k < sizeof(order) / sizeof(order[0]); k++) {
        for (size_t i = 0; i < r->n; i++) {
            struct run_stage *s = &r->st[i];
            if (!s->local || s->cfg->type != order[k]) {
                continue;
            }
            bool rich = s->cfg->type == SDD_STAGE_PROCESS &&
                        s->cfg->process.algorithm == SDD_ALGO_RICH;
            void *(*fn)(void *) = order[k] == SDD_STAGE_WRITER     ? run_writer_thread
                                  : order[k] == SDD_STAGE_FEEDBACK ? run_feedback_thread
                                  : rich                           ? run_rich_thread
                                                                   : run_process_thread;
            /* One source's buffers are one stream: events cut by a buffer boundary are
             * merged whole (sdd_rich_proc_run_stream). */
            sdd_err err = rich && s->direct_fed && s->nproducers == 1
                              ? sdd_rich_carry_create(run_direct_buffer_bytes(), &s->rich_carry)
                              : SDD_OK;
            err = err == SDD_OK ? start_threads(s, fn) : err;
            if (err != SDD_OK) {
                return err;
            }
        }
    }
    return SDD_OK;
}

/* Every item back in its pool once the stages are done, none refused: a check on the
 * hand-over's bookkeeping, logged (the run's result stands). */
static void check_pool(const sdd_pool *pool, const char *what)
{
    if (pool == NULL) {
        return;
    }
    size_t out = sdd_pool_count(pool) - sdd_pool_available(pool);
    uint64_t refused = sdd_pool_bad_puts(pool);
    if (out > 0 || refused > 0) {
        SDD_WARN(LOG, "%zu %s buffers not returned to their pool, %" PRIu64 " returns refused", out,
                 what, refused);
    }
}

void run_stages_close(struct sdd_run *r)
{
    for (size_t i = 0; i < r->n; i++) {
        struct run_stage *s = &r->st[i];
        sdd_rich_carry_destroy(s->rich_carry);
        s->rich_carry = NULL;
        if (s->store != NULL) {
            uint64_t t0 = sdd_now_ns(), c0 = sdd_thread_cpu_ns();
            sdd_err err = sdd_store_close(s->store, &s->store_sum);
            atomic_fetch_add(&s->busy_ns, sdd_now_ns() - t0); /* the last flush is writing too */
            atomic_fetch_add(&s->cpu_ns, sdd_thread_cpu_ns() - c0);
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
    check_pool(r->items, "event");
    check_pool(r->records, "record");
    sdd_pool_destroy(r->items);
    r->items = NULL;
    sdd_pool_destroy(r->records);
    r->records = NULL;
}
