/* The UDP receiver: one socket and one thread per stream. Each recvmmsg batch scatters every
 * datagram into a header buffer, a payload destination and a one-byte overflow catcher. The
 * payload destination is where the datagram is predicted to go (the next packets after the
 * highest seen, in their frames' slots), so in-order traffic lands in place with no copy. A
 * datagram that breaks the prediction (loss, reordering, duplicates, garbage) makes the rest of
 * its batch move to scratch first, so no later payload is overwritten, and is copied once.
 *
 * Only recvmmsg today; io_uring (multishot receive into registered buffers) would be a second
 * backend behind this file's loop, chosen where it measures faster (issue 7, a later step). */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "readout/rx_internal.h"
#include "sddaq/clock.h"
#include "sddaq/cpu.h"
#include "sddaq/log.h"

#define MAX_BATCH      1024u
#define MAX_WINDOW     64u
#define MAX_SLOT_BYTES (1ull << 30)
#define POLL_MS        10 /* blocking recvmmsg wakes this often to see stop and timeouts */
#ifndef UDP_GRO
#define UDP_GRO 104
#endif

void sdd_ro_rx_opts_default(struct sdd_ro_rx_opts *o, sdd_ro_format fmt)
{
    struct sdd_ro_emu_opts e;
    sdd_ro_emu_opts_default(&e, fmt);
    *o = (struct sdd_ro_rx_opts){
        .format = fmt,
        .geom = e.geom,
        .host = "127.0.0.1",
        .slots = 16,
        .window = 4,
        .batch = 32,
        .missing = SDD_RO_MISSING_DROP,
        .full = SDD_RO_FULL_BLOCK,
        .frame_timeout_ms = 100,
        .resync_frames = 1024,
        .rcvbuf = 8 << 20,
        .cpu = -1,
    };
    if (fmt == SDD_RO_FMT_NA62) {
        o->geom.packets_per_frame = 64; /* a slot of 64 packets' room, about 92 KiB */
        o->geom.payload_size = SDD_RO_NA62_MAX;
    }
}

static bool opts_valid(const struct sdd_ro_rx_opts *o)
{
    const struct sdd_ro_geometry *g = &o->geom;
    if (o->format != SDD_RO_FMT_STREAM && o->format != SDD_RO_FMT_JUNGFRAU &&
        o->format != SDD_RO_FMT_NA62) {
        return false;
    }
    if (o->format == SDD_RO_FMT_NA62 &&
        (uint64_t)g->packets_per_frame * g->payload_size < SDD_RO_NA62_MAX) {
        return false; /* a slot must hold the largest packet */
    }
    if (o->format == SDD_RO_FMT_JUNGFRAU &&
        (g->packets_per_frame != SDD_RO_JF_PACKETS || g->payload_size != SDD_RO_JF_PAYLOAD ||
         g->stream_id > 0xFFFFu)) {
        return false;
    }
    return g->packets_per_frame >= 1 && g->packets_per_frame <= SDD_RO_MAX_PACKETS &&
           g->payload_size >= 1 && g->payload_size <= SDD_RO_MAX_PAYLOAD && o->window >= 1 &&
           o->window <= MAX_WINDOW && o->slots > o->window && o->slots <= (1u << 16) &&
           o->batch >= 1 && o->batch <= MAX_BATCH && o->missing <= SDD_RO_MISSING_PARTIAL &&
           o->full <= SDD_RO_FULL_DROP_NEWEST && o->frame_timeout_ms >= 1 &&
           (o->host == NULL || strlen(o->host) < sizeof(((sdd_ro_rx *)0)->host));
}

static sdd_err open_socket(sdd_ro_rx *rx)
{
    struct addrinfo hints = {
        .ai_family = AF_INET, .ai_socktype = SOCK_DGRAM, .ai_flags = AI_PASSIVE};
    struct addrinfo *ai = NULL;
    char service[8];
    snprintf(service, sizeof(service), "%u", rx->o.port);
    int rc = getaddrinfo(rx->host, service, &hints, &ai);
    if (rc != 0) {
        SDD_WARN("readout", "receiver: cannot resolve %s: %s", rx->host, gai_strerror(rc));
        return SDD_ENOENT;
    }
    sdd_err err = SDD_OK;
    int fd = socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        err = sdd_err_from_errno(errno);
        goto out_free_ai;
    }
    /* FORCE needs CAP_NET_ADMIN; without it the kernel caps SO_RCVBUF at net.core.rmem_max. */
    if (rx->o.rcvbuf > 0 &&
        setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &rx->o.rcvbuf, sizeof(int)) != 0) {
        (void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rx->o.rcvbuf, sizeof(int));
    }
