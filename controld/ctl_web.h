/* controld web stage: the dashboard's HTTPS server (docs/web.md) on libmicrohttpd. It serves the
 * page built into controld (ctl_web_files.h), /metrics, and the JSON API, whose requests it
 * relays into the control loop as requests of the browser's own address (fgx/chan_relay.h):
 * login, lockout, sessions, history's `who`, deferred compiles and busy replies are the remote
 * fgexctl's. The server's one thread never waits on the loop (a request waiting for its reply
 * is suspended), and the loop never waits on the server: ctl_web_tick() only queues the live
 * stream's messages. */
#ifndef CTL_WEB_H
#define CTL_WEB_H

#include <stdint.h>

#include "controld/ctl_apply.h"
#include "controld/ctl_auth.h"
#include "controld/ctl_metrics.h"

#define CTL_WEB_RELAY_URL "inproc://fgex-web"
#define CTL_WEB_KEEPALIVE_MS 25000 /* a comment on /api/live when nothing else was sent */

struct ctl_web_config {
    const char *listen;             /* "ADDR:PORT", as --metrics-listen takes it */
    const char *cert_pem, *key_pem; /* the remote control's (ctl_tls.h) */
    struct ctl_auth *auth;          /* --allow, from the server's thread (ctl_auth_admit) */
    struct ctl_metrics *metrics;    /* /metrics */
    const char *relay_url;          /* the control channel's relay listener */
    /* --web-max-conns, --web-max-per-src, --handshake-timeout (0: the defaults) */
    unsigned max_conns, max_per_src, handshake_s;
};

struct ctl_web;

/* Start serving; *out owned by the caller (ctl_web_stop()). Returns 0 or -errno (logged). */
int ctl_web_start(const struct ctl_web_config *cfg, struct ctl_web **out);
uint16_t ctl_web_port(const struct ctl_web *w);
/* From the control loop, each round: the live streams' messages (events, stats, changes,
 * sessions ended), each built once for every open page. Costs nothing without an open stream. */
void ctl_web_tick(struct ctl_web *w, struct ctl_ctx *ctx);
/* Stop (requests waiting on the loop are answered 503 first); NULL is a no-op. Before the
 * control channel closes. */
void ctl_web_stop(struct ctl_web *w);

#endif
