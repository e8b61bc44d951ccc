/* controld configuration stage: exports the stored services and filters as one Config message
 * and imports one atomically; imports a service's ruleset file all or nothing. Everything is
 * checked before the first write, and the writes go into the caller's transaction, which the
 * caller aborts on any error, so a refused import changes nothing. */
#include "controld/ctl_config.h"

#include <ctype.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "controld/ctl_compile.h"
#include "controld/ctl_diff.h"
#include "controld/ctl_rpc_tls.h"
#include "controld/ctl_ruleset.h"
#include "fgx/capture.h"
#include "fgx/log.h"
#include "fgx/ruleset.h"

static bool all_digits(const char *s)
{
    if (!s || !*s)
        return false;
    for (; *s; s++)
        if (!isdigit((unsigned char)*s))
            return false;
    return true;
}

static Fgx__Ctl__Dir dir_to_msg(enum fgx_dir d)
{
    return d == FGX_DIR_C2S   ? FGX__CTL__DIR__DIR_C2S
           : d == FGX_DIR_S2C ? FGX__CTL__DIR__DIR_S2C
                              : FGX__CTL__DIR__DIR_BOTH;
}

/* 0 when the message holds a valid direction. */
static int dir_from_msg(bool has, Fgx__Ctl__Dir d, enum fgx_dir *out)
{
    if (!has || d == FGX__CTL__DIR__DIR_BOTH)
        *out = FGX_DIR_BOTH;
    else if (d == FGX__CTL__DIR__DIR_C2S)
        *out = FGX_DIR_C2S;
    else if (d == FGX__CTL__DIR__DIR_S2C)
        *out = FGX_DIR_S2C;
    else
        return -EINVAL;
    return 0;
}

int ctl_config_name_check(const char *name, char *err, size_t errlen)
{
    size_t len = name ? strlen(name) : 0;

    if (len == 0 || len > CTL_NAME_MAX) {
        fgx_err_set(err, errlen, "a service name has 1 to %d characters", CTL_NAME_MAX);
        return -EINVAL;
    }
    for (const char *p = name; *p; p++) {
        if (!isalnum((unsigned char)*p) && *p != '-' && *p != '_' && *p != '.') {
            fgx_err_set(err, errlen,
                    "invalid service name \"%s\": use letters, digits, '-', '_' and '.'", name);
            return -EINVAL;
        }
    }
    if (all_digits(name)) {
        fgx_err_set(err, errlen,
                "invalid service name \"%s\": a name cannot be all digits (that is an id)", name);
        return -EINVAL;
    }
    return 0;
}

int ctl_config_regex_check(const char *regex, bool nocase, uint8_t ipproto, char *err,
                           size_t errlen)
{
    return ctl_config_regex_lint(regex, nocase, ipproto, NULL, err, errlen);
}

int ctl_config_filter_extra_check(bool has_action, int action, const char *label, char *err,
                                  size_t errlen)
{
    char why[128];

    if (has_action && action != FGX__CTL__FILTER_ACTION__FILTER_ACTION_BLOCK &&
        action != FGX__CTL__FILTER_ACTION__FILTER_ACTION_LOG) {
        fgx_err_set(err, errlen, "invalid action: use block or log");
        return -EINVAL;
    }
    if (fgx_label_check(label, why, sizeof(why)) < 0) {
        fgx_err_set(err, errlen, "%s", why);
        return -EINVAL;
    }
    return 0;
}

void ctl_config_filter_extra_to_msg(const struct ctl_filter *f, Fgx__Ctl__Filter *m)
{
    m->has_action = 1;
    m->action = f->log ? FGX__CTL__FILTER_ACTION__FILTER_ACTION_LOG
                       : FGX__CTL__FILTER_ACTION__FILTER_ACTION_BLOCK;
    if (f->label && f->label[0] != '\0')
        m->label = f->label;
    if (f->revision > 0) {
        m->has_revision = m->has_edited = 1;
        m->revision = f->revision;
        m->edited = f->edited;
    }
}

int ctl_config_regex_lint(const char *regex, bool nocase, uint8_t ipproto,
                          struct fgx_pattern_warnings *w, char *err, size_t errlen)
{
    /* libcommon's, so that `fgexctl regex test` refuses in the very same words. */
    return fgx_filter_regex_lint(regex, nocase, ipproto, w, err, errlen);
}

int ctl_config_regex_check_cached(const char *regex, bool nocase, uint8_t ipproto, char *err,
                                  size_t errlen)
{
    return ctl_config_regex_lint_cached(regex, nocase, ipproto, NULL, err, errlen);
}

/* A compile child hands back one message per check: the reason of a refusal, or the warnings
 * of an accepted regex, one a line. */
int ctl_config_regex_lint_text(const char *regex, bool nocase, uint8_t ipproto, char *err,
                               size_t errlen)
{
    struct fgx_pattern_warnings w;
    size_t off = 0;
    int rv = ctl_config_regex_lint(regex, nocase, ipproto, &w, err, errlen);

    if (rv < 0 || errlen == 0)
        return rv;
    err[0] = '\0';
    for (size_t i = 0; i < w.n && off + 1 < errlen; i++) {
        int n = snprintf(err + off, errlen - off, "%s%s", i ? "\n" : "", w.text[i]);

        if (n < 0)
            break;
        off += (size_t)n < errlen - off ? (size_t)n : errlen - off - 1;
    }
    return w.any_stream ? 1 : 0;
}

bool ctl_config_reach_too_wide(uint32_t hits, uint32_t total)
{
    if (total >= CTL_FORCE_MIN_CONNS &&
        (uint64_t)hits * 100 >= (uint64_t)total * CTL_FORCE_SHARE_PCT)
        return true;
    return total >= CTL_FORCE_ALL_MIN && hits == total;
}

int ctl_config_regex_lint_cached(const char *regex, bool nocase, uint8_t ipproto,
                                 struct fgx_pattern_warnings *w, char *err, size_t errlen)
{
    char msg[FGX_PATTERN_WARN_MAX * FGX_PATTERN_WARN_LEN + 8];
    int rv;

