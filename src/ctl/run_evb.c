/* The event-builder stages of a run. ru k and bu k (in the order of the topology) form
 * event-builder node k (sddaq/evb.h), as in LSEB where every node is a readout unit and a
 * builder unit; extra ru or bu stages make nodes of one role. Each node has one thread; all
 * of them live in this process and are joined by the fabric as they would be across hosts.
 * A BU's built events become pooled items for the next stage. */
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "run_internal.h"
#include "sddaq/clock.h"
#include "sddaq/cpu.h"
#include "sddaq/log.h"

_Static_assert(SDD_CFG_EVB_CREDITS_MAX == SDD_EVB_MAX_CREDITS, "one credit limit");

#define LOG "run"

/* Run length of a run that ends by time or by hand: far beyond any real run, small enough that
 * each BU's bitmap of built bulks (one bit per bulk) stays at most 32 MiB of lazily mapped
 * zeroes. */
static uint64_t open_ended_events(uint32_t bulk)
{
    uint64_t by_bitmap = (uint64_t)bulk << 28;
    return by_bitmap < (1ull << 34) ? by_bitmap : 1ull << 34;
}

static bool linked(const sdd_config *cfg, const char *from, const char *to)
{
    for (size_t i = 0; i < cfg->n_links; i++) {
        if (strcmp(cfg->links[i].from, from) == 0 && strcmp(cfg->links[i].to, to) == 0) {
            return true;
        }
    }
    return false;
}

/* The one source stage linked into ru, or NULL (logged). */
static const struct sdd_cfg_stage *source_of(const sdd_config *cfg, const struct sdd_cfg_stage *ru)
{
    const struct sdd_cfg_stage *src = NULL;
    for (size_t i = 0; i < cfg->n_links; i++) {
        if (strcmp(cfg->links[i].to, ru->name) != 0) {
            continue;
        }
        long s = sdd_config_find_stage(cfg, cfg->links[i].from);
        if (s < 0 || cfg->stages[s].type != SDD_STAGE_SOURCE || src != NULL) {
            SDD_ERROR(LOG, "%s: an ru takes exactly one source (an ru is one event-builder source)",
                      ru->name);
            return NULL;
        }
        src = &cfg->stages[s];
    }
    if (src == NULL) {
        SDD_ERROR(LOG, "%s: no source linked to this ru", ru->name);
    }
    return src;
}

static bool same_fragments(const struct sdd_cfg_source *a, const struct sdd_cfg_source *b)
{
    if (run_readout_kind(a->kind) && run_readout_kind(b->kind)) {
        /* Readout sources may differ in kind (an emulator beside a real stream) and rate,
         * not in frame size: every RU's slots are sized alike. */
        return run_readout_frame_bytes(a) == run_readout_frame_bytes(b);
    }
    return a->kind == b->kind && a->rate == b->rate && a->fragment.dist == b->fragment.dist &&
           a->fragment.size == b->fragment.size && a->fragment.min == b->fragment.min &&
           a->fragment.max == b->fragment.max && a->fragment.sigma == b->fragment.sigma;
}

