/* Emulated camera frames, shared by camera_sidechannel and bench/bench_tcp_frames so that both
 * paths move the same bytes. A frame is width*height 8-bit pixels; its first 16 bytes are a
 * header {u64 frame number, u64 checksum of the rest}, the rest is the picture.
 *
 * The picture of frame f is a fixed test pattern (a diagonal gradient) whose 64-bit words are
 * each raised by f * 0x0101010101010101, so every word changes from frame to frame and a frame
 * stitched from two frames fails its checksum. The checksum is a 4-lane Fletcher-style pair of
 * sums (a = sum of words, b = sum of running sums) mixed into one word. Both sums are linear
 * in the words, so the camera gets a frame's checksum from two sums of the pattern computed
 * once, and producing a frame costs one pass of adds over the pixels (memcpy speed); the
 * receiver, which must prove the frame whole, sums every word.
 *
 * The pacer gives a camera its frame deadlines (frame n at t0 + n / fps, absolute, so the rate
 * does not drift). Like a camera with a small on-board frame buffer, a camera the OS held back
 * makes the frames that fell due meanwhile at once, up to `fifo` of them; frames beyond that
 * are dropped at the camera and counted. Sleeping, not spinning, between frames means wake-up
 * jitter, which on a virtual machine reaches hundreds of microseconds now and then; the buffer
 * keeps that jitter from turning into lost frames.
 *
 * Header-only, public API only; the frame size must be a multiple of 8 and at least 64. */
#ifndef CAMERA_FRAME_H
#define CAMERA_FRAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CAM_HEADER_BYTES 16
#define CAM_FRAME_STEP   0x0101010101010101ull /* per-frame rise of every pixel word */

struct cam_pattern {
    uint64_t *base;  /* payload words of frame 0 */
    size_t words;    /* payload words: (frame_bytes - CAM_HEADER_BYTES) / 8 */
    uint64_t a0, b0; /* sums of the pattern */
    uint64_t a1, b1; /* sums of a payload of ones: the per-unit change of every word */
};

/* Linear sums of n words in 4 independent lanes (so the loop runs at several words a cycle). */
static inline void cam_sums(const uint64_t *w, size_t n, uint64_t *a_out, uint64_t *b_out)
{
    uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0, b0 = 0, b1 = 0, b2 = 0, b3 = 0;
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        a0 += w[i];
        a1 += w[i + 1];
        a2 += w[i + 2];
        a3 += w[i + 3];
        b0 += a0;
        b1 += a1;
        b2 += a2;
        b3 += a3;
    }
    for (; i < n; i++) {
        a0 += w[i];
        b0 += a0;
    }
    *a_out = a0 + a1 + a2 + a3;
    *b_out = b0 + b1 + b2 + b3;
}

static inline uint64_t cam_mix(uint64_t a, uint64_t b)
{
    return a ^ (b * 0x9e3779b97f4a7c15ull);
}

/* Build the test pattern for frames of frame_bytes. Returns false on a bad size or no memory. */
static inline bool cam_pattern_init(struct cam_pattern *p, size_t width, size_t height)
{
    size_t frame_bytes = width * height;
    memset(p, 0, sizeof(*p));
    if (width == 0 || height == 0 || frame_bytes / width != height || frame_bytes % 8 != 0 ||
        frame_bytes < 64) {
        return false;
    }
    p->words = (frame_bytes - CAM_HEADER_BYTES) / 8;
    p->base = malloc(p->words * 8);
    uint64_t *ones = malloc(p->words * 8);
    if (p->base == NULL || ones == NULL) {
        free(p->base);
        free(ones);
        p->base = NULL;
        return false;
    }
    uint8_t *px = (uint8_t *)p->base;
    for (size_t i = 0; i < p->words * 8; i++) {
        size_t pos = i + CAM_HEADER_BYTES;
        px[i] = (uint8_t)(pos % width + 2 * (pos / width));
    }
    for (size_t i = 0; i < p->words; i++) {
        ones[i] = 1;
    }
    cam_sums(p->base, p->words, &p->a0, &p->b0);
    cam_sums(ones, p->words, &p->a1, &p->b1);
    free(ones);
    return true;
}

static inline void cam_pattern_fini(struct cam_pattern *p)
{
    free(p->base);
    p->base = NULL;
}

/* The checksum frame number `frame` must carry, from the pattern's sums (no pass over pixels). */
static inline uint64_t cam_frame_checksum(const struct cam_pattern *p, uint64_t frame)
{
    uint64_t step = frame * CAM_FRAME_STEP;
    return cam_mix(p->a0 + step * p->a1, p->b0 + step * p->b1);
}

/* Write frame number `frame` into dst (frame_bytes, 8-byte aligned). */
static inline void cam_frame_fill(const struct cam_pattern *p, void *dst, uint64_t frame)
{
    uint64_t step = frame * CAM_FRAME_STEP;
    uint64_t *w = (uint64_t *)((uint8_t *)dst + CAM_HEADER_BYTES);
    for (size_t i = 0; i < p->words; i++) {
        w[i] = p->base[i] + step;
    }
    uint64_t hdr[2] = {frame, cam_frame_checksum(p, frame)};
    memcpy(dst, hdr, sizeof(hdr));
}

/* Check a received frame (8-byte aligned): the checksum in its header matches its pixels, and
 * both are those of the frame number in its header, which *frame gets. */
static inline bool cam_frame_check(const struct cam_pattern *p, const void *src, uint64_t *frame)
{
    uint64_t hdr[2], a, b;
    memcpy(hdr, src, sizeof(hdr));
    cam_sums((const uint64_t *)((const uint8_t *)src + CAM_HEADER_BYTES), p->words, &a, &b);
    *frame = hdr[0];
    return hdr[1] == cam_mix(a, b) && hdr[1] == cam_frame_checksum(p, hdr[0]);
}

struct cam_pacer {
    uint64_t t0;      /* deadline of frame slot 0, ns (CLOCK_MONOTONIC) */
    double fps;       /* 0 = no pacing */
    uint64_t fifo;    /* frames the camera may be behind and still make */
    uint64_t slot;    /* frame slots used (made or dropped) */
    uint64_t dropped; /* slots dropped: the camera was more than fifo frames behind */
};

static inline void cam_pacer_init(struct cam_pacer *p, uint64_t t0, double fps, uint64_t fifo)
{
    *p = (struct cam_pacer){.t0 = t0, .fps = fps, .fifo = fifo};
}

/* 0 when a frame is due at `now` (make it now), else the deadline to sleep until. */
static inline uint64_t cam_pacer_next(struct cam_pacer *p, uint64_t now)
{
    if (p->fps <= 0) {
        return 0;
    }
    uint64_t due = p->t0 + (uint64_t)((double)p->slot * 1e9 / p->fps);
    if (now < due) {
        return due;
    }
    uint64_t behind = (uint64_t)((double)(now - due) * p->fps / 1e9); /* later slots due too */
    if (behind > p->fifo) {
        p->dropped += behind - p->fifo;
        p->slot += behind - p->fifo;
    }
    p->slot++;
    return 0;
}

/* Sleep until the absolute CLOCK_MONOTONIC time t_ns; a signal ends the sleep early. */
static inline void cam_sleep_until(uint64_t t_ns)
{
    struct timespec ts = {.tv_sec = (time_t)(t_ns / 1000000000ull),
                          .tv_nsec = (long)(t_ns % 1000000000ull)};
    (void)clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
}

#endif
