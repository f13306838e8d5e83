/* Detector readout as a source of a run: a receiver, a feed for its RU, and for emulated
 * sources the emulator thread (run_readout.c). Internal to src/ctl. */
#ifndef SDDAQ_CTL_RUN_READOUT_H
#define SDDAQ_CTL_RUN_READOUT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "sddaq/config.h"
#include "sddaq/evb.h"
#include "sddaq/readout.h"

struct run_readout;

/* After a stream's last send, its last frames may still be on their way (the receiver's frame
 * timeout is 100 ms): a receiver that read nothing for this long is done. */
#define RUN_READOUT_GRACE_MS 300

/* A detector emulator sending to a receiver from a thread of its own (readout sources of an
 * event builder, NA62 sources of a trigger). Once it has sent everything, the stream is over:
 * it stops the receiver once that has read every datagram sent, or read none for
 * RUN_READOUT_GRACE_MS, so that what is on its way or still in the socket arrives and the
 * source then ends. */
struct run_emu {
    sdd_ro_emu *emu; /* NULL: no emulator (nothing to start) */
    sdd_ro_rx *rx;
    const char *name; /* for messages */
    pthread_t th;
    bool running;
    _Atomic bool stopped; /* by the run (else it ran out of things to send) */
};
sdd_err run_emu_start(struct run_emu *e);
/* Stop it before its end and join it; nothing when it is not running. */
void run_emu_stop(struct run_emu *e);

/* "host:port" into its parts (the config checked the form; no port: 0). */
void run_split_hostport(const char *hp, char *host, size_t len, uint16_t *port);

struct run_readout_counts {
    uint64_t frames;       /* frames turned into fragments */
    uint64_t missing;      /* events given out empty: their frame was dropped or never came */
    uint64_t packets_lost; /* receiver: packets missing when their frame closed */
    uint64_t corrupt;      /* receiver: datagrams its parser refused */
    uint64_t bytes;        /* receiver: datagram bytes read */
};

/* Is k a source kind this module runs (udp, emu-stream, emu-jungfrau)? */
bool run_readout_kind(sdd_source_kind k);

/* Bytes of one frame of source s: the RU's fragment payload. */
uint32_t run_readout_frame_bytes(const struct sdd_cfg_source *s);

/* Receiver (and emulator, not yet sending) for a source stage: stream id `stream`; an
 * emulator sends `frames` frames (0 = until stopped); bulk: the RU's events per bulk. The
 * receiver runs from here on. Returns SDD_OK or the error (logged with the stage's name). */
sdd_err run_readout_create(const struct sdd_cfg_stage *stage, uint32_t stream, uint64_t frames,
                           uint32_t bulk, struct run_readout **out);

/* The RU's feed (sdd_evb_opts.feed): node thread only, like the counts below. */
struct sdd_evb_feed run_readout_bind(struct run_readout *rd);
void run_readout_counts(const struct run_readout *rd, struct run_readout_counts *c);

/* Start the emulator's thread (nothing for udp); stop and join it. An emulator that runs out
 * of frames closes the stream itself, a moment after its last send. */
sdd_err run_readout_start(struct run_readout *rd);
void run_readout_stop(struct run_readout *rd);

/* The stream is over (the run is ending): stop the receiver, so that every event whose frame
 * has not come is given out missing. Call a moment after the last frames were sent. */
void run_readout_close(struct run_readout *rd);

/* "host:port" the receiver listens on. */
const char *run_readout_where(const struct run_readout *rd);

/* The receiver, for its counters (run_readout_metrics.c). */
const sdd_ro_rx *run_readout_rx(const struct run_readout *rd);

/* Stop everything and free; NULL is fine. */
void run_readout_destroy(struct run_readout *rd);

#endif
