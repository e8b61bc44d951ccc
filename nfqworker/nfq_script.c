/* Script stage of nfqworker (issue 16): on a flow of a service with a script, the bytes the
 * regex scan accepted go to scriptworker's interpreters (fgx/swproto.h, the frames the proxy
 * sends, over the packet thread's own sockets, polled by its loop) and the packet's verdict
 * waits, as a held out-of-order segment's does, until the script's comes back. Verdicts leave
 * in stream order: a flow's later packets wait behind its earlier held ones. ACCEPT passes the
 * held packets; REJECT resets both ends and drops, as a regex block does; DROP drops them and
 * every later packet of the flow without telling the ends (a black hole, as the proxy's DROP).
 * An exception, a call past the deadline or no scriptworker: the service's fail_open choice.
 * A flow of a service without a script never gets here (one pointer test per segment).
 * UDP (issue 27): each datagram is one chunk, judged alone (REJECT and DROP refuse that
 * datagram, the flow's state goes on), in a flow per 4-tuple that ends after NFQ_UDP_IDLE_MS
 * without a datagram. A function's edit of a datagram (data =, l4_data) goes on as the new bytes:
 * the held datagram's IP and UDP headers are kept, its lengths and checksums made anew. */
#include "nfq.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <netinet/in.h>

#include "fgx/log.h"
#include "fgx/pkt.h"
#include "fgx/swlink.h"
#include "fgx/swproto.h"

/* Flows of a thread known to scriptworker at once: --script-flows (NFQ_SW_FLOWS_DEFAULT). A
 * flow's slot is freed when its script verdict becomes final, when both its streams reached
 * their FINs, or (a full table) when it is the one idle longest with nothing waiting; a table
 * full of live flows gives new ones the fail_open verdict rather than dropping their segments
 * (that stalled every new connection). f->sw_slot past the slots: what became of a flow's
 * script state. */
#define NFQ_SW_FINAL UINT32_MAX      /* a final ACCEPT (or fail-open): no more calls */
#define NFQ_SW_GONE (UINT32_MAX - 1) /* both streams ended: bytes beyond are dropped */
#define NFQ_SW_LOST (UINT32_MAX - 2) /* reclaimed while open: later bytes get fail_open */
#define NFQ_SW_RECLAIM_MS 2000       /* idle this long, a flow's slot may go to a new one */
/* Packets of a thread waiting on scripts: they wait in the kernel's queue, so well under its
 * length (NFQ_QUEUE_MAXLEN), past which a fail-open queue would pass packets unjudged. */
#define NFQ_SW_HELD 2048u
#define NFQ_SW_FLOW_HELD 256u /* of one flow */
#define NFQ_SW_STARVED 20     /* as the proxy: scriptworker's own limit, in deadlines */
#define NFQ_SW_GRACE_MS 1000
#define NFQ_SW_HDR_MAX 128 /* a datagram's IP and UDP headers kept for an edit; longer: no edit */

struct nfq_sw_pkt {
    uint64_t cookie;
    uint32_t seq, ack; /* the segment's place in its stream, and what it acknowledged */
    uint32_t end;      /* its stream's position after it */
    uint32_t swseq;    /* the DATA frame it waits for; 0: none (it waits behind the others) */
    int32_t next;      /* FIFO / free list; -1: end */
    uint8_t dir;
    bool ready; /* its own verdict is given: it leaves once those ahead of it left */
    bool drop;  /* that verdict is DROP (a refused datagram); a TCP segment's is ACCEPT */
    /* the start of the bytes its frame took to the script: a block's event shows them (the
     * packet's own buffer is the kernel's, gone once the recv loop moves on) */
    uint8_t exlen;
    uint8_t ex[FGX_DP_EXCERPT_MAX];
    /* a UDP datagram's IP and UDP headers (hdrlen bytes; 0: none kept), and the packet its
     * edit made (malloc'd, at the edit only), sent instead at its turn */
    uint8_t hdrlen, family;
    uint8_t hdr[NFQ_SW_HDR_MAX];
    uint8_t *edit;
    uint32_t edit_len;
};

struct nfq_sw_flow {
    struct fgx_flow *f; /* NULL: free */
    uint64_t id;        /* serial x nslots + slot: a late answer never meets a
                         * newer flow in the same slot */
    uint16_t hash;
    bool opened; /* scriptworker knows the flow */
    int32_t head, tail;
    uint32_t nheld;
    /* bit per direction: a FIN came, at fin_seq (a pure FIN's copy may come before the data
     * ahead of it, which still goes to the script) */
    uint8_t fin_ok;
    uint32_t fin_seq[2];
    uint64_t deadline_ms; /* of the oldest unanswered frame; 0: none */
};

struct nfq_sw {
    struct fgx_swlink link; /* the socket, the frames' seq, the files sent */
    struct nfq_sw_flow *flows; /* nslots (--script-flows) */
    uint32_t nslots;
    struct nfq_sw_pkt pkts[NFQ_SW_HELD];
    int32_t free_head;
    uint32_t cursor, nflows;
    uint64_t serial;
};

/* The link's sender under this file's name for it: the verdict and flow paths call it. */
static int sw_send(struct nfq_sw *sw, const struct fgx_sw_hdr *h, const void *p)
{
    return fgx_swlink_send(&sw->link, h, p);
}

