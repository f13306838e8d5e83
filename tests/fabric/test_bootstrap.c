/* Conformance: joining peers. Connection refused; a listener nobody calls; info blobs up to
 * 64 KiB intact; and the bootstrap facing a TCP peer that is not sddaq: one that sends garbage,
 * one that closes at once, one that stays silent (clean errors in bounded time, the listener
 * still usable afterwards). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>

#include "fabtest.h"

/* A raw TCP listener on 127.0.0.1 with an ephemeral port. */
static int raw_listen(uint16_t *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(fd, 4) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
        return -1;
    }
    *port = ntohs(a.sin_port);
    return fd;
}

static int raw_connect(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {
        .sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        return -1;
    }
    return fd;
}

enum rogue { ROGUE_GARBAGE, ROGUE_CLOSE, ROGUE_SILENT, ROGUE_HTTP };

struct rogue_server {
    int fd;
    enum rogue how;
};

static void act(int fd, enum rogue how)
{
    static const char http[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    uint8_t junk[300];
    ft_fill(junk, sizeof(junk), 5, 0);
    if (how == ROGUE_GARBAGE) {
        (void)!write(fd, junk, sizeof(junk));
        usleep(200 * 1000);
    } else if (how == ROGUE_HTTP) {
        (void)!write(fd, http, sizeof(http) - 1);
        usleep(200 * 1000);
    } else if (how == ROGUE_SILENT) {
        usleep(1500 * 1000);
    }
    close(fd);
}

static void *rogue_server_main(void *arg)
{
    struct rogue_server *r = arg;
    int c = accept(r->fd, NULL, NULL);
    if (c >= 0) {
        act(c, r->how);
    }
    return NULL;
}

static void connect_to_rogue(sdd_ep *ep, enum rogue how, sdd_err want, const char *what)
{
    struct rogue_server r = {.how = how};
    uint16_t port = 0;
    r.fd = raw_listen(&port);
    CHECK_REQUIRE(r.fd >= 0);
    pthread_t t;
    pthread_create(&t, NULL, rogue_server_main, &r);
    sdd_peer *peer = NULL;
    uint64_t t0 = sdd_now_ns();
    sdd_err err = sdd_ep_connect(ep, "127.0.0.1", port, "x", 1, 500, &peer);
    uint64_t took = sdd_now_ns() - t0;
    printf("connect to a %s server: %s after %.1f ms\n", what, sdd_errname(err),
           (double)took / 1e6);
    CHECK_EQ(err, want);
    CHECK(peer == NULL);
    CHECK(took < 2 * SDD_NS_PER_S);
    pthread_join(t, NULL);
    close(r.fd);
}

struct rogue_client {
    uint16_t port;
    enum rogue how;
};

static void *rogue_client_main(void *arg)
{
    struct rogue_client *r = arg;
    int fd = raw_connect(r->port);
    if (fd >= 0) {
        act(fd, r->how);
    }
    return NULL;
}

static void accept_rogue(sdd_listener *l, enum rogue how, sdd_err want, const char *what)
{
    struct rogue_client r = {.port = sdd_listener_port(l), .how = how};
    pthread_t t;
    pthread_create(&t, NULL, rogue_client_main, &r);
    sdd_peer *peer = NULL;
    uint64_t t0 = sdd_now_ns();
    sdd_err err = sdd_listener_accept(l, "y", 1, 500, &peer);
    uint64_t took = sdd_now_ns() - t0;
    printf("accept a %s client: %s after %.1f ms\n", what, sdd_errname(err), (double)took / 1e6);
    CHECK_EQ(err, want);
    CHECK(peer == NULL);
    CHECK(took < 2 * SDD_NS_PER_S);
    pthread_join(t, NULL);
}

/* A real sddaq peer in a child process: connects to port and checks the blob it gets. */
static void real_client(uint16_t port, size_t blob_len)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        sdd_ep *ep = NULL;
        sdd_peer *peer = NULL;
        uint8_t *blob = malloc(blob_len);
        ft_fill(blob, blob_len, 11, 0);
        int ok = ft_open_ep(&ep, 0) == SDD_OK &&
                 sdd_ep_connect(ep, "127.0.0.1", port, blob, blob_len, 5000, &peer) == SDD_OK;
        size_t len = 0;
        const uint8_t *theirs = ok ? sdd_peer_info(peer, &len) : NULL;
        ok = ok && len == blob_len && ft_verify(theirs, len, 12, 0) == len;
        sdd_ep_close(ep);
        free(blob);
        _exit(ok ? 0 : 1);
    }
    (void)pid;
}

