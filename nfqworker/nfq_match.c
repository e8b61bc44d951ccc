/* Match stage of nfqworker: a queued packet -> decoded, classified to a service and direction,
 * matched (UDP: the datagram alone; TCP: its flow's reassembled stream) -> a verdict handed to
 * the verdict stage, plus resets when a TCP flow gets blocked; and a service's SYN-ACK, copied
 * by the anchor stage (nfq_log.c), -> where a flow's two streams start. Runs on the packet
 * threads. */
#include "nfq.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <netinet/in.h>

#include "fgx/log.h"
#include "fgx/pkt.h"

/* A held segment's verdict is given later, so its cookie carries where it goes and whom it
 * counts for: queue (16 bits), service counter slot (16 bits), packet id (32 bits). */
static uint64_t cookie_make(unsigned queue, const struct nfq_thread *t,
                            const struct nfq_svc_ctr *sc, uint32_t id)
{
    uint64_t slot = (uint64_t)(sc - t->ctr.svc);

    return ((uint64_t)(queue & 0xffff) << 48) | (slot << 32) | id;
}

static void verdict(struct nfq_thread *t, unsigned queue, uint32_t id, struct nfq_svc_ctr *sc,
                    bool accept)
{
    if (sc != NULL) {
        if (accept)
            NFQ_CTR_ADD(&sc->accepted, 1);
        else
            NFQ_CTR_ADD(&sc->dropped, 1);
    }
    nfq_verdict_add(t, queue, id, accept);
}

void nfq_match_held_verdict(void *arg, uint64_t cookie, bool accept)
{
    nfq_match_cookie_verdict(arg, cookie, accept);
}

void nfq_match_cookie_verdict(struct nfq_thread *t, uint64_t cookie, bool accept)
{
    verdict(t, (unsigned)(cookie >> 48), (uint32_t)cookie,
            &t->ctr.svc[(cookie >> 32) & 0xffff], accept);
}

bool nfq_match_cookie_verdict_edit(struct nfq_thread *t, uint64_t cookie, const uint8_t *pkt,
                                   size_t len)
{
    struct nfq_svc_ctr *sc = &t->ctr.svc[(cookie >> 32) & 0xffff];

    if (nfq_verdict_add_payload(t, (unsigned)(cookie >> 48), (uint32_t)cookie, pkt, len) != 0)
        return false;
    NFQ_CTR_ADD(&sc->accepted, 1);
    return true;
}

void nfq_match_flow_release(void *arg, struct fgx_flow *f)
{
    struct nfq_thread *t = arg;
    int d;

    if (f->sw_slot != 0)
        nfq_script_flow_end(t, f);
    for (d = 0; d < 2; d++) {
        fgx_reasm_release(t->reasm, &f->dir[d]);
        fgx_wdb_unref(f->dbref[d]);
        f->dbref[d] = NULL;
    }
    if (!f->closed)
        NFQ_CTR_ADD(&nfq_stats_svc(&t->ctr, f->service_id)->flows_active, (uint64_t)-1);
    NFQ_CTR_ADD(&t->ctr.flows, (uint64_t)-1);
}

void nfq_match_flow_close(struct nfq_thread *t, struct fgx_flow *f)
{
    if (f->closed)
        return;
    f->closed = true;
    NFQ_CTR_ADD(&nfq_stats_svc(&t->ctr, f->service_id)->flows_active, (uint64_t)-1);
}

/* A flow whose service is not in the new config (stopped, or removed) is parked, not freed:
 * a stop and start with nothing sent in between then costs the connection nothing, since its
 * streams go on where they were. Its traffic is not queued meanwhile, so at the return each
 * direction's next segment must start no later than where its stream stood (resume). Parked
 * flows get no packets: the idle expiry frees them (NFQ_FLOW_IDLE_MS), the table's bound
 * holds. A service removed and added again has a new id: its flows are taken as unscanned. */
static bool flow_park(void *arg, struct fgx_flow *f)
{
    const struct fgx_wcfg *c = arg;

    if (fgx_wcfg_service(c, f->service_id) == NULL)
        f->resume[0] = f->resume[1] = true;
    return true;
}

void nfq_match_switch(struct nfq_thread *t)
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
    if (cur != NULL)
        fgx_cap_set_switch(&t->caps, cur, t->w->nthreads);
    if (cur != NULL && t->hx_in != NULL)
        nfq_handover_apply(t);
    /* The flows of a service that is gone are parked; the others switch at their next packet. */
    if (cur != NULL)
        fgx_flow_sweep(t->flows, flow_park, cur);
    fgx_wcfg_unref(old);
    __atomic_store_n(&t->applied, cur, __ATOMIC_RELEASE);
}

