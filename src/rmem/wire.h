/* Control messages of the remote-memory objects (internal). They travel as fabric sends between
 * a server and its clients and between messengers, and as the info blob of the bootstrap.
 *
 * Every message: a 16-byte header {u32 magic "SDRM", u8 version, u8 type, u16 zero, u32
 * body_len, u32 zero} and a body whose length is fixed per type (INLINE: 16 + data length),
 * all little-endian. rm_decode() checks all of it, so a malformed message from a peer is a
 * clean SDD_EPROTO and never an out-of-bounds read. Layouts are in docs/formats.md. */
#ifndef SDDAQ_RMEM_WIRE_H
#define SDDAQ_RMEM_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "sddaq/err.h"

#define RM_MAGIC       0x4D524453u /* "SDRM" */
#define RM_VERSION     1
#define RM_HEADER_LEN  16
#define RM_REGION_LEN  32
#define RM_INLINE_HEAD 16 /* msg_id, type, len before inline data */

enum rm_type {
    RM_HELLO = 1,       /* client or messenger introduces itself */
    RM_REGION = 2,      /* server -> client: the published region */
    RM_REALLOC = 3,     /* server -> client: the region changed; switch on your next call */
    RM_REALLOC_ACK = 4, /* client -> server: switched to generation gen */
    RM_PING = 5,
    RM_PONG = 6,
    RM_OFFER = 7,  /* messenger: a block waits at region for you to read */
    RM_DONE = 8,   /* messenger: block msg_id read (status) */
    RM_REJECT = 9, /* messenger: will not read msg_id (status = reason) */
    RM_INLINE = 10,
    RM_DROP = 11,  /* server -> client: you are dropped (status = reason) */
    RM_LOCAL = 12, /* server -> client, after REGION: how a same-host client maps the region */
    RM_TYPE_MAX = 12,
};

enum rm_role {
    RM_ROLE_CLIENT = 1,
    RM_ROLE_MESSENGER = 2,
};

struct rm_region {
    uint64_t addr, len, key;
    uint32_t gen;
    uint32_t flags;
};

struct rm_msg {
    uint8_t type;
    union {
        struct {
            uint32_t role, flags;
        } hello;
        struct rm_region region; /* REGION, REALLOC */
        struct {
            uint32_t gen;
        } ack;
        struct {
            uint64_t seq, t;
        } ping; /* PING, PONG */
        struct {
            uint64_t msg_id;
            uint32_t app_type;
            struct rm_region region; /* region.len = block length */
        } offer;
        struct {
            uint64_t msg_id;
            int32_t status;
        } done; /* DONE, REJECT, DROP (msg_id 0) */
        struct {
            uint64_t msg_id;
            uint32_t app_type;
            uint32_t len;
            const void *data; /* decode: points into the decoded buffer */
        } inl;
        struct {
            uint32_t pid, fd; /* /proc/PID/fd/FD on the server's host */
            uint64_t len;
            uint64_t host; /* the server's boot id hash: map only if it equals ours */
        } local;
    };
};

/* Encode m into buf; returns the bytes used, or 0 when cap is too small or m->type unknown. */
size_t rm_encode(const struct rm_msg *m, void *buf, size_t cap);

/* Decode len bytes at buf into m: SDD_OK, or SDD_EPROTO for anything malformed (bad magic,
 * version, type, body length, or trailing bytes). */
sdd_err rm_decode(const void *buf, size_t len, struct rm_msg *m);

/* Length of the first message in buf (for blobs that carry several), or 0 when buf does not
 * start with a well-formed header whose message fits. */
size_t rm_first_len(const void *buf, size_t len);

/* Encoded size of a message of this type (INLINE: with data_len bytes of data). */
size_t rm_size(uint8_t type, size_t data_len);

const char *rm_type_name(uint8_t type);

#endif
