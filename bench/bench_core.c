/* Core data-path benchmark: ns per object moved from one thread to another through the SPSC
 * and MPMC rings (burst 1 and 32), each measured alternately with a naive mutex + condition
 * variable queue in the same invocation so the reported ratio is a like-for-like comparison,
 * plus the cost of sdd_hist_record. Prints a table and one JSON line per result.
 *
 *   bench_core [--smoke] [--json] [--objects N] [--runs R] [--no-pin]
 *
 * --smoke: tiny run used by ctest; exits 0 when every queue delivered every object in order.
 * --json:  print only the JSON lines. */
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sddaq/clock.h"
#include "sddaq/cpu.h"
#include "sddaq/hist.h"
#include "sddaq/ring.h"

#define RING_CAPACITY 1024
#define MAX_BURST     32
#define MAX_RUNS      64

enum queue_kind { Q_SPSC, Q_MPMC, Q_MUTEX };

static const char *const kind_names[] = {"spsc", "mpmc", "mutex"};

/* ---- The reference: a bounded queue behind one mutex and two condition variables ----------- */

struct mutex_queue {
    pthread_mutex_t lock;
    pthread_cond_t not_empty;
    pthread_cond_t not_full;
    void *slots[RING_CAPACITY];
    uint64_t head, tail;
};

static void mq_init(struct mutex_queue *q)
{
    pthread_mutex_init(&q->lock, NULL);
    pthread_cond_init(&q->not_empty, NULL);
    pthread_cond_init(&q->not_full, NULL);
    q->head = q->tail = 0;
}

static void mq_fini(struct mutex_queue *q)
{
    pthread_cond_destroy(&q->not_full);
    pthread_cond_destroy(&q->not_empty);
    pthread_mutex_destroy(&q->lock);
}

/* Blocks until at least one object fits; moves as many of n as fit. */
static unsigned mq_enqueue(struct mutex_queue *q, void *const *objs, unsigned n)
{
    pthread_mutex_lock(&q->lock);
    while (q->tail - q->head == RING_CAPACITY) {
        pthread_cond_wait(&q->not_full, &q->lock);
    }
    unsigned room = (unsigned)(RING_CAPACITY - (q->tail - q->head));
    unsigned k = n < room ? n : room;
    for (unsigned i = 0; i < k; i++) {
        q->slots[(q->tail + i) % RING_CAPACITY] = objs[i];
    }
    q->tail += k;
    pthread_cond_signal(&q->not_empty);
    pthread_mutex_unlock(&q->lock);
    return k;
}

/* Blocks until at least one object is there; takes up to n. */
static unsigned mq_dequeue(struct mutex_queue *q, void **objs, unsigned n)
{
    pthread_mutex_lock(&q->lock);
    while (q->tail == q->head) {
        pthread_cond_wait(&q->not_empty, &q->lock);
    }
    unsigned avail = (unsigned)(q->tail - q->head);
    unsigned k = n < avail ? n : avail;
    for (unsigned i = 0; i < k; i++) {
        objs[i] = q->slots[(q->head + i) % RING_CAPACITY];
    }
    q->head += k;
    pthread_cond_signal(&q->not_full);
    pthread_mutex_unlock(&q->lock);
    return k;
}

/* ---- One timed transfer ------------------------------------------------------------------- */

struct transfer {
    enum queue_kind kind;
    unsigned burst;
    uint64_t objects;
    int cpu_producer, cpu_consumer; /* -1: not pinned */
    sdd_spsc *spsc;
    sdd_mpmc *mpmc;
    struct mutex_queue *mq;
    _Atomic int ready; /* producer is running (and pinned) */
    _Atomic int go;    /* consumer has started the clock */
};

/* Spinning waits: pause, and yield now and then so that an oversubscribed machine still makes
 * progress (the rings never block). */
static inline void spin_wait(unsigned *fails)
{
    sdd_cpu_relax();
    if (++*fails >= 256) {
        sched_yield();
        *fails = 0;
    }
}

