/* Algebraic circle fits (REFERENCE §5.7): Crawford's non-iterative fit (NIM 211 (1983) 223)
 * and Taubin's fit in Chernov's Newton form, both on centred data, and Ptolemy's concyclic
 * test. Sums run in double: the Taubin polynomial has terms of order R^6 (about 1e13 mm^6),
 * where float would lose the centre. */
#include <math.h>

#include "trigger/rich_impl.h"

/* Points whose scatter matrix is this close to singular (relative) are collinear for the
 * fits: no circle is defined, and one would come out with a radius of kilometres. */
#define COLLINEAR_REL 1e-7

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

static bool degenerate(const struct rich_moments *m)
{
    double tr = m->uu + m->vv;
    double det = m->uu * m->vv - m->uv * m->uv;
    return !(tr > 0.0) || !(det > COLLINEAR_REL * tr * tr);
}

static sdd_err finish(const struct rich_moments *m, double uc, double vc, double r2,
                      sdd_rich_circle *c)
{
    if (!isfinite(uc) || !isfinite(vc) || !(r2 > 0.0) || !isfinite(r2)) {
        return SDD_EINVAL;
    }
    c->cx = (float)(m->xm + uc);
    c->cy = (float)(m->ym + vc);
    c->r = (float)sqrt(r2);
    return SDD_OK;
}

sdd_err rich_solve_crawford(const struct rich_moments *m, sdd_rich_circle *c)
{
    if (degenerate(m)) {
        return SDD_EINVAL;
    }
    double b1 = 0.5 * (m->uuu + m->uvv), b2 = 0.5 * (m->vvv + m->vuu);
    double det = m->uu * m->vv - m->uv * m->uv;
    double uc = (b1 * m->vv - b2 * m->uv) / det;
    double vc = (m->uu * b2 - m->uv * b1) / det;
    return finish(m, uc, vc, uc * uc + vc * vc + (m->uu + m->vv) / m->n, c);
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

sdd_err rich_solve_taubin(const struct rich_moments *mo, sdd_rich_circle *c)
{
    if (degenerate(mo)) {
        return SDD_EINVAL;
    }
    double dn = mo->n;
    double mxx = mo->uu / dn, myy = mo->vv / dn, mxy = mo->uv / dn;
    double mxz = mo->uz / dn, myz = mo->vz / dn, mzz = mo->zz / dn;
    double mz = mxx + myy, cov = mxx * myy - mxy * mxy;
    double a3 = 4.0 * mz;
    double a2 = -3.0 * mz * mz - mzz;
    double a1 = mzz * mz + 4.0 * cov * mz - mxz * mxz - myz * myz - mz * mz * mz;
    double a0 =
        mxz * mxz * myy + myz * myz * mxx - mzz * cov - 2.0 * mxz * myz * mxy + mz * mz * cov;
    /* Newton from 0 towards the smallest root of the characteristic polynomial; it decreases
     * monotonically there, so a step that grows |P| or goes negative means "stay at 0". */
    double xr = 0.0, yv = 1e300;
    for (int it = 0; it < 20; it++) {
        double yold = yv;
        yv = a0 + xr * (a1 + xr * (a2 + xr * a3));
        if (fabs(yv) > fabs(yold)) {
            xr = 0.0;
            break;
        }
        double dy = a1 + xr * (2.0 * a2 + xr * 3.0 * a3);
        if (dy == 0.0) {
            break;
        }
        double xold = xr;
        xr = xold - yv / dy;
        if (!isfinite(xr) || xr < 0.0) {
            xr = 0.0;
            break;
        }
        if (fabs(xr - xold) <= 1e-10 * fabs(xr)) {
            break;
        }
    }
    double det = xr * xr - xr * mz + cov;
    if (!(fabs(det) > 0.0)) {
        return SDD_EINVAL;
    }
    double uc = (mxz * (myy - xr) - myz * mxy) / (2.0 * det);
    double vc = (myz * (mxx - xr) - mxz * mxy) / (2.0 * det);
    return finish(mo, uc, vc, uc * uc + vc * vc + mz, c);
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
