/* Metrics registry: the exact exposition text of a small registry (HELP/TYPE, labels, label
 * and help escaping, summaries, callbacks), registration errors, removal, the standard stage
 * set, and lock-free updates from several threads while another renders: counters never run
 * backwards, totals are exact, and a summary is never seen half published. */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#include "sddaq/metrics.h"

static double cb(void *arg)
{
    return *(double *)arg;
}

static char *render(sdd_metrics *m)
{
    char *text = NULL;
    size_t len = 0;
    CHECK_OK(sdd_metrics_render(m, &text, &len));
    CHECK(text != NULL && strlen(text) == len);
    return text;
}

static void test_exact_text(void)
{
    sdd_metrics *m = NULL;
    CHECK_OK(sdd_metrics_create(&m));
    sdd_metric *a, *b, *g, *s, *e, *u, *c;
    struct sdd_label la[] = {{"stage", "a"}, {"node", "n1"}};
    struct sdd_label lb[] = {{"stage", "b"}, {"node", "n1"}};
    struct sdd_label weird[] = {{"stage", "we\"ird\\name\n"}};
    struct sdd_label sa[] = {{"stage", "a"}};
    CHECK_OK(sdd_metrics_counter(m, "sddaq_test_events_total", "Events seen.", la, 2, &a));
    CHECK_OK(sdd_metrics_counter(m, "sddaq_test_events_total", "Events seen.", lb, 2, &b));
    CHECK_OK(
        sdd_metrics_gauge(m, "sddaq_test_queue_depth_items", "Back\\slash help", weird, 1, &g));
    CHECK_OK(sdd_metrics_summary(m, "t_latency_ns", "Latency.", sa, 1, 1.0, &s));
    CHECK_OK(sdd_metrics_summary(m, "t_latency_ns", "Latency.", NULL, 0, 1.0, &e));
    CHECK_OK(sdd_metrics_counter(m, "up_total", "Plain.", NULL, 0, &u));
    double cbv = 1.25;
    CHECK_OK(sdd_metrics_callback(m, SDD_METRIC_GAUGE, "cb_value", "From a callback.", NULL, 0, cb,
                                  &cbv, &c));
    sdd_metric_add(a, 3);
    sdd_metric_add(a, 2);
    sdd_metric_set(g, 2.0);
    sdd_metric_gauge_add(g, 0.5);
    sdd_hist h;
    sdd_hist_init(&h);
    sdd_hist_record(&h, 10);
    sdd_hist_record(&h, 20);
    sdd_hist_record(&h, 30);
    sdd_metric_publish(s, &h);
    CHECK_EQ(sdd_metric_counter_value(a), 5);
    CHECK(sdd_metric_gauge_value(g) == 2.5);
    /* Updates of the wrong kind are ignored. */
    sdd_metric_add(g, 7);
    sdd_metric_set(a, 9.0);
    sdd_metric_publish(a, &h);
    const char *want = "# HELP sddaq_test_events_total Events seen.\n"
                       "# TYPE sddaq_test_events_total counter\n"
                       "sddaq_test_events_total{stage=\"a\",node=\"n1\"} 5\n"
                       "sddaq_test_events_total{stage=\"b\",node=\"n1\"} 0\n"
                       "# HELP sddaq_test_queue_depth_items Back\\\\slash help\n"
                       "# TYPE sddaq_test_queue_depth_items gauge\n"
                       "sddaq_test_queue_depth_items{stage=\"we\\\"ird\\\\name\\n\"} 2.5\n"
                       "# HELP t_latency_ns Latency.\n"
                       "# TYPE t_latency_ns summary\n"
                       "t_latency_ns{stage=\"a\",quantile=\"0.5\"} 20\n"
                       "t_latency_ns{stage=\"a\",quantile=\"0.9\"} 30\n"
                       "t_latency_ns{stage=\"a\",quantile=\"0.99\"} 30\n"
                       "t_latency_ns{stage=\"a\",quantile=\"0.999\"} 30\n"
                       "t_latency_ns_sum{stage=\"a\"} 60\n"
                       "t_latency_ns_count{stage=\"a\"} 3\n"
                       "t_latency_ns{quantile=\"0.5\"} NaN\n"
                       "t_latency_ns{quantile=\"0.9\"} NaN\n"
                       "t_latency_ns{quantile=\"0.99\"} NaN\n"
                       "t_latency_ns{quantile=\"0.999\"} NaN\n"
                       "t_latency_ns_sum 0\n"
                       "t_latency_ns_count 0\n"
                       "# HELP up_total Plain.\n"
                       "# TYPE up_total counter\n"
                       "up_total 0\n"
                       "# HELP cb_value From a callback.\n"
                       "# TYPE cb_value gauge\n"
                       "cb_value 1.25\n";
    char *text = render(m);
    CHECK(text != NULL && strcmp(text, want) == 0);
    if (text != NULL && strcmp(text, want) != 0) {
        fprintf(stderr, "got:\n%s\nwant:\n%s\n", text, want);
    }
    free(text);
    /* A callback counter never renders below what it rendered: 7, then 4 asked, 7 shown. */
    double cnt = 7.0;
    sdd_metric *cc = NULL;
    CHECK_OK(sdd_metrics_callback(m, SDD_METRIC_COUNTER, "cb_total", "Counted.", NULL, 0, cb, &cnt,
                                  &cc));
    char *seven = render(m);
    CHECK(seven != NULL && strstr(seven, "\ncb_total 7\n") != NULL);
    free(seven);
    cnt = 4.0;
    char *still = render(m);
    CHECK(still != NULL && strstr(still, "\ncb_total 7\n") != NULL);
    free(still);
    cnt = 9.0;
    char *nine = render(m);
    CHECK(nine != NULL && strstr(nine, "\ncb_total 9\n") != NULL);
    free(nine);
    CHECK_EQ(sdd_metric_counter_value(cc), 0); /* callbacks are not called for it */
    sdd_metrics_remove(m, cc);
    /* Removing the last series of a family removes the family. */
    sdd_metrics_remove(m, u);
    sdd_metrics_remove(m, a);
    cbv = 1e-7;
    text = render(m);
    CHECK(strstr(text, "up_total") == NULL);
    CHECK(strstr(text, "{stage=\"a\",node=\"n1\"}") == NULL);
    CHECK(strstr(text, "sddaq_test_events_total{stage=\"b\",node=\"n1\"} 0\n") != NULL);
    CHECK(strstr(text, "cb_value 1e-07\n") != NULL);
    free(text);
    sdd_metrics_remove(m, NULL);
    sdd_metrics_destroy(m);
    sdd_metrics_destroy(NULL);
}

