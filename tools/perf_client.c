/* sddaq perf client: drives each measurement (latency ping-pong or windowed bandwidth, for
 * send, RMA write and RMA read) against a perf server and reports one result per size. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "perf.h"
#include "sddaq/clock.h"

#define CLIENT_TIMEOUT_MS 60000
#define CALIBRATION_ITERS 64

static uint64_t default_iters(enum perf_test test, uint64_t size)
{
    if (test == PERF_LAT) {
        return size <= 65536 ? 10000 : size <= (1u << 20) ? 1000 : 100;
    }
    uint64_t n = (1ull << 30) / size; /* about 1 GiB per size */
    return n < 200 ? 200 : n > 200000 ? 200000 : n;
}

/* Untimed operations first: the first transfers set up connections and protocol state
 * (rendezvous buffers, page mappings), which a short timed run would otherwise include. */
static uint64_t warmup_of(enum perf_test test, uint64_t iters, uint32_t window)
{
    uint64_t w = iters / 10;
    if (test == PERF_BW && w < 2ull * window) {
        w = 2ull * window;
    }
    return w > 1000 ? 1000 : w;
}

/* Tell the server what comes and wait until it is ready. */
static int start_phase(struct perf_side *s, const struct perf_ctl *spec)
{
    if (perf_post_ctl_recv(s) != 0 || perf_send_ctl(s, spec) != 0) {
        return -1;
    }
    return perf_wait_ctl(s, CTL_READY, CLIENT_TIMEOUT_MS);
}

/* For RMA tests: FIN, then wait for DONE. Send tests only wait for DONE. */
static int end_phase(struct perf_side *s, bool send_fin)
{
    if (perf_post_ctl_recv(s) != 0) {
        return -1;
    }
    struct perf_ctl fin = {.magic = PERF_MAGIC, .type = CTL_FIN};
    if (send_fin && perf_send_ctl(s, &fin) != 0) {
        return -1;
    }
    return perf_wait_ctl(s, CTL_DONE, CLIENT_TIMEOUT_MS);
}

static int post_recv(struct perf_side *s, uint64_t size)
{
    sdd_err err = sdd_ep_post_recv(s->ep, s->buf + PERF_RX_OFF, size, s->mr, NULL);
    if (err != SDD_OK) {
        fprintf(stderr, "sddaq perf: posting receive: %s\n", sdd_strerror(err));
        return -1;
    }
    return 0;
}

/* The completion kind that ends one latency round trip. */
static sdd_cqe_kind lat_done_kind(enum perf_op op)
{
    return op == PERF_SEND ? SDD_CQE_RECV : op == PERF_WRITE ? SDD_CQE_REMOTE_WRITE : SDD_CQE_READ;
}

/* One clock read per round trip: each sample runs from the end of the previous round trip to
 * the end of this one, so it includes posting the receive (as fi_pingpong's mean does) and the
 * samples add up to the elapsed time. */
static int run_lat(struct perf_side *s, enum perf_op op, uint64_t size, uint64_t warm,
                   uint64_t iters, struct sdd_hist *h)
{
    sdd_cqe_kind done = lat_done_kind(op);
    uint64_t prev = sdd_now_ns();
    for (uint64_t i = 0; i < warm + iters; i++) {
        if (op == PERF_SEND && post_recv(s, size) != 0) {
            return -1;
        }
        int rc;
        while ((rc = perf_post(s, op, size, true)) == 1) {
            if (perf_progress(s) != 0) {
                return -1;
            }
        }
        if (rc != 0) {
            return -1;
        }
        struct sdd_cqe cqe;
        do {
            if (perf_next(s, &cqe, CLIENT_TIMEOUT_MS) != 0) {
                return -1;
            }
        } while (cqe.kind != done);
        uint64_t now = sdd_now_ns();
        if (i >= warm) {
            /* Ping-pongs report one way (half the round trip); a read is one whole op. */
            sdd_hist_record(h, op == PERF_READ ? now - prev : (now - prev) / 2);
        }
        prev = now;
    }
    return 0;
}

/* Keep `window` operations in flight until `iters` have completed. Returns elapsed ns or 0. */
static uint64_t run_bw(struct perf_side *s, enum perf_op op, uint64_t size, uint32_t window,
                       uint64_t iters)
{
    sdd_cqe_kind done = op == PERF_SEND    ? SDD_CQE_SEND
                        : op == PERF_WRITE ? SDD_CQE_WRITE
                                           : SDD_CQE_READ;
    uint64_t posted = 0, completed = 0;
    uint64_t t0 = sdd_now_ns();
    while (completed < iters) {
        bool stalled = false;
        while (posted < iters && posted - completed < window) {
            int rc = perf_post(s, op, size, false);
            if (rc < 0) {
                return 0;
            }
            if (rc == 1) {
                stalled = true; /* queues full: progress is needed, not necessarily a wait */
                break;
            }
            posted++;
        }
        struct sdd_cqe cqe;
        int got = stalled ? perf_try_next(s, &cqe) : perf_next(s, &cqe, CLIENT_TIMEOUT_MS) + 1;
        if (got < 0) {
            return 0;
        }
        if (got == 1 && cqe.kind == done) {
            completed++;
        }
    }
    uint64_t t = sdd_now_ns() - t0;
    return t > 0 ? t : 1;
}

