/* shm (libfabric 1.17) keeps a spin lock inside each endpoint's shared region. A process
 * killed while it holds one used to leave every peer that then delivered to that region, or
 * progressed it, spinning inside libfabric for good (fabric.failure.shm-nocma hung so in 1 of
 * ~90 runs). Here the server takes the lock itself, deterministically, and is killed holding
 * it: its own region's lock (the client then sends to it), or the client's region's lock (the
 * client then polls its own endpoint). Either way the client must get its error within
 * bounded time, and the lock must have been released by sddaq's watch (shm_lock.c). An alarm
 * turns a hang into a failure. A lock held by a stopped process is not released, even when
 * another peer dies meanwhile: the stopped one comes back inside its critical section. */
#include <pthread.h>
#include <stdint.h>
#include <sys/mman.h>

#include "fabric/ep_internal.h"
#include "fabtest.h"

#define BIG        (4u << 20)
#define LOCK_AT    24 /* smr_region.lock in libfabric 1.17 */
#define HANG_LIMIT 20 /* s: SIGALRM ends a client stuck in the provider */

static pid_t child_pid;
static bool lock_own_region; /* server: its own region's lock, else the client's */

/* The lock of the first shm region this process maps that belongs to `owner`. */
static pthread_spinlock_t *region_lock_of(pid_t owner)
{
    char want[32], line[512];
    snprintf(want, sizeof(want), "/dev/shm/%d:", (int)owner);
    FILE *f = fopen("/proc/self/maps", "r");
    unsigned long lo = 0;
    while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
        if (strstr(line, want) != NULL && sscanf(line, "%lx-", &lo) == 1) {
            break;
        }
        lo = 0;
    }
    if (f != NULL) {
        fclose(f);
    }
    return lo != 0 ? (pthread_spinlock_t *)(lo + LOCK_AT) : NULL;
}

/* Tell the client we are ready, wait for its answer (after which it stays out of the
 * provider: the client's region's lock must not hold up its own progress), take the chosen
 * lock and stop, to be killed holding it. */
static void server_lock_and_stop(struct ft_side *s)
{
    sdd_err err;
    FT_POST(err, s, sdd_ep_post_recv(s->ep, s->buf + BIG, BIG, s->mr, NULL));
    FT_POST(err, s, sdd_ep_post_send(s->ep, s->peer, s->buf, 8, s->mr, NULL));
    struct sdd_cqe c = {0};
    if (err != SDD_OK || !ft_expect(s, SDD_CQE_SEND, &c, 10000) || c.status != SDD_OK ||
        !ft_expect(s, SDD_CQE_RECV, &c, 10000) || c.status != SDD_OK) {
        _exit(6);
    }
    pthread_spinlock_t *lock = region_lock_of(lock_own_region ? getpid() : getppid());
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
    char path[64], stat[256];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    for (int i = 0; i < 2000; i++) {
        FILE *f = fopen(path, "r");
        size_t n = f != NULL ? fread(stat, 1, sizeof(stat) - 1, f) : 0;
        if (f != NULL) {
            fclose(f);
        }
        stat[n] = '\0';
        const char *p = strrchr(stat, ')');
        if (p != NULL && p[1] == ' ' && p[2] == 'T') {
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

static void client_after_kill(struct ft_side *s)
{
    client_greet(s);
    uint64_t before = sdd_fabric_shm_locks_released();
    CHECK_REQUIRE(kill_when_stopped(child_pid));
    struct sdd_cqe c = {0};
    sdd_err err;
    uint64_t t0 = sdd_now_ns();
    /* Its own region's lock held: a send to it takes that lock. The client's held: the
     * client's own progress takes it. Either spun for good before. */
    err = sdd_ep_post_send(s->ep, s->peer, s->buf, BIG, s->mr, NULL);
    bool down = err != SDD_OK && err != SDD_EAGAIN;
    while (!down && sdd_now_ns() - t0 < 10 * SDD_NS_PER_S) {
        down = ft_next(s, &c, 100) && c.status != SDD_OK;
    }
    double took_ms = (double)(sdd_now_ns() - t0) / 1e6;
    CHECK(down);
    CHECK(sdd_peer_status(s->peer) != SDD_OK);
    /* The error may come first (the peer's socket closed): the lock goes within a second. */
    while (sdd_fabric_shm_locks_released() == before && sdd_now_ns() - t0 < 5 * SDD_NS_PER_S) {
        sdd_sleep_ns(10 * SDD_NS_PER_MS);
    }
    CHECK(sdd_fabric_shm_locks_released() > before);
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
    client_greet(s);
    if (!wait_stopped(child_pid)) {
        kill(child_pid, SIGKILL);
        CHECK_REQUIRE(false);
    }
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
    while (sdd_fabric_shm_locks_released() == before && sdd_now_ns() - t0 < 5 * SDD_NS_PER_S) {
        sdd_sleep_ns(10 * SDD_NS_PER_MS);
    }
    CHECK(sdd_fabric_shm_locks_released() > before);
    alarm(0);
    ep_shm_unwatch(other);
    printf("lock held by a stopped server: kept while it was stopped, released %.0f ms after "
           "its kill\n",
           (double)(sdd_now_ns() - t0) / 1e6);
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
    return check_finish();
}
