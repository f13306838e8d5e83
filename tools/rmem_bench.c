/* sddaq rmem bench: per provider, a server process and a client process on this machine
 * (pinned to different cores): ping and 8-byte sync latency histograms (the KIRO method:
 * 40,000 round trips, call to return), then sync throughput from 1 B up by factors of 10,
 * averaged over many transfers per size, next to memcpy of the same bytes in the same run. */
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "rmem.h"
#include "sddaq/clock.h"
#include "sddaq/cpu.h"
#include "sddaq/fabric.h"
#include "sddaq/log.h"

#define SIZE_BUDGET_NS (300 * SDD_NS_PER_MS) /* time spent per throughput size */

/* Child: serve size bytes until the parent closes the pipe. */
static pid_t spawn_server(const struct rmem_tool_opts *o, const char *provider, uint16_t *port,
                          int *keep_fd)
{
    int pp[2], kp[2];
    if (pipe(pp) != 0 || pipe(kp) != 0) {
        return -1;
    }
    pid_t launcher = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        cli_child_dies_with(launcher);
        close(pp[0]);
        close(kp[1]);
        sdd_cpu_pin_self(0);
        struct sdd_rmem_opts ro = o->rmem;
        ro.provider = provider;
        ro.host = "127.0.0.1";
        ro.port = 0;
        sdd_rmem_server *srv = NULL;
        if (sdd_rmem_server_open(&ro, NULL, o->size, &srv) != SDD_OK) {
            _exit(1);
        }
        uint16_t p = sdd_rmem_server_port(srv);
        char c;
        if (write(pp[1], &p, sizeof(p)) == sizeof(p)) {
            while (read(kp[0], &c, 1) > 0) { /* until the parent is done */
            }
        }
        sdd_rmem_server_close(srv);
        _exit(0);
    }
    close(pp[1]);
    close(kp[0]);
    ssize_t n = pid > 0 ? read(pp[0], port, sizeof(*port)) : -1;
    close(pp[0]);
    if (n != (ssize_t)sizeof(*port)) {
        close(kp[1]);
        if (pid > 0) {
            waitpid(pid, NULL, 0);
            sdd_fabric_release_shm_of(pid);
        }
        return -1;
    }
    *keep_fd = kp[1];
    return pid;
}

static int latency(sdd_rmem_client *cl, const char *provider, const struct rmem_tool_opts *o)
{
    sdd_hist ping, sync8;
    sdd_hist_init(&ping);
    sdd_hist_init(&sync8);
    for (int i = 0; i < 1000; i++) { /* warm up caches and connections */
        if (sdd_rmem_client_ping(cl, NULL) != SDD_OK ||
            sdd_rmem_client_sync_range(cl, 0, 8, 0) != SDD_OK) {
            return -1;
        }
    }
    for (uint64_t i = 0; i < o->count; i++) {
        uint64_t rtt = 0;
        if (sdd_rmem_client_ping(cl, &rtt) != SDD_OK) {
            return -1;
        }
        sdd_hist_record(&ping, rtt);
    }
    for (uint64_t i = 0; i < o->count; i++) {
        uint64_t t0 = sdd_now_ns();
        if (sdd_rmem_client_sync_range(cl, 0, 8, 0) != SDD_OK) {
            return -1;
        }
        sdd_hist_record(&sync8, sdd_now_ns() - t0);
    }
    rmem_print_hist(provider, "ping", &ping, o->json);
    rmem_print_hist(provider, "sync_8B", &sync8, o->json);
    return 0;
}

/* Mean ns per call of fn over as many calls as fit the size budget (at least 3, at most
 * 1000). */
static double time_calls(int (*fn)(void *arg, uint64_t size), void *arg, uint64_t size,
                         uint64_t *reps_out)
{
    uint64_t reps = 0, t0 = sdd_now_ns(), t = t0;
    while (reps < 3 || (reps < 1000 && t - t0 < SIZE_BUDGET_NS)) {
        if (fn(arg, size) != 0) {
            return -1;
        }
        reps++;
        t = sdd_now_ns();
    }
    *reps_out = reps;
    return (double)(t - t0) / (double)reps;
}

static int sync_call(void *arg, uint64_t size)
{
    return sdd_rmem_client_sync_range(arg, 0, size, 0) == SDD_OK ? 0 : -1;
}

