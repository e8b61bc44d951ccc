/* libFuzzer harness: nfqworker's normalise stage (nfqworker/nfq_normalize.c) in front of TCP
 * reassembly, fed whole IPv4 packets of both directions of one connection, built from the input
 * and decoded by the data path's own decoder: flags (data without ACK, URG), timestamps (PAWS),
 * an MD5 signature option, IPv4 options (a source route, which the receiver refuses; a record
 * route, which it reads), acknowledgements (honest, or of bytes never sent), out of order and
 * overlapping payloads, and time passing.
 *
 * The oracle is a model of Linux's receiver written from what it does, not from fgex's code:
 * it discards what tcp_validate_incoming() and tcp_ack() discard for the shapes above, reads
 * in-order bytes at once, queues the rest, and keeps every copy it could still take. After
 * every packet:
 *   1. a packet nfq_norm_packet() or nfq_norm_segment() refuses changes no flow state (the
 *      stage runs before anything moves) and counts one evasion;
 *   2. no byte the receiver could take is ambiguous: two accepted copies of a byte it has not
 *      read yet must be equal, or the receiver might read one fgex never scanned;
 *   3. what a receiver read never holds the blocked pattern unless fgex reported the match.
 *
 * Input: a set-up byte (bit 0: sequence numbers start just below 2^32 and wrap; bit 1: the
 * timestamps too; bits 2-3: how much the keep pool holds), then records of 8 bytes and a
 * payload: ctl, flags, seq (LE 16, signed, from the direction's first byte), ack (LE 16, signed,
 * from the other direction's first byte), tsval (signed 8, from the direction's base), len.
 * ctl bit 0: server to client; bit 1: a timestamp option; bit 2: an MD5 option; bits 3-4: IPv4
 * options (none, NOPs, a loose source route, a record route); bit 5: the ack is taken as sent
 * (else it is clipped to what the receiver read, as an honest peer's is); bits 6-7: 3 is time
 * passing (len * 10 ms, held segments expire), else a packet. */
#include <assert.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hs/hs.h>

#include "fgx/pkt.h"
#include "fgx/reasm.h"
#include "fuzz_reasm_ctx.h"
#include "nfqworker/nfq.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define SPAN 65536 /* positions the model follows in each direction */

struct seg {
    uint8_t pkt[128 + 255];
    size_t pkt_len;
    struct fgx_pkt p;
    int d;
};

/* The receiver of one direction. */
struct rcv {
    uint32_t isn1;      /* sequence number of the direction's first byte */
    uint32_t read;      /* bytes read in order */
    uint32_t acked;     /* what its ACKs said (<= read) */
    uint32_t sent_high; /* furthest byte its sender put on the wire, relative to isn1 */
    bool ts_set;
    uint32_t ts_recent;
    bool lied; /* an ack of this direction's bytes the receiver never read was sent for it */
};

static struct seg segs[MAXSEG];
static struct nfq_thread thr;
static struct fgx_flow flow;
static struct rcv rcv[2];
static uint8_t byte[2][SPAN];
static bool seen[2][SPAN], amb[2][SPAN];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    reasm_ctx_setup("fuzz_norm");
    return 0;
}

static void put16(uint8_t *b, uint16_t v)
{
    b[0] = (uint8_t)(v >> 8);
    b[1] = (uint8_t)v;
}

static void put32(uint8_t *b, uint32_t v)
{
    put16(b, (uint16_t)(v >> 16));
    put16(b + 2, (uint16_t)v);
}

/* An IPv4 packet of direction d (0: client 10.0.0.1:40000 -> server 10.0.0.2:80). */
static size_t build(uint8_t *b, int d, uint8_t ctl, uint8_t flags, uint32_t seq, uint32_t ack,
                    uint32_t tsval, const uint8_t *payload, size_t len)
{
    static const uint8_t ip[2][4] = {{10, 0, 0, 1}, {10, 0, 0, 2}};
    static const uint16_t port[2] = {40000, 80};
    size_t ihl = 20, thl = 20, at;
    uint8_t *t;

    memset(b, 0, 128);
    switch ((ctl >> 3) & 3) {
    case 1: /* NOPs and an end: no option the receiver acts on */
        memcpy(b + 20, "\x01\x01\x01\x00", 4);
        ihl = 24;
        break;
    case 2: /* a loose source route through one hop: refused without accept_source_route */
        memcpy(b + 20, "\x83\x07\x04\x0a\x00\x00\x09\x00", 8);
        ihl = 28;
        break;
    case 3: /* a record route with room for one address: the receiver reads the packet */
        memcpy(b + 20, "\x07\x07\x04\x00\x00\x00\x00\x00", 8);
        ihl = 28;
        break;
    }
    t = b + ihl;
    at = 20;
    if (ctl & 2) { /* NOP NOP timestamp */
        memcpy(t + at, "\x01\x01\x08\x0a", 4);
        put32(t + at + 4, tsval);
        put32(t + at + 8, 1);
        at += 12;
    }
    if (ctl & 4) { /* an MD5 signature, padded */
        t[at] = 19;
        t[at + 1] = 18;
        at += 20;
    }
    thl = at;
    memcpy(t + thl, payload, len);
    b[0] = (uint8_t)(0x40 | ihl / 4);
    put16(b + 2, (uint16_t)(ihl + thl + len));
    b[8] = 64;
    b[9] = 6;
    memcpy(b + 12, ip[d], 4);
    memcpy(b + 16, ip[1 - d], 4);
    put16(t, port[d]);
    put16(t + 2, port[1 - d]);
    put32(t + 4, seq);
    put32(t + 8, ack);
    t[12] = (uint8_t)(thl / 4 << 4);
    t[13] = flags;
    put16(t + 14, 65535);
    if (flags & FGX_TCP_URG)
        put16(t + 18, 1);
    return ihl + thl + len;
}

