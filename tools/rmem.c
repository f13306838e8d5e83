/* sddaq rmem: serve a region or a self-synchronizing buffer, clone one, ping a server, and
 * benchmark sync and ping latency (the KIRO method: 40,000 samples, histograms). */
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "rmem.h"
#include "sddaq/clock.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: sddaq rmem serve [options]           publish a region (or --ksb buffer)\n"
            "       sddaq rmem clone HOST:PORT [options] follow a served --ksb buffer\n"
            "       sddaq rmem ping HOST:PORT [options]  control round trips to a server\n"
            "       sddaq rmem bench [options]           sync and ping latency, sync\n"
            "                                            throughput, server and client here\n"
            "\n"
            "  -p, --provider P   fabric provider (default auto; bench: list, default shm,tcp)\n"
            "      --host H       serve: address to bind (default all)\n"
            "      --port N       serve: port (default any; printed)\n"
            "  -s, --size B       serve: region bytes (default 1M); bench: largest transfer\n"
            "                     (default 64M)\n"
            "      --ksb B        serve: a self-synchronizing buffer of B-byte elements\n"
            "  -r, --rate HZ      serve --ksb: elements per second (default 1000)\n"
            "  -n, --count N      ping/bench: samples (default 40000); clone: elements\n"
            "  -D, --seconds S    run this long (default: serve/clone until Ctrl-C)\n"
            "      --json         JSON objects on stdout instead of tables\n");
}

static volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
    (void)sig;
    interrupted = 1;
}

static bool time_left(double seconds, uint64_t t0)
{
    return !interrupted && (seconds <= 0 || (double)(sdd_now_ns() - t0) < seconds * 1e9);
}

void rmem_print_hist(const char *provider, const char *what, const sdd_hist *h, bool json)
{
    struct sdd_hist_summary s;
    sdd_hist_summarize(h, &s);
    if (json) {
        printf("{\"provider\":\"%s\",\"test\":\"%s\",\"samples\":%" PRIu64
               ",\"min_us\":%.3f,\"p50_us\":%.3f,\"p90_us\":%.3f,\"p99_us\":%.3f,"
               "\"p999_us\":%.3f,\"max_us\":%.3f,\"mean_us\":%.3f}\n",
               provider, what, s.count, s.min / 1e3, s.p50 / 1e3, s.p90 / 1e3, s.p99 / 1e3,
               s.p999 / 1e3, s.max / 1e3, s.mean / 1e3);
    } else {
        printf("%-8s %-12s %8" PRIu64 " %9.2f %9.2f %9.2f %9.2f %9.2f %10.2f\n", provider, what,
               s.count, s.min / 1e3, s.p50 / 1e3, s.p99 / 1e3, s.p999 / 1e3, s.mean / 1e3,
               s.max / 1e3);
    }
}

/* ---- serve -------------------------------------------------------------------------------- */

