/* Unit tests for controld/ctl_stats.c against a real LMDB store: totals across worker restarts
 * (a new instance counts from zero) and controld restarts (persisted), the bounded write rate,
 * the event ring (numbering, bound, queries) and its persistence. STATS are built by hand, as
 * the worker would send them. */
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "controld/ctl_rates.h"
#include "controld/ctl_stats.h"
#include "controld/ctl_store.h"

static char dir[64];
static struct ctl_store *st;
static struct ctl_stats *stats;
static uint32_t svc_id, flt_id;

/* A retention small enough to overrun quickly (controld's default is CTL_EVENTS_KEEP). */
#define TEST_KEEP 1000

static uint32_t add_service(const char *name, uint16_t port)
{
    struct ctl_service s = {.ipproto = IPPROTO_TCP, .port = port, .active = true};
    struct ctl_txn *t;

    snprintf(s.name, sizeof(s.name), "%s", name);
    cr_assert_eq(ctl_txn_begin(st, true, &t), 0);
    cr_assert_eq(ctl_store_service_put(t, &s), 0);
    cr_assert_eq(ctl_txn_commit(t), 0);
    return s.id;
}

static uint32_t add_filter(uint32_t service_id)
{
    struct ctl_filter f = {.service_id = service_id, .dir = FGX_DIR_BOTH, .active = true};
    struct ctl_txn *t;

    f.regex = strdup("evil[0-9]+");
    cr_assert_eq(ctl_txn_begin(st, true, &t), 0);
    cr_assert_eq(ctl_store_filter_put(t, &f), 0);
    cr_assert_eq(ctl_txn_commit(t), 0);
    ctl_filter_release(&f);
    return f.id;
}

