/* sddaq emu: detector emulators that send UDP readout streams (the generic sddaq stream or
 * Jungfrau-like frames) at a set rate, with optional injected loss, corruption, duplicates
 * and reordering, and print exactly what they sent and injected. */
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "readout_opts.h"

#include "sddaq/readout.h"

#define CMD "sddaq emu"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: sddaq emu stream HOST:PORT [options]    generic sddaq stream packets\n"
            "       sddaq emu jungfrau HOST:PORT [options]  Jungfrau-like frames (128 x 8192 B)\n"
            "       sddaq emu na62 HOST:PORT [options]      NA62 RICH multi-event packets of\n"
            "                                               4 boards (one frame = one packet)\n"
            "\n"
            "  -i, --stream ID        stream (jungfrau: module) id (default 0)\n"
            "  -k, --packets N        stream: packets per frame (default 16)\n"
            "  -s, --payload B        stream: payload bytes per packet (default 1024)\n"
            "  -n, --frames N         frames to send (default 1000; 0 = until --seconds)\n"
            "      --first-frame N    id of the first frame (default 1)\n"
            "      --events N         na62: RICH events generated for the cycle of packets\n"
            "                         that is sent over and over (default 10000); each pass\n"
            "                         is a burst, ended by every board's end-of-burst packet\n"
            "  -D, --seconds S        stop after S seconds\n"
            "  -r, --rate PPS         datagrams per second (default: as fast as possible)\n"
            "  -g, --gbps G           rate as UDP payload Gb/s instead\n"
            "      --burst N          datagrams back to back per pacing step (default 32)\n"
            "      --batch N          datagrams per sendmmsg (default 32)\n"
            "      --gso N            send runs of N datagrams with UDP segmentation offload\n"
            "                         (same datagrams, one pass through the stack; max 64)\n"
            "      --no-pattern       leave payloads zero (no test pattern; cheaper)\n"
            "      --loss P           inject: probability a packet is not sent\n"
            "      --corrupt P        inject: probability of one flipped header bit\n"
            "      --duplicate P      inject: probability a packet is sent twice\n"
            "      --reorder P        inject: probability a packet is delayed\n"
            "      --reorder-distance N  datagrams a delayed packet waits (default 3)\n"
            "      --seed S           injection (and na62 event) seed (default 1)\n"
            "      --clean-first N    send the first N datagrams without faults\n"
            "      --cpu N            pin the sender to CPU N\n"
            "      --json             one JSON object on stdout instead of a table\n");
}

static sdd_ro_emu *running;

static void on_signal(int sig)
{
    (void)sig;
    if (running != NULL) {
        sdd_ro_emu_stop(running); /* an atomic store: async-signal-safe */
    }
}

enum {
    OPT_FIRST = 256,
    OPT_BURST,
    OPT_BATCH,
    OPT_GSO,
    OPT_EVENTS,
    OPT_CLEAN,
    OPT_NO_PATTERN,
    OPT_LOSS,
    OPT_CORRUPT,
    OPT_DUP,
    OPT_REORDER,
    OPT_DISTANCE,
    OPT_SEED,
    OPT_CPU,
    OPT_JSON,
};

static bool parse_prob(const char *s, double *out)
{
    return cli_parse_double(s, out) == 0 && *out >= 0 && *out <= 1;
}

