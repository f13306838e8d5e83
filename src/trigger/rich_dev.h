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

/* Without the popcnt instruction in the build's baseline, GCC's builtin is a libgcc call
 * (2 % of the histogram finder's time, session 23); the same bit sums inline cost less. */
RICH_DEV unsigned rich_popcount64(uint64_t m)
{
#if defined(__CUDA_ARCH__)
    return (unsigned)__popcll(m);
#elif defined(__POPCNT__) || !defined(__x86_64__)
    return (unsigned)__builtin_popcountll(m);
#else
    m = m - ((m >> 1) & 0x5555555555555555ull);
    m = (m & 0x3333333333333333ull) + ((m >> 2) & 0x3333333333333333ull);
    m = (m + (m >> 4)) & 0x0F0F0F0F0F0F0F0Full;
    return (unsigned)((m * 0x0101010101010101ull) >> 56);
#endif
}

#endif
