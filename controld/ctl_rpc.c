/* controld control API stage: decodes an fgexctl Request, validates it, makes its change in one
 * store transaction, has ctl_apply carry it to the worker and the kernel, and encodes the Reply.
 * Every user error becomes a Code and a one-line message; nothing is stored unless the whole
 * request is valid. */
#include "controld/ctl_rpc.h"

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
#include "fgx/log.h"
#include "fgx/ruleset.h"

#define RPC_STATS_TIMEOUT_MS 300

/* One request's reply and everything it points into, freed together in rpc_release(). */
struct rpc {
    struct ctl_ctx *ctx;
    Fgx__Ctl__Reply reply;
    char err[1024];
    struct ctl_service *svcs;
    char (*ips)[64];
    Fgx__Ctl__Service *svc_msgs;
    Fgx__Ctl__Service **svc_ptrs;
    size_t nsvcs;
    struct ctl_filter *flts;
    Fgx__Ctl__Filter *flt_msgs;
    Fgx__Ctl__Filter **flt_ptrs;
    size_t nflts;
    Fgx__Ctl__Status status;
    Fgx__Ctl__Worker worker, px_worker;
    Fgx__Ctl__Worker *workers[2];
    Fgx__Ctl__ServiceStats *sst_msgs;
    Fgx__Ctl__ServiceStats **sst_ptrs;
    Fgx__Ctl__Event *ev_msgs;
    Fgx__Ctl__Event **ev_ptrs;
    const struct ctl_event **evs;
    const struct fgx_peer *peer;        /* who sent the request */
    char token[CTL_AUTH_TOKEN_LEN + 1]; /* login: the new session's token */
    struct ctl_config_export cfg_exp;   /* config_export */
    bool deferred; /* a probe that needs the compile session: nothing stored, no reply */
    /* filter add: the regex's warnings; filter import: each line's, as "line N: ..." */
    struct fgx_pattern_warnings add_warn;
    char *add_warn_ptrs[FGX_PATTERN_WARN_MAX];
    struct ctl_config_warning *imp_warn; /* ascending filter ids */
    size_t nimp_warn;
    char (*imp_text)[FGX_PATTERN_WARN_LEN + 16];
    char **imp_ptrs;
};

