/* controld control API, the service family: add, list, show, start, stop, rm, rename, set.
 * Each change is validated, stored in the request's transaction and applied by ctl_rpc_finish
 * before the reply leaves (ctl_rpc_cmd.h). */
#include "controld/ctl_rpc_cmd.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fgx/log.h"

/* Store svc, put it in the reply and commit (apply: push to the workers and the rules too).
 * Returns 0, or -1 with the failure already in the reply; *t stays the caller's to abort. */
static int service_commit(struct ctl_rpc *r, struct ctl_txn **t, struct ctl_service *svc,
                          bool apply)
{
    int rv = ctl_store_service_put(*t, svc);

    if (rv < 0) {
        ctl_rpc_store_fail(r, rv);
        return -1;
    }
    if (ctl_rpc_reply_services(r, *t, svc, 1) < 0)
        return -1;
    ctl_rpc_finish(r, t, apply);
    return 0;
}

static void do_service_add(struct ctl_rpc *r, const Fgx__Ctl__Request *q)
{
    const Fgx__Ctl__ServiceAdd *a = q->service_add;
    struct ctl_service svc = {.active = true};
    struct ctl_txn *t = NULL;

    if (ctl_rpc_check_name(r, a->name) < 0 || ctl_rpc_check_proto(r, a->proto, &svc.ipproto) < 0 ||
        ctl_rpc_check_port(r, a->port) < 0 || ctl_rpc_check_ip(r, a->ip, &svc.addr) < 0 ||
        (a->has_layer && ctl_rpc_check_layer(r, a->layer, &svc.layer) < 0) ||
        (a->has_midstream && ctl_rpc_check_midstream(r, a->midstream, &svc.midstream) < 0) ||
        ctl_rpc_check_capture(r, a->has_capture, a->capture, a->has_capture_conns, a->capture_conns,
                              a->has_capture_bytes, a->capture_bytes, &svc) < 0)
        return;
    snprintf(svc.name, sizeof(svc.name), "%s", a->name);
    svc.port = (uint16_t)a->port;
    if (!a->has_layer)
        svc.layer = CTL_LAYER_NFQUEUE;
    if (ctl_rpc_check_layer_proto(r, &svc) < 0)
        return;
    svc.fail_open = a->has_fail_open && a->fail_open;
    if (ctl_rpc_txn_begin(r, true, &t) < 0)
        return;
    if (ctl_rpc_check_unique(r, t, &svc) < 0)
        goto out;
    if (service_commit(r, &t, &svc, true) < 0)
        goto out;
    if (!ctl_rpc_failed(r) || r->reply.code == FGX__CTL__CODE__CODE_UNAVAILABLE)
        fgx_info("service %s (id %u) added: %s port %u", svc.name, svc.id,
                 ctl_rpc_proto_name(svc.ipproto), svc.port);
out:
    ctl_txn_abort(t);
}

static void do_service_list(struct ctl_rpc *r, const Fgx__Ctl__Request *q)
{
    (void)q;
    struct ctl_service *svcs = NULL;
    struct ctl_txn *t;
    size_t n = 0;
    int rv;

    ctl_stats_refresh(r->ctx, CTL_RPC_STATS_TIMEOUT_MS);
    if (ctl_rpc_txn_begin(r, false, &t) < 0)
        return;
    rv = ctl_store_service_list(t, &svcs, &n);
    if (rv < 0)
        ctl_rpc_store_fail(r, rv);
    else
        ctl_rpc_reply_services(r, t, svcs, n);
    free(svcs);
    ctl_txn_abort(t);
}

static void do_service_show(struct ctl_rpc *r, const Fgx__Ctl__Request *q)
{
    const char *ref = ctl_rpc_ref(q->service_show);
    struct ctl_service svc;
    struct ctl_txn *t;

    ctl_stats_refresh(r->ctx, CTL_RPC_STATS_TIMEOUT_MS);
    if (ctl_rpc_txn_begin(r, false, &t) < 0)
        return;
    if (ctl_rpc_service_resolve(r, t, ref, &svc) == 0)
        ctl_rpc_reply_services(r, t, &svc, 1);
    ctl_txn_abort(t);
}

static void do_service_active(struct ctl_rpc *r, const char *ref, bool active)
{
    struct ctl_service svc;
    struct ctl_txn *t = NULL;
    bool changed;
    int rv;

    if (ctl_rpc_txn_begin(r, true, &t) < 0)
        return;
    if (ctl_rpc_service_resolve(r, t, ref, &svc) < 0)
        goto out;
    changed = svc.active != active;
    svc.active = active;
    if (changed) {
        rv = ctl_store_service_put(t, &svc);
        if (rv < 0) {
            ctl_rpc_store_fail(r, rv);
            goto out;
        }
    }
    if (ctl_rpc_reply_services(r, t, &svc, 1) < 0)
        goto out;
    /* Even when nothing changed, applying again repairs a worker or rules gone astray. */
    ctl_rpc_finish(r, &t, true);
    if (changed && !ctl_rpc_failed(r))
        fgx_info("service %s %s", svc.name, active ? "started" : "stopped");
out:
    ctl_txn_abort(t);
}

