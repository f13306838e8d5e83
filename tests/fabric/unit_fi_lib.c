/* libfabric is loaded on first use (src/fabric/fi_lib.c): a process that has not opened an
 * endpoint has not mapped it (nor the PSM libraries whose constructor sleeps 100 ms); loading
 * it leaves the program's signal handlers as they were (that constructor installs its own for
 * SIGINT and the crash signals); a library that cannot be loaded makes sdd_ep_open fail cleanly
 * with SDD_ENOPROV. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "sddaq/fabric.h"

static bool mapped(const char *lib)
{
    FILE *f = fopen("/proc/self/maps", "r");
    if (f == NULL) {
        return false;
    }
    char line[512];
    bool found = false;
    while (!found && fgets(line, sizeof(line), f) != NULL) {
        found = strstr(line, lib) != NULL;
    }
    fclose(f);
    return found;
}

static sdd_err open_tcp(void)
{
    struct sdd_ep_opts o;
    sdd_ep_opts_default(&o);
    o.provider = "tcp";
    sdd_ep *ep = NULL;
    sdd_err err = sdd_ep_open(&o, &ep);
    CHECK(err != SDD_OK || ep != NULL);
    sdd_ep_close(ep);
    return err;
}

static void on_int(int sig)
{
    (void)sig;
}

/* In a child, so that the parent can still try a library that is not there. */
static int load_keeps_handlers(void)
{
    struct sigaction sa = {.sa_handler = on_int}, segv;
    CHECK_REQUIRE(sigaction(SIGINT, &sa, NULL) == 0);
    CHECK_REQUIRE(sigaction(SIGSEGV, NULL, &segv) == 0); /* default, or a sanitizer's */
    cpu_set_t cpus, cpus_after; /* that constructor pins the thread while it calibrates */
    CHECK_REQUIRE(sched_getaffinity(0, sizeof(cpus), &cpus) == 0);
    sdd_err err = open_tcp();
    if (err == SDD_ENOPROV) {
        return 77;
    }
    CHECK_EQ(err, SDD_OK);
    CHECK(mapped("libfabric"));
    struct sigaction now;
    CHECK_REQUIRE(sigaction(SIGINT, NULL, &now) == 0);
    CHECK(now.sa_handler == on_int);
    CHECK_REQUIRE(sigaction(SIGSEGV, NULL, &now) == 0);
    CHECK(now.sa_handler == segv.sa_handler);
    CHECK_REQUIRE(sched_getaffinity(0, sizeof(cpus_after), &cpus_after) == 0);
    CHECK(CPU_EQUAL(&cpus, &cpus_after));
    return check_finish();
}

int main(void)
{
    CHECK(!mapped("libfabric"));
    CHECK(!mapped("libpsm"));
    pid_t child = fork();
    CHECK_REQUIRE(child >= 0);
    if (child == 0) {
        _exit(load_keeps_handlers());
    }
    int status = 0;
    CHECK_REQUIRE(waitpid(child, &status, 0) == child);
    CHECK(WIFEXITED(status) && (WEXITSTATUS(status) == 0 || WEXITSTATUS(status) == 77));
    /* Each attempt to load fails the same way and never half-binds the library. */
    CHECK_REQUIRE(setenv("SDDAQ_LIBFABRIC", "/nonexistent/libfabric.so.1", 1) == 0);
    CHECK_EQ(open_tcp(), SDD_ENOPROV);
    CHECK_EQ(open_tcp(), SDD_ENOPROV);
    CHECK(!mapped("libfabric"));
    return check_finish();
}
