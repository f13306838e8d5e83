/* rmem server and client over one provider (argv[1]): every call, many clients, region changes
 * while clients sync, a dropped idle client that reconnects, server and client death, a full
 * server, and malformed control messages. */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>

#include "rmtest.h"
#include "rmem/wire.h"
#include "sddaq/rmem.h"
#include "shm_regions.h"

#define SEED 0x5eed

static sdd_rmem_server *serve(size_t len, const struct sdd_rmem_opts *o)
{
    sdd_rmem_server *srv = NULL;
    CHECK_OK(sdd_rmem_server_open(o, NULL, len, &srv));
    CHECK_REQUIRE(srv != NULL);
    size_t got = 0;
    uint8_t *mem = sdd_rmem_server_region(srv, &got);
    CHECK_EQ(got, len);
    ft_fill(mem, len, SEED, 0);
    return srv;
}

static sdd_rmem_client *attach(sdd_rmem_server *srv, const struct sdd_rmem_opts *o)
{
    sdd_rmem_client *cl = NULL;
    CHECK_OK(sdd_rmem_client_connect(o, "127.0.0.1", sdd_rmem_server_port(srv), &cl));
    CHECK_REQUIRE(cl != NULL);
    return cl;
}

static void test_calls(void)
{
    struct sdd_rmem_opts o = opts_for_test();
    const size_t len = (1 << 20) + 13;
    sdd_rmem_server *srv = serve(len, &o);
    sdd_rmem_client *cl = attach(srv, &o);
    CHECK_EQ(sdd_rmem_client_size(cl), len);
    CHECK_EQ(sdd_rmem_client_generation(cl), 1);
    uint8_t *m = sdd_rmem_client_memory(cl);
    CHECK_EQ(m[0] | m[len - 1], 0); /* nothing read yet */

    CHECK_OK(sdd_rmem_client_sync(cl));
    CHECK_EQ(ft_verify(m, len, SEED, 0), len);

    /* A range lands where asked and nowhere else. */
    memset(m, 0, len);
    CHECK_OK(sdd_rmem_client_sync_range(cl, 1001, 4097, 77));
    CHECK_EQ(ft_verify(m + 77, 4097, SEED, 1001), 4097);
    CHECK_EQ(m[76], 0);
    CHECK_EQ(m[77 + 4097], 0);
    /* len 0 = to the end */
    memset(m, 0, len);
    CHECK_OK(sdd_rmem_client_sync_range(cl, len - 100, 0, len - 100));
    CHECK_EQ(ft_verify(m + len - 100, 100, SEED, len - 100), 100);
    CHECK_OK(sdd_rmem_client_sync_range(cl, 3, 1, 5));
    CHECK_EQ(m[5], ft_byte(SEED, 3));

    CHECK_EQ(sdd_rmem_client_sync_range(cl, len, 1, 0), SDD_EINVAL);
    CHECK_EQ(sdd_rmem_client_sync_range(cl, len - 1, 2, 0), SDD_EINVAL);
    CHECK_EQ(sdd_rmem_client_sync_range(cl, 0, 2, len - 1), SDD_EINVAL);
    CHECK_EQ(sdd_rmem_client_sync_range(cl, len, 0, 0), SDD_EINVAL);

    /* The server writes, the client sees it on its next sync. */
    uint8_t *s = sdd_rmem_server_region(srv, NULL);
    s[12345] ^= 0xff;
    CHECK_OK(sdd_rmem_client_sync_range(cl, 12345, 1, 12345));
    CHECK_EQ(m[12345], (uint8_t)(ft_byte(SEED, 12345) ^ 0xff));

    uint64_t rtt = 0;
    for (int i = 0; i < 100; i++) {
        CHECK_OK(sdd_rmem_client_ping(cl, &rtt));
    }
    CHECK(rtt > 0);
    struct sdd_rmem_server_stats st;
    sdd_rmem_server_stats(srv, &st);
    CHECK_EQ(st.pings, 100);
    CHECK_EQ(st.clients_now, 1);
    CHECK_EQ(st.bad_messages, 0);
    struct sdd_rmem_client_stats cs;
    sdd_rmem_client_stats(cl, &cs);
    CHECK_EQ(cs.syncs, 5);

    /* Caller-owned memory: published as is, and not resizable (only movable). */
    static uint64_t mine[512];
    mine[7] = 0x1122334455667788ull;
    sdd_rmem_server *srv2 = NULL;
    CHECK_OK(sdd_rmem_server_open(&o, mine, sizeof(mine), &srv2));
    CHECK_EQ(sdd_rmem_server_resize(srv2, 8192), SDD_EINVAL);
    sdd_rmem_client *cl2 = attach(srv2, &o);
    CHECK_OK(sdd_rmem_client_sync(cl2));
    CHECK(((uint64_t *)sdd_rmem_client_memory(cl2))[7] == mine[7]);
    sdd_rmem_client_close(cl2);
    sdd_rmem_server_close(srv2);

    sdd_rmem_client_close(cl);
    sdd_rmem_server_close(srv);
    CHECK_EQ(sdd_rmem_server_open(&o, NULL, 0, &srv), SDD_EINVAL);
}

