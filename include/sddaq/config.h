/* Topology configuration: the YAML file that says which stages run where and how they are
 * linked (docs/config.md has the schema). sdd_config_parse() reads YAML into plain structs,
 * fills in defaults and validates the result; every problem found is reported with the file,
 * line, column and key it concerns, all of them, not only the first:
 *
 *   topo.yaml:12:7: stages[2].type: unknown stage type 'bilder' (expected one of: source, ru,
 *   bu, process, writer, feedback)
 *
 * The structs are plain data, public so that the runtime can read them; a config built in code
 * starts from sdd_config_create() (which sets every default) and goes through
 * sdd_config_fill_defaults() and sdd_config_validate() like a parsed one.
 *
 * A default topology is compiled in (sdd_config_default_yaml()): emulated sources -> readout
 * units -> builder units -> Hough trigger -> HDF5 writer, with the trigger results on a
 * feedback buffer. sdd_config_emit() writes any config back as YAML that parses to the same
 * structs (`sddaq config show`).
 *
 * Thread safety: none of these functions keep global state; a config may be read from any
 * number of threads once built and must not be changed while others read it. */
#ifndef SDDAQ_CONFIG_H
#define SDDAQ_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sddaq/api.h"
#include "sddaq/err.h"

/* Capacities of the fixed-size text fields, terminating NUL included. */
#define SDD_CFG_NAME_MAX 64
#define SDD_CFG_HOST_MAX 256
#define SDD_CFG_PATH_MAX 1024
#define SDD_CFG_CPUS_MAX 256
/* Largest CPU number a core list may name (a bitmap of 1024 CPUs is checked). */
#define SDD_CFG_CPU_LIMIT 1023
/* Most entries per section; more is an error, not a truncation. */
#define SDD_CFG_MAX_NODES  256
#define SDD_CFG_MAX_STAGES 4096
#define SDD_CFG_MAX_LINKS  16384

/* A number field given as `auto` (ru and bu stages' credits). */
#define SDD_CFG_AUTO UINT32_MAX
/* The event builder's most credits (SDD_EVB_MAX_CREDITS). */
#define SDD_CFG_EVB_CREDITS_MAX 32
/* A rich worker's most buffers in flight (SDD_RICH_PROC_MAX_INFLIGHT). */
#define SDD_CFG_RICH_INFLIGHT_MAX 8

/* Where a value came from: 1-based line and column in the file, 0 when built in code. */
struct sdd_cfg_pos {
    uint32_t line, col;
};

typedef enum { SDD_CFG_PROV_AUTO = 0, SDD_CFG_PROV_TCP, SDD_CFG_PROV_SHM } sdd_cfg_provider;

typedef enum {
    SDD_STAGE_SOURCE = 0,
    SDD_STAGE_RU,
    SDD_STAGE_BU,
    SDD_STAGE_PROCESS,
    SDD_STAGE_WRITER,
    SDD_STAGE_FEEDBACK,
    SDD_STAGE_TYPE_COUNT
} sdd_stage_type;

typedef enum {
    SDD_SRC_EVB_EMU = 0, /* emulated readout boards sending fragments to a readout unit */
    SDD_SRC_EMU_STREAM,  /* sddaq stream emulator (readout.h SDD_RO_FMT_STREAM) */
    SDD_SRC_EMU_JUNGFRAU,
    SDD_SRC_EMU_NA62,
    SDD_SRC_UDP,       /* a readout receiver listening on `listen` */
    SDD_SRC_HOUGH_EMU, /* emulated tracker readout: each hough-emu source sends its share of the
                        * six barrel layers' stubs of one detector sector per event (the Hough
                        * trigger's input) */
} sdd_source_kind;

typedef enum { SDD_FRAG_FIXED = 0, SDD_FRAG_UNIFORM, SDD_FRAG_LOGNORMAL } sdd_frag_dist;

typedef enum { SDD_ALGO_NONE = 0, SDD_ALGO_HOUGH, SDD_ALGO_RICH, SDD_ALGO_PRESCALE } sdd_algo;

typedef enum { SDD_WRITER_HDF5 = 0, SDD_WRITER_RAW, SDD_WRITER_NULL } sdd_writer_format;

typedef enum { SDD_LINK_AUTO = 0, SDD_LINK_RING, SDD_LINK_FABRIC } sdd_link_transport;

