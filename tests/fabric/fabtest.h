/* Helpers for the fabric conformance tests: the provider comes from argv[1] (the test skips
 * with 77 when it is absent here), and each test runs as two processes, a server (child) and
 * a client (parent), joined through the real TCP bootstrap on 127.0.0.1 with port 0. */
#ifndef SDDAQ_TEST_FABTEST_H
#define SDDAQ_TEST_FABTEST_H

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "sddaq/clock.h"
#include "sddaq/fabric.h"
#include "sddaq/log.h"

static const char *ft_provider = "tcp";
static uint32_t ft_tx_depth = 1024; /* operations in flight per endpoint */
static sdd_wait_mode ft_wait_mode = SDD_WAIT_ADAPTIVE;

/* One side of a test: endpoint, one registered buffer, the peer and the peer's buffer key. */
struct ft_side {
    sdd_ep *ep;
    sdd_mr *mr;
    uint8_t *buf;
    size_t len;
    sdd_peer *peer;
    struct sdd_rkey remote;
    int port_pipe; /* server: where to announce the port */
};

typedef void (*ft_fn)(struct ft_side *s);

static inline int ft_open_ep(sdd_ep **ep, uint32_t op_timeout_ms)
{
    struct sdd_ep_opts o;
    sdd_ep_opts_default(&o);
    o.provider = ft_provider;
    o.tx_depth = ft_tx_depth;
    o.wait_mode = ft_wait_mode;
    o.rx_depth = ft_tx_depth;
    if (op_timeout_ms != 0) {
        o.op_timeout_ms = op_timeout_ms;
    }
    return sdd_ep_open(&o, ep);
}

/* Skip (exit 77) when the provider is not available on this machine. */
static inline void ft_init(int argc, char **argv)
{
    if (argc > 1) {
        ft_provider = argv[1];
    }
    signal(SIGPIPE, SIG_IGN);
    sdd_ep *ep = NULL;
    sdd_err err = ft_open_ep(&ep, 0);
    if (err == SDD_ENOPROV) {
        exit(check_skip("provider not available here"));
    }
    if (err != SDD_OK) {
        fprintf(stderr, "cannot open provider %s: %s\n", ft_provider, sdd_strerror(err));
        exit(1);
    }
    printf("provider %s\n", sdd_ep_info(ep)->provider);
    sdd_ep_close(ep);
}

/* Position-based pattern: byte i of a region filled from `base` depends on (seed, base + i), so
 * any sub-range can be checked and misplaced data is caught. */
static inline uint8_t ft_byte(uint32_t seed, uint64_t pos)
{
    uint32_t x = (uint32_t)pos * 2654435761u ^ (uint32_t)(pos >> 32) ^ seed;
    x ^= x >> 15;
    x *= 2246822519u;
    x ^= x >> 13;
    return (uint8_t)x;
}

static inline void ft_fill(uint8_t *p, size_t len, uint32_t seed, uint64_t base)
{
    for (size_t i = 0; i < len; i++) {
        p[i] = ft_byte(seed, base + i);
    }
}

/* Offset of the first byte that differs from the pattern, or len when all match. */
static inline size_t ft_verify(const uint8_t *p, size_t len, uint32_t seed, uint64_t base)
{
    for (size_t i = 0; i < len; i++) {
        if (p[i] != ft_byte(seed, base + i)) {
            return i;
        }
    }
    return len;
}

static inline int ft_side_open(struct ft_side *s, size_t len, uint32_t op_timeout_ms)
{
    memset(s, 0, sizeof(*s));
    s->port_pipe = -1;
    if (ft_open_ep(&s->ep, op_timeout_ms) != SDD_OK) {
        return -1;
    }
    s->len = len;
    s->buf = aligned_alloc(4096, (len + 4095) & ~(size_t)4095);
    if (s->buf == NULL) {
        return -1;
    }
    memset(s->buf, 0, len);
    return sdd_mr_reg(s->ep, s->buf, len, SDD_ACCESS_ALL, &s->mr) == SDD_OK ? 0 : -1;
}

static inline void ft_side_close(struct ft_side *s)
{
    sdd_ep_close(s->ep);
    free(s->buf);
}

static inline int ft_take_remote(struct ft_side *s)
{
    size_t len = 0;
    const void *info = sdd_peer_info(s->peer, &len);
    if (len != sizeof(s->remote)) {
        return -1;
    }
    memcpy(&s->remote, info, len);
    return 0;
}

static int ft_stash_n;

/* Run server_fn in a child and client_fn here, each with a connected side of buf_len bytes.
 * Returns the child's exit status (0 = its checks passed); the parent's checks count here. */
