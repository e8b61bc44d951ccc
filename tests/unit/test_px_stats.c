/* Unit tests for the proxy worker's statistics: px_stats_collect() (proxyworker/px_stats.c) sums
 * the threads' counters into a STATS with only the worker-wide fields that mean the same on a
 * proxy, and controld's side (ctl_stats_ingest_proxy() in controld/ctl_stats.c) counts the
 * proxy apart from the nfq worker, so that either restarting never counts the other's numbers
 * twice, while totals, blocked counts and events are one, and keeps the proxy's own numbers
 * (connections open, memory) for the worker list. */
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "controld/ctl_stats.h"
#include "controld/ctl_store.h"
#include "proxyworker/px.h"
#include "proxyworker/px_stats.h"

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

/* ---- the worker's side: px_stats_collect() ---- */

/* A worker with n threads that were never started: only their counters and event rings. */
static struct px_worker *worker_new(unsigned n)
{
    struct px_worker *w = calloc(1, sizeof(*w));

    cr_assert_not_null(w);
    w->nthreads = n;
    w->threads = calloc(n, sizeof(*w->threads));
    cr_assert_not_null(w->threads);
    for (unsigned i = 0; i < n; i++) {
        w->threads[i].w = w;
        w->threads[i].idx = i;
    }
    return w;
}

static void worker_free(struct px_worker *w)
{
    free(w->threads);
    free(w);
}

static void event_add(struct px_thread *t, uint64_t time_ns)
{
    struct fgx_dp_event *e = fgx_evring_claim(&t->events, 1);

    cr_assert_not_null(e);
    memset(e, 0, sizeof(*e));
    e->time_ns = time_ns;
    e->service_id = SVC;
    e->filter_id = FLT;
    e->family = 4;
    fgx_evring_commit(&t->events);
}

static uint64_t statm_rss_pages(void)
{
    unsigned long size = 0, rss = 0;
    FILE *f = fopen("/proc/self/statm", "re");

    cr_assert_not_null(f);
    cr_assert_eq(fscanf(f, "%lu %lu", &size, &rss), 2);
    fclose(f);
    return rss;
}

Test(px_stats, collect_reports_open_connections_and_memory)
{
    struct px_worker *w = worker_new(2);
    struct fgx_dp_msg m = {.type = FGX_DP_STATS};
    struct fgx_dp_stats *s = &m.u.stats;
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE), before = statm_rss_pages();

    w->threads[0].ctr.conns = 2;
    w->threads[1].ctr.conns = 3;
    cr_assert_eq(px_stats_collect(w, s), 0);
    cr_assert_eq(s->flows, 5, "flows: the proxied connections open on every thread");
    cr_assert_gt(s->rss_bytes, 0);
    cr_assert_eq(s->rss_bytes % page, 0, "rss_bytes: whole pages from /proc/self/statm");
    /* The test process's own resident size, within what this test allocates around it. */
    cr_assert_geq(s->rss_bytes, before * page / 2);
    cr_assert_leq(s->rss_bytes, (statm_rss_pages() + 1024) * page);
    fgx_dp_msg_release(&m);
    worker_free(w);
}

/* The proxy's own failures are not NFQUEUE queue drops, cut packets, kernel verdict errors or
 * undecodable packets: none of them may show up in those fields. */
Test(px_stats, proxy_failures_are_not_reported_as_nfqueue_counters)
{
    struct px_worker *w = worker_new(2);
    struct fgx_dp_msg m = {.type = FGX_DP_STATS};
    struct fgx_dp_stats *s = &m.u.stats;

    for (unsigned i = 0; i < 2; i++) {
        struct px_counters *c = &w->threads[i].ctr;

        c->limit_refused = 4;
        c->unclassified = 3;
        c->scan_errors = 2;
        c->connect_failed = 1;
    }
    cr_assert_eq(px_stats_collect(w, s), 0);
    cr_assert_eq(s->queue_drops, 0);
    cr_assert_eq(s->truncated, 0);
    cr_assert_eq(s->verdict_errors, 0);
    cr_assert_eq(s->malformed, 0);
    cr_assert_eq(s->flows, 0);
    cr_assert_eq(s->conns_refused, 8, "their own fields instead");
    cr_assert_eq(s->unclassified, 6);
    cr_assert_eq(s->scan_errors, 4);
    cr_assert_eq(s->connect_failed, 2);
    fgx_dp_msg_release(&m);
    worker_free(w);
}

Test(px_stats, own_counters_summed_over_threads)
{
    struct px_worker *w = worker_new(3);
    struct px_own_stats own;

    for (unsigned i = 0; i < 3; i++) {
        struct px_counters *c = &w->threads[i].ctr;

        c->limit_refused = 1 + i;
        c->unclassified = 10 * (1 + i);
        c->connect_failed = 100 * (1 + i);
        c->scan_errors = 1000 * (1 + i);
        c->conns = 7; /* open connections are no failure */
    }
    memset(&own, 0xff, sizeof(own));
    px_stats_own(w, &own);
    cr_assert_eq(own.conns_refused, 6);
    cr_assert_eq(own.unclassified, 60);
    cr_assert_eq(own.connect_failed, 600);
    cr_assert_eq(own.scan_errors, 6000);
    worker_free(w);
}

