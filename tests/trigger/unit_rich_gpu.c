/* The RICH ring finder on a CUDA GPU (sddaq/rich_gpu.h) against the CPU finder: on generated
 * events of the reference mix, plus events made to stress it (64 hits, pure noise, no hits,
 * hits on channels without a PM), every combination of state placement and histogram steps,
 * with both fits and with the multi-ring steps off, gives the CPU's rings bit for bit, batch
 * after batch. Bad options are refused before any GPU is looked for, so that part runs
 * everywhere; the comparison needs a GPU and skips (77) without one. */
#include <string.h>

#include "check.h"
#include "sddaq/log.h"
#include "sddaq/trigger.h"

#define EVENTS    20000
#define MAX_RINGS 8

/* Events of the reference mix, and after them hand-made ones, as one merged batch: packed
 * tight as the merge leaves them, or spread, each event at the start of its 64 hits' room
 * (the GPU stages the two layouts differently). */
static void make_batch(uint64_t seed, bool spread, sdd_rich_batch *b)
{
    sdd_rich_gen_opts go;
    sdd_rich_gen_opts_default(&go);
    go.seed = seed;
    sdd_rich_gen *gen;
    CHECK_OK(sdd_rich_gen_create(&go, &gen));
    CHECK_REQUIRE(gen != NULL);
    uint64_t rng = seed * 2654435761u + 1;
    b->n = 0;
    uint32_t hits = 0;
    for (uint32_t i = 0; i < EVENTS; i++) {
        sdd_rich_event ev;
        sdd_rich_gen_next(gen, &ev);
        unsigned n = ev.nhits;
        if (i % 97 == 1) {
            n = 0; /* no hits */
        } else if (i % 97 == 2) {
            n = SDD_RICH_MAX_HITS; /* full: channels at random, PM or not */
            for (unsigned k = 0; k < n; k++) {
                ev.hits[k] = (uint16_t)(check_rand(&rng) % SDD_RICH_CHANNELS);
            }
        } else if (i % 97 == 3) {
            for (unsigned k = 0; k < n; k++) { /* pure noise in one spot */
                ev.hits[k] = (uint16_t)(check_rand(&rng) % SDD_RICH_SPOT_PMS);
            }
        }
        hits = spread ? i * SDD_RICH_MAX_HITS : hits;
        b->first[i] = hits;
        b->nhits[i] = (uint8_t)n;
        for (unsigned k = 0; k < n; k++) {
            b->hits[hits++] = (uint16_t)SDD_RICH_HIT_CHANNEL(ev.hits[k]);
        }
        b->n++;
    }
    sdd_rich_gen_destroy(gen);
}

/* The CPU's rings of every event: nrings[i], rings at [i * MAX_RINGS]. */
static uint64_t cpu_rings(const sdd_rich_find_opts *fo, const sdd_rich_batch *b, uint8_t *nrings,
                          sdd_rich_ring *rings)
{
    sdd_rich_finder *f;
    CHECK_OK(sdd_rich_finder_create(fo, &f));
    CHECK_REQUIRE(f != NULL);
    uint64_t total = 0;
    for (uint32_t i = 0; i < b->n; i++) {
        int k = sdd_rich_find(f, b->hits + b->first[i], b->nhits[i], rings + (size_t)i * MAX_RINGS,
                              MAX_RINGS);
        CHECK_REQUIRE(k >= 0);
        nrings[i] = (uint8_t)k;
        total += (uint64_t)k;
    }
    sdd_rich_finder_destroy(f);
    return total;
}

/* Bit for bit, every byte: the finder writes the tail padding too, so that a result block
 * reused batch after batch holds no bytes of the last one. */
static bool same_rings(const sdd_rich_ring *a, const sdd_rich_ring *b, unsigned n)
{
    return memcmp(a, b, n * sizeof(*a)) == 0;
}

