/* libFuzzer target for the raw run-file reader (src/store/raw_read.c), which reads files that
 * may be truncated, damaged or hostile. The input is the file: written to a memfd and opened
 * through /proc/self/fd (its first byte picks whether the rest is the file itself, a body behind
 * a valid header, or a script that builds well-formed records, index and trailer to mutate
 * around), then every record the reader reports is fetched and the whole file verified. Nothing may
 * crash or read out of bounds (ASan watches); the counts must add up: each record's payload lies in
 * the file, and no more records than the file can hold.
 *
 * Build and run from the repository root (not part of the CMake build):
 *   clang -g -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined -Iinclude -Isrc \
 *       tests/fuzz/fuzz_store_raw.c src/store/raw_read.c src/core/crc32c.c src/core/err.c \
 *       src/core/log.c -lpthread -o fuzz_store_raw
 *   mkdir -p corpus && ./fuzz_store_raw -max_total_time=60 corpus */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "sddaq/crc32c.h"
#include "sddaq/log.h"
#include "store/store_internal.h"

#include "core/le.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Inputs that start with a valid file header reach the record code more often: when the
 * input begins with the magic, make its header checksum right. */
static void fix_header(uint8_t *p, size_t size)
{
    if (size < RAW_FILE_FIXED + 4 || memcmp(p, RAW_FILE_MAGIC, 8) != 0) {
        return;
    }
    uint32_t tlen = get_le32(p + 48) % 64;
    put_le32(p + 48, tlen);
    put_le32(p + 8, RAW_VERSION);
    put_le32(p + 12, RAW_FILE_FIXED + tlen + 4);
    if (size < RAW_FILE_FIXED + tlen + 4) {
        return;
    }
    put_le32(p + RAW_FILE_FIXED + tlen, sdd_crc32c(0, p, RAW_FILE_FIXED + tlen));
}

/* A growing output buffer. */
struct out {
    uint8_t *p;
    size_t len, cap;
};

static void emit(struct out *o, const void *p, size_t n)
{
    if (o->len + n > o->cap) {
        size_t nc = (o->len + n) * 2 + 64;
        uint8_t *np = realloc(o->p, nc);
        if (np == NULL) {
            abort();
        }
        o->p = np;
        o->cap = nc;
    }
    memcpy(o->p + o->len, p, n);
    o->len += n;
}

static void valid_header(struct out *o)
{
    uint8_t h[RAW_FILE_FIXED + 4] = {0};
    memcpy(h, RAW_FILE_MAGIC, 8);
    put_le32(h + 8, RAW_VERSION);
    put_le32(h + 12, RAW_FILE_FIXED + 4);
    put_le32(h + RAW_FILE_FIXED, sdd_crc32c(0, h, RAW_FILE_FIXED));
    emit(o, h, sizeof(h));
}

/* Mode 2: the input drives a well-formed file: records with right CRCs (sizes and payloads
 * from the input), some damaged on purpose, optionally the index and trailer, then the rest of
 * the input as a tail. So the fuzzer starts from valid structure and mutates around it. */
static void build_file(struct out *o, const uint8_t *d, size_t n)
{
    valid_header(o);
    uint8_t index[64 * RAW_INDEX_ENTRY];
    size_t nrec = 0, i = 0;
    uint8_t ctl = n > 0 ? d[i++] : 0;
    while (i + 2 <= n && nrec < 64) {
        uint8_t op = d[i];
        size_t len = d[i + 1] % 64;
        i += 2;
        if (op == 0xFF || i + len > n) {
            break;
        }
        uint8_t h[RAW_REC_HEADER] = {0};
        put_le32(h, RAW_REC_MAGIC);
        put_le32(h + 4, op);
        put_le64(h + 8, nrec);
        put_le64(h + 24, len);
        uint32_t crc = sdd_crc32c(sdd_crc32c(0, h, RAW_REC_CRC_AT), d + i, len);
        put_le32(h + RAW_REC_CRC_AT, (op & 0xF0) == 0xA0 ? crc ^ 1 : crc);
        put_le64(index + nrec * RAW_INDEX_ENTRY, o->len);
        put_le64(index + nrec * RAW_INDEX_ENTRY + 8, nrec);
        emit(o, h, sizeof(h));
        emit(o, d + i, len);
        i += len;
        nrec++;
    }
    if (ctl & 1) {
        uint8_t t[RAW_TRAILER] = {0};
        memcpy(t, RAW_TRAILER_MAGIC, 8);
        put_le64(t + 8, o->len);
        put_le64(t + 16, nrec);
        put_le32(t + 56, sdd_crc32c(0, index, nrec * RAW_INDEX_ENTRY));
        put_le32(t + 60, sdd_crc32c(0, t, 60));
        emit(o, index, nrec * RAW_INDEX_ENTRY);
        emit(o, t, sizeof(t));
    }
    if (i < n) {
        emit(o, d + i, n - i);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int quiet;
    if (!quiet) {
        sdd_log_configure("none");
        quiet = 1;
    }
    if (size == 0) {
        return 0;
    }
    /* The first byte picks how the rest becomes a file: as it is (with a right header CRC
     * when it starts with the magic), behind a valid header, or built from records. */
    struct out o = {0};
    switch (data[0] % 3) {
    case 0:
        emit(&o, data + 1, size - 1);
        fix_header(o.p, o.len);
        break;
    case 1:
        valid_header(&o);
        emit(&o, data + 1, size - 1);
        break;
    default:
        build_file(&o, data + 1, size - 1);
    }
    uint8_t *copy = o.p;
    size = o.len;
    int fd = memfd_create("fuzz_store_raw", MFD_CLOEXEC);
    if (fd < 0) {
        free(copy);
        return 0;
    }
    if (size > 0 && write(fd, copy, size) != (ssize_t)size) {
        close(fd);
        free(copy);
        return 0;
    }
    free(copy);
    char path[64];
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    sdd_store_reader *r = NULL;
    if (store_raw_reader_open(path, dup(fd), &r) == SDD_OK) {
        const struct sdd_store_info *in = &r->info;
        if (in->records > size / RAW_REC_HEADER || in->bytes > size || in->truncated_bytes > size ||
            in->skipped_bytes > size) {
            abort();
        }
        static uint8_t buf[1 << 16];
        for (uint64_t i = 0; i < in->records; i++) {
            struct sdd_store_rec rec;
            sdd_err e = r->ops->get(r, i, &rec, buf, sizeof(buf));
            if (e == SDD_OK && (rec.size > size || rec.data != buf)) {
                abort();
            }
        }
        struct sdd_store_rec rec;
        if (r->ops->get(r, in->records, &rec, buf, sizeof(buf)) != SDD_ENOENT) {
            abort();
        }
        uint64_t bad = 0;
        r->ops->verify(r, &bad);
        if (bad > in->records || (!in->indexed && bad != 0)) {
            abort(); /* a scanned file holds only records that passed their CRC */
        }
        r->ops->close(r);
    }
    close(fd);
    return 0;
}

#include "fuzz_standalone.h"
