/* Conformance: failures surface as errors within bounded time, never as hangs or crashes.
 * A peer killed (SIGKILL) in the middle of a stream of large writes, sends or reads; a peer
 * that stops progressing (SIGSTOP) while a transfer waits on it; the same peer given up with
 * sdd_peer_abort; a wrong remote key. */
#include "fabtest.h"

#define BIG      (4u << 20)
#define BUF_LEN  (2u * BIG)
#define BOUND_NS (5 * SDD_NS_PER_S) /* "bounded": well under any test timeout */

static pid_t child_pid;

/* The server side of most cases: progress until the client (or the test) ends it. */
static void server_idle(struct ft_side *s)
{
    struct sdd_cqe c = {0};
    sdd_err err;
    for (int i = 0; i < 8; i++) {
        FT_POST(err, s, sdd_ep_post_recv(s->ep, s->buf + BIG, BIG, s->mr, NULL));
    }
    /* Tell the client we are ready, then run until the peer goes away. */
    FT_POST(err, s, sdd_ep_post_send(s->ep, s->peer, s->buf, 8, s->mr, NULL));
    ft_expect(s, SDD_CQE_PEER_DOWN, &c, 60000);
}

static void wait_ready(struct ft_side *s)
{
    sdd_err err;
    FT_POST(err, s, sdd_ep_post_recv(s->ep, s->buf + BUF_LEN - 64, 64, s->mr, NULL));
    CHECK_OK(err);
    struct sdd_cqe c = {0};
    CHECK_REQUIRE(ft_expect(s, SDD_CQE_RECV, &c, 20000) && c.status == SDD_OK);
}

enum stream_op { STREAM_WRITE, STREAM_SEND, STREAM_READ };
static enum stream_op stream_op;

static sdd_err post_stream(struct ft_side *s)
{
    switch (stream_op) {
    case STREAM_WRITE:
        return sdd_ep_post_write(s->ep, s->peer, s->buf, BIG, s->mr, &s->remote, 0, NULL);
    case STREAM_SEND:
        return sdd_ep_post_send(s->ep, s->peer, s->buf, BIG, s->mr, NULL);
    case STREAM_READ:
        return sdd_ep_post_read(s->ep, s->peer, s->buf + BIG, BIG, s->mr, &s->remote, 0, NULL);
    }
    return SDD_EINVAL;
}

/* Keep large operations flowing, kill the server in the middle, and expect every pending
 * operation to fail and the peer to be reported down within BOUND_NS. */
static void client_kill_midway(struct ft_side *s)
{
    wait_ready(s);
    uint64_t started = sdd_now_ns(), killed_at = 0;
    int inflight = 0, completed = 0, failed = 0;
    bool peer_down = false;
    while (!peer_down && sdd_now_ns() - started < 30 * SDD_NS_PER_S) {
        while (inflight < 4 && killed_at == 0) {
            sdd_err err = post_stream(s);
            if (err != SDD_OK) {
                break;
            }
            inflight++;
        }
        if (killed_at == 0 && completed >= 3) {
            kill(child_pid, SIGKILL); /* mid-transfer: operations are in flight */
            killed_at = sdd_now_ns();
        }
        struct sdd_cqe c[8];
        int n = sdd_ep_wait(s->ep, c, 8, 50);
        CHECK_REQUIRE(n >= 0);
        for (int i = 0; i < n; i++) {
            if (c[i].kind == SDD_CQE_PEER_DOWN) {
                peer_down = true;
                CHECK(c[i].status != SDD_OK);
                continue;
            }
            inflight--;
            c[i].status == SDD_OK ? completed++ : failed++;
        }
    }
    CHECK(killed_at != 0);
    CHECK(peer_down);
    CHECK(killed_at != 0 && sdd_now_ns() - killed_at < BOUND_NS);
    /* Everything posted was answered: completed before the kill or failed after it. */
    CHECK_EQ(inflight, 0);
    CHECK(sdd_peer_status(s->peer) != SDD_OK);
    CHECK(post_stream(s) != SDD_OK);
    printf("kill mid-%s: %d completed, %d failed, detected after %.1f ms\n",
           stream_op == STREAM_WRITE  ? "write"
           : stream_op == STREAM_SEND ? "send"
                                      : "read",
           completed, failed, (double)(sdd_now_ns() - killed_at) / 1e6);
}

