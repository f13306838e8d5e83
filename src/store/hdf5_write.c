/* The HDF5 run writer. Records go to six extensible 1-D datasets of per-record values under
 * /events (id, time_ns, flags, offset, size, crc32c) and their bytes to one extensible uint8
 * dataset /events/data. All are buffered here and appended in whole chunks — 4 MiB of data,
 * 16384 values — with the chunk cache off, so HDF5 writes each chunk straight to the file
 * instead of one H5Dwrite per record. Run attributes sit on the root group.
 *
 * The serial HDF5 library is not thread-safe, so every HDF5 call of the store holds
 * store_h5_lock; writers in different threads are serialized only while they flush. */
#include <errno.h>
#include <hdf5.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "sddaq/crc32c.h"
#include "sddaq/log.h"
#include "store_h5.h"

pthread_mutex_t store_h5_lock = PTHREAD_MUTEX_INITIALIZER;

static pthread_once_t quiet_once = PTHREAD_ONCE_INIT;

static void quiet(void)
{
    /* Errors are reported through sdd_err and our log, not HDF5's stack dump on stderr. */
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

void store_h5_init(void)
{
    pthread_once(&quiet_once, quiet);
}

enum { M_ID, M_TIME, M_FLAGS, M_OFFSET, M_SIZE, M_CRC, M_COUNT };

static const char *const meta_names[M_COUNT] = {"id",     "time_ns", "flags",
                                                "offset", "size",    "crc32c"};

struct h5_w {
    hid_t file, events, data;
    hid_t meta[M_COUNT];
    uint64_t *u64[M_COUNT]; /* M_ID, M_TIME, M_OFFSET, M_SIZE */
    uint32_t *u32[M_COUNT]; /* M_FLAGS, M_CRC */
    size_t meta_n;          /* values buffered */
    uint64_t meta_written;
    uint8_t *buf;
    size_t cap, len;
    uint64_t data_written, data_total;
    bool broken; /* an HDF5 call failed: divert before closing */
};

/* After a failed write (a full disk), HDF5 1.10 cannot close the file: its closing flush
 * fails again, the file stays half-open in the library, and the library's exit handler then
 * crashes on it. So the file descriptor under HDF5 is pointed at an anonymous memory file
 * (sparse, only metadata lands there): the close succeeds, and what reached the disk before
 * the error stays in NAME.partial. Caller holds store_h5_lock. */
static void divert(hid_t file)
{
    /* Only the default sec2 driver's handle is a plain int file descriptor. */
    hid_t fapl = H5Fget_access_plist(file);
    bool sec2 = fapl >= 0 && H5Pget_driver(fapl) == H5FD_SEC2;
    if (fapl >= 0) {
        H5Pclose(fapl);
    }
    void *handle = NULL;
    if (!sec2 || H5Fget_vfd_handle(file, H5P_DEFAULT, &handle) < 0 || handle == NULL) {
        return;
    }
    int fd = *(int *)handle;
    int m = memfd_create("sddaq-h5-discard", MFD_CLOEXEC);
    if (m >= 0) {
        dup2(m, fd);
        close(m);
    }
}

static bool is_u32(int m)
{
    return m == M_FLAGS || m == M_CRC;
}

/* An HDF5 call failed: the system's reason when it left one, else HDF5's. */
static sdd_err h5_error(sdd_store *w, const char *what, int errnum)
{
    ((struct h5_w *)w->impl)->broken = true;
    if (errnum != 0) {
        return store_os_error(what, w->partial, errnum);
    }
    SDD_ERROR(STORE_LOG, "%s %s: HDF5 call failed", what, w->partial);
    return SDD_EIO;
}

static hid_t create_1d(hid_t loc, const char *name, hid_t type, hsize_t chunk)
{
    hsize_t zero = 0, unlimited = H5S_UNLIMITED;
    hid_t space = H5Screate_simple(1, &zero, &unlimited);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    hid_t dapl = H5Pcreate(H5P_DATASET_ACCESS);
    hid_t d = H5I_INVALID_HID;
    /* Chunks are written whole, and the last one only up to the extent: a fill value would be
     * written (zeroed first) for bytes nobody can read. */
    if (space >= 0 && dcpl >= 0 && dapl >= 0 && H5Pset_chunk(dcpl, 1, &chunk) >= 0 &&
        H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER) >= 0 &&
        H5Pset_chunk_cache(dapl, 0, 0, 1.0) >= 0) {
        d = H5Dcreate2(loc, name, type, space, H5P_DEFAULT, dcpl, dapl);
    }
    H5Sclose(space);
    H5Pclose(dcpl);
    H5Pclose(dapl);
    return d;
}

/* Append n values at position at of a 1-D dataset. */
static int append(hid_t d, hid_t memtype, const void *p, hsize_t at, hsize_t n)
{
    hsize_t size = at + n;
    if (H5Dset_extent(d, &size) < 0) {
        return -1;
    }
    hid_t fs = H5Dget_space(d);
    hid_t ms = H5Screate_simple(1, &n, NULL);
    int rc = -1;
    if (fs >= 0 && ms >= 0 && H5Sselect_hyperslab(fs, H5S_SELECT_SET, &at, NULL, &n, NULL) >= 0 &&
        H5Dwrite(d, memtype, ms, fs, H5P_DEFAULT, p) >= 0) {
        rc = 0;
    }
    H5Sclose(fs);
    H5Sclose(ms);
    return rc;
}

