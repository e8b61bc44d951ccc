/* Unit tests for proxyworker/px_grpc.c: gRPC bodies deframed into the messages the filters
 * scan, byte for byte, compressed ones inflated, whatever the reads' boundaries. */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "proxyworker/px_grpc.h"

/* What the deframer handed over: the messages, one after the other, and their count. */
struct seen {
    uint8_t buf[1 << 16];
    size_t len;
    size_t lens[16];
    int n;
    int refuse_at; /* the message (1-based) the callback refuses; 0: none */
};

static int collect(void *arg, const uint8_t *msg, size_t len)
{
    struct seen *s = arg;

    cr_assert(s->len + len <= sizeof(s->buf));
    memcpy(s->buf + s->len, msg, len);
    s->len += len;
    s->lens[s->n++] = len;
    return s->n == s->refuse_at ? -EACCES : 0;
}

/* The same, lengths only (messages too large for collect()). */
static int count(void *arg, const uint8_t *msg, size_t len)
{
    struct seen *s = arg;

    (void)msg;
    s->lens[s->n++] = len;
    return 0;
}

/* One message framed: flag, big-endian length, the bytes. */
static size_t frame(uint8_t *out, uint8_t flag, const void *msg, size_t len)
{
    out[0] = flag;
    out[1] = (uint8_t)(len >> 24);
    out[2] = (uint8_t)(len >> 16);
    out[3] = (uint8_t)(len >> 8);
    out[4] = (uint8_t)len;
    memcpy(out + 5, msg, len);
    return len + 5;
}

/* msg compressed as gzip (gzip true) or zlib's format (what gRPC's deflate is). */
static size_t squeeze(uint8_t *out, size_t cap, const void *msg, size_t len, bool gzip)
{
    z_stream z;

    memset(&z, 0, sizeof(z));
    cr_assert_eq(deflateInit2(&z, 6, Z_DEFLATED, gzip ? 15 + 16 : 15, 8, Z_DEFAULT_STRATEGY), Z_OK);
    z.next_in = (Bytef *)(uintptr_t)msg;
    z.avail_in = (uInt)len;
    z.next_out = out;
    z.avail_out = (uInt)cap;
    cr_assert_eq(deflate(&z, Z_FINISH), Z_STREAM_END);
    len = cap - z.avail_out;
    deflateEnd(&z);
    return len;
}

Test(px_grpc, content_type_and_encoding)
{
#define CT(s) px_grpc_content_type((const uint8_t *)(s), strlen(s))
#define ENC(s) px_grpc_encoding((const uint8_t *)(s), strlen(s))
    cr_assert(CT("application/grpc"));
    cr_assert(CT("application/grpc+proto"));
    cr_assert(CT("Application/GRPC; charset=utf-8"));
    cr_assert(!CT("application/grpc-web"), "grpc-web frames its trailers in the body");
    cr_assert(!CT("application/json"));
    cr_assert(!CT("application/grp"));
    cr_assert_eq(ENC(""), PX_GRPC_IDENTITY);
    cr_assert_eq(ENC("identity"), PX_GRPC_IDENTITY);
    cr_assert_eq(ENC("gzip"), PX_GRPC_GZIP);
    cr_assert_eq(ENC("GZIP"), PX_GRPC_GZIP);
    cr_assert_eq(ENC("deflate"), PX_GRPC_DEFLATE);
    cr_assert_eq(ENC("snappy"), PX_GRPC_OTHER);
}

