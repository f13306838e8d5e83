/* Endpoint lifecycle: provider selection (by name or "auto"), opening the libfabric objects
 * with the capabilities sddaq needs, and tearing them down in order. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <rdma/fi_cm.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_eq.h>

#include "fabric/ep_internal.h"
#include "sddaq/log.h"

#define FI_API_VERSION FI_VERSION(1, 15)

/* Hardware first; tcp is the portable fallback. shm only when asked for by name. */
static const char *const auto_order[] = {"cxi", "efa", "verbs", "psm3", "opx", "psm2", "tcp"};

void sdd_ep_opts_default(struct sdd_ep_opts *opts)
{
    memset(opts, 0, sizeof(*opts));
    opts->provider = "auto";
    opts->tx_depth = 1024;
    opts->rx_depth = 1024;
    opts->op_timeout_ms = 10000;
    opts->peer_timeout_ms = 5000;
    opts->wait_mode = SDD_WAIT_ADAPTIVE;
    opts->spin_us = 50;
}

sdd_err ep_err_from_fi(int fi_rc)
{
    int e = fi_rc < 0 ? -fi_rc : fi_rc;
    switch (e) {
    case 0:
        return SDD_OK;
    case FI_EAGAIN:
        return SDD_EAGAIN;
    case FI_ETRUNC:
    case FI_ETOOSMALL:
    case FI_EMSGSIZE:
        return SDD_ETOOBIG;
    case FI_ECANCELED:
        return SDD_ECANCELED;
    case FI_ENODATA:
        return SDD_ENOPROV;
    case FI_EKEYREJECTED:
    case FI_EACCES:
    case FI_EPERM:
    case FI_EFAULT:
        return SDD_EACCES;
    case FI_ECONNRESET:
    case FI_ECONNABORTED:
    case FI_ENOTCONN:
    case EPIPE:
    case FI_ESHUTDOWN:
        return SDD_EPEERDEAD;
    case FI_ECONNREFUSED:
        return SDD_ECONNREFUSED;
    case FI_ETIMEDOUT:
        return SDD_ETIMEDOUT;
    case FI_EADDRNOTAVAIL:
    case FI_EHOSTUNREACH:
        return SDD_EPEERDEAD;
    case FI_ENOSYS:
    case FI_EOPNOTSUPP:
        return SDD_ENOTSUP;
    case FI_ENOMEM:
        return SDD_ENOMEM;
    case FI_EINVAL:
    case FI_EBADFLAGS:
    case FI_ENOKEY:
        return SDD_EINVAL;
    case FI_EIO:
    case FI_EOTHER:
        return SDD_EIO;
    }
    return SDD_EFABRIC;
}

static struct fi_info *make_hints(const struct sdd_ep_opts *opts, bool want_source)
{
    struct fi_info *hints = fi_lib_dupinfo(NULL);
    if (hints == NULL) {
        return NULL;
    }
    hints->caps =
        FI_MSG | FI_RMA | FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
    if (want_source) {
        hints->caps |= FI_SOURCE;
    }
    hints->mode = FI_CONTEXT | FI_CONTEXT2 | FI_RX_CQ_DATA;
    hints->ep_attr->type = FI_EP_RDM;
    hints->domain_attr->mr_mode =
        FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;
    hints->domain_attr->threading = FI_THREAD_DOMAIN;
    hints->tx_attr->msg_order = FI_ORDER_SAS;
    hints->rx_attr->msg_order = FI_ORDER_SAS;
    const char *prov = opts->provider;
    if (prov != NULL && prov[0] != '\0' && strcmp(prov, "auto") != 0) {
        hints->fabric_attr->prov_name = strdup(prov);
    }
    if (opts->domain != NULL && opts->domain[0] != '\0') {
        hints->domain_attr->name = strdup(opts->domain);
    }
    return hints;
}

bool ep_core_name_is(const char *prov_name, const char *want)
{
    size_t n = strcspn(prov_name, ";");
    return strlen(want) == n && strncmp(prov_name, want, n) == 0;
}

