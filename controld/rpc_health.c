/* controld control API, the health log family: `service log [SERVICE]`, what happened to fgex
 * itself (ctl_health.h): one service's entries with the box's own, or every entry. The entries
 * come from the in-memory log, which holds the stored ones since start (ctl_health_store.c). */
#include "controld/ctl_rpc_cmd.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "controld/ctl_health.h"

struct ctl_rpc_health {
    struct ctl_health_entry *entries;
    Fgx__Ctl__HealthEntry *msgs;
    Fgx__Ctl__HealthEntry **ptrs;
    char (*names)[CTL_NAME_MAX + 1];
};

void ctl_rpc_health_free(struct ctl_rpc_health *h)
{
    if (!h)
        return;
    free(h->entries);
    free(h->msgs);
    free(h->ptrs);
    free(h->names);
    free(h);
}

/* A service's name as stored now; a removed one's "#ID". */
static void service_name(const struct ctl_service *svcs, size_t n, uint32_t id, char *out,
                         size_t len)
{
    for (size_t i = 0; i < n; i++)
        if (svcs[i].id == id) {
            snprintf(out, len, "%s", svcs[i].name);
            return;
        }
    snprintf(out, len, "#%u", (unsigned)id);
}

static void do_service_log(struct ctl_rpc *r, const Fgx__Ctl__Request *q)
{
    const Fgx__Ctl__HealthLogQuery *a = q->service_log;
    struct ctl_rpc_health *h = NULL;
    struct ctl_service svc, *svcs = NULL;
    uint32_t sid = UINT32_MAX;
    struct ctl_txn *t = NULL;
    size_t n, first = 0, nsvcs = 0;
    int rv;

    if (ctl_rpc_txn_begin(r, false, &t) < 0)
        return;
    if (a->service && a->service[0]) {
        if (ctl_rpc_service_resolve(r, t, a->service, &svc) < 0)
            goto out;
        sid = svc.id;
    }
    rv = ctl_store_service_list(t, &svcs, &nsvcs);
    if (rv < 0) {
        ctl_rpc_store_fail(r, rv);
        goto out;
    }
    h = calloc(1, sizeof(*h));
    if (h)
        h->entries = malloc(CTL_HEALTH_RING * sizeof(*h->entries));
    if (!h || !h->entries) {
        ctl_rpc_health_free(h);
        ctl_rpc_store_fail(r, -ENOMEM);
        goto out;
    }
    r->health = h;
    /* The newest seq first, so that an entry noted meanwhile is not skipped by a follower. */
    r->reply.has_health_last = 1;
    r->reply.health_last = ctl_health_last_seq();
    n = ctl_health_list(a->has_after_seq ? a->after_seq : 0, sid, h->entries, CTL_HEALTH_RING);
    while (n > 0 && h->entries[n - 1].seq > r->reply.health_last)
        n--;
    if (a->has_since_ns)
        while (first < n && h->entries[first].time_ns < a->since_ns)
            first++;
    if (a->has_limit && a->limit > 0 && n - first > a->limit)
        first = n - a->limit;
    n -= first;
    h->msgs = calloc(n ? n : 1, sizeof(*h->msgs));
    h->ptrs = calloc(n ? n : 1, sizeof(*h->ptrs));
    h->names = calloc(n ? n : 1, sizeof(*h->names));
    if (!h->msgs || !h->ptrs || !h->names) {
        ctl_rpc_store_fail(r, -ENOMEM);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        const struct ctl_health_entry *e = &h->entries[first + i];
        Fgx__Ctl__HealthEntry *m = &h->msgs[i];

        fgx__ctl__health_entry__init(m);
        m->seq = e->seq;
        m->time_ns = e->time_ns;
        m->has_service_id = 1;
        m->service_id = e->service_id;
        if (e->service_id != 0) {
            service_name(svcs, nsvcs, e->service_id, h->names[i], sizeof(h->names[i]));
            m->service = h->names[i];
        }
        m->level = (char *)ctl_health_level_name(e->level);
        m->kind = (char *)e->kind;
        m->text = (char *)e->text;
        if (e->count > 0) {
            m->has_count = 1;
            m->count = e->count;
        }
        h->ptrs[i] = m;
    }
    r->reply.n_health_log = n;
    r->reply.health_log = h->ptrs;
out:
    free(svcs);
    ctl_txn_abort(t);
}

const struct ctl_rpc_cmd ctl_rpc_health_cmds[] = {
    {FGX__CTL__REQUEST__REQ_SERVICE_LOG, do_service_log, 0},
    {0, NULL, 0},
};

static const char *layer_name(enum ctl_layer l)
{
    return l == CTL_LAYER_PROXY ? "proxy" : l == CTL_LAYER_EXTERNAL ? "external" : "nfqueue";
}

/* The addresses as a list ("10.0.0.2:80, [fd00::1]:80"), cut to len. */
static void addrs_text(const struct ctl_service *s, char *out, size_t len)
{
    size_t at = 0;

    out[0] = '\0';
    for (size_t i = 0; i < s->naddrs && at + 1 < len; i++) {
        char one[FGX_SVCADDR_TEXT_MAX];
        int w;

        (void)fgx_svcaddr_format(&s->addrs[i], one, sizeof(one));
        w = snprintf(out + at, len - at, "%s%s", i ? ", " : "", one);
        if (w < 0)
            break;
        at += (size_t)w;
    }
}

void ctl_rpc_health_service_changed(const struct ctl_service *before,
                                    const struct ctl_service *after)
{
    bool addrs_same = before->naddrs == after->naddrs;

    if (before->layer != after->layer)
        ctl_health_note(after->id, CTL_HEALTH_INFO, "layer", 0,
                        "service %s switched from the %s layer to the %s layer", after->name,
                        layer_name(before->layer), layer_name(after->layer));
    if (before->fail_open != after->fail_open)
        ctl_health_note(
            after->id, after->fail_open ? CTL_HEALTH_WARN : CTL_HEALTH_INFO, "fail-open", 0,
            after->fail_open ? "service %s: fail_open on (traffic passes unfiltered when the "
                               "worker cannot take it)"
                             : "service %s: fail_open off (traffic is dropped when the worker "
                               "cannot take it)",
            after->name);
    for (size_t i = 0; addrs_same && i < after->naddrs; i++)
        addrs_same = fgx_svcaddr_equal(&before->addrs[i], &after->addrs[i]);
    if (!addrs_same) {
        char was[160], now[160];

        addrs_text(before, was, sizeof(was));
        addrs_text(after, now, sizeof(now));
        ctl_health_note(after->id, CTL_HEALTH_INFO, "addresses", 0,
                        "service %s: addresses %s (were %s)", after->name, now, was);
    }
}
