/* The consumer side of the builder's fence: a writer or a fabric link makes events leave the
 * node for good, so it passes an event on only once its builder unit committed it (no RU can
 * give that bulk to another BU any more), and drops it, counted, if the builder fenced first:
 * the survivors built those events from the re-sent bulks (docs/evb.md, "Leases and
 * fencing"). Events wait in arrival order; one that need not wait still queues behind one
 * that does, so that a writer's file keeps the order it was given. */
#include <stdlib.h>

#include "run_internal.h"
#include "sddaq/clock.h"
#include "sddaq/log.h"

enum verdict { GO, WAIT, DROP };

static enum verdict verdict(const struct run_item *it)
{
    const struct run_commit *c = it->commit;
    if (c == NULL || it->delivery <= atomic_load_explicit(&c->mark, memory_order_acquire)) {
        return GO;
    }
    int state = atomic_load_explicit(&c->state, memory_order_acquire);
    if (state == RUN_COMMIT_OPEN) {
        return WAIT;
    }
    /* The final mark was stored before the state: read it again. */
    if (it->delivery <= atomic_load_explicit(&c->mark, memory_order_acquire)) {
        return GO;
    }
    return state == RUN_COMMIT_FENCED ? DROP : GO;
}

static bool push(struct run_gate *g, struct run_item *it)
{
    if (g->n == g->cap) {
        size_t cap = g->cap ? 2 * g->cap : 256;
        struct run_item **q = malloc(cap * sizeof(*q));
        if (q == NULL) {
            return false;
        }
        for (size_t i = 0; i < g->n; i++) {
            q[i] = g->q[(g->head + i) % g->cap];
        }
        free(g->q);
        g->q = q;
        g->cap = cap;
        g->head = 0;
    }
    g->q[(g->head + g->n) % g->cap] = it;
    g->n++;
    return true;
}

static struct run_item *pop(struct run_gate *g)
{
    struct run_item *it = g->q[g->head];
    g->head = (g->head + 1) % g->cap;
    g->n--;
    return it;
}

static struct run_item *decided(struct run_gate *g, struct run_item *it, enum verdict v, bool *drop)
{
    *drop = v == DROP;
    g->dropped += v == DROP;
    return it;
}

struct run_item *run_gate_next(struct run_stage *s, struct run_gate *g, bool *drop)
{
    for (;;) {
        enum verdict v;
        if (g->n > 0 && (v = verdict(g->q[g->head])) != WAIT) {
            return decided(g, pop(g), v, drop);
        }
        void *p = NULL;
        if (g->n == 0) {
            p = run_next_item(s); /* blocks; NULL once the producers are gone */
            if (p == NULL) {
                return NULL;
            }
        } else if (!run_take(s, &p)) {
            /* Waiting for a commit: the builder's next flush, within one bulk's delivery. */
            sdd_sleep_ns(20 * SDD_NS_PER_US);
            continue;
        }
        struct run_item *it = p;
        if (g->n == 0 && (v = verdict(it)) != WAIT) {
            return decided(g, it, v, drop);
        }
        while (!push(g, it)) { /* no memory to queue it: wait for its verdict in place */
            if ((v = verdict(it)) != WAIT) {
                return decided(g, it, v, drop); /* ahead of those queued: no memory to keep order */
            }
            sdd_sleep_ns(20 * SDD_NS_PER_US);
        }
    }
}

void run_gate_fini(struct run_gate *g)
{
    free(g->q);
    g->q = NULL;
    g->cap = g->n = g->head = 0;
}

void run_gate_end(struct run_gate *g, const struct run_stage *s, const char *what)
{
    if (g->dropped > 0) {
        SDD_WARN("run",
                 "%s: %llu %s: their builder unit fenced before it could commit them (a "
                 "surviving builder's copies went on)",
                 s->cfg->name, (unsigned long long)g->dropped, what);
    }
    run_gate_fini(g);
}