    if (w)
        memset(w, 0, sizeof(*w));
    if (!ctl_compile_check_result(regex, nocase, ipproto, &rv, msg, sizeof(msg)))
        return ctl_config_regex_lint(regex, nocase, ipproto, w, err, errlen);
    if (rv < 0) {
        fgx_err_set(err, errlen, "%s", msg);
        return rv;
    }
    if (w)
        w->any_stream = rv > 0;
    /* The child's text: the warnings, one a line. */
    for (char *line = msg, *nl; w && *line && w->n < FGX_PATTERN_WARN_MAX; line = nl + 1) {
        nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        size_t len = strnlen(line, FGX_PATTERN_WARN_LEN - 1);

        memcpy(w->text[w->n], line, len);
        w->text[w->n++][len] = '\0';
        if (!nl)
            break;
    }
    return 0;
}

/* ---- the password switch ---- */

int ctl_config_auth_enabled(struct ctl_txn *t, bool *out)
{
    uint64_t off;
    int rv = ctl_store_u64_get(t, CTL_CONFIG_AUTH_OFF_KEY, &off);

    if (rv == 0)
        *out = off == 0;
    return rv;
}

int ctl_config_auth_enabled_put(struct ctl_txn *t, bool enabled)
{
    return ctl_store_u64_put(t, CTL_CONFIG_AUTH_OFF_KEY, enabled ? 0 : 1);
}

/* ---- export ---- */

int ctl_config_export(struct ctl_txn *t, struct ctl_config_export *out)
{
    size_t ns, nf;
    bool auth = true;
    int rv;

    memset(out, 0, sizeof(*out));
    fgx__ctl__config__init(&out->cfg);
    rv = ctl_store_service_list(t, &out->svcs, &out->nsvcs);
    if (rv < 0)
        return rv;
    rv = ctl_store_filter_list(t, 0, &out->flts, &out->nflts);
    if (rv < 0)
        return rv;
    rv = ctl_config_auth_enabled(t, &auth);
    if (rv < 0)
        return rv;
    ns = out->nsvcs;
    nf = out->nflts;
    out->ips = calloc(ns ? ns : 1, sizeof(*out->ips));
    out->svc_msgs = calloc(ns ? ns : 1, sizeof(*out->svc_msgs));
    out->svc_ptrs = calloc(ns ? ns : 1, sizeof(*out->svc_ptrs));
    out->flt_msgs = calloc(nf ? nf : 1, sizeof(*out->flt_msgs));
    out->flt_ptrs = calloc(nf ? nf : 1, sizeof(*out->flt_ptrs));
    if (!out->ips || !out->svc_msgs || !out->svc_ptrs || !out->flt_msgs || !out->flt_ptrs)
        return -ENOMEM;
    for (size_t i = 0; i < ns; i++) {
        const struct ctl_service *s = &out->svcs[i];
        Fgx__Ctl__Service *m = &out->svc_msgs[i];

        fgx__ctl__service__init(m);
        if (ctl_svcmsg_fill(&out->ips[i], s, m) < 0)
            return -EINVAL;
        m->id = s->id;
        m->name = out->svcs[i].name;
        m->proto =
            s->ipproto == IPPROTO_UDP ? FGX__CTL__PROTO__PROTO_UDP : FGX__CTL__PROTO__PROTO_TCP;
        m->active = s->active;
        m->fail_open = s->fail_open;
        m->has_midstream = 1;
        m->midstream = s->midstream == FGX_MIDSTREAM_SCAN ? FGX__CTL__MIDSTREAM__MIDSTREAM_SCAN
                                                          : FGX__CTL__MIDSTREAM__MIDSTREAM_RESET;
        m->has_created = 1;
        m->created = s->created;
        m->has_capture = 1;
        m->capture = !s->capture_off;
        m->has_capture_conns = s->capture_conns != 0;
        m->capture_conns = s->capture_conns;
        m->has_capture_bytes = s->capture_bytes != 0;
        m->capture_bytes = s->capture_bytes;
        out->svc_ptrs[i] = m;
    }
    for (size_t i = 0; i < nf; i++) {
        const struct ctl_filter *f = &out->flts[i];
        Fgx__Ctl__Filter *m = &out->flt_msgs[i];

        fgx__ctl__filter__init(m);
        m->id = f->id;
        m->service_id = f->service_id;
        m->regex = f->regex;
        m->dir = dir_to_msg(f->dir);
        m->nocase = f->nocase;
        m->active = f->active;
        m->has_created = 1;
        m->created = f->created;
        ctl_config_filter_extra_to_msg(f, m);
        out->flt_ptrs[i] = m;
    }
    out->cfg.n_services = ns;
    out->cfg.services = out->svc_ptrs;
    out->cfg.n_filters = nf;
    out->cfg.filters = out->flt_ptrs;
    out->cfg.has_auth_enabled = 1;
    out->cfg.auth_enabled = auth;
    return ctl_script_export(t, &out->cfg, &out->scripts);
}

void ctl_config_export_release(struct ctl_config_export *e)
{
    if (!e)
        return;
    free(e->svcs);
    free(e->ips);
    free(e->svc_msgs);
    free(e->svc_ptrs);
    ctl_filters_free(e->flts, e->nflts);
    free(e->flt_msgs);
    free(e->flt_ptrs);
    for (size_t i = 0; e->pems != NULL && i < e->nsvcs; i++)
        ctl_tls_pem_release(&e->pems[i]);
    free(e->pems);
    ctl_script_export_release(&e->scripts);
    memset(e, 0, sizeof(*e));
}

int ctl_config_export_tls(struct ctl_txn *t, struct ctl_config_export *e, bool with_secrets)
{
    e->pems = calloc(e->nsvcs ? e->nsvcs : 1, sizeof(*e->pems));
    if (e->pems == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < e->nsvcs; i++) {
        Fgx__Ctl__Service *m = &e->svc_msgs[i];
        struct ctl_tls_pem *p = &e->pems[i];
        int rv;

        if (!e->svcs[i].tls)
            continue;
        m->has_tls = m->tls = 1;
        m->has_upstream = 1;
        m->upstream = e->svcs[i].upstream_plain ? FGX__CTL__UPSTREAM__UPSTREAM_PLAIN
                                                : FGX__CTL__UPSTREAM__UPSTREAM_TLS;
        rv = ctl_store_tls_get(t, e->svcs[i].id, p);
        if (rv == -ENOENT)
            continue;
        if (rv < 0)
            return rv;
        m->has_tls_cert = 1;
        m->tls_cert.data = p->cert;
        m->tls_cert.len = p->cert_len;
        if (with_secrets) {
            m->has_tls_key = 1;
            m->tls_key.data = p->key;
            m->tls_key.len = p->key_len;
        }
    }
    return 0;
}

