/* Self-synchronizing buffer: a 3-cell transmittable ring served by an rmem server, and clones
 * that poll only its header and fetch only new elements.
 *
 * A clone's fetch of element s is accepted only when (1) the copy's two sequence words both
 * say s, and (2) a second read, issued after the copy completed, still finds seq_begin == s in
 * the served cell. The writer marks seq_begin before it touches a payload, so (2) proves no
 * write to that cell began before the copy ended, whatever order the provider copied the bytes
 * in; (1) alone would rely on in-order copies. A failed check throws the copy away, counts a
 * torn retry and starts over from the header. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "sddaq/clock.h"
#include "sddaq/log.h"
#include "sddaq/rmem.h"

#define KSB_CELLS       3 /* served cells by default; also the clone's landing cells */
#define KSB_MAX_CBS     8
#define KSB_MAX_RETRIES 64 /* torn fetches in a row before update gives up with SDD_EAGAIN */

struct ksb_cb {
    sdd_ksb_update_fn fn;
    void *user;
};

struct sdd_ksb {
    bool serving;
    size_t element_size;
    struct sdd_rmem_opts opts;
    struct sdd_ksb_stats stats;

    /* serving */
    sdd_rmem_server *srv;
    struct sdd_trb ring;

    /* cloning: the mirror holds the served ring's header and, in its cells, the delivered
     * element and landing space for the next fetch (not at the served positions) */
    sdd_rmem_client *cl;
    struct sdd_trb view;
    uint32_t view_gen; /* region generation the view was adopted at */
    uint64_t last_seq; /* newest delivered, 0 before the first */
    unsigned cur_slot; /* mirror cell holding the delivered element */
    struct sdd_ksb_elem cur;
    struct ksb_cb cbs[KSB_MAX_CBS];
    uint32_t max_poll_us;
    sdd_ksb_mode mode;
    bool in_place;        /* deliver pointers into the server's memory mapped here */
    pthread_mutex_t lock; /* held by each update, so freeze() can wait one out */
    atomic_bool frozen;
    atomic_bool stop;
    pthread_t thread;
    bool thread_started;
};

static sdd_ksb *ksb_new(const struct sdd_rmem_opts *opts)
{
    sdd_ksb *k = calloc(1, sizeof(*k));
    if (k == NULL) {
        return NULL;
    }
    if (opts != NULL) {
        k->opts = *opts;
    } else {
        sdd_rmem_opts_default(&k->opts);
    }
    k->max_poll_us = 20;
    pthread_mutex_init(&k->lock, NULL);
    sdd_hist_init(&k->stats.age);
    return k;
}

/* ---- serving ------------------------------------------------------------------------------ */

sdd_err sdd_ksb_serve(const struct sdd_rmem_opts *opts, size_t element_size, sdd_ksb **out)
{
    return sdd_ksb_serve_cells(opts, element_size, KSB_CELLS, out);
}

sdd_err sdd_ksb_serve_cells(const struct sdd_rmem_opts *opts, size_t element_size, size_t cells,
                            sdd_ksb **out)
{
    size_t bytes = sdd_trb_bytes(element_size, cells);
    if (element_size == 0 || cells < KSB_CELLS || bytes == 0 || out == NULL) {
        return SDD_EINVAL;
    }
    sdd_ksb *k = ksb_new(opts);
    if (k == NULL) {
        return SDD_ENOMEM;
    }
    k->serving = true;
    k->element_size = element_size;
    sdd_err err = sdd_rmem_server_open(&k->opts, NULL, bytes, &k->srv);
    if (err == SDD_OK) {
        size_t len = 0;
        void *mem = sdd_rmem_server_region(k->srv, &len);
        err = sdd_trb_init(&k->ring, mem, len, element_size, cells);
    }
    if (err != SDD_OK) {
        sdd_ksb_close(k);
        return err;
    }
    *out = k;
    return SDD_OK;
}

sdd_err sdd_ksb_push(sdd_ksb *k, const void *data, size_t len)
{
    if (k == NULL || !k->serving) {
        return SDD_EINVAL;
    }
    int64_t seq = sdd_trb_push(&k->ring, data, len, sdd_now_ns());
    if (seq < 0) {
        return (sdd_err)seq;
    }
    k->stats.pushes++;
    return SDD_OK;
}

void *sdd_ksb_reserve(sdd_ksb *k)
{
    return k != NULL && k->serving ? sdd_trb_reserve(&k->ring) : NULL;
}

void sdd_ksb_commit(sdd_ksb *k)
{
    if (k != NULL && k->serving) {
        sdd_trb_commit(&k->ring, sdd_now_ns());
        k->stats.pushes++;
    }
}

sdd_rmem_server *sdd_ksb_server(sdd_ksb *k)
{
    return k != NULL ? k->srv : NULL;
}

