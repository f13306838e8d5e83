/* The 48-bit packed stub and the stub block (src/trigger/hough_stub.c): the exact bit layout of
 * a hand-built word, random round trips within half a quantisation step, every field's edges
 * (min packs, max does not), refusal of non-finite and out-of-range values, layer 7 and a
 * missing VALID flag, unpacking of corrupt words, the run unpacker's length, limit and bad-index
 * errors, and a stub block's round trip and every way its header or length can be wrong. Each
 * failure asserts its exact code and that the out-parameters stayed untouched. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "sddaq/trigger.h"

struct field {
    const char *name;
    size_t offset; /* of the float in sdd_stub */
    unsigned shift, bits;
    float min, max;
};

static const struct field fields[] = {
    {"r", offsetof(sdd_stub, r), 0, 12, SDD_STUB_R_MIN, SDD_STUB_R_MAX},
    {"phi", offsetof(sdd_stub, phi), 12, 14, -SDD_STUB_PHI_MAX, SDD_STUB_PHI_MAX},
    {"z", offsetof(sdd_stub, z), 26, 12, -SDD_STUB_Z_MAX, SDD_STUB_Z_MAX},
    {"bend", offsetof(sdd_stub, bend), 38, 5, -SDD_STUB_BEND_MAX, SDD_STUB_BEND_MAX},
};
#define NFIELDS (sizeof(fields) / sizeof(fields[0]))

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static double unit(void)
{
    return (double)(check_rand(&rng_state) >> 11) * 0x1.0p-53;
}

static float *field_of(sdd_stub *s, const struct field *f)
{
    return (float *)(void *)((char *)s + f->offset);
}

static double step_of(const struct field *f)
{
    return ((double)f->max - (double)f->min) / (double)(1u << f->bits);
}

static sdd_stub good_stub(void)
{
    return (sdd_stub){
        .r = 0.5f, .phi = 0.01f, .z = -0.3f, .bend = 0.1f, .layer = 2, .flags = SDD_STUB_VALID};
}

static sdd_stub random_stub(void)
{
    sdd_stub s;
    for (size_t i = 0; i < NFIELDS; i++) {
        const struct field *f = &fields[i];
        float v = (float)(f->min + unit() * ((double)f->max - f->min));
        *field_of(&s, f) = v < f->max ? v : f->min;
    }
    s.layer = (uint8_t)(check_rand(&rng_state) % 7);
    s.flags = SDD_STUB_VALID | (check_rand(&rng_state) & 1 ? SDD_STUB_OVERLAP : 0);
    return s;
}

static uint64_t word_of(const uint8_t b[6])
{
    uint64_t w = 0;
    for (int i = 5; i >= 0; i--) {
        w = w << 8 | b[i];
    }
    return w;
}

static void word_to(uint64_t w, uint8_t b[6])
{
    for (int i = 0; i < 6; i++) {
        b[i] = (uint8_t)(w >> (8 * i));
    }
}

static bool stub_eq(const sdd_stub *a, const sdd_stub *b)
{
    return a->r == b->r && a->phi == b->phi && a->z == b->z && a->bend == b->bend &&
           a->layer == b->layer && a->flags == b->flags;
}

/* Codes 5, 100, 4000, 31 and layer 6 with both flags: each field's bits where the format says. */
static void test_bit_layout(void)
{
    unsigned codes[NFIELDS] = {5, 100, 4000, 31};
    sdd_stub s = {.layer = 6, .flags = SDD_STUB_VALID | SDD_STUB_OVERLAP};
    uint64_t want = 6ull << 43 | 1ull << 46 | 1ull << 47;
    for (size_t i = 0; i < NFIELDS; i++) {
        const struct field *f = &fields[i];
        *field_of(&s, f) = (float)(f->min + (codes[i] + 0.5) * step_of(f));
        want |= (uint64_t)codes[i] << f->shift;
    }
    uint8_t b[6];
    CHECK_OK(sdd_stub_pack(&s, b));
    CHECK_EQ(word_of(b), want);
    CHECK_EQ(b[0], want & 0xff); /* little-endian: byte 0 holds bits 0-7 */
    sdd_stub u;
    CHECK_OK(sdd_stub_unpack(b, &u));
    CHECK(stub_eq(&u, &s));

    s.flags = SDD_STUB_VALID;
    CHECK_OK(sdd_stub_pack(&s, b));
    CHECK_EQ(word_of(b), want & ~(1ull << 47));
}

