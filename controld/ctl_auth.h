/* controld access stage: who may send control requests. Remote peers are first checked against
 * the --allow list (before nng hands over any request), then must present a session token
 * obtained by logging in with the password. The password is kept only as a yescrypt hash in the
 * store; session tokens only as SHA-256 hashes, in memory and in the store (with when each was
 * last used), so that sessions outlive a controld restart and a copy of the store logs nobody
 * in. Failed logins lock the peer address out for a delay that doubles with each failure. */
#ifndef CTL_AUTH_H
#define CTL_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fgx/addr.h"
#include "fgx/chan_tls.h"

#define CTL_AUTH_TOKEN_LEN 64    /* hex characters of a 256-bit token */
#define CTL_AUTH_SESSIONS_MAX 64 /* the oldest session goes when a new one needs room */
#define CTL_AUTH_SESSION_IDLE_MS (12ull * 3600 * 1000) /* a session unused this long expires */
#define CTL_AUTH_PASSWORD_MIN 8
#define CTL_AUTH_PASSWORD_MAX 1024
#define CTL_AUTH_HASH_MAX 256
#define CTL_AUTH_ALLOW_MAX 64
/* A remote connection (--listen or --web-listen) must send its first request this soon after
 * it is accepted (the TLS handshake included), or it is closed (--handshake-timeout, seconds). */
#define CTL_AUTH_HANDSHAKE_S_DEFAULT 5
/* --listen's connections that have not sent a request yet: past this many from one address,
 * those that sent nothing go first, then the oldest; past CTL_AUTH_PENDING_MAX in all, those
 * of the address holding the most. */
#define CTL_AUTH_PENDING_PER_PEER 16
#define CTL_AUTH_PENDING_MAX 512
#define CTL_AUTH_DELAY_FIRST_MS 1000 /* lockout after the first failed login from an address */
#define CTL_AUTH_DELAY_MAX_MS 60000
#define CTL_AUTH_PEERS_MAX 256 /* addresses whose failures are remembered */

struct ctl_auth;

/* *out owned by the caller (ctl_auth_free()). Auth starts enabled with no password set. */
int ctl_auth_new(struct ctl_auth **out);
void ctl_auth_free(struct ctl_auth *a);

/* ---- password hashing ---- */

/* Check length and characters (no NUL, no newline): 0, or -EINVAL with the reason in err. */
int ctl_auth_password_check(const char *password, char *err, size_t errlen);
/* yescrypt hash of password with a fresh salt, into out (CTL_AUTH_HASH_MAX bytes is enough). */
int ctl_auth_hash(const char *password, char *out, size_t len);
/* 0 when password matches hash, -EACCES when not (or when hash is empty or unusable). */
int ctl_auth_verify(const char *password, const char *hash);

/* The stored hash ("" when no password is set) and the requirement switch, as loaded from or
 * saved to the store by the caller. */
void ctl_auth_hash_set(struct ctl_auth *a, const char *hash);
const char *ctl_auth_hash_get(const struct ctl_auth *a);
bool ctl_auth_has_password(const struct ctl_auth *a);
void ctl_auth_enabled_set(struct ctl_auth *a, bool enabled);
bool ctl_auth_enabled(const struct ctl_auth *a);
/* Also require a login on the local ipc socket (--local-auth). */
void ctl_auth_local_set(struct ctl_auth *a, bool required);

/* Whether a request from peer needs a valid session token right now. */
bool ctl_auth_required(const struct ctl_auth *a, const struct fgx_peer *peer);

/* ---- persistence (ctl_store) ---- */

struct ctl_store;

/* Read the stored hash and switch into a. */
int ctl_auth_load(struct ctl_auth *a, struct ctl_store *st);
/* Check password (-EINVAL, the reason in err), hash it, store the hash, and use it. */
int ctl_auth_password_save(struct ctl_auth *a, struct ctl_store *st, const char *password,
                           char *err, size_t errlen);
