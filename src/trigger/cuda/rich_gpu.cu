/* The RICH ring finder on a CUDA GPU (sddaq/rich_gpu.h): device and pinned buffers, the copies
 * in and out on one stream, CUDA events around each step, and the launch of the kernel of
 * rich_gpu_kernel.cuh. Only built when CMake finds nvcc; rich_gpu_none.c stands in otherwise.
 *
 * A batch goes in as one block and its rings come out as one: each CUDA call costs the
 * submitting CPU thread microseconds, which at 1024 events a buffer is nanoseconds an event,
 * the CPU's share of the chain (docs/PERFORMANCE.md, session 24). */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "sddaq/log.h"
#include "sddaq/rich_gpu.h"
#include "trigger/rich_gpu_impl.h"
#include "trigger/rich_impl.h"
}
#include "trigger/cuda/rich_gpu_kernel.cuh"

#define GPU_LOG "rich-gpu"

enum { EV_START, EV_COPIED_IN, EV_FOUND, EV_DONE, EV_COUNT };

struct sdd_rich_gpu {
    sdd_rich_gpu_opts opts;
    char name[256];
    float r_max;
    int grid, block;
    int events_per_block; /* warps per block for the warp state, else 0: one per thread */
    size_t smem;
    cudaStream_t stream;
    cudaEvent_t ev[EV_COUNT];
    bool busy;
    uint32_t n;   /* events of the batch in flight or last done */
    size_t nhits; /* their hits */
    sdd_rich_gpu_times times;
    /* Device: the tables; the batch in and the rings out, one block each (batch_layout). */
    sdd_rich_pmtab *d_tab;
    uint8_t (*d_pm_bins)[RICH_CENTRES];
    uint8_t *d_in, *d_out;
    /* Pinned host copies of the blocks. */
    uint8_t *h_in, *h_out;
};

/* Where the parts of a batch of n events with `hits` hits lie in the in and out blocks: first
 * hits, then the events' first-hit indices and hit counts; the ring counts, then the rings
 * (64-byte aligned). The same offsets on the host and the GPU. */
struct batch_layout {
    size_t first, nhits, in_bytes;
    size_t rings, out_bytes;
};

static size_t align64(size_t x)
{
    return (x + 63) & ~(size_t)63;
}

static struct batch_layout batch_layout(size_t n, size_t hits, uint32_t max_rings)
{
    struct batch_layout l;
    l.first = align64(hits * sizeof(uint16_t));
    l.nhits = l.first + n * sizeof(uint32_t);
    l.in_bytes = l.nhits + n;
    l.rings = align64(n);
    l.out_bytes = l.rings + n * max_rings * sizeof(sdd_rich_ring);
    return l;
}

/* Log a failed CUDA call once, where it failed. */
static bool cuda_ok(cudaError_t e, const char *what)
{
    if (e == cudaSuccess) {
        return true;
    }
    SDD_ERROR(GPU_LOG, "%s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
    return false;
}

typedef void (*kernel_fn)(const struct rich_gpu_params);

static kernel_fn kernel_of(const sdd_rich_gpu_opts *o)
{
    if (o->state == SDD_RICH_GPU_WARP) {
        return o->max_regs == 64    ? rich_gpu_find_warp<8>
               : o->max_regs == 128 ? rich_gpu_find_warp<4>
                                    : rich_gpu_find_warp<1>;
    }
    bool shared = o->state == SDD_RICH_GPU_SHARED, swar = o->steps == SDD_RICH_GPU_SWAR;
    if (shared) {
        return swar ? rich_gpu_find<true, true> : rich_gpu_find<true, false>;
    }
    return swar ? rich_gpu_find<false, true> : rich_gpu_find<false, false>;
}

/* Threads per block and blocks: as many as stay resident at once (the kernel loops over the
 * events), so the launch does not depend on the batch size. */
static bool size_launch(sdd_rich_gpu *g, const cudaDeviceProp *prop)
{
    kernel_fn k = kernel_of(&g->opts);
    bool shared = g->opts.state == SDD_RICH_GPU_SHARED;
    size_t per = sizeof(sdd_rich_finder);
    int block = (int)g->opts.block;
    g->events_per_block = 0; /* a thread per event */
    if (g->opts.state == SDD_RICH_GPU_WARP) {
        block = block == 0 ? 128 : block;
        g->smem = per * (size_t)(block / 32);
        g->events_per_block = block / 32;
    } else if (shared) {
        size_t room = prop->sharedMemPerBlockOptin;
        if (block == 0) {
            block = (int)(room / per) / 32 * 32;
        }
        g->smem = per * (size_t)block;
        if (block == 0 || g->smem > room) {
            SDD_ERROR(GPU_LOG, "shared state: %zu B per thread, %zu B per block on %s", per, room,
                      prop->name);
            return false;
        }
        if (!cuda_ok(
                cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)g->smem),
                "cudaFuncSetAttribute")) {
            return false;
        }
    } else if (block == 0) {
        block = 128;
    }
    int per_sm = 0;
    if (!cuda_ok(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k, block, g->smem),
                 "cudaOccupancyMaxActiveBlocksPerMultiprocessor")) {
        return false;
    }
    if (per_sm == 0) {
        SDD_ERROR(GPU_LOG, "a block of %d threads does not fit on %s", block, prop->name);
        return false;
    }
    g->block = block;
    g->grid = per_sm * prop->multiProcessorCount;
    return true;
}

