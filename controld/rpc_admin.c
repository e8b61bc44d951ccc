/* controld control API, the administration family: status (and version), login, logout,
 * passwd, the password switch, the certificate, and the whole configuration's export and
 * import. */
#include "controld/ctl_rpc_cmd.h"

#include "controld/ctl_rpc.h"

#include "controld/ctl_listen.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include "controld/ctl_nftwatch.h"
#include "controld/ctl_stats.h"
#include "fgx/log.h"

/* The TLS listeners that are on, into r->listeners (ctl_listen.h). */
static void status_listeners(struct ctl_rpc *r)
{
    size_t n = 0;

    for (int l = 0; l < CTL_LISTENER_N; l++) {
        Fgx__Ctl__Listener *o = &r->listeners[n];
        struct ctl_listen_view v;

        ctl_listen_view_get((enum ctl_listener)l, &v);
        if (!v.on)
            continue;
        fgx__ctl__listener__init(o);
        o->name = (char *)ctl_listener_name((enum ctl_listener)l);
#define SET(f, x) (o->has_##f = 1, o->f = (x))
        SET(open, v.open);
        SET(pending, v.pending);
        SET(max, v.max);
        SET(per_src, v.per_src);
        SET(handshake_s, v.handshake_s);
        SET(closed_timeout, v.hits[CTL_HIT_TIMEOUT]);
        SET(closed_per_src, v.hits[CTL_HIT_PER_SRC]);
        SET(closed_full, v.hits[CTL_HIT_FULL]);
        if (l == CTL_LISTENER_WEB) {
            SET(streams, v.streams);
            SET(streams_per_session, v.streams_per_session);
            SET(streams_per_src, v.streams_per_src);
            SET(streams_max, v.streams_max);
            SET(streams_refused, v.hits[CTL_HIT_STREAM_SESSION] + v.hits[CTL_HIT_STREAM_SRC] +
                                     v.hits[CTL_HIT_STREAM_FULL]);
        }
#undef SET
        r->listener_ptrs[n] = o;
        n++;
    }
    r->status.n_listeners = n;
    r->status.listeners = r->listener_ptrs;
}

/* What fgex had to put right by itself (issue 24): rules restored, a store short of room. The
 * strings are copies that live until the next status (the loop packs a reply before it serves
 * the next request). */
static void status_health(struct ctl_rpc *r)
{
    static char rules_what[sizeof(((struct ctl_nftwatch_info *)0)->last_what)];
    static char store_what[sizeof(((struct ctl_store_health *)0)->what)];
    struct ctl_nftwatch_info wi;
    struct ctl_store_health sh;
    Fgx__Ctl__Status *st = &r->status;

    ctl_nftwatch_get(r->ctx->watch, &wi);
    st->has_rules_restored = 1;
    st->rules_restored = wi.restores;
    st->has_rules_restored_last = 1;
    st->rules_restored_last = wi.last_ns / 1000000000u;
    st->has_rules_gap_ms = 1;
    st->rules_gap_ms = wi.last_gap_ms;
    st->has_rules_gap_max_ms = 1;
    st->rules_gap_max_ms = wi.max_gap_ms;
    st->has_rules_fight = 1;
    st->rules_fight = wi.fighting;
    if (wi.restores > 0) {
        /* the reply is packed before the next request: a static copy is enough */
        (void)snprintf(rules_what, sizeof(rules_what), "%s", wi.last_what);
        st->rules_removed = rules_what;
    }
    ctl_store_health_get(r->ctx->store, &sh);
    st->has_store_degraded = 1;
    st->store_degraded = sh.degraded;
    if (sh.degraded) {
        (void)snprintf(store_what, sizeof(store_what), "%s", sh.what);
        st->store_error = (char *)ctl_store_space_text(sh.err);
        st->store_failed = store_what;
        st->has_store_since = 1;
        st->store_since = sh.since;
        st->has_store_failures = 1;
        st->store_failures = sh.failures;
    }
    if (r->ctx->stats) {
        st->has_events_unsaved = 1;
        st->events_unsaved = ctl_stats_events_unsaved(r->ctx->stats);
    }
}

