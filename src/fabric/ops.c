/* Posting operations: sends, receives, RMA writes (with and without immediate data) and reads.
 * Each posted operation takes a slot that remembers its context, peer and deadline, so a dead
 * peer or an expired deadline can fail it even if the provider never reports it. */
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include "fabric/ep_internal.h"
#include "sddaq/clock.h"
#include "sddaq/log.h"

struct ep_op *ep_op_get(sdd_ep *ep)
{
    uint32_t i = ep->free_head;
    if (i == UINT32_MAX) {
        return NULL;
    }
    struct ep_op *op = &ep->ops[i];
    ep->free_head = op->next_free;
    return op;
}

void ep_op_put(sdd_ep *ep, struct ep_op *op)
{
    op->state = OP_FREE;
    op->peer = NULL;
    op->next_free = ep->free_head;
    ep->free_head = (uint32_t)(op - ep->ops);
}

void ep_op_untrack(sdd_ep *ep, struct ep_op *op)
{
    ep->posted--;
    if (op->peer != NULL) {
        op->peer->inflight--;
        ep->tx_inflight--;
    }
}

void ep_fail_peer_ops(sdd_ep *ep, sdd_peer *peer, sdd_err status)
{
    if (peer != NULL) {
        ep_chunk_fail(ep, peer, status);
    }
    while (peer == NULL && ep->chunk_head != NULL) {
        ep_chunk_fail(ep, ep->chunk_head, status);
    }
    for (uint32_t i = 0; i < ep->nops && ep->posted > 0; i++) {
        struct ep_op *op = &ep->ops[i];
        if (op->state != OP_POSTED || op->kind == SDD_CQE_RECV) {
            continue;
        }
        if (peer != NULL && op->peer != peer) {
            continue;
        }
        struct sdd_cqe cqe = {
            .ctx = op->ctx, .peer = op->peer, .status = status, .kind = (sdd_cqe_kind)op->kind};
        ep_push_local(ep, &cqe);
        /* The slot stays taken until the provider gives it back (if ever). */
        op->state = OP_ABANDONED;
        ep_op_untrack(ep, op);
        ep->stats.failed++;
    }
}

static sdd_err check_local(const sdd_ep *ep, const void *buf, size_t len, const sdd_mr *mr)
{
    if (buf == NULL && len > 0) {
        return SDD_EINVAL;
    }
    if (mr == NULL) {
        return ep->info.mr_local ? SDD_EINVAL : SDD_OK;
    }
    const char *b = buf, *base = mr->addr;
    if (b < base || (size_t)(b - base) > mr->len || len > mr->len - (size_t)(b - base)) {
        return SDD_EINVAL;
    }
    return SDD_OK;
}

static sdd_err check_peer(const sdd_ep *ep, const sdd_peer *peer)
{
    if (peer == NULL || peer->ep != ep) {
        return SDD_EINVAL;
    }
    return ep_peer_usable(peer);
}

static sdd_err check_target(const sdd_ep *ep, sdd_peer *peer, size_t len,
                            const struct sdd_rkey *rkey, uint64_t offset)
{
    sdd_err err = rkey == NULL ? SDD_EINVAL : check_peer(ep, peer);
    if (err != SDD_OK) {
        return err;
    }
    if (offset > rkey->len || len > rkey->len - offset) {
        return SDD_EINVAL;
    }
    return SDD_OK;
}

static struct ep_op *take_op(sdd_ep *ep, sdd_peer *peer, sdd_cqe_kind kind, void *ctx)
{
    struct ep_op *op = ep_op_get(ep);
    if (op == NULL) {
        ep->stats.eagain++;
        return NULL;
    }
    op->ctx = ctx;
    op->peer = peer;
    op->kind = (uint8_t)kind;
    op->deadline_ns = 0;
    if (peer != NULL && ep->opts.op_timeout_ms != 0) {
        op->deadline_ns = sdd_now_ns() + ep->opts.op_timeout_ms * SDD_NS_PER_MS;
    }
    return op;
}

/* Account for the provider's answer to a post. */
static sdd_err finish_post(sdd_ep *ep, struct ep_op *op, ssize_t rc, const char *what)
{
    if (rc == 0) {
        op->state = OP_POSTED;
        ep->posted++;
        ep->stats.posted++;
        if (op->peer != NULL) {
            op->peer->inflight++;
            ep->tx_inflight++;
        }
        return SDD_OK;
    }
    ep_op_put(ep, op);
    if (rc == -FI_EAGAIN) {
        ep->stats.eagain++;
        return SDD_EAGAIN;
    }
    SDD_WARN("fabric", "%s: %s (%zd)", what, fi_lib_strerror((int)-rc), rc);
    return ep_err_from_fi((int)rc);
}

/* Injected operations complete at once: the provider has copied the data. */
static sdd_err finish_inject(sdd_ep *ep, sdd_peer *peer, sdd_cqe_kind kind, void *ctx, ssize_t rc,
                             const char *what)
{
    if (rc == 0) {
        if (ctx != SDD_CTX_SILENT) {
            struct sdd_cqe cqe = {.ctx = ctx, .peer = peer, .kind = kind};
            ep_push_local(ep, &cqe);
        }
        ep->stats.posted++;
        ep->stats.completed++;
        return SDD_OK;
    }
    if (rc == -FI_EAGAIN) {
        ep->stats.eagain++;
        return SDD_EAGAIN;
    }
    SDD_WARN("fabric", "%s: %s (%zd)", what, fi_lib_strerror((int)-rc), rc);
    return ep_err_from_fi((int)rc);
}