static void rpc_fail(struct rpc *r, Fgx__Ctl__Code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void rpc_fail(struct rpc *r, Fgx__Ctl__Code code, const char *fmt, ...)
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

static void rpc_store_fail(struct rpc *r, int err)
{
    rpc_fail(r, FGX__CTL__CODE__CODE_ERROR, "%s", ctl_store_strerror(err));
}

static bool rpc_failed(const struct rpc *r)
{
    return r->reply.code != FGX__CTL__CODE__CODE_OK;
}

static void rpc_release(struct rpc *r)
{
    free(r->svcs);
    free(r->ips);
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
    explicit_bzero(r->token, sizeof(r->token));
}

static const char *proto_name(uint8_t ipproto)
{
    return ipproto == IPPROTO_UDP ? "udp" : "tcp";
}

static int txn_begin(struct rpc *r, bool write, struct ctl_txn **t)
{
    int rv = ctl_txn_begin(r->ctx->store, write, t);

    if (rv < 0)
        rpc_store_fail(r, rv);
    return rv;
}

/* ---- references and validation ---- */

static bool all_digits(const char *s)
{
    if (!s || !*s)
        return false;
    for (; *s; s++)
        if (!isdigit((unsigned char)*s))
            return false;
    return true;
}

static int ref_id(const char *ref, uint32_t *id)
{
    unsigned long long v;

    if (!all_digits(ref) || strlen(ref) > 10)
        return -EINVAL;
    v = strtoull(ref, NULL, 10);
    if (v == 0 || v > UINT32_MAX)
        return -EINVAL;
    *id = (uint32_t)v;
    return 0;
}

static int service_resolve(struct rpc *r, struct ctl_txn *t, const char *ref,
                           struct ctl_service *out)
{
    uint32_t id;
    int rv;

    if (!ref || !*ref) {
        rpc_fail(r, FGX__CTL__CODE__CODE_INVALID, "no service given");
        return -EINVAL;
    }
    if (all_digits(ref))
        rv = ref_id(ref, &id) < 0 ? -ENOENT : ctl_store_service_get(t, id, out);
    else
        rv = ctl_store_service_by_name(t, ref, out);
    if (rv == -ENOENT)
        rpc_fail(r, FGX__CTL__CODE__CODE_NOT_FOUND, "no such service: %s", ref);
    else if (rv < 0)
        rpc_store_fail(r, rv);
    return rv;
}

static int filter_resolve(struct rpc *r, struct ctl_txn *t, const char *ref, struct ctl_filter *out)
{
    uint32_t id;
    int rv;

    if (ref_id(ref, &id) < 0) {
        rpc_fail(r, FGX__CTL__CODE__CODE_INVALID, "a filter is named by its id, not \"%s\"",
                 ref ? ref : "");
        return -EINVAL;
    }
    rv = ctl_store_filter_get(t, id, out);
    if (rv == -ENOENT)
        rpc_fail(r, FGX__CTL__CODE__CODE_NOT_FOUND, "no such filter: %s", ref);
    else if (rv < 0)
        rpc_store_fail(r, rv);
    return rv;
}

/* The same rule as an imported configuration's (ctl_config.c): one place says what a name is. */
static int check_name(struct rpc *r, const char *name)
{
    char err[256];
    int rv = ctl_config_name_check(name, err, sizeof(err));

    if (rv < 0)
        rpc_fail(r, FGX__CTL__CODE__CODE_INVALID, "%s", err);
    return rv;
}

static int check_port(struct rpc *r, uint32_t port)
{
    if (port == 0 || port > 65535) {
        rpc_fail(r, FGX__CTL__CODE__CODE_INVALID, "invalid port %u: use 1..65535", port);
        return -EINVAL;
    }
    return 0;
}

static int check_proto(struct rpc *r, Fgx__Ctl__Proto proto, uint8_t *ipproto)
{
    if (proto == FGX__CTL__PROTO__PROTO_TCP) {
        *ipproto = IPPROTO_TCP;
    } else if (proto == FGX__CTL__PROTO__PROTO_UDP) {
        *ipproto = IPPROTO_UDP;
    } else {
        rpc_fail(r, FGX__CTL__CODE__CODE_INVALID, "invalid protocol: use tcp or udp");
        return -EINVAL;
    }
    return 0;
}

static int check_layer(struct rpc *r, Fgx__Ctl__Layer layer, enum ctl_layer *out)
{
    if (layer == FGX__CTL__LAYER__LAYER_NFQUEUE || layer == FGX__CTL__LAYER__LAYER_PROXY) {
        *out = layer == FGX__CTL__LAYER__LAYER_PROXY ? CTL_LAYER_PROXY : CTL_LAYER_NFQUEUE;
        return 0;
    }
    rpc_fail(r, FGX__CTL__CODE__CODE_INVALID, "invalid layer: use nfqueue or proxy");
    return -EINVAL;
}

static int check_midstream(struct rpc *r, Fgx__Ctl__Midstream m, uint8_t *out)
{
    if (m == FGX__CTL__MIDSTREAM__MIDSTREAM_RESET || m == FGX__CTL__MIDSTREAM__MIDSTREAM_SCAN) {
        *out = m == FGX__CTL__MIDSTREAM__MIDSTREAM_SCAN ? FGX_MIDSTREAM_SCAN : FGX_MIDSTREAM_RESET;
        return 0;
    }
    rpc_fail(r, FGX__CTL__CODE__CODE_INVALID, "invalid midstream policy: use reset or scan");
    return -EINVAL;
}

static Fgx__Ctl__Midstream midstream_msg(uint8_t m)
{
    return m == FGX_MIDSTREAM_SCAN ? FGX__CTL__MIDSTREAM__MIDSTREAM_SCAN
                                   : FGX__CTL__MIDSTREAM__MIDSTREAM_RESET;
}

/* The proxy is a TCP proxy: a UDP service stays on the nfqueue layer. */
static int check_layer_proto(struct rpc *r, const struct ctl_service *svc)
{
    if (svc->layer != CTL_LAYER_PROXY || svc->ipproto == IPPROTO_TCP)
        return 0;
    rpc_fail(r, FGX__CTL__CODE__CODE_INVALID,
             "service %s: the proxy layer carries TCP only; a UDP service uses --layer nfqueue",
             svc->name);
    return -EINVAL;
}

static int check_ip(struct rpc *r, const char *ip, struct fgx_cidr *out)
{
    if (fgx_cidr_parse(ip, out) < 0) {
        rpc_fail(r, FGX__CTL__CODE__CODE_INVALID,
                 "invalid address \"%s\": use an IPv4 or IPv6 address or prefix (host bits zero)",
                 ip);
        return -EINVAL;
    }
    return 0;
}

/* w: NULL, or where the warnings of an accepted regex go. */
static int check_regex(struct rpc *r, const char *regex, bool nocase, uint8_t ipproto,
                       struct fgx_pattern_warnings *w)
{
    char err[768];
    int rv = ctl_config_regex_lint_cached(regex, nocase, ipproto, w, err, sizeof(err));

    if (rv < 0)
        rpc_fail(r, FGX__CTL__CODE__CODE_INVALID, "%s", err);
    return rv;
}

/* Names unique; (proto, port) unique among services. */
static int check_unique(struct rpc *r, struct ctl_txn *t, const struct ctl_service *svc)
{
    struct ctl_service *all;
    size_t n;
    int rv = ctl_store_service_list(t, &all, &n);

    if (rv < 0) {
        rpc_store_fail(r, rv);
        return rv;
    }
    for (size_t i = 0; i < n; i++) {
        if (all[i].id == svc->id)
            continue;
        if (strcmp(all[i].name, svc->name) == 0) {
            rpc_fail(r, FGX__CTL__CODE__CODE_EXISTS, "a service named %s already exists",
                     svc->name);
            rv = -EEXIST;
            break;
        }
        if (all[i].ipproto == svc->ipproto && all[i].port == svc->port) {
            rpc_fail(r, FGX__CTL__CODE__CODE_EXISTS, "%s port %u is already used by service %s",
                     proto_name(svc->ipproto), svc->port, all[i].name);
            rv = -EEXIST;
            break;
        }
    }
    free(all);
    return rv;
}

/* ---- reply contents ---- */

/* The running total when controld keeps one, else the last one saved. */
static int blocked_of(struct rpc *r, struct ctl_txn *t, uint32_t filter_id, uint64_t *out)
{
    if (r->ctx->stats) {
        *out = ctl_stats_blocked(r->ctx->stats, filter_id);
        return 0;
    }
    return ctl_store_blocked_get(t, filter_id, out);
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
}

/* The proxy worker as supervised now, as r->workers[at], with its proxied connections open
 * (flows), memory and own failures from its last STATS. Returns 1, or 0 without one. The
 * NFQUEUE counters (queue_drops, truncated, verdict_errors, malformed, evasion) mean nothing for
 * a proxy and stay absent rather than 0. */
static size_t reply_px_worker(struct rpc *r, size_t at)
{
    const struct ctl_worker_counters *c =
        r->ctx->stats ? ctl_stats_px_worker(r->ctx->stats) : NULL;
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
static size_t reply_worker(struct rpc *r)
{
    const struct ctl_worker_counters *c = r->ctx->stats ? ctl_stats_worker(r->ctx->stats) : NULL;
    Fgx__Ctl__Worker *w = &r->worker;
    struct ctl_sup_info info;

    if (!r->ctx->sup)
        return reply_px_worker(r, 0);
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
    }
    r->workers[0] = w;
    return 1 + reply_px_worker(r, 1);
}

static Fgx__Ctl__Dir dir_to_msg(enum fgx_dir d)
{
    return d == FGX_DIR_C2S   ? FGX__CTL__DIR__DIR_C2S
           : d == FGX_DIR_S2C ? FGX__CTL__DIR__DIR_S2C
                              : FGX__CTL__DIR__DIR_BOTH;
}

/* Copies svcs; fills the computed fields (filter count, blocked sum) from t. */
static int reply_services(struct rpc *r, struct ctl_txn *t, const struct ctl_service *svcs,
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
            rv = blocked_of(r, t, fs[j].id, &b);
            if (rv < 0)
                goto err;
            blocked += b;
        }
        if (fgx_cidr_format(&s->addr, r->ips[i], sizeof(r->ips[i])) < 0)
            r->ips[i][0] = '\0';
        fgx__ctl__service__init(m);
        m->id = s->id;
        m->name = r->svcs[i].name;
        m->proto =
            s->ipproto == IPPROTO_UDP ? FGX__CTL__PROTO__PROTO_UDP : FGX__CTL__PROTO__PROTO_TCP;
        m->ip = r->ips[i];
        m->port = s->port;
        m->layer = s->layer == CTL_LAYER_PROXY ? FGX__CTL__LAYER__LAYER_PROXY
                                               : FGX__CTL__LAYER__LAYER_NFQUEUE;
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
        r->svc_ptrs[i] = m;
    }
    r->nsvcs = n;
    r->reply.n_services = n;
    r->reply.services = r->svc_ptrs;
    ctl_filters_free(fs, nfs);
    return 0;
err:
    ctl_filters_free(fs, nfs);
    rpc_store_fail(r, rv);
    return rv;
}

/* Takes ownership of fs (an array from ctl_store_filter_list() or one malloc'd filter). */
static int reply_filters(struct rpc *r, struct ctl_txn *t, struct ctl_filter *fs, size_t n)
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

        rv = blocked_of(r, t, fs[i].id, &blocked);
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
        r->flt_ptrs[i] = m;
    }
    r->reply.n_filters = n;
    r->reply.filters = r->flt_ptrs;
    return 0;