/* ---- import ---- */

static int service_from_msg(const Fgx__Ctl__Service *m, struct ctl_service *out, char *err,
                            size_t errlen)
{
    const char *name = m->name ? m->name : "";

    memset(out, 0, sizeof(*out));
    if (m->id == 0) {
        fgx_err_set(err, errlen, "service \"%s\": id 0 is not a valid id", name);
        return -EINVAL;
    }
    if (ctl_config_name_check(m->name, err, errlen) < 0)
        return -EINVAL;
    snprintf(out->name, sizeof(out->name), "%s", m->name);
    out->id = m->id;
    if (m->proto == FGX__CTL__PROTO__PROTO_TCP) {
        out->ipproto = IPPROTO_TCP;
    } else if (m->proto == FGX__CTL__PROTO__PROTO_UDP) {
        out->ipproto = IPPROTO_UDP;
    } else {
        fgx_err_set(err, errlen, "service %s: invalid protocol: use tcp or udp", name);
        return -EINVAL;
    }
    /* A backup from before the address list has ip/port alone: one address. */
    if (ctl_svcmsg_parse(m, out, err, errlen) < 0)
        return -EINVAL;
    {
        size_t a, b;

        if (ctl_service_self_overlap(out, &a, &b)) {
            fgx_err_set(err, errlen, "service %s: addresses %zu and %zu overlap", name, a + 1,
                        b + 1);
            return -EINVAL;
        }
    }
    out->active = m->active;
    out->fail_open = m->fail_open;
    if (m->has_midstream && m->midstream != FGX__CTL__MIDSTREAM__MIDSTREAM_RESET &&
        m->midstream != FGX__CTL__MIDSTREAM__MIDSTREAM_SCAN) {
        fgx_err_set(err, errlen, "service %s: invalid midstream policy: use reset or scan", name);
        return -EINVAL;
    }
    out->midstream = m->has_midstream && m->midstream == FGX__CTL__MIDSTREAM__MIDSTREAM_SCAN
                         ? FGX_MIDSTREAM_SCAN
                         : FGX_MIDSTREAM_RESET;
    out->created = m->has_created ? m->created : (uint64_t)time(NULL);
    out->tls = m->has_tls && m->tls;
    out->upstream_plain = out->tls && m->has_upstream &&
                          m->upstream == FGX__CTL__UPSTREAM__UPSTREAM_PLAIN;
    if (out->tls && out->layer != CTL_LAYER_PROXY) {
        fgx_err_set(err, errlen, "service %s: TLS needs the proxy layer", name);
        return -EINVAL;
    }
    if (out->http && (out->layer != CTL_LAYER_PROXY || out->ipproto != IPPROTO_TCP)) {
        fgx_err_set(err, errlen, "service %s: the HTTP kind needs the proxy layer and TCP", name);
        return -EINVAL;
    }
    if (out->tls && !m->has_tls_cert) {
        fgx_err_set(err, errlen, "service %s: TLS without its certificate (tls_cert_pem)", name);
        return -EINVAL;
    }
    out->capture_off = m->has_capture && !m->capture;
    out->capture_conns = m->has_capture_conns ? m->capture_conns : 0;
    out->capture_bytes = m->has_capture_bytes ? m->capture_bytes : 0;
    if (out->capture_conns > FGX_CAP_CONNS_MAX || out->capture_bytes > FGX_CAP_BYTES_MAX) {
        fgx_err_set(err, errlen, "service %s: capture bounds out of range", name);
        return -EINVAL;
    }
    return 0;
}

/* The TLS certificate and key of imported service i (svc): the export's, checked; or, for an
 * export made without --with-secrets, the key this box holds for the same service id and the
 * very same certificate. Anything else is refused: a TLS service with no key cannot run, and
 * an import that quietly dropped its TLS would put the service's plaintext filters in front of
 * ciphertext. */
static int import_tls(struct ctl_txn *t, const Fgx__Ctl__Service *m, const struct ctl_service *svc,
                      struct ctl_tls_pem *out, char *err, size_t errlen)
{
    struct ctl_tls_info info;
    struct ctl_tls_pem have;
    char why[256];
    int rv;

    memset(out, 0, sizeof(*out));
    if (m->has_tls_key) {
        if (ctl_tls_check(m->tls_cert.data, m->tls_cert.len, m->tls_key.data, m->tls_key.len,
                          &info, why, sizeof(why)) < 0) {
            fgx_err_set(err, errlen, "service %s: %s", svc->name, why);
            return -EINVAL;
        }
        out->cert = malloc(m->tls_cert.len + 1);
        out->key = malloc(m->tls_key.len + 1);
        if (out->cert == NULL || out->key == NULL) {
            ctl_tls_pem_release(out);
            return -ENOMEM;
        }
        memcpy(out->cert, m->tls_cert.data, m->tls_cert.len);
        memcpy(out->key, m->tls_key.data, m->tls_key.len);
        out->cert_len = m->tls_cert.len;
        out->key_len = m->tls_key.len;
        return 0;
    }
    rv = ctl_store_tls_get(t, svc->id, &have);
    if (rv == 0 && have.cert_len == m->tls_cert.len &&
        memcmp(have.cert, m->tls_cert.data, have.cert_len) == 0) {
        *out = have;
        return 0;
    }
    if (rv == 0)
        ctl_tls_pem_release(&have);
    else if (rv != -ENOENT)
        return rv;
    fgx_err_set(err, errlen,
            "service %s: the export has no TLS key (made without --with-secrets) and this box "
            "holds none for that certificate: export with --with-secrets, or import it and "
            "run service set %s --tls-cert FILE --tls-key FILE after removing its TLS",
            svc->name, svc->name);
    return -EINVAL;
}

