/* Peers: joining through the TCP bootstrap (listen/accept, connect), the peer table, and the
 * liveness watch on each peer's bootstrap socket. A peer that dies, closes or stops progressing
 * is declared down once: its pending operations fail and one SDD_CQE_PEER_DOWN is queued. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <rdma/fi_cm.h>
#include <rdma/fi_errno.h>

#include "fabric/ep_internal.h"
#include "sddaq/clock.h"
#include "sddaq/log.h"

#define BYE_TIMEOUT_NS (100 * SDD_NS_PER_MS)

static uint64_t deadline_from(int timeout_ms)
{
    return timeout_ms < 0 ? UINT64_MAX : sdd_now_ns() + (uint64_t)timeout_ms * SDD_NS_PER_MS;
}

sdd_peer *ep_peer_by_addr(sdd_ep *ep, fi_addr_t addr)
{
    if (addr == FI_ADDR_NOTAVAIL || addr == FI_ADDR_UNSPEC) {
        return NULL;
    }
    if (addr < EP_MAX_PEERS && ep->peers[addr] != NULL && ep->peers[addr]->addr == addr) {
        return ep->peers[addr];
    }
    for (uint32_t i = 0; i < EP_MAX_PEERS; i++) {
        if (ep->peers[i] != NULL && ep->peers[i]->addr == addr) {
            return ep->peers[i];
        }
    }
    return NULL;
}

/* Prefer the slot equal to the AV index so lookups by source address are direct. */
static int free_slot(sdd_ep *ep, fi_addr_t addr)
{
    if (addr < EP_MAX_PEERS && ep->peers[addr] == NULL) {
        return (int)addr;
    }
    for (int i = 0; i < EP_MAX_PEERS; i++) {
        if (ep->peers[i] == NULL) {
            return i;
        }
    }
    return -1;
}

static void stop_watching(sdd_ep *ep, sdd_peer *peer)
{
    if (peer->sock >= 0) {
        epoll_ctl(ep->peer_epfd, EPOLL_CTL_DEL, peer->sock, NULL);
        close(peer->sock);
        peer->sock = -1;
    }
}

void ep_peer_declare_down(sdd_ep *ep, sdd_peer *peer, sdd_err why)
{
    if (peer->status != SDD_OK) {
        return;
    }
    peer->status = why;
    ep->stats.peers_lost++;
    SDD_WARN("fabric", "peer %s is down: %s", peer->name, sdd_strerror(why));
    stop_watching(ep, peer);
    ep_fail_peer_ops(ep, peer, why);
    struct sdd_cqe cqe = {.peer = peer, .status = why, .kind = SDD_CQE_PEER_DOWN};
    ep_push_local(ep, &cqe);
    peer->down_reported = true;
}

/* A BYE starts a grace period (messages sent before it may still be queued here); anything
 * else wrong with the liveness socket means the peer is gone now. */
static void peer_said_bye(sdd_ep *ep, sdd_peer *peer, uint64_t now)
{
    stop_watching(ep, peer);
    peer->bye_deadline_ns = now + EP_BYE_GRACE_NS;
    ep->nclosing++;
}

static void expire_byes(sdd_ep *ep, uint64_t now)
{
    for (uint32_t i = 0; i < EP_MAX_PEERS && ep->nclosing > 0; i++) {
        sdd_peer *peer = ep->peers[i];
        if (peer != NULL && peer->bye_deadline_ns != 0 && peer->bye_deadline_ns <= now) {
            peer->bye_deadline_ns = 0;
            ep->nclosing--;
            ep_peer_declare_down(ep, peer, SDD_ECONNRESET);
        }
    }
}

