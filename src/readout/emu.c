/* Detector emulator: sends a stream of frames as UDP datagrams in one of the readout formats,
 * paced in datagrams/s or Gb/s with bursts, batched with sendmmsg, and injects loss,
 * corruption, duplicates and reordering from a seeded generator. It counts exactly what it
 * injected, by the same rules the receiver applies, so tests can demand exact counters. */
#include <errno.h>
#include <netdb.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <sys/socket.h>
#include <unistd.h>

#include "readout/na62_cycle.h"
#include "sddaq/clock.h"
#include "sddaq/cpu.h"
#include "sddaq/log.h"
#include "sddaq/readout.h"

#define MAX_BATCH    1024u
#define MAX_HELD     64u
#define STATS_FIELDS (sizeof(struct sdd_ro_emu_stats) / sizeof(uint64_t))
#define RETRY_LIMIT  100000u
/* The kernel's limit on segments in one UDP_SEGMENT send. */
#define MAX_GSO_SEGMENTS 64u
#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif

_Static_assert(sizeof(struct sdd_ro_emu_stats) % sizeof(uint64_t) == 0, "stats are all u64");

/* One datagram to send: which packet, and which header bit to flip (-1: none). */
struct spec {
    uint64_t frame;
    uint32_t packet;
    int32_t flip_bit;
};

struct held {
    struct spec s;
    uint32_t countdown; /* datagrams still to go out before this one */
};

struct sdd_ro_emu {
    struct sdd_ro_emu_opts o;
    int fd;
    size_t dgram; /* header + payload bytes */
    uint8_t *bufs;
    struct mmsghdr *msgs;
    struct iovec *iov;
    uint8_t *ctrl;  /* one UDP_SEGMENT control message per sendmmsg entry */
    uint32_t gso;   /* datagrams per sendmmsg entry (1: no segmentation offload) */
    uint32_t *lens; /* of each datagram of the batch */
    struct spec *specs;
    uint32_t nspecs;
    uint32_t batch_limit;
    struct held held[MAX_HELD];
    uint32_t nheld;
    uint64_t rng;
    double pps;
    uint64_t t0;
    /* Highest (frame, packet) sent intact, to count reordering as the receiver sees it. */
    bool any_sent;
    uint64_t max_frame;
    uint32_t max_packet;
    /* NA62: the cycle, and per board what the receiver's sequence accounting will see. */
    bool na62;
    struct ro_na62_cycle cycle;
    bool board_any[256];
    uint64_t board_max[256];     /* highest datagram number sent intact */
    uint64_t board_missing[256]; /* lost or corrupted since the board's last intact one */
    struct sdd_ro_emu_stats st;  /* the run thread's own */
    _Atomic uint64_t pub[STATS_FIELDS];
    atomic_bool stop;
};

void sdd_ro_emu_opts_default(struct sdd_ro_emu_opts *o, sdd_ro_format fmt)
{
    *o = (struct sdd_ro_emu_opts){
        .format = fmt,
        .geom = {.stream_id = 0, .packets_per_frame = 16, .payload_size = 1024},
        .first_frame = 1,
        .burst = 32,
        .batch = 32,
        .pattern = true,
        .reorder_distance = 3,
        .seed = 1,
        .cpu = -1,
    };
    if (fmt == SDD_RO_FMT_JUNGFRAU) {
        o->geom.packets_per_frame = SDD_RO_JF_PACKETS;
        o->geom.payload_size = SDD_RO_JF_PAYLOAD;
    }
}

static bool prob_ok(double p)
{
    return p >= 0 && p <= 1; /* false for NaN too */
}

static bool opts_valid(const struct sdd_ro_emu_opts *o)
{
    const struct sdd_ro_geometry *g = &o->geom;
    if (o->format == SDD_RO_FMT_JUNGFRAU) {
        if (g->packets_per_frame != SDD_RO_JF_PACKETS || g->payload_size != SDD_RO_JF_PAYLOAD ||
            g->stream_id > 0xFFFFu) {
            return false;
        }
    } else if (o->format == SDD_RO_FMT_NA62) {
        if (o->na62_packets == NULL || o->na62_bytes == 0 || o->gso > 1) {
            return false; /* packets differ in size: no segmentation offload */
        }
    } else if (o->format != SDD_RO_FMT_STREAM) {
        return false;
    }
    if (g->packets_per_frame == 0 || g->packets_per_frame > SDD_RO_MAX_PACKETS ||
        g->payload_size == 0 || g->payload_size > SDD_RO_MAX_PAYLOAD) {
        return false;
    }
    if (!prob_ok(o->loss) || !prob_ok(o->corrupt) || !prob_ok(o->duplicate) ||
        !prob_ok(o->reorder) || o->loss + o->corrupt + o->duplicate + o->reorder > 1.0) {
        return false;
    }
    if (o->batch == 0 || o->batch > MAX_BATCH || o->burst == 0 || o->reorder_distance == 0 ||
        o->reorder_distance > MAX_HELD) {
        return false;
    }
    if (o->first_frame == SDD_RO_FRAME_NONE || !(o->rate_pps >= 0) || !(o->rate_gbps >= 0) ||
        !(o->seconds >= 0)) {
        return false;
    }
    return true;
}