/* The link's lookup: a call's log entry (an exception, a timeout) gets its flow's addresses,
 * so its event names the client. */
static bool conn_where(void *arg, uint64_t conn, struct fgx_dp_script_log *e)
{
    struct nfq_sw *sw = arg;
    const struct nfq_sw_flow *fs = &sw->flows[conn % sw->nslots];
    size_t al;

    if (fs->f == NULL || fs->id != conn || (fs->f->key.family != 4 && fs->f->key.family != 6))
        return false;
    al = fs->f->key.family == 4 ? 4 : 16;
    e->family = fs->f->key.family;
    memcpy(e->caddr, fs->f->key.caddr, al);
    memcpy(e->saddr, fs->f->key.saddr, al);
    e->cport = fs->f->key.cport;
    e->sport = fs->f->key.sport;
    return true;
}

int nfq_script_thread_init(struct nfq_thread *t, const char *url)
{
    struct nfq_sw *sw;
    int rv;

    if (url == NULL || *url == '\0')
        return 0;
    sw = calloc(1, sizeof(*sw));
    if (sw == NULL)
        return -ENOMEM;
    t->sw = sw;
    sw->nslots = t->w->script_flows ? t->w->script_flows : NFQ_SW_FLOWS_DEFAULT;
    sw->flows = calloc(sw->nslots, sizeof(*sw->flows)); /* pages touched as slots are used */
    if (sw->flows == NULL)
        return -ENOMEM;
    sw->link.fd = -1;
    for (uint32_t i = 0; i < NFQ_SW_HELD; i++)
        sw->pkts[i].next = i + 1 < NFQ_SW_HELD ? (int32_t)(i + 1) : -1;
    sw->free_head = 0;
    /* its own sockets to the interpreters (fgx/swproto.h), named by pid and thread */
    rv = fgx_swlink_init(&sw->link, url, ((uint64_t)getpid() << 16) | t->idx);
    sw->link.conn_fn = conn_where;
    sw->link.conn_arg = sw;
    return rv;
}

void nfq_script_thread_release(struct nfq_thread *t)
{
    struct nfq_sw *sw = t->sw;

    if (sw == NULL)
        return;
    fgx_swlink_release(&sw->link);
    free(sw->flows);
    free(sw);
    t->sw = NULL;
}

int nfq_script_fd(const struct nfq_thread *t)
{
    return t->sw != NULL ? t->sw->link.fd : -1;
}

void nfq_script_switch(struct nfq_thread *t)
{
    if (t->sw != NULL)
        fgx_swlink_switch(&t->sw->link, t->cfg);
}

static bool svc_scripted(const struct fgx_wsvc *svc, enum fgx_dir dir)
{
    return svc->script != NULL && (svc->script_dirs & (dir == FGX_DIR_C2S ? 1u : 2u));
}

static bool slot_live(const struct fgx_flow *f)
{
    return f->sw_slot != 0 && f->sw_slot < NFQ_SW_LOST;
}

static struct nfq_sw_flow *flow_state(struct nfq_sw *sw, const struct fgx_flow *f)
{
    return sw != NULL && slot_live(f) ? &sw->flows[f->sw_slot - 1] : NULL;
}

/* fs's flow leaves scriptworker (CLOSE) and its slot is free; f->sw_slot becomes mark. */
static void flow_forget(struct nfq_thread *t, struct nfq_sw_flow *fs, uint32_t mark)
{
    struct nfq_sw *sw = t->sw;
    struct fgx_flow *f = fs->f;
    struct fgx_sw_hdr h = {
        .type = FGX_SW_CLOSE, .hash = fs->hash, .service = f->service_id, .conn = fs->id};

    if (fs->opened)
        (void)sw_send(sw, &h, NULL);
    fs->f = NULL;
    f->sw_slot = mark;
    sw->nflows--;
    NFQ_CTR_ADD(&t->ctr.script_flows, (uint64_t)-1);
}

/* Both streams of fs's flow reached their FINs and nothing of it waits: its state goes (no
 * receiver takes a byte past a FIN; one that comes is dropped, never passed unjudged). A
 * direction the script does not read needs its FIN only: its bytes may not even be queued
 * (no regex of that direction), so its stream position says nothing. */
static void flow_maybe_done(struct nfq_thread *t, struct nfq_sw_flow *fs)
{
    const struct fgx_wsvc *svc =
        t->cfg != NULL ? fgx_wcfg_service(t->cfg, fs->f->service_id) : NULL;

    if (fs->head >= 0 || fs->fin_ok != 3 || svc == NULL)
        return;
    for (int d = 0; d < 2; d++) {
        const struct fgx_reasm *r = &fs->f->dir[d];

        if (svc_scripted(svc, d == 0 ? FGX_DIR_C2S : FGX_DIR_S2C) && r->active &&
            r->next_seq != fs->fin_seq[d])
            return;
    }
    flow_forget(t, fs, NFQ_SW_GONE);
}

static void pkt_free(struct nfq_thread *t, int32_t i)
{
    struct nfq_sw *sw = t->sw;

    free(sw->pkts[i].edit);
    sw->pkts[i].edit = NULL;
    sw->pkts[i].next = sw->free_head;
    sw->free_head = i;
    NFQ_CTR_ADD(&t->ctr.script_held, (uint64_t)-1);
}

