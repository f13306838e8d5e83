/* sddaq perf mesh: N processes on this machine, each writing to every other at the same time
 * (all-to-all RMA writes in a rotated order) and serving as the target of the others' writes,
 * as the nodes of an event builder do. It is the raw fabric reference for `sddaq evb bench`
 * with N nodes: LSEB compared its builder with a bidirectional ib_write_bw, and one stream in
 * one direction (`sddaq perf self`) is not what N busy nodes on shared cores can move. */
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "perf.h"
#include "sddaq/bigbuf.h"
#include "sddaq/clock.h"
#include "sddaq/cpu.h"

#define MESH_MAX_NODES 64
#define MESH_MAGIC     0x4853454du /* "MESH" */

struct mesh_opts {
    const char *provider;
    uint32_t nodes;
    uint64_t size;
    uint32_t window; /* writes in flight per node, over all its peers */
    double secs;
    sdd_wait_mode wait;
    bool pin;
    bool json;
};

struct mesh_node_result {
    uint64_t bytes, writes;
    uint64_t t0_ns, t1_ns; /* first post, last completion */
    int err;               /* sdd_err; 0 = fine */
    char provider[32];
};

/* Shared by the launcher and its N children (one anonymous shared mapping). */
struct mesh_shared {
    _Atomic uint16_t port[MESH_MAX_NODES];
    _Atomic uint32_t listening, connected, finished, failed;
    struct mesh_node_result res[MESH_MAX_NODES];
};

/* Bootstrap info: who is calling and where its target region is. */
struct mesh_hello {
    uint32_t magic;
    uint32_t node;
    struct sdd_rkey target;
};

struct mesh_node {
    const struct mesh_opts *o;
    struct mesh_shared *sh;
    uint32_t self;
    sdd_ep *ep;
    sdd_mr *src_mr, *dst_mr;
    uint8_t *src, *dst;
    size_t src_mapped, dst_mapped; /* for sdd_bigbuf_free */
    uint32_t per_peer; /* target slots each writer owns in a node's region */
    sdd_peer *peer[MESH_MAX_NODES];
    struct sdd_rkey target[MESH_MAX_NODES];
    uint64_t sent_to[MESH_MAX_NODES];
};

static void usage(FILE *out)
{
    fprintf(out,
            "usage: sddaq perf mesh [options]\n"
            "  N processes on this machine; each writes to every other (RMA write, rotated\n"
            "  order) while the others write to it. Reports the bytes all of them moved.\n"
            "  -p, --provider P    fabric provider (default tcp)\n"
            "  -n, --nodes N       processes, 2..%d (default 2)\n"
            "  -s, --size S        bytes per write (default 64K)\n"
            "  -w, --window N      writes in flight per process, over all peers (default 64)\n"
            "  -D, --duration S    seconds of writing (default 2)\n"
            "      --wait MODE     spin | adaptive | block (default adaptive)\n"
            "      --pin           process k runs on CPU k mod the CPU count\n"
            "      --json          one JSON object on stdout\n",
            MESH_MAX_NODES);
}

static bool all_reached(_Atomic uint32_t *counter, const struct mesh_node *m)
{
    return atomic_load(counter) >= m->o->nodes || atomic_load(&m->sh->failed) != 0;
}

/* Wait until every process reached the same point (or one failed). */
static sdd_err barrier(struct mesh_node *m, _Atomic uint32_t *counter)
{
    atomic_fetch_add(counter, 1);
    uint64_t deadline = sdd_now_ns() + 30 * SDD_NS_PER_S;
    while (!all_reached(counter, m)) {
        if (sdd_now_ns() > deadline) {
            return SDD_ETIMEDOUT;
        }
        sdd_sleep_ns(SDD_NS_PER_US * 200);
    }
    return atomic_load(&m->sh->failed) != 0 ? SDD_ECANCELED : SDD_OK;
}

