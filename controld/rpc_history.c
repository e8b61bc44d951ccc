/* controld control API, the history family (issue 14): `fgexctl history`, `undo` and `redo`,
 * and what every change shares with them: the configuration before a change is taken before
 * its handler runs and recorded in the change's own transaction (ctl_rpc_finish()); an import's
 * diff and the counters it set. An undo is an import of the snapshot before the change it
 * reverts, through the same path as `fgexctl import` (ids and counters kept), so it is stored,
 * compiled and hot-swapped as any change is, and recorded as one. */
#include "controld/ctl_rpc_cmd.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <mbedtls/sha256.h>

#include "controld/ctl_compile.h"
#include "controld/ctl_rates.h"
#include "controld/ctl_ruleset.h"
#include "fgx/log.h"
#include "fgx/mbed_compat.h"

static uint64_t rpc_live_blocked(void *arg, uint32_t filter_id)
{
    const struct ctl_stats *s = arg;

    return ctl_stats_blocked(s, filter_id);
}

void ctl_rpc_import_opts(struct ctl_rpc *r, bool counters)
{
    r->imp.counters = counters;
    r->imp.diff = &r->diff;
    if (r->ctx->stats) {
        r->imp.blocked_of = rpc_live_blocked;
        r->imp.arg = r->ctx->stats;
    }
}

void ctl_rpc_import_counters(struct ctl_rpc *r)
{
    if (!r->ctx->stats)
        return;
    for (size_t i = 0; i < r->imp.nfset; i++)
        (void)ctl_stats_blocked_set(r->ctx->stats, r->imp.fset[i].id, r->imp.fset[i].blocked);
    for (size_t i = 0; i < r->imp.nsset; i++)
        (void)ctl_stats_service_set(r->ctx->stats, r->imp.sset[i].id, &r->imp.sset[i].totals);
}

static Fgx__Ctl__Dir dir_msg(enum fgx_dir d)
{
    return d == FGX_DIR_C2S   ? FGX__CTL__DIR__DIR_C2S
           : d == FGX_DIR_S2C ? FGX__CTL__DIR__DIR_S2C
                              : FGX__CTL__DIR__DIR_BOTH;
}

int ctl_rpc_reply_diff(struct ctl_rpc *r)
{
    size_t n = r->diff.n;

    r->diff_msgs = calloc(n ? n : 1, sizeof(*r->diff_msgs));
    r->diff_ptrs = calloc(n ? n : 1, sizeof(*r->diff_ptrs));
    if (!r->diff_msgs || !r->diff_ptrs) {
        ctl_rpc_store_fail(r, -ENOMEM);
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        const struct ctl_diff_line *l = &r->diff.v[i];
        Fgx__Ctl__DiffEntry *m = &r->diff_msgs[i];

        fgx__ctl__diff_entry__init(m);
        m->op = (char *)ctl_diff_op_name(l->op);
        m->kind = l->filter ? "filter" : "service";
        m->id = l->id;
        m->service = (char *)l->service;
        if (l->filter) {
            m->regex = l->regex;
            m->has_dir = m->has_nocase = m->has_active = m->has_blocked = 1;
            m->dir = dir_msg(l->dir);
            m->nocase = l->nocase;
            m->active = l->active;
            m->blocked = l->blocked;
            m->has_action = 1;
            m->action = l->log ? FGX__CTL__FILTER_ACTION__FILTER_ACTION_LOG
                               : FGX__CTL__FILTER_ACTION__FILTER_ACTION_BLOCK;
            m->label = l->label;
            if (l->what[0])
                m->what = (char *)l->what;
        } else {
            m->has_active = 1;
            m->active = l->active;
            if (l->what[0])
                m->what = (char *)l->what;
        }
        r->diff_ptrs[i] = m;
    }
    r->reply.n_diff = n;
    r->reply.diff = r->diff_ptrs;
    return 0;
}

void ctl_rpc_dry_finish(struct ctl_rpc *r, struct ctl_txn **t)
{
    struct ctl_ruleset rs;
    char err[768];
    int rv;

    /* Built as the change would be, so a dry run refuses what the change would refuse. */
    rv = ctl_ruleset_build(*t, &rs, err, sizeof(err));
    if (rv < 0) {
        ctl_rpc_fail(r, rv == -EINVAL ? FGX__CTL__CODE__CODE_INVALID : FGX__CTL__CODE__CODE_ERROR,
                     "%s", err);
        return;
    }
    ctl_ruleset_release(&rs);
    if (ctl_compile_collecting() && ctl_compile_pending() > 0) {
        r->deferred = true;
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_ERROR, "compiling");
        return;
    }
    ctl_txn_abort(*t);
    *t = NULL;
    r->reply.has_dry_run = 1;
    r->reply.dry_run = 1;
}

