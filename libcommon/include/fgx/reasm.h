/* TCP reassembly for one direction of one flow: sequence tracking, a hyperscan stream, a ring of
 * the last bytes passed (to prime a new stream after a ruleset change) and a bounded hold of
 * out-of-order segments. A segment's verdict is either given at once (the return value) or, for
 * a held segment, later through the context's verdict callback, in sequence order.
 *
 * Everything a context owns is allocated once, when it is created: the hold pool is a fixed
 * array of chunks, so holding a segment copies it but never allocates. Only opening a stream
 * (once per flow direction and database, at the direction's first payload byte, so that idle
 * flows cost no stream) allocates, inside hyperscan. */
#ifndef FGX_REASM_H
#define FGX_REASM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FGX_REASM_RING 256
#define FGX_REASM_EXCERPT 64       /* bytes of a match's excerpt before the match end */
#define FGX_REASM_EXCERPT_AFTER 32 /* and after it, as far as the scanned buffer goes */

struct hs_database;
struct hs_scratch;
struct hs_stream;

/* Called for a held segment when its verdict is known; cookie is what the caller gave. */
typedef void (*fgx_reasm_verdict_fn)(void *arg, uint64_t cookie, bool accept);
/* Gives back the caller's reference on a database whose stream a direction no longer keeps. */
typedef void (*fgx_reasm_unref_fn)(void *ref);

struct fgx_reasm {
    struct hs_stream *stream;       /* owned; NULL until the first payload byte after a start
                                     * or a database switch, and when db is NULL */
    const struct hs_database *db;   /* borrowed: the caller keeps it alive while set here */
    uint64_t db_hash;
    uint64_t scanned;  /* bytes fed to the stream since it was opened or reset */
    uint32_t next_seq; /* first byte not yet passed */
    uint32_t floor_seq; /* where the direction started (at most 1 GiB behind next_seq): bytes
                         * before it were never seen, so they cannot be scanned in order */
    uint32_t held_bytes;
    int32_t held_head; /* first held segment in sequence order, -1: none */
    uint16_t ring_len; /* valid bytes in ring, up to FGX_REASM_RING */
    uint16_t ring_pos; /* where the next byte goes */
    bool active;       /* next_seq is known */
    bool stream_failed; /* a database is set but no stream could be opened: drop, never pass */
    uint8_t ring[FGX_REASM_RING];
    /* Bytes passed that the receiver has not acknowledged yet, kept in the context's keep pool
     * (fgx_reasm_ctx_keep()) so that every retransmission of them is compared byte for byte:
     * [keep_seq, next_seq). Below keep_seq, bytes up to ack_seq were acknowledged (the
     * receiver holds them: a retransmission of them cannot change what it reads); those in
     * [ack_seq, keep_seq) went out of the pool unacknowledged and cannot be compared, so a
     * segment that reaches into them is dropped. */
    uint32_t keep_seq;
    uint32_t ack_seq;   /* the receiver's highest acknowledgement seen (<= next_seq) */
    uint32_t keep_off;  /* where keep_seq is in the first kept chunk */
    uint32_t keep_head, keep_tail; /* kept chunks, oldest first: index + 1; 0: none */
    uint32_t keep_chunks;
    uint32_t high_seq;  /* the end of the furthest segment seen from this sender */
    uint32_t ts_recent; /* the newest timestamp of an in-order segment passed; 0: none */
    /* The fields above from keep_seq on were set when the direction started. A direction made
     * active by other code (a flow restored from a snapshot sets next_seq and the ring) gets
     * them at its next use: only the ring's bytes are kept then, older ones are not comparable
     * until acknowledged, and nothing is known of what the sender sent. */
    bool keep_init;
    /* The filter ids compiled into db, ascending, borrowed like db; NULL: not known (then no
     * old stream is kept across a change). */
    const uint32_t *ids;
    uint32_t nids;
    uint32_t old_nids;
    /* The stream of an earlier database, kept across ruleset changes so that a partial match
     * of a filter that survived them is never lost, however long ago it began (the ring only
     * reaches FGX_REASM_RING bytes back). It scans every later byte too, and its matches count
     * only for filters in ids. Closed when a change leaves it no filter in common with the new
     * database, and with the direction (release, start). */
    struct hs_stream *old_stream; /* owned; NULL: none */
    const uint32_t *old_ids;      /* of the old stream's database (old_nids of them) */
    uint64_t old_scanned;         /* bytes fed to old_stream */
    void *old_ref;                /* the caller's reference on that database: the direction
                                   * keeps it alive, and gives it to old_unref at the close */
    fgx_reasm_unref_fn old_unref;
};