err:
    rpc_store_fail(r, rv);
    return rv;
}

static int reply_filter(struct rpc *r, struct ctl_txn *t, struct ctl_filter *f)
{
    struct ctl_filter *one = malloc(sizeof(*one));

    if (!one) {
        ctl_filter_release(f);
        rpc_store_fail(r, -ENOMEM);
        return -ENOMEM;
    }
    *one = *f;
    f->regex = NULL;
    return reply_filters(r, t, one, 1);
}

/* ---- commit and apply ---- */

/* Validate the whole new state by building its ruleset in the request's transaction, commit,
 * then carry it to the data path. *t is consumed. */
static void rpc_finish(struct rpc *r, struct ctl_txn **t, bool rebuild)
{
    struct ctl_ruleset rs;
    char err[768];
    int rv, worker_err = 0;

    if (rebuild) {
        rv = ctl_ruleset_build(*t, &rs, err, sizeof(err));
        if (rv < 0) {
            rpc_fail(r, rv == -EINVAL ? FGX__CTL__CODE__CODE_INVALID : FGX__CTL__CODE__CODE_ERROR,
                     "%s", err);
            return;
        }
    }
    /* A probe that found work for the compiler: the caller aborts *t, nothing is stored, and
     * the request runs again once the compile session has every result. */
    if (ctl_compile_collecting() && ctl_compile_pending() > 0) {
        r->deferred = true;
        rpc_fail(r, FGX__CTL__CODE__CODE_ERROR, "compiling");
        if (rebuild)
            ctl_ruleset_release(&rs);
        return;
    }
    rv = ctl_txn_commit(*t);
    *t = NULL;
    if (rv < 0) {
        rpc_store_fail(r, rv);
        goto out;
    }
    if (!rebuild)
        return;
    rv = ctl_apply(r->ctx, &rs, &worker_err);
    if (rv < 0)
        rpc_fail(r, FGX__CTL__CODE__CODE_ERROR,
                 "stored, but the nftables rules could not be installed: %s", strerror(-rv));
    else if (worker_err < 0)
        rpc_fail(r, FGX__CTL__CODE__CODE_UNAVAILABLE, "stored, but the nfq worker did not confirm");
out:
    if (rebuild)
        ctl_ruleset_release(&rs);
}

/* ---- requests ---- */

static void do_status(struct rpc *r)
{
    /* Fresh worker counters; a worker that does not answer is reported as it was. */
    ctl_stats_refresh(r->ctx, RPC_STATS_TIMEOUT_MS);
    struct ctl_service *svcs = NULL;
    struct ctl_txn *t;
    size_t n = 0, active = 0;
    int rv;

    if (txn_begin(r, false, &t) < 0)
        return;
    rv = ctl_store_service_list(t, &svcs, &n);
    ctl_txn_abort(t);
    if (rv < 0) {
        rpc_store_fail(r, rv);
        return;
    }
    for (size_t i = 0; i < n; i++)
        active += svcs[i].active;
    free(svcs);
    fgx__ctl__status__init(&r->status);
    r->status.version = CTL_VERSION;
    r->status.uptime = (uint64_t)time(NULL) - r->ctx->started;
    r->status.services = (uint32_t)n;
    r->status.services_active = (uint32_t)active;
    r->status.has_threads = 1;
    r->status.threads = r->ctx->threads;
    if (r->ctx->nft)
        r->status.queue_mode = ctl_nft_native_queue(r->ctx->nft) ? "native" : "compat";
    r->status.n_workers = reply_worker(r);
    r->status.workers = r->workers;
    r->reply.status = &r->status;
}

static void do_service_add(struct rpc *r, const Fgx__Ctl__ServiceAdd *a)
{
    struct ctl_service svc = {.active = true};
    struct ctl_txn *t = NULL;
    int rv;

    if (check_name(r, a->name) < 0 || check_proto(r, a->proto, &svc.ipproto) < 0 ||
        check_port(r, a->port) < 0 || check_ip(r, a->ip, &svc.addr) < 0 ||
        (a->has_layer && check_layer(r, a->layer, &svc.layer) < 0) ||
        (a->has_midstream && check_midstream(r, a->midstream, &svc.midstream) < 0))
        return;
    snprintf(svc.name, sizeof(svc.name), "%s", a->name);
    svc.port = (uint16_t)a->port;
    if (!a->has_layer)
        svc.layer = CTL_LAYER_NFQUEUE;
    if (check_layer_proto(r, &svc) < 0)
        return;
    svc.fail_open = a->has_fail_open && a->fail_open;
    if (txn_begin(r, true, &t) < 0)
        return;
    if (check_unique(r, t, &svc) < 0)
        goto out;
    rv = ctl_store_service_put(t, &svc);
    if (rv < 0) {
        rpc_store_fail(r, rv);
        goto out;
    }
    if (reply_services(r, t, &svc, 1) < 0)
        goto out;
    rpc_finish(r, &t, true);
    if (!rpc_failed(r) || r->reply.code == FGX__CTL__CODE__CODE_UNAVAILABLE)
        fgx_info("service %s (id %u) added: %s port %u", svc.name, svc.id, proto_name(svc.ipproto),
                 svc.port);
out:
    ctl_txn_abort(t);
}

static void do_service_list(struct rpc *r)
{
    struct ctl_service *svcs = NULL;
    struct ctl_txn *t;
    size_t n = 0;
    int rv;

    ctl_stats_refresh(r->ctx, RPC_STATS_TIMEOUT_MS);
    if (txn_begin(r, false, &t) < 0)
        return;
    rv = ctl_store_service_list(t, &svcs, &n);
    if (rv < 0)
        rpc_store_fail(r, rv);
    else
        reply_services(r, t, svcs, n);
    free(svcs);
    ctl_txn_abort(t);
}

static void do_service_show(struct rpc *r, const char *ref)
{
    struct ctl_service svc;
    struct ctl_txn *t;

    ctl_stats_refresh(r->ctx, RPC_STATS_TIMEOUT_MS);
    if (txn_begin(r, false, &t) < 0)
        return;
    if (service_resolve(r, t, ref, &svc) == 0)
        reply_services(r, t, &svc, 1);
    ctl_txn_abort(t);
}

static void do_service_active(struct rpc *r, const char *ref, bool active)
{
    struct ctl_service svc;
    struct ctl_txn *t = NULL;
    bool changed;
    int rv;

    if (txn_begin(r, true, &t) < 0)
        return;
    if (service_resolve(r, t, ref, &svc) < 0)
        goto out;
    changed = svc.active != active;
    svc.active = active;
    if (changed) {
        rv = ctl_store_service_put(t, &svc);
        if (rv < 0) {
            rpc_store_fail(r, rv);
            goto out;
        }
    }
    if (reply_services(r, t, &svc, 1) < 0)
        goto out;
    /* Even when nothing changed, applying again repairs a worker or rules gone astray. */
    rpc_finish(r, &t, true);
    if (changed && !rpc_failed(r))
        fgx_info("service %s %s", svc.name, active ? "started" : "stopped");
out:
    ctl_txn_abort(t);
}

