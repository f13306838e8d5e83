/* sddaq readout recv: receive one UDP readout stream into the slot ring, consume (and
 * release) its frames, and print the receiver's counters and send -> slot-ready latency as a
 * table or JSON. */
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "readout_opts.h"

#include "sddaq/clock.h"
#include "sddaq/readout.h"
#include "sddaq/trigger.h"

#define CMD "sddaq readout recv"

static void usage(FILE *out)
{
    fprintf(out, "usage: sddaq readout recv [options]   receive a stream, print its counters\n"
                 "\n"
                 "  -f, --format F         stream, jungfrau or na62 (default stream); na62\n"
                 "                         packets are packed into slots and their events\n"
                 "                         indexed by the RICH event finder\n"
                 "      --host H           address to bind (default 127.0.0.1; 0.0.0.0 = all)\n"
                 "      --port N           UDP port (default any; printed on stderr)\n"
                 "  -i, --stream ID        stream (jungfrau: module) id to accept (default 0)\n"
                 "  -k, --packets N        stream: packets per frame (default 16)\n"
                 "  -s, --payload B        stream: payload bytes per packet (default 1024)\n"
                 "      --slots N          frame slots in the ring (default 16)\n"
                 "      --window N         frames assembled at once (default 4)\n"
                 "      --batch N          datagrams per recvmmsg (default 32)\n"
                 "      --missing P        frames with packets missing: drop, pad or partial\n"
                 "                         (default drop)\n"
                 "      --full P           consumer behind: block or drop-newest (default block)\n"
                 "      --frame-timeout MS close frames idle this long (default 100)\n"
                 "      --rcvbuf B         socket receive buffer (default 8M)\n"
                 "      --cpu N            pin the receiver thread to CPU N\n"
                 "      --busy-poll        spin on the socket instead of blocking\n"
                 "      --gro              let the kernel coalesce datagrams (UDP GRO): one\n"
                 "                         copy each, far fewer receives; for small datagrams\n"
                 "      --verify           check every payload against the emulator's pattern\n"
                 "  -n, --frames N         stop after N frames were delivered\n"
                 "  -D, --seconds S        stop after S seconds (default: until Ctrl-C)\n"
                 "      --idle S           stop after S seconds without a frame, once one came\n"
                 "      --json             one JSON object on stdout instead of a table\n");
}

static volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
    (void)sig;
    interrupted = 1;
}

enum {
    OPT_HOST = 256,
    OPT_PORT,
    OPT_SLOTS,
    OPT_WINDOW,
    OPT_BATCH,
    OPT_MISSING,
    OPT_FULL,
    OPT_TIMEOUT,
    OPT_RCVBUF,
    OPT_CPU,
    OPT_BUSY,
    OPT_GRO,
    OPT_VERIFY,
    OPT_IDLE,
    OPT_JSON,
};

