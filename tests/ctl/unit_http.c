/* The HTTP control and metrics server over real sockets on 127.0.0.1 (port 0): /metrics serves
 * the registry's text with the Prometheus content type, /api/state the state, transitions go
 * through legal and illegal moves with 200/409, bad JSON and unknown states get 400, unknown
 * paths 404, wrong methods 405, oversize bodies 413, a failing handler 500; the client's own
 * errors (refused connection) and concurrent clients; probing many hosts at once. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "check.h"

#include "sddaq/clock.h"
#include "sddaq/ctl.h"

#define TMO 5000

static int req(uint16_t port, const char *method, const char *path, const char *body, char **out)
{
    int status = 0;
    char *resp = NULL;
    sdd_err err =
        sdd_http_request("127.0.0.1", port, method, path, body, TMO, &status, &resp, NULL);
    CHECK_OK(err);
    if (err != SDD_OK) {
        return -1;
    }
    if (out != NULL) {
        *out = resp;
    } else {
        free(resp);
    }
    return status;
}

/* Send raw bytes, read the whole response (headers included) until the server closes. */
static char *raw(uint16_t port, const char *bytes, size_t len)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    CHECK_REQUIRE(connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0);
    size_t off = 0;
    while (off < len) {
        ssize_t n = send(fd, bytes + off, len - off, MSG_NOSIGNAL);
        if (n <= 0) {
            break; /* the server may refuse early and close */
        }
        off += (size_t)n;
    }
    char *buf = calloc(1, 1 << 16);
    size_t got = 0;
    for (;;) {
        ssize_t n = recv(fd, buf + got, (1 << 16) - 1 - got, 0);
        if (n <= 0) {
            break;
        }
        got += (size_t)n;
    }
    close(fd);
    return buf;
}

static sdd_http *start(sdd_metrics *m, sdd_runctl *rc, sdd_http_transition_fn fn, void *arg)
{
    struct sdd_http_opts o = {.host = "127.0.0.1",
                              .port = 0,
                              .metrics = m,
                              .runctl = rc,
                              .on_transition = fn,
                              .arg = arg,
                              .max_body = 4096};
    sdd_http *h = NULL;
    CHECK_OK(sdd_http_start(&o, &h));
    CHECK_REQUIRE(h != NULL && sdd_http_port(h) != 0);
    return h;
}

static void test_metrics_and_state(void)
{
    sdd_metrics *m = NULL;
    sdd_runctl *rc = NULL;
    CHECK_OK(sdd_metrics_create(&m));
    CHECK_OK(sdd_runctl_create(&rc));
    sdd_metric *c;
    struct sdd_label l[] = {{"stage", "bu0"}, {"node", "local"}};
    CHECK_OK(sdd_metrics_counter(m, "sddaq_bu_events_out_total", "Built.", l, 2, &c));
    sdd_metric_add(c, 7);
    sdd_http *h = start(m, rc, NULL, NULL);
    uint16_t port = sdd_http_port(h);
    char *body = NULL;
    CHECK_EQ(req(port, "GET", "/metrics", NULL, &body), 200);
    CHECK(body != NULL &&
          strcmp(body, "# HELP sddaq_bu_events_out_total Built.\n"
                       "# TYPE sddaq_bu_events_out_total counter\n"
                       "sddaq_bu_events_out_total{stage=\"bu0\",node=\"local\"} 7\n") == 0);
    free(body);
    const char *get = "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    char *r = raw(port, get, strlen(get));
    CHECK(strncmp(r, "HTTP/1.1 200", 12) == 0);
    CHECK(strstr(r, "Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n") != NULL);
    free(r);
    CHECK_EQ(req(port, "GET", "/api/state", NULL, &body), 200);
    CHECK(body != NULL && strstr(body, "{\"state\":\"initial\",\"previous\":\"initial\","
                                       "\"transitions\":0,") == body);
    free(body);
    const char *gs = "GET /api/state HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    r = raw(port, gs, strlen(gs));
    CHECK(strstr(r, "Content-Type: application/json\r\n") != NULL);
    free(r);
    /* A query string does not change the path. */
    CHECK_EQ(req(port, "GET", "/api/state?x=1", NULL, NULL), 200);
    CHECK_EQ(req(port, "HEAD", "/metrics", NULL, NULL), 200);
    /* Unknown paths and wrong methods. */
    CHECK_EQ(req(port, "GET", "/", NULL, &body), 404);
    CHECK(body != NULL && strcmp(body, "{\"error\":\"not found\"}") == 0);
    free(body);
    CHECK_EQ(req(port, "GET", "/api/statex", NULL, NULL), 404);
    CHECK_EQ(req(port, "GET", "/api/transition", NULL, NULL), 405);
    CHECK_EQ(req(port, "POST", "/metrics", "{}", NULL), 405);
    CHECK_EQ(req(port, "DELETE", "/api/state", NULL, NULL), 405);
    sdd_http_stop(h);
    /* Stopped: the port refuses connections (nothing else can have taken it this quickly
     * on loopback with an ephemeral port, and if it had, the request would not get 200). */
    int status = 0;
    char *resp = NULL;
    sdd_err err =
        sdd_http_request("127.0.0.1", port, "GET", "/metrics", NULL, TMO, &status, &resp, NULL);
    CHECK(err == SDD_ECONNREFUSED || (err == SDD_OK && status != 200));
    free(resp);
    sdd_runctl_destroy(rc);
    sdd_metrics_destroy(m);
}

