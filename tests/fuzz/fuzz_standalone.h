/* A main() for a fuzz target built without libFuzzer (-DFUZZ_STANDALONE): runs the target
 * once per file named on the command line, to replay a crash or a corpus. Include it after
 * the target's LLVMFuzzerTestOneInput. */
#ifndef SDDAQ_TESTS_FUZZ_STANDALONE_H
#define SDDAQ_TESTS_FUZZ_STANDALONE_H

#ifdef FUZZ_STANDALONE
#include <stdio.h>
int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        FILE *f = fopen(argv[i], "rb");
        if (f == NULL) {
            continue;
        }
        static uint8_t buf[1 << 20];
        size_t n = fread(buf, 1, sizeof(buf), f);
        fclose(f);
        LLVMFuzzerTestOneInput(buf, n);
    }
    return 0;
}
#endif

#endif
