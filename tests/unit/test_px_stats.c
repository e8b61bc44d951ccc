/* Unit tests for the proxy worker's side of controld's statistics (ctl_stats_ingest_proxy() in
 * controld/ctl_stats.c): the proxy counts apart from the nfq worker, so that either restarting
 * never counts the other's numbers twice, while totals, blocked counts and events are one. */
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "controld/ctl_stats.h"
#include "controld/ctl_store.h"

#define SVC 3u
#define FLT 9u

static char dir[64];
static struct ctl_store *st;
static struct ctl_stats *stats;

static void setup(void)
{
    snprintf(dir, sizeof(dir), "/tmp/fgx-test-pxstats-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    cr_assert_eq(ctl_store_open(dir, 0, &st), 0);
    cr_assert_eq(ctl_stats_open(st, &stats), 0);
}

static void teardown(void)
{
    char cmd[128];

    ctl_stats_free(stats);
    ctl_store_close(st);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}

TestSuite(px_stats, .init = setup, .fini = teardown);

/* One worker report: cumulative counters of service SVC and filter FLT, nev events. */
static void report(bool proxy, uint64_t instance, uint64_t accepted, uint64_t blocked,
                   uint64_t open, size_t nev)
{
    struct fgx_dp_service_stat ss = {.service_id = SVC, .accepted = accepted, .packets = accepted,
                                     .flows_active = open};
    struct fgx_dp_filter_stat fs = {.filter_id = FLT, .blocked = blocked};
    struct fgx_dp_event ev[2];
    struct fgx_dp_stats m = {.nservices = 1, .services = &ss, .nfilters = 1, .filters = &fs,
                             .nevents = nev, .events = ev};

    memset(ev, 0, sizeof(ev));
    for (size_t i = 0; i < nev; i++) {
        ev[i].service_id = SVC;
        ev[i].filter_id = FLT;
        ev[i].ipproto = IPPROTO_TCP;
        ev[i].family = 4;
    }
    if (proxy)
        cr_assert_eq(ctl_stats_ingest_proxy(stats, instance, &m, NULL, 0), 0);
    else
        cr_assert_eq(ctl_stats_ingest(stats, instance, &m, NULL, 0), 0);
}

static struct ctl_svc_counters svc(void)
{
    struct ctl_svc_counters c;

    ctl_stats_service(stats, SVC, &c);
    return c;
}

Test(px_stats, both_workers_add_to_one_total)
{
    report(false, 1, 10, 2, 1, 0);
    report(true, 1, 5, 1, 2, 0);
    cr_assert_eq(svc().accepted, 15);
    cr_assert_eq(svc().flows_active, 3);
    cr_assert_eq(ctl_stats_blocked(stats, FLT), 3);
    /* Each grows on its own. */
    report(true, 1, 7, 1, 0, 0);
    report(false, 1, 11, 2, 0, 0);
    cr_assert_eq(svc().accepted, 18);
    cr_assert_eq(svc().flows_active, 0);
}

Test(px_stats, a_restarted_proxy_does_not_count_the_nfq_worker_twice)
{
    report(false, 1, 10, 2, 0, 0);
    report(true, 1, 5, 1, 0, 0);
    report(true, 2, 3, 0, 0, 0); /* a new proxy process counts from zero */
    report(false, 1, 10, 2, 0, 0);
    cr_assert_eq(svc().accepted, 18);
    cr_assert_eq(ctl_stats_blocked(stats, FLT), 3);
    report(false, 2, 1, 1, 0, 0); /* and a new nfq one */
    report(true, 2, 3, 0, 0, 0);
    cr_assert_eq(svc().accepted, 19);
    cr_assert_eq(ctl_stats_blocked(stats, FLT), 4);
}

Test(px_stats, proxy_events_are_numbered_with_the_others)
{
    const struct ctl_event *ev[8];

    report(false, 1, 1, 1, 0, 1);
    report(true, 1, 1, 1, 0, 2);
    cr_assert_eq(ctl_stats_last_seq(stats), 3);
    cr_assert_eq(ctl_stats_events(stats, 0, 0, NULL, 8, ev), 3);
    cr_assert_eq(ctl_stats_events(stats, 1, 0, NULL, 8, ev), 2);
}
