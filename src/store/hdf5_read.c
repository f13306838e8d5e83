/* The HDF5 run reader: loads the per-record datasets into memory at open (44 bytes per
 * record), checks that they agree with each other and with /events/data, and reads a record's
 * bytes with one hyperslab read. */
#include <errno.h>
#include <inttypes.h>
#include <hdf5.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "sddaq/crc32c.h"
#include "sddaq/log.h"
#include "store_h5.h"

struct h5_r {
    hid_t file, data;
    uint64_t n, data_len;
    uint64_t *id, *time, *off, *size;
    uint32_t *flags, *crc;
};

/* Read a whole 1-D dataset of n values; -1 when missing or of another length. */
static int read_all(hid_t file, const char *name, hid_t memtype, size_t elem, uint64_t *n,
                    void **out)
{
    hid_t d = H5Dopen2(file, name, H5P_DEFAULT);
    if (d < 0) {
        return -1;
    }
    hid_t s = H5Dget_space(d);
    hsize_t len = 0;
    int rc = -1;
    if (s >= 0 && H5Sget_simple_extent_ndims(s) == 1 &&
        H5Sget_simple_extent_dims(s, &len, NULL) == 1 && (*n == UINT64_MAX || len == *n)) {
        void *p = malloc(len * elem + 1);
        if (p != NULL && (len == 0 || H5Dread(d, memtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, p) >= 0)) {
            *out = p;
            *n = len;
            rc = 0;
        } else {
            free(p);
        }
    }
    H5Sclose(s);
    H5Dclose(d);
    return rc;
}

static void attr_u64(hid_t file, const char *name, uint64_t *v)
{
    if (H5Aexists(file, name) <= 0) {
        return;
    }
    hid_t a = H5Aopen(file, name, H5P_DEFAULT);
    if (a >= 0) {
        uint64_t x;
        if (H5Aread(a, H5T_NATIVE_UINT64, &x) >= 0) {
            *v = x;
        }
        H5Aclose(a);
    }
}

/* A string attribute (variable or fixed length) as a malloc'd string, or NULL. */
static char *attr_str(hid_t file, const char *name)
{
    if (H5Aexists(file, name) <= 0) {
        return NULL;
    }
    char *out = NULL;
    hid_t a = H5Aopen(file, name, H5P_DEFAULT);
    hid_t t = a >= 0 ? H5Aget_type(a) : H5I_INVALID_HID;
    if (t >= 0 && H5Tget_class(t) == H5T_STRING) {
        if (H5Tis_variable_str(t) > 0) {
            hid_t mt = H5Tcopy(H5T_C_S1);
            H5Tset_size(mt, H5T_VARIABLE);
            H5Tset_cset(mt, H5Tget_cset(t));
            char *s = NULL;
            if (H5Aread(a, mt, &s) >= 0 && s != NULL) {
                out = strdup(s);
                H5free_memory(s);
            }
            H5Tclose(mt);
        } else {
            size_t len = H5Tget_size(t);
            out = calloc(1, len + 1);
            if (out != NULL && H5Aread(a, t, out) < 0) {
                free(out);
                out = NULL;
            }
        }
    }
    if (t >= 0) {
        H5Tclose(t);
    }
    if (a >= 0) {
        H5Aclose(a);
    }
    return out;
}

static sdd_err read_data(struct h5_r *h, uint64_t at, uint64_t n, void *buf)
{
    if (n == 0) {
        return SDD_OK;
    }
    hsize_t start = at, count = n;
    hid_t fs = H5Dget_space(h->data);
    hid_t ms = H5Screate_simple(1, &count, NULL);
    sdd_err err = SDD_EIO;
    if (fs >= 0 && ms >= 0 &&
        H5Sselect_hyperslab(fs, H5S_SELECT_SET, &start, NULL, &count, NULL) >= 0 &&
        H5Dread(h->data, H5T_NATIVE_UINT8, ms, fs, H5P_DEFAULT, buf) >= 0) {
        err = SDD_OK;
    }
    H5Sclose(fs);
    H5Sclose(ms);
    return err;
}

static sdd_err h5_get(sdd_store_reader *r, uint64_t i, struct sdd_store_rec *rec, void *buf,
                      size_t cap)
{
    struct h5_r *h = r->impl;
    memset(rec, 0, sizeof(*rec));
    if (i >= h->n) {
        return SDD_ENOENT;
    }
    rec->id = h->id[i];
    rec->time_ns = h->time[i];
    rec->flags = h->flags[i];
    rec->size = h->size[i];
    if (rec->size > cap) {
        return SDD_ETOOBIG;
    }
    pthread_mutex_lock(&store_h5_lock);
    sdd_err err = read_data(h, h->off[i], h->size[i], buf);
    pthread_mutex_unlock(&store_h5_lock);
    if (err != SDD_OK) {
        return err;
    }
    rec->data = buf;
    return sdd_crc32c(0, buf, (size_t)rec->size) == h->crc[i] ? SDD_OK : SDD_ECORRUPT;
}

