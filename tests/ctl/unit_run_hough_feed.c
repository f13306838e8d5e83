/* The hough-emu feed: the blocks of a run's sources are stub blocks (sector 0) whose union is
 * exactly the generator's event (as multisets of packed stubs), each source carrying only its
 * layers, for 1 to 6 sources; event e replays pool entry e % pool; the same config gives the
 * same bytes and another seed other ones; a too small cap is refused without a byte written;
 * max_payload bounds every block; the finder sees in the union what it sees in the event, and
 * finds tracks in events with signal tracks. Bad arguments are refused. Prints the time taken
 * to generate the default pool (4096 events) at PU 200. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ctl/run_hough_feed.h"
#include "sddaq/clock.h"
#include "sddaq/trigger.h"

#define POOL       64
#define BUF_CAP    (SDD_STUB_BLOCK_HEADER + SDD_HOUGH_EVENT_MAX_STUBS * SDD_STUB_PACKED_BYTES)
#define GUARD      64
#define MAX_TRACKS 256

static struct sdd_cfg_source source(uint64_t seed, float pileup)
{
    struct sdd_cfg_stage st;
    sdd_config_stage_init(&st, SDD_STAGE_SOURCE);
    st.source.kind = SDD_SRC_HOUGH_EMU;
    st.source.seed = seed;
    st.source.pileup = pileup;
    return st.source;
}

/* The generator's first n events under the feed's options. */
static sdd_hough_event *reference(const struct sdd_cfg_source *src, uint32_t n)
{
    sdd_hough_gen_opts go;
    sdd_hough_gen_opts_default(&go);
    CHECK_OK(sdd_hough_gen_opts_pileup(&go, src->pileup));
    go.seed = src->seed;
    sdd_hough_gen *gen = NULL;
    CHECK_REQUIRE(sdd_hough_gen_create(&go, &gen) == SDD_OK);
    sdd_hough_event *evs = malloc(n * sizeof(*evs));
    CHECK_REQUIRE(evs != NULL);
    for (uint32_t i = 0; i < n; i++) {
        CHECK_OK(sdd_hough_gen_next(gen, &evs[i]));
    }
    sdd_hough_gen_destroy(gen);
    return evs;
}

static int cmp_packed(const void *a, const void *b)
{
    return memcmp(a, b, SDD_STUB_PACKED_BYTES);
}

/* Event e's payload from feed f into buf (BUF_CAP bytes); returns its length. */
static size_t payload(struct sdd_evb_feed *fd, uint64_t e, uint8_t *buf)
{
    long len = fd->payload(fd->arg, e, buf, BUF_CAP);
    CHECK_REQUIRE(len >= SDD_STUB_BLOCK_HEADER);
    return (size_t)len;
}

/* n feeds of one config: for each event id, the blocks are valid, carry only their layers,
 * their stub counts are what run_hough_feed_stubs says, and their union is the generator's
 * event. Returns the number of events checked. */
