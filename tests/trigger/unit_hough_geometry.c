/* Hough map geometry, checked against brute force: the cell holding a point equals the
 * polygon that contains it, the rows a line crosses equal the cells whose polygon the line
 * cuts (vertex sign test), neighbour sets are symmetric with the right sizes, and hexagon
 * cells have the area of rectangular ones. */
#include <math.h>
#include <stdbool.h>

#include "hough_test.h"

#define SQRT3 1.7320508075688772

/* Polygon of cell (col, row) in (q/pT, phi_T) coordinates, counter-clockwise. */
static int cell_polygon(const sdd_hough_geom *g, sdd_hough_shape shape, int col, int row,
                        double px[6], double py[6])
{
    float cq, cp;
    sdd_hough_cell_centre(g, shape, col, row, &cq, &cp);
    if (shape == SDD_HOUGH_RECT) {
        double hx = g->qpt_max / g->ncols, hy = g->phi_half / g->nrows;
        double dx[4] = {-hx, hx, hx, -hx}, dy[4] = {-hy, -hy, hy, hy};
        for (int i = 0; i < 4; i++) {
            px[i] = cq + dx[i];
            py[i] = cp + dy[i];
        }
        return 4;
    }
    /* Scaled units: X per q/pT = 1.5 ncols / (2 qpt_max), Y per rad = sqrt3 nrows / (2 phi_half).
     */
    double sx = 1.5 * g->ncols / (2.0 * g->qpt_max), sy = SQRT3 * g->nrows / (2.0 * g->phi_half);
    for (int i = 0; i < 6; i++) {
        double a = M_PI / 3.0 * i;
        px[i] = cq + cos(a) / sx;
        py[i] = cp + sin(a) / sy;
    }
    return 6;
}

static bool polygon_contains(const double *px, const double *py, int n, double x, double y)
{
    for (int i = 0; i < n; i++) {
        int j = (i + 1) % n;
        double cross = (px[j] - px[i]) * (y - py[i]) - (py[j] - py[i]) * (x - px[i]);
        if (cross < 0) {
            return false;
        }
    }
    return true;
}

/* Distance of the point from the polygon's boundary (to skip ambiguous points). */
static double edge_distance(const double *px, const double *py, int n, double x, double y)
{
    double best = INFINITY;
    for (int i = 0; i < n; i++) {
        int j = (i + 1) % n;
        double ex = px[j] - px[i], ey = py[j] - py[i];
        double d = fabs(ex * (y - py[i]) - ey * (x - px[i])) / hypot(ex, ey);
        best = d < best ? d : best;
    }
    return best;
}

static void test_cell_at(sdd_hough_shape shape)
{
    sdd_hough_geom g;
    sdd_hough_geom_default(&g);
    uint64_t rng = 0x1234567u + (uint64_t)shape;
    int agree = 0, tried = 0;
    for (int it = 0; it < 20000; it++) {
        float q = ht_uniform(&rng, -g.qpt_max, g.qpt_max);
        float p = ht_uniform(&rng, -g.phi_half, g.phi_half);
        int col, row;
        if (!sdd_hough_cell_at(&g, shape, q, p, &col, &row)) {
            continue;
        }
        tried++;
        double px[6], py[6];
        int n = cell_polygon(&g, shape, col, row, px, py);
        /* Points within float rounding of an edge may fall either side. */
        if (polygon_contains(px, py, n, q, p) || edge_distance(px, py, n, q, p) < 1e-6) {
            agree++;
        }
    }
    CHECK(tried > 19000); /* the map covers the window (hex edge cells leave slivers) */
    CHECK_EQ(agree, tried);
    /* A centre maps to its own cell. */
    for (int col = 0; col < g.ncols; col++) {
        for (int row = 0; row < g.nrows; row++) {
            float q, p;
            int c = -1, r = -1;
            sdd_hough_cell_centre(&g, shape, col, row, &q, &p);
            CHECK(sdd_hough_cell_at(&g, shape, q, p, &c, &r));
            if (c != col || r != row) {
                CHECK_EQ(c * 100 + r, col * 100 + row);
            }
        }
    }
    int c, r;
    CHECK(!sdd_hough_cell_at(&g, shape, 3.0f * g.qpt_max, 0.0f, &c, &r));
    CHECK(!sdd_hough_cell_at(&g, shape, NAN, 0.0f, &c, &r));
}

/* Does the line phi_T = phi + c q cross the polygon? Vertex sign test. */
static bool line_cuts(const double *px, const double *py, int n, double phi, double c)
{
    bool above = false, below = false;
    for (int i = 0; i < n; i++) {
        double d = py[i] - (phi + c * px[i]);
        above |= d > 0;
        below |= d < 0;
    }
    return above && below;
}

