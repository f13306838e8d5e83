/* Buffer pools: geometry and alignment, exhaust and refill, index/at round trips, refusal of
 * foreign, misaligned and double-put pointers without damage, pools over caller memory, and a
 * threaded get/put stress that would catch one buffer handed to two threads at once. */
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "sddaq/log.h"
#include "sddaq/pool.h"

/* Take every buffer, check each is distinct, in the region, aligned, and round-trips through
 * index/at. Returns how many were taken; they are put back before returning. */
static size_t drain_and_check(sdd_pool *p, size_t align)
{
    size_t count = sdd_pool_count(p);
    void **bufs = calloc(count + 1, sizeof(void *));
    uint8_t *taken = calloc(count, 1);
    CHECK_REQUIRE(bufs != NULL && taken != NULL);
    uintptr_t base = (uintptr_t)sdd_pool_base(p);
    size_t n = 0;
    int bad = 0;
    void *b;
    while (n <= count && (b = sdd_pool_get(p)) != NULL) {
        bufs[n++] = b;
        uintptr_t a = (uintptr_t)b;
        bad += a < base || a + sdd_pool_buf_size(p) > base + sdd_pool_region_size(p);
        bad += (a & (align - 1)) != 0;
        int idx = sdd_pool_index(p, b);
        if (idx < 0 || (size_t)idx >= count || sdd_pool_at(p, (size_t)idx) != b) {
            bad++;
            continue;
        }
        bad += taken[idx]++ != 0; /* the same buffer twice */
    }
    CHECK_EQ(bad, 0);
    CHECK_EQ(n, count);
    CHECK(sdd_pool_get(p) == NULL);
    CHECK_EQ(sdd_pool_available(p), 0);
    CHECK_EQ(sdd_pool_put_burst(p, bufs, (unsigned)n), n);
    CHECK_EQ(sdd_pool_available(p), count);
    free(bufs);
    free(taken);
    return n;
}

static void test_create_geometry(void)
{
    sdd_pool *sentinel = (sdd_pool *)(uintptr_t)0x1;
    sdd_pool *p = sentinel;
    CHECK_EQ(sdd_pool_create(0, 10, 0, &p), SDD_EINVAL);
    CHECK_EQ(sdd_pool_create(100, 0, 0, &p), SDD_EINVAL);
    CHECK_EQ(sdd_pool_create(100, 10, 48, &p), SDD_EINVAL); /* not a power of two */
    CHECK_EQ(sdd_pool_create(100, (size_t)SDD_POOL_MAX_COUNT + 1, 0, &p), SDD_EINVAL);
    CHECK_EQ(sdd_pool_create(100, 10, 0, NULL), SDD_EINVAL);
    CHECK_EQ(sdd_pool_create(SIZE_MAX / 2, 16, 0, &p), SDD_ETOOBIG);
    CHECK_EQ(sdd_pool_create(SIZE_MAX - 3, 1, 64, &p), SDD_ETOOBIG);
    CHECK(p == sentinel);

    /* Default alignment 64: 100 rounds up to a 128-byte stride. */
    CHECK_OK(sdd_pool_create(100, 10, 0, &p));
    CHECK_EQ(sdd_pool_count(p), 10);
    CHECK_EQ(sdd_pool_buf_size(p), 128);
    CHECK_EQ(sdd_pool_region_size(p), 1280);
    CHECK_EQ((uintptr_t)sdd_pool_base(p) % 64, 0);
    CHECK(sdd_pool_at(p, 0) == sdd_pool_base(p));
    CHECK(sdd_pool_at(p, 10) == NULL);
    CHECK_EQ(sdd_pool_available(p), 10);
    CHECK_EQ(sdd_pool_bad_puts(p), 0);
    /* The whole region is writable memory. */
    memset(sdd_pool_base(p), 0xa5, sdd_pool_region_size(p));
    drain_and_check(p, 64);
    sdd_pool_destroy(p);

    /* Page alignment, as for registered DMA buffers. */
    CHECK_OK(sdd_pool_create(5000, 7, 4096, &p));
    CHECK_EQ(sdd_pool_buf_size(p), 8192);
    CHECK_EQ((uintptr_t)sdd_pool_base(p) % 4096, 0);
    drain_and_check(p, 4096);
    sdd_pool_destroy(p);

    /* Small alignment and an odd stride (not a power of two). */
    CHECK_OK(sdd_pool_create(100, 33, 8, &p));
    CHECK_EQ(sdd_pool_buf_size(p), 104);
    drain_and_check(p, 8);
    sdd_pool_destroy(p);

    /* One buffer. */
    CHECK_OK(sdd_pool_create(1, 1, 1, &p));
    CHECK_EQ(sdd_pool_buf_size(p), 1);
    drain_and_check(p, 1);
    sdd_pool_destroy(p);

    sdd_pool_destroy(NULL);
}

