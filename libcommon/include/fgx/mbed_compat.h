/* mbedtls 2.28 (Debian 12) and 3.6 (Debian 13) in one spelling: the calls whose name or
 * arguments changed in 3.0. The random generator is one 3.x needs for a private key's
 * operations (blinding); 2.x takes none and ignores it here. */
#ifndef FGX_MBED_COMPAT_H
#define FGX_MBED_COMPAT_H

#include <mbedtls/pk.h>
#include <mbedtls/sha256.h>
#include <mbedtls/version.h>

#if MBEDTLS_VERSION_MAJOR >= 3
#define fgx_mbed_sha256(in, len, out) mbedtls_sha256((in), (len), (out), 0)
#define fgx_mbed_pk_parse_key(pk, key, keylen, rng, prng)                                          \
    mbedtls_pk_parse_key((pk), (key), (keylen), NULL, 0, (rng), (prng))
#define fgx_mbed_pk_check_pair(pub, prv, rng, prng) mbedtls_pk_check_pair((pub), (prv), (rng), (prng))
#else
#define fgx_mbed_sha256(in, len, out) mbedtls_sha256_ret((in), (len), (out), 0)
#define fgx_mbed_pk_parse_key(pk, key, keylen, rng, prng)                                          \
    ((void)(rng), (void)(prng), mbedtls_pk_parse_key((pk), (key), (keylen), NULL, 0))
#define fgx_mbed_pk_check_pair(pub, prv, rng, prng)                                                \
    ((void)(rng), (void)(prng), mbedtls_pk_check_pair((pub), (prv)))
#endif

#endif