struct sdd_cfg_run {
    char name[SDD_CFG_NAME_MAX];        /* default "sddaq" */
    double duration_s;                  /* seconds; 0 = no limit; < 0 = unset (see fill) */
    uint64_t events;                    /* stop after this many events; 0 = no limit */
    char output_dir[SDD_CFG_PATH_MAX];  /* default "runs" */
    char coordinator[SDD_CFG_NAME_MAX]; /* node that drives run control; default first node */
    struct sdd_cfg_pos pos, coordinator_pos;
};

struct sdd_cfg_fabric {
    sdd_cfg_provider provider; /* default auto */
    uint64_t buffer_size;      /* bytes per registered slot; default 1 MiB */
    uint32_t buffers;          /* slots per fabric link; default 64 */
    uint32_t credits;          /* default credits of fabric links and event builders; 16 */
    uint32_t port; /* multi-node runs: event-builder node k listens on port + k; 7100 */
};

struct sdd_cfg_node {
    char name[SDD_CFG_NAME_MAX];
    char host[SDD_CFG_HOST_MAX];  /* default "127.0.0.1" */
    uint32_t control_port;        /* HTTP control port; default 7020; 0 = any free port */
    char cores[SDD_CFG_CPUS_MAX]; /* CPU list ("0-3,8"); "" = any */
    struct sdd_cfg_pos pos, name_pos, port_pos, cores_pos;
};

struct sdd_cfg_fragment {
    sdd_frag_dist dist; /* default fixed */
    uint64_t size;      /* fixed size, or lognormal median; default 4 KiB */
    uint64_t min, max;  /* uniform bounds; default 0 = size/2 and size*3/2 */
    double sigma;       /* lognormal shape; default 0.5 */
};

/* na62: TEL62 multi-event packets, packed into receive buffers for a trigger (no frames). */
typedef enum { SDD_FRAME_STREAM = 0, SDD_FRAME_JUNGFRAU, SDD_FRAME_NA62 } sdd_frame_format;
typedef enum { SDD_FRAME_DROP = 0, SDD_FRAME_PAD, SDD_FRAME_PARTIAL } sdd_frame_missing;

/* Detector frames of a udp or emu-stream / emu-jungfrau source (docs/readout.md). */
struct sdd_cfg_frame {
    sdd_frame_format format;   /* udp: what arrives; emu-*: implied by the kind; default stream */
    uint32_t packets;          /* packets per frame; default 16 (jungfrau: always 128) */
    uint64_t payload;          /* bytes per packet; default 1K (jungfrau: always 8192) */
    sdd_frame_missing missing; /* a frame with packets missing: drop (default), pad, partial */
    double loss;               /* emu-*: probability that a packet is never sent; default 0 */
};

struct sdd_cfg_source {
    sdd_source_kind kind;          /* default evb-emu */
    uint32_t streams;              /* streams (emulators, boards); default 1 */
    double rate;                   /* events or frames per second per stream; 0 = max */
    uint64_t seed;                 /* default 1 */
    char listen[SDD_CFG_HOST_MAX]; /* udp: "host:port" to receive on */
    struct sdd_cfg_fragment fragment;
    struct sdd_cfg_frame frame;
    float pileup; /* hough-emu: pileup level of the generated sector events, 0-1000; 200 */
    struct sdd_cfg_pos seed_pos, pileup_pos; /* where seed and pileup were set (0: not) */
};

struct sdd_cfg_evb {
    uint32_t bulk_size;    /* events per multi-event bulk; default 64 */
    uint32_t credits;      /* 1..32 or SDD_CFG_AUTO (default: docs/config.md) */
    uint32_t heartbeat_ms; /* default 100 */
    uint32_t timeout_ms;   /* event completion / peer timeout; default 1000 */
    int transfer;          /* sdd_evb_transfer: 0 auto (default), 1 write, 2 read */
};

