/* rmem server: publishes one region, tells clients its keys, answers pings and moves every
 * client to a new region when the region is resized or moved. Clients read the data by RMA;
 * the server's CPU is involved only for control messages (and, on software providers, to
 * drive the reads' progress). */
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "rmem/server_internal.h"
#include "sddaq/clock.h"
#include "sddaq/log.h"

#define SRV_RX_SLOTS  64
#define SRV_TX_SLOTS  64
#define SRV_ACCEPT_MS 500 /* a client that connects must finish its handshake within this */

static sdd_err region_info(const sdd_rmem_server *srv, uint8_t type, void *buf, size_t cap,
                           size_t *len)
{
    struct sdd_rkey rk;
    sdd_mr_rkey(srv->mr, &rk);
    struct rm_msg m = {.type = type};
    m.region = (struct rm_region){.addr = rk.addr, .len = srv->len, .key = rk.key, .gen = srv->gen};
    *len = rm_encode(&m, buf, cap);
    return *len != 0 ? SDD_OK : SDD_EINVAL;
}

static bool listener_ready(const sdd_rmem_server *srv)
{
    struct pollfd p = {.fd = sdd_listener_fd(srv->listener), .events = POLLIN};
    return poll(&p, 1, 0) > 0;
}

/* ---- clients ------------------------------------------------------------------------------ */

static struct srv_client *find_client(sdd_rmem_server *srv, const sdd_peer *peer)
{
    for (size_t i = 0; i < srv->nclients; i++) {
        if (srv->clients[i].peer == peer) {
            return &srv->clients[i];
        }
    }
    return NULL;
}

/* Both callers give the client up (it left, or did not answer in time): nothing posted to it
 * is worth waiting for, and a stopped client would hold a close for a second. */
static void remove_client(sdd_rmem_server *srv, struct srv_client *c, bool lost)
{
    sdd_peer_abort(c->peer);
    *c = srv->clients[--srv->nclients];
    srv->stats.clients_now = srv->nclients;
    if (lost) {
        srv->stats.clients_lost++;
    }
}

static bool hello_ok(const sdd_peer *peer)
{
    size_t len = 0;
    const void *info = sdd_peer_info(peer, &len);
    struct rm_msg m;
    return rm_decode(info, len, &m) == SDD_OK && m.type == RM_HELLO &&
           m.hello.role == RM_ROLE_CLIENT;
}

static int accept_client(sdd_rmem_server *srv)
{
    uint8_t info[128];
    size_t info_len = 0;
    bool full = srv->nclients >= srv->opts.max_clients;
    if (full) {
        struct rm_msg m = {.type = RM_DROP, .done = {.status = SDD_EBUSY}};
        info_len = rm_encode(&m, info, sizeof(info));
    } else if (region_info(srv, RM_REGION, info, sizeof(info), &info_len) != SDD_OK) {
        return 0;
    } else if (srv->owned) {
        /* A client on this host may map the region instead of reading it by RMA. */
        struct rm_msg m = {.type = RM_LOCAL};
        m.local.pid = (uint32_t)getpid();
        m.local.fd = (uint32_t)srv->shm.fd;
        m.local.len = srv->len;
        m.local.host = rm_host_id();
        info_len += rm_encode(&m, info + info_len, sizeof(info) - info_len);
    }
    sdd_peer *peer = NULL;
    sdd_err err = sdd_listener_accept(srv->listener, info, info_len, SRV_ACCEPT_MS, &peer);
    if (err == SDD_ETIMEDOUT || err == SDD_EAGAIN) {
        return 0;
    }
    if (err != SDD_OK) {
        srv->stats.clients_refused++; /* the bootstrap logged why */
        return 1;
    }
    if (full || !hello_ok(peer)) {
        SDD_WARN("rmem", "refusing client %s: %s", sdd_peer_name(peer),
                 full ? "server full" : "not an rmem client");
        srv->stats.clients_refused++;
        sdd_peer_close(peer);
        return 1;
    }
    if (srv->nclients == srv->cap) {
        size_t cap = srv->cap ? srv->cap * 2 : 8;
        struct srv_client *c = realloc(srv->clients, cap * sizeof(*c));
        if (c == NULL) {
            srv->stats.clients_refused++;
            sdd_peer_close(peer);
            return 1;
        }
        srv->clients = c;
        srv->cap = cap;
    }
    srv->clients[srv->nclients++] = (struct srv_client){.peer = peer, .gen_acked = srv->gen};
    srv->stats.clients_now = srv->nclients;
    srv->stats.clients_total++;
    SDD_DEBUG("rmem", "client %s joined (%zu now)", sdd_peer_name(peer), srv->nclients);
    return 1;
}

