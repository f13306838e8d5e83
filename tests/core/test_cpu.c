/* CPU helpers: list parsing (valid forms, every malformed form refused, random bytes never
 * crash), CPU counting against the affinity mask, pinning the caller and another thread to
 * CPU 0, and refusal of out-of-range CPUs. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "sddaq/cpu.h"
#include "sddaq/log.h"

static void test_parse_valid(void)
{
    int cpus[16];
    CHECK_EQ(sdd_cpu_parse_list("0,2-3", cpus, 16), 3);
    CHECK_EQ(cpus[0], 0);
    CHECK_EQ(cpus[1], 2);
    CHECK_EQ(cpus[2], 3);

    CHECK_EQ(sdd_cpu_parse_list("5", cpus, 16), 1);
    CHECK_EQ(cpus[0], 5);
    CHECK_EQ(sdd_cpu_parse_list("7-7", cpus, 16), 1);
    CHECK_EQ(cpus[0], 7);
    CHECK_EQ(sdd_cpu_parse_list(" 4 , 1 - 2 ,0\n", cpus, 16), 4); /* blanks, listed order */
    CHECK_EQ(cpus[0], 4);
    CHECK_EQ(cpus[1], 1);
    CHECK_EQ(cpus[2], 2);
    CHECK_EQ(cpus[3], 0);
    CHECK_EQ(sdd_cpu_parse_list("0-15", cpus, 16), 16);
    CHECK_EQ(cpus[15], 15);
    CHECK_EQ(sdd_cpu_parse_list("65535", cpus, 16), 1);
    CHECK_EQ(cpus[0], 65535);
    CHECK_EQ(sdd_cpu_parse_list("007", cpus, 16), 1);
    CHECK_EQ(cpus[0], 7);
}

static void test_parse_invalid(void)
{
    static const char *const bad[] = {
        "",        " ",   ",",     "1,",    ",1",   "1,,2",   "a",
        "1a",      "1-",  "-1",    "3-1",   "1--2", "1-2-3",  "0x1",
        "+1",      "1.5", "1 2",   "1;2",   "1-a",  "65536",  "99999999999999999999999999",
        "0-65536", "1,1", "0-3,2", "2,0-3", "\xff", "1\t,\t", "1,\n",
    };
    int cpus[64];
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int rc = sdd_cpu_parse_list(bad[i], cpus, 64);
        if (rc != SDD_EINVAL) {
            fprintf(stderr, "cpu list \"%s\": got %d, want SDD_EINVAL\n", bad[i], rc);
        }
        CHECK_EQ(rc, SDD_EINVAL);
    }
    CHECK_EQ(sdd_cpu_parse_list(NULL, cpus, 64), SDD_EINVAL);
    CHECK_EQ(sdd_cpu_parse_list("1", NULL, 4), SDD_EINVAL);
    CHECK_EQ(sdd_cpu_parse_list("1", cpus, -1), SDD_EINVAL);

    /* Valid but too many for the array: reported as such, quickly even for huge ranges. */
    CHECK_EQ(sdd_cpu_parse_list("0-9", cpus, 4), SDD_ETOOBIG);
    CHECK_EQ(sdd_cpu_parse_list("0-65535", cpus, 4), SDD_ETOOBIG);
    CHECK_EQ(sdd_cpu_parse_list("1", NULL, 0), SDD_ETOOBIG);
    /* A malformed tail wins over size. */
    CHECK_EQ(sdd_cpu_parse_list("0-9,x", cpus, 4), SDD_EINVAL);
}

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Random strings, mostly from the list alphabet: never a crash, and every success is a list
 * of distinct, in-range CPUs. */