static void do_status(struct ctl_rpc *r, const Fgx__Ctl__Request *q)
{
    (void)q;
    /* Fresh worker counters; a worker that does not answer is reported as it was. */
    ctl_stats_refresh(r->ctx, CTL_RPC_STATS_TIMEOUT_MS);
    struct ctl_service *svcs = NULL;
    struct ctl_txn *t;
    size_t n = 0, active = 0;
    int rv;

    if (ctl_rpc_txn_begin(r, false, &t) < 0)
        return;
    rv = ctl_store_service_list(t, &svcs, &n);
    ctl_txn_abort(t);
    if (rv < 0) {
        ctl_rpc_store_fail(r, rv);
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
    r->status.n_workers = ctl_rpc_reply_workers(r);
    r->status.workers = r->workers;
    status_listeners(r);
    status_health(r);
    r->reply.status = &r->status;
}

static bool rpc_has_auth(struct ctl_rpc *r)
{
    if (r->ctx->auth)
        return true;
    ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID, "this controld has no password support");
    return false;
}

static void do_login(struct ctl_rpc *r, const Fgx__Ctl__Request *q)
{
    const Fgx__Ctl__Login *l = q->login;
    struct ctl_auth *a = r->ctx->auth;
    uint64_t now = ctl_rpc_mono_ms(), left;
    char who[64];

    if (!rpc_has_auth(r))
        return;
    ctl_auth_peer_format(r->peer, who, sizeof(who));
    if (!ctl_auth_has_password(a)) {
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_AUTH,
                     "no password is set: set one with fgexctl passwd on the vulnbox, or controld "
                     "--init-password");
        return;
    }
    /* Before the hash: a locked-out peer costs no yescrypt time and learns nothing. */
    left = ctl_auth_delay_left(a, r->peer, now);
    if (left > 0) {
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_AUTH,
                     "too many failed logins from %s: try again in %llu s", who,
                     (unsigned long long)(left + 999) / 1000);
        /* for the web page's 429 Retry-After (ctl_web.c) */
        r->reply.has_retry_after = true;
        r->reply.retry_after = (uint32_t)((left + 999) / 1000);
        return;
    }
    if (!l || ctl_auth_verify(l->password, ctl_auth_hash_get(a)) != 0) {
        left = ctl_auth_login_failed(a, r->peer, now);
        fgx_warn("failed login from %s; its next attempt is refused for %llu ms", who,
                 (unsigned long long)left);
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_AUTH, "wrong password");
        return;
    }
    ctl_auth_login_ok(a, r->peer);
    if (ctl_auth_session_new(a, now, r->token) < 0) {
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_ERROR, "cannot create a session");
        return;
    }
    r->reply.token = r->token;
    ctl_rpc_reply_auth_state(r);
    fgx_info("login from %s", who);
}

/* While auth is off anyone the --allow list lets in may send anything: setting a password or
 * turning auth on from there would lock the team out of its own box. So both need the local
 * socket then; once auth is on, a logged-in remote client may do them. */
static bool rpc_auth_change_allowed(struct ctl_rpc *r, const char *what)
{
    if (ctl_auth_enabled(r->ctx->auth) || r->peer == NULL || r->peer->family == 0)
        return true;
    /* INVALID, not AUTH: the caller's session (if any) is fine, and the page must not take it
     * for a lost login. */
    ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID,
                 "%s: refused over the network while auth is off (anyone allowed to connect "
                 "could lock the team out): run it on the vulnbox, over the local socket",
                 what);
    return false;
}

static void do_passwd(struct ctl_rpc *r, const Fgx__Ctl__Request *q)
{
    const Fgx__Ctl__Passwd *p = q->passwd;
    const char *token = q->token;
    struct ctl_auth *a = r->ctx->auth;
    char err[256], who[64];
    size_t n;
    int rv;

    if (!rpc_has_auth(r))
        return;
    if (!p) {
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID, "no password given");
        return;
    }
    if (!rpc_auth_change_allowed(r, "passwd"))
        return;
    ctl_auth_peer_format(r->peer, who, sizeof(who));
    rv = ctl_auth_password_save(a, r->ctx->store, p->password, err, sizeof(err));
    if (rv < 0) {
        ctl_rpc_fail(r, rv == -EINVAL ? FGX__CTL__CODE__CODE_INVALID : FGX__CTL__CODE__CODE_ERROR,
                     "%s", err);
        return;
    }
    ctl_rpc_history_setting(r, q,
                            p->has_expire_sessions && p->expire_sessions
                                ? "passwd --expire-sessions"
                                : "passwd");
    if (p->has_expire_sessions && p->expire_sessions) {
        /* The caller's own session stays (a local caller may have none). */
        n = ctl_auth_session_drop_others(a, token);
        fgx_info("password changed from %s; %zu other session(s) logged out", who, n);
    } else {
        fgx_info("password changed from %s", who);
    }
    ctl_rpc_reply_auth_state(r);
}

