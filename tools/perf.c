/* sddaq perf: command-line front end (server, client, self), result printing as a table or as
 * JSON lines, and the self-benchmark that runs a server and a client on this machine for each
 * provider. */
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "perf.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: sddaq perf server [options]\n"
            "       sddaq perf client HOST:PORT [options]\n"
            "       sddaq perf self [options]         (server and client on this machine)\n"
            "       sddaq perf mesh [options]         (N processes writing to each other; see\n"
            "                                          sddaq perf mesh --help)\n"
            "\n"
            "  -p, --provider P    fabric provider: tcp, shm, verbs, efa, ..., auto (default)\n"
            "                      self: a comma list (default shm,tcp)\n"
            "  -t, --test T        lat | bw (default lat)\n"
            "  -o, --op OP         send | write | read (default send); lat write is a\n"
            "                      ping-pong of RMA writes with immediate data\n"
            "  -s, --sizes LIST    8 | 8,4K,64K | 8:16M (powers of two); default 8:16M\n"
            "  -n, --iters N       operations per size (default depends on size)\n"
            "  -D, --duration S    seconds per size instead of a count\n"
            "  -w, --window N      operations in flight for bw (default 64)\n"
            "      --span BYTES    bw write/read: each operation takes the next stretch of\n"
            "                      both buffers, through BYTES of each (at most 16M; default\n"
            "                      0: one buffer, as ib_write_bw)\n"
            "      --wait MODE     spin | adaptive | block (default adaptive)\n"
            "      --json          one JSON object per size on stdout, nothing else\n"
            "  server only: --host H (default all), --port N (default any), --port-file F,\n"
            "               --once (exit after the first client)\n");
}

enum { OPT_WAIT = 256, OPT_JSON, OPT_HOST, OPT_PORT, OPT_PORT_FILE, OPT_ONCE, OPT_SPAN };

static int parse_wait(const char *s, sdd_wait_mode *w)
{
    if (strcmp(s, "spin") == 0) {
        *w = SDD_WAIT_SPIN;
    } else if (strcmp(s, "adaptive") == 0) {
        *w = SDD_WAIT_ADAPTIVE;
    } else if (strcmp(s, "block") == 0) {
        *w = SDD_WAIT_BLOCK;
    } else {
        return -1;
    }
    return 0;
}

static int parse_option(struct perf_opts *o, int c, const char *arg)
{
    uint64_t v;
    switch (c) {
    case 'p':
        o->provider = arg;
        return 0;
    case 't':
        o->test = strcmp(arg, "lat") == 0 ? PERF_LAT : strcmp(arg, "bw") == 0 ? PERF_BW : 0;
        return o->test ? 0 : -1;
    case 'o':
        o->op = strcmp(arg, "send") == 0    ? PERF_SEND
                : strcmp(arg, "write") == 0 ? PERF_WRITE
                : strcmp(arg, "read") == 0  ? PERF_READ
                                            : 0;
        return o->op ? 0 : -1;
    case 's':
        o->nsizes = cli_parse_sizes(arg, o->sizes, PERF_MAX_SIZES);
        for (int i = 0; i < o->nsizes; i++) {
            if (o->sizes[i] == 0 || o->sizes[i] > PERF_MAX_SIZE) {
                return -1;
            }
        }
        return o->nsizes > 0 ? 0 : -1;
    case 'n':
        return cli_parse_size(arg, &o->iters) == 0 && o->iters > 0 ? 0 : -1;
    case 'D':
        return cli_parse_double(arg, &o->duration) == 0 && o->duration > 0 && o->duration < 3600
                   ? 0
                   : -1;
    case 'w':
        if (cli_parse_size(arg, &v) != 0 || v == 0 || v > 512) {
            return -1;
        }
        o->window = (uint32_t)v;
        return 0;
    case OPT_SPAN:
        return cli_parse_size(arg, &o->span) == 0 && o->span <= PERF_MAX_SIZE ? 0 : -1;
    case OPT_WAIT:
        return parse_wait(arg, &o->wait);
    case OPT_JSON:
        o->json = true;
        return 0;
    case OPT_HOST:
        o->host = arg;
        return 0;
    case OPT_PORT:
        if (cli_parse_size(arg, &v) != 0 || v > 65535) {
            return -1;
        }
        o->port = (uint16_t)v;
        return 0;
    case OPT_PORT_FILE:
        o->port_file = arg;
        return 0;
    case OPT_ONCE:
        o->once = true;
        return 0;
    }
    return -1;
}

