/* The HTTP/1.1 rendering of an HTTP/2 header block (px_h2_render.c). */
#ifndef PX_H2_RENDER_H
#define PX_H2_RENDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One header field as libnghttp2 decoded it (borrowed bytes). */
struct px_h2_hdr {
    const uint8_t *name, *value;
    size_t namelen, valuelen;
};

enum px_h2_kind {
    PX_H2_REQUEST,  /* "METHOD PATH HTTP/1.1", Host from :authority, the fields, CRLF */
    PX_H2_RESPONSE, /* "HTTP/1.1 STATUS REASON", the fields, CRLF */
    PX_H2_TRAILERS, /* the fields, CRLF */
};

/* The HTTP/1.1 head of the n fields h: written to out when cap is enough (out may be NULL with
 * cap 0); returns its length either way. Field names are title-cased (user-agent ->
 * User-Agent), the cookie fields joined into one, :scheme and :protocol dropped. */
size_t px_h2_render_head(enum px_h2_kind kind, const struct px_h2_hdr *h, size_t n, uint8_t *out,
                         size_t cap);

#endif
