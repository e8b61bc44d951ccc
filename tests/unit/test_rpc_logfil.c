/* Unit tests for controld's side of log-only filters and labels (rpc_filter.c's add and set,
 * ctl_ruleset.c's ids, ctl_stats.c's matched, rpc_logfil.c's labels and events --top) against a
 * real store, with nftables and the workers left out, as test_ctl_rpc.c does. */
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
static Fgx__Ctl__Reply *reply;

static void setup(void)
{
    snprintf(dir, sizeof(dir), "/tmp/fgx-test-rpclf-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    memset(&ctx, 0, sizeof(ctx));
    cr_assert_eq(ctl_store_open(dir, 0, &ctx.store), 0);
    cr_assert_eq(ctl_stats_open(ctx.store, &ctx.stats), 0);
    ctx.threads = 2;
}

static void teardown(void)
{
    char path[128];

    if (reply)
        fgx__ctl__reply__free_unpacked(reply, NULL);
    reply = NULL;
    ctl_ctx_release(&ctx);
    ctl_stats_free(ctx.stats);
    ctl_store_close(ctx.store);
    snprintf(path, sizeof(path), "%s/data.mdb", dir);
    unlink(path);
    snprintf(path, sizeof(path), "%s/lock.mdb", dir);
    unlink(path);
    rmdir(dir);
}

TestSuite(rpc_logfil, .init = setup, .fini = teardown);

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
    return reply->code;
}

static void svc(const char *name, uint32_t port)
{
    Fgx__Ctl__Request q = FGX__CTL__REQUEST__INIT;
    Fgx__Ctl__ServiceAdd a = FGX__CTL__SERVICE_ADD__INIT;

    q.req_case = FGX__CTL__REQUEST__REQ_SERVICE_ADD;
    q.service_add = &a;
    a.name = (char *)name;
    a.proto = FGX__CTL__PROTO__PROTO_TCP;
    a.port = port;
    cr_assert_eq(call(&q), 0);
}

static int add(const char *regex, bool log, const char *label)
{
    Fgx__Ctl__Request q = FGX__CTL__REQUEST__INIT;
    Fgx__Ctl__FilterAdd a = FGX__CTL__FILTER_ADD__INIT;

    q.req_case = FGX__CTL__REQUEST__REQ_FILTER_ADD;
    q.filter_add = &a;
    a.service = (char *)"web";
    a.regex = (char *)regex;
    a.has_action = log;
    a.action = FGX__CTL__FILTER_ACTION__FILTER_ACTION_LOG;
    a.label = (char *)label;
    return call(&q);
}

static int set(const char *ref, int action, const char *label)
{
    Fgx__Ctl__Request q = FGX__CTL__REQUEST__INIT;
    Fgx__Ctl__FilterSet s = FGX__CTL__FILTER_SET__INIT;

    q.req_case = FGX__CTL__REQUEST__REQ_FILTER_SET;
    q.filter_set = &s;
    s.ref = (char *)ref;
    s.has_action = action >= 0;
    s.action = action >= 0 ? (Fgx__Ctl__FilterAction)action : 0;
    s.label = (char *)label;
    return call(&q);
}

