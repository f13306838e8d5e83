/* The raw run writer: a file header, records (40-byte header with a CRC-32C over header and
 * payload, then the payload) gathered in one large buffer and written with few system calls
 * (large records go straight from the caller's memory),
 * and at close an index of (offset, id) pairs and a trailer that locates it. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core/le.h"
#include "sddaq/crc32c.h"
#include "store_internal.h"

/* Records from this size on go from the caller's memory straight to the file (one writev with
 * whatever is buffered) instead of through the buffer: copying them costs more than the system
 * call saves. */
#define DIRECT_MIN (64u << 10)

struct raw_w {
    int fd;
    uint8_t *buf;
    size_t cap, len;
    uint64_t off; /* file offset of buf[len] */
    uint8_t *index;
    size_t index_n, index_cap; /* entries */
    uint64_t index_offset;
};

/* Write all of iov (short writes and EINTR continue); an error is logged with the path. */
static sdd_err write_all(sdd_store *w, int fd, struct iovec *iov, int n)
{
    while (n > 0) {
        ssize_t k = writev(fd, iov, n);
        if (k < 0) {
            if (errno == EINTR) {
                continue;
            }
            return store_os_error("write", w->partial, errno);
        }
        size_t done = (size_t)k;
        while (n > 0 && done >= iov->iov_len) {
            done -= iov->iov_len;
            iov++;
            n--;
        }
        if (n > 0) {
            iov->iov_base = (uint8_t *)iov->iov_base + done;
            iov->iov_len -= done;
        }
    }
    return SDD_OK;
}

static sdd_err flush(sdd_store *w, struct raw_w *r)
{
    if (r->len == 0) {
        return SDD_OK;
    }
    struct iovec iov = {r->buf, r->len};
    sdd_err err = write_all(w, r->fd, &iov, 1);
    r->off += r->len;
    r->len = 0;
    return err;
}

static sdd_err put(sdd_store *w, struct raw_w *r, const void *p, size_t n)
{
    while (n > 0) {
        size_t k = r->cap - r->len < n ? r->cap - r->len : n;
        memcpy(r->buf + r->len, p, k);
        r->len += k;
        p = (const uint8_t *)p + k;
        n -= k;
        if (r->len == r->cap) {
            sdd_err err = flush(w, r);
            if (err != SDD_OK) {
                return err;
            }
        }
    }
    return SDD_OK;
}

static sdd_err raw_write(sdd_store *w, const struct sdd_store_rec *rec)
{
    struct raw_w *r = w->impl;
    if (r->index_n == r->index_cap) {
        size_t ncap = r->index_cap != 0 ? r->index_cap * 2 : 4096;
        uint8_t *ni = realloc(r->index, ncap * RAW_INDEX_ENTRY);
        if (ni == NULL) {
            return SDD_ENOMEM;
        }
        r->index = ni;
        r->index_cap = ncap;
    }
    uint8_t h[RAW_REC_HEADER];
    put_le32(h, RAW_REC_MAGIC);
    put_le32(h + 4, rec->flags);
    put_le64(h + 8, rec->id);
    put_le64(h + 16, rec->time_ns);
    put_le64(h + 24, rec->size);
    put_le32(h + 32, 0);
    uint32_t crc = sdd_crc32c(0, h, RAW_REC_CRC_AT);
    crc = sdd_crc32c(crc, rec->data, rec->size);
    put_le32(h + RAW_REC_CRC_AT, crc);

    uint64_t at = r->off + r->len;
    sdd_err err;
    if (rec->size < DIRECT_MIN && RAW_REC_HEADER + rec->size <= r->cap) {
        if (RAW_REC_HEADER + rec->size > r->cap - r->len) {
            err = flush(w, r);
            if (err != SDD_OK) {
                return err;
            }
        }
        memcpy(r->buf + r->len, h, RAW_REC_HEADER);
        if (rec->size > 0) {
            memcpy(r->buf + r->len + RAW_REC_HEADER, rec->data, rec->size);
        }
        r->len += RAW_REC_HEADER + rec->size;
    } else {
        /* Large: no copy, buffered bytes, header and payload straight to the file. */
        struct iovec iov[3] = {
            {r->buf, r->len}, {h, RAW_REC_HEADER}, {(void *)rec->data, rec->size}};
        err = write_all(w, r->fd, iov, 3);
        r->len = 0;
        r->off = at + RAW_REC_HEADER + rec->size;
        if (err != SDD_OK) {
            return err;
        }
    }
    uint8_t *e = r->index + r->index_n * RAW_INDEX_ENTRY;
    put_le64(e, at);
    put_le64(e + 8, rec->id);
    r->index_n++;
    return SDD_OK;
}