/* Pick one entry of list for opts->provider; returns a duplicate the caller frees. */
static struct fi_info *choose(struct fi_info *list, const char *provider)
{
    bool is_auto = provider == NULL || provider[0] == '\0' || strcmp(provider, "auto") == 0;
    if (!is_auto) {
        for (struct fi_info *i = list; i != NULL; i = i->next) {
            if (ep_core_name_is(i->fabric_attr->prov_name, provider) ||
                strcmp(i->fabric_attr->prov_name, provider) == 0) {
                return fi_lib_dupinfo(i);
            }
        }
        return NULL;
    }
    for (size_t k = 0; k < sizeof(auto_order) / sizeof(auto_order[0]); k++) {
        for (struct fi_info *i = list; i != NULL; i = i->next) {
            if (ep_core_name_is(i->fabric_attr->prov_name, auto_order[k])) {
                return fi_lib_dupinfo(i);
            }
        }
    }
    return NULL;
}

static sdd_err get_info(const struct sdd_ep_opts *opts, struct fi_info **out, bool *source)
{
    sdd_err err = fi_lib_open();
    if (err != SDD_OK) {
        return err; /* logged there */
    }
    /* Ask with FI_SOURCE first (receive completions then name their peer); some providers
     * lack it, so fall back to asking without. */
    for (int pass = 0; pass < 2; pass++) {
        bool want_source = pass == 0;
        struct fi_info *hints = make_hints(opts, want_source);
        if (hints == NULL) {
            return SDD_ENOMEM;
        }
        struct fi_info *list = NULL;
        int rc = fi_lib_getinfo(FI_API_VERSION, hints, &list);
        fi_lib_freeinfo(hints);
        if (rc == 0) {
            struct fi_info *pick = choose(list, opts->provider);
            fi_lib_freeinfo(list);
            if (pick != NULL) {
                *out = pick;
                *source = want_source;
                return SDD_OK;
            }
        } else if (rc != -FI_ENODATA) {
            SDD_WARN("fabric", "fi_getinfo: %s (%d)", fi_lib_strerror(-rc), rc);
        }
    }
    SDD_WARN("fabric", "no RDM provider with messages and RMA matches '%s'",
             opts->provider ? opts->provider : "auto");
    return SDD_ENOPROV;
}

static void fill_info(sdd_ep *ep, bool source)
{
    struct fi_info *fi = ep->fi;
    struct sdd_ep_info *info = &ep->info;
    snprintf(ep->prov_name, sizeof(ep->prov_name), "%s", fi->fabric_attr->prov_name);
    info->provider = ep->prov_name;
    info->fabric = fi->fabric_attr->name;
    info->domain = fi->domain_attr->name;
    info->max_msg_size = fi->ep_attr->max_msg_size;
    info->inject_size = fi->tx_attr->inject_size;
    info->cq_data_size = fi->domain_attr->cq_data_size;
    info->tx_depth = ep->opts.tx_depth;
    info->rx_depth = ep->opts.rx_depth;
    int mode = fi->domain_attr->mr_mode;
    info->mr_virt_addr = (mode & FI_MR_VIRT_ADDR) != 0;
    info->mr_prov_key = (mode & FI_MR_PROV_KEY) != 0;
    info->mr_local = (mode & FI_MR_LOCAL) != 0;
    info->mr_endpoint = (mode & FI_MR_ENDPOINT) != 0;
    info->rx_cq_data = (fi->mode & FI_RX_CQ_DATA) != 0;
    info->source_addr = source;
    info->write_chunk = ep_choose_write_chunk(fi, ep->prov_name);
    info->send_after_write = (fi->tx_attr->msg_order & FI_ORDER_SAW) != 0 &&
                             (fi->rx_attr->msg_order & FI_ORDER_SAW) != 0;
    /* libfabric 1.17: shm hands back remote-write completions with a non-NULL op_context on
     * some paths, which this layer cannot tell from its own operations; tcp under ofi_rxm
     * crashes closing a connection that holds a write with immediate data half received (the
     * NULL context tcp reports for it reaches rxm_handle_comp_error), which a peer that dies
     * or leaves mid-write leaves behind. Plain writes are internal to tcp, never reported. */
    info->write_imm_ok =
        !ep_core_name_is(ep->prov_name, "shm") &&
        !(ep_core_name_is(ep->prov_name, "tcp") && strstr(ep->prov_name, "ofi_rxm"));
}

