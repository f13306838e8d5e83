/* The lease rules of src/evb/lease.c on a node set up by hand, without a fabric: an echo
 * renews a BU's lease only while it is recent, so the echo of a value from before a stall
 * renews nothing; a peer's first heartbeat, and one that asks, is answered at once with its
 * echo; bulks in doubt wait for echoes from after them; a late poll turn marks a stall; and a BU
 * that loses a remote RU fences exactly when it cannot tell that RU's failure from having been
 * given up itself. */
#include <stdlib.h>

#include "check.h"
#include "evb/evb_internal.h"
#include "sddaq/clock.h"

#define MS    SDD_NS_PER_MS
#define T0    (100 * SDD_NS_PER_S) /* "now" of the tests */
#define LEASE (1000 * MS)          /* dead_ms 2000 */

/* A BU on node 0 and nru RUs on nodes 1 .. nru, every peer alive. */
static struct sdd_evb_node *bu_node(uint32_t nru)
{
    struct sdd_evb_node *n = calloc(1, sizeof(*n));
    CHECK_REQUIRE(n != NULL);
    n->o.nnodes = nru + 1;
    n->self = 0;
    n->nru = nru;
    n->nbu = 1;
    n->lease_ns = LEASE;
    n->bu_of[0] = 0;
    n->ru_of[0] = -1;
    n->bu_node[0] = 0;
    for (uint32_t r = 0; r < nru; r++) {
        n->ru_of[r + 1] = (int)r;
        n->bu_of[r + 1] = -1;
        n->ru_node[r] = r + 1;
        n->peers[r + 1].alive = true;
    }
    return n;
}

static void test_echo(void)
{
    struct sdd_evb_node *n = bu_node(2);
    struct evb_peer *p = &n->peers[1];
    /* First heartbeat: no echo yet, answered at once with one of its clock value. */
    evb_lease_on_hb(n, 1, 5000, 0, 0, T0);
    CHECK_EQ(p->lease_until_ns, 0);
    CHECK_EQ(n->nstaged[1], 1);
    CHECK_EQ(n->stage[1][0].type, CTL_HB);
    CHECK_EQ(n->stage[1][0].a, T0);
    CHECK_EQ(n->stage[1][0].d, 5000);
    /* Later ones are not answered (the periodic heartbeat carries the echo). */
    evb_lease_on_hb(n, 1, 6000, T0 - 100 * MS, 0, T0);
    CHECK_EQ(n->nstaged[1], 1);
    CHECK_EQ(p->echo_ns, 6000);
    CHECK_EQ(p->lease_until_ns, T0 - 100 * MS + LEASE);
    /* An older echo, or one from before a stall (lapsed already), renews nothing. */
    evb_lease_on_hb(n, 1, 5500, T0 - 200 * MS, 0, T0 + 10 * MS);
    evb_lease_on_hb(n, 1, 7000, T0 - 1500 * MS, 0, T0 + 20 * MS);
    CHECK_EQ(p->echo_ns, 7000);
    CHECK_EQ(p->lease_until_ns, T0 - 100 * MS + LEASE);
    /* A heartbeat that asks for its echo at once (a BU with bulks in doubt) gets it. */
    evb_lease_on_hb(n, 1, 8000, T0 - 50 * MS, EVB_HB_ANSWER_NOW, T0 + 30 * MS);
    CHECK_EQ(n->nstaged[1], 2);
    CHECK_EQ(n->stage[1][1].d, 8000);
    CHECK_EQ(p->lease_echo_ns, T0 - 50 * MS);
    free(n);
}

/* Bulks in doubt commit only once every live remote RU echoed a clock value from after their
 * acknowledgements left, with its lease holding; a BU asks for those echoes at once. */
static void test_echoed_since(void)
{
    struct sdd_evb_node *n = bu_node(2);
    uint64_t doubt = T0;
    for (uint32_t j = 1; j <= 2; j++) {
        n->peers[j].lease_until_ns = T0 + 400 * MS;
        n->peers[j].lease_echo_ns = T0 - 600 * MS; /* an echo from before the doubt */
    }
    CHECK(!evb_lease_echoed_since(n, doubt, T0 + MS));
    evb_lease_on_hb(n, 1, 1, doubt + MS, 0, T0 + 2 * MS);
    CHECK(!evb_lease_echoed_since(n, doubt, T0 + 2 * MS)); /* RU 2 has not answered */
    evb_lease_on_hb(n, 2, 1, doubt + MS, 0, T0 + 2 * MS);
    CHECK(evb_lease_echoed_since(n, doubt, T0 + 2 * MS));
    CHECK(!evb_lease_echoed_since(n, doubt, doubt + MS + LEASE)); /* lapsed again */
    n->peers[2].alive = false; /* a dead RU re-sends nothing more: it is not waited for */
    n->peers[1].lease_echo_ns = doubt - 1;
    n->peers[1].done = true;
    CHECK(evb_lease_echoed_since(n, doubt, T0 + 3 * MS));
    n->peers[1].done = false;
    n->peers[2].alive = true;
    n->nstaged[1] = n->nstaged[2] = 0; /* drop the first heartbeats' answers */
    n->staged = 0;
    evb_lease_ask_now(n, T0 + 4 * MS);
    for (uint32_t j = 1; j <= 2; j++) {
        CHECK_EQ(n->nstaged[j], 1);
        CHECK_EQ(n->stage[j][0].type, CTL_HB);
        CHECK_EQ(n->stage[j][0].c, EVB_HB_ANSWER_NOW);
        CHECK_EQ(n->stage[j][0].a, T0 + 4 * MS);
    }
    free(n);
}

