/* Unit tests for controld/ctl_auth.c and ctl_tls.c: yescrypt hashes, sessions and their expiry,
 * the growing failed-login lockout, the --allow list, and the generated certificate. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "controld/ctl_auth.h"
#include "controld/ctl_tls.h"

static struct ctl_auth *a;

static void setup(void)
{
    cr_assert_eq(ctl_auth_new(&a), 0);
}

static void teardown(void)
{
    ctl_auth_free(a);
    a = NULL;
}

static struct fgx_peer peer4(uint8_t a0, uint8_t a1, uint8_t a2, uint8_t a3)
{
    struct fgx_peer p = {.family = 4, .addr = {a0, a1, a2, a3}, .port = 40000};
    return p;
}

TestSuite(auth, .init = setup, .fini = teardown);

Test(auth, hash_verifies_right_password_only)
{
    char h[CTL_AUTH_HASH_MAX], h2[CTL_AUTH_HASH_MAX];

    cr_assert_eq(ctl_auth_hash("correct horse", h, sizeof(h)), 0);
    cr_assert(strncmp(h, "$y$", 3) == 0, "not a yescrypt hash: %s", h);
    cr_assert_null(strstr(h, "correct"), "the password leaks into the hash");
    cr_assert_eq(ctl_auth_verify("correct horse", h), 0);
    cr_assert_eq(ctl_auth_verify("correct hors", h), -EACCES);
    cr_assert_eq(ctl_auth_verify("Correct horse", h), -EACCES);
    cr_assert_eq(ctl_auth_verify("", h), -EACCES);
    /* A fresh salt each time. */
    cr_assert_eq(ctl_auth_hash("correct horse", h2, sizeof(h2)), 0);
    cr_assert_str_neq(h, h2);
    cr_assert_eq(ctl_auth_verify("correct horse", h2), 0);
}

Test(auth, no_password_set_verifies_nothing)
{
    cr_assert_not(ctl_auth_has_password(a));
    cr_assert_eq(ctl_auth_verify("anything1", ctl_auth_hash_get(a)), -EACCES);
    cr_assert_eq(ctl_auth_verify("anything1", "*0"), -EACCES);
    cr_assert_eq(ctl_auth_verify("anything1", NULL), -EACCES);
}

Test(auth, password_rules)
{
    char err[128];

    cr_assert_eq(ctl_auth_password_check("short", err, sizeof(err)), -EINVAL);
    cr_assert_not_null(strstr(err, "at least"));
    cr_assert_eq(ctl_auth_password_check("two\nlines", err, sizeof(err)), -EINVAL);
    cr_assert_eq(ctl_auth_password_check(NULL, err, sizeof(err)), -EINVAL);
    cr_assert_eq(ctl_auth_password_check("eight ch", err, sizeof(err)), 0);
}

Test(auth, who_needs_a_token)
{
    struct fgx_peer local = {.family = 0}, remote = peer4(10, 0, 0, 1);

    cr_assert(ctl_auth_enabled(a), "auth is on by default");
    cr_assert_not(ctl_auth_required(a, &local));
    cr_assert(ctl_auth_required(a, &remote));
    ctl_auth_local_set(a, true);
    cr_assert(ctl_auth_required(a, &local));
    ctl_auth_enabled_set(a, false);
    cr_assert_not(ctl_auth_required(a, &local));
    cr_assert_not(ctl_auth_required(a, &remote));
}

