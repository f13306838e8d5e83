/* Transmittable ring buffer: a view over raw memory whose write state (the header's `pushes`)
 * and per-cell sequence words live inside that memory, so the bytes can be shipped, copied by
 * RMA or cloned and adopted elsewhere. One writer; readers judge a copied cell by its two
 * sequence words. Byte layout and the writer/reader protocol: docs/formats.md. */
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "core/le.h"
#include "sddaq/rmem.h"

#define TRB_MAGIC   0x52544453u /* "SDTR" */
#define TRB_VERSION 1

/* Header offsets. */
#define H_MAGIC        0
#define H_VERSION      4
#define H_HEADER_SIZE  6
#define H_ELEMENT_SIZE 8
#define H_COUNT        16
#define H_STRIDE       24
#define H_BUFFER_SIZE  32
#define H_PUSHES       40

/* Cell offsets; seq_begin follows the padded payload. */
#define C_SEQ_END  0
#define C_STAMP    8
#define C_PAYLOAD  16
#define CELL_EXTRA 24 /* seq_end + stamp_ns + seq_begin */

/* The geometry fields go through put_le/get_le, but `pushes`, the cells' sequence words and
 * stamps are native 64-bit atomics (one instruction, no tearing, ordered by the fences below).
 * The format says little-endian, so the project targets little-endian hosts for these words. */
#if defined(__BYTE_ORDER__) && defined(__ORDER_LITTLE_ENDIAN__)
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "the TRB's atomic words are stored in host order, which must be little-endian");
#endif

struct geom {
    size_t element_size, count, stride, bytes;
};

/* Every word accessed atomically is 8-byte aligned: mem is (checked by init, adopt and clone),
 * the header is 64 bytes, and stride and the payload padding are multiples of 8. */
static _Atomic uint64_t *word(uint8_t *p)
{
    return (_Atomic uint64_t *)(void *)p;
}

static size_t round_up8(size_t n)
{
    return (n + 7) & ~(size_t)7;
}

/* stride for element_size, 0 on overflow. */
static size_t stride_of(size_t element_size)
{
    if (element_size > SIZE_MAX - 7 - CELL_EXTRA) {
        return 0;
    }
    return C_PAYLOAD + round_up8(element_size) + 8;
}

size_t sdd_trb_bytes(size_t element_size, size_t count)
{
    size_t stride = stride_of(element_size);
    if (stride == 0 || (count > 0 && stride > (SIZE_MAX - SDD_TRB_HEADER_SIZE) / count)) {
        return 0;
    }
    return SDD_TRB_HEADER_SIZE + count * stride;
}

static bool aligned8(const void *p)
{
    return ((uintptr_t)p & 7) == 0;
}

static uint8_t *cell_at(const struct sdd_trb *t, uint64_t seq)
{
    return t->mem + sdd_trb_cell_offset(t, seq);
}

static uint8_t *seq_begin_of(const struct sdd_trb *t, uint8_t *cell)
{
    return cell + C_PAYLOAD + round_up8(t->element_size);
}

/* Validate a header against mem_len; SDD_ECORRUPT for anything that is not a version-1 ring
 * fitting into mem_len. Does not look at pushes: every value is a possible state. */
static sdd_err parse_header(const uint8_t *mem, size_t mem_len, struct geom *g)
{
    if (mem_len < SDD_TRB_HEADER_SIZE || get_le32(mem + H_MAGIC) != TRB_MAGIC ||
        get_le16(mem + H_VERSION) != TRB_VERSION ||
        get_le16(mem + H_HEADER_SIZE) != SDD_TRB_HEADER_SIZE) {
        return SDD_ECORRUPT;
    }
    uint64_t es = get_le64(mem + H_ELEMENT_SIZE);
    uint64_t count = get_le64(mem + H_COUNT);
    uint64_t stride = get_le64(mem + H_STRIDE);
    uint64_t bytes = get_le64(mem + H_BUFFER_SIZE);
    if (es == 0 || es > SIZE_MAX || count < 2 || count > SIZE_MAX || bytes > SIZE_MAX) {
        return SDD_ECORRUPT;
    }
    size_t want_stride = stride_of((size_t)es);
    size_t want_bytes = sdd_trb_bytes((size_t)es, (size_t)count);
    if (want_stride == 0 || want_bytes == 0 || stride != want_stride || bytes != want_bytes ||
        bytes > mem_len) {
        return SDD_ECORRUPT;
    }
    g->element_size = (size_t)es;
    g->count = (size_t)count;
    g->stride = want_stride;
    g->bytes = want_bytes;
    return SDD_OK;
}

