/* The Almagest (Ptolemy) multi-ring finder (rich_ptolemy_core.h) built for x86-64-v3, chosen
 * at run time with the AVX2 or AVX-512 kernels: its bit masks (hits alive, hits selected) are
 * counted with popcnt and walked with BMI, where the build for any x86-64 counts them in a
 * dozen instructions. Never FMA: the same float operations, the same rings. Only
 * rich_ptolemy_spot_v3() is called from outside, on a CPU with AVX2. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#pragma GCC target("avx2,bmi,bmi2,popcnt,lzcnt")
#endif
#include "trigger/rich_ptolemy_core.h"

#ifdef RICH_HAVE_V3
unsigned rich_ptolemy_spot_v3(sdd_rich_finder *f, const struct rich_spot *s, struct rich_cand *out,
                              unsigned max)
{
    return ptolemy_spot(f, s, out, max);
}
#endif
