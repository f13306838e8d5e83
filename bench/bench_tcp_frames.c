/* Plain-TCP baseline for the camera side channel (examples/camera-sidechannel): the same frames,
 * pushed over one ordinary TCP socket on 127.0.0.1 instead of through a KSB. A sender process
 * (the camera) writes each frame with a write() loop (TCP_NODELAY), paced with absolute
 * deadlines like the camera, or flat out; the receiver (the control system) reads whole frames
 * with a recv() loop, verifies each one and records its age (sender stamp -> whole frame here;
 * both ends read the same CLOCK_MONOTONIC) in an sdd_hist.
 *
 * On the wire each frame is preceded by an 8-byte send stamp (the KSB keeps its commit stamp
 * in the cell beside the frame in the same way). The sender is paced like the camera
 * (cam_pacer: absolute deadlines, up to --camera-fifo frames made late, more dropped). A TCP
 * stream never skips: when the receiver is slow the sender blocks, falls behind and drops
 * frames at the camera ("camera_dropped"), and queued frames age. Its sustainable rate is
 * therefore where delivered_fps stays at the target with the frame age within budget, which
 * bench/camera.sh judges.
 *
 * Usage: bench_tcp_frames [--fps N] [--seconds S] [--width W --height H] [--json]
 *                         [--cpu-camera C --cpu-control C] [--check-age-us X]
 *                         [--camera-fifo N] [--smoke]
 *   --fps      frames per second (default 5000; 0 = as fast as the socket takes them)
 *   --json     one JSON line on stdout (fields as camera_sidechannel's, provider "plain-tcp");
 *              the readable summary then goes to stderr
 *   --smoke    a short, gentle run for ctest
 * Exit 0 when every frame arrived whole, in order and none is missing (and the age check, if
 * asked, passed); 1 otherwise; 2 on bad usage. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sddaq/clock.h"
#include "sddaq/cpu.h"
#include "sddaq/hist.h"

#include "../examples/camera-sidechannel/camera_frame.h"
#include "../examples/camera-sidechannel/camera_util.h"

#define STAMP_BYTES 8

struct cfg {
    double fps, seconds, check_age_us;
    size_t width, height;
    bool json;
    int cpu_camera, cpu_control;
    uint64_t camera_fifo;
};

struct sender_report {
    int32_t err; /* errno of a failed setup or write, 0 = fine */
    uint64_t published, elapsed_ns, dropped, fill_ns_sum, fill_ns_max;
};

static int parse_args(int argc, char **argv, struct cfg *c)
{
    *c = (struct cfg){.fps = 5000,
                      .seconds = 3,
                      .check_age_us = -1,
                      .width = 512,
                      .height = 512,
                      .cpu_camera = -1,
                      .cpu_control = -1,
                      .camera_fifo = 8};
    static const struct option longopts[] = {
        {"fps", required_argument, NULL, 'f'},
        {"seconds", required_argument, NULL, 's'},
        {"width", required_argument, NULL, 'W'},
        {"height", required_argument, NULL, 'H'},
        {"json", no_argument, NULL, 'j'},
        {"cpu-camera", required_argument, NULL, 'c'},
        {"cpu-control", required_argument, NULL, 'C'},
        {"check-age-us", required_argument, NULL, 'a'},
        {"camera-fifo", required_argument, NULL, 'F'},
        {"smoke", no_argument, NULL, 'S'},
        {"help", no_argument, NULL, 'u'},
        {NULL, 0, NULL, 0},
    };
    int opt, idx = 0;
    double v;
    while ((opt = getopt_long(argc, argv, "", longopts, &idx)) != -1) {
        bool ok = true;
        switch (opt) {
        case 'f':
            ok = parse_double(optarg, 0, 1e7, &c->fps);
            break;
        case 's':
            ok = parse_double(optarg, 0.01, 86400, &c->seconds);
            break;
        case 'W':
        case 'H':
            ok = parse_double(optarg, 1, 65536, &v) && v == (double)(size_t)v;
            if (ok) {
                *(opt == 'W' ? &c->width : &c->height) = (size_t)v;
            }
            break;
        case 'j':
            c->json = true;
            break;
        case 'c':
        case 'C':
            ok = parse_double(optarg, 0, SDD_CPU_ID_LIMIT - 1, &v) && v == (double)(int)v;
            if (ok) {
                *(opt == 'c' ? &c->cpu_camera : &c->cpu_control) = (int)v;
            }
            break;
        case 'a':
            ok = parse_double(optarg, 0, 1e12, &c->check_age_us);
            break;
        case 'F':
            ok = parse_double(optarg, 0, 1e6, &v) && v == (double)(uint64_t)v;
            c->camera_fifo = ok ? (uint64_t)v : 0;
            break;
        case 'S':
            c->fps = 1000;
            c->seconds = 0.5;
            break;
        case 'u':
            printf("usage: bench_tcp_frames [--fps N] [--seconds S] [--width W --height H] "
                   "[--json]\n"
                   "         [--cpu-camera C --cpu-control C] [--check-age-us X] "
                   "[--camera-fifo N] [--smoke]\n");
            return 0;
        default:
            return 2;
        }
        if (!ok) {
            fprintf(stderr, "bench_tcp_frames: bad value '%s' for --%s\n", optarg,
                    longopts[idx].name);
            return 2;
        }
    }
    size_t bytes = c->width * c->height;
    if (optind != argc || bytes % 8 != 0 || bytes < 64) {
        fprintf(stderr, "bench_tcp_frames: bad arguments (width*height: multiple of 8, >= 64)\n");
        return 2;
    }
    return -1;
}

