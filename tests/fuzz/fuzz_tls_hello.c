/* libFuzzer harness: the proxy layer's ClientHello peek (proxyworker/px_tls_hello.c), the
 * server_name and ALPN extensions exactly as a client sends them (OpenSSL hands their raw bytes
 * over). Checks: a host name comes back NUL-terminated, without a NUL inside, within its buffer;
 * an accepted ALPN list lies inside the extension and walks to its end in well-formed names. */
#include <assert.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "proxyworker/px_tls_hello.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char sni[256];
    const uint8_t *list;
    size_t len, i;

    memset(sni, 'x', sizeof(sni));
    px_tls_hello_sni(data, size, sni, sizeof(sni));
    assert(memchr(sni, '\0', sizeof(sni)) != NULL);
    assert(sni[0] == '\0' || strlen(sni) + 5 <= size);

    if (px_tls_hello_alpn(data, size, &list, &len) == 0) {
        assert(list == data + 2 && len == size - 2 && len > 0);
        for (i = 0; i < len; i += 1 + (size_t)list[i])
            assert(list[i] > 0 && i + 1 + list[i] <= len);
        assert(i == len);
    }
    return 0;
}
