/* Runtime internals shared by its files (never installed):
 *   run.c           set-up, run control, the stop and pause sequences, the monitor
 *   run_evb.c       ru and bu stages: event-builder nodes and their threads
 *   run_readout.c   detector readout sources;  run_hough_feed.c  the tracker emulator
 *   run_direct.c    readout straight into a trigger (NA62 packets), no event builder
 *   run_handover.c  how built events move between stages (views, pool, rings, inline stages)
 *   run_workers.c   process, writer and feedback threads
 *   run_stages.c    their set-up, start and close
 *   run_remote.c    the coordinator's requests to the other nodes of a multi-node run
 *   run_report.c    metrics, progress line, summary */
#ifndef SDDAQ_RUN_INTERNAL_H
#define SDDAQ_RUN_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/notify.h"
#include "run_hough_feed.h"
#include "run_readout.h"
#include "sddaq/config.h"
#include "sddaq/ctl.h"
#include "sddaq/evb.h"
#include "sddaq/hist.h"
#include "sddaq/metrics.h"
#include "sddaq/pool.h"
#include "sddaq/rich.h"
#include "sddaq/ring.h"
#include "sddaq/rmem.h"
#include "sddaq/run.h"
#include "sddaq/store.h"

#define RUN_MAX_OUT     16 /* downstream stages of one stage */
#define RUN_MAX_THREADS 64 /* worker threads of one process stage */

/* One built event travelling between the stages of this node. Two forms:
 *  - a view: on the builder unit's stack, pointing at the event builder's own memory (ev),
 *    valid only while the BU hands it over; stages that run inline in the BU's thread read it
 *    there, without a copy;
 *  - pooled: serialized into a pool buffer (data[]) the first time it must go to a stage with
 *    threads of its own. Every stage it is queued to holds one reference; the last release
 *    puts it back in the pool.
 * A process stage's decision goes into the atomic fields, which a sibling stage fed by the
 * same BU may read at the same time. */
/* A builder unit's commit mark, published by its node thread for the stages that make events
 * leave the node (writers, fabric links): an event waits until its delivery is committed, and
 * is dropped if its builder fenced first (docs/evb.md "Leases and fencing"; run_gate.c). */
enum { RUN_COMMIT_OPEN = 0, RUN_COMMIT_ENDED, RUN_COMMIT_FENCED };
struct run_commit {
    _Atomic uint64_t mark; /* sdd_evb_node_committed() */
    _Atomic int state;     /* RUN_COMMIT_*: once not open, the mark moves no more */
};

/* Pool buffers a builder unit's thread took before a delivery (run_stash_fill): the events
 * of that delivery take them first (run_item_new), so the builder never waits inside a
 * delivery for a buffer that a writer holds until the builder commits (run_gate.c). */
struct run_stash {
    void **buf;
    uint32_t n, cap; /* cap 0: no stash (nothing behind the BU takes buffers) */
};

struct run_item {
    _Atomic uint32_t refs;
    uint32_t flags; /* SDD_EVB_EV_* */
    uint64_t id;
    uint64_t built_ns;
    uint32_t bytes;            /* pooled: serialized size in data[]; view: fragment bytes */
    _Atomic uint32_t ntracks;  /* set by a hough stage */
    _Atomic uint32_t kept;     /* 1 unless a process stage rejected it */
    _Atomic uint32_t tflags;   /* flags a process stage adds (RUN_FLAG_TRIGGER_ERROR) */
    bool pooled;
    sdd_pool *pool;                  /* pooled: where it goes back */
    uint64_t delivery;               /* its builder's delivery number (sdd_evb_event) */
    const struct run_commit *commit; /* its builder's commit mark; NULL: nothing to wait for */
    const struct sdd_evb_event *ev; /* view only */
    uint8_t data[];                 /* pooled: sdd_evb_event_serialize() layout */
};

/* Record flag for an event the trigger could not read (kept, so that nothing is lost). */
#define RUN_FLAG_TRIGGER_ERROR 0x100u