static void test_registration_errors(void)
{
    sdd_metrics *m = NULL;
    CHECK_OK(sdd_metrics_create(&m));
    sdd_metric *x = NULL;
    struct sdd_label ok[] = {{"stage", "a"}};
    static const char *const bad_names[] = {"", "1abc", "a-b", "a b", "é", NULL};
    for (int i = 0; bad_names[i] != NULL; i++) {
        CHECK_EQ(sdd_metrics_counter(m, bad_names[i], "h", NULL, 0, &x), SDD_EINVAL);
    }
    CHECK_EQ(sdd_metrics_counter(m, NULL, "h", NULL, 0, &x), SDD_EINVAL);
    CHECK_EQ(sdd_metrics_counter(m, "a", "two\nlines", NULL, 0, &x), SDD_EINVAL);
    CHECK_EQ(sdd_metrics_counter(m, "a", NULL, NULL, 0, &x), SDD_EINVAL);
    static const char *const bad_labels[] = {"__x", "quantile", "le", "a-b", "a:b", "", "9a", NULL};
    for (int i = 0; bad_labels[i] != NULL; i++) {
        struct sdd_label l[] = {{bad_labels[i], "v"}};
        CHECK_EQ(sdd_metrics_counter(m, "a", "h", l, 1, &x), SDD_EINVAL);
    }
    struct sdd_label dup[] = {{"stage", "a"}, {"stage", "b"}};
    CHECK_EQ(sdd_metrics_counter(m, "a", "h", dup, 2, &x), SDD_EINVAL);
    struct sdd_label nullv[] = {{"stage", NULL}};
    CHECK_EQ(sdd_metrics_counter(m, "a", "h", nullv, 1, &x), SDD_EINVAL);
    struct sdd_label many[SDD_METRIC_MAX_LABELS + 1];
    char names[SDD_METRIC_MAX_LABELS + 1][8];
    for (int i = 0; i <= SDD_METRIC_MAX_LABELS; i++) {
        snprintf(names[i], sizeof(names[i]), "l%d", i);
        many[i] = (struct sdd_label){names[i], "v"};
    }
    CHECK_EQ(sdd_metrics_counter(m, "a", "h", many, SDD_METRIC_MAX_LABELS + 1, &x), SDD_EINVAL);
    CHECK_OK(sdd_metrics_counter(m, "a", "h", many, SDD_METRIC_MAX_LABELS, &x));
    CHECK_OK(sdd_metrics_counter(m, "a", "h", ok, 1, &x));
    CHECK_EQ(sdd_metrics_counter(m, "a", "h", ok, 1, &x), SDD_EBUSY);
    CHECK_EQ(sdd_metrics_gauge(m, "a", "h", NULL, 0, &x), SDD_EINVAL);    /* other type */
    CHECK_EQ(sdd_metrics_counter(m, "a", "h2", NULL, 0, &x), SDD_EINVAL); /* other help */
    CHECK_EQ(sdd_metrics_summary(m, "s", "h", NULL, 0, 0.0, &x), SDD_EINVAL);
    CHECK_EQ(sdd_metrics_callback(m, SDD_METRIC_SUMMARY, "c", "h", NULL, 0, cb, NULL, &x),
             SDD_EINVAL);
    CHECK_EQ(sdd_metrics_callback(m, SDD_METRIC_GAUGE, "c", "h", NULL, 0, NULL, NULL, &x),
             SDD_EINVAL);
    /* Nothing refused left a trace. */
    char *text = render(m);
    CHECK(strstr(text, "# TYPE a counter\n") != NULL);
    CHECK(strstr(text, "# HELP s ") == NULL && strstr(text, "# HELP c ") == NULL);
    CHECK(
        strstr(text,
               "a{l0=\"v\",l1=\"v\",l2=\"v\",l3=\"v\",l4=\"v\",l5=\"v\",l6=\"v\",l7=\"v\"} 0\n") !=
        NULL);
    free(text);
    sdd_metrics_destroy(m);
}

