/* nfqworker's internal types, shared by its stages: recv (NFQUEUE netlink loop, one per
 * thread), match (per-packet decisions), verdict (batched verdicts), reset (TCP resets), stats
 * (counters) and ctl (the control thread). The rulesets as the packet threads see them
 * (fgx/wcfg.h), the event rings (fgx/evring.h) and the control loop (fgx/wctl.h) are
 * libcommon's, shared with proxyworker. */
#ifndef NFQ_H
#define NFQ_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fgx/addr.h"
#include "fgx/capture.h"
#include "fgx/dp.h"
#include "fgx/flow.h"
#include "fgx/reasm.h"
#include "fgx/wcfg.h"
#include "fgx/wctl.h"

#define NFQ_FLOWS_PER_THREAD 65536
#define NFQ_HOLD_POOL_BYTES (4u << 20)
#define NFQ_HOLD_FLOW_BYTES (64u << 10)
#define NFQ_HOLD_MAX_MS 2000
/* Bytes passed and kept until acknowledged (fgx_reasm_ctx_keep()): per thread, per direction.
 * A direction's unacknowledged bytes are what its sender has in flight, bounded by the
 * receiver's window; a few MiB covers a bulk transfer on a LAN (docs/architecture.md). */
#define NFQ_KEEP_POOL_BYTES (16u << 20)
#define NFQ_KEEP_FLOW_BYTES (4u << 20)
#define NFQ_FLOW_IDLE_MS 120000
#define NFQ_TICK_MS 1000
#define NFQ_RCVBUF (32 << 20)
#define NFQ_QUEUE_MAXLEN 8192
#define NFQ_RXBUF (0xffff + 4096)
#define NFQ_TXBUF (64 << 10)
#define NFQ_RX_BATCH 64
#define NFQ_FLUSH_BYTES (256u << 10) /* received bytes after which a batch's verdicts go out */
#define NFQ_LOG_RCVBUF (8 << 20)     /* the NFLOG socket's: a logged SYN-ACK takes ~2 KiB of it */
#define NFQ_LOG_NLBUFSIZ 1024        /* the kernel's buffer per message (one packet each) */
#define NFQ_LOG_DRAIN_MS 10          /* longest wait between two drains of the log socket */

#define NFQ_SVC_SLOTS 1024    /* per-thread service counters (open addressing) */
#define NFQ_FILTER_SLOTS 8192 /* per-thread filter counters (open addressing) */

/* Counters: written by the owner thread only, read with relaxed atomic loads by the control
 * thread (fgx/wctl.h). */
#define NFQ_CTR_ADD(p, n) FGX_CTR_ADD(p, n)

struct nfq_svc_ctr {
    struct fgx_ctr_slot slot;
    uint64_t packets, accepted, dropped, flows_active;
    uint64_t bytes[2];  /* [0] client->server, [1] server->client: one add a packet, as one total */
    uint64_t flows_new; /* TCP flows tracked (one add a flow, not a packet) */
};

struct nfq_counters {
    uint64_t truncated, malformed, verdict_errors, queue_drops, unclassified, flows;
    uint64_t evasion; /* segments the receiver would discard (fgx/dp.h) */
    uint64_t midstream_resets; /* connections reset for bytes not scanned before (fgx/dp.h) */
    /* script filters (nfq_script.c): segments dropped on a scripted flow (ahead of a gap, into
     * bytes a script still judges, past the hold bounds); fail-open/closed verdicts given for a
     * script that failed, timed out or had no scriptworker; flows a script rejected or dropped;
     * flows whose script verdict became final (their later packets cost no call); and the
     * packets that wait for a verdict now, flows with script state now (gauges); slots taken
     * from idle flows for new ones (a full table) */
    uint64_t script_refused, script_errors, script_timeouts, script_blocked, script_final;
    uint64_t script_held, script_flows, script_reclaimed;
    struct nfq_svc_ctr svc[NFQ_SVC_SLOTS];
    struct fgx_filter_ctr filter[NFQ_FILTER_SLOTS];
};

