/* The metrics registry: families (name, help, type) each with a list of series (label set,
 * value). Values are atomics that data-path threads update without locks; a summary's values
 * sit behind a sequence lock so a render reads one whole snapshot. The list structure is
 * guarded by one mutex, taken by registration, removal and rendering only. */
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sbuf.h"
#include "sddaq/metrics.h"

static const double quantiles[SDD_METRIC_QUANTILES] = {0.5, 0.9, 0.99, 0.999};
static const char *const quantile_text[SDD_METRIC_QUANTILES] = {"0.5", "0.9", "0.99", "0.999"};

struct family {
    char *name, *help;
    sdd_metric_type type;
    struct sdd_metric *first, *last;
    struct family *next;
};

struct sdd_metric {
    struct family *fam;
    struct sdd_metric *next;
    char *labels; /* rendered and escaped: stage="a",node="b"; "" without labels */
    double (*fn)(void *arg);
    void *arg;
    double scale;
    _Atomic uint64_t value; /* counter, or the bits of a gauge's double */
    /* Summary snapshot: seq is odd while a publish is under way. */
    _Atomic uint64_t seq;
    _Atomic uint64_t count, sum;
    _Atomic uint64_t q[SDD_METRIC_QUANTILES];
};

struct sdd_metrics {
    pthread_mutex_t lock;
    struct family *first, *last;
};

sdd_err sdd_metrics_create(sdd_metrics **out)
{
    sdd_metrics *m = calloc(1, sizeof(*m));
    if (m == NULL) {
        return SDD_ENOMEM;
    }
    pthread_mutex_init(&m->lock, NULL);
    *out = m;
    return SDD_OK;
}

static void free_metric(sdd_metric *s)
{
    free(s->labels);
    free(s);
}

static void free_family(struct family *f)
{
    for (sdd_metric *s = f->first, *next; s != NULL; s = next) {
        next = s->next;
        free_metric(s);
    }
    free(f->name);
    free(f->help);
    free(f);
}

void sdd_metrics_destroy(sdd_metrics *m)
{
    if (m == NULL) {
        return;
    }
    for (struct family *f = m->first, *next; f != NULL; f = next) {
        next = f->next;
        free_family(f);
    }
    pthread_mutex_destroy(&m->lock);
    free(m);
}

/* ---- Text building ----------------------------------------------------------------------- */

/* Escape for the exposition format: backslash and newline always, double quote in label
 * values only. */
static void put_escaped(struct sbuf *b, const char *s, bool quote)
{
    for (; *s != '\0'; s++) {
        if (*s == '\\') {
            sbuf_put(b, "\\\\");
        } else if (*s == '\n') {
            sbuf_put(b, "\\n");
        } else if (*s == '"' && quote) {
            sbuf_put(b, "\\\"");
        } else {
            sbuf_put(b, "%c", *s);
        }
    }
}

/* Go's ParseFloat reads what we write: integers plainly, others in the shortest %g that
 * reads back exactly; NaN and the infinities by name. */
static void put_double(struct sbuf *b, double v)
{
    if (isnan(v)) {
        sbuf_put(b, "NaN");
        return;
    }
    if (isinf(v)) {
        sbuf_put(b, v > 0 ? "+Inf" : "-Inf");
        return;
    }
    if (v == floor(v) && fabs(v) < 1e15) {
        sbuf_put(b, "%.0f", v); /* integers in full: 9000000, not 9e+06 */
        return;
    }
    char tmp[40];
    for (int prec = 6; prec <= 17; prec++) {
        snprintf(tmp, sizeof(tmp), "%.*g", prec, v);
        if (strtod(tmp, NULL) == v) {
            break;
        }
    }
    sbuf_put(b, "%s", tmp);
}

/* ---- Registration ------------------------------------------------------------------------ */

static bool valid_metric_name(const char *s)
{
    if (s == NULL || *s == '\0' || (*s >= '0' && *s <= '9')) {
        return false;
    }
    for (; *s != '\0'; s++) {
        char c = *s;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == ':')) {
            return false;
        }
    }
    return true;
}

static bool valid_label_name(const char *s)
{
    if (s == NULL || strchr(s, ':') != NULL || strncmp(s, "__", 2) == 0 ||
        strcmp(s, "quantile") == 0 || strcmp(s, "le") == 0) {
        return false;
    }
    return valid_metric_name(s);
}

