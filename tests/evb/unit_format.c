/* Event-builder formats without a fabric: CRC32C against the standard check value, fragment
 * fill and validation (each kind of damage detected and named, never a read past the buffer),
 * deterministic size distributions within their bounds, and built-event serialization. */
#include <math.h>
#include <string.h>

#include "check.h"
#include "evb/evb_internal.h"
#include "sddaq/evb.h"

static void test_crc(void)
{
    CHECK_EQ(sdd_crc32c(0, "123456789", 9), 0xE3069283u);
    CHECK_EQ(sdd_crc32c(0, "", 0), 0);
    /* Incremental equals one shot. */
    uint32_t a = sdd_crc32c(0, "12345", 5);
    CHECK_EQ(sdd_crc32c(a, "6789", 4), 0xE3069283u);
}

static void test_fragment(void)
{
    uint8_t buf[4096];
    for (uint32_t len = 0; len < 70; len++) {
        long n = sdd_evb_source_fill(buf, sizeof(buf), 3, 1000 + len, len, true, true);
        CHECK(n > 0 && n % SDD_EVB_ALIGN == 0 && (size_t)n >= 32 + len);
        CHECK_EQ(sdd_evb_frag_validate(buf, (size_t)n, 3, 1000 + len, true), SDD_EVB_FRAG_OK);
    }
    long n = sdd_evb_source_fill(buf, sizeof(buf), 5, 77, 1000, true, false);
    CHECK_EQ(n, 1032);
    CHECK_EQ(sdd_evb_source_fill(buf, 1031, 5, 77, 1000, true, false), SDD_ETOOBIG);
    CHECK_EQ(sdd_evb_frag_validate(buf, (size_t)n, 5, 77, true), SDD_EVB_FRAG_OK);
    CHECK_EQ(sdd_evb_frag_validate(buf, (size_t)n, 6, 77, true), SDD_EVB_FRAG_BAD_SOURCE);
    CHECK_EQ(sdd_evb_frag_validate(buf, (size_t)n, 5, 78, true), SDD_EVB_FRAG_BAD_EVENT);
    CHECK_EQ(sdd_evb_frag_validate(buf, 20, 5, 77, true), SDD_EVB_FRAG_BAD_LENGTH);
    CHECK_EQ(sdd_evb_frag_validate(buf, 500, 5, 77, true), SDD_EVB_FRAG_BAD_LENGTH);
    CHECK_EQ(sdd_evb_frag_validate(NULL, 500, 5, 77, true), SDD_EVB_FRAG_BAD_LENGTH);
    /* The payload of another event or source is caught by the pattern, byte by byte. */
    uint8_t other[2048];
    sdd_evb_source_fill(other, sizeof(other), 5, 78, 1000, true, false);
    memcpy(buf + 32 + 600, other + 32 + 600, 1);
    bool differs = buf[32 + 600] != ((uint8_t *)other)[32 + 600] ||
                   sdd_evb_frag_validate(buf, (size_t)n, 5, 77, true) != SDD_EVB_FRAG_OK;
    CHECK(differs);
    sdd_evb_source_fill(buf, sizeof(buf), 5, 77, 1000, true, false);
    buf[32 + 999] ^= 1;
    CHECK_EQ(sdd_evb_frag_validate(buf, (size_t)n, 5, 77, true), SDD_EVB_FRAG_BAD_PAYLOAD);
    CHECK_EQ(sdd_evb_frag_validate(buf, (size_t)n, 5, 77, false), SDD_EVB_FRAG_OK);
    /* CRC catches the same damage without the pattern check. */
    sdd_evb_source_fill(buf, sizeof(buf), 5, 77, 1000, true, true);
    buf[32 + 10] ^= 0x80;
    CHECK_EQ(sdd_evb_frag_validate(buf, (size_t)n, 5, 77, false), SDD_EVB_FRAG_BAD_CRC);
    sdd_evb_source_fill(buf, sizeof(buf), 5, 77, 1000, true, true);
    buf[0] ^= 1;
    CHECK_EQ(sdd_evb_frag_validate(buf, (size_t)n, 5, 77, true), SDD_EVB_FRAG_BAD_MAGIC);
    buf[0] ^= 1;
    buf[4] = 9;
    CHECK_EQ(sdd_evb_frag_validate(buf, (size_t)n, 5, 77, true), SDD_EVB_FRAG_BAD_VERSION);
    /* An empty fragment (the source had nothing) validates only with length 0. */
    n = sdd_evb_source_fill(buf, sizeof(buf), 5, 77, 0, false, false);
    ((struct sdd_evb_frag_hdr *)buf)->flags |= SDD_EVB_FRAG_EMPTY;
    CHECK_EQ(sdd_evb_frag_validate(buf, (size_t)n, 5, 77, true), SDD_EVB_FRAG_OK);
    ((struct sdd_evb_frag_hdr *)buf)->length = 4; /* fits the buffer, but empty says 0 */
    CHECK_EQ(sdd_evb_frag_validate(buf, sizeof(buf), 5, 77, false), SDD_EVB_FRAG_BAD_LENGTH);
    ((struct sdd_evb_frag_hdr *)buf)->flags = 0;
    CHECK_EQ(sdd_evb_frag_validate(buf, sizeof(buf), 5, 77, false), SDD_EVB_FRAG_OK);
    CHECK(strcmp(sdd_evb_frag_check_name(SDD_EVB_FRAG_BAD_CRC), "bad crc") == 0);
    CHECK(strcmp(sdd_evb_frag_check_name((sdd_evb_frag_check)99), "unknown") == 0);
    /* Random garbage of every length never validates and never reads out of bounds (ASan). */
    uint64_t rng = 12345;
    for (int i = 0; i < 2000; i++) {
        size_t len = check_rand(&rng) % 200;
        uint8_t *g = malloc(len + 1);
        for (size_t k = 0; k < len; k++) {
            g[k] = (uint8_t)check_rand(&rng);
        }
        CHECK(sdd_evb_frag_validate(g, len, 1, 2, true) != SDD_EVB_FRAG_OK);
        free(g);
    }
}

