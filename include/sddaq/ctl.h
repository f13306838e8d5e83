/* Run control: the run state machine of DESIGN.md, the HTTP control and metrics server
 * (libmicrohttpd) that exposes it, and a small HTTP client for `sddaq ctl` and tests.
 *
 * States and legal transitions (anything else is refused):
 *
 *   initial ──► configured ──► running ◄──► paused
 *                   ▲             │            │
 *                   │             ▼            │
 *                   └──────── stopped ◄────────┘
 *   any state except error ──► error ──► initial   (reset, after the failure was dealt with)
 *
 * HTTP API (docs/metrics.md):
 *   GET  /metrics          Prometheus text format (the registry given to the server)
 *   GET  /api/state        {"state":"running","previous":"configured","transitions":3,
 *                           "seconds_in_state":1.5,"reason":""}
 *   POST /api/transition   body {"to":"running"} (optional "reason":"..."):
 *                          200 + the new state, 400 bad request, 409 illegal transition,
 *                          413 body too large, 500 the handler failed; errors are
 *                          {"error":"..."} (409 adds "from" and "to").
 *   anything else          404 (unknown path) or 405 (known path, wrong method). */
#ifndef SDDAQ_CTL_H
#define SDDAQ_CTL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sddaq/api.h"
#include "sddaq/err.h"
#include "sddaq/metrics.h"

/* ---- Run state machine ------------------------------------------------------------------- */

typedef enum {
    SDD_RUN_INITIAL = 0,
    SDD_RUN_CONFIGURED,
    SDD_RUN_RUNNING,
    SDD_RUN_PAUSED,
    SDD_RUN_STOPPED,
    SDD_RUN_ERROR,
    SDD_RUN_STATE_COUNT
} sdd_run_state;

/* "initial", "configured", ...; "?" when out of range. */
SDD_API const char *sdd_run_state_name(sdd_run_state s);

/* The state of that name; -1 when unknown. */
SDD_API int sdd_run_state_parse(const char *name);

/* Is from -> to a transition of the diagram above? Pure function. */
SDD_API bool sdd_run_transition_legal(sdd_run_state from, sdd_run_state to);

typedef struct sdd_runctl sdd_runctl;

#define SDD_RUNCTL_REASON_MAX 256

struct sdd_runctl_status {
    sdd_run_state state;
    sdd_run_state previous;             /* before the last transition (initial at first) */
    uint64_t transitions;               /* transitions made */
    uint64_t since_ns;                  /* sdd_now_ns() when the current state was entered */
    char reason[SDD_RUNCTL_REASON_MAX]; /* given with the last transition ("node: why" for
                                           error), "" when none */
};

/* A state machine in state initial. Returns SDD_OK or SDD_ENOMEM. */
SDD_API sdd_err sdd_runctl_create(sdd_runctl **out);

/* Free it. NULL is fine. */
SDD_API void sdd_runctl_destroy(sdd_runctl *rc);

/* Current status. Any thread. */
SDD_API void sdd_runctl_get(sdd_runctl *rc, struct sdd_runctl_status *st);

/* Move to `to` when legal from the current state. reason (may be NULL) is kept, truncated.
 * Returns SDD_OK, SDD_EINVAL (to is not a state) or SDD_EBUSY (not legal from the current
 * state: HTTP 409). Atomic with respect to other calls; any thread. */
SDD_API sdd_err sdd_runctl_transition(sdd_runctl *rc, sdd_run_state to, const char *reason);

/* As above, but only when the current state is `from` (compare and set), so that a caller can
 * check, do slow work, and commit without another transition slipping in between unseen.
 * SDD_EBUSY when the state is no longer `from` or the move is not legal. */
SDD_API sdd_err sdd_runctl_transition_from(sdd_runctl *rc, sdd_run_state from, sdd_run_state to,
                                           const char *reason);

/* Put the run in error with "node: reason" (node may be NULL). SDD_EBUSY if already in
 * error (the first failure's reason is kept). */
SDD_API sdd_err sdd_runctl_fail(sdd_runctl *rc, const char *node, const char *reason);

/* Write the status as one JSON object (see the header comment) into buf. Returns the length
 * (as snprintf: may exceed len - 1 when truncated). */
SDD_API int sdd_runctl_json(sdd_runctl *rc, char *buf, size_t len);

/* The body of a JSON string for s (quote, backslash and control characters escaped), for a
 * client building a request such as {"to":"running","reason":"..."}. Writes at most len bytes
 * including the NUL, stopping early (at a whole character) when s does not fit; returns the
 * length written. */
SDD_API size_t sdd_json_escape(char *dst, size_t len, const char *s);

