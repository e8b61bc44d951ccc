/* Unit tests for the rulesets: the compile half (libcommon/ruleset_compile.c) and the load half
 * (libcommon/hsdb.c), against real hyperscan, scanning the loaded databases as the workers do. */
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include <hs.h>

#include "fgx/ruleset.h"

struct hits {
    unsigned n;
    unsigned ids[8];
};

static int on_match(unsigned id, unsigned long long from, unsigned long long to, unsigned flags,
                    void *ctx)
{
    struct hits *h = ctx;

    (void)from;
    (void)to;
    (void)flags;
    if (h->n < 8)
        h->ids[h->n] = id;
    h->n++;
    return 0;
}

static bool hit(const struct hits *h, unsigned id)
{
    for (unsigned i = 0; i < h->n && i < 8; i++)
        if (h->ids[i] == id)
            return true;
    return false;
}

static struct hs_database *compile_load(const struct fgx_pattern *p, size_t n, enum fgx_dir dir,
                                        int proto)
{
    struct fgx_blob b;
    struct hs_database *db = NULL;
    char err[256];

    cr_assert_eq(fgx_ruleset_compile(p, n, dir, proto, &b, err, sizeof(err)), 0, "%s", err);
    cr_assert_gt(b.len, 0);
    cr_assert_not_null(b.data);
    cr_assert_eq(b.hash, fgx_ruleset_key(p, n, dir, proto));
    cr_assert_eq(fgx_hsdb_load(b.data, b.len, &db), 0);
    cr_assert_not_null(db);
    fgx_blob_release(&b);
    cr_assert_null(b.data);
    return db;
}

/* Scan the chunks as one TCP stream; returns what matched. */
static struct hits scan_stream(struct hs_database *db, const char *const *chunks, size_t n)
{
    hs_scratch_t *scratch = NULL;
    hs_stream_t *st = NULL;
    struct hits h = {0};

    cr_assert_eq(hs_alloc_scratch(db, &scratch), HS_SUCCESS);
    cr_assert_eq(hs_open_stream(db, 0, &st), HS_SUCCESS);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(
            hs_scan_stream(st, chunks[i], (unsigned)strlen(chunks[i]), 0, scratch, on_match, &h),
            HS_SUCCESS);
    cr_assert_eq(hs_close_stream(st, scratch, on_match, &h), HS_SUCCESS);
    hs_free_scratch(scratch);
    return h;
}

static struct hits scan_block(struct hs_database *db, const char *data)
{
    hs_scratch_t *scratch = NULL;
    struct hits h = {0};

    cr_assert_eq(hs_alloc_scratch(db, &scratch), HS_SUCCESS);
    cr_assert_eq(hs_scan(db, data, (unsigned)strlen(data), 0, scratch, on_match, &h), HS_SUCCESS);
    hs_free_scratch(scratch);
    return h;
}

Test(ruleset, tcp_stream_split_match)
{
    struct fgx_pattern p[] = {{.filter_id = 41, .regex = "flag\\{[a-z]+\\}", .dir = FGX_DIR_BOTH}};
    struct hs_database *db = compile_load(p, 1, FGX_DIR_C2S, IPPROTO_TCP);
    const char *split[] = {"GET /?x=fla", "g{secret} HTTP/1.1"};
    const char *clean[] = {"GET /?x=fla", "G{secret} HTTP/1.1"};
    struct hits h;
    size_t size = 0;

    /* A stream-mode database has per-stream state; a block one would refuse hs_open_stream. */
    cr_assert_eq(hs_stream_size(db, &size), HS_SUCCESS);
    h = scan_stream(db, split, 2);
    cr_assert_eq(h.n, 1, "a match split over two writes must be found exactly once");
    cr_assert_eq(h.ids[0], 41);
    h = scan_stream(db, clean, 2);
    cr_assert_eq(h.n, 0);
    fgx_hsdb_free(db);
}

