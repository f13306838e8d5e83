/* Remote memory objects over the sddaq transport (KIRO parity and beyond).
 *
 * - Server/client: a server publishes one memory region; any number of clients connect, learn
 *   its size and keys, and copy all of it or a byte range into a local mirror by RMA read. The
 *   server may resize or move the region; clients follow on their next call.
 * - Transmittable ring (TRB): fixed-size cells whose write state lives in a header inside the
 *   same memory, so the raw bytes can be shipped and adopted elsewhere. Every cell carries a
 *   sequence number written before and after its payload, so a reader can tell a torn cell.
 * - Self-synchronizing buffer (KSB): a 3-cell TRB on a server; a clone polls only the header
 *   and fetches only new elements, and never delivers a torn one.
 * - Messenger: peers exchange blocks of any size (small ones inline, large ones by rendezvous
 *   and RMA read) with receive and completion callbacks.
 *
 * Byte layouts of the ring and the control messages are in docs/formats.md. */
#ifndef SDDAQ_RMEM_H
#define SDDAQ_RMEM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sddaq/api.h"
#include "sddaq/err.h"
#include "sddaq/fabric.h"
#include "sddaq/hist.h"

/* ---- common options ----------------------------------------------------------------------- */

struct sdd_rmem_opts {
    const char *provider;    /* fabric provider: "shm", "tcp", ..., "auto" or NULL (= auto) */
    const char *host;        /* listening side: address to bind (NULL = all interfaces) */
    uint16_t port;           /* listening side: port (0 = any free port) */
    uint32_t timeout_ms;     /* connect, ping and control round trips (default 2000) */
    uint32_t grace_ms;       /* server: how long a region change waits for client ACKs
                                before it drops the silent clients (default 2000) */
    uint32_t max_clients;    /* server: refuse clients beyond this many (default 256) */
    bool progress_thread;    /* server: drive the endpoint from an internal thread
                                (default true); else call sdd_rmem_server_progress() */
    sdd_wait_mode wait_mode; /* how waits for completions wait (default adaptive) */
    uint32_t spin_us;        /* adaptive waits spin this long before sleeping (default 50) */
    bool map_local;          /* client: when the server is on this host and owns its region,
                                map it read-only and copy with plain loads instead of RMA
                                (default false; falls back to RMA when not allowed) */
};

/* Fill opts with the defaults above. */
SDD_API void sdd_rmem_opts_default(struct sdd_rmem_opts *opts);

/* ---- server ------------------------------------------------------------------------------- */

typedef struct sdd_rmem_server sdd_rmem_server;

struct sdd_rmem_server_stats {
    uint64_t clients_now, clients_total;
    uint64_t clients_lost;    /* clients that died or left */
    uint64_t clients_refused; /* beyond max_clients, or a bad HELLO */
    uint64_t clients_dropped; /* dropped for not acknowledging a region change in time */
    uint64_t pings;           /* pings answered */
    uint64_t region_changes;  /* resizes and moves */
    uint64_t bad_messages;    /* malformed or unexpected control messages (counted, ignored) */
    uint64_t stalled_ms;      /* how long the progress thread has been inside one round (0 when
                                 idle or quick); seconds mean the provider hangs (docs/rmem.md) */
};

/* Publish len bytes. region NULL: the server allocates them (page aligned, zeroed) and owns
 * them; otherwise the caller's memory is published and stays the caller's (it must outlive the
 * server or the next sdd_rmem_server_move()). Listens on opts->host:opts->port.
 * Errors: SDD_EINVAL (len 0), SDD_ENOMEM, SDD_ENOPROV, SDD_EOS (bind failed), fabric errors. */
SDD_API sdd_err sdd_rmem_server_open(const struct sdd_rmem_opts *opts, void *region, size_t len,
                                     sdd_rmem_server **out);

/* The published region and its length. Writing to it needs no call: clients read whatever is
 * there when their read runs (use a TRB/KSB for consistent elements). */
SDD_API void *sdd_rmem_server_region(const sdd_rmem_server *srv, size_t *len);

/* The port the server listens on (useful with port 0). */
SDD_API uint16_t sdd_rmem_server_port(const sdd_rmem_server *srv);

