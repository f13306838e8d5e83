/* RICH event files (docs/formats.md "RICH event file"): a 40-byte header with the geometry, then
 * one record per event: the hit words, the truth ring of each hit and the truth rings. All
 * little-endian; the reader checks every length and field before it trusts it. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "sddaq/log.h"
#include "trigger/rich_impl.h"

#define FILE_MAGIC   "SDDRICH\0"
#define FILE_VERSION 1
#define FILE_HEADER  40
#define REC_FIXED    20 /* u32 bytes, u64 id, u32 timestamp, u8 fine, nhits, nrings, pad */
#define TRUTH_BYTES  20
#define REC_MAX      (REC_FIXED + 3 * SDD_RICH_MAX_HITS + 4 + SDD_RICH_MAX_TRUTH * TRUTH_BYTES)

struct sdd_rich_file {
    FILE *f;
    bool writing;
    sdd_err sticky; /* a read error repeats */
    uint64_t events;
    sdd_rich_geom geom;
};

static size_t rec_bytes(unsigned nhits, unsigned nrings)
{
    return REC_FIXED + ((3 * (size_t)nhits + 3) & ~(size_t)3) + (size_t)nrings * TRUTH_BYTES;
}

static void st_f32(uint8_t *p, float v)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    rich_st32(p, u);
}

static float ld_f32(const uint8_t *p)
{
    uint32_t u = rich_ld32(p);
    float v;
    memcpy(&v, &u, 4);
    return v;
}

sdd_err sdd_rich_file_create(const char *path, const sdd_rich_geom *g, sdd_rich_file **out)
{
    sdd_err err = sdd_rich_geom_check(g);
    if (err != SDD_OK || path == NULL || out == NULL) {
        return SDD_EINVAL;
    }
    sdd_rich_file *f = calloc(1, sizeof(*f));
    if (f == NULL) {
        return SDD_ENOMEM;
    }
    f->f = fopen(path, "wb");
    if (f->f == NULL) {
        SDD_ERROR(RICH_LOG, "%s: %s", path, strerror(errno));
        free(f);
        return SDD_EIO;
    }
    f->writing = true;
    f->geom = *g;
    uint8_t h[FILE_HEADER] = {0};
    memcpy(h, FILE_MAGIC, 8);
    rich_st32(h + 8, FILE_VERSION);
    rich_st32(h + 12, FILE_HEADER);
    st_f32(h + 16, g->pitch);
    st_f32(h + 20, g->disc_radius);
    st_f32(h + 24, g->focal);
    st_f32(h + 28, g->n_minus_1);
    h[32] = g->boards_per_spot;
    if (fwrite(h, 1, sizeof(h), f->f) != sizeof(h)) {
        fclose(f->f);
        free(f);
        return SDD_EIO;
    }
    *out = f;
    return SDD_OK;
}

sdd_err sdd_rich_file_open(const char *path, sdd_rich_file **out)
{
    if (path == NULL || out == NULL) {
        return SDD_EINVAL;
    }
    FILE *fp = fopen(path, "rb");
    if (fp == NULL) {
        SDD_ERROR(RICH_LOG, "%s: %s", path, strerror(errno));
        return SDD_EIO;
    }
    uint8_t h[FILE_HEADER];
    sdd_err err = SDD_OK;
    sdd_rich_geom g;
    memset(&g, 0, sizeof(g));
    if (fread(h, 1, sizeof(h), fp) != sizeof(h) || memcmp(h, FILE_MAGIC, 8) != 0) {
        SDD_ERROR(RICH_LOG, "%s: not a RICH event file", path);
        err = SDD_ECORRUPT;
    } else if (rich_ld32(h + 8) > FILE_VERSION) {
        SDD_ERROR(RICH_LOG, "%s: format version %u is newer than this reader", path,
                  rich_ld32(h + 8));
        err = SDD_ENOTSUP;
    } else if (rich_ld32(h + 8) != FILE_VERSION || rich_ld32(h + 12) != FILE_HEADER) {
        err = SDD_ECORRUPT;
    } else {
        g.pitch = ld_f32(h + 16);
        g.disc_radius = ld_f32(h + 20);
        g.focal = ld_f32(h + 24);
        g.n_minus_1 = ld_f32(h + 28);
        g.boards_per_spot = h[32];
        if (sdd_rich_geom_check(&g) != SDD_OK) {
            err = SDD_ECORRUPT;
        }
    }
    sdd_rich_file *f = err == SDD_OK ? calloc(1, sizeof(*f)) : NULL;
    if (err == SDD_OK && f == NULL) {
        err = SDD_ENOMEM;
    }
    if (err != SDD_OK) {
        fclose(fp);
        return err;
    }
    f->f = fp;
    f->geom = g;
    *out = f;
    return SDD_OK;
}

const sdd_rich_geom *sdd_rich_file_geom(const sdd_rich_file *f)
{
    return &f->geom;
}

