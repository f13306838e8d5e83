/* Self-synchronizing buffer over one provider (argv[1]): every call, callbacks, freeze/thaw,
 * a writer far faster than the clone with every delivered element's content verified (zero
 * torn deliveries), server death while a clone waits, and a clone of memory that is no ring. */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>

#include "rmtest.h"
#include "sddaq/rmem.h"

static uint64_t slow = 1; /* pace multiplier for slow copy paths */

/* Element content: the pattern of its sequence number, so any mix of two elements shows. */
static void fill_elem(uint8_t *p, size_t len, uint64_t seq)
{
    ft_fill(p, len, (uint32_t)seq * 2654435761u, seq);
}

static bool elem_ok(const struct sdd_ksb_elem *e)
{
    return ft_verify(e->data, e->len, (uint32_t)e->seq * 2654435761u, e->seq) == e->len;
}

static int cb_calls;
static bool count_twice(sdd_ksb *k, const struct sdd_ksb_elem *e, void *user)
{
    (void)k;
    (void)e;
    (void)user;
    return ++cb_calls < 2;
}

static void test_calls(void)
{
    struct sdd_rmem_opts o = opts_for_test();
    const size_t esz = 1000;
    sdd_ksb *srv = NULL, *cl = NULL;
    CHECK_OK(sdd_ksb_serve(&o, esz, &srv));
    CHECK_REQUIRE(srv != NULL);
    CHECK_OK(sdd_ksb_clone(&o, "127.0.0.1", sdd_rmem_server_port(sdd_ksb_server(srv)), &cl));
    CHECK_REQUIRE(cl != NULL);
    CHECK_EQ(sdd_ksb_element_size(cl), esz);
    struct sdd_ksb_elem e;
    CHECK_EQ(sdd_ksb_update(cl, &e), SDD_EAGAIN);
    CHECK_EQ(sdd_ksb_current(cl, &e), SDD_EAGAIN);

    uint8_t buf[1000];
    fill_elem(buf, esz, 1);
    CHECK_OK(sdd_ksb_push(srv, buf, esz));
    CHECK_OK(sdd_ksb_update(cl, &e));
    CHECK_EQ(e.seq, 1);
    CHECK_EQ(e.len, esz);
    CHECK(elem_ok(&e));
    CHECK_EQ(sdd_ksb_update(cl, &e), SDD_EAGAIN); /* nothing new */

    for (uint64_t s = 2; s <= 4; s++) {
        fill_elem(sdd_ksb_reserve(srv), esz, s);
        sdd_ksb_commit(srv);
    }
    CHECK_OK(sdd_ksb_wait_next(cl, 1000, &e));
    CHECK_EQ(e.seq, 4); /* the newest; 2 and 3 skipped */
    CHECK(elem_ok(&e));
    struct sdd_ksb_elem cur;
    CHECK_OK(sdd_ksb_current(cl, &cur));
    CHECK_EQ(cur.seq, 4);
    CHECK_EQ(sdd_ksb_wait_next(cl, 30, &e), SDD_ETIMEDOUT);

    /* Short pushes are zero-padded; oversize ones refused. */
    CHECK_OK(sdd_ksb_push(srv, "abc", 3));
    CHECK_OK(sdd_ksb_wait_next(cl, 1000, &e));
    CHECK(memcmp(e.data, "abc", 3) == 0 && ((const uint8_t *)e.data)[3] == 0);
    CHECK_EQ(sdd_ksb_push(srv, buf, esz + 1), SDD_ETOOBIG);

    /* Callbacks run per delivery; returning false unsubscribes. */
    CHECK_OK(sdd_ksb_on_update(cl, count_twice, NULL));
    for (uint64_t s = 6; s <= 9; s++) {
        fill_elem(buf, esz, s);
        CHECK_OK(sdd_ksb_push(srv, buf, esz));
        CHECK_OK(sdd_ksb_wait_next(cl, 1000, &e));
        CHECK_EQ(e.seq, s);
        CHECK(elem_ok(&e));
    }
    CHECK_EQ(cb_calls, 2);

    /* Frozen: nothing is fetched. */
    sdd_ksb_freeze(cl);
    CHECK_OK(sdd_ksb_push(srv, buf, esz));
    CHECK_EQ(sdd_ksb_update(cl, &e), SDD_EAGAIN);
    sdd_ksb_thaw(cl);
    CHECK_OK(sdd_ksb_update(cl, &e));
    CHECK_EQ(e.seq, 10);

    struct sdd_ksb_stats st;
    sdd_ksb_stats(cl, &st);
    CHECK_EQ(st.delivered, 8);
    CHECK_EQ(st.skipped, 2);
    CHECK_EQ(st.age.count, 8);
    CHECK(st.header_polls >= 8);
    sdd_ksb_stats(srv, &st);
    CHECK_EQ(st.pushes, 10);
    CHECK_EQ(sdd_ksb_update(srv, &e), SDD_EINVAL);         /* not a clone */
    CHECK_EQ(sdd_ksb_set_in_place(cl, true), SDD_ENOTSUP); /* not mapped: opts.map_local off */
    sdd_ksb_close(cl);
    sdd_ksb_close(srv);

    /* More cells: the clone follows whatever geometry it finds. */
    CHECK_EQ(sdd_ksb_serve_cells(&o, esz, 2, &srv), SDD_EINVAL);
    CHECK_OK(sdd_ksb_serve_cells(&o, esz, 7, &srv));
    CHECK_REQUIRE(srv != NULL);
    CHECK_OK(sdd_ksb_clone(&o, "127.0.0.1", sdd_rmem_server_port(sdd_ksb_server(srv)), &cl));
    CHECK_REQUIRE(cl != NULL);
    for (uint64_t s = 1; s <= 9; s++) {
        fill_elem(buf, esz, s);
        CHECK_OK(sdd_ksb_push(srv, buf, esz));
        if (s == 4 || s >= 8) {
            CHECK_OK(sdd_ksb_wait_next(cl, 1000, &e));
            CHECK_EQ(e.seq, s);
            CHECK(elem_ok(&e));
        }
    }
    sdd_ksb_stats(cl, &st);
    CHECK_EQ(st.skipped, 3); /* 5, 6, 7: what came before the first delivery is not counted */
    sdd_ksb_close(cl);

    /* Every element in order while held; when lapped, on from the newest. */
    CHECK_OK(sdd_ksb_clone(&o, "127.0.0.1", sdd_rmem_server_port(sdd_ksb_server(srv)), &cl));
    CHECK_REQUIRE(cl != NULL);
    sdd_ksb_set_mode(cl, SDD_KSB_EVERY);
    CHECK_OK(sdd_ksb_wait_next(cl, 1000, &e));
    CHECK_EQ(e.seq, 9); /* the newest at the start */
    for (uint64_t s = 10; s <= 14; s++) {
        fill_elem(buf, esz, s);
        CHECK_OK(sdd_ksb_push(srv, buf, esz));
    }
    for (uint64_t s = 10; s <= 14; s++) {
        CHECK_OK(sdd_ksb_wait_next(cl, 1000, &e));
        CHECK_EQ(e.seq, s);
        CHECK(elem_ok(&e));
    }
    for (uint64_t s = 15; s <= 40; s++) { /* laps the clone: 7 cells hold 34..40 */
        fill_elem(buf, esz, s);
        CHECK_OK(sdd_ksb_push(srv, buf, esz));
    }
    CHECK_OK(sdd_ksb_wait_next(cl, 1000, &e)); /* lapped: on from the newest */
    CHECK_EQ(e.seq, 40);
    CHECK(elem_ok(&e));
    CHECK_EQ(sdd_ksb_update(cl, &e), SDD_EAGAIN);
    sdd_ksb_stats(cl, &st);
    CHECK_EQ(st.skipped, 25); /* 15..39 */
    CHECK_EQ(st.delivered + st.skipped, 40 - 9 + 1);
    sdd_ksb_close(cl);
    sdd_ksb_close(srv);
}

