/* Transmittable ring buffer: size and init limits, the exact header bytes, index arithmetic
 * against a model over many wraps (count 2, 3, 5), too-big pushes, reserve/commit order as seen
 * in the header, raw bytes copied elsewhere and adopted or refreshed, clone, flush, malformed
 * and randomly corrupted headers, torn-cell detection, and a writer thread racing a reader that
 * copies the newest cell in address order the way an RMA read does: every copy whose sequence
 * words agree must hold exactly the element of that sequence. */
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/le.h"
#include "sddaq/clock.h"
#include "sddaq/rmem.h"

#define HDR   SDD_TRB_HEADER_SIZE
#define MAGIC 0x52544453u

/* Header and cell offsets as documented in docs/formats.md, spelled out here so that a layout
 * change in trb.c cannot hide behind its own constants. */
#define H_ELEMENT_SIZE 8
#define H_COUNT        16
#define H_STRIDE       24
#define H_BUFFER_SIZE  32
#define H_PUSHES       40

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint64_t rnd(void)
{
    return check_rand(&rng_state);
}

static size_t round_up8(size_t n)
{
    return (n + 7) & ~(size_t)7;
}

static size_t model_stride(size_t es)
{
    return 16 + round_up8(es) + 8;
}

/* 8-byte aligned, zero-filled memory (malloc's alignment is at least 16). */
static uint8_t *alloc_mem(size_t len)
{
    uint8_t *p = calloc(1, len);
    CHECK_REQUIRE(p != NULL);
    return p;
}

static uint64_t rd64(const uint8_t *p)
{
    return get_le64(p);
}

static uint64_t seq_end_word(const struct sdd_trb *t, uint64_t seq)
{
    return rd64(t->mem + sdd_trb_cell_offset(t, seq));
}

static uint64_t seq_begin_word(const struct sdd_trb *t, uint64_t seq)
{
    return rd64(t->mem + sdd_trb_cell_offset(t, seq) + 16 + round_up8(t->element_size));
}

/* Element contents for sequence s: every byte depends on s and its position. */
static void fill_elem(uint8_t *p, size_t len, uint64_t s)
{
    for (size_t k = 0; k < len; k++) {
        p[k] = (uint8_t)(s * 31 + k * 7 + 1);
    }
}

static bool elem_is(const uint8_t *p, size_t len, uint64_t s)
{
    for (size_t k = 0; k < len; k++) {
        if (p[k] != (uint8_t)(s * 31 + k * 7 + 1)) {
            return false;
        }
    }
    return true;
}

/* ---- sizes, init, header bytes -------------------------------------------------------------- */

static void test_bytes_and_init(void)
{
    CHECK_EQ(sdd_trb_bytes(1, 2), HDR + 2 * 32);
    CHECK_EQ(sdd_trb_bytes(8, 3), HDR + 3 * 32);
    CHECK_EQ(sdd_trb_bytes(9, 2), HDR + 2 * 40);
    CHECK_EQ(sdd_trb_bytes(4096, 3), HDR + 3 * (4096 + 24));
    CHECK_EQ(sdd_trb_bytes(SIZE_MAX, 2), 0);
    CHECK_EQ(sdd_trb_bytes(SIZE_MAX - 30, 2), 0);
    CHECK_EQ(sdd_trb_bytes(8, SIZE_MAX / 16), 0);
    CHECK_EQ(sdd_trb_bytes(SIZE_MAX / 4, 4), 0);

    size_t bytes = sdd_trb_bytes(12, 3);
    uint8_t *mem = alloc_mem(bytes + 8);
    struct sdd_trb sentinel, t;
    memset(&sentinel, 0xA5, sizeof(sentinel));
    t = sentinel;
    CHECK_EQ(sdd_trb_init(&t, mem, bytes, 12, 1), SDD_EINVAL);
    CHECK_EQ(sdd_trb_init(&t, mem, bytes, 12, 0), SDD_EINVAL);
    CHECK_EQ(sdd_trb_init(&t, mem, bytes, 0, 3), SDD_EINVAL);
    CHECK_EQ(sdd_trb_init(&t, mem, bytes - 1, 12, 3), SDD_EINVAL);
    CHECK_EQ(sdd_trb_init(&t, mem + 4, bytes, 12, 3), SDD_EINVAL);
    CHECK_EQ(sdd_trb_init(&t, NULL, bytes, 12, 3), SDD_EINVAL);
    CHECK_EQ(sdd_trb_init(&t, mem, SIZE_MAX, SIZE_MAX - 8, 3), SDD_EINVAL);
    CHECK(memcmp(&t, &sentinel, sizeof(t)) == 0); /* untouched on failure */

    memset(mem, 0xEE, bytes + 8);
    CHECK_OK(sdd_trb_init(&t, mem, bytes, 12, 3));
    CHECK(t.mem == mem);
    CHECK_EQ(t.mem_len, bytes);
    CHECK_EQ(t.element_size, 12);
    CHECK_EQ(t.count, 3);
    CHECK_EQ(t.stride, 40);
    CHECK_EQ(t.pushes, 0);

    /* The header, byte by byte. */
    static const uint8_t magic_bytes[4] = {'S', 'D', 'T', 'R'};
    CHECK(memcmp(mem, magic_bytes, 4) == 0);
    CHECK_EQ(get_le32(mem), MAGIC);
    CHECK_EQ(get_le16(mem + 4), 1);
    CHECK_EQ(get_le16(mem + 6), 64);
    CHECK_EQ(rd64(mem + H_ELEMENT_SIZE), 12);
    CHECK_EQ(rd64(mem + H_COUNT), 3);
    CHECK_EQ(rd64(mem + H_STRIDE), 40);
    CHECK_EQ(rd64(mem + H_BUFFER_SIZE), bytes);
    CHECK_EQ(rd64(mem + H_PUSHES), 0);
    bool rest_zero = true;
    for (size_t i = 48; i < bytes; i++) {
        rest_zero = rest_zero && mem[i] == 0;
    }
    CHECK(rest_zero);
    CHECK_EQ(mem[bytes], 0xEE); /* nothing past the ring is written */

    CHECK_EQ(sdd_trb_available(&t), 0);
    CHECK_EQ(sdd_trb_newest_seq(&t), 0);
    CHECK_EQ(sdd_trb_oldest_seq(&t), 0);
    CHECK(sdd_trb_get(&t, 0) == NULL);
    CHECK(sdd_trb_get(&t, -1) == NULL);
    CHECK(sdd_trb_newest(&t) == NULL);
    CHECK(sdd_trb_oldest(&t) == NULL);
    CHECK(sdd_trb_at_seq(&t, 0) == NULL);
    CHECK(sdd_trb_at_seq(&t, 1) == NULL);
    CHECK_EQ(sdd_trb_cell_offset(&t, 0), HDR);
    CHECK_EQ(sdd_trb_cell_offset(&t, 1), HDR);
    CHECK_EQ(sdd_trb_cell_offset(&t, 3), HDR + 80);
    CHECK_EQ(sdd_trb_cell_offset(&t, 4), HDR);
    CHECK_EQ(sdd_trb_check(&t, 0, NULL), SDD_EINVAL);
    CHECK_EQ(sdd_trb_check(&t, 1, NULL), SDD_EAGAIN);
    free(mem);
}