Test(px_grpc, messages_without_their_prefix_at_any_split)
{
    uint8_t body[256];
    size_t n = 0;

    n += frame(body + n, 0, "\x0a\x05hello", 7);
    n += frame(body + n, 0, "", 0);
    n += frame(body + n, 0, "evil1337", 8);
    /* every split of the body in two reads, and one byte at a time */
    for (size_t cut = 0; cut <= n + 1; cut++) {
        struct px_grpc g;
        struct seen s = {0};
        size_t fwd = 0;

        px_grpc_init(&g, PX_GRPC_IDENTITY);
        if (cut <= n) {
            cr_assert_eq(px_grpc_feed(&g, body, cut, collect, &s), 0);
            fwd += g.ready;
            cr_assert(g.ready == 0 || memcmp(g.buf, body, g.ready) == 0, "the raw bytes kept");
            px_grpc_consume(&g);
            cr_assert_eq(px_grpc_feed(&g, body + cut, n - cut, collect, &s), 0);
            fwd += g.ready;
            px_grpc_consume(&g);
        } else {
            for (size_t i = 0; i < n; i++) {
                cr_assert_eq(px_grpc_feed(&g, body + i, 1, collect, &s), 0);
                fwd += g.ready;
                px_grpc_consume(&g);
            }
        }
        cr_assert_eq(s.n, 3, "cut %zu: %d messages", cut, s.n);
        cr_assert_eq(s.lens[0], 7);
        cr_assert_eq(s.lens[1], 0);
        cr_assert_eq(s.lens[2], 8);
        cr_assert(memcmp(s.buf, "\x0a\x05helloevil1337", 15) == 0);
        cr_assert_eq(fwd, n, "every byte forwarded once, framing included");
        cr_assert_eq(px_grpc_pending(&g), 0);
        cr_assert_eq(g.messages, 3);
        px_grpc_release(&g);
    }
}

Test(px_grpc, a_message_not_complete_is_held_not_ready)
{
    uint8_t body[64];
    size_t n = frame(body, 0, "0123456789", 10);
    struct px_grpc g;
    struct seen s = {0};

    px_grpc_init(&g, PX_GRPC_IDENTITY);
    cr_assert_eq(px_grpc_feed(&g, body, n - 1, collect, &s), 0);
    cr_assert_eq(s.n, 0);
    cr_assert_eq(g.ready, 0, "nothing of it goes before it is judged");
    cr_assert_eq(px_grpc_pending(&g), n - 1, "cut short if the stream ended here");
    cr_assert_eq(px_grpc_feed(&g, body + n - 1, 1, collect, &s), 0);
    cr_assert_eq(s.n, 1);
    cr_assert_eq(g.ready, n);
    px_grpc_release(&g);
}

Test(px_grpc, gzip_and_deflate_are_inflated)
{
    static const char msg[] = "a message with evil1337 in it, evil1337 again, and again evil1337";
    enum px_grpc_enc encs[] = {PX_GRPC_GZIP, PX_GRPC_DEFLATE};

    for (size_t e = 0; e < 2; e++) {
        uint8_t z[256], body[512];
        size_t zl = squeeze(z, sizeof(z), msg, sizeof(msg) - 1, encs[e] == PX_GRPC_GZIP);
        size_t n = 0;
        struct px_grpc g;
        struct seen s = {0};

        cr_assert(memmem(z, zl, "evil1337", 8) == NULL, "the compressed bytes do not show it");
        n += frame(body + n, 1, z, zl);
        n += frame(body + n, 0, "plain", 5); /* a sender may leave one uncompressed */
        px_grpc_init(&g, encs[e]);
        cr_assert_eq(px_grpc_feed(&g, body, n, collect, &s), 0);
        cr_assert_eq(s.n, 2);
        cr_assert_eq(s.lens[0], sizeof(msg) - 1);
        cr_assert(memcmp(s.buf, msg, sizeof(msg) - 1) == 0);
        cr_assert(memcmp(s.buf + sizeof(msg) - 1, "plain", 5) == 0);
        cr_assert_eq(g.ready, n, "the compressed bytes are what is forwarded");
        cr_assert(memcmp(g.buf, body, n) == 0);
        px_grpc_release(&g);
    }
}

Test(px_grpc, the_callback_stops_the_feed)
{
    uint8_t body[64];
    size_t n = 0, first;
    struct px_grpc g;
    struct seen s = {.refuse_at = 2};

    first = n += frame(body + n, 0, "one", 3);
    n += frame(body + n, 0, "two", 3);
    n += frame(body + n, 0, "three", 5);
    px_grpc_init(&g, PX_GRPC_IDENTITY);
    cr_assert_eq(px_grpc_feed(&g, body, n, collect, &s), -EACCES);
    cr_assert_eq(s.n, 2, "nothing after the refused message is judged");
    cr_assert_eq(g.ready, first, "only the message before it is ready");
    px_grpc_release(&g);
}