static void test_transitions(void)
{
    sdd_runctl *rc = NULL;
    CHECK_OK(sdd_runctl_create(&rc));
    sdd_http *h = start(NULL, rc, NULL, NULL);
    uint16_t port = sdd_http_port(h);
    char *body = NULL;
    CHECK_EQ(req(port, "GET", "/metrics", NULL, &body), 200); /* no registry: empty */
    CHECK(body != NULL && body[0] == '\0');
    free(body);
    static const struct {
        const char *to;
        int status;
        const char *state;
    } steps[] = {
        {"running", 409, "initial"},       {"configured", 200, "configured"},
        {"configured", 409, "configured"}, {"running", 200, "running"},
        {"paused", 200, "paused"},         {"paused", 409, "paused"},
        {"running", 200, "running"},       {"stopped", 200, "stopped"},
        {"running", 409, "stopped"},       {"configured", 200, "configured"},
        {"error", 200, "error"},           {"running", 409, "error"},
        {"error", 409, "error"},           {"initial", 200, "initial"},
    };
    for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
        char json[128];
        snprintf(json, sizeof(json), "{\"to\":\"%s\",\"reason\":\"step %zu\"}", steps[i].to, i);
        CHECK_EQ(req(port, "POST", "/api/transition", json, &body), steps[i].status);
        char want[64];
        snprintf(want, sizeof(want), "\"state\":\"%s\"", steps[i].state);
        if (steps[i].status == 200) {
            CHECK(body != NULL && strstr(body, want) != NULL);
            snprintf(want, sizeof(want), "\"reason\":\"step %zu\"", i);
            CHECK(body != NULL && strstr(body, want) != NULL);
        } else {
            CHECK(body != NULL && strstr(body, "{\"error\":\"illegal transition ") == body);
            snprintf(want, sizeof(want), "\"from\":\"%s\",\"to\":\"%s\"}", steps[i].state,
                     steps[i].to);
            CHECK(body != NULL && strstr(body, want) != NULL);
        }
        free(body);
        struct sdd_runctl_status st;
        sdd_runctl_get(rc, &st);
        CHECK(strcmp(sdd_run_state_name(st.state), steps[i].state) == 0);
    }
    /* Bad requests: none changes the state. */
    static const char *const bad[] = {
        "",
        "not json",
        "{",
        "{\"to\":\"running\"",
        "{\"to\":\"bogus\"}",
        "{\"to\":\"Running\"}",
        "{\"to\":1}",
        "{\"to\":\"running\",\"to\":\"paused\"}",
        "{\"state\":\"running\"}",
        "{}",
        "[\"running\"]",
        "{\"to\":\"running\"} x",
        "{\"to\":\"run\\u0000ning\"}",
        "{\"to\":\"\\ud800\"}",
        "{\"to\":\"running\",}",
        "{\"to\":\"runni\nng\"}",
        NULL,
    };
    for (int i = 0; bad[i] != NULL; i++) {
        CHECK_EQ(req(port, "POST", "/api/transition", bad[i], &body), 400);
        CHECK(body != NULL && strncmp(body, "{\"error\":\"", 10) == 0);
        free(body);
    }
    struct sdd_runctl_status st;
    sdd_runctl_get(rc, &st);
    CHECK_EQ(st.state, SDD_RUN_INITIAL);
    /* Escapes in a good request are decoded. */
    CHECK_EQ(req(port, "POST", "/api/transition",
                 " {\"reason\":\"caf\\u00e9 \\\"q\\\"\", \"to\" : \"config\\u0075red\"} ", &body),
             200);
    free(body);
    sdd_runctl_get(rc, &st);
    CHECK_EQ(st.state, SDD_RUN_CONFIGURED);
    CHECK(strcmp(st.reason, "caf\xc3\xa9 \"q\"") == 0);
    /* Oversize bodies: refused by Content-Length before reading, and when streamed without
     * one (chunked). */
    char *big = malloc(5001);
    memset(big, ' ', 5000);
    big[0] = '{';
    big[4999] = '}';
    big[5000] = '\0';
    CHECK_EQ(req(port, "POST", "/api/transition", big, &body), 413);
    free(body);
    char chunked[6000];
    int n = snprintf(chunked, sizeof(chunked),
                     "POST /api/transition HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                     "Transfer-Encoding: chunked\r\n\r\n1388\r\n%s\r\n0\r\n\r\n",
                     big);
    char *r = raw(port, chunked, (size_t)n);
    CHECK(strncmp(r, "HTTP/1.1 413", 12) == 0);
    free(r);
    free(big);
    /* The largest allowed body still works. */
    char edge[4097];
    memset(edge, ' ', 4096);
    edge[4096] = '\0';
    memcpy(edge, "{\"to\":\"running\"}", 16);
    CHECK_EQ(req(port, "POST", "/api/transition", edge, NULL), 200);
    /* Garbage instead of HTTP gets an error status or a closed connection, and the server
     * keeps serving. */
    r = raw(port, "\x01\x02 nonsense\r\n\r\n", 15);
    CHECK(r[0] == '\0' || strncmp(r, "HTTP/1.1 4", 10) == 0);
    free(r);
    CHECK_EQ(req(port, "GET", "/api/state", NULL, NULL), 200);
    sdd_http_stop(h);
    sdd_runctl_destroy(rc);
}

