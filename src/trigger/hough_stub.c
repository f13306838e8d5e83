/* The 48-bit packed stub and the stub block that carries one sector event as a payload: packing
 * with range checks, validating unpacking. Layouts: docs/formats.md "Hough stub (48 bit)" and
 * "Hough stub block". */
#include <math.h>
#include <string.h>

#include "core/le.h"
#include "sddaq/log.h"
#include "sddaq/trigger.h"

/* One quantised field: bit offset, width and range [min, max). */
struct field {
    unsigned shift, bits;
    double min, max;
};

static const struct field F_R = {0, 12, SDD_STUB_R_MIN, SDD_STUB_R_MAX};
static const struct field F_PHI = {12, 14, -SDD_STUB_PHI_MAX, SDD_STUB_PHI_MAX};
static const struct field F_Z = {26, 12, -SDD_STUB_Z_MAX, SDD_STUB_Z_MAX};
static const struct field F_BEND = {38, 5, -SDD_STUB_BEND_MAX, SDD_STUB_BEND_MAX};

#define LAYER_SHIFT   43
#define LAYER_MASK    7u
#define VALID_BIT     (1ull << 46)
#define OVERLAP_BIT   (1ull << 47)
#define KNOWN_FLAGS   (SDD_STUB_VALID | SDD_STUB_OVERLAP)
#define BLOCK_MAGIC0  'S'
#define BLOCK_MAGIC1  'H'
#define BLOCK_VERSION 1

static double step_of(const struct field *f)
{
    return (f->max - f->min) / (double)(1u << f->bits);
}

/* The code of v, or -1 when v is not finite or outside [min, max). Computed in double: the
 * float's value is exact there, and the clamp only catches a value a hair below max whose
 * quotient rounds up to 2^bits. The quotient is >= 0, so truncation is the floor (and the
 * fuzz build needs no libm). */
static long encode(const struct field *f, float v)
{
    if (!isfinite(v) || (double)v < f->min || (double)v >= f->max) {
        return -1;
    }
    long code = (long)(((double)v - f->min) / step_of(f));
    long top = (1l << f->bits) - 1;
    return code > top ? top : code;
}

static float decode(const struct field *f, uint64_t w)
{
    uint64_t code = (w >> f->shift) & ((1ull << f->bits) - 1);
    return (float)(f->min + ((double)code + 0.5) * step_of(f));
}

static void put_le48(uint8_t *p, uint64_t w)
{
    put_le32(p, (uint32_t)w);
    put_le16(p + 4, (uint16_t)(w >> 32));
}

static uint64_t get_le48(const uint8_t *p)
{
    return (uint64_t)get_le32(p) | ((uint64_t)get_le16(p + 4) << 32);
}

sdd_err sdd_stub_pack(const sdd_stub *s, uint8_t out[SDD_STUB_PACKED_BYTES])
{
    long r = encode(&F_R, s->r);
    long phi = encode(&F_PHI, s->phi);
    long z = encode(&F_Z, s->z);
    long bend = encode(&F_BEND, s->bend);
    /* Unknown flag bits have no place in the word: refusing them beats dropping them. */
    if (r < 0 || phi < 0 || z < 0 || bend < 0 || s->layer >= SDD_HOUGH_MAX_LAYERS ||
        !(s->flags & SDD_STUB_VALID) || (s->flags & ~KNOWN_FLAGS) != 0) {
        SDD_DEBUG("trigger", "stub not packable: r %g phi %g z %g bend %g layer %u flags 0x%x",
                  (double)s->r, (double)s->phi, (double)s->z, (double)s->bend, s->layer, s->flags);
        return SDD_EINVAL;
    }
    uint64_t w = (uint64_t)r << F_R.shift | (uint64_t)phi << F_PHI.shift |
                 (uint64_t)z << F_Z.shift | (uint64_t)bend << F_BEND.shift |
                 (uint64_t)s->layer << LAYER_SHIFT | VALID_BIT;
    if (s->flags & SDD_STUB_OVERLAP) {
        w |= OVERLAP_BIT;
    }
    put_le48(out, w);
    return SDD_OK;
}

