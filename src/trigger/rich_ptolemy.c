/* The Almagest (Ptolemy) multi-ring finder (rich_ptolemy_core.h): the build for any x86-64,
 * which hands a spot to the x86-64-v3 build (rich_ptolemy_v3.c) on CPUs that have it. */
#include "trigger/rich_ptolemy_core.h"

unsigned rich_ptolemy_spot(sdd_rich_finder *f, const struct rich_spot *s, struct rich_cand *out,
                           unsigned max)
{
#ifdef RICH_HAVE_V3
    if (f->avx2 || f->avx512) {
        return rich_ptolemy_spot_v3(f, s, out, max);
    }
#endif
    return ptolemy_spot(f, s, out, max);
}
