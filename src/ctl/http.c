/* The HTTP control and metrics server on libmicrohttpd: one internal polling thread serves
 * GET /metrics (Prometheus text), GET /api/state and POST /api/transition (JSON). We bind
 * and listen ourselves and hand the socket over, so that port 0 works and the bound port is
 * known without asking the library. Request bodies are bounded; a larger one is refused with
 * 413 as soon as its Content-Length (or its bytes) say so. */
#include <errno.h>
#include <stdarg.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sddaq/ctl.h"
#include "sddaq/log.h"

#include "http_json.h"

#define DEFAULT_MAX_BODY     4096
#define CONNECTION_TIMEOUT_S 10

struct sdd_http {
    struct MHD_Daemon *daemon;
    uint16_t port;
    sdd_metrics *metrics;
    sdd_runctl *runctl;
    sdd_http_transition_fn on_transition;
    sdd_http_run_fn on_run;
    void *arg;
    size_t max_body;
};

/* Per-request state between the calls of the access handler. */
struct request {
    char *body;
    size_t len;
    bool too_big;
};

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, const char *type,
                             char *text, size_t len, bool owned)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(
        len, text, owned ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_MUST_COPY);
    if (r == NULL) {
        if (owned) {
            free(text);
        }
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    if (status == MHD_HTTP_METHOD_NOT_ALLOWED) {
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD, POST");
    }
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

/* {"error":"<msg>"} with msg escaped (it may quote the client's own bytes). */
static enum MHD_Result reply_error(struct MHD_Connection *c, unsigned status, const char *msg,
                                   const char *extra)
{
    char esc[512];
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)msg; *p != '\0' && o + 7 < sizeof(esc);
         p++) {
        if (*p == '"' || *p == '\\') {
            esc[o++] = '\\';
            esc[o++] = (char)*p;
        } else if (*p < 0x20 || *p >= 0x7f) {
            o += (size_t)snprintf(esc + o, sizeof(esc) - o, "\\u%04x", *p);
        } else {
            esc[o++] = (char)*p;
        }
    }
    esc[o] = '\0';
    char json[768];
    int n = snprintf(json, sizeof(json), "{\"error\":\"%s\"%s}", esc, extra != NULL ? extra : "");
    if (n < 0 || (size_t)n >= sizeof(json)) {
        n = snprintf(json, sizeof(json), "{\"error\":\"internal\"}");
    }
    return reply(c, status, "application/json", json, (size_t)n, false);
}

static enum MHD_Result serve_state(struct sdd_http *h, struct MHD_Connection *c, unsigned status)
{
    char json[2048];
    int n = sdd_runctl_json(h->runctl, json, sizeof(json));
    if (n < 0 || (size_t)n >= sizeof(json)) {
        return reply_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "state too large", NULL);
    }
    return reply(c, status, "application/json", json, (size_t)n, false);
}

static enum MHD_Result serve_transition(struct sdd_http *h, struct MHD_Connection *c,
                                        struct request *rq)
{
    char to_s[32], reason[SDD_RUNCTL_REASON_MAX], err[512];
    if (ctl_json_parse_transition(rq->body != NULL ? rq->body : "", rq->len, to_s, sizeof(to_s),
                                  reason, sizeof(reason), err, sizeof(err)) != 0) {
        return reply_error(c, MHD_HTTP_BAD_REQUEST, err, NULL);
    }
    int to = sdd_run_state_parse(to_s);
    if (to < 0) {
        snprintf(err, sizeof(err),
                 "unknown state '%.40s' (expected initial, configured, running, paused, "
                 "stopped or error)",
                 to_s);
        return reply_error(c, MHD_HTTP_BAD_REQUEST, err, NULL);
    }
    struct sdd_runctl_status st;
    sdd_runctl_get(h->runctl, &st);
    char msg[256] = "";
    sdd_err e;
    if (h->on_transition != NULL) {
        e = h->on_transition(h->arg, h->runctl, (sdd_run_state)to, reason, msg, sizeof(msg));
    } else {
        e = sdd_runctl_transition(h->runctl, (sdd_run_state)to, reason);
    }
    if (e == SDD_OK) {
        SDD_INFO("ctl", "transition %s -> %s%s%s", sdd_run_state_name(st.state), to_s,
                 reason[0] ? ": " : "", reason);
        return serve_state(h, c, MHD_HTTP_OK);
    }
    if (e == SDD_EBUSY) {
        sdd_runctl_get(h->runctl, &st);
        char extra[96];
        snprintf(extra, sizeof(extra), ",\"from\":\"%s\",\"to\":\"%s\"",
                 sdd_run_state_name(st.state), sdd_run_state_name((sdd_run_state)to));
        snprintf(err, sizeof(err), "illegal transition %s -> %s%s%s", sdd_run_state_name(st.state),
                 to_s, msg[0] ? ": " : "", msg);
        return reply_error(c, MHD_HTTP_CONFLICT, err, extra);
    }
    snprintf(err, sizeof(err), "%s", msg[0] ? msg : sdd_strerror(e));
    return reply_error(c, e == SDD_EINVAL ? MHD_HTTP_BAD_REQUEST : MHD_HTTP_INTERNAL_SERVER_ERROR,
                       err, NULL);
}

