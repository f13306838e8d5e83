/* A region left in /dev/shm by a killed process that had this PID is removed before the first
 * shm endpoint opens (else libfabric's shm fails with EBUSY when the index matches); one
 * created after this process started is left alone. Skips (77) without the shm provider. */
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "sddaq/fabric.h"

static int make_file(const char *path, time_t age_s)
{
    int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0600);
    if (fd < 0) {
        return -1;
    }
    close(fd);
    struct timeval now;
    gettimeofday(&now, NULL);
    struct timeval tv[2] = {{.tv_sec = now.tv_sec - age_s}, {.tv_sec = now.tv_sec - age_s}};
    return utimes(path, tv);
}

int main(void)
{
    char stale[64], fresh[64];
    snprintf(stale, sizeof(stale), "/dev/shm/%d:0:0", (int)getpid());
    snprintf(fresh, sizeof(fresh), "/dev/shm/%d:977:0", (int)getpid());
    if (access("/dev/shm", W_OK) != 0) {
        return check_skip("no writable /dev/shm");
    }
    sleep(2); /* so "created after this process started" is beyond the 1 s granularity */
    CHECK_REQUIRE(make_file(stale, 3600) == 0);
    CHECK_REQUIRE(make_file(fresh, 0) == 0);
    struct sdd_ep_opts o;
    sdd_ep_opts_default(&o);
    o.provider = "shm";
    sdd_ep *ep = NULL;
    sdd_err err = sdd_ep_open(&o, &ep);
    if (err == SDD_ENOPROV) {
        unlink(stale);
        unlink(fresh);
        return check_skip("shm provider not available");
    }
    CHECK_OK(err); /* with the stale 0 region in place this used to be EBUSY */
    /* Gone, or replaced by this process's own endpoint region of that name: not an hour old. */
    struct stat st;
    CHECK(stat(stale, &st) != 0 || st.st_mtime > time(NULL) - 60);
    CHECK(access(fresh, F_OK) == 0);
    sdd_ep_close(ep);
    unlink(fresh);
    return check_finish();
}
