/* Topology config objects: creation with defaults, the append helpers for configs built in
 * code, resolution of values that depend on others (fill_defaults), lookups, enumeration
 * names, CPU lists and the diagnostic list. Parsing is in config_parse.c, checks across
 * entries in config_validate.c, YAML output in config_emit.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config_internal.h"

const char *const cfg_provider_names[] = {"auto", "tcp", "shm", NULL};
const char *const cfg_stage_type_names[] = {"source", "ru",       "bu", "process",
                                            "writer", "feedback", NULL};
const char *const cfg_source_kind_names[] = {
    "evb-emu", "emu-stream", "emu-jungfrau", "emu-na62", "udp", "hough-emu", NULL};
const char *const cfg_frag_dist_names[] = {"fixed", "uniform", "lognormal", NULL};
const char *const cfg_algo_names[] = {"none", "hough", "rich", "prescale", NULL};
const char *const cfg_writer_names[] = {"hdf5", "raw", "null", NULL};
const char *const cfg_transport_names[] = {"auto", "ring", "fabric", NULL};
const char *const cfg_frame_format_names[] = {"stream", "jungfrau", "na62", NULL};
const char *const cfg_frame_missing_names[] = {"drop", "pad", "partial", NULL};
const char *const cfg_rich_method_names[] = {"hist", "ptolemy", NULL};
const char *const cfg_rich_fit_names[] = {"taubin", "crawford", NULL};
const char *const cfg_off_on_names[] = {"off", "on", NULL};
/* In sdd_evb_transfer order. */
const char *const cfg_transfer_names[] = {"auto", "write", "read", NULL};

static const char *name_of(const char *const *names, size_t count, unsigned v)
{
    return v < count ? names[v] : "?";
}

#define NAME_COUNT(t) (sizeof(t) / sizeof(t[0]) - 1)

const char *sdd_stage_type_name(sdd_stage_type t)
{
    return name_of(cfg_stage_type_names, NAME_COUNT(cfg_stage_type_names), (unsigned)t);
}

const char *sdd_source_kind_name(sdd_source_kind k)
{
    return name_of(cfg_source_kind_names, NAME_COUNT(cfg_source_kind_names), (unsigned)k);
}

const char *sdd_algo_name(sdd_algo a)
{
    return name_of(cfg_algo_names, NAME_COUNT(cfg_algo_names), (unsigned)a);
}

const char *sdd_writer_format_name(sdd_writer_format f)
{
    return name_of(cfg_writer_names, NAME_COUNT(cfg_writer_names), (unsigned)f);
}

const char *sdd_link_transport_name(sdd_link_transport t)
{
    return name_of(cfg_transport_names, NAME_COUNT(cfg_transport_names), (unsigned)t);
}

const char *sdd_cfg_provider_name(sdd_cfg_provider p)
{
    return name_of(cfg_provider_names, NAME_COUNT(cfg_provider_names), (unsigned)p);
}

const char *sdd_frag_dist_name(sdd_frag_dist d)
{
    return name_of(cfg_frag_dist_names, NAME_COUNT(cfg_frag_dist_names), (unsigned)d);
}

void cfg_join_names(const char *const *names, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; names[i] != NULL && used < len; i++) {
        int n = snprintf(buf + used, len - used, "%s%s", i > 0 ? ", " : "", names[i]);
        if (n < 0) {
            break;
        }
        used += (size_t)n;
    }
}

/* ---- Diagnostics ------------------------------------------------------------------------- */

static char *vformat(const char *fmt, va_list ap) __attribute__((format(printf, 1, 0)));
static char *vformat(const char *fmt, va_list ap)
{
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n < 0) {
        return NULL;
    }
    char *s = malloc((size_t)n + 1);
    if (s != NULL) {
        vsnprintf(s, (size_t)n + 1, fmt, ap);
    }
    return s;
}

