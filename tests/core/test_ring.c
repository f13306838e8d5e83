/* Rings: creation limits, full and empty edges, index wrap over many laps, partial bursts, and
 * threaded stress: SPSC keeps FIFO order, MPMC (2 producers, 2 consumers) delivers every token
 * exactly once and keeps each producer's order as seen by each consumer. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "sddaq/clock.h"
#include "sddaq/ring.h"

#define TOKEN(i) ((void *)(uintptr_t)(i))
#define VALUE(p) ((uintptr_t)(p))

/* Cheap per-thread pseudo-random burst sizes. */
static uint32_t xorshift(uint32_t *s)
{
    uint32_t x = *s;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    return *s = x;
}

/* ---- SPSC, one thread ---------------------------------------------------------------------- */

static void test_spsc_create_limits(void)
{
    sdd_spsc *sentinel = (sdd_spsc *)(uintptr_t)0x1;
    sdd_spsc *r = sentinel;
    CHECK_EQ(sdd_spsc_create(0, &r), SDD_EINVAL);
    CHECK_EQ(sdd_spsc_create((size_t)SDD_RING_MAX_CAPACITY + 1, &r), SDD_EINVAL);
    CHECK_EQ(sdd_spsc_create(SIZE_MAX, &r), SDD_EINVAL);
    CHECK_EQ(sdd_spsc_create(8, NULL), SDD_EINVAL);
    CHECK(r == sentinel); /* out untouched on failure */

    CHECK_OK(sdd_spsc_create(1, &r));
    CHECK_EQ(sdd_spsc_capacity(r), 1);
    CHECK_OK(sdd_spsc_enqueue(r, TOKEN(7)));
    CHECK_EQ(sdd_spsc_enqueue(r, TOKEN(8)), SDD_EAGAIN);
    void *o = NULL;
    CHECK_OK(sdd_spsc_dequeue(r, &o));
    CHECK_EQ(VALUE(o), 7);
    sdd_spsc_destroy(r);

    CHECK_OK(sdd_spsc_create(5, &r));
    CHECK_EQ(sdd_spsc_capacity(r), 8);
    sdd_spsc_destroy(r);
    CHECK_OK(sdd_spsc_create(64, &r));
    CHECK_EQ(sdd_spsc_capacity(r), 64);
    sdd_spsc_destroy(r);
    sdd_spsc_destroy(NULL);
}

static void test_spsc_edges(void)
{
    sdd_spsc *r;
    CHECK_OK(sdd_spsc_create(8, &r));
    void *o = TOKEN(0xdead);
    CHECK_EQ(sdd_spsc_dequeue(r, &o), SDD_EAGAIN);
    CHECK_EQ(VALUE(o), 0xdead); /* not written when empty */
    CHECK_EQ(sdd_spsc_count(r), 0);
    for (uintptr_t i = 1; i <= 8; i++) {
        CHECK_OK(sdd_spsc_enqueue(r, TOKEN(i)));
    }
    CHECK_EQ(sdd_spsc_count(r), 8);
    CHECK_EQ(sdd_spsc_enqueue(r, TOKEN(9)), SDD_EAGAIN);
    for (uintptr_t i = 1; i <= 8; i++) {
        CHECK_OK(sdd_spsc_dequeue(r, &o));
        CHECK_EQ(VALUE(o), i);
    }
    CHECK_EQ(sdd_spsc_dequeue(r, &o), SDD_EAGAIN);
    CHECK_EQ(sdd_spsc_count(r), 0);
    /* NULL is an ordinary value. */
    CHECK_OK(sdd_spsc_enqueue(r, NULL));
    o = TOKEN(1);
    CHECK_OK(sdd_spsc_dequeue(r, &o));
    CHECK(o == NULL);
    /* Zero-length bursts. */
    CHECK_EQ(sdd_spsc_enqueue_burst(r, NULL, 0), 0);
    CHECK_EQ(sdd_spsc_dequeue_burst(r, NULL, 0), 0);
    sdd_spsc_destroy(r);
}

