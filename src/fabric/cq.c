/* Completions: reading the provider's queue in bursts, merging in completions sddaq makes
 * itself, waiting (spin, adaptive or blocking on an fd), and the periodic housekeeping that
 * turns dead peers and expired deadlines into error completions. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#include <rdma/fi_errno.h>

#include "fabric/ep_internal.h"
#include "sddaq/clock.h"
#include "sddaq/log.h"

#define READ_BURST 32

int cqe_fifo_init(struct cqe_fifo *q, uint32_t cap)
{
    q->items = calloc(cap, sizeof(*q->items));
    q->cap = cap;
    q->head = q->tail = 0;
    return q->items ? SDD_OK : SDD_ENOMEM;
}

void cqe_fifo_fini(struct cqe_fifo *q)
{
    free(q->items);
    q->items = NULL;
}

void ep_push_local(sdd_ep *ep, const struct sdd_cqe *cqe)
{
    struct cqe_fifo *q = &ep->local;
    if (q->tail - q->head == q->cap) {
        /* Sized so this cannot happen; if it does, say so rather than lose it quietly. */
        SDD_ERROR("fabric", "local completion queue full, dropping %s completion",
                  sdd_cqe_kind_name(cqe->kind));
        return;
    }
    q->items[q->tail % q->cap] = *cqe;
    q->tail++;
}

static int pop_local(sdd_ep *ep, struct sdd_cqe *out, int max)
{
    struct cqe_fifo *q = &ep->local;
    int n = 0;
    while (n < max && q->head != q->tail) {
        out[n++] = q->items[q->head % q->cap];
        q->head++;
    }
    return n;
}

/* Give an op's slot back after its provider completion; false if the op was already failed
 * towards the user (the completion is then swallowed). */
static bool retire_op(sdd_ep *ep, struct ep_op *op)
{
    if (op->state == OP_ABANDONED) {
        ep->stats.late_completions++;
        ep_op_put(ep, op);
        return false;
    }
    ep_op_untrack(ep, op);
    return true;
}

static bool translate(sdd_ep *ep, const struct fi_cq_data_entry *e, fi_addr_t src,
                      struct sdd_cqe *out)
{
    struct ep_op *op = e->op_context;
    /* A remote write's immediate data consumes none of our receives unless the provider says
     * so (FI_RX_CQ_DATA); its op_context is then undefined (shm was seen to fill in a stray
     * value), so it must not be taken for one of our operations. */
    bool remote_write =
        (e->flags & FI_REMOTE_CQ_DATA) && (e->flags & (FI_RMA | FI_REMOTE_WRITE)) != 0;
    if (op == NULL || (remote_write && !ep->info.rx_cq_data)) {
        if (!(e->flags & FI_REMOTE_CQ_DATA)) {
            return false;
        }
        *out = (struct sdd_cqe){.peer = ep_peer_by_addr(ep, src),
                                .imm = e->data,
                                .len = e->len,
                                .kind = SDD_CQE_REMOTE_WRITE};
        return true;
    }
    if (!retire_op(ep, op)) {
        return false;
    }
    if (op->ctx == SDD_CTX_SILENT) {
        ep->stats.completed++;
        ep_op_put(ep, op);
        return false;
    }
    *out = (struct sdd_cqe){.ctx = op->ctx, .peer = op->peer, .kind = (sdd_cqe_kind)op->kind};
    if (op->kind == SDD_CQE_RECV) {
        out->peer = ep_peer_by_addr(ep, src); /* only receives need the source looked up */
        out->len = e->len;
        if ((e->flags & FI_REMOTE_CQ_DATA) && (e->flags & FI_RMA)) {
            /* FI_RX_CQ_DATA providers consume a posted receive for immediate data. */
            out->kind = SDD_CQE_REMOTE_WRITE;
            out->imm = e->data;
        }
    }
    ep->stats.completed++;
    ep_op_put(ep, op);
    return true;
}

