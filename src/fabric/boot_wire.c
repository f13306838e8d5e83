/* TCP bootstrap wire protocol: address resolution, deadline-bounded non-blocking connect, accept,
 * send and receive, frame and HELLO encoding and validation, and the liveness check. Everything
 * a peer sends is validated before it is trusted or allocated for; every error is logged once
 * (component "boot") at the place it is decided, with the original errno where there is one. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* accept4, GNU strerror_r; also set by the build */
#endif

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core/le.h"
#include "fabric/boot_wire.h"
#include "sddaq/clock.h"
#include "sddaq/log.h"

#define LISTEN_BACKLOG  64
#define REJECT_LOG_MAX  160   /* characters of a peer's REJECT reason that reach the log */
#define KEEPALIVE_MAX_S 32767 /* kernel limit for TCP_KEEPIDLE and TCP_KEEPINTVL */

static const char *errstr(int e, char *buf, size_t len)
{
    return strerror_r(e, buf, len); /* GNU variant: returns the message, maybe not in buf */
}

static const char *type_name(uint16_t type)
{
    switch (type) {
    case BOOT_HELLO:
        return "HELLO";
    case BOOT_READY:
        return "READY";
    case BOOT_BYE:
        return "BYE";
    case BOOT_REJECT:
        return "REJECT";
    }
    return "unknown";
}

/* ---- encoding ---------------------------------------------------------------------------- */

/* Bitwise rather than table-driven: it only ever covers 12 header bytes, and needs no
 * initialisation that threads could race on. */
uint32_t boot_crc32c(const void *buf, size_t len)
{
    const uint8_t *p = buf;
    uint32_t crc = 0xFFFFFFFFu;
    for (size_t i = 0; i < len; i++) {
        crc ^= p[i];
        for (int k = 0; k < 8; k++) {
            crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
        }
    }
    return crc ^ 0xFFFFFFFFu;
}

static void header_encode(uint8_t h[BOOT_HEADER_LEN], uint16_t type, uint32_t len)
{
    put_le32(h, BOOT_MAGIC);
    put_le16(h + 4, BOOT_VERSION);
    put_le16(h + 6, type);
    put_le32(h + 8, len);
    put_le32(h + 12, boot_crc32c(h, 12));
}

/* Magic first (is this our protocol at all?), version before the checksum (a newer peer may
 * checksum differently, and "unsupported version" is the useful message), then the checksum
 * before trusting type and length. */
static sdd_err header_decode(const uint8_t h[BOOT_HEADER_LEN], uint16_t *type_out,
                             uint32_t *len_out)
{
    uint32_t magic = get_le32(h);
    uint16_t version = get_le16(h + 4);
    uint16_t type = get_le16(h + 6);
    uint32_t len = get_le32(h + 8);
    uint32_t crc = get_le32(h + 12);

    if (magic != BOOT_MAGIC) {
        SDD_WARN("boot",
                 "bad frame magic 0x%08x (want 0x%08x): peer does not speak the sddaq "
                 "bootstrap protocol",
                 magic, BOOT_MAGIC);
        return SDD_EPROTO;
    }
    if (version != BOOT_VERSION) {
        SDD_WARN("boot", "peer speaks bootstrap protocol version %u, this side only %u",
                 (unsigned)version, (unsigned)BOOT_VERSION);
        return SDD_EPROTO;
    }
    uint32_t want = boot_crc32c(h, 12);
    if (crc != want) {
        SDD_WARN("boot", "frame header checksum 0x%08x, computed 0x%08x: corrupt header", crc,
                 want);
        return SDD_EPROTO;
    }
    if (type < BOOT_HELLO || type > BOOT_REJECT) {
        SDD_WARN("boot", "unknown frame type %u", (unsigned)type);
        return SDD_EPROTO;
    }
    if (len > BOOT_MAX_PAYLOAD) {
        SDD_WARN("boot", "%s frame announces %u payload bytes, limit %u", type_name(type), len,
                 BOOT_MAX_PAYLOAD);
        return SDD_EPROTO;
    }
    if ((type == BOOT_READY || type == BOOT_BYE) && len != 0) {
        SDD_WARN("boot", "%s frame with a %u-byte payload (must be empty)", type_name(type), len);
        return SDD_EPROTO;
    }
    *type_out = type;
    *len_out = len;
    return SDD_OK;
}

