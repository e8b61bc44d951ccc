/* Unit tests for controld/ctl_store.c against a real LMDB environment in a temporary directory:
 * records, uniqueness, cascade delete, id persistence, and a full map leaving the previous state
 * intact. */
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <lmdb.h>

#include "control.pb-c.h"
#include "controld/ctl_health.h"
#include "controld/ctl_rpc.h"
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
    snprintf(path, sizeof(path), "%s/reserve", dir);
    unlink(path);
    rmdir(dir);
}

static void setup(void)
{
    snprintf(dir, sizeof(dir), "/tmp/fgx-test-store-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    cr_assert_eq(ctl_store_open(dir, 0, &st), 0);
}

static void teardown(void)
{
    ctl_store_close(st);
    st = NULL;
    rm_dir();
}

static struct ctl_service svc_new(const char *name, uint8_t ipproto, uint16_t port)
{
    struct ctl_service s = {.ipproto = ipproto, .port = port, .active = true};

    snprintf(s.name, sizeof(s.name), "%s", name);
    return s;
}

static uint32_t add_service(const char *name, uint8_t ipproto, uint16_t port)
{
    struct ctl_service s = svc_new(name, ipproto, port);
    struct ctl_txn *t;

    cr_assert_eq(ctl_txn_begin(st, true, &t), 0);
    cr_assert_eq(ctl_store_service_put(t, &s), 0, "add %s", name);
    cr_assert_eq(ctl_txn_commit(t), 0);
    cr_assert_neq(s.id, 0);
    return s.id;
}

static uint32_t add_filter(uint32_t service_id, const char *regex)
{
    struct ctl_filter f = {.service_id = service_id, .dir = FGX_DIR_BOTH, .active = true};
    struct ctl_txn *t;

    f.regex = strdup(regex);
    cr_assert_eq(ctl_txn_begin(st, true, &t), 0);
    cr_assert_eq(ctl_store_filter_put(t, &f), 0);
    cr_assert_eq(ctl_txn_commit(t), 0);
    ctl_filter_release(&f);
    return f.id;
}

static size_t count_filters(uint32_t service_id)
{
    struct ctl_filter *fs;
    struct ctl_txn *t;
    size_t n;

    cr_assert_eq(ctl_txn_begin(st, false, &t), 0);
    cr_assert_eq(ctl_store_filter_list(t, service_id, &fs, &n), 0);
    ctl_txn_abort(t);
    ctl_filters_free(fs, n);
    return n;
}

TestSuite(store, .init = setup, .fini = teardown);

Test(store, add_get_list_rename_rm)
{
    struct ctl_service s, *all;
    struct ctl_txn *t;
    size_t n;
    uint32_t a = add_service("web", IPPROTO_TCP, 8080);
    uint32_t b = add_service("dns", IPPROTO_UDP, 53);

    cr_assert_eq(a, 1);
    cr_assert_eq(b, 2);
    cr_assert_eq(ctl_txn_begin(st, true, &t), 0);
    cr_assert_eq(ctl_store_service_get(t, b, &s), 0);
    cr_assert_str_eq(s.name, "dns");
    cr_assert_eq(s.ipproto, IPPROTO_UDP);
    cr_assert_eq(s.port, 53);
    cr_assert(s.active);
    cr_assert_neq(s.created, 0);
    cr_assert_eq(fgx_cidr_parse("10.0.0.0/24", &s.addr), 0);
    snprintf(s.name, sizeof(s.name), "resolver");
    cr_assert_eq(ctl_store_service_put(t, &s), 0);
    cr_assert_eq(ctl_txn_commit(t), 0);

    cr_assert_eq(ctl_txn_begin(st, false, &t), 0);
    cr_assert_eq(ctl_store_service_by_name(t, "dns", &s), -ENOENT);
    cr_assert_eq(ctl_store_service_by_name(t, "resolver", &s), 0);
    cr_assert_eq(s.id, b);
    cr_assert_eq(s.addr.family, 4);
    cr_assert_eq(s.addr.prefix, 24);
    cr_assert_eq(ctl_store_service_list(t, &all, &n), 0);
    cr_assert_eq(n, 2);
    cr_assert_str_eq(all[0].name, "web");
    cr_assert_str_eq(all[1].name, "resolver");
    free(all);
    ctl_txn_abort(t);

    cr_assert_eq(ctl_txn_begin(st, true, &t), 0);
    cr_assert_eq(ctl_store_service_del(t, a), 0);
    cr_assert_eq(ctl_store_service_del(t, a), -ENOENT);
    cr_assert_eq(ctl_txn_commit(t), 0);
    cr_assert_eq(ctl_txn_begin(st, false, &t), 0);
    cr_assert_eq(ctl_store_service_get(t, a, &s), -ENOENT);
    cr_assert_eq(ctl_store_service_list(t, &all, &n), 0);
    cr_assert_eq(n, 1);
    free(all);
    ctl_txn_abort(t);
}

Test(store, unique_names_and_ports)
{
    struct ctl_service s;
    struct ctl_txn *t;

    add_service("web", IPPROTO_TCP, 8080);
    cr_assert_eq(ctl_txn_begin(st, true, &t), 0);
    s = svc_new("web", IPPROTO_TCP, 9090);
    cr_assert_eq(ctl_store_service_put(t, &s), -EEXIST, "same name");
    s = svc_new("other", IPPROTO_TCP, 8080);
    cr_assert_eq(ctl_store_service_put(t, &s), -EEXIST, "same tcp port");
    s = svc_new("other", IPPROTO_UDP, 8080);
    cr_assert_eq(ctl_store_service_put(t, &s), 0, "same port, other protocol");
    ctl_txn_abort(t);
}

Test(store, cascade_delete_filters_and_counters)
{
    uint32_t a = add_service("web", IPPROTO_TCP, 8080);
    uint32_t b = add_service("dns", IPPROTO_UDP, 53);
    uint32_t f1 = add_filter(a, "flag\\{");
    struct ctl_filter f;
    struct ctl_txn *t;
    uint64_t v;

    add_filter(a, "cat /etc");
    add_filter(b, "AAAA");
    cr_assert_eq(count_filters(a), 2);
    cr_assert_eq(count_filters(0), 3);
    cr_assert_eq(ctl_txn_begin(st, true, &t), 0);
    cr_assert_eq(ctl_store_blocked_add(t, f1, 5), 0);
    cr_assert_eq(ctl_store_blocked_add(t, f1, 2), 0);
    cr_assert_eq(ctl_store_blocked_get(t, f1, &v), 0);
    cr_assert_eq(v, 7);
    cr_assert_eq(ctl_store_service_del(t, a), 0);
    cr_assert_eq(ctl_store_filter_get(t, f1, &f), -ENOENT);
    cr_assert_eq(ctl_store_blocked_get(t, f1, &v), 0);
    cr_assert_eq(v, 0, "the counter went with its filter");
    cr_assert_eq(ctl_txn_commit(t), 0);
    cr_assert_eq(count_filters(a), 0);
    cr_assert_eq(count_filters(b), 1);
}

Test(store, filter_needs_service)
{
    struct ctl_filter f = {.service_id = 42, .dir = FGX_DIR_BOTH, .active = true};
    struct ctl_txn *t;

    f.regex = strdup("x");
    cr_assert_eq(ctl_txn_begin(st, true, &t), 0);
    cr_assert_eq(ctl_store_filter_put(t, &f), -ENOENT);
    ctl_txn_abort(t);
    ctl_filter_release(&f);
}

Test(store, filter_fields_roundtrip)
{
    uint32_t a = add_service("web", IPPROTO_TCP, 8080);
    struct ctl_filter f = {.service_id = a, .dir = FGX_DIR_S2C, .nocase = true, .active = false};
    struct ctl_filter g;
    struct ctl_txn *t;

    f.regex = strdup("fl[a4]g");
    cr_assert_eq(ctl_txn_begin(st, true, &t), 0);
    cr_assert_eq(ctl_store_filter_put(t, &f), 0);
    cr_assert_eq(ctl_txn_commit(t), 0);
    cr_assert_eq(ctl_txn_begin(st, false, &t), 0);
    cr_assert_eq(ctl_store_filter_get(t, f.id, &g), 0);
    ctl_txn_abort(t);
    cr_assert_str_eq(g.regex, "fl[a4]g");
    cr_assert_eq(g.dir, FGX_DIR_S2C);
    cr_assert(g.nocase);
    cr_assert_not(g.active);
    cr_assert_eq(g.service_id, a);
    ctl_filter_release(&f);
    ctl_filter_release(&g);
}

Test(store, ids_persist_across_reopen)
{
    struct ctl_service s;
    struct ctl_txn *t;
    uint64_t gen;
    uint32_t a = add_service("a", IPPROTO_TCP, 1);
    uint32_t b = add_service("b", IPPROTO_TCP, 2);

    add_filter(b, "x");
    cr_assert_eq(ctl_txn_begin(st, true, &t), 0);
    cr_assert_eq(ctl_store_generation_next(t, &gen), 0);
    cr_assert_eq(gen, 1);
    cr_assert_eq(ctl_store_service_del(t, b), 0);
    cr_assert_eq(ctl_txn_commit(t), 0);
    ctl_store_close(st);
    st = NULL;

    cr_assert_eq(ctl_store_open(dir, 0, &st), 0);
    cr_assert_eq(ctl_txn_begin(st, false, &t), 0);
    cr_assert_eq(ctl_store_service_get(t, a, &s), 0);
    cr_assert_str_eq(s.name, "a");
    ctl_txn_abort(t);
    cr_assert_eq(add_service("c", IPPROTO_TCP, 3), 3, "a removed id is never reused");
    cr_assert_eq(add_filter(a, "y"), 2);
    cr_assert_eq(ctl_txn_begin(st, true, &t), 0);
    cr_assert_eq(ctl_store_generation_next(t, &gen), 0);
    cr_assert_eq(gen, 2, "generations keep growing across restarts");
    ctl_txn_abort(t);
}

Test(store, dbcache_get_put_keep)
{
    struct fgx_blob b1 = {.data = "0123456789", .len = 10}, b2 = {.data = "abc", .len = 3};
    struct fgx_blob out;
    struct ctl_txn *t;
    uint64_t keep = 0x1111;

    cr_assert_eq(ctl_txn_begin(st, true, &t), 0);
    cr_assert_eq(ctl_store_dbcache_get(t, 0x1111, &out), -ENOENT);
    cr_assert_eq(ctl_store_dbcache_put(t, 0x1111, &b1), 0);
    cr_assert_eq(ctl_store_dbcache_put(t, 0x2222, &b2), 0);
    cr_assert_eq(ctl_store_dbcache_keep(t, &keep, 1), 0);
    cr_assert_eq(ctl_txn_commit(t), 0);
    cr_assert_eq(ctl_txn_begin(st, false, &t), 0);
    cr_assert_eq(ctl_store_dbcache_get(t, 0x2222, &out), -ENOENT);
    cr_assert_eq(ctl_store_dbcache_get(t, 0x1111, &out), 0);
    ctl_txn_abort(t);
    cr_assert_eq(out.len, 10);
    cr_assert_eq(out.hash, 0x1111);
    cr_assert_eq(memcmp(out.data, "0123456789", 10), 0);
    fgx_blob_release(&out);
}

/* Fill a tiny map with cache entries, committed one by one, until not even a small one fits. */
static void fill_map(void)
{
    static char chunk[16384];
    size_t sizes[] = {sizeof(chunk), 1024, 64};
    uint64_t key = 1;

    memset(chunk, 'z', sizeof(chunk));
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        for (int tries = 0; tries < 100000; tries++) {
            struct fgx_blob b = {.data = chunk, .len = sizes[i]};
            struct ctl_txn *t;
            int rv;

            cr_assert_eq(ctl_txn_begin(st, true, &t), 0);
            rv = ctl_store_dbcache_put(t, key++, &b);
            if (rv < 0) {
                cr_assert_eq(rv, -EFBIG);
                ctl_txn_abort(t);
                break;
            }
            rv = ctl_txn_commit(t);
            if (rv < 0) {
                cr_assert_eq(rv, -EFBIG);
                break;
            }
        }
    }
}

