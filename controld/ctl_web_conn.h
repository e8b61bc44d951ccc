/* controld web stage, its connections: who holds the web listener's connections, and which of
 * them go so that no address, nor a few of them, can hold the listener (issue 24: forty idle
 * connections blinded the dashboard, through libmicrohttpd's limit of 32 per address and a
 * 60 s timeout that ran during the TLS handshake too).
 *
 * A connection is pending from its accept to its first request (the TLS handshake included),
 * then busy while a request runs (a live stream always), idle between keep-alive requests.
 * Admission (libmicrohttpd's accept-policy callback, its own thread) weighs each new
 * connection with fgx_connlimit_pick(): past the per-address cap, or with the listener full,
 * the connections it picks are shut down (libmicrohttpd then sees their end and closes them),
 * and the new one is refused only when nothing can go. A pending connection past the handshake
 * timeout is shut down too, by the next admission or the control loop's tick. */
#ifndef CTL_WEB_CONN_H
#define CTL_WEB_CONN_H

#include <microhttpd.h>
#include <stdbool.h>

#include "fgx/chan_tls.h"

/* Defaults of --web-max-conns and --web-max-per-src. */
#define CTL_WEB_MAX_CONNS 1024
#define CTL_WEB_MAX_PER_SRC 64
#define CTL_WEB_CONN_SLACK 64
/* Live streams (/api/live) at most: per session (a player's tabs), per address (a team behind
 * one address); in all, a quarter of the connections. */
#define CTL_WEB_STREAMS_PER_SESSION 16
#define CTL_WEB_STREAMS_PER_SRC 32 /* shut down, not yet closed by libmicrohttpd: room for them */

struct ctl_web_conns;

/* max connections in all, per_src from one address (IPv6: a /64), a first request within
 * handshake_s of the accept. *out owned by the caller (ctl_web_conns_free()). */
int ctl_web_conns_new(unsigned max, unsigned per_src, unsigned handshake_s,
                      struct ctl_web_conns **out);
void ctl_web_conns_free(struct ctl_web_conns *wc);
/* libmicrohttpd's connection limit to set: above what admission lets in. */
unsigned ctl_web_conns_mhd_limit(const struct ctl_web_conns *wc);

/* libmicrohttpd's thread. A connection from src, accepted, not yet set up: whether to keep it
 * (others may have been shut down for it). */
bool ctl_web_conns_admit(struct ctl_web_conns *wc, const struct fgx_peer *src);
/* MHD_OPTION_NOTIFY_CONNECTION's callback (cls: the ctl_web_conns). */
void ctl_web_conns_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code);
/* A request began on conn; one ended (it is idle until the next). */
void ctl_web_conns_busy(struct ctl_web_conns *wc, struct MHD_Connection *conn);
void ctl_web_conns_idle(struct ctl_web_conns *wc, struct MHD_Connection *conn);

/* Any thread (the control loop's tick): shut down the pending connections past the handshake
 * timeout, and update the listener's gauges for `status`. streams: the live streams open. */
void ctl_web_conns_sweep(struct ctl_web_conns *wc, unsigned streams);

#endif
