/* Event-builder failure counters in /metrics, beside each ru and bu stage's standard set: an
 * operator alerts on a builder unit given up, a readout unit lost, events leaving incomplete or
 * a builder unit that fenced itself (docs/metrics.md, docs/evb.md "Leases and fencing"). */
#include "run_internal.h"

enum { RU_BU_FAILURES, RU_BULKS_RESENT };
enum {
    BU_RU_FAILURES,
    BU_INCOMPLETE,
    BU_LEASE_WAITS,
    BU_ROOM_WAITS,
    BU_BULKS_FENCED,
    BU_FENCED,
    BU_IN_DOUBT,
    BU_UNCOMMITTED
};

struct family {
    const char *name, *help;
    sdd_metric_type type;
};

static const struct family ru_families[RUN_EVB_RU_METRICS] = {
    [RU_BU_FAILURES] = {"sddaq_ru_bu_failures_total",
                        "Builder units this readout unit gave up for dead.", SDD_METRIC_COUNTER},
    [RU_BULKS_RESENT] = {"sddaq_ru_bulks_resent_total",
                         "Bulks sent again to a surviving builder unit.", SDD_METRIC_COUNTER},
};

static const struct family bu_families[RUN_EVB_BU_METRICS] = {
    [BU_RU_FAILURES] = {"sddaq_bu_ru_failures_total",
                        "Readout units this builder unit declared dead.", SDD_METRIC_COUNTER},
    [BU_INCOMPLETE] = {"sddaq_bu_events_incomplete_total", "Events built with a source missing.",
                       SDD_METRIC_COUNTER},
    [BU_LEASE_WAITS] = {"sddaq_bu_lease_waits_total",
                        "Built bulks that waited for a readout unit's lease.", SDD_METRIC_COUNTER},
    [BU_ROOM_WAITS] = {"sddaq_bu_room_waits_total",
                       "Built bulks that waited for event buffers the stages behind held.",
                       SDD_METRIC_COUNTER},
    [BU_BULKS_FENCED] = {"sddaq_bu_bulks_fenced_total",
                         "Bulks dropped when this builder unit fenced itself.", SDD_METRIC_COUNTER},
    [BU_FENCED] = {"sddaq_bu_fenced", "1 once this builder unit fenced itself (its run ended).",
                   SDD_METRIC_GAUGE},
    [BU_IN_DOUBT] = {"sddaq_bu_bulks_in_doubt_total",
                     "Bulks delivered across a stall: maybe built again elsewhere (RESENT).",
                     SDD_METRIC_COUNTER},
    [BU_UNCOMMITTED] = {"sddaq_bu_events_uncommitted_total",
                        "Events delivered, never committed, when this builder unit fenced: "
                        "dropped unwritten, built again by the survivors.",
                        SDD_METRIC_COUNTER},
};

static sdd_err add_all(sdd_metrics *m, const struct run_stage *s, const struct family *f, size_t nf,
                       sdd_metric **out)
{
    struct sdd_label labels[2] = {{"stage", s->cfg->name}, {"node", s->cfg->node}};
    sdd_err err = SDD_OK;
    for (size_t i = 0; i < nf && err == SDD_OK; i++) {
        err = f[i].type == SDD_METRIC_GAUGE
                  ? sdd_metrics_gauge(m, f[i].name, f[i].help, labels, 2, &out[i])
                  : sdd_metrics_counter(m, f[i].name, f[i].help, labels, 2, &out[i]);
    }
    return err;
}

sdd_err run_evb_metrics_register(struct sdd_run *r, struct run_evb_node *e)
{
    sdd_err err = SDD_OK;
    if (e->ru != NULL) {
        err = add_all(r->metrics, e->ru, ru_families, RUN_EVB_RU_METRICS, e->xm.ru);
    }
    if (err == SDD_OK && e->bu != NULL) {
        err = add_all(r->metrics, e->bu, bu_families, RUN_EVB_BU_METRICS, e->xm.bu);
    }
    return err;
}

void run_evb_metrics_update(struct run_evb_node *e, const struct sdd_evb_stats *now,
                            const struct sdd_evb_stats *was)
{
    sdd_metric **ru = e->xm.ru, **bu = e->xm.bu;
    if (e->ru != NULL) {
        sdd_metric_add(ru[RU_BU_FAILURES], now->bu_failures - was->bu_failures);
        sdd_metric_add(ru[RU_BULKS_RESENT], now->bulks_resent - was->bulks_resent);
    }
    if (e->bu != NULL) {
        sdd_metric_add(bu[BU_RU_FAILURES], now->ru_failures - was->ru_failures);
        sdd_metric_add(bu[BU_INCOMPLETE], now->events_incomplete - was->events_incomplete);
        sdd_metric_add(bu[BU_LEASE_WAITS], now->lease_waits - was->lease_waits);
        sdd_metric_add(bu[BU_ROOM_WAITS], now->room_waits - was->room_waits);
        sdd_metric_add(bu[BU_BULKS_FENCED], now->bulks_fenced - was->bulks_fenced);
        sdd_metric_set(bu[BU_FENCED], now->fenced);
        sdd_metric_add(bu[BU_IN_DOUBT], now->bulks_in_doubt - was->bulks_in_doubt);
        sdd_metric_add(bu[BU_UNCOMMITTED], now->events_uncommitted - was->events_uncommitted);
    }
}
