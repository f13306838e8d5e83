/* rmem client: mirrors a server's region by RMA read, follows region changes, pings. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rmem/ctl.h"
#include "rmem/shmem.h"
#include "sddaq/clock.h"
#include "sddaq/log.h"
#include "sddaq/rmem.h"

#define CL_RX_SLOTS 8
#define CL_TX_SLOTS 8
#define CL_PUMP_MS  100 /* longest single wait; the endpoint's deadlines bound the total */

struct sdd_rmem_client {
    struct sdd_rmem_opts opts;
    char host[256];
    uint16_t port;
    sdd_ep *ep;
    sdd_peer *peer;
    struct rm_ctl ctl;

    struct rm_region remote; /* the region being mirrored */
    struct sdd_rkey rkey;
    uint8_t *mirror;
    size_t mirror_len;
    sdd_mr *mirror_mr;

    bool realloc_pending; /* the server moved; switch once no read is in flight */
    struct rm_region next;
    bool dropped;          /* the server said it drops us (missed a region change) */
    bool reconnect_failed; /* after a close, nobody listened any more: stay failed */
    sdd_err dead;          /* why the connection is unusable; SDD_OK while it is fine */

    uint32_t reads_out;
    sdd_err read_err;
    uint64_t ping_seq;
    bool pong_got;

    struct sdd_rmem_client_stats stats;
    struct rm_shm local; /* the server's region mapped read-only, when on this host */
};

/* ctx of our RMA reads: the client itself, which no control slot can be */
#define READ_CTX(cl) ((void *)(cl))

static void *alloc_pages(size_t len)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t rounded = (len + page - 1) / page * page;
    void *p = aligned_alloc(page, rounded);
    if (p != NULL) {
        memset(p, 0, rounded);
    }
    return p;
}

/* Replace the mirror by one of len bytes, keeping what fits of the old content. */
static sdd_err set_mirror(sdd_rmem_client *cl, size_t len)
{
    if (cl->mirror != NULL && len == cl->mirror_len) {
        return SDD_OK;
    }
    uint8_t *mem = alloc_pages(len);
    if (mem == NULL) {
        return SDD_ENOMEM;
    }
    sdd_mr *mr = NULL;
    sdd_err err = sdd_mr_reg(cl->ep, mem, len, SDD_ACCESS_LOCAL, &mr);
    if (err != SDD_OK) {
        free(mem);
        return err;
    }
    if (cl->mirror != NULL) {
        memcpy(mem, cl->mirror, len < cl->mirror_len ? len : cl->mirror_len);
        sdd_mr_close(cl->mirror_mr);
        free(cl->mirror);
    }
    cl->mirror = mem;
    cl->mirror_len = len;
    cl->mirror_mr = mr;
    return SDD_OK;
}

/* Map the server's region when it is on this host and the caller asked for it; otherwise (or
 * when the mapping is refused: another container or user) stay with RMA. */
static void map_local(sdd_rmem_client *cl, const struct rm_msg *local)
{
    rm_shm_free(&cl->local);
    if (!cl->opts.map_local || local == NULL || local->local.host == 0 ||
        local->local.host != rm_host_id() || local->local.len != cl->remote.len) {
        return;
    }
    sdd_err err = rm_shm_map_peer(&cl->local, local->local.pid, local->local.fd, local->local.len);
    if (err != SDD_OK) {
        SDD_INFO("rmem", "cannot map the server's region (%s): reading it by RMA",
                 sdd_strerror(err));
    }
}

static sdd_err use_region(sdd_rmem_client *cl, const struct rm_region *r)
{
    sdd_err err = set_mirror(cl, r->len);
    if (err != SDD_OK) {
        return err;
    }
    cl->remote = *r;
    cl->rkey = (struct sdd_rkey){.addr = r->addr, .key = r->key, .len = r->len};
    return SDD_OK;
}

/* A fresh endpoint (with its control slots, and the mirror registered on it if there is one).
 * Reconnects use a fresh one too: some providers (shm) keep stale state for an address that
 * is removed and inserted again. */
