/* Messenger over a real provider (argv[1]), with every peer a separate process: inline messages
 * and blocks of 0 B .. 64 MiB both ways with their contents and types checked, blocking sends
 * (also from inside a receive callback), three peers on one messenger, a block refused for
 * max_block, a peer killed while a block offer waits, and bootstrap connections and control
 * messages that are not a messenger's (refused or counted, the messenger keeps working). */
#include <poll.h>

#include "fabtest.h"
#include "rmem/wire.h"
#include "sddaq/rmem.h"

#define WAIT_MS  20000
#define BYE_TYPE 999
#define MAX_RECS 64

struct rec {
    uint32_t peer, type;
    uint64_t msg_id;
    size_t len;
    bool ok; /* contents match the pattern seeded by the type */
};

struct done_rec {
    uint32_t peer;
    uint64_t msg_id;
    sdd_err status;
};

/* What the callbacks saw in this process. */
static struct {
    int reply_mode; /* on_recv answers types 300..399 with send_blocking */
    struct rec recv[MAX_RECS];
    int nrecv;
    struct done_rec done[MAX_RECS];
    int ndone;
    uint32_t joined[16];
    int njoined;
    uint32_t gone[16];
    sdd_err gone_status[16];
    int ngone;
    /* stream test: counted, not recorded */
    uint32_t stream_next; /* next inline index expected */
    int stream_blocks, stream_bad;
    int ndone_total, ndone_failed;
} T;

#define STREAM_TYPE  900
#define STREAM_BLOCK 901
#define STREAM_LEN   64

static void on_recv(sdd_msgr *m, const struct sdd_msgr_msg *msg, void *user)
{
    (void)user;
    if (msg->type == STREAM_TYPE) { /* in order: each carries the pattern at its index */
        if (msg->len != STREAM_LEN ||
            ft_verify(msg->data, STREAM_LEN, STREAM_TYPE, (uint64_t)T.stream_next * STREAM_LEN) !=
                STREAM_LEN) {
            T.stream_bad++;
        }
        T.stream_next++;
        return;
    }
    if (msg->type == STREAM_BLOCK) {
        T.stream_blocks++;
        T.stream_bad += ft_verify(msg->data, msg->len, STREAM_BLOCK, 0) != msg->len;
        return;
    }
    if (T.nrecv == MAX_RECS) {
        CHECK(!"too many messages");
        return;
    }
    struct rec *r = &T.recv[T.nrecv++];
    r->peer = msg->peer;
    r->type = msg->type;
    r->msg_id = msg->msg_id;
    r->len = msg->len;
    r->ok = ft_verify(msg->data, msg->len, msg->type, 0) == msg->len;
    if (T.reply_mode && msg->type >= 300 && msg->type < 400) {
        /* A blocking send from inside a callback: progress nests. */
        uint8_t *buf = malloc(msg->len + 1);
        ft_fill(buf, msg->len, msg->type + 100, 0);
        CHECK_OK(sdd_msgr_send_blocking(m, msg->peer, msg->type + 100, buf, msg->len, WAIT_MS));
        free(buf);
    }
}

static void on_done(sdd_msgr *m, uint32_t peer, uint64_t msg_id, sdd_err status, void *user)
{
    (void)m;
    (void)user;
    T.ndone_total++;
    T.ndone_failed += status != SDD_OK;
    if (T.ndone == MAX_RECS) {
        return; /* the stream test only counts */
    }
    T.done[T.ndone++] = (struct done_rec){.peer = peer, .msg_id = msg_id, .status = status};
}

static void on_peer(sdd_msgr *m, uint32_t peer, sdd_err status, void *user)
{
    (void)m;
    (void)user;
    if (status == SDD_OK && T.njoined < 16) {
        T.joined[T.njoined++] = peer;
    } else if (status != SDD_OK && T.ngone < 16) {
        T.gone_status[T.ngone] = status;
        T.gone[T.ngone++] = peer;
    }
}

static void test_opts(struct sdd_msgr_opts *o)
{
    sdd_msgr_opts_default(o);
    o->rmem.provider = ft_provider;
    o->rmem.host = "127.0.0.1";
    o->on_recv = on_recv;
    o->on_done = on_done;
    o->on_peer = on_peer;
}

static sdd_msgr *open_with(const struct sdd_msgr_opts *o)
{
    sdd_msgr *m = NULL;
    sdd_err err = sdd_msgr_open(o, &m);
    CHECK_OK(err);
    return err == SDD_OK ? m : NULL;
}

/* A messenger with the defaults, and a fresh record of what the callbacks see. */
static sdd_msgr *open_msgr(void)
{
    memset(&T, 0, sizeof(T));
    struct sdd_msgr_opts o;
    test_opts(&o);
    return open_with(&o);
}

