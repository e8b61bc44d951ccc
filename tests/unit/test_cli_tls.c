/* Unit tests for fgexctl's TLS trust stage (cli_tls.c over fgx_chan_dial_tls): a real TLS
 * listener from libcommon/chan.c in a network namespace of the test's own (Criterion runs each
 * test in its own process; unshare(CLONE_NEWNET) there), and the client's whole path: read the
 * certificate, pin it on first use, connect with it as the only CA; then a server with another
 * certificate is refused, and --fingerprint pins the new one explicitly.
 * nng's threads already exist when a test starts, in the namespace the process started in, so
 * an nng dial from this process would leave the test's namespace: the nng client side runs as
 * the fgexctl binary (build/.../bin/fgexctl beside tests/), a fresh process in the namespace. */
#include <criterion/criterion.h>

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "control.pb-c.h"
#include "fgexctl/cli_pin.h"
#include "fgexctl/cli_tls.h"
#include "fgx/chan.h"
#include "fgx/chan_tls.h"

/* Two self-signed P-256 certificates valid until 2126, made for this test with
 * `openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 36500`. */
/* clang-format off */
static const char tc1_pem[] =
    "-----BEGIN CERTIFICATE-----\n"
    "MIIBgjCCASmgAwIBAgIUcAipp7BhQT5bKAP+hSfW1ZtwOmkwCgYIKoZIzj0EAwIw\n"
    "FjEUMBIGA1UEAwwLZmdleC11bml0LTEwIBcNMjYxMTMwMDQxNzE2WhgPMjEyNjEx\n"
    "MDYwNDE3MTZaMBYxFDASBgNVBAMMC2ZnZXgtdW5pdC0xMFkwEwYHKoZIzj0CAQYI\n"
    "KoZIzj0DAQcDQgAExnKUHmfrQItevKrHx3wJEBrMfmQlgI+0JrHPPHKW3MeBu6pE\n"
    "Ip38snKJ5k23H2ZbyVifzoiN8xh7qYHNIpA9aaNTMFEwHQYDVR0OBBYEFLIfNOPm\n"
    "aDfM9BJxcIZWNY6PQg3xMB8GA1UdIwQYMBaAFLIfNOPmaDfM9BJxcIZWNY6PQg3x\n"
    "MA8GA1UdEwEB/wQFMAMBAf8wCgYIKoZIzj0EAwIDRwAwRAIgYfI+Qm5UG2VNYDi/\n"
    "hePlx+iP41vCbm7TOycAuXTAhyACIHE/KYCFGiqvGif6Df0Hx1pOsohzYXKjw/pb\n"
    "DFRxiE8L\n"
    "-----END CERTIFICATE-----\n"
    ;
static const char tk1_pem[] =
    "-----BEGIN PRIVATE KEY-----\n"
    "MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgxkUbUsqwzGbCIbdb\n"
    "QLKvjjio0aa2aRF/DorJ8nckzKuhRANCAATGcpQeZ+tAi168qsfHfAkQGsx+ZCWA\n"
    "j7Qmsc88cpbcx4G7qkQinfyyconmTbcfZlvJWJ/OiI3zGHupgc0ikD1p\n"
    "-----END PRIVATE KEY-----\n"
    ;
static const char tc2_pem[] =
    "-----BEGIN CERTIFICATE-----\n"
    "MIIBgzCCASmgAwIBAgIUKT6Puk0xGHCvaYZ1ZtHXb23DdM4wCgYIKoZIzj0EAwIw\n"
    "FjEUMBIGA1UEAwwLZmdleC11bml0LTIwIBcNMjYxMTMwMDQxNzE2WhgPMjEyNjEx\n"
    "MDYwNDE3MTZaMBYxFDASBgNVBAMMC2ZnZXgtdW5pdC0yMFkwEwYHKoZIzj0CAQYI\n"
    "KoZIzj0DAQcDQgAERWiEEhP8GTIUBFxZniosXblxnSOofBlQ/UBYvhUdNduf517X\n"
    "R60+7qu+sEsJA+HVVMTfW7NcvD0s4KKIOPsubaNTMFEwHQYDVR0OBBYEFBZ5yzPG\n"
    "yjYAf9ccyWMXtNauLHNcMB8GA1UdIwQYMBaAFBZ5yzPGyjYAf9ccyWMXtNauLHNc\n"
    "MA8GA1UdEwEB/wQFMAMBAf8wCgYIKoZIzj0EAwIDSAAwRQIgLE8KY+hBP0UGlHY+\n"
    "L61UBv2Fj4PhjPEDwPfRwwKD7yACIQDAX+oVWOIraqnnEEyM+pWeSdbXaoeGzKFx\n"
    "fFksPxDNeg==\n"
    "-----END CERTIFICATE-----\n"
    ;
