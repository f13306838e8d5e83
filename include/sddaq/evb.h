/* The event builder (LHCb LSEB model): readout units (RU) pack the fragments of `bulk`
 * consecutive events into one multi-event bulk and push bulk k, by RMA write with immediate data,
 * into a slot that builder unit (BU) k mod N advertised; every RU walks the BUs in an order
 * rotated by its own index (barrel shifter) and no central scheduler exists. A BU returns a
 * credit and an acknowledgement for each bulk once the events it carries are built; an RU keeps
 * every bulk until that acknowledgement, so when a BU dies its unacknowledged bulks are sent
 * again to the survivors. A BU assembles the fragments of every source for each event, checks
 * every fragment (header, length, optional CRC32C, payload pattern) and hands built events to
 * the next stage; events that miss a source leave flagged with what is missing and why.
 *
 * One sdd_evb_node runs one node: an RU, a BU or both (then the RU hands bulks for its own BU
 * over by pointer, without the fabric). All of a node's work happens in the thread that calls
 * sdd_evb_node_poll()/sdd_evb_node_run(); a node is not internally locked.
 *
 * Wire formats (little-endian; docs/formats.md, "Event builder"): */
#ifndef SDDAQ_EVB_H
#define SDDAQ_EVB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sddaq/api.h"
#include "sddaq/crc32c.h"
#include "sddaq/err.h"
#include "sddaq/readout.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "sddaq evb formats are little-endian; big-endian hosts are not supported yet"
#endif

#define SDD_EVB_MAX_NODES   64
#define SDD_EVB_MAX_CREDITS 32          /* sdd_evb_opts.credits */
#define SDD_EVB_FRAG_MAGIC  0x46425645u /* "EVBF" */
#define SDD_EVB_BULK_MAGIC  0x42425645u /* "EVBB" */
#define SDD_EVB_EVENT_MAGIC 0x45425645u /* "EVBE" */
#define SDD_EVB_VERSION     1
#define SDD_EVB_ALIGN       8 /* fragments start on 8-byte boundaries inside a bulk */

/* ---- formats ------------------------------------------------------------------------------ */

/* Fragment header, 32 bytes, followed by `length` payload bytes and padding to SDD_EVB_ALIGN. */
enum {
    SDD_EVB_FRAG_CRC = 1,   /* crc holds CRC32C of the payload */
    SDD_EVB_FRAG_EMPTY = 2, /* the source has no data for this event (length 0): its readout
                               lost it; the event leaves flagged missing this source */
};
struct sdd_evb_frag_hdr {
    uint32_t magic;  /* SDD_EVB_FRAG_MAGIC */
    uint8_t version; /* SDD_EVB_VERSION */
    uint8_t flags;   /* SDD_EVB_FRAG_* */
    uint16_t source; /* source (readout board) id */
    uint32_t length; /* payload bytes, header and padding excluded */
    uint32_t crc;    /* CRC32C of the payload when flags & SDD_EVB_FRAG_CRC, else 0 */
    uint64_t event_id;
    uint64_t reserved; /* 0 */
};

/* Bulk header, 40 bytes, then nfrag metadata entries, then the fragments. */
enum { SDD_EVB_BULK_RESENT = 1 }; /* sent again after its first BU died */
struct sdd_evb_bulk_hdr {
    uint32_t magic;   /* SDD_EVB_BULK_MAGIC */
    uint8_t version;  /* SDD_EVB_VERSION */
    uint8_t flags;    /* SDD_EVB_BULK_* */
    uint16_t source;  /* the source of every fragment in the bulk */
    uint32_t nfrag;   /* fragments = events carried */
    uint32_t bytes;   /* whole bulk, this header included */
    uint64_t bulk_id; /* k: events k*bulk .. k*bulk+nfrag-1 */
    uint64_t first_event;
    uint32_t ru; /* RU index of the sender */
    uint32_t reserved;
};

/* Per-fragment metadata inside a bulk, 16 bytes. */
struct sdd_evb_frag_meta {
    uint64_t event_id;
    uint32_t offset; /* from the start of the bulk to the fragment header */
    uint32_t length; /* header + payload + padding */
};

