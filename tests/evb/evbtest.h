/* Helpers for event-builder tests: run an N-node event builder as N real processes on this
 * machine (ports chosen by the kernel and passed around through pipes), record every built
 * event in shared memory so the parent can account for each event globally, and optionally
 * kill one node with SIGKILL in the middle of the run. */
#ifndef SDDAQ_TEST_EVBTEST_H
#define SDDAQ_TEST_EVBTEST_H

#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "sddaq/clock.h"
#include "sddaq/evb.h"
#include "sddaq/fabric.h"
#include "shm_region.h"

static const char *et_provider = "tcp";

/* Whether case `name` runs: all of them, or those SDDAQ_EVB_CASES lists (comma-separated
 * names without test_, e.g. stop_continue_bu,stop_continue_combined), to repeat a few. */
static inline bool et_case(const char *name)
{
    const char *list = getenv("SDDAQ_EVB_CASES");
    size_t len = strlen(name);
    for (const char *p = list; p != NULL && *p != '\0'; p += strcspn(p, ",")) {
        p += *p == ',';
        if (strncmp(p, name, len) == 0 && (p[len] == ',' || p[len] == '\0')) {
            return true;
        }
    }
    return list == NULL;
}

/* Runs test_NAME() if et_case picks it. */
#define ET_CASE(name)         \
    do {                      \
        if (et_case(#name)) { \
            test_##name();    \
        }                     \
    } while (0)

/* Shared between all node processes and the parent. */
struct et_shared {
    _Atomic uint64_t built_total;
    struct sdd_evb_stats stats[SDD_EVB_MAX_NODES];
    _Atomic int done[SDD_EVB_MAX_NODES];
    /* per event: times built, OR of flags, OR of present bitmaps, OR of corrupt sources */
    _Atomic uint32_t *count;
    _Atomic uint32_t *flags;
    _Atomic uint64_t *present;
    _Atomic uint64_t *corrupt;
    _Atomic uint32_t *kept;  /* per event: times a consumer honouring the commit mark kept it */
    _Atomic uint64_t *builders; /* per event: bit i set when node i built it */
    _Atomic int stalled_pid; /* the node that stopped itself mid-delivery (et_stall_at) */
    _Atomic int pid[SDD_EVB_MAX_NODES]; /* each node process's, once it runs */
    /* shm: stopped peers the nodes' lock watches killed (sdd_fabric_shm_peers_fenced) */
    _Atomic uint64_t shm_fenced;
    /* the stall's start (node's clock) and the harness's first sight of re-sent bulks built */
    _Atomic uint64_t stalled_ns, resent_seen_ns;
};

static struct et_shared *et_sh;
static uint32_t et_node; /* in a node process: its index */

#define ET_FENCED 7 /* a node's exit status when its run ended SDD_EFENCED */

/* Set before et_run_sig, inherited by the nodes: event id + 1 at whose delivery the BU building
 * it stops itself (SIGSTOP), a stall that begins exactly inside the fencing window. */
static uint64_t et_stall_at;
static uint32_t et_stall_ms; /* 0: continue it once an RU gave it up; else after this long */
static bool et_stall_kill;   /* SIGKILL it instead, still stopped inside the delivery */
static bool et_stall_locked; /* shm: it stops holding its own region's spin lock */
static bool et_stall_third;  /* shm: ... the next BU's (nodes 2-4) instead of its own */
/* shm: instead of stopping itself, it takes node 0's region lock and goes on, so that its next
 * post to node 0 (the bulk's acknowledgement) spins there; the harness stops it while it spins
 * and only then releases the lock */
static bool et_stall_post;

/* A consumer that makes events leave the node (a writer) keeps each only once its delivery is
 * committed, and drops it if the node fenced first (sdd_evb_node_committed): per node process,
 * the events delivered and not yet committed. */
static struct et_held {
    uint64_t id, delivery;
} * et_held;
static size_t et_nheld, et_held_cap;

static void et_hold(uint64_t id, uint64_t delivery)
{
    if (et_nheld == et_held_cap) {
        et_held_cap = et_held_cap ? 2 * et_held_cap : 1024;
        et_held = realloc(et_held, et_held_cap * sizeof(*et_held));
        CHECK_REQUIRE(et_held != NULL);
    }
    et_held[et_nheld++] = (struct et_held){id, delivery};
}

/* Keep what is committed now; with `final`, drop the rest (the node fenced). */
static void et_commit(uint64_t committed, bool final)
{
    size_t i = 0;
    while (i < et_nheld && et_held[i].delivery <= committed) {
        atomic_fetch_add(&et_sh->kept[et_held[i].id], 1);
        i++;
    }
    et_nheld -= final ? et_nheld : i;
    if (et_nheld > 0) { /* never with et_held NULL: nothing held yet */
        memmove(et_held, et_held + i, et_nheld * sizeof(*et_held));
    }
}

/* Set before et_run_sig, inherited by the nodes: > 0 makes that consumer hold this many events
 * at most, and tell the builder so (has_room), as sddaq run's writers do with their buffers.
 * It also says no at every third ask, so that the builder's wait is taken whatever the timing
 * (a poll turn that completes two bulks is not certain to happen). */
static uint32_t et_room;

static bool et_has_room(uint32_t events, void *arg)
{
    static uint64_t asks;
    (void)arg;
    return ++asks % 3 != 0 && et_nheld + events <= et_room;
}

static void et_on_event(const struct sdd_evb_event *ev, void *arg)
{
    (void)arg;
    uint64_t id = ev->event_id;
    uint64_t bad = 0;
    for (uint32_t s = 0; s < ev->nsources; s++) {
        if (ev->src_flags[s] & SDD_EVB_EV_CORRUPT) {
            bad |= 1ull << s;
        }
    }
    /* Who built it before the count: a node stopped or killed between the two (a signal at a
     * random moment) must not leave a second copy that seems to come from the survivor alone. */
    atomic_fetch_or(&et_sh->builders[id], 1ull << et_node);
    atomic_fetch_or(&et_sh->flags[id], ev->flags);
    atomic_fetch_or(&et_sh->present[id], ev->present[0]);
    atomic_fetch_or(&et_sh->corrupt[id], bad);
    atomic_fetch_add(&et_sh->count[id], 1);
    atomic_fetch_add(&et_sh->built_total, 1);
    et_hold(id, ev->delivery);
    if (id + 1 == et_stall_at) {
        int none = 0;
        if (atomic_compare_exchange_strong(&et_sh->stalled_pid, &none, (int)getpid())) {
            atomic_store(&et_sh->stalled_ns, sdd_now_ns());
            if (et_stall_post) {
                pthread_spinlock_t *lock = shm_region_lock_of(atomic_load(&et_sh->pid[0]));
                CHECK_REQUIRE(lock != NULL);
                pthread_spin_lock(lock); /* et_stop_spinning (the harness) releases it */
                return;
            }
            pid_t of = et_stall_third ? atomic_load(&et_sh->pid[2 + (et_node - 1) % 3]) : getpid();
            pthread_spinlock_t *lock = et_stall_locked ? shm_region_lock_of(of) : NULL;
            if (lock != NULL) {
                pthread_spin_lock(lock); /* as libfabric holds it while it progresses */
            }
            raise(SIGSTOP); /* continued by et_run_sig once an RU gave this BU up */
        }
    }
}

static void *et_map(size_t len)
{
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        exit(1);
    }
    return p;
}

