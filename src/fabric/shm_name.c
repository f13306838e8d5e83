/* What the shm helpers (shm_lock.c, shm_stale.c) read of names and processes: the region name
 * inside a shm address, the PID that leads it, and a process's /proc stat record. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fabric/ep_internal.h"

const char *ep_shm_name_base(const char *name)
{
    const char *p = strstr(name, "://");
    return p != NULL ? p + 3 : name;
}

pid_t ep_shm_name_owner(const char *name)
{
    const char *p = ep_shm_name_base(name);
    char *end;
    long pid = strtol(p, &end, 10);
    return end != p && *end == ':' && pid > 0 ? (pid_t)pid : 0;
}

pid_t ep_shm_name_pid(const void *addr, size_t len)
{
    char name[64];
    len = len < sizeof(name) - 1 ? len : sizeof(name) - 1;
    memcpy(name, addr, len);
    name[len] = '\0';
    return ep_shm_name_owner(name);
}

const char *ep_proc_stat(pid_t pid, char *buf, size_t size)
{
    char path[40];
    if (pid == 0) {
        snprintf(path, sizeof(path), "/proc/self/stat");
    } else {
        snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    }
    FILE *f = size >= 2 ? fopen(path, "r") : NULL;
    if (f == NULL) {
        return NULL;
    }
    size_t n = fread(buf, 1, size - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* The command name may hold anything, spaces and ')' included: the last ')' ends it. */
    const char *p = strrchr(buf, ')');
    return p != NULL && p[1] == ' ' ? p + 2 : NULL;
}
