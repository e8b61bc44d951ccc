/* gRPC stage of the HTTP service kind: a gRPC body deframed into its messages, each inflated
 * with zlib (Debian's) where the sender compressed it, so that the match stage scans the
 * message and never its 5-byte prefix or its compressed bytes (px_grpc.h). */
#include "px_grpc.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <zlib.h>

bool px_grpc_content_type(const uint8_t *v, size_t n)
{
    static const char ct[] = "application/grpc";
    size_t l = sizeof(ct) - 1;

    if (n < l || strncasecmp((const char *)v, ct, l) != 0)
        return false;
    return n == l || v[l] == '+' || v[l] == ';' || v[l] == ' ';
}

static bool value_is(const uint8_t *v, size_t n, const char *s)
{
    return n == strlen(s) && strncasecmp((const char *)v, s, n) == 0;
}

enum px_grpc_enc px_grpc_encoding(const uint8_t *v, size_t n)
{
    if (n == 0 || value_is(v, n, "identity"))
        return PX_GRPC_IDENTITY;
    if (value_is(v, n, "gzip"))
        return PX_GRPC_GZIP;
    if (value_is(v, n, "deflate"))
        return PX_GRPC_DEFLATE;
    return PX_GRPC_OTHER;
}

void px_grpc_init(struct px_grpc *g, enum px_grpc_enc enc)
{
    memset(g, 0, sizeof(*g));
    g->enc = enc;
}

void px_grpc_release(struct px_grpc *g)
{
    free(g->buf);
    free(g->out);
    px_grpc_init(g, PX_GRPC_IDENTITY);
}

/* The compressed message in, inflated into g->out; its length in *out_len. */
static int inflate_msg(struct px_grpc *g, const uint8_t *in, size_t n, size_t *out_len)
{
    z_stream z;
    int zr, rc = 0;

    memset(&z, 0, sizeof(z));
    /* gzip: its header; deflate: the zlib format gRPC means by it (a gzip header taken too) */
    if (inflateInit2(&z, g->enc == PX_GRPC_GZIP ? 15 + 16 : 15 + 32) != Z_OK)
        return -ENOMEM;
    z.next_in = (Bytef *)(uintptr_t)in;
    z.avail_in = (uInt)n;
    *out_len = 0;
    for (;;) {
        if (*out_len == g->out_cap) {
            size_t cap = g->out_cap ? 2 * g->out_cap : 4096;
            uint8_t *p;

            if (cap > PX_GRPC_MSG_MAX + 1)
                cap = PX_GRPC_MSG_MAX + 1;
            if (cap <= g->out_cap) {
                rc = -EMSGSIZE;
                break;
            }
            if ((p = realloc(g->out, cap)) == NULL) {
                rc = -ENOMEM;
                break;
            }
            g->out = p;
            g->out_cap = cap;
        }
        z.next_out = g->out + *out_len;
        z.avail_out = (uInt)(g->out_cap - *out_len);
        zr = inflate(&z, Z_NO_FLUSH);
        *out_len = g->out_cap - z.avail_out;
        if (zr == Z_STREAM_END) {
            /* bytes after the compressed data: the sender's message is not what it says */
            if (z.avail_in != 0)
                rc = -EBADMSG;
            else if (*out_len > PX_GRPC_MSG_MAX)
                rc = -EMSGSIZE;
            break;
        }
        if (zr == Z_BUF_ERROR && z.avail_in == 0) {
            rc = -EBADMSG; /* cut short */
            break;
        }
        if (zr != Z_OK && zr != Z_BUF_ERROR) {
            rc = zr == Z_MEM_ERROR ? -ENOMEM : -EBADMSG;
            break;
        }
        if (*out_len > PX_GRPC_MSG_MAX) {
            rc = -EMSGSIZE;
            break;
        }
    }
    (void)inflateEnd(&z);
    return rc;
}

int px_grpc_feed(struct px_grpc *g, const uint8_t *data, size_t len, px_grpc_msg_fn fn, void *arg)
{
    size_t off = g->ready;

    if (len > 0) {
        if (g->len + len > g->cap) {
            size_t cap = g->cap ? g->cap : 1024;
            uint8_t *p;

            while (cap < g->len + len)
                cap *= 2;
            if ((p = realloc(g->buf, cap)) == NULL)
                return -ENOMEM;
            g->buf = p;
            g->cap = cap;
        }
        memcpy(g->buf + g->len, data, len);
        g->len += len;
    }
    while (g->len - off >= PX_GRPC_PREFIX) {
        const uint8_t *p = g->buf + off;
        uint32_t n = (uint32_t)p[1] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 8 | p[4];
        const uint8_t *msg = p + PX_GRPC_PREFIX;
        size_t msg_len = n;
        int rc;

        if (p[0] > 1)
            return -EPROTO;
        if (p[0] == 1 && g->enc != PX_GRPC_GZIP && g->enc != PX_GRPC_DEFLATE)
            return -EPROTO;
        if (n > PX_GRPC_MSG_MAX)
            return -EMSGSIZE;
        if (g->len - off - PX_GRPC_PREFIX < n)
            break;
        if (p[0] == 1) {
            if ((rc = inflate_msg(g, msg, n, &msg_len)) != 0)
                return rc;
            msg = g->out;
        }
        rc = fn(arg, msg, msg_len);
        if (g->out_cap > (64u << 10)) {
            /* a large message inflated: its buffer is not kept for the stream's life */
            free(g->out);
            g->out = NULL;
            g->out_cap = 0;
        }
        if (rc != 0)
            return rc;
        off += PX_GRPC_PREFIX + n;
        g->ready = off;
        g->messages++;
    }
    return 0;
}

void px_grpc_consume(struct px_grpc *g)
{
    if (g->ready == 0)
        return;
    memmove(g->buf, g->buf + g->ready, g->len - g->ready);
    g->len -= g->ready;
    g->ready = 0;
}

size_t px_grpc_pending(const struct px_grpc *g)
{
    return g->len - g->ready;
}
