/* Unit tests for log-only filters and labels: the reassembly stage's log callback with real
 * hyperscan databases compiled by libcommon (a log match never drops and never stops the block
 * filters; an old stream's match is judged by the filter's action now), the label check, the
 * ruleset file's `log` and label="..." words, the events --top fold, and the offline regex
 * trial (libcommon/regex_test.c). */
#include <criterion/criterion.h>

#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "controld/ctl_top.h"
#include "fgexctl/cli_fmt.h"
#include "fgexctl/cli_ruleset.h"
#include "fgexctl/cmd.h"
#include "fgx/reasm.h"
#include "fgx/regex_test.h"
#include "fgx/ruleset.h"

#define LOG_ID(id) ((id) | FGX_FILTER_ID_LOG)

struct logs {
    int n;
    uint32_t id[8];
    char excerpt[8][128];
    uint8_t match_end[8];
};

static void on_log(void *arg, const struct fgx_reasm_match *m)
{
    struct logs *l = arg;

    cr_assert(m->log);
    cr_assert_lt(l->n, 8);
    l->id[l->n] = m->filter_id;
    memcpy(l->excerpt[l->n], m->excerpt, m->excerpt_len);
    l->excerpt[l->n][m->excerpt_len] = '\0';
    l->match_end[l->n] = m->match_end;
    l->n++;
}

static void no_hold(void *arg, uint64_t cookie, bool accept)
{
    (void)arg;
    (void)cookie;
    (void)accept;
}

/* One direction's database of pats[], compiled, serialized and loaded as controld and a
 * worker do it; *ids gets its id list as controld builds it (sorted by filter id). */
static struct hs_database *db_of(const struct fgx_pattern *pats, size_t n, int ipproto)
{
    struct fgx_blob b;
    struct hs_database *db = NULL;
    char err[256];

    cr_assert_eq(fgx_ruleset_compile(pats, n, FGX_DIR_C2S, ipproto, &b, err, sizeof(err)), 0, "%s",
                 err);
    cr_assert_eq(fgx_hsdb_load(b.data, b.len, &db), 0);
    fgx_blob_release(&b);
    return db;
}

static struct fgx_reasm_ctx *ctx;
static struct logs logs;
static struct fgx_reasm r;

static void setup(void)
{
    memset(&logs, 0, sizeof(logs));
    cr_assert_eq(fgx_reasm_ctx_new(8192, 4096, no_hold, NULL, &ctx), 0);
    fgx_reasm_ctx_set_log(ctx, on_log, &logs);
    fgx_reasm_init(&r);
}

static void teardown(void)
{
    fgx_reasm_release(ctx, &r);
    fgx_reasm_ctx_free(ctx);
}

static enum fgx_reasm_verdict seg(uint32_t seq, const char *s, struct fgx_reasm_match *m)
{
    return fgx_reasm_segment(ctx, &r, seq, 1, s, strlen(s), 0, 0, m);
}

TestSuite(logfil, .init = setup, .fini = teardown);

Test(logfil, log_match_passes_and_is_reported_once_per_stream)
{
    const struct fgx_pattern p[] = {{LOG_ID(7), "evil[0-9]+", FGX_DIR_BOTH, false}};
    struct hs_database *db = db_of(p, 1, IPPROTO_TCP);
    const uint32_t ids[] = {LOG_ID(7)};
    struct fgx_reasm_match m;

    cr_assert_eq(fgx_reasm_ctx_scratch(ctx, db), 0);
    cr_assert_eq(fgx_reasm_switch_db(ctx, &r, db, 1, ids, 1, NULL, NULL), 0);
    cr_assert_eq(seg(100, "GET ev", &m), FGX_REASM_ACCEPT);
    cr_assert_eq(seg(106, "il1337 HTTP", &m), FGX_REASM_ACCEPT);
    cr_assert_not(m.matched, "a log filter dropped the segment");
    cr_assert_eq(logs.n, 1);
    cr_assert_eq(logs.id[0], 7, "the id comes without the log bit: %u", logs.id[0]);
    /* The excerpt holds the bytes before the match end (from the ring) and after it. */
    cr_assert_str_eq(logs.excerpt[0], "GET evil1337 HTTP");
    cr_assert_eq(logs.match_end[0], strlen("GET evil1"), "hyperscan reports the first end");
    cr_assert_eq(seg(117, " evil42", &m), FGX_REASM_ACCEPT);
    cr_assert_eq(logs.n, 1, "SINGLEMATCH: one event per stream, got %d", logs.n);
    fgx_reasm_release(ctx, &r);
    fgx_hsdb_free(db);
}