/* Drive progress until cond holds or ms pass; the condition is checked again by the caller. */
#define PUMP_UNTIL(m, cond, ms)                                           \
    do {                                                                  \
        uint64_t pump_dl_ = sdd_now_ns() + (uint64_t)(ms)*SDD_NS_PER_MS;  \
        while (!(cond) && sdd_now_ns() < pump_dl_) {                      \
            sdd_err pump_e_ = sdd_msgr_progress(m, 10);                   \
            if (pump_e_ != SDD_OK) {                                      \
                fprintf(stderr, "progress: %s\n", sdd_strerror(pump_e_)); \
                break;                                                    \
            }                                                             \
        }                                                                 \
    } while (0)

static int count_type(uint32_t type, uint32_t *peer)
{
    int n = 0;
    for (int i = 0; i < T.nrecv; i++) {
        if (T.recv[i].type == type) {
            n++;
            if (peer != NULL) {
                *peer = T.recv[i].peer;
            }
        }
    }
    return n;
}

static const struct rec *find_type(uint32_t type)
{
    for (int i = 0; i < T.nrecv; i++) {
        if (T.recv[i].type == type) {
            return &T.recv[i];
        }
    }
    return NULL;
}

/* ---- processes ---------------------------------------------------------------------------- */

struct kid {
    pid_t pid;
    int to, from; /* pipes to and from the child */
};

typedef void (*kid_fn)(int in, int out);

static void spawn(struct kid *k, kid_fn fn)
{
    int a[2], b[2];
    CHECK_REQUIRE(pipe(a) == 0 && pipe(b) == 0);
    fflush(NULL);
    k->pid = fork();
    CHECK_REQUIRE(k->pid >= 0);
    if (k->pid == 0) {
        close(a[1]);
        close(b[0]);
        check_passed = check_failed = 0;
        alarm(90); /* a hung child dies and fails the test instead of hanging it */
        fn(a[0], b[1]);
        fflush(NULL);
        exit(check_failed == 0 ? 0 : 1); /* not _exit: the leak checker looks at children too */
    }
    close(a[0]);
    close(b[1]);
    k->to = a[1];
    k->from = b[0];
}

static int wait_kid(struct kid *k)
{
    close(k->to);
    close(k->from);
    int status = 0;
    if (waitpid(k->pid, &status, 0) != k->pid) {
        return -1;
    }
    sdd_fabric_release_shm_of(k->pid); /* a killed peer leaves its shm regions */
    return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
}

static void put_u16(int fd, uint16_t v)
{
    CHECK(write(fd, &v, sizeof(v)) == (ssize_t)sizeof(v));
}

static uint16_t get_u16(int fd)
{
    uint16_t v = 0;
    if (read(fd, &v, sizeof(v)) != (ssize_t)sizeof(v)) {
        CHECK(!"the other process went away");
        return 0;
    }
    return v;
}

/* ---- inline and blocks, both ways --------------------------------------------------------- */

static const size_t sizes[] = {0,
                               1,
                               2,
                               100,
                               3999,
                               4000,
                               4001,
                               4096,
                               65536,
                               1 << 20,
                               4u << 20,
                               (4u << 20) + 1,
                               (16u << 20) + 1,
                               64u << 20};
#define NSIZES  ((int)(sizeof(sizes) / sizeof(sizes[0])))
#define NINLINE 6 /* sizes up to the default inline_max of 4000 */

static uint8_t *bufs[NSIZES];

static void fill_all(uint32_t type_base)
{
    for (int i = 0; i < NSIZES; i++) {
        bufs[i] = malloc(sizes[i] + 1);
        ft_fill(bufs[i], sizes[i], type_base + (uint32_t)i, 0);
    }
}

static void free_all(void)
{
    for (int i = 0; i < NSIZES; i++) {
        free(bufs[i]);
        bufs[i] = NULL;
    }
}

/* Every size arrived once with type base + i, intact, from peer. */
static void check_all_received(uint32_t type_base, uint32_t peer)
{
    for (int i = 0; i < NSIZES; i++) {
        const struct rec *r = find_type(type_base + (uint32_t)i);
        CHECK(r != NULL);
        if (r != NULL) {
            CHECK_EQ(r->len, sizes[i]);
            CHECK(r->ok);
            CHECK_EQ(r->peer, peer);
        }
        CHECK_EQ(count_type(type_base + (uint32_t)i, NULL), 1);
    }
}

/* All sends of this process finished with SDD_OK and IDs 1, 2, ... in order of sending. */
static void check_all_done(uint32_t peer)
{
    CHECK_EQ(T.ndone, NSIZES);
    for (int i = 0; i < T.ndone; i++) {
        CHECK_EQ(T.done[i].status, SDD_OK);
        CHECK_EQ(T.done[i].peer, peer);
    }
}