static enum MHD_Result route(struct sdd_http *h, struct MHD_Connection *c, const char *url,
                             const char *method, struct request *rq)
{
    bool get = strcmp(method, MHD_HTTP_METHOD_GET) == 0 || strcmp(method, "HEAD") == 0;
    bool post = strcmp(method, MHD_HTTP_METHOD_POST) == 0;
    if (strcmp(url, "/metrics") == 0) {
        if (!get) {
            return reply_error(c, MHD_HTTP_METHOD_NOT_ALLOWED, "use GET", NULL);
        }
        char *text = NULL;
        size_t len = 0;
        if (h->metrics == NULL) {
            return reply(c, MHD_HTTP_OK, SDD_METRICS_CONTENT_TYPE, "", 0, false);
        }
        if (sdd_metrics_render(h->metrics, &text, &len) != SDD_OK) {
            return reply_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory", NULL);
        }
        return reply(c, MHD_HTTP_OK, SDD_METRICS_CONTENT_TYPE, text, len, true);
    }
    if (strncmp(url, "/api/run/", 9) == 0 && h->on_run != NULL) {
        enum { RUN_REPLY_MAX = 16384 };
        char *out = calloc(1, RUN_REPLY_MAX);
        if (out == NULL) {
            return reply_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory", NULL);
        }
        unsigned status = h->on_run(h->arg, method, url, rq->body ? rq->body : "", out,
                                    RUN_REPLY_MAX);
        return reply(c, status, "application/json", out, strlen(out), true);
    }
    bool state = strcmp(url, "/api/state") == 0, trans = strcmp(url, "/api/transition") == 0;
    if (!state && !trans) {
        return reply_error(c, MHD_HTTP_NOT_FOUND, "not found", NULL);
    }
    if ((state && !get) || (trans && !post)) {
        return reply_error(c, MHD_HTTP_METHOD_NOT_ALLOWED, state ? "use GET" : "use POST", NULL);
    }
    if (h->runctl == NULL) {
        return reply_error(c, MHD_HTTP_SERVICE_UNAVAILABLE, "no run control attached", NULL);
    }
    return state ? serve_state(h, c, MHD_HTTP_OK) : serve_transition(h, c, rq);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_size, void **con_cls)
{
    (void)version;
    struct sdd_http *h = cls;
    struct request *rq = *con_cls;
    if (rq == NULL) {
        rq = calloc(1, sizeof(*rq));
        if (rq == NULL) {
            return MHD_NO;
        }
        *con_cls = rq;
        const char *cl =
            MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl != NULL && strtoull(cl, NULL, 10) > h->max_body) {
            /* Refuse before reading it: MHD answers and closes the connection. */
            rq->too_big = true;
            return reply_error(c, MHD_HTTP_CONTENT_TOO_LARGE, "request body too large", NULL);
        }
        return MHD_YES;
    }
    if (*upload_size > 0) {
        if (!rq->too_big) {
            if (rq->len + *upload_size > h->max_body) {
                rq->too_big = true;
                free(rq->body);
                rq->body = NULL;
                rq->len = 0;
            } else {
                char *p = realloc(rq->body, rq->len + *upload_size + 1);
                if (p == NULL) {
                    return MHD_NO;
                }
                memcpy(p + rq->len, upload_data, *upload_size);
                rq->body = p;
                rq->len += *upload_size;
                rq->body[rq->len] = '\0';
            }
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (rq->too_big) {
        return reply_error(c, MHD_HTTP_CONTENT_TOO_LARGE, "request body too large", NULL);
    }
    return route(h, c, url, method, rq);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)c;
    (void)toe;
    struct request *rq = *con_cls;
    if (rq != NULL) {
        free(rq->body);
        free(rq);
        *con_cls = NULL;
    }
}

