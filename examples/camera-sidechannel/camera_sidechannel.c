/* camera_sidechannel: an emulated camera publishes frames through a self-synchronizing buffer
 * (KSB) and a "control system" clones it, as a side channel that must never hold the camera
 * up: the camera writes each frame in place and never waits for readers; the clone fetches the
 * newest frame when it can, skips what it missed and never delivers a torn frame. The control
 * side verifies every delivered frame and reports delivered fps, skipped and torn-and-retried
 * frames and the frame age (camera commit -> usable at the clone).
 *
 *   camera_sidechannel [--provider P] [--fps N] [--seconds S] [--width W --height H] [--json]
 *                      [--role both|camera|control] [--host H --port P]
 *                      [--cpu-camera C --cpu-control C] [--check-age-us X]
 *                      [--camera-fifo N] [--cells N] [--every] [--in-place] [--spin-us U]
 * [--poll-us U]
 *
 * Role both (default) forks: the child is the camera, the parent the control system. Roles
 * camera and control run one side each, e.g. in two terminals (the camera prints its port).
 * See README.md for the output. Uses the public API only. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <sddaq/sddaq.h>
#include <sddaq/rmem.h>

#include "camera_frame.h"
#include "camera_util.h"

struct cfg {
    const char *provider;
    double fps; /* 0 = as fast as possible */
    double seconds;
    size_t width, height;
    bool json;
    const char *role;
    const char *host;
    uint16_t port;
    int cpu_camera, cpu_control;
    uint64_t camera_fifo; /* frames the camera may fall behind and still make (cam_pacer) */
    size_t cells;         /* camera: cells of the serving ring (>= 3) */
    double spin_us;       /* control: busy-poll this long before backing off (< 0: default) */
    double poll_us;       /* control: longest pause between header polls (< 0: default) */
    bool every;           /* control: every frame in order while held (SDD_KSB_EVERY) */
    bool in_place;        /* control: map the camera's memory and use frames in place */
    double check_age_us;  /* < 0: no check */
};

/* What the camera tells the control system when it stops (through a pipe in role both). */
struct camera_report {
    int32_t err;          /* sdd_err of the camera's setup, 0 = ran */
    uint64_t published;   /* frames committed, numbered 1..published */
    uint64_t elapsed_ns;  /* first frame to stop */
    uint64_t dropped;     /* frames never made: the camera fell more than its fifo behind */
    uint64_t fill_ns_sum; /* time spent writing frames (reserve + fill + commit) */
    uint64_t fill_ns_max;
};

struct control_result {
    bool ran;
    uint64_t elapsed_ns;
    uint64_t delivered, bad, out_of_order;
    uint64_t first_frame, last_frame; /* sequence numbers of the first and last delivered */
    struct sdd_ksb_stats st;
};

static void usage(FILE *f)
{
    fprintf(f, "usage: camera_sidechannel [--provider P] [--fps N] [--seconds S]\n"
               "         [--width W --height H] [--json] [--role both|camera|control]\n"
               "         [--host H --port P] [--cpu-camera C --cpu-control C] [--check-age-us X]\n"
               "         [--camera-fifo N] [--cells N] [--every] [--in-place] [--spin-us U] "
               "[--poll-us U]\n"
               "  --provider   fabric provider: shm, tcp, ... (default shm)\n"
               "  --fps        camera frame rate (default 5000; 0 = as fast as possible)\n"
               "  --seconds    run time (default 3; role camera: 0 = until interrupted)\n"
               "  --width/--height  frame geometry in 8-bit pixels (default 512 x 512)\n"
               "  --json       also print one JSON line (the summary then goes to stderr)\n"
               "  --role       both (default: fork, child = camera), camera, or control\n"
               "  --host/--port  camera: address to serve on; control: camera to clone\n"
               "                 (default 127.0.0.1, port 0 = any for the camera)\n"
               "  --cpu-camera/--cpu-control  pin that side (and its library threads) to a CPU\n"
               "  --check-age-us  fail unless the p99 frame age is at most this\n"
               "  --camera-fifo   frames the camera may fall behind its deadlines and still\n"
               "                  make at once (default 8; beyond that they are dropped)\n"
               "  --in-place      control: same host only: map the camera's memory and check each\n"
               "                  frame where it lies, no copy (frames overwritten meanwhile\n"
               "                  are discarded and counted as skipped)\n"
               "  --every         control: take every frame in order while the ring holds it\n"
               "                  (with --cells > 3 it rides out stalls); default: the newest\n"
               "  --cells N       camera: cells in the serving ring (default 3; more give slow\n"
               "                  links longer to fetch a frame before the camera returns to it)\n"
               "  --spin-us/--poll-us  control: busy-poll the header this long after each frame\n"
               "                  (default 50), then poll at most this far apart (default 20)\n"
               "Exit status 0 when every delivered frame was whole and right (and the age check,\n"
               "if asked, passed); 1 otherwise; 2 on bad usage.\n");
}

