/* The raw reader on damaged files: a file cut at every kind of place (in the index, in a
 * record's payload, in a record header, right after the file header) gives back exactly the
 * whole records before the cut and counts the rest as truncated; a flipped byte in a payload
 * is found by verify and get (with the index) and skipped and counted by the scan (without
 * it), the records after it still read; a writer that dies without closing leaves a .partial
 * file that reads up to its last flushed record; garbage is refused. */
#include <signal.h>
#include <string.h>
#include <sys/wait.h>

#include "stotest.h"

#define N 64

static uint64_t sizes[N];
static uint64_t offsets[N]; /* file offset of each record header, worked out from the format */

static void write_run(const char *path, size_t buffer)
{
    struct sdd_store_opts o = {
        .kind = SDD_STORE_RAW, .path = path, .buffer_bytes = buffer, .topology = "t"};
    sdd_store *w = NULL;
    CHECK_OK(sdd_store_open(&o, &w));
    CHECK_REQUIRE(w != NULL);
    uint8_t *buf = malloc(70000);
    uint64_t off = 52 + 1 + 4;
    for (uint64_t i = 0; i < N; i++) {
        sizes[i] = (i * 977) % 70000;
        offsets[i] = off;
        off += 40 + sizes[i];
        sto_fill(i, buf, sizes[i]);
        struct sdd_store_rec r = {.id = i, .time_ns = i, .flags = 0, .data = buf, .size = sizes[i]};
        CHECK_OK(sdd_store_write(w, &r));
    }
    free(buf);
    CHECK_OK(sdd_store_close(w, NULL));
}

/* Open path; expect `records` readable, all matching their ids in order starting at first. */
static const struct sdd_store_info *expect(sdd_store_reader **rp, const char *path,
                                           uint64_t records, const uint64_t *ids)
{
    CHECK_OK(sdd_store_reader_open(path, rp));
    CHECK_REQUIRE(*rp != NULL);
    const struct sdd_store_info *in = sdd_store_reader_info(*rp);
    CHECK_EQ(in->records, records);
    uint8_t *buf = malloc(70000), *scratch = malloc(70000);
    int wrong = 0;
    for (uint64_t i = 0; i < in->records && i < records; i++) {
        struct sdd_store_rec rec;
        uint64_t id = ids != NULL ? ids[i] : i;
        if (sdd_store_reader_get(*rp, i, &rec, buf, 70000) != SDD_OK ||
            !sto_match(&rec, id, sizes[id], id, 0, scratch)) {
            wrong++;
        }
    }
    CHECK_EQ(wrong, 0);
    free(buf);
    free(scratch);
    return in;
}

