/* What a run tells its user: Prometheus metrics while it runs, a progress line every second and
 * the closing summary with the accounting of every event. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "run_internal.h"
#include "sddaq/clock.h"
#include "sddaq/fabric.h"

static double shm_locks_released(void *arg)
{
    (void)arg;
    return (double)sdd_fabric_shm_locks_released();
}

static double shm_peers_fenced(void *arg)
{
    (void)arg;
    return (double)sdd_fabric_shm_peers_fenced();
}

/* What this process's shm lock watch did (docs/fabric.md): a released lock means a peer died
 * holding one; a fenced peer was killed, stopped while it held one up. */
static sdd_err fabric_metrics_setup(struct sdd_run *r)
{
    struct sdd_label node = {"node", r->self->name};
    sdd_metric *released, *fenced; /* read at each scrape, never set */
    sdd_err err = sdd_metrics_callback(
        r->metrics, SDD_METRIC_COUNTER, "sddaq_fabric_shm_locks_released_total",
        "shm spin locks a dead peer left held, released by this process.", &node, 1,
        shm_locks_released, NULL, &released);
    if (err == SDD_OK) {
        err = sdd_metrics_callback(
            r->metrics, SDD_METRIC_COUNTER, "sddaq_fabric_shm_peers_fenced_total",
            "Stopped peer processes this process killed: they held up an shm lock.", &node, 1,
            shm_peers_fenced, NULL, &fenced);
    }
    return err;
}

sdd_err run_metrics_setup(struct sdd_run *r)
{
    sdd_err err = sdd_runctl_register_metrics(r->rc, r->metrics);
    if (err == SDD_OK) {
        err = fabric_metrics_setup(r);
    }
    for (size_t i = 0; i < r->n && err == SDD_OK; i++) {
        struct run_stage *s = &r->st[i];
        if (!s->local) {
            continue;
        }
        err = sdd_stage_metrics_register(r->metrics, sdd_stage_type_name(s->cfg->type),
                                         s->cfg->name, s->cfg->node, &s->m);
    }
    return err;
}

/* Merged latency of a stage's workers (their last published copies). */
static void stage_latency(struct run_stage *s, sdd_hist *out)
{
    sdd_hist_init(out);
    for (unsigned t = 0; t < s->nthreads && t < RUN_MAX_THREADS; t++) {
        pthread_mutex_lock(&s->lat[t].lock);
        sdd_hist_merge(out, &s->lat[t].shared);
        pthread_mutex_unlock(&s->lat[t].lock);
    }
}

void run_metrics_tick(struct sdd_run *r)
{
    for (size_t i = 0; i < r->n; i++) {
        struct run_stage *s = &r->st[i];
        if (!s->local) {
            continue;
        }
        if (s->in != NULL) {
            sdd_metric_set(s->m.queue_depth, (double)sdd_mpmc_count(s->in));
        }
        if (s->cfg->type == SDD_STAGE_PROCESS || s->cfg->type == SDD_STAGE_WRITER ||
            s->cfg->type == SDD_STAGE_FEEDBACK) {
            sdd_hist h;
            stage_latency(s, &h);
            sdd_metric_publish(s->m.latency, &h);
        }
    }
}

struct totals {
    uint64_t generated, built, complete, incomplete, corrupt, kept, rejected, written, dropped;
    uint64_t uncommitted; /* built by a BU that then fenced, and built again by the survivors */
    uint64_t dropped_bu, dropped_process;
    uint64_t bytes_built;
    uint64_t bu_sent, bu_received; /* built events that left, or came, over fabric links */
    uint64_t link_sent, link_received; /* any events, over every link */
};

/* A fabric link's stand-in (run_link.c): what it carried out of this node (its producer is
 * here) or into it. */
