/* Hough event files: a header with the sector geometry, then one record per event holding the
 * packed stubs, their truth indices and the truth tracks. Every record is built or checked whole
 * before any of it reaches the file or the caller's event, so a failed write leaves no half
 * record and a failed read leaves the event untouched. Layout: docs/formats.md "Hough event
 * file". */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/le.h"
#include "sddaq/log.h"
#include "sddaq/trigger.h"

#define FILE_MAGIC   "SDDHOUGH"
#define FILE_VERSION 1
#define HEADER_LEN   72    /* what this version writes and needs */
#define HEADER_MAX   65536 /* a longer header is garbage, not growth */
#define EVENT_MAGIC  "EVT1"
#define EVENT_HEAD   8  /* magic + record length */
#define BODY_FIXED   16 /* id, nstubs, ntracks */
#define TRACK_BYTES  24
#define STUB_BYTES   (SDD_STUB_PACKED_BYTES + 2) /* packed stub + its i16 truth index */
#define RECORD_MAX \
    (BODY_FIXED + STUB_BYTES * SDD_HOUGH_EVENT_MAX_STUBS + TRACK_BYTES * SDD_HOUGH_EVENT_MAX_TRACKS)
#define IO_BUFFER (1u << 20) /* events are small; a big buffer keeps syscalls rare */

/* Header offsets after magic, version and length. */
#define H_FLOATS    16 /* bfield, pivot_r, phi_half, sector_half, qpt_max, bend_window */
#define H_DIMS      40 /* ncols, nrows, nlayers, min_layers */
#define H_LAYER_R   44
#define TRUTH_KINDS 2

struct sdd_hough_file {
    FILE *fp;
    char *path;
    char *iobuf;
    bool writing;
    sdd_err err; /* sticky: after a failure the stream position means nothing */
    uint64_t events;
    uint64_t offset; /* file offset of the next record */
    sdd_hough_geom geom;
    uint8_t rec[EVENT_HEAD + RECORD_MAX];
};

static void put_f32(uint8_t *p, float v)
{
    uint32_t u;
    memcpy(&u, &v, sizeof(u));
    put_le32(p, u);
}

static float get_f32(const uint8_t *p)
{
    uint32_t u = get_le32(p);
    float v;
    memcpy(&v, &u, sizeof(v));
    return v;
}

static size_t record_len(uint64_t nstubs, uint64_t ntracks)
{
    return (size_t)(BODY_FIXED + STUB_BYTES * nstubs + TRACK_BYTES * ntracks);
}

static void encode_header(uint8_t *p, const sdd_hough_geom *g)
{
    memset(p, 0, HEADER_LEN);
    memcpy(p, FILE_MAGIC, 8);
    put_le32(p + 8, FILE_VERSION);
    put_le32(p + 12, HEADER_LEN);
    put_f32(p + H_FLOATS, g->bfield);
    put_f32(p + H_FLOATS + 4, g->pivot_r);
    put_f32(p + H_FLOATS + 8, g->phi_half);
    put_f32(p + H_FLOATS + 12, g->sector_half);
    put_f32(p + H_FLOATS + 16, g->qpt_max);
    put_f32(p + H_FLOATS + 20, g->bend_window);
    p[H_DIMS] = g->ncols;
    p[H_DIMS + 1] = g->nrows;
    p[H_DIMS + 2] = g->nlayers;
    p[H_DIMS + 3] = g->min_layers;
    /* Radii past nlayers mean nothing; zeros keep whatever the caller left there out. */
    for (int i = 0; i < g->nlayers; i++) {
        put_f32(p + H_LAYER_R + 4 * i, g->layer_r[i]);
    }
}

/* The inverse of encode_header for a header already read into p; false for non-finite
 * values (geom_check then judges the rest). */
static bool decode_header(const uint8_t *p, sdd_hough_geom *g)
{
    memset(g, 0, sizeof(*g));
    g->bfield = get_f32(p + H_FLOATS);
    g->pivot_r = get_f32(p + H_FLOATS + 4);
    g->phi_half = get_f32(p + H_FLOATS + 8);
    g->sector_half = get_f32(p + H_FLOATS + 12);
    g->qpt_max = get_f32(p + H_FLOATS + 16);
    g->bend_window = get_f32(p + H_FLOATS + 20);
    g->ncols = p[H_DIMS];
    g->nrows = p[H_DIMS + 1];
    g->nlayers = p[H_DIMS + 2];
    g->min_layers = p[H_DIMS + 3];
    bool finite = true;
    for (int i = 0; i < SDD_HOUGH_MAX_LAYERS; i++) {
        g->layer_r[i] = get_f32(p + H_LAYER_R + 4 * i);
        finite = finite && isfinite(g->layer_r[i]);
    }
    return finite;
}

