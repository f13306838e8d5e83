/* YAML text -> struct sdd_config. libyaml loads the whole document as a node tree (each node
 * with its start line and column), then a table of fields per section walks it: every key is
 * looked up in its section's table, its scalar converted by the field's type and range, and
 * every problem recorded with its position and key path ("stages[2].fragment.dist"). The walk
 * goes on after a problem so that one run reports them all. Checks across entries (names,
 * references, graph shape) are left to config_validate.c. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "config_internal.h"

/* Nodes visited at most: aliases can make a small file expand without bound. */
#define VISIT_BUDGET 4000000u
/* Keys one mapping may have; the schema's largest (a source stage) has 11. */
#define MAX_PAIRS 1000u
/* Longest key path kept for messages. */
#define PATH_MAX_LEN 160
/* Largest file sdd_config_load() reads. */
#define LOAD_MAX (16u << 20)

struct pctx {
    yaml_document_t *doc;
    const char *file;
    struct sdd_config_diag *diag;
    sdd_config *cfg;
    size_t errors;
    size_t visits;
    bool over_budget;
    bool no_memory;
};

enum ftype {
    F_NAME,
    F_STR,
    F_U32,
    F_U32_AUTO, /* an unsigned integer, or `auto` (SDD_CFG_AUTO) */
    F_U64,
    F_SIZE,
    F_DOUBLE,
    F_FLOAT,
    F_ENUM,
    F_CPUS,
    F_HOSTPORT
};

#define NO_POS SIZE_MAX

struct field {
    const char *key;
    enum ftype type;
    size_t off;               /* of the value in the entry's struct */
    size_t cap;               /* text fields: buffer size */
    double min, max;          /* numbers */
    const char *const *names; /* F_ENUM */
    size_t pos_off;           /* of a struct sdd_cfg_pos to fill, or NO_POS */
};

_Static_assert(sizeof(sdd_algo) == sizeof(int), "enums are int-sized");