/* Same host: the client maps the server's own region and syncs with plain loads; after a
 * region change it reads by RMA again. Caller memory is never mapped. */
static void test_map_local(void)
{
    struct sdd_rmem_opts o = opts_for_test();
    o.map_local = true;
    o.grace_ms = 100;
    const size_t len = 300000;
    sdd_rmem_server *srv = serve(len, &o);
    sdd_rmem_client *cl = attach(srv, &o);
    CHECK(sdd_rmem_client_local(cl) != NULL);
    CHECK_OK(sdd_rmem_client_sync(cl));
    CHECK_EQ(ft_verify(sdd_rmem_client_memory(cl), len, SEED, 0), len);
    uint8_t *s = sdd_rmem_server_region(srv, NULL);
    s[777] ^= 0x55;
    CHECK_OK(sdd_rmem_client_sync_range(cl, 777, 1, 3));
    CHECK_EQ(((uint8_t *)sdd_rmem_client_memory(cl))[3], (uint8_t)(ft_byte(SEED, 777) ^ 0x55));
    s[777] ^= 0x55;
    /* This thread cannot answer during the resize: the client is dropped, sees the old
     * mapping retired, and comes back (mapping the new region) on its next sync. */
    CHECK_OK(sdd_rmem_server_resize(srv, 2 * len));
    CHECK_OK(sdd_rmem_client_sync(cl));
    struct sdd_rmem_client_stats cs;
    sdd_rmem_client_stats(cl, &cs);
    CHECK_EQ(cs.reconnects, 1);
    CHECK(sdd_rmem_client_local(cl) != NULL);
    CHECK_EQ(sdd_rmem_client_size(cl), 2 * len);
    CHECK_EQ(ft_verify(sdd_rmem_client_memory(cl), len, SEED, 0), len);
    sdd_rmem_client *plain =
        attach(srv, &(struct sdd_rmem_opts){.provider = ft_provider, .timeout_ms = 2000});
    CHECK(sdd_rmem_client_local(plain) == NULL); /* not asked for */
    sdd_rmem_client_close(plain);
    sdd_rmem_client_close(cl);
    sdd_rmem_server_close(srv);

    static uint64_t mine[1024];
    CHECK_OK(sdd_rmem_server_open(&o, mine, sizeof(mine), &srv));
    cl = attach(srv, &o);
    CHECK(sdd_rmem_client_local(cl) == NULL); /* caller memory is no memfd */
    CHECK_OK(sdd_rmem_client_sync(cl));
    sdd_rmem_client_close(cl);
    sdd_rmem_server_close(srv);
}

