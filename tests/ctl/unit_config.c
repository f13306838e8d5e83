/* Topology config: the embedded default and the examples parse and validate; show -> parse
 * gives back the same config; every kind of bad config is refused with a message that names
 * the file, line, column and key; all problems are reported, not only the first. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#include "sddaq/config.h"
#include "sddaq/evb.h"
#include "sddaq/rich.h"

static void dump(const struct sdd_config_diag *d)
{
    for (size_t i = 0; i < d->stored; i++) {
        fprintf(stderr, "    got: %s\n", d->errors[i].text);
    }
}

/* Parse yaml (file name t.yaml); it must fail and one message must start with "t.yaml:" +
 * where + ": " and contain msg. Returns the number of problems found. */
static size_t expect_error_at(int line, const char *yaml, const char *where, const char *msg)
{
    struct sdd_config_diag d = {0};
    sdd_config *cfg = NULL;
    sdd_err err = sdd_config_parse(yaml, strlen(yaml), "t.yaml", &cfg, &d);
    char prefix[256];
    snprintf(prefix, sizeof(prefix), "t.yaml:%s%s ", where[0] != '\0' ? where : "",
             where[0] != '\0' ? ":" : "");
    bool found = false;
    for (size_t i = 0; i < d.stored; i++) {
        if (strncmp(d.errors[i].text, prefix, strlen(prefix)) == 0 &&
            strstr(d.errors[i].text, msg) != NULL) {
            found = true;
        }
    }
    if (err != SDD_EINVAL || cfg != NULL || !found) {
        fprintf(stderr, "unit_config.c:%d: expected EINVAL and '%s...%s', got %s\n", line, prefix,
                msg, sdd_errname(err));
        dump(&d);
        check_failed++;
    } else {
        check_passed++;
    }
    size_t n = d.count;
    sdd_config_destroy(cfg);
    sdd_config_diag_fini(&d);
    return n;
}
#define EXPECT_ERROR(yaml, where, msg) expect_error_at(__LINE__, yaml, where, msg)

static sdd_config *parse_ok(const char *yaml, const char *file)
{
    struct sdd_config_diag d = {0};
    sdd_config *cfg = NULL;
    sdd_err err = sdd_config_parse(yaml, strlen(yaml), file, &cfg, &d);
    CHECK_OK(err);
    if (err != SDD_OK) {
        dump(&d);
    }
    sdd_config_diag_fini(&d);
    return cfg;
}

static char *read_text(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        return NULL;
    }
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    return strdup(buf);
}

/* The repository root, from this file's path. */
static void repo_path(char *out, size_t len, const char *rel)
{
    const char *me = __FILE__;
    const char *cut = strstr(me, "tests/ctl/unit_config.c");
    int root = cut != NULL ? (int)(cut - me) : 0;
    snprintf(out, len, "%.*s%s", root, me, rel);
}

/* emit(cfg) parses back to a config whose emit is the same text. */
static void check_round_trip(const sdd_config *cfg)
{
    char *a = NULL, *b = NULL;
    CHECK_OK(sdd_config_emit(cfg, &a, NULL));
    CHECK_REQUIRE(a != NULL);
    sdd_config *again = parse_ok(a, cfg->file);
    CHECK_REQUIRE(again != NULL);
    CHECK_OK(sdd_config_emit(again, &b, NULL));
    CHECK(b != NULL && strcmp(a, b) == 0);
    if (b != NULL && strcmp(a, b) != 0) {
        fprintf(stderr, "first:\n%s\nsecond:\n%s\n", a, b);
    }
    CHECK_EQ(again->n_stages, cfg->n_stages);
    CHECK_EQ(again->n_links, cfg->n_links);
    CHECK_EQ(again->n_nodes, cfg->n_nodes);
    for (size_t i = 0; i < cfg->n_stages && i < again->n_stages; i++) {
        const struct sdd_cfg_stage *x = &cfg->stages[i], *y = &again->stages[i];
        CHECK(strcmp(x->name, y->name) == 0 && x->type == y->type && strcmp(x->node, y->node) == 0);
        if (x->type == SDD_STAGE_SOURCE) {
            CHECK(x->source.kind == y->source.kind && x->source.rate == y->source.rate &&
                  x->source.seed == y->source.seed &&
                  x->source.fragment.size == y->source.fragment.size &&
                  x->source.fragment.sigma == y->source.fragment.sigma);
            if (x->source.kind == SDD_SRC_HOUGH_EMU) {
                CHECK(x->source.pileup == y->source.pileup);
            }
            if (x->source.kind == SDD_SRC_EMU_STREAM || x->source.kind == SDD_SRC_UDP) {
                CHECK(memcmp(&x->source.frame, &y->source.frame, sizeof(x->source.frame)) == 0);
            }
        }
    }
    free(a);
    free(b);
    sdd_config_destroy(again);
}

static void test_default(void)
{
    struct sdd_config_diag d = {0};
    sdd_config *cfg = NULL;
    CHECK_OK(sdd_config_load_default(&cfg, &d));
    CHECK_EQ(d.count, 0);
    CHECK_REQUIRE(cfg != NULL);
    CHECK(strcmp(cfg->file, "<default>") == 0);
    CHECK_EQ(cfg->n_nodes, 1);
    CHECK_EQ(cfg->n_stages, 9);
    CHECK_EQ(cfg->n_links, 10);
    CHECK(cfg->run.duration_s == 10.0);
    CHECK(strcmp(cfg->run.coordinator, "local") == 0);
    long t = sdd_config_find_stage(cfg, "trigger");
    CHECK_REQUIRE(t >= 0);
    CHECK_EQ(cfg->stages[t].type, SDD_STAGE_PROCESS);
    CHECK_EQ(cfg->stages[t].process.algorithm, SDD_ALGO_HOUGH);
    CHECK(cfg->stages[t].process.min_pt == 20.0f);
    long w = sdd_config_find_stage(cfg, "writer");
    CHECK_REQUIRE(w >= 0);
    CHECK(strcmp(cfg->stages[w].writer.path, "runs/default_writer.h5") == 0);
    long r = sdd_config_find_stage(cfg, "results");
    CHECK(r >= 0 && cfg->stages[r].type == SDD_STAGE_FEEDBACK);
    long ru = sdd_config_find_stage(cfg, "ru0");
    /* auto: fabric.credits (16), fewer where the bulks would pass the cache (run_evb.c) */
    CHECK(ru >= 0 && cfg->stages[ru].evb.credits == SDD_CFG_AUTO &&
          cfg->stages[ru].evb.bulk_size == 64);
    CHECK(ru >= 0 && cfg->stages[ru].evb.transfer == SDD_EVB_TRANSFER_AUTO);
    /* One tracker sector read out by two boards: both hough-emu, same seed and pileup. */
    for (int k = 0; k < 2; k++) {
        long si = sdd_config_find_stage(cfg, k == 0 ? "src0" : "src1");
        CHECK_REQUIRE(si >= 0);
        const struct sdd_cfg_source *src = &cfg->stages[si].source;
        CHECK_EQ(src->kind, SDD_SRC_HOUGH_EMU);
        CHECK_EQ(src->seed, 1);
        CHECK(src->pileup == 140.0f);
        CHECK_EQ(src->streams, 1);
    }
    for (size_t i = 0; i < cfg->n_links; i++) {
        CHECK_EQ(cfg->links[i].transport, SDD_LINK_RING); /* one node */
        CHECK_EQ(cfg->links[i].credits, 16);
    }
    check_round_trip(cfg);
    sdd_config_destroy(cfg);
    sdd_config_diag_fini(&d);

    /* The compiled-in text is the example file, word for word. */
    char path[1024];
    repo_path(path, sizeof(path), "examples/topologies/default.yaml");
    char *text = read_text(path);
    CHECK(text != NULL && strcmp(text, sdd_config_default_yaml()) == 0);
    free(text);
}

