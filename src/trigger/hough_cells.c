/* Geometry of the Hough maps: how a stub becomes a line, where cells sit, which cell holds a
 * point and which cells touch. Rect cells are ncols x nrows bins of the (q/pT, phi_T) window.
 * Hex cells are flat-top hexagons of circumradius 1 in scaled units X (q/pT) and Y (phi_T):
 * the window maps to X in [0, 1.5 ncols], Y in [0, sqrt3 nrows], column i has centres
 * X = 1 + 1.5 i, Y = sqrt3 (j + 0.5 + 0.5 (i mod 2)); each hexagon has the area of one
 * rectangular bin. A line Y = A + B X crosses hexagon c exactly when
 * |Y_c - A - B X_c| <= h(B) = max(|B|, |sqrt3/2 - B/2|, |sqrt3/2 + B/2|): the largest
 * projection of a vertex onto the line's normal direction (REFERENCE.md §4.4). */
#include <math.h>

#include "trigger/hough_line.h"

void hough_frame_init(struct hough_frame *f, const sdd_hough_geom *g, sdd_hough_shape shape)
{
    f->shape = shape;
    f->ncols = g->ncols;
    f->nrows = g->nrows;
    f->k = sdd_hough_curvature_k(g);
    f->pivot_r = g->pivot_r;
    f->qpt_max = g->qpt_max;
    f->phi_half = g->phi_half;
    f->bend_window = g->bend_window;
    f->cell_scale = 1.0f;
    f->dx = 2.0f * g->qpt_max / (float)g->ncols;
    f->inv_dx = 1.0f / f->dx;
    if (shape == SDD_HOUGH_HEX) {
        f->col_scale = 1.5f * (float)g->ncols / (2.0f * g->qpt_max);
        f->row_scale = HOUGH_SQRT3 * (float)g->nrows / (2.0f * g->phi_half);
        f->q0 = -g->qpt_max + 1.0f / f->col_scale;
        f->col_half = 1.0f / f->col_scale;
        f->hex_slope = f->row_scale / f->col_scale;
    } else {
        f->col_scale = 1.0f / f->dx;
        f->row_scale = (float)g->nrows / (2.0f * g->phi_half);
        f->q0 = -g->qpt_max + 0.5f * f->dx;
        f->col_half = 0.5f * f->dx;
    }
}

uint32_t sdd_hough_column_rows(const sdd_hough_geom *g, sdd_hough_shape shape, const sdd_stub *s,
                               int col)
{
    struct hough_frame f;
    struct hough_line l;
    if (col < 0 || col >= g->ncols) {
        return 0;
    }
    hough_frame_init(&f, g, shape);
    hough_line_init(&f, s, false, &l);
    if (l.c0 > l.c1) {
        return 0;
    }
    return hough_band(shape, f.nrows, &l, col);
}

void sdd_hough_cell_centre(const sdd_hough_geom *g, sdd_hough_shape shape, int col, int row,
                           float *qpt, float *phi_t)
{
    struct hough_frame f;
    hough_frame_init(&f, g, shape);
    *qpt = f.q0 + f.dx * (float)col;
    if (shape == SDD_HOUGH_HEX) {
        float y = HOUGH_SQRT3 * ((float)row + 0.5f + 0.5f * (float)(col & 1));
        *phi_t = y / f.row_scale - g->phi_half;
    } else {
        *phi_t = ((float)row + 0.5f) / f.row_scale - g->phi_half;
    }
}

static bool inside(const sdd_hough_geom *g, int col, int row)
{
    return col >= 0 && col < g->ncols && row >= 0 && row < g->nrows;
}

/* Hexagons tile the plane as the Voronoi cells of their centres, so the cell holding a
 * point is the nearest centre; only the column below and its two neighbours can hold it. */
static bool hex_cell_at(const sdd_hough_geom *g, float x, float y, int *col, int *row)
{
    int base = (int)floorf((x - 1.0f) / 1.5f);
    float best = INFINITY;
    int bc = 0, br = 0;
    for (int i = base - 1; i <= base + 2; i++) {
        float cx = 1.0f + 1.5f * (float)i;
        float off = (i & 1) ? 0.5f : 0.0f;
        int j = (int)floorf(y / HOUGH_SQRT3 - off);
        for (int jj = j - 1; jj <= j + 1; jj++) {
            float cy = HOUGH_SQRT3 * ((float)jj + 0.5f + off);
            float d = (x - cx) * (x - cx) + (y - cy) * (y - cy);
            if (d < best) {
                best = d;
                bc = i;
                br = jj;
            }
        }
    }
    if (!inside(g, bc, br)) {
        return false;
    }
    *col = bc;
    *row = br;
    return true;
}

bool sdd_hough_cell_at(const sdd_hough_geom *g, sdd_hough_shape shape, float qpt, float phi_t,
                       int *col, int *row)
{
    struct hough_frame f;
    hough_frame_init(&f, g, shape);
    if (!isfinite(qpt) || !isfinite(phi_t) || fabsf(qpt) > 4.0f * g->qpt_max ||
        fabsf(phi_t) > 4.0f * g->phi_half) {
        return false;
    }
    float x = (qpt + g->qpt_max) * f.col_scale;
    float y = (phi_t + g->phi_half) * f.row_scale;
    if (shape == SDD_HOUGH_HEX) {
        return hex_cell_at(g, x, y, col, row);
    }
    int c = (int)floorf(x), r = (int)floorf(y);
    if (!inside(g, c, r)) {
        return false;
    }
    *col = c;
    *row = r;
    return true;
}

int sdd_hough_neighbours(const sdd_hough_geom *g, sdd_hough_shape shape, int col, int row,
                         int cols_out[8], int rows_out[8])
{
    int dc[8], dr[8], n = 0;
    if (shape == SDD_HOUGH_HEX) {
        /* Odd columns sit half a cell higher: their side neighbours are rows j and j + 1,
         * an even column's are rows j - 1 and j. */
        int side = (col & 1) ? 1 : -1;
        static const int hc[6] = {0, 0, -1, -1, 1, 1};
        int hr[6] = {-1, 1, 0, side, 0, side};
        for (int i = 0; i < 6; i++) {
            dc[n] = hc[i];
            dr[n++] = hr[i];
        }
    } else {
        for (int a = -1; a <= 1; a++) {
            for (int b = -1; b <= 1; b++) {
                if (a != 0 || b != 0) {
                    dc[n] = a;
                    dr[n++] = b;
                }
            }
        }
    }
    int out = 0;
    for (int i = 0; i < n; i++) {
        if (inside(g, col + dc[i], row + dr[i])) {
            cols_out[out] = col + dc[i];
            rows_out[out++] = row + dr[i];
        }
    }
    return out;
}