static void test_sizes(void)
{
    struct sdd_evb_source_opts o = {.dist = SDD_EVB_SIZE_FIXED, .mean = 300, .seed = 7};
    CHECK_EQ(sdd_evb_source_size(&o, 1, 5), 300);
    o.dist = SDD_EVB_SIZE_UNIFORM;
    o.min = 100;
    o.max = 200;
    uint32_t lo = UINT32_MAX, hi = 0;
    for (uint64_t e = 0; e < 20000; e++) {
        uint32_t s = sdd_evb_source_size(&o, 2, e);
        lo = s < lo ? s : lo;
        hi = s > hi ? s : hi;
        CHECK_REQUIRE(s == sdd_evb_source_size(&o, 2, e));
    }
    CHECK_EQ(lo, 100);
    CHECK_EQ(hi, 200);
    o.dist = SDD_EVB_SIZE_LOGNORMAL;
    o.mean = 1000;
    o.min = 0;
    o.max = 100000;
    o.sigma = 0.5;
    double sum = 0, sum_log = 0, sum_log2 = 0;
    int n = 100000;
    for (int e = 0; e < n; e++) {
        uint32_t s = sdd_evb_source_size(&o, 1, (uint64_t)e);
        sum += s;
        double l = log((double)s + 0.5);
        sum_log += l;
        sum_log2 += l * l;
    }
    double mean = sum / n, sd = sqrt(sum_log2 / n - (sum_log / n) * (sum_log / n));
    printf("log-normal: mean %.1f (want 1000), sigma of ln %.3f (want 0.5)\n", mean, sd);
    CHECK(fabs(mean - 1000) < 20);
    CHECK(fabs(sd - 0.5) < 0.02);
    /* A different seed gives different sizes. */
    struct sdd_evb_source_opts o2 = o;
    o2.seed = 8;
    int same = 0;
    for (int e = 0; e < 100; e++) {
        same += sdd_evb_source_size(&o, 1, (uint64_t)e) == sdd_evb_source_size(&o2, 1, (uint64_t)e);
    }
    CHECK(same < 20);
}

