/* Remote-memory control messages (src/rmem/wire.c): the exact bytes of a few messages built by
 * hand, a round trip of every type, sizes, encoding into short buffers, and a decoder that
 * refuses every truncation, a wrong magic, version or type, a body length that disagrees with
 * the buffer or the type, trailing bytes and an INLINE length that disagrees with its body.
 * A fuzz loop feeds random and bit-flipped messages; every accepted one must re-encode to the
 * same length. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/le.h"
#include "rmem/wire.h"

#define MAX_MSG 2048

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;

static uint64_t rnd(void)
{
    return check_rand(&rng_state);
}

static uint8_t inline_data[1000];

static struct rm_region region_value(uint64_t salt)
{
    struct rm_region r = {
        .addr = 0x0102030405060708ull ^ salt,
        .len = 0x1112131415161718ull ^ salt,
        .key = 0x2122232425262728ull ^ salt,
        .gen = 0x31323334u ^ (uint32_t)salt,
        .flags = 0x41424344u ^ (uint32_t)salt,
    };
    return r;
}

/* One filled-in message of each kind, every field with distinct bytes, so a swapped, truncated
 * or misplaced field shows. INLINE appears twice: empty and with 1000 bytes. */
static size_t sample_messages(struct rm_msg *out)
{
    size_t n = 0;
    struct rm_msg m;

    memset(&m, 0, sizeof(m));
    m.type = RM_HELLO;
    m.hello.role = RM_ROLE_MESSENGER;
    m.hello.flags = 0xA1B2C3D4u;
    out[n++] = m;

    static const uint8_t region_types[] = {RM_REGION, RM_REALLOC};
    for (size_t i = 0; i < 2; i++) {
        memset(&m, 0, sizeof(m));
        m.type = region_types[i];
        m.region = region_value(i + 1);
        out[n++] = m;
    }

    memset(&m, 0, sizeof(m));
    m.type = RM_REALLOC_ACK;
    m.ack.gen = 0xDEADBEEFu;
    out[n++] = m;

    static const uint8_t ping_types[] = {RM_PING, RM_PONG};
    for (size_t i = 0; i < 2; i++) {
        memset(&m, 0, sizeof(m));
        m.type = ping_types[i];
        m.ping.seq = 0x8877665544332211ull + i;
        m.ping.t = 0xF0E0D0C0B0A09080ull - i;
        out[n++] = m;
    }

    memset(&m, 0, sizeof(m));
    m.type = RM_OFFER;
    m.offer.msg_id = 0x0A0B0C0D0E0F1011ull;
    m.offer.app_type = 0x12345678u;
    m.offer.region = region_value(0x99);
    out[n++] = m;

    static const uint8_t done_types[] = {RM_DONE, RM_REJECT, RM_DROP};
    static const int32_t statuses[] = {SDD_OK, SDD_ETOOBIG, SDD_EPEERDEAD};
    for (size_t i = 0; i < 3; i++) {
        memset(&m, 0, sizeof(m));
        m.type = done_types[i];
        m.done.msg_id = i == 2 ? 0 : 0x5566778899AABBCCull + i;
        m.done.status = statuses[i];
        out[n++] = m;
    }

    memset(&m, 0, sizeof(m));
    m.type = RM_LOCAL;
    m.local.pid = 0x01020304u;
    m.local.fd = 0x05060708u;
    m.local.len = 0x1112131415161718ull;
    m.local.host = 0x2122232425262728ull;
    out[n++] = m;

    memset(&m, 0, sizeof(m));
    m.type = RM_INLINE;
    m.inl.msg_id = 0x7071727374757677ull;
    m.inl.app_type = 0xCAFEF00Du;
    m.inl.len = 0;
    m.inl.data = NULL;
    out[n++] = m;

    m.inl.len = sizeof(inline_data);
    m.inl.data = inline_data;
    out[n++] = m;
    return n;
}

static bool region_eq(const struct rm_region *a, const struct rm_region *b)
{
    return a->addr == b->addr && a->len == b->len && a->key == b->key && a->gen == b->gen &&
           a->flags == b->flags;
}