static sdd_err check_shape(struct sdd_run *r, struct run_stage **rus, uint32_t nru,
                          struct run_stage **bus, uint32_t nbu)
{
    const sdd_config *cfg = r->cfg;
    if (nru == 0 || nbu == 0) {
        const char *first = "";
        for (size_t i = 0; i < cfg->n_stages && first[0] == '\0'; i++) {
            if (cfg->stages[i].type == SDD_STAGE_SOURCE) {
                first = cfg->stages[i].name;
            }
        }
        SDD_ERROR(LOG, "%s: `sddaq run` takes sources into an event builder (ru and bu "
                       "stages) for now; this topology has %s", first,
                  nru == 0 && nbu == 0 ? "neither" : nru == 0 ? "no ru" : "no bu");
        return SDD_ENOTSUP;
    }
    /* That every ru and bu agree on their options was checked with the rest of the config
     * (sdd_run_execute validates it first). */
    const struct sdd_cfg_stage *first_src = NULL;
    for (uint32_t i = 0; i < nru; i++) {
        const struct sdd_cfg_stage *a = rus[i]->cfg;
        for (uint32_t j = 0; j < nbu; j++) {
            const struct sdd_cfg_stage *b = bus[j]->cfg;
            if (!linked(cfg, a->name, b->name)) {
                SDD_ERROR(LOG, "%s: every ru sends to every bu (event building, LSEB model); "
                               "link %s -> %s is missing", a->name, a->name, b->name);
                return SDD_ENOTSUP;
            }
        }
        const struct sdd_cfg_stage *src = source_of(cfg, a);
        if (src == NULL) {
            return SDD_ENOTSUP;
        }
        if (run_direct_source(src)) {
            SDD_ERROR(LOG, "%s: NA62 packets are not fragments of one event: they go straight "
                           "into a trigger (process rich), not into an ru", src->name);
            return SDD_ENOTSUP;
        }
        if (src->source.streams != 1) {
            SDD_ERROR(LOG, "%s: streams must be 1 for a source feeding an ru (the ru is one "
                           "event-builder source; add ru stages for more)", src->name);
            return SDD_EINVAL;
        }
        if (first_src != NULL && !same_fragments(&src->source, &first_src->source)) {
            SDD_ERROR(LOG, "%s: the sources of one event builder must agree on kind, rate and "
                           "fragment sizes, or be readout sources with frames of one size (as "
                           "%s)", src->name, first_src->name);
            return SDD_EINVAL;
        }
        first_src = src;
    }
    return SDD_OK;
}

/* Per node thread: the build time of the current bulk's events (one clock read per bulk). */
static __thread uint64_t tls_bulk_ns;

static void on_event(const struct sdd_evb_event *ev, void *arg)
{
    struct run_evb_node *e = arg;
    struct run_stage *s = e->bu;
    if (tls_bulk_ns == 0) {
        tls_bulk_ns = sdd_now_ns();
    }
    /* A view of the builder's event: inline stages read it in place; a stage with threads of
     * its own gets a pooled copy (run_emit). */
    struct run_item v = {.flags = ev->flags,
                         .id = ev->event_id,
                         .built_ns = tls_bulk_ns,
                         .bytes = ev->bytes, /* fragment bytes: no need to walk them here */
                         .kept = 1,
                         .pooled = false,
                         .delivery = ev->delivery,
                         .commit = &e->commit,
                         .ev = ev};
    struct run_counts *c = run_counts(s);
    c->events_out++;
    c->bytes_out += v.bytes;
    run_emit(s, &v, true);
    if (ev->event_id + 1 == e->test_stall_at && !(ev->flags & SDD_EVB_EV_RESENT)) {
        e->test_stall_at = 0;
        raise(SIGSTOP); /* the test hook below: a stall inside this delivery */
    }
    if (ev->batch_end) {
        tls_bulk_ns = 0; /* the counts go out from the node loop (node_thread) */
    }
}

/* The node's ru stage, or its bu stage when it has no RU: its name, its config node. */
static struct run_stage *either_stage(const struct run_evb_node *e)
{
    return e->ru != NULL ? e->ru : e->bu;
}

/* Before each delivery: the buffers its events will take, taken now. Without them the
 * delivery waits for a later poll turn, whose end commits what the writers behind hold. */
static bool bu_has_room(uint32_t events, void *arg)
{
    struct run_evb_node *e = arg;
    return e->stash.cap == 0 || run_stash_fill(e->run, &e->stash, events * e->bufs_per_event);
}

/* The BU's stash: a bulk's worth of buffers for each place its events are copied, if the pool
 * can spare that twice over (else the BU takes buffers as it goes and may wait for them). */
static sdd_err bu_stash_init(struct run_evb_node *e)
{
    if (e->bu == NULL) {
        return SDD_OK;
    }
    struct sdd_run *r = e->run;
    e->bufs_per_event = run_bufs_per_event(e->bu);
    uint64_t cap = (uint64_t)e->bufs_per_event * r->evb_opts.bulk;
    if (cap > 0 && 2 * cap > sdd_pool_count(r->items)) {
        SDD_WARN(LOG,
                 "%s: %zu event buffers are too few to set a bulk's %llu aside; a "
                 "delivery may wait for a buffer a writer holds until the commit",
                 e->bu->cfg->name, sdd_pool_count(r->items), (unsigned long long)cap);
        cap = 0;
    }
    return run_stash_init(&e->stash, (uint32_t)cap);
}

