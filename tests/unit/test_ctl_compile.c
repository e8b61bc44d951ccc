/* Unit tests for controld/ctl_compile.c and the deferred path of ctl_rpc.c: how jobs are shared
 * among children; a session records what a probe misses, compiles it in real child processes
 * and serves the results (a bad regex keeps hyperscan's reason); a compile past the limit is
 * killed with no process left; a change request through ctl_rpc_handle_try() stores nothing on
 * its probe, completes on its second run, and a change meanwhile is refused as busy. */
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "control.pb-c.h"
#include "controld/ctl_compile.h"
#include "controld/ctl_config.h"
#include "controld/ctl_rpc.h"

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Poll the session until it is done (or max_s passes); returns its result. */
static int wait_done(double max_s, char *err, size_t errlen)
{
    double end = now_s() + max_s;
    bool done = false;
    int rv;

    for (;;) {
        rv = ctl_compile_poll(&done, err, errlen);
        if (done)
            return rv;
        cr_assert_lt(now_s(), end, "the session did not finish within %.0f s", max_s);
        usleep(5000);
    }
}

static void no_children_left(void)
{
    cr_assert_eq(waitpid(-1, NULL, WNOHANG), -1, "a compile child is left");
    cr_assert_eq(errno, ECHILD);
}

Test(ctl_compile, share_puts_big_sets_apart_and_spreads_checks)
{
    size_t kid_of_db[4], lo[CTL_COMPILE_KIDS_MAX], hi[CTL_COMPILE_KIDS_MAX];
    size_t sizes[] = {10, 1000, 5};

    /* One big set and many checks, two cores: the set alone, the checks beside it. */
    cr_assert_eq(ctl_compile_share((size_t[]){10000}, 1, 10000, 2, kid_of_db, lo, hi), 2);
    cr_assert_eq(kid_of_db[0], 0);
    cr_assert(lo[0] == 0 && hi[0] == 0);
    cr_assert(lo[1] == 0 && hi[1] == 10000);
    /* Four cores: the checks over the three children without a set. */
    cr_assert_eq(ctl_compile_share((size_t[]){10000}, 1, 10000, 4, kid_of_db, lo, hi), 4);
    cr_assert(hi[0] == lo[0]);
    cr_assert_eq((hi[1] - lo[1]) + (hi[2] - lo[2]) + (hi[3] - lo[3]), 10000);
    cr_assert(hi[1] - lo[1] >= 3333 && hi[3] - lo[3] >= 3333);
    cr_assert(lo[2] == hi[1] && lo[3] == hi[2], "contiguous, none lost");
    /* More sets than children: largest first, round robin; every child also checks. */
    cr_assert_eq(ctl_compile_share(sizes, 3, 100, 2, kid_of_db, lo, hi), 2);
    cr_assert_eq(kid_of_db[1], 0, "the largest set goes first");
    cr_assert_eq(kid_of_db[0], 1);
    cr_assert_eq(kid_of_db[2], 0);
    cr_assert_eq((hi[0] - lo[0]) + (hi[1] - lo[1]), 100);
    /* A few checks are not worth more than one process. */
    cr_assert_eq(ctl_compile_share(NULL, 0, 10, 8, kid_of_db, lo, hi), 1);
    cr_assert(lo[0] == 0 && hi[0] == 10);
    cr_assert_eq(ctl_compile_share(NULL, 0, 0, 8, kid_of_db, lo, hi), 0);
}

