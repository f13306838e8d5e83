/* RICH buffers as one stream (sdd_rich_proc_run_stream, rich_carry.c): a stream of packets cut
 * into buffers at arbitrary packet boundaries, so that boards' packets of one moment straddle
 * them, gives exactly the merged events and rings of the whole stream processed as one buffer:
 * with one thread, with two threads sharing the carry (their merges in buffer order), across a
 * new burst whose timestamps start again, and with a carry too small to hold what a buffer
 * leaves (merged at once then, counted). Without the carry, the same cuts split events. A
 * refused buffer passes its turn on; one that never comes holds the next for a second only.
 * With a GPU, the same streams with the rings found there give the same events and rings
 * (skipped, and said, without one). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "sddaq/clock.h"
#include "sddaq/trigger.h"

#define NEV     4000
#define MAX_BUF (1u << 20)

/* Merged events in stream order: timestamp, hits, rings. No CHECK here (worker threads use it):
 * an allocation that fails, or more events than cap, sets bad. */
struct seen {
    uint32_t n, cap;
    bool bad;
    uint32_t *ts;
    uint8_t *nhits, *nrings;
    uint16_t (*hits)[SDD_RICH_MAX_HITS];
    sdd_rich_ring (*rings)[8];
};

static struct seen *seen_new(uint32_t cap)
{
    struct seen *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        abort();
    }
    s->cap = cap;
    s->ts = calloc(cap + 1, sizeof(*s->ts));
    s->nhits = calloc(cap + 1, 1);
    s->nrings = calloc(cap + 1, 1);
    s->hits = calloc(cap + 1, sizeof(*s->hits));
    s->rings = calloc(cap + 1, sizeof(*s->rings));
    s->bad = !s->ts || !s->nhits || !s->nrings || !s->hits || !s->rings;
    s->cap = s->bad ? 0 : cap;
    return s;
}

static void seen_free(struct seen *s)
{
    free(s->ts);
    free(s->nhits);
    free(s->nrings);
    free(s->hits);
    free(s->rings);
    free(s);
}

static void add_event(struct seen *s, uint32_t ts, uint8_t nhits, const uint16_t *hits,
                      uint8_t nrings, const sdd_rich_ring *rings)
{
    if (s->n >= s->cap || nrings > 8) {
        s->bad = true;
        return;
    }
    s->ts[s->n] = ts;
    s->nhits[s->n] = nhits;
    memcpy(s->hits[s->n], hits, nhits * sizeof(uint16_t));
    s->nrings[s->n] = nrings;
    memcpy(s->rings[s->n], rings, nrings * sizeof(sdd_rich_ring));
    s->n++;
}

static void add_output(struct seen *s, const sdd_rich_output *o)
{
    const sdd_rich_batch *b = o->events;
    for (uint32_t i = 0; i < b->n; i++) {
        add_event(s, b->timestamp[i], b->nhits[i], b->hits + b->first[i], o->nrings[i],
                  o->rings + (size_t)i * o->max_rings);
    }
}

/* Events that differ (count mismatch counts as all). */
static uint32_t differ(const struct seen *a, const struct seen *b)
{
    if (a->bad || b->bad) {
        return UINT32_MAX;
    }
    if (a->n != b->n) {
        return a->n > b->n ? a->n : b->n;
    }
    uint32_t bad = 0;
    for (uint32_t i = 0; i < a->n; i++) {
        bool hits_differ = a->ts[i] != b->ts[i] || a->nhits[i] != b->nhits[i] ||
                           memcmp(a->hits[i], b->hits[i], a->nhits[i] * sizeof(uint16_t)) != 0;
        bool rings_differ =
            a->nrings[i] != b->nrings[i] ||
            memcmp(a->rings[i], b->rings[i], a->nrings[i] * sizeof(sdd_rich_ring)) != 0;
        if ((hits_differ || rings_differ) && bad < 3) {
            fprintf(stderr, "event %u (ts %u, %u hits): %s differ; rings %u against %u\n", i,
                    a->ts[i], a->nhits[i], hits_differ ? "hits" : "rings", a->nrings[i],
                    b->nrings[i]);
        }
        bad += hits_differ || rings_differ;
    }
    return bad;
}

static uint8_t *stream;
static size_t stream_len, half_len;
static size_t cut[4096]; /* buffer b is [cut[b], cut[b + 1]) */
static uint32_t ncuts;

/* Two bursts of NEV events each (the second one's timestamps start again, its packets say
 * burst 1), packed back to back. */
