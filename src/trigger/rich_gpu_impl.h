/* Internals of the GPU ring finder shared by its two builds (never installed). */
#ifndef SDDAQ_TRIGGER_RICH_GPU_IMPL_H
#define SDDAQ_TRIGGER_RICH_GPU_IMPL_H

#include "sddaq/rich_gpu.h"

/* sdd_rich_gpu_create()'s arguments: SDD_EINVAL for a NULL, or with the reason logged for
 * options no build accepts. */
sdd_err rich_gpu_args_check(const sdd_rich_gpu_opts *o, sdd_rich_gpu **out);

#endif
