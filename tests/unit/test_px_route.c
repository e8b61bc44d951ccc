/* Unit tests for controld's policy routing of the proxy layer (ctl_route.c), in a network
 * namespace of each test's own: the rule and the local route appear, survive a second setup,
 * and are gone after the teardown. */
#include <criterion/criterion.h>

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>

#include "controld/ctl_route.h"
#include "fgx/log.h"

static void setup(void)
{
    fgx_log_init("test_px_route", FGX_LOG_WARN);
    cr_assert_eq(unshare(CLONE_NEWNET), 0, "unshare: %s", strerror(errno));
    cr_assert_eq(system("ip link set lo up"), 0);
}

TestSuite(px_route, .init = setup, .timeout = 30);

/* How many lines of cmd's output contain needle. */
static int count(const char *cmd, const char *needle)
{
    char line[512];
    int n = 0;
    FILE *f = popen(cmd, "r");

    cr_assert_not_null(f);
    while (fgets(line, sizeof(line), f) != NULL)
        if (strstr(line, needle) != NULL)
            n++;
    pclose(f);
    return n;
}

Test(px_route, setup_adds_rule_and_route_for_both_families)
{
    cr_assert_eq(ctl_route_setup(), 0);
    cr_assert_eq(count("ip rule", "9066:\tfrom all fwmark 0xfe40001 lookup 4066"), 1);
    cr_assert_eq(count("ip -6 rule", "9066:\tfrom all fwmark 0xfe40001 lookup 4066"), 1);
    cr_assert_eq(count("ip route show table 4066", "local default dev lo"), 1);
    cr_assert_eq(count("ip -6 route show table 4066", "local default dev lo"), 1);
}

Test(px_route, setup_twice_keeps_one_of_each)
{
    cr_assert_eq(ctl_route_setup(), 0);
    cr_assert_eq(ctl_route_setup(), 0);
    cr_assert_eq(count("ip rule", "lookup 4066"), 1);
    cr_assert_eq(count("ip route show table 4066", "local default"), 1);
}

Test(px_route, teardown_removes_both_and_is_idempotent)
{
    cr_assert_eq(ctl_route_setup(), 0);
    cr_assert_eq(ctl_route_teardown(), 0);
    cr_assert_eq(count("ip rule", "lookup 4066"), 0);
    cr_assert_eq(count("ip -6 rule", "lookup 4066"), 0);
    cr_assert_eq(count("ip route show table 4066 2>/dev/null", "local"), 0);
    cr_assert_eq(ctl_route_teardown(), 0);
}