#ifdef SO_RXQ_OVFL
    int one = 1; /* each datagram then carries the socket's drop count */
    (void)setsockopt(fd, SOL_SOCKET, SO_RXQ_OVFL, &one, sizeof(one));
#endif
    int gro = 1;
    if (rx->o.gro && setsockopt(fd, IPPROTO_UDP, UDP_GRO, &gro, sizeof(gro)) != 0) {
        err = sdd_err_from_errno(errno);
        SDD_WARN("readout", "receiver: UDP_GRO not available: errno %d", errno);
        close(fd);
        goto out_free_ai;
    }
    struct timeval tv = {.tv_sec = 0, .tv_usec = POLL_MS * 1000};
    (void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        err = sdd_err_from_errno(errno);
        SDD_WARN("readout", "receiver: bind %s:%u: errno %d", rx->host, rx->o.port, errno);
        close(fd);
        goto out_free_ai;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    getsockname(fd, (struct sockaddr *)&ss, &sl);
    rx->port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
    rx->fd = fd;
out_free_ai:
    freeaddrinfo(ai);
    return err;
}

/* GRO and NA62 receive whole datagrams into plain buffers, not scattered into slots. */
static bool whole_datagrams(const sdd_ro_rx *rx)
{
    return rx->o.gro || rx->o.format == SDD_RO_FMT_NA62;
}

static sdd_err alloc_batch(sdd_ro_rx *rx)
{
    uint32_t b = rx->o.batch;
    rx->ctrl_len = CMSG_SPACE(sizeof(uint32_t)) + CMSG_SPACE(sizeof(int));
    rx->msgs = calloc(b, sizeof(*rx->msgs));
    rx->iov = calloc((size_t)b * 3, sizeof(*rx->iov));
    rx->pred = calloc(b, sizeof(*rx->pred));
    rx->hdrs = calloc(b, SDD_RO_HEADER_SIZE);
    rx->scratch = calloc(b, rx->payload);
    rx->tail = calloc(b, 1);
    rx->ctrl = calloc(b, rx->ctrl_len);
    if (whole_datagrams(rx)) {
        rx->gro_bufs = malloc((size_t)b * RO_GRO_BUF);
        if (rx->gro_bufs == NULL) {
            return SDD_ENOMEM;
        }
    }
    if (rx->msgs == NULL || rx->iov == NULL || rx->pred == NULL || rx->hdrs == NULL ||
        rx->scratch == NULL || rx->tail == NULL || rx->ctrl == NULL) {
        return SDD_ENOMEM;
    }
    return SDD_OK;
}

sdd_err sdd_ro_rx_create(const struct sdd_ro_rx_opts *o, sdd_ro_rx **out)
{
    if (o == NULL || out == NULL || !opts_valid(o)) {
        return SDD_EINVAL;
    }
    uint64_t slot_bytes = (uint64_t)o->geom.packets_per_frame * o->geom.payload_size;
    if (slot_bytes > MAX_SLOT_BYTES) {
        return SDD_ETOOBIG;
    }
    sdd_ro_rx *rx = calloc(1, sizeof(*rx));
    if (rx == NULL) {
        return SDD_ENOMEM;
    }
    rx->o = *o;
    snprintf(rx->host, sizeof(rx->host), "%s", o->host != NULL ? o->host : "127.0.0.1");
    rx->o.host = rx->host;
    rx->fd = -1;
    rx->ppf = o->geom.packets_per_frame;
    rx->payload = o->geom.payload_size;
    rx->slot_bytes = (size_t)slot_bytes;
    rx->bit_words = (rx->ppf + 63) / 64;
    atomic_init(&rx->stop, false);
    atomic_init(&rx->done, false);
    atomic_init(&rx->bad_releases, 0);
    for (size_t i = 0; i < RO_COUNTER_FIELDS; i++) {
        atomic_init(&rx->pub[i], 0);
    }
    sdd_err err = ro_slots_init(rx);
    if (err == SDD_OK) {
        err = ro_asm_init(rx);
    }
    if (err == SDD_OK) {
        err = ro_pack_init(rx);
    }
    if (err == SDD_OK) {
        err = alloc_batch(rx);
    }
    if (err == SDD_OK) {
        err = open_socket(rx);
    }
    if (err != SDD_OK) {
        sdd_ro_rx_destroy(rx);
        return err;
    }
    *out = rx;
    return SDD_OK;
}

uint16_t sdd_ro_rx_port(const sdd_ro_rx *rx)
{
    return rx->port;
}

