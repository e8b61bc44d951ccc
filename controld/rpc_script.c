/* controld control API, the script family (issue 16): a service's Python filter file: set
 * (checked in a process of its own first: refused with FILE:LINE, nothing stored), get, rm,
 * list (its functions, their state and counters), enable / disable a function, its log. */
#include "controld/ctl_rpc_cmd.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "controld/ctl_script.h"
#include "controld/ctl_script_rt.h"
#include "controld/ctl_svcaddr.h"
#include "fgx/log.h"

static int reply_script(struct ctl_rpc *r, Fgx__Ctl__Script *s, const struct ctl_service *svc,
                        bool with_source)
{
    struct ctl_script_reply *sr = calloc(1, sizeof(*sr));

    if (!sr) {
        ctl_script_free(s);
        ctl_rpc_store_fail(r, -ENOMEM);
        return -ENOMEM;
    }
    if (!with_source) {
        free(s->source.data);
        s->source.data = NULL;
        s->source.len = 0;
        s->has_source = 0;
    }
    /* the name is the service's: a static borrowed string would be freed by free_unpacked */
    free(s->service);
    s->service = strdup(svc->name);
    ctl_script_rt_fill(r->ctx, s);
    sr->script = s;
    r->script = sr;
    r->reply.script = s;
    return 0;
}

static int resolve_scriptable(struct ctl_rpc *r, struct ctl_txn *t, const char *ref,
                              struct ctl_service *svc)
{
    if (ctl_rpc_service_resolve(r, t, ref, svc) < 0)
        return -ENOENT;
    if (svc->layer == CTL_LAYER_EXTERNAL) {
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID, "service %s is on the external layer: %s",
                     svc->name, CTL_EXTERNAL_NO_FILTER);
        return -EINVAL;
    }
    return 0;
}

static int load_or_fail(struct ctl_rpc *r, struct ctl_txn *t, const struct ctl_service *svc,
                        Fgx__Ctl__Script **s)
{
    int rv = ctl_script_load(t, svc->id, s);

    if (rv == -ENOENT)
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_NOT_FOUND, "service %s has no script", svc->name);
    else if (rv < 0)
        ctl_rpc_store_fail(r, rv);
    return rv;
}

static void do_script_set(struct ctl_rpc *r, const Fgx__Ctl__Request *q)
{
    const Fgx__Ctl__ScriptSet *a = q->script_set;
    const char *fname = a->filename && *a->filename ? a->filename : "script.py";
    Fgx__Ctl__Script *s = NULL, *old = NULL;
    struct ctl_service svc;
    struct ctl_txn *t = NULL;
    char err[1024];
    int rv;

    if (a->has_deadline_ms && (a->deadline_ms == 0 || a->deadline_ms > CTL_SCRIPT_DEADLINE_MAX)) {
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID, "deadline must be 1 to %u ms",
                     CTL_SCRIPT_DEADLINE_MAX);
        return;
    }
    if (ctl_rpc_txn_begin(r, true, &t) < 0)
        return;
    if (resolve_scriptable(r, t, a->service, &svc) < 0)
        goto out;
    rv = ctl_script_check(a->source.data, a->source.len, fname, &s, err, sizeof(err));
    if (rv < 0) {
        ctl_rpc_fail(r, rv == -EINVAL ? FGX__CTL__CODE__CODE_INVALID : FGX__CTL__CODE__CODE_ERROR,
                     "%s", err);
        goto out;
    }
    if (ctl_script_check_proto(s, &svc, err, sizeof(err)) < 0) {
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID, "%s", err);
        goto out;
    }
    s->service_id = svc.id;
    if (q->has_dry_run && q->dry_run) {
        /* the page's check (issue 27): the file's functions as set would list them, nothing
         * stored, the service's file unchanged */
        s->has_deadline_ms = 1;
        s->deadline_ms = a->has_deadline_ms ? a->deadline_ms : CTL_SCRIPT_DEADLINE_MS;
        if (reply_script(r, s, &svc, false) == 0)
            s = NULL;
        goto out;
    }
    s->has_updated = 1;
    s->updated = (uint64_t)time(NULL);
    rv = ctl_script_load(t, svc.id, &old);
    if (rv < 0 && rv != -ENOENT) {
        ctl_rpc_store_fail(r, rv);
        goto out;
    }
    /* A new version of the file keeps what the players switched off, function by name, and
     * the deadline unless it gives one. */
    for (size_t i = 0; old && i < s->n_functions; i++)
        for (size_t j = 0; j < old->n_functions; j++)
            if (strcmp(s->functions[i]->name, old->functions[j]->name) == 0 &&
                old->functions[j]->has_active && !old->functions[j]->active)
                s->functions[i]->active = 0;
    s->has_deadline_ms = 1;
    s->deadline_ms = a->has_deadline_ms                ? a->deadline_ms
                     : old && old->has_deadline_ms ? old->deadline_ms
                                                       : CTL_SCRIPT_DEADLINE_MS;
    rv = ctl_script_save(t, s);
    if (rv < 0) {
        ctl_rpc_store_fail(r, rv);
        goto out;
    }
    ctl_rpc_finish(r, &t, true);
    if (ctl_rpc_failed(r) && r->reply.code != FGX__CTL__CODE__CODE_UNAVAILABLE)
        goto out;
    fgx_info("script %s set on service %s: %zu function(s)", fname, svc.name, s->n_functions);
    ctl_script_rt_error_clear(svc.id); /* a failure of the file before is history */
    if (reply_script(r, s, &svc, false) == 0)
        s = NULL;
