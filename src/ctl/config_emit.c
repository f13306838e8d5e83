/* struct sdd_config -> YAML text, every key written (defaults included) in the order of
 * docs/config.md, so that `sddaq config show` tells exactly what a run will use and its output
 * parses back to the same config. Strings are double-quoted whenever a plain scalar could be
 * read as something else. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config_internal.h"
#include "sbuf.h"

/* A plain scalar is safe when it is a name-like word that YAML would not read as a bool,
 * null or number. */
static bool plain_ok(const char *s)
{
    static const char *const special[] = {"true", "false", "yes", "no", "on", "off",
                                          "null", "y",     "n",   "~",  NULL};
    if (s[0] == '\0' || (s[0] >= '0' && s[0] <= '9') || s[0] == '-' || s[0] == '.') {
        return false;
    }
    for (const char *q = s; *q != '\0'; q++) {
        char c = *q;
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '_' || c == '-' || c == '.' || c == '/';
        if (!ok) {
            return false;
        }
    }
    for (int i = 0; special[i] != NULL; i++) {
        if (strcasecmp(s, special[i]) == 0) {
            return false;
        }
    }
    return true;
}

static void put_str(struct sbuf *b, const char *s)
{
    if (plain_ok(s)) {
        sbuf_put(b, "%s", s);
        return;
    }
    sbuf_put(b, "\"");
    for (const unsigned char *q = (const unsigned char *)s; *q != '\0'; q++) {
        if (*q == '"' || *q == '\\') {
            sbuf_put(b, "\\%c", *q);
        } else if (*q < 0x20 || *q == 0x7f) {
            sbuf_put(b, "\\x%02x", *q);
        } else {
            sbuf_put(b, "%c", *q);
        }
    }
    sbuf_put(b, "\"");
}

static void put_size(struct sbuf *b, uint64_t v)
{
    if (v != 0 && v % (1u << 30) == 0) {
        sbuf_put(b, "%lluG", (unsigned long long)(v >> 30));
    } else if (v != 0 && v % (1u << 20) == 0) {
        sbuf_put(b, "%lluM", (unsigned long long)(v >> 20));
    } else if (v != 0 && v % 1024 == 0) {
        sbuf_put(b, "%lluK", (unsigned long long)(v >> 10));
    } else {
        sbuf_put(b, "%llu", (unsigned long long)v);
    }
}

/* Shortest text that reads back as the same double. */
static void put_double(struct sbuf *b, double v)
{
    char tmp[40];
    for (int prec = 6; prec <= 17; prec++) {
        snprintf(tmp, sizeof(tmp), "%.*g", prec, v);
        if (strtod(tmp, NULL) == v) {
            break;
        }
    }
    sbuf_put(b, "%s", tmp);
}

/* Shortest text that reads back as the same float (read as the parser reads it: strtod, then
 * rounded to float). */
static void put_float(struct sbuf *b, float v)
{
    char tmp[40];
    for (int prec = 6; prec <= 9; prec++) {
        snprintf(tmp, sizeof(tmp), "%.*g", prec, (double)v);
        if ((float)strtod(tmp, NULL) == v) {
            break;
        }
    }
    sbuf_put(b, "%s", tmp);
}

