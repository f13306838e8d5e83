/* Children that launchers fork (evb nodes, perf servers, mesh nodes) die with their launcher:
 * a launcher stopped by a timeout or a signal would otherwise leave them running, and over shm
 * a node waiting on a dead peer spins at full speed until someone finds and kills it. */
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "cli.h"

void cli_child_dies_with(pid_t launcher)
{
    (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != launcher) {
        _exit(1); /* the launcher died before the request was in place */
    }
}