/* Move what the node counted since the last call into its stages' counters. */
static void publish_evb(struct run_evb_node *e)
{
    if (e->readout != NULL) {
        struct run_readout_counts c;
        run_readout_counts(e->readout, &c);
        struct run_stage *src = e->source;
        sdd_metric_add(src->m.events_out, c.frames - e->rd_last.frames);
        sdd_metric_add(src->m.bytes_in, c.bytes - e->rd_last.bytes);
        sdd_metric_add(src->m.dropped, c.missing - e->rd_last.missing);
        sdd_metric_add(src->m.errors, c.corrupt - e->rd_last.corrupt);
        e->rd_last = c;
    }
    struct sdd_evb_stats now;
    sdd_evb_node_stats(e->n, &now);
    struct sdd_evb_stats *was = &e->last;
    if (e->ru != NULL && e->readout == NULL && e->source != NULL) {
        /* An emulated source is generated inside its RU: what the RU generated, it gave. */
        sdd_metric_add(e->source->m.events_out, now.events_generated - was->events_generated);
    }
    if (e->ru != NULL) {
        struct run_stage *s = e->ru; /* one fragment in per event it generated, one out */
        sdd_metric_add(s->m.events_in, now.events_generated - was->events_generated);
        sdd_metric_add(s->m.events_out, now.events_generated - was->events_generated);
        sdd_metric_add(s->m.bytes_out, now.bytes_sent - was->bytes_sent);
        atomic_store(&s->generated, now.events_generated);
    }
    if (e->bu != NULL) {
        struct run_stage *s = e->bu;
        sdd_metric_add(s->m.events_in, now.events_built - was->events_built);
        sdd_metric_add(s->m.bytes_in, now.bytes_built - was->bytes_built);
        sdd_metric_add(s->m.errors, now.frags_corrupt - was->frags_corrupt);
        atomic_store(&s->built, now.events_built);
        atomic_store(&s->complete, now.events_complete);
        atomic_store(&s->incomplete, now.events_incomplete);
        atomic_store(&s->corrupt, now.events_corrupt);
        atomic_store(&s->bytes_built, now.bytes_built);
        atomic_store(&s->uncommitted, now.events_uncommitted);
    }
    run_evb_metrics_update(e, &now, was);
    *was = now;
}

static void node_finished(struct run_evb_node *e)
{
    if (!e->held) {
        e->held = true; /* finished or failed: never generates again */
        atomic_store(&e->generated_bulks, sdd_evb_node_generated(e->n));
        atomic_fetch_add(&e->run->evb_held, 1);
    }
    if (e->ru != NULL) {
        atomic_store(&e->ru->live, 0);
    }
    if (e->bu != NULL) {
        atomic_store(&e->bu->live, 0);
        run_stage_finished(e->bu);
    }
    run_wake(e->run);
}

/* The BU's commit mark, for the writers and links behind it (run_gate.c). */
static void publish_commit(struct run_evb_node *e)
{
    if (e->bu == NULL) {
        return;
    }
    uint64_t mark = sdd_evb_node_committed(e->n);
    if (mark != atomic_load_explicit(&e->commit.mark, memory_order_relaxed)) {
        atomic_store_explicit(&e->commit.mark, mark, memory_order_release);
    }
}

/* The node thread may run on the CPUs of its ru stage's cores (else its bu stage's). */
static sdd_err pin_node(const struct run_stage *s)
{
    if (s->cfg->cores[0] == '\0') {
        return SDD_OK;
    }
    int cpus[SDD_CFG_CPU_LIMIT + 1];
    int n = sdd_cpu_parse_list(s->cfg->cores, cpus, SDD_CFG_CPU_LIMIT + 1);
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int i = 0; i < n; i++) {
        CPU_SET(cpus[i], &set);
    }
    if (n <= 0 || pthread_setaffinity_np(pthread_self(), sizeof(set), &set) != 0) {
        SDD_ERROR(LOG, "%s: cannot run on CPUs %s", s->cfg->name, s->cfg->cores);
        return SDD_EINVAL;
    }
    return SDD_OK;
}