static sdd_err open_cq(sdd_ep *ep)
{
    struct fi_cq_attr attr = {
        .size = ep->opts.tx_depth + ep->opts.rx_depth,
        .format = FI_CQ_FORMAT_DATA,
        .wait_obj = FI_WAIT_FD,
    };
    /* Pure spinning never sleeps, so it skips the fd (and the signalling it costs per
     * completion on some providers). Providers without fd support fall back to timed polls. */
    int rc = -FI_ENOSYS;
    if (ep->opts.wait_mode != SDD_WAIT_SPIN) {
        rc = fi_cq_open(ep->domain, &attr, &ep->cq, NULL);
    }
    if (rc == 0) {
        rc = fi_control(&ep->cq->fid, FI_GETWAIT, &ep->cq_fd);
        if (rc != 0) {
            fi_close(&ep->cq->fid);
            ep->cq_fd = -1;
        }
    }
    if (rc != 0) {
        attr.wait_obj = FI_WAIT_NONE;
        rc = fi_cq_open(ep->domain, &attr, &ep->cq, NULL);
        ep->cq_fd = -1;
    }
    if (rc != 0) {
        SDD_ERROR("fabric", "fi_cq_open: %s (%d)", fi_lib_strerror(-rc), rc);
        return ep_err_from_fi(rc);
    }
    ep->info.wait_fd = ep->cq_fd >= 0;
    return SDD_OK;
}

static sdd_err open_fds(sdd_ep *ep)
{
    ep->epfd = epoll_create1(EPOLL_CLOEXEC);
    ep->peer_epfd = epoll_create1(EPOLL_CLOEXEC);
    if (ep->epfd < 0 || ep->peer_epfd < 0) {
        SDD_ERROR("fabric", "epoll_create1: %s", strerror(errno));
        return sdd_err_from_errno(errno);
    }
    struct epoll_event ev = {.events = EPOLLIN};
    if (epoll_ctl(ep->epfd, EPOLL_CTL_ADD, ep->peer_epfd, &ev) != 0 ||
        (ep->cq_fd >= 0 && epoll_ctl(ep->epfd, EPOLL_CTL_ADD, ep->cq_fd, &ev) != 0)) {
        SDD_ERROR("fabric", "epoll_ctl: %s", strerror(errno));
        return sdd_err_from_errno(errno);
    }
    return SDD_OK;
}

static sdd_err alloc_tables(sdd_ep *ep)
{
    ep->nops = ep->opts.tx_depth + ep->opts.rx_depth;
    ep->ops = calloc(ep->nops, sizeof(*ep->ops));
    ep->peers = calloc(EP_MAX_PEERS, sizeof(*ep->peers));
    if (ep->ops == NULL || ep->peers == NULL) {
        return SDD_ENOMEM;
    }
    for (uint32_t i = 0; i < ep->nops; i++) {
        ep->ops[i].next_free = i + 1 < ep->nops ? i + 1 : UINT32_MAX;
    }
    ep->free_head = 0;
    /* Every op, every injected send and every peer loss yields at most one local entry. */
    return cqe_fifo_init(&ep->local, 2 * ep->nops + EP_MAX_PEERS);
}

static sdd_err open_objects(sdd_ep *ep)
{
    struct fi_info *fi = ep->fi;
    int rc = fi_lib_fabric(fi->fabric_attr, &ep->fabric);
    const char *what = "fi_fabric";
    if (rc == 0) {
        what = "fi_domain";
        rc = fi_domain(ep->fabric, fi, &ep->domain, NULL);
    }
    if (rc == 0) {
        sdd_err e = open_cq(ep);
        if (e != SDD_OK) {
            return e;
        }
        struct fi_av_attr av_attr = {.type = FI_AV_TABLE};
        what = "fi_av_open";
        rc = fi_av_open(ep->domain, &av_attr, &ep->av, NULL);
    }
    if (rc == 0) {
        if (ep_core_name_is(fi->fabric_attr->prov_name, "shm")) {
            ep_shm_remove_stale();
        }
        what = "fi_endpoint";
        rc = fi_endpoint(ep->domain, fi, &ep->fid, NULL);
    }
    if (rc == 0) {
        what = "fi_ep_bind(av)";
        rc = fi_ep_bind(ep->fid, &ep->av->fid, 0);
    }
    if (rc == 0) {
        what = "fi_ep_bind(cq)";
        rc = fi_ep_bind(ep->fid, &ep->cq->fid, FI_TRANSMIT | FI_RECV);
    }
    if (rc == 0) {
        what = "fi_enable";
        rc = fi_enable(ep->fid);
    }
    if (rc != 0) {
        SDD_ERROR("fabric", "%s on %s: %s (%d)", what, fi->fabric_attr->prov_name,
                  fi_lib_strerror(-rc), rc);
        return ep_err_from_fi(rc);
    }
    if (ep_core_name_is(fi->fabric_attr->prov_name, "shm")) {
        ep_shm_note_region(ep);
    }
    return SDD_OK;
}

