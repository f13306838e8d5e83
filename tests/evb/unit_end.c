/* A run paused and resumed (sdd_evb_node_hold / _resume), then ended at a length decided while
 * it runs (hold / _generated / _end), with the nodes as threads of one process, as the runtime
 * runs them: while held nothing new is generated; every event below the agreed end is built
 * exactly once, none beyond it, and every node finishes. */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "check.h"
#include "sddaq/clock.h"
#include "sddaq/evb.h"

#define NODES      3
#define MAX_EVENTS (1u << 22)

static _Atomic uint32_t built_count[MAX_EVENTS];
static _Atomic uint64_t built_total, built_bad;

static _Atomic int phase; /* 0 run, 1 hold asked, 2 end published */
static _Atomic int held;
static _Atomic uint64_t generated[NODES];
static _Atomic uint64_t end_bulks;
static _Atomic int end_err;
static _Atomic int pause_req; /* 1 hold, 3 hold at hold_k, 2 resume */
static _Atomic uint64_t hold_k;
static _Atomic int paused_nodes;
static _Atomic uint64_t paused_gen[NODES];

struct node_arg {
    sdd_evb_node *n;
    uint32_t idx;
    const char **hosts;
    uint16_t *ports;
    sdd_err result;
};

static void on_event(const struct sdd_evb_event *ev, void *arg)
{
    (void)arg;
    if (ev->event_id >= MAX_EVENTS || ev->flags != 0) {
        atomic_fetch_add(&built_bad, 1);
        return;
    }
    atomic_fetch_add(&built_count[ev->event_id], 1);
    atomic_fetch_add(&built_total, 1);
}

static void *node_main(void *p)
{
    struct node_arg *a = p;
    bool did_hold = false, did_end = false, is_paused = false, did_hold_at = false;
    int r = sdd_evb_node_connect(a->n, a->hosts, a->ports, 30000);
    if (r != SDD_OK) {
        a->result = (sdd_err)r;
        atomic_fetch_add(&held, 1);
        return NULL;
    }
    while ((r = sdd_evb_node_poll(a->n, 1)) > 0) {
        int pr = atomic_load(&pause_req);
        if (pr == 1 && !is_paused) {
            sdd_evb_node_hold(a->n);
            atomic_store(&paused_gen[a->idx], sdd_evb_node_generated(a->n));
            is_paused = true;
            atomic_fetch_add(&paused_nodes, 1);
        } else if (pr == 1 && sdd_evb_node_generated(a->n) != atomic_load(&paused_gen[a->idx])) {
            atomic_store(&end_err, 3); /* generated while held */
        } else if (pr == 3 && !did_hold_at) {
            uint64_t k = atomic_load(&hold_k), mine = sdd_evb_node_generated(a->n);
            if ((mine > 0 && sdd_evb_node_hold_at(a->n, mine - 1) != SDD_EINVAL) ||
                sdd_evb_node_hold_at(a->n, k) != SDD_OK) {
                atomic_store(&end_err, 4);
            }
            did_hold_at = true;
        } else if (pr == 3 && sdd_evb_node_generated(a->n) > atomic_load(&hold_k)) {
            atomic_store(&end_err, 5); /* went past the agreed pause point */
        } else if (pr == 2 && is_paused) {
            sdd_evb_node_resume(a->n);
            is_paused = false;
        }
        if (!did_hold && atomic_load(&phase) >= 1) {
            sdd_evb_node_hold(a->n);
            atomic_store(&generated[a->idx], sdd_evb_node_generated(a->n));
            atomic_fetch_add(&held, 1);
            did_hold = true;
        }
        if (!did_end && atomic_load(&phase) == 2) {
            /* A value below what this RU generated and one past the run are refused. */
            uint64_t k = atomic_load(&end_bulks);
            uint64_t mine = sdd_evb_node_generated(a->n);
            if ((mine > 0 && sdd_evb_node_end(a->n, mine - 1) != SDD_EINVAL) ||
                sdd_evb_node_end(a->n, 0) != SDD_EINVAL ||
                sdd_evb_node_end(a->n, MAX_EVENTS) != SDD_EINVAL) {
                atomic_store(&end_err, 1);
            }
            if (sdd_evb_node_end(a->n, k) != SDD_OK) {
                atomic_store(&end_err, 2);
            }
            did_end = true;
        }
    }
    a->result = r == 0 ? SDD_OK : (sdd_err)r;
    return NULL;
}

