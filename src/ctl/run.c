/* `sddaq run`: set a topology's stages up, drive them through the run-control states, stop
 * them in order (sources first, everything in flight drained, sinks last) and sum up. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "run_internal.h"
#include "sddaq/clock.h"
#include "sddaq/log.h"

#define LOG "run"

#define DRAIN_TIMEOUT_NS 60000000000ull /* stop asked -> every stage drained */

void sdd_run_opts_default(struct sdd_run_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->http = true;
}

void run_fail(struct sdd_run *r, const struct run_stage *s, sdd_err err, const char *why)
{
    pthread_mutex_lock(&r->reason_lock);
    if (atomic_load(&r->failed) == 0) {
        snprintf(r->reason, sizeof(r->reason), "%s: %s (%s)", s ? s->cfg->name : "run", why,
                 sdd_strerror(err));
        atomic_store(&r->failed, (int)err);
        SDD_ERROR(LOG, "%s", r->reason);
        if (r->rc != NULL) {
            sdd_runctl_fail(r->rc, s ? s->cfg->node : NULL, r->reason);
        }
    }
    pthread_mutex_unlock(&r->reason_lock);
    run_wake(r);
}

void run_wake(struct sdd_run *r)
{
    pthread_mutex_lock(&r->wake_lock);
    r->wake_pending = true;
    pthread_cond_signal(&r->wake_cond);
    pthread_mutex_unlock(&r->wake_lock);
}

/* Sleep until run_wake() or the deadline (sdd_now_ns clock). */
static void monitor_sleep(struct sdd_run *r, uint64_t until_ns)
{
    struct timespec ts = {.tv_sec = (time_t)(until_ns / SDD_NS_PER_S),
                          .tv_nsec = (long)(until_ns % SDD_NS_PER_S)};
    pthread_mutex_lock(&r->wake_lock);
    while (!r->wake_pending && sdd_now_ns() < until_ns) {
        pthread_cond_timedwait(&r->wake_cond, &r->wake_lock, &ts);
    }
    r->wake_pending = false;
    pthread_mutex_unlock(&r->wake_lock);
}


static sdd_err pause_run(struct sdd_run *r, bool on);

/* HTTP transitions, on the server's thread. */
static sdd_err on_transition(void *arg, sdd_runctl *rc, sdd_run_state to, const char *reason,
                             char *msg, size_t len)
{
    struct sdd_run *r = arg;
    struct sdd_runctl_status st;
    sdd_runctl_get(rc, &st);
    if (to == SDD_RUN_RUNNING && st.state == SDD_RUN_CONFIGURED) {
        return sdd_runctl_transition_from(rc, st.state, to, reason); /* the monitor starts */
    }
    if ((to == SDD_RUN_PAUSED && st.state == SDD_RUN_RUNNING) ||
        (to == SDD_RUN_RUNNING && st.state == SDD_RUN_PAUSED)) {
        if (!r->coordinator) {
            snprintf(msg, len, "pause and resume go to the coordinator, node %s",
                     r->cfg->run.coordinator);
            return SDD_EBUSY;
        }
        if (r->ndirect > 0) { /* a detector does not wait: nothing could hold its packets */
            snprintf(msg, len, "a run reading NA62 packets straight into a trigger cannot pause");
            return SDD_ENOTSUP;
        }
        bool on = to == SDD_RUN_PAUSED;
        sdd_err err = pause_run(r, on);
        if (err != SDD_OK) {
            snprintf(msg, len, "the readout units did not %s", on ? "hold" : "resume");
            return err;
        }
        return sdd_runctl_transition_from(rc, st.state, to, reason);
    }
    if (to == SDD_RUN_STOPPED && (st.state == SDD_RUN_RUNNING || st.state == SDD_RUN_PAUSED)) {
        atomic_store(&r->http_waiting, 1);
        atomic_store(&r->stop_req, 1);
        run_wake(r);
        /* Answer once the run has drained, with the state it ended in; teardown keeps the
         * server up until this answer is out. */
        for (int i = 0; i < 6000; i++) {
            sdd_runctl_get(rc, &st);
            if (st.state != SDD_RUN_RUNNING && st.state != SDD_RUN_PAUSED) {
                break;
            }
            sdd_sleep_ns(SDD_NS_PER_MS * 10);
        }
        atomic_store(&r->http_waiting, 0);
        snprintf(msg, len, "run stopped: every event in flight was built, decided and written");
        return st.state == SDD_RUN_STOPPED ? SDD_OK : SDD_EIO;
    }
    snprintf(msg, len, "not from %s in sddaq run", sdd_run_state_name(st.state));
    return SDD_EBUSY;
}