static void et_init(int argc, char **argv)
{
    if (argc > 1) {
        et_provider = argv[1];
    }
    signal(SIGPIPE, SIG_IGN);
    struct sdd_ep_opts o;
    sdd_ep_opts_default(&o);
    o.provider = et_provider;
    sdd_ep *ep = NULL;
    sdd_err err = sdd_ep_open(&o, &ep);
    if (err == SDD_ENOPROV) {
        exit(check_skip("provider not available here"));
    }
    CHECK_REQUIRE(err == SDD_OK);
    sdd_ep_close(ep);
    et_sh = et_map(sizeof(*et_sh));
}

static void et_reset(uint64_t events)
{
    static uint64_t mapped; /* events the current arrays were mapped for */
    if (et_sh->count != NULL) {
        munmap((void *)et_sh->count, mapped * 4);
        munmap((void *)et_sh->flags, mapped * 4);
        munmap((void *)et_sh->present, mapped * 8);
        munmap((void *)et_sh->corrupt, mapped * 8);
        munmap((void *)et_sh->kept, mapped * 4);
        munmap((void *)et_sh->builders, mapped * 8);
    }
    mapped = events;
    memset(et_sh, 0, sizeof(*et_sh));
    et_sh->count = et_map(events * 4);
    et_sh->flags = et_map(events * 4);
    et_sh->present = et_map(events * 8);
    et_sh->corrupt = et_map(events * 8);
    et_sh->kept = et_map(events * 4);
    et_sh->builders = et_map(events * 8);
}