/* ---- socket plumbing --------------------------------------------------------------------- */

/* Map an errno from send/recv on an established connection and log it. The kernel reports a
 * keepalive or TCP_USER_TIMEOUT expiry as ETIMEDOUT: that is a dead peer, not our deadline. */
static sdd_err conn_error(int e, const char *op)
{
    char buf[128];
    sdd_err err;
    switch (e) {
    case ECONNRESET:
    case EPIPE:
    case ECONNABORTED:
        err = SDD_ECONNRESET;
        break;
    case ETIMEDOUT:
    case EHOSTUNREACH:
    case ENETUNREACH:
    case EHOSTDOWN:
    case ENETDOWN:
        err = SDD_EPEERDEAD;
        break;
    case EBADF:
    case ENOTSOCK:
    case ENOTCONN:
        err = SDD_EINVAL;
        break;
    default:
        err = sdd_err_from_errno(e);
        break;
    }
    if (err == SDD_ECONNRESET) {
        SDD_DEBUG("boot", "%s: %s (errno %d): peer closed the connection", op,
                  errstr(e, buf, sizeof(buf)), e);
    } else {
        SDD_WARN("boot", "%s: %s (errno %d) -> %s", op, errstr(e, buf, sizeof(buf)), e,
                 sdd_errname(err));
    }
    return err;
}

/* Wait until fd reports any of events, or the deadline passes (SDD_ETIMEDOUT, not logged: the
 * caller knows what it was waiting for). Readiness says only "try again"; the retried call
 * reports any error. */
static sdd_err wait_fd(int fd, short events, uint64_t deadline_ns)
{
    for (;;) {
        uint64_t now = sdd_now_ns();
        if (now >= deadline_ns) {
            return SDD_ETIMEDOUT;
        }
        /* Round up so a sub-millisecond remainder sleeps instead of spinning. */
        uint64_t left_ms = (deadline_ns - now + SDD_NS_PER_MS - 1) / SDD_NS_PER_MS;
        int timeout = left_ms > INT_MAX ? INT_MAX : (int)left_ms;
        struct pollfd pfd = {.fd = fd, .events = events};
        int rc = poll(&pfd, 1, timeout);
        if (rc > 0) {
            if (pfd.revents & POLLNVAL) {
                SDD_WARN("boot", "poll: fd %d is not open", fd);
                return SDD_EINVAL;
            }
            return SDD_OK;
        }
        if (rc < 0 && errno != EINTR) {
            char buf[128];
            int e = errno;
            SDD_WARN("boot", "poll: %s (errno %d)", errstr(e, buf, sizeof(buf)), e);
            return sdd_err_from_errno(e);
        }
    }
}

static sdd_err recv_all(int fd, void *buf, size_t len, uint64_t deadline_ns, const char *what)
{
    size_t got = 0;
    while (got < len) {
        ssize_t n = recv(fd, (uint8_t *)buf + got, len - got, MSG_DONTWAIT);
        if (n > 0) {
            got += (size_t)n;
            continue;
        }
        if (n == 0) {
            SDD_DEBUG("boot", "peer closed the connection after %zu of %zu bytes of %s", got, len,
                      what);
            return SDD_ECONNRESET;
        }
        if (errno == EINTR) {
            continue;
        }
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
            return conn_error(errno, "recv");
        }
        sdd_err err = wait_fd(fd, POLLIN, deadline_ns);
        if (err == SDD_ETIMEDOUT) {
            SDD_DEBUG("boot", "deadline passed after %zu of %zu bytes of %s", got, len, what);
        }
        if (err != SDD_OK) {
            return err;
        }
    }
    return SDD_OK;
}

/* iov is consumed (advanced) as bytes go out. */
static sdd_err send_all(int fd, struct iovec *iov, int iovcnt, uint64_t deadline_ns,
                        const char *what)
{
    size_t sent = 0;
    while (iovcnt > 0) {
        struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)iovcnt};
        ssize_t n = sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            if (errno != EAGAIN && errno != EWOULDBLOCK) {
                return conn_error(errno, "send");
            }
            sdd_err err = wait_fd(fd, POLLOUT, deadline_ns);
            if (err == SDD_ETIMEDOUT) {
                SDD_DEBUG("boot", "deadline passed after sending %zu bytes of a %s frame", sent,
                          what);
            }
            if (err != SDD_OK) {
                return err;
            }
            continue;
        }
        sent += (size_t)n;
        size_t left = (size_t)n;
        while (iovcnt > 0 && left >= iov->iov_len) {
            left -= iov->iov_len;
            iov++;
            iovcnt--;
        }
        if (iovcnt > 0) {
            iov->iov_base = (uint8_t *)iov->iov_base + left;
            iov->iov_len -= left;
        }
    }
    return SDD_OK;
}