static void send_all(sdd_msgr *m, uint32_t peer, uint32_t type_base)
{
    for (int i = 0; i < NSIZES; i++) {
        uint64_t id = 0;
        CHECK_OK(sdd_msgr_send(m, peer, type_base + (uint32_t)i, bufs[i], sizes[i], &id));
        CHECK_EQ(id, (uint64_t)i + 1);
    }
}

static void pair_child(int in, int out)
{
    (void)in;
    sdd_msgr *m = open_msgr();
    if (m == NULL) {
        return;
    }
    fill_all(200);
    put_u16(out, sdd_msgr_port(m));
    PUMP_UNTIL(m, T.nrecv >= NSIZES, WAIT_MS);
    CHECK_EQ(T.njoined, 1);
    check_all_received(100, T.joined[0]);
    send_all(m, T.joined[0], 200);
    PUMP_UNTIL(m, T.ndone == NSIZES && count_type(BYE_TYPE, NULL) == 1, WAIT_MS);
    check_all_done(T.joined[0]);
    CHECK_EQ(count_type(BYE_TYPE, NULL), 1);
    struct sdd_msgr_stats st;
    sdd_msgr_stats(m, &st);
    CHECK_EQ(st.recv_inline, NINLINE + 1);
    CHECK_EQ(st.recv_blocks, NSIZES - NINLINE);
    CHECK_EQ(st.sent_inline, NINLINE);
    CHECK_EQ(st.sent_blocks, NSIZES - NINLINE);
    CHECK_EQ(st.reads, 4 + 1 + 2 + 5 + 16); /* 4 MiB per read */
    CHECK_EQ(st.bad_messages, 0);
    sdd_msgr_close(m);
    free_all();
}

static void test_pair(void)
{
    struct kid k;
    spawn(&k, pair_child);
    fill_all(100);
    sdd_msgr *m = open_msgr();
    uint16_t port = get_u16(k.from);
    uint32_t peer = 0;
    CHECK_REQUIRE(m != NULL && port != 0);
    CHECK_OK(sdd_msgr_connect(m, "127.0.0.1", port, &peer));
    CHECK(peer != 0);
    CHECK_EQ(sdd_msgr_send(m, peer + 1, 1, "x", 1, NULL), SDD_ENOENT);
    uint64_t t0 = sdd_now_ns();
    send_all(m, peer, 100);
    PUMP_UNTIL(m, T.ndone == NSIZES && T.nrecv == NSIZES, WAIT_MS);
    size_t total = 0;
    for (int i = 0; i < NSIZES; i++) {
        total += sizes[i];
    }
    printf("pair: %d messages, %.1f MiB each way in %.0f ms\n", NSIZES, (double)total / (1 << 20),
           (double)(sdd_now_ns() - t0) / 1e6);
    check_all_done(peer);
    check_all_received(200, peer);
    CHECK_OK(sdd_msgr_send_blocking(m, peer, BYE_TYPE, NULL, 0, WAIT_MS));
    struct sdd_msgr_stats st;
    sdd_msgr_stats(m, &st);
    CHECK_EQ(st.peers_now, 1);
    CHECK_EQ(st.reads, 4 + 1 + 2 + 5 + 16);
    CHECK_EQ(st.bytes_received, st.bytes_sent);
    sdd_msgr_close(m);
    free_all();
    CHECK_EQ(wait_kid(&k), 0);
}

/* ---- many small messages in order, some blocks among them --------------------------------- */

#define STREAM_N      5000
#define STREAM_EVERY  250 /* a block after every this many */
#define STREAM_BLOCKS (STREAM_N / STREAM_EVERY)

static void stream_child(int in, int out)
{
    (void)in;
    sdd_msgr *m = open_msgr();
    if (m == NULL) {
        return;
    }
    put_u16(out, sdd_msgr_port(m));
    PUMP_UNTIL(m, count_type(BYE_TYPE, NULL) == 1, WAIT_MS);
    CHECK_EQ(T.stream_next, STREAM_N);
    CHECK_EQ(T.stream_blocks, STREAM_BLOCKS);
    CHECK_EQ(T.stream_bad, 0);
    sdd_msgr_close(m);
}