static int check_split(const struct sdd_cfg_source *src, uint32_t n, uint32_t pool,
                       const uint64_t *ids, size_t nids)
{
    struct run_hough_feed *f[6] = {0};
    struct sdd_evb_feed fd[6];
    for (uint32_t i = 0; i < n; i++) {
        CHECK_REQUIRE(run_hough_feed_create(src, i, n, pool, &f[i]) == SDD_OK);
        fd[i] = run_hough_feed_bind(f[i]);
        CHECK(fd[i].ready(fd[i].arg) == UINT64_MAX);
    }
    sdd_hough_event *ref = reference(src, pool);
    uint8_t *buf = malloc(BUF_CAP);
    uint8_t *want = malloc(SDD_HOUGH_EVENT_MAX_STUBS * SDD_STUB_PACKED_BYTES);
    uint8_t *got = malloc(SDD_HOUGH_EVENT_MAX_STUBS * SDD_STUB_PACKED_BYTES);
    sdd_stub *stubs = malloc(SDD_HOUGH_EVENT_MAX_STUBS * sizeof(*stubs));
    CHECK_REQUIRE(buf != NULL && want != NULL && got != NULL && stubs != NULL);
    int checked = 0;
    for (size_t k = 0; k < nids; k++) {
        const sdd_hough_event *ev = &ref[ids[k] % pool];
        for (uint32_t s = 0; s < ev->nstubs; s++) {
            CHECK_OK(sdd_stub_pack(&ev->stubs[s], want + s * SDD_STUB_PACKED_BYTES));
        }
        size_t ngot = 0;
        bool layers_ok = true, counts_ok = true;
        for (uint32_t i = 0; i < n; i++) {
            size_t len = payload(&fd[i], ids[k], buf);
            uint16_t sector = 0xffff;
            size_t ns = 0;
            CHECK_OK(sdd_stub_block_read(buf, len, &sector, stubs, SDD_HOUGH_EVENT_MAX_STUBS, &ns));
            CHECK_EQ(sector, 0);
            counts_ok &= ns == run_hough_feed_stubs(f[i], ids[k]);
            for (size_t s = 0; s < ns; s++) {
                layers_ok &= stubs[s].layer % n == i;
            }
            CHECK_REQUIRE(ngot + ns <= SDD_HOUGH_EVENT_MAX_STUBS);
            memcpy(got + ngot * SDD_STUB_PACKED_BYTES, buf + SDD_STUB_BLOCK_HEADER,
                   ns * SDD_STUB_PACKED_BYTES);
            ngot += ns;
        }
        CHECK(layers_ok);
        CHECK(counts_ok);
        CHECK_EQ(ngot, ev->nstubs);
        qsort(want, ev->nstubs, SDD_STUB_PACKED_BYTES, cmp_packed);
        qsort(got, ngot, SDD_STUB_PACKED_BYTES, cmp_packed);
        bool same = ngot == ev->nstubs && memcmp(want, got, ngot * SDD_STUB_PACKED_BYTES) == 0;
        CHECK(same);
        if (!same) {
            fprintf(stderr, "  %u sources, event %llu: union differs from the generator's\n", n,
                    (unsigned long long)ids[k]);
        }
        checked++;
    }
    free(stubs);
    free(got);
    free(want);
    free(buf);
    free(ref);
    for (uint32_t i = 0; i < n; i++) {
        run_hough_feed_destroy(f[i]);
    }
    return checked;
}

static void test_split(void)
{
    struct sdd_cfg_source src = source(11, 200.0f);
    uint64_t ids[POOL + 4];
    for (uint64_t e = 0; e < POOL; e++) {
        ids[e] = e;
    }
    ids[POOL] = POOL;                 /* replays entry 0 */
    ids[POOL + 1] = 3 * POOL + 17;    /* entry 17 */
    ids[POOL + 2] = 1000000000007ull; /* far into a run */
    ids[POOL + 3] = UINT64_MAX;
    size_t nids = sizeof(ids) / sizeof(ids[0]);
    CHECK_EQ(check_split(&src, 2, POOL, ids, nids), nids);
    for (uint32_t n = 1; n <= 6; n++) {
        CHECK_EQ(check_split(&src, n, 16, ids, 20), 20);
    }
    /* Other pileups, other seeds: the split holds there too (PU 1000 fills events up to the
     * generator's limit). */
    struct sdd_cfg_source pu0 = source(3, 0.0f), pu1000 = source(5, 1000.0f);
    CHECK_EQ(check_split(&pu0, 3, 8, ids, 8), 8);
    CHECK_EQ(check_split(&pu1000, 4, 8, ids, 8), 8);
}

/* Event e and e + pool are the same bytes; the same config gives the same pool, another seed
 * another one. */
static void test_replay_and_determinism(void)
{
    struct sdd_cfg_source src = source(11, 200.0f), other = source(12, 200.0f);
    struct run_hough_feed *a = NULL, *b = NULL, *c = NULL;
    CHECK_REQUIRE(run_hough_feed_create(&src, 1, 2, POOL, &a) == SDD_OK);
    CHECK_REQUIRE(run_hough_feed_create(&src, 1, 2, POOL, &b) == SDD_OK);
    CHECK_REQUIRE(run_hough_feed_create(&other, 1, 2, POOL, &c) == SDD_OK);
    struct sdd_evb_feed fa = run_hough_feed_bind(a), fb = run_hough_feed_bind(b),
                        fc = run_hough_feed_bind(c);
    uint8_t *x = malloc(BUF_CAP), *y = malloc(BUF_CAP);
    CHECK_REQUIRE(x != NULL && y != NULL);
    int same = 0, differ = 0, replay = 0;
    for (uint64_t e = 0; e < POOL; e++) {
        size_t lx = payload(&fa, e, x), ly = payload(&fb, e, y);
        same += lx == ly && memcmp(x, y, lx) == 0;
        ly = payload(&fa, e + 5 * POOL, y);
        replay += lx == ly && memcmp(x, y, lx) == 0;
        ly = payload(&fc, e, y);
        differ += lx != ly || memcmp(x, y, lx) != 0;
    }
    CHECK_EQ(same, POOL);
    CHECK_EQ(replay, POOL);
    CHECK(differ > POOL * 9 / 10);
    CHECK_EQ(run_hough_feed_max_payload(a), run_hough_feed_max_payload(b));
    free(x);
    free(y);
    run_hough_feed_destroy(a);
    run_hough_feed_destroy(b);
    run_hough_feed_destroy(c);
}