void ep_check_peers(sdd_ep *ep, uint64_t now)
{
    struct epoll_event ev[64];
    int n = epoll_wait(ep->peer_epfd, ev, 64, 0);
    for (int i = 0; i < n; i++) {
        sdd_peer *peer = ev[i].data.ptr;
        if (peer->sock < 0) {
            continue;
        }
        sdd_err why = boot_check_alive(peer->sock);
        if (why == SDD_ECONNRESET) {
            peer_said_bye(ep, peer, now);
        } else if (why != SDD_OK) {
            ep_peer_declare_down(ep, peer, why);
        }
    }
    if (ep->nclosing > 0) {
        expire_byes(ep, now);
    }
}

static sdd_err check_hello(const sdd_ep *ep, const struct boot_hello *theirs, int fd)
{
    if (strcmp(theirs->provider, ep->prov_name) == 0) {
        return SDD_OK;
    }
    char reason[192];
    snprintf(reason, sizeof(reason), "provider mismatch: '%s' here, '%s' there", ep->prov_name,
             theirs->provider);
    SDD_WARN("fabric", "%s", reason);
    boot_send_frame(fd, BOOT_REJECT, reason, (uint32_t)strlen(reason),
                    sdd_now_ns() + BYE_TIMEOUT_NS);
    return SDD_EPROTO;
}

static sdd_err expect_ready(int fd, uint64_t deadline)
{
    uint16_t type = 0;
    void *payload = NULL;
    uint32_t len = 0;
    sdd_err err = boot_recv_frame(fd, deadline, &type, &payload, &len);
    free(payload);
    if (err != SDD_OK) {
        return err;
    }
    if (type == BOOT_REJECT) {
        return SDD_ECONNREFUSED;
    }
    if (type == BOOT_BYE) {
        return SDD_ECONNRESET;
    }
    return type == BOOT_READY ? SDD_OK : SDD_EPROTO;
}

static sdd_err make_peer(sdd_ep *ep, int fd, fi_addr_t addr, struct boot_hello *theirs,
                         const char *name, sdd_peer **out)
{
    int slot = free_slot(ep, addr);
    sdd_peer *peer = slot >= 0 ? calloc(1, sizeof(*peer)) : NULL;
    if (peer == NULL) {
        return slot < 0 ? SDD_ETOOBIG : SDD_ENOMEM;
    }
    peer->ep = ep;
    peer->addr = addr;
    peer->sock = fd;
    peer->slot = (uint32_t)slot;
    peer->info = theirs->info;
    peer->info_len = theirs->info_len;
    theirs->info = NULL;
    snprintf(peer->name, sizeof(peer->name), "%s", name);
    if (ep_core_name_is(ep->prov_name, "shm")) {
        peer->shm_pid = ep_shm_name_pid(theirs->addr, theirs->addr_len);
        ep_shm_watch(peer->shm_pid);
    }
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = peer};
    if (epoll_ctl(ep->peer_epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        SDD_ERROR("fabric", "epoll_ctl(peer): %s", strerror(errno));
        ep_shm_unwatch(peer->shm_pid);
        free(peer->info);
        free(peer);
        return sdd_err_from_errno(errno);
    }
    ep->peers[slot] = peer;
    ep->npeers++;
    *out = peer;
    return SDD_OK;
}

/* Both sides run the same exchange: HELLO both ways, insert the address, READY both ways.
 * Callers have checked info and info_len. */