/* Send a control message, driving completions while the slots or queues are full. */
static sdd_err send_ctl(sdd_rmem_server *srv, sdd_peer *peer, const struct rm_msg *m)
{
    uint64_t deadline = sdd_now_ns() + (uint64_t)srv->opts.timeout_ms * SDD_NS_PER_MS;
    sdd_err err;
    while ((err = rm_ctl_send(&srv->ctl, peer, m)) == SDD_EAGAIN && sdd_now_ns() < deadline) {
        int n = srv_progress_once(srv, false);
        if (n < 0) {
            return n;
        }
    }
    return err;
}

/* ---- control messages --------------------------------------------------------------------- */

static void handle_msg(sdd_rmem_server *srv, const struct sdd_cqe *cqe, const struct rm_msg *m)
{
    struct srv_client *c = find_client(srv, cqe->peer);
    if (c == NULL) {
        SDD_DEBUG("rmem", "control message from an unknown peer %p", (void *)cqe->peer);
        srv->stats.bad_messages++; /* from no client we know (a left one, or unnamed) */
        return;
    }
    switch (m->type) {
    case RM_PING: {
        /* Counted and published before the pong leaves, so a client that has its answer
         * never reads a count without it. */
        struct rm_msg pong = {.type = RM_PONG, .ping = m->ping};
        srv->stats.pings++;
        if (srv->thread_started) {
            srv_publish_stats(srv);
        }
        if (send_ctl(srv, c->peer, &pong) != SDD_OK) {
            srv->stats.pings--;
        }
        break;
    }
    case RM_REALLOC_ACK:
        if (m->ack.gen > srv->gen || m->ack.gen < c->gen_acked) {
            srv->stats.bad_messages++;
        } else {
            c->gen_acked = m->ack.gen;
        }
        break;
    default:
        SDD_WARN("rmem", "unexpected %s from client %s", rm_type_name(m->type),
                 sdd_peer_name(c->peer));
        srv->stats.bad_messages++;
        break;
    }
}

static void on_msg(void *owner, const struct sdd_cqe *cqe, const struct rm_msg *m)
{
    handle_msg(owner, cqe, m);
}

static void handle_cqe(sdd_rmem_server *srv, const struct sdd_cqe *cqe)
{
    if (rm_ctl_handle(&srv->ctl, cqe, on_msg, srv, &srv->stats.bad_messages)) {
        return;
    }
    if (cqe->kind == SDD_CQE_PEER_DOWN) {
        struct srv_client *c = find_client(srv, cqe->peer);
        if (c != NULL) {
            SDD_INFO("rmem", "client %s left: %s", sdd_peer_name(c->peer),
                     sdd_strerror(cqe->status));
            remove_client(srv, c, true);
        }
    }
}

int srv_progress_once(sdd_rmem_server *srv, bool check_listener)
{
    struct sdd_cqe cqes[32];
    int n = sdd_ep_poll(srv->ep, cqes, 32);
    if (n < 0) {
        return n;
    }
    for (int i = 0; i < n; i++) {
        handle_cqe(srv, &cqes[i]);
    }
    int accepted = 0;
    if (check_listener && listener_ready(srv)) {
        accepted = accept_client(srv);
    }
    return n + accepted;
}

/* ---- life cycle --------------------------------------------------------------------------- */

static void free_server(sdd_rmem_server *srv)
{
    if (srv->wake_fd >= 0) {
        close(srv->wake_fd);
    }
    sdd_ep_close(srv->ep); /* BYE to clients; closes listener, peers and registrations */
    rm_ctl_fini(&srv->ctl);
    rm_shm_free(&srv->shm);
    free(srv->clients);
    pthread_mutex_destroy(&srv->lock);
    pthread_mutex_destroy(&srv->stats_lock);
    free(srv);
}

