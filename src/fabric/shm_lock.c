/* Spin locks that a dead process left held in libfabric's shm regions. shm (libfabric 1.17)
 * guards each endpoint's shared region with a spin lock inside the region: the owner holds it
 * while it progresses, a peer while it delivers to it. A process killed (SIGKILL) while it
 * holds one leaves it held, and every thread that then delivers to that region, or progresses
 * it, spins inside libfabric for good: fabric.failure.shm-nocma hung so in 1 of ~90 runs (a
 * server killed in a stream of writes), and an rmem server's progress thread (docs/rmem.md).
 *
 * One watch thread per process waits on a pidfd per shm peer, at no cost while they live.
 * After a death it samples the lock of every shm region this process maps (its peers' and its
 * own endpoints') through a mapping of its own, which libfabric cannot take away meanwhile. A
 * lock held in every sample for STUCK_MS has no live holder (shm's critical sections last
 * microseconds) and is released (after a second look, CONFIRM_MS later), unless the owner, a
 * peer or any process that maps the region is stopped (SIGSTOP, a debugger): such a holder
 * comes back. Only regions whose header matches the layout this was read from (libfabric
 * 1.17: version 4, then the owner's PID, the lock at offset 24) are touched.
 *
 * Fencing: a peer stopped for good (SIGSTOP) while it holds a lock wedges every process that
 * posts to that region, or progresses it, and none of them can run the heartbeats that would
 * give it up. So the watch also looks for a stopped peer (every STOP_CHECK_MS, or half the
 * fence time if shorter), samples the locks while one is, and when a lock stays held for the
 * fence time (SDDAQ_SHM_FENCE_MS, default 3 s, 0: never; a layer above may lower it with
 * sdd_fabric_shm_fence_within) with a peer stopped for half of it at least, kills the
 * stopped peers (through their pidfds: no PID reuse) and releases the lock once it stays held
 * CONFIRM_MS after that with nobody stopped. A process under a debugger (ptrace stop) is never
 * killed. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "fabric/ep_internal.h"
#include "sddaq/clock.h"
#include "sddaq/log.h"

#define REGION_VERSION 4  /* smr_region.version of libfabric 1.17 */
#define REGION_PID_AT  4  /* int pid: the owner */
#define REGION_LOCK_AT 24 /* pthread_spinlock_t lock */
#define MAX_WATCHED    1024
#define MAX_REGIONS    256
#define SAMPLE_MS      5
#define STUCK_MS       500  /* held in every sample this long: nobody alive holds it */
#define CONFIRM_MS     100  /* and this long again, nobody stopped at either end */
#define WATCH_MS       3000 /* after the latest death, or while a peer is stopped */
#define STOP_CHECK_MS  250  /* while peers are watched: is one of them stopped? */
#define FENCE_MS       3000 /* default SDDAQ_SHM_FENCE_MS */
#define FENCE_MIN_MS   100  /* 20 samples: a lock seen held throughout is not just busy */

struct watched {
    pid_t pid;
    int fd; /* pidfd; -1 once the process ended */
    unsigned refs;
    uint64_t stopped_since; /* the first of the looks in a row that found it stopped; 0: none */
};

static struct {
    pthread_mutex_t mu;
    pid_t owner; /* the process whose thread runs; 0: none (a fork's child starts its own) */
    int wake;    /* eventfd: the table changed */
    unsigned n;
    struct watched w[MAX_WATCHED];
} g = {.mu = PTHREAD_MUTEX_INITIALIZER, .wake = -1};

static _Atomic uint64_t locks_released;
static _Atomic uint64_t peers_fenced;
static unsigned fence_env_ms;                    /* SDDAQ_SHM_FENCE_MS, read at watch start */
static _Atomic unsigned fence_cap_ms = UINT_MAX; /* sdd_fabric_shm_fence_within */

/* The fence time in milliseconds; 0: never kill. */
static unsigned fence_ms(void)
{
    unsigned cap = atomic_load(&fence_cap_ms);
    return fence_env_ms < cap ? fence_env_ms : cap;
}