static bool msg_eq(const struct rm_msg *a, const struct rm_msg *b)
{
    if (a->type != b->type) {
        return false;
    }
    switch (a->type) {
    case RM_HELLO:
        return a->hello.role == b->hello.role && a->hello.flags == b->hello.flags;
    case RM_REGION:
    case RM_REALLOC:
        return region_eq(&a->region, &b->region);
    case RM_REALLOC_ACK:
        return a->ack.gen == b->ack.gen;
    case RM_PING:
    case RM_PONG:
        return a->ping.seq == b->ping.seq && a->ping.t == b->ping.t;
    case RM_OFFER:
        return a->offer.msg_id == b->offer.msg_id && a->offer.app_type == b->offer.app_type &&
               region_eq(&a->offer.region, &b->offer.region);
    case RM_DONE:
    case RM_REJECT:
    case RM_DROP:
        return a->done.msg_id == b->done.msg_id && a->done.status == b->done.status;
    case RM_LOCAL:
        return a->local.pid == b->local.pid && a->local.fd == b->local.fd &&
               a->local.len == b->local.len && a->local.host == b->local.host;
    case RM_INLINE:
        return a->inl.msg_id == b->inl.msg_id && a->inl.app_type == b->inl.app_type &&
               a->inl.len == b->inl.len &&
               (a->inl.len == 0 || memcmp(a->inl.data, b->inl.data, a->inl.len) == 0);
    }
    return false;
}

/* ---- exact bytes ---------------------------------------------------------------------------- */

static void check_header(const uint8_t *p, uint8_t type, uint32_t body_len)
{
    static const uint8_t magic[4] = {'S', 'D', 'R', 'M'};
    CHECK(memcmp(p, magic, 4) == 0);
    CHECK_EQ(p[4], RM_VERSION);
    CHECK_EQ(p[5], type);
    CHECK_EQ(get_le16(p + 6), 0);
    CHECK_EQ(get_le32(p + 8), body_len);
    CHECK_EQ(get_le32(p + 12), 0);
}

static void test_exact_bytes(void)
{
    uint8_t buf[MAX_MSG];
    struct rm_msg m;

    memset(&m, 0, sizeof(m));
    m.type = RM_PING;
    m.ping.seq = 0x0102030405060708ull;
    m.ping.t = 0x1112131415161718ull;
    CHECK_EQ(rm_encode(&m, buf, sizeof(buf)), 32);
    check_header(buf, RM_PING, 16);
    static const uint8_t ping_body[16] = {8,    7,    6,    5,    4,    3,    2,    1,
                                          0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11};
    CHECK(memcmp(buf + 16, ping_body, 16) == 0);

    memset(&m, 0, sizeof(m));
    m.type = RM_REGION;
    m.region = region_value(0);
    CHECK_EQ(rm_encode(&m, buf, sizeof(buf)), 16 + 32);
    check_header(buf, RM_REGION, 32);
    CHECK_EQ(get_le64(buf + 16), m.region.addr);
    CHECK_EQ(get_le64(buf + 24), m.region.len);
    CHECK_EQ(get_le64(buf + 32), m.region.key);
    CHECK_EQ(get_le32(buf + 40), m.region.gen);
    CHECK_EQ(get_le32(buf + 44), m.region.flags);

    memset(&m, 0, sizeof(m));
    m.type = RM_OFFER;
    m.offer.msg_id = 42;
    m.offer.app_type = 7;
    m.offer.region = region_value(5);
    CHECK_EQ(rm_encode(&m, buf, sizeof(buf)), 16 + 48);
    check_header(buf, RM_OFFER, 48);
    CHECK_EQ(get_le64(buf + 16), 42);
    CHECK_EQ(get_le32(buf + 24), 7);
    CHECK_EQ(get_le32(buf + 28), 0);
    CHECK_EQ(get_le64(buf + 32), m.offer.region.addr);
    CHECK_EQ(get_le32(buf + 60), m.offer.region.flags);

    memset(&m, 0, sizeof(m));
    m.type = RM_REJECT;
    m.done.msg_id = 9;
    m.done.status = SDD_ETOOBIG;
    CHECK_EQ(rm_encode(&m, buf, sizeof(buf)), 32);
    check_header(buf, RM_REJECT, 16);
    CHECK_EQ(get_le64(buf + 16), 9);
    CHECK_EQ((int32_t)get_le32(buf + 24), SDD_ETOOBIG);
    CHECK_EQ(get_le32(buf + 28), 0);

    memset(&m, 0, sizeof(m));
    m.type = RM_INLINE;
    m.inl.msg_id = 3;
    m.inl.app_type = 4;
    m.inl.len = 5;
    m.inl.data = "hello";
    CHECK_EQ(rm_encode(&m, buf, sizeof(buf)), 16 + 16 + 5);
    check_header(buf, RM_INLINE, 21);
    CHECK_EQ(get_le64(buf + 16), 3);
    CHECK_EQ(get_le32(buf + 24), 4);
    CHECK_EQ(get_le32(buf + 28), 5);
    CHECK(memcmp(buf + 32, "hello", 5) == 0);

    memset(&m, 0, sizeof(m));
    m.type = RM_HELLO;
    m.hello.role = RM_ROLE_CLIENT;
    m.hello.flags = 0x01020304;
    CHECK_EQ(rm_encode(&m, buf, sizeof(buf)), 24);
    check_header(buf, RM_HELLO, 8);
    CHECK_EQ(get_le32(buf + 16), RM_ROLE_CLIENT);
    CHECK_EQ(get_le32(buf + 20), 0x01020304);

    memset(&m, 0, sizeof(m));
    m.type = RM_REALLOC_ACK;
    m.ack.gen = 77;
    CHECK_EQ(rm_encode(&m, buf, sizeof(buf)), 24);
    check_header(buf, RM_REALLOC_ACK, 8);
    CHECK_EQ(get_le32(buf + 16), 77);
    CHECK_EQ(get_le32(buf + 20), 0);
}

