/* sddaq inspect: summarise a run file of any kind (attributes, counts, flag bits, ids,
 * damage, checksums) and dump its first events, as a table or JSON. */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

#include "sddaq/store.h"

#define CMD       "sddaq inspect"
#define HEX_BYTES 16

static void usage(FILE *out)
{
    fprintf(out, "usage: sddaq inspect FILE [options]   summarise a run file (raw or HDF5)\n"
                 "\n"
                 "  -d, --dump N   print the first N events (id, time, flags, size, bytes)\n"
                 "      --verify   check every record's checksum (exit 1 on any damage)\n"
                 "      --json     one JSON object on stdout instead of a table\n");
}

enum { OPT_VERIFY = 256, OPT_JSON };

static void iso_time(uint64_t unix_ns, char *out, size_t len)
{
    if (unix_ns == 0) {
        snprintf(out, len, "-");
        return;
    }
    time_t s = (time_t)(unix_ns / 1000000000ull);
    struct tm tm;
    gmtime_r(&s, &tm);
    size_t n = strftime(out, len, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out + n, len - n, ".%09" PRIu64 "Z", (uint64_t)(unix_ns % 1000000000ull));
}

static void json_str(const char *s)
{
    putchar('"');
    for (const unsigned char *p = (const unsigned char *)s; *p != '\0'; p++) {
        if (*p == '"' || *p == '\\') {
            printf("\\%c", *p);
        } else if (*p == '\n') {
            printf("\\n");
        } else if (*p < 0x20) {
            printf("\\u%04x", *p);
        } else {
            putchar(*p);
        }
    }
    putchar('"');
}

struct scan {
    uint64_t flagged, first_id, last_id, bad_meta;
    uint64_t bits[32];
};

/* Flags histogram and ids from every record's metadata (no payload read). */
static void scan_meta(sdd_store_reader *r, const struct sdd_store_info *in, struct scan *s)
{
    memset(s, 0, sizeof(*s));
    for (uint64_t i = 0; i < in->records; i++) {
        struct sdd_store_rec rec;
        sdd_err e = sdd_store_reader_get(r, i, &rec, NULL, 0);
        if (e != SDD_OK && e != SDD_ETOOBIG && e != SDD_ECORRUPT) {
            s->bad_meta++;
            continue;
        }
        if (i == 0) {
            s->first_id = rec.id;
        }
        s->last_id = rec.id;
        s->flagged += rec.flags != 0;
        for (int b = 0; b < 32; b++) {
            s->bits[b] += (rec.flags >> b) & 1;
        }
    }
}

static void dump(sdd_store_reader *r, const struct sdd_store_info *in, uint64_t n, bool json)
{
    size_t cap = 1u << 20;
    uint8_t *buf = malloc(cap);
    if (json) {
        printf(",\"events\":[");
    } else {
        printf("\n%8s %20s %20s %10s %12s  %s\n", "#", "id", "time_ns", "flags", "size",
               "first bytes");
    }
    for (uint64_t i = 0; i < n && i < in->records && buf != NULL; i++) {
        struct sdd_store_rec rec;
        sdd_err e = sdd_store_reader_get(r, i, &rec, buf, cap);
        if (e == SDD_ETOOBIG) {
            uint8_t *nb = realloc(buf, (size_t)rec.size);
            if (nb != NULL) {
                buf = nb;
                cap = (size_t)rec.size;
                e = sdd_store_reader_get(r, i, &rec, buf, cap);
            }
        }
        char hex[HEX_BYTES * 2 + 1] = "";
        for (uint64_t k = 0; rec.data != NULL && k < rec.size && k < HEX_BYTES; k++) {
            snprintf(hex + 2 * k, 3, "%02x", buf[k]);
        }
        const char *status = e == SDD_OK ? "ok" : sdd_errname(e);
        if (json) {
            printf("%s{\"index\":%" PRIu64 ",\"id\":%" PRIu64 ",\"time_ns\":%" PRIu64
                   ",\"flags\":%" PRIu32 ",\"size\":%" PRIu64 ",\"head\":\"%s\",\"status\":\"%s\"}",
                   i > 0 ? "," : "", i, rec.id, rec.time_ns, rec.flags, rec.size, hex, status);
        } else {
            printf("%8" PRIu64 " %20" PRIu64 " %20" PRIu64 " 0x%08" PRIx32 " %12" PRIu64
                   "  %s%s%s\n",
                   i, rec.id, rec.time_ns, rec.flags, rec.size, hex, e == SDD_OK ? "" : "  ",
                   e == SDD_OK ? "" : status);
        }
    }
    if (json) {
        printf("]");
    }
    free(buf);
}

