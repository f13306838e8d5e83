/* RICH merge: fuses the events of the boards that fall in one timestamp window into
 * whole-detector events (REFERENCE §5.4). Each board's events arrive in time order, so this is
 * a k-way merge (k <= 4) over per-board lists built by a counting sort of the index; repeated
 * channels are dropped with a per-channel generation stamp, so nothing is cleared per event. */
#include <stdatomic.h>
#include <stdlib.h>

#include "trigger/rich_impl.h"

sdd_err sdd_rich_batch_init(sdd_rich_batch *b, uint32_t cap)
{
    memset(b, 0, sizeof(*b));
    size_t c = cap ? cap : 1;
    b->timestamp = calloc(c, sizeof(uint32_t));
    b->first = calloc(c, sizeof(uint32_t));
    b->nhits = calloc(c, 1);
    b->boards = calloc(c, 1);
    b->hits = calloc(c * SDD_RICH_MAX_HITS, sizeof(uint16_t));
    b->seen = calloc(SDD_RICH_CHANNELS, sizeof(uint32_t));
    if (!b->timestamp || !b->first || !b->nhits || !b->boards || !b->hits || !b->seen) {
        sdd_rich_batch_fini(b);
        return SDD_ENOMEM;
    }
    b->cap = cap;
    return SDD_OK;
}

void sdd_rich_batch_fini(sdd_rich_batch *b)
{
    if (b == NULL) {
        return;
    }
    free(b->timestamp);
    free(b->first);
    free(b->nhits);
    free(b->boards);
    free(b->hits);
    free(b->seen);
    memset(b, 0, sizeof(*b));
}

/* Event k's header: in the buffer, or held back in the carry. */
static const uint8_t *event_at(const struct rich_merge_in *in, const sdd_rich_index *idx,
                               uint32_t k)
{
    uint32_t off = idx->offset[k];
    return off & RICH_CARRY_BIT ? in->carry + (off & ~RICH_CARRY_BIT) : in->buf + off;
}

/* Append the nh hits of the board event at e_hdr after the n hits already in dst; drops
 * repeats (channels stamped gen in seen) and what passes 64, counted in *dups and *over.
 * Returns the new count. */
static inline unsigned append_hits(const uint8_t *e_hdr, unsigned nh, uint16_t *restrict dst,
                                   unsigned n, uint32_t *restrict seen, uint32_t gen,
                                   uint64_t *dups, uint64_t *over)
{
    const uint8_t *h = e_hdr + SDD_RICH_EVT_HEADER;
    for (unsigned i = 0; i < nh; i++) {
        unsigned ch = SDD_RICH_HIT_CHANNEL(rich_ld16(h + 2 * i));
        if (seen[ch] == gen) {
            (*dups)++;
        } else if (n == SDD_RICH_MAX_HITS) {
            (*over)++;
        } else {
            seen[ch] = gen;
            dst[n++] = (uint16_t)ch;
        }
    }
    return n;
}

