/* The raw run reader. A file with a valid trailer is read through its index; otherwise
 * (a .partial file, a truncated or damaged one) the records are found by scanning: each must
 * have the record magic, fit in the file and match its CRC-32C; after a bad one the scan looks
 * for the next good record and counts what it skipped. Every length read from the file is
 * checked against the file's size before it is used. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/le.h"
#include "sddaq/crc32c.h"
#include "sddaq/log.h"
#include "store_internal.h"

#define SCRATCH (1u << 20)

struct raw_r {
    int fd;
    uint64_t data_end; /* records lie in [header_len, data_end) */
    uint64_t *offs;    /* offset of each readable record */
    uint8_t *scratch;  /* SCRATCH bytes */
};

static sdd_err read_at(int fd, void *buf, size_t n, uint64_t off)
{
    uint8_t *p = buf;
    while (n > 0) {
        ssize_t k = pread(fd, p, n, (off_t)off);
        if (k < 0) {
            if (errno == EINTR) {
                continue;
            }
            return SDD_EIO;
        }
        if (k == 0) {
            return SDD_EIO; /* the file shrank under us */
        }
        p += k;
        n -= (size_t)k;
        off += (uint64_t)k;
    }
    return SDD_OK;
}

struct rec_head {
    uint32_t flags, crc;
    uint64_t id, time_ns, size;
};

/* Parse a record header; false when the magic is wrong. */
static bool parse_head(const uint8_t *h, struct rec_head *out)
{
    if (get_le32(h) != RAW_REC_MAGIC) {
        return false;
    }
    out->flags = get_le32(h + 4);
    out->id = get_le64(h + 8);
    out->time_ns = get_le64(h + 16);
    out->size = get_le64(h + 24);
    out->crc = get_le32(h + RAW_REC_CRC_AT);
    return true;
}

/* CRC of the record at off (header h already read, size checked to fit). */
static sdd_err record_crc(struct raw_r *rr, const uint8_t *h, uint64_t off, uint64_t size,
                          uint32_t *crc)
{
    uint32_t c = sdd_crc32c(0, h, RAW_REC_CRC_AT);
    uint64_t at = off + RAW_REC_HEADER;
    while (size > 0) {
        size_t k = size < SCRATCH ? (size_t)size : SCRATCH;
        sdd_err err = read_at(rr->fd, rr->scratch, k, at);
        if (err != SDD_OK) {
            return err;
        }
        c = sdd_crc32c(c, rr->scratch, k);
        at += k;
        size -= k;
    }
    *crc = c;
    return SDD_OK;
}

/* Is there a whole, valid record at off (ending by end)? */
static bool valid_at(struct raw_r *rr, uint64_t off, uint64_t end)
{
    uint8_t h[RAW_REC_HEADER];
    struct rec_head rh;
    uint32_t crc;
    if (end - off < RAW_REC_HEADER || read_at(rr->fd, h, sizeof(h), off) != SDD_OK ||
        !parse_head(h, &rh) || rh.size > end - off - RAW_REC_HEADER) {
        return false;
    }
    return record_crc(rr, h, off, rh.size, &crc) == SDD_OK && crc == rh.crc;
}

/* Offset of the next valid record at or after from, or end when there is none. */
static uint64_t resync(struct raw_r *rr, uint64_t from, uint64_t end)
{
    uint8_t buf[4096];
    uint64_t pos = from;
    while (end - pos >= RAW_REC_HEADER) {
        uint64_t n = end - pos < sizeof(buf) ? end - pos : sizeof(buf);
        if (read_at(rr->fd, buf, (size_t)n, pos) != SDD_OK) {
            return end;
        }
        for (size_t i = 0; i + 4 <= n; i++) {
            if (get_le32(buf + i) == RAW_REC_MAGIC && valid_at(rr, pos + i, end)) {
                return pos + i;
            }
        }
        pos += n - 3; /* a magic may straddle two blocks */
    }
    return end;
}

static sdd_err push(uint64_t **offs, uint64_t *n, uint64_t *cap, uint64_t off)
{
    if (*n == *cap) {
        uint64_t nc = *cap != 0 ? *cap * 2 : 1024;
        uint64_t *p = realloc(*offs, nc * sizeof(**offs));
        if (p == NULL) {
            return SDD_ENOMEM;
        }
        *offs = p;
        *cap = nc;
    }
    (*offs)[(*n)++] = off;
    return SDD_OK;
}

