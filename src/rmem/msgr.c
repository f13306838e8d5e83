/* The messenger: peers exchange messages of any size over one endpoint. Small messages travel
 * inline in a fabric send from a registered pool; larger blocks go by rendezvous: the sender
 * registers the block and OFFERs its key, the receiver RMA-reads it into fresh memory and
 * answers DONE (or REJECT without reading). The messenger owns the endpoint, its listener, a
 * pool of posted receive buffers, a growing pool of send buffers, the peer table and the blocks
 * being read. Everything runs on the caller's thread, inside sdd_msgr_progress().
 *
 * Lifetimes: every object with operations posted (a send buffer, a block being read) lives until
 * each of those operations has completed, even after its peer is gone, because the transport
 * hands back exactly one completion per operation. Peers that die or are disconnected leave the
 * table at once (sends to them fail with SDD_ENOENT) but their transport handle is closed only
 * when no progress call is running, so completions already read never name a freed peer. */
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "rmem/wire.h"
#include "sddaq/clock.h"
#include "sddaq/log.h"
#include "sddaq/rmem.h"

#define RX_BUFS         64           /* receives posted at once */
#define TX_PER_CHUNK    64           /* send buffers per registration */
#define TX_MAX_CHUNKS   64           /* user sends in flight at most 64 * 64 */
#define INLINE_LIMIT    (64u * 1024) /* largest inline_max accepted */
#define READ_CHUNK      (4u << 20)   /* bytes per RMA read of a block */
#define READS_PER_BLOCK 8            /* reads in flight per block */
#define WAIT_SLICE_MS   5            /* how often a waiting progress call looks for peers */
#define BURST           32
#define HELLO_CAP       64

enum peer_state { PEER_FREE = 0, PEER_LIVE, PEER_ZOMBIE };

struct mpeer {
    sdd_peer *fp;
    uint32_t id;
    uint32_t inline_cap; /* largest inline payload both sides accept */
    uint32_t live_idx;   /* index in sdd_msgr.live */
    uint8_t state;
    bool given_up; /* killed for a fault, not disconnected by the user: abort, not close */
};

enum rx_state { RX_IDLE = 0, RX_POSTED, RX_HANDLING };

struct rxbuf {
    uint8_t *buf;
    uint8_t state;
};

enum tx_kind { TX_INLINE = 1, TX_OFFER, TX_CTL };

/* A send buffer and, for user sends, the send itself. Free when neither busy nor pending. */
struct tx {
    struct tx *next;          /* free list or backlog */
    struct tx *pprev, *pnext; /* pending list */
    uint8_t *buf;
    sdd_mr *mr;      /* the chunk's registration */
    sdd_mr *data_mr; /* TX_OFFER: the user's block */
    uint64_t msg_id;
    uint64_t data_len;
    uint32_t peer;
    uint32_t len; /* encoded bytes in buf */
    uint8_t kind;
    bool busy;    /* posted, or waiting in the backlog */
    bool pending; /* a user send whose on_done has not run */
};

struct txchunk {
    struct txchunk *next;
    uint8_t *mem;
    sdd_mr *mr;
    struct tx tx[TX_PER_CHUNK];
};

/* A block being read from a peer. */
struct rxblk {
    struct rxblk *prev, *next;
    uint8_t *data;
    sdd_mr *mr;
    struct sdd_rkey rkey;
    uint64_t msg_id;
    uint64_t len, next_off;
    uint32_t peer, app_type;
    uint32_t reads_out;
    sdd_err status;
    bool dropped; /* its peer is gone: free once reads_out is 0 */
};

/* A send_blocking call waiting for its on_done; nested calls stack up. */
struct waiter {
    struct waiter *next;
    uint64_t msg_id;
    sdd_err status;
    bool done;
};

struct sdd_msgr {
    struct sdd_msgr_opts opts;
    sdd_ep *ep;
    sdd_listener *lst;
    size_t inline_max;
    size_t buf_cap;
    size_t read_chunk;
    uint8_t hello[HELLO_CAP], busy[HELLO_CAP];
    size_t hello_len, busy_len;

    struct mpeer *peers; /* max_peers slots; peer id lives at slot id % max_peers */
    uint32_t *live;      /* slots of live peers, dense */
    uint32_t nlive, nzombies;
    uint32_t next_id;

    uint8_t *rx_mem;
    sdd_mr *rx_mr;
    struct rxbuf rx[RX_BUFS];
    uint32_t rx_idle;

    struct txchunk *chunks;
    uint32_t nchunks;
    struct tx *tx_free;
    struct tx *backlog, *backlog_tail;
    struct tx *pend_head, *pend_tail;

    struct rxblk *blocks;  /* being read */
    struct rxblk *orphans; /* dropped (peer gone), waiting for their last read */
    bool blocks_waiting;   /* some block has reads left to post after SDD_EAGAIN */

    struct waiter *waiters;
    uint64_t next_msg_id;
    int depth; /* progress calls running (callbacks may nest them) */
    bool closing;
    struct sdd_msgr_stats stats;
};

static void peer_kill(sdd_msgr *m, uint32_t id, sdd_err status);

static bool peer_fatal(sdd_err e)
{
    return e == SDD_EPEERDEAD || e == SDD_ECONNRESET || e == SDD_ETIMEDOUT;
}

/* ---- peers -------------------------------------------------------------------------------- */

