/* controld control API stage: decodes an fgexctl Request, admits it, finds its handler in the
 * command families' tables (rpc_<family>.c) and encodes the Reply. What the handlers share is
 * here: validation of references and values, the reply's contents, and the commit that has
 * ctl_apply carry a change to the worker and the kernel. Every user error becomes a Code and a
 * one-line message; nothing is stored unless the whole request is valid. */
#include "controld/ctl_rpc.h"

#include "controld/ctl_rpc_cmd.h"
#include "controld/ctl_rpc_tls.h"
#include <ctype.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "control.pb-c.h"
#include "controld/ctl_auth.h"
#include "controld/ctl_compile.h"
#include "controld/ctl_config.h"
#include "controld/ctl_history.h"
#include "controld/ctl_loopwatch.h"
#include "controld/ctl_script_rt.h"
#include "controld/ctl_script_sup.h"
#include "fgx/log.h"
#include "fgx/ruleset.h"

void ctl_rpc_fail(struct ctl_rpc *r, Fgx__Ctl__Code code, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(r->err, sizeof(r->err), fmt, ap);
    va_end(ap);
    r->reply.code = code;
    r->reply.error = r->err;
    if (code != FGX__CTL__CODE__CODE_UNAVAILABLE) {
        /* What was about to be reported was never stored. */
        r->reply.n_services = 0;
        r->reply.n_filters = 0;
        r->reply.n_workers = 0;
        r->reply.n_service_stats = 0;
        r->reply.n_events = 0;
        r->reply.has_last_seq = 0;
    }
}

void ctl_rpc_store_fail(struct ctl_rpc *r, int err)
{
    ctl_rpc_fail(r, FGX__CTL__CODE__CODE_ERROR, "%s", ctl_store_strerror(err));
}

bool ctl_rpc_failed(const struct ctl_rpc *r)
{
    return r->reply.code != FGX__CTL__CODE__CODE_OK;
}

/* A TLS service's fields of a reply: what its certificate says, never the key. */
static int ctl_rpc_reply_tls(struct ctl_rpc *r, struct ctl_txn *t, const struct ctl_service *s,
                             size_t i, size_t n, Fgx__Ctl__Service *m)
{
    struct ctl_tls_pem pem;
    struct ctl_tls_info info;

    if (r->tls_subj == NULL && (r->tls_subj = calloc(n, sizeof(*r->tls_subj))) == NULL)
        return -ENOMEM;
    m->has_tls = m->tls = 1;
    m->has_upstream = 1;
    m->upstream = s->upstream_plain ? FGX__CTL__UPSTREAM__UPSTREAM_PLAIN
                                    : FGX__CTL__UPSTREAM__UPSTREAM_TLS;
    if (ctl_store_tls_get(t, s->id, &pem) < 0)
        return 0;
    if (ctl_rpc_tls_info(pem.cert, pem.cert_len, &info) == 0) {
        snprintf(r->tls_subj[i], sizeof(r->tls_subj[i]), "%s", info.subject);
        m->tls_subject = r->tls_subj[i];
        m->has_tls_not_after = 1;
        m->tls_not_after = info.not_after;
    }
    ctl_tls_pem_release(&pem);
    return 0;
}

static void rpc_release(struct ctl_rpc *r)
{
    free(r->svcs);
    free(r->ips);
    free(r->tls_subj);
    free(r->svc_msgs);
    free(r->svc_ptrs);
    ctl_filters_free(r->flts, r->nflts);
    free(r->flt_msgs);
    free(r->flt_ptrs);
    free(r->sst_msgs);
    free(r->sst_ptrs);
    free(r->ev_msgs);
    free(r->ev_ptrs);
    free(r->evs);
    ctl_config_export_release(&r->cfg_exp);
    free(r->imp_warn);
    free(r->imp_text);
    free(r->imp_ptrs);
    ctl_diff_release(&r->diff);
    ctl_import_opts_release(&r->imp);
    free(r->diff_msgs);
    free(r->diff_ptrs);
    ctl_rpc_history_release(r);
    ctl_rpc_logfil_free(r->logfil);
    ctl_rpc_fw_release(r);
    ctl_rpc_game_release(r);
    ctl_rpc_capture_release(r);
    ctl_script_reply_free(r->script);
    ctl_rpc_health_free(r->health);
    ctl_rpc_ifaces_free(r->ifaces);
    ctl_rpc_regex_free(r->regex);
    explicit_bzero(r->token, sizeof(r->token));
}

const char *ctl_rpc_proto_name(uint8_t ipproto)
{
    return ipproto == IPPROTO_UDP ? "udp" : "tcp";
}

