/* RICH buffer processing and its stage thread (src/trigger/rich_proc.c, rich_stage.c): a
 * packed receive buffer gives every event back with the rings the finder gives on the event
 * itself; a damaged buffer is processed without a crash and the damage is counted; an
 * oversized buffer is SDD_ETOOBIG; a buffer split over 2 or 3 threads gives exactly the rings
 * and counts of one thread, damaged buffers too (its event finder walks the buffer in two
 * parts; a split of 65 is refused); the stage thread gives the same rings for every buffer,
 * one result out at a time, and stops cleanly after its input is drained; with opts.stream, a
 * stream cut into buffers between any two packets gives, with its end queued, the events and
 * rings of the uncut stream, where buffers merged alone split the cut events; buffers started
 * ahead of their finish (opts.inflight, alone and as a stream) give what one at a time gives, in
 * order. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "sddaq/log.h"
#include "sddaq/trigger.h"

#define NBUF 6
#define PER  256

static sdd_rich_event evs[NBUF * PER];

/* Rings of each event straight from the finder, to compare with. */
static int direct_rings[NBUF * PER];

static void setup(sdd_rich_pmtab **tab, uint8_t **bufs, size_t *lens, size_t cap)
{
    sdd_rich_gen_opts go;
    sdd_rich_gen_opts_default(&go);
    sdd_rich_gen *g = NULL;
    CHECK_OK(sdd_rich_gen_create(&go, &g));
    CHECK_OK(sdd_rich_pmtab_create(&go.geom, tab));
    sdd_rich_find_opts fo;
    sdd_rich_find_opts_default(&fo);
    sdd_rich_finder *f = NULL;
    CHECK_OK(sdd_rich_finder_create(&fo, &f));
    for (int i = 0; i < NBUF * PER; i++) {
        sdd_rich_gen_next(g, &evs[i]);
        sdd_rich_ring r[8];
        direct_rings[i] = sdd_rich_find(f, evs[i].hits, evs[i].nhits, r, 8);
    }
    for (int b = 0; b < NBUF; b++) {
        bufs[b] = malloc(cap);
        CHECK_REQUIRE(bufs[b] != NULL);
        int64_t len = sdd_rich_pack(*tab, evs + b * PER, PER, SDD_RICH_PKT_MAX, bufs[b], cap, NULL);
        CHECK_REQUIRE(len > 0);
        lens[b] = (size_t)len;
    }
    sdd_rich_finder_destroy(f);
    sdd_rich_gen_destroy(g);
}

/* The rings of buffer b's output agree with the finder run on each event. Merged events carry
 * the same hits in board order, so the ring count must match (the finder is order-aware only
 * through ties, which the tolerance of a count comparison absorbs; it must match exactly for
 * nearly all). */
static int compare(int b, const sdd_rich_output *out)
{
    int mismatches = 0, k = 0;
    for (int e = 0; e < PER; e++) {
        const sdd_rich_event *ev = &evs[b * PER + e];
        if (ev->nhits == 0) {
            continue;
        }
        if ((uint32_t)k >= out->events->n || out->events->timestamp[k] != ev->timestamp ||
            out->events->nhits[k] != ev->nhits) {
            return -1;
        }
        mismatches += out->nrings[k] != direct_rings[b * PER + e];
        k++;
    }
    return (uint32_t)k == out->events->n ? mismatches : -1;
}

/* Every buffer through a proc of `split` threads: the same merged events, ring counts and ring
 * bytes as one thread gives, and the same event finder and merge counts. */