/* ---- round trips, sizes, short buffers ------------------------------------------------------ */

static void test_round_trip(void)
{
    struct rm_msg msgs[16];
    size_t n = sample_messages(msgs);
    CHECK_EQ(n, 13);
    bool seen[RM_TYPE_MAX + 1] = {false};
    uint8_t buf[MAX_MSG];
    for (size_t i = 0; i < n; i++) {
        const struct rm_msg *m = &msgs[i];
        seen[m->type] = true;
        size_t data_len = m->type == RM_INLINE ? m->inl.len : 0;
        size_t want = rm_size(m->type, data_len);
        CHECK(want >= RM_HEADER_LEN);
        size_t len = rm_encode(m, buf, sizeof(buf));
        CHECK_EQ(len, want);
        CHECK_EQ(rm_encode(m, buf, want), want); /* exactly enough room */

        struct rm_msg d;
        memset(&d, 0xCC, sizeof(d));
        CHECK_OK(rm_decode(buf, len, &d));
        CHECK(msg_eq(m, &d));
        if (!msg_eq(m, &d)) {
            fprintf(stderr, "  round trip of %s differs\n", rm_type_name(m->type));
        }
        if (m->type == RM_INLINE) {
            CHECK(d.inl.data == buf + RM_HEADER_LEN + RM_INLINE_HEAD);
        }

        /* Too small by one byte, and no room at all. */
        uint8_t small[MAX_MSG];
        CHECK_EQ(rm_encode(m, small, want - 1), 0);
        CHECK_EQ(rm_encode(m, small, 0), 0);
        CHECK_EQ(rm_encode(m, NULL, 0), 0);
    }
    for (int t = 1; t <= RM_TYPE_MAX; t++) {
        CHECK(seen[t]);
        CHECK(strcmp(rm_type_name((uint8_t)t), "unknown") != 0);
    }
    CHECK(strcmp(rm_type_name(0), "unknown") == 0);
    CHECK(strcmp(rm_type_name(RM_TYPE_MAX + 1), "unknown") == 0);
    CHECK(strcmp(rm_type_name(255), "unknown") == 0);

    CHECK_EQ(rm_size(RM_HELLO, 0), 24);
    CHECK_EQ(rm_size(RM_REGION, 0), 48);
    CHECK_EQ(rm_size(RM_REALLOC, 0), 48);
    CHECK_EQ(rm_size(RM_REALLOC_ACK, 0), 24);
    CHECK_EQ(rm_size(RM_PING, 0), 32);
    CHECK_EQ(rm_size(RM_PONG, 0), 32);
    CHECK_EQ(rm_size(RM_OFFER, 0), 64);
    CHECK_EQ(rm_size(RM_DONE, 0), 32);
    CHECK_EQ(rm_size(RM_REJECT, 0), 32);
    CHECK_EQ(rm_size(RM_DROP, 0), 32);
    CHECK_EQ(rm_size(RM_INLINE, 0), 32);
    CHECK_EQ(rm_size(RM_INLINE, 1000), 1032);
    CHECK_EQ(rm_size(RM_PING, 1000), 32); /* data length counts for INLINE only */
    CHECK_EQ(rm_size(0, 0), 0);
    CHECK_EQ(rm_size(RM_TYPE_MAX + 1, 0), 0);
    CHECK_EQ(rm_size(255, 0), 0);

    struct rm_msg bad;
    memset(&bad, 0, sizeof(bad));
    static const uint8_t bad_types[] = {0, RM_TYPE_MAX + 1, 255};
    for (size_t i = 0; i < sizeof(bad_types); i++) {
        bad.type = bad_types[i];
        CHECK_EQ(rm_encode(&bad, buf, sizeof(buf)), 0);
    }
}