/* Resize a server-owned region to len bytes, keeping min(old, new) bytes of content; or move
 * the publication to the caller's region (which the caller keeps owning). Clients are told at
 * once; the call blocks until each has acknowledged (it switches on its next call) or grace_ms
 * has passed, after which silent clients are dropped. After return no client reads the old
 * region, so the caller may free old memory it owned.
 * Errors: SDD_EINVAL (len 0; resize of caller memory), SDD_ENOMEM, SDD_ETIMEDOUT (the
 * progress thread did not give up the endpoint within timeout_ms), fabric errors. */
SDD_API sdd_err sdd_rmem_server_resize(sdd_rmem_server *srv, size_t len);
SDD_API sdd_err sdd_rmem_server_move(sdd_rmem_server *srv, void *region, size_t len);

/* Without a progress thread: accept clients, answer pings and drive RMA progress for up to
 * timeout_ms (0 = once, without blocking). Software providers (tcp, shm without CMA) serve
 * client reads only while the server drives progress. Returns SDD_OK or a fatal error. */
SDD_API sdd_err sdd_rmem_server_progress(sdd_rmem_server *srv, int timeout_ms);

SDD_API void sdd_rmem_server_stats(sdd_rmem_server *srv, struct sdd_rmem_server_stats *out);

/* Say BYE to every client (they see SDD_ECONNRESET), stop the thread and free. NULL ok. A
 * progress thread stuck inside the provider for longer than timeout_ms is abandoned (logged;
 * its memory is not freed) rather than waited for. */
SDD_API void sdd_rmem_server_close(sdd_rmem_server *srv);

/* ---- client ------------------------------------------------------------------------------- */

typedef struct sdd_rmem_client sdd_rmem_client;

struct sdd_rmem_client_stats {
    uint64_t syncs, bytes;   /* completed sync calls and bytes read */
    uint64_t region_changes; /* region changes followed */
    uint64_t reconnects;     /* reconnects after the server dropped this client */
    uint64_t bad_messages;
};

/* Connect to a server and allocate a local mirror of the region's size (contents zero until
 * the first sync). One client belongs to one thread at a time.
 * Errors: SDD_ECONNREFUSED, SDD_ETIMEDOUT, SDD_EPROTO (not an rmem server), SDD_EBUSY (server
 * full), SDD_ENOMEM, fabric errors. */
SDD_API sdd_err sdd_rmem_client_connect(const struct sdd_rmem_opts *opts, const char *host,
                                        uint16_t port, sdd_rmem_client **out);

/* The local mirror and its size. Both change when the server changes the region: call them
 * again after each sync. The mirror is registered memory owned by the client. */
SDD_API void *sdd_rmem_client_memory(const sdd_rmem_client *cl);
SDD_API size_t sdd_rmem_client_size(const sdd_rmem_client *cl);

/* Copy the whole region into the mirror, or len bytes at remote_off into the mirror at
 * local_off (len 0 = to the end of the region). Blocks until the data is there.
 * Errors: SDD_EINVAL (range outside the region or mirror), SDD_ECONNRESET (server left),
 * SDD_EPEERDEAD, SDD_ETIMEDOUT, SDD_EACCES. */
SDD_API sdd_err sdd_rmem_client_sync(sdd_rmem_client *cl);
SDD_API sdd_err sdd_rmem_client_sync_range(sdd_rmem_client *cl, size_t remote_off, size_t len,
                                           size_t local_off);

/* Round trip of one control message to the server, in ns. Errors as for sync. */
SDD_API sdd_err sdd_rmem_client_ping(sdd_rmem_client *cl, uint64_t *rtt_ns);

/* Handle waiting control messages (region changes) without reading data. An idle client
 * calls it now and then so the server does not drop it during a region change. */
SDD_API sdd_err sdd_rmem_client_poll(sdd_rmem_client *cl);

/* The server's region mapped read-only (opts.map_local, same host), or NULL when data moves
 * by RMA. A region change drops the mapping (RMA from then on, until a reconnect). */
SDD_API const void *sdd_rmem_client_local(const sdd_rmem_client *cl);

/* Generation of the region currently mirrored (starts at 1, +1 per server region change). */
SDD_API uint32_t sdd_rmem_client_generation(const sdd_rmem_client *cl);

