/* libFuzzer target for what a builder unit reads from its slots (src/evb/format.c): the bulk
 * header, every metadata entry and every fragment an entry points at. An RU on another host
 * writes those bytes; whatever they are, the checks must never read outside the bulk (ASan
 * watches), and a fragment they accept must lie inside it. The input is tried as it is and,
 * so that the fuzzer gets past the header, with the header's fixed fields made right.
 *
 * Build and run from the repository root (not part of the CMake build):
 *   clang -g -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined -Iinclude -Isrc \
 *       tests/fuzz/fuzz_evb_bulk.c src/evb/format.c src/core/crc32c.c src/core/err.c \
 *       src/core/log.c -lpthread -lm -o fuzz_evb_bulk
 *   mkdir -p corpus && ./fuzz_evb_bulk -max_total_time=60 corpus */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <stdlib.h>
#include <string.h>

#include "evb/evb_internal.h"

/* Walk a bulk as a BU does, for RU 0 with the bulk size and event count its header implies. */
static void walk(const uint8_t *p, size_t avail)
{
    if (avail < sizeof(struct sdd_evb_bulk_hdr)) {
        return;
    }
    const struct sdd_evb_bulk_hdr *h = (const void *)p;
    uint32_t bulk = h->nfrag != 0 && h->nfrag <= 65536 ? h->nfrag : 1;
    uint64_t events = (h->bulk_id + 1) * (uint64_t)bulk;
    if (!evb_bulk_header_ok(p, avail, 0, bulk, events)) {
        return;
    }
    const struct sdd_evb_frag_meta *m = (const void *)(p + sizeof(*h));
    for (uint32_t i = 0; i < h->nfrag; i++) {
        uint64_t id = h->first_event + i;
        if (!evb_bulk_entry_ok(p, i, id)) {
            continue;
        }
        if ((uint64_t)m[i].offset + m[i].length > h->bytes) {
            abort(); /* an accepted entry outside the bulk */
        }
        (void)sdd_evb_frag_validate(p + m[i].offset, m[i].length, 0, id, true);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* A copy of exactly size bytes, so ASan sees any read past the slot. */
    uint8_t *copy = malloc(size > 0 ? size : 1);
    if (copy == NULL) {
        return 0;
    }
    memcpy(copy, data, size);
    walk(copy, size);
    if (size >= sizeof(struct sdd_evb_bulk_hdr)) {
        struct sdd_evb_bulk_hdr h;
        memcpy(&h, copy, sizeof(h));
        h.magic = SDD_EVB_BULK_MAGIC;
        h.version = SDD_EVB_VERSION;
        h.ru = 0;
        h.source = 0;
        h.bulk_id %= 1024;
        h.nfrag = h.nfrag % 64 + 1;
        h.first_event = h.bulk_id * h.nfrag;
        if (h.bytes > size) {
            h.bytes = (uint32_t)size;
        }
        memcpy(copy, &h, sizeof(h));
        walk(copy, size);
    }
    free(copy);
    return 0;
}

#include "fuzz_standalone.h"