/* Built-event flags (events and per-source entries). */
enum {
    SDD_EVB_EV_MISSING = 1,  /* at least one source absent */
    SDD_EVB_EV_TIMEOUT = 2,  /* a source was absent when the event timeout expired */
    SDD_EVB_EV_CORRUPT = 4,  /* at least one fragment failed validation */
    SDD_EVB_EV_SRC_LOST = 8, /* a source's RU was declared dead */
    SDD_EVB_EV_RESENT = 16,  /* built from bulks re-sent after a BU failure */
};

/* Serialized built event: this 32-byte header, the presence bitmap (ceil(nsources/64) words,
 * bit s set = source s present and valid), nsources table entries, then the fragments. */
struct sdd_evb_event_hdr {
    uint32_t magic;  /* SDD_EVB_EVENT_MAGIC */
    uint8_t version; /* SDD_EVB_VERSION */
    uint8_t flags;   /* SDD_EVB_EV_* */
    uint16_t nsources;
    uint32_t npresent;
    uint32_t bytes; /* whole serialized event */
    uint64_t event_id;
    uint64_t reserved;
};
struct sdd_evb_event_entry {
    uint32_t offset; /* from the event start to the fragment header; 0 when absent */
    uint32_t length; /* fragment header + payload, 0 when absent */
    uint32_t flags;  /* SDD_EVB_EV_MISSING / _TIMEOUT / _SRC_LOST / _CORRUPT for this source */
    uint32_t reserved;
};

/* A built event as handed to the next stage. Pointers are valid only during the callback. */
struct sdd_evb_event {
    uint64_t event_id;
    uint32_t flags; /* SDD_EVB_EV_* */
    uint32_t nsources;
    uint32_t npresent;                           /* fragments present and valid */
    uint32_t bytes;                              /* sum of present fragments (header + payload) */
    const uint64_t *present;                     /* bitmap, nsources bits */
    const struct sdd_evb_frag_hdr *const *frags; /* [nsources], NULL where absent */
    const uint32_t *src_flags;                   /* [nsources], SDD_EVB_EV_* per source */
    bool batch_end; /* last event of its bulk: the RUs get their acknowledgements (and may
                       forget the data) right after this callback returns, so a consumer that
                       buffers must make its output durable now to keep "nothing lost" true */
    uint64_t delivery; /* this BU's delivery number of the bulk (from 1): a consumer that makes
                          events leave the node waits until sdd_evb_node_committed() reaches
                          it, and drops it if the node fenced first (docs/evb.md) */
};

/* Bytes sdd_evb_event_serialize() needs for ev. */
SDD_API size_t sdd_evb_event_size(const struct sdd_evb_event *ev);
/* Write ev in the built-event format into buf (cap bytes). Returns the byte count, or
 * SDD_ETOOBIG when cap is too small. Copies; ev stays owned by the caller. */
SDD_API long sdd_evb_event_serialize(const struct sdd_evb_event *ev, void *buf, size_t cap);

/* Validation result of one fragment. */
typedef enum {
    SDD_EVB_FRAG_OK = 0,
    SDD_EVB_FRAG_BAD_MAGIC,
    SDD_EVB_FRAG_BAD_VERSION,
    SDD_EVB_FRAG_BAD_SOURCE,
    SDD_EVB_FRAG_BAD_EVENT,
    SDD_EVB_FRAG_BAD_LENGTH,
    SDD_EVB_FRAG_BAD_CRC,
    SDD_EVB_FRAG_BAD_PAYLOAD,
} sdd_evb_frag_check;

/* Check one fragment of avail bytes against what it must be (source, event id) and, when
 * verify_payload, its payload against the pattern of sdd_evb_source_fill(). Never reads past
 * avail. Thread-safe. */
SDD_API sdd_evb_frag_check sdd_evb_frag_validate(const void *frag, size_t avail, uint16_t source,
                                                 uint64_t event_id, bool verify_payload);
SDD_API const char *sdd_evb_frag_check_name(sdd_evb_frag_check c);

/* ---- sources: emulated readout boards ------------------------------------------------------ */

typedef enum { SDD_EVB_SIZE_FIXED = 0, SDD_EVB_SIZE_UNIFORM, SDD_EVB_SIZE_LOGNORMAL } sdd_evb_dist;

