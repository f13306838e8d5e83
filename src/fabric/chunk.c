/* Writes cut into injected pieces, for libfabric 1.17's shm without cross-memory attach.
 *
 * There, a write larger than the inject size goes through the target's bounce buffers and
 * leaves an entry in the writer's response queue that the target must answer. The writer
 * completes its transfers in the order of that queue, so a target that dies (or stops) with
 * such an entry unanswered holds every later completion of the writer, towards every peer.
 * Injected writes leave no entry: the provider copies the piece into the target's inject
 * buffer and is done with it. So a larger write goes out as inject-sized pieces, in order
 * (the target applies them in the order posted), and completes once its last piece has left.
 * When the target's queue is full mid-way, the rest waits here and the next poll goes on;
 * meanwhile further writes to that peer wait (SDD_EAGAIN). As with any write, only its
 * completion says that what follows it arrives after its data. */
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <stdlib.h>

#include "fabric/ep_internal.h"
#include "sddaq/clock.h"
#include "sddaq/log.h"

size_t ep_choose_write_chunk(const struct fi_info *fi, const char *prov_name)
{
    const char *force = getenv("SDDAQ_FABRIC_WRITE_CHUNK");
    if (force != NULL && *force != '\0') {
        /* For measuring the two ways against each other: 0 keeps whole writes. */
        return atoi(force) > 0 ? fi->tx_attr->inject_size : 0;
    }
    /* The target must apply a peer's writes, and a send that follows them, in the order
     * posted: shm's receive side says so (it runs one command queue per target), though its
     * transmit side reports only the order of sends unless asked. */
    uint64_t in_order = FI_ORDER_WAW | FI_ORDER_SAW;
    bool ordered = (fi->rx_attr->msg_order & in_order) == in_order;
    bool shm_bounce = ep_core_name_is(prov_name, "shm") && !sdd_shm_has_cma();
    return shm_bounce && ordered ? fi->tx_attr->inject_size : 0;
}

static void unlink_chunk(sdd_ep *ep, sdd_peer *peer)
{
    sdd_peer **p = &ep->chunk_head;
    while (*p != NULL && *p != peer) {
        p = &(*p)->chunk.next;
    }
    if (*p == peer) {
        *p = peer->chunk.next;
    }
    peer->chunk.active = false;
    peer->chunk.next = NULL;
    peer->inflight--;
    ep->tx_inflight--;
}

/* Pieces posted per call. The target copies out all it has queued under its region lock,
 * which every writer to it spins on: short batches keep that wait short (4 nodes on 2 CPUs,
 * 4 KiB fragments: 0.65-0.70 M events/s at 16 against 0.51-0.59 M unbounded). */
#define CHUNK_BURST 16

/* Post up to CHUNK_BURST pieces: SDD_OK when the write is whole, SDD_EAGAIN when pieces are
 * left (target full, or the burst used up), else the provider's error. */
static sdd_err push_pieces(sdd_ep *ep, sdd_peer *peer)
{
    struct ep_chunk *c = &peer->chunk;
    size_t piece = ep->info.write_chunk;
    int burst = CHUNK_BURST;
    while ((c->done < c->len || c->with_imm) && burst-- > 0) {
        /* The immediate data goes last, alone: its completion at the target then reports
         * length 0 (as many providers do) rather than the last piece's. */
        bool imm = c->done == c->len;
        size_t n = imm ? 0 : c->len - c->done < piece ? c->len - c->done : piece;
        const uint8_t *src = c->src + c->done;
        ssize_t rc =
            imm ? fi_inject_writedata(ep->fid, c->src, 0, c->imm, peer->addr, c->raddr, c->key)
                : fi_inject_write(ep->fid, src, n, peer->addr, c->raddr + c->done, c->key);
        if (rc == -FI_EAGAIN) {
            ep->stats.eagain++;
            return SDD_EAGAIN;
        }
        if (rc != 0) {
            SDD_WARN("fabric", "fi_inject_write (piece): %s (%zd)", fi_lib_strerror((int)-rc), rc);
            return ep_err_from_fi((int)rc);
        }
        c->done += n;
        c->with_imm = c->with_imm && !imm;
    }
    return c->done < c->len || c->with_imm ? SDD_EAGAIN : SDD_OK;
}

