/* sddaq perf: what server and client share: opening a side (endpoint plus one registered
 * buffer), the bootstrap info blob, control messages and completion waiting. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "perf.h"
#include "sddaq/bigbuf.h"
#include "sddaq/clock.h"

const char *perf_op_name(enum perf_op op)
{
    return op == PERF_SEND ? "send" : op == PERF_WRITE ? "write" : op == PERF_READ ? "read" : "?";
}

const char *perf_test_name(enum perf_test t)
{
    return t == PERF_LAT ? "lat" : t == PERF_BW ? "bw" : "?";
}

const char *perf_wait_name(sdd_wait_mode w)
{
    return w == SDD_WAIT_SPIN ? "spin" : w == SDD_WAIT_BLOCK ? "block" : "adaptive";
}

int perf_side_open(struct perf_side *s, const struct perf_opts *o)
{
    memset(s, 0, sizeof(*s));
    s->span = o->span;
    struct sdd_ep_opts eo;
    sdd_ep_opts_default(&eo);
    eo.provider = o->provider;
    eo.wait_mode = o->wait;
    sdd_err err = sdd_ep_open(&eo, &s->ep);
    if (err != SDD_OK) {
        fprintf(stderr, "sddaq perf: cannot open provider '%s': %s\n",
                o->provider ? o->provider : "auto", sdd_strerror(err));
        return -1;
    }
    /* The event builder's memory treatment, so evb bench compares like with like. */
    s->buf = sdd_bigbuf_alloc(PERF_BUF_SIZE, sdd_bigbuf_huge_for(sdd_ep_info(s->ep)->provider),
                              &s->buf_mapped);
    if (s->buf == NULL) {
        fprintf(stderr, "sddaq perf: out of memory\n");
        return -1;
    }
    /* Touch every page so first-use faults do not land in the timed loops. */
    memset(s->buf, 0xa5, PERF_BUF_SIZE);
    err = sdd_mr_reg(s->ep, s->buf, PERF_BUF_SIZE, SDD_ACCESS_ALL, &s->mr);
    if (err != SDD_OK) {
        fprintf(stderr, "sddaq perf: memory registration failed: %s\n", sdd_strerror(err));
        return -1;
    }
    return 0;
}

void perf_side_close(struct perf_side *s)
{
    sdd_ep_close(s->ep); /* also closes the peer and the MR */
    sdd_bigbuf_free(s->buf, s->buf_mapped);
    memset(s, 0, sizeof(*s));
}

void perf_hello_make(const struct perf_side *s, struct perf_hello *h)
{
    memset(h, 0, sizeof(*h));
    h->magic = PERF_MAGIC;
    sdd_mr_rkey(s->mr, &h->rkey);
}

int perf_hello_take(struct perf_side *s)
{
    size_t len = 0;
    const struct perf_hello *h = sdd_peer_info(s->peer, &len);
    if (len != sizeof(*h) || h->magic != PERF_MAGIC || h->rkey.len < PERF_BUF_SIZE) {
        fprintf(stderr, "sddaq perf: peer %s is not an sddaq perf peer of this version\n",
                sdd_peer_name(s->peer));
        return -1;
    }
    s->remote = h->rkey;
    return 0;
}

/* 0 for a good completion; -2, quietly, when the peer left on purpose; -1 otherwise. */
static int check_cqe(const struct sdd_cqe *cqe)
{
    if (cqe->status == SDD_OK) {
        return 0;
    }
    if (cqe->status == SDD_ECONNRESET) {
        return -2;
    }
    fprintf(stderr, "sddaq perf: %s%s: %s\n", sdd_cqe_kind_name(cqe->kind),
            cqe->kind == SDD_CQE_PEER_DOWN ? "" : " failed", sdd_strerror(cqe->status));
    return -1;
}

int perf_next(struct perf_side *s, struct sdd_cqe *cqe, int timeout_ms)
{
    uint64_t deadline = sdd_now_ns() + (uint64_t)timeout_ms * SDD_NS_PER_MS;
    while (s->cq_i == s->cq_n) {
        int n = sdd_ep_wait(s->ep, s->cq, (int)(sizeof(s->cq) / sizeof(s->cq[0])), 1000);
        if (n < 0) {
            fprintf(stderr, "sddaq perf: endpoint failed: %s\n", sdd_strerror(n));
            return -1;
        }
        s->cq_n = n;
        s->cq_i = 0;
        if (n == 0 && sdd_now_ns() > deadline) {
            fprintf(stderr, "sddaq perf: no completion for %d ms, giving up\n", timeout_ms);
            return -1;
        }
    }
    *cqe = s->cq[s->cq_i++];
    return check_cqe(cqe);
}