static void setup(void)
{
    snprintf(dir, sizeof(dir), "/tmp/fgx-test-stats-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    cr_assert_eq(ctl_store_open(dir, 0, &st), 0);
    svc_id = add_service("web", 8080);
    flt_id = add_filter(svc_id);
    cr_assert_eq(ctl_stats_open_keep(st, TEST_KEEP, &stats), 0);
}

static void teardown_files(void)
{
    char path[128];

    snprintf(path, sizeof(path), "%s/data.mdb", dir);
    unlink(path);
    snprintf(path, sizeof(path), "%s/lock.mdb", dir);
    unlink(path);
    rmdir(dir);
}

static void teardown(void)
{
    ctl_stats_free(stats);
    stats = NULL;
    ctl_store_close(st);
    st = NULL;
    teardown_files();
}

TestSuite(ctl_stats, .init = setup, .fini = teardown);

/* One STATS with one service and one filter, cumulative values as a worker reports them. */
static void feed(uint64_t instance, uint64_t packets, uint64_t blocked, uint64_t flows,
                 uint64_t queue_drops)
{
    struct fgx_dp_service_stat ss = {.service_id = svc_id,
                                     .packets = packets,
                                     .bytes = packets * 100,
                                     .accepted = packets - blocked,
                                     .dropped = blocked,
                                     .flows_active = flows};
    struct fgx_dp_filter_stat fs = {.filter_id = flt_id, .blocked = blocked};
    struct fgx_dp_stats m = {.nservices = 1,
                             .services = &ss,
                             .nfilters = 1,
                             .filters = &fs,
                             .queue_drops = queue_drops,
                             .rss_bytes = 4096};

    cr_assert_eq(ctl_stats_ingest(stats, instance, &m, NULL, 0), 0);
}

static uint64_t packets_of(const struct ctl_stats *s)
{
    struct ctl_svc_counters c;

    ctl_stats_service(s, svc_id, &c);
    return c.packets;
}

static void reopen(void)
{
    ctl_stats_free(stats);
    stats = NULL;
    cr_assert_eq(ctl_stats_open_keep(st, TEST_KEEP, &stats), 0);
}

Test(ctl_stats, totals_survive_worker_restart)
{
    struct ctl_svc_counters c;

    feed(1, 10, 2, 3, 7);
    feed(1, 15, 2, 4, 9);
    ctl_stats_service(stats, svc_id, &c);
    cr_assert_eq(c.packets, 15, "cumulative values are not added twice");
    cr_assert_eq(c.bytes, 1500);
    cr_assert_eq(c.accepted, 13);
    cr_assert_eq(c.dropped, 2);
    cr_assert_eq(c.flows_active, 4, "flows_active is the last value, not a total");
    cr_assert_eq(ctl_stats_blocked(stats, flt_id), 2);

    /* A new process (instance 2) starts again from zero. */
    feed(2, 4, 1, 1, 1);
    ctl_stats_service(stats, svc_id, &c);
    cr_assert_eq(c.packets, 19);
    cr_assert_eq(c.dropped, 3);
    cr_assert_eq(ctl_stats_blocked(stats, flt_id), 3);
    cr_assert_eq(ctl_stats_worker(stats)->queue_drops, 1, "the worker's own number");
    cr_assert_eq(ctl_stats_worker(stats)->queue_drops_total, 10, "the total across restarts");
    cr_assert_eq(ctl_stats_worker(stats)->instance, 2);

    /* A counter that goes back within one instance was reset: all of it is new. */
    feed(2, 2, 1, 1, 1);
    cr_assert_eq(packets_of(stats), 21);
}

Test(ctl_stats, worker_down_clears_flows_not_totals)
{
    struct ctl_svc_counters c;

    struct fgx_dp_stats px = {.flows = 2, .rss_bytes = 8192};

    feed(1, 10, 1, 5, 0);
    cr_assert_eq(ctl_stats_ingest_proxy(stats, 1, &px, NULL, 0), 0);
    ctl_stats_worker_down(stats);
    ctl_stats_service(stats, svc_id, &c);
    cr_assert_eq(c.flows_active, 0);
    cr_assert_eq(c.packets, 10);
    cr_assert_not(ctl_stats_worker(stats)->valid);
    cr_assert(ctl_stats_px_worker(stats)->valid, "the proxy worker is another process");
    cr_assert_eq(ctl_stats_px_worker(stats)->flows, 2);
}

Test(ctl_stats, totals_survive_controld_restart)
{
    feed(1, 10, 2, 3, 5);
    cr_assert_eq(ctl_stats_flush(stats, st, 100000, true), 0);
    reopen();
    cr_assert_eq(packets_of(stats), 10);
    cr_assert_eq(ctl_stats_blocked(stats, flt_id), 2);
    cr_assert_eq(ctl_stats_worker(stats)->queue_drops_total, 5);
    /* The new controld runs a new worker (another id), counting from zero. */
    feed(2, 3, 1, 0, 0);
    cr_assert_eq(packets_of(stats), 13);
    cr_assert_eq(ctl_stats_blocked(stats, flt_id), 3);
}

/* Issue 24: a controld that dies uncleanly leaves its workers running; the next one adopts
 * them, and they report counts since their own start. The totals go on from what was stored
 * with the worker's counts at that moment: nothing falls back, nothing counts twice. */
Test(ctl_stats, adopted_worker_continues_from_the_stored_bases)
{
    const uint64_t wid = 0x1234abcd5678ull;

    feed(wid, 10, 4, 1, 2);
    cr_assert_eq(ctl_stats_flush(stats, st, 100000, true), 0);
    /* more comes after the last flush, then controld dies (nothing more is written) */
    feed(wid, 12, 6, 1, 2);
    cr_assert_eq(ctl_stats_blocked(stats, flt_id), 6);
    reopen();
    cr_assert_eq(ctl_stats_blocked(stats, flt_id), 4, "the store has the flushed total");
    /* the same process, adopted: 9 blocks since its start, 3 of them while controld was away */
    feed(wid, 20, 9, 1, 3);
    cr_assert_eq(ctl_stats_blocked(stats, flt_id), 9,
                 "total after = total seen before (6) + blocks meanwhile (3)");
    cr_assert_eq(packets_of(stats), 20);
    cr_assert_eq(ctl_stats_worker(stats)->queue_drops_total, 3);
    /* and it keeps growing from there */
    feed(wid, 21, 10, 1, 3);
    cr_assert_eq(ctl_stats_blocked(stats, flt_id), 10);
}

Test(ctl_stats, new_worker_after_restart_counts_from_zero_on_the_totals)
{
    feed(0x1111, 10, 4, 1, 0);
    cr_assert_eq(ctl_stats_flush(stats, st, 100000, true), 0);
    reopen();
    /* another process: the stored bases are not its own */
    feed(0x2222, 5, 2, 1, 0);
    cr_assert_eq(ctl_stats_blocked(stats, flt_id), 6);
    cr_assert_eq(packets_of(stats), 15);
    /* bases are used once: a later report of the first id is a new process too */
    feed(0x1111, 1, 1, 1, 0);
    cr_assert_eq(ctl_stats_blocked(stats, flt_id), 7);
}

Test(ctl_stats, bases_are_saved_with_each_flush)
{
    feed(0x77, 10, 4, 1, 0);
    cr_assert_eq(ctl_stats_flush(stats, st, 100000, true), 0);
    feed(0x77, 30, 8, 1, 0);
    cr_assert_eq(ctl_stats_flush(stats, st, 200000, true), 0);
    reopen();
    cr_assert_eq(ctl_stats_blocked(stats, flt_id), 8);
    feed(0x77, 31, 9, 1, 0);
    cr_assert_eq(ctl_stats_blocked(stats, flt_id), 9, "the second flush's bases, not the first's");
    cr_assert_eq(packets_of(stats), 31);
}

/* Issue 25's soak: a worker killed, its successor's first report folded, then controld killed
 * before its next periodic flush. What the killed worker counted since the last flush was in
 * controld's memory only; the adopted successor cannot give it back, so the totals fell (blocked
 * 46 -> 45). A new process makes the next flush due at once, whatever the write rate. */
Test(ctl_stats, replaced_worker_counts_flushed_at_once)
{
    feed(0x1, 10, 4, 1, 0);
    cr_assert_eq(ctl_stats_flush(stats, st, 100000, true), 0);
    feed(0x1, 12, 6, 1, 0); /* then that worker is killed */
    feed(0x2, 1, 1, 1, 0);  /* its successor's first report */
    cr_assert_eq(ctl_stats_blocked(stats, flt_id), 7);
    cr_assert_eq(ctl_stats_flush(stats, st, 100001, false), 0);
    reopen(); /* controld killed, started again: it adopts the successor */
    cr_assert_eq(ctl_stats_blocked(stats, flt_id), 7, "the gone worker's blocks were written");
    cr_assert_eq(packets_of(stats), 13);
    feed(0x2, 3, 2, 1, 0);
    cr_assert_eq(ctl_stats_blocked(stats, flt_id), 8, "and the adopted one goes on from its base");
    cr_assert_eq(packets_of(stats), 15);
    /* the same process goes on: the rate bound holds again */
    cr_assert_eq(ctl_stats_flush(stats, st, 200000, false), 0);
    feed(0x2, 4, 2, 1, 0);
    cr_assert_eq(ctl_stats_flush(stats, st, 200001, false), 0);
    reopen();
    cr_assert_eq(packets_of(stats), 15, "not written again before CTL_STATS_FLUSH_MS");
}

Test(ctl_stats, counters_written_at_a_bounded_rate)
{
    struct ctl_stats *other;

    feed(1, 10, 0, 0, 0);
    cr_assert_eq(ctl_stats_flush(stats, st, 100000, false), 0); /* first: due at once */
    feed(1, 20, 0, 0, 0);
    cr_assert_eq(ctl_stats_flush(stats, st, 100000 + CTL_STATS_FLUSH_MS - 1, false), 0);
    cr_assert_eq(ctl_stats_open(st, &other), 0);
    cr_assert_eq(packets_of(other), 10, "not written again before CTL_STATS_FLUSH_MS");
    ctl_stats_free(other);
    cr_assert_eq(ctl_stats_flush(stats, st, 100000 + CTL_STATS_FLUSH_MS, false), 0);
    cr_assert_eq(ctl_stats_open(st, &other), 0);
    cr_assert_eq(packets_of(other), 20);
    ctl_stats_free(other);
}

Test(ctl_stats, removed_service_and_filter_not_saved)
{
    struct ctl_txn *t;
    struct ctl_svc_totals saved;
    uint64_t b;

    feed(1, 10, 2, 0, 0);
    cr_assert_eq(ctl_stats_flush(stats, st, 100000, true), 0);
    cr_assert_eq(ctl_txn_begin(st, true, &t), 0);
    cr_assert_eq(ctl_store_service_del(t, svc_id), 0);
    cr_assert_eq(ctl_txn_commit(t), 0);
    feed(1, 11, 3, 0, 0); /* the worker still reports it until the next generation */
    cr_assert_eq(ctl_stats_flush(stats, st, 200000, true), 0);
    /* Kept in memory, as the base of the worker's counts should an undo bring it back. */
    cr_assert_eq(packets_of(stats), 11, "kept in memory, unsaved");
    cr_assert_eq(ctl_txn_begin(st, false, &t), 0);
    cr_assert_eq(ctl_store_svc_totals_get(t, svc_id, &saved), 0);
    cr_assert_eq(saved.packets, 0, "not written back for a removed service");
    cr_assert_eq(ctl_store_blocked_get(t, flt_id, &b), 0);
    cr_assert_eq(b, 0);
    ctl_txn_abort(t);
}

static void feed_events(uint64_t instance, size_t n, uint32_t service_id, uint64_t t0)
{
    struct fgx_dp_event *ev = calloc(n, sizeof(*ev));
    struct ctl_service svcs[2] = {{.id = 1, .name = "web"}, {.id = 2, .name = "dns"}};
    struct fgx_dp_stats m = {.nevents = n, .events = ev, .events_lost = 1};

    cr_assert_not_null(ev);
    for (size_t i = 0; i < n; i++) {
        ev[i] = (struct fgx_dp_event){.time_ns = t0 + i,
                                      .service_id = service_id,
                                      .filter_id = 9,
                                      .dir = FGX_DIR_S2C,
                                      .ipproto = IPPROTO_TCP,
                                      .family = 4,
                                      .src = {10, 0, 0, 1},
                                      .dst = {10, 0, 0, 2},
                                      .sport = 8080,
                                      .dport = 40000,
                                      .excerpt_len = 4};
        memcpy(ev[i].excerpt, "fl\0g", 4);
    }
    cr_assert_eq(ctl_stats_ingest(stats, instance, &m, svcs, 2), 0);
    free(ev);
}

Test(ctl_stats, events_numbered_bounded_and_queried)
{
    const struct ctl_event *out[TEST_KEEP];
    size_t n;

    cr_assert_eq(ctl_stats_last_seq(stats), 0);
    cr_assert_eq(ctl_stats_events(stats, 0, 0, NULL, 10, out), 0);
    feed_events(1, 600, 1, 1000);
    feed_events(1, 405, 2, 5000);
    cr_assert_eq(ctl_stats_last_seq(stats), 1005);
    cr_assert_eq(ctl_stats_worker(stats)->events_lost_total, 2);

    n = ctl_stats_events(stats, 0, 0, NULL, TEST_KEEP, out);
    cr_assert_eq(n, TEST_KEEP, "only the newest `keep` are kept");
    cr_assert_eq(out[0]->seq, 6);
    cr_assert_eq(out[n - 1]->seq, 1005);

    n = ctl_stats_events(stats, 0, 0, NULL, 3, out);
    cr_assert_eq(n, 3);
    cr_assert_eq(out[0]->seq, 1003, "the newest N, oldest first");
    cr_assert_eq(out[2]->seq, 1005);

    n = ctl_stats_events(stats, 1001, 0, NULL, 100, out);
    cr_assert_eq(n, 4, "only after after_seq");
    cr_assert_eq(out[0]->seq, 1002);
    cr_assert_eq(ctl_stats_events(stats, 1005, 0, NULL, 100, out), 0);

    n = ctl_stats_events(stats, 0, 1, NULL, TEST_KEEP, out);
    cr_assert_eq(n, 595, "service 1's kept events: seq 6..600");
    cr_assert_eq(out[0]->seq, 6);
    cr_assert_str_eq(out[0]->service, "web");
    n = ctl_stats_events(stats, 0, 0, "dns", 2, out);
    cr_assert_eq(n, 2, "by the name the event was reported under");
    cr_assert_eq(out[1]->seq, 1005);
    cr_assert_eq(out[1]->service_id, 2);
    /* An s2c block's bytes came from the server (10.0.0.1:8080): the event names the client,
     * the attacker, as src, and the service as dst. */
    cr_assert_str_eq(out[1]->src, "10.0.0.2");
    cr_assert_eq(out[1]->sport, 40000);
    cr_assert_str_eq(out[1]->dst, "10.0.0.1");
    cr_assert_eq(out[1]->dport, 8080);
    cr_assert_eq(out[1]->dir, FGX_DIR_S2C);
    cr_assert_eq(out[1]->excerpt_len, 4);
    cr_assert_eq(memcmp(out[1]->excerpt, "fl\0g", 4), 0);
}

Test(ctl_stats, events_persist_and_seq_never_reused)
{
    struct fgx_dp_event ev = {.time_ns = 77,
                              .service_id = 42, /* unknown: no name */
                              .filter_id = 3,
                              .dir = FGX_DIR_C2S,
                              .ipproto = IPPROTO_UDP,
                              .family = 6,
                              .src = {0xfd, [15] = 1},
                              .dst = {0xfd, [15] = 2},
                              .sport = 5353,
                              .dport = 53};
    struct fgx_dp_stats m = {.nevents = 1, .events = &ev};
    const struct ctl_event *out[8];
    size_t n;

    feed_events(1, 3, 1, 1000);
    cr_assert_eq(ctl_stats_ingest(stats, 1, &m, NULL, 0), 0);
    /* Events are written at the next flush whatever the counters' pace. */
    cr_assert_eq(ctl_stats_flush(stats, st, 0, false), 0);
    reopen();
    cr_assert_eq(ctl_stats_last_seq(stats), 4);
    n = ctl_stats_events(stats, 0, 0, NULL, 8, out);
    cr_assert_eq(n, 4);
    cr_assert_eq(out[0]->seq, 1);
    cr_assert_str_eq(out[0]->service, "web");
    cr_assert_eq(out[0]->time_ns, 1000);
    cr_assert_eq(memcmp(out[0]->excerpt, "fl\0g", 4), 0);
    cr_assert_eq(out[3]->seq, 4);
    cr_assert_str_eq(out[3]->service, "");
    cr_assert_str_eq(out[3]->src, "fd00::1");
    cr_assert_str_eq(out[3]->dst, "fd00::2");
    cr_assert_eq(out[3]->ipproto, IPPROTO_UDP);
    cr_assert_eq(out[3]->dir, FGX_DIR_C2S);
    cr_assert_eq(out[3]->excerpt_len, 0);
    feed_events(1, 1, 1, 2000);
    cr_assert_eq(ctl_stats_last_seq(stats), 5, "numbering goes on after a restart");
}

Test(ctl_stats, persisted_events_bounded)
{
    const struct ctl_event *out[2];
    struct ctl_event *evs;
    struct ctl_txn *t;
    size_t n;

    for (int i = 0; i < 3; i++) {
        feed_events(1, 500, 1, (uint64_t)i * 1000);
        cr_assert_eq(ctl_stats_flush(stats, st, 0, false), 0);
    }
    cr_assert_eq(ctl_txn_begin(st, false, &t), 0);
    cr_assert_eq(ctl_store_event_list(t, TEST_KEEP * 2, &evs, &n), 0);
    ctl_txn_abort(t);
    cr_assert_eq(n, TEST_KEEP, "the store keeps no more than memory does");
    cr_assert_eq(evs[0].seq, 501);
    cr_assert_eq(evs[n - 1].seq, 1500);
    free(evs);
    reopen();
    cr_assert_eq(ctl_stats_events(stats, 0, 0, NULL, 2, out), 2);
    cr_assert_eq(out[1]->seq, 1500);
}

Test(ctl_stats, reset_after_import_counts_from_zero)
{
    feed(1, 10, 2, 3, 0);
    cr_assert_eq(packets_of(stats), 10);
    cr_assert_eq(ctl_stats_blocked(stats, flt_id), 2);

    ctl_stats_counters_reset(stats);
    cr_assert_eq(packets_of(stats), 0, "an imported service with an old id starts from zero");
    cr_assert_eq(ctl_stats_blocked(stats, flt_id), 0);

    /* The worker's own cumulative count stays the base: only growth after the reset counts. */
    feed(1, 13, 3, 3, 0);
    cr_assert_eq(packets_of(stats), 3);
    cr_assert_eq(ctl_stats_blocked(stats, flt_id), 1);

    /* ... and the reset reaches LMDB at the next flush. */
    cr_assert_eq(ctl_stats_flush(stats, st, 1000000, true), 0);
    reopen();
    cr_assert_eq(packets_of(stats), 3);
    cr_assert_eq(ctl_stats_blocked(stats, flt_id), 1);
}

/* A store that cannot take a write (here its map is full; a full disk fails the same way): the
 * events stay in memory, the next tries come at the counters' pace rather than at every call,
 * and once there is room again they are all written. */
Test(ctl_stats, failing_store_retried_at_the_flush_pace)
{
    static char chunk[16384];
    const struct ctl_event *out[4];
    uint64_t key = 1;
    struct ctl_txn *t;
    int rv = 0;

    ctl_stats_free(stats);
    stats = NULL;
    ctl_store_close(st);
    teardown_files();
    cr_assert_not_null(mkdtemp(strcpy(dir, "/tmp/fgx-test-stats-XXXXXX")));
    cr_assert_eq(ctl_store_open(dir, 256 * 1024, &st), 0);
    svc_id = add_service("web", 8080);
    cr_assert_eq(ctl_stats_open_keep(st, TEST_KEEP, &stats), 0);
    memset(chunk, 'z', sizeof(chunk));
    for (size_t len = sizeof(chunk); len >= 16; len /= 4) {
        for (rv = 0; rv == 0;) {
            struct fgx_blob b = {.data = chunk, .len = len};

            cr_assert_eq(ctl_txn_begin(st, true, &t), 0);
            rv = ctl_store_dbcache_put(t, key++, &b);
            if (rv == 0)
                rv = ctl_txn_commit(t);
            else
                ctl_txn_abort(t);
        }
        cr_assert_eq(rv, -EFBIG);
    }

    feed_events(1, 40, 1, 1000);
    cr_assert_eq(ctl_stats_flush(stats, st, 100, false), -EFBIG);
    cr_assert_eq(ctl_stats_flush(stats, st, 101, false), -EAGAIN, "retried at once");
    cr_assert_eq(ctl_stats_flush(stats, st, 100 + CTL_STATS_FLUSH_MS - 1, false), -EAGAIN);
    cr_assert_eq(ctl_stats_flush(stats, st, 100 + CTL_STATS_FLUSH_MS, false), -EFBIG);
    cr_assert_eq(ctl_stats_flush(stats, st, 101 + CTL_STATS_FLUSH_MS, true), -EFBIG,
                 "a forced flush (at exit) always tries");
    cr_assert_eq(ctl_stats_events(stats, 0, 0, NULL, 4, out), 4, "the events stay in memory");

    /* Room again: the same store, opened with a larger map. */
    ctl_store_close(st);
    cr_assert_eq(ctl_store_open(dir, 4 << 20, &st), 0);
    cr_assert_eq(ctl_stats_flush(stats, st, 101 + 2 * CTL_STATS_FLUSH_MS, false), 0);
    cr_assert_eq(ctl_stats_flush(stats, st, 102 + 2 * CTL_STATS_FLUSH_MS, false), 0,
                 "nothing more to write, and no back-off once it worked");
    reopen();
    cr_assert_eq(ctl_stats_last_seq(stats), 40, "every event reached the store");
}

static size_t stored_events(void)
{
    struct ctl_event *evs;
    struct ctl_txn *t;
    size_t n;

    cr_assert_eq(ctl_txn_begin(st, false, &t), 0);
    cr_assert_eq(ctl_store_event_list(t, 10 * TEST_KEEP, &evs, &n), 0);
    ctl_txn_abort(t);
    free(evs);
    return n;
}

Test(ctl_stats, old_events_are_pruned_in_batches)
{
    const struct ctl_event *out[TEST_KEEP];
    size_t batch = TEST_KEEP / CTL_EVENTS_PRUNE_DIV;

    feed_events(1, TEST_KEEP, 1, 0);
    cr_assert_eq(ctl_stats_flush(stats, st, 0, false), 0);
    cr_assert_eq(stored_events(), TEST_KEEP);
    /* A few more: the oldest stay in LMDB until a batch is due, never in what is shown. */
    feed_events(1, 10, 1, 5000);
    cr_assert_eq(ctl_stats_flush(stats, st, 0, false), 0);
    cr_assert_eq(stored_events(), TEST_KEEP + 10, "no delete per new event");
    cr_assert_eq(ctl_stats_events(stats, 0, 0, NULL, TEST_KEEP, out), TEST_KEEP);
    cr_assert_eq(out[0]->seq, 11);
    feed_events(1, batch, 1, 6000);
    cr_assert_eq(ctl_stats_flush(stats, st, 0, false), 0);
    cr_assert_eq(stored_events(), TEST_KEEP, "a batch past keep: pruned to keep at once");
    /* What a restart loads is the newest `keep`, whatever LMDB held. */
    reopen();
    cr_assert_eq(ctl_stats_events(stats, 0, 0, NULL, TEST_KEEP, out), TEST_KEEP);
    cr_assert_eq(out[TEST_KEEP - 1]->seq, ctl_stats_last_seq(stats));
}

Test(ctl_stats, default_retention_holds_a_burst)
{
    static const struct ctl_event *out[5000];

    ctl_stats_free(stats);
    stats = NULL;
    cr_assert_eq(ctl_stats_open(st, &stats), 0);
    cr_assert_geq(CTL_EVENTS_KEEP, 100000);
    for (int i = 0; i < 5; i++)
        feed_events(1, 1000, 1, (uint64_t)i * 1000);
    cr_assert_eq(ctl_stats_flush(stats, st, 0, false), 0);
    cr_assert_eq(ctl_stats_events(stats, 0, 0, NULL, 5000, out), 5000, "none dropped");
    cr_assert_eq(stored_events(), 5000);
    cr_assert(ctl_stats_events_burst(stats), "a report of 1,000 events is a burst");
    cr_assert_not(ctl_stats_events_burst(stats), "reported once");
}

Test(ctl_stats, bad_retention_refused)
{
    struct ctl_stats *other = NULL;

    cr_assert_eq(ctl_stats_open_keep(st, 0, &other), -EINVAL);
    cr_assert_eq(ctl_stats_open_keep(st, CTL_EVENTS_KEEP_MAX + 1, &other), -EINVAL);
}

static void feed_lost(uint64_t instance, uint64_t web_lost, uint64_t dns_lost)
{
    struct fgx_dp_service_stat ss[2] = {{.service_id = 1, .events_lost = web_lost},
                                        {.service_id = 2, .events_lost = dns_lost}};
    /* events_lost of the report itself is per report; the services' are cumulative */
    struct fgx_dp_stats m = {.nservices = 2, .services = ss, .events_lost = 1};

    cr_assert_eq(ctl_stats_ingest(stats, instance, &m, NULL, 0), 0);
}

Test(ctl_stats, lost_events_counted_per_service_and_persisted)
{
    struct ctl_svc_counters c;
    uint32_t dns = add_service("dns", 53);

    feed_lost(1, 5, 0);
    feed_lost(1, 8, 1); /* cumulative in the worker: 3 and 1 more */
    ctl_stats_service(stats, svc_id, &c);
    cr_assert_eq(c.events_lost, 8);
    ctl_stats_service(stats, dns, &c);
    cr_assert_eq(c.events_lost, 1);
    cr_assert_eq(ctl_stats_events_lost(stats, dns), 1);
    cr_assert_eq(ctl_stats_events_lost(stats, 0), 2, "the total: the reports' own counts");
    feed_lost(2, 2, 0); /* a new worker process counts from zero */
    ctl_stats_service(stats, svc_id, &c);
    cr_assert_eq(c.events_lost, 10);
    cr_assert_eq(ctl_stats_flush(stats, st, 0, true), 0);
    reopen();
    ctl_stats_service(stats, svc_id, &c);
    cr_assert_eq(c.events_lost, 10, "kept across a controld restart");
    ctl_stats_service(stats, dns, &c);
    cr_assert_eq(c.events_lost, 1);
}

Test(ctl_stats, match_end_kept_through_the_store)
{
    struct fgx_dp_event ev = {.service_id = 1,
                              .filter_id = 3,
                              .dir = FGX_DIR_C2S,
                              .ipproto = IPPROTO_TCP,
                              .family = 4,
                              .excerpt_len = 10,
                              .match_end = 4};
    struct fgx_dp_stats m = {.nevents = 1, .events = &ev};
    const struct ctl_event *out[1];

    memcpy(ev.excerpt, "evilTAIL\0x", 10);
    cr_assert_eq(ctl_stats_ingest(stats, 1, &m, NULL, 0), 0);
    cr_assert_eq(ctl_stats_flush(stats, st, 0, false), 0);
    reopen();
    cr_assert_eq(ctl_stats_events(stats, 0, 0, NULL, 1, out), 1);
    cr_assert_eq(out[0]->excerpt_len, 10);
    cr_assert_eq(out[0]->match_end, 4);
    cr_assert_eq(memcmp(out[0]->excerpt, "evilTAIL\0x", 10), 0);
}

/* One report of a service's traffic, cumulative as a worker sends it (no filter). */
static void feed_traffic(int proxy, uint64_t instance, uint64_t c2s, uint64_t s2c, uint64_t flows)
{
    struct fgx_dp_service_stat ss = {.service_id = svc_id,
                                     .packets = 1,
                                     .bytes = c2s + s2c,
                                     .bytes_c2s = c2s,
                                     .bytes_s2c = s2c,
                                     .flows_new = flows};
    struct fgx_dp_stats m = {.nservices = 1, .services = &ss};

    if (proxy)
        cr_assert_eq(ctl_stats_ingest_proxy(stats, instance, &m, NULL, 0), 0);
    else
        cr_assert_eq(ctl_stats_ingest(stats, instance, &m, NULL, 0), 0);
}

static uint64_t series_total(enum ctl_rate_kind kind)
{
    struct ctl_rate_point *pts;
    struct ctl_txn *t;
    uint64_t sum = 0;
    size_t n;

    cr_assert_eq(ctl_txn_begin(st, false, &t), 0);
    cr_assert_eq(ctl_rates_get(t, kind, CTL_RATE_SERVICE, svc_id, 0, &pts, &n), 0);
    ctl_txn_abort(t);
    for (size_t i = 0; i < n; i++)
        sum += pts[i].count;
    free(pts);
    return sum;
}

/* The traffic history folds the growth of the workers' cumulative counters: both workers add
 * up, a worker's new process counts from zero, and what is written survives a controld
 * restart. */
Test(ctl_stats, traffic_history_folds_both_workers_and_restarts)
{
    feed_traffic(0, 1, 100, 1000, 2);
    feed_traffic(0, 1, 300, 1500, 3); /* +200, +500, +1 */
    feed_traffic(1, 7, 10, 20, 1);    /* the proxy worker's own */
    feed_traffic(0, 2, 50, 60, 1);    /* a new nfqworker: all of it is new */
    cr_assert_eq(ctl_stats_flush(stats, st, 1, true), 0);
    cr_assert_eq(series_total(CTL_RATE_BYTES_C2S), 300 + 10 + 50);
    cr_assert_eq(series_total(CTL_RATE_BYTES_S2C), 1500 + 20 + 60);
    cr_assert_eq(series_total(CTL_RATE_FLOWS), 3 + 1 + 1);
    reopen(); /* its workers start again too */
    cr_assert_eq(series_total(CTL_RATE_BYTES_C2S), 360, "kept across a restart");
    feed_traffic(0, 1, 5, 6, 1);
    cr_assert_eq(ctl_stats_flush(stats, st, 100000, true), 0);
    cr_assert_eq(series_total(CTL_RATE_BYTES_C2S), 365, "added to: %llu",
                 (unsigned long long)series_total(CTL_RATE_BYTES_C2S));
    cr_assert_eq(series_total(CTL_RATE_FLOWS), 6);
}