/* The value glibc gives a free spin lock (1 on x86-64, where holders count it down). */
static int free_lock_value(void)
{
    pthread_spinlock_t l; /* glibc: a volatile int */
    pthread_spin_init(&l, PTHREAD_PROCESS_SHARED);
    int v = l;
    pthread_spin_destroy(&l);
    return v;
}

/* One region mapped here, looked at through a page of our own. */
struct region {
    char name[96];
    pid_t owner;
    uint8_t *page;
    unsigned held;       /* consecutive samples found held */
    uint64_t held_since; /* the first of them */
    uint64_t look_ns;    /* the next verdict while it stays held */
    bool cleared;        /* a verdict found nobody stopped: the next one releases */
    bool fenced;         /* a verdict killed the stopped peers: the next one releases */
};

/* Map the first page of an shm region that /proc/self/maps shows at [lo, hi) under `path`:
 * by name while it has one, else through map_files (a reaped peer's name is gone). */
static uint8_t *map_region(const char *path, unsigned long lo, unsigned long hi)
{
    char alt[64];
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        snprintf(alt, sizeof(alt), "/proc/self/map_files/%lx-%lx", lo, hi);
        fd = open(alt, O_RDWR | O_CLOEXEC);
    }
    if (fd < 0) {
        return NULL;
    }
    void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    return p == MAP_FAILED ? NULL : p;
}

/* The shm regions this process maps, each with a page of our own: how many. */
static unsigned find_regions(struct region *r, unsigned max)
{
    FILE *f = fopen("/proc/self/maps", "r");
    if (f == NULL) {
        return 0;
    }
    unsigned n = 0;
    char line[512];
    while (n < max && fgets(line, sizeof(line), f) != NULL) {
        unsigned long lo, hi;
        char *path = strstr(line, " /dev/shm/");
        if (path == NULL || sscanf(line, "%lx-%lx", &lo, &hi) != 2 || hi - lo < 4096) {
            continue;
        }
        path++;
        path[strcspn(path, " \n")] = '\0'; /* drops " (deleted)" */
        const char *base = path + strlen("/dev/shm/");
        pid_t owner = ep_shm_name_owner(base);
        bool seen = false;
        for (unsigned i = 0; i < n && !seen; i++) {
            seen = strcmp(r[i].name, base) == 0;
        }
        if (owner == 0 || seen || strlen(base) >= sizeof(r[n].name)) {
            continue;
        }
        uint8_t *page = map_region(path, lo, hi);
        int pid_field;
        if (page != NULL) {
            memcpy(&pid_field, page + REGION_PID_AT, sizeof(pid_field));
        }
        if (page == NULL || page[0] != REGION_VERSION || pid_field != owner) {
            if (page != NULL) {
                munmap(page, 4096); /* not a layout this knows */
            }
            continue;
        }
        snprintf(r[n].name, sizeof(r[n].name), "%s", base);
        r[n].owner = owner;
        r[n].page = page;
        r[n].held = 0;
        n++;
    }
    fclose(f);
    return n;
}

/* A process's state letter from /proc (R, S, T, Z, ...), or 0 when it is gone. */
static char proc_state(pid_t pid)
{
    char buf[512];
    const char *fields = ep_proc_stat(pid, buf, sizeof(buf));
    return fields != NULL ? fields[0] : 0;
}

/* Kill watched peer w, stopped by a signal while the lock of region `name` held up its posters
 * for the fence time. The pidfd names the very process watched, never a reused PID. */
static bool kill_stopped_peer(const struct watched *w, const char *name, unsigned fence)
{
    if (syscall(SYS_pidfd_send_signal, w->fd, SIGKILL, NULL, 0) != 0) {
        SDD_WARN("fabric", "shm region %s: cannot kill stopped peer %d: %s", name, (int)w->pid,
                 strerror(errno));
        return false;
    }
    atomic_fetch_add(&peers_fenced, 1);
    SDD_WARN("fabric",
             "shm region %s: its lock was held for %u ms while peer process %d was stopped "
             "(SIGSTOP); killed it, so that the others can go on (SDDAQ_SHM_FENCE_MS=0: never)",
             name, fence, (int)w->pid);
    return true;
}

