/* proxyworker's internal types, shared by its stages: accept (listening sockets, new
 * connections, the upstream connect), relay (moving bytes between the two sides, backpressure,
 * half-close, idle timeout), match (scanning a side's bytes before they move, blocking), stats
 * (counters and events) and ctl (the control thread: rulesets and statistics from controld). */
#ifndef PX_H
#define PX_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "fgx/capture.h"
#include "fgx/dp.h"
#include "fgx/evring.h"
#include "fgx/reasm.h"
#include "fgx/wcfg.h"
#include "fgx/wctl.h"

#define PX_READ_MAX (256u << 10)  /* one read from a socket (the thread's scratch buffer) */
/* The connection limit when --max-conns does not set one: PX_MEM_SHARE of the machine's memory
 * over PX_CONN_COST, what an idle proxied connection was measured to cost (the proxy's own
 * allocations, both sockets in the kernel and a database's stream state; docs/architecture.md),
 * within PX_MAX_CONNS_MIN..PX_MAX_CONNS_MAX and the descriptors the process may open. */
#define PX_CONN_COST (24u << 10)
#define PX_MEM_SHARE 8 /* one eighth of physical memory */
#define PX_MAX_CONNS_MIN 1024
#define PX_MAX_CONNS_MAX 1000000
#define PX_MAX_PER_SRC_DEFAULT 256 /* open connections per client address (IPv6: per /64) */
#define PX_FIRST_BYTE_S_DEFAULT 10 /* a connection where neither side sent a byte is closed */
#define PX_EVICT_SCAN 1024 /* connections of a list looked at for one of a source's */
#define PX_IDLE_S_DEFAULT 600
#define PX_UDP_IDLE_S_DEFAULT 30 /* a UDP flow without a datagram (px_udp.c, --udp-idle) */
#define PX_TICK_MS 1000
#define PX_ALIVE_MS 200 /* the liveness stamp's timer (well under controld's 1 s) */
#define PX_RESET_WAIT_MS 200 /* longest a reset waits for the peer to acknowledge what it got */
#define PX_BACKLOG 1024
/* Event priorities. A read that filled PX_HEAVY_READ or more moves its side's read event to
 * PX_PRIO_HEAVY: the loop runs one such callback, then looks for new events, and runs every
 * ready event of the normal priority (everything else) first. A request on a light connection
 * then waits for at most one bulk chunk (~100 us), not for a chunk of every bulk connection. */
#define PX_PRIO_COUNT 3
#define PX_PRIO_NORMAL 1 /* libevent's default with PX_PRIO_COUNT priorities */
#define PX_PRIO_HEAVY 2
#define PX_HEAVY_READ (64u << 10)
/* Onward sockets tried for one connection whose onward 4-tuple was still in use (px_relay.c) */
#define PX_ONWARD_RETRIES 8

#define PX_H2_PREFACE_LEN 24 /* the HTTP/2 client preface, "PRI * HTTP/2.0..." */

#define PX_SVC_SLOTS 256     /* per-thread service counters (open addressing) */
#define PX_FILTER_SLOTS 4096 /* per-thread filter counters (open addressing) */

/* Counters: written by the owner thread only, read with relaxed atomic loads by the control
 * thread (fgx/wctl.h). */
#define PX_CTR_ADD(p, n) FGX_CTR_ADD(p, n)

struct px_svc_ctr {
    struct fgx_ctr_slot slot;
    /* reads relayed, connections relayed, connections reset, connections open */
    uint64_t reads, accepted, reset, open;
    uint64_t bytes[2]; /* relayed, by the side that sent them: [0] the client's, [1] the server's */
    uint64_t tls_failed; /* TLS handshakes failed or timed out (px_tls.c) */
    uint64_t script_blocked; /* connections a script rejected or dropped */
    uint64_t limit_hits;     /* connections that found the service's --max-conns reached */
};

struct px_counters {
    uint64_t conns;          /* open now */
    uint64_t limit_refused;  /* refused at the connection limit */
    uint64_t unclassified;   /* accepted for no running service (reset) */
    uint64_t scan_errors;    /* hyperscan failures (the connection is reset, never passed) */
    uint64_t connect_failed; /* the real service could not be reached (client reset) */
    uint64_t src_refused;    /* refused: its source address had --max-conns-per-src open */
    uint64_t evicted;        /* closed at the connection limit to make room for a new one */
    uint64_t silent_closed;  /* closed with no byte from either side (--first-byte-timeout) */
    /* relayed unscanned while their service was away, at its return: reset (policy reset), or
     * scanned on with fresh streams (policy scan) */
    uint64_t midstream_reset, midstream_rescan;
    uint64_t script_errors, script_timeouts; /* fail-open verdicts given for a script */
    struct px_svc_ctr svc[PX_SVC_SLOTS];
    struct fgx_filter_ctr filter[PX_FILTER_SLOTS];
};

