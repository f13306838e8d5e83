/* Does io_uring receive UDP faster than recvmmsg? The readout receiver (src/readout/rx.c) uses
 * recvmmsg; issue 7 asks for io_uring (Debian's liburing) where it measures faster. This bench
 * answers that for the receive path alone: a socket buffer is filled with datagrams before the
 * receiver starts, then drained by
 *   recvmmsg       batches of 32 into fixed buffers (what rx.c does, minus assembly)
 *   uring-recv     one multishot IORING_OP_RECV with a ring of provided buffers
 *   uring-recvmsg  one multishot IORING_OP_RECVMSG (gives the flags and control data rx.c
 *                  needs: truncation, SO_RXQ_OVFL drop counts, GRO segment size)
 * taking turns, for 1 KiB and 8 KiB datagrams. Each receiver reads one byte of every datagram.
 * Prints one JSON line per trial and a table of medians [min-max]. */
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sddaq/clock.h"

#ifdef SDDAQ_HAVE_URING
#include <liburing.h>
#endif

#define MAX_ROUNDS 20
#define BATCH      32
#define RING_BUFS  1024 /* provided buffers: more than a batch of completions needs */
#define BUF_BYTES  9216 /* room for the largest datagram here, plus recvmsg's header */

enum kind { K_MMSG, K_URING_RECV, K_URING_RECVMSG, K_KINDS };
static const char *const kind_names[] = {"recvmmsg", "uring-recv", "uring-recvmsg"};

static volatile unsigned sink; /* keeps the reads of every datagram */

/* A receiving socket with a buffer large enough for the whole burst, and a sender that fills
 * it. Returns the receiving fd, or -1. */
static int fill_socket(size_t dgram, uint32_t n)
{
    int rx = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    int tx = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    int big = 256 << 20;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof(a);
    if (rx < 0 || tx < 0 || setsockopt(rx, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof(big)) != 0 ||
        bind(rx, (struct sockaddr *)&a, sizeof(a)) != 0 ||
        getsockname(rx, (struct sockaddr *)&a, &alen) != 0 ||
        connect(tx, (struct sockaddr *)&a, sizeof(a)) != 0) {
        fprintf(stderr, "bench_uring: socket setup: %s (SO_RCVBUFFORCE needs root)\n",
                strerror(errno));
        if (rx >= 0) {
            close(rx);
        }
        if (tx >= 0) {
            close(tx);
        }
        return -1;
    }
    static uint8_t payload[BUF_BYTES];
    struct mmsghdr m[BATCH];
    struct iovec v[BATCH];
    for (int i = 0; i < BATCH; i++) {
        v[i] = (struct iovec){payload, dgram};
        m[i] = (struct mmsghdr){.msg_hdr = {.msg_iov = &v[i], .msg_iovlen = 1}};
    }
    for (uint32_t sent = 0; sent < n;) {
        int k = sendmmsg(tx, m, n - sent < BATCH ? n - sent : BATCH, 0);
        if (k <= 0) {
            fprintf(stderr, "bench_uring: sendmmsg: %s\n", strerror(errno));
            close(rx);
            close(tx);
            return -1;
        }
        sent += (uint32_t)k;
    }
    close(tx);
    return rx;
}

static uint32_t drain_mmsg(int fd, uint32_t n)
{
    static uint8_t bufs[BATCH][BUF_BYTES];
    struct mmsghdr m[BATCH];
    struct iovec v[BATCH];
    uint32_t got = 0;
    while (got < n) {
        for (int i = 0; i < BATCH; i++) {
            v[i] = (struct iovec){bufs[i], BUF_BYTES};
            m[i] = (struct mmsghdr){.msg_hdr = {.msg_iov = &v[i], .msg_iovlen = 1}};
        }
        int k = recvmmsg(fd, m, BATCH, MSG_DONTWAIT, NULL);
        if (k <= 0) {
            break;
        }
        for (int i = 0; i < k; i++) {
            sink += bufs[i][0];
        }
        got += (uint32_t)k;
    }
    return got;
}