/* extra: more JSON members (",\"key\":...") or text lines to print at the end. */
static void print_counters(const struct sdd_ro_counters *c, const sdd_hist *lat, double secs,
                           const char *extra, bool json)
{
    struct sdd_hist_summary s;
    sdd_hist_summarize(lat, &s);
    double gbps = secs > 0 ? c->bytes * 8 / secs / 1e9 : 0;
    if (json) {
        printf("{\"seconds\":%.6f,\"gbps\":%.4f,\"datagrams\":%" PRIu64 ",\"bytes\":%" PRIu64
               ",\"received\":%" PRIu64 ",\"lost\":%" PRIu64 ",\"reordered\":%" PRIu64
               ",\"duplicate\":%" PRIu64 ",\"late\":%" PRIu64 ",\"corrupt\":%" PRIu64
               ",\"corrupt_by\":{",
               secs, gbps, c->datagrams, c->bytes, c->received, c->lost, c->reordered, c->duplicate,
               c->late, c->corrupt);
        for (int r = 1; r < SDD_RO_REASON_COUNT; r++) {
            printf("%s\"%s\":%" PRIu64, r > 1 ? "," : "", sdd_ro_reason_name((sdd_ro_reason)r),
                   c->corrupt_by[r]);
        }
        printf("},\"overrun\":%" PRIu64 ",\"kernel_drops\":%" PRIu64 ",\"pattern_errors\":%" PRIu64
               ",\"frames_complete\":%" PRIu64 ",\"frames_partial\":%" PRIu64
               ",\"frames_dropped\":%" PRIu64 ",\"frames_lost\":%" PRIu64
               ",\"frames_overrun\":%" PRIu64 ",\"resyncs\":%" PRIu64
               ",\"blocked_ms\":%.3f,\"zero_copy\":%" PRIu64 ",\"coalesced\":%" PRIu64
               ",\"end_of_burst\":%" PRIu64 ",\"open_bursts\":%" PRIu64
               ",\"latency_us\":{\"count\":%" PRIu64
               ",\"min\":%.3f,\"p50\":%.3f,\"p99\":%.3f,\"p999\":%.3f,\"max\":%.3f}%s}\n",
               c->overrun, c->kernel_drops, c->pattern_errors, c->frames_complete,
               c->frames_partial, c->frames_dropped, c->frames_lost, c->frames_overrun, c->resyncs,
               c->blocked_ns / 1e6, c->zero_copy, c->coalesced, c->end_of_burst, c->open_bursts,
               s.count, s.min / 1e3, s.p50 / 1e3, s.p99 / 1e3, s.p999 / 1e3, s.max / 1e3, extra);
        return;
    }
    printf("%-16s %.3f s, %.3f Gb/s\n", "elapsed", secs, gbps);
    printf("%-16s %" PRIu64 "\n", "datagrams", c->datagrams);
    printf("%-16s %" PRIu64 " (%" PRIu64 " landed in place, %" PRIu64 " coalesced)\n", "received",
           c->received, c->zero_copy, c->coalesced);
    printf("%-16s %" PRIu64 " (kernel drops %" PRIu64 ")\n", "lost", c->lost, c->kernel_drops);
    printf("%-16s %" PRIu64 "\n", "reordered", c->reordered);
    printf("%-16s %" PRIu64 "\n", "duplicate", c->duplicate);
    printf("%-16s %" PRIu64 "\n", "late", c->late);
    printf("%-16s %" PRIu64 "\n", "corrupt", c->corrupt);
    for (int r = 1; r < SDD_RO_REASON_COUNT; r++) {
        if (c->corrupt_by[r] != 0) {
            printf("  %-14s %" PRIu64 "  (%s)\n", sdd_ro_reason_name((sdd_ro_reason)r),
                   c->corrupt_by[r], sdd_ro_reason_message((sdd_ro_reason)r));
        }
    }
    printf("%-16s %" PRIu64 " (%" PRIu64 " frames; blocked %.3f ms)\n", "overrun", c->overrun,
           c->frames_overrun, c->blocked_ns / 1e6);
    printf("%-16s %" PRIu64 "\n", "pattern errors", c->pattern_errors);
    if (c->end_of_burst != 0 || c->open_bursts != 0) {
        printf("%-16s %" PRIu64 " (%" PRIu64 " boards' bursts still open)\n", "end of burst",
               c->end_of_burst, c->open_bursts);
    }
    printf("%-16s complete %" PRIu64 ", partial %" PRIu64 ", dropped %" PRIu64 ", lost %" PRIu64
           ", resyncs %" PRIu64 "\n",
           "frames", c->frames_complete, c->frames_partial, c->frames_dropped, c->frames_lost,
           c->resyncs);
    printf("%-16s %" PRIu64 " frames: min %.2f, p50 %.2f, p99 %.2f, p99.9 %.2f, max %.2f us\n",
           "send->ready", s.count, s.min / 1e3, s.p50 / 1e3, s.p99 / 1e3, s.p999 / 1e3,
           s.max / 1e3);
    fputs(extra, stdout);
}

/* NA62: the consumer indexes each slot's events with the trigger's event finder, as the ring
 * finder's stage would, and counts what it finds. */
struct na62_events {
    sdd_rich_index idx;
    sdd_rich_ef_stats st;
    uint64_t events;
};

static void na62_index(struct na62_events *ev, const struct sdd_ro_frame *f)
{
    ev->events += sdd_rich_find_events(f->data, f->bytes, NULL, &ev->idx, &ev->st);
}

static void format_na62(const struct na62_events *ev, bool json, char *out, size_t cap)
{
    const sdd_rich_ef_stats *s = &ev->st;
    uint64_t bad = s->bad_magic + s->bad_version + s->bad_board + s->bad_pkt_length + s->truncated +
                   s->bad_signature + s->bad_evt_length + s->too_many_hits + s->bad_timestamp +
                   s->count_mismatch;
    if (json) {
        snprintf(out, cap,
                 ",\"na62\":{\"packets\":%" PRIu64 ",\"events\":%" PRIu64 ",\"hits\":%" PRIu64
                 ",\"malformed\":%" PRIu64 "}",
                 s->packets, ev->events, s->hits, bad);
        return;
    }
    snprintf(out, cap,
             "%-16s %" PRIu64 " in %" PRIu64 " packets, %" PRIu64 " hits, %" PRIu64 " malformed\n",
             "na62 events", ev->events, s->packets, s->hits, bad);
}

