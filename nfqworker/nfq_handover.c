/* Handover stage of nfqworker: a planned restart (fgexctl worker restart nfq) passes the flows
 * on, so the connections open across it keep their scan state instead of meeting their
 * service's midstream policy. controld asks the old worker (FGX_DP_FLOWS_REQUEST): each packet
 * thread, between two batches, writes its table out (hyperscan's compressed streams, positions,
 * the rings of bytes passed) and stops reading its queue there, so nothing moves after the
 * snapshot; the worker answers and exits. The new worker gets the bytes before its first
 * ruleset (FGX_DP_FLOWS) and each thread rebuilds its flows as it switches to that ruleset,
 * against the same databases (a flow whose database changed meanwhile is left out: the policy).
 * Every direction taken over must go on exactly where it stood (resume): with fail-open queues
 * bytes can pass unseen while no worker reads them. A crash hands nothing over.
 *
 * The format is the worker's own, native byte order (the same binary on the same host): a
 * header, then per thread its index, its flow count and the flows. */
#include "nfq.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <hs/hs.h>

#include "fgx/log.h"

#define HX_MAGIC 0x46474858u /* "FGXH" */
#define HX_VERSION 1u
#define HX_WAIT_MS 3000

struct hx_head {
    uint32_t magic, version, nthreads, flows_size;
};

struct hx_dir {
    uint32_t next_seq, floor_seq, stream_len;
    uint16_t ring_len, ring_pos;
    uint64_t db_hash, scanned;
    uint8_t active, pad[7];
    uint8_t ring[FGX_REASM_RING];
};

struct hx_flow {
    struct fgx_flow_key key;
    uint32_t service_id;
    uint8_t blocked, embryonic, pad[2];
    struct hx_dir dir[2];
};

struct hx_buf {
    uint8_t *p;
    size_t len, cap;
    int err;
};

static void put(struct hx_buf *b, const void *data, size_t n)
{
    if (b->err != 0)
        return;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 1 << 16;
        uint8_t *p;

        while (cap < b->len + n)
            cap *= 2;
        p = realloc(b->p, cap);
        if (p == NULL) {
            b->err = -ENOMEM;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, data, n);
    b->len += n;
}

struct hx_export {
    struct hx_buf *b;
    uint32_t n;
    const struct nfq_thread *t;
};

/* One flow out. A direction that still keeps an earlier database's stream beside its own
 * (a ruleset change on this connection) or whose stream failed is not taken over: its flow
 * meets the policy in the new worker. */
static bool export_flow(void *arg, struct fgx_flow *f)
{
    struct hx_export *x = arg;
    struct hx_flow rec;
    size_t sz[2] = {0, 0};
    char *st[2] = {NULL, NULL};
    uint32_t hs, ha;
    int d;

    /* Bytes the scan passed but a script still judges (nfq_script.c) never reached the peer;
     * the new worker would take their retransmission as passed. Not taken over: the flow
     * meets the policy there. */
    if (f->sw_slot != 0 && (nfq_script_first_held(x->t, f, FGX_DIR_C2S, &hs, &ha) ||
                            nfq_script_first_held(x->t, f, FGX_DIR_S2C, &hs, &ha)))
        return true;
    memset(&rec, 0, sizeof(rec));
    rec.key = f->key;
    rec.service_id = f->service_id;
    rec.blocked = f->blocked;
    rec.embryonic = f->cls == FGX_FLOW_EMBRYONIC;
    for (d = 0; d < 2 && !f->blocked; d++) {
        const struct fgx_reasm *r = &f->dir[d];
        struct hx_dir *o = &rec.dir[d];

        if (r->old_stream != NULL || r->stream_failed)
            goto skip;
        o->active = r->active;
        o->next_seq = r->next_seq;
        o->floor_seq = r->floor_seq;
        o->ring_len = r->ring_len;
        o->ring_pos = r->ring_pos;
        o->db_hash = r->db_hash;
        o->scanned = r->scanned;
        memcpy(o->ring, r->ring, sizeof(o->ring));
        if (r->stream != NULL) {
            if (hs_compress_stream(r->stream, NULL, 0, &sz[d]) != HS_INSUFFICIENT_SPACE ||
                (st[d] = malloc(sz[d])) == NULL ||
                hs_compress_stream(r->stream, st[d], sz[d], &sz[d]) != HS_SUCCESS)
                goto skip;
            o->stream_len = (uint32_t)sz[d];
        }
    }
    put(x->b, &rec, sizeof(rec));
    for (d = 0; d < 2; d++)
        if (st[d] != NULL)
            put(x->b, st[d], sz[d]);
    x->n++;
skip:
    free(st[0]);
    free(st[1]);
    return true;
}

