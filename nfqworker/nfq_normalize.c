/* Normalise stage of nfqworker, between decode and reassembly: a TCP segment whose bytes the
 * receiving kernel will throw away must not count as passed, or the real bytes, sent later at the
 * same sequence numbers, would look already passed and go through unscanned. The kinds Linux is
 * known to discard after the prerouting hook (where the rules queue) are refused here, before
 * they move any flow state, and counted in `evasion`; whatever kind is not known here is caught
 * by reassembly, which compares every retransmission with the bytes kept until acknowledged
 * (fgx_reasm_ctx_keep()). Runs on the packet threads, for the match stage (nfq_match.c). */
#include "nfq.h"

#include <string.h>

#include "fgx/pkt.h"

/* What a packet alone says: nothing of its flow is needed. */
bool nfq_norm_packet(struct nfq_thread *t, const struct fgx_pkt *p)
{
    bool discard =
        /* Linux discards data without ACK in every synchronized state; only a SYN (fast open)
         * carries data without it. */
        (p->payload_len > 0 && (p->tcp_flags & (FGX_TCP_ACK | FGX_TCP_SYN | FGX_TCP_RST)) == 0) ||
        /* IPv4 options, IPv6 extension headers the receiver refuses (source routes, unknown
         * options whose type says discard, routing headers, bad padding: pkt.h). */
        p->ipdiscard != 0 ||
        /* An MD5 signature or TCP-AO option: dropped by a receiver that has no key for the
         * peer, and a service has none. */
        (p->tcpopt & FGX_TCPOPT_SIG) != 0 ||
        /* Urgent data: the receiver (without SO_OOBINLINE) takes the byte the urgent pointer
         * names out of the stream, even from a later segment. The rules clear URG and the
         * urgent pointer before a packet reaches the queue (ctl_nft.c), so that the stream is
         * read whole; one that arrives with URG was not normalised: its reading is unknown. */
        (p->tcp_flags & FGX_TCP_URG) != 0;

    if (discard)
        NFQ_CTR_ADD(&t->ctr.evasion, 1);
    return !discard;
}

/* What needs the flow: the other direction's furthest byte and this direction's timestamps.
 * On success the ACK is taken as the receiver's proof for the other direction's kept bytes. */
bool nfq_norm_segment(struct nfq_thread *t, struct fgx_flow *f, enum fgx_dir dir,
                      const struct fgx_pkt *p)
{
    int d = dir == FGX_DIR_C2S ? 0 : 1;
    struct fgx_reasm *r = &f->dir[d], *peer = &f->dir[1 - d];
    bool ack = (p->tcp_flags & FGX_TCP_ACK) != 0;

    /* An ACK of bytes the peer never sent: the receiver discards the segment (Linux's
     * tcp_ack(), "ack of unsent data"). */
    if ((ack && fgx_reasm_ack_unsent(peer, p->ack)) ||
        /* PAWS: a timestamp older than one already passed in order. */
        (p->payload_len > 0 && (p->tcpopt & FGX_TCPOPT_TS) != 0 &&
         fgx_reasm_paws_old(r, p->tsval))) {
        NFQ_CTR_ADD(&t->ctr.evasion, 1);
        return false;
    }
    if (ack)
        fgx_reasm_acked(t->reasm, peer, p->ack);
    return true;
}

void nfq_norm_passed(struct nfq_thread *t, struct fgx_flow *f, enum fgx_dir dir,
                     const struct fgx_pkt *p, enum fgx_reasm_verdict v,
                     const struct fgx_reasm_match *m)
{
    /* Accepted now means in order (or all passed before): the receiver's newest timestamp moves
     * on with it, as Linux's does for a segment at its window's left edge. */
    if (v == FGX_REASM_ACCEPT && p->payload_len > 0 && (p->tcpopt & FGX_TCPOPT_TS) != 0)
        fgx_reasm_ts_passed(&f->dir[dir == FGX_DIR_C2S ? 0 : 1], p->tsval);
    if (m->inconsistent + m->uncompared > 0)
        NFQ_CTR_ADD(&t->ctr.evasion, m->inconsistent + m->uncompared);
}
