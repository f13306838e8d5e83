/* sddaq/rich_gpu.h where sddaq was built without nvcc: every create answers SDD_ENOTSUP, so
 * callers fall back to the CPU finder. The CUDA build is src/trigger/cuda/rich_gpu.cu. */
#include <string.h>

#include "sddaq/log.h"
#include "trigger/rich_gpu_impl.h"

sdd_err sdd_rich_gpu_create(const sdd_rich_gpu_opts *o, sdd_rich_gpu **out)
{
    sdd_err err = rich_gpu_args_check(o, out);
    if (err != SDD_OK) {
        return err;
    }
    SDD_ERROR("rich-gpu", "this sddaq was built without CUDA (no nvcc when it was configured)");
    return SDD_ENOTSUP;
}

void sdd_rich_gpu_destroy(sdd_rich_gpu *g)
{
    (void)g;
}

const char *sdd_rich_gpu_name(const sdd_rich_gpu *g)
{
    (void)g;
    return "";
}

sdd_err sdd_rich_gpu_submit(sdd_rich_gpu *g, const sdd_rich_batch *b)
{
    (void)g;
    (void)b;
    return SDD_EINVAL;
}

int64_t sdd_rich_gpu_wait(sdd_rich_gpu *g, const uint8_t **nrings, const sdd_rich_ring **rings)
{
    (void)g;
    (void)nrings;
    (void)rings;
    return SDD_EINVAL;
}

void sdd_rich_gpu_last_times(const sdd_rich_gpu *g, sdd_rich_gpu_times *t)
{
    (void)g;
    memset(t, 0, sizeof(*t));
}