struct event_base;
struct event;
struct evconnlistener;
struct px_worker;
struct px_tls;
struct fgx_wtls;

/* A socket to reset once its peer acknowledged every byte sent to it. */
struct px_reset {
    int fd;
    uint64_t deadline_ms;
    struct px_reset *next;
};

/* One side of a connection. What the other side sent is read into the thread's scratch buffer,
 * scanned there and written here at once; only what this socket does not take is kept, in pend,
 * and the other side is not read again until pend is written: the kernel's socket buffers are
 * the backpressure, and at most one read (PX_READ_MAX) waits per side. */
struct px_side {
    int fd;
    struct event *rev, *wev; /* readable (persistent), writable (one-shot) */
    uint8_t *pend;           /* malloc'd while bytes wait, freed once written */
    size_t pend_off, pend_len;
};

/* One proxied connection: side 0 is the client (the accepted socket, whose local address is the
 * service's), side 1 the real service (our upstream socket, bound to the client's address).
 * Allocated with px_conn_new(): its four events live in the same allocation. */
struct px_conn {
    struct px_thread *t;
    struct px_side s[2];
    struct fgx_reasm dir[2]; /* [0] scans what side 0 sends (c2s), [1] what side 1 sends */
    struct fgx_wdb *dbref[2];
    uint64_t epoch;          /* thread's config epoch the databases were taken from */
    struct px_tls *tls;      /* a TLS service's connection (px_tls.c); NULL: plain TCP */
    /* The HTTP service kind (px_h2.c): http set for its connections; http1 once the client's
     * first bytes were not the HTTP/2 preface (the plain relay from then on); h2on once both
     * HTTP/2 sessions run (h2: their state, or the preface's first bytes while it arrives). */
    struct px_h2 *h2;
    bool http, http1, h2on;
    bool h1up; /* the service speaks HTTP/1.1 only: streams sent to it as HTTP/1.1 */
    /* The edge of the service's address the client came by (enum fgx_edge; 0: the address
     * named none) and the port the service listens on for it (0: the client's own). */
    uint8_t edge;
    uint16_t up_port;
    uint64_t last_ms;        /* last activity; until the first byte, when it was accepted */
    uint32_t service_id;
    /* The service is not in the thread's config (stopped, removed, or on the other layer): its
     * bytes are relayed as they are, with the streams kept as they were. */
    bool absent;
    bool unscanned; /* bytes moved while absent: the streams no longer hold what passed */
    bool silent;    /* no byte from either side yet (on the thread's silent list) */
    uint32_t first_byte_ms; /* its service's own first-byte timeout (0: the worker's) */
    /* Closed to make room: its place in the worker's count (and, at a source's limit, in its
     * source's) goes to the new connection, not back to the pool another thread could take
     * it from first. */
    bool keep_slot, keep_src;
    bool assigned;           /* the events are assigned (px_relay_start) */
    bool connected;          /* upstream connected */
    bool eof[2];             /* side i sent its FIN */
    bool shut[2];            /* we sent side i our FIN */
    uint8_t family;
    uint32_t cap_slot, cap_gen;             /* its capture (fgx/capture.h); gen 0: none */
    struct sockaddr_storage client, server; /* client's address, service's (original dst) */
    struct px_conn *prev, *next; /* thread's list (silent or active), least recent first */
    /* Script filters (px_script.c): scriptworker's number for it (0: never sent), a side's
     * bytes waiting for their verdict, DROP's black hole. */
    uint64_t sw_id;
    uint16_t sw_hash;
    bool sw_drop;
    /* A UDP flow (px_udp.c): s[1] its upstream socket, s[0] unused (the thread's listener
     * takes the client's datagrams); not on the thread's lists. A side's datagrams that came
     * while one of them waits for its script verdict wait behind it, in order. */
    bool udp;
    struct px_dgram *uq_head[2], *uq_tail[2];
    unsigned uq_n[2];
    uint8_t *hold[2];
    size_t hold_len[2];
    uint32_t hold_seq[2];
    struct event *sw_timer;
};

