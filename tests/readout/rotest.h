/* Helpers for the readout tests: an emulator on its own thread, a consumer that checks every
 * delivered frame against the test pattern, and a wait for the receiver to catch up. Every
 * wait is bounded and generous; nothing passes or fails on timing. */
#ifndef SDDAQ_TESTS_ROTEST_H
#define SDDAQ_TESTS_ROTEST_H

#include <pthread.h>
#include <string.h>

#include "check.h"
#include "sddaq/clock.h"
#include "sddaq/readout.h"

struct emu_job {
    struct sdd_ro_emu_opts o;
    uint16_t port;
    struct sdd_ro_emu_stats st;
    sdd_err err;
    pthread_t thread;
};

static void *emu_job_main(void *arg)
{
    struct emu_job *j = arg;
    sdd_ro_emu *e = NULL;
    j->err = sdd_ro_emu_create(&j->o, "127.0.0.1", j->port, &e);
    if (j->err == SDD_OK) {
        j->err = sdd_ro_emu_run(e);
        sdd_ro_emu_stats(e, &j->st);
    }
    sdd_ro_emu_destroy(e);
    return NULL;
}

static inline void emu_job_start(struct emu_job *j)
{
    CHECK_REQUIRE(pthread_create(&j->thread, NULL, emu_job_main, j) == 0);
}

static inline void emu_job_join(struct emu_job *j)
{
    pthread_join(j->thread, NULL);
    CHECK_OK(j->err);
}

/* Wait until the receiver has read `datagrams` datagrams (or 20 s pass). */
static inline bool wait_datagrams(sdd_ro_rx *rx, uint64_t datagrams)
{
    uint64_t deadline = sdd_now_ns() + 20 * SDD_NS_PER_S;
    struct sdd_ro_counters c;
    do {
        sdd_ro_rx_counters(rx, &c);
        if (c.datagrams >= datagrams) {
            return true;
        }
        sdd_sleep_ns(SDD_NS_PER_MS);
    } while (sdd_now_ns() < deadline);
    fprintf(stderr, "receiver read %llu of %llu datagrams in 20 s\n",
            (unsigned long long)c.datagrams, (unsigned long long)datagrams);
    return false;
}

/* What a consumer saw. */
struct seen {
    uint64_t frames, complete, partial, padded, packets, bad_payload, bad_flags, bad_bitmap;
    uint64_t first_id, last_id, out_of_order, twice;
    uint8_t ids[1024]; /* frame id % 8192 delivered: the tests send fewer frames than that */
};

static inline bool bit_of(const struct sdd_ro_frame *f, uint32_t p)
{
    return (f->bitmap[p / 8] >> (p % 8)) & 1u;
}

/* Check one delivered frame: present packets carry their pattern, padded ones are zero, the
 * bitmap agrees with the received count and the flags. */
static inline void check_frame(const struct sdd_ro_frame *f, uint32_t payload, struct seen *s)
{
    uint32_t present = 0;
    for (uint32_t p = 0; p < f->packets; p++) {
        const uint8_t *d = f->data + (size_t)p * payload;
        if (bit_of(f, p)) {
            present++;
            if (!sdd_ro_pattern_check(f->stream_id, f->frame_id, p, d, payload)) {
                s->bad_payload++;
            }
        } else if (f->flags & SDD_RO_FRAME_PADDED) {
            for (uint32_t i = 0; i < payload; i++) {
                if (d[i] != 0) {
                    s->bad_payload++;
                    break;
                }
            }
        }
    }
    if (present != f->received) {
        s->bad_bitmap++;
    }
    bool complete = f->received == f->packets;
    if (complete != ((f->flags & SDD_RO_FRAME_COMPLETE) != 0) ||
        complete == ((f->flags & SDD_RO_FRAME_PARTIAL) != 0)) {
        s->bad_flags++;
    }
    uint64_t bit = f->frame_id % 8192;
    s->twice += (s->ids[bit / 8] >> (bit % 8)) & 1u;
    s->ids[bit / 8] |= (uint8_t)(1u << (bit % 8));
    if (s->frames > 0 && f->frame_id <= s->last_id) {
        s->out_of_order++;
    }
    if (s->frames == 0) {
        s->first_id = f->frame_id;
    }
    s->last_id = f->frame_id;
    s->frames++;
    s->complete += complete;
    s->partial += !complete;
    s->padded += (f->flags & SDD_RO_FRAME_PADDED) != 0;
    s->packets += f->received;
}

struct consumer {
    sdd_ro_rx *rx;
    uint32_t payload;
    struct seen s;
    pthread_t thread;
};

static void *consumer_main(void *arg)
{
    struct consumer *c = arg;
    struct sdd_ro_frame *f;
    sdd_err err;
    while ((err = sdd_ro_rx_next(c->rx, &f, -1)) == SDD_OK) {
        check_frame(f, c->payload, &c->s);
        sdd_ro_rx_release(c->rx, f);
    }
    return NULL;
}

static inline void consumer_start(struct consumer *c, sdd_ro_rx *rx, uint32_t payload)
{
    memset(c, 0, sizeof(*c));
    c->rx = rx;
    c->payload = payload;
    CHECK_REQUIRE(pthread_create(&c->thread, NULL, consumer_main, c) == 0);
}

/* After sdd_ro_rx_stop(): the consumer drains what is left and ends. */
static inline void consumer_join(struct consumer *c)
{
    pthread_join(c->thread, NULL);
}

#endif
