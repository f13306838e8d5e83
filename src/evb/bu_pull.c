/* The pulling builder unit: each RU announces a bulk (CTL_PULL: id, slot, bytes, offset in its
 * registered pool) and the BU reads it into the announced slot itself. The copy then runs on
 * the BU's core, which validates every fragment header right after: over shm (cross-memory
 * attach, where the initiator of an operation does the copy) those header lines are still in
 * its own cache instead of the writer's. A read the endpoint refuses for now (EAGAIN) waits in
 * `want` and goes out from evb_pull_step; so does one whose RU's lease has lapsed (lease.c):
 * that RU may have given this BU up and reused the buffer, so it is read only once the lease
 * is renewed, and never if this BU fences. */
#include <stdlib.h>

#include "evb_internal.h"
#include "sddaq/clock.h"
#include "sddaq/log.h"

#define LOG "evb"

struct evb_pull {
    uint32_t per_ru; /* slots per RU: 2 x credits (<= 64) */
    struct evb_tag *tag;
    uint32_t *len;
    uint64_t *off;
    uint64_t *id;                     /* the bulk announced for the slot */
    uint64_t want[SDD_EVB_MAX_NODES]; /* per RU, bit s: read of slot s not posted yet */
    uint64_t busy[SDD_EVB_MAX_NODES]; /* per RU, bit s: announced, not read yet */
    uint32_t nwant, inflight;
};

sdd_err evb_pull_create(struct sdd_evb_node *n)
{
    if (!n->pull || n->bu == NULL) {
        return SDD_OK;
    }
    struct evb_pull *pl = calloc(1, sizeof(*pl));
    if (pl == NULL) {
        return SDD_ENOMEM;
    }
    n->pl = pl;
    pl->per_ru = 2 * n->o.credits;
    size_t slots = (size_t)n->nru * pl->per_ru;
    pl->tag = calloc(slots, sizeof(*pl->tag));
    pl->len = calloc(slots, sizeof(*pl->len));
    pl->off = calloc(slots, sizeof(*pl->off));
    pl->id = calloc(slots, sizeof(*pl->id));
    if (pl->tag == NULL || pl->len == NULL || pl->off == NULL || pl->id == NULL) {
        return SDD_ENOMEM;
    }
    for (size_t i = 0; i < slots; i++) {
        pl->tag[i] = (struct evb_tag){TAG_PULL, (uint32_t)i};
    }
    return SDD_OK;
}

void evb_pull_destroy(struct sdd_evb_node *n)
{
    struct evb_pull *pl = n->pl;
    if (pl == NULL) {
        return;
    }
    free(pl->tag);
    free(pl->len);
    free(pl->off);
    free(pl->id);
    free(pl);
    n->pl = NULL;
}

static sdd_err post(struct sdd_evb_node *n, uint32_t ru, uint32_t slot)
{
    struct evb_pull *pl = n->pl;
    uint32_t i = ru * pl->per_ru + slot;
    struct evb_peer *p = &n->peers[n->ru_node[ru]];
    return sdd_ep_post_read(n->ep, p->peer, evb_bu_slot(n, ru, slot), pl->len[i], evb_bu_mr(n),
                            &p->pool, pl->off[i], &pl->tag[i]);
}

/* Post slot's read; false when the endpoint has no room now. */
static bool try_post(struct sdd_evb_node *n, uint32_t ru, uint32_t slot)
{
    struct evb_pull *pl = n->pl;
    sdd_err err = post(n, ru, slot);
    if (err == SDD_EAGAIN) {
        return false;
    }
    if (err != SDD_OK) {
        pl->busy[ru] &= ~(1ull << slot);
        evb_peer_dead(n, n->ru_node[ru], sdd_errname(err));
        return true;
    }
    pl->inflight++;
    return true;
}

void evb_pull_on_announce(struct sdd_evb_node *n, uint32_t ru, uint32_t slot, uint32_t len,
                          uint64_t off, uint64_t bulk_id, uint64_t now)
{
    struct evb_pull *pl = n->pl;
    const struct sdd_rkey *pool = ru < n->nru ? &n->peers[n->ru_node[ru]].pool : NULL;
    if (pl == NULL || pool == NULL || n->ru_node[ru] == n->self || slot >= pl->per_ru || len == 0 ||
        len > n->slot_size || off > pool->len || len > pool->len - off ||
        (pl->busy[ru] & (1ull << slot))) {
        if (evb_count_bad(n)) {
            SDD_WARN(LOG, "BU: bad bulk announcement (ru %u slot %u, %u bytes at %llu)", ru, slot,
                     len, (unsigned long long)off);
        }
        return;
    }
    uint32_t i = ru * pl->per_ru + slot;
    pl->len[i] = len;
    pl->off[i] = off;
    pl->id[i] = bulk_id;
    pl->busy[ru] |= 1ull << slot;
    if (pl->nwant > 0 || !evb_lease_from(n, n->ru_node[ru], now) || !try_post(n, ru, slot)) {
        pl->want[ru] |= 1ull << slot; /* keep the order: earlier refusals go first */
        pl->nwant++;
    }
}

void evb_pull_on_done(struct sdd_evb_node *n, uint32_t idx, sdd_err status)
{
    struct evb_pull *pl = n->pl;
    if (pl == NULL || idx >= n->nru * pl->per_ru) {
        return;
    }
    uint32_t ru = idx / pl->per_ru, slot = idx % pl->per_ru;
    pl->inflight--;
    pl->busy[ru] &= ~(1ull << slot);
    const struct sdd_evb_bulk_hdr *h = (const void *)evb_bu_slot(n, ru, slot);
    if (status == SDD_OK && h->bulk_id != pl->id[idx]) {
        /* The RU reused that buffer: it had given this BU up for dead (one that was only
         * stopped and came back reads what the buffer holds now). Never build it here. */
        n->st.bulks_late++;
        SDD_WARN(LOG, "BU: ru %u slot %u held bulk %llu, not the announced %llu: dropped", ru, slot,
                 (unsigned long long)h->bulk_id, (unsigned long long)pl->id[idx]);
    } else if (status == SDD_OK) {
        evb_bu_on_write(n, ru, slot, pl->len[idx]);
    } else if (status != SDD_ECANCELED) {
        evb_peer_dead(n, n->ru_node[ru], sdd_errname(status));
    }
}

int evb_pull_step(struct sdd_evb_node *n)
{
    struct evb_pull *pl = n->pl;
    if (pl == NULL || pl->nwant == 0) {
        return 0;
    }
    int work = 0;
    uint64_t now = sdd_now_ns();
    for (uint32_t ru = 0; ru < n->nru; ru++) {
        bool alive = n->peers[n->ru_node[ru]].alive;
        if (alive && !evb_lease_from(n, n->ru_node[ru], now)) {
            continue; /* read once the lease is renewed */
        }
        while (pl->want[ru] != 0) {
            uint32_t slot = (uint32_t)__builtin_ctzll(pl->want[ru]);
            uint64_t bit = 1ull << slot;
            if (!alive) {
                pl->busy[ru] &= ~bit; /* its RU is gone: its events leave incomplete */
            } else if (!try_post(n, ru, slot)) {
                return work;
            }
            pl->want[ru] &= ~bit;
            pl->nwant--;
            work++;
        }
    }
    return work;
}

uint32_t evb_pull_busy(const struct sdd_evb_node *n)
{
    return n->pl != NULL ? n->pl->inflight + n->pl->nwant : 0;
}