/* Counts a thread keeps for the stages it works for, added to the shared counters in batches
 * (run_counts_flush) instead of one atomic operation per event. */
struct run_counts {
    uint64_t events_in, bytes_in, events_out, bytes_out, kept, rejected;
};

/* A worker's latency histogram, copied out under a lock now and then so the monitor can read
 * it while the worker goes on. */
struct run_lat {
    sdd_hist own;      /* the worker's, unlocked */
    sdd_hist shared;   /* last copy, under lock */
    uint64_t next_ns;  /* next copy due */
    pthread_mutex_t lock;
};

struct sdd_run;

struct run_stage {
    struct sdd_run *run;
    const struct sdd_cfg_stage *cfg;
    size_t idx;
    bool local; /* runs on this node (every stage, in a one-node run) */
    struct sdd_stage_metrics m; /* the stage's counters (the one place they are kept) */
    struct run_ro_metrics *ro_xm; /* a readout source's receiver counters (run_evb.c) */
    /* input: a ring of struct run_item pointers (process, writer, feedback) */
    sdd_mpmc *in;
    struct sdd_notify in_note;   /* something was queued on in, or input ended (run_next_item) */
    struct sdd_notify room_note; /* a slot of in came free: a producer held back may go on */
    _Atomic int producers; /* upstream stages still running; 0 + empty ring = input ended */
    struct run_stage *out[RUN_MAX_OUT];
    size_t nout;
    bool inline_run; /* no threads: runs in the thread of the stage that feeds it (process
                        none and prescale, null writers: a hand-over would cost more) */
    bool first_decision; /* a process stage fed by the builder units: its decisions count */
    /* threads */
    pthread_t th[RUN_MAX_THREADS];
    unsigned nthreads, started;
    _Atomic unsigned live; /* threads not yet finished */
    _Atomic bool finished; /* run_stage_finished() done: downstream stages were told */
    struct run_lat lat[RUN_MAX_THREADS];
    /* ru, bu: the event-builder node the stage is part of */
    struct run_evb_node *evb;
    /* a stage of another node standing in for a fabric link to or from it (run_link.c) */
    struct run_link *link;
    _Atomic uint64_t link_moved, link_dropped; /* events sent or delivered; dropped */
    /* source: its receiver when it feeds stages directly (run_direct.c) */
    struct run_direct *direct;
    bool direct_fed; /* process: fed by such a source; its input is receive buffers */
    _Atomic uint64_t built, complete, incomplete, corrupt, generated, bytes_built; /* copies */
    _Atomic uint64_t uncommitted; /* bu: built, dropped unwritten when it fenced (built again) */
    uint64_t evb_pub_ns;
    /* process */
    _Atomic uint64_t kept, rejected, tracks;
    unsigned nproducers; /* upstream stages, as wired */
    /* rich fed by one source: the events a buffer leaves to the next, whatever worker has
     * it; the workers done, and the number after the last buffer (the carry's last turn) */
    sdd_rich_carry *rich_carry;
    _Atomic unsigned rich_done;
    _Atomic uint64_t rich_seq_end;
    _Atomic uint64_t busy_ns; /* process, writer: time spent on events */
    _Atomic uint64_t cpu_ns;  /* its threads' CPU time, a writer's closing included */
    /* writer */
    sdd_store *store;
    char path[SDD_CFG_PATH_MAX + 256]; /* writer path with the run number */
    struct sdd_store_summary store_sum;
    /* feedback */
    sdd_ksb *ksb;
    struct sdd_run_feedback fb;
    char detail[SDD_CFG_PATH_MAX + 320];
    /* failure */
    _Atomic int err;
};

/* One event-builder node: ru k and bu k of the topology together (LSEB: every node is a readout
 * unit and a builder unit; the RU hands bulks for its own BU over by pointer). */
