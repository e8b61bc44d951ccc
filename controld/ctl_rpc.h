/* controld control API stage: one fgexctl request (control.proto Request) in, one Reply out. A
 * change is validated, stored in one LMDB transaction, then applied (ctl_apply) before the
 * reply leaves, so that the next connection after a reply is filtered by the new set. */
#ifndef CTL_RPC_H
#define CTL_RPC_H

#include <stdbool.h>
#include <stddef.h>

#include "control.pb-c.h"
#include "controld/ctl_apply.h"
#include "fgx/chan_tls.h"
#include "fgx/version.h"

#define CTL_VERSION FGX_VERSION

/* Handle one serialized Request; *reply is a malloc'd serialized Reply (free()). Returns 0
 * whenever a reply was produced, errors included; a negative errno only when even an error
 * reply could not be built. */
int ctl_rpc_handle(struct ctl_ctx *ctx, const void *req, size_t len, void **reply,
                   size_t *replylen);
/* The same for a request from peer (fgx/chan_tls.h): a remote peer, or the local one with
 * --local-auth, needs a session token while the password requirement is on. ctl_rpc_handle()
 * is this for the local socket. */
int ctl_rpc_handle_from(struct ctl_ctx *ctx, const struct fgx_peer *peer, const void *req,
                        size_t len, void **reply, size_t *replylen);
/* What the control loop calls: as ctl_rpc_handle_from(), except that a change that needs
 * regexes checked or databases compiled (ctl_compile.h) stores nothing and sets *deferred,
 * with no reply: the loop starts the compile session, answers other requests meanwhile, and
 * calls this again with the same request once the session is done, which then completes
 * quickly. With busy (a session runs for another request) a change is refused at once. */
int ctl_rpc_handle_try(struct ctl_ctx *ctx, const struct fgx_peer *peer, const void *req,
                       size_t len, bool busy, void **reply, size_t *replylen, bool *deferred);
/* A Reply with only code and msg, for a deferred request that cannot complete. */
int ctl_rpc_error_reply(Fgx__Ctl__Code code, const char *msg, void **reply, size_t *replylen);
/* The busy Reply (busy, busy_blocked, busy_secs) to a request that came while the control loop
 * was blocked: nothing was run, and fgexctl sends it again (--wait). */
int ctl_rpc_blocked_reply(const char *msg, unsigned secs, void **reply, size_t *replylen);

#endif
