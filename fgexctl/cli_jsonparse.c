/* fgexctl input stage: the strict JSON parser behind `fgexctl import` (cli_config.c reads the
 * tree it builds). A recursive descent over the whole file in memory: configurations are small,
 * and a refused file must say exactly where it went wrong, so the first error stops the parse
 * with its line and column. */
#include "cli_jsonparse.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct parser {
    const unsigned char *p, *end, *start;
    unsigned line;
    const unsigned char *line_start;
    struct cli_jerr *err;
    int depth;
};

static int perr(struct parser *ps, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int perr(struct parser *ps, const char *fmt, ...)
{
    va_list ap;

    ps->err->offset = (size_t)(ps->p - ps->start);
    ps->err->line = ps->line;
    ps->err->col = (unsigned)(ps->p - ps->line_start) + 1;
    va_start(ap, fmt);
    (void)vsnprintf(ps->err->msg, sizeof(ps->err->msg), fmt, ap);
    va_end(ap);
    return -EINVAL;
}

/* The character at p, for a message: printable as is, else as a code. */
static const char *shown(struct parser *ps, char *buf, size_t len)
{
    if (ps->p >= ps->end)
        return "the end of the file";
    if (*ps->p >= 0x20 && *ps->p < 0x7f)
        (void)snprintf(buf, len, "'%c'", *ps->p);
    else
        (void)snprintf(buf, len, "byte 0x%02x", *ps->p);
    return buf;
}

static void skip_ws(struct parser *ps)
{
    while (ps->p < ps->end) {
        unsigned char c = *ps->p;

        if (c == '\n') {
            ps->line++;
            ps->line_start = ps->p + 1;
        } else if (c != ' ' && c != '\t' && c != '\r') {
            return;
        }
        ps->p++;
    }
}

const char *cli_jv_type_name(enum cli_jv_type t)
{
    switch (t) {
    case CLI_JV_NULL:
        return "null";
    case CLI_JV_BOOL:
        return "boolean";
    case CLI_JV_NUM:
        return "number";
    case CLI_JV_STR:
        return "string";
    case CLI_JV_ARR:
        return "array";
    default:
        return "object";
    }
}

void cli_jv_free(struct cli_jv *v)
{
    if (!v)
        return;
    for (size_t i = 0; i < v->n; i++) {
        cli_jv_free(v->items[i]);
        if (v->keys)
            free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
    free(v->s);
    free(v->legacy);
    free(v);
}

static struct cli_jv *jv_new(struct parser *ps, enum cli_jv_type t)
{
    struct cli_jv *v = calloc(1, sizeof(*v));

    if (!v)
        return NULL;
    v->type = t;
    v->line = ps->line;
    v->col = (unsigned)(ps->p - ps->line_start) + 1;
    return v;
}

/* A growable byte buffer for decoded strings. */
struct sbuf {
    char *b;
    size_t len, cap;
};

static int sbuf_put(struct sbuf *sb, const void *data, size_t n)
{
    if (sb->len + n + 1 > sb->cap) {
        size_t cap = sb->cap ? sb->cap : 32;
        char *nb;

        while (cap < sb->len + n + 1)
            cap *= 2;
        nb = realloc(sb->b, cap);
        if (!nb)
            return -ENOMEM;
        sb->b = nb;
        sb->cap = cap;
    }
    memcpy(sb->b + sb->len, data, n);
    sb->len += n;
    sb->b[sb->len] = '\0';
    return 0;
}

static int sbuf_put_cp(struct sbuf *sb, uint32_t cp)
{
    unsigned char u[4];
    size_t n;

    if (cp < 0x80) {
        u[0] = (unsigned char)cp;
        n = 1;
    } else if (cp < 0x800) {
        u[0] = (unsigned char)(0xc0 | cp >> 6);
        u[1] = (unsigned char)(0x80 | (cp & 0x3f));
        n = 2;
    } else if (cp < 0x10000) {
        u[0] = (unsigned char)(0xe0 | cp >> 12);
        u[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3f));
        u[2] = (unsigned char)(0x80 | (cp & 0x3f));
        n = 3;
    } else {
        u[0] = (unsigned char)(0xf0 | cp >> 18);
        u[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3f));
        u[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3f));
        u[3] = (unsigned char)(0x80 | (cp & 0x3f));
        n = 4;
    }
    return sbuf_put(sb, u, n);
}