/* Packet thread: answer an export request between two batches. Returns true once this
 * thread has handed its flows over: it must stop reading its queue (what waits there is
 * dropped with the process, fail-closed, and sent again to the next worker). */
bool nfq_handover_poll(struct nfq_thread *t)
{
    struct hx_buf b = {0};
    struct hx_export x = {.b = &b, .t = t};
    uint32_t idx = t->idx, zero = 0;
    size_t at;

    /* Called between batches, whose verdicts (and resets) have gone out already. */
    if (!__atomic_load_n(&t->hx_req, __ATOMIC_ACQUIRE))
        return false;
    put(&b, &idx, sizeof(idx));
    at = b.len;
    put(&b, &zero, sizeof(zero));
    (void)fgx_flow_sweep(t->flows, export_flow, &x);
    if (b.err == 0)
        memcpy(b.p + at, &x.n, sizeof(x.n));
    t->hx_out = b.err == 0 ? b.p : NULL;
    t->hx_out_len = b.err == 0 ? b.len : 0;
    if (b.err != 0)
        free(b.p);
    __atomic_store_n(&t->hx_done, b.err == 0 ? 1 : -1, __ATOMIC_RELEASE);
    return true;
}

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000};

    nanosleep(&ts, NULL);
}

int nfq_handover_export(struct nfq_worker *w, void **data, size_t *len)
{
    struct hx_head h = {HX_MAGIC, HX_VERSION, w->nthreads, (uint32_t)sizeof(struct hx_flow)};
    struct hx_buf b = {0};
    unsigned i, waited = 0;
    int ret = 0;

    for (i = 0; i < w->nthreads; i++) {
        __atomic_store_n(&w->threads[i].hx_req, 1, __ATOMIC_RELEASE);
        nfq_thread_wake(&w->threads[i]);
    }
    for (i = 0; i < w->nthreads; i++) {
        while (__atomic_load_n(&w->threads[i].hx_done, __ATOMIC_ACQUIRE) == 0 &&
               waited < HX_WAIT_MS) {
            sleep_ms(1);
            waited++;
        }
        if (__atomic_load_n(&w->threads[i].hx_done, __ATOMIC_ACQUIRE) != 1)
            ret = -EIO;
    }
    /* The data path has stopped, whatever the outcome: this process ends after the reply. */
    __atomic_store_n(&w->stop, 1, __ATOMIC_RELEASE);
    put(&b, &h, sizeof(h));
    for (i = 0; i < w->nthreads && ret == 0; i++)
        put(&b, w->threads[i].hx_out, w->threads[i].hx_out_len);
    if (ret == 0)
        ret = b.err;
    if (ret != 0) {
        fgx_warn("handover: the flows could not be written out: %s", strerror(-ret));
        free(b.p);
        return ret;
    }
    fgx_info("handover: %zu bytes of flows for the next worker", b.len);
    *data = b.p;
    *len = b.len;
    return 0;
}