/* Build the series completely (scale, callback) before linking it in: a render may run as
 * soon as the mutex is released. */
static sdd_err add_series(sdd_metrics *m, sdd_metric_type type, const char *name, const char *help,
                          const struct sdd_label *labels, size_t n, double scale,
                          double (*fn)(void *arg), void *arg, sdd_metric **out)
{
    if (m == NULL || out == NULL || !valid_metric_name(name) || help == NULL ||
        strchr(help, '\n') != NULL || n > SDD_METRIC_MAX_LABELS || (n > 0 && labels == NULL)) {
        return SDD_EINVAL;
    }
    struct sbuf lb = {malloc(64), 0, 64, false};
    if (lb.p == NULL) {
        return SDD_ENOMEM;
    }
    lb.p[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        if (!valid_label_name(labels[i].name) || labels[i].value == NULL) {
            free(lb.p);
            return SDD_EINVAL;
        }
        for (size_t j = 0; j < i; j++) {
            if (strcmp(labels[j].name, labels[i].name) == 0) {
                free(lb.p);
                return SDD_EINVAL;
            }
        }
        sbuf_put(&lb, "%s%s=\"", i > 0 ? "," : "", labels[i].name);
        put_escaped(&lb, labels[i].value, true);
        sbuf_put(&lb, "\"");
    }
    sdd_metric *s = calloc(1, sizeof(*s));
    if (lb.failed || s == NULL) {
        free(lb.p);
        free(s);
        return SDD_ENOMEM;
    }
    s->labels = lb.p;
    s->scale = scale;
    s->fn = fn;
    s->arg = arg;
    sdd_err err = SDD_OK;
    pthread_mutex_lock(&m->lock);
    struct family *f = m->first;
    while (f != NULL && strcmp(f->name, name) != 0) {
        f = f->next;
    }
    if (f != NULL) {
        if (f->type != type || strcmp(f->help, help) != 0) {
            err = SDD_EINVAL;
            goto out_unlock;
        }
        for (sdd_metric *o = f->first; o != NULL; o = o->next) {
            if (strcmp(o->labels, s->labels) == 0) {
                err = SDD_EBUSY;
                goto out_unlock;
            }
        }
    } else {
        f = calloc(1, sizeof(*f));
        if (f == NULL || (f->name = strdup(name)) == NULL || (f->help = strdup(help)) == NULL) {
            if (f != NULL) {
                free(f->name);
                free(f);
            }
            err = SDD_ENOMEM;
            goto out_unlock;
        }
        f->type = type;
        if (m->last != NULL) {
            m->last->next = f;
        } else {
            m->first = f;
        }
        m->last = f;
    }
    s->fam = f;
    if (f->last != NULL) {
        f->last->next = s;
    } else {
        f->first = s;
    }
    f->last = s;
out_unlock:
    pthread_mutex_unlock(&m->lock);
    if (err != SDD_OK) {
        free_metric(s);
        return err;
    }
    *out = s;
    return SDD_OK;
}

sdd_err sdd_metrics_counter(sdd_metrics *m, const char *name, const char *help,
                            const struct sdd_label *labels, size_t n, sdd_metric **out)
{
    return add_series(m, SDD_METRIC_COUNTER, name, help, labels, n, 1.0, NULL, NULL, out);
}

sdd_err sdd_metrics_gauge(sdd_metrics *m, const char *name, const char *help,
                          const struct sdd_label *labels, size_t n, sdd_metric **out)
{
    return add_series(m, SDD_METRIC_GAUGE, name, help, labels, n, 1.0, NULL, NULL, out);
}

sdd_err sdd_metrics_summary(sdd_metrics *m, const char *name, const char *help,
                            const struct sdd_label *labels, size_t n, double scale,
                            sdd_metric **out)
{
    if (!isfinite(scale) || scale <= 0) {
        return SDD_EINVAL;
    }
    return add_series(m, SDD_METRIC_SUMMARY, name, help, labels, n, scale, NULL, NULL, out);
}

sdd_err sdd_metrics_callback(sdd_metrics *m, sdd_metric_type type, const char *name,
                             const char *help, const struct sdd_label *labels, size_t n,
                             double (*fn)(void *arg), void *arg, sdd_metric **out)
{
    if (fn == NULL || (type != SDD_METRIC_COUNTER && type != SDD_METRIC_GAUGE)) {
        return SDD_EINVAL;
    }
    return add_series(m, type, name, help, labels, n, 1.0, fn, arg, out);
}