/* Client -> server by destination first, then server -> client by source: the index makes
 * each a bisection on (protocol, port), whatever the number of services and addresses. */
static const struct fgx_wsvc *classify(const struct fgx_wcfg *c, const struct fgx_pkt *p,
                                          enum fgx_dir *dir)
{
    const struct fgx_wsvc *s;

    s = fgx_wcfg_lookup(c, p->ipproto, p->family, p->daddr, p->dport);
    if (s != NULL) {
        *dir = FGX_DIR_C2S;
        return s;
    }
    s = fgx_wcfg_lookup(c, p->ipproto, p->family, p->saddr, p->sport);
    if (s != NULL)
        *dir = FGX_DIR_S2C;
    return s;
}

static void db_unref(void *ref)
{
    fgx_wdb_unref(ref);
}

/* Bring a flow to the service's current databases, at its first packet after a switch, so an
 * added filter applies from that packet and a removed one never matches again. An unchanged
 * hash keeps the stream (and the database it was opened on): a change elsewhere costs nothing.
 * A changed one opens a stream on the new database, primed with the last FGX_REASM_RING bytes
 * that passed, and keeps the previous stream beside it (with its database: the flow's reference
 * moves to reasm) for as long as it shares a filter with the new one, so a partial match of a
 * surviving filter carries over however long ago it began ("BEGIN" | 1000 bytes | change |
 * "END" still blocks); the old stream's matches count only for filters still in the new
 * database. */
static void flow_attach(struct nfq_thread *t, struct fgx_flow *f, const struct fgx_wsvc *svc)
{
    int d;

    for (d = 0; d < 2; d++) {
        struct fgx_wdb *old = f->dbref[d], *nd = svc->db[d];

        if ((old != NULL ? old->hash : 0) == (nd != NULL ? nd->hash : 0) &&
            (old == NULL) == (nd == NULL))
            continue;
        fgx_wdb_ref(nd);
        f->dbref[d] = nd;
        (void)fgx_reasm_switch_db(t->reasm, &f->dir[d], nd != NULL ? nd->db : NULL,
                                  nd != NULL ? nd->hash : 0, nd != NULL ? nd->ids : NULL,
                                  nd != NULL ? nd->nids : 0, old, db_unref);
    }
}

/* A block becomes an event for controld. src/dst: sender and receiver of the matching bytes. */
static void event_record(struct nfq_thread *t, uint32_t service_id, enum fgx_dir dir,
                         uint8_t ipproto, uint8_t family, const uint8_t *src, uint16_t sport,
                         const uint8_t *dst, uint16_t dport, const struct fgx_reasm_match *m,
                         struct fgx_cap_ring *cr, const struct fgx_cap_ref *cref,
                         uint8_t script_verdict, const char *script_fn)
{
    struct fgx_dp_event *e = fgx_evring_claim(&t->events, service_id);
    size_t alen = family == 4 ? 4 : 16;
    struct timespec ts;

    if (e == NULL)
        return;
    clock_gettime(CLOCK_REALTIME, &ts);
    e->time_ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    e->service_id = service_id;
    e->filter_id = m->filter_id;
    e->dir = (uint8_t)dir;
    e->ipproto = ipproto;
    e->family = family;
    memset(e->src, 0, sizeof(e->src));
    memset(e->dst, 0, sizeof(e->dst));
    memcpy(e->src, src, alen);
    memcpy(e->dst, dst, alen);
    e->sport = sport;
    e->dport = dport;
    e->excerpt_len = m->excerpt_len <= FGX_DP_EXCERPT_MAX ? m->excerpt_len : FGX_DP_EXCERPT_MAX;
    e->match_end = m->match_end <= e->excerpt_len ? m->match_end : e->excerpt_len;
    memcpy(e->excerpt, m->excerpt, e->excerpt_len);
    e->log = m->log;
    e->stream_end = m->log ? m->stream_end : 0;
    /* a ring slot is reused: a filter's event says it is none of a script's */
    e->script_verdict = script_verdict;
    if (script_fn != NULL)
        (void)snprintf(e->script_fn, sizeof(e->script_fn), "%s", script_fn);
    /* The capture waits in its slot (pinned) until the control thread takes it with the event:
     * pinned only once the event is sure to be queued, so no slot waits for an event lost. */
    e->capture = NULL;
    e->capture_len = 0;
    e->cap_slot = e->cap_gen = 0;
    if (cr != NULL && cref != NULL && cref->gen != 0 &&
        (m->log ? fgx_cap_pin_keep(cr, cref) : fgx_cap_pin(cr, cref, m->filter_id))) {
        e->cap_slot = cref->slot;
        e->cap_gen = cref->gen;
    }
    fgx_evring_commit(&t->events);
}