int ctl_rpc_txn_begin(struct ctl_rpc *r, bool write, struct ctl_txn **t)
{
    int rv = ctl_txn_begin(r->ctx->store, write, t);

    if (rv < 0)
        ctl_rpc_store_fail(r, rv);
    return rv;
}

/* ---- references and validation ---- */

bool ctl_rpc_all_digits(const char *s)
{
    if (!s || !*s)
        return false;
    for (; *s; s++)
        if (!isdigit((unsigned char)*s))
            return false;
    return true;
}

int ctl_rpc_ref_id(const char *ref, uint32_t *id)
{
    unsigned long long v;

    if (!ctl_rpc_all_digits(ref) || strlen(ref) > 10)
        return -EINVAL;
    v = strtoull(ref, NULL, 10);
    if (v == 0 || v > UINT32_MAX)
        return -EINVAL;
    *id = (uint32_t)v;
    return 0;
}

int ctl_rpc_service_resolve(struct ctl_rpc *r, struct ctl_txn *t, const char *ref,
                            struct ctl_service *out)
{
    uint32_t id;
    int rv;

    if (!ref || !*ref) {
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID, "no service given");
        return -EINVAL;
    }
    if (ctl_rpc_all_digits(ref))
        rv = ctl_rpc_ref_id(ref, &id) < 0 ? -ENOENT : ctl_store_service_get(t, id, out);
    else
        rv = ctl_store_service_by_name(t, ref, out);
    if (rv == -ENOENT)
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_NOT_FOUND, "no such service: %s", ref);
    else if (rv < 0)
        ctl_rpc_store_fail(r, rv);
    return rv;
}

int ctl_rpc_filter_resolve(struct ctl_rpc *r, struct ctl_txn *t, const char *ref,
                           struct ctl_filter *out)
{
    uint32_t id;
    int rv;

    if (ctl_rpc_ref_id(ref, &id) < 0) {
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID, "a filter is named by its id, not \"%s\"",
                     ref ? ref : "");
        return -EINVAL;
    }
    rv = ctl_store_filter_get(t, id, out);
    if (rv == -ENOENT)
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_NOT_FOUND, "no such filter: %s", ref);
    else if (rv < 0)
        ctl_rpc_store_fail(r, rv);
    return rv;
}

/* The same rule as an imported configuration's (ctl_config.c): one place says what a name is. */
int ctl_rpc_check_name(struct ctl_rpc *r, const char *name)
{
    char err[256];
    int rv = ctl_config_name_check(name, err, sizeof(err));

    if (rv < 0)
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID, "%s", err);
    return rv;
}

int ctl_rpc_check_port(struct ctl_rpc *r, uint32_t port)
{
    if (port == 0 || port > 65535) {
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID, "invalid port %u: use 1..65535", port);
        return -EINVAL;
    }
    return 0;
}

int ctl_rpc_check_proto(struct ctl_rpc *r, Fgx__Ctl__Proto proto, uint8_t *ipproto)
{
    if (proto == FGX__CTL__PROTO__PROTO_TCP) {
        *ipproto = IPPROTO_TCP;
    } else if (proto == FGX__CTL__PROTO__PROTO_UDP) {
        *ipproto = IPPROTO_UDP;
    } else {
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID, "invalid protocol: use tcp or udp");
        return -EINVAL;
    }
    return 0;
}

int ctl_rpc_check_layer(struct ctl_rpc *r, Fgx__Ctl__Layer layer, enum ctl_layer *out)
{
    switch (layer) {
    case FGX__CTL__LAYER__LAYER_NFQUEUE:
        *out = CTL_LAYER_NFQUEUE;
        return 0;
    case FGX__CTL__LAYER__LAYER_PROXY:
        *out = CTL_LAYER_PROXY;
        return 0;
    case FGX__CTL__LAYER__LAYER_EXTERNAL:
        *out = CTL_LAYER_EXTERNAL;
        return 0;
    default:
        break;
    }
    ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID, "invalid layer: use nfqueue, proxy or external");
    return -EINVAL;
}

int ctl_rpc_check_midstream(struct ctl_rpc *r, Fgx__Ctl__Midstream m, uint8_t *out)
{
    if (m == FGX__CTL__MIDSTREAM__MIDSTREAM_RESET || m == FGX__CTL__MIDSTREAM__MIDSTREAM_SCAN) {
        *out = m == FGX__CTL__MIDSTREAM__MIDSTREAM_SCAN ? FGX_MIDSTREAM_SCAN : FGX_MIDSTREAM_RESET;
        return 0;
    }
    ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID, "invalid midstream policy: use reset or scan");
    return -EINVAL;
}

