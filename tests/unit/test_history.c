/* Unit tests for the undo log (controld/ctl_history.c) and the per-minute rates
 * (controld/ctl_rates.c), against real LMDB environments: which entry undo and redo revert,
 * records bounded and marked, an undo's snapshot applied through the import path with its ids
 * and counters, and the compact per-minute series. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "control.pb-c.h"
#include "controld/ctl_config.h"
#include "controld/ctl_history.h"
#include "controld/ctl_rates.h"
#include "controld/ctl_store.h"

static char dir[64];
static struct ctl_store *st;

static void setup(void)
{
    snprintf(dir, sizeof(dir), "/tmp/fgx-test-history-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    cr_assert_eq(ctl_store_open(dir, 0, &st), 0);
}

static void teardown(void)
{
    char path[128];

    ctl_store_close(st);
    snprintf(path, sizeof(path), "%s/data.mdb", dir);
    unlink(path);
    snprintf(path, sizeof(path), "%s/lock.mdb", dir);
    unlink(path);
    rmdir(dir);
}

TestSuite(history, .init = setup, .fini = teardown);
TestSuite(rates, .init = setup, .fini = teardown);

#define C(s)                                                                                       \
    {                                                                                              \
        .seq = (s), .kind = CTL_HIST_CHANGE                                                        \
    }
#define U(s, t, r)                                                                                 \
    {                                                                                              \
        .seq = (s), .kind = CTL_HIST_UNDO, .target = (t), .reverted = (r)                          \
    }
#define R(s, t)                                                                                    \
    {                                                                                              \
        .seq = (s), .kind = CTL_HIST_REDO, .target = (t)                                           \
    }

Test(history, undo_walks_back_over_undone_changes)
{
    /* 1, 2, undo of 2 (which marked 2 reverted), 4 */
    struct ctl_hist_meta v[] = {
        C(1), {.seq = 2, .kind = CTL_HIST_CHANGE, .reverted = true}, U(3, 2, false), C(4)};

    cr_assert_eq(ctl_history_undo_pick(v, 4), 3, "the newest change first");
    v[3].reverted = true;
    cr_assert_eq(ctl_history_undo_pick(v, 4), 0, "2 is undone already: then 1");
    v[0].reverted = true;
    cr_assert_eq(ctl_history_undo_pick(v, 4), -1, "nothing left");
    {
        /* a setting (passwd, auth) is no change to revert, and does not end a redo */
        struct ctl_hist_meta w[] = {{.seq = 1, .kind = CTL_HIST_CHANGE, .reverted = true},
                                    U(2, 1, false),
                                    {.seq = 3, .kind = CTL_HIST_SETTING}};
        cr_assert_eq(ctl_history_undo_pick(w, 3), -1);
        cr_assert_eq(ctl_history_redo_pick(w, 3), 1);
    }
    cr_assert_eq(ctl_history_undo_pick(NULL, 0), -1);
}

Test(history, redo_reverts_the_newest_undo_unless_a_change_followed)
{
    /* A, B, undo B, undo A */
    struct ctl_hist_meta v[] = {{.seq = 1, .kind = CTL_HIST_CHANGE, .reverted = true},
                                {.seq = 2, .kind = CTL_HIST_CHANGE, .reverted = true},
                                U(3, 2, false),
                                U(4, 1, false),
                                R(5, 4)};

    cr_assert_eq(ctl_history_redo_pick(v, 4), 3, "the newest undo (of A) first");
    v[3].reverted = true; /* redone: entry 5 */
    v[0].reverted = false;
    cr_assert_eq(ctl_history_redo_pick(v, 5), 2, "then the undo of B");
    cr_assert_eq(ctl_history_undo_pick(v, 5), 0, "undo after a redo reverts the redone A");
    {
        struct ctl_hist_meta w[] = {C(1), U(2, 1, false), C(3)};
        cr_assert_eq(ctl_history_redo_pick(w, 3), -1, "a change since the undo ends redo");
    }
    {
        struct ctl_hist_meta w[] = {C(1)};
        cr_assert_eq(ctl_history_redo_pick(w, 1), -1, "no undo: nothing to redo");
    }
}