/* ---- sender (the camera) --------------------------------------------------------------------- */

/* Write all of buf; false when stopped, when the receiver ended the stream, or when the socket
 * failed (then errno in *err). */
static bool write_all(int fd, const uint8_t *buf, size_t len, int32_t *err)
{
    size_t done = 0;
    while (done < len) {
        if (atomic_load_explicit(&stop_requested, memory_order_relaxed)) {
            return false;
        }
        ssize_t n = write(fd, buf + done, len - done);
        if (n > 0) {
            done += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0 && errno != EPIPE && errno != ECONNRESET) {
            *err = errno;
        }
        return false;
    }
    return true;
}

static void run_sender(const struct cfg *c, uint16_t port, struct sender_report *rep)
{
    memset(rep, 0, sizeof(*rep));
    if (c->cpu_camera >= 0) {
        (void)sdd_cpu_pin_self(c->cpu_camera);
    }
    tight_timers();
    struct cam_pattern pat;
    size_t frame_bytes = c->width * c->height;
    uint8_t *buf = aligned_alloc(64, STAMP_BYTES + frame_bytes + 56);
    if (buf == NULL || !cam_pattern_init(&pat, c->width, c->height)) {
        free(buf);
        rep->err = ENOMEM;
        return;
    }
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {
        .sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int one = 1;
    if (fd < 0 || setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0 ||
        connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        rep->err = errno;
        goto out_close;
    }
    const uint64_t t0 = sdd_now_ns();
    struct cam_pacer pace;
    cam_pacer_init(&pace, t0, c->fps, c->camera_fifo);
    uint64_t frame = 0;
    for (;;) {
        if (atomic_load_explicit(&stop_requested, memory_order_relaxed)) {
            break;
        }
        uint64_t wake = cam_pacer_next(&pace, sdd_now_ns());
        if (wake != 0) {
            cam_sleep_until(wake);
            continue;
        }
        uint64_t t_fill = sdd_now_ns();
        cam_frame_fill(&pat, buf + STAMP_BYTES, ++frame);
        uint64_t stamp = sdd_now_ns();
        memcpy(buf, &stamp, sizeof(stamp));
        uint64_t took = stamp - t_fill;
        rep->fill_ns_sum += took;
        rep->fill_ns_max = took > rep->fill_ns_max ? took : rep->fill_ns_max;
        if (!write_all(fd, buf, STAMP_BYTES + frame_bytes, &rep->err)) {
            frame--; /* not sent whole */
            break;
        }
    }
    rep->published = frame;
    rep->dropped = pace.dropped;
    rep->elapsed_ns = sdd_now_ns() - t0;
out_close:
    if (fd >= 0) {
        close(fd);
    }
    cam_pattern_fini(&pat);
    free(buf);
}

/* ---- receiver (the control system) ----------------------------------------------------------- */

struct recv_result {
    uint64_t elapsed_ns, delivered, bad, out_of_order, first_frame, last_frame;
    sdd_hist age;
};

/* Accept the sender and read frames for c->seconds. Returns 0 or an errno; *conn gets the
 * connection (or -1), left open so the sender is not cut off before it is told to stop. */
static int run_receiver(const struct cfg *c, int lfd, struct recv_result *r, int *conn)
{
    memset(r, 0, offsetof(struct recv_result, age));
    sdd_hist_init(&r->age);
    if (c->cpu_control >= 0) {
        (void)sdd_cpu_pin_self(c->cpu_control);
    }
    struct cam_pattern pat;
    size_t len = STAMP_BYTES + c->width * c->height;
    uint8_t *buf = aligned_alloc(64, len + 56);
    int fd = -1, rc = 0;
    if (buf == NULL || !cam_pattern_init(&pat, c->width, c->height)) {
        free(buf);
        return ENOMEM;
    }
    fd = accept(lfd, NULL, NULL); /* lfd has a receive timeout: a sender that died is noticed */
    *conn = fd;
    struct timeval tv = {.tv_sec = 0, .tv_usec = 100000}; /* to notice the end of the run */
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) != 0) {
        rc = errno;
        goto out_close;
    }
    const uint64_t t0 = sdd_now_ns();
    const uint64_t end = t0 + (uint64_t)(c->seconds * 1e9);
    uint64_t now = t0;
    size_t got = 0;
    while (now < end) {
        ssize_t n = recv(fd, buf + got, len - got, 0);
        now = sdd_now_ns();
        if (n == 0) {
            rc = EPIPE; /* the sender went away early */
            break;
        }
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
                continue;
            }
            rc = errno;
            break;
        }
        got += (size_t)n;
        if (got < len) {
            continue;
        }
        got = 0;
        uint64_t stamp, frame = 0;
        memcpy(&stamp, buf, sizeof(stamp));
        sdd_hist_record(&r->age, now > stamp ? now - stamp : 0);
        if (!cam_frame_check(&pat, buf + STAMP_BYTES, &frame)) {
            r->bad++;
        }
        if (r->delivered > 0 && frame != r->last_frame + 1) {
            r->out_of_order++; /* a stream never skips or reorders: any gap is an error */
        }
        r->first_frame = r->delivered == 0 ? frame : r->first_frame;
        r->last_frame = frame;
        r->delivered++;
    }
    r->elapsed_ns = now - t0;