struct nfq_worker;
struct fgx_pkt;
struct mnl_socket;
struct nfq_sw;

#define NFQ_RESET_PENDING 32

struct nfq_reset {
    uint8_t family;
    uint16_t sport, dport;
    uint32_t seq;
    uint8_t saddr[16], daddr[16];
};

struct nfq_thread {
    struct nfq_worker *w;
    unsigned idx;
    unsigned queue[2]; /* [0] fail-closed, [1] fail-open */
    pthread_t tid;
    bool started;
    struct mnl_socket *nl;
    struct mnl_socket *lg; /* NFLOG group queue[0]: the services' SYN-ACKs (nfq_log.c) */
    char *lgbuf;
    int efd; /* eventfd: the control thread's "look at the config" */
    uint64_t alive_ms; /* __atomic: the loop's last turn (fgx_wctl_stamp(); heartbeat) */
    int raw4, raw6;
    struct fgx_wcfg *cfg;     /* in use, referenced */
    struct fgx_wcfg *applied; /* __atomic: cfg, as the control thread may compare it */
    struct fgx_flow_table *flows;
    struct fgx_reasm_ctx *reasm;
    uint64_t now_ms;
    char *rxbuf;
    char *txbuf;
    size_t txlen;
    /* Resets wait for the batch's verdicts: the bytes accepted before the match must reach the
     * receiver first, or the reset's sequence number would be ahead of it (and be ignored). */
    struct nfq_reset resets[NFQ_RESET_PENDING];
    unsigned nresets;
    struct nfq_counters ctr;
    struct fgx_evring events;
    /* What is being scanned, for a log filter's event (nfq_match_log()): a TCP flow's direction,
     * or (scan_flow NULL) a UDP datagram of service scan_svc. */
    struct fgx_flow *scan_flow;
    const struct fgx_pkt *scan_pkt;
    uint32_t scan_svc;
    uint8_t scan_dir;
    /* Capture rings of the services with capture on (fgx/capture.h, nfq_capture.c). */
    struct fgx_cap_set caps;
    /* A planned restart (nfq_handover.c): the control thread sets hx_req; the thread writes
     * its flows to hx_out, sets hx_done (1, or -1 on failure) and stops. hx_in: the flows of
     * the worker before, for this thread, rebuilt at its first ruleset. */
    int hx_req, hx_done; /* __atomic */
    uint8_t *hx_out, *hx_in;
    size_t hx_out_len, hx_in_len;
    /* Script filters (nfq_script.c): the thread's socket to scriptworker and the packets that
     * wait for a script's verdict; NULL without --script-url. */
    struct nfq_sw *sw;
};

struct nfq_worker {
    unsigned nthreads;
    unsigned queue_base;
    unsigned flows; /* flow table entries per thread */
    unsigned script_flows; /* flows per thread with script state at most (nfq_script.c) */
    unsigned udp_idle_ms;  /* a scripted UDP flow's life without a datagram (--udp-idle) */
    /* The rules queue the server's SYN-ACK instead of copying it (a kernel without the
     * nftables log expression): no NFLOG socket; the queued SYN-ACK anchors the same way. */
    bool no_synack_log;
    const char *script_url; /* scriptworker's (nfq_script.c); NULL: none */
    struct fgx_wcfg *current; /* __atomic: the newest published config */
    struct nfq_thread *threads;
    int stop;                   /* __atomic */
    int queue_fd; /* /proc/net/netfilter/nfnetlink_queue, opened before the drop; -1: none */
};

/* ---- nfq_recv.c ---- */
int nfq_thread_init(struct nfq_worker *w, struct nfq_thread *t, unsigned idx);
void nfq_thread_release(struct nfq_thread *t);
void *nfq_thread_main(void *arg);
/* Wake a thread so it picks up a new config or notices stop. */
void nfq_thread_wake(struct nfq_thread *t);
uint64_t nfq_now_ms(void);