static sdd_err handshake(sdd_ep *ep, int fd, const char *name, const void *info, size_t info_len,
                         uint64_t deadline, sdd_peer **out)
{
    struct boot_hello mine = {.info = (void *)info, .info_len = (uint32_t)info_len};
    snprintf(mine.provider, sizeof(mine.provider), "%s", ep->prov_name);
    size_t addr_len = sizeof(mine.addr);
    int rc = fi_getname(&ep->fid->fid, mine.addr, &addr_len);
    if (rc != 0) {
        SDD_ERROR("fabric", "fi_getname: %s (%d)", fi_lib_strerror(-rc), rc);
        return ep_err_from_fi(rc);
    }
    mine.addr_len = (uint32_t)addr_len;
    struct boot_hello theirs = {0};
    sdd_err err = boot_send_hello(fd, &mine, deadline);
    if (err == SDD_OK) {
        err = boot_recv_hello(fd, deadline, &theirs);
    }
    if (err == SDD_OK) {
        err = check_hello(ep, &theirs, fd);
    }
    fi_addr_t addr = FI_ADDR_NOTAVAIL;
    if (err == SDD_OK) {
        rc = fi_av_insert(ep->av, theirs.addr, 1, &addr, 0, NULL);
        if (rc != 1) {
            SDD_WARN("fabric", "fi_av_insert for %s failed (%d)", name, rc);
            err = SDD_EPROTO;
        }
    }
    if (err == SDD_OK) {
        err = boot_send_frame(fd, BOOT_READY, NULL, 0, deadline);
    }
    if (err == SDD_OK) {
        err = expect_ready(fd, deadline);
    }
    if (err == SDD_OK) {
        err = make_peer(ep, fd, addr, &theirs, name, out);
    }
    if (err != SDD_OK && addr != FI_ADDR_NOTAVAIL) {
        fi_av_remove(ep->av, &addr, 1, 0);
    }
    free(theirs.info);
    return err;
}

sdd_err sdd_ep_connect(sdd_ep *ep, const char *host, uint16_t port, const void *info,
                       size_t info_len, int timeout_ms, sdd_peer **out)
{
    if (ep == NULL || host == NULL || port == 0 || out == NULL || info_len > BOOT_MAX_INFO ||
        (info == NULL && info_len > 0)) {
        return SDD_EINVAL;
    }
    uint64_t deadline = deadline_from(timeout_ms);
    struct boot_sockopts so = {.timeout_ms = ep->opts.peer_timeout_ms};
    int fd = -1;
    sdd_err err = boot_connect(host, port, deadline, &so, &fd);
    if (err != SDD_OK) {
        SDD_DEBUG("fabric", "connect to %s:%u: %s", host, port, sdd_strerror(err));
        return err;
    }
    char name[64];
    snprintf(name, sizeof(name), "%s:%u", host, port);
    err = handshake(ep, fd, name, info, info_len, deadline, out);
    if (err != SDD_OK) {
        SDD_DEBUG("fabric", "bootstrap with %s failed: %s", name, sdd_strerror(err));
        close(fd);
    }
    return err;
}

sdd_err sdd_ep_listen(sdd_ep *ep, const char *host, uint16_t port, sdd_listener **out)
{
    if (ep == NULL || out == NULL) {
        return SDD_EINVAL;
    }
    sdd_listener *l = calloc(1, sizeof(*l));
    if (l == NULL) {
        return SDD_ENOMEM;
    }
    sdd_err err = boot_listen(host, port, &l->fd, &l->port);
    if (err != SDD_OK) {
        free(l);
        return err;
    }
    l->ep = ep;
    l->next = ep->listeners;
    ep->listeners = l;
    *out = l;
    return SDD_OK;
}

uint16_t sdd_listener_port(const sdd_listener *l)
{
    return l->port;
}

int sdd_listener_fd(const sdd_listener *l)
{
    return l->fd;
}

sdd_err sdd_listener_accept(sdd_listener *l, const void *info, size_t info_len, int timeout_ms,
                            sdd_peer **out)
{
    if (l == NULL || out == NULL || info_len > BOOT_MAX_INFO || (info == NULL && info_len > 0)) {
        return SDD_EINVAL;
    }
    uint64_t deadline = deadline_from(timeout_ms);
    struct boot_sockopts so = {.timeout_ms = l->ep->opts.peer_timeout_ms};
    int fd = -1;
    char name[64] = "";
    sdd_err err = boot_accept(l->fd, deadline, &so, &fd, name, sizeof(name));
    if (err != SDD_OK) {
        return err;
    }
    err = handshake(l->ep, fd, name, info, info_len, deadline, out);
    if (err != SDD_OK) {
        SDD_DEBUG("fabric", "bootstrap with %s failed: %s", name, sdd_strerror(err));
        close(fd);
    }
    return err;
}