Test(ruleset, udp_block_mode)
{
    struct fgx_pattern p[] = {{.filter_id = 7, .regex = "^\\x00\\x01evil", .dir = FGX_DIR_BOTH}};
    struct hs_database *db = compile_load(p, 1, FGX_DIR_S2C, IPPROTO_UDP);
    hs_stream_t *st = NULL;
    struct hits h;
    size_t size = 0;

    cr_assert_neq(hs_stream_size(db, &size), HS_SUCCESS, "UDP must be block mode");
    cr_assert_neq(hs_open_stream(db, 0, &st), HS_SUCCESS);
    /* The payload holds a NUL, so scan with explicit lengths rather than scan_block(). */
    {
        hs_scratch_t *scratch = NULL;
        static const char dgram[] = "\x00\x01"
                                    "evil payload";
        static const char other[] = "x\x00\x01"
                                    "evil payload";

        cr_assert_eq(hs_alloc_scratch(db, &scratch), HS_SUCCESS);
        memset(&h, 0, sizeof(h));
        cr_assert_eq(hs_scan(db, dgram, sizeof(dgram) - 1, 0, scratch, on_match, &h), HS_SUCCESS);
        cr_assert_eq(h.n, 1);
        cr_assert_eq(h.ids[0], 7);
        memset(&h, 0, sizeof(h));
        cr_assert_eq(hs_scan(db, other, sizeof(other) - 1, 0, scratch, on_match, &h), HS_SUCCESS);
        cr_assert_eq(h.n, 0, "anchored pattern must not match past the datagram start");
        hs_free_scratch(scratch);
    }
    fgx_hsdb_free(db);
}

Test(ruleset, caseless_and_dotall)
{
    struct fgx_pattern p[] = {
        {.filter_id = 1, .regex = "admin", .dir = FGX_DIR_BOTH, .nocase = true},
        {.filter_id = 2, .regex = "Secret", .dir = FGX_DIR_BOTH},
        {.filter_id = 3, .regex = "a.b", .dir = FGX_DIR_BOTH},
    };
    struct hs_database *db = compile_load(p, 3, FGX_DIR_C2S, IPPROTO_UDP);
    struct hits h;

    h = scan_block(db, "user=AdMiN");
    cr_assert(hit(&h, 1));
    h = scan_block(db, "SECRET secret");
    cr_assert_eq(h.n, 0, "only nocase filters are caseless");
    h = scan_block(db, "a\nb");
    cr_assert(hit(&h, 3), "dot must match a newline");
    h = scan_block(db, "Secret Secret Secret");
    cr_assert_eq(h.n, 1, "single-match: one report per filter");
    fgx_hsdb_free(db);
}

Test(ruleset, direction_selection)
{
    struct fgx_pattern p[] = {
        {.filter_id = 10, .regex = "upload", .dir = FGX_DIR_C2S},
        {.filter_id = 20, .regex = "leak", .dir = FGX_DIR_S2C},
        {.filter_id = 30, .regex = "both", .dir = FGX_DIR_BOTH},
    };
    struct hs_database *c2s = compile_load(p, 3, FGX_DIR_C2S, IPPROTO_UDP);
    struct hs_database *s2c = compile_load(p, 3, FGX_DIR_S2C, IPPROTO_UDP);
    struct hits h;

    h = scan_block(c2s, "upload leak both");
    cr_assert(hit(&h, 10));
    cr_assert_not(hit(&h, 20));
    cr_assert(hit(&h, 30));
    h = scan_block(s2c, "upload leak both");
    cr_assert_not(hit(&h, 10));
    cr_assert(hit(&h, 20));
    cr_assert(hit(&h, 30));
    fgx_hsdb_free(c2s);
    fgx_hsdb_free(s2c);
}

Test(ruleset, no_pattern_for_direction)
{
    struct fgx_pattern p[] = {{.filter_id = 10, .regex = "upload", .dir = FGX_DIR_C2S}};
    struct fgx_blob b;
    char err[64];

    cr_assert_eq(fgx_ruleset_compile(p, 1, FGX_DIR_S2C, IPPROTO_TCP, &b, err, sizeof(err)), 0);
    cr_assert_eq(b.len, 0);
    cr_assert_null(b.data);
    cr_assert_eq(fgx_ruleset_compile(NULL, 0, FGX_DIR_C2S, IPPROTO_TCP, &b, err, sizeof(err)), 0);
    cr_assert_eq(b.len, 0);
    fgx_blob_release(&b);
}