static sdd_hough_file *file_new(FILE *fp, const char *path, bool writing)
{
    sdd_hough_file *f = calloc(1, sizeof(*f));
    if (f == NULL) {
        return NULL;
    }
    f->path = strdup(path);
    f->iobuf = malloc(IO_BUFFER);
    if (f->path == NULL || f->iobuf == NULL) {
        free(f->path);
        free(f->iobuf);
        free(f);
        return NULL;
    }
    f->fp = fp;
    f->writing = writing;
    setvbuf(fp, f->iobuf, _IOFBF, IO_BUFFER);
    return f;
}

/* Only after fclose: stdio uses iobuf until then. */
static void free_buffers(sdd_hough_file *f)
{
    free(f->iobuf);
    free(f->path);
    free(f);
}

/* Close on a failed create or open, where the error that matters is already known. */
static void file_abandon(sdd_hough_file *f)
{
    fclose(f->fp);
    free_buffers(f);
}

static sdd_err open_failed(const char *path, const char *what)
{
    int errnum = errno;
    SDD_ERROR("trigger", "%s %s: %s", what, path, strerror(errnum));
    return sdd_err_from_errno(errnum);
}

sdd_err sdd_hough_file_create(const char *path, const sdd_hough_geom *g, sdd_hough_file **out)
{
    if (sdd_hough_geom_check(g) != SDD_OK) {
        return SDD_EINVAL;
    }
    FILE *fp = fopen(path, "wb");
    if (fp == NULL) {
        return open_failed(path, "cannot create");
    }
    sdd_hough_file *f = file_new(fp, path, true);
    if (f == NULL) {
        fclose(fp);
        return SDD_ENOMEM;
    }
    encode_header(f->rec, g);
    decode_header(f->rec, &f->geom); /* the geometry as a reader will see it */
    if (fwrite(f->rec, 1, HEADER_LEN, fp) != HEADER_LEN) {
        SDD_ERROR("trigger", "write %s: %s", path, strerror(errno));
        file_abandon(f);
        return SDD_EIO;
    }
    f->offset = HEADER_LEN;
    *out = f;
    return SDD_OK;
}

/* Read exactly n bytes: SDD_OK, SDD_EIO for a read error, SDD_ECORRUPT for a short file. */
static sdd_err read_exact(sdd_hough_file *f, void *buf, size_t n)
{
    size_t got = fread(buf, 1, n, f->fp);
    f->offset += got;
    if (got == n) {
        return SDD_OK;
    }
    return ferror(f->fp) ? SDD_EIO : SDD_ECORRUPT;
}

static sdd_err read_header(sdd_hough_file *f)
{
    uint8_t *p = f->rec;
    sdd_err e = read_exact(f, p, 16);
    if (e != SDD_OK || memcmp(p, FILE_MAGIC, 8) != 0) {
        SDD_ERROR("trigger", "%s: not a Hough event file", f->path);
        return e != SDD_OK ? e : SDD_ECORRUPT;
    }
    uint32_t version = get_le32(p + 8);
    uint32_t hlen = get_le32(p + 12);
    if (version != FILE_VERSION) {
        SDD_ERROR("trigger", "%s: version %u, this reader knows %d", f->path, version,
                  FILE_VERSION);
        return SDD_ENOTSUP;
    }
    if (hlen < HEADER_LEN || hlen > HEADER_MAX) {
        SDD_ERROR("trigger", "%s: header length %u outside [%d, %d]", f->path, hlen, HEADER_LEN,
                  HEADER_MAX);
        return SDD_ECORRUPT;
    }
    e = read_exact(f, p + 16, HEADER_LEN - 16);
    /* Fields a later version appends are skipped unread. */
    for (size_t extra = hlen - HEADER_LEN; extra > 0 && e == SDD_OK;) {
        size_t chunk = extra < sizeof(f->rec) - HEADER_LEN ? extra : sizeof(f->rec) - HEADER_LEN;
        e = read_exact(f, p + HEADER_LEN, chunk);
        extra -= chunk;
    }
    if (e != SDD_OK) {
        SDD_ERROR("trigger", "%s: truncated header", f->path);
        return e;
    }
    sdd_hough_geom g;
    if (!decode_header(p, &g) || sdd_hough_geom_check(&g) != SDD_OK) {
        SDD_ERROR("trigger", "%s: bad geometry in the header", f->path);
        return SDD_ECORRUPT;
    }
    f->geom = g;
    return SDD_OK;
}

sdd_err sdd_hough_file_open(const char *path, sdd_hough_file **out)
{
    FILE *fp = fopen(path, "rb");
    if (fp == NULL) {
        return open_failed(path, "cannot open");
    }
    sdd_hough_file *f = file_new(fp, path, false);
    if (f == NULL) {
        fclose(fp);
        return SDD_ENOMEM;
    }
    sdd_err e = read_header(f);
    if (e != SDD_OK) {
        file_abandon(f);
        return e;
    }
    *out = f;
    return SDD_OK;
}