/* No logging: a corrupt stub is the sender's fault and callers count them on the data path. */
sdd_err sdd_stub_unpack(const uint8_t in[SDD_STUB_PACKED_BYTES], sdd_stub *s)
{
    uint64_t w = get_le48(in);
    unsigned layer = (unsigned)(w >> LAYER_SHIFT) & LAYER_MASK;
    if (!(w & VALID_BIT) || layer >= SDD_HOUGH_MAX_LAYERS) {
        return SDD_ECORRUPT;
    }
    s->r = decode(&F_R, w);
    s->phi = decode(&F_PHI, w);
    s->z = decode(&F_Z, w);
    s->bend = decode(&F_BEND, w);
    s->layer = (uint8_t)layer;
    s->flags = (uint8_t)(SDD_STUB_VALID | ((w & OVERLAP_BIT) ? SDD_STUB_OVERLAP : 0));
    return SDD_OK;
}

sdd_err sdd_stubs_unpack(const void *buf, size_t len, sdd_stub *out, size_t max, size_t *n,
                         size_t *bad_index)
{
    if (len % SDD_STUB_PACKED_BYTES != 0) {
        return SDD_EPROTO;
    }
    size_t count = len / SDD_STUB_PACKED_BYTES;
    if (count > max) {
        return SDD_ETOOBIG;
    }
    const uint8_t *p = buf;
    for (size_t i = 0; i < count; i++) {
        if (sdd_stub_unpack(p + i * SDD_STUB_PACKED_BYTES, &out[i]) != SDD_OK) {
            if (bad_index != NULL) {
                *bad_index = i;
            }
            return SDD_ECORRUPT;
        }
    }
    *n = count;
    return SDD_OK;
}

int sdd_stub_block_write(void *buf, size_t cap, uint16_t sector, const sdd_stub *stubs, size_t n)
{
    if (n > UINT16_MAX || cap < SDD_STUB_BLOCK_HEADER ||
        (cap - SDD_STUB_BLOCK_HEADER) / SDD_STUB_PACKED_BYTES < n) {
        return SDD_ETOOBIG;
    }
    uint8_t *p = buf;
    p[0] = BLOCK_MAGIC0;
    p[1] = BLOCK_MAGIC1;
    p[2] = BLOCK_VERSION;
    p[3] = 0;
    put_le16(p + 4, sector);
    put_le16(p + 6, (uint16_t)n);
    for (size_t i = 0; i < n; i++) {
        sdd_err e = sdd_stub_pack(&stubs[i], p + SDD_STUB_BLOCK_HEADER + i * SDD_STUB_PACKED_BYTES);
        if (e != SDD_OK) {
            return e;
        }
    }
    return (int)(SDD_STUB_BLOCK_HEADER + n * SDD_STUB_PACKED_BYTES);
}

sdd_err sdd_stub_block_read(const void *buf, size_t len, uint16_t *sector, sdd_stub *out,
                            size_t max, size_t *n)
{
    const uint8_t *p = buf;
    if (len < SDD_STUB_BLOCK_HEADER || p[0] != BLOCK_MAGIC0 || p[1] != BLOCK_MAGIC1 ||
        p[2] != BLOCK_VERSION || p[3] != 0) {
        return SDD_EPROTO;
    }
    size_t count = get_le16(p + 6);
    if (len - SDD_STUB_BLOCK_HEADER != count * SDD_STUB_PACKED_BYTES) {
        return SDD_EPROTO;
    }
    size_t got;
    sdd_err e = sdd_stubs_unpack(p + SDD_STUB_BLOCK_HEADER, len - SDD_STUB_BLOCK_HEADER, out, max,
                                 &got, NULL);
    if (e != SDD_OK) {
        return e;
    }
    *sector = get_le16(p + 4);
    *n = got;
    return SDD_OK;
}