static void reopen_tiny(void)
{
    ctl_store_close(st);
    st = NULL;
    rm_dir();
    cr_assert_not_null(mkdtemp(strcpy(dir, "/tmp/fgx-test-store-XXXXXX")));
    cr_assert_eq(ctl_store_open(dir, 256 * 1024, &st), 0);
}

Test(store, map_full_keeps_previous_state)
{
    struct ctl_filter f = {.dir = FGX_DIR_BOTH, .active = true};
    struct ctl_service s;
    struct ctl_txn *t;
    uint32_t a;
    int rv;

    reopen_tiny();
    a = add_service("web", IPPROTO_TCP, 8080);
    add_filter(a, "before");
    fill_map();

    /* A request's whole change fails together: no half-written service with its filter. */
    cr_assert_eq(ctl_txn_begin(st, true, &t), 0);
    s = svc_new("new", IPPROTO_TCP, 9090);
    f.regex = malloc(200000);
    memset(f.regex, 'q', 199999);
    f.regex[199999] = '\0';
    rv = ctl_store_service_put(t, &s);
    if (rv == 0) {
        f.service_id = s.id;
        rv = ctl_store_filter_put(t, &f);
    }
    if (rv == 0)
        rv = ctl_txn_commit(t);
    else
        ctl_txn_abort(t);
    cr_assert_eq(rv, -EFBIG);
    cr_assert_str_eq(ctl_store_strerror(rv), "state store full: the LMDB map size is reached");
    ctl_filter_release(&f);

    cr_assert_eq(ctl_txn_begin(st, false, &t), 0);
    cr_assert_eq(ctl_store_service_by_name(t, "new", &s), -ENOENT);
    cr_assert_eq(ctl_store_service_get(t, a, &s), 0);
    cr_assert_str_eq(s.name, "web");
    ctl_txn_abort(t);
    cr_assert_eq(count_filters(a), 1);
}