static void unlink_listener(sdd_ep *ep, sdd_listener *l)
{
    for (sdd_listener **p = &ep->listeners; *p != NULL; p = &(*p)->next) {
        if (*p == l) {
            *p = l->next;
            return;
        }
    }
}

void sdd_listener_close(sdd_listener *l)
{
    if (l == NULL) {
        return;
    }
    unlink_listener(l->ep, l);
    close(l->fd);
    free(l);
}

void ep_close_all_listeners(sdd_ep *ep)
{
    while (ep->listeners != NULL) {
        sdd_listener_close(ep->listeners);
    }
}

const void *sdd_peer_info(const sdd_peer *peer, size_t *len)
{
    if (len != NULL) {
        *len = peer->info_len;
    }
    return peer->info;
}

const char *sdd_peer_name(const sdd_peer *peer)
{
    return peer->name;
}

sdd_err sdd_peer_status(const sdd_peer *peer)
{
    return peer->status;
}

/* Completions still queued for the user must not point at a freed peer. */
static void forget_in_local(sdd_ep *ep, const sdd_peer *peer)
{
    for (uint32_t i = ep->local.head; i != ep->local.tail; i++) {
        struct sdd_cqe *c = &ep->local.items[i % ep->local.cap];
        if (c->peer == peer) {
            c->peer = NULL;
        }
    }
    for (uint32_t i = 0; i < ep->nops; i++) {
        if (ep->ops[i].peer == peer) {
            ep->ops[i].peer = NULL;
        }
    }
}

void sdd_peer_close(sdd_peer *peer)
{
    if (peer == NULL) {
        return;
    }
    sdd_ep *ep = peer->ep;
    bool gone = peer->status != SDD_OK; /* died, or given up */
    if (peer->bye_deadline_ns != 0) {
        peer->bye_deadline_ns = 0;
        ep->nclosing--;
    }
    if (peer->status == SDD_OK) {
        ep_flush(ep, peer, true); /* what we sent should leave before the goodbye */
    }
    if (peer->sock >= 0) {
        boot_send_frame(peer->sock, BOOT_BYE, NULL, 0, sdd_now_ns() + BYE_TIMEOUT_NS);
    }
    stop_watching(ep, peer);
    if (peer->status == SDD_OK) {
        peer->status = SDD_ECANCELED;
        ep_fail_peer_ops(ep, peer, SDD_ECANCELED);
    }
    ep_chunk_fail(ep, peer, SDD_ECANCELED); /* normally done: flushed or failed above */
    forget_in_local(ep, peer);
    /* libfabric 1.17's shm unmaps a removed peer's region while transfers to it may still sit
     * in its progress engine (always, without cross-memory attach, when the peer was killed):
     * the next poll touched the unmapped region and this process died of SIGSEGV. A dead or
     * abandoned shm peer keeps its address entry until the endpoint closes; a new process
     * never has its name (shm names carry the PID). */
    if (!gone || !ep_core_name_is(ep->prov_name, "shm")) {
        fi_av_remove(ep->av, &peer->addr, 1, 0);
    }
    ep_shm_unwatch(peer->shm_pid);
    ep->peers[peer->slot] = NULL;
    ep->npeers--;
    free(peer->info);
    free(peer);
}

void sdd_peer_abort(sdd_peer *peer)
{
    if (peer != NULL && peer->status == SDD_OK) {
        peer->status = SDD_ECANCELED; /* close then skips the flush */
        ep_fail_peer_ops(peer->ep, peer, SDD_ECANCELED);
    }
    sdd_peer_close(peer);
}

void ep_close_all_peers(sdd_ep *ep)
{
    for (uint32_t i = 0; i < EP_MAX_PEERS && ep->npeers > 0; i++) {
        if (ep->peers[i] != NULL) {
            sdd_peer_close(ep->peers[i]);
        }
    }
}
