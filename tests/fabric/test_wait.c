/* Conformance: waiting without burning a core. An event loop sleeping on sdd_ep_fd() (with
 * sdd_ep_trywait() and the sdd_ep_tick_ms() timeout) wakes for a message that arrives late,
 * and so does sdd_ep_wait() in blocking mode; neither spins while it waits. */
#include <poll.h>
#include <sys/resource.h>

#include "fabtest.h"

#define DELAY_MS 300
#define BUF_LEN  4096

static double cpu_seconds(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

/* Server: two messages, each after DELAY_MS of silence, then wait for the client to leave. */
static void server(struct ft_side *s)
{
    for (int i = 0; i < 2; i++) {
        usleep(DELAY_MS * 1000);
        sdd_err err;
        s->buf[0] = (uint8_t)(i + 1);
        FT_POST(err, s, sdd_ep_post_send(s->ep, s->peer, s->buf, 64, s->mr, NULL));
        CHECK_OK(err);
        struct sdd_cqe c = {0};
        CHECK(ft_expect(s, SDD_CQE_SEND, &c, 5000) && c.status == SDD_OK);
    }
    struct sdd_cqe c = {0};
    ft_expect(s, SDD_CQE_PEER_DOWN, &c, 10000);
}

/* An application's event loop: drain, trywait, sleep on the fd, repeat. */
static int event_loop_recv(struct ft_side *s, struct sdd_cqe *out, int timeout_ms)
{
    uint64_t deadline = sdd_now_ns() + (uint64_t)timeout_ms * SDD_NS_PER_MS;
    while (sdd_now_ns() < deadline) {
        int n;
        while ((n = sdd_ep_poll(s->ep, out, 1)) > 0) {
            if (out->kind == SDD_CQE_RECV) {
                return 1;
            }
        }
        if (n < 0) {
            return 0;
        }
        if (sdd_ep_trywait(s->ep) != SDD_OK) {
            continue;
        }
        struct pollfd p = {.fd = sdd_ep_fd(s->ep), .events = POLLIN};
        poll(&p, 1, sdd_ep_tick_ms(s->ep));
    }
    return 0;
}

static void client(struct ft_side *s)
{
    sdd_err err;
    FT_POST(err, s, sdd_ep_post_recv(s->ep, s->buf + 1024, 64, s->mr, NULL));
    CHECK_OK(err);
    FT_POST(err, s, sdd_ep_post_recv(s->ep, s->buf + 2048, 64, s->mr, NULL));
    CHECK_OK(err);

    /* 1: the event loop. */
    struct sdd_cqe c = {0};
    uint64_t t0 = sdd_now_ns();
    double cpu0 = cpu_seconds();
    CHECK(event_loop_recv(s, &c, 5000));
    double wall = (double)(sdd_now_ns() - t0) / 1e9, cpu = cpu_seconds() - cpu0;
    CHECK_EQ(c.status, SDD_OK);
    CHECK_EQ(s->buf[1024], 1);
    printf("event loop: woke after %.0f ms using %.0f ms of CPU\n", wall * 1e3, cpu * 1e3);
    CHECK(wall > 0.2);
    CHECK(cpu < 0.5 * wall); /* it slept; a spinning loop uses ~100 % */

    /* 2: sdd_ep_wait in blocking mode (this endpoint was opened with SDD_WAIT_BLOCK). */
    t0 = sdd_now_ns();
    cpu0 = cpu_seconds();
    CHECK(ft_expect(s, SDD_CQE_RECV, &c, 5000));
    wall = (double)(sdd_now_ns() - t0) / 1e9;
    cpu = cpu_seconds() - cpu0;
    CHECK_EQ(c.status, SDD_OK);
    CHECK_EQ(s->buf[2048], 2);
    printf("blocking wait: woke after %.0f ms using %.0f ms of CPU\n", wall * 1e3, cpu * 1e3);
    CHECK(wall > 0.2);
    CHECK(cpu < 0.5 * wall);
}

int main(int argc, char **argv)
{
    ft_wait_mode = SDD_WAIT_BLOCK;
    ft_init(argc, argv);
    CHECK_EQ(ft_run_pair(BUF_LEN, 0, server, client, NULL), 0);
    return check_finish();
}
