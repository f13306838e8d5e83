/* TCP bootstrap wire protocol (internal). Before any fabric traffic, two endpoints exchange
 * their libfabric endpoint names and a caller-defined info blob (memory keys, addresses) over a
 * plain TCP connection, like rdma_cm does for verbs. The connection then stays open as a
 * liveness channel: the kernel closes it when a peer process dies.
 *
 * Every frame: 16-byte header {u32 magic "SDDB", u16 version, u16 type, u32 length, u32
 * header_crc} followed by `length` payload bytes, all little-endian. Every receive is bounded by
 * an absolute deadline (sdd_now_ns() time) and validates magic, version, type and length before
 * reading a payload, so a peer that sends garbage or closes early yields a clean error. */
#ifndef SDDAQ_FABRIC_BOOT_WIRE_H
#define SDDAQ_FABRIC_BOOT_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "sddaq/err.h"

#define BOOT_MAGIC        0x42444453u /* "SDDB" little-endian */
#define BOOT_VERSION      1
#define BOOT_MAX_PAYLOAD  (1u << 20)
#define BOOT_MAX_ADDR     1024
#define BOOT_MAX_INFO     (64u * 1024)
#define BOOT_MAX_PROVIDER 64
#define BOOT_HEADER_LEN   16 /* u32 magic, u16 version, u16 type, u32 length, u32 header_crc */

enum boot_type {
    BOOT_HELLO = 1,  /* payload: provider name, endpoint name, info blob (see boot_hello) */
    BOOT_READY = 2,  /* no payload: the sender has inserted the peer; fabric traffic may flow */
    BOOT_BYE = 3,    /* no payload: graceful close, the peer is going away on purpose */
    BOOT_REJECT = 4, /* payload: human-readable reason (e.g. provider mismatch) */
};

/* Conventions for every function below: sockets handed out are non-blocking and close-on-exec;
 * all I/O uses MSG_DONTWAIT (and MSG_NOSIGNAL on send) and waits in poll(), so no call blocks
 * past its deadline and none raises SIGPIPE. A deadline already in the past still makes one
 * non-blocking attempt (accept or read what is already queued), then SDD_ETIMEDOUT. Errors are
 * logged once (component "boot") where they are decided; callers need not log them again. */

/* Liveness tuning applied to every bootstrap socket (TCP keepalive and TCP_USER_TIMEOUT), so a
 * peer host that vanishes without closing is noticed within about timeout_ms. */
struct boot_sockopts {
    uint32_t timeout_ms;
};

struct boot_hello {
    char provider[BOOT_MAX_PROVIDER]; /* NUL-terminated */
    uint8_t addr[BOOT_MAX_ADDR];
    uint32_t addr_len;
    void *info; /* boot_recv_hello: malloc'd copy, caller frees; boot_send_hello: caller's */
    uint32_t info_len;
};

/* Listen on host:port (host NULL or "" = all interfaces, "localhost" allowed; port 0 = pick
 * one). Writes the socket and the bound port. SDD_EINVAL for an unresolvable host, SDD_EBUSY
 * when the port is taken. Non-blocking socket, close-on-exec. With host NULL or "" the socket
 * is dual-stack IPv6 (::) where the machine allows it, else IPv4 0.0.0.0. port_out may be NULL.
 * A temporary resolver failure (EAI_AGAIN) is SDD_EAGAIN. */
sdd_err boot_listen(const char *host, uint16_t port, int *fd_out, uint16_t *port_out);

/* Accept one connection before deadline_ns. SDD_ETIMEDOUT when none arrives. peer_desc gets
 * "ip:port" of the remote side. The new socket has TCP_NODELAY and the sockopts applied.
 * opts may be NULL (no keepalive tuning); peer_desc may be NULL (desc_len 0); IPv6 peers read
 * "[ip]:port", IPv4-mapped ones plain "ip:port". */
sdd_err boot_accept(int listen_fd, uint64_t deadline_ns, const struct boot_sockopts *opts,
                    int *fd_out, char *peer_desc, size_t desc_len);

/* Connect to host:port before deadline_ns. SDD_ECONNREFUSED when nobody listens, SDD_ETIMEDOUT
 * when the deadline passes, SDD_EINVAL for an unresolvable host. Every address host resolves to
 * is tried in turn (SDD_ECONNREFUSED wins if any refused); opts may be NULL. */
sdd_err boot_connect(const char *host, uint16_t port, uint64_t deadline_ns,
                     const struct boot_sockopts *opts, int *fd_out);

/* Send one frame (payload may be NULL when len is 0). SDD_ECONNRESET if the peer has gone,
 * SDD_ETIMEDOUT if the socket stays full past the deadline. SDD_EINVAL for an unknown type, a
 * length over BOOT_MAX_PAYLOAD, or a READY/BYE with a payload. The payload stays the caller's.
 * After SDD_ETIMEDOUT part of the frame may have gone out: the connection is unusable. */
sdd_err boot_send_frame(int fd, uint16_t type, const void *payload, uint32_t len,
                        uint64_t deadline_ns);

/* Receive one frame. The payload is malloc'd into *payload_out (NULL when empty; caller frees).
 * SDD_EPROTO for bad magic, version, header checksum, unknown type or a length over
 * BOOT_MAX_PAYLOAD; SDD_ECONNRESET when the peer closes (also mid-frame); SDD_ETIMEDOUT at the
 * deadline. The header is fully validated before anything is allocated; a READY or BYE with a
 * non-zero length is SDD_EPROTO too. A socket error is SDD_EPEERDEAD when the kernel gave up on
 * the peer (keepalive or user timeout, unreachable), SDD_ECONNRESET for a reset. Outputs are
 * written only on success. */
sdd_err boot_recv_frame(int fd, uint64_t deadline_ns, uint16_t *type_out, void **payload_out,
                        uint32_t *len_out);

/* HELLO encode/send and receive/decode. boot_recv_hello also accepts a REJECT frame and returns
 * SDD_ECONNREFUSED for it (logging the reason); any other frame type is SDD_EPROTO, as is a
 * HELLO payload whose inner lengths do not add up or exceed the BOOT_MAX_* limits, or whose
 * provider contains a NUL byte. boot_recv_hello writes *hello_out only on success.
 * boot_send_hello: SDD_EINVAL when provider is not NUL-terminated within BOOT_MAX_PROVIDER or
 * addr_len/info_len exceed BOOT_MAX_ADDR/BOOT_MAX_INFO. */
sdd_err boot_send_hello(int fd, const struct boot_hello *hello, uint64_t deadline_ns);
sdd_err boot_recv_hello(int fd, uint64_t deadline_ns, struct boot_hello *hello_out);

/* Non-blocking check of an established liveness socket: SDD_OK when nothing happened (or only
 * keepalive traffic); SDD_ECONNRESET when the peer said BYE (or the first bytes of one: a peer
 * saying goodbye); SDD_EPEERDEAD when the connection closed without BYE (the peer process
 * died) or broke (reset, keepalive timeout); SDD_EPROTO when it sent anything else. Consumes
 * no data (MSG_PEEK), so it gives the same answer again; callers stop watching the socket. */
sdd_err boot_check_alive(int fd);

/* CRC32C (Castagnoli, reflected 0x82F63B78, init and final xor 0xFFFFFFFF) of len bytes; the
 * header_crc is this over the first 12 header bytes. boot_crc32c("123456789", 9) = 0xE3069283. */
uint32_t boot_crc32c(const void *buf, size_t len);

#endif