static void test_many_clients(void)
{
    struct sdd_rmem_opts o = opts_for_test();
    const size_t len = 256 * 1024;
    enum { N = 12 };
    sdd_rmem_server *srv = serve(len, &o);
    sdd_rmem_client *cl[N];
    for (int i = 0; i < N; i++) {
        cl[i] = attach(srv, &o);
    }
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < N; i++) {
            CHECK_OK(sdd_rmem_client_sync(cl[i]));
            CHECK_EQ(ft_verify(sdd_rmem_client_memory(cl[i]), len, SEED, 0), len);
        }
    }
    struct sdd_rmem_server_stats st;
    sdd_rmem_server_stats(srv, &st);
    CHECK_EQ(st.clients_now, N);
    CHECK_EQ(st.clients_total, N);
    for (int i = 0; i < 4; i++) {
        sdd_rmem_client_close(cl[i]);
    }
    uint64_t deadline = sdd_now_ns() + 3 * SDD_NS_PER_S;
    do {
        sdd_sleep_ns(10 * SDD_NS_PER_MS);
        sdd_rmem_server_stats(srv, &st);
    } while (st.clients_now != N - 4 && sdd_now_ns() < deadline);
    CHECK_EQ(st.clients_now, N - 4);
    for (int i = 4; i < N; i++) {
        CHECK_OK(sdd_rmem_client_sync(cl[i]));
        sdd_rmem_client_close(cl[i]);
    }
    sdd_rmem_server_close(srv);
}

/* ---- region changes while clients sync ---------------------------------------------------- */

#define KEEP 4096 /* bytes every region generation starts with */

struct syncer {
    sdd_rmem_client *cl;
    atomic_bool *stop;
    uint64_t syncs, bad, errors;
};

static void *sync_loop(void *arg)
{
    struct syncer *s = arg;
    while (!atomic_load(s->stop)) {
        if (sdd_rmem_client_sync(s->cl) != SDD_OK) {
            s->errors++;
            continue;
        }
        s->syncs++;
        if (ft_verify(sdd_rmem_client_memory(s->cl), KEEP, SEED, 0) != KEEP) {
            s->bad++;
        }
    }
    /* Pick up the last change even if it came after the last sync. */
    sdd_rmem_client_poll(s->cl);
    return NULL;
}

static void test_resize(void)
{
    struct sdd_rmem_opts o = opts_for_test();
    enum { N = 3 };
    sdd_rmem_server *srv = serve(64 * 1024, &o);
    atomic_bool stop = false;
    struct syncer s[N];
    pthread_t th[N];
    for (int i = 0; i < N; i++) {
        s[i] = (struct syncer){.cl = attach(srv, &o), .stop = &stop};
        pthread_create(&th[i], NULL, sync_loop, &s[i]);
    }
    static uint8_t user_region[3 * 4096 + 5];
    ft_fill(user_region, sizeof(user_region), SEED, 0);
    const size_t sizes[] = {256 * 1024, 8192, 1 << 20, 5000};
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        sdd_sleep_ns(30 * SDD_NS_PER_MS);
        CHECK_OK(sdd_rmem_server_resize(srv, sizes[k]));
        size_t got = 0;
        sdd_rmem_server_region(srv, &got);
        CHECK_EQ(got, sizes[k]);
    }
    sdd_sleep_ns(30 * SDD_NS_PER_MS);
    CHECK_OK(sdd_rmem_server_move(srv, user_region, sizeof(user_region)));
    sdd_sleep_ns(30 * SDD_NS_PER_MS);
    atomic_store(&stop, true);
    for (int i = 0; i < N; i++) {
        pthread_join(th[i], NULL);
        struct sdd_rmem_client_stats cs;
        sdd_rmem_client_stats(s[i].cl, &cs);
        CHECK(s[i].syncs > 10);
        CHECK_EQ(s[i].bad, 0);
        CHECK_EQ(s[i].errors, 0);
        CHECK_EQ(cs.region_changes, 5);
        CHECK_EQ(sdd_rmem_client_generation(s[i].cl), 6);
        CHECK_EQ(sdd_rmem_client_size(s[i].cl), sizeof(user_region));
        CHECK_OK(sdd_rmem_client_sync(s[i].cl));
        CHECK_EQ(ft_verify(sdd_rmem_client_memory(s[i].cl), sizeof(user_region), SEED, 0),
                 sizeof(user_region));
        sdd_rmem_client_close(s[i].cl);
    }
    struct sdd_rmem_server_stats st;
    sdd_rmem_server_stats(srv, &st);
    CHECK_EQ(st.region_changes, 5);
    CHECK_EQ(st.clients_dropped, 0);
    sdd_rmem_server_close(srv);
}

