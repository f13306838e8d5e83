/* CPU affinity helpers for data-plane threads: pin a thread to one CPU, count the CPUs this
 * process may run on, and parse CPU lists such as "0,2-3" from configuration. Linux only. */
#ifndef SDDAQ_CPU_H
#define SDDAQ_CPU_H

#include <pthread.h>

#include "sddaq/api.h"
#include "sddaq/err.h"

/* In a spin-wait loop: tell the CPU (pause on x86, yield on Arm), so a sibling hyperthread
 * gets the core and leaving the loop costs no memory-order flush. */
static inline void sdd_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield" ::: "memory");
#endif
}

/* Highest CPU number accepted anywhere in this API, plus one. */
#define SDD_CPU_ID_LIMIT 65536

/* Pin the calling thread to CPU `cpu` (its affinity becomes exactly that CPU).
 * Returns SDD_OK; SDD_EINVAL when cpu is negative or not below the number of CPUs the system
 * has configured; otherwise the OS error converted with sdd_err_from_errno() (SDD_EINVAL when
 * the CPU is offline or outside this process's cpuset). Failures are logged as a warning with
 * the original errno. Makes a system call: not for the data path. Never blocks. */
SDD_API sdd_err sdd_cpu_pin_self(int cpu);

/* Pin `thread` (a live thread of this process) to CPU `cpu`. Same checks, return codes and
 * logging as sdd_cpu_pin_self(). Safe from any thread. */
SDD_API sdd_err sdd_cpu_pin_thread(pthread_t thread, int cpu);

/* Number of CPUs this process may run on (its sched_getaffinity mask), at least 1. Falls back
 * to the number of online CPUs if the mask cannot be read. Makes a system call. */
SDD_API int sdd_cpu_count(void);

/* CPU the calling thread is running on right now (may change at any moment unless pinned), or
 * a negative sdd_err when the OS cannot tell. */
SDD_API int sdd_cpu_current(void);

/* Parse a CPU list: comma-separated items, each a decimal CPU number "N" or an inclusive range
 * "N-M" with N <= M; blanks around items are allowed ("0, 2-3"). CPU numbers must be below
 * SDD_CPU_ID_LIMIT and may appear only once.
 * list: NUL-terminated text (not kept).
 * cpus: receives the CPU numbers in the order listed; may be NULL only when max is 0.
 * max:  capacity of cpus.
 * Returns the number of CPUs (>= 1) and fills cpus[0..ret-1]; SDD_EINVAL for NULL, empty or
 * malformed lists, reversed ranges, numbers out of range or duplicates (logged once as a
 * warning naming the offset); SDD_ETOOBIG when a valid list names more than max CPUs. On
 * error the contents of cpus are unspecified. Any input is safe: the parser reads no further
 * than the NUL. Does not allocate; about 8 KiB of stack. */
SDD_API int sdd_cpu_parse_list(const char *list, int *cpus, int max);

#endif