static void perr(struct pctx *c, const yaml_node_t *n, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void perr(struct pctx *c, const yaml_node_t *n, const char *key, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    uint32_t line = n != NULL ? (uint32_t)n->start_mark.line + 1 : 0;
    uint32_t col = n != NULL ? (uint32_t)n->start_mark.column + 1 : 0;
    cfg_diag_vadd(c->diag, c->file, line, col, key, fmt, ap);
    va_end(ap);
    c->errors++;
}

/* Key paths for messages; a path too long for the buffer is cut short, which is harmless. */
static void mkpath(char *dst, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void mkpath(char *dst, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(dst, len, fmt, ap);
    va_end(ap);
}

static struct sdd_cfg_pos pos_of(const yaml_node_t *n)
{
    struct sdd_cfg_pos p = {(uint32_t)n->start_mark.line + 1, (uint32_t)n->start_mark.column + 1};
    return p;
}

/* Charge work to the budget; false (after one error) once it is spent. */
static bool charge(struct pctx *c, size_t work)
{
    c->visits += work;
    if (c->visits <= VISIT_BUDGET) {
        return true;
    }
    if (!c->over_budget) {
        c->over_budget = true;
        /* This one must be seen even when the list is full of the errors that led here. */
        struct sdd_config_diag *d = c->diag;
        if (d != NULL && d->stored == SDD_CFG_DIAG_KEEP) {
            struct sdd_config_error *e = &d->errors[--d->stored];
            free(e->key);
            free(e->message);
            free(e->text);
            memset(e, 0, sizeof(*e));
            d->count--;
        }
        perr(c, NULL, "", "document too large: more than %u nodes and keys after alias expansion",
             VISIT_BUDGET);
    }
    return false;
}

static yaml_node_t *node_at(struct pctx *c, int index)
{
    return charge(c, 1) ? yaml_document_get_node(c->doc, index) : NULL;
}

static const char *kind_name(const yaml_node_t *n)
{
    switch (n->type) {
    case YAML_SCALAR_NODE:
        return "a scalar";
    case YAML_SEQUENCE_NODE:
        return "a sequence";
    case YAML_MAPPING_NODE:
        return "a mapping";
    default:
        return "nothing";
    }
}

/* The scalar's text, or NULL (after an error) when n is not a scalar or holds a NUL byte. */
static const char *scalar(struct pctx *c, const yaml_node_t *n, const char *key, const char *want)
{
    if (n->type != YAML_SCALAR_NODE) {
        perr(c, n, key, "expected %s, got %s", want, kind_name(n));
        return NULL;
    }
    const char *s = (const char *)n->data.scalar.value;
    if (strlen(s) != n->data.scalar.length) {
        perr(c, n, key, "value contains a NUL character");
        return NULL;
    }
    return s;
}

static bool is_plain(const yaml_node_t *n)
{
    return n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
}

/* Is a plain scalar YAML's null ("", "~", "null")? */
static bool is_null(const yaml_node_t *n)
{
    const char *s = (const char *)n->data.scalar.value;
    return is_plain(n) && (s[0] == '\0' || strcmp(s, "~") == 0 || strcmp(s, "null") == 0 ||
                           strcmp(s, "Null") == 0 || strcmp(s, "NULL") == 0);
}

static bool valid_name(const char *s)
{
    if (s[0] == '\0' || s[0] == '-' || s[0] == '.') {
        return false;
    }
    for (; *s != '\0'; s++) {
        char ch = *s;
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                  (ch >= '0' && ch <= '9') || ch == '_' || ch == '-' || ch == '.';
        if (!ok) {
            return false;
        }
    }
    return true;
}

static bool valid_hostport(const char *s)
{
    const char *colon = strrchr(s, ':');
    if (colon == NULL || colon == s) {
        return false;
    }
    char *end = NULL;
    errno = 0;
    long p = strtol(colon + 1, &end, 10);
    return errno == 0 && end != colon + 1 && *end == '\0' && p > 0 && p <= 65535;
}

/* Unsigned integer with an optional binary suffix (sizes only): K, M, G, KiB, MiB, GiB. */
static int parse_uint(const char *s, bool suffix, uint64_t *out)
{
    if (*s < '0' || *s > '9') {
        return -1;
    }
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0) {
        return -1;
    }
    unsigned shift = 0;
    if (*end != '\0') {
        if (!suffix) {
            return -1;
        }
        switch (*end) {
        case 'K':
        case 'k':
            shift = 10;
            break;
        case 'M':
            shift = 20;
            break;
        case 'G':
            shift = 30;
            break;
        default:
            return -1;
        }
        if (strcmp(end + 1, "") != 0 && strcmp(end + 1, "iB") != 0) {
            return -1;
        }
        if (v > (UINT64_MAX >> shift)) {
            return -1;
        }
    }
    *out = (uint64_t)v << shift;
    return 0;
}

/* Convert one scalar by its field and store it at base + f->off. */
static void set_field(struct pctx *c, const struct field *f, yaml_node_t *n, void *base,
                      const char *path)
{
    char *dst = (char *)base + f->off;
    char want[64];
    switch (f->type) {
    case F_NAME:
    case F_STR:
    case F_CPUS:
    case F_HOSTPORT:
        snprintf(want, sizeof(want), "%s",
                 f->type == F_NAME       ? "a name"
                 : f->type == F_CPUS     ? "a CPU list such as \"0-3,8\""
                 : f->type == F_HOSTPORT ? "\"host:port\""
                                         : "a string");
        break;
    case F_ENUM:
        snprintf(want, sizeof(want), "one of the names below");
        break;
    case F_DOUBLE:
    case F_FLOAT:
        snprintf(want, sizeof(want), "a number");
        break;
    case F_U32_AUTO:
        snprintf(want, sizeof(want), "an unsigned integer or auto");
        break;
    default:
        snprintf(want, sizeof(want), "an unsigned integer");
        break;
    }
    const char *s = scalar(c, n, path, want);
    if (s == NULL) {
        return;
    }
    if (f->type == F_ENUM) {
        for (int i = 0; f->names[i] != NULL; i++) {
            if (strcmp(s, f->names[i]) == 0) { /* before the null check: "null" is a format */
                memcpy(dst, &i, sizeof(i));
                goto out_pos;
            }
        }
    }
    if (f->type == F_U32_AUTO && is_plain(n) && strcmp(s, "auto") == 0) {
        uint32_t a = SDD_CFG_AUTO;
        memcpy(dst, &a, sizeof(a));
        goto out_pos;
    }
    if (f->type != F_STR && f->type != F_CPUS && is_null(n)) {
        perr(c, n, path, "missing value (expected %s)", want);
        return;
    }
    switch (f->type) {
    case F_NAME:
        if (strlen(s) >= f->cap || !valid_name(s)) {
            perr(c, n, path,
                 "invalid name '%s' (letters, digits, '_', '-' and '.', not first; at most %zu "
                 "characters)",
                 s, f->cap - 1);
            return;
        }
        memcpy(dst, s, strlen(s) + 1);
        break;
    case F_STR:
    case F_HOSTPORT:
    case F_CPUS: {
        if (is_null(n) && f->type == F_STR) {
            perr(c, n, path, "missing value (expected %s)", want);
            return;
        }
        if (strlen(s) >= f->cap) {
            perr(c, n, path, "too long (at most %zu characters)", f->cap - 1);
            return;
        }
        if (f->type == F_HOSTPORT && !valid_hostport(s)) {
            perr(c, n, path, "invalid address '%s' (expected host:port, port 1 to 65535)", s);
            return;
        }
        if (f->type == F_CPUS) {
            uint64_t bits[16];
            if (is_null(n) || s[0] == '\0') {
                dst[0] = '\0';
                break;
            }
            if (sdd_config_parse_cpus(s, bits) != SDD_OK) {
                perr(c, n, path, "invalid CPU list '%s' (expected e.g. \"0-3,8\", CPUs 0 to %d)", s,
                     SDD_CFG_CPU_LIMIT);
                return;
            }
        }
        memcpy(dst, s, strlen(s) + 1);
        break;
    }
    case F_ENUM: {
        char list[256];
        cfg_join_names(f->names, list, sizeof(list));
        perr(c, n, path, "unknown value '%s' (expected one of: %s)", s, list);
        break;
    }
    case F_DOUBLE:
    case F_FLOAT: {
        char *end = NULL;
        double v = is_plain(n) ? strtod(s, &end) : NAN;
        if (!is_plain(n) || end == s || *end != '\0' || !isfinite(v)) {
            perr(c, n, path, "expected a number, got '%s'", s);
            return;
        }
        if (v < f->min || v > f->max) {
            perr(c, n, path, "value %s is out of range (%g to %g)", s, f->min, f->max);
            return;
        }
        if (f->type == F_FLOAT) {
            float vf = (float)v;
            memcpy(dst, &vf, sizeof(vf));
        } else {
            memcpy(dst, &v, sizeof(v));
        }
        break;
    }
    case F_U32:
    case F_U32_AUTO:
    case F_U64:
    case F_SIZE: {
        uint64_t v = 0;
        if (!is_plain(n) || parse_uint(s, f->type == F_SIZE, &v) != 0) {
            perr(c, n, path, "expected %s, got '%s'",
                 f->type == F_SIZE ? "a size in bytes (suffixes K, M, G)" : want, s);
            return;
        }
        if ((double)v < f->min || (double)v > f->max) {
            perr(c, n, path, "value %s is out of range (%.0f to %.0f)", s, f->min, f->max);
            return;
        }
        if (f->type == F_U32 || f->type == F_U32_AUTO) {
            uint32_t v32 = (uint32_t)v;
            memcpy(dst, &v32, sizeof(v32));
        } else {
            memcpy(dst, &v, sizeof(v));
        }
        break;
    }
    }
out_pos:
    if (f->pos_off != NO_POS) {
        struct sdd_cfg_pos p = pos_of(n);
        memcpy((char *)base + f->pos_off, &p, sizeof(p));
    }
}

static const struct field *find_field(const struct field *tab, size_t n, const char *key)
{
    for (size_t i = 0; i < n; i++) {
        if (strcmp(tab[i].key, key) == 0) {
            return &tab[i];
        }
    }
    return NULL;
}

/* Iterate a mapping's pairs, reporting keys that are not scalars and duplicate keys; calls
 * fn for each good pair. */
typedef void (*pair_fn)(struct pctx *c, const char *key, yaml_node_t *kn, yaml_node_t *vn,
                        void *arg, const char *path);

static void each_pair(struct pctx *c, yaml_node_t *map, const char *path, pair_fn fn, void *arg)
{
    size_t npairs = (size_t)(map->data.mapping.pairs.top - map->data.mapping.pairs.start);
    if (npairs > MAX_PAIRS) {
        perr(c, map, path, "mapping with %zu keys (at most %u)", npairs, MAX_PAIRS);
        return;
    }
    /* The duplicate check below is quadratic: charge it. */
    if (!charge(c, npairs * npairs / 2)) {
        return;
    }
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
         p++) {
        yaml_node_t *kn = node_at(c, p->key), *vn = node_at(c, p->value);
        if (kn == NULL || vn == NULL) {
            return;
        }
        if (kn->type != YAML_SCALAR_NODE ||
            strlen((const char *)kn->data.scalar.value) != kn->data.scalar.length) {
            perr(c, kn, path, "keys must be plain names, got %s", kind_name(kn));
            continue;
        }
        const char *key = (const char *)kn->data.scalar.value;
        bool dup = false;
        for (yaml_node_pair_t *q = map->data.mapping.pairs.start; q < p; q++) {
            yaml_node_t *qk = yaml_document_get_node(c->doc, q->key);
            if (qk != NULL && qk->type == YAML_SCALAR_NODE &&
                strcmp((const char *)qk->data.scalar.value, key) == 0) {
                dup = true;
                break;
            }
        }
        char sub[PATH_MAX_LEN];
        mkpath(sub, sizeof(sub), "%s%s%s", path, path[0] != '\0' ? "." : "", key);
        if (dup) {
            perr(c, kn, sub, "duplicate key");
            continue;
        }
        fn(c, key, kn, vn, arg, sub);
    }
}