/* Length of the valid UTF-8 sequence at s (lead byte >= 0x80), or 0. Overlong forms,
 * surrogates and code points above U+10FFFF are not valid. */
static size_t utf8_seq(const unsigned char *s, const unsigned char *end)
{
    unsigned char c = s[0];
    size_t n;
    uint32_t cp;

    if (c >= 0xc2 && c <= 0xdf) {
        n = 2;
        cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
        n = 3;
        cp = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        n = 4;
        cp = c & 0x07;
    } else {
        return 0;
    }
    if ((size_t)(end - s) < n)
        return 0;
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10ffff ||
        (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return n;
}

static int hex4(struct parser *ps, uint32_t *out)
{
    uint32_t v = 0;

    for (int i = 0; i < 4; i++, ps->p++) {
        unsigned char c = ps->p < ps->end ? *ps->p : 0;

        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (uint32_t)(c - 'A' + 10);
        else
            return perr(ps, "\\u must be followed by four hex digits");
    }
    *out = v;
    return 0;
}

/* One escape into sb; *ucp gets the code point of a \u escape, else UINT32_MAX. */
static int parse_escape(struct parser *ps, struct sbuf *sb, uint32_t *ucp)
{
    const unsigned char *esc = ps->p;
    uint32_t cp = 0, lo = 0;
    char c;
    int rc;

    *ucp = UINT32_MAX;
    ps->p++; /* the backslash */
    if (ps->p >= ps->end)
        return perr(ps, "unterminated string");
    switch (*ps->p) {
    case '"':
    case '\\':
    case '/':
        c = (char)*ps->p;
        break;
    case 'b':
        c = '\b';
        break;
    case 'f':
        c = '\f';
        break;
    case 'n':
        c = '\n';
        break;
    case 'r':
        c = '\r';
        break;
    case 't':
        c = '\t';
        break;
    case 'u':
        ps->p++;
        rc = hex4(ps, &cp);
        if (rc < 0)
            return rc;
        if (cp >= 0xdc00 && cp <= 0xdfff) {
            ps->p = esc;
            return perr(ps, "a low surrogate \\u%04x without a high one before it", (unsigned)cp);
        }
        if (cp >= 0xd800 && cp <= 0xdbff) {
            if (ps->end - ps->p < 2 || ps->p[0] != '\\' || ps->p[1] != 'u') {
                ps->p = esc;
                return perr(ps, "a high surrogate \\u%04x without a low one after it",
                            (unsigned)cp);
            }
            ps->p += 2;
            rc = hex4(ps, &lo);
            if (rc < 0)
                return rc;
            if (lo < 0xdc00 || lo > 0xdfff) {
                ps->p = esc;
                return perr(ps, "a high surrogate \\u%04x without a low one after it",
                            (unsigned)cp);
            }
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
        }
        *ucp = cp;
        return sbuf_put_cp(sb, cp);
    default: {
        char b[24];

        return perr(ps, "invalid escape \\%s in a string", shown(ps, b, sizeof(b)));
    }
    }
    ps->p++;
    return sbuf_put(sb, &c, 1);
}

/* A string, ps->p at its opening quote. The decoded bytes go to *out (malloc'd); *legacy (may
 * be NULL) gets the version-1 reading (struct cli_jv), or NULL when it is the same. */
static int parse_string_raw(struct parser *ps, char **out, size_t *outlen, char **legacy,
                            size_t *legacy_len)
{
    struct sbuf sb = {NULL, 0, 0}, lb = {NULL, 0, 0};
    bool differs = false;
    const unsigned char *open = ps->p;
    unsigned open_line = ps->line;
    const unsigned char *open_ls = ps->line_start;
    int rc = 0;

    ps->p++;
    if (sbuf_put(&sb, "", 0) < 0 || (legacy && sbuf_put(&lb, "", 0) < 0)) {
        free(sb.b);
        return -ENOMEM;
    }
    for (;;) {
        const unsigned char *run = ps->p;

        while (ps->p < ps->end && *ps->p >= 0x20 && *ps->p < 0x80 && *ps->p != '"' &&
               *ps->p != '\\')
            ps->p++;
        if (ps->p > run && (rc = sbuf_put(&sb, run, (size_t)(ps->p - run))) < 0)
            goto fail;
        if (legacy && ps->p > run && (rc = sbuf_put(&lb, run, (size_t)(ps->p - run))) < 0)
            goto fail;
        if (ps->p >= ps->end) {
            ps->p = open;
            ps->line = open_line;
            ps->line_start = open_ls;
            rc = perr(ps, "unterminated string");
            goto fail;
        }
        if (*ps->p == '"') {
            ps->p++;
            break;
        }
        if (*ps->p == '\\') {
            size_t before = sb.len;
            uint32_t ucp;

            rc = parse_escape(ps, &sb, &ucp);
            if (rc == 0 && legacy) {
                if (ucp >= 0x80 && ucp <= 0xff) {
                    unsigned char byte = (unsigned char)ucp;

                    rc = sbuf_put(&lb, &byte, 1);
                    differs = true;
                } else {
                    rc = sbuf_put(&lb, sb.b + before, sb.len - before);
                }
            }
        } else if (*ps->p < 0x20) {
            rc = perr(ps, "control character 0x%02x in a string (escape it, e.g. \\n)", *ps->p);
        } else {
            size_t n = utf8_seq(ps->p, ps->end);

            if (n == 0) {
                rc = perr(ps, "invalid UTF-8 in a string");
            } else {
                rc = sbuf_put(&sb, ps->p, n);
                if (rc == 0 && legacy)
                    rc = sbuf_put(&lb, ps->p, n);
                ps->p += n;
            }
        }
        if (rc < 0)
            goto fail;
    }
    *out = sb.b;
    *outlen = sb.len;
    if (legacy) {
        *legacy = differs ? lb.b : NULL;
        *legacy_len = differs ? lb.len : 0;
        if (!differs)
            free(lb.b);
    }
    return 0;
fail:
    free(sb.b);
    free(lb.b);
    return rc;
}

static int parse_value(struct parser *ps, struct cli_jv **out);

static int parse_number(struct parser *ps, struct cli_jv *v)
{
    const unsigned char *s = ps->p;

    if (ps->p < ps->end && *ps->p == '-')
        ps->p++;
    if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9')
        return perr(ps, "a number needs a digit here");
    if (*ps->p == '0') {
        ps->p++;
        if (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9')
            return perr(ps, "a number cannot have a leading zero");
    } else {
        while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9')
            ps->p++;
    }
    if (ps->p < ps->end && *ps->p == '.') {
        ps->p++;
        if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9')
            return perr(ps, "a digit must follow the decimal point");
        while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9')
            ps->p++;
    }
    if (ps->p < ps->end && (*ps->p == 'e' || *ps->p == 'E')) {
        ps->p++;
        if (ps->p < ps->end && (*ps->p == '+' || *ps->p == '-'))
            ps->p++;
        if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9')
            return perr(ps, "a digit must follow the exponent");
        while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9')
            ps->p++;
    }
    v->len = (size_t)(ps->p - s);
    v->s = malloc(v->len + 1);
    if (!v->s)
        return -ENOMEM;
    memcpy(v->s, s, v->len);
    v->s[v->len] = '\0';
    return 0;
}

static int push_item(struct cli_jv *v, struct cli_jv *item, char *key, size_t *cap)
{
    if (v->n == *cap) {
        size_t ncap = *cap ? *cap * 2 : 8;
        struct cli_jv **ni = realloc(v->items, ncap * sizeof(struct cli_jv *));

        if (!ni)
            return -ENOMEM;
        v->items = ni;
        if (v->type == CLI_JV_OBJ) {
            char **nk = realloc(v->keys, ncap * sizeof(*nk));

            if (!nk)
                return -ENOMEM;
            v->keys = nk;
        }
        *cap = ncap;
    }
    v->items[v->n] = item;
    if (v->type == CLI_JV_OBJ)
        v->keys[v->n] = key;
    v->n++;
    return 0;
}

static int parse_array(struct parser *ps, struct cli_jv *v)
{
    size_t cap = 0;
    char b[24];
    int rc;

    ps->p++;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == ']') {
        ps->p++;
        return 0;
    }
    for (;;) {
        struct cli_jv *item = NULL;

        skip_ws(ps);
        if (ps->p < ps->end && *ps->p == ']')
            return perr(ps, "a trailing comma before ']'");
        rc = parse_value(ps, &item);
        if (rc < 0)
            return rc;
        rc = push_item(v, item, NULL, &cap);
        if (rc < 0) {
            cli_jv_free(item);
            return rc;
        }
        skip_ws(ps);
        if (ps->p < ps->end && *ps->p == ',') {
            ps->p++;
            continue;
        }
        if (ps->p < ps->end && *ps->p == ']') {
            ps->p++;
            return 0;
        }
        return perr(ps, "expected ',' or ']' in an array, found %s", shown(ps, b, sizeof(b)));
    }
}

static int parse_object(struct parser *ps, struct cli_jv *v)
{
    size_t cap = 0;
    char b[24];
    int rc;

    ps->p++;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == '}') {
        ps->p++;
        return 0;
    }
    for (;;) {
        struct cli_jv *item = NULL;
        const unsigned char *kp;
        char *key = NULL;
        size_t klen;

        skip_ws(ps);
        if (ps->p < ps->end && *ps->p == '}')
            return perr(ps, "a trailing comma before '}'");
        if (ps->p >= ps->end || *ps->p != '"')
            return perr(ps, "expected a key in quotes, found %s", shown(ps, b, sizeof(b)));
        kp = ps->p;
        rc = parse_string_raw(ps, &key, &klen, NULL, NULL);
        if (rc < 0 || !key)
            return rc < 0 ? rc : -ENOMEM;
        if (strlen(key) != klen || cli_jv_get(v, key)) {
            const unsigned char *after = ps->p;

            ps->p = kp;
            rc = strlen(key) != klen ? perr(ps, "a key cannot contain \\u0000")
                                     : perr(ps, "duplicate key \"%.60s\"", key);
            ps->p = after;
            free(key);
            return rc;
        }
        skip_ws(ps);
        if (ps->p >= ps->end || *ps->p != ':') {
            free(key);
            return perr(ps, "expected ':' after a key, found %s", shown(ps, b, sizeof(b)));
        }
        ps->p++;
        skip_ws(ps);
        rc = parse_value(ps, &item);
        if (rc < 0) {
            free(key);
            return rc;
        }
        rc = push_item(v, item, key, &cap);
        if (rc < 0) {
            free(key);
            cli_jv_free(item);
            return rc;
        }
        skip_ws(ps);
        if (ps->p < ps->end && *ps->p == ',') {
            ps->p++;
            continue;
        }
        if (ps->p < ps->end && *ps->p == '}') {
            ps->p++;
            return 0;
        }
        return perr(ps, "expected ',' or '}' in an object, found %s", shown(ps, b, sizeof(b)));
    }
}

