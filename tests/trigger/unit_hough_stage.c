/* The Hough processing stage: every block gives exactly one result, in order, equal to a
 * direct sdd_hough_find on the same stubs; corrupt blocks give a result with the reader's
 * status and are counted; a consumer that holds every result (or a full output ring) stalls
 * the stage without losing a block, and releasing lets it finish; stop is clean with an empty
 * ring and with results still held. */
#include <string.h>

#include "check.h"
#include "sddaq/clock.h"
#include "sddaq/cpu.h"
#include "sddaq/trigger.h"

#define NVALID     120
#define NCORRUPT   5
#define NBLOCKS    (NVALID + NCORRUPT)
#define MAX_TRACKS 64
#define BLOCK_CAP  (SDD_STUB_BLOCK_HEADER + 5000 * SDD_STUB_PACKED_BYTES)
#define WAIT_NS    (5 * SDD_NS_PER_S)

struct block {
    sdd_hough_block_ref ref;
    uint8_t *buf;
    sdd_err want; /* status the stage must report */
    int ntracks;  /* direct sdd_hough_find */
    sdd_hough_track tracks[MAX_TRACKS];
};

static struct block blocks[NBLOCKS];
static sdd_hough_opts opts;

static void track_eq(const sdd_hough_track *a, const sdd_hough_track *b)
{
    CHECK_EQ(a->col, b->col);
    CHECK_EQ(a->row, b->row);
    CHECK(a->qpt == b->qpt && a->phi_t == b->phi_t);
    CHECK_EQ(a->layers, b->layers);
    CHECK_EQ(a->nlayers, b->nlayers);
    CHECK_EQ(a->nstubs, b->nstubs);
    CHECK_EQ(a->flags, b->flags);
    CHECK_EQ(a->ncells, b->ncells);
    unsigned kept = a->nstubs < SDD_HOUGH_CELL_SLOTS ? a->nstubs : SDD_HOUGH_CELL_SLOTS;
    CHECK(memcmp(a->stubs, b->stubs, kept * sizeof(a->stubs[0])) == 0);
}

/* Generated events as stub blocks, then corrupt ones: what the stage must say about each is
 * what the reader and the finder say when called directly. */
static void make_blocks(void)
{
    sdd_hough_gen_opts go;
    sdd_hough_gen_opts_default(&go);
    CHECK_OK(sdd_hough_gen_opts_pileup(&go, 200));
    go.seed = 7;
    sdd_hough_gen *gen = NULL;
    CHECK_REQUIRE(sdd_hough_gen_create(&go, &gen) == SDD_OK);
    sdd_hough_event *ev = malloc(sizeof(*ev));
    sdd_stub *stubs = malloc(SDD_HOUGH_MAX_STUBS * 2 * sizeof(*stubs));
    CHECK_REQUIRE(ev != NULL && stubs != NULL);
    for (int i = 0; i < NBLOCKS; i++) {
        blocks[i].buf = malloc(BLOCK_CAP);
        CHECK_REQUIRE(blocks[i].buf != NULL);
    }
    for (int i = 0; i < NVALID; i++) {
        CHECK_OK(sdd_hough_gen_next(gen, ev));
        int len = sdd_stub_block_write(blocks[i].buf, BLOCK_CAP, (uint16_t)(i % 32), ev->stubs,
                                       ev->nstubs);
        CHECK_REQUIRE(len > 0);
        blocks[i].ref = (sdd_hough_block_ref){blocks[i].buf, (size_t)len};
        blocks[i].want = SDD_OK;
    }
    /* A second event for the corrupt blocks to start from. */
    CHECK_OK(sdd_hough_gen_next(gen, ev));
    int len = 0;
    struct block *b = &blocks[NVALID];
    /* Bad magic. */
    len = sdd_stub_block_write(b[0].buf, BLOCK_CAP, 1, ev->stubs, ev->nstubs);
    CHECK_REQUIRE(len > SDD_STUB_BLOCK_HEADER);
    b[0].buf[0] ^= 0xff;
    b[0].ref = (sdd_hough_block_ref){b[0].buf, (size_t)len};
    b[0].want = SDD_EPROTO;
    /* Truncated in the middle of a stub. */
    len = sdd_stub_block_write(b[1].buf, BLOCK_CAP, 2, ev->stubs, ev->nstubs);
    b[1].ref = (sdd_hough_block_ref){b[1].buf, (size_t)len - 3};
    b[1].want = SDD_EPROTO;
    /* A stub of all zeros: no VALID bit. */
    len = sdd_stub_block_write(b[2].buf, BLOCK_CAP, 3, ev->stubs, ev->nstubs);
    memset(b[2].buf + SDD_STUB_BLOCK_HEADER + 2 * SDD_STUB_PACKED_BYTES, 0, SDD_STUB_PACKED_BYTES);
    b[2].ref = (sdd_hough_block_ref){b[2].buf, (size_t)len};
    b[2].want = SDD_ECORRUPT;
    /* More stubs than the finder accepts. */
    size_t many = SDD_HOUGH_MAX_STUBS + 100;
    for (size_t k = 0; k < many; k++) {
        stubs[k] = ev->stubs[k % ev->nstubs];
    }
    len = sdd_stub_block_write(b[3].buf, BLOCK_CAP, 4, stubs, many);
    CHECK_REQUIRE(len > 0);
    b[3].ref = (sdd_hough_block_ref){b[3].buf, (size_t)len};
    b[3].want = SDD_ETOOBIG;
    /* No data at all. */
    b[4].ref = (sdd_hough_block_ref){NULL, 0};
    b[4].want = SDD_EINVAL;

    sdd_hough *h = NULL;
    CHECK_REQUIRE(sdd_hough_create(&opts, &h) == SDD_OK);
    for (int i = 0; i < NBLOCKS; i++) {
        size_t n = 0;
        uint16_t sector = 0;
        if (blocks[i].ref.data == NULL) {
            continue;
        }
        sdd_err err = sdd_stub_block_read(blocks[i].ref.data, blocks[i].ref.len, &sector, stubs,
                                          SDD_HOUGH_MAX_STUBS, &n);
        CHECK_EQ(err, blocks[i].want);
        if (err == SDD_OK) {
            CHECK_EQ(sector, i % 32);
            blocks[i].ntracks = sdd_hough_find(h, stubs, n, blocks[i].tracks, MAX_TRACKS);
            CHECK(blocks[i].ntracks >= 0);
        }
    }
    sdd_hough_destroy(h);
    free(stubs);
    free(ev);
    sdd_hough_gen_destroy(gen);
}