/* Check the whole Config against itself: nothing in the store matters, since it is replaced. */
static int config_check(const Fgx__Ctl__Config *cfg, struct ctl_service *svcs, char *err,
                        size_t errlen)
{
    if (cfg->n_services > CTL_CONFIG_SERVICES_MAX || cfg->n_filters > CTL_CONFIG_FILTERS_MAX) {
        fgx_err_set(err, errlen, "too many services or filters (at most %d and %d)",
                CTL_CONFIG_SERVICES_MAX, CTL_CONFIG_FILTERS_MAX);
        return -EINVAL;
    }
    for (size_t i = 0; i < cfg->n_services; i++) {
        if (service_from_msg(cfg->services[i], &svcs[i], err, errlen) < 0)
            return -EINVAL;
        for (size_t j = 0; j < i; j++) {
            if (svcs[j].id == svcs[i].id) {
                fgx_err_set(err, errlen, "services %s and %s have the same id %u", svcs[j].name,
                        svcs[i].name, svcs[i].id);
                return -EINVAL;
            }
            if (strcmp(svcs[j].name, svcs[i].name) == 0) {
                fgx_err_set(err, errlen, "two services are named %s", svcs[i].name);
                return -EEXIST;
            }
            size_t ia, ib;

            if (ctl_service_overlap(&svcs[j], &svcs[i], &ia, &ib)) {
                char x[FGX_SVCADDR_TEXT_MAX], y[FGX_SVCADDR_TEXT_MAX];

                (void)fgx_svcaddr_format(&svcs[j].addrs[ia], x, sizeof(x));
                (void)fgx_svcaddr_format(&svcs[i].addrs[ib], y, sizeof(y));
                fgx_err_set(err, errlen, "services %s and %s overlap on %s port %u: %s and %s",
                        svcs[j].name, svcs[i].name, svcs[i].ipproto == IPPROTO_UDP ? "udp" : "tcp",
                        (unsigned)svcs[i].addrs[ib].port, x, y);
                return -EEXIST;
            }
        }
    }
    for (size_t i = 0; i < cfg->n_filters; i++) {
        const Fgx__Ctl__Filter *f = cfg->filters[i];
        const struct ctl_service *svc = NULL;
        enum fgx_dir dir;
        char why[768];

        if (f->id == 0) {
            fgx_err_set(err, errlen, "filter %zu of the file: id 0 is not a valid id", i + 1);
            return -EINVAL;
        }
        /* The top bit of a compiled id says "log" (FGX_FILTER_ID_LOG). */
        if (f->id >= FGX_FILTER_ID_MASK) {
            fgx_err_set(err, errlen, "filter %zu of the file: id %u is too large (at most %u)",
                        i + 1, f->id, FGX_FILTER_ID_MASK - 1);
            return -EINVAL;
        }
        for (size_t j = 0; j < i; j++) {
            if (cfg->filters[j]->id == f->id) {
                fgx_err_set(err, errlen, "two filters have the id %u", f->id);
                return -EINVAL;
            }
        }
        for (size_t j = 0; j < cfg->n_services && !svc; j++)
            if (svcs[j].id == f->service_id)
                svc = &svcs[j];
        if (!svc) {
            fgx_err_set(err, errlen, "filter %u: no service with id %u in the file", f->id,
                    f->service_id);
            return -EINVAL;
        }
        if (svc->layer == CTL_LAYER_EXTERNAL) {
            fgx_err_set(err, errlen, "filter %u: service %s is on the external layer: %s", f->id,
                    svc->name, CTL_EXTERNAL_NO_FILTER);
            return -EINVAL;
        }
        if (dir_from_msg(true, f->dir, &dir) < 0) {
            fgx_err_set(err, errlen, "filter %u: invalid direction", f->id);
            return -EINVAL;
        }
        if (ctl_config_regex_check_cached(f->regex, f->nocase, svc->ipproto, why,
                                          sizeof(why)) < 0) {
            fgx_err_set(err, errlen, "filter %u (service %s): %s", f->id, svc->name, why);
            return -EINVAL;
        }
        if (ctl_config_filter_extra_check(f->has_action, f->action, f->label, why, sizeof(why)) <
            0) {
            fgx_err_set(err, errlen, "filter %u (service %s): %s", f->id, svc->name, why);
            return -EINVAL;
        }
    }
    return 0;
}

static int store_fail(int rv, const char *what, char *err, size_t errlen)
{
    fgx_err_set(err, errlen, "%s: %s", what, ctl_store_strerror(rv));
    return rv;
}

/* The live count of a filter: the caller's, else what the store saved. */
static bool label_eq(const char *a, const char *b)
{
    return strcmp(a ? a : "", b ? b : "") == 0;
}

static uint64_t live_blocked(struct ctl_txn *t, const struct ctl_import_opts *o, uint32_t id)
{
    uint64_t v = 0;

    if (o && o->blocked_of)
        return o->blocked_of(o->arg, id);
    (void)ctl_store_blocked_get(t, id, &v);
    return v;
}

static int diff_filter_what(struct ctl_import_opts *o, enum ctl_diff_op op,
                            const struct ctl_filter *f, const char *service, uint64_t blocked,
                            const char *what)
{
    struct ctl_diff_line l = {.op = op,
                              .filter = true,
                              .id = f->id,
                              .regex = f->regex,
                              .dir = f->dir,
                              .nocase = f->nocase,
                              .active = f->active,
                              .log = f->log,
                              .label = f->label,
                              .blocked = blocked};

    if (!o || !o->diff)
        return 0;
    snprintf(l.service, sizeof(l.service), "%s", service);
    snprintf(l.what, sizeof(l.what), "%s", what ? what : "");
    return ctl_diff_push(o->diff, &l);
}

static int diff_filter(struct ctl_import_opts *o, enum ctl_diff_op op, const struct ctl_filter *f,
                       const char *service, uint64_t blocked)
{
    return diff_filter_what(o, op, f, service, blocked, NULL);
}

static int diff_service(struct ctl_import_opts *o, enum ctl_diff_op op,
                        const struct ctl_service *s, const char *what)
{
    struct ctl_diff_line l = {.op = op, .id = s->id, .active = s->active};

    if (!o || !o->diff)
        return 0;
    snprintf(l.service, sizeof(l.service), "%s", s->name);
    snprintf(l.what, sizeof(l.what), "%s", what ? what : "");
    return ctl_diff_push(o->diff, &l);
}

