/* The script worker's frames (issue 16), between a data-path thread (proxyworker, nfqworker:
 * libcommon/swlink.c) and scriptworker's Python interpreters (scriptworker/python/fgex/serve.py)
 * directly, with no process in between: plain AF_UNIX SOCK_SEQPACKET sockets, one per thread
 * and interpreter, read from the thread's own event loop. A message holds one or more frames;
 * a frame is the header, little-endian and packed, then len bytes. Plain bytes rather than
 * protobuf: one frame per chunk of a stream.
 *
 * The sockets, for scriptworker --listen ipc://PATH:
 *   PATH.0 .. PATH.(N-1)  one listener per interpreter (N: scriptworker --procs), made by the
 *                         C parent and kept across the interpreters it replaces; a connection
 *                         is judged there by the interpreter, in the order its frames came
 *   PATH                  the C parent itself, bound last (so once it answers every PATH.i
 *                         exists): it sends a thread nothing but what a replaced interpreter
 *                         can no longer say (a TIMEOUT verdict and its log entry)
 * A thread's first frame on each of its sockets is HELLO with its link id in conn: what the
 * parent's TIMEOUT is addressed by. On one interpreter socket, VERDICTs come in the order of
 * the DATA frames they answer. */
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
                         * restart, block, error); conn: the call's connection, or 0 */
    FGX_SW_ACK = 8,     /* SCRIPT / UNSCRIPT loaded (code 0) or refused (1), seq echoed */
    FGX_SW_HELLO = 9,   /* a thread's first frame on a socket: conn its link id */
    FGX_SW_PING = 10,   /* controld's heartbeat on PATH (issue 24): the parent sends it back */
};

enum fgx_sw_verdict {
    FGX_SW_ACCEPT = 0,
    FGX_SW_REJECT = 1,
    FGX_SW_DROP = 2,
    FGX_SW_ERROR = 3,   /* an exception, a lost state, overload: the service's fail_open */
    FGX_SW_TIMEOUT = 4, /* past the deadline: fail_open, the interpreter was replaced */
    FGX_SW_EDIT = 5,    /* a function edited the chunk (Firegex's UNSTABLE_MANGLE, l4_data):
                         * payload "function\0" then the bytes to send instead, of any length
                         * up to about 60000; never to a sender that set FGX_SW_DATA_NOEDIT */
};

/* VERDICT flag, with ACCEPT: the connection is decided for good (FGEX_FULL_STREAM_ACTION
 * ACCEPT past FGEX_STREAM_MAX_SIZE, NOACTION on invalid HTTP, or no function can be called on
 * it any more): every later chunk would be accepted without a call, so the sender may stop
 * sending them (and CLOSE it). A sender that ignores it loses nothing but speed. */
#define FGX_SW_VERDICT_FINAL 1

/* VERDICT flag, with ERROR: the interpreter has no file for the service (its table is shared
 * by every thread of both workers, and it lost track of what this thread sent): the sender
 * sends that interpreter its files again (fgx_swlink_recv() does). Without it (a file that
 * did not load) sending again would not help. */
#define FGX_SW_VERDICT_NOFILE 2

#define FGX_SW_DATA_OPEN 2
#define FGX_SW_DATA_V6 4
/* DATA code bit: the payload starts with a struct fgx_sw_addr (the connection's addresses,
 * for RawPacket's client_ip, server_port, ...), then the bytes; sent on the opening frame */
#define FGX_SW_DATA_ADDR 8
/* DATA code bit: the sender cannot send edited bytes (the NFQUEUE layer): a function's edit
 * is answered ERROR (the service's fail policy), said in the script log by the interpreter */
#define FGX_SW_DATA_NOEDIT 16
/* DATA code bit: the connection is a UDP flow (its 4-tuple) and each frame one datagram, judged
 * alone: RawPacket's l4 is "udp", a REJECT or DROP refuses that datagram and the flow's state
 * goes on (issue 27) */
#define FGX_SW_DATA_UDP 32

struct fgx_sw_addr {
    uint8_t caddr[16], saddr[16]; /* an IPv4 address in the first 4 bytes */
    uint16_t cport, sport;        /* host order (little-endian, as the header) */
} __attribute__((packed));

struct fgx_sw_hdr {
    uint8_t type, code;
    uint16_t hash; /* the connection's symmetric 5-tuple hash: which interpreter judges it */
    uint32_t service;
    uint64_t conn; /* unique per sender */
    uint32_t seq;
    uint32_t len;
} __attribute__((packed));

#define FGX_SW_MAX_PAYLOAD (1u << 21)
/* one message from a thread: a frame of the largest payload, and the small frames queued
 * ahead of it (CLOSE); the interpreters' messages are far shorter (FGX_SW_REPLY_MAX) */
#define FGX_SW_MSG_MAX (FGX_SW_MAX_PAYLOAD + 65536)
#define FGX_SW_REPLY_MAX 65536
#define FGX_SW_PROCS_MAX 16

/* The page an interpreter shares with scriptworker's parent (a memfd of FGX_SW_PAGE bytes):
 * what it is running, so that the parent can see a call past its deadline, replace the
 * interpreter and address the TIMEOUT to the thread that waits. The interpreter writes start_ns
 * last when a call starts, and zero when it ends. */
#define FGX_SW_PAGE 256
struct fgx_sw_page {
    uint64_t start_ns; /* CLOCK_MONOTONIC of the call's start; 0: no call runs */
    uint64_t link;     /* the waiting thread's link id (its HELLO) */
    uint64_t conn;     /* as that thread numbers it */
    uint32_t seq, service, deadline_ms;
    uint32_t calls;    /* calls started, wrapping: the parent watches closely while it moves */
    uint32_t nscripts; /* files loaded: the parent reads the page at all only when there are */
    char function[128];
} __attribute__((packed));

#endif