/* A thread's connections: those where no byte moved yet, by accept time (the first-byte timeout
 * and the first to go at the connection limit), and the others, least recently active first. */
enum { PX_LIST_SILENT, PX_LIST_ACTIVE, PX_LISTS };

struct px_list {
    struct px_conn *head, *tail;
};

/* Open connections per client source (an IPv4 address, an IPv6 /64) and thread: an
 * open-addressing table (linear probing, backward-shift deletion) sized for twice the worker's
 * connection limit, so it never fills. The hash is keyed with a random seed: the addresses are
 * the attacker's choice. One mutex: held for one probe, at accept and close only. */
struct px_src_slot {
    uint64_t key;   /* IPv4: the address; IPv6: the /64 prefix */
    uint32_t fam;   /* 4 or 6, | the thread's index << 8 */
    uint32_t count; /* 0: free */
};

struct px_src_table {
    pthread_mutex_t lock;
    struct px_src_slot *slot;
    size_t mask;
    uint64_t seed;
    size_t used;
};

struct px_thread {
    struct px_worker *w;
    unsigned idx;
    pthread_t tid;
    bool started;
    struct event_base *base;
    struct event *wake; /* activated by the control thread: look at the config, or stop */
    struct event *tick;
    struct event *alive; /* stamps alive_ms every PX_ALIVE_MS */
    uint64_t alive_ms;   /* __atomic: the loop's last stamp (fgx_wctl_stamp()) */
    struct evconnlistener *lis[2]; /* IPv4, IPv6 (either may be NULL) */
    struct fgx_wcfg *cfg;          /* in use, referenced */
    struct fgx_wcfg *applied;      /* __atomic: cfg, as the control thread compares it */
    uint64_t epoch;                /* bumped at every switch */
    struct fgx_reasm_ctx *reasm;   /* the thread's hyperscan scratch */
    uint64_t now_ms;
    struct px_list list[PX_LISTS];
    uint8_t *buf; /* PX_READ_MAX bytes: every read lands here */
    unsigned onward_next; /* cursor over the onward ports (px_accept.c) */
    struct px_reset *resets; /* sockets whose reset waits (px_relay.c) */
    struct event *reset_timer;
    struct px_counters ctr;
    struct fgx_evring events;
    /* The connection and side being scanned, for a log filter's event (px_match_log()). */
    struct px_conn *scan_conn;
    int scan_side;
    uint32_t scan_stream; /* and the HTTP/2 stream (0: none), for the event */
    struct fgx_cap_ref *scan_cap; /* and its capture (NULL: the connection's own) */
    struct px_tls_cache *tls_cache; /* sessions to TLS services (px_tls.c); NULL until one */
    /* Capture rings of the services with capture on (fgx/capture.h); the proxy has no wire
     * sequence numbers, so its captures' are made up (synth_seq). */
    struct fgx_cap_set caps;
    struct px_sw *sw; /* its socket to scriptworker (px_script.c) */
    struct px_udp *udp; /* its UDP listeners and flows (px_udp.c) */
};

struct px_worker {
    unsigned nthreads;
    uint16_t port;       /* where the tproxy rules send connections */
    unsigned max_conns;  /* per worker; at the limit the most idle connection makes room */
    unsigned max_per_src; /* per client source (0: no limit) */
    unsigned idle_ms;
    unsigned first_byte_ms; /* 0: no first-byte timeout */
    unsigned udp_idle_ms;   /* a UDP flow's life without a datagram (px_udp.c) */
    struct px_src_table src;
    unsigned nconns;     /* __atomic: open connections over all threads */
    struct fgx_wcfg *current; /* __atomic: the newest published config */
    struct px_thread *threads;
    const char *script_url; /* scriptworker (--script-url), or NULL */
    int stop;            /* __atomic */
};

/* ---- px_accept.c ---- */
/* Create w->nthreads threads (w->port, max_conns, idle_ms set), listening and looping; on
 * failure everything is released. px_worker_stop() stops and releases them (no-op when none). */
/* The listeners and each thread's loop (what needs root), then the threads (after the worker
 * dropped its privileges, px_seccomp.c). A failed start stops what was opened. */
