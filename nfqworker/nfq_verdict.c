/* Verdict stage of nfqworker: every verdict decided while handling one receive batch is
 * appended to a per-thread buffer and sent to the kernel in one sendmsg. The kernel's refusals
 * (ENOENT for a stale id) come back later as NLMSG_ERROR on the receive path. */
#include "nfq.h"

#include <errno.h>
#include <string.h>

#include <libmnl/libmnl.h>
#include <linux/netfilter.h>
#include <libnetfilter_queue/libnetfilter_queue.h>

#include "fgx/log.h"

#define VERDICT_MSG_MAX 64 /* nlmsghdr + nfgenmsg + NFQA_VERDICT_HDR, with room to spare */

void nfq_verdict_add(struct nfq_thread *t, unsigned queue, uint32_t id, bool accept)
{
    struct nlmsghdr *nlh;

    if (t->txlen + VERDICT_MSG_MAX > NFQ_TXBUF)
        nfq_verdict_flush(t);
    nlh = nfq_nlmsg_put(t->txbuf + t->txlen, NFQNL_MSG_VERDICT, queue);
    nfq_nlmsg_verdict_put(nlh, (int)id, accept ? NF_ACCEPT : NF_DROP);
    t->txlen += MNL_ALIGN(nlh->nlmsg_len);
}

int nfq_verdict_add_payload(struct nfq_thread *t, unsigned queue, uint32_t id, const void *pkt,
                            size_t len)
{
    struct nlmsghdr *nlh;
    size_t need = VERDICT_MSG_MAX + MNL_ALIGN(len) + MNL_ATTR_HDRLEN;

    if (need > NFQ_TXBUF)
        return -EMSGSIZE;
    if (t->txlen + need > NFQ_TXBUF)
        nfq_verdict_flush(t);
    nlh = nfq_nlmsg_put(t->txbuf + t->txlen, NFQNL_MSG_VERDICT, queue);
    nfq_nlmsg_verdict_put(nlh, (int)id, NF_ACCEPT);
    nfq_nlmsg_verdict_put_pkt(nlh, pkt, (uint32_t)len);
    t->txlen += MNL_ALIGN(nlh->nlmsg_len);
    return 0;
}

void nfq_verdict_flush(struct nfq_thread *t)
{
    static __thread unsigned long long last_log;

    if (t->txlen == 0)
        goto resets;
    if (mnl_socket_sendto(t->nl, t->txbuf, t->txlen) == -1) {
        /* The packets stay queued; the kernel drops (or, fail-open, passes) them when the
         * queue fills. Nothing here may stop the thread. */
        NFQ_CTR_ADD(&t->ctr.verdict_errors, 1);
        fgx_log_ratelimited(&last_log, FGX_LOG_WARN, "thread %u: sending verdicts: %s", t->idx,
                            strerror(errno));
    }
    t->txlen = 0;
resets:
    /* Accepted packets are reinjected while the kernel handles the send above, so a reset sent
     * now arrives after them. */
    nfq_reset_flush(t);
}