static void test_column_rows(sdd_hough_shape shape)
{
    sdd_hough_geom g;
    sdd_hough_geom_default(&g);
    double k = sdd_hough_curvature_k(&g);
    uint64_t rng = 0x9e3779b97f4a7c15ull + (uint64_t)shape;
    long mismatches = 0, hits = 0;
    for (int it = 0; it < 3000; it++) {
        int layer = (int)(check_rand(&rng) % 6);
        sdd_stub s = {.r = g.layer_r[layer],
                      .phi = ht_uniform(&rng, -0.25f, 0.25f),
                      .layer = (uint8_t)layer,
                      .flags = SDD_STUB_VALID};
        double c = k * (s.r - g.pivot_r);
        for (int col = 0; col < g.ncols; col++) {
            uint32_t rows = sdd_hough_column_rows(&g, shape, &s, col);
            for (int row = 0; row < g.nrows; row++) {
                double px[6], py[6];
                int n = cell_polygon(&g, shape, col, row, px, py);
                bool want = line_cuts(px, py, n, s.phi, c);
                bool got = (rows >> row) & 1u;
                hits += got;
                if (want != got) {
                    /* Allow only lines within float rounding of a vertex. */
                    double close = INFINITY;
                    for (int v = 0; v < n; v++) {
                        double d = fabs(py[v] - (s.phi + c * px[v]));
                        close = d < close ? d : close;
                    }
                    if (close > 1e-5) {
                        mismatches++;
                    }
                }
            }
        }
    }
    CHECK(hits > 3000);
    CHECK_EQ(mismatches, 0);
}

static bool listed(const int *cols, const int *rows, int n, int col, int row)
{
    for (int i = 0; i < n; i++) {
        if (cols[i] == col && rows[i] == row) {
            return true;
        }
    }
    return false;
}

static void test_neighbours(sdd_hough_shape shape)
{
    sdd_hough_geom g;
    sdd_hough_geom_default(&g);
    int interior = shape == SDD_HOUGH_HEX ? 6 : 8;
    for (int col = 0; col < g.ncols; col++) {
        for (int row = 0; row < g.nrows; row++) {
            int nc[8], nr[8];
            int n = sdd_hough_neighbours(&g, shape, col, row, nc, nr);
            bool edge = col == 0 || row == 0 || col == g.ncols - 1 || row == g.nrows - 1;
            if (!edge) {
                CHECK_EQ(n, interior);
            }
            float q0, p0;
            sdd_hough_cell_centre(&g, shape, col, row, &q0, &p0);
            for (int i = 0; i < n; i++) {
                int bc[8], br[8];
                int bn = sdd_hough_neighbours(&g, shape, nc[i], nr[i], bc, br);
                CHECK(listed(bc, br, bn, col, row)); /* symmetric */
                if (shape == SDD_HOUGH_HEX) {
                    /* Hex neighbours are equidistant: centres sqrt3 apart in scaled units. */
                    float q1, p1;
                    sdd_hough_cell_centre(&g, shape, nc[i], nr[i], &q1, &p1);
                    double sx = 1.5 * g.ncols / (2.0 * g.qpt_max);
                    double sy = SQRT3 * g.nrows / (2.0 * g.phi_half);
                    double d = hypot((q1 - q0) * sx, (p1 - p0) * sy);
                    CHECK(fabs(d - SQRT3) < 1e-4);
                }
            }
        }
    }
    int nc[8], nr[8];
    CHECK_EQ(sdd_hough_neighbours(&g, shape, 0, 0, nc, nr), shape == SDD_HOUGH_HEX ? 2 : 3);
}

static void test_equal_area(void)
{
    /* Both maps cover the same window with ncols x nrows cells: count how many random points
     * of the window each cell gets; the means agree and hex cells fill the window too. */
    sdd_hough_geom g;
    sdd_hough_geom_default(&g);
    double px[6], py[6];
    int n = cell_polygon(&g, SDD_HOUGH_HEX, 5, 5, px, py);
    double hex_area = 0, rect_area = (2.0 * g.qpt_max / g.ncols) * (2.0 * g.phi_half / g.nrows);
    for (int i = 0; i < n; i++) {
        int j = (i + 1) % n;
        hex_area += 0.5 * (px[i] * py[j] - px[j] * py[i]);
    }
    CHECK(fabs(hex_area - rect_area) / rect_area < 1e-5);
}

static void test_geom_check(void)
{
    sdd_hough_geom g;
    sdd_hough_geom_default(&g);
    CHECK_OK(sdd_hough_geom_check(&g));
    sdd_hough_geom bad = g;
    bad.ncols = 33;
    CHECK_EQ(sdd_hough_geom_check(&bad), SDD_EINVAL);
    bad = g;
    bad.min_layers = 7;
    CHECK_EQ(sdd_hough_geom_check(&bad), SDD_EINVAL);
    bad = g;
    bad.phi_half = NAN;
    CHECK_EQ(sdd_hough_geom_check(&bad), SDD_EINVAL);
    bad = g;
    bad.sector_half = g.phi_half * 2;
    CHECK_EQ(sdd_hough_geom_check(&bad), SDD_EINVAL);
    bad = g;
    bad.layer_r[3] = 1.5f;
    CHECK_EQ(sdd_hough_geom_check(&bad), SDD_EINVAL);
}

int main(void)
{
    for (int shape = SDD_HOUGH_RECT; shape <= SDD_HOUGH_HEX; shape++) {
        test_cell_at((sdd_hough_shape)shape);
        test_column_rows((sdd_hough_shape)shape);
        test_neighbours((sdd_hough_shape)shape);
    }
    test_equal_area();
    test_geom_check();
    return check_finish();
}
