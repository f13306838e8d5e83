/* The sddaq transport: one API over libfabric reliable-datagram (RDM) endpoints.
 *
 * An sdd_ep owns a libfabric fabric, domain, endpoint, address vector and completion queue. It
 * registers memory (coping with every provider's MR mode), posts sends, receives, RMA writes
 * (optionally carrying 64-bit immediate data to the target's completion queue) and RMA reads,
 * and reports completions in bursts. Peers join through a small TCP bootstrap (listen on
 * host:port, connect by host:port) that exchanges endpoint names and a caller-defined info blob
 * such as memory keys; the bootstrap connection then stays open so that a dead peer is noticed
 * at once, and every initiated operation has a deadline, so a dead or stalled peer always shows
 * up as an error completion within a bounded time, never as a hang.
 *
 * Threading: an sdd_ep and everything attached to it (peers, MRs, listeners) belong to one
 * thread at a time; calls are not internally locked. Use one endpoint per data-path thread.
 *
 * Progress: the software providers (tcp, shm) move one-sided operations only while the target
 * polls. A process that exposes registered memory must keep calling sdd_ep_poll() or
 * sdd_ep_wait() (an event loop or a progress thread), even if it posts nothing itself. */
#ifndef SDDAQ_FABRIC_H
#define SDDAQ_FABRIC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "sddaq/api.h"
#include "sddaq/err.h"

typedef struct sdd_ep sdd_ep;
typedef struct sdd_mr sdd_mr;
typedef struct sdd_peer sdd_peer;
typedef struct sdd_listener sdd_listener;

/* How sdd_ep_wait() waits for completions. */
typedef enum {
    SDD_WAIT_ADAPTIVE = 0, /* spin for spin_us, then sleep on the completion fd (default) */
    SDD_WAIT_SPIN,         /* busy-poll until the timeout: lowest latency, burns a core */
    SDD_WAIT_BLOCK,        /* sleep on the fd at once: lowest CPU use */
} sdd_wait_mode;

struct sdd_ep_opts {
    const char *provider;     /* "tcp", "shm", "verbs", "efa", ..., "auto" or NULL (= auto) */
    const char *domain;       /* optional domain/interface name, e.g. "lo", "mlx5_0" */
    uint32_t tx_depth;        /* operations in flight (default 1024; capped at the provider's
                                 maximum, see sdd_ep_info()->tx_depth) */
    uint32_t rx_depth;        /* receives posted at once (default 1024; capped likewise) */
    uint32_t op_timeout_ms;   /* an initiated op not done by then fails (default 10000; 0 off) */
    uint32_t peer_timeout_ms; /* a silent peer host is declared dead after ~this (default 5000) */
    sdd_wait_mode wait_mode;  /* default SDD_WAIT_ADAPTIVE */
    uint32_t spin_us;         /* adaptive mode: spin this long before sleeping (default 50) */
};

/* What the endpoint ended up with; valid while the endpoint is open. */
struct sdd_ep_info {
    const char *provider; /* e.g. "tcp;ofi_rxm", "shm" */
    const char *fabric;   /* fabric name, e.g. "127.0.0.1/32" */
    const char *domain;   /* domain name, e.g. "lo" */
    size_t max_msg_size;
    size_t inject_size;  /* sends up to this size complete at once (copied by the provider) */
    size_t cq_data_size; /* bytes of immediate data carried by sdd_ep_post_write_imm (4 or 8) */
    uint32_t tx_depth, rx_depth;
    bool mr_virt_addr; /* remote addresses are virtual addresses (else offsets) */
    bool mr_prov_key;  /* keys are chosen by the provider (else by sddaq) */
    bool mr_local;     /* local buffers must be registered (pass an sdd_mr) */
    bool mr_endpoint;  /* regions are bound to the endpoint */
    bool rx_cq_data;   /* immediate data consumes a posted receive (FI_RX_CQ_DATA) */
    bool source_addr;  /* receive completions name their source peer */
    bool wait_fd;      /* the completion queue has a native wait fd (else timed polling) */
    bool send_after_write; /* a send posted after a write reaches the target after its data */
    bool write_imm_ok;     /* writes with immediate data are safe to announce data with: false where
                              libfabric 1.17 mishandles them (docs/fabric.md) */
    size_t write_chunk;    /* nonzero: writes larger than this leave as injected pieces of this
                              size, so a dead target cannot hold the endpoint (shm without
                              cross-memory attach; docs/fabric.md) */
};