/* Event-builder failure counters beside the stages' standard sets (run_evb_metrics.c). */
#define RUN_EVB_RU_METRICS 2
#define RUN_EVB_BU_METRICS 8
struct run_evb_metrics {
    sdd_metric *ru[RUN_EVB_RU_METRICS]; /* of the ru stage (NULL without one) */
    sdd_metric *bu[RUN_EVB_BU_METRICS]; /* of the bu stage */
};

struct run_evb_node {
    struct sdd_run *run;
    uint32_t index;
    bool local;       /* on this node: created and driven here */
    const char *host; /* where it listens */
    uint16_t port;
    sdd_evb_node *n;
    struct run_stage *ru, *bu; /* either may be NULL */
    struct run_hough_feed *feed;
    struct run_readout *readout;   /* the RU's source when it is detector readout */
    struct run_stage *source;      /* that source stage (its counters) */
    struct run_readout_counts rd_last; /* node thread: what went into the counters already */
    pthread_t th;
    bool started;
    bool held, ended;      /* holding; ended (node thread only) */
    uint64_t hold_at_seen; /* the hold point applied (node thread only) */
    _Atomic uint64_t generated_bulks;
    struct sdd_evb_stats last; /* node thread: what went into the counters already */
    struct run_evb_metrics xm;
    struct run_commit commit; /* the BU's commit mark, for the stages behind it */
    struct run_stash stash;   /* buffers for the BU's next delivery (node thread only) */
    uint32_t bufs_per_event;  /* pool buffers one of its events can take (run_bufs_per_event) */
    uint64_t test_stall_at;   /* event id + 1: SDDAQ_TEST_STALL_EVENT (node thread only) */
    uint64_t pub_ns;   /* next publish_evb() */
    uint64_t flush_ns; /* next run_counts_flush() of the inline stages' counts */
};

enum run_phase { RUN_PHASE_SETUP = 0, RUN_PHASE_GO, RUN_PHASE_HOLD, RUN_PHASE_END, RUN_PHASE_ABORT };

struct sdd_run {
    const sdd_config *cfg;
    struct sdd_run_opts o;
    const struct sdd_cfg_node *self; /* the node this process runs */
    bool multi;                      /* one node of several */
    bool coordinator;                /* the node that ends the run for all (run.coordinator) */
    bool lost[SDD_CFG_MAX_NODES];    /* coordinator: nodes that stopped answering */
    uint64_t watch_ns;               /* the other nodes: next look at the coordinator */
    bool coordinator_missed;         /* ... and whether it did not answer the last look */
    uint64_t coordinator_silent_ns;  /* ... since when (the first miss of this row) */
    bool silent_wait_said;           /* warned that it waits out a silent coordinator */
    bool cut_off_said;               /* warned that it was cut off from most nodes */
    struct run_stage *st; /* cfg->n_stages */
    size_t n;
    /* event builder */
    struct run_evb_node evb[SDD_EVB_MAX_NODES];
    uint32_t nevb, nevb_local;
    struct sdd_evb_opts evb_opts;
    uint64_t events; /* the event builder's run length (an upper bound for timed runs) */
    uint32_t ndirect; /* sources read straight into a trigger (run_direct.c) */
    struct run_link **links; /* per topology link: its fabric link here, or NULL */
    _Atomic int phase;
    _Atomic unsigned evb_ready, evb_held; /* local nodes connected; holding */
    _Atomic int hold_req;                 /* every local RU holds (a stop or a pause) */
    _Atomic uint64_t hold_at;             /* ... then generates up to here (a pause) */
    _Atomic int paused;                   /* run control: paused */
    uint64_t pause_point;                 /* bulks generated when paused (whole cycles) */
    pthread_mutex_t control_lock;         /* pause, resume and stop, one at a time */
    _Atomic uint64_t end_bulks;
    /* events between stages */
    sdd_pool *items;
    size_t item_bytes; /* largest serialized event */
    /* Small items for the records a rich stage makes (run_record_new): taken from the big
     * pool, each record would touch a cold buffer of a receive buffer's size. NULL without a
     * rich stage. */
    sdd_pool *records;
    size_t record_bytes;
    uint64_t run_number;
    /* control */
    sdd_runctl *rc;
    sdd_metrics *metrics;
    sdd_http *http;
    _Atomic int stop_req;     /* HTTP "stopped" */
    _Atomic int http_waiting; /* a stop request waits for its answer */
    _Atomic int finished;     /* drained and summed: summary_json is served */
    _Atomic int summary_taken; /* the coordinator fetched it */
    char *summary_json;
    _Atomic int failed;
    char reason[256];
    pthread_mutex_t reason_lock;
    uint64_t t_start_ns, t_end_ns;
    /* the monitor sleeps until told (a stage done, a failure, a stop) or its next deadline */
    pthread_mutex_t wake_lock;
    pthread_cond_t wake_cond; /* CLOCK_MONOTONIC */
    bool wake_pending;
    uint64_t prog_built; /* progress line: built events and time at the previous line */
    double prog_t;
};

