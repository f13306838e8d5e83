/* N x M event building over one provider, as real processes: every event is built exactly once,
 * complete, with every fragment's content verified; RU-only and BU-only nodes mixed with
 * combined ones (the in-process RU->BU shortcut); fragment sizes fixed, uniform and log-normal;
 * injected corrupt fragments that must be flagged and counted, exactly, while the run goes
 * on; and a consumer with room for one bulk of uncommitted events, which the builders wait
 * for. */
#include "evbtest.h"

/* Every test runs twice: RUs writing bulks into BU slots, and BUs reading them. */
static sdd_evb_transfer transfer;

static void base_opts(struct sdd_evb_opts *o, uint32_t nnodes, uint64_t events)
{
    sdd_evb_opts_default(o);
    o->transfer = transfer;
    o->nnodes = nnodes;
    o->events = events;
    o->dead_ms = 5000;
    o->event_timeout_ms = 30000;
}

static void check_all_built_once(const struct sdd_evb_opts *o, const int *status, uint32_t nru)
{
    for (uint32_t i = 0; i < o->nnodes; i++) {
        CHECK_EQ(status[i], 0);
    }
    struct et_tally t = et_count(o->events);
    CHECK_EQ(t.lost, 0);
    CHECK_EQ(t.dup, 0);
    CHECK_EQ(t.complete, o->events);
    CHECK_EQ(t.incomplete, 0);
    CHECK_EQ(t.corrupt, 0);
    uint64_t built = 0, ok = 0, gen = 0, local = 0;
    for (uint32_t i = 0; i < o->nnodes; i++) {
        built += et_sh->stats[i].events_built;
        ok += et_sh->stats[i].frags_ok;
        gen += et_sh->stats[i].events_generated;
        local += et_sh->stats[i].bulks_local;
    }
    CHECK_EQ(built, o->events);
    CHECK_EQ(ok, o->events * nru);
    CHECK_EQ(gen, o->events * nru);
    uint64_t all = nru >= 64 ? ~0ull : (1ull << nru) - 1;
    uint64_t wrong = 0;
    for (uint64_t e = 0; e < o->events; e++) {
        wrong += atomic_load(&et_sh->present[e]) != all;
    }
    CHECK_EQ(wrong, 0);
    for (uint32_t i = 0; i < o->nnodes; i++) {
        CHECK_EQ(et_sh->stats[i].transfer, transfer); /* what the nodes did, not just asked */
    }
    printf("  %llu events built once each, %llu bulks by the local shortcut\n",
           (unsigned long long)o->events, (unsigned long long)local);
}

/* Three combined nodes (RU + BU each): 3 x 3, fixed sizes, CRC on. */
static void test_combined(void)
{
    struct sdd_evb_opts o;
    base_opts(&o, 3, 20011); /* not a multiple of the bulk: a short last bulk */
    o.bulk = 32;
    o.credits = 2;
    o.src.mean = 700;
    o.crc = true;
    int st[SDD_EVB_MAX_NODES];
    printf("3 combined nodes, fixed 700 B, crc\n");
    CHECK_REQUIRE(et_run(o, -1, 0, st) == 0);
    check_all_built_once(&o, st, 3);
    uint64_t local = 0;
    for (int i = 0; i < 3; i++) {
        local += et_sh->stats[i].bulks_local;
    }
    CHECK(local > 0);
}

/* Two RU-only and two BU-only nodes plus one combined: 3 RUs x 3 BUs, log-normal sizes. */
static void test_split_roles(void)
{
    struct sdd_evb_opts o;
    base_opts(&o, 5, 15000);
    o.roles[0] = SDD_EVB_ROLE_RU;
    o.roles[1] = SDD_EVB_ROLE_BU;
    o.roles[2] = SDD_EVB_ROLE_RU | SDD_EVB_ROLE_BU;
    o.roles[3] = SDD_EVB_ROLE_RU;
    o.roles[4] = SDD_EVB_ROLE_BU;
    o.bulk = 50;
    o.credits = 3;
    o.src.dist = SDD_EVB_SIZE_LOGNORMAL;
    o.src.mean = 400;
    o.src.max = 3000;
    int st[SDD_EVB_MAX_NODES];
    printf("3 RUs x 3 BUs on 5 nodes, log-normal sizes\n");
    CHECK_REQUIRE(et_run(o, -1, 0, st) == 0);
    check_all_built_once(&o, st, 3);
}

