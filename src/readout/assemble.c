/* Frame assembly: packets of a stream are placed by (frame id, packet id) into the slot of
 * their frame; a window of consecutive frames is open at once. A frame closes when its last
 * packet arrives, when a packet of a frame beyond the window pushes it out, on a timeout and on
 * stop; then the missing-packet policy decides its fate. Every packet is accounted for:
 * received, duplicate, late or overrun when it arrives, lost when its frame closes without it.
 * Receiver thread only. */
#include <stdlib.h>
#include <string.h>

#include "core/le.h"
#include "readout/rx_internal.h"
#include "sddaq/clock.h"
#include "sddaq/log.h"

sdd_err ro_asm_init(sdd_ro_rx *rx)
{
    uint32_t n = 1;
    while (n < 2 * rx->o.window) {
        n <<= 1;
    }
    rx->entry_mask = n - 1;
    rx->entries = calloc(n, sizeof(*rx->entries));
    rx->entry_bits = calloc((size_t)n * rx->bit_words, sizeof(uint64_t));
    if (rx->entries == NULL || rx->entry_bits == NULL) {
        return SDD_ENOMEM;
    }
    for (uint32_t i = 0; i < n; i++) {
        rx->entries[i] = (struct ro_entry){.frame = SDD_RO_FRAME_NONE,
                                           .state = ENTRY_EMPTY,
                                           .bits = rx->entry_bits + (size_t)i * rx->bit_words};
    }
    sdd_hist_init(&rx->lat);
    return SDD_OK;
}

void ro_asm_fini(sdd_ro_rx *rx)
{
    free(rx->entry_bits);
    free(rx->entries);
}

static struct ro_entry *entry_of(sdd_ro_rx *rx, uint64_t f)
{
    return &rx->entries[f & rx->entry_mask];
}

static bool is_closed(const struct ro_entry *e, uint64_t f)
{
    return e->state == ENTRY_CLOSED && e->frame == f;
}

static bool is_open(const struct ro_entry *e, uint64_t f)
{
    return e->state == ENTRY_OPEN && e->frame == f;
}

static void entry_open(sdd_ro_rx *rx, struct ro_entry *e, uint64_t f, struct ro_slot *s)
{
    e->frame = f;
    e->state = ENTRY_OPEN;
    e->slot = s;
    e->received = 0;
    e->t_first_ns = 0;
    e->last_send_ns = 0;
    memset(e->bits, 0, rx->bit_words * sizeof(uint64_t));
}

static void count_lost_frames(sdd_ro_rx *rx, uint64_t frames)
{
    rx->c.frames_lost += frames;
    rx->c.lost += frames * rx->ppf;
}

/* Zero the payloads of the packets that did not arrive. */
static void pad_missing(sdd_ro_rx *rx, const struct ro_entry *e, uint8_t *data)
{
    for (uint32_t p = 0; p < rx->ppf; p++) {
        if (!ro_bit(e, p)) {
            memset(data + (size_t)p * rx->payload, 0, rx->payload);
        }
    }
}

static void deliver(sdd_ro_rx *rx, struct ro_entry *e, uint32_t flags, uint64_t now)
{
    struct ro_slot *s = e->slot;
    for (size_t w = 0; w < rx->bit_words; w++) {
        put_le64(s->bitmap + 8 * w, e->bits[w]);
    }
    s->f.frame_id = e->frame;
    s->f.received = e->received;
    s->f.flags = flags;
    s->f.t_first_ns = e->t_first_ns;
    s->f.t_ready_ns = now;
    if ((flags & SDD_RO_FRAME_COMPLETE) && now >= e->last_send_ns) {
        sdd_hist_record(&rx->lat, now - e->last_send_ns);
    }
    ro_slot_deliver(rx, s);
}

/* Close an open frame. upto: the highest frame known to exist; a frame above it that never
 * got a packet was only opened by prediction and is forgotten, not counted lost. */
static void entry_close(sdd_ro_rx *rx, struct ro_entry *e, uint64_t upto, uint64_t now)
{
    if (e->received == 0) {
        if (e->slot != NULL) {
            ro_slot_free(rx, e->slot);
            e->slot = NULL;
        }
        if (e->frame <= upto) {
            count_lost_frames(rx, 1);
            e->state = ENTRY_CLOSED;
        } else {
            e->state = ENTRY_EMPTY;
            e->frame = SDD_RO_FRAME_NONE;
        }
        return;
    }
    uint32_t missing = rx->ppf - e->received;
    rx->c.lost += missing;
    e->state = ENTRY_CLOSED;
    if (e->slot == NULL) {
        rx->c.frames_overrun++;
        return;
    }
    if (missing == 0) {
        rx->c.frames_complete++;
        deliver(rx, e, SDD_RO_FRAME_COMPLETE, now);
    } else if (rx->o.missing == SDD_RO_MISSING_DROP) {
        rx->c.frames_dropped++;
        ro_slot_free(rx, e->slot);
    } else if (rx->o.missing == SDD_RO_MISSING_PAD) {
        rx->c.frames_partial++;
        pad_missing(rx, e, e->slot->f.data);
        deliver(rx, e, SDD_RO_FRAME_PARTIAL | SDD_RO_FRAME_PADDED, now);
    } else {
        rx->c.frames_partial++;
        deliver(rx, e, SDD_RO_FRAME_PARTIAL, now);
    }
    e->slot = NULL;
}