/* ---- nfq_match.c ---- */
/* One queued packet: decide now (verdict added to the batch) or hold it. */
void nfq_match_packet(struct nfq_thread *t, unsigned queue, uint32_t id, const uint8_t *data,
                      size_t len, uint32_t cap_len);
/* Pick up the published config if it is newer (between packets). */
void nfq_match_switch(struct nfq_thread *t);
/* Release what a flow holds (fgx_flow_release_fn). */
void nfq_match_flow_release(void *arg, struct fgx_flow *f);
/* Verdict for a held segment (fgx_reasm_verdict_fn). */
void nfq_match_held_verdict(void *arg, uint64_t cookie, bool accept);
/* A log filter matched in what the thread (arg) is scanning: counted and recorded as an event
 * marked log (fgx_reasm_log_fn); nothing is dropped. */
void nfq_match_log(void *arg, const struct fgx_reasm_match *m);
/* A service's SYN-ACK, copied by the rules (not queued: no verdict): the server accepted a
 * connection; both of its streams start here. */
void nfq_match_synack(struct nfq_thread *t, const uint8_t *data, size_t len);
/* SYN-ACK copies were lost: no open flow may take a segment before its current position for
 * one already passed, since it may belong to a new connection on the same 4-tuple. */
void nfq_match_synacks_lost(struct nfq_thread *t);

struct nlmsghdr;

/* Send one config message on nl (NLM_F_ACK added) and wait for the kernel's answer (setup
 * only, blocking); a failure is logged as "<obj> <num>: <what>: ...". */
int nfq_nl_config(struct mnl_socket *nl, struct nlmsghdr *nlh, const char *what,
                  const char *obj, unsigned num);

/* The flow of a connection handed over by the worker before (nfq_handover.c), counted as a
 * flow of svc: embryonic or with stream state (NULL when an embryonic one finds no room), and
 * brought to svc's databases. */
/* f is not open any more (blocked, reset, both FINs): it leaves its service's flows_active,
 * once; the entry stays until it expires. */
void nfq_match_flow_close(struct nfq_thread *t, struct fgx_flow *f);
struct fgx_flow *nfq_match_adopt(struct nfq_thread *t, const struct fgx_flow_key *key,
                                 const struct fgx_wsvc *svc, bool embryonic);
void nfq_match_attach(struct nfq_thread *t, struct fgx_flow *f, const struct fgx_wsvc *svc);

/* A script rejected or dropped f (issue 16): an event like a regex block, filter_id 0, with
 * verdict (FGX_DP_SCRIPT_REJECT or _DROP), the function's name, the start of the bytes it
 * judged (sent in dir: data/len) as the excerpt, and the flow's capture pinned for it (the
 * judged bytes, [seq, seq + seq_len) of dir, are already in it, recorded as passed by the regex
 * stage: they are marked blocked, as a regex block's are). Before nfq_match_flow_block(), which
 * lets the flow go. */
void nfq_match_event_script(struct nfq_thread *t, const struct fgx_flow *f, enum fgx_dir dir,
                            uint8_t verdict, const char *fn, const uint8_t *data, size_t len,
                            uint32_t seq, uint32_t seq_len);
/* Stop scanning f for good (the rest of it is dropped); reset both ends first when reset is
 * set, as a block does: the sender in dir at seq (its peer's next byte), the other at ack. */
void nfq_match_flow_block(struct nfq_thread *t, struct fgx_flow *f, enum fgx_dir dir, bool reset,
                          uint32_t seq, uint32_t ack);
/* Counted verdict for a held packet's cookie (nfq_match_held_verdict()'s, without the arg). */
void nfq_match_cookie_verdict(struct nfq_thread *t, uint64_t cookie, bool accept);
/* The same, an ACCEPT of the packet rewritten as pkt (an edited datagram); false when it could
 * not be sent so (the caller gives another verdict). */
bool nfq_match_cookie_verdict_edit(struct nfq_thread *t, uint64_t cookie, const uint8_t *pkt,
                                   size_t len);