static void make_stream(void)
{
    sdd_rich_gen_opts go;
    sdd_rich_gen_opts_default(&go);
    sdd_rich_pmtab *tab = NULL;
    CHECK_OK(sdd_rich_pmtab_create(&go.geom, &tab));
    static sdd_rich_event evs[NEV];
    stream = malloc(16u << 20);
    CHECK_REQUIRE(stream != NULL);
    uint32_t seq[SDD_RICH_MAX_BOARDS] = {0};
    for (int burst = 0; burst < 2; burst++) {
        sdd_rich_gen *g = NULL;
        go.seed = 7 + (uint64_t)burst;
        CHECK_OK(sdd_rich_gen_create(&go, &g));
        for (int i = 0; i < NEV; i++) {
            sdd_rich_gen_next(g, &evs[i]);
        }
        sdd_rich_gen_destroy(g);
        int64_t len = sdd_rich_pack(tab, evs, NEV, SDD_RICH_PKT_MAX, stream + stream_len,
                                    (16u << 20) - stream_len, seq);
        CHECK_REQUIRE(len > 0);
        for (size_t q = stream_len; q < stream_len + (size_t)len;) { /* stamp the burst */
            uint32_t plen, b = (uint32_t)burst;
            memcpy(&plen, stream + q + 8, 4);
            memcpy(stream + q + 16, &b, 4);
            q += plen;
        }
        stream_len += (size_t)len;
        half_len = burst == 0 ? stream_len : half_len;
    }
    sdd_rich_pmtab_destroy(tab);
    /* Cuts after 1 to 8 packets, from a fixed seed. */
    uint64_t rs = 12345;
    size_t q = 0;
    cut[ncuts++] = 0;
    while (q < stream_len) {
        unsigned k = 1 + (unsigned)(check_rand(&rs) % 8);
        for (unsigned i = 0; i < k && q < stream_len; i++) {
            uint32_t plen;
            memcpy(&plen, stream + q + 8, 4);
            q += plen;
        }
        CHECK_REQUIRE(ncuts < 4096);
        cut[ncuts++] = q;
    }
}

static sdd_rich_proc *new_proc(size_t max_bytes)
{
    sdd_rich_proc_opts po;
    sdd_rich_proc_opts_default(&po);
    po.max_bytes = max_bytes;
    sdd_rich_proc *p = NULL;
    CHECK_OK(sdd_rich_proc_create(&po, &p));
    return p;
}

/* A proc whose rings are found on a GPU; NULL where there is none (or no CUDA build). */
static sdd_rich_proc *new_gpu_proc(size_t max_bytes)
{
    sdd_rich_proc_opts po;
    sdd_rich_proc_opts_default(&po);
    po.max_bytes = max_bytes;
    po.gpu = true;
    sdd_rich_proc *p = NULL;
    sdd_err err = sdd_rich_proc_create(&po, &p);
    CHECK(err == SDD_OK || err == SDD_ENOTSUP);
    return err == SDD_OK ? p : NULL;
}

/* The whole stream, buffer by buffer, on one proc, then the flush. */
static void run_one_thread(sdd_rich_proc *p, sdd_rich_carry *c, struct seen *s)
{
    sdd_rich_output o;
    for (uint32_t b = 0; b + 1 < ncuts; b++) {
        CHECK_OK(sdd_rich_proc_run_stream(p, stream + cut[b], cut[b + 1] - cut[b], c, b, &o));
        add_output(s, &o);
    }
    CHECK_OK(sdd_rich_proc_flush(p, c, ncuts - 1, &o));
    add_output(s, &o);
}

/* Each burst as one whole buffer: what the stream must give. */
static void reference(struct seen *ref)
{
    sdd_rich_proc *p = new_proc(4u << 20);
    sdd_rich_output o;
    CHECK_OK(sdd_rich_proc_run(p, stream, half_len, &o));
    add_output(ref, &o);
    CHECK_OK(sdd_rich_proc_run(p, stream + half_len, stream_len - half_len, &o));
    add_output(ref, &o);
    sdd_rich_proc_destroy(p);
}

/* Two threads take buffers 0, 2, 4, ... and 1, 3, 5, ...; outputs kept per buffer. The
 * threads use no CHECK (its counters are the main thread's): failures land in rc. */
struct worker {
    sdd_rich_carry *carry;
    unsigned first;
    bool gpu;
    int rc;
    struct seen *per_buffer[4096];
};

