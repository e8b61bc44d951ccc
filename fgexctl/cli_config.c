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
#include "fgx/ruleset.h"
#include "cmd.h"
#include "fgx/svcaddr.h"
#include "cmd_fw.h"

/* ---- names of enumerations ----------------------------------------------------------------- */

static const char *proto_str(Fgx__Ctl__Proto p)
{
    return p == FGX__CTL__PROTO__PROTO_UDP ? "udp" : "tcp";
}

static const char *layer_str(Fgx__Ctl__Layer l)
{
    return l == FGX__CTL__LAYER__LAYER_PROXY      ? "proxy"
           : l == FGX__CTL__LAYER__LAYER_EXTERNAL ? "external"
                                                  : "nfqueue";
}

static const char *dir_str(Fgx__Ctl__Dir d)
{
    if (d == FGX__CTL__DIR__DIR_C2S)
        return "c2s";
    return d == FGX__CTL__DIR__DIR_S2C ? "s2c" : "both";
}

/* ---- writing ------------------------------------------------------------------------------- */

static json_t *write_filter(const Fgx__Ctl__Filter *fl)
{
    json_t *o = json_pack("{s:I}", "id", cli_json_int(fl->id));

    if (o && cli_json_set_bytes(o, "regex", fl->regex, fl->regex ? strlen(fl->regex) : 0) == 0 &&
        json_object_update_new(o, json_pack("{s:s, s:b, s:b}", "dir", dir_str(fl->dir), "nocase",
                                            fl->nocase, "active", fl->active)) == 0 &&
        json_object_set_new(o, "action",
                            json_string(fl->has_action && fl->action == FGX__CTL__FILTER_ACTION__FILTER_ACTION_LOG
                                            ? "log"
                                            : "block")) == 0 &&
        (!fl->label || !fl->label[0] ||
         json_object_set_new(o, "label", cli_json_str(fl->label)) == 0) &&
        /* only once edited in place (issue 27): a never-edited filter reads as before */
        (!fl->has_revision || fl->revision == 0 ||
         json_object_update_new(o, json_pack("{s:I, s:I}", "revision", cli_json_int(fl->revision),
                                             "edited", cli_json_int(fl->edited))) == 0))
        return o;
    json_decref(o);
    return NULL;
}

/* A TLS service's fields: PEM is text, written as JSON strings. */
static json_t *write_service_tls(json_t *o, const Fgx__Ctl__Service *s)
{
    if (o == NULL || !s->tls)
        return o;
    if (json_object_set_new(o, "tls", json_true()) < 0 ||
        json_object_set_new(o, "upstream",
                            json_string(s->has_upstream &&
                                                s->upstream == FGX__CTL__UPSTREAM__UPSTREAM_PLAIN
                                            ? "plain"
                                            : "tls")) < 0 ||
        (s->has_tls_cert &&
         json_object_set_new(o, "tls_cert_pem",
                             json_stringn((const char *)s->tls_cert.data, s->tls_cert.len)) < 0) ||
        (s->has_tls_key &&
         json_object_set_new(o, "tls_key_pem",
                             json_stringn((const char *)s->tls_key.data, s->tls_key.len)) < 0)) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* A service's script filter file (issue 16): {filename, deadline_ms, source or source_b64,
 * functions: [{name, line, active, params}]}. */
static json_t *write_script(const Fgx__Ctl__Script *sc)
{
    json_t *o = json_object(), *fns = json_array();

    if (!o || !fns)
        goto err;
    for (size_t i = 0; i < sc->n_functions; i++) {
        const Fgx__Ctl__ScriptFunction *f = sc->functions[i];
        json_t *ps = json_array();

        for (size_t j = 0; ps && j < f->n_params; j++)
            if (json_array_append_new(ps, cli_json_str(f->params[j])) < 0)
                goto err;
        if (json_array_append_new(fns, json_pack("{s:o, s:I, s:b, s:o}", "name",
                                                 cli_json_str(f->name), "line",
                                                 (json_int_t)f->line, "active",
                                                 !f->has_active || f->active, "params", ps)) < 0)
            goto err;
    }
    if (json_object_set_new(o, "filename", cli_json_str(sc->filename)) < 0 ||
        json_object_set_new(o, "deadline_ms",
                            json_integer(sc->has_deadline_ms ? sc->deadline_ms : 100)) < 0 ||
        cli_json_set_bytes(o, "source", sc->source.data, sc->source.len) < 0 ||
        json_object_set_new(o, "functions", fns) < 0)
        goto err_o;
    return o;
err:
    json_decref(fns);
err_o:
    json_decref(o);
    return NULL;
}