#ifdef SDDAQ_HAVE_URING
/* An io_uring with a ring of provided buffers, set up before the clock starts. */
struct uring_rx {
    struct io_uring ring;
    struct io_uring_buf_ring *br;
    uint8_t *bufs;
    int mask;
    bool ok;
};

static bool uring_setup(struct uring_rx *u)
{
    memset(u, 0, sizeof(*u));
    if (io_uring_queue_init(256, &u->ring, 0) != 0) {
        return false;
    }
    u->ok = true;
    u->br = aligned_alloc(4096, RING_BUFS * sizeof(struct io_uring_buf));
    u->bufs = malloc((size_t)RING_BUFS * BUF_BYTES);
    struct io_uring_buf_reg reg = {
        .ring_addr = (uintptr_t)u->br, .ring_entries = RING_BUFS, .bgid = 1};
    if (u->br == NULL || u->bufs == NULL || io_uring_register_buf_ring(&u->ring, &reg, 0) != 0) {
        return false;
    }
    io_uring_buf_ring_init(u->br);
    u->mask = io_uring_buf_ring_mask(RING_BUFS);
    for (int i = 0; i < RING_BUFS; i++) {
        io_uring_buf_ring_add(u->br, u->bufs + (size_t)i * BUF_BYTES, BUF_BYTES, (unsigned short)i,
                              u->mask, i);
    }
    io_uring_buf_ring_advance(u->br, RING_BUFS);
    return true;
}

static void uring_teardown(struct uring_rx *u)
{
    if (u->ok) {
        io_uring_queue_exit(&u->ring);
    }
    free(u->bufs);
    free(u->br);
}

/* Multishot receive into the provided buffers until n datagrams or the socket stays empty. */
static uint32_t drain_uring(struct uring_rx *u, int fd, uint32_t n, bool with_msghdr)
{
    struct msghdr mh = {0};
    bool armed = false;
    int idle = 0;
    uint32_t got = 0;
    while (got < n && idle < 1000) {
        if (!armed) {
            struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring);
            if (with_msghdr) {
                io_uring_prep_recvmsg_multishot(sqe, fd, &mh, 0);
            } else {
                io_uring_prep_recv_multishot(sqe, fd, NULL, 0, 0);
            }
            sqe->flags |= IOSQE_BUFFER_SELECT;
            sqe->buf_group = 1;
            armed = true;
        }
        struct __kernel_timespec ts = {.tv_nsec = 1000000};
        struct io_uring_cqe *cqe;
        if (io_uring_submit_and_wait_timeout(&u->ring, &cqe, 1, &ts, NULL) < 0) {
            idle++;
            continue;
        }
        unsigned head, seen = 0;
        io_uring_for_each_cqe(&u->ring, head, cqe)
        {
            seen++;
            if (!(cqe->flags & IORING_CQE_F_MORE)) {
                armed = false; /* the kernel ended the multishot request (or out of buffers) */
            }
            if (cqe->res < 0 || !(cqe->flags & IORING_CQE_F_BUFFER)) {
                continue;
            }
            unsigned bid = cqe->flags >> IORING_CQE_BUFFER_SHIFT;
            uint8_t *b = u->bufs + (size_t)bid * BUF_BYTES;
            if (with_msghdr) {
                struct io_uring_recvmsg_out *o = io_uring_recvmsg_validate(b, cqe->res, &mh);
                sink += o != NULL ? *(uint8_t *)io_uring_recvmsg_payload(o, &mh) : 0;
            } else {
                sink += b[0];
            }
            io_uring_buf_ring_add(u->br, b, BUF_BYTES, (unsigned short)bid, u->mask, 0);
            io_uring_buf_ring_advance(u->br, 1);
            got++;
        }
        io_uring_cq_advance(&u->ring, seen);
    }
    return got;
}
#endif