static const char tk2_pem[] =
    "-----BEGIN PRIVATE KEY-----\n"
    "MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgQwE6vO9N0EuTRd4s\n"
    "ViofoGpNTlQbiI2S3Xzv15CLMN6hRANCAARFaIQSE/wZMhQEXFmeKixduXGdI6h8\n"
    "GVD9QFi+FR0125/nXtdHrT7uq76wSwkD4dVUxN9bs1y8PSzgoog4+y5t\n"
    "-----END PRIVATE KEY-----\n"
    ;
/* clang-format on */

#define FP1                                                                                        \
    "73:64:70:A3:B8:DF:89:16:85:02:07:69:61:0B:AF:B6:24:A9:25:42:73:F3:0B:70:87:3B:F4:DD:80:F2:"   \
    "48:67"
#define FP2                                                                                        \
    "64:30:C5:DC:3C:27:92:09:DB:3F:50:48:40:DA:64:83:95:6B:7B:65:C4:58:47:F0:51:8A:65:DD:44:2D:"   \
    "04:26"
#define URL "tls+tcp://127.0.0.1:47001"

static char dir[64];

static void setup(void)
{
    cr_assert_eq(unshare(CLONE_NEWNET), 0, "unshare: %s", strerror(errno));
    cr_assert_eq(system("ip link set lo up"), 0);
    (void)snprintf(dir, sizeof(dir), "/tmp/fgx-cli-tls-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    cr_assert_eq(setenv("FGEX_CONFIG_DIR", dir, 1), 0);
}

static void teardown(void)
{
    char cmd[128];

    (void)snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
}

/* A REP server that answers every request with a Reply carrying the token it was sent. */
struct server {
    struct fgx_chan *chan;
    pthread_t th;
    volatile bool stop;
    char last_token[64];
};

static void *serve(void *arg)
{
    struct server *s = arg;

    while (!s->stop) {
        Fgx__Ctl__Reply rep = FGX__CTL__REPLY__INIT;
        Fgx__Ctl__Request *q;
        uint8_t out[256];
        void *buf = NULL;
        size_t len = 0;

        if (fgx_chan_recv(s->chan, &buf, &len, 100) < 0)
            continue;
        q = fgx__ctl__request__unpack(NULL, len, buf);
        free(buf);
        rep.code = FGX__CTL__CODE__CODE_OK;
        rep.fingerprint = "served";
        if (q && q->token)
            (void)snprintf(s->last_token, sizeof(s->last_token), "%s", q->token);
        fgx__ctl__request__free_unpacked(q, NULL);
        (void)fgx_chan_send(s->chan, out, fgx__ctl__reply__pack(&rep, out), 1000);
    }
    return NULL;
}

static void server_start(struct server *s, const char *cert, const char *key)
{
    memset(s, 0, sizeof(*s));
    cr_assert_eq(fgx_chan_listen("inproc://fgx-cli-tls", FGX_CHAN_REP, &s->chan), 0);
    cr_assert_eq(fgx_chan_listen_tls(s->chan, URL, cert, key, NULL, NULL), 0);
    cr_assert_eq(pthread_create(&s->th, NULL, serve, s), 0);
}

static void server_stop(struct server *s)
{
    s->stop = true;
    cr_assert_eq(pthread_join(s->th, NULL), 0);
    fgx_chan_close(s->chan);
}

static char fgexctl_bin[4096];

/* build/X/tests/test_cli_tls -> build/X/bin/fgexctl */
static void find_fgexctl(void)
{
    ssize_t n = readlink("/proc/self/exe", fgexctl_bin, sizeof(fgexctl_bin) - 32);
    char *slash;

    cr_assert_gt(n, 0);
    fgexctl_bin[n] = '\0';
    slash = strrchr(fgexctl_bin, '/');
    cr_assert_not_null(slash);
    strcpy(slash, "/../bin/fgexctl");
    if (access(fgexctl_bin, X_OK) != 0)
        cr_skip_test("%s is not built (make unit builds it)", fgexctl_bin);
}

/* Run `fgexctl ARGS -c URL cert` and return its exit status; its stderr goes to err. */
static int run_cli(const char *args, char *err, size_t errlen)
{
    char cmd[8192], path[128];
    FILE *f;
    size_t n;
    int st;

    find_fgexctl();
    (void)snprintf(path, sizeof(path), "%s/stderr", dir);
    (void)snprintf(cmd, sizeof(cmd), "'%s' %s -c " URL " cert >/dev/null 2>'%s'", fgexctl_bin, args,
                   path);
    st = system(cmd);
    f = fopen(path, "r");
    cr_assert_not_null(f);
    n = fread(err, 1, errlen - 1, f);
    err[n] = '\0';
    (void)fclose(f);
    cr_assert(WIFEXITED(st), "fgexctl did not exit: %d", st);
    return WEXITSTATUS(st);
}

Test(cli_tls, fetch_reads_the_certificate, .init = setup, .fini = teardown)
{
    struct server s;
    struct cli_tls_cert c;
    char err[512];

    server_start(&s, tc1_pem, tk1_pem);
    cr_assert_eq(cli_tls_fetch("127.0.0.1", "47001", 2000, &c, err, sizeof(err)), 0, "%s", err);
    cr_assert_str_eq(c.fp, FP1);
    cr_assert_str_eq(c.pem, tc1_pem, "the PEM written is the server's certificate");
    cli_tls_cert_release(&c);
    cr_assert_eq(cli_tls_fetch("127.0.0.1", "47002", 2000, &c, err, sizeof(err)), -ECONNREFUSED);
    cr_assert(strstr(err, "cannot connect"), "%s", err);
    server_stop(&s);
}

Test(cli_tls, pin_on_first_use_then_refuse_a_changed_certificate, .init = setup, .fini = teardown)
{
    struct server s;
    char kh[128], fp[CLI_FP_SIZE], err[2048], pem[128], *text = NULL;
    unsigned line;
    size_t len;

    server_start(&s, tc1_pem, tk1_pem);
    cr_assert_eq(run_cli("", err, sizeof(err)), 0, "%s", err);
    cr_assert(strstr(err, "pinned its certificate") && strstr(err, FP1), "%s", err);
    (void)snprintf(kh, sizeof(kh), "%s/known_hosts", dir);
    cr_assert_eq(cli_pin_lookup(kh, "127.0.0.1:47001", fp, &line), 0);
    cr_assert_str_eq(fp, FP1);
    (void)snprintf(pem, sizeof(pem), "%s/certs/127.0.0.1_47001.pem", dir);
    cr_assert_eq(cli_pin_read_file(pem, 1 << 16, &text, &len), 0);
    cr_assert_str_eq(text, tc1_pem, "the nng connection's CA is the server's certificate");
    free(text);
    cr_assert_eq(run_cli("", err, sizeof(err)), 0, "known: %s", err);
    cr_assert_str_eq(err, "", "a known server is not announced again");
    server_stop(&s);

    /* The same address, another certificate: refused (exit 8) before any request is sent. */
    server_start(&s, tc2_pem, tk2_pem);
    cr_assert_eq(run_cli("", err, sizeof(err)), 8, "%s", err);
    cr_assert(strstr(err, "CHANGED") && strstr(err, "remove line 1 of"), "%s", err);
    cr_assert_eq(run_cli("--fingerprint " FP1, err, sizeof(err)), 8, "%s", err);
    /* The operator checked the new fingerprint: --fingerprint pins it. */
    cr_assert_eq(run_cli("--fingerprint " FP2, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(cli_pin_lookup(kh, "127.0.0.1:47001", fp, &line), 0);
    cr_assert_str_eq(fp, FP2);
    cr_assert_eq(run_cli("", err, sizeof(err)), 0, "%s", err);
    server_stop(&s);
}

Test(cli_tls, the_connection_itself_is_pinned, .init = setup, .fini = teardown)
{
    struct server s;
    char pem[128], err[2048], args[256];

    /* --ca with one self-signed certificate is a pin: nng refuses any other certificate in
     * its own handshake (no check of ours runs on this path). */
    (void)snprintf(pem, sizeof(pem), "%s/pin.pem", dir);
    cr_assert_eq(cli_pin_write_file(pem, tc1_pem, strlen(tc1_pem)), 0);
    (void)snprintf(args, sizeof(args), "--ca '%s'", pem);
    server_start(&s, tc2_pem, tk2_pem);
    cr_assert_eq(run_cli(args, err, sizeof(err)), 8, "%s", err);
    cr_assert(strstr(err, "was refused"), "%s", err);
    server_stop(&s);
    server_start(&s, tc1_pem, tk1_pem);
    cr_assert_eq(run_cli(args, err, sizeof(err)), 0, "%s", err);
    server_stop(&s);
}

Test(cli_tls, session_token_is_sent, .init = setup, .fini = teardown)
{
    struct server s;
    char path[256], err[2048];

    (void)snprintf(path, sizeof(path), "%s/sessions/127.0.0.1_47001", dir);
    cr_assert_eq(cli_pin_write_file(path, "tok-123\n", 8), 0);
    server_start(&s, tc1_pem, tk1_pem);
    cr_assert_eq(run_cli("", err, sizeof(err)), 0, "%s", err);
    server_stop(&s);
    cr_assert_str_eq(s.last_token, "tok-123");
}