static bool literal(struct parser *ps, const char *word)
{
    size_t n = strlen(word);

    if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, word, n) != 0)
        return false;
    ps->p += n;
    return true;
}

static int parse_value(struct parser *ps, struct cli_jv **out)
{
    struct cli_jv *v;
    char b[24];
    int rc = 0;

    skip_ws(ps);
    if (ps->p >= ps->end)
        return perr(ps, "expected a value, found the end of the file");
    v = jv_new(ps, CLI_JV_NULL);
    if (!v)
        return -ENOMEM;
    switch (*ps->p) {
    case '{':
    case '[':
        if (++ps->depth > CLI_JSONPARSE_MAX_DEPTH) {
            rc = perr(ps, "nested deeper than %d levels", CLI_JSONPARSE_MAX_DEPTH);
            break;
        }
        v->type = *ps->p == '{' ? CLI_JV_OBJ : CLI_JV_ARR;
        rc = v->type == CLI_JV_OBJ ? parse_object(ps, v) : parse_array(ps, v);
        ps->depth--;
        break;
    case '"':
        v->type = CLI_JV_STR;
        rc = parse_string_raw(ps, &v->s, &v->len, &v->legacy, &v->legacy_len);
        break;
    case 't':
    case 'f':
    case 'n':
        if (literal(ps, "true")) {
            v->type = CLI_JV_BOOL;
            v->b = true;
        } else if (literal(ps, "false")) {
            v->type = CLI_JV_BOOL;
        } else if (!literal(ps, "null")) {
            rc = perr(ps, "unexpected word (expected true, false or null)");
        }
        break;
    default:
        if (*ps->p == '-' || (*ps->p >= '0' && *ps->p <= '9')) {
            v->type = CLI_JV_NUM;
            rc = parse_number(ps, v);
        } else {
            rc = perr(ps, "expected a value, found %s", shown(ps, b, sizeof(b)));
        }
        break;
    }
    if (rc < 0) {
        cli_jv_free(v);
        return rc;
    }
    *out = v;
    return 0;
}

