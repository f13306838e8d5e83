/* Subcommands of the sddaq tool and small argument helpers they share. */
#ifndef SDDAQ_TOOLS_CLI_H
#define SDDAQ_TOOLS_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <sys/types.h>

#define SDDAQ_VERSION_STRING "0.1.0"

struct cli_command {
    const char *name;
    const char *help;
    int (*run)(int argc, char **argv);
};

int cmd_perf(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_rmem(int argc, char **argv);
int cmd_trigger(int argc, char **argv);
int cmd_emu(int argc, char **argv);
int cmd_readout(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_store(int argc, char **argv);
int cmd_evb(int argc, char **argv);
int cmd_config(int argc, char **argv);
int cmd_ctl(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_node(int argc, char **argv);
int cmd_benchmarks(int argc, char **argv);

/* Parse "4096", "64K", "16M", "1G" into bytes; -1 on malformed input. */
int cli_parse_size(const char *s, uint64_t *out);

/* Parse a size list: "8", "8,4096,64K" or a power-of-two range "8:16M". Returns the count
 * written to sizes (at most max), or -1 on malformed input. */
int cli_parse_sizes(const char *s, uint64_t *sizes, int max);

/* Parse a finite decimal number ("2.5", "1e-3"), nothing after it; -1 on malformed input. */
int cli_parse_double(const char *s, double *out);

/* Parse a count like cli_parse_size that must not exceed max (nor UINT32_MAX); -1 otherwise. */
int cli_parse_u32(const char *s, uint32_t *out, uint64_t max);

/* Find s in a NULL-terminated list of names; *out is its index. -1 when absent. */
int cli_parse_choice(const char *s, const char *const *names, int *out);

/* The first step of a subcommand with modes: with no mode, print usage to stderr and give 2;
 * with --help or -h, print it to stdout and give 0; else -1 (go on). */
int cli_help_or_missing(int argc, char **argv, void (*usage)(FILE *out));

/* After getopt: 0 when no option was refused and no argument is left over; else -1, having
 * named a left-over argument (the caller prints usage and exits 2). */
int cli_args_done(const char *cmd, bool bad, int next, int argc, char **argv);

/* After an option's value was refused (bad), say which value: "cmd: invalid value 'x'". */
void cli_report_bad(const char *cmd, int c, const char *arg, bool bad);

/* Split "host:port" (also "[v6]:port"); -1 on malformed input. */
int cli_parse_hostport(const char *s, char *host, size_t host_len, uint16_t *port);

/* In a child just forked by launcher: be killed when the launcher dies (cli_child.c). */
void cli_child_dies_with(pid_t launcher);

#endif
