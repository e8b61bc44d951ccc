/* Unit tests for proxyworker/px_h2_render.c: HTTP/2 header blocks rendered as the HTTP/1.1
 * heads the filters scan, byte for byte. */
#include <criterion/criterion.h>

#include <string.h>

#include "proxyworker/px_h2_render.h"

#define H(n, v) {(const uint8_t *)(n), (const uint8_t *)(v), sizeof(n) - 1, sizeof(v) - 1}

static void expect(enum px_h2_kind kind, const struct px_h2_hdr *h, size_t n, const char *want)
{
    uint8_t buf[1024];
    size_t need = px_h2_render_head(kind, h, n, NULL, 0);
    size_t len = px_h2_render_head(kind, h, n, buf, sizeof(buf));

    cr_assert_eq(need, len, "the length without a buffer is the length written");
    cr_assert_eq(len, strlen(want), "length %zu, want %zu: %.*s", len, strlen(want), (int)len,
                 buf);
    cr_assert(memcmp(buf, want, len) == 0, "got %.*s", (int)len, buf);
}

Test(px_h2_render, request_line_host_and_fields)
{
    const struct px_h2_hdr h[] = {
        H(":method", "GET"), H(":scheme", "https"), H(":authority", "team1.ctf:8443"),
        H(":path", "/files/../flag?x=1"), H("user-agent", "curl/7.88.1"), H("accept", "*/*"),
        H("x-pwn", "1"),
    };

    expect(PX_H2_REQUEST, h, sizeof(h) / sizeof(h[0]),
           "GET /files/../flag?x=1 HTTP/1.1\r\n"
           "Host: team1.ctf:8443\r\n"
           "User-Agent: curl/7.88.1\r\n"
           "Accept: */*\r\n"
           "X-Pwn: 1\r\n"
           "\r\n");
}

Test(px_h2_render, cookies_joined_where_the_first_was)
{
    const struct px_h2_hdr h[] = {
        H(":method", "POST"), H(":path", "/login"), H(":authority", "a"), H("cookie", "a=1"),
        H("content-type", "text/plain"), H("cookie", "b=2"), H("cookie", "c=3"),
    };

    expect(PX_H2_REQUEST, h, sizeof(h) / sizeof(h[0]),
           "POST /login HTTP/1.1\r\nHost: a\r\nCookie: a=1; b=2; c=3\r\n"
           "Content-Type: text/plain\r\n\r\n");
}

Test(px_h2_render, connect_targets_the_authority)
{
    const struct px_h2_hdr h[] = {H(":method", "CONNECT"), H(":authority", "10.0.0.1:22")};

    expect(PX_H2_REQUEST, h, 2, "CONNECT 10.0.0.1:22 HTTP/1.1\r\nHost: 10.0.0.1:22\r\n\r\n");
}

Test(px_h2_render, no_authority_no_host_line)
{
    const struct px_h2_hdr h[] = {H(":method", "GET"), H(":path", "/"), H("host", "x")};

    expect(PX_H2_REQUEST, h, 3, "GET / HTTP/1.1\r\nHost: x\r\n\r\n");
}

Test(px_h2_render, response_status_line_with_reason)
{
    const struct px_h2_hdr h[] = {H(":status", "200"), H("content-type", "text/html"),
                                  H("content-length", "5")};

    expect(PX_H2_RESPONSE, h, 3,
           "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 5\r\n\r\n");
}

Test(px_h2_render, response_unknown_status_has_empty_reason)
{
    const struct px_h2_hdr h[] = {H(":status", "299")};

    expect(PX_H2_RESPONSE, h, 1, "HTTP/1.1 299 \r\n\r\n");
}

Test(px_h2_render, trailers_are_fields_only)
{
    const struct px_h2_hdr h[] = {H("grpc-status", "0"), H("grpc-message", "ok")};

    expect(PX_H2_TRAILERS, h, 2, "Grpc-Status: 0\r\nGrpc-Message: ok\r\n\r\n");
}

Test(px_h2_render, bytes_pass_unchanged)
{
    const struct px_h2_hdr h[] = {H(":method", "GET"), H(":path", "/\xff\x01"),
                                  H("x-bin", "\x80\x7fz")};

    expect(PX_H2_REQUEST, h, 3, "GET /\xff\x01 HTTP/1.1\r\nX-Bin: \x80\x7fz\r\n\r\n");
}

Test(px_h2_render, short_buffer_writes_nothing)
{
    const struct px_h2_hdr h[] = {H(":status", "404")};
    uint8_t buf[8];

    memset(buf, 'Z', sizeof(buf));
    cr_assert_eq(px_h2_render_head(PX_H2_RESPONSE, h, 1, buf, sizeof(buf)),
                 strlen("HTTP/1.1 404 Not Found\r\n\r\n"));
    cr_assert_eq(buf[0], 'Z');
}