static bool evb_all_done(const struct sdd_run *r)
{
    for (uint32_t i = 0; i < r->nevb; i++) {
        if (!r->evb[i].local) {
            continue;
        }
        struct run_stage *s = r->evb[i].ru ? r->evb[i].ru : r->evb[i].bu;
        if (atomic_load(&s->live) != 0) {
            return false;
        }
    }
    return true;
}

/* Sources read straight into a trigger (run_direct.c) that still run. */
static bool direct_all_done(const struct sdd_run *r)
{
    for (size_t i = 0; i < r->n; i++) {
        if (r->st[i].direct != NULL && atomic_load(&r->st[i].live) != 0) {
            return false;
        }
    }
    return true;
}

/* run.events for a udp source read straight into a trigger: the trigger found that many (an
 * emulator sends exactly that many itself and ends the run so). */
static bool direct_enough(const struct sdd_run *r)
{
    uint64_t limit = r->o.events > 0 ? r->o.events : r->cfg->run.events;
    if (r->ndirect == 0 || limit == 0 || run_direct_sent(r) > 0) {
        return false;
    }
    uint64_t found = 0;
    for (size_t i = 0; i < r->n; i++) {
        found += r->st[i].first_decision && r->st[i].direct_fed
                     ? sdd_metric_counter_value(r->st[i].m.events_in)
                     : 0;
    }
    return found >= limit;
}

static bool stages_all_done(const struct sdd_run *r)
{
    for (size_t i = 0; i < r->n; i++) {
        bool here = r->st[i].local || r->st[i].link != NULL; /* a link's end runs here */
        if (here && atomic_load(&r->st[i].live) != 0) {
            return false;
        }
    }
    return true;
}

/* Sources first: hold every RU, agree on the last bulk, let every node finish up to it. */
uint64_t run_hold_local(struct sdd_run *r)
{
    atomic_store(&r->hold_req, 1);
    uint64_t t0 = sdd_now_ns();
    while (atomic_load(&r->evb_held) < r->nevb_local) {
        if (sdd_now_ns() - t0 > 10000000000ull) {
            return UINT64_MAX;
        }
        sdd_sleep_ns(SDD_NS_PER_MS * 1);
    }
    uint64_t k = 0;
    for (uint32_t i = 0; i < r->nevb; i++) {
        uint64_t g = r->evb[i].local ? atomic_load(&r->evb[i].generated_bulks) : 0;
        k = g > k ? g : k;
    }
    return k;
}

void run_hold_at_local(struct sdd_run *r, uint64_t bulks)
{
    atomic_store(&r->hold_at, bulks);
    atomic_store(&r->paused, 1);
    run_wake(r); /* paused time starts now */
}

void run_resume_local(struct sdd_run *r)
{
    atomic_store(&r->paused, 0);
    atomic_store(&r->hold_at, UINT64_MAX);
    atomic_store(&r->hold_req, 0);
    run_wake(r);
}

/* Whole cycles of the event builder's rotated schedule (sdd_evb_node_hold_at). */
static uint64_t whole_cycles(const struct sdd_run *r, uint64_t bulks)
{
    uint64_t nbu = 0;
    for (uint32_t i = 0; i < r->nevb; i++) {
        nbu += r->evb[i].bu != NULL;
    }
    return nbu == 0 ? bulks : (bulks + nbu - 1) / nbu * nbu;
}

