/* Event-builder formats: the payload pattern of emulated sources, fragment validation
 * and serialization of built events. Everything here is pure computation on caller memory. */
#include <math.h>
#include <string.h>

#include "evb_internal.h"

/* ---- payload pattern ---------------------------------------------------------------------- */

uint64_t evb_mix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* Word i of the payload of (source, event) is base + i * step: cheap to write and to check,
 * and a byte moved, dropped or taken from another fragment changes it. */
static inline uint64_t pattern_base(uint16_t source, uint64_t event_id)
{
    return evb_mix64(((uint64_t)source << 48) ^ event_id ^ 0x5EB0D0CAull);
}
#define PATTERN_STEP 0xD6E8FEB86659FD93ull

static void pattern_fill(uint8_t *p, uint32_t len, uint16_t source, uint64_t event_id)
{
    uint64_t w = pattern_base(source, event_id);
    uint32_t i = 0;
    for (; i + 8 <= len; i += 8) {
        memcpy(p + i, &w, 8);
        w += PATTERN_STEP;
    }
    if (i < len) {
        memcpy(p + i, &w, len - i);
    }
}

static bool pattern_check(const uint8_t *p, uint32_t len, uint16_t source, uint64_t event_id)
{
    uint64_t w = pattern_base(source, event_id);
    uint64_t diff = 0;
    uint32_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t v;
        memcpy(&v, p + i, 8);
        diff |= v ^ w;
        w += PATTERN_STEP;
    }
    if (i < len) {
        uint64_t v = 0, e = 0;
        memcpy(&v, p + i, len - i);
        memcpy(&e, &w, len - i);
        diff |= v ^ e;
    }
    return diff == 0;
}

long sdd_evb_source_fill(void *dst, size_t cap, uint16_t source, uint64_t event_id, uint32_t length,
                         bool fill_payload, bool crc)
{
    size_t total = evb_frag_bytes(length);
    if (dst == NULL || total > cap) {
        return SDD_ETOOBIG;
    }
    struct sdd_evb_frag_hdr *h = dst;
    uint8_t *payload = (uint8_t *)dst + sizeof(*h);
    if (fill_payload) {
        pattern_fill(payload, length, source, event_id);
    }
    if (total > sizeof(*h) + length) {
        memset(payload + length, 0, total - sizeof(*h) - length);
    }
    h->magic = SDD_EVB_FRAG_MAGIC;
    h->version = SDD_EVB_VERSION;
    h->flags = crc ? SDD_EVB_FRAG_CRC : 0;
    h->source = source;
    h->length = length;
    h->crc = crc ? sdd_crc32c(0, payload, length) : 0;
    h->event_id = event_id;
    h->reserved = 0;
    return (long)total;
}

enum evb_bulk_verdict evb_bulk_check(const void *p, size_t avail, uint32_t ru, uint32_t bulk,
                                     uint64_t events)
{
    const struct sdd_evb_bulk_hdr *h = p;
    if (avail < sizeof(*h) || bulk == 0 || h->magic != SDD_EVB_BULK_MAGIC ||
        h->version != SDD_EVB_VERSION || h->ru != ru) {
        return EVB_BULK_MALFORMED;
    }
    uint64_t nbulks = (events + bulk - 1) / bulk;
    uint64_t k = h->bulk_id;
    if (k >= nbulks) {
        return EVB_BULK_PAST_END;
    }
    if (h->source != ru || h->bytes > avail || h->first_event != k * bulk) {
        return EVB_BULK_MALFORMED;
    }
    uint64_t first = k * bulk;
    uint64_t nev = events - first < bulk ? events - first : bulk;
    bool ok = h->nfrag == nev &&
              sizeof(*h) + (uint64_t)h->nfrag * sizeof(struct sdd_evb_frag_meta) <= h->bytes;
    return ok ? EVB_BULK_OK : EVB_BULK_MALFORMED;
}

bool evb_bulk_header_ok(const void *p, size_t avail, uint32_t ru, uint32_t bulk, uint64_t events)
{
    return evb_bulk_check(p, avail, ru, bulk, events) == EVB_BULK_OK;
}

bool evb_bulk_entry_ok(const void *p, uint32_t i, uint64_t id)
{
    const struct sdd_evb_bulk_hdr *h = p;
    const struct sdd_evb_frag_meta *m = (const void *)((const uint8_t *)p + sizeof(*h));
    size_t prefix = sizeof(*h) + (size_t)h->nfrag * sizeof(*m);
    return i < h->nfrag && m[i].event_id == id && m[i].offset >= prefix &&
           m[i].length <= h->bytes && m[i].offset <= h->bytes - m[i].length;
}