static sdd_err check_hello(struct mesh_node *m, sdd_peer *p, uint32_t *who)
{
    size_t len = 0;
    const struct mesh_hello *h = sdd_peer_info(p, &len);
    if (h == NULL || len != sizeof(*h) || h->magic != MESH_MAGIC || h->node >= m->o->nodes ||
        h->node == m->self || m->peer[h->node] != NULL) {
        fprintf(stderr, "sddaq perf mesh: node %u: bad hello from %s\n", m->self, sdd_peer_name(p));
        return SDD_EPROTO;
    }
    *who = h->node;
    m->target[h->node] = h->target;
    return SDD_OK;
}

/* Lower-numbered nodes are dialled, higher-numbered ones accepted (as the event builder). */
static sdd_err connect_all(struct mesh_node *m, sdd_listener *lis)
{
    struct mesh_hello me = {.magic = MESH_MAGIC, .node = m->self};
    sdd_mr_rkey(m->dst_mr, &me.target);
    for (uint32_t j = 0; j < m->o->nodes; j++) {
        if (j == m->self) {
            continue;
        }
        sdd_peer *p = NULL;
        sdd_err err = j < m->self ? sdd_ep_connect(m->ep, "127.0.0.1", atomic_load(&m->sh->port[j]),
                                                   &me, sizeof(me), 30000, &p)
                                  : sdd_listener_accept(lis, &me, sizeof(me), 30000, &p);
        uint32_t who = 0;
        if (err == SDD_OK && (err = check_hello(m, p, &who)) != SDD_OK) {
            sdd_peer_close(p);
        }
        if (err != SDD_OK) {
            return err;
        }
        m->peer[who] = p;
    }
    return SDD_OK;
}

static sdd_err setup(struct mesh_node *m)
{
    const struct mesh_opts *o = m->o;
    struct sdd_ep_opts eo;
    sdd_ep_opts_default(&eo);
    eo.provider = o->provider;
    eo.wait_mode = o->wait;
    sdd_err err = sdd_ep_open(&eo, &m->ep);
    if (err != SDD_OK) {
        return err;
    }
    const struct sdd_ep_info *info = sdd_ep_info(m->ep);
    snprintf(m->sh->res[m->self].provider, sizeof(m->sh->res[0].provider), "%s", info->provider);
    /* Each writer has its own part of every target region, as an RU has its slots at a BU. */
    m->per_peer = (o->window + o->nodes - 2) / (o->nodes - 1);
    size_t src_bytes = (size_t)o->window * o->size;
    size_t dst_bytes = (size_t)o->nodes * m->per_peer * o->size;
    /* The event builder's memory treatment (huge pages where they pay), so the reference is
     * not measured on other memory than the builder it is compared with. */
    bool huge = sdd_bigbuf_huge_for(info->provider);
    m->src = sdd_bigbuf_alloc(src_bytes, huge, &m->src_mapped);
    m->dst = sdd_bigbuf_alloc(dst_bytes, huge, &m->dst_mapped);
    if (m->src == NULL || m->dst == NULL) {
        return SDD_ENOMEM;
    }
    memset(m->src, (int)m->self, src_bytes); /* touched: no page faults on the timed path */
    memset(m->dst, 0, dst_bytes);
    err = sdd_mr_reg(m->ep, m->src, src_bytes, SDD_ACCESS_LOCAL, &m->src_mr);
    if (err == SDD_OK) {
        err = sdd_mr_reg(m->ep, m->dst, dst_bytes, SDD_ACCESS_REMOTE_WRITE | SDD_ACCESS_LOCAL,
                         &m->dst_mr);
    }
    return err;
}