/* ---- what the decoder refuses --------------------------------------------------------------- */

static void check_refused(const uint8_t *buf, size_t len, const char *what)
{
    struct rm_msg d, sentinel;
    memset(&sentinel, 0x77, sizeof(sentinel));
    d = sentinel;
    sdd_err e = rm_decode(buf, len, &d);
    CHECK_EQ(e, SDD_EPROTO);
    CHECK(memcmp(&d, &sentinel, sizeof(d)) == 0); /* out untouched */
    if (e != SDD_EPROTO) {
        fprintf(stderr, "  accepted: %s (len %zu, type %u)\n", what, len,
                buf != NULL && len > 5 ? buf[5] : 0);
    }
}

static void test_decode_refuses(void)
{
    struct rm_msg msgs[16];
    size_t n = sample_messages(msgs);
    uint8_t buf[MAX_MSG + 16], mut[MAX_MSG + 16];

    check_refused(NULL, 0, "NULL");
    check_refused(NULL, 32, "NULL with a length");

    for (size_t i = 0; i < n; i++) {
        size_t len = rm_encode(&msgs[i], buf, sizeof(buf));
        CHECK_REQUIRE(len > 0);
        uint32_t body = (uint32_t)(len - RM_HEADER_LEN);

        /* Every truncation, from nothing to one byte short; each in its own allocation so
         * ASan sees a read past the given length. */
        for (size_t cut = 0; cut < len; cut++) {
            uint8_t *p = malloc(cut > 0 ? cut : 1);
            CHECK_REQUIRE(p != NULL);
            memcpy(p, buf, cut);
            check_refused(p, cut, "truncated");
            free(p);
        }
        /* Truncated with body_len patched to match: the body is too short for the type. */
        if (msgs[i].type != RM_INLINE || body > RM_INLINE_HEAD) {
            size_t cut = msgs[i].type == RM_INLINE ? RM_HEADER_LEN + RM_INLINE_HEAD - 1 : len - 1;
            memcpy(mut, buf, len);
            put_le32(mut + 8, (uint32_t)(cut - RM_HEADER_LEN));
            check_refused(mut, cut, "short body with matching body_len");
        }

        /* Magic: each byte. Version: 0 and 2. */
        for (int b = 0; b < 4; b++) {
            memcpy(mut, buf, len);
            mut[b] ^= 0x20;
            check_refused(mut, len, "magic");
        }
        memcpy(mut, buf, len);
        mut[4] = 0;
        check_refused(mut, len, "version 0");
        mut[4] = RM_VERSION + 1;
        check_refused(mut, len, "version 2");

        /* Unknown types with an otherwise valid message. */
        static const uint8_t unknown[] = {0, RM_TYPE_MAX + 1, 255};
        for (size_t u = 0; u < sizeof(unknown); u++) {
            memcpy(mut, buf, len);
            mut[5] = unknown[u];
            check_refused(mut, len, "unknown type");
        }

        /* body_len one off either way, buffer unchanged. */
        memcpy(mut, buf, len);
        put_le32(mut + 8, body + 1);
        check_refused(mut, len, "body_len + 1");
        put_le32(mut + 8, body - 1);
        check_refused(mut, len, "body_len - 1");
        put_le32(mut + 8, UINT32_MAX);
        check_refused(mut, len, "body_len huge");

        /* Trailing bytes: body_len left alone, and body_len counting them (fixed-size types
         * must still refuse; INLINE then disagrees with its len field). */
        memcpy(mut, buf, len);
        mut[len] = 0;
        check_refused(mut, len + 1, "trailing byte");
        put_le32(mut + 8, body + 1);
        check_refused(mut, len + 1, "trailing byte counted in body_len");
        memset(mut + len, 0, 8);
        put_le32(mut + 8, body + 8);
        check_refused(mut, len + 8, "trailing 8 bytes counted in body_len");

        /* A body the size of another type's. */
        for (uint8_t t = 1; t <= RM_TYPE_MAX; t++) {
            size_t other = rm_size(t, 0);
            if (t == msgs[i].type || msgs[i].type == RM_INLINE || other == len) {
                continue;
            }
            memcpy(mut, buf, len);
            memset(mut + len, 0, sizeof(mut) - len);
            put_le32(mut + 8, (uint32_t)(other - RM_HEADER_LEN));
            check_refused(mut, other, "body sized for another type");
        }

        if (msgs[i].type == RM_INLINE) {
            /* len field disagreeing with the body. */
            uint32_t dl = msgs[i].inl.len;
            static const int64_t deltas[] = {-1, 1, 2, 1000000};
            for (size_t k = 0; k < sizeof(deltas) / sizeof(deltas[0]); k++) {
                if ((int64_t)dl + deltas[k] < 0) {
                    continue;
                }
                memcpy(mut, buf, len);
                put_le32(mut + RM_HEADER_LEN + 12, (uint32_t)((int64_t)dl + deltas[k]));
                check_refused(mut, len, "INLINE len field");
            }
            memcpy(mut, buf, len);
            put_le32(mut + RM_HEADER_LEN + 12, UINT32_MAX);
            check_refused(mut, len, "INLINE len field huge");
        }
    }
}