sdd_err sdd_trb_init(struct sdd_trb *t, void *mem, size_t mem_len, size_t element_size,
                     size_t count)
{
    size_t bytes = sdd_trb_bytes(element_size, count);
    if (t == NULL || mem == NULL || !aligned8(mem) || count < 2 || element_size == 0 ||
        bytes == 0 || mem_len < bytes) {
        return SDD_EINVAL;
    }
    uint8_t *m = mem;
    memset(m, 0, bytes);
    put_le32(m + H_MAGIC, TRB_MAGIC);
    put_le16(m + H_VERSION, TRB_VERSION);
    put_le16(m + H_HEADER_SIZE, SDD_TRB_HEADER_SIZE);
    put_le64(m + H_ELEMENT_SIZE, element_size);
    put_le64(m + H_COUNT, count);
    put_le64(m + H_STRIDE, stride_of(element_size));
    put_le64(m + H_BUFFER_SIZE, bytes);
    /* Pairs with the acquire load in adopt/refresh: whoever sees this sees the geometry. */
    atomic_store_explicit(word(m + H_PUSHES), 0, memory_order_release);
    *t = (struct sdd_trb){
        .mem = m,
        .mem_len = mem_len,
        .element_size = element_size,
        .count = count,
        .stride = stride_of(element_size),
        .pushes = 0,
    };
    return SDD_OK;
}

sdd_err sdd_trb_adopt(struct sdd_trb *t, void *mem, size_t mem_len)
{
    if (t == NULL || mem == NULL || !aligned8(mem)) {
        return SDD_EINVAL;
    }
    uint8_t *m = mem;
    struct geom g;
    sdd_err e = parse_header(m, mem_len, &g);
    if (e != SDD_OK) {
        return e;
    }
    *t = (struct sdd_trb){
        .mem = m,
        .mem_len = mem_len,
        .element_size = g.element_size,
        .count = g.count,
        .stride = g.stride,
        /* Pairs with the release store in commit (and init/flush). */
        .pushes = atomic_load_explicit(word(m + H_PUSHES), memory_order_acquire),
    };
    return SDD_OK;
}

sdd_err sdd_trb_refresh(struct sdd_trb *t)
{
    struct geom g;
    sdd_err e = parse_header(t->mem, t->mem_len, &g);
    if (e != SDD_OK) {
        return e;
    }
    if (g.element_size != t->element_size || g.count != t->count || g.stride != t->stride) {
        return SDD_ECORRUPT;
    }
    /* Pairs with the release store in commit. */
    t->pushes = atomic_load_explicit(word(t->mem + H_PUSHES), memory_order_acquire);
    return SDD_OK;
}

sdd_err sdd_trb_clone(const struct sdd_trb *src, void *mem, size_t mem_len, struct sdd_trb *dst)
{
    if (src == NULL || dst == NULL || mem == NULL || !aligned8(mem) || mem_len < src->mem_len) {
        return SDD_EINVAL;
    }
    size_t bytes = sdd_trb_bytes(src->element_size, src->count);
    if (bytes == 0 || bytes > src->mem_len) {
        return SDD_EINVAL;
    }
    memcpy(mem, src->mem, bytes);
    struct sdd_trb out;
    sdd_err e = sdd_trb_adopt(&out, mem, mem_len);
    if (e == SDD_OK) {
        *dst = out;
    }
    return e;
}

void *sdd_trb_reserve(struct sdd_trb *t)
{
    uint64_t seq = t->pushes + 1;
    uint8_t *cell = cell_at(t, seq);
    _Atomic uint64_t *begin = word(seq_begin_of(t, cell));
    if (atomic_load_explicit(begin, memory_order_relaxed) != seq) {
        atomic_store_explicit(begin, seq, memory_order_relaxed);
        /* Orders the marker before every payload store that follows: a reader whose copy saw
         * any new payload byte then sees this marker too (its acquire fence before reading
         * seq_begin pairs with this one). */
        atomic_thread_fence(memory_order_release);
    }
    return cell + C_PAYLOAD;
}

uint64_t sdd_trb_commit(struct sdd_trb *t, uint64_t stamp_ns)
{
    uint64_t seq = t->pushes + 1;
    uint8_t *cell = cell_at(t, seq);
    sdd_trb_reserve(t); /* no-op after a reserve; marks the cell when commit comes alone */
    /* Payload stores before stamp and seq_end. */
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(word(cell + C_STAMP), stamp_ns, memory_order_relaxed);
    /* Pairs with the reader's acquire load of seq_end (sdd_trb_check or a copying reader). */
    atomic_store_explicit(word(cell + C_SEQ_END), seq, memory_order_release);
    /* Pairs with the acquire load in adopt/refresh: a reader that sees pushes == seq sees the
     * whole cell. */
    atomic_store_explicit(word(t->mem + H_PUSHES), seq, memory_order_release);
    t->pushes = seq;
    return seq;
}