static sdd_hough_result *pop(sdd_spsc *out)
{
    void *p = NULL;
    uint64_t deadline = sdd_now_ns() + WAIT_NS;
    while (sdd_spsc_dequeue(out, &p) != SDD_OK) {
        if (sdd_now_ns() > deadline) {
            return NULL;
        }
        sdd_sleep_ns(10 * SDD_NS_PER_US);
    }
    return p;
}

static void check_result(const sdd_hough_result *r, int i)
{
    const struct block *b = &blocks[i];
    CHECK(r->input == &b->ref);
    CHECK_EQ(r->status, b->want);
    CHECK(r->latency_ns > 0);
    if (b->want != SDD_OK) {
        CHECK_EQ(r->ntracks, 0);
        return;
    }
    CHECK_EQ(r->sector, i % 32);
    CHECK_EQ(r->ntracks, b->ntracks);
    int kept = b->ntracks < MAX_TRACKS ? b->ntracks : MAX_TRACKS;
    for (int t = 0; t < kept && (uint32_t)t < r->ntracks; t++) {
        track_eq(&r->tracks[t], &b->tracks[t]);
    }
}

/* Everything through a stage with a consumer that keeps up: one result per block, in order. */
static void test_all_blocks(int cpu)
{
    sdd_spsc *in = NULL, *out = NULL;
    CHECK_REQUIRE(sdd_spsc_create(16, &in) == SDD_OK && sdd_spsc_create(8, &out) == SDD_OK);
    sdd_hough_stage *st = NULL;
    CHECK_REQUIRE(sdd_hough_stage_start(&opts, in, out, 8, MAX_TRACKS, cpu, &st) == SDD_OK);
    int sent = 0, got = 0;
    uint64_t tracks = 0;
    uint64_t deadline = sdd_now_ns() + 4 * WAIT_NS;
    while (got < NBLOCKS && sdd_now_ns() < deadline) {
        while (sent < NBLOCKS && sdd_spsc_enqueue(in, &blocks[sent].ref) == SDD_OK) {
            sent++;
        }
        void *p;
        int before = got;
        while (sdd_spsc_dequeue(out, &p) == SDD_OK) {
            check_result(p, got);
            tracks += ((sdd_hough_result *)p)->ntracks;
            sdd_hough_stage_release(st, p);
            got++;
        }
        if (got == before) {
            sdd_sleep_ns(10 * SDD_NS_PER_US); /* the stage may be pinned to this CPU */
        }
    }
    CHECK_EQ(got, NBLOCKS);
    sdd_hough_stage_stats stats;
    sdd_hough_stage_stop(st, &stats);
    CHECK_EQ(stats.blocks, NBLOCKS);
    CHECK_EQ(stats.rejected, NCORRUPT);
    CHECK_EQ(stats.tracks, tracks);
    CHECK_EQ(sdd_hist_count(&stats.latency), NBLOCKS);
    void *p;
    CHECK(sdd_spsc_dequeue(out, &p) == SDD_EAGAIN); /* nothing beyond one result per block */
    sdd_spsc_destroy(in);
    sdd_spsc_destroy(out);
}

/* The consumer holds every result: the stage stops taking blocks, loses none, and goes on
 * once results come back. With a small output ring the ring is the limit instead. */
