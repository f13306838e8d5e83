/* The test payload pattern: 64-bit little-endian words that depend on the packet's (stream,
 * frame, packet) ids and the word's offset, so a receiver can tell a payload placed at the
 * wrong offset, taken from another packet or damaged. */
#include <string.h>

#include "core/le.h"
#include "sddaq/readout.h"

/* splitmix64's finaliser: every input bit reaches every output bit. */
static uint64_t mix(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static uint64_t packet_key(uint32_t stream, uint64_t frame, uint32_t packet)
{
    return mix(mix(frame) ^ ((uint64_t)stream << 32 | packet));
}

/* Word i of the pattern; odd multiplier, so no two offsets of one packet share a word. */
static inline uint64_t word(uint64_t key, size_t i)
{
    return key ^ ((uint64_t)i * 0x9E3779B97F4A7C15ull);
}

void sdd_ro_pattern_fill(uint32_t stream, uint64_t frame, uint32_t packet, void *buf, size_t len)
{
    uint64_t key = packet_key(stream, frame, packet);
    uint8_t *p = buf;
    size_t words = len / 8;
    for (size_t i = 0; i < words; i++) {
        put_le64(p + 8 * i, word(key, i));
    }
    if (len % 8 != 0) {
        uint8_t tail[8];
        put_le64(tail, word(key, words));
        memcpy(p + 8 * words, tail, len % 8);
    }
}

bool sdd_ro_pattern_check(uint32_t stream, uint64_t frame, uint32_t packet, const void *buf,
                          size_t len)
{
    uint64_t key = packet_key(stream, frame, packet);
    const uint8_t *p = buf;
    size_t words = len / 8;
    uint64_t diff = 0;
    for (size_t i = 0; i < words; i++) {
        diff |= get_le64(p + 8 * i) ^ word(key, i);
    }
    if (len % 8 != 0) {
        uint8_t tail[8];
        put_le64(tail, word(key, words));
        diff |= (uint64_t)(memcmp(p + 8 * words, tail, len % 8) != 0);
    }
    return diff == 0;
}
