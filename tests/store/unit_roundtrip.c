/* Both file formats give back every record as written: id, time, flags and every byte, for
 * sizes from 0 to 3 MiB (larger than the write buffer, so the direct path is taken), through
 * sdd_store_write and sdd_store_write_batch; the run attributes come back; the file appears
 * under its final name only after close; checksums verify; a null writer only counts. */
#include <string.h>

#include "stotest.h"

#define N   400
#define MAX (3u << 20)

static void roundtrip(const char *dir, sdd_store_kind kind)
{
    char path[512], partial[600];
    snprintf(path, sizeof(path), "%s/run.%s", dir, sdd_store_kind_name(kind));
    snprintf(partial, sizeof(partial), "%s%s", path, SDD_STORE_PARTIAL_SUFFIX);
    const char *topo = "nodes: [a, b]\nwriter: x\n";
    struct sdd_store_opts o = {.kind = kind,
                               .path = path,
                               .run_number = 4711,
                               .topology = topo,
                               .start_unix_ns = 1234567890123ull,
                               .buffer_bytes = 1u << 20};
    sdd_store *w = NULL;
    CHECK_OK(sdd_store_open(&o, &w));
    CHECK_REQUIRE(w != NULL);
    CHECK(sto_exists(partial));
    CHECK(!sto_exists(path));

    static uint64_t sizes[N];
    uint64_t rng = 7, total = 0, flagged = 0;
    uint8_t *buf = malloc(MAX);
    uint8_t *scratch = malloc(MAX);
    CHECK_REQUIRE(buf != NULL && scratch != NULL);
    for (uint64_t i = 0; i < N; i++) {
        sizes[i] = sto_size(&rng, i, MAX);
        total += sizes[i];
        flagged += (i % 5) != 0;
    }
    /* First half one by one, the rest in batches of 8 (payloads kept alive per batch). */
    for (uint64_t i = 0; i < N / 2; i++) {
        sto_fill(1000 + i, buf, sizes[i]);
        struct sdd_store_rec r = {.id = 1000 + i,
                                  .time_ns = i * 1000 + 3,
                                  .flags = (uint32_t)(i % 5),
                                  .data = buf,
                                  .size = sizes[i]};
        CHECK_OK(sdd_store_write(w, &r));
    }
    for (uint64_t i = N / 2; i < N; i += 8) {
        struct sdd_store_rec rs[8];
        uint8_t *bufs[8];
        for (int k = 0; k < 8; k++) {
            bufs[k] = malloc(sizes[i + k] + 1);
            CHECK_REQUIRE(bufs[k] != NULL);
            sto_fill(1000 + i + k, bufs[k], sizes[i + k]);
            rs[k] = (struct sdd_store_rec){.id = 1000 + i + k,
                                           .time_ns = (i + k) * 1000 + 3,
                                           .flags = (uint32_t)((i + k) % 5),
                                           .data = bufs[k],
                                           .size = sizes[i + k]};
        }
        CHECK_EQ(sdd_store_write_batch(w, rs, 8), 8);
        for (int k = 0; k < 8; k++) {
            free(bufs[k]);
        }
    }
    struct sdd_store_rec bad = {.id = 1, .data = NULL, .size = 5};
    CHECK_EQ(sdd_store_write(w, &bad), SDD_EINVAL);
    struct sdd_store_summary s;
    CHECK_OK(sdd_store_close(w, &s));
    CHECK_EQ(s.records, N);
    CHECK_EQ(s.bytes, total);
    CHECK_EQ(s.flagged, flagged);
    CHECK_EQ(s.first_id, 1000);
    CHECK_EQ(s.last_id, 1000 + N - 1);
    CHECK(s.file_bytes >= total);
    CHECK(s.stop_unix_ns >= s.start_unix_ns);
    CHECK(sto_exists(path));
    CHECK(!sto_exists(partial));

    sdd_store_reader *r = NULL;
    CHECK_OK(sdd_store_reader_open(path, &r));
    CHECK_REQUIRE(r != NULL);
    const struct sdd_store_info *in = sdd_store_reader_info(r);
    CHECK_EQ(in->kind, kind);
    CHECK_EQ(in->records, N);
    CHECK_EQ(in->bytes, total);
    CHECK_EQ(in->run_number, 4711);
    CHECK_EQ(in->start_unix_ns, 1234567890123ull);
    CHECK_EQ(in->stop_unix_ns, s.stop_unix_ns);
    CHECK(strcmp(in->topology, topo) == 0);
    CHECK(strcmp(in->sddaq_version, "0.1.0") == 0);
    CHECK(in->indexed);
    CHECK_EQ(in->corrupt + in->truncated_bytes + in->skipped_bytes, 0);
    int wrong = 0;
    /* Backwards, to prove random access. */
    for (uint64_t j = 0; j < N; j++) {
        uint64_t i = N - 1 - j;
        struct sdd_store_rec rec;
        sdd_err e = sdd_store_reader_get(r, i, &rec, buf, MAX);
        if (e != SDD_OK ||
            !sto_match(&rec, 1000 + i, sizes[i], i * 1000 + 3, (uint32_t)(i % 5), scratch)) {
            wrong++;
        }
    }
    CHECK_EQ(wrong, 0);
    struct sdd_store_rec rec;
    CHECK_EQ(sdd_store_reader_get(r, N, &rec, buf, MAX), SDD_ENOENT);
    CHECK_EQ(sdd_store_reader_get(r, 1, &rec, buf, 10), SDD_ETOOBIG);
    CHECK_EQ(rec.size, MAX);
    CHECK_EQ(rec.id, 1001);
    uint64_t nbad = 99;
    CHECK_OK(sdd_store_reader_verify(r, &nbad));
    CHECK_EQ(nbad, 0);
    sdd_store_reader_close(r);

    /* The final name exists now: a second run under it is refused unless overwrite. */
    CHECK_EQ(sdd_store_open(&o, &w), SDD_EBUSY);
    CHECK(!sto_exists(partial));
    o.overwrite = true;
    CHECK_OK(sdd_store_open(&o, &w));
    CHECK_OK(sdd_store_close(w, &s));
    CHECK_EQ(s.records, 0);
    CHECK_OK(sdd_store_reader_open(path, &r));
    CHECK_EQ(sdd_store_reader_info(r)->records, 0);
    sdd_store_reader_close(r);
    free(buf);
    free(scratch);
}

