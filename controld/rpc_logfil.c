/* controld control API, what log filters and labels add to the events family: the label of an
 * event's filter (looked up when the event is reported, one store read per distinct filter)
 * and `events --top src`, the event store folded into blocks per source address and filter
 * (ctl_top.c), answered in one request. */
#include "controld/ctl_rpc_cmd.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "controld/ctl_stats.h"
#include "controld/ctl_top.h"

/* A filter looked up for its label: found, or known to be gone (its events outlive it). */
struct label_slot {
    uint32_t id;
    bool found;
    struct ctl_filter f;
};

struct ctl_rpc_logfil {
    struct label_slot *lbl;
    size_t nlbl, caplbl;
    struct ctl_top_row *rows;
    size_t nrows;
    Fgx__Ctl__TopRow *msgs;
    Fgx__Ctl__TopRow **ptrs;
};

void ctl_rpc_logfil_free(struct ctl_rpc_logfil *lf)
{
    if (!lf)
        return;
    for (size_t i = 0; i < lf->nlbl; i++)
        ctl_filter_release(&lf->lbl[i].f);
    free(lf->lbl);
    free(lf->rows);
    free(lf->msgs);
    free(lf->ptrs);
    free(lf);
}

static struct ctl_rpc_logfil *logfil_of(struct ctl_rpc *r)
{
    if (!r->logfil)
        r->logfil = calloc(1, sizeof(*r->logfil));
    return r->logfil;
}

const char *ctl_rpc_filter_label(struct ctl_rpc *r, struct ctl_txn *t, uint32_t filter_id)
{
    struct ctl_rpc_logfil *lf = logfil_of(r);
    struct label_slot *s;

    if (!lf || !t)
        return NULL;
    for (size_t i = 0; i < lf->nlbl; i++)
        if (lf->lbl[i].id == filter_id)
            return lf->lbl[i].found ? lf->lbl[i].f.label : NULL;
    if (lf->nlbl == lf->caplbl) {
        size_t ncap = lf->caplbl ? 2 * lf->caplbl : 8;
        struct label_slot *n = realloc(lf->lbl, ncap * sizeof(*n));

        if (!n)
            return NULL;
        lf->lbl = n;
        lf->caplbl = ncap;
    }
    s = &lf->lbl[lf->nlbl++];
    memset(s, 0, sizeof(*s));
    s->id = filter_id;
    /* Removed since (or unreadable): remembered as gone, so it is asked once. */
    s->found = ctl_store_filter_get(t, filter_id, &s->f) == 0;
    return s->found ? s->f.label : NULL;
}

void ctl_rpc_events_top(struct ctl_rpc *r, const Fgx__Ctl__EventsQuery *q, uint32_t sid,
                        const char *name)
{
    const struct ctl_event **evs = NULL;
    struct ctl_rpc_logfil *lf = logfil_of(r);
    struct ctl_txn *t = NULL;
    size_t n, kept;
    int rv;

    if (strcmp(q->top, "src") != 0) {
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID, "events --top: only 'src' is known");
        return;
    }
    if (!lf) {
        ctl_rpc_store_fail(r, -ENOMEM);
        return;
    }
    r->reply.has_last_seq = 1;
    if (!r->ctx->stats)
        return;
    r->reply.last_seq = ctl_stats_last_seq(r->ctx->stats);
    r->reply.has_events_lost = 1;
    r->reply.events_lost = ctl_stats_events_lost(r->ctx->stats, sid);
    kept = ctl_stats_events_kept(r->ctx->stats);
    evs = calloc(kept ? kept : 1, sizeof(*evs));
    if (!evs) {
        ctl_rpc_store_fail(r, -ENOMEM);
        return;
    }
    /* Every event kept, of the service asked for. */
    n = ctl_stats_events(r->ctx->stats, 0, sid, name, kept, evs);
    if (name && n == 0) {
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_NOT_FOUND, "no such service: %s", name);
        goto out;
    }
    r->reply.has_top_events = 1;
    r->reply.top_events = n;
    rv = ctl_top_src(evs, n, q->has_since_ns ? q->since_ns : 0, &lf->rows, &lf->nrows);
    if (rv == 0 && lf->nrows > 0) {
        lf->msgs = calloc(lf->nrows, sizeof(*lf->msgs));
        lf->ptrs = calloc(lf->nrows, sizeof(*lf->ptrs));
        if (!lf->msgs || !lf->ptrs)
            rv = -ENOMEM;
    }
    if (rv == 0 && lf->nrows > 0)
        rv = ctl_txn_begin(r->ctx->store, false, &t);
    if (rv < 0) {
        ctl_rpc_store_fail(r, rv);
        goto out;
    }
    for (size_t i = 0; i < lf->nrows; i++) {
        const struct ctl_top_row *row = &lf->rows[i];
        Fgx__Ctl__TopRow *m = &lf->msgs[i];

        fgx__ctl__top_row__init(m);
        m->src = (char *)row->src;
        m->filter_id = row->filter_id;
        m->service_id = row->service_id;
        m->service = (char *)row->service;
        m->blocks = row->blocks;
        m->last_ns = row->last_ns;
        m->has_first_ns = 1;
        m->first_ns = row->first_ns;
        m->label = (char *)ctl_rpc_filter_label(r, t, row->filter_id);
        if (row->script_fn[0])
            m->script_function = (char *)row->script_fn;
        lf->ptrs[i] = m;
    }
    r->reply.n_top = lf->nrows;
    r->reply.top = lf->ptrs;
out:
    ctl_txn_abort(t);
    free(evs);
}
