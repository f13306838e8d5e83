/* UDP readout benchmark on loopback, in one invocation: the sddaq receiver (recvmmsg into the
 * slot ring, frame assembly, hand-off to a consumer) against a naive receiver that calls
 * recvfrom once per datagram and only validates the header, and against iperf3 -u (when
 * installed), at 1 KiB and 8 KiB datagrams (UDP payload, header included).
 *
 * Loss-free throughput: a trial sends for a fixed time at an offered rate; it is loss-free
 * when every datagram sent was received. Each receiver first runs unthrottled; if that loses,
 * the offered rate steps down from what it received (x 0.85) until a trial is loss-free. The
 * receivers take turns, round after round; medians with min-max are reported. Our receiver
 * and the naive one are fed by the same sddaq emulator (sendmmsg, batch 32); iperf3 by its own
 * client. Sender pinned to CPU 0, receivers to CPU 1.
 *
 * Latency: send -> slot-ready (one datagram per frame, sender batch 1) at half of our
 * loss-free rate at 1 KiB, with a blocking and a busy-polling receiver.
 *
 *   bench_readout [--smoke] [--json] [--rounds R] [--seconds S] [--no-iperf] [--latency PPS]
 *
 * --smoke: a short sanity run at a low fixed rate (no search, no iperf3); exits 0 when both
 *          receivers got every datagram.
 * --json:  print only the JSON lines. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sddaq/clock.h"
#include "sddaq/cpu.h"
#include "sddaq/hist.h"
#include "sddaq/readout.h"

#define MAX_ROUNDS  16
#define MAX_STEPS   10
#define PPF         32
#define RCVBUF      (8 << 20)
#define RING_FRAMES 64 /* frame slots of our receiver and of the naive one's ring */

/* sddaq-gro: our receiver with UDP GRO, fed by the emulator sending with segmentation offload
 * (GSO: the same datagrams, handed to the stack in runs). naive-gso: the naive receiver fed by
 * that same sender (the kernel cuts the runs into datagrams for it), so the naive baseline
 * gets the faster sender too. */
enum rx_kind { RX_SDDAQ, RX_SDDAQ_GRO, RX_NAIVE, RX_NAIVE_GSO, RX_IPERF, RX_KINDS };
static const char *const kind_names[] = {"sddaq", "sddaq-gro", "naive", "naive-gso", "iperf3"};

struct opts {
    bool smoke, json_only, iperf;
    double latency_pps; /* > 0: only the latency trials, at this rate */
    int rounds;
    double seconds;
    int cpu_tx, cpu_rx;
};

struct trial {
    double offered_pps; /* 0 = unthrottled */
    uint64_t sent, got;
    double secs;
    double rx_cpu_ns; /* receive CPU busy time during the trial */
    bool lossfree;
};

static double trial_pps(const struct trial *t)
{
    return t->secs > 0 ? (double)t->got / t->secs : 0;
}

/* ---- Sender: the sddaq emulator on its own thread ------------------------------------------- */

struct sender {
    struct sdd_ro_emu_opts o;
    uint16_t port;
    struct sdd_ro_emu_stats st;
    sdd_err err;
    pthread_t thread;
};

static void *sender_main(void *arg)
{
    struct sender *s = arg;
    sdd_ro_emu *e = NULL;
    s->err = sdd_ro_emu_create(&s->o, "127.0.0.1", s->port, &e);
    if (s->err == SDD_OK) {
        s->err = sdd_ro_emu_run(e);
        sdd_ro_emu_stats(e, &s->st);
    }
    sdd_ro_emu_destroy(e);
    return NULL;
}

/* frames 0: send for o->seconds. */
static void sender_start(struct sender *s, const struct opts *o, uint32_t payload, uint32_t ppf,
                         double pps, uint32_t batch, uint16_t port, uint64_t frames, bool gso)
{
    sdd_ro_emu_opts_default(&s->o, SDD_RO_FMT_STREAM);
    s->o.geom =
        (struct sdd_ro_geometry){.stream_id = 1, .packets_per_frame = ppf, .payload_size = payload};
    s->o.frames = frames;
    s->o.seconds = frames != 0 ? 0 : o->seconds;
    s->o.rate_pps = pps;
    s->o.batch = batch;
    s->o.burst = batch;
    s->o.pattern = false;
    s->o.cpu = o->cpu_tx;
    s->o.sndbuf = RCVBUF;
    s->o.gso = gso ? batch : 0;
    s->port = port;
    pthread_create(&s->thread, NULL, sender_main, s);
}

/* ---- The sddaq receiver -----------------------------------------------------------------------
 */

/* Wait until the receiver has read everything sent, or nothing new for 100 ms. */
static void drain(sdd_ro_rx *rx, uint64_t sent)
{
    struct sdd_ro_counters c;
    uint64_t last = UINT64_MAX, since = sdd_now_ns();
    for (;;) {
        sdd_ro_rx_counters(rx, &c);
        if (c.datagrams >= sent) {
            return;
        }
        if (c.datagrams != last) {
            last = c.datagrams;
            since = sdd_now_ns();
        } else if (sdd_now_ns() - since > 100 * SDD_NS_PER_MS) {
            return;
        }
        sdd_sleep_ns(SDD_NS_PER_MS);
    }
}

