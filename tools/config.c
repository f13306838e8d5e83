/* sddaq config: check topology files (every problem, with file, line, column and key) and show
 * a topology with every default filled in (the embedded default when no file is given). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#include "sddaq/config.h"

static void usage(FILE *out)
{
    fprintf(out, "usage: sddaq config check FILE...   validate topologies; problems on stderr\n"
                 "       sddaq config show [FILE]     print a topology with defaults filled in\n"
                 "                                    (no FILE: the embedded default)\n"
                 "       sddaq config default         print the embedded default as written\n"
                 "\n"
                 "check exits 0 when every file is valid, 1 otherwise. The schema is in\n"
                 "docs/config.md; examples in examples/topologies/.\n");
}

static void print_diag(const struct sdd_config_diag *d)
{
    for (size_t i = 0; i < d->stored; i++) {
        fprintf(stderr, "%s\n", d->errors[i].text);
    }
    if (d->count > d->stored) {
        fprintf(stderr, "... and %zu more\n", d->count - d->stored);
    }
}

static int check(int argc, char **argv)
{
    if (argc < 1) {
        fprintf(stderr, "sddaq config check: no file given\n");
        return 2;
    }
    int bad = 0;
    for (int i = 0; i < argc; i++) {
        struct sdd_config_diag d = {0};
        sdd_config *cfg = NULL;
        sdd_err err = sdd_config_load(argv[i], &cfg, &d);
        if (err == SDD_OK) {
            printf("%s: ok (%zu nodes, %zu stages, %zu links)\n", argv[i], cfg->n_nodes,
                   cfg->n_stages, cfg->n_links);
        } else {
            print_diag(&d);
            if (d.count == 0) {
                fprintf(stderr, "%s: %s\n", argv[i], sdd_strerror(err));
            }
            fprintf(stderr, "%s: %zu problem%s\n", argv[i], d.count, d.count == 1 ? "" : "s");
            bad = 1;
        }
        sdd_config_destroy(cfg);
        sdd_config_diag_fini(&d);
    }
    return bad;
}

static int show(int argc, char **argv)
{
    if (argc > 1) {
        fprintf(stderr, "sddaq config show: at most one file\n");
        return 2;
    }
    struct sdd_config_diag d = {0};
    sdd_config *cfg = NULL;
    sdd_err err =
        argc == 1 ? sdd_config_load(argv[0], &cfg, &d) : sdd_config_load_default(&cfg, &d);
    int rc = 1;
    if (err != SDD_OK) {
        print_diag(&d);
        if (d.count == 0) {
            fprintf(stderr, "sddaq config show: %s\n", sdd_strerror(err));
        }
        goto out;
    }
    char *text = NULL;
    size_t len = 0;
    if (sdd_config_emit(cfg, &text, &len) != SDD_OK) {
        fprintf(stderr, "sddaq config show: out of memory\n");
        goto out;
    }
    fwrite(text, 1, len, stdout);
    free(text);
    rc = 0;
out:
    sdd_config_destroy(cfg);
    sdd_config_diag_fini(&d);
    return rc;
}

int cmd_config(int argc, char **argv)
{
    int early = cli_help_or_missing(argc, argv, usage);
    if (early >= 0) {
        return early;
    }
    if (strcmp(argv[1], "check") == 0) {
        return check(argc - 2, argv + 2);
    }
    if (strcmp(argv[1], "show") == 0) {
        return show(argc - 2, argv + 2);
    }
    if (strcmp(argv[1], "default") == 0 && argc == 2) {
        fputs(sdd_config_default_yaml(), stdout);
        return 0;
    }
    fprintf(stderr, "sddaq config: unknown subcommand '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
