/* sddaq ctl: the run-control client (state, transitions, metrics) over the node's HTTP API,
 * and `serve-test`, a control server with the state machine and its run metrics but no stages,
 * to try the client and the API against (the real server comes with `sddaq run`/`node`). */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#include "sddaq/clock.h"
#include "sddaq/ctl.h"

#define CMD        "sddaq ctl"
#define DEFAULT_HP "127.0.0.1:7020"
#define TIMEOUT_MS 5000

static void usage(FILE *out)
{
    fprintf(out,
            "usage: sddaq ctl [--host H:P] COMMAND   talk to a node's control API\n"
            "       sddaq ctl serve-test [--listen H:P] [--seconds S] [--port-file F]\n"
            "\n"
            "commands:\n"
            "  state       print the run state (JSON)\n"
            "  configure   initial|stopped -> configured\n"
            "  start       configured -> running\n"
            "  pause       running -> paused\n"
            "  resume      paused -> running\n"
            "  stop        running|paused -> stopped\n"
            "  reset       error -> initial\n"
            "  fail        any -> error (with --reason)\n"
            "  metrics     print the Prometheus metrics text\n"
            "\n"
            "  -H, --host H:P     control address (default " DEFAULT_HP ")\n"
            "  -r, --reason TEXT  reason recorded with a transition\n"
            "\n"
            "serve-test runs a control server with the run state machine and its metrics but no\n"
            "stages (transitions only change the state); --listen defaults to 127.0.0.1:0 (any\n"
            "port), printed on stdout and written to --port-file. It stops on SIGINT/SIGTERM\n"
            "or after --seconds.\n"
            "\n"
            "Exit status: 0 on success, 1 when the server refused (HTTP 4xx/5xx, message on\n"
            "stderr) or could not be reached, 2 on bad usage.\n");
}

static const struct {
    const char *verb, *to;
} verbs[] = {
    {"configure", "configured"}, {"start", "running"}, {"pause", "paused"}, {"resume", "running"},
    {"stop", "stopped"},         {"reset", "initial"}, {"fail", "error"},
};

static int client(const char *hostport, const char *cmd, const char *reason)
{
    char host[256];
    uint16_t port;
    if (cli_parse_hostport(hostport, host, sizeof(host), &port) != 0) {
        fprintf(stderr, CMD ": invalid --host '%s' (expected host:port)\n", hostport);
        return 2;
    }
    const char *method = "GET", *path = NULL;
    char body[1024];
    bool post = false;
    if (strcmp(cmd, "state") == 0) {
        path = "/api/state";
    } else if (strcmp(cmd, "metrics") == 0) {
        path = "/metrics";
    } else {
        for (size_t i = 0; i < sizeof(verbs) / sizeof(verbs[0]); i++) {
            if (strcmp(cmd, verbs[i].verb) == 0) {
                char esc[600];
                sdd_json_escape(esc, sizeof(esc), reason != NULL ? reason : "");
                snprintf(body, sizeof(body), "{\"to\":\"%s\",\"reason\":\"%s\"}", verbs[i].to, esc);
                method = "POST";
                path = "/api/transition";
                post = true;
            }
        }
    }
    if (path == NULL) {
        fprintf(stderr, CMD ": unknown command '%s'\n", cmd);
        usage(stderr);
        return 2;
    }
    int status = 0;
    char *resp = NULL;
    sdd_err err = sdd_http_request(host, port, method, path, post ? body : NULL, TIMEOUT_MS,
                                   &status, &resp, NULL);
    if (err != SDD_OK) {
        fprintf(stderr, CMD ": %s:%u: %s\n", host, port, sdd_strerror(err));
        return 1;
    }
    int rc = 0;
    if (status >= 200 && status < 300) {
        fputs(resp, stdout);
        if (resp[0] != '\0' && resp[strlen(resp) - 1] != '\n') {
            fputc('\n', stdout);
        }
    } else {
        fprintf(stderr, CMD ": %s: HTTP %d: %s\n", cmd, status, resp);
        rc = 1;
    }
    free(resp);
    return rc;
}