static sdd_err open_socket(const char *host, uint16_t port, int sndbuf, int *out)
{
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_DGRAM};
    struct addrinfo *ai = NULL;
    char service[8];
    snprintf(service, sizeof(service), "%u", port);
    int rc = getaddrinfo(host, service, &hints, &ai);
    if (rc != 0) {
        SDD_WARN("readout", "emulator: cannot resolve %s: %s", host, gai_strerror(rc));
        return SDD_ENOENT;
    }
    sdd_err err = SDD_OK;
    int fd = socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        err = sdd_err_from_errno(errno);
        SDD_WARN("readout", "emulator: socket: errno %d", errno);
        goto out_free_ai;
    }
    if (sndbuf > 0) {
        (void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
    }
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        err = sdd_err_from_errno(errno);
        SDD_WARN("readout", "emulator: connect %s:%u: errno %d", host, port, errno);
        close(fd);
        goto out_free_ai;
    }
    *out = fd;
out_free_ai:
    freeaddrinfo(ai);
    return err;
}

/* Datagrams per UDP_SEGMENT send: as asked, within the kernel's 64 segments and 64 KiB. */
static uint32_t gso_segments(const struct sdd_ro_emu_opts *o, size_t dgram)
{
    uint32_t n = o->gso < MAX_GSO_SEGMENTS ? o->gso : MAX_GSO_SEGMENTS;
    uint32_t fit = (uint32_t)(65507 / dgram);
    n = n < fit ? n : fit;
    return n > 1 ? n : 1;
}

sdd_err sdd_ro_emu_create(const struct sdd_ro_emu_opts *o, const char *host, uint16_t port,
                          sdd_ro_emu **out)
{
    if (o == NULL || host == NULL || out == NULL || port == 0 || !opts_valid(o)) {
        return SDD_EINVAL;
    }
    sdd_ro_emu *e = calloc(1, sizeof(*e));
    if (e == NULL) {
        return SDD_ENOMEM;
    }
    e->o = *o;
    e->dgram = SDD_RO_HEADER_SIZE + o->geom.payload_size;
    double mean_dgram = (double)e->dgram;
    if (o->format == SDD_RO_FMT_NA62) {
        sdd_err err = ro_na62_cycle_init(&e->cycle, o->na62_packets, o->na62_bytes);
        if (err != SDD_OK) {
            free(e);
            return err;
        }
        e->na62 = true;
        e->o.na62_packets = NULL; /* the cycle holds its own copy */
        e->o.geom.packets_per_frame = 1;
        e->dgram = SDD_RO_NA62_MAX;
        mean_dgram = e->cycle.mean_length;
    }
    e->bufs = calloc(o->batch, e->dgram);
    e->msgs = calloc(o->batch, sizeof(*e->msgs));
    e->iov = calloc(o->batch, sizeof(*e->iov));
    e->specs = calloc(o->batch, sizeof(*e->specs));
    e->lens = calloc(o->batch, sizeof(*e->lens));
    e->ctrl = calloc(o->batch, CMSG_SPACE(sizeof(uint16_t)));
    if (e->bufs == NULL || e->msgs == NULL || e->iov == NULL || e->specs == NULL ||
        e->ctrl == NULL || e->lens == NULL) {
        sdd_ro_emu_destroy(e);
        return SDD_ENOMEM;
    }
    e->fd = -1;
    sdd_err err = open_socket(host, port, o->sndbuf, &e->fd);
    if (err != SDD_OK) {
        sdd_ro_emu_destroy(e);
        return err;
    }
    e->rng = o->seed != 0 ? o->seed : 1;
    e->gso = gso_segments(o, e->dgram);
    e->pps = o->rate_pps > 0    ? o->rate_pps
             : o->rate_gbps > 0 ? o->rate_gbps * 1e9 / (8.0 * mean_dgram)
                                : 0;
    e->batch_limit = e->pps > 0 && o->burst < o->batch ? o->burst : o->batch;
    atomic_init(&e->stop, false);
    for (size_t i = 0; i < STATS_FIELDS; i++) {
        atomic_init(&e->pub[i], 0);
    }
    *out = e;
    return SDD_OK;
}

