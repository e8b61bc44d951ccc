/* gRPC stage of the HTTP service kind (px_grpc.c): a gRPC stream's body (content-type
 * application/grpc) is a row of length-prefixed messages (one flag byte, 1 when the message is
 * compressed with the stream's grpc-encoding, a 4-byte big-endian length, the message). The
 * deframer takes the body as it arrives, hands each complete message to the caller without its
 * 5-byte prefix (inflated with zlib where it was compressed with gzip or deflate) and keeps the
 * raw bytes of the messages judged for the caller to forward. Pure: no I/O. */
#ifndef PX_GRPC_H
#define PX_GRPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A message, as sent or decompressed, past this is refused (gRPC's own default receive limit). */
#define PX_GRPC_MSG_MAX (4u << 20)
#define PX_GRPC_PREFIX 5

enum px_grpc_enc {
    PX_GRPC_IDENTITY, /* no grpc-encoding, or "identity" */
    PX_GRPC_GZIP,
    PX_GRPC_DEFLATE,
    PX_GRPC_OTHER, /* one zlib cannot undo (snappy, zstd, ...): a compressed message is refused */
};

struct px_grpc {
    enum px_grpc_enc enc;
    uint8_t *buf; /* raw bytes not forwarded yet: ready ones first, then the message arriving */
    size_t len, cap;
    size_t ready; /* of buf: whole messages judged, for the caller to forward */
    uint8_t *out; /* a compressed message, inflated */
    size_t out_cap;
    uint64_t messages; /* judged so far */
};

/* Called for each complete message: its bytes (borrowed until it returns) without the prefix,
 * decompressed. 0 goes on; anything else stops the feed and is its return value. */
typedef int (*px_grpc_msg_fn)(void *arg, const uint8_t *msg, size_t len);

/* Whether a content-type field value is gRPC's: application/grpc, alone or with "+proto" and
 * the like, or with parameters after ';'. */
bool px_grpc_content_type(const uint8_t *v, size_t n);
/* The encoding a grpc-encoding field value names (case-insensitive). */
enum px_grpc_enc px_grpc_encoding(const uint8_t *v, size_t n);

void px_grpc_init(struct px_grpc *g, enum px_grpc_enc enc);
void px_grpc_release(struct px_grpc *g);

/* Appends data (copied) and hands fn each message it completes, in order. Returns 0, fn's own
 * nonzero return (that message and what follows it are not ready), -EPROTO (a flag byte other
 * than 0 or 1, or a compressed message under identity or an encoding zlib cannot undo),
 * -EMSGSIZE (a message's length or its decompressed size past PX_GRPC_MSG_MAX: known at its
 * prefix, before its bytes come), -EBADMSG (it does not decompress, or has bytes after its
 * compressed data) or -ENOMEM. On any return g->ready bytes of g->buf are whole messages fn
 * accepted: the caller forwards them, then px_grpc_consume(). */
int px_grpc_feed(struct px_grpc *g, const uint8_t *data, size_t len, px_grpc_msg_fn fn, void *arg);
/* The g->ready bytes are forwarded: dropped from g->buf. */
void px_grpc_consume(struct px_grpc *g);
/* Bytes of a message begun and not complete (its prefix included): at the end of the stream,
 * a message cut short. */
size_t px_grpc_pending(const struct px_grpc *g);

#endif
