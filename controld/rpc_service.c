/* controld control API, the service family: add, list, show, start, stop, rm, rename, set.
 * Each change is validated, stored in the request's transaction and applied by ctl_rpc_finish
 * before the reply leaves (ctl_rpc_cmd.h). */
#include "controld/ctl_rpc_cmd.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <netinet/in.h>

#include "controld/ctl_health.h"
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

/* The address list of a service being added: --addr repeatedly, or the one-address form
 * --ip/--port. */
static int add_addrs(struct ctl_rpc *r, const Fgx__Ctl__ServiceAdd *a, struct ctl_service *svc)
{
    if (a->n_addrs == 0) {
        if (ctl_rpc_check_port(r, a->port) < 0 || ctl_rpc_check_ip(r, a->ip, &svc->addr) < 0)
            return -EINVAL;
        svc->port = (uint16_t)a->port;
        ctl_service_addrs_single(svc);
        return 0;
    }
    if (a->ip && a->ip[0]) {
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID,
                     "give the addresses with --addr or the one address with --ip, not both");
        return -EINVAL;
    }
    if (a->n_addrs > CTL_SERVICE_ADDRS_MAX) {
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID, "%zu addresses: a service has at most %d",
                     a->n_addrs, CTL_SERVICE_ADDRS_MAX);
        return -EINVAL;
    }
    if (a->port > 65535) {
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID, "invalid port %u: use 1..65535", a->port);
        return -EINVAL;
    }
    for (size_t i = 0; i < a->n_addrs; i++) {
        const char *why = NULL;

        if (fgx_svcaddr_parse(a->addrs[i], (uint16_t)a->port, &svc->addrs[i], &why) < 0) {
            ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID, "invalid address \"%s\": %s%s",
                         a->addrs[i], why ? why : "use ADDR[:PORT]",
                         why && strstr(why, "no port") && a->port == 0 ? " (or give --port)" : "");
            return -EINVAL;
        }
    }
    svc->naddrs = a->n_addrs;
    ctl_service_addrs_sync(svc);
    return 0;
}

/* A service's own list must not name the same packets twice. */
static int check_self(struct ctl_rpc *r, const struct ctl_service *svc)
{
    char x[FGX_SVCADDR_TEXT_MAX], y[FGX_SVCADDR_TEXT_MAX];
    size_t i, j;

    if (!ctl_service_self_overlap(svc, &i, &j))
        return 0;
    (void)fgx_svcaddr_format(&svc->addrs[i], x, sizeof(x));
    (void)fgx_svcaddr_format(&svc->addrs[j], y, sizeof(y));
    ctl_rpc_fail(r, FGX__CTL__CODE__CODE_EXISTS, "service %s: addresses %s and %s overlap",
                 svc->name, x, y);
    return -EEXIST;
}

/* --to: only with the external layer, which needs it. */
static int check_to(struct ctl_rpc *r, const char *to, struct ctl_service *svc)
{
    const char *why = NULL;

    if (to && to[0]) {
        if (svc->layer != CTL_LAYER_EXTERNAL) {
            ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID,
                         "--to names the team's proxy of --layer external only");
            return -EINVAL;
        }
        if (ctl_ext_to_parse(to, &svc->ext_to, &why) < 0) {
            ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID, "invalid --to \"%s\": %s", to,
                         why ? why : "use ADDR:PORT");
            return -EINVAL;
        }
        return 0;
    }
    if (svc->layer == CTL_LAYER_EXTERNAL && svc->ext_to.port == 0) {
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID,
                     "service %s: --layer external needs --to ADDR:PORT, where the team's own "
                     "proxy listens (IP_TRANSPARENT)",
                     svc->name);
        return -EINVAL;
    }
    if (svc->layer != CTL_LAYER_EXTERNAL)
        memset(&svc->ext_to, 0, sizeof(svc->ext_to));
    return 0;
}