static sdd_err set_int_opt(int fd, int level, int name, int value, const char *what)
{
    if (setsockopt(fd, level, name, &value, sizeof(value)) != 0) {
        char buf[128];
        int e = errno;
        SDD_WARN("boot", "setsockopt %s=%d: %s (errno %d)", what, value,
                 errstr(e, buf, sizeof(buf)), e);
        return sdd_err_from_errno(e);
    }
    return SDD_OK;
}

/* Split timeout_ms into keepalive idle + interval * count, whole seconds (the kernel's unit).
 * TCP_USER_TIMEOUT then caps the total at timeout_ms once the first probe has gone out. */
static void keepalive_split(uint32_t timeout_ms, int *idle, int *intvl, int *cnt)
{
    uint32_t total = (uint32_t)(((uint64_t)timeout_ms + 500) / 1000);
    if (total < 2) {
        total = 2;
    }
    if (total < 4) {
        *idle = 1;
        *intvl = 1;
        *cnt = (int)total - 1;
        return;
    }
    uint32_t iv = total / 4;
    uint32_t id = total - 3 * iv;
    *intvl = iv > KEEPALIVE_MAX_S ? KEEPALIVE_MAX_S : (int)iv;
    *idle = id > KEEPALIVE_MAX_S ? KEEPALIVE_MAX_S : (int)id;
    *cnt = 3;
}

static sdd_err apply_sockopts(int fd, const struct boot_sockopts *opts)
{
    sdd_err err = set_int_opt(fd, IPPROTO_TCP, TCP_NODELAY, 1, "TCP_NODELAY");
    if (err != SDD_OK || opts == NULL || opts->timeout_ms == 0) {
        return err;
    }
    int idle, intvl, cnt;
    keepalive_split(opts->timeout_ms, &idle, &intvl, &cnt);
    unsigned int user_timeout = opts->timeout_ms;
    if ((err = set_int_opt(fd, SOL_SOCKET, SO_KEEPALIVE, 1, "SO_KEEPALIVE")) != SDD_OK ||
        (err = set_int_opt(fd, IPPROTO_TCP, TCP_KEEPIDLE, idle, "TCP_KEEPIDLE")) != SDD_OK ||
        (err = set_int_opt(fd, IPPROTO_TCP, TCP_KEEPINTVL, intvl, "TCP_KEEPINTVL")) != SDD_OK ||
        (err = set_int_opt(fd, IPPROTO_TCP, TCP_KEEPCNT, cnt, "TCP_KEEPCNT")) != SDD_OK) {
        return err;
    }
    if (setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout, sizeof(user_timeout)) != 0) {
        char buf[128];
        int e = errno;
        SDD_WARN("boot", "setsockopt TCP_USER_TIMEOUT=%u: %s (errno %d)", user_timeout,
                 errstr(e, buf, sizeof(buf)), e);
        return sdd_err_from_errno(e);
    }
    return SDD_OK;
}

static sdd_err resolve(const char *host, uint16_t port, int flags, struct addrinfo **res)
{
    char service[8];
    snprintf(service, sizeof(service), "%u", (unsigned)port);
    /* No AI_ADDRCONFIG: on a host whose only interface is loopback it hides 127.0.0.1. */
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_protocol = IPPROTO_TCP,
                             .ai_flags = flags | AI_NUMERICSERV};
    int rc = getaddrinfo(host, service, &hints, res);
    if (rc == 0) {
        return SDD_OK;
    }
    sdd_err err = SDD_EINVAL;
    if (rc == EAI_AGAIN) {
        err = SDD_EAGAIN;
    } else if (rc == EAI_MEMORY) {
        err = SDD_ENOMEM;
    }
    if (rc == EAI_SYSTEM) {
        char buf[128];
        int e = errno;
        SDD_WARN("boot", "cannot resolve \"%s\": %s (errno %d)", host ? host : "(any)",
                 errstr(e, buf, sizeof(buf)), e);
    } else {
        SDD_WARN("boot", "cannot resolve \"%s\": %s (EAI %d)", host ? host : "(any)",
                 gai_strerror(rc), rc);
    }
    return err;
}