/* Counters to give the in-memory statistics once the transaction is committed. */
static int opts_set_blocked(struct ctl_import_opts *o, uint32_t id, uint64_t v)
{
    void *n;

    if (!o)
        return 0;
    n = realloc(o->fset, (o->nfset + 1) * sizeof(*o->fset));
    if (!n)
        return -ENOMEM;
    o->fset = n;
    o->fset[o->nfset++] = (struct ctl_import_fset){.id = id, .blocked = v};
    return 0;
}

static int opts_set_service(struct ctl_import_opts *o, uint32_t id, const struct ctl_svc_totals *v)
{
    void *n;

    if (!o)
        return 0;
    n = realloc(o->sset, (o->nsset + 1) * sizeof(*o->sset));
    if (!n)
        return -ENOMEM;
    o->sset = n;
    o->sset[o->nsset++] = (struct ctl_import_sset){.id = id, .totals = *v};
    return 0;
}

void ctl_import_opts_release(struct ctl_import_opts *o)
{
    if (!o)
        return;
    free(o->fset);
    free(o->sset);
    o->fset = NULL;
    o->sset = NULL;
    o->nfset = o->nsset = 0;
}

int ctl_config_import(struct ctl_txn *t, const Fgx__Ctl__Config *cfg, char *err, size_t errlen)
{
    return ctl_config_import_ex(t, cfg, NULL, err, errlen);
}

static const struct ctl_service *svc_by_id(const struct ctl_service *v, size_t n, uint32_t id)
{
    for (size_t i = 0; i < n; i++)
        if (v[i].id == id)
            return &v[i];
    return NULL;
}

/* A change, not a replacement: a service whose id the file has stays the same service (its
 * counters stay, whatever of its settings changed); a filter whose id, service, regex,
 * direction and case (ctl_filter_same_pattern()) are the file's stays too, with its counters,
 * and takes the file's action, label and enabled state. What goes takes its blocks
 * to its service's blocked_removed (a total never goes down); what the file brings back with a
 * count (a history snapshot, o->counters) takes them from there again. */
int ctl_config_import_ex(struct ctl_txn *t, const Fgx__Ctl__Config *cfg,
                         struct ctl_import_opts *o, char *err, size_t errlen)
{
    struct ctl_service *svcs = NULL, *old = NULL;
    struct ctl_tls_pem *pems = NULL;
    struct ctl_filter *oldf = NULL;
    size_t nold = 0, noldf = 0;
    uint32_t max_svc = 0, max_flt = 0;
    uint64_t *radd = NULL, *rsub = NULL; /* per cfg service: blocks retired, brought back */
    bool *fkept = NULL;
    bool counters = o && o->counters;
    int rv;

