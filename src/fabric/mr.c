/* Memory registration over every MR mode a provider may ask for: keys chosen by sddaq or by
 * the provider (FI_MR_PROV_KEY), virtual or offset addressing (FI_MR_VIRT_ADDR), regions bound
 * to the endpoint (FI_MR_ENDPOINT), and descriptors for local buffers (FI_MR_LOCAL). */
#include <stdlib.h>

#include <rdma/fi_errno.h>

#include "fabric/ep_internal.h"
#include "sddaq/log.h"

static uint64_t access_flags(unsigned access)
{
    uint64_t flags = 0;
    if (access & SDD_ACCESS_LOCAL) {
        flags |= FI_SEND | FI_RECV | FI_READ | FI_WRITE;
    }
    if (access & SDD_ACCESS_REMOTE_READ) {
        flags |= FI_REMOTE_READ;
    }
    if (access & SDD_ACCESS_REMOTE_WRITE) {
        flags |= FI_REMOTE_WRITE;
    }
    return flags;
}

static sdd_err bind_to_ep(sdd_ep *ep, struct fid_mr *fid)
{
    int rc = fi_mr_bind(fid, &ep->fid->fid, 0);
    if (rc == 0) {
        rc = fi_mr_enable(fid);
    }
    if (rc != 0) {
        SDD_ERROR("fabric", "binding MR to endpoint: %s (%d)", fi_lib_strerror(-rc), rc);
    }
    return ep_err_from_fi(rc);
}

sdd_err sdd_mr_reg(sdd_ep *ep, void *buf, size_t len, unsigned access, sdd_mr **out)
{
    if (ep == NULL || buf == NULL || len == 0 || (access & SDD_ACCESS_ALL) == 0 ||
        (access & ~(unsigned)SDD_ACCESS_ALL) != 0) {
        return SDD_EINVAL;
    }
    sdd_mr *mr = calloc(1, sizeof(*mr));
    if (mr == NULL) {
        return SDD_ENOMEM;
    }
    /* Without FI_MR_PROV_KEY the application picks keys, unique per domain. FI_MR_ENDPOINT
     * regions are bound and enabled after registration. */
    uint64_t requested_key = ep->info.mr_prov_key ? 0 : ep->next_key++;
    int rc =
        fi_mr_reg(ep->domain, buf, len, access_flags(access), 0, requested_key, 0, &mr->fid, NULL);
    if (rc != 0) {
        SDD_ERROR("fabric", "fi_mr_reg(%zu bytes): %s (%d)", len, fi_lib_strerror(-rc), rc);
        free(mr);
        return ep_err_from_fi(rc);
    }
    if (ep->info.mr_endpoint) {
        sdd_err err = bind_to_ep(ep, mr->fid);
        if (err != SDD_OK) {
            fi_close(&mr->fid->fid);
            free(mr);
            return err;
        }
    }
    mr->ep = ep;
    mr->addr = buf;
    mr->len = len;
    mr->desc = fi_mr_desc(mr->fid);
    mr->rkey.key = fi_mr_key(mr->fid);
    mr->rkey.addr = ep->info.mr_virt_addr ? (uint64_t)(uintptr_t)buf : 0;
    mr->rkey.len = len;
    mr->next = ep->mrs;
    ep->mrs = mr;
    *out = mr;
    return SDD_OK;
}

static void unlink_mr(sdd_ep *ep, sdd_mr *mr)
{
    for (sdd_mr **p = &ep->mrs; *p != NULL; p = &(*p)->next) {
        if (*p == mr) {
            *p = mr->next;
            return;
        }
    }
}

static void destroy_mr(sdd_mr *mr)
{
    int rc = fi_close(&mr->fid->fid);
    if (rc != 0) {
        SDD_WARN("fabric", "fi_close(mr): %s (%d)", fi_lib_strerror(-rc), rc);
    }
    free(mr);
}

void sdd_mr_close(sdd_mr *mr)
{
    if (mr == NULL) {
        return;
    }
    unlink_mr(mr->ep, mr);
    destroy_mr(mr);
}

void ep_close_all_mrs(sdd_ep *ep)
{
    while (ep->mrs != NULL) {
        sdd_mr *mr = ep->mrs;
        ep->mrs = mr->next;
        destroy_mr(mr);
    }
}

void sdd_mr_rkey(const sdd_mr *mr, struct sdd_rkey *out)
{
    *out = mr->rkey;
}

void *sdd_mr_addr(const sdd_mr *mr)
{
    return mr->addr;
}

size_t sdd_mr_len(const sdd_mr *mr)
{
    return mr->len;
}