struct fgx_reasm_match {
    bool matched;
    bool log; /* only in the log callback's: a log filter matched, nothing is dropped */
    uint32_t filter_id;
    uint32_t seq;    /* next byte the receiver expects: the dropped segment's place in the stream */
    uint32_t ack;    /* the dropped segment's acknowledgement number */
    uint64_t cookie; /* the dropped segment's cookie */
    /* The bytes of the stream around the match end: up to FGX_REASM_EXCERPT before it, from
     * the scanned segment and, when the match ends near its start, from the ring of bytes
     * passed before it; then up to FGX_REASM_EXCERPT_AFTER after it in the scanned segment.
     * The match ends before excerpt[match_end]. */
    uint8_t excerpt_len;
    uint8_t match_end;
    uint8_t excerpt[FGX_REASM_EXCERPT + FGX_REASM_EXCERPT_AFTER];
    /* The log callback's: the stream offset where the match ends (bytes of the direction
     * scanned before it, from the stream's start). */
    uint64_t stream_end;
    /* Segments dropped by this call (this one or held ones) as inconsistent retransmissions:
     * bytes already passed, still kept (or in the ring), sent again different. */
    uint32_t inconsistent;
    /* Segments dropped because they reach into bytes passed but no longer kept and not known
     * to be acknowledged: they cannot be compared, and might differ. */
    uint32_t uncompared;
};

enum fgx_reasm_verdict {
    FGX_REASM_ACCEPT = 0,
    FGX_REASM_DROP = 1,
    FGX_REASM_HOLD = 2, /* the verdict comes later, through the callback */
};

struct fgx_reasm_ctx;

/* A log filter (hyperscan id with FGX_FILTER_ID_LOG) matched in a scan of this context: m has
 * log set, filter_id (without the bit) and the excerpt, nothing else. Called from inside the
 * scan, on the scanning thread; the scan goes on, so block filters still judge the bytes. arg
 * is set_log's. With SINGLEMATCH a filter reports once per stream (a direction of a
 * connection; twice at most across a ruleset change), and once per datagram. */
typedef void (*fgx_reasm_log_fn)(void *arg, const struct fgx_reasm_match *m);

/* pool_bytes: all held segments of the context together; flow_bytes: of one direction. *out is
 * owned by the caller (fgx_reasm_ctx_free()). fn is called for held segments. */
int fgx_reasm_ctx_new(size_t pool_bytes, size_t flow_bytes, fgx_reasm_verdict_fn fn, void *arg,
                      struct fgx_reasm_ctx **out);
void fgx_reasm_ctx_free(struct fgx_reasm_ctx *ctx);
/* Report log filters' matches to fn(arg, ...); without it they are passed over silently. */
void fgx_reasm_ctx_set_log(struct fgx_reasm_ctx *ctx, fgx_reasm_log_fn fn, void *arg);
/* Keep every byte passed until the receiver acknowledges it (fgx_reasm_acked()), in a pool of
 * pool_bytes for the whole context, at most flow_bytes for one direction, so that a
 * retransmission is compared with all of what passed, not only with the ring. When a direction
 * reaches flow_bytes its oldest kept bytes go; when the pool is full the context's oldest
 * kept bytes go, whichever direction holds them. Either way those bytes can no longer be
 * compared, and a segment that reaches into them is dropped (m->uncompared), never passed.
 * Without this call only the ring is compared and older overlaps pass as before (what the proxy
 * layer needs: its bytes never overlap). Call once, before any segment. Returns 0 or -ENOMEM. */
int fgx_reasm_ctx_keep(struct fgx_reasm_ctx *ctx, size_t pool_bytes, size_t flow_bytes);
/* Bytes kept now over the whole context, and kept bytes that had to go unacknowledged (to make
 * room) since the context was created. */
size_t fgx_reasm_ctx_kept(const struct fgx_reasm_ctx *ctx);
uint64_t fgx_reasm_ctx_kept_lost(const struct fgx_reasm_ctx *ctx);
/* Grow the context's scratch so that it can scan db. Call before any stream of db is scanned,
 * off the packet path. Returns 0 or -ENOMEM/-EINVAL. */
int fgx_reasm_ctx_scratch(struct fgx_reasm_ctx *ctx, const struct hs_database *db);
/* Bytes held now over the whole context. */
size_t fgx_reasm_ctx_held(const struct fgx_reasm_ctx *ctx);

void fgx_reasm_init(struct fgx_reasm *r);
/* Close the streams (the old one's reference goes to its unref) and drop every held segment
 * (verdict drop through the callback). */
void fgx_reasm_release(struct fgx_reasm_ctx *ctx, struct fgx_reasm *r);

/* Switch the direction to database db (NULL: nothing to match) identified by hash. An unchanged
 * hash keeps the stream, so a partial match in progress survives. Otherwise the old stream is
 * closed and a new one is opened and primed with the ring of bytes already passed; matches that
 * end inside the ring are ignored, since those bytes are gone. Returns 0 or -ENOMEM (then every
 * later segment of the direction is dropped). */