void ctl_rpc_who(const struct ctl_rpc *r, char *buf, size_t len)
{
    static const struct fgx_peer local = {.family = 0};
    const char *token = r->req ? r->req->token : NULL;
    char addr[64];

    ctl_auth_peer_format(r->peer ? r->peer : &local, addr, sizeof(addr));
    if (token && *token) {
        /* A session is named by a hash of its token: enough to tell two players apart, and
         * nothing a reader could log in with. */
        unsigned char h[32];

        fgx_mbed_sha256((const unsigned char *)token, strlen(token), h);
        snprintf(buf, len, "%s session %02x%02x%02x%02x", addr, h[0], h[1], h[2], h[3]);
    } else {
        snprintf(buf, len, "%s", addr);
    }
}

void ctl_rpc_history_begin(struct ctl_rpc *r, const Fgx__Ctl__Request *q)
{
    struct ctl_txn *t;

    if (q->has_dry_run && q->dry_run)
        return; /* changes nothing: nothing to record */
    if (ctl_txn_begin(r->ctx->store, false, &t) < 0)
        return;
    free(r->hist_before);
    free(r->hist_plain);
    r->hist_before = r->hist_plain = NULL;
    if (ctl_history_snapshot(t, r->ctx->stats, &r->hist_before, &r->hist_blen) == 0 &&
        ctl_history_plain(t, &r->hist_plain, &r->hist_plen) == 0)
        r->hist_on = true;
    else
        fgx_warn("history: cannot read the configuration before a change; it goes unrecorded");
    ctl_txn_abort(t);
    r->hist_kind = CTL_HIST_CHANGE;
    ctl_rpc_who(r, r->hist_who, sizeof(r->hist_who));
    ctl_history_describe(q, r->hist_what, sizeof(r->hist_what));
}

int ctl_rpc_history_commit(struct ctl_rpc *r, struct ctl_txn *t)
{
    size_t keep = r->ctx->history_keep ? r->ctx->history_keep : CTL_HISTORY_KEEP;
    uint8_t *now = NULL;
    size_t nlen = 0;
    uint64_t seq;
    int rv;

    if (!r->hist_on)
        return 0;
    if (!r->hist_force) {
        rv = ctl_history_plain(t, &now, &nlen);
        if (rv < 0)
            return rv;
        /* Nothing changed (a sync of the same file, enabling an enabled filter): nothing to
         * record, and nothing for an undo to revert. */
        if (nlen == r->hist_plen && memcmp(now, r->hist_plain, nlen) == 0) {
            free(now);
            return 0;
        }
        free(now);
    }
    rv = ctl_history_record(t, r->hist_kind, r->hist_target, r->hist_who, r->hist_what,
                            r->hist_before, r->hist_blen, keep, &seq);
    if (rv < 0)
        return rv;
    r->hist_on = false;
    fgx__ctl__change__init(&r->hist_new_msg);
    r->hist_new_msg.seq = seq;
    r->hist_new_msg.time = (uint64_t)time(NULL);
    r->hist_new_msg.who = r->hist_who;
    r->hist_new_msg.what = r->hist_what;
    r->hist_new_msg.kind = r->hist_kind == CTL_HIST_UNDO   ? "undo"
                           : r->hist_kind == CTL_HIST_REDO ? "redo"
                                                           : "change";
    if (r->hist_kind != CTL_HIST_CHANGE) {
        r->hist_new_msg.has_target = 1;
        r->hist_new_msg.target = r->hist_target;
    }
    r->hist_new = &r->hist_new_msg;
    if (r->hist_kind != CTL_HIST_CHANGE) {
        r->reply.n_changes = 1;
        r->reply.changes = &r->hist_new;
    }
    return 0;
}

void ctl_rpc_history_setting(struct ctl_rpc *r, const Fgx__Ctl__Request *q, const char *what)
{
    size_t keep = r->ctx->history_keep ? r->ctx->history_keep : CTL_HISTORY_KEEP;
    struct ctl_txn *t;
    char who[96];
    int rv;

    r->req = q;
    ctl_rpc_who(r, who, sizeof(who));
    rv = ctl_txn_begin(r->ctx->store, true, &t);
    if (rv == 0) {
        rv = ctl_history_record(t, CTL_HIST_SETTING, 0, who, what, NULL, 0, keep, NULL);
        if (rv == 0)
            rv = ctl_txn_commit(t);
        else
            ctl_txn_abort(t);
    }
    if (rv < 0)
        fgx_warn("history: cannot record \"%s\": %s", what, ctl_store_strerror(rv));
}

