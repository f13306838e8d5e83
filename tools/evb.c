/* sddaq evb: the event builder from the command line. `run` runs one node of a multi-host run
 * (its index, the node list, the run's parameters); `launch` forks N nodes on this machine and
 * accounts for every event globally; `check` tallies the event records that `run --record`
 * wrote; `bench` sweeps fragment size, bulk size and credits over N local nodes and sets the
 * results next to raw `sddaq perf` bandwidth measured in the same invocation. */
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
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
#include "sddaq/clock.h"
#include "sddaq/cpu.h"
#include "sddaq/evb.h"
#include "sddaq/fabric.h"
#include "sddaq/log.h"

#define MAX_SWEEP 16

struct evb_cli {
    struct sdd_evb_opts o;
    char *hosts[SDD_EVB_MAX_NODES];
    uint16_t ports[SDD_EVB_MAX_NODES];
    bool have_nodes;
    const char *record;
    bool json;
    int kill_node;
    uint64_t kill_after; /* built events before the kill */
    /* bench sweeps */
    uint64_t nodes_list[MAX_SWEEP], frag_list[MAX_SWEEP], bulk_list[MAX_SWEEP],
        credit_list[MAX_SWEEP];
    int n_nodes, n_frag, n_bulk, n_credit;
    double perf_s;
    uint32_t repeat;
    bool verify_given;
    bool pin; /* launch: node i runs on CPU i mod the CPU count */
};

static void usage(FILE *out)
{
    fprintf(out,
            "usage: sddaq evb run --node I --nodes H:P,H:P,... [options]   one node\n"
            "       sddaq evb launch -n N [options]   N nodes on this machine, global accounting\n"
            "       sddaq evb check -e EVENTS --sources R FILE...   tally run --record files\n"
            "                                          (a second copy flagged RESENT, a BU's\n"
            "                                          failure just after delivering, is\n"
            "                                          dup_resent, not an error)\n"
            "       sddaq evb bench [-n 2,4] [--frag-sizes L] [--bulks L] [--credit-list L]\n"
            "\n"
            "  -p, --provider P     fabric provider (tcp, shm, verbs, ..., auto)\n"
            "  -n, --nodes-count N  launch/bench: nodes (bench: a list, default 2,4)\n"
            "      --roles LIST     per node: both | ru | bu, comma separated (default both)\n"
            "  -e, --events N       events in the run (default 100000)\n"
            "  -b, --bulk N         events per bulk (default 64)\n"
            "  -c, --credits N      slots each BU grants each RU, max 32 (default auto: up to\n"
            "                       4, or where BUs read over shm up to 16 to keep 1 MiB of\n"
            "                       slots per RU and BU; fewer where the bulk memory of the\n"
            "                       nodes on one host would pass 32 MiB)\n"
            "  -s, --frag-size N    fragment payload bytes (mean) (default 1024)\n"
            "      --dist D         fixed | uniform | lognormal (default fixed)\n"
            "      --min N, --max N size bounds; --sigma X  log-normal sigma (default 0.5)\n"
            "      --seed N         size seed (default 1)\n"
            "  -r, --rate R         events/s per RU (default 0 = as fast as possible)\n"
            "      --verify V       none | header | full (default full)\n"
            "      --crc            RUs add and BUs check a CRC32C per fragment\n"
            "      --transfer T     auto | write | read: RUs write bulks into BU slots, or BUs\n"
            "                       read them from the RUs (default auto: read over shm when\n"
            "                       every node has a CPU, else write)\n"
            "      --hb-ms N, --dead-ms N, --timeout-ms N   heartbeat, dead peer, event timeout\n"
            "      --corrupt-every N  test hook: corrupt every N-th fragment\n"
            "      --record FILE    run: append 16-byte records (event, flags, present) per event\n"
            "      --kill NODE --kill-after EVENTS   launch: SIGKILL NODE after EVENTS built\n"
            "      --wait MODE      adaptive | spin | block (default adaptive)\n"
            "      --spin-us N      adaptive: poll N us before yielding or sleeping (default\n"
            "                       20; 0 over shm with more nodes than CPUs)\n"
            "      --pin            launch: node i runs on CPU i mod the CPU count\n"
            "      --json           one JSON object per result\n"
            "  bench: (default --verify header) --frag-sizes L, --bulks L, --credit-list L (lists "
            "like 1K,4K),\n"
            "         --perf-seconds S (each raw reference's run per point, default 2),\n"
            "         --repeat N (references and evb alternate N times per point, medians;\n"
            "         default 3), --pin (references and builder). The ratio evb/mesh is\n"
            "         against `sddaq perf mesh` (N processes writing to each other, credits x\n"
            "         (N-1) writes in flight each); evb/1way against `sddaq perf self`\n"
            "         (one buffer, as ib_write_bw); evb/1wM against `sddaq perf self\n"
            "         --span` through as much memory as the builder's pools and slots.\n");
}

enum {
    O_ROLES = 256,
    O_DIST,
    O_MIN,
    O_MAX,
    O_SIGMA,
    O_SEED,
    O_VERIFY,
    O_CRC,
    O_HB,
    O_DEAD,
    O_TMO,
    O_CORRUPT,
    O_RECORD,
    O_KILL,
    O_KILL_AFTER,
    O_JSON,
    O_NODE,
    O_NODES,
    O_FRAGS,
    O_BULKS,
    O_CREDITS,
    O_PERF_S,
    O_REPEAT,
    O_PIN,
    O_WAIT,
    O_SPIN,
    O_TRANSFER,
};

static int parse_roles(struct evb_cli *c, const char *s)
{
    char buf[1024];
    snprintf(buf, sizeof(buf), "%s", s);
    uint32_t i = 0;
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (i >= SDD_EVB_MAX_NODES) {
            return -1;
        }
        if (strcmp(t, "both") == 0 || strcmp(t, "rb") == 0) {
            c->o.roles[i++] = SDD_EVB_ROLE_RU | SDD_EVB_ROLE_BU;
        } else if (strcmp(t, "ru") == 0) {
            c->o.roles[i++] = SDD_EVB_ROLE_RU;
        } else if (strcmp(t, "bu") == 0) {
            c->o.roles[i++] = SDD_EVB_ROLE_BU;
        } else {
            return -1;
        }
    }
    return i > 0 ? 0 : -1;
}