static void test_examples(void)
{
    static const char *const files[] = {"default.yaml", "readout-rich.yaml", "two-host-evb.yaml"};
    for (size_t i = 0; i < 3; i++) {
        char path[1024], rel[128];
        snprintf(rel, sizeof(rel), "examples/topologies/%s", files[i]);
        repo_path(path, sizeof(path), rel);
        struct sdd_config_diag d = {0};
        sdd_config *cfg = NULL;
        CHECK_OK(sdd_config_load(path, &cfg, &d));
        dump(&d);
        if (cfg != NULL) {
            check_round_trip(cfg);
        }
        sdd_config_destroy(cfg);
        sdd_config_diag_fini(&d);
    }
    /* The two-host example: the cross-host links resolved to fabric, local ones to rings. */
    char path[1024];
    repo_path(path, sizeof(path), "examples/topologies/two-host-evb.yaml");
    sdd_config *cfg = NULL;
    CHECK_OK(sdd_config_load(path, &cfg, NULL));
    CHECK_REQUIRE(cfg != NULL);
    CHECK_EQ(cfg->links[2].transport, SDD_LINK_RING);   /* ruA -> buA */
    CHECK_EQ(cfg->links[3].transport, SDD_LINK_FABRIC); /* ruA -> buB */
    CHECK(strcmp(cfg->run.coordinator, "hostA") == 0);
    CHECK_EQ(cfg->stages[0].source.fragment.dist, SDD_FRAG_UNIFORM);
    CHECK_EQ(cfg->stages[0].source.fragment.min, 4096);
    CHECK_EQ(cfg->stages[0].source.fragment.max, 12288);
    CHECK_EQ(cfg->fabric.buffer_size, 256 * 1024);
    sdd_config_destroy(cfg);
    /* The readout example: events set, no duration; the prescale factor read. */
    repo_path(path, sizeof(path), "examples/topologies/readout-rich.yaml");
    CHECK_OK(sdd_config_load(path, &cfg, NULL));
    CHECK_REQUIRE(cfg != NULL);
    CHECK(cfg->run.duration_s == 0.0 && cfg->run.events == 1000000);
    long m = sdd_config_find_stage(cfg, "minbias");
    CHECK(m >= 0 && cfg->stages[m].process.factor == 100);
    CHECK(strcmp(cfg->stages[0].source.listen, "0.0.0.0:5400") == 0);
    sdd_config_destroy(cfg);
}

/* A minimal good chain, for variations. */
#define GOOD_STAGES       \
    "stages:\n"           \
    "  - name: s\n"       \
    "    type: source\n"  \
    "  - name: p\n"       \
    "    type: process\n" \
    "  - name: w\n"       \
    "    type: writer\n"  \
    "    format: null\n"
#define GOOD_LINKS           \
    "links:\n"               \
    "  - {from: s, to: p}\n" \
    "  - {from: p, to: w}\n"

static void test_minimal(void)
{
    sdd_config *cfg = parse_ok(GOOD_STAGES GOOD_LINKS, "t.yaml");
    CHECK_REQUIRE(cfg != NULL);
    CHECK(strcmp(cfg->nodes[0].name, "local") == 0);
    CHECK(strcmp(cfg->stages[0].node, "local") == 0);
    CHECK_EQ(cfg->stages[2].writer.format, SDD_WRITER_NULL);
    CHECK_EQ(cfg->stages[0].source.kind, SDD_SRC_EVB_EMU);
    CHECK_EQ(cfg->links[0].pos.line, 10);
    CHECK_EQ(cfg->links[0].pos.col, 5);
    check_round_trip(cfg);
    sdd_config_destroy(cfg);
    /* Built in code, the same. */
    sdd_config *c = sdd_config_create();
    CHECK_REQUIRE(c != NULL);
    struct sdd_cfg_stage *s = sdd_config_add_stage(c, SDD_STAGE_SOURCE);
    snprintf(s->name, sizeof(s->name), "a");
    s = sdd_config_add_stage(c, SDD_STAGE_WRITER);
    snprintf(s->name, sizeof(s->name), "b");
    struct sdd_cfg_link *l = sdd_config_add_link(c);
    snprintf(l->from, sizeof(l->from), "a");
    snprintf(l->to, sizeof(l->to), "b");
    CHECK_OK(sdd_config_fill_defaults(c));
    CHECK_OK(sdd_config_validate(c, NULL));
    CHECK(strcmp(c->stages[1].writer.path, "runs/sddaq_b.h5") == 0);
    check_round_trip(c);
    /* Code-built problems have no position: "file: key: message". */
    snprintf(l->to, sizeof(l->to), "zz");
    struct sdd_config_diag d = {0};
    CHECK_EQ(sdd_config_validate(c, &d), SDD_EINVAL);
    CHECK(d.stored >= 1 &&
          strcmp(d.errors[0].text, "<input>: links[0].to: unknown stage 'zz'") == 0);
    sdd_config_diag_fini(&d);
    sdd_config_destroy(c);
}

/* An event builder's credits: a number is kept, `auto` and no key are auto; both round-trip. */
static void test_evb_credits(void)
{
    static const char *const given[] = {"credits: 8, ", "credits: auto, ", ""};
    static const uint32_t want[] = {8, SDD_CFG_AUTO, SDD_CFG_AUTO};
    for (int k = 0; k < 3; k++) {
        char yaml[512];
        snprintf(yaml, sizeof(yaml),
                 "stages:\n  - {name: s, type: source}\n  - {name: r, type: ru, %sbulk_size: 4}\n"
                 "  - {name: b, type: bu, %sbulk_size: 4}\n  - {name: w, type: writer, format: "
                 "null}\nlinks:\n  - {from: s, to: r}\n  - {from: r, to: b}\n"
                 "  - {from: b, to: w}\n",
                 given[k], given[k]);
        sdd_config *cfg = parse_ok(yaml, "t.yaml");
        CHECK_REQUIRE(cfg != NULL);
        CHECK_EQ(cfg->stages[1].evb.credits, want[k]);
        CHECK_EQ(cfg->stages[2].evb.credits, want[k]);
        check_round_trip(cfg);
        sdd_config_destroy(cfg);
    }
}