SDD_API void sdd_rmem_client_stats(const sdd_rmem_client *cl, struct sdd_rmem_client_stats *out);

SDD_API void sdd_rmem_client_close(sdd_rmem_client *cl);

/* ---- transmittable ring buffer ------------------------------------------------------------ */

/* A view over raw memory laid out as: a 64-byte header, then `count` cells of `stride` bytes.
 * A cell is: u64 seq_end, u64 stamp_ns, payload (element_size, padded to 8), u64 seq_begin.
 * The writer stores seq_begin, then the payload, then seq_end and the stamp, then advances the
 * header's `pushes` (release). A reader copying the cell in address order sees seq_end first
 * and seq_begin last, so equal values equal to the expected sequence prove the payload whole.
 * Sequence numbers start at 1 (0 = never written). One writer; the struct itself is local
 * state and is not shared between threads. */
struct sdd_trb {
    uint8_t *mem;
    size_t mem_len;
    size_t element_size; /* payload bytes per cell */
    size_t count;        /* cells */
    size_t stride;       /* bytes per cell */
    uint64_t pushes;     /* committed elements, as last read from or written to the header */
};

#define SDD_TRB_HEADER_SIZE 64

/* Bytes of memory needed for count cells of element_size bytes (0 on overflow). */
SDD_API size_t sdd_trb_bytes(size_t element_size, size_t count);

/* Lay an empty ring over mem (mem_len >= sdd_trb_bytes()). mem stays the caller's.
 * Errors: SDD_EINVAL (count < 2, element_size 0, mem too small or not 8-byte aligned). */
SDD_API sdd_err sdd_trb_init(struct sdd_trb *t, void *mem, size_t mem_len, size_t element_size,
                             size_t count);

/* Take over memory that already holds a ring (shipped or read from elsewhere): validate the
 * header and build the local state from it. Errors: SDD_EINVAL (mem NULL or not 8-byte
 * aligned), SDD_ECORRUPT (bad magic, version or geometry that does not fit mem_len). */
SDD_API sdd_err sdd_trb_adopt(struct sdd_trb *t, void *mem, size_t mem_len);

/* Re-read the write state from the header (after the bytes changed underneath, e.g. by an
 * RMA read). Errors: SDD_ECORRUPT, also when the geometry changed (adopt again). */
SDD_API sdd_err sdd_trb_refresh(struct sdd_trb *t);

/* Deep copy of src into mem (mem_len >= src->mem_len, 8-byte aligned); dst views the copy.
 * Errors: SDD_EINVAL, SDD_ECORRUPT (from adopting the copy). */
SDD_API sdd_err sdd_trb_clone(const struct sdd_trb *src, void *mem, size_t mem_len,
                              struct sdd_trb *dst);

/* The payload of the next cell to write, not yet visible to readers (its seq_begin is
 * already marked). Fill it, then commit. Reserving twice without commit returns the same. */
SDD_API void *sdd_trb_reserve(struct sdd_trb *t);

/* Publish the reserved cell with a timestamp (e.g. sdd_now_ns()); returns its sequence.
 * Without a reserve first it reserves and publishes the cell as it is. */
SDD_API uint64_t sdd_trb_commit(struct sdd_trb *t, uint64_t stamp_ns);

/* reserve + copy len bytes (<= element_size; the rest of the payload is zeroed) + commit.
 * Returns the sequence (>= 1) or SDD_ETOOBIG. */
SDD_API int64_t sdd_trb_push(struct sdd_trb *t, const void *data, size_t len, uint64_t stamp_ns);

/* Elements currently held: min(pushes, count). */
SDD_API size_t sdd_trb_available(const struct sdd_trb *t);

/* Sequence of the newest element (== pushes; 0 when empty) and of the oldest held. */
SDD_API uint64_t sdd_trb_newest_seq(const struct sdd_trb *t);
SDD_API uint64_t sdd_trb_oldest_seq(const struct sdd_trb *t);

/* Payload of element i: i >= 0 counts from the oldest held (0 = oldest), i < 0 from the
 * newest (-1 = newest). NULL when out of range. */