struct handler_log {
    int calls;
    sdd_run_state last;
    sdd_err ret;
};

static sdd_err handler(void *arg, sdd_runctl *rc, sdd_run_state to, const char *reason, char *msg,
                       size_t msg_len)
{
    struct handler_log *hl = arg;
    hl->calls++;
    hl->last = to;
    if (hl->ret != SDD_OK) {
        snprintf(msg, msg_len, "node n2: %s", reason);
        return hl->ret;
    }
    struct sdd_runctl_status st;
    sdd_runctl_get(rc, &st);
    return sdd_runctl_transition_from(rc, st.state, to, reason);
}

static void test_handler(void)
{
    sdd_runctl *rc = NULL;
    CHECK_OK(sdd_runctl_create(&rc));
    struct handler_log hl = {0, SDD_RUN_INITIAL, SDD_OK};
    sdd_http *h = start(NULL, rc, handler, &hl);
    uint16_t port = sdd_http_port(h);
    char *body = NULL;
    CHECK_EQ(req(port, "POST", "/api/transition", "{\"to\":\"configured\"}", NULL), 200);
    CHECK_EQ(hl.calls, 1);
    CHECK_EQ(hl.last, SDD_RUN_CONFIGURED);
    CHECK_EQ(req(port, "POST", "/api/transition", "{\"to\":\"paused\"}", NULL), 409);
    CHECK_EQ(hl.calls, 2);
    /* Bad requests never reach the handler. */
    CHECK_EQ(req(port, "POST", "/api/transition", "{\"to\":\"nope\"}", NULL), 400);
    CHECK_EQ(hl.calls, 2);
    hl.ret = SDD_EIO;
    CHECK_EQ(
        req(port, "POST", "/api/transition", "{\"to\":\"running\",\"reason\":\"disk\"}", &body),
        500);
    CHECK(body != NULL && strcmp(body, "{\"error\":\"node n2: disk\"}") == 0);
    free(body);
    hl.ret = SDD_EINVAL;
    CHECK_EQ(req(port, "POST", "/api/transition", "{\"to\":\"running\"}", NULL), 400);
    hl.ret = SDD_EBUSY;
    CHECK_EQ(
        req(port, "POST", "/api/transition", "{\"to\":\"running\",\"reason\":\"busy\"}", &body),
        409);
    CHECK(body != NULL &&
          strstr(body, "illegal transition configured -> running: node n2: busy") != NULL);
    free(body);
    sdd_http_stop(h);
    /* No run control attached: the API answers 503, metrics still work. */
    h = start(NULL, NULL, NULL, NULL);
    CHECK_EQ(req(sdd_http_port(h), "GET", "/api/state", NULL, NULL), 503);
    CHECK_EQ(req(sdd_http_port(h), "POST", "/api/transition", "{\"to\":\"running\"}", NULL), 503);
    CHECK_EQ(req(sdd_http_port(h), "GET", "/metrics", NULL, NULL), 200);
    sdd_http_stop(h);
    sdd_runctl_destroy(rc);
}

