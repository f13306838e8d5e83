/* The RICH histogram ring finder on a CUDA GPU, the path of seeds 003 §2 and 004 (NaNet): the
 * CPU indexes and merges the boards' packets (sdd_rich_find_events, sdd_rich_merge), the GPU
 * finds the rings of every merged event of a batch, one warp per event by default. It runs the
 * same source as the CPU's portable finder (src/trigger/rich_*_core.h, built by nvcc without
 * fused multiply-adds), so it returns the CPU's rings bit for bit; tests/trigger/
 * unit_rich_gpu.c checks this on every GPU machine it runs on.
 *
 * Built when CMake finds nvcc (src/trigger/cuda/); without it, or on a machine without a CUDA
 * GPU, sdd_rich_gpu_create() returns SDD_ENOTSUP with a logged reason, and the CPU finder is
 * the path. Only the histogram method runs on the GPU. Included by sddaq/trigger.h. */
#ifndef SDDAQ_RICH_GPU_H
#define SDDAQ_RICH_GPU_H

#include <stdbool.h>
#include <stdint.h>

#include "sddaq/api.h"
#include "sddaq/err.h"
#include "sddaq/rich.h"

/* How the work is laid out. LOCAL and SHARED run one thread per event (its finder state, about
 * 4.4 KiB: histograms, vetoes, the spot's hits, in thread-local or in shared memory); WARP
 * runs one warp per event, its finder state in shared memory, the 32 lanes sharing the
 * histogram and per-hit steps: a buffer's events finish sooner (latency). All give the same
 * rings; they differ in speed. */
typedef enum sdd_rich_gpu_state {
    SDD_RICH_GPU_LOCAL = 0,  /* thread per event, state in local memory (cached in L1, L2) */
    SDD_RICH_GPU_SHARED = 1, /* thread per event, state in shared memory: few threads fit */
    SDD_RICH_GPU_WARP = 2,   /* warp per event, state in shared memory (default) */
} sdd_rich_gpu_state;

/* The histogram steps of the thread-per-event states: the CPU's portable byte loops, or four
 * centres per 32-bit word (SIMD within a register), which does the same integer counts in a
 * quarter of the operations. WARP always shares words of centres out over its lanes. */
typedef enum sdd_rich_gpu_steps {
    SDD_RICH_GPU_SWAR = 0,
    SDD_RICH_GPU_BYTES = 1,
} sdd_rich_gpu_steps;

typedef struct sdd_rich_gpu_opts {
    sdd_rich_find_opts find; /* method must be SDD_RICH_HIST; simd is not used */
    uint32_t max_events;     /* largest batch; 65536 */
    uint32_t max_rings;      /* ring slots per event in the result, 1..64; 8 */
    int device;              /* CUDA device ordinal; 0 */
    uint32_t block;          /* threads per block, a multiple of 32; 0 picks 128 (local, warp;
                              * warp takes at most 128) or the most that fit in shared memory
                              * (shared) */
    sdd_rich_gpu_state state;
    sdd_rich_gpu_steps steps;
    uint32_t max_regs; /* warp: registers per thread, 0 (the compiler's choice, up to 255), 128
                        * or 64 (default): more warps resident, at the cost of spills */
    bool times;        /* time each step for sdd_rich_gpu_last_times (default true); false
                        * saves three CUDA calls a batch on the submitting thread */
} sdd_rich_gpu_opts;

SDD_API void sdd_rich_gpu_opts_default(sdd_rich_gpu_opts *o);

typedef struct sdd_rich_gpu sdd_rich_gpu;

/* Select the device, upload the PM table and its bin table, allocate device and pinned host
 * buffers for max_events (not for the data path). SDD_EINVAL with a logged reason for bad
 * options, SDD_ENOTSUP when sddaq was built without CUDA or no usable GPU is present, SDD_EIO
 * for another CUDA failure (logged with CUDA's message). One object per thread. */
SDD_API sdd_err sdd_rich_gpu_create(const sdd_rich_gpu_opts *o, sdd_rich_gpu **out);
SDD_API void sdd_rich_gpu_destroy(sdd_rich_gpu *g);

/* The GPU's name, for reports ("" before create succeeded). */
SDD_API const char *sdd_rich_gpu_name(const sdd_rich_gpu *g);

/* Start finding the rings of every event of a merged batch: the events are copied to pinned
 * memory before this returns (the caller may reuse b at once), then to the GPU, the kernel
 * runs and the rings come back, all asynchronously. One batch in flight per object:
 * SDD_EBUSY while one is. SDD_ETOOBIG for more than max_events events, SDD_EIO for a CUDA
 * failure. An event of more than SDD_RICH_MAX_HITS hits gets no rings (the merge never makes
 * one). Does not block on the GPU. */
SDD_API sdd_err sdd_rich_gpu_submit(sdd_rich_gpu *g, const sdd_rich_batch *b);

/* Wait for the batch in flight. *nrings[i] is the count of event i's rings, which are at
 * (*rings)[i * max_rings]: the layout of sdd_rich_output. Both stay valid until the next
 * submit. Returns the total of rings kept (the sum of nrings), or SDD_EINVAL when no batch is
 * in flight, SDD_EIO for a CUDA failure. Blocks. */
SDD_API int64_t sdd_rich_gpu_wait(sdd_rich_gpu *g, const uint8_t **nrings,
                                  const sdd_rich_ring **rings);

/* Where the last batch's time went, measured with CUDA events (microseconds): copy in, kernel,
 * copy out. All zero when opts.times is false. */
typedef struct sdd_rich_gpu_times {
    double h2d_us, kernel_us, d2h_us;
} sdd_rich_gpu_times;

SDD_API void sdd_rich_gpu_last_times(const sdd_rich_gpu *g, sdd_rich_gpu_times *t);

#endif