void nfq_match_log(void *arg, const struct fgx_reasm_match *m)
{
    struct nfq_thread *t = arg;
    const struct fgx_flow *f = t->scan_flow;
    const struct fgx_pkt *p = t->scan_pkt;
    enum fgx_dir dir = (enum fgx_dir)t->scan_dir;

    /* Counted before its event is committed, as a block is (fgx_wstats_events()). */
    nfq_stats_filter_matched(&t->ctr, m->filter_id);
    if (f != NULL) {
        const struct fgx_flow_key *k = &f->key;
        /* the game's flag leaving (its reserved id): its event keeps the connection's capture
         * so far, as a block's does; a log filter's keeps none */
        bool flag = m->filter_id == FGX_FILTER_ID_MASK;
        struct fgx_cap_ring *cr = flag ? fgx_cap_set_ring(&t->caps, f->service_id) : NULL;
        struct fgx_cap_ref cref = {f->cap_slot, f->cap_gen};

        if (dir == FGX_DIR_C2S)
            event_record(t, f->service_id, dir, k->ipproto, k->family, k->caddr, k->cport, k->saddr,
                         k->sport, m, cr, flag ? &cref : NULL, 0, NULL);
        else
            event_record(t, f->service_id, dir, k->ipproto, k->family, k->saddr, k->sport, k->caddr,
                         k->cport, m, cr, flag ? &cref : NULL, 0, NULL);
    } else if (p != NULL) {
        event_record(t, t->scan_svc, dir, p->ipproto, p->family, p->saddr, p->sport, p->daddr,
                     p->dport, m, NULL, NULL, 0, NULL);
    }
}

/* Nothing of the flow will be scanned again: its streams, held segments and databases go back
 * now; only the entry stays, so that the rest of the flow keeps being dropped. */
static void flow_blocked(struct nfq_thread *t, struct fgx_flow *f)
{
    int d;

    f->blocked = true;
    nfq_match_flow_close(t, f); /* both ends are reset: not open any more */
    if (f->sw_slot != 0)
        nfq_script_flow_end(t, f); /* what a script still judged is dropped with it */
    for (d = 0; d < 2; d++) {
        fgx_reasm_release(t->reasm, &f->dir[d]);
        f->dir[d].db = NULL;
        fgx_wdb_unref(f->dbref[d]);
        f->dbref[d] = NULL;
    }
}

/* Reset both ends of f after the segment at seq (acknowledging ack) that the sender in dir
 * sent: its peer expects that segment's place next, the sender what it acknowledged. */
static void flow_reset(struct nfq_thread *t, const struct fgx_flow *f, enum fgx_dir dir,
                       uint32_t seq, uint32_t ack)
{
    const struct fgx_flow_key *k = &f->key;

    if (dir == FGX_DIR_C2S) {
        nfq_reset_send(t, k->family, k->caddr, k->cport, k->saddr, k->sport, seq);
        nfq_reset_send(t, k->family, k->saddr, k->sport, k->caddr, k->cport, ack);
    } else {
        nfq_reset_send(t, k->family, k->saddr, k->sport, k->caddr, k->cport, seq);
        nfq_reset_send(t, k->family, k->caddr, k->cport, k->saddr, k->sport, ack);
    }
}

static void block(struct nfq_thread *t, struct fgx_flow *f, enum fgx_dir dir,
                  const struct fgx_reasm_match *m, struct fgx_cap_ring *cr)
{
    const struct fgx_flow_key *k = &f->key;
    struct fgx_cap_ref cref = {f->cap_slot, f->cap_gen};

    nfq_stats_filter_blocked(&t->ctr, m->filter_id);
    if (dir == FGX_DIR_C2S)
        event_record(t, f->service_id, dir, k->ipproto, k->family, k->caddr, k->cport, k->saddr,
                     k->sport, m, cr, &cref, 0, NULL);
    else
        event_record(t, f->service_id, dir, k->ipproto, k->family, k->saddr, k->sport, k->caddr,
                     k->cport, m, cr, &cref, 0, NULL);
    /* The side that sent the matching bytes expects them to be at m->seq in its peer's eyes;
     * the other side's next byte is what the dropped segment acknowledged. Bytes that passed
     * the scan but wait for a script never reached the peer: its next byte is the first of
     * them. */
    {
        uint32_t seq = m->seq, ack = m->ack;

        if (f->sw_slot != 0)
            (void)nfq_script_first_held(t, f, dir, &seq, &ack);
        flow_reset(t, f, dir, seq, ack);
    }
    flow_blocked(t, f);
}

