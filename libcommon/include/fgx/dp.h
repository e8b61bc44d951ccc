/* The data-path protocol between controld and its workers, as plain structs. controld is the
 * requester on a req/rep channel (fgx/chan.h): it sends a RULESET (the worker answers ACK once
 * every one of its threads uses that generation) or a STATS_REQUEST (answered by STATS).
 * fgx_dp_encode()/fgx_dp_decode() convert to and from datapath.proto. */
#ifndef FGX_DP_H
#define FGX_DP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fgx/addr.h"
#include "fgx/ruleset.h"
#include "fgx/svcaddr.h"

/* Packets fgex itself injects (the resets nfqworker sends) carry this mark, and every fgex
 * nftables chain accepts them first, so they are never queued back to a worker. */
#define FGX_MARK 0x0fe40000u
#define FGX_MARK_MASK 0xffff0000u

/* NFQUEUE numbering. A worker with n threads owns queues base .. base + 2n - 1: thread i reads
 * queue base + i (fail-closed services) and base + n + i (fail-open services, configured with
 * NFQA_CFG_F_FAIL_OPEN). The nftables rules send a flow to thread symhash(flow) mod n. */
#define FGX_QUEUE_BASE_DEFAULT 7000u
static inline unsigned fgx_queue_num(unsigned base, unsigned nthreads, bool fail_open,
                                     unsigned thread)
{
    return base + (fail_open ? nthreads : 0) + thread;
}

/* A service's policy for a direction whose earlier bytes fgex did not scan (a connection open
 * before the service existed or was started, across a worker restart, an evicted flow): RESET
 * it, both ends, when it next sends (fail-closed, the default), or SCAN it from the next packet
 * on as if it started there. */
#define FGX_MIDSTREAM_RESET 0
#define FGX_MIDSTREAM_SCAN 1

enum fgx_dp_type {
    FGX_DP_RULESET = 1,
    FGX_DP_ACK,
    FGX_DP_STATS_REQUEST,
    FGX_DP_STATS,
    FGX_DP_ERROR,
    FGX_DP_FLOWS_REQUEST,   /* a planned restart: hand your flows over, then exit */
    FGX_DP_FLOWS,           /* the flows, from the old worker, for the new one */
    FGX_DP_CAPTURE_REQUEST, /* the captured connections of one service, please */
    FGX_DP_CAPTURES,        /* them (fgx/capture.h) */
    FGX_DP_HEARTBEAT_REQUEST, /* are you alive, and who are you? */
    FGX_DP_HEARTBEAT,         /* struct fgx_dp_heartbeat */
};

/* The answer to a HEARTBEAT_REQUEST (issue 24): who the worker is and how long ago each of its
 * data-path threads last turned its loop. Every wait in a data-path loop is bounded (well under
 * a second), so an idle thread turns too: a large stale_ms means stopped, deadlocked or
 * spinning inside one turn. */
#define FGX_DP_HB_THREADS_MAX 256
struct fgx_dp_heartbeat {
    uint32_t pid;
    uint64_t worker_id; /* random, fixed for the process's life */
    uint64_t generation;
    uint32_t nthreads;
    uint32_t stale_ms[FGX_DP_HB_THREADS_MAX];
};

struct fgx_dp_service {
    uint32_t id;
    uint8_t ipproto; /* IPPROTO_TCP or IPPROTO_UDP */
    uint16_t port;
    struct fgx_cidr addr; /* family 0: any */
    bool fail_open;
    uint8_t midstream; /* FGX_MIDSTREAM_RESET or FGX_MIDSTREAM_SCAN */
    struct fgx_blob db[2]; /* [0] client->server, [1] server->client; len 0: nothing to match */
    /* Decoded rulesets only: db[d].data is another blob's of the same ruleset (the same bytes
     * travelled once), released with that one. */
    bool db_shared[2];
    /* db[d] travels as its hash only (len 0): the worker has that database in the ruleset it
     * runs. Set by controld for the databases a worker acknowledged; a worker without it
     * refuses the ruleset. */
    bool db_known[2];
    /* The filter ids compiled into db[d], ascending (malloc'd, owned like db). A worker keeps
     * an open flow's old stream across a change and believes its matches only for filters that
     * are still here, so no partial match of a surviving filter is lost. */
    uint32_t *ids[2];
    size_t nids[2];
    /* Every address of the service, each with its port (malloc'd, owned like ids); naddrs 0:
     * the one address addr/port. An interface is family 0 with ifname set: the rules match the
     * interface, and the worker takes it for any address on its port. */
    struct fgx_svcaddr *addrs;
    size_t naddrs;
    /* TLS termination (proxy layer): the certificate chain and key as PEM (owned like db; len 0:
     * a plain TCP service), and whether the proxy speaks plaintext to the service. */
    struct fgx_blob tls_cert, tls_key;
    bool tls_upstream_plain;
    /* The HTTP service kind (proxy layer): HTTP/2 terminated, each stream filtered as the
     * HTTP/1.1 exchange it would have been (proxyworker/px_h2.c). */
    bool http;
    /* ... toward a service that speaks HTTP/1.1 only (proxyworker/px_h2.c). */
    bool http_upstream_http1;
    /* Capture (fgx/capture.h): connections kept by the whole worker, bytes per direction;
     * 0: capture off. */
    uint32_t capture_conns, capture_bytes;
    /* Script filters: scriptworker's SCRIPT payload (len 0: the service has no script; in a
     * decoded ruleset malloc'd and owned like db), the per-call deadline in ms. */
    struct fgx_blob script;
    uint32_t script_deadline_ms;
    uint8_t script_dirs; /* bit 0: client->server, bit 1: server->client */
    /* The service's own limits (proxyworker, issue 27): connections open at once (0: none),
     * one past it forwarded (counted) or refused, the first-byte timeout (0: the worker's). */
    uint32_t max_conns;
    bool over_limit_forward;
    uint32_t first_byte_ms;
};