static json_t *write_service(const Fgx__Ctl__Config *cfg, const Fgx__Ctl__Service *s)
{
    json_t *fs = json_array(), *o;

    for (size_t k = 0; fs && k < cfg->n_filters; k++) {
        if (cfg->filters[k]->service_id == s->id &&
            json_array_append_new(fs, write_filter(cfg->filters[k])) < 0) {
            json_decref(fs);
            fs = NULL;
        }
    }
    o = json_pack(
        "{s:I, s:o, s:s, s:o, s:I, s:s, s:b, s:b, s:s, s:o}", "id", cli_json_int(s->id), "name",
        cli_json_str(s->name), "proto", s->has_http && s->http ? "http" : proto_str(s->proto), "ip", cli_json_str(s->ip), "port",
        cli_json_int(s->port), "layer", layer_str(s->layer), "active", s->active, "fail_open",
        s->fail_open, "midstream",
        s->has_midstream && s->midstream == FGX__CTL__MIDSTREAM__MIDSTREAM_SCAN ? "scan" : "reset",
        "filters", fs);
    /* Its own limits (issue 27), only when it has one: older readers load the others. */
    if (o && ((s->has_max_conns && s->max_conns > 0) ||
              (s->has_first_byte_timeout && s->first_byte_timeout > 0)) &&
        json_object_set_new(o, "limits",
                            json_pack("{s:I, s:s, s:I}", "max_conns", cli_json_int(s->max_conns),
                                      "over_limit", s->over_limit_forward ? "forward" : "refuse",
                                      "first_byte_timeout",
                                      cli_json_int(s->first_byte_timeout))) < 0) {
        json_decref(o);
        return NULL;
    }
    /* An HTTP service toward an HTTP/1.1-only one; absent: what the client spoke. */
    if (o && s->has_upstream_http1 && s->upstream_http1 &&
        json_object_set_new(o, "upstream_http", json_string("http1")) < 0) {
        json_decref(o);
        return NULL;
    }

    /* The addresses as `--addr` writes them, when ip/port cannot say them (several, one
     * interface, an edge); else ip/port alone, as before the list. */
    if (o && (s->n_addrs > 1 ||
              (s->n_addrs == 1 && (strcmp(s->addrs[0]->addr, s->ip ? s->ip : "") != 0 ||
                                   s->addrs[0]->has_edge || s->addrs[0]->has_to_port)))) {
        json_t *as = json_array();

        for (size_t i = 0; as && i < s->n_addrs; i++) {
            struct fgx_svcaddr sa;
            char text[FGX_SVCADDR_TEXT_MAX];

            if (s->addrs[i]->port == 0 || s->addrs[i]->port > 65535 ||
                fgx_svcaddr_parse_addr(s->addrs[i]->addr, (uint16_t)s->addrs[i]->port, &sa) < 0 ||
                (sa.edge = (uint8_t)s->addrs[i]->edge, sa.to_port = (uint16_t)s->addrs[i]->to_port,
                 fgx_svcaddr_format(&sa, text, sizeof(text)) < 0) ||
                json_array_append_new(as, json_string(text)) < 0) {
                json_decref(as);
                as = NULL;
            }
        }
        if (!as || json_object_set_new(o, "addrs", as) < 0) {
            json_decref(o);
            return NULL;
        }
    }
    if (o && s->to && json_object_set_new(o, "to", cli_json_str(s->to)) < 0) {
        json_decref(o);
        return NULL;
    }
    for (size_t k = 0; o && k < cfg->n_scripts; k++) {
        if (cfg->scripts[k]->service_id == s->id &&
            json_object_set_new(o, "script", write_script(cfg->scripts[k])) < 0) {
            json_decref(o);
            o = NULL;
        }
    }
    return write_service_tls(o, s);
}

/* The game (issue 28): {} when none is set, so that an import of the backup clears it. */
static json_t *write_game(const Fgx__Ctl__GameConfig *g)
{
    json_t *o = json_object(), *ck = json_array(), *tm = json_array();
    bool ok = o && ck && tm;

    if (ok && g->has_flag && g->flag.len > 0) {
        for (size_t i = 0; ok && i < g->n_checker; i++)
            ok = json_array_append_new(ck, cli_json_str(g->checker[i])) == 0;
        for (size_t i = 0; ok && i < g->n_team; i++)
            ok = json_array_append_new(tm, cli_json_str(g->team[i])) == 0;
        ok = ok && cli_json_set_bytes(o, "flag", g->flag.data, g->flag.len) == 0 &&
             json_object_set(o, "checker", ck) == 0 && json_object_set(o, "team", tm) == 0;
    }
    json_decref(ck);
    json_decref(tm);
    if (!ok) {
        json_decref(o);
        return NULL;
    }
    return o;
}

int cli_config_write(FILE *f, const Fgx__Ctl__Config *cfg, char *err, size_t errlen)
{
    json_t *settings = json_object(), *svcs = json_array();
    int rc;

    for (size_t k = 0; k < cfg->n_filters; k++) {
        bool found = false;

        for (size_t i = 0; i < cfg->n_services && !found; i++)
            found = cfg->services[i]->id == cfg->filters[k]->service_id;
        if (!found) {
            (void)snprintf(err, errlen,
                           "filter %u belongs to service %u, which is not in the "
                           "configuration",
                           cfg->filters[k]->id, cfg->filters[k]->service_id);
            json_decref(settings);
            json_decref(svcs);
            return -EINVAL;
        }
    }
    if (settings && cfg->has_auth_enabled &&
        json_object_set_new(settings, "auth_enabled", json_boolean(cfg->auth_enabled)) < 0) {
        json_decref(settings);
        settings = NULL;
    }
    for (size_t i = 0; svcs && i < cfg->n_services; i++) {
        if (json_array_append_new(svcs, write_service(cfg, cfg->services[i])) < 0) {
            json_decref(svcs);
            svcs = NULL;
        }
    }
    {
        json_t *doc = json_pack("{s:s, s:I, s:o, s:o}", "format", CLI_CONFIG_FORMAT, "version",
                                (json_int_t)CLI_CONFIG_VERSION, "settings", settings, "services",
                                svcs);

        /* the firewall (cmd_fw.c), when controld has one */
        if (doc && cfg->fw && json_object_set_new(doc, "firewall",
                                                  cli_fw_config_to_json(cfg->fw)) < 0) {
            json_decref(doc);
            doc = NULL;
        }
        if (doc && cfg->game && json_object_set_new(doc, "game", write_game(cfg->game)) < 0) {
            json_decref(doc);
            doc = NULL;
        }
        rc = cli_json_print(f, doc, true);
    }
    if (rc == 0 && (fflush(f) == EOF || ferror(f)))
        rc = -EIO;
    return rc;
}

/* ---- reading ------------------------------------------------------------------------------- */

struct rd {
    char *err;
    size_t errlen;
    uint64_t version; /* of the file: 1 reads \u0080..\u00ff in a regex as bytes */
    const json_t *doc;
    struct cli_json_pos pos;
    Fgx__Ctl__Config *cfg;
    size_t cap_services, cap_filters, cap_scripts;
};

static int vbad(struct rd *r, unsigned line, unsigned col, const char *fmt, va_list ap)
    __attribute__((format(printf, 4, 0)));

static int vbad(struct rd *r, unsigned line, unsigned col, const char *fmt, va_list ap)
{
    char what[256];

    (void)vsnprintf(what, sizeof(what), fmt, ap);
    (void)snprintf(r->err, r->errlen, "line %u, column %u: %s", line, col, what);
    return -EINVAL;
}

