/* controld control API, the statistics family: per-service counters (`fgexctl stats`) and the
 * blocked-connection events (`fgexctl events`), read from ctl_stats.c's totals and ring. */
#include "controld/ctl_rpc_cmd.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "controld/ctl_game.h"
#include "controld/ctl_script_rt.h"
#include "fgx/log.h"

/* Per-service counters (and the filters behind their blocked sums, and the worker) for one
 * service or all. */
static void do_stats(struct ctl_rpc *r, const Fgx__Ctl__Request *req)
{
    const Fgx__Ctl__StatsQuery *q = req->stats;
    bool one_service = q && q->service && *q->service;
    struct ctl_service *svcs = NULL, one;
    struct ctl_filter *fs = NULL;
    struct ctl_txn *t;
    size_t n = 0, nfs = 0;
    int rv;

    ctl_stats_refresh(r->ctx, CTL_RPC_STATS_TIMEOUT_MS);
    if (ctl_rpc_txn_begin(r, false, &t) < 0)
        return;
    if (one_service) {
        if (ctl_rpc_service_resolve(r, t, q->service, &one) < 0)
            goto out;
        svcs = malloc(sizeof(*svcs));
        if (!svcs) {
            ctl_rpc_store_fail(r, -ENOMEM);
            goto out;
        }
        svcs[0] = one;
        n = 1;
    } else {
        rv = ctl_store_service_list(t, &svcs, &n);
        if (rv < 0) {
            ctl_rpc_store_fail(r, rv);
            goto out;
        }
    }
    rv = ctl_store_filter_list(t, one_service ? svcs[0].id : 0, &fs, &nfs);
    if (rv < 0) {
        ctl_rpc_store_fail(r, rv);
        goto out;
    }
    r->sst_msgs = calloc(n ? n : 1, sizeof(*r->sst_msgs));
    r->sst_ptrs = calloc(n ? n : 1, sizeof(*r->sst_ptrs));
    r->svcs = calloc(n ? n : 1, sizeof(*r->svcs));
    if (!r->sst_msgs || !r->sst_ptrs || !r->svcs) {
        ctl_rpc_store_fail(r, -ENOMEM);
        goto out;
    }
    if (n)
        memcpy(r->svcs, svcs, n * sizeof(*svcs));
    for (size_t i = 0; i < n; i++) {
        Fgx__Ctl__ServiceStats *m = &r->sst_msgs[i];
        struct ctl_svc_counters c = {0};
        struct ctl_svc_totals saved;

        if (r->ctx->stats) {
            ctl_stats_service(r->ctx->stats, r->svcs[i].id, &c);
        } else if (ctl_store_svc_totals_get(t, r->svcs[i].id, &saved) == 0) {
            c.packets = saved.packets;
            c.bytes = saved.bytes;
            c.accepted = saved.accepted;
            c.dropped = saved.dropped;
        }
        fgx__ctl__service_stats__init(m);
        m->service_id = r->svcs[i].id;
        m->name = r->svcs[i].name;
        m->packets = c.packets;
        m->bytes = c.bytes;
        m->accepted = c.accepted;
        m->dropped = c.dropped;
        m->flows_active = c.flows_active;
        m->has_events_lost = 1;
        m->events_lost = c.events_lost;
        /* Blocks of the service's removed filters stay in its total. */
        if (ctl_store_retired_get(t, r->svcs[i].id, &m->blocked_removed) == 0) {
            m->has_blocked_removed = 1;
            m->blocked += m->blocked_removed;
        }
        /* a script's blocks count as its filters' do */
        m->blocked += ctl_script_rt_blocked(r->svcs[i].id);
        m->has_tls_failed = r->svcs[i].tls || c.tls_failed > 0;
        m->tls_failed = c.tls_failed;
        m->has_flags_out = m->has_flags_to_checker = 1;
        m->flags_out = c.flags_out;
        m->flags_to_checker = c.flags_to_checker;
        for (size_t j = 0; j < nfs; j++) {
            uint64_t b;

            if (fs[j].service_id != r->svcs[i].id)
                continue;
            if (ctl_rpc_blocked_of(r, t, fs[j].id, &b) < 0)
                continue;
            m->blocked += b;
            m->has_matched = 1;
            if (r->ctx->stats)
                m->matched += ctl_stats_matched(r->ctx->stats, fs[j].id);
            else if (ctl_store_matched_get(t, fs[j].id, &b) == 0)
                m->matched += b;
        }
        r->sst_ptrs[i] = m;
    }
    r->reply.n_service_stats = n;
    r->reply.service_stats = r->sst_ptrs;
    r->reply.has_events_lost = 1;
    r->reply.events_lost = r->ctx->stats ? ctl_stats_events_lost(r->ctx->stats, 0) : 0;
    if (ctl_rpc_reply_filters(r, t, fs, nfs) < 0) {
        fs = NULL; /* owned by r now */
        goto out;
    }
    fs = NULL;
    r->reply.n_workers = ctl_rpc_reply_workers(r);
    r->reply.workers = r->workers;
out:
    ctl_filters_free(fs, nfs);
    free(svcs);
    ctl_txn_abort(t);
}

#define RPC_EVENTS_DEFAULT 100