    svcs = calloc(cfg->n_services ? cfg->n_services : 1, sizeof(*svcs));
    radd = calloc(cfg->n_services ? cfg->n_services : 1, sizeof(*radd));
    rsub = calloc(cfg->n_services ? cfg->n_services : 1, sizeof(*rsub));
    fkept = calloc(cfg->n_filters ? cfg->n_filters : 1, sizeof(*fkept));
    if (!svcs || !radd || !rsub || !fkept) {
        rv = -ENOMEM;
        goto out;
    }
    rv = config_check(cfg, svcs, err, errlen);
    if (rv < 0)
        goto out;
    /* Before the old services (and their keys) go. */
    pems = calloc(cfg->n_services ? cfg->n_services : 1, sizeof(*pems));
    if (!pems) {
        rv = -ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < cfg->n_services; i++) {
        if (!svcs[i].tls)
            continue;
        rv = import_tls(t, cfg->services[i], &svcs[i], &pems[i], err, errlen);
        if (rv < 0)
            goto out;
    }
    /* Out with the old: a service takes its filters and counters with it. */
    rv = ctl_store_service_list(t, &old, &nold);
    if (rv == 0)
        rv = ctl_store_filter_list(t, 0, &oldf, &noldf);
    if (rv < 0) {
        store_fail(rv, "cannot read the current configuration", err, errlen);
        goto out;
    }
    /* Filters first, while every old service is there to name them. */
    for (size_t j = 0; j < noldf; j++) {
        const struct ctl_filter *f = &oldf[j];
        const struct ctl_service *os = svc_by_id(old, nold, f->service_id);
        size_t si = 0;
        long keep = -1;

        for (size_t i = 0; i < cfg->n_filters && keep < 0; i++) {
            const Fgx__Ctl__Filter *m = cfg->filters[i];
            struct ctl_filter nf = {
                .regex = m->regex,
                .nocase = m->nocase,
                .log = m->has_action && m->action == FGX__CTL__FILTER_ACTION__FILTER_ACTION_LOG};

            dir_from_msg(true, m->dir, &nf.dir);
            /* the same bytes matched: the same filter, whatever it does on a match */
            if (m->id == f->id && m->service_id == f->service_id && ctl_filter_same_pattern(f, &nf))
                keep = (long)i;
        }
        if (keep >= 0) {
            const Fgx__Ctl__Filter *m = cfg->filters[keep];
            struct ctl_filter nf = *f;
            char what[160];

            fkept[keep] = true;
            nf.active = m->active;
            nf.log = m->has_action && m->action == FGX__CTL__FILTER_ACTION__FILTER_ACTION_LOG;
            if (m->has_created)
                nf.created = m->created;
            /* the backup's label (a name, not part of the identity); nf borrows it */
            nf.label = m->label && m->label[0] ? m->label : NULL;
            ctl_diff_filter(f, &nf, true, what, sizeof(what));
            rv = ctl_store_filter_put(t, &nf);
            if (rv == 0)
                rv = diff_filter_what(o, what[0] ? CTL_DIFF_CHANGE : CTL_DIFF_KEEP, &nf,
                                      os ? os->name : "", live_blocked(t, o, f->id), what);
            if (rv < 0)
                goto store_err;
            continue;
        }
        {
            uint64_t b = live_blocked(t, o, f->id);

            for (si = 0; si < cfg->n_services; si++)
                if (svcs[si].id == f->service_id)
                    break;
            if (si < cfg->n_services)
                radd[si] += b;
            rv = ctl_store_filter_del(t, f->id);
            if (rv == 0)
                rv = diff_filter(o, CTL_DIFF_RM, f, os ? os->name : "", b);
            if (rv < 0)
                goto store_err;
        }
    }
    /* Services: the records go (names and ports may move between them), the kept ones' filters
     * and counters stay under their ids. */
    for (size_t i = 0; i < nold; i++) {
        const struct ctl_service *ns = svc_by_id(svcs, cfg->n_services, old[i].id);

        rv = ns ? ctl_store_service_del_record(t, old[i].id) : ctl_store_service_del(t, old[i].id);
        if (rv == 0 && !ns)
            rv = diff_service(o, CTL_DIFF_RM, &old[i], NULL);
        if (rv < 0)
            goto store_err;
    }
    for (size_t i = 0; i < cfg->n_services; i++) {
        const Fgx__Ctl__Service *m = cfg->services[i];
        const struct ctl_service *os = svc_by_id(old, nold, svcs[i].id);
        char what[160];

        rv = ctl_store_service_put(t, &svcs[i]);
        if (rv == 0 && svcs[i].tls)
            rv = ctl_store_tls_put(t, svcs[i].id, &pems[i]);
        if (rv < 0) {
            store_fail(rv, svcs[i].name, err, errlen);
            goto out;
        }
        if (svcs[i].id > max_svc)
            max_svc = svcs[i].id;
        if (os) {
            ctl_diff_service(os, &svcs[i], what, sizeof(what));
            rv = diff_service(o, what[0] ? CTL_DIFF_CHANGE : CTL_DIFF_KEEP, &svcs[i], what);
        } else {
            /* A new service under this id: what the file says it counted (a history snapshot),
             * else zero, whatever an older service of that id left in memory. */
            struct ctl_svc_totals tot = {0};

            if (counters) {
                tot.packets = m->has_packets ? m->packets : 0;
                tot.bytes = m->has_bytes ? m->bytes : 0;
                tot.accepted = m->has_accepted ? m->accepted : 0;
                tot.dropped = m->has_dropped ? m->dropped : 0;
                radd[i] += m->has_blocked_removed ? m->blocked_removed : 0;
            }
            rv = ctl_store_svc_totals_put(t, svcs[i].id, &tot);
            if (rv == 0)
                rv = opts_set_service(o, svcs[i].id, &tot);
            if (rv == 0)
                rv = diff_service(o, CTL_DIFF_ADD, &svcs[i], NULL);
        }
        if (rv < 0)
            goto store_err;
    }
    for (size_t i = 0; i < cfg->n_filters; i++) {
        const Fgx__Ctl__Filter *m = cfg->filters[i];
        struct ctl_filter f = {
            .id = m->id,
            .service_id = m->service_id,
            .regex = m->regex,
            .nocase = m->nocase,
            .active = m->active,
            .created = m->has_created ? m->created : (uint64_t)time(NULL),
            .log = m->has_action && m->action == FGX__CTL__FILTER_ACTION__FILTER_ACTION_LOG,
            .label = m->label && m->label[0] ? m->label : NULL,
            /* absent in backups made before edits (issue 27): never edited */
            .revision = m->has_revision ? m->revision : 0,
            .edited = m->has_edited ? m->edited : 0,
        };
        uint64_t b = counters && m->has_blocked ? m->blocked : 0;
        size_t si;

        if (f.id > max_flt)
            max_flt = f.id;
        if (fkept[i])
            continue;
        dir_from_msg(true, m->dir, &f.dir);
        rv = ctl_store_filter_put(t, &f);
        if (rv < 0) {
            fgx_err_set(err, errlen, "filter %u: %s", m->id, ctl_store_strerror(rv));
            goto out;
        }
        for (si = 0; si < cfg->n_services; si++)
            if (svcs[si].id == f.service_id)
                break;
        /* Blocks coming back to a service that kept them as a removed filter's. */
        if (b > 0 && svc_by_id(old, nold, f.service_id))
            rsub[si] += b;
        rv = ctl_store_blocked_set(t, f.id, b);
        if (rv == 0)
            rv = opts_set_blocked(o, f.id, b);
        if (rv == 0)
            rv = diff_filter(o, CTL_DIFF_ADD, &f, svcs[si].name, b);
        if (rv < 0)
            goto store_err;
    }
    for (size_t i = 0; i < cfg->n_services; i++) {
        uint64_t r = 0;

        if (svc_by_id(old, nold, svcs[i].id)) {
            rv = ctl_store_retired_get(t, svcs[i].id, &r);
            if (rv < 0)
                goto store_err;
        }
        r += radd[i];
        r = r > rsub[i] ? r - rsub[i] : 0;
        rv = ctl_store_retired_set(t, svcs[i].id, r);
        if (rv < 0)
            goto store_err;
    }
    /* Ids are never reused: the next ones allocated come after every imported one. */
    /* Whether a password is asked for is the box's, never a backup's: a backup taken while
     * auth was off must not open the box it is restored on (issue 24). */
    rv = ctl_store_ids_reserve(t, max_svc, max_flt);
    if (rv < 0) {
        store_fail(rv, "cannot store the configuration", err, errlen);
        goto out;
    }
    rv = ctl_script_import(t, cfg, err, errlen);
    goto out;
store_err:
    store_fail(rv, "cannot store the configuration", err, errlen);
out:
    for (size_t i = 0; pems != NULL && i < cfg->n_services; i++)
        ctl_tls_pem_release(&pems[i]);
    free(pems);
    free(svcs);
    free(old);
    free(radd);
    free(rsub);
    free(fkept);
    ctl_filters_free(oldf, noldf);
    return rv;
}

/* ---- ruleset files ---- */

static uint32_t spec_line(const Fgx__Ctl__FilterImport *imp, size_t i)
{
    return imp->filters[i]->has_line ? imp->filters[i]->line : (uint32_t)(i + 1);
}

/* Compile the service's active filters as the ruleset stage will, so that a set that only fails
 * together (too big, say) is refused here, naming a line of the file when the culprit is one. */