/* The consumer takes and releases frames with the library's own wait (spin, then sleep). It
 * is pinned beside the receiver, so the sender's CPU (which, on loopback, also runs the
 * kernel's receive path) is left alone as with the naive receiver; unpinned or beside the
 * sender gave no shorter latency tails here. */
struct consumer {
    sdd_ro_rx *rx;
    int cpu;
    pthread_t thread;
};

static void *consumer_main(void *arg)
{
    struct consumer *c = arg;
    if (c->cpu >= 0) {
        sdd_cpu_pin_self(c->cpu);
    }
    struct sdd_ro_frame *f;
    sdd_err err;
    while ((err = sdd_ro_rx_next(c->rx, &f, 100)) != SDD_ECLOSED) {
        if (err == SDD_OK) {
            sdd_ro_rx_release(c->rx, f);
        }
    }
    return NULL;
}

/* Busy and total jiffies of one CPU from /proc/stat (user..steal, and all). */
static void cpu_ticks(int cpu, uint64_t *busy, uint64_t *total)
{
    *busy = *total = 0;
    FILE *f = fopen("/proc/stat", "r");
    if (f == NULL) {
        return;
    }
    char line[512], name[16];
    snprintf(name, sizeof(name), "cpu%d ", cpu);
    while (fgets(line, sizeof(line), f) != NULL) {
        if (strncmp(line, name, strlen(name)) != 0) {
            continue;
        }
        unsigned long long v[8] = {0};
        sscanf(line + strlen(name), "%llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2],
               &v[3], &v[4], &v[5], &v[6], &v[7]);
        for (int i = 0; i < 8; i++) {
            *total += v[i];
            *busy += (i == 3 || i == 4) ? 0 : v[i]; /* not idle, not iowait */
        }
        break;
    }
    fclose(f);
}

/* Receive-side CPU time between two cpu_ticks() samples, in ns (USER_HZ ticks). */
static double busy_ns(uint64_t b0, uint64_t b1)
{
    return (double)(b1 - b0) * 1e9 / (double)sysconf(_SC_CLK_TCK);
}

/* One trial of our receiver. With lat != NULL: one datagram per frame, sender batch 1, and the
 * latency histogram is copied out. */
static int trial_sddaq(const struct opts *o, size_t dgram, double pps, bool busy, bool gro,
                       sdd_hist *lat, struct trial *t)
{
    uint32_t payload = (uint32_t)(dgram - SDD_RO_HEADER_SIZE);
    uint32_t ppf = lat != NULL ? 1 : PPF;
    struct sdd_ro_rx_opts ro;
    sdd_ro_rx_opts_default(&ro, SDD_RO_FMT_STREAM);
    ro.geom =
        (struct sdd_ro_geometry){.stream_id = 1, .packets_per_frame = ppf, .payload_size = payload};
    ro.slots = lat != NULL ? 1024 : RING_FRAMES;
    ro.cpu = o->cpu_rx;
    ro.busy_poll = busy;
    ro.gro = gro;
    ro.rcvbuf = RCVBUF;
    sdd_ro_rx *rx = NULL;
    sdd_err err = sdd_ro_rx_create(&ro, &rx);
    if (err != SDD_OK) {
        fprintf(stderr, "bench_readout: receiver: %s\n", sdd_strerror(err));
        return -1;
    }
    sdd_ro_rx_start(rx);
    struct consumer cons = {.rx = rx, .cpu = o->cpu_rx};
    pthread_create(&cons.thread, NULL, consumer_main, &cons);
    uint64_t b0, b1, t0, t1;
    cpu_ticks(o->cpu_rx, &b0, &t0);
    struct sender s;
    sender_start(&s, o, payload, ppf, pps, lat != NULL ? 1 : 32, sdd_ro_rx_port(rx), 0, gro);
    pthread_join(s.thread, NULL);
    drain(rx, s.st.datagrams);
    cpu_ticks(o->cpu_rx, &b1, &t1);
    sdd_ro_rx_stop(rx);
    pthread_join(cons.thread, NULL);
    struct sdd_ro_counters c;
    sdd_ro_rx_counters(rx, &c);
    if (lat != NULL) {
        sdd_ro_rx_latency(rx, lat);
    }
    sdd_ro_rx_destroy(rx);
    if (s.err != SDD_OK) {
        fprintf(stderr, "bench_readout: sender: %s\n", sdd_strerror(s.err));
        return -1;
    }
    *t = (struct trial){.offered_pps = pps,
                        .sent = s.st.datagrams,
                        .got = c.received,
                        .secs = s.st.elapsed_ns / 1e9,
                        .rx_cpu_ns = busy_ns(b0, b1),
                        .lossfree = c.received == s.st.datagrams && c.lost == 0 &&
                                    c.kernel_drops == 0 && c.corrupt == 0};
    return 0;
}

