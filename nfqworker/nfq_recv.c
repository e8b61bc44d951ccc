/* Receive stage of nfqworker: where a packet enters. Each packet thread owns one netlink socket
 * bound to its two queues (fail-closed and fail-open), reads batches of packets, hands each to
 * the match stage and flushes the batch's verdicts in one send. Before each packet it drains its
 * NFLOG socket (nfq_log.c), so that the SYN-ACK that anchors a flow is in place before the
 * flow's first data. */
#include "nfq.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include <libmnl/libmnl.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nfnetlink.h>
#include <libnetfilter_queue/libnetfilter_queue.h>

#include "fgx/log.h"
#include "fgx/pkt.h"

uint64_t nfq_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Send one config message and wait for the kernel's answer (setup only, blocking). */
int nfq_nl_config(struct mnl_socket *nl, struct nlmsghdr *nlh, const char *what,
                  const char *obj, unsigned num)
{
    char buf[MNL_SOCKET_BUFFER_SIZE];
    ssize_t n;
    int ret;

    nlh->nlmsg_flags |= NLM_F_ACK;
    nlh->nlmsg_seq = (uint32_t)time(NULL);
    if (mnl_socket_sendto(nl, nlh, nlh->nlmsg_len) == -1) {
        ret = -errno;
        fgx_err("%s %u: %s: %s", obj, num, what, strerror(errno));
        return ret;
    }
    n = mnl_socket_recvfrom(nl, buf, sizeof(buf));
    if (n == -1) {
        ret = -errno;
        fgx_err("%s %u: %s: %s", obj, num, what, strerror(errno));
        return ret;
    }
    if (mnl_cb_run(buf, (size_t)n, nlh->nlmsg_seq, mnl_socket_get_portid(nl), NULL, NULL) == -1) {
        ret = -errno;
        fgx_err("%s %u: %s: %s%s", obj, num, what, strerror(errno),
                errno == EBUSY ? " (another process reads it)" : "");
        return ret;
    }
    return 0;
}

static int queue_bind(struct nfq_thread *t, unsigned queue, bool fail_open)
{
    char buf[MNL_SOCKET_BUFFER_SIZE];
    struct nlmsghdr *nlh;
    /* Whole GSO packets: the kernel would otherwise segment them before queueing, one queue
     * trip and one verdict per 1500-byte segment (measured here: ~0.3 GB/s against ~1.9 GB/s
     * whole on veth). They may arrive with NFQA_SKB_CSUMNOTREADY, which is harmless: only the
     * payload is read. A GSO packet is at most gso_max_size (64 KiB), so it can exceed the copy
     * range; match drops and counts such a packet (cap_len > len) rather than pass bytes
     * unscanned, and the rules' MSS clamp keeps honest traffic under it. */
    uint32_t flags = NFQA_CFG_F_GSO | (fail_open ? NFQA_CFG_F_FAIL_OPEN : 0);
    int ret;

    nlh = nfq_nlmsg_put(buf, NFQNL_MSG_CONFIG, queue);
    nfq_nlmsg_cfg_put_cmd(nlh, AF_UNSPEC, NFQNL_CFG_CMD_BIND);
    ret = nfq_nl_config(t->nl, nlh, "bind", "queue", queue);
    if (ret != 0)
        return ret;
    nlh = nfq_nlmsg_put(buf, NFQNL_MSG_CONFIG, queue);
    nfq_nlmsg_cfg_put_params(nlh, NFQNL_COPY_PACKET, 0xffff);
    nfq_nlmsg_cfg_put_qmaxlen(nlh, NFQ_QUEUE_MAXLEN);
    /* Conntrack info is not needed and costs per packet. */
    mnl_attr_put_u32(nlh, NFQA_CFG_FLAGS, htonl(flags));
    mnl_attr_put_u32(nlh, NFQA_CFG_MASK,
                     htonl(NFQA_CFG_F_FAIL_OPEN | NFQA_CFG_F_CONNTRACK | NFQA_CFG_F_GSO));
    return nfq_nl_config(t->nl, nlh, "configure", "queue", queue);
}

