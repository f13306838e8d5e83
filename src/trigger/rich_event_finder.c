/* RICH event finder: walks a receive buffer of back-to-back multi-event packets and indexes
 * every valid event (offset, timestamp, hit count, board). The buffer is untrusted: each
 * length is checked against what remains before anything behind it is read, every malformed
 * packet or event is counted under one reason and skipped, and after a broken length the
 * walk resynchronises on the next magic or signature word (4-byte steps), as the seed's
 * signature search does. */
#include <stdlib.h>

#include "trigger/rich_impl.h"

sdd_err sdd_rich_index_init(sdd_rich_index *idx, uint32_t cap)
{
    memset(idx, 0, sizeof(*idx));
    idx->offset = calloc(cap ? cap : 1, sizeof(uint32_t));
    idx->timestamp = calloc(cap ? cap : 1, sizeof(uint32_t));
    idx->burst = calloc(cap ? cap : 1, sizeof(uint32_t));
    idx->order = calloc(cap ? cap : 1, sizeof(uint32_t));
    idx->nhits = calloc(cap ? cap : 1, 1);
    idx->board = calloc(cap ? cap : 1, 1);
    if (!idx->offset || !idx->timestamp || !idx->burst || !idx->order || !idx->nhits ||
        !idx->board) {
        sdd_rich_index_fini(idx);
        return SDD_ENOMEM;
    }
    idx->cap = cap;
    return SDD_OK;
}

void sdd_rich_index_fini(sdd_rich_index *idx)
{
    if (idx == NULL) {
        return;
    }
    free(idx->offset);
    free(idx->timestamp);
    free(idx->burst);
    free(idx->order);
    free(idx->nhits);
    free(idx->board);
    memset(idx, 0, sizeof(*idx));
}

/* The next 4-aligned offset in [from, end) holding word w, or end. */
static size_t scan_for(const uint8_t *p, size_t from, size_t end, uint32_t w)
{
    size_t q = from;
    while (q + 4 <= end && rich_ld32(p + q) != w) {
        q += 4;
    }
    return q + 4 <= end ? q : end;
}

/* All hits on PMs of this board? Without a table every channel passes. */
static bool channels_ok(const uint8_t *hits, unsigned n, const sdd_rich_pmtab *t, unsigned board)
{
    if (t == NULL) {
        return true;
    }
    bool ok = true;
    for (unsigned i = 0; i < n; i++) {
        ok &= (unsigned)t->board[SDD_RICH_HIT_CHANNEL(rich_ld16(hits + 2 * i))] == board;
    }
    return ok;
}

/* The events of one packet, [q, end) after its header. Returns the events indexed; *bad
 * says whether any event was malformed. */
static uint32_t packet_events(const uint8_t *p, size_t q, size_t end, unsigned board,
                              uint32_t burst, const sdd_rich_pmtab *t, sdd_rich_index *idx,
                              sdd_rich_ef_stats *st, bool *bad)
{
    uint32_t found = 0;
    while (q < end) {
        if (end - q < SDD_RICH_EVT_HEADER) {
            st->bad_evt_length++;
            st->skipped_bytes += end - q;
            *bad = true;
            break;
        }
        const uint8_t *e = p + q;
        if (rich_ld32(e) != SDD_RICH_EVT_SIGNATURE) {
            st->bad_signature++;
            *bad = true;
            size_t next = scan_for(p, q + 4, end, SDD_RICH_EVT_SIGNATURE);
            st->skipped_bytes += next - q;
            q = next;
            continue;
        }
        uint32_t ts = rich_ld32(e + 4);
        unsigned src = e[9];
        unsigned nh = rich_ld16(e + 10);
        uint32_t len = rich_ld32(e + 12);
        bool len_ok = len == sdd_rich_evt_bytes(nh) && len <= end - q;
        if (!len_ok) {
            /* A length we cannot trust: its event's end is unknown, look for the next one. */
            if (nh > SDD_RICH_MAX_HITS) {
                st->too_many_hits++;
            } else {
                st->bad_evt_length++;
            }
            *bad = true;
            size_t next = scan_for(p, q + 4, end, SDD_RICH_EVT_SIGNATURE);
            st->skipped_bytes += next - q;
            q = next;
            continue;
        }
        if (nh > SDD_RICH_MAX_HITS) {
            st->too_many_hits++;
            *bad = true;
        } else if (src != board) {
            st->bad_board++;
            *bad = true;
        } else if (ts >= (1u << 31)) {
            st->bad_timestamp++;
            *bad = true;
        } else if (!channels_ok(e + SDD_RICH_EVT_HEADER, nh, t, board)) {
            st->bad_channel++;
            *bad = true;
        } else if (idx->n == idx->cap) {
            st->index_full++;
        } else {
            uint32_t k = idx->n++;
            idx->offset[k] = (uint32_t)q;
            idx->timestamp[k] = ts;
            idx->burst[k] = burst;
            idx->nhits[k] = (uint8_t)nh;
            idx->board[k] = (uint8_t)board;
            st->events++;
            st->hits += nh;
            found++;
        }
        q += len;
    }
    return found;
}