/* ---- cloning ------------------------------------------------------------------------------ */

/* Read the served header into the mirror and (re)build the view from it. */
static sdd_err read_header(sdd_ksb *k)
{
    sdd_err err = sdd_rmem_client_sync_range(k->cl, 0, SDD_TRB_HEADER_SIZE, 0);
    if (err != SDD_OK) {
        return err;
    }
    k->stats.header_polls++;
    uint32_t gen = sdd_rmem_client_generation(k->cl);
    if (gen == k->view_gen && sdd_trb_refresh(&k->view) == SDD_OK) {
        return SDD_OK;
    }
    /* First read, or the server moved or reshaped the region: adopt afresh. */
    err = sdd_trb_adopt(&k->view, sdd_rmem_client_memory(k->cl), sdd_rmem_client_size(k->cl));
    if (err != SDD_OK) {
        SDD_WARN("rmem", "the served memory is not a ring buffer: %s", sdd_strerror(err));
        return SDD_ECORRUPT;
    }
    k->view_gen = gen;
    k->element_size = k->view.element_size;
    return SDD_OK;
}

/* Mirror cell `slot` (0..2), where fetches land. */
static uint8_t *slot_cell(const sdd_ksb *k, unsigned slot)
{
    return k->view.mem + SDD_TRB_HEADER_SIZE + slot * k->view.stride;
}

/* Element seq in place in the server's memory mapped here: whole so far? */
static sdd_err fetch_in_place(sdd_ksb *k, uint64_t seq, uint64_t *stamp, const uint8_t **cell)
{
    const uint8_t *base = sdd_rmem_client_local(k->cl);
    if (base == NULL) {
        return SDD_ENOTSUP; /* the mapping went away with a region change */
    }
    *cell = base + sdd_trb_cell_offset(&k->view, seq);
    return sdd_trb_check_cell(&k->view, *cell, seq, stamp);
}

/* Fetch element seq into the mirror cell `slot`; SDD_OK when whole, SDD_EAGAIN when torn. */
static sdd_err fetch(sdd_ksb *k, uint64_t seq, unsigned slot, uint64_t *stamp)
{
    size_t remote = sdd_trb_cell_offset(&k->view, seq);
    size_t local = (size_t)(slot_cell(k, slot) - k->view.mem);
    size_t stride = k->view.stride;
    sdd_err err = sdd_rmem_client_sync_range(k->cl, remote, stride, local);
    if (err != SDD_OK) {
        return err;
    }
    if (sdd_trb_check_cell(&k->view, slot_cell(k, slot), seq, stamp) != SDD_OK) {
        return SDD_EAGAIN;
    }
    /* Re-read seq_begin (the cell's last word) now that the copy is complete. */
    size_t word = stride - sizeof(uint64_t);
    err = sdd_rmem_client_sync_range(k->cl, remote + word, sizeof(uint64_t), local + word);
    if (err != SDD_OK) {
        return err;
    }
    return sdd_trb_check_cell(&k->view, slot_cell(k, slot), seq, NULL);
}

static void run_callbacks(sdd_ksb *k)
{
    for (int i = 0; i < KSB_MAX_CBS; i++) {
        if (k->cbs[i].fn != NULL && !k->cbs[i].fn(k, &k->cur, k->cbs[i].user)) {
            k->cbs[i].fn = NULL;
        }
    }
}

/* The element to fetch next, reading the header only when needed: SDD_OK with *seq set,
 * SDD_EAGAIN when nothing is new. */
static sdd_err pick(sdd_ksb *k, bool header_stale, uint64_t *seq)
{
    bool every = k->mode == SDD_KSB_EVERY;
    if (every && !header_stale && k->last_seq != 0 && k->last_seq < k->view.pushes) {
        *seq = k->last_seq + 1; /* known to exist; a lapped cell shows up as torn */
        return SDD_OK;
    }
    sdd_err err = read_header(k);
    if (err != SDD_OK) {
        return err;
    }
    uint64_t newest = sdd_trb_newest_seq(&k->view);
    if (newest == 0 || newest == k->last_seq) {
        return SDD_EAGAIN;
    }
    if (newest < k->last_seq) {
        k->last_seq = 0; /* the server flushed or restarted the ring */
    }
    *seq = newest;
    if (every && k->last_seq != 0) {
        /* The oldest cell held is the next the writer takes. Lapped: what was lost is lost,
         * and reading at the tail would only be lapped again, so go on from the newest. */
        uint64_t count = k->view.count;
        uint64_t oldest_safe = newest >= count ? newest - count + 2 : 1;
        *seq = k->last_seq + 1 >= oldest_safe ? k->last_seq + 1 : newest;
    }
    return SDD_OK;
}

