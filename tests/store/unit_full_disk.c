/* Writing to a full disk and to places that cannot be written, for both formats: a clean
 * error naming the path, never a crash; the final name never appears and what was written
 * stays marked as NAME.partial. The full disk is a 2 MiB tmpfs and the read-only directory a
 * read-only tmpfs, mounted here (skipped, exit 77, where mounting is not permitted); a path
 * under a regular file fails for everyone, root included. */
#include <errno.h>
#include <string.h>
#include <sys/mount.h>

#include "stotest.h"

/* HDF5 1.10 drops a chunk-sized buffer (4 MiB) when a chunk write fails with ENOSPC; it is
 * the library's error path, not ours (our own allocations are all checked here). LeakSanitizer
 * reads this in sanitizer builds and ignores it otherwise. */
const char *__lsan_default_suppressions(void);
__attribute__((visibility("default"))) const char *__lsan_default_suppressions(void)
{
    return "leak:libhdf5_serial.so\n";
}

static void fill_disk(const char *dir, sdd_store_kind kind, int n)
{
    char path[512], partial[600];
    snprintf(path, sizeof(path), "%s/full.%s", dir, sdd_store_kind_name(kind));
    snprintf(partial, sizeof(partial), "%s.partial", path);
    struct sdd_store_opts o = {.kind = kind, .path = path, .buffer_bytes = 256 << 10};
    sdd_store *w = NULL;
    CHECK_OK(sdd_store_open(&o, &w));
    CHECK_REQUIRE(w != NULL);
    static uint8_t buf[100000];
    sdd_err err = SDD_OK;
    int i;
    /* n x 100 kB into 2 MiB: a write fails, or at the latest the close. Odd n goes one by
     * one, even n in batches of two (same bytes twice), whose count must say where it
     * stopped. */
    for (i = 0; i < n && err == SDD_OK; i++) {
        sto_fill((uint64_t)i, buf, sizeof(buf));
        struct sdd_store_rec r = {.id = (uint64_t)i, .data = buf, .size = sizeof(buf)};
        if (n % 2 == 1) {
            err = sdd_store_write(w, &r);
            continue;
        }
        struct sdd_store_rec two[2] = {r, r};
        two[1].id++;
        struct sdd_store_summary before, after;
        sdd_store_stats(w, &before);
        int64_t got = sdd_store_write_batch(w, two, 2);
        sdd_store_stats(w, &after);
        if (got == 2) {
            i++;
        } else {
            /* Stopped early: a count of what went in (1), or the error when none did. */
            CHECK(got == 1 || got < 0);
            CHECK_EQ(after.records - before.records, got > 0 ? (uint64_t)got : 0);
            err = got < 0 ? (sdd_err)got : sdd_store_write(w, &r);
            CHECK(err != SDD_OK);
        }
    }
    if (err != SDD_OK) {
        /* Broken from now on: the same error again, not a crash or a silent success. */
        struct sdd_store_rec r = {.id = 99, .data = buf, .size = 10};
        CHECK_EQ(sdd_store_write(w, &r), err);
    }
    struct sdd_store_summary s;
    sdd_err cerr = sdd_store_close(w, &s);
    CHECK(cerr != SDD_OK);
    if (err != SDD_OK) {
        CHECK_EQ(cerr, err);
    }
    CHECK(s.records <= (uint64_t)n);
    CHECK(!sto_exists(path));
    CHECK(sto_exists(partial));
    printf("%s: write error after %d records (%s), close: %s\n", sdd_store_kind_name(kind), i,
           sdd_errname(err), sdd_errname(cerr));
    if (kind == SDD_STORE_RAW) {
        /* What reached the disk is readable and intact. */
        sdd_store_reader *r = NULL;
        CHECK_OK(sdd_store_reader_open(partial, &r));
        if (r != NULL) {
            CHECK(sdd_store_reader_info(r)->records > 0);
            CHECK_EQ(sdd_store_reader_info(r)->corrupt, 0);
            CHECK_OK(sdd_store_reader_verify(r, NULL));
            sdd_store_reader_close(r);
        }
    }
    unlink(partial);
}

static void unwritable(const char *dir, sdd_store_kind kind, sdd_err expect)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/run.%s", dir, sdd_store_kind_name(kind));
    struct sdd_store_opts o = {.kind = kind, .path = path};
    sdd_store *w = (sdd_store *)&o; /* must stay untouched */
    CHECK_EQ(sdd_store_open(&o, &w), expect);
    CHECK(w == (sdd_store *)&o);
    CHECK(!sto_exists(path));
}

int main(void)
{
    char dir[256], file[512], sub[512];
    sto_tmpdir(dir, sizeof(dir));
    /* A directory path through a regular file. */
    snprintf(file, sizeof(file), "%s/regular", dir);
    FILE *f = fopen(file, "w");
    CHECK_REQUIRE(f != NULL);
    fclose(f);
    unwritable(file, SDD_STORE_RAW, SDD_EOS);
    unwritable(file, SDD_STORE_HDF5, SDD_EOS);
    snprintf(sub, sizeof(sub), "%s/missing/dir", dir);
    unwritable(sub, SDD_STORE_RAW, SDD_ENOENT);
    unwritable(sub, SDD_STORE_HDF5, SDD_ENOENT);

    /* A directory without write permission (root ignores it, so only for others). */
    if (geteuid() != 0) {
        snprintf(sub, sizeof(sub), "%s/locked", dir);
        CHECK_REQUIRE(mkdir(sub, 0555) == 0);
        unwritable(sub, SDD_STORE_RAW, SDD_EACCES);
        unwritable(sub, SDD_STORE_HDF5, SDD_EACCES);
    }
    snprintf(sub, sizeof(sub), "%s/mnt", dir);
    CHECK_REQUIRE(mkdir(sub, 0755) == 0);
    if (mount("tmpfs", sub, "tmpfs", 0, "size=2M") != 0) {
        int e = errno;
        sto_rmdir(dir);
        printf("cannot mount tmpfs (%s)\n", strerror(e));
        return check_finish() != 0 ? 1 : check_skip("mounting a tmpfs is not permitted");
    }
    fill_disk(sub, SDD_STORE_RAW, 41);
    fill_disk(sub, SDD_STORE_HDF5, 41);
    fill_disk(sub, SDD_STORE_RAW, 42);
    fill_disk(sub, SDD_STORE_HDF5, 42);
    /* 2.5 MB: fits the HDF5 writer's buffer, so its failure comes at close. */
    fill_disk(sub, SDD_STORE_RAW, 25);
    fill_disk(sub, SDD_STORE_HDF5, 25);
    CHECK(umount2(sub, MNT_DETACH) == 0);
    /* Read-only: even root cannot create a file there. */
    CHECK_REQUIRE(mount("tmpfs", sub, "tmpfs", MS_RDONLY, "size=1M") == 0);
    unwritable(sub, SDD_STORE_RAW, SDD_EOS);
    unwritable(sub, SDD_STORE_HDF5, SDD_EOS);
    CHECK(umount2(sub, MNT_DETACH) == 0);
    sto_rmdir(dir);
    return check_finish();
}
