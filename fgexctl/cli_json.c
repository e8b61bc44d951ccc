/* fgexctl's JSON conventions on top of jansson (cli_fmt.c and cli_config.c build and read the
 * documents with the library itself): any bytes made into a valid string, exact bytes as a
 * string or base64, the printed form, and where in a parsed text each value starts. */
#include "cli_json.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Length of the valid UTF-8 sequence at s (lead byte >= 0x80, avail bytes readable), or 0 if
 * it is not one. Overlong forms, surrogates and code points above U+10FFFF are refused, as
 * jansson refuses them. */
static size_t utf8_len(const unsigned char *s, size_t avail)
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
    if (n > avail)
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

json_t *cli_json_str(const char *s)
{
    const unsigned char *p = (const unsigned char *)(s ? s : ""),
                        *end = p + strlen((const char *)p);
    unsigned char *u, *o;
    json_t *v;

    v = json_stringn((const char *)p, (size_t)(end - p));
    if (v)
        return v;
    /* Not valid UTF-8 (or out of memory): each stray byte becomes the character it numbers. */
    u = malloc(2 * (size_t)(end - p) + 1);
    if (!u)
        return NULL;
    for (o = u; p < end;) {
        size_t n = *p < 0x80 ? 1 : utf8_len(p, (size_t)(end - p));

        if (n == 0) {
            *o++ = (unsigned char)(0xc0 | *p >> 6);
            *o++ = (unsigned char)(0x80 | (*p & 0x3f));
            p++;
            continue;
        }
        memcpy(o, p, n);
        o += n;
        p += n;
    }
    v = json_stringn((const char *)u, (size_t)(o - u));
    free(u);
    return v;
}

json_t *cli_json_str_or_null(const char *s)
{
    return s ? cli_json_str(s) : json_null();
}

static const char b64_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t cli_b64_encode(const void *in, size_t len, char *out)
{
    const unsigned char *p = in;
    size_t o = 0;

    for (size_t i = 0; i < len; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16;

        if (i + 1 < len)
            v |= (uint32_t)p[i + 1] << 8;
        if (i + 2 < len)
            v |= p[i + 2];
        out[o++] = b64_alphabet[v >> 18 & 63];
        out[o++] = b64_alphabet[v >> 12 & 63];
        out[o++] = i + 1 < len ? b64_alphabet[v >> 6 & 63] : '=';
        out[o++] = i + 2 < len ? b64_alphabet[v & 63] : '=';
    }
    out[o] = '\0';
    return o;
}

static int b64_value(char c)
{
    const char *q = c ? strchr(b64_alphabet, c) : NULL;

    return q ? (int)(q - b64_alphabet) : -1;
}

int cli_b64_decode(const char *in, size_t len, unsigned char *out, size_t *outlen)
{
    size_t o = 0;

    if (len % 4 != 0)
        return -EINVAL;
    for (size_t i = 0; i < len; i += 4) {
        bool last = i + 4 == len;
        int pad = last && in[i + 3] == '=' ? (in[i + 2] == '=' ? 2 : 1) : 0;
        uint32_t v = 0;

        for (int k = 0; k < 4; k++) {
            int d = k >= 4 - pad ? 0 : b64_value(in[i + k]);

            if (d < 0)
                return -EINVAL;
            v = v << 6 | (uint32_t)d;
        }
        /* The bits the padding leaves unused must be zero: one text per byte string. */
        if ((pad == 1 && (v & 0xff) != 0) || (pad == 2 && (v & 0xffff) != 0))
            return -EINVAL;
        out[o++] = (unsigned char)(v >> 16);
        if (pad < 2)
            out[o++] = (unsigned char)(v >> 8);
        if (pad < 1)
            out[o++] = (unsigned char)v;
    }
    *outlen = o;
    return 0;
}

int cli_json_set_bytes(json_t *obj, const char *key, const void *s, size_t len)
{
    json_t *v = json_stringn(s ? s : "", s ? len : 0);
    char k[64];
    char *b;

    if (v)
        return json_object_set_new(obj, key, v) < 0 ? -ENOMEM : 0;
    /* jansson takes only valid UTF-8 as a string: these bytes go as base64. */
    (void)snprintf(k, sizeof(k), "%s_b64", key);
    b = malloc(CLI_B64_LEN(len) + 1);
    if (!b)
        return -ENOMEM;
    (void)cli_b64_encode(s, len, b);
    v = json_string(b);
    free(b);
    return json_object_set_new(obj, k, v) < 0 ? -ENOMEM : 0;
}