struct sdd_evb_source_opts {
    sdd_evb_dist dist;
    uint32_t mean; /* payload bytes: fixed size, uniform/log-normal mean */
    uint32_t min;  /* uniform lower bound; all: clamp */
    uint32_t max;  /* uniform upper bound; all: clamp (0 = 4 * mean) */
    double sigma;  /* log-normal: sigma of ln(size) (default 0.5) */
    uint64_t seed; /* same seed, source and event give the same size */
};

/* Payload size of (source, event) under opts: deterministic, thread-safe. */
SDD_API uint32_t sdd_evb_source_size(const struct sdd_evb_source_opts *o, uint16_t source,
                                     uint64_t event_id);
/* Write one fragment (header + payload + padding) at dst, which has cap bytes. The payload is
 * a pattern of (source, event, offset) when fill_payload, else left as is. crc: fill the CRC.
 * Returns the bytes written (a multiple of SDD_EVB_ALIGN) or SDD_ETOOBIG. */
SDD_API long sdd_evb_source_fill(void *dst, size_t cap, uint16_t source, uint64_t event_id,
                                 uint32_t length, bool fill_payload, bool crc);

/* ---- nodes -------------------------------------------------------------------------------- */

enum { SDD_EVB_ROLE_RU = 1, SDD_EVB_ROLE_BU = 2 };
typedef enum { SDD_EVB_VERIFY_NONE = 0, SDD_EVB_VERIFY_HEADER, SDD_EVB_VERIFY_FULL } sdd_evb_verify;
/* How a bulk crosses the fabric: the RU writes it into the BU's slot, or the RU announces it
 * and the BU reads it from the RU's pool. Auto reads over shm when every node can have a CPU of
 * its own (the BU's copy leaves the headers it validates next in its cache) and writes
 * everywhere else (tcp emulates reads; docs/evb.md "Transfer"). */
typedef enum {
    SDD_EVB_TRANSFER_AUTO = 0,
    SDD_EVB_TRANSFER_WRITE,
    SDD_EVB_TRANSFER_READ
} sdd_evb_transfer;

typedef void (*sdd_evb_event_fn)(const struct sdd_evb_event *ev, void *arg);

/* An RU's fragments from outside (a readout receiver, say) instead of emulated boards. Both
 * functions run on the node's thread.
 * ready:   how many events, counting from event 0, the source can give now; the RU builds a
 *          bulk only once all its events are ready. Called often: must be cheap, never block.
 * payload: write the payload of event_id (at most cap bytes) at dst and return its length, or
 *          -1 when the source has none for it (the fragment goes out empty and flagged, and
 *          the event leaves incomplete). Called once per event, in event order.
 * Slots are sized by the options' `src` on every node, so set src (e.g. fixed, mean = the
 * largest payload) to what the feed can give; longer payloads are cut off there. The BUs
 * cannot check a foreign payload's pattern: use SDD_EVB_VERIFY_HEADER (with crc for a
 * checksum). */
struct sdd_evb_feed {
    uint64_t (*ready)(void *arg);
    long (*payload)(void *arg, uint64_t event_id, void *dst, size_t cap);
    void *arg;
};