int main(void)
{
    struct sdd_evb_opts o;
    sdd_evb_opts_default(&o);
    o.provider = "tcp";
    o.nnodes = NODES;
    o.roles[0] = SDD_EVB_ROLE_RU | SDD_EVB_ROLE_BU;
    o.roles[1] = SDD_EVB_ROLE_RU;
    o.roles[2] = SDD_EVB_ROLE_BU;
    o.events = (MAX_EVENTS / 64 - 1) * 64; /* an upper bound the run never reaches */
    o.bulk = 16;
    o.credits = 4;
    o.src.mean = 256;
    o.on_event = on_event;
    struct node_arg args[NODES];
    const char *hosts[NODES];
    uint16_t ports[NODES];
    for (uint32_t i = 0; i < NODES; i++) {
        o.node = i;
        sdd_err err = sdd_evb_node_create(&o, &args[i].n);
        if (err == SDD_ENOPROV) {
            return check_skip("tcp provider not available");
        }
        CHECK_REQUIRE(err == SDD_OK);
        args[i].idx = i;
        hosts[i] = "127.0.0.1";
        ports[i] = sdd_evb_node_port(args[i].n);
    }
    for (uint32_t i = 0; i < NODES; i++) {
        args[i].hosts = hosts;
        args[i].ports = ports;
    }
    pthread_t th[NODES];
    for (uint32_t i = 0; i < NODES; i++) {
        CHECK_REQUIRE(pthread_create(&th[i], NULL, node_main, &args[i]) == 0);
    }
    /* Pause once some events are built: building stops after what was in flight. */
    uint64_t t0 = sdd_now_ns();
    while (atomic_load(&built_total) < 2000 && sdd_now_ns() - t0 < 20000000000ull) {
        usleep(1000);
    }
    atomic_store(&pause_req, 1);
    while (atomic_load(&paused_nodes) < NODES) {
        usleep(100);
    }
    /* Agree on the pause point, as for an end: every event below it is built, none beyond. */
    uint64_t kp = 0;
    for (uint32_t i = 0; i < NODES; i++) {
        uint64_t g = atomic_load(&paused_gen[i]);
        kp = g > kp ? g : kp;
    }
    kp = (kp + 1) / 2 * 2; /* whole cycles of the schedule: 2 BUs */
    atomic_store(&hold_k, kp);
    atomic_store(&pause_req, 3);
    t0 = sdd_now_ns();
    while (atomic_load(&built_total) < kp * o.bulk && sdd_now_ns() - t0 < 10000000000ull) {
        usleep(1000);
    }
    usleep(100000);
    uint64_t after = atomic_load(&built_total);
    printf("paused at %" PRIu64 " bulks: %" PRIu64 " events built\n", kp, after);
    CHECK_EQ(after, kp * o.bulk); /* all of them, complete, and nothing new while paused */
    atomic_store(&pause_req, 2);
    /* Then let the run go on, and end it. */
    t0 = sdd_now_ns();
    while (atomic_load(&built_total) < after + 3000 && sdd_now_ns() - t0 < 20000000000ull) {
        usleep(1000);
    }
    atomic_store(&phase, 1);
    while (atomic_load(&held) < NODES) {
        usleep(100);
    }
    uint64_t k = 0;
    for (uint32_t i = 0; i < NODES; i++) {
        uint64_t g = atomic_load(&generated[i]);
        k = g > k ? g : k;
    }
    CHECK(atomic_load(&generated[2]) == 0); /* the BU-only node generates nothing */
    atomic_store(&end_bulks, k);
    atomic_store(&phase, 2);
    for (uint32_t i = 0; i < NODES; i++) {
        pthread_join(th[i], NULL);
        CHECK(args[i].result == SDD_OK);
    }
    CHECK(atomic_load(&end_err) == 0);
    uint64_t events = k * o.bulk, once = 0, beyond = 0;
    for (uint64_t e = 0; e < MAX_EVENTS; e++) {
        uint32_t c = atomic_load(&built_count[e]);
        if (e < events) {
            once += c == 1;
        } else {
            beyond += c;
        }
    }
    printf("ended at %" PRIu64 " bulks (%" PRIu64 " events): %" PRIu64 " built once, %" PRIu64
           " beyond the end, %" PRIu64 " flagged\n",
           k, events, once, beyond, atomic_load(&built_bad));
    CHECK(k > 0);
    CHECK(once == events);
    CHECK(beyond == 0);
    CHECK(atomic_load(&built_bad) == 0);
    for (uint32_t i = 0; i < NODES; i++) {
        struct sdd_evb_stats st;
        sdd_evb_node_stats(args[i].n, &st);
        sdd_evb_node_destroy(args[i].n);
    }
    return check_finish();
}