void sdd_ro_rx_region(const sdd_ro_rx *rx, void **base, size_t *len)
{
    *base = sdd_pool_base(rx->pool);
    *len = sdd_pool_region_size(rx->pool);
}

static void publish(sdd_ro_rx *rx)
{
    const uint64_t *v = (const uint64_t *)&rx->c;
    for (size_t i = 0; i < RO_COUNTER_FIELDS; i++) {
        atomic_store_explicit(&rx->pub[i], v[i], memory_order_relaxed);
    }
}

void sdd_ro_rx_counters(const sdd_ro_rx *rx, struct sdd_ro_counters *out)
{
    uint64_t *v = (uint64_t *)out;
    for (size_t i = 0; i < RO_COUNTER_FIELDS; i++) {
        v[i] = atomic_load_explicit(&((sdd_ro_rx *)rx)->pub[i], memory_order_relaxed);
    }
}

void sdd_ro_rx_latency(const sdd_ro_rx *rx, sdd_hist *out)
{
    *out = rx->lat;
}

/* The parts of the batch's message headers that never change: header, overflow byte and
 * control buffers. predict() fills in only the payload destinations. */
static void init_batch(sdd_ro_rx *rx)
{
    for (uint32_t k = 0; k < rx->o.batch; k++) {
        struct iovec *iov = &rx->iov[3 * k];
        if (whole_datagrams(rx)) {
            iov[0] = (struct iovec){rx->gro_bufs + (size_t)k * RO_GRO_BUF, RO_GRO_BUF};
            rx->msgs[k].msg_hdr = (struct msghdr){
                .msg_iov = iov,
                .msg_iovlen = 1,
                .msg_control = rx->ctrl + (size_t)k * rx->ctrl_len,
            };
            continue;
        }
        iov[0] = (struct iovec){rx->hdrs + (size_t)k * SDD_RO_HEADER_SIZE, SDD_RO_HEADER_SIZE};
        iov[1] = (struct iovec){rx->scratch + (size_t)k * rx->payload, rx->payload};
        iov[2] = (struct iovec){rx->tail + k, 1};
        rx->msgs[k].msg_hdr = (struct msghdr){
            .msg_iov = iov,
            .msg_iovlen = 3,
            .msg_control = rx->ctrl + (size_t)k * rx->ctrl_len,
        };
    }
}

/* Point the first n datagrams of the next batch at their predicted places: the packets after
 * the highest seen, in order, wherever their frame already has a slot and lacks that packet. */
static void predict(sdd_ro_rx *rx, uint32_t n)
{
    uint64_t f = rx->max_frame;
    uint32_t p = rx->max_packet;
    struct ro_entry *e = NULL;
    bool looked = false;
    for (uint32_t k = 0; k < n; k++) {
        struct ro_pred *pr = &rx->pred[k];
        if (++p == rx->ppf) {
            p = 0;
            f++;
            looked = false;
        }
        if (!looked) {
            e = ro_asm_predict(rx, f);
            looked = true;
        }
        if (e != NULL && !ro_bit(e, p)) {
            *pr = (struct ro_pred){
                .e = e, .frame = f, .packet = p, .dst = e->slot->f.data + (size_t)p * rx->payload};
        } else {
            *pr = (struct ro_pred){.e = NULL, .dst = rx->scratch + (size_t)k * rx->payload};
        }
        rx->iov[3 * k + 1].iov_base = pr->dst;
        rx->msgs[k].msg_hdr.msg_controllen = rx->ctrl_len; /* the kernel shrinks it */
    }
}

/* Copy the payloads of datagrams k..n-1 that landed in slots to their scratch buffers, so
 * placing earlier ones out of order, or closing frames, cannot overwrite or expose them. */
static void evacuate(sdd_ro_rx *rx, uint32_t k, uint32_t n)
{
    for (uint32_t j = k; j < n; j++) {
        struct ro_pred *pr = &rx->pred[j];
        if (pr->e == NULL) {
            continue;
        }
        uint8_t *s = rx->scratch + (size_t)j * rx->payload;
        size_t len = rx->msgs[j].msg_len;
        len = len <= SDD_RO_HEADER_SIZE ? 0 : len - SDD_RO_HEADER_SIZE;
        memcpy(s, pr->dst, len < rx->payload ? len : rx->payload);
        pr->e = NULL;
        pr->dst = s;
    }
}

/* Read a datagram's control messages: the socket's drop count and, with GRO, the size of
 * the datagrams coalesced into it (0 when it is a single datagram). */
