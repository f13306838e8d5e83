/* The runtime: runs the stages of a topology (sddaq/config.h) as threads of this process and
 * drives them through the run-control states (sddaq/ctl.h) — `sddaq run`.
 *
 * Stages become:
 *   source -> ru   the RU's fragments: `evb-emu` emulated boards or `hough-emu` tracker stubs
 *   ru, bu         event-builder nodes (sddaq/evb.h), one thread each, joined by the fabric
 *   process        `threads` workers: hough (CMS L1 track finder; keeps events with at least
 *                  one track candidate), prescale (keeps 1 of `factor`), none (keeps all)
 *   writer         one thread: hdf5, raw or null (sddaq/store.h), one record per kept event
 *   feedback       one thread: every trigger decision is published on a self-synchronizing
 *                  remote buffer (sddaq/rmem.h, sdd_ksb) as a struct sdd_run_feedback
 * Links between stages on this node are bounded rings of references to pooled event buffers:
 * a full ring holds its producer back, and a builder unit that cannot hand an event on stops
 * returning credits, so the readout units slow down: nothing is dropped for lack of room.
 *
 * Accounting: every event the readout units generate is built exactly once (complete or
 * flagged), and every built event is decided by the process stage (kept or rejected); kept
 * events are written. The summary lists these counts and checks that they add up.
 *
 * Not yet: topologies spread over several nodes (`sddaq node`), `udp`/`emu-*` sources,
 * sources linked to anything but an RU, the `rich` algorithm in a chain. They are refused
 * with a message naming the stage. */
#ifndef SDDAQ_RUN_H
#define SDDAQ_RUN_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "sddaq/api.h"
#include "sddaq/config.h"
#include "sddaq/err.h"

/* One trigger decision as the feedback buffer publishes it: 64 bytes, little-endian. */
struct sdd_run_feedback {
    uint64_t event_id;       /* the event just decided */
    uint32_t ntracks;        /* its track candidates (hough; 0 for other algorithms) */
    uint32_t kept;           /* 1 when the trigger kept it */
    uint64_t decided;        /* decisions published so far, this one included */
    uint64_t kept_total;     /* of those, kept */
    uint64_t tracks_total;   /* track candidates so far */
    uint64_t built_ns;       /* when the event was built (monotonic clock of the node) */
    uint64_t decided_ns;     /* when it was decided */
    uint32_t event_flags;    /* SDD_EVB_EV_* of the event */
    uint32_t reserved;
};

struct sdd_run_opts {
    const char *node;      /* run only this node's stages, as one node of a multi-node run
                              (`sddaq node`); NULL = the topology must have one node */
    double duration_s;     /* > 0: overrides run.duration */
    uint64_t events;       /* > 0: overrides run.events */
    bool progress;         /* a progress line on stderr every second */
    bool http;             /* serve the node's control port (metrics, state, transitions) */
    bool wait_for_start;   /* stay `configured` until POST /api/transition {"to":"running"} */
    volatile sig_atomic_t *stop; /* set (e.g. from SIGINT) to end the run early, cleanly */
    FILE *announce;        /* when set, one line here once configured: run number, control
                              address, output files */
};

SDD_API void sdd_run_opts_default(struct sdd_run_opts *o);

/* Per-stage figures of a finished run. */
struct sdd_run_stage_summary {
    char name[SDD_CFG_NAME_MAX];
    sdd_stage_type type;
    uint64_t events_in, events_out, bytes_in, bytes_out, dropped, errors;
    uint64_t lat_count, lat_p50_ns, lat_p99_ns; /* event age (built -> done here); 0 = none */
    uint64_t busy_ns; /* process, writer: time its threads spent on events (a writer's rate
                         is bytes_out / busy_ns, its closing included) */
    uint64_t cpu_ns;  /* CPU time of the stage's own threads (thread clocks; a writer's closing
                         included; a rich stage's split helpers not): unlike busy_ns, not
                         stretched by the stage being descheduled. 0 for stages without
                         threads of their own (inline, ru, bu, source) */
    char detail[SDD_CFG_PATH_MAX + 320];        /* output file, feedback address, ... */
};

struct sdd_run_summary {
    sdd_err status;          /* SDD_OK, or what ended the run in error */
    bool ran;                /* the stages were set up and started: false when the topology
                                was refused or could not be set up (nothing else is filled) */
    char reason[256];        /* "stage: why" when status is not SDD_OK */
    double seconds;          /* running phase, start to the last stage drained */
    uint64_t run_number;
    uint64_t generated;      /* events the RUs generated (each RU generates every event);
                                read straight into a trigger: what its emulators sent */
    uint64_t built, complete, incomplete, corrupt; /* straight into a trigger: built = the
                                events its event finder found (docs/run.md) */
    uint64_t uncommitted;    /* of built: events a builder unit delivered and dropped uncommitted
                                when it fenced itself (docs/evb.md), which the survivors built
                                again; each built event counts once in built - uncommitted */
    bool found;              /* read straight into a trigger: no event builder; built counts
                                found events, which may exceed generated */
    uint64_t kept, rejected; /* decisions of the process stages fed by the builder units */
    uint64_t written;        /* records the writers accepted */
    uint64_t dropped;        /* counted drops anywhere */
    uint64_t bytes_built;    /* fragment bytes of the built events */
    uint64_t link_sent;      /* events that left over fabric links to other nodes */
    uint64_t link_received;  /* events that came in over them (equal on the coordinator of a
                                whole run: what one node sent, another delivered) */
    uint32_t nodes;          /* nodes whose figures are summed: 1, or every node on the
                                coordinator of a multi-node run (the others sum their own) */
    bool node_ok;            /* this node's own part of the accounting (below) holds */
    bool accounted; /* generated == built - uncommitted (unless found); every built event a BU
                       handed on was decided (kept, rejected or counted dropped) by the process
                       stages fed by the BUs; every writer wrote, or counted as
                       dropped, each event passed to it; and on a multi-node run,
                       every event sent over a fabric link arrived */
    size_t nstages;
    struct sdd_run_stage_summary *stages;
};

/* Run cfg (every stage of it, on this machine) to the end: configured -> running -> stopped.
 * The run ends after run.events events, after run.duration seconds, or when *o->stop is set
 * or a client posts "stopped"; the sources stop first and everything in flight is built,
 * decided and written before the sinks close. summary receives the figures (free its stages
 * with sdd_run_summary_fini), also when the run failed.
 * cfg goes through sdd_config_validate() first (a config built in code may have skipped it):
 * one that fails is refused before anything starts, every problem logged and the first in
 * summary->reason ("invalid topology (N problems): file:line:col: key: message").
 * Returns SDD_OK; SDD_ENOTSUP (a topology the runtime cannot run yet: the log names the stage
 * and why); SDD_EINVAL; or the error that ended the run. */
SDD_API sdd_err sdd_run_execute(const sdd_config *cfg, const struct sdd_run_opts *o,
                                struct sdd_run_summary *summary);

SDD_API void sdd_run_summary_fini(struct sdd_run_summary *s);

/* The closing summary as a table (text) or one JSON object (json). */
SDD_API void sdd_run_summary_print(FILE *f, const struct sdd_run_summary *s, bool json);

#endif
