/* controld control API, TLS services: the certificate and key a `service add/set --tls-cert
 * --tls-key` brings are checked here with OpenSSL, the library proxyworker loads them with, so
 * that what is accepted is what the worker can use: PEM that parses, a key that matches the
 * certificate. An expired certificate is accepted with a warning (a game's clock, a checker that
 * does not verify). Nothing is stored when a check fails. */
#include "controld/ctl_rpc_cmd.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/asn1.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include "controld/ctl_rpc_tls.h"

static const char *ssl_reason(char *buf, size_t len)
{
    unsigned long e = ERR_peek_last_error();

    if (e == 0)
        (void)snprintf(buf, len, "no PEM data");
    else
        (void)snprintf(buf, len, "%s",
                       ERR_reason_error_string(e) ? ERR_reason_error_string(e) : "?");
    ERR_clear_error();
    return buf;
}

int ctl_tls_check(const uint8_t *cert, size_t clen, const uint8_t *key, size_t klen,
                  struct ctl_tls_info *info, char *err, size_t errlen)
{
    BIO *b = NULL;
    X509 *x = NULL;
    EVP_PKEY *k = NULL;
    char r[128];
    int rv = -EINVAL, day = 0, sec = 0;

    memset(info, 0, sizeof(*info));
    ERR_clear_error();
    if (clen == 0 || clen > CTL_TLS_PEM_MAX || klen == 0 || klen > CTL_TLS_PEM_MAX) {
        (void)snprintf(err, errlen, "the certificate and the key must each be 1..%u bytes of PEM",
                       CTL_TLS_PEM_MAX);
        return -EINVAL;
    }
    b = BIO_new_mem_buf(cert, (int)clen);
    if (b == NULL)
        goto nomem;
    x = PEM_read_bio_X509(b, NULL, NULL, NULL);
    if (x == NULL) {
        (void)snprintf(err, errlen, "the certificate is not a PEM certificate (%s)",
                       ssl_reason(r, sizeof(r)));
        goto out;
    }
    BIO_free(b);
    b = BIO_new_mem_buf(key, (int)klen);
    if (b == NULL)
        goto nomem;
    k = PEM_read_bio_PrivateKey(b, NULL, NULL, NULL);
    if (k == NULL) {
        (void)snprintf(err, errlen, "the key is not an unencrypted PEM private key (%s)",
                       ssl_reason(r, sizeof(r)));
        goto out;
    }
    if (X509_check_private_key(x, k) != 1) {
        ERR_clear_error();
        (void)snprintf(err, errlen, "the key does not match the certificate");
        goto out;
    }
    X509_NAME_oneline(X509_get_subject_name(x), info->subject, sizeof(info->subject));
    if (ASN1_TIME_diff(&day, &sec, NULL, X509_get0_notAfter(x)) == 1)
        info->not_after = (uint64_t)((int64_t)time(NULL) + (int64_t)day * 86400 + sec);
    info->expired = X509_cmp_current_time(X509_get0_notAfter(x)) < 0;
    rv = 0;
    goto out;
nomem:
    (void)snprintf(err, errlen, "out of memory");
    rv = -ENOMEM;
out:
    ERR_clear_error();
    EVP_PKEY_free(k);
    X509_free(x);
    BIO_free(b);
    return rv;
}

int ctl_rpc_tls_take(struct ctl_rpc *r, const char *name, bool has_cert,
                     const ProtobufCBinaryData *cert, bool has_key, const ProtobufCBinaryData *key,
                     enum ctl_layer layer, struct ctl_tls_pem *out)
{
    struct ctl_tls_info info;
    char err[256];

    memset(out, 0, sizeof(*out));
    if (has_cert != has_key) {
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID,
                     "service %s: --tls-cert and --tls-key go together", name);
        return -EINVAL;
    }
    if (layer != CTL_LAYER_PROXY) {
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID,
                     "service %s: TLS needs the proxy layer (--layer proxy): the nfqueue layer "
                     "sees packets, not the TLS session, and cannot hold keys",
                     name);
        return -EINVAL;
    }
    if (ctl_tls_check(cert->data, cert->len, key->data, key->len, &info, err, sizeof(err)) < 0) {
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID, "service %s: %s; nothing stored", name, err);
        return -EINVAL;
    }
    if (info.expired) {
        (void)snprintf(r->tls_warn, sizeof(r->tls_warn),
                       "the certificate (%s) has expired: clients that verify it will refuse it",
                       info.subject);
        r->tls_warn_ptr = r->tls_warn;
        r->reply.warnings = &r->tls_warn_ptr;
        r->reply.n_warnings = 1;
    }
    out->cert = malloc(cert->len + 1);
    out->key = malloc(key->len + 1);
    if (out->cert == NULL || out->key == NULL) {
        ctl_tls_pem_release(out);
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_ERROR, "out of memory");
        return -ENOMEM;
    }
    memcpy(out->cert, cert->data, cert->len);
    memcpy(out->key, key->data, key->len);
    out->cert_len = cert->len;
    out->key_len = key->len;
    return 0;
}

int ctl_rpc_tls_info(const uint8_t *cert, size_t len, struct ctl_tls_info *info)
{
    BIO *b = BIO_new_mem_buf(cert, (int)len);
    X509 *x = b != NULL ? PEM_read_bio_X509(b, NULL, NULL, NULL) : NULL;
    int day = 0, sec = 0;

    memset(info, 0, sizeof(*info));
    BIO_free(b);
    if (x == NULL) {
        ERR_clear_error();
        return -EINVAL;
    }
    X509_NAME_oneline(X509_get_subject_name(x), info->subject, sizeof(info->subject));
    if (ASN1_TIME_diff(&day, &sec, NULL, X509_get0_notAfter(x)) == 1)
        info->not_after = (uint64_t)((int64_t)time(NULL) + (int64_t)day * 86400 + sec);
    info->expired = X509_cmp_current_time(X509_get0_notAfter(x)) < 0;
    X509_free(x);
    ERR_clear_error();
    return 0;
}
