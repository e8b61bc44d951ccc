/* Unit tests for controld/ctl_health.c: entries listed in order after a sequence number, per
 * service with the box's own, cut to their sizes, and the ring's oldest overwritten. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#include "controld/ctl_health.h"

static void setup(void)
{
    ctl_health_reset();
}

TestSuite(health, .init = setup);

Test(health, listed_after_seq_oldest_first)
{
    struct ctl_health_entry e[8];

    cr_assert_eq(ctl_health_last_seq(), 0);
    ctl_health_note(1, CTL_HEALTH_INFO, "started", 0, "service %s started", "web");
    ctl_health_note(0, CTL_HEALTH_WARN, "rules-restored", 3, "restored");
    ctl_health_note(2, CTL_HEALTH_ERROR, "fail-open", 42, "passed %d", 42);
    cr_assert_eq(ctl_health_last_seq(), 3);

    cr_assert_eq(ctl_health_list(0, UINT32_MAX, e, 8), 3);
    cr_assert_eq(e[0].seq, 1);
    cr_assert_str_eq(e[0].kind, "started");
    cr_assert_str_eq(e[0].text, "service web started");
    cr_assert_eq(e[2].count, 42);
    cr_assert_eq(e[2].level, CTL_HEALTH_ERROR);
    cr_assert(e[0].time_ns > 0 && e[0].time_ns <= e[2].time_ns);

    cr_assert_eq(ctl_health_list(2, UINT32_MAX, e, 8), 1);
    cr_assert_eq(e[0].seq, 3);
    cr_assert_eq(ctl_health_list(3, UINT32_MAX, e, 8), 0);
}

Test(health, per_service_with_the_box)
{
    struct ctl_health_entry e[8];

    ctl_health_note(1, CTL_HEALTH_INFO, "a", 0, "one");
    ctl_health_note(0, CTL_HEALTH_INFO, "b", 0, "box");
    ctl_health_note(2, CTL_HEALTH_INFO, "c", 0, "two");
    cr_assert_eq(ctl_health_list(0, 2, e, 8), 2);
    cr_assert_str_eq(e[0].kind, "b");
    cr_assert_str_eq(e[1].kind, "c");
    cr_assert_eq(ctl_health_list(0, 1, e, 1), 1);
    cr_assert_str_eq(e[0].kind, "a");
}

Test(health, cut_to_size_and_ring_wraps)
{
    struct ctl_health_entry e[4];
    char big[1000];

    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    ctl_health_note(1, CTL_HEALTH_INFO, big, 0, "%s", big);
    cr_assert_eq(ctl_health_list(0, UINT32_MAX, e, 4), 1);
    cr_assert_eq(strlen(e[0].kind), CTL_HEALTH_KIND_MAX - 1);
    cr_assert_eq(strlen(e[0].text), CTL_HEALTH_TEXT_MAX - 1);

    for (unsigned i = 0; i < CTL_HEALTH_RING + 10; i++)
        ctl_health_note(1, CTL_HEALTH_INFO, "n", i, "n");
    /* after seq 0, the oldest still kept comes first */
    cr_assert_eq(ctl_health_list(0, UINT32_MAX, e, 4), 4);
    cr_assert_eq(e[0].seq, ctl_health_last_seq() - CTL_HEALTH_RING + 1);
    cr_assert_eq(e[1].seq, e[0].seq + 1);
}