/* ---- through the control API, against the store (no worker, no nftables) ---- */

static int call(struct ctl_ctx *ctx, Fgx__Ctl__Request *q, Fgx__Ctl__Reply **out)
{
    size_t len = fgx__ctl__request__get_packed_size(q), rlen;
    uint8_t *buf = malloc(len ? len : 1);
    void *rbuf;

    fgx__ctl__request__pack(q, buf);
    cr_assert_eq(ctl_rpc_handle(ctx, buf, len, &rbuf, &rlen), 0);
    free(buf);
    *out = fgx__ctl__reply__unpack(NULL, rlen, rbuf);
    free(rbuf);
    cr_assert_not_null(*out);
    return (*out)->code;
}

Test(store, invalid_regex_request_stores_nothing)
{
    struct ctl_ctx ctx = {.store = st, .threads = 1};
    Fgx__Ctl__Request q = FGX__CTL__REQUEST__INIT;
    Fgx__Ctl__FilterAdd fa = FGX__CTL__FILTER_ADD__INIT;
    Fgx__Ctl__Reply *rep;
    uint32_t a = add_service("web", IPPROTO_TCP, 8080);

    (void)a;
    q.req_case = FGX__CTL__REQUEST__REQ_FILTER_ADD;
    q.filter_add = &fa;
    fa.service = "web";
    fa.regex = "flag(";
    cr_assert_eq(call(&ctx, &q, &rep), FGX__CTL__CODE__CODE_INVALID);
    cr_assert_not_null(strstr(rep->error, "flag("), "names the pattern: %s", rep->error);
    cr_assert_eq(rep->n_filters, 0);
    fgx__ctl__reply__free_unpacked(rep, NULL);
    cr_assert_eq(count_filters(0), 0);

    fa.regex = "flag\\{";
    cr_assert_eq(call(&ctx, &q, &rep), FGX__CTL__CODE__CODE_OK);
    cr_assert_eq(rep->n_filters, 1);
    cr_assert_eq(rep->filters[0]->id, 1, "the refused request did not even take an id");
    fgx__ctl__reply__free_unpacked(rep, NULL);
    ctl_ctx_release(&ctx);
}