int perf_try_next(struct perf_side *s, struct sdd_cqe *cqe)
{
    if (perf_progress(s) != 0) {
        return -1;
    }
    if (s->cq_i == s->cq_n) {
        return 0;
    }
    *cqe = s->cq[s->cq_i++];
    return check_cqe(cqe) == 0 ? 1 : -1;
}

int perf_post_ctl_recv(struct perf_side *s)
{
    if (s->ctl_armed) {
        return 0;
    }
    sdd_err err =
        sdd_ep_post_recv(s->ep, s->buf + PERF_CTL_RX_OFF, PERF_CTL_SIZE, s->mr, PERF_CTX_CTL);
    if (err != SDD_OK) {
        fprintf(stderr, "sddaq perf: posting control receive: %s\n", sdd_strerror(err));
        return -1;
    }
    s->ctl_armed = true;
    return 0;
}

int perf_send_ctl(struct perf_side *s, const struct perf_ctl *c)
{
    memcpy(s->buf + PERF_CTL_TX_OFF, c, sizeof(*c));
    uint64_t deadline = sdd_now_ns() + 10 * SDD_NS_PER_S;
    for (;;) {
        if (sdd_now_ns() > deadline) {
            fprintf(stderr, "sddaq perf: control message not accepted for 10 s\n");
            return -1;
        }
        sdd_err err =
            sdd_ep_post_send(s->ep, s->peer, s->buf + PERF_CTL_TX_OFF, sizeof(*c), s->mr, NULL);
        if (err == SDD_OK) {
            return 0;
        }
        if (err != SDD_EAGAIN) {
            fprintf(stderr, "sddaq perf: sending control message: %s\n", sdd_strerror(err));
            return -1;
        }
        if (perf_progress(s) != 0) {
            return -1;
        }
    }
}

int perf_progress(struct perf_side *s)
{
    if (s->cq_i < s->cq_n) {
        return 0; /* completions are waiting to be handed out: nothing to do */
    }
    int n = sdd_ep_poll(s->ep, s->cq, (int)(sizeof(s->cq) / sizeof(s->cq[0])));
    if (n < 0) {
        fprintf(stderr, "sddaq perf: endpoint failed: %s\n", sdd_strerror(n));
        return -1;
    }
    s->cq_n = n;
    s->cq_i = 0;
    return 0;
}

int perf_post(struct perf_side *s, enum perf_op op, uint64_t size, bool imm)
{
    /* Ping-pongs wait for the peer's answer, never for their own send's completion. */
    void *ctx = imm && op != PERF_READ ? SDD_CTX_SILENT : NULL;
    /* With a span, each write or read takes the next size-long stretch of both buffers, as a
     * builder moves new bulks rather than one cache-resident buffer over and over. */
    uint64_t off = 0;
    if (size != 0 && s->span > size && op != PERF_SEND) {
        off = s->next % (s->span / size) * size;
    }
    sdd_err err;
    if (op == PERF_SEND) {
        err = sdd_ep_post_send(s->ep, s->peer, s->buf + PERF_TX_OFF, size, s->mr, ctx);
    } else if (op == PERF_WRITE && imm) {
        err = sdd_ep_post_write_imm(s->ep, s->peer, s->buf + PERF_TX_OFF + off, size, s->mr,
                                    &s->remote, PERF_RX_OFF + off, size, ctx);
    } else if (op == PERF_WRITE) {
        err = sdd_ep_post_write(s->ep, s->peer, s->buf + PERF_TX_OFF + off, size, s->mr, &s->remote,
                                PERF_RX_OFF + off, ctx);
    } else {
        err = sdd_ep_post_read(s->ep, s->peer, s->buf + PERF_RX_OFF + off, size, s->mr, &s->remote,
                               PERF_TX_OFF + off, ctx);
    }
    if (err == SDD_OK) {
        s->next++;
        return 0;
    }
    if (err == SDD_EAGAIN) {
        return 1;
    }
    fprintf(stderr, "sddaq perf: posting %s: %s\n", perf_op_name(op), sdd_strerror(err));
    return -1;
}

int perf_wait_ctl(struct perf_side *s, uint32_t type, int timeout_ms)
{
    for (;;) {
        struct sdd_cqe cqe;
        if (perf_next(s, &cqe, timeout_ms) != 0) {
            return -1;
        }
        if (cqe.kind == SDD_CQE_RECV && cqe.ctx == PERF_CTX_CTL) {
            s->ctl_armed = false;
            const struct perf_ctl *c = (const void *)(s->buf + PERF_CTL_RX_OFF);
            if (cqe.len == sizeof(*c) && c->magic == PERF_MAGIC && c->type == type) {
                return 0;
            }
            fprintf(stderr, "sddaq perf: unexpected control message from the peer\n");
            return -1;
        }
    }
}