static void add_link(struct sdd_run *r, struct run_stage *s, struct totals *t)
{
    uint64_t moved = atomic_load(&s->link_moved), dropped = atomic_load(&s->link_dropped);
    t->dropped += dropped;
    *(run_link_sends(s->link) ? &t->link_sent : &t->link_received) += moved;
    for (size_t j = 0; j < r->n; j++) {
        struct run_stage *p = &r->st[j];
        for (size_t k = 0; p->local && p->cfg->type == SDD_STAGE_BU && k < p->nout; k++) {
            if (p->out[k] == s) { /* a builder unit here feeds another node */
                t->bu_sent += moved; /* decided on the other node */
                t->dropped_bu += dropped;
            }
        }
    }
    if (!s->local && s->cfg->type == SDD_STAGE_BU && !run_link_sends(s->link)) {
        t->bu_received += moved; /* built events from a builder unit of another node */
    }
}

static void add_totals(struct sdd_run *r, struct totals *t)
{
    memset(t, 0, sizeof(*t));
    for (size_t i = 0; i < r->n; i++) {
        struct run_stage *s = &r->st[i];
        if (s->link != NULL) {
            add_link(r, s, t);
        }
        if (!s->local) {
            continue;
        }
        switch (s->cfg->type) {
        case SDD_STAGE_RU: {
            uint64_t g = atomic_load(&s->generated);
            t->generated = g > t->generated ? g : t->generated; /* every RU makes every event */
            break;
        }
        case SDD_STAGE_BU:
            t->built += atomic_load(&s->built);
            t->complete += atomic_load(&s->complete);
            t->incomplete += atomic_load(&s->incomplete);
            t->corrupt += atomic_load(&s->corrupt);
            t->bytes_built += atomic_load(&s->bytes_built);
            t->uncommitted += atomic_load(&s->uncommitted);
            break;
        case SDD_STAGE_PROCESS:
            if (s->first_decision && s->direct_fed) { /* a trigger finding the events */
                t->built += sdd_metric_counter_value(s->m.events_in);
            }
            if (s->first_decision) { /* later stages decide again on what these kept */
                t->kept += atomic_load(&s->kept);
                t->rejected += atomic_load(&s->rejected);
            }
            break;
        case SDD_STAGE_WRITER:
            t->written += sdd_metric_counter_value(s->m.events_out);
            break;
        default:
            break;
        }
        uint64_t d = sdd_metric_counter_value(s->m.dropped);
        /* A readout source's drops are frames its events miss: those events are built,
         * flagged incomplete, not dropped. */
        t->dropped += s->cfg->type == SDD_STAGE_SOURCE ? 0 : d;
        t->dropped_bu += s->cfg->type == SDD_STAGE_BU ? d : 0;
        t->dropped_process += s->first_decision ? d : 0;
    }
}

static const char *si(double v, char *buf, size_t len)
{
    const char *unit = "";
    if (v >= 1e9) {
        v /= 1e9, unit = "G";
    } else if (v >= 1e6) {
        v /= 1e6, unit = "M";
    } else if (v >= 1e3) {
        v /= 1e3, unit = "k";
    }
    snprintf(buf, len, "%.*f%s", v < 10 && unit[0] ? 2 : (unit[0] ? 1 : 0), v, unit);
    return buf;
}

void run_progress(struct sdd_run *r, FILE *f, double t, bool last)
{
    struct totals tt;
    add_totals(r, &tt);
    /* The rate since the previous line; the last line gives the run's average. */
    double since = last ? 0 : r->prog_t;
    uint64_t from = last ? 0 : r->prog_built;
    double rate = t > since ? (double)(tt.built - from) / (t - since) : 0;
    r->prog_built = tt.built;
    r->prog_t = t;
    char built[32], per_s[32], kept[32], written[32];
    /* On a terminal one line is redrawn; in a log each second gets its own line. */
    bool tty = isatty(fileno(f));
    fprintf(f, "%s[%6.1f s]%s built %s (%s/s)  incomplete %" PRIu64 "  kept %s  written %s  "
               "drops %" PRIu64,
            tty ? "\r" : "", t, atomic_load(&r->paused) ? " PAUSED" : "",
            si((double)tt.built, built, sizeof(built)), si(rate, per_s, sizeof(per_s)),
            tt.incomplete, si((double)tt.kept, kept, sizeof(kept)),
            si((double)tt.written, written, sizeof(written)), tt.dropped);
    for (size_t i = 0; i < r->n; i++) {
        struct run_stage *s = &r->st[i];
        if (!s->local || (s->cfg->type != SDD_STAGE_PROCESS && s->cfg->type != SDD_STAGE_WRITER)) {
            continue;
        }
        sdd_hist h;
        stage_latency(s, &h);
        if (sdd_hist_count(&h) > 0) {
            fprintf(f, "  %s p99 %.0f us", s->cfg->name, (double)sdd_hist_quantile(&h, 0.99) / 1e3);
        }
    }
    fprintf(f, tty && !last ? "   " : "\n");
    fflush(f);
}