/* ---- nfq_script.c ---- */
#define NFQ_SW_FLOWS_DEFAULT 16384u /* --script-flows */
/* A UDP flow has no end to see: its script state (and its flow) goes after this long idle
 * (--udp-idle) */
#define NFQ_UDP_IDLE_MS 30000
/* Per thread: the sockets to scriptworker's interpreters (fgx/swlink.h), connected without
 * waiting. 0 or -errno; without a URL the scripted services get their fail_open verdict. */
int nfq_script_thread_init(struct nfq_thread *t, const char *url);
void nfq_script_thread_release(struct nfq_thread *t);
/* The descriptor to poll for scriptworker's answers; -1: none. */
int nfq_script_fd(const struct nfq_thread *t);
/* Packet thread: take every answer waiting (verdicts of held packets), without blocking. */
void nfq_script_recv(struct nfq_thread *t);
/* Packet thread, at each tick: held packets whose scriptworker does not answer get the
 * service's fail_open verdict. */
void nfq_script_tick(struct nfq_thread *t);
/* Packet thread, after a config switch: send the files that changed. */
void nfq_script_switch(struct nfq_thread *t);
/* Whether segment [seq, seq+len) of f's direction dir may go on to reassembly: false (drop
 * it) when it lies ahead of the stream (not held on a scripted flow: its bytes could not reach
 * the script in order), reaches into bytes a script still judges, or finds no room to wait. */
bool nfq_script_pre(struct nfq_thread *t, struct fgx_flow *f, const struct fgx_wsvc *svc,
                    enum fgx_dir dir, uint32_t seq, size_t len);
/* The regex scan accepted the segment (cookie), whose stream went from old_next to r's
 * next_seq: its new bytes go to the script and its verdict waits (true), or it waits behind
 * held ones (true), or nothing waits and the caller gives the verdict (false). */
bool nfq_script_post(struct nfq_thread *t, struct fgx_flow *f, const struct fgx_wsvc *svc,
                     enum fgx_dir dir, uint64_t cookie, uint32_t seq, uint32_t ack,
                     const uint8_t *payload, size_t len, uint32_t old_next);
/* A UDP datagram (cookie) of flow f the regex scan accepted: it goes to the script as one
 * chunk and its verdict waits (true), or the caller gives it (false: no script reads dir, or
 * the flow is decided). Each datagram is judged alone; a flow's state goes after
 * NFQ_UDP_IDLE_MS without a datagram. */
bool nfq_script_datagram(struct nfq_thread *t, struct fgx_flow *f, const struct fgx_wsvc *svc,
                         enum fgx_dir dir, uint64_t cookie, const struct fgx_pkt *p);
/* f's held packets, if any, in direction dir: the first one's seq and ack (for a reset). */
bool nfq_script_first_held(const struct nfq_thread *t, const struct fgx_flow *f, enum fgx_dir dir,
                           uint32_t *seq, uint32_t *ack);
/* A FIN of f's direction dir at seq went on (after nfq_script_post() for its bytes): once both
 * streams ended at their ends and nothing waits, f's script state goes (CLOSE), and any byte
 * past the ends is dropped. A FIN anywhere else changes nothing. */
void nfq_script_fin(struct nfq_thread *t, struct fgx_flow *f, enum fgx_dir dir, uint32_t seq);
/* f leaves (released, blocked): its held packets are dropped, scriptworker told. */
void nfq_script_flow_end(struct nfq_thread *t, struct fgx_flow *f);

/* ---- nfq_handover.c ---- */
/* Packet thread, between batches: true once it has written its flows out and must stop. */
bool nfq_handover_poll(struct nfq_thread *t);
/* Control thread: every thread's flows as one malloc'd blob; the process then stops. */
int nfq_handover_export(struct nfq_worker *w, void **data, size_t *len);
/* Control thread, before the first ruleset: keep each thread's part of the flows given. */
int nfq_handover_import(struct nfq_worker *w, const void *data, size_t len);
/* Packet thread, as it switches to its first ruleset: rebuild the flows kept for it. */
void nfq_handover_apply(struct nfq_thread *t);