/* run.c */
/* Hold this node's RUs: the largest bulk count they generated (UINT64_MAX: not within 10 s). */
uint64_t run_hold_local(struct sdd_run *r);
/* Held RUs generate up to `bulks` (rounded up to whole cycles) and stop there (a pause). */
void run_hold_at_local(struct sdd_run *r, uint64_t bulks);
/* This node's event builders end the run at `bulks` bulks. */
void run_end_local(struct sdd_run *r, uint64_t bulks);
/* Resume this node's RUs after a pause. */
void run_resume_local(struct sdd_run *r);
/* Multi-node runs, from the coordinator: hold every other node's RUs (the largest bulk count
 * they generated goes into *bulks), then end them all at K. run_remote.c. */
sdd_err run_remote_hold(struct sdd_run *r, uint64_t *bulks);
sdd_err run_remote_end(struct sdd_run *r, uint64_t bulks);
/* Every other node's RUs generate up to `bulks` and stop (a pause), or go on (coordinator). */
sdd_err run_remote_hold_at(struct sdd_run *r, uint64_t bulks);
sdd_err run_remote_resume(struct sdd_run *r);
/* Ask the coordinator to stop the run (a node's Ctrl-C, a failure here). An error: the
 * coordinator cannot be reached. */
sdd_err run_remote_stop(struct sdd_run *r);
/* A node other than the coordinator, while the run goes (every 500 ms): when the coordinator
 * stopped answering twice in a row, the first node in the topology's order that still answers
 * takes its place. True when this node did: it is the coordinator now and the run has failed
 * naming the lost one, so the monitor ends it for the nodes left. */
bool run_remote_watch(struct sdd_run *r, uint64_t now);
/* A node other than the coordinator, its part done, waiting for its summary to be fetched:
 * true when nobody is left to fetch it (the coordinator's host refuses connections to it, and
 * every other node that answers has ended its part too, so none can take over). Blocks about
 * a second. */
bool run_remote_nobody_left(struct sdd_run *r);
/* Fetch every other node's summary and add it to s (coordinator, after its own drain). */
void run_remote_gather(struct sdd_run *r, struct sdd_run_summary *s);
/* /api/run/... between nodes (sdd_http_run_fn). */
unsigned run_http(void *arg, const char *method, const char *path, const char *body, char *out,
                  size_t len);

void run_fail(struct sdd_run *r, const struct run_stage *s, sdd_err err, const char *why);
/* Wake the monitor: something it waits for may have happened. */
void run_wake(struct sdd_run *r);

/* run_evb.c */
sdd_err run_evb_setup(struct sdd_run *r);
sdd_err run_evb_start(struct sdd_run *r);
void run_evb_join(struct sdd_run *r);
/* Start the detector emulators (with the run); stop them (once the builders are done). */
void run_evb_readout_start(struct sdd_run *r);
void run_evb_readout_stop(struct sdd_run *r);
void run_evb_destroy(struct sdd_run *r);
/* Has a builder running on this node given up every builder node on config node `node`? 1
 * yes, 0 not yet, -1 nothing to ask (no builder here still running, or none there). */
