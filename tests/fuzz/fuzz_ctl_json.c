/* libFuzzer target for the control API's request-body parser (src/ctl/http_json.c), which
 * reads bytes from the network: any input must be refused with a message or accepted with
 * NUL-terminated strings that fit their buffers; nothing may be read or written out of bounds.
 *
 * Build and run from the repository root (not part of the CMake build):
 *   clang -g -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined -Iinclude -Isrc \
 *       tests/fuzz/fuzz_ctl_json.c src/ctl/http_json.c -o fuzz_ctl_json
 *   mkdir -p corpus && ./fuzz_ctl_json corpus */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ctl/http_json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* A heap copy without a terminating NUL, so ASan catches any read past the end. */
    char *copy = malloc(size > 0 ? size : 1);
    if (copy == NULL) {
        return 0;
    }
    memcpy(copy, data, size);
    char to[16], reason[32], err[128];
    memset(to, 'x', sizeof(to));
    memset(reason, 'x', sizeof(reason));
    err[0] = '\0';
    int rc = ctl_json_parse_transition(copy, size, to, sizeof(to), reason, sizeof(reason), err,
                                       sizeof(err));
    if (rc == 0) {
        if (memchr(to, '\0', sizeof(to)) == NULL || memchr(reason, '\0', sizeof(reason)) == NULL) {
            abort();
        }
    } else if (rc != -1 || err[0] == '\0') {
        abort(); /* refused without saying why */
    }
    free(copy);
    return 0;
}

#include "fuzz_standalone.h"
