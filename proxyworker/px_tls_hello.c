/* proxyworker's ClientHello peek (px_tls_hello.h): parsing of the two extensions the TLS stage
 * (px_tls.c) acts on. The bytes are the client's, so every length is checked against the
 * extension's own before it is used. */
#include "px_tls_hello.h"

#include <errno.h>
#include <string.h>

void px_tls_hello_sni(const uint8_t *p, size_t n, char *out, size_t len)
{
    size_t l;

    if (len == 0)
        return;
    out[0] = '\0';
    /* server_name_list length, name_type host_name (0), then the name's length */
    if (n < 5 || (size_t)((p[0] << 8) | p[1]) != n - 2 || p[2] != 0)
        return;
    l = (size_t)((p[3] << 8) | p[4]);
    if (l == 0 || l > n - 5 || l >= len || memchr(p + 5, '\0', l) != NULL)
        return;
    memcpy(out, p + 5, l);
    out[l] = '\0';
}

int px_tls_hello_alpn(const uint8_t *p, size_t n, const uint8_t **list, size_t *list_len)
{
    size_t i;

    if (n < 3 || (size_t)((p[0] << 8) | p[1]) != n - 2)
        return -EINVAL;
    for (i = 2; i < n; i += 1 + (size_t)p[i])
        if (p[i] == 0 || i + 1 + p[i] > n)
            return -EINVAL;
    *list = p + 2;
    *list_len = n - 2;
    return 0;
}