/* A rich stage's ring finder: defaults, every key set, and the show -> parse round trip. */
static void test_rich_finder(void)
{
    sdd_config *cfg = parse_ok("stages:\n"
                               "  - {name: s, type: source, kind: emu-na62}\n"
                               "  - {name: r, type: process, algorithm: rich}\n"
                               "  - {name: t, type: process, algorithm: rich, split: 2, finder: "
                               "{method: ptolemy, fit: crawford, multi_ring: off, window: 10.5, "
                               "threshold: 6, min_hits: 7, claim: 5.5, max_rms: 6}}\n"
                               "  - {name: g, type: process, algorithm: rich, finder: {gpu: on, "
                               "inflight: 3}}\n"
                               "  - {name: w, type: writer, format: \"null\"}\n"
                               "links:\n  - {from: s, to: r}\n  - {from: s, to: t}\n"
                               "  - {from: s, to: g}\n  - {from: g, to: w}\n"
                               "  - {from: r, to: w}\n  - {from: t, to: w}\n",
                               "t.yaml");
    CHECK_REQUIRE(cfg != NULL);
    /* The config's defaults are the finder's. */
    const struct sdd_cfg_rich_finder *d = &cfg->stages[1].process.finder;
    sdd_rich_find_opts lib;
    sdd_rich_find_opts_default(&lib);
    CHECK(d->method == (int)lib.method && d->fit == (int)lib.fit &&
          d->multi_ring == (int)lib.multi_ring && d->window == lib.window &&
          d->threshold == lib.threshold && d->min_hits == lib.min_hits &&
          d->claim == lib.claim && d->max_rms == lib.max_rms);
    CHECK_EQ(cfg->stages[1].process.split, 1);
    CHECK_EQ(d->gpu, 0); /* the CPU unless asked */
    CHECK_EQ(cfg->stages[3].process.finder.gpu, 1);
    CHECK_EQ(d->inflight, SDD_CFG_AUTO); /* 2 with a GPU, else 1 (run_rich.c) */
    CHECK_EQ(cfg->stages[3].process.finder.inflight, 3);
    const struct sdd_cfg_rich_finder *f = &cfg->stages[2].process.finder;
    CHECK(f->method == 1 && f->fit == 1 && f->multi_ring == 0 && f->window == 10.5f &&
          f->threshold == 6 && f->min_hits == 7 && f->claim == 5.5f && f->max_rms == 6.0f);
    CHECK_EQ(cfg->stages[2].process.split, 2);
    check_round_trip(cfg);
    sdd_config_destroy(cfg);
}

/* Text that YAML would misread unquoted survives show -> parse: spaces, colons, '#', quotes,
 * backslashes, control characters, UTF-8, and names that look like booleans or numbers. */
static void test_quoting(void)
{
    const char *y =
        "run: {name: \"true\", output_dir: \"out dir: #1 \\\"q\\\" \\\\ \\t caf\u00e9\"}\n"
        "nodes: [{name: \"007\", host: \"::1\", cores: \"0-1\"}]\n"
        "stages:\n"
        "  - {name: \"yes\", type: source, kind: udp, listen: \"[::1]:9000\"}\n"
        "  - {name: w, type: writer, path: \"- a: [b] {c}\"}\n"
        "links: [{from: \"yes\", to: w}]\n";
    sdd_config *cfg = parse_ok(y, "q.yaml");
    CHECK_REQUIRE(cfg != NULL);
    CHECK(strcmp(cfg->run.name, "true") == 0);
    CHECK(strcmp(cfg->run.output_dir, "out dir: #1 \"q\" \\ \t caf\xc3\xa9") == 0);
    CHECK(strcmp(cfg->nodes[0].name, "007") == 0 && strcmp(cfg->nodes[0].host, "::1") == 0);
    CHECK(strcmp(cfg->stages[1].writer.path, "- a: [b] {c}") == 0);
    check_round_trip(cfg);
    char *text = NULL;
    CHECK_OK(sdd_config_emit(cfg, &text, NULL));
    sdd_config *again = parse_ok(text, "q2.yaml");
    CHECK_REQUIRE(again != NULL);
    CHECK(strcmp(again->run.output_dir, cfg->run.output_dir) == 0);
    CHECK(strcmp(again->stages[0].name, "yes") == 0);
    CHECK(strcmp(again->stages[0].source.listen, "[::1]:9000") == 0);
    free(text);
    sdd_config_destroy(again);
    sdd_config_destroy(cfg);
}

/* The hough-emu source kind: its pileup key (default, range, emit round trip, only for
 * hough-emu) and the checks across hough-emu sources (shared seed and pileup, at most 6). */
/* Readout sources: the frame mapping, its defaults, what each kind may set, and round trips. */
static void test_frames(void)
{
    sdd_config *cfg =
        parse_ok("stages:\n"
                 "  - {name: a, type: source, kind: emu-stream, rate: 5000,\n"
                 "     frame: {packets: 8, payload: 4K, missing: pad, loss: 0.01}}\n"
                 "  - {name: b, type: source, kind: udp, listen: \"0.0.0.0:5000\",\n"
                 "     frame: {format: jungfrau, missing: partial}}\n"
                 "  - {name: c, type: source, kind: emu-jungfrau}\n"
                 "  - {name: w, type: writer, format: null}\n"
                 "links: [{from: a, to: w}, {from: b, to: w}, {from: c, to: w}]\n",
                 "f.yaml");
    CHECK_REQUIRE(cfg != NULL);
    const struct sdd_cfg_frame *fa = &cfg->stages[0].source.frame;
    CHECK(fa->packets == 8 && fa->payload == 4096 && fa->missing == SDD_FRAME_PAD &&
          fa->loss == 0.01 && fa->format == SDD_FRAME_STREAM);
    const struct sdd_cfg_frame *fb = &cfg->stages[1].source.frame;
    CHECK(fb->format == SDD_FRAME_JUNGFRAU && fb->missing == SDD_FRAME_PARTIAL);
    const struct sdd_cfg_frame *fc = &cfg->stages[2].source.frame;
    CHECK(fc->packets == 16 && fc->payload == 1024 && fc->missing == SDD_FRAME_DROP &&
          fc->loss == 0);
    check_round_trip(cfg);
    char *text = NULL;
    CHECK_OK(sdd_config_emit(cfg, &text, NULL));
    CHECK_REQUIRE(text != NULL);
    CHECK(strstr(text, "    frame:\n      packets: 8\n      payload: 4K\n      missing: pad\n"
                       "      loss: 0.01\n") != NULL);
    CHECK(strstr(text, "    frame:\n      format: jungfrau\n      missing: partial\n") != NULL);
    free(text);
    sdd_config_destroy(cfg);
    EXPECT_ERROR("stages:\n  - {name: s, type: source, frame: {packets: 4}}\n",
                 "2:29: stages[0].frame", "only 'udp', 'emu-stream' and 'emu-jungfrau'");
    EXPECT_ERROR("stages:\n  - {name: s, type: source, kind: emu-stream, frame: {format: stream}}\n",
                 "2:55: stages[0].frame", "sets the frame format itself");
    EXPECT_ERROR("stages:\n  - {name: s, type: source, kind: udp, listen: \"h:1\", frame: {loss: 0.1}}\n",
                 "2:63: stages[0].frame", "loss is injected by emulators");
    EXPECT_ERROR("stages:\n  - {name: s, type: source, kind: emu-jungfrau, frame: {packets: 4}}\n",
                 "2:57: stages[0].frame", "always 128 packets of 8192 bytes");
    EXPECT_ERROR("stages:\n  - {name: s, type: source, kind: emu-stream, frame: {packets: 0}}\n",
                 "2:64: stages[0].frame.packets", "out of range");
    EXPECT_ERROR("stages:\n  - {name: s, type: source, kind: emu-stream, frame: {missing: keep}}\n",
                 "2:64: stages[0].frame.missing", "expected one of: drop, pad, partial");
    EXPECT_ERROR("stages:\n  - {name: s, type: source, kind: emu-stream, frame: {loss: 2}}\n",
                 "2:61: stages[0].frame.loss", "out of range");
}

