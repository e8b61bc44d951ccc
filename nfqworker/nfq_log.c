/* Anchor stage of nfqworker: the services' SYN-ACKs. The rules copy each one to the NFLOG group
 * of the thread that reads its flow's queue and let the packet itself go on, so a connection's
 * handshake costs no queue trip. A SYN-ACK says that the server accepted a connection, and where
 * both of its streams start (nfq_match_synack()). It is copied before it leaves this host, so
 * before the client can answer it: draining this socket before each queued packet is handled
 * (nfq_recv.c) puts the anchor in place before the client's first data. The socket is not
 * polled (a wake-up per handshake would cost most of what not queueing it saves), only drained
 * before each queued packet and at least every NFQ_LOG_DRAIN_MS. */
#include "nfq.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>
#include <sys/socket.h>

#include <libmnl/libmnl.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_log.h>

#include "fgx/log.h"

static struct nlmsghdr *log_msg_put(char *buf, uint8_t type, uint16_t group)
{
    struct nlmsghdr *nlh = mnl_nlmsg_put_header(buf);
    struct nfgenmsg *g;

    nlh->nlmsg_type = (uint16_t)((NFNL_SUBSYS_ULOG << 8) | type);
    nlh->nlmsg_flags = NLM_F_REQUEST; /* nfq_nl_config() asks for the ACK */
    g = mnl_nlmsg_put_extra_header(nlh, sizeof(*g));
    g->nfgen_family = AF_UNSPEC;
    g->version = NFNETLINK_V0;
    g->res_id = htons(group);
    return nlh;
}

int nfq_log_open(struct nfq_thread *t)
{
    char buf[MNL_SOCKET_BUFFER_SIZE];
    struct nfulnl_msg_config_cmd cmd = {.command = NFULNL_CFG_CMD_BIND};
    /* The whole packet: a SYN-ACK is at most a few hundred bytes. */
    struct nfulnl_msg_config_mode mode = {.copy_range = htonl(0xffff),
                                          .copy_mode = NFULNL_COPY_PACKET};
    int rcvbuf = NFQ_LOG_RCVBUF, ret;
    uint16_t group = (uint16_t)t->queue[0];
    struct nlmsghdr *nlh;

    t->lgbuf = malloc(NFQ_RXBUF);
    if (t->lgbuf == NULL) {
        fgx_err("thread %u: out of memory", t->idx);
        return -ENOMEM;
    }
    t->lg = mnl_socket_open2(NETLINK_NETFILTER, SOCK_CLOEXEC);
    if (t->lg == NULL || mnl_socket_bind(t->lg, 0, MNL_SOCKET_AUTOPID) == -1) {
        ret = -errno;
        fgx_err("thread %u: netlink log socket: %s", t->idx, strerror(errno));
        return ret;
    }
    /* A lost copy costs every open flow of the thread its tolerance of old retransmissions
     * (nfq_match_synacks_lost()): room for thousands of handshakes between two drains, which
     * are at most NFQ_LOG_DRAIN_MS apart (hundreds of thousands a second). */
    if (setsockopt(mnl_socket_get_fd(t->lg), SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf,
                   sizeof(rcvbuf)) == -1)
        fgx_warn("thread %u: log SO_RCVBUFFORCE: %s", t->idx, strerror(errno));
    nlh = log_msg_put(buf, NFULNL_MSG_CONFIG, group);
    mnl_attr_put(nlh, NFULA_CFG_CMD, sizeof(cmd), &cmd);
    ret = nfq_nl_config(t->lg, nlh, "bind", "log group", t->queue[0]);
    if (ret != 0)
        return ret;
    nlh = log_msg_put(buf, NFULNL_MSG_CONFIG, group);
    mnl_attr_put(nlh, NFULA_CFG_MODE, sizeof(mode), &mode);
    /* One packet per message, sent at once (the rules ask for that too): a copy waiting in
     * the kernel for a batch to fill would reach us after the client's data. The buffer per
     * message is sized for one small packet rather than the default 4 KiB. */
    mnl_attr_put_u32(nlh, NFULA_CFG_QTHRESH, htonl(1));
    mnl_attr_put_u32(nlh, NFULA_CFG_NLBUFSIZ, htonl(NFQ_LOG_NLBUFSIZ));
    return nfq_nl_config(t->lg, nlh, "configure", "log group", t->queue[0]);
}

void nfq_log_close(struct nfq_thread *t)
{
    if (t->lg != NULL)
        mnl_socket_close(t->lg);
    t->lg = NULL;
    free(t->lgbuf);
    t->lgbuf = NULL;
}

static void on_log_buffer(struct nfq_thread *t, size_t len)
{
    const struct nlmsghdr *nlh = (const struct nlmsghdr *)t->lgbuf;
    int rest = (int)len;

    for (; mnl_nlmsg_ok(nlh, rest); nlh = mnl_nlmsg_next(nlh, &rest)) {
        const struct nlattr *attr;

        if (nlh->nlmsg_type != ((NFNL_SUBSYS_ULOG << 8) | NFULNL_MSG_PACKET))
            continue;
        mnl_attr_for_each(attr, nlh, sizeof(struct nfgenmsg)) {
            if (mnl_attr_get_type(attr) == NFULA_PAYLOAD) {
                nfq_match_synack(t, mnl_attr_get_payload(attr), mnl_attr_get_payload_len(attr));
                break;
            }
        }
    }
}

void nfq_log_drain(struct nfq_thread *t)
{
    static __thread unsigned long long last_log;
    int fd;

    if (t->lg == NULL)
        return; /* --no-synack-log: the rules queue SYNs instead */
    fd = mnl_socket_get_fd(t->lg);

    for (;;) {
        ssize_t n = recv(fd, t->lgbuf, NFQ_RXBUF, MSG_DONTWAIT);

        if (n == -1) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return;
            if (errno == EINTR)
                continue;
            if (errno == ENOBUFS) {
                /* Reported before the copies that came after the lost ones. */
                NFQ_CTR_ADD(&t->ctr.queue_drops, 1);
                fgx_log_ratelimited(&last_log, FGX_LOG_WARN,
                                    "thread %u: SYN-ACK copies lost (log socket full)", t->idx);
                nfq_match_synacks_lost(t);
                continue;
            }
            fgx_log_ratelimited(&last_log, FGX_LOG_ERROR, "thread %u: log recv: %s", t->idx,
                                strerror(errno));
            return;
        }
        on_log_buffer(t, (size_t)n);
    }
}