Test(history, records_are_bounded_and_marked)
{
    struct ctl_hist_meta *v;
    Fgx__Ctl__Change *c;
    struct ctl_txn *t;
    uint64_t seq = 0;
    size_t n;

    cr_assert_eq(ctl_txn_begin(st, true, &t), 0);
    for (int i = 0; i < 5; i++) {
        char what[32];

        snprintf(what, sizeof(what), "filter rm %d", i);
        cr_assert_eq(ctl_history_record(t, CTL_HIST_CHANGE, 0, "local", what, (const uint8_t *)"x",
                                        1, 3, &seq),
                     0);
    }
    cr_assert_eq(seq, 5);
    cr_assert_eq(ctl_history_metas(t, &v, &n), 0);
    cr_assert_eq(n, 3, "keep 3: the oldest went");
    cr_assert_eq(v[0].seq, 3);
    free(v);
    cr_assert_eq(ctl_history_mark(t, 4, true), 0);
    cr_assert_eq(ctl_history_get(t, 4, &c), 0);
    cr_assert(c->undone);
    cr_assert_str_eq(c->what, "filter rm 3");
    cr_assert_str_eq(c->who, "local");
    cr_assert_eq(c->before.len, 1);
    fgx__ctl__change__free_unpacked(c, NULL);
    cr_assert_eq(ctl_history_get(t, 1, &c), -ENOENT);
    cr_assert_eq(ctl_txn_commit(t), 0);
}

/* The design undo rests on: the snapshot before a change, imported with counters, gives back
 * the removed filter with its id and count, and its service's total stays whole. */