static sdd_err scan(sdd_store_reader *r, struct raw_r *rr, uint64_t start, uint64_t end)
{
    uint64_t pos = start, n = 0, cap = 0;
    struct sdd_store_info *in = &r->info;
    while (pos < end) {
        uint8_t h[RAW_REC_HEADER];
        struct rec_head rh;
        uint32_t crc = 0;
        if (end - pos < RAW_REC_HEADER) {
            in->truncated_bytes = end - pos;
            break;
        }
        sdd_err err = read_at(rr->fd, h, sizeof(h), pos);
        if (err != SDD_OK) {
            return err;
        }
        bool magic = parse_head(h, &rh);
        bool fits = magic && rh.size <= end - pos - RAW_REC_HEADER;
        if (fits) {
            err = record_crc(rr, h, pos, rh.size, &crc);
            if (err != SDD_OK) {
                return err;
            }
        }
        if (fits && crc == rh.crc) {
            err = push(&rr->offs, &n, &cap, pos);
            if (err != SDD_OK) {
                return err;
            }
            in->bytes += rh.size;
            pos += RAW_REC_HEADER + rh.size;
            continue;
        }
        uint64_t next = resync(rr, pos + 1, end);
        if (next == end && magic && !fits) {
            /* A record that runs past the end with nothing valid after it: the tail of a
             * file whose writer stopped mid-record. */
            in->truncated_bytes = end - pos;
            break;
        }
        in->corrupt++;
        in->skipped_bytes += next - pos;
        pos = next;
    }
    in->records = n;
    return SDD_OK;
}

/* Use the index when the trailer and the index are intact; false otherwise. */
static bool load_index(sdd_store_reader *r, struct raw_r *rr, uint64_t start, uint64_t size)
{
    uint8_t t[RAW_TRAILER];
    if (size - start < RAW_TRAILER || read_at(rr->fd, t, sizeof(t), size - RAW_TRAILER) != SDD_OK ||
        memcmp(t, RAW_TRAILER_MAGIC, 8) != 0 || get_le32(t + 60) != sdd_crc32c(0, t, 60)) {
        return false;
    }
    uint64_t index_offset = get_le64(t + 8), count = get_le64(t + 16);
    uint64_t limit = size - RAW_TRAILER;
    if (index_offset < start || index_offset > limit ||
        count != (limit - index_offset) / RAW_INDEX_ENTRY ||
        (limit - index_offset) % RAW_INDEX_ENTRY != 0) {
        return false;
    }
    uint8_t *idx = malloc(count * RAW_INDEX_ENTRY + 1);
    uint64_t *offs = malloc(count * sizeof(*offs) + 1);
    bool ok = idx != NULL && offs != NULL &&
              read_at(rr->fd, idx, count * RAW_INDEX_ENTRY, index_offset) == SDD_OK &&
              sdd_crc32c(0, idx, count * RAW_INDEX_ENTRY) == get_le32(t + 56);
    for (uint64_t i = 0; ok && i < count; i++) {
        offs[i] = get_le64(idx + i * RAW_INDEX_ENTRY);
        /* In order, inside the record area, room for a header. */
        ok = offs[i] >= start && offs[i] <= index_offset &&
             index_offset - offs[i] >= RAW_REC_HEADER && (i == 0 || offs[i] > offs[i - 1]);
    }
    free(idx);
    if (!ok) {
        free(offs);
        return false;
    }
    rr->offs = offs;
    rr->data_end = index_offset;
    r->info.records = count;
    r->info.bytes = get_le64(t + 24);
    r->info.stop_unix_ns = get_le64(t + 32);
    r->info.indexed = true;
    return true;
}

static sdd_err raw_get(sdd_store_reader *r, uint64_t i, struct sdd_store_rec *rec, void *buf,
                       size_t cap)
{
    struct raw_r *rr = r->impl;
    if (i >= r->info.records) {
        return SDD_ENOENT;
    }
    uint64_t off = rr->offs[i];
    uint8_t h[RAW_REC_HEADER];
    struct rec_head rh;
    memset(rec, 0, sizeof(*rec));
    if (read_at(rr->fd, h, sizeof(h), off) != SDD_OK) {
        return SDD_EIO;
    }
    if (!parse_head(h, &rh) || rh.size > rr->data_end - off - RAW_REC_HEADER) {
        return SDD_ECORRUPT;
    }
    rec->id = rh.id;
    rec->time_ns = rh.time_ns;
    rec->flags = rh.flags;
    rec->size = rh.size;
    if (rh.size > cap) {
        return SDD_ETOOBIG;
    }
    if (rh.size > 0 && read_at(rr->fd, buf, (size_t)rh.size, off + RAW_REC_HEADER) != SDD_OK) {
        return SDD_EIO;
    }
    rec->data = buf;
    uint32_t crc = sdd_crc32c(sdd_crc32c(0, h, RAW_REC_CRC_AT), buf, (size_t)rh.size);
    return crc == rh.crc ? SDD_OK : SDD_ECORRUPT;
}