static void do_service_rm(struct ctl_rpc *r, const Fgx__Ctl__Request *q)
{
    const char *ref = ctl_rpc_ref(q->service_rm);
    struct ctl_service svc;
    struct ctl_txn *t = NULL;
    int rv;

    if (ctl_rpc_txn_begin(r, true, &t) < 0)
        return;
    if (ctl_rpc_service_resolve(r, t, ref, &svc) < 0)
        goto out;
    if (ctl_rpc_reply_services(r, t, &svc, 1) < 0)
        goto out;
    rv = ctl_store_service_del(t, svc.id);
    if (rv < 0) {
        ctl_rpc_store_fail(r, rv);
        goto out;
    }
    ctl_rpc_finish(r, &t, true);
    if (!ctl_rpc_failed(r))
        fgx_info("service %s (id %u) removed", svc.name, svc.id);
out:
    ctl_txn_abort(t);
}

static void do_service_rename(struct ctl_rpc *r, const Fgx__Ctl__Request *q)
{
    const Fgx__Ctl__ServiceRename *a = q->service_rename;
    struct ctl_service svc;
    struct ctl_txn *t = NULL;

    if (ctl_rpc_check_name(r, a->name) < 0 || ctl_rpc_txn_begin(r, true, &t) < 0)
        return;
    if (ctl_rpc_service_resolve(r, t, a->ref, &svc) < 0)
        goto out;
    snprintf(svc.name, sizeof(svc.name), "%s", a->name);
    if (ctl_rpc_check_unique(r, t, &svc) < 0)
        goto out;
    if (service_commit(r, &t, &svc, false) < 0)
        goto out;
out:
    ctl_txn_abort(t);
}

static void do_service_set(struct ctl_rpc *r, const Fgx__Ctl__Request *q)
{
    const Fgx__Ctl__ServiceSet *a = q->service_set;
    struct ctl_filter *fs = NULL;
    struct ctl_service svc;
    struct ctl_txn *t = NULL;
    size_t nfs = 0;
    int rv;

    if (ctl_rpc_txn_begin(r, true, &t) < 0)
        return;
    if (ctl_rpc_service_resolve(r, t, a->ref, &svc) < 0)
        goto out;
    if (a->has_port) {
        if (ctl_rpc_check_port(r, a->port) < 0)
            goto out;
        svc.port = (uint16_t)a->port;
    }
    if (a->ip && ctl_rpc_check_ip(r, a->ip, &svc.addr) < 0)
        goto out;
    if (a->has_layer && ctl_rpc_check_layer(r, a->layer, &svc.layer) < 0)
        goto out;
    if (a->has_fail_open)
        svc.fail_open = a->fail_open;
    if (a->has_midstream && ctl_rpc_check_midstream(r, a->midstream, &svc.midstream) < 0)
        goto out;
    if (ctl_rpc_check_capture(r, a->has_capture, a->capture, a->has_capture_conns, a->capture_conns,
                              a->has_capture_bytes, a->capture_bytes, &svc) < 0)
        goto out;
    if (a->has_proto) {
        uint8_t ipproto;

        if (ctl_rpc_check_proto(r, a->proto, &ipproto) < 0)
            goto out;
        if (ipproto != svc.ipproto) {
            /* Stream and block mode accept different patterns: every filter must still fit. */
            rv = ctl_store_filter_list(t, svc.id, &fs, &nfs);
            if (rv < 0) {
                ctl_rpc_store_fail(r, rv);
                goto out;
            }
            for (size_t i = 0; i < nfs; i++)
                if (ctl_rpc_check_regex(r, fs[i].regex, fs[i].nocase, ipproto, NULL) < 0)
                    goto out;
        }
        svc.ipproto = ipproto;
    }
    if (ctl_rpc_check_layer_proto(r, &svc) < 0 || ctl_rpc_check_unique(r, t, &svc) < 0)
        goto out;
    if (service_commit(r, &t, &svc, true) < 0)
        goto out;
    if (!ctl_rpc_failed(r))
        fgx_info("service %s changed", svc.name);
out:
    ctl_filters_free(fs, nfs);
    ctl_txn_abort(t);
}

static void service_start(struct ctl_rpc *r, const Fgx__Ctl__Request *q)
{
    do_service_active(r, ctl_rpc_ref(q->service_start), true);
}

static void service_stop(struct ctl_rpc *r, const Fgx__Ctl__Request *q)
{
    do_service_active(r, ctl_rpc_ref(q->service_stop), false);
}

const struct ctl_rpc_cmd ctl_rpc_service_cmds[] = {
    {FGX__CTL__REQUEST__REQ_SERVICE_ADD, do_service_add, CTL_RPC_CHANGE},
    {FGX__CTL__REQUEST__REQ_SERVICE_LIST, do_service_list, 0},
    {FGX__CTL__REQUEST__REQ_SERVICE_SHOW, do_service_show, 0},
    {FGX__CTL__REQUEST__REQ_SERVICE_START, service_start, CTL_RPC_CHANGE},
    {FGX__CTL__REQUEST__REQ_SERVICE_STOP, service_stop, CTL_RPC_CHANGE},
    {FGX__CTL__REQUEST__REQ_SERVICE_RM, do_service_rm, CTL_RPC_CHANGE},
    {FGX__CTL__REQUEST__REQ_SERVICE_RENAME, do_service_rename, CTL_RPC_CHANGE},
    {FGX__CTL__REQUEST__REQ_SERVICE_SET, do_service_set, CTL_RPC_CHANGE},
    {0, NULL, 0},
};