/* Two nodes, uniform sizes, one credit: the smallest pipeline still drains. */
static void test_one_credit(void)
{
    struct sdd_evb_opts o;
    base_opts(&o, 2, 9000);
    o.bulk = 7;
    o.credits = 1;
    o.src.dist = SDD_EVB_SIZE_UNIFORM;
    o.src.min = 0;
    o.src.max = 2000;
    int st[SDD_EVB_MAX_NODES];
    printf("2 nodes, uniform 0..2000 B, 1 credit, bulk 7\n");
    CHECK_REQUIRE(et_run(o, -1, 0, st) == 0);
    check_all_built_once(&o, st, 2);
}

/* Every 997th fragment corrupted by its RU: exactly those events are flagged, all sources' bad
 * fragments counted, and every other event is complete. */
static void test_corrupt(void)
{
    struct sdd_evb_opts o;
    base_opts(&o, 3, 10000);
    o.bulk = 16;
    o.corrupt_every = 997;
    int st[SDD_EVB_MAX_NODES];
    printf("3 nodes, every 997th fragment corrupt\n");
    CHECK_REQUIRE(et_run(o, -1, 0, st) == 0);
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(st[i], 0);
    }
    struct et_tally t = et_count(o.events);
    uint64_t expect = o.events / 997;
    CHECK_EQ(t.lost, 0);
    CHECK_EQ(t.dup, 0);
    CHECK_EQ(t.corrupt, expect);
    CHECK_EQ(t.complete, o.events - expect);
    uint64_t wrong = 0, frags_bad = 0, ev_bad = 0;
    for (uint64_t e = 0; e < o.events; e++) {
        bool should = (e + 1) % 997 == 0;
        uint64_t c = atomic_load(&et_sh->corrupt[e]);
        wrong += should ? c != 7 : c != 0;
    }
    for (int i = 0; i < 3; i++) {
        frags_bad += et_sh->stats[i].frags_corrupt;
        ev_bad += et_sh->stats[i].events_corrupt;
    }
    CHECK_EQ(wrong, 0);
    CHECK_EQ(frags_bad, 3 * expect);
    CHECK_EQ(ev_bad, expect);
}

/* A consumer that keeps events until they are committed, with room for one bulk: a poll turn
 * that completes a second bulk must keep it for a later turn (whose flush commits the first);
 * it also refuses every third ask outright. Every event is still built, and kept, exactly
 * once. */
static void test_room(void)
{
    struct sdd_evb_opts o;
    base_opts(&o, 3, 20000);
    o.bulk = 16;
    o.credits = 4;
    et_room = o.bulk;
    int st[SDD_EVB_MAX_NODES];
    printf("3 nodes, a consumer with room for one bulk of uncommitted events\n");
    CHECK_REQUIRE(et_run(o, -1, 0, st) == 0);
    et_room = 0;
    check_all_built_once(&o, st, 3);
    struct et_tally t = et_count(o.events);
    CHECK_EQ(t.kept_lost, 0);
    CHECK_EQ(t.kept_dup, 0);
    uint64_t waits = 0;
    for (int i = 0; i < 3; i++) {
        waits += et_sh->stats[i].room_waits;
    }
    CHECK(waits > 0);
    printf("  %llu bulks waited for room\n", (unsigned long long)waits);
}

static void all_tests(void)
{
    test_room();
    test_combined();
    test_split_roles();
    test_one_credit();
    test_corrupt();
}

int main(int argc, char **argv)
{
    et_init(argc, argv);
    et_each_transfer(&transfer, all_tests);
    return check_finish();
}
