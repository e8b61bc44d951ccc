/* Compile half of the rulesets (controld only, links libhs): validates a pattern when it is
 * added, and compiles a service's active filters of one direction into a serialized hyperscan
 * database, which controld caches under fgx_ruleset_key() and pushes to the workers. */
#include "fgx/ruleset.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hs.h>

#include "fgx/log.h"
#include "hs_err.h"

/* Longer regexes are almost certainly a paste mistake and only slow the compiler down. */
#define FGX_REGEX_MAX 4096

static int proto_mode(int ipproto, unsigned *mode)
{
    switch (ipproto) {
    case IPPROTO_TCP:
        *mode = HS_MODE_STREAM;
        return 0;
    case IPPROTO_UDP:
        *mode = HS_MODE_BLOCK;
        return 0;
    default:
        return -EINVAL;
    }
}

static unsigned pattern_flags(bool nocase)
{
    return HS_FLAG_DOTALL | HS_FLAG_SINGLEMATCH | (nocase ? HS_FLAG_CASELESS : 0);
}

/* The hyperscan id of a pattern: its filter id, with FGX_FILTER_ID_LOG for a log filter. */
static unsigned pattern_id(const struct fgx_pattern *p)
{
    return p->filter_id;
}

static bool pattern_applies(const struct fgx_pattern *p, enum fgx_dir dir)
{
    return ((unsigned)p->dir & (unsigned)dir) != 0;
}

/* What hyperscan itself cannot say: an empty or oversized regex. */
static int regex_precheck(const char *regex, char *err, size_t errlen)
{
    size_t len;

    if (regex == NULL || regex[0] == '\0') {
        fgx_err_set(err, errlen, "empty regex");
        return -EINVAL;
    }
    len = strnlen(regex, FGX_REGEX_MAX + 1);
    if (len > FGX_REGEX_MAX) {
        fgx_err_set(err, errlen, "regex longer than %d bytes", FGX_REGEX_MAX);
        return -EINVAL;
    }
    return 0;
}

/* What the text of a regex holds outside character classes and escapes, for the warnings that
 * hyperscan's expression info cannot give: where '^' and '$' are, and whether (?m) changes them. */
struct regex_marks {
    bool caret;     /* ^ or \A: the start of the data */
    bool eod;       /* $, \z or \Z */
    bool multiline; /* (?m...) somewhere: ^ and $ also match at line breaks */
};

static void regex_marks_scan(const char *re, struct regex_marks *m)
{
    bool in_class = false, quoted = false;

    memset(m, 0, sizeof(*m));
    for (const char *p = re; *p != '\0'; p++) {
        if (quoted) { /* \Q...\E: literal text */
            if (p[0] == '\\' && p[1] == 'E') {
                quoted = false;
                p++;
            }
            continue;
        }
        if (*p == '\\') {
            if (p[1] == '\0')
                break;
            p++;
            if (*p == 'Q')
                quoted = true;
            else if (!in_class && *p == 'A')
                m->caret = true;
            else if (!in_class && (*p == 'z' || *p == 'Z'))
                m->eod = true;
            continue;
        }
        if (in_class) {
            if (*p == ']')
                in_class = false;
            continue;
        }
        if (*p == '[') {
            in_class = true;
            /* A ']' first in the class (after an optional '^') is a literal. */
            if (p[1] == '^')
                p++;
            if (p[1] == ']')
                p++;
        } else if (*p == '^') {
            m->caret = true;
        } else if (*p == '$') {
            m->eod = true;
        } else if (p[0] == '(' && p[1] == '?') {
            /* Option letters up to ')' or ':'; those after '-' are turned off. */
            for (const char *q = p + 2; *q != '\0' && *q != ')' && *q != ':'; q++) {
                if (*q == '-')
                    break;
                if (*q == 'm')
                    m->multiline = true;
            }
        }
    }
}