/* A cap one byte short is refused and nothing is written; an exact cap is enough; every
 * block fits in max_payload, and the largest fills it. */
static void test_caps(void)
{
    struct sdd_cfg_source src = source(21, 200.0f);
    struct run_hough_feed *f = NULL;
    CHECK_REQUIRE(run_hough_feed_create(&src, 0, 2, POOL, &f) == SDD_OK);
    struct sdd_evb_feed fd = run_hough_feed_bind(f);
    uint32_t max = run_hough_feed_max_payload(f);
    CHECK(max >= SDD_STUB_BLOCK_HEADER && max <= BUF_CAP);
    uint8_t *buf = malloc(BUF_CAP + GUARD);
    CHECK_REQUIRE(buf != NULL);
    uint32_t longest = 0;
    bool untouched = true, exact = true, refused = true, fits = true;
    for (uint64_t e = 0; e < POOL; e++) {
        size_t len = payload(&fd, e, buf);
        longest = len > longest ? (uint32_t)len : longest;
        fits &= len <= max;
        fits &= len ==
                SDD_STUB_BLOCK_HEADER + (size_t)run_hough_feed_stubs(f, e) * SDD_STUB_PACKED_BYTES;
        memset(buf, 0xa5, BUF_CAP + GUARD);
        long r = fd.payload(fd.arg, e, buf, len - 1);
        refused &= r == SDD_ETOOBIG;
        for (size_t i = 0; i < BUF_CAP + GUARD; i++) {
            untouched &= buf[i] == 0xa5;
        }
        refused &= fd.payload(fd.arg, e, buf, 0) == SDD_ETOOBIG;
        r = fd.payload(fd.arg, e, buf, len);
        exact &= r == (long)len;
        for (size_t i = len; i < BUF_CAP + GUARD; i++) {
            untouched &= buf[i] == 0xa5;
        }
    }
    CHECK(refused);
    CHECK(untouched);
    CHECK(exact);
    CHECK(fits);
    CHECK_EQ(longest, max);
    free(buf);
    run_hough_feed_destroy(f);
}

/* The finder on the union of two sources' blocks gives the cells it gives on the generator's
 * event, and finds tracks in every event with a reconstructable signal track. */
static void test_finder_sanity(void)
{
    struct sdd_cfg_source src = source(31, 200.0f);
    struct run_hough_feed *f[2] = {0};
    struct sdd_evb_feed fd[2];
    for (uint32_t i = 0; i < 2; i++) {
        CHECK_REQUIRE(run_hough_feed_create(&src, i, 2, POOL, &f[i]) == SDD_OK);
        fd[i] = run_hough_feed_bind(f[i]);
    }
    sdd_hough_event *ref = reference(&src, POOL);
    sdd_hough_opts ho;
    sdd_hough_opts_default(&ho);
    sdd_hough *h = NULL;
    CHECK_REQUIRE(sdd_hough_create(&ho, &h) == SDD_OK);
    sdd_hough_track *ta = malloc(MAX_TRACKS * sizeof(*ta)), *tb = malloc(MAX_TRACKS * sizeof(*tb));
    sdd_stub *uni = malloc(SDD_HOUGH_EVENT_MAX_STUBS * sizeof(*uni));
    uint8_t *buf = malloc(BUF_CAP);
    CHECK_REQUIRE(ta != NULL && tb != NULL && uni != NULL && buf != NULL);
    int with_signal = 0, found = 0, cells_same = 0;
    for (uint64_t e = 0; e < POOL; e++) {
        size_t nu = 0;
        for (int i = 0; i < 2; i++) {
            size_t len = payload(&fd[i], e, buf), ns = 0;
            uint16_t sector;
            CHECK_OK(sdd_stub_block_read(buf, len, &sector, uni + nu,
                                         SDD_HOUGH_EVENT_MAX_STUBS - nu, &ns));
            nu += ns;
        }
        int na = sdd_hough_find(h, uni, nu, ta, MAX_TRACKS);
        int nb = sdd_hough_find(h, ref[e].stubs, ref[e].nstubs, tb, MAX_TRACKS);
        CHECK(na >= 0 && na <= MAX_TRACKS);
        bool same = na == nb;
        for (int t = 0; same && t < na; t++) {
            same = ta[t].col == tb[t].col && ta[t].row == tb[t].row &&
                   ta[t].layers == tb[t].layers && ta[t].nstubs == tb[t].nstubs;
        }
        cells_same += same;
        bool signal = false;
        for (uint32_t t = 0; t < ref[e].ntracks; t++) {
            const sdd_truth_track *tt = &ref[e].tracks[t];
            signal |= tt->kind == SDD_TRUTH_SIGNAL &&
                      __builtin_popcount(tt->layers) >= ho.geom.min_layers &&
                      tt->phi_t > -ho.geom.phi_half && tt->phi_t < ho.geom.phi_half;
        }
        with_signal += signal;
        found += signal && na > 0;
    }
    CHECK_EQ(cells_same, POOL);
    CHECK(with_signal > POOL / 2); /* 3 signal tracks per event on average */
    CHECK_EQ(found, with_signal);
    free(buf);
    free(uni);
    free(ta);
    free(tb);
    sdd_hough_destroy(h);
    free(ref);
    run_hough_feed_destroy(f[0]);
    run_hough_feed_destroy(f[1]);
}

