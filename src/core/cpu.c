/* CPU affinity: pinning through pthread_setaffinity_np with dynamically sized CPU sets (so
 * machines with more than CPU_SETSIZE CPUs work), affinity counting, CPU list parsing. */
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "sddaq/cpu.h"
#include "sddaq/log.h"

/* CPUs the system has configured (online or not); the kernel rejects anything above. */
static int configured_cpus(void)
{
    long n = sysconf(_SC_NPROCESSORS_CONF);
    if (n < 1) {
        return 1;
    }
    return n > SDD_CPU_ID_LIMIT ? SDD_CPU_ID_LIMIT : (int)n;
}

sdd_err sdd_cpu_pin_thread(pthread_t thread, int cpu)
{
    if (cpu < 0 || cpu >= configured_cpus()) {
        SDD_WARN("core", "cannot pin thread to cpu %d: this system has cpus 0..%d", cpu,
                 configured_cpus() - 1);
        return SDD_EINVAL;
    }
    cpu_set_t *set = CPU_ALLOC((size_t)cpu + 1);
    if (set == NULL) {
        return SDD_ENOMEM;
    }
    size_t size = CPU_ALLOC_SIZE((size_t)cpu + 1);
    CPU_ZERO_S(size, set);
    CPU_SET_S((size_t)cpu, size, set);
    /* Returns the error number itself; errno is not set. */
    int rc = pthread_setaffinity_np(thread, size, set);
    CPU_FREE(set);
    if (rc != 0) {
        SDD_WARN("core", "pthread_setaffinity_np(cpu %d) failed: %s (errno %d)", cpu, strerror(rc),
                 rc);
        return sdd_err_from_errno(rc);
    }
    return SDD_OK;
}

sdd_err sdd_cpu_pin_self(int cpu)
{
    return sdd_cpu_pin_thread(pthread_self(), cpu);
}

int sdd_cpu_count(void)
{
    /* The kernel refuses masks smaller than its own CPU count (EINVAL): grow until it fits. */
    for (size_t ncpu = CPU_SETSIZE; ncpu <= 8 * (size_t)SDD_CPU_ID_LIMIT; ncpu *= 2) {
        cpu_set_t *set = CPU_ALLOC(ncpu);
        if (set == NULL) {
            break;
        }
        size_t size = CPU_ALLOC_SIZE(ncpu);
        CPU_ZERO_S(size, set);
        int rc = sched_getaffinity(0, size, set);
        int err = errno;
        int n = CPU_COUNT_S(size, set);
        CPU_FREE(set);
        if (rc == 0) {
            return n > 0 ? n : 1;
        }
        if (err != EINVAL) {
            break;
        }
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : (n > INT_MAX ? INT_MAX : (int)n);
}

int sdd_cpu_current(void)
{
    int cpu = sched_getcpu();
    if (cpu < 0) {
        return sdd_err_from_errno(errno);
    }
    return cpu;
}

/* ---- CPU list parsing ---------------------------------------------------------------------- */

struct list_parser {
    const char *p;
    int *cpus;
    int max;
    int count;
    const char *error;
    uint8_t seen[SDD_CPU_ID_LIMIT / 8];
};

static void skip_blanks(struct list_parser *lp)
{
    while (*lp->p == ' ' || *lp->p == '\t' || *lp->p == '\n' || *lp->p == '\r') {
        lp->p++;
    }
}

/* A decimal CPU number below SDD_CPU_ID_LIMIT; no sign, no prefix. */
static bool parse_number(struct list_parser *lp, int *out)
{
    if (*lp->p < '0' || *lp->p > '9') {
        lp->error = "expected a cpu number";
        return false;
    }
    long v = 0;
    while (*lp->p >= '0' && *lp->p <= '9') {
        v = v * 10 + (*lp->p - '0');
        if (v >= SDD_CPU_ID_LIMIT) {
            lp->error = "cpu number too large";
            return false;
        }
        lp->p++;
    }
    *out = (int)v;
    return true;
}

static bool add_cpu(struct list_parser *lp, int cpu)
{
    uint8_t bit = (uint8_t)(1u << (cpu & 7));
    if (lp->seen[cpu >> 3] & bit) {
        lp->error = "cpu listed twice";
        return false;
    }
    lp->seen[cpu >> 3] |= bit;
    if (lp->count < lp->max) {
        lp->cpus[lp->count] = cpu;
    }
    lp->count++;
    return true;
}

static bool parse_item(struct list_parser *lp)
{
    int first;
    int last;
    skip_blanks(lp);
    if (!parse_number(lp, &first)) {
        return false;
    }
    last = first;
    skip_blanks(lp);
    if (*lp->p == '-') {
        lp->p++;
        skip_blanks(lp);
        if (!parse_number(lp, &last)) {
            return false;
        }
        if (last < first) {
            lp->error = "range ends below its start";
            return false;
        }
        skip_blanks(lp);
    }
    /* The bitmap stops a range at its first duplicate, so all ranges together touch each of
     * the SDD_CPU_ID_LIMIT numbers at most once: bounded work on any input. */
    for (int cpu = first; cpu <= last; cpu++) {
        if (!add_cpu(lp, cpu)) {
            return false;
        }
    }
    return true;
}

/* The list for a log line: at most 48 characters, anything unprintable shown as '?'. */
static void quote_list(const char *list, char *out, size_t size)
{
    size_t n = 0;
    for (; list[n] != '\0' && n + 4 < size && n < 48; n++) {
        unsigned char c = (unsigned char)list[n];
        out[n] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
    }
    if (list[n] != '\0') {
        memcpy(out + n, "...", 3);
        n += 3;
    }
    out[n] = '\0';
}

int sdd_cpu_parse_list(const char *list, int *cpus, int max)
{
    char shown[56];
    if (list == NULL || max < 0 || (cpus == NULL && max > 0)) {
        SDD_WARN("core", "cpu list: invalid arguments");
        return SDD_EINVAL;
    }
    struct list_parser lp = {.p = list, .cpus = cpus, .max = max};
    bool ok = parse_item(&lp);
    while (ok && *lp.p == ',') {
        lp.p++;
        ok = parse_item(&lp);
    }
    if (ok && *lp.p != '\0') {
        lp.error = "unexpected character";
        ok = false;
    }
    if (!ok) {
        quote_list(list, shown, sizeof(shown));
        SDD_WARN("core", "cpu list \"%s\": %s at offset %td", shown, lp.error, lp.p - list);
        return SDD_EINVAL;
    }
    if (lp.count > max) {
        quote_list(list, shown, sizeof(shown));
        SDD_WARN("core", "cpu list \"%s\" names %d cpus, room for %d", shown, lp.count, max);
        return SDD_ETOOBIG;
    }
    return lp.count;
}