/* --upstream: only with TLS. */
static int service_upstream(struct ctl_rpc *r, struct ctl_service *svc, bool has,
                            Fgx__Ctl__Upstream u)
{
    if (!has)
        return 0;
    if (!svc->tls) {
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID,
                     "service %s: --upstream is for TLS services (--tls-cert, --tls-key)",
                     svc->name);
        return -EINVAL;
    }
    if (u != FGX__CTL__UPSTREAM__UPSTREAM_TLS && u != FGX__CTL__UPSTREAM__UPSTREAM_PLAIN) {
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID, "invalid upstream: use tls or plain");
        return -EINVAL;
    }
    svc->upstream_plain = u == FGX__CTL__UPSTREAM__UPSTREAM_PLAIN;
    return 0;
}

/* A service's TLS certificate and key into the store; the service gets its id first. */
/* The HTTP kind lives in the proxy: only it terminates HTTP/2 (and TLS). */
static int service_http_check(struct ctl_rpc *r, const struct ctl_service *svc)
{
    if (svc->upstream_http1 && !svc->http) {
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID,
                     "service %s: --upstream http1 is for HTTP services (--proto http)",
                     svc->name);
        return -EINVAL;
    }
    if (!svc->http || (svc->layer == CTL_LAYER_PROXY && svc->ipproto == IPPROTO_TCP))
        return 0;
    ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID,
                 "service %s: --proto http needs --layer proxy (the proxy terminates HTTP/2; the "
                 "%s layer sees %s)",
                 svc->name, svc->layer == CTL_LAYER_NFQUEUE ? "nfqueue" : "external",
                 svc->layer == CTL_LAYER_NFQUEUE ? "packets" : "nothing");
    return -EINVAL;
}

/* The edges of svc's addresses (issue 26 point 6): what clients speak there and the port the
 * service listens on are the proxy's to act on (on TCP), and a TLS edge needs the service's
 * certificate. */
static int service_edge_check(struct ctl_rpc *r, const struct ctl_service *svc)
{
    for (size_t i = 0; i < svc->naddrs; i++) {
        const struct fgx_svcaddr *a = &svc->addrs[i];
        char text[FGX_SVCADDR_TEXT_MAX];

        if (a->edge == FGX_EDGE_DEFAULT && a->to_port == 0)
            continue;
        (void)fgx_svcaddr_format(a, text, sizeof(text));
        if (svc->layer != CTL_LAYER_PROXY || svc->ipproto != IPPROTO_TCP) {
            ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID,
                         "service %s: address %s names an edge (,tcp ,tls ,to=PORT), which only "
                         "the proxy layer acts on, for TCP (--layer proxy): the %s layer %s",
                         svc->name, text,
                         svc->layer == CTL_LAYER_PROXY     ? "proxy"
                         : svc->layer == CTL_LAYER_NFQUEUE ? "nfqueue"
                                                           : "external",
                         svc->layer == CTL_LAYER_PROXY ? "relays UDP datagrams as they are"
                                                       : "passes the packets on as they came");
            return -EINVAL;
        }
        if (a->edge == FGX_EDGE_TLS && !svc->tls) {
            ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID,
                         "service %s: address %s is a TLS edge: the service needs its "
                         "certificate (--tls-cert FILE --tls-key FILE)",
                         svc->name, text);
            return -EINVAL;
        }
    }
    return 0;
}

/* A TCP service added to the nfqueue layer on a port web services use: its HTTP/2 and TLS
 * reach the regexes as they are on the wire (HPACK, records), which a regex written for
 * HTTP/1.1 does not match. Said, not refused. */
static void service_http_hint(struct ctl_rpc *r, const struct ctl_service *svc)
{
    static const uint16_t web[] = {80, 443, 8000, 8080, 8443};

    if (svc->layer != CTL_LAYER_NFQUEUE || svc->ipproto != IPPROTO_TCP || r->reply.n_warnings)
        return;
    for (size_t i = 0; i < svc->naddrs; i++)
        for (size_t k = 0; k < sizeof(web) / sizeof(web[0]); k++) {
            if (svc->addrs[i].port != web[k])
                continue;
            (void)snprintf(r->tls_warn, sizeof(r->tls_warn),
                           "port %u looks like HTTP: the nfqueue layer scans raw bytes, so "
                           "HTTP/2 (HPACK) and TLS hide requests from the filters; "
                           "--layer proxy --proto http shows every request as HTTP/1.1",
                           svc->addrs[i].port);
            r->tls_warn_ptr = r->tls_warn;
            r->reply.warnings = &r->tls_warn_ptr;
            r->reply.n_warnings = 1;
            return;
        }
}

