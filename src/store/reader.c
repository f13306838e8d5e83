/* The generic run reader: detects the kind of a file from its first bytes and forwards to
 * the raw or HDF5 backend. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "sddaq/log.h"
#include "store_internal.h"

/* HDF5's signature; the store writes it at offset 0 (no user block). */
static const uint8_t h5_signature[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};

sdd_err sdd_store_reader_open(const char *path, sdd_store_reader **out)
{
    if (path == NULL || out == NULL) {
        return SDD_EINVAL;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return store_os_error("open", path, errno);
    }
    uint8_t head[8] = {0};
    ssize_t n = pread(fd, head, sizeof(head), 0);
    if (n == (ssize_t)sizeof(head) && memcmp(head, RAW_FILE_MAGIC, 8) == 0) {
        return store_raw_reader_open(path, fd, out);
    }
    close(fd);
    if (n == (ssize_t)sizeof(head) && memcmp(head, h5_signature, 8) == 0) {
        return store_hdf5_reader_open(path, out);
    }
    SDD_ERROR(STORE_LOG, "%s: not an sddaq run file (neither raw nor HDF5)", path);
    return SDD_EPROTO;
}

const struct sdd_store_info *sdd_store_reader_info(const sdd_store_reader *r)
{
    return &r->info;
}

sdd_err sdd_store_reader_get(sdd_store_reader *r, uint64_t i, struct sdd_store_rec *rec, void *buf,
                             size_t cap)
{
    return r->ops->get(r, i, rec, buf, cap);
}

sdd_err sdd_store_reader_verify(sdd_store_reader *r, uint64_t *bad)
{
    return r->ops->verify(r, bad);
}

void sdd_store_reader_close(sdd_store_reader *r)
{
    if (r != NULL) {
        r->ops->close(r);
    }
}