int nfq_thread_init(struct nfq_worker *w, struct nfq_thread *t, unsigned idx)
{
    int rcvbuf = NFQ_RCVBUF;
    int ret;

    memset(t, 0, sizeof(*t));
    t->w = w;
    t->idx = idx;
    t->efd = -1;
    t->raw4 = t->raw6 = -1;
    fgx_cap_set_init(&t->caps, false);
    t->queue[0] = fgx_queue_num(w->queue_base, w->nthreads, false, idx);
    t->queue[1] = fgx_queue_num(w->queue_base, w->nthreads, true, idx);
    t->rxbuf = malloc(NFQ_RXBUF);
    t->txbuf = malloc(NFQ_TXBUF);
    if (t->rxbuf == NULL || t->txbuf == NULL) {
        fgx_err("thread %u: out of memory", idx);
        ret = -ENOMEM;
        goto err;
    }
    ret = fgx_reasm_ctx_new(NFQ_HOLD_POOL_BYTES, NFQ_HOLD_FLOW_BYTES, nfq_match_held_verdict, t,
                            &t->reasm);
    if (ret == 0)
        ret = fgx_reasm_ctx_keep(t->reasm, NFQ_KEEP_POOL_BYTES, NFQ_KEEP_FLOW_BYTES);
    if (ret == 0)
        fgx_reasm_ctx_set_log(t->reasm, nfq_match_log, t);
    if (ret != 0)
        goto err;
    ret = fgx_flow_table_new(w->flows, nfq_match_flow_release, t, &t->flows);
    if (ret != 0)
        goto err;
    t->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (t->efd == -1) {
        ret = -errno;
        fgx_err("thread %u: eventfd: %s", idx, strerror(errno));
        goto err;
    }
    ret = nfq_reset_open(t);
    if (ret != 0)
        goto err;
    t->nl = mnl_socket_open2(NETLINK_NETFILTER, SOCK_CLOEXEC);
    if (t->nl == NULL || mnl_socket_bind(t->nl, 0, MNL_SOCKET_AUTOPID) == -1) {
        ret = -errno;
        fgx_err("thread %u: netlink socket: %s", idx, strerror(errno));
        goto err;
    }
    /* A small buffer overflows within milliseconds under load (measured: 160k+ drops in 5 s). */
    if (setsockopt(mnl_socket_get_fd(t->nl), SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf,
                   sizeof(rcvbuf)) == -1)
        fgx_warn("thread %u: SO_RCVBUFFORCE: %s", idx, strerror(errno));
    /* Before the queues: a SYN-ACK copied before the group is bound is lost silently. */
    ret = w->no_synack_log ? 0 : nfq_log_open(t);
    if (ret != 0)
        goto err;
    ret = queue_bind(t, t->queue[0], false);
    if (ret != 0)
        goto err;
    ret = queue_bind(t, t->queue[1], true);
    if (ret == 0)
        ret = nfq_script_thread_init(t, w->script_url);
    if (ret != 0)
        goto err;
    return 0;
err:
    nfq_thread_release(t);
    return ret;
}

void nfq_thread_release(struct nfq_thread *t)
{
    /* Flows first: releasing them gives verdicts (drop) to held segments, which need the
     * socket still open. */
    fgx_flow_table_free(t->flows);
    t->flows = NULL;
    free(t->hx_out);
    free(t->hx_in);
    t->hx_out = t->hx_in = NULL;
    if (t->nl != NULL)
        nfq_verdict_flush(t);
    fgx_reasm_ctx_free(t->reasm);
    t->reasm = NULL;
    nfq_script_thread_release(t);
    if (t->nl != NULL)
        mnl_socket_close(t->nl);
    t->nl = NULL;
    nfq_log_close(t);
    nfq_reset_close(t);
    if (t->efd >= 0)
        close(t->efd);
    t->efd = -1;
    fgx_wcfg_unref(t->cfg);
    t->cfg = NULL;
    fgx_cap_set_release(&t->caps);
    free(t->rxbuf);
    free(t->txbuf);
    t->rxbuf = t->txbuf = NULL;
}

void nfq_thread_wake(struct nfq_thread *t)
{
    uint64_t one = 1;

    if (write(t->efd, &one, sizeof(one)) == -1 && errno != EAGAIN)
        fgx_warn("thread %u: eventfd write: %s", t->idx, strerror(errno));
}

static void on_error_msg(struct nfq_thread *t, const struct nlmsghdr *nlh)
{
    static __thread unsigned long long last_log;
    const struct nlmsgerr *e = mnl_nlmsg_get_payload(nlh);

    if (nlh->nlmsg_len < mnl_nlmsg_size(sizeof(*e)) || e->error == 0)
        return;
    NFQ_CTR_ADD(&t->ctr.verdict_errors, 1);
    fgx_log_ratelimited(&last_log, FGX_LOG_WARN, "thread %u: the kernel refused a verdict: %s",
                        t->idx, strerror(-e->error));
}

