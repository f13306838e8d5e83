/* Large data buffers: zeroed and writable to the last byte, page-aligned, 2 MiB-aligned and
 * whole 2 MiB when huge pages are asked for a large region, left at page size when not asked or
 * too small, and bad arguments refused. Whether the kernel really backs a region with huge
 * pages depends on its setting, so that is reported, not required. The provider policy
 * (sdd_bigbuf_huge_for) and its environment override are checked. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "sddaq/bigbuf.h"

/* Every byte reads zero, then every page takes a write at both ends. */
static void check_region(uint8_t *p, size_t bytes)
{
    size_t nonzero = 0;
    for (size_t i = 0; i < bytes; i++) {
        nonzero += p[i] != 0;
    }
    CHECK_EQ(nonzero, 0);
    memset(p, 0xA5, bytes);
    CHECK_EQ(p[0], 0xA5);
    CHECK_EQ(p[bytes - 1], 0xA5);
}

static void one(size_t bytes, bool huge)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t mapped = 0;
    uint8_t *p = sdd_bigbuf_alloc(bytes, huge, &mapped);
    CHECK_REQUIRE(p != NULL);
    CHECK(mapped >= bytes);
    CHECK_EQ((uintptr_t)p % page, 0);
    if (huge && bytes >= SDD_BIGBUF_HUGE_MIN) {
        CHECK_EQ((uintptr_t)p % SDD_BIGBUF_HUGE, 0);
        CHECK_EQ(mapped % SDD_BIGBUF_HUGE, 0);
        CHECK(mapped < bytes + SDD_BIGBUF_HUGE);
    } else {
        CHECK_EQ(mapped % page, 0);
        CHECK(mapped < bytes + page);
    }
    check_region(p, mapped);
    sdd_bigbuf_free(p, mapped);
}

/* The kernel's AnonHugePages for this process, in KiB, or -1 when it cannot be read. */
static long anon_huge_kib(void)
{
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    if (f == NULL) {
        return -1;
    }
    char line[256];
    long kib = -1;
    while (fgets(line, sizeof(line), f) != NULL) {
        if (sscanf(line, "AnonHugePages: %ld kB", &kib) == 1) {
            break;
        }
    }
    fclose(f);
    return kib;
}

int main(void)
{
    one(1, false);
    one(1, true);
    one(4096, true);
    one(SDD_BIGBUF_HUGE_MIN - 1, true);
    one(SDD_BIGBUF_HUGE_MIN, true);
    one(SDD_BIGBUF_HUGE_MIN, false);
    one((size_t)1070 << 10, true); /* a BU's slots: 2 RUs x 2 x 4 credits x 67 KiB */
    one((size_t)5 << 20, true);
    one(((size_t)5 << 20) + 1, false);

    size_t mapped = 123;
    CHECK(sdd_bigbuf_alloc(0, true, &mapped) == NULL);
    CHECK_EQ(mapped, 123);
    CHECK(sdd_bigbuf_alloc(4096, true, NULL) == NULL);
    CHECK(sdd_bigbuf_alloc(SIZE_MAX - 100, true, &mapped) == NULL);
    CHECK(sdd_bigbuf_alloc(SIZE_MAX - 100, false, &mapped) == NULL);
    sdd_bigbuf_free(NULL, 4096);

    /* The policy: every provider but tcp, unless SDDAQ_HUGE_PAGES says otherwise. */
    unsetenv("SDDAQ_HUGE_PAGES");
    CHECK(sdd_bigbuf_huge_for("shm"));
    CHECK(sdd_bigbuf_huge_for("verbs;ofi_rxm"));
    CHECK(!sdd_bigbuf_huge_for("tcp;ofi_rxm"));
    CHECK(!sdd_bigbuf_huge_for("tcp"));
    CHECK(!sdd_bigbuf_huge_for(NULL));
    setenv("SDDAQ_HUGE_PAGES", "on", 1);
    CHECK(sdd_bigbuf_huge_for("tcp;ofi_rxm"));
    setenv("SDDAQ_HUGE_PAGES", "off", 1);
    CHECK(!sdd_bigbuf_huge_for("shm"));
    setenv("SDDAQ_HUGE_PAGES", "auto", 1);
    CHECK(sdd_bigbuf_huge_for("shm"));
    CHECK(!sdd_bigbuf_huge_for("tcp"));
    unsetenv("SDDAQ_HUGE_PAGES");

    /* Informational: whether this kernel gave huge pages to an advised region. */
    long before = anon_huge_kib();
    uint8_t *p = sdd_bigbuf_alloc((size_t)4 << 20, true, &mapped);
    CHECK_REQUIRE(p != NULL);
    memset(p, 1, mapped);
    long after = anon_huge_kib();
    printf("huge pages for a 4 MiB region: %s (AnonHugePages %ld -> %ld KiB)\n",
           before < 0 || after < 0 ? "unknown" : after > before ? "yes" : "no", before, after);
    sdd_bigbuf_free(p, mapped);
    return check_finish();
}
