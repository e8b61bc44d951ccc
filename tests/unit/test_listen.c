/* Unit tests for controld/ctl_listen.c: what the listeners' limits closed is counted per
 * listener and reason, and noted in the health log once a minute at most per address and
 * listener. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#include "controld/ctl_health.h"
#include "controld/ctl_listen.h"

static void setup(void)
{
    ctl_listen_reset();
    ctl_health_reset();
}

TestSuite(listen, .init = setup);

static struct fgx_peer v4(uint8_t last)
{
    struct fgx_peer p = {.family = 4, .addr = {10, 77, 0, last}};

    return p;
}

Test(listen, hits_counted_and_noted_once_a_minute_per_address)
{
    struct ctl_health_entry e[8];
    struct ctl_listen_view v;
    struct fgx_peer a = v4(10), b = v4(11);

    ctl_listen_limits(CTL_LISTENER_WEB, 256, 64, 5);
    ctl_listen_hit(CTL_LISTENER_WEB, CTL_HIT_PER_SRC, &a, 1);
    ctl_listen_hit(CTL_LISTENER_WEB, CTL_HIT_PER_SRC, &a, 2);
    ctl_listen_hit(CTL_LISTENER_WEB, CTL_HIT_TIMEOUT, &a, 4);
    ctl_listen_view_get(CTL_LISTENER_WEB, &v);
    cr_assert(v.on);
    cr_assert_eq(v.max, 256);
    cr_assert_eq(v.hits[CTL_HIT_PER_SRC], 3);
    cr_assert_eq(v.hits[CTL_HIT_TIMEOUT], 4);
    /* one entry for a, whatever the reasons */
    cr_assert_eq(ctl_health_list(0, UINT32_MAX, e, 8), 1);
    cr_assert_str_eq(e[0].kind, "listen-limit");
    cr_assert(strstr(e[0].text, "10.77.0.10") && strstr(e[0].text, "more than 64"), "%s",
              e[0].text);
    /* another address has its own; so has another listener */
    ctl_listen_hit(CTL_LISTENER_WEB, CTL_HIT_FULL, &b, 1);
    ctl_listen_hit(CTL_LISTENER_CONTROL, CTL_HIT_PER_SRC, &a, 1);
    cr_assert_eq(ctl_health_list(0, UINT32_MAX, e, 8), 3);
    cr_assert(strstr(e[1].text, "web listener full") && strstr(e[1].text, "10.77.0.11"), "%s",
              e[1].text);
    cr_assert(strstr(e[2].text, "control listener") != NULL, "%s", e[2].text);
    ctl_listen_view_get(CTL_LISTENER_CONTROL, &v);
    cr_assert_not(v.on, "the control listener's limits were never set");
    cr_assert_eq(v.hits[CTL_HIT_PER_SRC], 1);
}

Test(listen, the_control_guard_reports_through_its_callbacks)
{
    struct ctl_listen_view v;
    struct fgx_peer a = v4(12);

    ctl_listen_control_cut(&a, FGX_GUARD_LATE, 3, NULL);
    ctl_listen_control_cut(&a, FGX_GUARD_PER_PEER, 5, NULL);
    ctl_listen_control_cut(&a, FGX_GUARD_FULL, 7, NULL);
    ctl_listen_control_gauge(9, NULL);
    ctl_listen_view_get(CTL_LISTENER_CONTROL, &v);
    cr_assert_eq(v.hits[CTL_HIT_TIMEOUT], 3);
    cr_assert_eq(v.hits[CTL_HIT_PER_SRC], 5);
    cr_assert_eq(v.hits[CTL_HIT_FULL], 7);
    cr_assert_eq(v.pending, 9);
}
