/* A run over several nodes: one `sddaq node` per node, each serving its control port. The
 * coordinator (run.coordinator) ends the run for all of them over HTTP: POST /api/run/hold on
 * every node (each holds its RUs and answers the bulks they generated), then POST
 * /api/run/end {"bulks":K} with the largest; at the end it fetches GET /api/run/summary from
 * each node and adds the figures to its own summary. Bodies are small flat JSON objects that
 * only sddaq writes and reads. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "run_internal.h"
#include "sddaq/clock.h"
#include "sddaq/log.h"

#define LOG "run"

#define REMOTE_TIMEOUT_MS 15000

/* What follows "key": in a flat JSON object we wrote ourselves; NULL when absent. */
static const char *json_value(const char *js, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof(pat), "\"%s\":", key);
    const char *p = strstr(js, pat);
    return p != NULL ? p + strlen(pat) : NULL;
}

/* The number (or boolean, as 0/1) after "key":; false when absent. */
static bool json_u64(const char *js, const char *key, uint64_t *out)
{
    const char *p = json_value(js, key);
    if (p == NULL) {
        return false;
    }
    if (strncmp(p, "true", 4) == 0 || strncmp(p, "false", 5) == 0) {
        *out = p[0] == 't';
        return true;
    }
    char *end;
    *out = strtoull(p, &end, 10);
    return end != p;
}

/* The string after "key":, up to its closing quote (sddaq writes no escapes in these),
 * truncated to fit out; false when absent or not a string. */
static bool json_str(const char *js, const char *key, char *out, size_t len)
{
    const char *p = json_value(js, key);
    if (p == NULL || *p != '"' || len == 0) {
        return false;
    }
    p++;
    const char *end = strchr(p, '"');
    size_t n = end != NULL ? (size_t)(end - p) : strlen(p);
    n = n < len - 1 ? n : len - 1;
    memcpy(out, p, n);
    out[n] = '\0';
    return true;
}

/* The error a node's summary names ("EFENCED", ...); SDD_EIO for one this build does not
 * know: the run failed there either way. */