const sdd_hough_geom *sdd_hough_file_geom(const sdd_hough_file *f)
{
    return &f->geom;
}

static bool track_ok(const sdd_truth_track *t)
{
    return isfinite(t->qpt) && isfinite(t->phi0) && isfinite(t->phi_t) && isfinite(t->z0) &&
           isfinite(t->eta) && t->kind < TRUTH_KINDS && t->layers < (1u << SDD_HOUGH_MAX_LAYERS);
}

/* Build the record in f->rec; SDD_EINVAL with the reason logged when ev cannot be stored. */
static sdd_err encode_event(sdd_hough_file *f, const sdd_hough_event *ev, size_t *len)
{
    if (ev->nstubs > SDD_HOUGH_EVENT_MAX_STUBS || ev->ntracks > SDD_HOUGH_EVENT_MAX_TRACKS) {
        SDD_ERROR("trigger", "event %llu: %u stubs / %u tracks exceed the limits",
                  (unsigned long long)ev->id, ev->nstubs, ev->ntracks);
        return SDD_EINVAL;
    }
    size_t body = record_len(ev->nstubs, ev->ntracks);
    uint8_t *p = f->rec;
    memcpy(p, EVENT_MAGIC, 4);
    put_le32(p + 4, (uint32_t)body);
    uint8_t *b = p + EVENT_HEAD;
    put_le64(b, ev->id);
    put_le32(b + 8, ev->nstubs);
    put_le32(b + 12, ev->ntracks);
    uint8_t *stubs = b + BODY_FIXED;
    uint8_t *truth = stubs + SDD_STUB_PACKED_BYTES * ev->nstubs;
    uint8_t *tracks = truth + 2 * ev->nstubs;
    for (uint32_t i = 0; i < ev->nstubs; i++) {
        int t = ev->stub_track[i];
        if (t < -1 || t >= (int)ev->ntracks ||
            sdd_stub_pack(&ev->stubs[i], stubs + SDD_STUB_PACKED_BYTES * i) != SDD_OK) {
            SDD_ERROR("trigger", "event %llu: stub %u cannot be stored (truth index %d)",
                      (unsigned long long)ev->id, i, t);
            return SDD_EINVAL;
        }
        put_le16(truth + 2 * i, (uint16_t)ev->stub_track[i]);
    }
    for (uint32_t i = 0; i < ev->ntracks; i++) {
        const sdd_truth_track *t = &ev->tracks[i];
        if (!track_ok(t)) {
            SDD_ERROR("trigger", "event %llu: truth track %u is not valid",
                      (unsigned long long)ev->id, i);
            return SDD_EINVAL;
        }
        uint8_t *q = tracks + TRACK_BYTES * i;
        put_f32(q, t->qpt);
        put_f32(q + 4, t->phi0);
        put_f32(q + 8, t->phi_t);
        put_f32(q + 12, t->z0);
        put_f32(q + 16, t->eta);
        q[20] = t->layers;
        q[21] = t->kind;
        put_le16(q + 22, 0);
    }
    *len = EVENT_HEAD + body;
    return SDD_OK;
}

sdd_err sdd_hough_file_write(sdd_hough_file *f, const sdd_hough_event *ev)
{
    if (!f->writing) {
        return SDD_EINVAL;
    }
    if (f->err != SDD_OK) {
        return f->err;
    }
    size_t len;
    sdd_err e = encode_event(f, ev, &len);
    if (e != SDD_OK) {
        return e;
    }
    if (fwrite(f->rec, 1, len, f->fp) != len) {
        SDD_ERROR("trigger", "write %s, event %llu: %s", f->path, (unsigned long long)f->events,
                  strerror(errno));
        f->err = SDD_EIO;
        return SDD_EIO;
    }
    f->events++;
    f->offset += len;
    return SDD_OK;
}

