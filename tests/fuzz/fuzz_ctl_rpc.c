/* libFuzzer harness: controld's request handling (controld/ctl_rpc.c and every rpc_* family)
 * against a real LMDB store, as the unit tests run it (no nftables, no worker): any bytes a
 * client or a web request could send as a Request. Checks that each gets a reply that unpacks,
 * and that a reply is an error exactly when it says why. The store persists across inputs, so
 * later requests meet the services and filters earlier ones made.
 * Requests that run a Python filter file's check (`script set`, a backup's scripts) are left
 * out: they fork an interpreter, which is the script sandbox's business, not a parser's. */
#include <assert.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control.pb-c.h"
#include "controld/ctl_rpc.h"
#include "fgx/log.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct ctl_ctx ctx;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    static char dir[] = "/tmp/fgx-fuzz-rpc-XXXXXX";

    (void)argc;
    (void)argv;
    fgx_log_init("fuzz_ctl_rpc", FGX_LOG_ERROR);
    if (!mkdtemp(dir) || ctl_store_open(dir, 0, &ctx.store) != 0 ||
        ctl_stats_open(ctx.store, &ctx.stats) != 0) {
        fprintf(stderr, "fuzz_ctl_rpc: no store in %s\n", dir);
        abort();
    }
    ctx.threads = 2;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    Fgx__Ctl__Request *q = fgx__ctl__request__unpack(NULL, size, data);
    Fgx__Ctl__Reply *rep;
    void *rbuf = NULL;
    size_t rlen = 0;

    if (q != NULL && (q->req_case == FGX__CTL__REQUEST__REQ_SCRIPT_SET ||
        (q->req_case == FGX__CTL__REQUEST__REQ_CONFIG_IMPORT && q->config_import != NULL &&
         q->config_import->n_scripts > 0))) {
        fgx__ctl__request__free_unpacked(q, NULL);
        return 0;
    }
    if (q != NULL)
        fgx__ctl__request__free_unpacked(q, NULL);

    assert(ctl_rpc_handle(&ctx, data, size, &rbuf, &rlen) == 0);
    rep = fgx__ctl__reply__unpack(NULL, rlen, rbuf);
    assert(rep != NULL);
    assert((rep->code == 0) == (rep->error == NULL));
    fgx__ctl__reply__free_unpacked(rep, NULL);
    free(rbuf);
    return 0;
}