static sdd_err update_locked(sdd_ksb *k, struct sdd_ksb_elem *elem)
{
    if (atomic_load_explicit(&k->frozen, memory_order_relaxed)) {
        return SDD_EAGAIN;
    }
    bool header_stale = false;
    for (int attempt = 0; attempt < KSB_MAX_RETRIES; attempt++) {
        uint64_t seq = 0;
        sdd_err err = pick(k, header_stale, &seq);
        if (err != SDD_OK) {
            return err;
        }
        /* Land in a cell other than the delivered element's, which stays whole until this
         * fetch has succeeded. */
        unsigned slot = (k->cur_slot + 1) % KSB_CELLS;
        uint64_t stamp = 0;
        const uint8_t *cell = NULL;
        if (k->in_place) {
            err = fetch_in_place(k, seq, &stamp, &cell);
        } else {
            err = fetch(k, seq, slot, &stamp);
            cell = slot_cell(k, slot);
        }
        if (err == SDD_EAGAIN) {
            k->stats.torn_retries++;
            header_stale = true;
            continue;
        }
        if (err != SDD_OK) {
            return err;
        }
        uint64_t now = sdd_now_ns();
        if (k->last_seq != 0) {
            k->stats.skipped += seq - k->last_seq - 1;
        }
        k->last_seq = seq;
        k->cur_slot = slot;
        k->cur = (struct sdd_ksb_elem){
            .data = cell + SDD_TRB_PAYLOAD_OFFSET,
            .len = k->view.element_size,
            .seq = seq,
            .stamp_ns = stamp,
            .age_ns = now > stamp ? now - stamp : 0,
        };
        k->stats.delivered++;
        sdd_hist_record(&k->stats.age, k->cur.age_ns);
        if (elem != NULL) {
            *elem = k->cur;
        }
        run_callbacks(k);
        return SDD_OK;
    }
    return SDD_EAGAIN; /* the writer kept overwriting what we read */
}

/* One update; freeze() waits on the same lock, so once it returns no fetch is running. */
static sdd_err update(sdd_ksb *k, struct sdd_ksb_elem *elem)
{
    pthread_mutex_lock(&k->lock);
    sdd_err err = update_locked(k, elem);
    pthread_mutex_unlock(&k->lock);
    return err;
}

sdd_err sdd_ksb_clone(const struct sdd_rmem_opts *opts, const char *host, uint16_t port,
                      sdd_ksb **out)
{
    if (host == NULL || out == NULL) {
        return SDD_EINVAL;
    }
    sdd_ksb *k = ksb_new(opts);
    if (k == NULL) {
        return SDD_ENOMEM;
    }
    sdd_err err = sdd_rmem_client_connect(&k->opts, host, port, &k->cl);
    if (err == SDD_OK) {
        err = read_header(k);
    }
    if (err != SDD_OK) {
        sdd_ksb_close(k);
        return err;
    }
    *out = k;
    return SDD_OK;
}

sdd_err sdd_ksb_update(sdd_ksb *k, struct sdd_ksb_elem *elem)
{
    if (k == NULL || k->serving || k->thread_started) {
        return SDD_EINVAL;
    }
    return update(k, elem);
}

static sdd_err wait_next(sdd_ksb *k, int timeout_ms, struct sdd_ksb_elem *elem)
{
    uint64_t start = sdd_now_ns();
    uint64_t deadline = timeout_ms < 0 ? UINT64_MAX : start + (uint64_t)timeout_ms * SDD_NS_PER_MS;
    uint64_t spin_until = start + (uint64_t)k->opts.spin_us * SDD_NS_PER_US;
    uint64_t pause = SDD_NS_PER_US;
    for (;;) {
        sdd_err err = update(k, elem);
        if (err != SDD_EAGAIN) {
            return err;
        }
        uint64_t now = sdd_now_ns();
        if (now >= deadline) {
            return SDD_ETIMEDOUT;
        }
        if (atomic_load_explicit(&k->stop, memory_order_relaxed)) {
            return SDD_ECANCELED;
        }
        if (now < spin_until && k->opts.wait_mode != SDD_WAIT_BLOCK) {
            continue;
        }
        /* Idle: poll the header less often, up to max_poll_us apart. */
        uint64_t max = (uint64_t)k->max_poll_us * SDD_NS_PER_US;
        sdd_sleep_ns(pause < deadline - now ? pause : deadline - now);
        pause = pause * 2 < max ? pause * 2 : max;
    }
}

sdd_err sdd_ksb_wait_next(sdd_ksb *k, int timeout_ms, struct sdd_ksb_elem *elem)
{
    if (k == NULL || k->serving || k->thread_started) {
        return SDD_EINVAL;
    }
    return wait_next(k, timeout_ms, elem);
}