/* ---- nfq_capture.c ---- */
/* Control thread: every capture of service id, encoded, into *caps (malloc'd array). */
int nfq_cap_request(struct nfq_worker *w, uint32_t id, struct fgx_blob **caps, size_t *n);

/* ---- nfq_log.c ---- */
int nfq_log_open(struct nfq_thread *t);
void nfq_log_close(struct nfq_thread *t);
/* Hand every SYN-ACK copy waiting to the match stage, without blocking. */
void nfq_log_drain(struct nfq_thread *t);

/* ---- nfq_normalize.c ---- */
struct fgx_pkt;
/* A TCP packet the receiver would discard for what it carries alone (data without ACK, IP
 * options, extension headers, signature options, urgent data): false, counted in evasion; the
 * caller drops it before it touches any flow state. */
bool nfq_norm_packet(struct nfq_thread *t, const struct fgx_pkt *p);
/* The same for what needs flow f (an ACK of unsent bytes, an old timestamp), before the segment
 * goes to reassembly; on true its ACK has released the other direction's kept bytes. */
bool nfq_norm_segment(struct nfq_thread *t, struct fgx_flow *f, enum fgx_dir dir,
                      const struct fgx_pkt *p);
/* After reassembly gave verdict v (match m): timestamps move on, overlaps refused are counted. */
void nfq_norm_passed(struct nfq_thread *t, struct fgx_flow *f, enum fgx_dir dir,
                     const struct fgx_pkt *p, enum fgx_reasm_verdict v,
                     const struct fgx_reasm_match *m);

/* ---- nfq_verdict.c ---- */
void nfq_verdict_add(struct nfq_thread *t, unsigned queue, uint32_t id, bool accept);
/* ACCEPT with the packet replaced by pkt (len bytes, copied): 0, or -EMSGSIZE when it cannot
 * fit one verdict message. */
int nfq_verdict_add_payload(struct nfq_thread *t, unsigned queue, uint32_t id, const void *pkt,
                            size_t len);
void nfq_verdict_flush(struct nfq_thread *t);

/* ---- nfq_reset.c ---- */
int nfq_reset_open(struct nfq_thread *t);
void nfq_reset_close(struct nfq_thread *t);
void nfq_reset_flush(struct nfq_thread *t);
/* Queue a TCP RST from (saddr, sport) to (daddr, dport) with sequence number seq; it is sent
 * by nfq_reset_flush(), which nfq_verdict_flush() calls once the verdicts are out. */
void nfq_reset_send(struct nfq_thread *t, int family, const uint8_t *saddr, uint16_t sport,
                    const uint8_t *daddr, uint16_t dport, uint32_t seq);

/* ---- nfq_stats.c ---- */
struct nfq_svc_ctr *nfq_stats_svc(struct nfq_counters *c, uint32_t id);
void nfq_stats_filter_blocked(struct nfq_counters *c, uint32_t filter_id);
void nfq_stats_filter_matched(struct nfq_counters *c, uint32_t filter_id);
/* Open the kernel's queue table for the drop counts, as root, before the privilege drop (the
 * seccomp filter refuses open() after it). A failure is logged: the counts then read 0. */
void nfq_stats_open(struct nfq_worker *w);
/* Sum every thread's counters into *out (arrays malloc'd; fgx_dp_msg_release() frees them). */
int nfq_stats_collect(struct nfq_worker *w, struct fgx_dp_stats *out);

/* ---- nfq_ctl.c ---- */
/* Serve the control channel at url until stop is set. */
int nfq_ctl_run(struct nfq_worker *w, const char *url);

/* nfq_seccomp.c: run as user with what the threads still need (fgx/priv.h), after the
 * queues are open and before the threads start. */
int nfq_priv_drop(const char *user);

#endif