int px_worker_open(struct px_worker *w);
int px_worker_start(struct px_worker *w);
/* px_seccomp.c: run as user with what the threads still need (fgx/priv.h). */
int px_priv_drop(const char *user);
void px_worker_stop(struct px_worker *w);
/* Open the thread's event base, listeners, timers and scratch. */
int px_thread_init(struct px_worker *w, struct px_thread *t, unsigned idx);
void px_thread_release(struct px_thread *t);
void *px_thread_main(void *arg);
/* From any thread: make t pick up the newest config, or notice stop. */
void px_thread_wake(struct px_thread *t);
uint64_t px_now_ms(void);

/* ---- px_src.c ---- */
/* A table for max_conns connections. Returns 0 or -ENOMEM. */
int px_src_init(struct px_src_table *t, unsigned max_conns);
void px_src_release(struct px_src_table *t);
/* Count one more connection from ss on thread unless limit (0: none) are open there: true when
 * counted. */
bool px_src_take(struct px_src_table *t, const struct sockaddr_storage *ss, unsigned thread,
                 unsigned limit);
/* One connection from ss on thread (counted by px_src_take) closed. */
void px_src_put(struct px_src_table *t, const struct sockaddr_storage *ss, unsigned thread);
/* Open connections from ss's source on thread now. */
unsigned px_src_count(struct px_src_table *t, const struct sockaddr_storage *ss, unsigned thread);
/* a and b are the same source (IPv4: address; IPv6: /64). */
bool px_src_same(const struct sockaddr_storage *a, const struct sockaddr_storage *b);
/* The default connection limit for a machine with phys bytes of memory and nofile descriptors. */
unsigned px_max_conns_default(uint64_t phys, uint64_t nofile);

/* ---- px_relay.c ---- */
/* A zeroed connection with room for its events, or NULL. */
struct px_conn *px_conn_new(void);
/* c's fields set, s[0].fd accepted, s[1].fd an unconnected upstream socket (c owns both from
 * here): connect upstream and relay once connected. On failure c is closed (client reset). */
void px_relay_start(struct px_conn *c);
/* Close both sides; with reset, each gets a RST (SO_LINGER 0) instead of a FIN. Frees c. */
void px_relay_close(struct px_conn *c, bool reset);
/* Close connections idle since before now - idle_ms, and those where nothing moved since
 * before now - first_byte_ms. */
void px_relay_expire(struct px_thread *t);
/* At the connection limit: close t's connection that waited longest for its first byte, or
 * else its least recently active one, handing its place in the worker's count to the caller's
 * new connection. Returns false when t has none. */
bool px_relay_evict(struct px_thread *t);
/* At a source's limit: the same among t's connections from src's source, looking at the
 * PX_EVICT_SCAN oldest of each list; both its places (the worker's count and the source's) go
 * to the new connection. Returns false when none was found. */
bool px_relay_evict_src(struct px_thread *t, const struct sockaddr_storage *src);
/* Reset the sockets whose peers acknowledged everything (or whose wait ran out); all of them
 * with now. The thread's reset timer calls it. */
void px_relay_resets(struct px_thread *t, bool now);

/* ---- px_match.c ---- */
/* A connection end's address (4 or 16 bytes into addr) and port; returns its family, 4 or 6,
 * or 0 for neither (nothing written). */
uint8_t px_sa_split(const struct sockaddr_storage *ss, uint8_t *addr, uint16_t *port);
/* Pick up the published config if it is newer (between events). */
void px_match_switch(struct px_thread *t);
/* Bring c to its service's databases of the thread's config. */
void px_match_attach(struct px_conn *c);
/* After a config switch: mark every connection of t whose service left as absent, and apply
 * the service's midstream policy to those that relayed bytes while it was away and whose
 * service is back (reset them, or scan them on with fresh streams). */
void px_match_presence(struct px_thread *t);
/* Scan len bytes side sent (data) before they move. Returns 0 to pass them, or
 * -EACCES when a filter matched (counted, event recorded) or -EIO when the scan failed: the
 * caller resets both sides. */
int px_match_scan(struct px_conn *c, int side, const uint8_t *data, size_t len);
/* The same for the rendering of one HTTP/2 stream (px_h2.c), scanned with its own stream r and
 * recorded in its own capture *cap (gen 0 until its first bytes; the event takes it): 0,
 * -EACCES (counted, an event naming the stream) or -EIO. Nothing is closed here. */