/* Register the run's own metrics in m: sddaq_run_state{state="<name>"} (gauge, 1 for the
 * current state, 0 for the others) and sddaq_run_transitions_total (counter). Both read rc
 * when rendered, so rc must outlive them (remove them, or destroy m, first). Returns as
 * sdd_metrics_callback(); on failure nothing stays registered. */
SDD_API sdd_err sdd_runctl_register_metrics(sdd_runctl *rc, sdd_metrics *m);

/* ---- HTTP server ------------------------------------------------------------------------- */

typedef struct sdd_http sdd_http;

/* Called for POST /api/transition with a well-formed request, on the server's one thread
 * (calls never overlap). It does the work (start stages, ...) and moves rc itself, usually
 * with sdd_runctl_transition_from(). Return SDD_OK (200), SDD_EBUSY (409), SDD_EINVAL (400)
 * or another error (500); msg (msg_len bytes, starts empty) may say why. */
typedef sdd_err (*sdd_http_transition_fn)(void *arg, sdd_runctl *rc, sdd_run_state to,
                                          const char *reason, char *msg, size_t msg_len);

/* Requests for paths under /api/run/ (any method), on the server's one thread: a runtime's
 * own API between nodes (docs/run.md). Write a JSON body (at most len bytes, NUL-terminated)
 * into out and return the HTTP status. body is the request body ("" when none). */
typedef unsigned (*sdd_http_run_fn)(void *arg, const char *method, const char *path,
                                    const char *body, char *out, size_t len);

struct sdd_http_opts {
    const char *host;     /* address to bind; NULL = "127.0.0.1"; "0.0.0.0" or "::" for all */
    uint16_t port;        /* 0 = any free port (see sdd_http_port) */
    sdd_metrics *metrics; /* served at /metrics; NULL = an empty page */
    sdd_runctl *runctl;   /* served at /api/state and /api/transition; NULL = 503 */
    sdd_http_transition_fn on_transition; /* NULL = sdd_runctl_transition() directly */
    sdd_http_run_fn on_run;               /* /api/run/...; NULL = 404 there */
    void *arg;                            /* for on_transition and on_run */
    size_t max_body;                      /* largest request body; 0 = 4096 bytes */
};

/* Bind, listen and serve from an internal thread. Nothing in opts need outlive the call
 * except metrics and runctl, which must outlive the server. Returns SDD_OK, SDD_EINVAL (bad
 * host), SDD_EOS (bind or listen failed: address in use, ...), SDD_ENOMEM. */
SDD_API sdd_err sdd_http_start(const struct sdd_http_opts *opts, sdd_http **out);

/* The port actually bound. */
SDD_API uint16_t sdd_http_port(const sdd_http *h);

/* Stop serving (waits for the thread; requests in flight are finished or dropped) and free.
 * NULL is fine. */
SDD_API void sdd_http_stop(sdd_http *h);

/* ---- HTTP client ------------------------------------------------------------------------- */

/* One request over a new TCP connection, HTTP/1.1 with "Connection: close". body may be NULL
 * (no body); it is sent as application/json. Waits at most timeout_ms for connect, each send
 * and each receive. On success *status is the HTTP status and *resp a new NUL-terminated copy
 * of the response body (free()), *resp_len its length (may be NULL). Responses up to 16 MiB;
 * chunked transfer encoding is not supported (SDD_EPROTO). Returns SDD_OK, SDD_EINVAL,
 * SDD_ECONNREFUSED, SDD_ETIMEDOUT, SDD_EPROTO, SDD_ETOOBIG, SDD_ENOMEM or SDD_EOS. */
SDD_API sdd_err sdd_http_request(const char *host, uint16_t port, const char *method,
                                 const char *path, const char *body, int timeout_ms, int *status,
                                 char **resp, size_t *resp_len);

/* Whether something accepts TCP connections at host:port within timeout_ms: a control port's
 * liveness, without waiting for a server that is busy answering a long request. */
SDD_API bool sdd_http_reachable(const char *host, uint16_t port, int timeout_ms);
/* The same, telling why not: SDD_ECONNREFUSED when the host answered that nothing listens
 * there (the process is gone, the host is up and reachable), SDD_ETIMEDOUT (or another error)
 * when nothing answered at all (a host down or cut off). */
SDD_API sdd_err sdd_http_probe(const char *host, uint16_t port, int timeout_ms);
/* sdd_http_probe of n hosts at once: out[i] for hosts[i]:ports[i], all within timeout_ms in
 * total (not per host), so that a few silent hosts do not add up. Only each host's first
 * address is tried. Blocks up to timeout_ms. */
SDD_API void sdd_http_probe_all(const char *const *hosts, const uint16_t *ports, size_t n,
                                int timeout_ms, sdd_err *out);

#endif
