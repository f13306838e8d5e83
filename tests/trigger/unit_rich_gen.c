/* RICH geometry, generator and event files (src/trigger/rich_geom.c, gen/rich_gen.c,
 * gen/rich_file.c): about 1000 PMs per spot, each channel maps to its board and back through
 * the nearest-PM search; a seed gives the same events and another seed others; every event
 * keeps the limits (64 hits, 3 rings, one hit per PM, truth counts that add up, hits near their
 * ring), the ring-count mix follows the probabilities, radii follow the particle mix;
 * a file reads back exactly what was written, and truncation or corruption is SDD_ECORRUPT
 * (a newer version SDD_ENOTSUP). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "sddaq/log.h"
#include "sddaq/trigger.h"

static void geometry(void)
{
    sdd_rich_geom g;
    sdd_rich_geom_default(&g);
    int npm = sdd_rich_geom_npm(&g);
    printf("PMs per spot: %d\n", npm);
    CHECK(npm > 950 && npm <= SDD_RICH_SPOT_PMS);
    CHECK_EQ(sdd_rich_geom_nboards(&g), 4);
    sdd_rich_pmtab *t = NULL;
    CHECK_OK(sdd_rich_pmtab_create(&g, &t));
    int per_board[4] = {0};
    for (unsigned ch = 0; ch < SDD_RICH_CHANNELS; ch++) {
        float x, y;
        bool has = sdd_rich_pmtab_pos(t, ch, &x, &y);
        CHECK_EQ(has, (ch % SDD_RICH_SPOT_PMS) < (unsigned)npm);
        if (has) {
            int b = sdd_rich_pmtab_board(t, ch);
            per_board[b]++;
            CHECK_EQ(b / 2, (int)(ch / SDD_RICH_SPOT_PMS));
            CHECK_EQ(sdd_rich_pmtab_nearest(t, ch / SDD_RICH_SPOT_PMS, x + 3, y - 4), (int)ch);
            CHECK(x * x + y * y <= 300.0f * 300.0f);
        }
    }
    for (int b = 0; b < 4; b++) {
        CHECK(per_board[b] > 400 && per_board[b] < 600);
    }
    CHECK_EQ(sdd_rich_pmtab_nearest(t, 0, 1000, 0), -1);
    CHECK_EQ(sdd_rich_pmtab_nearest(t, 2, 0, 0), -1);
    CHECK_EQ(sdd_rich_pmtab_board(t, 5000), -1);
    sdd_rich_pmtab_destroy(t);
    /* Radii: beta = 1 gives f * sqrt(2 (n-1)), about 189 mm; a 15 GeV pion about 104 mm. */
    CHECK(fabsf(sdd_rich_ring_radius(&g, 0, 1) - 189.3f) < 0.5f);
    CHECK(fabsf(sdd_rich_ring_radius(&g, 0.13957f, 15) - 104.0f) < 1.0f);
    CHECK_EQ(sdd_rich_ring_radius(&g, 0.494f, 15), 0); /* kaon below threshold */
    sdd_log_configure("none");
    sdd_rich_geom bad = g;
    bad.pitch = 5.0f; /* thousands of PMs: more than the 10-bit field */
    CHECK_EQ(sdd_rich_geom_check(&bad), SDD_EINVAL);
    bad = g;
    bad.boards_per_spot = 3;
    CHECK_EQ(sdd_rich_geom_check(&bad), SDD_EINVAL);
    sdd_log_configure("warn");
}

static bool event_eq(const sdd_rich_event *a, const sdd_rich_event *b)
{
    if (a->id != b->id || a->timestamp != b->timestamp || a->fine != b->fine ||
        a->nhits != b->nhits || a->nrings != b->nrings) {
        return false;
    }
    for (unsigned i = 0; i < a->nhits; i++) {
        if (a->hits[i] != b->hits[i] || a->hit_ring[i] != b->hit_ring[i]) {
            return false;
        }
    }
    return memcmp(a->rings, b->rings, a->nrings * sizeof(a->rings[0])) == 0;
}

