/* sddaq perf server: accepts clients one after another and plays the passive side of each
 * measurement the client asks for (echoing ping-pongs, sinking streams, serving RMA). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "perf.h"

#define SERVER_TIMEOUT_MS 60000
#define IDLE_TIMEOUT_MS   (24 * 3600 * 1000)

/* Post receives for a send test: data receives into the receive half, at most `count`. */
static int post_data_recvs(struct perf_side *s, uint64_t size, uint64_t *posted, uint64_t want)
{
    while (*posted < want) {
        sdd_err err = sdd_ep_post_recv(s->ep, s->buf + PERF_RX_OFF, size, s->mr, NULL);
        if (err == SDD_EAGAIN) {
            return 0;
        }
        if (err != SDD_OK) {
            fprintf(stderr, "sddaq perf: posting receive: %s\n", sdd_strerror(err));
            return -1;
        }
        (*posted)++;
    }
    return 0;
}

/* Echo one operation back, driving progress while the queues are full. */
static int reply(struct perf_side *s, enum perf_op op, uint64_t size)
{
    int rc;
    while ((rc = perf_post(s, op, size, true)) == 1) {
        if (perf_progress(s) != 0) {
            return -1;
        }
    }
    return rc;
}

/* Send tests: receive `count` messages (echoing each one for latency), then DONE. */
static int serve_send(struct perf_side *s, const struct perf_ctl *spec)
{
    bool echo = spec->test == PERF_LAT;
    uint64_t depth = echo ? 1 : (spec->window < 16 ? 16 : spec->window);
    uint64_t posted = 0, received = 0;
    if (post_data_recvs(s, spec->size, &posted, depth < spec->count ? depth : spec->count) != 0) {
        return -1;
    }
    struct perf_ctl ready = {.magic = PERF_MAGIC, .type = CTL_READY};
    if (perf_send_ctl(s, &ready) != 0) {
        return -1;
    }
    while (received < spec->count) {
        struct sdd_cqe cqe;
        if (perf_next(s, &cqe, SERVER_TIMEOUT_MS) != 0) {
            return -1;
        }
        if (cqe.kind != SDD_CQE_RECV) {
            continue;
        }
        received++;
        uint64_t want = received + depth < spec->count ? received + depth : spec->count;
        if (post_data_recvs(s, spec->size, &posted, want) != 0) {
            return -1;
        }
        if (echo && reply(s, PERF_SEND, spec->size) != 0) {
            return -1;
        }
    }
    return 0;
}

/* RMA tests: answer write-with-immediate ping-pongs, keep progress going for the client's
 * one-sided operations, and stop at FIN. */
static int serve_rma(struct perf_side *s, const struct perf_ctl *spec)
{
    if (perf_post_ctl_recv(s) != 0) {
        return -1;
    }
    struct perf_ctl ready = {.magic = PERF_MAGIC, .type = CTL_READY};
    if (perf_send_ctl(s, &ready) != 0) {
        return -1;
    }
    bool echo = spec->test == PERF_LAT && spec->op == PERF_WRITE;
    for (;;) {
        struct sdd_cqe cqe;
        if (perf_next(s, &cqe, SERVER_TIMEOUT_MS) != 0) {
            return -1;
        }
        if (cqe.kind == SDD_CQE_REMOTE_WRITE && echo) {
            if (reply(s, PERF_WRITE, spec->size) != 0) {
                return -1;
            }
        } else if (cqe.kind == SDD_CQE_RECV && cqe.ctx == PERF_CTX_CTL) {
            s->ctl_armed = false;
            const struct perf_ctl *c = (const void *)(s->buf + PERF_CTL_RX_OFF);
            if (c->magic != PERF_MAGIC || c->type != CTL_FIN) {
                fprintf(stderr, "sddaq perf: expected FIN from the client\n");
                return -1;
            }
            return 0;
        }
    }
}

/* Handle one client until it quits or goes away. */
static int serve_client(struct perf_side *s)
{
    if (perf_hello_take(s) != 0 || perf_post_ctl_recv(s) != 0) {
        return -1;
    }
    for (;;) {
        struct sdd_cqe cqe;
        int rc = perf_next(s, &cqe, IDLE_TIMEOUT_MS);
        if (rc != 0) {
            return rc == -2 ? 0 : -1; /* a client that said goodbye is no failure */
        }
        if (cqe.kind != SDD_CQE_RECV || cqe.ctx != PERF_CTX_CTL) {
            continue;
        }
        s->ctl_armed = false;
        struct perf_ctl spec;
        memcpy(&spec, s->buf + PERF_CTL_RX_OFF, sizeof(spec));
        if (cqe.len != sizeof(spec) || spec.magic != PERF_MAGIC) {
            fprintf(stderr, "sddaq perf: malformed control message from client\n");
            return -1;
        }
        if (spec.type == CTL_QUIT) {
            return 0;
        }
        if (spec.type != CTL_SPEC || spec.size == 0 || spec.size > PERF_MAX_SIZE ||
            spec.count == 0) {
            fprintf(stderr, "sddaq perf: bad test request from client\n");
            return -1;
        }
        rc = spec.op == PERF_SEND ? serve_send(s, &spec) : serve_rma(s, &spec);
        /* Re-arm the control receive before DONE so the next request has a home. */
        struct perf_ctl done = {.magic = PERF_MAGIC, .type = CTL_DONE};
        if (rc != 0 || perf_post_ctl_recv(s) != 0 || perf_send_ctl(s, &done) != 0) {
            return -1;
        }
    }
}

static int announce_port(const struct perf_opts *o, uint16_t port)
{
    if (o->port_pipe >= 0) {
        if (write(o->port_pipe, &port, sizeof(port)) != (ssize_t)sizeof(port)) {
            return -1;
        }
        close(o->port_pipe);
    }
    if (o->port_file != NULL) {
        FILE *f = fopen(o->port_file, "w");
        if (f == NULL) {
            perror("sddaq perf: port file");
            return -1;
        }
        fprintf(f, "%u\n", port);
        fclose(f);
    }
    if (o->port_pipe < 0) { /* self mode's server is an implementation detail */
        fprintf(stderr, "sddaq perf: listening on %s:%u\n", o->host ? o->host : "*", port);
    }
    return 0;
}

int perf_server_run(const struct perf_opts *o)
{
    struct perf_side s;
    if (perf_side_open(&s, o) != 0) {
        perf_side_close(&s);
        return 1;
    }
    sdd_listener *l = NULL;
    sdd_err err = sdd_ep_listen(s.ep, o->host, o->port, &l);
    if (err != SDD_OK) {
        fprintf(stderr, "sddaq perf: cannot listen: %s\n", sdd_strerror(err));
        perf_side_close(&s);
        return 1;
    }
    if (announce_port(o, sdd_listener_port(l)) != 0) {
        perf_side_close(&s);
        return 1;
    }
    int status = 0;
    for (;;) {
        struct perf_hello hello;
        perf_hello_make(&s, &hello);
        err = sdd_listener_accept(l, &hello, sizeof(hello), -1, &s.peer);
        if (err != SDD_OK) {
            fprintf(stderr, "sddaq perf: accept: %s\n", sdd_strerror(err));
            continue;
        }
        s.cq_n = s.cq_i = 0;
        status = serve_client(&s) == 0 ? 0 : 1;
        sdd_peer_close(s.peer);
        s.peer = NULL;
        if (o->once) {
            break;
        }
    }
    perf_side_close(&s);
    return status;
}