int cli_json_print(FILE *f, json_t *v, bool pretty)
{
    size_t flags = JSON_ENCODE_ANY | JSON_PRESERVE_ORDER | (pretty ? JSON_INDENT(2) : JSON_COMPACT);
    char *text, *out, *o;
    int rc = 0;

    if (!v)
        return -ENOMEM;
    text = json_dumps(v, flags);
    json_decref(v);
    if (!text)
        return -ENOMEM;
    /* jansson writes \u001B and DEL as itself; fgexctl's documents always had \u001b and
     * \u007f (a backslash and DEL occur only inside strings, so no state is needed). */
    out = malloc(6 * strlen(text) + 2);
    if (!out) {
        free(text);
        return -ENOMEM;
    }
    o = out;
    for (const char *p = text; *p; p++) {
        if (*p == 0x7f) {
            memcpy(o, "\\u007f", 6);
            o += 6;
        } else if (*p == '\\' && p[1] == 'u') {
            *o++ = *p++;
            *o++ = *p;
            for (int i = 0; i < 4 && p[1]; i++) {
                p++;
                *o++ = *p >= 'A' && *p <= 'F' ? (char)(*p - 'A' + 'a') : *p;
            }
        } else if (*p == '\\' && p[1]) {
            *o++ = *p++;
            *o++ = *p;
        } else {
            *o++ = *p;
        }
    }
    *o++ = '\n';
    if (fwrite(out, 1, (size_t)(o - out), f) != (size_t)(o - out))
        rc = -EIO;
    free(out);
    free(text);
    return rc;
}

/* Line and column (1-based, bytes) of offset off in text. */
static void line_col(const char *text, size_t off, unsigned *line, unsigned *col)
{
    size_t ls = 0;
    unsigned l = 1;

    for (size_t i = 0; i < off; i++) {
        if (text[i] == '\n') {
            l++;
            ls = i + 1;
        }
    }
    *line = l;
    *col = (unsigned)(off - ls) + 1;
}

int cli_json_load(const char *text, size_t len, json_t **out, char *err, size_t errlen)
{
    json_error_t e;
    unsigned line, col;
    size_t off;

    *out = json_loadb(text, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY | JSON_ALLOW_NUL, &e);
    if (*out)
        return 0;
    if (json_error_code(&e) == json_error_out_of_memory)
        return -ENOMEM;
    /* jansson's position counts the bytes it read, usually the offending one last; not so
     * when the input ended or a byte was not UTF-8 (never read) or a control character in a
     * string (read, then given back before the complaint). Its column counts characters;
     * fgexctl's count bytes, as its own checks of the values do. */
    off = (size_t)e.position;
    if (off > 0 && json_error_code(&e) != json_error_premature_end_of_input &&
        json_error_code(&e) != json_error_invalid_utf8 &&
        strncmp(e.text, "control character", 17) != 0 &&
        strncmp(e.text, "unexpected newline", 18) != 0)
        off--;
    if (off > len)
        off = len;
    line_col(text, off, &line, &col);
    (void)snprintf(err, errlen, "line %u, column %u: %s", line, col, e.text);
    return -EINVAL;
}

struct cli_json_pos_ent {
    const json_t *v, *in; /* the value and the container it is in (NULL: the root) */
    const char *key;      /* its key in an object, else NULL and idx its index in an array */
    size_t idx, off;
};

struct pos_walk {
    const char *start, *p, *end;
    struct cli_json_pos *ix;
    size_t cap;
};

/* Whitespace and the separators between values: in a text jansson accepted, they can only be
 * where this walk expects them. */
static void walk_sep(struct pos_walk *w)
{
    while (w->p < w->end && *w->p && strchr(" \t\n\r,:", *w->p))
        w->p++;
}

static void walk_string(struct pos_walk *w)
{
    w->p++;
    while (w->p < w->end && *w->p != '"')
        w->p += *w->p == '\\' ? 2 : 1;
    w->p++;
}