static int32_t pkt_alloc(struct nfq_thread *t)
{
    struct nfq_sw *sw = t->sw;
    int32_t i = sw->free_head;

    if (i >= 0) {
        sw->free_head = sw->pkts[i].next;
        NFQ_CTR_ADD(&t->ctr.script_held, 1);
    }
    return i;
}

/* Every held packet of fs goes with verdict accept (in order), the state stays. */
static void held_flush(struct nfq_thread *t, struct nfq_sw_flow *fs, bool accept)
{
    struct nfq_sw *sw = t->sw;

    while (fs->head >= 0) {
        int32_t i = fs->head;

        fs->head = sw->pkts[i].next;
        nfq_match_cookie_verdict(t, sw->pkts[i].cookie, accept);
        pkt_free(t, i);
    }
    fs->tail = -1;
    fs->nheld = 0;
    fs->deadline_ms = 0;
}

/* Packet i joins the end of the flow's held list (TCP segments and UDP datagrams alike); the
 * first one held starts the flow's clock. */
static void held_append(struct nfq_thread *t, struct nfq_sw_flow *fs, int32_t i,
                        uint32_t deadline_ms)
{
    struct nfq_sw *sw = t->sw;

    if (fs->tail >= 0)
        sw->pkts[fs->tail].next = i;
    else
        fs->head = i;
    fs->tail = i;
    fs->nheld++;
    if (fs->deadline_ms == 0)
        fs->deadline_ms = t->now_ms + (uint64_t)deadline_ms * NFQ_SW_STARVED + NFQ_SW_GRACE_MS;
}

/* The packets at the head whose own verdict is ACCEPT leave; the clock then runs for the
 * next unanswered one. */
static void held_release(struct nfq_thread *t, struct nfq_sw_flow *fs, uint32_t deadline_ms)
{
    struct nfq_sw *sw = t->sw;

    while (fs->head >= 0 && sw->pkts[fs->head].ready) {
        int32_t i = fs->head;

        fs->head = sw->pkts[i].next;
        if (sw->pkts[i].edit == NULL || sw->pkts[i].drop ||
            !nfq_match_cookie_verdict_edit(t, sw->pkts[i].cookie, sw->pkts[i].edit,
                                           sw->pkts[i].edit_len))
            nfq_match_cookie_verdict(t, sw->pkts[i].cookie, !sw->pkts[i].drop);
        pkt_free(t, i);
        fs->nheld--;
    }
    if (fs->head < 0)
        fs->tail = -1;
    fs->deadline_ms =
        fs->head >= 0 ? t->now_ms + (uint64_t)deadline_ms * NFQ_SW_STARVED + NFQ_SW_GRACE_MS : 0;
}

/* A final ACCEPT (the connection is decided: a setting such as FGEX_FULL_STREAM_ACTION
 * ACCEPT, or no function can be called on it any more): what waits goes, later packets pass
 * without a call, as Firegex stops calling the filters. The answers to frames already sent are
 * ACCEPTs too, and find no flow. */
static void flow_final(struct nfq_thread *t, struct nfq_sw_flow *fs, uint32_t deadline_ms)
{
    for (int32_t i = fs->head; i >= 0; i = t->sw->pkts[i].next)
        t->sw->pkts[i].ready = true;
    held_release(t, fs, deadline_ms);
    NFQ_CTR_ADD(&t->ctr.script_final, 1);
    flow_forget(t, fs, NFQ_SW_FINAL);
}

void nfq_script_flow_end(struct nfq_thread *t, struct fgx_flow *f)
{
    struct nfq_sw *sw = t->sw;
    struct nfq_sw_flow *fs = flow_state(sw, f);

    if (fs == NULL)
        return;
    /* A flow that goes while a script judges it (evicted, expired, blocked): its unjudged
     * packets never pass. */
    held_flush(t, fs, false);
    flow_forget(t, fs, 0);
}

void nfq_script_fin(struct nfq_thread *t, struct fgx_flow *f, enum fgx_dir dir, uint32_t seq)
{
    struct nfq_sw_flow *fs = flow_state(t->sw, f);
    const struct fgx_reasm *r = &f->dir[dir == FGX_DIR_C2S ? 0 : 1];
    int d = dir == FGX_DIR_C2S ? 0 : 1;

    if (fs == NULL)
        return;
    /* The first FIN of a direction names its end (its copy may come before the data ahead of
     * it, which still goes to the script: the state goes once the stream got there); one
     * before what already passed is not one the receiver takes. A FIN placed anywhere else
     * only keeps the state, never ends the judging early. */
    if (!(fs->fin_ok & (1u << d)) && !(r->active && (int32_t)(seq - r->next_seq) < 0)) {
        fs->fin_ok |= (uint8_t)(1u << d);
        fs->fin_seq[d] = seq;
    }
    flow_maybe_done(t, fs);
}

static bool flow_udp(const struct fgx_flow *f)
{
    return f->key.ipproto == IPPROTO_UDP;
}

/* What a script (or its failure) decided for the datagram held at at (at < 0: every one
 * held, for a scriptworker that did not answer): it passes or is dropped, in its turn; the
 * flow goes on either way, as Firegex's does (a datagram closes nothing). */