static bool want_mapping(struct pctx *c, yaml_node_t *n, const char *path)
{
    if (n->type == YAML_MAPPING_NODE) {
        return true;
    }
    perr(c, n, path, "expected a mapping, got %s", kind_name(n));
    return false;
}

/* A section whose keys all come from one table. */
struct table_arg {
    const struct field *tab;
    size_t n;
    void *base;
    const char *section; /* for "unknown key in <section>" */
};

static void table_pair(struct pctx *c, const char *key, yaml_node_t *kn, yaml_node_t *vn, void *arg,
                       const char *path)
{
    struct table_arg *t = arg;
    const struct field *f = find_field(t->tab, t->n, key);
    if (f == NULL) {
        char list[512] = "";
        size_t used = 0;
        for (size_t i = 0; i < t->n && used < sizeof(list); i++) {
            int w = snprintf(list + used, sizeof(list) - used, "%s%s", i > 0 ? ", " : "",
                             t->tab[i].key);
            used += w > 0 ? (size_t)w : 0;
        }
        perr(c, kn, path, "unknown key in %s (expected one of: %s)", t->section, list);
        return;
    }
    set_field(c, f, vn, t->base, path);
}

#define NTAB(t) (sizeof(t) / sizeof(t[0]))
#define FLD(st, k, ty, member, lo, hi)                                                \
    {                                                                                 \
#k, ty, offsetof(st, member), sizeof(((st *)0)->member), lo, hi, NULL, NO_POS \
    }
#define FENUM(st, k, member, tab)                              \
    {                                                          \
#k, F_ENUM, offsetof(st, member), 0, 0, 0, tab, NO_POS \
    }
#define FPOS(st, k, ty, member, posm)                                                           \
    {                                                                                           \
#k, ty, offsetof(st, member), sizeof(((st *)0)->member), 0, 0, NULL, offsetof(st, posm) \
    }

static const struct field run_fields[] = {
    FLD(struct sdd_cfg_run, name, F_NAME, name, 0, 0),
    FLD(struct sdd_cfg_run, duration, F_DOUBLE, duration_s, 0, 1e9),
    FLD(struct sdd_cfg_run, events, F_U64, events, 0, 18446744073709551615.0),
    FLD(struct sdd_cfg_run, output_dir, F_STR, output_dir, 0, 0),
    FPOS(struct sdd_cfg_run, coordinator, F_NAME, coordinator, coordinator_pos),
};

