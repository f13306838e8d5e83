/* shm (libfabric 1.17) keeps a spin lock inside each endpoint's shared region. A process
 * killed while it holds one used to leave every peer that then delivered to that region, or
 * progressed it, spinning inside libfabric for good (fabric.failure.shm-nocma hung so in 1 of
 * ~90 runs). Here the server takes the lock itself, deterministically, and is killed holding
 * it: its own region's lock (the client then sends to it), or the client's region's lock (the
 * client then polls its own endpoint). Either way the client must get its error within
 * bounded time, and the lock must have been released by sddaq's watch (shm_lock.c). An alarm
 * turns a hang into a failure. A lock held by a stopped process is not released, even when
 * another peer dies meanwhile: the stopped one comes back inside its critical section. But a
 * peer stopped holding a lock for SDDAQ_SHM_FENCE_MS (default 3 s, or less after
 * sdd_fabric_shm_fence_within) is killed (fenced), so that the client, spinning on that lock
 * meanwhile, goes on; a stopped peer that holds no lock is left alone; a stopped holder the
 * client no longer watches keeps its lock too. */
#include <pthread.h>
#include <stdint.h>
#include <sys/mman.h>

#include "fabric/ep_internal.h"
#include "fabtest.h"
#include "shm_region.h"

#define BIG        (4u << 20)
#define HANG_LIMIT 20 /* s: SIGALRM ends a client stuck in the provider */

static pid_t child_pid;
static bool lock_own_region; /* server: its own region's lock, else the client's */
static unsigned fence_within; /* client: sdd_fabric_shm_fence_within(this) first; 0: not */

/* Tell the client we are ready, wait for its answer (after which it stays out of the
 * provider: the client's region's lock must not hold up its own progress), take the chosen
 * lock and stop, to be killed holding it. */
static void server_greet(struct ft_side *s)
{
    sdd_err err;
    FT_POST(err, s, sdd_ep_post_recv(s->ep, s->buf + BIG, BIG, s->mr, NULL));
    FT_POST(err, s, sdd_ep_post_send(s->ep, s->peer, s->buf, 8, s->mr, NULL));
    struct sdd_cqe c = {0};
    if (err != SDD_OK || !ft_expect(s, SDD_CQE_SEND, &c, 10000) || c.status != SDD_OK ||
        !ft_expect(s, SDD_CQE_RECV, &c, 10000) || c.status != SDD_OK) {
        _exit(6);
    }
}

static void server_lock_and_stop(struct ft_side *s)
{
    server_greet(s);
    pthread_spinlock_t *lock = shm_region_lock_of(lock_own_region ? getpid() : getppid());
    if (lock == NULL) {
        _exit(7);
    }
    pthread_spin_lock(lock);
    raise(SIGSTOP);
    _exit(8); /* never: the client kills it */
}

/* Wait (up to 10 s) until the child is stopped: it holds the lock. */
static bool wait_stopped(pid_t pid)
{
    for (int i = 0; i < 2000; i++) {
        if (proc_state_of(pid) == 'T') {
            return true;
        }
        sdd_sleep_ns(5 * SDD_NS_PER_MS);
    }
    return false;
}

static bool kill_when_stopped(pid_t pid)
{
    bool stopped = wait_stopped(pid);
    kill(pid, SIGKILL);
    return stopped;
}

/* The server's "ready", then the answer it waits for before it takes the lock: posted, and
 * not waited for, since the next call into the provider could spin on that lock. */
static void client_greet(struct ft_side *s)
{
    alarm(HANG_LIMIT);
    sdd_err err;
    FT_POST(err, s, sdd_ep_post_recv(s->ep, s->buf + BIG, 64, s->mr, NULL));
    struct sdd_cqe c = {0};
    CHECK_REQUIRE(err == SDD_OK && ft_expect(s, SDD_CQE_RECV, &c, 10000) && c.status == SDD_OK);
    FT_POST(err, s, sdd_ep_post_send(s->ep, s->peer, s->buf, 8, s->mr, NULL));
    CHECK_REQUIRE(err == SDD_OK);
}

