/* libFuzzer target for the topology config (src/ctl/config*.c): any bytes as YAML. Parsing and
 * validation must never crash, leak or read out of bounds (ASan and UBSan watch), every
 * problem must come with a message, and a config that parses must survive the round trip:
 * its emitted YAML parses again and emits the same text.
 *
 * Build and run from the repository root (not part of the CMake build):
 *   clang -g -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined -Iinclude -Isrc \
 *       tests/fuzz/fuzz_config.c src/ctl/config.c src/ctl/config_parse.c \
 *       src/ctl/config_validate.c src/ctl/config_emit.c src/ctl/config_default.c \
 *       src/core/err.c src/core/log.c -lyaml -lpthread -o fuzz_config
 *   mkdir -p corpus && cp examples/topologies/default.yaml corpus/ && ./fuzz_config corpus */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sddaq/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct sdd_config_diag d = {0};
    sdd_config *cfg = NULL;
    sdd_err err = sdd_config_parse((const char *)data, size, "fuzz.yaml", &cfg, &d);
    if (err == SDD_EINVAL && d.count == 0) {
        abort(); /* refused without saying why */
    }
    for (size_t i = 0; i < d.stored; i++) {
        if (d.errors[i].text == NULL || strncmp(d.errors[i].text, "fuzz.yaml", 9) != 0) {
            abort();
        }
    }
    sdd_config_diag_fini(&d);
    if (err == SDD_OK) {
        char *a = NULL, *b = NULL;
        size_t alen = 0;
        if (sdd_config_emit(cfg, &a, &alen) != SDD_OK) {
            abort();
        }
        sdd_config *again = NULL;
        struct sdd_config_diag d2 = {0};
        if (sdd_config_parse(a, alen, "fuzz.yaml", &again, &d2) != SDD_OK) {
            for (size_t i = 0; i < d2.stored; i++) {
                fprintf(stderr, "round trip: %s\n", d2.errors[i].text);
            }
            fprintf(stderr, "emitted:\n%s\n", a);
            abort();
        }
        if (sdd_config_emit(again, &b, NULL) != SDD_OK || strcmp(a, b) != 0) {
            abort();
        }
        free(a);
        free(b);
        sdd_config_diag_fini(&d2);
        sdd_config_destroy(again);
    }
    sdd_config_destroy(cfg);
    return 0;
}

#include "fuzz_standalone.h"
