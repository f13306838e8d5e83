/* RICH circle fits and Ptolemy's test (src/trigger/rich_fit.c): points exactly on a circle give
 * the circle back to float precision with both fits, over full rings and short arcs, few and
 * many points, near and far from the origin; fewer than 3 points, collinear and coincident
 * points are SDD_EINVAL and leave the output alone; Ptolemy's measure is ~0 for concyclic
 * points and clearly not for a point off the circle. */
#include <math.h>
#include <string.h>

#include "check.h"
#include "sddaq/trigger.h"

typedef sdd_err (*fit_fn)(const float *, const float *, size_t, sdd_rich_circle *);

static void on_circle(float cx, float cy, float r, double a0, double span, size_t n, float *x,
                      float *y)
{
    for (size_t i = 0; i < n; i++) {
        double a = a0 + span * (double)i / (double)n;
        x[i] = (float)(cx + r * cos(a));
        y[i] = (float)(cy + r * sin(a));
    }
}

static void exact_circles(fit_fn fit, const char *name)
{
    uint64_t rng = 0x1234567;
    double worst = 0;
    for (int t = 0; t < 2000; t++) {
        float x[64], y[64];
        float cx = (float)((int)(check_rand(&rng) % 4001) - 2000) / 10.0f;
        float cy = (float)((int)(check_rand(&rng) % 4001) - 2000) / 10.0f;
        float r = 50.0f + (float)(check_rand(&rng) % 2000) / 10.0f;
        size_t n = 3 + check_rand(&rng) % 62;
        double span = t % 2 ? 2 * M_PI : M_PI / 2; /* full rings and quarter arcs */
        on_circle(cx, cy, r, (double)(check_rand(&rng) % 628) / 100.0, span, n, x, y);
        sdd_rich_circle c;
        CHECK_OK(fit(x, y, n, &c));
        double err = fmax(fabs(c.cx - cx), fmax(fabs(c.cy - cy), fabs(c.r - r)));
        worst = fmax(worst, err);
    }
    printf("%s: worst error on exact circles %.2e mm\n", name, worst);
    CHECK(worst < 2e-3); /* float inputs of a few hundred mm: ~3e-5 mm each */
}

static void degenerate(fit_fn fit)
{
    sdd_rich_circle c = {.cx = 7, .cy = 8, .r = 9};
    float x[8] = {0, 10, 20, 30, 40, 50, 60, 70}, y[8] = {5, 5, 5, 5, 5, 5, 5, 5};
    CHECK_EQ(fit(x, y, 2, &c), SDD_EINVAL);
    CHECK_EQ(fit(x, y, 0, &c), SDD_EINVAL);
    CHECK_EQ(fit(x, y, 8, &c), SDD_EINVAL); /* horizontal line */
    float dx[5] = {0, 18, 36, 54, 72}, dy[5] = {0, 18, 36, 54, 72};
    CHECK_EQ(fit(dx, dy, 5, &c), SDD_EINVAL); /* diagonal line */
    float px[4] = {3, 3, 3, 3}, py[4] = {4, 4, 4, 4};
    CHECK_EQ(fit(px, py, 4, &c), SDD_EINVAL); /* one point four times */
    CHECK_EQ(fit(NULL, y, 8, &c), SDD_EINVAL);
    CHECK(c.cx == 7 && c.cy == 8 && c.r == 9);
    /* Three points define a circle exactly. */
    float tx[3] = {100, 0, -100}, ty[3] = {0, 100, 0};
    CHECK_OK(fit(tx, ty, 3, &c));
    CHECK(fabsf(c.cx) < 1e-3f && fabsf(c.cy) < 1e-3f && fabsf(c.r - 100) < 1e-3f);
}

/* Hits scattered about a circle: both fits land near it (Taubin at least as close as a loose
 * bound, both close to each other). */
static void noisy(void)
{
    uint64_t rng = 99;
    float x[20], y[20];
    on_circle(10, -20, 170, 0.3, 2 * M_PI, 20, x, y);
    for (int i = 0; i < 20; i++) {
        x[i] += ((float)(check_rand(&rng) % 1001) - 500.0f) / 100.0f;
        y[i] += ((float)(check_rand(&rng) % 1001) - 500.0f) / 100.0f;
    }
    sdd_rich_circle a, b;
    CHECK_OK(sdd_rich_fit_crawford(x, y, 20, &a));
    CHECK_OK(sdd_rich_fit_taubin(x, y, 20, &b));
    CHECK(fabsf(a.cx - 10) < 3 && fabsf(a.cy + 20) < 3 && fabsf(a.r - 170) < 3);
    CHECK(fabsf(b.cx - 10) < 3 && fabsf(b.cy + 20) < 3 && fabsf(b.r - 170) < 3);
}

static void ptolemy(void)
{
    float a[2] = {150, 0}, b[2] = {0, 150}, c[2] = {-150, 0}, d[2] = {106.066f, -106.066f};
    CHECK(sdd_rich_ptolemy(a, b, c, d) < 1e-5f);
    CHECK(sdd_rich_ptolemy(d, c, a, b) < 1e-5f); /* order free */
    /* 20 mm outside the circle: the measure is second order in the distance on most of the
     * ring (3e-3 here) and first order next to a triplet point. */
    float off[2] = {170 * 0.6967067f, -170 * 0.7173561f};
    CHECK(sdd_rich_ptolemy(a, b, c, off) > 2e-3f);
    float near_a[2] = {170, -1};
    CHECK(sdd_rich_ptolemy(a, b, c, near_a) > 0.05f);
    float in[2] = {20, 10};
    CHECK(sdd_rich_ptolemy(a, b, c, in) > 0.3f);
    CHECK(sdd_rich_ptolemy(a, a, a, a) == 1.0f);
}

int main(void)
{
    exact_circles(sdd_rich_fit_crawford, "crawford");
    exact_circles(sdd_rich_fit_taubin, "taubin");
    degenerate(sdd_rich_fit_crawford);
    degenerate(sdd_rich_fit_taubin);
    noisy();
    ptolemy();
    return check_finish();
}
