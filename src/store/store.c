/* The generic half of the run store: option checks, the NAME.partial scheme (create
 * exclusively, rename on a successful close), totals, and the null writer. */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "sddaq/log.h"
#include "store_internal.h"

const char *sdd_store_kind_name(sdd_store_kind kind)
{
    switch (kind) {
    case SDD_STORE_NULL:
        return "null";
    case SDD_STORE_RAW:
        return "raw";
    case SDD_STORE_HDF5:
        return "hdf5";
    }
    return "?";
}

sdd_err store_os_error(const char *what, const char *path, int errnum)
{
    SDD_ERROR(STORE_LOG, "%s %s: %s", what, path, strerror(errnum));
    return sdd_err_from_errno(errnum);
}

static uint64_t unix_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static sdd_err null_write(sdd_store *w, const struct sdd_store_rec *rec)
{
    (void)w;
    (void)rec;
    return SDD_OK;
}

static sdd_err null_finish(sdd_store *w)
{
    (void)w;
    return SDD_OK;
}

static void null_release(sdd_store *w)
{
    (void)w;
}

static const struct store_ops null_ops = {null_write, null_finish, null_release};

static void store_free(sdd_store *w)
{
    free(w->path);
    free(w->partial);
    free(w->topology);
    free(w);
}

sdd_err sdd_store_open(const struct sdd_store_opts *opts, sdd_store **out)
{
    if (opts == NULL || out == NULL ||
        (opts->kind != SDD_STORE_NULL && opts->kind != SDD_STORE_RAW &&
         opts->kind != SDD_STORE_HDF5) ||
        (opts->kind != SDD_STORE_NULL && (opts->path == NULL || opts->path[0] == '\0'))) {
        return SDD_EINVAL;
    }
    size_t tlen = opts->topology != NULL ? strlen(opts->topology) : 0;
    if (tlen > SDD_STORE_TOPOLOGY_MAX) {
        SDD_ERROR(STORE_LOG, "topology text of %zu bytes exceeds %u", tlen, SDD_STORE_TOPOLOGY_MAX);
        return SDD_EINVAL;
    }
    sdd_err err = SDD_ENOMEM;
    sdd_store *w = calloc(1, sizeof(*w));
    if (w == NULL) {
        return SDD_ENOMEM;
    }
    w->opts = *opts;
    w->topology = malloc(tlen + 1);
    if (w->topology == NULL) {
        goto out_free;
    }
    memcpy(w->topology, tlen > 0 ? opts->topology : "", tlen + 1);
    w->topology_len = tlen;
    w->opts.topology = w->topology;
    if (w->opts.buffer_bytes == 0) {
        w->opts.buffer_bytes = STORE_DEFAULT_BUFFER;
    }
    if (w->opts.buffer_bytes < 4096) {
        w->opts.buffer_bytes = 4096;
    }
    w->sum.kind = opts->kind;
    w->sum.start_unix_ns = opts->start_unix_ns != 0 ? opts->start_unix_ns : unix_now_ns();
    w->opts.start_unix_ns = w->sum.start_unix_ns;
    if (opts->kind == SDD_STORE_NULL) {
        w->ops = &null_ops;
        *out = w;
        return SDD_OK;
    }
    size_t plen = strlen(opts->path);
    w->path = strdup(opts->path);
    w->partial = malloc(plen + sizeof(SDD_STORE_PARTIAL_SUFFIX));
    if (w->path == NULL || w->partial == NULL) {
        goto out_free;
    }
    memcpy(w->partial, opts->path, plen);
    memcpy(w->partial + plen, SDD_STORE_PARTIAL_SUFFIX, sizeof(SDD_STORE_PARTIAL_SUFFIX));
    w->opts.path = w->path;
    struct stat st;
    if (!opts->overwrite && stat(w->path, &st) == 0) {
        SDD_ERROR(STORE_LOG, "%s exists (not overwriting a run file)", w->path);
        err = SDD_EBUSY;
        goto out_free;
    }
    /* Exclusive: a NAME.partial left by a crashed writer holds data nobody has looked at. */
    int fd = open(w->partial, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        int e = errno;
        if (e == EEXIST) {
            SDD_ERROR(STORE_LOG, "%s exists: another writer, or an unfinished run to recover",
                      w->partial);
            err = SDD_EBUSY;
        } else {
            err = store_os_error("create", w->partial, e);
        }
        goto out_free;
    }
    err = opts->kind == SDD_STORE_RAW ? store_raw_open(w, fd) : store_hdf5_open(w, fd);
    if (err != SDD_OK) {
        /* Nothing worth keeping was written yet; do not leave an empty .partial behind. */
        unlink(w->partial);
        goto out_free;
    }
    *out = w;
    return SDD_OK;

out_free:
    store_free(w);
    return err;
}