/* Events whose rings differ from the CPU's. */
static uint32_t differing(const sdd_rich_batch *b, const uint8_t *want_n, const sdd_rich_ring *want,
                          const uint8_t *got_n, const sdd_rich_ring *got)
{
    uint32_t bad = 0;
    for (uint32_t i = 0; i < b->n; i++) {
        size_t at = (size_t)i * MAX_RINGS;
        if (want_n[i] != got_n[i] || !same_rings(want + at, got + at, want_n[i])) {
            if (bad++ < 3) {
                fprintf(stderr, "event %u: cpu %u rings, gpu %u\n", i, want_n[i], got_n[i]);
            }
        }
    }
    return bad;
}

static void bad_opts(void)
{
    sdd_rich_gpu_opts o;
    sdd_rich_gpu *g = NULL;
    sdd_rich_gpu_opts_default(&o);
    o.find.method = SDD_RICH_PTOLEMY;
    CHECK_EQ(sdd_rich_gpu_create(&o, &g), SDD_EINVAL);
    sdd_rich_gpu_opts_default(&o);
    o.max_rings = 0;
    CHECK_EQ(sdd_rich_gpu_create(&o, &g), SDD_EINVAL);
    sdd_rich_gpu_opts_default(&o);
    o.block = 33;
    CHECK_EQ(sdd_rich_gpu_create(&o, &g), SDD_EINVAL);
    sdd_rich_gpu_opts_default(&o);
    o.max_regs = 96;
    CHECK_EQ(sdd_rich_gpu_create(&o, &g), SDD_EINVAL);
    sdd_rich_gpu_opts_default(&o);
    o.state = SDD_RICH_GPU_WARP;
    o.block = 256;
    CHECK_EQ(sdd_rich_gpu_create(&o, &g), SDD_EINVAL);
    CHECK(g == NULL);
}

/* One GPU configuration against the CPU over two batches, tight and spread; false when there
 * is no GPU. */
static bool compare(const sdd_rich_find_opts *fo, sdd_rich_gpu_state state,
                    sdd_rich_gpu_steps steps, uint32_t max_regs, sdd_rich_batch *batch,
                    uint8_t *want_n, sdd_rich_ring *want)
{
    sdd_rich_gpu_opts o;
    sdd_rich_gpu_opts_default(&o);
    o.find = *fo;
    o.max_events = EVENTS;
    o.max_rings = MAX_RINGS;
    o.state = state;
    o.steps = steps;
    o.max_regs = max_regs;
    sdd_rich_gpu *g = NULL;
    sdd_err err = sdd_rich_gpu_create(&o, &g);
    if (err == SDD_ENOTSUP) {
        return false;
    }
    CHECK_OK(err);
    CHECK_REQUIRE(g != NULL);
    for (uint64_t seed = 1; seed <= 2; seed++) {
        make_batch(seed + (uint64_t)fo->fit * 10, seed == 2, batch);
        uint64_t total = cpu_rings(fo, batch, want_n, want);
        CHECK_OK(sdd_rich_gpu_submit(g, batch));
        CHECK_EQ(sdd_rich_gpu_submit(g, batch), SDD_EBUSY);
        const uint8_t *got_n;
        const sdd_rich_ring *got;
        int64_t n = sdd_rich_gpu_wait(g, &got_n, &got);
        CHECK_EQ(n, (int64_t)total);
        CHECK_EQ(differing(batch, want_n, want, got_n, got), 0);
        CHECK(total > EVENTS / 2); /* the mix has about 1.3 rings per event */
        sdd_rich_gpu_times t;
        sdd_rich_gpu_last_times(g, &t);
        printf("%s state %d steps %d regs %u fit %d multi %d: %" PRIu64 " rings, kernel %.0f us\n",
               sdd_rich_gpu_name(g), (int)state, (int)steps, max_regs, (int)fo->fit,
               (int)fo->multi_ring, total, t.kernel_us);
    }
    CHECK_EQ(sdd_rich_gpu_wait(g, NULL, NULL), SDD_EINVAL); /* nothing in flight */
    batch->n = EVENTS + 1;
    CHECK_EQ(sdd_rich_gpu_submit(g, batch), SDD_ETOOBIG);
    batch->n = 0;
    CHECK_OK(sdd_rich_gpu_submit(g, batch)); /* an empty batch is fine */
    CHECK_EQ(sdd_rich_gpu_wait(g, NULL, NULL), 0);
    sdd_rich_gpu_destroy(g);
    return true;
}