/* libmicrohttpd's own messages (malformed requests, ...) go to our log at debug level:
 * they are the client's problem, reported to it in the response. */
static void mhd_log(void *cls, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char msg[512];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    size_t n = strlen(msg);
    while (n > 0 && msg[n - 1] == '\n') {
        msg[--n] = '\0';
    }
    SDD_DEBUG("ctl", "http: %s", msg);
}

/* Bind and listen on host:port; returns the socket or -1 (err set). */
static int open_listener(const char *host, uint16_t port, sdd_err *err, uint16_t *bound)
{
    struct addrinfo hints = {0}, *ai = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    char ps[8];
    snprintf(ps, sizeof(ps), "%u", port);
    int rc = getaddrinfo(host, ps, &hints, &ai);
    if (rc != 0) {
        SDD_ERROR("ctl", "http: cannot resolve '%s': %s", host, gai_strerror(rc));
        *err = SDD_EINVAL;
        return -1;
    }
    int fd = -1;
    *err = SDD_EOS;
    for (struct addrinfo *a = ai; a != NULL && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) {
            continue;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 64) != 0) {
            int e = errno;
            SDD_ERROR("ctl", "http: cannot listen on %s:%u: %s", host, port, strerror(e));
            *err = sdd_err_from_errno(e);
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(ai);
    if (fd >= 0) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        getsockname(fd, (struct sockaddr *)&ss, &sl);
        *bound = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                : ((struct sockaddr_in *)&ss)->sin_port);
        *err = SDD_OK;
    }
    return fd;
}

sdd_err sdd_http_start(const struct sdd_http_opts *opts, sdd_http **out)
{
    if (opts == NULL || out == NULL) {
        return SDD_EINVAL;
    }
    sdd_http *h = calloc(1, sizeof(*h));
    if (h == NULL) {
        return SDD_ENOMEM;
    }
    h->metrics = opts->metrics;
    h->runctl = opts->runctl;
    h->on_transition = opts->on_transition;
    h->on_run = opts->on_run;
    h->arg = opts->arg;
    h->max_body = opts->max_body > 0 ? opts->max_body : DEFAULT_MAX_BODY;
    sdd_err err;
    int fd =
        open_listener(opts->host != NULL ? opts->host : "127.0.0.1", opts->port, &err, &h->port);
    if (fd < 0) {
        free(h);
        return err;
    }
    h->daemon = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ERROR_LOG,
                                 0, NULL, NULL, on_request, h, MHD_OPTION_EXTERNAL_LOGGER, mhd_log,
                                 NULL, MHD_OPTION_LISTEN_SOCKET, (MHD_socket)fd,
                                 MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL,
                                 MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)CONNECTION_TIMEOUT_S,
                                 MHD_OPTION_CONNECTION_LIMIT, (unsigned)64, MHD_OPTION_END);
    if (h->daemon == NULL) {
        SDD_ERROR("ctl", "http: libmicrohttpd did not start");
        close(fd);
        free(h);
        return SDD_EOS;
    }
    SDD_DEBUG("ctl", "http: serving on port %u", h->port);
    *out = h;
    return SDD_OK;
}

uint16_t sdd_http_port(const sdd_http *h)
{
    return h->port;
}

void sdd_http_stop(sdd_http *h)
{
    if (h == NULL) {
        return;
    }
    /* Closes the listening socket we handed over, too. */
    MHD_stop_daemon(h->daemon);
    free(h);
}
