/* A region left in /dev/shm by a killed process that had this PID is removed before the first
 * shm endpoint opens (else libfabric's shm fails with EBUSY when the index matches); one
 * created after this process started is left alone. A killed child's regions are removed by
 * sdd_fabric_release_shm_of() after the reap. An endpoint given up (sdd_ep_abandon) loses its
 * region's name at once, and a second open shm endpoint keeps its own.
 * Skips (77) without the shm provider. */
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "sddaq/fabric.h"
#include "shm_regions.h"

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

/* A child opens a shm endpoint and is killed; its regions stay until the parent releases them. */
static void killed_child_released(void)
{
    int ready[2];
    CHECK_REQUIRE(pipe(ready) == 0);
    pid_t pid = fork();
    CHECK_REQUIRE(pid >= 0);
    if (pid == 0) {
        struct sdd_ep_opts o;
        sdd_ep_opts_default(&o);
        o.provider = "shm";
        sdd_ep *ep = NULL;
        char ok = sdd_ep_open(&o, &ep) == SDD_OK;
        if (write(ready[1], &ok, 1) != 1) {
            _exit(1);
        }
        pause(); /* until killed, the endpoint open */
        _exit(0);
    }
    close(ready[1]);
    char ok = 0;
    CHECK_REQUIRE(read(ready[0], &ok, 1) == 1 && ok == 1);
    close(ready[0]);
    kill(pid, SIGKILL);
    CHECK_REQUIRE(waitpid(pid, NULL, 0) == pid);
    int left = shm_regions_of(pid);
    CHECK(left >= 1); /* what a killed shm user leaves behind */
    CHECK(sdd_fabric_release_shm_of(pid) == left);
    CHECK(shm_regions_of(pid) == 0);
}

/* Given up endpoints stay open: reachable from here, so the leak checker sees them in use. */
static sdd_ep *given_up;

static void abandoned_endpoint_leaves_no_region(void)
{
    struct sdd_ep_opts o;
    sdd_ep_opts_default(&o);
    o.provider = "shm";
    sdd_ep *kept = NULL;
    CHECK_REQUIRE(sdd_ep_open(&o, &given_up) == SDD_OK);
    int one = shm_regions_of(getpid());
    CHECK(one >= 1);
    CHECK_REQUIRE(sdd_ep_open(&o, &kept) == SDD_OK);
    int two = shm_regions_of(getpid());
    CHECK(two > one);
    sdd_ep_abandon(given_up);
    CHECK(shm_regions_of(getpid()) == two - one); /* its own gone, the other endpoint's kept */
    sdd_ep_abandon(given_up);                     /* again: nothing more goes */
    CHECK(shm_regions_of(getpid()) == two - one);
    sdd_ep_close(kept);
    CHECK(shm_regions_of(getpid()) == 0); /* what a process that exits now leaves behind */
    sdd_ep_abandon(NULL);
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
    killed_child_released();
    abandoned_endpoint_leaves_no_region();
    return check_finish();
}