/* ---- index arithmetic against a model ------------------------------------------------------- */

static void check_against_model(const struct sdd_trb *t, uint64_t n)
{
    size_t count = t->count;
    uint64_t avail = n < count ? n : count;
    uint64_t oldest = n == 0 ? 0 : (n > count ? n - count + 1 : 1);
    CHECK_EQ(sdd_trb_available(t), avail);
    CHECK_EQ(sdd_trb_newest_seq(t), n);
    CHECK_EQ(sdd_trb_oldest_seq(t), oldest);

    for (uint64_t s = 0; s <= n + 2; s++) {
        uint8_t *p = sdd_trb_at_seq(t, s);
        bool held = s >= 1 && s <= n && s >= oldest;
        CHECK(held == (p != NULL));
        size_t off = HDR + (s == 0 ? 0 : (size_t)((s - 1) % count)) * t->stride;
        CHECK_EQ(sdd_trb_cell_offset(t, s), off);
        if (held) {
            CHECK(p == t->mem + off + 16);
            CHECK(elem_is(p, t->element_size, s));
            uint64_t stamp = 0;
            CHECK_OK(sdd_trb_check(t, s, &stamp));
            CHECK_EQ(stamp, s * 1000);
        } else if (s >= 1 && s <= n) {
            uint64_t stamp = 77;
            CHECK_EQ(sdd_trb_check(t, s, &stamp), SDD_EAGAIN); /* overwritten by s + k*count */
            CHECK_EQ(stamp, 77);
        }
    }
    for (long i = -(long)count - 2; i <= (long)count + 2; i++) {
        uint64_t want = 0;
        if (i >= 0 && (uint64_t)i < avail) {
            want = oldest + (uint64_t)i;
        } else if (i < 0 && (uint64_t)(-i) <= avail) {
            want = n + 1 - (uint64_t)(-i);
        }
        void *p = sdd_trb_get(t, i);
        CHECK(p == (want ? sdd_trb_at_seq(t, want) : NULL));
    }
    CHECK(sdd_trb_get(t, LONG_MIN) == NULL);
    CHECK(sdd_trb_get(t, LONG_MAX) == NULL);
    CHECK(sdd_trb_newest(t) == sdd_trb_get(t, -1));
    CHECK(sdd_trb_oldest(t) == sdd_trb_get(t, 0));
    CHECK(sdd_trb_newest(t) == (n ? sdd_trb_at_seq(t, n) : NULL));
    CHECK(sdd_trb_oldest(t) == (n ? sdd_trb_at_seq(t, oldest) : NULL));
    CHECK_EQ(rd64(t->mem + H_PUSHES), n);
}