static struct mpeer *peer_get(sdd_msgr *m, uint32_t id)
{
    if (id == 0) {
        return NULL;
    }
    struct mpeer *p = &m->peers[id % m->opts.max_peers];
    return p->state == PEER_LIVE && p->id == id ? p : NULL;
}

static struct mpeer *peer_by_fp(sdd_msgr *m, const sdd_peer *fp)
{
    if (fp == NULL) {
        return NULL;
    }
    for (uint32_t i = 0; i < m->nlive; i++) {
        struct mpeer *p = &m->peers[m->live[i]];
        if (p->fp == fp) {
            return p;
        }
    }
    return NULL;
}

static bool peer_room(const sdd_msgr *m)
{
    return m->nlive + m->nzombies < m->opts.max_peers;
}

/* The other side's info blob: SDD_OK and its inline limit for a messenger HELLO, the reason
 * for a refusal (REJECT), SDD_EPROTO for anything else. */
static sdd_err check_blob(const sdd_peer *fp, uint32_t *inline_cap)
{
    size_t len = 0;
    const void *blob = sdd_peer_info(fp, &len);
    struct rm_msg msg;
    if (rm_decode(blob, len, &msg) != SDD_OK) {
        return SDD_EPROTO;
    }
    if (msg.type == RM_REJECT) {
        return msg.done.status < 0 ? msg.done.status : SDD_EPROTO;
    }
    if (msg.type != RM_HELLO || msg.hello.role != RM_ROLE_MESSENGER) {
        return SDD_EPROTO;
    }
    *inline_cap = msg.hello.flags;
    return SDD_OK;
}

static uint32_t peer_add(sdd_msgr *m, sdd_peer *fp, uint32_t their_inline)
{
    uint32_t cap = m->opts.max_peers;
    for (;;) { /* terminates: the caller checked peer_room() */
        uint32_t id = m->next_id++;
        struct mpeer *p = &m->peers[id % cap];
        if (id == 0 || p->state != PEER_FREE) {
            continue;
        }
        p->fp = fp;
        p->id = id;
        p->inline_cap = their_inline < m->inline_max ? their_inline : (uint32_t)m->inline_max;
        p->state = PEER_LIVE;
        p->live_idx = m->nlive;
        m->live[m->nlive++] = (uint32_t)(p - m->peers);
        m->stats.peers_total++;
        SDD_DEBUG("msgr", "peer %u is %s", id, sdd_peer_name(fp));
        return id;
    }
}

/* Close the transport handles of dead and disconnected peers; only outside progress calls. */
static void reap(sdd_msgr *m)
{
    for (uint32_t i = 0; i < m->opts.max_peers && m->nzombies > 0; i++) {
        struct mpeer *p = &m->peers[i];
        if (p->state == PEER_ZOMBIE) {
            p->given_up ? sdd_peer_abort(p->fp) : sdd_peer_close(p->fp);
            memset(p, 0, sizeof(*p));
            m->nzombies--;
        }
    }
}

/* ---- send buffers ------------------------------------------------------------------------- */

static sdd_err tx_grow(sdd_msgr *m)
{
    struct txchunk *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        return SDD_ENOMEM;
    }
    size_t bytes = TX_PER_CHUNK * m->buf_cap;
    c->mem = aligned_alloc(4096, (bytes + 4095) & ~(size_t)4095);
    if (c->mem == NULL) {
        free(c);
        return SDD_ENOMEM;
    }
    sdd_err err = sdd_mr_reg(m->ep, c->mem, bytes, SDD_ACCESS_LOCAL, &c->mr);
    if (err != SDD_OK) {
        SDD_WARN("msgr", "registering send buffers: %s", sdd_strerror(err));
        free(c->mem);
        free(c);
        return err;
    }
    for (int i = TX_PER_CHUNK - 1; i >= 0; i--) {
        struct tx *t = &c->tx[i];
        t->buf = c->mem + (size_t)i * m->buf_cap;
        t->mr = c->mr;
        t->next = m->tx_free;
        m->tx_free = t;
    }
    c->next = m->chunks;
    m->chunks = c;
    m->nchunks++;
    return SDD_OK;
}

/* A free send buffer. User sends stop at TX_MAX_CHUNKS; control messages (answers to the
 * peer's offers, which its own pool bounds) may grow the pool beyond. */
static struct tx *tx_get(sdd_msgr *m, bool ctl, sdd_err *why)
{
    if (m->tx_free == NULL) {
        sdd_err err = (ctl || m->nchunks < TX_MAX_CHUNKS) ? tx_grow(m) : SDD_EAGAIN;
        if (err != SDD_OK) {
            *why = err;
            return NULL;
        }
    }
    struct tx *t = m->tx_free;
    m->tx_free = t->next;
    t->next = t->pprev = t->pnext = NULL;
    t->data_mr = NULL;
    t->busy = t->pending = false;
    return t;
}

static void tx_put(sdd_msgr *m, struct tx *t)
{
    t->next = m->tx_free;
    m->tx_free = t;
}

static void pend_append(sdd_msgr *m, struct tx *t)
{
    t->pending = true;
    t->pnext = NULL;
    t->pprev = m->pend_tail;
    if (m->pend_tail != NULL) {
        m->pend_tail->pnext = t;
    } else {
        m->pend_head = t;
    }
    m->pend_tail = t;
}

