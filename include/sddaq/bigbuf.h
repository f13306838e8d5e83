/* Large data buffers: the regions the event builder registers with the fabric once and moves
 * every byte through (RU bulk pools, BU slots). Asked for huge pages, a region of at least
 * SDD_BIGBUF_HUGE_MIN bytes is mapped on a 2 MiB boundary, rounded up to whole 2 MiB and
 * offered to the kernel for transparent huge pages, so the builder's first read of each
 * fragment and the copies into the region walk one page-table entry per 2 MiB instead of 512.
 * Where the kernel has huge pages off, the region is ordinary 4 KiB pages; nothing else
 * changes. */
#ifndef SDDAQ_BIGBUF_H
#define SDDAQ_BIGBUF_H

#include <stdbool.h>
#include <stddef.h>

#include "sddaq/api.h"

/* Regions this large or larger get the huge-page treatment; smaller ones are page-rounded. */
#define SDD_BIGBUF_HUGE_MIN ((size_t)256 << 10)
#define SDD_BIGBUF_HUGE     ((size_t)2 << 20)

/* Map a zeroed, writable region of at least `bytes` bytes, page-aligned; with `huge` and
 * bytes >= SDD_BIGBUF_HUGE_MIN, 2 MiB-aligned, whole 2 MiB and advised for huge pages.
 * *mapped receives the size actually mapped, which sdd_bigbuf_free() needs. Returns NULL for
 * bytes 0, mapped NULL or no memory. Allocates and may block: not for the data path.
 * Thread-safe. */
SDD_API void *sdd_bigbuf_alloc(size_t bytes, bool huge, size_t *mapped);

/* Whether data buffers moved by this libfabric provider ("shm", "tcp;ofi_rxm", ...) should
 * ask for huge pages: SDDAQ_HUGE_PAGES=on or off in the environment decides; otherwise yes for
 * every provider but tcp, which measured slower with them on loopback (docs/PERFORMANCE.md).
 * The event builder and `sddaq perf` both follow it, so a reference is never measured on
 * other memory than the builder. */
SDD_API bool sdd_bigbuf_huge_for(const char *provider);

/* Unmap a region from sdd_bigbuf_alloc() (NULL is ignored). */
SDD_API void sdd_bigbuf_free(void *p, size_t mapped);

#endif