Test(logfil, block_filter_still_judges_after_a_log_match)
{
    /* The log filter matches first (earlier in the bytes); the block filter must still drop. */
    const struct fgx_pattern p[] = {{LOG_ID(3), "GET", FGX_DIR_BOTH, false},
                                    {4, "evil[0-9]+", FGX_DIR_BOTH, false}};
    struct hs_database *db = db_of(p, 2, IPPROTO_TCP);
    const uint32_t ids[] = {LOG_ID(3), 4};
    struct fgx_reasm_match m;

    cr_assert_eq(fgx_reasm_ctx_scratch(ctx, db), 0);
    cr_assert_eq(fgx_reasm_switch_db(ctx, &r, db, 1, ids, 2, NULL, NULL), 0);
    cr_assert_eq(seg(1, "GET /evil1337", &m), FGX_REASM_DROP);
    cr_assert(m.matched);
    cr_assert_eq(m.filter_id, 4);
    cr_assert_not(m.log);
    cr_assert_eq(logs.n, 1);
    cr_assert_eq(logs.id[0], 3);
    fgx_reasm_release(ctx, &r);
    fgx_hsdb_free(db);
}

Test(logfil, old_stream_judged_by_the_action_now)
{
    /* BEGIN...END spans a ruleset change that switches filter 9 from block to log (same
     * filter, another database): the old stream finds it, and it must log, not drop. */
    const struct fgx_pattern blk[] = {{9, "BEGIN[^\n]{0,4000}END", FGX_DIR_BOTH, false}};
    const struct fgx_pattern lg[] = {{LOG_ID(9), "BEGIN[^\n]{0,4000}END", FGX_DIR_BOTH, false}};
    struct hs_database *db1 = db_of(blk, 1, IPPROTO_TCP), *db2 = db_of(lg, 1, IPPROTO_TCP);
    const uint32_t ids1[] = {9}, ids2[] = {LOG_ID(9)};
    char pad[600];
    struct fgx_reasm_match m;

    memset(pad, 'x', sizeof(pad) - 1);
    pad[sizeof(pad) - 1] = '\0';
    cr_assert_eq(fgx_reasm_ctx_scratch(ctx, db1), 0);
    cr_assert_eq(fgx_reasm_ctx_scratch(ctx, db2), 0);
    cr_assert_eq(fgx_reasm_switch_db(ctx, &r, db1, 1, ids1, 1, NULL, NULL), 0);
    cr_assert_eq(seg(1, "BEGIN", &m), FGX_REASM_ACCEPT);
    cr_assert_eq(seg(6, pad, &m), FGX_REASM_ACCEPT);
    cr_assert_eq(fgx_reasm_switch_db(ctx, &r, db2, 2, ids2, 1, NULL, NULL), 0);
    cr_assert_eq(seg(6 + 599, "END", &m), FGX_REASM_ACCEPT, "a log filter dropped");
    cr_assert_not(m.matched);
    cr_assert_eq(logs.n, 1, "the match across the change was not logged");
    cr_assert_eq(logs.id[0], 9);
    fgx_reasm_release(ctx, &r);
    fgx_hsdb_free(db1);
    fgx_hsdb_free(db2);
}