/* The tables the kernel reads: the PM table and every PM's bins, from a CPU finder. */
static sdd_err upload_tables(sdd_rich_gpu *g)
{
    sdd_rich_find_opts fo = g->opts.find;
    fo.simd = SDD_RICH_SIMD_PORTABLE;
    sdd_rich_finder *f;
    sdd_err err = sdd_rich_finder_create(&fo, &f);
    if (err != SDD_OK) {
        return err;
    }
    g->opts.find = f->opts;
    g->r_max = f->r_max;
    size_t bins = (size_t)f->tab->npm * RICH_CENTRES;
    err = SDD_EIO;
    if (cuda_ok(cudaMalloc(&g->d_tab, sizeof(*g->d_tab)), "cudaMalloc") &&
        cuda_ok(cudaMalloc(&g->d_pm_bins, bins), "cudaMalloc") &&
        cuda_ok(cudaMemcpy(g->d_tab, f->tab, sizeof(*g->d_tab), cudaMemcpyHostToDevice),
                "cudaMemcpy") &&
        cuda_ok(cudaMemcpy(g->d_pm_bins, f->pm_bins, bins, cudaMemcpyHostToDevice), "cudaMemcpy")) {
        err = SDD_OK;
    }
    sdd_rich_finder_destroy(f);
    return err;
}

static bool alloc_batch(sdd_rich_gpu *g)
{
    size_t n = g->opts.max_events;
    struct batch_layout l = batch_layout(n, n * SDD_RICH_MAX_HITS, g->opts.max_rings);
    return cuda_ok(cudaMalloc(&g->d_in, l.in_bytes), "cudaMalloc") &&
           cuda_ok(cudaMalloc(&g->d_out, l.out_bytes), "cudaMalloc") &&
           cuda_ok(cudaMallocHost(&g->h_in, l.in_bytes), "cudaMallocHost") &&
           cuda_ok(cudaMallocHost(&g->h_out, l.out_bytes), "cudaMallocHost");
}

sdd_err sdd_rich_gpu_create(const sdd_rich_gpu_opts *o, sdd_rich_gpu **out)
{
    sdd_err err = rich_gpu_args_check(o, out);
    if (err != SDD_OK) {
        return err;
    }
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        SDD_ERROR(GPU_LOG, "no CUDA GPU here (%s)",
                  e != cudaSuccess ? cudaGetErrorString(e) : "no device");
        return SDD_ENOTSUP;
    }
    if (o->device < 0 || o->device >= count) {
        SDD_ERROR(GPU_LOG, "device %d asked for, %d present", o->device, count);
        return SDD_EINVAL;
    }
    sdd_rich_gpu *g = (sdd_rich_gpu *)calloc(1, sizeof(*g));
    if (g == NULL) {
        return SDD_ENOMEM;
    }
    g->opts = *o;
    cudaDeviceProp prop;
    err = SDD_EIO;
    if (!cuda_ok(cudaSetDevice(o->device), "cudaSetDevice") ||
        !cuda_ok(cudaGetDeviceProperties(&prop, o->device), "cudaGetDeviceProperties")) {
        goto out_free;
    }
    snprintf(g->name, sizeof(g->name), "%s", prop.name);
    if (!size_launch(g, &prop)) {
        err = SDD_EINVAL;
        goto out_free;
    }
    if (!cuda_ok(cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking),
                 "cudaStreamCreate")) {
        goto out_free;
    }
    for (int i = 0; i < EV_COUNT; i++) {
        if (!cuda_ok(cudaEventCreate(&g->ev[i]), "cudaEventCreate")) {
            goto out_free;
        }
    }
    err = upload_tables(g);
    if (err != SDD_OK) {
        goto out_free;
    }
    if (!alloc_batch(g)) {
        err = SDD_ENOMEM;
        goto out_free;
    }
    *out = g;
    return SDD_OK;
