/* Remote control channels: a tls+tcp:// listener added to a channel from fgx/chan.h, with an
 * admission check run before any message of a new connection is read, and receiving with the
 * address of the sender, so that controld can tell the trusted local socket from remote peers.
 * Implemented in chan.c, which keeps nng to itself. */
#ifndef FGX_CHAN_TLS_H
#define FGX_CHAN_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fgx/chan.h"

/* Open a channel and dial url (tls+tcp://HOST:PORT) over TLS, trusting only the certificates
 * in the PEM file ca_pem_path (a pinned server certificate), authentication required: a server
 * whose certificate does not chain to it fails the handshake (-EKEYREJECTED) before a request
 * is sent. server_name (may be NULL) is the name checked against the certificate. block_ms as
 * for fgx_chan_dial(). (Written by the fgexctl TLS engineer; declaration restored here.) */
int fgx_chan_dial_tls(const char *url, enum fgx_chan_role role, const char *ca_pem_path,
                      const char *server_name, int block_ms, struct fgx_chan **out);

/* Where a message came from. family 0: a local transport (ipc://, inproc://). */
struct fgx_peer {
    int family;       /* 0, 4 or 6; an IPv4-mapped IPv6 address is reported as 4 */
    uint8_t addr[16]; /* network order; 4 bytes used for family 4 */
    uint16_t port;
};

/* A socket address as a peer (an IPv4-mapped IPv6 address as IPv4). false, *peer zeroed: sa
 * is NULL or neither IPv4 nor IPv6. */
struct sockaddr;
bool fgx_peer_from_sockaddr(const struct sockaddr *sa, struct fgx_peer *peer);

/* Called from an nng thread for each new connection of a TLS listener, before its first
 * message: false closes the connection. arg is the one given to fgx_chan_listen_tls(). */
typedef bool (*fgx_chan_admit_fn)(const struct fgx_peer *peer, void *arg);

/* Add a TLS listener on url (tls+tcp://ADDR:PORT) to c, which keeps serving its other
 * listeners through the same fgx_chan_recv_peer()/fgx_chan_send() loop. cert_pem and key_pem
 * (PEM text) are copied. admit may be NULL (every peer is accepted); it must stay valid, with
 * arg, until fgx_chan_close(). Returns 0 or a negative errno (the reason logged). */
int fgx_chan_listen_tls(struct fgx_chan *c, const char *url, const char *cert_pem,
                        const char *key_pem, fgx_chan_admit_fn admit, void *arg);

/* Why the guard closed connections (fgx_chan_guard_fn). */
enum fgx_chan_guard_why {
    FGX_GUARD_LATE = 0,     /* no first request within handshake_ms */
    FGX_GUARD_PER_PEER = 1, /* past per_peer pending from its address */
    FGX_GUARD_FULL = 2      /* past max pending in all: from the address holding the most */
};
/* Called from the guard's thread: n connections of peer closed for why (enum
 * fgx_chan_guard_why); and after each look, the pending connections left. */
typedef void (*fgx_chan_guard_fn)(const struct fgx_peer *peer, int why, unsigned n, void *arg);
typedef void (*fgx_chan_guard_gauge_fn)(unsigned pending, void *arg);

struct fgx_chan_guard_config {
    int handshake_ms;              /* > 0 */
    unsigned per_peer;             /* > 0; an IPv6 peer is its /64 */
    unsigned max;                  /* 0: no limit in all */
    fgx_chan_guard_fn cut;         /* may be NULL */
    fgx_chan_guard_gauge_fn gauge; /* may be NULL */
    void *arg;
};

/* Guard c's TLS listener (the last one added): a connection to it that has not sent its first
 * request within handshake_ms of being accepted (the TLS handshake and nng's negotiation
 * included) is closed (one that received more since the negotiation, e.g. a request the loop
 * has not read yet, after 3 * handshake_ms); of more than per_peer such pending connections
 * from one address, those that sent nothing go first, then the oldest (fgx/connlimit.h); of
 * more than max in all, those of the address holding the most, never an address's only one.
 * A thread of its own looks every 200 ms, until fgx_chan_close(). Returns 0 or a negative
 * errno. */
int fgx_chan_tls_guard(struct fgx_chan *c, const struct fgx_chan_guard_config *cfg);

/* fgx_chan_recv(), and the sender in *peer. */
int fgx_chan_recv_peer(struct fgx_chan *c, void **buf, size_t *len, int timeout_ms,
                       struct fgx_peer *peer);

/* A REP channel that answers requests out of order: fgx_chan_recv_peer(), and *req the slot
 * (an nng context) its reply must be sent through with fgx_chan_reply(), later, while further
 * requests are received. Each *req is owned by the caller until fgx_chan_reply() (which always
 * consumes it, sent or not). controld keeps a request whose regexes are compiling this way. */
struct fgx_chan_req;
int fgx_chan_recv_req(struct fgx_chan *c, void **buf, size_t *len, int timeout_ms,
                      struct fgx_peer *peer, struct fgx_chan_req **req);
int fgx_chan_reply(struct fgx_chan *c, struct fgx_chan_req *req, const void *buf, size_t len,
                   int timeout_ms);

#endif
