/* The histogram ring finder's table and its choice of build. rich_hist_core.h holds the search;
 * here are the table of every PM's distance bin to every candidate centre and the portable
 * build; rich_hist_avx512.c and rich_hist_avx2.c hold the vector ones, chosen at run time. */
#include <math.h>

#include "trigger/rich_hist_core.h"

/* Bins of a PM at (x, y) for every centre; bin RICH_NBINS for 256 mm and beyond. */
static void pm_bins(float x, float y, uint8_t *restrict bh)
{
    for (int c = 0; c < RICH_CENTRES; c++) {
        float dx = x - RICH_CENTRE_X(c), dy = y - RICH_CENTRE_Y(c);
        float d = sqrtf(dx * dx + dy * dy) * (1.0f / RICH_BIN);
        bh[c] = (uint8_t)(d < (float)RICH_NBINS ? (int)d : RICH_NBINS);
    }
}

void rich_hist_table(uint8_t (*table)[RICH_CENTRES], const float *x, const float *y, int npm)
{
    for (int i = 0; i < npm; i++) {
        pm_bins(x[i], y[i], table[i]);
    }
}

unsigned rich_hist_spot(sdd_rich_finder *f, const struct rich_spot *s, struct rich_cand *out,
                        unsigned max)
{
#ifdef RICH_HAVE_V4
    if (f->avx512) {
        return rich_hist_spot_avx512(f, s, out, max);
    }
#endif
#ifdef RICH_HAVE_V3
    if (f->avx2) {
        return rich_hist_spot_avx2(f, s, out, max);
    }
#endif
    return hist_spot_portable(f, s, out, max);
}