static const struct field fabric_fields[] = {
    FENUM(struct sdd_cfg_fabric, provider, provider, cfg_provider_names),
    FLD(struct sdd_cfg_fabric, buffer_size, F_SIZE, buffer_size, 4096, 1u << 30),
    FLD(struct sdd_cfg_fabric, buffers, F_U32, buffers, 2, 65536),
    FLD(struct sdd_cfg_fabric, credits, F_U32, credits, 1, 65536),
    FLD(struct sdd_cfg_fabric, port, F_U32, port, 1024, 65535),
};

static const struct field node_fields[] = {
    FPOS(struct sdd_cfg_node, name, F_NAME, name, name_pos),
    FLD(struct sdd_cfg_node, host, F_STR, host, 0, 0),
    {"control_port", F_U32, offsetof(struct sdd_cfg_node, control_port), 0, 0, 65535, NULL,
     offsetof(struct sdd_cfg_node, port_pos)},
    FPOS(struct sdd_cfg_node, cores, F_CPUS, cores, cores_pos),
};

static const struct field link_fields[] = {
    FPOS(struct sdd_cfg_link, from, F_NAME, from, from_pos),
    FPOS(struct sdd_cfg_link, to, F_NAME, to, to_pos),
    {"transport", F_ENUM, offsetof(struct sdd_cfg_link, transport), 0, 0, 0, cfg_transport_names,
     offsetof(struct sdd_cfg_link, transport_pos)},
    FLD(struct sdd_cfg_link, depth, F_U32, depth, 2, 1u << 20),
    FLD(struct sdd_cfg_link, credits, F_U32, credits, 1, 65536),
};

typedef struct sdd_cfg_stage stg;
static const struct field stage_common[] = {
    FPOS(stg, name, F_NAME, name, name_pos),
    FPOS(stg, node, F_NAME, node, node_pos),
    FPOS(stg, cores, F_CPUS, cores, cores_pos),
};
static const struct field stage_source[] = {
    FENUM(stg, kind, source.kind, cfg_source_kind_names),
    FLD(stg, streams, F_U32, source.streams, 1, 65536),
    FLD(stg, rate, F_DOUBLE, source.rate, 0, 1e12),
    {"seed", F_U64, offsetof(stg, source.seed), 0, 0, 18446744073709551615.0, NULL,
     offsetof(stg, source.seed_pos)},
    FLD(stg, listen, F_HOSTPORT, source.listen, 0, 0),
    {"pileup", F_FLOAT, offsetof(stg, source.pileup), 0, 0, 1000, NULL,
     offsetof(stg, source.pileup_pos)},
    /* fragment: a mapping, handled by stage_pair */
};
static const struct field stage_evb[] = {
    FLD(stg, bulk_size, F_U32, evb.bulk_size, 1, 65536),
    FLD(stg, credits, F_U32_AUTO, evb.credits, 1, SDD_CFG_EVB_CREDITS_MAX),
    FLD(stg, heartbeat_ms, F_U32, evb.heartbeat_ms, 1, 3600000),
    FLD(stg, timeout_ms, F_U32, evb.timeout_ms, 1, 3600000),
    FENUM(stg, transfer, evb.transfer, cfg_transfer_names),
};
static const struct field stage_process[] = {
    FENUM(stg, algorithm, process.algorithm, cfg_algo_names),
    FLD(stg, factor, F_U32, process.factor, 1, 1e9),
    FLD(stg, threads, F_U32, process.threads, 1, 1024),
    FLD(stg, split, F_U32, process.split, 1, 64),
    {"min_pt", F_FLOAT, offsetof(stg, process.min_pt), 0, 2, 10000, NULL, NO_POS},
};
static const struct field rich_finder_fields[] = {
    FENUM(struct sdd_cfg_rich_finder, method, method, cfg_rich_method_names),
    FENUM(struct sdd_cfg_rich_finder, fit, fit, cfg_rich_fit_names),
    FENUM(struct sdd_cfg_rich_finder, multi_ring, multi_ring, cfg_off_on_names),
    FLD(struct sdd_cfg_rich_finder, window, F_FLOAT, window, 1, 99),
    FLD(struct sdd_cfg_rich_finder, threshold, F_U32, threshold, 3, 255),
    FLD(struct sdd_cfg_rich_finder, min_hits, F_U32, min_hits, 3, 64),
    FLD(struct sdd_cfg_rich_finder, claim, F_FLOAT, claim, 0, 99),
    FLD(struct sdd_cfg_rich_finder, max_rms, F_FLOAT, max_rms, 0.1, 100),
    FENUM(struct sdd_cfg_rich_finder, gpu, gpu, cfg_off_on_names),
    FLD(struct sdd_cfg_rich_finder, inflight, F_U32_AUTO, inflight, 1, SDD_CFG_RICH_INFLIGHT_MAX),
};
static const struct field stage_writer[] = {
    FENUM(stg, format, writer.format, cfg_writer_names),
    FLD(stg, path, F_STR, writer.path, 0, 0),
};
static const struct field stage_feedback[] = {
    FLD(stg, size, F_SIZE, feedback.size, 4096, 1u << 30),
    FLD(stg, port, F_U32, feedback.port, 0, 65535),
};
static const struct field frame_fields[] = {
    FENUM(struct sdd_cfg_frame, format, format, cfg_frame_format_names),
    FLD(struct sdd_cfg_frame, packets, F_U32, packets, 1, 65536),
    FLD(struct sdd_cfg_frame, payload, F_SIZE, payload, 1, 65459),
    FENUM(struct sdd_cfg_frame, missing, missing, cfg_frame_missing_names),
    FLD(struct sdd_cfg_frame, loss, F_DOUBLE, loss, 0, 1),
};