Test(history, snapshot_import_restores_ids_and_counters)
{
    struct ctl_service s = {.ipproto = 6, .port = 8080, .active = true};
    struct ctl_filter f1 = {.regex = "evil", .dir = FGX_DIR_BOTH, .active = true};
    struct ctl_filter f2 = {.regex = "bad", .dir = FGX_DIR_C2S, .active = true}, got;
    struct ctl_import_opts o = {.counters = true};
    Fgx__Ctl__Config *cfg;
    struct ctl_txn *t;
    uint8_t *snap;
    size_t len;
    uint64_t b, r;
    char err[256];

    snprintf(s.name, sizeof(s.name), "web");
    cr_assert_eq(ctl_txn_begin(st, true, &t), 0);
    cr_assert_eq(ctl_store_service_put(t, &s), 0);
    f1.service_id = f2.service_id = s.id;
    cr_assert_eq(ctl_store_filter_put(t, &f1), 0);
    cr_assert_eq(ctl_store_filter_put(t, &f2), 0);
    cr_assert_eq(ctl_store_blocked_set(t, f1.id, 7), 0);
    cr_assert_eq(ctl_store_blocked_set(t, f2.id, 2), 0);
    cr_assert_eq(ctl_history_snapshot(t, NULL, &snap, &len), 0);
    /* filter rm f1, as the handler does it: its blocks move to the service's total */
    cr_assert_eq(ctl_store_retired_set(t, s.id, 7), 0);
    cr_assert_eq(ctl_store_filter_del(t, f1.id), 0);
    /* undo */
    cfg = fgx__ctl__config__unpack(NULL, len, snap);
    cr_assert_not_null(cfg);
    cr_assert_eq(ctl_config_import_ex(t, cfg, &o, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(ctl_store_filter_get(t, f1.id, &got), 0, "back with its id");
    cr_assert_str_eq(got.regex, "evil");
    ctl_filter_release(&got);
    cr_assert_eq(ctl_store_blocked_get(t, f1.id, &b), 0);
    cr_assert_eq(b, 7, "and its count");
    cr_assert_eq(ctl_store_blocked_get(t, f2.id, &b), 0);
    cr_assert_eq(b, 2, "the other filter kept its count");
    cr_assert_eq(ctl_store_retired_get(t, s.id, &r), 0);
    cr_assert_eq(r, 0, "the 7 are the filter's again, not counted twice");
    cr_assert_eq(o.nfset, 1, "one count for the in-memory statistics: the restored filter's");
    cr_assert_eq(o.fset[0].id, f1.id);
    cr_assert_eq(o.fset[0].blocked, 7);
    ctl_import_opts_release(&o);
    fgx__ctl__config__free_unpacked(cfg, NULL);
    free(snap);
    ctl_txn_abort(t);
}

Test(rates, merge_keeps_nonzero_minutes_in_order_within_48_hours)
{
    struct ctl_rate_point *p;
    void *rec = NULL, *next;
    size_t len = 0, nlen, n;
    uint32_t now = 30000000;

    cr_assert_eq(ctl_rates_merge(CTL_RATE_BLOCKED, rec, len, now - 5, 2, now, &next, &nlen), 0);
    rec = next;
    len = nlen;
    cr_assert_eq(len, 8, "one minute: 8 bytes");
    cr_assert_eq(ctl_rates_merge(CTL_RATE_BLOCKED, rec, len, now, 3, now, &next, &nlen), 0);
    free(rec);
    rec = next;
    len = nlen;
    cr_assert_eq(ctl_rates_merge(CTL_RATE_BLOCKED, rec, len, now - 5, 1, now, &next, &nlen), 0);
    free(rec);
    rec = next;
    len = nlen;
    cr_assert_eq(ctl_rates_merge(CTL_RATE_BLOCKED, rec, len, now - 3, 4, now, &next, &nlen), 0,
                 "in between");
    free(rec);
    rec = next;
    len = nlen;
    cr_assert_eq(ctl_rates_decode(CTL_RATE_BLOCKED, rec, len, &p, &n), 0);
    cr_assert_eq(n, 3);
    cr_assert(p[0].minute == now - 5 && p[0].count == 3);
    cr_assert(p[1].minute == now - 3 && p[1].count == 4);
    cr_assert(p[2].minute == now && p[2].count == 3);
    free(p);
    /* 48 hours later the old minutes are gone; an empty series is no record at all */
    cr_assert_eq(ctl_rates_merge(CTL_RATE_BLOCKED, rec, len, 0, 0, now + CTL_RATES_MINUTES - 1,
                                 &next, &nlen),
                 0);
    cr_assert_eq(nlen, 8, "only the newest minute is still inside the window");
    free(next);
    cr_assert_eq(ctl_rates_merge(CTL_RATE_BLOCKED, rec, len, 0, 0, now + CTL_RATES_MINUTES + 10,
                                 &next, &nlen),
                 0);
    cr_assert_eq(nlen, 0);
    cr_assert_null(next);
    free(rec);
    cr_assert_eq(ctl_rates_decode(CTL_RATE_BLOCKED, "abc", 3, &p, &n), -EINVAL,
                 "a torn record is refused");
}

Test(rates, flush_writes_filter_and_service_series)
{
    struct ctl_service s = {.ipproto = 6, .port = 81, .active = true};
    struct ctl_filter f = {.regex = "x", .dir = FGX_DIR_BOTH, .active = true};
    struct ctl_rates_pending p = {0};
    struct ctl_rate_point *pts;
    struct ctl_txn *t;
    uint32_t now = 29000000;
    size_t n;

    snprintf(s.name, sizeof(s.name), "svc");
    cr_assert_eq(ctl_txn_begin(st, true, &t), 0);
    cr_assert_eq(ctl_store_service_put(t, &s), 0);
    f.service_id = s.id;
    cr_assert_eq(ctl_store_filter_put(t, &f), 0);
    cr_assert_eq(ctl_rates_note(&p, CTL_RATE_BLOCKED, f.id, 0, now - 1, 2), 0);
    cr_assert_eq(ctl_rates_note(&p, CTL_RATE_BLOCKED, f.id, 0, now - 1, 1), 0);
    cr_assert_eq(ctl_rates_note(&p, CTL_RATE_BLOCKED, f.id, 0, now, 5), 0);
    cr_assert_eq(p.n, 2, "one entry per minute");
    cr_assert_eq(ctl_rates_flush(&p, t, now, false, NULL, NULL), 0);
    cr_assert_eq(p.n, 0);
    cr_assert_eq(ctl_rates_get(t, CTL_RATE_BLOCKED, CTL_RATE_SERVICE, s.id, 0, &pts, &n), 0);
    cr_assert_eq(n, 2, "the service's series, from the filter's record");
    cr_assert(pts[0].count == 3 && pts[1].count == 5);
    free(pts);
    cr_assert_eq(ctl_rates_get(t, CTL_RATE_BLOCKED, CTL_RATE_FILTER, f.id, now, &pts, &n), 0);
    cr_assert(n == 1 && pts[0].count == 5, "since: only the last minute");
    free(pts);
    cr_assert_eq(ctl_rates_get(t, CTL_RATE_MATCHED, CTL_RATE_FILTER, f.id, 0, &pts, &n), 0);
    cr_assert_eq(n, 0, "no log matches recorded");
    cr_assert_eq(ctl_rates_prune(t, now + CTL_RATES_MINUTES + 1), 0);
    cr_assert_eq(ctl_rates_get(t, CTL_RATE_BLOCKED, CTL_RATE_FILTER, f.id, 0, &pts, &n), 0);
    cr_assert_eq(n, 0, "pruned after 48 hours");
    ctl_rates_pending_release(&p);
    ctl_txn_abort(t);
}

/* A service's bytes: 12-byte points with 64-bit counts, saturating at UINT64_MAX, not at the
 * 32 bits of the block counts (those saturate there). */
Test(rates, byte_series_count_past_32_bits)
{
    struct ctl_rate_point *p;
    void *rec = NULL, *next;
    size_t nlen, n;
    uint32_t now = 30000000;
    uint64_t big = 5ull << 30; /* 5 GiB in one minute */

    cr_assert_eq(ctl_rates_point_len(CTL_RATE_BYTES_C2S), 12);
    cr_assert_eq(ctl_rates_point_len(CTL_RATE_FLOWS), 8);
    cr_assert_eq(ctl_rates_merge(CTL_RATE_BYTES_C2S, NULL, 0, now, big, now, &rec, &nlen), 0);
    cr_assert_eq(nlen, 12);
    cr_assert_eq(ctl_rates_merge(CTL_RATE_BYTES_C2S, rec, nlen, now, big, now, &next, &nlen), 0);
    free(rec);
    rec = next;
    cr_assert_eq(ctl_rates_decode(CTL_RATE_BYTES_C2S, rec, nlen, &p, &n), 0);
    cr_assert(n == 1 && p[0].minute == now && p[0].count == 2 * big, "%zu %llu", n,
              (unsigned long long)(n ? p[0].count : 0));
    free(p);
    cr_assert_eq(ctl_rates_decode(CTL_RATE_BYTES_C2S, rec, 8, &p, &n), -EINVAL,
                 "a record of 8-byte points is not one of 12-byte points");
    cr_assert_eq(ctl_rates_merge(CTL_RATE_BYTES_C2S, rec, 12, now, UINT64_MAX, now, &next, &nlen),
                 0);
    free(rec);
    rec = next;
    cr_assert_eq(ctl_rates_decode(CTL_RATE_BYTES_C2S, rec, nlen, &p, &n), 0);
    cr_assert(n == 1 && p[0].count == UINT64_MAX, "saturates");
    free(p);
    free(rec);
    cr_assert_eq(ctl_rates_merge(CTL_RATE_FLOWS, NULL, 0, now, big, now, &rec, &nlen), 0);
    cr_assert_eq(ctl_rates_decode(CTL_RATE_FLOWS, rec, nlen, &p, &n), 0);
    cr_assert(n == 1 && p[0].count == UINT32_MAX, "connections: 32 bits, saturating");
    free(p);
    free(rec);
}

/* A service's traffic: one entry a kind a minute whatever the reports, written only once its
 * minute is over (or when forced), to the service's series only; a filter's blocks in the same
 * pending set are written at once. Pruned after 48 hours like the others. */
Test(rates, traffic_waits_for_its_minute_then_goes_to_the_service)
{
    struct ctl_service s = {.ipproto = 6, .port = 82, .active = true};
    struct ctl_filter f = {.regex = "x", .dir = FGX_DIR_BOTH, .active = true};
    struct ctl_rates_pending p = {0};
    struct ctl_rate_point *pts;
    struct ctl_txn *t;
    uint32_t now = 29000000;
    size_t n;

    snprintf(s.name, sizeof(s.name), "web");
    cr_assert_eq(ctl_txn_begin(st, true, &t), 0);
    cr_assert_eq(ctl_store_service_put(t, &s), 0);
    f.service_id = s.id;
    cr_assert_eq(ctl_store_filter_put(t, &f), 0);
    cr_assert_eq(ctl_rates_note_service(&p, CTL_RATE_BYTES_C2S, s.id, now - 1, 1000), 0);
    cr_assert_eq(ctl_rates_note_service(&p, CTL_RATE_BYTES_C2S, s.id, now - 1, 500), 0);
    cr_assert_eq(ctl_rates_note_service(&p, CTL_RATE_BYTES_C2S, s.id + 1, now - 1, 7), 0);
    cr_assert_eq(ctl_rates_note_service(&p, CTL_RATE_BYTES_S2C, s.id, now - 1, 9000), 0);
    cr_assert_eq(ctl_rates_note_service(&p, CTL_RATE_FLOWS, s.id, now, 3), 0);
    cr_assert_eq(ctl_rates_note_service(&p, CTL_RATE_BYTES_C2S, s.id, now, 40), 0);
    cr_assert_eq(ctl_rates_note(&p, CTL_RATE_BLOCKED, f.id, 0, now, 1), 0);
    cr_assert_eq(p.n, 6, "one entry a service, kind and minute: %zu", p.n);
    cr_assert_eq(ctl_rates_flush(&p, t, now, false, NULL, NULL), 0);
    cr_assert_eq(p.n, 2, "the current minute's traffic waits: %zu left", p.n);
    cr_assert_eq(ctl_rates_get(t, CTL_RATE_BYTES_C2S, CTL_RATE_SERVICE, s.id, 0, &pts, &n), 0);
    cr_assert(n == 1 && pts[0].minute == now - 1 && pts[0].count == 1500, "c2s: %zu", n);
    free(pts);
    cr_assert_eq(ctl_rates_get(t, CTL_RATE_BYTES_C2S, CTL_RATE_SERVICE, s.id + 1, 0, &pts, &n), 0);
    cr_assert(n == 1 && pts[0].count == 7, "the other service's bytes apart");
    free(pts);
    cr_assert_eq(ctl_rates_get(t, CTL_RATE_BYTES_S2C, CTL_RATE_SERVICE, s.id, 0, &pts, &n), 0);
    cr_assert(n == 1 && pts[0].count == 9000);
    free(pts);
    cr_assert_eq(ctl_rates_get(t, CTL_RATE_FLOWS, CTL_RATE_SERVICE, s.id, 0, &pts, &n), 0);
    cr_assert_eq(n, 0, "this minute's connections not written yet");
    cr_assert_eq(ctl_rates_get(t, CTL_RATE_BLOCKED, CTL_RATE_SERVICE, s.id, 0, &pts, &n), 0);
    cr_assert(n == 1 && pts[0].count == 1, "the blocks written at once");
    free(pts);
    cr_assert_eq(ctl_rates_get(t, CTL_RATE_BYTES_C2S, CTL_RATE_FILTER, 0, 0, &pts, &n), 0);
    cr_assert_eq(n, 0, "no filter series for traffic");
    /* the next minute: what waited is written, once */
    cr_assert_eq(ctl_rates_note_service(&p, CTL_RATE_FLOWS, s.id, now, 2), 0);
    cr_assert_eq(ctl_rates_flush(&p, t, now + 1, false, NULL, NULL), 0);
    cr_assert_eq(p.n, 0);
    cr_assert_eq(ctl_rates_get(t, CTL_RATE_FLOWS, CTL_RATE_SERVICE, s.id, 0, &pts, &n), 0);
    cr_assert(n == 1 && pts[0].minute == now && pts[0].count == 5, "flows: %zu", n);
    free(pts);
    cr_assert_eq(ctl_rates_get(t, CTL_RATE_BYTES_C2S, CTL_RATE_SERVICE, s.id, 0, &pts, &n), 0);
    cr_assert(n == 2 && pts[1].minute == now && pts[1].count == 40);
    free(pts);
    /* forced (a reader wants the current minute, or controld exits): written at once */
    cr_assert_eq(ctl_rates_note_service(&p, CTL_RATE_FLOWS, s.id, now + 1, 4), 0);
    cr_assert_eq(ctl_rates_flush(&p, t, now + 1, true, NULL, NULL), 0);
    cr_assert_eq(p.n, 0);
    cr_assert_eq(ctl_rates_get(t, CTL_RATE_FLOWS, CTL_RATE_SERVICE, s.id, now + 1, &pts, &n), 0);
    cr_assert(n == 1 && pts[0].count == 4);
    free(pts);
    cr_assert_eq(ctl_rates_prune(t, now + CTL_RATES_MINUTES + 2), 0);
    cr_assert_eq(ctl_rates_get(t, CTL_RATE_BYTES_S2C, CTL_RATE_SERVICE, s.id, 0, &pts, &n), 0);
    cr_assert_eq(n, 0, "pruned after 48 hours");
    ctl_rates_pending_release(&p);
    ctl_txn_abort(t);
}

/* Every member of Request's oneof has a command name: none is ever recorded as a number. */
Test(history_names, every_request_kind_is_named)
{
    const ProtobufCMessageDescriptor *d = &fgx__ctl__request__descriptor;
    size_t members = 0;

    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];

        if (!(f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF))
            continue;
        members++;
        cr_expect_not_null(ctl_history_req_name((int)f->id), "request member %s (%u) has no name",
                           f->name, f->id);
    }
    cr_assert_gt(members, 50);
    cr_assert_null(ctl_history_req_name(99999));
}

Test(history_names, script_set_is_named_with_its_service)
{
    Fgx__Ctl__Request q = FGX__CTL__REQUEST__INIT;
    Fgx__Ctl__ScriptSet s = FGX__CTL__SCRIPT_SET__INIT;
    Fgx__Ctl__Passwd p = FGX__CTL__PASSWD__INIT;
    char buf[256];

    s.service = "web";
    s.filename = "web.py";
    s.source.data = (uint8_t *)"secret source";
    s.source.len = 13;
    q.req_case = FGX__CTL__REQUEST__REQ_SCRIPT_SET;
    q.script_set = &s;
    ctl_history_describe(&q, buf, sizeof(buf));
    cr_assert_str_eq(buf, "script set web web.py");
    /* a password is never part of the words */
    p.password = "hunter2";
    q.req_case = FGX__CTL__REQUEST__REQ_PASSWD;
    q.passwd = &p;
    ctl_history_describe(&q, buf, sizeof(buf));
    cr_assert_str_eq(buf, "passwd");
}