Test(logfil, log_to_block_on_an_old_stream_blocks)
{
    const struct fgx_pattern lg[] = {{LOG_ID(9), "BEGIN[^\n]{0,4000}END", FGX_DIR_BOTH, false}};
    const struct fgx_pattern blk[] = {{9, "BEGIN[^\n]{0,4000}END", FGX_DIR_BOTH, false}};
    struct hs_database *db1 = db_of(lg, 1, IPPROTO_TCP), *db2 = db_of(blk, 1, IPPROTO_TCP);
    const uint32_t ids1[] = {LOG_ID(9)}, ids2[] = {9};
    char pad[600];
    struct fgx_reasm_match m;

    memset(pad, 'x', sizeof(pad) - 1);
    pad[sizeof(pad) - 1] = '\0';
    cr_assert_eq(fgx_reasm_ctx_scratch(ctx, db1), 0);
    cr_assert_eq(fgx_reasm_ctx_scratch(ctx, db2), 0);
    cr_assert_eq(fgx_reasm_switch_db(ctx, &r, db1, 1, ids1, 1, NULL, NULL), 0);
    cr_assert_eq(seg(1, "BEGIN", &m), FGX_REASM_ACCEPT);
    cr_assert_eq(seg(6, pad, &m), FGX_REASM_ACCEPT);
    cr_assert_eq(fgx_reasm_switch_db(ctx, &r, db2, 2, ids2, 1, NULL, NULL), 0);
    cr_assert_eq(seg(6 + 599, "END", &m), FGX_REASM_DROP);
    cr_assert(m.matched);
    cr_assert_eq(m.filter_id, 9);
    cr_assert_eq(logs.n, 0);
    fgx_reasm_release(ctx, &r);
    fgx_hsdb_free(db1);
    fgx_hsdb_free(db2);
}

Test(logfil, datagram_log_then_block)
{
    const struct fgx_pattern p[] = {{LOG_ID(2), "hello", FGX_DIR_BOTH, false},
                                    {5, "evil[0-9]+", FGX_DIR_BOTH, false}};
    struct hs_database *db = db_of(p, 2, IPPROTO_UDP);
    struct fgx_reasm_match m;

    cr_assert_eq(fgx_reasm_ctx_scratch(ctx, db), 0);
    cr_assert_eq(fgx_reasm_scan_block(ctx, db, "hello world", 11, &m), 0);
    cr_assert_eq(logs.n, 1);
    cr_assert_eq(logs.id[0], 2);
    cr_assert_eq(fgx_reasm_scan_block(ctx, db, "hello evil77", 12, &m), 1);
    cr_assert_eq(m.filter_id, 5);
    cr_assert_eq(logs.n, 2, "each datagram reports its own log match");
    fgx_hsdb_free(db);
}

Test(logfil, block_only_keys_unchanged_by_the_log_bit)
{
    const struct fgx_pattern blk[] = {{4, "evil", FGX_DIR_BOTH, false}};
    const struct fgx_pattern lg[] = {{LOG_ID(4), "evil", FGX_DIR_BOTH, false}};

    /* A switch of action is another database (so an open flow reopens its stream). */
    cr_assert_neq(fgx_ruleset_key(blk, 1, FGX_DIR_C2S, IPPROTO_TCP),
                  fgx_ruleset_key(lg, 1, FGX_DIR_C2S, IPPROTO_TCP));
}

Test(logfil, labels)
{
    char err[128];

    cr_assert_eq(fgx_label_check(NULL, err, sizeof(err)), 0);
    cr_assert_eq(fgx_label_check("", err, sizeof(err)), 0);
    cr_assert_eq(fgx_label_check("team12 sqli", err, sizeof(err)), 0);
    cr_assert_eq(fgx_label_check("équipe ✓ /path \"q\"", err, sizeof(err)), 0);
    cr_assert_eq(fgx_label_check("a\tb", err, sizeof(err)), -EINVAL);
    cr_assert(strstr(err, "control character"), "%s", err);
    cr_assert_eq(fgx_label_check("a\x7f", err, sizeof(err)), -EINVAL);
    cr_assert_eq(fgx_label_check("a\xc2\x85", err, sizeof(err)), -EINVAL, "C1 NEL");
    cr_assert_eq(fgx_label_check("\xff", err, sizeof(err)), -EINVAL);
    cr_assert(strstr(err, "UTF-8"), "%s", err);
    cr_assert_eq(fgx_label_check("\xc0\xaf", err, sizeof(err)), -EINVAL, "overlong");
    cr_assert_eq(fgx_label_check("\xed\xa0\x80", err, sizeof(err)), -EINVAL, "surrogate");
    cr_assert_eq(fgx_label_check("\xe2\x9c", err, sizeof(err)), -EINVAL, "cut short");
    cr_assert_eq(fgx_label_check("0123456789012345678901234567890123456789012345678901234567890123",
                                 err, sizeof(err)),
                 0);
    cr_assert_eq(
        fgx_label_check("01234567890123456789012345678901234567890123456789012345678901234", err,
                        sizeof(err)),
        -EINVAL);
}