static sdd_err raw_verify(sdd_store_reader *r, uint64_t *bad)
{
    struct raw_r *rr = r->impl;
    uint64_t nbad = 0;
    for (uint64_t i = 0; i < r->info.records; i++) {
        uint64_t off = rr->offs[i];
        uint8_t h[RAW_REC_HEADER];
        struct rec_head rh;
        uint32_t crc;
        if (read_at(rr->fd, h, sizeof(h), off) != SDD_OK) {
            return SDD_EIO;
        }
        if (!parse_head(h, &rh) || rh.size > rr->data_end - off - RAW_REC_HEADER) {
            nbad++;
            continue;
        }
        sdd_err err = record_crc(rr, h, off, rh.size, &crc);
        if (err != SDD_OK) {
            return err;
        }
        nbad += crc != rh.crc;
    }
    if (bad != NULL) {
        *bad = nbad;
    }
    return nbad == 0 ? SDD_OK : SDD_ECORRUPT;
}

static void raw_close(sdd_store_reader *r)
{
    struct raw_r *rr = r->impl;
    if (rr != NULL) {
        if (rr->fd >= 0) {
            close(rr->fd);
        }
        free(rr->offs);
        free(rr->scratch);
        free(rr);
    }
    free(r->topology);
    free(r);
}

static const struct store_reader_ops raw_reader_ops = {raw_get, raw_verify, raw_close};

sdd_err store_raw_reader_open(const char *path, int fd, sdd_store_reader **out)
{
    sdd_store_reader *r = calloc(1, sizeof(*r));
    struct raw_r *rr = calloc(1, sizeof(*rr));
    if (r == NULL || rr == NULL) {
        free(r);
        free(rr);
        close(fd);
        return SDD_ENOMEM;
    }
    r->ops = &raw_reader_ops;
    r->impl = rr;
    rr->fd = fd;
    sdd_err err = SDD_ENOMEM;
    rr->scratch = malloc(SCRATCH);
    if (rr->scratch == NULL) {
        goto out_close;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        SDD_ERROR(STORE_LOG, "stat %s: %s", path, strerror(e));
        err = sdd_err_from_errno(e);
        goto out_close;
    }
    uint64_t size = (uint64_t)st.st_size;
    struct sdd_store_info *in = &r->info;
    in->kind = SDD_STORE_RAW;
    in->file_bytes = size;
    uint8_t h[RAW_FILE_FIXED];
    err = SDD_EPROTO;
    if (size < RAW_FILE_FIXED + 4 || read_at(fd, h, sizeof(h), 0) != SDD_OK ||
        memcmp(h, RAW_FILE_MAGIC, 8) != 0) {
        SDD_ERROR(STORE_LOG, "%s: not an sddaq raw file", path);
        goto out_close;
    }
    in->format_version = get_le32(h + 8);
    uint32_t header_len = get_le32(h + 12), tlen = get_le32(h + 48);
    err = SDD_ECORRUPT;
    if (in->format_version != RAW_VERSION || tlen > SDD_STORE_TOPOLOGY_MAX ||
        header_len != RAW_FILE_FIXED + tlen + 4 || header_len > size) {
        SDD_ERROR(STORE_LOG, "%s: bad file header (version %u, header %u bytes)", path,
                  in->format_version, header_len);
        goto out_close;
    }
    r->topology = malloc((size_t)tlen + 4 + 1);
    if (r->topology == NULL) {
        err = SDD_ENOMEM;
        goto out_close;
    }
    if (read_at(fd, r->topology, (size_t)tlen + 4, RAW_FILE_FIXED) != SDD_OK) {
        err = SDD_EIO;
        goto out_close;
    }
    uint32_t crc = sdd_crc32c(sdd_crc32c(0, h, RAW_FILE_FIXED), r->topology, tlen);
    if (crc != get_le32((uint8_t *)r->topology + tlen)) {
        SDD_ERROR(STORE_LOG, "%s: file header checksum mismatch", path);
        goto out_close;
    }
    r->topology[tlen] = '\0';
    in->topology = r->topology;
    in->run_number = get_le64(h + 16);
    in->start_unix_ns = get_le64(h + 24);
    memcpy(in->sddaq_version, h + 32, 16);
    in->sddaq_version[16] = '\0';
    if (!load_index(r, rr, header_len, size)) {
        rr->data_end = size;
        err = scan(r, rr, header_len, size);
        if (err != SDD_OK) {
            goto out_close;
        }
    }
    *out = r;
    return SDD_OK;

out_close:
    raw_close(r);
    return err;
}
