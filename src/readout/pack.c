/* NA62-like multi-event packets are not frames: each datagram is a packet of whole events from
 * one readout board. As in NaNet's receive buffers, they are packed back to back into the
 * current slot, which goes to the consumer (an event finder) when the next packet might not
 * fit, or when the stream idles. Loss, duplicates and reordering are told from each board's
 * sequence numbers over a window of the 64 latest; a board's end-of-burst packet takes a
 * sequence number too, so packets lost before it are counted at once, and says how many the
 * burst had, so those lost before the first one received are counted as well. End-of-burst
 * packets are not packed. Receiver thread only. */
#include <stdlib.h>
#include <string.h>

#include "readout/rx_internal.h"
#include "sddaq/clock.h"

#define WINDOW 64u

sdd_err ro_pack_init(sdd_ro_rx *rx)
{
    rx->boards = calloc(RO_BOARDS, sizeof(*rx->boards));
    return rx->boards != NULL ? SDD_OK : SDD_ENOMEM;
}

void ro_pack_fini(sdd_ro_rx *rx)
{
    free(rx->boards);
}

static void board_start(struct ro_board *b, uint32_t seq)
{
    *b = (struct ro_board){.next = seq + 1, .known = 1, .seen = 1, .first = seq, .started = true};
}

/* Account one valid packet of board b; true when it is new data to keep. */
static bool board_accept(sdd_ro_rx *rx, struct ro_board *b, uint32_t seq)
{
    if (!b->started) {
        board_start(b, seq);
        return true;
    }
    uint32_t ahead = seq - b->next; /* sequence numbers wrap at 2^32 */
    if (ahead < 0x80000000u) {
        if (ahead > rx->o.resync_frames) { /* the board restarted or jumped */
            rx->c.resyncs++;
            board_start(b, seq);
            return true;
        }
        /* Packets next .. seq - 1 are missing (counted lost until they turn up). */
        rx->c.lost += ahead;
        uint32_t shift = ahead + 1;
        b->known = shift >= WINDOW ? ~0ull : (b->known << shift) | ((1ull << shift) - 1);
        b->seen = shift >= WINDOW ? 1 : (b->seen << shift) | 1;
        b->next = seq + 1;
        return true;
    }
    uint32_t back = b->next - 1 - seq;
    if (back >= WINDOW) {
        if (back > rx->o.resync_frames) {
            rx->c.resyncs++;
            board_start(b, seq);
            return true;
        }
        rx->c.late++;
        return false;
    }
    uint64_t bit = 1ull << back;
    if (b->seen & bit) {
        rx->c.duplicate++;
        return false;
    }
    if (b->known & bit) {
        rx->c.lost--; /* it was counted missing */
    }
    b->known |= bit;
    b->seen |= bit;
    rx->c.reordered++;
    return true;
}

/* A board's end of burst (sequence number seq, its packets data packets before it). In its
 * first burst since the receiver started, the ones before the first received are lost. */
static void end_of_burst(sdd_ro_rx *rx, struct ro_board *b, uint32_t seq, uint32_t packets)
{
    rx->c.end_of_burst++;
    if (!b->eob_seen) {
        b->eob_seen = true;
        uint32_t head = b->first - (seq - packets); /* wraps like the sequence numbers */
        if (head <= packets && head <= rx->o.resync_frames) {
            rx->c.lost += head;
        }
    }
}

static void deliver(sdd_ro_rx *rx, uint64_t now)
{
    struct ro_slot *s = rx->pack_slot;
    size_t bytes = ((size_t)rx->pack_count + 7) / 8;
    memset(s->bitmap, 0xFF, bytes);
    if (rx->pack_count % 8 != 0) {
        s->bitmap[bytes - 1] = (uint8_t)((1u << (rx->pack_count % 8)) - 1);
    }
    s->f.bytes = rx->pack_fill;
    s->f.frame_id = rx->pack_buffers++;
    s->f.stream_id = 0;
    s->f.received = rx->pack_count;
    s->f.flags = SDD_RO_FRAME_COMPLETE;
    s->f.t_ready_ns = now;
    rx->c.frames_complete++;
    ro_slot_deliver(rx, s);
    rx->pack_slot = NULL;
    rx->pack_fill = 0;
    rx->pack_count = 0;
}

void ro_pack_flush(sdd_ro_rx *rx, uint64_t now)
{
    if (rx->pack_slot != NULL && rx->pack_count > 0) {
        deliver(rx, now);
    }
}

void ro_pack_place(sdd_ro_rx *rx, const uint8_t *d, size_t len, uint64_t now)
{
    rx->c.datagrams++;
    rx->c.bytes += len;
    struct sdd_ro_packet p;
    sdd_ro_reason r = sdd_ro_parse(SDD_RO_FMT_NA62, d, len, NULL, &p);
    if (r != SDD_RO_OK) {
        rx->c.corrupt++;
        rx->c.corrupt_by[r]++;
        return;
    }
    rx->last_packet_ns = now;
    rx->any = true;
    struct ro_board *b = &rx->boards[p.stream_id];
    bool was_open = b->started && !b->ended;
    if (!board_accept(rx, b, (uint32_t)p.frame_id)) {
        return;
    }
    if (b->next == (uint32_t)p.frame_id + 1) { /* its newest: a burst opens or ends */
        b->ended = (p.flags & SDD_RO_FLAG_NA62_EOB) != 0;
        rx->c.open_bursts += !b->ended && !was_open;
        rx->c.open_bursts -= b->ended && was_open;
    }
    if (p.flags & SDD_RO_FLAG_NA62_EOB) {
        end_of_burst(rx, b, (uint32_t)p.frame_id, p.packet_id);
        return;
    }
    if (rx->pack_slot != NULL && len > rx->slot_bytes - rx->pack_fill) {
        deliver(rx, now); /* only with slots smaller than a few packets */
    }
    if (rx->pack_slot == NULL) {
        rx->pack_slot = ro_slot_acquire(rx);
        if (rx->pack_slot == NULL) {
            rx->c.overrun++;
            return;
        }
        rx->pack_slot->f.t_first_ns = now;
    }
    memcpy(rx->pack_slot->f.data + rx->pack_fill, d, len);
    rx->pack_fill += len;
    rx->pack_count++;
    rx->c.received++;
    /* Full when the largest packet might not fit, or every packet bit is used. */
    if (rx->slot_bytes - rx->pack_fill < SDD_RO_NA62_MAX || rx->pack_count == rx->ppf) {
        deliver(rx, now);
    }
}
