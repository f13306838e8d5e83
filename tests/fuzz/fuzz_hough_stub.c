/* libFuzzer target for the stub parsers of untrusted bytes (src/trigger/hough_stub.c): the
 * input is read as a stub block and as a bare run of packed stubs, each into a fixed-size
 * array. A block that reads must write back to the same bytes (every bit of the format means
 * something, so nothing may be lost or invented), and a run that unpacks must fit the array.
 * Nothing may crash or read out of bounds (ASan watches).
 *
 * Build and run from the repository root (not part of the CMake build):
 *   clang -g -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined -Iinclude -Isrc \
 *       tests/fuzz/fuzz_hough_stub.c src/trigger/hough_stub.c src/core/err.c \
 *       src/core/log.c -lpthread -lm -o fuzz_hough_stub
 *   mkdir -p corpus && ./fuzz_hough_stub -max_total_time=60 corpus */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sddaq/trigger.h"

#define MAX_STUBS 256 /* below the u16 count, so the SDD_ETOOBIG path is reachable */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static sdd_stub stubs[MAX_STUBS];
    static uint8_t out[SDD_STUB_BLOCK_HEADER + SDD_STUB_PACKED_BYTES * MAX_STUBS];
    uint16_t sector;
    size_t n = 0;
    if (sdd_stub_block_read(data, size, &sector, stubs, MAX_STUBS, &n) == SDD_OK) {
        int len = sdd_stub_block_write(out, sizeof(out), sector, stubs, n);
        if (n > MAX_STUBS || len < 0 || (size_t)len != size || memcmp(out, data, size) != 0) {
            abort();
        }
    }
    size_t bad = SIZE_MAX;
    sdd_err e = sdd_stubs_unpack(data, size, stubs, MAX_STUBS, &n, &bad);
    if ((e == SDD_OK && n > MAX_STUBS) || (e == SDD_ECORRUPT && bad >= size / 6)) {
        abort();
    }
    return 0;
}

#include "fuzz_standalone.h"