static void test_serialize(void)
{
    uint8_t f0[256], f2[256];
    sdd_evb_source_fill(f0, sizeof(f0), 0, 42, 100, true, false);
    sdd_evb_source_fill(f2, sizeof(f2), 2, 42, 17, true, false);
    const struct sdd_evb_frag_hdr *frags[3] = {(void *)f0, NULL, (void *)f2};
    uint32_t flags[3] = {0, SDD_EVB_EV_MISSING | SDD_EVB_EV_SRC_LOST, 0};
    uint64_t present = 5;
    struct sdd_evb_event ev = {.event_id = 42,
                               .flags = SDD_EVB_EV_MISSING | SDD_EVB_EV_SRC_LOST,
                               .nsources = 3,
                               .npresent = 2,
                               .present = &present,
                               .frags = frags,
                               .src_flags = flags};
    size_t need = sdd_evb_event_size(&ev);
    CHECK_EQ(need, 32 + 8 + 3 * 16 + 136 + 56);
    uint8_t out[1024];
    CHECK_EQ(sdd_evb_event_serialize(&ev, out, need - 1), SDD_ETOOBIG);
    CHECK_EQ(sdd_evb_event_serialize(&ev, out, sizeof(out)), (long)need);
    struct sdd_evb_event_hdr h;
    memcpy(&h, out, sizeof(h));
    CHECK_EQ(h.magic, SDD_EVB_EVENT_MAGIC);
    CHECK_EQ(h.event_id, 42);
    CHECK_EQ(h.nsources, 3);
    CHECK_EQ(h.npresent, 2);
    CHECK_EQ(h.bytes, need);
    CHECK_EQ(h.flags, SDD_EVB_EV_MISSING | SDD_EVB_EV_SRC_LOST);
    struct sdd_evb_event_entry e[3];
    memcpy(e, out + 40, sizeof(e));
    CHECK_EQ(e[1].offset, 0);
    CHECK_EQ(e[1].flags, SDD_EVB_EV_MISSING | SDD_EVB_EV_SRC_LOST);
    CHECK_EQ(sdd_evb_frag_validate(out + e[0].offset, e[0].length, 0, 42, true), SDD_EVB_FRAG_OK);
    CHECK_EQ(sdd_evb_frag_validate(out + e[2].offset, e[2].length, 2, 42, true), SDD_EVB_FRAG_OK);
}

static void test_bad_opts(void)
{
    struct sdd_evb_opts o;
    sdd_evb_opts_default(&o);
    sdd_evb_node *n = NULL;
    o.nnodes = 0;
    CHECK_EQ(sdd_evb_node_create(&o, &n), SDD_EINVAL);
    sdd_evb_opts_default(&o);
    o.credits = 33;
    CHECK_EQ(sdd_evb_node_create(&o, &n), SDD_EINVAL);
    sdd_evb_opts_default(&o);
    o.bulk = 0;
    CHECK_EQ(sdd_evb_node_create(&o, &n), SDD_EINVAL);
    sdd_evb_opts_default(&o);
    o.dead_ms = o.hb_ms;
    CHECK_EQ(sdd_evb_node_create(&o, &n), SDD_EINVAL);
    o.dead_ms = 4 * o.hb_ms - 1; /* the lease, dead_ms / 2, must span two heartbeats */
    CHECK_EQ(sdd_evb_node_create(&o, &n), SDD_EINVAL);
    sdd_evb_opts_default(&o);
    o.src.mean = 1u << 26;
    o.bulk = 65536;
    CHECK_EQ(sdd_evb_node_create(&o, &n), SDD_ETOOBIG);
    sdd_evb_opts_default(&o);
    o.roles[0] = o.roles[1] = SDD_EVB_ROLE_RU; /* nobody builds */
    CHECK_EQ(sdd_evb_node_create(&o, &n), SDD_EINVAL);
    CHECK(n == NULL);
    CHECK_EQ(sdd_evb_node_create(NULL, &n), SDD_EINVAL);
    sdd_evb_node_destroy(NULL);
}

/* Auto credits: the most, up to 4 (where BUs read over shm, up to 16 with at most 1 MiB of
 * slots per RU and BU), whose bulks (RU pools and BU slots of the nodes on one host) fit
 * 32 MiB; an explicit value is kept. Slots here: 64 events of 1 KiB are 67 KiB, of 4 KiB
 * 265 KiB. The transfer is set: auto's choice depends on this machine's CPUs. */
