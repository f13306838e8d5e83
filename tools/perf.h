/* sddaq perf: shared definitions of the perftest-style benchmark (server, client, self). The two
 * sides agree on each measurement through small control messages sent over the fabric itself;
 * memory keys travel in the bootstrap info blob. */
#ifndef SDDAQ_TOOLS_PERF_H
#define SDDAQ_TOOLS_PERF_H

#include <stdbool.h>
#include <stdint.h>

#include "sddaq/fabric.h"
#include "sddaq/hist.h"

#define PERF_MAX_SIZE  (16u << 20) /* largest transfer: the 8 B .. 16 MiB */
#define PERF_MAX_SIZES 32
#define PERF_CTL_SIZE  64
#define PERF_MAGIC     0x46524550u /* "PERF" */

enum perf_test { PERF_LAT = 1, PERF_BW };
enum perf_op { PERF_SEND = 1, PERF_WRITE, PERF_READ };
enum perf_ctl_type { CTL_SPEC = 1, CTL_READY, CTL_FIN, CTL_DONE, CTL_QUIT };

/* Control message, sent as a small message (one per phase, never on the timed path). */
struct perf_ctl {
    uint32_t magic;
    uint32_t type;
    uint32_t test;
    uint32_t op;
    uint64_t size;
    uint64_t count; /* operations the server must expect, warm-up included */
    uint32_t window;
    uint32_t pad;
};

/* Bootstrap info blob: where the sender's buffer is. */
struct perf_hello {
    uint32_t magic;
    uint32_t pad;
    struct sdd_rkey rkey;
};

struct perf_opts {
    const char *provider;
    const char *host;
    uint16_t port;
    const char *port_file;
    int port_pipe; /* self mode: the server writes its port here; -1 otherwise */
    sdd_wait_mode wait;
    bool once;
    enum perf_test test;
    enum perf_op op;
    uint64_t sizes[PERF_MAX_SIZES];
    int nsizes;
    uint64_t iters;  /* 0 = default per size */
    double duration; /* seconds per size; 0 = use iters */
    uint32_t window;
    uint64_t span; /* bw: step each operation's buffers through this many bytes (0: one) */
    bool json;
    bool quiet_header;
};

/* One side's fabric state: an endpoint, one registered buffer split into a transmit half, a
 * receive half and two control slots, and the connected peer. */
struct perf_side {
    sdd_ep *ep;
    sdd_mr *mr;
    uint8_t *buf;
    size_t buf_mapped; /* for sdd_bigbuf_free */
    sdd_peer *peer;
    struct sdd_rkey remote; /* the peer's whole buffer */
    bool ctl_armed;         /* a control receive is posted */
    uint64_t span, next;    /* data offsets step through [0, span) (perf_opts.span) */
    struct sdd_cqe cq[64];  /* completions read in one burst, handed out one by one */
    int cq_n, cq_i;
};

struct perf_result {
    enum perf_test test;
    enum perf_op op;
    uint64_t size, iters;
    uint32_t window;
    struct sdd_hist_summary lat; /* ns: one-way for send/write lat, whole op for read */
    double bw_MBps, msg_rate_kps;
};

/* Context of control receives; data receives use NULL. */
#define PERF_CTX_CTL ((void *)1)

/* Layout of the per-side buffer. */
#define PERF_TX_OFF     0u
#define PERF_RX_OFF     PERF_MAX_SIZE
#define PERF_CTL_TX_OFF (2u * PERF_MAX_SIZE)
#define PERF_CTL_RX_OFF (2u * PERF_MAX_SIZE + PERF_CTL_SIZE)
#define PERF_BUF_SIZE   (2u * PERF_MAX_SIZE + 2u * PERF_CTL_SIZE)

/* perf_common.c */
int perf_side_open(struct perf_side *s, const struct perf_opts *o);
void perf_side_close(struct perf_side *s);
void perf_hello_make(const struct perf_side *s, struct perf_hello *h);
int perf_hello_take(struct perf_side *s);
/* Wait for the next completion (read in bursts). Returns 0 and fills cqe; -2 when the peer has
 * left on purpose (said BYE); -1 after printing why (error completion, peer loss, timeout). */
int perf_next(struct perf_side *s, struct sdd_cqe *cqe, int timeout_ms);
/* Non-blocking perf_next: 1 with a completion, 0 with none, negative as perf_next. */
int perf_try_next(struct perf_side *s, struct sdd_cqe *cqe);
/* Post the control receive unless one is already posted. */
int perf_post_ctl_recv(struct perf_side *s);
/* Drive progress without blocking when a post met full queues (or a connection still being
 * set up); completions read meanwhile stay queued for perf_next. */
int perf_progress(struct perf_side *s);
int perf_send_ctl(struct perf_side *s, const struct perf_ctl *c);
/* Wait for a control message of this type (the control receive must be posted). */
int perf_wait_ctl(struct perf_side *s, uint32_t type, int timeout_ms);
/* Post one operation from the transmit half to the peer's receive half. imm marks a ping-pong
 * leg: writes carry immediate data and successful sends and writes report no completion.
 * 0 posted, 1 queues full (progress and call again), -1 error (printed). */
int perf_post(struct perf_side *s, enum perf_op op, uint64_t size, bool imm);
const char *perf_op_name(enum perf_op op);
const char *perf_test_name(enum perf_test t);
const char *perf_wait_name(sdd_wait_mode w);

int perf_server_run(const struct perf_opts *o);
int perf_client_run(const struct perf_opts *o);
void perf_print_result(const struct perf_opts *o, const char *provider, const struct perf_result *r,
                       bool first);

/* sddaq perf mesh: argv[0] is "mesh" (perf_mesh.c). */
int perf_mesh_main(int argc, char **argv);

#endif