/* One trial: datagrams per second; 0 when not all arrived, -1 when it could not run. Only the
 * draining is timed: the socket is filled and the io_uring set up before the clock starts. */
static double trial(enum kind k, size_t dgram, uint32_t n)
{
    int fd = fill_socket(dgram, n);
    if (fd < 0) {
        return -1;
    }
    uint32_t got = 0;
    uint64_t t0 = 0, t1 = 0;
    if (k == K_MMSG) {
        t0 = sdd_now_ns();
        got = drain_mmsg(fd, n);
        t1 = sdd_now_ns();
    }
#ifdef SDDAQ_HAVE_URING
    else {
        struct uring_rx u;
        if (uring_setup(&u)) {
            t0 = sdd_now_ns();
            got = drain_uring(&u, fd, n, k == K_URING_RECVMSG);
            t1 = sdd_now_ns();
        }
        uring_teardown(&u);
    }
#endif
    close(fd);
    return got == n && t1 > t0 ? n / ((t1 - t0) / 1e9) : 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    int rounds = 9;
    bool smoke = argc > 1 && strcmp(argv[1], "--smoke") == 0;
    if (argc > 2 && strcmp(argv[1], "--rounds") == 0) {
        rounds = atoi(argv[2]);
    } else if (argc > 1 && !smoke) {
        fprintf(stderr, "usage: %s [--smoke | --rounds R (1..%d)]\n", argv[0], MAX_ROUNDS);
        return 2;
    }
    if (rounds < 1 || rounds > MAX_ROUNDS) {
        fprintf(stderr, "usage: %s [--smoke | --rounds R (1..%d)]\n", argv[0], MAX_ROUNDS);
        return 2;
    }
    int kinds = K_KINDS;
#ifndef SDDAQ_HAVE_URING
    kinds = 1;
    printf("bench_uring: built without liburing; only recvmmsg runs\n");
#endif
    if (smoke) {
        rounds = 1;
    }
    const size_t sizes[] = {1024, 8192};
    static double pps[2][K_KINDS][MAX_ROUNDS];
    for (int r = 0; r < rounds; r++) {
        for (int si = 0; si < 2; si++) {
            uint32_t n = sizes[si] <= 1024 ? 40000 : 8000;
            n = smoke ? n / 20 : n;
            for (int i = 0; i < kinds; i++) {
                int k = (r % 2) ? kinds - 1 - i : i; /* alternate the order every round */
                double v = trial((enum kind)k, sizes[si], n);
                if (v <= 0) {
                    fprintf(stderr, "bench_uring: %s at %zu B did not receive all %u\n",
                            kind_names[k], sizes[si], n);
                    return v < 0 ? 77 : 1;
                }
                pps[si][k][r] = v;
                printf("{\"bench\":\"uring\",\"round\":%d,\"receiver\":\"%s\",\"datagram\":%zu,"
                       "\"datagrams\":%u,\"pps\":%.0f}\n",
                       r, kind_names[k], sizes[si], n, v);
            }
        }
    }
    printf("\nreceive from a filled socket buffer, %d rounds: Mpps median [min-max], vs recvmmsg\n",
           rounds);
    for (int si = 0; si < 2; si++) {
        double base = 0;
        for (int k = 0; k < kinds; k++) {
            double v[MAX_ROUNDS];
            memcpy(v, pps[si][k], sizeof(double) * (size_t)rounds);
            qsort(v, (size_t)rounds, sizeof(double), cmp_double);
            double med = v[rounds / 2];
            base = k == K_MMSG ? med : base;
            printf("%-14s %5zu B  %.3f [%.3f-%.3f]  %.2fx\n", kind_names[k], sizes[si], med / 1e6,
                   v[0] / 1e6, v[rounds - 1] / 1e6, med / base);
        }
    }
    return 0;
}