static void *node_thread(void *arg)
{
    struct run_evb_node *e = arg;
    struct sdd_run *r = e->run;
    struct run_stage *s = e->ru != NULL && e->ru->cfg->cores[0] ? e->ru
                          : e->bu != NULL                      ? e->bu
                                                               : e->ru; /* its CPUs, its name */
    const char *hosts[SDD_EVB_MAX_NODES];
    uint16_t ports[SDD_EVB_MAX_NODES];
    for (uint32_t i = 0; i < r->nevb; i++) {
        hosts[i] = r->evb[i].host;
        ports[i] = r->evb[i].port;
    }
    const char *step = "could not run on its cores";
    sdd_err rc = pin_node(s);
    if (rc == SDD_OK) {
        step = "no memory for its counters";
        rc = run_counts_attach(r);
    }
    if (rc == SDD_OK) {
        step = "no memory for its event buffers";
        rc = bu_stash_init(e);
    }
    if (rc == SDD_OK) {
        step = "could not connect the event builder";
        rc = sdd_evb_node_connect(e->n, hosts, ports, 30000);
    }
    atomic_fetch_add(&r->evb_ready, 1);
    if (rc != SDD_OK) {
        run_fail(r, s, rc, step);
    }
    while (rc == SDD_OK && atomic_load(&r->phase) == RUN_PHASE_SETUP) {
        sdd_sleep_ns(SDD_NS_PER_MS);
    }
    int phase;
    bool fenced = false;
    while (rc == SDD_OK && (phase = atomic_load(&r->phase)) != RUN_PHASE_ABORT) {
        int p = sdd_evb_node_poll(e->n, 1);
        publish_commit(e);
        if (p < 0) {
            fenced = p == SDD_EFENCED;
            run_fail(r, s, (sdd_err)p, "event builder failed");
            break;
        }
        /* Hold for a stop or a pause; a pause then moves the hold point to where every RU
         * agreed; a resume lets go (docs/run.md, "Ending a run"). */
        bool hreq = atomic_load(&r->hold_req);
        if (hreq && !e->held) {
            sdd_evb_node_hold(e->n);
            atomic_store(&e->generated_bulks, sdd_evb_node_generated(e->n));
            e->held = true;
            e->hold_at_seen = UINT64_MAX;
            atomic_fetch_add(&r->evb_held, 1);
        } else if (!hreq && e->held && phase < RUN_PHASE_END) {
            sdd_evb_node_resume(e->n);
            e->held = false;
            atomic_fetch_sub(&r->evb_held, 1);
        }
        uint64_t ha = atomic_load(&r->hold_at);
        if (e->held && ha != e->hold_at_seen && phase < RUN_PHASE_END) {
            e->hold_at_seen = ha;
            sdd_err err = ha == UINT64_MAX ? SDD_OK : sdd_evb_node_hold_at(e->n, ha);
            if (err != SDD_OK) {
                run_fail(r, s, err, "could not pause the event builder where agreed");
                break;
            }
        }
        if (phase == RUN_PHASE_END && !e->ended) {
            sdd_err err = sdd_evb_node_end(e->n, atomic_load(&r->end_bulks));
            e->ended = true;
            if (err != SDD_OK) {
                run_fail(r, s, err, "could not end the event builder's run");
                break;
            }
        }
        uint64_t now = sdd_now_ns();
        /* Once a millisecond, not per bulk: the two nodes' threads share the inline stages'
         * counters, and a cache line bounced between CPUs per bulk costs building time. */
        if (now >= e->flush_ns) {
            run_counts_flush();
            e->flush_ns = now + SDD_NS_PER_MS;
        }
        if (now >= e->pub_ns) {
            publish_evb(e);
            e->pub_ns = now + 100000000ull;
        }
        if (p == 0) {
            break; /* this node's part of the run is done */
        }
    }
    publish_evb(e);
    publish_commit(e);
    /* Fenced: what it delivered and never committed was built again by the survivors. Any
     * other end: its events go out (a failed run is in error anyway; nothing lost). */
    atomic_store_explicit(&e->commit.state, fenced ? RUN_COMMIT_FENCED : RUN_COMMIT_ENDED,
                          memory_order_release);
    run_counts_detach();
    run_stash_free(r, &e->stash);
    node_finished(e);
    return NULL;
}

