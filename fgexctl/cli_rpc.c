/* fgexctl transport stage: the Request from cli_args.c packed and sent to controld over a REQ
 * channel, and its Reply unpacked for cli_fmt.c. Failures are the user's to read, so they are
 * printed as fgexctl's one-line reason rather than logged. */
#include "cli_rpc.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_args.h"
#include "fgx/chan.h"

int cli_rpc_call(const char *url, const Fgx__Ctl__Request *req, int timeout_ms,
                 Fgx__Ctl__Reply **out)
{
    struct fgx_chan *chan = NULL;
    uint8_t *buf = NULL;
    void *rbuf = NULL;
    size_t len, rlen = 0;
    Fgx__Ctl__Reply *rep;
    int rc;

    len = fgx__ctl__request__get_packed_size(req);
    buf = malloc(len ? len : 1);
    if (!buf) {
        rc = -ENOMEM;
        (void)fprintf(stderr, CLI_PROG ": out of memory\n");
        goto out;
    }
    fgx__ctl__request__pack(req, buf);

    rc = fgx_chan_dial(url, FGX_CHAN_REQ, CLI_RPC_DIAL_MS, &chan);
    if (rc < 0) {
        (void)fprintf(stderr, CLI_PROG ": cannot reach controld at %s: %s%s\n", url, strerror(-rc),
                      rc == -ECONNREFUSED ? " (is controld running?)" : "");
        goto out;
    }
    rc = fgx_chan_call(chan, buf, len, &rbuf, &rlen, timeout_ms);
    if (rc == -ETIMEDOUT) {
        (void)fprintf(stderr, CLI_PROG ": no reply from controld at %s within %d s\n", url,
                      timeout_ms / 1000);
        goto out;
    }
    if (rc < 0) {
        (void)fprintf(stderr, CLI_PROG ": cannot reach controld at %s: %s\n", url, strerror(-rc));
        goto out;
    }
    rep = fgx__ctl__reply__unpack(NULL, rlen, rbuf);
    if (!rep) {
        rc = -EBADMSG;
        (void)fprintf(stderr, CLI_PROG ": controld at %s sent a reply that does not decode\n", url);
        goto out;
    }
    *out = rep;
out:
    free(rbuf);
    fgx_chan_close(chan);
    free(buf);
    return rc;
}