/* Refuse the file at the value at, which is a string, a number, an object or an array. */
static int bad(struct rd *r, const json_t *at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int bad(struct rd *r, const json_t *at, const char *fmt, ...)
{
    unsigned line = 1, col = 1;
    va_list ap;
    int rc;

    (void)cli_json_pos_of(&r->pos, at, NULL, &line, &col);
    va_start(ap, fmt);
    rc = vbad(r, line, col, fmt, ap);
    va_end(ap);
    return rc;
}

/* Refuse the file at the member key of in (or item idx; in NULL: the document), which may be
 * true, false or null: jansson shares those, so they are found by their place. */
static int bad_in(struct rd *r, const json_t *in, const char *key, size_t idx, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static int bad_in(struct rd *r, const json_t *in, const char *key, size_t idx, const char *fmt, ...)
{
    unsigned line = 1, col = 1;
    va_list ap;
    int rc;

    (void)cli_json_pos_in(&r->pos, in, key, idx, &line, &col);
    va_start(ap, fmt);
    rc = vbad(r, line, col, fmt, ap);
    va_end(ap);
    return rc;
}

/* Refuse any key of obj not in the NULL-terminated list allowed. */
static int known_keys(struct rd *r, const json_t *obj, const char *where,
                      const char *const *allowed)
{
    const char *key;
    json_t *v;

    json_object_foreach((json_t *)obj, key, v)
    {
        const char *const *a = allowed;

        while (*a && strcmp(*a, key) != 0)
            a++;
        if (!*a)
            return bad_in(r, obj, key, 0, "%s: unknown key \"%.60s\"", where, key);
    }
    return 0;
}

static const char *article(const char *type_name)
{
    return type_name[0] == 'a' || type_name[0] == 'o' ? "an" : "a";
}

/* The member key of in (or item idx; in NULL: the document) must be of the type
 * cli_json_type_name calls want. */
static int want_type(struct rd *r, const json_t *in, const char *key, size_t idx, const char *want,
                     const char *where)
{
    const json_t *v = !in ? r->doc : key ? json_object_get(in, key) : json_array_get(in, idx);
    const char *got = cli_json_type_name(v);

    if (strcmp(got, want) != 0)
        return bad_in(r, in, key, idx, "%s must be %s %s, not %s %s", where, article(want), want,
                      article(got), got);
    return 0;
}

/* A string member: required, or absent (*out = dflt). The copy is malloc'd. */
static int get_str(struct rd *r, const json_t *obj, const char *key, const char *where,
                   const char *dflt, char **out)
{
    const json_t *v = json_object_get(obj, key);
    char what[96];
    int rc;

    (void)snprintf(what, sizeof(what), "%s.%s", where, key);
    if (!v) {
        if (!dflt)
            return bad(r, obj, "%s: \"%s\" is missing", where, key);
        *out = strdup(dflt);
        return *out ? 0 : -ENOMEM;
    }
    rc = want_type(r, obj, key, 0, "string", what);
    if (rc < 0)
        return rc;
    if (strlen(json_string_value(v)) != json_string_length(v))
        return bad(r, v, "%s cannot contain \\u0000", what);
    *out = strdup(json_string_value(v));
    return *out ? 0 : -ENOMEM;
}

static int get_bool(struct rd *r, const json_t *obj, const char *key, const char *where, bool dflt,
                    protobuf_c_boolean *out)
{
    const json_t *v = json_object_get(obj, key);
    char what[96];
    int rc;

    (void)snprintf(what, sizeof(what), "%s.%s", where, key);
    if (!v) {
        *out = dflt;
        return 0;
    }
    rc = want_type(r, obj, key, 0, "boolean", what);
    if (rc == 0)
        *out = json_is_true(v);
    return rc;
}

/* A non-negative integer up to max. Returns 0 or -EINVAL (not such a number). */
static int uint_of(const json_t *v, uint64_t max, uint64_t *out)
{
    json_int_t x = json_integer_value(v);

    if (!json_is_integer(v) || x < 0 || (uint64_t)x > max)
        return -EINVAL;
    *out = (uint64_t)x;
    return 0;
}

/* An integer member from 1 to max; *has says whether it was there. */
static int get_uint(struct rd *r, const json_t *obj, const char *key, const char *where,
                    uint64_t max, bool *has, uint32_t *out)
{
    const json_t *v = json_object_get(obj, key);
    uint64_t x;

    *has = v != NULL;
    if (!v)
        return 0;
    if (uint_of(v, max, &x) < 0 || x < 1)
        return bad_in(r, obj, key, 0, "%s.%s must be an integer from 1 to %llu", where, key,
                      (unsigned long long)max);
    *out = (uint32_t)x;
    return 0;
}

/* One of the words names[0..n) (values[i] for names[i]); absent: dflt. */
static int get_enum(struct rd *r, const json_t *obj, const char *key, const char *where,
                    const char *const *names, const int *values, size_t n, int dflt, int *out)
{
    const json_t *v = json_object_get(obj, key);
    char what[96];
    int rc;

    (void)snprintf(what, sizeof(what), "%s.%s", where, key);
    if (!v) {
        *out = dflt;
        return 0;
    }
    rc = want_type(r, obj, key, 0, "string", what);
    if (rc < 0)
        return rc;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(json_string_value(v), names[i]) == 0) {
            *out = values[i];
            return 0;
        }
    }
    return bad(r, v, "%s: \"%.40s\" is not one of %s%s%s%s%s", what, json_string_value(v), names[0],
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

static uint32_t hex4(const char *p)
{
    uint32_t v = 0;

    for (int i = 0; i < 4; i++) {
        char c = p[i];

        v = v << 4 | (uint32_t)(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
    }
    return v;
}

/* The string whose text starts at p (its opening quote, in a text jansson accepted) as
 * version 1 of `fgexctl export` meant it: each \u0080..\u00ff escape is the one byte it names
 * (that writer wrote every byte outside valid UTF-8 so), every other escape and character is
 * what it is in JSON. *out is malloc'd and NUL-terminated; *differs says whether any escape
 * was read as a byte. Returns 0 or -ENOMEM. */
static int legacy_string(const char *p, const char *end, char **out, size_t *outlen, bool *differs)
{
    const char *q = p + 1;
    char *o, *b;

    /* Decoded, it is no longer than its text. */
    while (q < end && *q != '"')
        q += *q == '\\' ? 2 : 1;
    o = b = malloc((size_t)(q - p) + 1);
    if (!o)
        return -ENOMEM;
    *differs = false;
    for (p++; p < end && *p != '"'; p++) {
        uint32_t cp;

        if (*p != '\\') {
            *o++ = *p;
            continue;
        }
        p++;
        switch (*p) {
        case 'b':
            *o++ = '\b';
            continue;
        case 'f':
            *o++ = '\f';
            continue;
        case 'n':
            *o++ = '\n';
            continue;
        case 'r':
            *o++ = '\r';
            continue;
        case 't':
            *o++ = '\t';
            continue;
        case 'u':
            break;
        default: /* " \ / */
            *o++ = *p;
            continue;
        }
        cp = hex4(p + 1);
        p += 4;
        if (cp >= 0xd800 && cp <= 0xdbff) { /* jansson checked the low half follows */
            cp = 0x10000 + ((cp - 0xd800) << 10) + (hex4(p + 3) - 0xdc00);
            p += 6;
        }
        if (cp >= 0x80 && cp <= 0xff) {
            *o++ = (char)cp;
            *differs = true;
        } else if (cp < 0x80) {
            *o++ = (char)cp;
        } else if (cp < 0x800) {
            *o++ = (char)(0xc0 | cp >> 6);
            *o++ = (char)(0x80 | (cp & 0x3f));
        } else if (cp < 0x10000) {
            *o++ = (char)(0xe0 | cp >> 12);
            *o++ = (char)(0x80 | (cp >> 6 & 0x3f));
            *o++ = (char)(0x80 | (cp & 0x3f));
        } else {
            *o++ = (char)(0xf0 | cp >> 18);
            *o++ = (char)(0x80 | (cp >> 12 & 0x3f));
            *o++ = (char)(0x80 | (cp >> 6 & 0x3f));
            *o++ = (char)(0x80 | (cp & 0x3f));
        }
    }
    *o = '\0';
    *out = b;
    *outlen = (size_t)(o - b);
    return 0;
}

/* A filter's regex: "regex" (a string, which a version-1 file may have written with bytes as
 * \u00XX) or "regex_b64" (its bytes in base64), exactly one of them. *out is malloc'd. */
static int get_regex(struct rd *r, const json_t *fv, const char *where, char **out)
{
    const json_t *sv = json_object_get(fv, "regex"), *bv = json_object_get(fv, "regex_b64");
    char what[96];
    size_t n, off;
    int rc;

    if (sv && bv)
        return bad_in(r, fv, "regex_b64", 0,
                      "%s has both \"regex\" and \"regex_b64\": give one (\"regex\" for a regex "
                      "that is valid UTF-8, \"regex_b64\" for its bytes in base64)",
                      where);
    if (!sv && !bv)
        return bad(r, fv, "%s: \"regex\" is missing", where);
    (void)snprintf(what, sizeof(what), "%s.%s", where, sv ? "regex" : "regex_b64");
    rc = want_type(r, fv, sv ? "regex" : "regex_b64", 0, "string", what);
    if (rc < 0)
        return rc;
    if (sv) {
        bool differs = false;

        n = json_string_length(sv);
        if (r->version == 1 && cli_json_pos_of(&r->pos, sv, &off, NULL, NULL) == 0) {
            rc = legacy_string(r->pos.text + off, r->pos.text + r->pos.len, out, &n, &differs);
            if (rc < 0)
                return rc;
            if (!differs) {
                free(*out);
                *out = NULL;
            }
        }
        if (!differs && !(*out = strndup(json_string_value(sv), n)))
            return -ENOMEM;
        if (strlen(*out) != n)
            return bad(r, sv, "%s cannot contain \\u0000", what);
        return 0;
    }
    n = json_string_length(bv);
    *out = malloc(n / 4 * 3 + 1);
    if (!*out)
        return -ENOMEM;
    if (cli_b64_decode(json_string_value(bv), n, (unsigned char *)*out, &n) < 0)
        return bad(r, bv, "%s is not base64 (RFC 4648: A-Z a-z 0-9 + /, padded with '=')", what);
    (*out)[n] = '\0';
    if (memchr(*out, '\0', n))
        return bad(r, bv, "%s holds a NUL byte, which a regex cannot hold (write \\x00)", what);
    return 0;
}

/* A service's "limits" (issue 27): {max_conns, over_limit, first_byte_timeout}, each optional;
 * controld checks the bounds and the layer. */
static int read_limits(struct rd *r, const json_t *sv, size_t idx, Fgx__Ctl__Service *s)
{
    const json_t *lv = json_object_get(sv, "limits");
    static const char *const keys[] = {"max_conns", "over_limit", "first_byte_timeout", NULL};
    static const char *const ol[] = {"refuse", "forward"};
    static const int olv[] = {0, 1};
    const json_t *v;
    char where[64];
    uint64_t x;
    int rc, e = 0;

    (void)snprintf(where, sizeof(where), "services[%zu].limits", idx);
    rc = want_type(r, sv, "limits", 0, "object", where);
    if (rc == 0)
        rc = known_keys(r, lv, where, keys);
    if (rc == 0 && (v = json_object_get(lv, "max_conns"))) {
        if (uint_of(v, UINT32_MAX, &x) < 0)
            return bad_in(r, lv, "max_conns", 0, "%s.max_conns must be a count", where);
        s->has_max_conns = 1;
        s->max_conns = (uint32_t)x;
    }
    if (rc == 0 && (v = json_object_get(lv, "first_byte_timeout"))) {
        if (uint_of(v, UINT32_MAX, &x) < 0)
            return bad_in(r, lv, "first_byte_timeout", 0,
                          "%s.first_byte_timeout must be seconds", where);
        s->has_first_byte_timeout = 1;
        s->first_byte_timeout = (uint32_t)x;
    }
    if (rc == 0)
        rc = get_enum(r, lv, "over_limit", where, ol, olv, 2, 0, &e);
    s->has_over_limit_forward = s->has_max_conns;
    s->over_limit_forward = e == 1;
    return rc;
}

/* The game's "flag" or "flag_b64" (exactly one), bytes without NUL, into *out (malloc'd). */
static int get_flag(struct rd *r, const json_t *gv, ProtobufCBinaryData *out)
{
    const json_t *sv = json_object_get(gv, "flag"), *bv = json_object_get(gv, "flag_b64");
    size_t n;

    if (sv && bv)
        return bad_in(r, gv, "flag_b64", 0,
                      "game has both \"flag\" and \"flag_b64\": give one");
    if (!sv && !bv)
        return bad(r, gv, "game: \"flag\" is missing (a game with no flag is {})");
    if (want_type(r, gv, sv ? "flag" : "flag_b64", 0, "string",
                  sv ? "game.flag" : "game.flag_b64") < 0)
        return -EINVAL;
    n = json_string_length(sv ? sv : bv);
    out->data = malloc(n + 1);
    if (!out->data)
        return -ENOMEM;
    if (sv) {
        memcpy(out->data, json_string_value(sv), n);
    } else if (cli_b64_decode(json_string_value(bv), n, out->data, &n) < 0) {
        return bad(r, bv, "game.flag_b64 is not base64 (RFC 4648: A-Z a-z 0-9 + /, padded with "
                   "'=')");
    }
    out->len = n;
    if (n == 0 || memchr(out->data, '\0', n))
        return bad(r, sv ? sv : bv, "game.flag is empty or holds a NUL byte (write \\x00)");
    return 0;
}

static int get_cidrs(struct rd *r, const json_t *gv, const char *key, char ***out, size_t *n)
{
    const json_t *a = json_object_get(gv, key);
    char where[32];

    *n = 0;
    if (!a)
        return 0;
    (void)snprintf(where, sizeof(where), "game.%s", key);
    if (want_type(r, gv, key, 0, "array", where) < 0)
        return -EINVAL;
    *out = calloc(json_array_size(a) + 1, sizeof(**out));
    if (!*out)
        return -ENOMEM;
    for (size_t i = 0; i < json_array_size(a); i++) {
        const json_t *e = json_array_get(a, i);

        if (!json_is_string(e) || !cli_args_ip_valid(json_string_value(e)))
            return bad(r, e, "%s[%zu] must be an address or ADDR/LEN", where, i);
        if (!((*out)[i] = strdup(json_string_value(e))))
            return -ENOMEM;
        (*n)++;
    }
    return 0;
}

static int read_game(struct rd *r, const json_t *gv)
{
    static const char *const keys[] = {"flag", "flag_b64", "checker", "team", NULL};
    Fgx__Ctl__GameConfig *g;
    int rc = want_type(r, r->doc, "game", 0, "object", "game");

    if (rc == 0)
        rc = known_keys(r, gv, "game", keys);
    if (rc < 0)
        return rc;
    g = malloc(sizeof(*g));
    if (!g)
        return -ENOMEM;
    fgx__ctl__game_config__init(g);
    r->cfg->game = g; /* freed with the configuration from here on */
    if (json_object_size(gv) == 0)
        return 0; /* no game */
    g->has_flag = 1;
    rc = get_flag(r, gv, &g->flag);
    if (rc == 0)
        rc = get_cidrs(r, gv, "checker", &g->checker, &g->n_checker);
    if (rc == 0)
        rc = get_cidrs(r, gv, "team", &g->team, &g->n_team);
    if (rc == 0 && g->n_checker == 0)
        rc = bad(r, gv, "game: \"checker\" lists no address");
    return rc;
}

/* Filter idx of the array fs. */
static int read_filter(struct rd *r, const json_t *fs, size_t idx, uint32_t service_id,
                       const char *where, bool *has_id)
{
    const json_t *fv = json_array_get(fs, idx);
    static const char *const keys[] = {"id",     "regex",  "regex_b64", "dir",    "nocase",
                                       "active", "action", "label",     "revision", "edited",
                                       NULL};
    static const char *const acts[] = {"block", "log"};
    static const int actv[] = {FGX__CTL__FILTER_ACTION__FILTER_ACTION_BLOCK, FGX__CTL__FILTER_ACTION__FILTER_ACTION_LOG};
    char why[128];
    int act = 0;
    static const char *const dirs[] = {"both", "c2s", "s2c"};
    static const int dirv[] = {FGX__CTL__DIR__DIR_BOTH, FGX__CTL__DIR__DIR_C2S,
                               FGX__CTL__DIR__DIR_S2C};
    Fgx__Ctl__Config *cfg = r->cfg;
    Fgx__Ctl__Filter *fl;
    int rc, dir = 0;

    rc = want_type(r, fs, NULL, idx, "object", where);
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
        const json_t *sv = json_object_get(fv, "regex");

        rc = bad(r, sv ? sv : json_object_get(fv, "regex_b64"), "%s.%s is empty", where,
                 sv ? "regex" : "regex_b64");
    }
    if (rc == 0)
        rc = get_enum(r, fv, "dir", where, dirs, dirv, 3, FGX__CTL__DIR__DIR_BOTH, &dir);
    fl->dir = (Fgx__Ctl__Dir)dir;
    if (rc == 0)
        rc = get_bool(r, fv, "nocase", where, false, &fl->nocase);
    if (rc == 0)
        rc = get_bool(r, fv, "active", where, true, &fl->active);
    if (rc == 0)
        rc = get_enum(r, fv, "action", where, acts, actv, 2, FGX__CTL__FILTER_ACTION__FILTER_ACTION_BLOCK, &act);
    if (rc == 0 && act == FGX__CTL__FILTER_ACTION__FILTER_ACTION_LOG) {
        fl->has_action = 1;
        fl->action = FGX__CTL__FILTER_ACTION__FILTER_ACTION_LOG;
    }
    if (rc == 0 && json_object_get(fv, "label")) {
        rc = get_str(r, fv, "label", where, "", &fl->label);
        if (rc == 0 && fgx_label_check(fl->label, why, sizeof(why)) < 0)
            rc = bad(r, json_object_get(fv, "label"), "%s.label: %s", where, why);
    }
    /* issue 27, absent in older backups (never edited) */
    if (rc == 0 && json_object_get(fv, "revision")) {
        bool has;

        rc = get_uint(r, fv, "revision", where, UINT32_MAX, &has, &fl->revision);
        fl->has_revision = has;
    }
    if (rc == 0 && json_object_get(fv, "edited")) {
        uint64_t x = 0;

        if (uint_of(json_object_get(fv, "edited"), UINT64_MAX >> 1, &x) < 0)
            rc = bad_in(r, fv, "edited", 0, "%s.edited must be unix seconds", where);
        fl->has_edited = rc == 0;
        fl->edited = x;
    }
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

/* "addrs": ["10.0.0.2:80", "[fd00::1]:80", "eth1:81", ...], each as `--addr` takes it (a
 * missing port is the service's "port"). Absent: the one address ip/port. */
static int read_addrs(struct rd *r, const json_t *sv, const char *where, Fgx__Ctl__Service *s)
{
    const json_t *as = json_object_get(sv, "addrs");
    char what[64];
    size_t n;
    int rc;

    if (!as)
        return 0;
    (void)snprintf(what, sizeof(what), "%s.addrs", where);
    rc = want_type(r, sv, "addrs", 0, "array", what);
    if (rc < 0)
        return rc;
    n = json_array_size(as);
    if (n == 0 || n > CLI_ADDRS_MAX)
        return bad(r, as, "%s holds %zu addresses: a service has 1 to %d", what, n, CLI_ADDRS_MAX);
    s->addrs = calloc(n, sizeof(*s->addrs));
    if (!s->addrs)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        const json_t *av = json_array_get(as, i);
        struct fgx_svcaddr sa;
        char text[FGX_SVCADDR_TEXT_MAX];
        const char *why = NULL;
        Fgx__Ctl__ServiceAddr *a;

        if (!json_is_string(av))
            return bad(r, av, "%s[%zu] is not a string", what, i);
        if (fgx_svcaddr_parse(json_string_value(av), (uint16_t)s->port, &sa, &why) < 0)
            return bad(r, av, "%s[%zu] \"%.60s\": %s", what, i, json_string_value(av),
                       why ? why : "not ADDR[:PORT]");
        a = malloc(sizeof(*a));
        if (!a)
            return -ENOMEM;
        fgx__ctl__service_addr__init(a);
        s->addrs[s->n_addrs++] = a;
        if (fgx_svcaddr_format_addr(&sa, text, sizeof(text)) < 0)
            return bad(r, av, "%s[%zu] cannot be written back", what, i);
        a->addr = strdup(text);
        if (!a->addr)
            return -ENOMEM;
        a->port = sa.port;
        a->has_edge = sa.edge != FGX_EDGE_DEFAULT;
        a->edge = sa.edge;
        a->has_to_port = sa.to_port != 0;
        a->to_port = sa.to_port;
    }
    return 0;
}

/* Service idx of the array svcs. */
/* services[idx].script: stored with service_id idx until assign_ids() knows the id. */
static int read_script(struct rd *r, const json_t *sv, size_t idx)
{
    static const char *const keys[] = {"filename", "deadline_ms", "source", "source_b64",
                                       "functions", NULL};
    static const char *const fkeys[] = {"name", "line", "active", "params", NULL};
    const json_t *so = json_object_get(sv, "script"), *src, *fns;
    Fgx__Ctl__Config *cfg = r->cfg;
    Fgx__Ctl__Script *sc;
    char where[64], fwhere[96];
    bool has = false;
    int rc;

    (void)snprintf(where, sizeof(where), "services[%zu].script", idx);
    rc = want_type(r, sv, "script", 0, "object", where);
    if (rc == 0)
        rc = known_keys(r, so, where, keys);
    if (rc == 0)
        rc = grow((void ***)&cfg->scripts, &r->cap_scripts, cfg->n_scripts + 1);
    if (rc < 0)
        return rc;
    sc = malloc(sizeof(*sc));
    if (!sc)
        return -ENOMEM;
    fgx__ctl__script__init(sc);
    cfg->scripts[cfg->n_scripts++] = sc;
    sc->service_id = (uint32_t)idx;
    rc = get_str(r, so, "filename", where, "script.py", &sc->filename);
    if (rc == 0)
        rc = get_uint(r, so, "deadline_ms", where, 10000, &has, &sc->deadline_ms);
    sc->has_deadline_ms = has;
    if (rc < 0)
        return rc;
    src = json_object_get(so, "source_b64");
    sc->has_source = 1;
    if (src) {
        const char *t = json_string_value(src);
        size_t tl = t ? strlen(t) : 0;

        sc->source.data = malloc(tl / 4 * 3 + 1);
        if (!sc->source.data)
            return -ENOMEM;
        if (!t || cli_b64_decode(t, tl, sc->source.data, &sc->source.len) < 0)
            return bad(r, src, "%s.source_b64 is not base64", where);
    } else {
        src = json_object_get(so, "source");
        if (!src)
            return bad(r, so, "%s: \"source\" is missing", where);
        rc = want_type(r, so, "source", 0, "string", where);
        if (rc < 0)
            return rc;
        sc->source.len = json_string_length(src);
        sc->source.data = malloc(sc->source.len + 1);
        if (!sc->source.data)
            return -ENOMEM;
        memcpy(sc->source.data, json_string_value(src), sc->source.len);
    }
    fns = json_object_get(so, "functions");
    if (!fns || !json_is_array(fns) || json_array_size(fns) == 0)
        return bad(r, so, "%s.functions must be a non-empty array", where);
    sc->functions = calloc(json_array_size(fns), sizeof(*sc->functions));
    if (!sc->functions)
        return -ENOMEM;
    for (size_t i = 0; i < json_array_size(fns); i++) {
        const json_t *fo = json_array_get(fns, i), *ps;
        Fgx__Ctl__ScriptFunction *f = malloc(sizeof(*f));

        if (!f)
            return -ENOMEM;
        fgx__ctl__script_function__init(f);
        sc->functions[sc->n_functions++] = f;
        (void)snprintf(fwhere, sizeof(fwhere), "%s.functions[%zu]", where, i);
        rc = want_type(r, fns, NULL, i, "object", fwhere);
        if (rc == 0)
            rc = known_keys(r, fo, fwhere, fkeys);
        if (rc == 0)
            rc = get_str(r, fo, "name", fwhere, NULL, &f->name);
        if (rc == 0)
            rc = get_uint(r, fo, "line", fwhere, UINT32_MAX, &has, &f->line);
        f->has_line = has;
        f->has_active = 1;
        if (rc == 0)
            rc = get_bool(r, fo, "active", fwhere, true, &f->active);
        if (rc < 0)
            return rc;
        ps = json_object_get(fo, "params");
        if (!ps || !json_is_array(ps))
            continue;
        f->params = calloc(json_array_size(ps) + 1, sizeof(*f->params));
        if (!f->params)
            return -ENOMEM;
        for (size_t j = 0; j < json_array_size(ps); j++) {
            const char *p = json_string_value(json_array_get(ps, j));

            f->params[f->n_params] = strdup(p ? p : "");
            if (!f->params[f->n_params++])
                return -ENOMEM;
        }
    }
    return 0;
}

static int read_service(struct rd *r, const json_t *svcs, size_t idx, bool *svc_has_id,
                        bool *flt_has_id)
{
    const json_t *sv = json_array_get(svcs, idx);
    static const char *const keys[] = {"id",        "name",    "proto",  "ip",
                                       "port",      "layer",   "active", "fail_open",
                                       "midstream", "filters", "addrs",  "to",
                                       "tls",       "upstream", "tls_cert_pem", "tls_key_pem", "script",
                                       "upstream_http", "limits", NULL};
    static const char *const uph[] = {"h2", "http1"};
    static const int uphv[] = {0, 1};
    static const char *const ups[] = {"tls", "plain"};
    static const int upv[] = {FGX__CTL__UPSTREAM__UPSTREAM_TLS, FGX__CTL__UPSTREAM__UPSTREAM_PLAIN};
    /* "http": TCP, the HTTP service kind (issue 26); the third value stands for it */
    static const char *const protos[] = {"tcp", "udp", "http"};
    static const int protov[] = {FGX__CTL__PROTO__PROTO_TCP, FGX__CTL__PROTO__PROTO_UDP, 3};
    static const char *const layers[] = {"nfqueue", "proxy", "external"};
    static const int layerv[] = {FGX__CTL__LAYER__LAYER_NFQUEUE, FGX__CTL__LAYER__LAYER_PROXY,
                                 FGX__CTL__LAYER__LAYER_EXTERNAL};
    static const char *const mids[] = {"reset", "scan"};
    static const int midv[] = {FGX__CTL__MIDSTREAM__MIDSTREAM_RESET,
                               FGX__CTL__MIDSTREAM__MIDSTREAM_SCAN};
    Fgx__Ctl__Config *cfg = r->cfg;
    const json_t *fs;
    Fgx__Ctl__Service *s;
    char where[48];
    bool has_port;
    int rc, e = 0;

    (void)snprintf(where, sizeof(where), "services[%zu]", idx);
    rc = want_type(r, svcs, NULL, idx, "object", where);
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
        rc = bad(r, json_object_get(sv, "name"),
                 "%s.name \"%.40s\" is a number, which would be read as a service id", where,
                 s->name);
    if (rc == 0 && s->name[0] == '\0')
        rc = bad(r, json_object_get(sv, "name"), "%s.name is empty", where);
    if (rc == 0 && !json_object_get(sv, "proto"))
        rc = bad(r, sv, "%s: \"proto\" is missing", where);
    if (rc == 0)
        rc = get_enum(r, sv, "proto", where, protos, protov, 3, 0, &e);
    s->has_http = s->http = e == 3;
    s->proto = e == 3 ? FGX__CTL__PROTO__PROTO_TCP : (Fgx__Ctl__Proto)e;
    if (rc == 0)
        rc = get_str(r, sv, "ip", where, "", &s->ip);
    if (rc == 0 && s->ip[0] != '\0' && !cli_args_ip_valid(s->ip))
        rc = bad(r, json_object_get(sv, "ip"),
                 "%s.ip \"%.60s\" is not an IPv4 or IPv6 address or prefix", where, s->ip);
    if (rc == 0)
        rc = get_uint(r, sv, "port", where, 65535, &has_port, &s->port);
    if (rc == 0 && !has_port)
        rc = bad(r, sv, "%s: \"port\" is missing", where);
    if (rc == 0)
        rc = read_addrs(r, sv, where, s);
    e = 0;
    if (rc == 0)
        rc = get_enum(r, sv, "layer", where, layers, layerv, 3, FGX__CTL__LAYER__LAYER_NFQUEUE, &e);
    s->layer = (Fgx__Ctl__Layer)e;
    if (rc == 0 && json_object_get(sv, "to"))
        rc = get_str(r, sv, "to", where, NULL, &s->to);
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
    if (rc == 0)
        rc = get_bool(r, sv, "tls", where, false, &s->tls);
    s->has_tls = s->tls;
    e = 0;
    if (rc == 0 && s->tls)
        rc = get_enum(r, sv, "upstream", where, ups, upv, 2, FGX__CTL__UPSTREAM__UPSTREAM_TLS, &e);
    s->has_upstream = s->tls;
    s->upstream = (Fgx__Ctl__Upstream)e;
    e = 0;
    if (rc == 0 && json_object_get(sv, "upstream_http")) {
        if (!s->http)
            rc = bad(r, json_object_get(sv, "upstream_http"),
                     "%s.upstream_http is for HTTP services (\"proto\": \"http\")", where);
        else
            rc = get_enum(r, sv, "upstream_http", where, uph, uphv, 2, 0, &e);
    }
    s->has_upstream_http1 = s->upstream_http1 = e == 1;
    for (int k = 0; rc == 0 && s->tls && k < 2; k++) {
        const char *key = k == 0 ? "tls_cert_pem" : "tls_key_pem";
        ProtobufCBinaryData *b = k == 0 ? &s->tls_cert : &s->tls_key;
        char *pem = NULL;

        if (!json_object_get(sv, key))
            continue; /* no key: controld decides (docs/fgexctl.md) */
        rc = get_str(r, sv, key, where, NULL, &pem);
        if (rc < 0)
            break;
        b->data = (uint8_t *)pem;
        b->len = strlen(pem);
        *(k == 0 ? &s->has_tls_cert : &s->has_tls_key) = 1;
    }
    if (rc == 0 && json_object_get(sv, "script"))
        rc = read_script(r, sv, idx);
    if (rc == 0 && json_object_get(sv, "limits"))
        rc = read_limits(r, sv, idx, s);
    if (rc < 0)
        return rc;
    fs = json_object_get(sv, "filters");
    if (!fs)
        return 0;
    (void)snprintf(where, sizeof(where), "services[%zu].filters", idx);
    rc = want_type(r, sv, "filters", 0, "array", where);
    if (rc == 0)
        rc = grow((void ***)&cfg->filters, &r->cap_filters, cfg->n_filters + json_array_size(fs));
    for (size_t k = 0; rc == 0 && k < json_array_size(fs); k++) {
        char fwhere[64];

        (void)snprintf(fwhere, sizeof(fwhere), "services[%zu].filters[%zu]", idx, k);
        rc = read_filter(r, fs, k, s->id, fwhere, &flt_has_id[cfg->n_filters]);
    }
    return rc;
}

/* Ids left out get the next free number; a repeated id is an error. */
static int assign_ids(struct rd *r, const json_t *svcs, const bool *svc_has, const bool *flt_has)
{
    Fgx__Ctl__Config *cfg = r->cfg;
    uint32_t next = 0;
    size_t k = 0;

    for (size_t i = 0; i < cfg->n_services; i++) {
        if (svc_has[i] && cfg->services[i]->id > next)
            next = cfg->services[i]->id;
        for (size_t j = 0; j < i; j++) {
            if (svc_has[i] && svc_has[j] && cfg->services[i]->id == cfg->services[j]->id)
                return bad(r, json_object_get(json_array_get(svcs, i), "id"),
                           "services[%zu].id %u is also the id of services[%zu]", i,
                           cfg->services[i]->id, j);
            if (strcmp(cfg->services[i]->name, cfg->services[j]->name) == 0)
                return bad(r, json_object_get(json_array_get(svcs, i), "name"),
                           "services[%zu].name \"%.40s\" is also the name of services[%zu]", i,
                           cfg->services[i]->name, j);
        }
    }
    for (size_t i = 0; i < cfg->n_services; i++) {
        const json_t *fs = json_object_get(json_array_get(svcs, i), "filters");
        size_t nf = fs ? json_array_size(fs) : 0;

        if (!svc_has[i]) {
            if (next == UINT32_MAX)
                return bad(r, json_array_get(svcs, i), "services[%zu]: no id left to give it", i);
            cfg->services[i]->id = ++next;
        }
        for (size_t f = 0; f < nf; f++)
            cfg->filters[k + f]->service_id = cfg->services[i]->id;
        k += nf;
    }
    /* read_script() left each script the index of its service */
    for (size_t i = 0; i < cfg->n_scripts; i++)
        cfg->scripts[i]->service_id = cfg->services[cfg->scripts[i]->service_id]->id;
    next = 0;
    for (size_t i = 0; i < cfg->n_filters; i++)
        if (flt_has[i] && cfg->filters[i]->id > next)
            next = cfg->filters[i]->id;
    for (size_t i = 0; i < cfg->n_filters; i++) {
        for (size_t j = 0; j < i && flt_has[i]; j++) {
            if (flt_has[j] && cfg->filters[i]->id == cfg->filters[j]->id) {
                /* Find the filter's position in the file for the message. */
                size_t si = 0, off = i;

                for (; si < json_array_size(svcs); si++) {
                    const json_t *fs = json_object_get(json_array_get(svcs, si), "filters");
                    size_t nf = fs ? json_array_size(fs) : 0;

                    if (off < nf)
                        return bad(r, json_object_get(json_array_get(fs, off), "id"),
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
    static const char *const keys[] = {"format",   "version", "settings", "services",
                                       "firewall", "game",    NULL};
    static const char *const skeys[] = {"auth_enabled", NULL};
    struct rd r = {.err = err, .errlen = errlen};
    json_t *doc = NULL;
    const json_t *v, *svcs;
    bool *svc_has = NULL, *flt_has = NULL;
    size_t nflt = 0;
    uint64_t ver = 0;
    int rc;

    rc = cli_json_load(text, len, &doc, err, errlen);
    if (rc < 0)
        return rc;
    rc = cli_json_pos_init(&r.pos, text, len, doc);
    if (rc < 0) {
        json_decref(doc);
        return rc;
    }
    r.cfg = malloc(sizeof(*r.cfg));
    if (!r.cfg) {
        rc = -ENOMEM;
        goto out;
    }
    fgx__ctl__config__init(r.cfg);
    r.doc = doc;
    rc = want_type(&r, NULL, NULL, 0, "object", "the document");
    if (rc == 0)
        rc = known_keys(&r, doc, "the document", keys);
    if (rc < 0)
        goto out;
    v = json_object_get(doc, "format");
    if (v && (!json_is_string(v) || strcmp(json_string_value(v), CLI_CONFIG_FORMAT) != 0)) {
        rc = bad_in(&r, doc, "format", 0,
                    "\"format\" must be \"" CLI_CONFIG_FORMAT "\": this is not an fgex "
                    "configuration");
        goto out;
    }
    v = json_object_get(doc, "version");
    if (v && (uint_of(v, UINT32_MAX, &ver) < 0 || ver < 1 || ver > CLI_CONFIG_VERSION)) {
        rc =
            bad_in(&r, doc, "version", 0,
                   "\"version\" must be 1 to %d (this fgexctl reads no other)", CLI_CONFIG_VERSION);
        goto out;
    }
    r.version = v ? ver : CLI_CONFIG_VERSION;
    v = json_object_get(doc, "settings");
    if (v) {
        rc = want_type(&r, doc, "settings", 0, "object", "settings");
        if (rc == 0)
            rc = known_keys(&r, v, "settings", skeys);
        if (rc == 0 && json_object_get(v, "auth_enabled")) {
            r.cfg->has_auth_enabled = 1;
            rc = get_bool(&r, v, "auth_enabled", "settings", true, &r.cfg->auth_enabled);
        }
        if (rc < 0)
            goto out;
    }
    v = json_object_get(doc, "firewall");
    if (v) {
        char why[400];

        rc = cli_fw_config_from_json(v, &r.cfg->fw, why, sizeof(why));
        if (rc == -EINVAL)
            rc = bad(&r, v, "%s", why);
        if (rc < 0)
            goto out;
    }
    v = json_object_get(doc, "game");
    if (v) {
        rc = read_game(&r, v);
        if (rc < 0)
            goto out;
    }
    svcs = json_object_get(doc, "services");
    if (!svcs) {
        rc = bad(&r, doc, "\"services\" is missing (an empty configuration is \"services\": [])");
        goto out;
    }
    rc = want_type(&r, doc, "services", 0, "array", "services");
    if (rc < 0)
        goto out;
    for (size_t i = 0; i < json_array_size(svcs); i++) {
        const json_t *fs = json_object_get(json_array_get(svcs, i), "filters");

        if (fs && json_is_array(fs))
            nflt += json_array_size(fs);
    }
    svc_has = calloc(json_array_size(svcs) + 1, sizeof(*svc_has));
    flt_has = calloc(nflt + 1, sizeof(*flt_has));
    if (!svc_has || !flt_has ||
        grow((void ***)&r.cfg->services, &r.cap_services, json_array_size(svcs)) < 0) {
        rc = -ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < json_array_size(svcs) && rc == 0; i++)
        rc = read_service(&r, svcs, i, &svc_has[i], flt_has);
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
    cli_json_pos_release(&r.pos);
    json_decref(doc);
    return rc;
}