static void test_parse_random(void)
{
    static const char alphabet[] = "0123456789,- \t9x\xff";
    uint64_t seed = 3;
    int cpus[32];
    int bad = 0;
    int successes = 0;
    for (int iter = 0; iter < 50000; iter++) {
        char s[24];
        size_t len = splitmix(&seed) % sizeof(s);
        for (size_t i = 0; i < len; i++) {
            uint64_t r = splitmix(&seed);
            s[i] = r % 8 == 0 ? (char)(r >> 8) : alphabet[(r >> 8) % (sizeof(alphabet) - 1)];
            if (s[i] == '\0') {
                s[i] = '1';
            }
        }
        s[len] = '\0';
        int rc = sdd_cpu_parse_list(s, cpus, 32);
        if (rc >= 0) {
            successes++;
            bad += rc == 0;
            for (int i = 0; i < rc; i++) {
                bad += cpus[i] < 0 || cpus[i] >= SDD_CPU_ID_LIMIT;
                for (int j = 0; j < i; j++) {
                    bad += cpus[i] == cpus[j];
                }
            }
        } else {
            bad += rc != SDD_EINVAL && rc != SDD_ETOOBIG;
        }
    }
    CHECK_EQ(bad, 0);
    CHECK(successes > 0);
}

static bool cpu0_allowed(void)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    return sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_ISSET(0, &set);
}

static void test_count(void)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CHECK_REQUIRE(sched_getaffinity(0, sizeof(set), &set) == 0);
    CHECK_EQ(sdd_cpu_count(), CPU_COUNT(&set));
    CHECK(sdd_cpu_count() >= 1);
    int cur = sdd_cpu_current();
    CHECK(cur >= 0 && CPU_ISSET(cur, &set));
}

struct pin_probe {
    _Atomic int pinned; /* set by the main thread after sdd_cpu_pin_thread */
    int cpu;            /* where the thread then found itself */
};

static void *pinned_thread(void *arg)
{
    struct pin_probe *probe = arg;
    /* Acquire pairs with the release store in test_pin: the pin has happened. */
    while (atomic_load_explicit(&probe->pinned, memory_order_acquire) == 0) {
        sched_yield();
    }
    probe->cpu = sdd_cpu_current();
    return NULL;
}

static void test_pin(void)
{
    /* Out of range: refused before any system call. */
    CHECK_EQ(sdd_cpu_pin_self(-1), SDD_EINVAL);
    CHECK_EQ(sdd_cpu_pin_self(SDD_CPU_ID_LIMIT), SDD_EINVAL);
    CHECK_EQ(sdd_cpu_pin_self(1 << 30), SDD_EINVAL);
    CHECK_EQ(sdd_cpu_pin_thread(pthread_self(), -5), SDD_EINVAL);

    if (!cpu0_allowed()) {
        printf("cpu 0 not in this process's affinity mask: pin checks skipped\n");
        return;
    }
    cpu_set_t saved;
    CHECK_REQUIRE(pthread_getaffinity_np(pthread_self(), sizeof(saved), &saved) == 0);

    CHECK_OK(sdd_cpu_pin_self(0));
    CHECK_EQ(sdd_cpu_current(), 0);
    cpu_set_t now;
    CHECK_REQUIRE(pthread_getaffinity_np(pthread_self(), sizeof(now), &now) == 0);
    CHECK_EQ(CPU_COUNT(&now), 1);
    CHECK(CPU_ISSET(0, &now));

    struct pin_probe probe = {.cpu = -1};
    atomic_init(&probe.pinned, 0);
    pthread_t tid;
    CHECK_REQUIRE(pthread_create(&tid, NULL, pinned_thread, &probe) == 0);
    CHECK_OK(sdd_cpu_pin_thread(tid, 0));
    atomic_store_explicit(&probe.pinned, 1, memory_order_release);
    pthread_join(tid, NULL);
    CHECK_EQ(probe.cpu, 0);

    CHECK_REQUIRE(pthread_setaffinity_np(pthread_self(), sizeof(saved), &saved) == 0);
}

int main(void)
{
    /* Refused lists and CPUs are logged as warnings by design; keep the output short. */
    sdd_log_configure("core=error");
    test_parse_valid();
    test_parse_invalid();
    test_parse_random();
    test_count();
    test_pin();
    return check_finish();
}
