/* sddaq trigger rich bench --gpu: the CUDA ring finder (sddaq/rich_gpu.h) next to the CPU's in
 * one invocation. Three parts:
 *  - ring finding alone on one large batch: one CPU core, then every GPU variant (state in
 *    local or shared memory, byte or SWAR histogram steps), kernel time from CUDA events and
 *    time with the copies; each variant's rings are compared with the CPU's, bit for bit;
 *  - the chain of seeds 003/004: packed receive buffers -> event finder + merge on the CPU ->
 *    rings on the GPU, two GPU objects in turns so that the CPU merges the next buffer while
 *    the GPU works on one; events/s on 1 and on all threads;
 *  - latency of one buffer of 128..1024 events through that chain (p50, p99, max). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sddaq/clock.h"
#include "sddaq/cpu.h"
#include "trigger.h"
#include "trigger_rich.h"

#define ROUNDS    5
#define LAT_SIZES 4

enum { CPU_MERGE, CPU_SUBMIT, CPU_WAIT, CPU_PARTS };
static const char *const CPU_PART_NAME[CPU_PARTS] = {"finder_merge", "submit", "wait"};
static const uint32_t LAT_EVENTS[LAT_SIZES] = {128, 256, 512, 1024};

struct variant {
    sdd_rich_gpu_state state;
    sdd_rich_gpu_steps steps;
    uint32_t max_regs;
    const char *name;
};

static const struct variant VARIANTS[] = {
    {SDD_RICH_GPU_LOCAL, SDD_RICH_GPU_SWAR, 0, "thread, local, swar"},
    {SDD_RICH_GPU_LOCAL, SDD_RICH_GPU_BYTES, 0, "thread, local, bytes"},
    {SDD_RICH_GPU_SHARED, SDD_RICH_GPU_SWAR, 0, "thread, shared, swar"},
    {SDD_RICH_GPU_SHARED, SDD_RICH_GPU_BYTES, 0, "thread, shared, bytes"},
    {SDD_RICH_GPU_WARP, SDD_RICH_GPU_SWAR, 0, "warp"},
    {SDD_RICH_GPU_WARP, SDD_RICH_GPU_SWAR, 128, "warp, 128 registers"},
    {SDD_RICH_GPU_WARP, SDD_RICH_GPU_SWAR, 64, "warp, 64 registers"},
};
#define NVARIANTS (sizeof(VARIANTS) / sizeof(VARIANTS[0]))

struct variant_result {
    bool ok;
    double kernel_eps[ROUNDS], wall_eps[ROUNDS];
    double h2d_us, d2h_us;
    uint32_t mismatched; /* events whose rings differ from the CPU's */
};

/* All events as one merged batch of channels, as the merge gives them. */
static int batch_of(const sdd_rich_event *evs, size_t n, sdd_rich_batch *b)
{
    if (sdd_rich_batch_init(b, (uint32_t)n) != SDD_OK) {
        return -1;
    }
    uint32_t hits = 0;
    for (size_t i = 0; i < n; i++) {
        b->first[i] = hits;
        b->nhits[i] = evs[i].nhits;
        for (unsigned k = 0; k < evs[i].nhits; k++) {
            b->hits[hits++] = (uint16_t)SDD_RICH_HIT_CHANNEL(evs[i].hits[k]);
        }
    }
    b->n = (uint32_t)n;
    return 0;
}

/* One CPU core over the batch, `rounds` times: median ns per event; the rings stay in nr and
 * rings (max_rings slots per event). */
static double cpu_find(const sdd_rich_find_opts *fo, const sdd_rich_batch *b, uint32_t max_rings,
                       uint8_t *nr, sdd_rich_ring *rings, int rounds)
{
    sdd_rich_finder *f = NULL;
    if (sdd_rich_finder_create(fo, &f) != SDD_OK) {
        return -1;
    }
    double ns[ROUNDS];
    for (int r = 0; r < rounds; r++) {
        uint64_t t0 = sdd_now_ns();
        for (uint32_t i = 0; i < b->n; i++) {
            int k = sdd_rich_find(f, b->hits + b->first[i], b->nhits[i],
                                  rings + (size_t)i * max_rings, max_rings);
            nr[i] = (uint8_t)(k > 0 ? k : 0);
        }
        ns[r] = (double)(sdd_now_ns() - t0) / b->n;
    }
    sdd_rich_finder_destroy(f);
    return rich_summarize(ns, rounds).med;
}