/* Watched peer w's state now ('T': stopped by a signal, 't': by a debugger; 0: gone), noting
 * since when it has been found stopped by a signal. Called with g.mu held. */
static char look_at_peer(struct watched *w, uint64_t now)
{
    char st = w->fd >= 0 ? proc_state(w->pid) : 0;
    if (st != 'T') {
        w->stopped_since = 0;
    } else if (w->stopped_since == 0) {
        w->stopped_since = now;
    }
    return st;
}

/* Whether a watched peer is stopped now: by a signal ('T'), and with `traced` also by a
 * debugger ('t', a ptrace stop). *since (if not NULL) receives the latest time one stopped by
 * a signal was first found so. */
static bool stopped_peers(bool traced, uint64_t *since)
{
    bool any = false;
    uint64_t now = sdd_now_ns();
    pthread_mutex_lock(&g.mu);
    for (unsigned i = 0; i < g.n; i++) {
        char st = look_at_peer(&g.w[i], now);
        any = any || st == 'T' || (traced && st == 't');
        if (since != NULL && st == 'T' && g.w[i].stopped_since > *since) {
            *since = g.w[i].stopped_since;
        }
    }
    pthread_mutex_unlock(&g.mu);
    return any;
}

/* The lock of region `name` has been held for the fence time: kill every watched peer that
 * is stopped by a signal and was already found so half a fence time ago (one of them holds
 * it; one stopped only just now is not what held the lock all along). A debugger's is left
 * alone. Returns how many were killed. */
static unsigned kill_stopped_peers(const char *name, unsigned fence)
{
    unsigned killed = 0;
    uint64_t now = sdd_now_ns();
    pthread_mutex_lock(&g.mu);
    for (unsigned i = 0; i < g.n; i++) {
        if (look_at_peer(&g.w[i], now) == 'T' &&
            now - g.w[i].stopped_since >= (uint64_t)fence / 2 * SDD_NS_PER_MS) {
            killed += kill_stopped_peer(&g.w[i], name, fence);
        }
    }
    pthread_mutex_unlock(&g.mu);
    return killed;
}

/* Whether a stopped (SIGSTOP, a debugger) live process could be what holds the lock of region
 * r: the owner, a watched peer, or any other process that maps the region (a peer this one no
 * longer watches: given up, or closed while the endpoint is torn down). Such a holder comes
 * back; its lock is not released. A dead owner's region: nothing reads it any more. */
static bool holder_may_be_stopped(const struct region *r)
{
    char st = proc_state(r->owner);
    if (st == 'T' || st == 't') {
        return true;
    }
    bool owner_gone = st == 0 || st == 'Z' || st == 'X';
    return !owner_gone && (stopped_peers(true, NULL) || ep_shm_stopped_mapper(r->name));
}

/* How long after a verdict on a lock held for held_ms the next one comes: the sooner of the
 * fence verdict (at the fence time, then every half fence time) and the dead-holder verdict
 * (at STUCK_MS, then every STUCK_MS). */
static uint64_t ms_to_next_look(uint64_t held_ms, unsigned fence)
{
    uint64_t stuck = held_ms < STUCK_MS ? STUCK_MS - held_ms : STUCK_MS;
    if (fence == 0) {
        return stuck;
    }
    uint64_t fenced = held_ms < fence ? fence - held_ms : fence / 2;
    return fenced < stuck ? fenced : stuck;
}

/* A verdict on a lock held since r->held_since. Past the fence time with a peer stopped by a
 * signal for half of it at least: kill the stopped peers, and release the lock if it is still
 * held CONFIRM_MS later with nobody stopped. Else, once held STUCK_MS: keep it while a
 * stopped process may hold it (it comes back), and release it at a second verdict CONFIRM_MS
 * later that still finds nobody stopped. A holder continued (SIGCONT) just before the first
 * is back inside its critical section and lets the lock go within moments: a release at the
 * first verdict let one such finish on a region the others had gone on using (session 34). */