static void do_auth_set(struct ctl_rpc *r, const Fgx__Ctl__Request *q)
{
    const Fgx__Ctl__AuthSet *s = q->auth_set;
    struct ctl_auth *a = r->ctx->auth;
    char who[64];
    int rv;

    if (!rpc_has_auth(r))
        return;
    if (!s) {
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID, "auth: say on or off");
        return;
    }
    if (s->enabled && !rpc_auth_change_allowed(r, "auth on"))
        return;
    if (s->enabled && !ctl_auth_has_password(a)) {
        ctl_rpc_fail(
            r, FGX__CTL__CODE__CODE_INVALID,
            "set a password first (fgexctl passwd): with none, no remote client could log in");
        return;
    }
    rv = ctl_auth_enabled_save(a, r->ctx->store, s->enabled);
    if (rv < 0) {
        ctl_rpc_store_fail(r, rv);
        return;
    }
    ctl_auth_peer_format(r->peer, who, sizeof(who));
    ctl_rpc_history_setting(r, q, s->enabled ? "auth on" : "auth off");
    if (s->enabled)
        fgx_info("password requirement turned on from %s", who);
    else
        fgx_warn("password requirement turned off from %s: any client that can connect controls "
                 "the firewall",
                 who);
    ctl_rpc_reply_auth_state(r);
}

static void do_cert(struct ctl_rpc *r, const Fgx__Ctl__Request *q)
{
    (void)q;
    const char *fp = r->ctx->auth ? ctl_auth_fingerprint(r->ctx->auth) : "";

    if (!*fp) {
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_NOT_FOUND,
                     "controld has no TLS listener (start it with --listen tls+tcp://ADDR:PORT)");
        return;
    }
    r->reply.fingerprint = (char *)fp;
}

/* Idempotent: a client forgetting its token is logged out whether or not the session lived. */
static void do_logout(struct ctl_rpc *r, const Fgx__Ctl__Request *q)
{
    const char *token = q->token;
    if (r->ctx->auth && token && ctl_auth_session_drop(r->ctx->auth, token) == 0)
        fgx_info("logout");
}

static void do_config_export(struct ctl_rpc *r, const Fgx__Ctl__Request *q)
{
    struct ctl_txn *t;
    int rv;

    if (ctl_rpc_txn_begin(r, false, &t) < 0)
        return;
    rv = ctl_config_export(t, &r->cfg_exp);
    if (rv == 0)
        rv = ctl_rpc_fw_export(r, t, &r->cfg_exp.cfg);
    if (rv == 0)
        rv = ctl_rpc_game_export(r, t, &r->cfg_exp.cfg);
    if (rv == 0)
        rv = ctl_config_export_tls(t, &r->cfg_exp, q->has_with_secrets && q->with_secrets);
    ctl_txn_abort(t);
    if (rv < 0) {
        ctl_rpc_store_fail(r, rv);
        return;
    }
    r->reply.config = &r->cfg_exp.cfg;
}