/* Untimed (opts.times false, as the processing step runs it): the same rings, no times. */
static void untimed(const sdd_rich_find_opts *fo, sdd_rich_batch *batch, uint8_t *want_n,
                    sdd_rich_ring *want)
{
    sdd_rich_gpu_opts o;
    sdd_rich_gpu_opts_default(&o);
    CHECK(o.times);
    o.find = *fo;
    o.max_events = EVENTS;
    o.max_rings = MAX_RINGS;
    o.times = false;
    sdd_rich_gpu *g = NULL;
    CHECK_OK(sdd_rich_gpu_create(&o, &g));
    CHECK_REQUIRE(g != NULL);
    make_batch(3, false, batch);
    uint64_t total = cpu_rings(fo, batch, want_n, want);
    CHECK_OK(sdd_rich_gpu_submit(g, batch));
    const uint8_t *got_n;
    const sdd_rich_ring *got;
    CHECK_EQ(sdd_rich_gpu_wait(g, &got_n, &got), (int64_t)total);
    CHECK_EQ(differing(batch, want_n, want, got_n, got), 0);
    sdd_rich_gpu_times t;
    sdd_rich_gpu_last_times(g, &t);
    CHECK(t.h2d_us == 0 && t.kernel_us == 0 && t.d2h_us == 0);
    sdd_rich_gpu_destroy(g);
}

/* A processing step with its rings on the GPU (sdd_rich_proc_opts.gpu) gives the CPU step's
 * output for the same receive buffer; without a GPU it is refused with SDD_ENOTSUP, with a
 * split always with SDD_EINVAL. */
static void proc_on_gpu(bool gpu)
{
    sdd_rich_proc_opts po;
    sdd_rich_proc_opts_default(&po);
    CHECK(!po.gpu);
    sdd_rich_proc *cpu = NULL, *dev = NULL;
    po.gpu = true;
    po.split = 2;
    CHECK_EQ(sdd_rich_proc_create(&po, &dev), SDD_EINVAL);
    po.split = 1;
    sdd_err err = sdd_rich_proc_create(&po, &dev);
    CHECK_EQ(err, gpu ? SDD_OK : SDD_ENOTSUP);
    if (!gpu) {
        return;
    }
    po.gpu = false;
    CHECK_OK(sdd_rich_proc_create(&po, &cpu));
    CHECK_REQUIRE(cpu != NULL && dev != NULL);
    sdd_rich_gen_opts go;
    sdd_rich_gen_opts_default(&go);
    sdd_rich_gen *gen;
    CHECK_OK(sdd_rich_gen_create(&go, &gen));
    enum { N = 3000 };
    sdd_rich_event *evs = calloc(N, sizeof(*evs));
    uint8_t *buf = malloc(po.max_bytes);
    CHECK_REQUIRE(evs != NULL && buf != NULL);
    for (int i = 0; i < N; i++) {
        sdd_rich_gen_next(gen, &evs[i]);
    }
    int64_t len =
        sdd_rich_pack(sdd_rich_gen_pmtab(gen), evs, N, SDD_RICH_PKT_MAX, buf, po.max_bytes, NULL);
    CHECK_REQUIRE(len > 0);
    sdd_rich_output a, b;
    CHECK_OK(sdd_rich_proc_run(cpu, buf, (size_t)len, &a));
    CHECK_OK(sdd_rich_proc_run(dev, buf, (size_t)len, &b));
    CHECK_EQ(a.events->n, b.events->n);
    CHECK(a.events->n > N * 9 / 10); /* events with no hit send nothing */
    CHECK_EQ(a.total_rings, b.total_rings);
    CHECK_EQ(a.max_rings, b.max_rings);
    uint32_t bad = 0;
    for (uint32_t i = 0; i < a.events->n; i++) {
        size_t at = (size_t)i * a.max_rings;
        bad += a.nrings[i] != b.nrings[i] || !same_rings(a.rings + at, b.rings + at, a.nrings[i]);
    }
    CHECK_EQ(bad, 0);
    /* Two buffers in flight (opts.inflight): the second is found and merged while the GPU has
     * the first (the same buffer twice); both come back with the CPU's rings. */
    sdd_rich_proc *dev2 = NULL;
    po.gpu = true;
    po.inflight = 2;
    CHECK_OK(sdd_rich_proc_create(&po, &dev2));
    sdd_rich_output c;
    for (int round = 0; round < 3; round++) {
        CHECK_OK(sdd_rich_proc_start(dev2, buf, (size_t)len, NULL, 0));
        CHECK_OK(sdd_rich_proc_start(dev2, buf, (size_t)len, NULL, 0));
        CHECK_EQ(sdd_rich_proc_start(dev2, buf, (size_t)len, NULL, 0), SDD_EBUSY);
        for (int k = 0; k < 2; k++) {
            CHECK_OK(sdd_rich_proc_finish(dev2, &c));
            CHECK_EQ(c.events->n, a.events->n);
            CHECK_EQ(c.total_rings, a.total_rings);
            for (uint32_t i = 0; i < a.events->n; i++) {
                size_t at = (size_t)i * a.max_rings;
                bad += a.nrings[i] != c.nrings[i] ||
                       !same_rings(a.rings + at, c.rings + at, a.nrings[i]);
            }
        }
    }
    CHECK_EQ(bad, 0);
    sdd_rich_proc_destroy(dev2);
    free(buf);
    free(evs);
    sdd_rich_gen_destroy(gen);
    sdd_rich_proc_destroy(cpu);
    sdd_rich_proc_destroy(dev);
}