static void judge(struct region *r, _Atomic int *lock, int free_value, uint64_t now)
{
    uint64_t held_ms = (now - r->held_since) / SDD_NS_PER_MS;
    unsigned fence = fence_ms();
    if (fence > 0 && held_ms >= fence && kill_stopped_peers(r->name, fence) > 0) {
        r->fenced = true; /* and killed */
        r->cleared = false;
        r->look_ns = now + CONFIRM_MS * SDD_NS_PER_MS;
        return;
    }
    uint64_t next_ns = now + ms_to_next_look(held_ms, fence) * SDD_NS_PER_MS;
    if (held_ms < STUCK_MS && !r->fenced) { /* a fence verdict that killed nobody */
        r->look_ns = next_ns;
        return;
    }
    if (holder_may_be_stopped(r)) {
        r->cleared = false;
        r->look_ns = next_ns;
        return;
    }
    if (!r->cleared && !r->fenced) {
        r->cleared = true;
        r->look_ns = now + CONFIRM_MS * SDD_NS_PER_MS;
        return;
    }
    r->held = 0;
    atomic_store_explicit(lock, free_value, memory_order_release);
    atomic_fetch_add(&locks_released, 1);
    SDD_WARN("fabric",
             "shm region %s: its lock stayed held for %llu ms, and a peer %s meanwhile; "
             "released (the holder died holding it)",
             r->name, (unsigned long long)held_ms, r->fenced ? "was killed" : "died");
}

/* One look at every region's lock: judge one found held in every look since its first, at the
 * times ms_to_next_look sets, and only if
 * the looks were at least half as many as SAMPLE_MS makes (a watch thread kept off the CPU
 * for long saw too little to tell). A dead owner's region is released whoever else is
 * stopped: nothing reads it any more. */
static void sample_locks(struct region *r, unsigned n, int free_value)
{
    uint64_t now = sdd_now_ns();
    uint64_t first_ns = now + ms_to_next_look(0, fence_ms()) * SDD_NS_PER_MS;
    for (unsigned i = 0; i < n; i++) {
        _Atomic int *lock = (_Atomic int *)(void *)(r[i].page + REGION_LOCK_AT);
        if (atomic_load_explicit(lock, memory_order_relaxed) == free_value) {
            r[i].held = 0;
        } else if (r[i].held++ == 0) {
            r[i].held_since = now;
            r[i].look_ns = first_ns;
            r[i].cleared = false;
            r[i].fenced = false;
        } else if (now >= r[i].look_ns &&
                   (uint64_t)r[i].held * SAMPLE_MS * 2 * SDD_NS_PER_MS >= now - r[i].held_since) {
            judge(&r[i], lock, free_value, now);
        }
    }
}

/* Whether a watched process ended since the last look (its pidfd is readable). */
static bool any_died(void)
{
    bool died = false;
    pthread_mutex_lock(&g.mu);
    for (unsigned i = 0; i < g.n; i++) {
        struct pollfd one = {.fd = g.w[i].fd, .events = POLLIN};
        if (one.fd >= 0 && poll(&one, 1, 0) == 1) {
            close(one.fd);
            g.w[i].fd = -1;
            died = true;
        }
    }
    pthread_mutex_unlock(&g.mu);
    return died;
}

static void unmap_regions(struct region *r, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        munmap(r[i].page, 4096);
    }
}

/* The regions mapped now in place of r[0..n): a region still mapped keeps what the samples
 * saw of its lock, so that looking again does not restart the clocks. Returns the new count. */