/* Clients that neither sync nor poll during a region change are dropped after grace_ms and
 * reconnect by themselves on their next call. */
static void test_idle_client_dropped(void)
{
    struct sdd_rmem_opts o = opts_for_test();
    o.grace_ms = 200;
    sdd_rmem_server *srv = serve(8192, &o);
    sdd_rmem_client *idle = attach(srv, &o);
    sdd_rmem_client *other = attach(srv, &o);
    uint64_t t0 = sdd_now_ns();
    CHECK_OK(sdd_rmem_server_resize(srv, 16384));
    uint64_t took = sdd_now_ns() - t0;
    CHECK(took >= 150 * SDD_NS_PER_MS); /* waited for the silent clients */
    CHECK(took < 3 * SDD_NS_PER_S);
    struct sdd_rmem_server_stats st;
    sdd_rmem_server_stats(srv, &st);
    CHECK_EQ(st.clients_dropped, 2);
    CHECK_OK(sdd_rmem_client_sync(idle));
    CHECK_EQ(sdd_rmem_client_size(idle), 16384);
    CHECK_EQ(ft_verify(sdd_rmem_client_memory(idle), 8192, SEED, 0), 8192);
    struct sdd_rmem_client_stats cs;
    sdd_rmem_client_stats(idle, &cs);
    CHECK_EQ(cs.reconnects, 1);
    sdd_rmem_client_close(idle);
    CHECK_OK(sdd_rmem_client_ping(other, NULL));
    sdd_rmem_client_stats(other, &cs);
    CHECK_EQ(cs.reconnects, 1);
    sdd_rmem_client_close(other);
    sdd_rmem_server_close(srv);
}

/* ---- death, refusal, garbage -------------------------------------------------------------- */

/* The server runs in a child that reports its port and then waits to be killed or told to
 * close (one byte on the command pipe). */
static pid_t spawn_server(size_t len, uint16_t *port, int *cmd_fd)
{
    int port_pipe[2], cmd_pipe[2];
    CHECK_REQUIRE(pipe(port_pipe) == 0 && pipe(cmd_pipe) == 0);
    pid_t pid = fork();
    CHECK_REQUIRE(pid >= 0);
    if (pid == 0) {
        struct sdd_rmem_opts o = opts_for_test();
        sdd_rmem_server *srv = NULL;
        if (sdd_rmem_server_open(&o, NULL, len, &srv) != SDD_OK) {
            _exit(2);
        }
        ft_fill(sdd_rmem_server_region(srv, NULL), len, SEED, 0);
        uint16_t p = sdd_rmem_server_port(srv);
        if (write(port_pipe[1], &p, sizeof(p)) != sizeof(p)) {
            _exit(3);
        }
        char c;
        if (read(cmd_pipe[0], &c, 1) != 1) {
            _exit(4);
        }
        sdd_rmem_server_close(srv);
        _exit(0);
    }
    close(port_pipe[1]);
    close(cmd_pipe[0]);
    CHECK_REQUIRE(read(port_pipe[0], port, sizeof(*port)) == sizeof(*port));
    close(port_pipe[0]);
    *cmd_fd = cmd_pipe[1];
    return pid;
}

/* Sync until it fails; how long that took after the server went away. */
static sdd_err sync_until_error(sdd_rmem_client *cl, uint64_t *took_ns)
{
    uint64_t t0 = sdd_now_ns();
    sdd_err err;
    while ((err = sdd_rmem_client_sync(cl)) == SDD_OK && sdd_now_ns() - t0 < 20 * SDD_NS_PER_S) {
    }
    *took_ns = sdd_now_ns() - t0;
    return err;
}