Test(auth, sessions_check_drop_and_others)
{
    char t1[CTL_AUTH_TOKEN_LEN + 1], t2[CTL_AUTH_TOKEN_LEN + 1], t3[CTL_AUTH_TOKEN_LEN + 1];

    cr_assert_eq(ctl_auth_session_new(a, 1000, t1), 0);
    cr_assert_eq(ctl_auth_session_new(a, 1000, t2), 0);
    cr_assert_eq(ctl_auth_session_new(a, 1000, t3), 0);
    cr_assert_eq(strlen(t1), CTL_AUTH_TOKEN_LEN);
    cr_assert_str_neq(t1, t2);
    cr_assert_eq(ctl_auth_session_count(a, 1000), 3);
    cr_assert_eq(ctl_auth_session_check(a, t1, 2000), 0);
    cr_assert_eq(ctl_auth_session_check(a, t2, 2000), 0);
    /* A token one character off, too short, or absent is refused. */
    char bad[CTL_AUTH_TOKEN_LEN + 1];
    memcpy(bad, t1, sizeof(bad));
    bad[10] = bad[10] == 'a' ? 'b' : 'a';
    cr_assert_eq(ctl_auth_session_check(a, bad, 2000), -EACCES);
    cr_assert_eq(ctl_auth_session_check(a, "abc", 2000), -EACCES);
    cr_assert_eq(ctl_auth_session_check(a, NULL, 2000), -EACCES);
    cr_assert_eq(ctl_auth_session_check(a, "", 2000), -EACCES);

    cr_assert_eq(ctl_auth_session_drop(a, t3), 0);
    cr_assert_eq(ctl_auth_session_check(a, t3, 2000), -EACCES);
    cr_assert_eq(ctl_auth_session_drop(a, t3), -ENOENT);

    /* passwd --expire-sessions: only the caller's own session stays. */
    cr_assert_eq(ctl_auth_session_drop_others(a, t2), 1);
    cr_assert_eq(ctl_auth_session_check(a, t1, 2000), -EACCES);
    cr_assert_eq(ctl_auth_session_check(a, t2, 2000), 0);
    cr_assert_eq(ctl_auth_session_drop_others(a, NULL), 1);
    cr_assert_eq(ctl_auth_session_count(a, 2000), 0);
}

Test(auth, sessions_expire_when_idle)
{
    char t[CTL_AUTH_TOKEN_LEN + 1];
    uint64_t idle = CTL_AUTH_SESSION_IDLE_MS;

    cr_assert_eq(ctl_auth_session_new(a, 5000, t), 0);
    /* Use restarts the idle timer. */
    cr_assert_eq(ctl_auth_session_check(a, t, 5000 + idle - 1), 0);
    cr_assert_eq(ctl_auth_session_check(a, t, 5000 + 2 * idle - 2), 0);
    cr_assert_eq(ctl_auth_session_check(a, t, 5000 + 3 * idle - 2), -EACCES);
    /* Once expired it stays gone, even if the clock were to read earlier. */
    cr_assert_eq(ctl_auth_session_check(a, t, 5000 + 2 * idle - 1), -EACCES);
    cr_assert_eq(ctl_auth_session_count(a, 5000 + 2 * idle), 0);
}

Test(auth, full_table_evicts_least_recently_used)
{
    char first[CTL_AUTH_TOKEN_LEN + 1], second[CTL_AUTH_TOKEN_LEN + 1], t[CTL_AUTH_TOKEN_LEN + 1];

    cr_assert_eq(ctl_auth_session_new(a, 100, first), 0);
    cr_assert_eq(ctl_auth_session_new(a, 101, second), 0);
    for (int i = 2; i < CTL_AUTH_SESSIONS_MAX; i++)
        cr_assert_eq(ctl_auth_session_new(a, 200 + (uint64_t)i, t), 0);
    cr_assert_eq(ctl_auth_session_check(a, first, 1000), 0); /* first is now the newest */
    cr_assert_eq(ctl_auth_session_new(a, 1001, t), 0);
    cr_assert_eq(ctl_auth_session_check(a, second, 1002), -EACCES);
    cr_assert_eq(ctl_auth_session_check(a, first, 1002), 0);
    cr_assert_eq(ctl_auth_session_check(a, t, 1002), 0);
    cr_assert_eq(ctl_auth_session_count(a, 1002), CTL_AUTH_SESSIONS_MAX);
}

Test(auth, failed_logins_grow_the_delay_per_address)
{
    struct fgx_peer p = peer4(10, 0, 0, 5), q = peer4(10, 0, 0, 6);
    uint64_t d1, d2, d3, now = 1000000;

    cr_assert_eq(ctl_auth_delay_left(a, &p, now), 0);
    d1 = ctl_auth_login_failed(a, &p, now);
    cr_assert_eq(d1, CTL_AUTH_DELAY_FIRST_MS);
    cr_assert_eq(ctl_auth_delay_left(a, &p, now), d1);
    cr_assert_eq(ctl_auth_delay_left(a, &p, now + 400), d1 - 400);
    cr_assert_eq(ctl_auth_delay_left(a, &q, now), 0, "another address is not slowed down");
    now += d1;
    cr_assert_eq(ctl_auth_delay_left(a, &p, now), 0);
    d2 = ctl_auth_login_failed(a, &p, now);
    now += d2;
    d3 = ctl_auth_login_failed(a, &p, now);
    cr_assert_eq(d2, 2 * d1);
    cr_assert_eq(d3, 4 * d1);
    for (int i = 0; i < 20; i++)
        d3 = ctl_auth_login_failed(a, &p, now);
    cr_assert_eq(d3, CTL_AUTH_DELAY_MAX_MS, "the delay is capped");
    /* Another port of the same host is the same peer. */
    p.port = 1;
    cr_assert_gt(ctl_auth_delay_left(a, &p, now), 0);
    ctl_auth_login_ok(a, &p);
    cr_assert_eq(ctl_auth_delay_left(a, &p, now), 0);
    cr_assert_eq(ctl_auth_login_failed(a, &p, now), CTL_AUTH_DELAY_FIRST_MS, "success resets");
}

