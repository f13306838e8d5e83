/* The hough-emu source kind at run time: emulated tracker readout boards that feed readout
 * units with stub blocks of generated sector events. Internal to src/ctl; not installed. */
#ifndef SDDAQ_CTL_RUN_HOUGH_FEED_H
#define SDDAQ_CTL_RUN_HOUGH_FEED_H

#include <stdint.h>

#include "sddaq/config.h"
#include "sddaq/err.h"
#include "sddaq/evb.h"

/* An emulated tracker readout for the runtime: sector events from the Hough generator
 * (sddaq/trigger.h), generated once at start into a replay pool, each split across the run's
 * hough-emu sources by layer (source i of n carries the stubs of layers L with L % n == i) and
 * handed to an RU as stub-block payloads (sdd_stub_block_write, sector 0). Event e replays
 * pool entry e % pool_events. */
struct run_hough_feed;

/* Generate the pool of source `index` of `nsources` (the run's hough-emu sources, all with
 * the same seed and pileup: config validation sees to it) from src->seed and src->pileup.
 * src:         a hough-emu source (kind SDD_SRC_HOUGH_EMU); read only during the call.
 * index:       0 .. nsources-1.
 * nsources:    1 .. 6 (one source per barrel layer at most).
 * pool_events: events generated and replayed; 0 = 4096.
 * out:         on success a new feed, owned by the caller (run_hough_feed_destroy); not
 *              written on failure.
 * Returns SDD_OK, SDD_EINVAL (logged: kind, index, nsources or pileup) or SDD_ENOMEM. Blocks
 * while it generates (4096 events at PU 200: about 0.15 s); not for the data path. */
sdd_err run_hough_feed_create(const struct sdd_cfg_source *src, uint32_t index, uint32_t nsources,
                              uint32_t pool_events, struct run_hough_feed **out);

/* Free the pool. NULL is fine. Not while an RU may still call the bound feed. */
void run_hough_feed_destroy(struct run_hough_feed *f);

/* Largest payload any event of this source has (bytes), for sizing the RU's slots. */
uint32_t run_hough_feed_max_payload(const struct run_hough_feed *f);

/* The RU feed (sddaq/evb.h struct sdd_evb_feed): ready() always returns UINT64_MAX (an
 * emulator is always ready; the event builder's own rate limit and run length apply);
 * payload() copies event e's stub block for this source (one memcpy) and returns its length,
 * or SDD_ETOOBIG (negative) if cap is too small — never writes past cap.
 * The pool is read only after create, so the bound functions may run on any thread, several
 * at once; f must outlive every use of the returned feed. */
struct sdd_evb_feed run_hough_feed_bind(struct run_hough_feed *f);

/* Stubs in event e's block for this source (for tests and accounting). */
uint32_t run_hough_feed_stubs(const struct run_hough_feed *f, uint64_t event_id);

#endif