static void determinism(void)
{
    sdd_rich_gen_opts o;
    sdd_rich_gen_opts_default(&o);
    sdd_rich_gen *a = NULL, *b = NULL, *c = NULL;
    CHECK_OK(sdd_rich_gen_create(&o, &a));
    CHECK_OK(sdd_rich_gen_create(&o, &b));
    o.seed = 2;
    CHECK_OK(sdd_rich_gen_create(&o, &c));
    int same = 0, differ = 0;
    for (int i = 0; i < 500; i++) {
        sdd_rich_event ea, eb, ec;
        sdd_rich_gen_next(a, &ea);
        sdd_rich_gen_next(b, &eb);
        sdd_rich_gen_next(c, &ec);
        same += event_eq(&ea, &eb);
        differ += !event_eq(&ea, &ec);
    }
    CHECK_EQ(same, 500);
    CHECK(differ > 450);
    sdd_rich_gen_destroy(a);
    sdd_rich_gen_destroy(b);
    sdd_rich_gen_destroy(c);
}

static void event_invariants(void)
{
    sdd_rich_gen_opts o;
    sdd_rich_gen_opts_default(&o);
    o.seed = 11;
    sdd_rich_gen *g = NULL;
    CHECK_OK(sdd_rich_gen_create(&o, &g));
    const sdd_rich_pmtab *t = sdd_rich_gen_pmtab(g);
    uint64_t by[4] = {0}, hits = 0, noise = 0, bad = 0;
    uint32_t last_ts = 0;
    const int N = 20000;
    for (int i = 0; i < N; i++) {
        sdd_rich_event ev;
        sdd_rich_gen_next(g, &ev);
        by[ev.nrings]++;
        hits += ev.nhits;
        if (i > 0 && ev.timestamp < last_ts + o.tick_min) {
            bad++;
        }
        last_ts = ev.timestamp;
        unsigned count[3] = {0};
        for (unsigned k = 0; k < ev.nhits; k++) {
            unsigned ch = SDD_RICH_HIT_CHANNEL(ev.hits[k]);
            float x, y;
            bad += !sdd_rich_pmtab_pos(t, ch, &x, &y);
            for (unsigned j = 0; j < k; j++) {
                bad += SDD_RICH_HIT_CHANNEL(ev.hits[j]) == ch; /* one hit per PM */
            }
            int r = ev.hit_ring[k];
            if (r < 0) {
                noise++;
                continue;
            }
            count[r]++;
            const sdd_rich_truth *tr = &ev.rings[r];
            float d = hypotf(x - tr->cx, y - tr->cy) - tr->r;
            /* Within the PM's reach (10.4 mm) plus 5 sigma of the 2 mm jitter. */
            bad += tr->spot != ch / SDD_RICH_SPOT_PMS || fabsf(d) > 21.0f;
        }
        for (unsigned r = 0; r < ev.nrings; r++) {
            bad += count[r] != ev.rings[r].nhits;
            bad += hypotf(ev.rings[r].cx, ev.rings[r].cy) > o.centre_max;
            bad += !(ev.rings[r].r > 90.0f && ev.rings[r].r < 190.0f);
        }
        bad += ev.nhits > SDD_RICH_MAX_HITS || ev.nrings > SDD_RICH_MAX_TRUTH;
    }
    CHECK_EQ(bad, 0);
    for (int k = 0; k < 4; k++) {
        double p = (double)by[k] / N;
        CHECK(fabs(p - o.ring_prob[k]) < 0.015);
    }
    double mean_noise = (double)noise / N;
    CHECK(mean_noise > 1.85 && mean_noise < 2.05); /* Poisson(2), a few lost to PM sharing */
    printf("hits/event %.2f, noise/event %.3f\n", (double)hits / N, mean_noise);
    sdd_rich_gen_destroy(g);
    /* Bad options are refused. */
    sdd_log_configure("none");
    o.ring_prob[0] = -1;
    CHECK_EQ(sdd_rich_gen_create(&o, &g), SDD_EINVAL);
    sdd_rich_gen_opts_default(&o);
    o.tick_mean = 1;
    CHECK_EQ(sdd_rich_gen_create(&o, &g), SDD_EINVAL);
    sdd_log_configure("warn");
}

