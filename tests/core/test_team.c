/* Fork-join team: every member runs each job exactly once with its own index, the caller sees
 * every member's writes when run returns, jobs that follow each other back to back and jobs
 * after the helpers went to sleep (alerted before or not) are all picked up, a team of one runs on the caller alone,
 * and bad arguments are refused. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "sddaq/clock.h"
#include "sddaq/team.h"

#define SLOTS 4096

struct job {
    unsigned members;
    uint64_t round;
    uint64_t calls[64];      /* per member: jobs run */
    uint64_t seen[64];       /* per member: the round it last saw */
    uint32_t out[SLOTS];     /* member i writes the slots i, i + members, ... */
};

static void work(void *arg, unsigned who)
{
    struct job *j = arg;
    j->calls[who]++;
    j->seen[who] = j->round;
    for (unsigned s = who; s < SLOTS; s += j->members) {
        j->out[s] = (uint32_t)(j->round * SLOTS + s);
    }
}

static void check_round(const struct job *j)
{
    int bad = 0;
    for (unsigned s = 0; s < SLOTS; s++) {
        bad += j->out[s] != (uint32_t)(j->round * SLOTS + s);
    }
    CHECK_EQ(bad, 0);
    for (unsigned i = 0; i < j->members; i++) {
        CHECK_EQ(j->calls[i], j->round);
        CHECK_EQ(j->seen[i], j->round);
    }
}

static void test_members_and_visibility(unsigned n)
{
    sdd_team *t = NULL;
    CHECK_OK(sdd_team_create(n, NULL, &t));
    CHECK_EQ(sdd_team_size(t), n);
    struct job *j = calloc(1, sizeof(*j));
    CHECK_REQUIRE(j != NULL);
    j->members = n;
    for (int r = 0; r < 2000; r++) { /* back to back: helpers still spinning */
        j->round++;
        sdd_team_run(t, work, j);
        check_round(j);
    }
    for (int r = 0; r < 10; r++) { /* after the helpers went to sleep; half of them alerted */
        sdd_sleep_ns(2 * SDD_NS_PER_MS);
        if (r % 2 == 1) {
            sdd_team_alert(t);
            sdd_sleep_ns(100 * SDD_NS_PER_US); /* serial work before the job */
        }
        j->round++;
        sdd_team_run(t, work, j);
        check_round(j);
    }
    sdd_team_alert(t); /* an alert with no job after it: the helpers go back to sleep */
    sdd_sleep_ns(3 * SDD_NS_PER_MS);
    sdd_team_destroy(t);
    free(j);
}

static void test_pinned_helpers(void)
{
    int cpus[2] = {-1, 0};
    sdd_team *t = NULL;
    CHECK_OK(sdd_team_create(2, cpus, &t));
    struct job *j = calloc(1, sizeof(*j));
    CHECK_REQUIRE(j != NULL);
    j->members = 2;
    j->round = 1;
    sdd_team_run(t, work, j);
    check_round(j);
    sdd_team_destroy(t);
    free(j);
}

static void test_bad_arguments(void)
{
    sdd_team *t = NULL;
    CHECK_EQ(sdd_team_create(0, NULL, &t), SDD_EINVAL);
    CHECK_EQ(sdd_team_create(65, NULL, &t), SDD_EINVAL);
    CHECK_EQ(sdd_team_create(2, NULL, NULL), SDD_EINVAL);
    CHECK(t == NULL);
    sdd_team_destroy(NULL);
}

int main(void)
{
    test_members_and_visibility(1);
    test_members_and_visibility(2);
    test_members_and_visibility(4); /* more members than this machine's cores */
    test_pinned_helpers();
    test_bad_arguments();
    return check_finish();
}