static int recv_main(const struct sdd_ro_rx_opts *o, uint64_t frames, double seconds, double idle,
                     bool json)
{
    sdd_ro_rx *rx = NULL;
    sdd_err err = sdd_ro_rx_create(o, &rx);
    if (err != SDD_OK) {
        fprintf(stderr, "sddaq readout recv: %s:%u: %s\n", o->host, o->port, sdd_strerror(err));
        return err == SDD_EINVAL || err == SDD_ETOOBIG ? 2 : 1;
    }
    fprintf(stderr, "listening on %s:%u\n", o->host, sdd_ro_rx_port(rx));
    err = sdd_ro_rx_start(rx);
    if (err != SDD_OK) {
        fprintf(stderr, "sddaq readout recv: %s\n", sdd_strerror(err));
        sdd_ro_rx_destroy(rx);
        return 1;
    }
    struct na62_events ev = {0};
    if (o->format == SDD_RO_FMT_NA62 && sdd_rich_index_init(&ev.idx, 1u << 17) != SDD_OK) {
        sdd_ro_rx_destroy(rx);
        return 1;
    }
    uint64_t t0 = sdd_now_ns(), first = 0, last = 0, delivered = 0;
    while (!interrupted && (frames == 0 || delivered < frames)) {
        uint64_t now = sdd_now_ns();
        if ((seconds > 0 && now - t0 >= seconds * 1e9) ||
            (idle > 0 && last != 0 && now - last >= idle * 1e9)) {
            break;
        }
        struct sdd_ro_frame *f;
        if (sdd_ro_rx_next(rx, &f, 50) == SDD_OK) {
            last = sdd_now_ns();
            first = first != 0 ? first : last;
            delivered++;
            if (o->format == SDD_RO_FMT_NA62) {
                na62_index(&ev, f);
            }
            sdd_ro_rx_release(rx, f);
        }
    }
    sdd_ro_rx_stop(rx);
    struct sdd_ro_frame *f;
    while (sdd_ro_rx_next(rx, &f, 0) == SDD_OK) {
        sdd_ro_rx_release(rx, f);
    }
    struct sdd_ro_counters c;
    sdd_ro_rx_counters(rx, &c);
    sdd_hist *lat = malloc(sizeof(*lat));
    if (lat != NULL) {
        sdd_ro_rx_latency(rx, lat);
        char extra[256] = "";
        if (o->format == SDD_RO_FMT_NA62) {
            format_na62(&ev, json, extra, sizeof(extra));
        }
        print_counters(&c, lat, last > first ? (last - first) / 1e9 : 0, extra, json);
        free(lat);
    }
    if (o->format == SDD_RO_FMT_NA62) {
        sdd_rich_index_fini(&ev.idx);
    }
    sdd_ro_rx_destroy(rx);
    return 0;
}

/* Option spellings, in the order of their enums. */
static const char *const format_names[] = {"stream", "jungfrau", "na62", NULL};
static const char *const missing_names[] = {"drop", "pad", "partial", NULL};
static const char *const full_names[] = {"block", "drop-newest", NULL};

