/* Algebraic circle fits (REFERENCE §5.7): Crawford's non-iterative fit (NIM 211 (1983) 223)
 * and Taubin's fit in Chernov's Newton form, both on centred data, and Ptolemy's concyclic
 * test. Sums run in double: the Taubin polynomial has terms of order R^6 (about 1e13 mm^6),
 * where float would lose the centre. */
#include <math.h>

#include "trigger/rich_fit_core.h"

static void moments(const float *x, const float *y, size_t n, struct rich_moments *m)
{
    double sx = 0, sy = 0;
    for (size_t i = 0; i < n; i++) {
        sx += x[i];
        sy += y[i];
    }
    m->n = (double)n;
    m->xm = sx / (double)n;
    m->ym = sy / (double)n;
    double uu = 0, vv = 0, uv = 0, uuu = 0, vvv = 0, uvv = 0, vuu = 0, zz = 0, uz = 0, vz = 0;
    for (size_t i = 0; i < n; i++) {
        double u = x[i] - m->xm, v = y[i] - m->ym;
        double u2 = u * u, v2 = v * v, z = u2 + v2;
        uu += u2;
        vv += v2;
        uv += u * v;
        uuu += u2 * u;
        vvv += v2 * v;
        uvv += u * v2;
        vuu += v * u2;
        zz += z * z;
        uz += u * z;
        vz += v * z;
    }
    m->uu = uu;
    m->vv = vv;
    m->uv = uv;
    m->uuu = uuu;
    m->vvv = vvv;
    m->uvv = uvv;
    m->vuu = vuu;
    m->zz = zz;
    m->uz = uz;
    m->vz = vz;
}

sdd_err sdd_rich_fit_crawford(const float *x, const float *y, size_t n, sdd_rich_circle *c)
{
    if (x == NULL || y == NULL || c == NULL || n < 3) {
        return SDD_EINVAL;
    }
    struct rich_moments m;
    moments(x, y, n, &m);
    return rich_solve_crawford(&m, c);
}


sdd_err sdd_rich_fit_taubin(const float *x, const float *y, size_t n, sdd_rich_circle *c)
{
    if (x == NULL || y == NULL || c == NULL || n < 3) {
        return SDD_EINVAL;
    }
    struct rich_moments m;
    moments(x, y, n, &m);
    return rich_solve_taubin(&m, c);
}

static float dist(const float a[2], const float b[2])
{
    float dx = a[0] - b[0], dy = a[1] - b[1];
    return sqrtf(dx * dx + dy * dy);
}

float sdd_rich_ptolemy(const float a[2], const float b[2], const float c[2], const float d[2])
{
    float p1 = dist(a, b) * dist(c, d);
    float p2 = dist(a, c) * dist(b, d);
    float p3 = dist(a, d) * dist(b, c);
    float mx = fmaxf(p1, fmaxf(p2, p3));
    if (!(mx > 0.0f)) {
        return 1.0f;
    }
    return fabsf(2.0f * mx - (p1 + p2 + p3)) / mx;
}
