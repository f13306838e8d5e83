/* The rmem server's progress loop: it spins while clients are active (software providers serve
 * RMA reads only while the target polls) and sleeps on the endpoint's fd, or with a growing
 * pause where the provider has none, once they go quiet. It gives the endpoint up between
 * polls, and steps aside at once when a user call (resize, stats) wants it. */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#include "rmem/server_internal.h"
#include "sddaq/clock.h"
#include "sddaq/log.h"

#define LISTENER_EVERY 64                   /* polls between looks at the listener while busy */
#define BACKOFF_MIN_NS (10 * SDD_NS_PER_US) /* first pause when the provider has no wait fd */
#define BACKOFF_MAX_NS SDD_NS_PER_MS

sdd_err srv_lock(sdd_rmem_server *srv)
{
    atomic_fetch_add_explicit(&srv->waiters, 1, memory_order_relaxed);
    uint64_t one = 1;
    if (srv->thread_started && write(srv->wake_fd, &one, sizeof(one)) < 0) {
        (void)0; /* a full counter still wakes the thread */
    }
    /* Bounded: a thread stuck inside the provider must not hang the caller too. */
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    uint64_t ns = (uint64_t)until.tv_nsec + (uint64_t)srv->opts.timeout_ms * SDD_NS_PER_MS;
    until.tv_sec += (time_t)(ns / SDD_NS_PER_S);
    until.tv_nsec = (long)(ns % SDD_NS_PER_S);
    int rc = pthread_mutex_timedlock(&srv->lock, &until);
    atomic_fetch_sub_explicit(&srv->waiters, 1, memory_order_relaxed);
    if (rc != 0) {
        SDD_ERROR("rmem", "the server's progress thread has not let go of the endpoint for %u ms",
                  srv->opts.timeout_ms);
        return SDD_ETIMEDOUT;
    }
    return SDD_OK;
}

void srv_publish_stats(sdd_rmem_server *srv)
{
    pthread_mutex_lock(&srv->stats_lock);
    srv->stats_pub = srv->stats;
    pthread_mutex_unlock(&srv->stats_lock);
}

void srv_unlock(sdd_rmem_server *srv)
{
    pthread_mutex_unlock(&srv->lock);
}

/* Sleep until the endpoint, the listener or a user call needs us, or a pause passes. */
static void sleep_idle(sdd_rmem_server *srv, uint64_t deadline, uint64_t *backoff)
{
    bool has_fd = sdd_ep_info(srv->ep)->wait_fd;
    pthread_mutex_lock(&srv->lock);
    bool armed = sdd_ep_trywait(srv->ep) == SDD_OK;
    pthread_mutex_unlock(&srv->lock);
    if (!armed) {
        return; /* completions are waiting */
    }
    uint64_t pause = has_fd ? (uint64_t)sdd_ep_tick_ms(srv->ep) * SDD_NS_PER_MS : *backoff;
    uint64_t now = sdd_now_ns();
    if (deadline != 0 && deadline - now < pause) {
        pause = deadline > now ? deadline - now : 0;
    }
    struct pollfd fds[3] = {
        {.fd = sdd_ep_fd(srv->ep), .events = POLLIN},
        {.fd = sdd_listener_fd(srv->listener), .events = POLLIN},
        {.fd = srv->wake_fd, .events = POLLIN},
    };
    struct timespec ts = {.tv_sec = (time_t)(pause / SDD_NS_PER_S),
                          .tv_nsec = (long)(pause % SDD_NS_PER_S)};
    int n = ppoll(fds, 3, &ts, NULL);
    if (n > 0 && (fds[2].revents & POLLIN)) {
        uint64_t v;
        ssize_t r = read(srv->wake_fd, &v, sizeof(v));
        (void)r;
    }
    if (n == 0 && !has_fd) {
        *backoff = *backoff * 2 < BACKOFF_MAX_NS ? *backoff * 2 : BACKOFF_MAX_NS;
    }
}

/* Drive the server until deadline (0 = until stopped). */
static sdd_err run_loop(sdd_rmem_server *srv, uint64_t deadline)
{
    uint64_t idle_since = sdd_now_ns();
    uint64_t spin_ns = (uint64_t)srv->opts.spin_us * SDD_NS_PER_US;
    uint64_t backoff = BACKOFF_MIN_NS;
    uint32_t iter = 0;
    while (!atomic_load_explicit(&srv->stop, memory_order_relaxed)) {
        if (atomic_load_explicit(&srv->waiters, memory_order_relaxed) > 0) {
            sched_yield();
            continue;
        }
        atomic_store_explicit(&srv->round_since_ns, sdd_now_ns(), memory_order_relaxed);
        pthread_mutex_lock(&srv->lock);
        int n = srv_progress_once(srv, iter++ % LISTENER_EVERY == 0);
        if (n > 0) {
            srv_publish_stats(srv);
        }
        pthread_mutex_unlock(&srv->lock);
        atomic_store_explicit(&srv->round_since_ns, 0, memory_order_relaxed);
        if (n < 0) {
            SDD_ERROR("rmem", "server endpoint failed: %s", sdd_strerror(n));
            return n;
        }
        uint64_t now = sdd_now_ns();
        if (deadline != 0 && now >= deadline) {
            break;
        }
        if (n > 0) {
            idle_since = now;
            backoff = BACKOFF_MIN_NS;
            continue;
        }
        if (srv->opts.wait_mode == SDD_WAIT_SPIN ||
            (srv->opts.wait_mode == SDD_WAIT_ADAPTIVE && now - idle_since < spin_ns)) {
            continue;
        }
        sleep_idle(srv, deadline, &backoff);
        iter = 0; /* look at the listener first after a sleep */
    }
    return SDD_OK;
}

static void *thread_main(void *arg)
{
    run_loop(arg, 0);
    return NULL;
}

sdd_err srv_start_thread(sdd_rmem_server *srv)
{
    int rc = pthread_create(&srv->thread, NULL, thread_main, srv);
    if (rc != 0) {
        return sdd_err_from_errno(rc);
    }
    srv->thread_started = true;
    return SDD_OK;
}

bool srv_stop_thread(sdd_rmem_server *srv)
{
    if (!srv->thread_started) {
        return true;
    }
    atomic_store(&srv->stop, true);
    uint64_t one = 1;
    ssize_t r = write(srv->wake_fd, &one, sizeof(one));
    (void)r;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += (time_t)(srv->opts.timeout_ms / 1000 + 1);
    if (pthread_timedjoin_np(srv->thread, NULL, &until) != 0) {
        SDD_ERROR("rmem", "the server's progress thread is stuck inside the provider; "
                          "abandoning it (its memory stays allocated)");
        pthread_detach(srv->thread);
        return false;
    }
    srv->thread_started = false;
    return true;
}

sdd_err sdd_rmem_server_progress(sdd_rmem_server *srv, int timeout_ms)
{
    if (srv == NULL || srv->thread_started) {
        return SDD_EINVAL; /* the thread drives it */
    }
    if (timeout_ms == 0) {
        int n = srv_progress_once(srv, true);
        return n < 0 ? n : SDD_OK;
    }
    uint64_t deadline = timeout_ms < 0 ? 0 : sdd_now_ns() + (uint64_t)timeout_ms * SDD_NS_PER_MS;
    return run_loop(srv, deadline);
}