/* The RICH ring finder of a `rich` process stage (sdd_rich_find_opts; docs/trigger.md). */
struct sdd_cfg_rich_finder {
    int method;         /* sdd_rich_method: 0 hist (default), 1 ptolemy */
    int fit;            /* sdd_rich_fit: 0 taubin, 1 crawford (default) */
    int multi_ring;     /* histogram multi-ring steps: 1 on (default), 0 off */
    float window;       /* a hit belongs to a ring when |d - R| < window, mm; 13 */
    uint32_t threshold; /* histogram peak needed for a candidate; 5 */
    uint32_t min_hits;  /* hits a ring needs; 6 */
    float claim;        /* a found ring takes its hits within claim out of the search, mm; 7 */
    float max_rms;      /* rings scattering more (mm RMS) are dropped; 8 */
    int gpu;            /* rings on a CUDA GPU (sddaq/rich_gpu.h): 1 on, 0 off (default) */
    uint32_t inflight;  /* buffers a worker has started and not yet finished (sdd_rich_proc_start),
                           1..8 or SDD_CFG_AUTO (default: 2 with gpu, else 1) */
};

struct sdd_cfg_process {
    sdd_algo algorithm; /* default none */
    uint32_t factor;    /* prescale: keep 1 of factor; default 1 */
    uint32_t threads;   /* default 1 */
    uint32_t split;     /* rich: threads sharing each buffer's ring finding, the worker
                           included (lower latency per buffer, not more throughput); default 1 */
    struct sdd_cfg_rich_finder finder; /* rich only */
    float min_pt;       /* hough: keep events with a track candidate of pT >= min_pt GeV/c;
                           default 10 */
};

struct sdd_cfg_writer {
    sdd_writer_format format;    /* default hdf5 */
    char path[SDD_CFG_PATH_MAX]; /* default <output_dir>/<run>_<stage>.h5 or .raw */
};

struct sdd_cfg_feedback {
    uint64_t size; /* bytes of the self-synchronizing buffer; default 1 MiB */
    uint32_t port; /* remote-memory server port; default 0 = any */
};

struct sdd_cfg_stage {
    char name[SDD_CFG_NAME_MAX];
    sdd_stage_type type;
    char node[SDD_CFG_NAME_MAX];  /* default: the only node */
    char cores[SDD_CFG_CPUS_MAX]; /* pin the stage's threads; "" = no pinning */
    union {                       /* the member named by type */
        struct sdd_cfg_source source;
        struct sdd_cfg_evb evb; /* ru and bu */
        struct sdd_cfg_process process;
        struct sdd_cfg_writer writer;
        struct sdd_cfg_feedback feedback;
    };
    struct sdd_cfg_pos pos, name_pos, node_pos, cores_pos;
};

struct sdd_cfg_link {
    char from[SDD_CFG_NAME_MAX], to[SDD_CFG_NAME_MAX];
    sdd_link_transport transport; /* auto resolves to ring (same node) or fabric */
    uint32_t depth;               /* ring slots, a power of two; default 1024 */
    uint32_t credits;             /* fabric credits; default fabric.credits (0 before fill) */
    struct sdd_cfg_pos pos, from_pos, to_pos, transport_pos;
};

struct sdd_config {
    char file[SDD_CFG_PATH_MAX]; /* name used in messages ("<default>" for the embedded one) */
    struct sdd_cfg_run run;
    struct sdd_cfg_fabric fabric;
    struct sdd_cfg_node *nodes;
    size_t n_nodes;
    struct sdd_cfg_stage *stages;
    size_t n_stages;
    struct sdd_cfg_link *links;
    size_t n_links;
};
typedef struct sdd_config sdd_config;

/* One problem: where, which key, what. text is the whole line "file:line:col: key: message"
 * ("file: key: message" when line is 0). */
struct sdd_config_error {
    uint32_t line, col;
    char *key;
    char *message;
    char *text;
};

/* Every problem one call found, in the order found. At most SDD_CFG_DIAG_KEEP are stored;
 * count keeps counting past that. Initialise with {0}; release with sdd_config_diag_fini(). */
#define SDD_CFG_DIAG_KEEP 200
struct sdd_config_diag {
    size_t count;  /* problems found */
    size_t stored; /* entries in errors[] */
    struct sdd_config_error *errors;
    bool no_memory; /* a message could not be stored */
};

/* Free the messages of d and reset it to empty. NULL is fine. */
SDD_API void sdd_config_diag_fini(struct sdd_config_diag *d);

/* Parse, fill in defaults and validate one YAML topology.
 * yaml, len:  the text (need not be NUL-terminated); read only during the call.
 * file:       name used in messages (NULL = "<input>").
 * out:        on success a new config, owned by the caller (sdd_config_destroy); not written
 *             on failure.
 * diag:       may be NULL; receives every problem found (appended).
 * Returns SDD_OK, SDD_EINVAL (the text has problems: see diag), SDD_ENOMEM. */
