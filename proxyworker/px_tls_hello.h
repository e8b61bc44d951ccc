/* proxyworker's ClientHello peek (px_tls_hello.c): the server_name and ALPN extensions that the
 * TLS stage (px_tls.c) reads from a client's hello before it connects to the service, parsed
 * from the extensions' raw bytes as the client sent them. Pure: no OpenSSL, no connection, so
 * that the fuzzing harness (tests/fuzz/fuzz_tls_hello.c) feeds them any bytes. */
#ifndef PX_TLS_HELLO_H
#define PX_TLS_HELLO_H

#include <stddef.h>
#include <stdint.h>

/* The server_name extension's host name (RFC 6066 3) into out (len bytes, NUL-terminated), or
 * "" when the extension is malformed, names no host name first, or the name holds a NUL or
 * does not fit. */
void px_tls_hello_sni(const uint8_t *p, size_t n, char *out, size_t len);

/* The ALPN extension's protocol list (RFC 7301 3.1) without its length prefix, as
 * SSL_set_alpn_protos() takes it: *list points into p, *list_len bytes. Returns 0, or -EINVAL
 * when the list is malformed (a length that disagrees, an empty protocol name, a name past the
 * end). */
int px_tls_hello_alpn(const uint8_t *p, size_t n, const uint8_t **list, size_t *list_len);

#endif
