/* Unit tests for the flow table (libcommon/flow.c). */
#include <criterion/criterion.h>

#include <string.h>

#include <netinet/in.h>

#include "fgx/flow.h"

static void mkpkt(struct fgx_pkt *p, uint8_t a, uint16_t sp, uint8_t b, uint16_t dp)
{
    memset(p, 0, sizeof(*p));
    p->family = 4;
    p->ipproto = IPPROTO_TCP;
    p->saddr[0] = 10;
    p->saddr[3] = a;
    p->daddr[0] = 10;
    p->daddr[3] = b;
    p->sport = sp;
    p->dport = dp;
}

static int released;
static uint32_t last_released;

static void on_release(void *arg, struct fgx_flow *f)
{
    (void)arg;
    released++;
    last_released = f->service_id;
}

Test(flow, lookup_both_directions)
{
    struct fgx_flow_table *t;
    struct fgx_flow_key k1, k2, k3;
    struct fgx_pkt p;
    struct fgx_flow *f;

    released = 0;
    cr_assert_eq(fgx_flow_table_new(16, on_release, NULL, &t), 0);
    mkpkt(&p, 1, 40000, 2, 80);
    fgx_flow_key_from_pkt(&p, FGX_DIR_C2S, &k1);
    mkpkt(&p, 2, 80, 1, 40000);
    fgx_flow_key_from_pkt(&p, FGX_DIR_S2C, &k2);
    cr_assert_eq(memcmp(&k1, &k2, sizeof(k1)), 0);
    cr_assert_null(fgx_flow_lookup(t, &k1, 1));
    f = fgx_flow_insert(t, &k1, 1);
    f->service_id = 7;
    cr_assert_eq(fgx_flow_lookup(t, &k2, 2), f);
    cr_assert_eq(f->last_ms, 2);
    /* another client port is another flow */
    mkpkt(&p, 1, 40001, 2, 80);
    fgx_flow_key_from_pkt(&p, FGX_DIR_C2S, &k3);
    cr_assert_null(fgx_flow_lookup(t, &k3, 3));
    cr_assert_eq(fgx_flow_count(t), 1);
    fgx_flow_remove(t, f);
    cr_assert_eq(released, 1);
    cr_assert_null(fgx_flow_lookup(t, &k1, 4));
    cr_assert_eq(fgx_flow_count(t), 0);
    fgx_flow_table_free(t);
}

Test(flow, evicts_least_recently_used)
{
    struct fgx_flow_table *t;
    struct fgx_flow_key k[4];
    struct fgx_pkt p;
    int i;

    released = 0;
    cr_assert_eq(fgx_flow_table_new(3, on_release, NULL, &t), 0);
    for (i = 0; i < 4; i++) {
        mkpkt(&p, 1, (uint16_t)(1000 + i), 2, 80);
        fgx_flow_key_from_pkt(&p, FGX_DIR_C2S, &k[i]);
    }
    for (i = 0; i < 3; i++)
        fgx_flow_insert(t, &k[i], (uint64_t)i)->service_id = (uint32_t)i;
    /* touch flow 0: flow 1 becomes the oldest */
    cr_assert_not_null(fgx_flow_lookup(t, &k[0], 10));
    fgx_flow_insert(t, &k[3], 11)->service_id = 3;
    cr_assert_eq(released, 1);
    cr_assert_eq(last_released, 1);
    cr_assert_null(fgx_flow_lookup(t, &k[1], 12));
    cr_assert_not_null(fgx_flow_lookup(t, &k[0], 12));
    cr_assert_not_null(fgx_flow_lookup(t, &k[2], 12));
    cr_assert_not_null(fgx_flow_lookup(t, &k[3], 12));
    cr_assert_eq(fgx_flow_count(t), 3);
    fgx_flow_table_free(t);
    cr_assert_eq(released, 4);
}

Test(flow, idle_timeout)
{
    struct fgx_flow_table *t;
    struct fgx_flow_key k[3];
    struct fgx_pkt p;
    int i;

    released = 0;
    cr_assert_eq(fgx_flow_table_new(8, on_release, NULL, &t), 0);
    for (i = 0; i < 3; i++) {
        mkpkt(&p, 1, (uint16_t)(1000 + i), 2, 80);
        fgx_flow_key_from_pkt(&p, FGX_DIR_C2S, &k[i]);
        fgx_flow_insert(t, &k[i], 1000);
    }
    cr_assert_not_null(fgx_flow_lookup(t, &k[1], 5000));
    cr_assert_eq(fgx_flow_expire(t, 1000 + 120000, 120000), 0);
    cr_assert_eq(fgx_flow_expire(t, 1001 + 120000, 120000), 2);
    cr_assert_eq(released, 2);
    cr_assert_not_null(fgx_flow_lookup(t, &k[1], 6000));
    cr_assert_null(fgx_flow_lookup(t, &k[0], 6000));
    fgx_flow_table_free(t);
}

static bool keep_odd(void *arg, struct fgx_flow *f)
{
    (void)arg;
    return f->service_id % 2 == 1;
}

Test(flow, sweep)
{
    struct fgx_flow_table *t;
    struct fgx_flow_key k;
    struct fgx_pkt p;
    int i;

    released = 0;
    cr_assert_eq(fgx_flow_table_new(8, on_release, NULL, &t), 0);
    for (i = 0; i < 6; i++) {
        mkpkt(&p, 1, (uint16_t)(1000 + i), 2, 80);
        fgx_flow_key_from_pkt(&p, FGX_DIR_C2S, &k);
        fgx_flow_insert(t, &k, 1)->service_id = (uint32_t)i;
    }
    cr_assert_eq(fgx_flow_sweep(t, keep_odd, NULL), 3);
    cr_assert_eq(fgx_flow_count(t), 3);
    fgx_flow_table_free(t);
    cr_assert_eq(released, 6);
}

