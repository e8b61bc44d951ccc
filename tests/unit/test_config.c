/* Unit tests for controld/ctl_config.c against real LMDB environments: export then import into
 * a fresh store gives the same services and filters; a malformed or impossible Config changes
 * nothing; a ruleset file with one bad line changes nothing and names the line. */
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "control.pb-c.h"
#include "controld/ctl_config.h"
#include "controld/ctl_store.h"

static char dir_a[64], dir_b[64];
static struct ctl_store *sa, *sb;

static void rm_dir(const char *dir)
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
    snprintf(dir_a, sizeof(dir_a), "/tmp/fgx-test-config-XXXXXX");
    snprintf(dir_b, sizeof(dir_b), "/tmp/fgx-test-config-XXXXXX");
    cr_assert_not_null(mkdtemp(dir_a));
    cr_assert_not_null(mkdtemp(dir_b));
    cr_assert_eq(ctl_store_open(dir_a, 0, &sa), 0);
    cr_assert_eq(ctl_store_open(dir_b, 0, &sb), 0);
}

static void teardown(void)
{
    ctl_store_close(sa);
    ctl_store_close(sb);
    rm_dir(dir_a);
    rm_dir(dir_b);
}

TestSuite(config, .init = setup, .fini = teardown);

static uint32_t add_service(struct ctl_store *st, const char *name, uint8_t ipproto, uint16_t port,
                            const char *ip)
{
    struct ctl_service s = {.ipproto = ipproto, .port = port, .active = true};
    struct ctl_txn *t;

    snprintf(s.name, sizeof(s.name), "%s", name);
    cr_assert_eq(fgx_cidr_parse(ip, &s.addr), 0);
    cr_assert_eq(ctl_txn_begin(st, true, &t), 0);
    cr_assert_eq(ctl_store_service_put(t, &s), 0);
    cr_assert_eq(ctl_txn_commit(t), 0);
    return s.id;
}

static uint32_t add_filter(struct ctl_store *st, uint32_t svc, const char *re, enum fgx_dir dir,
                           bool nocase, bool active)
{
    struct ctl_filter f = {
        .service_id = svc, .regex = (char *)re, .dir = dir, .nocase = nocase, .active = active};
    struct ctl_txn *t;

    cr_assert_eq(ctl_txn_begin(st, true, &t), 0);
    cr_assert_eq(ctl_store_filter_put(t, &f), 0);
    cr_assert_eq(ctl_txn_commit(t), 0);
    return f.id;
}

/* Everything `service list` and `filter list` show, one line each, into a malloc'd string. */
static char *dump(struct ctl_store *st)
{
    struct ctl_service *svcs;
    struct ctl_filter *fs;
    struct ctl_txn *t;
    size_t ns, nf, len = 0;
    char *out = NULL;
    FILE *f = open_memstream(&out, &len);
    bool auth;

    cr_assert_not_null(f);
    cr_assert_eq(ctl_txn_begin(st, false, &t), 0);
    cr_assert_eq(ctl_store_service_list(t, &svcs, &ns), 0);
    cr_assert_eq(ctl_store_filter_list(t, 0, &fs, &nf), 0);
    cr_assert_eq(ctl_config_auth_enabled(t, &auth), 0);
    ctl_txn_abort(t);
    for (size_t i = 0; i < ns; i++) {
        char ip[64];
        fgx_cidr_format(&svcs[i].addr, ip, sizeof(ip));
        fprintf(f, "svc %u %s %u %u [%s] %d %d %d %d %llu\n", svcs[i].id, svcs[i].name,
                svcs[i].ipproto, svcs[i].port, ip, svcs[i].layer, svcs[i].active, svcs[i].fail_open,
                svcs[i].midstream, (unsigned long long)svcs[i].created);
    }
    for (size_t i = 0; i < nf; i++)
        fprintf(f, "flt %u %u /%s/ %d %d %d %llu\n", fs[i].id, fs[i].service_id, fs[i].regex,
                fs[i].dir, fs[i].nocase, fs[i].active, (unsigned long long)fs[i].created);
    fprintf(f, "auth %d\n", auth);
    fclose(f);
    free(svcs);
    ctl_filters_free(fs, nf);
    return out;
}