static void test_stage_set(void)
{
    sdd_metrics *m = NULL;
    CHECK_OK(sdd_metrics_create(&m));
    struct sdd_stage_metrics sm, again;
    CHECK_OK(sdd_stage_metrics_register(m, "bu", "bu0", "local", &sm));
    CHECK_EQ(sdd_stage_metrics_register(m, "bu", "bu0", "local", &again), SDD_EBUSY);
    CHECK_EQ(sdd_stage_metrics_register(m, "b-u", "bu1", "local", &again), SDD_EINVAL);
    sdd_metric_add(sm.events_out, 42);
    sdd_metric_set(sm.credits, 16);
    sdd_hist h;
    sdd_hist_init(&h);
    sdd_hist_record_n(&h, 20, 4); /* 20 ns -> 2e-08 s */
    sdd_metric_publish(sm.latency, &h);
    char *text = render(m);
    static const char *const want[] = {
        "# TYPE sddaq_bu_events_in_total counter\n",
        "sddaq_bu_events_out_total{stage=\"bu0\",node=\"local\"} 42\n",
        "sddaq_bu_bytes_in_total{stage=\"bu0\",node=\"local\"} 0\n",
        "sddaq_bu_bytes_out_total{stage=\"bu0\",node=\"local\"} 0\n",
        "sddaq_bu_dropped_total{stage=\"bu0\",node=\"local\"} 0\n",
        "sddaq_bu_errors_total{stage=\"bu0\",node=\"local\"} 0\n",
        "# TYPE sddaq_bu_queue_depth_items gauge\n",
        "sddaq_bu_credits_available{stage=\"bu0\",node=\"local\"} 16\n",
        "# TYPE sddaq_bu_latency_seconds summary\n",
        "sddaq_bu_latency_seconds{stage=\"bu0\",node=\"local\",quantile=\"0.99\"} 2e-08\n",
        "sddaq_bu_latency_seconds_sum{stage=\"bu0\",node=\"local\"} 8e-08\n",
        "sddaq_bu_latency_seconds_count{stage=\"bu0\",node=\"local\"} 4\n",
        NULL};
    for (int i = 0; want[i] != NULL; i++) {
        CHECK(strstr(text, want[i]) != NULL);
        if (strstr(text, want[i]) == NULL) {
            fprintf(stderr, "missing: %s", want[i]);
        }
    }
    free(text);
    sdd_stage_metrics_remove(m, &sm);
    CHECK(sm.events_in == NULL && sm.latency == NULL);
    text = render(m);
    CHECK_EQ(strlen(text), 0);
    free(text);
    sdd_metrics_destroy(m);
}

