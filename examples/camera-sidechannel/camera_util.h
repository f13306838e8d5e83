/* Process plumbing shared by the camera side channel and its plain-TCP baseline
 * (bench/bench_tcp_frames.c): a stop flag for signal handlers, number parsing, timer slack. */
#ifndef SDDAQ_EXAMPLE_CAMERA_UTIL_H
#define SDDAQ_EXAMPLE_CAMERA_UTIL_H

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/prctl.h>

static atomic_bool stop_requested; /* set from signal handlers: lock-free, so that is allowed */

static inline void on_stop_signal(int sig)
{
    (void)sig;
    atomic_store_explicit(&stop_requested, true, memory_order_relaxed);
}

/* A number in [lo, hi] with nothing after it. */
static inline bool parse_double(const char *s, double lo, double hi, double *out)
{
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (errno != 0 || end == s || *end != '\0' || !(v >= lo && v <= hi)) {
        return false;
    }
    *out = v;
    return true;
}

/* Both programs sleep in short steps (the camera until its next frame, the clone between
 * header polls); the default 50 us timer slack would stretch each of them. */
static inline void tight_timers(void)
{
    (void)prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
}

static inline double us(uint64_t ns)
{
    return (double)ns / 1e3;
}

#endif