static void test_bind_errors(void)
{
    sdd_runctl *rc = NULL;
    CHECK_OK(sdd_runctl_create(&rc));
    sdd_http *h = start(NULL, rc, NULL, NULL), *h2 = NULL;
    struct sdd_http_opts o = {.host = "127.0.0.1", .port = sdd_http_port(h), .runctl = rc};
    sdd_err err = sdd_http_start(&o, &h2);
    CHECK(err != SDD_OK && h2 == NULL);
    o.host = "no such host.invalid";
    o.port = 0;
    CHECK(sdd_http_start(&o, &h2) != SDD_OK && h2 == NULL);
    CHECK_EQ(sdd_http_start(NULL, &h2), SDD_EINVAL);
    sdd_http_stop(h);
    sdd_http_stop(NULL);
    int status;
    char *resp = NULL;
    CHECK_EQ(sdd_http_request(NULL, 1, "GET", "/", NULL, TMO, &status, &resp, NULL), SDD_EINVAL);
    sdd_runctl_destroy(rc);
}

struct client {
    uint16_t port;
    int ok;
};

static void *client(void *arg)
{
    struct client *c = arg;
    for (int i = 0; i < 50; i++) {
        int status = 0;
        char *resp = NULL;
        if (sdd_http_request("127.0.0.1", c->port, "GET", i % 2 ? "/metrics" : "/api/state", NULL,
                             TMO, &status, &resp, NULL) == SDD_OK &&
            status == 200) {
            c->ok++;
        }
        free(resp);
    }
    return NULL;
}

static void test_concurrent_clients(void)
{
    sdd_metrics *m = NULL;
    sdd_runctl *rc = NULL;
    CHECK_OK(sdd_metrics_create(&m));
    CHECK_OK(sdd_runctl_create(&rc));
    struct sdd_stage_metrics sm;
    CHECK_OK(sdd_stage_metrics_register(m, "ru", "ru0", "local", &sm));
    sdd_http *h = start(m, rc, NULL, NULL);
    struct client cs[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        cs[i] = (struct client){sdd_http_port(h), 0};
        pthread_create(&th[i], NULL, client, &cs[i]);
    }
    for (int i = 0; i < 1000; i++) {
        sdd_metric_add(sm.events_in, 1);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECK_EQ(cs[i].ok, 50);
    }
    char *body = NULL;
    CHECK_EQ(req(sdd_http_port(h), "GET", "/metrics", NULL, &body), 200);
    CHECK(body != NULL &&
          strstr(body, "sddaq_ru_events_in_total{stage=\"ru0\",node=\"local\"} 1000\n") != NULL);
    free(body);
    sdd_http_stop(h);
    sdd_runctl_destroy(rc);
    sdd_metrics_destroy(m);
}

/* /api/run/...: the runtime's requests between nodes reach on_run with method, path and body;
 * its status and body go back as they are. Without on_run those paths are 404. */
static unsigned run_hook(void *arg, const char *method, const char *path, const char *body,
                         char *out, size_t len)
{
    int *calls = arg;
    (*calls)++;
    snprintf(out, len, "{\"m\":\"%s\",\"p\":\"%s\",\"b\":\"%s\"}", method, path, body);
    return strcmp(path, "/api/run/busy") == 0 ? 409 : 200;
}

