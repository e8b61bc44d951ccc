/* fgexctl output stage: the JSON writer behind `--json` (cli_fmt.c drives it). Scripts parse
 * what it prints, so every string is escaped into valid JSON whatever bytes it holds. */
#include "cli_json.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

void cli_json_init(struct cli_json *j, FILE *f)
{
    j->f = f;
    j->depth = 0;
    j->after_key = false;
    j->pretty = false;
    j->first[0] = true;
}

static void json_indent(struct cli_json *j, int depth)
{
    (void)fputc('\n', j->f);
    for (int i = 0; i < depth; i++)
        (void)fputs("  ", j->f);
}

/* Separate this value from the previous one at the same level. */
static void json_sep(struct cli_json *j)
{
    if (j->after_key) {
        j->after_key = false;
        return;
    }
    if (!j->first[j->depth])
        (void)fputc(',', j->f);
    j->first[j->depth] = false;
    if (j->pretty && j->depth > 0)
        json_indent(j, j->depth);
}

static void json_open(struct cli_json *j, char c)
{
    json_sep(j);
    (void)fputc(c, j->f);
    /* Deeper levels than cli_fmt.c ever writes still produce valid text, with shared state. */
    if (j->depth < CLI_JSON_MAX_DEPTH - 1)
        j->depth++;
    j->first[j->depth] = true;
}

static void json_close(struct cli_json *j, char c)
{
    /* An empty container stays on one line: [] and {}. */
    if (j->pretty && !j->first[j->depth])
        json_indent(j, j->depth - 1);
    (void)fputc(c, j->f);
    if (j->depth > 0)
        j->depth--;
}

void cli_json_obj_begin(struct cli_json *j)
{
    json_open(j, '{');
}

void cli_json_obj_end(struct cli_json *j)
{
    json_close(j, '}');
}

void cli_json_arr_begin(struct cli_json *j)
{
    json_open(j, '[');
}

void cli_json_arr_end(struct cli_json *j)
{
    json_close(j, ']');
}

void cli_json_key(struct cli_json *j, const char *key)
{
    json_sep(j);
    cli_json_write_string(j->f, key);
    (void)fputs(j->pretty ? ": " : ":", j->f);
    j->after_key = true;
}

/* Length of the valid UTF-8 sequence at s (lead byte >= 0x80, avail bytes readable), or 0 if
 * it is not one. Overlong forms, surrogates and code points above U+10FFFF are refused, as JSON
 * parsers refuse them. */
static int utf8_len(const unsigned char *s, size_t avail)
{
    unsigned char c = s[0];
    int n;
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
    if ((size_t)n > avail)
        return 0;
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10ffff ||
        (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return n;
}

void cli_json_write_string(FILE *f, const char *s)
{
    cli_json_write_bytes(f, s, s ? strlen(s) : 0);
}

void cli_json_write_bytes(FILE *f, const void *s, size_t len)
{
    const unsigned char *p = s, *end = p + len;

    (void)fputc('"', f);
    while (p < end) {
        unsigned char c = *p;
        int n;

        switch (c) {
        case '"':
            (void)fputs("\\\"", f);
            break;
        case '\\':
            (void)fputs("\\\\", f);
            break;
        case '\n':
            (void)fputs("\\n", f);
            break;
        case '\r':
            (void)fputs("\\r", f);
            break;
        case '\t':
            (void)fputs("\\t", f);
            break;
        case '\b':
            (void)fputs("\\b", f);
            break;
        case '\f':
            (void)fputs("\\f", f);
            break;
        default:
            if (c >= 0x20 && c < 0x7f) {
                (void)fputc(c, f);
            } else if (c >= 0x80 && (n = utf8_len(p, (size_t)(end - p))) > 0) {
                (void)fwrite(p, 1, (size_t)n, f);
                p += n;
                continue;
            } else {
                /* Control bytes, DEL, and bytes outside valid UTF-8. */
                (void)fprintf(f, "\\u%04x", c);
            }
        }
        p++;
    }
    (void)fputc('"', f);
}

void cli_json_str(struct cli_json *j, const char *s)
{
    json_sep(j);
    cli_json_write_string(j->f, s);
}

void cli_json_bytes(struct cli_json *j, const void *s, size_t len)
{
    json_sep(j);
    cli_json_write_bytes(j->f, s, len);
}

bool cli_json_utf8_valid(const void *s, size_t len)
{
    const unsigned char *p = s, *end = p + len;

    while (p < end) {
        int n;

        if (*p < 0x80) {
            p++;
            continue;
        }
        n = utf8_len(p, (size_t)(end - p));
        if (n == 0)
            return false;
        p += n;
    }
    return true;
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

void cli_json_key_bytes(struct cli_json *j, const char *key, const void *s, size_t len)
{
    char k[64];
    char *b;

    if (cli_json_utf8_valid(s, len)) {
        cli_json_key(j, key);
        cli_json_bytes(j, s, len);
        return;
    }
    (void)snprintf(k, sizeof(k), "%s_b64", key);
    cli_json_key(j, k);
    b = malloc(CLI_B64_LEN(len) + 1);
    if (!b) {
        /* Never a lossy string in place of the bytes: null says they could not be written. */
        cli_json_null(j);
        return;
    }
    (void)cli_b64_encode(s, len, b);
    cli_json_str(j, b);
    free(b);
}

void cli_json_u64(struct cli_json *j, uint64_t v)
{
    json_sep(j);
    (void)fprintf(j->f, "%" PRIu64, v);
}

void cli_json_i64(struct cli_json *j, int64_t v)
{
    json_sep(j);
    (void)fprintf(j->f, "%" PRId64, v);
}

void cli_json_bool(struct cli_json *j, bool v)
{
    json_sep(j);
    (void)fputs(v ? "true" : "false", j->f);
}

void cli_json_null(struct cli_json *j)
{
    json_sep(j);
    (void)fputs("null", j->f);
}

void cli_json_end(struct cli_json *j)
{
    (void)fputc('\n', j->f);
}
