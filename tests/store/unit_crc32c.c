/* CRC-32C: the standard check value from both implementations, agreement between them at
 * every alignment and many lengths, continuation, and known vectors (RFC 3720 B.4). */
#include <string.h>

#include "check.h"
#include "sddaq/crc32c.h"

int main(void)
{
    CHECK_EQ(sdd_crc32c_sw(0, "123456789", 9), SDD_CRC32C_CHECK);
    CHECK_EQ(sdd_crc32c(0, "123456789", 9), SDD_CRC32C_CHECK);
    CHECK_EQ(sdd_crc32c(0, NULL, 0), 0);
    uint8_t zeros[32] = {0}, ones[32], inc[32];
    memset(ones, 0xff, sizeof(ones));
    for (int i = 0; i < 32; i++) {
        inc[i] = (uint8_t)i;
    }
    /* RFC 3720 appendix B.4. */
    CHECK_EQ(sdd_crc32c(0, zeros, 32), 0x8A9136AAu);
    CHECK_EQ(sdd_crc32c(0, ones, 32), 0x62A8AB43u);
    CHECK_EQ(sdd_crc32c(0, inc, 32), 0x46DD794Eu);
    CHECK_EQ(sdd_crc32c_sw(0, inc, 32), 0x46DD794Eu);
    if (sdd_crc32c_hw_available()) {
        CHECK_EQ(sdd_crc32c_hw(0, "123456789", 9), SDD_CRC32C_CHECK);
        CHECK_EQ(sdd_crc32c_hw(0, inc, 32), 0x46DD794Eu);
    } else {
        printf("note: no SSE4.2, hardware path not tested\n");
    }
    static uint8_t buf[4096 + 16];
    uint64_t rng = 42;
    for (size_t i = 0; i < sizeof(buf); i++) {
        buf[i] = (uint8_t)check_rand(&rng);
    }
    int mismatches = 0, chain_bad = 0;
    for (size_t align = 0; align < 8; align++) {
        for (size_t len = 0; len < 300; len++) {
            uint32_t sw = sdd_crc32c_sw(0, buf + align, len);
            if (sdd_crc32c(0, buf + align, len) != sw ||
                (sdd_crc32c_hw_available() && sdd_crc32c_hw(0, buf + align, len) != sw)) {
                mismatches++;
            }
            size_t cut = len / 3;
            if (sdd_crc32c(sdd_crc32c(0, buf + align, cut), buf + align + cut, len - cut) != sw) {
                chain_bad++;
            }
        }
    }
    CHECK_EQ(mismatches, 0);
    CHECK_EQ(chain_bad, 0);
    CHECK(sdd_crc32c(0, buf, 4096) == sdd_crc32c_sw(0, buf, 4096));
    /* Long buffers: the hardware path's three interleaved streams and their joins, with
     * lengths around multiples of its 12 KiB step and odd starts. */
    size_t big_len = 200000;
    uint8_t *big = malloc(big_len + 8);
    CHECK_REQUIRE(big != NULL);
    for (size_t i = 0; i < big_len + 8; i++) {
        big[i] = (uint8_t)check_rand(&rng);
    }
    static const size_t lens[] = {12287, 12288, 12289, 24576 + 13, 36864, 100000, 200000};
    int big_bad = 0;
    for (size_t k = 0; k < sizeof(lens) / sizeof(lens[0]); k++) {
        for (size_t align = 0; align < 8; align += 3) {
            uint32_t sw = sdd_crc32c_sw(0, big + align, lens[k]);
            big_bad += sdd_crc32c(0, big + align, lens[k]) != sw;
            big_bad +=
                sdd_crc32c(sdd_crc32c(0, big + align, 777), big + align + 777, lens[k] - 777) != sw;
        }
    }
    CHECK_EQ(big_bad, 0);
    free(big);
    /* A single flipped bit changes the CRC. */
    uint32_t before = sdd_crc32c(0, buf, 4096);
    buf[1234] ^= 0x10;
    CHECK(sdd_crc32c(0, buf, 4096) != before);
    return check_finish();
}