static void do_service_rm(struct rpc *r, const char *ref)
{
    struct ctl_service svc;
    struct ctl_txn *t = NULL;
    int rv;

    if (txn_begin(r, true, &t) < 0)
        return;
    if (service_resolve(r, t, ref, &svc) < 0)
        goto out;
    if (reply_services(r, t, &svc, 1) < 0)
        goto out;
    rv = ctl_store_service_del(t, svc.id);
    if (rv < 0) {
        rpc_store_fail(r, rv);
        goto out;
    }
    rpc_finish(r, &t, true);
    if (!rpc_failed(r))
        fgx_info("service %s (id %u) removed", svc.name, svc.id);
out:
    ctl_txn_abort(t);
}

static void do_service_rename(struct rpc *r, const Fgx__Ctl__ServiceRename *a)
{
    struct ctl_service svc;
    struct ctl_txn *t = NULL;
    int rv;

    if (check_name(r, a->name) < 0 || txn_begin(r, true, &t) < 0)
        return;
    if (service_resolve(r, t, a->ref, &svc) < 0)
        goto out;
    snprintf(svc.name, sizeof(svc.name), "%s", a->name);
    if (check_unique(r, t, &svc) < 0)
        goto out;
    rv = ctl_store_service_put(t, &svc);
    if (rv < 0) {
        rpc_store_fail(r, rv);
        goto out;
    }
    if (reply_services(r, t, &svc, 1) < 0)
        goto out;
    rpc_finish(r, &t, false);
out:
    ctl_txn_abort(t);
}

static void do_service_set(struct rpc *r, const Fgx__Ctl__ServiceSet *a)
{
    struct ctl_filter *fs = NULL;
    struct ctl_service svc;
    struct ctl_txn *t = NULL;
    size_t nfs = 0;
    int rv;

    if (txn_begin(r, true, &t) < 0)
        return;
    if (service_resolve(r, t, a->ref, &svc) < 0)
        goto out;
    if (a->has_port) {
        if (check_port(r, a->port) < 0)
            goto out;
        svc.port = (uint16_t)a->port;
    }
    if (a->ip && check_ip(r, a->ip, &svc.addr) < 0)
        goto out;
    if (a->has_layer && check_layer(r, a->layer, &svc.layer) < 0)
        goto out;
    if (a->has_fail_open)
        svc.fail_open = a->fail_open;
    if (a->has_midstream && check_midstream(r, a->midstream, &svc.midstream) < 0)
        goto out;
    if (a->has_proto) {
        uint8_t ipproto;

        if (check_proto(r, a->proto, &ipproto) < 0)
            goto out;
        if (ipproto != svc.ipproto) {
            /* Stream and block mode accept different patterns: every filter must still fit. */
            rv = ctl_store_filter_list(t, svc.id, &fs, &nfs);
            if (rv < 0) {
                rpc_store_fail(r, rv);
                goto out;
            }
            for (size_t i = 0; i < nfs; i++)
                if (check_regex(r, fs[i].regex, fs[i].nocase, ipproto, NULL) < 0)
                    goto out;
        }
        svc.ipproto = ipproto;
    }
    if (check_layer_proto(r, &svc) < 0 || check_unique(r, t, &svc) < 0)
        goto out;
    rv = ctl_store_service_put(t, &svc);
    if (rv < 0) {
        rpc_store_fail(r, rv);
        goto out;
    }
    if (reply_services(r, t, &svc, 1) < 0)
        goto out;
    rpc_finish(r, &t, true);
    if (!rpc_failed(r))
        fgx_info("service %s changed", svc.name);
out:
    ctl_filters_free(fs, nfs);
    ctl_txn_abort(t);
}

static void do_filter_add(struct rpc *r, const Fgx__Ctl__FilterAdd *a)
{
    struct ctl_filter f = {0};
    struct ctl_service svc;
    struct ctl_txn *t = NULL;
    int rv;

    if (txn_begin(r, true, &t) < 0)
        return;
    if (service_resolve(r, t, a->service, &svc) < 0)
        goto out;
    f.nocase = a->has_nocase && a->nocase;
    if (check_regex(r, a->regex, f.nocase, svc.ipproto, &r->add_warn) < 0)
        goto out;
    f.service_id = svc.id;
    f.dir = !a->has_dir                         ? FGX_DIR_BOTH
            : a->dir == FGX__CTL__DIR__DIR_C2S  ? FGX_DIR_C2S
            : a->dir == FGX__CTL__DIR__DIR_S2C  ? FGX_DIR_S2C
            : a->dir == FGX__CTL__DIR__DIR_BOTH ? FGX_DIR_BOTH
                                                : 0;
    if (f.dir == 0) {
        rpc_fail(r, FGX__CTL__CODE__CODE_INVALID, "invalid direction: use c2s, s2c or both");
        goto out;
    }
    f.active = true;
    f.regex = strdup(a->regex);
    if (!f.regex) {
        rpc_store_fail(r, -ENOMEM);
        goto out;
    }
    rv = ctl_store_filter_put(t, &f);
    if (rv < 0) {
        rpc_store_fail(r, rv);
        goto out;
    }
    if (reply_filter(r, t, &f) < 0)
        goto out;
    for (size_t i = 0; i < r->add_warn.n; i++)
        r->add_warn_ptrs[i] = r->add_warn.text[i];
    r->flt_msgs[0].n_warnings = r->add_warn.n;
    r->flt_msgs[0].warnings = r->add_warn_ptrs;
    rpc_finish(r, &t, true);
    if (!rpc_failed(r) || r->reply.code == FGX__CTL__CODE__CODE_UNAVAILABLE)
        fgx_info("filter %u added to service %s%s", r->flts[0].id, svc.name,
                 r->add_warn.n ? " (with a warning: likely to block honest traffic)" : "");
out:
    ctl_filter_release(&f);
    ctl_txn_abort(t);
}

static void do_filter_list(struct rpc *r, const char *ref)
{
    struct ctl_filter *fs = NULL;
    struct ctl_service svc;
    struct ctl_txn *t;
    size_t n = 0;
    int rv;

    ctl_stats_refresh(r->ctx, RPC_STATS_TIMEOUT_MS);
    if (txn_begin(r, false, &t) < 0)
        return;
    if (service_resolve(r, t, ref, &svc) < 0)
        goto out;
    rv = ctl_store_filter_list(t, svc.id, &fs, &n);
    if (rv < 0) {
        rpc_store_fail(r, rv);
        goto out;
    }
    reply_filters(r, t, fs, n);
out:
    ctl_txn_abort(t);
}