static void test_stream(void)
{
    struct kid k;
    spawn(&k, stream_child);
    sdd_msgr *m = open_msgr();
    uint16_t port = get_u16(k.from);
    uint32_t peer = 0;
    CHECK_REQUIRE(m != NULL && port != 0);
    CHECK_OK(sdd_msgr_connect(m, "127.0.0.1", port, &peer));
    size_t block_len = 32u << 10;
    uint8_t *block = malloc(block_len), msg[STREAM_LEN];
    ft_fill(block, block_len, STREAM_BLOCK, 0); /* one buffer, offered many times at once */
    int again = 0;
    uint64_t t0 = sdd_now_ns();
    for (uint32_t i = 0; i < STREAM_N; i++) {
        ft_fill(msg, STREAM_LEN, STREAM_TYPE, (uint64_t)i * STREAM_LEN);
        sdd_err err;
        while ((err = sdd_msgr_send(m, peer, STREAM_TYPE, msg, STREAM_LEN, NULL)) == SDD_EAGAIN) {
            again++;
            sdd_msgr_progress(m, 0);
        }
        CHECK_OK(err);
        if (i % STREAM_EVERY == STREAM_EVERY - 1) {
            CHECK_OK(sdd_msgr_send(m, peer, STREAM_BLOCK, block, block_len, NULL));
        }
    }
    PUMP_UNTIL(m, T.ndone_total == STREAM_N + STREAM_BLOCKS, WAIT_MS);
    printf("stream: %d messages and %d blocks in %.0f ms, %d sends refused for a full pool\n",
           STREAM_N, STREAM_BLOCKS, (double)(sdd_now_ns() - t0) / 1e6, again);
    CHECK_EQ(T.ndone_total, STREAM_N + STREAM_BLOCKS);
    CHECK_EQ(T.ndone_failed, 0);
    CHECK_OK(sdd_msgr_send_blocking(m, peer, BYE_TYPE, NULL, 0, WAIT_MS));
    free(block);
    sdd_msgr_close(m);
    CHECK_EQ(wait_kid(&k), 0);
}

/* ---- blocking sends ----------------------------------------------------------------------- */

/* The child takes nothing inline (inline_max 0), so everything but the empty message goes by
 * rendezvous both ways, down to a single byte. */
static const size_t bsizes[] = {0, 1, 10, 4000, 4001, (1u << 20) + 3};
#define NBSIZES ((int)(sizeof(bsizes) / sizeof(bsizes[0])))

static void blocking_child(int in, int out)
{
    (void)in;
    memset(&T, 0, sizeof(T));
    struct sdd_msgr_opts o;
    test_opts(&o);
    o.inline_max = 0;
    sdd_msgr *m = open_with(&o);
    if (m == NULL) {
        return;
    }
    T.reply_mode = 1;
    put_u16(out, sdd_msgr_port(m));
    /* The parent disconnects at the end, with a block still on offer. */
    PUMP_UNTIL(m, T.ngone == 1, WAIT_MS);
    CHECK_EQ(T.ngone, 1);
    CHECK(T.nrecv >= NBSIZES);
    for (int i = 0; i < NBSIZES; i++) {
        const struct rec *r = find_type(300 + (uint32_t)i);
        CHECK(r != NULL && r->ok && r->len == bsizes[i]);
    }
    CHECK_EQ(T.ndone, NBSIZES); /* the replies' on_done ran too */
    struct sdd_msgr_stats st;
    sdd_msgr_stats(m, &st);
    CHECK_EQ(st.sent_inline, 1);
    CHECK_EQ(st.sent_blocks, NBSIZES - 1);
    sdd_msgr_close(m);
}

static void test_blocking(void)
{
    struct kid k;
    spawn(&k, blocking_child);
    sdd_msgr *m = open_msgr();
    uint16_t port = get_u16(k.from);
    uint32_t peer = 0;
    CHECK_REQUIRE(m != NULL && port != 0);
    CHECK_OK(sdd_msgr_connect(m, "127.0.0.1", port, &peer));
    CHECK_EQ(sdd_msgr_send_blocking(m, peer + 7, 1, NULL, 0, 100), SDD_ENOENT);
    for (int i = 0; i < NBSIZES; i++) {
        uint8_t *buf = malloc(bsizes[i]);
        ft_fill(buf, bsizes[i], 300 + (uint32_t)i, 0);
        CHECK_OK(sdd_msgr_send_blocking(m, peer, 300 + (uint32_t)i, buf, bsizes[i], WAIT_MS));
        CHECK_EQ(T.ndone, i + 1); /* the user's on_done still runs */
        free(buf);
        PUMP_UNTIL(m, T.nrecv == i + 1, WAIT_MS);
        const struct rec *r = find_type(400 + (uint32_t)i);
        CHECK(r != NULL && r->ok && r->len == bsizes[i] && r->peer == peer);
    }
    struct sdd_msgr_stats st;
    sdd_msgr_stats(m, &st);
    CHECK_EQ(st.sent_inline, 1);
    CHECK_EQ(st.sent_blocks, NBSIZES - 1);
    CHECK_EQ(st.recv_blocks, NBSIZES - 1);
    /* Disconnect with a block on offer: its send fails at once and the peer is forgotten. */
    size_t len = 16u << 20;
    uint8_t *buf = malloc(len);
    ft_fill(buf, len, 290, 0);
    uint64_t id = 0;
    int before = T.ndone;
    CHECK_OK(sdd_msgr_send(m, peer, 290, buf, len, &id));
    sdd_msgr_disconnect(m, peer);
    CHECK_EQ(T.ndone, before + 1);
    CHECK_EQ(T.done[before].msg_id, id);
    CHECK_EQ(T.done[before].status, SDD_ECANCELED);
    CHECK_EQ(T.ngone, 1);
    CHECK_EQ(T.gone_status[0], SDD_ECANCELED);
    CHECK_EQ(sdd_msgr_send(m, peer, 1, NULL, 0, NULL), SDD_ENOENT);
    sdd_msgr_disconnect(m, peer); /* twice is harmless */
    sdd_msgr_progress(m, 50);
    CHECK_EQ(T.ndone, before + 1);
    sdd_msgr_close(m);
    free(buf);
    CHECK_EQ(wait_kid(&k), 0);
}