static void do_events(struct ctl_rpc *r, const Fgx__Ctl__Request *req)
{
    const Fgx__Ctl__EventsQuery *q = req->events;
    uint64_t after = q && q->has_after_seq ? q->after_seq : 0;
    size_t limit = q && q->has_limit && q->limit > 0 ? q->limit : RPC_EVENTS_DEFAULT;
    struct ctl_txn *lt = NULL;
    const char *name = NULL;
    uint32_t sid = 0;
    size_t n;

    if (limit > CTL_EVENTS_KEEP)
        limit = CTL_EVENTS_KEEP;
    ctl_stats_refresh(r->ctx, CTL_RPC_STATS_TIMEOUT_MS);
    if (q && q->service && *q->service) {
        struct ctl_service svc;
        struct ctl_txn *t;
        int rv;

        if (ctl_rpc_txn_begin(r, false, &t) < 0)
            return;
        rv = ctl_rpc_all_digits(q->service)
                 ? (ctl_rpc_ref_id(q->service, &sid) < 0 ? -ENOENT
                                                         : ctl_store_service_get(t, sid, &svc))
                 : ctl_store_service_by_name(t, q->service, &svc);
        ctl_txn_abort(t);
        if (rv == 0) {
            sid = svc.id;
        } else if (rv == -ENOENT) {
            /* A removed service's events are still listed under the name they were shown. */
            sid = ctl_rpc_all_digits(q->service) ? sid : 0;
            name = q->service;
        } else {
            ctl_rpc_store_fail(r, rv);
            return;
        }
    }
    if (q && q->top && *q->top) {
        ctl_rpc_events_top(r, q, sid, name);
        return;
    }
    r->reply.has_last_seq = 1;
    if (!r->ctx->stats)
        return;
    r->reply.last_seq = ctl_stats_last_seq(r->ctx->stats);
    r->reply.has_events_lost = 1;
    r->reply.events_lost = ctl_stats_events_lost(r->ctx->stats, sid);
    r->evs = calloc(limit, sizeof(*r->evs));
    r->ev_msgs = calloc(limit, sizeof(*r->ev_msgs));
    r->ev_ptrs = calloc(limit, sizeof(*r->ev_ptrs));
    if (!r->evs || !r->ev_msgs || !r->ev_ptrs) {
        ctl_rpc_store_fail(r, -ENOMEM);
        return;
    }
    if (name && ctl_stats_events(r->ctx->stats, 0, sid, name, 1, r->evs) == 0) {
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_NOT_FOUND, "no such service: %s", name);
        return;
    }
    n = ctl_stats_events(r->ctx->stats, after, sid, name, limit, r->evs);
    if (q && q->has_flags && q->flags) {
        size_t k = 0;

        for (size_t i = 0; i < n; i++)
            if (r->evs[i]->filter_id == CTL_GAME_FLAG_ID)
                r->evs[k++] = r->evs[i];
        n = k;
    }
    if (n > 0 && ctl_rpc_txn_begin(r, false, &lt) < 0)
        return;
    for (size_t i = 0; i < n; i++) {
        const struct ctl_event *e = r->evs[i];
        Fgx__Ctl__Event *m = &r->ev_msgs[i];

        fgx__ctl__event__init(m);
        m->seq = e->seq;
        m->time_ns = e->time_ns;
        m->service_id = e->service_id;
        m->service = (char *)e->service;
        m->filter_id = e->filter_id;
        m->dir = e->dir == FGX_DIR_S2C ? FGX__CTL__DIR__DIR_S2C : FGX__CTL__DIR__DIR_C2S;
        m->proto =
            e->ipproto == IPPROTO_UDP ? FGX__CTL__PROTO__PROTO_UDP : FGX__CTL__PROTO__PROTO_TCP;
        m->src = (char *)e->src;
        m->sport = e->sport;
        m->dst = (char *)e->dst;
        m->dport = e->dport;
        if (e->excerpt_len > 0) {
            m->has_excerpt = 1;
            m->excerpt.data = (uint8_t *)e->excerpt;
            m->excerpt.len = e->excerpt_len;
            m->has_match_end = 1;
            m->match_end = e->match_end;
        }
        if (e->log) {
            m->has_log = 1;
            m->log = 1;
        }
        m->label = (char *)ctl_rpc_filter_label(r, lt, e->filter_id);
        m->has_h2_stream = e->h2_stream != 0;
        m->h2_stream = e->h2_stream;
        m->has_edge = e->edge != 0;
        m->edge = e->edge;
        if (e->filter_id == CTL_GAME_FLAG_ID) {
            m->label = NULL;
            m->has_flag_out = m->flag_out = 1;
            m->flag_sha256 = e->flag_sha256[0] ? (char *)e->flag_sha256 : NULL;
            m->has_flag_offset = e->flag_sha256[0] != '\0';
            m->flag_offset = e->flag_offset;
        }
        if (e->script_kind[0]) {
            m->label = NULL; /* no filter's */
            m->script_kind = (char *)e->script_kind;
            m->script_function = (char *)e->script_fn;
        }
        r->ev_ptrs[i] = m;
    }
    ctl_txn_abort(lt);
    r->reply.n_events = n;
    r->reply.events = r->ev_ptrs;
}

const struct ctl_rpc_cmd ctl_rpc_stats_cmds[] = {
    {FGX__CTL__REQUEST__REQ_STATS, do_stats, 0},
    {FGX__CTL__REQUEST__REQ_EVENTS, do_events, 0},
    {0, NULL, 0},
};