/* Move the window's start to new_lo, closing what falls out. Frames below new_lo that never
 * had an entry are whole lost frames (new_lo is at most the frame of a packet just seen). */
static void advance(sdd_ro_rx *rx, uint64_t new_lo, uint64_t now)
{
    uint64_t w = rx->o.window;
    uint64_t end = new_lo - rx->lo > w ? rx->lo + w : new_lo;
    for (uint64_t f = rx->lo; f < end; f++) {
        struct ro_entry *e = entry_of(rx, f);
        if (is_open(e, f)) {
            entry_close(rx, e, new_lo, now);
        } else if (!is_closed(e, f)) {
            count_lost_frames(rx, 1);
            entry_open(rx, e, f, NULL); /* an empty closed record: its packets are late */
            e->state = ENTRY_CLOSED;
        }
    }
    if (new_lo > end) {
        count_lost_frames(rx, new_lo - end);
    }
    rx->lo = new_lo;
}

void ro_asm_flush(sdd_ro_rx *rx, uint64_t now)
{
    if (!rx->any) {
        return;
    }
    for (uint64_t f = rx->lo; f < rx->lo + rx->o.window; f++) {
        struct ro_entry *e = entry_of(rx, f);
        if (is_open(e, f)) {
            entry_close(rx, e, rx->max_frame, now);
        } else if (f <= rx->max_frame && !is_closed(e, f)) {
            count_lost_frames(rx, 1);
            entry_open(rx, e, f, NULL);
            e->state = ENTRY_CLOSED;
        }
    }
    rx->lo = rx->max_frame + 1;
}

struct ro_entry *ro_asm_predict(sdd_ro_rx *rx, uint64_t f)
{
    if (!rx->any || f < rx->lo || f - rx->lo >= rx->o.window) {
        return NULL;
    }
    struct ro_entry *e = entry_of(rx, f);
    if (is_open(e, f)) {
        return e->slot != NULL ? e : NULL;
    }
    if (is_closed(e, f)) {
        return NULL;
    }
    struct ro_slot *s = ro_slot_get(rx);
    if (s == NULL) {
        return NULL;
    }
    entry_open(rx, e, f, s);
    return e;
}

/* Move the window past frames that already closed, so in-order traffic never has to push
 * frames out and the next frames can be predicted. */
static void slide(sdd_ro_rx *rx)
{
    while (rx->lo <= rx->max_frame && is_closed(entry_of(rx, rx->lo), rx->lo)) {
        rx->lo++;
    }
}

/* A packet below the window: a duplicate when its recent frame already has it, else late. */
static void below_window(sdd_ro_rx *rx, uint64_t f, uint32_t p)
{
    const struct ro_entry *e = entry_of(rx, f);
    if (is_closed(e, f) && ro_bit(e, p)) {
        rx->c.duplicate++;
    } else {
        rx->c.late++;
    }
}

/* A frame id far from the window: the source restarted or skipped; start over from it. The
 * entries then hold only frames near the old window, never the new frame's. */
static bool needs_resync(const sdd_ro_rx *rx, uint64_t f)
{
    uint64_t limit = rx->o.resync_frames;
    if (f >= rx->lo) {
        return f - rx->lo >= rx->o.window + limit;
    }
    return rx->lo - f > limit;
}

void ro_asm_place(sdd_ro_rx *rx, const struct sdd_ro_packet *p, const uint8_t *src, uint64_t now)
{
    uint64_t f = p->frame_id;
    uint32_t q = p->packet_id;
    rx->last_packet_ns = now;
    if (rx->any && needs_resync(rx, f)) {
        SDD_DEBUG("readout", "stream %u: frame %llu far from window at %llu: resync",
                  rx->o.geom.stream_id, (unsigned long long)f, (unsigned long long)rx->lo);
        ro_asm_flush(rx, now);
        rx->c.resyncs++;
        rx->any = false;
    }
    if (!rx->any) {
        rx->lo = f;
    } else if (f < rx->lo) {
        below_window(rx, f, q);
        return;
    } else if (f - rx->lo >= rx->o.window) {
        advance(rx, f - rx->o.window + 1, now);
    }
    struct ro_entry *e = entry_of(rx, f);
    if (is_closed(e, f)) {
        below_window(rx, f, q); /* closed early (complete) but still inside the window */
        return;
    }
    if (!is_open(e, f)) {
        entry_open(rx, e, f, ro_slot_acquire(rx));
    }
    if (ro_bit(e, q)) {
        rx->c.duplicate++;
        return;
    }
    e->bits[q / 64] |= 1ull << (q % 64);
    if (e->received++ == 0) {
        e->t_first_ns = now;
    }
    e->last_send_ns = p->send_ns;
    if (e->slot == NULL) {
        rx->c.overrun++;
    } else {
        uint8_t *dst = e->slot->f.data + (size_t)q * rx->payload;
        if (dst != src) {
            memcpy(dst, src, rx->payload);
        } else {
            rx->c.zero_copy++;
        }
        rx->c.received++;
        if (rx->o.verify && !sdd_ro_pattern_check(p->stream_id, f, q, dst, rx->payload)) {
            rx->c.pattern_errors++;
        }
    }
    if (rx->any && (f < rx->max_frame || (f == rx->max_frame && q < rx->max_packet))) {
        rx->c.reordered++;
    } else {
        rx->any = true;
        rx->max_frame = f;
        rx->max_packet = q;
    }
    if (e->received == rx->ppf) {
        entry_close(rx, e, rx->max_frame, now);
        slide(rx);
    }
}
