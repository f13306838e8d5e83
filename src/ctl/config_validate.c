/* Checks across entries of a topology: unique names, references that resolve (stage -> node,
 * link -> stage, coordinator -> node), links of a kind that makes sense, a graph without
 * cycles in which every stage gets data from a source and passes it on to a sink, core lists
 * within their node's, and hough-emu sources that can share one sector. Each problem is
 * reported at the position of the value that causes it (the entry's own position when it came
 * from a file, nothing when built in code). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config_internal.h"

struct vctx {
    const sdd_config *cfg;
    struct sdd_config_diag *diag;
    size_t errors;
};

static void verr(struct vctx *v, struct sdd_cfg_pos p, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void verr(struct vctx *v, struct sdd_cfg_pos p, const char *key, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    cfg_diag_vadd(v->diag, v->cfg->file[0] != '\0' ? v->cfg->file : NULL, p.line, p.col, key, fmt,
                  ap);
    va_end(ap);
    v->errors++;
}

/* The position of a value, or of its entry when the value had none (a default). */
static struct sdd_cfg_pos pick(struct sdd_cfg_pos value, struct sdd_cfg_pos entry)
{
    return value.line != 0 ? value : entry;
}

static bool is_sink(sdd_stage_type t)
{
    return t == SDD_STAGE_WRITER || t == SDD_STAGE_FEEDBACK;
}

static void check_nodes(struct vctx *v)
{
    const sdd_config *cfg = v->cfg;
    char key[96];
    for (size_t i = 0; i < cfg->n_nodes; i++) {
        const struct sdd_cfg_node *n = &cfg->nodes[i];
        snprintf(key, sizeof(key), "nodes[%zu].name", i);
        if (n->name[0] == '\0') {
            continue; /* the parser reported the missing name */
        }
        for (size_t j = 0; j < i; j++) {
            if (strcmp(cfg->nodes[j].name, n->name) == 0) {
                verr(v, pick(n->name_pos, n->pos), key,
                     "duplicate node name '%s' (first at %s[%zu])", n->name, "nodes", j);
                break;
            }
        }
        for (size_t j = 0; j < i && n->control_port != 0; j++) {
            if (cfg->nodes[j].control_port == n->control_port &&
                strcmp(cfg->nodes[j].host, n->host) == 0) {
                snprintf(key, sizeof(key), "nodes[%zu].control_port", i);
                verr(v, pick(n->port_pos, n->pos), key,
                     "nodes '%s' and '%s' both use %s:%u for control", cfg->nodes[j].name, n->name,
                     n->host, n->control_port);
                break;
            }
        }
        if (n->host[0] == '\0') {
            snprintf(key, sizeof(key), "nodes[%zu].host", i);
            verr(v, n->pos, key, "empty host");
        }
    }
    if (cfg->run.coordinator[0] != '\0' && sdd_config_find_node(cfg, cfg->run.coordinator) < 0) {
        verr(v, pick(cfg->run.coordinator_pos, cfg->run.pos), "run.coordinator",
             "unknown node '%s'", cfg->run.coordinator);
    }
}