static void format_addr(const struct sockaddr_storage *ss, char *out, size_t len)
{
    char ip[INET6_ADDRSTRLEN] = "?";
    unsigned port = 0;
    bool bracket = false;
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *sin = (const struct sockaddr_in *)ss;
        inet_ntop(AF_INET, &sin->sin_addr, ip, sizeof(ip));
        port = ntohs(sin->sin_port);
    } else if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)ss;
        if (IN6_IS_ADDR_V4MAPPED(&sin6->sin6_addr)) {
            inet_ntop(AF_INET, &sin6->sin6_addr.s6_addr[12], ip, sizeof(ip));
        } else {
            inet_ntop(AF_INET6, &sin6->sin6_addr, ip, sizeof(ip));
            bracket = true;
        }
        port = ntohs(sin6->sin6_port);
    }
    snprintf(out, len, bracket ? "[%s]:%u" : "%s:%u", ip, port);
}

/* ---- listen, accept, connect ------------------------------------------------------------- */

/* A wildcard listener prefers IPv6 "::" with IPV6_V6ONLY off, which also takes IPv4; a named
 * host is tried in resolver order. Pass 0 takes the preferred addresses, pass 1 the rest. */
static bool listen_candidate(const struct addrinfo *ai, bool wildcard, int pass)
{
    if (!wildcard) {
        return pass == 0;
    }
    return (ai->ai_family == AF_INET6) == (pass == 0);
}

static int listen_one(const struct addrinfo *ai, bool wildcard, int *errno_out)
{
    int one = 1, zero = 0;
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
        *errno_out = errno;
        return -1;
    }
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
        (wildcard && ai->ai_family == AF_INET6 &&
         setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero)) != 0) ||
        bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, LISTEN_BACKLOG) != 0) {
        *errno_out = errno;
        close(fd);
        return -1;
    }
    return fd;
}

sdd_err boot_listen(const char *host, uint16_t port, int *fd_out, uint16_t *port_out)
{
    if (fd_out == NULL) {
        SDD_WARN("boot", "boot_listen: fd_out is NULL");
        return SDD_EINVAL;
    }
    bool wildcard = host == NULL || host[0] == '\0';
    struct addrinfo *res = NULL;
    sdd_err err = resolve(wildcard ? NULL : host, port, AI_PASSIVE, &res);
    if (err != SDD_OK) {
        return err;
    }

    int fd = -1, last_errno = 0;
    bool busy = false;
    for (int pass = 0; pass < 2 && fd < 0; pass++) {
        for (const struct addrinfo *ai = res; ai != NULL && fd < 0; ai = ai->ai_next) {
            if (!listen_candidate(ai, wildcard, pass)) {
                continue;
            }
            fd = listen_one(ai, wildcard, &last_errno);
            busy = busy || (fd < 0 && last_errno == EADDRINUSE);
        }
    }
    freeaddrinfo(res);

    if (fd < 0) {
        char buf[128];
        if (busy) {
            err = SDD_EBUSY;
            last_errno = EADDRINUSE;
        } else if (last_errno == EADDRNOTAVAIL || last_errno == EAFNOSUPPORT) {
            err = SDD_EINVAL; /* not an address of this machine, or a family it lacks */
        } else {
            err = sdd_err_from_errno(last_errno);
        }
        SDD_WARN("boot", "cannot listen on %s port %u: %s (errno %d)", wildcard ? "*" : host,
                 (unsigned)port, errstr(last_errno, buf, sizeof(buf)), last_errno);
        return err;
    }

    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) != 0) {
        char buf[128];
        int e = errno;
        SDD_WARN("boot", "getsockname: %s (errno %d)", errstr(e, buf, sizeof(buf)), e);
        close(fd);
        return sdd_err_from_errno(e);
    }
    char desc[INET6_ADDRSTRLEN + 8];
    format_addr(&ss, desc, sizeof(desc));
    SDD_DEBUG("boot", "listening on %s", desc);
    *fd_out = fd;
    if (port_out != NULL) {
        *port_out = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
                                             : ntohs(((struct sockaddr_in *)&ss)->sin_port);
    }
    return SDD_OK;
}

