/* What lets one source of the RICH ring finder build for the CPU (C) and for the GPU (CUDA
 * C++): function qualifiers, restrict, and the bit counts, which are compiler builtins on the
 * CPU and intrinsics on the GPU. rich_fit_core.h and rich_hist_core.h are written with these,
 * so both builds run the same operations in the same order and give the same rings. */
#ifndef SDDAQ_TRIGGER_RICH_DEV_H
#define SDDAQ_TRIGGER_RICH_DEV_H

#include <stdint.h>

#ifdef __CUDACC__
#define RICH_DEV        static inline __host__ __device__
#define RICH_DEV_INLINE static __forceinline__ __host__ __device__
#define RICH_RESTRICT   __restrict__
#else
#define RICH_DEV        static inline
#define RICH_DEV_INLINE static inline __attribute__((always_inline))
#define RICH_RESTRICT   restrict
#endif

/* Index of the lowest set bit (m != 0). */
RICH_DEV unsigned rich_ctz64(uint64_t m)
{
#ifdef __CUDA_ARCH__
    return (unsigned)(__ffsll((long long)m) - 1);
#else
    return (unsigned)__builtin_ctzll(m);
#endif
}

RICH_DEV unsigned rich_popcount64(uint64_t m)
{
#ifdef __CUDA_ARCH__
    return (unsigned)__popcll(m);
#else
    return (unsigned)__builtin_popcountll(m);
#endif
}

#endif