/* ---- three peers on one messenger --------------------------------------------------------- */

#define NKIDS 3

static void many_child(int in, int out)
{
    (void)out;
    uint16_t port = get_u16(in);
    uint32_t k = get_u16(in);
    sdd_msgr *m = open_msgr();
    uint32_t peer = 0;
    if (m == NULL || port == 0 || sdd_msgr_connect(m, "127.0.0.1", port, &peer) != SDD_OK) {
        CHECK(!"connect to the shared messenger");
        sdd_msgr_close(m);
        return;
    }
    uint8_t small[200], *big = malloc((1u << 20) + k);
    ft_fill(small, 100 + k, 500 + k, 0);
    ft_fill(big, (1u << 20) + k, 600 + k, 0);
    CHECK_OK(sdd_msgr_send_blocking(m, peer, 500 + k, small, 100 + k, WAIT_MS));
    CHECK_OK(sdd_msgr_send_blocking(m, peer, 600 + k, big, (1u << 20) + k, WAIT_MS));
    free(big);
    PUMP_UNTIL(m, count_type(700, NULL) == 1, WAIT_MS);
    CHECK_EQ(count_type(700, NULL), 1);
    sdd_msgr_close(m);
}

static void test_many_peers(void)
{
    struct kid kids[NKIDS];
    for (int i = 0; i < NKIDS; i++) {
        spawn(&kids[i], many_child);
    }
    sdd_msgr *m = open_msgr();
    CHECK_REQUIRE(m != NULL);
    for (int i = 0; i < NKIDS; i++) {
        put_u16(kids[i].to, sdd_msgr_port(m));
        put_u16(kids[i].to, (uint16_t)i);
    }
    PUMP_UNTIL(m, T.njoined == NKIDS && T.nrecv == 2 * NKIDS, WAIT_MS);
    CHECK_EQ(T.njoined, NKIDS);
    CHECK_EQ(T.nrecv, 2 * NKIDS);
    for (int a = 0; a < T.njoined; a++) {
        for (int b = a + 1; b < T.njoined; b++) {
            CHECK(T.joined[a] != T.joined[b]);
        }
    }
    for (uint32_t k = 0; k < NKIDS; k++) {
        uint32_t small_from = 0, big_from = 0;
        CHECK_EQ(count_type(500 + k, &small_from), 1);
        CHECK_EQ(count_type(600 + k, &big_from), 1);
        CHECK(small_from != 0 && small_from == big_from);
        const struct rec *s = find_type(500 + k), *b = find_type(600 + k);
        CHECK(s != NULL && s->ok && s->len == 100 + k);
        CHECK(b != NULL && b->ok && b->len == (1u << 20) + k);
    }
    for (int i = 0; i < T.njoined; i++) {
        CHECK_OK(sdd_msgr_send_blocking(m, T.joined[i], 700, NULL, 0, WAIT_MS));
    }
    PUMP_UNTIL(m, T.ngone == NKIDS, WAIT_MS);
    CHECK_EQ(T.ngone, NKIDS);
    for (int i = 0; i < T.ngone; i++) {
        CHECK_EQ(T.gone_status[i], SDD_ECONNRESET); /* they closed on purpose */
    }
    struct sdd_msgr_stats st;
    sdd_msgr_stats(m, &st);
    CHECK_EQ(st.peers_total, NKIDS);
    CHECK_EQ(st.peers_now, 0);
    CHECK_EQ(st.peers_lost, NKIDS);
    sdd_msgr_close(m);
    for (int i = 0; i < NKIDS; i++) {
        CHECK_EQ(wait_kid(&kids[i]), 0);
    }
}

/* ---- a block beyond the receiver's max_block, a peer beyond its max_peers ----------------- */