/* Store the switch, and use it. */
int ctl_auth_enabled_save(struct ctl_auth *a, struct ctl_store *st, bool enabled);

/* The TLS certificate's fingerprint for `fgexctl cert` ("" when controld has no TLS listener). */
void ctl_auth_fingerprint_set(struct ctl_auth *a, const char *fingerprint);
const char *ctl_auth_fingerprint(const struct ctl_auth *a);

/* ---- sessions (now_ms: a monotonic clock in milliseconds) ---- */

/* A new session; its token (hex, NUL-terminated) goes to token. */
int ctl_auth_session_new(struct ctl_auth *a, uint64_t now_ms, char token[CTL_AUTH_TOKEN_LEN + 1]);
/* 0 when token names a live session (its idle timer restarts), else -EACCES. */
int ctl_auth_session_check(struct ctl_auth *a, const char *token, uint64_t now_ms);
/* Whether token names a live session, without restarting its idle timer (the web server's
 * live streams ask this: an open page does not keep a session alive by itself). */
bool ctl_auth_session_alive(const struct ctl_auth *a, const char *token, uint64_t now_ms);
/* Drop the session of token: 0, or -ENOENT. */
int ctl_auth_session_drop(struct ctl_auth *a, const char *token);
/* Drop every session but keep's (keep may be NULL): returns how many went. */
size_t ctl_auth_session_drop_others(struct ctl_auth *a, const char *keep);
size_t ctl_auth_session_count(const struct ctl_auth *a, uint64_t now_ms);

/* The live sessions as the store keeps them: a version byte, a count, then per session the
 * SHA-256 of its token and its last use in unix ms (now_real_ms is the wall clock at now_ms).
 * Returns the length written (0 when len < CTL_AUTH_SESSIONS_REC_MAX). */
#define CTL_AUTH_SESSIONS_REC_MAX (3 + CTL_AUTH_SESSIONS_MAX * 40)
size_t ctl_auth_sessions_encode(struct ctl_auth *a, uint64_t now_ms, uint64_t now_real_ms,
                                uint8_t *buf, size_t len);
/* Replace a's sessions with those of buf that have not been idle for
 * CTL_AUTH_SESSION_IDLE_MS by now_real_ms. Returns how many, or -EINVAL (not such a record). */
int ctl_auth_sessions_decode(struct ctl_auth *a, const uint8_t *buf, size_t len, uint64_t now_ms,
                             uint64_t now_real_ms);

/* ---- failed logins ---- */

/* Milliseconds before peer may try a password again (0: now). */
uint64_t ctl_auth_delay_left(const struct ctl_auth *a, const struct fgx_peer *peer,
                             uint64_t now_ms);
/* Record a failure: returns the lockout it starts (doubles per failure, up to the max). */
uint64_t ctl_auth_login_failed(struct ctl_auth *a, const struct fgx_peer *peer, uint64_t now_ms);
void ctl_auth_login_ok(struct ctl_auth *a, const struct fgx_peer *peer);

/* ---- who may connect ---- */

/* Add one --allow CIDR: 0, -EINVAL (bad text) or -ENOSPC. */
int ctl_auth_allow_add(struct ctl_auth *a, const char *cidr);
/* true when the list is empty, the peer is local, or a prefix contains it. Called from nng's
 * threads: the list must not change once the listener is up. */
bool ctl_auth_allowed(const struct ctl_auth *a, const struct fgx_peer *peer);

/* fgx_chan_admit_fn for the TLS listener (arg: the struct ctl_auth): ctl_auth_allowed(), and a
 * log line (rate-limited) for each refused peer. */
bool ctl_auth_admit(const struct fgx_peer *peer, void *arg);

/* "1.2.3.4", "[fd00::1]" or "local", for log lines. */
void ctl_auth_peer_format(const struct fgx_peer *peer, char *buf, size_t len);

#endif
