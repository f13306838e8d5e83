/* Encoding and validating decoding of the remote-memory control messages. */
#include "rmem/wire.h"

#include <string.h>

#include "core/le.h"

/* Body bytes per type; INLINE adds its data. Index 0 is unused. */
static const uint8_t body_len_of[RM_TYPE_MAX + 1] = {
    [RM_HELLO] = 8,
    [RM_REGION] = RM_REGION_LEN,
    [RM_REALLOC] = RM_REGION_LEN,
    [RM_REALLOC_ACK] = 8,
    [RM_PING] = 16,
    [RM_PONG] = 16,
    [RM_OFFER] = 16 + RM_REGION_LEN,
    [RM_DONE] = 16,
    [RM_REJECT] = 16,
    [RM_INLINE] = RM_INLINE_HEAD,
    [RM_DROP] = 16,
    [RM_LOCAL] = 24,
};

static const char *const type_names[RM_TYPE_MAX + 1] = {
    [RM_HELLO] = "HELLO",     [RM_REGION] = "REGION",
    [RM_REALLOC] = "REALLOC", [RM_REALLOC_ACK] = "REALLOC_ACK",
    [RM_PING] = "PING",       [RM_PONG] = "PONG",
    [RM_OFFER] = "OFFER",     [RM_DONE] = "DONE",
    [RM_REJECT] = "REJECT",   [RM_INLINE] = "INLINE",
    [RM_DROP] = "DROP",       [RM_LOCAL] = "LOCAL",
};

const char *rm_type_name(uint8_t type)
{
    return type >= 1 && type <= RM_TYPE_MAX ? type_names[type] : "unknown";
}

size_t rm_size(uint8_t type, size_t data_len)
{
    if (type < 1 || type > RM_TYPE_MAX) {
        return 0;
    }
    return RM_HEADER_LEN + body_len_of[type] + (type == RM_INLINE ? data_len : 0);
}

static void put_region(uint8_t *p, const struct rm_region *r)
{
    put_le64(p, r->addr);
    put_le64(p + 8, r->len);
    put_le64(p + 16, r->key);
    put_le32(p + 24, r->gen);
    put_le32(p + 28, r->flags);
}

static void get_region(const uint8_t *p, struct rm_region *r)
{
    r->addr = get_le64(p);
    r->len = get_le64(p + 8);
    r->key = get_le64(p + 16);
    r->gen = get_le32(p + 24);
    r->flags = get_le32(p + 28);
}

size_t rm_encode(const struct rm_msg *m, void *buf, size_t cap)
{
    size_t data_len = m->type == RM_INLINE ? m->inl.len : 0;
    size_t total = rm_size(m->type, data_len);
    if (total == 0 || total > cap) {
        return 0;
    }
    uint8_t *p = buf;
    memset(p, 0, RM_HEADER_LEN + body_len_of[m->type]);
    put_le32(p, RM_MAGIC);
    p[4] = RM_VERSION;
    p[5] = m->type;
    put_le32(p + 8, (uint32_t)(total - RM_HEADER_LEN));
    uint8_t *b = p + RM_HEADER_LEN;
    switch (m->type) {
    case RM_HELLO:
        put_le32(b, m->hello.role);
        put_le32(b + 4, m->hello.flags);
        break;
    case RM_REGION:
    case RM_REALLOC:
        put_region(b, &m->region);
        break;
    case RM_REALLOC_ACK:
        put_le32(b, m->ack.gen);
        break;
    case RM_PING:
    case RM_PONG:
        put_le64(b, m->ping.seq);
        put_le64(b + 8, m->ping.t);
        break;
    case RM_OFFER:
        put_le64(b, m->offer.msg_id);
        put_le32(b + 8, m->offer.app_type);
        put_region(b + 16, &m->offer.region);
        break;
    case RM_DONE:
    case RM_REJECT:
    case RM_DROP:
        put_le64(b, m->done.msg_id);
        put_le32(b + 8, (uint32_t)m->done.status);
        break;
    case RM_LOCAL:
        put_le32(b, m->local.pid);
        put_le32(b + 4, m->local.fd);
        put_le64(b + 8, m->local.len);
        put_le64(b + 16, m->local.host);
        break;
    case RM_INLINE:
        put_le64(b, m->inl.msg_id);
        put_le32(b + 8, m->inl.app_type);
        put_le32(b + 12, m->inl.len);
        if (m->inl.len > 0) {
            memcpy(b + RM_INLINE_HEAD, m->inl.data, m->inl.len);
        }
        break;
    default:
        return 0;
    }
    return total;
}

size_t rm_first_len(const void *buf, size_t len)
{
    const uint8_t *p = buf;
    if (buf == NULL || len < RM_HEADER_LEN || get_le32(p) != RM_MAGIC) {
        return 0;
    }
    uint64_t total = (uint64_t)RM_HEADER_LEN + get_le32(p + 8);
    return total <= len ? (size_t)total : 0;
}

sdd_err rm_decode(const void *buf, size_t len, struct rm_msg *m)
{
    const uint8_t *p = buf;
    if (buf == NULL || len < RM_HEADER_LEN || get_le32(p) != RM_MAGIC || p[4] != RM_VERSION) {
        return SDD_EPROTO;
    }
    uint8_t type = p[5];
    uint32_t body = get_le32(p + 8);
    if (type < 1 || type > RM_TYPE_MAX || body != len - RM_HEADER_LEN || body < body_len_of[type]) {
        return SDD_EPROTO;
    }
    const uint8_t *b = p + RM_HEADER_LEN;
    struct rm_msg out;
    memset(&out, 0, sizeof(out));
    out.type = type;
    switch (type) {
    case RM_HELLO:
        out.hello.role = get_le32(b);
        out.hello.flags = get_le32(b + 4);
        break;
    case RM_REGION:
    case RM_REALLOC:
        get_region(b, &out.region);
        break;
    case RM_REALLOC_ACK:
        out.ack.gen = get_le32(b);
        break;
    case RM_PING:
    case RM_PONG:
        out.ping.seq = get_le64(b);
        out.ping.t = get_le64(b + 8);
        break;
    case RM_OFFER:
        out.offer.msg_id = get_le64(b);
        out.offer.app_type = get_le32(b + 8);
        get_region(b + 16, &out.offer.region);
        break;
    case RM_DONE:
    case RM_REJECT:
    case RM_DROP:
        out.done.msg_id = get_le64(b);
        out.done.status = (int32_t)get_le32(b + 8);
        break;
    case RM_LOCAL:
        out.local.pid = get_le32(b);
        out.local.fd = get_le32(b + 4);
        out.local.len = get_le64(b + 8);
        out.local.host = get_le64(b + 16);
        break;
    case RM_INLINE:
        out.inl.msg_id = get_le64(b);
        out.inl.app_type = get_le32(b + 8);
        out.inl.len = get_le32(b + 12);
        out.inl.data = b + RM_INLINE_HEAD;
        if ((uint64_t)out.inl.len != (uint64_t)body - RM_INLINE_HEAD) {
            return SDD_EPROTO;
        }
        break;
    }
    if (type != RM_INLINE && body != body_len_of[type]) {
        return SDD_EPROTO;
    }
    *m = out;
    return SDD_OK;
}