int px_match_scan_h2(struct px_conn *c, struct fgx_reasm *r, struct fgx_cap_ref *cap, int side,
                     uint32_t stream, const uint8_t *data, size_t len);
void px_match_conn_release(struct px_conn *c);

/* The same for one UDP datagram of c (block mode, its direction's database): 0, or -EACCES
 * (counted, an event) or -EIO; the caller drops the datagram alone. */
int px_match_scan_dgram(struct px_conn *c, int side, const uint8_t *data, size_t len);

/* ---- px_udp.c ---- */
/* The thread's UDP listeners on w->port (IPv4; IPv6 when the host has it) and raw sockets. */
int px_udp_thread_init(struct px_thread *t);
void px_udp_thread_release(struct px_thread *t);
/* The tick: flows idle w->udp_idle_ms, or whose service left, go. */
void px_udp_expire(struct px_thread *t);
/* A datagram of UDP flow c judged: on to the service (side 0) or back to the client from the
 * service's address (side 1). Always true (c stays). */
bool px_udp_forward(struct px_conn *c, int side, const uint8_t *data, size_t len);
/* After a script verdict on UDP flow c: the datagrams of each side that waited behind it go
 * on to the script (or on their way), until one waits again. */
void px_udp_next(struct px_conn *c);

/* ---- px_tls.c ---- */
/* Once per process, before any thread starts. */
int px_tls_init(void);
/* fgx_wtls_load_fn: the service's SSL_CTX pair from its PEM certificate and key. */
int px_tls_load(void *worker, const struct fgx_dp_service *s, struct fgx_wtls *out);
/* c (both fds set) terminates TLS with wt's certificate: 0, or -EINVAL (wt failed to load) /
 * -ENOMEM; c->tls stays NULL then. */
int px_tls_conn_start(struct px_conn *c, const struct fgx_wtls *wt);
void px_tls_conn_free(struct px_conn *c);
/* The thread's cached sessions to the services, freed (at the thread's end). */
void px_tls_thread_release(struct px_thread *t);
/* The upstream connect finished: start with the client's handshake. */
void px_tls_connected(struct px_conn *c);
/* c's handshakes are not both done yet. */
bool px_tls_handshaking(const struct px_conn *c);
/* An event on side during the handshakes: drive them. Returns false when c was closed (a
 * failure, counted in tls_failed). */
bool px_tls_step(struct px_conn *c, int side);
/* The first-byte timeout closes c while handshaking: counted and logged (the caller closes). */
void px_tls_timed_out(struct px_conn *c);
/* Side speaks TLS (the client's side of a TLS service; the service's unless upstream plain). */
bool px_tls_side(const struct px_conn *c, int side);
/* Plaintext from side: bytes (> 0, *eof may be set too: the side ended after them), 0 with *eof,
 * or -1 with errno (EAGAIN: nothing yet). */
ssize_t px_tls_recv(struct px_conn *c, int side, uint8_t *buf, size_t cap, bool *eof);
/* Plaintext to side: bytes taken (maybe fewer than len: retry the rest with the same bytes
 * when writable), or -1 with errno. */
ssize_t px_tls_send(struct px_conn *c, int side, const uint8_t *data, size_t len);
/* A close_notify to side, before its FIN. */
void px_tls_shutdown(struct px_conn *c, int side);
/* ---- px_h2.c ---- */
/* len bytes side sent on a connection of the HTTP kind that is not known to be HTTP/1.1 (in
 * buf, which has PX_H2_PREFACE_LEN bytes of room after PX_READ_MAX). 1: taken by HTTP/2 (or
 * kept while the preface may still come); 0: not HTTP/2: buf and *len (the kept bytes put in
 * front) go the plain relay's way; -1: c was closed. */
int px_h2_read(struct px_conn *c, int side, uint8_t *buf, size_t *len);
/* Write what the sessions have to send (the rest of a write in the side's pend). Returns false
 * when c was closed. */
bool px_h2_flush(struct px_conn *c);
void px_h2_conn_free(struct px_conn *c);
/* Toward an HTTP/1.1 service (c->h1up, HTTP/2 running): the service closed its connection.
 * false: c is closed. */
bool px_h2_upstream_eof(struct px_conn *c);
/* The interpreters' verdict (enum fgx_sw_verdict code, from function fn) on frame seq of the
 * stream they know as sw_id (px_script.c's px_script_stream_chunk()); an edit (FGX_SW_EDIT):
 * the len bytes of data take the frame's place. */