Test(px_grpc, what_cannot_be_judged_is_refused)
{
    uint8_t body[256], z[128];
    struct px_grpc g;
    struct seen s = {0};
    size_t n, zl;

    /* compressed, and the stream named no encoding (or one zlib does not undo) */
    n = frame(body, 1, "xx", 2);
    px_grpc_init(&g, PX_GRPC_IDENTITY);
    cr_assert_eq(px_grpc_feed(&g, body, n, collect, &s), -EPROTO);
    px_grpc_release(&g);
    px_grpc_init(&g, PX_GRPC_OTHER);
    cr_assert_eq(px_grpc_feed(&g, body, n, collect, &s), -EPROTO);
    px_grpc_release(&g);
    /* a flag byte gRPC does not have */
    n = frame(body, 2, "xx", 2);
    px_grpc_init(&g, PX_GRPC_GZIP);
    cr_assert_eq(px_grpc_feed(&g, body, n, collect, &s), -EPROTO);
    px_grpc_release(&g);
    /* "compressed" bytes that are not gzip */
    n = frame(body, 1, "not gzip at all", 15);
    px_grpc_init(&g, PX_GRPC_GZIP);
    cr_assert_eq(px_grpc_feed(&g, body, n, collect, &s), -EBADMSG);
    px_grpc_release(&g);
    /* gzip cut short, and gzip with bytes after it */
    zl = squeeze(z, sizeof(z), "hello hello hello", 17, true);
    n = frame(body, 1, z, zl - 4);
    px_grpc_init(&g, PX_GRPC_GZIP);
    cr_assert_eq(px_grpc_feed(&g, body, n, collect, &s), -EBADMSG);
    px_grpc_release(&g);
    memcpy(z + zl, "evil", 4);
    n = frame(body, 1, z, zl + 4);
    px_grpc_init(&g, PX_GRPC_GZIP);
    cr_assert_eq(px_grpc_feed(&g, body, n, collect, &s), -EBADMSG);
    px_grpc_release(&g);
    /* a length past the limit: refused at the prefix, before its bytes come */
    memcpy(body, "\x00\x00\x40\x00\x01", 5);
    px_grpc_init(&g, PX_GRPC_IDENTITY);
    cr_assert_eq(px_grpc_feed(&g, body, 5, collect, &s), -EMSGSIZE);
    px_grpc_release(&g);
    cr_assert_eq(s.n, 0, "none of them reached the filters");
}

Test(px_grpc, a_decompression_bomb_stops_at_the_limit)
{
    size_t big = PX_GRPC_MSG_MAX + 1;
    uint8_t *zeros = calloc(1, big), *z = malloc(64 << 10), *body = malloc((64 << 10) + 5);
    size_t zl, n;
    struct px_grpc g;
    struct seen s = {0};

    cr_assert(zeros != NULL && z != NULL && body != NULL);
    zl = squeeze(z, 64 << 10, zeros, big, true);
    cr_assert_lt(zl, 64u << 10, "4 MiB of zeros is small compressed");
    n = frame(body, 1, z, zl);
    px_grpc_init(&g, PX_GRPC_GZIP);
    cr_assert_eq(px_grpc_feed(&g, body, n, collect, &s), -EMSGSIZE);
    cr_assert_eq(s.n, 0);
    px_grpc_release(&g);
    /* exactly the limit passes */
    zl = squeeze(z, 64 << 10, zeros, big - 1, true);
    n = frame(body, 1, z, zl);
    px_grpc_init(&g, PX_GRPC_GZIP);
    cr_assert_eq(px_grpc_feed(&g, body, n, count, &s), 0);
    cr_assert_eq(s.n, 1);
    cr_assert_eq(s.lens[0], big - 1);
    px_grpc_release(&g);
    free(zeros);
    free(z);
    free(body);
}