static bool translate_error(sdd_ep *ep, struct sdd_cqe *out)
{
    struct fi_cq_err_entry err = {0};
    ssize_t rc = fi_cq_readerr(ep->cq, &err, 0);
    if (rc < 0) {
        return false;
    }
    struct ep_op *op = err.op_context;
    sdd_err status = ep_err_from_fi(-err.err);
    if (status == SDD_OK) {
        status = SDD_EFABRIC;
    }
    SDD_DEBUG("fabric", "completion error: %s (%d), provider: %s", fi_lib_strerror(err.err),
              err.err, fi_cq_strerror(ep->cq, err.prov_errno, err.err_data, NULL, 0));
    if (op == NULL || !retire_op(ep, op)) {
        return false;
    }
    *out = (struct sdd_cqe){.ctx = op->ctx,
                            .peer = op->peer,
                            .len = err.len,
                            .status = status,
                            .kind = (sdd_cqe_kind)op->kind};
    ep->stats.failed++;
    sdd_peer *peer = op->peer;
    ep_op_put(ep, op);
    if (peer != NULL && status == SDD_EPEERDEAD) {
        ep_peer_declare_down(ep, peer, SDD_EPEERDEAD);
    }
    return true;
}

static int read_provider(sdd_ep *ep, struct sdd_cqe *out, int max)
{
    struct fi_cq_data_entry entries[READ_BURST];
    fi_addr_t srcs[READ_BURST];
    int want = max < READ_BURST ? max : READ_BURST;
    ssize_t rc = ep->info.source_addr ? fi_cq_readfrom(ep->cq, entries, (size_t)want, srcs)
                                      : fi_cq_read(ep->cq, entries, (size_t)want);
    if (rc == -FI_EAGAIN) {
        return 0;
    }
    if (rc == -FI_EAVAIL) {
        return translate_error(ep, out) ? 1 : 0;
    }
    if (rc < 0) {
        SDD_ERROR("fabric", "fi_cq_read: %s (%zd)", fi_lib_strerror((int)-rc), rc);
        return ep_err_from_fi((int)rc);
    }
    int n = 0;
    for (ssize_t i = 0; i < rc; i++) {
        fi_addr_t src = ep->info.source_addr ? srcs[i] : FI_ADDR_NOTAVAIL;
        if (translate(ep, &entries[i], src, &out[n])) {
            n++;
        }
    }
    return n;
}

static void expire_ops(sdd_ep *ep, uint64_t now)
{
    uint32_t seen = 0;
    for (uint32_t i = 0; i < ep->nops && seen < ep->posted; i++) {
        struct ep_op *op = &ep->ops[i];
        if (op->state != OP_POSTED) {
            continue;
        }
        seen++;
        if (op->deadline_ns == 0 || op->deadline_ns > now || op->peer == NULL) {
            continue;
        }
        /* A peer that lets an operation sit past its deadline is not progressing: treat it
         * as dead, which fails all its operations, not just this one. */
        sdd_peer *peer = op->peer;
        SDD_WARN("fabric", "%s to %s not done after %u ms: declaring the peer dead",
                 sdd_cqe_kind_name((sdd_cqe_kind)op->kind), peer->name, ep->opts.op_timeout_ms);
        uint64_t before = ep->stats.failed;
        ep_peer_declare_down(ep, peer, SDD_ETIMEDOUT);
        ep->stats.timed_out += ep->stats.failed - before;
    }
}

void ep_tick(sdd_ep *ep, uint64_t now)
{
    if (now < ep->next_tick_ns) {
        return;
    }
    ep->next_tick_ns = now + EP_TICK_NS;
    if (ep->npeers > 0) {
        ep_check_peers(ep, now);
    }
    if (ep->posted > 0 && ep->opts.op_timeout_ms != 0) {
        expire_ops(ep, now);
    }
    if (ep->chunk_head != NULL) {
        ep_chunks_expire(ep, now);
    }
}

void ep_flush(sdd_ep *ep, const sdd_peer *peer, bool keep)
{
    uint64_t deadline = sdd_now_ns() + EP_FLUSH_NS;
    int quiet = 0;
    /* A few empty reads after the last pending operation let injected data leave too. */
    while (quiet < 4 && sdd_now_ns() < deadline) {
        struct sdd_cqe c[16];
        if (keep && ep->local.cap - (ep->local.tail - ep->local.head) < 16) {
            break; /* no room to keep what we would read */
        }
        if (ep->chunk_head != NULL) {
            ep_chunks_resume(ep);
        }
        int n = read_provider(ep, c, 16);
        for (int i = 0; keep && i < n; i++) {
            ep_push_local(ep, &c[i]);
        }
        uint32_t pending = peer != NULL ? peer->inflight : ep->tx_inflight;
        quiet = (n == 0 && pending == 0) ? quiet + 1 : 0;
    }
}

