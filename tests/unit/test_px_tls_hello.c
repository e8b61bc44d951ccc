/* Unit tests for proxyworker/px_tls_hello.c: the server_name and ALPN extensions of a
 * ClientHello parsed from their raw bytes, well-formed and not. */
#include <criterion/criterion.h>

#include <errno.h>
#include <string.h>

#include "proxyworker/px_tls_hello.h"

#define B(s) ((const uint8_t *)(s)), (sizeof(s) - 1)

Test(px_tls_hello, sni_host_name)
{
    char out[64];

    px_tls_hello_sni(B("\x00\x0e\x00\x00\x0b" "example.com"), out, sizeof(out));
    cr_assert_str_eq(out, "example.com");
}

Test(px_tls_hello, sni_malformed_gives_nothing)
{
    char out[8];

    memset(out, 'x', sizeof(out));
    px_tls_hello_sni(B("\x00\x0f\x00\x00\x0b" "example.com"), out, sizeof(out)); /* list len */
    cr_assert_str_eq(out, "");
    px_tls_hello_sni(B("\x00\x0e\x01\x00\x0b" "example.com"), out, sizeof(out)); /* not a host */
    cr_assert_str_eq(out, "");
    px_tls_hello_sni(B("\x00\x06\x00\x00\x04" "a\0bc"), out, sizeof(out)); /* a NUL inside */
    cr_assert_str_eq(out, "");
    px_tls_hello_sni(B("\x00\x0e\x00\x00\x0b" "example.com"), out, sizeof(out)); /* too long */
    cr_assert_str_eq(out, "");
    px_tls_hello_sni(B("\x00\x03\x00\x00"), out, sizeof(out)); /* cut short */
    cr_assert_str_eq(out, "");
}

Test(px_tls_hello, alpn_list)
{
    static const uint8_t ext[] = "\x00\x0c\x02h2\x08http/1.1";
    const uint8_t *list;
    size_t len;

    cr_assert_eq(px_tls_hello_alpn(ext, sizeof(ext) - 1, &list, &len), 0);
    cr_assert_eq(list, ext + 2);
    cr_assert_eq(len, 12);
}

Test(px_tls_hello, alpn_malformed_refused)
{
    const uint8_t *list;
    size_t len;

    cr_assert_eq(px_tls_hello_alpn(B("\x00\x0d\x02h2\x08http/1.1"), &list, &len), -EINVAL);
    cr_assert_eq(px_tls_hello_alpn(B("\x00\x04\x02h2\x00"), &list, &len), -EINVAL); /* empty */
    cr_assert_eq(px_tls_hello_alpn(B("\x00\x03\x05h2"), &list, &len), -EINVAL); /* past end */
    cr_assert_eq(px_tls_hello_alpn(B("\x00\x00"), &list, &len), -EINVAL);
}