static void do_filter_active(struct rpc *r, const char *ref, bool active)
{
    struct ctl_filter f = {0};
    struct ctl_txn *t = NULL;
    int rv;

    if (txn_begin(r, true, &t) < 0)
        return;
    if (filter_resolve(r, t, ref, &f) < 0)
        goto out;
    if (f.active != active) {
        f.active = active;
        rv = ctl_store_filter_put(t, &f);
        if (rv < 0) {
            rpc_store_fail(r, rv);
            goto out;
        }
    }
    if (reply_filter(r, t, &f) < 0)
        goto out;
    rpc_finish(r, &t, true);
    if (!rpc_failed(r))
        fgx_info("filter %s %s", ref, active ? "enabled" : "disabled");
out:
    ctl_filter_release(&f);
    ctl_txn_abort(t);
}

static void do_filter_rm(struct rpc *r, const char *ref)
{
    struct ctl_filter f = {0};
    struct ctl_txn *t = NULL;
    uint32_t id;
    int rv;

    if (txn_begin(r, true, &t) < 0)
        return;
    if (filter_resolve(r, t, ref, &f) < 0)
        goto out;
    id = f.id;
    if (reply_filter(r, t, &f) < 0)
        goto out;
    rv = ctl_store_filter_del(t, id);
    if (rv < 0) {
        rpc_store_fail(r, rv);
        goto out;
    }
    rpc_finish(r, &t, true);
    if (!rpc_failed(r))
        fgx_info("filter %u removed", id);
out:
    ctl_filter_release(&f);
    ctl_txn_abort(t);
}

static void do_worker_list(struct rpc *r)
{
    ctl_stats_refresh(r->ctx, RPC_STATS_TIMEOUT_MS);
    r->reply.n_workers = reply_worker(r);
    r->reply.workers = r->workers;
}

static void do_worker_restart(struct rpc *r, const char *kind)
{
    int rv;

    if (!kind ||
        (strcmp(kind, "nfq") != 0 && strcmp(kind, "proxy") != 0 && strcmp(kind, "all") != 0)) {
        rpc_fail(r, FGX__CTL__CODE__CODE_INVALID,
                 "unknown worker kind \"%s\": use nfq, proxy or all", kind ? kind : "");
        return;
    }
    if (strcmp(kind, "proxy") == 0 || strcmp(kind, "all") == 0) {
        if (!r->ctx->px_sup) {
            if (strcmp(kind, "proxy") == 0)
                rpc_fail(r, FGX__CTL__CODE__CODE_INVALID, "no proxy worker runs");
        } else {
            rv = ctl_px_worker_restart(r->ctx, CTL_RESTART_TIMEOUT_MS);
            if (rv < 0) {
                r->reply.n_workers = reply_worker(r);
                r->reply.workers = r->workers;
                rpc_fail(r, FGX__CTL__CODE__CODE_UNAVAILABLE,
                         "the proxy worker was restarted but did not confirm the ruleset: %s",
                         strerror(-rv));
                return;
            }
        }
        if (strcmp(kind, "proxy") == 0) {
            r->reply.n_workers = reply_worker(r);
            r->reply.workers = r->workers;
            return;
        }
    }
    if (!r->ctx->sup) {
        if (strcmp(kind, "nfq") == 0)
            rpc_fail(r, FGX__CTL__CODE__CODE_INVALID, "no nfq worker runs");
        return; /* "all": nothing exists, nothing to restart */
    }
    rv = ctl_worker_restart(r->ctx, CTL_RESTART_TIMEOUT_MS);
    r->reply.n_workers = reply_worker(r);
    r->reply.workers = r->workers;
    if (rv == -ETIMEDOUT)
        rpc_fail(r, FGX__CTL__CODE__CODE_UNAVAILABLE,
                 "the nfq worker was restarted but did not confirm the ruleset within %d s",
                 CTL_RESTART_TIMEOUT_MS / 1000);
    else if (rv < 0)
        rpc_fail(r, FGX__CTL__CODE__CODE_ERROR, "cannot restart the nfq worker: %s", strerror(-rv));
}

/* Per-service counters (and the filters behind their blocked sums, and the worker) for one
 * service or all. */
static void do_stats(struct rpc *r, const Fgx__Ctl__StatsQuery *q)
{
    bool one_service = q && q->service && *q->service;
    struct ctl_service *svcs = NULL, one;
    struct ctl_filter *fs = NULL;
    struct ctl_txn *t;
    size_t n = 0, nfs = 0;
    int rv;

    ctl_stats_refresh(r->ctx, RPC_STATS_TIMEOUT_MS);
    if (txn_begin(r, false, &t) < 0)
        return;
    if (one_service) {
        if (service_resolve(r, t, q->service, &one) < 0)
            goto out;
        svcs = malloc(sizeof(*svcs));
        if (!svcs) {
            rpc_store_fail(r, -ENOMEM);
            goto out;
        }
        svcs[0] = one;
        n = 1;
    } else {
        rv = ctl_store_service_list(t, &svcs, &n);
        if (rv < 0) {
            rpc_store_fail(r, rv);
            goto out;
        }
    }
    rv = ctl_store_filter_list(t, one_service ? svcs[0].id : 0, &fs, &nfs);
    if (rv < 0) {
        rpc_store_fail(r, rv);
        goto out;
    }
    r->sst_msgs = calloc(n ? n : 1, sizeof(*r->sst_msgs));
    r->sst_ptrs = calloc(n ? n : 1, sizeof(*r->sst_ptrs));
    r->svcs = calloc(n ? n : 1, sizeof(*r->svcs));
    if (!r->sst_msgs || !r->sst_ptrs || !r->svcs) {
        rpc_store_fail(r, -ENOMEM);
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
        for (size_t j = 0; j < nfs; j++) {
            uint64_t b;

            if (fs[j].service_id != r->svcs[i].id)
                continue;
            if (blocked_of(r, t, fs[j].id, &b) < 0)
                continue;
            m->blocked += b;
        }
        r->sst_ptrs[i] = m;
    }
    r->reply.n_service_stats = n;
    r->reply.service_stats = r->sst_ptrs;
    if (reply_filters(r, t, fs, nfs) < 0) {
        fs = NULL; /* owned by r now */
        goto out;
    }
    fs = NULL;
    r->reply.n_workers = reply_worker(r);
    r->reply.workers = r->workers;
out:
    ctl_filters_free(fs, nfs);
    free(svcs);
    ctl_txn_abort(t);
}

#define RPC_EVENTS_DEFAULT 100

