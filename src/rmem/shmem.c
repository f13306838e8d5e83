/* memfd-backed regions and read-only mappings of a peer's. */
#include "rmem/shmem.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static size_t page_round(size_t len)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    return (len + page - 1) / page * page;
}

struct rm_shm_status *rm_shm_status(const struct rm_shm *s)
{
    return (struct rm_shm_status *)((uint8_t *)s->addr + s->len - (size_t)sysconf(_SC_PAGESIZE));
}

sdd_err rm_shm_alloc(struct rm_shm *s, size_t len)
{
    size_t mapped = page_round(len) + (size_t)sysconf(_SC_PAGESIZE);
    int fd = memfd_create("sddaq-rmem", MFD_CLOEXEC);
    if (fd < 0) {
        return sdd_err_from_errno(errno);
    }
    if (ftruncate(fd, (off_t)mapped) != 0) {
        int e = errno;
        close(fd);
        return sdd_err_from_errno(e);
    }
    void *addr = mmap(NULL, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (addr == MAP_FAILED) {
        int e = errno;
        close(fd);
        return sdd_err_from_errno(e);
    }
    *s = (struct rm_shm){.addr = addr, .len = mapped, .fd = fd}; /* a new memfd reads zero */
    return SDD_OK;
}

sdd_err rm_shm_map_peer(struct rm_shm *s, uint32_t pid, uint32_t fd, size_t len)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%u/fd/%u", pid, fd);
    int my = open(path, O_RDONLY | O_CLOEXEC);
    if (my < 0) {
        return errno == ENOENT ? SDD_ENOENT : SDD_EACCES;
    }
    struct stat st;
    size_t mapped = page_round(len) + (size_t)sysconf(_SC_PAGESIZE);
    sdd_err err = SDD_OK;
    void *addr = MAP_FAILED;
    if (fstat(my, &st) != 0 || (size_t)st.st_size < mapped) {
        err = SDD_EPROTO; /* not the region we were told about */
    } else {
        addr = mmap(NULL, mapped, PROT_READ, MAP_SHARED, my, 0);
        err = addr == MAP_FAILED ? SDD_EACCES : SDD_OK;
    }
    close(my); /* the mapping keeps the memory */
    if (err == SDD_OK) {
        *s = (struct rm_shm){.addr = addr, .len = mapped, .fd = -1};
    }
    return err;
}

void rm_shm_free(struct rm_shm *s)
{
    if (s->addr == NULL) {
        return;
    }
    if (s->fd >= 0) { /* ours: tell mappers before the memory goes */
        atomic_store_explicit(&rm_shm_status(s)->retired, 1, memory_order_release);
    }
    munmap(s->addr, s->len);
    if (s->fd >= 0) {
        close(s->fd);
    }
    memset(s, 0, sizeof(*s));
}

uint64_t rm_host_id(void)
{
    char id[64] = {0};
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f == NULL) {
        return 0;
    }
    size_t n = fread(id, 1, sizeof(id) - 1, f);
    fclose(f);
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) {
        h = (h ^ (uint8_t)id[i]) * 1099511628211ull;
    }
    return n > 0 ? h : 0;
}