static sdd_err flush_meta(sdd_store *w, struct h5_w *h)
{
    if (h->meta_n == 0) {
        return SDD_OK;
    }
    sdd_err err = SDD_OK;
    pthread_mutex_lock(&store_h5_lock);
    for (int m = 0; m < M_COUNT && err == SDD_OK; m++) {
        errno = 0;
        if (append(h->meta[m], is_u32(m) ? H5T_NATIVE_UINT32 : H5T_NATIVE_UINT64,
                   is_u32(m) ? (const void *)h->u32[m] : (const void *)h->u64[m], h->meta_written,
                   h->meta_n) != 0) {
            err = h5_error(w, "write", errno);
        }
    }
    pthread_mutex_unlock(&store_h5_lock);
    h->meta_written += h->meta_n;
    h->meta_n = 0;
    return err;
}

static sdd_err flush_data(sdd_store *w, struct h5_w *h)
{
    if (h->len == 0) {
        return SDD_OK;
    }
    sdd_err err = SDD_OK;
    pthread_mutex_lock(&store_h5_lock);
    errno = 0;
    if (append(h->data, H5T_NATIVE_UINT8, h->buf, h->data_written, h->len) != 0) {
        err = h5_error(w, "write", errno);
    }
    pthread_mutex_unlock(&store_h5_lock);
    h->data_written += h->len;
    h->len = 0;
    return err;
}

static sdd_err h5_write(sdd_store *w, const struct sdd_store_rec *rec)
{
    struct h5_w *h = w->impl;
    size_t i = h->meta_n;
    h->u64[M_ID][i] = rec->id;
    h->u64[M_TIME][i] = rec->time_ns;
    h->u32[M_FLAGS][i] = rec->flags;
    h->u64[M_OFFSET][i] = h->data_total;
    h->u64[M_SIZE][i] = rec->size;
    h->u32[M_CRC][i] = sdd_crc32c(0, rec->data, rec->size);
    h->meta_n++;
    h->data_total += rec->size;
    const uint8_t *p = rec->data;
    uint64_t n = rec->size;
    sdd_err err = SDD_OK;
    /* The buffer is a whole number of chunks and is written only when full, so every chunk
     * but the last reaches the file in one piece. */
    while (n > 0 && err == SDD_OK) {
        size_t k = h->cap - h->len < n ? h->cap - h->len : (size_t)n;
        memcpy(h->buf + h->len, p, k);
        h->len += k;
        p += k;
        n -= k;
        if (h->len == h->cap) {
            err = flush_data(w, h);
        }
    }
    if (err == SDD_OK && h->meta_n == H5_META_CHUNK) {
        err = flush_meta(w, h);
    }
    return err;
}

static int attr_u64(hid_t loc, const char *name, uint64_t v)
{
    hid_t s = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(loc, name, H5T_STD_U64LE, s, H5P_DEFAULT, H5P_DEFAULT);
    int rc = a >= 0 && H5Awrite(a, H5T_NATIVE_UINT64, &v) >= 0 ? 0 : -1;
    H5Aclose(a);
    H5Sclose(s);
    return rc;
}

/* A variable-length UTF-8 string: h5py returns it as str. */
static int attr_str(hid_t loc, const char *name, const char *v)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, H5T_VARIABLE);
    H5Tset_cset(t, H5T_CSET_UTF8);
    hid_t s = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(loc, name, t, s, H5P_DEFAULT, H5P_DEFAULT);
    int rc = a >= 0 && H5Awrite(a, t, &v) >= 0 ? 0 : -1;
    H5Aclose(a);
    H5Sclose(s);
    H5Tclose(t);
    return rc;
}

static sdd_err h5_finish(sdd_store *w)
{
    struct h5_w *h = w->impl;
    sdd_err err = flush_data(w, h);
    if (err == SDD_OK) {
        err = flush_meta(w, h);
    }
    if (err != SDD_OK) {
        return err;
    }
    pthread_mutex_lock(&store_h5_lock);
    errno = 0;
    if (attr_u64(h->file, "stop_unix_ns", w->sum.stop_unix_ns) != 0 ||
        attr_u64(h->file, "records", w->sum.records) != 0 ||
        attr_u64(h->file, "bytes", w->sum.bytes) != 0 ||
        attr_u64(h->file, "flagged", w->sum.flagged) != 0) {
        err = h5_error(w, "write attributes to", errno);
    }
    for (int m = 0; m < M_COUNT; m++) {
        H5Dclose(h->meta[m]);
        h->meta[m] = H5I_INVALID_HID;
    }
    H5Dclose(h->data);
    H5Gclose(h->events);
    h->data = h->events = H5I_INVALID_HID;
    errno = 0;
    if (err == SDD_OK && H5Fflush(h->file, H5F_SCOPE_LOCAL) < 0) {
        err = h5_error(w, "flush", errno);
    }
    if (err != SDD_OK) {
        divert(h->file);
    }
    errno = 0;
    herr_t rc = H5Fclose(h->file);
    h->file = H5I_INVALID_HID;
    if (err == SDD_OK && rc < 0) {
        err = h5_error(w, "close", errno);
    }
    pthread_mutex_unlock(&store_h5_lock);
    if (err == SDD_OK && w->opts.fsync) {
        /* HDF5's sec2 driver has no fsync; open the closed file again to sync it. */
        int fd = open(w->partial, O_RDONLY | O_CLOEXEC);
        if (fd < 0 || fsync(fd) != 0) {
            err = store_os_error("fsync", w->partial, errno);
        }
        if (fd >= 0) {
            close(fd);
        }
    }
    return err;
}