static void pend_remove(sdd_msgr *m, struct tx *t)
{
    if (t->pprev != NULL) {
        t->pprev->pnext = t->pnext;
    } else {
        m->pend_head = t->pnext;
    }
    if (t->pnext != NULL) {
        t->pnext->pprev = t->pprev;
    } else {
        m->pend_tail = t->pprev;
    }
    t->pprev = t->pnext = NULL;
    t->pending = false;
}

/* Finish a user send: release its block, wake a send_blocking waiting for it, run on_done. */
static void report(sdd_msgr *m, struct tx *t, sdd_err status)
{
    if (!t->pending) {
        return;
    }
    pend_remove(m, t);
    if (t->data_mr != NULL) {
        sdd_mr_close(t->data_mr);
        t->data_mr = NULL;
    }
    uint32_t peer = t->peer;
    uint64_t msg_id = t->msg_id;
    if (status == SDD_OK) {
        if (t->kind == TX_INLINE) {
            m->stats.sent_inline++;
        } else {
            m->stats.sent_blocks++;
        }
        m->stats.bytes_sent += t->data_len;
    } else {
        m->stats.send_failures++;
    }
    if (!t->busy) {
        tx_put(m, t);
    }
    for (struct waiter *w = m->waiters; w != NULL; w = w->next) {
        if (w->msg_id == msg_id) {
            w->done = true;
            w->status = status;
        }
    }
    if (m->opts.on_done != NULL) {
        m->opts.on_done(m, peer, msg_id, status, m->opts.user);
    }
}

static sdd_err post_tx(sdd_msgr *m, struct tx *t)
{
    struct mpeer *p = peer_get(m, t->peer);
    if (p == NULL) {
        return SDD_ENOENT;
    }
    return sdd_ep_post_send(m->ep, p->fp, t->buf, t->len, t->mr, t);
}

/* Post t, or queue it behind earlier sends the transport had no room for (keeping their
 * order). Returns an error only when nothing was posted or queued. */
static sdd_err tx_submit(sdd_msgr *m, struct tx *t)
{
    sdd_err err = m->backlog == NULL ? post_tx(m, t) : SDD_EAGAIN;
    if (err == SDD_EAGAIN) {
        t->next = NULL;
        if (m->backlog_tail != NULL) {
            m->backlog_tail->next = t;
        } else {
            m->backlog = t;
        }
        m->backlog_tail = t;
        err = SDD_OK;
    }
    t->busy = err == SDD_OK;
    return err;
}

/* A send of t failed or could not be posted; t is no longer busy. */
static void tx_failed(sdd_msgr *m, struct tx *t, sdd_err status)
{
    t->busy = false;
    if (t->pending) {
        report(m, t, status); /* recycles t */
    } else {
        tx_put(m, t);
    }
}

static void flush_backlog(sdd_msgr *m)
{
    while (m->backlog != NULL) {
        struct tx *t = m->backlog;
        /* A user send finished while it waited here (timed out, cancelled) must not leave:
         * an OFFER would name a block that is no longer registered. */
        bool cancelled = t->kind != TX_CTL && !t->pending;
        sdd_err err = cancelled ? SDD_ECANCELED : post_tx(m, t);
        if (err == SDD_EAGAIN) {
            return;
        }
        m->backlog = t->next;
        if (m->backlog == NULL) {
            m->backlog_tail = NULL;
        }
        if (err != SDD_OK) {
            tx_failed(m, t, err); /* may run on_done, which may queue more */
        }
    }
}

/* Send a control message (DONE, REJECT) to a peer; a failure only loses it. */
static void send_ctl(sdd_msgr *m, uint32_t peer, uint8_t type, uint64_t msg_id, sdd_err status)
{
    if (peer_get(m, peer) == NULL) {
        return;
    }
    sdd_err err = SDD_OK;
    struct tx *t = tx_get(m, true, &err);
    if (t == NULL) {
        SDD_ERROR("msgr", "no buffer for %s of message %llu to peer %u: %s", rm_type_name(type),
                  (unsigned long long)msg_id, peer, sdd_strerror(err));
        return;
    }
    struct rm_msg msg = {.type = type};
    msg.done.msg_id = msg_id;
    msg.done.status = status;
    t->kind = TX_CTL;
    t->peer = peer;
    t->len = (uint32_t)rm_encode(&msg, t->buf, m->buf_cap);
    err = tx_submit(m, t);
    if (err != SDD_OK) {
        SDD_DEBUG("msgr", "%s to peer %u: %s", rm_type_name(type), peer, sdd_strerror(err));
        tx_put(m, t);
    }
}

/* ---- blocks being read -------------------------------------------------------------------- */

static void blk_link(struct rxblk **list, struct rxblk *b)
{
    b->prev = NULL;
    b->next = *list;
    if (*list != NULL) {
        (*list)->prev = b;
    }
    *list = b;
}

static void blk_unlink(struct rxblk **list, struct rxblk *b)
{
    if (b->prev != NULL) {
        b->prev->next = b->next;
    } else {
        *list = b->next;
    }
    if (b->next != NULL) {
        b->next->prev = b->prev;
    }
    b->prev = b->next = NULL;
}

static void blk_free(struct rxblk *b)
{
    sdd_mr_close(b->mr);
    free(b->data);
    free(b);
}

