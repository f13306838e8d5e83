/* The run-control state machine: the legal transitions of DESIGN.md plus reset from error,
 * the current state with its reason and entry time, under a mutex (control path only). The
 * runtime that starts and stops stages drives it; the HTTP server reports and requests. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sddaq/clock.h"
#include "sddaq/ctl.h"

static const char *const state_names[SDD_RUN_STATE_COUNT] = {
    "initial", "configured", "running", "paused", "stopped", "error",
};

struct state_probe {
    struct sdd_runctl *rc;
    int state; /* SDD_RUN_STATE_COUNT: the transition count */
};

struct sdd_runctl {
    pthread_mutex_t lock;
    struct sdd_runctl_status st;
    struct state_probe probes[SDD_RUN_STATE_COUNT + 1];
};

const char *sdd_run_state_name(sdd_run_state s)
{
    return (unsigned)s < SDD_RUN_STATE_COUNT ? state_names[s] : "?";
}

int sdd_run_state_parse(const char *name)
{
    for (int i = 0; name != NULL && i < SDD_RUN_STATE_COUNT; i++) {
        if (strcmp(name, state_names[i]) == 0) {
            return i;
        }
    }
    return -1;
}

bool sdd_run_transition_legal(sdd_run_state from, sdd_run_state to)
{
    if ((unsigned)from >= SDD_RUN_STATE_COUNT || (unsigned)to >= SDD_RUN_STATE_COUNT) {
        return false;
    }
    if (to == SDD_RUN_ERROR) {
        return from != SDD_RUN_ERROR;
    }
    switch (from) {
    case SDD_RUN_INITIAL:
        return to == SDD_RUN_CONFIGURED;
    case SDD_RUN_CONFIGURED:
        return to == SDD_RUN_RUNNING;
    case SDD_RUN_RUNNING:
        return to == SDD_RUN_PAUSED || to == SDD_RUN_STOPPED;
    case SDD_RUN_PAUSED:
        return to == SDD_RUN_RUNNING || to == SDD_RUN_STOPPED;
    case SDD_RUN_STOPPED:
        return to == SDD_RUN_CONFIGURED;
    case SDD_RUN_ERROR:
        return to == SDD_RUN_INITIAL;
    default:
        return false;
    }
}

sdd_err sdd_runctl_create(sdd_runctl **out)
{
    sdd_runctl *rc = calloc(1, sizeof(*rc));
    if (rc == NULL) {
        return SDD_ENOMEM;
    }
    pthread_mutex_init(&rc->lock, NULL);
    rc->st.state = SDD_RUN_INITIAL;
    rc->st.previous = SDD_RUN_INITIAL;
    rc->st.since_ns = sdd_now_ns();
    *out = rc;
    return SDD_OK;
}

void sdd_runctl_destroy(sdd_runctl *rc)
{
    if (rc == NULL) {
        return;
    }
    pthread_mutex_destroy(&rc->lock);
    free(rc);
}

void sdd_runctl_get(sdd_runctl *rc, struct sdd_runctl_status *st)
{
    pthread_mutex_lock(&rc->lock);
    *st = rc->st;
    pthread_mutex_unlock(&rc->lock);
}

/* from < 0: whatever the current state is. */
static sdd_err move(sdd_runctl *rc, int from, sdd_run_state to, const char *node,
                    const char *reason)
{
    if ((unsigned)to >= SDD_RUN_STATE_COUNT) {
        return SDD_EINVAL;
    }
    sdd_err err = SDD_OK;
    pthread_mutex_lock(&rc->lock);
    if ((from >= 0 && rc->st.state != (sdd_run_state)from) ||
        !sdd_run_transition_legal(rc->st.state, to)) {
        err = SDD_EBUSY;
    } else {
        rc->st.previous = rc->st.state;
        rc->st.state = to;
        rc->st.transitions++;
        rc->st.since_ns = sdd_now_ns();
        snprintf(rc->st.reason, sizeof(rc->st.reason), "%s%s%s", node != NULL ? node : "",
                 node != NULL ? ": " : "", reason != NULL ? reason : "");
    }
    pthread_mutex_unlock(&rc->lock);
    return err;
}

sdd_err sdd_runctl_transition(sdd_runctl *rc, sdd_run_state to, const char *reason)
{
    return move(rc, -1, to, NULL, reason);
}

sdd_err sdd_runctl_transition_from(sdd_runctl *rc, sdd_run_state from, sdd_run_state to,
                                   const char *reason)
{
    if ((unsigned)from >= SDD_RUN_STATE_COUNT) {
        return SDD_EINVAL;
    }
    return move(rc, (int)from, to, NULL, reason);
}

sdd_err sdd_runctl_fail(sdd_runctl *rc, const char *node, const char *reason)
{
    return move(rc, -1, SDD_RUN_ERROR, node, reason);
}

size_t sdd_json_escape(char *dst, size_t len, const char *s)
{
    if (len == 0) {
        return 0;
    }
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p != '\0' && o + 7 < len; p++) {
        if (*p == '"' || *p == '\\') {
            dst[o++] = '\\';
            dst[o++] = (char)*p;
        } else if (*p < 0x20) {
            o += (size_t)snprintf(dst + o, len - o, "\\u%04x", *p);
        } else {
            dst[o++] = (char)*p;
        }
    }
    dst[o] = '\0';
    return o;
}

int sdd_runctl_json(sdd_runctl *rc, char *buf, size_t len)
{
    struct sdd_runctl_status st;
    sdd_runctl_get(rc, &st);
    char reason[SDD_RUNCTL_REASON_MAX * 6 + 8];
    sdd_json_escape(reason, sizeof(reason), st.reason);
    double secs = (double)(sdd_now_ns() - st.since_ns) / 1e9;
    return snprintf(buf, len,
                    "{\"state\":\"%s\",\"previous\":\"%s\",\"transitions\":%llu,"
                    "\"seconds_in_state\":%.3f,\"reason\":\"%s\"}",
                    sdd_run_state_name(st.state), sdd_run_state_name(st.previous),
                    (unsigned long long)st.transitions, secs, reason);
}

static double probe(void *arg)
{
    struct state_probe *p = arg;
    struct sdd_runctl_status st;
    sdd_runctl_get(p->rc, &st);
    if (p->state == SDD_RUN_STATE_COUNT) {
        return (double)st.transitions;
    }
    return st.state == (sdd_run_state)p->state ? 1.0 : 0.0;
}

sdd_err sdd_runctl_register_metrics(sdd_runctl *rc, sdd_metrics *m)
{
    sdd_metric *made[SDD_RUN_STATE_COUNT + 1] = {0};
    sdd_err err = SDD_OK;
    for (int s = 0; s <= SDD_RUN_STATE_COUNT && err == SDD_OK; s++) {
        rc->probes[s] = (struct state_probe){rc, s};
        if (s < SDD_RUN_STATE_COUNT) {
            struct sdd_label l = {"state", state_names[s]};
            err = sdd_metrics_callback(m, SDD_METRIC_GAUGE, "sddaq_run_state",
                                       "1 for the run's current state, 0 for the others.", &l, 1,
                                       probe, &rc->probes[s], &made[s]);
        } else {
            err = sdd_metrics_callback(m, SDD_METRIC_COUNTER, "sddaq_run_transitions_total",
                                       "Run-control transitions made.", NULL, 0, probe,
                                       &rc->probes[s], &made[s]);
        }
    }
    if (err != SDD_OK) {
        for (int s = 0; s <= SDD_RUN_STATE_COUNT; s++) {
            sdd_metrics_remove(m, made[s]);
        }
    }
    return err;
}