/* Pause (every RU of the run stops at one agreed bulk) or resume; coordinator. */
static sdd_err pause_run(struct sdd_run *r, bool on)
{
    pthread_mutex_lock(&r->control_lock);
    sdd_err err = SDD_OK;
    if (!on) {
        run_resume_local(r);
        if (r->multi) {
            err = run_remote_resume(r);
        }
    } else if (atomic_load(&r->phase) < RUN_PHASE_HOLD) {
        uint64_t k = run_hold_local(r), remote = 0;
        if (k == UINT64_MAX) {
            err = SDD_ETIMEDOUT;
        } else if (r->multi) {
            run_remote_hold(r, &remote);
        }
        if (err == SDD_OK) {
            k = whole_cycles(r, remote > k ? remote : k);
            r->pause_point = k;
            run_hold_at_local(r, k);
            if (r->multi) {
                err = run_remote_hold_at(r, k);
            }
        }
    }
    pthread_mutex_unlock(&r->control_lock);
    return err;
}

void run_end_local(struct sdd_run *r, uint64_t bulks)
{
    atomic_store(&r->end_bulks, bulks);
    atomic_store(&r->phase, RUN_PHASE_END);
}

static void stop_sources(struct sdd_run *r)
{
    if (!r->coordinator) {
        if (atomic_load(&r->failed) == SDD_EFENCED) {
            return; /* the others gave this node up and go on, as after a crash (docs/run.md) */
        }
        /* The coordinator ends the run for every node; without it, nobody can agree on an
         * end: stop here at once. */
        sdd_err err = run_remote_stop(r);
        if (err != SDD_OK) {
            run_fail(r, NULL, err, "the coordinator cannot be reached to end the run");
            atomic_store(&r->phase, RUN_PHASE_ABORT);
        }
        return;
    }
    pthread_mutex_lock(&r->control_lock);
    atomic_store(&r->phase, RUN_PHASE_HOLD);
    uint64_t k = run_hold_local(r);
    uint64_t remote = 0;
    if (k == UINT64_MAX) {
        pthread_mutex_unlock(&r->control_lock);
        run_fail(r, NULL, SDD_ETIMEDOUT, "event-builder nodes did not hold within 10 s");
        atomic_store(&r->phase, RUN_PHASE_ABORT);
        return;
    }
    if (r->multi) {
        run_remote_hold(r, &remote); /* nodes that do not answer are marked lost */
    }
    k = remote > k ? remote : k;
    if (atomic_load(&r->paused)) {
        k = k > r->pause_point ? k : r->pause_point; /* the RUs may still be getting there */
    }
    k = k > 0 ? k : 1;
    run_end_local(r, k);
    if (r->multi) {
        run_remote_end(r, k);
    }
    pthread_mutex_unlock(&r->control_lock);
}