int fgx_reasm_set_db(struct fgx_reasm_ctx *ctx, struct fgx_reasm *r, const struct hs_database *db,
                     uint64_t hash);

/* fgx_reasm_set_db() knowing the filter ids of db (ascending, borrowed like db), so that the
 * direction keeps at most one old stream beside the new one: on a change the current stream
 * becomes the old one, unless an old one already exists that still shares a filter id with db
 * (the oldest useful history is kept and the in-between stream closed); an old stream that
 * shares no id with db is closed. ref is the caller's reference on the database being replaced
 * (r->db; NULL: none) and is handed over in every case: kept while that database's stream stays
 * as the old one, else given to unref at once; the caller takes a new reference on db. */
int fgx_reasm_switch_db(struct fgx_reasm_ctx *ctx, struct fgx_reasm *r,
                        const struct hs_database *db, uint64_t hash, const uint32_t *ids,
                        size_t nids, void *ref, fgx_reasm_unref_fn unref);

/* Start (or restart) the direction at seq: held segments are dropped, the ring emptied and the
 * stream reset (or closed, to be reopened at the next payload byte), as for a new connection. */
int fgx_reasm_start(struct fgx_reasm_ctx *ctx, struct fgx_reasm *r, uint32_t seq);

/* One TCP segment of len payload bytes at seq. A direction that is not active starts here.
 * A segment that starts before where the direction started is dropped: its bytes were never
 * seen, and passing them as "already passed" would let a sender that shows its second segment
 * first slip the first one through unscanned (after an eviction, or on a direction the rules do
 * not start with a SYN). The start follows next_seq at 1 GiB (the largest TCP window), so a long
 * stream never wraps past it.
 * In-order bytes beyond next_seq are scanned; bytes already passed are not scanned again, but
 * those still in the ring (the last FGX_REASM_RING passed) must be sent again identical: a
 * segment that differs there is dropped without advancing (m->inconsistent), since the receiver
 * may have discarded the bytes that passed (bad timestamp, ...) and would take these instead;
 * a segment beyond next_seq is held (copied) when the bounds allow, else dropped. When bytes
 * become in order, held segments are scanned and given their verdicts through the callback.
 * On a match (this segment or a held one) m->matched is set, that segment is dropped and so
 * is everything still held. */
enum fgx_reasm_verdict fgx_reasm_segment(struct fgx_reasm_ctx *ctx, struct fgx_reasm *r,
                                         uint32_t seq, uint32_t ack, const void *data, size_t len,
                                         uint64_t cookie, uint64_t now_ms,
                                         struct fgx_reasm_match *m);

/* The receiver of direction r acknowledged everything before ack (the ACK field of a segment
 * the other way): those bytes are in its hands, so their kept copies go. An ack beyond what
 * passed counts up to what passed. */
void fgx_reasm_acked(struct fgx_reasm_ctx *ctx, struct fgx_reasm *r, uint32_t ack);

/* Whether ack, sent to the sender of direction peer, acknowledges bytes that sender never sent
 * (beyond the furthest segment seen from it, plus one for a FIN, which the rules do not queue):
 * the receiver discards a segment with such an ACK (RFC 793, Linux's tcp_ack()). False when
 * peer is not active (nothing known). */
bool fgx_reasm_ack_unsent(const struct fgx_reasm *peer, uint32_t ack);

/* PAWS (RFC 7323): whether a segment of direction r with timestamp tsval is older than the
 * newest timestamp of an in-order segment passed, by more than Linux tolerates (one tick): the
 * receiver discards it. Our newest is never newer than the receiver's (it also learns from
 * segments the rules do not queue), so what this refuses the receiver refuses too. */
bool fgx_reasm_paws_old(const struct fgx_reasm *r, uint32_t tsval);
/* A segment of r with timestamp tsval that started at or before next_seq was passed: the
 * newest timestamp moves on (never back), as the receiver's does. */
void fgx_reasm_ts_passed(struct fgx_reasm *r, uint32_t tsval);

/* Drop (through the callback) held segments that arrived before now_ms - max_age_ms. Returns
 * how many were dropped. */
size_t fgx_reasm_expire(struct fgx_reasm_ctx *ctx, uint64_t now_ms, uint64_t max_age_ms);

/* Block-mode scan of one datagram. Returns 1 on a match (m->matched, filter_id and excerpt set;
 * seq, ack and cookie zero), 0 on none, or a negative errno when hyperscan fails (the caller
 * drops). */
int fgx_reasm_scan_block(struct fgx_reasm_ctx *ctx, const struct hs_database *db, const void *data,
                         size_t len, struct fgx_reasm_match *m);

#endif
