/* controld remote-listener stage: makes or loads the certificate and key the tls+tcp:// control
 * listener presents (handed to fgx_chan_listen_tls()), and computes the fingerprint clients pin.
 * mbedTLS, because nng's TLS transport is built on it here. */
#include "controld/ctl_tls.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <mbedtls/ctr_drbg.h>
#include <mbedtls/ecp.h>
#include <mbedtls/entropy.h>
#include <mbedtls/error.h>
#include <mbedtls/pk.h>
#include <mbedtls/sha256.h>
#include <mbedtls/x509_crt.h>

#include "fgx/log.h"
#include "fgx/mbed_compat.h"

#define PEM_MAX 16384
#define CERT_YEARS 20

/* The one place mbedTLS codes are logged, with its own text. */
static int tls_err(int rc, const char *what)
{
    char buf[160];

    mbedtls_strerror(rc, buf, sizeof(buf));
    fgx_err("tls: %s: %s (-0x%04x)", what, buf, (unsigned)-rc);
    return -EINVAL;
}

int ctl_tls_fingerprint(const char *pem, char *out, size_t len)
{
    static const char hex[] = "0123456789ABCDEF";
    mbedtls_x509_crt crt;
    unsigned char sum[32];
    int rc, rv = -EINVAL;

    if (len < CTL_TLS_FINGERPRINT_LEN + 1)
        return -ENOSPC;
    mbedtls_x509_crt_init(&crt);
    rc = mbedtls_x509_crt_parse(&crt, (const unsigned char *)pem, strlen(pem) + 1);
    if (rc != 0) {
        tls_err(rc, "cannot parse the certificate");
        goto out;
    }
    fgx_mbed_sha256(crt.raw.p, crt.raw.len, sum);
    for (size_t i = 0; i < sizeof(sum); i++) {
        out[3 * i] = hex[sum[i] >> 4];
        out[3 * i + 1] = hex[sum[i] & 15];
        out[3 * i + 2] = i + 1 < sizeof(sum) ? ':' : '\0';
    }
    rv = 0;
out:
    mbedtls_x509_crt_free(&crt);
    return rv;
}

static void validity_time(time_t t, char out[15])
{
    struct tm tm;

    gmtime_r(&t, &tm);
    strftime(out, 15, "%Y%m%d%H%M%S", &tm);
}

