/* Run-store writing rate: the HDF5 writer and the raw writer (CRC-32C per record) against a
 * plain write() of the same payload bytes in the same invocation, for record sizes 1 KiB,
 * 64 KiB and 1 MiB, to a directory on the real disk and to tmpfs (/dev/shm), which separates
 * the formats' own cost from the disk's. The null writer (counts, discards) shows the cost of
 * the API and the caller's loop. The plain write (1 MiB per call by default) and the writers'
 * records read their bytes walking through the same 16 MiB pattern, so no side gets a
 * cache-hot source. Every writer, the plain one included, ends with fsync, so the
 * disk figures are data on the disk, not in the page cache; the file is removed after each run.
 * Rounds interleave the writers, each round starting with the next one, with a sync() (not
 * timed) before every run, so drift and left-over writeback hit all alike; each cell is the
 * median [min-max] of the rounds in MB/s (10^6 B/s of payload).
 *
 * Usage: bench_store [--disk DIR] [--tmpfs DIR] [--bytes B] [--rounds N] [--plain-write B]
 *                    [--json] [--smoke]
 *   --disk   directory on the real disk (default: the current directory)
 *   --tmpfs  directory on a tmpfs (default /dev/shm; "" skips it)
 *   --bytes  payload bytes per run (default 256M)
 *   --rounds rounds (default 5)
 *   --plain-write  bytes per write() call of the plain reference (default 1M, at most 16M)
 *   --json   one JSON object per cell on stdout; the table then goes to stderr
 *   --smoke  a tiny, fast run for ctest (4 MiB, 1 round, tmpfs or the current directory) */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sddaq/clock.h"
#include "sddaq/crc32c.h"
#include "sddaq/log.h"
#include "sddaq/store.h"

#define MAX_ROUNDS 31
#define PLAIN_BUF  (16u << 20)

enum { W_PLAIN, W_RAW, W_HDF5, W_NULL, W_COUNT };
static const char *const wname[W_COUNT] = {"write()", "raw", "hdf5", "null"};
static const uint64_t sizes[] = {1024, 64 * 1024, 1024 * 1024};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

static uint8_t *payload;              /* PLAIN_BUF bytes of pattern */
static size_t plain_write = 1u << 20; /* bytes per write() of the plain reference */

/* Plain write(): the payload bytes in 1 MiB (--plain-write) write() calls, then fsync. The best
 * case for any format: no per-record work at all. */
static int run_plain(const char *path, uint64_t total)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        fprintf(stderr, "bench_store: %s: %s\n", path, strerror(errno));
        return -1;
    }
    int rc = 0;
    for (uint64_t done = 0; done < total && rc == 0;) {
        /* Walk the whole pattern, as the store runs do, so neither reads a cache-hot source. */
        size_t at = (size_t)(done % PLAIN_BUF);
        size_t n = plain_write < PLAIN_BUF - at ? plain_write : PLAIN_BUF - at;
        n = total - done < n ? (size_t)(total - done) : n;
        ssize_t k = write(fd, payload + at, n);
        if (k <= 0) {
            fprintf(stderr, "bench_store: write %s: %s\n", path, strerror(errno));
            rc = -1;
        } else {
            done += (uint64_t)k;
        }
    }
    if (rc == 0 && fsync(fd) != 0) {
        rc = -1;
    }
    close(fd);
    return rc;
}

static int run_store(sdd_store_kind kind, const char *path, uint64_t size, uint64_t total)
{
    struct sdd_store_opts o = {
        .kind = kind, .path = path, .fsync = true, .overwrite = true, .topology = "bench_store"};
    sdd_store *w = NULL;
    if (sdd_store_open(&o, &w) != SDD_OK) {
        return -1;
    }
    uint64_t n = total / size, off = 0;
    sdd_err err = SDD_OK;
    for (uint64_t i = 0; i < n && err == SDD_OK; i++) {
        /* Walk through the whole pattern, record after record, as the plain write does. */
        if (off + size > PLAIN_BUF) {
            off = 0;
        }
        struct sdd_store_rec r = {.id = i, .time_ns = i, .data = payload + off, .size = size};
        err = sdd_store_write(w, &r);
        off += size;
    }
    sdd_err cerr = sdd_store_close(w, NULL);
    return err == SDD_OK && cerr == SDD_OK ? 0 : -1;
}