static sdd_err h5_verify(sdd_store_reader *r, uint64_t *bad)
{
    struct h5_r *h = r->impl;
    uint64_t nbad = 0;
    size_t cap = 1u << 20;
    uint8_t *buf = malloc(cap);
    if (buf == NULL) {
        return SDD_ENOMEM;
    }
    sdd_err err = SDD_OK;
    for (uint64_t i = 0; i < h->n && err == SDD_OK; i++) {
        uint32_t c = 0;
        for (uint64_t done = 0; done < h->size[i] && err == SDD_OK;) {
            uint64_t k = h->size[i] - done < cap ? h->size[i] - done : cap;
            pthread_mutex_lock(&store_h5_lock);
            err = read_data(h, h->off[i] + done, k, buf);
            pthread_mutex_unlock(&store_h5_lock);
            c = sdd_crc32c(c, buf, (size_t)k);
            done += k;
        }
        nbad += err == SDD_OK && c != h->crc[i];
    }
    free(buf);
    if (bad != NULL) {
        *bad = nbad;
    }
    return err != SDD_OK ? err : nbad == 0 ? SDD_OK : SDD_ECORRUPT;
}

static void h5_close(sdd_store_reader *r)
{
    struct h5_r *h = r->impl;
    if (h != NULL) {
        pthread_mutex_lock(&store_h5_lock);
        if (h->data >= 0) {
            H5Dclose(h->data);
        }
        if (h->file >= 0) {
            H5Fclose(h->file);
        }
        pthread_mutex_unlock(&store_h5_lock);
        free(h->id);
        free(h->time);
        free(h->off);
        free(h->size);
        free(h->flags);
        free(h->crc);
        free(h);
    }
    free(r->topology);
    free(r);
}

static const struct store_reader_ops h5_reader_ops = {h5_get, h5_verify, h5_close};

sdd_err store_hdf5_reader_open(const char *path, sdd_store_reader **out)
{
    store_h5_init();
    sdd_store_reader *r = calloc(1, sizeof(*r));
    struct h5_r *h = calloc(1, sizeof(*h));
    if (r == NULL || h == NULL) {
        free(r);
        free(h);
        return SDD_ENOMEM;
    }
    r->ops = &h5_reader_ops;
    r->impl = h;
    h->file = h->data = H5I_INVALID_HID;
    struct sdd_store_info *in = &r->info;
    in->kind = SDD_STORE_HDF5;
    struct stat st;
    if (stat(path, &st) == 0) {
        in->file_bytes = (uint64_t)st.st_size;
    }
    sdd_err err = SDD_ECORRUPT;
    pthread_mutex_lock(&store_h5_lock);
    h->file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (h->file < 0) {
        SDD_ERROR(STORE_LOG, "%s: HDF5 cannot open it", path);
        goto out_unlock;
    }
    uint64_t n = UINT64_MAX;
    void *p[6] = {0};
    if (read_all(h->file, "events/id", H5T_NATIVE_UINT64, 8, &n, &p[0]) != 0 ||
        read_all(h->file, "events/time_ns", H5T_NATIVE_UINT64, 8, &n, &p[1]) != 0 ||
        read_all(h->file, "events/offset", H5T_NATIVE_UINT64, 8, &n, &p[2]) != 0 ||
        read_all(h->file, "events/size", H5T_NATIVE_UINT64, 8, &n, &p[3]) != 0 ||
        read_all(h->file, "events/flags", H5T_NATIVE_UINT32, 4, &n, &p[4]) != 0 ||
        read_all(h->file, "events/crc32c", H5T_NATIVE_UINT32, 4, &n, &p[5]) != 0) {
        SDD_ERROR(STORE_LOG, "%s: missing or inconsistent /events datasets", path);
        for (int k = 0; k < 6; k++) {
            free(p[k]);
        }
        goto out_unlock;
    }
    h->id = p[0];
    h->time = p[1];
    h->off = p[2];
    h->size = p[3];
    h->flags = p[4];
    h->crc = p[5];
    h->n = n;
    h->data = H5Dopen2(h->file, "events/data", H5P_DEFAULT);
    hid_t s = h->data >= 0 ? H5Dget_space(h->data) : H5I_INVALID_HID;
    hsize_t dlen = 0;
    if (s < 0 || H5Sget_simple_extent_ndims(s) != 1 ||
        H5Sget_simple_extent_dims(s, &dlen, NULL) != 1) {
        SDD_ERROR(STORE_LOG, "%s: missing /events/data", path);
        if (s >= 0) {
            H5Sclose(s);
        }
        goto out_unlock;
    }
    H5Sclose(s);
    h->data_len = dlen;
    for (uint64_t i = 0; i < n; i++) {
        if (h->off[i] > dlen || h->size[i] > dlen - h->off[i]) {
            SDD_ERROR(STORE_LOG, "%s: record %" PRIu64 " lies outside /events/data", path, i);
            goto out_unlock;
        }
        in->bytes += h->size[i];
    }
    in->records = n;
    in->indexed = true;
    uint64_t v = 0;
    attr_u64(h->file, "format_version", &v);
    in->format_version = (uint32_t)v;
    attr_u64(h->file, "run_number", &in->run_number);
    attr_u64(h->file, "start_unix_ns", &in->start_unix_ns);
    attr_u64(h->file, "stop_unix_ns", &in->stop_unix_ns);
    char *ver = attr_str(h->file, "sddaq_version");
    if (ver != NULL) {
        strncpy(in->sddaq_version, ver, sizeof(in->sddaq_version) - 1);
        free(ver);
    }
    r->topology = attr_str(h->file, "topology");
    if (r->topology == NULL) {
        r->topology = strdup("");
    }
    in->topology = r->topology != NULL ? r->topology : "";
    err = SDD_OK;
out_unlock:
    pthread_mutex_unlock(&store_h5_lock);
    if (err != SDD_OK) {
        h5_close(r);
        return err;
    }
    *out = r;
    return SDD_OK;
}