static bool same_ring(const sdd_rich_ring *a, const sdd_rich_ring *b)
{
    return memcmp(&a->cx, &b->cx, 4 * sizeof(float)) == 0 && a->hits == b->hits &&
           a->spot == b->spot && a->nhits == b->nhits && a->flags == b->flags;
}

static uint32_t mismatches(const sdd_rich_batch *b, uint32_t max_rings, const uint8_t *want_n,
                           const sdd_rich_ring *want, const uint8_t *got_n,
                           const sdd_rich_ring *got)
{
    uint32_t bad = 0;
    for (uint32_t i = 0; i < b->n; i++) {
        bool same = want_n[i] == got_n[i];
        for (unsigned k = 0; same && k < want_n[i]; k++) {
            size_t at = (size_t)i * max_rings + k;
            same = same_ring(&want[at], &got[at]);
        }
        bad += !same;
    }
    return bad;
}

static void gpu_opts(const struct rich_cli *o, const sdd_rich_find_opts *fo, uint32_t max_events,
                     const struct variant *v, sdd_rich_gpu_opts *g)
{
    sdd_rich_gpu_opts_default(g);
    g->find = *fo;
    g->max_events = max_events;
    g->block = o->gpu_block;
    g->state = v->state;
    g->steps = v->steps;
    g->max_regs = v->max_regs;
}

/* Ring finding alone for one variant: a warm batch, then `rounds` timed ones; the first timed
 * one's rings are compared with the CPU's. */
static void run_variant(const struct rich_cli *o, const sdd_rich_find_opts *fo,
                        const sdd_rich_batch *b, const uint8_t *want_n, const sdd_rich_ring *want,
                        const struct variant *v, int rounds, struct variant_result *res, char *name,
                        size_t name_len)
{
    sdd_rich_gpu_opts go;
    gpu_opts(o, fo, b->n, v, &go);
    sdd_rich_gpu *g = NULL;
    memset(res, 0, sizeof(*res));
    if (sdd_rich_gpu_create(&go, &g) != SDD_OK) {
        return;
    }
    snprintf(name, name_len, "%s", sdd_rich_gpu_name(g));
    const uint8_t *nr;
    const sdd_rich_ring *rings;
    res->ok = sdd_rich_gpu_submit(g, b) == SDD_OK && sdd_rich_gpu_wait(g, &nr, &rings) >= 0;
    for (int r = 0; r < rounds && res->ok; r++) {
        uint64_t t0 = sdd_now_ns();
        res->ok = sdd_rich_gpu_submit(g, b) == SDD_OK && sdd_rich_gpu_wait(g, &nr, &rings) >= 0;
        uint64_t dt = sdd_now_ns() - t0;
        sdd_rich_gpu_times t;
        sdd_rich_gpu_last_times(g, &t);
        res->kernel_eps[r] = b->n / (t.kernel_us * 1e-6);
        res->wall_eps[r] = b->n / ((double)dt * 1e-9);
        res->h2d_us = t.h2d_us;
        res->d2h_us = t.d2h_us;
        if (r == 0 && res->ok) {
            res->mismatched = mismatches(b, go.max_rings, want_n, want, nr, rings);
        }
    }
    sdd_rich_gpu_destroy(g);
}

/* ---- the chain: event finder + merge on the CPU, rings on the GPU ----------------------- */

struct chain {
    sdd_rich_index idx;
    sdd_rich_batch batch;
    sdd_rich_gpu *gpu[RICH_CHAIN_MAX_INFLIGHT];
    unsigned depth; /* buffers in flight, one GPU object each */
    const sdd_rich_pmtab *tab;
    uint32_t window;
    sdd_rich_ef_stats es;
    sdd_rich_merge_stats ms;
    /* Where the CPU thread's time goes (ns): event finder + merge, submit (staging and the
     * CUDA calls), waiting for the GPU. */
    uint64_t ns[CPU_PARTS];
    uint64_t events;
};