static const struct field fragment_fields[] = {
    FENUM(struct sdd_cfg_fragment, dist, dist, cfg_frag_dist_names),
    FLD(struct sdd_cfg_fragment, size, F_SIZE, size, 1, 64u << 20),
    FLD(struct sdd_cfg_fragment, min, F_SIZE, min, 1, 64u << 20),
    FLD(struct sdd_cfg_fragment, max, F_SIZE, max, 1, 64u << 20),
    FLD(struct sdd_cfg_fragment, sigma, F_DOUBLE, sigma, 0, 10),
};

struct type_table {
    const struct field *tab;
    size_t n;
};
static const struct type_table type_tables[SDD_STAGE_TYPE_COUNT] = {
    [SDD_STAGE_SOURCE] = {stage_source, NTAB(stage_source)},
    [SDD_STAGE_RU] = {stage_evb, NTAB(stage_evb)},
    [SDD_STAGE_BU] = {stage_evb, NTAB(stage_evb)},
    [SDD_STAGE_PROCESS] = {stage_process, NTAB(stage_process)},
    [SDD_STAGE_WRITER] = {stage_writer, NTAB(stage_writer)},
    [SDD_STAGE_FEEDBACK] = {stage_feedback, NTAB(stage_feedback)},
};

/* ---- Sections ---------------------------------------------------------------------------- */

static void parse_table(struct pctx *c, yaml_node_t *n, const char *path, const struct field *tab,
                        size_t nt, void *base, const char *section)
{
    if (!want_mapping(c, n, path)) {
        return;
    }
    struct table_arg t = {tab, nt, base, section};
    each_pair(c, n, path, table_pair, &t);
}

/* Is key present in a mapping? Returns its key node (for positions). */
static yaml_node_t *lookup(struct pctx *c, yaml_node_t *map, const char *key, yaml_node_t **value)
{
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
         p++) {
        yaml_node_t *kn = yaml_document_get_node(c->doc, p->key);
        if (kn != NULL && kn->type == YAML_SCALAR_NODE &&
            strcmp((const char *)kn->data.scalar.value, key) == 0) {
            if (value != NULL) {
                *value = yaml_document_get_node(c->doc, p->value);
            }
            return kn;
        }
    }
    return NULL;
}

static void require(struct pctx *c, yaml_node_t *map, const char *path, const char *key)
{
    if (lookup(c, map, key, NULL) == NULL) {
        char sub[PATH_MAX_LEN];
        mkpath(sub, sizeof(sub), "%s.%s", path, key);
        perr(c, map, sub, "missing required key");
    }
}

struct stage_arg {
    struct sdd_cfg_stage *s;
    bool type_known;
    yaml_node_t *fragment_key, *listen_key, *factor_key, *pileup_key, *min_pt_key, *frame_key;
    yaml_node_t *split_key, *finder_key;
    yaml_node_t *frame_format, *frame_geometry, *frame_loss; /* keys given inside frame */
};

static void stage_pair(struct pctx *c, const char *key, yaml_node_t *kn, yaml_node_t *vn, void *arg,
                       const char *path)
{
    struct stage_arg *a = arg;
    if (strcmp(key, "type") == 0) {
        return; /* read before the walk */
    }
    const struct field *f = find_field(stage_common, NTAB(stage_common), key);
    if (f != NULL) {
        set_field(c, f, vn, a->s, path);
        return;
    }
    if (!a->type_known) {
        return; /* the type error says enough */
    }
    const struct type_table *tt = &type_tables[a->s->type];
    if (a->s->type == SDD_STAGE_SOURCE && strcmp(key, "frame") == 0) {
        a->frame_key = kn;
        if (vn != NULL && vn->type == YAML_MAPPING_NODE) { /* parse_table reports the rest */
            a->frame_format = lookup(c, vn, "format", NULL);
            yaml_node_t *g = lookup(c, vn, "packets", NULL);
            a->frame_geometry = g != NULL ? g : lookup(c, vn, "payload", NULL);
            a->frame_loss = lookup(c, vn, "loss", NULL);
        }
        parse_table(c, vn, path, frame_fields, NTAB(frame_fields), &a->s->source.frame, "frame");
        return;
    }
    if (a->s->type == SDD_STAGE_PROCESS && strcmp(key, "finder") == 0) {
        a->finder_key = kn;
        parse_table(c, vn, path, rich_finder_fields, NTAB(rich_finder_fields),
                    &a->s->process.finder, "finder");
        return;
    }
    if (a->s->type == SDD_STAGE_SOURCE && strcmp(key, "fragment") == 0) {
        a->fragment_key = kn;
        parse_table(c, vn, path, fragment_fields, NTAB(fragment_fields), &a->s->source.fragment,
                    "fragment");
        return;
    }
    f = find_field(tt->tab, tt->n, key);
    if (f != NULL) {
        if (strcmp(key, "listen") == 0) {
            a->listen_key = kn;
        } else if (strcmp(key, "factor") == 0) {
            a->factor_key = kn;
        } else if (strcmp(key, "min_pt") == 0) {
            a->min_pt_key = kn;
        } else if (strcmp(key, "split") == 0) {
            a->split_key = kn;
        } else if (strcmp(key, "pileup") == 0) {
            a->pileup_key = kn;
        }
        set_field(c, f, vn, a->s, path);
        return;
    }
    /* Say so when the key belongs to another stage type. */
    for (int t = 0; t < SDD_STAGE_TYPE_COUNT; t++) {
        if (find_field(type_tables[t].tab, type_tables[t].n, key) != NULL ||
            (t == SDD_STAGE_SOURCE &&
             (strcmp(key, "fragment") == 0 || strcmp(key, "frame") == 0)) ||
            (t == SDD_STAGE_PROCESS && strcmp(key, "finder") == 0)) {
            perr(c, kn, path, "key is not valid for a '%s' stage (it belongs to '%s' stages)",
                 sdd_stage_type_name(a->s->type), sdd_stage_type_name((sdd_stage_type)t));
            return;
        }
    }
    char list[512] = "name, type, node, cores";
    size_t used = strlen(list);
    for (size_t i = 0; i < tt->n; i++) {
        int w = snprintf(list + used, sizeof(list) - used, ", %s", tt->tab[i].key);
        used += w > 0 ? (size_t)w : 0;
        if (used >= sizeof(list)) {
            break;
        }
    }
    if (a->s->type == SDD_STAGE_SOURCE && used < sizeof(list)) {
        snprintf(list + used, sizeof(list) - used, ", fragment, frame");
    } else if (a->s->type == SDD_STAGE_PROCESS && used < sizeof(list)) {
        snprintf(list + used, sizeof(list) - used, ", finder");
    }
    perr(c, kn, path, "unknown key for a '%s' stage (expected one of: %s)",
         sdd_stage_type_name(a->s->type), list);
}

