/* Event builder internals shared by node.c (bootstrap, control messages, the loop), ru.c and
 * bu.c. Never installed. */
#ifndef SDDAQ_EVB_INTERNAL_H
#define SDDAQ_EVB_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "sddaq/evb.h"
#include "sddaq/fabric.h"

#define EVB_CTL_MAGIC   0x4C544345u /* "ECTL" */
#define EVB_HELLO_MAGIC 0x4F4C4845u /* "EHLO" */
#define EVB_CTL_RX      256         /* control receives posted at once */
#define EVB_CTL_TX      1024        /* control sends in flight */
#define EVB_CTL_BATCH   8           /* control records per fabric message, at most */
/* Regular slots per RU per BU, at most (and as many for re-sends). */
#define EVB_MAX_CREDITS SDD_EVB_MAX_CREDITS
/* Auto credits (sdd_evb_credits): the most, and the bulk memory a host may hold with them.
 * Measured (docs/PERFORMANCE.md, session 22): past this VM's 32 MiB L3 the copies miss it, and
 * 4 shm nodes with 4 KiB fragments built 25 % more events/s with 2 credits (30 MB) than with 4
 * (55 MB), 9 % more at 8 KiB with 1 than 2; below it 2 or 4 made no difference. A constant, not
 * this host's cache size: every node must reach the same credits (the options' hash). */
#define EVB_AUTO_CREDITS 4
#define EVB_CACHE_BYTES  (32ull << 20)
/* Where BUs read the bulks over shm (a CPU per node), each bulk costs an announcement, a read
 * and its completion, and small bulks keep the copies busy only with more of them in flight:
 * auto takes up to EVB_READ_CREDITS, as many as keep EVB_READ_INFLIGHT bytes of slots per RU
 * and BU (never fewer than EVB_AUTO_CREDITS), then the cache budget. Measured (session 23,
 * pairs, 2 nodes): 1 KiB x 64 events 1.06-1.13x with 12-16 credits against 4, 2 KiB 1.04x
 * with 8, 4 KiB 0.93x with 8 (4 is its 1 MiB); over tcp and with more nodes than CPUs, where
 * the RUs write, 8-16 made no difference or lost (0.98-1.00, 0.97). */
#define EVB_READ_CREDITS  16
#define EVB_READ_INFLIGHT (1ull << 20)
#define EVB_ACK_MEMORY  (2 * EVB_MAX_CREDITS) /* built bulks an RU remembers per BU */

static inline size_t evb_frag_bytes(uint32_t payload)
{
    return (sizeof(struct sdd_evb_frag_hdr) + (size_t)payload + SDD_EVB_ALIGN - 1) &
           ~(size_t)(SDD_EVB_ALIGN - 1);
}

uint64_t evb_mix64(uint64_t x);

/* format.c: the checks a BU makes of bytes an RU wrote into its slot (fuzzed by
 * tests/fuzz/fuzz_evb_bulk.c). A bulk of avail bytes must be bulk k of RU `ru` in a run of
 * `events` events in bulks of `bulk`, k < nbulks; its header and metadata must lie inside. */
/* EVB_BULK_PAST_END: a header of that RU whose bulk id lies past the run's end (the RU did not
 * agree on the end: the run split); anything else wrong is EVB_BULK_MALFORMED. */
enum evb_bulk_verdict { EVB_BULK_OK, EVB_BULK_MALFORMED, EVB_BULK_PAST_END };
enum evb_bulk_verdict evb_bulk_check(const void *p, size_t avail, uint32_t ru, uint32_t bulk,
                                     uint64_t events);
/* evb_bulk_check() == EVB_BULK_OK. */
bool evb_bulk_header_ok(const void *p, size_t avail, uint32_t ru, uint32_t bulk, uint64_t events);
/* Entry i of a bulk that passed evb_bulk_header_ok: for event `id`, and its fragment inside
 * the bulk after the metadata. */
bool evb_bulk_entry_ok(const void *p, uint32_t i, uint64_t id);

