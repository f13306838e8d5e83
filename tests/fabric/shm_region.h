/* The spin lock inside an shm region (libfabric 1.17: smr_region.lock at offset 24), for tests
 * that make a process hold one, as libfabric does while it progresses or delivers, and then
 * stop or die: what sddaq's shm lock watch (src/fabric/shm_lock.c) must handle. */
#ifndef SDDAQ_TEST_SHM_REGION_H
#define SDDAQ_TEST_SHM_REGION_H

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>

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

#endif
