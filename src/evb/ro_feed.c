/* A readout receiver as an RU's source (sdd_evb_ro_feed, evb.h): frames become fragments.
 * Frames are taken from the receiver as they come and held, by event, until the RU builds
 * their bulk; the feed tells the RU how far the events are decided, that is, either held or
 * known never to come. The receiver closes frames in the order of their ids, a frame at the
 * latest when one `window` ids newer has a packet, so once such a frame came, an older one
 * that did not come was dropped (or lost whole) and its event goes out empty and flagged. */
#include <stdlib.h>
#include <string.h>

#include "evb_internal.h"
#include "sddaq/clock.h"

struct sdd_evb_ro_feed {
    sdd_ro_rx *rx;
    uint64_t first;             /* frame id of event 0 */
    uint32_t window;            /* the receiver's assembly window */
    uint64_t idle_ns;           /* no frame this long: everything up to now is decided */
    uint32_t nheld;             /* room in held[] (a power of two) */
    struct sdd_ro_frame **held; /* held[e % nheld]: event e's frame, or NULL */
    uint64_t next;              /* next event the RU takes */
    uint64_t decided;           /* events 0 .. decided-1 are held or known missing */
    uint64_t newest;            /* highest event whose frame came, + 1 (0: none yet) */
    uint64_t last_frame_ns;     /* when a frame last came */
    bool ended;                 /* the receiver has stopped and is drained */
    struct sdd_evb_ro_feed_stats st;
};

sdd_err sdd_evb_ro_feed_create(sdd_ro_rx *rx, uint64_t first_frame, uint32_t window, uint32_t slots,
                               uint32_t idle_ms, sdd_evb_ro_feed **out)
{
    if (rx == NULL || out == NULL || window == 0 || slots == 0 || idle_ms == 0) {
        return SDD_EINVAL;
    }
    sdd_evb_ro_feed *f = calloc(1, sizeof(*f));
    if (f == NULL) {
        return SDD_ENOMEM;
    }
    /* Twice the slots: the receiver can hand over at most `slots` frames at once, but frame
     * ids skip where frames were dropped. */
    uint32_t n = 1;
    while (n < 2 * slots) {
        n <<= 1;
    }
    f->held = calloc(n, sizeof(*f->held));
    if (f->held == NULL) {
        free(f);
        return SDD_ENOMEM;
    }
    f->rx = rx;
    f->first = first_frame;
    f->window = window;
    f->idle_ns = (uint64_t)idle_ms * SDD_NS_PER_MS;
    f->nheld = n;
    f->last_frame_ns = sdd_now_ns();
    *out = f;
    return SDD_OK;
}

static void give_back(sdd_evb_ro_feed *f, struct sdd_ro_frame *fr)
{
    (void)sdd_ro_rx_release(f->rx, fr);
}

/* Hold one frame that just came, or release it when it cannot be used. */
static void take(sdd_evb_ro_feed *f, struct sdd_ro_frame *fr)
{
    f->last_frame_ns = sdd_now_ns();
    if (fr->frame_id < f->first || fr->frame_id - f->first < f->decided) {
        f->st.late++;
        give_back(f, fr);
        return;
    }
    uint64_t e = fr->frame_id - f->first;
    if (e >= f->next + f->nheld) {
        f->st.overflow++; /* too far ahead of what the RU has taken to be held */
        give_back(f, fr);
        return;
    }
    struct sdd_ro_frame **slot = &f->held[e & (f->nheld - 1)];
    if (*slot != NULL) {
        f->st.overflow++; /* an older event's frame waits there: this one cannot be held */
        give_back(f, fr);
        return;
    }
    *slot = fr;
    f->newest = e + 1 > f->newest ? e + 1 : f->newest;
}

/* Move `decided` on as far as frames came or are known never to come. */
static void decide(sdd_evb_ro_feed *f, uint64_t now)
{
    uint64_t horizon = f->newest > f->window ? f->newest - f->window : 0;
    if (f->ended || now - f->last_frame_ns >= f->idle_ns) {
        /* Nothing for a while: the receiver has closed every frame (its frame timeout is
         * shorter), so all up to the newest are decided; after an end, everything is. */
        horizon = f->ended ? UINT64_MAX : f->newest;
    }
    while (f->decided < f->next + f->nheld &&
           (f->held[f->decided & (f->nheld - 1)] != NULL || f->decided < horizon)) {
        f->decided++;
    }
}

static uint64_t feed_ready(void *arg)
{
    sdd_evb_ro_feed *f = arg;
    struct sdd_ro_frame *fr;
    sdd_err err;
    while (!f->ended && (err = sdd_ro_rx_next(f->rx, &fr, 0)) != SDD_EAGAIN) {
        if (err == SDD_ECLOSED) {
            f->ended = true;
        } else if (err == SDD_OK) {
            take(f, fr);
        }
    }
    decide(f, sdd_now_ns());
    return f->decided;
}

static long feed_payload(void *arg, uint64_t e, void *dst, size_t cap)
{
    sdd_evb_ro_feed *f = arg;
    if (e != f->next || e >= f->decided) {
        return -1; /* out of order or not decided: the contract says neither happens */
    }
    f->next++;
    struct sdd_ro_frame **slot = &f->held[e & (f->nheld - 1)];
    struct sdd_ro_frame *fr = *slot;
    if (fr == NULL) {
        f->st.missing++;
        return -1;
    }
    *slot = NULL;
    size_t n = fr->bytes < cap ? fr->bytes : cap;
    memcpy(dst, fr->data, n);
    give_back(f, fr);
    f->st.frames++;
    return (long)n;
}

struct sdd_evb_feed sdd_evb_ro_feed_bind(sdd_evb_ro_feed *f)
{
    return (struct sdd_evb_feed){.ready = feed_ready, .payload = feed_payload, .arg = f};
}

void sdd_evb_ro_feed_stats(const sdd_evb_ro_feed *f, struct sdd_evb_ro_feed_stats *out)
{
    *out = f->st;
}

void sdd_evb_ro_feed_destroy(sdd_evb_ro_feed *f)
{
    if (f == NULL) {
        return;
    }
    for (uint32_t i = 0; i < f->nheld; i++) {
        if (f->held[i] != NULL) {
            give_back(f, f->held[i]);
        }
    }
    free(f->held);
    free(f);
}
