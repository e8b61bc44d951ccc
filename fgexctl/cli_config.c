/* fgexctl backup stage: Config <-> JSON. The file nests each service's filters inside it, so a
 * filter cannot point at a service that is not there; reading is strict (unknown keys, wrong
 * types and impossible values are refused with their position) because an import replaces the
 * whole configuration and a typo must not silently drop a setting. */
#include "cli_config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cli_args.h"
#include "cli_json.h"
#include "cli_jsonparse.h"

/* ---- names of enumerations ----------------------------------------------------------------- */

static const char *proto_str(Fgx__Ctl__Proto p)
{
    return p == FGX__CTL__PROTO__PROTO_UDP ? "udp" : "tcp";
}

static const char *layer_str(Fgx__Ctl__Layer l)
{
    return l == FGX__CTL__LAYER__LAYER_PROXY ? "proxy" : "nfqueue";
}

static const char *dir_str(Fgx__Ctl__Dir d)
{
    if (d == FGX__CTL__DIR__DIR_C2S)
        return "c2s";
    return d == FGX__CTL__DIR__DIR_S2C ? "s2c" : "both";
}

/* ---- writing ------------------------------------------------------------------------------- */

static void write_filter(struct cli_json *j, const Fgx__Ctl__Filter *fl)
{
    cli_json_obj_begin(j);
    cli_json_key(j, "id");
    cli_json_u64(j, fl->id);
    cli_json_key_bytes(j, "regex", fl->regex, fl->regex ? strlen(fl->regex) : 0);
    cli_json_key(j, "dir");
    cli_json_str(j, dir_str(fl->dir));
    cli_json_key(j, "nocase");
    cli_json_bool(j, fl->nocase);
    cli_json_key(j, "active");
    cli_json_bool(j, fl->active);
    cli_json_obj_end(j);
}

int cli_config_write(FILE *f, const Fgx__Ctl__Config *cfg, char *err, size_t errlen)
{
    struct cli_json j;

    for (size_t k = 0; k < cfg->n_filters; k++) {
        bool found = false;

        for (size_t i = 0; i < cfg->n_services && !found; i++)
            found = cfg->services[i]->id == cfg->filters[k]->service_id;
        if (!found) {
            (void)snprintf(err, errlen,
                           "filter %u belongs to service %u, which is not in the "
                           "configuration",
                           cfg->filters[k]->id, cfg->filters[k]->service_id);
            return -EINVAL;
        }
    }
    cli_json_init(&j, f);
    j.pretty = true;
    cli_json_obj_begin(&j);
    cli_json_key(&j, "format");
    cli_json_str(&j, CLI_CONFIG_FORMAT);
    cli_json_key(&j, "version");
    cli_json_u64(&j, CLI_CONFIG_VERSION);
    cli_json_key(&j, "settings");
    cli_json_obj_begin(&j);
    if (cfg->has_auth_enabled) {
        cli_json_key(&j, "auth_enabled");
        cli_json_bool(&j, cfg->auth_enabled);
    }
    cli_json_obj_end(&j);
    cli_json_key(&j, "services");
    cli_json_arr_begin(&j);
    for (size_t i = 0; i < cfg->n_services; i++) {
        const Fgx__Ctl__Service *s = cfg->services[i];

        cli_json_obj_begin(&j);
        cli_json_key(&j, "id");
        cli_json_u64(&j, s->id);
        cli_json_key(&j, "name");
        cli_json_str(&j, s->name);
        cli_json_key(&j, "proto");
        cli_json_str(&j, proto_str(s->proto));
        cli_json_key(&j, "ip");
        cli_json_str(&j, s->ip ? s->ip : "");
        cli_json_key(&j, "port");
        cli_json_u64(&j, s->port);
        cli_json_key(&j, "layer");
        cli_json_str(&j, layer_str(s->layer));
        cli_json_key(&j, "active");
        cli_json_bool(&j, s->active);
        cli_json_key(&j, "fail_open");
        cli_json_bool(&j, s->fail_open);
        cli_json_key(&j, "midstream");
        cli_json_str(&j, s->has_midstream && s->midstream == FGX__CTL__MIDSTREAM__MIDSTREAM_SCAN
                             ? "scan"
                             : "reset");
        cli_json_key(&j, "filters");
        cli_json_arr_begin(&j);
        for (size_t k = 0; k < cfg->n_filters; k++)
            if (cfg->filters[k]->service_id == s->id)
                write_filter(&j, cfg->filters[k]);
        cli_json_arr_end(&j);
        cli_json_obj_end(&j);
    }
    cli_json_arr_end(&j);
    cli_json_obj_end(&j);
    cli_json_end(&j);
    return (fflush(f) == EOF || ferror(f)) ? -EIO : 0;
}