Test(auth, many_failing_addresses_stay_bounded)
{
    uint64_t now = 1000;

    for (int i = 0; i < CTL_AUTH_PEERS_MAX + 10; i++) {
        struct fgx_peer p = peer4(10, 1, (uint8_t)(i >> 8), (uint8_t)i);
        ctl_auth_login_failed(a, &p, now + (uint64_t)i);
    }
    /* The oldest were forgotten to make room; the newest are remembered. */
    struct fgx_peer last =
        peer4(10, 1, (CTL_AUTH_PEERS_MAX + 9) >> 8, (uint8_t)(CTL_AUTH_PEERS_MAX + 9));
    struct fgx_peer first = peer4(10, 1, 0, 0);
    cr_assert_gt(ctl_auth_delay_left(a, &last, now + CTL_AUTH_PEERS_MAX), 0);
    cr_assert_eq(ctl_auth_delay_left(a, &first, now + CTL_AUTH_PEERS_MAX), 0);
}

Test(auth, allow_list_matching)
{
    struct fgx_peer in = peer4(10, 60, 1, 7), out = peer4(10, 61, 0, 1), local = {.family = 0};
    struct fgx_peer v6 = {.family = 6, .addr = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9}};
    struct fgx_peer v6out = v6;

    v6out.addr[1] = 1;
    cr_assert(ctl_auth_allowed(a, &out), "no --allow: everyone may connect");
    cr_assert_eq(ctl_auth_allow_add(a, "10.60.0.0/16"), 0);
    cr_assert_eq(ctl_auth_allow_add(a, "fd00::/64"), 0);
    cr_assert(ctl_auth_allowed(a, &in));
    cr_assert_not(ctl_auth_allowed(a, &out));
    cr_assert(ctl_auth_allowed(a, &v6));
    cr_assert_not(ctl_auth_allowed(a, &v6out));
    cr_assert(ctl_auth_allowed(a, &local), "the local socket is not a network peer");
    cr_assert_eq(ctl_auth_allow_add(a, "10.60.0.1/16"), -EINVAL, "host bits set");
    cr_assert_eq(ctl_auth_allow_add(a, "not-an-address"), -EINVAL);
    cr_assert_eq(ctl_auth_allow_add(a, ""), -EINVAL);
    /* A bare address allows that one host. */
    cr_assert_eq(ctl_auth_allow_add(a, "10.61.0.2"), 0);
    cr_assert_not(ctl_auth_allowed(a, &out));
    out.addr[3] = 2;
    cr_assert(ctl_auth_allowed(a, &out));
}

/* An IPv4 peer of a dual-stack listener is reported as IPv4, so an --allow written the way
 * such a socket shows it (::ffff:a.b.c.d) must be the IPv4 prefix, or it never matches. */
Test(auth, allow_list_v4mapped)
{
    struct fgx_peer in = peer4(10, 62, 3, 4), out = peer4(10, 63, 0, 1);

    cr_assert_eq(ctl_auth_allow_add(a, "::ffff:10.62.0.0/112"), 0);
    cr_assert(ctl_auth_allowed(a, &in));
    cr_assert_not(ctl_auth_allowed(a, &out));
    cr_assert_eq(ctl_auth_allow_add(a, "::ffff:10.63.0.1"), 0);
    cr_assert(ctl_auth_allowed(a, &out));
}

Test(auth, peer_format)
{
    struct fgx_peer p = peer4(192, 0, 2, 1), l = {.family = 0};
    struct fgx_peer v6 = {.family = 6, .addr = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}};
    char buf[64];

    ctl_auth_peer_format(&p, buf, sizeof(buf));
    cr_assert_str_eq(buf, "192.0.2.1");
    ctl_auth_peer_format(&v6, buf, sizeof(buf));
    cr_assert_str_eq(buf, "[fd00::1]");
    ctl_auth_peer_format(&l, buf, sizeof(buf));
    cr_assert_str_eq(buf, "local");
}