static sdd_err open_transport(sdd_rmem_client *cl)
{
    struct sdd_ep_opts eo;
    sdd_ep_opts_default(&eo);
    eo.provider = cl->opts.provider;
    eo.wait_mode = cl->opts.wait_mode;
    eo.spin_us = cl->opts.spin_us;
    sdd_err err = sdd_ep_open(&eo, &cl->ep);
    if (err == SDD_OK) {
        err = rm_ctl_init(&cl->ctl, cl->ep, CL_RX_SLOTS, CL_TX_SLOTS);
    }
    if (err == SDD_OK && cl->mirror != NULL) {
        err = sdd_mr_reg(cl->ep, cl->mirror, cl->mirror_len, SDD_ACCESS_LOCAL, &cl->mirror_mr);
    }
    return err;
}

static void close_transport(sdd_rmem_client *cl)
{
    sdd_ep_close(cl->ep); /* BYE to the server; closes the registrations */
    rm_ctl_fini(&cl->ctl);
    cl->ep = NULL;
    cl->peer = NULL;
    cl->mirror_mr = NULL;
}

static sdd_err connect_peer(sdd_rmem_client *cl)
{
    uint8_t hello[64];
    struct rm_msg m = {.type = RM_HELLO, .hello = {.role = RM_ROLE_CLIENT}};
    size_t hello_len = rm_encode(&m, hello, sizeof(hello));
    sdd_peer *peer = NULL;
    sdd_err err = sdd_ep_connect(cl->ep, cl->host, cl->port, hello, hello_len,
                                 (int)cl->opts.timeout_ms, &peer);
    if (err != SDD_OK) {
        return err;
    }
    size_t len = 0;
    const uint8_t *info = sdd_peer_info(peer, &len);
    size_t first = rm_first_len(info, len);
    struct rm_msg local = {0};
    if (first == 0 || rm_decode(info, first, &m) != SDD_OK ||
        (m.type != RM_REGION && m.type != RM_DROP) ||
        (first < len &&
         (rm_decode(info + first, len - first, &local) != SDD_OK || local.type != RM_LOCAL))) {
        SDD_WARN("rmem", "%s:%u is not an rmem server", cl->host, cl->port);
        err = SDD_EPROTO;
    } else if (m.type == RM_DROP) {
        err = m.done.status < 0 ? m.done.status : SDD_EBUSY;
    } else if (m.region.len == 0) {
        err = SDD_EPROTO;
    } else {
        err = use_region(cl, &m.region);
    }
    if (err == SDD_OK) {
        map_local(cl, local.type == RM_LOCAL ? &local : NULL);
    }
    if (err != SDD_OK) {
        sdd_peer_close(peer);
        return err;
    }
    cl->peer = peer;
    cl->dead = SDD_OK;
    cl->dropped = false;
    cl->realloc_pending = false;
    return SDD_OK;
}

/* ---- completions -------------------------------------------------------------------------- */

static void handle_msg(sdd_rmem_client *cl, const struct rm_msg *m)
{
    switch (m->type) {
    case RM_REALLOC:
        if (m->region.gen > cl->remote.gen && m->region.len > 0) {
            cl->realloc_pending = true;
            cl->next = m->region;
        } else {
            cl->stats.bad_messages++;
        }
        break;
    case RM_PONG:
        if (m->ping.seq == cl->ping_seq) {
            cl->pong_got = true;
        }
        break;
    case RM_DROP:
        cl->dropped = true;
        break;
    default:
        cl->stats.bad_messages++;
        break;
    }
}

static void on_msg(void *owner, const struct sdd_cqe *cqe, const struct rm_msg *m)
{
    (void)cqe;
    handle_msg(owner, m);
}