void run_summarize(struct sdd_run *r, struct sdd_run_summary *out)
{
    struct totals t;
    add_totals(r, &t);
    out->seconds = r->t_end_ns > r->t_start_ns ? (double)(r->t_end_ns - r->t_start_ns) * 1e-9 : 0;
    out->run_number = r->run_number;
    out->generated = r->ndirect > 0 ? run_direct_sent(r) : t.generated;
    out->built = t.built;
    out->uncommitted = t.uncommitted;
    out->complete = r->ndirect > 0 ? t.built : t.complete;
    out->found = r->ndirect > 0;
    out->incomplete = t.incomplete;
    out->corrupt = t.corrupt;
    out->kept = t.kept;
    out->rejected = t.rejected;
    out->written = t.written;
    out->dropped = t.dropped;
    out->bytes_built = t.bytes_built;
    out->link_sent = t.link_sent;
    out->link_received = t.link_received;
    out->stages = calloc(r->n, sizeof(*out->stages));
    if (out->stages == NULL) {
        return;
    }
    bool writers_whole = true, has_process = false;
    for (size_t i = 0; i < r->n; i++) {
        struct run_stage *s = &r->st[i];
        if (!s->local) {
            continue;
        }
        struct sdd_run_stage_summary *ss = &out->stages[out->nstages++];
        snprintf(ss->name, sizeof(ss->name), "%s", s->cfg->name);
        ss->type = s->cfg->type;
        ss->events_in = sdd_metric_counter_value(s->m.events_in);
        ss->events_out = sdd_metric_counter_value(s->m.events_out);
        ss->bytes_in = sdd_metric_counter_value(s->m.bytes_in);
        ss->bytes_out = sdd_metric_counter_value(s->m.bytes_out);
        ss->dropped = sdd_metric_counter_value(s->m.dropped);
        ss->errors = sdd_metric_counter_value(s->m.errors);
        sdd_hist h;
        stage_latency(s, &h);
        ss->lat_count = sdd_hist_count(&h);
        ss->lat_p50_ns = ss->lat_count ? sdd_hist_quantile(&h, 0.5) : 0;
        ss->lat_p99_ns = ss->lat_count ? sdd_hist_quantile(&h, 0.99) : 0;
        snprintf(ss->detail, sizeof(ss->detail), "%s", s->detail);
        ss->busy_ns = atomic_load(&s->busy_ns);
        ss->cpu_ns = atomic_load(&s->cpu_ns);
        has_process |= s->first_decision;
        if (s->cfg->type == SDD_STAGE_WRITER) {
            /* A writer gets every event its upstream stages passed on. */
            uint64_t expected = 0;
            for (size_t j = 0; j < r->n; j++) {
                for (size_t k = 0; k < r->st[j].nout; k++) {
                    if (r->st[j].out[k] == s) { /* a stage here, or a link into this node */
                        expected += r->st[j].local
                                        ? sdd_metric_counter_value(r->st[j].m.events_out)
                                        : atomic_load(&r->st[j].link_moved);
                    }
                }
            }
            writers_whole &= ss->events_out + ss->dropped == expected;
        }
    }
    /* Every generated event is built once; every built event handed on (not dropped by its
     * BU) is decided, or dropped, by the process stages; every writer wrote or counted as
     * dropped each event passed to it. */
    uint64_t handed = t.built - t.dropped_bu - t.bu_sent + t.bu_received;
    uint64_t decided = has_process ? t.kept + t.rejected + t.dropped_process : handed;
    out->nodes = 1;
    out->node_ok = decided == handed && writers_whole;
    /* A node of a multi-node run sees only its part; the coordinator adds the others' later. */
    /* Read straight into a trigger, events are found, not built: a physical event whose
     * boards' packets straddle two receive buffers is found once in each (docs/run.md). */
    out->accounted = r->multi || r->ndirect > 0 ? out->node_ok
                                                : out->node_ok && t.generated > 0 &&
                                                      t.generated == t.built - t.uncommitted;
}