int run_evb_gave_up(const struct sdd_run *r, size_t node);

/* run_evb_metrics.c: register a local node's failure counters; add what changed since `was`. */
sdd_err run_evb_metrics_register(struct sdd_run *r, struct run_evb_node *e);
void run_evb_metrics_update(struct run_evb_node *e, const struct sdd_evb_stats *now,
                            const struct sdd_evb_stats *was);

/* run_readout_metrics.c: a readout receiver's own counters (lost, refused by reason, ...) as
 * series of stage st that read rx at every scrape; _add: one more receiver of the same stage
 * (its counters summed in), before the control port serves; remove them before the receivers
 * go. */
struct run_ro_metrics;
sdd_err run_ro_metrics_register(sdd_metrics *m, const struct run_stage *st, const sdd_ro_rx *rx,
                                struct run_ro_metrics **out);
sdd_err run_ro_metrics_add(struct run_ro_metrics *x, const sdd_ro_rx *rx);
void run_ro_metrics_remove(struct run_ro_metrics *x); /* NULL is fine */

/* run_stages.c: setup, start (sinks first), close */
sdd_err run_stages_setup(struct sdd_run *r);
sdd_err run_stages_start(struct sdd_run *r);
void run_stages_close(struct sdd_run *r);
/* Hand item to every downstream stage of s that should get it (kept: all; rejected: only
 * feedback stages): inline stages run now, in this thread; stages with threads get a
 * reference (a pooled copy of a view first); waits while a ring is full. The caller keeps its
 * own reference. */
void run_emit(struct run_stage *s, struct run_item *it, bool kept);
void run_item_release(struct sdd_run *r, struct run_item *it);
/* Hand a pooled item, and the caller's reference to it, to one stage: queued on its ring
 * (held back while full), or run inline and released. */
void run_deliver(struct run_stage *to, struct run_item *it);
/* A pool buffer as a new item holding one reference (the caller's), for a stage that makes
 * events of its own; waits while the pool is empty; NULL when the run is aborted meanwhile. */
struct run_item *run_item_new(struct sdd_run *r);
/* The same from the small pool, for a record of at most r->record_bytes. */
struct run_item *run_record_new(struct sdd_run *r);
/* run_rich.c: the largest record a rich stage makes (its pool's buffer size). */
size_t run_rich_record_bytes(void);
/* Pool buffers one event that stage s hands on can take in the thread that hands it on: one
 * wherever it is first queued for a stage with threads of its own. */
uint32_t run_bufs_per_event(const struct run_stage *s);
/* Make st hold cap buffers at most, and use it for this thread's run_item_new. */
sdd_err run_stash_init(struct run_stash *st, uint32_t cap);
/* Top st up to want buffers from the pool, without waiting; true once it holds them. */
bool run_stash_fill(struct sdd_run *r, struct run_stash *st, uint32_t want);
/* Give st's buffers back to the pool and free it. */
void run_stash_free(struct sdd_run *r, struct run_stash *st);
/* This thread's counts for stage s (run_counts_attach first). */
struct run_counts *run_counts(const struct run_stage *s);
sdd_err run_counts_attach(struct sdd_run *r);
void run_counts_flush(void);
void run_counts_detach(void);
/* Stage s's threads are all done (or never ran): tell its downstream stages. Idempotent. */
void run_stage_finished(struct run_stage *s);
/* Take the next item queued on s without waiting (waking a producer held back by a full
 * ring); false when none. run_handover.c. */
bool run_take(struct run_stage *s, void **item);
/* Next event of s's input; NULL once every producer finished and the ring is empty. Spins a
 * little, naps once, then sleeps until a producer wakes it (DESIGN: spin briefly, then block).
 * run_handover.c. */