static unsigned rescan_regions(struct region *r, unsigned n)
{
    static struct region fresh[MAX_REGIONS];
    unsigned nf = find_regions(fresh, MAX_REGIONS);
    for (unsigned i = 0; i < nf; i++) {
        for (unsigned j = 0; j < n; j++) {
            if (strcmp(fresh[i].name, r[j].name) == 0) {
                fresh[i].held = r[j].held;
                fresh[i].held_since = r[j].held_since;
                fresh[i].look_ns = r[j].look_ns;
                fresh[i].cleared = r[j].cleared;
                fresh[i].fenced = r[j].fenced;
                break;
            }
        }
    }
    unmap_regions(r, n);
    memcpy(r, fresh, nf * sizeof(*r));
    return nf;
}

/* SDDAQ_SHM_FENCE_MS: a whole number of milliseconds; anything else leaves the default. */
static unsigned read_fence_ms(void)
{
    const char *v = getenv("SDDAQ_SHM_FENCE_MS");
    if (v == NULL || *v == '\0') {
        return FENCE_MS;
    }
    char *end;
    unsigned long ms = strtoul(v, &end, 10);
    if (*end != '\0' || v[0] == '-' || ms > 3600000) {
        SDD_WARN("fabric", "SDDAQ_SHM_FENCE_MS=%s: not milliseconds (0 to 3600000); using %u", v,
                 FENCE_MS);
        return FENCE_MS;
    }
    return (unsigned)ms;
}

/* Idle, it waits for a pidfd or a change of the table, and with fencing on, looks every
 * STOP_CHECK_MS for a stopped peer. For WATCH_MS after each death, and while a peer is
 * stopped, it samples the locks every SAMPLE_MS, looking again for regions after every death
 * and when a peer is first seen stopped. */
static void *watch_thread(void *arg)
{
    (void)arg;
    static struct pollfd fds[MAX_WATCHED + 1];
    static struct region r[MAX_REGIONS];
    unsigned nr = 0;
    int free_value = free_lock_value();
    uint64_t watch_end = 0;
    uint64_t next_stop_check = 0;
    uint64_t rescanned = 0; /* the last look for regions */
    for (;;) {
        pthread_mutex_lock(&g.mu);
        unsigned n = 0;
        fds[n++] = (struct pollfd){.fd = g.wake, .events = POLLIN};
        for (unsigned i = 0; i < g.n; i++) {
            if (g.w[i].fd >= 0) {
                fds[n++] = (struct pollfd){.fd = g.w[i].fd, .events = POLLIN};
            }
        }
        pthread_mutex_unlock(&g.mu);
        unsigned fence = fence_ms();
        int stop_check_ms = fence > 0 && fence / 2 < STOP_CHECK_MS ? (int)fence / 2 : STOP_CHECK_MS;
        int idle_ms = fence > 0 && n > 1 ? stop_check_ms : -1;
        int rc = poll(fds, n, watch_end != 0 ? SAMPLE_MS : idle_ms);
        if (rc < 0 && errno != EINTR) {
            return NULL;
        }
        uint64_t v;
        if (rc > 0 && (fds[0].revents & POLLIN) && read(g.wake, &v, sizeof(v)) < 0) {
            continue;
        }
        /* Asked again under the lock: a pidfd polled above may have been closed since (its
         * peer closed) and its number taken by a new one. */
        if (any_died()) {
            nr = rescan_regions(r, nr);
            rescanned = sdd_now_ns();
            watch_end = sdd_now_ns() + WATCH_MS * SDD_NS_PER_MS;
            SDD_DEBUG("fabric", "an shm peer ended: watching the locks of %u shm regions", nr);
        }
        uint64_t now = sdd_now_ns();
        if (fence > 0 && now >= next_stop_check) {
            next_stop_check = now + (uint64_t)stop_check_ms * SDD_NS_PER_MS;
            uint64_t stopped_since = 0;
            bool stopped = stopped_peers(false, &stopped_since);
            /* A peer found stopped since the last look for regions: maybe regions were mapped
             * since (a peer stopped just after another died was once missed so). */
            if (stopped && stopped_since > rescanned) {
                nr = rescan_regions(r, nr);
                rescanned = now;
                SDD_DEBUG("fabric", "an shm peer is stopped: watching %u shm regions", nr);
            }
            if (stopped) {
                watch_end = now + WATCH_MS * SDD_NS_PER_MS;
            }
        }
        if (watch_end != 0 && now >= watch_end) {
            unmap_regions(r, nr);
            nr = 0;
            watch_end = 0;
        }
        sample_locks(r, nr, free_value);
    }
}

