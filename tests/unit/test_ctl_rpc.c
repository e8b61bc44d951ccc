/* Unit tests for controld/ctl_rpc.c and ctl_ruleset.c: every request against a real store, with
 * nftables and the worker left out (ctx.nft and ctx.sup NULL), so changes are validated, stored
 * and compiled but not carried to a kernel. Worker STATS are fed to ctx.stats by hand. */
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "control.pb-c.h"
#include "controld/ctl_rpc.h"
#include "controld/ctl_ruleset.h"

static char dir[64];
static struct ctl_ctx ctx;

static void setup(void)
{
    snprintf(dir, sizeof(dir), "/tmp/fgx-test-rpc-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    memset(&ctx, 0, sizeof(ctx));
    cr_assert_eq(ctl_store_open(dir, 0, &ctx.store), 0);
    cr_assert_eq(ctl_stats_open(ctx.store, &ctx.stats), 0);
    ctx.threads = 2;
}

static void teardown(void)
{
    char path[128];

    ctl_ctx_release(&ctx);
    ctl_stats_free(ctx.stats);
    ctl_store_close(ctx.store);
    snprintf(path, sizeof(path), "%s/data.mdb", dir);
    unlink(path);
    snprintf(path, sizeof(path), "%s/lock.mdb", dir);
    unlink(path);
    rmdir(dir);
}

TestSuite(ctl_rpc, .init = setup, .fini = teardown);

static Fgx__Ctl__Reply *reply;

static int call(Fgx__Ctl__Request *q)
{
    size_t len = fgx__ctl__request__get_packed_size(q), rlen;
    uint8_t *buf = malloc(len ? len : 1);
    void *rbuf;

    if (reply)
        fgx__ctl__reply__free_unpacked(reply, NULL);
    fgx__ctl__request__pack(q, buf);
    cr_assert_eq(ctl_rpc_handle(&ctx, buf, len, &rbuf, &rlen), 0);
    free(buf);
    reply = fgx__ctl__reply__unpack(NULL, rlen, rbuf);
    free(rbuf);
    cr_assert_not_null(reply);
    cr_assert((reply->code == 0) == (reply->error == NULL), "an error has a message");
    return reply->code;
}

static void done(void)
{
    if (reply)
        fgx__ctl__reply__free_unpacked(reply, NULL);
    reply = NULL;
}

static int svc_add(const char *name, Fgx__Ctl__Proto proto, uint32_t port, const char *ip)
{
    Fgx__Ctl__Request q = FGX__CTL__REQUEST__INIT;
    Fgx__Ctl__ServiceAdd a = FGX__CTL__SERVICE_ADD__INIT;

    q.req_case = FGX__CTL__REQUEST__REQ_SERVICE_ADD;
    q.service_add = &a;
    a.name = (char *)name;
    a.proto = proto;
    a.port = port;
    a.ip = (char *)ip;
    return call(&q);
}

static int ref_req(Fgx__Ctl__Request__ReqCase c, const char *ref)
{
    Fgx__Ctl__Request q = FGX__CTL__REQUEST__INIT;
    Fgx__Ctl__Ref r = FGX__CTL__REF__INIT;

    r.ref = (char *)ref;
    q.req_case = c;
    /* Every Ref-carrying member of the oneof shares the union's storage. */
    q.service_show = &r;
    return call(&q);
}

static int empty_req(Fgx__Ctl__Request__ReqCase c)
{
    Fgx__Ctl__Request q = FGX__CTL__REQUEST__INIT;
    Fgx__Ctl__Empty e = FGX__CTL__EMPTY__INIT;

    q.req_case = c;
    q.status = &e;
    return call(&q);
}

static int flt_add(const char *svc, const char *regex, bool has_dir, Fgx__Ctl__Dir dir_,
                   bool nocase)
{
    Fgx__Ctl__Request q = FGX__CTL__REQUEST__INIT;
    Fgx__Ctl__FilterAdd a = FGX__CTL__FILTER_ADD__INIT;

    q.req_case = FGX__CTL__REQUEST__REQ_FILTER_ADD;
    q.filter_add = &a;
    a.service = (char *)svc;
    a.regex = (char *)regex;
    a.has_dir = has_dir;
    a.dir = dir_;
    a.has_nocase = nocase;
    a.nocase = nocase;
    return call(&q);
}

Test(ctl_rpc, service_add_and_list)
{
    cr_assert_eq(svc_add("web", FGX__CTL__PROTO__PROTO_TCP, 8080, NULL), 0);
    cr_assert_eq(reply->n_services, 1);
    cr_assert_eq(reply->services[0]->id, 1);
    cr_assert_str_eq(reply->services[0]->name, "web");
    cr_assert(reply->services[0]->active, "a new service starts active");
    cr_assert_str_eq(reply->services[0]->ip, "");
    cr_assert_eq(svc_add("dns", FGX__CTL__PROTO__PROTO_UDP, 53, "fd00::0/64"), 0);
    cr_assert_str_eq(reply->services[0]->ip, "fd00::/64", "stored canonical");

    cr_assert_eq(empty_req(FGX__CTL__REQUEST__REQ_SERVICE_LIST), 0);
    cr_assert_eq(reply->n_services, 2);
    cr_assert_str_eq(reply->services[1]->name, "dns");
    cr_assert_eq(reply->services[1]->proto, FGX__CTL__PROTO__PROTO_UDP);
    cr_assert_eq(reply->services[1]->port, 53);
    cr_assert(reply->services[1]->has_filters);
    cr_assert_eq(reply->services[1]->filters, 0);
    done();
}

Test(ctl_rpc, service_add_refusals)
{
    cr_assert_eq(svc_add("web", FGX__CTL__PROTO__PROTO_TCP, 8080, NULL), 0);
    cr_assert_eq(svc_add("web", FGX__CTL__PROTO__PROTO_TCP, 9090, NULL),
                 FGX__CTL__CODE__CODE_EXISTS);
    cr_assert_eq(svc_add("web2", FGX__CTL__PROTO__PROTO_TCP, 8080, NULL),
                 FGX__CTL__CODE__CODE_EXISTS);
    cr_assert_not_null(strstr(reply->error, "web"), "%s", reply->error);
    cr_assert_eq(svc_add("web2", FGX__CTL__PROTO__PROTO_TCP, 0, NULL),
                 FGX__CTL__CODE__CODE_INVALID);
    cr_assert_eq(svc_add("web2", FGX__CTL__PROTO__PROTO_TCP, 65536, NULL),
                 FGX__CTL__CODE__CODE_INVALID);
    cr_assert_eq(svc_add("web2", FGX__CTL__PROTO__PROTO_TCP, 1, "10.0.0.1/24"),
                 FGX__CTL__CODE__CODE_INVALID, "host bits set");
    cr_assert_eq(svc_add("web2", FGX__CTL__PROTO__PROTO_TCP, 1, "nonsense"),
                 FGX__CTL__CODE__CODE_INVALID);
    cr_assert_eq(svc_add("1234", FGX__CTL__PROTO__PROTO_TCP, 1, NULL), FGX__CTL__CODE__CODE_INVALID,
                 "an all-digit name would read as an id");
    cr_assert_eq(svc_add("a b", FGX__CTL__PROTO__PROTO_TCP, 1, NULL), FGX__CTL__CODE__CODE_INVALID);

    cr_assert_eq(empty_req(FGX__CTL__REQUEST__REQ_SERVICE_LIST), 0);
    cr_assert_eq(reply->n_services, 1, "no refused service was stored");
    done();
}

Test(ctl_rpc, refs_show_start_stop)
{
    svc_add("web", FGX__CTL__PROTO__PROTO_TCP, 8080, NULL);
    cr_assert_eq(ref_req(FGX__CTL__REQUEST__REQ_SERVICE_SHOW, "1"), 0);
    cr_assert_str_eq(reply->services[0]->name, "web");
    cr_assert_eq(ref_req(FGX__CTL__REQUEST__REQ_SERVICE_SHOW, "web"), 0);
    cr_assert_eq(reply->services[0]->id, 1);
    cr_assert_eq(ref_req(FGX__CTL__REQUEST__REQ_SERVICE_SHOW, "2"), FGX__CTL__CODE__CODE_NOT_FOUND);
    cr_assert_eq(ref_req(FGX__CTL__REQUEST__REQ_SERVICE_SHOW, "nope"),
                 FGX__CTL__CODE__CODE_NOT_FOUND);
    cr_assert_str_eq(reply->error, "no such service: nope");
    cr_assert_eq(ref_req(FGX__CTL__REQUEST__REQ_SERVICE_STOP, "web"), 0);
    cr_assert_not(reply->services[0]->active);
    cr_assert_eq(empty_req(FGX__CTL__REQUEST__REQ_STATUS), 0);
    cr_assert_str_eq(reply->status->version, "0.1.0");
    cr_assert_eq(reply->status->services, 1);
    cr_assert_eq(reply->status->services_active, 0);
    cr_assert_eq(ref_req(FGX__CTL__REQUEST__REQ_SERVICE_START, "1"), 0);
    cr_assert(reply->services[0]->active);
    done();
}

Test(ctl_rpc, rename_and_set)
{
    Fgx__Ctl__Request q = FGX__CTL__REQUEST__INIT;
    Fgx__Ctl__ServiceRename rn = FGX__CTL__SERVICE_RENAME__INIT;
    Fgx__Ctl__ServiceSet set = FGX__CTL__SERVICE_SET__INIT;

    svc_add("web", FGX__CTL__PROTO__PROTO_TCP, 8080, NULL);
    svc_add("api", FGX__CTL__PROTO__PROTO_TCP, 9090, NULL);
    q.req_case = FGX__CTL__REQUEST__REQ_SERVICE_RENAME;
    q.service_rename = &rn;
    rn.ref = "web";
    rn.name = "api";
    cr_assert_eq(call(&q), FGX__CTL__CODE__CODE_EXISTS);
    rn.name = "shop";
    cr_assert_eq(call(&q), 0);
    cr_assert_str_eq(reply->services[0]->name, "shop");

    q.req_case = FGX__CTL__REQUEST__REQ_SERVICE_SET;
    q.service_set = &set;
    set.ref = "shop";
    set.has_port = 1;
    set.port = 9090;
    cr_assert_eq(call(&q), FGX__CTL__CODE__CODE_EXISTS, "port taken by api");
    set.port = 8443;
    set.ip = "10.1.2.3";
    set.has_fail_open = 1;
    set.fail_open = 1;
    cr_assert_eq(call(&q), 0);
    cr_assert_eq(reply->services[0]->port, 8443);
    cr_assert_str_eq(reply->services[0]->ip, "10.1.2.3");
    cr_assert(reply->services[0]->fail_open);
    cr_assert(reply->services[0]->has_midstream);
    cr_assert_eq(reply->services[0]->midstream, FGX__CTL__MIDSTREAM__MIDSTREAM_RESET,
                 "the fail-closed default");
    cr_assert_eq(ref_req(FGX__CTL__REQUEST__REQ_SERVICE_SHOW, "shop"), 0);
    cr_assert_eq(reply->services[0]->port, 8443, "stored");
    set.has_port = 0;
    set.ip = NULL;
    set.has_fail_open = 0;
    set.has_midstream = 1;
    set.midstream = (Fgx__Ctl__Midstream)7;
    cr_assert_eq(call(&q), FGX__CTL__CODE__CODE_INVALID);
    set.midstream = FGX__CTL__MIDSTREAM__MIDSTREAM_SCAN;
    cr_assert_eq(call(&q), 0);
    cr_assert_eq(ref_req(FGX__CTL__REQUEST__REQ_SERVICE_SHOW, "shop"), 0);
    cr_assert_eq(reply->services[0]->midstream, FGX__CTL__MIDSTREAM__MIDSTREAM_SCAN, "stored");
    cr_assert_eq(reply->services[0]->port, 8443, "the rest unchanged");
    done();
}

Test(ctl_rpc, filter_lifecycle)
{
    svc_add("web", FGX__CTL__PROTO__PROTO_TCP, 8080, NULL);
    cr_assert_eq(flt_add("web", "flag\\{", false, 0, false), 0);
    cr_assert_eq(reply->n_filters, 1);
    cr_assert_eq(reply->filters[0]->id, 1);
    cr_assert_eq(reply->filters[0]->dir, FGX__CTL__DIR__DIR_BOTH);
    cr_assert(reply->filters[0]->active);
    cr_assert_eq(flt_add("1", "cat /etc/passwd", true, FGX__CTL__DIR__DIR_C2S, true), 0);
    cr_assert_eq(reply->filters[0]->id, 2);
    cr_assert_eq(reply->filters[0]->dir, FGX__CTL__DIR__DIR_C2S);
    cr_assert(reply->filters[0]->nocase);
    cr_assert_eq(flt_add("nope", "x", false, 0, false), FGX__CTL__CODE__CODE_NOT_FOUND);

    cr_assert_eq(ref_req(FGX__CTL__REQUEST__REQ_FILTER_DISABLE, "1"), 0);
    cr_assert_not(reply->filters[0]->active);
    cr_assert_eq(ref_req(FGX__CTL__REQUEST__REQ_FILTER_LIST, "web"), 0);
    cr_assert_eq(reply->n_filters, 2);
    cr_assert_not(reply->filters[0]->active);
    cr_assert(reply->filters[1]->active);
    cr_assert(reply->filters[1]->has_blocked);
    cr_assert_eq(reply->filters[1]->blocked, 0);
    cr_assert_eq(ref_req(FGX__CTL__REQUEST__REQ_FILTER_ENABLE, "1"), 0);
    cr_assert(reply->filters[0]->active);
    cr_assert_eq(ref_req(FGX__CTL__REQUEST__REQ_FILTER_RM, "2"), 0);
    cr_assert_eq(ref_req(FGX__CTL__REQUEST__REQ_FILTER_RM, "2"), FGX__CTL__CODE__CODE_NOT_FOUND);
    cr_assert_eq(ref_req(FGX__CTL__REQUEST__REQ_FILTER_RM, "abc"), FGX__CTL__CODE__CODE_INVALID);
    cr_assert_eq(empty_req(FGX__CTL__REQUEST__REQ_SERVICE_LIST), 0);
    cr_assert_eq(reply->services[0]->filters, 1);
    done();
}

Test(ctl_rpc, invalid_regex_names_pattern)
{
    svc_add("web", FGX__CTL__PROTO__PROTO_TCP, 8080, NULL);
    cr_assert_eq(flt_add("web", "(unclosed", false, 0, false), FGX__CTL__CODE__CODE_INVALID);
    cr_assert_not_null(strstr(reply->error, "(unclosed"), "%s", reply->error);
    cr_assert_eq(flt_add("web", "", false, 0, false), FGX__CTL__CODE__CODE_INVALID);
    cr_assert_eq(ref_req(FGX__CTL__REQUEST__REQ_FILTER_LIST, "web"), 0);
    cr_assert_eq(reply->n_filters, 0);
    done();
}

Test(ctl_rpc, service_rm_cascades)
{
    svc_add("web", FGX__CTL__PROTO__PROTO_TCP, 8080, NULL);
    flt_add("web", "a+b", false, 0, false);
    flt_add("web", "c+d", false, 0, false);
    cr_assert_eq(ref_req(FGX__CTL__REQUEST__REQ_SERVICE_RM, "web"), 0);
    cr_assert_eq(reply->services[0]->filters, 2, "reports what it removed");
    cr_assert_eq(ref_req(FGX__CTL__REQUEST__REQ_FILTER_ENABLE, "1"),
                 FGX__CTL__CODE__CODE_NOT_FOUND);
    cr_assert_eq(svc_add("web", FGX__CTL__PROTO__PROTO_TCP, 8080, NULL), 0, "name and port free");
    cr_assert_eq(reply->services[0]->filters, 0);
    done();
}

Test(ctl_rpc, undecodable_request)
{
    void *rbuf;
    size_t rlen;
    Fgx__Ctl__Reply *r;

    cr_assert_eq(ctl_rpc_handle(&ctx, "\xff\xff\xff", 3, &rbuf, &rlen), 0);
    r = fgx__ctl__reply__unpack(NULL, rlen, rbuf);
    free(rbuf);
    cr_assert_not_null(r);
    cr_assert_eq(r->code, FGX__CTL__CODE__CODE_INVALID);
    fgx__ctl__reply__free_unpacked(r, NULL);
}

/* The ruleset holds only running nfqueue services, one database per direction that has a
 * pattern, and a second build comes from the cache with the same content. */
Test(ctl_rpc, ruleset_build_uses_cache)
{
    struct ctl_ruleset rs1, rs2;
    struct ctl_txn *t;
    char err[256];

    svc_add("web", FGX__CTL__PROTO__PROTO_TCP, 8080, NULL);
    svc_add("off", FGX__CTL__PROTO__PROTO_TCP, 8081, NULL);
    flt_add("web", "flag\\{", true, FGX__CTL__DIR__DIR_S2C, false);
    ref_req(FGX__CTL__REQUEST__REQ_SERVICE_STOP, "off");
    done();

    cr_assert_eq(ctl_txn_begin(ctx.store, true, &t), 0);
    cr_assert_eq(ctl_ruleset_build(t, &rs1, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(ctl_txn_commit(t), 0);
    cr_assert_eq(rs1.dp.nservices, 1);
    cr_assert_eq(rs1.nnft, 1);
    cr_assert_eq(rs1.nft[0].port, 8080);
    cr_assert_eq(rs1.dp.services[0].db[0].len, 0, "no c2s pattern");
    cr_assert_gt(rs1.dp.services[0].db[1].len, 0);

    cr_assert_eq(ctl_txn_begin(ctx.store, true, &t), 0);
    cr_assert_eq(ctl_ruleset_build(t, &rs2, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(ctl_txn_commit(t), 0);
    cr_assert_gt(rs2.dp.generation, rs1.dp.generation);
    cr_assert_eq(rs2.dp.services[0].db[1].len, rs1.dp.services[0].db[1].len);
    cr_assert_eq(rs2.dp.services[0].db[1].hash, rs1.dp.services[0].db[1].hash);
    cr_assert_eq(memcmp(rs2.dp.services[0].db[1].data, rs1.dp.services[0].db[1].data,
                        rs1.dp.services[0].db[1].len),
                 0);
    ctl_ruleset_release(&rs1);
    ctl_ruleset_release(&rs2);
}

/* ---- statistics, events and workers (issue 3) ---- */

static void feed_stats(uint64_t instance, uint64_t web_packets, uint64_t f1_blocked)
{
    struct fgx_dp_service_stat ss[] = {
        {1, web_packets, web_packets * 10, web_packets - 1, 1, 2, 0, 0, 0, 0, 0, 0},
        {2, 5, 50, 5, 0, 0, 0, 0, 0, 0, 0, 0}};
    struct fgx_dp_filter_stat fs[] = {{1, f1_blocked, 0}, {2, 1, 0}, {3, 7, 0}};
    struct fgx_dp_stats m = {.nservices = 2, .services = ss, .nfilters = 3, .filters = fs};

    cr_assert_eq(ctl_stats_ingest(ctx.stats, instance, &m, NULL, 0), 0);
}

static int stats_req(const char *service)
{
    Fgx__Ctl__Request q = FGX__CTL__REQUEST__INIT;
    Fgx__Ctl__StatsQuery sq = FGX__CTL__STATS_QUERY__INIT;

    q.req_case = FGX__CTL__REQUEST__REQ_STATS;
    q.stats = &sq;
    sq.service = (char *)service;
    return call(&q);
}

static void three_filters(void)
{
    svc_add("web", FGX__CTL__PROTO__PROTO_TCP, 8080, NULL);
    svc_add("dns", FGX__CTL__PROTO__PROTO_UDP, 53, NULL);
    flt_add("web", "evil[0-9]+", false, 0, false);
    flt_add("web", "flag\\{", false, 0, false);
    flt_add("dns", "AAAA", false, 0, false);
}

Test(ctl_rpc, stats_all_and_one)
{
    three_filters();
    feed_stats(1, 10, 2);
    feed_stats(2, 4, 3); /* a restarted worker: totals go on */

    cr_assert_eq(stats_req(NULL), 0);
    cr_assert_eq(reply->n_service_stats, 2);
    cr_assert_str_eq(reply->service_stats[0]->name, "web");
    cr_assert_eq(reply->service_stats[0]->service_id, 1);
    cr_assert_eq(reply->service_stats[0]->packets, 14);
    cr_assert_eq(reply->service_stats[0]->bytes, 140);
    cr_assert_eq(reply->service_stats[0]->accepted, 9 + 3);
    cr_assert_eq(reply->service_stats[0]->dropped, 1 + 1);
    cr_assert_eq(reply->service_stats[0]->flows_active, 2);
    cr_assert_eq(reply->service_stats[0]->blocked, 2 + 3 + 1 + 1, "sum of its filters");
    cr_assert_eq(reply->service_stats[1]->packets, 10);
    cr_assert_eq(reply->service_stats[1]->blocked, 7 + 7);
    cr_assert_eq(reply->n_filters, 3, "every filter with its blocked");
    cr_assert_eq(reply->n_workers, 0, "no worker in this test");

    cr_assert_eq(stats_req("web"), 0);
    cr_assert_eq(reply->n_service_stats, 1);
    cr_assert_eq(reply->service_stats[0]->packets, 14);
    cr_assert_eq(reply->n_filters, 2, "only web's filters");
    cr_assert_eq(reply->filters[0]->blocked, 5);
    cr_assert_eq(stats_req("2"), 0);
    cr_assert_str_eq(reply->service_stats[0]->name, "dns");
    cr_assert_eq(stats_req("nope"), FGX__CTL__CODE__CODE_NOT_FOUND);
    cr_assert_eq(reply->n_service_stats, 0);
    done();
}

/* service list and filter list show the running totals, not the last ones saved. */
Test(ctl_rpc, lists_show_running_totals)
{
    three_filters();
    feed_stats(1, 10, 4);
    cr_assert_eq(empty_req(FGX__CTL__REQUEST__REQ_SERVICE_LIST), 0);
    cr_assert_eq(reply->services[0]->blocked, 5);
    cr_assert_eq(ref_req(FGX__CTL__REQUEST__REQ_FILTER_LIST, "web"), 0);
    cr_assert_eq(reply->filters[0]->blocked, 4);
    cr_assert_eq(reply->filters[1]->blocked, 1);
    done();
}

static void feed_events(size_t n, uint32_t service_id)
{
    struct fgx_dp_event ev[8];
    struct ctl_service svcs[2] = {{.id = 1, .name = "web"}, {.id = 2, .name = "dns"}};
    struct fgx_dp_stats m = {.nevents = n, .events = ev};

    cr_assert_leq(n, 8);
    for (size_t i = 0; i < n; i++) {
        ev[i] = (struct fgx_dp_event){.time_ns = 1000 + i,
                                      .service_id = service_id,
                                      .filter_id = service_id == 1 ? 1 : 3,
                                      .dir = FGX_DIR_C2S,
                                      .ipproto = service_id == 1 ? IPPROTO_TCP : IPPROTO_UDP,
                                      .family = 4,
                                      .src = {192, 0, 2, 1},
                                      .dst = {192, 0, 2, 2},
                                      .sport = 40000,
                                      .dport = service_id == 1 ? 8080 : 53,
                                      .excerpt_len = 8};
        memcpy(ev[i].excerpt, "evil1337", 8);
    }
    cr_assert_eq(ctl_stats_ingest(ctx.stats, 1, &m, svcs, 2), 0);
}

static int events_req(bool has_after, uint64_t after, uint32_t limit, const char *service)
{
    Fgx__Ctl__Request q = FGX__CTL__REQUEST__INIT;
    Fgx__Ctl__EventsQuery eq = FGX__CTL__EVENTS_QUERY__INIT;

    q.req_case = FGX__CTL__REQUEST__REQ_EVENTS;
    q.events = &eq;
    eq.has_after_seq = has_after;
    eq.after_seq = after;
    eq.has_limit = limit > 0;
    eq.limit = limit;
    eq.service = (char *)service;
    return call(&q);
}

Test(ctl_rpc, events_query)
{
    three_filters();
    cr_assert_eq(events_req(false, 0, 0, NULL), 0);
    cr_assert_eq(reply->n_events, 0);
    cr_assert(reply->has_last_seq);
    cr_assert_eq(reply->last_seq, 0);

    feed_events(3, 1);
    feed_events(2, 2);
    cr_assert_eq(events_req(false, 0, 0, NULL), 0);
    cr_assert_eq(reply->n_events, 5);
    cr_assert_eq(reply->last_seq, 5);
    cr_assert_eq(reply->events[0]->seq, 1, "oldest first");
    cr_assert_str_eq(reply->events[0]->service, "web");
    cr_assert_eq(reply->events[0]->filter_id, 1);
    cr_assert_eq(reply->events[0]->dir, FGX__CTL__DIR__DIR_C2S);
    cr_assert_eq(reply->events[0]->proto, FGX__CTL__PROTO__PROTO_TCP);
    cr_assert_str_eq(reply->events[0]->src, "192.0.2.1");
    cr_assert_eq(reply->events[0]->sport, 40000);
    cr_assert_str_eq(reply->events[0]->dst, "192.0.2.2");
    cr_assert_eq(reply->events[0]->dport, 8080);
    cr_assert_eq(reply->events[0]->time_ns, 1000);
    cr_assert(reply->events[0]->has_excerpt);
    cr_assert_eq(reply->events[0]->excerpt.len, 8);
    cr_assert_eq(memcmp(reply->events[0]->excerpt.data, "evil1337", 8), 0);
    cr_assert_eq(reply->events[4]->proto, FGX__CTL__PROTO__PROTO_UDP);

    cr_assert_eq(events_req(true, 3, 0, NULL), 0, "--follow: what came after");
    cr_assert_eq(reply->n_events, 2);
    cr_assert_eq(reply->events[0]->seq, 4);
    cr_assert_eq(reply->last_seq, 5);
    cr_assert_eq(events_req(true, 5, 0, NULL), 0);
    cr_assert_eq(reply->n_events, 0);
    cr_assert_eq(reply->last_seq, 5);

    cr_assert_eq(events_req(false, 0, 2, NULL), 0);
    cr_assert_eq(reply->n_events, 2, "the newest N");
    cr_assert_eq(reply->events[0]->seq, 4);
    cr_assert_eq(events_req(false, 0, 0, "web"), 0);
    cr_assert_eq(reply->n_events, 3);
    cr_assert_eq(events_req(false, 0, 0, "2"), 0);
    cr_assert_eq(reply->n_events, 2);
    cr_assert_eq(reply->events[0]->service_id, 2);
    cr_assert_eq(events_req(false, 0, 0, "nope"), FGX__CTL__CODE__CODE_NOT_FOUND);

    /* A removed service's events stay readable under the name they carried. */
    cr_assert_eq(ref_req(FGX__CTL__REQUEST__REQ_SERVICE_RM, "dns"), 0);
    cr_assert_eq(events_req(false, 0, 0, "dns"), 0);
    cr_assert_eq(reply->n_events, 2);
    done();
}

static int restart_req(const char *kind)
{
    Fgx__Ctl__Request q = FGX__CTL__REQUEST__INIT;
    Fgx__Ctl__WorkerRestart w = FGX__CTL__WORKER_RESTART__INIT;

    q.req_case = FGX__CTL__REQUEST__REQ_WORKER_RESTART;
    q.worker_restart = &w;
    w.kind = (char *)kind;
    return call(&q);
}

Test(ctl_rpc, worker_requests_without_worker)
{
    cr_assert_eq(empty_req(FGX__CTL__REQUEST__REQ_WORKER_LIST), 0);
    cr_assert_eq(reply->n_workers, 0);
    cr_assert_eq(restart_req("proxy"), FGX__CTL__CODE__CODE_INVALID);
    cr_assert_str_eq(reply->error, "no proxy worker runs");
    cr_assert_eq(restart_req("nfq"), FGX__CTL__CODE__CODE_INVALID);
    cr_assert_str_eq(reply->error, "no nfq worker runs");
    cr_assert_eq(restart_req("all"), 0, "all: what exists, here nothing");
    cr_assert_eq(reply->n_workers, 0);
    cr_assert_eq(restart_req("bogus"), FGX__CTL__CODE__CODE_INVALID);
    cr_assert_not_null(strstr(reply->error, "nfq, proxy, script or all"), "%s", reply->error);
    done();
}