sdd_err boot_accept(int listen_fd, uint64_t deadline_ns, const struct boot_sockopts *opts,
                    int *fd_out, char *peer_desc, size_t desc_len)
{
    if (listen_fd < 0 || fd_out == NULL) {
        SDD_WARN("boot", "boot_accept: bad listen fd %d or NULL fd_out", listen_fd);
        return SDD_EINVAL;
    }
    for (;;) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        int fd = accept4(listen_fd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
            sdd_err err = apply_sockopts(fd, opts);
            if (err != SDD_OK) {
                close(fd);
                return err;
            }
            char desc[INET6_ADDRSTRLEN + 8];
            format_addr(&ss, desc, sizeof(desc));
            SDD_DEBUG("boot", "accepted connection from %s", desc);
            if (peer_desc != NULL && desc_len > 0) {
                snprintf(peer_desc, desc_len, "%s", desc);
            }
            *fd_out = fd;
            return SDD_OK;
        }
        int e = errno;
        switch (e) {
        case EINTR:
        case ECONNABORTED:
        /* Linux hands errors of the pending connection to accept(); retry as for EAGAIN. */
        case ENETDOWN:
        case EPROTO:
        case ENOPROTOOPT:
        case EHOSTDOWN:
        case ENONET:
        case EHOSTUNREACH:
        case EOPNOTSUPP:
        case ENETUNREACH:
            if (sdd_now_ns() >= deadline_ns) {
                SDD_DEBUG("boot", "no connection accepted before the deadline");
                return SDD_ETIMEDOUT;
            }
            continue;
        case EAGAIN:
#if EWOULDBLOCK != EAGAIN
        case EWOULDBLOCK:
#endif
        {
            sdd_err err = wait_fd(listen_fd, POLLIN, deadline_ns);
            if (err == SDD_ETIMEDOUT) {
                SDD_DEBUG("boot", "no connection accepted before the deadline");
            }
            if (err != SDD_OK) {
                return err;
            }
            continue;
        }
        default: {
            char buf[128];
            sdd_err err =
                (e == EBADF || e == ENOTSOCK || e == EINVAL) ? SDD_EINVAL : sdd_err_from_errno(e);
            SDD_WARN("boot", "accept: %s (errno %d)", errstr(e, buf, sizeof(buf)), e);
            return err;
        }
        }
    }
}

/* A connect to a local port nobody listens on can, when the kernel picks that same port as the
 * ephemeral source, "succeed" by TCP simultaneous open with itself. Treat that as refused. */
static bool is_self_connect(int fd)
{
    struct sockaddr_storage a, b;
    socklen_t la = sizeof(a), lb = sizeof(b);
    memset(&a, 0, sizeof(a));
    memset(&b, 0, sizeof(b));
    if (getsockname(fd, (struct sockaddr *)&a, &la) != 0 ||
        getpeername(fd, (struct sockaddr *)&b, &lb) != 0) {
        return false;
    }
    return la == lb && memcmp(&a, &b, la) == 0;
}

/* One address. Returns 0 and the socket, or the errno of the failure; ETIMEDOUT also stands for
 * our own deadline. A setsockopt failure is logged here and returned as *fatal. */
static int connect_one(const struct addrinfo *ai, uint64_t deadline_ns,
                       const struct boot_sockopts *opts, int *fd_out, sdd_err *fatal)
{
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
        return errno;
    }
    sdd_err err = apply_sockopts(fd, opts);
    if (err != SDD_OK) {
        *fatal = err;
        close(fd);
        return EINVAL;
    }
    int e = 0;
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        e = errno;
        /* After EINTR the connection attempt goes on in the background, as for EINPROGRESS. */
        if (e == EINPROGRESS || e == EINTR) {
            err = wait_fd(fd, POLLOUT, deadline_ns);
            if (err == SDD_ETIMEDOUT) {
                e = ETIMEDOUT;
            } else if (err != SDD_OK) {
                *fatal = err;
                e = EINVAL;
            } else {
                socklen_t sl = sizeof(e);
                if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &sl) != 0) {
                    e = errno;
                }
            }
        }
    }
    if (e == 0 && is_self_connect(fd)) {
        e = ECONNREFUSED;
    }
    if (e != 0) {
        close(fd);
        return e;
    }
    *fd_out = fd;
    return 0;
}