static size_t read_cmsgs(sdd_ro_rx *rx, struct msghdr *mh)
{
    size_t segment = 0;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(mh); cm != NULL; cm = CMSG_NXTHDR(mh, cm)) {
#ifdef SO_RXQ_OVFL
        if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SO_RXQ_OVFL) {
            uint32_t v;
            memcpy(&v, CMSG_DATA(cm), sizeof(v));
            rx->c.kernel_drops += (uint32_t)(v - rx->ovfl_last); /* the kernel's count wraps */
            rx->ovfl_last = v;
        }
#endif
        if (cm->cmsg_level == SOL_UDP && cm->cmsg_type == UDP_GRO) {
            int v;
            memcpy(&v, CMSG_DATA(cm), sizeof(v));
            segment = v > 0 ? (size_t)v : 0;
        }
    }
    return segment;
}

static void process_batch(sdd_ro_rx *rx, uint32_t n, uint64_t now)
{
    const struct sdd_ro_geometry *g = &rx->o.geom;
    bool evacuated = false;
    for (uint32_t k = 0; k < n; k++) {
        struct mmsghdr *m = &rx->msgs[k];
        struct ro_pred *pr = &rx->pred[k];
        size_t len = m->msg_len;
        if (m->msg_hdr.msg_flags & MSG_TRUNC) {
            len = SDD_RO_HEADER_SIZE + (size_t)rx->payload + 1; /* at least this long */
        }
        (void)read_cmsgs(rx, &m->msg_hdr);
        rx->c.datagrams++;
        rx->c.bytes += m->msg_len;
        struct sdd_ro_packet p;
        sdd_ro_reason r =
            sdd_ro_parse(rx->o.format, rx->hdrs + (size_t)k * SDD_RO_HEADER_SIZE, len, g, &p);
        bool as_predicted =
            r == SDD_RO_OK && pr->e != NULL && p.frame_id == pr->frame && p.packet_id == pr->packet;
        if (!as_predicted && !evacuated) {
            evacuate(rx, k, n);
            evacuated = true;
        }
        if (r != SDD_RO_OK) {
            rx->c.corrupt++;
            rx->c.corrupt_by[r]++;
            continue;
        }
        ro_asm_place(rx, &p, pr->dst, now);
    }
}

/* Parse and place one datagram that sits whole at d (GRO buffers): one copy to its slot. */
static void place_contiguous(sdd_ro_rx *rx, const uint8_t *d, size_t len, uint64_t now)
{
    if (rx->o.format == SDD_RO_FMT_NA62) {
        ro_pack_place(rx, d, len, now);
        return;
    }
    rx->c.datagrams++;
    rx->c.bytes += len;
    struct sdd_ro_packet p;
    sdd_ro_reason r = sdd_ro_parse(rx->o.format, d, len, &rx->o.geom, &p);
    if (r != SDD_RO_OK) {
        rx->c.corrupt++;
        rx->c.corrupt_by[r]++;
        return;
    }
    ro_asm_place(rx, &p, d + SDD_RO_HEADER_SIZE, now);
}

/* GRO batch: each receive holds one datagram, or a run of datagrams of `segment` bytes each
 * (the last may be shorter) that the kernel coalesced; split and place them in order. */
static void process_batch_gro(sdd_ro_rx *rx, uint32_t n, uint64_t now)
{
    for (uint32_t k = 0; k < n; k++) {
        struct mmsghdr *m = &rx->msgs[k];
        const uint8_t *buf = rx->gro_bufs + (size_t)k * RO_GRO_BUF;
        size_t len = m->msg_len;
        size_t segment = read_cmsgs(rx, &m->msg_hdr);
        if ((m->msg_hdr.msg_flags & MSG_TRUNC) || segment == 0 || segment >= len) {
            /* One datagram; a truncated one is longer than any valid packet. */
            size_t whole = (m->msg_hdr.msg_flags & MSG_TRUNC) ? RO_GRO_BUF + 1 : len;
            place_contiguous(rx, buf, whole, now);
            continue;
        }
        rx->c.coalesced += (len + segment - 1) / segment;
        for (size_t off = 0; off < len; off += segment) {
            size_t seg_len = len - off < segment ? len - off : segment;
            place_contiguous(rx, buf + off, seg_len, now);
        }
    }
}

/* Close what is open: frames by the missing-packet policy, or the NA62 slot being filled. */
static void flush_open(sdd_ro_rx *rx, uint64_t now)
{
    if (rx->o.format == SDD_RO_FMT_NA62) {
        ro_pack_flush(rx, now);
    } else {
        ro_asm_flush(rx, now);
    }
}