void nfq_match_event_script(struct nfq_thread *t, const struct fgx_flow *f, enum fgx_dir dir,
                            uint8_t verdict, const char *fn, const uint8_t *data, size_t len,
                            uint32_t seq, uint32_t seq_len)
{
    const struct fgx_flow_key *k = &f->key;
    struct fgx_cap_ring *cr = fgx_cap_set_ring(&t->caps, f->service_id);
    struct fgx_cap_ref cref = {f->cap_slot, f->cap_gen};
    struct fgx_reasm_match m = {0};
    size_t room = sizeof(m.excerpt) < FGX_DP_EXCERPT_MAX ? sizeof(m.excerpt) : FGX_DP_EXCERPT_MAX;

    /* the excerpt is the judged bytes' start, as on the proxy layer (filter_id 0) */
    m.excerpt_len = (uint8_t)(len < room ? len : room);
    m.match_end = m.excerpt_len;
    if (data != NULL && m.excerpt_len > 0)
        memcpy(m.excerpt, data, m.excerpt_len);
    /* The judged segment never reached the peer: blocked in the capture, before the pin hands
     * it to the event. */
    if (cr != NULL && cref.gen != 0)
        (void)fgx_cap_block_seq(cr, &cref, dir == FGX_DIR_C2S ? 0 : 1, seq, seq_len,
                                verdict == FGX_DP_SCRIPT_DROP);
    if (dir == FGX_DIR_C2S)
        event_record(t, f->service_id, dir, k->ipproto, k->family, k->caddr, k->cport, k->saddr,
                     k->sport, &m, cr, &cref, verdict, fn);
    else
        event_record(t, f->service_id, dir, k->ipproto, k->family, k->saddr, k->sport, k->caddr,
                     k->cport, &m, cr, &cref, verdict, fn);
}

void nfq_match_flow_block(struct nfq_thread *t, struct fgx_flow *f, enum fgx_dir dir, bool reset,
                          uint32_t seq, uint32_t ack)
{
    if (f->blocked)
        return;
    if (reset)
        flow_reset(t, f, dir, seq, ack);
    flow_blocked(t, f);
}

/* Whether payload segment p (not a SYN's) finds its direction's earlier bytes unscanned: the
 * direction never started (no SYN-ACK anchored the flow: open before the service or the worker
 * existed, the flow evicted or its anchor lost), or its service was away since and p starts
 * beyond where the stream stood (bytes passed unseen meanwhile). Continuing such a direction as
 * if it began here would match its bytes without those before ("ev" | restart | "il1337").
 * Under FGX_MIDSTREAM_RESET the connection is reset, both ends as for a block but counted as
 * midstream_resets, and true returned: p is dropped, and so is the rest of the flow. Under
 * FGX_MIDSTREAM_SCAN the direction starts again at p, as if the connection began there. */
static bool midstream(struct nfq_thread *t, struct fgx_flow *f, enum fgx_dir dir,
                      const struct fgx_pkt *p, const struct fgx_wsvc *svc)
{
    int d = dir == FGX_DIR_C2S ? 0 : 1;
    struct fgx_reasm *r = &f->dir[d];

    if (r->active && !f->resume[d])
        return false;
    if (r->active) {
        int32_t ahead = (int32_t)(p->seq - r->next_seq);

        if (ahead <= 0) {
            /* Nothing beyond the stream's position: in order. A retransmission that ends
             * before it proves nothing yet; one that reaches past it goes on in order. */
            if (ahead + (int64_t)p->payload_len > 0)
                f->resume[d] = false;
            return false;
        }
    }
    f->resume[d] = false;
    if (svc->midstream == FGX_MIDSTREAM_SCAN) {
        if (r->active)
            (void)fgx_reasm_start(t->reasm, r, p->seq);
        return false;
    }
    NFQ_CTR_ADD(&t->ctr.midstream_resets, 1);
    flow_reset(t, f, dir, p->seq, p->ack);
    flow_blocked(t, f);
    return true;
}

/* A flow for key: with stream state (it carries payload), or embryonic (NULL when the table is
 * full of flows with stream state, which an embryonic one never pushes out). */
static struct fgx_flow *flow_new(struct nfq_thread *t, const struct fgx_flow_key *key,
                                 const struct fgx_wsvc *svc, struct nfq_svc_ctr *sc, bool embryonic)
{
    struct fgx_flow *f = embryonic ? fgx_flow_insert_embryonic(t->flows, key, t->now_ms)
                                   : fgx_flow_insert(t->flows, key, t->now_ms);

    if (f == NULL)
        return NULL;
    f->service_id = svc->id;
    NFQ_CTR_ADD(&sc->flows_active, 1);
    NFQ_CTR_ADD(&sc->flows_new, 1);
    NFQ_CTR_ADD(&t->ctr.flows, 1);
    return f;
}

/* A service's SYN-ACK (p, from the server): the server accepted a connection, whose streams
 * start at the SYN-ACK's sequence number + 1 (server) and acknowledgement number (client). */