static int service_tls_store(struct ctl_rpc *r, struct ctl_txn *t, struct ctl_service *svc,
                             const struct ctl_tls_pem *pem)
{
    int rv = ctl_store_service_put(t, svc);

    if (rv == 0)
        rv = ctl_store_tls_put(t, svc->id, pem);
    if (rv < 0) {
        ctl_rpc_store_fail(r, rv);
        return -1;
    }
    return 0;
}

static void do_service_add(struct ctl_rpc *r, const Fgx__Ctl__Request *q)
{
    const Fgx__Ctl__ServiceAdd *a = q->service_add;
    struct ctl_service svc = {.active = true};
    struct ctl_tls_pem pem = {0};
    struct ctl_txn *t = NULL;
    char first[FGX_SVCADDR_TEXT_MAX];

    if (ctl_rpc_check_name(r, a->name) < 0 || ctl_rpc_check_proto(r, a->proto, &svc.ipproto) < 0 ||
        add_addrs(r, a, &svc) < 0 ||
        (a->has_layer && ctl_rpc_check_layer(r, a->layer, &svc.layer) < 0) ||
        (a->has_midstream && ctl_rpc_check_midstream(r, a->midstream, &svc.midstream) < 0) ||
        ctl_rpc_check_capture(r, a->has_capture, a->capture, a->has_capture_conns, a->capture_conns,
                              a->has_capture_bytes, a->capture_bytes, &svc) < 0)
        return;
    snprintf(svc.name, sizeof(svc.name), "%s", a->name);
    if (!a->has_layer)
        svc.layer = CTL_LAYER_NFQUEUE;
    if (check_self(r, &svc) < 0 || check_to(r, a->to, &svc) < 0)
        return;
    if (a->has_tls_cert || a->has_tls_key) {
        if (ctl_rpc_tls_take(r, svc.name, a->has_tls_cert, &a->tls_cert, a->has_tls_key,
                             &a->tls_key, svc.layer, &pem) < 0)
            return;
        svc.tls = true;
    }
    if (service_upstream(r, &svc, a->has_upstream, a->upstream) < 0)
        goto out;
    svc.http = a->has_http && a->http;
    svc.upstream_http1 = a->has_upstream_http1 && a->upstream_http1;
    if (service_http_check(r, &svc) < 0 || service_edge_check(r, &svc) < 0)
        goto out;
    service_http_hint(r, &svc);
    svc.fail_open = a->has_fail_open && a->fail_open;
    if (ctl_rpc_txn_begin(r, true, &t) < 0)
        goto out;
    if (ctl_rpc_check_unique(r, t, &svc) < 0)
        goto out;
    if (svc.tls && service_tls_store(r, t, &svc, &pem) < 0)
        goto out;
    if (service_commit(r, &t, &svc, true) < 0)
        goto out;
    (void)fgx_svcaddr_format(&svc.addrs[0], first, sizeof(first));
    if (!ctl_rpc_failed(r) || r->reply.code == FGX__CTL__CODE__CODE_UNAVAILABLE)
        ctl_health_note(svc.id, CTL_HEALTH_INFO, "added", 0, "service %s added: %s %s%s%s",
                        svc.name, ctl_rpc_proto_name(svc.ipproto), first,
                        svc.naddrs > 1 ? " and more addresses" : "", svc.tls ? ", TLS" : "");
out:
    ctl_tls_pem_release(&pem);
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

/* `service show`: what judges the service's traffic, in the order it does (issue 27): its
 * filters (one hyperscan scan of them all: their order has no effect, there is no knob) and
 * then its script's functions in file order, the script's name and functions without its
 * source. */
static void show_judges(struct ctl_rpc *r, struct ctl_txn *t, const struct ctl_service *svc)
{
    struct ctl_filter *fs = NULL;
    Fgx__Ctl__Script *sc = NULL;
    size_t n = 0;
    int rv = ctl_store_filter_list(t, svc->id, &fs, &n);

    if (rv == 0)
        rv = ctl_rpc_reply_filters(r, t, fs, n); /* owns fs from here */
    if (rv < 0) {
        if (!ctl_rpc_failed(r))
            ctl_rpc_store_fail(r, rv);
        return;
    }
    rv = ctl_script_load(t, svc->id, &sc);
    if (rv == -ENOENT)
        return;
    if (rv == 0 && !r->script) {
        r->script = calloc(1, sizeof(*r->script));
        rv = r->script ? 0 : -ENOMEM;
    }
    if (rv < 0) {
        ctl_script_free(sc);
        ctl_rpc_store_fail(r, rv);
        return;
    }
    sc->has_source = 0; /* `script get` gives the file; show names what runs */
    r->script->script = sc;
    r->reply.script = sc;
}

static void do_service_show(struct ctl_rpc *r, const Fgx__Ctl__Request *q)
{
    const char *ref = ctl_rpc_ref(q->service_show);
    struct ctl_service svc;
    struct ctl_txn *t;

    ctl_stats_refresh(r->ctx, CTL_RPC_STATS_TIMEOUT_MS);
    if (ctl_rpc_txn_begin(r, false, &t) < 0)
        return;
    if (ctl_rpc_service_resolve(r, t, ref, &svc) == 0 &&
        ctl_rpc_reply_services(r, t, &svc, 1) == 0)
        show_judges(r, t, &svc);
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
        ctl_health_note(svc.id, CTL_HEALTH_INFO, active ? "started" : "stopped", 0,
                        "service %s %s", svc.name, active ? "started" : "stopped");
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
        ctl_health_note(svc.id, CTL_HEALTH_INFO, "removed", 0, "service %s (id %u) removed",
                        svc.name, svc.id);
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

static int service_limits_set(struct ctl_rpc *r, const Fgx__Ctl__ServiceSet *a,
                              struct ctl_service *svc);

static void do_service_set(struct ctl_rpc *r, const Fgx__Ctl__Request *q)
{
    const Fgx__Ctl__ServiceSet *a = q->service_set;
    struct ctl_filter *fs = NULL;
    struct ctl_tls_pem pem = {0};
    bool tls_del = false;
    struct ctl_service svc, before;
    struct ctl_txn *t = NULL;
    size_t nfs = 0;
    int rv;

    if (ctl_rpc_txn_begin(r, true, &t) < 0)
        return;
    if (ctl_rpc_service_resolve(r, t, a->ref, &svc) < 0)
        goto out;
    before = svc;
    if ((a->has_port || a->ip) && svc.naddrs > 1) {
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID,
                     "service %s has %zu addresses: change them with service addr add|rm", svc.name,
                     svc.naddrs);
        goto out;
    }
    if (a->has_port) {
        if (ctl_rpc_check_port(r, a->port) < 0)
            goto out;
        svc.addrs[0].port = (uint16_t)a->port;
    }
    if (a->ip) {
        if (ctl_rpc_check_ip(r, a->ip, &svc.addrs[0].cidr) < 0)
            goto out;
        svc.addrs[0].ifname[0] = '\0';
    }
    ctl_service_addrs_sync(&svc);
    if (a->has_layer) {
        enum ctl_layer was = svc.layer;

        if (ctl_rpc_check_layer(r, a->layer, &svc.layer) < 0)
            goto out;
        if (svc.layer == CTL_LAYER_EXTERNAL && was != CTL_LAYER_EXTERNAL) {
            rv = ctl_store_filter_list(t, svc.id, &fs, &nfs);
            if (rv < 0) {
                ctl_rpc_store_fail(r, rv);
                goto out;
            }
            if (nfs > 0) {
                ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID,
                             "service %s has %zu filter(s): on the external layer %s; remove "
                             "them first",
                             svc.name, nfs, CTL_EXTERNAL_NO_FILTER);
                goto out;
            }
            ctl_filters_free(fs, nfs);
            fs = NULL;
            nfs = 0;
            {
                void *sd = NULL;
                size_t sl = 0;

                rv = ctl_store_script_get(t, svc.id, &sd, &sl);
                free(sd);
                if (rv == 0) {
                    ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID,
                                 "service %s has a script: on the external layer %s; remove it "
                                 "first (fgexctl script rm %s)",
                                 svc.name, CTL_EXTERNAL_NO_FILTER, svc.name);
                    goto out;
                }
                if (rv != -ENOENT) {
                    ctl_rpc_store_fail(r, rv);
                    goto out;
                }
            }
            if (!a->to || !a->to[0])
                memset(&svc.ext_to, 0, sizeof(svc.ext_to));
        }
    }
    if (check_to(r, a->to, &svc) < 0)
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
    if (ctl_rpc_check_unique(r, t, &svc) < 0)
        goto out;
    if (a->has_no_tls && a->no_tls) {
        if (a->has_tls_cert || a->has_tls_key || a->has_upstream) {
            ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID,
                         "service %s: --no-tls goes alone, without --tls-cert, --tls-key or "
                         "--upstream",
                         svc.name);
            goto out;
        }
        tls_del = svc.tls;
        svc.tls = svc.upstream_plain = false;
    }
    if (a->has_tls_cert || a->has_tls_key) {
        if (ctl_rpc_tls_take(r, svc.name, a->has_tls_cert, &a->tls_cert, a->has_tls_key,
                             &a->tls_key, svc.layer, &pem) < 0)
            goto out;
        svc.tls = true;
    }
    if (service_upstream(r, &svc, a->has_upstream, a->upstream) < 0)
        goto out;
    if (svc.tls && svc.layer != CTL_LAYER_PROXY) {
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID,
                     "service %s terminates TLS, which needs the proxy layer: the nfqueue layer "
                     "cannot hold keys (service set %s --no-tls first)",
                     svc.name, svc.name);
        goto out;
    }
    if (a->has_http)
        svc.http = a->http;
    if (a->has_upstream_http1)
        svc.upstream_http1 = a->upstream_http1;
    else if (!svc.http)
        svc.upstream_http1 = false; /* --proto tcp: the kind and its upstream go */
    if (service_http_check(r, &svc) < 0 || service_edge_check(r, &svc) < 0)
        goto out;
    if (service_limits_set(r, a, &svc) < 0)
        goto out;
    if (pem.cert != NULL && service_tls_store(r, t, &svc, &pem) < 0)
        goto out;
    if (tls_del && (rv = ctl_store_tls_del(t, svc.id)) < 0) {
        ctl_rpc_store_fail(r, rv);
        goto out;
    }
    if (service_commit(r, &t, &svc, true) < 0)
        goto out;
    if (!ctl_rpc_failed(r)) {
        fgx_info("service %s changed%s", svc.name,
                 pem.cert != NULL ? ": new TLS certificate" : tls_del ? ": TLS off" : "");
        ctl_rpc_health_service_changed(&before, &svc);
    }