static void reject_child(int in, int out)
{
    (void)in;
    memset(&T, 0, sizeof(T));
    struct sdd_msgr_opts o;
    test_opts(&o);
    o.max_block = 1u << 20;
    o.max_peers = 1;
    sdd_msgr *m = open_with(&o);
    if (m == NULL) {
        return;
    }
    put_u16(out, sdd_msgr_port(m));
    PUMP_UNTIL(m, count_type(BYE_TYPE, NULL) == 1, WAIT_MS);
    CHECK_EQ(T.nrecv, 2); /* the 1 MiB block and the goodbye */
    const struct rec *r = find_type(2);
    CHECK(r != NULL && r->ok && r->len == 1u << 20);
    struct sdd_msgr_stats st;
    sdd_msgr_stats(m, &st);
    CHECK_EQ(st.rejected, 1);
    CHECK_EQ(st.peers_refused, 1); /* the second peer, beyond max_peers */
    sdd_msgr_close(m);
}

static void test_reject(void)
{
    struct kid k;
    spawn(&k, reject_child);
    sdd_msgr *m = open_msgr();
    uint16_t port = get_u16(k.from);
    uint32_t peer = 0;
    CHECK_REQUIRE(m != NULL && port != 0);
    CHECK_OK(sdd_msgr_connect(m, "127.0.0.1", port, &peer));
    struct sdd_msgr_opts o;
    test_opts(&o);
    sdd_msgr *second = open_with(&o);
    uint32_t peer2 = 0;
    CHECK_EQ(sdd_msgr_connect(second, "127.0.0.1", port, &peer2), SDD_EBUSY);
    sdd_msgr_close(second);
    size_t len = (1u << 20) + 1;
    uint8_t *buf = malloc(len);
    ft_fill(buf, len, 1, 0);
    CHECK_EQ(sdd_msgr_send_blocking(m, peer, 1, buf, len, WAIT_MS), SDD_ETOOBIG);
    CHECK_EQ(T.ndone, 1);
    CHECK_EQ(T.done[0].status, SDD_ETOOBIG);
    ft_fill(buf, len - 1, 2, 0);
    CHECK_OK(sdd_msgr_send_blocking(m, peer, 2, buf, len - 1, WAIT_MS));
    CHECK_OK(sdd_msgr_send_blocking(m, peer, BYE_TYPE, NULL, 0, WAIT_MS));
    free(buf);
    struct sdd_msgr_stats st;
    sdd_msgr_stats(m, &st);
    CHECK_EQ(st.send_failures, 1);
    CHECK_EQ(st.sent_blocks, 1);
    sdd_msgr_close(m);
    CHECK_EQ(wait_kid(&k), 0);
}

/* ---- a peer killed while a block offer waits ---------------------------------------------- */

static void stuck_child(int in, int out)
{
    (void)in;
    sdd_msgr *m = open_msgr();
    if (m == NULL) {
        return;
    }
    put_u16(out, sdd_msgr_port(m));
    PUMP_UNTIL(m, T.njoined == 1, WAIT_MS);
    put_u16(out, 1);
    for (;;) {
        pause(); /* alive, but never progresses again: the parent's offers sit unanswered */
    }
}

static void test_peer_killed(void)
{
    struct kid k;
    spawn(&k, stuck_child);
    sdd_msgr *m = open_msgr();
    uint16_t port = get_u16(k.from);
    uint32_t peer = 0;
    CHECK_REQUIRE(m != NULL && port != 0);
    CHECK_OK(sdd_msgr_connect(m, "127.0.0.1", port, &peer));
    CHECK_EQ(get_u16(k.from), 1);
    size_t len = 16u << 20;
    uint8_t *buf = malloc(len);
    ft_fill(buf, len, 3, 0);
    /* A receiver that does not answer: the blocking send gives up and cancels. */
    uint64_t t0 = sdd_now_ns();
    CHECK_EQ(sdd_msgr_send_blocking(m, peer, 3, buf, len, 300), SDD_ETIMEDOUT);
    CHECK(sdd_now_ns() - t0 < 2 * SDD_NS_PER_S);
    CHECK_EQ(T.ndone, 1);
    CHECK_EQ(T.done[0].status, SDD_ETIMEDOUT);
    uint64_t id = 0;
    CHECK_OK(sdd_msgr_send(m, peer, 4, buf, len, &id));
    sdd_msgr_progress(m, 100);
    CHECK_EQ(T.ndone, 1); /* still waiting */
    kill(k.pid, SIGKILL);
    t0 = sdd_now_ns();
    PUMP_UNTIL(m, T.ndone == 2 && T.ngone == 1, 10000);
    double ms = (double)(sdd_now_ns() - t0) / 1e6;
    printf("killed peer noticed after %.0f ms\n", ms);
    CHECK(ms < 5000);
    CHECK_EQ(T.ndone, 2);
    CHECK_EQ(T.done[1].msg_id, id);
    CHECK(T.done[1].status == SDD_EPEERDEAD || T.done[1].status == SDD_ECONNRESET);
    CHECK_EQ(T.ngone, 1);
    CHECK_EQ(T.gone[0], peer);
    CHECK(T.gone_status[0] == SDD_EPEERDEAD || T.gone_status[0] == SDD_ECONNRESET);
    CHECK_EQ(sdd_msgr_send(m, peer, 5, buf, 10, NULL), SDD_ENOENT);
    free(buf);
    sdd_msgr_close(m);
    CHECK_EQ(wait_kid(&k), 128 + SIGKILL);
}