static void warn_add(struct fgx_pattern_warnings *w, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void warn_add(struct fgx_pattern_warnings *w, const char *fmt, ...)
{
    va_list ap;

    if (w == NULL || w->n >= FGX_PATTERN_WARN_MAX)
        return;
    va_start(ap, fmt);
    (void)vsnprintf(w->text[w->n++], FGX_PATTERN_WARN_LEN, fmt, ap); /* truncation is fine */
    va_end(ap);
}

static int probe_hit(unsigned int id, unsigned long long from, unsigned long long to,
                     unsigned int flags, void *arg)
{
    (void)id;
    (void)from;
    (void)to;
    (void)flags;
    *(bool *)arg = true;
    return 1;
}

static bool probe_text_byte(unsigned b)
{
    return (b >= 0x20 && b <= 0x7e) || b == '\t' || b == '\r' || b == '\n';
}

/* How many of the probe's streams (FGX_PATTERN_PROBE_LEN times one byte value) db matches, of
 * all 256 (*all) and of the text bytes (*text, of *ntext). -1: hyperscan could not scan. */
static int probe_first_bytes(const hs_database_t *db, bool stream, unsigned *all, unsigned *text,
                             unsigned *ntext)
{
    hs_scratch_t *scr = NULL;
    char buf[FGX_PATTERN_PROBE_LEN];

    *all = *text = *ntext = 0;
    if (hs_alloc_scratch(db, &scr) != HS_SUCCESS)
        return -1;
    for (unsigned b = 0; b < 256; b++) {
        bool hit = false;

        memset(buf, (int)b, sizeof(buf));
        if (stream) {
            hs_stream_t *st = NULL;

            if (hs_open_stream(db, 0, &st) != HS_SUCCESS)
                break;
            (void)hs_scan_stream(st, buf, sizeof(buf), 0, scr, probe_hit, &hit);
            /* no end-of-data matches: the workers never ask for them */
            (void)hs_close_stream(st, scr, NULL, NULL);
        } else {
            (void)hs_scan(db, buf, sizeof(buf), 0, scr, probe_hit, &hit);
        }
        *all += hit;
        if (probe_text_byte(b)) {
            (*ntext)++;
            *text += hit;
        }
    }
    hs_free_scratch(scr);
    return 0;
}

/* Refuse, in err, what can never match where it is used, and say in w what is likely to match
 * honest traffic. info is hyperscan's analysis of the pattern with fgex's flags, db the pattern
 * compiled alone in the mode of its use. */
static int pattern_judge(const char *regex, const hs_expr_info_t *info, const hs_database_t *db,
                         bool stream, struct fgx_pattern_warnings *w, char *err, size_t errlen)
{
    const char *unit = stream ? "connection" : "datagram";
    unsigned all = 0, text = 0, ntext = 1;
    struct regex_marks m;

    regex_marks_scan(regex, &m);
    /* In stream mode the end of the data is the end of the stream, and the workers close a
     * stream without asking for its end-of-data matches: by then every byte has passed. */
    if (stream && info->matches_only_at_eod) {
        fgx_err_set(err, errlen,
                "it matches only at the end of the data ('$', '\\z' or '\\Z'), which a TCP "
                "stream never reaches while it can still be blocked: it would never match "
                "(on a TCP service '$' is not the end of a line: match the line break, \\n)");
        return -EINVAL;
    }
    if (info->min_width == 0) {
        warn_add(w,
                 "it matches any %s: it can match without consuming a byte (at a word "
                 "boundary \\b, the start of the stream ^ or \\A, a line's start or end with "
                 "(?m)), a place nearly every %s has, so it would block nearly all of them",
                 unit, unit);
        if (w)
            w->any_stream = true;
    } else if (w && probe_first_bytes(db, stream, &all, &text, &ntext) == 0 &&
               (all * 100 >= 256u * FGX_PATTERN_ANY_PCT ||
                text * 100 >= ntext * FGX_PATTERN_ANY_PCT)) {
        warn_add(w,
                 "it matches any %s within its first %d bytes: %d equal bytes match it for "
                 "%u of the 256 byte values (%u of the %u text characters)",
                 unit, FGX_PATTERN_PROBE_LEN, FGX_PATTERN_PROBE_LEN, all, text, ntext);
        w->any_stream = true;
    } else if (info->min_width <= FGX_PATTERN_SHORT)
        warn_add(w,
                 "it matches as few as %u byte%s: likely to block honest traffic too (the "
                 "game's checker included)",
                 info->min_width, info->min_width == 1 ? "" : "s");
    if (stream && m.caret && !m.multiline)
        warn_add(w,
                 "'^' (or \\A) is the start of the connection's stream in that direction, not "
                 "of each request or line: it matches only the first bytes sent (for the start "
                 "of a line use (?m)^ or \\n)");
    if (stream && info->matches_at_eod && m.eod && !m.multiline)
        warn_add(w,
                 "the alternatives that need the end of the data ('$', '\\z' or '\\Z') never "
                 "match on a TCP stream, which never ends while it can still be blocked");
    return 0;
}

int fgx_pattern_lint(const char *regex, bool nocase, int ipproto, struct fgx_pattern_warnings *w,
                     char *err, size_t errlen)
{
    hs_compile_error_t *cerr = NULL;
    hs_database_t *db = NULL;
    hs_expr_info_t *info = NULL;
    unsigned flags = pattern_flags(nocase), id = 0, mode;
    int ret;

    fgx_err_set(err, errlen, "%s", "");
    if (w != NULL)
        memset(w, 0, sizeof(*w));
    if (proto_mode(ipproto, &mode) < 0) {
        fgx_err_set(err, errlen, "unsupported IP protocol %d", ipproto);
        ret = -EINVAL;
        goto out;
    }
    ret = regex_precheck(regex, err, errlen);
    if (ret < 0)
        goto out;
    /* hs_compile_multi, as fgx_ruleset_compile uses, so both accept exactly the same set. */
    if (hs_compile_multi(&regex, &flags, &id, 1, mode, NULL, &db, &cerr) != HS_SUCCESS) {
        const char *msg = cerr != NULL ? cerr->message : "hyperscan compile failed";

        /* Hyperscan's advice names a flag fgex never sets, and users cannot set. */
        if (strstr(msg, "HS_FLAG_ALLOWEMPTY") != NULL)
            fgx_err_set(err, errlen, "a regex that matches the empty string would match every %s",
                    mode == HS_MODE_STREAM ? "connection" : "datagram");
        else
            fgx_err_set(err, errlen, "%s", msg);
        ret = cerr != NULL && strstr(cerr->message, "allocate") != NULL ? -ENOMEM : -EINVAL;
        goto out;
    }
    hs_free_compile_error(cerr);
    cerr = NULL;
    if (hs_expression_info(regex, flags, &info, &cerr) != HS_SUCCESS) {
        fgx_err_set(err, errlen, "%s", cerr != NULL ? cerr->message : "hyperscan analysis failed");
        ret = cerr != NULL && strstr(cerr->message, "allocate") != NULL ? -ENOMEM : -EINVAL;
        goto out;
    }
    ret = pattern_judge(regex, info, db, mode == HS_MODE_STREAM, w, err, errlen);
out:
    if (ret < 0 && w != NULL)
        memset(w, 0, sizeof(*w));
    free(info); /* hyperscan's misc allocator, malloc by default */
    hs_free_compile_error(cerr);
    if (db != NULL)
        hs_free_database(db);
    return ret;
}

int fgx_filter_regex_lint(const char *regex, bool nocase, int ipproto,
                          struct fgx_pattern_warnings *w, char *err, size_t errlen)
{
    char herr[512];

    if (w != NULL)
        memset(w, 0, sizeof(*w));
    if (regex == NULL || regex[0] == '\0') {
        fgx_err_set(err, errlen, "empty regex");
        return -EINVAL;
    }
    if (strlen(regex) > FGX_FILTER_REGEX_MAX) {
        fgx_err_set(err, errlen, "regex longer than %d bytes", FGX_FILTER_REGEX_MAX);
        return -EINVAL;
    }
    if (fgx_pattern_lint(regex, nocase, ipproto, w, herr, sizeof(herr)) < 0) {
        fgx_err_set(err, errlen, "invalid regex \"%.200s\": %s", regex, herr);
        return -EINVAL;
    }
    return 0;
}

int fgx_pattern_check(const char *regex, bool nocase, int ipproto, char *err, size_t errlen)
{
    return fgx_pattern_lint(regex, nocase, ipproto, NULL, err, errlen);
}

static uint64_t hash_u64(uint64_t h, uint64_t v)
{
    unsigned char b[8];
    int i;

    /* Little-endian on every host, so a cache key written by one machine means the same on
     * another. */
    for (i = 0; i < 8; i++)
        b[i] = (unsigned char)(v >> (8 * i));
    return fgx_hash64(b, sizeof(b), h);
}

uint64_t fgx_ruleset_key(const struct fgx_pattern *pats, size_t n, enum fgx_dir dir, int ipproto)
{
    const char *ver = hs_version();
    uint64_t h = FGX_HASH64_SEED;
    unsigned mode;
    size_t i;

    /* The hyperscan version is part of the input: an upgraded library must not be handed a
     * database from the cache that it would refuse. */
    h = hash_u64(h, strlen(ver));
    h = fgx_hash64(ver, strlen(ver), h);
    if (proto_mode(ipproto, &mode) < 0)
        mode = 0x80000000u | (unsigned)ipproto;
    h = hash_u64(h, mode);
    for (i = 0; i < n; i++) {
        const struct fgx_pattern *p = &pats[i];
        size_t len = p->regex != NULL ? strlen(p->regex) : 0;

        if (!pattern_applies(p, dir))
            continue;
        /* A block filter hashes as it always did, so caches keep their keys. */
        h = hash_u64(h, pattern_id(p));
        h = hash_u64(h, pattern_flags(p->nocase));
        h = hash_u64(h, len);
        h = fgx_hash64(p->regex, len, h);
    }
    return h;
}

int fgx_ruleset_compile(const struct fgx_pattern *pats, size_t n, enum fgx_dir dir, int ipproto,
                        struct fgx_blob *out, char *err, size_t errlen)
{
    const char **exprs = NULL;
    unsigned *flags = NULL, *ids = NULL, mode;
    hs_compile_error_t *cerr = NULL;
    hs_database_t *db = NULL;
    char *bytes = NULL, why[64];
    size_t i, m = 0, len = 0;
    hs_error_t rc;
    int ret;

    memset(out, 0, sizeof(*out));
    fgx_err_set(err, errlen, "%s", "");
    if (proto_mode(ipproto, &mode) < 0) {
        fgx_err_set(err, errlen, "unsupported IP protocol %d", ipproto);
        ret = -EINVAL;
        goto out;
    }
    for (i = 0; i < n; i++)
        m += pattern_applies(&pats[i], dir);
    if (m == 0) {
        ret = 0;
        goto out;
    }

    exprs = calloc(m, sizeof(*exprs));
    flags = calloc(m, sizeof(*flags));
    ids = calloc(m, sizeof(*ids));
    if (exprs == NULL || flags == NULL || ids == NULL) {
        fgx_err("ruleset compile: out of memory for %zu patterns", m);
        ret = -ENOMEM;
        goto out;
    }
    m = 0;
    for (i = 0; i < n; i++) {
        if (!pattern_applies(&pats[i], dir))
            continue;
        ret = regex_precheck(pats[i].regex, why, sizeof(why));
        if (ret < 0) {
            fgx_err_set(err, errlen, "filter %u: %s", pats[i].filter_id & FGX_FILTER_ID_MASK, why);
            fgx_err("ruleset compile: filter %u: %s", pats[i].filter_id & FGX_FILTER_ID_MASK, why);
            goto out;
        }
        exprs[m] = pats[i].regex;
        flags[m] = pattern_flags(pats[i].nocase);
        ids[m] = pattern_id(&pats[i]);
        m++;
    }

    rc = hs_compile_multi(exprs, flags, ids, (unsigned)m, mode, NULL, &db, &cerr);
    if (rc != HS_SUCCESS) {
        const char *msg = cerr != NULL ? cerr->message : fgx_hs_strerror(rc);

        if (cerr != NULL && cerr->expression >= 0 && (size_t)cerr->expression < m)
            fgx_err_set(err, errlen, "filter %u: %s", ids[cerr->expression] & FGX_FILTER_ID_MASK,
                        msg);
        else
            fgx_err_set(err, errlen, "%s", msg);
        if (cerr != NULL && cerr->expression >= 0 && (size_t)cerr->expression < m)
            fgx_err("ruleset compile: filter %u: %s", ids[cerr->expression] & FGX_FILTER_ID_MASK,
                    msg);
        else
            fgx_err("ruleset compile (%zu patterns): %s", m, msg);
        ret = cerr != NULL && strstr(cerr->message, "allocate") != NULL ? -ENOMEM : -EINVAL;
        goto out;
    }
    rc = hs_serialize_database(db, &bytes, &len);
    if (rc != HS_SUCCESS) {
        fgx_err_set(err, errlen, "serialize: %s", fgx_hs_strerror(rc));
        fgx_err("ruleset serialize: %s", fgx_hs_strerror(rc));
        ret = rc == HS_NOMEM ? -ENOMEM : -EINVAL;
        goto out;
    }
    /* Copy into plain malloc'd memory so that the blob's owner frees it with free(), whatever
     * allocator hyperscan was given. */
    out->data = malloc(len);
    if (out->data == NULL) {
        fgx_err_set(err, errlen, "out of memory");
        fgx_err("ruleset compile: out of memory for a %zu-byte database", len);
        ret = -ENOMEM;
        goto out;
    }
    memcpy(out->data, bytes, len);
    out->len = len;
    out->hash = fgx_ruleset_key(pats, n, dir, ipproto);
    ret = 0;
out:
    free(bytes); /* hyperscan's misc allocator, malloc by default */
    if (db != NULL)
        hs_free_database(db);
    hs_free_compile_error(cerr);
    free(ids);
    free(flags);
    free(exprs);
    return ret;
}
