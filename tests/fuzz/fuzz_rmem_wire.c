/* libFuzzer target for the remote-memory parsers of untrusted bytes: the control-message
 * decoder (src/rmem/wire.c) and the ring adoption (src/rmem/trb.c), which takes memory read
 * from another host. The input is decoded as one control message (a decoded message must
 * re-encode to the same length), then copied into aligned memory and adopted as a ring: an
 * adopted ring's every accessor must stay inside that memory. Nothing may crash or read out
 * of bounds (ASan watches).
 *
 * Build and run from the repository root (not part of the CMake build):
 *   clang -g -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined -Iinclude -Isrc \
 *       tests/fuzz/fuzz_rmem_wire.c src/rmem/wire.c src/rmem/trb.c src/core/err.c \
 *       src/core/log.c -lpthread -o fuzz_rmem_wire
 *   mkdir -p corpus && ./fuzz_rmem_wire -max_total_time=60 corpus */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rmem/wire.h"
#include "sddaq/rmem.h"

static void check_in(const struct sdd_trb *t, const void *p)
{
    const uint8_t *b = p;
    if (p != NULL &&
        (b < t->mem + SDD_TRB_HEADER_SIZE || b + t->element_size > t->mem + t->mem_len)) {
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct rm_msg m;
    if (rm_decode(data, size, &m) == SDD_OK) {
        uint8_t out[512];
        size_t n = rm_encode(&m, out, sizeof(out));
        if (size <= sizeof(out) && n != size) {
            abort();
        }
    }
    uint8_t *mem = aligned_alloc(64, (size + 63) & ~(size_t)63);
    if (mem == NULL) {
        return 0;
    }
    memcpy(mem, data, size);
    struct sdd_trb t;
    if (sdd_trb_adopt(&t, mem, size) == SDD_OK) {
        for (long i = -4; i < 4; i++) {
            check_in(&t, sdd_trb_get(&t, i));
        }
        check_in(&t, sdd_trb_newest(&t));
        check_in(&t, sdd_trb_oldest(&t));
        uint64_t seq = sdd_trb_newest_seq(&t);
        check_in(&t, sdd_trb_at_seq(&t, seq));
        if (seq != 0) {
            size_t off = sdd_trb_cell_offset(&t, seq);
            if (off + t.stride > size) {
                abort();
            }
            sdd_trb_check(&t, seq, NULL);
        }
        sdd_trb_refresh(&t);
    }
    free(mem);
    return 0;
}

#include "fuzz_standalone.h"