Test(ruleset, invalid_regex_has_hyperscan_message)
{
    char err[256];

    cr_assert_eq(fgx_pattern_check("abc(", false, IPPROTO_TCP, err, sizeof(err)), -EINVAL);
    cr_assert(strstr(err, "parenthes") != NULL, "message: %s", err);
    /* Backreferences are unsupported by hyperscan: its own message must come through. */
    cr_assert_eq(fgx_pattern_check("(a)\\1", false, IPPROTO_TCP, err, sizeof(err)), -EINVAL);
    cr_assert(strstr(err, "eference") != NULL, "message: %s", err);
    cr_assert_eq(fgx_pattern_check("flag\\{", true, IPPROTO_UDP, err, sizeof(err)), 0);
    cr_assert_str_eq(err, "");
    cr_assert_eq(fgx_pattern_check("abc", false, IPPROTO_ICMP, err, sizeof(err)), -EINVAL);
}

Test(ruleset, empty_and_empty_match_refused)
{
    char err[256], *big;

    cr_assert_eq(fgx_pattern_check("", false, IPPROTO_TCP, err, sizeof(err)), -EINVAL);
    cr_assert_str_eq(err, "empty regex");
    cr_assert_eq(fgx_pattern_check(NULL, false, IPPROTO_TCP, err, sizeof(err)), -EINVAL);
    cr_assert_eq(fgx_pattern_check("a*", false, IPPROTO_TCP, err, sizeof(err)), -EINVAL);
    cr_assert(strstr(err, "empty") != NULL, "message: %s", err);
    cr_assert_eq(fgx_pattern_check("x?|", false, IPPROTO_UDP, err, sizeof(err)), -EINVAL);

    big = malloc(5000);
    cr_assert_not_null(big);
    memset(big, 'a', 4999);
    big[4999] = '\0';
    cr_assert_eq(fgx_pattern_check(big, false, IPPROTO_TCP, err, sizeof(err)), -EINVAL);
    cr_assert(strstr(err, "4096") != NULL, "message: %s", err);
    big[4096] = '\0';
    cr_assert_eq(fgx_pattern_check(big, false, IPPROTO_TCP, err, sizeof(err)), 0, "%s", err);
    free(big);
}

/* Hyperscan's advice names a flag nobody using fgex can set: say what the regex would do. */
Test(ruleset, empty_match_says_what_it_would_do)
{
    char err[256];

    cr_assert_eq(fgx_pattern_check(".*", false, IPPROTO_TCP, err, sizeof(err)), -EINVAL);
    cr_assert_str_eq(err, "a regex that matches the empty string would match every connection");
    cr_assert_eq(fgx_pattern_check("x?", false, IPPROTO_UDP, err, sizeof(err)), -EINVAL);
    cr_assert_str_eq(err, "a regex that matches the empty string would match every datagram");
}

/* A TCP stream never reaches its end while it can be blocked (the workers never ask hyperscan
 * for end-of-data matches): a pattern that matches only there is refused on TCP. A datagram is
 * scanned whole in block mode, where '$' is its end: accepted on UDP. */
Test(ruleset, end_of_data_only_refused_on_tcp)
{
    static const char *const eod[] = {"$", "evil$", "evil\\z", "evil\\Z", "(a|b)c$",
                                      "x[$]$", "\\$$"};
    char err[512];

    for (size_t i = 0; i < sizeof(eod) / sizeof(eod[0]); i++) {
        cr_assert_eq(fgx_pattern_check(eod[i], false, IPPROTO_TCP, err, sizeof(err)), -EINVAL,
                     "%s accepted on tcp", eod[i]);
        cr_assert(strstr(err, "end of the data") != NULL, "%s: %s", eod[i], err);
        cr_assert_eq(fgx_pattern_check(eod[i], false, IPPROTO_UDP, err, sizeof(err)), 0,
                     "%s on udp: %s", eod[i], err);
    }
    /* '$' only as one way among others, or in multiline mode, or quoted: still accepted. */
    cr_assert_eq(fgx_pattern_check("evil(\\n|$)", false, IPPROTO_TCP, err, sizeof(err)), 0);
    cr_assert_eq(fgx_pattern_check("(?m)evil$", false, IPPROTO_TCP, err, sizeof(err)), 0);
    cr_assert_eq(fgx_pattern_check("cost[$]5", false, IPPROTO_TCP, err, sizeof(err)), 0);
    cr_assert_eq(fgx_pattern_check("cost\\$5", false, IPPROTO_TCP, err, sizeof(err)), 0);
}