Test(logfil, ruleset_log_and_label_round_trip)
{
    static const char text[] = "c2s log label=\"team12 \\\"sqli\\\" a/b \\\\\" /evil[0-9]+/\n"
                               "nocase label=\"x\" block /a/b/\n"
                               "/plain/\n";
    Fgx__Ctl__FilterImport fi = FGX__CTL__FILTER_IMPORT__INIT;
    Fgx__Ctl__Filter fl[3], *fp[3];
    char err[256], *out = NULL;
    size_t outlen = 0;
    FILE *f;

    cr_assert_eq(cli_ruleset_parse(text, strlen(text), &fi, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(fi.n_filters, 3);
    cr_assert(fi.filters[0]->has_action);
    cr_assert_eq(fi.filters[0]->action, FGX__CTL__FILTER_ACTION__FILTER_ACTION_LOG);
    cr_assert_str_eq(fi.filters[0]->label, "team12 \"sqli\" a/b \\");
    cr_assert_str_eq(fi.filters[0]->regex, "evil[0-9]+");
    cr_assert_eq(fi.filters[1]->action, FGX__CTL__FILTER_ACTION__FILTER_ACTION_BLOCK);
    cr_assert_str_eq(fi.filters[1]->label, "x");
    cr_assert_str_eq(fi.filters[1]->regex, "a/b");
    cr_assert_not(fi.filters[2]->has_action);
    cr_assert_null(fi.filters[2]->label);
    /* Written back and read again: the same action, label and regex. */
    for (int i = 0; i < 3; i++) {
        fgx__ctl__filter__init(&fl[i]);
        fl[i].id = (uint32_t)i + 1;
        fl[i].regex = fi.filters[i]->regex;
        fl[i].dir = fi.filters[i]->has_dir ? fi.filters[i]->dir : FGX__CTL__DIR__DIR_BOTH;
        fl[i].active = 1;
        fl[i].has_action = fi.filters[i]->has_action;
        fl[i].action = fi.filters[i]->action;
        fl[i].label = fi.filters[i]->label;
        fp[i] = &fl[i];
    }
    f = open_memstream(&out, &outlen);
    cr_assert_not_null(f);
    cr_assert_eq(cli_ruleset_write(f, "web", fp, 3, err, sizeof(err)), 0);
    fclose(f);
    {
        Fgx__Ctl__FilterImport back = FGX__CTL__FILTER_IMPORT__INIT;

        cr_assert_eq(cli_ruleset_parse(out, outlen, &back, err, sizeof(err)), 0, "%s\n%s", err,
                     out);
        cr_assert_eq(back.n_filters, 3);
        cr_assert_eq(back.filters[0]->action, FGX__CTL__FILTER_ACTION__FILTER_ACTION_LOG);
        cr_assert_str_eq(back.filters[0]->label, "team12 \"sqli\" a/b \\");
        cr_assert_str_eq(back.filters[0]->regex, "evil[0-9]+");
        cr_assert_str_eq(back.filters[1]->regex, "a/b");
        cr_assert_null(back.filters[2]->label);
        cli_ruleset_release(&back);
    }
    free(out);
    cli_ruleset_release(&fi);
}

Test(logfil, ruleset_bad_words)
{
    Fgx__Ctl__FilterImport fi = FGX__CTL__FILTER_IMPORT__INIT;
    char err[256];
    static const char *const bad[] = {
        "log log /a/\n",
        "log block /a/\n",
        "label=\"x /a/\n",
        "label=\"a\"b /a/\n",
        "label=\"a\" label=\"b\" /a/\n",
        "label=\"\x01\" /a/\n",
    };

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        cr_assert_eq(cli_ruleset_parse(bad[i], strlen(bad[i]), &fi, err, sizeof(err)), -EINVAL,
                     "accepted: %s", bad[i]);
        cr_assert(strncmp(err, "line 1: ", 8) == 0, "%s", err);
    }
}

static struct ctl_event ev(const char *src, uint32_t fid, uint64_t t, bool log)
{
    struct ctl_event e = {.filter_id = fid, .time_ns = t, .service_id = 1, .log = log};

    strcpy(e.src, src);
    strcpy(e.service, "web");
    return e;
}

Test(logfil, top_src_folds_per_source_and_filter_newest_first)
{
    struct ctl_event e[] = {
        ev("10.0.0.1", 3, 100, false), ev("10.0.0.2", 3, 150, false),
        ev("10.0.0.1", 3, 300, false), ev("10.0.0.1", 4, 200, false),
        ev("10.0.0.2", 3, 120, false), ev("10.0.0.3", 5, 999, true), /* a log match */
        ev("10.0.0.2", 3, 10, false),                                /* older than since */
    };
    const struct ctl_event *p[7];
    struct ctl_top_row *rows;
    size_t n;

    for (int i = 0; i < 7; i++)
        p[i] = &e[i];
    cr_assert_eq(ctl_top_src(p, 7, 50, &rows, &n), 0);
    cr_assert_eq(n, 3);
    cr_assert_str_eq(rows[0].src, "10.0.0.1");
    cr_assert_eq(rows[0].filter_id, 3);
    cr_assert_eq(rows[0].blocks, 2);
    cr_assert_eq(rows[0].first_ns, 100);
    cr_assert_eq(rows[0].last_ns, 300);
    cr_assert_str_eq(rows[1].src, "10.0.0.1");
    cr_assert_eq(rows[1].filter_id, 4);
    cr_assert_str_eq(rows[2].src, "10.0.0.2");
    cr_assert_eq(rows[2].blocks, 2, "the one before since is left out");
    cr_assert_str_eq(rows[2].service, "web");
    free(rows);
    cr_assert_eq(ctl_top_src(p, 0, 0, &rows, &n), 0);
    cr_assert_eq(n, 0);
    cr_assert_null(rows);
}

Test(logfil, durations)
{
    uint64_t s;

    cr_assert_eq(cli_cmd_parse_duration("30m", &s), 0);
    cr_assert_eq(s, 1800);
    cr_assert_eq(cli_cmd_parse_duration("90", &s), 0);
    cr_assert_eq(s, 90);
    cr_assert_eq(cli_cmd_parse_duration("2h", &s), 0);
    cr_assert_eq(s, 7200);
    cr_assert_eq(cli_cmd_parse_duration("1d", &s), 0);
    cr_assert_eq(s, 86400);
    cr_assert_eq(cli_cmd_parse_duration("m", &s), -EINVAL);
    cr_assert_eq(cli_cmd_parse_duration("5x", &s), -EINVAL);
    cr_assert_eq(cli_cmd_parse_duration("-5", &s), -EINVAL);
    cr_assert_eq(cli_cmd_parse_duration("5mm", &s), -EINVAL);
}

Test(logfil, regex_trial_stream_across_pieces)
{
    struct fgx_pattern_warnings w;
    struct fgx_regex_test_match m;
    struct fgx_regex_test *rt;
    char err[512];

    cr_assert_eq(fgx_regex_test_new("evil[0-9]+", false, IPPROTO_TCP, &w, err, sizeof(err), &rt), 0,
                 "%s", err);
    cr_assert_eq(w.n, 0);
    cr_assert_eq(fgx_regex_test_feed(rt, "aaaa ev", 7, err, sizeof(err)), 0);
    cr_assert_eq(fgx_regex_test_feed(rt, "il42", 4, err, sizeof(err)), 0);
    cr_assert_eq(fgx_regex_test_feed(rt, " tail", 5, err, sizeof(err)), 0);
    fgx_regex_test_result(rt, &m);
    cr_assert(m.matched);
    cr_assert_eq(m.end, 10, "the first match end (SINGLEMATCH): %lu", (unsigned long)m.end);
    cr_assert_eq(m.match_end, 10);
    cr_assert_eq(m.excerpt_len, 16, "bytes after the match come from later pieces too");
    cr_assert(memcmp(m.excerpt, "aaaa evil42 tail", 16) == 0);
    cr_assert_eq(fgx_regex_test_bytes(rt), 16);
    fgx_regex_test_free(rt);
}

Test(logfil, regex_trial_refuses_as_filter_add)
{
    struct fgx_regex_test *rt = NULL;
    char err[512], err2[512];

    cr_assert_eq(fgx_regex_test_new("a(b", false, IPPROTO_TCP, NULL, err, sizeof(err), &rt),
                 -EINVAL);
    cr_assert_null(rt);
    cr_assert_eq(fgx_filter_regex_lint("a(b", false, IPPROTO_TCP, NULL, err2, sizeof(err2)),
                 -EINVAL);
    cr_assert_str_eq(err, err2);
    cr_assert(strncmp(err, "invalid regex \"a(b\": ", 21) == 0, "%s", err);
    /* A stream never ends while it can be blocked: refused on TCP, fine on UDP. */
    cr_assert_eq(fgx_regex_test_new("evil$", false, IPPROTO_TCP, NULL, err, sizeof(err), &rt),
                 -EINVAL);
    cr_assert_eq(fgx_regex_test_new("evil$", false, IPPROTO_UDP, NULL, err, sizeof(err), &rt), 0);
    cr_assert_eq(fgx_regex_test_feed(rt, "xx evil", 7, err, sizeof(err)), 0);
    cr_assert_eq(fgx_regex_test_feed(rt, "x", 1, err, sizeof(err)), -EINVAL,
                 "a datagram is one piece");
    fgx_regex_test_free(rt);
}

Test(logfil, regex_trial_no_match_and_nocase)
{
    struct fgx_regex_test_match m;
    struct fgx_regex_test *rt;
    char err[512];

    cr_assert_eq(fgx_regex_test_new("EVIL", true, IPPROTO_TCP, NULL, err, sizeof(err), &rt), 0);
    cr_assert_eq(fgx_regex_test_feed(rt, "good", 4, err, sizeof(err)), 0);
    fgx_regex_test_result(rt, &m);
    cr_assert_not(m.matched);
    cr_assert_eq(fgx_regex_test_feed(rt, "evil", 4, err, sizeof(err)), 0);
    fgx_regex_test_result(rt, &m);
    cr_assert(m.matched);
    cr_assert_eq(m.end, 8);
    fgx_regex_test_free(rt);
}

/* ---- rendering: the new columns appear only where they are used ---- */


static char *render(const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep, bool json)
{
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);

    cr_assert_not_null(f);
    cr_assert_eq(cli_fmt_reply(f, req, rep, json), 0);
    (void)fclose(f);
    return out;
}