/* Position of a source among the hough-emu sources, in stage order (docs/config.md). */
static uint32_t hough_index(const sdd_config *cfg, const struct sdd_cfg_stage *src)
{
    uint32_t k = 0;
    for (size_t i = 0; i < cfg->n_stages && &cfg->stages[i] != src; i++) {
        k += cfg->stages[i].type == SDD_STAGE_SOURCE &&
             cfg->stages[i].source.kind == SDD_SRC_HOUGH_EMU;
    }
    return k;
}

/* `credits: auto` (the default): fabric.credits, fewer where the bulks of the event-builder
 * nodes that share a host would pass the cache (sdd_evb_credits_fit; docs/config.md). From
 * the topology alone, so every node of the run reaches the same. */
static void auto_credits(struct sdd_run *r)
{
    struct sdd_evb_opts *o = &r->evb_opts;
    const char *hosts[SDD_EVB_MAX_NODES];
    for (uint32_t i = 0; i < r->nevb; i++) {
        hosts[i] = r->evb[i].host;
    }
    o->host_nodes = sdd_evb_host_nodes(hosts, r->nevb);
    uint32_t max = r->cfg->fabric.credits;
    max = max < SDD_EVB_MAX_CREDITS ? max : SDD_EVB_MAX_CREDITS;
    o->credits = sdd_evb_credits_fit(o, o->provider, max);
}

/* The evb's options shared by every node, from the stages and the first source. Every node
 * of a multi-node run computes the same (the event builder checks it at connect). */