/* ---- a writer far faster than the reader -------------------------------------------------- */

struct writer {
    sdd_ksb *k;
    size_t esz;
    uint64_t pace_ns; /* between pushes; 0 = flat out */
    atomic_bool stop;
    uint64_t pushed;
};

static void *write_loop(void *arg)
{
    struct writer *w = arg;
    uint64_t s = 0;
    uint64_t next = sdd_now_ns();
    while (!atomic_load(&w->stop)) {
        uint64_t now = sdd_now_ns();
        if (w->pace_ns != 0 && now < next) {
            sdd_sleep_ns(next - now); /* a camera waits for its next frame, it does not spin */
        }
        next += w->pace_ns;
        fill_elem(sdd_ksb_reserve(w->k), w->esz, ++s);
        sdd_ksb_commit(w->k);
    }
    w->pushed = s;
    return NULL;
}

/* Child: serve and write flat out until told to stop (a byte on cmd), report the count. */
static pid_t spawn_writer(size_t esz, uint64_t pace_ns, uint16_t *port, int *cmd_fd, int *res_fd)
{
    int pp[2], cp[2], rp[2];
    CHECK_REQUIRE(pipe(pp) == 0 && pipe(cp) == 0 && pipe(rp) == 0);
    pid_t pid = fork();
    CHECK_REQUIRE(pid >= 0);
    if (pid == 0) {
        close(pp[0]);
        close(cp[1]); /* so a parent that dies ends this child through EOF */
        close(rp[0]);
        struct sdd_rmem_opts o = opts_for_test();
        struct writer w = {.esz = esz, .pace_ns = pace_ns};
        if (sdd_ksb_serve(&o, esz, &w.k) != SDD_OK) {
            _exit(2);
        }
        uint16_t p = sdd_rmem_server_port(sdd_ksb_server(w.k));
        pthread_t th;
        pthread_create(&th, NULL, write_loop, &w);
        char c;
        if (write(pp[1], &p, sizeof(p)) != sizeof(p) || read(cp[0], &c, 1) != 1) {
            _exit(3);
        }
        atomic_store(&w.stop, true);
        pthread_join(th, NULL);
        if (write(rp[1], &w.pushed, sizeof(w.pushed)) != sizeof(w.pushed)) {
            _exit(4);
        }
        sdd_ksb_close(w.k);
        _exit(0);
    }
    close(pp[1]);
    close(cp[0]);
    close(rp[1]);
    CHECK_REQUIRE(read(pp[0], port, sizeof(*port)) == sizeof(*port));
    close(pp[0]);
    *cmd_fd = cp[1];
    *res_fd = rp[0];
    return pid;
}