/* ---- The naive receiver: one recvfrom per datagram --------------------------------------------
 */

/* The naive receiver: recvfrom into one packet buffer, check the header, then (copy) memcpy
 * the payload to its place in a frame ring as large as ours - what a simple frame receiver
 * does. Without copy it is the floor: the datagram is read and thrown away. */
struct naive {
    int fd;
    int cpu;
    bool copy;
    uint8_t *ring;
    size_t ring_frames;
    uint32_t payload;
    atomic_bool stop;
    _Atomic uint64_t got;
    _Atomic uint64_t last_ns; /* time of the latest datagram */
    pthread_t thread;
};

static void *naive_main(void *arg)
{
    struct naive *n = arg;
    sdd_cpu_pin_self(n->cpu);
    static _Thread_local uint8_t buf[65536];
    const struct sdd_ro_geometry g = {
        .stream_id = 1, .packets_per_frame = PPF, .payload_size = n->payload};
    uint64_t got = 0;
    for (;;) {
        ssize_t len = recvfrom(n->fd, buf, sizeof(buf), 0, NULL, NULL);
        if (len < 0) {
            if (atomic_load_explicit(&n->stop, memory_order_relaxed)) {
                break;
            }
            continue;
        }
        struct sdd_ro_packet p;
        if (sdd_ro_parse(SDD_RO_FMT_STREAM, buf, (size_t)len, &g, &p) == SDD_RO_OK) {
            if (n->copy) {
                size_t frame = (size_t)(p.frame_id % n->ring_frames);
                memcpy(n->ring + (frame * PPF + p.packet_id) * n->payload, buf + SDD_RO_HEADER_SIZE,
                       n->payload);
            }
            atomic_store_explicit(&n->got, ++got, memory_order_relaxed);
        }
        if ((got & 63) == 0) {
            atomic_store_explicit(&n->last_ns, sdd_now_ns(), memory_order_relaxed);
        }
    }
    return NULL;
}