SDD_API void *sdd_trb_get(const struct sdd_trb *t, long i);
SDD_API void *sdd_trb_newest(const struct sdd_trb *t);
SDD_API void *sdd_trb_oldest(const struct sdd_trb *t);

/* Payload of the element with sequence seq, NULL if it is not held (overwritten or future). */
SDD_API void *sdd_trb_at_seq(const struct sdd_trb *t, uint64_t seq);

/* Byte offset of seq's cell (cell start, not payload) within mem; the cell is t->stride
 * bytes. For fetching one element by RMA. */
SDD_API size_t sdd_trb_cell_offset(const struct sdd_trb *t, uint64_t seq);

/* Check that the cell holding seq is whole and holds seq: SDD_OK, SDD_EAGAIN (torn: the two
 * sequence words differ or one is not seq). stamp_ns, if not NULL, gets the commit stamp.
 * Meaningful on a copy of the cell (taken in address order): on live memory it only says
 * the cell was whole at the moment of the check. */
SDD_API sdd_err sdd_trb_check(const struct sdd_trb *t, uint64_t seq, uint64_t *stamp_ns);

/* As sdd_trb_check, for a cell copied elsewhere: cell points at its first byte (seq_end), t
 * gives the geometry. The payload starts SDD_TRB_PAYLOAD_OFFSET bytes into the cell. */
SDD_API sdd_err sdd_trb_check_cell(const struct sdd_trb *t, const void *cell, uint64_t seq,
                                   uint64_t *stamp_ns);
#define SDD_TRB_PAYLOAD_OFFSET 16

/* Forget all elements (pushes = 0; cells' sequence words cleared). */
SDD_API void sdd_trb_flush(struct sdd_trb *t);

/* ---- self-synchronizing buffer ------------------------------------------------------------ */

typedef struct sdd_ksb sdd_ksb;

/* What a delivered element is. */
struct sdd_ksb_elem {
    const void *data;  /* element_size bytes, stable until the next update of this clone */
    size_t len;        /* element_size */
    uint64_t seq;      /* 1, 2, ... as pushed by the server */
    uint64_t stamp_ns; /* the server's commit time (sdd_now_ns on the server host) */
    uint64_t age_ns;   /* now - stamp_ns when it became usable here (same host clocks only) */
};

struct sdd_ksb_stats {
    uint64_t delivered;    /* elements handed to the user */
    uint64_t skipped;      /* elements pushed but never delivered (the reader fell behind) */
    uint64_t torn_retries; /* fetches that raced the writer and were thrown away */
    uint64_t header_polls; /* header reads */
    uint64_t invalidated;  /* in place: elements sdd_ksb_valid() found overwritten */
    uint64_t pushes;       /* serving side: elements pushed */
    struct sdd_hist age;   /* clone: commit -> usable here, ns */
};

/* Serving mode: a 3-cell ring of element_size bytes published by an rmem server.
 * Errors as for sdd_rmem_server_open. */
SDD_API sdd_err sdd_ksb_serve(const struct sdd_rmem_opts *opts, size_t element_size, sdd_ksb **out);

/* The same with cells >= 3 cells. A clone can only take an element whole if its fetch (three
 * reads: header, cell, check word) ends before the writer comes back to that cell, i.e.
 * within (cells - 1) push intervals; more cells let slow links keep up with fast writers. */
SDD_API sdd_err sdd_ksb_serve_cells(const struct sdd_rmem_opts *opts, size_t element_size,
                                    size_t cells, sdd_ksb **out);

/* Serving mode: write an element (len <= element_size) / reserve and commit in place. The
 * writer never waits for clones. */
SDD_API sdd_err sdd_ksb_push(sdd_ksb *k, const void *data, size_t len);
SDD_API void *sdd_ksb_reserve(sdd_ksb *k);
SDD_API void sdd_ksb_commit(sdd_ksb *k);

/* Serving mode: the server, for its port, stats and progress. */
SDD_API sdd_rmem_server *sdd_ksb_server(sdd_ksb *k);

/* Cloning mode: connect to a serving buffer. Errors as for sdd_rmem_client_connect, and
 * SDD_ECORRUPT when the remote memory is not a ring. */
SDD_API sdd_err sdd_ksb_clone(const struct sdd_rmem_opts *opts, const char *host, uint16_t port,
                              sdd_ksb **out);