static void test_index_model(void)
{
    static const size_t counts[] = {2, 3, 5};
    for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
        size_t count = counts[c], es = 12;
        size_t bytes = sdd_trb_bytes(es, count);
        uint8_t *mem = alloc_mem(bytes);
        struct sdd_trb t;
        CHECK_OK(sdd_trb_init(&t, mem, bytes, es, count));
        check_against_model(&t, 0);
        uint8_t buf[12];
        for (uint64_t s = 1; s <= 6 * count + 3; s++) {
            fill_elem(buf, es, s);
            if (s % 2) {
                CHECK_EQ(sdd_trb_push(&t, buf, es, s * 1000), (int64_t)s);
            } else {
                uint8_t *p = sdd_trb_reserve(&t);
                memcpy(p, buf, es);
                CHECK_EQ(sdd_trb_commit(&t, s * 1000), s);
            }
            check_against_model(&t, s);
        }
        free(mem);
    }
}

/* ---- push, reserve, commit ------------------------------------------------------------------ */

static void test_push_too_big(void)
{
    size_t es = 20, bytes = sdd_trb_bytes(es, 2);
    uint8_t *mem = alloc_mem(bytes);
    uint8_t *before = alloc_mem(bytes);
    struct sdd_trb t;
    CHECK_OK(sdd_trb_init(&t, mem, bytes, es, 2));
    uint8_t big[64];
    memset(big, 0xAA, sizeof(big));
    CHECK_EQ(sdd_trb_push(&t, big, es, 1), 1);
    memcpy(before, mem, bytes);
    CHECK_EQ(sdd_trb_push(&t, big, es + 1, 2), SDD_ETOOBIG);
    CHECK_EQ(sdd_trb_push(&t, big, SIZE_MAX, 2), SDD_ETOOBIG);
    CHECK_EQ(t.pushes, 1);
    CHECK(memcmp(before, mem, bytes) == 0); /* nothing written, not even the marker */

    CHECK_EQ(sdd_trb_push(&t, big, es, 2), 2);
    /* Seq 3 reuses seq 1's cell: a short push zeroes the rest of the payload and padding. */
    CHECK_EQ(sdd_trb_push(&t, "xyz", 3, 3), 3);
    uint8_t *p = sdd_trb_at_seq(&t, 3);
    CHECK(memcmp(p, "xyz", 3) == 0);
    bool zero = true;
    for (size_t k = 3; k < round_up8(es); k++) {
        zero = zero && p[k] == 0;
    }
    CHECK(zero);
    CHECK_EQ(sdd_trb_push(&t, NULL, 0, 4), 4);
    p = sdd_trb_at_seq(&t, 4);
    zero = true;
    for (size_t k = 0; k < round_up8(es); k++) {
        zero = zero && p[k] == 0;
    }
    CHECK(zero);
    CHECK_OK(sdd_trb_check(&t, 4, NULL));
    free(before);
    free(mem);
}

static void test_reserve_commit_order(void)
{
    size_t es = 16, count = 3, bytes = sdd_trb_bytes(es, count);
    uint8_t *mem = alloc_mem(bytes);
    struct sdd_trb t, reader;
    CHECK_OK(sdd_trb_init(&t, mem, bytes, es, count));
    CHECK_OK(sdd_trb_adopt(&reader, mem, bytes)); /* a second view of the same memory */

    uint8_t *p1 = sdd_trb_reserve(&t);
    uint8_t *p2 = sdd_trb_reserve(&t);
    CHECK(p1 == p2);
    CHECK(p1 == mem + HDR + 16);
    /* Reserved, not committed: marker set, nothing else visible. */
    CHECK_EQ(seq_begin_word(&t, 1), 1);
    CHECK_EQ(seq_end_word(&t, 1), 0);
    CHECK_EQ(rd64(mem + H_PUSHES), 0);
    CHECK_EQ(t.pushes, 0);
    CHECK_EQ(sdd_trb_check(&t, 1, NULL), SDD_EAGAIN);
    CHECK_OK(sdd_trb_refresh(&reader));
    CHECK_EQ(reader.pushes, 0);
    CHECK(sdd_trb_newest(&reader) == NULL);

    fill_elem(p1, es, 1);
    CHECK_EQ(sdd_trb_commit(&t, 111), 1);
    CHECK_EQ(seq_end_word(&t, 1), 1);
    CHECK_EQ(rd64(mem + HDR + 8), 111); /* stamp */
    CHECK_EQ(rd64(mem + H_PUSHES), 1);
    CHECK_EQ(t.pushes, 1);
    CHECK_OK(sdd_trb_refresh(&reader));
    CHECK_EQ(reader.pushes, 1);
    CHECK(sdd_trb_newest(&reader) == p1);
    uint64_t stamp = 0;
    CHECK_OK(sdd_trb_check(&reader, 1, &stamp));
    CHECK_EQ(stamp, 111);

    /* The next reserve moves to the next cell. */
    uint8_t *p3 = sdd_trb_reserve(&t);
    CHECK(p3 == mem + HDR + t.stride + 16);
    fill_elem(p3, es, 2);
    CHECK_EQ(sdd_trb_commit(&t, 222), 2);

    /* Fill the ring, then commit without reserve: it reserves itself; seq 4 lands in seq 1's
     * cell with that cell's payload unchanged. */
    uint8_t buf[16];
    fill_elem(buf, es, 3);
    CHECK_EQ(sdd_trb_push(&t, buf, es, 333), 3);
    CHECK_EQ(sdd_trb_commit(&t, 444), 4);
    CHECK_EQ(seq_begin_word(&t, 4), 4);
    CHECK_EQ(seq_end_word(&t, 4), 4);
    CHECK_OK(sdd_trb_check(&t, 4, &stamp));
    CHECK_EQ(stamp, 444);
    CHECK(sdd_trb_at_seq(&t, 4) == p1);
    CHECK(elem_is(sdd_trb_at_seq(&t, 4), es, 1));
    CHECK(sdd_trb_at_seq(&t, 1) == NULL);
    CHECK_EQ(rd64(mem + H_PUSHES), 4);
    free(mem);
}

