/* RICH packet builder and the packing of whole events into per-board packets (what the
 * readout boards send; docs/formats.md "RICH packet"). */
#include <stdlib.h>

#include "trigger/rich_impl.h"

sdd_err sdd_rich_pkt_begin(sdd_rich_pkt_builder *b, void *buf, size_t cap, uint8_t board,
                           uint32_t seq, uint32_t burst_id)
{
    if (b == NULL || buf == NULL || cap < SDD_RICH_PKT_HEADER) {
        return SDD_EINVAL;
    }
    b->buf = buf;
    b->cap = cap < SDD_RICH_PKT_MAX ? cap : SDD_RICH_PKT_MAX;
    b->len = SDD_RICH_PKT_HEADER;
    b->nevents = 0;
    b->board = board;
    uint8_t *h = b->buf;
    rich_st32(h, SDD_RICH_PKT_MAGIC);
    h[4] = SDD_RICH_PKT_VERSION;
    h[5] = board;
    rich_st16(h + 6, 0);
    rich_st32(h + 8, SDD_RICH_PKT_HEADER);
    rich_st32(h + 12, seq);
    rich_st32(h + 16, burst_id);
    rich_st32(h + 20, 0);
    return SDD_OK;
}

sdd_err sdd_rich_pkt_add(sdd_rich_pkt_builder *b, uint32_t timestamp, uint8_t fine,
                         const uint16_t *hits, size_t n)
{
    if (n > SDD_RICH_MAX_HITS || timestamp >= (1u << 31) || b->nevents == UINT16_MAX) {
        return SDD_EINVAL;
    }
    size_t bytes = sdd_rich_evt_bytes(n);
    if (bytes > b->cap - b->len) {
        return SDD_ETOOBIG;
    }
    uint8_t *e = b->buf + b->len;
    rich_st32(e, SDD_RICH_EVT_SIGNATURE);
    rich_st32(e + 4, timestamp);
    e[8] = fine;
    e[9] = b->board;
    rich_st16(e + 10, (uint16_t)n);
    rich_st32(e + 12, (uint32_t)bytes);
    for (size_t i = 0; i < n; i++) {
        rich_st16(e + SDD_RICH_EVT_HEADER + 2 * i, hits[i]);
    }
    if (n & 1) {
        rich_st16(e + SDD_RICH_EVT_HEADER + 2 * n, 0); /* padding is zero */
    }
    if (b->nevents == 0) {
        rich_st32(b->buf + 20, timestamp);
    }
    b->len += bytes;
    b->nevents++;
    return SDD_OK;
}

size_t sdd_rich_pkt_end(sdd_rich_pkt_builder *b)
{
    rich_st16(b->buf + 6, b->nevents);
    rich_st32(b->buf + 8, (uint32_t)b->len);
    return b->len;
}

size_t sdd_rich_pkt_eob(void *buf, size_t cap, uint8_t board, uint32_t seq, uint32_t burst_id,
                        uint32_t packets)
{
    sdd_rich_pkt_builder b;
    if (cap < SDD_RICH_EOB_BYTES ||
        sdd_rich_pkt_begin(&b, buf, cap, board, seq, burst_id) != SDD_OK) {
        return 0;
    }
    rich_st32(b.buf + SDD_RICH_PKT_HEADER, SDD_RICH_EOB_MAGIC);
    rich_st32(b.buf + SDD_RICH_PKT_HEADER + 4, packets);
    b.len = SDD_RICH_EOB_BYTES;
    return sdd_rich_pkt_end(&b);
}

/* One board's open packet while packing. */
struct board_out {
    uint8_t pkt[SDD_RICH_PKT_MAX];
    sdd_rich_pkt_builder b;
    bool open;
};

static int64_t flush(struct board_out *o, uint8_t *buf, size_t cap, size_t *pos)
{
    if (!o->open || o->b.nevents == 0) {
        return 0;
    }
    size_t len = sdd_rich_pkt_end(&o->b);
    if (len > cap - *pos) {
        return SDD_ETOOBIG;
    }
    memcpy(buf + *pos, o->pkt, len);
    *pos += len;
    o->open = false;
    return 0;
}

int64_t sdd_rich_pack(const sdd_rich_pmtab *t, const sdd_rich_event *evs, size_t n, size_t pkt_max,
                      void *buf, size_t cap, uint32_t *seq)
{
    unsigned nb = sdd_rich_geom_nboards(&t->geom);
    struct board_out *out = calloc(nb, sizeof(*out));
    if (out == NULL) {
        return SDD_ENOMEM;
    }
    if (pkt_max > SDD_RICH_PKT_MAX) {
        pkt_max = SDD_RICH_PKT_MAX;
    }
    uint32_t local_seq[SDD_RICH_MAX_BOARDS] = {0};
    uint32_t *sq = seq != NULL ? seq : local_seq;
    size_t pos = 0;
    int64_t rc = 0;
    for (size_t e = 0; e < n && rc == 0; e++) {
        uint16_t part[SDD_RICH_MAX_BOARDS][SDD_RICH_MAX_HITS];
        size_t np[SDD_RICH_MAX_BOARDS] = {0};
        for (unsigned i = 0; i < evs[e].nhits && i < SDD_RICH_MAX_HITS; i++) {
            int b = sdd_rich_pmtab_board(t, SDD_RICH_HIT_CHANNEL(evs[e].hits[i]));
            if (b >= 0 && (unsigned)b < nb) {
                part[b][np[b]++] = evs[e].hits[i];
            }
        }
        /* Boards in turn: a full packet goes out before the event starts a new one, so the
         * buffer interleaves the boards' packets roughly as a switch would deliver them. */
        for (unsigned b = 0; b < nb && rc == 0; b++) {
            if (np[b] == 0) {
                continue;
            }
            struct board_out *o = &out[b];
            for (int attempt = 0; attempt < 2; attempt++) {
                if (!o->open) {
                    sdd_rich_pkt_begin(&o->b, o->pkt, pkt_max, (uint8_t)b, sq[b]++, 0);
                    o->open = true;
                }
                sdd_err err =
                    sdd_rich_pkt_add(&o->b, evs[e].timestamp, evs[e].fine, part[b], np[b]);
                if (err == SDD_OK) {
                    break;
                }
                if (err != SDD_ETOOBIG || attempt == 1 || o->b.nevents == 0) {
                    rc = err;
                    break;
                }
                rc = flush(o, buf, cap, &pos);
                if (rc != 0) {
                    break;
                }
            }
        }
    }
    for (unsigned b = 0; b < nb && rc == 0; b++) {
        rc = flush(&out[b], buf, cap, &pos);
    }
    free(out);
    return rc != 0 ? rc : (int64_t)pos;
}