void ctl_rpc_history_release(struct ctl_rpc *r)
{
    free(r->hist_before);
    free(r->hist_plain);
    r->hist_before = r->hist_plain = NULL;
    for (size_t i = 0; i < r->nhist; i++)
        fgx__ctl__change__free_unpacked(r->hist_list[i], NULL);
    free(r->hist_list);
    r->hist_list = NULL;
    r->nhist = 0;
    free(r->rate_msgs);
    free(r->rate_ptrs);
    for (size_t i = 0; i < r->nrates; i++)
        free(r->rate_bufs[i]);
    free(r->rate_bufs);
    r->rate_msgs = NULL;
    r->rate_ptrs = NULL;
    r->rate_bufs = NULL;
    r->nrates = 0;
}

/* ---- history ---- */

#define RPC_HISTORY_DEFAULT 100

static void do_history(struct ctl_rpc *r, const Fgx__Ctl__Request *q)
{
    const Fgx__Ctl__HistoryQuery *h = q->history;
    size_t limit = h && h->has_limit && h->limit ? h->limit : RPC_HISTORY_DEFAULT;
    uint64_t since = h && h->has_since ? h->since : 0;
    uint64_t *seqs = NULL;
    struct ctl_txn *t;
    size_t n = 0, first;
    int rv;

    if (ctl_rpc_txn_begin(r, false, &t) < 0)
        return;
    rv = ctl_store_history_seqs(t, &seqs, &n);
    if (rv < 0)
        goto fail;
    r->hist_list = calloc(n ? n : 1, sizeof(*r->hist_list));
    if (!r->hist_list) {
        rv = -ENOMEM;
        goto fail;
    }
    first = n > limit ? n - limit : 0;
    for (size_t i = first; i < n; i++) {
        Fgx__Ctl__Change *c;

        rv = ctl_history_get(t, seqs[i], &c);
        if (rv < 0)
            goto fail;
        if (c->time < since) {
            fgx__ctl__change__free_unpacked(c, NULL);
            continue;
        }
        /* The snapshot stays in the store: it is what an undo needs, not what a reader does. */
        c->has_before = 0;
        r->hist_list[r->nhist++] = c;
    }
    r->reply.n_changes = r->nhist;
    r->reply.changes = r->hist_list;
    free(seqs);
    ctl_txn_abort(t);
    return;
fail:
    free(seqs);
    ctl_txn_abort(t);
    ctl_rpc_store_fail(r, rv);
}

/* Revert entry `target` (an undo applies its snapshot; a redo applies the undo's). */
static void history_revert(struct ctl_rpc *r, bool redo)
{
    struct ctl_hist_meta *v = NULL;
    Fgx__Ctl__Change *c = NULL;
    Fgx__Ctl__Config *cfg = NULL;
    struct ctl_txn *t = NULL;
    size_t n = 0;
    char err[768];
    long i;
    int rv;

    if (ctl_rpc_txn_begin(r, true, &t) < 0)
        return;
    rv = ctl_history_metas(t, &v, &n);
    if (rv < 0) {
        ctl_rpc_store_fail(r, rv);
        goto out;
    }
    i = redo ? ctl_history_redo_pick(v, n) : ctl_history_undo_pick(v, n);
    if (i < 0) {
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_NOT_FOUND, "%s",
                     redo ? "nothing to redo: no undo since the last change"
                          : "nothing to undo: no recorded change left to revert");
        goto out;
    }
    rv = ctl_history_get(t, v[i].seq, &c);
    if (rv < 0) {
        ctl_rpc_store_fail(r, rv);
        goto out;
    }
    cfg = c->has_before ? fgx__ctl__config__unpack(NULL, c->before.len, c->before.data) : NULL;
    if (!cfg) {
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_ERROR, "change %llu has no usable snapshot",
                     (unsigned long long)v[i].seq);
        goto out;
    }
    ctl_rpc_import_opts(r, true);
    rv = ctl_config_import_ex(t, cfg, &r->imp, err, sizeof(err));
    if (rv < 0) {
        ctl_rpc_fail(r, ctl_rpc_config_code(rv), "cannot revert change %llu: %s",
                     (unsigned long long)v[i].seq, err);
        goto out;
    }
    rv = ctl_history_mark(t, v[i].seq, true);
    if (rv == 0 && redo && v[i].target)
        rv = ctl_history_mark(t, v[i].target, false); /* the change it undid stands again */
    if (rv < 0 && rv != -ENOENT) {
        ctl_rpc_store_fail(r, rv);
        goto out;
    }
    r->hist_force = true;
    r->hist_kind = redo ? CTL_HIST_REDO : CTL_HIST_UNDO;
    r->hist_target = v[i].seq;
    snprintf(r->hist_what, sizeof(r->hist_what), "%s of #%llu: %s", redo ? "redo" : "undo",
             (unsigned long long)v[i].seq, c->what);
    if (ctl_rpc_reply_diff(r) < 0)
        goto out;
    ctl_rpc_finish(r, &t, true);
    if (!ctl_rpc_failed(r) || r->reply.code == FGX__CTL__CODE__CODE_UNAVAILABLE)
        fgx_info("%s by %s", r->hist_what, r->hist_who);
