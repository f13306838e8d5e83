/* Run-control state machine: every (from, to) pair against the table of DESIGN.md, every legal
 * transition taken on a live object, refusals leave the state untouched, error from every
 * state with its reason, compare-and-set, names and JSON. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#include "sddaq/ctl.h"

enum {
    I = SDD_RUN_INITIAL,
    C = SDD_RUN_CONFIGURED,
    R = SDD_RUN_RUNNING,
    P = SDD_RUN_PAUSED,
    S = SDD_RUN_STOPPED,
    E = SDD_RUN_ERROR,
    N = SDD_RUN_STATE_COUNT
};

/* legal[from][to], written out by hand from the diagram. */
static const bool legal[N][N] = {
    /*           I  C  R  P  S  E */
    [I] = {0, 1, 0, 0, 0, 1}, [C] = {0, 0, 1, 0, 0, 1}, [R] = {0, 0, 0, 1, 1, 1},
    [P] = {0, 0, 1, 0, 1, 1}, [S] = {0, 1, 0, 0, 0, 1}, [E] = {1, 0, 0, 0, 0, 0},
};

/* A path from initial to state s through legal transitions. */
static const int path_to[N][5] = {
    [I] = {-1},          [C] = {C, -1},       [R] = {C, R, -1},
    [P] = {C, R, P, -1}, [S] = {C, R, S, -1}, [E] = {E, -1},
};

static sdd_runctl *at_state(int s)
{
    sdd_runctl *rc = NULL;
    CHECK_OK(sdd_runctl_create(&rc));
    for (int i = 0; path_to[s][i] >= 0; i++) {
        CHECK_OK(sdd_runctl_transition(rc, (sdd_run_state)path_to[s][i], "setup"));
    }
    struct sdd_runctl_status st;
    sdd_runctl_get(rc, &st);
    CHECK_EQ(st.state, s);
    return rc;
}

static void test_table(void)
{
    for (int f = 0; f < N; f++) {
        for (int t = 0; t < N; t++) {
            CHECK_EQ(sdd_run_transition_legal((sdd_run_state)f, (sdd_run_state)t), legal[f][t]);
            sdd_runctl *rc = at_state(f);
            struct sdd_runctl_status before, after;
            sdd_runctl_get(rc, &before);
            sdd_err err = sdd_runctl_transition(rc, (sdd_run_state)t, "why");
            sdd_runctl_get(rc, &after);
            if (legal[f][t]) {
                CHECK_OK(err);
                CHECK_EQ(after.state, t);
                CHECK_EQ(after.previous, f);
                CHECK_EQ(after.transitions, before.transitions + 1);
                CHECK(strcmp(after.reason, "why") == 0);
                CHECK(after.since_ns >= before.since_ns);
            } else {
                CHECK_EQ(err, SDD_EBUSY);
                CHECK_EQ(after.state, f);
                CHECK_EQ(after.transitions, before.transitions);
                CHECK(strcmp(after.reason, before.reason) == 0);
            }
            sdd_runctl_destroy(rc);
        }
    }
    CHECK(!sdd_run_transition_legal((sdd_run_state)-1, SDD_RUN_ERROR));
    CHECK(!sdd_run_transition_legal(SDD_RUN_INITIAL, (sdd_run_state)N));
    sdd_runctl *rc = at_state(I);
    CHECK_EQ(sdd_runctl_transition(rc, (sdd_run_state)N, NULL), SDD_EINVAL);
    CHECK_EQ(sdd_runctl_transition(rc, (sdd_run_state)-3, NULL), SDD_EINVAL);
    sdd_runctl_destroy(rc);
}

static void test_full_cycle_and_fail(void)
{
    sdd_runctl *rc = at_state(I);
    static const int seq[] = {C, R, P, R, P, S, C, R, S, C};
    for (size_t i = 0; i < sizeof(seq) / sizeof(seq[0]); i++) {
        CHECK_OK(sdd_runctl_transition(rc, (sdd_run_state)seq[i], NULL));
    }
    struct sdd_runctl_status st;
    sdd_runctl_get(rc, &st);
    CHECK_EQ(st.transitions, 10);
    CHECK_EQ(st.state, C);
    CHECK(st.reason[0] == '\0');
    sdd_runctl_destroy(rc);
    /* Error from every state, with the node and reason; a second failure keeps the first. */
    for (int f = 0; f < N; f++) {
        rc = at_state(f);
        sdd_err err = sdd_runctl_fail(rc, "node2", "disk full");
        sdd_runctl_get(rc, &st);
        if (f == E) {
            CHECK_EQ(err, SDD_EBUSY);
            CHECK(strcmp(st.reason, "setup") == 0);
        } else {
            CHECK_OK(err);
            CHECK_EQ(st.state, E);
            CHECK_EQ(st.previous, f);
            CHECK(strcmp(st.reason, "node2: disk full") == 0);
            CHECK_EQ(sdd_runctl_fail(rc, "node3", "later"), SDD_EBUSY);
            sdd_runctl_get(rc, &st);
            CHECK(strcmp(st.reason, "node2: disk full") == 0);
            /* Out of error only by reset to initial. */
            CHECK_EQ(sdd_runctl_transition(rc, SDD_RUN_RUNNING, NULL), SDD_EBUSY);
            CHECK_OK(sdd_runctl_transition(rc, SDD_RUN_INITIAL, "reset"));
        }
        sdd_runctl_destroy(rc);
    }
    /* A reason longer than the buffer is cut, not overflowed. */
    rc = at_state(I);
    char longr[1000];
    memset(longr, 'x', sizeof(longr) - 1);
    longr[sizeof(longr) - 1] = '\0';
    CHECK_OK(sdd_runctl_fail(rc, NULL, longr));
    sdd_runctl_get(rc, &st);
    CHECK_EQ(strlen(st.reason), SDD_RUNCTL_REASON_MAX - 1);
    sdd_runctl_destroy(rc);
}

