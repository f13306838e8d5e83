/* Run storage: writers that append records to a run file and readers that give them back.
 * A record is what any stage hands to storage — a built event, a readout frame, a trigger
 * result: an id, a time, producer-defined flags and a byte string. The store does not look
 * inside the bytes.
 *
 * Writers (sdd_store_open): HDF5 (readable with h5py, layout in docs/formats.md), RAW (the
 * fastest path: records with a CRC-32C each and an index footer) and NULL (counts and
 * discards, to benchmark a chain without a disk). A file is written as NAME.partial and
 * renamed to NAME only by a successful sdd_store_close(), so a file without the suffix is
 * always complete; after any failure (full disk, I/O error, a crash) the data stays in
 * NAME.partial, marked as incomplete by its name. A raw .partial file is readable up to its
 * last whole record.
 *
 * Readers (sdd_store_reader_open) detect the kind from the file's first bytes, give random
 * access to records by position and check checksums. A damaged raw file (truncated tail, a
 * corrupt record, a missing index) is read as far as it can be, with the damage counted in
 * struct sdd_store_info; it never crashes the reader.
 *
 * Thread safety: a writer or a reader belongs to one thread at a time. Different writers and
 * readers are independent. All calls block on file I/O. */
#ifndef SDDAQ_STORE_H
#define SDDAQ_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sddaq/api.h"
#include "sddaq/err.h"

typedef enum {
    SDD_STORE_NULL = 0, /* count and discard; no file */
    SDD_STORE_RAW,      /* sddaq raw format: CRC-32C per record, index footer */
    SDD_STORE_HDF5,     /* HDF5, /events/... datasets */
} sdd_store_kind;

/* Name of a kind: "null", "raw", "hdf5"; "?" for others. */
SDD_API const char *sdd_store_kind_name(sdd_store_kind kind);

/* The suffix of a file being written: NAME.partial until a successful close. */
#define SDD_STORE_PARTIAL_SUFFIX ".partial"

/* Longest topology text stored (bytes, without the terminating NUL). */
#define SDD_STORE_TOPOLOGY_MAX (1u << 20)

/* One record. data is borrowed for the duration of the call that takes it. */
struct sdd_store_rec {
    uint64_t id;      /* event (frame, result) id */
    uint64_t time_ns; /* producer's time stamp, nanoseconds */
    uint32_t flags;   /* producer-defined bits (incomplete, corrupt, ...); 0 = clean */
    const void *data; /* size bytes; may be NULL when size is 0 */
    uint64_t size;
};

struct sdd_store_opts {
    sdd_store_kind kind;
    const char *path;       /* final file name (RAW, HDF5); ignored for NULL */
    uint64_t run_number;    /* stored as an attribute */
    const char *topology;   /* free text (topology, config), copied; NULL = empty */
    uint64_t start_unix_ns; /* run start, wall clock; 0 = now */
    size_t buffer_bytes;    /* write buffer; 0 = 16 MiB. HDF5 rounds it to its chunk (4 MiB) */
    bool overwrite;         /* replace an existing NAME at close; default: refuse at open */
    bool fsync;             /* fsync the file (and its directory after the rename) at close */
};

/* Totals of a written run, filled by sdd_store_close() (also on failure: what was accepted). */
struct sdd_store_summary {
    sdd_store_kind kind;
    uint64_t records;    /* records accepted by sdd_store_write*() */
    uint64_t bytes;      /* payload bytes of those records */
    uint64_t flagged;    /* records with flags != 0 */
    uint64_t first_id;   /* id of the first record (0 when none) */
    uint64_t last_id;    /* id of the last record */
    uint64_t file_bytes; /* size of the file on disk (0 for NULL) */
    uint64_t start_unix_ns, stop_unix_ns;
};

typedef struct sdd_store sdd_store;

/* Open a writer. Creates opts->path + ".partial" (RAW, HDF5).
 * Returns SDD_OK and *out; SDD_EINVAL for bad options (no path, topology too long);
 * SDD_EBUSY when NAME exists (and !overwrite) or NAME.partial exists (another writer, or a
 * crashed run whose data must not be clobbered); SDD_EACCES, SDD_ENOENT, SDD_EOS, SDD_EIO when
 * the file cannot be created (the log line names the path and the system's reason);
 * SDD_ENOMEM. */