static void test_backpressure(unsigned depth, unsigned out_cap)
{
    enum { N = 40 };
    sdd_spsc *in = NULL, *out = NULL;
    CHECK_REQUIRE(sdd_spsc_create(64, &in) == SDD_OK && sdd_spsc_create(out_cap, &out) == SDD_OK);
    unsigned cap = sdd_spsc_capacity(out);
    sdd_hough_stage *st = NULL;
    CHECK_REQUIRE(sdd_hough_stage_start(&opts, in, out, depth, MAX_TRACKS, -1, &st) == SDD_OK);
    for (int i = 0; i < N; i++) {
        CHECK_OK(sdd_spsc_enqueue(in, &blocks[i].ref));
    }
    sdd_hough_result *held[N];
    int got = 0;
    /* Take what comes, release nothing. */
    uint64_t deadline = sdd_now_ns() + WAIT_NS;
    while ((unsigned)got < depth && sdd_now_ns() < deadline) {
        void *p;
        if (depth <= cap) {
            if (sdd_spsc_dequeue(out, &p) == SDD_OK) {
                held[got++] = p;
            }
        } else if (sdd_spsc_count(out) == cap) {
            break; /* the output ring is the limit: leave it full */
        }
        sdd_sleep_ns(10 * SDD_NS_PER_US);
    }
    sdd_sleep_ns(50 * SDD_NS_PER_MS); /* room for a stage that wrongly goes on */
    if (depth <= cap) {
        CHECK_EQ(got, depth);
        CHECK_EQ(sdd_spsc_count(out), 0);
        CHECK_EQ(sdd_spsc_count(in), N - depth);
    } else {
        /* cap results in the ring, one more finished and waiting for room. */
        CHECK_EQ(sdd_spsc_count(out), cap);
        CHECK_EQ(sdd_spsc_count(in), N - cap - 1);
    }
    /* Now drain and release: every block arrives, in order. */
    for (int i = 0; i < got; i++) {
        check_result(held[i], i);
        sdd_hough_stage_release(st, held[i]);
    }
    while (got < N) {
        sdd_hough_result *r = pop(out);
        CHECK_REQUIRE(r != NULL);
        check_result(r, got++);
        sdd_hough_stage_release(st, r);
    }
    sdd_hough_stage_stats stats;
    sdd_hough_stage_stop(st, &stats);
    CHECK_EQ(stats.blocks, N);
    CHECK_EQ(stats.rejected, 0);
    sdd_spsc_destroy(in);
    sdd_spsc_destroy(out);
}

/* Stop with nothing to do; stop with blocks queued but results held (they are freed); bad
 * arguments are refused. */
static void test_stop_and_args(void)
{
    sdd_spsc *in = NULL, *out = NULL;
    CHECK_REQUIRE(sdd_spsc_create(8, &in) == SDD_OK && sdd_spsc_create(8, &out) == SDD_OK);
    sdd_hough_stage *st = NULL;
    CHECK_REQUIRE(sdd_hough_stage_start(&opts, in, out, 4, MAX_TRACKS, -1, &st) == SDD_OK);
    sdd_hough_stage_stats stats;
    memset(&stats, 0xff, sizeof(stats));
    sdd_hough_stage_stop(st, &stats);
    CHECK_EQ(stats.blocks, 0);
    CHECK_EQ(stats.rejected, 0);
    CHECK_EQ(stats.tracks, 0);
    CHECK_EQ(sdd_hist_count(&stats.latency), 0);
    sdd_hough_stage_stop(NULL, NULL);

    /* Results still held by the consumer at stop are the stage's to free. */
    CHECK_REQUIRE(sdd_hough_stage_start(&opts, in, out, 4, 0, -1, &st) == SDD_OK);
    for (int i = 0; i < 3; i++) {
        CHECK_OK(sdd_spsc_enqueue(in, &blocks[i].ref));
    }
    for (int i = 0; i < 3; i++) {
        sdd_hough_result *r = pop(out);
        CHECK_REQUIRE(r != NULL);
        CHECK(r->input == &blocks[i].ref);
        CHECK_EQ(r->ntracks, blocks[i].ntracks); /* counted although none are kept */
    }
    sdd_hough_stage_stop(st, NULL);

    sdd_hough_stage *none = NULL;
    CHECK_EQ(sdd_hough_stage_start(&opts, in, out, 0, 8, -1, &none), SDD_EINVAL);
    CHECK_EQ(sdd_hough_stage_start(&opts, NULL, out, 4, 8, -1, &none), SDD_EINVAL);
    CHECK_EQ(sdd_hough_stage_start(NULL, in, out, 4, 8, -1, &none), SDD_EINVAL);
    sdd_hough_opts bad = opts;
    bad.geom.ncols = 0;
    CHECK(sdd_hough_stage_start(&bad, in, out, 4, 8, -1, &none) != SDD_OK);
    CHECK(none == NULL);
    sdd_spsc_destroy(in);
    sdd_spsc_destroy(out);
}

int main(void)
{
    sdd_hough_opts_default(&opts);
    make_blocks();
    test_all_blocks(-1);
    int cpu = sdd_cpu_current();
    test_all_blocks(cpu >= 0 ? cpu : 0); /* pinned to a CPU this process may use */
    test_backpressure(4, 64);            /* the consumer holds every result */
    test_backpressure(16, 4);            /* the output ring fills first */
    test_stop_and_args();
    for (int i = 0; i < NBLOCKS; i++) {
        free(blocks[i].buf);
    }
    return check_finish();
}