struct sdd_evb_opts {
    const char *provider; /* fabric provider (NULL = auto) */
    int wait_mode;        /* sdd_wait_mode of the endpoint (default SDD_WAIT_ADAPTIVE) */
    /* SDD_WAIT_ADAPTIVE: poll this long for work before yielding the core (shm) or sleeping on
     * the completion fd. -1 (default): 20 us, or 0 over shm when the run has more nodes than
     * this host has CPUs (every shm node is on it): a spinning node would hold the core that
     * its peer needs to make the progress it waits for (docs/evb.md "Waiting"). */
    int32_t spin_us;
    const char *host;     /* this node's listen address (NULL = all) */
    uint16_t port;        /* this node's listen port (0 = any) */
    uint32_t node;        /* this node's index in the node list */
    uint32_t nnodes;      /* nodes in the run, 1..SDD_EVB_MAX_NODES */
    uint8_t roles[SDD_EVB_MAX_NODES]; /* SDD_EVB_ROLE_* of every node (0 = both) */
    uint64_t events;                  /* events in the run (each RU generates all of them) */
    uint32_t bulk;                    /* events per bulk (default 64) */
    uint32_t credits;    /* slots per RU that each BU grants, 1..32 (0, default: auto) */
    uint32_t host_nodes; /* auto credits: the most nodes of the run on one host (0: all of
                          * them over shm, else 1); sdd_evb_credits() */
    struct sdd_evb_source_opts src;
    double rate;               /* events/s per RU, 0 = as fast as possible */
    sdd_evb_verify verify;     /* default SDD_EVB_VERIFY_FULL */
    bool crc;                  /* RUs fill and BUs check CRC32C per fragment */
    sdd_evb_transfer transfer; /* default SDD_EVB_TRANSFER_AUTO; every node must agree */
    uint32_t hb_ms;            /* heartbeat period (default 100) */
    uint32_t dead_ms;          /* a peer silent this long is declared dead (default 2000) */
    uint32_t event_timeout_ms; /* incomplete events leave after this (default 5000) */
    uint64_t corrupt_every;    /* test hook: RU corrupts every n-th fragment it sends (0 = none) */
    struct sdd_evb_feed feed;  /* this node's RU takes its fragments from here (payload NULL:
                                  the emulated boards of `src`) */
    sdd_evb_event_fn on_event; /* called for every built event (may be NULL) */
    void *on_event_arg;
    /* Asked before each delivery (arg: on_event_arg) with the events it holds: false keeps the
     * bulk, ready, for a later poll turn (room_waits counts it; its credits stay out, which
     * slows the RUs). For a consumer that holds events until sdd_evb_node_committed() passes
     * them (sddaq run): a delivery must not wait inside the builder for a buffer such a
     * consumer holds, since the commit moves only once the poll turn ends. NULL: always. */
    bool (*has_room)(uint32_t events, void *arg);
};

/* Fill opts with the defaults above (2 nodes, both roles, 100000 events, 1 KiB fixed). */
SDD_API void sdd_evb_opts_default(struct sdd_evb_opts *opts);
/* How an RU tells a BU that a bulk it wrote is in place (with SDD_EVB_TRANSFER_WRITE), chosen
 * per provider: docs/evb.md "Announcing a written bulk". */
typedef enum {
    SDD_EVB_ANNOUNCE_IMM,        /* the write carries immediate data */
    SDD_EVB_ANNOUNCE_WITH_WRITE, /* a BULK message posted right behind the write (ordered) */
    SDD_EVB_ANNOUNCE_AFTER_DONE, /* a BULK message once the write completed */
} sdd_evb_announce;
/* "imm", "with-write", "after-done". */
SDD_API const char *sdd_evb_announce_name(uint32_t a);

/* "auto", "write", "read" <-> sdd_evb_transfer; parse returns -1 for anything else. */
SDD_API int sdd_evb_transfer_parse(const char *s);
SDD_API const char *sdd_evb_transfer_name(sdd_evb_transfer t);
/* The credits a node of opts over `provider` uses: opts->credits, or where that is 0 the most,
 * up to 4 (where BUs read over shm: up to 16, as many as hold 1 MiB of slots per RU and BU),
 * whose bulk memory (RU pools and BU slots of the nodes on one host) fits 32 MiB, a common
 * last-level cache; at least 1 (docs/evb.md "Credits"). Every node reaches the same. */
SDD_API uint32_t sdd_evb_credits(const struct sdd_evb_opts *opts, const char *provider);
/* host_nodes from a run's node list: the most entries that name one host. */
SDD_API uint32_t sdd_evb_host_nodes(const char *const *hosts, uint32_t n);
/* Bytes of bulk memory (RU pools and BU slots) that the nodes of opts on one host hold with
 * `credits` (host_nodes of them; 0: all over shm, else 1). */
SDD_API uint64_t sdd_evb_host_bulk_bytes(const struct sdd_evb_opts *opts, const char *provider,
                                         uint32_t credits);
/* The most credits from `max` down to 1 whose host bulk bytes fit 32 MiB (what auto does from
 * its ceiling; sddaq run's stages start from fabric.credits). */
SDD_API uint32_t sdd_evb_credits_fit(const struct sdd_evb_opts *opts, const char *provider,
                                     uint32_t max);
/* Does a node of opts over `provider` read its bulks (true) or have them written (false)? */
SDD_API bool sdd_evb_transfer_reads(const struct sdd_evb_opts *opts, const char *provider);