static void do_events(struct rpc *r, const Fgx__Ctl__EventsQuery *q)
{
    uint64_t after = q && q->has_after_seq ? q->after_seq : 0;
    size_t limit = q && q->has_limit && q->limit > 0 ? q->limit : RPC_EVENTS_DEFAULT;
    const char *name = NULL;
    uint32_t sid = 0;
    size_t n;

    if (limit > CTL_EVENTS_KEEP)
        limit = CTL_EVENTS_KEEP;
    ctl_stats_refresh(r->ctx, RPC_STATS_TIMEOUT_MS);
    if (q && q->service && *q->service) {
        struct ctl_service svc;
        struct ctl_txn *t;
        int rv;

        if (txn_begin(r, false, &t) < 0)
            return;
        rv = all_digits(q->service)
                 ? (ref_id(q->service, &sid) < 0 ? -ENOENT : ctl_store_service_get(t, sid, &svc))
                 : ctl_store_service_by_name(t, q->service, &svc);
        ctl_txn_abort(t);
        if (rv == 0) {
            sid = svc.id;
        } else if (rv == -ENOENT) {
            /* A removed service's events are still listed under the name they were shown. */
            sid = all_digits(q->service) ? sid : 0;
            name = q->service;
        } else {
            rpc_store_fail(r, rv);
            return;
        }
    }
    r->reply.has_last_seq = 1;
    if (!r->ctx->stats)
        return;
    r->reply.last_seq = ctl_stats_last_seq(r->ctx->stats);
    r->evs = calloc(limit, sizeof(*r->evs));
    r->ev_msgs = calloc(limit, sizeof(*r->ev_msgs));
    r->ev_ptrs = calloc(limit, sizeof(*r->ev_ptrs));
    if (!r->evs || !r->ev_msgs || !r->ev_ptrs) {
        rpc_store_fail(r, -ENOMEM);
        return;
    }
    if (name && ctl_stats_events(r->ctx->stats, 0, sid, name, 1, r->evs) == 0) {
        rpc_fail(r, FGX__CTL__CODE__CODE_NOT_FOUND, "no such service: %s", name);
        return;
    }
    n = ctl_stats_events(r->ctx->stats, after, sid, name, limit, r->evs);
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
        }
        r->ev_ptrs[i] = m;
    }
    r->reply.n_events = n;
    r->reply.events = r->ev_ptrs;
}

/* ---- access: login, password, the switch, certificate; configuration files ---- */

static uint64_t mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void reply_auth_state(struct rpc *r)
{
    if (!r->ctx->auth)
        return;
    r->reply.has_auth_enabled = 1;
    r->reply.auth_enabled = ctl_auth_enabled(r->ctx->auth);
}

/* true when the request may go on; otherwise the reply says why. Login and the certificate
 * need no session; without ctx->auth (unit tests) everything is trusted. */
static bool rpc_admit(struct rpc *r, const Fgx__Ctl__Request *q)
{
    struct ctl_auth *a = r->ctx->auth;

    if (!a || q->req_case == FGX__CTL__REQUEST__REQ_LOGIN ||
        q->req_case == FGX__CTL__REQUEST__REQ_CERT || !ctl_auth_required(a, r->peer))
        return true;
    if (q->token && ctl_auth_session_check(a, q->token, mono_ms()) == 0)
        return true;
    rpc_fail(r, FGX__CTL__CODE__CODE_AUTH, "%s",
             q->token && *q->token ? "the session has expired or was logged out: run fgexctl login"
                                   : "login required: run fgexctl login");
    return false;
}

static bool rpc_has_auth(struct rpc *r)
{
    if (r->ctx->auth)
        return true;
    rpc_fail(r, FGX__CTL__CODE__CODE_INVALID, "this controld has no password support");
    return false;
}

static void do_login(struct rpc *r, const Fgx__Ctl__Login *l)
{
    struct ctl_auth *a = r->ctx->auth;
    uint64_t now = mono_ms(), left;
    char who[64];

    if (!rpc_has_auth(r))
        return;
    ctl_auth_peer_format(r->peer, who, sizeof(who));
    if (!ctl_auth_has_password(a)) {
        rpc_fail(r, FGX__CTL__CODE__CODE_AUTH,
                 "no password is set: set one with fgexctl passwd on the vulnbox, or controld "
                 "--init-password");
        return;
    }
    /* Before the hash: a locked-out peer costs no yescrypt time and learns nothing. */
    left = ctl_auth_delay_left(a, r->peer, now);
    if (left > 0) {
        rpc_fail(r, FGX__CTL__CODE__CODE_AUTH,
                 "too many failed logins from %s: try again in %llu s", who,
                 (unsigned long long)(left + 999) / 1000);
        return;
    }
    if (!l || ctl_auth_verify(l->password, ctl_auth_hash_get(a)) != 0) {
        left = ctl_auth_login_failed(a, r->peer, now);
        fgx_warn("failed login from %s; its next attempt is refused for %llu ms", who,
                 (unsigned long long)left);
        rpc_fail(r, FGX__CTL__CODE__CODE_AUTH, "wrong password");
        return;
    }
    ctl_auth_login_ok(a, r->peer);
    if (ctl_auth_session_new(a, now, r->token) < 0) {
        rpc_fail(r, FGX__CTL__CODE__CODE_ERROR, "cannot create a session");
        return;
    }
    r->reply.token = r->token;
    reply_auth_state(r);
    fgx_info("login from %s", who);
}

static void do_passwd(struct rpc *r, const Fgx__Ctl__Passwd *p, const char *token)
{
    struct ctl_auth *a = r->ctx->auth;
    char err[256], who[64];
    size_t n;
    int rv;

    if (!rpc_has_auth(r))
        return;
    if (!p) {
        rpc_fail(r, FGX__CTL__CODE__CODE_INVALID, "no password given");
        return;
    }
    ctl_auth_peer_format(r->peer, who, sizeof(who));
    rv = ctl_auth_password_save(a, r->ctx->store, p->password, err, sizeof(err));
    if (rv < 0) {
        rpc_fail(r, rv == -EINVAL ? FGX__CTL__CODE__CODE_INVALID : FGX__CTL__CODE__CODE_ERROR, "%s",
                 err);
        return;
    }
    if (p->has_expire_sessions && p->expire_sessions) {
        /* The caller's own session stays (a local caller may have none). */
        n = ctl_auth_session_drop_others(a, token);
        fgx_info("password changed from %s; %zu other session(s) logged out", who, n);
    } else {
        fgx_info("password changed from %s", who);
    }
    reply_auth_state(r);
}

static void do_auth_set(struct rpc *r, const Fgx__Ctl__AuthSet *s)
{
    struct ctl_auth *a = r->ctx->auth;
    char who[64];
    int rv;

    if (!rpc_has_auth(r))
        return;
    if (!s) {
        rpc_fail(r, FGX__CTL__CODE__CODE_INVALID, "auth: say on or off");
        return;
    }
    if (s->enabled && !ctl_auth_has_password(a)) {
        rpc_fail(r, FGX__CTL__CODE__CODE_INVALID,
                 "set a password first (fgexctl passwd): with none, no remote client could log in");
        return;
    }
    rv = ctl_auth_enabled_save(a, r->ctx->store, s->enabled);
    if (rv < 0) {
        rpc_store_fail(r, rv);
        return;
    }
    ctl_auth_peer_format(r->peer, who, sizeof(who));
    if (s->enabled)
        fgx_info("password requirement turned on from %s", who);
    else
        fgx_warn("password requirement turned off from %s: any client that can connect controls "
                 "the firewall",
                 who);
    reply_auth_state(r);
}