static void complete(sdd_ep *ep, sdd_peer *peer, void *ctx)
{
    if (ctx != SDD_CTX_SILENT) {
        struct sdd_cqe cqe = {.ctx = ctx, .peer = peer, .kind = SDD_CQE_WRITE};
        ep_push_local(ep, &cqe);
    }
    ep->stats.completed++;
}

sdd_err ep_chunk_write(sdd_ep *ep, sdd_peer *peer, const void *buf, size_t len, uint64_t raddr,
                       uint64_t key, bool with_imm, uint64_t imm, void *ctx)
{
    struct ep_chunk *c = &peer->chunk;
    *c = (struct ep_chunk){.src = buf,
                           .len = len,
                           .raddr = raddr,
                           .key = key,
                           .imm = imm,
                           .ctx = ctx,
                           .with_imm = with_imm};
    sdd_err err = push_pieces(ep, peer);
    if (err == SDD_EAGAIN && c->done == 0) {
        return SDD_EAGAIN; /* nothing left: the caller tries again, as for any full queue */
    }
    if (err != SDD_OK && err != SDD_EAGAIN) {
        if (c->done == 0) {
            return err;
        }
        /* Part of it reached the target: the write fails like a posted one would. */
        struct sdd_cqe cqe = {.ctx = ctx, .peer = peer, .status = err, .kind = SDD_CQE_WRITE};
        ep_push_local(ep, &cqe);
        ep->stats.posted++;
        ep->stats.failed++;
        return SDD_OK;
    }
    ep->stats.posted++;
    if (err == SDD_OK) {
        complete(ep, peer, ctx);
        return SDD_OK;
    }
    c->active = true;
    c->deadline_ns =
        ep->opts.op_timeout_ms != 0 ? sdd_now_ns() + ep->opts.op_timeout_ms * SDD_NS_PER_MS : 0;
    c->next = ep->chunk_head;
    ep->chunk_head = peer;
    peer->inflight++;
    ep->tx_inflight++;
    return SDD_OK;
}

void ep_chunks_resume(sdd_ep *ep)
{
    sdd_peer *peer = ep->chunk_head;
    while (peer != NULL) {
        sdd_peer *next = peer->chunk.next;
        sdd_err err = push_pieces(ep, peer);
        if (err == SDD_OK) {
            unlink_chunk(ep, peer);
            complete(ep, peer, peer->chunk.ctx);
        } else if (err != SDD_EAGAIN) {
            ep_peer_declare_down(ep, peer, err); /* fails the write with the rest */
        }
        peer = next;
    }
}

void ep_chunks_expire(sdd_ep *ep, uint64_t now)
{
    sdd_peer *peer = ep->chunk_head;
    while (peer != NULL) {
        sdd_peer *next = peer->chunk.next;
        if (peer->chunk.deadline_ns != 0 && now > peer->chunk.deadline_ns) {
            /* As for a posted operation (expire_ops): the peer is not progressing. */
            SDD_WARN("fabric", "write to %s not done after %u ms: declaring the peer dead",
                     peer->name, ep->opts.op_timeout_ms);
            ep->stats.timed_out++;
            ep_peer_declare_down(ep, peer, SDD_ETIMEDOUT);
        }
        peer = next;
    }
}

void ep_chunk_fail(sdd_ep *ep, sdd_peer *peer, sdd_err status)
{
    if (!peer->chunk.active) {
        return;
    }
    unlink_chunk(ep, peer);
    struct sdd_cqe cqe = {
        .ctx = peer->chunk.ctx, .peer = peer, .status = status, .kind = SDD_CQE_WRITE};
    ep_push_local(ep, &cqe);
    ep->stats.failed++;
}

uint32_t sdd_ep_writes_in_pieces(const sdd_ep *ep)
{
    uint32_t n = 0;
    for (const sdd_peer *p = ep != NULL ? ep->chunk_head : NULL; p != NULL; p = p->chunk.next) {
        n++;
    }
    return n;
}
