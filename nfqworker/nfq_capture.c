/* Capture stage of nfqworker: each packet thread's capture rings (fgx/capture.h, a struct
 * fgx_cap_set per thread), made at a ruleset switch (never on a packet), and the control
 * thread's reading of them: a blocked connection's capture for its event, every capture of a
 * service for controld's capture request. A service's bound (connections) is the worker's:
 * each thread keeps its share, since the rules spread connections over the threads evenly. */
#include "nfq.h"

#include <errno.h>
#include <stdlib.h>

int nfq_cap_request(struct nfq_worker *w, uint32_t id, struct fgx_blob **caps, size_t *n)
{
    size_t cap = 0;
    int rv = 0;

    *caps = NULL;
    *n = 0;
    for (unsigned k = 0; k < w->nthreads && rv == 0; k++)
        rv = fgx_cap_set_collect(&w->threads[k].caps, id, caps, n, &cap);
    if (rv != 0) {
        for (size_t i = 0; i < *n; i++)
            free((*caps)[i].data);
        free(*caps);
        *caps = NULL;
        *n = 0;
    }
    return rv;
}