sdd_err boot_connect(const char *host, uint16_t port, uint64_t deadline_ns,
                     const struct boot_sockopts *opts, int *fd_out)
{
    if (fd_out == NULL) {
        SDD_WARN("boot", "boot_connect: fd_out is NULL");
        return SDD_EINVAL;
    }
    struct addrinfo *res = NULL;
    sdd_err err = resolve(host, port, 0, &res);
    if (err != SDD_OK) {
        return err;
    }
    int fd = -1, e = EADDRNOTAVAIL;
    bool refused = false;
    sdd_err fatal = SDD_OK;
    for (const struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next) {
        e = connect_one(ai, deadline_ns, opts, &fd, &fatal);
        refused = refused || e == ECONNREFUSED;
        if (e == 0 || e == ETIMEDOUT || fatal != SDD_OK) {
            break;
        }
    }
    freeaddrinfo(res);
    if (fatal != SDD_OK) {
        return fatal;
    }
    const char *name = host ? host : "localhost";
    if (e == 0) {
        SDD_DEBUG("boot", "connected to %s port %u", name, (unsigned)port);
        *fd_out = fd;
        return SDD_OK;
    }
    char buf[128];
    if (refused) {
        err = SDD_ECONNREFUSED;
        e = ECONNREFUSED;
    } else if (e == ETIMEDOUT) {
        err = SDD_ETIMEDOUT;
    } else if (e == EHOSTUNREACH || e == ENETUNREACH || e == EHOSTDOWN || e == ENETDOWN) {
        err = SDD_EPEERDEAD;
    } else {
        err = sdd_err_from_errno(e);
    }
    if (err == SDD_ECONNREFUSED || err == SDD_ETIMEDOUT) {
        /* Callers commonly retry these until the peer is up: not worth a warning. */
        SDD_DEBUG("boot", "connect to %s port %u: %s (errno %d)", name, (unsigned)port,
                  errstr(e, buf, sizeof(buf)), e);
    } else {
        SDD_WARN("boot", "connect to %s port %u: %s (errno %d)", name, (unsigned)port,
                 errstr(e, buf, sizeof(buf)), e);
    }
    return err;
}

/* ---- frames ------------------------------------------------------------------------------ */

sdd_err boot_send_frame(int fd, uint16_t type, const void *payload, uint32_t len,
                        uint64_t deadline_ns)
{
    if (fd < 0 || type < BOOT_HELLO || type > BOOT_REJECT || len > BOOT_MAX_PAYLOAD ||
        (len > 0 && payload == NULL) || ((type == BOOT_READY || type == BOOT_BYE) && len > 0)) {
        SDD_WARN("boot", "boot_send_frame: invalid frame (fd %d, type %u, %u bytes%s)", fd,
                 (unsigned)type, len, (len > 0 && payload == NULL) ? ", NULL payload" : "");
        return SDD_EINVAL;
    }
    uint8_t hdr[BOOT_HEADER_LEN];
    header_encode(hdr, type, len);
    struct iovec iov[2] = {
        {.iov_base = hdr, .iov_len = sizeof(hdr)},
        {.iov_base = (void *)payload, .iov_len = len},
    };
    return send_all(fd, iov, len > 0 ? 2 : 1, deadline_ns, type_name(type));
}

sdd_err boot_recv_frame(int fd, uint64_t deadline_ns, uint16_t *type_out, void **payload_out,
                        uint32_t *len_out)
{
    if (fd < 0 || type_out == NULL || payload_out == NULL || len_out == NULL) {
        SDD_WARN("boot", "boot_recv_frame: bad fd %d or NULL output", fd);
        return SDD_EINVAL;
    }
    uint8_t hdr[BOOT_HEADER_LEN];
    sdd_err err = recv_all(fd, hdr, sizeof(hdr), deadline_ns, "a frame header");
    if (err != SDD_OK) {
        return err;
    }
    uint16_t type;
    uint32_t len;
    if ((err = header_decode(hdr, &type, &len)) != SDD_OK) {
        return err;
    }
    void *payload = NULL;
    if (len > 0) {
        payload = malloc(len);
        if (payload == NULL) {
            SDD_WARN("boot", "out of memory for a %u-byte %s payload", len, type_name(type));
            return SDD_ENOMEM;
        }
        char what[32];
        snprintf(what, sizeof(what), "a %s payload", type_name(type));
        if ((err = recv_all(fd, payload, len, deadline_ns, what)) != SDD_OK) {
            free(payload);
            return err;
        }
    }
    *type_out = type;
    *payload_out = payload;
    *len_out = len;
    return SDD_OK;
}

