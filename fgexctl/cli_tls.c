/* fgexctl trust stage, the network side: one TLS handshake with verification off, only to read
 * the server's certificate and its fingerprint; then trust on first use (cli_pin.c), and the
 * certificate saved as the only CA of the real nng connection, which verifies it for real. */
#include "cli_tls.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <mbedtls/ctr_drbg.h>
#include <mbedtls/entropy.h>
#include <mbedtls/error.h>
#include <mbedtls/net_sockets.h>
#include <mbedtls/oid.h>
#include <mbedtls/pem.h>
#include <mbedtls/sha256.h>
#include <mbedtls/ssl.h>
#include <mbedtls/x509_crt.h>

#include "cli_args.h"
#include "fgx/mbed_compat.h"

void cli_tls_fingerprint(const unsigned char *der, size_t len, char fp[CLI_FP_SIZE])
{
    static const char hex[] = "0123456789ABCDEF";
    unsigned char h[32];

    (void)fgx_mbed_sha256(der, len, h);
    for (size_t i = 0; i < 32; i++) {
        fp[3 * i] = hex[h[i] >> 4];
        fp[3 * i + 1] = hex[h[i] & 0xf];
        fp[3 * i + 2] = i < 31 ? ':' : '\0';
    }
}

void cli_tls_cert_release(struct cli_tls_cert *c)
{
    free(c->pem);
    c->pem = NULL;
    c->pem_len = 0;
}

/* A TCP connection within timeout_ms (mbedtls_net_connect would wait for the kernel's
 * minutes-long timeout on an unreachable host). Returns the fd or a negative errno. */
static int tcp_connect(const char *host, const char *port, int timeout_ms, char *err, size_t errlen)
{
    struct addrinfo hints, *res = NULL;
    int fd = -1, rc, gai;

    memset(&hints, 0, sizeof(hints));
    hints.ai_socktype = SOCK_STREAM;
    gai = getaddrinfo(host, port, &hints, &res);
    if (gai != 0) {
        (void)snprintf(err, errlen, "cannot resolve %s: %s", host, gai_strerror(gai));
        return -EHOSTUNREACH;
    }
    rc = -ECONNREFUSED;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        struct pollfd pfd;
        socklen_t sl = sizeof(int);
        int soerr = 0;

        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd == -1) {
            rc = -errno;
            continue;
        }
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == -1 && errno != EINPROGRESS) {
            rc = -errno;
            goto next;
        }
        pfd.fd = fd;
        pfd.events = POLLOUT;
        pfd.revents = 0;
        rc = poll(&pfd, 1, timeout_ms);
        if (rc == 0) {
            rc = -ETIMEDOUT;
            goto next;
        }
        if (rc == -1) {
            rc = -errno;
            goto next;
        }
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == -1 || soerr != 0) {
            rc = soerr ? -soerr : -errno;
            goto next;
        }
        /* mbedTLS's own receive with a timeout polls; blocking I/O is what it expects. */
        if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) == -1) {
            rc = -errno;
            goto next;
        }
        freeaddrinfo(res);
        return fd;
    next:
        (void)close(fd);
    }
    freeaddrinfo(res);
    (void)snprintf(err, errlen, "cannot connect to %s port %s: %s", host, port, strerror(-rc));
    return rc;
}

