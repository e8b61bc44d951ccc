/* A relay into a REP channel for requests made inside controld on behalf of a remote client
 * (the web server, controld/ctl_web.c): an inproc:// listener on the channel whose messages
 * start with the client's address, which fgx_chan_recv_req() reports as the sender, so that
 * the control loop treats them exactly as the remote client's own requests (never as the
 * trusted local peer). Only code in this process can reach an inproc:// listener. Implemented
 * in chan.c, which keeps nng to itself. */
#ifndef FGX_CHAN_RELAY_H
#define FGX_CHAN_RELAY_H

#include <stddef.h>

#include "fgx/chan_tls.h"

/* Add the relay listener on url (inproc://NAME) to the REP channel c. Returns 0 or -errno. */
int fgx_chan_listen_relay(struct fgx_chan *c, const char *url);

/* Called once per fgx_chan_call_async(), from an nng thread: rv 0 and reply (malloc'd, the
 * callee's to free) or a negative errno (-ETIMEDOUT, -EPIPE when the channel closed) and NULL. */
typedef void (*fgx_chan_done_fn)(void *arg, int rv, void *reply, size_t len);

/* Send req on behalf of peer (family 4 or 6) through the REQ channel c (dialed to a relay
 * listener) and call done with the reply; many calls may be outstanding at once, each
 * answered on its own. Returns 0 (done will be called) or -errno (it will not). */
int fgx_chan_call_async(struct fgx_chan *c, const struct fgx_peer *peer, const void *req,
                        size_t len, int timeout_ms, fgx_chan_done_fn done, void *arg);

/* Outstanding fgx_chan_call_async() calls on c. */
int fgx_chan_calls(struct fgx_chan *c);

#endif