static inline int ft_run_pair(size_t buf_len, uint32_t op_timeout_ms, ft_fn server_fn,
                              ft_fn client_fn, pid_t *child_out)
{
    int fds[2];
    if (pipe(fds) != 0) {
        return -1;
    }
    ft_stash_n = 0; /* completions of an earlier pair belong to closed endpoints */
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        struct ft_side s;
        if (ft_side_open(&s, buf_len, op_timeout_ms) != 0) {
            _exit(2);
        }
        sdd_listener *l = NULL;
        if (sdd_ep_listen(s.ep, "127.0.0.1", 0, &l) != SDD_OK) {
            _exit(3);
        }
        uint16_t port = sdd_listener_port(l);
        if (write(fds[1], &port, sizeof(port)) != (ssize_t)sizeof(port)) {
            _exit(4);
        }
        struct sdd_rkey rk;
        sdd_mr_rkey(s.mr, &rk);
        sdd_err err = sdd_listener_accept(l, &rk, sizeof(rk), 10000, &s.peer);
        if (err != SDD_OK || ft_take_remote(&s) != 0) {
            fprintf(stderr, "server accept: %s\n", sdd_strerror(err));
            _exit(5);
        }
        server_fn(&s);
        ft_side_close(&s);
        fflush(NULL);
        _exit(check_failed == 0 ? 0 : 1);
    }
    close(fds[1]);
    uint16_t port = 0;
    if (pid < 0 || read(fds[0], &port, sizeof(port)) != (ssize_t)sizeof(port)) {
        close(fds[0]);
        return -1;
    }
    close(fds[0]);
    if (child_out != NULL) {
        *child_out = pid;
    }
    struct ft_side s;
    CHECK_REQUIRE(ft_side_open(&s, buf_len, op_timeout_ms) == 0);
    struct sdd_rkey rk;
    sdd_mr_rkey(s.mr, &rk);
    sdd_err err = sdd_ep_connect(s.ep, "127.0.0.1", port, &rk, sizeof(rk), 10000, &s.peer);
    CHECK_OK(err);
    if (err == SDD_OK && ft_take_remote(&s) == 0) {
        client_fn(&s);
    }
    ft_side_close(&s);
    int status = 0;
    if (waitpid(pid, &status, 0) != pid) {
        return -1;
    }
    sdd_fabric_release_shm_of(pid); /* a killed server leaves its shm regions */
    if (WIFSIGNALED(status)) {
        return 128 + WTERMSIG(status);
    }
    return WEXITSTATUS(status);
}

/* Completions seen while retrying a post are kept for the test to collect. */
static struct sdd_cqe ft_stash_q[4096];

static inline void ft_stash(struct ft_side *s, const struct sdd_cqe *c, int n)
{
    (void)s;
    for (int i = 0; i < n; i++) {
        if (ft_stash_n == (int)(sizeof(ft_stash_q) / sizeof(ft_stash_q[0]))) {
            fprintf(stderr, "fabtest: completion stash full, test is broken\n");
            abort();
        }
        ft_stash_q[ft_stash_n++] = c[i];
    }
}

/* Retry a post while the queues are full (the connection may still be forming), keeping the
 * completions that arrive meanwhile. Assigns the final result to errvar. */
#define FT_POST(errvar, side, call)                                          \
    do {                                                                     \
        uint64_t ft_dl_ = sdd_now_ns() + 10 * SDD_NS_PER_S;                  \
        while (((errvar) = (call)) == SDD_EAGAIN && sdd_now_ns() < ft_dl_) { \
            ft_pump(side);                                                   \
        }                                                                    \
    } while (0)

static inline void ft_pump(struct ft_side *s)
{
    struct sdd_cqe c[16];
    int n = sdd_ep_poll(s->ep, c, 16);
    ft_stash(s, c, n);
}

static inline void ft_unstash(int i, struct sdd_cqe *out)
{
    *out = ft_stash_q[i];
    memmove(ft_stash_q + i, ft_stash_q + i + 1, (size_t)(ft_stash_n - i - 1) * sizeof(*out));
    ft_stash_n--;
}

/* Next completion: stashed ones first, then the endpoint. 1 = got one, 0 = timeout. */
static inline int ft_next(struct ft_side *s, struct sdd_cqe *out, int timeout_ms)
{
    if (ft_stash_n > 0) {
        ft_unstash(0, out);
        return 1;
    }
    uint64_t deadline = sdd_now_ns() + (uint64_t)timeout_ms * SDD_NS_PER_MS;
    do {
        int n = sdd_ep_wait(s->ep, out, 1, 50);
        if (n == 1) {
            return 1;
        }
        if (n < 0) {
            return 0;
        }
    } while (sdd_now_ns() < deadline);
    return 0;
}

/* Wait for the next completion of `kind`, or any failed one. Successful completions of other
 * kinds are kept (in order) for later calls, never dropped. 1 = got one, 0 = timeout. */
static inline int ft_expect(struct ft_side *s, sdd_cqe_kind kind, struct sdd_cqe *out,
                            int timeout_ms)
{
    for (int i = 0; i < ft_stash_n; i++) {
        if (ft_stash_q[i].kind == kind || ft_stash_q[i].status != SDD_OK) {
            ft_unstash(i, out);
            return 1;
        }
    }
    uint64_t deadline = sdd_now_ns() + (uint64_t)timeout_ms * SDD_NS_PER_MS;
    while (sdd_now_ns() < deadline) {
        struct sdd_cqe c = {0};
        int n = sdd_ep_wait(s->ep, &c, 1, 50);
        if (n < 0) {
            return 0;
        }
        if (n == 1 && (c.kind == kind || c.status != SDD_OK)) {
            *out = c;
            return 1;
        }
        if (n == 1) {
            ft_stash(s, &c, 1);
        }
    }
    return 0;
}

#endif