static void test_spsc_bursts_and_wrap(void)
{
    sdd_spsc *r;
    CHECK_OK(sdd_spsc_create(8, &r));
    void *in[16];
    void *out[16];
    uintptr_t next_in = 1;
    uintptr_t next_out = 1;
    int order_errors = 0;

    /* Partial enqueue: 12 offered, 8 fit. */
    for (int i = 0; i < 12; i++) {
        in[i] = TOKEN(next_in + (uintptr_t)i);
    }
    CHECK_EQ(sdd_spsc_enqueue_burst(r, in, 12), 8);
    next_in += 8;
    CHECK_EQ(sdd_spsc_enqueue_burst(r, in, 3), 0);
    /* Partial dequeue: 16 asked, 8 there; the rest of out[] untouched. */
    out[8] = TOKEN(0xbeef);
    CHECK_EQ(sdd_spsc_dequeue_burst(r, out, 16), 8);
    CHECK_EQ(VALUE(out[8]), 0xbeef);
    for (int i = 0; i < 8; i++) {
        order_errors += VALUE(out[i]) != next_out++;
    }

    /* Many laps with odd burst sizes: indices wrap past the capacity thousands of times. */
    uint32_t seed = 12345;
    for (int round = 0; round < 20000; round++) {
        unsigned n = xorshift(&seed) % 11;
        for (unsigned i = 0; i < n; i++) {
            in[i] = TOKEN(next_in + i);
        }
        unsigned done = sdd_spsc_enqueue_burst(r, in, n);
        CHECK(done <= n);
        next_in += done;
        CHECK(sdd_spsc_count(r) == (unsigned)(next_in - next_out));
        unsigned m = xorshift(&seed) % 11;
        unsigned got = sdd_spsc_dequeue_burst(r, out, m);
        for (unsigned i = 0; i < got; i++) {
            order_errors += VALUE(out[i]) != next_out++;
        }
    }
    unsigned got;
    while ((got = sdd_spsc_dequeue_burst(r, out, 16)) > 0) {
        for (unsigned i = 0; i < got; i++) {
            order_errors += VALUE(out[i]) != next_out++;
        }
    }
    CHECK_EQ(order_errors, 0);
    CHECK_EQ(next_out, next_in);
    CHECK(next_in > 8 * 1000); /* really went around many times */
    sdd_spsc_destroy(r);
}

/* ---- MPMC, one thread ---------------------------------------------------------------------- */

static void test_mpmc_create_limits(void)
{
    sdd_mpmc *sentinel = (sdd_mpmc *)(uintptr_t)0x1;
    sdd_mpmc *r = sentinel;
    CHECK_EQ(sdd_mpmc_create(0, &r), SDD_EINVAL);
    CHECK_EQ(sdd_mpmc_create((size_t)SDD_RING_MAX_CAPACITY + 1, &r), SDD_EINVAL);
    CHECK_EQ(sdd_mpmc_create(SIZE_MAX, &r), SDD_EINVAL);
    CHECK_EQ(sdd_mpmc_create(8, NULL), SDD_EINVAL);
    CHECK(r == sentinel);

    /* Capacity 1 becomes 2, and both slots are usable without overwriting. */
    CHECK_OK(sdd_mpmc_create(1, &r));
    CHECK_EQ(sdd_mpmc_capacity(r), 2);
    CHECK_OK(sdd_mpmc_enqueue(r, TOKEN(1)));
    CHECK_OK(sdd_mpmc_enqueue(r, TOKEN(2)));
    CHECK_EQ(sdd_mpmc_enqueue(r, TOKEN(3)), SDD_EAGAIN);
    void *o = NULL;
    CHECK_OK(sdd_mpmc_dequeue(r, &o));
    CHECK_EQ(VALUE(o), 1);
    CHECK_OK(sdd_mpmc_dequeue(r, &o));
    CHECK_EQ(VALUE(o), 2);
    CHECK_EQ(sdd_mpmc_dequeue(r, &o), SDD_EAGAIN);
    sdd_mpmc_destroy(r);

    CHECK_OK(sdd_mpmc_create(100, &r));
    CHECK_EQ(sdd_mpmc_capacity(r), 128);
    sdd_mpmc_destroy(r);
    sdd_mpmc_destroy(NULL);
}