static void emit_stage(struct sbuf *b, const struct sdd_cfg_stage *s)
{
    sbuf_put(b, "  - name: ");
    put_str(b, s->name);
    sbuf_put(b, "\n    type: %s\n    node: ", sdd_stage_type_name(s->type));
    put_str(b, s->node);
    sbuf_put(b, "\n    cores: ");
    put_str(b, s->cores);
    sbuf_put(b, "\n");
    switch (s->type) {
    case SDD_STAGE_SOURCE: {
        const struct sdd_cfg_source *c = &s->source;
        sbuf_put(b, "    kind: %s\n    streams: %u\n    rate: ", sdd_source_kind_name(c->kind),
                 c->streams);
        put_double(b, c->rate);
        sbuf_put(b, "\n    seed: %llu\n", (unsigned long long)c->seed);
        if (c->kind == SDD_SRC_UDP) {
            sbuf_put(b, "    listen: ");
            put_str(b, c->listen);
            sbuf_put(b, "\n");
        }
        if (c->kind == SDD_SRC_UDP || c->kind == SDD_SRC_EMU_STREAM ||
            c->kind == SDD_SRC_EMU_JUNGFRAU) {
            sbuf_put(b, "    frame:\n");
            if (c->kind == SDD_SRC_UDP) {
                static const char *const formats[] = {"stream", "jungfrau", "na62"};
                sbuf_put(b, "      format: %s\n", formats[c->frame.format % 3]);
            }
            bool fixed = c->kind == SDD_SRC_EMU_JUNGFRAU ||
                         (c->kind == SDD_SRC_UDP && c->frame.format != SDD_FRAME_STREAM);
            if (!fixed) {
                sbuf_put(b, "      packets: %u\n      payload: ", c->frame.packets);
                put_size(b, c->frame.payload);
                sbuf_put(b, "\n");
            }
            static const char *const missing[] = {"drop", "pad", "partial"};
            sbuf_put(b, "      missing: %s\n", missing[c->frame.missing % 3]);
            if (c->kind != SDD_SRC_UDP) {
                sbuf_put(b, "      loss: ");
                put_double(b, c->frame.loss);
                sbuf_put(b, "\n");
            }
        }
        if (c->kind == SDD_SRC_HOUGH_EMU) {
            sbuf_put(b, "    pileup: ");
            put_float(b, c->pileup);
            sbuf_put(b, "\n");
        }
        if (c->kind == SDD_SRC_EVB_EMU) {
            sbuf_put(b, "    fragment:\n      dist: %s\n      size: ",
                     sdd_frag_dist_name(c->fragment.dist));
            put_size(b, c->fragment.size);
            if (c->fragment.min != 0 || c->fragment.max != 0) {
                sbuf_put(b, "\n      min: ");
                put_size(b, c->fragment.min);
                sbuf_put(b, "\n      max: ");
                put_size(b, c->fragment.max);
            }
            sbuf_put(b, "\n      sigma: ");
            put_double(b, c->fragment.sigma);
            sbuf_put(b, "\n");
        }
        break;
    }
    case SDD_STAGE_RU:
    case SDD_STAGE_BU:
        sbuf_put(b, "    bulk_size: %u\n    credits: ", s->evb.bulk_size);
        if (s->evb.credits == SDD_CFG_AUTO) {
            sbuf_put(b, "auto");
        } else {
            sbuf_put(b, "%u", s->evb.credits);
        }
        sbuf_put(b, "\n    heartbeat_ms: %u\n    timeout_ms: %u\n    transfer: %s\n",
                 s->evb.heartbeat_ms, s->evb.timeout_ms, cfg_transfer_names[s->evb.transfer]);
        break;
    case SDD_STAGE_PROCESS:
        sbuf_put(b, "    algorithm: %s\n", sdd_algo_name(s->process.algorithm));
        if (s->process.algorithm == SDD_ALGO_PRESCALE) {
            sbuf_put(b, "    factor: %u\n", s->process.factor);
        }
        if (s->process.algorithm == SDD_ALGO_HOUGH) {
            sbuf_put(b, "    min_pt: ");
            put_float(b, s->process.min_pt);
            sbuf_put(b, "\n");
        }
        sbuf_put(b, "    threads: %u\n", s->process.threads);
        if (s->process.algorithm == SDD_ALGO_RICH) {
            const struct sdd_cfg_rich_finder *f = &s->process.finder;
            sbuf_put(b, "    split: %u\n    finder:\n      method: %s\n      fit: %s\n",
                     s->process.split, cfg_rich_method_names[f->method != 0],
                     cfg_rich_fit_names[f->fit != 0]);
            sbuf_put(b, "      multi_ring: %s\n      window: ", cfg_off_on_names[f->multi_ring != 0]);
            put_float(b, f->window);
            sbuf_put(b, "\n      threshold: %u\n      min_hits: %u\n      claim: ", f->threshold,
                     f->min_hits);
            put_float(b, f->claim);
            sbuf_put(b, "\n      max_rms: ");
            put_float(b, f->max_rms);
            sbuf_put(b, "\n      gpu: %s\n      inflight: ", cfg_off_on_names[f->gpu != 0]);
            if (f->inflight == SDD_CFG_AUTO) {
                sbuf_put(b, "auto\n");
            } else {
                sbuf_put(b, "%u\n", f->inflight);
            }
        }
        break;
    case SDD_STAGE_WRITER:
        sbuf_put(b, "    format: %s\n    path: ", sdd_writer_format_name(s->writer.format));
        put_str(b, s->writer.path);
        sbuf_put(b, "\n");
        break;
    case SDD_STAGE_FEEDBACK:
        sbuf_put(b, "    size: ");
        put_size(b, s->feedback.size);
        sbuf_put(b, "\n    port: %u\n", s->feedback.port);
        break;
    default:
        break;
    }
}