static unsigned put_some(struct transfer *t, void *const *objs, unsigned n)
{
    switch (t->kind) {
    case Q_SPSC:
        return sdd_spsc_enqueue_burst(t->spsc, objs, n);
    case Q_MPMC:
        return sdd_mpmc_enqueue_burst(t->mpmc, objs, n);
    case Q_MUTEX:
        return mq_enqueue(t->mq, objs, n);
    }
    return 0;
}

static unsigned get_some(struct transfer *t, void **objs, unsigned n)
{
    switch (t->kind) {
    case Q_SPSC:
        return sdd_spsc_dequeue_burst(t->spsc, objs, n);
    case Q_MPMC:
        return sdd_mpmc_dequeue_burst(t->mpmc, objs, n);
    case Q_MUTEX:
        return mq_dequeue(t->mq, objs, n);
    }
    return 0;
}

static void *producer_main(void *arg)
{
    struct transfer *t = arg;
    if (t->cpu_producer >= 0) {
        sdd_cpu_pin_self(t->cpu_producer);
    }
    atomic_store_explicit(&t->ready, 1, memory_order_release);
    /* Acquire pairs with the release store of go in run_transfer: the queue is ready. */
    while (!atomic_load_explicit(&t->go, memory_order_acquire)) {
        sdd_cpu_relax();
    }
    void *batch[MAX_BURST];
    uint64_t next = 1;
    unsigned fails = 0;
    while (next <= t->objects) {
        unsigned n = t->burst;
        if (n > t->objects - next + 1) {
            n = (unsigned)(t->objects - next + 1);
        }
        for (unsigned i = 0; i < n; i++) {
            batch[i] = (void *)(uintptr_t)(next + i);
        }
        /* Offer the whole burst until it is all in (partial enqueues are resumed). */
        unsigned done = 0;
        while (done < n) {
            unsigned k = put_some(t, batch + done, n - done);
            done += k;
            if (k == 0) {
                spin_wait(&fails);
            }
        }
        next += n;
    }
    return NULL;
}

/* Runs the consumer on the calling thread. Returns ns per object, or a negative value when an
 * object arrived out of order or was lost. */
static double run_transfer(struct transfer *t)
{
    pthread_t tid;
    atomic_init(&t->ready, 0);
    atomic_init(&t->go, 0);
    if (pthread_create(&tid, NULL, producer_main, t) != 0) {
        fprintf(stderr, "bench_core: pthread_create failed\n");
        return -1;
    }
    if (t->cpu_consumer >= 0) {
        sdd_cpu_pin_self(t->cpu_consumer);
    }
    void *batch[MAX_BURST];
    uint64_t expect = 1;
    uint64_t errors = 0;
    unsigned fails = 0;
    /* Acquire pairs with the producer's release store of ready: it runs on its CPU. Starting
     * the clock only then keeps thread creation and migration out of the measurement. */
    while (!atomic_load_explicit(&t->ready, memory_order_acquire)) {
        spin_wait(&fails);
    }
    uint64_t start = sdd_now_ns();
    atomic_store_explicit(&t->go, 1, memory_order_release);
    while (expect <= t->objects) {
        unsigned k = get_some(t, batch, t->burst);
        for (unsigned i = 0; i < k; i++) {
            errors += (uintptr_t)batch[i] != expect;
            expect++;
        }
        if (k == 0) {
            spin_wait(&fails);
        }
    }
    uint64_t elapsed = sdd_now_ns() - start;
    pthread_join(tid, NULL);
    if (errors != 0) {
        fprintf(stderr, "bench_core: %s burst %u: %llu objects out of order\n", kind_names[t->kind],
                t->burst, (unsigned long long)errors);
        return -1;
    }
    return (double)elapsed / (double)t->objects;
}

/* ---- Statistics and output ---------------------------------------------------------------- */

struct stats {
    double median, min, max;
};

/* JSON lines are collected and printed after the table, so neither interrupts the other. */
static char json_buf[16384];
static size_t json_len;

