/* Internal state of an sdd_ep and the objects attached to it (peers, MRs, listeners, operation
 * slots). Shared by the files of src/fabric; never installed. */
#ifndef SDDAQ_FABRIC_EP_INTERNAL_H
#define SDDAQ_FABRIC_EP_INTERNAL_H

#include <sys/types.h>

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>

#include "fabric/boot_wire.h"
#include "sddaq/fabric.h"

/* libfabric's exported functions, loaded on first use (fi_lib.c). fi_lib_open returns SDD_OK or
 * SDD_ENOPROV (library missing, logged once); the others fail as -FI_ENOSYS or NULL then, and
 * fi_lib_strerror falls back to strerror. Thread-safe. */
sdd_err fi_lib_open(void);
int fi_lib_getinfo(uint32_t version, const struct fi_info *hints, struct fi_info **info);
void fi_lib_freeinfo(struct fi_info *info);
struct fi_info *fi_lib_dupinfo(const struct fi_info *info);
int fi_lib_fabric(struct fi_fabric_attr *attr, struct fid_fabric **fabric);
const char *fi_lib_strerror(int err);

#define EP_TICK_NS (2 * 1000 * 1000ull) /* housekeeping period: liveness and deadlines */
/* A busy poll loop reads the clock (25 ns here) only every this many polls; sleeping waits and
 * sdd_ep_trywait always look at it. */
#define EP_POLLS_PER_CLOCK 16
#define EP_MAX_PEERS       4096
/* After a peer says BYE, messages it sent before may still be queued here: keep delivering
 * them this long before reporting the peer gone. */
#define EP_BYE_GRACE_NS (50 * 1000 * 1000ull)
/* How long closing a peer or endpoint may spend pushing out what is still queued for it. */
#define EP_FLUSH_NS (1000 * 1000 * 1000ull)

enum op_state {
    OP_FREE = 0,
    OP_POSTED,    /* handed to libfabric, completion expected */
    OP_ABANDONED, /* already failed towards the user; a late completion is dropped */
};

/* One posted operation. libfabric returns &fctx as op_context, which leads back here. */
struct ep_op {
    struct fi_context2 fctx; /* first member: op_context == (struct ep_op *) */
    void *ctx;
    sdd_peer *peer;
    uint64_t deadline_ns; /* 0 = none (receives) */
    uint32_t next_free;
    uint8_t kind; /* sdd_cqe_kind */
    uint8_t state;
};

struct sdd_mr {
    sdd_ep *ep;
    struct fid_mr *fid;
    void *desc;
    void *addr;
    size_t len;
    struct sdd_rkey rkey;
    sdd_mr *next; /* ep's list, so close can reclaim forgotten regions */
};

/* A write going out in injected pieces (chunk.c) that found the target's queue full. */
struct ep_chunk {
    const uint8_t *src;
    size_t len, done;
    uint64_t raddr, key, imm;
    void *ctx;
    uint64_t deadline_ns; /* 0 = none */
    sdd_peer *next;       /* ep->chunk_head's list */
    bool with_imm;
    bool active; /* counted in inflight; further writes to this peer wait (SDD_EAGAIN) */
};

struct sdd_peer {
    sdd_ep *ep;
    fi_addr_t addr;
    int sock; /* bootstrap connection kept as liveness channel; -1 after close */
    sdd_err status;
    uint64_t bye_deadline_ns; /* nonzero: the peer said BYE; declared down at this time */
    bool down_reported;
    uint32_t inflight; /* posted operations aimed at this peer */
    uint32_t slot;     /* index in ep->peers */
    void *info;
    size_t info_len;
    char name[64];
    pid_t shm_pid; /* shm: the peer's process, watched while it is a peer (0: none) */
    struct ep_chunk chunk;
};

struct sdd_listener {
    sdd_ep *ep;
    int fd;
    uint16_t port;
    sdd_listener *next;
};

/* Completions made by sddaq itself (injected sends, failures, peer loss) wait here until the
 * next poll hands them out, ahead of the provider's. */
struct cqe_fifo {
    struct sdd_cqe *items;
    uint32_t cap, head, tail; /* head: next to pop; tail: next to push; free-running */
};

struct sdd_ep {
    struct sdd_ep_opts opts;
    struct sdd_ep_info info;
    struct fi_info *fi;
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_ep *fid;
    struct fid_av *av;
    struct fid_cq *cq;
    int cq_fd;     /* native wait fd or -1 */
    int epfd;      /* what sdd_ep_fd returns: cq_fd + peer_epfd */
    int peer_epfd; /* all peer liveness sockets */

    struct ep_op *ops;
    uint32_t nops;
    uint32_t free_head;   /* free list through ep_op.next_free; UINT32_MAX = empty */
    uint32_t posted;      /* ops in OP_POSTED state */
    uint32_t tx_inflight; /* of those, the ones aimed at a peer (not receives) */

    struct cqe_fifo local;

    sdd_peer **peers; /* EP_MAX_PEERS slots, NULL = empty */
    uint32_t npeers;
    uint32_t nclosing; /* peers in their BYE grace period */
    sdd_mr *mrs;
    sdd_listener *listeners;
    uint64_t next_key; /* requested keys when the provider does not choose them */

