/* Message channels between fgex processes: a thin wrapper over nng req/rep sockets, so that no
 * other file includes nng. A channel carries opaque byte messages; fgx/dp.h and the control
 * protocol give them meaning. */
#ifndef FGX_CHAN_H
#define FGX_CHAN_H

#include <stddef.h>

enum fgx_chan_role {
    FGX_CHAN_REQ, /* sends a request, then receives its reply */
    FGX_CHAN_REP, /* receives a request, then sends its reply */
};

struct fgx_chan;

/* Open a socket of the given role and listen on url (ipc://PATH, tls+tcp://...). For ipc://, a
 * stale socket file is replaced and the file mode set to 0600. */
int fgx_chan_listen(const char *url, enum fgx_chan_role role, struct fgx_chan **out);
/* Open and dial url. The dial is retried in the background by nng when it fails; with
 * block_ms > 0 the call waits that long for the first connection and fails with -ECONNREFUSED. */
int fgx_chan_dial(const char *url, enum fgx_chan_role role, int block_ms, struct fgx_chan **out);

/* Send len bytes (copied). Returns 0, -ETIMEDOUT, -EPIPE or -EIO. */
int fgx_chan_send(struct fgx_chan *c, const void *buf, size_t len, int timeout_ms);
/* Receive one message. On success *buf is malloc'd and owned by the caller (free()).
 * timeout_ms < 0 waits forever. Returns 0, -ETIMEDOUT, -EPIPE or -EIO. */
int fgx_chan_recv(struct fgx_chan *c, void **buf, size_t *len, int timeout_ms);

/* One request, one reply, for a REQ channel; *reply as for fgx_chan_recv(). */
int fgx_chan_call(struct fgx_chan *c, const void *req, size_t reqlen, void **reply, size_t *replylen,
                  int timeout_ms);

/* A second receiver on a REP channel, for another thread: its own nng context, so that one
 * thread can answer while another is busy with a long request (a worker's heartbeat while its
 * control thread loads a ruleset). Receive, then send the reply, on the same context. */
struct fgx_chan_ctx;
int fgx_chan_ctx_open(struct fgx_chan *c, struct fgx_chan_ctx **out);
int fgx_chan_ctx_recv(struct fgx_chan_ctx *x, void **buf, size_t *len, int timeout_ms);
int fgx_chan_ctx_send(struct fgx_chan_ctx *x, const void *buf, size_t len, int timeout_ms);
/* Before the channel is closed; NULL is a no-op. */
void fgx_chan_ctx_close(struct fgx_chan_ctx *x);

/* One request on a REQ channel, on a context of its own, that the caller looks at later without
 * blocking (controld's heartbeats go beside a ruleset push). Its reply as for fgx_chan_recv(). */
struct fgx_chan_pending;
int fgx_chan_call_begin(struct fgx_chan *c, const void *req, size_t len, int timeout_ms,
                        struct fgx_chan_pending **out);
/* -EINPROGRESS while it runs; else its result (0 with *reply, or a negative errno), and p is
 * freed. */
int fgx_chan_call_end(struct fgx_chan_pending *p, void **reply, size_t *len);
/* A descriptor that polls readable once the call is done (fgx_chan_call_end() then returns its
 * result), for a caller that waits on it beside something else; p's, closed with it. */
int fgx_chan_call_fd(const struct fgx_chan_pending *p);
/* Give up on it (freed); NULL is a no-op. */
void fgx_chan_call_cancel(struct fgx_chan_pending *p);

/* Number of connected peers (pipes) right now. */
int fgx_chan_peers(struct fgx_chan *c);

/* Close; NULL is a no-op. */
void fgx_chan_close(struct fgx_chan *c);

#endif
