/* fgexctl transport stage: the Request from cli_args.c packed and sent to controld over a REQ
 * channel, and its Reply unpacked for cli_fmt.c. Failures are the user's to read, so they are
 * put into words for fgexctl's one-line reason rather than logged. */
#include "cli_rpc.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_args.h"
#include "fgx/chan.h"

void cli_rpc_init(struct cli_rpc *r, const char *url)
{
    r->url = url;
    r->chan = NULL;
    r->err[0] = '\0';
}

void cli_rpc_release(struct cli_rpc *r)
{
    fgx_chan_close(r->chan);
    r->chan = NULL;
}

int cli_rpc_request(struct cli_rpc *r, const Fgx__Ctl__Request *req, int timeout_ms,
                    Fgx__Ctl__Reply **out)
{
    uint8_t *buf = NULL;
    void *rbuf = NULL;
    size_t len, rlen = 0;
    Fgx__Ctl__Reply *rep;
    int rc;

    len = fgx__ctl__request__get_packed_size(req);
    buf = malloc(len ? len : 1);
    if (!buf) {
        rc = -ENOMEM;
        (void)snprintf(r->err, sizeof(r->err), "out of memory");
        goto out;
    }
    fgx__ctl__request__pack(req, buf);

    if (!r->chan) {
        rc = fgx_chan_dial(r->url, FGX_CHAN_REQ, CLI_RPC_DIAL_MS, &r->chan);
        if (rc < 0) {
            r->chan = NULL;
            (void)snprintf(r->err, sizeof(r->err), "cannot reach controld at %s: %s%s", r->url,
                           strerror(-rc), rc == -ECONNREFUSED ? " (is controld running?)" : "");
            goto out;
        }
    }
    rc = fgx_chan_call(r->chan, buf, len, &rbuf, &rlen, timeout_ms);
    if (rc == -ETIMEDOUT) {
        (void)snprintf(r->err, sizeof(r->err), "no reply from controld at %s within %d s", r->url,
                       timeout_ms / 1000);
        goto out;
    }
    if (rc < 0) {
        (void)snprintf(r->err, sizeof(r->err), "cannot reach controld at %s: %s", r->url,
                       strerror(-rc));
        goto out;
    }
    rep = fgx__ctl__reply__unpack(NULL, rlen, rbuf);
    if (!rep) {
        rc = -EBADMSG;
        (void)snprintf(r->err, sizeof(r->err), "controld at %s sent a reply that does not decode",
                       r->url);
        goto out;
    }
    *out = rep;
out:
    /* A REQ socket that failed may still hold the request; a fresh one starts clean. */
    if (rc < 0)
        cli_rpc_release(r);
    free(rbuf);
    free(buf);
    return rc;
}

int cli_rpc_call(const char *url, const Fgx__Ctl__Request *req, int timeout_ms,
                 Fgx__Ctl__Reply **out)
{
    struct cli_rpc r;
    int rc;

    cli_rpc_init(&r, url);
    rc = cli_rpc_request(&r, req, timeout_ms, out);
    if (rc < 0)
        (void)fprintf(stderr, CLI_PROG ": %s\n", r.err);
    cli_rpc_release(&r);
    return rc;
}