int nfq_handover_import(struct nfq_worker *w, const void *data, size_t len)
{
    const uint8_t *p = data, *end = p + len;
    struct hx_head h;
    unsigned i;

    if (len < sizeof(h))
        return -EINVAL;
    memcpy(&h, p, sizeof(h));
    p += sizeof(h);
    if (h.magic != HX_MAGIC || h.version != HX_VERSION || h.flows_size != sizeof(struct hx_flow))
        return -EINVAL;
    if (h.nthreads != w->nthreads) {
        /* The rules spread flows over threads by their count: another count puts a flow on
         * another thread. Nothing is taken over; the connections meet the policy. */
        fgx_warn("handover: flows of %u threads for %u: not taken over", h.nthreads, w->nthreads);
        return 0;
    }
    for (i = 0; i < h.nthreads; i++) {
        const uint8_t *start = p;
        uint32_t idx, n, k;

        if ((size_t)(end - p) < 8)
            return -EINVAL;
        memcpy(&idx, p, 4);
        memcpy(&n, p + 4, 4);
        p += 8;
        for (k = 0; k < n; k++) {
            struct hx_flow rec;

            if ((size_t)(end - p) < sizeof(rec))
                return -EINVAL;
            memcpy(&rec, p, sizeof(rec));
            p += sizeof(rec);
            if ((size_t)(end - p) < (size_t)rec.dir[0].stream_len + rec.dir[1].stream_len)
                return -EINVAL;
            p += (size_t)rec.dir[0].stream_len + rec.dir[1].stream_len;
        }
        if (idx >= w->nthreads || w->threads[idx].hx_in != NULL)
            return -EINVAL;
        w->threads[idx].hx_in = malloc((size_t)(p - start));
        if (w->threads[idx].hx_in == NULL)
            return -ENOMEM;
        memcpy(w->threads[idx].hx_in, start, (size_t)(p - start));
        w->threads[idx].hx_in_len = (size_t)(p - start);
    }
    fgx_info("handover: flows of the previous worker taken (%zu bytes)", len);
    return 0;
}

/* Packet thread, at its first ruleset: rebuild the flows handed over. */
void nfq_handover_apply(struct nfq_thread *t)
{
    const uint8_t *p = t->hx_in;
    uint32_t n, k, taken = 0;

    if (p == NULL)
        return;
    memcpy(&n, p + 4, 4);
    p += 8;
    for (k = 0; k < n; k++) {
        const struct fgx_wsvc *svc;
        struct hx_flow rec;
        const uint8_t *st[2];
        struct fgx_flow *f;
        bool ok = true;
        int d;

        memcpy(&rec, p, sizeof(rec));
        p += sizeof(rec);
        st[0] = p;
        st[1] = p + rec.dir[0].stream_len;
        p += (size_t)rec.dir[0].stream_len + rec.dir[1].stream_len;
        svc = fgx_wcfg_service(t->cfg, rec.service_id);
        if (svc == NULL || fgx_flow_lookup(t->flows, &rec.key, t->now_ms) != NULL)
            continue;
        for (d = 0; d < 2; d++)
            if (rec.dir[d].stream_len > 0 &&
                (svc->db[d] == NULL || svc->db[d]->hash != rec.dir[d].db_hash))
                ok = false;
        if (!ok)
            continue; /* its database changed meanwhile: the stream cannot be rebuilt */
        f = nfq_match_adopt(t, &rec.key, svc, rec.embryonic && !rec.blocked);
        if (f == NULL)
            continue;
        if (rec.blocked) {
            f->blocked = true;
            nfq_match_flow_close(t, f);
            taken++;
            continue;
        }
        nfq_match_attach(t, f, svc);
        for (d = 0; d < 2 && ok; d++) {
            struct fgx_reasm *r = &f->dir[d];
            const struct hx_dir *o = &rec.dir[d];

            r->active = o->active != 0;
            r->next_seq = o->next_seq;
            r->floor_seq = o->floor_seq;
            r->ring_len = o->ring_len <= FGX_REASM_RING ? o->ring_len : FGX_REASM_RING;
            r->ring_pos = o->ring_pos < FGX_REASM_RING ? o->ring_pos : 0;
            memcpy(r->ring, o->ring, sizeof(r->ring));
            if (o->stream_len > 0) {
                if (r->stream != NULL)
                    hs_close_stream(r->stream, NULL, NULL, NULL);
                r->stream = NULL;
                if (hs_expand_stream(r->db, &r->stream, (const char *)st[d], o->stream_len) !=
                    HS_SUCCESS)
                    ok = false;
                r->scanned = o->scanned;
            }
        }
        if (!ok) {
            fgx_flow_remove(t->flows, f);
            continue;
        }
        /* No worker read the queues for a moment: a fail-open one let bytes through unseen. */
        f->resume[0] = f->resume[1] = true;
        taken++;
    }
    if (taken > 0)
        fgx_info("thread %u: %u of %u flows taken over", t->idx, taken, n);
    free(t->hx_in);
    t->hx_in = NULL;
    t->hx_in_len = 0;
}