static void print_stats(const struct sdd_ro_emu_stats *st, const char *fmt, bool json)
{
    double secs = st->elapsed_ns / 1e9;
    double pps = secs > 0 ? st->datagrams / secs : 0;
    double gbps = secs > 0 ? st->bytes * 8 / secs / 1e9 : 0;
    if (json) {
        printf("{\"format\":\"%s\",\"frames\":%" PRIu64 ",\"packets\":%" PRIu64
               ",\"datagrams\":%" PRIu64 ",\"bytes\":%" PRIu64 ",\"lost\":%" PRIu64
               ",\"corrupted\":%" PRIu64 ",\"duplicated\":%" PRIu64 ",\"reordered\":%" PRIu64
               ",\"damaged_frames\":%" PRIu64 ",\"empty_frames\":%" PRIu64
               ",\"send_retries\":%" PRIu64 ",\"unseen\":%" PRIu64
               ",\"seconds\":%.6f,\"pps\":%.1f,\"gbps\":%.4f}\n",
               fmt, st->frames, st->packets, st->datagrams, st->bytes, st->lost, st->corrupted,
               st->duplicated, st->reordered, st->damaged_frames, st->empty_frames,
               st->send_retries, st->unseen, secs, pps, gbps);
        return;
    }
    printf("%-16s %" PRIu64 "\n", "frames", st->frames);
    printf("%-16s %" PRIu64 "\n", "packets", st->packets);
    printf("%-16s %" PRIu64 "\n", "datagrams", st->datagrams);
    printf("%-16s %" PRIu64 "\n", "injected lost", st->lost);
    printf("%-16s %" PRIu64 "\n", "injected corrupt", st->corrupted);
    printf("%-16s %" PRIu64 "\n", "injected dup", st->duplicated);
    printf("%-16s %" PRIu64 "\n", "reordered", st->reordered);
    printf("%-16s %" PRIu64 " (%" PRIu64 " empty)\n", "damaged frames", st->damaged_frames,
           st->empty_frames);
    printf("%-16s %" PRIu64 "\n", "send retries", st->send_retries);
    printf("%-16s %.3f s, %.0f datagrams/s, %.3f Gb/s\n", "elapsed", secs, pps, gbps);
}