enum ctl_type { CTL_HB = 1, CTL_ACK, CTL_DONE, CTL_BULK, CTL_BUILT, CTL_PULL };
#define EVB_HB_ANSWER_NOW 1u /* HB field c: echo this one at once, not at the next beat */

/* Control record, 32 bytes; a fabric message carries 1 to EVB_CTL_BATCH of them (ctl.c). */
struct evb_ctl {
    uint32_t magic;
    uint16_t type;
    uint16_t from; /* sender's node index */
    uint64_t a;    /* ACK, BULK, BUILT: bulk id; DONE: bulks in the run; HB: sender's clock */
    uint32_t b;    /* ACK, BULK: slot */
    uint32_t c;    /* ACK: 1 = duplicate or late (slot freed, bulk not built here);
                      BULK: bytes written into the slot; PULL: bytes to read */
    uint64_t d;    /* PULL: the bulk's offset in the RU's pool; HB: the last `a` of the
                      receiver's heartbeats the sender had (the echo a lease is made of) */
};

/* Bootstrap info blob. */
struct evb_hello {
    uint32_t magic;
    uint32_t node;
    uint64_t cfg_hash;     /* every option that both sides must agree on */
    struct sdd_rkey slots; /* the BU slot region (len 0 when the node has no BU) */
    struct sdd_rkey pool;  /* the RU bulk pool, for BUs that read (len 0: no RU, or writes) */
};

/* Operation tags: every completion's ctx points at one. */
enum tag_kind { TAG_CTL_RX = 1, TAG_CTL_TX, TAG_BULK, TAG_PULL };
struct evb_tag {
    uint8_t kind;
    uint32_t idx;
};

struct evb_peer {
    sdd_peer *peer;
    bool alive;
    bool done; /* its RU said DONE */
    uint64_t last_rx_ns;
    uint64_t echo_ns;          /* the newest clock value its heartbeats carried */
    uint64_t lease_until_ns;   /* our lease from it (lease.c): until then it has not given us up */
    uint64_t lease_echo_ns;    /* our clock value whose echo extended it */
    bool hb_answered;          /* its first heartbeat got an immediate one back */
    struct sdd_rkey slots;
    struct sdd_rkey pool;
};

struct evb_ru;
struct evb_bu;
struct evb_pull;

struct sdd_evb_node {
    struct sdd_evb_opts o;
    sdd_ep *ep;
    sdd_listener *lis;
    const struct sdd_ep_info *info;
    uint32_t self;
    uint32_t nru, nbu;
    int ru_of[SDD_EVB_MAX_NODES]; /* node -> RU index or -1 */
    int bu_of[SDD_EVB_MAX_NODES]; /* node -> BU index or -1 */
    uint32_t ru_node[SDD_EVB_MAX_NODES];
    uint32_t bu_node[SDD_EVB_MAX_NODES];
    struct evb_peer peers[SDD_EVB_MAX_NODES];
    uint64_t nbulks;      /* bulks in the run */
    size_t slot_size;     /* bytes of one bulk slot */
    uint32_t max_payload; /* payload room of one fragment in a slot */
    uint64_t cfg_hash;
    bool connected;
    sdd_evb_announce announce; /* how a BU learns that a written bulk is in its slot */
    bool huge_pages; /* RU pool and BU slots on huge pages (sdd_bigbuf_huge_for) */
    bool pull;       /* BUs read announced bulks from the RUs' pools (else RUs write them) */
    uint64_t spin_ns; /* adaptive wait: how long idle() polls before it yields or sleeps */
    /* control messages */
    sdd_mr *ctl_mr;
    struct evb_ctl *ctl_rx, *ctl_tx;
    struct evb_tag ctl_rx_tag[EVB_CTL_RX], ctl_tx_tag[EVB_CTL_TX];
    bool ctl_tx_busy[EVB_CTL_TX];
    uint32_t ctl_tx_next;
    struct evb_ctl stage[SDD_EVB_MAX_NODES][EVB_CTL_BATCH]; /* per peer, this loop turn */
    uint8_t nstaged[SDD_EVB_MAX_NODES];
    uint32_t staged;
    struct evb_ctl *backlog; /* control messages refused with EAGAIN, sent later */
    uint32_t *backlog_to;
    uint32_t backlog_n, backlog_cap;
    uint64_t next_hb_ns;
    uint64_t lease_ns;      /* dead_ms / 2 (lease.c) */
    uint64_t last_turn_ns;  /* when the last poll turn began */
    uint64_t pause_end_ns;  /* when this process last came back from a stall (0 = never) */
    bool fenced;            /* it gave up its bulks: the run is over for it (SDD_EFENCED) */
    _Atomic bool gave_up[SDD_EVB_MAX_NODES]; /* peers declared dead (sdd_evb_node_gave_up) */
    struct evb_ru *ru;
    struct evb_bu *bu;
    struct evb_pull *pl; /* the BU's reads when pulling */
    struct sdd_evb_stats st;
};