static void *work(void *arg)
{
    struct worker *w = arg;
    sdd_rich_proc_opts po;
    sdd_rich_proc_opts_default(&po);
    po.max_bytes = MAX_BUF;
    po.gpu = w->gpu;
    sdd_rich_proc *p = NULL;
    if (sdd_rich_proc_create(&po, &p) != SDD_OK) {
        w->rc = -1;
        return NULL;
    }
    for (uint32_t b = w->first; b + 1 < ncuts && w->rc == 0; b += 2) {
        sdd_rich_output o;
        if (sdd_rich_proc_run_stream(p, stream + cut[b], cut[b + 1] - cut[b], w->carry, b, &o) !=
            SDD_OK) {
            w->rc = -1;
            break;
        }
        w->per_buffer[b] = seen_new(o.events->n);
        add_output(w->per_buffer[b], &o);
    }
    sdd_rich_proc_destroy(p);
    return NULL;
}

/* Two threads, one carry, buffers taken in turn; their merges go in buffer order. */
static void run_two_threads(bool gpu, struct seen *two)
{
    sdd_rich_carry *c = NULL;
    CHECK_OK(sdd_rich_carry_create(MAX_BUF, &c));
    static struct worker w[2];
    pthread_t th[2];
    for (unsigned t = 0; t < 2; t++) {
        memset(&w[t], 0, sizeof(w[t]));
        w[t].carry = c;
        w[t].first = t;
        w[t].gpu = gpu;
        CHECK_REQUIRE(pthread_create(&th[t], NULL, work, &w[t]) == 0);
    }
    for (unsigned t = 0; t < 2; t++) {
        pthread_join(th[t], NULL);
        CHECK_EQ(w[t].rc, 0);
    }
    for (uint32_t b = 0; b + 1 < ncuts; b++) {
        struct seen *s = w[b % 2].per_buffer[b];
        CHECK_REQUIRE(s != NULL);
        CHECK(!s->bad);
        for (uint32_t i = 0; i < s->n; i++) {
            add_event(two, s->ts[i], s->nhits[i], s->hits[i], s->nrings[i], s->rings[i]);
        }
        seen_free(s);
    }
    sdd_rich_proc *p = new_proc(MAX_BUF);
    sdd_rich_output o;
    CHECK_OK(sdd_rich_proc_flush(p, c, ncuts - 1, &o));
    add_output(two, &o);
    sdd_rich_proc_destroy(p);
    sdd_rich_carry_destroy(c);
}

/* The rings on a GPU, where there is one: one thread and two, the whole stream's events and
 * the CPU's rings bit for bit. */
static void gpu_streams(const struct seen *ref)
{
    sdd_rich_proc *p = new_gpu_proc(MAX_BUF);
    if (p == NULL) {
        printf("unit_rich_stream: no GPU here; the GPU streams are not run\n");
        return;
    }
    struct seen *one = seen_new(4 * NEV), *two = seen_new(4 * NEV);
    sdd_rich_carry *c = NULL;
    CHECK_OK(sdd_rich_carry_create(MAX_BUF, &c));
    run_one_thread(p, c, one);
    CHECK_EQ(sdd_rich_carry_events(c), 0);
    CHECK_EQ(differ(one, ref), 0);
    sdd_rich_proc_destroy(p);
    sdd_rich_carry_destroy(c);
    run_two_threads(true, two);
    CHECK_EQ(differ(two, ref), 0);
    printf("unit_rich_stream: GPU streams: %u events, %u and %u differ (one thread, two)\n", ref->n,
           differ(one, ref), differ(two, ref));
    seen_free(one);
    seen_free(two);
}