/* The c2s ids list of the one service the next generation holds. */
static void ids_now(uint32_t *out, size_t *n)
{
    struct ctl_ruleset rs;
    struct ctl_txn *t;
    char err[256];

    cr_assert_eq(ctl_txn_begin(ctx.store, true, &t), 0);
    cr_assert_eq(ctl_ruleset_build(t, &rs, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(ctl_txn_commit(t), 0);
    cr_assert_eq(rs.dp.nservices, 1);
    *n = rs.dp.services[0].nids[0];
    memcpy(out, rs.dp.services[0].ids[0], *n * sizeof(*out));
    ctl_ruleset_release(&rs);
}

Test(rpc_logfil, add_and_set_action_and_label)
{
    uint32_t ids[4];
    size_t n;

    svc("web", 8080);
    cr_assert_eq(add("evil[0-9]+", false, NULL), 0);
    cr_assert(reply->filters[0]->has_action);
    cr_assert_eq(reply->filters[0]->action, FGX__CTL__FILTER_ACTION__FILTER_ACTION_BLOCK);
    cr_assert_eq(add("probe[0-9]", true, "team12 sqli"), 0);
    cr_assert_eq(reply->filters[0]->action, FGX__CTL__FILTER_ACTION__FILTER_ACTION_LOG);
    cr_assert_str_eq(reply->filters[0]->label, "team12 sqli");
    cr_assert(reply->filters[0]->has_matched);
    ids_now(ids, &n);
    cr_assert_eq(n, 2);
    cr_assert_eq(ids[0], 1, "a block filter's id as it was");
    cr_assert_eq(ids[1], 2 | FGX_FILTER_ID_LOG, "a log filter's id carries the bit");

    /* switch both ways; the label stays */
    cr_assert_eq(set("2", FGX__CTL__FILTER_ACTION__FILTER_ACTION_BLOCK, NULL), 0);
    cr_assert_eq(reply->filters[0]->action, FGX__CTL__FILTER_ACTION__FILTER_ACTION_BLOCK);
    cr_assert_str_eq(reply->filters[0]->label, "team12 sqli");
    ids_now(ids, &n);
    cr_assert_eq(ids[1], 2);
    cr_assert_eq(set("1", FGX__CTL__FILTER_ACTION__FILTER_ACTION_LOG, "x"), 0);
    ids_now(ids, &n);
    cr_assert_eq(ids[0], 1 | FGX_FILTER_ID_LOG);
    cr_assert_eq(set("1", -1, ""), 0, "an empty label removes it");
    cr_assert_null(reply->filters[0]->label);
    cr_assert_eq(reply->filters[0]->action, FGX__CTL__FILTER_ACTION__FILTER_ACTION_LOG);

    /* refusals change nothing */
    cr_assert_eq(set("1", -1, "bad\x01"), FGX__CTL__CODE__CODE_INVALID);
    cr_assert(strstr(reply->error, "control character"), "%s", reply->error);
    cr_assert_eq(set("1", 7, NULL), FGX__CTL__CODE__CODE_INVALID);
    cr_assert_eq(set("1", -1, NULL), FGX__CTL__CODE__CODE_INVALID);
    cr_assert_eq(set("99", FGX__CTL__FILTER_ACTION__FILTER_ACTION_LOG, NULL), FGX__CTL__CODE__CODE_NOT_FOUND);
    cr_assert_eq(add("zzz", true, "\xff"), FGX__CTL__CODE__CODE_INVALID);
    cr_assert(strstr(reply->error, "UTF-8"), "%s", reply->error);
    {
        Fgx__Ctl__Request q = FGX__CTL__REQUEST__INIT;
        Fgx__Ctl__Ref r = FGX__CTL__REF__INIT;

        r.ref = (char *)"web";
        q.req_case = FGX__CTL__REQUEST__REQ_FILTER_LIST;
        q.filter_list = &r;
        cr_assert_eq(call(&q), 0);
        cr_assert_eq(reply->n_filters, 2, "the refused add stored nothing");
        cr_assert_eq(reply->filters[0]->action, FGX__CTL__FILTER_ACTION__FILTER_ACTION_LOG);
        cr_assert_null(reply->filters[0]->label);
    }
}

static void feed(uint32_t fid, bool log, const uint8_t src[4], uint64_t t)
{
    struct ctl_service svcs[1] = {{.id = 1, .name = "web"}};
    struct fgx_dp_event ev = {.time_ns = t,
                              .service_id = 1,
                              .filter_id = fid,
                              .dir = FGX_DIR_C2S,
                              .ipproto = IPPROTO_TCP,
                              .family = 4,
                              .sport = 40000,
                              .dport = 8080,
                              .excerpt_len = 4,
                              .log = log};
    struct fgx_dp_stats m = {.nevents = 1, .events = &ev};

    memcpy(ev.src, src, 4);
    memcpy(ev.dst, (uint8_t[]){192, 0, 2, 9}, 4);
    memcpy(ev.excerpt, "abcd", 4);
    cr_assert_eq(ctl_stats_ingest(ctx.stats, 1, &m, svcs, 1), 0);
}

Test(rpc_logfil, matched_counts_events_labels_and_top)
{
    static const uint8_t a[4] = {192, 0, 2, 1}, b[4] = {192, 0, 2, 2};
    struct fgx_dp_filter_stat fs[] = {{1, 0, 5}, {2, 3, 0}};
    struct fgx_dp_stats m = {.nfilters = 2, .filters = fs};
    Fgx__Ctl__Request q = FGX__CTL__REQUEST__INIT;
    Fgx__Ctl__EventsQuery eq = FGX__CTL__EVENTS_QUERY__INIT;
    Fgx__Ctl__StatsQuery sq = FGX__CTL__STATS_QUERY__INIT;

    svc("web", 8080);
    cr_assert_eq(add("probe", true, "t12 probe"), 0);
    cr_assert_eq(add("evil[0-9]+", false, "t12 rce"), 0);
    cr_assert_eq(ctl_stats_ingest(ctx.stats, 1, &m, NULL, 0), 0);
    q.req_case = FGX__CTL__REQUEST__REQ_STATS;
    q.stats = &sq;
    cr_assert_eq(call(&q), 0);
    cr_assert_eq(reply->service_stats[0]->matched, 5);
    cr_assert_eq(reply->service_stats[0]->blocked, 3);
    cr_assert_eq(reply->n_filters, 2);
    cr_assert_eq(reply->filters[0]->matched, 5);
    cr_assert_eq(reply->filters[1]->blocked, 3);

    feed(1, true, a, 100);
    feed(2, false, a, 200);
    feed(2, false, b, 300);
    feed(2, false, a, 400);
    q = (Fgx__Ctl__Request)FGX__CTL__REQUEST__INIT;
    q.req_case = FGX__CTL__REQUEST__REQ_EVENTS;
    q.events = &eq;
    cr_assert_eq(call(&q), 0);
    cr_assert_eq(reply->n_events, 4);
    cr_assert(reply->events[0]->has_log && reply->events[0]->log);
    cr_assert_not(reply->events[1]->log);
    cr_assert_str_eq(reply->events[0]->label, "t12 probe");
    cr_assert_str_eq(reply->events[3]->label, "t12 rce");

    eq.top = (char *)"src";
    cr_assert_eq(call(&q), 0);
    cr_assert_eq(reply->n_events, 0);
    cr_assert_eq(reply->top_events, 4);
    cr_assert_eq(reply->n_top, 2, "the log event is not a block");
    cr_assert_str_eq(reply->top[0]->src, "192.0.2.1");
    cr_assert_eq(reply->top[0]->blocks, 2);
    cr_assert_eq(reply->top[0]->last_ns, 400);
    cr_assert_eq(reply->top[0]->first_ns, 200);
    cr_assert_str_eq(reply->top[0]->label, "t12 rce");
    cr_assert_str_eq(reply->top[1]->src, "192.0.2.2");
    eq.has_since_ns = 1;
    eq.since_ns = 350;
    cr_assert_eq(call(&q), 0);
    cr_assert_eq(reply->n_top, 1);
    cr_assert_eq(reply->top[0]->blocks, 1);
    eq.top = (char *)"dst";
    cr_assert_eq(call(&q), FGX__CTL__CODE__CODE_INVALID);

    /* A removed filter's events keep their action, lose the label. */
    {
        Fgx__Ctl__Request r = FGX__CTL__REQUEST__INIT;
        Fgx__Ctl__Ref ref = FGX__CTL__REF__INIT;

        ref.ref = (char *)"1";
        r.req_case = FGX__CTL__REQUEST__REQ_FILTER_RM;
        r.filter_rm = &ref;
        cr_assert_eq(call(&r), 0);
    }
    eq.top = NULL;
    eq.has_since_ns = 0;
    cr_assert_eq(call(&q), 0);
    cr_assert(reply->events[0]->log);
    cr_assert_null(reply->events[0]->label);
}