static void test_hough_emu(void)
{
    CHECK(strcmp(sdd_source_kind_name(SDD_SRC_HOUGH_EMU), "hough-emu") == 0);
    CHECK(strcmp(sdd_source_kind_name((sdd_source_kind)(SDD_SRC_HOUGH_EMU + 1)), "?") == 0);
    /* Defaults: pileup 200, seed 1; set in code too. */
    sdd_config *cfg =
        parse_ok("stages:\n"
                 "  - {name: a, type: source, kind: hough-emu}\n"
                 "  - {name: b, type: source, kind: hough-emu, seed: 1, pileup: 200}\n"
                 "  - {name: w, type: writer, format: null}\n"
                 "links: [{from: a, to: w}, {from: b, to: w}]\n",
                 "h.yaml");
    CHECK_REQUIRE(cfg != NULL);
    CHECK_EQ(cfg->stages[0].source.kind, SDD_SRC_HOUGH_EMU);
    CHECK(cfg->stages[0].source.pileup == 200.0f);
    CHECK_EQ(cfg->stages[0].source.seed, 1);
    CHECK(cfg->stages[1].source.pileup == 200.0f);
    CHECK_EQ(cfg->stages[1].source.seed_pos.line, 3);
    CHECK_EQ(cfg->stages[1].source.pileup_pos.line, 3);
    CHECK_EQ(cfg->stages[1].source.pileup_pos.col, 63);
    check_round_trip(cfg);
    /* show writes pileup for hough-emu sources only, and no fragment for them. */
    char *text = NULL;
    CHECK_OK(sdd_config_emit(cfg, &text, NULL));
    CHECK_REQUIRE(text != NULL);
    CHECK(strstr(text, "    kind: hough-emu\n    streams: 1\n    rate: 0\n    seed: 1\n"
                       "    pileup: 200\n") != NULL);
    CHECK(strstr(text, "fragment") == NULL);
    free(text);
    sdd_config_destroy(cfg);
    struct sdd_cfg_stage st;
    sdd_config_stage_init(&st, SDD_STAGE_SOURCE);
    CHECK(st.source.pileup == 200.0f);
    /* Non-integer and extreme pileups parse and show back to the same float. */
    cfg = parse_ok("stages:\n"
                   "  - {name: a, type: source, kind: hough-emu, seed: 9, pileup: 140.7}\n"
                   "  - {name: b, type: source, kind: hough-emu, seed: 9, pileup: 140.7}\n"
                   "  - {name: w, type: writer, format: null}\n"
                   "links: [{from: a, to: w}, {from: b, to: w}]\n",
                   "h.yaml");
    CHECK_REQUIRE(cfg != NULL);
    CHECK(cfg->stages[0].source.pileup == 140.7f);
    CHECK_EQ(cfg->stages[1].source.seed, 9);
    check_round_trip(cfg);
    cfg->stages[0].source.pileup = cfg->stages[1].source.pileup = 0.1f;
    check_round_trip(cfg);
    cfg->stages[0].source.pileup = cfg->stages[1].source.pileup = 1000.0f;
    check_round_trip(cfg);
    sdd_config_destroy(cfg);
    cfg = parse_ok("stages:\n"
                   "  - {name: a, type: source, kind: hough-emu, pileup: 0}\n"
                   "  - {name: w, type: writer, format: null}\n"
                   "links: [{from: a, to: w}]\n",
                   "h.yaml");
    CHECK(cfg != NULL && cfg->stages[0].source.pileup == 0.0f);
    sdd_config_destroy(cfg);
    /* pileup: a number within 0-1000, only for hough-emu. */
    EXPECT_ERROR("stages:\n  - {name: s, type: source, kind: hough-emu, pileup: 1001}\n",
                 "2:54: stages[0].pileup", "value 1001 is out of range (0 to 1000)");
    EXPECT_ERROR("stages:\n  - {name: s, type: source, kind: hough-emu, pileup: -1}\n",
                 "2:54: stages[0].pileup", "out of range");
    EXPECT_ERROR("stages:\n  - {name: s, type: source, kind: hough-emu, pileup: lots}\n",
                 "2:54: stages[0].pileup", "expected a number, got 'lots'");
    EXPECT_ERROR("stages:\n  - {name: s, type: source, pileup: 140}\n", "2:29: stages[0].pileup",
                 "only a 'hough-emu' source has a pileup level (this one is 'evb-emu')");
    EXPECT_ERROR("stages:\n  - {name: s, type: source, kind: udp, listen: \"h:1\", pileup: 1}\n",
                 "2:55: stages[0].pileup",
                 "only a 'hough-emu' source has a pileup level (this one "
                 "is 'udp')");
    EXPECT_ERROR("stages:\n  - {name: s, type: writer, pileup: 1}\n", "2:29: stages[0].pileup",
                 "not valid for a 'writer' stage (it belongs to 'source' stages)");
    EXPECT_ERROR("stages:\n  - {name: s, type: source, kind: hough-emu, fragment: {size: 1K}}\n",
                 "2:46: stages[0].fragment",
                 "only an 'evb-emu' source has fragment sizes (this "
                 "one is 'hough-emu')");
    /* The sources split one sector: a second seed or pileup is an error at its value, naming
     * the first source; evb-emu sources in between do not count. */
    EXPECT_ERROR("stages:\n"
                 "  - {name: src0, type: source, kind: hough-emu, seed: 1}\n"
                 "  - {name: e, type: source, seed: 5}\n"
                 "  - {name: src1, type: source, kind: hough-emu, seed: 2}\n"
                 "  - {name: w, type: writer, format: null}\n"
                 "links: [{from: src0, to: w}, {from: e, to: w}, {from: src1, to: w}]\n",
                 "4:55: stages[2].seed",
                 "hough-emu sources split one sector between them and must share seed and pileup "
                 "(src0 has seed 1)");
    EXPECT_ERROR("stages:\n"
                 "  - {name: src0, type: source, kind: hough-emu}\n"
                 "  - {name: src1, type: source, kind: hough-emu, pileup: 140}\n"
                 "  - {name: w, type: writer, format: null}\n"
                 "links: [{from: src0, to: w}, {from: src1, to: w}]\n",
                 "3:57: stages[1].pileup", "must share seed and pileup (src0 has pileup 200)");
    /* A defaulted seed has no position of its own: the stage's is used. */
    EXPECT_ERROR("stages:\n"
                 "  - {name: src0, type: source, kind: hough-emu, seed: 3}\n"
                 "  - {name: src1, type: source, kind: hough-emu}\n"
                 "  - {name: w, type: writer, format: null}\n"
                 "links: [{from: src0, to: w}, {from: src1, to: w}]\n",
                 "3:5: stages[1].seed", "(src0 has seed 3)");
    /* Each mismatch against the first: two later sources, two errors. */
    CHECK_EQ(EXPECT_ERROR("stages:\n"
                          "  - {name: src0, type: source, kind: hough-emu}\n"
                          "  - {name: src1, type: source, kind: hough-emu, seed: 2}\n"
                          "  - {name: src2, type: source, kind: hough-emu, seed: 2, pileup: 1}\n"
                          "  - {name: w, type: writer, format: null}\n"
                          "links: [{from: src0, to: w}, {from: src1, to: w}, {from: src2, to: "
                          "w}]\n",
                          "4:55: stages[2].seed", "(src0 has seed 1)"),
             3);
    /* Built in code: the same check, without positions. */
    sdd_config *c = sdd_config_create();
    CHECK_REQUIRE(c != NULL);
    for (int i = 0; i < 2; i++) {
        struct sdd_cfg_stage *s = sdd_config_add_stage(c, SDD_STAGE_SOURCE);
        CHECK_REQUIRE(s != NULL);
        snprintf(s->name, sizeof(s->name), "h%d", i);
        s->source.kind = SDD_SRC_HOUGH_EMU;
        s->source.seed = 7;
    }
    struct sdd_cfg_stage *w = sdd_config_add_stage(c, SDD_STAGE_WRITER);
    snprintf(w->name, sizeof(w->name), "w");
    w->writer.format = SDD_WRITER_NULL;
    for (int i = 0; i < 2; i++) {
        struct sdd_cfg_link *l = sdd_config_add_link(c);
        snprintf(l->from, sizeof(l->from), "h%d", i);
        snprintf(l->to, sizeof(l->to), "w");
    }
    CHECK_OK(sdd_config_fill_defaults(c));
    CHECK_OK(sdd_config_validate(c, NULL));
    c->stages[1].source.pileup = 140.5f;
    struct sdd_config_diag d = {0};
    CHECK_EQ(sdd_config_validate(c, &d), SDD_EINVAL);
    CHECK(d.stored == 1 &&
          strcmp(d.errors[0].text, "<input>: stages[1].pileup: hough-emu sources split one sector "
                                   "between them and must share seed and pileup (h0 has pileup "
                                   "200)") == 0);
    sdd_config_diag_fini(&d);
    sdd_config_destroy(c);
    /* Six layers: six sources are fine, the seventh is an error at its entry. */
    char y[2048];
    for (int n = 6; n <= 8; n++) {
        size_t used = (size_t)snprintf(y, sizeof(y), "stages:\n");
        for (int i = 0; i < n; i++) {
            used += (size_t)snprintf(y + used, sizeof(y) - used,
                                     "  - {name: s%d, type: source, kind: hough-emu}\n", i);
        }
        used += (size_t)snprintf(y + used, sizeof(y) - used,
                                 "  - {name: w, type: writer, format: null}\nlinks:\n");
        for (int i = 0; i < n; i++) {
            used += (size_t)snprintf(y + used, sizeof(y) - used, "  - {from: s%d, to: w}\n", i);
        }
        CHECK_REQUIRE(used < sizeof(y));
        if (n == 6) {
            cfg = parse_ok(y, "six.yaml");
            CHECK(cfg != NULL && cfg->n_stages == 7);
            sdd_config_destroy(cfg);
        } else {
            char msg[128];
            snprintf(msg, sizeof(msg), "%d hough-emu sources; at most 6", n);
            CHECK_EQ(EXPECT_ERROR(y, "8:5: stages[6]", msg), 1); /* reported once */
        }
    }
}