    sdd_peer *chunk_head; /* peers with a write still going out in pieces (chunk.c) */

    uint64_t next_tick_ns;
    uint32_t polls_to_clock; /* countdown to the next clock read in sdd_ep_poll */
    struct sdd_ep_stats stats;
    char prov_name[64];
    char shm_region[96]; /* shm: the endpoint's region, /dev/shm/NAME; empty otherwise */
};

/* Operation slots (ops.c). */
struct ep_op *ep_op_get(sdd_ep *ep);
void ep_op_put(sdd_ep *ep, struct ep_op *op);
/* Take a posted op out of the in-flight counts (it completed or was failed). */
void ep_op_untrack(sdd_ep *ep, struct ep_op *op);
/* Fail every posted op of peer (or of all peers when peer is NULL) with status. */
void ep_fail_peer_ops(sdd_ep *ep, sdd_peer *peer, sdd_err status);

/* Writes cut into injected pieces (chunk.c). The piece size for this endpoint: the inject
 * size over libfabric's shm without cross-memory attach, else 0 (whole writes). */
size_t ep_choose_write_chunk(const struct fi_info *fi, const char *prov_name);
/* Post a write of len > ep->info.write_chunk as pieces; returns like a post (SDD_EAGAIN when not a
 * byte could go) and completes, or fails, through the local FIFO. */
sdd_err ep_chunk_write(sdd_ep *ep, sdd_peer *peer, const void *buf, size_t len, uint64_t raddr,
                       uint64_t key, bool with_imm, uint64_t imm, void *ctx);
/* Go on with writes that found their target full. */
void ep_chunks_resume(sdd_ep *ep);
/* Housekeeping (ep_tick): declare down a peer whose write in pieces is past its deadline. */
void ep_chunks_expire(sdd_ep *ep, uint64_t now);
/* Fail peer's unfinished write, if any, with status. */
void ep_chunk_fail(sdd_ep *ep, sdd_peer *peer, sdd_err status);

/* Local completion FIFO (cq.c). */
int cqe_fifo_init(struct cqe_fifo *q, uint32_t cap);
void cqe_fifo_fini(struct cqe_fifo *q);
void ep_push_local(sdd_ep *ep, const struct sdd_cqe *cqe);

/* Peers (peer.c). */
void ep_peer_declare_down(sdd_ep *ep, sdd_peer *peer, sdd_err why);
void ep_check_peers(sdd_ep *ep, uint64_t now);
/* SDD_OK when operations may be posted to peer, else why not. */
static inline sdd_err ep_peer_usable(const sdd_peer *peer)
{
    return peer->status != SDD_OK       ? peer->status
           : peer->bye_deadline_ns != 0 ? SDD_ECONNRESET
                                        : SDD_OK;
}
/* Drive progress until nothing is pending towards peer (all peers when NULL) or EP_FLUSH_NS
 * passes; completions read meanwhile are kept for the user when keep is true. */
void ep_flush(sdd_ep *ep, const sdd_peer *peer, bool keep);
sdd_peer *ep_peer_by_addr(sdd_ep *ep, fi_addr_t addr);
void ep_close_all_peers(sdd_ep *ep);
void ep_close_all_listeners(sdd_ep *ep);
/* MRs (mr.c). */
void ep_close_all_mrs(sdd_ep *ep);

/* Run housekeeping if its tick has come (cq.c). */
void ep_tick(sdd_ep *ep, uint64_t now);

/* Convert a libfabric return code (negative FI_E*) to sdd_err. */
sdd_err ep_err_from_fi(int fi_rc);

/* Remove shm regions left in /dev/shm by a killed process that had this PID (shm_stale.c). */
void ep_shm_remove_stale(void);
/* shm: note the endpoint's region file after fi_enable, for sdd_ep_abandon(). */
void ep_shm_note_region(sdd_ep *ep);

/* shm: the region name in an address (without the "fi_shm://" some versions put in front). */
const char *ep_shm_name_base(const char *name);
/* shm: the PID that leads a region name ("PID:...", after an optional "fi_shm://"), or 0;
 * ep_shm_name_pid() the same of a peer's address (not NUL-terminated). Watch it while it is a
 * peer, so that a spin lock it dies holding is released (shm_lock.c). */
pid_t ep_shm_name_owner(const char *name);
pid_t ep_shm_name_pid(const void *addr, size_t len);
/* /proc/PID/stat (pid 0: this process's) read into buf: the fields after the command name,
 * from the state letter on ("S 1 ..."), or NULL when the process is gone (shm_name.c). */
const char *ep_proc_stat(pid_t pid, char *buf, size_t size);
/* shm: whether a process stopped now (a signal, a debugger) maps region `region` (a name
 * under /dev/shm): it may hold the region's lock and come back (shm_stopped.c). */
bool ep_shm_stopped_mapper(const char *region);
void ep_shm_watch(pid_t pid);
void ep_shm_unwatch(pid_t pid);
/* The first component of a layered provider name is want: "tcp;ofi_rxm" is "tcp". */
bool ep_core_name_is(const char *prov_name, const char *want);

#endif