void sdd_metrics_remove(sdd_metrics *m, sdd_metric *metric)
{
    if (m == NULL || metric == NULL) {
        return;
    }
    pthread_mutex_lock(&m->lock);
    struct family *f = metric->fam, *pf = NULL;
    sdd_metric *prev = NULL;
    for (sdd_metric *s = f->first; s != NULL; prev = s, s = s->next) {
        if (s == metric) {
            if (prev != NULL) {
                prev->next = s->next;
            } else {
                f->first = s->next;
            }
            if (f->last == s) {
                f->last = prev;
            }
            free_metric(s);
            break;
        }
    }
    if (f->first == NULL) {
        for (struct family *g = m->first; g != NULL; pf = g, g = g->next) {
            if (g == f) {
                if (pf != NULL) {
                    pf->next = g->next;
                } else {
                    m->first = g->next;
                }
                if (m->last == g) {
                    m->last = pf;
                }
                free_family(g);
                break;
            }
        }
    }
    pthread_mutex_unlock(&m->lock);
}

/* ---- Updates (lock-free) ----------------------------------------------------------------- */

void sdd_metric_add(sdd_metric *c, uint64_t n)
{
    if (c != NULL && c->fam->type == SDD_METRIC_COUNTER) {
        atomic_fetch_add_explicit(&c->value, n, memory_order_relaxed);
    }
}

static uint64_t bits_of(double v)
{
    uint64_t u;
    memcpy(&u, &v, sizeof(u));
    return u;
}

static double double_of(uint64_t u)
{
    double v;
    memcpy(&v, &u, sizeof(v));
    return v;
}

void sdd_metric_set(sdd_metric *g, double v)
{
    if (g != NULL && g->fam->type == SDD_METRIC_GAUGE) {
        atomic_store_explicit(&g->value, bits_of(v), memory_order_relaxed);
    }
}

void sdd_metric_gauge_add(sdd_metric *g, double d)
{
    if (g == NULL || g->fam->type != SDD_METRIC_GAUGE) {
        return;
    }
    uint64_t old = atomic_load_explicit(&g->value, memory_order_relaxed);
    while (!atomic_compare_exchange_weak_explicit(&g->value, &old, bits_of(double_of(old) + d),
                                                  memory_order_relaxed, memory_order_relaxed)) {
    }
}

uint64_t sdd_metric_counter_value(const sdd_metric *c)
{
    return c != NULL && c->fam->type == SDD_METRIC_COUNTER && c->fn == NULL
               ? atomic_load_explicit(&((sdd_metric *)c)->value, memory_order_relaxed)
               : 0;
}

double sdd_metric_gauge_value(const sdd_metric *g)
{
    return g != NULL && g->fam->type == SDD_METRIC_GAUGE
               ? double_of(atomic_load_explicit(&((sdd_metric *)g)->value, memory_order_relaxed))
               : 0.0;
}

void sdd_metric_publish(sdd_metric *s, const sdd_hist *h)
{
    if (s == NULL || h == NULL || s->fam->type != SDD_METRIC_SUMMARY) {
        return;
    }
    uint64_t q[SDD_METRIC_QUANTILES];
    for (int i = 0; i < SDD_METRIC_QUANTILES; i++) {
        q[i] = sdd_hist_quantile(h, quantiles[i]);
    }
    uint64_t seq = atomic_load_explicit(&s->seq, memory_order_relaxed);
    atomic_store_explicit(&s->seq, seq + 1, memory_order_relaxed);
    /* Pairs with the acquire fence in read_summary: a reader that sees any store below also
     * sees seq odd (or changed) on its second read. */
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(&s->count, h->count, memory_order_relaxed);
    atomic_store_explicit(&s->sum, h->sum, memory_order_relaxed);
    for (int i = 0; i < SDD_METRIC_QUANTILES; i++) {
        atomic_store_explicit(&s->q[i], q[i], memory_order_relaxed);
    }
    /* Pairs with the acquire load of seq in read_summary. */
    atomic_store_explicit(&s->seq, seq + 2, memory_order_release);
}