int cmd_readout(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"format", required_argument, NULL, 'f'},
        {"host", required_argument, NULL, OPT_HOST},
        {"port", required_argument, NULL, OPT_PORT},
        {"stream", required_argument, NULL, 'i'},
        {"packets", required_argument, NULL, 'k'},
        {"payload", required_argument, NULL, 's'},
        {"slots", required_argument, NULL, OPT_SLOTS},
        {"window", required_argument, NULL, OPT_WINDOW},
        {"batch", required_argument, NULL, OPT_BATCH},
        {"missing", required_argument, NULL, OPT_MISSING},
        {"full", required_argument, NULL, OPT_FULL},
        {"frame-timeout", required_argument, NULL, OPT_TIMEOUT},
        {"rcvbuf", required_argument, NULL, OPT_RCVBUF},
        {"cpu", required_argument, NULL, OPT_CPU},
        {"busy-poll", no_argument, NULL, OPT_BUSY},
        {"gro", no_argument, NULL, OPT_GRO},
        {"verify", no_argument, NULL, OPT_VERIFY},
        {"frames", required_argument, NULL, 'n'},
        {"seconds", required_argument, NULL, 'D'},
        {"idle", required_argument, NULL, OPT_IDLE},
        {"json", no_argument, NULL, OPT_JSON},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int early = cli_help_or_missing(argc, argv, usage);
    if (early >= 0) {
        return early;
    }
    if (strcmp(argv[1], "recv") != 0) {
        fprintf(stderr, "sddaq readout: unknown mode '%s'\n\n", argv[1]);
        usage(stderr);
        return 2;
    }
    /* Two passes: the format picks the defaults the other options then change. */
    sdd_ro_format fmt = SDD_RO_FMT_STREAM;
    for (int i = 2; i + 1 < argc; i++) {
        int f;
        if ((strcmp(argv[i], "-f") == 0 || strcmp(argv[i], "--format") == 0) &&
            cli_parse_choice(argv[i + 1], format_names, &f) == 0) {
            fmt = (sdd_ro_format)f;
        }
    }
    struct sdd_ro_rx_opts o;
    sdd_ro_rx_opts_default(&o, fmt);
    uint64_t frames = 0;
    double seconds = 0, idle = 0;
    uint32_t u = 0;
    int choice = 0;
    bool json = false, bad = false, geometry_given = false;
    int c;
    optind = 2;
    while (!bad && (c = getopt_long(argc, argv, RO_GEOMETRY_LETTERS "f:i:k:s:n:D:h", longopts,
                                    NULL)) != -1) {
        int geometry = ro_cli_geometry(c, optarg, &o.geom, &geometry_given);
        if (geometry != 0) {
            bad = geometry < 0;
            cli_report_bad(CMD, c, optarg, bad);
            continue;
        }
        switch (c) {
        case 'f':
            bad = cli_parse_choice(optarg, format_names, &choice) != 0;
            break;
        case OPT_HOST:
            o.host = optarg;
            break;
        case OPT_PORT:
            bad = cli_parse_u32(optarg, &u, 65535) != 0;
            o.port = (uint16_t)u;
            break;
        case OPT_SLOTS:
            bad = cli_parse_u32(optarg, &o.slots, 1u << 16) != 0;
            break;
        case OPT_WINDOW:
            bad = cli_parse_u32(optarg, &o.window, 64) != 0;
            break;
        case OPT_BATCH:
            bad = cli_parse_u32(optarg, &o.batch, 1024) != 0;
            break;
        case OPT_MISSING:
            bad = cli_parse_choice(optarg, missing_names, &choice) != 0;
            o.missing = (sdd_ro_missing)choice;
            break;
        case OPT_FULL:
            bad = cli_parse_choice(optarg, full_names, &choice) != 0;
            o.full = (sdd_ro_full)choice;
            break;
        case OPT_TIMEOUT:
            bad =
                cli_parse_u32(optarg, &o.frame_timeout_ms, 3600000) != 0 || o.frame_timeout_ms == 0;
            break;
        case OPT_RCVBUF:
            bad = cli_parse_u32(optarg, &u, 1u << 30) != 0;
            o.rcvbuf = (int)u;
            break;
        case OPT_CPU:
            bad = cli_parse_u32(optarg, &u, 65535) != 0;
            o.cpu = (int)u;
            break;
        case OPT_BUSY:
            o.busy_poll = true;
            break;
        case OPT_GRO:
            o.gro = true;
            break;
        case OPT_VERIFY:
            o.verify = true;
            break;
        case 'n':
            bad = cli_parse_size(optarg, &frames) != 0;
            break;
        case 'D':
            bad = cli_parse_double(optarg, &seconds) != 0 || seconds <= 0;
            break;
        case OPT_IDLE:
            bad = cli_parse_double(optarg, &idle) != 0 || idle <= 0;
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
    if (cli_args_done(CMD, bad, optind, argc, argv) != 0) {
        usage(stderr);
        return 2;
    }
    if (fmt == SDD_RO_FMT_NA62 && o.verify) {
        fprintf(stderr, "sddaq readout recv: --verify checks the stream pattern; na62 packets "
                        "are checked by the event finder\n");
        return 2;
    }
    if (fmt == SDD_RO_FMT_JUNGFRAU && geometry_given) {
        fprintf(stderr, "sddaq readout recv: jungfrau frames are 128 packets of 8192 bytes\n");
        return 2;
    }
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    return recv_main(&o, frames, seconds, idle, json);
}
