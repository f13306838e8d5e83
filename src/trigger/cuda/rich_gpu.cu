/* The RICH ring finder on a CUDA GPU (sddaq/rich_gpu.h): device and pinned buffers, the copies
 * in and out on one stream, CUDA events around each step, and the launch of the kernel of
 * rich_gpu_kernel.cuh. Only built when CMake finds nvcc; rich_gpu_none.c stands in otherwise. */
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
    /* Device: the tables, the batch, the result. */
    sdd_rich_pmtab *d_tab;
    uint8_t (*d_pm_bins)[RICH_CENTRES];
    uint32_t *d_first;
    uint8_t *d_nhits;
    uint16_t *d_hits;
    uint8_t *d_nrings;
    sdd_rich_ring *d_rings;
    /* Pinned host copies of the same. */
    uint32_t *h_first;
    uint8_t *h_nhits;
    uint16_t *h_hits;
    uint8_t *h_nrings;
    sdd_rich_ring *h_rings;
};

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
    size_t n = g->opts.max_events, hits = n * SDD_RICH_MAX_HITS;
    size_t rings = n * g->opts.max_rings * sizeof(sdd_rich_ring);
    return cuda_ok(cudaMalloc(&g->d_first, n * sizeof(uint32_t)), "cudaMalloc") &&
           cuda_ok(cudaMalloc(&g->d_nhits, n), "cudaMalloc") &&
           cuda_ok(cudaMalloc(&g->d_hits, hits * sizeof(uint16_t)), "cudaMalloc") &&
           cuda_ok(cudaMalloc(&g->d_nrings, n), "cudaMalloc") &&
           cuda_ok(cudaMalloc(&g->d_rings, rings), "cudaMalloc") &&
           cuda_ok(cudaMallocHost(&g->h_first, n * sizeof(uint32_t)), "cudaMallocHost") &&
           cuda_ok(cudaMallocHost(&g->h_nhits, n), "cudaMallocHost") &&
           cuda_ok(cudaMallocHost(&g->h_hits, hits * sizeof(uint16_t)), "cudaMallocHost") &&
           cuda_ok(cudaMallocHost(&g->h_nrings, n), "cudaMallocHost") &&
           cuda_ok(cudaMallocHost(&g->h_rings, rings), "cudaMallocHost");
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
    void *dev[] = {g->d_tab,  g->d_pm_bins, g->d_first, g->d_nhits,
                   g->d_hits, g->d_nrings,  g->d_rings};
    for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++) {
        cudaFree(dev[i]);
    }
    void *host[] = {g->h_first, g->h_nhits, g->h_hits, g->h_nrings, g->h_rings};
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

/* The batch packed tight into the pinned buffers: the merge leaves room for 64 hits per
 * event, the copy takes only the hits there are. */
static size_t stage_batch(sdd_rich_gpu *g, const sdd_rich_batch *b)
{
    size_t hits = 0;
    for (uint32_t i = 0; i < b->n; i++) {
        /* An event the merge could not make gets no rings, and no room beyond its share. */
        unsigned n = b->nhits[i] <= SDD_RICH_MAX_HITS ? b->nhits[i] : 0;
        g->h_first[i] = (uint32_t)hits;
        g->h_nhits[i] = (uint8_t)n;
        memcpy(g->h_hits + hits, b->hits + b->first[i], n * sizeof(uint16_t));
        hits += n;
    }
    return hits;
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
    g->nhits = stage_batch(g, b);
    struct rich_gpu_params p;
    p.opts = g->opts.find;
    p.r_max = g->r_max;
    p.tab = g->d_tab;
    p.pm_bins = g->d_pm_bins;
    p.first = g->d_first;
    p.nhits = g->d_nhits;
    p.hits = g->d_hits;
    p.n = b->n;
    p.max_rings = g->opts.max_rings;
    p.nrings = g->d_nrings;
    p.rings = g->d_rings;
    size_t n = b->n;
    cudaStream_t s = g->stream;
    bool ok = cuda_ok(cudaEventRecord(g->ev[EV_START], s), "cudaEventRecord") &&
              cuda_ok(cudaMemcpyAsync(g->d_first, g->h_first, n * sizeof(uint32_t),
                                      cudaMemcpyHostToDevice, s),
                      "cudaMemcpyAsync") &&
              cuda_ok(cudaMemcpyAsync(g->d_nhits, g->h_nhits, n, cudaMemcpyHostToDevice, s),
                      "cudaMemcpyAsync") &&
              cuda_ok(cudaMemcpyAsync(g->d_hits, g->h_hits, g->nhits * sizeof(uint16_t),
                                      cudaMemcpyHostToDevice, s),
                      "cudaMemcpyAsync") &&
              cuda_ok(cudaEventRecord(g->ev[EV_COPIED_IN], s), "cudaEventRecord");
    if (ok && n > 0) {
        size_t per_block = g->events_per_block > 0 ? (size_t)g->events_per_block : (size_t)g->block;
        unsigned grid = (unsigned)((n + per_block - 1) / per_block);
        grid = grid < (unsigned)g->grid ? grid : (unsigned)g->grid;
        kernel_of(&g->opts)<<<grid, g->block, g->smem, s>>>(p);
        ok = cuda_ok(cudaGetLastError(), "kernel launch");
    }
    ok = ok && cuda_ok(cudaEventRecord(g->ev[EV_FOUND], s), "cudaEventRecord") &&
         cuda_ok(cudaMemcpyAsync(g->h_nrings, g->d_nrings, n, cudaMemcpyDeviceToHost, s),
                 "cudaMemcpyAsync") &&
         cuda_ok(cudaMemcpyAsync(g->h_rings, g->d_rings,
                                 n * g->opts.max_rings * sizeof(sdd_rich_ring),
                                 cudaMemcpyDeviceToHost, s),
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
    g->times.h2d_us = elapsed_us(g, EV_START, EV_COPIED_IN);
    g->times.kernel_us = elapsed_us(g, EV_COPIED_IN, EV_FOUND);
    g->times.d2h_us = elapsed_us(g, EV_FOUND, EV_DONE);
    int64_t total = 0;
    for (uint32_t i = 0; i < g->n; i++) {
        total += g->h_nrings[i];
    }
    if (nrings != NULL) {
        *nrings = g->h_nrings;
    }
    if (rings != NULL) {
        *rings = g->h_rings;
    }
    return total;
}

void sdd_rich_gpu_last_times(const sdd_rich_gpu *g, sdd_rich_gpu_times *t)
{
    *t = g->times;
}