struct sdd_evb_stats {
    /* RU */
    uint64_t bulks_sent, bulks_local, bulks_resent, bytes_sent, events_generated;
    uint64_t bu_failures;    /* BUs this node declared dead */
    uint64_t fail_detect_ns; /* monotonic time of the first BU death seen (0 = none) */
    uint64_t fail_resend_ns; /* monotonic time its re-sent bulks were all acknowledged */
    /* BU */
    uint64_t events_built, events_complete, events_incomplete, events_corrupt;
    uint64_t frags_ok, frags_missing, frags_corrupt;
    uint64_t bulks_rx, bulks_rx_local, bytes_rx, bulks_dup, bulks_bad, bulks_late;
    uint64_t bytes_built; /* fragment bytes (header + payload) of valid fragments delivered */
    uint64_t ru_failures; /* RUs this node declared dead */
    uint64_t lease_waits;  /* built bulks that waited for a lease before delivery (docs/evb.md) */
    uint64_t room_waits;   /* ready bulks kept for a later turn: the consumer had no room */
    uint64_t bulks_fenced; /* bulks dropped, unbuilt, when this BU fenced itself */
    uint64_t bulks_in_doubt; /* delivered while a lease lapsed (a stall mid-delivery): their
                              * RUs may have re-sent them, built again elsewhere as RESENT */
    uint64_t events_uncommitted; /* built and delivered, never committed, when this BU fenced:
                                  * its consumers drop them, the survivors build them again */
    /* time */
    uint64_t start_ns, end_ns;       /* data phase, monotonic */
    uint64_t ru_busy_ns, bu_busy_ns; /* wall time spent in RU / BU work */
    uint64_t cpu_ns;                 /* process CPU time (user + system) */
    uint32_t transfer;               /* what auto resolved to: SDD_EVB_TRANSFER_WRITE or _READ */
    uint32_t announce;               /* sdd_evb_announce: how written bulks were announced */
    uint32_t spin_us;                /* what spin_us resolved to (the adaptive wait's spin) */
    uint32_t credits;                /* what credits resolved to */
    uint32_t fenced;                 /* 1: this node fenced itself (its run ended SDD_EFENCED) */
};

typedef struct sdd_evb_node sdd_evb_node;

/* Create a node: validate opts (copied), open the endpoint, register the BU slots and the RU
 * bulk pool (credits x BUs sized), listen on host:port. Blocks briefly. Errors: SDD_EINVAL
 * (opts), SDD_ENOPROV, SDD_ENOMEM, fabric errors. */
SDD_API sdd_err sdd_evb_node_create(const struct sdd_evb_opts *opts, sdd_evb_node **out);
/* The port this node listens on (useful with port 0). */
SDD_API uint16_t sdd_evb_node_port(const sdd_evb_node *n);
/* Connect to every other node (hosts[i]:ports[i], i != self) within timeout_ms: lower indices
 * are dialled, higher ones accepted. Every node must use the same options (checked). Blocks. */
SDD_API sdd_err sdd_evb_node_connect(sdd_evb_node *n, const char *const *hosts,
                                     const uint16_t *ports, int timeout_ms);
/* Do a bounded amount of work, waiting up to wait_ms when there is none. Returns 1 while the
 * run goes on, 0 once this node's roles are finished, or a negative sdd_err (e.g. SDD_EPEERDEAD
 * when no BU is left, SDD_EFENCED when this node stalled or was cut off long enough that the
 * others may have given it up: it then delivers nothing more; docs/evb.md "Failures"). */
SDD_API int sdd_evb_node_poll(sdd_evb_node *n, int wait_ms);
/* Poll until the run ends; returns SDD_OK or the error. */
SDD_API sdd_err sdd_evb_node_run(sdd_evb_node *n);
SDD_API void sdd_evb_node_stats(const sdd_evb_node *n, struct sdd_evb_stats *out);
/* The highest delivery number (sdd_evb_event.delivery) whose events no RU can give to another
 * BU: their acknowledgements left while the leases held, or an RU confirmed them later. All
 * deliveries once the node ended without fencing. Call from the thread that polls the node. */
SDD_API uint64_t sdd_evb_node_committed(const sdd_evb_node *n);
/* Has this node given node `peer` up (silent past dead_ms, or its connection failed)? Any
 * thread, while the node exists: sddaq run asks it before taking over from a silent
 * coordinator, so that the takeover follows the builders' verdict instead of a timer of its
 * own. */