/* ---- fuzz ----------------------------------------------------------------------------------- */

static void test_fuzz(void)
{
    struct rm_msg msgs[16];
    size_t n = sample_messages(msgs);
    uint8_t valid[16][MAX_MSG];
    size_t valid_len[16];
    for (size_t i = 0; i < n; i++) {
        valid_len[i] = rm_encode(&msgs[i], valid[i], sizeof(valid[i]));
        CHECK_REQUIRE(valid_len[i] > 0);
    }

    unsigned accepted = 0, refused = 0, other = 0, bad_reencode = 0;
    uint8_t out[MAX_MSG];
    for (int iter = 0; iter < 200000; iter++) {
        size_t len;
        uint8_t *p;
        if (iter % 2 == 0) {
            /* Random bytes, 0..128 long; often with a valid magic, version and body_len so
             * that the body checks get exercised too. */
            len = (size_t)(rnd() % 129);
            p = malloc(len > 0 ? len : 1);
            CHECK_REQUIRE(p != NULL);
            for (size_t k = 0; k < len; k++) {
                p[k] = (uint8_t)rnd();
            }
            uint64_t r = rnd();
            if (len >= RM_HEADER_LEN && (r & 1)) {
                put_le32(p, RM_MAGIC);
                p[4] = RM_VERSION;
                if (r & 2) {
                    p[5] = (uint8_t)(1 + (r >> 8) % RM_TYPE_MAX);
                }
                if (r & 4) {
                    put_le32(p + 8, (uint32_t)(len - RM_HEADER_LEN));
                }
                if ((r & 8) && p[5] == RM_INLINE && len >= RM_HEADER_LEN + RM_INLINE_HEAD) {
                    put_le32(p + RM_HEADER_LEN + 12,
                             (uint32_t)(len - RM_HEADER_LEN - RM_INLINE_HEAD));
                }
            }
        } else {
            /* A valid message with 1 to 3 random bytes changed. */
            size_t i = (size_t)(rnd() % n);
            len = valid_len[i];
            p = malloc(len);
            CHECK_REQUIRE(p != NULL);
            memcpy(p, valid[i], len);
            int flips = 1 + (int)(rnd() % 3);
            for (int f = 0; f < flips; f++) {
                size_t at = (size_t)(rnd() % (len < 48 ? len : 48)); /* mostly header + head */
                if (rnd() % 4 == 0) {
                    at = (size_t)(rnd() % len);
                }
                p[at] ^= (uint8_t)(1 + rnd() % 255);
            }
        }
        struct rm_msg d;
        sdd_err e = rm_decode(p, len, &d);
        if (e == SDD_OK) {
            accepted++;
            size_t re = rm_encode(&d, out, sizeof(out));
            if (re != len) {
                bad_reencode++;
            }
        } else if (e == SDD_EPROTO) {
            refused++;
        } else {
            other++;
        }
        free(p);
    }
    printf("fuzz: %u accepted, %u refused\n", accepted, refused);
    CHECK_EQ(bad_reencode, 0);
    CHECK_EQ(other, 0);
    CHECK(accepted > 0);
    CHECK(refused > 0);
}

int main(void)
{
    for (size_t i = 0; i < sizeof(inline_data); i++) {
        inline_data[i] = (uint8_t)(i * 13 + 5);
    }
    test_exact_bytes();
    test_round_trip();
    test_decode_refuses();
    test_fuzz();
    return check_finish();
}
