/* Wake-ups between threads (src/core/notify.h): a wake ends a waiter's sleep long before its
 * timeout, several waiters are counted (a wake-up for one leaves the others asleep), a
 * waker with nobody announced makes no call and changes nothing, and a waiter that finds
 * work after announcing withdraws. The timeouts here are 20 s, so only a wake-up that never
 * came could make a wait last seconds. */
#include <pthread.h>
#include <stdatomic.h>

#include "check.h"
#include "core/notify.h"
#include "sddaq/clock.h"

#define LONG_WAIT_NS (20 * SDD_NS_PER_S)

struct waiter {
    struct sdd_notify *n;
    _Atomic int *ready;
    uint64_t slept_ns;
};

static void *wait_once(void *arg)
{
    struct waiter *w = arg;
    uint32_t seq = sdd_notify_prepare(w->n);
    atomic_fetch_add(w->ready, 1);
    uint64_t t0 = sdd_now_ns();
    sdd_notify_wait(w->n, seq, LONG_WAIT_NS);
    w->slept_ns = sdd_now_ns() - t0;
    return NULL;
}

static void wait_announced(_Atomic int *ready, int want)
{
    while (atomic_load(ready) < want) {
        sdd_sleep_ns(100 * SDD_NS_PER_US);
    }
    sdd_sleep_ns(100 * SDD_NS_PER_MS); /* let them reach the futex (a wake before is fine) */
}

static void test_one_waiter(void)
{
    struct sdd_notify n;
    sdd_notify_init(&n);
    _Atomic int ready = 0;
    struct waiter w = {.n = &n, .ready = &ready};
    pthread_t t;
    CHECK_REQUIRE(pthread_create(&t, NULL, wait_once, &w) == 0);
    wait_announced(&ready, 1);
    CHECK_EQ(atomic_load(&n.sleeping), 1);
    sdd_notify_wake(&n);
    pthread_join(t, NULL);
    CHECK(w.slept_ns < 5 * SDD_NS_PER_S);
    CHECK_EQ(atomic_load(&n.sleeping), 0);
}

static void test_many_waiters(void)
{
    struct sdd_notify n;
    sdd_notify_init(&n);
    _Atomic int ready = 0;
    struct waiter w[3];
    pthread_t t[3];
    for (int i = 0; i < 3; i++) {
        w[i] = (struct waiter){.n = &n, .ready = &ready};
        CHECK_REQUIRE(pthread_create(&t[i], NULL, wait_once, &w[i]) == 0);
    }
    wait_announced(&ready, 3);
    CHECK_EQ(atomic_load(&n.sleeping), 3);
    sdd_notify_wake(&n); /* wakes one: those asleep already stay counted */
    for (int spins = 0; atomic_load(&n.sleeping) > 2 && spins < 5000; spins++) {
        sdd_sleep_ns(SDD_NS_PER_MS);
    }
    CHECK(atomic_load(&n.sleeping) >= 1); /* 2 unless one had not reached its sleep yet */
    CHECK(atomic_load(&n.sleeping) <= 2);
    sdd_notify_wake_always(&n); /* end of input: every one */
    for (int i = 0; i < 3; i++) {
        pthread_join(t[i], NULL);
        CHECK(w[i].slept_ns < 5 * SDD_NS_PER_S);
    }
    CHECK_EQ(atomic_load(&n.sleeping), 0);
}

static void test_nobody_and_cancel(void)
{
    struct sdd_notify n;
    sdd_notify_init(&n);
    sdd_notify_wake(&n); /* nobody announced: no wake-up counted */
    CHECK_EQ(atomic_load(&n.seq), 0);
    uint32_t seq = sdd_notify_prepare(&n);
    CHECK_EQ(seq, 0);
    CHECK_EQ(atomic_load(&n.sleeping), 1);
    sdd_notify_cancel(&n); /* found work after all */
    CHECK_EQ(atomic_load(&n.sleeping), 0);
    /* A wake-up between the announcement and the sleep: the sleep returns at once. */
    seq = sdd_notify_prepare(&n);
    sdd_notify_wake(&n);
    CHECK_EQ(atomic_load(&n.seq), 1);
    uint64_t t0 = sdd_now_ns();
    sdd_notify_wait(&n, seq, LONG_WAIT_NS);
    CHECK(sdd_now_ns() - t0 < 5 * SDD_NS_PER_S);
}

int main(void)
{
    test_one_waiter();
    test_many_waiters();
    test_nobody_and_cancel();
    return check_finish();
}