sdd_err sdd_rmem_server_open(const struct sdd_rmem_opts *opts, void *region, size_t len,
                             sdd_rmem_server **out)
{
    if (len == 0 || out == NULL) {
        return SDD_EINVAL;
    }
    sdd_rmem_server *srv = calloc(1, sizeof(*srv));
    if (srv == NULL) {
        return SDD_ENOMEM;
    }
    if (opts != NULL) {
        srv->opts = *opts;
    } else {
        sdd_rmem_opts_default(&srv->opts);
    }
    pthread_mutex_init(&srv->lock, NULL);
    pthread_mutex_init(&srv->stats_lock, NULL);
    srv->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    srv->gen = 1;
    srv->len = len;
    srv->owned = region == NULL;
    sdd_err err = srv->wake_fd >= 0 ? SDD_OK : SDD_ENOMEM;
    if (err == SDD_OK && srv->owned) {
        err = rm_shm_alloc(&srv->shm, len);
    }
    srv->region = srv->owned ? srv->shm.addr : region;

    struct sdd_ep_opts eo;
    sdd_ep_opts_default(&eo);
    eo.provider = srv->opts.provider;
    eo.wait_mode = srv->opts.wait_mode;
    eo.spin_us = srv->opts.spin_us;
    if (err == SDD_OK) {
        err = sdd_ep_open(&eo, &srv->ep);
    }
    if (err == SDD_OK) {
        err = sdd_mr_reg(srv->ep, srv->region, len, SDD_ACCESS_REMOTE_READ, &srv->mr);
    }
    if (err == SDD_OK) {
        err = rm_ctl_init(&srv->ctl, srv->ep, SRV_RX_SLOTS, SRV_TX_SLOTS);
    }
    if (err == SDD_OK) {
        err = sdd_ep_listen(srv->ep, srv->opts.host, srv->opts.port, &srv->listener);
    }
    if (err == SDD_OK && srv->opts.progress_thread) {
        err = srv_start_thread(srv);
    }
    if (err != SDD_OK) {
        free_server(srv);
        return err;
    }
    SDD_INFO("rmem", "serving %zu bytes on port %u over %s", len, sdd_listener_port(srv->listener),
             sdd_ep_info(srv->ep)->provider);
    *out = srv;
    return SDD_OK;
}

/* Servers whose thread is stuck inside the provider: their memory stays allocated (the
 * thread still uses it) and reachable. */
static sdd_rmem_server *abandoned[16];
static atomic_uint nabandoned;

void sdd_rmem_server_close(sdd_rmem_server *srv)
{
    if (srv == NULL) {
        return;
    }
    if (srv_stop_thread(srv)) {
        free_server(srv);
        return;
    }
    sdd_ep_abandon(srv->ep); /* its shm region would outlive the process */
    unsigned i = atomic_fetch_add(&nabandoned, 1);
    if (i < sizeof(abandoned) / sizeof(abandoned[0])) {
        abandoned[i] = srv;
    }
}

void *sdd_rmem_server_region(const sdd_rmem_server *srv, size_t *len)
{
    if (len != NULL) {
        *len = srv->len;
    }
    return srv->region;
}

uint16_t sdd_rmem_server_port(const sdd_rmem_server *srv)
{
    return sdd_listener_port(srv->listener);
}

void sdd_rmem_server_stats(sdd_rmem_server *srv, struct sdd_rmem_server_stats *out)
{
    if (!srv->thread_started) {
        *out = srv->stats; /* the caller drives progress: nothing runs concurrently */
    } else {
        pthread_mutex_lock(&srv->stats_lock);
        *out = srv->stats_pub;
        pthread_mutex_unlock(&srv->stats_lock);
    }
    uint64_t since = atomic_load_explicit(&srv->round_since_ns, memory_order_relaxed);
    uint64_t now = sdd_now_ns();
    out->stalled_ms = since != 0 && now > since ? (now - since) / SDD_NS_PER_MS : 0;
}

/* ---- region changes ----------------------------------------------------------------------- */