int cli_jsonparse(const char *text, size_t len, struct cli_jv **out, struct cli_jerr *err)
{
    struct parser ps;
    struct cli_jv *v = NULL;
    char b[24];
    int rc;

    memset(err, 0, sizeof(*err));
    ps.start = ps.p = ps.line_start = (const unsigned char *)text;
    ps.end = ps.p + len;
    ps.line = 1;
    ps.err = err;
    ps.depth = 0;
    skip_ws(&ps);
    if (ps.p >= ps.end)
        return perr(&ps, "the document is empty");
    rc = parse_value(&ps, &v);
    if (rc < 0)
        return rc;
    skip_ws(&ps);
    if (ps.p < ps.end) {
        rc = perr(&ps, "unexpected %s after the end of the document", shown(&ps, b, sizeof(b)));
        cli_jv_free(v);
        return rc;
    }
    *out = v;
    return 0;
}

const struct cli_jv *cli_jv_get(const struct cli_jv *obj, const char *key)
{
    if (!obj || obj->type != CLI_JV_OBJ)
        return NULL;
    for (size_t i = 0; i < obj->n; i++)
        if (strcmp(obj->keys[i], key) == 0)
            return obj->items[i];
    return NULL;
}

int cli_jv_uint(const struct cli_jv *v, uint64_t max, uint64_t *out)
{
    uint64_t x = 0;

    if (!v || v->type != CLI_JV_NUM || v->len == 0)
        return -EINVAL;
    for (size_t i = 0; i < v->len; i++) {
        unsigned d;

        if (v->s[i] < '0' || v->s[i] > '9')
            return -EINVAL;
        d = (unsigned)(v->s[i] - '0');
        if (x > (UINT64_MAX - d) / 10)
            return -ERANGE;
        x = x * 10 + d;
    }
    if (x > max)
        return -ERANGE;
    *out = x;
    return 0;
}