int ctl_tls_generate(char **cert_pem, char **key_pem)
{
    static const char pers[] = "fgex-controld-cert";
    mbedtls_entropy_context entropy;
    mbedtls_ctr_drbg_context drbg;
    mbedtls_x509write_cert wr;
    mbedtls_pk_context key;
#if MBEDTLS_VERSION_MAJOR < 3
    mbedtls_mpi serial;
#endif
    unsigned char sbytes[16];
    char from[15], to[15];
    unsigned char *cbuf = NULL, *kbuf = NULL;
    time_t now = time(NULL);
    int rc, rv = -EINVAL;

    mbedtls_entropy_init(&entropy);
    mbedtls_ctr_drbg_init(&drbg);
    mbedtls_x509write_crt_init(&wr);
    mbedtls_pk_init(&key);
#if MBEDTLS_VERSION_MAJOR < 3
    mbedtls_mpi_init(&serial);
#endif
    cbuf = calloc(1, PEM_MAX);
    kbuf = calloc(1, PEM_MAX);
    if (!cbuf || !kbuf) {
        rv = -ENOMEM;
        goto out;
    }
    rc = mbedtls_ctr_drbg_seed(&drbg, mbedtls_entropy_func, &entropy, (const unsigned char *)pers,
                               sizeof(pers) - 1);
    if (rc != 0) {
        tls_err(rc, "cannot seed the random generator");
        goto out;
    }
    rc = mbedtls_pk_setup(&key, mbedtls_pk_info_from_type(MBEDTLS_PK_ECKEY));
    if (rc == 0)
        rc = mbedtls_ecp_gen_key(MBEDTLS_ECP_DP_SECP256R1, mbedtls_pk_ec(key),
                                 mbedtls_ctr_drbg_random, &drbg);
    if (rc != 0) {
        tls_err(rc, "cannot generate a key");
        goto out;
    }
    /* A positive serial: the top bit clear. */
    rc = mbedtls_ctr_drbg_random(&drbg, sbytes, sizeof(sbytes));
    sbytes[0] &= 0x7f;
    sbytes[0] |= 0x01;
#if MBEDTLS_VERSION_MAJOR < 3
    if (rc == 0)
        rc = mbedtls_mpi_read_binary(&serial, sbytes, sizeof(sbytes));
#endif
    validity_time(now - 24 * 3600, from); /* a client clock a day behind still accepts it */
    validity_time(now + (time_t)CERT_YEARS * 365 * 24 * 3600, to);
    mbedtls_x509write_crt_set_version(&wr, MBEDTLS_X509_CRT_VERSION_3);
    mbedtls_x509write_crt_set_md_alg(&wr, MBEDTLS_MD_SHA256);
    mbedtls_x509write_crt_set_subject_key(&wr, &key);
    mbedtls_x509write_crt_set_issuer_key(&wr, &key);
#if MBEDTLS_VERSION_MAJOR < 3
    if (rc == 0)
        rc = mbedtls_x509write_crt_set_serial(&wr, &serial);
#else /* 3.x: the serial's bytes as they are (set_serial is deprecated there) */
    if (rc == 0)
        rc = mbedtls_x509write_crt_set_serial_raw(&wr, sbytes, sizeof(sbytes));
#endif
    if (rc == 0)
        rc = mbedtls_x509write_crt_set_subject_name(&wr, "CN=" CTL_TLS_CN ",O=fgex");
    if (rc == 0)
        rc = mbedtls_x509write_crt_set_issuer_name(&wr, "CN=" CTL_TLS_CN ",O=fgex");
    if (rc == 0)
        rc = mbedtls_x509write_crt_set_validity(&wr, from, to);
    /* Its own CA: a client pins it by trusting exactly this certificate. */
    if (rc == 0)
        rc = mbedtls_x509write_crt_set_basic_constraints(&wr, 1, 0);
    if (rc == 0)
        rc = mbedtls_x509write_crt_set_subject_key_identifier(&wr);
    if (rc == 0)
        rc = mbedtls_x509write_crt_pem(&wr, cbuf, PEM_MAX, mbedtls_ctr_drbg_random, &drbg);
    if (rc == 0)
        rc = mbedtls_pk_write_key_pem(&key, kbuf, PEM_MAX);
    if (rc != 0) {
        tls_err(rc, "cannot write the certificate");
        goto out;
    }
    *cert_pem = (char *)cbuf;
    *key_pem = (char *)kbuf;
    cbuf = kbuf = NULL;
    rv = 0;
out:
    if (kbuf)
        explicit_bzero(kbuf, PEM_MAX);
    free(cbuf);
    free(kbuf);
#if MBEDTLS_VERSION_MAJOR < 3
    mbedtls_mpi_free(&serial);
#endif
    mbedtls_pk_free(&key);
    mbedtls_x509write_crt_free(&wr);
    mbedtls_ctr_drbg_free(&drbg);
    mbedtls_entropy_free(&entropy);
    return rv;
}

static int read_file(const char *path, char **out)
{
    char *buf = NULL;
    size_t len = 0;
    ssize_t n;
    int fd, rv = 0;

    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd == -1) {
        rv = -errno;
        if (rv != -ENOENT)
            fgx_err("tls: cannot open %s: %s", path, strerror(errno));
        return rv;
    }
    buf = calloc(1, PEM_MAX + 1);
    if (!buf) {
        rv = -ENOMEM;
        goto out;
    }
    while ((n = read(fd, buf + len, PEM_MAX - len)) > 0)
        len += (size_t)n;
    if (n == -1) {
        rv = -errno;
        fgx_err("tls: cannot read %s: %s", path, strerror(errno));
    } else if (len == PEM_MAX) {
        rv = -EFBIG;
        fgx_err("tls: %s is larger than %d bytes", path, PEM_MAX);
    }
out:
    close(fd);
    if (rv < 0) {
        if (buf)
            explicit_bzero(buf, PEM_MAX + 1);
        free(buf);
        return rv;
    }
    *out = buf;
    return 0;
}

/* Write through a temporary file and a rename, so a crash never leaves half a key. */
static int write_file(const char *path, const char *data, mode_t mode)
{
    char tmp[4200];
    size_t len = strlen(data), off = 0;
    int fd, rv = 0;

    if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
        return -ENAMETOOLONG;
    unlink(tmp);
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    if (fd == -1) {
        rv = -errno;
        fgx_err("tls: cannot create %s: %s", tmp, strerror(errno));
        return rv;
    }
    while (off < len) {
        ssize_t n = write(fd, data + off, len - off);
        if (n == -1) {
            rv = -errno;
            fgx_err("tls: cannot write %s: %s", tmp, strerror(errno));
            break;
        }
        off += (size_t)n;
    }
    if (rv == 0 && fsync(fd) == -1) {
        rv = -errno;
        fgx_err("tls: cannot sync %s: %s", tmp, strerror(errno));
    }
    close(fd);
    if (rv == 0 && rename(tmp, path) == -1) {
        rv = -errno;
        fgx_err("tls: cannot rename %s: %s", tmp, strerror(errno));
    }
    if (rv < 0)
        unlink(tmp);
    return rv;
}