/* Count a bulk dropped as bad; true when it should be said: at the 1st, 2nd, 4th, 8th ... so
 * that a stream of them (a corrupt or split run) cannot flood the log. */
static inline bool evb_count_bad(struct sdd_evb_node *n)
{
    uint64_t c = ++n->st.bulks_bad;
    return (c & (c - 1)) == 0;
}

/* ctl.c: records are staged per peer and leave at evb_ctl_flush, which the node loop calls
 * every turn (and before it waits or ends). */
void evb_ctl_send(struct sdd_evb_node *n, uint32_t to_node, uint16_t type, uint64_t a, uint32_t b,
                  uint32_t c);
/* The same with the fourth field (CTL_PULL's pool offset). */
void evb_ctl_send_d(struct sdd_evb_node *n, uint32_t to_node, uint16_t type, uint64_t a,
                    uint32_t b, uint32_t c, uint64_t d);
/* Send what is staged and what waits in the backlog; returns messages sent. */
int evb_ctl_flush(struct sdd_evb_node *n);
/* Nothing staged, nothing waiting. */
bool evb_ctl_idle(const struct sdd_evb_node *n);

/* node.c */
/* Declare node `node` dead (idempotent): close its peer and tell the RU and BU. */
void evb_peer_dead(struct sdd_evb_node *n, uint32_t node, const char *why);

/* lease.c: a BU delivers only while every live remote RU has recently echoed one of its own
 * heartbeats, so that it never delivers a bulk an RU has already given to another BU; and a
 * BU that may have been given up (it stalled, or it is cut off from every RU) fences itself. */
/* A heartbeat from peer `node`: a = its clock, d = its echo of ours. Answers a first one. */
void evb_lease_on_hb(struct sdd_evb_node *n, uint32_t node, uint64_t a, uint64_t d, uint32_t c,
                     uint64_t now);
/* A heartbeat to every live remote RU that asks for an echo at once (c = EVB_HB_ANSWER_NOW). */
void evb_lease_ask_now(struct sdd_evb_node *n, uint64_t now);
/* Called at the start of every poll turn: notes stalls of this process. */
void evb_lease_turn(struct sdd_evb_node *n, uint64_t now);
/* The lease from node `node` holds at `now`: a BU may read what that RU announced. */
bool evb_lease_from(const struct sdd_evb_node *n, uint32_t node, uint64_t now);
/* Every live remote RU's lease holds at `now`: the BU may deliver. */
bool evb_lease_ok(const struct sdd_evb_node *n, uint64_t now);
/* Every live remote RU's lease holds and comes from an echo of our clock at t or later. */
bool evb_lease_echoed_since(const struct sdd_evb_node *n, uint64_t t, uint64_t now);
/* This process came back from a stall only once the lease from `node` had lapsed. */
bool evb_lease_stalled_past(const struct sdd_evb_node *n, uint32_t node);
/* Remote RU node `node` is being lost (closed or silent): true when this BU cannot tell that
 * RU's failure from having been given up itself, and must fence instead of building without
 * it. */
bool evb_lease_must_fence(const struct sdd_evb_node *n, uint32_t node, uint64_t now);