/* Check a record body of len bytes in f->rec + EVENT_HEAD; NULL when fine, else the reason. */
static const char *check_record(const sdd_hough_file *f, size_t len)
{
    const uint8_t *b = f->rec + EVENT_HEAD;
    uint32_t nstubs = get_le32(b + 8);
    uint32_t ntracks = get_le32(b + 12);
    if (nstubs > SDD_HOUGH_EVENT_MAX_STUBS || ntracks > SDD_HOUGH_EVENT_MAX_TRACKS) {
        return "stub or track count over the limit";
    }
    if (len != record_len(nstubs, ntracks)) {
        return "record length disagrees with the counts";
    }
    const uint8_t *stubs = b + BODY_FIXED;
    const uint8_t *truth = stubs + SDD_STUB_PACKED_BYTES * nstubs;
    const uint8_t *tracks = truth + 2 * nstubs;
    for (uint32_t i = 0; i < nstubs; i++) {
        sdd_stub s;
        if (sdd_stub_unpack(stubs + SDD_STUB_PACKED_BYTES * i, &s) != SDD_OK) {
            return "a stub does not unpack";
        }
        int t = (int16_t)get_le16(truth + 2 * i);
        if (t < -1 || t >= (int)ntracks) {
            return "a truth index is out of range";
        }
    }
    for (uint32_t i = 0; i < ntracks; i++) {
        const uint8_t *q = tracks + TRACK_BYTES * i;
        for (int j = 0; j < 5; j++) {
            if (!isfinite(get_f32(q + 4 * j))) {
                return "a truth track has a non-finite value";
            }
        }
        if (q[20] >= (1u << SDD_HOUGH_MAX_LAYERS) || q[21] >= TRUTH_KINDS ||
            get_le16(q + 22) != 0) {
            return "a truth track has a bad layer mask, kind or reserved field";
        }
    }
    return NULL;
}

/* Decode a record that check_record accepted. */
static void decode_record(const sdd_hough_file *f, sdd_hough_event *ev)
{
    const uint8_t *b = f->rec + EVENT_HEAD;
    ev->id = get_le64(b);
    ev->nstubs = get_le32(b + 8);
    ev->ntracks = get_le32(b + 12);
    const uint8_t *stubs = b + BODY_FIXED;
    const uint8_t *truth = stubs + SDD_STUB_PACKED_BYTES * ev->nstubs;
    const uint8_t *tracks = truth + 2 * ev->nstubs;
    for (uint32_t i = 0; i < ev->nstubs; i++) {
        sdd_stub_unpack(stubs + SDD_STUB_PACKED_BYTES * i, &ev->stubs[i]);
        ev->stub_track[i] = (int16_t)get_le16(truth + 2 * i);
    }
    for (uint32_t i = 0; i < ev->ntracks; i++) {
        const uint8_t *q = tracks + TRACK_BYTES * i;
        ev->tracks[i] = (sdd_truth_track){
            .qpt = get_f32(q),
            .phi0 = get_f32(q + 4),
            .phi_t = get_f32(q + 8),
            .z0 = get_f32(q + 12),
            .eta = get_f32(q + 16),
            .layers = q[20],
            .kind = q[21],
        };
    }
}

static int read_failed(sdd_hough_file *f, sdd_err e, uint64_t at, const char *why)
{
    SDD_ERROR("trigger", "%s: event %llu at byte %llu: %s", f->path, (unsigned long long)f->events,
              (unsigned long long)at, why);
    f->err = e;
    return e;
}

int sdd_hough_file_read(sdd_hough_file *f, sdd_hough_event *ev)
{
    if (f->writing) {
        return SDD_EINVAL;
    }
    if (f->err != SDD_OK) {
        return f->err;
    }
    uint64_t at = f->offset;
    size_t got = fread(f->rec, 1, EVENT_HEAD, f->fp);
    f->offset += got;
    if (got == 0 && !ferror(f->fp)) {
        return 0; /* a clean end: exactly at a record boundary */
    }
    if (got < EVENT_HEAD) {
        return read_failed(f, ferror(f->fp) ? SDD_EIO : SDD_ECORRUPT, at,
                           "file ends inside a record header");
    }
    if (memcmp(f->rec, EVENT_MAGIC, 4) != 0) {
        return read_failed(f, SDD_ECORRUPT, at, "bad record magic");
    }
    uint32_t len = get_le32(f->rec + 4);
    if (len < BODY_FIXED || len > RECORD_MAX) {
        return read_failed(f, SDD_ECORRUPT, at, "record length out of range");
    }
    sdd_err e = read_exact(f, f->rec + EVENT_HEAD, len);
    if (e != SDD_OK) {
        return read_failed(f, e, at, "file ends inside a record");
    }
    const char *why = check_record(f, len);
    if (why != NULL) {
        return read_failed(f, SDD_ECORRUPT, at, why);
    }
    decode_record(f, ev);
    f->events++;
    return 1;
}

sdd_err sdd_hough_file_close(sdd_hough_file *f)
{
    if (f == NULL) {
        return SDD_OK;
    }
    /* A reader has reported its errors already; only a writer can still lose data here. */
    sdd_err e = f->err;
    if (f->writing && e == SDD_OK && (fflush(f->fp) != 0 || ferror(f->fp))) {
        SDD_ERROR("trigger", "write %s: %s", f->path, strerror(errno));
        e = SDD_EIO;
    }
    if (fclose(f->fp) != 0 && f->writing && e == SDD_OK) {
        SDD_ERROR("trigger", "close %s: %s", f->path, strerror(errno));
        e = SDD_EIO;
    }
    bool writing = f->writing;
    free_buffers(f);
    return writing ? e : SDD_OK;
}