static Fgx__Ctl__Midstream midstream_msg(uint8_t m)
{
    return m == FGX_MIDSTREAM_SCAN ? FGX__CTL__MIDSTREAM__MIDSTREAM_SCAN
                                   : FGX__CTL__MIDSTREAM__MIDSTREAM_RESET;
}

int ctl_rpc_check_ip(struct ctl_rpc *r, const char *ip, struct fgx_cidr *out)
{
    if (fgx_cidr_parse(ip, out) < 0) {
        ctl_rpc_fail(
            r, FGX__CTL__CODE__CODE_INVALID,
            "invalid address \"%s\": use an IPv4 or IPv6 address or prefix (host bits zero)", ip);
        return -EINVAL;
    }
    return 0;
}

/* w: NULL, or where the warnings of an accepted regex go. */
int ctl_rpc_check_regex(struct ctl_rpc *r, const char *regex, bool nocase, uint8_t ipproto,
                        struct fgx_pattern_warnings *w)
{
    char err[768];
    int rv = ctl_config_regex_lint_cached(regex, nocase, ipproto, w, err, sizeof(err));

    if (rv < 0)
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID, "%s", err);
    return rv;
}

/* Names unique; (proto, port) unique among services. */
int ctl_rpc_check_unique(struct ctl_rpc *r, struct ctl_txn *t, const struct ctl_service *svc)
{
    struct ctl_service *all;
    size_t n, ia, ib;
    int rv = ctl_store_service_list(t, &all, &n);

    if (rv < 0) {
        ctl_rpc_store_fail(r, rv);
        return rv;
    }
    for (size_t i = 0; i < n; i++) {
        if (all[i].id == svc->id)
            continue;
        if (strcmp(all[i].name, svc->name) == 0) {
            ctl_rpc_fail(r, FGX__CTL__CODE__CODE_EXISTS, "a service named %s already exists",
                         svc->name);
            rv = -EEXIST;
            break;
        }
        if (ctl_service_overlap(svc, &all[i], &ia, &ib)) {
            char mine[FGX_SVCADDR_TEXT_MAX], theirs[FGX_SVCADDR_TEXT_MAX];

            (void)fgx_svcaddr_format(&svc->addrs[ia], mine, sizeof(mine));
            (void)fgx_svcaddr_format(&all[i].addrs[ib], theirs, sizeof(theirs));
            ctl_rpc_fail(r, FGX__CTL__CODE__CODE_EXISTS,
                         "%s %s overlaps %s of service %s: a packet could belong to both%s",
                         ctl_rpc_proto_name(svc->ipproto), mine, theirs, all[i].name,
                         svc->addrs[ia].ifname[0] || all[i].addrs[ib].ifname[0]
                             ? " (an interface takes its port on every address)"
                             : "");
            rv = -EEXIST;
            break;
        }
    }
    free(all);
    return rv;
}

/* ---- reply contents ---- */

/* The running total when controld keeps one, else the last one saved. */
int ctl_rpc_blocked_of(struct ctl_rpc *r, struct ctl_txn *t, uint32_t filter_id, uint64_t *out)
{
    if (r->ctx->stats) {
        *out = ctl_stats_blocked(r->ctx->stats, filter_id);
        return 0;
    }
    return ctl_store_blocked_get(t, filter_id, out);
}

/* Liveness, the same for every kind (issue 24). */
static void worker_fill_liveness(Fgx__Ctl__Worker *w, int64_t hb_age_ms, bool adopted,
                                 const char *why)
{
    if (hb_age_ms >= 0) {
        w->has_heartbeat_age_ms = 1;
        w->heartbeat_age_ms = (uint64_t)hb_age_ms;
    }
    w->has_adopted = adopted;
    w->adopted = adopted;
    if (why && why[0])
        w->replaced_why = (char *)why;
}

/* What the supervisor knows of a worker, whatever its kind. */
static void worker_fill(Fgx__Ctl__Worker *w, const char *kind, const struct ctl_sup_info *info)
{
    fgx__ctl__worker__init(w);
    w->kind = (char *)kind;
    w->pid = (int32_t)info->pid;
    w->state = (char *)info->state;
    w->has_generation = 1;
    w->generation = info->generation;
    w->has_restarts = 1;
    w->restarts = info->restarts;
    if (info->started) {
        w->has_started = 1;
        w->started = info->started;
    }
    worker_fill_liveness(w, info->hb_age_ms, info->adopted, info->replaced_why);
}