sdd_err sdd_ep_open(const struct sdd_ep_opts *opts, sdd_ep **out)
{
    sdd_ep *ep = calloc(1, sizeof(*ep));
    if (ep == NULL) {
        return SDD_ENOMEM;
    }
    if (opts != NULL) {
        ep->opts = *opts;
    } else {
        sdd_ep_opts_default(&ep->opts);
    }
    if (ep->opts.tx_depth == 0 || ep->opts.rx_depth == 0 || ep->opts.tx_depth > (1u << 20) ||
        ep->opts.rx_depth > (1u << 20)) {
        free(ep);
        return SDD_EINVAL;
    }
    ep->cq_fd = ep->epfd = ep->peer_epfd = -1;
    bool source = false;
    sdd_err err = get_info(&ep->opts, &ep->fi, &source);
    if (err == SDD_OK) {
        /* The provider's answer is its maximum: ask for what the caller wants within it. */
        if (ep->fi->tx_attr->size != 0 && ep->opts.tx_depth > ep->fi->tx_attr->size) {
            ep->opts.tx_depth = (uint32_t)ep->fi->tx_attr->size;
        }
        if (ep->fi->rx_attr->size != 0 && ep->opts.rx_depth > ep->fi->rx_attr->size) {
            ep->opts.rx_depth = (uint32_t)ep->fi->rx_attr->size;
        }
        ep->fi->tx_attr->size = ep->opts.tx_depth;
        ep->fi->rx_attr->size = ep->opts.rx_depth;
        fill_info(ep, source);
        err = alloc_tables(ep);
    }
    if (err == SDD_OK) {
        err = open_objects(ep);
    }
    if (err == SDD_OK) {
        err = open_fds(ep);
    }
    if (err != SDD_OK) {
        sdd_ep_close(ep);
        return err;
    }
    ep->next_key = 1;
    SDD_INFO("fabric", "opened %s on %s/%s (mr_mode virt=%d provkey=%d local=%d ep=%d, wait fd %d)",
             ep->info.provider, ep->info.fabric, ep->info.domain, ep->info.mr_virt_addr,
             ep->info.mr_prov_key, ep->info.mr_local, ep->info.mr_endpoint, ep->info.wait_fd);
    *out = ep;
    return SDD_OK;
}

static void close_fid(struct fid *fid, const char *what)
{
    if (fid == NULL) {
        return;
    }
    int rc = fi_close(fid);
    if (rc != 0) {
        SDD_WARN("fabric", "fi_close(%s): %s (%d)", what, fi_lib_strerror(-rc), rc);
    }
}

void sdd_ep_close(sdd_ep *ep)
{
    if (ep == NULL) {
        return;
    }
    ep_close_all_listeners(ep);
    if (ep->cq != NULL && ep->npeers > 0) {
        ep_flush(ep, NULL, false); /* let queued messages leave before the goodbyes */
    }
    ep_close_all_peers(ep);
    /* The endpoint goes before the regions and queues it references. */
    close_fid(ep->fid ? &ep->fid->fid : NULL, "ep");
    ep_close_all_mrs(ep);
    close_fid(ep->av ? &ep->av->fid : NULL, "av");
    close_fid(ep->cq ? &ep->cq->fid : NULL, "cq");
    close_fid(ep->domain ? &ep->domain->fid : NULL, "domain");
    close_fid(ep->fabric ? &ep->fabric->fid : NULL, "fabric");
    if (ep->epfd >= 0) {
        close(ep->epfd);
    }
    if (ep->peer_epfd >= 0) {
        close(ep->peer_epfd);
    }
    fi_lib_freeinfo(ep->fi);
    cqe_fifo_fini(&ep->local);
    free(ep->ops);
    free(ep->peers);
    free(ep);
}

const struct sdd_ep_info *sdd_ep_info(const sdd_ep *ep)
{
    return &ep->info;
}

void sdd_ep_stats(const sdd_ep *ep, struct sdd_ep_stats *out)
{
    *out = ep->stats;
}

const char *sdd_cqe_kind_name(sdd_cqe_kind kind)
{
    static const char *const names[] = {"?",    "send",         "recv",     "write",
                                        "read", "remote_write", "peer_down"};
    return (unsigned)kind < sizeof(names) / sizeof(names[0]) ? names[kind] : "?";
}