SDD_API bool sdd_evb_node_gave_up(const sdd_evb_node *n, uint32_t peer);

/* Ending a run whose length is not known at the start (stopped by time, by hand or by run
 * control). Create every node with opts.events as an upper bound, then:
 *   1. sdd_evb_node_hold() on every node: its RU generates no new bulk (it still sends, and
 *      re-sends after a failure, those it has);
 *   2. K = the largest sdd_evb_node_generated() of all nodes (bulks generated by its RU;
 *      0 for a node without RU);
 *   3. sdd_evb_node_end(n, K) on every node: the run now has K bulks = K * bulk events. RUs
 *      behind generate up to K, every RU then says DONE, and every node finishes as with a
 *      fixed-length run. Every event below K * bulk is built once, as always.
 * Node thread only, like sdd_evb_node_poll(). end returns SDD_EINVAL when K is 0, above the
 * run's bulks, or below what this node's RU already generated. */
SDD_API void sdd_evb_node_hold(sdd_evb_node *n);
/* Pausing a run works the same way, so that no event is left half sent: hold every node, take
 * K as above, then sdd_evb_node_hold_at(n, K) on every node: every RU generates up to K
 * rounded up to a multiple of the number of BUs (whole cycles of the rotated schedule, whose
 * send order may put bulk k + 1 before bulk k) and stops there, and every event below that
 * point is built. sdd_evb_node_resume() lets the RU generate again. hold_at returns SDD_EINVAL
 * when K is below what this RU generated. */
SDD_API sdd_err sdd_evb_node_hold_at(sdd_evb_node *n, uint64_t bulks);
SDD_API void sdd_evb_node_resume(sdd_evb_node *n);
SDD_API uint64_t sdd_evb_node_generated(const sdd_evb_node *n);
SDD_API sdd_err sdd_evb_node_end(sdd_evb_node *n, uint64_t bulks);
/* Close the endpoint (peers see BYE) and free everything. NULL ignored. */
SDD_API void sdd_evb_node_destroy(sdd_evb_node *n);

/* ---- a readout receiver as an RU's source -------------------------------------------------- */

/* Feeds an RU from a readout receiver (sddaq/readout.h): frame first_frame + e becomes the
 * fragment of event e, its payload the frame's bytes (one copy, into the bulk). A frame the
 * receiver dropped or never saw becomes an empty, flagged fragment: event e is decided once
 * its frame came, or a frame `window` or more ids newer came (the receiver closes frames in
 * order of their ids), or nothing came for idle_ms (the stream ended or stalled). Frames are
 * held until their bulk is built, so the receiver needs more slots than the RU's bulk size
 * plus its window; frames that come after their event was decided are released and counted
 * late. One feed per RU; node thread only. */
typedef struct sdd_evb_ro_feed sdd_evb_ro_feed;

struct sdd_evb_ro_feed_stats {
    uint64_t frames;   /* frames turned into fragments */
    uint64_t missing;  /* events given out empty: no frame for them */
    uint64_t late;     /* frames that came after their event was decided, or before first */
    uint64_t overflow; /* frames released unheld because the holding window was full */
};

/* rx: a started receiver whose only consumer this feed becomes; window: the receiver's
 * assembly window (sdd_ro_rx_opts.window); slots: its slot count; idle_ms: see above (> 0).
 * Returns SDD_OK, SDD_EINVAL or SDD_ENOMEM. */
SDD_API sdd_err sdd_evb_ro_feed_create(sdd_ro_rx *rx, uint64_t first_frame, uint32_t window,
                                       uint32_t slots, uint32_t idle_ms, sdd_evb_ro_feed **out);
/* The feed's functions and argument, for sdd_evb_opts.feed. */
SDD_API struct sdd_evb_feed sdd_evb_ro_feed_bind(sdd_evb_ro_feed *f);
SDD_API void sdd_evb_ro_feed_stats(const sdd_evb_ro_feed *f, struct sdd_evb_ro_feed_stats *out);
/* Release every frame still held and free; NULL ignored. Before the receiver is destroyed. */
SDD_API void sdd_evb_ro_feed_destroy(sdd_evb_ro_feed *f);

#endif