/* Post writes until `window` are in flight: the k-th goes to the k-th peer after self. */
static sdd_err post_writes(struct mesh_node *m, uint32_t *inflight, uint64_t *seq, bool *slot_busy)
{
    const struct mesh_opts *o = m->o;
    while (*inflight < o->window) {
        uint32_t slot = 0;
        while (slot_busy[slot]) {
            slot++;
        }
        uint32_t to = (m->self + 1 + (uint32_t)(*seq % (o->nodes - 1))) % o->nodes;
        uint64_t at = ((uint64_t)m->self * m->per_peer + m->sent_to[to] % m->per_peer) * o->size;
        sdd_err err =
            sdd_ep_post_write(m->ep, m->peer[to], m->src + (size_t)slot * o->size, o->size,
                              m->src_mr, &m->target[to], at, (void *)(uintptr_t)(slot + 1));
        if (err == SDD_EAGAIN) {
            return SDD_OK; /* queues full: completions first */
        }
        if (err != SDD_OK) {
            return err;
        }
        slot_busy[slot] = true;
        m->sent_to[to]++;
        (*seq)++;
        (*inflight)++;
    }
    return SDD_OK;
}

/* Nothing came: poll on for 20 us, then give the core away as the event builder's nodes do
 * (src/evb/node.c, idle): sleep on the completion fd for at most 200 us, or yield where the
 * provider has none (shm). N spinning processes on fewer cores would starve the peers whose
 * progress they wait for. Returns completions found while spinning. */
static int idle(struct mesh_node *m, struct sdd_cqe *cq, int max)
{
    uint64_t until = sdd_now_ns() + 20 * SDD_NS_PER_US;
    do {
        int n = sdd_ep_poll(m->ep, cq, max);
        if (n != 0 || m->o->wait == SDD_WAIT_SPIN) {
            return n;
        }
    } while (m->o->wait == SDD_WAIT_ADAPTIVE && sdd_now_ns() < until);
    if (!sdd_ep_info(m->ep)->wait_fd) {
        sched_yield();
    } else if (sdd_ep_trywait(m->ep) == SDD_OK) {
        struct pollfd pfd = {.fd = sdd_ep_fd(m->ep), .events = POLLIN};
        struct timespec ts = {.tv_sec = 0, .tv_nsec = 200 * (long)SDD_NS_PER_US};
        ppoll(&pfd, 1, &ts, NULL);
    }
    return 0;
}

/* Write for o->secs, then drain; keep serving the others' writes until all are done (the
 * software providers move a write only while its target makes progress). */
static sdd_err run_writes(struct mesh_node *m)
{
    const struct mesh_opts *o = m->o;
    struct mesh_node_result *res = &m->sh->res[m->self];
    bool *slot_busy = calloc(o->window, sizeof(bool));
    if (slot_busy == NULL) {
        return SDD_ENOMEM;
    }
    uint32_t inflight = 0;
    uint64_t seq = 0;
    struct sdd_cqe cq[64];
    res->t0_ns = sdd_now_ns();
    uint64_t stop_ns = res->t0_ns + (uint64_t)(o->secs * 1e9);
    bool writing = true, told = false;
    sdd_err err = SDD_OK;
    while (err == SDD_OK) {
        uint64_t now = sdd_now_ns();
        writing = writing && now < stop_ns;
        if (writing) {
            err = post_writes(m, &inflight, &seq, slot_busy);
        }
        int n = sdd_ep_poll(m->ep, cq, 64);
        if (n == 0 && (!writing || inflight == o->window)) {
            n = idle(m, cq, 64);
        }
        if (n < 0) {
            err = (sdd_err)n;
            break;
        }
        for (int i = 0; i < n && err == SDD_OK; i++) {
            if (cq[i].status != SDD_OK) {
                fprintf(stderr, "sddaq perf mesh: node %u: %s failed: %s\n", m->self,
                        sdd_cqe_kind_name(cq[i].kind), sdd_strerror(cq[i].status));
                err = cq[i].status;
            } else if (cq[i].kind == SDD_CQE_WRITE) {
                slot_busy[(uintptr_t)cq[i].ctx - 1] = false;
                inflight--;
                res->writes++;
                res->bytes += o->size;
                res->t1_ns = sdd_now_ns();
            }
        }
        if (!writing && inflight == 0 && !told) {
            told = true;
            atomic_fetch_add(&m->sh->finished, 1);
        }
        if (told && all_reached(&m->sh->finished, m)) {
            break;
        }
    }
    free(slot_busy);
    return err;
}