static void test_exhaust_refill_bursts(void)
{
    sdd_pool *p;
    CHECK_OK(sdd_pool_create(256, 100, 0, &p));
    void *bufs[128];
    CHECK_EQ(sdd_pool_get_burst(p, bufs, 30), 30);
    CHECK_EQ(sdd_pool_available(p), 70);
    CHECK_EQ(sdd_pool_get_burst(p, bufs + 30, 128 - 30), 70); /* partial: only 70 left */
    CHECK_EQ(sdd_pool_get_burst(p, bufs, 4), 0);
    CHECK(sdd_pool_get(p) == NULL);
    /* Give back one at a time and in a burst; then all 100 can be taken again. */
    for (int i = 0; i < 10; i++) {
        CHECK_OK(sdd_pool_put(p, bufs[i]));
    }
    CHECK_EQ(sdd_pool_put_burst(p, bufs + 10, 90), 90);
    CHECK_EQ(sdd_pool_available(p), 100);
    CHECK_EQ(sdd_pool_bad_puts(p), 0);
    /* Many cycles: the free ring's indices wrap many times. */
    for (int round = 0; round < 2000; round++) {
        unsigned got = sdd_pool_get_burst(p, bufs, 1 + (unsigned)round % 100);
        CHECK_EQ(got, 1 + (unsigned)round % 100);
        CHECK_EQ(sdd_pool_put_burst(p, bufs, got), got);
    }
    CHECK_EQ(drain_and_check(p, 64), 100);
    sdd_pool_destroy(p);
}

static void test_refuses_bad_pointers(void)
{
    sdd_pool *p;
    CHECK_OK(sdd_pool_create(100, 8, 0, &p));
    unsigned char *base = sdd_pool_base(p);
    int on_stack;
    void *foreign_heap = malloc(128);
    CHECK_REQUIRE(foreign_heap != NULL);

    void *b = sdd_pool_get(p);
    CHECK(b != NULL);
    CHECK_EQ(sdd_pool_available(p), 7);

    uint64_t refused = 0;
    CHECK_EQ(sdd_pool_put(p, NULL), SDD_EINVAL);
    refused++;
    CHECK_EQ(sdd_pool_put(p, &on_stack), SDD_EINVAL);
    refused++;
    CHECK_EQ(sdd_pool_put(p, foreign_heap), SDD_EINVAL);
    refused++;
    CHECK_EQ(sdd_pool_put(p, (unsigned char *)b + 1), SDD_EINVAL); /* inside, misaligned */
    refused++;
    CHECK_EQ(sdd_pool_put(p, (unsigned char *)b + 100), SDD_EINVAL); /* inside the padding */
    refused++;
    CHECK_EQ(sdd_pool_put(p, base + sdd_pool_region_size(p)), SDD_EINVAL); /* one past end */
    refused++;
    CHECK_EQ(sdd_pool_put(p, (void *)((uintptr_t)base - 64)), SDD_EINVAL); /* before the region */
    refused++;
    CHECK_EQ(sdd_pool_put(p, sdd_pool_at(p, 3)), SDD_EINVAL); /* still in the pool: double */
    refused++;
    CHECK_EQ(sdd_pool_bad_puts(p), refused);
    CHECK_EQ(sdd_pool_available(p), 7); /* nothing slipped in */

    CHECK_EQ(sdd_pool_index(p, &on_stack), SDD_EINVAL);
    CHECK_EQ(sdd_pool_index(p, base + 1), SDD_EINVAL);
    CHECK_EQ(sdd_pool_index(p, NULL), SDD_EINVAL);
    CHECK_EQ(sdd_pool_bad_puts(p), refused); /* index neither logs nor counts */

    /* A genuine put works once, the second one is a double put. */
    CHECK_OK(sdd_pool_put(p, b));
    CHECK_EQ(sdd_pool_put(p, b), SDD_EINVAL);
    refused++;

    /* A burst with bad entries mixed in keeps the good ones only. */
    void *mix[6];
    CHECK_EQ(sdd_pool_get_burst(p, mix, 2), 2);
    void *burst[6] = {mix[0], &on_stack, mix[1], mix[1], NULL, foreign_heap};
    CHECK_EQ(sdd_pool_put_burst(p, burst, 6), 2);
    refused += 4;
    CHECK_EQ(sdd_pool_bad_puts(p), refused);
    CHECK_EQ(sdd_pool_available(p), 8);

    /* The pool is intact: exactly the 8 distinct buffers come out. */
    CHECK_EQ(drain_and_check(p, 64), 8);
    free(foreign_heap);
    sdd_pool_destroy(p);
}