out:
    if (cfg)
        fgx__ctl__config__free_unpacked(cfg, NULL);
    if (c)
        fgx__ctl__change__free_unpacked(c, NULL);
    free(v);
    ctl_txn_abort(t);
}

static void do_undo(struct ctl_rpc *r, const Fgx__Ctl__Request *q)
{
    (void)q;
    history_revert(r, false);
}

static void do_redo(struct ctl_rpc *r, const Fgx__Ctl__Request *q)
{
    (void)q;
    history_revert(r, true);
}

/* ---- hit rates over time (`fgexctl stats --history`) ---- */

/* The kind's name in RateSeries.kind (control.proto). */
static const char *rate_kind_name(enum ctl_rate_kind kind)
{
    switch (kind) {
    case CTL_RATE_MATCHED:
        return "matched";
    case CTL_RATE_BYTES_C2S:
        return "bytes_c2s";
    case CTL_RATE_BYTES_S2C:
        return "bytes_s2c";
    case CTL_RATE_FLOWS:
        return "flows";
    case CTL_RATE_BLOCKED:
        break;
    }
    return "blocked";
}

/* One series into the reply (nothing when it has no point in the window). */
static int rate_add(struct ctl_rpc *r, struct ctl_txn *t, enum ctl_rate_kind kind,
                    enum ctl_rate_obj obj, uint32_t id, uint32_t service_id, uint32_t since,
                    size_t cap)
{
    bool wide = ctl_rates_point_len(kind) == 12; /* counts64 */
    struct ctl_rate_point *pts = NULL;
    Fgx__Ctl__RateSeries *m;
    uint32_t *mins, *cnts = NULL;
    uint64_t *cnts64 = NULL;
    void *buf;
    size_t n = 0;
    int rv = ctl_rates_get(t, kind, obj, id, since, &pts, &n);

    if (rv < 0 || n == 0)
        return rv;
    if (r->nrates == cap) {
        free(pts);
        return -ENOSPC;
    }
    /* One buffer: the 64-bit counts first (aligned), then the minutes, then 32-bit counts. */
    buf = malloc(n * (wide ? sizeof(uint64_t) + sizeof(uint32_t) : 2 * sizeof(uint32_t)));
    if (!buf) {
        free(pts);
        return -ENOMEM;
    }
    if (wide) {
        cnts64 = buf;
        mins = (uint32_t *)(cnts64 + n);
    } else {
        mins = buf;
        cnts = mins + n;
    }
    for (size_t i = 0; i < n; i++) {
        mins[i] = pts[i].minute;
        if (wide)
            cnts64[i] = pts[i].count;
        else
            cnts[i] = (uint32_t)pts[i].count;
    }
    free(pts);
    m = &r->rate_msgs[r->nrates];
    fgx__ctl__rate_series__init(m);
    m->kind = (char *)rate_kind_name(kind);
    m->obj = obj == CTL_RATE_SERVICE ? "service" : "filter";
    m->id = id;
    if (obj == CTL_RATE_FILTER) {
        m->has_service_id = 1;
        m->service_id = service_id;
    }
    m->n_minutes = n;
    m->minutes = mins;
    if (wide) {
        m->n_counts64 = n;
        m->counts64 = cnts64;
    } else {
        m->n_counts = n;
        m->counts = cnts;
    }
    r->rate_bufs[r->nrates] = buf;
    r->rate_ptrs[r->nrates] = m;
    r->nrates++;
    return 0;
}

