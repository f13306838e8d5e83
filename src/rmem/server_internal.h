/* The rmem server's state (internal), shared by the server's files: server.c (life cycle,
 * control messages, region changes) and server_loop.c (the progress thread). */
#ifndef SDDAQ_RMEM_SERVER_INTERNAL_H
#define SDDAQ_RMEM_SERVER_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "rmem/ctl.h"
#include "rmem/shmem.h"
#include "sddaq/rmem.h"

struct srv_client {
    sdd_peer *peer;
    uint32_t gen_acked; /* newest region generation this client switched to */
    bool told;          /* a region change was sent to it */
};

struct sdd_rmem_server {
    struct sdd_rmem_opts opts;
    sdd_ep *ep;
    sdd_listener *listener;
    struct rm_ctl ctl;

    /* The endpoint belongs to whoever holds lock: the progress thread between its polls, a
     * user call (resize, stats) otherwise. */
    pthread_mutex_t lock;
    pthread_t thread;
    bool thread_started;
    atomic_bool stop;
    atomic_int waiters; /* user calls waiting for lock: the thread yields to them */
    /* Stats as of the last round, readable while the thread is stuck inside the provider. */
    pthread_mutex_t stats_lock;
    struct sdd_rmem_server_stats stats_pub;
    _Atomic uint64_t round_since_ns; /* start of the round in progress, 0 between rounds */
    int wake_fd; /* eventfd: a user call wants the lock, or close wants the thread gone */

    uint8_t *region;
    size_t len;
    bool owned;        /* region was allocated by the server: it is shm.addr */
    struct rm_shm shm; /* the server's own region, mappable by same-host clients */
    sdd_mr *mr;
    uint32_t gen;

    struct srv_client *clients;
    size_t nclients, cap;
    struct sdd_rmem_server_stats stats;
};

/* Poll the endpoint once, accept a waiting client (if check_listener), handle what came: the number
 * of events handled (0 = idle), or a fatal error. Caller holds lock. */
int srv_progress_once(sdd_rmem_server *srv, bool check_listener);

/* The progress thread (server_loop.c). srv_lock() tells a spinning thread to step aside. */
sdd_err srv_start_thread(sdd_rmem_server *srv);
bool srv_stop_thread(sdd_rmem_server *srv); /* false: the thread is stuck and abandoned */
sdd_err srv_lock(sdd_rmem_server *srv);     /* SDD_ETIMEDOUT after opts.timeout_ms */
void srv_unlock(sdd_rmem_server *srv);
/* Copy stats to stats_pub; caller holds lock. */
void srv_publish_stats(sdd_rmem_server *srv);

#endif
