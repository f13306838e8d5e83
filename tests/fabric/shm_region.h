/* The spin lock inside an shm region (libfabric 1.17: smr_region.lock at offset 24), for tests
 * that make a process hold one, as libfabric does while it progresses or delivers, and then
 * stop or die: what sddaq's shm lock watch (src/fabric/shm_lock.c) must handle. */
#ifndef SDDAQ_TEST_SHM_REGION_H
#define SDDAQ_TEST_SHM_REGION_H

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <unistd.h>

#define SHM_REGION_LOCK_AT 24

/* The lock of the first shm region this process maps that belongs to `owner`, or NULL. */
static inline pthread_spinlock_t *shm_region_lock_of(pid_t owner)
{
    char want[32], line[512];
    snprintf(want, sizeof(want), "/dev/shm/%d:", (int)owner);
    FILE *f = fopen("/proc/self/maps", "r");
    unsigned long lo = 0;
    while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
        if (strstr(line, want) != NULL && sscanf(line, "%lx-", &lo) == 1) {
            break;
        }
        lo = 0;
    }
    if (f != NULL) {
        fclose(f);
    }
    return lo != 0 ? (pthread_spinlock_t *)(lo + SHM_REGION_LOCK_AT) : NULL;
}

/* The state letter of process pid ('R', 'S', 'T' when stopped, ...), or 0 when it is gone. */
static inline char proc_state_of(pid_t pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    size_t len = f != NULL ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
    if (f != NULL) {
        fclose(f);
    }
    buf[len] = '\0';
    const char *end = strrchr(buf, ')'); /* the name may hold spaces and parentheses */
    return end != NULL && end[1] == ' ' ? end[2] : 0;
}

/* The same lock, for a process that has not mapped owner's region (a test harness that
 * releases a lock a node took): mapped here from /dev/shm, never unmapped; NULL if none. */
static inline pthread_spinlock_t *shm_region_lock_map(pid_t owner)
{
    char want[32], path[300];
    int n = snprintf(want, sizeof(want), "%d:", (int)owner);
    DIR *d = opendir("/dev/shm");
    struct dirent *e;
    void *p = MAP_FAILED;
    while (d != NULL && p == MAP_FAILED && (e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, want, (size_t)n) != 0) {
            continue;
        }
        snprintf(path, sizeof(path), "/dev/shm/%s", e->d_name);
        int fd = open(path, O_RDWR);
        if (fd >= 0) {
            p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            close(fd);
        }
    }
    if (d != NULL) {
        closedir(d);
    }
    return p != MAP_FAILED ? (pthread_spinlock_t *)((char *)p + SHM_REGION_LOCK_AT) : NULL;
}

#endif