struct fgx_dp_ruleset {
    uint64_t generation;
    size_t nservices;
    struct fgx_dp_service *services;
};

struct fgx_dp_filter_stat {
    uint32_t filter_id;
    uint64_t blocked; /* TCP flows blocked + UDP datagrams dropped, since the worker started */
    uint64_t matched; /* a log filter's matches (each also an event marked log), the same way */
};

struct fgx_dp_service_stat {
    uint32_t service_id;
    uint64_t packets, bytes, accepted, dropped, flows_active;
    uint64_t events_lost; /* blocks whose event the worker's queue refused (cumulative) */
    uint64_t tls_failed;  /* TLS handshakes failed or timed out (cumulative) */
    /* bytes of each direction (bytes is their sum) and connections seen (cumulative): nfqworker
     * counts the TCP flows it tracked, proxyworker the connections it relayed */
    uint64_t bytes_c2s, bytes_s2c, flows_new;
    uint64_t limit_hits; /* connections that found its max_conns reached (cumulative) */
};

/* An excerpt: up to FGX_DP_EXCERPT_BEFORE bytes before the match end and up to
 * FGX_DP_EXCERPT_AFTER after it, as far as they were seen. */
#define FGX_DP_EXCERPT_BEFORE 64
#define FGX_DP_EXCERPT_AFTER 32
#define FGX_DP_EXCERPT_MAX (FGX_DP_EXCERPT_BEFORE + FGX_DP_EXCERPT_AFTER)
#define FGX_DP_SCRIPT_FN_MAX 64 /* as controld keeps it (ctl_event.script_fn) */
#define FGX_DP_SCRIPT_REJECT 1
#define FGX_DP_SCRIPT_DROP 2

struct fgx_dp_event {
    uint64_t time_ns; /* CLOCK_REALTIME */
    uint32_t service_id;
    uint32_t filter_id;
    uint8_t dir;      /* FGX_DIR_C2S or FGX_DIR_S2C: direction of the matching bytes */
    uint8_t ipproto;
    uint8_t family;   /* 4 or 6 */
    uint8_t src[16], dst[16]; /* sender and receiver of the matching bytes */
    uint16_t sport, dport;
    uint8_t excerpt_len;
    uint8_t match_end; /* the match ends before excerpt[match_end] (<= excerpt_len) */
    uint8_t excerpt[FGX_DP_EXCERPT_MAX]; /* bytes around the end of the match */
    bool log;                            /* a log filter's match: nothing was dropped */
    /* A script's block (issue 16; filter_id 0): FGX_DP_SCRIPT_REJECT or _DROP, the function
     * that judged (cut at FGX_DP_SCRIPT_FN_MAX - 1 bytes), and the excerpt is the start of the
     * bytes it judged (match_end = excerpt_len). 0: a filter's match. */
    uint8_t script_verdict;
    char script_fn[FGX_DP_SCRIPT_FN_MAX];
    /* The HTTP/2 stream whose rendering matched (proxy, HTTP kind); 0: not one. */
    uint32_t h2_stream;
    /* The edge of the address the client came by (enum fgx_edge), when that address named
     * one (proxy); 0: it did not. */
    uint8_t edge;
    /* A log match's stream offset where it ends (its direction's bytes scanned before it); 0:
     * not known. */
    uint64_t stream_end;
    /* The worker's own: where the connection's capture waits in its thread's ring (gen 0:
     * none). Not encoded. */
    uint32_t cap_slot, cap_gen;
    /* The connection's capture, an encoded fgx.dp.Capture (malloc'd, released with the
     * message); NULL: none. Set by the worker's control thread, never in a ring. */
    uint8_t *capture;
    size_t capture_len;
};