static int parse_args(int argc, char **argv, struct perf_opts *o)
{
    static const struct option longopts[] = {
        {"provider", required_argument, NULL, 'p'},
        {"test", required_argument, NULL, 't'},
        {"op", required_argument, NULL, 'o'},
        {"sizes", required_argument, NULL, 's'},
        {"iters", required_argument, NULL, 'n'},
        {"duration", required_argument, NULL, 'D'},
        {"window", required_argument, NULL, 'w'},
        {"wait", required_argument, NULL, OPT_WAIT},
        {"span", required_argument, NULL, OPT_SPAN},
        {"json", no_argument, NULL, OPT_JSON},
        {"host", required_argument, NULL, OPT_HOST},
        {"port", required_argument, NULL, OPT_PORT},
        {"port-file", required_argument, NULL, OPT_PORT_FILE},
        {"once", no_argument, NULL, OPT_ONCE},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, "p:t:o:s:n:D:w:h", longopts, NULL)) != -1) {
        if (c == 'h') {
            usage(stdout);
            exit(0);
        }
        if (c == '?' || parse_option(o, c, optarg) != 0) {
            if (c != '?') {
                fprintf(stderr, "sddaq perf: bad value '%s' for -%c\n", optarg, c < 256 ? c : '-');
            }
            return -1;
        }
    }
    return 0;
}

static void defaults(struct perf_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->provider = "auto";
    o->port_pipe = -1;
    o->wait = SDD_WAIT_ADAPTIVE;
    o->test = PERF_LAT;
    o->op = PERF_SEND;
    o->window = 64;
    o->nsizes = cli_parse_sizes("8:16M", o->sizes, PERF_MAX_SIZES);
}

void perf_print_result(const struct perf_opts *o, const char *provider, const struct perf_result *r,
                       bool first)
{
    double us = 1e-3;
    if (o->json) {
        printf("{\"tool\":\"sddaq-perf\",\"provider\":\"%s\",\"test\":\"%s\",\"op\":\"%s\","
               "\"size\":%llu,\"iters\":%llu,\"window\":%u,\"wait\":\"%s\",\"span\":%llu,",
               provider, perf_test_name(r->test), perf_op_name(r->op), (unsigned long long)r->size,
               (unsigned long long)r->iters, r->window, perf_wait_name(o->wait),
               (unsigned long long)o->span);
        if (r->test == PERF_LAT) {
            printf("\"lat_us\":{\"p50\":%.3f,\"p90\":%.3f,\"p99\":%.3f,\"min\":%.3f,"
                   "\"max\":%.3f,\"mean\":%.3f},",
                   r->lat.p50 * us, r->lat.p90 * us, r->lat.p99 * us, r->lat.min * us,
                   r->lat.max * us, r->lat.mean * us);
        } else {
            printf("\"lat_us\":null,");
        }
        printf("\"bw_MBps\":%.2f,\"msg_rate_kps\":%.2f}\n", r->bw_MBps, r->msg_rate_kps);
        fflush(stdout);
        return;
    }
    if (first) {
        printf("\n%s %s over %s (wait %s)%s\n", perf_test_name(r->test), perf_op_name(r->op),
               provider, perf_wait_name(o->wait),
               r->test == PERF_LAT ? (r->op == PERF_READ ? ", latency = whole read"
                                                         : ", latency = one way (half round trip)")
                                   : "");
        if (r->test == PERF_LAT) {
            printf("%10s %9s %9s %9s %9s %9s %9s %10s\n", "bytes", "iters", "p50[us]", "mean[us]",
                   "p99[us]", "min[us]", "max[us]", "MB/s");
        } else {
            printf("%10s %9s %7s %12s %12s\n", "bytes", "iters", "window", "MB/s", "kmsg/s");
        }
    }
    if (r->test == PERF_LAT) {
        printf("%10llu %9llu %9.2f %9.2f %9.2f %9.2f %9.2f %10.1f\n", (unsigned long long)r->size,
               (unsigned long long)r->iters, r->lat.p50 * us, r->lat.mean * us, r->lat.p99 * us,
               r->lat.min * us, r->lat.max * us, r->bw_MBps);
    } else {
        printf("%10llu %9llu %7u %12.1f %12.1f\n", (unsigned long long)r->size,
               (unsigned long long)r->iters, r->window, r->bw_MBps, r->msg_rate_kps);
    }
    fflush(stdout);
}

