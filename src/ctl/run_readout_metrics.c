/* A detector readout receiver's own counters in /metrics, beside its source stage's standard
 * set: packets lost, refused (by reason), duplicated, late, reordered, overrun or dropped by
 * the socket, frames delivered incomplete, and for NA62 the boards' ends of burst. They are
 * read from the receivers at each scrape, so they are live (docs/metrics.md "Readout"); a
 * source that feeds several readout units has a receiver for each, and its series sum them. */
#include <stddef.h>
#include <stdlib.h>

#include "run_internal.h"

#define FIELD(f) offsetof(struct sdd_ro_counters, f)

struct family {
    const char *name, *help;
    size_t field;
    sdd_metric_type type;
};

static const struct family families[] = {
    {"sddaq_source_datagrams_total", "Datagrams the receiver read.", FIELD(datagrams),
     SDD_METRIC_COUNTER},
    {"sddaq_source_packets_lost_total", "Packets that never arrived (sequence or frame gaps).",
     FIELD(lost), SDD_METRIC_COUNTER},
    {"sddaq_source_packets_duplicate_total", "Packets that arrived twice (the copy discarded).",
     FIELD(duplicate), SDD_METRIC_COUNTER},
    {"sddaq_source_packets_late_total", "Packets for a frame already closed without them.",
     FIELD(late), SDD_METRIC_COUNTER},
    {"sddaq_source_packets_reordered_total", "Packets that arrived after a later one.",
     FIELD(reordered), SDD_METRIC_COUNTER},
    {"sddaq_source_packets_overrun_total", "Packets discarded because no slot was free.",
     FIELD(overrun), SDD_METRIC_COUNTER},
    {"sddaq_source_kernel_drops_total", "Datagrams the socket dropped (receive buffer full).",
     FIELD(kernel_drops), SDD_METRIC_COUNTER},
    {"sddaq_source_frames_partial_total", "Frames delivered with packets missing.",
     FIELD(frames_partial), SDD_METRIC_COUNTER},
    {"sddaq_source_frames_dropped_total", "Frames closed incomplete and discarded.",
     FIELD(frames_dropped), SDD_METRIC_COUNTER},
    {"sddaq_source_end_of_burst_total", "NA62 end-of-burst packets received.", FIELD(end_of_burst),
     SDD_METRIC_COUNTER},
    {"sddaq_source_open_bursts", "NA62 boards whose burst has not ended yet.", FIELD(open_bursts),
     SDD_METRIC_GAUGE},
};

#define NFAMILIES    (sizeof(families) / sizeof(families[0]))
#define CORRUPT_HELP "Datagrams the parser refused, by reason."

/* One series: which receiver counter it shows. */
struct series {
    const struct run_ro_metrics *x;
    size_t field;
    sdd_metric *metric;
};

struct run_ro_metrics {
    sdd_metrics *m;
    size_t n;
    struct series s[NFAMILIES + SDD_RO_REASON_COUNT];
    /* The stage's receivers: one, or one per readout unit the source feeds. */
    const sdd_ro_rx **rx;
    unsigned nrx;
};

/* The receivers' sum. A packet counted lost that comes after all takes one off a receiver's
 * count; the registry keeps a counter from showing the fall. */
static double counter_of(void *arg)
{
    const struct series *s = arg;
    uint64_t sum = 0;
    for (unsigned i = 0; i < s->x->nrx; i++) {
        struct sdd_ro_counters c;
        sdd_ro_rx_counters(s->x->rx[i], &c);
        sum += *(const uint64_t *)((const char *)&c + s->field);
    }
    return (double)sum;
}

sdd_err run_ro_metrics_add(struct run_ro_metrics *x, const sdd_ro_rx *rx)
{
    const sdd_ro_rx **grown = realloc(x->rx, (x->nrx + 1) * sizeof(*grown));
    if (grown == NULL) {
        return SDD_ENOMEM;
    }
    grown[x->nrx++] = rx;
    x->rx = grown;
    return SDD_OK;
}

sdd_err run_ro_metrics_register(sdd_metrics *m, const struct run_stage *st, const sdd_ro_rx *rx,
                                struct run_ro_metrics **out)
{
    struct run_ro_metrics *x = calloc(1, sizeof(*x));
    if (x == NULL) {
        return SDD_ENOMEM;
    }
    x->m = m;
    sdd_err err = run_ro_metrics_add(x, rx);
    struct sdd_label labels[3] = {
        {"stage", st->cfg->name}, {"node", st->cfg->node}, {"reason", ""}};
    for (size_t i = 0; i < NFAMILIES && err == SDD_OK; i++) {
        struct series *s = &x->s[x->n];
        *s = (struct series){x, families[i].field, NULL};
        err = sdd_metrics_callback(m, families[i].type, families[i].name, families[i].help, labels,
                                   2, counter_of, s, &s->metric);
        x->n += err == SDD_OK;
    }
    /* Every reason but OK, so a dashboard sees the zeros too. */
    for (int r = SDD_RO_OK + 1; r < SDD_RO_REASON_COUNT && err == SDD_OK; r++) {
        struct series *s = &x->s[x->n];
        *s = (struct series){x, FIELD(corrupt_by) + (size_t)r * sizeof(uint64_t), NULL};
        labels[2].value = sdd_ro_reason_name((sdd_ro_reason)r);
        err = sdd_metrics_callback(m, SDD_METRIC_COUNTER, "sddaq_source_packets_corrupt_total",
                                   CORRUPT_HELP, labels, 3, counter_of, s, &s->metric);
        x->n += err == SDD_OK;
    }
    if (err != SDD_OK) {
        run_ro_metrics_remove(x);
        return err;
    }
    *out = x;
    return SDD_OK;
}

void run_ro_metrics_remove(struct run_ro_metrics *x)
{
    if (x == NULL) {
        return;
    }
    for (size_t i = 0; i < x->n; i++) {
        sdd_metrics_remove(x->m, x->s[i].metric);
    }
    free(x->rx);
    free(x);
}
