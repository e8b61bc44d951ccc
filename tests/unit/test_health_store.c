/* Unit tests for controld/ctl_health_store.c and the health log's counts (ctl_health.c) against
 * a real LMDB environment in a temporary directory: entries written and read back in order,
 * those noted before the store was open numbered after the stored ones, each service's bounded
 * apart from the box's, a failed write kept in memory, and counts that rise coalesced into one
 * entry per service and kind every CTL_HEALTH_COALESCE_MS. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "controld/ctl_health.h"
#include "controld/ctl_health_store.h"
#include "controld/ctl_store.h"

static char dir[64];
static struct ctl_store *st;
static struct ctl_health_entry buf[CTL_HEALTH_RING];

static void rm_dir(void)
{
    char path[128];

    snprintf(path, sizeof(path), "%s/data.mdb", dir);
    unlink(path);
    snprintf(path, sizeof(path), "%s/lock.mdb", dir);
    unlink(path);
    rmdir(dir);
}

static void open_store(size_t mapsize)
{
    snprintf(dir, sizeof(dir), "/tmp/fgx-test-health-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    cr_assert_eq(ctl_store_open(dir, mapsize, &st), 0);
}

static void setup(void)
{
    ctl_health_reset();
    open_store(0);
}

static void teardown(void)
{
    ctl_store_close(st);
    st = NULL;
    rm_dir();
}

TestSuite(health_store, .init = setup, .fini = teardown);

/* A restart: the store closed and opened again, the memory empty. */
static void restart(void)
{
    ctl_store_close(st);
    ctl_health_reset();
    cr_assert_eq(ctl_store_open(dir, 0, &st), 0);
}

/* A first start: nothing stored yet (under UBSan, sorting the empty list once stopped
 * controld at start). */
Test(health_store, an_empty_store_loads)
{
    cr_assert_eq(ctl_health_load(st), 0);
    cr_assert_eq(ctl_health_list(0, UINT32_MAX, buf, CTL_HEALTH_RING), 0);
}

Test(health_store, written_and_restored_in_order_early_entries_after)
{
    size_t n;

    ctl_health_note(1, CTL_HEALTH_INFO, "added", 0, "service web added");
    ctl_health_note(0, CTL_HEALTH_WARN, "worker-restart", 0, "nfqworker restarted");
    ctl_health_note(1, CTL_HEALTH_ERROR, "midstream", 12, "12 passed");
    cr_assert_eq(ctl_health_save(st, 1000, false), 0);
    cr_assert_eq(ctl_health_unsaved(buf, CTL_HEALTH_RING), 0);

    restart();
    /* noted before the store was open (early start-up): kept, numbered after the stored */
    ctl_health_note(0, CTL_HEALTH_INFO, "controld-started", 0, "started");
    cr_assert_eq(ctl_health_load(st), 0);
    n = ctl_health_list(0, UINT32_MAX, buf, CTL_HEALTH_RING);
    cr_assert_eq(n, 4);
    cr_assert_eq(buf[0].seq, 1);
    cr_assert_str_eq(buf[0].kind, "added");
    cr_assert_str_eq(buf[0].text, "service web added");
    cr_assert_eq(buf[1].level, CTL_HEALTH_WARN);
    cr_assert_eq(buf[1].service_id, 0);
    cr_assert_eq(buf[2].count, 12);
    cr_assert_eq(buf[2].level, CTL_HEALTH_ERROR);
    cr_assert(buf[0].time_ns > 0 && buf[0].time_ns <= buf[2].time_ns);
    cr_assert_eq(buf[3].seq, 4);
    cr_assert_str_eq(buf[3].kind, "controld-started");
    cr_assert_eq(ctl_health_last_seq(), 4);
    /* only the early one is still to be written; the next note continues the numbering */
    cr_assert_eq(ctl_health_unsaved(buf, CTL_HEALTH_RING), 1);
    cr_assert_eq(buf[0].seq, 4);
    ctl_health_note(1, CTL_HEALTH_INFO, "stopped", 0, "stopped");
    cr_assert_eq(ctl_health_last_seq(), 5);
    cr_assert_eq(ctl_health_save(st, 2000, false), 0);

    restart();
    cr_assert_eq(ctl_health_load(st), 0);
    cr_assert_eq(ctl_health_list(0, 1, buf, CTL_HEALTH_RING), 5);
    cr_assert_str_eq(buf[4].kind, "stopped");
}

Test(health_store, bounded_per_service_and_for_the_box)
{
    size_t n, of1 = 0, of0 = 0, of2 = 0;

    for (unsigned i = 0; i < CTL_HEALTH_KEEP + 40; i++) {
        ctl_health_note(1, CTL_HEALTH_INFO, "n", i, "one %u", i);
        if (i % 100 == 0)
            cr_assert_eq(ctl_health_save(st, 1000 + i, false), 0);
    }
    for (unsigned i = 0; i < 7; i++)
        ctl_health_note(0, CTL_HEALTH_INFO, "box", i, "box %u", i);
    ctl_health_note(2, CTL_HEALTH_INFO, "two", 0, "two");
    cr_assert_eq(ctl_health_save(st, 9000, false), 0);

    restart();
    cr_assert_eq(ctl_health_load(st), 0);
    n = ctl_health_list(0, UINT32_MAX, buf, CTL_HEALTH_RING);
    for (size_t i = 0; i < n; i++) {
        of1 += buf[i].service_id == 1;
        of0 += buf[i].service_id == 0;
        of2 += buf[i].service_id == 2;
        if (i > 0)
            cr_assert_gt(buf[i].seq, buf[i - 1].seq);
    }
    /* the noisy service lost its oldest, the box and the quiet service nothing */
    cr_assert_eq(of1, CTL_HEALTH_KEEP);
    cr_assert_eq(of0, 7);
    cr_assert_eq(of2, 1);
    cr_assert_eq(buf[0].count, 40, "the oldest kept of service 1 is #%llu",
                 (unsigned long long)buf[0].count);
    cr_assert_eq(ctl_health_last_seq(), CTL_HEALTH_KEEP + 40 + 7 + 1);
}