/* A writer pushing every pace_ns (0: flat out, which may starve a reader whose fetch takes
 * longer than two pushes: then every fetch is torn, and none may be delivered broken). */
static void test_fast_writer(size_t esz, uint64_t pace_ns, sdd_ksb_mode mode)
{
    struct sdd_rmem_opts o = opts_for_test();
    uint16_t port;
    int cmd, res;
    pid_t pid = spawn_writer(esz, pace_ns, &port, &cmd, &res);
    sdd_ksb *cl = NULL;
    CHECK_OK(sdd_ksb_clone(&o, "127.0.0.1", port, &cl));
    CHECK_REQUIRE(cl != NULL);
    sdd_ksb_set_mode(cl, mode);
    uint64_t bad = 0, got = 0, first = 0, last = 0, backwards = 0;
    uint64_t t0 = sdd_now_ns();
    /* Wait well beyond one writer period: a 100 ms wait on a 100 ms writer times out
     * whenever a push comes late. */
    int wait_ms = (int)(3 * pace_ns / SDD_NS_PER_MS) + 100;
    while (sdd_now_ns() - t0 < 1500 * SDD_NS_PER_MS) {
        struct sdd_ksb_elem e;
        sdd_err err = sdd_ksb_wait_next(cl, wait_ms, &e);
        if (err == SDD_ETIMEDOUT && pace_ns == 0) {
            continue; /* starved by the writer: counted as torn retries */
        }
        if (err != SDD_OK) {
            CHECK_OK(err);
            break;
        }
        got++;
        first = first == 0 ? e.seq : first;
        bad += !elem_ok(&e);
        backwards += e.seq <= last;
        last = e.seq;
    }
    CHECK(write(cmd, "x", 1) == 1);
    uint64_t pushed = 0;
    CHECK(read(res, &pushed, sizeof(pushed)) == sizeof(pushed));
    int status = -1;
    waitpid(pid, &status, 0);
    sdd_fabric_release_shm_of(pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    struct sdd_ksb_stats st;
    sdd_ksb_stats(cl, &st);
    printf("%s: writer every %" PRIu64 " ns, %zu-byte elements: %" PRIu64 " pushed, %" PRIu64
           " delivered, %" PRIu64 " skipped, %" PRIu64 " torn and retried, %" PRIu64 " bad\n",
           mode == SDD_KSB_EVERY ? "every" : "newest", pace_ns, esz, pushed, got, st.skipped,
           st.torn_retries, bad);
    CHECK(got > (pace_ns >= 5 * SDD_NS_PER_MS ? 5 : 100) ||
          (pace_ns == 0 && st.torn_retries > 100));
    CHECK_EQ(bad, 0);
    CHECK_EQ(backwards, 0);
    CHECK(pushed > got); /* the writer really was faster */
    CHECK_EQ(st.delivered, got);
    /* every element since the first delivered one was delivered or counted as skipped */
    CHECK_EQ(st.skipped + st.delivered, got > 0 ? last - first + 1 : 0);
    sdd_ksb_close(cl);
    close(cmd);
    close(res);
}

/* ---- same host: mapped, copied with loads or used in place ------------------------------ */

static void test_local(bool in_place, uint64_t pace_ns)
{
    struct sdd_rmem_opts o = opts_for_test();
    o.map_local = true;
    uint16_t port;
    int cmd, res;
    pid_t pid = spawn_writer(65536, pace_ns, &port, &cmd, &res);
    sdd_ksb *cl = NULL;
    CHECK_OK(sdd_ksb_clone(&o, "127.0.0.1", port, &cl));
    CHECK_REQUIRE(cl != NULL);
    if (in_place) {
        CHECK_OK(sdd_ksb_set_in_place(cl, true));
    }
    uint64_t got = 0, accepted = 0, accepted_bad = 0, t0 = sdd_now_ns();
    while (sdd_now_ns() - t0 < SDD_NS_PER_S) {
        struct sdd_ksb_elem e;
        sdd_err err = sdd_ksb_wait_next(cl, 100, &e);
        if (err == SDD_ETIMEDOUT) {
            continue;
        }
        if (err != SDD_OK) {
            CHECK_OK(err);
            break;
        }
        got++;
        bool ok = elem_ok(&e); /* in place: reads the live cell, like a user would */
        if (sdd_ksb_valid(cl, &e) == SDD_OK) {
            accepted++;
            accepted_bad += !ok;
        }
    }
    CHECK(write(cmd, "x", 1) == 1);
    uint64_t pushed = 0;
    CHECK(read(res, &pushed, sizeof(pushed)) == sizeof(pushed));
    waitpid(pid, NULL, 0);
    sdd_fabric_release_shm_of(pid);
    struct sdd_ksb_stats st;
    sdd_ksb_stats(cl, &st);
    printf("same host, %s, writer every %" PRIu64 " ns: %" PRIu64 " pushed, %" PRIu64
           " delivered, %" PRIu64 " valid, %" PRIu64 " invalidated, %" PRIu64
           " torn and retried, %" PRIu64 " valid but bad\n",
           in_place ? "in place" : "copied", pace_ns, pushed, got, accepted, st.invalidated,
           st.torn_retries, accepted_bad);
    CHECK(accepted > 100);
    CHECK_EQ(accepted_bad, 0); /* the seqlock read never vouches for a torn element */
    CHECK_EQ(accepted + st.invalidated, got);
    if (!in_place) {
        CHECK_EQ(st.invalidated, 0);
    }
    sdd_ksb_close(cl);
    close(cmd);
    close(res);
}

/* ---- automatic updates -------------------------------------------------------------------- */

struct seen {
    atomic_ulong calls;
    atomic_ulong bad;
};

static bool on_update(sdd_ksb *k, const struct sdd_ksb_elem *e, void *user)
{
    (void)k;
    struct seen *s = user;
    atomic_fetch_add(&s->calls, 1);
    if (!elem_ok(e)) {
        atomic_fetch_add(&s->bad, 1);
    }
    return true;
}

static void test_thread(void)
{
    struct sdd_rmem_opts o = opts_for_test();
    const size_t esz = 16384;
    uint16_t port;
    int cmd, res;
    pid_t pid = spawn_writer(esz, 50 * SDD_NS_PER_US * slow, &port, &cmd, &res);
    sdd_ksb *cl = NULL;
    CHECK_OK(sdd_ksb_clone(&o, "127.0.0.1", port, &cl));
    CHECK_REQUIRE(cl != NULL);
    struct seen seen = {0};
    CHECK_OK(sdd_ksb_on_update(cl, on_update, &seen));
    CHECK_OK(sdd_ksb_start(cl));
    CHECK_EQ(sdd_ksb_update(cl, NULL), SDD_EINVAL); /* the thread owns it now */
    uint64_t t0 = sdd_now_ns();
    while (atomic_load(&seen.calls) < 20 && sdd_now_ns() - t0 < 5 * SDD_NS_PER_S) {
        sdd_sleep_ns(SDD_NS_PER_MS);
    }
    CHECK(atomic_load(&seen.calls) >= 20);
    sdd_ksb_freeze(cl);
    unsigned long frozen_at = atomic_load(&seen.calls);
    struct sdd_ksb_elem e;
    CHECK_REQUIRE(sdd_ksb_current(cl, &e) == SDD_OK);
    uint64_t seq = e.seq;
    sdd_sleep_ns(50 * SDD_NS_PER_MS);
    CHECK_EQ(atomic_load(&seen.calls), frozen_at); /* nothing fetched while frozen */
    CHECK_OK(sdd_ksb_current(cl, &e));
    CHECK_EQ(e.seq, seq);
    CHECK(elem_ok(&e)); /* and the frozen element stayed whole */
    sdd_ksb_thaw(cl);
    t0 = sdd_now_ns();
    while (atomic_load(&seen.calls) == frozen_at && sdd_now_ns() - t0 < 5 * SDD_NS_PER_S) {
        sdd_sleep_ns(SDD_NS_PER_MS);
    }
    CHECK(atomic_load(&seen.calls) > frozen_at);
    CHECK_EQ(atomic_load(&seen.bad), 0);
    CHECK(write(cmd, "x", 1) == 1);
    uint64_t pushed;
    CHECK(read(res, &pushed, sizeof(pushed)) == sizeof(pushed));
    waitpid(pid, NULL, 0);
    sdd_fabric_release_shm_of(pid);
    sdd_ksb_close(cl);
    close(cmd);
    close(res);
}

/* ---- failures ----------------------------------------------------------------------------- */

static void test_server_death(void)
{
    struct sdd_rmem_opts o = opts_for_test();
    uint16_t port;
    int cmd, res;
    pid_t pid = spawn_writer(4096, 50 * SDD_NS_PER_US * slow, &port, &cmd, &res);
    sdd_ksb *cl = NULL;
    CHECK_OK(sdd_ksb_clone(&o, "127.0.0.1", port, &cl));
    CHECK_REQUIRE(cl != NULL);
    CHECK_OK(sdd_ksb_wait_next(cl, 1000, NULL));
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    sdd_fabric_release_shm_of(pid);
    uint64_t t0 = sdd_now_ns();
    sdd_err err;
    while ((err = sdd_ksb_wait_next(cl, 10000, NULL)) == SDD_OK) {
    }
    uint64_t took = sdd_now_ns() - t0;
    printf("server killed: clone fails with %s after %.1f ms\n", sdd_errname(err), took / 1e6);
    CHECK(err == SDD_EPEERDEAD || err == SDD_ECONNRESET);
    CHECK(took < 6 * SDD_NS_PER_S);
    sdd_ksb_close(cl);
    close(cmd);
    close(res);
}

static void test_not_a_ring(void)
{
    struct sdd_rmem_opts o = opts_for_test();
    sdd_rmem_server *srv = NULL;
    CHECK_OK(sdd_rmem_server_open(&o, NULL, 8192, &srv));
    CHECK_REQUIRE(srv != NULL);
    memset(sdd_rmem_server_region(srv, NULL), 0x5a, 8192);
    sdd_ksb *cl = NULL;
    CHECK_EQ(sdd_ksb_clone(&o, "127.0.0.1", sdd_rmem_server_port(srv), &cl), SDD_ECORRUPT);
    CHECK(cl == NULL);
    sdd_rmem_server_close(srv);
}

int main(int argc, char **argv)
{
    ft_init(argc, argv);
    test_calls();
    test_fast_writer(4096, 0, SDD_KSB_NEWEST);
    test_fast_writer(256 * 1024, 0, SDD_KSB_NEWEST);
    test_fast_writer(4096, 0, SDD_KSB_EVERY);
    /* shm without CMA copies through bounce buffers, with the server's thread in the loop: a
     * fetch takes milliseconds, so the writer must leave it that much time. Over tcp every
     * read needs the server's thread too: a fetch takes about 100 us. */
    slow = getenv("FI_SHM_DISABLE_CMA") != NULL ? 500 : strcmp(ft_provider, "tcp") == 0 ? 10 : 1;
    test_fast_writer(4096, 10 * SDD_NS_PER_US * slow, SDD_KSB_NEWEST);
    test_fast_writer(256 * 1024, 200 * SDD_NS_PER_US * slow, SDD_KSB_NEWEST);
    test_fast_writer(256 * 1024, 200 * SDD_NS_PER_US * slow, SDD_KSB_EVERY);
    test_local(false, 0);
    test_local(true, 0);
    test_local(true, 20 * SDD_NS_PER_US);
    test_thread();
    test_server_death();
    test_not_a_ring();
    return check_finish();
}
