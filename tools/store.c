/* sddaq store write: write a run file of synthetic records (pattern bytes, chosen sizes and
 * flags) through the run store, and print what was written and how fast. Makes test files for
 * `sddaq inspect` and examples/read_run.py, and measures a writer end to end. */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#include "sddaq/clock.h"
#include "sddaq/store.h"

#define CMD "sddaq store write"

static void usage(FILE *out)
{
    fprintf(out, "usage: sddaq store write FILE [options]   write a run file of test records\n"
                 "\n"
                 "  -f, --format F      hdf5, raw or null (default hdf5)\n"
                 "  -n, --records N     records to write (default 1000)\n"
                 "  -s, --size B        bytes per record (default 1K)\n"
                 "      --max-size B    sizes random in [size, max-size] instead\n"
                 "      --flag-every K  set flag bit 0 on every K-th record (default 0: none)\n"
                 "      --run N         run number attribute (default 1)\n"
                 "      --topology T    free-text topology attribute\n"
                 "      --buffer B      write buffer (default 16M)\n"
                 "      --fsync         fsync the file before renaming it into place\n"
                 "      --overwrite     replace FILE if it exists\n"
                 "      --json          one JSON object on stdout instead of a table\n");
}

enum { OPT_MAX = 256, OPT_FLAG, OPT_RUN, OPT_TOPO, OPT_BUFFER, OPT_FSYNC, OPT_OVER, OPT_JSON };

static const char *const format_names[] = {"null", "raw", "hdf5", NULL};

/* A JSON string (path names may hold quotes or backslashes). */
static void json_str(const char *v)
{
    putchar('"');
    for (const unsigned char *p = (const unsigned char *)v; *p != '\0'; p++) {
        if (*p == '"' || *p == '\\') {
            printf("\\%c", *p);
        } else if (*p < 0x20) {
            printf("\\u%04x", *p);
        } else {
            putchar(*p);
        }
    }
    putchar('"');
}

static int write_run(const struct sdd_store_opts *o, uint64_t n, uint64_t size, uint64_t max,
                     uint64_t flag_every, bool json)
{
    uint8_t *buf = malloc(max > 0 ? max : 1);
    if (buf == NULL) {
        fprintf(stderr, CMD ": out of memory for %" PRIu64 "-byte records\n", max);
        return 1;
    }
    for (uint64_t i = 0; i < max; i++) {
        buf[i] = (uint8_t)(i * 7 + (i >> 8));
    }
    sdd_store *w = NULL;
    sdd_err err = sdd_store_open(o, &w);
    if (err != SDD_OK) {
        fprintf(stderr, CMD ": %s: %s\n", o->path != NULL ? o->path : "-", sdd_strerror(err));
        free(buf);
        return err == SDD_EINVAL ? 2 : 1;
    }
    uint64_t rng = 0x2545F4914F6CDD1Dull, t0 = sdd_now_ns();
    for (uint64_t i = 0; i < n && err == SDD_OK; i++) {
        uint64_t sz = size;
        if (max > size) {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            sz = size + rng % (max - size + 1);
        }
        buf[0] = (uint8_t)i; /* so records differ */
        struct sdd_store_rec r = {.id = i,
                                  .time_ns = sdd_now_ns() - t0,
                                  .flags = flag_every != 0 && i % flag_every == 0 ? 1u : 0u,
                                  .data = buf,
                                  .size = sz};
        err = sdd_store_write(w, &r);
    }
    struct sdd_store_summary s;
    sdd_err cerr = sdd_store_close(w, &s);
    double secs = (sdd_now_ns() - t0) / 1e9;
    free(buf);
    if (err == SDD_OK) {
        err = cerr;
    }
    if (err != SDD_OK) {
        fprintf(stderr, CMD ": %s: %s (file left as %s%s)\n", o->path, sdd_strerror(err), o->path,
                SDD_STORE_PARTIAL_SUFFIX);
        return 1;
    }
    double mbps = secs > 0 ? s.bytes / secs / 1e6 : 0;
    if (json) {
        printf("{\"path\":");
        json_str(o->path != NULL ? o->path : "");
        printf(",\"format\":\"%s\",\"records\":%" PRIu64 ",\"bytes\":%" PRIu64
               ",\"file_bytes\":%" PRIu64 ",\"flagged\":%" PRIu64
               ",\"seconds\":%.6f,\"mb_per_s\":%.1f}\n",
               sdd_store_kind_name(o->kind), s.records, s.bytes, s.file_bytes, s.flagged, secs,
               mbps);
    } else {
        printf("%-10s %s (%s)\n", "wrote", o->path != NULL ? o->path : "-",
               sdd_store_kind_name(o->kind));
        printf("%-10s %" PRIu64 " (%" PRIu64 " flagged)\n", "records", s.records, s.flagged);
        printf("%-10s %" PRIu64 " payload, %" PRIu64 " file\n", "bytes", s.bytes, s.file_bytes);
        printf("%-10s %.3f s, %.1f MB/s\n", "time", secs, mbps);
    }
    return 0;
}

