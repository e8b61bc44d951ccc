/* Unit tests of controld's TLS certificate checks (controld/rpc_tls.c): what `service add/set
 * --tls-cert --tls-key` accepts, refuses and warns about, on pairs made here with OpenSSL. */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include "controld/ctl_rpc_tls.h"

struct pem {
    char *cert, *key;
    size_t cert_len, key_len;
};

static char *bio_text(BIO *b, size_t *len)
{
    char *p, *out;
    long n = BIO_get_mem_data(b, &p);

    out = malloc((size_t)n + 1);
    cr_assert_not_null(out);
    memcpy(out, p, (size_t)n);
    out[n] = '\0';
    *len = (size_t)n;
    return out;
}

/* A self-signed P-256 certificate for CN=cn valid from now+from_s to now+to_s. */
static struct pem make_pair(const char *cn, long from_s, long to_s)
{
    EVP_PKEY *k = EVP_EC_gen("P-256");
    X509 *x = X509_new();
    X509_NAME *n;
    BIO *bc = BIO_new(BIO_s_mem()), *bk = BIO_new(BIO_s_mem());
    struct pem p;

    cr_assert(k != NULL && x != NULL && bc != NULL && bk != NULL);
    ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
    X509_gmtime_adj(X509_getm_notBefore(x), from_s);
    X509_gmtime_adj(X509_getm_notAfter(x), to_s);
    X509_set_pubkey(x, k);
    n = X509_get_subject_name(x);
    X509_NAME_add_entry_by_txt(n, "CN", MBSTRING_ASC, (const unsigned char *)cn, -1, -1, 0);
    X509_set_issuer_name(x, n);
    cr_assert(X509_sign(x, k, EVP_sha256()) > 0);
    cr_assert(PEM_write_bio_X509(bc, x) == 1);
    cr_assert(PEM_write_bio_PrivateKey(bk, k, NULL, NULL, 0, NULL, NULL) == 1);
    p.cert = bio_text(bc, &p.cert_len);
    p.key = bio_text(bk, &p.key_len);
    BIO_free(bc);
    BIO_free(bk);
    X509_free(x);
    EVP_PKEY_free(k);
    return p;
}

static void pair_free(struct pem *p)
{
    free(p->cert);
    free(p->key);
}

static int check(const struct pem *c, const struct pem *k, struct ctl_tls_info *info, char *err)
{
    return ctl_tls_check((const uint8_t *)c->cert, c->cert_len, (const uint8_t *)k->key, k->key_len,
                         info, err, 256);
}

Test(tls, a_matching_pair_is_accepted_with_its_subject_and_expiry)
{
    struct pem p = make_pair("fgex-test", -60, 86400);
    struct ctl_tls_info info;
    char err[256] = "";

    cr_assert_eq(check(&p, &p, &info, err), 0, "%s", err);
    cr_assert(strstr(info.subject, "CN=fgex-test") != NULL, "subject %s", info.subject);
    cr_assert(!info.expired);
    cr_assert(info.not_after > (uint64_t)time(NULL) + 86000 &&
                  info.not_after < (uint64_t)time(NULL) + 86800,
              "not_after %llu", (unsigned long long)info.not_after);
    pair_free(&p);
}

Test(tls, a_key_of_another_certificate_is_refused)
{
    struct pem a = make_pair("a", -60, 86400), b = make_pair("b", -60, 86400);
    struct ctl_tls_info info;
    char err[256] = "";

    cr_assert_eq(check(&a, &b, &info, err), -EINVAL);
    cr_assert(strstr(err, "does not match") != NULL, "%s", err);
    pair_free(&a);
    pair_free(&b);
}

Test(tls, what_is_not_pem_is_refused_naming_which_file)
{
    struct pem p = make_pair("a", -60, 86400),
               junk = {.cert = "hello\n", .key = "hello\n", .cert_len = 6, .key_len = 6};
    struct ctl_tls_info info;
    char err[256] = "";

    cr_assert_eq(check(&junk, &p, &info, err), -EINVAL);
    cr_assert(strstr(err, "not a PEM certificate") != NULL, "%s", err);
    cr_assert_eq(check(&p, &junk, &info, err), -EINVAL);
    cr_assert(strstr(err, "not an unencrypted PEM private key") != NULL, "%s", err);
    /* The key where the certificate goes, and the other way round. */
    cr_assert_eq(ctl_tls_check((const uint8_t *)p.key, p.key_len, (const uint8_t *)p.cert,
                               p.cert_len, &info, err, sizeof(err)),
                 -EINVAL);
    pair_free(&p);
}

Test(tls, an_expired_certificate_passes_marked_expired)
{
    struct pem p = make_pair("old", -30L * 86400, -86400);
    struct ctl_tls_info info;
    char err[256] = "";

    cr_assert_eq(check(&p, &p, &info, err), 0, "%s", err);
    cr_assert(info.expired);
    cr_assert(info.not_after < (uint64_t)time(NULL));
    pair_free(&p);
}

Test(tls, empty_and_oversized_input_is_refused)
{
    struct pem p = make_pair("a", -60, 86400);
    struct ctl_tls_info info;
    char err[256] = "";
    char *big = calloc(1, CTL_TLS_PEM_MAX + 1);

    cr_assert_eq(ctl_tls_check((const uint8_t *)p.cert, 0, (const uint8_t *)p.key, p.key_len, &info,
                               err, sizeof(err)),
                 -EINVAL);
    cr_assert_eq(ctl_tls_check((const uint8_t *)big, CTL_TLS_PEM_MAX + 1, (const uint8_t *)p.key,
                               p.key_len, &info, err, sizeof(err)),
                 -EINVAL);
    cr_assert(strstr(err, "bytes of PEM") != NULL, "%s", err);
    free(big);
    pair_free(&p);
}