static void *desc_of(const sdd_mr *mr)
{
    return mr ? mr->desc : NULL;
}

sdd_err sdd_ep_post_send(sdd_ep *ep, sdd_peer *peer, const void *buf, size_t len, sdd_mr *mr,
                         void *ctx)
{
    sdd_err err = check_peer(ep, peer);
    if (err != SDD_OK) {
        return err;
    }
    err = check_local(ep, buf, len, mr);
    if (err != SDD_OK) {
        return err;
    }
    if (len <= ep->info.inject_size) {
        ssize_t rc = fi_inject(ep->fid, buf, len, peer->addr);
        return finish_inject(ep, peer, SDD_CQE_SEND, ctx, rc, "fi_inject");
    }
    struct ep_op *op = take_op(ep, peer, SDD_CQE_SEND, ctx);
    if (op == NULL) {
        return SDD_EAGAIN;
    }
    ssize_t rc = fi_send(ep->fid, buf, len, desc_of(mr), peer->addr, &op->fctx);
    return finish_post(ep, op, rc, "fi_send");
}

sdd_err sdd_ep_post_recv(sdd_ep *ep, void *buf, size_t len, sdd_mr *mr, void *ctx)
{
    sdd_err err = check_local(ep, buf, len, mr);
    if (err != SDD_OK) {
        return err;
    }
    struct ep_op *op = take_op(ep, NULL, SDD_CQE_RECV, ctx);
    if (op == NULL) {
        return SDD_EAGAIN;
    }
    ssize_t rc = fi_recv(ep->fid, buf, len, desc_of(mr), FI_ADDR_UNSPEC, &op->fctx);
    return finish_post(ep, op, rc, "fi_recv");
}

static sdd_err post_write(sdd_ep *ep, sdd_peer *peer, const void *buf, size_t len, sdd_mr *mr,
                          const struct sdd_rkey *rkey, uint64_t offset, bool with_imm, uint64_t imm,
                          void *ctx)
{
    sdd_err err = check_target(ep, peer, len, rkey, offset);
    if (err == SDD_OK) {
        err = check_local(ep, buf, len, mr);
    }
    if (err != SDD_OK) {
        return err;
    }
    if (with_imm && ep->info.cq_data_size < 8 && (imm >> (8 * ep->info.cq_data_size)) != 0) {
        return SDD_EINVAL;
    }
    uint64_t raddr = rkey->addr + offset;
    if (peer->chunk.active) {
        return SDD_EAGAIN; /* one write in pieces per peer at a time */
    }
    if (ep->info.write_chunk != 0 && len > ep->info.write_chunk) {
        return ep_chunk_write(ep, peer, buf, len, raddr, rkey->key, with_imm, imm, ctx);
    }
    if (len <= ep->info.inject_size) {
        ssize_t rc = with_imm
                         ? fi_inject_writedata(ep->fid, buf, len, imm, peer->addr, raddr, rkey->key)
                         : fi_inject_write(ep->fid, buf, len, peer->addr, raddr, rkey->key);
        return finish_inject(ep, peer, SDD_CQE_WRITE, ctx, rc, "fi_inject_write");
    }
    struct ep_op *op = take_op(ep, peer, SDD_CQE_WRITE, ctx);
    if (op == NULL) {
        return SDD_EAGAIN;
    }
    ssize_t rc = with_imm ? fi_writedata(ep->fid, buf, len, desc_of(mr), imm, peer->addr, raddr,
                                         rkey->key, &op->fctx)
                          : fi_write(ep->fid, buf, len, desc_of(mr), peer->addr, raddr, rkey->key,
                                     &op->fctx);
    return finish_post(ep, op, rc, "fi_write");
}

sdd_err sdd_ep_post_write(sdd_ep *ep, sdd_peer *peer, const void *buf, size_t len, sdd_mr *mr,
                          const struct sdd_rkey *rkey, uint64_t offset, void *ctx)
{
    return post_write(ep, peer, buf, len, mr, rkey, offset, false, 0, ctx);
}

sdd_err sdd_ep_post_write_imm(sdd_ep *ep, sdd_peer *peer, const void *buf, size_t len, sdd_mr *mr,
                              const struct sdd_rkey *rkey, uint64_t offset, uint64_t imm, void *ctx)
{
    return post_write(ep, peer, buf, len, mr, rkey, offset, true, imm, ctx);
}

sdd_err sdd_ep_post_read(sdd_ep *ep, sdd_peer *peer, void *buf, size_t len, sdd_mr *mr,
                         const struct sdd_rkey *rkey, uint64_t offset, void *ctx)
{
    sdd_err err = check_target(ep, peer, len, rkey, offset);
    if (err == SDD_OK) {
        err = check_local(ep, buf, len, mr);
    }
    if (err != SDD_OK) {
        return err;
    }
    struct ep_op *op = take_op(ep, peer, SDD_CQE_READ, ctx);
    if (op == NULL) {
        return SDD_EAGAIN;
    }
    ssize_t rc = fi_read(ep->fid, buf, len, desc_of(mr), peer->addr, rkey->addr + offset, rkey->key,
                         &op->fctx);
    return finish_post(ep, op, rc, "fi_read");
}