int main(void)
{
    char dir[256], path[512], cut[512];
    sto_tmpdir(dir, sizeof(dir));
    snprintf(path, sizeof(path), "%s/run.raw", dir);
    snprintf(cut, sizeof(cut), "%s/cut.raw", dir);
    write_run(path, 1u << 16);
    uint64_t end_of_records = offsets[N - 1] + 40 + sizes[N - 1];
    CHECK_EQ(sto_file_size(path), end_of_records + N * 16 + 64);

    sdd_store_reader *r = NULL;
    const struct sdd_store_info *in;

    /* Cut inside the index: no trailer, the scan finds all records, the index bytes left over
     * are a truncated tail (too short for a header) or skipped garbage. */
    sto_copy_prefix(path, cut, end_of_records + 20);
    in = expect(&r, cut, N, NULL);
    CHECK(!in->indexed);
    CHECK_EQ(in->corrupt, 0);
    CHECK_EQ(in->truncated_bytes, 20);
    sdd_store_reader_close(r);
    /* Cut exactly at the end of the records: a clean .partial-like file. */
    sto_copy_prefix(path, cut, end_of_records);
    in = expect(&r, cut, N, NULL);
    CHECK_EQ(in->truncated_bytes + in->corrupt + in->skipped_bytes, 0);
    sdd_store_reader_close(r);
    /* Cut inside the payload of record 40, and inside its header. */
    sto_copy_prefix(path, cut, offsets[40] + 40 + sizes[40] / 2);
    in = expect(&r, cut, 40, NULL);
    CHECK_EQ(in->truncated_bytes, 40 + sizes[40] / 2);
    CHECK_EQ(in->corrupt, 0);
    sdd_store_reader_close(r);
    sto_copy_prefix(path, cut, offsets[40] + 17);
    in = expect(&r, cut, 40, NULL);
    CHECK_EQ(in->truncated_bytes, 17);
    sdd_store_reader_close(r);
    /* Only the file header. */
    sto_copy_prefix(path, cut, offsets[0]);
    in = expect(&r, cut, 0, NULL);
    sdd_store_reader_close(r);
    /* Less than a file header. */
    sto_copy_prefix(path, cut, 30);
    CHECK_EQ(sdd_store_reader_open(cut, &r), SDD_EPROTO);
    /* A damaged file header. */
    sto_copy_prefix(path, cut, end_of_records);
    sto_flip(cut, 20);
    CHECK_EQ(sdd_store_reader_open(cut, &r), SDD_ECORRUPT);

    /* A flipped payload byte in record 10, index intact: open fine, get and verify find it. */
    sto_copy_prefix(path, cut, sto_file_size(path));
    sto_flip(cut, offsets[10] + 40 + sizes[10] / 2);
    CHECK_OK(sdd_store_reader_open(cut, &r));
    CHECK(sdd_store_reader_info(r)->indexed);
    uint64_t bad = 0;
    CHECK_EQ(sdd_store_reader_verify(r, &bad), SDD_ECORRUPT);
    CHECK_EQ(bad, 1);
    uint8_t *buf = malloc(70000);
    struct sdd_store_rec rec;
    CHECK_EQ(sdd_store_reader_get(r, 10, &rec, buf, 70000), SDD_ECORRUPT);
    CHECK_EQ(rec.id, 10);
    CHECK_OK(sdd_store_reader_get(r, 11, &rec, buf, 70000));
    sdd_store_reader_close(r);
    /* The same without the index: the scan skips record 10, counts it, reads the others. */
    sto_copy_prefix(path, cut, end_of_records);
    sto_flip(cut, offsets[10] + 40 + sizes[10] / 2);
    uint64_t ids[N];
    for (uint64_t i = 0, k = 0; i < N; i++) {
        if (i != 10) {
            ids[k++] = i;
        }
    }
    in = expect(&r, cut, N - 1, ids);
    CHECK_EQ(in->corrupt, 1);
    CHECK_EQ(in->skipped_bytes, 40 + sizes[10]);
    CHECK_OK(sdd_store_reader_verify(r, NULL));
    sdd_store_reader_close(r);
    /* A damaged record header (its size field) mid-file, without the index. */
    sto_copy_prefix(path, cut, end_of_records);
    sto_flip(cut, offsets[20] + 30);
    for (uint64_t i = 0, k = 0; i < N; i++) {
        if (i != 20) {
            ids[k++] = i;
        }
    }
    in = expect(&r, cut, N - 1, ids);
    CHECK_EQ(in->corrupt, 1);
    sdd_store_reader_close(r);
    /* A damaged index entry: the index is refused (its CRC), the scan takes over. */
    sto_copy_prefix(path, cut, sto_file_size(path));
    sto_flip(cut, end_of_records + 5 * 16 + 2);
    in = expect(&r, cut, N, NULL);
    CHECK(!in->indexed);
    sdd_store_reader_close(r);

    /* A writer that dies without closing: NAME.partial stays, NAME never appears, and the
     * records flushed before the death are readable. */
    char crash[512], crash_partial[600];
    snprintf(crash, sizeof(crash), "%s/crash.raw", dir);
    snprintf(crash_partial, sizeof(crash_partial), "%s.partial", crash);
    pid_t pid = fork();
    CHECK_REQUIRE(pid >= 0);
    if (pid == 0) {
        struct sdd_store_opts o = {.kind = SDD_STORE_RAW, .path = crash, .buffer_bytes = 4096};
        sdd_store *w = NULL;
        if (sdd_store_open(&o, &w) != SDD_OK) {
            _exit(1);
        }
        uint8_t b[1000];
        for (uint64_t i = 0; i < 50; i++) {
            sto_fill(i, b, 1000);
            struct sdd_store_rec x = {.id = i, .time_ns = i, .data = b, .size = 1000};
            sdd_store_write(w, &x);
        }
        raise(SIGKILL);
    }
    int status;
    waitpid(pid, &status, 0);
    CHECK(WIFSIGNALED(status));
    CHECK(!sto_exists(crash));
    CHECK(sto_exists(crash_partial));
    CHECK_OK(sdd_store_reader_open(crash_partial, &r));
    if (r != NULL) {
        in = sdd_store_reader_info(r);
        CHECK(!in->indexed);
        /* 4096-byte buffer, 1040-byte records: flushed in threes, a part of the 4th. */
        CHECK(in->records >= 45 && in->records < 50);
        CHECK_EQ(in->corrupt, 0);
        int wrong = 0;
        uint8_t scratch[1000];
        for (uint64_t i = 0; i < in->records; i++) {
            if (sdd_store_reader_get(r, i, &rec, buf, 70000) != SDD_OK || rec.id != i ||
                rec.size != 1000 || (sto_fill(i, scratch, 1000), memcmp(buf, scratch, 1000) != 0)) {
                wrong++;
            }
        }
        CHECK_EQ(wrong, 0);
        sdd_store_reader_close(r);
    }
    /* Its .partial blocks a new writer of the same name (no silent clobbering). */
    struct sdd_store_opts o = {.kind = SDD_STORE_RAW, .path = crash};
    sdd_store *w = NULL;
    CHECK_EQ(sdd_store_open(&o, &w), SDD_EBUSY);

    /* Not a run file at all. */
    FILE *f = fopen(cut, "wb");
    fputs("hello, this is not a run file at all", f);
    fclose(f);
    CHECK_EQ(sdd_store_reader_open(cut, &r), SDD_EPROTO);
    free(buf);
    sto_rmdir(dir);
    return check_finish();
}
