/* The HDF5 reader on damaged files: a flipped byte in an event's data is found by verify and
 * get through /events/crc32c; a truncated HDF5 file and an HDF5 signature followed by garbage
 * are refused with an error, never a crash. */
#include <string.h>

#include "stotest.h"

int main(void)
{
    char dir[256], path[512], cut[512];
    sto_tmpdir(dir, sizeof(dir));
    snprintf(path, sizeof(path), "%s/run.h5", dir);
    snprintf(cut, sizeof(cut), "%s/cut.h5", dir);
    struct sdd_store_opts o = {.kind = SDD_STORE_HDF5, .path = path};
    sdd_store *w = NULL;
    CHECK_OK(sdd_store_open(&o, &w));
    CHECK_REQUIRE(w != NULL);
    /* Record 7 carries a marker that the test can find in the file. */
    static const char marker[] = "MARKER-sddaq-store-unit-test-7";
    uint8_t buf[5000];
    for (uint64_t i = 0; i < 20; i++) {
        sto_fill(i, buf, sizeof(buf));
        if (i == 7) {
            memcpy(buf + 100, marker, sizeof(marker) - 1);
        }
        struct sdd_store_rec r = {.id = i, .time_ns = i, .data = buf, .size = sizeof(buf)};
        CHECK_OK(sdd_store_write(w, &r));
    }
    CHECK_OK(sdd_store_close(w, NULL));

    /* Find the marker's file offset. */
    uint64_t size = sto_file_size(path);
    uint8_t *file = malloc(size);
    FILE *f = fopen(path, "rb");
    CHECK_REQUIRE(f != NULL && fread(file, 1, size, f) == size);
    fclose(f);
    uint8_t *at = memmem(file, size, marker, sizeof(marker) - 1);
    CHECK_REQUIRE(at != NULL);
    sto_copy_prefix(path, cut, size);
    sto_flip(cut, (uint64_t)(at - file) + 3);

    sdd_store_reader *r = NULL;
    CHECK_OK(sdd_store_reader_open(cut, &r));
    CHECK_REQUIRE(r != NULL);
    uint64_t bad = 0;
    CHECK_EQ(sdd_store_reader_verify(r, &bad), SDD_ECORRUPT);
    CHECK_EQ(bad, 1);
    struct sdd_store_rec rec;
    CHECK_EQ(sdd_store_reader_get(r, 7, &rec, buf, sizeof(buf)), SDD_ECORRUPT);
    CHECK_OK(sdd_store_reader_get(r, 6, &rec, buf, sizeof(buf)));
    sdd_store_reader_close(r);

    /* Cut in half: HDF5 cannot open it, or the datasets do not add up; either way an error. */
    for (uint64_t len = 8; len < size; len = len * 2 + 1) {
        sto_copy_prefix(path, cut, len);
        sdd_err e = sdd_store_reader_open(cut, &r);
        if (e == SDD_OK) {
            /* A prefix that still holds everything (the tail is free space) must read whole. */
            CHECK_OK(sdd_store_reader_verify(r, NULL));
            sdd_store_reader_close(r);
        } else {
            CHECK(e == SDD_ECORRUPT || e == SDD_EPROTO);
        }
    }
    /* The signature, then garbage. */
    memset(file + 8, 0xA5, size - 8);
    f = fopen(cut, "wb");
    CHECK_REQUIRE(f != NULL && fwrite(file, 1, size, f) == size);
    fclose(f);
    CHECK_EQ(sdd_store_reader_open(cut, &r), SDD_ECORRUPT);
    free(file);
    sto_rmdir(dir);
    return check_finish();
}
