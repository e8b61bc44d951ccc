/* The script worker's frames (issue 16): what a data-path worker (proxyworker, nfqworker)
 * sends scriptworker over nng (pair1; scriptworker listens polyamorous and answers the pipe a
 * frame came from) and what scriptworker's C parent sends its Python children over a pipe
 * (scriptworker/python/fgex/serve.py reads the same header). Little-endian, packed: the
 * header, then len bytes. Plain bytes rather than protobuf: one frame per chunk of a stream. */
#ifndef FGX_SWPROTO_H
#define FGX_SWPROTO_H

#include <stdint.h>

enum fgx_sw_type {
    FGX_SW_SCRIPT = 1,   /* service's file: u16 n, n x (u16 len, disabled name), source */
    FGX_SW_UNSCRIPT = 2, /* service has no file any more */
    FGX_SW_OPEN = 3,     /* a connection of service starts (code: 1 for IPv6) */
    FGX_SW_DATA = 4,     /* code bit 0 clear: client->server bytes, set: server->client; bit 1
                          * (FGX_SW_DATA_OPEN): the connection's first, it opens it (bit 2:
                          * IPv6), saving an OPEN frame; answered by a VERDICT with the same
                          * conn and seq */
    FGX_SW_CLOSE = 5,
    FGX_SW_VERDICT = 6, /* code: enum fgx_sw_verdict; payload "function\0detail"; hash:
                         * flags (FGX_SW_VERDICT_FINAL), 0 from a sender that has none */
    FGX_SW_LOG = 7,     /* payload "kind\0function\0text" (kind: exception, timeout, print,
                         * restart) */
    FGX_SW_ACK = 8,     /* SCRIPT / UNSCRIPT loaded (code 0) or refused (1), seq echoed */
};

enum fgx_sw_verdict {
    FGX_SW_ACCEPT = 0,
    FGX_SW_REJECT = 1,
    FGX_SW_DROP = 2,
    FGX_SW_ERROR = 3,   /* an exception, a lost state, overload: the service's fail_open */
    FGX_SW_TIMEOUT = 4, /* past the deadline: fail_open, the interpreter was replaced */
};

/* VERDICT flag, with ACCEPT: the connection is decided for good (FGEX_FULL_STREAM_ACTION
 * ACCEPT past FGEX_STREAM_MAX_SIZE, NOACTION on invalid HTTP, or no function can be called on
 * it any more): every later chunk would be accepted without a call, so the sender may stop
 * sending them (and CLOSE it). A sender that ignores it loses nothing but speed. */
#define FGX_SW_VERDICT_FINAL 1

#define FGX_SW_DATA_OPEN 2
#define FGX_SW_DATA_V6 4

struct fgx_sw_hdr {
    uint8_t type, code;
    uint16_t hash; /* the connection's symmetric 5-tuple hash: which interpreter judges it */
    uint32_t service;
    uint64_t conn; /* unique per sender */
    uint32_t seq;
    uint32_t len;
} __attribute__((packed));

#define FGX_SW_MAX_PAYLOAD (1u << 21)

#endif