/* client_greet(), then wait until the server stopped (failing if it does not). */
static void client_greet_stopped(struct ft_side *s)
{
    client_greet(s);
    if (!wait_stopped(child_pid)) {
        kill(child_pid, SIGKILL);
        CHECK_REQUIRE(false);
    }
}

/* Send to the server until an error shows it down (up to 10 s); true when it did. Its own
 * region's lock held: a send to it takes that lock. The client's held: the client's own
 * progress takes it. */
static bool send_until_down(struct ft_side *s)
{
    struct sdd_cqe c = {0};
    uint64_t t0 = sdd_now_ns();
    sdd_err err = sdd_ep_post_send(s->ep, s->peer, s->buf, BIG, s->mr, NULL);
    bool down = err != SDD_OK && err != SDD_EAGAIN;
    while (!down && sdd_now_ns() - t0 < 10 * SDD_NS_PER_S) {
        down = ft_next(s, &c, 100) && c.status != SDD_OK;
    }
    return down;
}

/* Whether the watch released a lock since it had released `before` (waits up to 5 s). */
static bool released_since(uint64_t before)
{
    uint64_t t0 = sdd_now_ns();
    while (sdd_fabric_shm_locks_released() == before && sdd_now_ns() - t0 < 5 * SDD_NS_PER_S) {
        sdd_sleep_ns(10 * SDD_NS_PER_MS);
    }
    return sdd_fabric_shm_locks_released() > before;
}

static void client_after_kill(struct ft_side *s)
{
    client_greet(s);
    uint64_t before = sdd_fabric_shm_locks_released();
    CHECK_REQUIRE(kill_when_stopped(child_pid));
    uint64_t t0 = sdd_now_ns();
    CHECK(send_until_down(s)); /* spun for good before the watch */
    double took_ms = (double)(sdd_now_ns() - t0) / 1e6;
    CHECK(sdd_peer_status(s->peer) != SDD_OK);
    /* The error may come first (the peer's socket closed): the lock goes within a second. */
    CHECK(released_since(before));
    for (int i = 0; i < 100; i++) { /* progress goes on (under the alarm) */
        ft_pump(s);
    }
    alarm(0);
    printf("server killed holding %s region's lock: error after %.0f ms, locks released %llu\n",
           lock_own_region ? "its own" : "the client's", took_ms,
           (unsigned long long)(sdd_fabric_shm_locks_released() - before));
}

/* The server stops holding its own region's lock and stays alive; another watched process
 * dies. Nothing may be released while the holder is stopped; once it is killed, it is. */
static void client_stopped_holder(struct ft_side *s)
{
    client_greet_stopped(s);
    uint64_t before = sdd_fabric_shm_locks_released();
    pid_t other = fork();
    if (other == 0) {
        pause();
        _exit(0);
    }
    ep_shm_watch(other);
    kill(other, SIGKILL);
    waitpid(other, NULL, 0);
    sdd_sleep_ns(1200 *
                 SDD_NS_PER_MS); /* the watch looks on: the lock is held, its owner stopped */
    CHECK_EQ(sdd_fabric_shm_locks_released(), before);
    kill(child_pid, SIGKILL);
    uint64_t t0 = sdd_now_ns();
    CHECK(released_since(before));
    alarm(0);
    ep_shm_unwatch(other);
    printf("lock held by a stopped server: kept while it was stopped, released %.0f ms after "
           "its kill\n",
           (double)(sdd_now_ns() - t0) / 1e6);
}

/* The server stops holding the client's region's lock, and the client stops watching it once
 * its watch has seen the stop (as when a peer is given up, or closed while an endpoint is torn
 * down). The lock must stay held while the server is stopped: before session 34 the watch
 * released it after 500 ms, and the server came back inside its critical section. */
static void client_unwatched_holder(struct ft_side *s)
{
    client_greet_stopped(s);
    uint64_t before = sdd_fabric_shm_locks_released();
    sdd_sleep_ns(400 * SDD_NS_PER_MS); /* the watch looks for stopped peers every 250 ms */
    ep_shm_unwatch(child_pid);
    sdd_sleep_ns(1200 * SDD_NS_PER_MS); /* two verdicts: held, and a stopped process maps it */
    CHECK_EQ(sdd_fabric_shm_locks_released(), before);
    ep_shm_watch(child_pid); /* its death is then seen at once; the peer's close unwatches */
    kill(child_pid, SIGKILL);
    uint64_t t0 = sdd_now_ns();
    CHECK(released_since(before));
    alarm(0);
    printf("lock held by a stopped server no longer watched: kept while it was stopped, released "
           "%.0f ms after its kill\n",
           (double)(sdd_now_ns() - t0) / 1e6);
}