int rmem_serve(const struct rmem_tool_opts *o)
{
    if (o->element > 0) {
        sdd_ksb *k = NULL;
        sdd_err err = sdd_ksb_serve(&o->rmem, o->element, &k);
        if (err != SDD_OK) {
            fprintf(stderr, "sddaq rmem serve: %s\n", sdd_strerror(err));
            return 1;
        }
        printf("serving a %" PRIu64 "-byte buffer on port %u, %.0f elements/s\n", o->element,
               sdd_rmem_server_port(sdd_ksb_server(k)), o->rate);
        fflush(stdout);
        uint64_t t0 = sdd_now_ns(), period = (uint64_t)(1e9 / o->rate), n = 0;
        while (time_left(o->seconds, t0)) {
            uint64_t *e = sdd_ksb_reserve(k);
            e[0] = ++n; /* element number, then the time it was made */
            e[1] = sdd_now_ns();
            sdd_ksb_commit(k);
            uint64_t next = t0 + n * period, now = sdd_now_ns();
            if (next > now) {
                sdd_sleep_ns(next - now);
            }
        }
        printf("pushed %" PRIu64 " elements\n", n);
        sdd_ksb_close(k);
        return 0;
    }
    sdd_rmem_server *srv = NULL;
    sdd_err err = sdd_rmem_server_open(&o->rmem, NULL, o->size, &srv);
    if (err != SDD_OK) {
        fprintf(stderr, "sddaq rmem serve: %s\n", sdd_strerror(err));
        return 1;
    }
    uint8_t *mem = sdd_rmem_server_region(srv, NULL);
    for (uint64_t i = 0; i < o->size; i++) {
        mem[i] = (uint8_t)(i * 131 + 7);
    }
    printf("serving %" PRIu64 " bytes on port %u\n", o->size, sdd_rmem_server_port(srv));
    fflush(stdout);
    uint64_t t0 = sdd_now_ns();
    while (time_left(o->seconds, t0)) {
        sdd_sleep_ns(50 * SDD_NS_PER_MS);
    }
    struct sdd_rmem_server_stats st;
    sdd_rmem_server_stats(srv, &st);
    printf("clients %" PRIu64 " total, %" PRIu64 " lost, %" PRIu64 " refused; %" PRIu64
           " pings; %" PRIu64 " bad messages\n",
           st.clients_total, st.clients_lost, st.clients_refused, st.pings, st.bad_messages);
    sdd_rmem_server_close(srv);
    return 0;
}

/* ---- clone and ping ----------------------------------------------------------------------- */

int rmem_clone(const struct rmem_tool_opts *o)
{
    sdd_ksb *k = NULL;
    sdd_err err = sdd_ksb_clone(&o->rmem, o->host, o->port, &k);
    if (err != SDD_OK) {
        fprintf(stderr, "sddaq rmem clone: %s\n", sdd_strerror(err));
        return 1;
    }
    uint64_t t0 = sdd_now_ns(), last_report = t0, got = 0;
    while (time_left(o->seconds, t0) && (o->count == 0 || got < o->count)) {
        struct sdd_ksb_elem e;
        err = sdd_ksb_wait_next(k, 200, &e);
        if (err == SDD_ETIMEDOUT) {
            continue;
        }
        if (err != SDD_OK) {
            fprintf(stderr, "sddaq rmem clone: %s\n", sdd_strerror(err));
            break;
        }
        got++;
        uint64_t now = sdd_now_ns();
        if (!o->json && now - last_report >= SDD_NS_PER_S) {
            struct sdd_ksb_stats st;
            sdd_ksb_stats(k, &st);
            printf("element %" PRIu64 ": %" PRIu64 " delivered, %" PRIu64 " skipped, %" PRIu64
                   " torn and retried\n",
                   e.seq, st.delivered, st.skipped, st.torn_retries);
            last_report = now;
        }
    }
    struct sdd_ksb_stats st;
    sdd_ksb_stats(k, &st);
    if (!o->json) {
        printf("delivered %" PRIu64 ", skipped %" PRIu64 ", torn and retried %" PRIu64
               ", header polls %" PRIu64 "\n",
               st.delivered, st.skipped, st.torn_retries, st.header_polls);
        printf("%-8s %-12s %8s %9s %9s %9s %9s %9s %10s\n", "", "", "samples", "min_us", "p50_us",
               "p99_us", "p99.9_us", "mean_us", "max_us");
    }
    rmem_print_hist(o->rmem.provider ? o->rmem.provider : "auto", "element_age", &st.age, o->json);
    sdd_ksb_close(k);
    return err == SDD_OK || err == SDD_ETIMEDOUT ? 0 : 1;
}