static void synack_anchor(struct nfq_thread *t, const struct fgx_pkt *p,
                          const struct fgx_wsvc *svc)
{
    struct fgx_flow_key key;
    struct fgx_flow *f;

    fgx_flow_key_from_pkt(p, FGX_DIR_S2C, &key);
    f = fgx_flow_lookup(t->flows, &key, t->now_ms);
    /* The server sent this SYN-ACK before (a retransmission): the flow is this connection's
     * already (blocked or not), and restarting it would make the bytes passed since look
     * missing. A new connection has a new server ISN. (A block releases the directions but
     * keeps where they started.) */
    if (f != NULL && f->service_id == svc->id && (f->dir[1].active || f->blocked) &&
        f->dir[1].floor_seq == p->seq + 1)
        return;
    /* The client's SYN carried data (fast open), queued and scanned, and the server took it:
     * the client's stream goes on from there, in order. Any other position is a new connection
     * on a reused 4-tuple: its bytes must not be taken for the old one's. */
    if (f != NULL && (f->service_id != svc->id || f->blocked ||
                      !(f->dir[0].active && f->dir[0].next_seq == p->ack))) {
        fgx_flow_remove(t->flows, f);
        f = NULL;
    }
    if (f == NULL) {
        f = flow_new(t, &key, svc, nfq_stats_svc(&t->ctr, svc->id), true);
        if (f == NULL) {
            /* No room that an embryonic flow may take: the anchor alone is kept, and the
             * connection's first data starts from it (flow_open()). */
            fgx_flow_anchor_put(t->flows, &key, (const uint32_t[2]){p->ack, p->seq + 1});
            return;
        }
        flow_attach(t, f, svc);
        (void)fgx_reasm_start(t->reasm, &f->dir[0], p->ack);
    } else {
        flow_attach(t, f, svc);
    }
    (void)fgx_reasm_start(t->reasm, &f->dir[1], p->seq + 1);
}

static bool is_synack(const struct fgx_pkt *p)
{
    return (p->tcp_flags & (FGX_TCP_SYN | FGX_TCP_ACK | FGX_TCP_RST)) ==
           (FGX_TCP_SYN | FGX_TCP_ACK);
}

void nfq_match_synack(struct nfq_thread *t, const uint8_t *data, size_t len)
{
    const struct fgx_wsvc *svc;
    struct fgx_pkt p;
    enum fgx_dir dir;

    /* A copy of a packet that went on: nothing to give a verdict to. One we cannot read (only
     * the service itself sends them) anchors nothing; the flow then starts at its first data. */
    if (t->cfg == NULL || fgx_pkt_decode(data, len, &p) != 0 || p.ipproto != IPPROTO_TCP)
        return;
    svc = classify(t->cfg, &p, &dir);
    if (svc == NULL)
        return;
    if (is_synack(&p)) {
        if (dir == FGX_DIR_S2C)
            synack_anchor(t, &p, svc);
        return;
    }
    /* A copy of a FIN or RST (ctl_nft.c): the connection closes. Only the count of open flows
     * follows it; the queued packets alone drive the scan. */
    if (p.tcp_flags & (FGX_TCP_FIN | FGX_TCP_RST)) {
        struct fgx_flow_key key;
        struct fgx_flow *f;

        fgx_flow_key_from_pkt(&p, dir, &key);
        f = fgx_flow_lookup(t->flows, &key, t->now_ms);
        if (f == NULL || f->service_id != svc->id)
            return;
        if (f->sw_slot != 0 && !f->blocked && !(p.tcp_flags & FGX_TCP_RST) &&
            (p.tcp_flags & FGX_TCP_FIN))
            /* a script's state may end with the stream: the FIN's place is after its bytes */
            nfq_script_fin(t, f, dir, p.seq + (uint32_t)p.payload_len);
        if (f->closed)
            return;
        if (p.tcp_flags & FGX_TCP_RST) {
            nfq_match_flow_close(t, f);
            return;
        }
        f->fin[dir == FGX_DIR_C2S ? 0 : 1] = true;
        if (f->fin[0] && f->fin[1])
            nfq_match_flow_close(t, f);
    }
}

/* For each open flow, both directions start again where they are: a segment that begins before
 * that point is dropped, never passed as a retransmission of bytes passed (which it may not be:
 * its SYN-ACK may have been lost, with a new connection behind it). The scan state stays, so a
 * match across this point is still found. An honest retransmission from before it is dropped
 * too: the price of the overflow, counted in queue_drops. */
static bool flow_floor_to_next(void *arg, struct fgx_flow *f)
{
    (void)arg;
    for (int d = 0; d < 2; d++)
        if (f->dir[d].active)
            f->dir[d].floor_seq = f->dir[d].next_seq;
    return true;
}