/* All reads of b are over: deliver it or report the failure, answer the sender, free it. */
static void blk_finish(sdd_msgr *m, struct rxblk *b)
{
    blk_unlink(&m->blocks, b);
    if (!b->dropped) {
        if (b->status == SDD_OK) {
            m->stats.recv_blocks++;
            m->stats.bytes_received += b->len;
            if (m->opts.on_recv != NULL) {
                struct sdd_msgr_msg msg = {.peer = b->peer,
                                           .type = b->app_type,
                                           .msg_id = b->msg_id,
                                           .data = b->data,
                                           .len = (size_t)b->len};
                m->opts.on_recv(m, &msg, m->opts.user);
            }
        } else {
            SDD_DEBUG("msgr", "reading block %llu from peer %u failed: %s",
                      (unsigned long long)b->msg_id, b->peer, sdd_strerror(b->status));
        }
        send_ctl(m, b->peer, RM_DONE, b->msg_id, b->status); /* no-op if the peer left */
    }
    blk_free(b);
}

static bool blk_wants_reads(const struct rxblk *b)
{
    return !b->dropped && b->status == SDD_OK && b->next_off < b->len &&
           b->reads_out < READS_PER_BLOCK;
}

/* Post the next reads of b. Returns true if b was finished (freed): only after a failed post,
 * which runs no callbacks. */
static bool blk_post_reads(sdd_msgr *m, struct rxblk *b)
{
    struct mpeer *p = peer_get(m, b->peer);
    while (p != NULL && blk_wants_reads(b)) {
        uint64_t n = b->len - b->next_off;
        if (n > m->read_chunk) {
            n = m->read_chunk;
        }
        sdd_err err = sdd_ep_post_read(m->ep, p->fp, b->data + b->next_off, (size_t)n, b->mr,
                                       &b->rkey, b->next_off, b);
        if (err == SDD_EAGAIN) {
            m->blocks_waiting = true;
            break;
        }
        if (err != SDD_OK) {
            b->status = err;
            break;
        }
        b->reads_out++;
        b->next_off += n;
        m->stats.reads++;
    }
    if (b->reads_out == 0 && b->status != SDD_OK) {
        blk_finish(m, b);
        return true;
    }
    return false;
}

static void on_offer(sdd_msgr *m, struct mpeer *p, const struct rm_msg *msg)
{
    uint64_t len = msg->offer.region.len;
    sdd_err why = SDD_OK;
    if (len == 0) {
        m->stats.bad_messages++;
        why = SDD_EPROTO;
    } else if (len > m->opts.max_block || len > SIZE_MAX / 2) {
        why = SDD_ETOOBIG;
    }
    struct rxblk *b = NULL;
    if (why == SDD_OK) {
        b = calloc(1, sizeof(*b));
        if (b != NULL) {
            b->data = malloc((size_t)len);
        }
        why = b != NULL && b->data != NULL ? SDD_OK : SDD_ENOMEM;
    }
    if (why == SDD_OK) {
        why = sdd_mr_reg(m->ep, b->data, (size_t)len, SDD_ACCESS_LOCAL, &b->mr);
    }
    if (why != SDD_OK) {
        if (b != NULL) {
            free(b->data);
            free(b);
        }
        m->stats.rejected++;
        SDD_DEBUG("msgr", "refusing block %llu (%llu bytes) from peer %u: %s",
                  (unsigned long long)msg->offer.msg_id, (unsigned long long)len, p->id,
                  sdd_strerror(why));
        send_ctl(m, p->id, RM_REJECT, msg->offer.msg_id, why);
        return;
    }
    b->rkey =
        (struct sdd_rkey){.addr = msg->offer.region.addr, .key = msg->offer.region.key, .len = len};
    b->msg_id = msg->offer.msg_id;
    b->len = len;
    b->peer = p->id;
    b->app_type = msg->offer.app_type;
    blk_link(&m->blocks, b);
    blk_post_reads(m, b);
}

static void on_read_done(sdd_msgr *m, struct rxblk *b, sdd_err status)
{
    b->reads_out--;
    if (status != SDD_OK && b->status == SDD_OK) {
        b->status = status;
    }
    if (b->dropped) {
        if (b->reads_out == 0) {
            blk_unlink(&m->orphans, b);
            blk_free(b);
        }
        return;
    }
    if (status != SDD_OK && peer_fatal(status)) {
        /* The peer is gone; forgetting it drops b (now, or when its last read returns). */
        peer_kill(m, b->peer, status);
        return;
    }
    if (blk_post_reads(m, b)) {
        return;
    }
    if (b->reads_out == 0 && b->next_off == b->len) {
        blk_finish(m, b);
    }
}

/* Post reads that waited for room in the transport's queues. */
static void service_blocks(sdd_msgr *m)
{
    m->blocks_waiting = false;
restart:
    for (struct rxblk *b = m->blocks; b != NULL; b = b->next) {
        if (blk_wants_reads(b) && blk_post_reads(m, b)) {
            goto restart;
        }
    }
}

/* ---- peer loss ---------------------------------------------------------------------------- */

/* Forget a peer: fail its sends, drop the blocks being read from it, tell the user. Its
 * transport handle is closed by reap(). */