static int parse_args(int argc, char **argv, struct cfg *c)
{
    *c = (struct cfg){.provider = "shm",
                      .fps = 5000,
                      .seconds = 3,
                      .width = 512,
                      .height = 512,
                      .role = "both",
                      .host = "127.0.0.1",
                      .cpu_camera = -1,
                      .cpu_control = -1,
                      .camera_fifo = 8,
                      .cells = 3,
                      .spin_us = -1,
                      .poll_us = -1,
                      .check_age_us = -1};
    static const struct option longopts[] = {
        {"provider", required_argument, NULL, 'P'},
        {"fps", required_argument, NULL, 'f'},
        {"seconds", required_argument, NULL, 's'},
        {"width", required_argument, NULL, 'W'},
        {"height", required_argument, NULL, 'H'},
        {"json", no_argument, NULL, 'j'},
        {"role", required_argument, NULL, 'r'},
        {"host", required_argument, NULL, 'h'},
        {"port", required_argument, NULL, 'p'},
        {"cpu-camera", required_argument, NULL, 'c'},
        {"cpu-control", required_argument, NULL, 'C'},
        {"check-age-us", required_argument, NULL, 'a'},
        {"camera-fifo", required_argument, NULL, 'F'},
        {"cells", required_argument, NULL, 'n'},
        {"spin-us", required_argument, NULL, 'w'},
        {"poll-us", required_argument, NULL, 'q'},
        {"every", no_argument, NULL, 'e'},
        {"in-place", no_argument, NULL, 'i'},
        {"help", no_argument, NULL, 'u'},
        {NULL, 0, NULL, 0},
    };
    int opt, idx = 0;
    double v;
    while ((opt = getopt_long(argc, argv, "", longopts, &idx)) != -1) {
        bool ok = true;
        switch (opt) {
        case 'P':
            c->provider = optarg;
            break;
        case 'f':
            ok = parse_double(optarg, 0, 1e7, &c->fps);
            break;
        case 's':
            ok = parse_double(optarg, 0, 86400, &c->seconds);
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
        case 'r':
            c->role = optarg;
            ok = strcmp(optarg, "both") == 0 || strcmp(optarg, "camera") == 0 ||
                 strcmp(optarg, "control") == 0;
            break;
        case 'h':
            c->host = optarg;
            break;
        case 'p':
            ok = parse_double(optarg, 0, 65535, &v) && v == (double)(uint16_t)v;
            c->port = ok ? (uint16_t)v : 0;
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
        case 'n':
            ok = parse_double(optarg, 3, 1024, &v) && v == (double)(size_t)v;
            c->cells = ok ? (size_t)v : 3;
            break;
        case 'w':
            ok = parse_double(optarg, 0, 4e9, &c->spin_us);
            break;
        case 'q':
            ok = parse_double(optarg, 1, 4e9, &c->poll_us);
            break;
        case 'e':
            c->every = true;
            break;
        case 'i':
            c->in_place = true;
            break;
        case 'u':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
        if (!ok) {
            fprintf(stderr, "camera_sidechannel: bad value '%s' for --%s\n", optarg,
                    longopts[idx].name);
            return 2;
        }
    }
    if (optind != argc) {
        fprintf(stderr, "camera_sidechannel: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    size_t bytes = c->width * c->height;
    if (bytes % 8 != 0 || bytes < 64) {
        fprintf(stderr, "camera_sidechannel: width*height must be a multiple of 8, >= 64\n");
        return 2;
    }
    if (strcmp(c->role, "camera") != 0 && c->seconds <= 0) {
        fprintf(stderr, "camera_sidechannel: --seconds must be > 0 (0 is for role camera)\n");
        return 2;
    }
    if (strcmp(c->role, "control") == 0 && c->port == 0) {
        fprintf(stderr, "camera_sidechannel: role control needs --port (the camera's)\n");
        return 2;
    }
    return -1; /* go on */
}

static struct sdd_rmem_opts rmem_opts(const struct cfg *c)
{
    struct sdd_rmem_opts o;
    sdd_rmem_opts_default(&o);
    o.provider = c->provider;
    o.host = c->host;
    o.port = c->port;
    return o;
}

/* ---- camera --------------------------------------------------------------------------------- */

/* Serve frames until stopped (signal), or for cfg->seconds when > 0. The port goes to port_fd
 * (role both) or stdout. Paced by cam_pacer (absolute deadlines, sleeping in between). */
static void run_camera(const struct cfg *c, int port_fd, struct camera_report *rep)
{
    memset(rep, 0, sizeof(*rep));
    if (c->cpu_camera >= 0) {
        (void)sdd_cpu_pin_self(c->cpu_camera); /* before serve: the server's thread inherits */
    }
    tight_timers();
    struct cam_pattern pat;
    if (!cam_pattern_init(&pat, c->width, c->height)) {
        rep->err = SDD_ENOMEM;
        return;
    }
    struct sdd_rmem_opts o = rmem_opts(c);
    sdd_ksb *k = NULL;
    sdd_err err = sdd_ksb_serve_cells(&o, c->width * c->height, c->cells, &k);
    if (err != SDD_OK) {
        fprintf(stderr, "camera: cannot serve over %s: %s\n", c->provider, sdd_strerror(err));
        rep->err = err;
        goto out_pattern;
    }
    uint16_t port = sdd_rmem_server_port(sdd_ksb_server(k));
    if (port_fd >= 0) {
        if (write(port_fd, &port, sizeof(port)) != (ssize_t)sizeof(port)) {
            rep->err = SDD_EOS;
            goto out_close;
        }
    } else {
        printf("camera: serving %zux%zu frames (%zu bytes) over %s on %s port %u, ", c->width,
               c->height, c->width * c->height, c->provider, c->host, port);
        if (c->fps > 0) {
            printf("%.0f fps\n", c->fps);
        } else {
            printf("as fast as it can\n");
        }
        fflush(stdout);
    }

    const uint64_t t0 = sdd_now_ns();
    const uint64_t stop_at = c->seconds > 0 ? t0 + (uint64_t)(c->seconds * 1e9) : UINT64_MAX;
    struct cam_pacer pace;
    cam_pacer_init(&pace, t0, c->fps, c->camera_fifo);
    uint64_t frame = 0;
    for (;;) {
        if (atomic_load_explicit(&stop_requested, memory_order_relaxed)) {
            break;
        }
        uint64_t now = sdd_now_ns();
        if (now >= stop_at) {
            break;
        }
        uint64_t wake = cam_pacer_next(&pace, now);
        if (wake != 0) {
            cam_sleep_until(wake);
            continue; /* look at the stop flag again (a signal ends the sleep) */
        }
        uint64_t t_fill = sdd_now_ns();
        void *cell = sdd_ksb_reserve(k);
        cam_frame_fill(&pat, cell, ++frame); /* frame n is the buffer's sequence n */
        sdd_ksb_commit(k);
        uint64_t took = sdd_now_ns() - t_fill;
        rep->fill_ns_sum += took;
        rep->fill_ns_max = took > rep->fill_ns_max ? took : rep->fill_ns_max;
    }
    rep->published = frame;
    rep->dropped = pace.dropped;
    rep->elapsed_ns = sdd_now_ns() - t0;
out_close:
    sdd_ksb_close(k);
out_pattern:
    cam_pattern_fini(&pat);
}

/* ---- control system ------------------------------------------------------------------------- */

static sdd_err run_control(const struct cfg *c, uint16_t port, struct control_result *res)
{
    memset(res, 0, sizeof(*res));
    if (c->cpu_control >= 0) {
        (void)sdd_cpu_pin_self(c->cpu_control);
    }
    tight_timers();
    struct cam_pattern pat;
    if (!cam_pattern_init(&pat, c->width, c->height)) {
        return SDD_ENOMEM;
    }
    struct sdd_rmem_opts o = rmem_opts(c);
    o.port = 0;
    o.map_local = c->in_place;
    if (c->spin_us >= 0) {
        o.spin_us = (uint32_t)c->spin_us;
    }
    sdd_ksb *k = NULL;
    sdd_err err = sdd_ksb_clone(&o, c->host, port, &k);
    if (err != SDD_OK) {
        fprintf(stderr, "control: cannot clone %s:%u over %s: %s\n", c->host, port, c->provider,
                sdd_strerror(err));
        goto out_pattern;
    }
    if (sdd_ksb_element_size(k) != c->width * c->height) {
        fprintf(stderr,
                "control: the camera serves %zu-byte frames, expected %zu (--width, "
                "--height)\n",
                sdd_ksb_element_size(k), c->width * c->height);
        err = SDD_EINVAL;
        goto out_close;
    }
    sdd_ksb_set_mode(k, c->every ? SDD_KSB_EVERY : SDD_KSB_NEWEST);
    if (c->in_place && (err = sdd_ksb_set_in_place(k, true)) != SDD_OK) {
        fprintf(stderr, "control: cannot use frames in place: %s\n", sdd_strerror(err));
        goto out_close;
    }
    if (c->poll_us > 0) {
        sdd_ksb_set_max_poll_us(k, (uint32_t)c->poll_us);
    }
    res->ran = true;
    const uint64_t t0 = sdd_now_ns();
    const uint64_t end = t0 + (uint64_t)(c->seconds * 1e9);
    uint64_t now = t0;
    while (now < end && !atomic_load_explicit(&stop_requested, memory_order_relaxed)) {
        uint64_t left_ms = (end - now) / SDD_NS_PER_MS + 1;
        struct sdd_ksb_elem e;
        err = sdd_ksb_wait_next(k, (int)(left_ms < 100 ? left_ms : 100), &e);
        now = sdd_now_ns();
        if (err == SDD_ETIMEDOUT) {
            continue;
        }
        if (err != SDD_OK) {
            fprintf(stderr, "control: %s\n", sdd_strerror(err));
            break;
        }
        /* The control system's work: prove the frame whole and the one the buffer said. In
         * place it reads the camera's memory directly, then asks whether that was safe. */
        uint64_t frame = 0;
        bool ok = cam_frame_check(&pat, e.data, &frame) && frame == e.seq;
        bool valid = sdd_ksb_valid(k, &e) == SDD_OK;
        if (valid && !ok) {
            res->bad++;
        }
        if (e.seq <= res->last_frame) {
            res->out_of_order++;
        }
        res->first_frame = res->first_frame == 0 ? e.seq : res->first_frame;
        res->last_frame = e.seq;
        res->delivered += valid;
    }
    res->elapsed_ns = now - t0;
    if (err == SDD_ETIMEDOUT) {
        err = SDD_OK;
    }
    sdd_ksb_stats(k, &res->st);
    /* A frame overwritten while used in place never reached the control system whole. */
    res->st.delivered -= res->st.invalidated;
    res->st.skipped += res->st.invalidated;
out_close:
    sdd_ksb_close(k);
out_pattern:
    cam_pattern_fini(&pat);
    return err;
}

/* ---- report --------------------------------------------------------------------------------- */

/* Print the summary (stdout, or stderr when JSON goes to stdout) and the JSON line. Returns
 * whether the run passed. cam is NULL in role control (the camera is elsewhere). */
static bool report(const struct cfg *c, const struct camera_report *cam,
                   const struct control_result *r, sdd_err control_err)
{
    if (!r->ran) {
        return false; /* the reason was printed where it happened */
    }
    struct sdd_hist_summary age;
    sdd_hist_summarize(&r->st.age, &age);
    uint64_t since_first = r->delivered > 0 ? r->last_frame - r->first_frame + 1 : 0;
    bool complete = r->st.delivered == r->delivered && r->delivered + r->st.skipped == since_first;
    double secs = (double)r->elapsed_ns / 1e9;
    double delivered_fps = secs > 0 ? (double)r->delivered / secs : 0;
    double frame_bytes = (double)(c->width * c->height);
    double gbps = delivered_fps * frame_bytes * 8 / 1e9;
    double cam_secs = cam != NULL ? (double)cam->elapsed_ns / 1e9 : 0;
    double cam_fps = cam != NULL && cam_secs > 0 ? (double)cam->published / cam_secs : 0;
    double fill_us =
        cam != NULL && cam->published > 0 ? us(cam->fill_ns_sum) / (double)cam->published : 0;
    bool age_ok = c->check_age_us < 0 || (age.count > 0 && us(age.p99) <= c->check_age_us);
    bool ok = control_err == SDD_OK && r->ran && r->delivered > 0 && r->bad == 0 &&
              r->out_of_order == 0 && complete && age_ok;

    FILE *f = c->json ? stderr : stdout;
    fprintf(f, "camera side channel over %s: %zux%zu 8-bit frames (%.0f KiB), ", c->provider,
            c->width, c->height, frame_bytes / 1024);
    if (cam == NULL) {
        fprintf(f, "camera at %s port %u\n", c->host, c->port);
    } else if (c->fps > 0) {
        fprintf(f, "camera at %.0f fps\n", c->fps);
    } else {
        fprintf(f, "camera as fast as it can\n");
    }
    if (cam != NULL) {
        fprintf(f,
                "  camera           %" PRIu64 " frames published in %.2f s (%.0f fps), %" PRIu64
                " dropped at the camera; writing a frame took %.1f us mean, %.1f us max\n",
                cam->published, cam_secs, cam_fps, cam->dropped, fill_us, us(cam->fill_ns_max));
    }
    fprintf(f, "  control system   %" PRIu64 " frames delivered in %.2f s: %.0f fps, %.2f Gbit/s\n",
            r->delivered, secs, delivered_fps, gbps);
    fprintf(f,
            "  frames %" PRIu64 "..%" PRIu64 " (%" PRIu64 "): %" PRIu64 " delivered + %" PRIu64
            " skipped%s; %" PRIu64 " torn fetches retried\n",
            r->first_frame, r->last_frame, since_first, r->delivered, r->st.skipped,
            complete ? " = all" : " != all (accounting broken)", r->st.torn_retries);
    fprintf(f,
            "  bad frames       %" PRIu64 " (checksum or number wrong), %" PRIu64 " out of order\n",
            r->bad, r->out_of_order);
    fprintf(f,
            "  frame age        p50 %.1f us, p99 %.1f us, max %.1f us (camera commit -> usable "
            "at the clone)%s\n",
            us(age.p50), us(age.p99), us(age.max),
            c->check_age_us < 0 ? "" : (age_ok ? ", p99 within limit" : ", p99 OVER LIMIT"));
    fprintf(f, "  result           %s\n", ok ? "ok" : "FAILED");

    if (c->json) {
        char published[32] = "null", cam_fps_s[32] = "null", dropped[32] = "null";
        char fill_mean[32] = "null", fill_max[32] = "null";
        if (cam != NULL) {
            snprintf(published, sizeof(published), "%" PRIu64, cam->published);
            snprintf(cam_fps_s, sizeof(cam_fps_s), "%.1f", cam_fps);
            snprintf(dropped, sizeof(dropped), "%" PRIu64, cam->dropped);
            snprintf(fill_mean, sizeof(fill_mean), "%.2f", fill_us);
            snprintf(fill_max, sizeof(fill_max), "%.2f", us(cam->fill_ns_max));
        }
        printf("{\"tool\":\"camera-sidechannel\",\"provider\":\"%s\",\"width\":%zu,\"height\":%zu,"
               "\"frame_bytes\":%zu,\"fps_target\":%.0f,\"seconds\":%.3f,"
               "\"frames_published\":%s,\"camera_fps\":%s,\"camera_dropped\":%s,"
               "\"fill_us_mean\":%s,\"fill_us_max\":%s,"
               "\"delivered\":%" PRIu64 ",\"delivered_fps\":%.1f,\"gbps\":%.3f,"
               "\"skipped\":%" PRIu64 ",\"torn_retries\":%" PRIu64 ",\"bad\":%" PRIu64
               ",\"out_of_order\":%" PRIu64 ",\"first_frame\":%" PRIu64 ",\"last_frame\":%" PRIu64
               ",\"since_first\":%" PRIu64 ",\"complete\":%s,\"header_polls\":%" PRIu64
               ",\"age_p50_us\":%.2f,\"age_p99_us\":%.2f,\"age_max_us\":%.2f,\"age_mean_us\":%.2f,"
               "\"error\":\"%s\",\"ok\":%s}\n",
               c->provider, c->width, c->height, c->width * c->height, c->fps, secs, published,
               cam_fps_s, dropped, fill_mean, fill_max, r->delivered, delivered_fps, gbps,
               r->st.skipped, r->st.torn_retries, r->bad, r->out_of_order, r->first_frame,
               r->last_frame, since_first, complete ? "true" : "false", r->st.header_polls,
               us(age.p50), us(age.p99), us(age.max), age.mean / 1e3,
               control_err == SDD_OK ? "" : sdd_strerror(control_err), ok ? "true" : "false");
    }
    fflush(NULL);
    return ok;
}

/* ---- roles ---------------------------------------------------------------------------------- */

static void catch_stop_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_stop_signal; /* no SA_RESTART: a sleeping camera wakes up */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

static int role_camera(const struct cfg *c)
{
    catch_stop_signals();
    struct camera_report rep;
    run_camera(c, -1, &rep);
    if (rep.err != 0) {
        return 1;
    }
    double secs = (double)rep.elapsed_ns / 1e9;
    double fps = secs > 0 ? (double)rep.published / secs : 0;
    double fill = rep.published > 0 ? us(rep.fill_ns_sum) / (double)rep.published : 0;
    printf("camera: %" PRIu64 " frames published in %.2f s (%.0f fps), %" PRIu64
           " dropped at the camera; writing a frame took %.1f us mean, %.1f us max\n",
           rep.published, secs, fps, rep.dropped, fill, us(rep.fill_ns_max));
    if (c->json) {
        printf("{\"tool\":\"camera-sidechannel\",\"role\":\"camera\",\"provider\":\"%s\","
               "\"frame_bytes\":%zu,\"fps_target\":%.0f,\"frames_published\":%" PRIu64
               ",\"camera_fps\":%.1f,\"camera_dropped\":%" PRIu64 ",\"fill_us_mean\":%.2f,"
               "\"fill_us_max\":%.2f}\n",
               c->provider, c->width * c->height, c->fps, rep.published, fps, rep.dropped, fill,
               us(rep.fill_ns_max));
    }
    return 0;
}

static int role_control(const struct cfg *c)
{
    catch_stop_signals();
    struct control_result res;
    sdd_err err = run_control(c, c->port, &res);
    return report(c, NULL, &res, err) ? 0 : 1;
}

static int role_both(const struct cfg *c)
{
    int port_pipe[2], rep_pipe[2];
    if (pipe(port_pipe) != 0 || pipe(rep_pipe) != 0) {
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
        close(port_pipe[0]);
        close(rep_pipe[0]);
        catch_stop_signals();
        (void)prctl(PR_SET_PDEATHSIG, SIGTERM, 0UL, 0UL, 0UL); /* never outlive the parent */
        struct cfg cc = *c;
        cc.seconds = c->seconds + 30; /* the parent stops us; this only bounds a lost signal */
        struct camera_report rep;
        run_camera(&cc, port_pipe[1], &rep);
        int rc = write(rep_pipe[1], &rep, sizeof(rep)) == (ssize_t)sizeof(rep) ? 0 : 1;
        _exit(rc);
    }
    close(port_pipe[1]);
    close(rep_pipe[1]);
    catch_stop_signals(); /* Ctrl-C reaches both: the run ends early, with its summary */
    int rc = 1;
    uint16_t port = 0;
    struct camera_report cam;
    memset(&cam, 0, sizeof(cam));
    if (read(port_pipe[0], &port, sizeof(port)) != (ssize_t)sizeof(port)) {
        fprintf(stderr, "camera_sidechannel: the camera did not start\n");
        kill(pid, SIGTERM);
    } else {
        struct control_result res;
        sdd_err err = run_control(c, port, &res);
        kill(pid, SIGTERM);
        if (read(rep_pipe[0], &cam, sizeof(cam)) != (ssize_t)sizeof(cam) || cam.err != 0) {
            fprintf(stderr, "camera_sidechannel: no report from the camera\n");
        } else {
            rc = report(c, &cam, &res, err) ? 0 : 1;
        }
    }
    int status = 0;
    waitpid(pid, &status, 0);
    close(port_pipe[0]);
    close(rep_pipe[0]);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "camera_sidechannel: the camera process failed\n");
        rc = 1;
    }
    return rc;
}

int main(int argc, char **argv)
{
    struct cfg c;
    int rc = parse_args(argc, argv, &c);
    if (rc >= 0) {
        return rc;
    }
    if (strcmp(c.role, "camera") == 0) {
        return role_camera(&c);
    }
    if (strcmp(c.role, "control") == 0) {
        return role_control(&c);
    }
    return role_both(&c);
}
