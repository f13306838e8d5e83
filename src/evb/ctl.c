/* Sending event-builder control messages. Records for one peer made during one turn of the
 * node loop (a PULL and an ACK, say) leave together as one fabric message of up to
 * EVB_CTL_BATCH 32-byte records: each send costs about as much as a small copy of a bulk, so
 * fewer of them matter. Records the endpoint refuses (EAGAIN) wait in an ordered backlog; once
 * anything waits there, later records (and the staged ones before them) queue behind it, so
 * each peer sees them in order. */
#include <stdlib.h>
#include <string.h>

#include "evb_internal.h"
#include "sddaq/log.h"

#define LOG "evb"

static void backlog_push(struct sdd_evb_node *n, uint32_t to, const struct evb_ctl *m)
{
    if (n->backlog_n == n->backlog_cap) {
        uint32_t cap = n->backlog_cap ? 2 * n->backlog_cap : 256;
        struct evb_ctl *b = realloc(n->backlog, cap * sizeof(*b));
        uint32_t *t = b ? realloc(n->backlog_to, cap * sizeof(*t)) : NULL;
        if (b) {
            n->backlog = b;
        }
        if (t == NULL) {
            /* Cannot happen short of memory exhaustion; a lost ACK would strand a bulk. */
            SDD_ERROR(LOG, "out of memory for the control backlog");
            abort();
        }
        n->backlog_to = t;
        n->backlog_cap = cap;
    }
    n->backlog[n->backlog_n] = *m;
    n->backlog_to[n->backlog_n++] = to;
}

/* Try to post `count` records to `to` as one message; SDD_EAGAIN when it must wait. */
static sdd_err ctl_post(struct sdd_evb_node *n, uint32_t to, const struct evb_ctl *m,
                        uint32_t count)
{
    struct evb_peer *p = &n->peers[to];
    if (!p->alive || p->peer == NULL) {
        return SDD_OK; /* dropped: nobody to tell */
    }
    uint32_t i = n->ctl_tx_next;
    uint32_t tries = 0;
    while (n->ctl_tx_busy[i] && tries++ < EVB_CTL_TX) {
        i = (i + 1) % EVB_CTL_TX;
    }
    if (n->ctl_tx_busy[i]) {
        return SDD_EAGAIN;
    }
    struct evb_ctl *buf = n->ctl_tx + (size_t)i * EVB_CTL_BATCH;
    memcpy(buf, m, count * sizeof(*m));
    sdd_err err =
        sdd_ep_post_send(n->ep, p->peer, buf, count * sizeof(*m), n->ctl_mr, &n->ctl_tx_tag[i]);
    if (err == SDD_OK) {
        n->ctl_tx_busy[i] = true;
        n->ctl_tx_next = (i + 1) % EVB_CTL_TX;
    } else if (err != SDD_EAGAIN) {
        evb_peer_dead(n, to, sdd_errname(err));
        return SDD_OK;
    }
    return err;
}

/* Send what is staged for `to`; returns 1 when a message left (or was dropped), else 0. */
static int flush_peer(struct sdd_evb_node *n, uint32_t to)
{
    uint32_t k = n->nstaged[to];
    if (k == 0) {
        return 0;
    }
    n->nstaged[to] = 0;
    n->staged -= k;
    if (ctl_post(n, to, n->stage[to], k) == SDD_EAGAIN) {
        for (uint32_t j = 0; j < k; j++) {
            backlog_push(n, to, &n->stage[to][j]);
        }
        return 0;
    }
    return 1;
}

/* Move every staged record into the backlog, in order per peer. */
static void spill(struct sdd_evb_node *n)
{
    for (uint32_t to = 0; n->staged > 0 && to < n->o.nnodes; to++) {
        for (uint32_t j = 0; j < n->nstaged[to]; j++) {
            backlog_push(n, to, &n->stage[to][j]);
        }
        n->staged -= n->nstaged[to];
        n->nstaged[to] = 0;
    }
}

void evb_ctl_send(struct sdd_evb_node *n, uint32_t to, uint16_t type, uint64_t a, uint32_t b,
                  uint32_t c)
{
    evb_ctl_send_d(n, to, type, a, b, c, 0);
}

void evb_ctl_send_d(struct sdd_evb_node *n, uint32_t to, uint16_t type, uint64_t a, uint32_t b,
                    uint32_t c, uint64_t d)
{
    struct evb_ctl m = {.magic = EVB_CTL_MAGIC,
                        .type = type,
                        .from = (uint16_t)n->self,
                        .a = a,
                        .b = b,
                        .c = c,
                        .d = d};
    if (n->backlog_n == 0 && n->nstaged[to] == EVB_CTL_BATCH) {
        flush_peer(n, to);
    }
    if (n->backlog_n > 0) {
        spill(n); /* staged records are older: they go first */
        backlog_push(n, to, &m);
        return;
    }
    n->stage[to][n->nstaged[to]++] = m;
    n->staged++;
}

int evb_ctl_flush(struct sdd_evb_node *n)
{
    int sent = 0;
    for (uint32_t to = 0; n->staged > 0 && to < n->o.nnodes; to++) {
        sent += flush_peer(n, to);
    }
    uint32_t done = 0;
    while (done < n->backlog_n) {
        if (ctl_post(n, n->backlog_to[done], &n->backlog[done], 1) == SDD_EAGAIN) {
            break;
        }
        done++;
    }
    if (done > 0) {
        memmove(n->backlog, n->backlog + done, (n->backlog_n - done) * sizeof(*n->backlog));
        memmove(n->backlog_to, n->backlog_to + done,
                (n->backlog_n - done) * sizeof(*n->backlog_to));
        n->backlog_n -= done;
    }
    return sent + (int)done;
}

bool evb_ctl_idle(const struct sdd_evb_node *n)
{
    return n->staged == 0 && n->backlog_n == 0;
}