static void test_mpmc_edges_bursts_wrap(void)
{
    sdd_mpmc *r;
    CHECK_OK(sdd_mpmc_create(8, &r));
    void *o = TOKEN(0xdead);
    CHECK_EQ(sdd_mpmc_dequeue(r, &o), SDD_EAGAIN);
    CHECK_EQ(VALUE(o), 0xdead);
    CHECK_EQ(sdd_mpmc_count(r), 0);
    CHECK_EQ(sdd_mpmc_enqueue_burst(r, NULL, 0), 0);
    CHECK_EQ(sdd_mpmc_dequeue_burst(r, NULL, 0), 0);

    void *in[16];
    void *out[16];
    uintptr_t next_in = 1;
    uintptr_t next_out = 1;
    int order_errors = 0;
    for (int i = 0; i < 12; i++) {
        in[i] = TOKEN(next_in + (uintptr_t)i);
    }
    CHECK_EQ(sdd_mpmc_enqueue_burst(r, in, 12), 8); /* partial */
    next_in += 8;
    CHECK_EQ(sdd_mpmc_count(r), 8);
    CHECK_EQ(sdd_mpmc_enqueue(r, TOKEN(99)), SDD_EAGAIN);
    CHECK_EQ(sdd_mpmc_dequeue_burst(r, out, 3), 3);
    for (int i = 0; i < 3; i++) {
        order_errors += VALUE(out[i]) != next_out++;
    }
    out[5] = TOKEN(0xbeef);
    CHECK_EQ(sdd_mpmc_dequeue_burst(r, out, 16), 5); /* partial */
    CHECK_EQ(VALUE(out[5]), 0xbeef);
    for (int i = 0; i < 5; i++) {
        order_errors += VALUE(out[i]) != next_out++;
    }

    uint32_t seed = 777;
    for (int round = 0; round < 20000; round++) {
        unsigned n = xorshift(&seed) % 11;
        for (unsigned i = 0; i < n; i++) {
            in[i] = TOKEN(next_in + i);
        }
        unsigned done = sdd_mpmc_enqueue_burst(r, in, n);
        CHECK(done <= n);
        next_in += done;
        CHECK(sdd_mpmc_count(r) == (unsigned)(next_in - next_out));
        unsigned got = sdd_mpmc_dequeue_burst(r, out, xorshift(&seed) % 11);
        for (unsigned i = 0; i < got; i++) {
            order_errors += VALUE(out[i]) != next_out++;
        }
    }
    unsigned got;
    while ((got = sdd_mpmc_dequeue_burst(r, out, 16)) > 0) {
        for (unsigned i = 0; i < got; i++) {
            order_errors += VALUE(out[i]) != next_out++;
        }
    }
    CHECK_EQ(order_errors, 0);
    CHECK_EQ(next_out, next_in);
    CHECK(next_in > 8 * 1000);
    sdd_mpmc_destroy(r);
}

/* ---- Threaded stress ----------------------------------------------------------------------- */

#define STRESS_TOKENS 2000000u

/* A lost token would make the stress loops wait forever; they give up at this deadline and
 * the missing tokens then fail the checks. */
#define STRESS_LIMIT_NS (30 * SDD_NS_PER_S)
static uint64_t g_deadline;

/* Back off after repeated failures so that spinning threads do not starve their peers on a
 * machine with fewer cores than threads. Returns false once the deadline has passed. */
static bool backoff(unsigned *fails)
{
    if (++*fails >= 8) {
        sched_yield();
        *fails = 0;
        return sdd_now_ns() < g_deadline;
    }
    return true;
}

/* Producers alternate between full speed (the ring runs full) and a short pause after every
 * burst (the ring runs nearly empty, so consumers read slots right after they are published:
 * the moment a missing write-then-commit order would show). */
static void pace(uintptr_t next)
{
    if ((next >> 16) & 1) {
        uint64_t until = sdd_now_ns() + 300;
        while (sdd_now_ns() < until) {
        }
    }
}