__attribute__((format(printf, 1, 2))) static void json_line(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(json_buf + json_len, sizeof(json_buf) - json_len, fmt, ap);
    va_end(ap);
    if (n > 0 && (size_t)n < sizeof(json_buf) - json_len) {
        json_len += (size_t)n;
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a;
    double y = *(const double *)b;
    return (x > y) - (x < y);
}

static struct stats stats_of(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(v[0]), cmp_double);
    struct stats s = {.min = v[0], .max = v[n - 1]};
    s.median = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2.0;
    return s;
}

struct options {
    bool smoke, json_only, pin;
    uint64_t objects;
    int runs;
    int cpu_a, cpu_b;
};

static void print_header(const struct options *o)
{
    if (o->json_only) {
        return;
    }
    printf("bench_core: %d cpus usable, %s, %llu objects per run, %d runs per cell "
           "(ring and mutex runs alternate)\n",
           sdd_cpu_count(), o->cpu_a >= 0 ? "producer/consumer pinned" : "not pinned",
           (unsigned long long)o->objects, o->runs);
    if (o->cpu_a >= 0) {
        printf("pinned: producer cpu %d, consumer cpu %d\n", o->cpu_a, o->cpu_b);
    }
    printf("%-12s %5s  %-26s %9s  %-26s %8s\n", "queue", "burst", "ns/object median [min-max]",
           "Mobj/s", "mutex ns/object", "speedup");
}

static void print_pair(const struct options *o, const char *name, unsigned burst, struct stats ring,
                       struct stats mutex)
{
    double speedup = mutex.median / ring.median;
    if (!o->json_only) {
        char a[64], b[64];
        snprintf(a, sizeof(a), "%.1f [%.1f-%.1f]", ring.median, ring.min, ring.max);
        snprintf(b, sizeof(b), "%.1f [%.1f-%.1f]", mutex.median, mutex.min, mutex.max);
        printf("%-12s %5u  %-26s %9.1f  %-26s %7.1fx\n", name, burst, a, 1e3 / ring.median, b,
               speedup);
    }
    json_line("{\"bench\":\"core\",\"test\":\"%s\",\"burst\":%u,\"objects\":%llu,\"runs\":%d,"
              "\"ns_per_op\":%.2f,\"ns_per_op_min\":%.2f,\"ns_per_op_max\":%.2f,"
              "\"mutex_ns_per_op\":%.2f,\"mutex_ns_per_op_min\":%.2f,\"mutex_ns_per_op_max\":%.2f,"
              "\"speedup_vs_mutex\":%.2f,\"pinned\":%s}\n",
              name, burst, (unsigned long long)o->objects, o->runs, ring.median, ring.min, ring.max,
              mutex.median, mutex.min, mutex.max, speedup, o->cpu_a >= 0 ? "true" : "false");
}

/* Ring of `kind` against the mutex queue at one burst size, runs alternating. */
static bool bench_queue(const struct options *o, enum queue_kind kind, unsigned burst)
{
    double ring_ns[MAX_RUNS], mutex_ns[MAX_RUNS];
    struct mutex_queue *mq = malloc(sizeof(*mq));
    struct transfer t = {
        .burst = burst, .objects = o->objects, .cpu_producer = o->cpu_a, .cpu_consumer = o->cpu_b};
    bool ok = mq != NULL;
    for (int run = 0; ok && run < o->runs; run++) {
        /* A fresh ring each run, so every run starts from the same state. */
        t.kind = kind;
        if (kind == Q_SPSC) {
            ok = sdd_spsc_create(RING_CAPACITY, &t.spsc) == SDD_OK;
        } else {
            ok = sdd_mpmc_create(RING_CAPACITY, &t.mpmc) == SDD_OK;
        }
        if (!ok) {
            break;
        }
        ring_ns[run] = run_transfer(&t);
        sdd_spsc_destroy(t.spsc);
        sdd_mpmc_destroy(t.mpmc);
        t.spsc = NULL;
        t.mpmc = NULL;

        t.kind = Q_MUTEX;
        mq_init(mq);
        t.mq = mq;
        mutex_ns[run] = run_transfer(&t);
        mq_fini(mq);
        ok = ring_ns[run] > 0 && mutex_ns[run] > 0;
    }
    free(mq);
    if (ok) {
        print_pair(o, kind_names[kind], burst, stats_of(ring_ns, o->runs),
                   stats_of(mutex_ns, o->runs));
    }
    return ok;
}