/* Whether Linux's receiver discards packet s, given what it has now. */
static bool rcv_discards(const struct seg *s)
{
    const struct fgx_pkt *p = &s->p;
    struct rcv *me = &rcv[s->d], *peer = &rcv[1 - s->d];

    if ((p->tcp_flags & FGX_TCP_ACK) == 0) /* tcp_validate_incoming(): no ACK, no data */
        return true;
    if (p->ipdiscard & FGX_IPD_OPTS) {
        /* ip_options_rcv_srr(): a source route is refused; a record route is read */
        if (s->pkt[20] == 0x83)
            return true;
    }
    if (p->tcpopt & FGX_TCPOPT_SIG) /* tcp_inbound_md5_hash(): no key for the peer */
        return true;
    if (p->tcp_flags & FGX_TCP_URG) /* the urgent byte leaves the stream: unknown reading */
        return true;
    /* tcp_ack(): acknowledges bytes the receiver (the other direction's sender) never sent */
    if ((int32_t)(p->ack - (peer->isn1 + peer->sent_high)) > 0)
        return true;
    /* tcp_paws_discard(): an older timestamp than the last in-order segment's, by more than 1 */
    if ((p->tcpopt & FGX_TCPOPT_TS) && me->ts_set && (int32_t)(me->ts_recent - p->tsval) > 1)
        return true;
    return false;
}

/* The receiver gets packet s (fgex accepted it, now or later). */
static void rcv_take(const struct seg *s)
{
    const struct fgx_pkt *p = &s->p;
    int d = s->d;
    struct rcv *me = &rcv[d];
    int32_t rel = (int32_t)(p->seq - me->isn1);

    if (rcv_discards(s))
        return;
    /* tcp_replace_ts_recent(): a segment that starts at or before the left edge */
    if ((p->tcpopt & FGX_TCPOPT_TS) && rel <= (int32_t)me->read &&
        (!me->ts_set || (int32_t)(p->tsval - me->ts_recent) >= 0)) {
        me->ts_recent = p->tsval;
        me->ts_set = true;
    }
    for (size_t i = 0; i < p->payload_len; i++) {
        int64_t at = (int64_t)rel + (int64_t)i;

        if (at < (int64_t)me->read || at >= SPAN)
            continue; /* before the start, already read, or beyond what the model follows */
        if (!seen[d][at]) {
            seen[d][at] = true;
            byte[d][at] = p->payload[i];
        } else if (byte[d][at] != p->payload[i]) {
            amb[d][at] = true;
        }
    }
    while (me->read < SPAN && seen[d][me->read]) {
        /* oracle 2 (not for bytes an ack that lied about them let fgex forget) */
        assert((!amb[d][me->read] || me->lied) &&
               "two different accepted copies of a byte the receiver had not read");
        me->read++;
    }
}

/* In a direction no ack lied about (a lie only lets fgex forget what it kept for the liar's
 * own reading). */