static void test_auto_credits(void)
{
    struct sdd_evb_opts o;
    sdd_evb_opts_default(&o);
    CHECK_EQ(o.credits, 0);
    o.transfer = SDD_EVB_TRANSFER_WRITE;
    o.nnodes = 4;
    CHECK_EQ(sdd_evb_credits(&o, "shm"), 4); /* 1 KiB: 4 credits hold 14 MB */
    o.src.mean = 4096;
    CHECK_EQ(sdd_evb_credits(&o, "shm"), 2); /* 30 MB with 2, 55 MB with 4 */
    CHECK_EQ(sdd_evb_credits(&o, "tcp"), 4); /* one node per host: a quarter of that */
    o.host_nodes = 4;
    CHECK_EQ(sdd_evb_credits(&o, "tcp"), 2);
    o.src.mean = 8192;
    CHECK_EQ(sdd_evb_credits(&o, "tcp"), 1); /* even 1 passes 32 MiB: never fewer */
    o.host_nodes = 0;
    o.nnodes = 2;
    o.src.mean = 4096;
    CHECK_EQ(sdd_evb_credits(&o, "shm"), 4); /* 2 x 2 x 13 slots: 14 MB */
    o.roles[0] = SDD_EVB_ROLE_RU;            /* 1 RU, 1 BU: fewer slots still */
    o.roles[1] = SDD_EVB_ROLE_BU;
    CHECK_EQ(sdd_evb_credits(&o, "shm"), 4);
    o.credits = 7;
    CHECK_EQ(sdd_evb_credits(&o, "shm"), 7);
    /* BUs reading over shm: 1 MiB of slots per RU and BU, 4 to 16 credits, then the cache. */
    o.credits = 0;
    o.roles[0] = o.roles[1] = 0;
    o.transfer = SDD_EVB_TRANSFER_READ;
    o.src.mean = 1024;
    CHECK_EQ(sdd_evb_credits(&o, "shm"), 15); /* 1 MiB / 67 KiB; 2 x 2 x 46 slots: 12 MB */
    CHECK_EQ(sdd_evb_credits(&o, "tcp"), 4);  /* emulated reads over tcp: the plain ceiling */
    o.src.mean = 2048;
    CHECK_EQ(sdd_evb_credits(&o, "shm"), 7);
    o.src.mean = 4096;
    CHECK_EQ(sdd_evb_credits(&o, "shm"), 4); /* never fewer than the plain ceiling */
    o.bulk = 8;
    CHECK_EQ(sdd_evb_credits(&o, "shm"), 16); /* 33 KiB slots: the most */
    o.bulk = 64;
    o.nnodes = 4;
    o.src.mean = 1024;
    CHECK_EQ(sdd_evb_credits(&o, "shm"), 9); /* 15 would hold 50 MB on the host */
    /* host_nodes from a node list: the most entries naming one host */
    const char *hosts[] = {"h0", "h1", "h0", "h2", "h0", "h1"};
    CHECK_EQ(sdd_evb_host_nodes(hosts, 6), 3);
    CHECK_EQ(sdd_evb_host_nodes(hosts + 1, 1), 1);
    CHECK_EQ(sdd_evb_host_nodes(hosts, 0), 0);
}

/* A BU's check of a bulk header: bulk 2 of RU 1 in a run of 100 events in bulks of 32 (4
 * bulks, the last of 4 events). A well-formed bulk whose id lies past the run's end is told
 * apart from a malformed one: it means the RU did not agree on the end (the run split). */
static void test_bulk_header(void)
{
    uint8_t buf[sizeof(struct sdd_evb_bulk_hdr) + 32 * sizeof(struct sdd_evb_frag_meta)];
    memset(buf, 0, sizeof(buf));
    struct sdd_evb_bulk_hdr h = {.magic = SDD_EVB_BULK_MAGIC,
                                 .version = SDD_EVB_VERSION,
                                 .source = 1,
                                 .nfrag = 32,
                                 .bytes = sizeof(buf),
                                 .bulk_id = 2,
                                 .first_event = 64,
                                 .ru = 1};
    memcpy(buf, &h, sizeof(h));
    CHECK(evb_bulk_header_ok(buf, sizeof(buf), 1, 32, 100));
    CHECK(!evb_bulk_header_ok(buf, sizeof(buf), 0, 32, 100)); /* another RU's slot */
    CHECK_EQ(evb_bulk_check(buf, sizeof(buf), 0, 32, 100), EVB_BULK_MALFORMED);
    CHECK(!evb_bulk_header_ok(buf, sizeof(h) - 1, 1, 32, 100)); /* truncated */
    CHECK_EQ(evb_bulk_check(buf, sizeof(h) - 1, 1, 32, 100), EVB_BULK_MALFORMED);
    /* The run was ended after 2 bulks (64 events) here; the RU went on to bulk 2. */
    CHECK(!evb_bulk_header_ok(buf, sizeof(buf), 1, 32, 64));
    CHECK_EQ(evb_bulk_check(buf, sizeof(buf), 1, 32, 64), EVB_BULK_PAST_END);
    h.magic ^= 1; /* past the end, but not a bulk at all */
    memcpy(buf, &h, sizeof(h));
    CHECK_EQ(evb_bulk_check(buf, sizeof(buf), 1, 32, 64), EVB_BULK_MALFORMED);
    h.magic ^= 1;
    h.first_event = 63; /* inside the run, inconsistent */
    memcpy(buf, &h, sizeof(h));
    CHECK(!evb_bulk_header_ok(buf, sizeof(buf), 1, 32, 100));
    CHECK_EQ(evb_bulk_check(buf, sizeof(buf), 1, 32, 100), EVB_BULK_MALFORMED);
    CHECK_EQ(evb_bulk_check(buf, sizeof(buf), 1, 0, 100), EVB_BULK_MALFORMED);
}

int main(void)
{
    test_bulk_header();
    test_crc();
    test_fragment();
    test_sizes();
    test_serialize();
    test_bad_opts();
    test_auto_credits();
    return check_finish();
}
