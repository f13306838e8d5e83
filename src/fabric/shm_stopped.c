/* Whether a stopped process maps an shm region, looked up in /proc. The shm lock watch
 * (shm_lock.c) must never release the lock of a region whose holder is only stopped: it comes
 * back inside its critical section, and the region's queues are then corrupt. Its own table of
 * watched peers is not enough: a peer given up, or closed while this process tears its
 * endpoint down, leaves the table while it may still hold the lock (evb.failover saw a lock so
 * released, and a control message lost, in 1 run of 41 in session 34). Asked only when a lock
 * has been held past the watch's verdict time, so the scan of /proc costs nothing in a run. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fabric/ep_internal.h"

/* Whether /proc/PID/maps shows /dev/shm/<region>; true when it cannot be read (another
 * user's process, say): a stopped process that may hold the lock is left alone. */
static bool maps_region(pid_t pid, const char *region)
{
    char path[40], line[512], want[128];
    snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
    int n = snprintf(want, sizeof(want), " /dev/shm/%s", region);
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        return true;
    }
    bool found = false;
    while (!found && fgets(line, sizeof(line), f) != NULL) {
        const char *p = strstr(line, want);
        found = p != NULL && (p[n] == '\n' || p[n] == ' ' || p[n] == '\0');
    }
    fclose(f);
    return found;
}

bool ep_shm_stopped_mapper(const char *region)
{
    DIR *d = opendir("/proc");
    if (d == NULL) {
        return true; /* cannot tell: keep the lock */
    }
    bool stopped = false;
    struct dirent *e;
    while (!stopped && (e = readdir(d)) != NULL) {
        char *end;
        long pid = strtol(e->d_name, &end, 10);
        if (*end != '\0' || pid <= 0) {
            continue;
        }
        char buf[512];
        const char *fields = ep_proc_stat((pid_t)pid, buf, sizeof(buf));
        bool st = fields != NULL && (fields[0] == 'T' || fields[0] == 't');
        stopped = st && maps_region((pid_t)pid, region);
    }
    closedir(d);
    return stopped;
}