/* ---- reading ------------------------------------------------------------------------------- */

struct rd {
    char *err;
    size_t errlen;
    uint64_t version; /* of the file: 1 reads \u0080..\u00ff in a regex as bytes */
    Fgx__Ctl__Config *cfg;
    size_t cap_services, cap_filters;
};

static int bad(struct rd *r, const struct cli_jv *at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int bad(struct rd *r, const struct cli_jv *at, const char *fmt, ...)
{
    char what[256];
    va_list ap;

    va_start(ap, fmt);
    (void)vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    (void)snprintf(r->err, r->errlen, "line %u, column %u: %s", at->line, at->col, what);
    return -EINVAL;
}

/* Refuse any key of obj not in the NULL-terminated list allowed. */
static int known_keys(struct rd *r, const struct cli_jv *obj, const char *where,
                      const char *const *allowed)
{
    for (size_t i = 0; i < obj->n; i++) {
        const char *const *a = allowed;

        while (*a && strcmp(*a, obj->keys[i]) != 0)
            a++;
        if (!*a)
            return bad(r, obj->items[i], "%s: unknown key \"%.60s\"", where, obj->keys[i]);
    }
    return 0;
}

static int want_type(struct rd *r, const struct cli_jv *v, enum cli_jv_type t, const char *where)
{
    if (v->type != t)
        return bad(r, v, "%s must be %s %s, not %s %s", where,
                   t == CLI_JV_ARR || t == CLI_JV_OBJ ? "an" : "a", cli_jv_type_name(t),
                   v->type == CLI_JV_ARR || v->type == CLI_JV_OBJ ? "an" : "a",
                   cli_jv_type_name(v->type));
    return 0;
}

/* A string member: required, or absent (*out = dflt). The copy is malloc'd. */
static int get_str(struct rd *r, const struct cli_jv *obj, const char *key, const char *where,
                   const char *dflt, char **out)
{
    const struct cli_jv *v = cli_jv_get(obj, key);
    char what[96];
    int rc;

    (void)snprintf(what, sizeof(what), "%s.%s", where, key);
    if (!v) {
        if (!dflt)
            return bad(r, obj, "%s: \"%s\" is missing", where, key);
        *out = strdup(dflt);
        return *out ? 0 : -ENOMEM;
    }
    rc = want_type(r, v, CLI_JV_STR, what);
    if (rc < 0)
        return rc;
    if (strlen(v->s) != v->len)
        return bad(r, v, "%s cannot contain \\u0000", what);
    *out = strdup(v->s);
    return *out ? 0 : -ENOMEM;
}

static int get_bool(struct rd *r, const struct cli_jv *obj, const char *key, const char *where,
                    bool dflt, protobuf_c_boolean *out)
{
    const struct cli_jv *v = cli_jv_get(obj, key);
    char what[96];
    int rc;

    (void)snprintf(what, sizeof(what), "%s.%s", where, key);
    if (!v) {
        *out = dflt;
        return 0;
    }
    rc = want_type(r, v, CLI_JV_BOOL, what);
    if (rc == 0)
        *out = v->b;
    return rc;
}

/* An integer member from 1 to max; *has says whether it was there. */
static int get_uint(struct rd *r, const struct cli_jv *obj, const char *key, const char *where,
                    uint64_t max, bool *has, uint32_t *out)
{
    const struct cli_jv *v = cli_jv_get(obj, key);
    uint64_t x;

    *has = v != NULL;
    if (!v)
        return 0;
    if (cli_jv_uint(v, max, &x) < 0 || x < 1)
        return bad(r, v, "%s.%s must be an integer from 1 to %llu", where, key,
                   (unsigned long long)max);
    *out = (uint32_t)x;
    return 0;
}

/* One of the words names[0..n) (values[i] for names[i]); absent: dflt. */
static int get_enum(struct rd *r, const struct cli_jv *obj, const char *key, const char *where,
                    const char *const *names, const int *values, size_t n, int dflt, int *out)
{
    const struct cli_jv *v = cli_jv_get(obj, key);
    char what[96];
    int rc;

    (void)snprintf(what, sizeof(what), "%s.%s", where, key);
    if (!v) {
        *out = dflt;
        return 0;
    }
    rc = want_type(r, v, CLI_JV_STR, what);
    if (rc < 0)
        return rc;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(v->s, names[i]) == 0) {
            *out = values[i];
            return 0;
        }
    }
    return bad(r, v, "%s: \"%.40s\" is not one of %s%s%s%s%s", what, v->s, names[0],
               n > 1 ? ", " : "", n > 1 ? names[1] : "", n > 2 ? ", " : "", n > 2 ? names[2] : "");
}