void nfq_match_synacks_lost(struct nfq_thread *t)
{
    (void)fgx_flow_sweep(t->flows, flow_floor_to_next, NULL);
}

/* The flow for a packet of a connection that has none. With payload it has stream state from
 * now on; a connection whose embryonic flow was pushed out (a SYN-ACK flood) starts from the
 * anchor the table kept, as if it had stayed: nothing of it can have passed unscanned, since
 * all its payload is queued. Without payload (a SYN or an ACK with IP options) it is embryonic,
 * and may find no room (NULL): it has nothing to scan. */
static struct fgx_flow *flow_open(struct nfq_thread *t, const struct fgx_flow_key *key,
                                  const struct fgx_pkt *p, const struct fgx_wsvc *svc,
                                  struct nfq_svc_ctr *sc)
{
    bool syn = (p->tcp_flags & FGX_TCP_SYN) != 0;
    uint32_t anchor[2];
    struct fgx_flow *f;

    if (p->payload_len == 0)
        return flow_new(t, key, svc, sc, true);
    if (syn || !fgx_flow_anchor_take(t->flows, key, anchor))
        return flow_new(t, key, svc, sc, false);
    f = flow_new(t, key, svc, sc, false);
    flow_attach(t, f, svc);
    (void)fgx_reasm_start(t->reasm, &f->dir[0], anchor[0]);
    (void)fgx_reasm_start(t->reasm, &f->dir[1], anchor[1]);
    return f;
}

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A segment's bytes into its flow's capture, at their place in the stream: what passed, what
 * waits ahead of a gap (held) and what was blocked (the bytes that never reached the peer). A
 * flow takes its slot at its first payload; where each direction started is its capture's
 * zero. */
static void cap_segment(struct fgx_cap_ring *cr, struct fgx_flow *f, enum fgx_dir dir, uint32_t seq,
                        const struct fgx_pkt *p, bool blocked)
{
    const struct fgx_flow_key *k = &f->key;
    struct fgx_cap_ref ref = {f->cap_slot, f->cap_gen};
    int d = dir == FGX_DIR_C2S ? 0 : 1;
    uint64_t now = now_ns();

    if (ref.gen == 0) {
        fgx_cap_open(cr, k->ipproto, k->family, k->caddr, k->cport, k->saddr, k->sport, now, &ref);
        if (ref.gen == 0)
            return; /* every slot holds a blocked capture not collected yet */
        f->cap_slot = ref.slot;
        f->cap_gen = ref.gen;
        /* Where each direction the SYN-ACK anchored starts, also one that has sent nothing
         * yet: the pcap's handshake and acknowledgements then carry the real numbers. */
        for (int e = 0; e < 2; e++)
            if (f->dir[e].active)
                fgx_cap_add(cr, &ref, e, f->dir[e].floor_seq, f->dir[e].floor_seq, NULL, 0, now,
                            false);
    }
    fgx_cap_add(cr, &ref, d, f->dir[d].active ? f->dir[d].floor_seq : seq, seq, p->payload,
                p->payload_len, now, blocked);
}