/* Export sa, through the wire format, as a freshly unpacked message (caller frees). */
static Fgx__Ctl__Config *export_packed(struct ctl_store *st)
{
    struct ctl_config_export e;
    struct ctl_txn *t;
    Fgx__Ctl__Config *cfg;
    uint8_t *buf;
    size_t len;

    cr_assert_eq(ctl_txn_begin(st, false, &t), 0);
    cr_assert_eq(ctl_config_export(t, &e), 0);
    ctl_txn_abort(t);
    len = fgx__ctl__config__get_packed_size(&e.cfg);
    buf = malloc(len ? len : 1);
    fgx__ctl__config__pack(&e.cfg, buf);
    ctl_config_export_release(&e);
    cfg = fgx__ctl__config__unpack(NULL, len, buf);
    free(buf);
    cr_assert_not_null(cfg);
    return cfg;
}

static int import(struct ctl_store *st, const Fgx__Ctl__Config *cfg, char *err, size_t errlen)
{
    struct ctl_txn *t;
    int rv;

    cr_assert_eq(ctl_txn_begin(st, true, &t), 0);
    rv = ctl_config_import(t, cfg, err, errlen);
    if (rv == 0)
        cr_assert_eq(ctl_txn_commit(t), 0);
    else
        ctl_txn_abort(t);
    return rv;
}

static void set_midstream(struct ctl_store *st, uint32_t id, uint8_t midstream)
{
    struct ctl_service s;
    struct ctl_txn *t;

    cr_assert_eq(ctl_txn_begin(st, true, &t), 0);
    cr_assert_eq(ctl_store_service_get(t, id, &s), 0);
    s.midstream = midstream;
    cr_assert_eq(ctl_store_service_put(t, &s), 0);
    cr_assert_eq(ctl_txn_commit(t), 0);
}

static void fill_a(void)
{
    uint32_t web = add_service(sa, "web", IPPROTO_TCP, 8080, "");
    uint32_t dns = add_service(sa, "dns", IPPROTO_UDP, 5353, "10.0.0.0/24");
    uint32_t gone = add_service(sa, "gone", IPPROTO_TCP, 9999, "");
    struct ctl_txn *t;

    set_midstream(sa, dns, FGX_MIDSTREAM_SCAN);
    add_filter(sa, web, "GET /flag", FGX_DIR_C2S, false, true);
    add_filter(sa, web, "FLAG\\{[a-z]+\\}", FGX_DIR_S2C, true, false);
    add_filter(sa, dns, "\\x00\\xff", FGX_DIR_BOTH, false, true);
    /* A gap in the ids, as a real history leaves. */
    cr_assert_eq(ctl_txn_begin(sa, true, &t), 0);
    cr_assert_eq(ctl_store_service_del(t, gone), 0);
    cr_assert_eq(ctl_config_auth_enabled_put(t, false), 0);
    cr_assert_eq(ctl_txn_commit(t), 0);
}

Test(config, export_import_round_trip)
{
    char err[512] = "", *da, *db;
    Fgx__Ctl__Config *cfg;

    fill_a();
    cfg = export_packed(sa);
    cr_assert_eq(cfg->n_services, 2);
    cr_assert_eq(cfg->n_filters, 3);
    cr_assert(cfg->has_auth_enabled && !cfg->auth_enabled);
    cr_assert(cfg->services[0]->has_midstream && cfg->services[1]->has_midstream);
    cr_assert_eq(cfg->services[0]->midstream, FGX__CTL__MIDSTREAM__MIDSTREAM_RESET);
    cr_assert_eq(cfg->services[1]->midstream, FGX__CTL__MIDSTREAM__MIDSTREAM_SCAN);
    /* Something already in the fresh store is replaced, not merged. */
    add_service(sb, "old", IPPROTO_TCP, 8080, "");
    cr_assert_eq(import(sb, cfg, err, sizeof(err)), 0, "%s", err);
    da = dump(sa);
    db = dump(sb);
    /* Everything but the auth switch: a backup taken with auth off leaves it on (issue 24). */
    cr_assert_not_null(strstr(da, "auth 0\n"));
    cr_assert_not_null(strstr(db, "auth 1\n"));
    strstr(db, "auth 1\n")[5] = '0';
    cr_assert_str_eq(da, db);
    free(da);
    free(db);
    fgx__ctl__config__free_unpacked(cfg, NULL);
}

