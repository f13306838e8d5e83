/* CRC-32C: a slicing-by-8 table version for any CPU and an SSE4.2 version for x86-64, chosen
 * once at run time. The tables are computed on first use (a few microseconds) rather than
 * spelled out, so there is nothing to mistype. */
#include "sddaq/crc32c.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#if defined(__x86_64__)
#include <nmmintrin.h>
#define HAVE_X86_CRC 1
#endif

#define POLY 0x82F63B78u

static uint32_t table[8][256];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void table_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) {
            c = (c & 1) ? (c >> 1) ^ POLY : c >> 1;
        }
        table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++) {
        for (int t = 1; t < 8; t++) {
            table[t][i] = (table[t - 1][i] >> 8) ^ table[0][table[t - 1][i] & 0xff];
        }
    }
}

uint32_t sdd_crc32c_sw(uint32_t crc, const void *buf, size_t len)
{
    pthread_once(&table_once, table_init);
    const uint8_t *p = buf;
    uint32_t c = ~crc;
    while (len > 0 && ((uintptr_t)p & 7) != 0) {
        c = (c >> 8) ^ table[0][(c ^ *p++) & 0xff];
        len--;
    }
    while (len >= 8) {
        /* Little-endian load of 8 bytes; the byte order of the tables below assumes it. */
        uint32_t lo =
            (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
        uint32_t hi =
            (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 | (uint32_t)p[7] << 24;
        lo ^= c;
        c = table[7][lo & 0xff] ^ table[6][(lo >> 8) & 0xff] ^ table[5][(lo >> 16) & 0xff] ^
            table[4][lo >> 24] ^ table[3][hi & 0xff] ^ table[2][(hi >> 8) & 0xff] ^
            table[1][(hi >> 16) & 0xff] ^ table[0][hi >> 24];
        p += 8;
        len -= 8;
    }
    while (len > 0) {
        c = (c >> 8) ^ table[0][(c ^ *p++) & 0xff];
        len--;
    }
    return ~c;
}

#ifdef HAVE_X86_CRC
/* The crc32 instruction has a latency of 3 cycles and a throughput of 1, so one stream runs at
 * a third of the possible rate. Long buffers go as three interleaved streams over consecutive
 * blocks of BLOCK bytes, joined by "shifting" a CRC state over BLOCK zero bytes: a linear map
 * on the 32-bit state, applied through four byte tables built once from its 32 columns. */
#define BLOCK 4096

static uint32_t shift_tab[4][256];
static pthread_once_t shift_once = PTHREAD_ONCE_INIT;

__attribute__((target("sse4.2"))) static uint32_t hw_zeros(uint32_t c, size_t n)
{
    uint64_t x = c;
    for (size_t i = 0; i < n; i += 8) {
        x = _mm_crc32_u64(x, 0);
    }
    return (uint32_t)x;
}

static void shift_init(void)
{
    uint32_t col[32];
    for (int b = 0; b < 32; b++) {
        col[b] = hw_zeros(1u << b, BLOCK);
    }
    for (int k = 0; k < 4; k++) {
        for (uint32_t v = 0; v < 256; v++) {
            uint32_t x = 0;
            for (int b = 0; b < 8; b++) {
                if (v & (1u << b)) {
                    x ^= col[8 * k + b];
                }
            }
            shift_tab[k][v] = x;
        }
    }
}

static inline uint32_t shift_block(uint32_t c)
{
    return shift_tab[0][c & 0xff] ^ shift_tab[1][(c >> 8) & 0xff] ^ shift_tab[2][(c >> 16) & 0xff] ^
           shift_tab[3][c >> 24];
}

static inline uint64_t load64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

__attribute__((target("sse4.2"))) uint32_t sdd_crc32c_hw(uint32_t crc, const void *buf, size_t len)
{
    const uint8_t *p = buf;
    uint64_t c = ~crc;
    while (len > 0 && ((uintptr_t)p & 7) != 0) {
        c = _mm_crc32_u8((uint32_t)c, *p++);
        len--;
    }
    if (len >= 3 * BLOCK) {
        pthread_once(&shift_once, shift_init);
    }
    while (len >= 3 * BLOCK) {
        uint64_t a = c, b = 0, d = 0;
        for (size_t i = 0; i < BLOCK; i += 8) {
            a = _mm_crc32_u64(a, load64(p + i));
            b = _mm_crc32_u64(b, load64(p + BLOCK + i));
            d = _mm_crc32_u64(d, load64(p + 2 * BLOCK + i));
        }
        c = shift_block(shift_block((uint32_t)a) ^ (uint32_t)b) ^ (uint32_t)d;
        p += 3 * BLOCK;
        len -= 3 * BLOCK;
    }
    while (len >= 8) {
        c = _mm_crc32_u64(c, load64(p));
        p += 8;
        len -= 8;
    }
    while (len > 0) {
        c = _mm_crc32_u8((uint32_t)c, *p++);
        len--;
    }
    return ~(uint32_t)c;
}

bool sdd_crc32c_hw_available(void)
{
    return __builtin_cpu_supports("sse4.2");
}
#else
uint32_t sdd_crc32c_hw(uint32_t crc, const void *buf, size_t len)
{
    return sdd_crc32c_sw(crc, buf, len);
}

bool sdd_crc32c_hw_available(void)
{
    return false;
}
#endif

uint32_t sdd_crc32c(uint32_t crc, const void *buf, size_t len)
{
    /* Decided once; a benign race on first use stores the same value. */
    static atomic_int hw = -1;
    int h = atomic_load_explicit(&hw, memory_order_relaxed);
    if (h < 0) {
        h = sdd_crc32c_hw_available() ? 1 : 0;
        atomic_store_explicit(&hw, h, memory_order_relaxed);
    }
    return h ? sdd_crc32c_hw(crc, buf, len) : sdd_crc32c_sw(crc, buf, len);
}