static void tcp_packet(struct nfq_thread *t, unsigned queue, uint32_t id, const struct fgx_pkt *p,
                       const struct fgx_wsvc *svc, enum fgx_dir dir, struct nfq_svc_ctr *sc)
{
    bool syn = (p->tcp_flags & FGX_TCP_SYN) != 0, ack = (p->tcp_flags & FGX_TCP_ACK) != 0;
    struct fgx_reasm_match m;
    enum fgx_reasm_verdict v;
    struct fgx_flow_key key;
    struct fgx_flow *f;
    struct fgx_cap_ring *cr;
    struct fgx_reasm *r;
    uint32_t seq = p->seq, old_next;

    /* What the receiver would discard, passed as scanned, would make the real bytes, sent
     * later at the same sequence numbers, look already passed: dropped before it touches any
     * flow state (nfq_normalize.c). */
    if (!nfq_norm_packet(t, p)) {
        verdict(t, queue, id, sc, false);
        return;
    }
    /* A SYN-ACK the rules queued (a kernel without the log expression, or one with payload):
     * the same anchor as a copy's. With payload it then goes on as the stream's first bytes. */
    if (dir == FGX_DIR_S2C && is_synack(p)) {
        synack_anchor(t, p, svc);
        if (p->payload_len == 0) {
            verdict(t, queue, id, sc, true);
            return;
        }
    }
    fgx_flow_key_from_pkt(p, dir, &key);
    f = fgx_flow_lookup(t->flows, &key, t->now_ms);
    if (f != NULL && f->service_id != svc->id) {
        fgx_flow_remove(t->flows, f);
        f = NULL;
    }
    /* Only a SYN with payload (fast open) or IP options is queued. On a known 4-tuple it does
     * not restart the flow: only the server's SYN-ACK says that a new connection was accepted
     * (nfq_match_synack()). A SYN the server ignores (an established connection answers it with
     * a challenge ACK) would otherwise reset the scan mid-stream, and the bytes after it would be
     * matched without those before. Its data cannot be placed in the old stream: dropped (the
     * client sends it again after the handshake); without data it passes. */
    if (f != NULL && syn && !ack && dir == FGX_DIR_C2S) {
        verdict(t, queue, id, sc, p->payload_len == 0);
        return;
    }
    /* A FIN or RST without payload of a connection without a flow (queued for IP options,
     * say): nothing to scan and nothing to open. */
    if (f == NULL && p->payload_len == 0 && !syn && (p->tcp_flags & (FGX_TCP_FIN | FGX_TCP_RST))) {
        verdict(t, queue, id, sc, true);
        return;
    }
    if (f == NULL) {
        f = flow_open(t, &key, p, svc, sc);
        if (f == NULL) {
            verdict(t, queue, id, sc, true);
            return;
        }
    }
    if (f->blocked) {
        verdict(t, queue, id, sc, false);
        return;
    }
    /* A reset's payload never reaches the application, and a reset the receiver finds out of
     * place is discarded whole: its bytes must not count as passed either. */
    if (p->tcp_flags & FGX_TCP_RST) {
        nfq_match_flow_close(t, f);
        verdict(t, queue, id, sc, true);
        return;
    }
    if (!nfq_norm_segment(t, f, dir, p)) {
        verdict(t, queue, id, sc, false);
        return;
    }
    flow_attach(t, f, svc);
    r = &f->dir[dir == FGX_DIR_C2S ? 0 : 1];
    if (syn) {
        seq++; /* the SYN takes one sequence number; data (TCP fast open) follows it */
        (void)fgx_reasm_start(t->reasm, r, seq);
    } else if (p->payload_len > 0 && midstream(t, f, dir, p, svc)) {
        verdict(t, queue, id, sc, false);
        return;
    }
    /* A scripted flow takes its segments in order only (nfq_script.c). */
    if ((svc->script != NULL || f->sw_slot != 0) &&
        !nfq_script_pre(t, f, svc, dir, seq, p->payload_len)) {
        verdict(t, queue, id, sc, false);
        return;
    }
    if (p->payload_len > 0)
        fgx_flow_promote(t->flows, f);
    t->scan_flow = f;
    t->scan_dir = (uint8_t)dir;
    old_next = r->active ? r->next_seq : seq; /* an inactive direction starts here */
    v = fgx_reasm_segment(t->reasm, r, seq, p->ack, p->payload, p->payload_len,
                          cookie_make(queue, t, sc, id), t->now_ms, &m);
    nfq_norm_passed(t, f, dir, p, v, &m);
    cr = p->payload_len > 0 ? fgx_cap_set_ring(&t->caps, svc->id) : NULL;
    if (cr != NULL && (v != FGX_REASM_DROP || m.matched))
        cap_segment(cr, f, dir, seq, p, m.matched);
    if (m.matched)
        block(t, f, dir, &m, cr);
    /* A FIN the worker sees ends its direction; with both ends done the connection no longer
     * counts as open. (Pure FINs pass the rules and come as NFLOG copies: nfq_match_synack().) */
    if ((p->tcp_flags & FGX_TCP_FIN) && !f->closed) {
        f->fin[dir == FGX_DIR_C2S ? 0 : 1] = true;
        if (f->fin[0] && f->fin[1])
            nfq_match_flow_close(t, f);
    }
    /* Accepted by the regex scan: a script may still have to judge it, or it waits behind
     * packets a script judges. */
    if (v == FGX_REASM_ACCEPT && !f->blocked && (svc->script != NULL || f->sw_slot != 0)) {
        bool held = nfq_script_post(t, f, svc, dir, cookie_make(queue, t, sc, id), seq, p->ack,
                                    p->payload, p->payload_len, old_next);

        /* after the bytes it carries went to the script: a FIN at the stream's end */
        if ((p->tcp_flags & FGX_TCP_FIN) && !f->blocked)
            nfq_script_fin(t, f, dir, seq + (uint32_t)p->payload_len);
        if (held)
            return;
    }
    if (v != FGX_REASM_HOLD)
        verdict(t, queue, id, sc, v == FGX_REASM_ACCEPT);
}

/* The flow of UDP datagram p's 4-tuple (for its script state), made at its first datagram;
 * one of another service on the same 4-tuple (a service removed and added) starts over. */
static struct fgx_flow *udp_flow(struct nfq_thread *t, const struct fgx_pkt *p,
                                 const struct fgx_wsvc *svc, enum fgx_dir dir,
                                 struct nfq_svc_ctr *sc)
{
    struct fgx_flow_key key;
    struct fgx_flow *f;

