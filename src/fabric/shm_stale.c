/* Stale shared-memory regions of libfabric's shm provider. shm names an endpoint's region
 * /dev/shm/PID:INDEX:... and removes it on a clean exit; a process that is killed leaves it
 * behind. When the PID comes round again, the new process's endpoint of the same index finds
 * the name taken and fi_enable() fails with EBUSY. Before its first shm endpoint, a process
 * removes the regions named with its own PID that are older than itself: they belonged to a
 * dead process that had this PID, never to a live one. A launcher that reaps a killed child
 * removes the child's at once (sdd_fabric_release_shm_of). An endpoint given up while a thread
 * is stuck in the provider cannot be closed, so its region goes by name (sdd_ep_abandon). */
#include <dirent.h>
#include <stdbool.h>
#include <sys/types.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <rdma/fi_cm.h>

#include "fabric/ep_internal.h"
#include "sddaq/log.h"

/* This process's start, in seconds since the epoch (0 if unknown). */
static time_t process_start(void)
{
    unsigned long long start_ticks = 0;
    char buf[1024];
    const char *fields = ep_proc_stat(0, buf, sizeof(buf));
    /* Field 22 is starttime; fields holds the third on. */
    if (fields == NULL || sscanf(fields,
                                 "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d "
                                 "%*d %*d %*d %*d %llu",
                                 &start_ticks) != 1) {
        return 0;
    }
    unsigned long long btime = 0;
    FILE *f = fopen("/proc/stat", "r");
    if (f == NULL) {
        return 0;
    }
    char line[256];
    while (fgets(line, sizeof(line), f) != NULL) {
        if (sscanf(line, "btime %llu", &btime) == 1) {
            break;
        }
    }
    fclose(f);
    long hz = sysconf(_SC_CLK_TCK);
    return btime != 0 && hz > 0 ? (time_t)(btime + start_ticks / (unsigned long long)hz) : 0;
}

/* Remove /dev/shm/PID:... regions created before the time `before`; returns how many. */
static int remove_regions_of(pid_t pid, struct timespec before, const char *why)
{
    DIR *d = opendir("/dev/shm");
    if (d == NULL) {
        return 0;
    }
    char prefix[32];
    int plen = snprintf(prefix, sizeof(prefix), "%d:", (int)pid);
    int removed = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, prefix, (size_t)plen) != 0) {
            continue;
        }
        char path[300];
        snprintf(path, sizeof(path), "/dev/shm/%s", e->d_name);
        struct stat st;
        bool older = stat(path, &st) == 0 &&
                     (st.st_mtim.tv_sec < before.tv_sec ||
                      (st.st_mtim.tv_sec == before.tv_sec && st.st_mtim.tv_nsec < before.tv_nsec));
        if (older && unlink(path) == 0) {
            SDD_INFO("fabric", "removed %s, left by %s", path, why);
            removed++;
        }
    }
    closedir(d);
    return removed;
}

void ep_shm_remove_stale(void)
{
    /* Once per process (a forked child is a new one); endpoints are opened from one thread at
     * a time. */
    static pid_t done_for;
    if (done_for == getpid()) {
        return;
    }
    done_for = getpid();
    /* Older than this process, by more than the clock's granularity: not ours. */
    time_t start = process_start();
    if (start != 0) {
        remove_regions_of(getpid(), (struct timespec){.tv_sec = start - 1},
                          "a killed process that had this pid");
    }
}

int sdd_fabric_release_shm_of(pid_t pid)
{
    if (pid <= 0) {
        return 0;
    }
    /* The child is reaped, so its pid could in principle be a new process's already (it takes
     * a wrap of pid_max): only regions made before now are the dead one's. The fine clock, as
     * tmpfs can give a file made within the current tick a time later than the coarse one. */
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    return remove_regions_of(pid, now, "a reaped process");
}

void ep_shm_note_region(sdd_ep *ep)
{
    /* shm's address is the region's name, with or without an "fi_shm://" in front. */
    char name[64] = {0};
    size_t len = sizeof(name) - 1;
    if (fi_getname(&ep->fid->fid, name, &len) != 0) {
        return;
    }
    const char *base = ep_shm_name_base(name);
    char path[sizeof(ep->shm_region)];
    struct stat st;
    int n = snprintf(path, sizeof(path), "/dev/shm/%s", base);
    if (n > 0 && (size_t)n < sizeof(path) && strchr(base, '/') == NULL && stat(path, &st) == 0) {
        memcpy(ep->shm_region, path, (size_t)n + 1);
    }
}

void sdd_ep_abandon(sdd_ep *ep)
{
    if (ep == NULL || ep->shm_region[0] == '\0') {
        return;
    }
    if (unlink(ep->shm_region) == 0) {
        SDD_INFO("fabric", "removed %s of an endpoint given up (it stays open)", ep->shm_region);
    }
    ep->shm_region[0] = '\0';
}