/* ---- adopt, refresh, clone, flush ----------------------------------------------------------- */

static void check_same_contents(const struct sdd_trb *a, const struct sdd_trb *b)
{
    CHECK_EQ(a->element_size, b->element_size);
    CHECK_EQ(a->count, b->count);
    CHECK_EQ(a->stride, b->stride);
    CHECK_EQ(a->pushes, b->pushes);
    CHECK_EQ(sdd_trb_available(a), sdd_trb_available(b));
    CHECK_EQ(sdd_trb_oldest_seq(a), sdd_trb_oldest_seq(b));
    for (long i = -(long)a->count - 1; i <= (long)a->count; i++) {
        const uint8_t *pa = sdd_trb_get(a, i), *pb = sdd_trb_get(b, i);
        CHECK((pa == NULL) == (pb == NULL));
        if (pa != NULL && pb != NULL) {
            CHECK(pa - a->mem == pb - b->mem);
            CHECK(memcmp(pa, pb, a->element_size) == 0);
        }
    }
    for (uint64_t s = sdd_trb_oldest_seq(a); s >= 1 && s <= a->pushes; s++) {
        uint64_t sa = 0, sb = 1;
        CHECK_OK(sdd_trb_check(a, s, &sa));
        CHECK_OK(sdd_trb_check(b, s, &sb));
        CHECK_EQ(sa, sb);
    }
}

static void push_n(struct sdd_trb *t, uint64_t n)
{
    uint8_t *buf = alloc_mem(t->element_size);
    for (uint64_t i = 0; i < n; i++) {
        uint64_t s = t->pushes + 1;
        fill_elem(buf, t->element_size, s);
        CHECK_EQ(sdd_trb_push(t, buf, t->element_size, s * 1000), (int64_t)s);
    }
    free(buf);
}

static void test_adopt_refresh(void)
{
    size_t es = 100, count = 5, bytes = sdd_trb_bytes(es, count);
    uint8_t *src_mem = alloc_mem(bytes);
    uint8_t *dst_mem = alloc_mem(bytes + 64);
    struct sdd_trb src, dst;
    CHECK_OK(sdd_trb_init(&src, src_mem, bytes, es, count));
    push_n(&src, 7);

    memcpy(dst_mem, src_mem, bytes);
    CHECK_OK(sdd_trb_adopt(&dst, dst_mem, bytes + 64));
    CHECK(dst.mem == dst_mem);
    CHECK_EQ(dst.mem_len, bytes + 64);
    check_same_contents(&src, &dst);

    /* More pushes at the source, shipped again: refresh follows. */
    push_n(&src, 4);
    CHECK_EQ(dst.pushes, 7);
    memcpy(dst_mem, src_mem, bytes);
    CHECK_OK(sdd_trb_refresh(&dst));
    check_same_contents(&src, &dst);

    /* An empty ring ships as well. */
    struct sdd_trb e;
    sdd_trb_flush(&src);
    memcpy(dst_mem, src_mem, bytes);
    CHECK_OK(sdd_trb_adopt(&e, dst_mem, bytes));
    CHECK_EQ(e.pushes, 0);
    CHECK(sdd_trb_newest(&e) == NULL);

    /* A geometry change underneath: refresh refuses and leaves the view alone. */
    struct sdd_trb other, before = dst;
    uint8_t *other_mem = alloc_mem(bytes);
    CHECK_OK(sdd_trb_init(&other, other_mem, bytes, 60, 5));
    memcpy(dst_mem, other_mem, sdd_trb_bytes(60, 5));
    CHECK_EQ(sdd_trb_refresh(&dst), SDD_ECORRUPT);
    CHECK(memcmp(&dst, &before, sizeof(dst)) == 0);
    memset(dst_mem, 0, 8);
    CHECK_EQ(sdd_trb_refresh(&dst), SDD_ECORRUPT);
    free(other_mem);
    free(dst_mem);
    free(src_mem);
}

