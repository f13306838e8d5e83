/* libFuzzer target for the RICH receive-buffer parser (src/trigger/rich_event_finder.c) and
 * the merge behind it (rich_merge.c): the input is a receive buffer of packets, and also a
 * list of edits to a valid generated buffer (so that the deep paths are reached). Whatever it
 * holds, nothing may crash or read outside it (ASan watches; the fuzzer hands over a buffer of
 * exactly the input's size), every indexed event must lie inside the buffer with a header that
 * says what the index says, and the merge must keep its 64-hit cap and never produce more
 * events than went in.
 *
 * Build and run from the repository root (not part of the CMake build):
 *   clang -g -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined -Iinclude -Isrc \
 *       tests/fuzz/fuzz_rich_packet.c src/trigger/rich_event_finder.c src/trigger/rich_merge.c \
 *       src/trigger/rich_geom.c src/trigger/rich_packet.c src/trigger/gen/rich_gen.c \
 *       src/core/err.c src/core/log.c -lpthread -lm -o fuzz_rich_packet
 *   mkdir -p corpus && ./fuzz_rich_packet -max_total_time=60 corpus */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sddaq/trigger.h"

#define CAP 4096 /* index capacity: more events than a 16 KiB input can hold */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static sdd_rich_pmtab *tab;
static sdd_rich_index idx;
static sdd_rich_batch batch;

static void check_buffer(const uint8_t *data, size_t size)
{
    sdd_rich_ef_stats st = {0};
    /* With and without the channel table: both paths take the same untrusted bytes. */
    for (int pass = 0; pass < 2; pass++) {
        uint32_t n = sdd_rich_find_events(data, size, pass ? tab : NULL, &idx, &st);
        if (n > CAP || n != idx.n) {
            abort();
        }
        for (uint32_t k = 0; k < n; k++) {
            size_t off = idx.offset[k];
            if (off + sdd_rich_evt_bytes(idx.nhits[k]) > size || idx.nhits[k] > SDD_RICH_MAX_HITS ||
                data[off + 9] != idx.board[k] || data[off + 10] != idx.nhits[k]) {
                abort();
            }
        }
        sdd_rich_merge_stats ms = {0};
        uint32_t m = sdd_rich_merge(data, &idx, 1, &batch, &ms);
        if (m > n || ms.in_events != n) {
            abort();
        }
        for (uint32_t e = 0; e < m; e++) {
            if (batch.nhits[e] > SDD_RICH_MAX_HITS ||
                (e > 0 && batch.timestamp[e] < batch.timestamp[e - 1] && ms.unordered == 0)) {
                abort();
            }
        }
    }
}

/* Random bytes rarely make a packet, so the input is also read as damage to a valid buffer:
 * the first byte picks the number of generated events, then (offset, xor) byte pairs edit the
 * packed buffer and, for an even input size, the last byte trims its end. The damaged copy
 * has exactly its own size (malloc), so ASan sees any read past it. */
static void check_damaged(const uint8_t *data, size_t size)
{
    static sdd_rich_gen *gen;
    static sdd_rich_event evs[64];
    static uint8_t clean[64 * 4 * 160];
    if (gen == NULL) {
        sdd_rich_gen_opts o;
        sdd_rich_gen_opts_default(&o);
        if (sdd_rich_gen_create(&o, &gen) != SDD_OK) {
            abort();
        }
        for (int i = 0; i < 64; i++) {
            sdd_rich_gen_next(gen, &evs[i]);
        }
    }
    size_t nev = 1 + data[0] % 64;
    int64_t len = sdd_rich_pack(tab, evs, nev, SDD_RICH_PKT_MAX, clean, sizeof(clean), NULL);
    if (len <= 0) {
        abort();
    }
    size_t trim = size % 2 == 0 ? data[size - 1] % 32u : 0;
    size_t cut = (size_t)len > trim ? (size_t)len - trim : 0;
    uint8_t *buf = malloc(cut ? cut : 1);
    if (buf == NULL) {
        abort();
    }
    memcpy(buf, clean, cut);
    for (size_t i = 1; i + 1 < size && cut > 0; i += 2) {
        buf[((size_t)data[i] * 7919u + i * 31u) % cut] ^= data[i + 1];
    }
    check_buffer(buf, cut);
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (tab == NULL) {
        sdd_rich_geom g;
        sdd_rich_geom_default(&g);
        if (sdd_rich_pmtab_create(&g, &tab) != SDD_OK || sdd_rich_index_init(&idx, CAP) != SDD_OK ||
            sdd_rich_batch_init(&batch, CAP) != SDD_OK) {
            abort();
        }
    }
    check_buffer(data, size);
    if (size >= 1) {
        check_damaged(data, size);
    }
    return 0;
}

#include "fuzz_standalone.h"