/* ---- certificate ---- */

static void rm_tree(const char *dir)
{
    char path[256];

    snprintf(path, sizeof(path), "%s/" CTL_TLS_CERT_FILE, dir);
    unlink(path);
    snprintf(path, sizeof(path), "%s/" CTL_TLS_KEY_FILE, dir);
    unlink(path);
    rmdir(dir);
}

Test(auth, certificate_created_once_and_fingerprint_stable)
{
    char dir[64] = "/tmp/fgx-test-tls-XXXXXX", path[256];
    struct ctl_tls t1, t2;
    struct stat st;

    cr_assert_not_null(mkdtemp(dir));
    cr_assert_eq(ctl_tls_load(dir, NULL, NULL, &t1), 0);
    cr_assert_eq(strlen(t1.fingerprint), CTL_TLS_FINGERPRINT_LEN);
    for (int i = 0; i < 32; i++) {
        cr_assert(strchr("0123456789ABCDEF", t1.fingerprint[3 * i]) != NULL);
        if (i < 31)
            cr_assert_eq(t1.fingerprint[3 * i + 2], ':');
    }
    snprintf(path, sizeof(path), "%s/" CTL_TLS_KEY_FILE, dir);
    cr_assert_eq(stat(path, &st), 0);
    cr_assert_eq(st.st_mode & 0777, 0600, "key mode %o", st.st_mode & 0777);
    /* The second start reuses them. */
    cr_assert_eq(ctl_tls_load(dir, NULL, NULL, &t2), 0);
    cr_assert_str_eq(t1.fingerprint, t2.fingerprint);
    ctl_tls_release(&t2);
    /* --cert/--key naming the same files work; a mismatched pair is refused. */
    char cpath[256];
    snprintf(cpath, sizeof(cpath), "%s/" CTL_TLS_CERT_FILE, dir);
    cr_assert_eq(ctl_tls_load(NULL, cpath, path, &t2), 0);
    cr_assert_str_eq(t1.fingerprint, t2.fingerprint);
    ctl_tls_release(&t2);
    {
        char *c2, *k2, other[256];
        FILE *f;

        cr_assert_eq(ctl_tls_generate(&c2, &k2), 0);
        snprintf(other, sizeof(other), "%s/other-key.pem", dir);
        f = fopen(other, "w");
        cr_assert_not_null(f);
        fputs(k2, f);
        fclose(f);
        cr_assert_eq(ctl_tls_load(NULL, cpath, other, &t2), -EINVAL);
        cr_assert_null(t2.cert_pem);
        unlink(other);
        free(c2);
        free(k2);
    }
    cr_assert_eq(ctl_tls_load(NULL, cpath, NULL, &t2), -EINVAL, "--cert without --key");
    ctl_tls_release(&t1);
    rm_tree(dir);
}

Test(auth, fingerprint_of_garbage_is_refused)
{
    char fp[CTL_TLS_FINGERPRINT_LEN + 1];

    cr_assert_eq(ctl_tls_fingerprint("-----BEGIN CERTIFICATE-----\nAAAA\n", fp, sizeof(fp)),
                 -EINVAL);
    cr_assert_eq(ctl_tls_fingerprint("", fp, sizeof(fp)), -EINVAL);
}

/* ---- the request gate, through ctl_rpc against a real store ---- */

#include "control.pb-c.h"
#include "controld/ctl_rpc.h"

static char rdir[64];
static struct ctl_ctx ctx;
static Fgx__Ctl__Reply *reply;
static const struct fgx_peer remote = {.family = 4, .addr = {10, 0, 0, 9}, .port = 5555};
static const struct fgx_peer local = {.family = 0};

static void rpc_setup(void)
{
    snprintf(rdir, sizeof(rdir), "/tmp/fgx-test-authrpc-XXXXXX");
    cr_assert_not_null(mkdtemp(rdir));
    memset(&ctx, 0, sizeof(ctx));
    cr_assert_eq(ctl_store_open(rdir, 0, &ctx.store), 0);
    cr_assert_eq(ctl_auth_new(&ctx.auth), 0);
    cr_assert_eq(ctl_auth_load(ctx.auth, ctx.store), 0);
    ctx.threads = 1;
}

static void rpc_teardown(void)
{
    char path[128];

    if (reply)
        fgx__ctl__reply__free_unpacked(reply, NULL);
    reply = NULL;
    ctl_ctx_release(&ctx);
    ctl_auth_free(ctx.auth);
    ctl_store_close(ctx.store);
    snprintf(path, sizeof(path), "%s/data.mdb", rdir);
    unlink(path);
    snprintf(path, sizeof(path), "%s/lock.mdb", rdir);
    unlink(path);
    rmdir(rdir);
}