uint32_t sdd_rich_find_events(const void *buf, size_t len, const sdd_rich_pmtab *t,
                              sdd_rich_index *idx, sdd_rich_ef_stats *st)
{
    idx->n = 0;
    return rich_find_events_from(buf, 0, len, t, idx, st);
}

/* The walk over the packets of buf from pos (where a walk from 0 would pass), indexing their
 * events into idx. Without idx it only steps from packet to packet and returns the first
 * position at or past stop that a whole packet ends at: a walk from there is the rest of the
 * walk from 0, since every step before it stayed a header's length or more clear of it. */
static size_t walk(const uint8_t *p, size_t pos, size_t len, const sdd_rich_pmtab *t,
                   sdd_rich_index *idx, sdd_rich_ef_stats *st, size_t stop)
{
    unsigned nboards = t != NULL ? sdd_rich_geom_nboards(&t->geom) : SDD_RICH_MAX_BOARDS;
    if (len > UINT32_MAX) {
        len = UINT32_MAX & ~(size_t)3; /* offsets are 32-bit; the rest is not looked at */
    }
    while (pos < len) {
        if (len - pos < SDD_RICH_PKT_HEADER) {
            if (len - pos >= 4 && rich_ld32(p + pos) == SDD_RICH_PKT_MAGIC) {
                st->truncated++;
            } else {
                st->bad_magic++;
            }
            st->skipped_bytes += len - pos;
            break;
        }
        const uint8_t *h = p + pos;
        uint32_t plen = rich_ld32(h + 8);
        uint64_t *why = NULL;
        if (rich_ld32(h) != SDD_RICH_PKT_MAGIC) {
            why = &st->bad_magic;
        } else if (h[4] != SDD_RICH_PKT_VERSION) {
            why = &st->bad_version;
        } else if (h[5] >= nboards) {
            why = &st->bad_board;
        } else if (plen < SDD_RICH_PKT_HEADER || (plen & 3) != 0 || plen > SDD_RICH_PKT_MAX) {
            why = &st->bad_pkt_length;
        }
        if (why != NULL) {
            (*why)++;
            size_t next = scan_for(p, pos + 4, len, SDD_RICH_PKT_MAGIC);
            st->skipped_bytes += next - pos;
            pos = next;
            continue;
        }
        bool cut = plen > len - pos;
        if (!cut && plen == SDD_RICH_EOB_BYTES && rich_ld16(h + 6) == 0 &&
            rich_ld32(h + SDD_RICH_PKT_HEADER) == SDD_RICH_EOB_MAGIC) {
            st->packets++; /* a board's end of burst: no events (the receiver counts it) */
            pos += plen;
            if (pos >= stop) {
                return pos;
            }
            continue;
        }
        size_t end = cut ? len : pos + plen;
        bool bad = cut;
        st->packets++;
        if (idx != NULL) {
            uint32_t found = packet_events(p, pos + SDD_RICH_PKT_HEADER, end, h[5],
                                           rich_ld32(h + 16), t, idx, st, &bad);
            if (!cut && !bad && found != rich_ld16(h + 6) && st->index_full == 0) {
                st->count_mismatch++;
            }
        }
        if (cut) {
            st->truncated++;
        }
        pos = end;
        if (!cut && pos >= stop) {
            return pos;
        }
    }
    return len;
}

uint32_t rich_find_events_from(const void *buf, size_t from, size_t len, const sdd_rich_pmtab *t,
                               sdd_rich_index *idx, sdd_rich_ef_stats *st)
{
    walk(buf, from, len, t, idx, st, SIZE_MAX);
    return idx->n;
}

size_t rich_packet_split(const void *buf, size_t len, const sdd_rich_pmtab *t, size_t near)
{
    sdd_rich_ef_stats scratch = {0};
    return walk(buf, 0, len, t, NULL, &scratch, near);
}