static void test_clone(void)
{
    size_t es = 33, count = 3, bytes = sdd_trb_bytes(es, count);
    uint8_t *src_mem = alloc_mem(bytes + 16);
    uint8_t *dst_mem = alloc_mem(bytes + 32);
    struct sdd_trb src, dst, sentinel;
    CHECK_OK(sdd_trb_init(&src, src_mem, bytes + 16, es, count));
    push_n(&src, 5);

    memset(&sentinel, 0x5A, sizeof(sentinel));
    dst = sentinel;
    CHECK_EQ(sdd_trb_clone(&src, dst_mem, bytes + 15, &dst), SDD_EINVAL);
    CHECK_EQ(sdd_trb_clone(&src, dst_mem + 4, bytes + 16, &dst), SDD_EINVAL);
    CHECK(memcmp(&dst, &sentinel, sizeof(dst)) == 0);

    CHECK_OK(sdd_trb_clone(&src, dst_mem, bytes + 32, &dst));
    CHECK(dst.mem == dst_mem);
    CHECK_EQ(dst.mem_len, bytes + 32);
    check_same_contents(&src, &dst);
    CHECK(memcmp(src_mem, dst_mem, bytes) == 0);

    /* Independent afterwards: each side pushes its own elements. */
    push_n(&dst, 2);
    CHECK_EQ(src.pushes, 5);
    CHECK_EQ(rd64(src_mem + H_PUSHES), 5);
    CHECK_OK(sdd_trb_refresh(&src));
    CHECK_EQ(src.pushes, 5);
    CHECK_EQ(dst.pushes, 7);
    CHECK(elem_is(sdd_trb_newest(&dst), es, 7));
    CHECK(elem_is(sdd_trb_newest(&src), es, 5));
    free(dst_mem);
    free(src_mem);
}

static void test_flush(void)
{
    size_t es = 8, count = 3, bytes = sdd_trb_bytes(es, count);
    uint8_t *mem = alloc_mem(bytes);
    struct sdd_trb t, view;
    CHECK_OK(sdd_trb_init(&t, mem, bytes, es, count));
    push_n(&t, 5);
    sdd_trb_reserve(&t); /* a reserved, uncommitted cell is forgotten too */
    sdd_trb_flush(&t);
    CHECK_EQ(t.pushes, 0);
    CHECK_EQ(rd64(mem + H_PUSHES), 0);
    CHECK_EQ(sdd_trb_available(&t), 0);
    CHECK(sdd_trb_newest(&t) == NULL);
    bool zero = true;
    for (size_t i = 0; i < count; i++) {
        zero = zero && seq_end_word(&t, i + 1) == 0 && seq_begin_word(&t, i + 1) == 0;
    }
    CHECK(zero);
    for (uint64_t s = 1; s <= 6; s++) {
        CHECK_EQ(sdd_trb_check(&t, s, NULL), SDD_EAGAIN);
    }
    CHECK_OK(sdd_trb_adopt(&view, mem, bytes));
    CHECK_EQ(view.pushes, 0);

    push_n(&t, 1);
    CHECK_EQ(t.pushes, 1);
    CHECK(sdd_trb_newest(&t) == mem + HDR + 16);
    CHECK(elem_is(sdd_trb_newest(&t), es, 1));
    CHECK_OK(sdd_trb_check(&t, 1, NULL));
    CHECK_OK(sdd_trb_refresh(&view));
    CHECK_EQ(view.pushes, 1);
    free(mem);
}

/* ---- malformed and corrupted headers -------------------------------------------------------- */

