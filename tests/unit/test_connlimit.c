/* Unit tests for libcommon/connlimit.c: the per-source cap takes the silent ones first, then the
 * oldest, never a busy one; the global limit takes from the source holding the most and never a
 * source's last connection; the reserve keeps room for a source that holds none. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#include "fgx/connlimit.h"

static struct fgx_conn_cand cand(uint8_t last, uint64_t since, uint8_t kind, bool silent,
                                 uint32_t tag)
{
    struct fgx_conn_cand c = {.since_ms = since, .kind = kind, .silent = silent, .tag = tag};

    c.src.family = 4;
    c.src.addr[0] = 10;
    c.src.addr[3] = last;
    return c;
}

static struct fgx_conn_cand *add(struct fgx_conn_cand *c, size_t *n, uint8_t last, uint64_t since,
                                 uint8_t kind, bool silent)
{
    c[*n] = cand(last, since, kind, silent, (uint32_t)*n);
    return &c[(*n)++];
}

static uint8_t cut_of(const struct fgx_conn_cand *c, size_t n, uint32_t tag)
{
    for (size_t i = 0; i < n; i++)
        if (c[i].tag == tag)
            return c[i].cut;
    cr_assert_fail("no tag %u", tag);
    return 0;
}

static size_t cuts_of_src(const struct fgx_conn_cand *c, size_t n, uint8_t last)
{
    size_t k = 0;

    for (size_t i = 0; i < n; i++)
        k += c[i].src.addr[3] == last && c[i].cut;
    return k;
}

Test(connlimit, under_the_limits_nothing_goes)
{
    struct fgx_conn_cand c[4] = {
        cand(1, 10, FGX_CONN_PENDING, true, 1), cand(1, 20, FGX_CONN_IDLE, false, 2),
        cand(2, 5, FGX_CONN_BUSY, false, 3), cand(3, 30, FGX_CONN_PENDING, false, 4)};
    struct fgx_connlimit lim = {.max = 4, .per_src = 2, .reserve = 1};

    cr_assert_eq(fgx_connlimit_pick(&lim, c, 4), 0);
    for (size_t i = 0; i < 4; i++)
        cr_assert_eq(c[i].cut, FGX_CUT_NONE);
}

Test(connlimit, per_source_silent_first_then_oldest_never_busy)
{
    /* source 1: a real client that sent its hello first (oldest), then silent ones, a busy one */
    struct fgx_conn_cand c[6] = {
        cand(1, 10, FGX_CONN_PENDING, false, 1), cand(1, 20, FGX_CONN_PENDING, true, 2),
        cand(1, 30, FGX_CONN_PENDING, true, 3),  cand(1, 40, FGX_CONN_BUSY, false, 4),
        cand(1, 50, FGX_CONN_IDLE, false, 5),    cand(1, 60, FGX_CONN_PENDING, true, 6)};
    struct fgx_connlimit lim = {.per_src = 3};

    cr_assert_eq(fgx_connlimit_pick(&lim, c, 6), 3);
    cr_assert_eq(cut_of(c, 6, 2), FGX_CUT_PER_SRC);
    cr_assert_eq(cut_of(c, 6, 3), FGX_CUT_PER_SRC);
    cr_assert_eq(cut_of(c, 6, 6), FGX_CUT_PER_SRC);
    cr_assert_eq(cut_of(c, 6, 1), FGX_CUT_NONE, "the client that spoke stays");
    cr_assert_eq(cut_of(c, 6, 4), FGX_CUT_NONE, "a busy one stays");
    cr_assert_eq(cut_of(c, 6, 5), FGX_CUT_NONE);
    /* one more: the one that spoke goes before the idle one, oldest first */
    lim.per_src = 1;
    cr_assert_eq(fgx_connlimit_pick(&lim, c, 6), 5);
    cr_assert_eq(cut_of(c, 6, 1), FGX_CUT_PER_SRC);
    cr_assert_eq(cut_of(c, 6, 5), FGX_CUT_PER_SRC);
    cr_assert_eq(cut_of(c, 6, 4), FGX_CUT_NONE);
}

Test(connlimit, arrival_at_source_cap_takes_the_oldest_of_its_own)
{
    struct fgx_conn_cand c[3] = {cand(1, 10, FGX_CONN_PENDING, false, 1),
                                 cand(1, 20, FGX_CONN_PENDING, false, 2),
                                 cand(1, 30, FGX_CONN_PENDING, true, 3)};
    struct fgx_connlimit lim = {.per_src = 2};

    c[2].arrival = true; /* just accepted: it has not had the time to speak */
    cr_assert_eq(fgx_connlimit_pick(&lim, c, 3), 1);
    cr_assert_eq(cut_of(c, 3, 1), FGX_CUT_PER_SRC);
    cr_assert_eq(cut_of(c, 3, 3), FGX_CUT_NONE);
    /* every other one busy: the arrival is refused */
    for (size_t i = 0; i < 3; i++)
        if (!c[i].arrival)
            c[i].kind = FGX_CONN_BUSY;
    cr_assert_eq(fgx_connlimit_pick(&lim, c, 3), 1);
    cr_assert_eq(cut_of(c, 3, 3), FGX_CUT_PER_SRC);
}