static void test_round_trip(void)
{
    int within = 0, repacked = 0;
    for (int n = 0; n < 100000; n++) {
        sdd_stub s = random_stub(), u;
        uint8_t b[6], b2[6];
        if (sdd_stub_pack(&s, b) != SDD_OK || sdd_stub_unpack(b, &u) != SDD_OK) {
            CHECK(!"random in-range stub failed to pack or unpack");
            return;
        }
        bool ok = u.layer == s.layer && u.flags == s.flags;
        for (size_t i = 0; i < NFIELDS; i++) {
            const struct field *f = &fields[i];
            double d = fabs((double)*field_of(&u, f) - (double)*field_of(&s, f));
            ok = ok && d <= step_of(f) / 2 + 2e-7; /* + float rounding of the centre */
        }
        within += ok;
        /* An unpacked stub sits at its step's centre, so it packs to the same word. */
        repacked += sdd_stub_pack(&u, b2) == SDD_OK && memcmp(b, b2, 6) == 0;
    }
    CHECK_EQ(within, 100000);
    CHECK_EQ(repacked, 100000);
}

static void test_field_edges(void)
{
    for (size_t i = 0; i < NFIELDS; i++) {
        const struct field *f = &fields[i];
        sdd_stub s = good_stub(), u;
        uint8_t b[6];
        unsigned top = (1u << f->bits) - 1;

        *field_of(&s, f) = f->min; /* min is inside: code 0 */
        CHECK_OK(sdd_stub_pack(&s, b));
        CHECK_EQ((word_of(b) >> f->shift) & top, 0);
        CHECK_OK(sdd_stub_unpack(b, &u));
        CHECK(fabs(*field_of(&u, f) - (f->min + step_of(f) / 2)) < 1e-6);

        *field_of(&s, f) = nextafterf(f->max, -INFINITY); /* just below max: the top code */
        CHECK_OK(sdd_stub_pack(&s, b));
        CHECK_EQ((word_of(b) >> f->shift) & top, top);

        float bad[] = {f->max, nextafterf(f->min, -INFINITY), 2 * f->max, NAN, INFINITY, -INFINITY};
        for (size_t j = 0; j < sizeof(bad) / sizeof(bad[0]); j++) {
            *field_of(&s, f) = bad[j];
            memset(b, 0xAA, sizeof(b));
            int e = sdd_stub_pack(&s, b);
            if (e != SDD_EINVAL) {
                fprintf(stderr, "field %s value %g: got %d\n", f->name, (double)bad[j], e);
            }
            CHECK_EQ(e, SDD_EINVAL);
            CHECK_EQ(word_of(b), 0xAAAAAAAAAAAAull);
        }
    }
}

static void test_bad_layer_and_flags(void)
{
    sdd_stub s = good_stub();
    uint8_t b[6];
    for (int layer = 0; layer < 7; layer++) {
        s.layer = (uint8_t)layer;
        CHECK_OK(sdd_stub_pack(&s, b));
    }
    uint8_t bad_layers[] = {7, 8, 255};
    for (size_t i = 0; i < sizeof(bad_layers); i++) {
        s.layer = bad_layers[i];
        CHECK_EQ(sdd_stub_pack(&s, b), SDD_EINVAL);
    }
    s = good_stub();
    uint8_t bad_flags[] = {0, SDD_STUB_OVERLAP, SDD_STUB_VALID | 4, SDD_STUB_VALID | 0x80};
    for (size_t i = 0; i < sizeof(bad_flags); i++) {
        s.flags = bad_flags[i];
        memset(b, 0x55, sizeof(b));
        CHECK_EQ(sdd_stub_pack(&s, b), SDD_EINVAL);
        CHECK_EQ(word_of(b), 0x555555555555ull);
    }
}

