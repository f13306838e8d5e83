/* The runtime through its library API (sddaq/run.h): a rate-limited evb-emu chain with a
 * prescale trigger, a null writer and a feedback buffer. While it runs, a clone of the feedback
 * buffer must see well-formed decisions (kept exactly when the prescale keeps, counters that
 * only grow); at the end every event is accounted for and the prescale kept exactly 1 of 3.
 * A second run is stopped through opts.stop and still accounts for every event. A config
 * changed in code so that it fails validation is refused before anything starts. */
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"

#include "sddaq/evb.h"
#include "sddaq/rmem.h"
#include "sddaq/run.h"

#define EVENTS 24000

#define TOPOLOGY                                                                                  \
    "run: {name: unit, output_dir: /tmp}\n"                                                       \
    "fabric: {provider: tcp}\n"                                                                   \
    "nodes: [{name: n, control_port: 0}]\n"                                                       \
    "stages:\n"                                                                                   \
    "  - {name: s0, type: source, rate: %d, fragment: {size: 256}}\n"                             \
    "  - {name: s1, type: source, rate: %d, fragment: {size: 256}}\n"                             \
    "  - {name: ru0, type: ru, bulk_size: 16}\n"                                                  \
    "  - {name: ru1, type: ru, bulk_size: 16}\n"                                                  \
    "  - {name: bu0, type: bu, bulk_size: 16}\n"                                                  \
    "  - {name: bu1, type: bu, bulk_size: 16}\n"                                                  \
    "  - {name: ps, type: process, algorithm: prescale, factor: 3}\n"                             \
    "  - {name: out, type: writer, format: null}\n"                                               \
    "  - {name: fb, type: feedback, port: %u}\n"                                                  \
    "links:\n"                                                                                    \
    "  - {from: s0, to: ru0}\n"                                                                   \
    "  - {from: s1, to: ru1}\n"                                                                   \
    "  - {from: ru0, to: bu0}\n"                                                                  \
    "  - {from: ru0, to: bu1}\n"                                                                  \
    "  - {from: ru1, to: bu0}\n"                                                                  \
    "  - {from: ru1, to: bu1}\n"                                                                  \
    "  - {from: bu0, to: ps}\n"                                                                   \
    "  - {from: bu1, to: ps}\n"                                                                   \
    "  - {from: ps, to: out}\n"                                                                   \
    "  - {from: ps, to: fb}\n"

static uint16_t free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    uint16_t port = 0;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0) {
        port = ntohs(a.sin_port);
    }
    if (fd >= 0) {
        close(fd);
    }
    return port;
}

struct job {
    sdd_config *cfg;
    struct sdd_run_opts o;
    struct sdd_run_summary s;
    sdd_err err;
};

static void *run_job(void *p)
{
    struct job *j = p;
    j->err = sdd_run_execute(j->cfg, &j->o, &j->s);
    return NULL;
}

static sdd_config *make(int rate, uint16_t port, uint64_t events)
{
    char yaml[2048];
    snprintf(yaml, sizeof(yaml), TOPOLOGY, rate, rate, port);
    sdd_config *cfg = NULL;
    CHECK_OK(sdd_config_parse(yaml, strlen(yaml), "unit_run", &cfg, NULL));
    if (cfg != NULL) {
        cfg->run.events = events;
        cfg->run.duration_s = 0;
    }
    return cfg;
}

/* Follow the feedback buffer for a while; returns the decisions seen. */
static int follow_feedback(uint16_t port)
{
    struct sdd_rmem_opts ro;
    sdd_rmem_opts_default(&ro);
    ro.provider = "tcp";
    sdd_ksb *k = NULL;
    for (int i = 0; i < 100 && sdd_ksb_clone(&ro, "127.0.0.1", port, &k) != SDD_OK; i++) {
        usleep(20000);
    }
    CHECK_REQUIRE(k != NULL);
    int seen = 0;
    uint64_t last_decided = 0, last_kept = 0;
    for (int i = 0; i < 200; i++) {
        struct sdd_ksb_elem e;
        if (sdd_ksb_wait_next(k, 1000, &e) != SDD_OK) {
            break;
        }
        struct sdd_run_feedback f;
        CHECK_REQUIRE(e.len == sizeof(f));
        memcpy(&f, e.data, sizeof(f));
        CHECK(f.event_id < EVENTS);
        CHECK_EQ(f.kept, f.event_id % 3 == 0 ? 1u : 0u);
        CHECK(f.decided > last_decided && f.kept_total >= last_kept);
        CHECK(f.kept_total <= f.decided && f.decided <= EVENTS);
        CHECK(f.built_ns != 0 && f.built_ns <= f.decided_ns);
        CHECK_EQ(f.event_flags, 0u);
        last_decided = f.decided;
        last_kept = f.kept_total;
        seen++;
    }
    sdd_ksb_close(k);
    return seen;
}