static int call_from(const struct fgx_peer *peer, Fgx__Ctl__Request *q)
{
    size_t len = fgx__ctl__request__get_packed_size(q), rlen;
    uint8_t *buf = malloc(len ? len : 1);
    void *rbuf;

    if (reply)
        fgx__ctl__reply__free_unpacked(reply, NULL);
    fgx__ctl__request__pack(q, buf);
    cr_assert_eq(ctl_rpc_handle_from(&ctx, peer, buf, len, &rbuf, &rlen), 0);
    free(buf);
    reply = fgx__ctl__reply__unpack(NULL, rlen, rbuf);
    free(rbuf);
    cr_assert_not_null(reply);
    cr_assert((reply->code == 0) == (reply->error == NULL), "an error has a message");
    return reply->code;
}

static int status_as(const struct fgx_peer *peer, const char *token)
{
    Fgx__Ctl__Request q = FGX__CTL__REQUEST__INIT;
    Fgx__Ctl__Empty e = FGX__CTL__EMPTY__INIT;

    q.req_case = FGX__CTL__REQUEST__REQ_STATUS;
    q.status = &e;
    q.token = (char *)token;
    return call_from(peer, &q);
}

/* Returns the code; a new token is copied into tok (when not NULL). */
static int login_as(const struct fgx_peer *peer, const char *pw, char *tok)
{
    Fgx__Ctl__Request q = FGX__CTL__REQUEST__INIT;
    Fgx__Ctl__Login l = FGX__CTL__LOGIN__INIT;
    int code;

    q.req_case = FGX__CTL__REQUEST__REQ_LOGIN;
    q.login = &l;
    l.password = (char *)pw;
    code = call_from(peer, &q);
    if (code == 0 && tok) {
        cr_assert_not_null(reply->token);
        snprintf(tok, CTL_AUTH_TOKEN_LEN + 1, "%s", reply->token);
    }
    return code;
}

static int passwd_as(const struct fgx_peer *peer, const char *token, const char *pw, bool expire)
{
    Fgx__Ctl__Request q = FGX__CTL__REQUEST__INIT;
    Fgx__Ctl__Passwd p = FGX__CTL__PASSWD__INIT;

    q.req_case = FGX__CTL__REQUEST__REQ_PASSWD;
    q.passwd = &p;
    q.token = (char *)token;
    p.password = (char *)pw;
    p.has_expire_sessions = 1;
    p.expire_sessions = expire;
    return call_from(peer, &q);
}

static int auth_set_as(const struct fgx_peer *peer, const char *token, bool on)
{
    Fgx__Ctl__Request q = FGX__CTL__REQUEST__INIT;
    Fgx__Ctl__AuthSet s = FGX__CTL__AUTH_SET__INIT;

    q.req_case = FGX__CTL__REQUEST__REQ_AUTH_SET;
    q.auth_set = &s;
    q.token = (char *)token;
    s.enabled = on;
    return call_from(peer, &q);
}

TestSuite(auth_rpc, .init = rpc_setup, .fini = rpc_teardown);

Test(auth_rpc, remote_needs_a_session_local_does_not)
{
    char tok[CTL_AUTH_TOKEN_LEN + 1];

    cr_assert_eq(status_as(&local, NULL), FGX__CTL__CODE__CODE_OK);
    cr_assert(reply->has_auth_enabled && reply->auth_enabled);
    cr_assert_eq(status_as(&remote, NULL), FGX__CTL__CODE__CODE_AUTH);
    cr_assert_not_null(strstr(reply->error, "login"));
    /* No password yet: nobody can log in remotely, and the reply says how to set one. */
    cr_assert_eq(login_as(&remote, "whatever123", NULL), FGX__CTL__CODE__CODE_AUTH);
    cr_assert_not_null(strstr(reply->error, "no password is set"));
    cr_assert_eq(passwd_as(&remote, NULL, "sekrit-pass", false), FGX__CTL__CODE__CODE_AUTH,
                 "a remote peer cannot set the first password");
    cr_assert_eq(passwd_as(&local, NULL, "sekrit-pass", false), FGX__CTL__CODE__CODE_OK);

    cr_assert_eq(login_as(&remote, "wrong-pass", NULL), FGX__CTL__CODE__CODE_AUTH);
    cr_assert_str_eq(reply->error, "wrong password");
    /* Locked out for a while: even the right password is not checked. */
    cr_assert_eq(login_as(&remote, "sekrit-pass", NULL), FGX__CTL__CODE__CODE_AUTH);
    cr_assert_not_null(strstr(reply->error, "try again"));
    /* Another address is not locked out. */
    struct fgx_peer other = remote;
    other.addr[3] = 10;
    cr_assert_eq(login_as(&other, "sekrit-pass", tok), FGX__CTL__CODE__CODE_OK);
    cr_assert_eq(strlen(tok), CTL_AUTH_TOKEN_LEN);
    cr_assert_eq(status_as(&other, tok), FGX__CTL__CODE__CODE_OK);
    cr_assert_eq(
        status_as(&other, "0000000000000000000000000000000000000000000000000000000000000000"),
        FGX__CTL__CODE__CODE_AUTH);
    cr_assert_not_null(strstr(reply->error, "expired or was logged out"));
}