Test(connlimit, full_takes_from_the_heaviest_source_never_the_last)
{
    struct fgx_conn_cand c[16];
    size_t n = 0;
    struct fgx_connlimit lim = {.max = 8, .per_src = 0, .reserve = 0};

    for (uint32_t i = 0; i < 6; i++) /* source 1: six */
        add(c, &n, 1, 100 + i, FGX_CONN_PENDING, true);
    for (uint32_t i = 0; i < 3; i++) /* source 2: three */
        add(c, &n, 2, 50 + i, FGX_CONN_PENDING, true);
    for (uint8_t s = 3; s < 6; s++) /* three sources of one each */
        add(c, &n, s, 1, FGX_CONN_PENDING, true);
    /* 12 > 8: source 1 is cut down to 3 (then as heavy as source 2, whose oldest go next) */
    cr_assert_eq(fgx_connlimit_pick(&lim, c, n), 4);
    cr_assert_eq(cuts_of_src(c, n, 1) + cuts_of_src(c, n, 2), 4);
    cr_assert_geq(cuts_of_src(c, n, 1), 3);
    for (uint8_t s = 3; s < 6; s++)
        cr_assert_eq(cuts_of_src(c, n, s), 0, "a source's only connection was taken");
    /* max below the number of sources: only their last connections are left */
    lim.max = 2;
    cr_assert_eq(fgx_connlimit_pick(&lim, c, n), 7);
    cr_assert_eq(cuts_of_src(c, n, 1), 5);
    cr_assert_eq(cuts_of_src(c, n, 2), 2);
}

Test(connlimit, new_source_gets_in_when_full)
{
    struct fgx_conn_cand c[11];
    size_t n = 0;
    struct fgx_connlimit lim = {.max = 10, .per_src = 8, .reserve = 2};

    for (uint32_t i = 0; i < 8; i++)
        add(c, &n, 1, 10 + i, FGX_CONN_PENDING, true);
    add(c, &n, 2, 5, FGX_CONN_BUSY, false);
    add(c, &n, 2, 6, FGX_CONN_BUSY, false);
    add(c, &n, 3, 99, FGX_CONN_PENDING, true)->arrival = true;
    /* 11 > 10: source 1's oldest goes, the newcomer is in */
    cr_assert_eq(fgx_connlimit_pick(&lim, c, n), 1);
    cr_assert_eq(cut_of(c, n, 10), FGX_CUT_NONE);
    cr_assert_eq(cut_of(c, n, 0), FGX_CUT_FULL);
}

Test(connlimit, reserve_is_for_sources_that_hold_none)
{
    struct fgx_conn_cand c[10];
    size_t n = 0;
    struct fgx_connlimit lim = {.max = 10, .per_src = 0, .reserve = 2};

    for (uint32_t i = 0; i < 4; i++)
        add(c, &n, 1, 10 + i, FGX_CONN_BUSY, false);
    for (uint32_t i = 0; i < 4; i++)
        add(c, &n, 2, 20 + i, FGX_CONN_BUSY, false);
    /* 9 with the arrival, over max - reserve: source 1 (busy only) may not grow into it */
    add(c, &n, 1, 99, FGX_CONN_PENDING, true)->arrival = true;
    cr_assert_eq(fgx_connlimit_pick(&lim, c, n), 1);
    cr_assert_eq(cut_of(c, n, 8), FGX_CUT_FULL);
    /* a source that holds none may */
    n = 8;
    add(c, &n, 7, 99, FGX_CONN_PENDING, true)->arrival = true;
    cr_assert_eq(fgx_connlimit_pick(&lim, c, n), 0);
}

Test(connlimit, full_with_nothing_to_take_refuses_the_arrival)
{
    struct fgx_conn_cand c[11];
    size_t n = 0;
    struct fgx_connlimit lim = {.max = 10, .per_src = 0, .reserve = 2};

    /* busy ones, and sources with one connection each: nothing can go */
    for (uint32_t i = 0; i < 8; i++)
        add(c, &n, 1, 10 + i, FGX_CONN_BUSY, false);
    add(c, &n, 7, 30, FGX_CONN_PENDING, true);
    add(c, &n, 8, 31, FGX_CONN_PENDING, true);
    add(c, &n, 9, 99, FGX_CONN_PENDING, true)->arrival = true;
    cr_assert_eq(fgx_connlimit_pick(&lim, c, n), 1);
    cr_assert_eq(cut_of(c, n, 10), FGX_CUT_FULL);
}

Test(connlimit, ipv6_grouped_by_64)
{
    struct fgx_peer a = {.family = 6}, b = {.family = 6}, d = {.family = 6};

    a.addr[0] = b.addr[0] = d.addr[0] = 0xfd;
    a.addr[15] = 1;
    b.addr[15] = 2; /* same /64 */
    d.addr[7] = 1;  /* another /64 */
    cr_assert(fgx_conn_same_src(&a, &b));
    cr_assert_not(fgx_conn_same_src(&a, &d));
}
