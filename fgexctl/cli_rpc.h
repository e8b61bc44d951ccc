/* fgexctl transport stage: one Request to controld, one Reply back, over fgx/chan.h. */
#ifndef CLI_RPC_H
#define CLI_RPC_H

#include "control.pb-c.h"

#define CLI_RPC_DIAL_MS 1000     /* how long to wait for controld's socket to accept */
#define CLI_RPC_TIMEOUT_MS 15000 /* a change waits for the worker, so allow it time */

/* Send req to the controld at url and wait for its reply. On success *out is owned by the
 * caller (fgx__ctl__reply__free_unpacked(*out, NULL)). On failure the reason has been printed on
 * stderr as one "fgexctl: ..." line and a negative errno is returned. */
int cli_rpc_call(const char *url, const Fgx__Ctl__Request *req, int timeout_ms,
                 Fgx__Ctl__Reply **out);

#endif