static void h5_release(sdd_store *w)
{
    struct h5_w *h = w->impl;
    if (h == NULL) {
        return;
    }
    pthread_mutex_lock(&store_h5_lock);
    if (h->file >= 0 && h->broken) {
        divert(h->file);
    }
    for (int m = 0; m < M_COUNT; m++) {
        if (h->meta[m] >= 0) {
            H5Dclose(h->meta[m]);
        }
    }
    if (h->data >= 0) {
        H5Dclose(h->data);
    }
    if (h->events >= 0) {
        H5Gclose(h->events);
    }
    if (h->file >= 0) {
        H5Fclose(h->file);
    }
    pthread_mutex_unlock(&store_h5_lock);
    for (int m = 0; m < M_COUNT; m++) {
        free(h->u64[m]);
        free(h->u32[m]);
    }
    free(h->buf);
    free(h);
    w->impl = NULL;
}

static const struct store_ops h5_ops = {h5_write, h5_finish, h5_release};

sdd_err store_hdf5_open(sdd_store *w, int fd)
{
    close(fd); /* created exclusively by the caller; HDF5 opens it by name */
    store_h5_init();
    struct h5_w *h = calloc(1, sizeof(*h));
    if (h == NULL) {
        return SDD_ENOMEM;
    }
    h->file = h->events = h->data = H5I_INVALID_HID;
    for (int m = 0; m < M_COUNT; m++) {
        h->meta[m] = H5I_INVALID_HID;
    }
    w->impl = h;
    w->ops = &h5_ops;
    h->cap = (w->opts.buffer_bytes + H5_DATA_CHUNK - 1) / H5_DATA_CHUNK * H5_DATA_CHUNK;
    h->buf = malloc(h->cap);
    bool ok = h->buf != NULL;
    for (int m = 0; m < M_COUNT && ok; m++) {
        if (is_u32(m)) {
            ok = (h->u32[m] = malloc(H5_META_CHUNK * sizeof(uint32_t))) != NULL;
        } else {
            ok = (h->u64[m] = malloc(H5_META_CHUNK * sizeof(uint64_t))) != NULL;
        }
    }
    if (!ok) {
        h5_release(w);
        return SDD_ENOMEM;
    }
    sdd_err err = SDD_OK;
    pthread_mutex_lock(&store_h5_lock);
    errno = 0;
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    /* The 1.10 format: extensible-array chunk indexes, cheaper to append to than B-trees. */
    if (fapl >= 0 && H5Pset_libver_bounds(fapl, H5F_LIBVER_V110, H5F_LIBVER_LATEST) >= 0) {
        h->file = H5Fcreate(w->partial, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    }
    H5Pclose(fapl);
    if (h->file < 0) {
        err = h5_error(w, "create", errno);
        goto out_unlock;
    }
    errno = 0;
    h->events = H5Gcreate2(h->file, "events", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    ok = h->events >= 0;
    for (int m = 0; m < M_COUNT && ok; m++) {
        h->meta[m] = create_1d(h->events, meta_names[m], is_u32(m) ? H5T_STD_U32LE : H5T_STD_U64LE,
                               H5_META_CHUNK);
        ok = h->meta[m] >= 0;
    }
    if (ok) {
        h->data = create_1d(h->events, "data", H5T_STD_U8LE, H5_DATA_CHUNK);
        ok = h->data >= 0;
    }
    ok = ok && attr_str(h->file, "format", H5_FORMAT_NAME) == 0 &&
         attr_u64(h->file, "format_version", H5_FORMAT_VERSION) == 0 &&
         attr_u64(h->file, "run_number", w->opts.run_number) == 0 &&
         attr_str(h->file, "sddaq_version", STORE_VERSION_STRING) == 0 &&
         attr_str(h->file, "topology", w->topology) == 0 &&
         attr_u64(h->file, "start_unix_ns", w->opts.start_unix_ns) == 0;
    if (!ok) {
        err = h5_error(w, "create datasets in", errno);
    }
out_unlock:
    pthread_mutex_unlock(&store_h5_lock);
    if (err != SDD_OK) {
        h5_release(w);
    }
    return err;
}