static void monitor(struct sdd_run *r)
{
    double duration = r->o.duration_s > 0 ? r->o.duration_s : r->cfg->run.duration_s;
    if (r->o.events > 0 && r->o.duration_s <= 0) {
        duration = 0; /* an event count given on the command line alone ends the run */
    }
    uint64_t next_progress = r->t_start_ns + 1000000000ull;
    bool stopping = false;
    uint64_t stop_ns = 0, paused_ns = 0, last = r->t_start_ns;
    for (;;) {
        /* Stages ending, failures, stops and pauses wake the monitor at once: the run's
         * duration is measured by it. Otherwise it sleeps to its next deadline, at most
         * 20 ms (a Ctrl-C flag is polled), so that it does not take the CPUs from the stages
         * hundreds of times a second; while paused or stopping, 2 ms. */
        uint64_t until = last + SDD_NS_PER_MS * (stopping || atomic_load(&r->paused) ? 2 : 20);
        until = next_progress < until ? next_progress : until;
        if (duration > 0 && !stopping) {
            uint64_t end = r->t_start_ns + paused_ns + (uint64_t)(duration * 1e9);
            until = end < until ? end : until;
        }
        monitor_sleep(r, until);
        uint64_t now = sdd_now_ns();
        double t = (double)(now - r->t_start_ns) * 1e-9;
        if (atomic_load(&r->paused)) {
            paused_ns += now - last; /* run.duration counts running time */
        }
        last = now;
        double running_s = (double)(now - r->t_start_ns - paused_ns) * 1e-9;
        if (now >= next_progress) {
            run_metrics_tick(r);
            if (r->o.progress) {
                run_progress(r, stderr, t, false);
            }
            next_progress += 1000000000ull;
        }
        /* A failure here may leave nothing running here (a builder unit that fenced itself),
         * but the other nodes of a run must still hear of it: the coordinator ends the run
         * for them, another node asks it to (stop_sources). */
        bool failed_here = r->multi && atomic_load(&r->failed) != 0;
        if (stages_all_done(r) && (stopping || !failed_here)) {
            break;
        }
        if (!stopping && atomic_load(&r->phase) == RUN_PHASE_GO) {
            run_remote_watch(r, now); /* a lost coordinator: the next node ends the run */
        }
        /* A failure ends the run the orderly way: sources first, what is in flight drained
         * (a broken writer counts its events as drops); the drain timeout below catches a
         * failure that keeps the run from draining. */
        bool timed_out = r->coordinator && duration > 0 && running_s >= duration;
        bool want = timed_out || (r->o.stop && *r->o.stop) || atomic_load(&r->stop_req) != 0 ||
                    atomic_load(&r->failed) != 0 || direct_enough(r);
        if (want && !stopping && (failed_here || !(evb_all_done(r) && direct_all_done(r)))) {
            stopping = true;
            stop_ns = now;
            stop_sources(r);
            /* Detector streams end with the run: the RUs still need frames up to the end
             * bulk, which are on their way or in the receivers; after that, missing. */
            run_evb_readout_stop(r);
            run_direct_stop(r); /* what came goes on into the trigger */
        }
        if (stopping && now - stop_ns > DRAIN_TIMEOUT_NS &&
            atomic_load(&r->phase) != RUN_PHASE_ABORT) {
            if (atomic_load(&r->failed) == 0) {
                run_fail(r, NULL, SDD_ETIMEDOUT, "the run did not drain within 60 s of its stop");
            }
            atomic_store(&r->phase, RUN_PHASE_ABORT);
        }
    }
    r->t_end_ns = sdd_now_ns();
    run_metrics_tick(r);
    if (r->o.progress) {
        run_progress(r, stderr, (double)(r->t_end_ns - r->t_start_ns) * 1e-9, true);
    }
}

static void join_all(struct sdd_run *r)
{
    run_evb_join(r);
    run_direct_join(r);
    for (size_t i = 0; i < r->n; i++) {
        for (unsigned t = 0; t < r->st[i].started; t++) {
            pthread_join(r->st[i].th[t], NULL);
        }
        r->st[i].started = 0;
    }
}

/* Wait in configured until a client starts the run (or a stop is asked). */
static bool wait_for_start(struct sdd_run *r)
{
    for (;;) {
        struct sdd_runctl_status st;
        sdd_runctl_get(r->rc, &st);
        if (st.state == SDD_RUN_RUNNING) {
            return true;
        }
        if ((r->o.stop && *r->o.stop) || st.state == SDD_RUN_ERROR) {
            return false;
        }
        sdd_sleep_ns(SDD_NS_PER_MS * 20);
    }
}

static void announce(const struct sdd_run *r)
{
    FILE *f = r->o.announce;
    if (f == NULL) {
        return;
    }
    size_t local = 0;
    for (size_t i = 0; i < r->n; i++) {
        local += r->st[i].local;
    }
    fprintf(f, "sddaq run: %s run %" PRIu64 ", %zu stages, %u event-builder nodes", r->cfg->run.name,
            r->run_number, local, r->nevb_local);
    if (r->multi) {
        fprintf(f, " on node %s (%u in the run%s)", r->self->name, r->nevb,
                r->coordinator ? ", coordinator" : "");
    }
    if (r->http != NULL) {
        fprintf(f, ", control http://%s:%u", r->self->host, sdd_http_port(r->http));
    }
    for (size_t i = 0; i < r->n; i++) {
        if (!r->st[i].local) {
            continue;
        }
        if (r->st[i].cfg->type == SDD_STAGE_WRITER || r->st[i].cfg->type == SDD_STAGE_FEEDBACK) {
            fprintf(f, ", %s: %s", r->st[i].cfg->name, r->st[i].detail);
        }
    }
    fprintf(f, "%s\n", r->o.wait_for_start ? " (waiting for start)" : "");
    fflush(f);
}