Test(store, map_full_request_gets_clear_error)
{
    struct ctl_ctx ctx = {.threads = 1};
    Fgx__Ctl__Request q = FGX__CTL__REQUEST__INIT;
    Fgx__Ctl__ServiceAdd sa = FGX__CTL__SERVICE_ADD__INIT;
    Fgx__Ctl__Reply *rep;
    struct ctl_service s;
    struct ctl_txn *t;

    reopen_tiny();
    ctx.store = st;
    add_service("web", IPPROTO_TCP, 8080);
    fill_map();
    q.req_case = FGX__CTL__REQUEST__REQ_SERVICE_ADD;
    q.service_add = &sa;
    sa.name = "db";
    sa.port = 5432;
    cr_assert_eq(call(&ctx, &q, &rep), FGX__CTL__CODE__CODE_ERROR);
    cr_assert_not_null(strstr(rep->error, "state store full"), "%s", rep->error);
    fgx__ctl__reply__free_unpacked(rep, NULL);
    cr_assert_eq(ctl_txn_begin(st, false, &t), 0);
    cr_assert_eq(ctl_store_service_by_name(t, "db", &s), -ENOENT);
    cr_assert_eq(ctl_store_service_by_name(t, "web", &s), 0);
    ctl_txn_abort(t);
    ctl_ctx_release(&ctx);
}