/* Fill opts with the defaults above. */
SDD_API void sdd_ep_opts_default(struct sdd_ep_opts *opts);

/* Open an endpoint on the named provider; opts may be NULL for all defaults. "auto" picks the
 * first present of: cxi, efa, verbs, psm3, opx, psm2, tcp (hardware first, tcp as the portable
 * fallback; shm only when named, since it cannot leave the host). The environment variable
 * FI_PROVIDER, when set, restricts what libfabric offers. Returns SDD_ENOPROV when the provider
 * is absent or lacks RDM endpoints with messages and RMA. Blocks briefly. */
SDD_API sdd_err sdd_ep_open(const struct sdd_ep_opts *opts, sdd_ep **out);

/* Close the endpoint: says BYE to connected peers, closes peers, listeners and MRs still open
 * (their handles become invalid), then frees everything. NULL is ignored. */
SDD_API void sdd_ep_close(sdd_ep *ep);

/* Give up on an endpoint that cannot be closed, because a thread is stuck inside the provider
 * with it (a peer killed while holding one of shm's locks): it stays open and allocated for
 * good, but what would outlive the process goes now, i.e. shm's 16 MiB region in /dev/shm
 * (mappings already made stay valid; no new peer can reach it). Do not use it for new
 * connections afterwards. NULL is ignored. */
SDD_API void sdd_ep_abandon(sdd_ep *ep);

SDD_API const struct sdd_ep_info *sdd_ep_info(const sdd_ep *ep);

/* Remove the shared-memory regions (/dev/shm/PID:...) that the shm provider made for process
 * pid, a child already reaped with waitpid(). A process that exits removes its own; one that
 * is killed leaves them behind, 16 MiB each. Launchers call this for every child that died of
 * a signal. Returns how many were removed. */
SDD_API int sdd_fabric_release_shm_of(pid_t pid);

/* shm (libfabric 1.17): spin locks found held inside this process's shm regions after a peer
 * died, with nobody alive to release them, that this process released (docs/fabric.md). */
SDD_API uint64_t sdd_fabric_shm_locks_released(void);
/* shm: peer processes this process killed because one of them, stopped (SIGSTOP), held such a
 * lock for the fence time (SDDAQ_SHM_FENCE_MS, default 3000; 0: never) and so held up
 * everyone else. */
SDD_API uint64_t sdd_fabric_shm_peers_fenced(void);
/* shm: lower this process's fence time to ms (at least 100), so that a stopped peer holding a
 * lock holds this process up for about that long at most (plus 100 ms to release the lock
 * after the kill, and half the fence time to notice the stop). Never raises it, and leaves a
 * fence turned off (SDDAQ_SHM_FENCE_MS=0) off. The event builder sets dead_ms / 8, so that
 * such a stall ends well inside its leases (docs/evb.md). */
SDD_API void sdd_fabric_shm_fence_within(unsigned ms);

/* ---- memory registration ------------------------------------------------------------------ */

enum {
    SDD_ACCESS_LOCAL = 1,        /* buffer for send, recv, write source, read destination */
    SDD_ACCESS_REMOTE_READ = 2,  /* peers may read it */
    SDD_ACCESS_REMOTE_WRITE = 4, /* peers may write it */
    SDD_ACCESS_ALL = 7,
};

/* What a peer needs to address a registered region. Plain data: ship it in the bootstrap info
 * blob or in a message. addr is the address to pass for offset 0 (a virtual address or 0,
 * depending on the provider's MR mode). */
struct sdd_rkey {
    uint64_t addr;
    uint64_t key;
    uint64_t len;
};

/* Register [buf, buf+len) with the given SDD_ACCESS_* bits. The caller keeps owning the memory
 * and must keep it valid until sdd_mr_close(). SDD_EINVAL for len 0 or no access bits. */
SDD_API sdd_err sdd_mr_reg(sdd_ep *ep, void *buf, size_t len, unsigned access, sdd_mr **out);

/* Deregister; NULL is ignored. No operation using the region may be in flight. */
SDD_API void sdd_mr_close(sdd_mr *mr);