out_close:
    cam_pattern_fini(&pat);
    free(buf);
    return rc;
}

/* ---- main ------------------------------------------------------------------------------------ */

static bool report(const struct cfg *c, const struct sender_report *s, const struct recv_result *r,
                   int rerr)
{
    struct sdd_hist_summary age;
    sdd_hist_summarize(&r->age, &age);
    double secs = (double)r->elapsed_ns / 1e9;
    double fps = secs > 0 ? (double)r->delivered / secs : 0;
    double frame_bytes = (double)(c->width * c->height);
    double gbps = fps * frame_bytes * 8 / 1e9;
    double cam_secs = (double)s->elapsed_ns / 1e9;
    double cam_fps = cam_secs > 0 ? (double)s->published / cam_secs : 0;
    double fill = s->published > 0 ? us(s->fill_ns_sum) / (double)s->published : 0;
    uint64_t since_first = r->delivered > 0 ? r->last_frame - r->first_frame + 1 : 0;
    bool complete = r->delivered == since_first && r->first_frame <= 1;
    bool age_ok = c->check_age_us < 0 || (age.count > 0 && us(age.p99) <= c->check_age_us);
    bool ok =
        rerr == 0 && r->delivered > 0 && r->bad == 0 && r->out_of_order == 0 && complete && age_ok;
    FILE *f = c->json ? stderr : stdout;
    fprintf(f, "plain TCP frames: %zux%zu 8-bit (%.0f KiB) over 127.0.0.1, ", c->width, c->height,
            frame_bytes / 1024);
    if (c->fps > 0) {
        fprintf(f, "sender at %.0f fps\n", c->fps);
    } else {
        fprintf(f, "sender as fast as the socket takes them\n");
    }
    fprintf(f,
            "  sender    %" PRIu64 " frames sent in %.2f s (%.0f fps), %" PRIu64
            " dropped at the sender; a frame took %.1f us to make\n",
            s->published, cam_secs, cam_fps, s->dropped, fill);
    fprintf(f,
            "  receiver  %" PRIu64 " frames in %.2f s: %.0f fps, %.2f Gbit/s; %" PRIu64
            " bad, %" PRIu64 " out of order\n",
            r->delivered, secs, fps, gbps, r->bad, r->out_of_order);
    fprintf(f, "  frame age p50 %.1f us, p99 %.1f us, max %.1f us (send stamp -> whole here)\n",
            us(age.p50), us(age.p99), us(age.max));
    fprintf(f, "  result    %s\n", ok ? "ok" : "FAILED");
    if (c->json) {
        printf("{\"tool\":\"camera-sidechannel\",\"provider\":\"plain-tcp\",\"width\":%zu,"
               "\"height\":%zu,\"frame_bytes\":%zu,\"fps_target\":%.0f,\"seconds\":%.3f,"
               "\"frames_published\":%" PRIu64 ",\"camera_fps\":%.1f,\"camera_dropped\":%" PRIu64
               ",\"fill_us_mean\":%.2f,\"fill_us_max\":%.2f,\"delivered\":%" PRIu64
               ",\"delivered_fps\":%.1f,\"gbps\":%.3f,\"skipped\":0,\"torn_retries\":0,"
               "\"bad\":%" PRIu64 ",\"out_of_order\":%" PRIu64 ",\"first_frame\":%" PRIu64
               ",\"last_frame\":%" PRIu64 ",\"since_first\":%" PRIu64 ",\"complete\":%s,"
               "\"age_p50_us\":%.2f,\"age_p99_us\":%.2f,\"age_max_us\":%.2f,\"age_mean_us\":%.2f,"
               "\"error\":\"%s\",\"ok\":%s}\n",
               c->width, c->height, c->width * c->height, c->fps, secs, s->published, cam_fps,
               s->dropped, fill, us(s->fill_ns_max), r->delivered, fps, gbps, r->bad,
               r->out_of_order, r->first_frame, r->last_frame, since_first,
               complete ? "true" : "false", us(age.p50), us(age.p99), us(age.max), age.mean / 1e3,
               rerr == 0 ? "" : strerror(rerr), ok ? "true" : "false");
    }
    fflush(NULL);
    return ok;
}