out:
    ctl_tls_pem_release(&pem);
    ctl_filters_free(fs, nfs);
    ctl_txn_abort(t);
}

/* --max-conns N --over-limit forward|refuse --first-byte-timeout S (issue 27): the proxy
 * enforces them, counting the service's open connections over all its threads. The NFQUEUE
 * layer does not hold connections (the kernel passes them to the service, fgex sees packets),
 * so a service there keeps none: refused with the reason rather than stored and ignored. */
static int service_limits_set(struct ctl_rpc *r, const Fgx__Ctl__ServiceSet *a,
                              struct ctl_service *svc)
{
    if (a->has_max_conns) {
        if (a->max_conns > CTL_SERVICE_MAX_CONNS_MAX) {
            ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID, "invalid --max-conns %u: 0..%u",
                         a->max_conns, CTL_SERVICE_MAX_CONNS_MAX);
            return -EINVAL;
        }
        svc->max_conns = a->max_conns;
    }
    if (a->has_over_limit_forward)
        svc->over_limit_forward = a->over_limit_forward;
    if (a->has_first_byte_timeout) {
        if (a->first_byte_timeout > CTL_SERVICE_FIRST_BYTE_MAX) {
            ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID,
                         "invalid --first-byte-timeout %u: 0..%u seconds", a->first_byte_timeout,
                         CTL_SERVICE_FIRST_BYTE_MAX);
            return -EINVAL;
        }
        svc->first_byte_timeout = a->first_byte_timeout;
    }
    if (svc->max_conns == 0)
        svc->over_limit_forward = false;
    if ((svc->max_conns > 0 || svc->first_byte_timeout > 0) && svc->layer != CTL_LAYER_PROXY) {
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID,
                     "service %s: --max-conns and --first-byte-timeout need the proxy layer "
                     "(on the nfqueue layer fgex sees packets, not the connections the kernel "
                     "holds): --layer proxy, or 0 to remove them",
                     svc->name);
        return -EINVAL;
    }
    return 0;
}