static void test_full_run(void)
{
    uint16_t port = free_port();
    struct job j = {.cfg = make(20000, port, EVENTS)};
    CHECK_REQUIRE(j.cfg != NULL);
    sdd_run_opts_default(&j.o);
    j.o.http = false;
    pthread_t th;
    CHECK_REQUIRE(pthread_create(&th, NULL, run_job, &j) == 0);
    int seen = follow_feedback(port);
    pthread_join(th, NULL);
    printf("feedback: %d decisions followed; run: %.2f s, %llu built, %llu kept\n", seen,
           j.s.seconds, (unsigned long long)j.s.built, (unsigned long long)j.s.kept);
    CHECK(seen >= 10);
    CHECK_EQ(j.err, SDD_OK);
    CHECK(j.s.ran && j.s.accounted);
    CHECK_EQ(j.s.generated, (uint64_t)EVENTS);
    CHECK_EQ(j.s.built, (uint64_t)EVENTS);
    CHECK_EQ(j.s.kept, (uint64_t)(EVENTS + 2) / 3);
    CHECK_EQ(j.s.rejected, (uint64_t)EVENTS - (EVENTS + 2) / 3);
    CHECK_EQ(j.s.written, j.s.kept);
    CHECK_EQ(j.s.dropped, 0u);
    CHECK_EQ(j.s.nstages, (size_t)9);
    sdd_run_summary_fini(&j.s);
    sdd_config_destroy(j.cfg);
}

static void test_stop_flag(void)
{
    static volatile sig_atomic_t stop;
    struct job j = {.cfg = make(50000, 0, 0)};
    CHECK_REQUIRE(j.cfg != NULL);
    sdd_run_opts_default(&j.o);
    j.o.http = false;
    j.o.stop = &stop;
    pthread_t th;
    CHECK_REQUIRE(pthread_create(&th, NULL, run_job, &j) == 0);
    usleep(500000);
    stop = 1;
    pthread_join(th, NULL);
    CHECK_EQ(j.err, SDD_OK);
    CHECK(j.s.ran && j.s.accounted);
    CHECK(j.s.built > 0 && j.s.built % 16 == 0); /* whole bulks */
    CHECK(j.s.seconds < 10);
    sdd_run_summary_fini(&j.s);
    sdd_config_destroy(j.cfg);
}

/* A config built or changed in code that fails sdd_config_validate() is refused before
 * anything starts: SDD_EINVAL, nothing ran, and the reason names the problem. Here one builder
 * unit takes bulks of 32 events while the readout units send 16. */
static void test_refuses_invalid(void)
{
    sdd_config *cfg = make(0, free_port(), 1000);
    CHECK_REQUIRE(cfg != NULL);
    for (size_t i = 0; i < cfg->n_stages; i++) {
        if (strcmp(cfg->stages[i].name, "bu1") == 0) {
            cfg->stages[i].evb.bulk_size = 32;
        }
    }
    struct sdd_run_opts o;
    sdd_run_opts_default(&o);
    struct sdd_run_summary s;
    CHECK_EQ(sdd_run_execute(cfg, &o, &s), SDD_EINVAL);
    CHECK(!s.ran);
    CHECK_EQ(s.status, SDD_EINVAL);
    CHECK(strstr(s.reason, "invalid topology") != NULL);
    CHECK(strstr(s.reason, "bulk_size") != NULL);
    sdd_run_summary_fini(&s);
    CHECK_EQ(sdd_run_execute(NULL, &o, &s), SDD_EINVAL);
    CHECK(!s.ran);
    sdd_run_summary_fini(&s);
    sdd_config_destroy(cfg);
}

int main(void)
{
    struct sdd_ep_opts eo;
    sdd_ep_opts_default(&eo);
    eo.provider = "tcp";
    sdd_ep *ep = NULL;
    if (sdd_ep_open(&eo, &ep) == SDD_ENOPROV) {
        return check_skip("tcp provider not available");
    }
    sdd_ep_close(ep);
    test_refuses_invalid();
    test_full_run();
    test_stop_flag();
    return check_finish();
}