static sdd_err err_named(const char *name)
{
#define SDD_ERR_BY_NAME(n, value, msg) \
    if (strcmp(name, #n) == 0) {        \
        return value;                   \
    }
    SDD_ERR_MAP(SDD_ERR_BY_NAME)
#undef SDD_ERR_BY_NAME
    return SDD_EIO;
}

/* A node that ended in error but could still report (its builder unit fenced itself, a
 * stage failed there): the run failed, naming it, even though its figures are counted. */
static void note_node_failure(struct sdd_run *r, size_t i, const char *js,
                              struct sdd_run_summary *s)
{
    char status[32] = "", why[160] = "";
    if (!json_str(js, "status", status, sizeof(status)) || strcmp(status, "OK") == 0) {
        return;
    }
    json_str(js, "reason", why, sizeof(why));
    SDD_WARN(LOG, "node %s ended in error: %s", r->cfg->nodes[i].name, why);
    if (s->status == SDD_OK) {
        s->status = err_named(status);
        snprintf(s->reason, sizeof(s->reason), "node %s failed: %s", r->cfg->nodes[i].name, why);
    }
}

/* POST (or GET) to node i's /api/run/<what>; the reply body in *resp (free()). */
static sdd_err call(struct sdd_run *r, size_t i, const char *method, const char *what,
                    const char *body, char **resp)
{
    const struct sdd_cfg_node *nd = &r->cfg->nodes[i];
    char path[64];
    snprintf(path, sizeof(path), "/api/run/%s", what);
    int status = 0;
    *resp = NULL;
    sdd_err err = sdd_http_request(nd->host, (uint16_t)nd->control_port, method, path, body,
                                   REMOTE_TIMEOUT_MS, &status, resp, NULL);
    if (err == SDD_OK && status != 200) {
        err = status == 409 ? SDD_EAGAIN : SDD_EPROTO;
    }
    if (err != SDD_OK && err != SDD_EAGAIN) {
        SDD_ERROR(LOG, "node %s (%s:%u): %s %s: %s", nd->name, nd->host, nd->control_port,
                  method, path, status ? "refused" : sdd_strerror(err));
    }
    return err;
}

static bool other(const struct sdd_run *r, size_t i)
{
    return &r->cfg->nodes[i] != r->self;
}

/* A node that does not answer is lost: the run goes to error naming it, and is ended for the
 * others (their event builders have failed its work over, or flag its events). */
static void lost(struct sdd_run *r, size_t i, sdd_err err)
{
    if (r->lost[i]) {
        return;
    }
    r->lost[i] = true;
    char why[128];
    snprintf(why, sizeof(why), "node %s lost", r->cfg->nodes[i].name);
    run_fail(r, NULL, err, why);
}

sdd_err run_remote_hold(struct sdd_run *r, uint64_t *bulks)
{
    *bulks = 0;
    for (size_t i = 0; i < r->cfg->n_nodes; i++) {
        if (!other(r, i) || r->lost[i]) {
            continue;
        }
        char *resp = NULL;
        uint64_t k = 0;
        sdd_err err = call(r, i, "POST", "hold", "{}", &resp);
        if (err == SDD_OK && !json_u64(resp, "generated_bulks", &k)) {
            err = SDD_EPROTO;
        }
        free(resp);
        if (err != SDD_OK) {
            lost(r, i, err);
            continue;
        }
        *bulks = k > *bulks ? k : *bulks;
    }
    return SDD_OK;
}

sdd_err run_remote_end(struct sdd_run *r, uint64_t bulks)
{
    char body[64];
    snprintf(body, sizeof(body), "{\"bulks\":%" PRIu64 "}", bulks);
    sdd_err first = SDD_OK;
    for (size_t i = 0; i < r->cfg->n_nodes; i++) {
        char *resp = NULL;
        sdd_err err = other(r, i) && !r->lost[i] ? call(r, i, "POST", "end", body, &resp) : SDD_OK;
        free(resp);
        if (err != SDD_OK) {
            lost(r, i, err);
        }
        first = first == SDD_OK ? err : first;
    }
    return first;
}

/* POST what (with body) to every other node that is not lost; the first error. */
static sdd_err tell_all(struct sdd_run *r, const char *what, const char *body)
{
    sdd_err first = SDD_OK;
    for (size_t i = 0; i < r->cfg->n_nodes; i++) {
        if (!other(r, i) || r->lost[i]) {
            continue;
        }
        char *resp = NULL;
        sdd_err err = call(r, i, "POST", what, body, &resp);
        free(resp);
        first = first == SDD_OK ? err : first;
    }
    return first;
}

sdd_err run_remote_hold_at(struct sdd_run *r, uint64_t bulks)
{
    char body[64];
    snprintf(body, sizeof(body), "{\"bulks\":%" PRIu64 "}", bulks);
    return tell_all(r, "holdat", body);
}

sdd_err run_remote_resume(struct sdd_run *r)
{
    return tell_all(r, "resume", "{}");
}

#define PROBE_MS 1000 /* a control port that does not answer a connect in this is silent */
#define SILENT_MS 10000 /* no event builder: a silent coordinator's time before a takeover */

/* Does node i's control port take connections? (Not an HTTP request: a coordinator answering
 * a stop or a pause keeps its server busy until the run has drained.) SDD_ECONNREFUSED: its
 * host answered that nobody listens, so the node is gone; anything else but SDD_OK: no
 * answer, gone or cut off. */
static sdd_err probe(const struct sdd_run *r, size_t i)
{
    const struct sdd_cfg_node *nd = &r->cfg->nodes[i];
    return sdd_http_probe(nd->host, (uint16_t)nd->control_port, PROBE_MS);
}

/* Probe every other node at once, within one PROBE_MS: a partition can silence many nodes,
 * and this runs on the monitor thread. which[k] is the node errs[k] is about; returns how
 * many. */
static size_t probe_others(const struct sdd_run *r, size_t *which, sdd_err *errs)
{
    const char *hosts[SDD_CFG_MAX_NODES];
    uint16_t ports[SDD_CFG_MAX_NODES];
    size_t n = 0;
    for (size_t i = 0; i < r->cfg->n_nodes; i++) {
        if (other(r, i)) {
            hosts[n] = r->cfg->nodes[i].host;
            ports[n] = (uint16_t)r->cfg->nodes[i].control_port;
            which[n++] = i;
        }
    }
    sdd_http_probe_all(hosts, ports, n, PROBE_MS, errs);
    return n;
}

/* A coordinator whose host refuses the connection is gone for sure; one that is only silent
 * may be cut off, and nothing here can tell that from a dead host. So the node that would take
 * over first waits until this node's event builder has given the coordinator's builder nodes
 * up (silent past dead_ms): a cut that heals sooner leaves the run to end cleanly (taking over
 * would end it behind the coordinator's back, and its RUs would then write bulks past the end
 * the others agreed), and once the builders gave it up they have failed its work over
 * already, so the takeover changes nothing for the data. The builders' own verdict, not a
 * timer here beside theirs: theirs runs from the last heartbeat heard and is checked once per
 * heartbeat period, so a parallel timer could only match it by margin. Without a builder to
 * ask (none here still running, or none there): dead_ms, or SILENT_MS without any builder;
 * and 2 x dead_ms at most, should the builders' verdict never come. */
static bool wait_for_silence(struct sdd_run *r, long c, const char *lost_name)
{
    int verdict = run_evb_gave_up(r, (size_t)c);
    if (verdict == 1) {
        return false;
    }
    uint64_t dead_ms = r->evb_opts.dead_ms;
    uint64_t wait_ms = r->nevb == 0 ? SILENT_MS : verdict < 0 ? dead_ms : 2 * dead_ms;
    uint64_t silent_ns = sdd_now_ns() - r->coordinator_silent_ns;
    if (silent_ns >= wait_ms * SDD_NS_PER_MS) {
        return false;
    }
    if (!r->silent_wait_said) {
        SDD_WARN(LOG,
                 "node %s (the coordinator) does not answer, but its host does not refuse the "
                 "connection either (cut off, or the host is gone): nobody takes over unless it "
                 "stays silent for %llu ms%s",
                 lost_name, (unsigned long long)(r->nevb == 0 ? SILENT_MS : dead_ms),
                 verdict == 0 ? " and the event builder here gives it up" : "");
        r->silent_wait_said = true;
    }
    return true;
}

bool run_remote_watch(struct sdd_run *r, uint64_t now)
{
    if (!r->multi || r->coordinator || now < r->watch_ns) {
        return false;
    }
    r->watch_ns = now + 500 * SDD_NS_PER_MS;
    long c = sdd_config_find_node(r->cfg, r->cfg->run.coordinator);
    if (c < 0 || r->lost[c]) {
        return false;
    }
    if (!r->coordinator_missed) { /* it answered last time: ask it alone */
        if (probe(r, (size_t)c) == SDD_OK) {
            r->silent_wait_said = false;
            return false;
        }
        r->coordinator_missed = true;
        r->coordinator_silent_ns = now;
        return false;
    }
    /* The first node in order that still answers takes over, if it reaches a majority of the
     * nodes that may still be alive (itself included; a node whose host refuses the connection
     * is gone). A node cut off alone must not end the run for the others, who still have
     * their coordinator: it goes on, and if the partition heals the coordinator ends the run
     * as usual; if it lasts, the event builder's and links' own timeouts end this node's part.
     * Two nodes have no majority to ask. Either way a coordinator that is only silent is given
     * the builders' verdict first (wait_for_silence). Once it missed, it is probed in the
     * same round as the others, a view taken in one instant: probing the others after it
     * could see a partition heal in between and count a majority against a coordinator that
     * answers again. */
    const char *lost_name = r->cfg->nodes[c].name;
    size_t reached = 1, gone = 0, first = SIZE_MAX;
    bool refused = false;
    size_t which[SDD_CFG_MAX_NODES];
    sdd_err errs[SDD_CFG_MAX_NODES];
    size_t n = probe_others(r, which, errs);
    for (size_t k = 0; k < n; k++) {
        if ((long)which[k] == c && errs[k] == SDD_OK) {
            r->coordinator_missed = false; /* it answers again */
            r->silent_wait_said = false;
            return false;
        }
        refused |= (long)which[k] == c && errs[k] == SDD_ECONNREFUSED;
        reached += errs[k] == SDD_OK;
        gone += errs[k] == SDD_ECONNREFUSED;
        first = errs[k] == SDD_OK && which[k] < first ? which[k] : first;
    }
    size_t maybe_alive = r->cfg->n_nodes - gone;
    if (2 * reached <= maybe_alive && r->cfg->n_nodes > 2) {
        if (!r->cut_off_said) {
            SDD_WARN(LOG,
                     "node %s (the coordinator) does not answer, and this node reaches "
                     "only %zu of the %zu nodes that may be alive (itself included): it is cut "
                     "off and does not take over",
                     lost_name, reached, maybe_alive);
            r->cut_off_said = true;
        }
        r->coordinator_missed = false; /* look again */
        return false;
    }
    if (!refused && wait_for_silence(r, c, lost_name)) {
        return false;
    }
    r->lost[c] = true;
    if (first < (size_t)(r->self - r->cfg->nodes)) {
        SDD_WARN(LOG, "node %s (the coordinator) is lost; node %s ends the run", lost_name,
                 r->cfg->nodes[first].name);
        return false;
    }
    char why[256];
    r->coordinator = true; /* the first node still answering: this one */
    snprintf(why, sizeof(why), "node %s (the coordinator) lost; node %s ended the run", lost_name,
             r->self->name);
    run_fail(r, NULL, SDD_EPEERDEAD, why);
    return true;
}

/* Has node i ended its part of the run, without coordinating it (GET /api/run/finished)? Such
 * a node only waits, as this one does: it will neither take over nor fetch a summary. A node
 * that does not say so may still do either. */
static bool waits_too(const struct sdd_run *r, size_t i)
{
    const struct sdd_cfg_node *nd = &r->cfg->nodes[i];
    int status = 0;
    char *js = NULL;
    uint64_t finished = 0, coordinating = 1;
    sdd_err err = sdd_http_request(nd->host, (uint16_t)nd->control_port, "GET", "/api/run/finished",
                                   NULL, PROBE_MS, &status, &js, NULL);
    bool ok = err == SDD_OK && status == 200 && js != NULL && json_u64(js, "finished", &finished) &&
              json_u64(js, "coordinator", &coordinating);
    free(js);
    return ok && finished && !coordinating;
}

bool run_remote_nobody_left(struct sdd_run *r)
{
    long c = sdd_config_find_node(r->cfg, r->cfg->run.coordinator);
    size_t which[SDD_CFG_MAX_NODES];
    sdd_err errs[SDD_CFG_MAX_NODES];
    size_t n = probe_others(r, which, errs);
    bool coordinator_gone = false, nobody = true;
    for (size_t k = 0; k < n; k++) {
        coordinator_gone |= (long)which[k] == c && errs[k] == SDD_ECONNREFUSED;
    }
    for (size_t k = 0; k < n && coordinator_gone && nobody; k++) {
        nobody = errs[k] != SDD_OK || waits_too(r, which[k]);
    }
    return coordinator_gone && nobody;
}

sdd_err run_remote_stop(struct sdd_run *r)
{
    long k = sdd_config_find_node(r->cfg, r->cfg->run.coordinator);
    if (k < 0) {
        return SDD_EINVAL;
    }
    const struct sdd_cfg_node *nd = &r->cfg->nodes[k];
    int status = 0;
    char *resp = NULL;
    /* Answered once the whole run has drained, which needs this node too: do not wait for the
     * answer; a refused connection means the coordinator is gone. */
    sdd_err err = sdd_http_request(nd->host, (uint16_t)nd->control_port, "POST",
                                   "/api/transition",
                                   "{\"to\":\"stopped\",\"reason\":\"asked by a node\"}", 200,
                                   &status, &resp, NULL);
    free(resp);
    return err == SDD_ETIMEDOUT ? SDD_OK : err;
}

void run_remote_gather(struct sdd_run *r, struct sdd_run_summary *s)
{
    /* Test hook: a coordinator that dies while the others wait for it (test_run_netns.sh). */
    const char *delay = getenv("SDDAQ_TEST_GATHER_DELAY_MS");
    if (delay != NULL) {
        sdd_sleep_ns(SDD_NS_PER_MS * strtoull(delay, NULL, 10));
    }
    bool all_ok = s->node_ok;
    uint64_t generated = s->generated;
    for (size_t i = 0; i < r->cfg->n_nodes; i++) {
        if (!other(r, i)) {
            continue;
        }
        if (r->lost[i]) {
            all_ok = false;
            continue;
        }
        char *js = NULL;
        sdd_err err = SDD_EAGAIN;
        for (int t = 0; t < 600 && err == SDD_EAGAIN; t++) {
            free(js);
            err = call(r, i, "GET", "summary", NULL, &js);
            if (err == SDD_EAGAIN) { /* still draining */
                sdd_sleep_ns(SDD_NS_PER_MS * 100);
            }
        }
        if (err == SDD_ECONNREFUSED) { /* nobody there any more: its summary cannot come */
            lost(r, i, err);
            if (s->status == SDD_OK) {
                s->status = err;
                snprintf(s->reason, sizeof(s->reason), "node %s lost", r->cfg->nodes[i].name);
            }
        }
        uint64_t v[14] = {0};
        static const char *const keys[] = {"generated",     "built",       "complete", "incomplete",
                                           "corrupt",       "kept",        "rejected", "written",
                                           "dropped",       "bytes_built", "node_ok",  "link_sent",
                                           "link_received", "uncommitted"};
        bool ok = err == SDD_OK;
        for (size_t k = 0; ok && k < sizeof(v) / sizeof(v[0]); k++) {
            ok = json_u64(js, keys[k], &v[k]);
        }
        if (ok) {
            note_node_failure(r, i, js, s);
        }
        free(js);
        if (!ok) {
            all_ok = false;
            if (s->status == SDD_OK) {
                s->status = err != SDD_OK ? err : SDD_EPROTO;
                snprintf(s->reason, sizeof(s->reason), "node %s: no summary",
                         r->cfg->nodes[i].name);
            }
            continue;
        }
        generated = v[0] > generated ? v[0] : generated; /* every RU generates every event */
        s->built += v[1];
        s->complete += v[2];
        s->incomplete += v[3];
        s->corrupt += v[4];
        s->kept += v[5];
        s->rejected += v[6];
        s->written += v[7];
        s->dropped += v[8];
        s->bytes_built += v[9];
        all_ok &= v[10] != 0;
        s->link_sent += v[11];
        s->link_received += v[12];
        s->uncommitted += v[13];
        s->nodes++;
    }
    s->generated = generated;
    /* Each node checks its own part; what crossed between them is only seen here. A fenced
     * builder's uncommitted events were dropped unwritten and built again by the survivors. */
    s->accounted = all_ok && generated > 0 && generated == s->built - s->uncommitted &&
                   s->link_sent == s->link_received;
}

unsigned run_http(void *arg, const char *method, const char *path, const char *body, char *out,
                  size_t len)
{
    struct sdd_run *r = arg;
    bool post = strcmp(method, "POST") == 0;
    if (strcmp(path, "/api/run/hold") == 0 && post) {
        uint64_t k = run_hold_local(r);
        if (k == UINT64_MAX) {
            snprintf(out, len, "{\"error\":\"the event builders did not hold within 10 s\"}");
            return 500;
        }
        snprintf(out, len, "{\"generated_bulks\":%" PRIu64 "}", k);
        return 200;
    }
    /* A pause: hold (above), then holdat; resume lets go. This node's state mirrors the
     * coordinator's, so that its /api/state tells it too. */
    if (strcmp(path, "/api/run/holdat") == 0 && post) {
        uint64_t k = 0;
        if (!json_u64(body, "bulks", &k) || atomic_load(&r->hold_req) == 0) {
            snprintf(out, len, "{\"error\":\"need {\\\"bulks\\\":K} after a hold\"}");
            return 400;
        }
        run_hold_at_local(r, k);
        sdd_runctl_transition(r->rc, SDD_RUN_PAUSED, "paused by the coordinator");
        snprintf(out, len, "{\"ok\":true}");
        return 200;
    }
    if (strcmp(path, "/api/run/resume") == 0 && post) {
        run_resume_local(r);
        sdd_runctl_transition(r->rc, SDD_RUN_RUNNING, "resumed by the coordinator");
        snprintf(out, len, "{\"ok\":true}");
        return 200;
    }
    if (strcmp(path, "/api/run/end") == 0 && post) {
        uint64_t k = 0;
        if (!json_u64(body, "bulks", &k) || k == 0 || atomic_load(&r->hold_req) == 0) {
            snprintf(out, len, "{\"error\":\"need {\\\"bulks\\\":K > 0} after a hold\"}");
            return 400;
        }
        run_end_local(r, k);
        snprintf(out, len, "{\"ok\":true}");
        return 200;
    }
    if (strcmp(path, "/api/run/finished") == 0 && !post) { /* no side effect, unlike summary */
        snprintf(out, len, "{\"finished\":%s,\"coordinator\":%s}",
                 atomic_load(&r->finished) ? "true" : "false", r->coordinator ? "true" : "false");
        return 200;
    }
    if (strcmp(path, "/api/run/summary") == 0 && !post) {
        if (!atomic_load(&r->finished) || r->summary_json == NULL) {
            snprintf(out, len, "{\"error\":\"the run has not ended here yet\"}");
            return 409;
        }
        snprintf(out, len, "%s", r->summary_json);
        atomic_store(&r->summary_taken, 1);
        return 200;
    }
    snprintf(out, len, "{\"error\":\"unknown run request %s %s\"}", method, path);
    return 404;
}