Test(config, imported_ids_are_never_reused)
{
    char err[512] = "";
    Fgx__Ctl__Config *cfg;
    uint32_t id, fid;

    fill_a();
    cfg = export_packed(sa);
    cr_assert_eq(import(sb, cfg, err, sizeof(err)), 0, "%s", err);
    fgx__ctl__config__free_unpacked(cfg, NULL);
    id = add_service(sb, "new", IPPROTO_TCP, 1234, "");
    cr_assert_gt(id, 2, "new service got id %u, an imported one", id);
    fid = add_filter(sb, id, "x", FGX_DIR_BOTH, false, true);
    cr_assert_gt(fid, 3, "new filter got id %u", fid);
}

/* Each case breaks one thing in an otherwise good export; the target store must not change. */
static void expect_refused(void (*breakit)(Fgx__Ctl__Config *), const char *needle)
{
    char err[512] = "", *before, *after;
    Fgx__Ctl__Config *cfg;

    fill_a();
    add_service(sb, "keep", IPPROTO_TCP, 7000, "");
    before = dump(sb);
    cfg = export_packed(sa);
    breakit(cfg);
    cr_assert_neq(import(sb, cfg, err, sizeof(err)), 0, "a broken config was accepted");
    cr_assert_not_null(strstr(err, needle), "error \"%s\" does not say \"%s\"", err, needle);
    after = dump(sb);
    cr_assert_str_eq(before, after);
    free(before);
    free(after);
    fgx__ctl__config__free_unpacked(cfg, NULL);
}

static void bad_regex(Fgx__Ctl__Config *c)
{
    free(c->filters[2]->regex);
    c->filters[2]->regex = strdup("(unclosed");
}
static void bad_port(Fgx__Ctl__Config *c)
{
    c->services[1]->port = 70000;
}
static void dup_name(Fgx__Ctl__Config *c)
{
    free(c->services[1]->name);
    c->services[1]->name = strdup(c->services[0]->name);
}
static void dup_port(Fgx__Ctl__Config *c)
{
    c->services[1]->proto = c->services[0]->proto;
    c->services[1]->port = c->services[0]->port;
    /* The one-address form (a backup from before the address list): ip/port alone. */
    for (size_t i = 0; i < c->services[1]->n_addrs; i++)
        fgx__ctl__service_addr__free_unpacked(c->services[1]->addrs[i], NULL);
    c->services[1]->n_addrs = 0;
}
static void orphan_filter(Fgx__Ctl__Config *c)
{
    c->filters[0]->service_id = 999;
}
static void dup_filter_id(Fgx__Ctl__Config *c)
{
    c->filters[1]->id = c->filters[0]->id;
}
static void bad_name(Fgx__Ctl__Config *c)
{
    free(c->services[0]->name);
    c->services[0]->name = strdup("no spaces");
}
static void udp_proxy(Fgx__Ctl__Config *c)
{
    /* services[1] is dns, UDP. */
    c->services[1]->layer = FGX__CTL__LAYER__LAYER_PROXY;
}
static void bad_ip(Fgx__Ctl__Config *c)
{
    free(c->services[0]->ip);
    c->services[0]->ip = strdup("10.0.0.1/8");
}
Test(config, malformed_regex_changes_nothing)
{
    expect_refused(bad_regex, "filter 3");
}
Test(config, bad_port_changes_nothing)
{
    expect_refused(bad_port, "port 70000");
}
Test(config, duplicate_name_changes_nothing)
{
    expect_refused(dup_name, "two services are named");
}
Test(config, duplicate_port_changes_nothing)
{
    expect_refused(dup_port, "overlap");
}
Test(config, filter_of_missing_service_changes_nothing)
{
    expect_refused(orphan_filter, "no service with id 999");
}
Test(config, duplicate_filter_id_changes_nothing)
{
    expect_refused(dup_filter_id, "two filters have the id");
}
Test(config, bad_name_changes_nothing)
{
    expect_refused(bad_name, "invalid service name");
}
/* The proxy relays UDP (px_udp.c): a backup with a UDP service on it imports. */
Test(config, udp_on_the_proxy_layer_imports)
{
    char err[512] = "";
    Fgx__Ctl__Config *cfg;

    fill_a();
    cfg = export_packed(sa);
    udp_proxy(cfg);
    cr_assert_eq(import(sb, cfg, err, sizeof(err)), 0, "refused: %s", err);
    fgx__ctl__config__free_unpacked(cfg, NULL);
}
Test(config, bad_address_changes_nothing)
{
    expect_refused(bad_ip, "invalid address");
}

