/* Internals of the run store shared by its backends (raw, HDF5, null): the writer and reader
 * objects with their ops tables, and the raw format's constants. Never installed. */
#ifndef SDDAQ_STORE_INTERNAL_H
#define SDDAQ_STORE_INTERNAL_H

#include "sddaq/store.h"

#define STORE_LOG "store"

#define STORE_DEFAULT_BUFFER (16u << 20)

struct store_ops {
    /* Append one record (already checked: data != NULL or size == 0). */
    sdd_err (*write)(sdd_store *w, const struct sdd_store_rec *rec);
    /* Flush everything, write closing attributes or the index, fsync if asked. The generic
     * code renames the file after a successful finish. */
    sdd_err (*finish)(sdd_store *w);
    /* Release the backend's resources (after finish, or instead of it on failure). */
    void (*release)(sdd_store *w);
};

struct sdd_store {
    const struct store_ops *ops;
    struct sdd_store_opts opts; /* path and topology point to the copies below */
    char *path;
    char *partial;
    char *topology;
    size_t topology_len;
    struct sdd_store_summary sum;
    sdd_err failed; /* first write error: the writer is broken */
    void *impl;
};

/* Backends: set w->ops and w->impl. fd is the freshly created NAME.partial (the callee owns
 * it from now on, also on failure). */
sdd_err store_raw_open(sdd_store *w, int fd);
sdd_err store_hdf5_open(sdd_store *w, int fd);

/* Log a failed system call on path and convert errno (read before anything else). */
sdd_err store_os_error(const char *what, const char *path, int errnum);

struct store_reader_ops {
    sdd_err (*get)(sdd_store_reader *r, uint64_t i, struct sdd_store_rec *rec, void *buf,
                   size_t cap);
    sdd_err (*verify)(sdd_store_reader *r, uint64_t *bad);
    void (*close)(sdd_store_reader *r);
};

struct sdd_store_reader {
    const struct store_reader_ops *ops;
    struct sdd_store_info info;
    char *topology;
    void *impl;
};

/* Open a raw file (fd is open for reading; the reader owns it from now on, also on failure). */
sdd_err store_raw_reader_open(const char *path, int fd, sdd_store_reader **out);
/* Open an HDF5 run file. */
sdd_err store_hdf5_reader_open(const char *path, sdd_store_reader **out);

/* Raw format (docs/formats.md, "Run storage: raw"), all integers little-endian. */
#define RAW_FILE_MAGIC    "SDDAQRAW"
#define RAW_TRAILER_MAGIC "SDDAQIDX"
#define RAW_VERSION       1u
#define RAW_FILE_FIXED    52u         /* file header bytes before the topology text */
#define RAW_REC_MAGIC     0x52444453u /* "SDDR" */
#define RAW_REC_HEADER    40u
#define RAW_REC_CRC_AT    36u
#define RAW_INDEX_ENTRY   16u /* u64 offset, u64 id */
#define RAW_TRAILER       64u

/* HDF5 layout (docs/formats.md, "Run storage: HDF5"). */
#define H5_FORMAT_NAME    "sddaq-run"
#define H5_FORMAT_VERSION 1u
#define H5_DATA_CHUNK     (4u << 20) /* bytes per /events/data chunk */
#define H5_META_CHUNK     16384u     /* elements per chunk of the per-record datasets */

#define STORE_VERSION_STRING "0.1.0"

#endif