static void test_syntax_and_types(void)
{
    EXPECT_ERROR("stages: [ {name: a\n", "2:1", "YAML syntax error");
    EXPECT_ERROR("", "", "empty document");
    EXPECT_ERROR("- a\n- b\n", "1:1", "expected a mapping, got a sequence");
    EXPECT_ERROR(GOOD_STAGES GOOD_LINKS "---\nrun: {}\n", "13:1", "more than one YAML document");
    EXPECT_ERROR("stages:\n  - name: s\n    type: bilder\n", "3:11: stages[0].type",
                 "unknown stage type 'bilder' (expected one of: source, ru, bu, process, writer, "
                 "feedback)");
    EXPECT_ERROR("stages:\n  - name: s\n", "2:5: stages[0].type", "missing required key");
    EXPECT_ERROR("stages:\n  - type: source\n", "2:5: stages[0].name", "missing required key");
    EXPECT_ERROR("stagez: []\n", "1:1: stagez", "unknown top-level key");
    /* x- keys are free for anchors; aliases reuse whole values. */
    sdd_config *ax = parse_ok("x-frag: &f {dist: uniform, size: 8K}\n"
                              "stages:\n  - {name: s, type: source, fragment: *f}\n"
                              "  - {name: w, type: writer}\nlinks: [{from: s, to: w}]\n",
                              "x.yaml");
    CHECK(ax != NULL && ax->stages[0].source.fragment.dist == SDD_FRAG_UNIFORM &&
          ax->stages[0].source.fragment.size == 8192);
    sdd_config_destroy(ax);
    EXPECT_ERROR("x-a: &s {name: s, type: source}\nstages: [*s, {name: w, type: writer, <<: *s}]\n",
                 "2:38: stages[1].<<", "unknown key for a 'writer' stage");
    EXPECT_ERROR("stages: 5\n", "1:9: stages", "expected a sequence, got a scalar");
    EXPECT_ERROR("run: [1]\n" GOOD_STAGES GOOD_LINKS, "1:6: run", "expected a mapping");
    EXPECT_ERROR("run: {colour: red}\n" GOOD_STAGES GOOD_LINKS, "1:7: run.colour",
                 "unknown key in run");
    EXPECT_ERROR("run: {name: a, name: b}\n" GOOD_STAGES GOOD_LINKS, "1:16: run.name",
                 "duplicate key");
    EXPECT_ERROR("run: {name: \"a b\"}\n" GOOD_STAGES GOOD_LINKS, "1:13: run.name",
                 "invalid name 'a b'");
    EXPECT_ERROR("run: {duration: soon}\n" GOOD_STAGES GOOD_LINKS, "1:17: run.duration",
                 "expected a number, got 'soon'");
    EXPECT_ERROR("run: {duration: -1}\n" GOOD_STAGES GOOD_LINKS, "1:17: run.duration",
                 "out of range");
    EXPECT_ERROR("run: {events: \"12\"}\n" GOOD_STAGES GOOD_LINKS, "1:15: run.events",
                 "expected an unsigned integer");
    EXPECT_ERROR("run: {events: [1]}\n" GOOD_STAGES GOOD_LINKS, "1:15: run.events",
                 "got a sequence");
    EXPECT_ERROR("fabric: {provider: verbs}\n" GOOD_STAGES GOOD_LINKS, "1:20: fabric.provider",
                 "unknown value 'verbs' (expected one of: auto, tcp, shm)");
    EXPECT_ERROR("fabric: {credits: 0}\n" GOOD_STAGES GOOD_LINKS, "1:19: fabric.credits",
                 "value 0 is out of range (1 to 65536)");
    EXPECT_ERROR("fabric: {buffer_size: 1K}\n" GOOD_STAGES GOOD_LINKS, "1:23: fabric.buffer_size",
                 "out of range");
    EXPECT_ERROR("fabric: {buffer_size: 12Q}\n" GOOD_STAGES GOOD_LINKS, "1:23: fabric.buffer_size",
                 "expected a size in bytes");
    EXPECT_ERROR("fabric: {buffer_size: 99999999999999999999}\n" GOOD_STAGES GOOD_LINKS,
                 "1:23: fabric.buffer_size", "expected a size in bytes");
    EXPECT_ERROR("fabric: {buffers: }\n" GOOD_STAGES GOOD_LINKS, "1:19: fabric.buffers",
                 "missing value");
    EXPECT_ERROR("run: {name: \"a\\0b\"}\n" GOOD_STAGES GOOD_LINKS, "1:13: run.name",
                 "NUL character");
    EXPECT_ERROR("run: {? [a]: b}\n" GOOD_STAGES GOOD_LINKS, "1:9: run", "keys must be plain");
}