sdd_err sdd_rich_file_write(sdd_rich_file *f, const sdd_rich_event *ev)
{
    if (f == NULL || !f->writing || ev == NULL || ev->nhits > SDD_RICH_MAX_HITS ||
        ev->nrings > SDD_RICH_MAX_TRUTH) {
        return SDD_EINVAL;
    }
    uint8_t rec[REC_MAX] = {0};
    size_t len = rec_bytes(ev->nhits, ev->nrings);
    rich_st32(rec, (uint32_t)len);
    rich_st32(rec + 4, (uint32_t)ev->id);
    rich_st32(rec + 8, (uint32_t)(ev->id >> 32));
    rich_st32(rec + 12, ev->timestamp);
    rec[16] = ev->fine;
    rec[17] = ev->nhits;
    rec[18] = ev->nrings;
    uint8_t *p = rec + REC_FIXED;
    for (unsigned i = 0; i < ev->nhits; i++) {
        rich_st16(p + 2 * i, ev->hits[i]);
        p[2 * ev->nhits + i] = (uint8_t)ev->hit_ring[i];
    }
    p = rec + REC_FIXED + ((3 * (size_t)ev->nhits + 3) & ~(size_t)3);
    for (unsigned k = 0; k < ev->nrings; k++, p += TRUTH_BYTES) {
        const sdd_rich_truth *t = &ev->rings[k];
        st_f32(p, t->cx);
        st_f32(p + 4, t->cy);
        st_f32(p + 8, t->r);
        st_f32(p + 12, t->p);
        p[16] = t->spot;
        p[17] = t->particle;
        p[18] = t->nhits;
    }
    if (fwrite(rec, 1, len, f->f) != len) {
        return SDD_EIO;
    }
    f->events++;
    return SDD_OK;
}

static int corrupt(sdd_rich_file *f, const char *why)
{
    SDD_ERROR(RICH_LOG, "event file: event %llu: %s", (unsigned long long)f->events, why);
    f->sticky = SDD_ECORRUPT;
    return SDD_ECORRUPT;
}

int sdd_rich_file_read(sdd_rich_file *f, sdd_rich_event *ev)
{
    if (f == NULL || f->writing || ev == NULL) {
        return SDD_EINVAL;
    }
    if (f->sticky != SDD_OK) {
        return f->sticky;
    }
    uint8_t rec[REC_MAX];
    size_t got = fread(rec, 1, 4, f->f);
    if (got == 0 && feof(f->f)) {
        return 0;
    }
    if (got != 4) {
        if (ferror(f->f)) {
            f->sticky = SDD_EIO;
            return SDD_EIO;
        }
        return corrupt(f, "truncated record length");
    }
    uint32_t len = rich_ld32(rec);
    if (len < REC_FIXED || len > REC_MAX) {
        return corrupt(f, "bad record length");
    }
    if (fread(rec + 4, 1, len - 4, f->f) != len - 4) {
        if (ferror(f->f)) {
            f->sticky = SDD_EIO;
            return SDD_EIO;
        }
        return corrupt(f, "truncated record");
    }
    unsigned nhits = rec[17], nrings = rec[18];
    if (nhits > SDD_RICH_MAX_HITS || nrings > SDD_RICH_MAX_TRUTH || rec[19] != 0 ||
        len != rec_bytes(nhits, nrings)) {
        return corrupt(f, "hit or ring count disagrees with the record length");
    }
    memset(ev, 0, sizeof(*ev));
    ev->id = (uint64_t)rich_ld32(rec + 4) | ((uint64_t)rich_ld32(rec + 8) << 32);
    ev->timestamp = rich_ld32(rec + 12);
    ev->fine = rec[16];
    ev->nhits = (uint8_t)nhits;
    ev->nrings = (uint8_t)nrings;
    if (ev->timestamp >= (1u << 31) || ev->fine > 31) {
        return corrupt(f, "timestamp or fine time out of range");
    }
    const uint8_t *p = rec + REC_FIXED;
    for (unsigned i = 0; i < nhits; i++) {
        ev->hits[i] = rich_ld16(p + 2 * i);
        ev->hit_ring[i] = (int8_t)p[2 * nhits + i];
        if (ev->hit_ring[i] < -1 || ev->hit_ring[i] >= (int)nrings) {
            return corrupt(f, "hit names a ring the event does not have");
        }
    }
    p = rec + REC_FIXED + ((3 * (size_t)nhits + 3) & ~(size_t)3);
    for (unsigned k = 0; k < nrings; k++, p += TRUTH_BYTES) {
        sdd_rich_truth *t = &ev->rings[k];
        t->cx = ld_f32(p);
        t->cy = ld_f32(p + 4);
        t->r = ld_f32(p + 8);
        t->p = ld_f32(p + 12);
        t->spot = p[16];
        t->particle = p[17];
        t->nhits = p[18];
        if (!isfinite(t->cx) || !isfinite(t->cy) || !isfinite(t->r) || !isfinite(t->p) ||
            t->spot >= SDD_RICH_SPOTS || t->particle >= SDD_RICH_NPARTICLES || p[19] != 0 ||
            t->nhits > nhits) {
            return corrupt(f, "bad truth ring");
        }
    }
    f->events++;
    return 1;
}

sdd_err sdd_rich_file_close(sdd_rich_file *f)
{
    if (f == NULL) {
        return SDD_OK;
    }
    sdd_err err = SDD_OK;
    if (f->writing && fflush(f->f) != 0) {
        err = SDD_EIO;
    }
    if (fclose(f->f) != 0 && f->writing) {
        err = SDD_EIO;
    }
    free(f);
    return err;
}