static void test_unpack_corrupt(void)
{
    sdd_stub s = good_stub(), u;
    uint8_t b[6];
    CHECK_OK(sdd_stub_pack(&s, b));
    uint64_t w = word_of(b);

    uint64_t bad[] = {
        0,                                /* all zero: no VALID */
        w & ~(1ull << 46),                /* VALID cleared */
        (w & ~(7ull << 43)) | 7ull << 43, /* layer 7 */
        0xFFFFFFFFFFFFull,                /* all ones: layer 7 */
        (w & ~(1ull << 46)) | 1ull << 47, /* OVERLAP without VALID */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        word_to(bad[i], b);
        u = (sdd_stub){.r = 9.0f, .layer = 99};
        CHECK_EQ(sdd_stub_unpack(b, &u), SDD_ECORRUPT);
        CHECK(u.r == 9.0f && u.layer == 99);
    }
    /* Any word with VALID and layer < 7 is a stub: every field value is in range. */
    word_to((w & ~(7ull << 43)) | 6ull << 43 | 0x3FFFFFFFFFull, b);
    CHECK_OK(sdd_stub_unpack(b, &u));
    CHECK(u.r < SDD_STUB_R_MAX && u.phi < SDD_STUB_PHI_MAX && u.z < SDD_STUB_Z_MAX);
    CHECK_EQ(u.layer, 6);
}

static void test_stubs_unpack(void)
{
    enum { N = 5 };
    sdd_stub in[N], out[N + 1];
    uint8_t buf[6 * N];
    for (int i = 0; i < N; i++) {
        in[i] = random_stub();
        CHECK_OK(sdd_stub_pack(&in[i], buf + 6 * i));
    }
    size_t n = 99, bad = 99;
    CHECK_OK(sdd_stubs_unpack(buf, sizeof(buf), out, N, &n, &bad));
    CHECK_EQ(n, N);
    CHECK_EQ(bad, 99);
    for (int i = 0; i < N; i++) {
        sdd_stub u;
        sdd_stub_unpack(buf + 6 * i, &u);
        CHECK(stub_eq(&out[i], &u));
    }
    CHECK_OK(sdd_stubs_unpack(buf, 0, out, 0, &n, NULL));
    CHECK_EQ(n, 0);

    n = 99;
    for (size_t len = 1; len < 6; len++) {
        CHECK_EQ(sdd_stubs_unpack(buf, sizeof(buf) - len, out, N, &n, &bad), SDD_EPROTO);
    }
    CHECK_EQ(sdd_stubs_unpack(buf, sizeof(buf), out, N - 1, &n, &bad), SDD_ETOOBIG);
    CHECK_EQ(sdd_stubs_unpack(buf, 6, out, 0, &n, &bad), SDD_ETOOBIG);
    CHECK_EQ(n, 99);

    buf[6 * 3 + 5] &= (uint8_t) ~(1u << 6); /* clear VALID (bit 46) of stub 3 */
    CHECK_EQ(sdd_stubs_unpack(buf, sizeof(buf), out, N, &n, &bad), SDD_ECORRUPT);
    CHECK_EQ(bad, 3);
    CHECK_EQ(n, 99);
    CHECK_EQ(sdd_stubs_unpack(buf, sizeof(buf), out, N, &n, NULL), SDD_ECORRUPT);
}

enum { BLOCK_N = 40 };

static int build_block(uint8_t *buf, size_t cap, sdd_stub *stubs)
{
    for (int i = 0; i < BLOCK_N; i++) {
        sdd_stub s = random_stub();
        uint8_t b[6];
        sdd_stub_pack(&s, b);
        sdd_stub_unpack(b, &stubs[i]); /* quantised, so the read-back compares exactly */
    }
    return sdd_stub_block_write(buf, cap, 0xBEEF, stubs, BLOCK_N);
}

static void test_block_round_trip(void)
{
    sdd_stub in[BLOCK_N], out[BLOCK_N];
    uint8_t buf[SDD_STUB_BLOCK_HEADER + 6 * BLOCK_N];
    int len = build_block(buf, sizeof(buf), in);
    CHECK_EQ(len, sizeof(buf));
    CHECK(buf[0] == 'S' && buf[1] == 'H' && buf[2] == 1 && buf[3] == 0);
    CHECK(buf[4] == 0xEF && buf[5] == 0xBE && buf[6] == BLOCK_N && buf[7] == 0);

    uint16_t sector = 0;
    size_t n = 0;
    CHECK_OK(sdd_stub_block_read(buf, (size_t)len, &sector, out, BLOCK_N, &n));
    CHECK_EQ(sector, 0xBEEF);
    CHECK_EQ(n, BLOCK_N);
    int same = 0;
    for (int i = 0; i < BLOCK_N; i++) {
        same += stub_eq(&in[i], &out[i]);
    }
    CHECK_EQ(same, BLOCK_N);

    /* An empty block is 8 bytes and valid. */
    CHECK_EQ(sdd_stub_block_write(buf, SDD_STUB_BLOCK_HEADER, 3, in, 0), SDD_STUB_BLOCK_HEADER);
    CHECK_OK(sdd_stub_block_read(buf, SDD_STUB_BLOCK_HEADER, &sector, out, 0, &n));
    CHECK_EQ(sector, 3);
    CHECK_EQ(n, 0);
}