/* Start a server child for one provider; returns its pid and port, or -1. */
static pid_t spawn_server(const struct perf_opts *o, uint16_t *port)
{
    int fds[2];
    if (pipe(fds) != 0) {
        return -1;
    }
    fflush(NULL);
    pid_t launcher = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        cli_child_dies_with(launcher);
        close(fds[0]);
        struct perf_opts so = *o;
        so.host = "127.0.0.1";
        so.port = 0;
        so.once = true;
        so.port_pipe = fds[1];
        _exit(perf_server_run(&so));
    }
    close(fds[1]);
    struct pollfd pfd = {.fd = fds[0], .events = POLLIN};
    int ok = pid > 0 && poll(&pfd, 1, 15000) == 1 &&
             read(fds[0], port, sizeof(*port)) == (ssize_t)sizeof(*port);
    close(fds[0]);
    if (!ok) {
        if (pid > 0) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            sdd_fabric_release_shm_of(pid);
        }
        return -1;
    }
    return pid;
}

static int run_self_one(struct perf_opts *o)
{
    uint16_t port = 0;
    pid_t pid = spawn_server(o, &port);
    if (pid < 0) {
        fprintf(stderr, "sddaq perf: server for '%s' did not start\n", o->provider);
        return 1;
    }
    o->host = "127.0.0.1";
    o->port = port;
    int rc = perf_client_run(o);
    int status = 0;
    if (rc != 0) {
        kill(pid, SIGKILL);
    }
    waitpid(pid, &status, 0);
    sdd_fabric_release_shm_of(pid);
    return rc != 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0;
}

/* The self-benchmark: every op and test over each provider, server and client on this host. */
static int run_self(struct perf_opts *o, bool sizes_given, bool test_given)
{
    if (!sizes_given) {
        o->nsizes = cli_parse_sizes("8,4K,64K,1M", o->sizes, PERF_MAX_SIZES);
    }
    const char *provs = strcmp(o->provider, "auto") == 0 ? "shm,tcp" : o->provider;
    char list[128];
    snprintf(list, sizeof(list), "%s", provs);
    static const enum perf_op ops[] = {PERF_SEND, PERF_WRITE, PERF_READ};
    static const enum perf_test tests[] = {PERF_LAT, PERF_BW};
    int failures = 0;
    char *save = NULL;
    for (char *p = strtok_r(list, ",", &save); p != NULL; p = strtok_r(NULL, ",", &save)) {
        for (size_t t = 0; t < 2; t++) {
            for (size_t k = 0; k < 3; k++) {
                struct perf_opts one = *o;
                one.provider = p;
                if (!test_given) {
                    one.test = tests[t];
                    one.op = ops[k];
                } else if (t > 0 || k > 0) {
                    continue;
                }
                if (one.iters == 0 && one.duration == 0) {
                    one.duration = 0.3; /* keep the whole table under about a minute */
                }
                failures += run_self_one(&one);
            }
        }
    }
    return failures ? 1 : 0;
}

int cmd_perf(int argc, char **argv)
{
    int early = cli_help_or_missing(argc, argv, usage);
    if (early >= 0) {
        return early;
    }
    const char *mode = argv[1];
    if (strcmp(mode, "mesh") == 0) {
        signal(SIGPIPE, SIG_IGN);
        return perf_mesh_main(argc - 1, argv + 1);
    }
    struct perf_opts o;
    defaults(&o);
    int first = 2;
    char host[256];
    if (strcmp(mode, "client") == 0) {
        if (argc < 3 || cli_parse_hostport(argv[2], host, sizeof(host), &o.port) != 0) {
            fprintf(stderr, "sddaq perf client: expected HOST:PORT\n");
            return 2;
        }
        o.host = host;
        first = 3;
    }
    bool sizes_given = false, test_given = false;
    for (int i = first; i < argc; i++) {
        sizes_given |= strcmp(argv[i], "-s") == 0 || strncmp(argv[i], "--sizes", 7) == 0;
        test_given |= strcmp(argv[i], "-t") == 0 || strcmp(argv[i], "-o") == 0 ||
                      strncmp(argv[i], "--test", 6) == 0 || strncmp(argv[i], "--op", 4) == 0;
    }
    if (parse_args(argc - first + 1, argv + first - 1, &o) != 0) {
        usage(stderr);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    if (strcmp(mode, "server") == 0) {
        return perf_server_run(&o);
    }
    if (strcmp(mode, "client") == 0) {
        return perf_client_run(&o);
    }
    if (strcmp(mode, "self") == 0) {
        return run_self(&o, sizes_given, test_given);
    }
    fprintf(stderr, "sddaq perf: unknown mode '%s'\n", mode);
    usage(stderr);
    return 2;
}