static bool bench_hist(const struct options *o)
{
    enum { NVALUES = 4096 };
    static uint64_t values[NVALUES];
    static sdd_hist h;
    uint64_t s = 0x1234;
    for (int i = 0; i < NVALUES; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        values[i] = (s >> 33) >> ((s >> 20) % 24); /* spread over many rows */
    }
    uint64_t n = o->objects * 10;
    double ns[MAX_RUNS];
    for (int run = 0; run < o->runs; run++) {
        sdd_hist_init(&h);
        uint64_t start = sdd_now_ns();
        for (uint64_t i = 0; i < n; i++) {
            sdd_hist_record(&h, values[i & (NVALUES - 1)]);
        }
        uint64_t elapsed = sdd_now_ns() - start;
        if (sdd_hist_count(&h) != n) {
            fprintf(stderr, "bench_core: histogram lost values\n");
            return false;
        }
        ns[run] = (double)elapsed / (double)n;
    }
    struct stats st = stats_of(ns, o->runs);
    if (!o->json_only) {
        char a[64];
        snprintf(a, sizeof(a), "%.2f [%.2f-%.2f]", st.median, st.min, st.max);
        printf("%-12s %5s  %-26s %9.1f  %-26s %8s\n", "hist_record", "-", a, 1e3 / st.median, "-",
               "-");
    }
    json_line("{\"bench\":\"core\",\"test\":\"hist_record\",\"objects\":%llu,\"runs\":%d,"
              "\"ns_per_op\":%.3f,\"ns_per_op_min\":%.3f,\"ns_per_op_max\":%.3f}\n",
              (unsigned long long)n, o->runs, st.median, st.min, st.max);
    return true;
}

/* Pick two distinct CPUs this process may use; none when fewer than two. */
static void choose_cpus(struct options *o)
{
    o->cpu_a = o->cpu_b = -1;
    if (!o->pin) {
        return;
    }
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) != 0) {
        return;
    }
    for (int c = 0; c < CPU_SETSIZE; c++) {
        if (!CPU_ISSET(c, &set)) {
            continue;
        }
        if (o->cpu_a < 0) {
            o->cpu_a = c;
        } else {
            o->cpu_b = c;
            break;
        }
    }
    if (o->cpu_b < 0) {
        o->cpu_a = -1;
    }
}

static int usage(const char *prog)
{
    fprintf(stderr, "usage: %s [--smoke] [--json] [--objects N] [--runs R (1..%d)] [--no-pin]\n",
            prog, MAX_RUNS);
    return 2;
}

int main(int argc, char **argv)
{
    struct options o = {.pin = true, .objects = 1000000, .runs = 5};
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--smoke") == 0) {
            o.smoke = true;
        } else if (strcmp(argv[i], "--json") == 0) {
            o.json_only = true;
        } else if (strcmp(argv[i], "--no-pin") == 0) {
            o.pin = false;
        } else if (strcmp(argv[i], "--objects") == 0 && i + 1 < argc) {
            o.objects = strtoull(argv[++i], NULL, 10);
        } else if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc) {
            o.runs = atoi(argv[++i]);
        } else {
            return usage(argv[0]);
        }
    }
    if (o.smoke) {
        o.objects = 20000;
        o.runs = 1;
    }
    if (o.objects == 0 || o.runs < 1 || o.runs > MAX_RUNS) {
        return usage(argv[0]);
    }
    choose_cpus(&o);
    print_header(&o);

    bool ok = true;
    const unsigned bursts[] = {1, MAX_BURST};
    const enum queue_kind kinds[] = {Q_SPSC, Q_MPMC};
    for (size_t k = 0; k < 2; k++) {
        for (size_t b = 0; b < 2; b++) {
            ok = bench_queue(&o, kinds[k], bursts[b]) && ok;
        }
    }
    ok = bench_hist(&o) && ok;
    fputs(json_buf, stdout);
    fflush(stdout);
    return ok ? 0 : 1;
}