Test(auth_rpc, passwd_with_and_without_expiring_sessions)
{
    char a1[CTL_AUTH_TOKEN_LEN + 1], a2[CTL_AUTH_TOKEN_LEN + 1];
    struct fgx_peer p2 = remote;

    p2.addr[3] = 20;
    cr_assert_eq(passwd_as(&local, NULL, "first-pass", false), 0);
    cr_assert_eq(login_as(&remote, "first-pass", a1), 0);
    cr_assert_eq(login_as(&p2, "first-pass", a2), 0);
    cr_assert_eq(passwd_as(&remote, a1, "short", false), FGX__CTL__CODE__CODE_INVALID);
    cr_assert_eq(passwd_as(&remote, a1, "second-pass", false), 0);
    cr_assert_eq(status_as(&p2, a2), 0, "without --expire-sessions the others stay");
    cr_assert_eq(login_as(&p2, "first-pass", NULL), FGX__CTL__CODE__CODE_AUTH);
    cr_assert_eq(passwd_as(&remote, a1, "third-pass", true), 0);
    cr_assert_eq(status_as(&p2, a2), FGX__CTL__CODE__CODE_AUTH);
    cr_assert_eq(status_as(&remote, a1), 0, "the caller's own session stays");
    /* The hash is what the store holds, never the password. */
    struct ctl_auth *fresh;
    cr_assert_eq(ctl_auth_new(&fresh), 0);
    cr_assert_eq(ctl_auth_load(fresh, ctx.store), 0);
    cr_assert_eq(ctl_auth_verify("third-pass", ctl_auth_hash_get(fresh)), 0);
    cr_assert_null(strstr(ctl_auth_hash_get(fresh), "third-pass"));
    ctl_auth_free(fresh);
}

Test(auth_rpc, auth_off_and_on_persists_and_logout)
{
    char tok[CTL_AUTH_TOKEN_LEN + 1];
    Fgx__Ctl__Request q = FGX__CTL__REQUEST__INIT;
    Fgx__Ctl__Empty e = FGX__CTL__EMPTY__INIT;
    struct ctl_auth *fresh;

    cr_assert_eq(auth_set_as(&local, NULL, true), FGX__CTL__CODE__CODE_INVALID,
                 "no turning auth on without a password");
    cr_assert_eq(auth_set_as(&local, NULL, false), 0);
    cr_assert(reply->has_auth_enabled && !reply->auth_enabled);
    cr_assert_eq(status_as(&remote, NULL), 0, "auth off: remote trusted");
    cr_assert_eq(ctl_auth_new(&fresh), 0);
    cr_assert_eq(ctl_auth_load(fresh, ctx.store), 0);
    cr_assert_not(ctl_auth_enabled(fresh), "the switch survives a restart");
    ctl_auth_free(fresh);
    /* While auth is off, a remote peer can neither set a password nor turn auth on: it could
     * lock the team out (issue 24). The local socket can. */
    cr_assert_eq(passwd_as(&remote, NULL, "remote-set-pw", false), FGX__CTL__CODE__CODE_INVALID);
    cr_assert_not_null(strstr(reply->error, "local socket"), "%s", reply->error);
    cr_assert_eq(passwd_as(&local, NULL, "remote-set-pw", false), 0);
    cr_assert_eq(auth_set_as(&remote, NULL, true), FGX__CTL__CODE__CODE_INVALID);
    cr_assert_not_null(strstr(reply->error, "auth on: refused over the network while auth is off"),
                       "%s", reply->error);
    cr_assert_eq(status_as(&remote, NULL), 0, "the refusal left auth off");
    cr_assert_eq(auth_set_as(&remote, NULL, false), 0, "turning it off again is harmless");
    cr_assert_eq(auth_set_as(&local, NULL, true), 0);
    cr_assert_eq(status_as(&remote, NULL), FGX__CTL__CODE__CODE_AUTH);
    cr_assert_eq(login_as(&remote, "remote-set-pw", tok), 0);
    cr_assert_eq(status_as(&remote, tok), 0);
    q.req_case = FGX__CTL__REQUEST__REQ_LOGOUT;
    q.logout = &e;
    q.token = tok;
    cr_assert_eq(call_from(&remote, &q), 0);
    cr_assert_eq(status_as(&remote, tok), FGX__CTL__CODE__CODE_AUTH);
    /* Once on, a logged-in remote client may change the password. */
    cr_assert_eq(login_as(&remote, "remote-set-pw", tok), 0);
    cr_assert_eq(passwd_as(&remote, tok, "remote-set-pw2", false), 0);
}

