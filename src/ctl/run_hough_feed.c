/* The hough-emu feed: owns one source's replay pool of stub blocks. All events are generated
 * at create, so the data path is one lookup and one memcpy per event. The blocks lie back to
 * back in one buffer (grown by doubling while generating, trimmed at the end) with an offset
 * table: block i is blob[off[i] .. off[i+1]). Every source of a run runs the same generator
 * (same seed and pileup) and keeps only its own layers, so the sources agree on every event
 * without talking to each other. */
#include <stdlib.h>
#include <string.h>

#include "run_hough_feed.h"
#include "sddaq/clock.h"
#include "sddaq/log.h"
#include "sddaq/trigger.h"

#define POOL_DEFAULT 4096u
#define SOURCES_MAX  6u /* one per barrel layer */
#define BLOB_INITIAL (256u << 10)

struct run_hough_feed {
    uint32_t pool;        /* events in the pool */
    uint32_t max_payload; /* longest block */
    uint8_t *blob;        /* the blocks, back to back */
    size_t *off;          /* pool + 1 entries */
};

/* Room for need more bytes after used; doubles the buffer. */
static sdd_err reserve(uint8_t **blob, size_t *cap, size_t used, size_t need)
{
    if (*cap - used >= need) {
        return SDD_OK;
    }
    size_t ncap = *cap;
    while (ncap - used < need) {
        ncap *= 2;
    }
    uint8_t *p = realloc(*blob, ncap);
    if (p == NULL) {
        return SDD_ENOMEM;
    }
    *blob = p;
    *cap = ncap;
    return SDD_OK;
}

/* Generate the pool into f (blob and off allocated here). */
static sdd_err generate(struct run_hough_feed *f, const sdd_hough_gen_opts *go, uint32_t index,
                        uint32_t nsources)
{
    sdd_hough_gen *gen = NULL;
    sdd_err err = sdd_hough_gen_create(go, &gen);
    if (err != SDD_OK) {
        return err;
    }
    sdd_hough_event *ev = malloc(sizeof(*ev));
    sdd_stub *mine = malloc(SDD_HOUGH_EVENT_MAX_STUBS * sizeof(*mine));
    size_t cap = BLOB_INITIAL, used = 0;
    f->blob = malloc(cap);
    f->off = malloc(((size_t)f->pool + 1) * sizeof(*f->off));
    if (ev == NULL || mine == NULL || f->blob == NULL || f->off == NULL) {
        err = SDD_ENOMEM;
        goto out_free;
    }
    for (uint32_t e = 0; e < f->pool; e++) {
        if ((err = sdd_hough_gen_next(gen, ev)) != SDD_OK) {
            goto out_free;
        }
        size_t n = 0;
        for (uint32_t i = 0; i < ev->nstubs; i++) {
            if (ev->stubs[i].layer % nsources == index) {
                mine[n++] = ev->stubs[i];
            }
        }
        size_t need = SDD_STUB_BLOCK_HEADER + n * SDD_STUB_PACKED_BYTES;
        if ((err = reserve(&f->blob, &cap, used, need)) != SDD_OK) {
            goto out_free;
        }
        int len = sdd_stub_block_write(f->blob + used, cap - used, 0, mine, n);
        if (len < 0) {
            /* The generator's stubs have been through the packing already: cannot happen. */
            SDD_ERROR("ctl", "hough-emu: event %u does not pack: %s", e, sdd_strerror(len));
            err = len;
            goto out_free;
        }
        f->off[e] = used;
        used += (size_t)len;
        if ((uint32_t)len > f->max_payload) {
            f->max_payload = (uint32_t)len;
        }
    }
    f->off[f->pool] = used;
    uint8_t *trimmed = realloc(f->blob, used); /* used > 0: every block has a header */
    if (trimmed != NULL) {
        f->blob = trimmed;
    }
out_free:
    free(mine);
    free(ev);
    sdd_hough_gen_destroy(gen);
    return err; /* on failure the caller frees blob and off */
}

sdd_err run_hough_feed_create(const struct sdd_cfg_source *src, uint32_t index, uint32_t nsources,
                              uint32_t pool_events, struct run_hough_feed **out)
{
    if (src == NULL || out == NULL) {
        return SDD_EINVAL;
    }
    if (src->kind != SDD_SRC_HOUGH_EMU) {
        SDD_ERROR("ctl", "hough-emu feed: the source is '%s', not 'hough-emu'",
                  sdd_source_kind_name(src->kind));
        return SDD_EINVAL;
    }
    if (nsources < 1 || nsources > SOURCES_MAX || index >= nsources) {
        SDD_ERROR("ctl",
                  "hough-emu feed: source %u of %u (1 to %u sources, one layer each at least)",
                  index, nsources, SOURCES_MAX);
        return SDD_EINVAL;
    }
    sdd_hough_gen_opts go;
    sdd_hough_gen_opts_default(&go);
    sdd_err err = sdd_hough_gen_opts_pileup(&go, src->pileup); /* logs a bad pileup */
    if (err != SDD_OK) {
        return err;
    }
    go.seed = src->seed;
    struct run_hough_feed *f = calloc(1, sizeof(*f));
    if (f == NULL) {
        return SDD_ENOMEM;
    }
    f->pool = pool_events != 0 ? pool_events : POOL_DEFAULT;
    uint64_t t0 = sdd_now_ns();
    err = generate(f, &go, index, nsources);
    if (err != SDD_OK) {
        run_hough_feed_destroy(f);
        return err;
    }
    SDD_INFO("ctl",
             "hough-emu source %u of %u: %u events at PU %g, seed %llu: %.1f stubs per event, "
             "payload at most %u B, generated in %.1f ms",
             index, nsources, f->pool, (double)src->pileup, (unsigned long long)src->seed,
             (double)(f->off[f->pool] - (size_t)f->pool * SDD_STUB_BLOCK_HEADER) /
                 SDD_STUB_PACKED_BYTES / f->pool,
             f->max_payload, (double)(sdd_now_ns() - t0) / SDD_NS_PER_MS);
    *out = f;
    return SDD_OK;
}

void run_hough_feed_destroy(struct run_hough_feed *f)
{
    if (f == NULL) {
        return;
    }
    free(f->blob);
    free(f->off);
    free(f);
}

uint32_t run_hough_feed_max_payload(const struct run_hough_feed *f)
{
    return f->max_payload;
}

static uint64_t feed_ready(void *arg)
{
    (void)arg;
    return UINT64_MAX;
}

static long feed_payload(void *arg, uint64_t event_id, void *dst, size_t cap)
{
    const struct run_hough_feed *f = arg;
    uint32_t i = (uint32_t)(event_id % f->pool);
    size_t len = f->off[i + 1] - f->off[i];
    if (len > cap) {
        return SDD_ETOOBIG;
    }
    memcpy(dst, f->blob + f->off[i], len);
    return (long)len;
}

struct sdd_evb_feed run_hough_feed_bind(struct run_hough_feed *f)
{
    return (struct sdd_evb_feed){.ready = feed_ready, .payload = feed_payload, .arg = f};
}

uint32_t run_hough_feed_stubs(const struct run_hough_feed *f, uint64_t event_id)
{
    uint32_t i = (uint32_t)(event_id % f->pool);
    size_t len = f->off[i + 1] - f->off[i];
    return (uint32_t)((len - SDD_STUB_BLOCK_HEADER) / SDD_STUB_PACKED_BYTES);
}
