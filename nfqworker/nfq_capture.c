/* Capture stage of nfqworker: each packet thread's capture rings (fgx/capture.h), one per
 * service with capture on, made at a ruleset switch (never on a packet), and the control
 * thread's reading of them: a blocked connection's capture for its event, every capture of a
 * service for controld's capture request. A service's bound (connections) is the worker's:
 * each thread keeps its share, since the rules spread connections over the threads evenly. */
#include "nfq.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fgx/log.h"

struct fgx_cap_ring *nfq_cap_ring(const struct nfq_thread *t, uint32_t id)
{
    for (size_t i = 0; i < t->ncaps; i++)
        if (t->caps[i]->service_id == id)
            return t->caps[i];
    return NULL;
}

void nfq_cap_switch(struct nfq_thread *t, const struct fgx_wcfg *cfg)
{
    struct fgx_cap_ring **caps = NULL, **old;
    size_t n = 0, nold, i, k;

    if (cfg->nservices > 0) {
        caps = calloc(cfg->nservices, sizeof(*caps));
        if (caps == NULL) {
            fgx_err("thread %u: out of memory for capture rings: capture stays as it was",
                    t->idx);
            return;
        }
    }
    for (i = 0; i < cfg->nservices; i++) {
        const struct fgx_wsvc *s = &cfg->svc[i];
        unsigned nt = t->w->nthreads ? t->w->nthreads : 1;
        uint32_t conns = (s->capture_conns + nt - 1) / nt;
        struct fgx_cap_ring *r;

        if (s->capture_conns == 0 || s->capture_bytes == 0)
            continue;
        r = nfq_cap_ring(t, s->id);
        if (r != NULL && r->conns == conns && r->bytes == s->capture_bytes) {
            caps[n++] = r;
            continue;
        }
        if (fgx_cap_ring_new(s->id, conns, s->capture_bytes, &r) != 0) {
            fgx_err("thread %u: no capture ring for service %u (%u x %u bytes)", t->idx, s->id,
                    conns, s->capture_bytes);
            continue;
        }
        caps[n++] = r;
    }
    pthread_mutex_lock(&t->cap_lock);
    old = t->caps;
    nold = t->ncaps;
    t->caps = caps;
    t->ncaps = n;
    pthread_mutex_unlock(&t->cap_lock);
    for (i = 0; i < nold; i++) {
        for (k = 0; k < n && caps[k] != old[i]; k++)
            ;
        if (k == n)
            fgx_cap_ring_free(old[i]);
    }
    free(old);
}

void nfq_cap_free(struct nfq_thread *t)
{
    for (size_t i = 0; i < t->ncaps; i++)
        fgx_cap_ring_free(t->caps[i]);
    free(t->caps);
    t->caps = NULL;
    t->ncaps = 0;
}

void nfq_cap_events(struct nfq_thread *t, struct fgx_dp_stats *out, size_t from, size_t to)
{
    pthread_mutex_lock(&t->cap_lock);
    for (size_t i = from; i < to; i++) {
        struct fgx_dp_event *e = &out->events[i];
        struct fgx_cap_ref ref = {e->cap_slot, e->cap_gen};
        struct fgx_cap_ring *r;

        e->capture = NULL;
        if (e->cap_gen == 0)
            continue;
        r = nfq_cap_ring(t, e->service_id);
        if (r != NULL && fgx_cap_take(r, &ref, &e->capture, &e->capture_len) != 0)
            e->capture = NULL;
    }
    pthread_mutex_unlock(&t->cap_lock);
}

struct cap_acc {
    struct fgx_blob *caps;
    size_t n, cap;
};

static int cap_acc_add(void *arg, uint8_t *buf, size_t len)
{
    struct cap_acc *a = arg;

    if (a->n == a->cap) {
        size_t nc = a->cap ? a->cap * 2 : 64;
        struct fgx_blob *p = realloc(a->caps, nc * sizeof(*p));

        if (p == NULL) {
            free(buf);
            return -ENOMEM;
        }
        a->caps = p;
        a->cap = nc;
    }
    a->caps[a->n++] = (struct fgx_blob){.data = buf, .len = len};
    return 0;
}

int nfq_cap_request(struct nfq_worker *w, uint32_t id, struct fgx_blob **caps, size_t *n)
{
    struct cap_acc a = {0};
    int rv = 0;

    for (unsigned k = 0; k < w->nthreads && rv == 0; k++) {
        struct nfq_thread *t = &w->threads[k];
        struct fgx_cap_ring *r;

        pthread_mutex_lock(&t->cap_lock);
        r = nfq_cap_ring(t, id);
        if (r != NULL)
            rv = fgx_cap_ring_collect(r, cap_acc_add, &a);
        pthread_mutex_unlock(&t->cap_lock);
    }
    if (rv != 0) {
        for (size_t i = 0; i < a.n; i++)
            free(a.caps[i].data);
        free(a.caps);
        return rv;
    }
    *caps = a.caps;
    *n = a.n;
    return 0;
}
