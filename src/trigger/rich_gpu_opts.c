/* The options of the GPU ring finder (sddaq/rich_gpu.h), shared by its CUDA build
 * (cuda/rich_gpu.cu) and the stand-in without CUDA (rich_gpu_none.c), so both refuse the same
 * options the same way. */
#include <string.h>

#include "sddaq/log.h"
#include "trigger/rich_gpu_impl.h"

void sdd_rich_gpu_opts_default(sdd_rich_gpu_opts *o)
{
    memset(o, 0, sizeof(*o));
    sdd_rich_find_opts_default(&o->find);
    o->max_events = 65536;
    o->max_rings = 8;
    o->device = 0;
    o->block = 0;
    /* The fastest layout on an H100 (docs/PERFORMANCE.md), and the shortest latency. */
    o->state = SDD_RICH_GPU_WARP;
    o->steps = SDD_RICH_GPU_SWAR;
    o->max_regs = 64;
    o->times = true;
}

static const char *bad_opts(const sdd_rich_gpu_opts *o)
{
    if (o->find.method != SDD_RICH_HIST) {
        return "only the histogram method runs on the GPU";
    }
    if (o->max_events == 0 || o->max_events > (1u << 24)) {
        return "max_events must lie in [1, 2^24]";
    }
    if (o->max_rings == 0 || o->max_rings > 64) {
        return "max_rings must lie in [1, 64]";
    }
    if (o->state != SDD_RICH_GPU_LOCAL && o->state != SDD_RICH_GPU_SHARED &&
        o->state != SDD_RICH_GPU_WARP) {
        return "unknown state placement";
    }
    if (o->max_regs != 0 && o->max_regs != 128 && o->max_regs != 64) {
        return "max_regs must be 0, 128 or 64";
    }
    if (o->state == SDD_RICH_GPU_WARP && o->block > 128) {
        return "the warp state takes blocks of at most 128 threads";
    }
    if (o->steps != SDD_RICH_GPU_SWAR && o->steps != SDD_RICH_GPU_BYTES) {
        return "unknown histogram steps";
    }
    if (o->block > 1024 || o->block % 32 != 0) {
        return "block must be a multiple of 32, at most 1024";
    }
    return NULL;
}

sdd_err rich_gpu_args_check(const sdd_rich_gpu_opts *o, sdd_rich_gpu **out)
{
    if (o == NULL || out == NULL) {
        return SDD_EINVAL;
    }
    const char *why = bad_opts(o);
    if (why != NULL) {
        SDD_ERROR("rich-gpu", "%s", why);
        return SDD_EINVAL;
    }
    return SDD_OK;
}
