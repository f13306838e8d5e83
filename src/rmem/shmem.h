/* Shareable memory for rmem regions (internal). A server's own region lives in a memfd, so a
 * client on the same host can map it read-only (through /proc/PID/fd/N) and read it with
 * plain loads instead of RMA: no copy through the kernel, no server progress needed. */
#ifndef SDDAQ_RMEM_SHMEM_H
#define SDDAQ_RMEM_SHMEM_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "sddaq/err.h"

struct rm_shm {
    void *addr;
    size_t len; /* mapped bytes (page multiple), the status page included */
    int fd;     /* the memfd; -1 for a peer's mapping */
};

/* The last page of every mapping holds this status: the server sets retired before it lets
 * the region go, so a client still mapping it knows its copy is stale. */
struct rm_shm_status {
    _Atomic uint64_t retired;
};

struct rm_shm_status *rm_shm_status(const struct rm_shm *s);

/* Zeroed, page-aligned, shareable memory of at least len bytes. */
sdd_err rm_shm_alloc(struct rm_shm *s, size_t len);

/* Map len bytes of process pid's fd read-only. SDD_EACCES / SDD_ENOENT when this process may
 * not (another host, container or user). */
sdd_err rm_shm_map_peer(struct rm_shm *s, uint32_t pid, uint32_t fd, size_t len);

/* Unmap and close; a zeroed struct is fine. */
void rm_shm_free(struct rm_shm *s);

/* This boot of this host (a hash of /proc/sys/kernel/random/boot_id), 0 if unknown. */
uint64_t rm_host_id(void);

#endif