static sdd_err common_opts(struct sdd_run *r, struct run_stage **rus, uint32_t nru)
{
    const sdd_config *cfg = r->cfg;
    struct sdd_evb_opts *o = &r->evb_opts;
    sdd_evb_opts_default(o);
    o->provider = cfg->fabric.provider == SDD_CFG_PROV_AUTO
                      ? NULL
                      : sdd_cfg_provider_name(cfg->fabric.provider);
    o->nnodes = r->nevb;
    for (uint32_t i = 0; i < r->nevb; i++) {
        o->roles[i] = (uint8_t)((r->evb[i].ru ? SDD_EVB_ROLE_RU : 0) |
                                (r->evb[i].bu ? SDD_EVB_ROLE_BU : 0));
    }
    const struct sdd_cfg_evb *ec = &rus[0]->cfg->evb;
    o->bulk = ec->bulk_size;
    o->credits = ec->credits == SDD_CFG_AUTO ? 0 : ec->credits; /* auto: auto_credits() */
    o->hb_ms = ec->heartbeat_ms;
    o->event_timeout_ms = ec->timeout_ms;
    o->transfer = (sdd_evb_transfer)ec->transfer;
    o->dead_ms = o->hb_ms * 20 > 2000 ? o->hb_ms * 20 : 2000;
    const struct sdd_cfg_stage *src = source_of(cfg, rus[0]->cfg);
    o->rate = src->source.rate;
    /* Every fragment's header is checked, as in `sddaq evb bench`; payloads are the detector's
     * business (stub blocks are checked by the trigger that reads them). */
    o->verify = SDD_EVB_VERIFY_HEADER;
    o->src.seed = src->source.seed;
    r->events = cfg->run.events > 0 ? cfg->run.events : open_ended_events(o->bulk);
    if (r->o.events > 0) {
        r->events = r->o.events;
    }
    o->events = r->events;
    uint32_t max_payload = 1;
    for (uint32_t i = 0; i < nru; i++) {
        rus[i]->evb->source = &r->st[source_of(cfg, rus[i]->cfg) - cfg->stages];
    }
    if (run_readout_kind(src->source.kind)) {
        max_payload = run_readout_frame_bytes(&src->source);
        o->src.dist = SDD_EVB_SIZE_FIXED;
        o->src.mean = max_payload;
        o->rate = 0; /* the detector sets the pace */
        for (uint32_t i = 0; i < nru; i++) {
            struct run_evb_node *e = rus[i]->evb;
            if (!e->local) {
                continue;
            }
            bool limited = cfg->run.events > 0 || r->o.events > 0;
            sdd_err err = run_readout_create(e->source->cfg, i, limited ? r->events : 0,
                                             o->bulk, &e->readout);
            if (err != SDD_OK) {
                return err;
            }
            /* A source that feeds several RUs has a receiver for each: one set of series. */
            const sdd_ro_rx *rx = run_readout_rx(e->readout);
            err = e->source->ro_xm != NULL
                      ? run_ro_metrics_add(e->source->ro_xm, rx)
                      : run_ro_metrics_register(r->metrics, e->source, rx, &e->source->ro_xm);
            if (err != SDD_OK) {
                return err;
            }
            snprintf(e->source->detail, sizeof(e->source->detail), "%s %s",
                     sdd_source_kind_name(e->source->cfg->source.kind),
                     run_readout_where(e->readout));
        }
    } else if (src->source.kind == SDD_SRC_HOUGH_EMU) {
        /* Every RU's slots are sized alike, for the largest stub block of any source, so a
         * node also generates the other nodes' sources once to know theirs. */
        for (uint32_t i = 0; i < nru; i++) {
            const struct sdd_cfg_stage *si = source_of(cfg, rus[i]->cfg);
            struct run_hough_feed *f = NULL;
            sdd_err err = run_hough_feed_create(&si->source, hough_index(cfg, si), nru, 0, &f);
            if (err != SDD_OK) {
                SDD_ERROR(LOG, "%s: cannot create the hough-emu feed: %s", si->name,
                          sdd_strerror(err));
                return err;
            }
            uint32_t m = run_hough_feed_max_payload(f);
            max_payload = m > max_payload ? m : max_payload;
            struct run_evb_node *e = rus[i]->evb;
            if (e->local) {
                e->feed = f;
            } else {
                run_hough_feed_destroy(f);
            }
        }
        o->src.dist = SDD_EVB_SIZE_FIXED;
        o->src.mean = max_payload;
    } else {
        const struct sdd_cfg_fragment *f = &src->source.fragment;
        if (f->size > (1u << 26) || f->max > (1u << 26)) {
            SDD_ERROR(LOG, "%s: fragments over 64 MiB", src->name);
            return SDD_EINVAL;
        }
        o->src.dist = f->dist == SDD_FRAG_FIXED     ? SDD_EVB_SIZE_FIXED
                      : f->dist == SDD_FRAG_UNIFORM ? SDD_EVB_SIZE_UNIFORM
                                                    : SDD_EVB_SIZE_LOGNORMAL;
        o->src.mean = (uint32_t)f->size;
        o->src.min = (uint32_t)f->min;
        o->src.max = (uint32_t)f->max;
        o->src.sigma = f->sigma;
        max_payload = o->src.dist == SDD_EVB_SIZE_FIXED ? o->src.mean
                      : o->src.max != 0                  ? o->src.max
                                                         : 4 * o->src.mean;
    }
    if (o->credits == 0) {
        auto_credits(r);
    }
    size_t frag = (sizeof(struct sdd_evb_frag_hdr) + (size_t)max_payload + SDD_EVB_ALIGN - 1) &
                  ~(size_t)(SDD_EVB_ALIGN - 1);
    r->item_bytes = sizeof(struct sdd_evb_event_hdr) + (nru + 63) / 64 * 8 +
                    nru * (sizeof(struct sdd_evb_event_entry) + frag);
    return SDD_OK;
}

/* Event-builder nodes, the same list on every node of the run: node by node (topology order),
 * that node's i-th ru with its i-th bu, then its extra ones alone. */