Test(ctl_compile, session_records_compiles_and_serves)
{
    struct fgx_pattern pats[] = {
        {.filter_id = 1, .regex = "evil[0-9]+", .dir = FGX_DIR_BOTH},
        {.filter_id = 2, .regex = "leak\\{", .dir = FGX_DIR_S2C},
        {.filter_id = 3, .regex = "\xff\xfe\x80zq", .dir = FGX_DIR_C2S},
    };
    uint64_t key = fgx_ruleset_key(pats, 3, FGX_DIR_C2S, IPPROTO_TCP);
    struct fgx_blob b, direct;
    char err[512];
    int rv = 1;

    ctl_compile_config(30, 2);
    /* Outside a probe nothing is known: the caller compiles itself, as without a session. */
    cr_assert_not(ctl_compile_check_result("a(", false, IPPROTO_TCP, &rv, err, sizeof(err)));
    ctl_compile_collect(true);
    cr_assert(ctl_compile_check_result("evil[0-9]+", false, IPPROTO_TCP, &rv, err, sizeof(err)));
    cr_assert_eq(rv, 0, "a probe reports an unknown regex as passing");
    cr_assert(ctl_compile_check_result("a(", false, IPPROTO_TCP, &rv, err, sizeof(err)));
    cr_assert(ctl_compile_check_result("evil[0-9]+", false, IPPROTO_TCP, &rv, err, sizeof(err)));
    cr_assert(ctl_compile_check_result("evil[0-9]+", true, IPPROTO_TCP, &rv, err, sizeof(err)));
    cr_assert(ctl_compile_db_result(pats, 3, FGX_DIR_C2S, IPPROTO_TCP, key, &b, &rv, err,
                                    sizeof(err)));
    cr_assert_eq(b.len, 0);
    cr_assert(ctl_compile_db_result(pats, 3, FGX_DIR_C2S, IPPROTO_TCP, key, &b, &rv, err,
                                    sizeof(err)));
    ctl_compile_collect(false);
    cr_assert_eq(ctl_compile_pending(), 4, "three distinct checks and one database");

    cr_assert_eq(ctl_compile_start(), 0);
    cr_assert(ctl_compile_running());
    cr_assert_eq(wait_done(30, err, sizeof(err)), 0, "%s", err);
    cr_assert_not(ctl_compile_running());
    no_children_left();
    cr_assert_eq(ctl_compile_pending(), 0);

    cr_assert(ctl_compile_check_result("evil[0-9]+", false, IPPROTO_TCP, &rv, err, sizeof(err)));
    cr_assert_eq(rv, 0);
    cr_assert(ctl_compile_check_result("a(", false, IPPROTO_TCP, &rv, err, sizeof(err)));
    cr_assert_eq(rv, -EINVAL);
    {
        /* Word for word what the check says when it runs here. */
        char here[512];

        cr_assert_eq(ctl_config_regex_check("a(", false, IPPROTO_TCP, here, sizeof(here)),
                     -EINVAL);
        cr_assert_str_eq(err, here);
    }
    cr_assert(ctl_compile_db_result(pats, 3, FGX_DIR_C2S, IPPROTO_TCP, key, &b, &rv, err,
                                    sizeof(err)));
    cr_assert_eq(rv, 0, "%s", err);
    cr_assert_eq(b.hash, key);
    cr_assert_eq(fgx_ruleset_compile(pats, 3, FGX_DIR_C2S, IPPROTO_TCP, &direct, err,
                                     sizeof(err)),
                 0);
    cr_assert_eq(b.len, direct.len, "the child's database is the one compiled here");
    cr_assert_eq(memcmp(b.data, direct.data, b.len), 0);
    fgx_blob_release(&b);
    fgx_blob_release(&direct);
    ctl_compile_reset();
    cr_assert_not(ctl_compile_check_result("a(", false, IPPROTO_TCP, &rv, err, sizeof(err)),
                  "reset forgets the results");
}

Test(ctl_compile, past_the_limit_is_killed)
{
    enum { N = 3000 }; /* about 20 s to compile: far past a 1 s limit */
    static struct fgx_pattern pats[N];
    static char text[N][24];
    uint64_t key;
    struct fgx_blob b;
    char err[512];
    double t0;
    int rv;

    for (int i = 0; i < N; i++) {
        snprintf(text[i], sizeof(text[i]), "pat%05d[0-9]+x", i);
        pats[i] = (struct fgx_pattern){.filter_id = (uint32_t)i + 1, .regex = text[i],
                                       .dir = FGX_DIR_BOTH};
    }
    key = fgx_ruleset_key(pats, N, FGX_DIR_C2S, IPPROTO_TCP);
    ctl_compile_config(1, 2);
    ctl_compile_collect(true);
    cr_assert(ctl_compile_db_result(pats, N, FGX_DIR_C2S, IPPROTO_TCP, key, &b, &rv, err,
                                    sizeof(err)));
    ctl_compile_collect(false);
    t0 = now_s();
    cr_assert_eq(ctl_compile_start(), 0);
    rv = wait_done(10, err, sizeof(err));
    cr_assert_eq(rv, -ETIMEDOUT, "%d %s", rv, err);
    cr_assert_lt(now_s() - t0, 2.5, "stopped %.1f s after it began", now_s() - t0);
    cr_assert(strstr(err, "--compile-timeout (1 s)") && strstr(err, "nothing was changed"), "%s",
              err);
    no_children_left();
    ctl_compile_reset();
}

/* ---- the deferred request path (ctl_rpc_handle_try) -------------------------------------- */

static char dir[64];
static struct ctl_ctx ctx;