/* The remote key of a region, for peers. */
SDD_API void sdd_mr_rkey(const sdd_mr *mr, struct sdd_rkey *out);
SDD_API void *sdd_mr_addr(const sdd_mr *mr);
SDD_API size_t sdd_mr_len(const sdd_mr *mr);

/* ---- peers and bootstrap ------------------------------------------------------------------ */

/* Listen for peers on host:port (host NULL = all interfaces; port 0 = any free port, read it
 * back with sdd_listener_port). The listener belongs to ep. */
SDD_API sdd_err sdd_ep_listen(sdd_ep *ep, const char *host, uint16_t port, sdd_listener **out);
SDD_API uint16_t sdd_listener_port(const sdd_listener *l);
/* Readable when a peer is waiting to be accepted (for event loops). */
SDD_API int sdd_listener_fd(const sdd_listener *l);
SDD_API void sdd_listener_close(sdd_listener *l);

/* Accept one peer within timeout_ms (< 0 = forever), sending it info (info_len <= 64 KiB,
 * copied) and receiving its info. Errors: SDD_ETIMEDOUT, SDD_EPROTO (garbage from the other
 * side), SDD_ECONNRESET (it closed early), SDD_ECONNREFUSED (it rejected us, e.g. provider
 * mismatch). A failed accept leaves the listener usable. */
SDD_API sdd_err sdd_listener_accept(sdd_listener *l, const void *info, size_t info_len,
                                    int timeout_ms, sdd_peer **out);

/* Connect to a peer listening at host:port, exchanging info blobs as above. Errors as for
 * accept, plus SDD_ECONNREFUSED when nobody listens there and SDD_EINVAL for a bad host. */
SDD_API sdd_err sdd_ep_connect(sdd_ep *ep, const char *host, uint16_t port, const void *info,
                               size_t info_len, int timeout_ms, sdd_peer **out);

/* The info blob the peer sent; valid until the peer is closed. */
SDD_API const void *sdd_peer_info(const sdd_peer *peer, size_t *len);
/* "ip:port" of the peer's bootstrap connection, for messages. */
SDD_API const char *sdd_peer_name(const sdd_peer *peer);
/* SDD_OK while the peer is usable; otherwise why it is not (SDD_EPEERDEAD, SDD_ECONNRESET for
 * a peer that closed on purpose, SDD_ETIMEDOUT for one that stopped progressing). */
SDD_API sdd_err sdd_peer_status(const sdd_peer *peer);

/* Say BYE, fail the peer's pending operations with SDD_ECANCELED and forget it. NULL ok. What
 * was posted to a live peer gets up to a second to leave first. */
SDD_API void sdd_peer_close(sdd_peer *peer);
/* The same for a peer given up (dead, hung, cut off): its pending operations fail at once,
 * without the wait for them to leave, which a peer that does not answer would make last the
 * whole second. NULL ok. */
SDD_API void sdd_peer_abort(sdd_peer *peer);

/* ---- data movement -------------------------------------------------------------------------
 * Every post returns SDD_OK (a completion carrying ctx will follow), SDD_EAGAIN (queues full:
 * poll completions and retry), SDD_EPEERDEAD / SDD_ECONNRESET / SDD_ETIMEDOUT (the peer is
 * gone; nothing was posted) or SDD_EINVAL. Buffers stay owned by the caller and must not be
 * touched until the operation's completion arrives. mr is the registration covering buf; it
 * may be NULL only when sdd_ep_info()->mr_local is false. None of these block. */

/* Pass as ctx to skip the completion of an operation that succeeds (an "unsignaled" send or
 * write): it saves a completion record and a queue read per operation where nobody waits for
 * it, as for ping-pong replies or credits. Failures are still reported, with this ctx. */
#define SDD_CTX_SILENT ((void *)-1)

SDD_API sdd_err sdd_ep_post_send(sdd_ep *ep, sdd_peer *peer, const void *buf, size_t len,
                                 sdd_mr *mr, void *ctx);
/* Post a receive for the next message from any peer. Its completion names the peer when the
 * provider reports sources (sdd_ep_info()->source_addr). */
SDD_API sdd_err sdd_ep_post_recv(sdd_ep *ep, void *buf, size_t len, sdd_mr *mr, void *ctx);
/* One-sided write of len bytes to rkey's region at offset. */
SDD_API sdd_err sdd_ep_post_write(sdd_ep *ep, sdd_peer *peer, const void *buf, size_t len,
                                  sdd_mr *mr, const struct sdd_rkey *rkey, uint64_t offset,
                                  void *ctx);
