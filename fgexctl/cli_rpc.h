/* fgexctl transport stage: one Request to controld, one Reply back, over fgx/chan.h. */
#ifndef CLI_RPC_H
#define CLI_RPC_H

#include <stdbool.h>

#include "control.pb-c.h"

#define CLI_RPC_DIAL_MS 1000     /* how long to wait for controld's socket to accept */
#define CLI_RPC_TIMEOUT_MS 15000 /* a change waits for the worker, so allow it time */
#define CLI_RPC_MS_PER_FILTER 10 /* more for an import: controld checks every regex of it */
/* A change waits for its compile, up to controld's largest --compile-timeout (600 s). */
#define CLI_RPC_COMPILE_WAIT_MS 600000

struct fgx_chan;

/* A connection kept across calls, for the commands that poll (stats --watch, events --follow). */
struct cli_rpc {
    const char *url;         /* borrowed */
    const char *fingerprint; /* tls+tcp: --fingerprint, or NULL; borrowed */
    const char *ca;          /* tls+tcp: --ca FILE, or NULL; borrowed */
    struct fgx_chan *chan;   /* open between calls; NULL before the first and after a failure */
    char *token;             /* the session token of url (cli_session.c), or NULL */
    bool token_loaded;       /* token was looked for */
    unsigned wait_s;         /* how long a change waits for a busy controld (--wait; 0: not) */
    char err[1024];          /* after a failed call: the reason, one line, without "fgexctl: " */
};

void cli_rpc_init(struct cli_rpc *r, const char *url);
/* For tls+tcp URLs: pin this fingerprint, or verify against this CA file (either may be NULL). */
void cli_rpc_set_trust(struct cli_rpc *r, const char *fingerprint, const char *ca);
/* Send req and wait for the reply, dialling first when not connected (for tls+tcp, after the
 * certificate check of cli_tls.c), with the session token of the URL, when there is one, as
 * Request.token. On success *out is owned by the caller (fgx__ctl__reply__free_unpacked(*out,
 * NULL)). On failure nothing is printed: r->err says why, the connection is dropped so the next
 * call dials afresh, and a negative errno is returned (-EKEYREJECTED: the server's certificate
 * was refused). */
int cli_rpc_request(struct cli_rpc *r, const Fgx__Ctl__Request *req, int timeout_ms,
                    Fgx__Ctl__Reply **out);
void cli_rpc_release(struct cli_rpc *r);
/* How long cli_rpc_request() sends a change again while controld is busy compiling another
 * (Reply.busy), with a progress line on stderr after a second; past it, -EBUSY with r->err
 * saying so. 0: the busy reply is returned at once. Default CLI_WAIT_DEFAULT_S. */
void cli_rpc_set_wait(struct cli_rpc *r, unsigned secs);

/* One call on a connection of its own. On failure the reason has been printed on stderr as one
 * "fgexctl: ..." line. Otherwise as cli_rpc_request(). */
int cli_rpc_call(const char *url, const Fgx__Ctl__Request *req, int timeout_ms,
                 Fgx__Ctl__Reply **out);

#endif
