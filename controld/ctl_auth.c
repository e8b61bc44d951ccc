/* controld access stage: password hashes (libcrypt's yescrypt), session tokens, the per-address
 * failed-login lockout and the --allow list. It only decides; ctl_rpc asks it about each request
 * and stores what must survive a restart (the hash, the switch) through ctl_store. */
#include "controld/ctl_auth.h"

#include <arpa/inet.h>
#include <crypt.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include <mbedtls/sha256.h>

#include "controld/ctl_config.h"
#include "controld/ctl_store.h"
#include "fgx/log.h"
#include "fgx/mbed_compat.h"

#define TOKEN_BYTES 32
#define HASH_KEY "password_hash"

/* The sessions as the store keeps them (ctl_auth_sessions_encode()): only the tokens' hashes
 * and when each was last used (unix ms), so that a copy of the store logs nobody in. */
#define SESSIONS_KEY "sessions"
#define SESSIONS_VERSION 1
#define SESSION_REC (32 + 8)
/* An idle timer restarted by a request is written back at most this often: the expiry of a
 * session that outlives a restart is off by no more. */
#define SESSION_SAVE_MS 60000

struct session {
    uint8_t hash[32]; /* SHA-256 of the token: a memory dump gives no usable token */
    uint64_t last_use_ms;
    uint64_t saved_use_ms; /* last_use_ms as the store has it */
    bool used;
};

struct fail {
    int family;
    uint8_t addr[16];
    unsigned count;
    uint64_t until_ms; /* no password is checked for this address before then */
    uint64_t last_ms;
    bool used;
};

struct ctl_auth {
    char hash[CTL_AUTH_HASH_MAX];
    bool enabled;
    bool local_required;
    struct session sessions[CTL_AUTH_SESSIONS_MAX];
    struct fail fails[CTL_AUTH_PEERS_MAX];
    struct fgx_cidr allow[CTL_AUTH_ALLOW_MAX];
    size_t nallow;
    char fingerprint[128];
    struct ctl_store *st; /* where sessions are kept across restarts (ctl_auth_load), or NULL */
};

int ctl_auth_new(struct ctl_auth **out)
{
    struct ctl_auth *a = calloc(1, sizeof(*a));

    if (!a)
        return -ENOMEM;
    a->enabled = true;
    *out = a;
    return 0;
}

void ctl_auth_free(struct ctl_auth *a)
{
    if (!a)
        return;
    /* Hashes of live tokens and of the password: no reason to leave them in freed memory. */
    explicit_bzero(a, sizeof(*a));
    free(a);
}

/* ---- password hashing ---- */

int ctl_auth_password_check(const char *password, char *err, size_t errlen)
{
    size_t len = password ? strlen(password) : 0;

    if (len < CTL_AUTH_PASSWORD_MIN) {
        snprintf(err, errlen, "a password has at least %d characters", CTL_AUTH_PASSWORD_MIN);
        return -EINVAL;
    }
    if (len > CTL_AUTH_PASSWORD_MAX) {
        snprintf(err, errlen, "a password has at most %d characters", CTL_AUTH_PASSWORD_MAX);
        return -EINVAL;
    }
    if (strpbrk(password, "\r\n")) {
        snprintf(err, errlen, "a password cannot contain a line break");
        return -EINVAL;
    }
    return 0;
}

int ctl_auth_hash(const char *password, char *out, size_t len)
{
    char salt[CRYPT_GENSALT_OUTPUT_SIZE];
    struct crypt_data *cd = NULL;
    const char *h;
    int rv = -EIO;

    /* NULL random bytes: libxcrypt draws the salt from the kernel itself. */
    if (!crypt_gensalt_rn("$y$", 0, NULL, 0, salt, sizeof(salt))) {
        rv = -errno;
        fgx_err("auth: cannot make a yescrypt salt: %s", strerror(errno));
        return rv ? rv : -EIO;
    }
    cd = calloc(1, sizeof(*cd)); /* ~32 KiB: not for the stack */
    if (!cd)
        return -ENOMEM;
    h = crypt_r(password, salt, cd);
    if (!h || h[0] == '*') {
        fgx_err("auth: yescrypt failed: %s", strerror(errno));
        goto out;
    }
    if (snprintf(out, len, "%s", h) >= (int)len) {
        rv = -ENOSPC;
        goto out;
    }
    rv = 0;
out:
    explicit_bzero(cd, sizeof(*cd));
    free(cd);
    return rv;
}