Test(config, garbage_is_not_a_config)
{
    static const uint8_t junk[] = {0xff, 0xff, 0xff, 0x01, 0x02};

    cr_assert_null(fgx__ctl__config__unpack(NULL, sizeof(junk), junk));
}

/* ---- ruleset files ---- */

static Fgx__Ctl__FilterSpec *spec(const char *re, Fgx__Ctl__Dir dir, uint32_t line)
{
    Fgx__Ctl__FilterSpec *s = calloc(1, sizeof(*s));

    fgx__ctl__filter_spec__init(s);
    s->regex = (char *)re;
    s->has_dir = 1;
    s->dir = dir;
    s->has_line = 1;
    s->line = line;
    return s;
}

static int filter_import(struct ctl_store *st, const char *service, Fgx__Ctl__FilterSpec **specs,
                         size_t n, bool replace, char *err, size_t errlen)
{
    Fgx__Ctl__FilterImport imp = FGX__CTL__FILTER_IMPORT__INIT;
    struct ctl_txn *t;
    uint32_t sid = 0;
    int rv;

    imp.service = (char *)service;
    imp.filters = specs;
    imp.n_filters = n;
    imp.has_replace = 1;
    imp.replace = replace;
    cr_assert_eq(ctl_txn_begin(st, true, &t), 0);
    rv = ctl_config_filter_import(t, &imp, &sid, err, errlen);
    if (rv == 0) {
        cr_assert_neq(sid, 0);
        cr_assert_eq(ctl_txn_commit(t), 0);
    } else {
        ctl_txn_abort(t);
    }
    return rv;
}

Test(config, ruleset_bad_line_changes_nothing_and_names_it)
{
    Fgx__Ctl__FilterSpec *specs[3];
    char err[512] = "", *before, *after;
    uint32_t web = add_service(sa, "web", IPPROTO_TCP, 8080, "");

    add_filter(sa, web, "keepme", FGX_DIR_BOTH, false, true);
    before = dump(sa);
    specs[0] = spec("GET /flag", FGX__CTL__DIR__DIR_C2S, 2);
    specs[1] = spec("ok[0-9]+", FGX__CTL__DIR__DIR_S2C, 4);
    specs[2] = spec("([bad", FGX__CTL__DIR__DIR_BOTH, 7);
    cr_assert_eq(filter_import(sa, "web", specs, 3, true, err, sizeof(err)), -EINVAL);
    cr_assert(strncmp(err, "line 7: ", 8) == 0, "error: %s", err);
    after = dump(sa);
    cr_assert_str_eq(before, after);
    free(after);

    /* The same file without the bad line goes in whole, replacing the old filter. */
    cr_assert_eq(filter_import(sa, "web", specs, 2, true, err, sizeof(err)), 0, "%s", err);
    after = dump(sa);
    cr_assert_null(strstr(after, "keepme"));
    cr_assert_not_null(strstr(after, "/GET /flag/ 1"));
    cr_assert_not_null(strstr(after, "/ok[0-9]+/ 2"));
    free(after);
    /* Without replace, the file adds to what is there; a line identical to a filter the
     * service has is refused with that filter's id, and nothing is added. */
    cr_assert_eq(filter_import(sa, "web", specs, 1, false, err, sizeof(err)), -EEXIST);
    cr_assert(strstr(err, "line 2: identical to filter") != NULL, "error: %s", err);
    specs[0]->dir = FGX__CTL__DIR__DIR_BOTH; /* another direction is another filter */
    cr_assert_eq(filter_import(sa, "web", specs, 1, false, err, sizeof(err)), 0, "%s", err);
    {
        struct ctl_txn *t;
        struct ctl_filter *fs;
        size_t n;

        cr_assert_eq(ctl_txn_begin(sa, false, &t), 0);
        cr_assert_eq(ctl_store_filter_list(t, web, &fs, &n), 0);
        ctl_txn_abort(t);
        cr_assert_eq(n, 3);
        ctl_filters_free(fs, n);
    }
    free(before);
    for (int i = 0; i < 3; i++)
        free(specs[i]);
}

