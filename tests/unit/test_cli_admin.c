/* Unit tests for fgexctl's issue-5 stages: JSON read through jansson (cli_json.c), the
 * configuration file (cli_config.c), ruleset files (cli_ruleset.c), certificate pinning in
 * known_hosts (cli_pin.c), session token files (cli_session.c), the fingerprint (cli_tls.c) and
 * the new commands' parse (cli_args.c). Files go to a fresh temporary directory per test. */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "control.pb-c.h"
#include "fgexctl/cli_args.h"
#include "fgexctl/cli_config.h"
#include "fgexctl/cli_fmt.h"
#include "fgexctl/cli_json.h"
#include "fgexctl/cli_pin.h"
#include "fgexctl/cli_ruleset.h"
#include "fgexctl/cli_session.h"
#include "fgexctl/cli_tls.h"

#define FP_A                                                                                       \
    "E1:BB:F9:42:75:A3:8D:81:28:72:E0:8E:9B:CB:73:1B:60:94:86:E5:8F:A3:B9:B4:83:76:6C:11:80:3C:"   \
    "B9:48"
#define FP_B                                                                                       \
    "6E:C4:1C:3F:63:20:7D:0B:30:B8:8E:89:B4:A7:2B:C0:9E:00:D0:7F:94:36:B8:E1:8D:67:FC:CD:1A:3A:"   \
    "2D:1E"

static char tmpdir[64];