static void chain_fini(struct chain *c)
{
    sdd_rich_index_fini(&c->idx);
    sdd_rich_batch_fini(&c->batch);
    for (unsigned k = 0; k < RICH_CHAIN_MAX_INFLIGHT; k++) {
        sdd_rich_gpu_destroy(c->gpu[k]);
    }
}

static int chain_init(struct chain *c, const sdd_rich_gpu_opts *go, const sdd_rich_pmtab *tab,
                      const sdd_rich_proc_opts *po, unsigned depth)
{
    memset(c, 0, sizeof(*c));
    uint32_t cap = (uint32_t)(po->max_bytes / SDD_RICH_EVT_HEADER + 1);
    c->tab = tab;
    c->window = po->window;
    sdd_rich_gpu_opts g = *go;
    g.max_events = cap;
    g.times = false; /* as the processing step runs it */
    c->depth = depth;
    bool ok = sdd_rich_index_init(&c->idx, cap) == SDD_OK &&
              sdd_rich_batch_init(&c->batch, cap) == SDD_OK;
    for (unsigned k = 0; ok && k < depth; k++) {
        ok = sdd_rich_gpu_create(&g, &c->gpu[k]) == SDD_OK;
    }
    if (!ok) {
        chain_fini(c);
        return -1;
    }
    return 0;
}

/* Index, merge and hand one buffer to gpu k. */
static int chain_submit(struct chain *c, const struct rich_packed *p, size_t b, int k)
{
    uint64_t t0 = sdd_now_ns();
    sdd_rich_find_events(p->buf[b], p->len[b], c->tab, &c->idx, &c->es);
    sdd_rich_merge(p->buf[b], &c->idx, c->window, &c->batch, &c->ms);
    uint64_t t1 = sdd_now_ns();
    int rc = sdd_rich_gpu_submit(c->gpu[k], &c->batch) == SDD_OK ? 0 : -1;
    c->ns[CPU_MERGE] += t1 - t0;
    c->ns[CPU_SUBMIT] += sdd_now_ns() - t1;
    c->events += c->batch.n;
    return rc;
}

static int64_t chain_wait(struct chain *c, int k)
{
    uint64_t t0 = sdd_now_ns();
    int64_t r = sdd_rich_gpu_wait(c->gpu[k], NULL, NULL);
    c->ns[CPU_WAIT] += sdd_now_ns() - t0;
    return r;
}

/* Buffers a chain thread keeps on the GPU: --gpu-inflight, default 2 (one merged while the
 * GPU works on the other). With 1024-event buffers the CPU still waits about 35 ns an event
 * for the GPU (H200, session 24); more in flight may hide that. */
static unsigned rich_chain_depth(const struct rich_cli *o)
{
    return o->gpu_inflight != 0 ? o->gpu_inflight : 2;
}

/* Every buffer `passes` times, depth in flight: the CPU finds and merges buffer i while the
 * GPU works on the depth - 1 before it; buffer i - depth + 1 is waited for once i is in. */
static int chain_stream(struct chain *c, const struct rich_packed *p, int passes, uint64_t *rings)
{
    size_t total = p->nbuf * (size_t)passes, lag = c->depth - 1;
    for (size_t i = 0; i < total + lag; i++) {
        if (i < total && chain_submit(c, p, i % p->nbuf, (int)(i % c->depth)) != 0) {
            return -1;
        }
        if (i >= lag) {
            int64_t r = chain_wait(c, (int)((i - lag) % c->depth));
            if (r < 0) {
                return -1;
            }
            *rings += (uint64_t)r;
        }
    }
    return 0;
}

struct stream_worker {
    struct chain chain;
    const struct rich_packed *p;
    int passes;
    uint64_t rings;
    int rc;
};

static void *stream_main(void *arg)
{
    struct stream_worker *w = arg;
    w->rc = chain_stream(&w->chain, w->p, w->passes, &w->rings);
    return NULL;
}