static bool all_digits(const char *s)
{
    if (!*s)
        return false;
    for (; *s; s++)
        if (*s < '0' || *s > '9')
            return false;
    return true;
}

/* A filter's regex: "regex" (a string, which a version-1 file may have written with bytes as
 * \u00XX) or "regex_b64" (its bytes in base64), exactly one of them. *out is malloc'd. */
static int get_regex(struct rd *r, const struct cli_jv *fv, const char *where, char **out)
{
    const struct cli_jv *sv = cli_jv_get(fv, "regex"), *bv = cli_jv_get(fv, "regex_b64");
    const char *bytes;
    char what[96];
    size_t n;
    int rc;

    if (sv && bv)
        return bad(r, bv,
                   "%s has both \"regex\" and \"regex_b64\": give one (\"regex\" for a regex "
                   "that is valid UTF-8, \"regex_b64\" for its bytes in base64)",
                   where);
    if (!sv && !bv)
        return bad(r, fv, "%s: \"regex\" is missing", where);
    (void)snprintf(what, sizeof(what), "%s.%s", where, sv ? "regex" : "regex_b64");
    rc = want_type(r, sv ? sv : bv, CLI_JV_STR, what);
    if (rc < 0)
        return rc;
    if (sv) {
        bool legacy = r->version == 1 && sv->legacy;

        bytes = legacy ? sv->legacy : sv->s;
        n = legacy ? sv->legacy_len : sv->len;
        if (memchr(bytes, '\0', n))
            return bad(r, sv, "%s cannot contain \\u0000", what);
        *out = strndup(bytes, n);
        return *out ? 0 : -ENOMEM;
    }
    *out = malloc(bv->len / 4 * 3 + 1);
    if (!*out)
        return -ENOMEM;
    if (cli_b64_decode(bv->s, bv->len, (unsigned char *)*out, &n) < 0)
        return bad(r, bv, "%s is not base64 (RFC 4648: A-Z a-z 0-9 + /, padded with '=')", what);
    (*out)[n] = '\0';
    if (memchr(*out, '\0', n))
        return bad(r, bv, "%s holds a NUL byte, which a regex cannot hold (write \\x00)", what);
    return 0;
}

static int read_filter(struct rd *r, const struct cli_jv *fv, uint32_t service_id,
                       const char *where, bool *has_id)
{
    static const char *const keys[] = {"id", "regex", "regex_b64", "dir", "nocase", "active", NULL};
    static const char *const dirs[] = {"both", "c2s", "s2c"};
    static const int dirv[] = {FGX__CTL__DIR__DIR_BOTH, FGX__CTL__DIR__DIR_C2S,
                               FGX__CTL__DIR__DIR_S2C};
    Fgx__Ctl__Config *cfg = r->cfg;
    Fgx__Ctl__Filter *fl;
    int rc, dir = 0;

    rc = want_type(r, fv, CLI_JV_OBJ, where);
    if (rc == 0)
        rc = known_keys(r, fv, where, keys);
    if (rc < 0)
        return rc;
    fl = malloc(sizeof(*fl));
    if (!fl)
        return -ENOMEM;
    fgx__ctl__filter__init(fl);
    cfg->filters[cfg->n_filters++] = fl;
    fl->service_id = service_id;
    rc = get_uint(r, fv, "id", where, UINT32_MAX, has_id, &fl->id);
    if (rc == 0)
        rc = get_regex(r, fv, where, &fl->regex);
    if (rc == 0 && fl->regex[0] == '\0') {
        const struct cli_jv *sv = cli_jv_get(fv, "regex");

        rc = bad(r, sv ? sv : cli_jv_get(fv, "regex_b64"), "%s.%s is empty", where,
                 sv ? "regex" : "regex_b64");
    }
    if (rc == 0)
        rc = get_enum(r, fv, "dir", where, dirs, dirv, 3, FGX__CTL__DIR__DIR_BOTH, &dir);
    fl->dir = (Fgx__Ctl__Dir)dir;
    if (rc == 0)
        rc = get_bool(r, fv, "nocase", where, false, &fl->nocase);
    if (rc == 0)
        rc = get_bool(r, fv, "active", where, true, &fl->active);
    return rc;
}