static void handle_cqe(sdd_rmem_client *cl, const struct sdd_cqe *c)
{
    if (rm_ctl_handle(&cl->ctl, c, on_msg, cl, &cl->stats.bad_messages)) {
        return;
    }
    if (c->kind == SDD_CQE_READ && c->ctx == READ_CTX(cl)) {
        cl->reads_out--;
        if (c->status != SDD_OK && cl->read_err == SDD_OK) {
            cl->read_err = c->status;
        }
    } else if (c->kind == SDD_CQE_PEER_DOWN && c->peer == cl->peer && cl->dead == SDD_OK) {
        cl->dead = c->status != SDD_OK ? c->status : SDD_ECONNRESET;
    }
}

/* Wait up to timeout_ms for completions and handle them: count, or a fatal error. */
static int pump(sdd_rmem_client *cl, int timeout_ms)
{
    struct sdd_cqe cqes[16];
    int n =
        timeout_ms == 0 ? sdd_ep_poll(cl->ep, cqes, 16) : sdd_ep_wait(cl->ep, cqes, 16, timeout_ms);
    for (int i = 0; i < n; i++) {
        handle_cqe(cl, &cqes[i]);
    }
    return n;
}

static sdd_err send_ctl(sdd_rmem_client *cl, const struct rm_msg *m)
{
    sdd_err err;
    uint64_t deadline = sdd_now_ns() + (uint64_t)cl->opts.timeout_ms * SDD_NS_PER_MS;
    while ((err = rm_ctl_send(&cl->ctl, cl->peer, m)) == SDD_EAGAIN && cl->dead == SDD_OK &&
           sdd_now_ns() < deadline) {
        int n = pump(cl, 1);
        if (n < 0) {
            return n;
        }
    }
    return cl->dead != SDD_OK ? cl->dead : err;
}

/* Switch to a region the server announced, once none of our reads uses the old one. */
static sdd_err follow_region(sdd_rmem_client *cl)
{
    if (!cl->realloc_pending || cl->reads_out > 0 || cl->dead != SDD_OK) {
        return SDD_OK;
    }
    sdd_err err = use_region(cl, &cl->next);
    if (err != SDD_OK) {
        return err;
    }
    rm_shm_free(&cl->local); /* the new region comes without a mapping: RMA from here on */
    cl->realloc_pending = false;
    cl->stats.region_changes++;
    struct rm_msg ack = {.type = RM_REALLOC_ACK, .ack = {.gen = cl->remote.gen}};
    return send_ctl(cl, &ack);
}

/* Make the connection usable: handle waiting messages, follow a region change, and reconnect
 * if the server dropped us for missing one. */
static sdd_err prepare(sdd_rmem_client *cl)
{
    int n = pump(cl, 0);
    if (n < 0) {
        return n;
    }
    sdd_err err = follow_region(cl);
    if (err != SDD_OK && err != cl->dead) {
        return err;
    }
    if (cl->dead == SDD_OK) {
        return SDD_OK;
    }
    /* A server that closed the connection on purpose may have dropped us for missing a
     * region change: try once to come back. If nobody listens, the close stands. */
    bool closed = cl->dead == SDD_ECONNRESET || cl->dead == SDD_ECANCELED;
    if (!cl->dropped && (!closed || cl->reconnect_failed)) {
        return cl->dead;
    }
    sdd_err why = cl->dead;
    close_transport(cl);
    err = open_transport(cl);
    if (err == SDD_OK) {
        err = connect_peer(cl);
    }
    if (err != SDD_OK) {
        SDD_DEBUG("rmem", "reconnect failed: %s", sdd_strerror(err));
        cl->reconnect_failed = true;
        cl->dead = why;
        return why;
    }
    SDD_INFO("rmem", "reconnected to %s:%u after the server closed this client", cl->host,
             cl->port);
    cl->stats.reconnects++;
    cl->stats.region_changes++;
    return SDD_OK;
}

/* ---- public calls ------------------------------------------------------------------------- */