static int parse_nodes(struct evb_cli *c, const char *s)
{
    char buf[4096];
    snprintf(buf, sizeof(buf), "%s", s);
    uint32_t i = 0;
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        char host[256];
        if (i >= SDD_EVB_MAX_NODES ||
            cli_parse_hostport(t, host, sizeof(host), &c->ports[i]) != 0) {
            return -1;
        }
        c->hosts[i++] = strdup(host);
    }
    c->o.nnodes = i;
    c->have_nodes = i > 0;
    /* Auto credits count the nodes that share a host; the list is the same on every node. */
    c->o.host_nodes = sdd_evb_host_nodes((const char *const *)c->hosts, i);
    return i > 0 ? 0 : -1;
}

static int u32_arg(const char *s, uint64_t lo, uint64_t hi, uint32_t *out)
{
    uint64_t v;
    if (cli_parse_size(s, &v) != 0 || v < lo || v > hi) {
        return -1;
    }
    *out = (uint32_t)v;
    return 0;
}

static int parse_option(struct evb_cli *c, int opt, const char *arg)
{
    struct sdd_evb_opts *o = &c->o;
    uint64_t v;
    switch (opt) {
    case 'p':
        o->provider = arg;
        return 0;
    case 'n':
        c->n_nodes = cli_parse_sizes(arg, c->nodes_list, MAX_SWEEP);
        return c->n_nodes > 0 ? 0 : -1;
    case 'e':
        return cli_parse_size(arg, &o->events) == 0 && o->events > 0 ? 0 : -1;
    case 'b':
        return u32_arg(arg, 1, 65536, &o->bulk);
    case 'c':
        if (strcmp(arg, "auto") == 0) {
            o->credits = 0;
            return 0;
        }
        return u32_arg(arg, 1, 32, &o->credits);
    case 's':
        return u32_arg(arg, 0, 1u << 26, &o->src.mean);
    case 'r':
        return cli_parse_double(arg, &o->rate) == 0 && o->rate >= 0 ? 0 : -1;
    case O_ROLES:
        return parse_roles(c, arg);
    case O_DIST:
        o->src.dist = strcmp(arg, "fixed") == 0       ? SDD_EVB_SIZE_FIXED
                      : strcmp(arg, "uniform") == 0   ? SDD_EVB_SIZE_UNIFORM
                      : strcmp(arg, "lognormal") == 0 ? SDD_EVB_SIZE_LOGNORMAL
                                                      : (sdd_evb_dist)-1;
        return (int)o->src.dist >= 0 ? 0 : -1;
    case O_MIN:
        return u32_arg(arg, 0, 1u << 26, &o->src.min);
    case O_MAX:
        return u32_arg(arg, 1, 1u << 26, &o->src.max);
    case O_SIGMA:
        return cli_parse_double(arg, &o->src.sigma) == 0 && o->src.sigma > 0 ? 0 : -1;
    case O_SEED:
        return cli_parse_size(arg, &o->src.seed);
    case O_VERIFY:
        c->verify_given = true;
        o->verify = strcmp(arg, "none") == 0     ? SDD_EVB_VERIFY_NONE
                    : strcmp(arg, "header") == 0 ? SDD_EVB_VERIFY_HEADER
                    : strcmp(arg, "full") == 0   ? SDD_EVB_VERIFY_FULL
                                                 : (sdd_evb_verify)-1;
        return (int)o->verify >= 0 ? 0 : -1;
    case O_CRC:
        o->crc = true;
        return 0;
    case O_TRANSFER: {
        int t = sdd_evb_transfer_parse(arg);
        o->transfer = (sdd_evb_transfer)(t >= 0 ? t : 0);
        return t >= 0 ? 0 : -1;
    }
    case O_HB:
        return u32_arg(arg, 1, 600000, &o->hb_ms);
    case O_DEAD:
        return u32_arg(arg, 2, 3600000, &o->dead_ms);
    case O_TMO:
        return u32_arg(arg, 1, 3600000, &o->event_timeout_ms);
    case O_CORRUPT:
        return cli_parse_size(arg, &o->corrupt_every);
    case O_RECORD:
        c->record = arg;
        return 0;
    case O_KILL:
        if (cli_parse_size(arg, &v) != 0 || v >= SDD_EVB_MAX_NODES) {
            return -1;
        }
        c->kill_node = (int)v;
        return 0;
    case O_KILL_AFTER:
        return cli_parse_size(arg, &c->kill_after);
    case O_JSON:
        c->json = true;
        return 0;
    case O_NODE:
        return u32_arg(arg, 0, SDD_EVB_MAX_NODES - 1, &o->node);
    case O_NODES:
        return parse_nodes(c, arg);
    case O_FRAGS:
        c->n_frag = cli_parse_sizes(arg, c->frag_list, MAX_SWEEP);
        return c->n_frag > 0 ? 0 : -1;
    case O_BULKS:
        c->n_bulk = cli_parse_sizes(arg, c->bulk_list, MAX_SWEEP);
        return c->n_bulk > 0 ? 0 : -1;
    case O_CREDITS:
        c->n_credit = cli_parse_sizes(arg, c->credit_list, MAX_SWEEP);
        return c->n_credit > 0 ? 0 : -1;
    case O_WAIT:
        o->wait_mode = strcmp(arg, "adaptive") == 0 ? SDD_WAIT_ADAPTIVE
                       : strcmp(arg, "spin") == 0   ? SDD_WAIT_SPIN
                       : strcmp(arg, "block") == 0  ? SDD_WAIT_BLOCK
                                                    : -1;
        return o->wait_mode >= 0 ? 0 : -1;
    case O_SPIN: {
        uint32_t us;
        if (cli_parse_u32(arg, &us, 1000000) != 0) {
            return -1;
        }
        o->spin_us = (int32_t)us;
        return 0;
    }
    case O_REPEAT:
        return u32_arg(arg, 1, 99, &c->repeat);
    case O_PIN:
        c->pin = true;
        return 0;
    case O_PERF_S:
        return cli_parse_double(arg, &c->perf_s) == 0 && c->perf_s > 0 ? 0 : -1;
    }
    return -1;
}