out_free:
    sdd_rich_gpu_destroy(g);
    return err;
}

void sdd_rich_gpu_destroy(sdd_rich_gpu *g)
{
    if (g == NULL) {
        return;
    }
    if (g->stream != NULL) {
        cudaStreamSynchronize(g->stream);
    }
    void *dev[] = {g->d_tab, g->d_pm_bins, g->d_in, g->d_out};
    for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++) {
        cudaFree(dev[i]);
    }
    void *host[] = {g->h_in, g->h_out};
    for (size_t i = 0; i < sizeof(host) / sizeof(host[0]); i++) {
        cudaFreeHost(host[i]);
    }
    for (int i = 0; i < EV_COUNT; i++) {
        if (g->ev[i] != NULL) {
            cudaEventDestroy(g->ev[i]);
        }
    }
    if (g->stream != NULL) {
        cudaStreamDestroy(g->stream);
    }
    free(g);
}

const char *sdd_rich_gpu_name(const sdd_rich_gpu *g)
{
    return g != NULL ? g->name : "";
}

/* The batch's hits in total, and whether they are packed tight from 0, as the merge leaves
 * them: then one copy stages them, not one per event. */
static bool batch_is_tight(const sdd_rich_batch *b, size_t *hits)
{
    uint32_t at = 0;
    bool tight = true;
    for (uint32_t i = 0; i < b->n; i++) {
        tight &= b->first[i] == at && b->nhits[i] <= SDD_RICH_MAX_HITS;
        at += b->nhits[i];
    }
    *hits = at;
    return tight;
}

/* The batch packed tight into the pinned in block: a batch built by hand may leave room
 * between events, the copy takes only the hits there are. Returns the layout. */
static struct batch_layout stage_batch(sdd_rich_gpu *g, const sdd_rich_batch *b)
{
    size_t hits;
    bool tight = batch_is_tight(b, &hits);
    if (!tight) { /* count only the hits that go in */
        hits = 0;
        for (uint32_t i = 0; i < b->n; i++) {
            hits += b->nhits[i] <= SDD_RICH_MAX_HITS ? b->nhits[i] : 0;
        }
    }
    struct batch_layout l = batch_layout(b->n, hits, g->opts.max_rings);
    uint16_t *h_hits = (uint16_t *)g->h_in;
    uint32_t *h_first = (uint32_t *)(g->h_in + l.first);
    uint8_t *h_nhits = g->h_in + l.nhits;
    if (tight) {
        memcpy(h_hits, b->hits, hits * sizeof(uint16_t));
        memcpy(h_first, b->first, b->n * sizeof(uint32_t));
        memcpy(h_nhits, b->nhits, b->n);
        g->nhits = hits;
        return l;
    }
    hits = 0;
    for (uint32_t i = 0; i < b->n; i++) {
        /* An event the merge could not make gets no rings, and no room beyond its share. */
        unsigned n = b->nhits[i] <= SDD_RICH_MAX_HITS ? b->nhits[i] : 0;
        h_first[i] = (uint32_t)hits;
        h_nhits[i] = (uint8_t)n;
        memcpy(h_hits + hits, b->hits + b->first[i], n * sizeof(uint16_t));
        hits += n;
    }
    g->nhits = hits;
    return l;
}

