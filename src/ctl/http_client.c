/* A minimal HTTP/1.1 client over plain POSIX sockets, enough for `sddaq ctl` and the tests:
 * one request per connection ("Connection: close"), a response with Content-Length or read
 * to the end, every wait bounded by poll(). No new dependency (no libcurl). */
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sddaq/clock.h"
#include "sddaq/ctl.h"

#define RESP_MAX (16u << 20)

static sdd_err wait_fd(int fd, short events, int timeout_ms)
{
    struct pollfd p = {fd, events, 0};
    for (;;) {
        int n = poll(&p, 1, timeout_ms);
        if (n > 0) {
            return SDD_OK;
        }
        if (n == 0) {
            return SDD_ETIMEDOUT;
        }
        if (errno != EINTR) {
            return sdd_err_from_errno(errno);
        }
    }
}

static struct addrinfo *resolve(const char *host, uint16_t port)
{
    struct addrinfo hints = {0}, *ai = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    char ps[8];
    snprintf(ps, sizeof(ps), "%u", port);
    return getaddrinfo(host, ps, &hints, &ai) == 0 ? ai : NULL;
}

/* Start a non-blocking connect to a; *fd stays -1 when it failed at once (the error returned). */
static sdd_err start_connect(const struct addrinfo *a, int *fd)
{
    *fd = -1;
    int s = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (s < 0) {
        return sdd_err_from_errno(errno);
    }
    if (connect(s, a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
        sdd_err err = sdd_err_from_errno(errno);
        close(s);
        return err;
    }
    *fd = s;
    return SDD_OK;
}

/* How a connect that poll() reported on ended. */
static sdd_err connect_result(int fd)
{
    int so = 0;
    socklen_t sl = sizeof(so);
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &so, &sl) != 0) {
        return sdd_err_from_errno(errno);
    }
    return so != 0 ? sdd_err_from_errno(so) : SDD_OK;
}

static sdd_err connect_to(const char *host, uint16_t port, int timeout_ms, int *out)
{
    struct addrinfo *ai = resolve(host, port);
    if (ai == NULL) {
        return SDD_EINVAL;
    }
    sdd_err err = SDD_ECONNREFUSED;
    for (struct addrinfo *a = ai; a != NULL; a = a->ai_next) {
        int fd = -1;
        err = start_connect(a, &fd);
        if (err == SDD_OK) {
            err = wait_fd(fd, POLLOUT, timeout_ms);
        }
        if (err == SDD_OK) {
            err = connect_result(fd);
        }
        if (err == SDD_OK) {
            *out = fd;
            break;
        }
        if (fd >= 0) {
            close(fd);
        }
    }
    freeaddrinfo(ai);
    return err;
}

sdd_err sdd_http_probe(const char *host, uint16_t port, int timeout_ms)
{
    int fd = -1;
    sdd_err err = connect_to(host, port, timeout_ms, &fd);
    if (err == SDD_OK) {
        close(fd);
    }
    return err;
}

void sdd_http_probe_all(const char *const *hosts, const uint16_t *ports, size_t n, int timeout_ms,
                        sdd_err *out)
{
    struct pollfd *p = calloc(n ? n : 1, sizeof(*p));
    if (p == NULL) { /* one at a time, then */
        for (size_t i = 0; i < n; i++) {
            out[i] = sdd_http_probe(hosts[i], ports[i], timeout_ms);
        }
        return;
    }
    size_t pending = 0;
    for (size_t i = 0; i < n; i++) {
        struct addrinfo *ai = resolve(hosts[i], ports[i]); /* its first address only */
        p[i].fd = -1;
        p[i].events = POLLOUT;
        sdd_err err = ai != NULL ? start_connect(ai, &p[i].fd) : SDD_EINVAL;
        if (ai != NULL) {
            freeaddrinfo(ai);
        }
        out[i] = err == SDD_OK ? SDD_ETIMEDOUT : err; /* until it answers */
        pending += err == SDD_OK;
    }
    uint64_t end = sdd_now_ns() + (uint64_t)timeout_ms * SDD_NS_PER_MS;
    while (pending > 0) {
        uint64_t now = sdd_now_ns();
        if (now >= end) {
            break;
        }
        int left = (int)((end - now + SDD_NS_PER_MS - 1) / SDD_NS_PER_MS);
        int k = poll(p, (nfds_t)n, left); /* an fd of -1 is skipped */
        if (k < 0 && errno != EINTR) {
            break;
        }
        for (size_t i = 0; k > 0 && i < n; i++) {
            if (p[i].fd < 0 || p[i].revents == 0) {
                continue;
            }
            out[i] = connect_result(p[i].fd);
            close(p[i].fd);
            p[i].fd = -1;
            pending--;
        }
    }
    for (size_t i = 0; i < n; i++) {
        if (p[i].fd >= 0) {
            close(p[i].fd);
        }
    }
    free(p);
}

bool sdd_http_reachable(const char *host, uint16_t port, int timeout_ms)
{
    return sdd_http_probe(host, port, timeout_ms) == SDD_OK;
}