static void files(void)
{
    char path[] = "/tmp/sddaq-rich-XXXXXX";
    int fd = mkstemp(path);
    CHECK_REQUIRE(fd >= 0);
    close(fd);
    sdd_rich_gen_opts o;
    sdd_rich_gen_opts_default(&o);
    sdd_rich_gen *g = NULL;
    CHECK_OK(sdd_rich_gen_create(&o, &g));
    static sdd_rich_event evs[200];
    sdd_rich_file *f = NULL;
    CHECK_OK(sdd_rich_file_create(path, &o.geom, &f));
    for (int i = 0; i < 200; i++) {
        sdd_rich_gen_next(g, &evs[i]);
        CHECK_OK(sdd_rich_file_write(f, &evs[i]));
    }
    CHECK_OK(sdd_rich_file_close(f));
    CHECK_OK(sdd_rich_file_open(path, &f));
    const sdd_rich_geom *fg = sdd_rich_file_geom(f);
    CHECK(fg->pitch == o.geom.pitch && fg->disc_radius == o.geom.disc_radius &&
          fg->focal == o.geom.focal && fg->n_minus_1 == o.geom.n_minus_1 &&
          fg->boards_per_spot == o.geom.boards_per_spot);
    CHECK_EQ(sdd_rich_file_write(f, &evs[0]), SDD_EINVAL);
    int same = 0;
    sdd_rich_event ev;
    for (int i = 0; i < 200; i++) {
        same += sdd_rich_file_read(f, &ev) == 1 && event_eq(&ev, &evs[i]);
    }
    CHECK_EQ(same, 200);
    CHECK_EQ(sdd_rich_file_read(f, &ev), 0);
    CHECK_OK(sdd_rich_file_close(f));

    /* Read the file's bytes, then damage copies of them. */
    FILE *fp = fopen(path, "rb");
    CHECK_REQUIRE(fp != NULL);
    static uint8_t bytes[1 << 20];
    size_t len = fread(bytes, 1, sizeof(bytes), fp);
    fclose(fp);
    sdd_log_configure("none");
    struct {
        size_t off;
        uint8_t val;
        sdd_err open_err, read_err;
    } cases[] = {
        {0, 'X', SDD_ECORRUPT, SDD_OK},      /* magic */
        {8, 2, SDD_ENOTSUP, SDD_OK},         /* newer version */
        {19, 0, SDD_ECORRUPT, SDD_OK},       /* pitch's top byte: geometry fails its check */
        {40, 0xFF, SDD_OK, SDD_ECORRUPT},    /* first record's length */
        {40 + 17, 65, SDD_OK, SDD_ECORRUPT}, /* hit count over 64 */
        {40 + 19, 1, SDD_OK, SDD_ECORRUPT},  /* pad byte */
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        uint8_t saved = bytes[cases[k].off];
        bytes[cases[k].off] = cases[k].val;
        fp = fopen(path, "wb");
        CHECK_REQUIRE(fp != NULL);
        fwrite(bytes, 1, len, fp);
        fclose(fp);
        bytes[cases[k].off] = saved;
        sdd_err err = sdd_rich_file_open(path, &f);
        CHECK_EQ(err, cases[k].open_err);
        if (err == SDD_OK) {
            CHECK_EQ(sdd_rich_file_read(f, &ev), cases[k].read_err);
            CHECK_EQ(sdd_rich_file_read(f, &ev), cases[k].read_err); /* sticky */
            sdd_rich_file_close(f);
        }
    }
    /* Every truncation inside the records: the whole events before the cut read back, then
     * SDD_ECORRUPT (or a clean end exactly at a record boundary). */
    for (size_t cut = 41; cut < len; cut += 7) {
        fp = fopen(path, "wb");
        fwrite(bytes, 1, cut, fp);
        fclose(fp);
        CHECK_OK(sdd_rich_file_open(path, &f));
        int rc;
        int n = 0;
        while ((rc = sdd_rich_file_read(f, &ev)) == 1) {
            n++;
        }
        CHECK(rc == SDD_ECORRUPT || rc == 0);
        CHECK(n < 200);
        sdd_rich_file_close(f);
    }
    sdd_log_configure("warn");
    unlink(path);
    sdd_rich_gen_destroy(g);
}

int main(void)
{
    geometry();
    determinism();
    event_invariants();
    files();
    return check_finish();
}
