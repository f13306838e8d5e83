/* libFuzzer target for the bootstrap frame and HELLO parser (src/fabric/boot_wire.c): the input
 * is written into one end of a socketpair, that end is closed, and the other end is read the way
 * a bootstrap peer is read: boot_check_alive, boot_recv_hello, then boot_recv_frame until an
 * error. Nothing may crash, leak, hang, or return SDD_OK with results that break the documented
 * limits. The first input byte selects helpers that let the fuzzer past the fixed parts of the
 * header: bit 0 writes the right magic and version, bit 1 recomputes the header checksum. */

/* Build and run from the repository root (not part of the CMake build; boot_wire.c needs only
 * err.c and log.c from src/core, the other core files also need -D_GNU_SOURCE):
 *   clang -g -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined -Iinclude -Isrc \
 *       tests/fuzz/fuzz_boot_wire.c src/fabric/boot_wire.c src/core/err.c src/core/log.c \
 *       -lpthread -o fuzz_boot_wire
 *   mkdir -p corpus && ./fuzz_boot_wire -max_total_time=60 -max_len=70000 corpus
 * Without libFuzzer (gcc, or to replay a crash file): drop "fuzzer" from -fsanitize, add
 * -DFUZZ_STANDALONE, and pass input files as arguments. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fabric/boot_wire.h"
#include "sddaq/clock.h"
#include "sddaq/log.h"

#define MODE_FIX_MAGIC 0x01
#define MODE_FIX_CRC   0x02
#define MAX_FRAMES     16

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* An SDD_OK result that breaks a documented limit is a bug even without a crash. */
static void require(int cond)
{
    if (!cond) {
        __builtin_trap();
    }
}

static void check_hello(const struct boot_hello *h)
{
    size_t plen = strnlen(h->provider, sizeof(h->provider));
    require(plen < sizeof(h->provider));
    require(h->addr_len <= BOOT_MAX_ADDR);
    require(h->info_len <= BOOT_MAX_INFO);
    require((h->info_len == 0) == (h->info == NULL));
}

static void check_frame(uint16_t type, const void *payload, uint32_t len)
{
    require(type >= BOOT_HELLO && type <= BOOT_REJECT);
    require(len <= BOOT_MAX_PAYLOAD);
    require((len == 0) == (payload == NULL));
    require(len == 0 || (type != BOOT_READY && type != BOOT_BYE));
}

/* Write as much of buf as the socket buffer takes (the rest is dropped), then close. */
static void feed(int fd, const uint8_t *buf, size_t len)
{
    size_t off = 0;
    while (off < len) {
        ssize_t n = send(fd, buf + off, len - off, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n <= 0) {
            break;
        }
        off += (size_t)n;
    }
    close(fd);
}

/* Silence the log through the environment before its first use: sdd_log_configure() would
 * replace a configuration that is never freed (readers may still hold it), which LeakSanitizer
 * reports. An SDDAQ_LOG already set (to debug a crash) wins. */
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    setenv("SDDAQ_LOG", "none", 0);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0) {
        return 0;
    }
    uint8_t mode = data[0];
    size_t len = size - 1;
    uint8_t *buf = malloc(len ? len : 1);
    if (buf == NULL) {
        return 0;
    }
    memcpy(buf, data + 1, len);
    if (len >= BOOT_HEADER_LEN && (mode & MODE_FIX_MAGIC)) {
        const uint8_t fixed[6] = {'S', 'D', 'D', 'B', BOOT_VERSION, 0};
        memcpy(buf, fixed, sizeof(fixed));
    }
    if (len >= BOOT_HEADER_LEN && (mode & MODE_FIX_CRC)) {
        uint32_t crc = boot_crc32c(buf, 12);
        for (int i = 0; i < 4; i++) {
            buf[12 + i] = (uint8_t)(crc >> (8 * i));
        }
    }

    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        free(buf);
        return 0;
    }
    feed(sv[0], buf, len);
    free(buf);

    /* The writer is closed, so every read ends at EOF at once; the deadline is only a guard. */
    uint64_t deadline = sdd_now_ns() + 100 * SDD_NS_PER_MS;
    (void)boot_check_alive(sv[1]);
    struct boot_hello hello;
    if (boot_recv_hello(sv[1], deadline, &hello) == SDD_OK) {
        check_hello(&hello);
        free(hello.info);
    }
    (void)boot_check_alive(sv[1]);
    for (int i = 0; i < MAX_FRAMES; i++) {
        uint16_t type;
        void *payload;
        uint32_t plen;
        if (boot_recv_frame(sv[1], deadline, &type, &payload, &plen) != SDD_OK) {
            break;
        }
        check_frame(type, payload, plen);
        free(payload);
    }
    close(sv[1]);
    return 0;
}

#ifdef FUZZ_STANDALONE
int main(int argc, char **argv)
{
    LLVMFuzzerInitialize(&argc, &argv);
    for (int i = 1; i < argc; i++) {
        FILE *f = fopen(argv[i], "rb");
        if (f == NULL) {
            perror(argv[i]);
            return 1;
        }
        static uint8_t in[1 << 21];
        size_t n = fread(in, 1, sizeof(in), f);
        fclose(f);
        LLVMFuzzerTestOneInput(in, n);
    }
    printf("%d inputs ran\n", argc - 1);
    return 0;
}
#endif