int cmd_emu(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"stream", required_argument, NULL, 'i'},
        {"packets", required_argument, NULL, 'k'},
        {"payload", required_argument, NULL, 's'},
        {"frames", required_argument, NULL, 'n'},
        {"first-frame", required_argument, NULL, OPT_FIRST},
        {"seconds", required_argument, NULL, 'D'},
        {"rate", required_argument, NULL, 'r'},
        {"gbps", required_argument, NULL, 'g'},
        {"burst", required_argument, NULL, OPT_BURST},
        {"batch", required_argument, NULL, OPT_BATCH},
        {"gso", required_argument, NULL, OPT_GSO},
        {"events", required_argument, NULL, OPT_EVENTS},
        {"clean-first", required_argument, NULL, OPT_CLEAN},
        {"no-pattern", no_argument, NULL, OPT_NO_PATTERN},
        {"loss", required_argument, NULL, OPT_LOSS},
        {"corrupt", required_argument, NULL, OPT_CORRUPT},
        {"duplicate", required_argument, NULL, OPT_DUP},
        {"reorder", required_argument, NULL, OPT_REORDER},
        {"reorder-distance", required_argument, NULL, OPT_DISTANCE},
        {"seed", required_argument, NULL, OPT_SEED},
        {"cpu", required_argument, NULL, OPT_CPU},
        {"json", no_argument, NULL, OPT_JSON},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int early = cli_help_or_missing(argc, argv, usage);
    if (early >= 0) {
        return early;
    }
    sdd_ro_format fmt;
    if (strcmp(argv[1], "stream") == 0) {
        fmt = SDD_RO_FMT_STREAM;
    } else if (strcmp(argv[1], "jungfrau") == 0) {
        fmt = SDD_RO_FMT_JUNGFRAU;
    } else if (strcmp(argv[1], "na62") == 0) {
        fmt = SDD_RO_FMT_NA62;
    } else {
        fprintf(stderr, "sddaq emu: unknown emulator '%s'\n\n", argv[1]);
        usage(stderr);
        return 2;
    }
    struct sdd_ro_emu_opts o;
    sdd_ro_emu_opts_default(&o, fmt);
    o.frames = 1000;
    bool json = false, bad = false, geometry_given = false;
    uint64_t v = 0;
    uint32_t cpu = 0, na62_events = 10000;
    int c;
    optind = 2;
    while (!bad &&
           (c = getopt_long(argc, argv, RO_GEOMETRY_LETTERS "n:D:r:g:h", longopts, NULL)) != -1) {
        int geometry = ro_cli_geometry(c, optarg, &o.geom, &geometry_given);
        if (geometry != 0) {
            bad = geometry < 0;
            cli_report_bad(CMD, c, optarg, bad);
            continue;
        }
        switch (c) {
        case 'n':
            bad = cli_parse_size(optarg, &o.frames) != 0;
            break;
        case OPT_FIRST:
            bad = cli_parse_size(optarg, &o.first_frame) != 0;
            break;
        case 'D':
            bad = cli_parse_double(optarg, &o.seconds) != 0 || o.seconds <= 0;
            break;
        case 'r':
            bad = cli_parse_double(optarg, &o.rate_pps) != 0 || o.rate_pps <= 0;
            break;
        case 'g':
            bad = cli_parse_double(optarg, &o.rate_gbps) != 0 || o.rate_gbps <= 0;
            break;
        case OPT_BURST:
            bad = cli_parse_u32(optarg, &o.burst, 1u << 20) != 0 || o.burst == 0;
            break;
        case OPT_BATCH:
            bad = cli_parse_u32(optarg, &o.batch, 1024) != 0 || o.batch == 0;
            break;
        case OPT_GSO:
            bad = cli_parse_u32(optarg, &o.gso, 64) != 0;
            break;
        case OPT_EVENTS:
            bad = cli_parse_u32(optarg, &na62_events, 1u << 24) != 0 || na62_events == 0;
            break;
        case OPT_CLEAN:
            bad = cli_parse_size(optarg, &o.clean_first) != 0;
            break;
        case OPT_NO_PATTERN:
            o.pattern = false;
            break;
        case OPT_LOSS:
            bad = !parse_prob(optarg, &o.loss);
            break;
        case OPT_CORRUPT:
            bad = !parse_prob(optarg, &o.corrupt);
            break;
        case OPT_DUP:
            bad = !parse_prob(optarg, &o.duplicate);
            break;
        case OPT_REORDER:
            bad = !parse_prob(optarg, &o.reorder);
            break;
        case OPT_DISTANCE:
            bad = cli_parse_u32(optarg, &o.reorder_distance, 64) != 0 || o.reorder_distance == 0;
            break;
        case OPT_SEED:
            bad = cli_parse_size(optarg, &v) != 0;
            o.seed = v;
            break;
        case OPT_CPU:
            bad = cli_parse_u32(optarg, &cpu, 65535) != 0;
            o.cpu = (int)cpu;
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
    char host[256];
    uint16_t port = 0;
    if (!bad) {
        bad = optind >= argc || cli_parse_hostport(argv[optind++], host, sizeof(host), &port) != 0;
    }
    if (cli_args_done(CMD, bad, optind, argc, argv) != 0) {
        usage(stderr);
        return 2;
    }
    if (fmt != SDD_RO_FMT_STREAM && geometry_given) {
        fprintf(stderr, "sddaq emu %s: the format fixes the packet size\n", argv[1]);
        return 2;
    }
    uint8_t *cycle = NULL;
    if (fmt == SDD_RO_FMT_NA62) {
        sdd_err cerr = sdd_ro_na62_cycle(o.seed, na62_events, &cycle, &o.na62_bytes);
        if (cerr != SDD_OK) {
            fprintf(stderr, "sddaq emu na62: generating events: %s\n", sdd_strerror(cerr));
            return 1;
        }
        o.na62_packets = cycle;
    }
    if (o.frames == 0 && o.seconds <= 0) {
        fprintf(stderr, "sddaq emu: --frames 0 needs --seconds\n");
        return 2;
    }
    sdd_ro_emu *e = NULL;
    sdd_err err = sdd_ro_emu_create(&o, host, port, &e);
    free(cycle); /* the emulator keeps its own copy */
    if (err != SDD_OK) {
        fprintf(stderr, "sddaq emu: %s:%u: %s\n", host, port, sdd_strerror(err));
        return err == SDD_EINVAL ? 2 : 1;
    }
    running = e;
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    err = sdd_ro_emu_run(e);
    running = NULL;
    struct sdd_ro_emu_stats st;
    sdd_ro_emu_stats(e, &st);
    sdd_ro_emu_destroy(e);
    print_stats(&st, argv[1], json);
    if (err != SDD_OK) {
        fprintf(stderr, "sddaq emu: send: %s\n", sdd_strerror(err));
        return 1;
    }
    return 0;
}