Test(config, ruleset_unknown_service)
{
    Fgx__Ctl__FilterSpec *specs[1] = {spec("x", FGX__CTL__DIR__DIR_BOTH, 1)};
    char err[256] = "";

    cr_assert_eq(filter_import(sa, "nope", specs, 1, false, err, sizeof(err)), -ENOENT);
    cr_assert_not_null(strstr(err, "no such service: nope"));
    free(specs[0]);
}

/* A backup written before the setting existed has no midstream: it imports as the fail-closed
 * default. */
Test(config, import_without_midstream_is_reset)
{
    struct ctl_service s;
    struct ctl_txn *t;
    char err[512] = "";
    Fgx__Ctl__Config *cfg;

    fill_a();
    cfg = export_packed(sa);
    cr_assert_eq(cfg->services[1]->midstream, FGX__CTL__MIDSTREAM__MIDSTREAM_SCAN);
    cfg->services[1]->has_midstream = 0;
    cr_assert_eq(import(sb, cfg, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(ctl_txn_begin(sb, false, &t), 0);
    cr_assert_eq(ctl_store_service_get(t, cfg->services[1]->id, &s), 0);
    cr_assert_eq(s.midstream, FGX_MIDSTREAM_RESET);
    ctl_txn_abort(t);
    fgx__ctl__config__free_unpacked(cfg, NULL);
}

/* When a block filter needs --force by what it matches of the captured connections: 90% of at
 * least 10, or all of at least 3; fewer captures never. */
Test(config_force, reach_thresholds)
{
    cr_assert(!ctl_config_reach_too_wide(0, 0));
    cr_assert(!ctl_config_reach_too_wide(1, 1), "one connection proves nothing");
    cr_assert(!ctl_config_reach_too_wide(2, 2));
    cr_assert(ctl_config_reach_too_wide(3, 3), "all of 3");
    cr_assert(!ctl_config_reach_too_wide(2, 3));
    cr_assert(!ctl_config_reach_too_wide(8, 9), "89% of fewer than 10");
    cr_assert(ctl_config_reach_too_wide(9, 10), "90% of 10");
    cr_assert(!ctl_config_reach_too_wide(8, 10));
    cr_assert(ctl_config_reach_too_wide(116, 128));
    cr_assert(!ctl_config_reach_too_wide(115, 128), "89.8%%");
    cr_assert(!ctl_config_reach_too_wide(1, 128), "a filter matching few never needs force");
    cr_assert(ctl_config_reach_too_wide(4000000000u, 4000000000u), "no overflow");
    cr_assert(!ctl_config_reach_too_wide(3000000000u, 4000000000u));
}

/* The compile child's record of an any-stream regex (rv 1) reaches the warnings' flag. */
Test(config_force, lint_text_marks_any_stream)
{
    char msg[1024];

    cr_assert_eq(ctl_config_regex_lint_text("\\b", false, IPPROTO_TCP, msg, sizeof(msg)), 1);
    cr_assert(strncmp(msg, "it matches any connection", 25) == 0, "%s", msg);
    cr_assert_eq(ctl_config_regex_lint_text("evil[0-9]+", false, IPPROTO_TCP, msg, sizeof(msg)),
                 0);
    cr_assert_str_eq(msg, "");
    cr_assert_lt(ctl_config_regex_lint_text("a(", false, IPPROTO_TCP, msg, sizeof(msg)), 0);
}