/* Cloning mode: read the header once; if a new element is there, fetch it (retrying a torn
 * fetch) and deliver it: SDD_OK with *elem filled (elem may be NULL), SDD_EAGAIN when nothing
 * is new, or an error (server gone: SDD_ECONNRESET / SDD_EPEERDEAD). Runs update callbacks. */
SDD_API sdd_err sdd_ksb_update(sdd_ksb *k, struct sdd_ksb_elem *elem);

/* Cloning mode: poll (spin, then back off up to max_poll_us) until a new element is delivered
 * or timeout_ms passes (< 0 = forever): SDD_OK, SDD_ETIMEDOUT, or an error as above. */
SDD_API sdd_err sdd_ksb_wait_next(sdd_ksb *k, int timeout_ms, struct sdd_ksb_elem *elem);

/* Cloning mode: the element delivered last (SDD_EAGAIN before the first). */
SDD_API sdd_err sdd_ksb_current(sdd_ksb *k, struct sdd_ksb_elem *elem);

/* Cloning mode: called after each delivery from whichever thread updates; return false to
 * unsubscribe. Up to 8 callbacks. Errors: SDD_EBUSY (full). */
typedef bool (*sdd_ksb_update_fn)(sdd_ksb *k, const struct sdd_ksb_elem *elem, void *user);
SDD_API sdd_err sdd_ksb_on_update(sdd_ksb *k, sdd_ksb_update_fn fn, void *user);

/* Cloning mode: run updates on an internal thread (automatic updates, callbacks from it).
 * While it runs, the current element may be overwritten by the next fetch at any time: read
 * it inside a callback, or freeze() first. freeze() returns once no fetch is running, and
 * none starts until thaw(); sdd_ksb_current() then gives a stable element. */
SDD_API sdd_err sdd_ksb_start(sdd_ksb *k);
SDD_API void sdd_ksb_freeze(sdd_ksb *k);
SDD_API void sdd_ksb_thaw(sdd_ksb *k);

/* Which element an update delivers: the newest (default: a live view, skipping what came in
 * between), or every element in order while the ring still holds it (a stream: with enough
 * cells a clone rides out stalls without skipping; when lapped it goes on from the newest and
 * counts the rest as skipped). Set before updates start. */
typedef enum {
    SDD_KSB_NEWEST = 0,
    SDD_KSB_EVERY,
} sdd_ksb_mode;
SDD_API void sdd_ksb_set_mode(sdd_ksb *k, sdd_ksb_mode mode);

/* Cloning mode, with opts.map_local and the serving buffer on this host: deliver elements in
 * place, as pointers into the server's memory, without any copy. Such an element can be
 * overwritten while you read it: use it, then call sdd_ksb_valid(); only SDD_OK proves that
 * what you read was whole (a seqlock read). Errors: SDD_ENOTSUP (no mapping: not the same
 * host, not permitted, or dropped by a region change). */
SDD_API sdd_err sdd_ksb_set_in_place(sdd_ksb *k, bool on);

/* After using an element: SDD_OK if it was not overwritten meanwhile, SDD_EAGAIN if it was
 * (counted in stats.invalidated; discard what you computed). Always SDD_OK for copies. */
SDD_API sdd_err sdd_ksb_valid(sdd_ksb *k, const struct sdd_ksb_elem *e);

/* Longest pause between header polls while idle, in us (default 20). Pauses shorter than the
 * thread's timer slack (50 us by default on Linux) take the slack: latency-critical clones set
 * prctl(PR_SET_TIMERSLACK, 1). */
SDD_API void sdd_ksb_set_max_poll_us(sdd_ksb *k, uint32_t us);

/* Either mode. Serving: call stats from the pushing thread. */
SDD_API size_t sdd_ksb_element_size(const sdd_ksb *k);
SDD_API void sdd_ksb_stats(sdd_ksb *k, struct sdd_ksb_stats *out);
SDD_API void sdd_ksb_close(sdd_ksb *k);

/* ---- messenger ---------------------------------------------------------------------------- */

typedef struct sdd_msgr sdd_msgr;