void px_h2_script_verdict(struct px_conn *c, uint64_t sw_id, uint32_t seq, uint8_t code,
                          const char *fn, const uint8_t *data, size_t len);
/* The same (px_relay.c): the service's connection replaced by a new one (the old closed). 0:
 * connected or connecting (px_h2_flush() once it is); -errno: none (the old fd still held). */
int px_relay_reopen(struct px_conn *c);

/* ---- px_script.c ---- */
int px_script_thread_init(struct px_thread *t, const char *url);
void px_script_thread_release(struct px_thread *t);
/* After a config switch: give scriptworker the files that are new or changed, and say which
 * services lost theirs, before any chunk under the new config. */
void px_script_switch(struct px_thread *t);
/* len bytes side sent, scanned: 0 to forward them now (no script), 1 when they are held for
 * the verdict (or discarded: DROP), -1 to reset the connection. */
int px_script_chunk(struct px_conn *c, int side, const uint8_t *data, size_t len);
void px_script_conn_close(struct px_conn *c);
/* The same for one HTTP/2 stream of c (px_h2.c), a connection of its own to the interpreters
 * (*sw_id: its number there, 0 until the first chunk opens it), its HTTP/1.1 rendering as the
 * bytes: 1, sent as frame *seq, the verdict due within *deadline_ms (then
 * px_h2_script_verdict()); 0: not judged on this side (or no scriptworker and fail-open), pass
 * them; -1: no scriptworker, and the service fails closed. An edit's bytes come with the
 * verdict. */
int px_script_stream_chunk(struct px_conn *c, uint64_t *sw_id, int side, const uint8_t *data,
                           size_t len, uint32_t *seq, uint64_t *deadline_ms);
void px_script_stream_close(struct px_conn *c, uint64_t sw_id);
bool px_script_fail_open(const struct px_conn *c);

/* ---- px_relay.c (continued) ---- */
/* Forward bytes a script accepted and read side again. Returns false when c was closed. */
bool px_relay_forward_held(struct px_conn *c, int side, const uint8_t *data, size_t len);

/* ---- px_stats.c ---- */
/* The onward socket of a connection from client: transparent, bound to the client's address
 * and an onward port (px_accept.c: below 1024, where no client's is; kernel_port: the kernel's
 * choice), SO_REUSEADDR, marked FGX_MARK so the rules leave it alone. Returns 0 or -errno. */
int px_accept_onward(struct px_thread *t, const struct sockaddr_storage *client, bool kernel_port,
                     int *out);
struct px_svc_ctr *px_stats_svc(struct px_counters *c, uint32_t id);
/* The service's connections open now over every thread (read only: another thread's table is
 * looked at, never written), for its own --max-conns (issue 27). */
uint64_t px_stats_svc_open(const struct px_worker *w, uint32_t id);
void px_stats_filter_blocked(struct px_counters *c, uint32_t filter_id);
void px_stats_filter_matched(struct px_counters *c, uint32_t filter_id);
/* A log filter matched in what the thread (arg) is scanning: counted and recorded as an event
 * marked log; nothing is dropped, the relay goes on. (px_match.c) */
void px_match_log(void *arg, const struct fgx_reasm_match *m);
/* A script rejected or dropped c (issue 16): an event like a filter's block, filter_id 0, with
 * the function's name, the start of the bytes it judged (side's, data/len) as the excerpt, and
 * the connection's capture pinned for it (its judged bytes are already in it, recorded as
 * passed by the regex stage: they are marked blocked, as a regex block's are). */
void px_match_event_script(struct px_conn *c, int side, uint8_t verdict, const char *fn,
                           const uint8_t *data, size_t len);
/* Sum every thread's counters into *out (arrays malloc'd; fgx_dp_msg_release() frees them). */
int px_stats_collect(struct px_worker *w, struct fgx_dp_stats *out);
/* Control thread: every capture of service id, encoded, into *caps (malloc'd array). */
int px_stats_captures(struct px_worker *w, uint32_t id, struct fgx_blob **caps, size_t *n);

/* ---- px_ctl.c ---- */
/* Load rs, publish it and wait until every thread uses it. */
int px_ctl_apply(struct px_worker *w, const struct fgx_dp_ruleset *rs);
/* Serve the control channel at url until stop is set. */
int px_ctl_run(struct px_worker *w, const char *url);

#endif