int64_t sdd_trb_push(struct sdd_trb *t, const void *data, size_t len, uint64_t stamp_ns)
{
    if (len > t->element_size) {
        return SDD_ETOOBIG;
    }
    uint8_t *p = sdd_trb_reserve(t);
    if (len > 0) {
        memcpy(p, data, len);
    }
    /* The padding too, so the shipped bytes depend only on what was pushed. */
    memset(p + len, 0, round_up8(t->element_size) - len);
    return (int64_t)sdd_trb_commit(t, stamp_ns);
}

size_t sdd_trb_available(const struct sdd_trb *t)
{
    return t->pushes < t->count ? (size_t)t->pushes : t->count;
}

uint64_t sdd_trb_newest_seq(const struct sdd_trb *t)
{
    return t->pushes;
}

uint64_t sdd_trb_oldest_seq(const struct sdd_trb *t)
{
    if (t->pushes == 0) {
        return 0;
    }
    return t->pushes > t->count ? t->pushes - t->count + 1 : 1;
}

void *sdd_trb_at_seq(const struct sdd_trb *t, uint64_t seq)
{
    if (seq == 0 || seq > t->pushes || seq < sdd_trb_oldest_seq(t)) {
        return NULL;
    }
    return cell_at(t, seq) + C_PAYLOAD;
}

void *sdd_trb_get(const struct sdd_trb *t, long i)
{
    uint64_t avail = sdd_trb_available(t);
    if (i >= 0) {
        if ((uint64_t)i >= avail) {
            return NULL;
        }
        return sdd_trb_at_seq(t, sdd_trb_oldest_seq(t) + (uint64_t)i);
    }
    uint64_t back = (uint64_t)(-(i + 1)); /* 0 for -1; no overflow for LONG_MIN */
    if (back >= avail) {
        return NULL;
    }
    return sdd_trb_at_seq(t, t->pushes - back);
}

void *sdd_trb_newest(const struct sdd_trb *t)
{
    return sdd_trb_get(t, -1);
}

void *sdd_trb_oldest(const struct sdd_trb *t)
{
    return sdd_trb_get(t, 0);
}

size_t sdd_trb_cell_offset(const struct sdd_trb *t, uint64_t seq)
{
    size_t idx = seq == 0 ? 0 : (size_t)((seq - 1) % t->count);
    return SDD_TRB_HEADER_SIZE + idx * t->stride;
}

sdd_err sdd_trb_check(const struct sdd_trb *t, uint64_t seq, uint64_t *stamp_ns)
{
    if (seq == 0) {
        return SDD_EINVAL;
    }
    return sdd_trb_check_cell(t, cell_at(t, seq), seq, stamp_ns);
}

sdd_err sdd_trb_check_cell(const struct sdd_trb *t, const void *cell_start, uint64_t seq,
                           uint64_t *stamp_ns)
{
    if (seq == 0 || cell_start == NULL) {
        return SDD_EINVAL;
    }
    uint8_t *cell = (uint8_t *)cell_start;
    /* Same order as a reader copying in address order: seq_end (written last) first,
     * seq_begin (written first) last. Pairs with the release store of seq_end in commit. */
    uint64_t end = atomic_load_explicit(word(cell + C_SEQ_END), memory_order_acquire);
    uint64_t stamp = atomic_load_explicit(word(cell + C_STAMP), memory_order_relaxed);
    atomic_thread_fence(memory_order_acquire);
    uint64_t begin = atomic_load_explicit(word(seq_begin_of(t, cell)), memory_order_relaxed);
    if (end != seq || begin != seq) {
        return SDD_EAGAIN;
    }
    if (stamp_ns != NULL) {
        *stamp_ns = stamp;
    }
    return SDD_OK;
}

void sdd_trb_flush(struct sdd_trb *t)
{
    atomic_store_explicit(word(t->mem + H_PUSHES), 0, memory_order_release);
    t->pushes = 0;
    for (size_t i = 0; i < t->count; i++) {
        uint8_t *cell = t->mem + SDD_TRB_HEADER_SIZE + i * t->stride;
        atomic_store_explicit(word(cell + C_SEQ_END), 0, memory_order_relaxed);
        atomic_store_explicit(word(seq_begin_of(t, cell)), 0, memory_order_relaxed);
    }
}