static void judge_datagram(struct nfq_thread *t, struct nfq_sw_flow *fs, uint8_t code, int32_t at,
                           const char *fn)
{
    struct fgx_flow *f = fs->f;
    const struct fgx_wsvc *svc = t->cfg != NULL ? fgx_wcfg_service(t->cfg, f->service_id) : NULL;
    uint32_t deadline = svc != NULL ? svc->script_deadline_ms : 100;
    bool pass;

    if (code == FGX_SW_ERROR || code == FGX_SW_TIMEOUT) {
        NFQ_CTR_ADD(code == FGX_SW_TIMEOUT ? &t->ctr.script_timeouts : &t->ctr.script_errors, 1);
        pass = svc != NULL && svc->fail_open;
    } else {
        pass = code == FGX_SW_ACCEPT;
        if (!pass)
            NFQ_CTR_ADD(&t->ctr.script_blocked, 1);
        if (!pass && fn != NULL && at >= 0 && (code == FGX_SW_REJECT || code == FGX_SW_DROP)) {
            const struct nfq_sw_pkt *p = &t->sw->pkts[at];

            nfq_match_event_script(t, f, (enum fgx_dir)p->dir,
                                   code == FGX_SW_REJECT ? FGX_DP_SCRIPT_REJECT
                                                         : FGX_DP_SCRIPT_DROP,
                                   fn, p->ex, p->exlen, 0, p->end - p->seq);
        }
    }
    for (int32_t i = at >= 0 ? at : fs->head; i >= 0; i = at >= 0 ? -1 : t->sw->pkts[i].next) {
        t->sw->pkts[i].ready = true;
        t->sw->pkts[i].drop = !pass;
    }
    held_release(t, fs, deadline);
}

/* What a script (or its failure) decided for fs's flow as a whole; fn: the function that
 * judged (the verdict frame's, at >= 0), NULL for a verdict given here. */
static void judge(struct nfq_thread *t, struct nfq_sw_flow *fs, uint8_t code, int32_t at,
                  const char *fn)
{
    struct fgx_flow *f = fs->f;
    const struct fgx_wsvc *svc = t->cfg != NULL ? fgx_wcfg_service(t->cfg, f->service_id) : NULL;
    bool fail_open = svc != NULL && svc->fail_open;
    uint32_t deadline = svc != NULL ? svc->script_deadline_ms : 100;

    if (flow_udp(f)) {
        judge_datagram(t, fs, code, at, fn);
        return;
    }
    if (code == FGX_SW_ERROR || code == FGX_SW_TIMEOUT) {
        NFQ_CTR_ADD(code == FGX_SW_TIMEOUT ? &t->ctr.script_timeouts : &t->ctr.script_errors, 1);
        code = fail_open ? FGX_SW_ACCEPT : FGX_SW_REJECT;
        fn = NULL;
    } else if (code != FGX_SW_ACCEPT && code != FGX_SW_REJECT && code != FGX_SW_DROP) {
        fn = NULL; /* a code this worker does not know: blocked, as before, but no function's */
    }
    if (code == FGX_SW_ACCEPT) {
        if (at >= 0)
            t->sw->pkts[at].ready = true;
        else
            for (int32_t i = fs->head; i >= 0; i = t->sw->pkts[i].next)
                t->sw->pkts[i].ready = true;
        held_release(t, fs, deadline);
        flow_maybe_done(t, fs);
        return;
    }
    NFQ_CTR_ADD(&t->ctr.script_blocked, 1);
    if (fn != NULL && at >= 0) {
        /* A function's block (a failure's fail-closed verdict is its own event, scriptworker's
         * log entry): an event like a regex block, the bytes its frame took as the excerpt.
         * Only here, on a block: nothing per packet but the copy into the held slot. */
        const struct nfq_sw_pkt *p = &t->sw->pkts[at];

        nfq_match_event_script(t, f, (enum fgx_dir)p->dir,
                               code == FGX_SW_REJECT ? FGX_DP_SCRIPT_REJECT : FGX_DP_SCRIPT_DROP,
                               fn, p->ex, p->exlen, p->seq, p->end - p->seq);
    }
    if (code == FGX_SW_REJECT && fs->head >= 0) {
        /* The receiver of the first held segment expects its bytes next: that is where both
         * ends are reset, as for a regex block at that segment. */
        const struct nfq_sw_pkt p = t->sw->pkts[fs->head];

        held_flush(t, fs, false);
        nfq_match_flow_block(t, f, (enum fgx_dir)p.dir, true, p.seq, p.ack);
        return;
    }
    held_flush(t, fs, false);
    if (code == FGX_SW_REJECT) {
        nfq_match_flow_block(t, f, FGX_DIR_C2S, true, f->dir[0].next_seq, f->dir[1].next_seq);
        return;
    }
    /* DROP: the flow stays open in the ends' eyes; nothing of it passes from now on (a
     * blocked flow's packets are dropped before they reach a stage) */
    nfq_match_flow_block(t, f, FGX_DIR_C2S, false, 0, 0);
}

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