/* The proxy worker as supervised now, as r->workers[at], with its proxied connections open
 * (flows), memory and own failures from its last STATS. Returns 1, or 0 without one. The
 * NFQUEUE counters (queue_drops, truncated, verdict_errors, malformed, evasion) mean nothing for
 * a proxy and stay absent rather than 0. */
static size_t reply_px_worker(struct ctl_rpc *r, size_t at)
{
    const struct ctl_worker_counters *c = r->ctx->stats ? ctl_stats_px_worker(r->ctx->stats) : NULL;
    Fgx__Ctl__Worker *w = &r->px_worker;
    struct ctl_sup_info info;

    if (!r->ctx->px_sup)
        return 0;
    ctl_sup_info(r->ctx->px_sup, &info);
    worker_fill(w, "proxy", &info);
    if (c && c->valid && c->instance == info.instance && info.pid > 0) {
        w->has_flows = w->has_rss_bytes = 1;
        w->has_conns_refused = w->has_unclassified = 1;
        w->has_connect_failed = w->has_scan_errors = 1;
        w->has_src_refused = w->has_evicted = w->has_silent_closed = 1;
        w->has_midstream_reset = w->has_midstream_rescan = 1;
        w->flows = c->flows;
        w->rss_bytes = c->rss_bytes;
        w->conns_refused = c->conns_refused;
        w->unclassified = c->unclassified;
        w->connect_failed = c->connect_failed;
        w->scan_errors = c->scan_errors;
        w->src_refused = c->src_refused;
        w->evicted = c->evicted;
        w->silent_closed = c->silent_closed;
        w->midstream_reset = c->midstream_reset;
        w->midstream_rescan = c->midstream_rescan;
    }
    r->workers[at] = w;
    return 1;
}

/* The workers as supervised now: the nfq worker, with its counters from its last STATS, then
 * the proxy worker. Returns how many (0 when controld runs without workers). */
/* The script worker (ctl_script_sup.c) as r->workers[at]: pid, state, restarts. It has no
 * generation (it takes each file as it is set, not the rulesets) and no counters of its own
 * here (the scripts' are in `script list`). Returns 1, or 0 when controld started none (as
 * in the unit tests). */
static size_t reply_sw_worker(struct ctl_rpc *r, size_t at)
{
    Fgx__Ctl__Worker *w = &r->sw_worker;
    struct ctl_script_sup_info info;

    if (!ctl_script_sup_url()[0])
        return 0;
    ctl_script_sup_info(&info);
    fgx__ctl__worker__init(w);
    w->kind = "script";
    w->pid = (int32_t)(info.pid > 0 ? info.pid : 0);
    w->state = (char *)info.state;
    w->has_restarts = 1;
    w->restarts = info.restarts;
    if (info.pid > 0) {
        w->has_started = 1;
        w->started = info.started;
    }
    worker_fill_liveness(w, info.hb_age_ms, info.adopted, info.replaced_why);
    r->workers[at] = w;
    return 1;
}

size_t ctl_rpc_reply_workers(struct ctl_rpc *r)
{
    const struct ctl_worker_counters *c = r->ctx->stats ? ctl_stats_worker(r->ctx->stats) : NULL;
    Fgx__Ctl__Worker *w = &r->worker;
    struct ctl_sup_info info;
    size_t n;

    if (!r->ctx->sup) {
        n = reply_px_worker(r, 0);
        return n + reply_sw_worker(r, n);
    }
    ctl_sup_info(r->ctx->sup, &info);
    worker_fill(w, "nfq", &info);
    if (c && c->valid && c->instance == info.instance && info.pid > 0) {
        w->has_queue_drops = w->has_flows = w->has_rss_bytes = 1;
        w->has_truncated = w->has_verdict_errors = w->has_malformed = w->has_evasion = 1;
        w->queue_drops = c->queue_drops;
        w->flows = c->flows;
        w->rss_bytes = c->rss_bytes;
        w->truncated = c->truncated;
        w->verdict_errors = c->verdict_errors;
        w->malformed = c->malformed;
        w->evasion = c->evasion;
        w->has_midstream_resets = w->has_flows_evicted = 1;
        w->midstream_resets = c->midstream_resets;
        w->flows_evicted = c->flows_evicted;
        w->has_script_refused = w->has_script_errors = w->has_script_timeouts = 1;
        w->has_script_blocked = w->has_script_final = w->has_script_held = 1;
        w->has_script_flows = w->has_script_reclaimed = 1;
        w->script_refused = c->script_refused;
        w->script_errors = c->script_errors;
        w->script_timeouts = c->script_timeouts;
        w->script_blocked = c->script_blocked;
        w->script_final = c->script_final;
        w->script_held = c->script_held;
        w->script_flows = c->script_flows;
        w->script_reclaimed = c->script_reclaimed;
    }
    r->workers[0] = w;
    n = 1 + reply_px_worker(r, 1);
    return n + reply_sw_worker(r, n);
}