static void lock_before_fork(void)
{
    pthread_mutex_lock(&g.mu);
}

static void unlock_after_fork(void)
{
    pthread_mutex_unlock(&g.mu);
}

/* A fork's child has no watch thread: it starts its own, on a table of its own. */
static void reset_in_child(void)
{
    for (unsigned i = 0; i < g.n; i++) {
        if (g.w[i].fd >= 0) {
            close(g.w[i].fd);
        }
    }
    if (g.wake >= 0) {
        close(g.wake);
    }
    g.n = 0;
    g.wake = -1;
    g.owner = 0;
    pthread_mutex_unlock(&g.mu);
}

/* Called with g.mu held. */
static bool start_thread(void)
{
    static bool atfork_set;
    if (g.owner == getpid()) {
        return true;
    }
    if (!atfork_set) {
        pthread_atfork(lock_before_fork, unlock_after_fork, reset_in_child);
        atfork_set = true;
    }
    fence_env_ms = read_fence_ms();
    g.wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    bool ok = g.wake >= 0 && pthread_create(&t, &attr, watch_thread, NULL) == 0;
    pthread_attr_destroy(&attr);
    if (!ok) {
        SDD_WARN("fabric", "no shm lock watch: %s", strerror(errno));
        if (g.wake >= 0) {
            close(g.wake);
            g.wake = -1;
        }
        return false;
    }
    g.owner = getpid();
    return true;
}

static void wake_thread(void)
{
    uint64_t one = 1;
    if (g.wake >= 0 && write(g.wake, &one, sizeof(one)) < 0) {
        return; /* the counter is full: the thread wakes anyway */
    }
}

void ep_shm_watch(pid_t pid)
{
    if (pid == 0 || pid == getpid()) {
        return;
    }
    pthread_mutex_lock(&g.mu);
    if (start_thread()) {
        unsigned i = 0;
        while (i < g.n && g.w[i].pid != pid) {
            i++;
        }
        if (i < g.n) {
            g.w[i].refs++;
        } else if (g.n < MAX_WATCHED) {
            int fd = (int)syscall(SYS_pidfd_open, pid, 0);
            g.w[g.n++] = (struct watched){.pid = pid, .fd = fd, .refs = 1};
            wake_thread();
        }
    }
    pthread_mutex_unlock(&g.mu);
}

void ep_shm_unwatch(pid_t pid)
{
    pthread_mutex_lock(&g.mu);
    for (unsigned i = 0; pid != 0 && g.owner == getpid() && i < g.n; i++) {
        if (g.w[i].pid == pid && --g.w[i].refs == 0) {
            if (g.w[i].fd >= 0) {
                close(g.w[i].fd);
            }
            g.w[i] = g.w[--g.n];
            wake_thread();
            break;
        }
    }
    pthread_mutex_unlock(&g.mu);
}

uint64_t sdd_fabric_shm_locks_released(void)
{
    return atomic_load(&locks_released);
}

uint64_t sdd_fabric_shm_peers_fenced(void)
{
    return atomic_load(&peers_fenced);
}

void sdd_fabric_shm_fence_within(unsigned ms)
{
    unsigned want = ms < FENCE_MIN_MS ? FENCE_MIN_MS : ms;
    unsigned cap = atomic_load(&fence_cap_ms);
    while (want < cap && !atomic_compare_exchange_weak(&fence_cap_ms, &cap, want)) {
    }
    pthread_mutex_lock(&g.mu);
    wake_thread(); /* its idle wait may be the longer one */
    pthread_mutex_unlock(&g.mu);
}