static int grow(void ***arr, size_t *cap, size_t need)
{
    void **n;
    size_t c = *cap ? *cap : 8;

    if (need <= *cap)
        return 0;
    while (c < need)
        c *= 2;
    n = realloc(*arr, c * sizeof(*n));
    if (!n)
        return -ENOMEM;
    *arr = n;
    *cap = c;
    return 0;
}

static int read_service(struct rd *r, const struct cli_jv *sv, size_t idx, bool *svc_has_id,
                        bool *flt_has_id)
{
    static const char *const keys[] = {"id",        "name",    "proto",  "ip",
                                       "port",      "layer",   "active", "fail_open",
                                       "midstream", "filters", NULL};
    static const char *const protos[] = {"tcp", "udp"};
    static const int protov[] = {FGX__CTL__PROTO__PROTO_TCP, FGX__CTL__PROTO__PROTO_UDP};
    static const char *const layers[] = {"nfqueue", "proxy"};
    static const int layerv[] = {FGX__CTL__LAYER__LAYER_NFQUEUE, FGX__CTL__LAYER__LAYER_PROXY};
    static const char *const mids[] = {"reset", "scan"};
    static const int midv[] = {FGX__CTL__MIDSTREAM__MIDSTREAM_RESET,
                               FGX__CTL__MIDSTREAM__MIDSTREAM_SCAN};
    Fgx__Ctl__Config *cfg = r->cfg;
    const struct cli_jv *fs;
    Fgx__Ctl__Service *s;
    char where[48];
    bool has_port;
    int rc, e = 0;

    (void)snprintf(where, sizeof(where), "services[%zu]", idx);
    rc = want_type(r, sv, CLI_JV_OBJ, where);
    if (rc == 0)
        rc = known_keys(r, sv, where, keys);
    if (rc < 0)
        return rc;
    s = malloc(sizeof(*s));
    if (!s)
        return -ENOMEM;
    fgx__ctl__service__init(s);
    cfg->services[cfg->n_services++] = s;
    rc = get_uint(r, sv, "id", where, UINT32_MAX, svc_has_id, &s->id);
    if (rc == 0)
        rc = get_str(r, sv, "name", where, NULL, &s->name);
    if (rc == 0 && all_digits(s->name))
        rc = bad(r, cli_jv_get(sv, "name"),
                 "%s.name \"%.40s\" is a number, which would be read as a service id", where,
                 s->name);
    if (rc == 0 && s->name[0] == '\0')
        rc = bad(r, cli_jv_get(sv, "name"), "%s.name is empty", where);
    if (rc == 0 && !cli_jv_get(sv, "proto"))
        rc = bad(r, sv, "%s: \"proto\" is missing", where);
    if (rc == 0)
        rc = get_enum(r, sv, "proto", where, protos, protov, 2, 0, &e);
    s->proto = (Fgx__Ctl__Proto)e;
    if (rc == 0)
        rc = get_str(r, sv, "ip", where, "", &s->ip);
    if (rc == 0 && s->ip[0] != '\0' && !cli_args_ip_valid(s->ip))
        rc = bad(r, cli_jv_get(sv, "ip"),
                 "%s.ip \"%.60s\" is not an IPv4 or IPv6 address or prefix", where, s->ip);
    if (rc == 0)
        rc = get_uint(r, sv, "port", where, 65535, &has_port, &s->port);
    if (rc == 0 && !has_port)
        rc = bad(r, sv, "%s: \"port\" is missing", where);
    e = 0;
    if (rc == 0)
        rc = get_enum(r, sv, "layer", where, layers, layerv, 2, FGX__CTL__LAYER__LAYER_NFQUEUE, &e);
    s->layer = (Fgx__Ctl__Layer)e;
    if (rc == 0)
        rc = get_bool(r, sv, "active", where, true, &s->active);
    if (rc == 0)
        rc = get_bool(r, sv, "fail_open", where, false, &s->fail_open);
    e = 0;
    if (rc == 0)
        rc = get_enum(r, sv, "midstream", where, mids, midv, 2,
                      FGX__CTL__MIDSTREAM__MIDSTREAM_RESET, &e);
    s->has_midstream = 1;
    s->midstream = (Fgx__Ctl__Midstream)e;
    if (rc < 0)
        return rc;
    fs = cli_jv_get(sv, "filters");
    if (!fs)
        return 0;
    (void)snprintf(where, sizeof(where), "services[%zu].filters", idx);
    rc = want_type(r, fs, CLI_JV_ARR, where);
    if (rc == 0)
        rc = grow((void ***)&cfg->filters, &r->cap_filters, cfg->n_filters + fs->n);
    for (size_t k = 0; rc == 0 && k < fs->n; k++) {
        char fwhere[64];

        (void)snprintf(fwhere, sizeof(fwhere), "services[%zu].filters[%zu]", idx, k);
        rc = read_filter(r, fs->items[k], s->id, fwhere, &flt_has_id[cfg->n_filters]);
    }
    return rc;
}

