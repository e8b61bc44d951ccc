/* libFuzzer harness: the worker channel's messages (libcommon/dp.c: rulesets, statistics,
 * captures, flows), as a worker or controld would receive them. Beyond "no crash, no leak":
 * what decodes encodes again, and that encoding decodes to a message that encodes the same
 * (nothing is lost or invented between the wire and the structs). */
#include <assert.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fgx/dp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct fgx_dp_msg m, m2;
    void *b1 = NULL, *b2 = NULL;
    size_t l1, l2;

    memset(&m, 0, sizeof(m));
    if (fgx_dp_decode(data, size, &m) != 0)
        return 0;
    if (fgx_dp_encode(&m, &b1, &l1) == 0) {
        memset(&m2, 0, sizeof(m2));
        assert(fgx_dp_decode(b1, l1, &m2) == 0);
        assert(m2.type == m.type);
        assert(fgx_dp_encode(&m2, &b2, &l2) == 0);
        assert(l1 == l2 && memcmp(b1, b2, l1) == 0);
        fgx_dp_msg_release(&m2);
    }
    free(b1);
    free(b2);
    fgx_dp_msg_release(&m);
    return 0;
}
