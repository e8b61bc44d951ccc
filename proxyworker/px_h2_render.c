/* Rendering stage of the HTTP service kind: an HTTP/2 header block (decoded by libnghttp2) ->
 * the HTTP/1.1 head it would have been -> scanned by the match stage per stream, so a filter
 * written for HTTP/1.1 applies to h2 and h2c unchanged. Pure: no I/O, no allocation. */
#include "px_h2_render.h"

#include <string.h>

static const char *reason(unsigned code)
{
    switch (code) {
    case 100: return "Continue";
    case 101: return "Switching Protocols";
    case 103: return "Early Hints";
    case 200: return "OK";
    case 201: return "Created";
    case 202: return "Accepted";
    case 204: return "No Content";
    case 206: return "Partial Content";
    case 301: return "Moved Permanently";
    case 302: return "Found";
    case 303: return "See Other";
    case 304: return "Not Modified";
    case 307: return "Temporary Redirect";
    case 308: return "Permanent Redirect";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 409: return "Conflict";
    case 413: return "Content Too Large";
    case 429: return "Too Many Requests";
    case 500: return "Internal Server Error";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    default: return "";
    }
}

/* Appends to out while it has room; counts the length either way. */
struct wr {
    uint8_t *out;
    size_t cap, len;
};

static void put(struct wr *w, const void *p, size_t n)
{
    if (w->len + n <= w->cap && n > 0)
        memcpy(w->out + w->len, p, n);
    w->len += n;
}

static void puts_(struct wr *w, const char *s)
{
    put(w, s, strlen(s));
}

/* A field name as HTTP/1.1 clients write it: h2 names are lowercase; the first letter and
 * each one after a '-' upper-cased (user-agent -> User-Agent). */
static void put_name(struct wr *w, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint8_t ch = p[i];

        if ((i == 0 || p[i - 1] == '-') && ch >= 'a' && ch <= 'z')
            ch = (uint8_t)(ch - 'a' + 'A');
        put(w, &ch, 1);
    }
}

static bool name_is(const struct px_h2_hdr *h, const char *s)
{
    size_t n = strlen(s);

    return h->namelen == n && memcmp(h->name, s, n) == 0;
}

static const struct px_h2_hdr *find(const struct px_h2_hdr *h, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (name_is(&h[i], name))
            return &h[i];
    return NULL;
}

size_t px_h2_render_head(enum px_h2_kind kind, const struct px_h2_hdr *h, size_t n, uint8_t *out,
                         size_t cap)
{
    struct wr w = {out, cap, 0};
    bool cookie_done = false;

    if (kind == PX_H2_REQUEST) {
        const struct px_h2_hdr *m = find(h, n, ":method"), *p = find(h, n, ":path"),
                               *a = find(h, n, ":authority");

        if (m != NULL)
            put(&w, m->value, m->valuelen);
        put(&w, " ", 1);
        /* CONNECT has no :path: its target is the authority, as in HTTP/1.1 */
        if (p != NULL)
            put(&w, p->value, p->valuelen);
        else if (a != NULL)
            put(&w, a->value, a->valuelen);
        puts_(&w, " HTTP/1.1\r\n");
        if (a != NULL) {
            puts_(&w, "Host: ");
            put(&w, a->value, a->valuelen);
            puts_(&w, "\r\n");
        }
    } else if (kind == PX_H2_RESPONSE) {
        const struct px_h2_hdr *s = find(h, n, ":status");
        unsigned code = 0;

        puts_(&w, "HTTP/1.1 ");
        if (s != NULL) {
            put(&w, s->value, s->valuelen);
            for (size_t i = 0; i < s->valuelen && i < 3; i++)
                code = code * 10 + (unsigned)(s->value[i] - '0');
        }
        put(&w, " ", 1);
        puts_(&w, s != NULL && s->valuelen == 3 ? reason(code) : "");
        puts_(&w, "\r\n");
    }
    for (size_t i = 0; i < n; i++) {
        if (h[i].namelen > 0 && h[i].name[0] == ':')
            continue; /* pseudo-headers: rendered above (:scheme, :protocol have no place) */
        if (name_is(&h[i], "cookie")) {
            /* h2 may split the cookie field (RFC 9113 8.2.3); HTTP/1.1 has one, "; "-joined,
             * where the first one was. */
            if (cookie_done)
                continue;
            cookie_done = true;
            puts_(&w, "Cookie: ");
            for (size_t k = i, first = 1; k < n; k++) {
                if (!name_is(&h[k], "cookie"))
                    continue;
                if (!first)
                    puts_(&w, "; ");
                put(&w, h[k].value, h[k].valuelen);
                first = 0;
            }
            puts_(&w, "\r\n");
            continue;
        }
        put_name(&w, h[i].name, h[i].namelen);
        puts_(&w, ": ");
        put(&w, h[i].value, h[i].valuelen);
        puts_(&w, "\r\n");
    }
    puts_(&w, "\r\n");
    return w.len;
}