static void test_stage_keys(void)
{
    EXPECT_ERROR("stages:\n  - {name: s, type: source, bulk_size: 4}\n",
                 "2:29: stages[0].bulk_size",
                 "not valid for a 'source' stage (it belongs to 'ru' stages)");
    EXPECT_ERROR("stages:\n  - {name: s, type: writer, colour: red}\n", "2:29: stages[0].colour",
                 "unknown key for a 'writer' stage (expected one of: name, type, node, cores, "
                 "format, path)");
    EXPECT_ERROR("stages:\n  - {name: s, type: source, streams: 0}\n", "2:38: stages[0].streams",
                 "out of range");
    EXPECT_ERROR("stages:\n  - {name: s, type: source, kind: camera}\n", "2:35: stages[0].kind",
                 "unknown value 'camera'");
    EXPECT_ERROR("stages:\n  - {name: r, type: ru, transfer: sideways}\n",
                 "2:35: stages[0].transfer", "unknown value 'sideways'");
    /* credits: 1 to the event builder's 32, or auto; every ru and bu gives the same. */
    EXPECT_ERROR("stages:\n  - {name: r, type: ru, credits: 33}\n", "2:34: stages[0].credits",
                 "value 33 is out of range (1 to 32)");
    EXPECT_ERROR("stages:\n  - {name: r, type: ru, credits: many}\n", "2:34: stages[0].credits",
                 "expected an unsigned integer or auto, got 'many'");
    EXPECT_ERROR("stages:\n  - {name: r, type: ru, credits: auto}\n"
                 "  - {name: b, type: bu, credits: 4}\n",
                 "3:5: stages[1].credits", "must be the same in every ru and bu stage");
    EXPECT_ERROR("stages:\n  - {name: r, type: ru}\n  - {name: b, type: bu, bulk_size: 8}\n",
                 "3:5: stages[1].bulk_size", "('b' differs from 'r')");
    EXPECT_ERROR("stages:\n  - {name: s, type: source, kind: udp}\n", "2:5: stages[0].listen",
                 "a 'udp' source needs");
    EXPECT_ERROR("stages:\n  - {name: s, type: source, listen: \"h:1\"}\n",
                 "2:29: stages[0].listen", "only a 'udp' source listens");
    EXPECT_ERROR("stages:\n  - {name: s, type: source, kind: udp, listen: nohost}\n",
                 "2:48: stages[0].listen", "invalid address 'nohost'");
    EXPECT_ERROR("stages:\n  - {name: s, type: source, fragment: {dist: poisson}}\n",
                 "2:46: stages[0].fragment.dist", "unknown value 'poisson'");
    EXPECT_ERROR("stages:\n  - {name: s, type: source, fragment: {dist: uniform, min: 8K, max: "
                 "4K}}\n",
                 "2:29: stages[0].fragment", "min <= max");
    EXPECT_ERROR("stages:\n  - {name: s, type: source, kind: udp, listen: \"h:1\", fragment: {}}\n",
                 "2:55: stages[0].fragment", "only an 'evb-emu' source");
    EXPECT_ERROR("stages:\n  - {name: p, type: process, factor: 10}\n", "2:30: stages[0].factor",
                 "only the 'prescale' algorithm has a factor");
    EXPECT_ERROR("stages:\n  - {name: p, type: process, algorithm: prescale, min_pt: 5}\n",
                 "2:51: stages[0].min_pt", "only the 'hough' algorithm has a min_pt");
    EXPECT_ERROR("stages:\n  - {name: p, type: process, algorithm: hough, min_pt: 1}\n",
                 "2:56: stages[0].min_pt", "out of range");
    EXPECT_ERROR("stages:\n  - {name: p, type: process, algorithm: hough, split: 2}\n",
                 "2:48: stages[0].split", "only the 'rich' algorithm has a split");
    EXPECT_ERROR("stages:\n  - {name: p, type: process, algorithm: rich, split: 65}\n",
                 "2:54: stages[0].split", "out of range");
    EXPECT_ERROR("stages:\n  - {name: p, type: process, algorithm: hough, finder: {}}\n",
                 "2:48: stages[0].finder", "only the 'rich' algorithm has a ring finder");
    EXPECT_ERROR("stages:\n  - {name: p, type: process, algorithm: rich, finder: {fit: circle}}\n",
                 "2:61: stages[0].finder.fit", "unknown value 'circle'");
    EXPECT_ERROR("stages:\n  - {name: p, type: process, algorithm: rich, finder: {window: 0}}\n",
                 "2:64: stages[0].finder.window", "out of range");
    /* The default claim (7 mm) cannot exceed a narrower window. */
    EXPECT_ERROR("stages:\n  - {name: p, type: process, algorithm: rich, finder: {window: 6}}\n",
                 "2:47: stages[0].finder.claim", "claim (7 mm) must not exceed window (6 mm)");
    EXPECT_ERROR("stages:\n  - {name: p, type: process, algorithm: rich, split: 2, "
                 "finder: {gpu: on}}\n",
                 "2:57: stages[0].finder.gpu", "the GPU runs the 'hist' method with split 1");
    EXPECT_ERROR("stages:\n  - {name: p, type: process, algorithm: rich, "
                 "finder: {gpu: on, method: ptolemy}}\n",
                 "2:47: stages[0].finder.gpu", "the GPU runs the 'hist' method with split 1");
    EXPECT_ERROR("stages:\n  - {name: p, type: process, algorithm: rich, split: 2, "
                 "finder: {inflight: 2}}\n",
                 "2:57: stages[0].finder.inflight", "more than one buffer in flight needs split 1");
    EXPECT_ERROR("stages:\n  - {name: p, type: process, algorithm: rich, finder: {inflight: 9}}\n",
                 "2:66: stages[0].finder.inflight", "out of range");
    EXPECT_ERROR("stages:\n  - {name: s, type: source, finder: {}}\n", "2:29: stages[0].finder",
                 "not valid for a 'source' stage (it belongs to 'process' stages)");
    EXPECT_ERROR("stages:\n  - {name: p, type: process, algorithm: prescale, factor: 0}\n",
                 "2:59: stages[0].factor", "out of range");
    EXPECT_ERROR("stages:\n  - {name: w, type: writer, format: tiff}\n", "2:37: stages[0].format",
                 "expected one of: hdf5, raw, null");
    EXPECT_ERROR("stages:\n  - {name: b, type: bu, timeout_ms: 0}\n", "2:37: stages[0].timeout_ms",
                 "out of range");
    EXPECT_ERROR("stages:\n  - {name: f, type: feedback, size: 100}\n", "2:37: stages[0].size",
                 "out of range");
    EXPECT_ERROR("stages:\n  - {name: s, type: source, cores: \"3-1\"}\n", "2:36: stages[0].cores",
                 "invalid CPU list '3-1'");
    EXPECT_ERROR("stages:\n  - {name: s, type: source, cores: 5000}\n", "2:36: stages[0].cores",
                 "invalid CPU list");
    EXPECT_ERROR("links:\n  - {from: a, to: b, depth: 1000}\n" GOOD_STAGES, "2:29: links[0].depth",
                 "not a power of two");
    EXPECT_ERROR("links:\n  - {from: a, transport: rdma}\n" GOOD_STAGES, "2:5: links[0].to",
                 "missing required key");
    EXPECT_ERROR("links:\n  - {from: a, to: b, transport: rdma}\n" GOOD_STAGES,
                 "2:33: links[0].transport", "unknown value 'rdma'");
    EXPECT_ERROR("nodes:\n  - {name: n, control_port: 70000}\n" GOOD_STAGES GOOD_LINKS,
                 "2:29: nodes[0].control_port", "out of range");
    EXPECT_ERROR("nodes:\n  - {host: x}\n" GOOD_STAGES GOOD_LINKS, "2:5: nodes[0].name",
                 "missing required key");
}