struct run_item *run_next_item(struct run_stage *s);

/* Events that wait for their builder's commit mark before they leave the node (run_gate.c). */
struct run_gate {
    struct run_item **q; /* ring of waiting events, in arrival order */
    size_t head, n, cap;
    uint64_t dropped; /* events dropped: their builder fenced before committing them */
};
/* The next event of stage s's input, in order, once it may leave (*drop false) or must be
 * dropped (*drop true); NULL at the end of the input. */
struct run_item *run_gate_next(struct run_stage *s, struct run_gate *g, bool *drop);
void run_gate_fini(struct run_gate *g);
/* run_gate_fini, after a warning that names the stage and `what` its drops were. */
void run_gate_end(struct run_gate *g, const struct run_stage *s, const char *what);
void run_lat_init(struct run_lat *l);
void run_lat_record(struct run_lat *l, uint64_t ns, uint64_t now);
void run_lat_flush(struct run_lat *l);

/* run_workers.c: the stage threads, started with a malloc'ed run_worker_arg they free */
struct run_worker_arg {
    struct run_stage *s;
    unsigned t; /* worker number */
};
void *run_process_thread(void *arg);
void *run_writer_thread(void *arg);
void *run_feedback_thread(void *arg);
/* Shared by the stage threads: the worker's CPUs; its end (the stage ends with its last). */
void run_pin_worker(struct run_stage *s, unsigned t);
void *run_worker_done(struct run_worker_arg *wa);
/* run_rich.c: a RICH trigger worker (receive buffers in, one record per event with rings) */
void *run_rich_thread(void *arg);

/* run_report.c */
sdd_err run_metrics_setup(struct sdd_run *r);
/* Queue depths and latency summaries into the metrics (the monitor, every second). */
void run_metrics_tick(struct sdd_run *r);
/* One progress line at t seconds into the run; last: the closing one, with the average rate. */
void run_progress(struct sdd_run *r, FILE *f, double t, bool last);
void run_summarize(struct sdd_run *r, struct sdd_run_summary *out);

/* run_direct.c */
struct run_direct;
/* Does this stage read NA62 packets straight into the stages it links to (emu-na62, or udp
 * with frame format na62)? */
bool run_direct_source(const struct sdd_cfg_stage *s);
/* Bytes of one receive buffer (an item of such a source). */
size_t run_direct_buffer_bytes(void);
/* Receivers (and emulators, not yet sending) for this node's direct sources; sizes items. */
sdd_err run_direct_setup(struct sdd_run *r);
/* Their threads: buffers start to flow; emulators send. */
sdd_err run_direct_start(struct sdd_run *r);
/* Stop the emulators, then the receivers: what came is handed on and the sources end. */
void run_direct_stop(struct sdd_run *r);
void run_direct_join(struct sdd_run *r);
/* Events the emulators send in all (0: unbounded or no emulator). */
uint64_t run_direct_sent(const struct sdd_run *r);
void run_direct_free(struct run_direct *d);
void run_direct_destroy(struct sdd_run *r);

/* run_link.c: links between nodes other than ru -> bu */
struct run_link;
/* Does link l join two nodes (other than the event builder's ru -> bu)? */
bool run_link_crosses(const sdd_config *cfg, const struct sdd_cfg_link *l);
/* May a link from a to b cross nodes (bu or process into process, writer or feedback)? */
bool run_link_allowed(const struct sdd_cfg_stage *a, const struct sdd_cfg_stage *b);
/* This node's ends of the crossing links into links[] (cfg->n_links entries); the remote stage
 * of each becomes its stand-in (stage.link, one thread). */
sdd_err run_link_setup(struct sdd_run *r, struct run_link **links);
/* Is this node the link's sending end? */
bool run_link_sends(const struct run_link *k);
void *run_link_send_thread(void *arg);
void *run_link_recv_thread(void *arg);
void run_link_free(struct run_link *k);

#endif