static void parse_stage(struct pctx *c, yaml_node_t *n, const char *path)
{
    if (!want_mapping(c, n, path)) {
        return;
    }
    struct stage_arg a = {0};
    sdd_stage_type type = SDD_STAGE_SOURCE;
    yaml_node_t *tv = NULL;
    char tpath[PATH_MAX_LEN];
    mkpath(tpath, sizeof(tpath), "%s.type", path);
    if (lookup(c, n, "type", &tv) == NULL) {
        perr(c, n, tpath, "missing required key");
    } else if (tv != NULL) {
        const char *s = scalar(c, tv, tpath, "a stage type");
        if (s != NULL) {
            for (int t = 0; t < SDD_STAGE_TYPE_COUNT; t++) {
                if (strcmp(s, cfg_stage_type_names[t]) == 0) {
                    type = (sdd_stage_type)t;
                    a.type_known = true;
                }
            }
            if (!a.type_known) {
                char list[128];
                cfg_join_names(cfg_stage_type_names, list, sizeof(list));
                perr(c, tv, tpath, "unknown stage type '%s' (expected one of: %s)", s, list);
            }
        }
    }
    struct sdd_cfg_stage *s = sdd_config_add_stage(c->cfg, type);
    if (s == NULL) {
        if (c->cfg->n_stages >= SDD_CFG_MAX_STAGES) {
            perr(c, n, path, "too many stages (at most %d)", SDD_CFG_MAX_STAGES);
        } else {
            c->no_memory = true;
        }
        return;
    }
    s->pos = pos_of(n);
    a.s = s;
    require(c, n, path, "name");
    each_pair(c, n, path, stage_pair, &a);
    if (!a.type_known) {
        return;
    }
    char sub[PATH_MAX_LEN];
    if (type == SDD_STAGE_SOURCE) {
        bool udp = s->source.kind == SDD_SRC_UDP;
        if (udp && a.listen_key == NULL) {
            mkpath(sub, sizeof(sub), "%s.listen", path);
            perr(c, n, sub, "missing: a 'udp' source needs the address it receives on");
        } else if (!udp && a.listen_key != NULL) {
            mkpath(sub, sizeof(sub), "%s.listen", path);
            perr(c, a.listen_key, sub, "only a 'udp' source listens (this one is '%s')",
                 sdd_source_kind_name(s->source.kind));
        }
        if (a.fragment_key != NULL && s->source.kind != SDD_SRC_EVB_EMU) {
            mkpath(sub, sizeof(sub), "%s.fragment", path);
            perr(c, a.fragment_key, sub,
                 "only an 'evb-emu' source has fragment sizes (this one "
                 "is '%s')",
                 sdd_source_kind_name(s->source.kind));
        }
        if (a.pileup_key != NULL && s->source.kind != SDD_SRC_HOUGH_EMU) {
            mkpath(sub, sizeof(sub), "%s.pileup", path);
            perr(c, a.pileup_key, sub,
                 "only a 'hough-emu' source has a pileup level (this one is '%s')",
                 sdd_source_kind_name(s->source.kind));
        }
        sdd_source_kind k = s->source.kind;
        bool framed = k == SDD_SRC_UDP || k == SDD_SRC_EMU_STREAM || k == SDD_SRC_EMU_JUNGFRAU;
        mkpath(sub, sizeof(sub), "%s.frame", path);
        if (a.frame_key != NULL && !framed) {
            perr(c, a.frame_key, sub,
                 "only 'udp', 'emu-stream' and 'emu-jungfrau' sources have frames (this one "
                 "is '%s')",
                 sdd_source_kind_name(k));
        } else if (a.frame_format != NULL && k != SDD_SRC_UDP) {
            perr(c, a.frame_format, sub, "the '%s' kind sets the frame format itself",
                 sdd_source_kind_name(k));
        } else if (a.frame_loss != NULL && k == SDD_SRC_UDP) {
            perr(c, a.frame_loss, sub, "loss is injected by emulators, not by a 'udp' source");
        }
        if (a.frame_geometry != NULL && (k == SDD_SRC_EMU_JUNGFRAU ||
                                         (k == SDD_SRC_UDP &&
                                          s->source.frame.format == SDD_FRAME_JUNGFRAU))) {
            perr(c, a.frame_geometry, sub,
                 "jungfrau frames are always 128 packets of 8192 bytes");
        } else if (a.frame_geometry != NULL && k == SDD_SRC_UDP &&
                   s->source.frame.format == SDD_FRAME_NA62) {
            perr(c, a.frame_geometry, sub,
                 "na62 packets are not frames: they are packed into receive buffers of up to "
                 "64 packets of 1472 bytes");
        }
        const struct sdd_cfg_fragment *f = &s->source.fragment;
        if (a.fragment_key != NULL && (f->min != 0 || f->max != 0) &&
            (f->min == 0 || f->max == 0 || f->min > f->max)) {
            mkpath(sub, sizeof(sub), "%s.fragment", path);
            perr(c, a.fragment_key, sub,
                 "min and max must both be set, with min <= max (got %llu and %llu)",
                 (unsigned long long)f->min, (unsigned long long)f->max);
        }
    }
    if (type == SDD_STAGE_PROCESS && a.factor_key != NULL &&
        s->process.algorithm != SDD_ALGO_PRESCALE) {
        mkpath(sub, sizeof(sub), "%s.factor", path);
        perr(c, a.factor_key, sub, "only the 'prescale' algorithm has a factor (this is '%s')",
             sdd_algo_name(s->process.algorithm));
    }
    if (type == SDD_STAGE_PROCESS && a.min_pt_key != NULL &&
        s->process.algorithm != SDD_ALGO_HOUGH) {
        mkpath(sub, sizeof(sub), "%s.min_pt", path);
        perr(c, a.min_pt_key, sub, "only the 'hough' algorithm has a min_pt (this is '%s')",
             sdd_algo_name(s->process.algorithm));
    }
    if (type == SDD_STAGE_PROCESS && a.split_key != NULL && s->process.algorithm != SDD_ALGO_RICH) {
        mkpath(sub, sizeof(sub), "%s.split", path);
        perr(c, a.split_key, sub, "only the 'rich' algorithm has a split (this is '%s')",
             sdd_algo_name(s->process.algorithm));
    }
    if (type == SDD_STAGE_PROCESS && a.finder_key != NULL &&
        s->process.algorithm != SDD_ALGO_RICH) {
        mkpath(sub, sizeof(sub), "%s.finder", path);
        perr(c, a.finder_key, sub, "only the 'rich' algorithm has a ring finder (this is '%s')",
             sdd_algo_name(s->process.algorithm));
    } else if (type == SDD_STAGE_PROCESS && a.finder_key != NULL &&
               s->process.finder.claim > s->process.finder.window) {
        mkpath(sub, sizeof(sub), "%s.finder.claim", path);
        perr(c, a.finder_key, sub, "claim (%g mm) must not exceed window (%g mm)",
             (double)s->process.finder.claim, (double)s->process.finder.window);
    } else if (type == SDD_STAGE_PROCESS && a.finder_key != NULL && s->process.finder.gpu &&
               (s->process.split > 1 || s->process.finder.method != 0)) {
        mkpath(sub, sizeof(sub), "%s.finder.gpu", path);
        perr(c, a.finder_key, sub, "the GPU runs the 'hist' method with split 1 (split is %u)",
             s->process.split);
    } else if (type == SDD_STAGE_PROCESS && a.finder_key != NULL &&
               s->process.finder.inflight != SDD_CFG_AUTO && s->process.finder.inflight > 1 &&
               s->process.split > 1) {
        mkpath(sub, sizeof(sub), "%s.finder.inflight", path);
        perr(c, a.finder_key, sub, "more than one buffer in flight needs split 1 (split is %u)",
             s->process.split);
    }
}