Test(health_store, a_failed_write_keeps_the_entries_in_memory)
{
    uint64_t now = 1000;
    int rv = 0;

    ctl_store_close(st);
    rm_dir();
    open_store(256 * 1024);
    /* distinct services, so that no trim makes room: the map fills */
    for (unsigned round = 0; round < 200 && rv == 0; round++) {
        for (unsigned i = 0; i < 50; i++)
            ctl_health_note(round * 50 + i + 1, CTL_HEALTH_INFO, "fill", 0, "%0200u", i);
        rv = ctl_health_save(st, now, false);
        now += 10;
    }
    cr_assert_eq(rv, -EFBIG);
    /* still listed, still to be written; retried only after CTL_HEALTH_RETRY_MS */
    cr_assert_gt(ctl_health_unsaved(buf, CTL_HEALTH_RING), 0);
    cr_assert_eq(ctl_health_list(ctl_health_last_seq() - 1, UINT32_MAX, buf, 4), 1);
    cr_assert_eq(ctl_health_save(st, now + 10, false), -EAGAIN);
    cr_assert_eq(ctl_health_save(st, now + CTL_HEALTH_RETRY_MS, false), -EFBIG);
}

/* ---- counts ---- */

static size_t of_kind(const char *kind, struct ctl_health_entry *out, size_t max)
{
    size_t n = ctl_health_list(0, UINT32_MAX, buf, CTL_HEALTH_RING), k = 0;

    for (size_t i = 0; i < n && k < max; i++)
        if (strcmp(buf[i].kind, kind) == 0)
            out[k++] = buf[i];
    return k;
}

Test(health_store, counts_coalesce_per_service_and_kind)
{
    struct ctl_health_entry e[8];
    uint64_t t0 = 100000;

    /* the first rise is noted at once */
    ctl_health_count(0, CTL_HEALTH_ERROR, "fail-open", "packets passed unfiltered", 312, t0);
    cr_assert_eq(of_kind("fail-open", e, 8), 1);
    cr_assert_eq(e[0].count, 312);
    cr_assert_str_eq(e[0].text, "312 packets passed unfiltered in the last 5 s");
    cr_assert_eq(e[0].level, CTL_HEALTH_ERROR);
    /* within the window: added up, not noted */
    ctl_health_count(0, CTL_HEALTH_ERROR, "fail-open", "packets passed unfiltered", 10, t0 + 1000);
    ctl_health_count(0, CTL_HEALTH_ERROR, "fail-open", "packets passed unfiltered", 5, t0 + 2000);
    ctl_health_tick(t0 + 4999);
    cr_assert_eq(of_kind("fail-open", e, 8), 1);
    /* another service, another kind: entries of their own at once */
    ctl_health_count(3, CTL_HEALTH_WARN, "fail-open", "packets passed unfiltered", 1, t0 + 2000);
    ctl_health_count(0, CTL_HEALTH_WARN, "limit-conns", "refused", 2, t0 + 2000);
    cr_assert_eq(of_kind("fail-open", e, 8), 2);
    cr_assert_eq(e[1].service_id, 3);
    cr_assert_eq(of_kind("limit-conns", e, 8), 1);
    /* the window over: one entry with the sum */
    ctl_health_tick(t0 + 5000);
    cr_assert_eq(of_kind("fail-open", e, 8), 3);
    cr_assert_eq(e[2].service_id, 0);
    cr_assert_eq(e[2].count, 15);
    cr_assert_str_eq(e[2].text, "15 packets passed unfiltered in the last 5 s");
    /* nothing rose: nothing noted; a rise long after is noted at once again */
    ctl_health_tick(t0 + 20000);
    cr_assert_eq(of_kind("fail-open", e, 8), 3);
    ctl_health_count(0, CTL_HEALTH_ERROR, "fail-open", "packets passed unfiltered", 0, t0 + 21000);
    cr_assert_eq(of_kind("fail-open", e, 8), 3);
    ctl_health_count(0, CTL_HEALTH_ERROR, "fail-open", "packets passed unfiltered", 7, t0 + 30000);
    cr_assert_eq(of_kind("fail-open", e, 8), 4);
    cr_assert_eq(e[3].count, 7);
}

Test(health_store, a_count_pending_long_says_its_window)
{
    struct ctl_health_entry e[4];
    uint64_t t0 = 50000;

    ctl_health_count(1, CTL_HEALTH_WARN, "limit", "refused", 1, t0);
    /* rising at t0 + 1 s, and noted by the first tick after the window, 8 s after */
    ctl_health_count(1, CTL_HEALTH_WARN, "limit", "refused", 4, t0 + 1000);
    ctl_health_tick(t0 + 9000);
    cr_assert_eq(of_kind("limit", e, 4), 2);
    cr_assert_str_eq(e[1].text, "4 refused in the last 8 s");
}