static Fgx__Ctl__Dir dir_to_msg(enum fgx_dir d)
{
    return d == FGX_DIR_C2S   ? FGX__CTL__DIR__DIR_C2S
           : d == FGX_DIR_S2C ? FGX__CTL__DIR__DIR_S2C
                              : FGX__CTL__DIR__DIR_BOTH;
}

/* Copies svcs; fills the computed fields (filter count, blocked sum) from t. */
int ctl_rpc_reply_services(struct ctl_rpc *r, struct ctl_txn *t, const struct ctl_service *svcs,
                           size_t n)
{
    struct ctl_filter *fs = NULL;
    size_t nfs = 0;
    int rv;

    rv = ctl_store_filter_list(t, 0, &fs, &nfs);
    if (rv < 0)
        goto err;
    rv = -ENOMEM;
    r->svcs = calloc(n ? n : 1, sizeof(*r->svcs));
    r->ips = calloc(n ? n : 1, sizeof(*r->ips));
    r->svc_msgs = calloc(n ? n : 1, sizeof(*r->svc_msgs));
    r->svc_ptrs = calloc(n ? n : 1, sizeof(*r->svc_ptrs));
    if (!r->svcs || !r->ips || !r->svc_msgs || !r->svc_ptrs)
        goto err;
    if (n)
        memcpy(r->svcs, svcs, n * sizeof(*svcs));
    for (size_t i = 0; i < n; i++) {
        const struct ctl_service *s = &r->svcs[i];
        Fgx__Ctl__Service *m = &r->svc_msgs[i];
        uint64_t blocked = 0;
        uint32_t count = 0;

        for (size_t j = 0; j < nfs; j++) {
            uint64_t b;
            if (fs[j].service_id != s->id)
                continue;
            count++;
            rv = ctl_rpc_blocked_of(r, t, fs[j].id, &b);
            if (rv < 0)
                goto err;
            blocked += b;
        }
        {
            uint64_t removed;

            rv = ctl_store_retired_get(t, s->id, &removed);
            if (rv < 0)
                goto err;
            blocked += removed; /* a total never goes down when a filter goes */
            blocked += ctl_script_rt_blocked(s->id); /* and a script's blocks are blocks */
            fgx__ctl__service__init(m);
            if (ctl_svcmsg_fill(&r->ips[i], s, m) < 0)
                goto err;
            m->has_blocked_removed = 1;
            m->blocked_removed = removed;
        }
        m->id = s->id;
        m->name = r->svcs[i].name;
        m->proto =
            s->ipproto == IPPROTO_UDP ? FGX__CTL__PROTO__PROTO_UDP : FGX__CTL__PROTO__PROTO_TCP;
        m->active = s->active;
        m->fail_open = s->fail_open;
        m->has_midstream = 1;
        m->midstream = midstream_msg(s->midstream);
        m->has_filters = 1;
        m->filters = count;
        m->has_blocked = 1;
        m->blocked = blocked;
        m->has_created = 1;
        m->created = s->created;
        if (s->tls && ctl_rpc_reply_tls(r, t, s, i, n, m) < 0) {
            rv = -ENOMEM;
            goto err;
        }
        m->has_capture = 1;
        m->capture = !s->capture_off;
        m->has_capture_conns = s->capture_conns != 0;
        m->capture_conns = s->capture_conns;
        m->has_capture_bytes = s->capture_bytes != 0;
        m->capture_bytes = s->capture_bytes;
        /* its own limits (set by ctl_svcmsg_fill() when it has them) and their hits */
        if (r->ctx->stats) {
            struct ctl_svc_counters lc;

            ctl_stats_service(r->ctx->stats, s->id, &lc);
            m->has_limit_hits = 1;
            m->limit_hits = lc.limit_hits;
            m->has_limit_first = m->has_limit_last = lc.limit_hits > 0;
            m->limit_first = lc.limit_first;
            m->limit_last = lc.limit_last;
        }
        r->svc_ptrs[i] = m;
    }
    r->nsvcs = n;
    r->reply.n_services = n;
    r->reply.services = r->svc_ptrs;
    ctl_filters_free(fs, nfs);
    return 0;
err:
    ctl_filters_free(fs, nfs);
    ctl_rpc_store_fail(r, rv);
    return rv;
}