static void test_block_write_errors(void)
{
    sdd_stub in[BLOCK_N];
    uint8_t buf[SDD_STUB_BLOCK_HEADER + 6 * BLOCK_N];
    CHECK_EQ(build_block(buf, sizeof(buf) - 1, in), SDD_ETOOBIG);
    CHECK_EQ(sdd_stub_block_write(buf, SDD_STUB_BLOCK_HEADER - 1, 0, in, 0), SDD_ETOOBIG);
    CHECK_EQ(sdd_stub_block_write(buf, 0, 0, in, 0), SDD_ETOOBIG);
    CHECK_EQ(sdd_stub_block_write(buf, sizeof(buf), 0, in, 65536), SDD_ETOOBIG);
    in[7].phi = NAN;
    CHECK_EQ(sdd_stub_block_write(buf, sizeof(buf), 0, in, BLOCK_N), SDD_EINVAL);
}

/* Read a mangled block and insist on the code and on untouched out-parameters. */
static void expect_read(const uint8_t *buf, size_t len, size_t max, sdd_err want)
{
    sdd_stub out[BLOCK_N + 2];
    uint16_t sector = 0x1234;
    size_t n = 777;
    sdd_err e = sdd_stub_block_read(buf, len, &sector, out, max, &n);
    if (e != want) {
        fprintf(stderr, "block read len %zu max %zu: %s, want %s\n", len, max, sdd_errname(e),
                sdd_errname(want));
    }
    CHECK_EQ(e, want);
    CHECK(sector == 0x1234 && n == 777);
}

static void test_block_read_errors(void)
{
    sdd_stub in[BLOCK_N];
    uint8_t good[SDD_STUB_BLOCK_HEADER + 6 * BLOCK_N + 6], buf[sizeof(good)];
    size_t len = (size_t)build_block(good, sizeof(good), in);

    for (size_t l = 0; l < SDD_STUB_BLOCK_HEADER; l++) {
        expect_read(good, l, BLOCK_N, SDD_EPROTO);
    }
    expect_read(good, len - 1, BLOCK_N, SDD_EPROTO); /* truncated by one byte */
    expect_read(good, len - 6, BLOCK_N, SDD_EPROTO); /* one stub short */
    memcpy(buf, good, len);
    memset(buf + len, 0, 6);
    expect_read(buf, len + 1, BLOCK_N, SDD_EPROTO); /* a trailing byte */

    /* Magic, version, flags, and counts that disagree with the length. */
    static const struct {
        size_t at;
        uint8_t value;
    } pokes[] = {
        {0, 'X'},  {1, 'h'},         {2, 0},           {2, 2}, {3, 1},
        {3, 0x80}, {6, BLOCK_N + 1}, {6, BLOCK_N - 1}, {7, 1},
    };
    for (size_t i = 0; i < sizeof(pokes) / sizeof(pokes[0]); i++) {
        memcpy(buf, good, len);
        buf[pokes[i].at] = pokes[i].value;
        expect_read(buf, len, BLOCK_N, SDD_EPROTO);
    }

    expect_read(good, len, BLOCK_N - 1, SDD_ETOOBIG);
    expect_read(good, len, 0, SDD_ETOOBIG);

    memcpy(buf, good, len);
    buf[SDD_STUB_BLOCK_HEADER + 6 * 20 + 5] |= 7u << 3; /* stub 20: layer 7 */
    expect_read(buf, len, BLOCK_N, SDD_ECORRUPT);
    memcpy(buf, good, len);
    buf[len - 1] &= (uint8_t) ~(1u << 6); /* last stub: no VALID */
    expect_read(buf, len, BLOCK_N, SDD_ECORRUPT);
}

int main(void)
{
    test_bit_layout();
    test_round_trip();
    test_field_edges();
    test_bad_layer_and_flags();
    test_unpack_corrupt();
    test_stubs_unpack();
    test_block_round_trip();
    test_block_write_errors();
    test_block_read_errors();
    return check_finish();
}