static void check_split_identical(const sdd_rich_proc_opts *po, uint32_t split, uint8_t **bufs,
                                  const size_t *lens, int nbuf)
{
    sdd_rich_proc_opts so = *po;
    sdd_rich_proc *one = NULL, *many = NULL;
    CHECK_OK(sdd_rich_proc_create(po, &one));
    so.split = split;
    CHECK_OK(sdd_rich_proc_create(&so, &many));
    int differ = 0;
    for (int round = 0; round < 3; round++) { /* the team's jobs back to back */
        for (int b = 0; b < nbuf; b++) {
            sdd_rich_output a, m;
            CHECK_OK(sdd_rich_proc_run(one, bufs[b], lens[b], &a));
            CHECK_OK(sdd_rich_proc_run(many, bufs[b], lens[b], &m));
            uint32_t n = a.events->n;
            differ += m.events->n != n || m.total_rings != a.total_rings ||
                      memcmp(a.nrings, m.nrings, n) != 0 ||
                      memcmp(a.rings, m.rings, (size_t)n * a.max_rings * sizeof(*a.rings)) != 0;
        }
    }
    CHECK_EQ(differ, 0);
    sdd_rich_ef_stats ef_one, ef_many;
    sdd_rich_merge_stats ms_one, ms_many;
    sdd_rich_proc_stats(one, &ef_one, &ms_one);
    sdd_rich_proc_stats(many, &ef_many, &ms_many);
    CHECK(memcmp(&ef_one, &ef_many, sizeof(ef_one)) == 0);
    CHECK(memcmp(&ms_one, &ms_many, sizeof(ms_one)) == 0);
    sdd_rich_proc_destroy(one);
    sdd_rich_proc_destroy(many);
}

/* The packet header at or after byte `from` of buf (its offset), or len. */
static size_t packet_at(const uint8_t *buf, size_t len, size_t from)
{
    for (size_t q = from & ~(size_t)3; q + 4 <= len; q += 4) {
        uint32_t w;
        memcpy(&w, buf + q, 4);
        if (w == SDD_RICH_PKT_MAGIC) {
            return q;
        }
    }
    return len;
}

/* Buffers damaged around their middle, where a split's event finder cuts its walk in two:
 * scribbled bytes, a packet of an unknown version and one whose length runs past the end, a
 * cut-off buffer. Split over 2 and 3 threads, they give one thread's events, rings and counts. */
static void check_split_damaged(const sdd_rich_proc_opts *po, const uint8_t *buf, size_t len)
{
    enum { NDAMAGE = 11 };
    uint8_t *bufs[NDAMAGE];
    size_t lens[NDAMAGE];
    const long scribble_at[] = {-300, -100, -20, -4, 0, 8, 60, 200};
    int n = 0;
    for (size_t i = 0; i < sizeof(scribble_at) / sizeof(*scribble_at); i++, n++) {
        bufs[n] = malloc(len);
        CHECK_REQUIRE(bufs[n] != NULL);
        memcpy(bufs[n], buf, len);
        memset(bufs[n] + (long)len / 2 + scribble_at[i], 0xA5, 40);
        lens[n] = len;
    }
    size_t mid = packet_at(buf, len, len / 2);
    CHECK_REQUIRE(mid + SDD_RICH_PKT_HEADER < len);
    for (int k = 0; k < 2; k++, n++) {
        bufs[n] = malloc(len);
        CHECK_REQUIRE(bufs[n] != NULL);
        memcpy(bufs[n], buf, len);
        lens[n] = len;
    }
    bufs[n - 2][mid + 4] = SDD_RICH_PKT_VERSION + 1; /* the packet the walk would cut after */
    uint32_t past = (uint32_t)len; /* runs past the end: the rest is one truncated packet */
    memcpy(bufs[n - 1] + mid + 8, &past, 4);
    bufs[n] = malloc(len);
    CHECK_REQUIRE(bufs[n] != NULL);
    memcpy(bufs[n], buf, len);
    lens[n++] = len / 2 + 13;
    CHECK_REQUIRE(n == NDAMAGE);
    check_split_identical(po, 2, bufs, lens, NDAMAGE);
    check_split_identical(po, 3, bufs, lens, NDAMAGE);
    for (int i = 0; i < NDAMAGE; i++) {
        free(bufs[i]);
    }
}