/* Events/s of nthreads chains over the same buffers; cpu_ns (may be NULL) gets the threads'
 * mean ns per merged event in each part. */
static double stream_rate(const sdd_rich_gpu_opts *go, const sdd_rich_pmtab *tab,
                          const sdd_rich_proc_opts *po, const struct rich_packed *p, int nthreads,
                          int passes, unsigned depth, double *cpu_ns)
{
    struct stream_worker *w = calloc((size_t)nthreads, sizeof(*w));
    double rate = -1;
    int made = 0;
    if (w == NULL) {
        return -1;
    }
    for (; made < nthreads; made++) {
        w[made].p = p;
        w[made].passes = passes;
        if (chain_init(&w[made].chain, go, tab, po, depth) != 0) {
            goto out;
        }
        uint64_t warm = 0;
        if (chain_stream(&w[made].chain, p, 1, &warm) != 0) {
            made++;
            goto out;
        }
        memset(w[made].chain.ns, 0, sizeof(w[made].chain.ns));
        w[made].chain.events = 0;
    }
    uint64_t dt = rich_time_threads(nthreads, stream_main, w, sizeof(*w));
    bool ok = dt > 0;
    for (int i = 0; i < nthreads; i++) {
        ok &= w[i].rc == 0;
    }
    if (ok) {
        rate = (double)p->events * passes * nthreads / ((double)dt * 1e-9);
    }
    for (int part = 0; ok && cpu_ns != NULL && part < CPU_PARTS; part++) {
        uint64_t ns = 0, events = 0;
        for (int i = 0; i < nthreads; i++) {
            ns += w[i].chain.ns[part];
            events += w[i].chain.events;
        }
        cpu_ns[part] = events > 0 ? (double)ns / (double)events : 0;
    }
out:
    for (int i = 0; i < made; i++) {
        chain_fini(&w[i].chain);
    }
    free(w);
    return rate;
}

/* One buffer at a time through the chain, nothing else in flight: the latency from the start
 * of the event finder to the rings on the host, per buffer (ns). */
static int chain_latency(const sdd_rich_gpu_opts *go, const sdd_rich_pmtab *tab,
                         const sdd_rich_proc_opts *po, const struct rich_packed *p, int passes,
                         uint64_t *t, size_t *nt)
{
    struct chain c;
    if (chain_init(&c, go, tab, po, 1) != 0) {
        return -1;
    }
    int rc = 0;
    for (int pass = -1; pass < passes && rc == 0; pass++) { /* pass -1: warm */
        for (size_t b = 0; b < p->nbuf && rc == 0; b++) {
            uint64_t t0 = sdd_now_ns();
            rc = chain_submit(&c, p, b, 0) == 0 && chain_wait(&c, 0) >= 0 ? 0 : -1;
            if (pass >= 0) {
                t[(*nt)++] = sdd_now_ns() - t0;
            }
        }
    }
    chain_fini(&c);
    return rc;
}

/* ---- report ------------------------------------------------------------------------------ */

/* The chain runs with the fastest variant of each layout: a thread per event, a warp per
 * event. */
enum { LAYOUT_THREAD, LAYOUT_WARP, LAYOUTS };
static const char *const LAYOUT_NAME[LAYOUTS] = {"thread per event", "warp per event"};

struct chain_result {
    int variant; /* -1: none of this layout ran */
    double stream1[ROUNDS], streamn[ROUNDS];
    double cpu_ns[CPU_PARTS][ROUNDS]; /* the all-threads stream's, per merged event */
    struct rich_lat lat[LAT_SIZES];
};

struct gpu_report {
    char gpu[256];
    uint64_t events;
    double cpu_ns;
    struct variant_result var[NVARIANTS];
    struct chain_result chain[LAYOUTS];
};