static int inspect(const char *path, uint64_t ndump, bool verify, bool json)
{
    sdd_store_reader *r = NULL;
    sdd_err err = sdd_store_reader_open(path, &r);
    if (err != SDD_OK) {
        fprintf(stderr, CMD ": %s: %s\n", path, sdd_strerror(err));
        return 1;
    }
    const struct sdd_store_info *in = sdd_store_reader_info(r);
    struct scan s;
    scan_meta(r, in, &s);
    uint64_t bad = 0;
    sdd_err verr = SDD_OK;
    if (verify) {
        verr = sdd_store_reader_verify(r, &bad);
    }
    bool damaged =
        in->corrupt != 0 || in->truncated_bytes != 0 || in->skipped_bytes != 0 || s.bad_meta != 0;
    const char *checks = !verify                ? "not checked"
                         : verr == SDD_OK       ? "ok"
                         : verr == SDD_ECORRUPT ? "MISMATCH"
                                                : sdd_errname(verr);
    char start[64], stop[64];
    iso_time(in->start_unix_ns, start, sizeof(start));
    iso_time(in->stop_unix_ns, stop, sizeof(stop));
    if (json) {
        printf("{\"file\":");
        json_str(path);
        printf(",\"kind\":\"%s\",\"format_version\":%" PRIu32
               ",\"indexed\":%s,\"run_number\":%" PRIu64 ",\"sddaq_version\":",
               sdd_store_kind_name(in->kind), in->format_version, in->indexed ? "true" : "false",
               in->run_number);
        json_str(in->sddaq_version);
        printf(",\"start_unix_ns\":%" PRIu64 ",\"stop_unix_ns\":%" PRIu64 ",\"topology\":",
               in->start_unix_ns, in->stop_unix_ns);
        json_str(in->topology);
        printf(",\"records\":%" PRIu64 ",\"bytes\":%" PRIu64 ",\"file_bytes\":%" PRIu64
               ",\"first_id\":%" PRIu64 ",\"last_id\":%" PRIu64 ",\"flagged\":%" PRIu64
               ",\"flag_bits\":{",
               in->records, in->bytes, in->file_bytes, s.first_id, s.last_id, s.flagged);
        bool first = true;
        for (int b = 0; b < 32; b++) {
            if (s.bits[b] != 0) {
                printf("%s\"%d\":%" PRIu64, first ? "" : ",", b, s.bits[b]);
                first = false;
            }
        }
        printf("},\"corrupt\":%" PRIu64 ",\"skipped_bytes\":%" PRIu64
               ",\"truncated_bytes\":%" PRIu64 ",\"checksums\":\"%s\",\"bad_checksums\":%" PRIu64,
               in->corrupt + s.bad_meta, in->skipped_bytes, in->truncated_bytes, checks, bad);
        if (ndump > 0) {
            dump(r, in, ndump, true);
        }
        printf("}\n");
    } else {
        printf("%-12s %s\n", "file", path);
        printf("%-12s %s (format %" PRIu32 ", %s)\n", "kind", sdd_store_kind_name(in->kind),
               in->format_version, in->indexed ? "indexed" : "no index: records found by scanning");
        printf("%-12s %" PRIu64 "\n", "run", in->run_number);
        printf("%-12s %s\n", "sddaq", in->sddaq_version);
        printf("%-12s %s\n", "start", start);
        printf("%-12s %s\n", "stop", stop);
        printf("%-12s %" PRIu64 "\n", "records", in->records);
        printf("%-12s %" PRIu64 " payload, %" PRIu64 " file\n", "bytes", in->bytes, in->file_bytes);
        printf("%-12s first %" PRIu64 ", last %" PRIu64 "\n", "ids", s.first_id, s.last_id);
        printf("%-12s %" PRIu64 " clean, %" PRIu64 " flagged", "flags", in->records - s.flagged,
               s.flagged);
        for (int b = 0; b < 32; b++) {
            if (s.bits[b] != 0) {
                printf("; bit %d: %" PRIu64, b, s.bits[b]);
            }
        }
        printf("\n%-12s corrupt %" PRIu64 ", skipped %" PRIu64 " B, truncated tail %" PRIu64 " B\n",
               "damage", in->corrupt + s.bad_meta, in->skipped_bytes, in->truncated_bytes);
        printf("%-12s %s", "checksums", checks);
        if (verify) {
            printf(" (%" PRIu64 " of %" PRIu64 " bad)", bad, in->records);
        }
        printf("\n");
        const char *t = in->topology;
        size_t tl = strcspn(t, "\n");
        printf("%-12s %zu bytes%s%.*s%s\n", "topology", strlen(t), tl > 0 ? ": " : "",
               (int)(tl > 60 ? 60 : tl), t, tl > 60 || t[tl] != '\0' ? " ..." : "");
        if (ndump > 0) {
            dump(r, in, ndump, false);
        }
    }
    sdd_store_reader_close(r);
    return verify && (verr != SDD_OK || damaged) ? 1 : 0;
}

int cmd_inspect(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"dump", required_argument, NULL, 'd'},
        {"verify", no_argument, NULL, OPT_VERIFY},
        {"json", no_argument, NULL, OPT_JSON},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    uint64_t ndump = 0;
    bool verify = false, json = false, bad = false;
    int c;
    optind = 1;
    while (!bad && (c = getopt_long(argc, argv, "d:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'd':
            bad = cli_parse_size(optarg, &ndump) != 0;
            break;
        case OPT_VERIFY:
            verify = true;
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
    if (bad || optind != argc - 1) {
        if (!bad) {
            fprintf(stderr, CMD ": expected one FILE\n");
        }
        usage(stderr);
        return 2;
    }
    return inspect(argv[optind], ndump, verify, json);
}