/* One buffer's output, copied: it lives only until the proc's next start. */
struct snapshot {
    uint32_t n;
    uint64_t total;
    uint32_t ts[PER];
    uint8_t nrings[PER];
    sdd_rich_ring rings[PER * 8];
};

static void take_snapshot(struct snapshot *sn, const sdd_rich_output *o)
{
    CHECK_REQUIRE(o->events->n <= PER && o->max_rings == 8);
    sn->n = o->events->n;
    sn->total = o->total_rings;
    memcpy(sn->ts, o->events->timestamp, sn->n * sizeof(uint32_t));
    memcpy(sn->nrings, o->nrings, sn->n);
    memcpy(sn->rings, o->rings, (size_t)sn->n * 8 * sizeof(sdd_rich_ring));
}

static bool same_snapshot(const struct snapshot *a, const sdd_rich_output *o)
{
    bool same = o->events->n == a->n && o->total_rings == a->total &&
                memcmp(o->events->timestamp, a->ts, a->n * sizeof(uint32_t)) == 0 &&
                memcmp(o->nrings, a->nrings, a->n) == 0;
    for (uint32_t i = 0; same && i < a->n; i++) { /* the slots past an event's rings are stale */
        same =
            memcmp(o->rings + i * 8, a->rings + i * 8, a->nrings[i] * sizeof(sdd_rich_ring)) == 0;
    }
    return same;
}

/* Buffers started 3 ahead of their finish (opts.inflight 3) come out in order, each with the
 * events and rings one buffer at a time gives; a fourth start, a run with buffers waiting, and
 * a finish with none are refused. Buffers 0, 1, ... wrap around twice through the slots. */
static void check_pipelined(const sdd_rich_proc_opts *po, uint8_t **bufs, const size_t *lens)
{
    static struct snapshot want[NBUF];
    sdd_rich_proc *one = NULL, *pipe = NULL;
    CHECK_OK(sdd_rich_proc_create(po, &one));
    for (int b = 0; b < NBUF; b++) {
        sdd_rich_output o;
        CHECK_OK(sdd_rich_proc_run(one, bufs[b], lens[b], &o));
        take_snapshot(&want[b], &o);
    }
    sdd_rich_proc_destroy(one);
    sdd_rich_proc_opts pp = *po;
    pp.inflight = 3;
    CHECK_OK(sdd_rich_proc_create(&pp, &pipe));
    sdd_rich_output o;
    CHECK_EQ(sdd_rich_proc_finish(pipe, &o), SDD_EINVAL);
    int differ = 0, finished = 0;
    for (int k = 0; k < 2 * NBUF; k++) {
        int b = k % NBUF;
        if (sdd_rich_proc_pending(pipe) == 3) {
            CHECK_EQ(sdd_rich_proc_start(pipe, bufs[b], lens[b], NULL, 0), SDD_EBUSY);
            CHECK_EQ(sdd_rich_proc_run(pipe, bufs[b], lens[b], &o), SDD_EBUSY);
            CHECK_OK(sdd_rich_proc_finish(pipe, &o));
            differ += !same_snapshot(&want[finished++ % NBUF], &o);
        }
        CHECK_OK(sdd_rich_proc_start(pipe, bufs[b], lens[b], NULL, 0));
    }
    CHECK_EQ(sdd_rich_proc_pending(pipe), 3);
    while (sdd_rich_proc_pending(pipe) > 0) {
        CHECK_OK(sdd_rich_proc_finish(pipe, &o));
        differ += !same_snapshot(&want[finished++ % NBUF], &o);
    }
    CHECK_EQ(finished, 2 * NBUF);
    CHECK_EQ(differ, 0);
    CHECK_EQ(sdd_rich_proc_finish(pipe, &o), SDD_EINVAL);
    CHECK_EQ(sdd_rich_proc_start_flush(pipe, NULL, 0), SDD_EINVAL);
    CHECK_EQ(sdd_rich_proc_start(pipe, bufs[0], po->max_bytes + 1, NULL, 0), SDD_ETOOBIG);
    CHECK_EQ(sdd_rich_proc_pending(pipe), 0);
    sdd_rich_proc_destroy(pipe);
    sdd_rich_proc *none = NULL;
    pp.inflight = SDD_RICH_PROC_MAX_INFLIGHT + 1;
    CHECK_EQ(sdd_rich_proc_create(&pp, &none), SDD_EINVAL);
    pp.inflight = 2;
    pp.split = 2; /* a split shares one buffer's rings out: one buffer at a time */
    CHECK_EQ(sdd_rich_proc_create(&pp, &none), SDD_EINVAL);
    CHECK(none == NULL);
}