/* Read one whole snapshot. A publish takes a few stores, so retries are rare; after many (a
 * publisher descheduled mid-write) yield, and give up after a bound with the last read. */
static void read_summary(sdd_metric *s, uint64_t *count, uint64_t *sum, uint64_t *q)
{
    for (int tries = 0; tries < 100000; tries++) {
        /* Pairs with the release store that ends a publish. */
        uint64_t s1 = atomic_load_explicit(&s->seq, memory_order_acquire);
        *count = atomic_load_explicit(&s->count, memory_order_relaxed);
        *sum = atomic_load_explicit(&s->sum, memory_order_relaxed);
        for (int i = 0; i < SDD_METRIC_QUANTILES; i++) {
            q[i] = atomic_load_explicit(&s->q[i], memory_order_relaxed);
        }
        /* Pairs with the release fence after a publish's first seq store. */
        atomic_thread_fence(memory_order_acquire);
        uint64_t s2 = atomic_load_explicit(&s->seq, memory_order_relaxed);
        if (s1 == s2 && (s1 & 1) == 0) {
            return;
        }
        if (tries > 64) {
            sched_yield();
        }
    }
}

/* ---- Rendering --------------------------------------------------------------------------- */

static const char *type_name(sdd_metric_type t)
{
    return t == SDD_METRIC_COUNTER ? "counter" : t == SDD_METRIC_GAUGE ? "gauge" : "summary";
}

/* name{labels[,extra]} or name{extra} or name */
static void put_series(struct sbuf *b, const char *name, const char *suffix, const char *labels,
                       const char *extra)
{
    bool l = labels[0] != '\0', e = extra != NULL;
    sbuf_put(b, "%s%s", name, suffix);
    if (l || e) {
        sbuf_put(b, "{%s%s%s}", labels, l && e ? "," : "", e ? extra : "");
    }
    sbuf_put(b, " ");
}

sdd_err sdd_metrics_render(sdd_metrics *m, char **out, size_t *len)
{
    struct sbuf b = {malloc(4096), 0, 4096, false};
    if (b.p == NULL) {
        return SDD_ENOMEM;
    }
    b.p[0] = '\0';
    pthread_mutex_lock(&m->lock);
    for (struct family *f = m->first; f != NULL; f = f->next) {
        sbuf_put(&b, "# HELP %s ", f->name);
        put_escaped(&b, f->help, false);
        sbuf_put(&b, "\n# TYPE %s %s\n", f->name, type_name(f->type));
        for (sdd_metric *s = f->first; s != NULL; s = s->next) {
            if (f->type == SDD_METRIC_SUMMARY) {
                uint64_t count = 0, sum = 0, q[SDD_METRIC_QUANTILES] = {0};
                read_summary(s, &count, &sum, q);
                for (int i = 0; i < SDD_METRIC_QUANTILES; i++) {
                    char extra[32];
                    snprintf(extra, sizeof(extra), "quantile=\"%s\"", quantile_text[i]);
                    put_series(&b, f->name, "", s->labels, extra);
                    put_double(&b, count > 0 ? (double)q[i] * s->scale : NAN);
                    sbuf_put(&b, "\n");
                }
                put_series(&b, f->name, "_sum", s->labels, NULL);
                put_double(&b, (double)sum * s->scale);
                sbuf_put(&b, "\n");
                put_series(&b, f->name, "_count", s->labels, NULL);
                sbuf_put(&b, "%llu\n", (unsigned long long)count);
            } else if (s->fn != NULL) {
                double v = s->fn(s->arg);
                put_series(&b, f->name, "", s->labels, NULL);
                if (f->type == SDD_METRIC_COUNTER && isfinite(v) && v >= 0 && v < 1.8e19) {
                    /* A counter never shows less than it did (a fall reads as a restart); the
                     * mark lives in value, unused by callbacks, and renders hold the lock. */
                    uint64_t now = (uint64_t)v;
                    uint64_t high = atomic_load_explicit(&s->value, memory_order_relaxed);
                    high = now > high ? now : high;
                    atomic_store_explicit(&s->value, high, memory_order_relaxed);
                    sbuf_put(&b, "%llu\n", (unsigned long long)high);
                } else {
                    put_double(&b, v);
                    sbuf_put(&b, "\n");
                }
            } else if (f->type == SDD_METRIC_COUNTER) {
                put_series(&b, f->name, "", s->labels, NULL);
                sbuf_put(&b, "%llu\n",
                         (unsigned long long)atomic_load_explicit(&s->value, memory_order_relaxed));
            } else {
                put_series(&b, f->name, "", s->labels, NULL);
                put_double(&b, double_of(atomic_load_explicit(&s->value, memory_order_relaxed)));
                sbuf_put(&b, "\n");
            }
        }
    }
    pthread_mutex_unlock(&m->lock);
    if (b.failed) {
        free(b.p);
        return SDD_ENOMEM;
    }
    *out = b.p;
    if (len != NULL) {
        *len = b.len;
    }
    return SDD_OK;
}