int main(int argc, char **argv)
{
    struct cfg c;
    int rc = parse_args(argc, argv, &c);
    if (rc >= 0) {
        return rc;
    }
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t salen = sizeof(sa);
    struct timeval accept_tv = {.tv_sec = 10, .tv_usec = 0};
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(lfd, 1) != 0 ||
        getsockname(lfd, (struct sockaddr *)&sa, &salen) != 0 ||
        setsockopt(lfd, SOL_SOCKET, SO_RCVTIMEO, &accept_tv, sizeof(accept_tv)) != 0) {
        perror("bench_tcp_frames: listen");
        return 1;
    }
    int rep_pipe[2];
    if (pipe(rep_pipe) != 0) {
        perror("pipe");
        return 1;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        return 1;
    }
    if (pid == 0) {
        close(lfd);
        close(rep_pipe[0]);
        struct sigaction act;
        memset(&act, 0, sizeof(act));
        act.sa_handler = on_stop_signal; /* no SA_RESTART: a blocked write() returns */
        sigemptyset(&act.sa_mask);
        sigaction(SIGTERM, &act, NULL);
        signal(SIGPIPE, SIG_IGN); /* the receiver's shutdown shows as EPIPE instead */
        (void)prctl(PR_SET_PDEATHSIG, SIGTERM, 0UL, 0UL, 0UL);
        struct sender_report rep;
        run_sender(&c, ntohs(sa.sin_port), &rep);
        _exit(write(rep_pipe[1], &rep, sizeof(rep)) == (ssize_t)sizeof(rep) ? 0 : 1);
    }
    close(rep_pipe[1]);
    static struct recv_result res; /* holds a 15 KiB histogram */
    int conn = -1;
    int rerr = run_receiver(&c, lfd, &res, &conn);
    close(lfd);
    /* Stop the sender; the shutdown also frees a write() that blocked before the signal came. */
    kill(pid, SIGTERM);
    if (conn >= 0) {
        shutdown(conn, SHUT_RDWR);
    }
    struct sender_report srep;
    rc = 1;
    if (read(rep_pipe[0], &srep, sizeof(srep)) != (ssize_t)sizeof(srep)) {
        fprintf(stderr, "bench_tcp_frames: no report from the sender\n");
    } else {
        if (srep.err != 0 && rerr == 0) {
            rerr = srep.err;
        }
        rc = report(&c, &srep, &res, rerr) ? 0 : 1;
    }
    int status = 0;
    waitpid(pid, &status, 0);
    close(rep_pipe[0]);
    if (conn >= 0) {
        close(conn);
    }
    return rc;
}