static void test_server_death(bool graceful, bool map_local)
{
    struct sdd_rmem_opts o = opts_for_test();
    o.map_local = map_local;
    uint16_t port = 0;
    int cmd = -1;
    const size_t len = 4 << 20;
    pid_t pid = spawn_server(len, &port, &cmd);
    sdd_rmem_client *cl = NULL;
    CHECK_OK(sdd_rmem_client_connect(&o, "127.0.0.1", port, &cl));
    CHECK_REQUIRE(cl != NULL);
    CHECK(map_local == (sdd_rmem_client_local(cl) != NULL));
    CHECK_OK(sdd_rmem_client_sync(cl));
    CHECK_EQ(ft_verify(sdd_rmem_client_memory(cl), len, SEED, 0), len);
    if (graceful) {
        CHECK(write(cmd, "x", 1) == 1);
    } else {
        kill(pid, SIGKILL);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    sdd_fabric_release_shm_of(pid);
    uint64_t took = 0;
    sdd_err err = sync_until_error(cl, &took);
    printf("server %s%s: sync fails with %s after %.1f ms\n", graceful ? "closed" : "killed",
           map_local ? " (region mapped here)" : "", sdd_errname(err), took / 1e6);
    CHECK(err != SDD_OK);
    if (graceful) {
        CHECK_EQ(err, SDD_ECONNRESET);
    } else {
        CHECK(err == SDD_EPEERDEAD || err == SDD_ECONNRESET);
    }
    CHECK(took < 6 * SDD_NS_PER_S);
    /* It stays failed, at once, and ping says the same. */
    CHECK(sdd_rmem_client_sync(cl) != SDD_OK);
    CHECK(sdd_rmem_client_ping(cl, NULL) != SDD_OK);
    sdd_rmem_client_close(cl);
    close(cmd);
}

/* A client killed mid-sync. The server notices and goes on serving. On shm (libfabric 1.17)
 * the kill can land while the client holds a spin lock inside the server's shared region, and
 * the server's progress thread then spins inside the provider until sddaq's watch releases
 * the lock (0.5 s, shm_lock.c). Should the watch not (another layout, a starved thread), the
 * server must say so (stats.stalled_ms) and close without hanging its caller. */
static void test_client_death(void)
{
    struct sdd_rmem_opts o = opts_for_test();
    o.timeout_ms = 500;
    sdd_rmem_server *srv = serve(1 << 20, &o);
    uint16_t port = sdd_rmem_server_port(srv);
    int sync_pipe[2];
    CHECK_REQUIRE(pipe(sync_pipe) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        sdd_rmem_client *cl = NULL;
        if (sdd_rmem_client_connect(&o, "127.0.0.1", port, &cl) != SDD_OK) {
            _exit(2);
        }
        char c = 's';
        for (;;) { /* syncs until killed */
            sdd_rmem_client_sync_range(cl, 0, 4096, 0);
            if (c == 's' && write(sync_pipe[1], &c, 1) == 1) {
                c = 0;
            }
        }
    }
    char c;
    CHECK_REQUIRE(read(sync_pipe[0], &c, 1) == 1);
    sdd_rmem_client *survivor = attach(srv, &o);
    sdd_sleep_ns(20 * SDD_NS_PER_MS);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    sdd_fabric_release_shm_of(pid);
    uint64_t t0 = sdd_now_ns();
    struct sdd_rmem_server_stats st;
    do {
        sdd_sleep_ns(5 * SDD_NS_PER_MS);
        sdd_rmem_server_stats(srv, &st);
    } while (st.clients_lost == 0 && st.stalled_ms < 1000 && sdd_now_ns() - t0 < 10 * SDD_NS_PER_S);
    if (st.clients_lost == 0 && st.stalled_ms >= 1000) {
        printf("client killed inside a provider lock: server reports a %" PRIu64
               " ms stall (libfabric shm limit)\n",
               st.stalled_ms);
        CHECK(strcmp(ft_provider, "shm") == 0); /* only shm has this limit */
        uint64_t c0 = sdd_now_ns();
        sdd_rmem_server_close(srv); /* abandons the stuck thread, does not hang */
        CHECK(sdd_now_ns() - c0 < 5 * SDD_NS_PER_S);
        sdd_rmem_client_close(survivor);
        CHECK(shm_regions_of(getpid()) == 0); /* the abandoned endpoint's region too */
    } else {
        printf("client killed: server notices after %.1f ms\n", (sdd_now_ns() - t0) / 1e6);
        CHECK_EQ(st.clients_lost, 1);
        CHECK_EQ(st.clients_now, 1);
        CHECK_EQ(st.stalled_ms, 0);
        CHECK_OK(sdd_rmem_client_sync(survivor));
        CHECK_EQ(ft_verify(sdd_rmem_client_memory(survivor), 1 << 20, SEED, 0), 1 << 20);
        sdd_rmem_client_close(survivor);
        sdd_rmem_server_close(srv);
    }
    close(sync_pipe[0]);
    close(sync_pipe[1]);
}

static void test_full_server(void)
{
    struct sdd_rmem_opts o = opts_for_test();
    o.max_clients = 2;
    sdd_rmem_server *srv = serve(4096, &o);
    sdd_rmem_client *a = attach(srv, &o), *b = attach(srv, &o), *c = NULL;
    CHECK_EQ(sdd_rmem_client_connect(&o, "127.0.0.1", sdd_rmem_server_port(srv), &c), SDD_EBUSY);
    CHECK(c == NULL);
    sdd_rmem_client_close(a);
    uint64_t t0 = sdd_now_ns();
    sdd_err err;
    while ((err = sdd_rmem_client_connect(&o, "127.0.0.1", sdd_rmem_server_port(srv), &c)) ==
               SDD_EBUSY &&
           sdd_now_ns() - t0 < 3 * SDD_NS_PER_S) {
        sdd_sleep_ns(10 * SDD_NS_PER_MS);
    }
    CHECK_OK(err); /* a place freed up */
    struct sdd_rmem_server_stats st;
    sdd_rmem_server_stats(srv, &st);
    CHECK(st.clients_refused >= 1);
    sdd_rmem_client_close(b);
    sdd_rmem_client_close(c);
    sdd_rmem_server_close(srv);
}

/* A fabric peer that speaks the bootstrap correctly and then sends garbage control messages,
 * and one whose HELLO is not an rmem client's: both are counted, the server keeps serving. */
static void test_garbage(void)
{
    struct sdd_rmem_opts o = opts_for_test();
    sdd_rmem_server *srv = serve(65536, &o);
    uint16_t port = sdd_rmem_server_port(srv);
    sdd_ep *ep = NULL;
    CHECK_REQUIRE(ft_open_ep(&ep, 0) == SDD_OK);
    uint8_t hello[64];
    struct rm_msg m = {.type = RM_HELLO, .hello = {.role = RM_ROLE_CLIENT}};
    size_t hello_len = rm_encode(&m, hello, sizeof(hello));
    sdd_peer *peer = NULL;
    sdd_err err = SDD_OK;
    CHECK_OK(sdd_ep_connect(ep, "127.0.0.1", port, hello, hello_len, 2000, &peer));
    CHECK_REQUIRE(peer != NULL);

    static uint8_t junk[6][64];
    size_t junk_len[6];
    memset(junk, 0xA5, sizeof(junk));
    junk_len[0] = 3; /* short */
    junk_len[1] = 64;
    struct rm_msg pong = {.type = RM_PING};
    junk_len[2] = rm_encode(&pong, junk[2], 64) - 1; /* truncated */
    junk_len[3] = rm_encode(&pong, junk[3], 64);
    junk[3][4] = 9;                                                   /* bad version */
    struct rm_msg ack = {.type = RM_REALLOC_ACK, .ack = {.gen = 99}}; /* a generation never sent */
    junk_len[4] = rm_encode(&ack, junk[4], 64);
    struct rm_msg offer = {.type = RM_OFFER}; /* valid, but not for a server */
    junk_len[5] = rm_encode(&offer, junk[5], 64);
    sdd_mr *mr = NULL;
    CHECK_OK(sdd_mr_reg(ep, junk, sizeof(junk), SDD_ACCESS_LOCAL, &mr));
    int sent = 0;
    for (int i = 0; i < 6; i++) {
        uint64_t dl = sdd_now_ns() + 3 * SDD_NS_PER_S;
        while ((err = sdd_ep_post_send(ep, peer, junk[i], junk_len[i], mr, NULL)) == SDD_EAGAIN &&
               sdd_now_ns() < dl) {
            struct sdd_cqe c[8];
            int n = sdd_ep_poll(ep, c, 8);
            for (int k = 0; k < n; k++) {
                sent += c[k].kind == SDD_CQE_SEND && c[k].status == SDD_OK;
            }
        }
        CHECK_OK(err);
    }
    uint64_t t0 = sdd_now_ns();
    while (sent < 6 && sdd_now_ns() - t0 < 3 * SDD_NS_PER_S) {
        struct sdd_cqe c[8];
        int n = sdd_ep_wait(ep, c, 8, 100);
        for (int i = 0; i < n; i++) {
            sent += c[i].kind == SDD_CQE_SEND && c[i].status == SDD_OK;
        }
    }
    CHECK_EQ(sent, 6);
    struct sdd_rmem_server_stats st;
    t0 = sdd_now_ns();
    do {
        sdd_sleep_ns(5 * SDD_NS_PER_MS);
        sdd_rmem_server_stats(srv, &st);
    } while (st.bad_messages < 6 && sdd_now_ns() - t0 < 3 * SDD_NS_PER_S);
    CHECK_EQ(st.bad_messages, 6);

    /* Not an rmem client: refused at the handshake. */
    sdd_peer *wrong = NULL;
    err = sdd_ep_connect(ep, "127.0.0.1", port, "hi", 2, 2000, &wrong);
    if (err == SDD_OK) {
        sdd_peer_close(wrong); /* the server closes its side right after */
    }
    t0 = sdd_now_ns();
    do {
        sdd_sleep_ns(5 * SDD_NS_PER_MS);
        sdd_rmem_server_stats(srv, &st);
    } while (st.clients_refused < 1 && sdd_now_ns() - t0 < 3 * SDD_NS_PER_S);
    CHECK_EQ(st.clients_refused, 1);

    sdd_rmem_client *cl = attach(srv, &o);
    CHECK_OK(sdd_rmem_client_sync(cl));
    CHECK_OK(sdd_rmem_client_ping(cl, NULL));
    sdd_rmem_client_close(cl);
    sdd_ep_close(ep);

    /* A client pointed at something that is not an rmem server gets SDD_EPROTO. */
    sdd_ep *plain = NULL;
    sdd_listener *l = NULL;
    CHECK_REQUIRE(ft_open_ep(&plain, 0) == SDD_OK);
    CHECK_OK(sdd_ep_listen(plain, "127.0.0.1", 0, &l));
    pid_t pid = fork();
    if (pid == 0) {
        sdd_rmem_client *x = NULL;
        _exit(sdd_rmem_client_connect(&o, "127.0.0.1", sdd_listener_port(l), &x) == SDD_EPROTO ? 0
                                                                                               : 1);
    }
    sdd_peer *p2 = NULL;
    sdd_listener_accept(l, "not a region", 12, 3000, &p2);
    int status = -1;
    waitpid(pid, &status, 0);
    sdd_fabric_release_shm_of(pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    sdd_ep_close(plain);
    sdd_rmem_server_close(srv);
}

int main(int argc, char **argv)
{
    ft_init(argc, argv);
    test_calls();
    test_map_local();
    test_many_clients();
    test_resize();
    test_idle_client_dropped();
    test_server_death(true, false);
    test_server_death(false, false);
    test_server_death(true, true);
    test_server_death(false, true);
    test_client_death();
    test_full_server();
    test_garbage();
    return check_finish();
}