/* ---- HELLO ------------------------------------------------------------------------------- */

sdd_err boot_send_hello(int fd, const struct boot_hello *hello, uint64_t deadline_ns)
{
    if (hello == NULL) {
        SDD_WARN("boot", "boot_send_hello: hello is NULL");
        return SDD_EINVAL;
    }
    size_t plen = strnlen(hello->provider, BOOT_MAX_PROVIDER);
    if (plen == BOOT_MAX_PROVIDER || hello->addr_len > BOOT_MAX_ADDR ||
        hello->info_len > BOOT_MAX_INFO || (hello->info_len > 0 && hello->info == NULL)) {
        SDD_WARN("boot",
                 "boot_send_hello: provider %s, addr_len %u (max %u), info_len %u "
                 "(max %u)%s",
                 plen == BOOT_MAX_PROVIDER ? "not NUL-terminated" : "ok", hello->addr_len,
                 (unsigned)BOOT_MAX_ADDR, hello->info_len, BOOT_MAX_INFO,
                 (hello->info_len > 0 && hello->info == NULL) ? ", NULL info" : "");
        return SDD_EINVAL;
    }
    uint32_t total = 12 + (uint32_t)plen + hello->addr_len + hello->info_len;
    uint8_t *buf = malloc(total);
    if (buf == NULL) {
        SDD_WARN("boot", "out of memory for a %u-byte HELLO", total);
        return SDD_ENOMEM;
    }
    uint8_t *p = buf;
    put_le32(p, (uint32_t)plen);
    memcpy(p + 4, hello->provider, plen);
    p += 4 + plen;
    put_le32(p, hello->addr_len);
    memcpy(p + 4, hello->addr, hello->addr_len);
    p += 4 + hello->addr_len;
    put_le32(p, hello->info_len);
    if (hello->info_len > 0) {
        memcpy(p + 4, hello->info, hello->info_len);
    }
    sdd_err err = boot_send_frame(fd, BOOT_HELLO, buf, total, deadline_ns);
    free(buf);
    return err;
}

/* One length-prefixed HELLO field at *off; checks the limit and the bytes left in the frame. */
static sdd_err take_field(const uint8_t *p, uint32_t len, uint32_t *off, uint32_t max,
                          const char *name, const uint8_t **field, uint32_t *flen)
{
    if (len - *off < 4) {
        SDD_WARN("boot", "HELLO of %u bytes ends before the %s length", len, name);
        return SDD_EPROTO;
    }
    uint32_t n = get_le32(p + *off);
    *off += 4;
    if (n > max) {
        SDD_WARN("boot", "HELLO %s length %u exceeds the limit %u", name, n, max);
        return SDD_EPROTO;
    }
    if (n > len - *off) {
        SDD_WARN("boot", "HELLO %s length %u exceeds the %u bytes left in the frame", name, n,
                 len - *off);
        return SDD_EPROTO;
    }
    *field = p + *off;
    *flen = n;
    *off += n;
    return SDD_OK;
}

static sdd_err hello_decode(const uint8_t *p, uint32_t len, struct boot_hello *out)
{
    const uint8_t *prov = NULL, *addr = NULL, *info = NULL;
    uint32_t plen = 0, alen = 0, ilen = 0, off = 0;
    sdd_err err;
    if ((err = take_field(p, len, &off, BOOT_MAX_PROVIDER - 1, "provider", &prov, &plen)) ||
        (err = take_field(p, len, &off, BOOT_MAX_ADDR, "address", &addr, &alen)) ||
        (err = take_field(p, len, &off, BOOT_MAX_INFO, "info", &info, &ilen))) {
        return err;
    }
    if (off != len) {
        SDD_WARN("boot", "HELLO fields take %u bytes, the frame has %u", off, len);
        return SDD_EPROTO;
    }
    if (memchr(prov, '\0', plen) != NULL) {
        SDD_WARN("boot", "HELLO provider name contains a NUL byte");
        return SDD_EPROTO;
    }
    void *info_copy = NULL;
    if (ilen > 0) {
        info_copy = malloc(ilen);
        if (info_copy == NULL) {
            SDD_WARN("boot", "out of memory for a %u-byte HELLO info blob", ilen);
            return SDD_ENOMEM;
        }
        memcpy(info_copy, info, ilen);
    }
    memset(out, 0, sizeof(*out));
    memcpy(out->provider, prov, plen);
    memcpy(out->addr, addr, alen);
    out->addr_len = alen;
    out->info = info_copy;
    out->info_len = ilen;
    return SDD_OK;
}

