/* Receiver internals shared by its three files: rx.c (socket, thread, recvmmsg into predicted
 * slot positions), assemble.c (frame window, placement, loss accounting) and handoff.c (slot
 * ring, consumer hand-over and release). Not installed. */
#ifndef SDDAQ_READOUT_RX_INTERNAL_H
#define SDDAQ_READOUT_RX_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>

#include "core/notify.h"
#include "sddaq/pool.h"
#include "sddaq/readout.h"
#include "sddaq/ring.h"

#define RO_GRO_BUF        65536u /* most bytes one coalesced receive can hold */
#define RO_COUNTER_FIELDS (sizeof(struct sdd_ro_counters) / sizeof(uint64_t))

/* Who owns a slot: the receiver (free or filling), the ready ring, or the consumer (held). */
enum ro_slot_state { SLOT_FREE, SLOT_FILLING, SLOT_READY, SLOT_HELD };

struct ro_slot {
    struct sdd_ro_frame f; /* the consumer's view; first, so &slot->f == slot */
    _Atomic int state;
    uint8_t *bitmap; /* f.bitmap's storage */
};

enum ro_entry_state { ENTRY_EMPTY, ENTRY_OPEN, ENTRY_CLOSED };

/* One frame being assembled, or, once closed, its bitmap kept to tell duplicates from late
 * packets. Entries are indexed by frame id & entry_mask; the mask covers twice the window so
 * the closed frames just below the window survive beside the open ones. */
struct ro_entry {
    uint64_t frame;
    int state;
    struct ro_slot *slot; /* NULL when open without a slot (overrun) or closed */
    uint32_t received;    /* bits set */
    uint64_t t_first_ns;
    uint64_t last_send_ns;
    uint64_t *bits;
};

/* NA62 sequence tracking of one board: the 64 numbers below `next`, bit i for next - 1 - i.
 * `known` bits were accounted for (received, or counted lost); `seen` bits arrived. */
struct ro_board {
    uint32_t next;
    uint64_t known, seen;
    uint32_t first; /* sequence number of the first packet since (re)start */
    bool started;
    bool ended;    /* its newest packet is an end-of-burst one */
    bool eob_seen; /* an end-of-burst packet came since (re)start */
};

#define RO_BOARDS 256 /* the board field is one byte */

/* Where one datagram of a recvmmsg batch was told to land its payload. */
struct ro_pred {
    struct ro_entry *e; /* NULL: the batch's scratch buffer */
    uint64_t frame;
    uint32_t packet;
    uint8_t *dst;
};

struct sdd_ro_rx {
    struct sdd_ro_rx_opts o;
    char host[64];
    int fd;
    uint16_t port;
    uint32_t ppf, payload;
    size_t slot_bytes;
    size_t bit_words; /* uint64_t words per bitmap */

    /* Slots: one pool region; free slots sit in the pool, ready ones in the SPSC ring. */
    sdd_pool *pool;
    struct ro_slot *slots;
    uint8_t *slot_bitmaps;
    sdd_spsc *ready;
    struct sdd_notify ready_note; /* a frame was handed over (the consumer may sleep on it) */
    struct sdd_notify free_note;  /* a slot came back (a blocked receiver may sleep on it) */

    /* Assembly state, receiver thread only. */
    struct ro_entry *entries;
    uint64_t *entry_bits;
    uint32_t entry_mask;
    bool any;           /* a valid packet was seen since start or resync */
    uint64_t lo;        /* oldest frame of the window [lo, lo + window) */
    uint64_t max_frame; /* highest (frame, packet) seen */
    uint32_t max_packet;
    uint64_t last_packet_ns;
    struct sdd_ro_counters c;
    sdd_hist lat;

    /* recvmmsg batch. */
    struct mmsghdr *msgs;
    struct iovec *iov; /* 3 per datagram: header, payload, one byte to see oversize */
    struct ro_pred *pred;
    uint8_t *hdrs;
    uint8_t *scratch;
    uint8_t *tail;
    uint8_t *ctrl;
    size_t ctrl_len;
    uint8_t *gro_bufs; /* gro, na62: one RO_GRO_BUF-byte buffer per datagram of the batch */

    /* NA62 packing (pack.c), receiver thread only. */
    struct ro_board *boards;
    struct ro_slot *pack_slot; /* the slot being filled, or NULL */
    size_t pack_fill;          /* its bytes so far */
    uint32_t pack_count;       /* its packets so far */
    uint64_t pack_buffers;     /* slots delivered: the next one's frame_id */
    uint32_t ovfl_last;

    /* Thread and publication. */
    pthread_t thread;
    bool started;
    atomic_bool stop;
    atomic_bool done;
    _Atomic uint64_t pub[RO_COUNTER_FIELDS];
    _Atomic uint64_t bad_releases;
};

/* assemble.c */
sdd_err ro_asm_init(sdd_ro_rx *rx);
void ro_asm_fini(sdd_ro_rx *rx);
/* Place one valid packet whose payload is at src (its final place when src equals it). */
void ro_asm_place(sdd_ro_rx *rx, const struct sdd_ro_packet *p, const uint8_t *src, uint64_t now);
/* Open entry with a slot for frame f if f is inside the window, opening one with a free slot
 * when that needs no waiting; NULL otherwise. For predicting where datagrams will land. */
struct ro_entry *ro_asm_predict(sdd_ro_rx *rx, uint64_t f);
/* Close every open frame (timeout or stop); the window restarts after the highest frame. */
void ro_asm_flush(sdd_ro_rx *rx, uint64_t now);

static inline bool ro_bit(const struct ro_entry *e, uint32_t p)
{
    return (e->bits[p / 64] >> (p % 64)) & 1u;
}

/* pack.c (NA62): validate, account by board sequence numbers, pack into the current slot. */
sdd_err ro_pack_init(sdd_ro_rx *rx);
void ro_pack_fini(sdd_ro_rx *rx);
void ro_pack_place(sdd_ro_rx *rx, const uint8_t *d, size_t len, uint64_t now);
/* Hand over the slot being filled, if it holds anything (idle timeout, stop). */
void ro_pack_flush(sdd_ro_rx *rx, uint64_t now);

/* handoff.c */
sdd_err ro_slots_init(sdd_ro_rx *rx);
void ro_slots_fini(sdd_ro_rx *rx);
/* A free slot, or NULL; never waits. */
struct ro_slot *ro_slot_get(sdd_ro_rx *rx);
/* A free slot under the full policy: waits (block) until one returns or stop, or NULL. */
struct ro_slot *ro_slot_acquire(sdd_ro_rx *rx);
void ro_slot_free(sdd_ro_rx *rx, struct ro_slot *s);
/* Hand a filled slot to the consumer (never fails: the ring holds every slot). */
void ro_slot_deliver(sdd_ro_rx *rx, struct ro_slot *s);

#endif