static void do_cert(struct rpc *r)
{
    const char *fp = r->ctx->auth ? ctl_auth_fingerprint(r->ctx->auth) : "";

    if (!*fp) {
        rpc_fail(r, FGX__CTL__CODE__CODE_NOT_FOUND,
                 "controld has no TLS listener (start it with --listen tls+tcp://ADDR:PORT)");
        return;
    }
    r->reply.fingerprint = (char *)fp;
}

/* Idempotent: a client forgetting its token is logged out whether or not the session lived. */
static void do_logout(struct rpc *r, const char *token)
{
    if (r->ctx->auth && token && ctl_auth_session_drop(r->ctx->auth, token) == 0)
        fgx_info("logout");
}

static void do_config_export(struct rpc *r)
{
    struct ctl_txn *t;
    int rv;

    if (txn_begin(r, false, &t) < 0)
        return;
    rv = ctl_config_export(t, &r->cfg_exp);
    ctl_txn_abort(t);
    if (rv < 0) {
        rpc_store_fail(r, rv);
        return;
    }
    r->reply.config = &r->cfg_exp.cfg;
}

static Fgx__Ctl__Code config_code(int rv)
{
    return rv == -EINVAL   ? FGX__CTL__CODE__CODE_INVALID
           : rv == -EEXIST ? FGX__CTL__CODE__CODE_EXISTS
           : rv == -ENOENT ? FGX__CTL__CODE__CODE_NOT_FOUND
                           : FGX__CTL__CODE__CODE_ERROR;
}

static void do_config_import(struct rpc *r, const Fgx__Ctl__Config *cfg)
{
    struct ctl_txn *t = NULL;
    char err[768];
    int rv;

    if (!cfg) {
        rpc_fail(r, FGX__CTL__CODE__CODE_INVALID, "no configuration given");
        return;
    }
    if (txn_begin(r, true, &t) < 0)
        return;
    rv = ctl_config_import(t, cfg, err, sizeof(err));
    if (rv < 0) {
        rpc_fail(r, config_code(rv), "%s", err);
        goto out;
    }
    /* The full compile happens here: a set that cannot compile is aborted with everything else. */
    rpc_finish(r, &t, true);
    if (rpc_failed(r) && r->reply.code != FGX__CTL__CODE__CODE_UNAVAILABLE)
        goto out;
    if (r->ctx->stats)
        ctl_stats_counters_reset(r->ctx->stats);
    if (r->ctx->auth && cfg->has_auth_enabled)
        ctl_auth_enabled_set(r->ctx->auth, cfg->auth_enabled);
    fgx_info("configuration imported: %zu services, %zu filters", cfg->n_services, cfg->n_filters);
out:
    ctl_txn_abort(t);
}

static int warn_cmp(const void *key, const void *elem)
{
    uint32_t id = *(const uint32_t *)key;
    const struct ctl_config_warning *w = elem;

    return id < w->filter_id ? -1 : id > w->filter_id;
}

/* Each imported line's warnings onto the reply's filter it became, as "line N: ...". */
static int reply_import_warnings(struct rpc *r)
{
    size_t total = 0, k = 0;

    for (size_t i = 0; i < r->nimp_warn; i++)
        total += r->imp_warn[i].w.n;
    if (total == 0)
        return 0;
    r->imp_text = calloc(total, sizeof(*r->imp_text));
    r->imp_ptrs = calloc(total, sizeof(*r->imp_ptrs));
    if (!r->imp_text || !r->imp_ptrs) {
        rpc_store_fail(r, -ENOMEM);
        return -ENOMEM;
    }
    for (size_t i = 0; i < r->nflts; i++) {
        const struct ctl_config_warning *w =
            bsearch(&r->flts[i].id, r->imp_warn, r->nimp_warn, sizeof(*r->imp_warn), warn_cmp);

        if (!w)
            continue;
        r->flt_msgs[i].warnings = &r->imp_ptrs[k];
        r->flt_msgs[i].n_warnings = w->w.n;
        for (size_t j = 0; j < w->w.n; j++, k++) {
            snprintf(r->imp_text[k], sizeof(r->imp_text[k]), "line %u: %s", w->line,
                     w->w.text[j]);
            r->imp_ptrs[k] = r->imp_text[k];
        }
    }
    return 0;
}

static void do_filter_import(struct rpc *r, const Fgx__Ctl__FilterImport *imp)
{
    struct ctl_filter *fs = NULL;
    struct ctl_txn *t = NULL;
    uint32_t sid = 0;
    size_t n = 0;
    char err[1024];
    int rv;

    if (!imp) {
        rpc_fail(r, FGX__CTL__CODE__CODE_INVALID, "no ruleset given");
        return;
    }
    if (txn_begin(r, true, &t) < 0)
        return;
    rv = ctl_config_filter_import_warn(t, imp, &sid, &r->imp_warn, &r->nimp_warn, err,
                                       sizeof(err));
    if (rv < 0) {
        rpc_fail(r, config_code(rv), "%s", err);
        goto out;
    }
    rv = ctl_store_filter_list(t, sid, &fs, &n);
    if (rv < 0) {
        rpc_store_fail(r, rv);
        goto out;
    }
    if (reply_filters(r, t, fs, n) < 0 || reply_import_warnings(r) < 0)
        goto out;
    rpc_finish(r, &t, true);
    if (!rpc_failed(r) || r->reply.code == FGX__CTL__CODE__CODE_UNAVAILABLE)
        fgx_info("%zu filter(s) imported into service %s%s", imp->n_filters, imp->service,
                 imp->has_replace && imp->replace ? ", replacing the others" : "");
out:
    ctl_txn_abort(t);
}

static const char *ref_of(const Fgx__Ctl__Ref *ref)
{
    return ref ? ref->ref : NULL;
}