struct spsc_stress {
    sdd_spsc *r;
    uintptr_t n;
};

static void *spsc_producer(void *arg)
{
    struct spsc_stress *st = arg;
    uint32_t seed = 99;
    void *batch[32];
    uintptr_t next = 1;
    unsigned fails = 0;
    while (next <= st->n) {
        unsigned want = 1 + xorshift(&seed) % 32;
        if (want > st->n - next + 1) {
            want = (unsigned)(st->n - next + 1);
        }
        for (unsigned i = 0; i < want; i++) {
            batch[i] = TOKEN(next + i);
        }
        unsigned done = sdd_spsc_enqueue_burst(st->r, batch, want);
        next += done;
        if (done == 0 && !backoff(&fails)) {
            break;
        }
        pace(next);
    }
    return NULL;
}

static void test_spsc_threaded_fifo(void)
{
    struct spsc_stress st = {.n = STRESS_TOKENS};
    g_deadline = sdd_now_ns() + STRESS_LIMIT_NS;
    CHECK_OK(sdd_spsc_create(64, &st.r));
    pthread_t tid;
    CHECK_REQUIRE(pthread_create(&tid, NULL, spsc_producer, &st) == 0);
    uint32_t seed = 4242;
    void *batch[32];
    uintptr_t expect = 1;
    uintptr_t order_errors = 0;
    unsigned fails = 0;
    while (expect <= st.n) {
        unsigned got = sdd_spsc_dequeue_burst(st.r, batch, 1 + xorshift(&seed) % 32);
        for (unsigned i = 0; i < got; i++) {
            if (VALUE(batch[i]) != expect) {
                order_errors++;
                expect = VALUE(batch[i]); /* resynchronise; count each break once */
            }
            expect++;
        }
        if (got == 0 && !backoff(&fails)) {
            break;
        }
    }
    pthread_join(tid, NULL);
    CHECK_EQ(order_errors, 0);
    CHECK_EQ(expect, st.n + 1);
    CHECK_EQ(sdd_spsc_count(st.r), 0);
    sdd_spsc_destroy(st.r);
}

#define MP_PRODUCERS 2
#define MP_CONSUMERS 2

struct mpmc_stress {
    sdd_mpmc *r;
    uint32_t per_producer;
    _Atomic uint32_t consumed;
};

struct mpmc_worker {
    struct mpmc_stress *st;
    int id;
    uint8_t *seen;               /* consumers: times each token arrived here */
    uint32_t last[MP_PRODUCERS]; /* consumers: last sequence number seen per producer */
    uint64_t order_errors;
    uint64_t bad_tokens;
};

/* Token = producer id in the top bits, 1-based sequence number below. */
#define TOKEN_SHIFT 28

static void *mpmc_producer(void *arg)
{
    struct mpmc_worker *w = arg;
    struct mpmc_stress *st = w->st;
    uint32_t seed = 1000u + (uint32_t)w->id;
    void *batch[32];
    uint32_t next = 1;
    unsigned fails = 0;
    while (next <= st->per_producer) {
        /* Producer 0 enqueues one at a time, producer 1 in random bursts. */
        unsigned want = w->id == 0 ? 1 : 1 + xorshift(&seed) % 32;
        if (want > st->per_producer - next + 1) {
            want = st->per_producer - next + 1;
        }
        for (unsigned i = 0; i < want; i++) {
            batch[i] = TOKEN(((uintptr_t)(w->id + 1) << TOKEN_SHIFT) | (next + i));
        }
        unsigned done = sdd_mpmc_enqueue_burst(st->r, batch, want);
        next += done;
        if (done == 0 && !backoff(&fails)) {
            break;
        }
        pace(next);
    }
    return NULL;
}

