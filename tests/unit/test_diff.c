/* Unit tests for controld/ctl_diff.c, the pure part of imports: one identity of a filter, the
 * mapping `filter import --sync` makes between a service's filters and a file's lines, and the
 * diff lines. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "controld/ctl_diff.h"

static struct ctl_filter flt(uint32_t id, const char *re, enum fgx_dir dir, bool nocase)
{
    return (struct ctl_filter){.id = id,
                               .service_id = 1,
                               .regex = (char *)re,
                               .dir = dir,
                               .nocase = nocase,
                               .active = true};
}

Test(diff, identity_is_regex_bytes_direction_and_case)
{
    struct ctl_filter a = flt(1, "evil[0-9]+", FGX_DIR_C2S, false);
    struct ctl_filter b = flt(2, "evil[0-9]+", FGX_DIR_C2S, false);

    cr_assert(ctl_filter_same(&a, &b), "ids do not matter");
    b.active = false;
    b.service_id = 9;
    cr_assert(ctl_filter_same(&a, &b), "neither enabled state nor service");
    b.dir = FGX_DIR_BOTH;
    cr_assert_not(ctl_filter_same(&a, &b), "another direction is another filter");
    b = flt(2, "evil[0-9]+", FGX_DIR_C2S, true);
    cr_assert_not(ctl_filter_same(&a, &b), "another case is another filter");
    b = flt(2, "(?:evil[0-9]+)", FGX_DIR_C2S, false);
    cr_assert_not(ctl_filter_same(&a, &b), "the same language, other bytes: another filter");
    b = flt(2, "evil[0-9]+ ", FGX_DIR_C2S, false);
    cr_assert_not(ctl_filter_same(&a, &b), "a trailing blank counts");
}

Test(diff, find_same_skips_the_filter_itself)
{
    struct ctl_filter fs[] = {flt(4, "a", FGX_DIR_BOTH, false), flt(7, "b", FGX_DIR_BOTH, false)};
    struct ctl_filter q = flt(0, "b", FGX_DIR_BOTH, false);

    cr_assert_eq(ctl_diff_find_same(fs, 2, &q), 1);
    q.id = 7;
    cr_assert_eq(ctl_diff_find_same(fs, 2, &q), -1, "a filter is not its own duplicate");
    q = flt(0, "c", FGX_DIR_BOTH, false);
    cr_assert_eq(ctl_diff_find_same(fs, 2, &q), -1);
}

Test(diff, sync_keeps_identical_adds_and_removes_the_rest)
{
    struct ctl_filter cur[] = {flt(3, "keep", FGX_DIR_C2S, false),
                               flt(5, "gone", FGX_DIR_BOTH, false),
                               flt(8, "keep2", FGX_DIR_S2C, true)};
    struct ctl_filter want[] = {flt(0, "keep2", FGX_DIR_S2C, true),
                                flt(0, "new", FGX_DIR_BOTH, false),
                                flt(0, "keep", FGX_DIR_C2S, false)};
    long match[3];
    bool kept[3];
    size_t a, b;

    cr_assert_eq(ctl_diff_filters(cur, 3, want, 3, false, match, kept, &a, &b), 0);
    cr_assert_eq(match[0], 2, "keep2 is filter 8");
    cr_assert_eq(match[1], -1, "new is added");
    cr_assert_eq(match[2], 0, "keep is filter 3");
    cr_assert(kept[0] && !kept[1] && kept[2], "gone (5) goes, the others stay");
}

Test(diff, the_same_file_twice_maps_every_line)
{
    struct ctl_filter want[] = {flt(0, "x", FGX_DIR_BOTH, false), flt(0, "y", FGX_DIR_C2S, false)};
    struct ctl_filter cur[] = {flt(11, "x", FGX_DIR_BOTH, false), flt(12, "y", FGX_DIR_C2S, false)};
    long match[2];
    bool kept[2];
    size_t a, b;

    cr_assert_eq(ctl_diff_filters(cur, 2, want, 2, false, match, kept, &a, &b), 0);
    cr_assert(match[0] == 0 && match[1] == 1 && kept[0] && kept[1],
              "a second load changes nothing");
}

Test(diff, two_identical_lines_are_refused)
{
    struct ctl_filter want[] = {flt(0, "x", FGX_DIR_BOTH, false), flt(0, "z", FGX_DIR_BOTH, false),
                                flt(0, "x", FGX_DIR_BOTH, false)};
    long match[3];
    bool kept[1];
    size_t a = 99, b = 99;

    cr_assert_eq(ctl_diff_filters(NULL, 0, want, 3, false, match, kept, &a, &b), -EEXIST);
    cr_assert(a == 0 && b == 2, "lines %zu and %zu", a, b);
}

Test(diff, old_duplicates_keep_the_lowest_id)
{
    /* Stored before the refusal existed: two identical filters, one file line. */
    struct ctl_filter cur[] = {flt(2, "x", FGX_DIR_BOTH, false), flt(6, "x", FGX_DIR_BOTH, false)};
    struct ctl_filter want[] = {flt(0, "x", FGX_DIR_BOTH, false)};
    long match[1];
    bool kept[2];
    size_t a, b;

    cr_assert_eq(ctl_diff_filters(cur, 2, want, 1, false, match, kept, &a, &b), 0);
    cr_assert(match[0] == 0 && kept[0] && !kept[1]);
}