static int parse_args(int argc, char **argv, struct evb_cli *c)
{
    static const struct option longopts[] = {
        {"provider", required_argument, NULL, 'p'},
        {"nodes-count", required_argument, NULL, 'n'},
        {"events", required_argument, NULL, 'e'},
        {"bulk", required_argument, NULL, 'b'},
        {"credits", required_argument, NULL, 'c'},
        {"frag-size", required_argument, NULL, 's'},
        {"rate", required_argument, NULL, 'r'},
        {"roles", required_argument, NULL, O_ROLES},
        {"dist", required_argument, NULL, O_DIST},
        {"min", required_argument, NULL, O_MIN},
        {"max", required_argument, NULL, O_MAX},
        {"sigma", required_argument, NULL, O_SIGMA},
        {"seed", required_argument, NULL, O_SEED},
        {"verify", required_argument, NULL, O_VERIFY},
        {"crc", no_argument, NULL, O_CRC},
        {"transfer", required_argument, NULL, O_TRANSFER},
        {"hb-ms", required_argument, NULL, O_HB},
        {"dead-ms", required_argument, NULL, O_DEAD},
        {"timeout-ms", required_argument, NULL, O_TMO},
        {"corrupt-every", required_argument, NULL, O_CORRUPT},
        {"record", required_argument, NULL, O_RECORD},
        {"kill", required_argument, NULL, O_KILL},
        {"kill-after", required_argument, NULL, O_KILL_AFTER},
        {"json", no_argument, NULL, O_JSON},
        {"node", required_argument, NULL, O_NODE},
        {"nodes", required_argument, NULL, O_NODES},
        {"frag-sizes", required_argument, NULL, O_FRAGS},
        {"bulks", required_argument, NULL, O_BULKS},
        {"credit-list", required_argument, NULL, O_CREDITS},
        {"perf-seconds", required_argument, NULL, O_PERF_S},
        {"repeat", required_argument, NULL, O_REPEAT},
        {"pin", no_argument, NULL, O_PIN},
        {"wait", required_argument, NULL, O_WAIT},
        {"spin-us", required_argument, NULL, O_SPIN},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    optind = 1;
    int opt;
    int at = -1;
    while ((opt = getopt_long(argc, argv, "p:n:e:b:c:s:r:h", longopts, &at)) != -1) {
        if (opt == 'h') {
            usage(stdout);
            exit(0);
        }
        if (opt == '?' || parse_option(c, opt, optarg) != 0) {
            if (opt < 256 && opt != '?') {
                fprintf(stderr, "sddaq evb: bad value '%s' for -%c\n", optarg, opt);
            } else if (opt != '?') {
                fprintf(stderr, "sddaq evb: bad value '%s' for --%s\n", optarg, longopts[at].name);
            }
            return -1;
        }
        at = -1;
    }
    return 0;
}

/* ---- one node ------------------------------------------------------------------------------ */

struct record_sink {
    FILE *f;
};

static void record_event(const struct sdd_evb_event *ev, void *arg)
{
    struct record_sink *s = arg;
    struct {
        uint64_t id;
        uint32_t flags;
        uint32_t present;
    } r = {ev->event_id, ev->flags, (uint32_t)ev->present[0]};
    fwrite(&r, sizeof(r), 1, s->f);
    if (ev->batch_end) {
        fflush(s->f); /* into the kernel before the acknowledgements: survives SIGKILL */
    }
}

static void print_node_stats(const struct evb_cli *c, uint32_t node, const struct sdd_evb_stats *s)
{
    double secs = s->end_ns > s->start_ns ? (double)(s->end_ns - s->start_ns) * 1e-9 : 0;
    printf("{\"tool\":\"sddaq-evb\",\"node\":%u,\"seconds\":%.3f,\"events_built\":%" PRIu64
           ",\"complete\":%" PRIu64 ",\"incomplete\":%" PRIu64 ",\"corrupt\":%" PRIu64
           ",\"frags_corrupt\":%" PRIu64 ",\"bulks_sent\":%" PRIu64 ",\"bulks_local\":%" PRIu64
           ",\"bulks_resent\":%" PRIu64 ",\"bulks_dup\":%" PRIu64 ",\"bu_failures\":%" PRIu64
           ",\"ru_failures\":%" PRIu64 ",\"fenced\":%u,\"bulks_fenced\":%" PRIu64
           ",\"lease_waits\":%" PRIu64 ",\"bulks_in_doubt\":%" PRIu64
           ",\"events_uncommitted\":%" PRIu64
           ",\"announce\":\"%s\",\"tx_Gbps\":%.3f,\"rx_Gbps\":%.3f}\n",
           node, secs, s->events_built, s->events_complete, s->events_incomplete, s->events_corrupt,
           s->frags_corrupt, s->bulks_sent, s->bulks_local, s->bulks_resent, s->bulks_dup,
           s->bu_failures, s->ru_failures, s->fenced, s->bulks_fenced, s->lease_waits,
           s->bulks_in_doubt, s->events_uncommitted, sdd_evb_announce_name(s->announce),
           secs > 0 ? (double)s->bytes_sent * 8e-9 / secs : 0,
           secs > 0 ? (double)s->bytes_rx * 8e-9 / secs : 0);
    (void)c;
    fflush(stdout);
}

static int run_one_node(struct evb_cli *c)
{
    if (!c->have_nodes || c->o.node >= c->o.nnodes) {
        fprintf(stderr, "sddaq evb run: need --nodes H:P,... and --node I within it\n");
        return 2;
    }
    struct record_sink sink = {NULL};
    if (c->record) {
        sink.f = fopen(c->record, "wb");
        if (sink.f == NULL) {
            perror(c->record);
            return 1;
        }
        setvbuf(sink.f, NULL, _IOFBF, 1 << 16);
        c->o.on_event = record_event;
        c->o.on_event_arg = &sink;
    }
    c->o.host = c->hosts[c->o.node];
    c->o.port = c->ports[c->o.node];
    sdd_evb_node *n = NULL;
    sdd_err err = sdd_evb_node_create(&c->o, &n);
    if (err == SDD_OK) {
        err = sdd_evb_node_connect(n, (const char *const *)c->hosts, c->ports, 120000);
    }
    if (err == SDD_OK) {
        err = sdd_evb_node_run(n);
    }
    if (n) {
        struct sdd_evb_stats s;
        sdd_evb_node_stats(n, &s);
        print_node_stats(c, c->o.node, &s);
    }
    sdd_evb_node_destroy(n);
    if (sink.f) {
        fclose(sink.f);
    }
    if (err != SDD_OK) {
        fprintf(stderr, "sddaq evb run: %s\n", sdd_strerror(err));
        return err == SDD_EFENCED ? 3 : 1; /* 3: fenced, told apart for supervisors */
    }
    return 0;
}

/* ---- launch: N nodes here ------------------------------------------------------------------ */

struct shared {
    _Atomic uint64_t built;
    struct sdd_evb_stats st[SDD_EVB_MAX_NODES];
    _Atomic int ok[SDD_EVB_MAX_NODES];
    uint64_t again[SDD_EVB_MAX_NODES]; /* deliveries of an event this node had delivered */
};

/* The global accounting: per node, one bit per event it delivered and one per event it
 * delivered more than once. A node writes only its own words, so accounting for an event is a
 * load and a store, not a locked operation on a line the other nodes write too; the parent
 * adds them up once every node has exited. Flags are rare and stay one shared byte per event. */
static struct shared *g_sh;
static uint64_t *g_bits; /* 2 x nodes x words: node i's delivered, then its again */
static size_t g_words;   /* 64-bit words per bitmap */
static _Atomic uint8_t *g_flags;
static uint64_t *g_mine, *g_mine_again; /* in a node: its two bitmaps */
static uint32_t g_node;

static void launch_event(const struct sdd_evb_event *ev, void *arg)
{
    (void)arg;
    uint64_t e = ev->event_id, bit = 1ull << (e % 64);
    if (e / 64 >= g_words) {
        return; /* not an event of this run: the BU validated it, so never here */
    }
    if (g_mine[e / 64] & bit) {
        g_mine_again[e / 64] |= bit;
        g_sh->again[g_node]++;
    }
    g_mine[e / 64] |= bit;
    if (ev->flags != 0) {
        atomic_fetch_or(&g_flags[e], (uint8_t)ev->flags);
    }
    /* One shared counter for all nodes: touch it once per bulk, not per event. */
    static uint64_t pending;
    pending++;
    if (ev->batch_end) {
        atomic_fetch_add_explicit(&g_sh->built, pending, memory_order_relaxed);
        pending = 0;
    }
}

static int launch_child(struct sdd_evb_opts o, int port_w, int list_r)
{
    g_node = o.node;
    g_mine = g_bits + 2 * (size_t)o.node * g_words;
    g_mine_again = g_mine + g_words;
    o.on_event = launch_event;
    o.host = "127.0.0.1";
    o.port = 0;
    sdd_evb_node *n = NULL;
    if (sdd_evb_node_create(&o, &n) != SDD_OK) {
        return 2;
    }
    uint16_t port = sdd_evb_node_port(n);
    uint16_t ports[SDD_EVB_MAX_NODES];
    const char *hosts[SDD_EVB_MAX_NODES];
    if (write(port_w, &port, 2) != 2 ||
        read(list_r, ports, 2 * o.nnodes) != (ssize_t)(2 * o.nnodes)) {
        sdd_evb_node_destroy(n);
        return 3;
    }
    for (uint32_t i = 0; i < o.nnodes; i++) {
        hosts[i] = "127.0.0.1";
    }
    sdd_err err = sdd_evb_node_connect(n, hosts, ports, 120000);
    if (err == SDD_OK) {
        err = sdd_evb_node_run(n);
    }
    sdd_evb_node_stats(n, &g_sh->st[o.node]);
    atomic_store(&g_sh->ok[o.node], err == SDD_OK);
    sdd_evb_node_destroy(n);
    return err == SDD_OK ? 0 : 1;
}

struct launch_result {
    bool ok;
    double secs;
    uint64_t built, lost, dup, complete, incomplete, corrupt;
    uint64_t dup_at_kill; /* delivered by the killed BU before its ACK left, and again (RESENT) */
    uint64_t net_bytes, built_bytes;
    double gbps_net, gbps_built, evps;
    double cpu_ru, cpu_bu, cpu_proc; /* per node, fraction of one core (mean) */
    uint64_t kill_ns;
    double failover_ms; /* kill to all re-sent bulks built (max over RUs) */
    double detect_ms;
    uint32_t transfer; /* node 0's: SDD_EVB_TRANSFER_WRITE or _READ (every node agrees) */
    uint32_t announce; /* node 0's: sdd_evb_announce */
    uint32_t spin_us;  /* node 0's adaptive spin, resolved */
    uint32_t credits;  /* node 0's credits, resolved (every node agrees) */
};

static void *shared_map(size_t len)
{
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static int launch(const struct evb_cli *c, struct launch_result *res)
{
    memset(res, 0, sizeof(*res));
    struct sdd_evb_opts o = c->o;
    uint32_t nn = o.nnodes;
    if (o.host_nodes == 0) {
        o.host_nodes = nn; /* every node runs here, whatever the provider */
    }
    g_sh = shared_map(sizeof(*g_sh));
    g_words = (o.events + 63) / 64;
    size_t bits_len = 2 * (size_t)nn * g_words * sizeof(uint64_t);
    g_bits = shared_map(bits_len);
    g_flags = shared_map(o.events);
    if (g_sh == NULL || g_bits == NULL || g_flags == NULL) {
        fprintf(stderr, "sddaq evb: cannot map %" PRIu64 " event counters\n", o.events);
        return 1;
    }
    pid_t pids[SDD_EVB_MAX_NODES];
    pid_t launcher = getpid();
    int pw[SDD_EVB_MAX_NODES][2], lr[SDD_EVB_MAX_NODES][2];
    for (uint32_t i = 0; i < nn; i++) {
        if (pipe(pw[i]) != 0 || pipe(lr[i]) != 0) {
            return 1;
        }
        fflush(NULL);
        pids[i] = fork();
        if (pids[i] == 0) {
            cli_child_dies_with(launcher);
            o.node = i;
            if (c->pin && sdd_cpu_pin_self((int)(i % (uint32_t)sdd_cpu_count())) != SDD_OK) {
                _exit(2);
            }
            _exit(launch_child(o, pw[i][1], lr[i][0]));
        }
    }
    uint16_t ports[SDD_EVB_MAX_NODES] = {0};
    bool started = true;
    for (uint32_t i = 0; i < nn; i++) {
        struct pollfd pfd = {.fd = pw[i][0], .events = POLLIN};
        if (poll(&pfd, 1, 30000) != 1 || read(pw[i][0], &ports[i], 2) != 2) {
            fprintf(stderr, "sddaq evb: node %u did not start\n", i);
            started = false;
        }
    }
    for (uint32_t i = 0; i < nn; i++) {
        if (started && write(lr[i][1], ports, 2 * nn) != (ssize_t)(2 * nn)) {
            started = false;
        }
        close(pw[i][0]);
        close(pw[i][1]);
        close(lr[i][0]);
        close(lr[i][1]);
    }
    if (!started) {
        for (uint32_t i = 0; i < nn; i++) {
            kill(pids[i], SIGKILL);
        }
    }
    if (started && c->kill_node >= 0 && (uint32_t)c->kill_node < nn) {
        while (atomic_load(&g_sh->built) < c->kill_after) {
            siginfo_t si = {0};
            if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid != 0) {
                break; /* a node ended early: do not wait forever (it is reaped below) */
            }
            sdd_sleep_ns(200 * SDD_NS_PER_US);
        }
        res->kill_ns = sdd_now_ns();
        kill(pids[c->kill_node], SIGKILL);
    }
    bool all_ok = started;
    for (uint32_t i = 0; i < nn; i++) {
        int st = 0;
        waitpid(pids[i], &st, 0);
        sdd_fabric_release_shm_of(pids[i]); /* a killed node leaves its regions behind */
        bool killed = (int)i == c->kill_node;
        if (killed || (WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
            continue;
        }
        if (WIFSIGNALED(st)) {
            fprintf(stderr, "sddaq evb: node %u died of signal %d (%s)\n", i, WTERMSIG(st),
                    strsignal(WTERMSIG(st)));
        } else {
            fprintf(stderr, "sddaq evb: node %u failed (exit %d)\n", i,
                    WIFEXITED(st) ? WEXITSTATUS(st) : -1);
        }
        all_ok = false;
    }
    uint64_t t0 = UINT64_MAX, t1 = 0;
    uint32_t counted = 0;
    for (uint32_t i = 0; i < nn; i++) {
        const struct sdd_evb_stats *s = &g_sh->st[i];
        if ((int)i == c->kill_node || s->start_ns == 0) {
            continue;
        }
        t0 = s->start_ns < t0 ? s->start_ns : t0;
        t1 = s->end_ns > t1 ? s->end_ns : t1;
        res->net_bytes += s->bytes_sent;
        double secs = s->end_ns > s->start_ns ? (double)(s->end_ns - s->start_ns) * 1e-9 : 1;
        res->cpu_ru += (double)s->ru_busy_ns * 1e-9 / secs;
        res->cpu_bu += (double)s->bu_busy_ns * 1e-9 / secs;
        res->cpu_proc += (double)s->cpu_ns * 1e-9 / secs;
        counted++;
        if (s->fail_detect_ns && res->kill_ns) {
            double d = (double)(s->fail_detect_ns - res->kill_ns) * 1e-6;
            res->detect_ms = d > res->detect_ms ? d : res->detect_ms;
            if (s->fail_resend_ns) {
                double f = (double)(s->fail_resend_ns - res->kill_ns) * 1e-6;
                res->failover_ms = f > res->failover_ms ? f : res->failover_ms;
            }
        }
    }
    if (counted) {
        res->cpu_ru /= counted;
        res->cpu_bu /= counted;
        res->cpu_proc /= counted;
    }
    res->secs = t1 > t0 ? (double)(t1 - t0) * 1e-9 : 0;
    for (uint32_t i = 0; i < nn; i++) {
        res->built += g_sh->again[i];
    }
    for (size_t w = 0; w < g_words; w++) {
        uint64_t seen = 0, twice = 0, resent = 0;
        uint64_t killed = 0, killed_again = 0, others = 0, others_twice = 0;
        for (uint32_t i = 0; i < nn; i++) {
            const uint64_t *mine = g_bits + 2 * (size_t)i * g_words;
            twice |= (seen & mine[w]) | mine[g_words + w];
            seen |= mine[w];
            res->built += (uint64_t)__builtin_popcountll(mine[w]);
            if ((int)i == c->kill_node) {
                killed = mine[w];
                killed_again = mine[g_words + w];
            } else {
                others_twice |= (others & mine[w]) | mine[g_words + w];
                others |= mine[w];
            }
        }
        uint64_t n = o.events - 64 * w < 64 ? o.events - 64 * w : 64;
        for (uint64_t b = 0; b < n; b++) {
            uint8_t f = g_flags[64 * w + b];
            res->complete += ((seen >> b) & 1) && (f & ~SDD_EVB_EV_RESENT) == 0;
            res->incomplete += (f & SDD_EVB_EV_MISSING) != 0;
            res->corrupt += (f & SDD_EVB_EV_CORRUPT) != 0;
            resent |= (uint64_t)((f & SDD_EVB_EV_RESENT) != 0) << b;
        }
        /* Delivered by the killed BU in its last instant, before its acknowledgement left, and
         * built again from the re-sent bulk (flagged RESENT) by one survivor: at-least-once. */
        uint64_t at_kill = killed & ~killed_again & others & ~others_twice & resent;
        uint64_t valid = n == 64 ? ~0ull : (1ull << n) - 1;
        res->lost += (uint64_t)__builtin_popcountll(~seen & valid);
        res->dup += (uint64_t)__builtin_popcountll(twice & ~at_kill);
        res->dup_at_kill += (uint64_t)__builtin_popcountll(twice & at_kill);
    }
    for (uint32_t i = 0; i < nn; i++) {
        res->built_bytes += g_sh->st[i].bytes_built;
    }
    res->transfer = g_sh->st[0].transfer;
    res->announce = g_sh->st[0].announce;
    res->spin_us = g_sh->st[0].spin_us;
    res->credits = g_sh->st[0].credits;
    if (res->secs > 0) {
        res->gbps_net = (double)res->net_bytes * 8e-9 / res->secs;
        res->gbps_built = (double)res->built_bytes * 8e-9 / res->secs;
        res->evps = (double)o.events / res->secs;
    }
    res->ok = all_ok && res->lost == 0 && res->dup == 0;
    munmap(g_sh, sizeof(*g_sh));
    munmap(g_bits, bits_len);
    munmap((void *)g_flags, o.events);
    return all_ok ? 0 : 1;
}

static void print_launch(const struct evb_cli *c, const struct launch_result *r)
{
    const struct sdd_evb_opts *o = &c->o;
    if (c->json) {
        printf("{\"tool\":\"sddaq-evb-launch\",\"provider\":\"%s\",\"nodes\":%u,\"events\":%" PRIu64
               ",\"bulk\":%u,\"credits\":%u,\"frag\":%u,\"seconds\":%.3f,\"built\":%" PRIu64
               ",\"lost\":%" PRIu64 ",\"dup\":%" PRIu64 ",\"complete\":%" PRIu64
               ",\"incomplete\":%" PRIu64 ",\"corrupt\":%" PRIu64
               ",\"net_Gbps\":%.3f,\"built_Gbps\":%.3f,\"events_per_s\":%.0f,\"cpu_ru\":%.3f,"
               "\"cpu_bu\":%.3f,\"cpu_proc\":%.3f,\"detect_ms\":%.1f,\"failover_ms\":%.1f,"
               "\"dup_at_kill\":%" PRIu64 ",\"transfer\":\"%s\",\"announce\":\"%s\","
               "\"spin_us\":%u}\n",
               o->provider ? o->provider : "auto", o->nnodes, o->events, o->bulk, r->credits,
               o->src.mean, r->secs, r->built, r->lost, r->dup, r->complete, r->incomplete,
               r->corrupt, r->gbps_net, r->gbps_built, r->evps, r->cpu_ru, r->cpu_bu, r->cpu_proc,
               r->detect_ms, r->failover_ms, r->dup_at_kill, sdd_evb_transfer_name(r->transfer),
               sdd_evb_announce_name(r->announce), r->spin_us);
    } else {
        printf("evb launch: %u nodes over %s, %" PRIu64 " events, bulk %u, credits %u, "
               "fragment %u B, idle spin %u us, bulks %s%s\n",
               o->nnodes, o->provider ? o->provider : "auto", o->events, o->bulk, r->credits,
               o->src.mean, o->wait_mode == SDD_WAIT_ADAPTIVE ? r->spin_us : 0,
               r->transfer == SDD_EVB_TRANSFER_READ ? "read by the BUs" : "written by the RUs",
               r->transfer == SDD_EVB_TRANSFER_READ         ? ""
               : r->announce == SDD_EVB_ANNOUNCE_IMM        ? " with immediate data"
               : r->announce == SDD_EVB_ANNOUNCE_WITH_WRITE ? ", a message right behind each"
                                                            : ", a message once each completed");
        printf("  %.3f s: %" PRIu64 " built, %" PRIu64 " lost, %" PRIu64 " built twice, %" PRIu64
               " complete, %" PRIu64 " incomplete, %" PRIu64 " corrupt\n",
               r->secs, r->built, r->lost, r->dup, r->complete, r->incomplete, r->corrupt);
        printf("  throughput: %.2f Gb/s over the fabric (all nodes), %.2f Gb/s built, %.0f "
               "events/s; per node %.2f Gb/s\n",
               r->gbps_net, r->gbps_built, r->evps, r->gbps_net / o->nnodes);
        printf("  CPU per node: RU %.0f %%, BU %.0f %% of wall time busy; process %.0f %% of a "
               "core\n",
               100 * r->cpu_ru, 100 * r->cpu_bu, 100 * r->cpu_proc);
        if (r->kill_ns) {
            printf("  killed node %d: detected after %.1f ms, its bulks rebuilt after %.1f ms; "
                   "%" PRIu64 " events it delivered just before the kill were built again "
                   "(flagged resent)\n",
                   c->kill_node, r->detect_ms, r->failover_ms, r->dup_at_kill);
        }
    }
    fflush(stdout);
}

static int cmd_launch(struct evb_cli *c)
{
    c->o.nnodes = c->n_nodes > 0 ? (uint32_t)c->nodes_list[0] : 2;
    if (c->o.nnodes < 1 || c->o.nnodes > SDD_EVB_MAX_NODES) {
        fprintf(stderr, "sddaq evb launch: -n must be 1..%d\n", SDD_EVB_MAX_NODES);
        return 2;
    }
    struct launch_result r;
    int rc = launch(c, &r);
    print_launch(c, &r);
    return rc == 0 && r.ok ? 0 : 1;
}

/* ---- check: tally record files ------------------------------------------------------------- */

static int cmd_check(struct evb_cli *c, int argc, char **argv)
{
    uint64_t ev = c->o.events;
    uint8_t *count = calloc(ev, 1);
    uint8_t *resent = calloc(ev, 1); /* of count, the copies flagged RESENT */
    uint8_t *flags = calloc(ev, 1);
    if (count == NULL || resent == NULL || flags == NULL) {
        return 1;
    }
    uint64_t bad = 0;
    for (int i = optind; i < argc; i++) {
        FILE *f = fopen(argv[i], "rb");
        if (f == NULL) {
            perror(argv[i]);
            return 1;
        }
        struct {
            uint64_t id;
            uint32_t flags;
            uint32_t present;
        } r;
        while (fread(&r, sizeof(r), 1, f) == 1) {
            if (r.id >= ev) {
                bad++;
                continue;
            }
            count[r.id] += count[r.id] < 255;
            resent[r.id] += (r.flags & SDD_EVB_EV_RESENT) && resent[r.id] < 255;
            flags[r.id] |= (uint8_t)r.flags;
        }
        fclose(f);
    }
    uint64_t lost = 0, dup = 0, dup_resent = 0, complete = 0, incomplete = 0, corrupt = 0;
    for (uint64_t e = 0; e < ev; e++) {
        lost += count[e] == 0;
        /* Built by a BU that failed just after delivering, before its acknowledgement left,
         * and once more from the re-sent bulk (flagged RESENT): at-least-once at a failure
         * (docs/evb.md "Failures"). Any other second copy is an error. */
        bool at_failure = count[e] == 2 && resent[e] == 1;
        dup_resent += at_failure;
        dup += count[e] > 1 && !at_failure;
        complete += count[e] > 0 && (flags[e] & ~SDD_EVB_EV_RESENT) == 0;
        incomplete += (flags[e] & SDD_EVB_EV_MISSING) != 0;
        corrupt += (flags[e] & SDD_EVB_EV_CORRUPT) != 0;
    }
    printf("{\"tool\":\"sddaq-evb-check\",\"events\":%" PRIu64 ",\"lost\":%" PRIu64
           ",\"dup\":%" PRIu64 ",\"dup_resent\":%" PRIu64 ",\"complete\":%" PRIu64
           ",\"incomplete\":%" PRIu64 ",\"corrupt\":%" PRIu64 ",\"bad_records\":%" PRIu64 "}\n",
           ev, lost, dup, dup_resent, complete, incomplete, corrupt, bad);
    free(count);
    free(resent);
    free(flags);
    return lost == 0 && dup == 0 && bad == 0 ? 0 : 1;
}

/* ---- bench --------------------------------------------------------------------------------- */

struct spread {
    double med, min, max;
};

static struct spread spread_of(const double *v, uint32_t n)
{
    double t[99];
    memcpy(t, v, n * sizeof(*v));
    for (uint32_t i = 1; i < n; i++) {
        for (uint32_t j = i; j > 0 && t[j - 1] > t[j]; j--) {
            double x = t[j];
            t[j] = t[j - 1];
            t[j - 1] = x;
        }
    }
    return (struct spread){n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]), t[0], t[n - 1]};
}