/* ---- The standard per-stage set ---------------------------------------------------------- */

sdd_err sdd_stage_metrics_register(sdd_metrics *m, const char *type, const char *stage,
                                   const char *node, struct sdd_stage_metrics *out)
{
    struct sdd_label labels[2] = {{"stage", stage}, {"node", node}};
    struct sdd_stage_metrics sm = {0};
    static const struct {
        const char *thing, *help;
        sdd_metric_type type;
        size_t off;
    } set[] = {
        {"events_in_total", "Events (or frames, fragments) the stage received.", SDD_METRIC_COUNTER,
         offsetof(struct sdd_stage_metrics, events_in)},
        {"events_out_total", "Events the stage passed on.", SDD_METRIC_COUNTER,
         offsetof(struct sdd_stage_metrics, events_out)},
        {"bytes_in_total", "Payload bytes the stage received.", SDD_METRIC_COUNTER,
         offsetof(struct sdd_stage_metrics, bytes_in)},
        {"bytes_out_total", "Payload bytes the stage passed on or wrote.", SDD_METRIC_COUNTER,
         offsetof(struct sdd_stage_metrics, bytes_out)},
        {"dropped_total", "Events or packets lost and counted (never silent).", SDD_METRIC_COUNTER,
         offsetof(struct sdd_stage_metrics, dropped)},
        {"errors_total", "Corrupt input, failed writes and other errors.", SDD_METRIC_COUNTER,
         offsetof(struct sdd_stage_metrics, errors)},
        {"queue_depth_items", "Items waiting in the stage's input queue.", SDD_METRIC_GAUGE,
         offsetof(struct sdd_stage_metrics, queue_depth)},
        {"credits_available", "Credits the stage may still spend towards its peers.",
         SDD_METRIC_GAUGE, offsetof(struct sdd_stage_metrics, credits)},
        {"latency_seconds", "Per-event latency through the stage.", SDD_METRIC_SUMMARY,
         offsetof(struct sdd_stage_metrics, latency)},
    };
    if (m == NULL || type == NULL || stage == NULL || node == NULL || out == NULL) {
        return SDD_EINVAL;
    }
    sdd_err err = SDD_OK;
    for (size_t i = 0; i < sizeof(set) / sizeof(set[0]) && err == SDD_OK; i++) {
        char name[128];
        int n = snprintf(name, sizeof(name), "sddaq_%s_%s", type, set[i].thing);
        if (n < 0 || (size_t)n >= sizeof(name)) {
            err = SDD_EINVAL;
            break;
        }
        sdd_metric **slot = (sdd_metric **)((char *)&sm + set[i].off);
        if (set[i].type == SDD_METRIC_SUMMARY) {
            err = add_series(m, set[i].type, name, set[i].help, labels, 2, 1e-9, NULL, NULL, slot);
        } else {
            err = add_series(m, set[i].type, name, set[i].help, labels, 2, 1.0, NULL, NULL, slot);
        }
    }
    if (err != SDD_OK) {
        sdd_stage_metrics_remove(m, &sm);
        return err;
    }
    *out = sm;
    return SDD_OK;
}

void sdd_stage_metrics_remove(sdd_metrics *m, struct sdd_stage_metrics *sm)
{
    if (sm == NULL) {
        return;
    }
    sdd_metric **all[] = {&sm->events_in,   &sm->events_out, &sm->bytes_in,
                          &sm->bytes_out,   &sm->dropped,    &sm->errors,
                          &sm->queue_depth, &sm->credits,    &sm->latency};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        sdd_metrics_remove(m, *all[i]);
        *all[i] = NULL;
    }
}