void sdd_ro_emu_destroy(sdd_ro_emu *e)
{
    if (e == NULL) {
        return;
    }
    if (e->fd >= 0) {
        close(e->fd);
    }
    ro_na62_cycle_fini(&e->cycle);
    free(e->lens);
    free(e->specs);
    free(e->ctrl);
    free(e->iov);
    free(e->msgs);
    free(e->bufs);
    free(e);
}

void sdd_ro_emu_stop(sdd_ro_emu *e)
{
    atomic_store_explicit(&e->stop, true, memory_order_relaxed);
}

static void publish(sdd_ro_emu *e)
{
    const uint64_t *v = (const uint64_t *)&e->st;
    for (size_t i = 0; i < STATS_FIELDS; i++) {
        atomic_store_explicit(&e->pub[i], v[i], memory_order_relaxed);
    }
}

void sdd_ro_emu_stats(const sdd_ro_emu *e, struct sdd_ro_emu_stats *out)
{
    uint64_t *v = (uint64_t *)out;
    for (size_t i = 0; i < STATS_FIELDS; i++) {
        v[i] = atomic_load_explicit(&((sdd_ro_emu *)e)->pub[i], memory_order_relaxed);
    }
}

/* splitmix64 step: a full-period 64-bit sequence from any seed. */
static uint64_t next_rand(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double uniform(uint64_t *s)
{
    return (double)(next_rand(s) >> 11) * 0x1.0p-53;
}

/* Wait until the pacing clock allows datagram number n: sleep while far, then spin. */
static void pace(sdd_ro_emu *e, uint64_t n)
{
    if (e->pps <= 0) {
        return;
    }
    uint64_t due = e->t0 + (uint64_t)((double)n * 1e9 / e->pps);
    for (;;) {
        uint64_t now = sdd_now_ns();
        if (now >= due) {
            return;
        }
        if (due - now > 200 * SDD_NS_PER_US) {
            sdd_sleep_ns(due - now - 100 * SDD_NS_PER_US);
        }
    }
}

static bool is_retryable(int err)
{
    return err == EINTR || err == EAGAIN || err == ENOBUFS || err == ECONNREFUSED;
}

/* Point one sendmmsg entry at each run of e->gso datagrams (they lie back to back in bufs);
 * a run of several carries UDP_SEGMENT, so the kernel cuts it into datagrams of e->dgram
 * bytes, the same datagrams on the wire, for one pass through the stack. Returns entries. */
static uint32_t build_msgs(sdd_ro_emu *e, uint32_t n)
{
    const size_t ctrl_len = CMSG_SPACE(sizeof(uint16_t));
    uint32_t m = 0;
    for (uint32_t i = 0; i < n; i += e->gso, m++) {
        uint32_t k = n - i < e->gso ? n - i : e->gso;
        e->iov[m] = (struct iovec){.iov_base = e->bufs + (size_t)i * e->dgram,
                                   .iov_len = k > 1 ? (size_t)k * e->dgram : e->lens[i]};
        e->msgs[m] = (struct mmsghdr){.msg_hdr = {.msg_iov = &e->iov[m], .msg_iovlen = 1}};
        if (k > 1) {
            struct msghdr *mh = &e->msgs[m].msg_hdr;
            mh->msg_control = e->ctrl + (size_t)m * ctrl_len;
            mh->msg_controllen = ctrl_len;
            struct cmsghdr *cm = CMSG_FIRSTHDR(mh);
            cm->cmsg_level = SOL_UDP;
            cm->cmsg_type = UDP_SEGMENT;
            cm->cmsg_len = CMSG_LEN(sizeof(uint16_t));
            uint16_t seg = (uint16_t)e->dgram;
            memcpy(CMSG_DATA(cm), &seg, sizeof(seg));
        }
    }
    return m;
}

/* Build the queued datagrams (headers stamped now) and hand them all to the kernel. */
static sdd_err send_batch(sdd_ro_emu *e)
{
    uint32_t n = e->nspecs;
    if (n == 0) {
        return SDD_OK;
    }
    if (e->st.datagrams % e->o.burst == 0) {
        pace(e, e->st.datagrams);
    }
    uint32_t payload = e->o.geom.payload_size;
    uint64_t now = sdd_now_ns();
    if (e->t0 == 0) {
        e->t0 = now;
    }
    uint64_t bytes = 0;
    for (uint32_t i = 0; i < n; i++) {
        const struct spec *s = &e->specs[i];
        uint8_t *d = e->bufs + (size_t)i * e->dgram;
        e->lens[i] = (uint32_t)e->dgram;
        if (e->na62) {
            e->lens[i] = (uint32_t)ro_na62_cycle_build(&e->cycle, s->frame - e->o.first_frame, d);
            if (s->flip_bit >= 0) {
                d[s->flip_bit / 8] ^= (uint8_t)(1u << (s->flip_bit % 8));
            }
            bytes += e->lens[i];
            continue;
        }
        bytes += e->dgram;
        struct sdd_ro_packet p = {
            .frame_id = s->frame,
            .send_ns = now,
            .stream_id = e->o.geom.stream_id,
            .packet_id = s->packet,
            .packets_per_frame = e->o.geom.packets_per_frame,
            .payload_len = payload,
            .flags = e->o.pattern ? SDD_RO_FLAG_PATTERN : 0,
        };
        if (e->o.pattern) {
            sdd_ro_pattern_fill(p.stream_id, s->frame, s->packet, d + SDD_RO_HEADER_SIZE, payload);
        }
        sdd_ro_encode(e->o.format, &p, d);
        if (s->flip_bit >= 0) {
            d[s->flip_bit / 8] ^= (uint8_t)(1u << (s->flip_bit % 8));
        }
    }
    uint32_t nmsgs = build_msgs(e, n);
    uint32_t done = 0, retries = 0;
    while (done < nmsgs) {
        int rc = sendmmsg(e->fd, e->msgs + done, nmsgs - done, 0);
        if (rc > 0) {
            done += (uint32_t)rc;
            continue;
        }
        int err = rc < 0 ? errno : EAGAIN;
        if (!is_retryable(err) || ++retries > RETRY_LIMIT) {
            SDD_WARN("readout", "emulator: sendmmsg: errno %d after %u retries", err, retries);
            return sdd_err_from_errno(err);
        }
        e->st.send_retries++;
        if (err == ENOBUFS || err == EAGAIN) {
            sdd_sleep_ns(10 * SDD_NS_PER_US);
        }
    }
    e->st.datagrams += n;
    e->st.bytes += bytes;
    e->st.elapsed_ns = sdd_now_ns() - e->t0;
    e->nspecs = 0;
    e->batch_limit = e->o.batch;
    if (e->pps > 0 && e->o.burst > 0) {
        /* Never let one sendmmsg run across a burst boundary: pacing happens there. */
        uint64_t left = e->o.burst - e->st.datagrams % e->o.burst;
        if (left < e->batch_limit) {
            e->batch_limit = (uint32_t)left;
        }
    }
    publish(e);
    return SDD_OK;
}

/* Queue one datagram; count reordering as the receiver will see it (the flipped ones never
 * reach its assembly). */
/* NA62: the receiver tells order per board, by sequence number (datagram number here). */
static void count_board_order(sdd_ro_emu *e, uint64_t n)
{
    uint8_t b = ro_na62_cycle_board(&e->cycle, n);
    if (e->board_any[b] && n < e->board_max[b]) {
        e->st.reordered++;
    } else {
        e->board_any[b] = true;
        e->board_max[b] = n;
    }
}

static sdd_err queue(sdd_ro_emu *e, struct spec s)
{
    if (s.flip_bit < 0 && e->na62) {
        count_board_order(e, s.frame - e->o.first_frame);
    } else if (s.flip_bit < 0) {
        bool lower = e->any_sent && (s.frame < e->max_frame ||
                                     (s.frame == e->max_frame && s.packet < e->max_packet));
        if (lower) {
            e->st.reordered++;
        } else {
            e->any_sent = true;
            e->max_frame = s.frame;
            e->max_packet = s.packet;
        }
    }
    e->specs[e->nspecs++] = s;
    return e->nspecs >= e->batch_limit ? send_batch(e) : SDD_OK;
}

/* Queue a datagram, then any held packets whose delay has run out. */
static sdd_err queue_and_release(sdd_ro_emu *e, struct spec s)
{
    sdd_err err = queue(e, s);
    for (uint32_t i = 0; err == SDD_OK && i < e->nheld;) {
        if (--e->held[i].countdown > 0) {
            i++;
            continue;
        }
        struct spec h = e->held[i].s;
        memmove(&e->held[i], &e->held[i + 1], (e->nheld - i - 1) * sizeof(e->held[0]));
        e->nheld--;
        err = queue(e, h);
    }
    return err;
}

/* NA62: whether the receiver can see that a board's packet is missing depends on a later
 * intact packet of that board (ones held back for reordering still go out). */
static void note_board_fate(sdd_ro_emu *e, uint64_t frame, bool intact)
{
    if (e->na62) {
        uint8_t b = ro_na62_cycle_board(&e->cycle, frame - e->o.first_frame);
        e->board_missing[b] = intact ? 0 : e->board_missing[b] + 1;
    }
}

/* Bits a corruption may flip: those the receiver checks without a checksum for NA62 (magic
 * and version), the checksummed header otherwise. */
static uint32_t corruptible_bits(const sdd_ro_emu *e)
{
    return e->na62 ? 5 * 8 : SDD_RO_HEADER_SIZE * 8;
}

static sdd_err emit_packet(sdd_ro_emu *e, uint64_t frame, uint32_t packet)
{
    const struct sdd_ro_emu_opts *o = &e->o;
    struct spec s = {.frame = frame, .packet = packet, .flip_bit = -1};
    bool clean = e->st.packets < o->clean_first;
    e->st.packets++;
    double r = clean ? 1.0 : uniform(&e->rng);
    note_board_fate(e, frame, r >= o->loss + o->corrupt);
    if (r < o->loss) {
        e->st.lost++;
        return SDD_OK;
    }
    r -= o->loss;
    if (r < o->corrupt) {
        s.flip_bit = (int32_t)(next_rand(&e->rng) % corruptible_bits(e));
        e->st.corrupted++;
        return queue_and_release(e, s);
    }
    r -= o->corrupt;
    if (r < o->duplicate) {
        e->st.duplicated++;
        sdd_err err = queue_and_release(e, s);
        return err != SDD_OK ? err : queue_and_release(e, s);
    }
    r -= o->duplicate;
    if (r < o->reorder && e->nheld < MAX_HELD) {
        e->held[e->nheld++] = (struct held){.s = s, .countdown = o->reorder_distance};
        return SDD_OK;
    }
    return queue_and_release(e, s);
}

static bool time_up(const sdd_ro_emu *e)
{
    if (atomic_load_explicit(&e->stop, memory_order_relaxed)) {
        return true;
    }
    return e->o.seconds > 0 && e->t0 != 0 && (double)(sdd_now_ns() - e->t0) >= e->o.seconds * 1e9;
}

sdd_err sdd_ro_emu_run(sdd_ro_emu *e)
{
    if (e == NULL) {
        return SDD_EINVAL;
    }
    if (e->o.cpu >= 0) {
        (void)sdd_cpu_pin_self(e->o.cpu); /* logged there; run unpinned */
    }
    const struct sdd_ro_emu_opts *o = &e->o;
    sdd_err err = SDD_OK;
    for (uint64_t f = 0; err == SDD_OK && (o->frames == 0 || f < o->frames) && !time_up(e); f++) {
        uint64_t missing_before = e->st.lost + e->st.corrupted;
        for (uint32_t p = 0; err == SDD_OK && p < o->geom.packets_per_frame; p++) {
            err = emit_packet(e, o->first_frame + f, p);
        }
        uint64_t missing = e->st.lost + e->st.corrupted - missing_before;
        e->st.damaged_frames += missing > 0;
        e->st.empty_frames += missing == o->geom.packets_per_frame;
        e->st.frames++;
    }
    /* Held packets still go out, late, as a real reordering network would deliver them. */
    for (uint32_t i = 0; err == SDD_OK && i < e->nheld; i++) {
        err = queue(e, e->held[i].s);
    }
    e->nheld = 0;
    if (err == SDD_OK) {
        err = send_batch(e);
    }
    for (int b = 0; e->na62 && b < 256; b++) {
        e->st.unseen += e->board_missing[b];
    }
    publish(e);
    return err;
}
