/* Leases that fence a builder unit the RUs may have given up. An RU declares a BU dead after
 * dead_ms without a word from it and re-sends its unacknowledged bulks to the survivors; a BU
 * that was only stopped (SIGSTOP, a swapping or frozen host) or cut off (a partition) still
 * holds those bulks, and must never deliver them once it runs again.
 *
 * Every heartbeat carries its sender's clock (a) and the newest clock value the sender had
 * from the receiver (d, the echo). When an RU echoes the BU's value t, the RU heard from the BU
 * at t or later, so it cannot declare the BU dead before t + dead_ms on its own clock. The BU
 * holds a lease until t + dead_ms / 2 on its clock: inside it, no bulk it holds has been given
 * away. Only clock rates must agree, not clock values, so this works across hosts. A BU
 * delivers a bulk only while the lease of every live remote RU holds (bu.c).
 *
 * When a remote RU is lost (its connection closes, or it stays silent past dead_ms) while its
 * lease has lapsed, the BU cannot tell that RU's failure from having been given up by it:
 * - if this process was still stalled when that lease lapsed (or stalled after), it was
 *   given up, maybe. A stall that ended while the lease held is no such sign: the RU could
 *   not give the BU up before the lease's echo + dead_ms, and the BU's heartbeats went out
 *   again before echo + dead_ms / 2. Over shm a peer stopped holding a region lock stalls
 *   everyone posting to that region for a few hundred ms (the fence time is dead_ms / 8,
 *   node.c): a stall that counts (> dead_ms / 4) but ends inside the leases;
 * - if no other live remote RU's lease holds either, it is the one cut off, maybe.
 * Either way it fences: it drops what it holds, unbuilt and unacknowledged, and leaves the
 * run; the RUs re-send those bulks to the survivors. Otherwise the RU failed, and its events
 * are built without it as before. */
#include "evb_internal.h"
#include "sddaq/clock.h"

void evb_lease_on_hb(struct sdd_evb_node *n, uint32_t node, uint64_t a, uint64_t d, uint32_t c,
                     uint64_t now)
{
    struct evb_peer *p = &n->peers[node];
    if (a > p->echo_ns) {
        p->echo_ns = a;
    }
    /* An echo of a value from before a stall renews nothing: the lease it makes has lapsed. */
    uint64_t until = d != 0 ? d + n->lease_ns : 0;
    if (until > p->lease_until_ns && until > now) {
        p->lease_until_ns = until;
        p->lease_echo_ns = d;
    }
    if (!p->hb_answered || c == EVB_HB_ANSWER_NOW) {
        /* The first lease need not wait for the peer's next periodic heartbeat, nor does a BU
         * with bulks in doubt (bu.c): it waits for this echo. */
        p->hb_answered = true;
        evb_ctl_send_d(n, node, CTL_HB, now, 0, 0, p->echo_ns);
    }
}

void evb_lease_ask_now(struct sdd_evb_node *n, uint64_t now)
{
    for (uint32_t r = 0; r < n->nru; r++) {
        uint32_t node = n->ru_node[r];
        const struct evb_peer *p = &n->peers[node];
        if (node != n->self && p->alive && !p->done) {
            evb_ctl_send_d(n, node, CTL_HB, now, 0, EVB_HB_ANSWER_NOW, p->echo_ns);
        }
    }
}

void evb_lease_turn(struct sdd_evb_node *n, uint64_t now)
{
    /* A turn that comes this late means the process did not run (stopped, starved, frozen):
     * leases may have lapsed with no one noticing on this side. */
    if (n->last_turn_ns != 0 && now - n->last_turn_ns > n->lease_ns / 2) {
        n->pause_end_ns = now;
    }
    n->last_turn_ns = now;
}

bool evb_lease_from(const struct sdd_evb_node *n, uint32_t node, uint64_t now)
{
    return n->peers[node].lease_until_ns > now;
}

bool evb_lease_ok(const struct sdd_evb_node *n, uint64_t now)
{
    for (uint32_t r = 0; r < n->nru; r++) {
        uint32_t node = n->ru_node[r];
        const struct evb_peer *p = &n->peers[node];
        if (node != n->self && p->alive && !p->done && p->lease_until_ns <= now) {
            return false;
        }
    }
    return true;
}

bool evb_lease_echoed_since(const struct sdd_evb_node *n, uint64_t t, uint64_t now)
{
    for (uint32_t r = 0; r < n->nru; r++) {
        uint32_t node = n->ru_node[r];
        const struct evb_peer *p = &n->peers[node];
        if (node != n->self && p->alive && !p->done &&
            (p->lease_echo_ns < t || p->lease_until_ns <= now)) {
            return false;
        }
    }
    return true;
}

bool evb_lease_stalled_past(const struct sdd_evb_node *n, uint32_t node)
{
    return n->pause_end_ns != 0 && n->pause_end_ns >= n->peers[node].lease_until_ns;
}

bool evb_lease_must_fence(const struct sdd_evb_node *n, uint32_t node, uint64_t now)
{
    const struct evb_peer *lost = &n->peers[node];
    if (n->bu_of[n->self] < 0 || n->ru_of[node] < 0 || lost->done || lost->lease_until_ns > now) {
        return false; /* not an RU we build from, or it failed while it still vouched for us */
    }
    if (evb_lease_stalled_past(n, node)) {
        return true;
    }
    bool others = false;
    for (uint32_t r = 0; r < n->nru; r++) {
        uint32_t j = n->ru_node[r];
        const struct evb_peer *p = &n->peers[j];
        if (j == node || j == n->self || !p->alive || p->done) {
            continue;
        }
        if (p->lease_until_ns > now) {
            return false; /* another RU still vouches for us: the lost one failed */
        }
        others = true;
    }
    return others;
}