static void do_config_import(struct ctl_rpc *r, const Fgx__Ctl__Request *q)
{
    const Fgx__Ctl__Config *cfg = q->config_import;
    struct ctl_txn *t = NULL;
    char err[768];
    int rv;

    if (!cfg) {
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID, "no configuration given");
        return;
    }
    if (ctl_rpc_txn_begin(r, true, &t) < 0)
        return;
    ctl_rpc_import_opts(r, false);
    rv = ctl_config_import_ex(t, cfg, &r->imp, err, sizeof(err));
    if (rv == 0)
        rv = ctl_rpc_fw_import(r, t, cfg, err, sizeof(err));
    if (rv == 0)
        rv = ctl_rpc_game_import(r, t, cfg, err, sizeof(err));
    if (rv < 0) {
        ctl_rpc_fail(r, ctl_rpc_config_code(rv), "%s", err);
        goto out;
    }
    if (ctl_rpc_reply_diff(r) < 0)
        goto out;
    /* The auth switch (and the password) stay as they are, dry run or not: the reply says so. */
    ctl_rpc_reply_auth_state(r);
    r->reply.has_auth_not_imported = cfg->has_auth_enabled;
    r->reply.auth_not_imported = cfg->has_auth_enabled;
    if (q->has_dry_run && q->dry_run) {
        ctl_rpc_dry_finish(r, &t);
        goto out;
    }
    /* The full compile happens here: a set that cannot compile is aborted with everything else. */
    ctl_rpc_finish(r, &t, true);
    if (ctl_rpc_failed(r) && r->reply.code != FGX__CTL__CODE__CODE_UNAVAILABLE)
        goto out;
    if (!r->deferred) {
        ctl_rpc_fw_imported(r);
        ctl_rpc_game_imported(r);
    }
    fgx_info("configuration imported: %zu services, %zu filters", cfg->n_services, cfg->n_filters);
out:
    ctl_txn_abort(t);
}

/* ---- interfaces (issue 27) ---- */

#define IFACES_MAX 256
#define IFACE_ADDRS_MAX 32
#define IFACE_SVCS_MAX 64

struct ctl_rpc_ifaces {
    Fgx__Ctl__Interface msg[IFACES_MAX], *ptrs[IFACES_MAX];
    char names[IFACES_MAX][IF_NAMESIZE + 1];
    char addr_text[IFACES_MAX][IFACE_ADDRS_MAX][INET6_ADDRSTRLEN + 5];
    char *addr_ptrs[IFACES_MAX][IFACE_ADDRS_MAX];
    char *svc_ptrs[IFACES_MAX][IFACE_SVCS_MAX];
    struct ctl_service *svcs;
    size_t n;
};

void ctl_rpc_ifaces_free(struct ctl_rpc_ifaces *x)
{
    if (!x)
        return;
    free(x->svcs);
    free(x);
}

static size_t iface_find(struct ctl_rpc_ifaces *x, const char *name)
{
    size_t i;

    for (i = 0; i < x->n; i++)
        if (strcmp(x->names[i], name) == 0)
            return i;
    if (x->n == IFACES_MAX)
        return IFACES_MAX;
    fgx__ctl__interface__init(&x->msg[i]);
    (void)snprintf(x->names[i], sizeof(x->names[i]), "%s", name);
    x->msg[i].name = x->names[i];
    x->msg[i].addrs = x->addr_ptrs[i];
    x->msg[i].services = x->svc_ptrs[i];
    x->ptrs[i] = &x->msg[i];
    return x->n++;
}

static int prefix_len(const uint8_t *mask, size_t len)
{
    int n = 0;

    for (size_t i = 0; i < len; i++)
        for (int b = 7; b >= 0; b--)
            n += (mask[i] >> b) & 1;
    return n;
}

/* A service uses interface i: an address of it names i, or is a prefix holding one of i's. */
static bool iface_used(const struct ctl_service *svc, const char *name, const struct ifaddrs *all)
{
    for (size_t k = 0; k < svc->naddrs; k++) {
        const struct fgx_svcaddr *a = &svc->addrs[k];

        if (a->ifname[0] != '\0') {
            if (strcmp(a->ifname, name) == 0)
                return true;
            continue;
        }
        if (a->cidr.family == 0)
            continue; /* every address: every interface, said once by `*` */
        for (const struct ifaddrs *p = all; p; p = p->ifa_next) {
            const struct sockaddr *sa = p->ifa_addr;

            if (!sa || strcmp(p->ifa_name, name) != 0)
                continue;
            if (sa->sa_family == AF_INET &&
                fgx_cidr_contains(&a->cidr, 4,
                                  (const uint8_t *)&((const struct sockaddr_in *)(const void *)sa)
                                      ->sin_addr))
                return true;
            if (sa->sa_family == AF_INET6 &&
                fgx_cidr_contains(&a->cidr, 6,
                                  (const uint8_t *)&((const struct sockaddr_in6 *)(const void *)sa)
                                      ->sin6_addr))
                return true;
        }
    }
    return false;
}

/* `fgexctl interfaces`: what getifaddrs(3) sees in controld's network namespace, each
 * interface with its addresses and the services that listen on it by name or address. */