/* Which node this process is, and whether the topology can run that way. */
static sdd_err pick_node(struct sdd_run *r)
{
    const sdd_config *cfg = r->cfg;
    if (r->o.node == NULL) {
        if (cfg->n_nodes != 1) {
            SDD_ERROR(LOG, "%s: %zu nodes: a multi-node topology runs as one `sddaq node --name "
                           "N` per node (docs/run.md)", cfg->file, cfg->n_nodes);
            return SDD_ENOTSUP;
        }
        r->self = &cfg->nodes[0];
    } else {
        long k = sdd_config_find_node(cfg, r->o.node);
        if (k < 0) {
            SDD_ERROR(LOG, "%s: no node named '%s'", cfg->file, r->o.node);
            return SDD_EINVAL;
        }
        r->self = &cfg->nodes[k];
    }
    r->multi = cfg->n_nodes > 1;
    r->coordinator = !r->multi || strcmp(cfg->run.coordinator, r->self->name) == 0;
    for (size_t i = 0; r->multi && i < cfg->n_nodes; i++) {
        if (cfg->nodes[i].control_port == 0) {
            SDD_ERROR(LOG, "%s: node %s: a multi-node run needs a fixed control_port on every "
                           "node (the coordinator ends the run through it)", cfg->file,
                      cfg->nodes[i].name);
            return SDD_EINVAL;
        }
    }
    for (size_t i = 0; i < cfg->n_links; i++) {
        const struct sdd_cfg_stage *a = &cfg->stages[sdd_config_find_stage(cfg, cfg->links[i].from)];
        const struct sdd_cfg_stage *b = &cfg->stages[sdd_config_find_stage(cfg, cfg->links[i].to)];
        if (run_link_crosses(cfg, &cfg->links[i]) && !run_link_allowed(a, b)) {
            SDD_ERROR(LOG, "%s -> %s: links between nodes go from an ru to a bu, or from a bu or "
                           "a process stage to a process, writer or feedback stage",
                      a->name, b->name);
            return SDD_ENOTSUP;
        }
    }
    return SDD_OK;
}

static sdd_err setup(struct sdd_run *r)
{
    const sdd_config *cfg = r->cfg;
    sdd_err err = pick_node(r);
    if (err != SDD_OK) {
        return err;
    }
    r->n = cfg->n_stages;
    r->st = calloc(r->n, sizeof(*r->st));
    if (r->st == NULL) {
        return SDD_ENOMEM;
    }
    for (size_t i = 0; i < r->n; i++) {
        r->st[i].run = r;
        r->st[i].cfg = &cfg->stages[i];
        r->st[i].idx = i;
        r->st[i].local = strcmp(cfg->stages[i].node, r->self->name) == 0;
    }
    err = sdd_runctl_create(&r->rc);
    if (err == SDD_OK) {
        err = sdd_metrics_create(&r->metrics);
    }
    if (err == SDD_OK) {
        err = run_metrics_setup(r);
    }
    if (err == SDD_OK) {
        err = run_direct_setup(r);
    }
    if (err == SDD_OK) {
        err = run_evb_setup(r);
    }
    if (err == SDD_OK) {
        err = run_stages_setup(r);
    }
    if (err == SDD_OK && r->o.http) {
        const struct sdd_cfg_node *nd = r->self;
        struct sdd_http_opts ho = {.host = nd->host, .port = (uint16_t)nd->control_port,
                                   .metrics = r->metrics, .runctl = r->rc,
                                   .on_transition = on_transition, .on_run = run_http, .arg = r};
        err = sdd_http_start(&ho, &r->http);
        if (err != SDD_OK) {
            SDD_ERROR(LOG, "%s: cannot serve the control port %s:%u: %s", nd->name, nd->host,
                      nd->control_port, sdd_strerror(err));
        }
    }
    return err;
}