/* ru.c */
sdd_err evb_ru_create(struct sdd_evb_node *n);
void evb_ru_destroy(struct sdd_evb_node *n);
sdd_mr *evb_ru_mr(const struct sdd_evb_node *n);
/* Generate and send what can be; returns work done (0 = idle). */
int evb_ru_step(struct sdd_evb_node *n, uint64_t now);
void evb_ru_on_ack(struct sdd_evb_node *n, uint32_t bu, uint64_t bulk_id, uint32_t slot, bool dup);
void evb_ru_on_write_done(struct sdd_evb_node *n, uint32_t idx, sdd_err status);
void evb_ru_on_bu_dead(struct sdd_evb_node *n, uint32_t bu);
bool evb_ru_finished(const struct sdd_evb_node *n);
/* Nanoseconds until the rate limiter lets the next event out (0 = now or no limit). */
uint64_t evb_ru_wait_ns(const struct sdd_evb_node *n, uint64_t now);
/* Run end decided late (sdd_evb_node_hold/_end): stop generating; bulks generated so far;
 * the run has `bulks` bulks (n->nbulks already set), go on up to there. */
void evb_ru_hold(struct sdd_evb_node *n);
uint64_t evb_ru_generated(const struct sdd_evb_node *n);
sdd_err evb_ru_end(struct sdd_evb_node *n, uint64_t bulks);
void evb_ru_resume(struct sdd_evb_node *n);
sdd_err evb_ru_hold_at(struct sdd_evb_node *n, uint64_t bulks);

/* bu.c */
sdd_err evb_bu_create(struct sdd_evb_node *n);
void evb_bu_destroy(struct sdd_evb_node *n);
sdd_mr *evb_bu_mr(const struct sdd_evb_node *n);
/* Slot `slot` of RU `ru` in the BU's region (both already checked). */
uint8_t *evb_bu_slot(const struct sdd_evb_node *n, uint32_t ru, uint32_t slot);
/* A remote RU's bulk landed in slot (ru, slot). */
void evb_bu_on_write(struct sdd_evb_node *n, uint32_t ru, uint32_t slot, size_t len);
/* The local RU hands over a bulk by pointer; it stays the RU's until evb_ru_on_ack. */
void evb_bu_on_local(struct sdd_evb_node *n, uint32_t ru, const void *bulk, size_t len);
void evb_bu_on_ru_gone(struct sdd_evb_node *n, uint32_t ru, bool dead);
/* Bulk k was built by a BU that died since: acknowledge its re-sends as duplicates. */
void evb_bu_on_built_elsewhere(struct sdd_evb_node *n, uint64_t k);
int evb_bu_step(struct sdd_evb_node *n, uint64_t now);
void evb_bu_acks_left(struct sdd_evb_node *n);
bool evb_bu_finished(const struct sdd_evb_node *n);
/* Drop every bulk held, unbuilt and unacknowledged (their RUs re-send them elsewhere). */
void evb_bu_fence(struct sdd_evb_node *n);
/* Building time spent inside the local RU's step since the last call. */
uint64_t evb_bu_take_local_ns(struct sdd_evb_node *n);

/* bu_pull.c: with n->pull the BU reads each announced bulk into its slot itself, so the first
 * touch of the fragment headers finds them in this core's cache. */
sdd_err evb_pull_create(struct sdd_evb_node *n);
void evb_pull_destroy(struct sdd_evb_node *n);
/* RU `ru` announced bulk `bulk_id`, `len` bytes at `off` in its pool, for slot `slot`; now:
 * the loop turn's clock, for the lease the read waits for. */
void evb_pull_on_announce(struct sdd_evb_node *n, uint32_t ru, uint32_t slot, uint32_t len,
                          uint64_t off, uint64_t bulk_id, uint64_t now);
void evb_pull_on_done(struct sdd_evb_node *n, uint32_t idx, sdd_err status);
/* Post the reads the endpoint refused before; returns how many went. */
int evb_pull_step(struct sdd_evb_node *n);
/* Reads in flight or waiting to be posted. */
uint32_t evb_pull_busy(const struct sdd_evb_node *n);

#endif