Test(logfil, filter_table_columns_only_when_used)
{
    Fgx__Ctl__Ref ref = FGX__CTL__REF__INIT;
    Fgx__Ctl__Request req = FGX__CTL__REQUEST__INIT;
    Fgx__Ctl__Reply rep = FGX__CTL__REPLY__INIT;
    Fgx__Ctl__Filter a = FGX__CTL__FILTER__INIT, b = FGX__CTL__FILTER__INIT, *fs[] = {&a, &b};
    char *out;

    ref.ref = (char *)"web";
    req.req_case = FGX__CTL__REQUEST__REQ_FILTER_LIST;
    req.filter_list = &ref;
    a.id = 1;
    a.regex = (char *)"evil";
    a.active = 1;
    a.blocked = 4;
    b.id = 2;
    b.regex = (char *)"probe";
    b.active = 1;
    rep.n_filters = 2;
    rep.filters = fs;
    out = render(&req, &rep, false);
    cr_assert_str_eq(out, "ID  DIR   NOCASE  ACTIVE  BLOCKED  REGEX\n"
                          " 1  both  no      yes           4  evil\n"
                          " 2  both  no      yes           0  probe\n");
    free(out);
    b.has_action = 1;
    b.action = FGX__CTL__FILTER_ACTION__FILTER_ACTION_LOG;
    b.matched = 12;
    b.label = (char *)"t12 ✓";
    out = render(&req, &rep, false);
    /* The label is text: shown as is, and its width counted in characters. */
    cr_assert_str_eq(out, "ID  DIR   NOCASE  ACTIVE  ACTION  BLOCKED  MATCHED  LABEL  REGEX\n"
                          " 1  both  no      yes     block         4        0  -      evil\n"
                          " 2  both  no      yes     log           0       12  t12 ✓  probe\n");
    free(out);
}