static int service_compile(struct ctl_txn *t, const struct ctl_service *svc,
                           const Fgx__Ctl__FilterImport *imp, const uint32_t *ids, char *err,
                           size_t errlen)
{
    static const enum fgx_dir dirs[] = {FGX_DIR_C2S, FGX_DIR_S2C};
    struct fgx_pattern *pats = NULL;
    struct ctl_filter *fs = NULL;
    size_t nfs = 0, n = 0;
    char herr[768];
    int rv;

    rv = ctl_store_filter_list(t, svc->id, &fs, &nfs);
    if (rv < 0)
        return store_fail(rv, svc->name, err, errlen);
    pats = calloc(nfs ? nfs : 1, sizeof(*pats));
    if (!pats) {
        rv = -ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < nfs; i++) {
        if (!fs[i].active)
            continue;
        pats[n++] = (struct fgx_pattern){.filter_id = ctl_filter_hs_id(&fs[i]),
                                         .regex = fs[i].regex,
                                         .dir = fs[i].dir,
                                         .nocase = fs[i].nocase};
    }
    for (size_t d = 0; d < 2; d++) {
        struct fgx_blob b = {0};
        uint64_t key;
        unsigned bad;

        /* Through the dbcache (and the compile session): the ruleset built next in this
         * transaction finds the same database there instead of compiling it again. */
        herr[0] = '\0';
        rv = ctl_ruleset_db_get(t, pats, n, dirs[d], svc->ipproto, &b, &key, herr, sizeof(herr));
        fgx_blob_release(&b);
        if (rv == 0)
            continue;
        if (herr[0] == '\0') {
            store_fail(rv, svc->name, err, errlen);
            goto out;
        }
        fgx_err_set(err, errlen, "service %s: %s", svc->name, herr);
        if (sscanf(herr, "filter %u:", &bad) == 1) {
            for (size_t i = 0; i < imp->n_filters; i++) {
                if (ids[i] == bad) {
                    const char *msg = strchr(herr, ':');
                    fgx_err_set(err, errlen, "line %u: %s", spec_line(imp, i),
                                msg ? msg + 2 : herr);
                    break;
                }
            }
        }
        rv = -EINVAL;
        goto out;
    }
out:
    free(pats);
    ctl_filters_free(fs, nfs);
    return rv;
}

int ctl_config_filter_import(struct ctl_txn *t, const Fgx__Ctl__FilterImport *imp, uint32_t *svc_id,
                             char *err, size_t errlen)
{
    struct ctl_config_warning *w = NULL;
    size_t nw = 0;
    int rv = ctl_config_filter_import_warn(t, imp, svc_id, &w, &nw, err, errlen);

    free(w);
    return rv;
}

static int warning_cmp(const void *a, const void *b)
{
    uint32_t x = ((const struct ctl_config_warning *)a)->filter_id;
    uint32_t y = ((const struct ctl_config_warning *)b)->filter_id;

    return x < y ? -1 : x > y;
}

int ctl_config_filter_import_warn(struct ctl_txn *t, const Fgx__Ctl__FilterImport *imp,
                                  uint32_t *svc_id, struct ctl_config_warning **warns,
                                  size_t *nwarns, char *err, size_t errlen)
{
    return ctl_config_filter_import_ex(t, imp, NULL, svc_id, warns, nwarns, err, errlen);
}