static bool warned(const struct fgx_pattern_warnings *w, const char *what)
{
    for (size_t i = 0; i < w->n; i++)
        if (strstr(w->text[i], what) != NULL)
            return true;
    return false;
}

Test(ruleset, warns_on_what_blocks_honest_traffic)
{
    struct fgx_pattern_warnings w;
    char err[512];

    /* Matches without a byte: any stream (tests below); with one or two: almost everything. */
    cr_assert_eq(fgx_pattern_lint("\\b", false, IPPROTO_TCP, &w, err, sizeof(err)), 0, "%s", err);
    cr_assert(warned(&w, "it matches any connection"), "n=%zu %s", w.n, w.text[0]);
    cr_assert_eq(fgx_pattern_lint("\\b", false, IPPROTO_UDP, &w, err, sizeof(err)), 0);
    cr_assert(warned(&w, "it matches any datagram"));
    cr_assert_eq(fgx_pattern_lint("\\w", false, IPPROTO_TCP, &w, err, sizeof(err)), 0);
    cr_assert(warned(&w, "as few as 1 byte:"));
    cr_assert_eq(fgx_pattern_lint("a", true, IPPROTO_UDP, &w, err, sizeof(err)), 0);
    cr_assert(warned(&w, "as few as 1 byte:"));
    cr_assert_eq(fgx_pattern_lint("ab|xyz", false, IPPROTO_TCP, &w, err, sizeof(err)), 0);
    cr_assert(warned(&w, "as few as 2 bytes"));
    /* '^' is the start of the connection's stream on TCP; of the datagram on UDP, as meant. */
    cr_assert_eq(fgx_pattern_lint("^GET /flag", false, IPPROTO_TCP, &w, err, sizeof(err)), 0);
    cr_assert_eq(w.n, 1);
    cr_assert(warned(&w, "start of the connection's stream"));
    cr_assert_eq(fgx_pattern_lint("\\AGET", false, IPPROTO_TCP, &w, err, sizeof(err)), 0);
    cr_assert(warned(&w, "start of the connection's stream"));
    cr_assert_eq(fgx_pattern_lint("^GET /flag", false, IPPROTO_UDP, &w, err, sizeof(err)), 0);
    cr_assert_eq(w.n, 0);
    /* Part of it needs the end of the data: that part never matches on TCP. */
    cr_assert_eq(fgx_pattern_lint("evil(\\n|$)", false, IPPROTO_TCP, &w, err, sizeof(err)), 0);
    cr_assert_eq(w.n, 1);
    cr_assert(warned(&w, "never match on a TCP stream"));
    cr_assert_eq(fgx_pattern_lint("evil(\\n|$)", false, IPPROTO_UDP, &w, err, sizeof(err)), 0);
    cr_assert_eq(w.n, 0);
    /* None of that: a caret or dollar in a class or escaped, (?m), an ordinary filter. */
    static const char *const quiet[] = {"evil[0-9]+", "[^a]bcd", "a[]^$]bc", "x\\^y\\$z",
                                        "(?m)^GET /", "\\Q^$\\E1", "FLAG\\{", "abc\\b"};
    for (size_t i = 0; i < sizeof(quiet) / sizeof(quiet[0]); i++) {
        cr_assert_eq(fgx_pattern_lint(quiet[i], false, IPPROTO_TCP, &w, err, sizeof(err)), 0,
                     "%s: %s", quiet[i], err);
        cr_assert_eq(w.n, 0, "%s: %s", quiet[i], w.text[0]);
    }
    /* A refused regex has no warnings. */
    cr_assert_eq(fgx_pattern_lint("$", false, IPPROTO_TCP, &w, err, sizeof(err)), -EINVAL);
    cr_assert_eq(w.n, 0);
    cr_assert_eq(fgx_pattern_lint("a(", false, IPPROTO_TCP, &w, err, sizeof(err)), -EINVAL);
    cr_assert_eq(w.n, 0);
}