static void do_stats_history(struct ctl_rpc *r, const Fgx__Ctl__Request *req)
{
    static const enum ctl_rate_kind kinds[] = {CTL_RATE_BLOCKED, CTL_RATE_MATCHED};
    static const enum ctl_rate_kind traffic[] = {CTL_RATE_BYTES_C2S, CTL_RATE_BYTES_S2C,
                                                 CTL_RATE_FLOWS};
    const Fgx__Ctl__StatsHistoryQuery *q = req->stats_history;
    uint32_t now = (uint32_t)(time(NULL) / 60), since;
    struct ctl_service *svcs = NULL, one;
    struct ctl_filter *fs = NULL;
    struct ctl_txn *t;
    size_t n = 0, nfs = 0, cap;
    int rv;

    since = now - CTL_RATES_MINUTES + 1;
    if (q && q->has_since && q->since / 60 > since)
        since = (uint32_t)(q->since / 60);
    /* What the workers counted until now, written, so that the last minute is in. */
    ctl_stats_refresh(r->ctx, CTL_RPC_STATS_TIMEOUT_MS);
    if (r->ctx->stats)
        (void)ctl_stats_flush(r->ctx->stats, r->ctx->store, ctl_rpc_mono_ms(), true);
    if (ctl_rpc_txn_begin(r, false, &t) < 0)
        return;
    if (q && q->service && *q->service) {
        if (ctl_rpc_service_resolve(r, t, q->service, &one) < 0)
            goto out;
        svcs = malloc(sizeof(*svcs));
        if (!svcs) {
            rv = -ENOMEM;
            goto fail;
        }
        svcs[0] = one;
        n = 1;
    } else if ((rv = ctl_store_service_list(t, &svcs, &n)) < 0) {
        goto fail;
    }
    rv = ctl_store_filter_list(t, n == 1 && q && q->service && *q->service ? svcs[0].id : 0, &fs,
                               &nfs);
    if (rv < 0)
        goto fail;
    cap = 2 * (n + nfs) + 3 * n; /* blocked and matched of each, three traffic series a service */
    r->rate_msgs = calloc(cap ? cap : 1, sizeof(*r->rate_msgs));
    r->rate_ptrs = calloc(cap ? cap : 1, sizeof(*r->rate_ptrs));
    r->rate_bufs = calloc(cap ? cap : 1, sizeof(*r->rate_bufs));
    if (!r->rate_msgs || !r->rate_ptrs || !r->rate_bufs) {
        rv = -ENOMEM;
        goto fail;
    }
    for (size_t k = 0; k < 2; k++) {
        for (size_t i = 0; i < n; i++) {
            rv = rate_add(r, t, kinds[k], CTL_RATE_SERVICE, svcs[i].id, 0, since, cap);
            for (size_t j = 0; rv == 0 && j < nfs; j++)
                if (fs[j].service_id == svcs[i].id)
                    rv =
                        rate_add(r, t, kinds[k], CTL_RATE_FILTER, fs[j].id, svcs[i].id, since, cap);
            if (rv < 0)
                goto fail;
        }
    }
    /* Each service's traffic, after its blocks. */
    for (size_t k = 0; k < sizeof(traffic) / sizeof(traffic[0]); k++) {
        for (size_t i = 0; i < n; i++) {
            rv = rate_add(r, t, traffic[k], CTL_RATE_SERVICE, svcs[i].id, 0, since, cap);
            if (rv < 0)
                goto fail;
        }
    }
    r->reply.n_rates = r->nrates;
    r->reply.rates = r->rate_ptrs;
    /* Names and regexes for the reader. */
    if (ctl_rpc_reply_services(r, t, svcs, n) < 0)
        goto out;
    ctl_rpc_reply_filters(r, t, fs, nfs);
    fs = NULL; /* owned by r now */
    goto out;
fail:
    ctl_rpc_store_fail(r, rv);
out:
    ctl_filters_free(fs, nfs);
    free(svcs);
    ctl_txn_abort(t);
}

const struct ctl_rpc_cmd ctl_rpc_history_cmds[] = {
    {FGX__CTL__REQUEST__REQ_HISTORY, do_history, 0},
    {FGX__CTL__REQUEST__REQ_UNDO, do_undo, CTL_RPC_CHANGE},
    {FGX__CTL__REQUEST__REQ_REDO, do_redo, CTL_RPC_CHANGE},
    {FGX__CTL__REQUEST__REQ_STATS_HISTORY, do_stats_history, 0},
    {0, NULL, 0},
};