Test(logfil, events_mark_log_and_labels)
{
    Fgx__Ctl__EventsQuery q = FGX__CTL__EVENTS_QUERY__INIT;
    Fgx__Ctl__Request req = FGX__CTL__REQUEST__INIT;
    Fgx__Ctl__Reply rep = FGX__CTL__REPLY__INIT;
    Fgx__Ctl__Event e = FGX__CTL__EVENT__INIT, *es[] = {&e};
    char *out = NULL;
    size_t len = 0;
    FILE *f;

    req.req_case = FGX__CTL__REQUEST__REQ_EVENTS;
    req.events = &q;
    e.seq = 1;
    e.service = (char *)"web";
    e.filter_id = 7;
    e.src = (char *)"10.0.0.5";
    e.dst = (char *)"10.0.0.1";
    e.has_log = e.log = 1;
    e.label = (char *)"t12";
    rep.n_events = 1;
    rep.events = es;
    out = render(&req, &rep, false);
    cr_assert(strstr(out, "LABEL"), "%s", out);
    cr_assert(strstr(out, "7/log"), "%s", out);
    cr_assert(strstr(out, "  t12  "), "%s", out);
    free(out);
    out = render(&req, &rep, true);
    cr_assert(strstr(out, "\"action\":\"log\",\"label\":\"t12\""), "%s", out);
    free(out);
    /* --follow: one layout for every batch, the label beside the filter */
    out = NULL;
    f = open_memstream(&out, &len);
    cr_assert_eq(cli_cmd_events_follow(f, &rep, false, true), 0);
    fclose(f);
    cr_assert_null(strstr(out, "LABEL"), "%s", out);
    cr_assert(strstr(out, "7/log (t12)"), "%s", out);
    free(out);
}