static void print_report(const struct rich_cli *o, struct gpu_report *r, int nthreads, int rounds)
{
    if (o->json) {
        struct tjson j;
        tj_begin(&j, stdout);
        tj_obj(&j, NULL);
        tj_str(&j, "gpu", r->gpu);
        tj_uint(&j, "events", r->events);
        tj_num(&j, "cpu_ns_per_event_1core", r->cpu_ns);
        tj_arr(&j, "variants");
        for (size_t v = 0; v < NVARIANTS; v++) {
            struct rich_mmm k = rich_summarize(r->var[v].kernel_eps, rounds);
            struct rich_mmm w = rich_summarize(r->var[v].wall_eps, rounds);
            tj_obj(&j, NULL);
            tj_str(&j, "variant", VARIANTS[v].name);
            tj_bool(&j, "ran", r->var[v].ok);
            tj_num(&j, "kernel_events_per_s", k.med);
            tj_num(&j, "kernel_events_per_s_min", k.min);
            tj_num(&j, "kernel_events_per_s_max", k.max);
            tj_num(&j, "with_copies_events_per_s", w.med);
            tj_num(&j, "h2d_us", r->var[v].h2d_us);
            tj_num(&j, "d2h_us", r->var[v].d2h_us);
            tj_uint(&j, "events_differing_from_cpu", r->var[v].mismatched);
            tj_end(&j);
        }
        tj_end(&j);
        tj_uint(&j, "buffer_events", o->buffer);
        tj_uint(&j, "threads", (uint64_t)nthreads);
        tj_uint(&j, "inflight_per_thread", rich_chain_depth(o));
        tj_arr(&j, "chains");
        for (int c = 0; c < LAYOUTS; c++) {
            const struct chain_result *ch = &r->chain[c];
            if (ch->variant < 0) {
                continue;
            }
            struct rich_mmm s1 = rich_summarize(r->chain[c].stream1, rounds);
            struct rich_mmm sn = rich_summarize(r->chain[c].streamn, rounds);
            tj_obj(&j, NULL);
            tj_str(&j, "variant", VARIANTS[ch->variant].name);
            tj_num(&j, "events_per_s_1thread", s1.med);
            tj_num(&j, "events_per_s_all", sn.med);
            for (int part = 0; part < CPU_PARTS; part++) {
                char key[64];
                snprintf(key, sizeof(key), "cpu_ns_per_event_%s", CPU_PART_NAME[part]);
                tj_num(&j, key, rich_summarize(r->chain[c].cpu_ns[part], rounds).med);
            }
            tj_arr(&j, "latency");
            for (int s = 0; s < LAT_SIZES; s++) {
                tj_obj(&j, NULL);
                tj_uint(&j, "buffer_events", LAT_EVENTS[s]);
                tj_uint(&j, "samples", ch->lat[s].samples);
                tj_num(&j, "p50_us", ch->lat[s].p50_us);
                tj_num(&j, "p99_us", ch->lat[s].p99_us);
                tj_num(&j, "max_us", ch->lat[s].max_us);
                tj_end(&j);
            }
            tj_end(&j);
            tj_end(&j);
        }
        tj_end(&j);
        tj_end(&j);
        tj_finish(&j);
        return;
    }
    printf("%s; %" PRIu64 " events in one batch, %d rounds, median [min-max]\n", r->gpu, r->events,
           rounds);
    printf("ring finding alone           events/s              with copies   rings vs CPU\n");
    printf("  CPU, 1 core                %-21.0f %-13s identical\n", 1e9 / r->cpu_ns, "-");
    for (size_t v = 0; v < NVARIANTS; v++) {
        const struct variant_result *x = &r->var[v];
        if (!x->ok) {
            printf("  GPU %-23s failed\n", VARIANTS[v].name);
            continue;
        }
        struct rich_mmm k = rich_summarize(r->var[v].kernel_eps, rounds);
        struct rich_mmm w = rich_summarize(r->var[v].wall_eps, rounds);
        char range[64];
        snprintf(range, sizeof(range), "%.3g [%.3g-%.3g]", k.med, k.min, k.max);
        printf("  GPU %-23s %-21s %-13.3g %s (%u differ)\n", VARIANTS[v].name, range, w.med,
               x->mismatched == 0 ? "identical" : "DIFFERENT", x->mismatched);
    }
    printf("chain: event finder + merge on the CPU, rings on the GPU; buffers of %u events, "
           "%u in flight per thread\n",
           o->buffer, rich_chain_depth(o));
    for (int c = 0; c < LAYOUTS; c++) {
        const struct chain_result *ch = &r->chain[c];
        if (ch->variant < 0) {
            continue;
        }
        struct rich_mmm s1 = rich_summarize(r->chain[c].stream1, rounds);
        struct rich_mmm sn = rich_summarize(r->chain[c].streamn, rounds);
        printf("  %s (%s)\n", LAYOUT_NAME[c], VARIANTS[ch->variant].name);
        printf("    events/s, 1 thread       %.0f [%.0f-%.0f]\n", s1.med, s1.min, s1.max);
        printf("    events/s, %2d threads     %.0f [%.0f-%.0f]\n", nthreads, sn.med, sn.min,
               sn.max);
        printf("    CPU ns/event, %2d threads finder+merge %.1f, submit %.1f, wait %.1f\n",
               nthreads, rich_summarize(r->chain[c].cpu_ns[CPU_MERGE], rounds).med,
               rich_summarize(r->chain[c].cpu_ns[CPU_SUBMIT], rounds).med,
               rich_summarize(r->chain[c].cpu_ns[CPU_WAIT], rounds).med);
        printf("    latency per buffer       events  p50 us  p99 us  max us  (buffers)\n");
        for (int s = 0; s < LAT_SIZES; s++) {
            printf("                             %6u %7.0f %7.0f %7.0f  (%" PRIu64 ")\n",
                   LAT_EVENTS[s], ch->lat[s].p50_us, ch->lat[s].p99_us, ch->lat[s].max_us,
                   ch->lat[s].samples);
        }
    }
}

