/* RICH geometry: the hexagonal PM grid of each spot, channel numbering, which board reads which
 * PM, and ring radius from mass and momentum (REFERENCE §5.8). */
#include <math.h>
#include <stdlib.h>

#include "sddaq/log.h"
#include "trigger/rich_impl.h"

void sdd_rich_geom_default(sdd_rich_geom *g)
{
    g->pitch = 18.0f;
    g->disc_radius = 300.0f;
    g->focal = 17000.0f;
    g->n_minus_1 = 62e-6f;
    g->boards_per_spot = 2;
}

/* PM centre of grid position (row j, column i). */
static void grid_pos(const sdd_rich_geom *g, int j, int i, float *x, float *y)
{
    float row_pitch = g->pitch * 0.8660254f;
    *x = ((float)i + ((j & 1) ? 0.5f : 0.0f)) * g->pitch;
    *y = (float)j * row_pitch;
}

static bool in_disc(const sdd_rich_geom *g, float x, float y)
{
    return x * x + y * y <= g->disc_radius * g->disc_radius;
}

/* Count (and, with t, number) the PMs row by row from the bottom, left to right. */
static int number_pms(const sdd_rich_geom *g, struct sdd_rich_pmtab *t)
{
    int n = 0;
    for (int j = -RICH_GRID_HALF; j <= RICH_GRID_HALF; j++) {
        for (int i = -RICH_GRID_HALF; i <= RICH_GRID_HALF; i++) {
            float x, y;
            grid_pos(g, j, i, &x, &y);
            int pm = -1;
            if (in_disc(g, x, y)) {
                pm = n++;
                if (t != NULL && pm < SDD_RICH_SPOT_PMS) {
                    for (int s = 0; s < SDD_RICH_SPOTS; s++) {
                        int ch = s * SDD_RICH_SPOT_PMS + pm;
                        t->x[ch] = x;
                        t->y[ch] = y;
                        int half = g->boards_per_spot == 2 && x >= 0.0f ? 1 : 0;
                        t->board[ch] = (int8_t)(s * g->boards_per_spot + half);
                    }
                }
            }
            if (t != NULL) {
                t->grid[j + RICH_GRID_HALF][i + RICH_GRID_HALF] = (int16_t)pm;
            }
        }
    }
    return n;
}

sdd_err sdd_rich_geom_check(const sdd_rich_geom *g)
{
    const char *why = NULL;
    if (g == NULL) {
        return SDD_EINVAL;
    }
    if (!(g->pitch >= 5.0f && g->pitch <= 100.0f)) {
        why = "pitch must lie in [5, 100] mm";
    } else if (!(g->disc_radius >= g->pitch &&
                 g->disc_radius < RICH_GRID_HALF * g->pitch * 0.85f)) {
        why = "disc radius must lie between one pitch and the grid's reach (34 pitches)";
    } else if (!(g->focal > 0.0f && g->focal < 1e6f)) {
        why = "focal length must be positive";
    } else if (!(g->n_minus_1 > 0.0f && g->n_minus_1 < 0.01f)) {
        why = "n - 1 must lie in (0, 0.01)";
    } else if (g->boards_per_spot != 1 && g->boards_per_spot != 2) {
        why = "boards per spot must be 1 or 2";
    } else if (number_pms(g, NULL) > SDD_RICH_SPOT_PMS) {
        why = "more than 1024 PMs per spot: a larger pitch or a smaller disc is needed";
    }
    if (why != NULL) {
        SDD_ERROR(RICH_LOG, "geometry: %s", why);
        return SDD_EINVAL;
    }
    return SDD_OK;
}

int sdd_rich_geom_npm(const sdd_rich_geom *g)
{
    sdd_err err = sdd_rich_geom_check(g);
    return err != SDD_OK ? err : number_pms(g, NULL);
}

unsigned sdd_rich_geom_nboards(const sdd_rich_geom *g)
{
    return SDD_RICH_SPOTS * g->boards_per_spot;
}

float sdd_rich_ring_radius(const sdd_rich_geom *g, float mass, float p)
{
    if (!(p > 0.0f)) {
        return 0.0f;
    }
    /* Small-angle Cherenkov relation cos(theta) = 1 / (n beta): theta^2 = 2(n-1) - m^2/p^2. */
    float t2 = 2.0f * g->n_minus_1 - (mass * mass) / (p * p);
    return t2 > 0.0f ? g->focal * sqrtf(t2) : 0.0f;
}

sdd_err sdd_rich_pmtab_create(const sdd_rich_geom *g, sdd_rich_pmtab **out)
{
    sdd_err err = sdd_rich_geom_check(g);
    if (err != SDD_OK) {
        return err;
    }
    struct sdd_rich_pmtab *t = malloc(sizeof(*t));
    if (t == NULL) {
        return SDD_ENOMEM;
    }
    t->geom = *g;
    t->row_pitch = g->pitch * 0.8660254f;
    for (int ch = 0; ch < SDD_RICH_CHANNELS; ch++) {
        t->x[ch] = NAN;
        t->y[ch] = NAN;
        t->board[ch] = -1;
    }
    t->npm = number_pms(g, t);
    *out = t;
    return SDD_OK;
}

void sdd_rich_pmtab_destroy(sdd_rich_pmtab *t)
{
    free(t);
}

bool sdd_rich_pmtab_pos(const sdd_rich_pmtab *t, unsigned ch, float *x, float *y)
{
    if (ch >= SDD_RICH_CHANNELS || t->board[ch] < 0) {
        return false;
    }
    *x = t->x[ch];
    *y = t->y[ch];
    return true;
}

int sdd_rich_pmtab_board(const sdd_rich_pmtab *t, unsigned ch)
{
    return ch < SDD_RICH_CHANNELS ? t->board[ch] : -1;
}

int sdd_rich_pmtab_nearest(const sdd_rich_pmtab *t, unsigned spot, float x, float y)
{
    if (spot >= SDD_RICH_SPOTS || !isfinite(x) || !isfinite(y)) {
        return -1;
    }
    float fj = floorf(y / t->row_pitch + 0.5f);
    if (fabsf(fj) > RICH_GRID_HALF) {
        return -1;
    }
    int best = -1;
    float best_d2 = t->geom.pitch * t->geom.pitch;
    /* The nearest centre of a hexagonal grid lies in the nearest row or one of its neighbours. */
    for (int j = (int)fj - 1; j <= (int)fj + 1; j++) {
        if (j < -RICH_GRID_HALF || j > RICH_GRID_HALF) {
            continue;
        }
        float shift = (j & 1) ? 0.5f : 0.0f;
        int i = (int)floorf(x / t->geom.pitch - shift + 0.5f);
        if (i < -RICH_GRID_HALF || i > RICH_GRID_HALF) {
            continue;
        }
        int pm = t->grid[j + RICH_GRID_HALF][i + RICH_GRID_HALF];
        if (pm < 0 || pm >= SDD_RICH_SPOT_PMS) {
            continue;
        }
        float px, py;
        grid_pos(&t->geom, j, i, &px, &py);
        float d2 = (px - x) * (px - x) + (py - y) * (py - y);
        if (d2 < best_d2) {
            best_d2 = d2;
            best = (int)spot * SDD_RICH_SPOT_PMS + pm;
        }
    }
    return best;
}