static void test_compare_and_set(void)
{
    sdd_runctl *rc = at_state(C);
    CHECK_EQ(sdd_runctl_transition_from(rc, SDD_RUN_INITIAL, SDD_RUN_CONFIGURED, NULL), SDD_EBUSY);
    CHECK_EQ(sdd_runctl_transition_from(rc, SDD_RUN_CONFIGURED, SDD_RUN_PAUSED, NULL), SDD_EBUSY);
    CHECK_OK(sdd_runctl_transition_from(rc, SDD_RUN_CONFIGURED, SDD_RUN_RUNNING, NULL));
    /* Someone failed the run while we worked: our commit must not undo that. */
    CHECK_OK(sdd_runctl_fail(rc, "n", "lost"));
    CHECK_EQ(sdd_runctl_transition_from(rc, SDD_RUN_RUNNING, SDD_RUN_PAUSED, NULL), SDD_EBUSY);
    CHECK_EQ(sdd_runctl_transition_from(rc, (sdd_run_state)77, SDD_RUN_PAUSED, NULL), SDD_EINVAL);
    struct sdd_runctl_status st;
    sdd_runctl_get(rc, &st);
    CHECK_EQ(st.state, E);
    sdd_runctl_destroy(rc);
}

static void test_names_json(void)
{
    static const char *const names[] = {"initial", "configured", "running",
                                        "paused",  "stopped",    "error"};
    for (int s = 0; s < N; s++) {
        CHECK(strcmp(sdd_run_state_name((sdd_run_state)s), names[s]) == 0);
        CHECK_EQ(sdd_run_state_parse(names[s]), s);
    }
    CHECK(strcmp(sdd_run_state_name((sdd_run_state)N), "?") == 0);
    CHECK_EQ(sdd_run_state_parse("Running"), -1);
    CHECK_EQ(sdd_run_state_parse(""), -1);
    CHECK_EQ(sdd_run_state_parse(NULL), -1);
    sdd_runctl *rc = at_state(R);
    CHECK_OK(sdd_runctl_fail(rc, "n\"1", "bad\\thing\n"));
    char json[1024];
    int n = sdd_runctl_json(rc, json, sizeof(json));
    CHECK(n > 0 && (size_t)n < sizeof(json));
    CHECK(strstr(json, "{\"state\":\"error\",\"previous\":\"running\",\"transitions\":3,") == json);
    CHECK(strstr(json, "\"reason\":\"n\\\"1: bad\\\\thing\\u000a\"}") != NULL);
    sdd_runctl_destroy(rc);
}

/* Threads race random transitions: each success is counted exactly once by the object (no
 * lost updates under the mutex) and error, never requested, is never reached. */
struct racer {
    sdd_runctl *rc;
    int ok;
};

static void *race(void *arg)
{
    struct racer *r = arg;
    uint64_t x = (uint64_t)(uintptr_t)r | 1;
    for (int i = 0; i < 20000; i++) {
        int to = (int)(check_rand(&x) % (N - 1)); /* never error: it would end the game */
        if (sdd_runctl_transition(r->rc, (sdd_run_state)to, NULL) == SDD_OK) {
            r->ok++;
        }
    }
    return NULL;
}

static void test_threads(void)
{
    sdd_runctl *rc = at_state(I);
    struct racer rs[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        rs[i] = (struct racer){rc, 0};
        pthread_create(&th[i], NULL, race, &rs[i]);
    }
    int total = 0;
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        total += rs[i].ok;
    }
    struct sdd_runctl_status st;
    sdd_runctl_get(rc, &st);
    CHECK_EQ(st.transitions, total);
    CHECK(total > 0);
    CHECK(st.state != SDD_RUN_ERROR);
    sdd_runctl_destroy(rc);
}

static void test_metrics(void)
{
    sdd_runctl *rc = at_state(C);
    sdd_metrics *m = NULL;
    CHECK_OK(sdd_metrics_create(&m));
    CHECK_OK(sdd_runctl_register_metrics(rc, m));
    CHECK_EQ(sdd_runctl_register_metrics(rc, m), SDD_EBUSY); /* twice: refused, first kept */
    CHECK_OK(sdd_runctl_transition(rc, SDD_RUN_RUNNING, NULL));
    char *text = NULL;
    CHECK_OK(sdd_metrics_render(m, &text, NULL));
    CHECK(text != NULL &&
          strcmp(text, "# HELP sddaq_run_state 1 for the run's current state, 0 for the others.\n"
                       "# TYPE sddaq_run_state gauge\n"
                       "sddaq_run_state{state=\"initial\"} 0\n"
                       "sddaq_run_state{state=\"configured\"} 0\n"
                       "sddaq_run_state{state=\"running\"} 1\n"
                       "sddaq_run_state{state=\"paused\"} 0\n"
                       "sddaq_run_state{state=\"stopped\"} 0\n"
                       "sddaq_run_state{state=\"error\"} 0\n"
                       "# HELP sddaq_run_transitions_total Run-control transitions made.\n"
                       "# TYPE sddaq_run_transitions_total counter\n"
                       "sddaq_run_transitions_total 2\n") == 0);
    free(text);
    sdd_metrics_destroy(m);
    sdd_runctl_destroy(rc);
}

int main(void)
{
    test_metrics();
    test_table();
    test_full_cycle_and_fail();
    test_compare_and_set();
    test_names_json();
    test_threads();
    return check_finish();
}
