/* sddaq run: run a topology on this machine, the embedded default chain when no file is given:
 * emulated tracker readout -> readout units -> builder units -> Hough trigger -> HDF5, with the
 * trigger's decisions on a feedback buffer. */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#include "sddaq/run.h"

static volatile sig_atomic_t stop_flag;

static void on_signal(int sig)
{
    (void)sig;
    stop_flag = 1;
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: sddaq run [TOPOLOGY.yaml] [options]\n"
            "\n"
            "Runs every stage of the topology on this machine until run.events events were\n"
            "built or run.duration seconds passed (Ctrl-C ends it early, cleanly): the sources\n"
            "stop first and everything in flight is built, decided and written. Without a file\n"
            "it runs the embedded default chain (`sddaq config default` prints it).\n"
            "\n"
            "  -d, --duration S   run for S seconds (overrides run.duration)\n"
            "  -n, --events N     stop after N events (overrides run.events; alone, no time limit)\n"
            "      --wait-start   stay configured until `sddaq ctl start` (HTTP) starts the run\n"
            "      --no-http      do not serve the control port (state, transitions, /metrics)\n"
            "  -q, --quiet        no progress line\n"
            "      --json         print the summary as one JSON object\n"
            "\n"
            "Exit status: 0 when the run ended cleanly and every event is accounted for, 1 when\n"
            "the run failed or the accounting does not add up, 2 for bad arguments or topology.\n");
}

static sdd_config *load(const char *path)
{
    struct sdd_config_diag d = {0};
    sdd_config *cfg = NULL;
    sdd_err err = path ? sdd_config_load(path, &cfg, &d) : sdd_config_load_default(&cfg, &d);
    if (err != SDD_OK) {
        for (size_t i = 0; i < d.stored; i++) {
            fprintf(stderr, "%s\n", d.errors[i].text);
        }
        if (d.count == 0) {
            fprintf(stderr, "sddaq run: %s: %s\n", path ? path : "<default>", sdd_strerror(err));
        }
    }
    sdd_config_diag_fini(&d);
    return cfg;
}

static int run_main(int argc, char **argv, const char *node)
{
    static const struct option longopts[] = {
        {"duration", required_argument, 0, 'd'}, {"events", required_argument, 0, 'n'},
        {"wait-start", no_argument, 0, 'w'},     {"no-http", no_argument, 0, 'H'},
        {"quiet", no_argument, 0, 'q'},          {"json", no_argument, 0, 'j'},
        {"help", no_argument, 0, 'h'},           {0, 0, 0, 0}};
    struct sdd_run_opts o;
    sdd_run_opts_default(&o);
    o.progress = true;
    o.node = node;
    bool json = false, bad = false;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "d:n:qh", longopts, NULL)) != -1) {
        switch (c) {
        case 'd':
            bad |= cli_parse_double(optarg, &o.duration_s) != 0 || o.duration_s <= 0;
            break;
        case 'n':
            bad |= cli_parse_size(optarg, &o.events) != 0 || o.events == 0;
            break;
        case 'w':
            o.wait_for_start = true;
            break;
        case 'H':
            o.http = false;
            break;
        case 'q':
            o.progress = false;
            break;
        case 'j':
            json = true;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            bad = true;
        }
        cli_report_bad("run", c, optarg, bad);
        if (bad) {
            return 2;
        }
    }
    if (argc - optind > 1) {
        fprintf(stderr, "sddaq run: one topology file at most\n");
        return 2;
    }
    if (o.wait_for_start && !o.http) {
        fprintf(stderr, "sddaq run: --wait-start needs the control port (drop --no-http)\n");
        return 2;
    }
    sdd_config *cfg = load(optind < argc ? argv[optind] : NULL);
    if (cfg == NULL) {
        return 2;
    }
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    o.stop = &stop_flag;
    o.announce = stderr;
    struct sdd_run_summary s;
    sdd_err err = sdd_run_execute(cfg, &o, &s);
    if (!s.ran) {
        /* Refused or not set up: the log said why; nothing ran, so there is nothing to sum. */
        fprintf(stderr, "sddaq run: %s: %s\n", cfg->file, s.reason);
        sdd_run_summary_fini(&s);
        sdd_config_destroy(cfg);
        return err == SDD_ENOTSUP || err == SDD_EINVAL ? 2 : 1;
    }
    sdd_run_summary_print(stdout, &s, json);
    int rc = err == SDD_OK && s.accounted ? 0 : 1;
    sdd_run_summary_fini(&s);
    sdd_config_destroy(cfg);
    return rc;
}

int cmd_run(int argc, char **argv)
{
    return run_main(argc, argv, NULL);
}

static void node_usage(FILE *out)
{
    fprintf(out,
            "usage: sddaq node --config TOPOLOGY.yaml --name NODE [options]\n"
            "\n"
            "Runs the stages of one node of a multi-node topology; start one per node (by srun,\n"
            "mpirun, ssh, systemd: docs/run.md). Event-builder nodes find each other on\n"
            "fabric.port + k; the coordinator (run.coordinator, default the first node) ends the\n"
            "run for all of them and prints the totals of every node. Options as `sddaq run`.\n");
}

int cmd_node(int argc, char **argv)
{
    const char *config = NULL, *name = NULL;
    char *rest[64];
    int n = 0;
    rest[n++] = argv[0];
    for (int i = 1; i < argc; i++) {
        if ((strcmp(argv[i], "--config") == 0 || strcmp(argv[i], "-c") == 0) && i + 1 < argc) {
            config = argv[++i];
        } else if (strcmp(argv[i], "--name") == 0 && i + 1 < argc) {
            name = argv[++i];
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            node_usage(stdout);
            return 0;
        } else if (n < 62) {
            rest[n++] = argv[i];
        }
    }
    if (config == NULL || name == NULL) {
        fprintf(stderr, "sddaq node: --config and --name are required\n");
        node_usage(stderr);
        return 2;
    }
    rest[n++] = (char *)config;
    rest[n] = NULL;
    return run_main(n, rest, name);
}
