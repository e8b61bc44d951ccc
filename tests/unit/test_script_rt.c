/* Unit tests for controld/ctl_script_rt.c's stored counters and the script events in
 * controld/ctl_store.c, against a real LMDB environment in a temporary directory: the counters
 * saved and read back as they were, a record cut short or of another version read as far as it
 * goes, and an event's script kind and function kept by the event store. */
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "control.pb-c.h"
#include "controld/ctl_script_rt.h"
#include "controld/ctl_store.h"

static char dir[64];
static struct ctl_store *st;

static void rm_dir(void)
{
    char path[128];

    snprintf(path, sizeof(path), "%s/data.mdb", dir);
    unlink(path);
    snprintf(path, sizeof(path), "%s/lock.mdb", dir);
    unlink(path);
    rmdir(dir);
}

static void setup(void)
{
    snprintf(dir, sizeof(dir), "/tmp/fgx-test-srt-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    cr_assert_eq(ctl_store_open(dir, 0, &st), 0);
}

static void teardown(void)
{
    /* the counters are the module's own (static): none left for the next test */
    for (uint32_t sid = 1; sid <= 9; sid++)
        ctl_script_rt_forget(sid);
    ctl_store_close(st);
    st = NULL;
    rm_dir();
}

/* The counters of one function as `script list` fills them: {blocked, errors, timeouts}. */
static void counts(uint32_t sid, const char *name, uint64_t out[3])
{
    Fgx__Ctl__Script s = FGX__CTL__SCRIPT__INIT;
    Fgx__Ctl__ScriptFunction f = FGX__CTL__SCRIPT_FUNCTION__INIT, *fp = &f;

    s.service_id = sid;
    s.n_functions = 1;
    s.functions = &fp;
    f.name = (char *)name;
    ctl_script_rt_fill(NULL, &s);
    out[0] = f.blocked;
    out[1] = f.errors;
    out[2] = f.timeouts;
}

static void put_record(const void *p, size_t len)
{
    struct ctl_txn *t;

    cr_assert_eq(ctl_txn_begin(st, true, &t), 0);
    cr_assert_eq(ctl_store_bytes_put(t, CTL_SCRIPT_RT_KEY, p, len), 0);
    cr_assert_eq(ctl_txn_commit(t), 0);
}

TestSuite(script_rt, .init = setup, .fini = teardown);

Test(script_rt, counters_saved_and_read_back)
{
    uint64_t c[3];

    ctl_script_rt_count(1, "third_request", CTL_SCRIPT_BLOCKED, 4);
    ctl_script_rt_count(1, "third_request", CTL_SCRIPT_TIMEOUTS, 1);
    ctl_script_rt_count(2, "faulty", CTL_SCRIPT_ERRORS, 7);
    ctl_script_rt_count(2, "", CTL_SCRIPT_ERRORS, 1); /* the file's own load failure */
    cr_assert_eq(ctl_script_rt_save(st), 0);
    /* as a restart: nothing in memory, then the store */
    ctl_script_rt_forget(1);
    ctl_script_rt_forget(2);
    counts(1, "third_request", c);
    cr_assert(c[0] == 0 && c[2] == 0, "forgotten");
    cr_assert_eq(ctl_script_rt_load(st), 0);
    counts(1, "third_request", c);
    cr_assert(c[0] == 4 && c[1] == 0 && c[2] == 1, "third_request %llu %llu %llu",
              (unsigned long long)c[0], (unsigned long long)c[1], (unsigned long long)c[2]);
    counts(2, "faulty", c);
    cr_assert(c[0] == 0 && c[1] == 7 && c[2] == 0);
    counts(2, "", c);
    cr_assert_eq(c[1], 1);
    counts(1, "faulty", c);
    cr_assert(c[0] == 0 && c[1] == 0 && c[2] == 0, "per service");
    /* they go on from there, and a second save keeps the sum */
    ctl_script_rt_count(1, "third_request", CTL_SCRIPT_BLOCKED, 1);
    cr_assert_eq(ctl_script_rt_save(st), 0);
    ctl_script_rt_forget(1);
    ctl_script_rt_forget(2);
    cr_assert_eq(ctl_script_rt_load(st), 0);
    counts(1, "third_request", c);
    cr_assert_eq(c[0], 5);
}

Test(script_rt, edited_saved_and_a_version_1_record_read_with_none)
{
    Fgx__Ctl__Script s = FGX__CTL__SCRIPT__INIT;
    Fgx__Ctl__ScriptFunction f = FGX__CTL__SCRIPT_FUNCTION__INIT, *fp = &f;
    /* version 1 (before edited was counted): service 5 "v1" blocked 2, errors 0, timeouts 1 */
    uint8_t rec[1 + 4 + 1 + 2 + 24] = {1, 5, 0, 0, 0, 2, 'v', '1', 2};

    s.service_id = 6;
    s.n_functions = 1;
    s.functions = &fp;
    f.name = "swap";
    ctl_script_rt_count(6, "swap", CTL_SCRIPT_EDITED, 3);
    ctl_script_rt_count(6, "swap", CTL_SCRIPT_BLOCKED, 1);
    cr_assert_eq(ctl_script_rt_save(st), 0);
    ctl_script_rt_forget(6);
    cr_assert_eq(ctl_script_rt_load(st), 0);
    ctl_script_rt_fill(NULL, &s);
    cr_assert(f.has_edited && f.edited == 3 && f.blocked == 1, "edited %llu blocked %llu",
              (unsigned long long)f.edited, (unsigned long long)f.blocked);
    rec[1 + 4 + 1 + 2 + 16] = 1;
    put_record(rec, sizeof(rec));
    ctl_script_rt_forget(6);
    cr_assert_eq(ctl_script_rt_load(st), 0);
    s.service_id = 5;
    f.name = "v1";
    ctl_script_rt_fill(NULL, &s);
    cr_assert(f.blocked == 2 && f.timeouts == 1 && f.edited == 0, "v1: %llu %llu %llu",
              (unsigned long long)f.blocked, (unsigned long long)f.timeouts,
              (unsigned long long)f.edited);
}

Test(script_rt, no_record_means_zero)
{
    uint64_t c[3];

    cr_assert_eq(ctl_script_rt_load(st), 0);
    counts(1, "f", c);
    cr_assert(c[0] == 0 && c[1] == 0 && c[2] == 0);
}

Test(script_rt, cut_record_read_as_far_as_it_goes)
{
    /* version 1; service 3 "ab" 1/2/3; then service 4 "cd" with its counters cut short */
    uint8_t rec[1 + (4 + 1 + 2 + 24) * 2 - 5] = {1};
    size_t off = 1;
    uint64_t c[3];

    rec[off] = 3;
    rec[off + 4] = 2;
    memcpy(rec + off + 5, "ab", 2);
    off += 7;
    for (int k = 0; k < 3; k++, off += 8)
        rec[off] = (uint8_t)(k + 1);
    rec[off] = 4;
    rec[off + 4] = 2;
    memcpy(rec + off + 5, "cd", 2);
    put_record(rec, sizeof(rec));
    cr_assert_eq(ctl_script_rt_load(st), 0);
    counts(3, "ab", c);
    cr_assert(c[0] == 1 && c[1] == 2 && c[2] == 3);
    counts(4, "cd", c);
    cr_assert(c[0] == 0 && c[1] == 0 && c[2] == 0, "the cut entry is not read");
    /* a name length past the bound is refused too */
    rec[1 + 4] = 200;
    put_record(rec, sizeof(rec));
    ctl_script_rt_forget(3);
    cr_assert_eq(ctl_script_rt_load(st), 0);
    counts(3, "ab", c);
    cr_assert_eq(c[0], 0);
}

Test(script_rt, other_version_ignored)
{
    uint8_t rec[] = {9, 1, 0, 0, 0, 1, 'f'};
    uint64_t c[3];

    put_record(rec, sizeof(rec));
    cr_assert_eq(ctl_script_rt_load(st), 0);
    counts(1, "f", c);
    cr_assert(c[0] == 0 && c[1] == 0 && c[2] == 0);
}

Test(script_rt, script_event_kept_by_the_event_store)
{
    struct ctl_event e = {.seq = 5, .time_ns = 123, .service_id = 2, .ipproto = IPPROTO_TCP};
    struct ctl_event f = {.seq = 6, .time_ns = 124, .service_id = 2, .filter_id = 9,
                          .ipproto = IPPROTO_TCP, .sport = 1, .dport = 2};
    struct ctl_event *out = NULL;
    struct ctl_txn *t;
    size_t n = 0;

    snprintf(e.service, sizeof(e.service), "web");
    snprintf(e.script_kind, sizeof(e.script_kind), "timeout");
    snprintf(e.script_fn, sizeof(e.script_fn), "third_request");
    snprintf(f.src, sizeof(f.src), "10.0.0.1");
    snprintf(f.dst, sizeof(f.dst), "10.0.0.2");
    cr_assert_eq(ctl_txn_begin(st, true, &t), 0);
    cr_assert_eq(ctl_store_event_put(t, &e), 0);
    cr_assert_eq(ctl_store_event_put(t, &f), 0);
    cr_assert_eq(ctl_txn_commit(t), 0);
    cr_assert_eq(ctl_txn_begin(st, false, &t), 0);
    cr_assert_eq(ctl_store_event_list(t, 10, &out, &n), 0);
    ctl_txn_abort(t);
    cr_assert_eq(n, 2);
    cr_assert_str_eq(out[0].script_kind, "timeout");
    cr_assert_str_eq(out[0].script_fn, "third_request");
    cr_assert_str_eq(out[0].service, "web");
    cr_assert_eq(out[0].filter_id, 0);
    cr_assert_str_eq(out[1].script_kind, "", "a filter's event has none");
    cr_assert_str_eq(out[1].script_fn, "");
    cr_assert_eq(out[1].filter_id, 9);
    free(out);
}