    fgx_flow_key_from_pkt(p, dir, &key);
    f = fgx_flow_lookup(t->flows, &key, t->now_ms);
    if (f != NULL && f->service_id != svc->id) {
        fgx_flow_remove(t->flows, f);
        f = NULL;
    }
    if (f == NULL)
        f = flow_new(t, &key, svc, sc, false);
    return f;
}

void nfq_match_packet(struct nfq_thread *t, unsigned queue, uint32_t id, const uint8_t *data,
                      size_t len, uint32_t cap_len)
{
    const struct fgx_wsvc *svc;
    struct fgx_reasm_match m;
    struct nfq_svc_ctr *sc;
    struct fgx_pkt p;
    enum fgx_dir dir;
    int rc;

    if (t->cfg == NULL) {
        /* No ruleset yet: a fail-open queue passes, a fail-closed one does not. */
        verdict(t, queue, id, NULL, queue == t->queue[1]);
        return;
    }
    if (cap_len > len) {
        NFQ_CTR_ADD(&t->ctr.truncated, 1);
        verdict(t, queue, id, NULL, false);
        return;
    }
    rc = fgx_pkt_decode(data, len, &p);
    if (rc != 0) {
        /* Only a service's packets are queued, so one we cannot read is dropped, never passed. */
        if (rc == -EMSGSIZE)
            NFQ_CTR_ADD(&t->ctr.truncated, 1);
        else
            NFQ_CTR_ADD(&t->ctr.malformed, 1);
        verdict(t, queue, id, NULL, false);
        return;
    }
    svc = classify(t->cfg, &p, &dir);
    if (svc == NULL) {
        NFQ_CTR_ADD(&t->ctr.unclassified, 1);
        verdict(t, queue, id, NULL, true);
        return;
    }
    sc = nfq_stats_svc(&t->ctr, svc->id);
    NFQ_CTR_ADD(&sc->packets, 1);
    NFQ_CTR_ADD(&sc->bytes[dir == FGX_DIR_S2C], p.l3_len);
    if (p.ipproto == IPPROTO_TCP) {
        tcp_packet(t, queue, id, &p, svc, dir, sc);
        return;
    }
    {
        const struct fgx_wdb *db = svc->db[dir == FGX_DIR_C2S ? 0 : 1];

        t->scan_flow = NULL;
        t->scan_pkt = &p;
        t->scan_svc = svc->id;
        t->scan_dir = (uint8_t)dir;
        rc = fgx_reasm_scan_block(t->reasm, db != NULL ? db->db : NULL, p.payload,
                                  p.payload_len, &m);
    }
    t->scan_pkt = NULL;
    {
        struct fgx_cap_ring *cr = p.payload_len > 0 ? fgx_cap_set_ring(&t->caps, svc->id) : NULL;
        struct fgx_cap_ref ref = {0, 0};

        if (cr != NULL) {
            /* A run of datagrams of one 4-tuple is one capture, as a TCP connection is. */
            bool c2s = dir == FGX_DIR_C2S;

            fgx_cap_udp(cr, p.family, c2s ? p.saddr : p.daddr, c2s ? p.sport : p.dport,
                        c2s ? p.daddr : p.saddr, c2s ? p.dport : p.sport, now_ns(), &ref);
            if (ref.gen != 0)
                fgx_cap_append(cr, &ref, c2s ? 0 : 1, p.payload, p.payload_len, now_ns(), rc == 1);
        }
        if (rc == 1) {
            nfq_stats_filter_blocked(&t->ctr, m.filter_id);
            event_record(t, svc->id, dir, p.ipproto, p.family, p.saddr, p.sport, p.daddr, p.dport,
                         &m, cr, &ref, 0, NULL);
        }
    }
    /* Passed the regexes: a script judges it, in the state of its 4-tuple's flow (issue 27).
     * Only a scripted service's datagrams have flows. */
    if (rc == 0 && svc->script != NULL && p.payload_len > 0) {
        struct fgx_flow *f = udp_flow(t, &p, svc, dir, sc);

        if (f != NULL && nfq_script_datagram(t, f, svc, dir, cookie_make(queue, t, sc, id), &p))
            return;
    }
    verdict(t, queue, id, sc, rc == 0);
}

struct fgx_flow *nfq_match_adopt(struct nfq_thread *t, const struct fgx_flow_key *key,
                                 const struct fgx_wsvc *svc, bool embryonic)
{
    return flow_new(t, key, svc, nfq_stats_svc(&t->ctr, svc->id), embryonic);
}

void nfq_match_attach(struct nfq_thread *t, struct fgx_flow *f, const struct fgx_wsvc *svc)
{
    flow_attach(t, f, svc);
}