static sdd_err list_nodes(struct sdd_run *r, struct run_stage **rus, uint32_t *nru,
                          struct run_stage **bus, uint32_t *nbu)
{
    const sdd_config *cfg = r->cfg;
    for (size_t h = 0; h < cfg->n_nodes; h++) {
        const struct sdd_cfg_node *nd = &cfg->nodes[h];
        struct run_stage *lr[SDD_EVB_MAX_NODES], *lb[SDD_EVB_MAX_NODES];
        uint32_t nlr = 0, nlb = 0;
        for (size_t i = 0; i < r->n; i++) {
            struct run_stage *s = &r->st[i];
            sdd_stage_type t = s->cfg->type;
            if ((t != SDD_STAGE_RU && t != SDD_STAGE_BU) || strcmp(s->cfg->node, nd->name) != 0) {
                continue;
            }
            if ((t == SDD_STAGE_RU ? *nru + nlr : *nbu + nlb) == SDD_EVB_MAX_NODES) {
                SDD_ERROR(LOG, "%s: at most %d ru and %d bu stages", s->cfg->name,
                          SDD_EVB_MAX_NODES, SDD_EVB_MAX_NODES);
                return SDD_ENOTSUP;
            }
            if (t == SDD_STAGE_RU) {
                lr[nlr++] = s;
            } else {
                lb[nlb++] = s;
            }
        }
        for (uint32_t i = 0; i < nlr || i < nlb; i++) {
            if (r->nevb == SDD_EVB_MAX_NODES) {
                SDD_ERROR(LOG, "more than %d event-builder nodes", SDD_EVB_MAX_NODES);
                return SDD_ENOTSUP;
            }
            struct run_evb_node *e = &r->evb[r->nevb];
            e->run = r;
            e->index = r->nevb++;
            e->ru = i < nlr ? lr[i] : NULL;
            e->bu = i < nlb ? lb[i] : NULL;
            e->host = nd->host;
            e->local = nd == r->self;
            e->port = r->multi ? (uint16_t)(cfg->fabric.port + e->index) : 0;
            r->nevb_local += e->local;
            if (e->ru) {
                e->ru->evb = e;
                rus[(*nru)++] = e->ru;
            }
            if (e->bu) {
                e->bu->evb = e;
                bus[(*nbu)++] = e->bu;
            }
        }
    }
    return SDD_OK;
}

sdd_err run_evb_setup(struct sdd_run *r)
{
    struct run_stage *rus[SDD_EVB_MAX_NODES], *bus[SDD_EVB_MAX_NODES];
    uint32_t nru = 0, nbu = 0;
    sdd_err err = list_nodes(r, rus, &nru, bus, &nbu);
    if (err == SDD_OK && nru == 0 && nbu == 0 && r->ndirect > 0) {
        /* Readout straight into a trigger (run_direct.c): no event builder, and no other
         * kind of source beside it. */
        for (size_t i = 0; i < r->n; i++) {
            const struct sdd_cfg_stage *c = r->st[i].cfg;
            if (c->type == SDD_STAGE_SOURCE && !run_direct_source(c)) {
                SDD_ERROR(LOG, "%s: a %s source needs an event builder (ru and bu stages); "
                               "this topology reads NA62 packets straight into a trigger",
                          c->name, sdd_source_kind_name(c->source.kind));
                return SDD_ENOTSUP;
            }
        }
        return SDD_OK;
    }
    if (err == SDD_OK) {
        err = check_shape(r, rus, nru, bus, nbu);
    }
    if (err == SDD_OK && r->multi && r->cfg->fabric.port + r->nevb > 65536) {
        SDD_ERROR(LOG, "fabric.port %u + %u event-builder nodes passes 65535",
                  r->cfg->fabric.port, r->nevb);
        err = SDD_EINVAL;
    }
    if (err == SDD_OK) {
        err = common_opts(r, rus, nru);
    }
    for (uint32_t i = 0; err == SDD_OK && i < r->nevb; i++) {
        struct run_evb_node *e = &r->evb[i];
        if (!e->local) {
            continue;
        }
        struct sdd_evb_opts no = r->evb_opts;
        no.node = i;
        no.host = e->host;
        no.port = e->port;
        if (e->feed != NULL) {
            no.feed = run_hough_feed_bind(e->feed);
        }
        if (e->readout != NULL) {
            no.feed = run_readout_bind(e->readout);
        }
        if (e->bu != NULL) {
            no.on_event = on_event;
            no.on_event_arg = e;
            no.has_room = bu_has_room; /* writers wait for the commit: see the stash */
            /* Test hook (system.run_netns): the BU that first delivers this event id (not the
             * survivor that builds it again) stops its own process there, a stall inside the
             * fencing window (docs/evb.md). */
            const char *stall = getenv("SDDAQ_TEST_STALL_EVENT");
            e->test_stall_at = stall != NULL ? strtoull(stall, NULL, 10) + 1 : 0;
        }
        err = sdd_evb_node_create(&no, &e->n);
        if (err != SDD_OK) {
            SDD_ERROR(LOG, "%s: cannot create the event-builder node on %s:%u: %s",
                      either_stage(e)->cfg->name, e->host, e->port, sdd_strerror(err));
        } else {
            e->port = sdd_evb_node_port(e->n);
            if (e->bu != NULL) { /* what transfer and credits auto chose, for the summary */
                struct sdd_evb_stats st;
                sdd_evb_node_stats(e->n, &st);
                snprintf(e->bu->detail, sizeof(e->bu->detail), "bulks %s, %u credits",
                         st.transfer == SDD_EVB_TRANSFER_READ ? "read from the RUs"
                                                              : "written by the RUs",
                         st.credits);
            }
            err = run_evb_metrics_register(r, e);
        }
    }
    return err;
}