/* Run this binary with args; the last value of "key": in its output (-1: none, or it failed). */
static double tool_number(const char *args, const char *key)
{
    char cmd[640], pat[64];
    snprintf(cmd, sizeof(cmd), "/proc/%d/exe %s", (int)getpid(), args);
    snprintf(pat, sizeof(pat), "\"%s\":", key);
    fflush(NULL);
    FILE *p = popen(cmd, "r");
    if (p == NULL) {
        return -1;
    }
    char line[4096];
    double v = -1;
    while (fgets(line, sizeof(line), p)) {
        const char *k = strstr(line, pat);
        if (k) {
            v = strtod(k + strlen(pat), NULL);
        }
    }
    return pclose(p) == 0 ? v : -1;
}

/* The raw references at the bulk size, same provider: one writer to one target (`sddaq perf
 * self`, 64 writes in flight), and N processes all writing to each other with the builder's
 * writes in flight, credits per peer (`sddaq perf mesh`): the same traffic, no event work. */
static double oneway_Gbps(const struct evb_cli *run, uint64_t size, uint64_t span, double secs)
{
    char args[256];
    snprintf(args, sizeof(args),
             "perf self -p %s -t bw -o write -s %" PRIu64 " --span %" PRIu64 " -D %.1f --json",
             run->o.provider, size, span, secs);
    double MBps = tool_number(args, "bw_MBps");
    return MBps > 0 ? MBps * 8e-3 : MBps;
}