static void test_create_from_caller_memory(void)
{
    size_t mem_size = 10000;
    unsigned char *mem = malloc(mem_size + 64);
    CHECK_REQUIRE(mem != NULL);
    /* Start at an odd address so the pool has to align inside the block. */
    unsigned char *start = mem + 3;
    sdd_pool *p;
    CHECK_OK(sdd_pool_create_from(start, mem_size, 256, 64, &p));
    uintptr_t base = (uintptr_t)sdd_pool_base(p);
    CHECK_EQ(base % 64, 0);
    CHECK(base >= (uintptr_t)start && base - (uintptr_t)start < 64);
    size_t expect = (mem_size - (size_t)(base - (uintptr_t)start)) / 256;
    CHECK_EQ(sdd_pool_count(p), expect);
    CHECK(base + sdd_pool_region_size(p) <= (uintptr_t)start + mem_size);
    drain_and_check(p, 64);
    sdd_pool_destroy(p); /* must not free mem: the free() below would then be a double free */

    sdd_pool *sentinel = (sdd_pool *)(uintptr_t)0x1;
    p = sentinel;
    CHECK_EQ(sdd_pool_create_from(NULL, 4096, 64, 0, &p), SDD_EINVAL);
    CHECK_EQ(sdd_pool_create_from(start, 4096, 0, 0, &p), SDD_EINVAL);
    CHECK_EQ(sdd_pool_create_from(start, 4096, 64, 3, &p), SDD_EINVAL);
    CHECK_EQ(sdd_pool_create_from(start, 100, 256, 64, &p), SDD_EINVAL); /* too small */
    CHECK_EQ(sdd_pool_create_from(start, 0, 64, 64, &p), SDD_EINVAL);
    CHECK_EQ(sdd_pool_create_from(start, 4096, 64, 0, NULL), SDD_EINVAL);
    CHECK(p == sentinel);

    /* The memory is reusable by the caller after destroy. */
    memset(mem, 0, mem_size + 64);
    free(mem);
}

/* ---- Threaded stress ----------------------------------------------------------------------- */

#define STRESS_THREADS 3
#define STRESS_ROUNDS  60000
#define STRESS_BUF     64

struct stress_arg {
    sdd_pool *p;
    int id;
    uint64_t clobbered; /* buffers whose contents changed while we held them */
    uint64_t put_errors;
    uint64_t taken;
};

/* Fill a held buffer with a thread-and-round pattern, yield, and check it is unchanged: a
 * buffer given to two threads at once shows up as a clobbered pattern. */
static void *stress_worker(void *varg)
{
    struct stress_arg *a = varg;
    void *held[16];
    for (uint32_t round = 0; round < STRESS_ROUNDS; round++) {
        unsigned want = 1 + round % 16;
        unsigned got = round & 1 ? sdd_pool_get_burst(a->p, held, want) : 0;
        if (!(round & 1)) {
            held[0] = sdd_pool_get(a->p);
            got = held[0] != NULL;
        }
        a->taken += got;
        uint32_t tag = ((uint32_t)a->id << 24) ^ round;
        for (unsigned i = 0; i < got; i++) {
            uint32_t *w = held[i];
            for (unsigned j = 0; j < STRESS_BUF / 4; j++) {
                w[j] = tag + j;
            }
        }
        if ((round & 63) == 0) {
            sched_yield();
        }
        for (unsigned i = 0; i < got; i++) {
            const uint32_t *w = held[i];
            for (unsigned j = 0; j < STRESS_BUF / 4; j++) {
                if (w[j] != tag + j) {
                    a->clobbered++;
                    break;
                }
            }
        }
        if (round & 2) {
            a->put_errors += got - sdd_pool_put_burst(a->p, held, got);
        } else {
            for (unsigned i = 0; i < got; i++) {
                a->put_errors += sdd_pool_put(a->p, held[i]) != SDD_OK;
            }
        }
    }
    return NULL;
}

static void test_threaded_get_put(void)
{
    sdd_pool *p;
    /* Fewer buffers than threads can hold at once, so the pool runs empty often. */
    CHECK_OK(sdd_pool_create(STRESS_BUF, 24, 0, &p));
    struct stress_arg args[STRESS_THREADS];
    pthread_t tids[STRESS_THREADS];
    for (int i = 0; i < STRESS_THREADS; i++) {
        args[i] = (struct stress_arg){.p = p, .id = i};
        CHECK_REQUIRE(pthread_create(&tids[i], NULL, stress_worker, &args[i]) == 0);
    }
    uint64_t taken = 0;
    for (int i = 0; i < STRESS_THREADS; i++) {
        pthread_join(tids[i], NULL);
        CHECK_EQ(args[i].clobbered, 0);
        CHECK_EQ(args[i].put_errors, 0);
        taken += args[i].taken;
    }
    CHECK(taken > STRESS_ROUNDS); /* the threads really got buffers */
    CHECK_EQ(sdd_pool_bad_puts(p), 0);
    CHECK_EQ(sdd_pool_available(p), 24);
    CHECK_EQ(drain_and_check(p, 64), 24);
    sdd_pool_destroy(p);
}

int main(void)
{
    /* Refused puts log one warning per pool by design; keep the test output readable. */
    sdd_log_configure("core=error");
    test_create_geometry();
    test_exhaust_refill_bursts();
    test_refuses_bad_pointers();
    test_create_from_caller_memory();
    test_threaded_get_put();
    return check_finish();
}
