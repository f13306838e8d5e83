/* The sddaq command line: one binary, one subcommand per job. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const struct cli_command commands[] = {
    {"run", "run a topology here (no file: the default chain), progress and summary", cmd_run},
    {"node", "run one node of a multi-node topology (srun, mpirun, ssh start one per node)",
     cmd_node},
    {"perf", "transport benchmark: server, client, self (perftest style)", cmd_perf},
    {"info", "list fabric providers usable for sddaq on this machine", cmd_info},
    {"rmem", "remote memory: serve, clone, ping, bench (KIRO style)", cmd_rmem},
    {"trigger", "software triggers: hough (CMS L1 tracks), rich (NA62 rings)", cmd_trigger},
    {"emu", "detector emulators that send UDP readout streams", cmd_emu},
    {"readout", "UDP readout: recv (frames into a slot ring, loss accounting)", cmd_readout},
    {"inspect", "summarise and dump a run file (raw or HDF5), check its checksums", cmd_inspect},
    {"store", "run storage: write (a test run file, HDF5 or raw, and its rate)", cmd_store},
    {"evb", "event builder: run, launch, check, bench (LHCb LSEB model)", cmd_evb},
    {"config", "topology files: check (all problems, file:line:col), show (defaults filled)",
     cmd_config},
    {"ctl", "run control client: state, start, stop, pause, resume, metrics; serve-test", cmd_ctl},
    {"bench", "every benchmark by name: evb, perf, rmem, hough, rich", cmd_benchmarks},
};

static void usage(FILE *out)
{
    fprintf(out, "usage: sddaq <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
        fprintf(out, "  %-8s %s\n", commands[i].name, commands[i].help);
    }
    fprintf(out, "\n'sddaq <command> --help' describes a command.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "version") == 0) {
        printf("sddaq %s\n", SDDAQ_VERSION_STRING);
        return 0;
    }
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
        if (strcmp(argv[1], commands[i].name) == 0) {
            return commands[i].run(argc - 1, argv + 1);
        }
    }
    fprintf(stderr, "sddaq: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