static void peer_kill(sdd_msgr *m, uint32_t id, sdd_err status)
{
    struct mpeer *p = peer_get(m, id);
    if (p == NULL) {
        return;
    }
    SDD_DEBUG("msgr", "peer %u (%s) gone: %s", id, sdd_peer_name(p->fp), sdd_strerror(status));
    uint32_t last = m->live[--m->nlive];
    m->live[p->live_idx] = last;
    m->peers[last].live_idx = p->live_idx;
    p->state = PEER_ZOMBIE;
    p->given_up = status != SDD_ECANCELED;
    m->nzombies++;
    m->stats.peers_lost++;
    for (struct rxblk *b = m->blocks, *next; b != NULL; b = next) {
        next = b->next;
        if (b->peer == id) {
            b->dropped = true;
            blk_unlink(&m->blocks, b);
            if (b->reads_out == 0) {
                blk_free(b);
            } else {
                blk_link(&m->orphans, b);
            }
        }
    }
    /* Callbacks may change the pending list: look again from the start after each. */
    for (struct tx *t = m->pend_head; t != NULL;) {
        if (t->peer == id) {
            report(m, t, status);
            t = m->pend_head;
        } else {
            t = t->pnext;
        }
    }
    if (m->opts.on_peer != NULL) {
        m->opts.on_peer(m, id, status, m->opts.user);
    }
    if (m->depth == 0) {
        reap(m);
    }
}

/* ---- receives ----------------------------------------------------------------------------- */

static void rx_post(sdd_msgr *m, struct rxbuf *r)
{
    sdd_err err = sdd_ep_post_recv(m->ep, r->buf, m->buf_cap, m->rx_mr, r);
    if (err == SDD_OK) {
        r->state = RX_POSTED;
        return;
    }
    if (err != SDD_EAGAIN) {
        SDD_WARN("msgr", "posting a receive: %s", sdd_strerror(err));
    }
    r->state = RX_IDLE;
    m->rx_idle++;
}

static void rx_repost_idle(sdd_msgr *m)
{
    uint32_t idle = m->rx_idle;
    m->rx_idle = 0;
    for (uint32_t i = 0; i < RX_BUFS && idle > 0; i++) {
        if (m->rx[i].state == RX_IDLE) {
            idle--;
            rx_post(m, &m->rx[i]);
        }
    }
}

static void on_done_msg(sdd_msgr *m, struct mpeer *p, const struct rm_msg *msg)
{
    struct tx *t = m->pend_head;
    while (t != NULL && !(t->msg_id == msg->done.msg_id && t->kind == TX_OFFER)) {
        t = t->pnext;
    }
    if (t == NULL || t->peer != p->id) {
        m->stats.bad_messages++;
        SDD_DEBUG("msgr", "%s for unknown message %llu from peer %u", rm_type_name(msg->type),
                  (unsigned long long)msg->done.msg_id, p->id);
        return;
    }
    sdd_err status = msg->done.status;
    if (status > 0 || (msg->type == RM_REJECT && status == SDD_OK)) {
        m->stats.bad_messages++;
        status = SDD_EPROTO;
    }
    report(m, t, status);
}

static void on_message(sdd_msgr *m, struct mpeer *p, const uint8_t *buf, size_t len)
{
    struct rm_msg msg;
    if (rm_decode(buf, len, &msg) != SDD_OK) {
        m->stats.bad_messages++;
        SDD_DEBUG("msgr", "malformed message (%zu bytes) from peer %u", len, p->id);
        return;
    }
    switch (msg.type) {
    case RM_INLINE:
        m->stats.recv_inline++;
        m->stats.bytes_received += msg.inl.len;
        if (m->opts.on_recv != NULL) {
            struct sdd_msgr_msg out = {.peer = p->id,
                                       .type = msg.inl.app_type,
                                       .msg_id = msg.inl.msg_id,
                                       .data = msg.inl.data,
                                       .len = msg.inl.len};
            m->opts.on_recv(m, &out, m->opts.user);
        }
        break;
    case RM_OFFER:
        on_offer(m, p, &msg);
        break;
    case RM_DONE:
    case RM_REJECT:
        on_done_msg(m, p, &msg);
        break;
    default:
        m->stats.bad_messages++;
        SDD_DEBUG("msgr", "unexpected %s from peer %u", rm_type_name(msg.type), p->id);
        break;
    }
}

static void on_recv_cqe(sdd_msgr *m, const struct sdd_cqe *c)
{
    struct rxbuf *r = c->ctx;
    r->state = RX_HANDLING;
    struct mpeer *p = peer_by_fp(m, c->peer);
    if (c->status != SDD_OK) {
        if (c->status != SDD_ECANCELED) {
            SDD_DEBUG("msgr", "receive failed: %s", sdd_strerror(c->status));
        }
        if (p != NULL && c->status == SDD_ETOOBIG) {
            /* Larger than it was told we accept; tcp cannot use the connection after this. */
            m->stats.bad_messages++;
            peer_kill(m, p->id, SDD_EPROTO);
        }
    } else if (p != NULL) {
        on_message(m, p, r->buf, c->len);
    } else {
        SDD_DEBUG("msgr", "dropping a message from a peer that left");
    }
    rx_post(m, r);
}

/* ---- completions -------------------------------------------------------------------------- */