/* Takes ownership of fs (an array from ctl_store_filter_list() or one malloc'd filter). */
int ctl_rpc_reply_filters(struct ctl_rpc *r, struct ctl_txn *t, struct ctl_filter *fs, size_t n)
{
    int rv = -ENOMEM;

    r->flts = fs;
    r->nflts = n;
    r->flt_msgs = calloc(n ? n : 1, sizeof(*r->flt_msgs));
    r->flt_ptrs = calloc(n ? n : 1, sizeof(*r->flt_ptrs));
    if (!r->flt_msgs || !r->flt_ptrs)
        goto err;
    for (size_t i = 0; i < n; i++) {
        Fgx__Ctl__Filter *m = &r->flt_msgs[i];
        uint64_t blocked;

        rv = ctl_rpc_blocked_of(r, t, fs[i].id, &blocked);
        if (rv < 0)
            goto err;
        fgx__ctl__filter__init(m);
        m->id = fs[i].id;
        m->service_id = fs[i].service_id;
        m->regex = fs[i].regex;
        m->dir = dir_to_msg(fs[i].dir);
        m->nocase = fs[i].nocase;
        m->active = fs[i].active;
        m->has_blocked = 1;
        m->blocked = blocked;
        m->has_created = 1;
        m->created = fs[i].created;
        ctl_config_filter_extra_to_msg(&fs[i], m);
        /* Also for a block filter: one that was log before keeps what it matched then. */
        m->has_matched = 1;
        if (r->ctx->stats) {
            m->matched = ctl_stats_matched(r->ctx->stats, fs[i].id);
        } else {
            rv = ctl_store_matched_get(t, fs[i].id, &m->matched);
            if (rv < 0)
                goto err;
        }
        r->flt_ptrs[i] = m;
    }
    r->reply.n_filters = n;
    r->reply.filters = r->flt_ptrs;
    return 0;
err:
    ctl_rpc_store_fail(r, rv);
    return rv;
}

int ctl_rpc_reply_filter(struct ctl_rpc *r, struct ctl_txn *t, struct ctl_filter *f)
{
    struct ctl_filter *one = malloc(sizeof(*one));

    if (!one) {
        ctl_filter_release(f);
        ctl_rpc_store_fail(r, -ENOMEM);
        return -ENOMEM;
    }
    *one = *f;
    f->regex = NULL;
    f->label = NULL;
    return ctl_rpc_reply_filters(r, t, one, 1);
}

/* ---- commit and apply ---- */

/* Validate the whole new state by building its ruleset in the request's transaction, commit,
 * then carry it to the data path. *t is consumed. */
void ctl_rpc_finish(struct ctl_rpc *r, struct ctl_txn **t, bool rebuild)
{
    struct ctl_ruleset rs;
    char err[768];
    int rv, worker_err = 0;

    if (rebuild) {
        rv = ctl_ruleset_build(*t, &rs, err, sizeof(err));
        if (rv < 0) {
            ctl_rpc_fail(r,
                         rv == -EINVAL ? FGX__CTL__CODE__CODE_INVALID : FGX__CTL__CODE__CODE_ERROR,
                         "%s", err);
            return;
        }
    }
    /* A probe that found work for the compiler: the caller aborts *t, nothing is stored, and
     * the request runs again once the compile session has every result. */
    if (ctl_compile_collecting() && ctl_compile_pending() > 0) {
        r->deferred = true;
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_ERROR, "compiling");
        if (rebuild)
            ctl_ruleset_release(&rs);
        return;
    }
    /* Recorded in the change's own transaction: a change is in the history if and only if it
     * was stored. */
    rv = ctl_rpc_history_commit(r, *t);
    if (rv < 0) {
        ctl_rpc_store_fail(r, rv);
        goto out;
    }
    rv = ctl_txn_commit(*t);
    *t = NULL;
    if (rv < 0) {
        ctl_rpc_store_fail(r, rv);
        goto out;
    }
    ctl_rpc_import_counters(r);
    if (!rebuild)
        return;
    rv = ctl_apply(r->ctx, &rs, &worker_err);
    if (rv < 0)
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_ERROR,
                     "stored, but the nftables rules could not be installed: %s", strerror(-rv));
    else if (worker_err < 0)
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_UNAVAILABLE,
                     "stored, but the nfq worker did not confirm");
out:
    if (rebuild)
        ctl_ruleset_release(&rs);
}

/* ---- access and dispatch ---- */

uint64_t ctl_rpc_mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

void ctl_rpc_reply_auth_state(struct ctl_rpc *r)
{
    if (!r->ctx->auth)
        return;
    r->reply.has_auth_enabled = 1;
    r->reply.auth_enabled = ctl_auth_enabled(r->ctx->auth);
}