static char *format(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *format(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *s = vformat(fmt, ap);
    va_end(ap);
    return s;
}

void cfg_diag_vadd(struct sdd_config_diag *d, const char *file, uint32_t line, uint32_t col,
                   const char *key, const char *fmt, va_list ap)
{
    if (d == NULL) {
        return;
    }
    d->count++;
    if (d->stored >= SDD_CFG_DIAG_KEEP) {
        return;
    }
    if (d->errors == NULL) {
        d->errors = calloc(SDD_CFG_DIAG_KEEP, sizeof(d->errors[0]));
        if (d->errors == NULL) {
            d->no_memory = true;
            return;
        }
    }
    if (file == NULL) {
        file = "<input>";
    }
    if (key == NULL) {
        key = "";
    }
    struct sdd_config_error *e = &d->errors[d->stored];
    e->line = line;
    e->col = col;
    e->key = strdup(key);
    e->message = vformat(fmt, ap);
    if (e->key != NULL && e->message != NULL) {
        const char *sep = key[0] != '\0' ? ": " : "";
        if (line > 0) {
            e->text = format("%s:%u:%u: %s%s%s", file, line, col, key, sep, e->message);
        } else {
            e->text = format("%s: %s%s%s", file, key, sep, e->message);
        }
    }
    if (e->text == NULL) {
        free(e->key);
        free(e->message);
        memset(e, 0, sizeof(*e));
        d->no_memory = true;
        return;
    }
    d->stored++;
}

void cfg_diag_add(struct sdd_config_diag *d, const char *file, uint32_t line, uint32_t col,
                  const char *key, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    cfg_diag_vadd(d, file, line, col, key, fmt, ap);
    va_end(ap);
}

void sdd_config_diag_fini(struct sdd_config_diag *d)
{
    if (d == NULL) {
        return;
    }
    for (size_t i = 0; i < d->stored; i++) {
        free(d->errors[i].key);
        free(d->errors[i].message);
        free(d->errors[i].text);
    }
    free(d->errors);
    memset(d, 0, sizeof(*d));
}

/* ---- Creation and defaults --------------------------------------------------------------- */

static void run_defaults(struct sdd_cfg_run *r)
{
    memset(r, 0, sizeof(*r));
    snprintf(r->name, sizeof(r->name), "sddaq");
    r->duration_s = -1.0;
    snprintf(r->output_dir, sizeof(r->output_dir), "runs");
}

static void fabric_defaults(struct sdd_cfg_fabric *f)
{
    f->provider = SDD_CFG_PROV_AUTO;
    f->buffer_size = 1u << 20;
    f->buffers = 64;
    f->credits = 16;
    f->port = 7100;
}

sdd_config *sdd_config_create(void)
{
    sdd_config *cfg = calloc(1, sizeof(*cfg));
    if (cfg == NULL) {
        return NULL;
    }
    run_defaults(&cfg->run);
    fabric_defaults(&cfg->fabric);
    return cfg;
}

void sdd_config_destroy(sdd_config *cfg)
{
    if (cfg == NULL) {
        return;
    }
    free(cfg->nodes);
    free(cfg->stages);
    free(cfg->links);
    free(cfg);
}

void sdd_config_stage_init(struct sdd_cfg_stage *s, sdd_stage_type t)
{
    memset(s, 0, sizeof(*s));
    s->type = t;
    switch (t) {
    case SDD_STAGE_SOURCE:
        s->source.kind = SDD_SRC_EVB_EMU;
        s->source.streams = 1;
        s->source.seed = 1;
        s->source.fragment.dist = SDD_FRAG_FIXED;
        s->source.fragment.size = 4096;
        s->source.fragment.sigma = 0.5;
        s->source.pileup = 200.0f;
        s->source.frame.packets = 16;
        s->source.frame.payload = 1024;
        break;
    case SDD_STAGE_RU:
    case SDD_STAGE_BU:
        s->evb.bulk_size = 64;
        s->evb.heartbeat_ms = 100;
        s->evb.timeout_ms = 1000;
        break;
    case SDD_STAGE_PROCESS:
        s->process.algorithm = SDD_ALGO_NONE;
        s->process.factor = 1;
        s->process.min_pt = 10.0f;
        s->process.threads = 1;
        s->process.split = 1;
        s->process.finder = (struct sdd_cfg_rich_finder){
            .fit = 1, .multi_ring = 1, .window = 13.0f, .threshold = 5, .min_hits = 6, .claim = 7.0f,
            .max_rms = 8.0f};
        s->process.finder.inflight = SDD_CFG_AUTO; /* 2 with a GPU, else 1 */
        break;
    case SDD_STAGE_WRITER:
        s->writer.format = SDD_WRITER_HDF5;
        break;
    case SDD_STAGE_FEEDBACK:
        s->feedback.size = 1u << 20;
        break;
    default:
        break;
    }
}

/* Grow an array by one zeroed entry; NULL at the limit or without memory. */
static void *append(void **arr, size_t *n, size_t size, size_t limit)
{
    if (*n >= limit) {
        return NULL;
    }
    char *p = realloc(*arr, (*n + 1) * size);
    if (p == NULL) {
        return NULL;
    }
    *arr = p;
    memset(p + *n * size, 0, size);
    return p + (*n)++ * size;
}

struct sdd_cfg_node *sdd_config_add_node(sdd_config *cfg)
{
    struct sdd_cfg_node *n =
        append((void **)&cfg->nodes, &cfg->n_nodes, sizeof(*n), SDD_CFG_MAX_NODES);
    if (n != NULL) {
        snprintf(n->host, sizeof(n->host), CFG_DEFAULT_HOST);
        n->control_port = CFG_DEFAULT_CONTROL_PORT;
    }
    return n;
}

struct sdd_cfg_stage *sdd_config_add_stage(sdd_config *cfg, sdd_stage_type t)
{
    struct sdd_cfg_stage *s =
        append((void **)&cfg->stages, &cfg->n_stages, sizeof(*s), SDD_CFG_MAX_STAGES);
    if (s != NULL) {
        sdd_config_stage_init(s, t);
    }
    return s;
}

struct sdd_cfg_link *sdd_config_add_link(sdd_config *cfg)
{
    struct sdd_cfg_link *l =
        append((void **)&cfg->links, &cfg->n_links, sizeof(*l), SDD_CFG_MAX_LINKS);
    if (l != NULL) {
        l->transport = SDD_LINK_AUTO;
        l->depth = 1024;
    }
    return l;
}

long sdd_config_find_stage(const sdd_config *cfg, const char *name)
{
    for (size_t i = 0; i < cfg->n_stages; i++) {
        if (strcmp(cfg->stages[i].name, name) == 0) {
            return (long)i;
        }
    }
    return -1;
}

long sdd_config_find_node(const sdd_config *cfg, const char *name)
{
    for (size_t i = 0; i < cfg->n_nodes; i++) {
        if (strcmp(cfg->nodes[i].name, name) == 0) {
            return (long)i;
        }
    }
    return -1;
}

sdd_err sdd_config_fill_defaults(sdd_config *cfg)
{
    if (cfg->n_nodes == 0) {
        struct sdd_cfg_node *n = sdd_config_add_node(cfg);
        if (n == NULL) {
            return SDD_ENOMEM;
        }
        snprintf(n->name, sizeof(n->name), CFG_DEFAULT_NODE);
    }
    if (cfg->run.coordinator[0] == '\0') {
        memcpy(cfg->run.coordinator, cfg->nodes[0].name, sizeof(cfg->run.coordinator));
    }
    if (cfg->run.duration_s < 0) {
        cfg->run.duration_s = cfg->run.events == 0 ? CFG_DEFAULT_DURATION_S : 0.0;
    }
    for (size_t i = 0; i < cfg->n_stages; i++) {
        struct sdd_cfg_stage *s = &cfg->stages[i];
        if (s->node[0] == '\0' && cfg->n_nodes == 1) {
            memcpy(s->node, cfg->nodes[0].name, sizeof(s->node));
        }
        if ((s->type == SDD_STAGE_RU || s->type == SDD_STAGE_BU) && s->evb.credits == 0) {
            s->evb.credits = SDD_CFG_AUTO; /* fabric.credits, fewer where the cache needs */
        }
        if (s->type == SDD_STAGE_SOURCE && s->source.fragment.dist == SDD_FRAG_UNIFORM) {
            struct sdd_cfg_fragment *f = &s->source.fragment;
            if (f->min == 0 && f->max == 0) {
                f->min = f->size / 2;
                f->max = f->size + f->size / 2;
            }
        }
        if (s->type == SDD_STAGE_WRITER && s->writer.path[0] == '\0' &&
            s->writer.format != SDD_WRITER_NULL) {
            int n = snprintf(s->writer.path, sizeof(s->writer.path), "%s/%s_%s.%s",
                             cfg->run.output_dir, cfg->run.name, s->name,
                             s->writer.format == SDD_WRITER_HDF5 ? "h5" : "raw");
            if (n < 0 || (size_t)n >= sizeof(s->writer.path)) {
                s->writer.path[0] = '\0'; /* validate reports it */
            }
        }
    }
    for (size_t i = 0; i < cfg->n_links; i++) {
        struct sdd_cfg_link *l = &cfg->links[i];
        if (l->credits == 0) {
            l->credits = cfg->fabric.credits;
        }
        if (l->transport == SDD_LINK_AUTO) {
            long a = sdd_config_find_stage(cfg, l->from), b = sdd_config_find_stage(cfg, l->to);
            /* Unknown stages stay auto; validate reports them. */
            if (a >= 0 && b >= 0 && cfg->stages[a].node[0] != '\0' &&
                cfg->stages[b].node[0] != '\0') {
                l->transport = strcmp(cfg->stages[a].node, cfg->stages[b].node) == 0
                                   ? SDD_LINK_RING
                                   : SDD_LINK_FABRIC;
            }
        }
    }
    return SDD_OK;
}

/* ---- CPU lists --------------------------------------------------------------------------- */

static int parse_cpu_number(const char **p, unsigned *out)
{
    const char *s = *p;
    if (*s < '0' || *s > '9') {
        return -1;
    }
    unsigned v = 0;
    while (*s >= '0' && *s <= '9') {
        v = v * 10 + (unsigned)(*s - '0');
        if (v > SDD_CFG_CPU_LIMIT) {
            return -1;
        }
        s++;
    }
    *p = s;
    *out = v;
    return 0;
}

sdd_err sdd_config_parse_cpus(const char *s, uint64_t bits[16])
{
    uint64_t tmp[16] = {0};
    if (s == NULL || *s == '\0') {
        return SDD_EINVAL;
    }
    for (;;) {
        unsigned lo, hi;
        if (parse_cpu_number(&s, &lo) != 0) {
            return SDD_EINVAL;
        }
        hi = lo;
        if (*s == '-') {
            s++;
            if (parse_cpu_number(&s, &hi) != 0 || hi < lo) {
                return SDD_EINVAL;
            }
        }
        for (unsigned c = lo; c <= hi; c++) {
            tmp[c / 64] |= 1ull << (c % 64);
        }
        if (*s == '\0') {
            break;
        }
        if (*s != ',') {
            return SDD_EINVAL;
        }
        s++;
    }
    memcpy(bits, tmp, sizeof(tmp));
    return SDD_OK;
}
