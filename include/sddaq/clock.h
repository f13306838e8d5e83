/* Monotonic nanosecond clock, the thread CPU clock and short sleeps. */
#ifndef SDDAQ_CLOCK_H
#define SDDAQ_CLOCK_H

#include <stdint.h>
#include <time.h>

#define SDD_NS_PER_US 1000ull
#define SDD_NS_PER_MS 1000000ull
#define SDD_NS_PER_S  1000000000ull

/* Nanoseconds since an arbitrary fixed point (CLOCK_MONOTONIC). Safe from any thread. */
static inline uint64_t sdd_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * SDD_NS_PER_S + (uint64_t)ts.tv_nsec;
}

/* CPU time the calling thread has used, in nanoseconds (CLOCK_THREAD_CPUTIME_ID: a system
 * call on most kernels, so once per thread or per file, not per event). */
static inline uint64_t sdd_thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * SDD_NS_PER_S + (uint64_t)ts.tv_nsec;
}

/* Sleep for at least ns nanoseconds (restarts after signals). */
static inline void sdd_sleep_ns(uint64_t ns)
{
    struct timespec ts = {.tv_sec = (time_t)(ns / SDD_NS_PER_S),
                          .tv_nsec = (long)(ns % SDD_NS_PER_S)};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

#endif