void sdd_run_summary_fini(struct sdd_run_summary *s)
{
    free(s->stages);
    s->stages = NULL;
    s->nstages = 0;
}

/* A stage's p50 and p99 age in microseconds, or `none` for both when it timed no event. */
static void format_ages(const struct sdd_run_stage_summary *g, const char *none, char p50[24],
                        char p99[24])
{
    if (g->lat_count == 0) {
        snprintf(p50, 24, "%s", none);
        snprintf(p99, 24, "%s", none);
        return;
    }
    snprintf(p50, 24, "%.1f", (double)g->lat_p50_ns / 1e3);
    snprintf(p99, 24, "%.1f", (double)g->lat_p99_ns / 1e3);
}

static void print_json(FILE *f, const struct sdd_run_summary *s)
{
    fprintf(f,
            "{\"status\":\"%s\",\"reason\":\"%s\",\"seconds\":%.3f,\"run_number\":%" PRIu64
            ",\"generated\":%" PRIu64 ",\"built\":%" PRIu64 ",\"uncommitted\":%" PRIu64
            ",\"complete\":%" PRIu64 ",\"incomplete\":%" PRIu64 ",\"corrupt\":%" PRIu64
            ",\"kept\":%" PRIu64 ",\"rejected\":%" PRIu64 ",\"written\":%" PRIu64
            ",\"dropped\":%" PRIu64 ",\"bytes_built\":%" PRIu64 ",\"link_sent\":%" PRIu64
            ",\"link_received\":%" PRIu64 ",\"events_per_s\":%.1f,\"nodes\":%u,\"node_ok\":%s,"
            "\"accounted\":%s,\"found\":%s,\"stages\":[",
            sdd_errname(s->status), s->reason, s->seconds, s->run_number, s->generated, s->built,
            s->uncommitted, s->complete, s->incomplete, s->corrupt, s->kept, s->rejected,
            s->written, s->dropped, s->bytes_built, s->link_sent, s->link_received,
            s->seconds > 0 ? (double)s->built / s->seconds : 0.0, s->nodes,
            s->node_ok ? "true" : "false", s->accounted ? "true" : "false",
            s->found ? "true" : "false");
    for (size_t i = 0; i < s->nstages; i++) {
        const struct sdd_run_stage_summary *g = &s->stages[i];
        /* A stage that timed no event (inline stages, sources) has no age: null, not 0. */
        char p50[24], p99[24], cpu[24] = "null"; /* null: a stage without threads */
        format_ages(g, "null", p50, p99);
        if (g->cpu_ns > 0) {
            snprintf(cpu, sizeof(cpu), "%.6f", (double)g->cpu_ns * 1e-9);
        }
        fprintf(f,
                "%s{\"name\":\"%s\",\"type\":\"%s\",\"events_in\":%" PRIu64
                ",\"events_out\":%" PRIu64 ",\"bytes_in\":%" PRIu64 ",\"bytes_out\":%" PRIu64
                ",\"dropped\":%" PRIu64 ",\"errors\":%" PRIu64 ",\"latency_p50_us\":%s,"
                "\"latency_p99_us\":%s,\"busy_s\":%.6f,\"cpu_s\":%s,\"detail\":\"%s\"}",
                i ? "," : "", g->name, sdd_stage_type_name(g->type), g->events_in, g->events_out,
                g->bytes_in, g->bytes_out, g->dropped, g->errors, p50, p99,
                (double)g->busy_ns * 1e-9, cpu, g->detail);
    }
    fprintf(f, "]}\n");
}