/* CRC-32C throughput over the 16 MiB pattern (cache-cold beyond L2): what the raw writer
 * and the HDF5 writer's crc32c column pay per byte. */
static double crc_rate(uint32_t (*fn)(uint32_t, const void *, size_t), int reps)
{
    volatile uint32_t sink = 0;
    uint64_t t0 = sdd_now_ns();
    for (int i = 0; i < reps; i++) {
        sink = fn(sink, payload, PLAIN_BUF);
    }
    return (double)reps * PLAIN_BUF / ((sdd_now_ns() - t0) / 1e9) / 1e9;
}

static void crc_report(bool json, bool smoke)
{
    int reps = smoke ? 1 : 16;
    double sw = crc_rate(sdd_crc32c_sw, reps);
    double hw = sdd_crc32c_hw_available() ? crc_rate(sdd_crc32c_hw, reps) : 0;
    fprintf(json ? stderr : stdout, "crc32c over 16 MiB: hardware %.1f GB/s%s, table %.1f GB/s\n",
            hw, sdd_crc32c_hw_available() ? "" : " (no SSE4.2)", sw);
    if (json) {
        printf("{\"crc32c_gb_per_s\":{\"hw\":%.2f,\"sw\":%.2f}}\n", hw, sw);
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int bench_dir(const char *where, const char *dir, uint64_t total, int rounds, bool json)
{
    FILE *tab = json ? stderr : stdout;
    char path[4096];
    fprintf(tab,
            "\n%s (%s), %" PRIu64
            " MiB per run, %d rounds, fsync at close; MB/s median [min-max]\n",
            where, dir, total >> 20, rounds);
    fprintf(tab, "%-8s", "record");
    for (int k = 0; k < W_COUNT; k++) {
        fprintf(tab, " %24s", wname[k]);
    }
    fprintf(tab, " %9s %9s\n", "raw/wr", "hdf5/wr");
    for (size_t s = 0; s < NSIZES; s++) {
        double mbps[W_COUNT][MAX_ROUNDS];
        uint64_t size = sizes[s];
        uint64_t bytes = total / size * size;
        for (int r = 0; r < rounds; r++) {
            for (int j = 0; j < W_COUNT; j++) {
                /* Each round starts with another writer, and the disk settles (sync, not
                 * timed) before each run, so no writer always pays for the one before. */
                int k = (j + r) % W_COUNT;
                sync();
                snprintf(path, sizeof(path), "%s/bench_store.%d.%s", dir, (int)getpid(),
                         k == W_HDF5 ? "h5" : "raw");
                uint64_t t0 = sdd_now_ns();
                int rc = k == W_PLAIN  ? run_plain(path, bytes)
                         : k == W_RAW  ? run_store(SDD_STORE_RAW, path, size, bytes)
                         : k == W_HDF5 ? run_store(SDD_STORE_HDF5, path, size, bytes)
                                       : run_store(SDD_STORE_NULL, path, size, bytes);
                uint64_t t1 = sdd_now_ns();
                unlink(path);
                if (rc != 0) {
                    fprintf(stderr, "bench_store: %s to %s failed\n", wname[k], dir);
                    return -1;
                }
                mbps[k][r] = bytes / ((t1 - t0) / 1e9) / 1e6;
            }
        }
        double med[W_COUNT];
        fprintf(tab, "%-8s", size >= (1u << 20) ? "1 MiB" : size >= 65536 ? "64 KiB" : "1 KiB");
        for (int k = 0; k < W_COUNT; k++) {
            qsort(mbps[k], (size_t)rounds, sizeof(double), cmp_double);
            med[k] = rounds % 2 ? mbps[k][rounds / 2]
                                : (mbps[k][rounds / 2 - 1] + mbps[k][rounds / 2]) / 2;
            char cell[64];
            snprintf(cell, sizeof(cell), "%.0f [%.0f-%.0f]", med[k], mbps[k][0],
                     mbps[k][rounds - 1]);
            fprintf(tab, " %24s", cell);
            if (json) {
                printf("{\"target\":\"%s\",\"dir\":\"%s\",\"record_bytes\":%" PRIu64
                       ",\"writer\":\"%s\",\"bytes\":%" PRIu64 ",\"rounds\":%d,\"fsync\":true"
                       ",\"mb_per_s\":{\"median\":%.1f,\"min\":%.1f,\"max\":%.1f}}\n",
                       where, dir, size, wname[k], bytes, rounds, med[k], mbps[k][0],
                       mbps[k][rounds - 1]);
            }
        }
        fprintf(tab, " %9.2f %9.2f\n", med[W_RAW] / med[W_PLAIN], med[W_HDF5] / med[W_PLAIN]);
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char *disk = ".", *tmpfs = "/dev/shm";
    uint64_t total = 256ull << 20;
    int rounds = 5;
    bool json = false, smoke = false;
    for (int i = 1; i < argc; i++) {
        const char *next = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(argv[i], "--smoke") == 0) {
            smoke = true;
        } else if (strcmp(argv[i], "--json") == 0) {
            json = true;
        } else if (strcmp(argv[i], "--disk") == 0 && next != NULL) {
            disk = argv[++i];
        } else if (strcmp(argv[i], "--tmpfs") == 0 && next != NULL) {
            tmpfs = argv[++i];
        } else if (strcmp(argv[i], "--bytes") == 0 && next != NULL) {
            char *end;
            total = strtoull(argv[++i], &end, 10);
            total <<= *end == 'G' ? 30 : *end == 'M' ? 20 : *end == 'K' ? 10 : 0;
        } else if (strcmp(argv[i], "--plain-write") == 0 && next != NULL) {
            char *end;
            uint64_t v = strtoull(argv[++i], &end, 10);
            v <<= *end == 'M' ? 20 : *end == 'K' ? 10 : 0;
            if (v < 4096 || v > PLAIN_BUF) {
                fprintf(stderr, "bench_store: --plain-write 4K..16M\n");
                return 2;
            }
            plain_write = (size_t)v;
        } else if (strcmp(argv[i], "--rounds") == 0 && next != NULL) {
            rounds = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: bench_store [--disk DIR] [--tmpfs DIR] [--bytes B] "
                            "[--rounds N] [--plain-write B] [--json] [--smoke]\n");
            return 2;
        }
    }
    if (rounds < 1 || rounds > MAX_ROUNDS || total < (1u << 20)) {
        fprintf(stderr, "bench_store: rounds 1..%d, bytes >= 1M\n", MAX_ROUNDS);
        return 2;
    }
    if (smoke) {
        total = 4u << 20;
        rounds = 1;
        struct stat st;
        if (stat(tmpfs, &st) != 0) {
            tmpfs = "";
        }
    }
    payload = malloc(PLAIN_BUF);
    if (payload == NULL) {
        return 1;
    }
    for (size_t i = 0; i < PLAIN_BUF; i++) {
        payload[i] = (uint8_t)(i * 31 + (i >> 12));
    }
    crc_report(json, smoke);
    int rc = 0;
    if (!smoke || tmpfs[0] == '\0') {
        rc |= bench_dir("disk", disk, total, rounds, json);
    }
    if (tmpfs[0] != '\0') {
        rc |= bench_dir("tmpfs", tmpfs, total, rounds, json);
    }
    free(payload);
    return rc == 0 ? 0 : 1;
}