int cli_tls_fetch(const char *host, const char *port, int timeout_ms, struct cli_tls_cert *out,
                  char *err, size_t errlen)
{
    mbedtls_net_context net;
    mbedtls_ssl_context ssl;
    mbedtls_ssl_config conf;
    mbedtls_entropy_context entropy;
    mbedtls_ctr_drbg_context drbg;
    const mbedtls_x509_crt *peer;
    char why[128];
    unsigned char *pem = NULL;
    size_t pem_cap, olen = 0;
    int rc, fd;

    memset(out, 0, sizeof(*out));
    mbedtls_net_init(&net);
    mbedtls_ssl_init(&ssl);
    mbedtls_ssl_config_init(&conf);
    mbedtls_entropy_init(&entropy);
    mbedtls_ctr_drbg_init(&drbg);

    fd = tcp_connect(host, port, timeout_ms, err, errlen);
    if (fd < 0) {
        rc = fd;
        goto out;
    }
    net.fd = fd;
    rc = mbedtls_ctr_drbg_seed(&drbg, mbedtls_entropy_func, &entropy,
                               (const unsigned char *)"fgexctl", 7);
    if (rc == 0)
        rc = mbedtls_ssl_config_defaults(&conf, MBEDTLS_SSL_IS_CLIENT, MBEDTLS_SSL_TRANSPORT_STREAM,
                                         MBEDTLS_SSL_PRESET_DEFAULT);
    if (rc == 0) {
        /* Only to read the certificate: the nng connection verifies it against the pin. */
        mbedtls_ssl_conf_authmode(&conf, MBEDTLS_SSL_VERIFY_NONE);
        mbedtls_ssl_conf_rng(&conf, mbedtls_ctr_drbg_random, &drbg);
        mbedtls_ssl_conf_read_timeout(&conf, (uint32_t)timeout_ms);
        rc = mbedtls_ssl_setup(&ssl, &conf);
    }
    if (rc == 0) {
        mbedtls_ssl_set_bio(&ssl, &net, mbedtls_net_send, NULL, mbedtls_net_recv_timeout);
        do
            rc = mbedtls_ssl_handshake(&ssl);
        while (rc == MBEDTLS_ERR_SSL_WANT_READ || rc == MBEDTLS_ERR_SSL_WANT_WRITE);
    }
    if (rc != 0) {
        mbedtls_strerror(rc, why, sizeof(why));
        (void)snprintf(err, errlen, "TLS handshake with %s port %s failed: %s", host, port, why);
        rc = rc == MBEDTLS_ERR_SSL_TIMEOUT ? -ETIMEDOUT : -EPROTO;
        goto out;
    }
    peer = mbedtls_ssl_get_peer_cert(&ssl);
    if (!peer || peer->raw.len == 0) {
        (void)snprintf(err, errlen, "%s port %s presented no certificate", host, port);
        rc = -EPROTO;
        goto out;
    }
    cli_tls_fingerprint(peer->raw.p, peer->raw.len, out->fp);
    pem_cap = peer->raw.len * 4 / 3 + peer->raw.len / 32 + 128;
    pem = malloc(pem_cap);
    if (!pem) {
        rc = -ENOMEM;
        (void)snprintf(err, errlen, "out of memory");
        goto out;
    }
    rc = mbedtls_pem_write_buffer("-----BEGIN CERTIFICATE-----\n", "-----END CERTIFICATE-----\n",
                                  peer->raw.p, peer->raw.len, pem, pem_cap, &olen);
    if (rc != 0) {
        (void)snprintf(err, errlen, "cannot encode the certificate as PEM");
        rc = -EIO;
        goto out;
    }
    out->pem = (char *)pem;
    out->pem_len = strlen(out->pem);
    pem = NULL;
    (void)mbedtls_ssl_close_notify(&ssl);
out:
    free(pem);
    mbedtls_net_free(&net);
    mbedtls_ssl_free(&ssl);
    mbedtls_ssl_config_free(&conf);
    mbedtls_ctr_drbg_free(&drbg);
    mbedtls_entropy_free(&entropy);
    return rc;
}

/* The name a pinned certificate is checked for: its own (its first DNS subjectAltName, else its
 * CN), so that the check passes for exactly that certificate and adds nothing to the pin. A name
 * is needed: mbedtls 3.6.3 and later (Debian 13) fail a verified client handshake without one
 * (MBEDTLS_ERR_SSL_CERTIFICATE_VERIFICATION_WITHOUT_HOSTNAME). NULL: the certificate has none. */
static const char *pin_name(const mbedtls_x509_crt *crt, char *buf, size_t len)
{
    const mbedtls_x509_sequence *san;
    const mbedtls_x509_name *n;
    const mbedtls_x509_buf *v = NULL;

    for (san = &crt->subject_alt_names; san && san->buf.p && !v; san = san->next)
        if (san->buf.tag == (MBEDTLS_ASN1_CONTEXT_SPECIFIC | MBEDTLS_X509_SAN_DNS_NAME))
            v = &san->buf;
    for (n = &crt->subject; n && n->oid.p && !v; n = n->next)
        if (MBEDTLS_OID_CMP(MBEDTLS_OID_AT_CN, &n->oid) == 0)
            v = &n->val;
    /* a name with a NUL in it would be cut short here, and then fail the check: refused */
    if (!v || v->len == 0 || v->len >= len)
        return NULL;
    memcpy(buf, v->p, v->len);
    buf[v->len] = '\0';
    return buf;
}