/* Whether the receiver would discard this packet for its checksum. The kernel verifies it later
 * than the queue (in TCP or UDP input) unless the device or conntrack already did; a packet it
 * discards that passed here as scanned would make the real bytes, sent later at the same
 * sequence numbers, look already passed. Locally generated packets (CSUMNOTREADY) carry only a
 * partial checksum and are valid by construction. An undecodable packet is left to the match
 * stage, which drops and counts it. */
static bool csum_bad(const struct nlattr *skbinfo, const uint8_t *data, size_t len,
                     uint32_t cap_len)
{
    struct fgx_pkt p;
    uint32_t info;

    if (skbinfo == NULL)
        return false;
    info = ntohl(mnl_attr_get_u32(skbinfo));
    if ((info & NFQA_SKB_CSUM_NOTVERIFIED) == 0 || (info & NFQA_SKB_CSUMNOTREADY) != 0)
        return false;
    if (cap_len > len || fgx_pkt_decode(data, len, &p) != 0)
        return false;
    return fgx_pkt_csum_check(&p) != 0;
}

static void on_packet(struct nfq_thread *t, const struct nlmsghdr *nlh)
{
    struct nlattr *attr[NFQA_MAX + 1] = {0};
    const struct nfqnl_msg_packet_hdr *ph;
    const struct nfgenmsg *g = mnl_nlmsg_get_payload(nlh);
    unsigned queue = ntohs(g->res_id);
    uint32_t cap_len = 0;

    if (nfq_nlmsg_parse(nlh, attr) < 0 || attr[NFQA_PACKET_HDR] == NULL)
        return; /* no packet id: nothing to give a verdict to */
    ph = mnl_attr_get_payload(attr[NFQA_PACKET_HDR]);
    if (attr[NFQA_CAP_LEN] != NULL)
        cap_len = ntohl(mnl_attr_get_u32(attr[NFQA_CAP_LEN]));
    if (attr[NFQA_PAYLOAD] == NULL) {
        NFQ_CTR_ADD(&t->ctr.malformed, 1);
        nfq_verdict_add(t, queue, ntohl(ph->packet_id), false);
        return;
    }
    if (csum_bad(attr[NFQA_SKB_INFO], mnl_attr_get_payload(attr[NFQA_PAYLOAD]),
                 mnl_attr_get_payload_len(attr[NFQA_PAYLOAD]), cap_len)) {
        /* Dropped before the match stage: no flow state moves for it. */
        NFQ_CTR_ADD(&t->ctr.evasion, 1);
        nfq_verdict_add(t, queue, ntohl(ph->packet_id), false);
        return;
    }
    nfq_match_packet(t, queue, ntohl(ph->packet_id), mnl_attr_get_payload(attr[NFQA_PAYLOAD]),
                     mnl_attr_get_payload_len(attr[NFQA_PAYLOAD]), cap_len);
}

static void on_buffer(struct nfq_thread *t, size_t len)
{
    const struct nlmsghdr *nlh = (const struct nlmsghdr *)t->rxbuf;
    int rest = (int)len;

    for (; mnl_nlmsg_ok(nlh, rest); nlh = mnl_nlmsg_next(nlh, &rest)) {
        if (nlh->nlmsg_type == NLMSG_ERROR)
            on_error_msg(t, nlh);
        else if (NFNL_SUBSYS_ID(nlh->nlmsg_type) == NFNL_SUBSYS_QUEUE &&
                 NFNL_MSG_TYPE(nlh->nlmsg_type) == NFQNL_MSG_PACKET)
            on_packet(t, nlh);
    }
}

/* Read what is waiting, up to a batch, without blocking. Verdicts leave in one send per batch,
 * or sooner once NFQ_FLUSH_BYTES were received: a batch of 64 whole GSO packets takes over a
 * millisecond to scan, and a small packet queued first (an SLA check beside a bulk transfer)
 * should not wait for all of it. Short connections' batches (a few small packets per wake-up,
 * measured) still leave in one send. */
