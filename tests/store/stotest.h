/* Helpers shared by the run-store tests: a scratch directory, records whose bytes follow from
 * their id (so a reader's output can be checked without keeping the input), file surgery. */
#ifndef SDDAQ_TESTS_STOTEST_H
#define SDDAQ_TESTS_STOTEST_H

#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "sddaq/store.h"

/* A fresh directory under TMPDIR (or /tmp); removed by sto_rmdir. */
static inline void sto_tmpdir(char *out, size_t len)
{
    const char *base = getenv("TMPDIR") != NULL ? getenv("TMPDIR") : "/tmp";
    snprintf(out, len, "%s/sddaq-store-XXXXXX", base);
    CHECK_REQUIRE(mkdtemp(out) != NULL);
}

static inline void sto_rmdir(const char *dir)
{
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0) {
        fprintf(stderr, "could not remove %s\n", dir);
    }
}

static inline bool sto_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

static inline uint64_t sto_file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
}

/* The payload of record id: size bytes from a generator seeded by id. */
static inline void sto_fill(uint64_t id, uint8_t *p, uint64_t size)
{
    uint64_t s = id * 0x9E3779B97F4A7C15ull + 1;
    for (uint64_t i = 0; i < size; i++) {
        if ((i & 7) == 0) {
            check_rand(&s);
        }
        p[i] = (uint8_t)(s >> ((i & 7) * 8));
    }
}

/* Sizes from 0 to max: mostly small, some large, with the edges 0 and max included. */
static inline uint64_t sto_size(uint64_t *rng, uint64_t i, uint64_t max)
{
    if (i == 0) {
        return 0;
    }
    if (i == 1) {
        return max;
    }
    uint64_t r = check_rand(rng);
    switch (r % 8) {
    case 0:
        return r % (max + 1);
    case 1:
        return 0;
    default:
        return (r >> 8) % 4096;
    }
}

/* Does rec match what sto_fill made for its id, with the given size, time and flags? */
static inline bool sto_match(const struct sdd_store_rec *rec, uint64_t id, uint64_t size,
                             uint64_t time_ns, uint32_t flags, uint8_t *scratch)
{
    if (rec->id != id || rec->size != size || rec->time_ns != time_ns || rec->flags != flags) {
        return false;
    }
    sto_fill(id, scratch, size);
    return size == 0 || memcmp(rec->data, scratch, size) == 0;
}

static inline void sto_copy_prefix(const char *from, const char *to, uint64_t len)
{
    FILE *in = fopen(from, "rb");
    FILE *out = fopen(to, "wb");
    CHECK_REQUIRE(in != NULL && out != NULL);
    char buf[65536];
    while (len > 0) {
        size_t k = fread(buf, 1, len < sizeof(buf) ? len : sizeof(buf), in);
        CHECK_REQUIRE(k > 0);
        CHECK_REQUIRE(fwrite(buf, 1, k, out) == k);
        len -= k;
    }
    fclose(in);
    fclose(out);
}

static inline void sto_flip(const char *path, uint64_t off)
{
    int fd = open(path, O_RDWR);
    CHECK_REQUIRE(fd >= 0);
    uint8_t b;
    CHECK_REQUIRE(pread(fd, &b, 1, (off_t)off) == 1);
    b ^= 0x5a;
    CHECK_REQUIRE(pwrite(fd, &b, 1, (off_t)off) == 1);
    close(fd);
}

#endif