void sdd_run_summary_print(FILE *f, const struct sdd_run_summary *s, bool json)
{
    if (json) {
        print_json(f, s);
        return;
    }
    double sec = s->seconds > 0 ? s->seconds : 1;
    fprintf(f, "run %" PRIu64 ": %s after %.2f s%s%s\n", s->run_number,
            s->status == SDD_OK ? "ended" : "FAILED", s->seconds, s->reason[0] ? ": " : "",
            s->reason);
    if (s->nodes > 1) {
        fprintf(f, "  (totals of all %u nodes; the stage table is this node's)\n", s->nodes);
    }
    if (s->found) {
        fprintf(f, "  events   %" PRIu64 " generated, %" PRIu64 " found by the trigger's event "
                   "finder (no event builder), %.0f events/s\n",
                s->generated, s->built, (double)s->built / sec);
    } else {
        fprintf(f, "  events   %" PRIu64 " generated, %" PRIu64 " built (%" PRIu64 " complete, %" PRIu64
                   " incomplete, %" PRIu64 " corrupt), %.0f events/s, %.3f Gb/s built\n",
                s->generated, s->built, s->complete, s->incomplete, s->corrupt,
                (double)s->built / sec, (double)s->bytes_built * 8 / sec / 1e9);
    }
    fprintf(f, "  trigger  %" PRIu64 " kept, %" PRIu64 " rejected; %" PRIu64
               " written; %" PRIu64 " dropped\n",
            s->kept, s->rejected, s->written, s->dropped);
    if (s->link_sent > 0 || s->link_received > 0) {
        fprintf(f, "  links    %" PRIu64 " events sent to other nodes, %" PRIu64 " received\n",
                s->link_sent, s->link_received);
    }
    fprintf(f, "  %-12s %-9s %12s %12s %10s %8s %8s %11s %11s  %s\n", "stage", "type", "in",
            "out", "MB out", "dropped", "errors", "p50 age us", "p99 age us", "output");
    for (size_t i = 0; i < s->nstages; i++) {
        const struct sdd_run_stage_summary *g = &s->stages[i];
        char p50[24], p99[24];
        format_ages(g, "-", p50, p99);
        fprintf(f,
                "  %-12s %-9s %12" PRIu64 " %12" PRIu64 " %10.1f %8" PRIu64 " %8" PRIu64
                " %11s %11s  %s\n",
                g->name, sdd_stage_type_name(g->type), g->events_in, g->events_out,
                (double)g->bytes_out / 1e6, g->dropped, g->errors, p50, p99, g->detail);
    }
    char again[80] = "";
    if (s->uncommitted > 0) {
        snprintf(again, sizeof(again), " (and %" PRIu64 " again: a builder fenced)",
                 s->uncommitted);
    }
    fprintf(f,
            "  accounting: %" PRIu64 " generated, %" PRIu64 " %s%s, %" PRIu64 " decided (%" PRIu64
            " kept), %" PRIu64 " written, %" PRIu64 " counted drops: %s\n",
            s->generated, s->built - s->uncommitted, s->found ? "found" : "built once", again,
            s->kept + s->rejected, s->kept, s->written, s->dropped,
            s->accounted ? "every event accounted for" : "MISMATCH");
    if (s->found) {
        /* The events of packets that never reached the event finder are in no count above. */
        uint64_t lost = 0, refused = 0;
        for (size_t i = 0; i < s->nstages; i++) {
            if (s->stages[i].type == SDD_STAGE_SOURCE) {
                lost += s->stages[i].dropped;
                refused += s->stages[i].errors;
            }
        }
        if (lost > 0) {
            fprintf(f,
                    "  readout: %" PRIu64 " packets lost at the sources (%" PRIu64
                    " datagrams refused as corrupt): their events never reached the event "
                    "finder\n",
                    lost, refused);
        }
    }
}