Test(auth_rpc, sessions_outlive_a_restart_stored_hashed)
{
    char tok[CTL_AUTH_TOKEN_LEN + 1], gone[CTL_AUTH_TOKEN_LEN + 1];
    Fgx__Ctl__Request q = FGX__CTL__REQUEST__INIT;
    Fgx__Ctl__Empty e = FGX__CTL__EMPTY__INIT;
    struct ctl_auth *fresh;
    struct ctl_txn *t;
    void *rec = NULL;
    size_t len = 0;

    cr_assert_eq(passwd_as(&local, NULL, "restart-pass", false), 0);
    cr_assert_eq(login_as(&remote, "restart-pass", tok), 0);
    cr_assert_eq(login_as(&remote, "restart-pass", gone), 0);
    q.req_case = FGX__CTL__REQUEST__REQ_LOGOUT;
    q.logout = &e;
    q.token = gone;
    cr_assert_eq(call_from(&remote, &q), 0);
    /* What the store holds: hashes, never a token (in hex or in bytes). */
    cr_assert_eq(ctl_txn_begin(ctx.store, false, &t), 0);
    cr_assert_eq(ctl_store_bytes_get(t, "sessions", &rec, &len), 0);
    ctl_txn_abort(t);
    cr_assert_eq(len, 3 + 40, "one live session stored: %zu bytes", len);
    cr_assert_null(memmem(rec, len, tok, 16));
    {
        uint8_t raw[8];
        for (int i = 0; i < 8; i++)
            sscanf(tok + 2 * i, "%2hhx", &raw[i]);
        cr_assert_null(memmem(rec, len, raw, sizeof(raw)));
    }
    free(rec);
    /* A restart: a new auth loaded from the same store knows the session, not the logout. */
    cr_assert_eq(ctl_auth_new(&fresh), 0);
    cr_assert_eq(ctl_auth_load(fresh, ctx.store), 0);
    ctl_auth_free(ctx.auth);
    ctx.auth = fresh;
    cr_assert_eq(status_as(&remote, tok), 0, "the session outlived the restart");
    cr_assert_eq(status_as(&remote, gone), FGX__CTL__CODE__CODE_AUTH, "a logout stays");
}