static void check_stages(struct vctx *v)
{
    const sdd_config *cfg = v->cfg;
    char key[96];
    if (cfg->n_stages == 0) {
        verr(v, cfg->run.pos, "stages", "the topology has no stages");
    }
    for (size_t i = 0; i < cfg->n_stages; i++) {
        const struct sdd_cfg_stage *s = &cfg->stages[i];
        if (s->name[0] != '\0') {
            for (size_t j = 0; j < i; j++) {
                if (strcmp(cfg->stages[j].name, s->name) == 0) {
                    snprintf(key, sizeof(key), "stages[%zu].name", i);
                    verr(v, pick(s->name_pos, s->pos), key,
                         "duplicate stage name '%s' (first at stages[%zu])", s->name, j);
                    break;
                }
            }
        }
        snprintf(key, sizeof(key), "stages[%zu].node", i);
        long ni = -1;
        if (s->node[0] == '\0') {
            verr(v, s->pos, key, "missing: required when the topology has %zu nodes", cfg->n_nodes);
        } else if ((ni = sdd_config_find_node(cfg, s->node)) < 0) {
            verr(v, pick(s->node_pos, s->pos), key, "unknown node '%s'", s->node);
        }
        if (s->cores[0] != '\0' && ni >= 0 && cfg->nodes[ni].cores[0] != '\0') {
            uint64_t mine[16], theirs[16];
            if (sdd_config_parse_cpus(s->cores, mine) == SDD_OK &&
                sdd_config_parse_cpus(cfg->nodes[ni].cores, theirs) == SDD_OK) {
                for (int w = 0; w < 16; w++) {
                    uint64_t extra = mine[w] & ~theirs[w];
                    if (extra != 0) {
                        snprintf(key, sizeof(key), "stages[%zu].cores", i);
                        verr(v, pick(s->cores_pos, s->pos), key,
                             "CPU %d is not among node '%s' cores (%s)",
                             w * 64 + __builtin_ctzll(extra), s->node, cfg->nodes[ni].cores);
                        break;
                    }
                }
            }
        }
        if (s->type == SDD_STAGE_WRITER && s->writer.format != SDD_WRITER_NULL &&
            s->writer.path[0] == '\0') {
            snprintf(key, sizeof(key), "stages[%zu].path", i);
            verr(v, s->pos, key, "empty (or the default <output_dir>/<run>_<stage> too long)");
        }
        if (s->type == SDD_STAGE_WRITER && s->writer.format != SDD_WRITER_NULL) {
            for (size_t j = 0; j < i; j++) {
                const struct sdd_cfg_stage *o = &cfg->stages[j];
                if (o->type == SDD_STAGE_WRITER && o->writer.format != SDD_WRITER_NULL &&
                    strcmp(o->writer.path, s->writer.path) == 0 && strcmp(o->node, s->node) == 0) {
                    snprintf(key, sizeof(key), "stages[%zu].path", i);
                    verr(v, s->pos, key, "writers '%s' and '%s' would both write '%s'", o->name,
                         s->name, s->writer.path);
                    break;
                }
            }
        }
        if (s->type == SDD_STAGE_FEEDBACK && s->feedback.port != 0) {
            for (size_t j = 0; j < i; j++) {
                const struct sdd_cfg_stage *o = &cfg->stages[j];
                if (o->type == SDD_STAGE_FEEDBACK && o->feedback.port == s->feedback.port &&
                    strcmp(o->node, s->node) == 0) {
                    snprintf(key, sizeof(key), "stages[%zu].port", i);
                    verr(v, s->pos, key, "feedback stages '%s' and '%s' both use port %u on '%s'",
                         o->name, s->name, s->feedback.port, s->node);
                    break;
                }
            }
        }
    }
}

/* The nodes of one event builder must agree on its options (the builder checks them at
 * connect): every ru and bu stage gives what the first one gives. */
static void check_evb_stages(struct vctx *v)
{
    const sdd_config *cfg = v->cfg;
    const struct sdd_cfg_stage *first = NULL;
    char key[96];
    for (size_t i = 0; i < cfg->n_stages; i++) {
        const struct sdd_cfg_stage *s = &cfg->stages[i];
        if (s->type != SDD_STAGE_RU && s->type != SDD_STAGE_BU) {
            continue;
        }
        if (first == NULL) {
            first = s;
            continue;
        }
        const struct sdd_cfg_evb *a = &s->evb, *b = &first->evb;
        const char *what = a->bulk_size != b->bulk_size         ? "bulk_size"
                           : a->credits != b->credits           ? "credits"
                           : a->heartbeat_ms != b->heartbeat_ms ? "heartbeat_ms"
                           : a->timeout_ms != b->timeout_ms     ? "timeout_ms"
                           : a->transfer != b->transfer         ? "transfer"
                                                                : NULL;
        if (what != NULL) {
            snprintf(key, sizeof(key), "stages[%zu].%s", i, what);
            verr(v, s->pos, key,
                 "must be the same in every ru and bu stage ('%s' differs from '%s')", s->name,
                 first->name);
        }
    }
}

/* hough-emu sources split the six barrel layers of one sector event between them, so they must
 * generate the same events (one seed, one pileup level) and there can be at most one per
 * layer. Mismatches are reported against the first hough-emu source. */
#define HOUGH_EMU_MAX 6