static int naive_open(struct naive *n, const struct opts *o, size_t dgram, int rcvbuf, bool copy)
{
    *n = (struct naive){.cpu = o->cpu_rx,
                        .copy = copy,
                        .ring_frames = RING_FRAMES,
                        .payload = (uint32_t)(dgram - SDD_RO_HEADER_SIZE)};
    if (copy) {
        size_t bytes = ((size_t)RING_FRAMES * PPF * n->payload + 4095) & ~(size_t)4095;
        n->ring = aligned_alloc(4096, bytes);
        if (n->ring == NULL) {
            return -1;
        }
        memset(n->ring, 0, bytes); /* resident, as our receiver's slots */
    }
    atomic_init(&n->stop, false);
    atomic_init(&n->got, 0);
    atomic_init(&n->last_ns, 0);
    n->fd = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (setsockopt(n->fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof(rcvbuf)) != 0) {
        setsockopt(n->fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
    }
    struct timeval tv = {.tv_usec = 10000};
    setsockopt(n->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    socklen_t al = sizeof(a);
    if (bind(n->fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
        getsockname(n->fd, (struct sockaddr *)&a, &al) != 0) {
        fprintf(stderr, "bench_readout: naive bind: errno %d\n", errno);
        close(n->fd);
        free(n->ring);
        return -1;
    }
    return ntohs(a.sin_port);
}

static int trial_naive(const struct opts *o, size_t dgram, double pps, bool gso, struct trial *t)
{
    struct naive n;
    int port = naive_open(&n, o, dgram, RCVBUF, true);
    if (port < 0) {
        return -1;
    }
    pthread_create(&n.thread, NULL, naive_main, &n);
    uint64_t b0, b1, t0, t1;
    cpu_ticks(o->cpu_rx, &b0, &t0);
    struct sender s;
    sender_start(&s, o, n.payload, PPF, pps, 32, (uint16_t)port, 0, gso);
    pthread_join(s.thread, NULL);
    uint64_t last = UINT64_MAX, since = sdd_now_ns();
    for (;;) {
        uint64_t g = atomic_load_explicit(&n.got, memory_order_relaxed);
        if (g >= s.st.datagrams || (g == last && sdd_now_ns() - since > 100 * SDD_NS_PER_MS)) {
            break;
        }
        if (g != last) {
            last = g;
            since = sdd_now_ns();
        }
        sdd_sleep_ns(SDD_NS_PER_MS);
    }
    cpu_ticks(o->cpu_rx, &b1, &t1);
    atomic_store(&n.stop, true);
    pthread_join(n.thread, NULL);
    close(n.fd);
    free(n.ring);
    uint64_t got = atomic_load(&n.got);
    *t = (struct trial){.offered_pps = pps,
                        .sent = s.st.datagrams,
                        .got = got,
                        .secs = s.st.elapsed_ns / 1e9,
                        .rx_cpu_ns = busy_ns(b0, b1),
                        .lossfree = got == s.st.datagrams};
    return s.err == SDD_OK ? 0 : -1;
}

/* ---- Receive capacity: drain a socket buffer filled before the receiver starts ------------- */

#define DRAIN_RCVBUF (256 << 20)

/* Datagrams to queue: about 100 MB of kernel memory at either size. */
static uint64_t drain_count(size_t dgram, bool smoke)
{
    uint64_t n = dgram <= 1024 ? 40000 : 8000;
    return smoke ? n / 20 : n;
}

/* Fill the socket, then time our receiver emptying it (to the last datagram it reads). */
static int drain_sddaq(const struct opts *o, size_t dgram, bool gro, struct trial *t)
{
    uint32_t payload = (uint32_t)(dgram - SDD_RO_HEADER_SIZE);
    struct sdd_ro_rx_opts ro;
    sdd_ro_rx_opts_default(&ro, SDD_RO_FMT_STREAM);
    ro.geom =
        (struct sdd_ro_geometry){.stream_id = 1, .packets_per_frame = PPF, .payload_size = payload};
    ro.slots = RING_FRAMES;
    ro.cpu = o->cpu_rx;
    ro.rcvbuf = DRAIN_RCVBUF;
    ro.gro = gro;
    sdd_ro_rx *rx = NULL;
    if (sdd_ro_rx_create(&ro, &rx) != SDD_OK) {
        return -1;
    }
    struct sender s;
    sender_start(&s, o, payload, PPF, 0, 32, sdd_ro_rx_port(rx), drain_count(dgram, o->smoke) / PPF,
                 gro);
    pthread_join(s.thread, NULL);
    /* The sender is done: the consumer (standing in for the next stage) takes its CPU. */
    struct consumer cons = {.rx = rx, .cpu = o->cpu_tx};
    uint64_t b0, b1, t0, t1, start = sdd_now_ns(), last_change = start, last = 0;
    cpu_ticks(o->cpu_rx, &b0, &t0);
    sdd_ro_rx_start(rx);
    pthread_create(&cons.thread, NULL, consumer_main, &cons);
    struct sdd_ro_counters c;
    for (;;) {
        sdd_sleep_ns(100 * SDD_NS_PER_US);
        sdd_ro_rx_counters(rx, &c);
        uint64_t now = sdd_now_ns();
        if (c.datagrams != last) {
            last = c.datagrams;
            last_change = now;
        }
        if (c.datagrams >= s.st.datagrams || now - last_change > 50 * SDD_NS_PER_MS) {
            break;
        }
    }
    cpu_ticks(o->cpu_rx, &b1, &t1);
    sdd_ro_rx_stop(rx);
    pthread_join(cons.thread, NULL);
    sdd_ro_rx_counters(rx, &c);
    sdd_ro_rx_destroy(rx);
    *t = (struct trial){.sent = s.st.datagrams,
                        .got = c.received,
                        .secs = (last_change - start) / 1e9,
                        .rx_cpu_ns = busy_ns(b0, b1),
                        .lossfree = c.received == s.st.datagrams};
    return s.err == SDD_OK ? 0 : -1;
}

static int drain_naive(const struct opts *o, size_t dgram, bool copy, struct trial *t)
{
    struct naive n;
    int port = naive_open(&n, o, dgram, DRAIN_RCVBUF, copy);
    if (port < 0) {
        return -1;
    }
    struct sender s;
    sender_start(&s, o, n.payload, PPF, 0, 32, (uint16_t)port, drain_count(dgram, o->smoke) / PPF,
                 false);
    pthread_join(s.thread, NULL);
    uint64_t b0, b1, t0, t1, start = sdd_now_ns(), last_change = start, last = 0;
    cpu_ticks(o->cpu_rx, &b0, &t0);
    pthread_create(&n.thread, NULL, naive_main, &n);
    for (;;) {
        sdd_sleep_ns(100 * SDD_NS_PER_US);
        uint64_t g = atomic_load_explicit(&n.got, memory_order_relaxed);
        uint64_t now = sdd_now_ns();
        if (g != last) {
            last = g;
            last_change = now;
        }
        if (g >= s.st.datagrams || now - last_change > 50 * SDD_NS_PER_MS) {
            break;
        }
    }
    cpu_ticks(o->cpu_rx, &b1, &t1);
    atomic_store(&n.stop, true);
    pthread_join(n.thread, NULL);
    close(n.fd);
    free(n.ring);
    uint64_t got = atomic_load(&n.got);
    *t = (struct trial){.sent = s.st.datagrams,
                        .got = got,
                        .secs = (last_change - start) / 1e9,
                        .rx_cpu_ns = busy_ns(b0, b1),
                        .lossfree = got == s.st.datagrams};
    return s.err == SDD_OK ? 0 : -1;
}

/* ---- iperf3 -u ------------------------------------------------------------------------------ */

static bool have_iperf(void)
{
    return system("command -v iperf3 >/dev/null 2>&1") == 0;
}

/* The number after "key": in s, or -1. */
static double json_number(const char *s, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof(pat), "\"%s\":", key);
    const char *p = strstr(s, pat);
    return p != NULL ? strtod(p + strlen(pat), NULL) : -1;
}

/* One iperf3 trial: server (receiver) on CPU 1, client on CPU 0, whole seconds. The server's
 * JSON summary gives packets, lost packets and seconds. */
static int trial_iperf(const struct opts *o, size_t dgram, double pps, struct trial *t)
{
    static int port = 15201;
    port = port < 15299 ? port + 1 : 15201;
    char out[] = "/tmp/bench_readout_iperf.XXXXXX";
    int fd = mkstemp(out);
    if (fd < 0) {
        return -1;
    }
    close(fd);
    int secs = o->seconds < 1 ? 1 : (int)(o->seconds + 0.5);
    double bits = pps > 0 ? pps * (double)dgram * 8 : 0;
    char cmd[1024];
    snprintf(cmd, sizeof(cmd),
             "iperf3 -s -1 -p %d -A %d --json > %s 2>&1 & srv=$!; sleep 0.3; "
             "iperf3 -u -c 127.0.0.1 -p %d -A %d -l %zu -b %.0f -t %d > /dev/null 2>&1; "
             "wait $srv",
             port, o->cpu_rx, out, port, o->cpu_tx, dgram, bits, secs);
    uint64_t b0, b1, t0, t1;
    cpu_ticks(o->cpu_rx, &b0, &t0);
    int rc = system(cmd);
    cpu_ticks(o->cpu_rx, &b1, &t1);
    FILE *f = fopen(out, "r");
    static char text[1 << 20];
    size_t n = f != NULL ? fread(text, 1, sizeof(text) - 1, f) : 0;
    if (f != NULL) {
        fclose(f);
    }
    remove(out);
    text[n] = '\0';
    /* The last "sum" of the server's report is the whole test's. */
    const char *end = strstr(text, "\"end\":");
    const char *sum = end != NULL ? strstr(end, "\"sum\":") : NULL;
    if (rc != 0 || sum == NULL) {
        fprintf(stderr, "bench_readout: iperf3 failed (rc %d)\n", rc);
        return -1;
    }
    double packets = json_number(sum, "packets"), lost = json_number(sum, "lost_packets");
    double seconds = json_number(sum, "seconds");
    if (packets < 0 || lost < 0 || seconds <= 0) {
        return -1;
    }
    *t = (struct trial){.offered_pps = pps,
                        .sent = (uint64_t)packets,
                        .got = (uint64_t)(packets - lost),
                        .secs = seconds,
                        .rx_cpu_ns = busy_ns(b0, b1), /* includes its start-up */
                        .lossfree = lost == 0};
    return 0;
}

/* ---- Search and report --------------------------------------------------------------------- */

static int run_trial(const struct opts *o, enum rx_kind k, size_t dgram, double pps,
                     struct trial *t)
{
    switch (k) {
    case RX_SDDAQ:
    case RX_SDDAQ_GRO:
        return trial_sddaq(o, dgram, pps, false, k == RX_SDDAQ_GRO, NULL, t);
    case RX_NAIVE:
    case RX_NAIVE_GSO:
        return trial_naive(o, dgram, pps, k == RX_NAIVE_GSO, t);
    default:
        return trial_iperf(o, dgram, pps, t);
    }
}

struct result {
    double lossfree_pps;    /* 0 when no loss-free trial was found (or not searched) */
    double max_pps;         /* what the unthrottled trial delivered */
    double max_loss;        /* its loss fraction */
    double rx_ns_per_dgram; /* its receive-CPU time per datagram received */
    bool sender_bound;      /* the unthrottled trial lost nothing */
};

/* Unthrottled first; if that lost, step the offered rate down until a trial loses nothing.
 * iperf3 runs unthrottled only: its receive throughput is the reference, and its server
 * reports a few datagrams lost at the end of every test even at low rates. */
static int search(const struct opts *o, enum rx_kind k, size_t dgram, struct result *r)
{
    struct trial t;
    if (run_trial(o, k, dgram, 0, &t) != 0) {
        return -1;
    }
    *r = (struct result){.max_pps = trial_pps(&t),
                         .max_loss = t.sent ? 1.0 - (double)t.got / (double)t.sent : 0,
                         .rx_ns_per_dgram = t.got ? t.rx_cpu_ns / (double)t.got : 0,
                         .sender_bound = t.lossfree};
    if (t.lossfree) {
        r->lossfree_pps = trial_pps(&t);
        return 0;
    }
    if (k == RX_IPERF) {
        return 0;
    }
    double rate = trial_pps(&t);
    for (int step = 0; step < MAX_STEPS; step++) {
        if (run_trial(o, k, dgram, rate, &t) != 0) {
            return -1;
        }
        if (t.lossfree) {
            r->lossfree_pps = trial_pps(&t);
            return 0;
        }
        rate *= 0.85;
    }
    return 0;
}

/* The machine's own floor under the latency figures: a thread spinning alone on a CPU reads
 * the clock back to back for `secs`; every gap above 5 or 20 us is time the CPU was taken from
 * it (interrupts, the hypervisor). Whatever the receiver does, frames that meet such a gap on
 * the sender's or the receiver's CPU are late by that much. */
struct cpu_floor {
    double gaps5_per_s, gaps20_per_s, lost_fraction;
};

static void *floor_main(void *arg)
{
    struct cpu_floor *f = arg;
    const double secs = 1.0;
    uint64_t t0 = sdd_now_ns(), last = t0, end = t0 + (uint64_t)(secs * 1e9), lost = 0;
    uint64_t g5 = 0, g20 = 0;
    while (last < end) {
        uint64_t t = sdd_now_ns();
        if (t - last > 5 * SDD_NS_PER_US) {
            g5++;
            lost += t - last;
            g20 += t - last > 20 * SDD_NS_PER_US;
        }
        last = t;
    }
    *f = (struct cpu_floor){g5 / secs, g20 / secs, lost / (secs * 1e9)};
    return NULL;
}

static void measure_floor(const struct opts *o, struct cpu_floor out[2])
{
    const int cpus[2] = {o->cpu_tx, o->cpu_rx};
    for (int i = 0; i < 2; i++) {
        pthread_t t;
        if (pthread_create(&t, NULL, floor_main, &out[i]) != 0) {
            out[i] = (struct cpu_floor){0};
            continue;
        }
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cpus[i], &set);
        (void)pthread_setaffinity_np(t, sizeof(set), &set);
        pthread_join(t, NULL);
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

struct stat3 {
    double median, min, max;
};

static struct stat3 stats(const double *v, int n)
{
    double s[MAX_ROUNDS];
    memcpy(s, v, sizeof(double) * (size_t)n);
    qsort(s, (size_t)n, sizeof(double), cmp_double);
    return (struct stat3){
        .median = n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2, .min = s[0], .max = s[n - 1]};
}

static void usage(const char *prog)
{
    fprintf(stderr,
            "usage: %s [--smoke] [--json] [--rounds R (1..%d)] [--seconds S] [--no-iperf]\n"
            "          [--latency PPS (only the latency trials, at this rate)]\n",
            prog, MAX_ROUNDS);
}

static int smoke(const struct opts *o)
{
    int bad = 0;
    const size_t sizes[] = {1024, 8192};
    for (size_t i = 0; i < 2; i++) {
        struct trial a, b;
        struct trial g;
        if (trial_sddaq(o, sizes[i], 20000, false, false, NULL, &a) != 0 ||
            trial_sddaq(o, sizes[i], 20000, false, true, NULL, &g) != 0 ||
            trial_naive(o, sizes[i], 20000, false, &b) != 0) {
            return 1;
        }
        printf("smoke %5zu B: sddaq %" PRIu64 "/%" PRIu64 ", sddaq-gro %" PRIu64 "/%" PRIu64
               ", naive %" PRIu64 "/%" PRIu64 "\n",
               sizes[i], a.got, a.sent, g.got, g.sent, b.got, b.sent);
        bad += !a.lossfree || !g.lossfree || !b.lossfree || a.sent == 0;
    }
    for (size_t i = 0; i < 2; i++) {
        struct trial a, b;
        if (drain_sddaq(o, sizes[i], false, &a) != 0 || drain_naive(o, sizes[i], true, &b) != 0) {
            return 1;
        }
        printf("smoke drain %5zu B: sddaq %" PRIu64 "/%" PRIu64 ", naive %" PRIu64 "/%" PRIu64 "\n",
               sizes[i], a.got, a.sent, b.got, b.sent);
        bad += a.got == 0 || b.got == 0;
    }
    sdd_hist h;
    struct trial t;
    if (trial_sddaq(o, 1024, 10000, false, false, &h, &t) != 0) {
        return 1;
    }
    printf("smoke latency: %" PRIu64 " frames, p99 %.2f us\n", sdd_hist_count(&h),
           sdd_hist_quantile(&h, 0.99) / 1e3);
    bad += sdd_hist_count(&h) == 0 || !t.lossfree;
    return bad == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
    struct opts o = {.rounds = 3, .seconds = 0.5, .iperf = true, .cpu_tx = 0, .cpu_rx = 1};
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--smoke") == 0) {
            o.smoke = true;
        } else if (strcmp(argv[i], "--json") == 0) {
            o.json_only = true;
        } else if (strcmp(argv[i], "--latency") == 0 && i + 1 < argc) {
            o.latency_pps = atof(argv[++i]);
        } else if (strcmp(argv[i], "--no-iperf") == 0) {
            o.iperf = false;
        } else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc) {
            o.rounds = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc) {
            o.seconds = atof(argv[++i]);
        } else {
            usage(argv[0]);
            return 2;
        }
    }
    if (o.rounds < 1 || o.rounds > MAX_ROUNDS || !(o.seconds > 0)) {
        usage(argv[0]);
        return 2;
    }
    if (sdd_cpu_count() < 2) {
        o.cpu_tx = o.cpu_rx = 0;
    }
    if (o.smoke) {
        o.seconds = 0.2;
        return smoke(&o);
    }
    bool iperf = o.iperf && have_iperf();
    const size_t sizes[] = {1024, 8192};
    static struct result res[2][RX_KINDS][MAX_ROUNDS];
    /* Drain rows: sddaq, sddaq-gro (queue filled by a GSO sender), naive (copy), bare
     * (recvfrom only). The naive ones see the same datagrams whatever the sender. */
    enum { DR_SDDAQ, DR_SDDAQ_GRO, DR_NAIVE, DR_BARE, DR_KINDS };
    static const char *const drain_names[] = {"sddaq", "sddaq-gro", "naive", "bare"};
    static double drain[2][DR_KINDS][MAX_ROUNDS];
    for (int r = 0; r < o.rounds && o.latency_pps <= 0; r++) {
        for (int si = 0; si < 2; si++) {
            for (int k = 0; k < DR_KINDS; k++) {
                int kind = r % 2 ? DR_KINDS - 1 - k : k;
                struct trial t;
                if ((kind <= DR_SDDAQ_GRO
                         ? drain_sddaq(&o, sizes[si], kind == DR_SDDAQ_GRO, &t)
                         : drain_naive(&o, sizes[si], kind == DR_NAIVE, &t)) != 0) {
                    return 1;
                }
                drain[si][kind][r] = trial_pps(&t);
                printf("{\"bench\":\"readout\",\"test\":\"drain\",\"round\":%d,"
                       "\"receiver\":\"%s\",\"datagram\":%zu,\"queued\":%" PRIu64
                       ",\"drained\":%" PRIu64 ",\"pps\":%.0f,\"gbps\":%.4f}\n",
                       r, drain_names[kind], sizes[si], t.sent, t.got, trial_pps(&t),
                       trial_pps(&t) * (double)sizes[si] * 8 / 1e9);
                fflush(stdout);
            }
            for (int k = 0; k < RX_KINDS; k++) {
                /* Alternate the order each round, so drift hits every receiver alike. */
                enum rx_kind kind = (enum rx_kind)(r % 2 ? RX_KINDS - 1 - k : k);
                if (kind == RX_IPERF && !iperf) {
                    continue;
                }
                struct result *x = &res[si][kind][r];
                if (search(&o, kind, sizes[si], x) != 0) {
                    return 1;
                }
                printf("{\"bench\":\"readout\",\"round\":%d,\"receiver\":\"%s\","
                       "\"datagram\":%zu,\"lossfree_pps\":%.0f,\"lossfree_gbps\":%.4f,"
                       "\"max_pps\":%.0f,\"max_loss\":%.6f,\"rx_ns_per_datagram\":%.1f,"
                       "\"sender_bound\":%s}\n",
                       r, kind_names[kind], sizes[si], x->lossfree_pps,
                       x->lossfree_pps * (double)sizes[si] * 8 / 1e9, x->max_pps, x->max_loss,
                       x->rx_ns_per_dgram, x->sender_bound ? "true" : "false");
                fflush(stdout);
            }
        }
    }
    double v[MAX_ROUNDS];
    for (int r = 0; r < o.rounds; r++) {
        v[r] = res[0][RX_SDDAQ][r].lossfree_pps;
    }
    double half = o.latency_pps > 0 ? o.latency_pps : stats(v, o.rounds).median / 2;
    struct cpu_floor floor[2];
    measure_floor(&o, floor);
    for (int i = 0; i < 2; i++) {
        printf(
            "{\"bench\":\"readout\",\"test\":\"cpu_floor\",\"cpu\":%d,\"gaps_over_5us_per_s\":%.0f,"
            "\"gaps_over_20us_per_s\":%.0f,\"time_taken\":%.4f}\n",
            i == 0 ? o.cpu_tx : o.cpu_rx, floor[i].gaps5_per_s, floor[i].gaps20_per_s,
            floor[i].lost_fraction);
    }
    /* Latency at half of our loss-free rate at 1 KiB, blocking and busy-polling. */
    struct sdd_hist_summary lat[2];
    for (int busy = 0; busy < 2; busy++) {
        sdd_hist *h = malloc(sizeof(*h));
        struct trial t;
        if (h == NULL || trial_sddaq(&o, 1024, half, busy, false, h, &t) != 0) {
            free(h);
            return 1;
        }
        sdd_hist_summarize(h, &lat[busy]);
        free(h);
        printf("{\"bench\":\"readout\",\"test\":\"latency\",\"datagram\":1024,\"wait\":\"%s\","
               "\"offered_pps\":%.0f,\"received_pps\":%.0f,\"lossfree\":%s,\"frames\":%" PRIu64
               ",\"p50_us\":%.3f,\"p99_us\":%.3f,\"p999_us\":%.3f,\"max_us\":%.3f}\n",
               busy ? "busy-poll" : "block", half, trial_pps(&t), t.lossfree ? "true" : "false",
               lat[busy].count, lat[busy].p50 / 1e3, lat[busy].p99 / 1e3, lat[busy].p999 / 1e3,
               lat[busy].max / 1e3);
    }
    if (o.json_only) {
        return 0;
    }
    if (o.latency_pps > 0) {
        goto print_latency;
    }
    printf("\nloss-free receive throughput, %d rounds of %.1f s trials; median [min-max]; "
           "iperf3: unthrottled receive rate, whole seconds\n",
           o.rounds, o.seconds);
    printf("%-9s %5s  %-24s %6s  %-24s %7s %8s %7s %7s\n", "rx", "bytes", "loss-free Mpps", "Gb/s",
           "unthrottled Mpps", "loss", "rx ns/dg", "/naive", "/iperf3");
    for (int si = 0; si < 2; si++) {
        struct stat3 st[RX_KINDS][5];
        for (int k = 0; k < RX_KINDS; k++) {
            double a[MAX_ROUNDS], b[MAX_ROUNDS], c[MAX_ROUNDS], d[MAX_ROUNDS];
            for (int r = 0; r < o.rounds; r++) {
                a[r] = res[si][k][r].lossfree_pps;
                b[r] = res[si][k][r].max_pps;
                c[r] = res[si][k][r].max_loss;
                d[r] = res[si][k][r].rx_ns_per_dgram;
            }
            st[k][0] = stats(a, o.rounds);
            st[k][1] = stats(b, o.rounds);
            st[k][2] = stats(c, o.rounds);
            st[k][3] = stats(d, o.rounds);
        }
        for (int k = 0; k < RX_KINDS; k++) {
            if (k == RX_IPERF && !iperf) {
                printf("%-9s %5zu  (iperf3 %s: row skipped)\n", kind_names[k], sizes[si],
                       o.iperf ? "not installed" : "off");
                continue;
            }
            char a[40] = "-", b[40], vn[16] = "-", vi[16] = "-";
            if (k != RX_IPERF) {
                snprintf(a, sizeof(a), "%.3f [%.3f-%.3f]", st[k][0].median / 1e6,
                         st[k][0].min / 1e6, st[k][0].max / 1e6);
            }
            snprintf(b, sizeof(b), "%.3f [%.3f-%.3f]", st[k][1].median / 1e6, st[k][1].min / 1e6,
                     st[k][1].max / 1e6);
            double mine = k == RX_IPERF ? st[k][1].median : st[k][0].median;
            /* Against the better naive run, whichever sender it had. */
            double naive = st[RX_NAIVE][0].median > st[RX_NAIVE_GSO][0].median
                               ? st[RX_NAIVE][0].median
                               : st[RX_NAIVE_GSO][0].median;
            if (k != RX_IPERF && naive > 0) {
                snprintf(vn, sizeof(vn), "%.2fx", mine / naive);
            }
            if (k != RX_IPERF && iperf && st[RX_IPERF][1].median > 0) {
                snprintf(vi, sizeof(vi), "%.2fx", mine / st[RX_IPERF][1].median);
            }
            printf("%-9s %5zu  %-24s %6.2f  %-24s %6.2f%% %8.0f %7s %7s\n", kind_names[k],
                   sizes[si], a, mine * (double)sizes[si] * 8 / 1e9, b, 100 * st[k][2].median,
                   st[k][3].median, vn, vi);
        }
    }
    printf("\nreceive capacity: drain a socket buffer filled before the receiver starts "
           "(no sender competing); median [min-max]\n");
    printf("%-9s %5s  %-24s %6s %7s\n", "rx", "bytes", "Mpps", "Gb/s", "/naive");
    for (int si = 0; si < 2; si++) {
        struct stat3 naive = stats(drain[si][DR_NAIVE], o.rounds);
        for (int k = 0; k < DR_KINDS; k++) {
            struct stat3 d = stats(drain[si][k], o.rounds);
            char a[40];
            snprintf(a, sizeof(a), "%.3f [%.3f-%.3f]", d.median / 1e6, d.min / 1e6, d.max / 1e6);
            printf("%-9s %5zu  %-24s %6.2f %6.2fx\n", drain_names[k], sizes[si], a,
                   d.median * (double)sizes[si] * 8 / 1e9,
                   naive.median > 0 ? d.median / naive.median : 0);
        }
    }
print_latency:
    printf("\nsend -> slot-ready latency, 1 KiB, one datagram per frame, at %.0f datagrams/s:\n",
           half);
    for (int busy = 0; busy < 2; busy++) {
        printf("  %-9s p50 %.2f us, p99 %.2f us, p99.9 %.2f us, max %.2f us (%" PRIu64 " frames)\n",
               busy ? "busy-poll" : "block", lat[busy].p50 / 1e3, lat[busy].p99 / 1e3,
               lat[busy].p999 / 1e3, lat[busy].max / 1e3, lat[busy].count);
    }
    printf("machine floor: a thread spinning alone loses its CPU for > 5 us (> 20 us) "
           "%.0f (%.0f) times/s on the sender's CPU, %.0f (%.0f) on the receiver's\n",
           floor[0].gaps5_per_s, floor[0].gaps20_per_s, floor[1].gaps5_per_s,
           floor[1].gaps20_per_s);
    return 0;
}