static void on_send_cqe(sdd_msgr *m, struct tx *t, sdd_err status)
{
    uint32_t peer = t->peer;
    if (status != SDD_OK) {
        tx_failed(m, t, status);
        if (peer_fatal(status)) {
            peer_kill(m, peer, status);
        }
        return;
    }
    t->busy = false;
    if (t->pending && t->kind == TX_INLINE) {
        report(m, t, SDD_OK);
    } else if (!t->pending) {
        tx_put(m, t); /* OFFERs stay until DONE or REJECT */
    }
}

static void handle(sdd_msgr *m, const struct sdd_cqe *c)
{
    switch (c->kind) {
    case SDD_CQE_RECV:
        on_recv_cqe(m, c);
        break;
    case SDD_CQE_SEND:
        on_send_cqe(m, c->ctx, c->status);
        break;
    case SDD_CQE_READ:
        on_read_done(m, c->ctx, c->status);
        break;
    case SDD_CQE_REMOTE_WRITE:
        /* Nobody writes to a messenger; on FI_RX_CQ_DATA providers a stray write with
         * immediate data takes one of our receives, which must go back. */
        if (c->ctx != NULL) {
            m->stats.bad_messages++;
            rx_post(m, c->ctx);
        }
        break;
    case SDD_CQE_PEER_DOWN: {
        struct mpeer *p = peer_by_fp(m, c->peer);
        if (p != NULL) {
            peer_kill(m, p->id, c->status);
        }
        break;
    }
    default:
        break;
    }
}

/* ---- accepting ---------------------------------------------------------------------------- */

/* Accept one waiting peer, if any. Returns 1 if a connection was handled, 0 if none waited. */
static int accept_one(sdd_msgr *m)
{
    struct pollfd pfd = {.fd = sdd_listener_fd(m->lst), .events = POLLIN};
    if (poll(&pfd, 1, 0) <= 0) {
        return 0;
    }
    bool room = peer_room(m);
    sdd_peer *fp = NULL;
    sdd_err err =
        sdd_listener_accept(m->lst, room ? m->hello : m->busy, room ? m->hello_len : m->busy_len,
                            (int)m->opts.rmem.timeout_ms, &fp);
    if (err != SDD_OK) {
        m->stats.peers_refused++;
        SDD_INFO("msgr", "bootstrap of a new peer failed: %s", sdd_strerror(err));
        return 1;
    }
    uint32_t their_inline = 0;
    err = room ? check_blob(fp, &their_inline) : SDD_EBUSY;
    if (err != SDD_OK) {
        m->stats.peers_refused++;
        SDD_INFO("msgr", "refusing %s: %s", sdd_peer_name(fp),
                 err == SDD_EBUSY ? "too many peers" : "not a messenger");
        sdd_peer_close(fp);
        return 1;
    }
    uint32_t id = peer_add(m, fp, their_inline);
    if (m->opts.on_peer != NULL) {
        m->opts.on_peer(m, id, SDD_OK, m->opts.user);
    }
    return 1;
}

/* ---- progress ----------------------------------------------------------------------------- */

static void service(sdd_msgr *m)
{
    if (m->backlog != NULL) {
        flush_backlog(m);
    }
    if (m->blocks_waiting) {
        service_blocks(m);
    }
    if (m->rx_idle > 0) {
        rx_repost_idle(m);
    }
}

/* One round: accept, post what waited, handle one burst of completions (waiting up to wait_ms
 * for it when nothing else happened). Returns how many things happened, or a fatal error. */
static int progress_once(sdd_msgr *m, int wait_ms)
{
    m->depth++;
    int events = accept_one(m);
    service(m);
    if (m->backlog != NULL || m->blocks_waiting || m->rx_idle > 0) {
        wait_ms = wait_ms > 1 ? 1 : wait_ms; /* retry the posts that found the queues full */
    }
    struct sdd_cqe cqes[BURST];
    int n = events == 0 && wait_ms > 0 ? sdd_ep_wait(m->ep, cqes, BURST, wait_ms)
                                       : sdd_ep_poll(m->ep, cqes, BURST);
    for (int i = 0; i < n; i++) {
        handle(m, &cqes[i]);
    }
    if (n > 0) {
        service(m);
    }
    m->depth--;
    if (m->depth == 0 && m->nzombies > 0) {
        reap(m);
    }
    if (n < 0) {
        SDD_ERROR("msgr", "endpoint failed: %s", sdd_strerror(n));
        return n;
    }
    return events + n;
}

sdd_err sdd_msgr_progress(sdd_msgr *m, int timeout_ms)
{
    if (m == NULL || m->closing) {
        return SDD_EINVAL;
    }
    uint64_t deadline = sdd_now_ns() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0) * SDD_NS_PER_MS;
    for (;;) {
        int slice = 0;
        if (timeout_ms < 0) {
            slice = WAIT_SLICE_MS;
        } else if (timeout_ms > 0) {
            uint64_t now = sdd_now_ns();
            uint64_t left_ms =
                now < deadline ? (deadline - now + SDD_NS_PER_MS - 1) / SDD_NS_PER_MS : 0;
            slice = left_ms < WAIT_SLICE_MS ? (int)left_ms : WAIT_SLICE_MS;
        }
        int rc = progress_once(m, slice);
        if (rc != 0) {
            return rc < 0 ? rc : SDD_OK;
        }
        if (timeout_ms == 0 || (timeout_ms > 0 && sdd_now_ns() >= deadline)) {
            return SDD_OK;
        }
    }
}

