/* The sddaq command line: one binary, one subcommand per job. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const struct cli_command commands[] = {
    {"perf", "transport benchmark: server, client, self (perftest style)", cmd_perf},
    {"info", "list fabric providers usable for sddaq on this machine", cmd_info},
    {"rmem", "remote memory: serve, clone, ping, bench (KIRO style)", cmd_rmem},
    {"trigger", "software triggers: hough (CMS L1 track finder)", cmd_trigger},
    {"emu", "detector emulators that send UDP readout streams", cmd_emu},
    {"readout", "UDP readout: recv (frames into a slot ring, loss accounting)", cmd_readout},
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
