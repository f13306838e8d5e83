/* Metrics registry: counters, gauges and latency summaries that stages register once and then
 * update from their data-path threads without locks, rendered in the Prometheus text
 * exposition format (version 0.0.4) for GET /metrics. docs/metrics.md lists the families sddaq
 * defines; names follow sddaq_<stage type>_<thing>_<unit>, counters end in _total, latencies
 * are in seconds, and every stage's series carry the labels stage="<name>" and node="<node>".
 *
 * Latency is exported as a Prometheus *summary* (quantiles 0.5, 0.9, 0.99, 0.999 plus _sum and
 * _count), not a histogram: sddaq's sdd_hist already keeps 1920 log-linear buckets with 1.6 %
 * accuracy, and its quantiles are what the run summary prints; a Prometheus histogram would
 * either ship all 1920 buckets per series per scrape or fold them into a dozen coarse `le`
 * bounds and lose that precision. The price: summary quantiles cannot be aggregated across
 * stages in PromQL (average them only as a rough view; _sum/_count give exact means).
 *
 * Threads: registration, removal and rendering take one mutex (control path). Updates
 * (sdd_metric_add, _set, _publish) are lock-free atomics, safe from any thread at any time
 * while the metric is registered; a summary has one publisher at a time. */
#ifndef SDDAQ_METRICS_H
#define SDDAQ_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "sddaq/api.h"
#include "sddaq/err.h"
#include "sddaq/hist.h"

typedef struct sdd_metrics sdd_metrics;
typedef struct sdd_metric sdd_metric;

typedef enum {
    SDD_METRIC_COUNTER = 0, /* monotonic uint64_t */
    SDD_METRIC_GAUGE,       /* double, up and down */
    SDD_METRIC_SUMMARY,     /* quantiles, sum and count from sdd_hist snapshots */
} sdd_metric_type;

/* One label; name [a-zA-Z_][a-zA-Z0-9_]*, not starting with "__", not "quantile" or "le".
 * Values are any text (escaped when rendered). */
struct sdd_label {
    const char *name;
    const char *value;
};

#define SDD_METRIC_MAX_LABELS 8
/* Quantiles a summary exports, in this order. */
#define SDD_METRIC_QUANTILES 4

/* A new, empty registry. Returns SDD_OK or SDD_ENOMEM. */
SDD_API sdd_err sdd_metrics_create(sdd_metrics **out);

/* Free the registry and every metric in it; no thread may use its metrics any more. NULL ok. */
SDD_API void sdd_metrics_destroy(sdd_metrics *m);

/* Register one series. name: [a-zA-Z_:][a-zA-Z0-9_:]*; help: one line of text (escaped when
 * rendered); labels: n of them (copied). A family (one name) has one type and one help text:
 * registering the name again with another type or help is SDD_EINVAL; the same name and the
 * same labels twice is SDD_EBUSY. *out is the handle, valid until removed or the registry is
 * destroyed. Returns SDD_OK, SDD_EINVAL (bad name, label, type or help), SDD_EBUSY, SDD_ENOMEM.
 * Series render in the order their families were first registered. */
SDD_API sdd_err sdd_metrics_counter(sdd_metrics *m, const char *name, const char *help,
                                    const struct sdd_label *labels, size_t n, sdd_metric **out);
SDD_API sdd_err sdd_metrics_gauge(sdd_metrics *m, const char *name, const char *help,
                                  const struct sdd_label *labels, size_t n, sdd_metric **out);
/* scale multiplies the published values when rendered: 1e-9 turns sdd_hist nanoseconds into
 * the seconds Prometheus expects. */
SDD_API sdd_err sdd_metrics_summary(sdd_metrics *m, const char *name, const char *help,
                                    const struct sdd_label *labels, size_t n, double scale,
                                    sdd_metric **out);

/* A gauge (or counter) whose value a callback computes at render time, for state that already
 * lives elsewhere (a ring's fill level, the run state). fn runs on the rendering thread with
 * the registry's mutex held: it must be thread-safe, quick, and must not call the registry.
 * For a counter the value is truncated to an integer and never renders below what it rendered
 * before (a counter that falls reads as a restart to Prometheus). Same returns as above. */
SDD_API sdd_err sdd_metrics_callback(sdd_metrics *m, sdd_metric_type type, const char *name,
                                     const char *help, const struct sdd_label *labels, size_t n,
                                     double (*fn)(void *arg), void *arg, sdd_metric **out);

/* Remove one series (and its family when it was the last). Stop every thread that updates it
 * first. NULL is fine. */
SDD_API void sdd_metrics_remove(sdd_metrics *m, sdd_metric *metric);

/* Counter += n (relaxed atomic add; wraps at 2^64). Any thread. Ignored for other types. */
SDD_API void sdd_metric_add(sdd_metric *c, uint64_t n);

/* Gauge = v, or gauge += d (atomic; a CAS loop for add). Any thread. */
SDD_API void sdd_metric_set(sdd_metric *g, double v);
SDD_API void sdd_metric_gauge_add(sdd_metric *g, double d);

/* Current value of a counter or gauge (callbacks not called: 0). Any thread. */
SDD_API uint64_t sdd_metric_counter_value(const sdd_metric *c);
SDD_API double sdd_metric_gauge_value(const sdd_metric *g);

/* Publish a snapshot of a latency histogram to a summary: count, sum and the quantiles are
 * computed here (a few microseconds: call it from a stats tick, not per event) and stored
 * under a sequence lock so a render never sees half of one snapshot. h should be cumulative
 * (all samples since the start), so that _sum and _count only grow, as Prometheus expects.
 * One publisher per summary at a time; h is only read. */
SDD_API void sdd_metric_publish(sdd_metric *s, const sdd_hist *h);

/* Render every series in the text exposition format into a new NUL-terminated string owned by
 * the caller (free()); len may be NULL. Returns SDD_OK or SDD_ENOMEM. */
SDD_API sdd_err sdd_metrics_render(sdd_metrics *m, char **out, size_t *len);

/* Content-Type of the rendered text, for HTTP. */
#define SDD_METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

/* The standard per-stage set of docs/metrics.md, registered under
 * sddaq_<type>_<thing>_<unit> with labels stage and node. Any pointer may be left NULL by
 * the caller afterwards; sdd_stage_metrics_remove() removes the whole set. */
struct sdd_stage_metrics {
    sdd_metric *events_in;   /* sddaq_<type>_events_in_total */
    sdd_metric *events_out;  /* sddaq_<type>_events_out_total */
    sdd_metric *bytes_in;    /* sddaq_<type>_bytes_in_total */
    sdd_metric *bytes_out;   /* sddaq_<type>_bytes_out_total */
    sdd_metric *dropped;     /* sddaq_<type>_dropped_total: counted losses */
    sdd_metric *errors;      /* sddaq_<type>_errors_total: corrupt input, failed writes */
    sdd_metric *queue_depth; /* sddaq_<type>_queue_depth_items: input queue fill (gauge) */
    sdd_metric *credits;     /* sddaq_<type>_credits_available (gauge) */
    sdd_metric *latency;     /* sddaq_<type>_latency_seconds (summary, from ns) */
};

/* Register the set for one stage. type: the stage type as the config spells it ("bu");
 * stage, node: label values. On failure nothing stays registered. Returns as
 * sdd_metrics_counter(). */
SDD_API sdd_err sdd_stage_metrics_register(sdd_metrics *m, const char *type, const char *stage,
                                           const char *node, struct sdd_stage_metrics *out);
SDD_API void sdd_stage_metrics_remove(sdd_metrics *m, struct sdd_stage_metrics *sm);

#endif