/* ---- strangers: bootstrap blobs and control messages that are not a messenger's ----------- */

static int open_raw(sdd_ep **ep)
{
    struct sdd_ep_opts o;
    sdd_ep_opts_default(&o);
    o.provider = ft_provider;
    return sdd_ep_open(&o, ep) == SDD_OK ? 0 : -1;
}

/* Wait for the peer to go down (the messenger closed it). */
static bool wait_peer_down(sdd_ep *ep, int ms)
{
    uint64_t dl = sdd_now_ns() + (uint64_t)ms * SDD_NS_PER_MS;
    while (sdd_now_ns() < dl) {
        struct sdd_cqe c;
        if (sdd_ep_wait(ep, &c, 1, 20) == 1 && c.kind == SDD_CQE_PEER_DOWN) {
            return true;
        }
    }
    return false;
}

/* Connect with a blob that is no messenger's HELLO: the bootstrap completes, then the
 * messenger hangs up. */
static void connect_stranger(sdd_ep *ep, uint16_t port, const void *blob, size_t len)
{
    sdd_peer *fp = NULL;
    CHECK_OK(sdd_ep_connect(ep, "127.0.0.1", port, blob, len, 5000, &fp));
    if (fp == NULL) {
        return;
    }
    size_t ilen = 0;
    const void *info = sdd_peer_info(fp, &ilen);
    struct rm_msg msg;
    CHECK(rm_decode(info, ilen, &msg) == SDD_OK && msg.type == RM_HELLO &&
          msg.hello.role == RM_ROLE_MESSENGER);
    CHECK(wait_peer_down(ep, 5000));
    sdd_peer_close(fp);
}

static void raw_send(sdd_ep *ep, sdd_peer *fp, uint8_t *buf, size_t len, sdd_mr *mr)
{
    sdd_err err;
    uint64_t dl = sdd_now_ns() + 5 * SDD_NS_PER_S;
    struct sdd_cqe c;
    while ((err = sdd_ep_post_send(ep, fp, buf, len, mr, buf)) == SDD_EAGAIN && sdd_now_ns() < dl) {
        sdd_ep_poll(ep, &c, 1);
    }
    CHECK_OK(err);
    int got = 0;
    while (got == 0 && sdd_now_ns() < dl) {
        got = sdd_ep_wait(ep, &c, 1, 20);
    }
    CHECK(got == 1 && c.kind == SDD_CQE_SEND && c.status == SDD_OK);
}