sdd_err sdd_ksb_current(sdd_ksb *k, struct sdd_ksb_elem *elem)
{
    if (k == NULL || k->serving || elem == NULL) {
        return SDD_EINVAL;
    }
    pthread_mutex_lock(&k->lock); /* the update thread may be writing it */
    sdd_err err = k->last_seq == 0 ? SDD_EAGAIN : SDD_OK;
    if (err == SDD_OK) {
        *elem = k->cur;
    }
    pthread_mutex_unlock(&k->lock);
    return err;
}

sdd_err sdd_ksb_on_update(sdd_ksb *k, sdd_ksb_update_fn fn, void *user)
{
    if (k == NULL || k->serving || fn == NULL) {
        return SDD_EINVAL;
    }
    for (int i = 0; i < KSB_MAX_CBS; i++) {
        if (k->cbs[i].fn == NULL) {
            k->cbs[i] = (struct ksb_cb){.fn = fn, .user = user};
            return SDD_OK;
        }
    }
    return SDD_EBUSY;
}

static void *updater(void *arg)
{
    sdd_ksb *k = arg;
    while (!atomic_load_explicit(&k->stop, memory_order_relaxed)) {
        if (atomic_load_explicit(&k->frozen, memory_order_relaxed)) {
            sdd_sleep_ns(100 * SDD_NS_PER_US);
            continue;
        }
        sdd_err err = wait_next(k, 100, NULL);
        if (err != SDD_OK && err != SDD_ETIMEDOUT && err != SDD_EAGAIN && err != SDD_ECANCELED) {
            SDD_ERROR("rmem", "clone updates stop: %s", sdd_strerror(err));
            break;
        }
    }
    return NULL;
}

sdd_err sdd_ksb_start(sdd_ksb *k)
{
    if (k == NULL || k->serving || k->thread_started) {
        return SDD_EINVAL;
    }
    int rc = pthread_create(&k->thread, NULL, updater, k);
    if (rc != 0) {
        return sdd_err_from_errno(rc);
    }
    k->thread_started = true;
    return SDD_OK;
}

void sdd_ksb_freeze(sdd_ksb *k)
{
    if (k != NULL) {
        atomic_store(&k->frozen, true);
        pthread_mutex_lock(&k->lock); /* an update already running finishes first */
        pthread_mutex_unlock(&k->lock);
    }
}

void sdd_ksb_thaw(sdd_ksb *k)
{
    if (k != NULL) {
        atomic_store(&k->frozen, false);
    }
}

void sdd_ksb_set_mode(sdd_ksb *k, sdd_ksb_mode mode)
{
    if (k != NULL) {
        k->mode = mode;
    }
}

sdd_err sdd_ksb_set_in_place(sdd_ksb *k, bool on)
{
    if (k == NULL || k->serving) {
        return SDD_EINVAL;
    }
    if (on && sdd_rmem_client_local(k->cl) == NULL) {
        return SDD_ENOTSUP;
    }
    k->in_place = on;
    return SDD_OK;
}

sdd_err sdd_ksb_valid(sdd_ksb *k, const struct sdd_ksb_elem *e)
{
    if (k == NULL || e == NULL || e->data == NULL) {
        return SDD_EINVAL;
    }
    if (!k->in_place) {
        return SDD_OK; /* a copy stays whole until the next update */
    }
    /* Seqlock read side: the caller's reads of the payload come before this fence, and the
     * writer marks seq_begin before it touches the payload. */
    atomic_thread_fence(memory_order_acquire);
    const uint8_t *cell = (const uint8_t *)e->data - SDD_TRB_PAYLOAD_OFFSET;
    if (sdd_trb_check_cell(&k->view, cell, e->seq, NULL) == SDD_OK) {
        return SDD_OK;
    }
    pthread_mutex_lock(&k->lock);
    k->stats.invalidated++;
    pthread_mutex_unlock(&k->lock);
    return SDD_EAGAIN;
}

void sdd_ksb_set_max_poll_us(sdd_ksb *k, uint32_t us)
{
    if (k != NULL) {
        k->max_poll_us = us > 0 ? us : 1;
    }
}

/* ---- either mode -------------------------------------------------------------------------- */

size_t sdd_ksb_element_size(const sdd_ksb *k)
{
    return k->element_size;
}

void sdd_ksb_stats(sdd_ksb *k, struct sdd_ksb_stats *out)
{
    pthread_mutex_lock(&k->lock); /* consistent even while the update thread runs */
    *out = k->stats;
    pthread_mutex_unlock(&k->lock);
}

void sdd_ksb_close(sdd_ksb *k)
{
    if (k == NULL) {
        return;
    }
    if (k->thread_started) {
        atomic_store(&k->stop, true);
        pthread_join(k->thread, NULL);
    }
    sdd_rmem_client_close(k->cl);
    sdd_rmem_server_close(k->srv);
    pthread_mutex_destroy(&k->lock);
    free(k);
}