/* The edited datagram for held packet p: its own IP and UDP headers, then data (n bytes), the
 * IP and UDP lengths and both checksums made anew (IPv4: header and UDP; IPv6: UDP). 0, or
 * -EMSGSIZE (no headers kept, or too long for a packet), -ENOMEM. */
static int datagram_edit(struct nfq_sw_pkt *p, const uint8_t *data, size_t n)
{
    size_t hl = p->hdrlen, tot = hl + n, alen = p->family == 4 ? 4 : 16;
    uint8_t *b, *udp;
    uint32_t sum;
    uint16_t ck;

    if (hl == 0 || tot > 65535 || (p->family == 6 && tot - 40 > 65535))
        return -EMSGSIZE;
    b = malloc(tot);
    if (b == NULL)
        return -ENOMEM;
    memcpy(b, p->hdr, hl);
    memcpy(b + hl, data, n);
    udp = b + hl - 8;
    if (p->family == 4) {
        size_t ihl = (size_t)(b[0] & 0x0f) * 4;

        put16(b + 2, (uint16_t)tot);
        put16(b + 10, 0);
        put16(b + 10, fgx_csum_fold(fgx_csum_add(0, b, ihl)));
    } else {
        put16(b + 4, (uint16_t)(tot - 40));
    }
    put16(udp + 4, (uint16_t)(8 + n));
    put16(udp + 6, 0);
    sum = fgx_csum_add(0, b + (p->family == 4 ? 12 : 8), alen);
    sum = fgx_csum_add(sum, b + (p->family == 4 ? 16 : 24), alen);
    sum += IPPROTO_UDP + (uint32_t)(8 + n);
    sum = fgx_csum_add(sum, udp, 8 + n);
    ck = fgx_csum_fold(sum);
    put16(udp + 6, ck == 0 ? 0xffff : ck);
    free(p->edit);
    p->edit = b;
    p->edit_len = (uint32_t)tot;
    return 0;
}

void nfq_script_recv(struct nfq_thread *t)
{
    struct nfq_sw *sw = t->sw;

    if (sw == NULL || !sw->link.up)
        return;
    t->now_ms = nfq_now_ms();
    for (;;) {
        struct nfq_sw_flow *fs;
        struct fgx_sw_hdr h;
        char fn[FGX_DP_SCRIPT_FN_MAX];
        const uint8_t *pl;
        size_t pl_len;
        int32_t at;

        /* A VERDICT. LOG frames went to the log queue on the way: a block's "block" entry,
         * before its verdict, is taken with (or before) the verdict's event, since the stats
         * take the events first, then the log (nfq_stats_collect()). */
        if (fgx_swlink_recv(&sw->link, &h, &pl, &pl_len) != 0)
            break;
        fgx_swlink_verdict_fn(pl, pl_len, fn, sizeof(fn));
        fs = &sw->flows[h.conn % sw->nslots];
        if (fs->f == NULL || fs->id != h.conn)
            continue; /* gone meanwhile */
        for (at = fs->head; at >= 0 && sw->pkts[at].swseq != h.seq; at = sw->pkts[at].next)
            ;
        if (at < 0)
            continue; /* the tick already decided */
        if (h.code == FGX_SW_EDIT && flow_udp(fs->f)) {
            /* a function edited the datagram: the new bytes go instead, in its turn */
            size_t fl = strnlen((const char *)pl, pl_len);
            size_t n = fl < pl_len ? pl_len - fl - 1 : 0;

            h.code = datagram_edit(&sw->pkts[at], pl + fl + (fl < pl_len ? 1 : 0), n) == 0
                         ? FGX_SW_ACCEPT
                         : FGX_SW_ERROR;
            if (h.code == FGX_SW_ERROR) {
                static __thread unsigned long long last_log;

                fgx_log_ratelimited(&last_log, FGX_LOG_WARN,
                                    "script: an edited datagram of %zu bytes could not be "
                                    "built: the service's fail policy",
                                    n);
            }
        }
        if (h.code == FGX_SW_ACCEPT && (h.hash & FGX_SW_VERDICT_FINAL)) {
            const struct fgx_wsvc *svc =
                t->cfg != NULL ? fgx_wcfg_service(t->cfg, fs->f->service_id) : NULL;

            flow_final(t, fs, svc != NULL ? svc->script_deadline_ms : 100);
            continue;
        }
        judge(t, fs, h.code, at, fn);
    }
    nfq_verdict_flush(t);
}

void nfq_script_tick(struct nfq_thread *t)
{
    struct nfq_sw *sw = t->sw;

    if (sw == NULL || sw->nflows == 0)
        return;
    for (uint32_t i = 0; i < sw->nslots; i++) {
        struct nfq_sw_flow *fs = &sw->flows[i];

        if (fs->f != NULL && fs->deadline_ms != 0 && fs->deadline_ms <= t->now_ms) {
            static __thread unsigned long long last_log;

            /* scriptworker did not answer at all (down, restarting): as an error */
            fgx_log_ratelimited(&last_log, FGX_LOG_WARN,
                                "script: no verdict from scriptworker in time: fail_open verdict");
            judge(t, fs, FGX_SW_ERROR, -1, NULL);
        }
        /* A UDP flow has no end but silence: the flow goes, its state with it (CLOSE), and
         * its next datagram starts a new one (fresh globals for the file) */
        if (fs->f != NULL && flow_udp(fs->f) && fs->head < 0 &&
            fs->f->last_ms + t->w->udp_idle_ms <= t->now_ms)
            fgx_flow_remove(t->flows, fs->f);
    }
}