/* Tell every client, wait for their ACKs within grace_ms, drop the silent ones. Telling does
 * not block: on some providers (shm) a first message to a peer waits until that peer polls. */
static void move_clients(sdd_rmem_server *srv)
{
    uint8_t buf[64];
    size_t len = 0;
    struct rm_msg m;
    if (region_info(srv, RM_REALLOC, buf, sizeof(buf), &len) != SDD_OK ||
        rm_decode(buf, len, &m) != SDD_OK) {
        return;
    }
    for (size_t i = 0; i < srv->nclients; i++) {
        srv->clients[i].told = false;
    }
    uint64_t deadline = sdd_now_ns() + (uint64_t)srv->opts.grace_ms * SDD_NS_PER_MS;
    while (sdd_now_ns() < deadline) {
        bool done = true;
        for (size_t i = 0; i < srv->nclients; i++) {
            struct srv_client *c = &srv->clients[i];
            if (!c->told) {
                sdd_err err = rm_ctl_send(&srv->ctl, c->peer, &m);
                c->told = err != SDD_EAGAIN;
            }
            done = done && c->gen_acked == srv->gen;
        }
        if (done) {
            break;
        }
        if (srv_progress_once(srv, false) == 0) {
            sdd_sleep_ns(20 * SDD_NS_PER_US);
        }
    }
    for (size_t i = 0; i < srv->nclients;) {
        struct srv_client *c = &srv->clients[i];
        if (c->gen_acked == srv->gen) {
            i++;
            continue;
        }
        SDD_WARN("rmem", "dropping client %s: no acknowledgement of the new region in %u ms",
                 sdd_peer_name(c->peer), srv->opts.grace_ms);
        struct rm_msg drop = {.type = RM_DROP, .done = {.status = SDD_ETIMEDOUT}};
        rm_ctl_send(&srv->ctl, c->peer, &drop); /* a courtesy: the close says it anyway */
        srv->stats.clients_dropped++;
        remove_client(srv, c, false);
    }
}

/* Publish region (with shm describing it when the server owns it). */
static sdd_err change_region(sdd_rmem_server *srv, void *region, size_t len, struct rm_shm *shm)
{
    sdd_mr *mr = NULL;
    sdd_err err = sdd_mr_reg(srv->ep, region, len, SDD_ACCESS_REMOTE_READ, &mr);
    if (err != SDD_OK) {
        return err;
    }
    if (shm != NULL) {
        memcpy(region, srv->region, len < srv->len ? len : srv->len);
    }
    struct rm_shm old_shm = srv->shm;
    sdd_mr *old_mr = srv->mr;
    srv->region = region;
    srv->len = len;
    srv->owned = shm != NULL;
    srv->shm = shm != NULL ? *shm : (struct rm_shm){.fd = -1};
    srv->mr = mr;
    srv->gen++;
    srv->stats.region_changes++;
    move_clients(srv);
    /* Every remaining client has switched: nobody reads the old region any more. */
    sdd_mr_close(old_mr);
    rm_shm_free(&old_shm);
    return SDD_OK;
}

sdd_err sdd_rmem_server_resize(sdd_rmem_server *srv, size_t len)
{
    if (srv == NULL || len == 0 || !srv->owned) {
        return SDD_EINVAL;
    }
    struct rm_shm shm;
    sdd_err err = rm_shm_alloc(&shm, len);
    if (err != SDD_OK) {
        return err;
    }
    err = srv_lock(srv);
    if (err == SDD_OK) {
        err = change_region(srv, shm.addr, len, &shm);
        srv_publish_stats(srv);
        srv_unlock(srv);
    }
    if (err != SDD_OK) {
        rm_shm_free(&shm);
    }
    return err;
}

sdd_err sdd_rmem_server_move(sdd_rmem_server *srv, void *region, size_t len)
{
    if (srv == NULL || region == NULL || len == 0) {
        return SDD_EINVAL;
    }
    sdd_err err = srv_lock(srv);
    if (err == SDD_OK) {
        err = change_region(srv, region, len, NULL);
        srv_publish_stats(srv);
        srv_unlock(srv);
    }
    return err;
}