static void test_adopt_malformed(void)
{
    size_t es = 24, count = 3, bytes = sdd_trb_bytes(es, count);
    uint8_t *good = alloc_mem(bytes);
    uint8_t *mem = alloc_mem(bytes + 8);
    struct sdd_trb t, sentinel;
    CHECK_OK(sdd_trb_init(&t, good, bytes, es, count));
    push_n(&t, 4);
    memset(&sentinel, 0x3C, sizeof(sentinel));

#define TRY(mutation, want)                               \
    do {                                                  \
        memcpy(mem, good, bytes);                         \
        mutation;                                         \
        t = sentinel;                                     \
        CHECK_EQ(sdd_trb_adopt(&t, mem, bytes), (want));  \
        if ((want) != SDD_OK) {                           \
            CHECK(memcmp(&t, &sentinel, sizeof(t)) == 0); \
        }                                                 \
    } while (0)

    TRY((void)0, SDD_OK);
    TRY(mem[0] ^= 1, SDD_ECORRUPT);            /* magic */
    TRY(mem[3] = 'X', SDD_ECORRUPT);           /* magic */
    TRY(put_le16(mem + 4, 0), SDD_ECORRUPT);   /* version */
    TRY(put_le16(mem + 4, 2), SDD_ECORRUPT);   /* version */
    TRY(put_le16(mem + 6, 32), SDD_ECORRUPT);  /* header_size */
    TRY(put_le16(mem + 6, 128), SDD_ECORRUPT); /* header_size */
    TRY(put_le64(mem + H_ELEMENT_SIZE, 0), SDD_ECORRUPT);
    TRY(put_le64(mem + H_ELEMENT_SIZE, 25), SDD_ECORRUPT); /* stride no longer matches */
    TRY(put_le64(mem + H_ELEMENT_SIZE, UINT64_MAX), SDD_ECORRUPT);
    TRY(put_le64(mem + H_STRIDE, model_stride(es) + 8), SDD_ECORRUPT);
    TRY(put_le64(mem + H_STRIDE, model_stride(es) - 8), SDD_ECORRUPT);
    TRY(put_le64(mem + H_STRIDE, 0), SDD_ECORRUPT);
    TRY(put_le64(mem + H_BUFFER_SIZE, bytes + 8), SDD_ECORRUPT); /* mismatch, > mem_len */
    TRY(put_le64(mem + H_BUFFER_SIZE, bytes - 1), SDD_ECORRUPT);
    TRY(put_le64(mem + H_BUFFER_SIZE, UINT64_MAX), SDD_ECORRUPT);
    TRY(put_le64(mem + H_COUNT, 1), SDD_ECORRUPT);
    TRY(put_le64(mem + H_COUNT, 0), SDD_ECORRUPT);
    TRY(put_le64(mem + H_COUNT, UINT64_MAX), SDD_ECORRUPT);
    /* Count and buffer_size changed together, consistently, but the ring no longer fits. */
    TRY((put_le64(mem + H_COUNT, 4), put_le64(mem + H_BUFFER_SIZE, sdd_trb_bytes(es, 4))),
        SDD_ECORRUPT);
    /* Consistent and smaller: a valid (different) ring. */
    TRY((put_le64(mem + H_COUNT, 2), put_le64(mem + H_BUFFER_SIZE, sdd_trb_bytes(es, 2))), SDD_OK);
    /* pushes and the reserved bytes carry no geometry: any value adopts. */
    TRY(put_le64(mem + H_PUSHES, UINT64_MAX), SDD_OK);
    TRY(memset(mem + 48, 0xFF, 16), SDD_OK);
#undef TRY

    /* mem_len smaller than the ring or than a header; mem unusable. */
    memcpy(mem, good, bytes);
    t = sentinel;
    CHECK_EQ(sdd_trb_adopt(&t, mem, bytes - 1), SDD_ECORRUPT);
    CHECK_EQ(sdd_trb_adopt(&t, mem, HDR - 1), SDD_ECORRUPT);
    CHECK_EQ(sdd_trb_adopt(&t, mem, 0), SDD_ECORRUPT);
    CHECK_EQ(sdd_trb_adopt(&t, NULL, bytes), SDD_EINVAL);
    memcpy(mem + 4, good, bytes);
    CHECK_EQ(sdd_trb_adopt(&t, mem + 4, bytes), SDD_EINVAL); /* not 8-byte aligned */
    CHECK(memcmp(&t, &sentinel, sizeof(t)) == 0);

    /* A refresh after the header went bad. */
    memcpy(mem, good, bytes);
    CHECK_OK(sdd_trb_adopt(&t, mem, bytes));
    put_le16(mem + 4, 9);
    CHECK_EQ(sdd_trb_refresh(&t), SDD_ECORRUPT);
    free(mem);
    free(good);
}

/* Touch everything an adopted view can hand out: ASan flags any pointer outside mem. */
static void exercise_view(const struct sdd_trb *t, const uint8_t *mem, size_t mem_len,
                          unsigned *sink)
{
    for (long i = -(long)t->count - 1; i <= (long)t->count; i++) {
        const uint8_t *p = sdd_trb_get(t, i);
        if (p != NULL) {
            CHECK(p >= mem && p + t->element_size <= mem + mem_len);
            *sink += p[0] + p[t->element_size - 1];
        }
    }
    uint64_t newest = sdd_trb_newest_seq(t);
    if (newest != 0) {
        uint64_t stamp;
        *sink += (unsigned)sdd_trb_check(t, newest, &stamp);
        *sink += (unsigned)sdd_trb_check(t, sdd_trb_oldest_seq(t), &stamp);
        CHECK(sdd_trb_cell_offset(t, newest) + t->stride <= mem_len);
    }
}

static void test_adopt_corrupt_fuzz(void)
{
    size_t es = 24, count = 3, bytes = sdd_trb_bytes(es, count);
    size_t mem_len = 2 * bytes; /* room for some other valid geometries */
    uint8_t *good = alloc_mem(mem_len);
    uint8_t *mem = alloc_mem(mem_len);
    struct sdd_trb t;
    CHECK_OK(sdd_trb_init(&t, good, mem_len, es, count));
    push_n(&t, 4);

    unsigned ok = 0, corrupt = 0, other = 0, bad_geometry = 0, sink = 0;
    for (int iter = 0; iter < 10000; iter++) {
        memcpy(mem, good, mem_len);
        if (iter % 4 == 0) {
            /* A self-consistent header with random geometry, sometimes fitting mem_len. */
            uint64_t r_es = rnd() % 64, r_count = rnd() % 12;
            if (rnd() % 8 == 0) {
                r_es = rnd();
            }
            put_le64(mem + H_ELEMENT_SIZE, r_es);
            put_le64(mem + H_COUNT, r_count);
            put_le64(mem + H_STRIDE, model_stride((size_t)r_es));
            put_le64(mem + H_BUFFER_SIZE, sdd_trb_bytes((size_t)r_es, (size_t)r_count));
            put_le64(mem + H_PUSHES, rnd() % 4 ? rnd() % 100 : rnd());
        } else {
            int flips = 1 + (int)(rnd() % 4);
            for (int f = 0; f < flips; f++) {
                mem[rnd() % HDR] ^= (uint8_t)(1 + rnd() % 255);
            }
        }
        struct sdd_trb v;
        sdd_err e = sdd_trb_adopt(&v, mem, mem_len);
        if (e == SDD_OK) {
            ok++;
            bool consistent = v.mem == mem && v.mem_len == mem_len && v.count >= 2 &&
                              v.element_size > 0 && v.stride == model_stride(v.element_size) &&
                              sdd_trb_bytes(v.element_size, v.count) != 0 &&
                              sdd_trb_bytes(v.element_size, v.count) <= mem_len &&
                              v.pushes == rd64(mem + H_PUSHES);
            if (!consistent) {
                bad_geometry++;
                continue;
            }
            exercise_view(&v, mem, mem_len, &sink);
        } else if (e == SDD_ECORRUPT) {
            corrupt++;
        } else {
            other++;
        }
    }
    printf("corrupted headers: %u adopted, %u refused (sink %u)\n", ok, corrupt, sink & 1);
    CHECK_EQ(bad_geometry, 0);
    CHECK_EQ(other, 0);
    CHECK(ok > 0);
    CHECK(corrupt > 0);
    free(mem);
    free(good);
}