/* ---- statistics and events (issue 3) ---- */

Test(store, service_totals_roundtrip_and_cascade)
{
    uint32_t a = add_service("web", IPPROTO_TCP, 8080);
    struct ctl_svc_totals v = {.packets = 1, .bytes = UINT64_MAX, .accepted = 3, .dropped = 4}, w;
    struct ctl_txn *t;

    cr_assert_eq(ctl_txn_begin(st, true, &t), 0);
    cr_assert_eq(ctl_store_svc_totals_get(t, a, &w), 0);
    cr_assert_eq(w.packets + w.bytes + w.accepted + w.dropped, 0, "never counted: zeros");
    cr_assert_eq(ctl_store_svc_totals_put(t, a, &v), 0);
    cr_assert_eq(ctl_txn_commit(t), 0);
    cr_assert_eq(ctl_txn_begin(st, true, &t), 0);
    cr_assert_eq(ctl_store_svc_totals_get(t, a, &w), 0);
    cr_assert_eq(memcmp(&v, &w, sizeof(v)), 0);
    cr_assert_eq(ctl_store_service_del(t, a), 0);
    cr_assert_eq(ctl_store_svc_totals_get(t, a, &w), 0);
    cr_assert_eq(w.bytes, 0, "the totals went with their service");
    ctl_txn_abort(t);
}

Test(store, named_counters_and_blocked_set)
{
    uint32_t a = add_service("web", IPPROTO_TCP, 8080);
    uint32_t f = add_filter(a, "x+");
    struct ctl_txn *t;
    uint64_t v;

    cr_assert_eq(ctl_txn_begin(st, true, &t), 0);
    cr_assert_eq(ctl_store_u64_get(t, "event_seq", &v), 0);
    cr_assert_eq(v, 0);
    cr_assert_eq(ctl_store_u64_put(t, "event_seq", 1ULL << 40), 0);
    cr_assert_eq(ctl_store_blocked_set(t, f, 9), 0);
    cr_assert_eq(ctl_store_blocked_set(t, f, 5), 0);
    cr_assert_eq(ctl_txn_commit(t), 0);
    cr_assert_eq(ctl_txn_begin(st, false, &t), 0);
    cr_assert_eq(ctl_store_u64_get(t, "event_seq", &v), 0);
    cr_assert_eq(v, 1ULL << 40);
    cr_assert_eq(ctl_store_u64_get(t, "generation", &v), 0);
    cr_assert_eq(v, 0, "a named counter never meets the store's own keys");
    cr_assert_eq(ctl_store_blocked_get(t, f, &v), 0);
    cr_assert_eq(v, 5, "set, not added");
    ctl_txn_abort(t);
}

static struct ctl_event event_new(uint64_t seq)
{
    struct ctl_event e = {.seq = seq,
                          .time_ns = seq * 1000,
                          .service_id = 1,
                          .filter_id = 2,
                          .dir = FGX_DIR_S2C,
                          .ipproto = IPPROTO_UDP,
                          .sport = 53,
                          .dport = 65535,
                          .excerpt_len = FGX_DP_EXCERPT_MAX};

    snprintf(e.service, sizeof(e.service), "svc-%llu", (unsigned long long)seq);
    snprintf(e.src, sizeof(e.src), "ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255");
    snprintf(e.dst, sizeof(e.dst), "10.0.0.2");
    for (int i = 0; i < FGX_DP_EXCERPT_MAX; i++)
        e.excerpt[i] = (uint8_t)(255 - i);
    return e;
}