bool nfq_script_pre(struct nfq_thread *t, struct fgx_flow *f, const struct fgx_wsvc *svc,
                    enum fgx_dir dir, uint32_t seq, size_t len)
{
    struct nfq_sw *sw = t->sw;
    struct nfq_sw_flow *fs = flow_state(sw, f);
    const struct fgx_reasm *r = &f->dir[dir == FGX_DIR_C2S ? 0 : 1];
    bool ok = true;

    if (!svc_scripted(svc, dir) || !r->active || len == 0 || f->sw_slot == NFQ_SW_FINAL)
        return true;
    /* Ahead of the stream: reassembly would hold it and pass it later, where its bytes can no
     * longer reach the script in order; the sender sends it again. */
    if ((int32_t)(seq - r->next_seq) > 0)
        ok = false;
    /* Into bytes the regex scan passed that a script still judges: reassembly would pass this
     * copy as a retransmission, ahead of the script's verdict. */
    if (ok && fs != NULL && fs->head >= 0 && (int32_t)(seq - r->next_seq) < 0) {
        for (int32_t i = fs->head; i >= 0 && ok; i = sw->pkts[i].next)
            if (sw->pkts[i].dir == (uint8_t)dir && sw->pkts[i].swseq != 0)
                ok = false;
    }
    /* No room to wait: dropped before reassembly, so it is never taken as passed. (A flow
     * without a slot is not refused here: nfq_script_post() gives it a slot or the fail_open
     * verdict, never a silent drop that would stall it.) */
    if (ok && sw != NULL && sw->link.up &&
        (sw->free_head < 0 || (fs != NULL && fs->nheld >= NFQ_SW_FLOW_HELD)))
        ok = false;
    if (!ok)
        NFQ_CTR_ADD(&t->ctr.script_refused, 1);
    return ok;
}

static struct nfq_sw_flow *flow_open(struct nfq_thread *t, struct fgx_flow *f)
{
    struct nfq_sw *sw = t->sw;
    uint32_t i;
    struct nfq_sw_flow *fs;
    uint64_t a, b;

    for (i = 0; i < sw->nslots && sw->flows[(sw->cursor + i) % sw->nslots].f != NULL; i++)
        ;
    if (i == sw->nslots) {
        /* Full (FIN copies do not always reach the worker, so ended flows can linger): the
         * flow idle the longest with nothing waiting gives its slot up, if idle for
         * NFQ_SW_RECLAIM_MS. A closed one's later bytes are dropped (GONE); a live one's get
         * the service's fail_open verdict (LOST), as a lost script state does on the proxy
         * layer. Never passed as judged. */
        struct nfq_sw_flow *victim = NULL;

        for (i = 0; i < sw->nslots; i++) {
            fs = &sw->flows[i];
            if (fs->head < 0 && (victim == NULL || fs->f->last_ms < victim->f->last_ms))
                victim = fs;
        }
        if (victim == NULL || victim->f->last_ms + NFQ_SW_RECLAIM_MS > t->now_ms)
            return NULL;
        NFQ_CTR_ADD(&t->ctr.script_reclaimed, 1);
        fs = victim;
        if (flow_udp(fs->f) && fs->f != f)
            /* a UDP flow starts over (its next datagram, a new state) rather than getting
             * the fail policy for good: it has no end that would free it sooner */
            fgx_flow_remove(t->flows, fs->f);
        else
            flow_forget(t, fs, fs->f->closed ? NFQ_SW_GONE : NFQ_SW_LOST);
        i = (uint32_t)(fs - sw->flows);
        sw->cursor = 0; /* with i: the victim's slot, below */
    }
    sw->cursor = (sw->cursor + i) % sw->nslots;
    fs = &sw->flows[sw->cursor];
    memset(fs, 0, sizeof(*fs));
    fs->f = f;
    fs->id = ++sw->serial * sw->nslots + sw->cursor;
    fs->head = fs->tail = -1;
    /* symmetric, as the proxy's: client and server hashed apart, then combined */
    a = fgx_hash64(f->key.caddr, sizeof(f->key.caddr), f->key.cport);
    b = fgx_hash64(f->key.saddr, sizeof(f->key.saddr), f->key.sport);
    fs->hash = (uint16_t)((a ^ b) >> 17);
    f->sw_slot = sw->cursor + 1;
    sw->nflows++;
    NFQ_CTR_ADD(&t->ctr.script_flows, 1);
    return fs;
}

/* A flow whose script can no longer judge it (its state given up, or no slot for it): counted as
 * a failed script, and the service's fail_open choice for the flow as a whole: fail-open passes
 * it from here on without calls, fail-closed resets it. */
static void flow_fail_whole(struct nfq_thread *t, struct fgx_flow *f, const struct fgx_wsvc *svc,
                            enum fgx_dir dir, uint64_t cookie, uint32_t seq, uint32_t ack)
{
    NFQ_CTR_ADD(&t->ctr.script_errors, 1);
    nfq_match_cookie_verdict(t, cookie, svc->fail_open);
    if (svc->fail_open)
        f->sw_slot = NFQ_SW_FINAL;
    else
        nfq_match_flow_block(t, f, dir, true, seq, ack);
}