/* ---- torn cells ----------------------------------------------------------------------------- */

static void test_torn_detection(void)
{
    size_t es = 64, count = 3, bytes = sdd_trb_bytes(es, count);
    uint8_t *mem = alloc_mem(bytes);
    struct sdd_trb t;
    CHECK_OK(sdd_trb_init(&t, mem, bytes, es, count));
    push_n(&t, 4);
    uint8_t *cell = mem + sdd_trb_cell_offset(&t, 4);
    uint8_t *begin = cell + 16 + round_up8(es);

    uint64_t stamp = 0;
    CHECK_OK(sdd_trb_check(&t, 4, &stamp));
    CHECK_EQ(stamp, 4000);

    /* A writer that has started overwriting seq 4's cell with seq 7. */
    put_le64(begin, 7);
    stamp = 5;
    CHECK_EQ(sdd_trb_check(&t, 4, &stamp), SDD_EAGAIN);
    CHECK_EQ(stamp, 5);
    CHECK_EQ(sdd_trb_check(&t, 7, NULL), SDD_EAGAIN); /* not finished either */
    put_le64(cell, 7);
    CHECK_OK(sdd_trb_check(&t, 7, NULL)); /* both words agree: whole */
    put_le64(cell, 4);
    put_le64(begin, 4);
    CHECK_OK(sdd_trb_check(&t, 4, NULL));

    /* A torn end word, and a cell that holds a different sequence. */
    put_le64(cell, 3);
    CHECK_EQ(sdd_trb_check(&t, 4, NULL), SDD_EAGAIN);
    put_le64(cell, 4);
    CHECK_EQ(sdd_trb_check(&t, 1, NULL), SDD_EAGAIN); /* seq 1's cell holds seq 4 */
    CHECK_EQ(sdd_trb_check(&t, 0, NULL), SDD_EINVAL);

    /* The real writer: reserve for seq 5 marks seq 2's cell, which is then torn until the
     * commit makes it seq 5's. */
    CHECK_OK(sdd_trb_check(&t, 2, NULL));
    sdd_trb_reserve(&t);
    CHECK_EQ(sdd_trb_check(&t, 2, NULL), SDD_EAGAIN);
    CHECK_EQ(sdd_trb_check(&t, 5, NULL), SDD_EAGAIN);
    CHECK_EQ(sdd_trb_commit(&t, 5000), 5);
    CHECK_OK(sdd_trb_check(&t, 5, &stamp));
    CHECK_EQ(stamp, 5000);
    free(mem);
}

/* ---- a writer racing a copying reader ------------------------------------------------------- */

/* The reader's copy races the writer's payload stores by design (the sequence words decide
 * afterwards whether the copy is usable), so the thread sanitizer would rightly report it. */
#if defined(__SANITIZE_THREAD__)
#define UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define UNDER_TSAN 1
#endif
#endif

#ifndef UNDER_TSAN

#define RACE_ES     4096
#define RACE_COUNT  3
#define RACE_PUSHES 200000

struct race {
    struct sdd_trb ring;
    atomic_bool done;
};

static uint64_t race_word(uint64_t seq, size_t k)
{
    return (seq << 12) ^ k ^ 0x5A5A000000000000ull;
}

static void *race_writer(void *arg)
{
    struct race *r = arg;
    uint64_t *buf = malloc(RACE_ES);
    if (buf == NULL) {
        atomic_store(&r->done, true);
        return NULL;
    }
    for (uint64_t s = 1; s <= RACE_PUSHES; s++) {
        if (s % 2) {
            for (size_t k = 0; k < RACE_ES / 8; k++) {
                buf[k] = race_word(s, k);
            }
            sdd_trb_push(&r->ring, buf, RACE_ES, s);
        } else {
            /* In place, word by word: the payload takes a while to appear. */
            uint64_t *p = sdd_trb_reserve(&r->ring);
            for (size_t k = 0; k < RACE_ES / 8; k++) {
                p[k] = race_word(s, k);
            }
            sdd_trb_commit(&r->ring, s);
        }
    }
    free(buf);
    atomic_store(&r->done, true);
    return NULL;
}