static void test_bad_arguments(void)
{
    struct sdd_cfg_source src = source(1, 200.0f);
    struct run_hough_feed *f = NULL; /* not written on failure */
    CHECK_EQ(run_hough_feed_create(&src, 0, 0, 8, &f), SDD_EINVAL);
    CHECK_EQ(run_hough_feed_create(&src, 0, 7, 8, &f), SDD_EINVAL);
    CHECK_EQ(run_hough_feed_create(&src, 2, 2, 8, &f), SDD_EINVAL);
    CHECK_EQ(run_hough_feed_create(NULL, 0, 1, 8, &f), SDD_EINVAL);
    CHECK_EQ(run_hough_feed_create(&src, 0, 1, 8, NULL), SDD_EINVAL);
    struct sdd_cfg_source evb = src;
    evb.kind = SDD_SRC_EVB_EMU;
    CHECK_EQ(run_hough_feed_create(&evb, 0, 1, 8, &f), SDD_EINVAL);
    struct sdd_cfg_source neg = source(1, -1.0f);
    CHECK_EQ(run_hough_feed_create(&neg, 0, 1, 8, &f), SDD_EINVAL);
    CHECK(f == NULL);
    run_hough_feed_destroy(NULL);
}

/* Pool 0 means 4096 events: entry 4096 replays entry 0. Prints how long generation took. */
static void test_default_pool(void)
{
    struct sdd_cfg_source src = source(1, 200.0f);
    struct run_hough_feed *f[2] = {0};
    uint64_t t0 = sdd_now_ns();
    CHECK_REQUIRE(run_hough_feed_create(&src, 0, 2, 0, &f[0]) == SDD_OK);
    uint64_t t1 = sdd_now_ns();
    CHECK_REQUIRE(run_hough_feed_create(&src, 1, 2, 0, &f[1]) == SDD_OK);
    uint64_t stubs = 0;
    for (uint64_t e = 0; e < 4096; e++) {
        stubs += run_hough_feed_stubs(f[0], e) + run_hough_feed_stubs(f[1], e);
    }
    printf("default pool: 4096 events at PU 200 in %.1f ms per source, %.1f stubs per event, "
           "max payload %u + %u B\n",
           (double)(t1 - t0) / SDD_NS_PER_MS, (double)stubs / 4096,
           run_hough_feed_max_payload(f[0]), run_hough_feed_max_payload(f[1]));
    CHECK(stubs > 4096 * 100 && stubs < 4096 * 250); /* about 160 at PU 200 */
    struct sdd_evb_feed fd = run_hough_feed_bind(f[0]);
    uint8_t *x = malloc(BUF_CAP), *y = malloc(BUF_CAP);
    CHECK_REQUIRE(x != NULL && y != NULL);
    size_t a = payload(&fd, 0, x), b = payload(&fd, 4095, y);
    CHECK(a != b || memcmp(x, y, a) != 0); /* the last entry is another event */
    b = payload(&fd, 4096, y);
    CHECK(a == b && memcmp(x, y, a) == 0);
    free(x);
    free(y);
    run_hough_feed_destroy(f[0]);
    run_hough_feed_destroy(f[1]);
}

int main(void)
{
    test_split();
    test_replay_and_determinism();
    test_caps();
    test_finder_sanity();
    test_bad_arguments();
    test_default_pool();
    return check_finish();
}