static int et_node_main(struct sdd_evb_opts o, int port_w, int list_r)
{
    atomic_store(&et_sh->pid[o.node], (int)getpid());
    o.on_event = et_on_event;
    o.has_room = et_room > 0 ? et_has_room : NULL;
    et_node = o.node;
    sdd_evb_node *n = NULL;
    if (sdd_evb_node_create(&o, &n) != SDD_OK) {
        return 2;
    }
    uint16_t port = sdd_evb_node_port(n);
    if (write(port_w, &port, 2) != 2) {
        return 3;
    }
    uint16_t ports[SDD_EVB_MAX_NODES];
    if (read(list_r, ports, 2 * o.nnodes) != (ssize_t)(2 * o.nnodes)) {
        return 4;
    }
    const char *hosts[SDD_EVB_MAX_NODES];
    for (uint32_t i = 0; i < o.nnodes; i++) {
        hosts[i] = "127.0.0.1";
    }
    if (sdd_evb_node_connect(n, hosts, ports, 60000) != SDD_OK) {
        sdd_evb_node_destroy(n);
        return 5;
    }
    int err;
    while ((err = sdd_evb_node_poll(n, 1)) > 0) {
        et_commit(sdd_evb_node_committed(n), false);
    }
    et_commit(sdd_evb_node_committed(n), true);
    sdd_evb_node_stats(n, &et_sh->stats[o.node]);
    atomic_fetch_add(&et_sh->shm_fenced, sdd_fabric_shm_peers_fenced());
    atomic_store(&et_sh->done[o.node], 1);
    sdd_evb_node_destroy(n);
    return err == SDD_OK ? 0 : err == SDD_EFENCED ? ET_FENCED : 6;
}

/* et_stall_post: the node `pid` holds owner's region lock and, a moment later, spins on it in
 * its next post there. Stop it while it spins, then release the lock for everyone else: the
 * post completes only once the node is continued. */
static void et_stop_spinning(pid_t pid, pid_t owner)
{
    pthread_spinlock_t *lock = shm_region_lock_map(owner);
    CHECK_REQUIRE(lock != NULL);
    sdd_sleep_ns(200 * SDD_NS_PER_MS); /* it spins well before: it posts at its turn's end */
    kill(pid, SIGSTOP);
    atomic_store(&et_sh->stalled_ns, sdd_now_ns());
    uint64_t deadline = sdd_now_ns() + 10 * SDD_NS_PER_S;
    while (proc_state_of(pid) != 'T' && sdd_now_ns() < deadline) {
        sdd_sleep_ns(100 * SDD_NS_PER_US);
    }
    CHECK_EQ(proc_state_of(pid), 'T');
    pthread_spin_unlock(lock);
    printf("stopped node process %d spinning on a lock, released the lock\n", (int)pid);
}

/* Any event built from re-sent bulks yet: some RU has given a BU up. */
static bool et_any_resent(uint64_t events)
{
    for (uint64_t e = 0; e < events; e++) {
        if (atomic_load(&et_sh->flags[e]) & SDD_EVB_EV_RESENT) {
            return true;
        }
    }
    return false;
}