static void recv_batch(struct nfq_thread *t)
{
    static __thread unsigned long long last_log;
    int fd = mnl_socket_get_fd(t->nl), i;
    size_t since_flush = 0;

    t->now_ms = nfq_now_ms();
    for (i = 0; i < NFQ_RX_BATCH; i++) {
        ssize_t n = recv(fd, t->rxbuf, NFQ_RXBUF, MSG_DONTWAIT);

        if (n == -1) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                break;
            if (errno == ENOBUFS) {
                /* The kernel dropped messages for us: packets it then drops or passes. */
                NFQ_CTR_ADD(&t->ctr.queue_drops, 1);
                continue;
            }
            if (errno == EINTR)
                continue;
            fgx_log_ratelimited(&last_log, FGX_LOG_ERROR, "thread %u: netlink recv: %s",
                                t->idx, strerror(errno));
            break;
        }
        /* SYN-ACK copies made before this packet was queued are waiting by now. */
        nfq_log_drain(t);
        on_buffer(t, (size_t)n);
        since_flush += (size_t)n;
        if (since_flush >= NFQ_FLUSH_BYTES) {
            nfq_verdict_flush(t);
            since_flush = 0;
        }
    }
    nfq_verdict_flush(t);
}

void *nfq_thread_main(void *arg)
{
    struct nfq_thread *t = arg;
    struct pollfd pfd[3];
    uint64_t next_tick = nfq_now_ms() + NFQ_TICK_MS;
    nfds_t npfd = 2;

    char name[16];

    /* named, so that ps, gdb and the liveness test find the packet threads */
    (void)snprintf(name, sizeof(name), "nfq-pkt-%u", t->idx);
    (void)pthread_setname_np(pthread_self(), name);
    pfd[0].fd = mnl_socket_get_fd(t->nl);
    pfd[0].events = POLLIN;
    pfd[1].fd = t->efd;
    pfd[1].events = POLLIN;
    pfd[2].revents = 0;
    /* scriptworker's answers: verdicts of packets held for a script (nfq_script.c) */
    pfd[2].fd = nfq_script_fd(t);
    pfd[2].events = POLLIN;
    if (pfd[2].fd >= 0)
        npfd = 3;
    nfq_match_switch(t);
    nfq_script_switch(t);
    while (!__atomic_load_n(&t->w->stop, __ATOMIC_ACQUIRE)) {
        uint64_t now = nfq_now_ms();
        int timeout = next_tick > now ? (int)(next_tick - now) : 0;

        /* The log socket is not polled: a wake-up per handshake would cost most of what not
         * queueing it saves. It is drained before every queued packet, and at least every
         * NFQ_LOG_DRAIN_MS, so that handshakes without data never fill it. */
        if (timeout > NFQ_LOG_DRAIN_MS)
            timeout = NFQ_LOG_DRAIN_MS;
        if (poll(pfd, npfd, timeout) == -1 && errno != EINTR) {
            fgx_err("thread %u: poll: %s", t->idx, strerror(errno));
            break;
        }
        /* Every wait above is bounded (NFQ_LOG_DRAIN_MS): an idle thread stamps too. */
        fgx_wctl_stamp(&t->alive_ms, fgx_wctl_now_ms());
        if (pfd[1].revents & POLLIN) {
            uint64_t v;

            if (read(t->efd, &v, sizeof(v)) == -1 && errno != EAGAIN)
                fgx_warn("thread %u: eventfd read: %s", t->idx, strerror(errno));
        }
        /* A planned restart: the flows are written out here, and nothing moves after. */
        if (nfq_handover_poll(t))
            break;
        /* Between packets: a new generation is picked up before the next batch. */
        if (__atomic_load_n(&t->w->current, __ATOMIC_ACQUIRE) != t->cfg) {
            nfq_match_switch(t);
            nfq_script_switch(t);
        }
        if (npfd == 3 && (pfd[2].revents & POLLIN))
            nfq_script_recv(t);
        if (pfd[0].revents & (POLLIN | POLLERR)) {
            recv_batch(t);
        } else {
            t->now_ms = nfq_now_ms();
            nfq_log_drain(t);
        }
        now = nfq_now_ms();
        if (now >= next_tick) {
            t->now_ms = now;
            fgx_reasm_expire(t->reasm, now, NFQ_HOLD_MAX_MS);
            fgx_flow_expire(t->flows, now, NFQ_FLOW_IDLE_MS);
            nfq_script_tick(t);
            nfq_verdict_flush(t);
            next_tick = now + NFQ_TICK_MS;
        }
    }
    return NULL;
}