/* --ca FILE: a single self-signed certificate is the server's own (a pin): no name to check.
 * Anything else is a CA, and the server's certificate must name the host. */
static int trust_ca_file(const struct cli_pin_target *t, const char *ca_file,
                         struct cli_tls_trust *out, char *err, size_t errlen)
{
    mbedtls_x509_crt crt;
    char why[128];
    int rc;

    mbedtls_x509_crt_init(&crt);
    rc = mbedtls_x509_crt_parse_file(&crt, ca_file);
    if (rc != 0) {
        mbedtls_strerror(rc, why, sizeof(why));
        (void)snprintf(err, errlen, "--ca %s: cannot load the certificate: %s", ca_file, why);
        mbedtls_x509_crt_free(&crt);
        return -EINVAL;
    }
    (void)snprintf(out->ca_path, sizeof(out->ca_path), "%s", ca_file);
    out->fp[0] = '\0';
    if (crt.next == NULL && crt.subject_raw.len == crt.issuer_raw.len &&
        memcmp(crt.subject_raw.p, crt.issuer_raw.p, crt.subject_raw.len) == 0) {
        out->pinned = true;
        out->server_name = pin_name(&crt, out->server_name_buf, sizeof(out->server_name_buf));
        cli_tls_fingerprint(crt.raw.p, crt.raw.len, out->fp);
    } else {
        (void)snprintf(out->server_name_buf, sizeof(out->server_name_buf), "%s", t->host);
        out->server_name = out->server_name_buf;
    }
    mbedtls_x509_crt_free(&crt);
    return 0;
}

int cli_tls_trust_setup(const char *url, const char *fingerprint, const char *ca_file,
                        struct cli_tls_trust *out, char *err, size_t errlen)
{
    struct cli_pin_target t;
    struct cli_tls_cert cert = {{0}, NULL, 0};
    enum cli_pin_outcome outcome;
    char dir[3072], kh[3200];
    int rc;

    memset(out, 0, sizeof(*out));
    if (cli_pin_target(url, &t) < 0) {
        (void)snprintf(err, errlen, "invalid URL '%.200s': expected tls+tcp://HOST:PORT", url);
        return -EINVAL;
    }
    if (ca_file)
        return trust_ca_file(&t, ca_file, out, err, errlen);
    rc = cli_pin_dir(dir, sizeof(dir));
    if (rc < 0) {
        (void)snprintf(err, errlen, "no place for known_hosts: set $HOME or $FGEX_CONFIG_DIR");
        return rc;
    }
    (void)snprintf(kh, sizeof(kh), "%s/known_hosts", dir);
    rc = cli_tls_fetch(t.host, t.port, CLI_TLS_TIMEOUT_MS, &cert, err, errlen);
    if (rc < 0)
        return rc;
    rc = cli_pin_check(kh, t.hostport, cert.fp, fingerprint, &outcome, err, errlen);
    if (rc < 0)
        goto out;
    (void)snprintf(out->fp, sizeof(out->fp), "%s", cert.fp);
    if (snprintf(out->ca_path, sizeof(out->ca_path), "%s/certs/%s.pem", dir, t.key) >=
        (int)sizeof(out->ca_path)) {
        rc = -ENAMETOOLONG;
        (void)snprintf(err, errlen, "the path of the certificate file is too long");
        goto out;
    }
    rc = cli_pin_write_file(out->ca_path, cert.pem, cert.pem_len);
    if (rc < 0) {
        (void)snprintf(err, errlen, "cannot write %s: %s", out->ca_path, strerror(-rc));
        goto out;
    }
    out->pinned = true;
    {
        mbedtls_x509_crt crt;

        mbedtls_x509_crt_init(&crt);
        out->server_name = mbedtls_x509_crt_parse(&crt, (const unsigned char *)cert.pem,
                                                  cert.pem_len + 1) == 0
                               ? pin_name(&crt, out->server_name_buf, sizeof(out->server_name_buf))
                               : NULL;
        mbedtls_x509_crt_free(&crt);
    }
    if (outcome == CLI_PIN_NEW)
        (void)fprintf(stderr,
                      CLI_PROG
                      ": first connection to %s: pinned its certificate, SHA-256\n"
                      "  %s\n"
                      "  (saved in %s; check it against `controld` or `fgexctl cert` on the "
                      "server)\n",
                      t.hostport, cert.fp, kh);
out:
    cli_tls_cert_release(&cert);
    return rc;
}