/* What matches any stream: at a place every stream has (zero width), or within its first
 * FGX_PATTERN_PROBE_LEN bytes whatever they are. Hyperscan refuses what matches the empty string
 * (a*, \\x00*, x?) outright. */
Test(ruleset, any_stream_patterns)
{
    static const char *const any[] = {"\\b",  "\\B",     "^",     "\\A",  "(?m)^", "(?m)$", "^a*",
                                      ".",   "(?s).",  "^.",    "[^x]", "\\S",   "..",    ".{4}",
                                      "[ -~]", "[\\x00-\\x7f]", "\\b|x"};
    static const char *const not_any[] = {"\\w",  "\\W",  "a",      "GET",   ".{5}",
                                          "evil[0-9]+", "FLAG\\{", "^GET /", "\\x00\\x00"};
    static const char *const empty[] = {"a*", "\\x00*", "x?", ".*", "(a|b)*c?"};
    struct fgx_pattern_warnings w;
    char err[512];

    for (int proto = 0; proto < 2; proto++) {
        int ipp = proto ? IPPROTO_UDP : IPPROTO_TCP;

        for (size_t i = 0; i < sizeof(any) / sizeof(any[0]); i++) {
            cr_assert_eq(fgx_pattern_lint(any[i], false, ipp, &w, err, sizeof(err)), 0, "%s: %s",
                         any[i], err);
            cr_assert(w.any_stream, "%s (%d) does not match any stream", any[i], ipp);
            cr_assert(w.n >= 1 && strncmp(w.text[0], "it matches any ", 15) == 0, "%s: %s",
                      any[i], w.text[0]);
        }
        for (size_t i = 0; i < sizeof(not_any) / sizeof(not_any[0]); i++) {
            cr_assert_eq(fgx_pattern_lint(not_any[i], false, ipp, &w, err, sizeof(err)), 0,
                         "%s: %s", not_any[i], err);
            cr_assert(!w.any_stream, "%s (%d) matches any stream: %s", not_any[i], ipp, w.text[0]);
        }
        for (size_t i = 0; i < sizeof(empty) / sizeof(empty[0]); i++)
            cr_assert_eq(fgx_pattern_lint(empty[i], false, ipp, &w, err, sizeof(err)), -EINVAL,
                         "%s accepted", empty[i]);
    }
    /* nocase counts: [a-z] alone is a quarter of the text bytes, with case still not 90% */
    cr_assert_eq(fgx_pattern_lint("[a-z]", true, IPPROTO_TCP, &w, err, sizeof(err)), 0);
    cr_assert(!w.any_stream);
}

Test(ruleset, compile_error_names_filter)
{
    struct fgx_pattern p[] = {
        {.filter_id = 5, .regex = "fine", .dir = FGX_DIR_BOTH},
        {.filter_id = 77, .regex = "bad[", .dir = FGX_DIR_C2S},
    };
    struct fgx_blob b;
    char err[256];

    cr_assert_eq(fgx_ruleset_compile(p, 2, FGX_DIR_C2S, IPPROTO_TCP, &b, err, sizeof(err)),
                 -EINVAL);
    cr_assert(strncmp(err, "filter 77: ", 11) == 0, "message: %s", err);
    cr_assert_null(b.data);
    /* The bad one does not apply to S2C, so that direction still compiles. */
    cr_assert_eq(fgx_ruleset_compile(p, 2, FGX_DIR_S2C, IPPROTO_TCP, &b, err, sizeof(err)), 0);
    cr_assert_gt(b.len, 0);
    fgx_blob_release(&b);

    p[1].regex = "";
    cr_assert_eq(fgx_ruleset_compile(p, 2, FGX_DIR_C2S, IPPROTO_TCP, &b, err, sizeof(err)),
                 -EINVAL);
    cr_assert_str_eq(err, "filter 77: empty regex");
}