int main(void)
{
    bad_opts();
    sdd_rich_batch batch;
    CHECK_OK(sdd_rich_batch_init(&batch, EVENTS + 1));
    uint8_t *want_n = calloc(EVENTS, 1);
    sdd_rich_ring *want = calloc((size_t)EVENTS * MAX_RINGS, sizeof(*want));
    CHECK_REQUIRE(want_n != NULL && want != NULL);
    sdd_rich_find_opts fo;
    sdd_rich_find_opts_default(&fo);
    bool gpu = compare(&fo, SDD_RICH_GPU_LOCAL, SDD_RICH_GPU_SWAR, 0, &batch, want_n, want);
    if (gpu) {
        compare(&fo, SDD_RICH_GPU_LOCAL, SDD_RICH_GPU_BYTES, 0, &batch, want_n, want);
        compare(&fo, SDD_RICH_GPU_SHARED, SDD_RICH_GPU_SWAR, 0, &batch, want_n, want);
        compare(&fo, SDD_RICH_GPU_SHARED, SDD_RICH_GPU_BYTES, 0, &batch, want_n, want);
        for (uint32_t regs = 0; regs <= 128; regs += 64) {
            compare(&fo, SDD_RICH_GPU_WARP, SDD_RICH_GPU_SWAR, regs, &batch, want_n, want);
        }
        fo.fit = SDD_RICH_FIT_TAUBIN;
        compare(&fo, SDD_RICH_GPU_LOCAL, SDD_RICH_GPU_SWAR, 0, &batch, want_n, want);
        compare(&fo, SDD_RICH_GPU_WARP, SDD_RICH_GPU_SWAR, 0, &batch, want_n, want);
        fo.fit = SDD_RICH_FIT_CRAWFORD;
        fo.multi_ring = false;
        compare(&fo, SDD_RICH_GPU_LOCAL, SDD_RICH_GPU_SWAR, 0, &batch, want_n, want);
        compare(&fo, SDD_RICH_GPU_WARP, SDD_RICH_GPU_SWAR, 0, &batch, want_n, want);
        fo.multi_ring = true;
        untimed(&fo, &batch, want_n, want);
    }
    proc_on_gpu(gpu);
    free(want_n);
    free(want);
    sdd_rich_batch_fini(&batch);
    if (!gpu) {
        int rc = check_finish();
        return rc != 0 ? rc : check_skip("no CUDA GPU here (or sddaq built without CUDA)");
    }
    return check_finish();
}