sdd_err sdd_config_emit(const sdd_config *cfg, char **out, size_t *len)
{
    struct sbuf b = {malloc(4096), 0, 4096, false};
    if (b.p == NULL) {
        return SDD_ENOMEM;
    }
    b.p[0] = '\0';
    sbuf_put(&b, "# sddaq topology (%s), every default filled in\nrun:\n  name: ",
             cfg->file[0] != '\0' ? cfg->file : "built in code");
    put_str(&b, cfg->run.name);
    sbuf_put(&b, "\n  duration: ");
    put_double(&b, cfg->run.duration_s < 0 ? 0 : cfg->run.duration_s);
    sbuf_put(&b, "\n  events: %llu\n  output_dir: ", (unsigned long long)cfg->run.events);
    put_str(&b, cfg->run.output_dir);
    sbuf_put(&b, "\n  coordinator: ");
    put_str(&b, cfg->run.coordinator);
    sbuf_put(&b, "\nfabric:\n  provider: %s\n  buffer_size: ",
             sdd_cfg_provider_name(cfg->fabric.provider));
    put_size(&b, cfg->fabric.buffer_size);
    sbuf_put(&b, "\n  buffers: %u\n  credits: %u\n  port: %u\nnodes:\n", cfg->fabric.buffers,
             cfg->fabric.credits, cfg->fabric.port);
    for (size_t i = 0; i < cfg->n_nodes; i++) {
        const struct sdd_cfg_node *n = &cfg->nodes[i];
        sbuf_put(&b, "  - name: ");
        put_str(&b, n->name);
        sbuf_put(&b, "\n    host: ");
        put_str(&b, n->host);
        sbuf_put(&b, "\n    control_port: %u\n    cores: ", n->control_port);
        put_str(&b, n->cores);
        sbuf_put(&b, "\n");
    }
    sbuf_put(&b, "stages:%s\n", cfg->n_stages == 0 ? " []" : "");
    for (size_t i = 0; i < cfg->n_stages; i++) {
        emit_stage(&b, &cfg->stages[i]);
    }
    sbuf_put(&b, "links:%s\n", cfg->n_links == 0 ? " []" : "");
    for (size_t i = 0; i < cfg->n_links; i++) {
        const struct sdd_cfg_link *l = &cfg->links[i];
        sbuf_put(&b, "  - from: ");
        put_str(&b, l->from);
        sbuf_put(&b, "\n    to: ");
        put_str(&b, l->to);
        sbuf_put(&b, "\n    transport: %s\n    depth: %u\n    credits: %u\n",
                 sdd_link_transport_name(l->transport), l->depth, l->credits);
    }
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