int main(void)
{
    make_stream();
    struct seen *ref = seen_new(2 * NEV), *one = seen_new(4 * NEV), *two = seen_new(2 * NEV);
    struct seen *plain = seen_new(4 * NEV), *tight = seen_new(4 * NEV);
    reference(ref);
    CHECK(ref->n > NEV);
    CHECK(ncuts > 100); /* many boundaries */

    /* One thread. */
    sdd_rich_carry *c = NULL;
    CHECK_OK(sdd_rich_carry_create(MAX_BUF, &c));
    sdd_rich_proc *p = new_proc(MAX_BUF);
    sdd_rich_output o;
    uint32_t max_held = 0;
    for (uint32_t b = 0; b + 1 < ncuts; b++) {
        CHECK_OK(sdd_rich_proc_run_stream(p, stream + cut[b], cut[b + 1] - cut[b], c, b, &o));
        add_output(one, &o);
        max_held = sdd_rich_carry_events(c) > max_held ? sdd_rich_carry_events(c) : max_held;
    }
    CHECK(max_held > 0); /* boundaries did cut events */
    CHECK_OK(sdd_rich_proc_flush(p, c, ncuts - 1, &o));
    add_output(one, &o);
    CHECK_EQ(sdd_rich_carry_events(c), 0);
    CHECK_EQ(differ(one, ref), 0);
    sdd_rich_merge_stats ms;
    sdd_rich_proc_stats(p, NULL, &ms);
    CHECK_EQ(ms.out_events, ref->n);
    CHECK_EQ(ms.carry_full, 0);
    CHECK_EQ(ms.late, 0);
    CHECK(ms.held > 0);
    sdd_rich_proc_destroy(p);
    sdd_rich_carry_destroy(c);

    /* Two threads, one carry: the merges take turns in buffer order. */
    run_two_threads(false, two);
    CHECK_EQ(differ(two, ref), 0);

    /* A carry with room for a few events only: what it cannot hold is merged at once, counted;
     * nothing is lost or merged twice (events may be cut, so only the count of hits holds). */
    CHECK_OK(sdd_rich_carry_create(256, &c));
    p = new_proc(MAX_BUF);
    uint64_t hits_ref = 0, hits_tight = 0;
    for (uint32_t b = 0; b + 1 < ncuts; b++) {
        CHECK_OK(sdd_rich_proc_run_stream(p, stream + cut[b], cut[b + 1] - cut[b], c, b, &o));
        add_output(tight, &o);
    }
    CHECK_OK(sdd_rich_proc_flush(p, c, ncuts - 1, &o));
    add_output(tight, &o);
    sdd_rich_proc_stats(p, NULL, &ms);
    CHECK(ms.carry_full > 0);
    for (uint32_t i = 0; i < ref->n; i++) {
        hits_ref += ref->nhits[i];
    }
    for (uint32_t i = 0; i < tight->n; i++) {
        hits_tight += tight->nhits[i];
    }
    CHECK_EQ(hits_tight, hits_ref);
    CHECK(tight->n >= ref->n && !tight->bad);
    sdd_rich_proc_destroy(p);
    sdd_rich_carry_destroy(c);

    /* Each buffer alone, as before the carry: the same cuts split events. */
    p = new_proc(MAX_BUF);
    for (uint32_t b = 0; b + 1 < ncuts; b++) {
        CHECK_OK(sdd_rich_proc_run(p, stream + cut[b], cut[b + 1] - cut[b], &o));
        add_output(plain, &o);
    }
    CHECK(plain->n > ref->n && !plain->bad);
    sdd_rich_proc_destroy(p);

    /* A refused buffer still passes the turn on: the next one merges at once. */
    CHECK_OK(sdd_rich_carry_create(MAX_BUF, &c));
    p = new_proc(MAX_BUF);
    CHECK(sdd_rich_proc_run_stream(p, stream, MAX_BUF + 1, c, 0, &o) == SDD_ETOOBIG);
    uint64_t t0 = sdd_now_ns();
    CHECK_OK(sdd_rich_proc_run_stream(p, stream + cut[0], cut[1] - cut[0], c, 1, &o));
    CHECK(sdd_now_ns() - t0 < SDD_NS_PER_S / 2);
    sdd_rich_proc_stats(p, NULL, &ms);
    CHECK_EQ(ms.late, 0);
    /* A buffer that never comes: the next waits a second, then goes on; if it comes after
     * all, it is merged alone and counted late. */
    t0 = sdd_now_ns();
    CHECK_OK(sdd_rich_proc_run_stream(p, stream + cut[2], cut[3] - cut[2], c, 3, &o));
    CHECK(sdd_now_ns() - t0 >= SDD_NS_PER_S / 2);
    CHECK_OK(sdd_rich_proc_run_stream(p, stream + cut[1], cut[2] - cut[1], c, 2, &o));
    sdd_rich_proc_stats(p, NULL, &ms);
    CHECK_EQ(ms.late, 1);
    sdd_rich_proc_destroy(p);
    sdd_rich_carry_destroy(c);

    CHECK(sdd_rich_carry_create(0, &c) == SDD_EINVAL);
    CHECK(sdd_rich_proc_run_stream(p = new_proc(MAX_BUF), stream, 16, NULL, 0, &o) == SDD_EINVAL);
    sdd_rich_proc_destroy(p);
    gpu_streams(ref);
    seen_free(ref);
    seen_free(one);
    seen_free(two);
    seen_free(plain);
    seen_free(tight);
    free(stream);
    return check_finish();
}