static double mesh_Gbps(const struct evb_cli *run, uint64_t size, double secs)
{
    char args[256];
    uint32_t window = run->o.credits * (run->o.nnodes - 1);
    snprintf(args, sizeof(args), "perf mesh -p %s -n %u -s %" PRIu64 " -w %u -D %.1f --json%s",
             run->o.provider, run->o.nnodes, size, window < 4096 ? window : 4096, secs,
             run->pin ? " --pin" : "");
    return tool_number(args, "Gbps");
}

/* One point of the sweep: references and event builder alternate c->repeat times (the machine
 * is shared and noisy, DESIGN.md "Measuring"); medians with min-max are printed. */
static int bench_point(const struct evb_cli *c, struct evb_cli *run)
{
    uint64_t bulk_bytes = (uint64_t)run->o.bulk * (32 + 16 + ((run->o.src.mean + 7) & ~7u)) + 40;
    double one[99] = {0}, spans[99] = {0}, mesh[99] = {0}, nets[99] = {0};
    struct launch_result rs[99];
    memset(rs, 0, sizeof(rs));
    /* The one-way reference again, its writes stepping through as much memory as the builder's
     * pools and slots on this host (half on each side, at most perf's 16 MiB a side). */
    uint64_t span = sdd_evb_host_bulk_bytes(&run->o, run->o.provider, run->o.credits) / 2;
    span = span < PERF_MAX_SIZE ? span : PERF_MAX_SIZE;
    int lr = 0;
    for (uint32_t k = 0; k < c->repeat; k++) {
        one[k] = oneway_Gbps(run, bulk_bytes, 0, c->perf_s);
        spans[k] = oneway_Gbps(run, bulk_bytes, span, c->perf_s);
        mesh[k] = mesh_Gbps(run, bulk_bytes, c->perf_s);
        lr |= launch(run, &rs[k]);
        nets[k] = rs[k].gbps_net;
    }
    struct spread so = spread_of(one, c->repeat), sp = spread_of(spans, c->repeat),
                  sm = spread_of(mesh, c->repeat), se = spread_of(nets, c->repeat);
    struct launch_result r = rs[0]; /* the median run's details, the worst accounting */
    for (uint32_t k = 0; k < c->repeat; k++) {
        if (rs[k].gbps_net == se.med) {
            r = rs[k];
        }
    }
    for (uint32_t k = 0; k < c->repeat; k++) {
        r.lost = rs[k].lost > r.lost ? rs[k].lost : r.lost;
        r.dup = rs[k].dup > r.dup ? rs[k].dup : r.dup;
        r.ok = r.ok && rs[k].ok;
    }
    double ratio = sm.med > 0 ? 100.0 * se.med / sm.med : 0;
    double ratio_one = so.med > 0 ? 100.0 * se.med / so.med : 0;
    double ratio_span = sp.med > 0 ? 100.0 * se.med / sp.med : 0;
    const struct sdd_evb_opts *o = &run->o;
    if (c->json) {
        printf("{\"tool\":\"sddaq-evb-bench\",\"provider\":\"%s\",\"nodes\":%u,\"frag\":%u,"
               "\"bulk\":%u,\"credits\":%u,\"bulk_bytes\":%" PRIu64 ",\"mesh_Gbps\":%.3f,"
               "\"mesh_min_max\":[%.3f,%.3f],\"oneway_Gbps\":%.3f,\"oneway_min_max\":[%.3f,%.3f],"
               "\"evb_net_Gbps\":%.3f,\"evb_min_max\":[%.3f,%.3f],\"evb_per_node_Gbps\":%.3f,"
               "\"ratio_pct\":%.1f,\"ratio_oneway_pct\":%.1f,\"span_bytes\":%" PRIu64
               ",\"oneway_span_Gbps\":%.3f,\"oneway_span_min_max\":[%.3f,%.3f],"
               "\"ratio_oneway_span_pct\":%.1f,\"repeat\":%u,"
               "\"events_per_s\":%.0f,\"cpu_ru\":%.3f,\"cpu_bu\":%.3f,\"cpu_proc\":%.3f,"
               "\"lost\":%" PRIu64 ",\"dup\":%" PRIu64 ",\"transfer\":\"%s\"}\n",
               o->provider, o->nnodes, o->src.mean, o->bulk, o->credits, bulk_bytes, sm.med, sm.min,
               sm.max, so.med, so.min, so.max, se.med, se.min, se.max, se.med / o->nnodes, ratio,
               ratio_one, span, sp.med, sp.min, sp.max, ratio_span, c->repeat, r.evps, r.cpu_ru,
               r.cpu_bu, r.cpu_proc, r.lost, r.dup, sdd_evb_transfer_name(r.transfer));
    } else {
        printf("%5u %7u %6u %7u %9.1f %9.2f %9.2f %9.2f %9.2f %8.1f %8.1f %8.1f %9.1f %7.0f %7.0f "
               "%7.0f %5" PRIu64 " %4" PRIu64 " %5s\n",
               o->nnodes, o->src.mean, o->bulk, o->credits, (double)bulk_bytes / 1024, so.med,
               sp.med, sm.med, se.med, ratio, ratio_one, ratio_span, r.evps / 1e3, 100 * r.cpu_ru,
               100 * r.cpu_bu, 100 * r.cpu_proc, r.lost, r.dup, sdd_evb_transfer_name(r.transfer));
    }
    fflush(stdout);
    return lr != 0 || !r.ok || sm.med <= 0 || so.med <= 0 ? 1 : 0;
}