static void *mpmc_consumer(void *arg)
{
    struct mpmc_worker *w = arg;
    struct mpmc_stress *st = w->st;
    uint32_t total = st->per_producer * MP_PRODUCERS;
    uint32_t seed = 2000u + (uint32_t)w->id;
    void *batch[32];
    unsigned fails = 0;
    while (atomic_load_explicit(&st->consumed, memory_order_relaxed) < total) {
        unsigned want = w->id == 0 ? 1 : 1 + xorshift(&seed) % 32;
        unsigned got = sdd_mpmc_dequeue_burst(st->r, batch, want);
        if (got == 0) {
            if (!backoff(&fails)) {
                break;
            }
            continue;
        }
        for (unsigned i = 0; i < got; i++) {
            uintptr_t v = VALUE(batch[i]);
            uintptr_t prod = (v >> TOKEN_SHIFT) - 1;
            uint32_t seq = (uint32_t)(v & ((1u << TOKEN_SHIFT) - 1));
            if (prod >= MP_PRODUCERS || seq == 0 || seq > st->per_producer) {
                w->bad_tokens++; /* garbage from an unwritten slot would land here */
                continue;
            }
            if (seq <= w->last[prod]) {
                w->order_errors++;
            }
            w->last[prod] = seq;
            uint8_t *count = &w->seen[prod * st->per_producer + (seq - 1)];
            if (*count < 255) {
                (*count)++;
            }
        }
        atomic_fetch_add_explicit(&st->consumed, got, memory_order_relaxed);
    }
    return NULL;
}

static void test_mpmc_threaded_exactly_once(void)
{
    struct mpmc_stress st = {.per_producer = STRESS_TOKENS / MP_PRODUCERS};
    atomic_init(&st.consumed, 0);
    g_deadline = sdd_now_ns() + STRESS_LIMIT_NS;
    CHECK_OK(sdd_mpmc_create(256, &st.r));
    uint32_t total = st.per_producer * MP_PRODUCERS;
    struct mpmc_worker prod[MP_PRODUCERS];
    struct mpmc_worker cons[MP_CONSUMERS];
    pthread_t tids[MP_PRODUCERS + MP_CONSUMERS];
    memset(prod, 0, sizeof(prod));
    memset(cons, 0, sizeof(cons));
    for (int i = 0; i < MP_CONSUMERS; i++) {
        cons[i].st = &st;
        cons[i].id = i;
        cons[i].seen = calloc(total, 1);
        CHECK_REQUIRE(cons[i].seen != NULL);
        CHECK_REQUIRE(pthread_create(&tids[MP_PRODUCERS + i], NULL, mpmc_consumer, &cons[i]) == 0);
    }
    for (int i = 0; i < MP_PRODUCERS; i++) {
        prod[i].st = &st;
        prod[i].id = i;
        CHECK_REQUIRE(pthread_create(&tids[i], NULL, mpmc_producer, &prod[i]) == 0);
    }
    for (int i = 0; i < MP_PRODUCERS + MP_CONSUMERS; i++) {
        pthread_join(tids[i], NULL);
    }

    uint64_t missing = 0;
    uint64_t duplicated = 0;
    for (uint32_t t = 0; t < total; t++) {
        unsigned n = 0;
        for (int c = 0; c < MP_CONSUMERS; c++) {
            n += cons[c].seen[t];
        }
        missing += n == 0;
        duplicated += n > 1;
    }
    CHECK_EQ(missing, 0);
    CHECK_EQ(duplicated, 0);
    for (int c = 0; c < MP_CONSUMERS; c++) {
        CHECK_EQ(cons[c].bad_tokens, 0);
        CHECK_EQ(cons[c].order_errors, 0);
        free(cons[c].seen);
    }
    CHECK_EQ(atomic_load(&st.consumed), total);
    CHECK_EQ(sdd_mpmc_count(st.r), 0);
    void *o;
    CHECK_EQ(sdd_mpmc_dequeue(st.r, &o), SDD_EAGAIN);
    sdd_mpmc_destroy(st.r);
}

int main(void)
{
    test_spsc_create_limits();
    test_spsc_edges();
    test_spsc_bursts_and_wrap();
    test_mpmc_create_limits();
    test_mpmc_edges_bursts_wrap();
    test_spsc_threaded_fifo();
    test_mpmc_threaded_exactly_once();
    return check_finish();
}