bool nfq_script_post(struct nfq_thread *t, struct fgx_flow *f, const struct fgx_wsvc *svc,
                     enum fgx_dir dir, uint64_t cookie, uint32_t seq, uint32_t ack,
                     const uint8_t *payload, size_t len, uint32_t old_next)
{
    struct nfq_sw *sw = t->sw;
    struct nfq_sw_flow *fs = flow_state(sw, f);
    const struct fgx_reasm *r = &f->dir[dir == FGX_DIR_C2S ? 0 : 1];
    uint32_t fresh = 0, off = 0;
    struct nfq_sw_pkt *p;
    int32_t i;

    if (svc_scripted(svc, dir) && len > 0) {
        /* the bytes of this segment the stream had not passed before */
        uint32_t end = seq + (uint32_t)len;

        off = (int32_t)(old_next - seq) > 0 ? old_next - seq : 0;
        if ((int32_t)(r->next_seq - seq) < (int32_t)len)
            end = r->next_seq;
        fresh = (int32_t)(end - seq) > (int32_t)off ? end - seq - off : 0;
    }
    if (f->sw_slot == NFQ_SW_FINAL)
        return false;
    if (fresh == 0 && (fs == NULL || fs->head < 0)) {
        if (fs != NULL && fs->fin_ok)
            flow_maybe_done(t, fs); /* the last bytes before a FIN already seen */
        return false;
    }
    if (f->sw_slot == NFQ_SW_LOST && fresh > 0) {
        /* its script state was given up under pressure: as a failed script */
        flow_fail_whole(t, f, svc, dir, cookie, seq + off, ack);
        return true;
    }
    if (f->sw_slot == NFQ_SW_GONE && fresh > 0) {
        /* bytes past both ends of the stream: no receiver takes them */

        NFQ_CTR_ADD(&t->ctr.script_refused, 1);
        nfq_match_cookie_verdict(t, cookie, false);
        return true;
    }
    if (fresh > 0 && (sw == NULL || !sw->link.up)) {
        NFQ_CTR_ADD(&t->ctr.script_errors, 1);
        if (svc->fail_open)
            return false;
        nfq_match_cookie_verdict(t, cookie, false);
        nfq_match_flow_block(t, f, dir, true, seq + off, ack);
        return true;
    }
    /* before this frame: the files again, for a scriptworker that (re)connected */
    fgx_swlink_resend(&sw->link, t->cfg);
    if (fs == NULL)
        fs = flow_open(t, f);
    /* no slot for it: every one is a live flow's */
    if (fs == NULL) {
        flow_fail_whole(t, f, svc, dir, cookie, seq + off, ack);
        return true;
    }
    /* nfq_script_pre() made sure of the room */
    if (sw->free_head < 0) {
        NFQ_CTR_ADD(&t->ctr.script_errors, 1);
        nfq_match_cookie_verdict(t, cookie, svc->fail_open);
        return true;
    }
    i = pkt_alloc(t);
    p = &sw->pkts[i];
    *p = (struct nfq_sw_pkt){.cookie = cookie,
                             .seq = seq + off,
                             .ack = ack,
                             .end = seq + off + fresh,
                             .next = -1,
                             .dir = (uint8_t)dir,
                             .ready = fresh == 0};
    if (fresh > 0) {
        struct fgx_sw_hdr h = {.type = FGX_SW_DATA,
                               .code = (uint8_t)(dir == FGX_DIR_C2S ? 0 : 1),
                               .hash = fs->hash,
                               .service = f->service_id,
                               .conn = fs->id,
                               .seq = ++sw->link.seq,
                               .len = fresh};

        if (sw->link.seq == 0)
            h.seq = ++sw->link.seq; /* 0 means "no frame" here */
        int rv;

        /* this layer cannot send edited bytes: the interpreter refuses an edit, said */
        h.code |= FGX_SW_DATA_NOEDIT;
        if (!fs->opened) {
            /* the flow's first frame opens it there (one frame, not two), with its addresses */
            struct fgx_sw_addr a = {.cport = f->key.cport, .sport = f->key.sport};

            memcpy(a.caddr, f->key.caddr, sizeof(a.caddr));
            memcpy(a.saddr, f->key.saddr, sizeof(a.saddr));
            h.code |= FGX_SW_DATA_OPEN | (f->key.family == 6 ? FGX_SW_DATA_V6 : 0);
            rv = fgx_swlink_send_addr(&sw->link, &h, &a, payload + off);
        } else {
            rv = sw_send(sw, &h, payload + off);
        }
        if (rv < 0) {
            pkt_free(t, i);
            NFQ_CTR_ADD(&t->ctr.script_errors, 1);
            if (svc->fail_open && fs->head < 0)
                return false;
            if (!svc->fail_open) {
                nfq_match_cookie_verdict(t, cookie, false);
                held_flush(t, fs, false);
                nfq_match_flow_block(t, f, dir, true, seq + off, ack);
                return true;
            }
            /* fail open behind held packets: it waits for them, judged as passed */
            i = pkt_alloc(t);
            p = &sw->pkts[i];
            *p = (struct nfq_sw_pkt){
                .cookie = cookie, .next = -1, .dir = (uint8_t)dir, .ready = true};
        } else {
            fs->opened = true;
            p->swseq = h.seq;
            p->exlen = (uint8_t)(fresh < sizeof(p->ex) ? fresh : sizeof(p->ex));
            memcpy(p->ex, payload + off, p->exlen);
        }
    }
    held_append(t, fs, i, svc->script_deadline_ms);
    /* a packet with nothing new, behind held ones that were all judged meanwhile */
    if (fs->head == i && p->ready) {
        held_release(t, fs, svc->script_deadline_ms);
        flow_maybe_done(t, fs);
    }
    return true;
}