static int reap(void)
{
    int status = 0;
    wait(&status);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 100;
}

int main(int argc, char **argv)
{
    ft_init(argc, argv);
    sdd_ep *ep = NULL;
    CHECK_REQUIRE(ft_open_ep(&ep, 0) == SDD_OK);

    /* Nobody listening: refused at once. */
    uint16_t port = 0;
    int fd = raw_listen(&port);
    close(fd);
    sdd_peer *peer = NULL;
    uint64_t t0 = sdd_now_ns();
    CHECK_EQ(sdd_ep_connect(ep, "127.0.0.1", port, NULL, 0, 5000, &peer), SDD_ECONNREFUSED);
    CHECK(sdd_now_ns() - t0 < SDD_NS_PER_S);
    CHECK_EQ(sdd_ep_connect(ep, "no.such.host.invalid", 1, NULL, 0, 2000, &peer), SDD_EINVAL);

    /* sddaq talking to servers that are not sddaq. */
    connect_to_rogue(ep, ROGUE_GARBAGE, SDD_EPROTO, "garbage");
    connect_to_rogue(ep, ROGUE_HTTP, SDD_EPROTO, "HTTP");
    connect_to_rogue(ep, ROGUE_CLOSE, SDD_ECONNRESET, "closing");
    connect_to_rogue(ep, ROGUE_SILENT, SDD_ETIMEDOUT, "silent");

    /* A listener facing clients that are not sddaq, then serving a real one. */
    sdd_listener *l = NULL;
    CHECK_OK(sdd_ep_listen(ep, "127.0.0.1", 0, &l));
    CHECK_REQUIRE(l != NULL && sdd_listener_port(l) != 0);
    t0 = sdd_now_ns();
    CHECK_EQ(sdd_listener_accept(l, NULL, 0, 200, &peer), SDD_ETIMEDOUT);
    CHECK(sdd_now_ns() - t0 >= 150 * SDD_NS_PER_MS && sdd_now_ns() - t0 < 2 * SDD_NS_PER_S);
    accept_rogue(l, ROGUE_GARBAGE, SDD_EPROTO, "garbage");
    accept_rogue(l, ROGUE_HTTP, SDD_EPROTO, "HTTP");
    accept_rogue(l, ROGUE_CLOSE, SDD_ECONNRESET, "closing");
    accept_rogue(l, ROGUE_SILENT, SDD_ETIMEDOUT, "silent");

    /* Still usable: a real peer joins and both 64 KiB blobs cross intact. */
    size_t blob_len = 64 * 1024;
    uint8_t *blob = malloc(blob_len);
    ft_fill(blob, blob_len, 12, 0);
    real_client(sdd_listener_port(l), blob_len);
    sdd_err err = sdd_listener_accept(l, blob, blob_len, 5000, &peer);
    CHECK_OK(err);
    if (err == SDD_OK) {
        size_t len = 0;
        const uint8_t *theirs = sdd_peer_info(peer, &len);
        CHECK_EQ(len, blob_len);
        CHECK_EQ(ft_verify(theirs, len, 11, 0), blob_len);
        CHECK_OK(sdd_peer_status(peer));
    }
    CHECK_EQ(reap(), 0);
    /* Too large a blob is refused before anything is sent. */
    CHECK_EQ(sdd_ep_connect(ep, "127.0.0.1", sdd_listener_port(l), blob, blob_len + 1, 500, &peer),
             SDD_EINVAL);
    free(blob);
    sdd_ep_close(ep);
    return check_finish();
}