/* A two-node header for graph tests: lines 1-3. */
#define TWO_NODES                           \
    "nodes:\n"                              \
    "  - {name: a, host: h1, cores: 0-3}\n" \
    "  - {name: b, host: h2}\n"

static void test_graph(void)
{
    /* Line numbers below count from 1 in each text. */
    EXPECT_ERROR("stages:\n"
                 "  - {name: s, type: source}\n"
                 "  - {name: s, type: writer}\n"
                 "links:\n  - {from: s, to: s}\n",
                 "3:12: stages[1].name", "duplicate stage name 's' (first at stages[0])");
    EXPECT_ERROR(TWO_NODES "  - {name: a}\n" GOOD_STAGES GOOD_LINKS, "4:12: nodes[2].name",
                 "duplicate node name 'a'");
    EXPECT_ERROR("nodes:\n  - {name: a}\n  - {name: b}\n" GOOD_STAGES GOOD_LINKS,
                 "3:5: nodes[1].control_port", "both use 127.0.0.1:7020");
    EXPECT_ERROR(TWO_NODES GOOD_STAGES GOOD_LINKS, "5:5: stages[0].node",
                 "missing: required when the topology has 2 nodes");
    EXPECT_ERROR(TWO_NODES "stages:\n"
                           "  - {name: s, type: source, node: c}\n"
                           "  - {name: w, type: writer, node: a, cores: 2-5}\n"
                           "links:\n  - {from: s, to: w}\n",
                 "5:35: stages[0].node", "unknown node 'c'");
    EXPECT_ERROR(TWO_NODES "stages:\n"
                           "  - {name: s, type: source, node: a}\n"
                           "  - {name: w, type: writer, node: a, cores: 2-5}\n"
                           "links:\n  - {from: s, to: w}\n",
                 "6:45: stages[1].cores", "CPU 4 is not among node 'a' cores (0-3)");
    EXPECT_ERROR(TWO_NODES "stages:\n"
                           "  - {name: s, type: source, node: a}\n"
                           "  - {name: w, type: writer, node: b}\n"
                           "links:\n  - {from: s, to: w, transport: ring}\n",
                 "8:33: links[0].transport", "a ring joins stages of one node");
    EXPECT_ERROR("run: {coordinator: nowhere}\n" GOOD_STAGES GOOD_LINKS, "1:20: run.coordinator",
                 "unknown node 'nowhere'");
    EXPECT_ERROR(GOOD_STAGES "links:\n  - {from: s, to: p}\n  - {from: p, to: x}\n",
                 "11:19: links[1].to", "unknown stage 'x'");
    EXPECT_ERROR(GOOD_STAGES "links:\n  - {from: s, to: p}\n  - {from: y, to: w}\n",
                 "11:12: links[1].from", "unknown stage 'y'");
    EXPECT_ERROR(GOOD_STAGES GOOD_LINKS "  - {from: p, to: w}\n", "12:5: links[2]",
                 "duplicate link 'p' -> 'w' (first at links[1])");
    EXPECT_ERROR(GOOD_STAGES GOOD_LINKS "  - {from: p, to: s}\n", "12:19: links[2].to",
                 "'s' is a source and takes no input");
    EXPECT_ERROR(GOOD_STAGES GOOD_LINKS "  - {from: w, to: p}\n", "12:12: links[2].from",
                 "'w' is a writer (a sink) and has no output");
    EXPECT_ERROR(GOOD_STAGES GOOD_LINKS "  - {from: p, to: p}\n", "12:19: links[2].to",
                 "linked to itself");
    /* A chain without a source: the process stage has no input. */
    EXPECT_ERROR("stages:\n  - {name: p, type: process}\n  - {name: w, type: writer}\n"
                 "links:\n  - {from: p, to: w}\n",
                 "2:5: stages[0]", "process 'p' has no input link");
    /* Without a sink: data would end in the process stage. */
    EXPECT_ERROR("stages:\n  - {name: s, type: source}\n  - {name: p, type: process}\n"
                 "links:\n  - {from: s, to: p}\n",
                 "3:5: stages[1]", "process 'p' has no output link");
    EXPECT_ERROR("stages: []\n", "", "stages: the topology has no stages");
    /* The event builder's own pairing. */
    EXPECT_ERROR("stages:\n  - {name: s, type: source}\n  - {name: r, type: ru}\n"
                 "  - {name: w, type: writer}\nlinks:\n  - {from: s, to: r}\n"
                 "  - {from: r, to: w}\n",
                 "7:19: links[1].to", "readout unit 'r' may only feed bu stages");
    EXPECT_ERROR("stages:\n  - {name: s, type: source}\n  - {name: b, type: bu}\n"
                 "  - {name: w, type: writer}\nlinks:\n  - {from: s, to: b}\n"
                 "  - {from: b, to: w}\n",
                 "6:12: links[0].from", "builder unit 'b' takes input only from ru stages");
    /* A cycle p -> q -> p behind a source, with a sink after it. */
    EXPECT_ERROR("stages:\n  - {name: s, type: source}\n  - {name: p, type: process}\n"
                 "  - {name: q, type: process}\n  - {name: w, type: writer}\n"
                 "links:\n  - {from: s, to: p}\n  - {from: p, to: q}\n  - {from: q, to: p}\n"
                 "  - {from: q, to: w}\n",
                 "9:5: links[2]", "link 'q' -> 'p' closes a cycle");
    /* Writers that would overwrite each other. */
    EXPECT_ERROR("stages:\n  - {name: s, type: source}\n  - {name: w1, type: writer, path: x.h5}\n"
                 "  - {name: w2, type: writer, path: x.h5}\n"
                 "links:\n  - {from: s, to: w1}\n  - {from: s, to: w2}\n",
                 "4:5: stages[2].path", "would both write 'x.h5'");
}