/* Ids left out get the next free number; a repeated id is an error. */
static int assign_ids(struct rd *r, const struct cli_jv *svcs, const bool *svc_has,
                      const bool *flt_has)
{
    Fgx__Ctl__Config *cfg = r->cfg;
    uint32_t next = 0;
    size_t k = 0;

    for (size_t i = 0; i < cfg->n_services; i++) {
        if (svc_has[i] && cfg->services[i]->id > next)
            next = cfg->services[i]->id;
        for (size_t j = 0; j < i; j++) {
            if (svc_has[i] && svc_has[j] && cfg->services[i]->id == cfg->services[j]->id)
                return bad(r, cli_jv_get(svcs->items[i], "id"),
                           "services[%zu].id %u is also the id of services[%zu]", i,
                           cfg->services[i]->id, j);
            if (strcmp(cfg->services[i]->name, cfg->services[j]->name) == 0)
                return bad(r, cli_jv_get(svcs->items[i], "name"),
                           "services[%zu].name \"%.40s\" is also the name of services[%zu]", i,
                           cfg->services[i]->name, j);
        }
    }
    for (size_t i = 0; i < cfg->n_services; i++) {
        const struct cli_jv *fs = cli_jv_get(svcs->items[i], "filters");
        size_t nf = fs ? fs->n : 0;

        if (!svc_has[i]) {
            if (next == UINT32_MAX)
                return bad(r, svcs->items[i], "services[%zu]: no id left to give it", i);
            cfg->services[i]->id = ++next;
        }
        for (size_t f = 0; f < nf; f++)
            cfg->filters[k + f]->service_id = cfg->services[i]->id;
        k += nf;
    }
    next = 0;
    for (size_t i = 0; i < cfg->n_filters; i++)
        if (flt_has[i] && cfg->filters[i]->id > next)
            next = cfg->filters[i]->id;
    for (size_t i = 0; i < cfg->n_filters; i++) {
        for (size_t j = 0; j < i && flt_has[i]; j++) {
            if (flt_has[j] && cfg->filters[i]->id == cfg->filters[j]->id) {
                /* Find the filter's position in the file for the message. */
                size_t si = 0, off = i;

                for (; si < svcs->n; si++) {
                    const struct cli_jv *fs = cli_jv_get(svcs->items[si], "filters");
                    size_t nf = fs ? fs->n : 0;

                    if (off < nf)
                        return bad(r, cli_jv_get(fs->items[off], "id"),
                                   "services[%zu].filters[%zu].id %u is used twice", si, off,
                                   cfg->filters[i]->id);
                    off -= nf;
                }
            }
        }
        if (!flt_has[i]) {
            if (next == UINT32_MAX)
                return bad(r, svcs, "no filter id left to give");
            cfg->filters[i]->id = ++next;
        }
    }
    return 0;
}