static void parse_node(struct pctx *c, yaml_node_t *n, const char *path)
{
    if (!want_mapping(c, n, path)) {
        return;
    }
    struct sdd_cfg_node *e = sdd_config_add_node(c->cfg);
    if (e == NULL) {
        if (c->cfg->n_nodes >= SDD_CFG_MAX_NODES) {
            perr(c, n, path, "too many nodes (at most %d)", SDD_CFG_MAX_NODES);
        } else {
            c->no_memory = true;
        }
        return;
    }
    e->pos = pos_of(n);
    require(c, n, path, "name");
    struct table_arg t = {node_fields, NTAB(node_fields), e, "a node"};
    each_pair(c, n, path, table_pair, &t);
}

static void parse_link(struct pctx *c, yaml_node_t *n, const char *path)
{
    if (!want_mapping(c, n, path)) {
        return;
    }
    struct sdd_cfg_link *l = sdd_config_add_link(c->cfg);
    if (l == NULL) {
        if (c->cfg->n_links >= SDD_CFG_MAX_LINKS) {
            perr(c, n, path, "too many links (at most %d)", SDD_CFG_MAX_LINKS);
        } else {
            c->no_memory = true;
        }
        return;
    }
    l->pos = pos_of(n);
    require(c, n, path, "from");
    require(c, n, path, "to");
    struct table_arg t = {link_fields, NTAB(link_fields), l, "a link"};
    each_pair(c, n, path, table_pair, &t);
    if (l->depth != 0 && (l->depth & (l->depth - 1)) != 0) {
        char sub[PATH_MAX_LEN];
        yaml_node_t *v = NULL;
        lookup(c, n, "depth", &v);
        mkpath(sub, sizeof(sub), "%s.depth", path);
        perr(c, v != NULL ? v : n, sub, "ring depth %u is not a power of two", l->depth);
    }
}

static void parse_list(struct pctx *c, yaml_node_t *n, const char *key,
                       void (*item)(struct pctx *, yaml_node_t *, const char *))
{
    if (n->type == YAML_SCALAR_NODE && is_null(n)) {
        return; /* "links:" with nothing after it: an empty list */
    }
    if (n->type != YAML_SEQUENCE_NODE) {
        perr(c, n, key, "expected a sequence, got %s", kind_name(n));
        return;
    }
    size_t i = 0;
    for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top;
         it++, i++) {
        yaml_node_t *e = node_at(c, *it);
        if (e == NULL || c->no_memory) {
            return;
        }
        char path[PATH_MAX_LEN];
        mkpath(path, sizeof(path), "%s[%zu]", key, i);
        item(c, e, path);
    }
}