static void test_all_reported(void)
{
    /* Three independent problems in one file: all three come back, in file order. */
    const char *y = "fabric: {credits: 0}\n"
                    "stages:\n"
                    "  - {name: s, type: bilder}\n"
                    "  - {name: w, type: writer, format: tiff}\n";
    struct sdd_config_diag d = {0};
    sdd_config *cfg = NULL;
    CHECK_EQ(sdd_config_parse(y, strlen(y), "t.yaml", &cfg, &d), SDD_EINVAL);
    CHECK(cfg == NULL);
    CHECK_EQ(d.count, 3);
    CHECK_REQUIRE(d.stored == 3);
    CHECK_EQ(d.errors[0].line, 1);
    CHECK_EQ(d.errors[1].line, 3);
    CHECK_EQ(d.errors[2].line, 4);
    CHECK(strcmp(d.errors[2].key, "stages[1].format") == 0);
    CHECK_EQ(d.errors[2].col, 37);
    sdd_config_diag_fini(&d);
    /* Graph problems add up too: two dangling stages and an unknown link end. */
    EXPECT_ERROR("stages:\n  - {name: s, type: source}\n  - {name: p, type: process}\n"
                 "links:\n  - {from: s, to: nope}\n",
                 "5:19: links[0].to", "unknown stage");
    CHECK(EXPECT_ERROR("stages:\n  - {name: s, type: source}\n  - {name: p, type: process}\n"
                       "links:\n  - {from: s, to: nope}\n",
                       "3:5: stages[1]", "no input link") >= 3);
    /* The stored list is bounded, the count is not. */
    char *big = malloc(400 * 40 + 64);
    CHECK_REQUIRE(big != NULL);
    size_t used = (size_t)sprintf(big, "stages:\n");
    for (int i = 0; i < 400; i++) {
        used += (size_t)sprintf(big + used, "  - {name: s%d, type: nope}\n", i);
    }
    d = (struct sdd_config_diag){0};
    CHECK_EQ(sdd_config_parse(big, used, "big.yaml", &cfg, &d), SDD_EINVAL);
    CHECK_EQ(d.count, 400);
    CHECK_EQ(d.stored, SDD_CFG_DIAG_KEEP);
    sdd_config_diag_fini(&d);
    free(big);
}

static void test_load_errors(void)
{
    struct sdd_config_diag d = {0};
    sdd_config *cfg = NULL;
    CHECK_EQ(sdd_config_load("/nonexistent/topo.yaml", &cfg, &d), SDD_EIO);
    CHECK(d.stored == 1 &&
          strstr(d.errors[0].text, "/nonexistent/topo.yaml: cannot read") == d.errors[0].text);
    sdd_config_diag_fini(&d);
    /* Alias expansion is bounded: a small document that expands to millions of keys is
     * refused after a bounded walk, and says so even with the error list full. */
    char *bomb = malloc(64 * 1024);
    CHECK_REQUIRE(bomb != NULL);
    size_t used = (size_t)sprintf(bomb, "x: &f {");
    for (int i = 0; i < 999; i++) {
        used += (size_t)sprintf(bomb + used, "%sk%d: 1", i > 0 ? ", " : "", i);
    }
    used +=
        (size_t)sprintf(bomb + used, "}\nstages:\n  - &s {name: a, type: source, fragment: *f}\n");
    for (int i = 0; i < 3000; i++) {
        used += (size_t)sprintf(bomb + used, "  - *s\n");
    }
    d = (struct sdd_config_diag){0};
    CHECK_EQ(sdd_config_parse(bomb, used, "bomb.yaml", &cfg, &d), SDD_EINVAL);
    CHECK(d.stored > 0 && strstr(d.errors[d.stored - 1].text, "document too large") != NULL);
    CHECK(d.count < 999 * 100);
    sdd_config_diag_fini(&d);
    free(bomb);
    /* A mapping with too many keys is refused before its quadratic duplicate check. */
    char *wide = malloc(32 * 2000 + 64);
    CHECK_REQUIRE(wide != NULL);
    used = (size_t)sprintf(wide, "run: {");
    for (int i = 0; i < 1500; i++) {
        used += (size_t)sprintf(wide + used, "%sk%d: 1", i > 0 ? ", " : "", i);
    }
    used += (size_t)sprintf(wide + used, "}\n");
    d = (struct sdd_config_diag){0};
    CHECK_EQ(sdd_config_parse(wide, used, "wide.yaml", &cfg, &d), SDD_EINVAL);
    CHECK(d.stored >= 1 &&
          strstr(d.errors[0].text, "wide.yaml:1:6: run: mapping with 1500 keys") != NULL);
    sdd_config_diag_fini(&d);
    free(wide);
    uint64_t bits[16];
    CHECK_OK(sdd_config_parse_cpus("0-3,8,1023", bits));
    CHECK(bits[0] == 0x10F && bits[15] == (1ull << 63));
    CHECK_EQ(sdd_config_parse_cpus("1024", bits), SDD_EINVAL);
    CHECK_EQ(sdd_config_parse_cpus("1,", bits), SDD_EINVAL);
    CHECK_EQ(sdd_config_parse_cpus("", bits), SDD_EINVAL);
}

int main(void)
{
    test_default();
    test_examples();
    test_minimal();
    test_evb_credits();
    test_rich_finder();
    test_quoting();
    test_hough_emu();
    test_frames();
    test_syntax_and_types();
    test_stage_keys();
    test_graph();
    test_all_reported();
    test_load_errors();
    return check_finish();
}
