/* Counting libfabric shm regions (/dev/shm/PID:...) in tests that check none is left behind. */
#ifndef SDDAQ_TEST_SHM_REGIONS_H
#define SDDAQ_TEST_SHM_REGIONS_H

#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>

/* Regions in /dev/shm named for pid. */
static inline int shm_regions_of(pid_t pid)
{
    char prefix[32];
    int plen = snprintf(prefix, sizeof(prefix), "%d:", (int)pid);
    int n = 0;
    DIR *d = opendir("/dev/shm");
    struct dirent *e;
    while (d != NULL && (e = readdir(d)) != NULL) {
        n += strncmp(e->d_name, prefix, (size_t)plen) == 0;
    }
    if (d != NULL) {
        closedir(d);
    }
    return n;
}

#endif