static int node_main(const struct mesh_opts *o, struct mesh_shared *sh, uint32_t self)
{
    struct mesh_node m = {.o = o, .sh = sh, .self = self};
    sdd_listener *lis = NULL;
    const char *step = "pin";
    sdd_err err = o->pin ? sdd_cpu_pin_self((int)(self % (uint32_t)sdd_cpu_count())) : SDD_OK;
    if (err == SDD_OK) {
        step = "open the endpoint";
        err = setup(&m);
    }
    if (err == SDD_OK) {
        step = "listen";
        err = sdd_ep_listen(m.ep, "127.0.0.1", 0, &lis);
    }
    if (err == SDD_OK) {
        atomic_store(&sh->port[self], sdd_listener_port(lis));
        step = "wait for the others to listen";
        err = barrier(&m, &sh->listening);
    }
    if (err == SDD_OK) {
        step = "connect";
        err = connect_all(&m, lis);
    }
    if (err == SDD_OK) {
        step = "wait for the others to connect";
        err = barrier(&m, &sh->connected);
    }
    if (err == SDD_OK) {
        step = "write";
        err = run_writes(&m);
    }
    if (err != SDD_OK) {
        sh->res[self].err = (int)err;
        if (err != SDD_ECANCELED) {
            fprintf(stderr, "sddaq perf mesh: node %u: %s: %s\n", self, step, sdd_strerror(err));
        }
        atomic_store(&sh->failed, 1);
    }
    sdd_ep_close(m.ep); /* closes peers, the listener and the regions */
    sdd_bigbuf_free(m.src, m.src_mapped);
    sdd_bigbuf_free(m.dst, m.dst_mapped);
    return err == SDD_OK ? 0 : 1;
}

static int parse(int argc, char **argv, struct mesh_opts *o)
{
    enum { O_WAIT = 256, O_PIN, O_JSON };
    static const struct option longs[] = {{"provider", required_argument, NULL, 'p'},
                                          {"nodes", required_argument, NULL, 'n'},
                                          {"size", required_argument, NULL, 's'},
                                          {"window", required_argument, NULL, 'w'},
                                          {"duration", required_argument, NULL, 'D'},
                                          {"wait", required_argument, NULL, O_WAIT},
                                          {"pin", no_argument, NULL, O_PIN},
                                          {"json", no_argument, NULL, O_JSON},
                                          {NULL, 0, NULL, 0}};
    bool bad = false;
    int c;
    optind = 1;
    while (!bad && (c = getopt_long(argc, argv, "p:n:s:w:D:", longs, NULL)) != -1) {
        switch (c) {
        case 'p':
            o->provider = optarg;
            break;
        case 'n':
            bad = cli_parse_u32(optarg, &o->nodes, MESH_MAX_NODES) != 0 || o->nodes < 2;
            break;
        case 's':
            bad = cli_parse_size(optarg, &o->size) != 0 || o->size == 0 || o->size > PERF_MAX_SIZE;
            break;
        case 'w':
            bad = cli_parse_u32(optarg, &o->window, 4096) != 0 || o->window == 0;
            break;
        case 'D':
            bad = cli_parse_double(optarg, &o->secs) != 0 || o->secs <= 0 || o->secs > 3600;
            break;
        case O_WAIT:
            bad = strcmp(optarg, "spin") == 0       ? (o->wait = SDD_WAIT_SPIN, false)
                  : strcmp(optarg, "adaptive") == 0 ? (o->wait = SDD_WAIT_ADAPTIVE, false)
                  : strcmp(optarg, "block") == 0    ? (o->wait = SDD_WAIT_BLOCK, false)
                                                    : true;
            break;
        case O_PIN:
            o->pin = true;
            break;
        case O_JSON:
            o->json = true;
            break;
        default:
            bad = true;
            break;
        }
        cli_report_bad("sddaq perf mesh", c, optarg, bad);
    }
    return cli_args_done("sddaq perf mesh", bad, optind, argc, argv);
}