/* The fastest variant of each layout that ran and agreed with the CPU. */
static void pick_chains(struct gpu_report *r, int rounds)
{
    double top[LAYOUTS] = {0};
    for (int c = 0; c < LAYOUTS; c++) {
        r->chain[c].variant = -1;
    }
    for (size_t v = 0; v < NVARIANTS; v++) {
        int c = VARIANTS[v].state == SDD_RICH_GPU_WARP ? LAYOUT_WARP : LAYOUT_THREAD;
        if (!r->var[v].ok || r->var[v].mismatched != 0) {
            continue;
        }
        double med = rich_summarize(r->var[v].kernel_eps, rounds).med;
        if (med > top[c]) {
            top[c] = med;
            r->chain[c].variant = (int)v;
        }
    }
}

/* Streams and latencies through the chain with one variant. */
static int run_chain(const struct rich_cli *o, const sdd_rich_find_opts *fo,
                     const sdd_rich_pmtab *tab, const sdd_rich_proc_opts *po,
                     const struct rich_packed *pk, int nthreads, int rounds, int passes,
                     struct chain_result *ch)
{
    sdd_rich_gpu_opts go;
    gpu_opts(o, fo, 0, &VARIANTS[ch->variant], &go);
    unsigned depth = rich_chain_depth(o);
    for (int i = 0; i < rounds; i++) {
        double cpu_ns[CPU_PARTS] = {0};
        ch->stream1[i] = stream_rate(&go, tab, &po[0], &pk[0], 1, passes, depth, NULL);
        ch->streamn[i] = stream_rate(&go, tab, &po[0], &pk[0], nthreads, passes, depth, cpu_ns);
        for (int part = 0; part < CPU_PARTS; part++) {
            ch->cpu_ns[part][i] = cpu_ns[part];
        }
        if (ch->stream1[i] <= 0 || ch->streamn[i] <= 0) {
            fprintf(stderr, "sddaq trigger rich bench --gpu: a chain run failed\n");
            return -1;
        }
    }
    for (int s = 0; s < LAT_SIZES; s++) {
        size_t nt = 0, cap = pk[s + 1].nbuf * (size_t)passes;
        uint64_t *t = malloc(cap * sizeof(*t));
        int lrc = t != NULL ? chain_latency(&go, tab, &po[s + 1], &pk[s + 1], passes, t, &nt) : -1;
        if (lrc == 0 && nt > 0) {
            rich_lat_summary(t, nt, &ch->lat[s]);
        }
        free(t);
        if (lrc != 0 || nt == 0) {
            fprintf(stderr, "sddaq trigger rich bench --gpu: a latency run failed\n");
            return -1;
        }
    }
    return 0;
}