/* One measurement of `iters` operations at one size. */
static int measure(struct perf_side *s, const struct perf_opts *o, uint64_t size, uint64_t iters,
                   struct perf_result *r)
{
    uint64_t warm = warmup_of(o->test, iters, o->window);
    struct perf_ctl spec = {.magic = PERF_MAGIC,
                            .type = CTL_SPEC,
                            .test = o->test,
                            .op = o->op,
                            .size = size,
                            .count = warm + iters,
                            .window = o->window};
    if (start_phase(s, &spec) != 0) {
        return -1;
    }
    memset(r, 0, sizeof(*r));
    r->test = o->test;
    r->op = o->op;
    r->size = size;
    r->iters = iters;
    r->window = o->test == PERF_LAT ? 1 : o->window;
    if (o->test == PERF_LAT) {
        struct sdd_hist *h = malloc(sizeof(*h));
        if (h == NULL) {
            return -1;
        }
        sdd_hist_init(h);
        int rc = run_lat(s, o->op, size, warm, iters, h);
        sdd_hist_summarize(h, &r->lat);
        free(h);
        if (rc != 0) {
            return -1;
        }
        double one_way_s = r->lat.mean / 1e9;
        r->bw_MBps = one_way_s > 0 ? (double)size / one_way_s / 1e6 : 0;
        r->msg_rate_kps = one_way_s > 0 ? 1.0 / one_way_s / 1e3 : 0;
    } else {
        uint64_t t = run_bw(s, o->op, size, o->window, warm);
        if (t != 0) {
            t = run_bw(s, o->op, size, o->window, iters);
        }
        if (t == 0) {
            return -1;
        }
        r->bw_MBps = (double)iters * (double)size / ((double)t / 1e9) / 1e6;
        r->msg_rate_kps = (double)iters / ((double)t / 1e9) / 1e3;
    }
    return end_phase(s, o->op != PERF_SEND);
}

/* Duration mode: a short calibration run sets the count that fills the requested time. */
static int pick_iters(struct perf_side *s, const struct perf_opts *o, uint64_t size,
                      uint64_t *iters)
{
    if (o->duration <= 0) {
        *iters = o->iters ? o->iters : default_iters(o->test, size);
        return 0;
    }
    struct perf_result probe;
    uint64_t t0 = sdd_now_ns();
    if (measure(s, o, size, CALIBRATION_ITERS, &probe) != 0) {
        return -1;
    }
    double per_op = (double)(sdd_now_ns() - t0) / CALIBRATION_ITERS;
    double n = o->duration * 1e9 / (per_op > 1 ? per_op : 1);
    *iters = n < 10 ? 10 : n > 1e8 ? 100000000 : (uint64_t)n;
    return 0;
}

static int run_all_sizes(struct perf_side *s, const struct perf_opts *o)
{
    const char *prov = sdd_ep_info(s->ep)->provider;
    for (int i = 0; i < o->nsizes; i++) {
        uint64_t iters;
        struct perf_result r;
        if (pick_iters(s, o, o->sizes[i], &iters) != 0 ||
            measure(s, o, o->sizes[i], iters, &r) != 0) {
            fprintf(stderr, "sddaq perf: %s %s at %llu bytes failed\n", perf_test_name(o->test),
                    perf_op_name(o->op), (unsigned long long)o->sizes[i]);
            return -1;
        }
        perf_print_result(o, prov, &r, i == 0 && !o->quiet_header);
    }
    return 0;
}

int perf_client_run(const struct perf_opts *o)
{
    struct perf_side s;
    if (perf_side_open(&s, o) != 0) {
        perf_side_close(&s);
        return 1;
    }
    struct perf_hello hello;
    perf_hello_make(&s, &hello);
    sdd_err err = sdd_ep_connect(s.ep, o->host, o->port, &hello, sizeof(hello), 10000, &s.peer);
    if (err != SDD_OK) {
        fprintf(stderr, "sddaq perf: cannot connect to %s:%u: %s\n", o->host, o->port,
                sdd_strerror(err));
        perf_side_close(&s);
        return 1;
    }
    int status = 1;
    if (perf_hello_take(&s) == 0 && run_all_sizes(&s, o) == 0) {
        struct perf_ctl quit = {.magic = PERF_MAGIC, .type = CTL_QUIT};
        status = perf_send_ctl(&s, &quit) == 0 ? 0 : 1;
        /* Let the QUIT leave before the endpoint goes away. */
        struct sdd_cqe cqe;
        sdd_ep_wait(s.ep, &cqe, 1, 100);
    }
    perf_side_close(&s);
    return status;
}