int main(void)
{
    char dir[256];
    sto_tmpdir(dir, sizeof(dir));
    roundtrip(dir, SDD_STORE_RAW);
    roundtrip(dir, SDD_STORE_HDF5);

    struct sdd_store_opts o = {.kind = SDD_STORE_NULL};
    sdd_store *w = NULL;
    CHECK_OK(sdd_store_open(&o, &w));
    uint8_t b[100] = {0};
    for (int i = 0; i < 10; i++) {
        struct sdd_store_rec r = {.id = (uint64_t)i, .flags = i == 3, .data = b, .size = 100};
        CHECK_OK(sdd_store_write(w, &r));
    }
    struct sdd_store_summary s;
    CHECK_OK(sdd_store_close(w, &s));
    CHECK_EQ(s.records, 10);
    CHECK_EQ(s.bytes, 1000);
    CHECK_EQ(s.flagged, 1);
    CHECK_EQ(s.last_id, 9);
    CHECK_EQ(s.file_bytes, 0);

    struct sdd_store_opts nopath = {.kind = SDD_STORE_RAW};
    CHECK_EQ(sdd_store_open(&nopath, &w), SDD_EINVAL);
    CHECK_EQ(sdd_store_reader_open("/nonexistent/x.raw", &(sdd_store_reader *){NULL}), SDD_ENOENT);
    sto_rmdir(dir);
    return check_finish();
}