static sdd_err send_all(int fd, const char *p, size_t len, int timeout_ms)
{
    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            sdd_err err = wait_fd(fd, POLLOUT, timeout_ms);
            if (err != SDD_OK) {
                return err;
            }
        } else if (n < 0 && errno != EINTR) {
            return sdd_err_from_errno(errno);
        }
    }
    return SDD_OK;
}

/* Find a header's value in the head (between the status line and the blank line). */
static const char *header(const char *head, const char *name)
{
    size_t nl = strlen(name);
    for (const char *line = strstr(head, "\r\n"); line != NULL; line = strstr(line, "\r\n")) {
        line += 2;
        if (strncasecmp(line, name, nl) == 0 && line[nl] == ':') {
            const char *v = line + nl + 1;
            while (*v == ' ' || *v == '\t') {
                v++;
            }
            return v;
        }
    }
    return NULL;
}

sdd_err sdd_http_request(const char *host, uint16_t port, const char *method, const char *path,
                         const char *body, int timeout_ms, int *status, char **resp,
                         size_t *resp_len)
{
    if (host == NULL || method == NULL || path == NULL || status == NULL || resp == NULL) {
        return SDD_EINVAL;
    }
    int fd = -1;
    sdd_err err = connect_to(host, port, timeout_ms, &fd);
    if (err != SDD_OK) {
        return err;
    }
    size_t blen = body != NULL ? strlen(body) : 0;
    char head[1024], clen[96] = "";
    bool v6 = strchr(host, ':') != NULL; /* an IPv6 literal goes in brackets in Host */
    if (body != NULL) {
        snprintf(clen, sizeof(clen), "Content-Type: application/json\r\nContent-Length: %zu\r\n",
                 blen);
    }
    int hn = snprintf(head, sizeof(head),
                      "%s %s HTTP/1.1\r\nHost: %s%s%s:%u\r\nConnection: close\r\n"
                      "User-Agent: sddaq\r\nAccept: */*\r\n%s\r\n",
                      method, path, v6 ? "[" : "", host, v6 ? "]" : "", port, clen);
    char *buf = NULL;
    if (hn < 0 || (size_t)hn >= sizeof(head)) {
        err = SDD_EINVAL;
        goto out_close;
    }
    if ((err = send_all(fd, head, (size_t)hn, timeout_ms)) != SDD_OK ||
        (err = send_all(fd, body != NULL ? body : "", blen, timeout_ms)) != SDD_OK) {
        goto out_close;
    }
    size_t cap = 4096, len = 0;
    buf = malloc(cap);
    if (buf == NULL) {
        err = SDD_ENOMEM;
        goto out_close;
    }
    for (;;) {
        if (len + 1 >= cap) {
            if (cap > RESP_MAX) {
                err = SDD_ETOOBIG;
                goto out_close;
            }
            char *p = realloc(buf, cap * 2);
            if (p == NULL) {
                err = SDD_ENOMEM;
                goto out_close;
            }
            buf = p;
            cap *= 2;
        }
        ssize_t n = recv(fd, buf + len, cap - len - 1, 0);
        if (n > 0) {
            len += (size_t)n;
        } else if (n == 0) {
            break;
        } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
            if ((err = wait_fd(fd, POLLIN, timeout_ms)) != SDD_OK) {
                goto out_close;
            }
        } else if (errno == ECONNRESET && len > 0) {
            break; /* a server that answers early (413) may reset after sending */
        } else if (errno != EINTR) {
            err = sdd_err_from_errno(errno);
            goto out_close;
        }
    }
    buf[len] = '\0';
    char *end = strstr(buf, "\r\n\r\n");
    int code = 0;
    if (end == NULL || sscanf(buf, "HTTP/1.%*d %d", &code) != 1 || code < 100 || code > 999) {
        err = SDD_EPROTO;
        goto out_close;
    }
    *end = '\0';
    const char *te = header(buf, "Transfer-Encoding");
    if (te != NULL && strncasecmp(te, "chunked", 7) == 0) {
        err = SDD_EPROTO;
        goto out_close;
    }
    const char *body_start = end + 4;
    size_t blen_resp = len - (size_t)(body_start - buf);
    const char *cl = header(buf, "Content-Length");
    if (strcmp(method, "HEAD") == 0) {
        blen_resp = 0; /* the length is of the body a GET would get */
    } else if (cl != NULL) {
        unsigned long long want = strtoull(cl, NULL, 10);
        if (want > blen_resp) {
            err = SDD_EPROTO; /* connection closed early */
            goto out_close;
        }
        blen_resp = (size_t)want;
    }
    char *out = malloc(blen_resp + 1);
    if (out == NULL) {
        err = SDD_ENOMEM;
        goto out_close;
    }
    memcpy(out, body_start, blen_resp);
    out[blen_resp] = '\0';
    *status = code;
    *resp = out;
    if (resp_len != NULL) {
        *resp_len = blen_resp;
    }
out_close:
    free(buf);
    close(fd);
    return err;
}