/* The server stopped holding a lock, and the client posts regardless, spinning inside the
 * provider: the client's watch must kill the server after the fence time, and release the
 * lock, so that the client gets its error. */
static void client_fenced_holder(struct ft_side *s)
{
    if (fence_within > 0) {
        sdd_fabric_shm_fence_within(fence_within);
    }
    client_greet_stopped(s);
    uint64_t released = sdd_fabric_shm_locks_released();
    uint64_t fenced = sdd_fabric_shm_peers_fenced();
    uint64_t t0 = sdd_now_ns();
    CHECK(send_until_down(s));
    double took_ms = (double)(sdd_now_ns() - t0) / 1e6;
    CHECK_EQ(sdd_fabric_shm_peers_fenced(), fenced + 1);
    CHECK(released_since(released));
    /* Not before the fence time: the stopped holder could have come back until then. */
    double fence_ms = fence_within > 0 ? fence_within : 3000.0;
    CHECK(took_ms >= fence_ms - 100.0);
    if (fence_within > 0) {
        CHECK(took_ms < 2900.0); /* the lowered fence time, not the default */
    }
    alarm(0);
    printf("server stopped holding %s region's lock, fence time %.0f ms: killed by the watch, "
           "error after %.0f ms\n",
           lock_own_region ? "its own" : "the client's", fence_ms, took_ms);
}

/* Greet, then stop holding nothing. */
static void server_stop(struct ft_side *s)
{
    server_greet(s);
    raise(SIGSTOP);
    _exit(8); /* never: the client kills it */
}

/* A stopped peer that holds no lock holds nobody up: past the fence time it is still there. */
static void client_stopped_idle(struct ft_side *s)
{
    client_greet_stopped(s);
    uint64_t fenced = sdd_fabric_shm_peers_fenced();
    for (int i = 0; i < 450; i++) { /* 4.5 s, its progress going on */
        ft_pump(s);
        sdd_sleep_ns(10 * SDD_NS_PER_MS);
    }
    CHECK_EQ(sdd_fabric_shm_peers_fenced(), fenced);
    CHECK(wait_stopped(child_pid));
    kill(child_pid, SIGKILL);
    alarm(0);
    printf("server stopped holding no lock: left alone for 4.5 s\n");
}

int main(void)
{
    char *argv[] = {"unit_shm_lock", "shm", NULL};
    ft_init(2, argv);
    lock_own_region = true;
    CHECK(ft_run_pair(2 * BIG, 0, server_lock_and_stop, client_after_kill, &child_pid) ==
          128 + SIGKILL);
    lock_own_region = false;
    CHECK(ft_run_pair(2 * BIG, 0, server_lock_and_stop, client_after_kill, &child_pid) ==
          128 + SIGKILL);
    lock_own_region = true;
    CHECK(ft_run_pair(2 * BIG, 0, server_lock_and_stop, client_stopped_holder, &child_pid) ==
          128 + SIGKILL);
    CHECK(ft_run_pair(2 * BIG, 0, server_lock_and_stop, client_fenced_holder, &child_pid) ==
          128 + SIGKILL);
    lock_own_region = false;
    CHECK(ft_run_pair(2 * BIG, 0, server_lock_and_stop, client_fenced_holder, &child_pid) ==
          128 + SIGKILL);
    CHECK(ft_run_pair(2 * BIG, 0, server_lock_and_stop, client_unwatched_holder, &child_pid) ==
          128 + SIGKILL);
    CHECK(ft_run_pair(2 * BIG, 0, server_stop, client_stopped_idle, &child_pid) == 128 + SIGKILL);
    /* Last: a lowered fence time stays lowered in this process. */
    fence_within = 300;
    CHECK(ft_run_pair(2 * BIG, 0, server_lock_and_stop, client_fenced_holder, &child_pid) ==
          128 + SIGKILL);
    return check_finish();
}