Test(store, events_put_list_trim)
{
    struct ctl_event *out, want;
    struct ctl_txn *t;
    size_t n;

    cr_assert_eq(ctl_txn_begin(st, true, &t), 0);
    cr_assert_eq(ctl_store_event_list(t, 10, &out, &n), 0);
    cr_assert_eq(n, 0);
    free(out);
    for (uint64_t s = 1; s <= 300; s++) {
        struct ctl_event e = event_new(s);
        cr_assert_eq(ctl_store_event_put(t, &e), 0);
    }
    cr_assert_eq(ctl_txn_commit(t), 0);

    cr_assert_eq(ctl_txn_begin(st, false, &t), 0);
    cr_assert_eq(ctl_store_event_list(t, 3, &out, &n), 0);
    ctl_txn_abort(t);
    cr_assert_eq(n, 3);
    cr_assert_eq(out[0].seq, 298, "the newest, oldest first (keys sort numerically)");
    cr_assert_eq(out[2].seq, 300);
    want = event_new(300);
    cr_assert_eq(out[2].time_ns, want.time_ns);
    cr_assert_eq(out[2].service_id, 1);
    cr_assert_eq(out[2].filter_id, 2);
    cr_assert_str_eq(out[2].service, want.service);
    cr_assert_eq(out[2].dir, FGX_DIR_S2C);
    cr_assert_eq(out[2].ipproto, IPPROTO_UDP);
    cr_assert_str_eq(out[2].src, want.src, "the longest address text fits");
    cr_assert_str_eq(out[2].dst, "10.0.0.2");
    cr_assert_eq(out[2].sport, 53);
    cr_assert_eq(out[2].dport, 65535);
    cr_assert_eq(out[2].excerpt_len, FGX_DP_EXCERPT_MAX);
    cr_assert_eq(memcmp(out[2].excerpt, want.excerpt, FGX_DP_EXCERPT_MAX), 0);
    free(out);

    cr_assert_eq(ctl_txn_begin(st, true, &t), 0);
    cr_assert_eq(ctl_store_event_trim(t, 100), 0);
    cr_assert_eq(ctl_store_event_list(t, 1000, &out, &n), 0);
    cr_assert_eq(n, 100);
    cr_assert_eq(out[0].seq, 201);
    cr_assert_eq(out[99].seq, 300);
    free(out);
    cr_assert_eq(ctl_store_event_trim(t, 1000), 0, "nothing to trim");
    cr_assert_eq(ctl_store_event_trim(t, 0), 0);
    cr_assert_eq(ctl_store_event_list(t, 1000, &out, &n), 0);
    cr_assert_eq(n, 0);
    free(out);
    ctl_txn_abort(t);
}

Test(store, midstream_roundtrip)
{
    struct ctl_service s = svc_new("web", IPPROTO_TCP, 8080), got;
    struct ctl_txn *t;
    uint32_t dflt = add_service("dflt", IPPROTO_TCP, 8081);

    s.midstream = FGX_MIDSTREAM_SCAN;
    cr_assert_eq(ctl_txn_begin(st, true, &t), 0);
    cr_assert_eq(ctl_store_service_put(t, &s), 0);
    cr_assert_eq(ctl_txn_commit(t), 0);
    cr_assert_eq(ctl_txn_begin(st, false, &t), 0);
    cr_assert_eq(ctl_store_service_get(t, s.id, &got), 0);
    cr_assert_eq(got.midstream, FGX_MIDSTREAM_SCAN);
    cr_assert_eq(ctl_store_service_get(t, dflt, &got), 0);
    cr_assert_eq(got.midstream, FGX_MIDSTREAM_RESET);
    ctl_txn_abort(t);
}

/* A service stored by a controld from before the setting has no midstream field: it reads as
 * the fail-closed default, never as "scan". */