sdd_err run_evb_start(struct sdd_run *r)
{
    for (uint32_t i = 0; i < r->nevb; i++) {
        struct run_evb_node *e = &r->evb[i];
        if (!e->local) {
            continue;
        }
        if (e->ru) {
            atomic_store(&e->ru->live, 1);
        }
        if (e->bu) {
            atomic_store(&e->bu->live, 1);
        }
        if (pthread_create(&e->th, NULL, node_thread, e) != 0) {
            node_finished(e);
            atomic_fetch_add(&r->evb_ready, 1);
            return SDD_ENOMEM;
        }
        e->started = true;
    }
    return SDD_OK;
}

void run_evb_join(struct sdd_run *r)
{
    for (uint32_t i = 0; i < r->nevb; i++) {
        if (r->evb[i].started) {
            pthread_join(r->evb[i].th, NULL);
            r->evb[i].started = false;
        }
    }
}

void run_evb_readout_start(struct sdd_run *r)
{
    for (uint32_t i = 0; i < r->nevb; i++) {
        if (r->evb[i].readout != NULL && run_readout_start(r->evb[i].readout) != SDD_OK) {
            run_fail(r, r->evb[i].source, SDD_ENOMEM, "cannot start the detector emulator");
        }
    }
}

void run_evb_readout_stop(struct sdd_run *r)
{
    bool any = false;
    for (uint32_t i = 0; i < r->nevb; i++) {
        run_readout_stop(r->evb[i].readout);
        any |= r->evb[i].readout != NULL;
    }
    if (!any) {
        return;
    }
    sdd_sleep_ns(RUN_READOUT_GRACE_MS * SDD_NS_PER_MS); /* frames still on their way */
    for (uint32_t i = 0; i < r->nevb; i++) {
        run_readout_close(r->evb[i].readout);
    }
}

int run_evb_gave_up(const struct sdd_run *r, size_t node)
{
    const char *name = r->cfg->nodes[node].name;
    int verdict = -1;
    for (uint32_t i = 0; i < r->nevb; i++) {
        const struct run_evb_node *e = &r->evb[i];
        const struct run_stage *s = either_stage(e);
        if (!e->local || e->n == NULL || !e->started || atomic_load(&s->live) == 0) {
            continue; /* its heartbeats stopped: it judges nobody any more */
        }
        for (uint32_t j = 0; j < r->nevb; j++) {
            if (j == i || strcmp(either_stage(&r->evb[j])->cfg->node, name) != 0) {
                continue;
            }
            if (!sdd_evb_node_gave_up(e->n, j)) {
                return 0;
            }
            verdict = 1;
        }
    }
    return verdict;
}

void run_evb_destroy(struct sdd_run *r)
{
    for (uint32_t i = 0; i < r->nevb; i++) { /* they read the receivers */
        struct run_stage *src = r->evb[i].source;
        if (src != NULL && r->evb[i].readout != NULL) {
            run_ro_metrics_remove(src->ro_xm);
            src->ro_xm = NULL;
        }
    }
    for (uint32_t i = 0; i < r->nevb; i++) {
        struct run_evb_node *e = &r->evb[i];
        sdd_evb_node_destroy(e->n);
        run_readout_destroy(e->readout); /* after the node: its feed holds receiver frames */
        e->readout = NULL;
        e->n = NULL;
        run_hough_feed_destroy(e->feed);
        e->feed = NULL;
    }
}