static void check_hough_sources(struct vctx *v)
{
    const sdd_config *cfg = v->cfg;
    const struct sdd_cfg_stage *first = NULL;
    size_t count = 0;
    char key[96], who[SDD_CFG_NAME_MAX + 16];
    for (size_t i = 0; i < cfg->n_stages; i++) {
        const struct sdd_cfg_stage *s = &cfg->stages[i];
        if (s->type != SDD_STAGE_SOURCE || s->source.kind != SDD_SRC_HOUGH_EMU) {
            continue;
        }
        if (++count == HOUGH_EMU_MAX + 1) {
            size_t total = count;
            for (size_t j = i + 1; j < cfg->n_stages; j++) {
                const struct sdd_cfg_stage *o = &cfg->stages[j];
                if (o->type == SDD_STAGE_SOURCE && o->source.kind == SDD_SRC_HOUGH_EMU) {
                    total++;
                }
            }
            snprintf(key, sizeof(key), "stages[%zu]", i);
            verr(v, s->pos, key,
                 "%zu hough-emu sources; at most %d (they split the %d barrel layers of one "
                 "sector, one layer at least each)",
                 total, HOUGH_EMU_MAX, HOUGH_EMU_MAX);
        }
        if (first == NULL) {
            first = s;
            if (s->name[0] != '\0') {
                snprintf(who, sizeof(who), "%s", s->name);
            } else {
                snprintf(who, sizeof(who), "stages[%zu]", i);
            }
            continue;
        }
        if (s->source.seed != first->source.seed) {
            snprintf(key, sizeof(key), "stages[%zu].seed", i);
            verr(v, pick(s->source.seed_pos, s->pos), key,
                 "hough-emu sources split one sector between them and must share seed and pileup "
                 "(%s has seed %llu)",
                 who, (unsigned long long)first->source.seed);
        }
        if (s->source.pileup != first->source.pileup) {
            snprintf(key, sizeof(key), "stages[%zu].pileup", i);
            verr(v, pick(s->source.pileup_pos, s->pos), key,
                 "hough-emu sources split one sector between them and must share seed and pileup "
                 "(%s has pileup %g)",
                 who, (double)first->source.pileup);
        }
    }
}

/* Link checks; fills in[]/out[] counts and the resolved ends (-1 when unknown). */
static void check_links(struct vctx *v, long *from, long *to, size_t *in, size_t *out)
{
    const sdd_config *cfg = v->cfg;
    char key[96];
    for (size_t i = 0; i < cfg->n_links; i++) {
        const struct sdd_cfg_link *l = &cfg->links[i];
        from[i] = l->from[0] != '\0' ? sdd_config_find_stage(cfg, l->from) : -1;
        to[i] = l->to[0] != '\0' ? sdd_config_find_stage(cfg, l->to) : -1;
        if (l->from[0] != '\0' && from[i] < 0) {
            snprintf(key, sizeof(key), "links[%zu].from", i);
            verr(v, pick(l->from_pos, l->pos), key, "unknown stage '%s'", l->from);
        }
        if (l->to[0] != '\0' && to[i] < 0) {
            snprintf(key, sizeof(key), "links[%zu].to", i);
            verr(v, pick(l->to_pos, l->pos), key, "unknown stage '%s'", l->to);
        }
        if (from[i] < 0 || to[i] < 0) {
            continue;
        }
        const struct sdd_cfg_stage *a = &cfg->stages[from[i]], *b = &cfg->stages[to[i]];
        bool bad = false;
        if (from[i] == to[i]) {
            snprintf(key, sizeof(key), "links[%zu].to", i);
            verr(v, pick(l->to_pos, l->pos), key, "stage '%s' linked to itself", l->to);
            bad = true;
        } else if (b->type == SDD_STAGE_SOURCE) {
            snprintf(key, sizeof(key), "links[%zu].to", i);
            verr(v, pick(l->to_pos, l->pos), key, "'%s' is a source and takes no input", l->to);
            bad = true;
        } else if (is_sink(a->type)) {
            snprintf(key, sizeof(key), "links[%zu].from", i);
            verr(v, pick(l->from_pos, l->pos), key, "'%s' is a %s (a sink) and has no output",
                 l->from, sdd_stage_type_name(a->type));
            bad = true;
        } else if (a->type == SDD_STAGE_RU && b->type != SDD_STAGE_BU) {
            snprintf(key, sizeof(key), "links[%zu].to", i);
            verr(v, pick(l->to_pos, l->pos), key,
                 "readout unit '%s' may only feed bu stages, not '%s' (%s)", l->from, l->to,
                 sdd_stage_type_name(b->type));
            bad = true;
        } else if (b->type == SDD_STAGE_BU && a->type != SDD_STAGE_RU) {
            snprintf(key, sizeof(key), "links[%zu].from", i);
            verr(v, pick(l->from_pos, l->pos), key,
                 "builder unit '%s' takes input only from ru stages, not '%s' (%s)", l->to, l->from,
                 sdd_stage_type_name(a->type));
            bad = true;
        }
        if (l->transport == SDD_LINK_RING && strcmp(a->node, b->node) != 0) {
            snprintf(key, sizeof(key), "links[%zu].transport", i);
            verr(v, pick(l->transport_pos, l->pos), key,
                 "a ring joins stages of one node; '%s' is on '%s' and '%s' on '%s' (use fabric)",
                 l->from, a->node, l->to, b->node);
        }
        for (size_t j = 0; j < i && !bad; j++) {
            if (from[j] == from[i] && to[j] == to[i]) {
                snprintf(key, sizeof(key), "links[%zu]", i);
                verr(v, l->pos, key, "duplicate link '%s' -> '%s' (first at links[%zu])", l->from,
                     l->to, j);
                bad = true;
            }
        }
        if (bad) {
            from[i] = to[i] = -1; /* left out of the graph checks */
        } else {
            out[from[i]]++;
            in[to[i]]++;
        }
    }
}