static bool ct_equal(const void *a, const void *b, size_t n)
{
    const volatile uint8_t *x = a, *y = b;
    uint8_t d = 0;

    for (size_t i = 0; i < n; i++)
        d |= x[i] ^ y[i];
    return d == 0;
}

int ctl_auth_verify(const char *password, const char *hash)
{
    struct crypt_data *cd;
    const char *h;
    int rv = -EACCES;

    if (!password || !hash || hash[0] != '$')
        return -EACCES;
    cd = calloc(1, sizeof(*cd));
    if (!cd)
        return -ENOMEM;
    h = crypt_r(password, hash, cd);
    if (h && h[0] != '*' && strlen(h) == strlen(hash) && ct_equal(h, hash, strlen(hash)))
        rv = 0;
    explicit_bzero(cd, sizeof(*cd));
    free(cd);
    return rv;
}

void ctl_auth_hash_set(struct ctl_auth *a, const char *hash)
{
    snprintf(a->hash, sizeof(a->hash), "%s", hash ? hash : "");
}

const char *ctl_auth_hash_get(const struct ctl_auth *a)
{
    return a->hash;
}

bool ctl_auth_has_password(const struct ctl_auth *a)
{
    return a->hash[0] != '\0';
}

void ctl_auth_enabled_set(struct ctl_auth *a, bool enabled)
{
    a->enabled = enabled;
}

bool ctl_auth_enabled(const struct ctl_auth *a)
{
    return a->enabled;
}

void ctl_auth_local_set(struct ctl_auth *a, bool required)
{
    a->local_required = required;
}

bool ctl_auth_required(const struct ctl_auth *a, const struct fgx_peer *peer)
{
    if (!a->enabled)
        return false;
    return peer->family != 0 || a->local_required;
}

/* ---- persistence ---- */

static void sessions_load(struct ctl_auth *a);

int ctl_auth_load(struct ctl_auth *a, struct ctl_store *st)
{
    struct ctl_txn *t;
    bool enabled = true;
    int rv = ctl_txn_begin(st, false, &t);

    if (rv < 0)
        return rv;
    rv = ctl_store_text_get(t, HASH_KEY, a->hash, sizeof(a->hash));
    if (rv == 0)
        rv = ctl_config_auth_enabled(t, &enabled);
    ctl_txn_abort(t);
    if (rv < 0) {
        a->hash[0] = '\0';
        fgx_err("auth: cannot read the password settings: %s", ctl_store_strerror(rv));
        return rv;
    }
    a->enabled = enabled;
    a->st = st;
    sessions_load(a);
    return 0;
}

int ctl_auth_password_save(struct ctl_auth *a, struct ctl_store *st, const char *password,
                           char *err, size_t errlen)
{
    char hash[CTL_AUTH_HASH_MAX];
    struct ctl_txn *t = NULL;
    int rv;

    rv = ctl_auth_password_check(password, err, errlen);
    if (rv < 0)
        return rv;
    rv = ctl_auth_hash(password, hash, sizeof(hash));
    if (rv < 0) {
        snprintf(err, errlen, "cannot hash the password");
        return rv;
    }
    rv = ctl_txn_begin(st, true, &t);
    if (rv == 0)
        rv = ctl_store_text_put(t, HASH_KEY, hash);
    if (rv == 0) {
        rv = ctl_txn_commit(t);
        t = NULL;
    }
    ctl_txn_abort(t);
    if (rv < 0) {
        snprintf(err, errlen, "cannot store the password: %s", ctl_store_strerror(rv));
        return rv;
    }
    ctl_auth_hash_set(a, hash);
    return 0;
}

int ctl_auth_enabled_save(struct ctl_auth *a, struct ctl_store *st, bool enabled)
{
    struct ctl_txn *t = NULL;
    int rv = ctl_txn_begin(st, true, &t);

    if (rv == 0)
        rv = ctl_config_auth_enabled_put(t, enabled);
    if (rv == 0) {
        rv = ctl_txn_commit(t);
        t = NULL;
    }
    ctl_txn_abort(t);
    if (rv == 0)
        a->enabled = enabled;
    return rv;
}

void ctl_auth_fingerprint_set(struct ctl_auth *a, const char *fingerprint)
{
    snprintf(a->fingerprint, sizeof(a->fingerprint), "%s", fingerprint ? fingerprint : "");
}