static int cmd_bench(struct evb_cli *c)
{
    if (c->n_nodes == 0) {
        c->n_nodes = cli_parse_sizes("2,4", c->nodes_list, MAX_SWEEP);
    }
    if (c->n_frag == 0) {
        c->frag_list[0] = c->o.src.mean;
        c->n_frag = 1;
    }
    if (c->n_bulk == 0) {
        c->bulk_list[0] = c->o.bulk;
        c->n_bulk = 1;
    }
    if (c->n_credit == 0) {
        c->credit_list[0] = c->o.credits;
        c->n_credit = 1;
    }
    if (c->o.provider == NULL) {
        c->o.provider = "tcp";
    }
    if (!c->verify_given) {
        c->o.verify = SDD_EVB_VERIFY_HEADER; /* LSEB checks headers; --verify full adds payloads */
    }
    if (!c->json) {
        printf("%5s %7s %6s %7s %9s %9s %9s %9s %9s %8s %8s %8s %9s %7s %7s %7s %5s %4s %5s\n",
               "nodes", "frag", "bulk", "credits", "bulk[KB]", "1way[Gb]", "1wayM[Gb]", "mesh[Gb]",
               "evb[Gb]", "evb/mesh", "evb/1way", "evb/1wM", "kev/s", "RU[%]", "BU[%]", "proc[%]",
               "lost", "dup", "xfer");
    }
    int rc = 0;
    for (int a = 0; a < c->n_nodes; a++) {
        for (int f = 0; f < c->n_frag; f++) {
            for (int b = 0; b < c->n_bulk; b++) {
                for (int k = 0; k < c->n_credit; k++) {
                    struct evb_cli run = *c;
                    run.o.nnodes = (uint32_t)c->nodes_list[a];
                    run.o.src.mean = (uint32_t)c->frag_list[f];
                    run.o.bulk = (uint32_t)c->bulk_list[b];
                    run.o.credits = (uint32_t)c->credit_list[k];
                    run.o.host_nodes = run.o.nnodes;
                    run.o.credits = sdd_evb_credits(&run.o, run.o.provider);
                    run.kill_node = -1;
                    rc |= bench_point(c, &run);
                }
            }
        }
    }
    return rc;
}

int cmd_evb(int argc, char **argv)
{
    int early = cli_help_or_missing(argc, argv, usage);
    if (early >= 0) {
        return early;
    }
    signal(SIGPIPE, SIG_IGN);
    struct evb_cli c;
    memset(&c, 0, sizeof(c));
    sdd_evb_opts_default(&c.o);
    c.kill_node = -1;
    c.perf_s = 2;
    c.repeat = 3;
    const char *sub = argv[1];
    if (parse_args(argc - 1, argv + 1, &c) != 0) {
        usage(stderr);
        return 2;
    }
    int rc;
    if (strcmp(sub, "run") == 0) {
        rc = run_one_node(&c);
    } else if (strcmp(sub, "launch") == 0) {
        rc = cmd_launch(&c);
    } else if (strcmp(sub, "check") == 0) {
        rc = cmd_check(&c, argc - 1, argv + 1);
    } else if (strcmp(sub, "bench") == 0) {
        rc = cmd_bench(&c);
    } else {
        fprintf(stderr, "sddaq evb: unknown subcommand '%s'\n", sub);
        usage(stderr);
        rc = 2;
    }
    for (int i = 0; i < SDD_EVB_MAX_NODES; i++) {
        free(c.hosts[i]);
    }
    return rc;
}