int rich_gpu_bench(const struct rich_cli *o)
{
    uint64_t nev = o->events ? o->events : (o->smoke ? 4096 : 262144);
    int rounds = o->smoke ? 1 : ROUNDS, passes = o->smoke ? 1 : 3;
    int nthreads = o->threads > 0 ? o->threads : sdd_cpu_count();
    nthreads = nthreads < 1 ? 1 : nthreads;
    struct rich_cli oo = *o;
    oo.events = nev;
    struct rich_source src;
    if (rich_source_open(&src, &oo, nev) != 0) {
        return 1;
    }
    sdd_rich_event *evs = malloc(nev * sizeof(*evs));
    long n = evs != NULL ? rich_source_read(&src, evs, nev) : -1;
    sdd_rich_geom geom = src.geom;
    rich_source_close(&src);
    struct gpu_report *r = calloc(1, sizeof(*r));
    sdd_rich_proc_opts po[LAT_SIZES + 1];
    struct rich_packed pk[LAT_SIZES + 1];
    sdd_rich_batch batch;
    memset(pk, 0, sizeof(pk));
    memset(&batch, 0, sizeof(batch));
    uint8_t *want_n = calloc((size_t)(n > 0 ? n : 1), 1);
    sdd_rich_ring *want = NULL;
    sdd_rich_pmtab *tab = NULL;
    int rc = 1;
    if (n <= 0 || r == NULL || want_n == NULL || sdd_rich_pmtab_create(&geom, &tab) != SDD_OK ||
        batch_of(evs, (size_t)n, &batch) != 0) {
        fprintf(stderr, "sddaq trigger rich bench --gpu: no events\n");
        goto out;
    }
    for (int s = 0; s <= LAT_SIZES; s++) {
        struct rich_cli lo = *o;
        lo.buffer = s == 0 ? o->buffer : LAT_EVENTS[s - 1];
        rich_cli_proc_opts(&lo, &geom, SDD_RICH_HIST, &po[s]);
        if (rich_pack_buffers(tab, evs, (size_t)n, lo.buffer, po[s].max_bytes, &pk[s]) != 0) {
            goto out;
        }
    }
    sdd_rich_find_opts fo = po[0].find;
    sdd_rich_gpu_opts go;
    gpu_opts(o, &fo, (uint32_t)n, &VARIANTS[0], &go);
    want = calloc((size_t)n * go.max_rings, sizeof(*want));

    if (want == NULL) {
        goto out;
    }
    r->events = (uint64_t)n;
    r->cpu_ns = cpu_find(&fo, &batch, go.max_rings, want_n, want, rounds);
    bool any = false;
    for (size_t v = 0; v < NVARIANTS; v++) {
        run_variant(o, &fo, &batch, want_n, want, &VARIANTS[v], rounds, &r->var[v], r->gpu,
                    sizeof(r->gpu));
        any |= r->var[v].ok;
    }
    if (!any) {
        fprintf(stderr, "sddaq trigger rich bench --gpu: no GPU variant ran (see the log)\n");
        goto out;
    }
    pick_chains(r, rounds);
    for (int c = 0; c < LAYOUTS; c++) {
        if (r->chain[c].variant >= 0 &&
            run_chain(o, &fo, tab, po, pk, nthreads, rounds, passes, &r->chain[c]) != 0) {
            goto out;
        }
    }
    print_report(o, r, nthreads, rounds);
    rc = 0;
    for (size_t v = 0; v < NVARIANTS; v++) {
        rc |= r->var[v].ok && r->var[v].mismatched != 0; /* a GPU that disagrees fails */
    }
out:
    for (int s = 0; s <= LAT_SIZES; s++) {
        rich_packed_free(&pk[s]);
    }
    sdd_rich_batch_fini(&batch);
    sdd_rich_pmtab_destroy(tab);
    free(want);
    free(want_n);
    free(r);
    free(evs);
    return rc;
}
