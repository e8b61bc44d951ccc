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
#include "controld/ctl_ruleset.h"
#include "fgx/log.h"
#include "fgx/ruleset.h"

static void err_set(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void err_set(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

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
        err_set(err, errlen, "a service name has 1 to %d characters", CTL_NAME_MAX);
        return -EINVAL;
    }
    for (const char *p = name; *p; p++) {
        if (!isalnum((unsigned char)*p) && *p != '-' && *p != '_' && *p != '.') {
            err_set(err, errlen,
                    "invalid service name \"%s\": use letters, digits, '-', '_' and '.'", name);
            return -EINVAL;
        }
    }
    if (all_digits(name)) {
        err_set(err, errlen,
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

int ctl_config_regex_lint(const char *regex, bool nocase, uint8_t ipproto,
                          struct fgx_pattern_warnings *w, char *err, size_t errlen)
{
    char herr[512];

    if (w)
        memset(w, 0, sizeof(*w));

    if (!regex || !*regex) {
        err_set(err, errlen, "empty regex");
        return -EINVAL;
    }
    if (strlen(regex) > CTL_CONFIG_REGEX_MAX) {
        err_set(err, errlen, "regex longer than %d bytes", CTL_CONFIG_REGEX_MAX);
        return -EINVAL;
    }
    if (fgx_pattern_lint(regex, nocase, ipproto, w, herr, sizeof(herr)) < 0) {
        err_set(err, errlen, "invalid regex \"%.200s\": %s", regex, herr);
        return -EINVAL;
    }
    return 0;
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
    return 0;
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
        err_set(err, errlen, "%s", msg);
        return rv;
    }
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

        if (fgx_cidr_format(&s->addr, out->ips[i], sizeof(out->ips[i])) < 0)
            out->ips[i][0] = '\0';
        fgx__ctl__service__init(m);
        m->id = s->id;
        m->name = out->svcs[i].name;
        m->proto =
            s->ipproto == IPPROTO_UDP ? FGX__CTL__PROTO__PROTO_UDP : FGX__CTL__PROTO__PROTO_TCP;
        m->ip = out->ips[i];
        m->port = s->port;
        m->layer = s->layer == CTL_LAYER_PROXY ? FGX__CTL__LAYER__LAYER_PROXY
                                               : FGX__CTL__LAYER__LAYER_NFQUEUE;
        m->active = s->active;
        m->fail_open = s->fail_open;
        m->has_midstream = 1;
        m->midstream = s->midstream == FGX_MIDSTREAM_SCAN ? FGX__CTL__MIDSTREAM__MIDSTREAM_SCAN
                                                          : FGX__CTL__MIDSTREAM__MIDSTREAM_RESET;
        m->has_created = 1;
        m->created = s->created;
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
    ctl_script_export_release(&e->scripts);
    memset(e, 0, sizeof(*e));
}

/* ---- import ---- */

static int service_from_msg(const Fgx__Ctl__Service *m, struct ctl_service *out, char *err,
                            size_t errlen)
{
    const char *name = m->name ? m->name : "";

    memset(out, 0, sizeof(*out));
    if (m->id == 0) {
        err_set(err, errlen, "service \"%s\": id 0 is not a valid id", name);
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
        err_set(err, errlen, "service %s: invalid protocol: use tcp or udp", name);
        return -EINVAL;
    }
    if (m->port == 0 || m->port > 65535) {
        err_set(err, errlen, "service %s: invalid port %u: use 1..65535", name, m->port);
        return -EINVAL;
    }
    out->port = (uint16_t)m->port;
    if (fgx_cidr_parse(m->ip, &out->addr) < 0) {
        err_set(err, errlen, "service %s: invalid address \"%s\"", name, m->ip);
        return -EINVAL;
    }
    if (m->layer == FGX__CTL__LAYER__LAYER_NFQUEUE) {
        out->layer = CTL_LAYER_NFQUEUE;
    } else if (m->layer == FGX__CTL__LAYER__LAYER_PROXY && out->ipproto == IPPROTO_TCP) {
        out->layer = CTL_LAYER_PROXY;
    } else {
        err_set(err, errlen, "service %s: %s", name,
                m->layer == FGX__CTL__LAYER__LAYER_PROXY
                    ? "the proxy layer carries TCP only; a UDP service uses nfqueue"
                    : "invalid layer: use nfqueue or proxy");
        return -EINVAL;
    }
    out->active = m->active;
    out->fail_open = m->fail_open;
    if (m->has_midstream && m->midstream != FGX__CTL__MIDSTREAM__MIDSTREAM_RESET &&
        m->midstream != FGX__CTL__MIDSTREAM__MIDSTREAM_SCAN) {
        err_set(err, errlen, "service %s: invalid midstream policy: use reset or scan", name);
        return -EINVAL;
    }
    out->midstream = m->has_midstream && m->midstream == FGX__CTL__MIDSTREAM__MIDSTREAM_SCAN
                         ? FGX_MIDSTREAM_SCAN
                         : FGX_MIDSTREAM_RESET;
    out->created = m->has_created ? m->created : (uint64_t)time(NULL);
    return 0;
}

/* Check the whole Config against itself: nothing in the store matters, since it is replaced. */
static int config_check(const Fgx__Ctl__Config *cfg, struct ctl_service *svcs, char *err,
                        size_t errlen)
{
    if (cfg->n_services > CTL_CONFIG_SERVICES_MAX || cfg->n_filters > CTL_CONFIG_FILTERS_MAX) {
        err_set(err, errlen, "too many services or filters (at most %d and %d)",
                CTL_CONFIG_SERVICES_MAX, CTL_CONFIG_FILTERS_MAX);
        return -EINVAL;
    }
    for (size_t i = 0; i < cfg->n_services; i++) {
        if (service_from_msg(cfg->services[i], &svcs[i], err, errlen) < 0)
            return -EINVAL;
        for (size_t j = 0; j < i; j++) {
            if (svcs[j].id == svcs[i].id) {
                err_set(err, errlen, "services %s and %s have the same id %u", svcs[j].name,
                        svcs[i].name, svcs[i].id);
                return -EINVAL;
            }
            if (strcmp(svcs[j].name, svcs[i].name) == 0) {
                err_set(err, errlen, "two services are named %s", svcs[i].name);
                return -EEXIST;
            }
            if (svcs[j].ipproto == svcs[i].ipproto && svcs[j].port == svcs[i].port) {
                err_set(err, errlen, "services %s and %s both use %s port %u", svcs[j].name,
                        svcs[i].name, svcs[i].ipproto == IPPROTO_UDP ? "udp" : "tcp", svcs[i].port);
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
            err_set(err, errlen, "filter %zu of the file: id 0 is not a valid id", i + 1);
            return -EINVAL;
        }
        for (size_t j = 0; j < i; j++) {
            if (cfg->filters[j]->id == f->id) {
                err_set(err, errlen, "two filters have the id %u", f->id);
                return -EINVAL;
            }
        }
        for (size_t j = 0; j < cfg->n_services && !svc; j++)
            if (svcs[j].id == f->service_id)
                svc = &svcs[j];
        if (!svc) {
            err_set(err, errlen, "filter %u: no service with id %u in the file", f->id,
                    f->service_id);
            return -EINVAL;
        }
        if (dir_from_msg(true, f->dir, &dir) < 0) {
            err_set(err, errlen, "filter %u: invalid direction", f->id);
            return -EINVAL;
        }
        if (ctl_config_regex_check_cached(f->regex, f->nocase, svc->ipproto, why,
                                          sizeof(why)) < 0) {
            err_set(err, errlen, "filter %u (service %s): %s", f->id, svc->name, why);
            return -EINVAL;
        }
    }
    return 0;
}

static int store_fail(int rv, const char *what, char *err, size_t errlen)
{
    err_set(err, errlen, "%s: %s", what, ctl_store_strerror(rv));
    return rv;
}

int ctl_config_import(struct ctl_txn *t, const Fgx__Ctl__Config *cfg, char *err, size_t errlen)
{
    struct ctl_service *svcs = NULL, *old = NULL;
    struct ctl_filter *oldf = NULL;
    size_t nold = 0, noldf = 0;
    uint32_t max_svc = 0, max_flt = 0;
    int rv;

    svcs = calloc(cfg->n_services ? cfg->n_services : 1, sizeof(*svcs));
    if (!svcs)
        return -ENOMEM;
    rv = config_check(cfg, svcs, err, errlen);
    if (rv < 0)
        goto out;
    /* Out with the old: a service takes its filters and counters with it. */
    rv = ctl_store_service_list(t, &old, &nold);
    for (size_t i = 0; rv == 0 && i < nold; i++)
        rv = ctl_store_service_del(t, old[i].id);
    if (rv == 0)
        rv = ctl_store_filter_list(t, 0, &oldf, &noldf);
    for (size_t i = 0; rv == 0 && i < noldf; i++)
        rv = ctl_store_filter_del(t, oldf[i].id);
    if (rv < 0) {
        store_fail(rv, "cannot remove the current configuration", err, errlen);
        goto out;
    }
    for (size_t i = 0; i < cfg->n_services; i++) {
        rv = ctl_store_service_put(t, &svcs[i]);
        if (rv < 0) {
            store_fail(rv, svcs[i].name, err, errlen);
            goto out;
        }
        if (svcs[i].id > max_svc)
            max_svc = svcs[i].id;
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
        };

        dir_from_msg(true, m->dir, &f.dir);
        rv = ctl_store_filter_put(t, &f);
        if (rv < 0) {
            err_set(err, errlen, "filter %u: %s", m->id, ctl_store_strerror(rv));
            goto out;
        }
        if (f.id > max_flt)
            max_flt = f.id;
    }
    /* Ids are never reused: the next ones allocated come after every imported one. */
    rv = ctl_store_ids_reserve(t, max_svc, max_flt);
    if (rv == 0 && cfg->has_auth_enabled)
        rv = ctl_config_auth_enabled_put(t, cfg->auth_enabled);
    if (rv < 0) {
        store_fail(rv, "cannot store the configuration", err, errlen);
        goto out;
    }
    rv = ctl_script_import(t, cfg, err, errlen);
out:
    free(svcs);
    free(old);
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
        pats[n++] = (struct fgx_pattern){
            .filter_id = fs[i].id, .regex = fs[i].regex, .dir = fs[i].dir, .nocase = fs[i].nocase};
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
        err_set(err, errlen, "service %s: %s", svc->name, herr);
        if (sscanf(herr, "filter %u:", &bad) == 1) {
            for (size_t i = 0; i < imp->n_filters; i++) {
                if (ids[i] == bad) {
                    const char *msg = strchr(herr, ':');
                    err_set(err, errlen, "line %u: %s", spec_line(imp, i), msg ? msg + 2 : herr);
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

int ctl_config_filter_import_warn(struct ctl_txn *t, const Fgx__Ctl__FilterImport *imp,
                                  uint32_t *svc_id, struct ctl_config_warning **warns,
                                  size_t *nwarns, char *err, size_t errlen)
{
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
        err_set(err, errlen, "no service given");
        return -EINVAL;
    }
    if (all_digits(imp->service)) {
        unsigned long long v = strtoull(imp->service, NULL, 10);
        rv = v == 0 || v > UINT32_MAX ? -ENOENT : ctl_store_service_get(t, (uint32_t)v, &svc);
    } else {
        rv = ctl_store_service_by_name(t, imp->service, &svc);
    }
    if (rv == -ENOENT) {
        err_set(err, errlen, "no such service: %s", imp->service);
        return rv;
    }
    if (rv < 0)
        return store_fail(rv, imp->service, err, errlen);
    if (imp->n_filters > CTL_CONFIG_FILTERS_MAX) {
        err_set(err, errlen, "too many filters (at most %d)", CTL_CONFIG_FILTERS_MAX);
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
            err_set(err, errlen, "line %u: invalid direction", spec_line(imp, i));
            rv = -EINVAL;
            goto out;
        }
        if (ctl_config_regex_lint_cached(s->regex, s->has_nocase && s->nocase, svc.ipproto, &pw,
                                         why, sizeof(why)) < 0) {
            err_set(err, errlen, "line %u: %s", spec_line(imp, i), why);
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
    if (imp->has_replace && imp->replace) {
        rv = ctl_store_filter_list(t, svc.id, &old, &nold);
        for (size_t i = 0; rv == 0 && i < nold; i++)
            rv = ctl_store_filter_del(t, old[i].id);
        if (rv < 0) {
            store_fail(rv, svc.name, err, errlen);
            goto out;
        }
    }
    for (size_t i = 0; i < imp->n_filters; i++) {
        const Fgx__Ctl__FilterSpec *s = imp->filters[i];
        struct ctl_filter f = {
            .service_id = svc.id,
            .regex = s->regex,
            .nocase = s->has_nocase && s->nocase,
            .active = !s->has_active || s->active,
        };

        dir_from_msg(s->has_dir, s->dir, &f.dir);
        rv = ctl_store_filter_put(t, &f);
        if (rv < 0) {
            err_set(err, errlen, "line %u: %s", spec_line(imp, i), ctl_store_strerror(rv));
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
    *warns = w;
    *nwarns = nw;
    w = NULL;
out:
    free(w);
    free(ids);
    ctl_filters_free(old, nold);
    return rv;
}