uint32_t rich_merge_publish(const struct rich_merge_in *in, const sdd_rich_index *idx,
                            sdd_rich_batch *out, sdd_rich_merge_stats *st, _Atomic uint32_t *merged,
                            uint32_t *held, uint32_t *nheld)
{
    uint32_t count[SDD_RICH_MAX_BOARDS + 1] = {0};
    uint32_t head[SDD_RICH_MAX_BOARDS], end[SDD_RICH_MAX_BOARDS];
    const uint32_t window = in->window;
    if (!in->append) {
        out->n = 0;
    }
    /* Counting sort by board, stable, so each list keeps the arrival order, with held events
     * ahead of the buffer's. */
    for (uint32_t k = 0; k < idx->n; k++) {
        count[(idx->board[k] & (SDD_RICH_MAX_BOARDS - 1)) + 1]++;
    }
    for (unsigned b = 0; b < SDD_RICH_MAX_BOARDS; b++) {
        count[b + 1] += count[b];
        head[b] = count[b];
        end[b] = count[b + 1];
    }
    for (int pass = in->carry != NULL ? 0 : 1; pass < 2; pass++) {
        uint32_t want = pass == 0 ? RICH_CARRY_BIT : 0; /* held events first */
        for (uint32_t k = 0; k < idx->n; k++) {
            if (in->carry == NULL || (idx->offset[k] & RICH_CARRY_BIT) == want) {
                idx->order[count[idx->board[k] & (SDD_RICH_MAX_BOARDS - 1)]++] = k;
            }
        }
    }
    const uint64_t until = in->until;
    uint64_t hk[SDD_RICH_MAX_BOARDS]; /* when each board's head happened; UINT64_MAX: none */
    for (unsigned b = 0; b < SDD_RICH_MAX_BOARDS; b++) {
        hk[b] = head[b] < end[b] ? rich_when(idx, idx->order[head[b]]) : UINT64_MAX;
    }
    uint64_t last_ts[SDD_RICH_MAX_BOARDS] = {0};
    uint64_t unordered = 0, dups = 0, over = 0;
    uint32_t *restrict seen = out->seen;
    uint32_t consumed = 0;
    for (;;) {
        /* The earliest head opens the next event. */
        uint64_t t0 = hk[0];
        for (unsigned b = 1; b < SDD_RICH_MAX_BOARDS; b++) {
            t0 = hk[b] < t0 ? hk[b] : t0;
        }
        /* An event whose window reaches the horizon may still gain board events. */
        if (t0 == UINT64_MAX || t0 + window >= until) {
            break;
        }
        bool keep = out->n < out->cap;
        uint32_t e = out->n;
        /* The event's hits and boards build up in locals and are stored once it closes; events
         * close one after the other, so each one's hits follow the last one's: tight, as the
         * GPU copy takes them. */
        uint16_t *dst = NULL;
        unsigned nhits = 0, boards = 0;
        if (keep) {
            if (++out->gen == 0) { /* after 2^32 events the stamps must start over */
                memset(seen, 0, SDD_RICH_CHANNELS * sizeof(uint32_t));
                out->gen = 1;
            }
            out->timestamp[e] = (uint32_t)t0;
            out->first[e] = e > 0 ? out->first[e - 1] + out->nhits[e - 1] : 0;
            dst = out->hits + out->first[e];
        }
        const uint32_t gen = out->gen;
        unsigned parts = 0;
        for (unsigned b = 0; b < SDD_RICH_MAX_BOARDS; b++) {
            while (hk[b] - t0 <= window) {
                uint32_t k = idx->order[head[b]];
                uint64_t ts = hk[b];
                unordered += ts < last_ts[b]; /* 0 before the board's first event */
                last_ts[b] = ts;
                if (keep) {
                    nhits = append_hits(event_at(in, idx, k), idx->nhits[k], dst, nhits, seen, gen,
                                        &dups, &over);
                    boards |= 1u << (idx->board[k] & 7);
                }
                parts++;
                head[b]++;
                hk[b] = head[b] < end[b] ? rich_when(idx, idx->order[head[b]]) : UINT64_MAX;
            }
        }
        consumed += parts;
        if (keep) {
            out->nhits[e] = (uint8_t)nhits;
            out->boards[e] = (uint8_t)boards;
            out->n++;
            st->out_events++;
            st->fused += parts - 1;
            if (merged != NULL && out->n % RICH_PUBLISH == 0) {
                atomic_store_explicit(merged, out->n, memory_order_release);
            }
        } else {
            st->batch_full += 1;
        }
    }
    st->in_events += consumed; /* held events count once, when merged */
    st->unordered += unordered;
    st->dup_channels += dups;
    st->overflow += over;
    if (nheld != NULL) {
        uint32_t n = 0;
        for (unsigned b = 0; b < SDD_RICH_MAX_BOARDS; b++) {
            for (uint32_t i = head[b]; i < end[b]; i++) {
                held[n++] = idx->order[i];
            }
        }
        *nheld = n;
    }
    if (merged != NULL) {
        atomic_store_explicit(merged, out->n, memory_order_release);
    }
    return out->n;
}

uint32_t sdd_rich_merge(const void *buf, const sdd_rich_index *idx, uint32_t window,
                        sdd_rich_batch *out, sdd_rich_merge_stats *st)
{
    const struct rich_merge_in in = {.buf = buf, .window = window, .until = UINT64_MAX};
    return rich_merge_publish(&in, idx, out, st, NULL, NULL, NULL);
}