/* A message handed to the receive callback; data is valid during the callback only. */
struct sdd_msgr_msg {
    uint32_t peer;   /* local peer ID of the sender */
    uint32_t type;   /* application message type */
    uint64_t msg_id; /* the sender's ID for it */
    const void *data;
    size_t len;
};

typedef void (*sdd_msgr_recv_fn)(sdd_msgr *m, const struct sdd_msgr_msg *msg, void *user);
/* A send finished: status SDD_OK, or why not (SDD_EPEERDEAD, SDD_ECONNRESET, SDD_ETIMEDOUT,
 * SDD_ECANCELED, or the receiver's refusal reason). */
typedef void (*sdd_msgr_done_fn)(sdd_msgr *m, uint32_t peer, uint64_t msg_id, sdd_err status,
                                 void *user);
/* A peer joined (status SDD_OK) or is gone (why). */
typedef void (*sdd_msgr_peer_fn)(sdd_msgr *m, uint32_t peer, sdd_err status, void *user);

struct sdd_msgr_opts {
    struct sdd_rmem_opts rmem; /* provider, listen host/port, timeout_ms, wait mode */
    size_t inline_max;         /* messages up to this size travel inline (default 4000) */
    size_t max_block;          /* largest block accepted from a peer (default 1 GiB) */
    uint32_t max_peers;        /* default 256 */
    sdd_msgr_recv_fn on_recv;
    sdd_msgr_done_fn on_done;
    sdd_msgr_peer_fn on_peer;
    void *user;
};

SDD_API void sdd_msgr_opts_default(struct sdd_msgr_opts *opts);

/* Open a messenger; it listens at once (opts->rmem.host/port). Single-threaded: every call,
 * and every callback, runs on the thread that calls sdd_msgr_progress(). */
SDD_API sdd_err sdd_msgr_open(const struct sdd_msgr_opts *opts, sdd_msgr **out);
SDD_API uint16_t sdd_msgr_port(const sdd_msgr *m);

/* Connect to another messenger; *peer gets the local ID for it. Errors as for
 * sdd_rmem_client_connect. */
SDD_API sdd_err sdd_msgr_connect(sdd_msgr *m, const char *host, uint16_t port, uint32_t *peer);

/* Send len bytes of data with an application type. Inline sizes are copied at once; larger
 * blocks are read by the peer from data, which must stay untouched until on_done runs.
 * *msg_id (may be NULL) names the send in on_done. Errors: SDD_ENOENT (no such peer),
 * SDD_ETOOBIG, fabric errors. */
SDD_API sdd_err sdd_msgr_send(sdd_msgr *m, uint32_t peer, uint32_t type, const void *data,
                              size_t len, uint64_t *msg_id);

/* Send and drive progress (callbacks included) until the peer has the data or timeout_ms. */
SDD_API sdd_err sdd_msgr_send_blocking(sdd_msgr *m, uint32_t peer, uint32_t type, const void *data,
                                       size_t len, int timeout_ms);

/* Accept peers, move data and run callbacks for up to timeout_ms (0 = once). */
SDD_API sdd_err sdd_msgr_progress(sdd_msgr *m, int timeout_ms);

/* Forget a peer: its pending sends fail with SDD_ECANCELED. */
SDD_API void sdd_msgr_disconnect(sdd_msgr *m, uint32_t peer);

struct sdd_msgr_stats {
    uint64_t peers_now, peers_total;
    uint64_t peers_lost;               /* peers that died, left or were disconnected */
    uint64_t peers_refused;            /* bootstrap connections refused: not a messenger, or full */
    uint64_t sent_inline, sent_blocks; /* sends that completed with SDD_OK */
    uint64_t send_failures;            /* sends that completed with an error */
    uint64_t recv_inline, recv_blocks; /* messages handed to on_recv */
    uint64_t bytes_sent, bytes_received;
    uint64_t reads;        /* RMA reads posted for blocks (large blocks take several) */
    uint64_t rejected;     /* offered blocks this side refused (max_block, memory) */
    uint64_t bad_messages; /* malformed or unexpected control messages (counted, ignored) */
};

SDD_API void sdd_msgr_stats(const sdd_msgr *m, struct sdd_msgr_stats *out);

SDD_API void sdd_msgr_close(sdd_msgr *m);

#endif