sdd_evb_frag_check sdd_evb_frag_validate(const void *frag, size_t avail, uint16_t source,
                                         uint64_t event_id, bool verify_payload)
{
    const struct sdd_evb_frag_hdr *h = frag;
    if (frag == NULL || avail < sizeof(*h)) {
        return SDD_EVB_FRAG_BAD_LENGTH;
    }
    if (h->magic != SDD_EVB_FRAG_MAGIC) {
        return SDD_EVB_FRAG_BAD_MAGIC;
    }
    if (h->version != SDD_EVB_VERSION) {
        return SDD_EVB_FRAG_BAD_VERSION;
    }
    if (h->source != source) {
        return SDD_EVB_FRAG_BAD_SOURCE;
    }
    if (h->event_id != event_id) {
        return SDD_EVB_FRAG_BAD_EVENT;
    }
    if (h->length > avail - sizeof(*h) || ((h->flags & SDD_EVB_FRAG_EMPTY) && h->length != 0)) {
        return SDD_EVB_FRAG_BAD_LENGTH;
    }
    const uint8_t *payload = (const uint8_t *)frag + sizeof(*h);
    if ((h->flags & SDD_EVB_FRAG_CRC) && sdd_crc32c(0, payload, h->length) != h->crc) {
        return SDD_EVB_FRAG_BAD_CRC;
    }
    if (verify_payload && !(h->flags & SDD_EVB_FRAG_EMPTY) &&
        !pattern_check(payload, h->length, source, event_id)) {
        return SDD_EVB_FRAG_BAD_PAYLOAD;
    }
    return SDD_EVB_FRAG_OK;
}

const char *sdd_evb_frag_check_name(sdd_evb_frag_check c)
{
    static const char *const names[] = {"ok",        "bad magic",  "bad version", "bad source",
                                        "bad event", "bad length", "bad crc",     "bad payload"};
    return (unsigned)c < sizeof(names) / sizeof(names[0]) ? names[c] : "unknown";
}

/* ---- built events ------------------------------------------------------------------------- */

static size_t event_prefix(uint32_t nsources)
{
    return sizeof(struct sdd_evb_event_hdr) + 8u * ((nsources + 63) / 64) +
           sizeof(struct sdd_evb_event_entry) * nsources;
}

size_t sdd_evb_event_size(const struct sdd_evb_event *ev)
{
    size_t n = event_prefix(ev->nsources);
    for (uint32_t s = 0; s < ev->nsources; s++) {
        if (ev->frags[s] != NULL) {
            n += evb_frag_bytes(ev->frags[s]->length);
        }
    }
    return n;
}

long sdd_evb_event_serialize(const struct sdd_evb_event *ev, void *buf, size_t cap)
{
    size_t need = sdd_evb_event_size(ev);
    if (need > cap || need > UINT32_MAX) {
        return SDD_ETOOBIG;
    }
    uint8_t *out = buf;
    struct sdd_evb_event_hdr h = {
        .magic = SDD_EVB_EVENT_MAGIC,
        .version = SDD_EVB_VERSION,
        .flags = (uint8_t)ev->flags,
        .nsources = (uint16_t)ev->nsources,
        .npresent = ev->npresent,
        .bytes = (uint32_t)need,
        .event_id = ev->event_id,
    };
    memcpy(out, &h, sizeof(h));
    size_t words = (ev->nsources + 63) / 64;
    memcpy(out + sizeof(h), ev->present, 8 * words);
    struct sdd_evb_event_entry *tab = (void *)(out + sizeof(h) + 8 * words);
    size_t off = event_prefix(ev->nsources);
    for (uint32_t s = 0; s < ev->nsources; s++) {
        struct sdd_evb_event_entry e = {.flags = ev->src_flags[s]};
        if (ev->frags[s] != NULL) {
            size_t len = evb_frag_bytes(ev->frags[s]->length);
            e.offset = (uint32_t)off;
            e.length = (uint32_t)len;
            memcpy(out + off, ev->frags[s], len);
            off += len;
        }
        memcpy(&tab[s], &e, sizeof(e));
    }
    return (long)need;
}

/* ---- fragment sizes ----------------------------------------------------------------------- */

static double unit_double(uint64_t x)
{
    return (double)(x >> 11) * (1.0 / 9007199254740992.0);
}

uint32_t sdd_evb_source_size(const struct sdd_evb_source_opts *o, uint16_t source,
                             uint64_t event_id)
{
    uint32_t max = o->max != 0 ? o->max : 4 * o->mean;
    if (o->dist != SDD_EVB_SIZE_UNIFORM && o->dist != SDD_EVB_SIZE_LOGNORMAL) {
        /* fixed: no hash, no floating point (called once per fragment) */
        uint32_t v = o->mean < o->min ? o->min : o->mean;
        return v > max ? max : v;
    }
    uint64_t h = evb_mix64(o->seed ^ evb_mix64(((uint64_t)source << 48) ^ event_id));
    double v;
    if (o->dist == SDD_EVB_SIZE_UNIFORM) {
        v = o->min + unit_double(h) * ((double)max - o->min + 1);
    } else {
        /* Box-Muller from two independent hashes; mean of the log-normal kept at o->mean. */
        double u1 = unit_double(h), u2 = unit_double(evb_mix64(h));
        if (u1 < 1e-300) {
            u1 = 1e-300;
        }
        double z = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
        double sigma = o->sigma > 0 ? o->sigma : 0.5;
        v = exp(log((double)o->mean) - 0.5 * sigma * sigma + sigma * z);
    }
    if (v < o->min) {
        v = o->min;
    }
    if (v > max) {
        v = max;
    }
    return (uint32_t)v;
}