static volatile sig_atomic_t stop_flag;

static void on_signal(int sig)
{
    (void)sig;
    stop_flag = 1;
}

static int serve_test(int argc, char **argv)
{
    static const struct option opts[] = {
        {"listen", required_argument, NULL, 'l'},
        {"seconds", required_argument, NULL, 's'},
        {"port-file", required_argument, NULL, 'p'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *listen = "127.0.0.1:0", *port_file = NULL;
    double seconds = 0;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "l:s:p:h", opts, NULL)) != -1) {
        bool bad = false;
        switch (c) {
        case 'l':
            listen = optarg;
            break;
        case 's':
            bad = cli_parse_double(optarg, &seconds) != 0 || seconds < 0;
            break;
        case 'p':
            port_file = optarg;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            bad = true;
        }
        if (bad) {
            cli_report_bad(CMD " serve-test", c, optarg, bad);
            return 2;
        }
    }
    char host[256];
    uint16_t port = 0;
    /* cli_parse_hostport refuses port 0, which means "any" here. */
    const char *colon = strrchr(listen, ':');
    if (colon != NULL && strcmp(colon, ":0") == 0 && (size_t)(colon - listen) < sizeof(host) &&
        colon != listen) {
        const char *h = listen;
        int hl = (int)(colon - listen);
        if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']') {
            h++;
            hl -= 2;
        }
        snprintf(host, sizeof(host), "%.*s", hl, h);
    } else if (cli_parse_hostport(listen, host, sizeof(host), &port) != 0) {
        fprintf(stderr, CMD " serve-test: invalid --listen '%s'\n", listen);
        return 2;
    }
    sdd_runctl *rc = NULL;
    sdd_metrics *m = NULL;
    sdd_http *h = NULL;
    int ret = 1;
    if (sdd_runctl_create(&rc) != SDD_OK || sdd_metrics_create(&m) != SDD_OK ||
        sdd_runctl_register_metrics(rc, m) != SDD_OK) {
        fprintf(stderr, CMD " serve-test: out of memory\n");
        goto out;
    }
    struct sdd_http_opts o = {.host = host, .port = port, .metrics = m, .runctl = rc};
    sdd_err err = sdd_http_start(&o, &h);
    if (err != SDD_OK) {
        fprintf(stderr, CMD " serve-test: cannot serve on %s: %s\n", listen, sdd_strerror(err));
        goto out;
    }
    printf("listening on %s:%u\n", host, sdd_http_port(h));
    fflush(stdout);
    if (port_file != NULL) {
        FILE *f = fopen(port_file, "w");
        if (f == NULL || fprintf(f, "%u\n", sdd_http_port(h)) < 0 || fclose(f) != 0) {
            fprintf(stderr, CMD " serve-test: cannot write %s\n", port_file);
            goto out;
        }
    }
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    uint64_t end = seconds > 0 ? sdd_now_ns() + (uint64_t)(seconds * 1e9) : UINT64_MAX;
    while (!stop_flag && sdd_now_ns() < end) {
        sdd_sleep_ns(20 * SDD_NS_PER_MS);
    }
    ret = 0;
out:
    sdd_http_stop(h);
    sdd_metrics_destroy(m);
    sdd_runctl_destroy(rc);
    return ret;
}

int cmd_ctl(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "serve-test") == 0) {
        return serve_test(argc - 1, argv + 1);
    }
    static const struct option opts[] = {
        {"host", required_argument, NULL, 'H'},
        {"reason", required_argument, NULL, 'r'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *hostport = DEFAULT_HP, *reason = NULL;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "H:r:h", opts, NULL)) != -1) {
        switch (c) {
        case 'H':
            hostport = optarg;
            break;
        case 'r':
            reason = optarg;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            return 2;
        }
    }
    if (optind != argc - 1) {
        usage(stderr);
        return 2;
    }
    return client(hostport, argv[optind], reason);
}
