/* Control-message slots: posting, sending and recognising completions. */
#include "rmem/ctl.h"

#include <stdlib.h>
#include <string.h>

#include "sddaq/log.h"

static uint8_t *slot_addr(const struct rm_ctl *c, uint32_t i)
{
    return c->mem + (size_t)i * RM_CTL_SLOT;
}

/* Index of the slot a completion's ctx points at, or -1 when it is not one of ours. */
static long slot_of(const struct rm_ctl *c, const void *ctx)
{
    const uint8_t *p = ctx;
    size_t total = (size_t)(c->rx_slots + c->tx_slots) * RM_CTL_SLOT;
    if (c->mem == NULL || p < c->mem || p >= c->mem + total ||
        (size_t)(p - c->mem) % RM_CTL_SLOT != 0) {
        return -1;
    }
    return (long)((size_t)(p - c->mem) / RM_CTL_SLOT);
}

static sdd_err post_rx(struct rm_ctl *c, uint32_t i)
{
    return sdd_ep_post_recv(c->ep, slot_addr(c, i), RM_CTL_SLOT, c->mr, slot_addr(c, i));
}

sdd_err rm_ctl_init(struct rm_ctl *c, sdd_ep *ep, uint32_t rx_slots, uint32_t tx_slots)
{
    memset(c, 0, sizeof(*c));
    c->ep = ep;
    c->rx_slots = rx_slots;
    c->tx_slots = tx_slots;
    size_t total = (size_t)(rx_slots + tx_slots) * RM_CTL_SLOT;
    c->mem = aligned_alloc(64, total);
    c->tx_free = calloc(tx_slots, sizeof(*c->tx_free));
    if (c->mem == NULL || c->tx_free == NULL) {
        rm_ctl_fini(c);
        return SDD_ENOMEM;
    }
    memset(c->mem, 0, total);
    sdd_err err = sdd_mr_reg(ep, c->mem, total, SDD_ACCESS_LOCAL, &c->mr);
    for (uint32_t i = 0; err == SDD_OK && i < rx_slots; i++) {
        err = post_rx(c, i);
    }
    if (err != SDD_OK) {
        sdd_mr_close(c->mr); /* nothing posted can complete into it: the caller closes ep */
        rm_ctl_fini(c);
        return err;
    }
    for (uint32_t i = 0; i < tx_slots; i++) {
        c->tx_free[c->tx_nfree++] = rx_slots + i;
    }
    return SDD_OK;
}

void rm_ctl_fini(struct rm_ctl *c)
{
    free(c->mem);
    free(c->tx_free);
    memset(c, 0, sizeof(*c));
}

sdd_err rm_ctl_send(struct rm_ctl *c, sdd_peer *peer, const struct rm_msg *m)
{
    if (c->tx_nfree == 0) {
        return SDD_EAGAIN;
    }
    uint32_t i = c->tx_free[c->tx_nfree - 1];
    uint8_t *p = slot_addr(c, i);
    size_t len = rm_encode(m, p, RM_CTL_SLOT);
    if (len == 0) {
        return SDD_EINVAL;
    }
    sdd_err err = sdd_ep_post_send(c->ep, peer, p, len, c->mr, p);
    if (err == SDD_OK) {
        c->tx_nfree--;
    }
    return err;
}

enum rm_ctl_event rm_ctl_classify(struct rm_ctl *c, const struct sdd_cqe *cqe, struct rm_msg *msg,
                                  sdd_err *decode_err)
{
    long i = slot_of(c, cqe->ctx);
    if (i < 0 || (cqe->kind != SDD_CQE_SEND && cqe->kind != SDD_CQE_RECV)) {
        return RM_CTL_NOT_MINE;
    }
    if (cqe->kind == SDD_CQE_SEND) {
        c->tx_free[c->tx_nfree++] = (uint32_t)i;
        return RM_CTL_SENT;
    }
    if (cqe->status != SDD_OK) {
        return RM_CTL_RX_FAILED;
    }
    *decode_err = rm_decode(slot_addr(c, (uint32_t)i), cqe->len, msg);
    return RM_CTL_RECEIVED;
}

sdd_err rm_ctl_repost(struct rm_ctl *c, const struct sdd_cqe *cqe)
{
    long i = slot_of(c, cqe->ctx);
    if (i < 0 || (uint32_t)i >= c->rx_slots) {
        return SDD_EINVAL;
    }
    sdd_err err = post_rx(c, (uint32_t)i);
    if (err != SDD_OK) {
        SDD_WARN("rmem", "re-posting a control receive failed: %s", sdd_strerror(err));
    }
    return err;
}

bool rm_ctl_idle(const struct rm_ctl *c)
{
    return c->tx_nfree == c->tx_slots;
}

bool rm_ctl_handle(struct rm_ctl *c, const struct sdd_cqe *cqe, rm_ctl_msg_fn fn, void *owner,
                   uint64_t *bad)
{
    struct rm_msg m;
    sdd_err derr = SDD_OK;
    switch (rm_ctl_classify(c, cqe, &m, &derr)) {
    case RM_CTL_RECEIVED:
        if (derr != SDD_OK) {
            SDD_WARN("rmem", "malformed control message (%zu bytes) from %s", cqe->len,
                     cqe->peer != NULL ? sdd_peer_name(cqe->peer) : "an unknown peer");
            (*bad)++;
        } else {
            fn(owner, cqe, &m);
        }
        rm_ctl_repost(c, cqe);
        return true;
    case RM_CTL_SENT:
    case RM_CTL_RX_FAILED:
        return true;
    case RM_CTL_NOT_MINE:
        break;
    }
    return false;
}
