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