/* As sdd_ep_post_write, and the target gets an SDD_CQE_REMOTE_WRITE completion carrying imm
 * once the data is in place. imm must fit in sdd_ep_info()->cq_data_size bytes. */
SDD_API sdd_err sdd_ep_post_write_imm(sdd_ep *ep, sdd_peer *peer, const void *buf, size_t len,
                                      sdd_mr *mr, const struct sdd_rkey *rkey, uint64_t offset,
                                      uint64_t imm, void *ctx);
/* One-sided read of len bytes from rkey's region at offset into buf. */
SDD_API sdd_err sdd_ep_post_read(sdd_ep *ep, sdd_peer *peer, void *buf, size_t len, sdd_mr *mr,
                                 const struct sdd_rkey *rkey, uint64_t offset, void *ctx);

/* ---- completions -------------------------------------------------------------------------- */

typedef enum {
    SDD_CQE_SEND = 1,
    SDD_CQE_RECV,
    SDD_CQE_WRITE,
    SDD_CQE_READ,
    SDD_CQE_REMOTE_WRITE, /* a peer's write_imm landed here; ctx is NULL unless rx_cq_data */
    SDD_CQE_PEER_DOWN,    /* a peer died or left; status says why; ctx NULL */
} sdd_cqe_kind;

struct sdd_cqe {
    void *ctx;      /* the ctx given to the post call */
    sdd_peer *peer; /* the peer involved, NULL when unknown */
    uint64_t imm;   /* REMOTE_WRITE: the immediate data */
    size_t len;     /* RECV: bytes received; REMOTE_WRITE: bytes written */
    sdd_err status; /* SDD_OK, or why the operation failed */
    sdd_cqe_kind kind;
};

/* Drive progress and return up to max completions without blocking: a count >= 0, or a
 * negative sdd_err if the endpoint itself failed. Also notices dead peers and expired
 * operations, which come back as error completions. */
SDD_API int sdd_ep_poll(sdd_ep *ep, struct sdd_cqe *cqes, int max);

/* Like sdd_ep_poll but waits up to timeout_ms (< 0 = forever) for at least one completion,
 * according to the wait mode. Returns 0 on timeout. */
SDD_API int sdd_ep_wait(sdd_ep *ep, struct sdd_cqe *cqes, int max, int timeout_ms);

/* A file descriptor that becomes readable when sdd_ep_poll() may have work (completions, peer
 * events). For event loops: call sdd_ep_poll() until it returns 0, then sdd_ep_trywait(); if
 * that returns SDD_OK, sleep on the fd (with a timeout no longer than sdd_ep_tick_ms(), which
 * covers providers without a native wait fd and the housekeeping of deadlines). */
SDD_API int sdd_ep_fd(const sdd_ep *ep);
SDD_API sdd_err sdd_ep_trywait(sdd_ep *ep);
/* Writes still going out in pieces (sdd_ep_info()->write_chunk) because their target's queue
 * was full. The target frees room without telling this side, so while this is nonzero
 * sdd_ep_trywait() returns SDD_EAGAIN: poll again soon (yield the CPU if others need it)
 * instead of sleeping on the fd. */
SDD_API uint32_t sdd_ep_writes_in_pieces(const sdd_ep *ep);
SDD_API int sdd_ep_tick_ms(const sdd_ep *ep);

/* Counters for monitoring. */
struct sdd_ep_stats {
    uint64_t posted, completed, failed;
    uint64_t timed_out;        /* operations failed by their deadline */
    uint64_t peers_lost;       /* peers declared dead or gone */
    uint64_t late_completions; /* provider completions for operations already failed */
    uint64_t eagain;           /* posts refused because queues were full */
};
SDD_API void sdd_ep_stats(const sdd_ep *ep, struct sdd_ep_stats *out);

/* Does libfabric's shm provider copy by cross-memory attach here (process_vm_readv: the
 * initiator of a transfer copies), or through the target's bounce buffers (FI_SHM_DISABLE_CMA
 * set, or Yama's ptrace_scope > 0)? */
SDD_API bool sdd_shm_has_cma(void);

/* Names for sdd_cqe_kind, for logs. */
SDD_API const char *sdd_cqe_kind_name(sdd_cqe_kind kind);

#endif