sdd_err sdd_rmem_client_connect(const struct sdd_rmem_opts *opts, const char *host, uint16_t port,
                                sdd_rmem_client **out)
{
    if (host == NULL || out == NULL || strlen(host) >= sizeof(((sdd_rmem_client *)0)->host)) {
        return SDD_EINVAL;
    }
    sdd_rmem_client *cl = calloc(1, sizeof(*cl));
    if (cl == NULL) {
        return SDD_ENOMEM;
    }
    if (opts != NULL) {
        cl->opts = *opts;
    } else {
        sdd_rmem_opts_default(&cl->opts);
    }
    strcpy(cl->host, host);
    cl->port = port;
    sdd_err err = open_transport(cl);
    if (err == SDD_OK) {
        err = connect_peer(cl);
    }
    if (err != SDD_OK) {
        sdd_rmem_client_close(cl);
        return err;
    }
    *out = cl;
    return SDD_OK;
}

void sdd_rmem_client_close(sdd_rmem_client *cl)
{
    if (cl == NULL) {
        return;
    }
    close_transport(cl);
    rm_shm_free(&cl->local);
    free(cl->mirror);
    free(cl);
}

void *sdd_rmem_client_memory(const sdd_rmem_client *cl)
{
    return cl->mirror;
}

size_t sdd_rmem_client_size(const sdd_rmem_client *cl)
{
    return cl->mirror_len;
}

const void *sdd_rmem_client_local(const sdd_rmem_client *cl)
{
    return cl->local.addr;
}

uint32_t sdd_rmem_client_generation(const sdd_rmem_client *cl)
{
    return cl->remote.gen;
}

void sdd_rmem_client_stats(const sdd_rmem_client *cl, struct sdd_rmem_client_stats *out)
{
    *out = cl->stats;
}

sdd_err sdd_rmem_client_poll(sdd_rmem_client *cl)
{
    return cl == NULL ? SDD_EINVAL : prepare(cl);
}

/* Post the reads for [remote_off, +len) in pieces the provider accepts. */
static sdd_err post_reads(sdd_rmem_client *cl, size_t remote_off, size_t len, size_t local_off)
{
    size_t max = sdd_ep_info(cl->ep)->max_msg_size;
    while (len > 0) {
        size_t n = len < max ? len : max;
        sdd_err err;
        while ((err = sdd_ep_post_read(cl->ep, cl->peer, cl->mirror + local_off, n, cl->mirror_mr,
                                       &cl->rkey, remote_off, READ_CTX(cl))) == SDD_EAGAIN) {
            int got = pump(cl, 0);
            if (got < 0) {
                return got;
            }
        }
        if (err != SDD_OK) {
            return err;
        }
        cl->reads_out++;
        remote_off += n;
        local_off += n;
        len -= n;
    }
    return SDD_OK;
}

static bool connection_error(sdd_err err)
{
    return err == SDD_ECONNRESET || err == SDD_EPEERDEAD || err == SDD_ETIMEDOUT ||
           err == SDD_ECANCELED;
}

/* An operation failed for want of a connection: the peer's own status says best why (a BYE
 * is SDD_ECONNRESET even when the operation itself was merely canceled). */
static void mark_dead(sdd_rmem_client *cl, sdd_err op_err)
{
    sdd_err why = cl->peer != NULL ? sdd_peer_status(cl->peer) : SDD_OK;
    cl->dead = why != SDD_OK ? why : op_err;
}

static sdd_err sync_once(sdd_rmem_client *cl, size_t remote_off, size_t len, size_t local_off)
{
    if (len == 0 && remote_off < cl->remote.len) {
        len = cl->remote.len - remote_off;
    }
    if (len == 0 || remote_off > cl->remote.len || len > cl->remote.len - remote_off ||
        local_off > cl->mirror_len || len > cl->mirror_len - local_off) {
        return SDD_EINVAL;
    }
    if (cl->local.addr != NULL) {
        /* Same host: plain loads. Acquire pairs with the writer's release stores, and with
         * the server's release of `retired` before it lets the region go. */
        memcpy(cl->mirror + local_off, (const uint8_t *)cl->local.addr + remote_off, len);
        if (atomic_load_explicit(&rm_shm_status(&cl->local)->retired, memory_order_acquire) == 0) {
            cl->stats.syncs++;
            cl->stats.bytes += len;
            return follow_region(cl);
        }
        /* The server moved on: this copy may be stale. RMA from here, which meets the region
         * change (or the drop) like any client. */
        rm_shm_free(&cl->local);
    }
    cl->read_err = SDD_OK;
    sdd_err err = post_reads(cl, remote_off, len, local_off);
    while (cl->reads_out > 0) {
        int n = pump(cl, CL_PUMP_MS);
        if (n < 0) {
            return n;
        }
    }
    if (err == SDD_OK) {
        err = cl->read_err != SDD_OK ? cl->read_err : cl->dead;
    }
    if (connection_error(err) && cl->dead == SDD_OK) {
        mark_dead(cl, err); /* the peer's down notice may still be on its way */
    }
    if (err == SDD_OK) {
        cl->stats.syncs++;
        cl->stats.bytes += len;
        err = follow_region(cl);
    }
    return err;
}

