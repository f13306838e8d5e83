/* Fork-join team (sddaq/team.h): a job is published by bumping a generation counter; helpers
 * spin on it for a short while, then sleep on a condition variable, and count themselves out
 * when their part is done. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "sddaq/clock.h"
#include "sddaq/cpu.h"
#include "sddaq/log.h"
#include "sddaq/team.h"

#define TEAM_MAX     64
#define TEAM_SPIN_NS  (50 * SDD_NS_PER_US) /* a helper's wait before it sleeps */
#define TEAM_ALERT_NS SDD_NS_PER_MS        /* and after an alert: the serial part before a job */

struct member {
    sdd_team *t;
    unsigned who;
    int cpu;
    pthread_t th;
};

struct sdd_team {
    unsigned n;
    unsigned started; /* helpers running */
    sdd_team_fn fn;
    void *arg;
    _Atomic uint64_t gen;   /* jobs published; pairs with the acquire loads in next_job() */
    _Atomic uint64_t alert; /* alerts given (sdd_team_alert) */
    _Atomic unsigned left; /* helpers still at the current job */
    _Atomic bool quit;
    pthread_mutex_t mu; /* with wake: sleeping helpers, so a job is never missed */
    pthread_cond_t wake;
    unsigned sleepers;
    struct member m[TEAM_MAX];
};

/* Spin up to ns for a job after seen; its generation, or seen when none came (or quitting). */
static uint64_t spin_for_job(sdd_team *t, uint64_t seen, uint64_t ns)
{
    uint64_t t0 = sdd_now_ns();
    for (unsigned k = 1;; k++) {
        /* acquire: pairs with the release in publish(), so fn and arg are visible */
        uint64_t g = atomic_load_explicit(&t->gen, memory_order_acquire);
        if (g != seen || atomic_load_explicit(&t->quit, memory_order_relaxed)) {
            return g;
        }
        sdd_cpu_relax();
        if ((k & 63) == 0 && sdd_now_ns() - t0 > ns) {
            return seen;
        }
    }
}

/* The next job after seen: spin, then sleep until a job or an alert (then spin longer).
 * Returns its generation (seen when quitting). */
static uint64_t next_job(sdd_team *t, uint64_t seen, uint64_t *alerts)
{
    uint64_t ns = TEAM_SPIN_NS;
    for (;;) {
        uint64_t g = spin_for_job(t, seen, ns);
        if (g != seen || atomic_load_explicit(&t->quit, memory_order_relaxed)) {
            return g;
        }
        pthread_mutex_lock(&t->mu);
        while ((g = atomic_load_explicit(&t->gen, memory_order_acquire)) == seen &&
               atomic_load_explicit(&t->alert, memory_order_relaxed) == *alerts &&
               !atomic_load_explicit(&t->quit, memory_order_relaxed)) {
            t->sleepers++;
            pthread_cond_wait(&t->wake, &t->mu);
            t->sleepers--;
        }
        *alerts = atomic_load_explicit(&t->alert, memory_order_relaxed);
        pthread_mutex_unlock(&t->mu);
        if (g != seen || atomic_load_explicit(&t->quit, memory_order_relaxed)) {
            return g;
        }
        ns = TEAM_ALERT_NS; /* woken by an alert: the job is on its way */
    }
}

static void *helper(void *p)
{
    struct member *m = p;
    sdd_team *t = m->t;
    if (m->cpu >= 0 && sdd_cpu_pin_self(m->cpu) != SDD_OK) {
        SDD_WARN("team", "helper %u: cannot pin to CPU %d; runs unpinned", m->who, m->cpu);
    }
    uint64_t seen = 0, alerts = 0;
    for (;;) {
        seen = next_job(t, seen, &alerts);
        if (atomic_load_explicit(&t->quit, memory_order_relaxed)) {
            break;
        }
        t->fn(t->arg, m->who);
        /* release: what fn wrote is visible to the caller's acquire in sdd_team_run() */
        atomic_fetch_sub_explicit(&t->left, 1, memory_order_release);
    }
    return NULL;
}

/* Bump a counter under the lock, so a helper about to sleep sees it, and wake the sleepers. */
static void publish(sdd_team *t, _Atomic uint64_t *counter)
{
    pthread_mutex_lock(&t->mu);
    atomic_fetch_add_explicit(counter, 1, memory_order_release);
    if (t->sleepers > 0) {
        pthread_cond_broadcast(&t->wake);
    }
    pthread_mutex_unlock(&t->mu);
}

sdd_err sdd_team_create(unsigned n, const int *cpus, sdd_team **out)
{
    if (n == 0 || n > TEAM_MAX || out == NULL) {
        return SDD_EINVAL;
    }
    sdd_team *t = calloc(1, sizeof(*t));
    if (t == NULL) {
        return SDD_ENOMEM;
    }
    t->n = n;
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->wake, NULL);
    sdd_err err = SDD_OK;
    for (unsigned i = 1; i < n && err == SDD_OK; i++) {
        struct member *m = &t->m[i];
        *m = (struct member){.t = t, .who = i, .cpu = cpus != NULL ? cpus[i] : -1};
        int rc = pthread_create(&m->th, NULL, helper, m);
        if (rc != 0) {
            SDD_ERROR("team", "pthread_create: errno %d", rc);
            err = sdd_err_from_errno(rc);
        } else {
            t->started++;
        }
    }
    if (err != SDD_OK) {
        sdd_team_destroy(t);
        return err;
    }
    *out = t;
    return SDD_OK;
}

void sdd_team_destroy(sdd_team *t)
{
    if (t == NULL) {
        return;
    }
    atomic_store_explicit(&t->quit, true, memory_order_relaxed);
    publish(t, &t->gen);
    for (unsigned i = 1; i <= t->started; i++) {
        pthread_join(t->m[i].th, NULL);
    }
    pthread_cond_destroy(&t->wake);
    pthread_mutex_destroy(&t->mu);
    free(t);
}

unsigned sdd_team_size(const sdd_team *t)
{
    return t->n;
}

void sdd_team_alert(sdd_team *t)
{
    if (t->n > 1) {
        publish(t, &t->alert);
    }
}

void sdd_team_run(sdd_team *t, sdd_team_fn fn, void *arg)
{
    if (t->n > 1) {
        t->fn = fn;
        t->arg = arg;
        atomic_store_explicit(&t->left, t->n - 1, memory_order_relaxed);
        publish(t, &t->gen);
    }
    fn(arg, 0);
    unsigned k = 0;
    /* acquire: pairs with each helper's release when it counted itself out */
    while (atomic_load_explicit(&t->left, memory_order_acquire) != 0) {
        sdd_cpu_relax();
        if ((++k & 1023) == 0) {
            sched_yield(); /* a helper descheduled on a shared core needs it */
        }
    }
}