/* The merged events of a run, in order: timestamp, hits and rings per event. */
struct events {
    uint32_t n;
    uint32_t ts[2 * NBUF * PER];
    uint8_t nhits[2 * NBUF * PER], nrings[2 * NBUF * PER];
};

static void add_events(struct events *ev, const sdd_rich_output *o)
{
    for (uint32_t i = 0; i < o->events->n && ev->n < 2 * NBUF * PER; i++, ev->n++) {
        ev->ts[ev->n] = o->events->timestamp[i];
        ev->nhits[ev->n] = o->events->nhits[i];
        ev->nrings[ev->n] = o->nrings[i];
    }
}

static bool same_events(const struct events *a, const struct events *b)
{
    return a->n == b->n && memcmp(a->ts, b->ts, a->n * sizeof(a->ts[0])) == 0 &&
           memcmp(a->nhits, b->nhits, a->n) == 0 && memcmp(a->nrings, b->nrings, a->n) == 0;
}

/* Every ref through a stage (the last one may be the stream's end): the events out, in order. */
static void run_stage(const sdd_rich_proc_opts *po, sdd_rich_buffer_ref *refs, int nrefs,
                      struct events *ev)
{
    sdd_spsc *in = NULL, *outq = NULL;
    CHECK_OK(sdd_spsc_create(16, &in));
    CHECK_OK(sdd_spsc_create(16, &outq));
    sdd_rich_stage *st = NULL;
    CHECK_OK(sdd_rich_stage_start(po, in, outq, -1, &st));
    CHECK_REQUIRE(st != NULL);
    int queued = 0, got = 0;
    while (got < nrefs) {
        if (queued < nrefs && sdd_spsc_enqueue(in, &refs[queued]) == SDD_OK) {
            queued++;
        }
        void *v;
        if (sdd_spsc_dequeue(outq, &v) == SDD_OK) {
            sdd_rich_buffer_ref *ref = v;
            CHECK(ref == &refs[got]);
            CHECK_OK(ref->status);
            add_events(ev, &ref->out);
            sdd_rich_stage_release(st, ref);
            got++;
        }
    }
    sdd_rich_stage_stop(st, NULL, NULL);
    sdd_spsc_destroy(in);
    sdd_spsc_destroy(outq);
}

/* All events as one stream of packets, cut after every 1 to 5 packets: with opts.stream and
 * its end queued, the stage gives the uncut stream's events; merged alone, cut events come
 * out in parts. A stage stopped before the end is queued stops cleanly (and logs the loss). */