static bool pattern_read(void)
{
    for (int d = 0; d < 2; d++)
        if (!rcv[d].lied && memmem(byte[d], rcv[d].read, PATTERN, sizeof(PATTERN) - 1) != NULL)
            return true;
    return false;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct fgx_reasm_ctx *ctx;
    uint64_t now = 1000;
    size_t at = 1, nseg = 0;
    uint32_t tsbase[2];
    bool matched = false;

    if (size < 1)
        return 0;
    ctx = ctxs[(data[0] >> 2) & 3];
    memset(&thr, 0, sizeof(thr));
    thr.reasm = ctx;
    memset(&flow, 0, sizeof(flow));
    memset(rcv, 0, sizeof(rcv));
    memset(seen, 0, sizeof(seen));
    memset(amb, 0, sizeof(amb));
    rcv[0].isn1 = (data[0] & 1) ? 0xffffff00u : 1001u;
    rcv[1].isn1 = (data[0] & 1) ? 0xfffffff0u : 50001u;
    tsbase[0] = (data[0] & 2) ? 0xffffff80u : 100000u;
    tsbase[1] = tsbase[0] + 7;
    for (int d = 0; d < 2; d++) {
        fgx_reasm_init(&flow.dir[d]);
        assert(fgx_reasm_start(ctx, &flow.dir[d], rcv[d].isn1) == 0);
        assert(fgx_reasm_set_db(ctx, &flow.dir[d], db, 1) == 0);
    }

    while (!matched && at + 8 <= size && nseg < MAXSEG) {
        uint8_t ctl = data[at], flags = data[at + 1], len = data[at + 7];
        int16_t soff = (int16_t)(data[at + 2] | data[at + 3] << 8);
        int16_t aoff = (int16_t)(data[at + 4] | data[at + 5] << 8);
        int8_t tso = (int8_t)data[at + 6];

        at += 8;
        if ((ctl >> 6) == 3) {
            vs.n = 0;
            now += (uint64_t)len * 10;
            (void)fgx_reasm_expire(ctx, now, 500);
            for (size_t i = 0; i < vs.n; i++)
                assert(!vs.accept[i] && "an expired segment was accepted");
            continue;
        }
        if (len > size - at)
            len = (uint8_t)(size - at);

        int d = ctl & 1;
        struct seg *s = &segs[nseg];
        struct rcv *peer = &rcv[1 - d];
        struct fgx_reasm before[2];
        struct fgx_reasm_match m;
        enum fgx_reasm_verdict v;
        uint64_t ev = thr.ctr.evasion;
        uint32_t ack;
        int32_t rel = soff;

        /* flags: no SYN or RST (those restart or end the flow before this stage) */
        flags &= FGX_TCP_FIN | FGX_TCP_PSH | FGX_TCP_ACK | FGX_TCP_URG;
        if ((flags & FGX_TCP_URG) && (ctl & 0x20) == 0)
            flags &= (uint8_t)~FGX_TCP_URG; /* rarer: URG only with a raw ack */
        if (ctl & 0x20) {
            ack = peer->isn1 + (uint32_t)(int32_t)aoff;
            /* an ack within what the other direction sent but beyond what its receiver read
             * lies about that direction: fgex may then forget bytes it kept for it */
            if ((int32_t)(ack - (peer->isn1 + peer->read)) > 0 &&
                (int32_t)(ack - (peer->isn1 + peer->sent_high)) <= 0)
                peer->lied = true;
        } else {
            uint32_t a = (uint16_t)aoff;

            ack = peer->isn1 + (a <= peer->read ? a : peer->read);
        }
        s->d = d;
        s->pkt_len = build(s->pkt, d, ctl, flags, rcv[d].isn1 + (uint32_t)rel, ack,
                           tsbase[d] + (uint32_t)(int32_t)tso, data + at, len);
        at += len;
        assert(fgx_pkt_decode(s->pkt, s->pkt_len, &s->p) == 0);
        nseg++;
        /* its sender put it on the wire, whatever becomes of it */
        if (rel + (int32_t)len > (int32_t)rcv[d].sent_high && rel + (int32_t)len < SPAN)
            rcv[d].sent_high = (uint32_t)(rel + (int32_t)len);

        if (!nfq_norm_packet(&thr, &s->p)) {
            assert(thr.ctr.evasion == ev + 1);
            continue;
        }
        memcpy(before, flow.dir, sizeof(before));
        if (!nfq_norm_segment(&thr, &flow, d == 0 ? FGX_DIR_C2S : FGX_DIR_S2C, &s->p)) {
            /* oracle 1 */
            assert(memcmp(before, flow.dir, sizeof(before)) == 0 &&
                   "a refused segment moved flow state");
            assert(thr.ctr.evasion == ev + 1);
            continue;
        }
        if (ack - peer->isn1 <= peer->read && (int32_t)(ack - peer->isn1) > (int32_t)peer->acked)
            peer->acked = ack - peer->isn1;
        memset(&m, 0, sizeof(m));
        vs.n = 0;
        v = fgx_reasm_segment(ctx, &flow.dir[d], s->p.seq, s->p.ack, s->p.payload,
                              s->p.payload_len, (uint64_t)(nseg - 1), now, &m);
        nfq_norm_passed(&thr, &flow, d == 0 ? FGX_DIR_C2S : FGX_DIR_S2C, &s->p, v, &m);
        if (v == FGX_REASM_ACCEPT)
            rcv_take(s);
        for (size_t i = 0; i < vs.n; i++) {
            assert(vs.cookie[i] < nseg);
            if (vs.accept[i])
                rcv_take(&segs[vs.cookie[i]]);
        }
        /* a match in either direction blocks the flow: nothing of it passes from then on */
        matched = m.matched;
        /* oracle 3 */
        assert((matched || !pattern_read()) && "the receiver read the blocked pattern");
    }
    for (int d = 0; d < 2; d++) {
        vs.n = 0;
        fgx_reasm_release(ctx, &flow.dir[d]);
        for (size_t i = 0; i < vs.n; i++)
            assert(!vs.accept[i]);
    }
    assert(fgx_reasm_ctx_held(ctx) == 0 && fgx_reasm_ctx_kept(ctx) == 0);
    return 0;
}