/* The text is one jansson accepted, so it is well formed; jansson keeps the members of an
 * object in the order of the text, so the tree and the text are walked side by side. */
static int walk_value(struct pos_walk *w, const json_t *v, const json_t *in, const char *key,
                      size_t idx)
{
    struct cli_json_pos *ix = w->ix;
    struct cli_json_pos_ent *e;
    int rc;

    walk_sep(w);
    if (ix->n == w->cap) {
        size_t cap = w->cap ? 2 * w->cap : 64;
        struct cli_json_pos_ent *n = realloc(ix->ents, cap * sizeof(*n));

        if (!n)
            return -ENOMEM;
        ix->ents = n;
        w->cap = cap;
    }
    e = &ix->ents[ix->n++];
    e->v = v;
    e->in = in;
    e->key = key;
    e->idx = idx;
    e->off = (size_t)(w->p - w->start);
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        const char *k;
        json_t *m;

        w->p++;
        json_object_foreach((json_t *)v, k, m)
        {
            walk_sep(w);
            walk_string(w); /* the key */
            rc = walk_value(w, m, v, k, 0);
            if (rc < 0)
                return rc;
        }
        walk_sep(w);
        w->p++;
        return 0;
    }
    case JSON_ARRAY: {
        size_t i;
        json_t *m;

        w->p++;
        json_array_foreach((json_t *)v, i, m)
        {
            rc = walk_value(w, m, v, NULL, i);
            if (rc < 0)
                return rc;
        }
        walk_sep(w);
        w->p++;
        return 0;
    }
    case JSON_STRING:
        walk_string(w);
        return 0;
    default:
        while (w->p < w->end && !strchr(",]} \t\r\n", *w->p))
            w->p++;
        return 0;
    }
}

static int ent_cmp(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t)((const struct cli_json_pos_ent *)a)->v;
    uintptr_t y = (uintptr_t)((const struct cli_json_pos_ent *)b)->v;

    return (x > y) - (x < y);
}

int cli_json_pos_init(struct cli_json_pos *ix, const char *text, size_t len, const json_t *root)
{
    struct pos_walk w = {.start = text, .p = text, .end = text + len, .ix = ix};
    int rc;

    ix->text = text;
    ix->len = len;
    ix->ents = NULL;
    ix->n = 0;
    rc = walk_value(&w, root, NULL, NULL, 0);
    if (rc < 0) {
        cli_json_pos_release(ix);
        return rc;
    }
    qsort(ix->ents, ix->n, sizeof(*ix->ents), ent_cmp);
    return 0;
}

void cli_json_pos_release(struct cli_json_pos *ix)
{
    free(ix->ents);
    ix->ents = NULL;
    ix->n = 0;
}

int cli_json_pos_of(const struct cli_json_pos *ix, const json_t *v, size_t *off, unsigned *line,
                    unsigned *col)
{
    struct cli_json_pos_ent key = {.v = v};
    const struct cli_json_pos_ent *e;

    e = ix->n ? bsearch(&key, ix->ents, ix->n, sizeof(*ix->ents), ent_cmp) : NULL;
    if (!e)
        return -ENOENT;
    if (off)
        *off = e->off;
    if (line && col)
        line_col(ix->text, e->off, line, col);
    return 0;
}

int cli_json_pos_in(const struct cli_json_pos *ix, const json_t *in, const char *key, size_t idx,
                    unsigned *line, unsigned *col)
{
    /* Only a message needs this, once: a scan is enough. */
    for (size_t i = 0; i < ix->n; i++) {
        const struct cli_json_pos_ent *e = &ix->ents[i];

        if (e->in == in && (key ? e->key && strcmp(e->key, key) == 0 : !e->key && e->idx == idx)) {
            line_col(ix->text, e->off, line, col);
            return 0;
        }
    }
    return -ENOENT;
}

const char *cli_json_type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_NULL:
        return "null";
    case JSON_TRUE:
    case JSON_FALSE:
        return "boolean";
    case JSON_INTEGER:
    case JSON_REAL:
        return "number";
    case JSON_STRING:
        return "string";
    case JSON_ARRAY:
        return "array";
    default:
        return "object";
    }
}