out:
    ctl_script_free(s);
    ctl_script_free(old);
    ctl_txn_abort(t);
}

static void do_script_show(struct ctl_rpc *r, const char *ref, bool with_source)
{
    Fgx__Ctl__Script *s = NULL;
    struct ctl_service svc;
    struct ctl_txn *t = NULL;

    if (!with_source)
        ctl_stats_refresh(r->ctx, CTL_RPC_STATS_TIMEOUT_MS);
    if (ctl_rpc_txn_begin(r, false, &t) < 0)
        return;
    if (ctl_rpc_service_resolve(r, t, ref, &svc) < 0 || load_or_fail(r, t, &svc, &s) < 0)
        goto out;
    (void)reply_script(r, s, &svc, with_source);
out:
    ctl_txn_abort(t);
}

static void do_script_get(struct ctl_rpc *r, const Fgx__Ctl__Request *q)
{
    do_script_show(r, ctl_rpc_ref(q->script_get), true);
}

static void do_script_list(struct ctl_rpc *r, const Fgx__Ctl__Request *q)
{
    do_script_show(r, ctl_rpc_ref(q->script_list), false);
}

static void do_script_rm(struct ctl_rpc *r, const Fgx__Ctl__Request *q)
{
    Fgx__Ctl__Script *s = NULL;
    struct ctl_service svc;
    struct ctl_txn *t = NULL;
    int rv;

    if (ctl_rpc_txn_begin(r, true, &t) < 0)
        return;
    if (ctl_rpc_service_resolve(r, t, ctl_rpc_ref(q->script_rm), &svc) < 0 ||
        load_or_fail(r, t, &svc, &s) < 0)
        goto out;
    rv = ctl_store_script_del(t, svc.id);
    if (rv < 0) {
        ctl_rpc_store_fail(r, rv);
        goto out;
    }
    ctl_rpc_finish(r, &t, true);
    if (ctl_rpc_failed(r) && r->reply.code != FGX__CTL__CODE__CODE_UNAVAILABLE)
        goto out;
    fgx_info("script removed from service %s", svc.name);
    if (reply_script(r, s, &svc, false) == 0)
        s = NULL;
out:
    ctl_script_free(s);
    ctl_txn_abort(t);
}

