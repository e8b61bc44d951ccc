/* A script's block as an event (issue 16): it travels from the worker to controld (datapath
 * Event.script_verdict / script_function) and folds into `events --top src` rows per source,
 * service and function, while a script call's failures stay out of them. */
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "controld/ctl_top.h"
#include "fgx/dp.h"

Test(script_events, block_travels_with_its_function)
{
    struct fgx_dp_event ev[2];
    struct fgx_dp_msg in, out;
    void *buf = NULL;
    size_t len = 0;

    memset(&in, 0, sizeof(in));
    memset(ev, 0, sizeof(ev));
    for (int i = 0; i < 2; i++) {
        ev[i].time_ns = 100 + (uint64_t)i;
        ev[i].service_id = 7;
        ev[i].dir = FGX_DIR_C2S;
        ev[i].ipproto = IPPROTO_TCP;
        ev[i].family = 4;
        ev[i].src[0] = 10;
        ev[i].dst[0] = 10;
        ev[i].sport = 40000;
        ev[i].dport = 80;
        memcpy(ev[i].excerpt, "GET /x", 6);
        ev[i].excerpt_len = ev[i].match_end = 6;
    }
    ev[0].filter_id = 3; /* a regex block: no script members */
    ev[1].script_verdict = FGX_DP_SCRIPT_DROP;
    (void)snprintf(ev[1].script_fn, sizeof(ev[1].script_fn), "probe");
    in.type = FGX_DP_STATS;
    in.u.stats.generation = 1;
    in.u.stats.events = ev;
    in.u.stats.nevents = 2;
    cr_assert_eq(fgx_dp_encode(&in, &buf, &len), 0);
    cr_assert_eq(fgx_dp_decode(buf, len, &out), 0);
    free(buf);
    cr_assert_eq(out.u.stats.nevents, 2);
    cr_assert_eq(out.u.stats.events[0].script_verdict, 0);
    cr_assert_str_eq(out.u.stats.events[0].script_fn, "");
    cr_assert_eq(out.u.stats.events[0].filter_id, 3);
    cr_assert_eq(out.u.stats.events[1].script_verdict, FGX_DP_SCRIPT_DROP);
    cr_assert_str_eq(out.u.stats.events[1].script_fn, "probe");
    cr_assert_eq(out.u.stats.events[1].excerpt_len, 6);
    cr_assert_eq(memcmp(out.u.stats.events[1].excerpt, "GET /x", 6), 0);
    fgx_dp_msg_release(&out);
}

static void ev_set(struct ctl_event *e, const char *src, uint32_t svc, uint32_t filter,
                   const char *kind, const char *fn, uint64_t t)
{
    memset(e, 0, sizeof(*e));
    (void)snprintf(e->src, sizeof(e->src), "%s", src);
    e->service_id = svc;
    e->filter_id = filter;
    (void)snprintf(e->script_kind, sizeof(e->script_kind), "%s", kind);
    (void)snprintf(e->script_fn, sizeof(e->script_fn), "%s", fn);
    e->time_ns = t;
}

Test(script_events, top_rows_per_function)
{
    struct ctl_event e[7];
    const struct ctl_event *p[7];
    struct ctl_top_row *rows = NULL;
    size_t n = 0;

    ev_set(&e[0], "10.0.0.1", 1, 0, "reject", "no_export", 100);
    ev_set(&e[1], "10.0.0.1", 1, 0, "reject", "no_export", 200);
    ev_set(&e[2], "10.0.0.1", 1, 0, "drop", "probe", 300);
    ev_set(&e[3], "10.0.0.1", 2, 0, "reject", "no_export", 250);  /* another service's file */
    ev_set(&e[4], "10.0.0.1", 1, 0, "timeout", "no_export", 400); /* a failure: not a block */
    ev_set(&e[5], "10.0.0.1", 1, 0, "exception", "probe", 500);
    ev_set(&e[6], "10.0.0.1", 1, 5, "", "", 150); /* a regex block */
    for (int i = 0; i < 7; i++)
        p[i] = &e[i];
    cr_assert_eq(ctl_top_src(p, 7, 0, &rows, &n), 0);
    cr_assert_eq(n, 4, "the function's blocks per service, the regex's, no failure");
    cr_assert_str_eq(rows[0].script_fn, "probe");
    cr_assert_eq(rows[0].blocks, 1);
    cr_assert_eq(rows[0].last_ns, 300, "the drop, not the later exception");
    cr_assert_str_eq(rows[1].script_fn, "no_export");
    cr_assert_eq(rows[1].service_id, 2);
    cr_assert_eq(rows[1].blocks, 1);
    cr_assert_str_eq(rows[2].script_fn, "no_export");
    cr_assert_eq(rows[2].service_id, 1);
    cr_assert_eq(rows[2].blocks, 2);
    cr_assert_eq(rows[2].first_ns, 100);
    cr_assert_eq(rows[3].filter_id, 5);
    cr_assert_str_eq(rows[3].script_fn, "");
    free(rows);
}