/* ---- public API --------------------------------------------------------------------------- */

void sdd_msgr_opts_default(struct sdd_msgr_opts *opts)
{
    memset(opts, 0, sizeof(*opts));
    sdd_rmem_opts_default(&opts->rmem);
    opts->inline_max = 4000;
    opts->max_block = 1ull << 30;
    opts->max_peers = 256;
}

static sdd_err open_rx(sdd_msgr *m)
{
    size_t bytes = RX_BUFS * m->buf_cap;
    m->rx_mem = aligned_alloc(4096, (bytes + 4095) & ~(size_t)4095);
    if (m->rx_mem == NULL) {
        return SDD_ENOMEM;
    }
    sdd_err err = sdd_mr_reg(m->ep, m->rx_mem, bytes, SDD_ACCESS_LOCAL, &m->rx_mr);
    if (err != SDD_OK) {
        return err;
    }
    for (uint32_t i = 0; i < RX_BUFS; i++) {
        m->rx[i].buf = m->rx_mem + (size_t)i * m->buf_cap;
        rx_post(m, &m->rx[i]);
    }
    return SDD_OK;
}

sdd_err sdd_msgr_open(const struct sdd_msgr_opts *opts, sdd_msgr **out)
{
    struct sdd_msgr_opts defaults;
    if (opts == NULL) {
        sdd_msgr_opts_default(&defaults);
        opts = &defaults;
    }
    if (out == NULL || opts->max_peers == 0 || opts->inline_max > INLINE_LIMIT) {
        return SDD_EINVAL;
    }
    sdd_msgr *m = calloc(1, sizeof(*m));
    if (m == NULL) {
        return SDD_ENOMEM;
    }
    m->opts = *opts;
    m->next_id = 1;
    m->next_msg_id = 1;
    sdd_err err = SDD_ENOMEM;
    m->peers = calloc(opts->max_peers, sizeof(*m->peers));
    m->live = calloc(opts->max_peers, sizeof(*m->live));
    if (m->peers == NULL || m->live == NULL) {
        goto out_free;
    }
    struct sdd_ep_opts eo;
    sdd_ep_opts_default(&eo);
    eo.provider = opts->rmem.provider;
    eo.wait_mode = opts->rmem.wait_mode;
    eo.spin_us = opts->rmem.spin_us;
    err = sdd_ep_open(&eo, &m->ep);
    if (err != SDD_OK) {
        goto out_free;
    }
    const struct sdd_ep_info *info = sdd_ep_info(m->ep);
    if (!info->source_addr) {
        SDD_ERROR("msgr", "provider %s does not name the source of messages", info->provider);
        err = SDD_ENOTSUP;
        goto out_close_ep;
    }
    size_t head = RM_HEADER_LEN + RM_INLINE_HEAD;
    m->inline_max = opts->inline_max;
    if (info->max_msg_size < head + m->inline_max) {
        m->inline_max = info->max_msg_size > head ? info->max_msg_size - head : 0;
    }
    m->buf_cap = (head + m->inline_max + 63) & ~(size_t)63;
    m->read_chunk = info->max_msg_size < READ_CHUNK ? info->max_msg_size : READ_CHUNK;
    struct rm_msg hello = {.type = RM_HELLO};
    hello.hello.role = RM_ROLE_MESSENGER;
    hello.hello.flags = (uint32_t)m->inline_max; /* what we accept inline */
    m->hello_len = rm_encode(&hello, m->hello, sizeof(m->hello));
    struct rm_msg busy = {.type = RM_REJECT};
    busy.done.status = SDD_EBUSY;
    m->busy_len = rm_encode(&busy, m->busy, sizeof(m->busy));
    err = open_rx(m);
    if (err != SDD_OK) {
        goto out_close_ep;
    }
    err = sdd_ep_listen(m->ep, opts->rmem.host, opts->rmem.port, &m->lst);
    if (err != SDD_OK) {
        SDD_ERROR("msgr", "cannot listen on %s:%u: %s", opts->rmem.host ? opts->rmem.host : "*",
                  opts->rmem.port, sdd_strerror(err));
        goto out_close_ep;
    }
    *out = m;
    return SDD_OK;

out_close_ep:
    sdd_ep_close(m->ep); /* also deregisters the receive pool */
out_free:
    free(m->rx_mem);
    free(m->peers);
    free(m->live);
    free(m);
    return err;
}

uint16_t sdd_msgr_port(const sdd_msgr *m)
{
    return sdd_listener_port(m->lst);
}

sdd_err sdd_msgr_connect(sdd_msgr *m, const char *host, uint16_t port, uint32_t *peer)
{
    if (m == NULL || host == NULL || peer == NULL || m->closing) {
        return SDD_EINVAL;
    }
    if (!peer_room(m)) {
        return SDD_EBUSY;
    }
    sdd_peer *fp = NULL;
    sdd_err err = sdd_ep_connect(m->ep, host, port, m->hello, m->hello_len,
                                 (int)m->opts.rmem.timeout_ms, &fp);
    if (err != SDD_OK) {
        return err;
    }
    uint32_t their_inline = 0;
    err = check_blob(fp, &their_inline);
    if (err != SDD_OK) {
        SDD_INFO("msgr", "%s:%u refused us or is not a messenger: %s", host, port,
                 sdd_strerror(err));
        sdd_peer_close(fp);
        return err;
    }
    *peer = peer_add(m, fp, their_inline);
    return SDD_OK;
}