static void do_script_active(struct ctl_rpc *r, const Fgx__Ctl__ScriptFunctionRef *a, bool on)
{
    Fgx__Ctl__Script *s = NULL;
    Fgx__Ctl__ScriptFunction *fn = NULL;
    struct ctl_service svc;
    struct ctl_txn *t = NULL;
    int rv;

    if (ctl_rpc_txn_begin(r, true, &t) < 0)
        return;
    if (ctl_rpc_service_resolve(r, t, a->service, &svc) < 0 || load_or_fail(r, t, &svc, &s) < 0)
        goto out;
    for (size_t i = 0; i < s->n_functions && !fn; i++)
        if (strcmp(s->functions[i]->name, a->function) == 0)
            fn = s->functions[i];
    if (!fn) {
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_NOT_FOUND,
                     "service %s's script has no filter function %s", svc.name, a->function);
        goto out;
    }
    fn->has_active = 1;
    fn->active = on;
    rv = ctl_script_save(t, s);
    if (rv < 0) {
        ctl_rpc_store_fail(r, rv);
        goto out;
    }
    ctl_rpc_finish(r, &t, true);
    if (ctl_rpc_failed(r) && r->reply.code != FGX__CTL__CODE__CODE_UNAVAILABLE)
        goto out;
    fgx_info("script function %s of service %s %s", a->function, svc.name,
             on ? "enabled" : "disabled");
    if (reply_script(r, s, &svc, false) == 0)
        s = NULL;
out:
    ctl_script_free(s);
    ctl_txn_abort(t);
}

static void do_script_enable(struct ctl_rpc *r, const Fgx__Ctl__Request *q)
{
    do_script_active(r, q->script_enable, true);
}

static void do_script_disable(struct ctl_rpc *r, const Fgx__Ctl__Request *q)
{
    do_script_active(r, q->script_disable, false);
}

static void do_script_log(struct ctl_rpc *r, const Fgx__Ctl__Request *q)
{
    const Fgx__Ctl__ScriptLogQuery *a = q->script_log;
    struct ctl_service svc;
    struct ctl_txn *t = NULL;
    int rv;

    ctl_stats_refresh(r->ctx, CTL_RPC_STATS_TIMEOUT_MS);
    if (ctl_rpc_txn_begin(r, false, &t) < 0)
        return;
    if (ctl_rpc_service_resolve(r, t, a->service, &svc) < 0)
        goto out;
    r->script = calloc(1, sizeof(*r->script));
    if (!r->script) {
        ctl_rpc_store_fail(r, -ENOMEM);
        goto out;
    }
    rv = ctl_script_rt_log(r->ctx, svc.id, a->has_after_seq ? a->after_seq : 0, r->script,
                           &r->reply.script_log_last);
    if (rv < 0) {
        ctl_rpc_store_fail(r, rv);
        goto out;
    }
    r->reply.has_script_log_last = 1;
    r->reply.n_script_log = r->script->nentries;
    r->reply.script_log = r->script->entry_ptrs;
out:
    ctl_txn_abort(t);
}

const struct ctl_rpc_cmd ctl_rpc_script_cmds[] = {
    {FGX__CTL__REQUEST__REQ_SCRIPT_SET, do_script_set, CTL_RPC_CHANGE},
    {FGX__CTL__REQUEST__REQ_SCRIPT_GET, do_script_get, 0},
    {FGX__CTL__REQUEST__REQ_SCRIPT_RM, do_script_rm, CTL_RPC_CHANGE},
    {FGX__CTL__REQUEST__REQ_SCRIPT_LIST, do_script_list, 0},
    {FGX__CTL__REQUEST__REQ_SCRIPT_ENABLE, do_script_enable, CTL_RPC_CHANGE},
    {FGX__CTL__REQUEST__REQ_SCRIPT_DISABLE, do_script_disable, CTL_RPC_CHANGE},
    {FGX__CTL__REQUEST__REQ_SCRIPT_LOG, do_script_log, 0},
    {0, NULL, 0},
};