static void do_interfaces(struct ctl_rpc *r, const Fgx__Ctl__Request *q)
{
    struct ctl_rpc_ifaces *x = calloc(1, sizeof(*x));
    struct ifaddrs *all = NULL;
    struct ctl_txn *t = NULL;
    size_t nsvcs = 0;
    int rv;

    (void)q;
    if (!x) {
        ctl_rpc_store_fail(r, -ENOMEM);
        return;
    }
    r->ifaces = x;
    if (getifaddrs(&all) == -1) {
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_ERROR, "cannot list the interfaces: %s",
                     strerror(errno));
        return;
    }
    for (struct ifaddrs *p = all; p; p = p->ifa_next) {
        size_t i = iface_find(x, p->ifa_name);
        Fgx__Ctl__Interface *m;
        const void *ad = NULL, *mk = NULL;
        int fam = p->ifa_addr ? p->ifa_addr->sa_family : AF_UNSPEC;

        if (i == IFACES_MAX)
            break;
        m = &x->msg[i];
        m->has_index = m->has_up = m->has_running = m->has_loopback = 1;
        m->index = if_nametoindex(p->ifa_name);
        m->up = (p->ifa_flags & IFF_UP) != 0;
        m->running = (p->ifa_flags & IFF_RUNNING) != 0;
        m->loopback = (p->ifa_flags & IFF_LOOPBACK) != 0;
        if (fam == AF_INET) {
            ad = &((const struct sockaddr_in *)(const void *)p->ifa_addr)->sin_addr;
            mk = p->ifa_netmask ? &((const struct sockaddr_in *)(const void *)p->ifa_netmask)->sin_addr
                                : NULL;
        } else if (fam == AF_INET6) {
            ad = &((const struct sockaddr_in6 *)(const void *)p->ifa_addr)->sin6_addr;
            mk = p->ifa_netmask
                     ? &((const struct sockaddr_in6 *)(const void *)p->ifa_netmask)->sin6_addr
                     : NULL;
        }
        if (ad && m->n_addrs < IFACE_ADDRS_MAX) {
            char *txt = x->addr_text[i][m->n_addrs];

            if (inet_ntop(fam, ad, txt, INET6_ADDRSTRLEN)) {
                size_t l = strlen(txt);

                (void)snprintf(txt + l, sizeof(x->addr_text[i][0]) - l, "/%d",
                               mk ? prefix_len(mk, fam == AF_INET ? 4 : 16)
                                  : (fam == AF_INET ? 32 : 128));
                x->addr_ptrs[i][m->n_addrs++] = txt;
            }
        }
    }
    if (ctl_rpc_txn_begin(r, false, &t) == 0) {
        rv = ctl_store_service_list(t, &x->svcs, &nsvcs);
        if (rv < 0)
            ctl_rpc_store_fail(r, rv);
        ctl_txn_abort(t);
    }
    for (size_t i = 0; i < x->n; i++)
        for (size_t k = 0; k < nsvcs && x->msg[i].n_services < IFACE_SVCS_MAX; k++)
            if (iface_used(&x->svcs[k], x->names[i], all))
                x->svc_ptrs[i][x->msg[i].n_services++] = x->svcs[k].name;
    freeifaddrs(all);
    r->reply.n_interfaces = x->n;
    r->reply.interfaces = x->ptrs;
}

const struct ctl_rpc_cmd ctl_rpc_admin_cmds[] = {
    {FGX__CTL__REQUEST__REQ_STATUS, do_status, 0},
    {FGX__CTL__REQUEST__REQ_LOGIN, do_login, CTL_RPC_OPEN},
    {FGX__CTL__REQUEST__REQ_PASSWD, do_passwd, 0},
    {FGX__CTL__REQUEST__REQ_AUTH_SET, do_auth_set, 0},
    {FGX__CTL__REQUEST__REQ_CERT, do_cert, CTL_RPC_OPEN},
    {FGX__CTL__REQUEST__REQ_LOGOUT, do_logout, 0},
    {FGX__CTL__REQUEST__REQ_CONFIG_EXPORT, do_config_export, 0},
    {FGX__CTL__REQUEST__REQ_CONFIG_IMPORT, do_config_import, CTL_RPC_CHANGE},
    {FGX__CTL__REQUEST__REQ_INTERFACES, do_interfaces, 0},
    {0, NULL, 0},
};