/* The reason is the peer's text: only printable ASCII reaches the log, and only so much. */
static void log_reject(const uint8_t *p, uint32_t len)
{
    char reason[REJECT_LOG_MAX + 1];
    uint32_t n = 0;
    for (; n < len && n < REJECT_LOG_MAX; n++) {
        reason[n] = (p[n] >= 0x20 && p[n] < 0x7f) ? (char)p[n] : '?';
    }
    reason[n] = '\0';
    SDD_WARN("boot", "peer rejected the connection: \"%s\"%s", reason,
             len > n ? " (truncated)" : "");
}

sdd_err boot_recv_hello(int fd, uint64_t deadline_ns, struct boot_hello *hello_out)
{
    if (hello_out == NULL) {
        SDD_WARN("boot", "boot_recv_hello: hello_out is NULL");
        return SDD_EINVAL;
    }
    uint16_t type;
    void *payload;
    uint32_t len;
    sdd_err err = boot_recv_frame(fd, deadline_ns, &type, &payload, &len);
    if (err != SDD_OK) {
        return err;
    }
    if (type == BOOT_HELLO) {
        err = hello_decode(payload, len, hello_out);
    } else if (type == BOOT_REJECT) {
        log_reject(payload, len);
        err = SDD_ECONNREFUSED;
    } else {
        SDD_WARN("boot", "expected a HELLO frame, got %s", type_name(type));
        err = SDD_EPROTO;
    }
    free(payload);
    return err;
}

/* ---- liveness ---------------------------------------------------------------------------- */

sdd_err boot_check_alive(int fd)
{
    if (fd < 0) {
        SDD_WARN("boot", "boot_check_alive: bad fd %d", fd);
        return SDD_EINVAL;
    }
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    int rc = poll(&pfd, 1, 0);
    if (rc == 0 || (rc < 0 && errno == EINTR)) {
        return SDD_OK;
    }
    if (rc < 0 || (pfd.revents & POLLNVAL)) {
        char buf[128];
        int e = rc < 0 ? errno : EBADF;
        SDD_WARN("boot", "liveness poll on fd %d: %s (errno %d)", fd, errstr(e, buf, sizeof(buf)),
                 e);
        return rc < 0 ? sdd_err_from_errno(e) : SDD_EINVAL;
    }

    uint8_t got[BOOT_HEADER_LEN];
    ssize_t n = recv(fd, got, sizeof(got), MSG_PEEK | MSG_DONTWAIT);
    if (n < 0) {
        int e = errno;
        if (e == EAGAIN || e == EWOULDBLOCK || e == EINTR) {
            return SDD_OK;
        }
        char buf[128];
        sdd_err err = (e == EBADF || e == ENOTSOCK || e == ENOTCONN) ? SDD_EINVAL : SDD_EPEERDEAD;
        SDD_WARN("boot", "liveness connection broke: %s (errno %d)", errstr(e, buf, sizeof(buf)),
                 e);
        return err;
    }
    if (n == 0) {
        /* Closed without BYE: the process died (the kernel closed its sockets). */
        SDD_DEBUG("boot", "peer closed the liveness connection without BYE");
        return SDD_EPEERDEAD;
    }
    uint8_t bye[BOOT_HEADER_LEN];
    header_encode(bye, BOOT_BYE, 0);
    if (memcmp(got, bye, (size_t)n) != 0) {
        SDD_WARN("boot",
                 "unexpected bytes on the liveness connection (%zd peeked, first 0x%02x): "
                 "only BYE may follow READY",
                 n, got[0]);
        return SDD_EPROTO;
    }
    /* Even the first bytes of a BYE say goodbye; waiting for the rest would leave a readable
     * socket that callers polling it would spin on. */
    SDD_DEBUG("boot", "peer said BYE");
    return SDD_ECONNRESET;
}