SDD_API sdd_err sdd_config_parse(const char *yaml, size_t len, const char *file, sdd_config **out,
                                 struct sdd_config_diag *diag);

/* sdd_config_parse() of a file's contents. A file that cannot be read is one diag entry
 * ("file: cannot read: reason") and SDD_EIO. Files over 16 MiB are refused (SDD_ETOOBIG). */
SDD_API sdd_err sdd_config_load(const char *path, sdd_config **out, struct sdd_config_diag *diag);

/* The embedded default topology, a NUL-terminated YAML string (static storage). */
SDD_API const char *sdd_config_default_yaml(void);

/* sdd_config_parse() of the embedded default, file name "<default>". */
SDD_API sdd_err sdd_config_load_default(sdd_config **out, struct sdd_config_diag *diag);

/* A new config with every default set and no nodes, stages or links; for configs built in
 * code. Returns NULL when out of memory. */
SDD_API sdd_config *sdd_config_create(void);

/* Set every field of stage s to its defaults for type t (name and node empty, no position). */
SDD_API void sdd_config_stage_init(struct sdd_cfg_stage *s, sdd_stage_type t);

/* Append an entry (zeroed and defaulted) to a config built in code; returns it, or NULL when
 * out of memory or at the section's limit. Pointers returned earlier may move. */
SDD_API struct sdd_cfg_node *sdd_config_add_node(sdd_config *cfg);
SDD_API struct sdd_cfg_stage *sdd_config_add_stage(sdd_config *cfg, sdd_stage_type t);
SDD_API struct sdd_cfg_link *sdd_config_add_link(sdd_config *cfg);

/* Resolve what depends on other values: a node "local" when there is none, the coordinator
 * (first node), each stage's node when only one exists, inherited credits, link transport
 * auto (ring on one node, fabric across nodes), the run duration (10 s when neither duration
 * nor events is set, else 0 = no limit when unset) and default writer paths. Idempotent.
 * Returns SDD_OK or SDD_ENOMEM. */
SDD_API sdd_err sdd_config_fill_defaults(sdd_config *cfg);

/* Check the cross-references and the shape of the graph: duplicate names, stages on unknown
 * nodes, links to unknown stages, links of the wrong kind (into a source, out of a sink, an
 * ru feeding anything but a bu), cycles, stages without input or output, core lists outside
 * the node's. Every problem goes to diag. Returns SDD_OK or SDD_EINVAL. */
SDD_API sdd_err sdd_config_validate(const sdd_config *cfg, struct sdd_config_diag *diag);

/* Write cfg as YAML, every key present. *out is a new NUL-terminated string owned by the
 * caller (free()), *len its length (len may be NULL). Returns SDD_OK or SDD_ENOMEM. */
SDD_API sdd_err sdd_config_emit(const sdd_config *cfg, char **out, size_t *len);

/* Free a config. NULL is fine. */
SDD_API void sdd_config_destroy(sdd_config *cfg);

/* Lookups: index of the named stage or node, or -1. */
SDD_API long sdd_config_find_stage(const sdd_config *cfg, const char *name);
SDD_API long sdd_config_find_node(const sdd_config *cfg, const char *name);

/* Names of the enumerations as the YAML spells them; never NULL ("?" when out of range). */
SDD_API const char *sdd_stage_type_name(sdd_stage_type t);
SDD_API const char *sdd_source_kind_name(sdd_source_kind k);
SDD_API const char *sdd_algo_name(sdd_algo a);
SDD_API const char *sdd_writer_format_name(sdd_writer_format f);
SDD_API const char *sdd_link_transport_name(sdd_link_transport t);
SDD_API const char *sdd_cfg_provider_name(sdd_cfg_provider p);
SDD_API const char *sdd_frag_dist_name(sdd_frag_dist d);

/* Parse a CPU list such as "0-3,8,10-11" into a bitmap of SDD_CFG_CPU_LIMIT + 1 bits (16
 * uint64_t words). Returns SDD_OK or SDD_EINVAL (syntax, reversed range, CPU above the limit,
 * empty list). */
SDD_API sdd_err sdd_config_parse_cpus(const char *s, uint64_t bits[16]);

#endif