static void stream_stage(const sdd_rich_proc_opts *base, const sdd_rich_pmtab *tab)
{
    size_t cap = (size_t)NBUF * PER * 4 * sdd_rich_evt_bytes(64);
    uint8_t *stream = malloc(cap);
    CHECK_REQUIRE(stream != NULL);
    int64_t len = sdd_rich_pack(tab, evs, NBUF * PER, SDD_RICH_PKT_MAX, stream, cap, NULL);
    CHECK_REQUIRE(len > 0);
    static struct events whole, streamed, alone, cut_short;
    sdd_rich_proc_opts po = *base;
    po.max_bytes = cap;
    sdd_rich_proc *p = NULL;
    CHECK_OK(sdd_rich_proc_create(&po, &p));
    sdd_rich_output o;
    CHECK_OK(sdd_rich_proc_run(p, stream, (size_t)len, &o));
    add_events(&whole, &o);
    sdd_rich_proc_destroy(p);

    enum { MAX_REFS = 4096 };
    static sdd_rich_buffer_ref refs[MAX_REFS];
    int nrefs = 0;
    uint64_t rs = 99;
    for (size_t q = 0; q < (size_t)len && nrefs < MAX_REFS - 1;) {
        size_t from = q;
        for (unsigned k = 1 + (unsigned)(check_rand(&rs) % 5); k > 0 && q < (size_t)len; k--) {
            uint32_t plen;
            memcpy(&plen, stream + q + 8, 4);
            q += plen;
        }
        refs[nrefs++] = (sdd_rich_buffer_ref){.data = stream + from, .len = q - from};
    }
    refs[nrefs] = (sdd_rich_buffer_ref){.data = NULL, .len = 0}; /* the end */
    po = *base;
    po.stream = true;
    run_stage(&po, refs, nrefs + 1, &streamed);
    CHECK(whole.n > NBUF * PER * 9 / 10);
    CHECK(same_events(&streamed, &whole));
    printf("stage stream: %d buffers, %u events as the uncut stream's %u\n", nrefs, streamed.n,
           whole.n);
    /* The same stream through one proc with 2 buffers in flight, its end started too. */
    static struct events piped;
    po = *base;
    po.max_bytes = cap;
    po.inflight = 2;
    sdd_rich_carry *carry = NULL;
    CHECK_OK(sdd_rich_carry_create(po.max_bytes, &carry));
    CHECK_OK(sdd_rich_proc_create(&po, &p));
    for (int k = 0; k <= nrefs; k++) {
        if (sdd_rich_proc_pending(p) == 2) {
            CHECK_OK(sdd_rich_proc_finish(p, &o));
            add_events(&piped, &o);
        }
        CHECK_OK(k < nrefs ? sdd_rich_proc_start(p, refs[k].data, refs[k].len, carry, (uint64_t)k)
                           : sdd_rich_proc_start_flush(p, carry, (uint64_t)k));
    }
    while (sdd_rich_proc_pending(p) > 0) {
        CHECK_OK(sdd_rich_proc_finish(p, &o));
        add_events(&piped, &o);
    }
    CHECK(same_events(&piped, &whole));
    CHECK_EQ(sdd_rich_carry_events(carry), 0);
    sdd_rich_proc_destroy(p);
    sdd_rich_carry_destroy(carry);
    po = *base;
    po.stream = false;
    run_stage(&po, refs, nrefs, &alone);
    CHECK(alone.n > whole.n); /* cut events in parts */
    po.stream = true;
    run_stage(&po, refs, nrefs / 2, &cut_short); /* no end queued */
    CHECK(cut_short.n > 0 && cut_short.n < whole.n);
    free(stream);
}