Test(store, midstream_absent_in_old_record_is_reset)
{
    Fgx__Ctl__Service m = FGX__CTL__SERVICE__INIT;
    struct ctl_service got;
    struct ctl_txn *t;
    uint8_t key[4] = {0, 0, 0, 7}, buf[256];
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    MDB_val k = {sizeof(key), key}, v;
    uint32_t id = add_service("web", IPPROTO_TCP, 8080);

    (void)id;
    ctl_store_close(st);
    st = NULL;
    m.id = 7;
    m.name = "old";
    m.proto = FGX__CTL__PROTO__PROTO_TCP;
    m.ip = "";
    m.port = 9999;
    m.layer = FGX__CTL__LAYER__LAYER_NFQUEUE;
    m.active = 1;
    v.mv_size = fgx__ctl__service__pack(&m, buf);
    v.mv_data = buf;
    cr_assert_eq(mdb_env_create(&env), 0);
    cr_assert_eq(mdb_env_set_maxdbs(env, 16), 0);
    cr_assert_eq(mdb_env_set_mapsize(env, 64u << 20), 0);
    cr_assert_eq(mdb_env_open(env, dir, 0, 0600), 0);
    cr_assert_eq(mdb_txn_begin(env, NULL, 0, &txn), 0);
    cr_assert_eq(mdb_dbi_open(txn, "services", 0, &dbi), 0);
    cr_assert_eq(mdb_put(txn, dbi, &k, &v, 0), 0);
    cr_assert_eq(mdb_txn_commit(txn), 0);
    mdb_env_close(env);

    cr_assert_eq(ctl_store_open(dir, 0, &st), 0);
    cr_assert_eq(ctl_txn_begin(st, false, &t), 0);
    cr_assert_eq(ctl_store_service_get(t, 7, &got), 0);
    cr_assert_str_eq(got.name, "old");
    cr_assert_eq(got.midstream, FGX_MIDSTREAM_RESET);
    ctl_txn_abort(t);
}

/* issue 24: a write refused for want of room starts a degraded spell; one the background
 * writer began ends only with its own success. */
Test(store, health_degrades_on_a_full_map_and_clears)
{
    static char big[200000];
    struct fgx_blob b = {.data = big, .len = sizeof(big)};
    struct ctl_store_health h;
    struct ctl_health_entry e[8];
    struct ctl_txn *t;
    uint64_t seq;
    size_t n;
    int rv;

    ctl_health_reset();
    reopen_tiny();
    cr_assert(!ctl_store_reserve_held(st), "a reserve nobody asked for");
    ctl_store_reserve_start(st);
    cr_assert(ctl_store_reserve_held(st), "no reserve file beside the store");
    ctl_store_health_get(st, &h);
    cr_assert(!h.degraded);
    fill_map();
    ctl_store_health_get(st, &h);
    cr_assert(h.degraded);
    cr_assert_eq(h.err, -EFBIG);
    cr_assert_str_eq(h.what, "a change");
    cr_assert_gt(h.since, 0);
    seq = ctl_health_last_seq();
    n = ctl_health_list(seq - 1, UINT32_MAX, e, 8);
    cr_assert_eq(n, 1);
    cr_assert_str_eq(e[0].kind, "store-full");
    cr_assert(strstr(e[0].text, "LMDB map is full") != NULL, "%s", e[0].text);

    cr_assert_eq(ctl_txn_begin(st, true, &t), 0);
    ctl_txn_label(t, "saving events and counters", true);
    rv = ctl_store_dbcache_put(t, 999999, &b);
    cr_assert_eq(rv, -EFBIG);
    ctl_txn_abort(t);
    ctl_store_health_get(st, &h);
    cr_assert_str_eq(h.what, "saving events and counters");
    cr_assert_geq(h.failures, 2);

    /* a change that fits does not end the background writer's spell */
    cr_assert_eq(ctl_txn_begin(st, true, &t), 0);
    cr_assert_eq(ctl_txn_commit(t), 0);
    ctl_store_health_get(st, &h);
    cr_assert(h.degraded);
    /* its own success does */
    cr_assert_eq(ctl_txn_begin(st, true, &t), 0);
    ctl_txn_label(t, "saving events and counters", true);
    cr_assert_eq(ctl_txn_commit(t), 0);
    ctl_store_health_get(st, &h);
    cr_assert(!h.degraded);

    /* the background refusal went on the same spell; its end is noted once */
    n = ctl_health_list(seq, UINT32_MAX, e, 8);
    cr_assert_eq(n, 1, "%zu health entries", n);
    cr_assert_str_eq(e[0].kind, "store-ok");
    cr_assert(ctl_store_reserve_release(st));
    cr_assert(!ctl_store_reserve_held(st));
    cr_assert(!ctl_store_reserve_release(st));
}