/* Receive loop for whole datagrams (GRO, NA62): no prediction; the kernel may coalesce. */
static void rx_loop_gro(sdd_ro_rx *rx, int flags, uint64_t timeout_ns)
{
    while (!atomic_load_explicit(&rx->stop, memory_order_relaxed)) {
        for (uint32_t k = 0; k < rx->o.batch; k++) {
            rx->msgs[k].msg_hdr.msg_controllen = rx->ctrl_len; /* the kernel shrinks it */
        }
        int n = recvmmsg(rx->fd, rx->msgs, rx->o.batch, flags, NULL);
        uint64_t now = sdd_now_ns();
        if (n > 0) {
            process_batch_gro(rx, (uint32_t)n, now);
        } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            SDD_WARN("readout", "receiver: recvmmsg: errno %d", errno);
            sdd_sleep_ns(SDD_NS_PER_MS);
        }
        if (n <= 0 && rx->any && now - rx->last_packet_ns > timeout_ns) {
            flush_open(rx, now);
        }
        publish(rx);
    }
}

static void *rx_thread(void *arg)
{
    sdd_ro_rx *rx = arg;
    if (rx->o.cpu >= 0) {
        (void)sdd_cpu_pin_self(rx->o.cpu); /* logged there; run unpinned */
    }
    int flags = rx->o.busy_poll ? MSG_DONTWAIT : MSG_WAITFORONE;
    uint64_t timeout_ns = (uint64_t)rx->o.frame_timeout_ms * SDD_NS_PER_MS;
    /* Predict for twice what the last call brought (at least 8): a receiver that keeps up gets
     * one or two datagrams per call and should not set up the whole batch each time. */
    uint32_t want = rx->o.batch;
    init_batch(rx);
    if (whole_datagrams(rx)) {
        rx_loop_gro(rx, flags, timeout_ns);
    }
    while (!atomic_load_explicit(&rx->stop, memory_order_relaxed)) {
        predict(rx, want);
        int n = recvmmsg(rx->fd, rx->msgs, want, flags, NULL);
        uint64_t now = sdd_now_ns();
        if (n > 0) {
            process_batch(rx, (uint32_t)n, now);
            want = 2 * (uint32_t)n > 8 ? 2 * (uint32_t)n : 8;
            want = want < rx->o.batch ? want : rx->o.batch;
        } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            SDD_WARN("readout", "receiver: recvmmsg: errno %d", errno);
            sdd_sleep_ns(SDD_NS_PER_MS);
        }
        if (n <= 0 && rx->any && now - rx->last_packet_ns > timeout_ns) {
            ro_asm_flush(rx, now);
        }
        publish(rx);
    }
    flush_open(rx, sdd_now_ns());
    publish(rx);
    /* Release pairs with the acquire in sdd_ro_rx_next: every delivery above is visible. */
    atomic_store_explicit(&rx->done, true, memory_order_release);
    sdd_notify_wake_always(&rx->ready_note);
    return NULL;
}

sdd_err sdd_ro_rx_start(sdd_ro_rx *rx)
{
    if (rx == NULL) {
        return SDD_EINVAL;
    }
    if (rx->started) {
        return SDD_EBUSY;
    }
    int rc = pthread_create(&rx->thread, NULL, rx_thread, rx);
    if (rc != 0) {
        SDD_WARN("readout", "receiver: pthread_create: %d", rc);
        return SDD_EOS;
    }
    rx->started = true;
    return SDD_OK;
}

sdd_err sdd_ro_rx_stop(sdd_ro_rx *rx)
{
    if (rx == NULL) {
        return SDD_EINVAL;
    }
    if (rx->started) {
        atomic_store_explicit(&rx->stop, true, memory_order_relaxed);
        sdd_notify_wake_always(&rx->free_note); /* a receiver blocked for a slot */
        pthread_join(rx->thread, NULL);
        rx->started = false;
    }
    atomic_store_explicit(&rx->done, true, memory_order_release);
    sdd_notify_wake_always(&rx->ready_note);
    return SDD_OK;
}

void sdd_ro_rx_destroy(sdd_ro_rx *rx)
{
    if (rx == NULL) {
        return;
    }
    sdd_ro_rx_stop(rx);
    if (rx->fd >= 0) {
        close(rx->fd);
    }
    free(rx->gro_bufs);
    free(rx->ctrl);
    free(rx->tail);
    free(rx->scratch);
    free(rx->hdrs);
    free(rx->pred);
    free(rx->iov);
    free(rx->msgs);
    ro_pack_fini(rx);
    ro_asm_fini(rx);
    ro_slots_fini(rx);
    free(rx);
}
