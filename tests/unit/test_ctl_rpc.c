/* Unit tests for controld/ctl_rpc.c and ctl_ruleset.c: every request against a real store, with
 * nftables and the worker left out (ctx.nft and ctx.sup NULL), so changes are validated, stored
 * and compiled but not carried to a kernel. */
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
    ctx.threads = 2;
}

static void teardown(void)
{
    char path[128];

    ctl_ctx_release(&ctx);
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

    Fgx__Ctl__Request q = FGX__CTL__REQUEST__INIT;
    Fgx__Ctl__ServiceAdd a = FGX__CTL__SERVICE_ADD__INIT;
    q.req_case = FGX__CTL__REQUEST__REQ_SERVICE_ADD;
    q.service_add = &a;
    a.name = "px";
    a.port = 7;
    a.has_layer = 1;
    a.layer = FGX__CTL__LAYER__LAYER_PROXY;
    cr_assert_eq(call(&q), FGX__CTL__CODE__CODE_INVALID);
    cr_assert_str_eq(reply->error, "the proxy layer is not available yet");

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
    cr_assert_eq(ref_req(FGX__CTL__REQUEST__REQ_SERVICE_SHOW, "shop"), 0);
    cr_assert_eq(reply->services[0]->port, 8443, "stored");
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