Test(px_stats, collect_sums_threads_and_merges_events_in_time_order)
{
    struct px_worker *w = worker_new(2);
    struct fgx_dp_msg m = {.type = FGX_DP_STATS};
    struct fgx_dp_stats *s = &m.u.stats;
    struct px_svc_ctr *a = px_stats_svc(&w->threads[0].ctr, SVC);
    struct px_svc_ctr *b = px_stats_svc(&w->threads[1].ctr, SVC);

    cr_assert_eq(px_stats_svc(&w->threads[0].ctr, SVC), a, "one slot per service");
    a->accepted = 3;
    a->bytes[0] = 300;
    a->open = 1;
    b->accepted = 4;
    b->bytes[1] = 400;
    b->open = 2;
    px_stats_filter_blocked(&w->threads[0].ctr, FLT);
    px_stats_filter_blocked(&w->threads[1].ctr, FLT);
    px_stats_filter_blocked(&w->threads[1].ctr, FLT);
    event_add(&w->threads[0], 30);
    event_add(&w->threads[1], 10);
    event_add(&w->threads[1], 20);
    cr_assert_eq(px_stats_collect(w, s), 0);
    cr_assert_eq(s->nservices, 1);
    cr_assert_eq(s->services[0].service_id, SVC);
    cr_assert_eq(s->services[0].accepted, 7);
    cr_assert_eq(s->services[0].bytes, 700);
    cr_assert_eq(s->services[0].bytes_c2s, 300, "the clients' bytes");
    cr_assert_eq(s->services[0].bytes_s2c, 400, "the servers' bytes");
    cr_assert_eq(s->services[0].flows_new, 7, "every connection relayed");
    cr_assert_eq(s->services[0].flows_active, 3);
    cr_assert_eq(s->nfilters, 1);
    cr_assert_eq(s->filters[0].blocked, 3);
    cr_assert_eq(s->nevents, 3);
    cr_assert_eq(s->events[0].time_ns, 10);
    cr_assert_eq(s->events[1].time_ns, 20);
    cr_assert_eq(s->events[2].time_ns, 30);
    fgx_dp_msg_release(&m);
    /* Drained: the next STATS has no event twice, while counters stay cumulative. */
    m = (struct fgx_dp_msg){.type = FGX_DP_STATS};
    cr_assert_eq(px_stats_collect(w, s), 0);
    cr_assert_eq(s->nevents, 0);
    cr_assert_eq(s->filters[0].blocked, 3);
    fgx_dp_msg_release(&m);
    worker_free(w);
}

/* ---- controld's side: the proxy worker's own numbers ---- */

static void report_worker(bool proxy, uint64_t instance, uint64_t flows, uint64_t rss,
                          uint64_t open)
{
    struct fgx_dp_service_stat ss = {.service_id = SVC, .flows_active = open};
    struct fgx_dp_stats m = {.nservices = 1, .services = &ss, .flows = flows, .rss_bytes = rss,
                             .queue_drops = proxy ? 0 : 6, .conns_refused = proxy ? flows : 0};

    if (proxy)
        cr_assert_eq(ctl_stats_ingest_proxy(stats, instance, &m, NULL, 0), 0);
    else
        cr_assert_eq(ctl_stats_ingest(stats, instance, &m, NULL, 0), 0);
}

Test(px_stats, proxy_worker_numbers_kept_apart_from_the_nfq_worker)
{
    const struct ctl_worker_counters *px = ctl_stats_px_worker(stats);
    const struct ctl_worker_counters *nfq = ctl_stats_worker(stats);

    cr_assert_not(px->valid, "nothing reported yet");
    report_worker(false, 1, 7, 1000, 0);
    cr_assert_not(px->valid, "an nfq report says nothing of the proxy");
    report_worker(true, 4, 2, 5000, 2);
    cr_assert(px->valid);
    cr_assert_eq(px->instance, 4);
    cr_assert_eq(px->flows, 2);
    cr_assert_eq(px->rss_bytes, 5000);
    cr_assert_eq(px->conns_refused, 2);
    cr_assert_eq(nfq->flows, 7, "the nfq worker's numbers stay its own");
    cr_assert_eq(nfq->rss_bytes, 1000);
    cr_assert_eq(nfq->instance, 1);
    cr_assert_eq(nfq->queue_drops_total, 6);
    /* The latest report wins: these are levels, not totals. */
    report_worker(true, 4, 1, 6000, 1);
    cr_assert_eq(px->flows, 1);
    cr_assert_eq(px->rss_bytes, 6000);
    report_worker(true, 5, 0, 3000, 0);
    cr_assert_eq(px->instance, 5, "a new proxy process owns the numbers");
    cr_assert_eq(px->flows, 0);
}

Test(px_stats, proxy_worker_down_voids_its_numbers_only)
{
    report_worker(false, 1, 7, 1000, 1);
    report_worker(true, 1, 2, 5000, 2);
    cr_assert_eq(svc().flows_active, 3);
    ctl_stats_px_worker_down(stats);
    cr_assert_not(ctl_stats_px_worker(stats)->valid);
    cr_assert_eq(ctl_stats_px_worker(stats)->flows, 0);
    cr_assert_eq(ctl_stats_px_worker(stats)->rss_bytes, 0);
    cr_assert_eq(svc().flows_active, 1, "no connection is relayed by a dead proxy");
    cr_assert(ctl_stats_worker(stats)->valid);
    cr_assert_eq(ctl_stats_worker(stats)->flows, 7);
}