static void tmp_setup(void)
{
    (void)snprintf(tmpdir, sizeof(tmpdir), "/tmp/fgx-cli-admin-XXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir));
}

static void tmp_teardown(void)
{
    char cmd[128];

    (void)snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
    cr_assert_eq(system(cmd), 0);
}

static char *tmp_path(const char *name)
{
    static char buf[256];

    (void)snprintf(buf, sizeof(buf), "%s/%s", tmpdir, name);
    return buf;
}

static char *slurp(const char *path)
{
    char *text = NULL;
    size_t len;

    cr_assert_eq(cli_pin_read_file(path, 1 << 20, &text, &len), 0, "cannot read %s", path);
    return text;
}

/* ---- JSON through jansson: errors and values by position -------------------------------- */

static json_t *parse_ok(const char *text)
{
    json_t *v = NULL;
    char err[256];
    int rc = cli_json_load(text, strlen(text), &v, err, sizeof(err));

    cr_assert_eq(rc, 0, "'%s' failed: %s", text, err);
    return v;
}

/* The error names the line and column (bytes) of the byte where the text stopped making sense. */
static void parse_bad(const char *text, unsigned line, unsigned col)
{
    json_t *v = NULL;
    char err[256], want[64];
    int rc = cli_json_load(text, strlen(text), &v, err, sizeof(err));

    cr_assert_eq(rc, -EINVAL, "'%s' should not parse", text);
    cr_assert_null(v);
    (void)snprintf(want, sizeof(want), "line %u, column %u: ", line, col);
    cr_assert(strncmp(err, want, strlen(want)) == 0, "'%s': '%s' does not start '%s'", text, err,
              want);
    cr_assert_gt(strlen(err), strlen(want), "'%s': no reason after the position", text);
}

Test(cli_json, load_keeps_nul_and_order)
{
    json_t *v = parse_ok(" {\"b\": [1, -2.5e3, true, false, null],\n"
                         "  \"s\": \"x\\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\\ud83d\\ude00\","
                         "  \"a\": {}, \"n\": \"\\u0000x\" } \n");
    const char *keys[] = {"b", "s", "a", "n"}, *key;
    json_t *m;
    size_t i = 0;

    json_object_foreach (v, key, m)
        cr_assert_str_eq(key, keys[i++], "members keep the order of the text");
    cr_assert_str_eq(json_string_value(json_object_get(v, "s")),
                     "x\"\\/\b\f\n\r\t\xc3\xa9\xf0\x9f\x98\x80");
    cr_assert_eq(json_string_length(json_object_get(v, "n")), 2, "a NUL is kept with its length");
    json_decref(v);
}

Test(cli_json, load_errors_name_their_position)
{
    parse_bad("", 1, 1);
    parse_bad("[1, 2,]", 1, 7);
    parse_bad("{\"a\": 1,\n }", 2, 2);
    parse_bad("{\"a\" 1}", 1, 6);
    parse_bad("{a: 1}", 1, 2);
    parse_bad("\n\n  [1 2]", 3, 6);
    parse_bad("\"a\tb\"", 1, 3);
    parse_bad("\"\xff\"", 1, 2);
    parse_bad("{\"a\": 1, \"a\": 2}", 1, 12); /* the end of the repeated key */
    parse_bad("[", 1, 2);
    parse_bad("\n  \"abc", 2, 7); /* the end, where the string should have closed */
    parse_bad("[\"a\nb\"]", 1, 4);
    parse_bad("{} {}", 1, 4);
    parse_bad("[\n\"\xc3\xa9\xc3\xa9\", x]", 2, 9);
}

Test(cli_json, positions_of_values)
{
    static const char text[] = "{\"a\": [1, \"\\u00e9\\\"]\", {\"k\": true}],\n"
                               "  \"\xc3\xa9\\\"\": null,\n"
                               "  \"z\": -3.5e1}";
    json_t *v = parse_ok(text), *arr = json_object_get(v, "a"), *m;
    struct cli_json_pos ix;
    unsigned line, col;
    size_t off;

    cr_assert_eq(cli_json_pos_init(&ix, text, strlen(text), v), 0);
    cr_assert_eq(cli_json_pos_of(&ix, v, &off, &line, &col), 0);
    cr_assert(off == 0 && line == 1 && col == 1);
    cr_assert_eq(cli_json_pos_of(&ix, json_array_get(arr, 1), &off, &line, &col), 0);
    cr_assert(line == 1 && col == 11, "line %u col %u", line, col);
    cr_assert_eq(text[off], '"');
    /* true is one shared value: found by its place. */
    cr_assert_eq(cli_json_pos_in(&ix, json_array_get(arr, 2), "k", 0, &line, &col), 0);
    cr_assert(line == 1 && col == 30, "line %u col %u", line, col);
    cr_assert_eq(cli_json_pos_in(&ix, arr, NULL, 2, &line, &col), 0);
    cr_assert(line == 1 && col == 24, "line %u col %u", line, col);
    cr_assert_eq(cli_json_pos_in(&ix, NULL, NULL, 0, &line, &col), 0);
    cr_assert(line == 1 && col == 1, "the root");
    cr_assert_eq(cli_json_pos_in(&ix, v, "nope", 0, &line, &col), -ENOENT);
    cr_assert_eq(cli_json_pos_of(&ix, json_object_get(v, "\xc3\xa9\""), NULL, &line, &col), 0);
    cr_assert(line == 2 && col == 11, "line %u col %u (columns count bytes)", line, col);
    cr_assert_eq(cli_json_pos_of(&ix, json_object_get(v, "z"), NULL, &line, &col), 0);
    cr_assert(line == 3 && col == 8, "line %u col %u", line, col);
    m = json_integer(5);
    cr_assert_eq(cli_json_pos_of(&ix, m, NULL, &line, &col), -ENOENT);
    json_decref(m);
    cli_json_pos_release(&ix);
    json_decref(v);
}

/* ---- configuration file ------------------------------------------------------------------ */

static Fgx__Ctl__Service svc(uint32_t id, const char *name, Fgx__Ctl__Proto p, const char *ip,
                             uint32_t port, bool active, bool fail_open)
{
    Fgx__Ctl__Service s = FGX__CTL__SERVICE__INIT;

    s.id = id;
    s.name = (char *)name;
    s.proto = p;
    s.ip = (char *)ip;
    s.port = port;
    s.layer = FGX__CTL__LAYER__LAYER_NFQUEUE;
    s.active = active;
    s.fail_open = fail_open;
    s.has_blocked = 1;
    s.blocked = 77; /* a counter: not configuration, not exported */
    return s;
}

static Fgx__Ctl__Filter flt(uint32_t id, uint32_t sid, const char *re, Fgx__Ctl__Dir d, bool nc,
                            bool active)
{
    Fgx__Ctl__Filter f = FGX__CTL__FILTER__INIT;

    f.id = id;
    f.service_id = sid;
    f.regex = (char *)re;
    f.dir = d;
    f.nocase = nc;
    f.active = active;
    return f;
}

static char *config_text(const Fgx__Ctl__Config *cfg)
{
    char *doc = NULL, err[256];
    size_t len = 0;
    FILE *f = open_memstream(&doc, &len);

    cr_assert_not_null(f);
    cr_assert_eq(cli_config_write(f, cfg, err, sizeof(err)), 0, "%s", err);
    (void)fclose(f);
    return doc;
}

Test(cli_config, export_import_round_trip)
{
    Fgx__Ctl__Service s1 = svc(3, "web", FGX__CTL__PROTO__PROTO_TCP, "", 80, true, false);
    Fgx__Ctl__Service s2 =
        svc(9, "dns", FGX__CTL__PROTO__PROTO_UDP, "10.0.0.0/24", 53, false, true);
    Fgx__Ctl__Filter f1 = flt(1, 3, "evil[0-9]+", FGX__CTL__DIR__DIR_C2S, false, true);
    Fgx__Ctl__Filter f2 = flt(5, 9, "a\"b\\c/\xc3\xa9\t", FGX__CTL__DIR__DIR_S2C, true, false);
    Fgx__Ctl__Filter f3 = flt(7, 3, "flag\\{", FGX__CTL__DIR__DIR_BOTH, false, true);
    Fgx__Ctl__Service *svcs[] = {&s1, &s2};
    Fgx__Ctl__Filter *flts[] = {&f1, &f2, &f3};
    Fgx__Ctl__Config cfg = FGX__CTL__CONFIG__INIT, *back = NULL;
    char *doc, err[256];

    s2.layer = FGX__CTL__LAYER__LAYER_PROXY;
    s2.has_midstream = 1;
    s2.midstream = FGX__CTL__MIDSTREAM__MIDSTREAM_SCAN;
    cfg.n_services = 2;
    cfg.services = svcs;
    cfg.n_filters = 3;
    cfg.filters = flts;
    cfg.has_auth_enabled = 1;
    cfg.auth_enabled = 1;
    doc = config_text(&cfg);
    cr_assert_null(strstr(doc, "blocked"), "counters are not configuration");
    cr_assert(strstr(doc, "\"format\": \"fgex-config\""), "%s", doc);
    cr_assert_eq(cli_config_read(doc, strlen(doc), &back, err, sizeof(err)), 0, "%s\n%s", err, doc);
    cr_assert_eq(back->n_services, 2);
    cr_assert_eq(back->n_filters, 3);
    cr_assert(back->has_auth_enabled && back->auth_enabled);
    for (size_t i = 0; i < 2; i++) {
        cr_assert_eq(back->services[i]->id, svcs[i]->id);
        cr_assert_str_eq(back->services[i]->name, svcs[i]->name);
        cr_assert_eq(back->services[i]->proto, svcs[i]->proto);
        cr_assert_str_eq(back->services[i]->ip, svcs[i]->ip);
        cr_assert_eq(back->services[i]->port, svcs[i]->port);
        cr_assert_eq(back->services[i]->layer, svcs[i]->layer);
        cr_assert_eq(back->services[i]->active, svcs[i]->active);
        cr_assert_eq(back->services[i]->fail_open, svcs[i]->fail_open);
        cr_assert(back->services[i]->has_midstream);
        cr_assert_eq(back->services[i]->midstream, svcs[i]->has_midstream
                                                       ? svcs[i]->midstream
                                                       : FGX__CTL__MIDSTREAM__MIDSTREAM_RESET);
    }
    cr_assert(strstr(doc, "\"midstream\": \"scan\""), "%s", doc);
    /* Filters come back grouped by service, in the services' order. */
    {
        const Fgx__Ctl__Filter *want[] = {&f1, &f3, &f2};

        for (size_t i = 0; i < 3; i++) {
            cr_assert_eq(back->filters[i]->id, want[i]->id);
            cr_assert_eq(back->filters[i]->service_id, want[i]->service_id);
            cr_assert_str_eq(back->filters[i]->regex, want[i]->regex);
            cr_assert_eq(back->filters[i]->dir, want[i]->dir);
            cr_assert_eq(back->filters[i]->nocase, want[i]->nocase);
            cr_assert_eq(back->filters[i]->active, want[i]->active);
        }
    }
    /* Written again, the document is the same: nothing is lost or reordered twice. */
    {
        char *doc2 = config_text(back);

        cr_assert_str_eq(doc2, doc);
        free(doc2);
    }
    fgx__ctl__config__free_unpacked(back, NULL);
    free(doc);
}

Test(cli_config, defaults_and_fresh_ids)
{
    const char *doc = "{\"services\": [\n"
                      " {\"name\": \"a\", \"proto\": \"tcp\", \"port\": 1,\n"
                      "  \"filters\": [{\"regex\": \"x\"}, {\"regex\": \"y\", \"id\": 4}]},\n"
                      " {\"id\": 2, \"name\": \"b\", \"proto\": \"udp\", \"port\": 2}]}";
    Fgx__Ctl__Config *cfg = NULL;
    char err[256];

    cr_assert_eq(cli_config_read(doc, strlen(doc), &cfg, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(cfg->services[0]->id, 3, "a fresh id above every given one");
    cr_assert_eq(cfg->services[1]->id, 2);
    cr_assert_str_eq(cfg->services[0]->ip, "");
    cr_assert_eq(cfg->services[0]->layer, FGX__CTL__LAYER__LAYER_NFQUEUE);
    cr_assert(cfg->services[0]->active && !cfg->services[0]->fail_open);
    cr_assert_eq(cfg->services[0]->midstream, FGX__CTL__MIDSTREAM__MIDSTREAM_RESET,
                 "an old backup without the field gets the fail-closed default");
    cr_assert_eq(cfg->filters[0]->id, 5);
    cr_assert_eq(cfg->filters[1]->id, 4);
    cr_assert_eq(cfg->filters[0]->service_id, 3, "a filter belongs to its enclosing service");
    cr_assert_eq(cfg->filters[0]->dir, FGX__CTL__DIR__DIR_BOTH);
    cr_assert(cfg->filters[0]->active && !cfg->filters[0]->nocase);
    cr_assert(!cfg->has_auth_enabled, "an absent setting is left unchanged");
    fgx__ctl__config__free_unpacked(cfg, NULL);
}

static void config_bad(const char *doc, const char *want_prefix, const char *msg_part)
{
    Fgx__Ctl__Config *cfg = NULL;
    char err[256];
    int rc = cli_config_read(doc, strlen(doc), &cfg, err, sizeof(err));

    cr_assert_eq(rc, -EINVAL, "should be refused: %s", doc);
    cr_assert_null(cfg);
    cr_assert(strncmp(err, want_prefix, strlen(want_prefix)) == 0, "'%s' does not start '%s'", err,
              want_prefix);
    cr_assert(strstr(err, msg_part), "'%s' lacks '%s'", err, msg_part);
}

Test(cli_config, malformed_or_impossible_is_refused_with_position)
{
    config_bad("{\"services\": [}", "line 1, column 15:", "unexpected token");
    config_bad("[]", "line 1, column 1:", "must be an object, not an array");
    config_bad("{}", "line 1, column 1:", "\"services\" is missing");
    config_bad("{\"services\": [], \"extra\": 1}", "line 1, column 27:", "unknown key \"extra\"");
    config_bad("{\"format\": \"other\", \"services\": []}", "line 1, column 12:", "format");
    config_bad("{\"version\": 3, \"services\": []}", "line 1, column 13:",
               "\"version\" must be 1 to 2");
    config_bad("{\"services\": [\n {\"name\": \"a\", \"proto\": \"tcp\", \"port\": 70000}]}",
               "line 2, column 40:", "services[0].port must be an integer from 1 to 65535");
    config_bad("{\"services\": [{\"name\": \"a\", \"proto\": \"sctp\", \"port\": 1}]}",
               "line 1, column 38:", "is not one of tcp, udp");
    config_bad("{\"services\": [{\"name\": \"a\", \"port\": 1}]}",
               "line 1, column 15:", "\"proto\" is missing");
    config_bad("{\"services\": [{\"name\": \"12\", \"proto\": \"tcp\", \"port\": 1}]}",
               "line 1, column 24:", "is a number");
    config_bad("{\"services\": [{\"name\": \"a\", \"proto\": \"tcp\", \"port\": 1, \"ip\": "
               "\"10.0.0.300\"}]}",
               "line 1, column 62:", "not an IPv4 or IPv6");
    config_bad("{\"services\": [{\"name\": \"a\", \"proto\": \"tcp\", \"port\": 1, \"prot\": 1}]}",
               "line 1, column 64:", "unknown key \"prot\"");
    config_bad("{\"services\": [{\"name\": \"a\", \"proto\": \"tcp\", \"port\": 1},\n"
               "{\"name\": \"a\", \"proto\": \"udp\", \"port\": 2}]}",
               "line 2, column 10:", "also the name of services[0]");
    config_bad("{\"services\": [{\"name\": \"a\", \"proto\": \"tcp\", \"port\": 1, \"filters\": "
               "[{\"regex\": \"\"}]}]}",
               "line 1, column 78:", "regex is empty");
    config_bad("{\"services\": [{\"name\": \"a\", \"proto\": \"tcp\", \"port\": 1, \"filters\": "
               "[{\"regex\": \"x\", \"dir\": \"up\"}]}]}",
               "line 1, column 90:", "is not one of both, c2s, s2c");
    config_bad("{\"services\": [{\"name\": \"a\", \"proto\": \"tcp\", \"port\": 1, \"active\": "
               "\"yes\"}]}",
               "line 1, column 66:", "must be a boolean, not a string");
    config_bad("{\"services\": [{\"name\": \"a\", \"proto\": \"tcp\", \"port\": 1, \"filters\": "
               "[{\"regex\": \"x\", \"id\": 3}, {\"regex\": \"y\", \"id\": 3}]}]}",
               "line 1, column 114:", "id 3 is used twice");
}

/* ---- regexes are bytes: every JSON path carries them exactly ------------------------------ */

/* A deterministic generator, so a failure names a seed that reproduces it. */
static uint64_t rnd_state;

static unsigned rnd(void)
{
    rnd_state = rnd_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (unsigned)(rnd_state >> 33);
}

/* Random bytes 1..255 (a regex holds no NUL): mostly arbitrary, sometimes valid UTF-8 pieces
 * and JSON specials, so both "regex" and "regex_b64" and every escape are exercised. */
static size_t rnd_regex(unsigned char *b, size_t max)
{
    static const char *const pieces[] = {"\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80", "\"",
                                         "\\",       "/",            "\n",              "\x7f",
                                         "\xc2\x80", "evil[0-9]+",   "\\xff",           "\t"};
    size_t n = 1 + rnd() % max, i = 0;
    bool ascii_only = rnd() % 3 == 0;

    while (i < n) {
        if (rnd() % 4 == 0) {
            const char *p = pieces[rnd() % (sizeof(pieces) / sizeof(pieces[0]))];
            size_t pl = strlen(p);

            if (i + pl > n)
                break;
            memcpy(b + i, p, pl);
            i += pl;
        } else {
            b[i++] = (unsigned char)(ascii_only ? 0x20 + rnd() % 0x5f : 1 + rnd() % 255);
        }
    }
    if (i == 0)
        b[i++] = 'x';
    b[i] = '\0';
    return i;
}

/* The regex bytes a parsed filter object holds: "regex" or "regex_b64", exactly one. */
static size_t jv_regex(const json_t *o, unsigned char *out)
{
    const json_t *s = json_object_get(o, "regex"), *b = json_object_get(o, "regex_b64");
    size_t n = 0;

    cr_assert((s != NULL) != (b != NULL), "exactly one of regex, regex_b64");
    if (s) {
        memcpy(out, json_string_value(s), json_string_length(s));
        return json_string_length(s);
    }
    cr_assert_eq(cli_b64_decode(json_string_value(b), json_string_length(b), out, &n), 0,
                 "bad base64 %s", json_string_value(b));
    return n;
}

Test(cli_config, random_regex_bytes_round_trip_exactly)
{
    Fgx__Ctl__Service s1 = svc(1, "web", FGX__CTL__PROTO__PROTO_TCP, "", 80, true, false);
    Fgx__Ctl__Service *svcs[] = {&s1};
    unsigned char re[3][200], got[256];

    for (unsigned seed = 1; seed <= 3000; seed++) {
        Fgx__Ctl__Filter f[3], *flts[3] = {&f[0], &f[1], &f[2]};
        Fgx__Ctl__Config cfg = FGX__CTL__CONFIG__INIT, *back = NULL;
        char *doc, *doc2, err[256];
        size_t len[3];

        rnd_state = seed;
        for (int k = 0; k < 3; k++) {
            len[k] = rnd_regex(re[k], 190);
            f[k] = flt((uint32_t)k + 1, 1, (const char *)re[k], FGX__CTL__DIR__DIR_BOTH, false,
                       true);
        }
        cfg.n_services = 1;
        cfg.services = svcs;
        cfg.n_filters = 3;
        cfg.filters = flts;
        doc = config_text(&cfg);
        cr_assert_eq(cli_config_read(doc, strlen(doc), &back, err, sizeof(err)), 0,
                     "seed %u: %s\n%s", seed, err, doc);
        cr_assert_eq(back->n_filters, 3);
        for (int k = 0; k < 3; k++) {
            cr_assert_eq(strlen(back->filters[k]->regex), len[k], "seed %u filter %d", seed, k);
            cr_assert_eq(memcmp(back->filters[k]->regex, re[k], len[k]), 0, "seed %u filter %d",
                         seed, k);
        }
        /* The file itself is a fixed point too. */
        doc2 = config_text(back);
        cr_assert_str_eq(doc2, doc, "seed %u", seed);
        free(doc2);
        fgx__ctl__config__free_unpacked(back, NULL);
        free(doc);

        /* `filter list --json`: the same bytes through any JSON reader. */
        {
            Fgx__Ctl__Filter *one[1] = {&f[0]};
            Fgx__Ctl__Reply rep = FGX__CTL__REPLY__INIT;
            char *out = NULL;
            size_t olen = 0;
            FILE *m = open_memstream(&out, &olen);
            json_t *v;

            Fgx__Ctl__Request req = FGX__CTL__REQUEST__INIT;

            req.req_case = FGX__CTL__REQUEST__REQ_FILTER_LIST;
            rep.n_filters = 1;
            rep.filters = one;
            cr_assert_eq(cli_fmt_reply(m, &req, &rep, true), 0);
            (void)fclose(m);
            v = parse_ok(out);
            cr_assert(json_is_array(v));
            cr_assert_eq(jv_regex(json_array_get(v, 0), got), len[0], "seed %u: %s", seed, out);
            cr_assert_eq(memcmp(got, re[0], len[0]), 0, "seed %u: %s", seed, out);
            json_decref(v);
            free(out);
        }
    }
}

static Fgx__Ctl__Config *config_ok(const char *doc)
{
    Fgx__Ctl__Config *c = NULL;
    char err[256];

    cr_assert_eq(cli_config_read(doc, strlen(doc), &c, err, sizeof(err)), 0, "%s\n%s", err, doc);
    return c;
}

#define SVC_DOC(ver, filter)                                                                       \
    "{\"version\": " #ver ", \"services\": [{\"name\": \"a\", \"proto\": \"tcp\", "                  \
    "\"port\": 1, \"filters\": [" filter "]}]}"
#define SVC_WITH(filter) SVC_DOC(2, filter)

Test(cli_config, raw_bytes_go_base64_and_old_files_keep_their_bytes)
{
    static const char raw[] = "\xff\xfe\x80zq";
    Fgx__Ctl__Service s1 = svc(1, "web", FGX__CTL__PROTO__PROTO_TCP, "", 80, true, false);
    Fgx__Ctl__Filter f1 = flt(1, 1, raw, FGX__CTL__DIR__DIR_BOTH, false, true);
    Fgx__Ctl__Service *svcs[] = {&s1};
    Fgx__Ctl__Filter *flts[] = {&f1};
    Fgx__Ctl__Config cfg = FGX__CTL__CONFIG__INIT, *c;
    char *text;

    cfg.n_services = 1;
    cfg.services = svcs;
    cfg.n_filters = 1;
    cfg.filters = flts;
    text = config_text(&cfg);
    cr_assert(strstr(text, "\"regex_b64\": \"//6AenE=\""), "%s", text);
    cr_assert_null(strstr(text, "\"regex\":"), "%s", text);
    cr_assert(strstr(text, "\"version\": 2"), "%s", text);
    free(text);

    /* What the version-1 writer wrote for these bytes still reads back as them. */
    c = config_ok(SVC_DOC(1, "{\"regex\": \"\\u00ff\\u00fe\\u0080zq\"}"));
    cr_assert_str_eq(c->filters[0]->regex, raw);
    fgx__ctl__config__free_unpacked(c, NULL);
    /* In version 2 a \u escape means its character, as in any JSON. */
    c = config_ok(SVC_DOC(2, "{\"regex\": \"\\u00ff\\u00e9zq\"}"));
    cr_assert_str_eq(c->filters[0]->regex, "\xc3\xbf\xc3\xa9zq");
    fgx__ctl__config__free_unpacked(c, NULL);
    /* Valid UTF-8 written raw means itself in both versions. */
    for (int ver = 1; ver <= 2; ver++) {
        c = config_ok(ver == 1 ? SVC_DOC(1, "{\"regex\": \"caf\xc3\xa9\\t\\u0001\"}")
                               : SVC_DOC(2, "{\"regex\": \"caf\xc3\xa9\\t\\u0001\"}"));
        cr_assert_str_eq(c->filters[0]->regex, "caf\xc3\xa9\t\x01");
        fgx__ctl__config__free_unpacked(c, NULL);
    }
    /* regex_b64 is read in any version, also for bytes that are valid UTF-8. */
    c = config_ok(SVC_DOC(1, "{\"regex_b64\": \"ZXZpbA==\"}"));
    cr_assert_str_eq(c->filters[0]->regex, "evil");
    fgx__ctl__config__free_unpacked(c, NULL);
}

static void config_bad_v(const char *doc, const char *msg_part)
{
    Fgx__Ctl__Config *c = NULL;
    char err[256];

    cr_assert_eq(cli_config_read(doc, strlen(doc), &c, err, sizeof(err)), -EINVAL, "%s", doc);
    cr_assert_null(c);
    cr_assert(strstr(err, msg_part), "'%s': message '%s' lacks '%s'", doc, err, msg_part);
}

Test(cli_config, ambiguous_or_bad_regex_fields_are_refused)
{
    config_bad_v(SVC_WITH("{\"regex\": \"a\", \"regex_b64\": \"YQ==\"}"),
                 "has both \"regex\" and \"regex_b64\"");
    config_bad_v(SVC_WITH("{\"dir\": \"c2s\"}"), "\"regex\" is missing");
    config_bad_v(SVC_WITH("{\"regex_b64\": \"YQ\"}"), "regex_b64 is not base64");
    config_bad_v(SVC_WITH("{\"regex_b64\": \"YR==\"}"), "regex_b64 is not base64");
    config_bad_v(SVC_WITH("{\"regex_b64\": \"Y Q==\"}"), "regex_b64 is not base64");
    config_bad_v(SVC_WITH("{\"regex_b64\": \"YQ==YQ==\"}"), "regex_b64 is not base64");
    config_bad_v(SVC_WITH("{\"regex_b64\": \"YQBi\"}"), "holds a NUL byte");
    config_bad_v(SVC_WITH("{\"regex_b64\": \"\"}"), "regex_b64 is empty");
    config_bad_v(SVC_WITH("{\"regex_b64\": 3}"), "regex_b64 must be a string");
    config_bad_v(SVC_WITH("{\"regex\": \"a\\u0000b\"}"), "cannot contain \\u0000");
}

Test(cli_json, base64_vectors)
{
    /* RFC 4648 section 10. */
    static const char *const plain[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar"};
    static const char *const enc[] = {"", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=",
                                      "Zm9vYmFy"};
    char out[32];
    unsigned char dec[32];
    size_t n;

    for (size_t i = 0; i < 7; i++) {
        cr_assert_eq(cli_b64_encode(plain[i], strlen(plain[i]), out), strlen(enc[i]));
        cr_assert_str_eq(out, enc[i]);
        cr_assert_eq(cli_b64_decode(enc[i], strlen(enc[i]), dec, &n), 0, "%s", enc[i]);
        cr_assert_eq(n, strlen(plain[i]));
        cr_assert_eq(memcmp(dec, plain[i], n), 0);
    }
    cr_assert_eq(cli_b64_decode("Zh==", 4, dec, &n), -EINVAL, "unused bits set");
    cr_assert_eq(cli_b64_decode("Zg=a", 4, dec, &n), -EINVAL);
    cr_assert_eq(cli_b64_decode("=Zg=", 4, dec, &n), -EINVAL);
    cr_assert_eq(cli_b64_decode("Zm-v", 4, dec, &n), -EINVAL, "the URL alphabet is not base64");
    /* Every byte value, every length mod 3. */
    for (size_t len = 0; len < 20; len++) {
        unsigned char in[20];

        for (size_t i = 0; i < len; i++)
            in[i] = (unsigned char)(255 - 13 * i);
        cli_b64_encode(in, len, out);
        cr_assert_eq(cli_b64_decode(out, strlen(out), dec, &n), 0);
        cr_assert_eq(n, len);
        cr_assert_eq(memcmp(dec, in, len), 0);
    }
}

/* ---- ruleset files ----------------------------------------------------------------------- */

Test(cli_ruleset, good_file)
{
    const char *text = "# our regexes\n"
                       "\n"
                       "c2s /evil[0-9]+/\n"
                       "   s2c nocase /flag\\{[A-Z]{31}=\\}/   \n"
                       "both disabled nocase /a/b/c/\r\n"
                       "\t/ lead and trail /\n"
                       "nocase c2s/glued/";
    Fgx__Ctl__FilterImport fi = FGX__CTL__FILTER_IMPORT__INIT;
    char err[256];

    cr_assert_eq(cli_ruleset_parse(text, strlen(text), &fi, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(fi.n_filters, 5);
    cr_assert_str_eq(fi.filters[0]->regex, "evil[0-9]+");
    cr_assert(fi.filters[0]->has_dir && fi.filters[0]->dir == FGX__CTL__DIR__DIR_C2S);
    cr_assert(!fi.filters[0]->has_nocase && !fi.filters[0]->has_active);
    cr_assert_eq(fi.filters[0]->line, 3);
    cr_assert_str_eq(fi.filters[1]->regex, "flag\\{[A-Z]{31}=\\}");
    cr_assert(fi.filters[1]->nocase && fi.filters[1]->dir == FGX__CTL__DIR__DIR_S2C);
    cr_assert_eq(fi.filters[1]->line, 4);
    cr_assert_str_eq(fi.filters[2]->regex, "a/b/c", "the regex ends at the last '/'");
    cr_assert(fi.filters[2]->has_active && !fi.filters[2]->active);
    cr_assert(fi.filters[2]->nocase && fi.filters[2]->dir == FGX__CTL__DIR__DIR_BOTH);
    cr_assert_str_eq(fi.filters[3]->regex, " lead and trail ");
    cr_assert(!fi.filters[3]->has_dir, "no direction: controld's default (both)");
    cr_assert_str_eq(fi.filters[4]->regex, "glued");
    cr_assert_eq(fi.filters[4]->line, 7);
    cli_ruleset_release(&fi);
    cr_assert_eq(fi.n_filters, 0);
}

static void ruleset_bad(const char *text, size_t len, const char *want)
{
    Fgx__Ctl__FilterImport fi = FGX__CTL__FILTER_IMPORT__INIT;
    char err[256];

    cr_assert_eq(cli_ruleset_parse(text, len, &fi, err, sizeof(err)), -EINVAL, "accepted: %s",
                 text);
    cr_assert_eq(fi.n_filters, 0, "all or nothing");
    cr_assert_null(fi.filters);
    cr_assert(strstr(err, want), "'%s' lacks '%s'", err, want);
}

Test(cli_ruleset, each_bad_line_names_its_number)
{
    const char *good = "# ok\nc2s /a/\n\n";
    char buf[256];

#define BAD(line_text, want)                                                                       \
    do {                                                                                           \
        (void)snprintf(buf, sizeof(buf), "%s%s\nc2s /later/\n", good, line_text);                  \
        ruleset_bad(buf, strlen(buf), want);                                                       \
    } while (0)
    BAD("c2x /a/", "line 4: unknown word 'c2x'");
    BAD("c2s s2c /a/", "line 4: the direction is given twice");
    BAD("nocase nocase /a/", "line 4: 'nocase' is given twice");
    BAD("disabled disabled /a/", "line 4: 'disabled' is given twice");
    BAD("c2s evil", "line 4: unknown word 'evil'");
    BAD("c2s", "line 4: no /REGEX/");
    BAD("c2s /abc", "line 4: the regex has no closing '/'");
    BAD("c2s /abc/ x", "line 4: text after the closing '/'");
    BAD("s2c //", "line 4: the regex is empty");
#undef BAD
    /* A NUL byte: not a text file. */
    memcpy(buf, "c2s /a/\nc2s /a\0b/\n", 19);
    ruleset_bad(buf, 19, "line 2: a NUL byte");
}

Test(cli_ruleset, export_then_import_round_trip)
{
    Fgx__Ctl__Filter f1 = flt(1, 3, "evil[0-9]+", FGX__CTL__DIR__DIR_C2S, false, true);
    Fgx__Ctl__Filter f2 = flt(2, 3, " a/b ", FGX__CTL__DIR__DIR_BOTH, true, false);
    Fgx__Ctl__Filter f3 = flt(3, 3, "x\ny", FGX__CTL__DIR__DIR_S2C, false, true);
    Fgx__Ctl__Filter *fs[] = {&f1, &f2, &f3};
    Fgx__Ctl__FilterImport fi = FGX__CTL__FILTER_IMPORT__INIT;
    char *out = NULL, err[256];
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);

    cr_assert_eq(cli_ruleset_write(f, "web", fs, 2, err, sizeof(err)), 0);
    (void)fclose(f);
    cr_assert(strstr(out, "\nc2s /evil[0-9]+/\nboth nocase disabled / a/b /\n"), "%s", out);
    cr_assert_eq(cli_ruleset_parse(out, len, &fi, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(fi.n_filters, 2);
    cr_assert_str_eq(fi.filters[1]->regex, " a/b ");
    cr_assert(fi.filters[1]->nocase && !fi.filters[1]->active);
    cli_ruleset_release(&fi);
    free(out);

    /* A regex with a line break has no line of its own: refused, nothing written. */
    out = NULL;
    f = open_memstream(&out, &len);
    cr_assert_eq(cli_ruleset_write(f, "web", fs, 3, err, sizeof(err)), -EINVAL);
    (void)fclose(f);
    cr_assert_eq(len, 0);
    cr_assert(strstr(err, "filter 3"), "%s", err);
    free(out);
}

/* ---- certificate pinning ----------------------------------------------------------------- */

Test(cli_pin, url_and_fingerprint_forms)
{
    struct cli_pin_target t;
    char fp[CLI_FP_SIZE], key[128];

    cr_assert_eq(cli_pin_target("tls+tcp://10.0.0.1:4433", &t), 0);
    cr_assert_str_eq(t.host, "10.0.0.1");
    cr_assert_str_eq(t.port, "4433");
    cr_assert_str_eq(t.hostport, "10.0.0.1:4433");
    cr_assert_str_eq(t.key, "10.0.0.1_4433");
    cr_assert_eq(cli_pin_target("tls+tcp://[fd00::1]:99", &t), 0);
    cr_assert_str_eq(t.host, "fd00::1");
    cr_assert_str_eq(t.hostport, "[fd00::1]:99");
    cr_assert_str_eq(t.key, "fd00__1_99");
    cr_assert_eq(cli_pin_target("tls+tcp://host", &t), -EINVAL);
    cr_assert_eq(cli_pin_target("tls+tcp://host:", &t), -EINVAL);
    cr_assert_eq(cli_pin_target("tls+tcp://[::1:99", &t), -EINVAL);
    cr_assert_eq(cli_pin_target("ipc:///x", &t), -EINVAL);
    cr_assert(cli_pin_is_tls("tls+tcp4://a:1") && !cli_pin_is_tls("tcp://a:1"));
    cli_pin_url_key("ipc:///run/fgex/control.sock", key, sizeof(key));
    cr_assert_str_eq(key, "ipc____run_fgex_control.sock");

    cr_assert_eq(cli_pin_fp_normalize(FP_A, fp), 0);
    cr_assert_str_eq(fp, FP_A);
    cr_assert_eq(cli_pin_fp_normalize(
                     "sha256:e1bbf94275a38d812872e08e9bcb731b609486e58fa3b9b483766c11803cb948", fp),
                 0);
    cr_assert_str_eq(fp, FP_A);
    cr_assert_eq(cli_pin_fp_normalize("E1:BB", fp), -EINVAL);
    cr_assert_eq(cli_pin_fp_normalize(FP_A "00", fp), -EINVAL);
    cr_assert_eq(cli_pin_fp_normalize("zz", fp), -EINVAL);
}

Test(cli_pin, sha256_fingerprint_format)
{
    char fp[CLI_FP_SIZE];

    cli_tls_fingerprint((const unsigned char *)"abc", 3, fp);
    cr_assert_str_eq(fp, "BA:78:16:BF:8F:01:CF:EA:41:41:40:DE:5D:AE:22:23:B0:03:61:A3:96:17:7A:"
                         "9C:B4:10:FF:61:F2:00:15:AD");
}

Test(cli_pin, first_use_stores, .init = tmp_setup, .fini = tmp_teardown)
{
    char *kh = strdup(tmp_path("sub/known_hosts")), *text, fp[CLI_FP_SIZE], msg[1024];
    enum cli_pin_outcome o;
    struct stat st;
    unsigned line;

    cr_assert_eq(cli_pin_lookup(kh, "a:1", fp, &line), -ENOENT);
    cr_assert_eq(cli_pin_check(kh, "a:1", FP_A, NULL, &o, msg, sizeof(msg)), 0, "%s", msg);
    cr_assert_eq(o, CLI_PIN_NEW);
    cr_assert_eq(stat(kh, &st), 0);
    cr_assert_eq(st.st_mode & 0777, 0600);
    text = slurp(kh);
    cr_assert_str_eq(text, "a:1 " FP_A "\n");
    free(text);
    /* The same certificate again: known, the file unchanged. */
    cr_assert_eq(cli_pin_check(kh, "a:1", FP_A, NULL, &o, msg, sizeof(msg)), 0);
    cr_assert_eq(o, CLI_PIN_KNOWN);
    cr_assert_eq(cli_pin_check(kh, "b:2", FP_B, NULL, &o, msg, sizeof(msg)), 0);
    cr_assert_eq(o, CLI_PIN_NEW);
    text = slurp(kh);
    cr_assert_str_eq(text, "a:1 " FP_A "\nb:2 " FP_B "\n");
    free(text);
    cr_assert_eq(cli_pin_lookup(kh, "b:2", fp, &line), 0);
    cr_assert_str_eq(fp, FP_B);
    cr_assert_eq(line, 2);
    free(kh);
}

Test(cli_pin, mismatch_refused_naming_file_and_line, .init = tmp_setup, .fini = tmp_teardown)
{
    char *kh = strdup(tmp_path("known_hosts")), *text, msg[1024], want[128];
    enum cli_pin_outcome o;
    const char *orig = "# pins\nother:9 " FP_B "\n\nhost:4433 " FP_A "\n";

    cr_assert_eq(cli_pin_write_file(kh, orig, strlen(orig)), 0);
    cr_assert_eq(cli_pin_check(kh, "host:4433", FP_B, NULL, &o, msg, sizeof(msg)), -EKEYREJECTED);
    (void)snprintf(want, sizeof(want), "remove line 4 of %s", kh);
    cr_assert(strstr(msg, want), "'%s' lacks '%s'", msg, want);
    cr_assert(strstr(msg, "CHANGED") && strstr(msg, FP_A) && strstr(msg, FP_B), "%s", msg);
    text = slurp(kh);
    cr_assert_str_eq(text, orig, "a refused certificate changes nothing");
    free(text);
    free(kh);
}

Test(cli_pin, explicit_fingerprint, .init = tmp_setup, .fini = tmp_teardown)
{
    char *kh = strdup(tmp_path("known_hosts")), *text, msg[1024];
    enum cli_pin_outcome o;
    const char *orig = "host:1 " FP_A "\nkeep:2 " FP_A "\n";

    cr_assert_eq(cli_pin_write_file(kh, orig, strlen(orig)), 0);
    /* A --fingerprint the server does not present is refused, whatever is pinned. */
    cr_assert_eq(cli_pin_check(kh, "host:1", FP_A, FP_B, &o, msg, sizeof(msg)), -EKEYREJECTED);
    cr_assert(strstr(msg, "does not match --fingerprint"), "%s", msg);
    cr_assert_eq(cli_pin_check(kh, "host:1", FP_A, "nonsense", &o, msg, sizeof(msg)), -EINVAL);
    /* The right one replaces the old pin (the server got a new certificate). */
    cr_assert_eq(cli_pin_check(kh, "host:1", FP_B,
                               "6ec41c3f63207d0b30b88e89b4a72bc09e00d07f9436b8e18d67fccd1a3a2d1e",
                               &o, msg, sizeof(msg)),
                 0, "%s", msg);
    cr_assert_eq(o, CLI_PIN_EXPLICIT);
    text = slurp(kh);
    cr_assert_str_eq(text, "host:1 " FP_B "\nkeep:2 " FP_A "\n");
    free(text);
    cr_assert_eq(cli_pin_check(kh, "host:1", FP_B, NULL, &o, msg, sizeof(msg)), 0);
    cr_assert_eq(o, CLI_PIN_KNOWN);
    free(kh);
}

/* ---- session tokens ---------------------------------------------------------------------- */

Test(cli_session, token_file_is_private, .init = tmp_setup, .fini = tmp_teardown)
{
    char path[512], *tok = NULL;
    struct stat st;
    mode_t old = umask(0);

    cr_assert_eq(setenv("FGEX_CONFIG_DIR", tmpdir, 1), 0);
    cr_assert_eq(cli_session_path("tls+tcp://10.1.2.3:4433", path, sizeof(path)), 0);
    cr_assert_str_eq(path + strlen(tmpdir), "/sessions/10.1.2.3_4433");
    cr_assert_eq(cli_session_load(path, &tok), -ENOENT);
    /* Even with a permissive umask the token is readable by its owner only. */
    cr_assert_eq(cli_session_store(path, "t0k3n"), 0);
    umask(old);
    cr_assert_eq(stat(path, &st), 0);
    cr_assert_eq(st.st_mode & 0777, 0600, "mode %o", st.st_mode & 0777);
    cr_assert_eq(stat(tmp_path("sessions"), &st), 0);
    cr_assert_eq(st.st_mode & 0777, 0700, "directory mode %o", st.st_mode & 0777);
    cr_assert_eq(cli_session_load(path, &tok), 0);
    cr_assert_str_eq(tok, "t0k3n");
    free(tok);
    cr_assert_eq(cli_session_remove(path), 0);
    cr_assert_eq(cli_session_remove(path), 0, "removing twice is fine");
    cr_assert_eq(cli_session_load(path, &tok), -ENOENT);
    cr_assert_eq(unsetenv("FGEX_CONFIG_DIR"), 0);
}

/* Issue 24: a context and -c URL of one box share a session: keyed by the box (host, port,
 * pinned certificate), in the base directory whatever the context. */
Test(cli_session, one_box_one_session_key, .init = tmp_setup, .fini = tmp_teardown)
{
    char key[512], a[512], b[512], ctxdir[512];

    cli_session_key("tls+tcp://Box.Example:7443", NULL, key, sizeof(key));
    cr_assert_str_eq(key, "box.example_7443");
    cli_session_key("tls+tcp4://box.example:7443", FP_A, key, sizeof(key));
    cr_assert_str_eq(key, "box.example_7443@"
                          "e1bbf94275a38d812872e08e9bcb731b609486e58fa3b9b483766c11803cb948");
    cli_session_key("ipc:///run/fgex/control.sock", FP_A, key, sizeof(key));
    cr_assert_str_eq(key, "ipc____run_fgex_control.sock@"
                          "e1bbf94275a38d812872e08e9bcb731b609486e58fa3b9b483766c11803cb948");

    cr_assert_eq(setenv("FGEX_CONFIG_DIR", tmpdir, 1), 0);
    (void)snprintf(ctxdir, sizeof(ctxdir), "%s/contexts/box1", tmpdir);
    /* the base pin and the context's pin are the same certificate: one file */
    cr_assert_eq(cli_pin_store(tmp_path("known_hosts"), "10.1.2.3:4433", FP_A), 0);
    cr_assert_eq(cli_pin_store(tmp_path("contexts/box1/known_hosts"), "10.1.2.3:4433", FP_A), 0);
    cr_assert_eq(cli_session_path_in("tls+tcp://10.1.2.3:4433", tmpdir, a, sizeof(a)), 0);
    cr_assert_eq(cli_session_path_in("tls+tcp://10.1.2.3:4433", ctxdir, b, sizeof(b)), 0);
    cr_assert_str_eq(a, b);
    cr_assert_str_eq(a + strlen(tmpdir), "/sessions/10.1.2.3_4433@e1bbf94275a38d812872e08e9bcb7"
                                         "31b609486e58fa3b9b483766c11803cb948");
    /* another certificate at that address (another box, another game): another session */
    cr_assert_eq(cli_pin_store(tmp_path("contexts/box1/known_hosts"), "10.1.2.3:4433",
                               "BA:78:16:BF:8F:01:CF:EA:41:41:40:DE:5D:AE:22:23:B0:03:61:A3:96:17:"
                               "7A:9C:B4:10:FF:61:F2:00:15:AD"),
                 0);
    cr_assert_eq(cli_session_path_in("tls+tcp://10.1.2.3:4433", ctxdir, b, sizeof(b)), 0);
    cr_assert_str_neq(a, b);
    /* no pin (--ca): the address alone */
    cr_assert_eq(cli_session_path_in("tls+tcp://10.9.9.9:1", ctxdir, b, sizeof(b)), 0);
    cr_assert_str_eq(b + strlen(tmpdir), "/sessions/10.9.9.9_1");
    /* a login with --ca stored that one; a later command that pinned on first use finds it */
    cr_assert_eq(cli_session_store(b, "t0k3n"), 0);
    cr_assert_eq(cli_pin_store(tmp_path("known_hosts"), "10.9.9.9:1", FP_A), 0);
    cr_assert_eq(cli_session_path("tls+tcp://10.9.9.9:1", a, sizeof(a)), 0);
    cr_assert_str_neq(a, b);
    cr_assert_eq(cli_session_find("tls+tcp://10.9.9.9:1", a, sizeof(a)), 0);
    cr_assert_str_eq(a, b);
    /* once the pinned one exists, it is the one */
    cr_assert_eq(cli_session_path("tls+tcp://10.9.9.9:1", a, sizeof(a)), 0);
    cr_assert_eq(cli_session_store(a, "n3w"), 0);
    cr_assert_eq(cli_session_find("tls+tcp://10.9.9.9:1", b, sizeof(b)), 0);
    cr_assert_str_eq(a, b);
    cr_assert_eq(unsetenv("FGEX_CONFIG_DIR"), 0);
}

Test(cli_session, password_from_file, .init = tmp_setup, .fini = tmp_teardown)
{
    char *pw = NULL, err[256], *p = strdup(tmp_path("pw"));

    cr_assert_eq(cli_pin_write_file(p, "s3cret pass\r\nignored\n", 22), 0);
    cr_assert_eq(cli_password_read(p, false, &pw, err, sizeof(err)), 0, "%s", err);
    cr_assert_str_eq(pw, "s3cret pass");
    free(pw);
    cr_assert_eq(cli_pin_write_file(p, "\n", 1), 0);
    cr_assert_eq(cli_password_read(p, false, &pw, err, sizeof(err)), -EINVAL);
    cr_assert(strstr(err, "empty"), "%s", err);
    cr_assert_eq(cli_password_read(tmp_path("none"), false, &pw, err, sizeof(err)), -ENOENT);
    free(p);
}

/* ---- the new commands on the command line ------------------------------------------------ */

#define ARGV(...) ((char *[]){"fgexctl", __VA_ARGS__, NULL})

static int argc_of(char **v)
{
    int n = 0;

    while (v[n])
        n++;
    return n;
}

Test(cli_args_admin, new_commands_parse)
{
    struct cli_cmd cmd;
    char **v;

    v = ARGV("-c", "tls+tcp://h:1", "--fingerprint", FP_A, "login", "--password-file", "/p");
    cr_assert_eq(cli_args_parse(argc_of(v), v, NULL, &cmd), 0, "%s", cmd.err);
    cr_assert_eq(cmd.req.req_case, FGX__CTL__REQUEST__REQ_LOGIN);
    cr_assert_str_eq(cmd.password_file, "/p");
    cr_assert_str_eq(cmd.fingerprint, FP_A);
    cr_assert_str_eq(cmd.url, "tls+tcp://h:1");

    v = ARGV("passwd", "--expire-sessions", "--ca", "/ca.pem");
    cr_assert_eq(cli_args_parse(argc_of(v), v, NULL, &cmd), 0, "%s", cmd.err);
    cr_assert(cmd.m.passwd.has_expire_sessions && cmd.m.passwd.expire_sessions);
    cr_assert_null(cmd.password_file);
    cr_assert_str_eq(cmd.ca, "/ca.pem");

    v = ARGV("auth", "off");
    cr_assert_eq(cli_args_parse(argc_of(v), v, NULL, &cmd), 0);
    cr_assert_eq(cmd.req.req_case, FGX__CTL__REQUEST__REQ_AUTH_SET);
    cr_assert(!cmd.req.auth_set->enabled);
    v = ARGV("auth", "on");
    cr_assert_eq(cli_args_parse(argc_of(v), v, NULL, &cmd), 0);
    cr_assert(cmd.req.auth_set->enabled);
    v = ARGV("auth", "maybe");
    cr_assert_eq(cli_args_parse(argc_of(v), v, NULL, &cmd), -EINVAL);
    cr_assert_eq(cmd.exit_code, CLI_EXIT_INVALID);

    v = ARGV("filter", "import", "web", "rules.txt", "--replace");
    cr_assert_eq(cli_args_parse(argc_of(v), v, NULL, &cmd), 0, "%s", cmd.err);
    cr_assert_str_eq(cmd.req.filter_import->service, "web");
    cr_assert(cmd.req.filter_import->replace);
    cr_assert_str_eq(cmd.file, "rules.txt");
    v = ARGV("filter", "import", "web");
    cr_assert_eq(cli_args_parse(argc_of(v), v, NULL, &cmd), -EINVAL);
    cr_assert(strstr(cmd.err, "missing FILE"), "%s", cmd.err);

    v = ARGV("filter", "export", "web", "--json");
    cr_assert_eq(cli_args_parse(argc_of(v), v, NULL, &cmd), 0, "%s", cmd.err);
    cr_assert_eq(cmd.req.req_case, FGX__CTL__REQUEST__REQ_FILTER_EXPORT);
    cr_assert_str_eq(cmd.req.filter_export->ref, "web");
    cr_assert(cmd.json);

    v = ARGV("export", "-");
    cr_assert_eq(cli_args_parse(argc_of(v), v, NULL, &cmd), 0, "%s", cmd.err);
    cr_assert_eq(cmd.req.req_case, FGX__CTL__REQUEST__REQ_CONFIG_EXPORT);
    cr_assert_str_eq(cmd.file, "-");
    v = ARGV("import", "cfg.json");
    cr_assert_eq(cli_args_parse(argc_of(v), v, NULL, &cmd), 0, "%s", cmd.err);
    cr_assert_eq(cmd.req.req_case, FGX__CTL__REQUEST__REQ_CONFIG_IMPORT);
    cr_assert_str_eq(cmd.file, "cfg.json");

    v = ARGV("cert");
    cr_assert_eq(cli_args_parse(argc_of(v), v, NULL, &cmd), 0);
    cr_assert_eq(cmd.req.req_case, FGX__CTL__REQUEST__REQ_CERT);
    v = ARGV("logout");
    cr_assert_eq(cli_args_parse(argc_of(v), v, NULL, &cmd), 0);
    cr_assert_eq(cmd.req.req_case, FGX__CTL__REQUEST__REQ_LOGOUT);
}

Test(cli_args_admin, every_command_has_help)
{
    static const char *const cmds[][2] = {
        {"login", NULL},  {"logout", NULL},     {"passwd", NULL},
        {"auth", NULL},   {"cert", NULL},       {"export", NULL},
        {"import", NULL}, {"filter", "import"}, {"filter", "export"},
    };
    struct cli_cmd cmd;

    for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
        char *v[] = {"fgexctl", (char *)cmds[i][0], (char *)(cmds[i][1] ? cmds[i][1] : "--help"),
                     cmds[i][1] ? "--help" : NULL, NULL};

        cr_assert_eq(cli_args_parse(argc_of(v), v, NULL, &cmd), 0, "%s", cmds[i][0]);
        cr_assert_not_null(cmd.help, "%s has no help", cmds[i][0]);
        cr_assert(strstr(cmd.help, cmds[i][1] ? cmds[i][1] : cmds[i][0]), "%s", cmd.help);
    }
}

Test(cli_args_admin, auth_code_exits_7)
{
    cr_assert_eq(cli_fmt_exit_code(FGX__CTL__CODE__CODE_AUTH), 7);
    cr_assert_eq(CLI_EXIT_AUTH, 7);
    cr_assert_eq(CLI_EXIT_CERT, 8);
}