Test(diff, lines_copy_their_regex_and_count_changes)
{
    struct ctl_diff d = {0};
    char re[] = "abc";
    struct ctl_diff_line l = {.op = CTL_DIFF_ADD, .filter = true, .id = 4, .regex = re};

    cr_assert_eq(ctl_diff_push(&d, &l), 0);
    re[0] = 'X';
    l.op = CTL_DIFF_KEEP;
    cr_assert_eq(ctl_diff_push(&d, &l), 0);
    l.op = CTL_DIFF_RM;
    l.regex = NULL;
    cr_assert_eq(ctl_diff_push(&d, &l), 0);
    cr_assert_eq(d.n, 3);
    cr_assert_str_eq(d.v[0].regex, "abc", "the diff owns a copy");
    cr_assert_null(d.v[2].regex);
    cr_assert_eq(ctl_diff_changes(&d), 2, "keep is no change");
    cr_assert_str_eq(ctl_diff_op_name(CTL_DIFF_CHANGE), "change");
    ctl_diff_release(&d);
    cr_assert_eq(d.n, 0);
}

Test(diff, service_changes_in_words)
{
    struct ctl_service a = {.id = 1, .ipproto = 6, .port = 80, .active = true}, b;
    char buf[160];

    snprintf(a.name, sizeof(a.name), "web");
    b = a;
    ctl_diff_service(&a, &b, buf, sizeof(buf));
    cr_assert_str_eq(buf, "");
    b.port = 8080;
    b.active = false;
    snprintf(b.name, sizeof(b.name), "web2");
    ctl_diff_service(&a, &b, buf, sizeof(buf));
    cr_assert_str_eq(buf, "name web -> web2, port 80 -> 8080, stopped");
    a = b;
    b.http = true;
    ctl_diff_service(&a, &b, buf, sizeof(buf));
    cr_assert_str_eq(buf, "proto http", "the HTTP kind is a change said in words");
    a = b;
    b.upstream_http1 = true;
    ctl_diff_service(&a, &b, buf, sizeof(buf));
    cr_assert_str_eq(buf, "upstream http1");
}

/* Issue 24: a sync keeps a filter whose regex, direction and case a line has, whatever the
 * line's action says; what changed is said in words. */
Test(diff, a_sync_maps_by_pattern_not_action)
{
    struct ctl_filter cur[] = {flt(4, "x", FGX_DIR_BOTH, false), flt(9, "y", FGX_DIR_C2S, false)};
    struct ctl_filter want[] = {flt(0, "x", FGX_DIR_BOTH, false), flt(0, "y", FGX_DIR_C2S, true)};
    long match[2];
    bool kept[2];
    size_t a, b;

    want[0].log = true;
    cr_assert_not(ctl_filter_same(&cur[0], &want[0]), "block and log are two filters to add");
    cr_assert(ctl_filter_same_pattern(&cur[0], &want[0]));
    cr_assert_eq(ctl_diff_filters(cur, 2, want, 2, false, match, kept, &a, &b), 0);
    cr_assert_eq(match[0], -1, "by identity the log line is another filter");
    cr_assert_eq(ctl_diff_filters(cur, 2, want, 2, true, match, kept, &a, &b), 0);
    cr_assert(match[0] == 0 && kept[0], "by pattern it is filter 4");
    cr_assert_eq(match[1], -1, "y with nocase is another pattern");
    cr_assert_not(kept[1]);
    /* two lines of one pattern are one filter: refused by pattern, not by identity */
    want[1] = flt(0, "x", FGX_DIR_BOTH, false);
    cr_assert_eq(ctl_diff_filters(cur, 2, want, 2, false, match, kept, &a, &b), 0);
    cr_assert_eq(ctl_diff_filters(cur, 2, want, 2, true, match, kept, &a, &b), -EEXIST);
    cr_assert(a == 0 && b == 1);
}

Test(diff, a_filter_change_in_words)
{
    struct ctl_filter x = flt(4, "x", FGX_DIR_BOTH, false), y = x;
    char buf[160];

    ctl_diff_filter(&x, &y, true, buf, sizeof(buf));
    cr_assert_str_eq(buf, "");
    y.log = true;
    ctl_diff_filter(&x, &y, true, buf, sizeof(buf));
    cr_assert_str_eq(buf, "action block -> log");
    y.label = "sqli";
    y.active = !x.active;
    ctl_diff_filter(&x, &y, true, buf, sizeof(buf));
    cr_assert_str_eq(buf, x.active ? "action block -> log, label none -> 'sqli', disabled"
                                   : "action block -> log, label none -> 'sqli', enabled");
    ctl_diff_filter(&x, &y, false, buf, sizeof(buf));
    cr_assert_str_eq(buf, "action block -> log, label none -> 'sqli'", "a sync keeps the state");
    ctl_diff_filter(&y, &x, false, buf, sizeof(buf));
    cr_assert_str_eq(buf, "action log -> block, label 'sqli' -> none");
}