/* service addr add|rm: one address more or less; the others' connections are untouched (the
 * rules change by one set element, the workers keep the service and its flows). */
static void do_service_addr(struct ctl_rpc *r, const Fgx__Ctl__ServiceAddrChange *a, bool add)
{
    struct ctl_service svc;
    struct ctl_txn *t = NULL;
    struct fgx_svcaddr sa;
    char text[FGX_SVCADDR_TEXT_MAX];
    const char *why = NULL;
    size_t at;

    if (!a) {
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID, "no address given");
        return;
    }
    if (ctl_rpc_txn_begin(r, true, &t) < 0)
        return;
    if (ctl_rpc_service_resolve(r, t, a->ref, &svc) < 0)
        goto out;
    /* Without a port, the service's (its first address's). */
    if (fgx_svcaddr_parse(a->addr, svc.port, &sa, &why) < 0) {
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID, "invalid address \"%s\": %s", a->addr,
                     why ? why : "use ADDR[:PORT]");
        goto out;
    }
    (void)fgx_svcaddr_format(&sa, text, sizeof(text));
    for (at = 0; at < svc.naddrs; at++)
        if (fgx_svcaddr_equal(&svc.addrs[at], &sa))
            break;
    if (add) {
        if (at < svc.naddrs) {
            ctl_rpc_fail(r, FGX__CTL__CODE__CODE_EXISTS, "service %s already has address %s",
                         svc.name, text);
            goto out;
        }
        if (svc.naddrs >= CTL_SERVICE_ADDRS_MAX) {
            ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID,
                         "service %s has %d addresses, the most a service has", svc.name,
                         CTL_SERVICE_ADDRS_MAX);
            goto out;
        }
        svc.addrs[svc.naddrs++] = sa;
        if (check_self(r, &svc) < 0 || service_edge_check(r, &svc) < 0 ||
            ctl_rpc_check_unique(r, t, &svc) < 0)
            goto out;
    } else {
        if (at == svc.naddrs) {
            ctl_rpc_fail(r, FGX__CTL__CODE__CODE_NOT_FOUND, "service %s has no address %s",
                         svc.name, text);
            goto out;
        }
        if (svc.naddrs == 1) {
            ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID,
                         "%s is the only address of service %s: a service needs one (remove "
                         "the service instead)",
                         text, svc.name);
            goto out;
        }
        memmove(&svc.addrs[at], &svc.addrs[at + 1], (svc.naddrs - at - 1) * sizeof(svc.addrs[0]));
        svc.naddrs--;
    }
    ctl_service_addrs_sync(&svc);
    if (service_commit(r, &t, &svc, true) < 0)
        goto out;
    if (!ctl_rpc_failed(r) || r->reply.code == FGX__CTL__CODE__CODE_UNAVAILABLE)
        ctl_health_note(svc.id, CTL_HEALTH_INFO, "addresses", 0, "service %s: address %s %s",
                        svc.name, text, add ? "added" : "removed");
out:
    ctl_txn_abort(t);
}

static void service_addr_add(struct ctl_rpc *r, const Fgx__Ctl__Request *q)
{
    do_service_addr(r, q->service_addr_add, true);
}

static void service_addr_rm(struct ctl_rpc *r, const Fgx__Ctl__Request *q)
{
    do_service_addr(r, q->service_addr_rm, false);
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
    {FGX__CTL__REQUEST__REQ_SERVICE_ADDR_ADD, service_addr_add, CTL_RPC_CHANGE},
    {FGX__CTL__REQUEST__REQ_SERVICE_ADDR_RM, service_addr_rm, CTL_RPC_CHANGE},
    {0, NULL, 0},
};