static void stranger_child(int in, int out)
{
    sdd_ep *ep = NULL;
    CHECK_REQUIRE(open_raw(&ep) == 0);
    /* 1. A messenger connecting here gets a garbage blob back and gives up. */
    sdd_listener *l = NULL;
    CHECK_OK(sdd_ep_listen(ep, "127.0.0.1", 0, &l));
    put_u16(out, sdd_listener_port(l));
    sdd_peer *fp = NULL;
    CHECK_OK(sdd_listener_accept(l, "garbage", 7, 10000, &fp));
    CHECK(wait_peer_down(ep, 5000));
    sdd_peer_close(fp);
    sdd_listener_close(l);
    uint16_t port = get_u16(in);
    /* 2. Bootstrap blobs that are not a messenger's HELLO. */
    connect_stranger(ep, port, "garbage", 7);
    uint8_t blob[64];
    struct rm_msg hello = {.type = RM_HELLO};
    hello.hello.role = RM_ROLE_CLIENT;
    connect_stranger(ep, port, blob, rm_encode(&hello, blob, sizeof(blob)));
    /* 3. A proper HELLO, then control messages no messenger sends. */
    hello.hello.role = RM_ROLE_MESSENGER;
    hello.hello.flags = 4000;
    fp = NULL;
    CHECK_OK(sdd_ep_connect(ep, "127.0.0.1", port, blob, rm_encode(&hello, blob, sizeof(blob)),
                            5000, &fp));
    CHECK_REQUIRE(fp != NULL);
    static uint8_t buf[4096];
    sdd_mr *mr = NULL;
    CHECK_OK(sdd_mr_reg(ep, buf, sizeof(buf), SDD_ACCESS_LOCAL, &mr));
    memset(buf, 0xA5, 10);
    raw_send(ep, fp, buf, 10, mr); /* junk */
    struct rm_msg msg = {.type = RM_DONE};
    msg.done.msg_id = 12345;
    raw_send(ep, fp, buf, rm_encode(&msg, buf, sizeof(buf)), mr); /* DONE for nothing */
    msg.type = RM_REJECT;
    msg.done.status = SDD_ETOOBIG;
    raw_send(ep, fp, buf, rm_encode(&msg, buf, sizeof(buf)), mr); /* REJECT for nothing */
    msg = (struct rm_msg){.type = RM_PING};
    raw_send(ep, fp, buf, rm_encode(&msg, buf, sizeof(buf)), mr); /* not for messengers */
    uint8_t data[50];
    ft_fill(data, sizeof(data), 800, 0);
    msg = (struct rm_msg){.type = RM_INLINE};
    msg.inl.msg_id = 1;
    msg.inl.app_type = 800;
    msg.inl.len = sizeof(data);
    msg.inl.data = data;
    raw_send(ep, fp, buf, rm_encode(&msg, buf, sizeof(buf)), mr); /* and one good message */
    sdd_ep_close(ep);
    /* 4. The messenger still serves a real one. */
    sdd_msgr *m = open_msgr();
    uint32_t peer = 0;
    CHECK_REQUIRE(m != NULL);
    CHECK_OK(sdd_msgr_connect(m, "127.0.0.1", port, &peer));
    ft_fill(data, sizeof(data), 801, 0);
    CHECK_OK(sdd_msgr_send_blocking(m, peer, 801, data, sizeof(data), WAIT_MS));
    PUMP_UNTIL(m, count_type(BYE_TYPE, NULL) == 1, WAIT_MS);
    CHECK_EQ(count_type(BYE_TYPE, NULL), 1);
    sdd_msgr_close(m);
}

static void test_strangers(void)
{
    struct kid k;
    spawn(&k, stranger_child);
    sdd_msgr *m = open_msgr();
    CHECK_REQUIRE(m != NULL);
    /* Nobody there. */
    sdd_msgr *gone = open_msgr();
    CHECK_REQUIRE(gone != NULL);
    uint16_t gone_port = sdd_msgr_port(gone);
    sdd_msgr_close(gone);
    memset(&T, 0, sizeof(T));
    uint32_t peer = 0;
    CHECK_EQ(sdd_msgr_connect(m, "127.0.0.1", gone_port, &peer), SDD_ECONNREFUSED);
    /* Not a messenger. */
    uint16_t raw_port = get_u16(k.from);
    CHECK_EQ(sdd_msgr_connect(m, "127.0.0.1", raw_port, &peer), SDD_EPROTO);
    put_u16(k.to, sdd_msgr_port(m));
    PUMP_UNTIL(m, count_type(800, NULL) == 1 && count_type(801, &peer) == 1, WAIT_MS);
    CHECK_EQ(T.nrecv, 2);
    const struct rec *r = find_type(800);
    CHECK(r != NULL && r->ok && r->len == 50);
    r = find_type(801);
    CHECK(r != NULL && r->ok && r->len == 50);
    CHECK_EQ(T.njoined, 2); /* the raw endpoint with a proper HELLO, then the messenger */
    CHECK_OK(sdd_msgr_send_blocking(m, peer, BYE_TYPE, NULL, 0, WAIT_MS));
    PUMP_UNTIL(m, T.ngone == 2, WAIT_MS);
    CHECK_EQ(T.ngone, 2);
    struct sdd_msgr_stats st;
    sdd_msgr_stats(m, &st);
    CHECK_EQ(st.peers_refused, 2);
    CHECK_EQ(st.bad_messages, 4);
    CHECK_EQ(st.peers_total, 2);
    sdd_msgr_close(m);
    CHECK_EQ(wait_kid(&k), 0);
}

int main(int argc, char **argv)
{
    ft_init(argc, argv);
    struct {
        const char *name;
        void (*fn)(void);
    } tests[] = {
        {"inline and blocks both ways", test_pair},
        {"blocking sends, nested, and disconnect", test_blocking},
        {"many small messages in order, blocks among them", test_stream},
        {"three peers", test_many_peers},
        {"block beyond max_block, peer beyond max_peers", test_reject},
        {"peer killed with an offer pending", test_peer_killed},
        {"strangers refused and bad messages counted", test_strangers},
    };
    for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++) {
        int failed = check_failed;
        uint64_t t0 = sdd_now_ns();
        tests[i].fn();
        printf("%s: %s (%.0f ms)\n", tests[i].name, check_failed == failed ? "ok" : "FAILED",
               (double)(sdd_now_ns() - t0) / 1e6);
        fflush(stdout);
    }
    return check_finish();
}