/* The server stops (SIGSTOP): its process and sockets stay, but nothing progresses. A large
 * send needs the receiver, so it must fail by the operation deadline. */
static void client_stalled_peer(struct ft_side *s)
{
    wait_ready(s);
    kill(child_pid, SIGSTOP);
    uint64_t t0 = sdd_now_ns();
    sdd_err err;
    FT_POST(err, s, sdd_ep_post_send(s->ep, s->peer, s->buf, BIG, s->mr, (void *)42));
    CHECK_OK(err);
    struct sdd_cqe c = {0};
    CHECK_REQUIRE(ft_expect(s, SDD_CQE_SEND, &c, 20000));
    uint64_t took = sdd_now_ns() - t0;
    CHECK_EQ(c.status, SDD_ETIMEDOUT);
    CHECK(c.ctx == (void *)42);
    CHECK(took >= 900 * SDD_NS_PER_MS && took < BOUND_NS); /* op_timeout_ms is 1000 */
    CHECK(ft_expect(s, SDD_CQE_PEER_DOWN, &c, 1000) && c.status == SDD_ETIMEDOUT);
    struct sdd_ep_stats st;
    sdd_ep_stats(s->ep, &st);
    CHECK(st.timed_out >= 1);
    printf("stalled peer: send failed after %.1f ms\n", (double)took / 1e6);
    kill(child_pid, SIGKILL);
    kill(child_pid, SIGCONT);
}

/* Post the abort case's operation k (1, 2: large sends; 3: a large read), retrying for a moment
 * while the queues are full: without cross-memory attach, shm takes one large transfer to a
 * stopped peer and refuses the next. */
static bool post_to_stopped(struct ft_side *s, uintptr_t k)
{
    uint64_t deadline = sdd_now_ns() + 200 * SDD_NS_PER_MS;
    sdd_err err;
    do {
        err = k < 3 ? sdd_ep_post_send(s->ep, s->peer, s->buf, BIG, s->mr, (void *)k)
                    : sdd_ep_post_read(s->ep, s->peer, s->buf + BIG, BIG, s->mr, &s->remote, 0,
                                       (void *)k);
        if (err == SDD_EAGAIN) {
            ft_pump(s);
        }
    } while (err == SDD_EAGAIN && sdd_now_ns() < deadline);
    CHECK(err == SDD_OK || err == SDD_EAGAIN);
    return err == SDD_OK;
}

/* A peer given up while it is stopped: sdd_peer_abort must return at once and fail what was
 * posted to it, where sdd_peer_close would give those operations a second to leave. Large
 * sends need the stopped receiver; a read may still complete on its own over shm with
 * cross-memory attach (either outcome is fine for it; a hang is not). */
static void client_abort_stalled_peer(struct ft_side *s)
{
    wait_ready(s);
    kill(child_pid, SIGSTOP);
    bool posted[4] = {false};
    int nposted = 0;
    for (uintptr_t k = 1; k <= 3; k++) {
        posted[k] = post_to_stopped(s, k);
        nposted += posted[k];
    }
    CHECK_REQUIRE(posted[1]);         /* at least one send waits on the stopped peer */
    sdd_sleep_ns(50 * SDD_NS_PER_MS); /* give the provider time to start them */
    uint64_t t0 = sdd_now_ns();
    sdd_peer_abort(s->peer);
    uint64_t took = sdd_now_ns() - t0;
    s->peer = NULL;
    CHECK(took < 300 * SDD_NS_PER_MS); /* a close's flush would wait up to 1 s here */
    int sends_cancelled = 0, cancelled = 0, answered = 0;
    struct sdd_cqe c = {0};
    while (answered < nposted && ft_next(s, &c, 2000)) {
        uintptr_t k = (uintptr_t)c.ctx;
        if (k < 1 || k > 3 || !posted[k]) {
            continue;
        }
        CHECK(c.peer == NULL); /* the peer is freed: no completion may point at it */
        CHECK(k == 3 ? c.status == SDD_OK || c.status == SDD_ECANCELED : c.status == SDD_ECANCELED);
        sends_cancelled += k < 3 && c.status == SDD_ECANCELED;
        cancelled += c.status == SDD_ECANCELED;
        answered++;
    }
    CHECK_EQ(answered, nposted);
    CHECK_EQ(sends_cancelled, (int)posted[1] + (int)posted[2]);
    struct sdd_ep_stats st;
    sdd_ep_stats(s->ep, &st);
    CHECK(st.failed >= (uint64_t)sends_cancelled);
    printf("abort of a stalled peer: returned after %.2f ms, %d of %d posted cancelled\n",
           (double)took / 1e6, cancelled, nposted);
    kill(child_pid, SIGKILL);
    kill(child_pid, SIGCONT);
}