/* The key must belong to the certificate, or every handshake would fail later. */
static int check_pair(const char *cert_pem, const char *key_pem, const char *cert_path,
                      const char *key_path)
{
    static const char pers[] = "fgex-controld-pair";
    mbedtls_entropy_context entropy; /* 3.x blinds the private key's operations */
    mbedtls_ctr_drbg_context drbg;
    mbedtls_x509_crt crt;
    mbedtls_pk_context key;
    int rc, rv = -EINVAL;
    char what[8400];

    mbedtls_entropy_init(&entropy);
    mbedtls_ctr_drbg_init(&drbg);
    mbedtls_x509_crt_init(&crt);
    mbedtls_pk_init(&key);
    rc = mbedtls_x509_crt_parse(&crt, (const unsigned char *)cert_pem, strlen(cert_pem) + 1);
    if (rc != 0) {
        snprintf(what, sizeof(what), "%s is not a PEM certificate", cert_path);
        tls_err(rc, what);
        goto out;
    }
    rc = mbedtls_ctr_drbg_seed(&drbg, mbedtls_entropy_func, &entropy, (const unsigned char *)pers,
                               sizeof(pers) - 1);
    if (rc != 0) {
        tls_err(rc, "cannot seed the random generator");
        goto out;
    }
    rc = fgx_mbed_pk_parse_key(&key, (const unsigned char *)key_pem, strlen(key_pem) + 1,
                               mbedtls_ctr_drbg_random, &drbg);
    if (rc != 0) {
        snprintf(what, sizeof(what), "%s is not an unencrypted PEM private key", key_path);
        tls_err(rc, what);
        goto out;
    }
    rc = fgx_mbed_pk_check_pair(&crt.pk, &key, mbedtls_ctr_drbg_random, &drbg);
    if (rc != 0) {
        snprintf(what, sizeof(what), "the key %s does not belong to the certificate %s", key_path,
                 cert_path);
        tls_err(rc, what);
        goto out;
    }
    rv = 0;
out:
    mbedtls_pk_free(&key);
    mbedtls_x509_crt_free(&crt);
    mbedtls_ctr_drbg_free(&drbg);
    mbedtls_entropy_free(&entropy);
    return rv;
}

int ctl_tls_load(const char *state_dir, const char *cert_file, const char *key_file,
                 struct ctl_tls *out)
{
    char cpath[4096], kpath[4096];
    int rv, rk;

    memset(out, 0, sizeof(*out));
    if (!cert_file != !key_file) {
        fgx_err("tls: --cert and --key go together");
        return -EINVAL;
    }
    if (cert_file) {
        snprintf(cpath, sizeof(cpath), "%s", cert_file);
        snprintf(kpath, sizeof(kpath), "%s", key_file);
    } else if (snprintf(cpath, sizeof(cpath), "%s/" CTL_TLS_CERT_FILE, state_dir) >=
                   (int)sizeof(cpath) ||
               snprintf(kpath, sizeof(kpath), "%s/" CTL_TLS_KEY_FILE, state_dir) >=
                   (int)sizeof(kpath)) {
        return -ENAMETOOLONG;
    }
    rv = read_file(cpath, &out->cert_pem);
    rk = read_file(kpath, &out->key_pem);
    if (!cert_file && rv == -ENOENT && rk == -ENOENT) {
        rv = ctl_tls_generate(&out->cert_pem, &out->key_pem);
        if (rv == 0)
            rv = write_file(kpath, out->key_pem, 0600);
        if (rv == 0)
            rv = write_file(cpath, out->cert_pem, 0644);
        if (rv < 0)
            goto err;
        fgx_info("tls: created a self-signed certificate %s and its key %s", cpath, kpath);
        rk = 0;
    } else if (rv == -ENOENT || rk == -ENOENT) {
        fgx_err("tls: %s is missing (need both %s and %s)", rv == -ENOENT ? cpath : kpath, cpath,
                kpath);
    }
    if (rv == 0)
        rv = rk;
    if (rv < 0)
        goto err;
    rv = check_pair(out->cert_pem, out->key_pem, cpath, kpath);
    if (rv == 0)
        rv = ctl_tls_fingerprint(out->cert_pem, out->fingerprint, sizeof(out->fingerprint));
    if (rv < 0)
        goto err;
    return 0;
err:
    ctl_tls_release(out);
    return rv;
}

void ctl_tls_release(struct ctl_tls *t)
{
    if (!t)
        return;
    free(t->cert_pem);
    t->cert_pem = NULL;
    if (t->key_pem) {
        explicit_bzero(t->key_pem, strlen(t->key_pem));
        free(t->key_pem);
        t->key_pem = NULL;
    }
}