/* ---- Concurrency -------------------------------------------------------------------------- */

#define WORKERS   3
#define ITERS     200000
#define PUBLISHES 3000

struct shared {
    sdd_metric *counter, *gauge, *summary;
    atomic_int running;
};

static void *adder(void *arg)
{
    struct shared *sh = arg;
    for (int i = 0; i < ITERS; i++) {
        sdd_metric_add(sh->counter, 1);
        sdd_metric_gauge_add(sh->gauge, 1.0);
    }
    atomic_fetch_sub(&sh->running, 1);
    return NULL;
}

/* Snapshot k holds k samples of value k: count k, sum k*k, every quantile k. A torn read
 * would mix two snapshots and break one of those equalities. */
static void *publisher(void *arg)
{
    struct shared *sh = arg;
    static sdd_hist h;
    for (uint64_t k = 1; k <= PUBLISHES; k++) {
        sdd_hist_reset(&h);
        sdd_hist_record_n(&h, k, k);
        sdd_metric_publish(sh->summary, &h);
    }
    atomic_fetch_sub(&sh->running, 1);
    return NULL;
}

static uint64_t value_after(const char *text, const char *prefix)
{
    const char *p = strstr(text, prefix);
    return p != NULL ? strtoull(p + strlen(prefix), NULL, 10) : UINT64_MAX;
}

static void test_concurrent(void)
{
    sdd_metrics *m = NULL;
    CHECK_OK(sdd_metrics_create(&m));
    struct shared sh;
    CHECK_OK(sdd_metrics_counter(m, "c_total", "c", NULL, 0, &sh.counter));
    CHECK_OK(sdd_metrics_gauge(m, "g", "g", NULL, 0, &sh.gauge));
    CHECK_OK(sdd_metrics_summary(m, "s", "s", NULL, 0, 1.0, &sh.summary));
    atomic_init(&sh.running, WORKERS + 1);
    pthread_t th[WORKERS + 1];
    for (int i = 0; i < WORKERS; i++) {
        pthread_create(&th[i], NULL, adder, &sh);
    }
    pthread_create(&th[WORKERS], NULL, publisher, &sh);
    uint64_t last = 0, renders = 0, torn = 0, backwards = 0, extra_series = 0;
    bool more = true;
    while (more) {
        more = atomic_load(&sh.running) > 0; /* one last render after everyone finished */
        char *text = render(m);
        renders++;
        uint64_t c = value_after(text, "\nc_total ");
        if (c < last || c == UINT64_MAX) {
            backwards++;
        }
        last = c;
        uint64_t n = value_after(text, "\ns_count ");
        uint64_t sum = value_after(text, "\ns_sum ");
        if (n > 0 && n != UINT64_MAX) {
            char q[64];
            snprintf(q, sizeof(q), "\ns{quantile=\"0.99\"} %" PRIu64 "\n", n);
            if (sum != n * n || strstr(text, q) == NULL) {
                torn++;
                fprintf(stderr, "torn snapshot: count %" PRIu64 " sum %" PRIu64 "\n%s", n, sum,
                        text);
            }
        }
        extra_series += strstr(text, "# TYPE s summary") == NULL;
        free(text);
    }
    for (int i = 0; i <= WORKERS; i++) {
        pthread_join(th[i], NULL);
    }
    CHECK(renders >= 1);
    CHECK_EQ(backwards, 0);
    CHECK_EQ(torn, 0);
    CHECK_EQ(extra_series, 0);
    CHECK_EQ(last, (uint64_t)WORKERS * ITERS);
    CHECK_EQ(sdd_metric_counter_value(sh.counter), (uint64_t)WORKERS * ITERS);
    CHECK(sdd_metric_gauge_value(sh.gauge) == (double)WORKERS * ITERS);
    char *text = render(m);
    CHECK_EQ(value_after(text, "\ns_count "), PUBLISHES);
    free(text);
    printf("concurrent: %" PRIu64 " renders while updating\n", renders);
    sdd_metrics_destroy(m);
}

int main(void)
{
    test_exact_text();
    test_registration_errors();
    test_stage_set();
    test_concurrent();
    return check_finish();
}