static void root_pair(struct pctx *c, const char *key, yaml_node_t *kn, yaml_node_t *vn, void *arg,
                      const char *path)
{
    (void)arg;
    if (strcmp(key, "run") == 0) {
        c->cfg->run.pos = pos_of(vn);
        parse_table(c, vn, path, run_fields, NTAB(run_fields), &c->cfg->run, "run");
    } else if (strcmp(key, "fabric") == 0) {
        parse_table(c, vn, path, fabric_fields, NTAB(fabric_fields), &c->cfg->fabric, "fabric");
    } else if (strcmp(key, "nodes") == 0) {
        parse_list(c, vn, path, parse_node);
    } else if (strcmp(key, "stages") == 0) {
        parse_list(c, vn, path, parse_stage);
    } else if (strcmp(key, "links") == 0) {
        parse_list(c, vn, path, parse_link);
    } else if (strncmp(key, "x-", 2) == 0) {
        /* Extension keys hold anchors for aliases elsewhere (as in docker-compose). */
    } else {
        perr(c, kn, path,
             "unknown top-level key (expected one of: run, fabric, nodes, stages, links, or x-... "
             "for anchors)");
    }
}

sdd_err sdd_config_parse(const char *yaml, size_t len, const char *file, sdd_config **out,
                         struct sdd_config_diag *diag)
{
    if (yaml == NULL || out == NULL) {
        return SDD_EINVAL;
    }
    if (file == NULL) {
        file = "<input>";
    }
    sdd_config *cfg = sdd_config_create();
    if (cfg == NULL) {
        return SDD_ENOMEM;
    }
    snprintf(cfg->file, sizeof(cfg->file), "%s", file);
    struct pctx c = {.file = cfg->file, .diag = diag, .cfg = cfg};
    yaml_parser_t parser;
    yaml_document_t doc;
    sdd_err err = SDD_OK;
    if (!yaml_parser_initialize(&parser)) {
        sdd_config_destroy(cfg);
        return SDD_ENOMEM;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)yaml, len);
    if (!yaml_parser_load(&parser, &doc)) {
        const char *ctx = parser.context != NULL ? parser.context : "";
        cfg_diag_add(diag, c.file, (uint32_t)parser.problem_mark.line + 1,
                     (uint32_t)parser.problem_mark.column + 1, "", "YAML syntax error: %s%s%s",
                     parser.problem != NULL ? parser.problem : "unknown", ctx[0] ? " " : "", ctx);
        err = parser.error == YAML_MEMORY_ERROR ? SDD_ENOMEM : SDD_EINVAL;
        goto out_parser;
    }
    c.doc = &doc;
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (root == NULL) {
        perr(&c, NULL, "", "empty document (expected a mapping with stages and links)");
    } else if (want_mapping(&c, root, "")) {
        each_pair(&c, root, "", root_pair, NULL);
    }
    yaml_document_delete(&doc);
    if (root != NULL) {
        /* A second document in the same stream would be silently ignored: refuse it. */
        yaml_document_t doc2;
        if (yaml_parser_load(&parser, &doc2)) {
            yaml_node_t *r2 = yaml_document_get_root_node(&doc2);
            if (r2 != NULL) {
                perr(&c, r2, "", "more than one YAML document (expected exactly one)");
            }
            yaml_document_delete(&doc2);
        } else {
            cfg_diag_add(diag, c.file, (uint32_t)parser.problem_mark.line + 1,
                         (uint32_t)parser.problem_mark.column + 1, "", "YAML syntax error: %s",
                         parser.problem != NULL ? parser.problem : "unknown");
            c.errors++;
        }
    }
    if (c.no_memory) {
        err = SDD_ENOMEM;
    } else if (c.errors > 0) {
        err = SDD_EINVAL;
    } else if ((err = sdd_config_fill_defaults(cfg)) == SDD_OK) {
        err = sdd_config_validate(cfg, diag);
    }
out_parser:
    yaml_parser_delete(&parser);
    if (err != SDD_OK) {
        sdd_config_destroy(cfg);
        return err;
    }
    *out = cfg;
    return SDD_OK;
}

sdd_err sdd_config_load(const char *path, sdd_config **out, struct sdd_config_diag *diag)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        cfg_diag_add(diag, path, 0, 0, "", "cannot read: %s", strerror(errno));
        return SDD_EIO;
    }
    char *buf = malloc(LOAD_MAX + 1);
    if (buf == NULL) {
        fclose(f);
        return SDD_ENOMEM;
    }
    size_t n = fread(buf, 1, LOAD_MAX + 1, f);
    bool bad = ferror(f) != 0;
    fclose(f);
    sdd_err err;
    if (bad) {
        cfg_diag_add(diag, path, 0, 0, "", "cannot read: input/output error");
        err = SDD_EIO;
    } else if (n > LOAD_MAX) {
        cfg_diag_add(diag, path, 0, 0, "", "file larger than %u bytes", LOAD_MAX);
        err = SDD_ETOOBIG;
    } else {
        err = sdd_config_parse(buf, n, path, out, diag);
    }
    free(buf);
    return err;
}

sdd_err sdd_config_load_default(sdd_config **out, struct sdd_config_diag *diag)
{
    const char *y = sdd_config_default_yaml();
    return sdd_config_parse(y, strlen(y), "<default>", out, diag);
}