static void test_run_hook(void)
{
    int calls = 0;
    struct sdd_http_opts o = {.on_run = run_hook, .arg = &calls};
    sdd_http *h = NULL;
    CHECK_OK(sdd_http_start(&o, &h));
    CHECK_REQUIRE(h != NULL);
    uint16_t port = sdd_http_port(h);
    char *body = NULL;
    CHECK_EQ(req(port, "POST", "/api/run/end", "{\"bulks\":7}", &body), 200);
    CHECK(body != NULL &&
          strcmp(body, "{\"m\":\"POST\",\"p\":\"/api/run/end\",\"b\":\"{\"bulks\":7}\"}") == 0);
    free(body);
    CHECK_EQ(req(port, "GET", "/api/run/summary", NULL, &body), 200);
    CHECK(body != NULL && strstr(body, "\"b\":\"\"") != NULL); /* no body: "" */
    free(body);
    CHECK_EQ(req(port, "GET", "/api/run/busy", NULL, NULL), 409);
    CHECK_EQ(calls, 3);
    CHECK_EQ(req(port, "GET", "/api/runs", NULL, NULL), 404); /* not under /api/run/ */
    CHECK_EQ(calls, 3);
    sdd_http_stop(h);
    h = NULL;
    struct sdd_http_opts plain = {0};
    CHECK_OK(sdd_http_start(&plain, &h));
    CHECK_EQ(req(sdd_http_port(h), "POST", "/api/run/hold", "{}", NULL), 404);
    sdd_http_stop(h);
}

/* A port nothing listens on: bound, then closed. */
static uint16_t closed_port(void)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);
    CHECK_REQUIRE(s >= 0 && bind(s, (struct sockaddr *)&a, sizeof(a)) == 0);
    CHECK_REQUIRE(getsockname(s, (struct sockaddr *)&a, &al) == 0);
    close(s);
    return ntohs(a.sin_port);
}

/* A listener whose accept queue is full drops new connections' SYNs: a silent host. */
static int silent_listener(uint16_t *port, int *queued)
{
    int l = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);
    CHECK_REQUIRE(l >= 0 && bind(l, (struct sockaddr *)&a, sizeof(a)) == 0 && listen(l, 0) == 0);
    CHECK_REQUIRE(getsockname(l, (struct sockaddr *)&a, &al) == 0);
    *port = ntohs(a.sin_port);
    *queued = socket(AF_INET, SOCK_STREAM, 0); /* takes the one place in the queue */
    CHECK_REQUIRE(*queued >= 0 && connect(*queued, (struct sockaddr *)&a, sizeof(a)) == 0);
    return l;
}

/* Probing several hosts at once: each answer for its own host, and the silent ones cost the
 * timeout once in all, not once each. */
static void test_probe_all(void)
{
    enum { SILENT = 4, N = SILENT + 2, TIMEOUT_MS = 500 };
    int fds[2 * SILENT];
    const char *hosts[N];
    uint16_t ports[N];
    sdd_err out[N];
    for (int i = 0; i < SILENT; i++) {
        fds[2 * i] = silent_listener(&ports[i], &fds[2 * i + 1]);
    }
    sdd_http *h = start(NULL, NULL, NULL, NULL);
    CHECK_REQUIRE(h != NULL);
    ports[SILENT] = sdd_http_port(h);  /* listening: OK */
    ports[SILENT + 1] = closed_port(); /* nothing there: refused */
    for (int i = 0; i < N; i++) {
        hosts[i] = "127.0.0.1";
    }
    uint64_t t0 = sdd_now_ns();
    sdd_http_probe_all(hosts, ports, N, TIMEOUT_MS, out);
    uint64_t ms = (sdd_now_ns() - t0) / SDD_NS_PER_MS;
    for (int i = 0; i < SILENT; i++) {
        CHECK_EQ(out[i], SDD_ETIMEDOUT);
    }
    CHECK_EQ(out[SILENT], SDD_OK);
    CHECK_EQ(out[SILENT + 1], SDD_ECONNREFUSED);
    CHECK(ms >= TIMEOUT_MS - 1 && ms < SILENT * TIMEOUT_MS * 3 / 4); /* one at a time: 2000 */
    CHECK_EQ(sdd_http_probe(hosts[0], ports[0], 100), SDD_ETIMEDOUT);
    sdd_http_probe_all(hosts, ports, 0, TIMEOUT_MS, out); /* nothing to do */
    sdd_http_stop(h);
    for (int i = 0; i < 2 * SILENT; i++) {
        close(fds[i]);
    }
}

int main(void)
{
    test_metrics_and_state();
    test_run_hook();
    test_transitions();
    test_handler();
    test_bind_errors();
    test_concurrent_clients();
    test_probe_all();
    return check_finish();
}
