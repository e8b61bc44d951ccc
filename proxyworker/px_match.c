/* Match stage of proxyworker: what one side of a connection sent, read into the thread's
 * scratch buffer -> scanned there with the service's stream database for that
 * direction -> passed on to the relay stage, or, on a match, counted, recorded as an event and
 * refused: the relay resets both sides and the matching bytes never reach the other one.
 *
 * Streams are libcommon's reassembly contexts fed in order (the proxy sees a byte stream, so a
 * "sequence number" is just the count of bytes scanned), which gives the proxy the very hot-swap
 * semantics of the NFQUEUE layer: at its first data after a ruleset change a connection keeps a
 * direction's stream when its database is unchanged, and otherwise opens one on the new database
 * primed with the last FGX_REASM_RING bytes that passed, keeping the previous stream beside it
 * while it shares a filter with the new database (so a long partial match of a surviving filter
 * is not lost). A connection whose service left the
 * proxy's ruleset (stopped, or moved to the nfqueue layer) is relayed on without scanning. */
#include "px.h"

#include <errno.h>
#include <string.h>
#include <time.h>

#include "fgx/log.h"

void px_match_switch(struct px_thread *t)
{
    struct fgx_wcfg *cur = __atomic_load_n(&t->w->current, __ATOMIC_ACQUIRE), *old = t->cfg;
    size_t i;
    int d;

    if (cur == old)
        return;
    /* The control thread keeps its own reference until every thread has moved on, so cur
     * cannot be freed between the load and this ref. */
    fgx_wcfg_ref(cur);
    for (i = 0; cur != NULL && i < cur->nservices; i++)
        for (d = 0; d < 2; d++)
            if (cur->svc[i].db[d] != NULL)
                (void)fgx_reasm_ctx_scratch(t->reasm, cur->svc[i].db[d]->db);
    t->cfg = cur;
    t->epoch++;
    fgx_wcfg_unref(old);
    __atomic_store_n(&t->applied, cur, __ATOMIC_RELEASE);
}

static void wdb_unref(void *ref)
{
    fgx_wdb_unref(ref);
}

void px_match_attach(struct px_conn *c)
{
    struct px_thread *t = c->t;
    const struct fgx_wsvc *svc;
    int d;

    c->epoch = t->epoch;
    if (!c->scanning)
        return;
    svc = fgx_wcfg_service(t->cfg, c->service_id);
    if (svc == NULL) {
        /* Gone from the proxy's ruleset: stop scanning for good, as the NFQUEUE layer stops
         * seeing a stopped service's packets. */
        c->scanning = false;
        for (d = 0; d < 2; d++) {
            fgx_reasm_release(t->reasm, &c->dir[d]);
            fgx_wdb_unref(c->dbref[d]);
            c->dbref[d] = NULL;
        }
        return;
    }
    for (d = 0; d < 2; d++) {
        struct fgx_wdb *old = c->dbref[d], *nd = svc->db[d];

        if (c->dir[d].active && (old != NULL ? old->hash : 0) == (nd != NULL ? nd->hash : 0) &&
            (old == NULL) == (nd == NULL))
            continue;
        if (!c->dir[d].active)
            (void)fgx_reasm_start(t->reasm, &c->dir[d], 0);
        fgx_wdb_ref(nd);
        c->dbref[d] = nd;
        /* Our reference on the replaced database goes to reasm, which keeps it while that
         * database's stream stays open beside the new one. */
        (void)fgx_reasm_switch_db(t->reasm, &c->dir[d], nd != NULL ? nd->db : NULL,
                                  nd != NULL ? nd->hash : 0, nd != NULL ? nd->ids : NULL,
                                  nd != NULL ? nd->nids : 0, old, wdb_unref);
    }
}

void px_match_conn_release(struct px_conn *c)
{
    int d;

    for (d = 0; d < 2; d++) {
        fgx_reasm_release(c->t->reasm, &c->dir[d]);
        fgx_wdb_unref(c->dbref[d]);
        c->dbref[d] = NULL;
    }
}

static void sa_split(const struct sockaddr_storage *ss, uint8_t *addr, uint16_t *port)
{
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)ss;

        memcpy(addr, &a->sin_addr, 4);
        *port = ntohs(a->sin_port);
    } else {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ss;

        memcpy(addr, &a->sin6_addr, 16);
        *port = ntohs(a->sin6_port);
    }
}

static void event_record(struct px_conn *c, int side, const struct fgx_reasm_match *m)
{
    struct fgx_dp_event *ev = fgx_evring_claim(&c->t->events);
    struct timespec ts;

    if (ev == NULL)
        return;
    memset(ev, 0, sizeof(*ev));
    clock_gettime(CLOCK_REALTIME, &ts);
    ev->time_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    ev->service_id = c->service_id;
    ev->filter_id = m->filter_id;
    ev->dir = side == 0 ? FGX_DIR_C2S : FGX_DIR_S2C;
    ev->ipproto = IPPROTO_TCP;
    ev->family = c->family;
    sa_split(side == 0 ? &c->client : &c->server, ev->src, &ev->sport);
    sa_split(side == 0 ? &c->server : &c->client, ev->dst, &ev->dport);
    ev->excerpt_len = m->excerpt_len > FGX_DP_EXCERPT_MAX ? FGX_DP_EXCERPT_MAX : m->excerpt_len;
    memcpy(ev->excerpt, m->excerpt, ev->excerpt_len);
    fgx_evring_commit(&c->t->events);
}

int px_match_scan(struct px_conn *c, int side, const uint8_t *data, size_t len)
{
    static __thread unsigned long long last_log;
    struct px_thread *t = c->t;
    struct fgx_reasm *r = &c->dir[side];
    struct fgx_reasm_match m;
    enum fgx_reasm_verdict v;

    if (c->epoch != t->epoch)
        px_match_attach(c);
    /* Scanned even with no database: the ring of passed bytes must be current for when one
     * comes. */
    if (!c->scanning)
        return 0;
    v = fgx_reasm_segment(t->reasm, r, r->next_seq, 0, data, len, 0, t->now_ms, &m);
    if (m.matched) {
        px_stats_filter_blocked(&t->ctr, m.filter_id);
        event_record(c, side, &m);
        return -EACCES;
    }
    if (v != FGX_REASM_ACCEPT) {
        PX_CTR_ADD(&t->ctr.scan_errors, 1);
        fgx_log_ratelimited(&last_log, FGX_LOG_WARN,
                            "service %u: a stream could not be scanned: connection reset",
                            c->service_id);
        return -EIO;
    }
    return 0;
}