SDD_API sdd_err sdd_store_open(const struct sdd_store_opts *opts, sdd_store **out);

/* Append one record; its bytes are copied or written before the call returns.
 * Returns SDD_OK; SDD_EINVAL (NULL data with size > 0); SDD_EIO/SDD_EOS when writing failed
 * (full disk: the log names the path and "No space left on device"). After a failure the
 * writer is broken: every later write returns the same error and close keeps NAME.partial. */
SDD_API sdd_err sdd_store_write(sdd_store *w, const struct sdd_store_rec *rec);

/* Append n records in order; same as n calls of sdd_store_write(), stopping at the first
 * failure. Returns the number appended (n on success) or a negative sdd_err when none was. */
SDD_API int64_t sdd_store_write_batch(sdd_store *w, const struct sdd_store_rec *recs, size_t n);

/* Totals so far (no I/O). */
SDD_API void sdd_store_stats(const sdd_store *w, struct sdd_store_summary *out);

/* Flush, write the run's closing attributes (stop time, counts) and index, optionally fsync,
 * rename NAME.partial to NAME, and free the writer. summary (may be NULL) receives the totals
 * either way. Returns SDD_OK, or the first error met (during writing or closing), in which case
 * the file stays NAME.partial. Accepts NULL (returns SDD_OK). */
SDD_API sdd_err sdd_store_close(sdd_store *w, struct sdd_store_summary *summary);

/* Readers */

typedef struct sdd_store_reader sdd_store_reader;

/* What a reader knows about its file after opening it. */
struct sdd_store_info {
    sdd_store_kind kind;
    uint32_t format_version;
    uint64_t run_number;
    char sddaq_version[32];
    const char *topology; /* owned by the reader; "" when none */
    uint64_t start_unix_ns;
    uint64_t stop_unix_ns; /* 0 when the file was not closed (raw without footer) */
    uint64_t records;      /* records readable (sdd_store_reader_get positions 0..records-1) */
    uint64_t bytes;        /* their payload bytes */
    uint64_t file_bytes;
    bool indexed; /* raw: the index footer was found and valid */
    /* Damage found while opening (raw files; HDF5 files are all or nothing): */
    uint64_t corrupt;         /* records skipped for a bad header or checksum */
    uint64_t skipped_bytes;   /* bytes skipped while looking for the next record */
    uint64_t truncated_bytes; /* bytes of an incomplete record at the end */
};

/* Open a run file of any kind (detected from its first bytes).
 * Returns SDD_OK and *out; SDD_ENOENT/SDD_EACCES/SDD_EOS when it cannot be opened;
 * SDD_EPROTO when it is not an sddaq run file; SDD_ECORRUPT when its structure is unusable
 * (an HDF5 file without the /events datasets, inconsistent lengths); SDD_ENOMEM. */
SDD_API sdd_err sdd_store_reader_open(const char *path, sdd_store_reader **out);

/* The file's attributes and counts; valid until the reader is closed. */
SDD_API const struct sdd_store_info *sdd_store_reader_info(const sdd_store_reader *r);

/* Record number i (0-based, file order): fills rec's id, time_ns, flags and size, and copies
 * the payload into buf when cap >= size (rec->data then points to buf, else NULL).
 * Returns SDD_OK; SDD_ENOENT when i >= records; SDD_ETOOBIG when cap < size (metadata still
 * filled, so the caller can grow buf and retry); SDD_ECORRUPT when the record's checksum does
 * not match (metadata and payload still filled); SDD_EIO on a read error. */
SDD_API sdd_err sdd_store_reader_get(sdd_store_reader *r, uint64_t i, struct sdd_store_rec *rec,
                                     void *buf, size_t cap);

/* Check every record's checksum (raw: CRC-32C of header and payload; HDF5: the
 * /events/crc32c dataset). *bad (may be NULL) receives the number of mismatches.
 * Returns SDD_OK when all match, SDD_ECORRUPT when some do not, SDD_EIO/SDD_ENOMEM. */
SDD_API sdd_err sdd_store_reader_verify(sdd_store_reader *r, uint64_t *bad);

/* Free the reader. Accepts NULL. */
SDD_API void sdd_store_reader_close(sdd_store_reader *r);

#endif