int cmd_store(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"format", required_argument, NULL, 'f'},
        {"records", required_argument, NULL, 'n'},
        {"size", required_argument, NULL, 's'},
        {"max-size", required_argument, NULL, OPT_MAX},
        {"flag-every", required_argument, NULL, OPT_FLAG},
        {"run", required_argument, NULL, OPT_RUN},
        {"topology", required_argument, NULL, OPT_TOPO},
        {"buffer", required_argument, NULL, OPT_BUFFER},
        {"fsync", no_argument, NULL, OPT_FSYNC},
        {"overwrite", no_argument, NULL, OPT_OVER},
        {"json", no_argument, NULL, OPT_JSON},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int early = cli_help_or_missing(argc, argv, usage);
    if (early >= 0) {
        return early;
    }
    if (strcmp(argv[1], "write") != 0) {
        fprintf(stderr, "sddaq store: unknown mode '%s'\n\n", argv[1]);
        usage(stderr);
        return 2;
    }
    struct sdd_store_opts o = {.kind = SDD_STORE_HDF5, .run_number = 1};
    uint64_t n = 1000, size = 1024, max = 0, flag_every = 0, v = 0;
    int choice = 0;
    bool json = false, bad = false;
    int c;
    optind = 2;
    while (!bad && (c = getopt_long(argc, argv, "f:n:s:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'f':
            bad = cli_parse_choice(optarg, format_names, &choice) != 0;
            o.kind = (sdd_store_kind)choice;
            break;
        case 'n':
            bad = cli_parse_size(optarg, &n) != 0;
            break;
        case 's':
            bad = cli_parse_size(optarg, &size) != 0 || size > (1ull << 30);
            break;
        case OPT_MAX:
            bad = cli_parse_size(optarg, &max) != 0 || max > (1ull << 30);
            break;
        case OPT_FLAG:
            bad = cli_parse_size(optarg, &flag_every) != 0;
            break;
        case OPT_RUN:
            bad = cli_parse_size(optarg, &o.run_number) != 0;
            break;
        case OPT_TOPO:
            o.topology = optarg;
            break;
        case OPT_BUFFER:
            bad = cli_parse_size(optarg, &v) != 0 || v < 4096 || v > (1ull << 32);
            o.buffer_bytes = (size_t)v;
            break;
        case OPT_FSYNC:
            o.fsync = true;
            break;
        case OPT_OVER:
            o.overwrite = true;
            break;
        case OPT_JSON:
            json = true;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            bad = true;
        }
        cli_report_bad(CMD, c, optarg, bad);
    }
    if (!bad && max != 0 && max < size) {
        fprintf(stderr, CMD ": --max-size is below --size\n");
        bad = true;
    }
    if (bad || optind != argc - 1) {
        if (!bad) {
            fprintf(stderr, CMD ": expected one FILE\n");
        }
        usage(stderr);
        return 2;
    }
    o.path = argv[optind];
    return write_run(&o, n, size, max > size ? max : size, flag_every, json);
}
