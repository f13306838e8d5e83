/* sddaq bench WHAT: one place to find every benchmark. Each runs the subsystem's own bench
 * command with the options given (`sddaq bench evb -n 2` is `sddaq evb bench -n 2`), so the
 * options, output and documentation stay with the subsystem. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

struct bench_entry {
    const char *name;
    const char *help;
    const char *const prefix[3]; /* the command words it stands for, NULL-ended */
    int (*run)(int argc, char **argv);
};

static const struct bench_entry benches[] = {
    {"evb",
     "event builder against one-way and all-to-all transfers (docs/evb.md)",
     {"evb", "bench", NULL},
     cmd_evb},
    {"perf",
     "transport: server and client on this machine (docs/fabric.md)",
     {"perf", "self", NULL},
     cmd_perf},
    {"rmem",
     "remote memory: sync, ping, throughput (docs/rmem.md)",
     {"rmem", "bench", NULL},
     cmd_rmem},
    {"hough",
     "CMS L1 Hough track finder per event (docs/trigger.md)",
     {"trigger", "hough", "bench"},
     cmd_trigger},
    {"rich",
     "NA62 RICH ring finder: events/s, latency per buffer (docs/trigger.md)",
     {"trigger", "rich", "bench"},
     cmd_trigger},
};

#define NBENCH (sizeof(benches) / sizeof(benches[0]))

static void usage(FILE *out)
{
    fprintf(out, "usage: sddaq bench WHAT [options]   the same as the command it names\n\n");
    for (size_t i = 0; i < NBENCH; i++) {
        char words[64] = "";
        for (int w = 0; w < 3 && benches[i].prefix[w] != NULL; w++) {
            strcat(words, w ? " " : "");
            strcat(words, benches[i].prefix[w]);
        }
        fprintf(out, "  %-6s sddaq %-20s %s\n", benches[i].name, words, benches[i].help);
    }
    fprintf(out, "\n'sddaq bench WHAT --help' gives that command's options.\n");
}

int cmd_benchmarks(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (size_t i = 0; i < NBENCH; i++) {
        const struct bench_entry *b = &benches[i];
        if (strcmp(argv[1], b->name) != 0) {
            continue;
        }
        /* argv[0] and argv[1] ("bench", WHAT) give way to the command's own words. */
        char *args[256];
        int n = 0;
        for (int w = 0; w < 3 && b->prefix[w] != NULL; w++) {
            args[n++] = (char *)b->prefix[w];
        }
        if (argc - 2 + n >= (int)(sizeof(args) / sizeof(args[0]))) {
            fprintf(stderr, "sddaq bench: too many arguments\n");
            return 2;
        }
        for (int a = 2; a < argc; a++) {
            args[n++] = argv[a];
        }
        args[n] = NULL;
        return b->run(n, args);
    }
    fprintf(stderr, "sddaq bench: unknown benchmark '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