static inline void count(sdd_store *w, const struct sdd_store_rec *rec)
{
    if (w->sum.records == 0) {
        w->sum.first_id = rec->id;
    }
    w->sum.records++;
    w->sum.bytes += rec->size;
    w->sum.flagged += rec->flags != 0;
    w->sum.last_id = rec->id;
}

sdd_err sdd_store_write(sdd_store *w, const struct sdd_store_rec *rec)
{
    if (w->failed != SDD_OK) {
        return w->failed;
    }
    if (rec == NULL || (rec->data == NULL && rec->size > 0)) {
        return SDD_EINVAL;
    }
    sdd_err err = w->ops->write(w, rec);
    if (err != SDD_OK) {
        w->failed = err;
        return err;
    }
    count(w, rec);
    return SDD_OK;
}

int64_t sdd_store_write_batch(sdd_store *w, const struct sdd_store_rec *recs, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++) {
        sdd_err err = sdd_store_write(w, &recs[i]);
        if (err != SDD_OK) {
            return i > 0 ? (int64_t)i : err;
        }
    }
    return (int64_t)n;
}

void sdd_store_stats(const sdd_store *w, struct sdd_store_summary *out)
{
    *out = w->sum;
}

/* Rename without replacing an existing file unless asked; renameat2 is atomic about it, the
 * fallback (file systems without RENAME_NOREPLACE) checks first. */
static int finish_rename(const sdd_store *w)
{
    if (w->opts.overwrite) {
        return rename(w->partial, w->path);
    }
    if (renameat2(AT_FDCWD, w->partial, AT_FDCWD, w->path, RENAME_NOREPLACE) == 0) {
        return 0;
    }
    if (errno != EINVAL && errno != ENOSYS) {
        return -1;
    }
    struct stat st;
    if (stat(w->path, &st) == 0) {
        errno = EEXIST;
        return -1;
    }
    return rename(w->partial, w->path);
}

static void sync_dir(const char *path)
{
    char *copy = strdup(path);
    if (copy == NULL) {
        return;
    }
    int dfd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    free(copy);
}

sdd_err sdd_store_close(sdd_store *w, struct sdd_store_summary *summary)
{
    if (w == NULL) {
        return SDD_OK;
    }
    w->sum.stop_unix_ns = unix_now_ns();
    sdd_err err = w->failed;
    if (err == SDD_OK) {
        err = w->ops->finish(w);
    }
    w->ops->release(w);
    if (w->partial != NULL) {
        struct stat st;
        if (stat(w->partial, &st) == 0) {
            w->sum.file_bytes = (uint64_t)st.st_size;
        }
        if (err == SDD_OK) {
            if (finish_rename(w) != 0) {
                err = store_os_error("rename to final name", w->partial, errno);
            } else if (w->opts.fsync) {
                sync_dir(w->path);
            }
        } else {
            SDD_ERROR(STORE_LOG, "%s left incomplete (%s)", w->partial, sdd_strerror(err));
        }
    }
    if (summary != NULL) {
        *summary = w->sum;
    }
    store_free(w);
    return err;
}