/* The reference: the same bytes copied by memcpy within this process, into the same mirror. */
struct copy_args {
    uint8_t *dst;
    const uint8_t *src;
};

static int memcpy_call(void *arg, uint64_t size)
{
    struct copy_args *c = arg;
    memcpy(c->dst, c->src, size);
    __asm__ volatile("" ::: "memory"); /* the copy is not dead code */
    return 0;
}

static int throughput(sdd_rmem_client *cl, const char *provider, const struct rmem_tool_opts *o)
{
    uint8_t *src = malloc(o->size);
    if (src == NULL) {
        return -1;
    }
    memset(src, 0x5a, o->size);
    struct copy_args copy = {.dst = sdd_rmem_client_memory(cl), .src = src};
    if (!o->json) {
        printf("\n%-8s %12s %8s %12s %10s %13s %9s\n", "provider", "bytes", "syncs", "mean_us",
               "Gbit/s", "memcpy_Gbit/s", "of_memcpy");
    }
    int rc = 0;
    for (uint64_t size = 1;; size = size * 10 > o->size && size < o->size ? o->size : size * 10) {
        uint64_t reps = 0, copies = 0;
        double ns = time_calls(sync_call, cl, size, &reps);
        double copy_ns = time_calls(memcpy_call, &copy, size, &copies);
        if (ns < 0) {
            rc = -1;
            break;
        }
        double gbps = (double)size * 8 / ns, copy_gbps = (double)size * 8 / copy_ns;
        if (o->json) {
            printf("{\"provider\":\"%s\",\"test\":\"sync_bw\",\"bytes\":%" PRIu64
                   ",\"syncs\":%" PRIu64 ",\"mean_us\":%.3f,\"gbps\":%.4f,"
                   "\"memcpy_gbps\":%.4f,\"of_memcpy\":%.4f}\n",
                   provider, size, reps, ns / 1e3, gbps, copy_gbps, gbps / copy_gbps);
        } else {
            printf("%-8s %12" PRIu64 " %8" PRIu64 " %12.2f %10.3f %13.3f %9.3f\n", provider, size,
                   reps, ns / 1e3, gbps, copy_gbps, gbps / copy_gbps);
        }
        if (size >= o->size) {
            break;
        }
    }
    free(src);
    return rc;
}

static int bench_provider(const struct rmem_tool_opts *o, const char *provider)
{
    uint16_t port = 0;
    int keep = -1;
    pid_t pid = spawn_server(o, provider, &port, &keep);
    if (pid < 0) {
        fprintf(stderr, "sddaq rmem bench: no %s server\n", provider);
        return 1;
    }
    struct sdd_rmem_opts ro = o->rmem;
    ro.provider = provider;
    sdd_rmem_client *cl = NULL;
    sdd_err err = sdd_rmem_client_connect(&ro, "127.0.0.1", port, &cl);
    int rc = 1;
    if (err == SDD_OK) {
        rc = latency(cl, provider, o) == 0 && throughput(cl, provider, o) == 0 ? 0 : 1;
        sdd_rmem_client_close(cl);
    } else {
        fprintf(stderr, "sddaq rmem bench: %s: %s\n", provider, sdd_strerror(err));
    }
    close(keep);
    waitpid(pid, NULL, 0);
    sdd_fabric_release_shm_of(pid);
    return rc;
}

int rmem_bench(const struct rmem_tool_opts *o)
{
    if (getenv("SDDAQ_LOG") == NULL) {
        sdd_log_configure("error"); /* peers leaving at the end are expected */
    }
    sdd_cpu_pin_self(1);
    if (!o->json) {
        printf("%-8s %-12s %8s %9s %9s %9s %9s %9s %10s\n", "provider", "test", "samples", "min_us",
               "p50_us", "p99_us", "p99.9_us", "mean_us", "max_us");
    }
    char list[256];
    snprintf(list, sizeof(list), "%s", o->providers);
    int rc = 0;
    for (char *save = NULL, *p = strtok_r(list, ",", &save); p != NULL;
         p = strtok_r(NULL, ",", &save)) {
        rc |= bench_provider(o, p);
        if (!o->json) {
            printf("\n");
        }
    }
    return rc;
}