const char *ctl_auth_fingerprint(const struct ctl_auth *a)
{
    return a->fingerprint;
}

/* ---- sessions ---- */

static uint64_t real_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static bool session_live(const struct session *s, uint64_t now_ms);

static void be64_write(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--, v >>= 8)
        p[i] = (uint8_t)v;
}

static uint64_t be64_read(const uint8_t *p)
{
    uint64_t v = 0;

    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

size_t ctl_auth_sessions_encode(struct ctl_auth *a, uint64_t now_ms, uint64_t now_real_ms,
                                uint8_t *buf, size_t len)
{
    size_t n = 0, at = 3;

    if (len < CTL_AUTH_SESSIONS_REC_MAX)
        return 0;
    for (size_t i = 0; i < CTL_AUTH_SESSIONS_MAX; i++) {
        struct session *s = &a->sessions[i];
        uint64_t idle;

        if (!session_live(s, now_ms))
            continue;
        idle = now_ms - s->last_use_ms;
        memcpy(buf + at, s->hash, sizeof(s->hash));
        be64_write(buf + at + 32, now_real_ms > idle ? now_real_ms - idle : 0);
        s->saved_use_ms = s->last_use_ms;
        at += SESSION_REC;
        n++;
    }
    buf[0] = SESSIONS_VERSION;
    buf[1] = (uint8_t)(n >> 8);
    buf[2] = (uint8_t)n;
    return at;
}

int ctl_auth_sessions_decode(struct ctl_auth *a, const uint8_t *buf, size_t len, uint64_t now_ms,
                             uint64_t now_real_ms)
{
    size_t n, k = 0;

    if (len < 3 || buf[0] != SESSIONS_VERSION)
        return -EINVAL;
    n = (size_t)buf[1] << 8 | buf[2];
    if (n > CTL_AUTH_SESSIONS_MAX || len != 3 + n * SESSION_REC)
        return -EINVAL;
    memset(a->sessions, 0, sizeof(a->sessions));
    for (size_t i = 0; i < n; i++) {
        const uint8_t *p = buf + 3 + i * SESSION_REC;
        uint64_t used = be64_read(p + 32);
        /* A clock set back since: the session counts as used now, not in the future. */
        uint64_t idle = now_real_ms > used ? now_real_ms - used : 0;
        struct session *s = &a->sessions[k];

        /* Expired meanwhile (the idle time ran on while controld was down): gone. */
        if (idle >= CTL_AUTH_SESSION_IDLE_MS)
            continue;
        memcpy(s->hash, p, sizeof(s->hash));
        s->last_use_ms = now_ms - idle; /* modular: now_ms - last_use_ms is idle again */
        s->saved_use_ms = s->last_use_ms;
        s->used = true;
        k++;
    }
    return (int)k;
}

/* Write the live sessions to the store. A failure is logged and the sessions stay good in
 * memory: only a restart would lose them. */
static void sessions_save(struct ctl_auth *a, uint64_t now_ms)
{
    uint8_t buf[CTL_AUTH_SESSIONS_REC_MAX];
    struct ctl_txn *t = NULL;
    size_t len;
    int rv;

    if (!a->st)
        return;
    len = ctl_auth_sessions_encode(a, now_ms, real_ms(), buf, sizeof(buf));
    rv = ctl_txn_begin(a->st, true, &t);
    if (rv == 0)
        rv = ctl_store_bytes_put(t, SESSIONS_KEY, buf, len);
    if (rv == 0) {
        rv = ctl_txn_commit(t);
        t = NULL;
    }
    ctl_txn_abort(t);
    explicit_bzero(buf, sizeof(buf));
    if (rv < 0)
        fgx_warn("auth: cannot store the sessions (a restart would log them out): %s",
                 ctl_store_strerror(rv));
}

static uint64_t mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void sessions_load(struct ctl_auth *a)
{
    struct ctl_txn *t = NULL;
    void *buf = NULL;
    size_t len = 0;
    int rv = ctl_txn_begin(a->st, false, &t);

    if (rv == 0)
        rv = ctl_store_bytes_get(t, SESSIONS_KEY, &buf, &len);
    ctl_txn_abort(t);
    if (rv < 0) {
        fgx_warn("auth: cannot read the stored sessions (everyone logs in again): %s",
                 ctl_store_strerror(rv));
        return;
    }
    if (!buf)
        return;
    rv = ctl_auth_sessions_decode(a, buf, len, mono_ms(), real_ms());
    if (rv < 0)
        fgx_warn("auth: the stored sessions do not decode; everyone logs in again");
    else if (rv > 0)
        fgx_info("auth: %d session(s) kept from before the restart", rv);
    explicit_bzero(buf, len);
    free(buf);
}

static void token_hash(const char *token, uint8_t out[32])
{
    fgx_mbed_sha256((const unsigned char *)token, strlen(token), out);
}

static bool session_live(const struct session *s, uint64_t now_ms)
{
    return s->used && now_ms - s->last_use_ms < CTL_AUTH_SESSION_IDLE_MS;
}

int ctl_auth_session_new(struct ctl_auth *a, uint64_t now_ms, char token[CTL_AUTH_TOKEN_LEN + 1])
{
    static const char hex[] = "0123456789abcdef";
    uint8_t raw[TOKEN_BYTES];
    struct session *slot = NULL;
    ssize_t n;

    n = getrandom(raw, sizeof(raw), 0);
    if (n == -1 || (size_t)n != sizeof(raw)) {
        int rv = n == -1 ? -errno : -EIO;
        fgx_err("auth: cannot draw a session token: %s", strerror(-rv));
        return rv;
    }
    for (size_t i = 0; i < TOKEN_BYTES; i++) {
        token[2 * i] = hex[raw[i] >> 4];
        token[2 * i + 1] = hex[raw[i] & 15];
    }
    token[CTL_AUTH_TOKEN_LEN] = '\0';
    explicit_bzero(raw, sizeof(raw));
    /* A free or expired slot, else the least recently used one. */
    for (size_t i = 0; i < CTL_AUTH_SESSIONS_MAX; i++) {
        struct session *s = &a->sessions[i];
        if (!session_live(s, now_ms)) {
            slot = s;
            break;
        }
        if (!slot || s->last_use_ms < slot->last_use_ms)
            slot = s;
    }
    token_hash(token, slot->hash);
    slot->last_use_ms = now_ms;
    slot->used = true;
    sessions_save(a, now_ms);
    return 0;
}

static struct session *session_find(struct ctl_auth *a, const char *token)
{
    uint8_t h[32];

    if (!token || strlen(token) != CTL_AUTH_TOKEN_LEN)
        return NULL;
    token_hash(token, h);
    for (size_t i = 0; i < CTL_AUTH_SESSIONS_MAX; i++) {
        struct session *s = &a->sessions[i];
        if (s->used && ct_equal(s->hash, h, sizeof(h)))
            return s;
    }
    return NULL;
}

int ctl_auth_session_check(struct ctl_auth *a, const char *token, uint64_t now_ms)
{
    struct session *s = session_find(a, token);

    if (!s)
        return -EACCES;
    if (!session_live(s, now_ms)) {
        memset(s, 0, sizeof(*s));
        sessions_save(a, now_ms);
        return -EACCES;
    }
    s->last_use_ms = now_ms;
    if (now_ms - s->saved_use_ms >= SESSION_SAVE_MS)
        sessions_save(a, now_ms);
    return 0;
}

bool ctl_auth_session_alive(const struct ctl_auth *a, const char *token, uint64_t now_ms)
{
    const struct session *s = session_find((struct ctl_auth *)a, token);

    return s && session_live(s, now_ms);
}

int ctl_auth_session_drop(struct ctl_auth *a, const char *token)
{
    struct session *s = session_find(a, token);

    if (!s)
        return -ENOENT;
    memset(s, 0, sizeof(*s));
    sessions_save(a, mono_ms());
    return 0;
}

size_t ctl_auth_session_drop_others(struct ctl_auth *a, const char *keep)
{
    struct session *k = keep ? session_find(a, keep) : NULL;
    size_t n = 0;

    for (size_t i = 0; i < CTL_AUTH_SESSIONS_MAX; i++) {
        struct session *s = &a->sessions[i];
        if (s->used && s != k) {
            memset(s, 0, sizeof(*s));
            n++;
        }
    }
    if (n > 0)
        sessions_save(a, mono_ms());
    return n;
}

size_t ctl_auth_session_count(const struct ctl_auth *a, uint64_t now_ms)
{
    size_t n = 0;

    for (size_t i = 0; i < CTL_AUTH_SESSIONS_MAX; i++)
        n += session_live(&a->sessions[i], now_ms);
    return n;
}

/* ---- failed logins ---- */

static size_t addr_len(int family)
{
    return family == 4 ? 4 : family == 6 ? 16 : 0;
}

static bool fail_is(const struct fail *f, const struct fgx_peer *peer)
{
    return f->used && f->family == peer->family &&
           memcmp(f->addr, peer->addr, addr_len(peer->family)) == 0;
}

static const struct fail *fail_find(const struct ctl_auth *a, const struct fgx_peer *peer)
{
    for (size_t i = 0; i < CTL_AUTH_PEERS_MAX; i++)
        if (fail_is(&a->fails[i], peer))
            return &a->fails[i];
    return NULL;
}

uint64_t ctl_auth_delay_left(const struct ctl_auth *a, const struct fgx_peer *peer, uint64_t now_ms)
{
    const struct fail *f = fail_find(a, peer);

    return f && f->until_ms > now_ms ? f->until_ms - now_ms : 0;
}

uint64_t ctl_auth_login_failed(struct ctl_auth *a, const struct fgx_peer *peer, uint64_t now_ms)
{
    struct fail *f = (struct fail *)fail_find(a, peer);
    uint64_t delay;

    if (!f) {
        /* A free slot, else the address that failed longest ago. */
        for (size_t i = 0; i < CTL_AUTH_PEERS_MAX; i++) {
            struct fail *c = &a->fails[i];
            if (!c->used) {
                f = c;
                break;
            }
            if (!f || c->last_ms < f->last_ms)
                f = c;
        }
        memset(f, 0, sizeof(*f));
        f->used = true;
        f->family = peer->family;
        memcpy(f->addr, peer->addr, addr_len(peer->family));
    }
    delay = CTL_AUTH_DELAY_FIRST_MS;
    for (unsigned i = 0; i < f->count && delay < CTL_AUTH_DELAY_MAX_MS; i++)
        delay *= 2;
    if (delay > CTL_AUTH_DELAY_MAX_MS)
        delay = CTL_AUTH_DELAY_MAX_MS;
    f->count++;
    f->last_ms = now_ms;
    f->until_ms = now_ms + delay;
    return delay;
}

void ctl_auth_login_ok(struct ctl_auth *a, const struct fgx_peer *peer)
{
    struct fail *f = (struct fail *)fail_find(a, peer);

    if (f)
        memset(f, 0, sizeof(*f));
}

/* ---- who may connect ---- */

int ctl_auth_allow_add(struct ctl_auth *a, const char *cidr)
{
    struct fgx_cidr c;

    if (!cidr || !*cidr || fgx_cidr_parse(cidr, &c) < 0 || c.family == 0)
        return -EINVAL;
    if (a->nallow == CTL_AUTH_ALLOW_MAX)
        return -ENOSPC;
    a->allow[a->nallow++] = c;
    return 0;
}

bool ctl_auth_allowed(const struct ctl_auth *a, const struct fgx_peer *peer)
{
    if (a->nallow == 0 || peer->family == 0)
        return true;
    for (size_t i = 0; i < a->nallow; i++)
        if (fgx_cidr_contains(&a->allow[i], peer->family, peer->addr))
            return true;
    return false;
}

bool ctl_auth_admit(const struct fgx_peer *peer, void *arg)
{
    /* nng's threads race on this only to decide whether to log: harmless. */
    static unsigned long long last_ns;
    char txt[64];

    if (ctl_auth_allowed(arg, peer))
        return true;
    ctl_auth_peer_format(peer, txt, sizeof(txt));
    fgx_log_ratelimited(&last_ns, FGX_LOG_WARN,
                        "refused a control connection from %s: not in --allow", txt);
    return false;
}

void ctl_auth_peer_format(const struct fgx_peer *peer, char *buf, size_t len)
{
    char txt[INET6_ADDRSTRLEN];

    if (peer->family == 4 && inet_ntop(AF_INET, peer->addr, txt, sizeof(txt)))
        snprintf(buf, len, "%s", txt);
    else if (peer->family == 6 && inet_ntop(AF_INET6, peer->addr, txt, sizeof(txt)))
        snprintf(buf, len, "[%s]", txt);
    else
        snprintf(buf, len, "local");
}