static const struct ctl_rpc_cmd *rpc_cmd_find(Fgx__Ctl__Request__ReqCase req);

/* true when the request may go on; otherwise the reply says why. Commands marked CTL_RPC_OPEN
 * (login, the certificate) need no session; without ctx->auth (unit tests) everything is
 * trusted. */
static bool rpc_admit(struct ctl_rpc *r, const Fgx__Ctl__Request *q)
{
    const struct ctl_rpc_cmd *c = rpc_cmd_find(q->req_case);
    struct ctl_auth *a = r->ctx->auth;

    if (!a || (c && (c->flags & CTL_RPC_OPEN)) || !ctl_auth_required(a, r->peer))
        return true;
    if (q->token && ctl_auth_session_check(a, q->token, ctl_rpc_mono_ms()) == 0)
        return true;
    ctl_rpc_fail(r, FGX__CTL__CODE__CODE_AUTH, "%s",
                 q->token && *q->token
                     ? "the session has expired or was logged out: run fgexctl login"
                     : "login required: run fgexctl login");
    return false;
}

Fgx__Ctl__Code ctl_rpc_config_code(int rv)
{
    return rv == -EINVAL   ? FGX__CTL__CODE__CODE_INVALID
           : rv == -EEXIST ? FGX__CTL__CODE__CODE_EXISTS
           : rv == -ENOENT ? FGX__CTL__CODE__CODE_NOT_FOUND
                           : FGX__CTL__CODE__CODE_ERROR;
}

/* Every command controld answers, by family (rpc_<family>.c): the one list the dispatcher walks.
 * A new command goes into its family's table; a new family adds its table here. */
static const struct ctl_rpc_cmd *const rpc_families[] = {
    ctl_rpc_admin_cmds,  ctl_rpc_service_cmds, ctl_rpc_filter_cmds,
    ctl_rpc_worker_cmds, ctl_rpc_stats_cmds,   ctl_rpc_history_cmds, ctl_rpc_fw_cmds,
    ctl_rpc_capture_cmds,
    ctl_rpc_script_cmds,
    ctl_rpc_health_cmds,
    ctl_rpc_game_cmds,
    ctl_rpc_regex_cmds,
};

static const struct ctl_rpc_cmd *rpc_cmd_find(Fgx__Ctl__Request__ReqCase req)
{
    for (size_t f = 0; f < sizeof(rpc_families) / sizeof(rpc_families[0]); f++)
        for (const struct ctl_rpc_cmd *c = rpc_families[f]; c->handle; c++)
            if (c->req == req)
                return c;
    return NULL;
}

static void rpc_dispatch(struct ctl_rpc *r, const Fgx__Ctl__Request *q)
{
    const struct ctl_rpc_cmd *c = rpc_cmd_find(q->req_case);

    r->req = q;
    if (c && (c->flags & CTL_RPC_CHANGE))
        ctl_rpc_history_begin(r, q);
    if (c)
        c->handle(r, q);
    else
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID,
                     "unknown request (fgexctl newer than controld?)");
}

int ctl_rpc_handle(struct ctl_ctx *ctx, const void *req, size_t len, void **reply, size_t *replylen)
{
    static const struct fgx_peer local = {.family = 0};

    return ctl_rpc_handle_from(ctx, &local, req, len, reply, replylen);
}

/* Requests that change services or filters: what may need the compiler. */
static bool rpc_is_change(const Fgx__Ctl__Request *q)
{
    const struct ctl_rpc_cmd *c = rpc_cmd_find(q->req_case);

    return c && (c->flags & CTL_RPC_CHANGE);
}

static int rpc_pack(struct ctl_rpc *r, void **reply, size_t *replylen)
{
    size_t n = fgx__ctl__reply__get_packed_size(&r->reply);
    void *buf = malloc(n ? n : 1);

    if (!buf)
        return -ENOMEM;
    fgx__ctl__reply__pack(&r->reply, buf);
    *reply = buf;
    *replylen = n;
    return 0;
}

int ctl_rpc_error_reply(Fgx__Ctl__Code code, const char *msg, void **reply, size_t *replylen)
{
    struct ctl_rpc r = {0};
    int rv;

    fgx__ctl__reply__init(&r.reply);
    ctl_rpc_fail(&r, code, "%s", msg);
    rv = rpc_pack(&r, reply, replylen);
    rpc_release(&r);
    return rv;
}