Test(ruleset, key_stable_and_distinct)
{
    struct fgx_pattern a[] = {
        {.filter_id = 1, .regex = "abc", .dir = FGX_DIR_BOTH},
        {.filter_id = 2, .regex = "def", .dir = FGX_DIR_C2S},
    };
    struct fgx_pattern b[2];
    uint64_t k = fgx_ruleset_key(a, 2, FGX_DIR_C2S, IPPROTO_TCP);

    cr_assert_eq(k, fgx_ruleset_key(a, 2, FGX_DIR_C2S, IPPROTO_TCP));
    cr_assert_neq(k, fgx_ruleset_key(a, 2, FGX_DIR_C2S, IPPROTO_UDP), "mode is in the key");
    cr_assert_neq(k, fgx_ruleset_key(a, 2, FGX_DIR_S2C, IPPROTO_TCP), "set differs");
    cr_assert_neq(k, fgx_ruleset_key(a, 1, FGX_DIR_C2S, IPPROTO_TCP));

    memcpy(b, a, sizeof(a));
    b[0].nocase = true;
    cr_assert_neq(k, fgx_ruleset_key(b, 2, FGX_DIR_C2S, IPPROTO_TCP), "flags are in the key");
    memcpy(b, a, sizeof(a));
    b[1].filter_id = 3;
    cr_assert_neq(k, fgx_ruleset_key(b, 2, FGX_DIR_C2S, IPPROTO_TCP), "ids are in the key");
    memcpy(b, a, sizeof(a));
    b[0].regex = "ab";
    b[1].regex = "cdef";
    cr_assert_neq(k, fgx_ruleset_key(b, 2, FGX_DIR_C2S, IPPROTO_TCP), "lengths are in the key");
    /* A pattern of the other direction only does not change this direction's database. */
    memcpy(b, a, sizeof(a));
    b[1].dir = FGX_DIR_S2C;
    b[1].regex = "zzz";
    cr_assert_eq(fgx_ruleset_key(b, 2, FGX_DIR_C2S, IPPROTO_TCP),
                 fgx_ruleset_key(a, 1, FGX_DIR_C2S, IPPROTO_TCP));
}

Test(ruleset, hash64_is_fnv1a)
{
    /* Published FNV-1a 64 test vectors. */
    cr_assert_eq(fgx_hash64("", 0, FGX_HASH64_SEED), 0xcbf29ce484222325ULL);
    cr_assert_eq(fgx_hash64("a", 1, FGX_HASH64_SEED), 0xaf63dc4c8601ec8cULL);
    cr_assert_eq(fgx_hash64("foobar", 6, FGX_HASH64_SEED), 0x85944171f73967e8ULL);
    cr_assert_eq(fgx_hash64("bar", 3, fgx_hash64("foo", 3, FGX_HASH64_SEED)),
                 fgx_hash64("foobar", 6, FGX_HASH64_SEED));
}

Test(ruleset, truncated_or_foreign_blob_refused)
{
    struct fgx_pattern p[] = {{.filter_id = 1, .regex = "exploit[0-9]+", .dir = FGX_DIR_BOTH}};
    struct hs_database *db = (struct hs_database *)1;
    struct fgx_blob b;
    char err[64], *junk;
    size_t cut;

    cr_assert_eq(fgx_ruleset_compile(p, 1, FGX_DIR_C2S, IPPROTO_TCP, &b, err, sizeof(err)), 0);
    cr_assert_gt(b.len, 0);
    for (cut = 0; cut < b.len; cut++) {
        cr_assert_eq(fgx_hsdb_load(b.data, cut, &db), -EINVAL, "accepted %zu of %zu", cut, b.len);
        cr_assert_null(db);
    }
    cr_assert_eq(fgx_hsdb_load(NULL, 0, &db), -EINVAL);

    junk = malloc(b.len);
    cr_assert_not_null(junk);
    for (size_t i = 0; i < b.len; i++)
        junk[i] = (char)(i * 131 + 7);
    cr_assert_eq(fgx_hsdb_load(junk, b.len, &db), -EINVAL);
    cr_assert_null(db);
    free(junk);

    cr_assert_eq(fgx_hsdb_load(b.data, b.len, &db), 0);
    fgx_hsdb_free(db);
    fgx_hsdb_free(NULL);
    fgx_blob_release(&b);
    fgx_blob_release(NULL);
}