int main(void)
{
    sdd_rich_proc_opts po;
    sdd_rich_proc_opts_default(&po);
    po.max_bytes = PER * 4 * sdd_rich_evt_bytes(64);
    sdd_rich_pmtab *tab = NULL;
    uint8_t *bufs[NBUF];
    size_t lens[NBUF];
    setup(&tab, bufs, lens, po.max_bytes);

    sdd_rich_proc *p = NULL;
    CHECK_OK(sdd_rich_proc_create(&po, &p));
    int total_mismatch = 0;
    for (int b = 0; b < NBUF; b++) {
        sdd_rich_output out;
        CHECK_OK(sdd_rich_proc_run(p, bufs[b], lens[b], &out));
        int mm = compare(b, &out);
        CHECK(mm >= 0);
        total_mismatch += mm;
    }
    printf("ring-count mismatches, buffer vs event by event: %d of %d events\n", total_mismatch,
           NBUF * PER);
    CHECK(total_mismatch <= NBUF * PER / 200);
    sdd_rich_ef_stats ef;
    sdd_rich_merge_stats ms;
    sdd_rich_proc_stats(p, &ef, &ms);
    CHECK_EQ(ef.bad_magic + ef.bad_signature + ef.truncated + ef.count_mismatch, 0);
    CHECK(ms.fused > 0);
    check_split_identical(&po, 2, bufs, lens, NBUF);
    check_split_identical(&po, 3, bufs, lens, NBUF);
    check_split_damaged(&po, bufs[2], lens[2]);
    check_pipelined(&po, bufs, lens);
    sdd_rich_proc_opts bad = po;
    bad.split = 65;
    sdd_rich_proc *none = NULL;
    CHECK_EQ(sdd_rich_proc_create(&bad, &none), SDD_EINVAL);
    CHECK(none == NULL);
    /* Damage: a truncated and a scribbled buffer still process, and the damage is counted. */
    sdd_rich_output out;
    CHECK_OK(sdd_rich_proc_run(p, bufs[0], lens[0] - 37, &out));
    memset(bufs[1] + 100, 0xA5, 300);
    CHECK_OK(sdd_rich_proc_run(p, bufs[1], lens[1], &out));
    sdd_rich_proc_stats(p, &ef, &ms);
    CHECK(ef.truncated >= 1);
    CHECK(ef.bad_magic + ef.bad_signature + ef.bad_evt_length + ef.bad_channel > 0);
    CHECK_EQ(sdd_rich_proc_run(p, bufs[0], po.max_bytes + 1, &out), SDD_ETOOBIG);
    sdd_rich_proc_destroy(p);
    /* Repack buffer 1 for the stage. */
    lens[1] =
        (size_t)sdd_rich_pack(tab, evs + PER, PER, SDD_RICH_PKT_MAX, bufs[1], po.max_bytes, NULL);

    /* The stage: same answers through the thread. */
    sdd_spsc *in = NULL, *outq = NULL;
    CHECK_OK(sdd_spsc_create(16, &in));
    CHECK_OK(sdd_spsc_create(16, &outq));
    sdd_rich_stage *st = NULL;
    CHECK_OK(sdd_rich_stage_start(&po, in, outq, -1, &st));
    sdd_rich_buffer_ref refs[NBUF];
    for (int b = 0; b < NBUF; b++) {
        refs[b] = (sdd_rich_buffer_ref){.data = bufs[b], .len = lens[b]};
        CHECK_OK(sdd_spsc_enqueue(in, &refs[b]));
    }
    int got = 0, stage_mismatch = 0;
    while (got < NBUF) {
        void *v;
        if (sdd_spsc_dequeue(outq, &v) != SDD_OK) {
            continue;
        }
        sdd_rich_buffer_ref *ref = v;
        CHECK(ref == &refs[got]); /* in order */
        CHECK_OK(ref->status);
        int mm = compare(got, &ref->out);
        CHECK(mm >= 0);
        stage_mismatch += mm;
        sdd_rich_stage_release(st, ref);
        got++;
    }
    CHECK_EQ(stage_mismatch, total_mismatch);
    sdd_hist lat;
    uint64_t nbuf = 0;
    sdd_rich_stage_stop(st, &lat, &nbuf);
    CHECK_EQ(nbuf, NBUF);
    CHECK_EQ(sdd_hist_count(&lat), NBUF);
    sdd_spsc_destroy(in);
    sdd_spsc_destroy(outq);
    for (int b = 0; b < NBUF; b++) {
        free(bufs[b]);
    }
    stream_stage(&po, tab);
    sdd_rich_pmtab_destroy(tab);
    return check_finish();
}