/* The CUDA event of a step, where the steps are timed (EV_DONE always: wait needs it). */
static bool record(sdd_rich_gpu *g, int ev)
{
    if (!g->opts.times && ev != EV_DONE) {
        return true;
    }
    return cuda_ok(cudaEventRecord(g->ev[ev], g->stream), "cudaEventRecord");
}

sdd_err sdd_rich_gpu_submit(sdd_rich_gpu *g, const sdd_rich_batch *b)
{
    if (g == NULL || b == NULL) {
        return SDD_EINVAL;
    }
    if (g->busy) {
        return SDD_EBUSY;
    }
    if (b->n > g->opts.max_events) {
        return SDD_ETOOBIG;
    }
    if (!cuda_ok(cudaSetDevice(g->opts.device), "cudaSetDevice")) {
        return SDD_EIO; /* the stream's device, whichever thread submits */
    }
    g->n = b->n;
    struct batch_layout l = stage_batch(g, b);
    struct rich_gpu_params p;
    p.opts = g->opts.find;
    p.r_max = g->r_max;
    p.tab = g->d_tab;
    p.pm_bins = g->d_pm_bins;
    p.first = (const uint32_t *)(g->d_in + l.first);
    p.nhits = g->d_in + l.nhits;
    p.hits = (const uint16_t *)g->d_in;
    p.n = b->n;
    p.max_rings = g->opts.max_rings;
    p.nrings = g->d_out;
    p.rings = (sdd_rich_ring *)(g->d_out + l.rings);
    size_t n = b->n;
    cudaStream_t s = g->stream;
    bool ok = record(g, EV_START) &&
              cuda_ok(cudaMemcpyAsync(g->d_in, g->h_in, l.in_bytes, cudaMemcpyHostToDevice, s),
                      "cudaMemcpyAsync") &&
              record(g, EV_COPIED_IN);
    if (ok && n > 0) {
        size_t per_block = g->events_per_block > 0 ? (size_t)g->events_per_block : (size_t)g->block;
        unsigned grid = (unsigned)((n + per_block - 1) / per_block);
        grid = grid < (unsigned)g->grid ? grid : (unsigned)g->grid;
        kernel_of(&g->opts)<<<grid, g->block, g->smem, s>>>(p);
        ok = cuda_ok(cudaGetLastError(), "kernel launch");
    }
    ok = ok && record(g, EV_FOUND) &&
         cuda_ok(cudaMemcpyAsync(g->h_out, g->d_out, l.out_bytes, cudaMemcpyDeviceToHost, s),
                 "cudaMemcpyAsync") &&
         cuda_ok(cudaEventRecord(g->ev[EV_DONE], s), "cudaEventRecord");
    if (!ok) {
        cudaStreamSynchronize(s);
        return SDD_EIO;
    }
    g->busy = true;
    return SDD_OK;
}

static double elapsed_us(const sdd_rich_gpu *g, int from, int to)
{
    float ms = 0.0f;
    return cudaEventElapsedTime(&ms, g->ev[from], g->ev[to]) == cudaSuccess ? ms * 1e3 : 0.0;
}

int64_t sdd_rich_gpu_wait(sdd_rich_gpu *g, const uint8_t **nrings, const sdd_rich_ring **rings)
{
    if (g == NULL || !g->busy) {
        return SDD_EINVAL;
    }
    g->busy = false;
    if (!cuda_ok(cudaEventSynchronize(g->ev[EV_DONE]), "cudaEventSynchronize")) {
        return SDD_EIO;
    }
    if (g->opts.times) {
        g->times.h2d_us = elapsed_us(g, EV_START, EV_COPIED_IN);
        g->times.kernel_us = elapsed_us(g, EV_COPIED_IN, EV_FOUND);
        g->times.d2h_us = elapsed_us(g, EV_FOUND, EV_DONE);
    }
    struct batch_layout l = batch_layout(g->n, g->nhits, g->opts.max_rings);
    int64_t total = 0;
    for (uint32_t i = 0; i < g->n; i++) {
        total += g->h_out[i];
    }
    if (nrings != NULL) {
        *nrings = g->h_out;
    }
    if (rings != NULL) {
        *rings = (const sdd_rich_ring *)(g->h_out + l.rings);
    }
    return total;
}

void sdd_rich_gpu_last_times(const sdd_rich_gpu *g, sdd_rich_gpu_times *t)
{
    *t = g->times;
}