static void key_n(struct fgx_flow_key *k, int i)
{
    struct fgx_pkt p;

    mkpkt(&p, (uint8_t)(1 + i / 1000), (uint16_t)(1000 + i % 1000), 2, 80);
    fgx_flow_key_from_pkt(&p, FGX_DIR_C2S, k);
}

/* An embryonic flow as a SYN-ACK leaves it: both streams started, nothing passed. */
static struct fgx_flow *embryonic(struct fgx_flow_table *t, int i, uint64_t now)
{
    struct fgx_flow_key k;
    struct fgx_flow *f;

    key_n(&k, i);
    f = fgx_flow_insert_embryonic(t, &k, now);
    if (f != NULL) {
        f->service_id = (uint32_t)i;
        f->dir[0].active = f->dir[1].active = true;
        f->dir[0].next_seq = f->dir[0].floor_seq = 1000u + (uint32_t)i;
        f->dir[1].next_seq = f->dir[1].floor_seq = 5000u + (uint32_t)i;
    }
    return f;
}

/* A flood of embryonic flows pushes out only embryonic ones, up to a quarter of the table. */
Test(flow, embryonic_flows_never_push_out_stateful_ones)
{
    struct fgx_flow_table *t;
    struct fgx_flow_key k;
    int i;

    released = 0;
    cr_assert_eq(fgx_flow_table_new(16, on_release, NULL, &t), 0);
    for (i = 0; i < 6; i++) {
        key_n(&k, i);
        fgx_flow_insert(t, &k, 1)->service_id = (uint32_t)i;
    }
    for (i = 100; i < 1100; i++)
        cr_assert_not_null(embryonic(t, i, 2));
    cr_assert_eq(fgx_flow_count(t), 6 + 16 / 4);
    for (i = 0; i < 6; i++) {
        key_n(&k, i);
        cr_assert_not_null(fgx_flow_lookup(t, &k, 3), "flow %d with stream state pushed out", i);
    }
    cr_assert_eq(fgx_flow_evicted(t), 0);
    /* the newest embryonic ones are there */
    key_n(&k, 1099);
    cr_assert_not_null(fgx_flow_lookup(t, &k, 3));
    fgx_flow_table_free(t);
}

/* Full of flows with stream state: an embryonic flow finds no room, a flow with stream state
 * pushes out the least recently used one (counted). A promoted flow is no longer embryonic. */
Test(flow, full_table_of_stateful_flows)
{
    struct fgx_flow_table *t;
    struct fgx_flow_key k;
    struct fgx_flow *f;
    int i;

    released = 0;
    cr_assert_eq(fgx_flow_table_new(8, on_release, NULL, &t), 0);
    f = embryonic(t, 0, 1);
    fgx_flow_promote(t, f);
    for (i = 1; i < 8; i++) {
        key_n(&k, i);
        fgx_flow_insert(t, &k, (uint64_t)(1 + i))->service_id = (uint32_t)i;
    }
    cr_assert_null(embryonic(t, 50, 20));
    cr_assert_eq(fgx_flow_count(t), 8);
    cr_assert_eq(released, 0);
    key_n(&k, 60);
    cr_assert_not_null(fgx_flow_insert(t, &k, 21));
    cr_assert_eq(released, 1);
    cr_assert_eq(last_released, 0, "the least recently used (the promoted one)");
    cr_assert_eq(fgx_flow_evicted(t), 1);
    fgx_flow_table_free(t);
}

/* What is kept of a pushed-out or expired embryonic flow: its two starts, taken once; a new
 * flow for the key forgets them; a flow with stream state leaves nothing. */
Test(flow, anchors_of_embryonic_flows_are_remembered)
{
    struct fgx_flow_table *t;
    struct fgx_flow_key k;
    uint32_t seq[2], put[2] = {77, 88};
    int i;

    cr_assert_eq(fgx_flow_table_new(64, on_release, NULL, &t), 0);
    for (i = 0; i < 17; i++)
        cr_assert_not_null(embryonic(t, i, 1));
    key_n(&k, 0);
    cr_assert_null(fgx_flow_lookup(t, &k, 2), "pushed out by the 17th");
    cr_assert(fgx_flow_anchor_take(t, &k, seq));
    cr_assert_eq(seq[0], 1000);
    cr_assert_eq(seq[1], 5000);
    cr_assert_not(fgx_flow_anchor_take(t, &k, seq), "taken once");
    /* expiry keeps them too */
    cr_assert_eq(fgx_flow_expire(t, 1000000, 1000), 16);
    key_n(&k, 5);
    cr_assert(fgx_flow_anchor_take(t, &k, seq));
    cr_assert_eq(seq[0], 1005);
    /* a flow inserted for the key makes them stale */
    key_n(&k, 6);
    fgx_flow_insert(t, &k, 2000);
    cr_assert_not(fgx_flow_anchor_take(t, &k, seq));
    /* put, for a connection that found no room */
    key_n(&k, 900);
    fgx_flow_anchor_put(t, &k, put);
    cr_assert(fgx_flow_anchor_take(t, &k, seq));
    cr_assert_eq(seq[1], 88);
    /* nothing of a flow with stream state */
    fgx_flow_table_free(t);
    cr_assert_eq(fgx_flow_table_new(4, on_release, NULL, &t), 0);
    for (i = 0; i < 5; i++) {
        key_n(&k, i);
        fgx_flow_insert(t, &k, 1);
    }
    key_n(&k, 0);
    cr_assert_not(fgx_flow_anchor_take(t, &k, seq));
    cr_assert_eq(fgx_flow_evicted(t), 1);
    fgx_flow_table_free(t);
}
