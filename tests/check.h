/* Minimal test harness: CHECK macros count failures without stopping, CHECK_REQUIRE stops the
 * test, and check_finish() prints the closing "N passed, N failed" line and the exit code. */
#ifndef SDDAQ_TEST_CHECK_H
#define SDDAQ_TEST_CHECK_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "sddaq/err.h"

#define CHECK_SKIP 77

static int check_passed;
static int check_failed;

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (cond) {                                                                  \
            check_passed++;                                                          \
        } else {                                                                     \
            check_failed++;                                                          \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                            \
    } while (0)

#define CHECK_EQ(a, b)                                                                    \
    do {                                                                                  \
        long long check_a_ = (long long)(a), check_b_ = (long long)(b);                   \
        if (check_a_ == check_b_) {                                                       \
            check_passed++;                                                               \
        } else {                                                                          \
            check_failed++;                                                               \
            fprintf(stderr, "%s:%d: CHECK_EQ failed: %s == %lld, %s == %lld\n", __FILE__, \
                    __LINE__, #a, check_a_, #b, check_b_);                                \
        }                                                                                 \
    } while (0)

/* An sdd_err-returning call that must succeed. */
#define CHECK_OK(call)                                                                \
    do {                                                                              \
        sdd_err check_e_ = (call);                                                    \
        if (check_e_ == 0) {                                                          \
            check_passed++;                                                           \
        } else {                                                                      \
            check_failed++;                                                           \
            fprintf(stderr, "%s:%d: %s failed: %s (%s)\n", __FILE__, __LINE__, #call, \
                    sdd_errname(check_e_), sdd_strerror(check_e_));                   \
        }                                                                             \
    } while (0)

/* Stop the whole test program when a precondition fails: later checks would be noise. */
#define CHECK_REQUIRE(cond)                                                            \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            fprintf(stderr, "%s:%d: REQUIRE failed: %s\n", __FILE__, __LINE__, #cond); \
            check_failed++;                                                            \
            exit(check_finish());                                                      \
        }                                                                              \
        check_passed++;                                                                \
    } while (0)

static inline int check_finish(void)
{
    printf("%d passed, %d failed\n", check_passed, check_failed);
    fflush(stdout);
    return check_failed == 0 ? 0 : 1;
}

static inline int check_skip(const char *why)
{
    printf("skipped: %s\n", why);
    fflush(stdout);
    return CHECK_SKIP;
}

/* xorshift64: a fast, reproducible pseudo-random sequence for tests (state must not be 0). */
static inline uint64_t check_rand(uint64_t *state)
{
    uint64_t x = *state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *state = x;
}

#endif
