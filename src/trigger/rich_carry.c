/* RICH carry: the board events one receive buffer leaves to the next. A readout receiver fills
 * buffers with packets as they come, so the boards' packets of one moment can land on both
 * sides of a buffer boundary; the merge holds back every event that a later packet may still
 * add to, and the next buffer's merge takes them up, as if the stream had never been cut.
 * Several threads may process one stream's buffers: each finds its buffer's events alone and
 * waits for its turn (buffer order) only to merge. */
#include <stdatomic.h>
#include <stdlib.h>

#include "sddaq/clock.h"
#include "sddaq/cpu.h"
#include "trigger/rich_impl.h"

#define TURN_HELD    (1ull << 63)   /* set in turn while a thread merges */
#define TURN_WAIT    (SDD_NS_PER_S) /* a buffer that does not come in this long is skipped */
#define QUIET_EVENTS 4096           /* about 64 full packets of the other boards */

struct sdd_rich_carry {
    _Alignas(64) _Atomic uint64_t turn; /* the buffer whose merge goes next */
    uint8_t *bytes[2];  /* held events as copied (header and hits); one is read, one written */
    uint32_t *burst[2]; /* their bursts (packet headers are not kept) */
    unsigned cur;
    size_t cap, used; /* bytes[cur] */
    uint32_t n;       /* events held */
    /* per board: its last event so far, and the events the others sent after it */
    uint64_t last[SDD_RICH_MAX_BOARDS];
    uint64_t since[SDD_RICH_MAX_BOARDS];
};

sdd_err sdd_rich_carry_create(size_t max_bytes, sdd_rich_carry **out)
{
    if (out == NULL || max_bytes == 0 || max_bytes > (1u << 30)) {
        return SDD_EINVAL;
    }
    sdd_rich_carry *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        return SDD_ENOMEM;
    }
    c->cap = max_bytes;
    size_t most = max_bytes / SDD_RICH_EVT_HEADER + 1; /* events that fit */
    for (int i = 0; i < 2; i++) {
        c->bytes[i] = malloc(max_bytes);
        c->burst[i] = malloc(most * sizeof(uint32_t));
    }
    if (!c->bytes[0] || !c->bytes[1] || !c->burst[0] || !c->burst[1]) {
        sdd_rich_carry_destroy(c);
        return SDD_ENOMEM;
    }
    *out = c;
    return SDD_OK;
}

void sdd_rich_carry_destroy(sdd_rich_carry *c)
{
    if (c == NULL) {
        return;
    }
    for (int i = 0; i < 2; i++) {
        free(c->bytes[i]);
        free(c->burst[i]);
    }
    free(c);
}

uint32_t sdd_rich_carry_events(const sdd_rich_carry *c)
{
    return c->n;
}

/* Wait until buffer seq may merge, and hold the turn. False when its turn has passed (a later
 * buffer gave up waiting for it): it merges alone then, holding nothing back. */
bool rich_carry_take(sdd_rich_carry *c, uint64_t seq)
{
    uint64_t give_up = 0;
    for (unsigned spins = 0;; spins++) {
        uint64_t t = atomic_load_explicit(&c->turn, memory_order_acquire);
        if (!(t & TURN_HELD)) {
            if (t > seq) {
                return false;
            }
            if (t == seq &&
                atomic_compare_exchange_weak_explicit(&c->turn, &t, seq | TURN_HELD,
                                                      memory_order_acquire, memory_order_relaxed)) {
                return true;
            }
        }
        if (spins < 1000) {
            sdd_cpu_relax();
            continue;
        }
        uint64_t now = sdd_now_ns();
        give_up = give_up != 0 ? give_up : now + TURN_WAIT;
        if (now >= give_up && !(t & TURN_HELD) && t < seq &&
            atomic_compare_exchange_strong_explicit(&c->turn, &t, seq | TURN_HELD,
                                                    memory_order_acquire, memory_order_relaxed)) {
            return true; /* the buffers before never came (or come late: merged alone) */
        }
        sdd_sleep_ns(20 * SDD_NS_PER_US);
    }
}

/* The turn to buffer seq + 1. */
void rich_carry_give(sdd_rich_carry *c, uint64_t seq)
{
    atomic_store_explicit(&c->turn, seq + 1, memory_order_release);
}

const uint8_t *rich_carry_bytes(const sdd_rich_carry *c)
{
    return c->bytes[c->cur];
}

/* The held events into idx, after the buffer's (the merge takes them first). */
void rich_carry_index(const sdd_rich_carry *c, sdd_rich_index *idx)
{
    const uint8_t *p = c->bytes[c->cur];
    size_t off = 0;
    for (uint32_t i = 0; i < c->n && idx->n < idx->cap; i++) {
        unsigned nh = rich_ld16(p + off + 10);
        uint32_t k = idx->n++;
        idx->offset[k] = (uint32_t)off | RICH_CARRY_BIT;
        idx->timestamp[k] = rich_ld32(p + off + 4);
        idx->burst[k] = c->burst[c->cur][i];
        idx->nhits[k] = (uint8_t)nh;
        idx->board[k] = p[off + 9];
        off += sdd_rich_evt_bytes(nh);
    }
}

/* Keep the index entries held[0..n) (from the buffer buf or the carry) for the next buffer.
 * False when they do not fit: nothing is kept then, and the caller merges them now. */
bool rich_carry_keep(sdd_rich_carry *c, const uint8_t *buf, const sdd_rich_index *idx,
                     const uint32_t *held, uint32_t n)
{
    unsigned next = c->cur ^ 1;
    uint8_t *dst = c->bytes[next];
    size_t used = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t off = idx->offset[held[i]];
        const uint8_t *src =
            off & RICH_CARRY_BIT ? c->bytes[c->cur] + (off & ~RICH_CARRY_BIT) : buf + off;
        size_t len = sdd_rich_evt_bytes(idx->nhits[held[i]]);
        if (used + len > c->cap) {
            return false;
        }
        memcpy(dst + used, src, len);
        c->burst[next][i] = idx->burst[held[i]];
        used += len;
    }
    c->cur = next;
    c->used = used;
    c->n = n;
    return true;
}

/* The earliest time a later buffer's event may have, from this buffer's events idx (before the
 * held ones are added). Every board sends in time order, so none is older than the last event
 * its board sent, in this buffer or before (at the start, before its first: time 0), unless it
 * went quiet: a board the others have sent QUIET_EVENTS events past must not hold the stream
 * back (its next packet may still come: it then adds a part of its own). */
uint64_t rich_carry_horizon(sdd_rich_carry *c, const sdd_rich_index *idx, unsigned nboards)
{
    uint32_t last_at[SDD_RICH_MAX_BOARDS];
    bool sent[SDD_RICH_MAX_BOARDS] = {false};
    for (uint32_t k = 0; k < idx->n; k++) {
        unsigned b = idx->board[k] & (SDD_RICH_MAX_BOARDS - 1);
        c->last[b] = rich_when(idx, k); /* arrival order: the last one wins */
        last_at[b] = k;
        sent[b] = true;
    }
    uint64_t h = UINT64_MAX;
    for (unsigned b = 0; b < nboards && b < SDD_RICH_MAX_BOARDS; b++) {
        c->since[b] = sent[b] ? idx->n - 1 - last_at[b] : c->since[b] + idx->n;
        if (c->since[b] <= QUIET_EVENTS && c->last[b] < h) {
            h = c->last[b];
        }
    }
    return h;
}

/* Nothing held any more (all merged). */
void rich_carry_clear(sdd_rich_carry *c)
{
    c->n = 0;
    c->used = 0;
}
