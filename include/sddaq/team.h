/* A fork-join team: the calling thread and n - 1 helper threads run one function together and
 * the call returns when all of them are done. For splitting one unit of work whose latency
 * matters (a trigger's receive buffer) over several cores, not for running independent jobs.
 *
 * Helpers spin for a short while after each job (the next one usually follows within
 * microseconds while data flows), then sleep on a condition variable; a job wakes them, and so
 * does sdd_team_alert(), which a caller with serial work to do first uses to hide the wake-up
 * (tens of microseconds on a virtual machine) behind it. One thread at a time may call
 * sdd_team_run() and sdd_team_alert() on a team. */
#ifndef SDDAQ_TEAM_H
#define SDDAQ_TEAM_H

#include "sddaq/api.h"
#include "sddaq/err.h"

typedef struct sdd_team sdd_team;

/* The work of one member: who is 0 for the calling thread, 1 .. n - 1 for the helpers. */
typedef void (*sdd_team_fn)(void *arg, unsigned who);

/* Create a team of n members (1 .. 64): n - 1 helper threads are started. cpus, when not
 * NULL, holds n CPU numbers: helper i is pinned to cpus[i] (cpus[0] is the caller's, not
 * touched here); a negative entry leaves that helper unpinned.
 * Returns SDD_OK, SDD_EINVAL (n out of range, out NULL), SDD_ENOMEM, or the sdd_err of a
 * failed pthread_create. Not for the data path. */
SDD_API sdd_err sdd_team_create(unsigned n, const int *cpus, sdd_team **out);

/* Stop and join the helpers, free the team; NULL is a no-op. No job may be running. */
SDD_API void sdd_team_destroy(sdd_team *t);

/* Members in the team (the n given to create). */
SDD_API unsigned sdd_team_size(const sdd_team *t);

/* A job follows soon: sleeping helpers wake and spin (at most 1 ms) until it comes. Cheap
 * when they are awake already; never blocks on them. */
SDD_API void sdd_team_alert(sdd_team *t);

/* Run fn(arg, who) on every member at once, the caller as member 0; return when every member
 * has returned. Memory written by any member before it returned is visible to the caller
 * afterwards. Blocks; makes no allocation. */
SDD_API void sdd_team_run(sdd_team *t, sdd_team_fn fn, void *arg);

#endif