int ctl_config_filter_import_ex(struct ctl_txn *t, const Fgx__Ctl__FilterImport *imp,
                                struct ctl_import_opts *o, uint32_t *svc_id,
                                struct ctl_config_warning **warns, size_t *nwarns, char *err,
                                size_t errlen)
{
    bool whole = (imp->has_replace && imp->replace) || (imp->has_sync && imp->sync);
    struct ctl_filter *want = NULL;
    bool *kept = NULL, changed_active = false;
    char what[160] = "";
    long *match = NULL;
    uint64_t retired = 0;
    struct ctl_config_warning *w = NULL;
    struct fgx_pattern_warnings pw;
    struct ctl_filter *old = NULL;
    struct ctl_service svc;
    uint32_t *ids = NULL;
    size_t nold = 0, nw = 0;
    int rv;

    *warns = NULL;
    *nwarns = 0;

    if (!imp->service || !*imp->service) {
        fgx_err_set(err, errlen, "no service given");
        return -EINVAL;
    }
    if (all_digits(imp->service)) {
        unsigned long long v = strtoull(imp->service, NULL, 10);
        rv = v == 0 || v > UINT32_MAX ? -ENOENT : ctl_store_service_get(t, (uint32_t)v, &svc);
    } else {
        rv = ctl_store_service_by_name(t, imp->service, &svc);
    }
    if (rv == -ENOENT) {
        fgx_err_set(err, errlen, "no such service: %s", imp->service);
        return rv;
    }
    if (rv < 0)
        return store_fail(rv, imp->service, err, errlen);
    if (svc.layer == CTL_LAYER_EXTERNAL && imp->n_filters > 0) {
        fgx_err_set(err, errlen, "service %s is on the external layer: %s", svc.name,
                CTL_EXTERNAL_NO_FILTER);
        return -EINVAL;
    }
    if (imp->n_filters > CTL_CONFIG_FILTERS_MAX) {
        fgx_err_set(err, errlen, "too many filters (at most %d)", CTL_CONFIG_FILTERS_MAX);
        return -EINVAL;
    }
    ids = calloc(imp->n_filters ? imp->n_filters : 1, sizeof(*ids));
    if (!ids)
        return -ENOMEM;
    /* Every line first: the first bad one is named and nothing is written. */
    for (size_t i = 0; i < imp->n_filters; i++) {
        const Fgx__Ctl__FilterSpec *s = imp->filters[i];
        enum fgx_dir dir;
        char why[768];

        if (dir_from_msg(s->has_dir, s->dir, &dir) < 0) {
            fgx_err_set(err, errlen, "line %u: invalid direction", spec_line(imp, i));
            rv = -EINVAL;
            goto out;
        }
        if (ctl_config_regex_lint_cached(s->regex, s->has_nocase && s->nocase, svc.ipproto, &pw,
                                         why, sizeof(why)) < 0 ||
            ctl_config_filter_extra_check(s->has_action, s->action, s->label, why, sizeof(why)) <
                0) {
            fgx_err_set(err, errlen, "line %u: %s", spec_line(imp, i), why);
            rv = -EINVAL;
            goto out;
        }
        if (pw.n == 0)
            continue;
        if ((nw & (nw - 1)) == 0) { /* grow at powers of two: most files have few */
            struct ctl_config_warning *g = realloc(w, (nw ? 2 * nw : 1) * sizeof(*w));

            if (!g) {
                rv = -ENOMEM;
                goto out;
            }
            w = g;
        }
        w[nw] = (struct ctl_config_warning){.filter_id = (uint32_t)i, .line = spec_line(imp, i)};
        w[nw++].w = pw;
    }
    rv = ctl_store_filter_list(t, svc.id, &old, &nold);
    if (rv < 0) {
        store_fail(rv, svc.name, err, errlen);
        goto out;
    }
    want = calloc(imp->n_filters ? imp->n_filters : 1, sizeof(*want));
    match = calloc(imp->n_filters ? imp->n_filters : 1, sizeof(*match));
    kept = calloc(nold ? nold : 1, sizeof(*kept));
    if (!want || !match || !kept) {
        rv = -ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < imp->n_filters; i++) {
        const Fgx__Ctl__FilterSpec *s = imp->filters[i];

        want[i] = (struct ctl_filter){
            .service_id = svc.id,
            .regex = s->regex,
            .nocase = s->has_nocase && s->nocase,
            .active = !s->has_active || s->active,
            .log = s->has_action && s->action == FGX__CTL__FILTER_ACTION__FILTER_ACTION_LOG,
            .label = s->label && s->label[0] ? s->label : NULL};
        dir_from_msg(s->has_dir, s->dir, &want[i].dir);
    }
    {
        size_t da, db;

        /* A whole file (--replace, --sync) keeps a filter whose regex, direction and case it
         * has, whatever its action or label says now: those are changes of that filter. */
        if (ctl_diff_filters(old, nold, want, imp->n_filters, whole, match, kept, &da, &db) < 0) {
            if (ctl_filter_same(&want[da], &want[db]) && label_eq(want[da].label, want[db].label))
                fgx_err_set(err, errlen, "line %u: identical to line %u", spec_line(imp, db),
                        spec_line(imp, da));
            else
                fgx_err_set(err, errlen,
                        "line %u: the same regex, direction and case as line %u (one filter: "
                        "give it one action and label)",
                        spec_line(imp, db), spec_line(imp, da));
            rv = -EEXIST;
            goto out;
        }
    }
    for (size_t i = 0; i < imp->n_filters && !whole; i++) {
        /* Adding to what is there: a line identical to a filter the service has is refused,
         * with that filter's id. */
        if (match[i] >= 0) {
            fgx_err_set(err, errlen, "line %u: identical to filter %u of service %s",
                    spec_line(imp, i), old[match[i]].id, svc.name);
            if (o)
                o->duplicate_of = old[match[i]].id;
            rv = -EEXIST;
            goto out;
        }
    }
    for (size_t j = 0; j < nold; j++) {
        uint64_t b;

        if (kept[j] || !whole) {
            if (kept[j]) {
                /* --replace takes the file's enabled state; --sync keeps the service's. Both
                 * take the file's action and label: what the filter does on a match and its
                 * name, not another filter (issue 24: its id and counters stay). */
                bool sync = imp->has_sync && imp->sync;

                for (size_t i = 0; i < imp->n_filters; i++) {
                    bool act = !sync && old[j].active != want[i].active;
                    bool lab = !label_eq(old[j].label, want[i].label);
                    bool log = old[j].log != want[i].log;

                    if (match[i] == (long)j && (act || lab || log)) {
                        /* in words before old[j] takes the file's action and label */
                        ctl_diff_filter(&old[j], &want[i], !sync, what, sizeof(what));
                        if (act)
                            old[j].active = want[i].active;
                        old[j].log = want[i].log;
                        if (lab) {
                            char *l = want[i].label ? strdup(want[i].label) : NULL;

                            if (want[i].label && !l) {
                                rv = -ENOMEM;
                                goto out;
                            }
                            free(old[j].label);
                            old[j].label = l;
                        }
                        rv = ctl_store_filter_put(t, &old[j]);
                        if (rv < 0) {
                            store_fail(rv, svc.name, err, errlen);
                            goto out;
                        }
                        changed_active = true;
                    }
                }
            }
            if (kept[j]) {
                rv = diff_filter_what(o, changed_active ? CTL_DIFF_CHANGE : CTL_DIFF_KEEP, &old[j],
                                      svc.name, live_blocked(t, o, old[j].id),
                                      changed_active ? what : NULL);
                changed_active = false;
                if (rv < 0)
                    goto out;
            }
            continue;
        }
        /* Removed: its blocks stay in the service's total. */
        b = live_blocked(t, o, old[j].id);
        retired += b;
        rv = ctl_store_filter_del(t, old[j].id);
        if (rv == 0)
            rv = diff_filter(o, CTL_DIFF_RM, &old[j], svc.name, b);
        if (rv < 0) {
            store_fail(rv, svc.name, err, errlen);
            goto out;
        }
    }
    if (retired > 0) {
        uint64_t r;

        rv = ctl_store_retired_get(t, svc.id, &r);
        if (rv == 0)
            rv = ctl_store_retired_set(t, svc.id, r + retired);
        if (rv < 0) {
            store_fail(rv, svc.name, err, errlen);
            goto out;
        }
    }
    for (size_t i = 0; i < imp->n_filters; i++) {
        struct ctl_filter f = want[i];

        if (match[i] >= 0) {
            ids[i] = old[match[i]].id;
            continue;
        }
        rv = ctl_store_filter_put(t, &f);
        if (rv == 0)
            rv = ctl_store_blocked_set(t, f.id, 0);
        if (rv == 0)
            rv = opts_set_blocked(o, f.id, 0);
        if (rv == 0)
            rv = diff_filter(o, CTL_DIFF_ADD, &f, svc.name, 0);
        if (rv < 0) {
            fgx_err_set(err, errlen, "line %u: %s", spec_line(imp, i), ctl_store_strerror(rv));
            goto out;
        }
        ids[i] = f.id;
    }
    rv = service_compile(t, &svc, imp, ids, err, errlen);
    if (rv < 0)
        goto out;
    *svc_id = svc.id;
    /* filter_id held the line's index until the filters had ids. */
    for (size_t i = 0; i < nw; i++)
        w[i].filter_id = ids[w[i].filter_id];
    /* Kept filters have older ids than the new ones: the reply looks them up by id. */
    if (nw > 1)
        qsort(w, nw, sizeof(*w), warning_cmp);
    *warns = w;
    *nwarns = nw;
    w = NULL;
out:
    free(w);
    free(ids);
    free(want);
    free(match);
    free(kept);
    ctl_filters_free(old, nold);
    return rv;
}