static sdd_err raw_finish(sdd_store *w)
{
    struct raw_w *r = w->impl;
    uint64_t index_offset = r->off + r->len;
    size_t index_bytes = r->index_n * RAW_INDEX_ENTRY;
    sdd_err err = put(w, r, r->index, index_bytes);
    if (err != SDD_OK) {
        return err;
    }
    uint8_t t[RAW_TRAILER] = {0};
    memcpy(t, RAW_TRAILER_MAGIC, 8);
    put_le64(t + 8, index_offset);
    put_le64(t + 16, w->sum.records);
    put_le64(t + 24, w->sum.bytes);
    put_le64(t + 32, w->sum.stop_unix_ns);
    put_le64(t + 40, w->sum.flagged);
    put_le32(t + 56, sdd_crc32c(0, r->index, index_bytes));
    put_le32(t + 60, sdd_crc32c(0, t, 60));
    err = put(w, r, t, RAW_TRAILER);
    if (err == SDD_OK) {
        err = flush(w, r);
    }
    if (err == SDD_OK && w->opts.fsync && fsync(r->fd) != 0) {
        err = store_os_error("fsync", w->partial, errno);
    }
    if (err == SDD_OK) {
        int fd = r->fd;
        r->fd = -1;
        if (close(fd) != 0) {
            err = store_os_error("close", w->partial, errno);
        }
    }
    return err;
}

static void raw_release(sdd_store *w)
{
    struct raw_w *r = w->impl;
    if (r == NULL) {
        return;
    }
    if (r->fd >= 0) {
        close(r->fd);
    }
    free(r->buf);
    free(r->index);
    free(r);
    w->impl = NULL;
}

static const struct store_ops raw_ops = {raw_write, raw_finish, raw_release};

sdd_err store_raw_open(sdd_store *w, int fd)
{
    struct raw_w *r = calloc(1, sizeof(*r));
    if (r == NULL) {
        close(fd);
        return SDD_ENOMEM;
    }
    r->fd = fd;
    w->impl = r;
    w->ops = &raw_ops;
    r->cap = w->opts.buffer_bytes;
    r->buf = malloc(r->cap);
    if (r->buf == NULL) {
        raw_release(w);
        return SDD_ENOMEM;
    }
    uint8_t h[RAW_FILE_FIXED] = {0};
    memcpy(h, RAW_FILE_MAGIC, 8);
    put_le32(h + 8, RAW_VERSION);
    put_le32(h + 12, (uint32_t)(RAW_FILE_FIXED + w->topology_len + 4));
    put_le64(h + 16, w->opts.run_number);
    put_le64(h + 24, w->opts.start_unix_ns);
    strncpy((char *)h + 32, STORE_VERSION_STRING, 15);
    put_le32(h + 48, (uint32_t)w->topology_len);
    uint32_t crc = sdd_crc32c(0, h, RAW_FILE_FIXED);
    crc = sdd_crc32c(crc, w->topology, w->topology_len);
    uint8_t c[4];
    put_le32(c, crc);
    sdd_err err = put(w, r, h, RAW_FILE_FIXED);
    if (err == SDD_OK) {
        err = put(w, r, w->topology, w->topology_len);
    }
    if (err == SDD_OK) {
        err = put(w, r, c, 4);
    }
    if (err != SDD_OK) {
        raw_release(w);
    }
    return err;
}