int rmem_ping(const struct rmem_tool_opts *o)
{
    sdd_rmem_client *cl = NULL;
    sdd_err err = sdd_rmem_client_connect(&o->rmem, o->host, o->port, &cl);
    if (err != SDD_OK) {
        fprintf(stderr, "sddaq rmem ping: %s\n", sdd_strerror(err));
        return 1;
    }
    sdd_hist h;
    sdd_hist_init(&h);
    for (uint64_t i = 0; i < o->count && !interrupted; i++) {
        uint64_t rtt = 0;
        err = sdd_rmem_client_ping(cl, &rtt);
        if (err != SDD_OK) {
            fprintf(stderr, "sddaq rmem ping: %s\n", sdd_strerror(err));
            break;
        }
        sdd_hist_record(&h, rtt);
    }
    rmem_print_hist(o->rmem.provider ? o->rmem.provider : "auto", "ping", &h, o->json);
    sdd_rmem_client_close(cl);
    return err == SDD_OK ? 0 : 1;
}

/* ---- command line ------------------------------------------------------------------------- */

enum { OPT_HOST = 256, OPT_PORT, OPT_KSB, OPT_JSON };

int cmd_rmem(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"provider", required_argument, NULL, 'p'},
        {"host", required_argument, NULL, OPT_HOST},
        {"port", required_argument, NULL, OPT_PORT},
        {"size", required_argument, NULL, 's'},
        {"ksb", required_argument, NULL, OPT_KSB},
        {"rate", required_argument, NULL, 'r'},
        {"count", required_argument, NULL, 'n'},
        {"seconds", required_argument, NULL, 'D'},
        {"json", no_argument, NULL, OPT_JSON},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int early = cli_help_or_missing(argc, argv, usage);
    if (early >= 0) {
        return early;
    }
    const char *mode = argv[1];
    struct rmem_tool_opts o = {.size = 0, .rate = 1000, .count = 40000};
    sdd_rmem_opts_default(&o.rmem);
    uint64_t port = 0;
    bool bad = false;
    int c;
    optind = 2;
    while (!bad && (c = getopt_long(argc, argv, "p:s:r:n:D:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'p':
            o.rmem.provider = optarg;
            o.providers = optarg;
            break;
        case OPT_HOST:
            o.rmem.host = optarg;
            break;
        case OPT_PORT:
            bad = cli_parse_size(optarg, &port) != 0 || port > 65535;
            o.rmem.port = (uint16_t)port;
            break;
        case 's':
            bad = cli_parse_size(optarg, &o.size) != 0 || o.size == 0;
            break;
        case OPT_KSB:
            bad = cli_parse_size(optarg, &o.element) != 0 || o.element < 16;
            break;
        case 'r':
            bad = cli_parse_double(optarg, &o.rate) != 0 || o.rate <= 0;
            break;
        case 'n':
            bad = cli_parse_size(optarg, &o.count) != 0 || o.count == 0;
            break;
        case 'D':
            bad = cli_parse_double(optarg, &o.seconds) != 0 || o.seconds <= 0;
            break;
        case OPT_JSON:
            o.json = true;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            bad = true;
        }
    }
    bool needs_target = strcmp(mode, "clone") == 0 || strcmp(mode, "ping") == 0;
    if (!bad && needs_target) {
        bad = optind >= argc ||
              cli_parse_hostport(argv[optind++], o.host, sizeof(o.host), &o.port) != 0;
    }
    if (bad || optind != argc) {
        usage(stderr);
        return 2;
    }
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGPIPE, SIG_IGN);
    if (strcmp(mode, "serve") == 0) {
        o.size = o.size ? o.size : 1 << 20;
        return rmem_serve(&o);
    }
    if (strcmp(mode, "clone") == 0) {
        o.count = o.count == 40000 ? 0 : o.count; /* clone: no default limit */
        return rmem_clone(&o);
    }
    if (strcmp(mode, "ping") == 0) {
        return rmem_ping(&o);
    }
    if (strcmp(mode, "bench") == 0) {
        o.size = o.size ? o.size : 64 << 20;
        o.providers = o.providers ? o.providers : "shm,tcp";
        return rmem_bench(&o);
    }
    usage(stderr);
    return 2;
}