static void report(const struct mesh_opts *o, const struct mesh_shared *sh, bool ok)
{
    const char *prov = sh->res[0].provider[0] ? sh->res[0].provider : o->provider;
    uint64_t bytes = 0, writes = 0, t0 = UINT64_MAX, t1 = 0;
    for (uint32_t k = 0; k < o->nodes; k++) {
        const struct mesh_node_result *r = &sh->res[k];
        bytes += r->bytes;
        writes += r->writes;
        t0 = r->t0_ns && r->t0_ns < t0 ? r->t0_ns : t0;
        t1 = r->t1_ns > t1 ? r->t1_ns : t1;
    }
    double secs = t1 > t0 ? (double)(t1 - t0) * 1e-9 : 0;
    double gbps = secs > 0 ? (double)bytes * 8e-9 / secs : 0;
    if (o->json) {
        printf("{\"tool\":\"sddaq-perf-mesh\",\"provider\":\"%s\",\"nodes\":%u,\"size\":%" PRIu64
               ",\"window\":%u,\"seconds\":%.3f,\"bytes\":%" PRIu64 ",\"writes\":%" PRIu64
               ",\"Gbps\":%.3f,\"per_node_Gbps\":%.3f,\"ok\":%s,\"node_Gbps\":[",
               prov, o->nodes, o->size, o->window, secs, bytes, writes, gbps,
               gbps / o->nodes, ok ? "true" : "false");
        for (uint32_t k = 0; k < o->nodes; k++) {
            const struct mesh_node_result *r = &sh->res[k];
            double s = r->t1_ns > r->t0_ns ? (double)(r->t1_ns - r->t0_ns) * 1e-9 : 0;
            printf("%s%.3f", k ? "," : "", s > 0 ? (double)r->bytes * 8e-9 / s : 0);
        }
        printf("]}\n");
    } else {
        printf("perf mesh: %u nodes over %s, %" PRIu64 " B writes, %u in flight per node: "
               "%.2f Gb/s in all (%.2f per node), %" PRIu64 " writes in %.3f s%s\n",
               o->nodes, prov, o->size, o->window, gbps, gbps / o->nodes, writes,
               secs, ok ? "" : " (FAILED)");
    }
}

int perf_mesh_main(int argc, char **argv)
{
    struct mesh_opts o = {.provider = "tcp",
                          .nodes = 2,
                          .size = 64 << 10,
                          .window = 64,
                          .secs = 2,
                          .wait = SDD_WAIT_ADAPTIVE};
    if (argc > 1 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
        usage(stdout);
        return 0;
    }
    if (parse(argc, argv, &o) != 0) {
        usage(stderr);
        return 2;
    }
    struct mesh_shared *sh =
        mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) {
        perror("sddaq perf mesh: mmap");
        return 1;
    }
    memset(sh, 0, sizeof(*sh));
    pid_t pids[MESH_MAX_NODES];
    uint32_t started = 0;
    fflush(NULL);
    pid_t launcher = getpid();
    for (; started < o.nodes; started++) {
        pids[started] = fork();
        if (pids[started] == 0) {
            cli_child_dies_with(launcher);
            _exit(node_main(&o, sh, started));
        }
        if (pids[started] < 0) {
            perror("sddaq perf mesh: fork");
            atomic_store(&sh->failed, 1);
            break;
        }
    }
    /* A child that dies without saying so (a signal) would leave the others waiting in a
     * barrier for 30 s; mark the run failed at once instead. */
    bool ok = started == o.nodes;
    for (uint32_t left = started; left > 0; left--) {
        int st = 0;
        pid_t pid = wait(&st);
        if (pid < 0) {
            break;
        }
        sdd_fabric_release_shm_of(pid);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            ok = false;
            atomic_store(&sh->failed, 1);
        }
    }
    report(&o, sh, ok);
    munmap(sh, sizeof(*sh));
    return ok ? 0 : 1;
}