/* Multi-node runs: every node serves its summary at /api/run/summary; the coordinator adds the
 * others' to its own, the others wait (a minute at most) until it has fetched theirs, or until
 * the coordinator is gone with no node left to take over (no other node answers, or those that
 * do wait too: twice in a row, a second apart). */
static void share_summary(struct sdd_run *r, struct sdd_run_summary *summary)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (f != NULL) {
        sdd_run_summary_print(f, summary, true);
        fclose(f);
    }
    r->summary_json = text;
    atomic_store(&r->finished, 1);
    if (r->coordinator) {
        run_remote_gather(r, summary);
        return;
    }
    uint64_t now = sdd_now_ns(), give_up = now + 60 * SDD_NS_PER_S, look = now + SDD_NS_PER_S;
    unsigned orphaned = 0;
    while (!atomic_load(&r->summary_taken) && r->http != NULL && now < give_up) {
        sdd_sleep_ns(SDD_NS_PER_MS * 10);
        now = sdd_now_ns();
        if (now >= look) {
            orphaned = run_remote_nobody_left(r) ? orphaned + 1 : 0;
            look = sdd_now_ns() + SDD_NS_PER_S;
        }
        if (orphaned == 2) {
            SDD_WARN(LOG, "the coordinator is gone and no other node answers that could take "
                          "over: not waiting for this node's summary to be fetched");
            break;
        }
    }
}

static void teardown(struct sdd_run *r)
{
    for (int i = 0; i < 200 && atomic_load(&r->http_waiting); i++) {
        sdd_sleep_ns(SDD_NS_PER_MS * 10); /* a stop request is being answered */
    }
    sdd_sleep_ns(SDD_NS_PER_MS * (r->http != NULL && atomic_load(&r->stop_req) ? 20 : 0));
    sdd_http_stop(r->http);
    run_stages_close(r);
    for (size_t i = 0; r->links != NULL && i < r->cfg->n_links; i++) {
        run_link_free(r->links[i]);
    }
    free(r->links);
    run_direct_destroy(r);
    run_evb_destroy(r);
    if (r->st != NULL) {
        for (size_t i = 0; i < r->n; i++) {
            sdd_stage_metrics_remove(r->metrics, &r->st[i].m);
        }
    }
    sdd_metrics_destroy(r->metrics);
    sdd_runctl_destroy(r->rc);
    free(r->st);
    free(r->summary_json);
    pthread_mutex_destroy(&r->reason_lock);
    pthread_mutex_destroy(&r->control_lock);
    pthread_cond_destroy(&r->wake_cond);
    pthread_mutex_destroy(&r->wake_lock);
}

/* A config built in code may have skipped sdd_config_validate(); the stages assume its
 * checks (stages that agree, links of the right kind), so refuse one that fails them, with
 * every problem logged, before anything starts. A parsed config passes again at no cost. */
static sdd_err refuse_invalid(const sdd_config *cfg, struct sdd_run_summary *summary)
{
    struct sdd_config_diag d = {0};
    if (sdd_config_validate(cfg, &d) == SDD_OK) {
        sdd_config_diag_fini(&d);
        return SDD_OK;
    }
    for (size_t i = 0; i < d.stored; i++) {
        SDD_ERROR(LOG, "%s", d.errors[i].text);
    }
    snprintf(summary->reason, sizeof(summary->reason), "invalid topology (%zu problem%s): %s",
             d.count, d.count == 1 ? "" : "s", d.stored > 0 ? d.errors[0].text : "see the log");
    summary->status = SDD_EINVAL;
    sdd_config_diag_fini(&d);
    return SDD_EINVAL;
}