static void rpc_dispatch(struct rpc *r, const Fgx__Ctl__Request *q)
{
    switch (q->req_case) {
    case FGX__CTL__REQUEST__REQ_STATUS:
        do_status(r);
        break;
    case FGX__CTL__REQUEST__REQ_SERVICE_ADD:
        do_service_add(r, q->service_add);
        break;
    case FGX__CTL__REQUEST__REQ_SERVICE_LIST:
        do_service_list(r);
        break;
    case FGX__CTL__REQUEST__REQ_SERVICE_SHOW:
        do_service_show(r, ref_of(q->service_show));
        break;
    case FGX__CTL__REQUEST__REQ_SERVICE_START:
        do_service_active(r, ref_of(q->service_start), true);
        break;
    case FGX__CTL__REQUEST__REQ_SERVICE_STOP:
        do_service_active(r, ref_of(q->service_stop), false);
        break;
    case FGX__CTL__REQUEST__REQ_SERVICE_RM:
        do_service_rm(r, ref_of(q->service_rm));
        break;
    case FGX__CTL__REQUEST__REQ_SERVICE_RENAME:
        do_service_rename(r, q->service_rename);
        break;
    case FGX__CTL__REQUEST__REQ_SERVICE_SET:
        do_service_set(r, q->service_set);
        break;
    case FGX__CTL__REQUEST__REQ_FILTER_ADD:
        do_filter_add(r, q->filter_add);
        break;
    case FGX__CTL__REQUEST__REQ_FILTER_LIST:
        do_filter_list(r, ref_of(q->filter_list));
        break;
    case FGX__CTL__REQUEST__REQ_FILTER_ENABLE:
        do_filter_active(r, ref_of(q->filter_enable), true);
        break;
    case FGX__CTL__REQUEST__REQ_FILTER_DISABLE:
        do_filter_active(r, ref_of(q->filter_disable), false);
        break;
    case FGX__CTL__REQUEST__REQ_FILTER_RM:
        do_filter_rm(r, ref_of(q->filter_rm));
        break;
    case FGX__CTL__REQUEST__REQ_WORKER_LIST:
        do_worker_list(r);
        break;
    case FGX__CTL__REQUEST__REQ_WORKER_RESTART:
        do_worker_restart(r, q->worker_restart ? q->worker_restart->kind : NULL);
        break;
    case FGX__CTL__REQUEST__REQ_STATS:
        do_stats(r, q->stats);
        break;
    case FGX__CTL__REQUEST__REQ_EVENTS:
        do_events(r, q->events);
        break;
    case FGX__CTL__REQUEST__REQ_LOGIN:
        do_login(r, q->login);
        break;
    case FGX__CTL__REQUEST__REQ_PASSWD:
        do_passwd(r, q->passwd, q->token);
        break;
    case FGX__CTL__REQUEST__REQ_AUTH_SET:
        do_auth_set(r, q->auth_set);
        break;
    case FGX__CTL__REQUEST__REQ_CERT:
        do_cert(r);
        break;
    case FGX__CTL__REQUEST__REQ_LOGOUT:
        do_logout(r, q->token);
        break;
    case FGX__CTL__REQUEST__REQ_CONFIG_EXPORT:
        do_config_export(r);
        break;
    case FGX__CTL__REQUEST__REQ_CONFIG_IMPORT:
        do_config_import(r, q->config_import);
        break;
    case FGX__CTL__REQUEST__REQ_FILTER_IMPORT:
        do_filter_import(r, q->filter_import);
        break;
    case FGX__CTL__REQUEST__REQ_FILTER_EXPORT:
        do_filter_list(r, ref_of(q->filter_export));
        break;
    default:
        rpc_fail(r, FGX__CTL__CODE__CODE_INVALID, "unknown request (fgexctl newer than controld?)");
        break;
    }
}

int ctl_rpc_handle(struct ctl_ctx *ctx, const void *req, size_t len, void **reply, size_t *replylen)
{
    static const struct fgx_peer local = {.family = 0};

    return ctl_rpc_handle_from(ctx, &local, req, len, reply, replylen);
}

/* Requests that change services or filters: what may need the compiler. */
static bool rpc_is_change(const Fgx__Ctl__Request *q)
{
    switch (q->req_case) {
    case FGX__CTL__REQUEST__REQ_SERVICE_ADD:
    case FGX__CTL__REQUEST__REQ_SERVICE_START:
    case FGX__CTL__REQUEST__REQ_SERVICE_STOP:
    case FGX__CTL__REQUEST__REQ_SERVICE_RM:
    case FGX__CTL__REQUEST__REQ_SERVICE_RENAME:
    case FGX__CTL__REQUEST__REQ_SERVICE_SET:
    case FGX__CTL__REQUEST__REQ_FILTER_ADD:
    case FGX__CTL__REQUEST__REQ_FILTER_ENABLE:
    case FGX__CTL__REQUEST__REQ_FILTER_DISABLE:
    case FGX__CTL__REQUEST__REQ_FILTER_RM:
    case FGX__CTL__REQUEST__REQ_CONFIG_IMPORT:
    case FGX__CTL__REQUEST__REQ_FILTER_IMPORT:
        return true;
    default:
        return false;
    }
}

static int rpc_pack(struct rpc *r, void **reply, size_t *replylen)
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
    struct rpc r = {0};
    int rv;

    fgx__ctl__reply__init(&r.reply);
    rpc_fail(&r, code, "%s", msg);
    rv = rpc_pack(&r, reply, replylen);
    rpc_release(&r);
    return rv;
}

int ctl_rpc_handle_try(struct ctl_ctx *ctx, const struct fgx_peer *peer, const void *req,
                       size_t len, bool busy, void **reply, size_t *replylen, bool *deferred)
{
    struct rpc r = {.ctx = ctx, .peer = peer};
    Fgx__Ctl__Request *q;
    int rv;

    *deferred = false;
    *reply = NULL;
    *replylen = 0;
    fgx__ctl__reply__init(&r.reply);
    q = fgx__ctl__request__unpack(NULL, len, req);
    if (!q) {
        rpc_fail(&r, FGX__CTL__CODE__CODE_INVALID, "undecodable request");
    } else if (rpc_admit(&r, q)) {
        if (!rpc_is_change(q)) {
            rpc_dispatch(&r, q);
        } else if (busy) {
            /* One change compiles at a time; queueing would hide how long the wait is. */
            rpc_fail(&r, FGX__CTL__CODE__CODE_ERROR,
                     "busy: controld is compiling another change; nothing was changed, try "
                     "again when it is done");
        } else {
            ctl_compile_collect(true);
            rpc_dispatch(&r, q);
            ctl_compile_collect(false);
            if (r.deferred) {
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
        reply_auth_state(&r);
    rv = rpc_pack(&r, reply, replylen);
    rpc_release(&r);
    if (q)
        fgx__ctl__request__free_unpacked(q, NULL);
    return rv;
}

int ctl_rpc_handle_from(struct ctl_ctx *ctx, const struct fgx_peer *peer, const void *req,
                        size_t len, void **reply, size_t *replylen)
{
    struct rpc r = {.ctx = ctx, .peer = peer};
    Fgx__Ctl__Request *q;
    size_t n;
    void *buf;

    fgx__ctl__reply__init(&r.reply);
    q = fgx__ctl__request__unpack(NULL, len, req);
    if (!q)
        rpc_fail(&r, FGX__CTL__CODE__CODE_INVALID, "undecodable request");
    else if (rpc_admit(&r, q))
        rpc_dispatch(&r, q);
    if (q && q->req_case == FGX__CTL__REQUEST__REQ_STATUS)
        reply_auth_state(&r);
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