/* Whether a node process other than `stopped` still runs (not reaped here: waitpid does). */
static bool et_others_run(const pid_t *pids, uint32_t nn, pid_t stopped)
{
    for (uint32_t i = 0; i < nn; i++) {
        siginfo_t info = {0};
        if (pids[i] != stopped &&
            waitid(P_PID, (id_t)pids[i], &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
            info.si_pid == 0) {
            return true;
        }
    }
    return false;
}

/* Wait up to 120 s until events built from re-sent bulks appear, or until no node but
 * `stopped` runs any more (every survivor fenced: nobody is left to re-send, and the test
 * reports it instead of waiting the 120 s). */
static void et_wait_resent(uint64_t events, const pid_t *pids, uint32_t nn, pid_t stopped)
{
    uint64_t deadline = sdd_now_ns() + 120 * SDD_NS_PER_S;
    while (!et_any_resent(events) && et_others_run(pids, nn, stopped) && sdd_now_ns() < deadline) {
        sdd_sleep_ns(10 * SDD_NS_PER_MS);
    }
}

/* Run o.nnodes node processes with opts o (node index filled in). kill_node >= 0: send it sig
 * once kill_after events were built (anywhere). A node sent SIGSTOP is, with cont, continued
 * once an RU has given it up (events built from re-sent bulks appear) and left to end by
 * itself; without cont it is killed after the others ended. status[i] receives each exit
 * status (-9 for a killed one). Returns 0 when the run could be set up. */
static int et_run_sig(struct sdd_evb_opts o, int kill_node, uint64_t kill_after, int sig,
                      bool cont, int *status)
{
    et_reset(o.events);
    uint32_t nn = o.nnodes;
    pid_t pids[SDD_EVB_MAX_NODES];
    int port_fd[SDD_EVB_MAX_NODES][2], list_fd[SDD_EVB_MAX_NODES][2];
    for (uint32_t i = 0; i < nn; i++) {
        if (pipe(port_fd[i]) != 0 || pipe(list_fd[i]) != 0) {
            return -1;
        }
        fflush(stdout);
        fflush(stderr);
        pids[i] = fork();
        if (pids[i] == 0) {
            o.node = i;
            o.provider = et_provider;
            _exit(et_node_main(o, port_fd[i][1], list_fd[i][0]));
        }
    }
    uint16_t ports[SDD_EVB_MAX_NODES];
    for (uint32_t i = 0; i < nn; i++) {
        if (read(port_fd[i][0], &ports[i], 2) != 2) {
            fprintf(stderr, "node %u did not start\n", i);
            ports[i] = 0;
        }
    }
    for (uint32_t i = 0; i < nn; i++) {
        if (write(list_fd[i][1], ports, 2 * nn) != (ssize_t)(2 * nn)) {
            fprintf(stderr, "cannot send the node list to node %u\n", i);
        }
        close(port_fd[i][0]);
        close(port_fd[i][1]);
        close(list_fd[i][0]);
        close(list_fd[i][1]);
    }
    if (kill_node >= 0) {
        uint64_t deadline = sdd_now_ns() + 120 * SDD_NS_PER_S;
        while (atomic_load(&et_sh->built_total) < kill_after && sdd_now_ns() < deadline) {
            sdd_sleep_ns(SDD_NS_PER_MS);
        }
        kill(pids[kill_node], sig);
        printf("sent signal %d to node %d after %llu built events\n", sig, kill_node,
               (unsigned long long)atomic_load(&et_sh->built_total));
    }
    if (et_stall_at != 0) {
        uint64_t deadline = sdd_now_ns() + 120 * SDD_NS_PER_S;
        while (atomic_load(&et_sh->stalled_pid) == 0 && sdd_now_ns() < deadline) {
            sdd_sleep_ns(SDD_NS_PER_MS);
        }
        if (et_stall_ms > 0) {
            sdd_sleep_ns((uint64_t)et_stall_ms * SDD_NS_PER_MS);
        }
        if (et_stall_post && atomic_load(&et_sh->stalled_pid) != 0) {
            et_stop_spinning(atomic_load(&et_sh->stalled_pid), atomic_load(&et_sh->pid[0]));
        }
        if (et_stall_kill && atomic_load(&et_sh->stalled_pid) != 0) {
            kill(atomic_load(&et_sh->stalled_pid), SIGKILL); /* stays set: nobody stops again */
            printf("killed the node stopped mid-delivery after %llu built events\n",
                   (unsigned long long)atomic_load(&et_sh->built_total));
        }
        if (et_stall_ms == 0 && !et_stall_kill) {
            et_wait_resent(o.events, pids, nn, atomic_load(&et_sh->stalled_pid));
        }
        atomic_store(&et_sh->resent_seen_ns, sdd_now_ns());
        if (atomic_load(&et_sh->stalled_pid) != 0 && !et_stall_kill) {
            kill(atomic_load(&et_sh->stalled_pid), SIGCONT);
            printf("continued the node stalled mid-delivery after %llu built events\n",
                   (unsigned long long)atomic_load(&et_sh->built_total));
        }
    }
    if (cont && sig == SIGSTOP && kill_node >= 0) {
        et_wait_resent(o.events, pids, nn, pids[kill_node]);
        kill(pids[kill_node], SIGCONT);
        printf("continued node %d after %llu built events, re-sent bulks seen\n", kill_node,
               (unsigned long long)atomic_load(&et_sh->built_total));
    }
    for (uint32_t i = 0; i < nn; i++) {
        int st = 0;
        if (sig == SIGSTOP && (int)i == kill_node && !cont) {
            continue; /* a stopped node never ends by itself: reaped below */
        }
        waitpid(pids[i], &st, 0);
        sdd_fabric_release_shm_of(pids[i]);
        status[i] = WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? -WTERMSIG(st) : -100;
    }
    if (sig == SIGSTOP && kill_node >= 0 && !cont) {
        int st = 0;
        kill(pids[kill_node], SIGKILL);
        waitpid(pids[kill_node], &st, 0);
        sdd_fabric_release_shm_of(pids[kill_node]);
        status[kill_node] = -SIGSTOP;
    }
    return 0;
}

static int et_run(struct sdd_evb_opts o, int kill_node, uint64_t kill_after, int *status)
{
    return et_run_sig(o, kill_node, kill_after, SIGKILL, false, status);
}

/* Run `tests` once with RUs writing bulks into BU slots and once with BUs reading them; the
 * tests put *mode into their options. */
static void et_each_transfer(sdd_evb_transfer *mode, void (*tests)(void))
{
    const sdd_evb_transfer modes[] = {SDD_EVB_TRANSFER_WRITE, SDD_EVB_TRANSFER_READ};
    for (int m = 0; m < 2; m++) {
        *mode = modes[m];
        printf("== bulks %s\n", sdd_evb_transfer_name(*mode));
        tests();
    }
}

/* Global accounting over all BUs of the last run. */
struct et_tally {
    uint64_t lost, dup, complete, incomplete, corrupt, bad_content;
    uint64_t kept_lost, kept_dup; /* by a consumer honouring the commit mark (et_commit) */
};

static struct et_tally et_count(uint64_t events)
{
    struct et_tally t = {0};
    for (uint64_t e = 0; e < events; e++) {
        uint32_t c = atomic_load(&et_sh->count[e]);
        uint32_t f = atomic_load(&et_sh->flags[e]);
        if (c == 0) {
            t.lost++;
            if (t.lost <= 3) {
                fprintf(stderr, "event %llu never built\n", (unsigned long long)e);
            }
        } else if (c > 1) {
            t.dup++;
            if (t.dup <= 3) {
                fprintf(stderr, "event %llu built %u times\n", (unsigned long long)e, c);
            }
        }
        uint32_t k = atomic_load(&et_sh->kept[e]);
        t.kept_lost += k == 0;
        t.kept_dup += k > 1;
        if (c > 0 && (f & ~(uint32_t)SDD_EVB_EV_RESENT) == 0) {
            t.complete++;
        }
        if (f & SDD_EVB_EV_MISSING) {
            t.incomplete++;
        }
        if (f & SDD_EVB_EV_CORRUPT) {
            t.corrupt++;
        }
    }
    return t;
}

#endif