Test(auth, stored_sessions_keep_their_expiry)
{
    struct ctl_auth *sa, *b;
    char t1[CTL_AUTH_TOKEN_LEN + 1], t2[CTL_AUTH_TOKEN_LEN + 1];
    uint8_t buf[CTL_AUTH_SESSIONS_REC_MAX];
    const uint64_t hour = 3600ull * 1000, real = 1800000000000ull;
    size_t len;

    cr_assert_eq(ctl_auth_new(&sa), 0);
    cr_assert_eq(ctl_auth_new(&b), 0);
    cr_assert_eq(ctl_auth_session_new(sa, 1000, t1), 0);
    cr_assert_eq(ctl_auth_session_new(sa, 1000 + 10 * hour, t2), 0);
    cr_assert_eq(ctl_auth_sessions_encode(sa, 1000 + 10 * hour, real, buf, 10), 0, "too small");
    len = ctl_auth_sessions_encode(sa, 1000 + 10 * hour, real, buf, sizeof(buf));
    cr_assert_eq(len, 3 + 2 * 40);
    cr_assert_null(memmem(buf, len, t1, CTL_AUTH_TOKEN_LEN));
    /* Read back one hour later by the wall clock, on another monotonic clock (a reboot):
     * t1 was idle 10 h then, 11 h now, so it has an hour left; t2 has eleven. */
    cr_assert_eq(ctl_auth_sessions_decode(b, buf, len, 5, real + hour), 2);
    cr_assert(ctl_auth_session_alive(b, t1, 5));
    cr_assert(ctl_auth_session_alive(b, t2, 5));
    cr_assert_not(ctl_auth_session_alive(b, t1, 5 + hour + 1000), "t1's 12 h ran out");
    cr_assert(ctl_auth_session_alive(b, t2, 5 + hour + 1000));
    /* Two hours later by the wall clock: t1 expired while controld was down. */
    cr_assert_eq(ctl_auth_sessions_decode(b, buf, len, 5, real + 2 * hour + 1), 1);
    cr_assert_not(ctl_auth_session_alive(b, t1, 5));
    cr_assert(ctl_auth_session_alive(b, t2, 5));
    /* Not such a record: refused, nothing half-read. */
    buf[0] = 99;
    cr_assert_eq(ctl_auth_sessions_decode(b, buf, len, 5, real), -EINVAL);
    buf[0] = 1;
    cr_assert_eq(ctl_auth_sessions_decode(b, buf, len - 1, 5, real), -EINVAL);
    ctl_auth_free(sa);
    ctl_auth_free(b);
}

Test(auth_rpc, cert_needs_no_session)
{
    Fgx__Ctl__Request q = FGX__CTL__REQUEST__INIT;
    Fgx__Ctl__Empty e = FGX__CTL__EMPTY__INIT;

    q.req_case = FGX__CTL__REQUEST__REQ_CERT;
    q.cert = &e;
    cr_assert_eq(call_from(&remote, &q), FGX__CTL__CODE__CODE_NOT_FOUND, "no TLS listener");
    ctl_auth_fingerprint_set(ctx.auth, "AB:CD");
    cr_assert_eq(call_from(&remote, &q), 0);
    cr_assert_str_eq(reply->fingerprint, "AB:CD");
}

Test(auth_rpc, config_import_with_bad_regex_changes_nothing)
{
    Fgx__Ctl__Request q = FGX__CTL__REQUEST__INIT;
    Fgx__Ctl__Config cfg = FGX__CTL__CONFIG__INIT;
    Fgx__Ctl__Service s = FGX__CTL__SERVICE__INIT, *sp = &s;
    Fgx__Ctl__Filter f = FGX__CTL__FILTER__INIT, *fp = &f;
    Fgx__Ctl__Empty e = FGX__CTL__EMPTY__INIT;

    s.id = 4;
    s.name = "web";
    s.proto = FGX__CTL__PROTO__PROTO_TCP;
    s.ip = "";
    s.port = 80;
    s.active = true;
    f.id = 7;
    f.service_id = 4;
    f.regex = "(oops";
    f.active = true;
    cfg.n_services = 1;
    cfg.services = &sp;
    cfg.n_filters = 1;
    cfg.filters = &fp;
    cfg.has_auth_enabled = 1;
    cfg.auth_enabled = false;
    q.req_case = FGX__CTL__REQUEST__REQ_CONFIG_IMPORT;
    q.config_import = &cfg;
    cr_assert_eq(call_from(&local, &q), FGX__CTL__CODE__CODE_INVALID);
    cr_assert_not_null(strstr(reply->error, "filter 7"), "%s", reply->error);
    cr_assert(ctl_auth_enabled(ctx.auth), "a refused import leaves the switch alone");
    f.regex = "fine";
    cr_assert_eq(call_from(&local, &q), 0, "%s", reply->error ? reply->error : "");
    /* A backup taken with auth off does not turn it off here, and the reply says so. */
    cr_assert(ctl_auth_enabled(ctx.auth), "an import changed the auth switch");
    cr_assert(reply->has_auth_not_imported && reply->auth_not_imported);
    cr_assert(reply->has_auth_enabled && reply->auth_enabled);
    q.req_case = FGX__CTL__REQUEST__REQ_CONFIG_EXPORT;
    q.config_export = &e;
    cr_assert_eq(call_from(&local, &q), 0);
    cr_assert_not_null(reply->config);
    cr_assert_eq(reply->config->n_services, 1);
    cr_assert_eq(reply->config->services[0]->id, 4);
    cr_assert_eq(reply->config->n_filters, 1);
    cr_assert_str_eq(reply->config->filters[0]->regex, "fine");
    cr_assert(reply->config->has_auth_enabled && reply->config->auth_enabled);
}
