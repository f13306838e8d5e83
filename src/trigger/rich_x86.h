/* Small x86 vector helpers shared by the AVX2 and the AVX-512 builds of the ring finder. */
#ifndef SDDAQ_TRIGGER_RICH_X86_H
#define SDDAQ_TRIGGER_RICH_X86_H

#include "trigger/rich_impl.h"

#ifdef RICH_HAVE_V3
#include <immintrin.h>

/* A helper of the vector steps, always inlined: left to itself GCC called some, passing
 * their vectors through memory. */
#define RICH_V3_INLINE RICH_TARGET_V3 static inline __attribute__((always_inline))

/* The largest of 16 unsigned bytes. */
RICH_TARGET_V3 static inline unsigned rich_max_u8x16(__m128i m)
{
    m = _mm_max_epu8(m, _mm_srli_si128(m, 8));
    m = _mm_max_epu8(m, _mm_srli_si128(m, 4));
    m = _mm_max_epu8(m, _mm_srli_si128(m, 2));
    m = _mm_max_epu8(m, _mm_srli_si128(m, 1));
    return (unsigned)_mm_cvtsi128_si32(m) & 0xFF;
}
#endif

#endif