sdd_err sdd_run_execute(const sdd_config *cfg, const struct sdd_run_opts *o,
                        struct sdd_run_summary *summary)
{
    memset(summary, 0, sizeof(*summary));
    if (cfg == NULL) {
        snprintf(summary->reason, sizeof(summary->reason), "no topology");
        summary->status = SDD_EINVAL;
        return SDD_EINVAL;
    }
    if (refuse_invalid(cfg, summary) != SDD_OK) {
        return SDD_EINVAL;
    }
    struct sdd_run *r = calloc(1, sizeof(*r));
    if (r == NULL) {
        return SDD_ENOMEM;
    }
    r->cfg = cfg;
    if (o != NULL) {
        r->o = *o;
    } else {
        sdd_run_opts_default(&r->o);
    }
    pthread_mutex_init(&r->reason_lock, NULL);
    pthread_mutex_init(&r->control_lock, NULL);
    pthread_mutex_init(&r->wake_lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* sdd_now_ns's clock */
    pthread_cond_init(&r->wake_cond, &ca);
    pthread_condattr_destroy(&ca);
    atomic_store(&r->hold_at, UINT64_MAX);
    sdd_err err = setup(r);
    if (err == SDD_OK) {
        sdd_runctl_transition(r->rc, SDD_RUN_CONFIGURED, "stages set up");
        announce(r);
        err = run_stages_start(r); /* sinks and processing first: they wait for input */
    }
    if (err == SDD_OK) {
        err = run_evb_start(r);
    }
    bool started = false;
    if (err == SDD_OK) {
        while (atomic_load(&r->evb_ready) < r->nevb_local) {
            sdd_sleep_ns(SDD_NS_PER_MS * 1);
        }
        started = !r->o.wait_for_start || wait_for_start(r);
        if (started) {
            sdd_runctl_transition_from(r->rc, SDD_RUN_CONFIGURED, SDD_RUN_RUNNING, "started");
        }
    }
    if (err != SDD_OK || !started) {
        atomic_store(&r->phase, RUN_PHASE_ABORT);
        for (size_t i = 0; r->st != NULL && i < r->n; i++) {
            bool runs = !r->st[i].local || r->st[i].started > 0 ||
                        (r->st[i].evb != NULL && r->st[i].evb->started);
            if (!runs) { /* never started: its consumers must not wait for it */
                run_stage_finished(&r->st[i]);
            }
        }
    } else {
        r->t_start_ns = sdd_now_ns();
        summary->ran = true;
        atomic_store(&r->phase, RUN_PHASE_GO);
        run_evb_readout_start(r);
        if (run_direct_start(r) != SDD_OK) {
            run_fail(r, NULL, SDD_ENOMEM, "cannot start the readout threads");
        }
        monitor(r);
    }
    run_evb_readout_stop(r);
    run_direct_stop(r);
    join_all(r);
    run_stages_close(r); /* writers close their files: the run's data is complete now */
    if (atomic_load(&r->failed) == 0 && err == SDD_OK && started) {
        struct sdd_runctl_status st;
        sdd_runctl_get(r->rc, &st); /* running, or paused when stopped while paused */
        sdd_runctl_transition_from(r->rc, st.state, SDD_RUN_STOPPED, "run ended");
    }
    if (err == SDD_OK && atomic_load(&r->failed) != 0) {
        err = (sdd_err)atomic_load(&r->failed);
    }
    if (r->st != NULL && summary->ran) {
        run_summarize(r, summary);
    }
    summary->status = err;
    if (err == SDD_OK && !started) {
        snprintf(summary->reason, sizeof(summary->reason), "stopped before it was started");
    } else if (err != SDD_OK) {
        snprintf(summary->reason, sizeof(summary->reason), "%s",
                 r->reason[0] ? r->reason : sdd_strerror(err));
    }
    if (r->multi && summary->ran) {
        share_summary(r, summary);
        err = err == SDD_OK ? summary->status : err; /* another node lost or failed */
    }
    teardown(r);
    free(r);
    return err;
}