bool nfq_script_first_held(const struct nfq_thread *t, const struct fgx_flow *f, enum fgx_dir dir,
                           uint32_t *seq, uint32_t *ack)
{
    const struct nfq_sw *sw = t->sw;
    const struct nfq_sw_flow *fs = sw != NULL && slot_live(f) ? &sw->flows[f->sw_slot - 1] : NULL;

    for (int32_t i = fs != NULL ? fs->head : -1; i >= 0; i = sw->pkts[i].next)
        if (sw->pkts[i].dir == (uint8_t)dir && sw->pkts[i].swseq != 0) {
            *seq = sw->pkts[i].seq;
            *ack = sw->pkts[i].ack;
            return true;
        }
    return false;
}

bool nfq_script_datagram(struct nfq_thread *t, struct fgx_flow *f, const struct fgx_wsvc *svc,
                         enum fgx_dir dir, uint64_t cookie, const struct fgx_pkt *dg)
{
    const uint8_t *payload = dg->payload;
    size_t len = dg->payload_len, hlen = dg->l4_off + 8;
    struct nfq_sw *sw = t->sw;
    struct nfq_sw_flow *fs;
    struct fgx_sw_hdr h;
    struct nfq_sw_pkt *p;
    int32_t i;
    int rv;

    if (!svc_scripted(svc, dir) || len == 0 || f->sw_slot == NFQ_SW_FINAL)
        return false;
    if (sw == NULL || !sw->link.up) {
        NFQ_CTR_ADD(&t->ctr.script_errors, 1);
        if (svc->fail_open)
            return false;
        nfq_match_cookie_verdict(t, cookie, false);
        return true;
    }
    /* before this frame: the files again, for a scriptworker that (re)connected */
    fgx_swlink_resend(&sw->link, t->cfg);
    fs = flow_state(sw, f);
    if (fs == NULL)
        fs = flow_open(t, f);
    /* no slot (every one a live flow's) or no room to wait: this datagram gets the fail
     * policy, the next one tries again */
    if (fs == NULL || sw->free_head < 0 || fs->nheld >= NFQ_SW_FLOW_HELD) {
        NFQ_CTR_ADD(fs == NULL ? &t->ctr.script_errors : &t->ctr.script_refused, 1);
        nfq_match_cookie_verdict(t, cookie, svc->fail_open);
        return true;
    }
    i = pkt_alloc(t);
    p = &sw->pkts[i];
    *p = (struct nfq_sw_pkt){
        .cookie = cookie, .end = (uint32_t)len, .next = -1, .dir = (uint8_t)dir};
    h = (struct fgx_sw_hdr){.type = FGX_SW_DATA,
                            .code = (uint8_t)((dir == FGX_DIR_C2S ? 0 : 1) | FGX_SW_DATA_UDP |
                                              (hlen > NFQ_SW_HDR_MAX ? FGX_SW_DATA_NOEDIT : 0)),
                            .hash = fs->hash,
                            .service = f->service_id,
                            .conn = fs->id,
                            .seq = ++sw->link.seq,
                            .len = (uint32_t)len};
    if (sw->link.seq == 0)
        h.seq = ++sw->link.seq; /* 0 means "no frame" here */
    if (!fs->opened) {
        struct fgx_sw_addr a = {.cport = f->key.cport, .sport = f->key.sport};

        memcpy(a.caddr, f->key.caddr, sizeof(a.caddr));
        memcpy(a.saddr, f->key.saddr, sizeof(a.saddr));
        h.code |= FGX_SW_DATA_OPEN | (f->key.family == 6 ? FGX_SW_DATA_V6 : 0);
        rv = fgx_swlink_send_addr(&sw->link, &h, &a, payload);
    } else {
        rv = sw_send(sw, &h, payload);
    }
    if (rv < 0) {
        pkt_free(t, i);
        NFQ_CTR_ADD(&t->ctr.script_errors, 1);
        nfq_match_cookie_verdict(t, cookie, svc->fail_open);
        return true;
    }
    fs->opened = true;
    p->swseq = h.seq;
    p->exlen = (uint8_t)(len < sizeof(p->ex) ? len : sizeof(p->ex));
    memcpy(p->ex, payload, p->exlen);
    p->family = dg->family;
    if (hlen <= NFQ_SW_HDR_MAX) {
        p->hdrlen = (uint8_t)hlen;
        memcpy(p->hdr, dg->l3, hlen);
    }
    held_append(t, fs, i, svc->script_deadline_ms);
    return true;
}