static void test_gate(void)
{
    struct sdd_evb_node *n = bu_node(2);
    n->peers[1].lease_until_ns = T0 + 500 * MS;
    CHECK(evb_lease_from(n, 1, T0));
    CHECK(!evb_lease_from(n, 1, T0 + 500 * MS));
    CHECK(!evb_lease_ok(n, T0)); /* RU on node 2: no lease yet */
    n->peers[2].lease_until_ns = T0 + 100 * MS;
    CHECK(evb_lease_ok(n, T0));
    CHECK(!evb_lease_ok(n, T0 + 100 * MS)); /* a lease ends at its time */
    n->peers[2].done = true;                /* an RU that said DONE re-sends nothing */
    CHECK(evb_lease_ok(n, T0 + 100 * MS));
    n->peers[2].done = false;
    n->peers[2].alive = false; /* nor does one declared dead */
    CHECK(evb_lease_ok(n, T0 + 100 * MS));
    CHECK(!evb_lease_ok(n, T0 + 500 * MS));
    free(n);
}

static void test_stall(void)
{
    struct sdd_evb_node *n = bu_node(1);
    evb_lease_turn(n, T0);
    CHECK_EQ(n->pause_end_ns, 0);
    evb_lease_turn(n, T0 + LEASE / 2); /* late, but not more than dead_ms / 4 */
    CHECK_EQ(n->pause_end_ns, 0);
    evb_lease_turn(n, T0 + LEASE + 1);
    CHECK_EQ(n->pause_end_ns, T0 + LEASE + 1);
    free(n);
}

static void test_fence_rules(void)
{
    uint64_t now = T0;
    struct sdd_evb_node *n = bu_node(3);
    for (uint32_t j = 1; j <= 3; j++) {
        n->peers[j].lease_until_ns = now + 300 * MS;
    }
    /* Lost while its lease held: it failed (a crash closes the connection at once). */
    CHECK(!evb_lease_must_fence(n, 1, now));
    /* Lapsed, others still vouch for us: it failed. */
    n->peers[1].lease_until_ns = now - 1;
    CHECK(!evb_lease_must_fence(n, 1, now));
    /* Lapsed, and this process was still stalled when it lapsed: fence. */
    n->peers[1].lease_until_ns = now - 100 * MS;
    n->pause_end_ns = now - 100 * MS;
    CHECK(evb_lease_must_fence(n, 1, now));
    n->pause_end_ns = now - 50 * MS; /* or stalled after it lapsed */
    CHECK(evb_lease_must_fence(n, 1, now));
    /* A stall that ended while the lease held (a peer stopped holding a region lock of shm's
     * stalls posters for a few hundred ms) does not count: the others still vouch. */
    n->pause_end_ns = now - 100 * MS - 1;
    CHECK(!evb_lease_must_fence(n, 1, now));
    /* Every other live RU's lease lapsed too: cut off, fence. */
    n->peers[2].lease_until_ns = now - 1;
    n->peers[3].lease_until_ns = now;
    CHECK(evb_lease_must_fence(n, 1, now));
    /* ... unless those are done or dead: then the lost one may simply have failed. */
    n->peers[2].done = true;
    n->peers[3].alive = false;
    CHECK(!evb_lease_must_fence(n, 1, now));
    /* A lost RU that said DONE is no failure at all. */
    n->peers[1].done = true;
    n->pause_end_ns = now;
    CHECK(!evb_lease_must_fence(n, 1, now));
    free(n);
    /* Only one remote RU and no stall: its failure and a partition look alike; built without
     * it (docs/evb.md, known limits). */
    n = bu_node(1);
    n->peers[1].lease_until_ns = now - 1;
    CHECK(!evb_lease_must_fence(n, 1, now));
    /* A node that builds nothing never fences. */
    n->bu_of[0] = -1;
    n->pause_end_ns = now;
    CHECK(!evb_lease_must_fence(n, 1, now));
    free(n);
}

int main(void)
{
    test_echo();
    test_echoed_since();
    test_gate();
    test_stall();
    test_fence_rules();
    return check_finish();
}