int ctl_rpc_blocked_reply(const char *msg, unsigned secs, void **reply, size_t *replylen)
{
    struct ctl_rpc r = {0};
    int rv;

    fgx__ctl__reply__init(&r.reply);
    ctl_rpc_fail(&r, FGX__CTL__CODE__CODE_ERROR, "%s", msg);
    snprintf(r.busy_what, sizeof(r.busy_what), "its control loop is blocked");
    r.reply.has_busy = 1;
    r.reply.busy = 1;
    r.reply.busy_what = r.busy_what;
    r.reply.has_busy_secs = 1;
    r.reply.busy_secs = secs;
    r.reply.has_busy_blocked = 1;
    r.reply.busy_blocked = 1;
    rv = rpc_pack(&r, reply, replylen);
    rpc_release(&r);
    return rv;
}

/* Another change compiles: refused, with what it is and how long it has run. */
static void rpc_busy_fail(struct ctl_rpc *r)
{
    char what[sizeof(r->busy_what)];
    unsigned secs = 0;

    if (!ctl_compile_busy(what, sizeof(what), &secs))
        snprintf(what, sizeof(what), "another change");
    snprintf(r->busy_what, sizeof(r->busy_what), "%s", what);
    ctl_rpc_fail(r, FGX__CTL__CODE__CODE_ERROR,
                 "busy: controld is compiling another change (%s, for %u s so far); nothing was "
                 "changed, try again when it is done",
                 what, secs);
    r->reply.has_busy = 1;
    r->reply.busy = 1;
    r->reply.busy_what = r->busy_what;
    r->reply.has_busy_secs = 1;
    r->reply.busy_secs = secs;
}

int ctl_rpc_handle_try(struct ctl_ctx *ctx, const struct fgx_peer *peer, const void *req,
                       size_t len, bool busy, void **reply, size_t *replylen, bool *deferred)
{
    struct ctl_rpc r = {.ctx = ctx, .peer = peer};
    Fgx__Ctl__Request *q;
    int rv;

    *deferred = false;
    *reply = NULL;
    *replylen = 0;
    fgx__ctl__reply__init(&r.reply);
    q = fgx__ctl__request__unpack(NULL, len, req);
    if (q) /* named if the loop blocks in it (ctl_loopwatch.h) */
        ctl_loopwatch_request(ctl_history_req_name((int)q->req_case));
    if (!q) {
        ctl_rpc_fail(&r, FGX__CTL__CODE__CODE_INVALID, "undecodable request");
    } else if (rpc_admit(&r, q)) {
        if (!rpc_is_change(q)) {
            rpc_dispatch(&r, q);
        } else if (busy) {
            /* One change compiles at a time. Queueing here would hide how long the wait is:
             * the refusal says what compiles and for how long, and fgexctl (and the page)
             * send the change again while it lasts (--wait). */
            rpc_busy_fail(&r);
        } else {
            ctl_compile_collect(true);
            rpc_dispatch(&r, q);
            ctl_compile_collect(false);
            if (r.deferred) {
                char what[256];

                ctl_history_describe(q, what, sizeof(what));
                ctl_compile_what_set(what);
                *deferred = true;
                rpc_release(&r);
                fgx__ctl__request__free_unpacked(q, NULL);
                return 0;
            }
            /* Done (or refused): what the session holds was for this request only. */
            ctl_compile_reset();
        }
    }
    if (q && q->req_case == FGX__CTL__REQUEST__REQ_STATUS)
        ctl_rpc_reply_auth_state(&r);
    rv = rpc_pack(&r, reply, replylen);
    rpc_release(&r);
    if (q)
        fgx__ctl__request__free_unpacked(q, NULL);
    return rv;
}

int ctl_rpc_handle_from(struct ctl_ctx *ctx, const struct fgx_peer *peer, const void *req,
                        size_t len, void **reply, size_t *replylen)
{
    struct ctl_rpc r = {.ctx = ctx, .peer = peer};
    Fgx__Ctl__Request *q;
    size_t n;
    void *buf;

    fgx__ctl__reply__init(&r.reply);
    q = fgx__ctl__request__unpack(NULL, len, req);
    if (!q)
        ctl_rpc_fail(&r, FGX__CTL__CODE__CODE_INVALID, "undecodable request");
    else if (rpc_admit(&r, q))
        rpc_dispatch(&r, q);
    if (q && q->req_case == FGX__CTL__REQUEST__REQ_STATUS)
        ctl_rpc_reply_auth_state(&r);
    n = fgx__ctl__reply__get_packed_size(&r.reply);
    buf = malloc(n ? n : 1);
    if (buf)
        fgx__ctl__reply__pack(&r.reply, buf);
    rpc_release(&r);
    if (q)
        fgx__ctl__request__free_unpacked(q, NULL);
    if (!buf)
        return -ENOMEM;
    *reply = buf;
    *replylen = n;
    return 0;
}