/* What one attempt of a public call does, after prepare(). */
struct attempt {
    size_t remote_off, len, local_off; /* sync */
    uint64_t *rtt_ns;                  /* ping */
    sdd_err (*run)(sdd_rmem_client *cl, const struct attempt *a);
};

/* Run an attempt, and a second one when the connection broke under the first: prepare() may
 * reconnect in between. */
static sdd_err with_retry(sdd_rmem_client *cl, const struct attempt *a)
{
    if (cl == NULL) {
        return SDD_EINVAL;
    }
    sdd_err err = SDD_OK;
    for (int round = 0; round < 2; round++) {
        err = prepare(cl);
        if (err == SDD_OK) {
            err = a->run(cl, a);
        }
        if (err == SDD_OK || !connection_error(err) || cl->reconnect_failed) {
            break;
        }
    }
    return err;
}

static sdd_err run_sync(sdd_rmem_client *cl, const struct attempt *a)
{
    return sync_once(cl, a->remote_off, a->len, a->local_off);
}

sdd_err sdd_rmem_client_sync_range(sdd_rmem_client *cl, size_t remote_off, size_t len,
                                   size_t local_off)
{
    struct attempt a = {
        .remote_off = remote_off, .len = len, .local_off = local_off, .run = run_sync};
    return with_retry(cl, &a);
}

sdd_err sdd_rmem_client_sync(sdd_rmem_client *cl)
{
    return sdd_rmem_client_sync_range(cl, 0, 0, 0);
}

static sdd_err ping_once(sdd_rmem_client *cl, uint64_t *rtt_ns)
{
    uint64_t t0 = sdd_now_ns();
    cl->pong_got = false;
    struct rm_msg ping = {.type = RM_PING, .ping = {.seq = ++cl->ping_seq, .t = t0}};
    sdd_err err = send_ctl(cl, &ping);
    uint64_t deadline = t0 + (uint64_t)cl->opts.timeout_ms * SDD_NS_PER_MS;
    while (err == SDD_OK && !cl->pong_got && cl->dead == SDD_OK) {
        uint64_t now = sdd_now_ns();
        if (now >= deadline) {
            return SDD_ETIMEDOUT;
        }
        int left_ms = (int)((deadline - now + SDD_NS_PER_MS - 1) / SDD_NS_PER_MS);
        int n = pump(cl, left_ms < CL_PUMP_MS ? left_ms : CL_PUMP_MS);
        if (n < 0) {
            err = n;
        }
    }
    if (err == SDD_OK && !cl->pong_got) {
        err = cl->dead;
    }
    if (connection_error(err) && cl->dead == SDD_OK) {
        mark_dead(cl, err);
    }
    if (err == SDD_OK && rtt_ns != NULL) {
        *rtt_ns = sdd_now_ns() - t0;
    }
    return err;
}

static sdd_err run_ping(sdd_rmem_client *cl, const struct attempt *a)
{
    return ping_once(cl, a->rtt_ns);
}

sdd_err sdd_rmem_client_ping(sdd_rmem_client *cl, uint64_t *rtt_ns)
{
    struct attempt a = {.rtt_ns = rtt_ns, .run = run_ping};
    return with_retry(cl, &a);
}