int cli_config_read(const char *text, size_t len, Fgx__Ctl__Config **out, char *err, size_t errlen)
{
    static const char *const keys[] = {"format", "version", "settings", "services", NULL};
    static const char *const skeys[] = {"auth_enabled", NULL};
    struct rd r = {.err = err, .errlen = errlen};
    struct cli_jv *doc = NULL;
    const struct cli_jv *v, *svcs;
    struct cli_jerr jerr;
    bool *svc_has = NULL, *flt_has = NULL;
    size_t nflt = 0;
    uint64_t ver = 0;
    int rc;

    rc = cli_jsonparse(text, len, &doc, &jerr);
    if (rc == -EINVAL)
        (void)snprintf(err, errlen, "line %u, column %u: %s", jerr.line, jerr.col, jerr.msg);
    if (rc < 0)
        return rc;
    r.cfg = malloc(sizeof(*r.cfg));
    if (!r.cfg) {
        rc = -ENOMEM;
        goto out;
    }
    fgx__ctl__config__init(r.cfg);
    rc = want_type(&r, doc, CLI_JV_OBJ, "the document");
    if (rc == 0)
        rc = known_keys(&r, doc, "the document", keys);
    if (rc < 0)
        goto out;
    v = cli_jv_get(doc, "format");
    if (v && (v->type != CLI_JV_STR || strcmp(v->s, CLI_CONFIG_FORMAT) != 0)) {
        rc = bad(&r, v,
                 "\"format\" must be \"" CLI_CONFIG_FORMAT "\": this is not an fgex "
                 "configuration");
        goto out;
    }
    v = cli_jv_get(doc, "version");
    if (v && (cli_jv_uint(v, UINT32_MAX, &ver) < 0 || ver < 1 || ver > CLI_CONFIG_VERSION)) {
        rc = bad(&r, v, "\"version\" must be 1 to %d (this fgexctl reads no other)",
                 CLI_CONFIG_VERSION);
        goto out;
    }
    r.version = v ? ver : CLI_CONFIG_VERSION;
    v = cli_jv_get(doc, "settings");
    if (v) {
        rc = want_type(&r, v, CLI_JV_OBJ, "settings");
        if (rc == 0)
            rc = known_keys(&r, v, "settings", skeys);
        if (rc == 0 && cli_jv_get(v, "auth_enabled")) {
            r.cfg->has_auth_enabled = 1;
            rc = get_bool(&r, v, "auth_enabled", "settings", true, &r.cfg->auth_enabled);
        }
        if (rc < 0)
            goto out;
    }
    svcs = cli_jv_get(doc, "services");
    if (!svcs) {
        rc = bad(&r, doc, "\"services\" is missing (an empty configuration is \"services\": [])");
        goto out;
    }
    rc = want_type(&r, svcs, CLI_JV_ARR, "services");
    if (rc < 0)
        goto out;
    for (size_t i = 0; i < svcs->n; i++) {
        const struct cli_jv *fs = cli_jv_get(svcs->items[i], "filters");

        if (fs && fs->type == CLI_JV_ARR)
            nflt += fs->n;
    }
    svc_has = calloc(svcs->n + 1, sizeof(*svc_has));
    flt_has = calloc(nflt + 1, sizeof(*flt_has));
    if (!svc_has || !flt_has || grow((void ***)&r.cfg->services, &r.cap_services, svcs->n) < 0) {
        rc = -ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < svcs->n && rc == 0; i++)
        rc = read_service(&r, svcs->items[i], i, &svc_has[i], flt_has);
    if (rc == 0)
        rc = assign_ids(&r, svcs, svc_has, flt_has);
out:
    if (rc < 0 && r.cfg) {
        fgx__ctl__config__free_unpacked(r.cfg, NULL);
        r.cfg = NULL;
    }
    if (rc == 0)
        *out = r.cfg;
    free(svc_has);
    free(flt_has);
    cli_jv_free(doc);
    return rc;
}