/* shm with cross-memory attach performs RMA from the initiator without asking the target,
 * and libfabric 1.17 does not check the key on that path. */
static bool provider_checks_keys(const struct ft_side *s)
{
    const char *nocma = getenv("FI_SHM_DISABLE_CMA");
    return strcmp(sdd_ep_info(s->ep)->provider, "shm") != 0 || (nocma && strcmp(nocma, "1") == 0);
}

/* A write and a read with a key the server never issued: no crash on either side, and an
 * error (failed operation or peer declared down) within bounded time. */
static void client_wrong_key(struct ft_side *s)
{
    wait_ready(s);
    struct sdd_rkey bad = s->remote;
    bad.key ^= 0x5a5a5a5a5aull;
    uint64_t t0 = sdd_now_ns();
    int errors = 0, answered = 0, posted = 0;
    for (int i = 0; i < 2 && sdd_peer_status(s->peer) == SDD_OK; i++) {
        sdd_err err;
        FT_POST(err, s,
                i == 0 ? sdd_ep_post_write(s->ep, s->peer, s->buf, 4096, s->mr, &bad, 0, NULL)
                       : sdd_ep_post_read(s->ep, s->peer, s->buf, 4096, s->mr, &bad, 0, NULL));
        posted += err == SDD_OK;
        errors += err != SDD_OK;
        struct sdd_cqe c = {0};
        while (err == SDD_OK && ft_next(s, &c, 10000)) {
            if (c.status != SDD_OK) {
                errors++;
                printf("wrong key %s: %s\n", sdd_cqe_kind_name(c.kind), sdd_errname(c.status));
            }
            if (c.kind == SDD_CQE_WRITE || c.kind == SDD_CQE_READ) {
                answered++;
                break;
            }
        }
    }
    uint64_t took = sdd_now_ns() - t0;
    CHECK_EQ(answered, posted); /* nothing hangs */
    CHECK(took < BOUND_NS);
    if (provider_checks_keys(s)) {
        CHECK(errors > 0);
    } else {
        printf("note: %s does not validate remote keys on this path (no error expected)\n",
               sdd_ep_info(s->ep)->provider);
    }
}

static int run_case(ft_fn client_fn, uint32_t op_timeout_ms, int expect_signal)
{
    int rc = ft_run_pair(BUF_LEN, op_timeout_ms, server_idle, client_fn, &child_pid);
    return expect_signal ? rc == 128 + expect_signal : rc == 0;
}

int main(int argc, char **argv)
{
    ft_init(argc, argv);
    stream_op = STREAM_WRITE;
    CHECK(run_case(client_kill_midway, 0, SIGKILL));
    stream_op = STREAM_SEND;
    CHECK(run_case(client_kill_midway, 0, SIGKILL));
    stream_op = STREAM_READ;
    CHECK(run_case(client_kill_midway, 0, SIGKILL));
    CHECK(run_case(client_stalled_peer, 1000, SIGKILL));
    CHECK(run_case(client_abort_stalled_peer, 0, SIGKILL));
    /* The server survives a bad key; it ends when the client goes away. */
    CHECK(run_case(client_wrong_key, 2000, 0));
    return check_finish();
}