static void rpc_setup(void)
{
    snprintf(dir, sizeof(dir), "/tmp/fgx-test-compile-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    memset(&ctx, 0, sizeof(ctx));
    cr_assert_eq(ctl_store_open(dir, 0, &ctx.store), 0);
    ctx.threads = 2;
    ctl_compile_config(30, 2);
}

static void rpc_teardown(void)
{
    char path[128];

    ctl_compile_reset();
    ctl_ctx_release(&ctx);
    ctl_store_close(ctx.store);
    snprintf(path, sizeof(path), "%s/data.mdb", dir);
    unlink(path);
    snprintf(path, sizeof(path), "%s/lock.mdb", dir);
    unlink(path);
    rmdir(dir);
}

static const struct fgx_peer local = {.family = 0};

/* One try; the reply (NULL when deferred) is unpacked into *out. */
static bool try_req(Fgx__Ctl__Request *q, bool busy, Fgx__Ctl__Reply **out)
{
    size_t len = fgx__ctl__request__get_packed_size(q), rlen = 0;
    uint8_t *buf = malloc(len ? len : 1);
    void *rbuf = NULL;
    bool deferred = false;

    fgx__ctl__request__pack(q, buf);
    cr_assert_eq(ctl_rpc_handle_try(&ctx, &local, buf, len, busy, &rbuf, &rlen, &deferred), 0);
    free(buf);
    *out = NULL;
    if (deferred) {
        cr_assert_null(rbuf);
        return true;
    }
    *out = fgx__ctl__reply__unpack(NULL, rlen, rbuf);
    free(rbuf);
    cr_assert_not_null(*out);
    return false;
}

static size_t filter_count(void)
{
    Fgx__Ctl__Request q = FGX__CTL__REQUEST__INIT;
    Fgx__Ctl__Ref r = FGX__CTL__REF__INIT;
    Fgx__Ctl__Reply *rep;
    size_t n;

    r.ref = "web";
    q.req_case = FGX__CTL__REQUEST__REQ_FILTER_LIST;
    q.filter_list = &r;
    cr_assert_not(try_req(&q, false, &rep));
    cr_assert_eq(rep->code, 0, "%s", rep->error);
    n = rep->n_filters;
    fgx__ctl__reply__free_unpacked(rep, NULL);
    return n;
}

Test(ctl_compile, change_is_probed_compiled_then_completed, .init = rpc_setup,
     .fini = rpc_teardown)
{
    Fgx__Ctl__Request q = FGX__CTL__REQUEST__INIT, bq = FGX__CTL__REQUEST__INIT;
    Fgx__Ctl__ServiceAdd sa = FGX__CTL__SERVICE_ADD__INIT;
    Fgx__Ctl__FilterAdd fa = FGX__CTL__FILTER_ADD__INIT, fb = FGX__CTL__FILTER_ADD__INIT;
    Fgx__Ctl__Reply *rep;
    char err[512];

    /* A service with no filter compiles nothing: done on the first run. */
    q.req_case = FGX__CTL__REQUEST__REQ_SERVICE_ADD;
    q.service_add = &sa;
    sa.name = "web";
    sa.proto = FGX__CTL__PROTO__PROTO_TCP;
    sa.port = 80;
    cr_assert_not(try_req(&q, false, &rep));
    cr_assert_eq(rep->code, 0, "%s", rep->error);
    fgx__ctl__reply__free_unpacked(rep, NULL);

    q.req_case = FGX__CTL__REQUEST__REQ_FILTER_ADD;
    q.filter_add = &fa;
    fa.service = "web";
    fa.regex = "evil[0-9]+";
    cr_assert(try_req(&q, false, &rep), "a new regex needs the compiler");
    cr_assert_eq(filter_count(), 0, "the probe stored nothing");
    cr_assert_gt(ctl_compile_pending(), 0);

    /* Meanwhile: reads are served, another change is refused as busy. */
    bq.req_case = FGX__CTL__REQUEST__REQ_FILTER_ADD;
    bq.filter_add = &fb;
    fb.service = "web";
    fb.regex = "other";
    cr_assert_not(try_req(&bq, true, &rep));
    cr_assert_eq(rep->code, FGX__CTL__CODE__CODE_ERROR);
    cr_assert(strstr(rep->error, "busy"), "%s", rep->error);
    fgx__ctl__reply__free_unpacked(rep, NULL);

    cr_assert_eq(ctl_compile_start(), 0);
    cr_assert_eq(wait_done(30, err, sizeof(err)), 0, "%s", err);
    cr_assert_not(try_req(&q, false, &rep), "the second run finds every result");
    cr_assert_eq(rep->code, 0, "%s", rep->error);
    cr_assert_eq(rep->n_filters, 1);
    cr_assert_str_eq(rep->filters[0]->regex, "evil[0-9]+");
    fgx__ctl__reply__free_unpacked(rep, NULL);
    cr_assert_eq(filter_count(), 1);
    cr_assert_eq(ctl_compile_pending(), 0, "the session was emptied");

    /* A bad regex: probed, compiled, then refused with hyperscan's reason, nothing stored. */
    fa.regex = "a(b";
    cr_assert(try_req(&q, false, &rep));
    cr_assert_eq(ctl_compile_start(), 0);
    cr_assert_eq(wait_done(30, err, sizeof(err)), 0, "%s", err);
    cr_assert_not(try_req(&q, false, &rep));
    cr_assert_eq(rep->code, FGX__CTL__CODE__CODE_INVALID);
    cr_assert(strstr(rep->error, "invalid regex \"a(b\""), "%s", rep->error);
    fgx__ctl__reply__free_unpacked(rep, NULL);
    cr_assert_eq(filter_count(), 1);
    no_children_left();
}