int sdd_ep_poll(sdd_ep *ep, struct sdd_cqe *cqes, int max)
{
    if (ep == NULL || cqes == NULL || max <= 0) {
        return SDD_EINVAL;
    }
    if (ep->polls_to_clock-- == 0) {
        ep->polls_to_clock = EP_POLLS_PER_CLOCK - 1;
        ep_tick(ep, sdd_now_ns());
    }
    if (ep->chunk_head != NULL) {
        ep_chunks_resume(ep);
    }
    int n = pop_local(ep, cqes, max);
    if (n < max) {
        int m = read_provider(ep, cqes + n, max - n);
        if (m < 0) {
            return n > 0 ? n : m;
        }
        n += m;
    }
    return n;
}

sdd_err sdd_ep_trywait(sdd_ep *ep)
{
    ep_tick(ep, sdd_now_ns());
    if (ep->local.head != ep->local.tail || ep->chunk_head != NULL) {
        return SDD_EAGAIN;
    }
    if (ep->cq_fd < 0) {
        return SDD_OK;
    }
    struct fid *fids[1] = {&ep->cq->fid};
    return fi_trywait(ep->fabric, fids, 1) == FI_SUCCESS ? SDD_OK : SDD_EAGAIN;
}

int sdd_ep_fd(const sdd_ep *ep)
{
    return ep->epfd;
}

int sdd_ep_tick_ms(const sdd_ep *ep)
{
    return ep->cq_fd >= 0 ? (int)(EP_TICK_NS / SDD_NS_PER_MS) : 1;
}

/* Sleep until the fd fires, the next housekeeping tick, or the deadline. */
static void sleep_once(sdd_ep *ep, uint64_t now, uint64_t deadline, uint64_t *backoff_ns)
{
    uint64_t until = deadline < ep->next_tick_ns ? deadline : ep->next_tick_ns;
    uint64_t span = until > now ? until - now : 0;
    if (ep->cq_fd >= 0) {
        if (sdd_ep_trywait(ep) != SDD_OK) {
            return;
        }
        int ms = (int)((span + SDD_NS_PER_MS - 1) / SDD_NS_PER_MS);
        struct epoll_event ev[4];
        int n = epoll_wait(ep->epfd, ev, 4, ms);
        if (n > 0) {
            ep->next_tick_ns = 0; /* a peer socket may have fired: check now */
        }
        return;
    }
    /* No native fd: timed polling with a growing pause keeps a slow stream cheap. */
    uint64_t pause = *backoff_ns < span ? *backoff_ns : span;
    sdd_sleep_ns(pause);
    *backoff_ns = *backoff_ns * 2 > 1000 * SDD_NS_PER_US ? 1000 * SDD_NS_PER_US : *backoff_ns * 2;
}

int sdd_ep_wait(sdd_ep *ep, struct sdd_cqe *cqes, int max, int timeout_ms)
{
    uint64_t start = sdd_now_ns();
    uint64_t deadline = timeout_ms < 0 ? UINT64_MAX : start + (uint64_t)timeout_ms * SDD_NS_PER_MS;
    uint64_t spin_until = start;
    if (ep->opts.wait_mode == SDD_WAIT_SPIN) {
        spin_until = deadline;
    } else if (ep->opts.wait_mode == SDD_WAIT_ADAPTIVE) {
        spin_until = start + ep->opts.spin_us * SDD_NS_PER_US;
    }
    uint64_t backoff = 10 * SDD_NS_PER_US;
    for (uint32_t spins = 0;; spins++) {
        int n = sdd_ep_poll(ep, cqes, max);
        if (n != 0) {
            return n;
        }
        if (spins % EP_POLLS_PER_CLOCK != 0) {
            continue; /* spinning: look at the clock only now and then */
        }
        uint64_t now = sdd_now_ns();
        if (now >= deadline) {
            return 0;
        }
        if (now < spin_until) {
            continue;
        }
        ep_tick(ep, now);
        sleep_once(ep, now, deadline, &backoff);
    }
}