/* A script worker's log entry (issue 16): kind is exception, timeout, print, restart or block.
 * The strings are malloc'd, owned by the stats that hold it. */
struct fgx_dp_script_log {
    uint32_t service_id;
    char *kind, *function, *text;
    /* the call's connection, when the entry is a call's and the thread still had it (an
     * exception, a timeout): family 4 or 6, else 0 and no addresses */
    uint8_t family;
    uint8_t caddr[16], saddr[16];
    uint16_t cport, sport;
};

struct fgx_dp_stats {
    uint64_t generation;
    size_t nfilters;
    struct fgx_dp_filter_stat *filters;
    size_t nservices;
    struct fgx_dp_service_stat *services;
    uint64_t queue_drops;    /* kernel queue drops + user-space drops on the worker's queues */
    uint64_t flows;          /* flows tracked now */
    uint64_t rss_bytes;
    uint64_t truncated;      /* packets that arrived cut short by the copy range (dropped) */
    uint64_t verdict_errors; /* verdicts the kernel refused (e.g. ENOENT for a stale id) */
    uint64_t malformed;      /* packets that could not be decoded (dropped) */
    /* segments dropped because the receiver would discard them and their bytes could then pass
     * later unscanned: bad checksum, data without ACK, inconsistent retransmission */
    uint64_t evasion;
    /* nfqworker: connections reset by the midstream policy (FGX_MIDSTREAM_RESET), and flows
     * with stream state pushed out of a full flow table */
    uint64_t midstream_resets;
    uint64_t flows_evicted;
    /* nfqworker, script filters: segments dropped on a scripted flow, fail_open verdicts for a
     * failed/late/absent script, flows blocked by one, flows whose verdict became final; and
     * packets waiting for a verdict now (a gauge) */
    uint64_t script_refused, script_errors, script_timeouts, script_blocked, script_final;
    uint64_t script_held, script_flows, script_reclaimed;
    /* proxyworker's own (0 from nfqworker): connections it reset itself, since it started */
    uint64_t conns_refused;  /* at its connection limit */
    uint64_t unclassified;   /* for no running proxy-layer service */
    uint64_t connect_failed; /* the real service could not be reached */
    uint64_t scan_errors;    /* hyperscan failed on their bytes */
    uint64_t src_refused;    /* their source address (IPv6: /64) had its limit open */
    uint64_t evicted;        /* closed at the connection limit to make room for a new one */
    uint64_t silent_closed;  /* no byte from either side within the first-byte timeout */
    /* relayed unscanned while their service was away: reset, or scanned on afresh (policy) */
    uint64_t midstream_reset, midstream_rescan;
    size_t nevents;
    struct fgx_dp_event *events; /* blocks since the previous STATS */
    uint64_t events_lost;
    size_t nscript_logs;
    struct fgx_dp_script_log *script_logs; /* since the previous STATS */
    uint64_t script_logs_lost;
    uint64_t worker_id; /* the process's (struct fgx_dp_heartbeat); 0: not said */
};

struct fgx_dp_msg {
    enum fgx_dp_type type;
    union {
        struct fgx_dp_ruleset ruleset;
        uint64_t ack_generation;
        struct fgx_dp_stats stats;
        char *error; /* malloc'd */
        struct {
            void *data; /* malloc'd */
            size_t len;
        } flows;
        uint32_t capture_service; /* CAPTURE_REQUEST */
        struct {
            struct fgx_blob *caps; /* malloc'd array of malloc'd encoded captures */
            size_t n;
        } captures;
        struct fgx_dp_heartbeat heartbeat;
    } u;
};

/* Encode m into a malloc'd buffer (*buf owned by the caller). Returns 0 or -ENOMEM/-EINVAL. */
int fgx_dp_encode(const struct fgx_dp_msg *m, void **buf, size_t *len);
/* Decode; every pointer inside *m is malloc'd and released by fgx_dp_msg_release(). A truncated
 * or malformed buffer gives -EINVAL and leaves *m empty. */
int fgx_dp_decode(const void *buf, size_t len, struct fgx_dp_msg *m);
void fgx_dp_msg_release(struct fgx_dp_msg *m);

#endif