/* Copy len bytes of a live cell in address order, 8 bytes at a time, as an RMA read lands.
 * The first word (seq_end) is loaded with acquire, pairing with commit's release store; the
 * acquire fence before the last word (seq_begin) pairs with the release fence after reserve's
 * marker store. memcpy() will not do: glibc's loads big blocks' tail first. */
static void copy_in_order(uint8_t *dst, uint8_t *src, size_t len)
{
    _Atomic uint64_t *s = (_Atomic uint64_t *)(void *)src;
    uint64_t *d = (uint64_t *)(void *)dst;
    size_t n = len / 8;
    d[0] = atomic_load_explicit(&s[0], memory_order_acquire);
    for (size_t k = 1; k + 1 < n; k++) {
        d[k] = atomic_load_explicit(&s[k], memory_order_relaxed);
    }
    atomic_thread_fence(memory_order_acquire);
    d[n - 1] = atomic_load_explicit(&s[n - 1], memory_order_relaxed);
}

static bool payload_is(const uint8_t *p, uint64_t seq)
{
    const uint64_t *w = (const uint64_t *)(const void *)p;
    for (size_t k = 0; k < RACE_ES / 8; k++) {
        if (w[k] != race_word(seq, k)) {
            return false;
        }
    }
    return true;
}

static void test_writer_vs_copying_reader(void)
{
    size_t bytes = sdd_trb_bytes(RACE_ES, RACE_COUNT);
    uint8_t *live = alloc_mem(bytes);
    uint8_t *copy = alloc_mem(bytes);
    struct race r;
    atomic_init(&r.done, false);
    CHECK_OK(sdd_trb_init(&r.ring, live, bytes, RACE_ES, RACE_COUNT));

    /* The reader's private ring: the header is copied once (its geometry never changes), then
     * each round brings pushes and one cell over and refreshes. */
    memcpy(copy, live, HDR);
    struct sdd_trb priv;
    CHECK_OK(sdd_trb_adopt(&priv, copy, bytes));

    pthread_t th;
    CHECK_REQUIRE(pthread_create(&th, NULL, race_writer, &r) == 0);
    uint64_t accepted = 0, stale = 0, torn = 0, bad = 0, empty = 0, rounds = 0;
    uint64_t t0 = sdd_now_ns();
    while (!atomic_load(&r.done)) {
        /* Pairs with the release store of pushes in commit. */
        uint64_t seq = atomic_load_explicit((_Atomic uint64_t *)(void *)(live + H_PUSHES),
                                            memory_order_acquire);
        if (seq == 0) {
            empty++;
            continue;
        }
        rounds++;
        put_le64(copy + H_PUSHES, seq);
        if (sdd_trb_refresh(&priv) != SDD_OK || priv.pushes != seq) {
            bad++;
            continue;
        }
        /* Mostly the newest cell; every fourth round the oldest held, the one the writer
         * overwrites next, so that copies race the writer as often as possible. */
        uint64_t want = rounds % 4 ? seq : sdd_trb_oldest_seq(&priv);
        size_t off = sdd_trb_cell_offset(&priv, want);
        copy_in_order(copy + off, live + off, priv.stride);
        uint64_t stamp = 0;
        if (sdd_trb_check(&priv, want, &stamp) == SDD_OK) {
            accepted++;
            if (stamp != want || !payload_is(sdd_trb_at_seq(&priv, want), want)) {
                bad++;
            }
            continue;
        }
        /* Not want: either the words agree on a newer sequence that overwrote the cell whole
         * (then its payload must be that one), or they differ (torn, thrown away). */
        uint64_t end = get_le64(copy + off), begin = get_le64(copy + off + 16 + RACE_ES);
        if (end == begin && end != 0) {
            stale++;
            if (end < want || (end - want) % RACE_COUNT != 0 || !payload_is(copy + off + 16, end)) {
                bad++;
            }
        } else {
            torn++;
        }
    }
    pthread_join(th, NULL);
    double ms = (double)(sdd_now_ns() - t0) / 1e6;
    printf("race: %" PRIu64 " rounds in %.0f ms: %" PRIu64 " accepted, %" PRIu64
           " whole but newer, %" PRIu64 " torn, %" PRIu64 " bad, %" PRIu64 " empty\n",
           rounds, ms, accepted, stale, torn, bad, empty);
    CHECK_EQ(r.ring.pushes, RACE_PUSHES);
    CHECK_EQ(bad, 0);
    CHECK(accepted > 0);
    free(copy);
    free(live);
}
#else
static void test_writer_vs_copying_reader(void)
{
    printf("race test skipped under TSan: the payload copy races the writer by design\n");
}
#endif

int main(void)
{
    test_bytes_and_init();
    test_index_model();
    test_push_too_big();
    test_reserve_commit_order();
    test_adopt_refresh();
    test_clone();
    test_flush();
    test_adopt_malformed();
    test_adopt_corrupt_fuzz();
    test_torn_detection();
    test_writer_vs_copying_reader();
    return check_finish();
}