/* Kahn's algorithm on the good links (bad ones have from = to = -1): stages that never reach
 * in-degree 0 lie on a cycle or downstream of one; report one link of one cycle. */
static void check_cycles(struct vctx *v, const long *from, const long *to, const size_t *in)
{
    const sdd_config *cfg = v->cfg;
    size_t ns = cfg->n_stages, nl = cfg->n_links;
    size_t *indeg = calloc(ns + 1, sizeof(*indeg));
    size_t *queue = calloc(ns + 1, sizeof(*queue));
    bool *done = calloc(ns + 1, sizeof(*done));
    if (indeg == NULL || queue == NULL || done == NULL) {
        goto out_free;
    }
    memcpy(indeg, in, ns * sizeof(*indeg));
    size_t qh = 0, qt = 0;
    for (size_t s = 0; s < ns; s++) {
        if (indeg[s] == 0) {
            queue[qt++] = s;
        }
    }
    while (qh < qt) {
        size_t s = queue[qh++];
        done[s] = true;
        for (size_t i = 0; i < nl; i++) {
            if (from[i] == (long)s && to[i] >= 0 && indeg[to[i]] > 0) {
                if (--indeg[to[i]] == 0) {
                    queue[qt++] = (size_t)to[i];
                }
            }
        }
    }
    if (qt == ns) {
        goto out_free;
    }
    /* Some stages never reached in-degree 0: each still has a predecessor that is blocked too.
     * Walk backwards along such links: within ns steps the walk comes back to a stage, and the
     * link it left that stage by lies on the cycle. */
    size_t cur = ns;
    for (size_t s = 0; s < ns; s++) {
        if (!done[s]) {
            cur = s;
            break;
        }
    }
    size_t *via = queue; /* reuse: link each stage was left by, nl = not visited */
    for (size_t s = 0; s <= ns; s++) {
        via[s] = nl;
    }
    while (cur < ns && via[cur] == nl) {
        size_t next = ns;
        for (size_t i = 0; i < nl; i++) {
            if (to[i] == (long)cur && from[i] >= 0 && !done[from[i]]) {
                next = (size_t)from[i];
                via[cur] = i;
                break;
            }
        }
        cur = next;
    }
    if (cur < ns && via[cur] < nl) {
        size_t i = via[cur];
        char key[64];
        snprintf(key, sizeof(key), "links[%zu]", i);
        verr(v, cfg->links[i].pos, key,
             "link '%s' -> '%s' closes a cycle (links must not loop back; results go back "
             "through a feedback stage)",
             cfg->links[i].from, cfg->links[i].to);
    }
out_free:
    free(indeg);
    free(queue);
    free(done);
}

sdd_err sdd_config_validate(const sdd_config *cfg, struct sdd_config_diag *diag)
{
    struct vctx v = {cfg, diag, 0};
    check_nodes(&v);
    check_stages(&v);
    check_evb_stages(&v);
    check_hough_sources(&v);
    size_t ns = cfg->n_stages, nl = cfg->n_links;
    long *from = calloc(nl + 1, sizeof(*from)), *to = calloc(nl + 1, sizeof(*to));
    size_t *in = calloc(ns + 1, sizeof(*in)), *out = calloc(ns + 1, sizeof(*out));
    sdd_err err = SDD_OK;
    if (from == NULL || to == NULL || in == NULL || out == NULL) {
        err = SDD_ENOMEM;
        goto out_free;
    }
    check_links(&v, from, to, in, out);
    char key[64];
    for (size_t s = 0; s < ns; s++) {
        const struct sdd_cfg_stage *st = &cfg->stages[s];
        snprintf(key, sizeof(key), "stages[%zu]", s);
        if (st->type != SDD_STAGE_SOURCE && in[s] == 0) {
            verr(&v, st->pos, key, "%s '%s' has no input link (every chain starts at a source)",
                 sdd_stage_type_name(st->type), st->name);
        }
        if (!is_sink(st->type) && out[s] == 0) {
            verr(&v, st->pos, key,
                 "%s '%s' has no output link (every chain ends in a writer or feedback stage)",
                 sdd_stage_type_name(st->type), st->name);
        }
    }
    check_cycles(&v, from, to, in);
    err = v.errors > 0 ? SDD_EINVAL : SDD_OK;
out_free:
    free(from);
    free(to);
    free(in);
    free(out);
    return err;
}