Test(logfil, at_one_end_every_log_filter_logs_and_the_oldest_block_filter_blocks)
{
    /* four filters whose matches all end at the same byte (after "evil1"): whatever order
     * hyperscan reports them in, both log filters log and the block is filter 4's */
    const struct fgx_pattern p[] = {{LOG_ID(2), "vil1", FGX_DIR_BOTH, false},
                                    {4, "il1", FGX_DIR_BOTH, false},
                                    {6, "evil1", FGX_DIR_BOTH, false},
                                    {LOG_ID(9), "l1", FGX_DIR_BOTH, false},
                                    {11, "evil1x", FGX_DIR_BOTH, false}};
    struct hs_database *db = db_of(p, 5, IPPROTO_TCP);
    const uint32_t ids[] = {LOG_ID(2), 4, 6, LOG_ID(9), 11};
    struct fgx_reasm_match m;

    cr_assert_eq(fgx_reasm_ctx_scratch(ctx, db), 0);
    cr_assert_eq(fgx_reasm_switch_db(ctx, &r, db, 1, ids, 5, NULL, NULL), 0);
    cr_assert_eq(seg(1, "GET /evil1x", &m), FGX_REASM_DROP);
    cr_assert(m.matched);
    cr_assert_eq(m.filter_id, 4, "the block went to filter %u", m.filter_id);
    cr_assert_eq(m.match_end, strlen("GET /evil1"), "the block ends at the first end");
    cr_assert_eq(logs.n, 2, "log filters at the block's end logged: %d", logs.n);
    cr_assert((logs.id[0] == 2 && logs.id[1] == 9) || (logs.id[0] == 9 && logs.id[1] == 2));
    fgx_reasm_release(ctx, &r);
    fgx_hsdb_free(db);
}