sdd_err sdd_msgr_send(sdd_msgr *m, uint32_t peer, uint32_t type, const void *data, size_t len,
                      uint64_t *msg_id)
{
    if (m == NULL || (data == NULL && len > 0)) {
        return SDD_EINVAL;
    }
    if (m->closing) {
        return SDD_ECLOSED;
    }
    struct mpeer *p = peer_get(m, peer);
    if (p == NULL) {
        return SDD_ENOENT;
    }
    sdd_err err = SDD_OK;
    struct tx *t = tx_get(m, false, &err);
    if (t == NULL) {
        return err;
    }
    t->peer = peer;
    t->msg_id = m->next_msg_id;
    t->data_len = len;
    struct rm_msg msg;
    if (len <= p->inline_cap) {
        msg = (struct rm_msg){.type = RM_INLINE};
        msg.inl.msg_id = t->msg_id;
        msg.inl.app_type = type;
        msg.inl.len = (uint32_t)len;
        msg.inl.data = data;
        t->kind = TX_INLINE;
    } else {
        /* The peer reads the block in place: registering it is the only copy-free way. */
        err = sdd_mr_reg(m->ep, (void *)data, len, SDD_ACCESS_LOCAL | SDD_ACCESS_REMOTE_READ,
                         &t->data_mr);
        if (err != SDD_OK) {
            SDD_WARN("msgr", "registering a %zu-byte block: %s", len, sdd_strerror(err));
            tx_put(m, t);
            return err;
        }
        struct sdd_rkey rk;
        sdd_mr_rkey(t->data_mr, &rk);
        msg = (struct rm_msg){.type = RM_OFFER};
        msg.offer.msg_id = t->msg_id;
        msg.offer.app_type = type;
        msg.offer.region = (struct rm_region){.addr = rk.addr, .len = len, .key = rk.key};
        t->kind = TX_OFFER;
    }
    t->len = (uint32_t)rm_encode(&msg, t->buf, m->buf_cap);
    pend_append(m, t);
    err = tx_submit(m, t);
    if (err != SDD_OK) {
        pend_remove(m, t);
        sdd_mr_close(t->data_mr);
        t->data_mr = NULL;
        tx_put(m, t);
        return err;
    }
    m->next_msg_id++;
    if (msg_id != NULL) {
        *msg_id = t->msg_id;
    }
    return SDD_OK;
}

sdd_err sdd_msgr_send_blocking(sdd_msgr *m, uint32_t peer, uint32_t type, const void *data,
                               size_t len, int timeout_ms)
{
    struct waiter w = {0};
    sdd_err err = sdd_msgr_send(m, peer, type, data, len, &w.msg_id);
    if (err != SDD_OK) {
        return err;
    }
    w.next = m->waiters;
    m->waiters = &w;
    uint64_t deadline =
        timeout_ms < 0 ? UINT64_MAX : sdd_now_ns() + (uint64_t)timeout_ms * SDD_NS_PER_MS;
    int rc = 0;
    while (!w.done && rc >= 0) { /* one round at least, even with timeout 0 */
        uint64_t now = sdd_now_ns();
        uint64_t left_ms =
            now < deadline ? (deadline - now + SDD_NS_PER_MS - 1) / SDD_NS_PER_MS : 0;
        rc = progress_once(m, left_ms < WAIT_SLICE_MS ? (int)left_ms : WAIT_SLICE_MS);
        if (sdd_now_ns() >= deadline) {
            break;
        }
    }
    m->waiters = w.next; /* nested calls return first: this one is on top */
    if (w.done) {
        return w.status;
    }
    /* Give up on it: the block is deregistered, so the caller may reuse the memory. */
    sdd_err why = rc < 0 ? rc : SDD_ETIMEDOUT;
    for (struct tx *t = m->pend_head; t != NULL; t = t->pnext) {
        if (t->msg_id == w.msg_id) {
            report(m, t, why);
            break;
        }
    }
    return why;
}

void sdd_msgr_disconnect(sdd_msgr *m, uint32_t peer)
{
    if (m != NULL) {
        peer_kill(m, peer, SDD_ECANCELED);
    }
}

void sdd_msgr_stats(const sdd_msgr *m, struct sdd_msgr_stats *out)
{
    *out = m->stats;
    out->peers_now = m->nlive;
}

void sdd_msgr_close(sdd_msgr *m)
{
    if (m == NULL) {
        return;
    }
    m->closing = true;
    while (m->pend_head != NULL) {
        report(m, m->pend_head, SDD_ECANCELED);
    }
    /* Closing the endpoint says BYE to every peer and deregisters every region, including
     * those of blocks still being read; after it no completion can name our memory. */
    sdd_ep_close(m->ep);
    struct rxblk *lists[2] = {m->blocks, m->orphans};
    for (int i = 0; i < 2; i++) {
        for (struct rxblk *b = lists[i], *next; b != NULL; b = next) {
            next = b->next;
            free(b->data);
            free(b);
        }
    }
    for (struct txchunk *c = m->chunks, *next; c != NULL; c = next) {
        next = c->next;
        free(c->mem);
        free(c);
    }
    free(m->rx_mem);
    free(m->peers);
    free(m->live);
    free(m);
}
