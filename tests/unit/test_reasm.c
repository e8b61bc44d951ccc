/* Unit tests for the reassembly stage (libcommon/reasm.c), with real hyperscan databases. */
#include <criterion/criterion.h>

#include <string.h>

#include <hs/hs.h>

#include "fgx/reasm.h"
#include "fgx/ruleset.h"

#define MAXV 16

struct seen {
    int n;
    uint64_t cookie[MAXV];
    bool accept[MAXV];
};

static struct seen seen;

static void on_verdict(void *arg, uint64_t cookie, bool accept)
{
    struct seen *s = arg;

    cr_assert_lt(s->n, MAXV);
    s->cookie[s->n] = cookie;
    s->accept[s->n] = accept;
    s->n++;
}

static hs_database_t *compile(unsigned mode, int n, const char **re, const unsigned *ids)
{
    unsigned flags[8];
    hs_compile_error_t *err = NULL;
    hs_database_t *db = NULL;
    int i;

    for (i = 0; i < n; i++)
        flags[i] = HS_FLAG_DOTALL | HS_FLAG_SINGLEMATCH;
    cr_assert_eq(hs_compile_multi(re, flags, ids, (unsigned)n, mode, NULL, &db, &err), HS_SUCCESS);
    return db;
}

static struct fgx_reasm_ctx *ctx;
static hs_database_t *db_evil, *db_zzz, *db_both;
static struct fgx_reasm r;

static void setup(void)
{
    memset(&seen, 0, sizeof(seen));
    db_evil = compile(HS_MODE_STREAM, 1, (const char *[]){"evil[0-9]+"}, (unsigned[]){5});
    db_zzz = compile(HS_MODE_STREAM, 1, (const char *[]){"zzz"}, (unsigned[]){1});
    db_both = compile(HS_MODE_STREAM, 2, (const char *[]){"zzz", "evil[0-9]+"},
                      (unsigned[]){1, 2});
    cr_assert_eq(fgx_reasm_ctx_new(8192, 4096, on_verdict, &seen, &ctx), 0);
    cr_assert_eq(fgx_reasm_ctx_scratch(ctx, db_evil), 0);
    cr_assert_eq(fgx_reasm_ctx_scratch(ctx, db_zzz), 0);
    cr_assert_eq(fgx_reasm_ctx_scratch(ctx, db_both), 0);
    fgx_reasm_init(&r);
}

static void teardown(void)
{
    fgx_reasm_release(ctx, &r);
    cr_assert_eq(fgx_reasm_ctx_held(ctx), 0);
    fgx_reasm_ctx_free(ctx);
    hs_free_database(db_evil);
    hs_free_database(db_zzz);
    hs_free_database(db_both);
}

static enum fgx_reasm_verdict seg(uint32_t seq, const char *s, uint64_t cookie, uint64_t now,
                                  struct fgx_reasm_match *m)
{
    return fgx_reasm_segment(ctx, &r, seq, 99, s, strlen(s), cookie, now, m);
}

TestSuite(reasm, .init = setup, .fini = teardown);

Test(reasm, in_order_match_split_over_segments)
{
    struct fgx_reasm_match m;

    cr_assert_eq(fgx_reasm_set_db(ctx, &r, db_evil, 1), 0);
    cr_assert_eq(fgx_reasm_start(ctx, &r, 1000), 0);
    cr_assert_eq(seg(1000, "hello ev", 1, 0, &m), FGX_REASM_ACCEPT);
    cr_assert_not(m.matched);
    cr_assert_eq(seg(1008, "il1337", 2, 0, &m), FGX_REASM_DROP);
    cr_assert(m.matched);
    cr_assert_eq(m.filter_id, 5);
    cr_assert_eq(m.seq, 1008);
    cr_assert_eq(m.ack, 99);
    cr_assert_eq(m.cookie, 2);
}

Test(reasm, no_match_passes_and_tracks_seq_across_wrap)
{
    struct fgx_reasm_match m;

    cr_assert_eq(fgx_reasm_set_db(ctx, &r, db_evil, 1), 0);
    cr_assert_eq(fgx_reasm_start(ctx, &r, 0xfffffffc), 0);
    cr_assert_eq(seg(0xfffffffc, "evi", 1, 0, &m), FGX_REASM_ACCEPT);
    cr_assert_eq(seg(0xffffffff, "ll", 2, 0, &m), FGX_REASM_ACCEPT);
    cr_assert_eq(r.next_seq, 1);
    cr_assert_not(m.matched);
}

Test(reasm, retransmitted_bytes_not_rescanned)
{
    struct fgx_reasm_match m;

    cr_assert_eq(fgx_reasm_set_db(ctx, &r, db_evil, 1), 0);
    cr_assert_eq(seg(0, "aaaa", 1, 0, &m), FGX_REASM_ACCEPT); /* no state: starts here */
    /* bytes 0..3 already passed, sent again identical; only the "1" at 4 is new, and "aaaa1"
     * does not match */
    cr_assert_eq(seg(0, "aaaa1", 2, 0, &m), FGX_REASM_ACCEPT);
    cr_assert_eq(m.inconsistent, 0);
    cr_assert_not(m.matched);
    cr_assert_eq(r.next_seq, 5);
    /* full retransmission */
    cr_assert_eq(seg(1, "aaa", 3, 0, &m), FGX_REASM_ACCEPT);
    /* overlap: "xxev" then "evil7" at 7 overlapping 2 bytes gives the stream "...xxevil7" */
    cr_assert_eq(seg(5, "xxev", 4, 0, &m), FGX_REASM_ACCEPT);
    cr_assert_eq(seg(7, "evil7", 5, 0, &m), FGX_REASM_DROP);
    cr_assert(m.matched);
    cr_assert_eq(m.seq, 9);
}

Test(reasm, bytes_before_an_unanchored_start_are_dropped)
{
    struct fgx_reasm_match m;

    /* No SYN seen (server->client, or an evicted flow): the sender shows its second segment
     * first. Its first segment must not pass as "already passed". */
    cr_assert_eq(fgx_reasm_set_db(ctx, &r, db_evil, 1), 0);
    cr_assert_eq(seg(104, "il1337", 1, 0, &m), FGX_REASM_ACCEPT);
    cr_assert_eq(seg(100, "ev", 2, 0, &m), FGX_REASM_DROP);
    cr_assert_eq(seg(100, "evil1337", 3, 0, &m), FGX_REASM_DROP);
    cr_assert_not(m.matched);
    /* a retransmission of what passed, and new data, still pass */
    cr_assert_eq(seg(104, "il1337", 4, 0, &m), FGX_REASM_ACCEPT);
    cr_assert_eq(seg(110, "fine", 5, 0, &m), FGX_REASM_ACCEPT);
    cr_assert_eq(r.next_seq, 114);
    /* a SYN anchors the start at ISN + 1: nothing before it is data */
    cr_assert_eq(fgx_reasm_start(ctx, &r, 5000), 0);
    cr_assert_eq(seg(4990, "0123456789ab", 6, 0, &m), FGX_REASM_DROP);
    cr_assert_eq(seg(5000, "ab", 7, 0, &m), FGX_REASM_ACCEPT);
}

Test(reasm, start_follows_a_long_stream_across_wrap)
{
    static char buf[65536];
    struct fgx_reasm_match m;
    uint32_t seq = 0xfff00000u;
    unsigned i;

    /* 3 GiB in order with nothing to match: sequence numbers wrap and pass the start twice
     * over in signed distance; in-window retransmissions and new data must keep passing. */
    cr_assert_eq(fgx_reasm_start(ctx, &r, seq), 0);
    for (i = 0; i < 3u * 16384; i++, seq += sizeof(buf))
        cr_assert_eq(fgx_reasm_segment(ctx, &r, seq, 0, buf, sizeof(buf), i, 0, &m),
                     FGX_REASM_ACCEPT, "segment %u", i);
    cr_assert_eq(r.next_seq, seq);
    cr_assert_eq(fgx_reasm_segment(ctx, &r, seq - 100000, 0, buf, 1000, 1, 0, &m),
                 FGX_REASM_ACCEPT);
    /* older than the largest window: nothing legitimate, dropped */
    cr_assert_eq(fgx_reasm_segment(ctx, &r, seq - (3u << 29), 0, buf, 1000, 2, 0, &m),
                 FGX_REASM_DROP);
}

Test(reasm, out_of_order_hold_and_release_with_match)
{
    struct fgx_reasm_match m;

    cr_assert_eq(fgx_reasm_set_db(ctx, &r, db_evil, 1), 0);
    cr_assert_eq(fgx_reasm_start(ctx, &r, 100), 0);
    cr_assert_eq(seg(102, "il1337", 2, 0, &m), FGX_REASM_HOLD);
    cr_assert_eq(seg(108, " more", 3, 0, &m), FGX_REASM_HOLD);
    cr_assert_eq(fgx_reasm_ctx_held(ctx), 11);
    cr_assert_eq(seen.n, 0);
    cr_assert_eq(seg(100, "ev", 1, 0, &m), FGX_REASM_ACCEPT);
    cr_assert(m.matched);
    cr_assert_eq(m.filter_id, 5);
    cr_assert_eq(m.cookie, 2);
    cr_assert_eq(m.seq, 102);
    cr_assert_eq(seen.n, 2);
    cr_assert_eq(seen.cookie[0], 2);
    cr_assert_not(seen.accept[0]);
    cr_assert_eq(seen.cookie[1], 3);
    cr_assert_not(seen.accept[1]);
    cr_assert_eq(fgx_reasm_ctx_held(ctx), 0);
}

Test(reasm, out_of_order_hold_and_release_clean)
{
    struct fgx_reasm_match m;

    cr_assert_eq(fgx_reasm_set_db(ctx, &r, db_evil, 1), 0);
    cr_assert_eq(fgx_reasm_start(ctx, &r, 0), 0);
    cr_assert_eq(seg(6, "world", 3, 0, &m), FGX_REASM_HOLD);
    cr_assert_eq(seg(3, "lo ", 2, 0, &m), FGX_REASM_HOLD);
    cr_assert_eq(seg(6, "world", 4, 0, &m), FGX_REASM_DROP); /* a copy of a held segment */
    cr_assert_eq(seg(0, "hel", 1, 0, &m), FGX_REASM_ACCEPT);
    cr_assert_not(m.matched);
    cr_assert_eq(seen.n, 2);
    cr_assert_eq(seen.cookie[0], 2);
    cr_assert(seen.accept[0]);
    cr_assert_eq(seen.cookie[1], 3);
    cr_assert(seen.accept[1]);
    cr_assert_eq(r.next_seq, 11);
    cr_assert_eq(fgx_reasm_ctx_held(ctx), 0);
}

Test(reasm, hold_bounds)
{
    char big[3000];
    struct fgx_reasm_match m;
    struct fgx_reasm r2;

    memset(big, 'a', sizeof(big));
    cr_assert_eq(fgx_reasm_start(ctx, &r, 0), 0);
    /* per flow: 4096 bytes */
    cr_assert_eq(fgx_reasm_segment(ctx, &r, 10, 0, big, 3000, 1, 0, &m), FGX_REASM_HOLD);
    cr_assert_eq(fgx_reasm_segment(ctx, &r, 3010, 0, big, 1500, 2, 0, &m), FGX_REASM_DROP);
    cr_assert_eq(fgx_reasm_segment(ctx, &r, 3010, 0, big, 1000, 3, 0, &m), FGX_REASM_HOLD);
    /* whole pool: 8192 bytes in 2048-byte chunks, 3 + 1 used */
    fgx_reasm_init(&r2);
    cr_assert_eq(fgx_reasm_start(ctx, &r2, 0), 0);
    cr_assert_eq(fgx_reasm_segment(ctx, &r2, 10, 0, big, 2048, 4, 0, &m), FGX_REASM_HOLD);
    cr_assert_eq(fgx_reasm_segment(ctx, &r2, 5000, 0, big, 10, 5, 0, &m), FGX_REASM_DROP);
    fgx_reasm_release(ctx, &r2);
    cr_assert_eq(seen.n, 1);
    cr_assert_eq(seen.cookie[0], 4);
    cr_assert_not(seen.accept[0]);
}

Test(reasm, held_segments_expire)
{
    struct fgx_reasm_match m;

    cr_assert_eq(fgx_reasm_start(ctx, &r, 0), 0);
    cr_assert_eq(seg(10, "late", 1, 1000, &m), FGX_REASM_HOLD);
    cr_assert_eq(seg(20, "later", 2, 2500, &m), FGX_REASM_HOLD);
    cr_assert_eq(fgx_reasm_expire(ctx, 3000, 2000), 0);
    cr_assert_eq(fgx_reasm_expire(ctx, 3001, 2000), 1);
    cr_assert_eq(seen.n, 1);
    cr_assert_eq(seen.cookie[0], 1);
    cr_assert_not(seen.accept[0]);
    cr_assert_eq(fgx_reasm_ctx_held(ctx), 5);
}

Test(reasm, restart_drops_held)
{
    struct fgx_reasm_match m;

    cr_assert_eq(fgx_reasm_set_db(ctx, &r, db_evil, 1), 0);
    cr_assert_eq(fgx_reasm_start(ctx, &r, 0), 0);
    cr_assert_eq(seg(0, "ev", 1, 0, &m), FGX_REASM_ACCEPT);
    cr_assert_eq(seg(10, "x", 2, 0, &m), FGX_REASM_HOLD);
    cr_assert_eq(fgx_reasm_start(ctx, &r, 500), 0); /* port reuse: a new connection */
    cr_assert_eq(seen.n, 1);
    cr_assert_not(seen.accept[0]);
    /* the partial "ev" is forgotten with the old connection */
    cr_assert_eq(seg(500, "il1", 3, 0, &m), FGX_REASM_ACCEPT);
    cr_assert_not(m.matched);
}

Test(reasm, switch_keeps_partial_match_of_surviving_filter)
{
    struct fgx_reasm_match m;

    cr_assert_eq(fgx_reasm_set_db(ctx, &r, db_evil, 1), 0);
    cr_assert_eq(fgx_reasm_start(ctx, &r, 0), 0);
    cr_assert_eq(seg(0, "ev", 1, 0, &m), FGX_REASM_ACCEPT);
    /* filters change: evil[0-9]+ survives beside a new one; the stream is rebuilt from the ring */
    cr_assert_eq(fgx_reasm_set_db(ctx, &r, db_both, 2), 0);
    cr_assert_eq(seg(2, "il1337", 2, 0, &m), FGX_REASM_DROP);
    cr_assert(m.matched);
    cr_assert_eq(m.filter_id, 2);
}

Test(reasm, switch_removed_filter_stops_at_once)
{
    struct fgx_reasm_match m;

    cr_assert_eq(fgx_reasm_set_db(ctx, &r, db_evil, 1), 0);
    cr_assert_eq(fgx_reasm_start(ctx, &r, 0), 0);
    cr_assert_eq(seg(0, "ev", 1, 0, &m), FGX_REASM_ACCEPT);
    cr_assert_eq(fgx_reasm_set_db(ctx, &r, db_zzz, 3), 0);
    cr_assert_eq(seg(2, "il1337", 2, 0, &m), FGX_REASM_ACCEPT);
    cr_assert_not(m.matched);
    cr_assert_eq(fgx_reasm_set_db(ctx, &r, NULL, 0), 0);
    cr_assert_eq(seg(8, "zzz", 3, 0, &m), FGX_REASM_ACCEPT);
}

Test(reasm, switch_ignores_matches_inside_ring_but_not_later_ones)
{
    struct fgx_reasm_match m;

    cr_assert_eq(fgx_reasm_set_db(ctx, &r, db_zzz, 3), 0);
    cr_assert_eq(fgx_reasm_start(ctx, &r, 0), 0);
    cr_assert_eq(seg(0, "xx evil1 yy", 1, 0, &m), FGX_REASM_ACCEPT);
    /* the new filter matches bytes already passed: ignored, and not silenced for later */
    cr_assert_eq(fgx_reasm_set_db(ctx, &r, db_both, 2), 0);
    cr_assert_eq(seg(11, " hello ", 2, 0, &m), FGX_REASM_ACCEPT);
    cr_assert_not(m.matched);
    cr_assert_eq(seg(18, "evil2", 3, 0, &m), FGX_REASM_DROP);
    cr_assert(m.matched);
    cr_assert_eq(m.filter_id, 2);
}

Test(reasm, switch_with_same_hash_keeps_stream)
{
    struct fgx_reasm_match m;
    struct hs_stream *s;

    cr_assert_eq(fgx_reasm_set_db(ctx, &r, db_evil, 1), 0);
    cr_assert_eq(fgx_reasm_start(ctx, &r, 0), 0);
    cr_assert_eq(seg(0, "evil", 1, 0, &m), FGX_REASM_ACCEPT);
    s = r.stream;
    cr_assert_not_null(s);
    cr_assert_eq(fgx_reasm_set_db(ctx, &r, db_evil, 1), 0);
    cr_assert_eq(r.stream, s);
    cr_assert_eq(seg(4, "9", 2, 0, &m), FGX_REASM_DROP);
}

Test(reasm, stream_opens_at_first_payload_byte)
{
    struct fgx_reasm_match m;

    /* An idle direction (handshake, pure ACKs) costs no hyperscan stream. */
    cr_assert_eq(fgx_reasm_set_db(ctx, &r, db_evil, 1), 0);
    cr_assert_eq(fgx_reasm_start(ctx, &r, 100), 0);
    cr_assert_null(r.stream);
    cr_assert_eq(seg(100, "", 1, 0, &m), FGX_REASM_ACCEPT);
    cr_assert_null(r.stream);
    /* A segment held ahead of a gap is not scanned yet either. */
    cr_assert_eq(seg(104, "7", 2, 0, &m), FGX_REASM_HOLD);
    cr_assert_null(r.stream);
    cr_assert_eq(seg(100, "evil", 3, 0, &m), FGX_REASM_ACCEPT);
    cr_assert_not_null(r.stream);
    cr_assert(m.matched, "the held segment completes the match once the gap is filled");
    cr_assert_eq(m.cookie, 2);
    /* A restart (port reuse) keeps no state of the old connection: no match across it. */
    cr_assert_eq(fgx_reasm_start(ctx, &r, 500), 0);
    cr_assert_eq(seg(500, "evil", 4, 0, &m), FGX_REASM_ACCEPT);
    cr_assert_eq(fgx_reasm_start(ctx, &r, 900), 0);
    cr_assert_eq(seg(900, "7", 5, 0, &m), FGX_REASM_ACCEPT);
    cr_assert_not(m.matched);
    /* A database switch with nothing passed yet defers the stream as well. */
    fgx_reasm_release(ctx, &r);
    cr_assert_null(r.stream);
    fgx_reasm_init(&r);
    cr_assert_eq(fgx_reasm_set_db(ctx, &r, db_zzz, 2), 0);
    cr_assert_null(r.stream);
    cr_assert_eq(seg(0, "zzz", 6, 0, &m), FGX_REASM_DROP);
    cr_assert(m.matched);
}

Test(reasm, ring_keeps_last_bytes)
{
    char buf[600];
    struct fgx_reasm_match m;
    size_t i;

    for (i = 0; i < sizeof(buf); i++)
        buf[i] = (char)('a' + i % 26);
    cr_assert_eq(fgx_reasm_start(ctx, &r, 0), 0);
    cr_assert_eq(fgx_reasm_segment(ctx, &r, 0, 0, buf, 100, 1, 0, &m), FGX_REASM_ACCEPT);
    cr_assert_eq(r.ring_len, 100);
    cr_assert_eq(fgx_reasm_segment(ctx, &r, 100, 0, buf + 100, 200, 2, 0, &m), FGX_REASM_ACCEPT);
    cr_assert_eq(r.ring_len, FGX_REASM_RING);
    /* the oldest byte in the ring is stream byte 300 - 256 = 44 */
    cr_assert_eq(r.ring[r.ring_pos], buf[44]);
    cr_assert_eq(fgx_reasm_segment(ctx, &r, 300, 0, buf + 300, 300, 3, 0, &m), FGX_REASM_ACCEPT);
    cr_assert_eq(r.ring[r.ring_pos], buf[600 - 256]);
}

Test(reasm, udp_block_scan)
{
    hs_database_t *b = compile(HS_MODE_BLOCK, 1, (const char *[]){"evil[0-9]+"},
                               (unsigned[]){9});
    struct fgx_reasm_match m;

    cr_assert_eq(fgx_reasm_ctx_scratch(ctx, b), 0);
    cr_assert_eq(fgx_reasm_scan_block(ctx, b, "an evil42 packet", 16, &m), 1);
    cr_assert(m.matched);
    cr_assert_eq(m.filter_id, 9);
    /* the first match end is reported (right after "evil4"), with the datagram after it */
    cr_assert_eq(m.excerpt_len, 16);
    cr_assert_eq(m.match_end, 8);
    cr_assert_arr_eq(m.excerpt, "an evil42 packet", 16);
    cr_assert_eq(fgx_reasm_scan_block(ctx, b, "a good one", 10, &m), 0);
    cr_assert_not(m.matched);
    cr_assert_eq(m.excerpt_len, 0);
    cr_assert_eq(fgx_reasm_scan_block(ctx, NULL, "evil1", 5, &m), 0);
    hs_free_database(b);
}

Test(reasm, excerpt_ends_at_match_end_within_segment)
{
    char buf[200];
    struct fgx_reasm_match m;

    memset(buf, 'x', sizeof(buf));
    memcpy(buf + 100, "evil7", 5);
    cr_assert_eq(fgx_reasm_set_db(ctx, &r, db_evil, 1), 0);
    cr_assert_eq(fgx_reasm_start(ctx, &r, 0), 0);
    cr_assert_eq(seg(0, "some earlier bytes", 1, 0, &m), FGX_REASM_ACCEPT);
    cr_assert_eq(fgx_reasm_segment(ctx, &r, 18, 0, buf, sizeof(buf), 2, 0, &m), FGX_REASM_DROP);
    cr_assert(m.matched);
    /* 64 bytes before the end of "evil7" (byte 105 of the segment) and 32 after, all from
     * the segment */
    cr_assert_eq(m.excerpt_len, FGX_REASM_EXCERPT + FGX_REASM_EXCERPT_AFTER);
    cr_assert_eq(m.match_end, FGX_REASM_EXCERPT);
    cr_assert_arr_eq(m.excerpt, buf + 105 - FGX_REASM_EXCERPT,
                     FGX_REASM_EXCERPT + FGX_REASM_EXCERPT_AFTER);
}

Test(reasm, excerpt_reaches_back_into_the_ring)
{
    struct fgx_reasm_match m;

    cr_assert_eq(fgx_reasm_set_db(ctx, &r, db_evil, 1), 0);
    cr_assert_eq(fgx_reasm_start(ctx, &r, 0), 0);
    cr_assert_eq(seg(0, "GET /?q=", 1, 0, &m), FGX_REASM_ACCEPT);
    cr_assert_eq(seg(8, "ev", 2, 0, &m), FGX_REASM_ACCEPT);
    cr_assert_eq(seg(10, "il1337 HTTP/1.1", 3, 0, &m), FGX_REASM_DROP);
    cr_assert(m.matched);
    /* before the match end from the ring and the segment, after it the rest of the segment */
    cr_assert_eq(m.excerpt_len, 8 + 2 + 15);
    cr_assert_eq(m.match_end, 13);
    cr_assert_arr_eq(m.excerpt, "GET /?q=evil1337 HTTP/1.1", 25);
}

Test(reasm, excerpt_after_a_switch_and_of_a_held_segment)
{
    struct fgx_reasm_match m;

    cr_assert_eq(fgx_reasm_set_db(ctx, &r, db_zzz, 3), 0);
    cr_assert_eq(fgx_reasm_start(ctx, &r, 0), 0);
    cr_assert_eq(seg(0, "abc ev", 1, 0, &m), FGX_REASM_ACCEPT);
    /* primed from the ring: stream offsets restart, the excerpt must not */
    cr_assert_eq(fgx_reasm_set_db(ctx, &r, db_both, 2), 0);
    cr_assert_eq(seg(8, "23 tail", 2, 0, &m), FGX_REASM_HOLD);
    cr_assert_eq(seg(6, "il", 3, 0, &m), FGX_REASM_ACCEPT);
    cr_assert(m.matched);
    cr_assert_eq(m.cookie, 2);
    cr_assert_eq(m.filter_id, 2);
    /* the held segment matched: its bytes after the match end follow */
    cr_assert_eq(m.match_end, 9);
    cr_assert_eq(m.excerpt_len, 15);
    cr_assert_arr_eq(m.excerpt, "abc evil23 tail", 15);
    cr_assert_eq(seen.n, 1);
    cr_assert_eq(seen.cookie[0], 2);
    cr_assert_not(seen.accept[0]);
}

/* ---- the old stream kept across changes (filter ids known) ---- */

#define LONG_RE "BEGIN[^\\n]{0,4000}END"

struct unrefs {
    int n;
    void *last;
};

static struct unrefs unrefs;

static void count_unref(void *ref)
{
    unrefs.n++;
    unrefs.last = ref;
}

static hs_database_t *gen(int n, const char **re, const unsigned *ids)
{
    hs_database_t *db = compile(HS_MODE_STREAM, n, re, ids);

    cr_assert_eq(fgx_reasm_ctx_scratch(ctx, db), 0);
    return db;
}

/* Generation A of a service: the long filter (10) and zzz (1). */
static const uint32_t ids_a[] = {1, 10}, ids_b[] = {3, 10}, ids_c[] = {4, 10}, ids_e[] = {1, 3},
                      ids_f[] = {3}, ids_g[] = {4};

static void send_begin_and_filler(uint32_t *seq)
{
    struct fgx_reasm_match m;
    char filler[1001];

    memset(filler, 'a', 1000);
    filler[1000] = '\0';
    cr_assert_eq(seg(*seq, "BEGIN", 1, 0, &m), FGX_REASM_ACCEPT);
    *seq += 5;
    cr_assert_eq(seg(*seq, filler, 2, 0, &m), FGX_REASM_ACCEPT);
    *seq += 1000;
    cr_assert_not(m.matched);
}

Test(reasm, long_partial_match_completes_after_a_change)
{
    hs_database_t *a = gen(2, (const char *[]){"zzz", LONG_RE}, (unsigned[]){1, 10});
    hs_database_t *b = gen(2, (const char *[]){"yyy", LONG_RE}, (unsigned[]){3, 10});
    struct fgx_reasm_match m;
    uint32_t seq = 0;
    int ra;

    memset(&unrefs, 0, sizeof(unrefs));
    cr_assert_eq(fgx_reasm_switch_db(ctx, &r, a, 1, ids_a, 2, NULL, count_unref), 0);
    cr_assert_eq(fgx_reasm_start(ctx, &r, 0), 0);
    send_begin_and_filler(&seq);
    /* another filter changes: the stream on A stays beside the new one, with our reference */
    cr_assert_eq(fgx_reasm_switch_db(ctx, &r, b, 2, ids_b, 2, &ra, count_unref), 0);
    cr_assert_not_null(r.old_stream);
    cr_assert_eq(r.old_ref, &ra);
    cr_assert_eq(unrefs.n, 0);
    cr_assert_eq(seg(seq, "END!", 3, 0, &m), FGX_REASM_DROP);
    cr_assert(m.matched);
    cr_assert_eq(m.filter_id, 10);
    cr_assert_eq(m.seq, seq);
    cr_assert_eq(m.cookie, 3);
    cr_assert_eq(m.excerpt_len, FGX_REASM_EXCERPT + 1);
    cr_assert_eq(m.match_end, FGX_REASM_EXCERPT);
    cr_assert_arr_eq(m.excerpt + FGX_REASM_EXCERPT - 4, "aEND!", 5);
    fgx_reasm_release(ctx, &r);
    cr_assert_null(r.old_stream);
    cr_assert_eq(unrefs.n, 1, "releasing the direction gives the old database back");
    cr_assert_eq(unrefs.last, &ra);
    hs_free_database(a);
    hs_free_database(b);
}

Test(reasm, without_ids_a_long_partial_match_is_lost)
{
    hs_database_t *a = gen(2, (const char *[]){"zzz", LONG_RE}, (unsigned[]){1, 10});
    hs_database_t *b = gen(2, (const char *[]){"yyy", LONG_RE}, (unsigned[]){3, 10});
    struct fgx_reasm_match m;
    uint32_t seq = 0;

    /* What the old stream buys: the ring alone reaches only FGX_REASM_RING bytes back. */
    cr_assert_eq(fgx_reasm_set_db(ctx, &r, a, 1), 0);
    cr_assert_eq(fgx_reasm_start(ctx, &r, 0), 0);
    send_begin_and_filler(&seq);
    cr_assert_eq(fgx_reasm_set_db(ctx, &r, b, 2), 0);
    cr_assert_null(r.old_stream);
    cr_assert_eq(seg(seq, "END", 3, 0, &m), FGX_REASM_ACCEPT);
    cr_assert_not(m.matched);
    fgx_reasm_release(ctx, &r);
    hs_free_database(a);
    hs_free_database(b);
}

Test(reasm, two_changes_keep_the_oldest_stream)
{
    hs_database_t *a = gen(2, (const char *[]){"zzz", LONG_RE}, (unsigned[]){1, 10});
    hs_database_t *b = gen(2, (const char *[]){"yyy", LONG_RE}, (unsigned[]){3, 10});
    hs_database_t *c = gen(2, (const char *[]){"xxx", LONG_RE}, (unsigned[]){4, 10});
    struct fgx_reasm_match m;
    uint32_t seq = 0;
    int ra, rb;

    memset(&unrefs, 0, sizeof(unrefs));
    cr_assert_eq(fgx_reasm_switch_db(ctx, &r, a, 1, ids_a, 2, NULL, count_unref), 0);
    cr_assert_eq(fgx_reasm_start(ctx, &r, 0), 0);
    send_begin_and_filler(&seq);
    cr_assert_eq(fgx_reasm_switch_db(ctx, &r, b, 2, ids_b, 2, &ra, count_unref), 0);
    cr_assert_eq(seg(seq, "bbbbbbbb", 3, 0, &m), FGX_REASM_ACCEPT);
    seq += 8;
    /* A still shares 10 with C: it stays, and B's stream (the in-between one) is closed. */
    cr_assert_eq(fgx_reasm_switch_db(ctx, &r, c, 3, ids_c, 2, &rb, count_unref), 0);
    cr_assert_eq(r.old_ref, &ra);
    cr_assert_eq(unrefs.n, 1);
    cr_assert_eq(unrefs.last, &rb);
    cr_assert_eq(seg(seq, "END", 4, 0, &m), FGX_REASM_DROP);
    cr_assert(m.matched);
    cr_assert_eq(m.filter_id, 10);
    fgx_reasm_release(ctx, &r);
    cr_assert_eq(unrefs.n, 2);
    cr_assert_eq(unrefs.last, &ra);
    hs_free_database(a);
    hs_free_database(b);
    hs_free_database(c);
}

Test(reasm, removed_filter_pending_in_the_old_stream_never_fires)
{
    hs_database_t *a = gen(2, (const char *[]){"zzz", LONG_RE}, (unsigned[]){1, 10});
    hs_database_t *e = gen(2, (const char *[]){"zzz", "yyy"}, (unsigned[]){1, 3});
    struct fgx_reasm_match m;
    uint32_t seq = 0;
    int ra;

    memset(&unrefs, 0, sizeof(unrefs));
    cr_assert_eq(fgx_reasm_switch_db(ctx, &r, a, 1, ids_a, 2, NULL, count_unref), 0);
    cr_assert_eq(fgx_reasm_start(ctx, &r, 0), 0);
    send_begin_and_filler(&seq);
    cr_assert_eq(seg(seq, "zz", 3, 0, &m), FGX_REASM_ACCEPT);
    seq += 2;
    /* The long filter is removed; zzz survives, so A's stream is kept for it. */
    cr_assert_eq(fgx_reasm_switch_db(ctx, &r, e, 2, ids_e, 2, &ra, count_unref), 0);
    cr_assert_eq(r.old_ref, &ra);
    cr_assert_eq(seg(seq, " END END", 4, 0, &m), FGX_REASM_ACCEPT);
    cr_assert_not(m.matched, "filter 10 is gone: its match in A's stream is passed over");
    seq += 8;
    cr_assert_not_null(r.old_stream, "the old stream goes on after a match it passed over");
    cr_assert_eq(seg(seq, "yyy", 5, 0, &m), FGX_REASM_DROP);
    cr_assert(m.matched);
    cr_assert_eq(m.filter_id, 3);
    fgx_reasm_release(ctx, &r);
    cr_assert_eq(unrefs.n, 1);
    hs_free_database(a);
    hs_free_database(e);
}

/* `filter set --regex` (issue 27): filter 10 keeps its id, its regex changes. A's stream still
 * holds the old regex under id 10; the new ids list 10 at revision 1, so A's match is passed
 * over (the old regex blocks nothing any more) while zzz, unchanged, keeps A's stream alive. */
Test(reasm, edited_filter_old_regex_in_the_old_stream_never_fires)
{
    const uint32_t rev1 = 10u | (1u << FGX_FILTER_ID_REV_SHIFT);
    hs_database_t *a = gen(2, (const char *[]){"zzz", LONG_RE}, (unsigned[]){1, 10});
    hs_database_t *b = gen(2, (const char *[]){"zzz", "qqq"}, (unsigned[]){1, rev1});
    const uint32_t ids_rev[] = {1, rev1};
    struct fgx_reasm_match m;
    uint32_t seq = 0;
    int ra;

    memset(&unrefs, 0, sizeof(unrefs));
    cr_assert_eq(fgx_reasm_switch_db(ctx, &r, a, 1, ids_a, 2, NULL, count_unref), 0);
    cr_assert_eq(fgx_reasm_start(ctx, &r, 0), 0);
    send_begin_and_filler(&seq);
    cr_assert_eq(fgx_reasm_switch_db(ctx, &r, b, 2, ids_rev, 2, &ra, count_unref), 0);
    cr_assert_eq(r.old_ref, &ra, "zzz survives unchanged: A's stream is kept for it");
    cr_assert_eq(seg(seq, "END!", 3, 0, &m), FGX_REASM_ACCEPT);
    cr_assert_not(m.matched, "filter 10's old regex matched in A's stream: passed over");
    seq += 4;
    cr_assert_eq(seg(seq, "qqq", 4, 0, &m), FGX_REASM_DROP);
    cr_assert(m.matched);
    cr_assert_eq(m.filter_id, 10, "the new regex reports the filter's id, without revision");
    fgx_reasm_release(ctx, &r);
    hs_free_database(a);
    hs_free_database(b);
}

/* An edited filter alone shares nothing with the old database: its stream is closed. */
Test(reasm, edit_of_the_only_shared_filter_closes_the_old_stream)
{
    const uint32_t rev1 = 10u | (1u << FGX_FILTER_ID_REV_SHIFT);
    hs_database_t *a = gen(2, (const char *[]){"zzz", LONG_RE}, (unsigned[]){1, 10});
    hs_database_t *b = gen(1, (const char *[]){"qqq"}, (unsigned[]){rev1});
    const uint32_t ids_rev[] = {rev1};
    struct fgx_reasm_match m;
    uint32_t seq = 0;
    int ra;

    memset(&unrefs, 0, sizeof(unrefs));
    cr_assert_eq(fgx_reasm_switch_db(ctx, &r, a, 1, ids_a, 2, NULL, count_unref), 0);
    cr_assert_eq(fgx_reasm_start(ctx, &r, 0), 0);
    send_begin_and_filler(&seq);
    cr_assert_eq(fgx_reasm_switch_db(ctx, &r, b, 2, ids_rev, 1, &ra, count_unref), 0);
    cr_assert_null(r.old_stream);
    cr_assert_eq(unrefs.n, 1);
    cr_assert_eq(seg(seq, "END!", 3, 0, &m), FGX_REASM_ACCEPT);
    cr_assert_not(m.matched);
    fgx_reasm_release(ctx, &r);
    hs_free_database(a);
    hs_free_database(b);
}

Test(reasm, old_stream_sharing_no_id_is_closed)
{
    hs_database_t *a = gen(2, (const char *[]){"zzz", LONG_RE}, (unsigned[]){1, 10});
    hs_database_t *b = gen(2, (const char *[]){"yyy", LONG_RE}, (unsigned[]){3, 10});
    hs_database_t *f = gen(1, (const char *[]){"yyy"}, (unsigned[]){3});
    hs_database_t *g = gen(1, (const char *[]){"xxx"}, (unsigned[]){4});
    struct fgx_reasm_match m;
    uint32_t seq = 0;
    int ra, rb, rf;

    memset(&unrefs, 0, sizeof(unrefs));
    cr_assert_eq(fgx_reasm_switch_db(ctx, &r, a, 1, ids_a, 2, NULL, count_unref), 0);
    cr_assert_eq(fgx_reasm_start(ctx, &r, 0), 0);
    send_begin_and_filler(&seq);
    cr_assert_eq(fgx_reasm_switch_db(ctx, &r, b, 2, ids_b, 2, &ra, count_unref), 0);
    cr_assert_eq(seg(seq, "bb", 3, 0, &m), FGX_REASM_ACCEPT);
    seq += 2;
    /* F keeps only yyy: A shares nothing with it and goes; B's stream becomes the old one. */
    cr_assert_eq(fgx_reasm_switch_db(ctx, &r, f, 3, ids_f, 1, &rb, count_unref), 0);
    cr_assert_eq(unrefs.n, 1);
    cr_assert_eq(unrefs.last, &ra);
    cr_assert_eq(r.old_ref, &rb);
    cr_assert_eq(seg(seq, "END", 4, 0, &m), FGX_REASM_ACCEPT);
    cr_assert_not(m.matched);
    seq += 3;
    /* G shares nothing with B nor F: no old stream at all, both references given back. */
    cr_assert_eq(fgx_reasm_switch_db(ctx, &r, g, 4, ids_g, 1, &rf, count_unref), 0);
    cr_assert_null(r.old_stream);
    cr_assert_null(r.old_ref);
    cr_assert_eq(unrefs.n, 3);
    cr_assert_eq(seg(seq, "xxx", 5, 0, &m), FGX_REASM_DROP);
    cr_assert_eq(m.filter_id, 4);
    fgx_reasm_release(ctx, &r);
    cr_assert_eq(unrefs.n, 3);
    hs_free_database(a);
    hs_free_database(b);
    hs_free_database(f);
    hs_free_database(g);
}

Test(reasm, restart_closes_the_old_stream)
{
    hs_database_t *a = gen(2, (const char *[]){"zzz", LONG_RE}, (unsigned[]){1, 10});
    hs_database_t *b = gen(2, (const char *[]){"yyy", LONG_RE}, (unsigned[]){3, 10});
    struct fgx_reasm_match m;
    uint32_t seq = 0;
    int ra;

    memset(&unrefs, 0, sizeof(unrefs));
    cr_assert_eq(fgx_reasm_switch_db(ctx, &r, a, 1, ids_a, 2, NULL, count_unref), 0);
    cr_assert_eq(fgx_reasm_start(ctx, &r, 0), 0);
    send_begin_and_filler(&seq);
    cr_assert_eq(fgx_reasm_switch_db(ctx, &r, b, 2, ids_b, 2, &ra, count_unref), 0);
    cr_assert_not_null(r.old_stream);
    /* port reuse: a new connection keeps nothing of the old one's history */
    cr_assert_eq(fgx_reasm_start(ctx, &r, 5000), 0);
    cr_assert_null(r.old_stream);
    cr_assert_eq(unrefs.n, 1);
    cr_assert_eq(seg(5000, "END", 3, 0, &m), FGX_REASM_ACCEPT);
    cr_assert_not(m.matched);
    hs_free_database(a);
    hs_free_database(b);
}

Test(reasm, overlap_equal_to_what_passed_is_accepted)
{
    struct fgx_reasm_match m;

    cr_assert_eq(fgx_reasm_set_db(ctx, &r, db_evil, 1), 0);
    cr_assert_eq(fgx_reasm_start(ctx, &r, 1000), 0);
    cr_assert_eq(seg(1000, "hello ", 1, 0, &m), FGX_REASM_ACCEPT);
    cr_assert_eq(seg(1006, "world", 2, 0, &m), FGX_REASM_ACCEPT);
    /* whole, partial and straddling retransmissions */
    cr_assert_eq(seg(1000, "hello world", 3, 0, &m), FGX_REASM_ACCEPT);
    cr_assert_eq(m.inconsistent, 0);
    cr_assert_eq(seg(1004, "o w", 4, 0, &m), FGX_REASM_ACCEPT);
    cr_assert_eq(m.inconsistent, 0);
    cr_assert_eq(seg(1009, "ld!", 5, 0, &m), FGX_REASM_ACCEPT);
    cr_assert_eq(m.inconsistent, 0);
    cr_assert_eq(r.next_seq, 1012);
}

Test(reasm, overlap_different_from_what_passed_is_dropped)
{
    struct fgx_reasm_match m;

    cr_assert_eq(fgx_reasm_set_db(ctx, &r, db_evil, 1), 0);
    cr_assert_eq(fgx_reasm_start(ctx, &r, 0xfffffffc), 0); /* across the wrap, too */
    /* what the receiver discarded (bad timestamp, ...), then the real bytes at the same place */
    cr_assert_eq(seg(0xfffffffc, "xxxxxxxx", 1, 0, &m), FGX_REASM_ACCEPT);
    cr_assert_eq(seg(0xfffffffc, "evil1337", 2, 0, &m), FGX_REASM_DROP);
    cr_assert_eq(m.inconsistent, 1);
    cr_assert_not(m.matched);
    cr_assert_eq(r.next_seq, 4);
    /* longer than what passed: dropped whole, nothing beyond is taken either */
    cr_assert_eq(seg(0xfffffffe, "xxevil1337", 3, 0, &m), FGX_REASM_DROP);
    cr_assert_eq(m.inconsistent, 1);
    cr_assert_eq(r.next_seq, 4);
    /* one byte differs at the end of the overlap */
    cr_assert_eq(seg(2, "xyzz", 4, 0, &m), FGX_REASM_DROP);
    cr_assert_eq(m.inconsistent, 1);
    /* the stream goes on where it was */
    cr_assert_eq(seg(2, "xxabc", 5, 0, &m), FGX_REASM_ACCEPT);
    cr_assert_eq(m.inconsistent, 0);
    cr_assert_eq(r.next_seq, 7);
}

Test(reasm, overlap_checked_only_within_the_ring)
{
    char big[FGX_REASM_RING + 64 + 1], other[sizeof(big)];
    struct fgx_reasm_match m;

    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    memcpy(other, big, sizeof(big));
    cr_assert_eq(fgx_reasm_set_db(ctx, &r, db_evil, 1), 0);
    cr_assert_eq(fgx_reasm_start(ctx, &r, 0), 0);
    cr_assert_eq(seg(0, big, 1, 0, &m), FGX_REASM_ACCEPT);
    /* the first 64 bytes left the ring: they cannot be compared */
    other[10] = 'b';
    cr_assert_eq(seg(0, other, 2, 0, &m), FGX_REASM_ACCEPT);
    cr_assert_eq(m.inconsistent, 0);
    /* a byte still in the ring (its first one, then its last) can */
    other[10] = 'a';
    other[64] = 'b';
    cr_assert_eq(seg(0, other, 3, 0, &m), FGX_REASM_DROP);
    cr_assert_eq(m.inconsistent, 1);
    other[64] = 'a';
    other[sizeof(other) - 2] = 'b';
    cr_assert_eq(seg(0, other, 4, 0, &m), FGX_REASM_DROP);
    cr_assert_eq(m.inconsistent, 1);
}

Test(reasm, held_segment_different_from_what_passed_is_dropped)
{
    struct fgx_reasm_match m;

    cr_assert_eq(fgx_reasm_set_db(ctx, &r, db_evil, 1), 0);
    cr_assert_eq(fgx_reasm_start(ctx, &r, 0), 0);
    cr_assert_eq(seg(4, "il1337", 1, 0, &m), FGX_REASM_HOLD);     /* overlaps 4..5 below */
    cr_assert_eq(seg(8, "37 clean", 2, 0, &m), FGX_REASM_HOLD);   /* same as held bytes 8..9 */
    cr_assert_eq(seg(0, "xxevxx", 3, 0, &m), FGX_REASM_ACCEPT);
    /* "il" differs from the "xx" that passed at 4: dropped; then nothing is in order at 6 */
    cr_assert_eq(m.inconsistent, 1);
    cr_assert_not(m.matched);
    cr_assert_eq(seen.n, 1);
    cr_assert_eq(seen.cookie[0], 1);
    cr_assert_not(seen.accept[0]);
    cr_assert_eq(r.next_seq, 6);
    cr_assert_eq(seg(6, "1337", 4, 0, &m), FGX_REASM_ACCEPT);
    /* the held "37 clean" at 8 overlaps "37" that passed: identical, released */
    cr_assert_eq(m.inconsistent, 0);
    cr_assert_eq(seen.n, 2);
    cr_assert_eq(seen.cookie[1], 2);
    cr_assert(seen.accept[1]);
    cr_assert_eq(r.next_seq, 16);
    cr_assert_eq(fgx_reasm_ctx_held(ctx), 0);
}

/* ---- with a keep pool: every byte passed is compared until it is acknowledged ---- */

#define KEEP_CHUNK 4096 /* reasm.c's KCHUNK */

static struct fgx_reasm r2;

static void keep_setup(void)
{
    setup();
    /* 4 chunks in the pool, 2 per direction */
    cr_assert_eq(fgx_reasm_ctx_keep(ctx, 4 * KEEP_CHUNK, 2 * KEEP_CHUNK), 0);
    fgx_reasm_init(&r2);
}

static void keep_teardown(void)
{
    fgx_reasm_release(ctx, &r2);
    fgx_reasm_release(ctx, &r);
    cr_assert_eq(fgx_reasm_ctx_kept(ctx), 0);
    teardown();
}

TestSuite(keep, .init = keep_setup, .fini = keep_teardown);

static enum fgx_reasm_verdict segn(struct fgx_reasm *d, uint32_t seq, const uint8_t *b, size_t n,
                                   uint64_t cookie, struct fgx_reasm_match *m)
{
    return fgx_reasm_segment(ctx, d, seq, 99, b, n, cookie, 0, m);
}

/* The decoy: len bytes the receiver discards, then len real bytes at the same place,
 * evil1337 first and the last 300 (or all but evil1337) the same as the decoy's. */
static void decoy_then_real(size_t len)
{
    static uint8_t decoy[8192], real[8192];
    struct fgx_reasm_match m;

    for (size_t i = 0; i < len; i++)
        decoy[i] = (uint8_t)('a' + i % 23);
    memcpy(real, decoy, len);
    memcpy(real, "evil1337", 8);
    cr_assert_eq(fgx_reasm_start(ctx, &r, 7000), 0);
    cr_assert_eq(segn(&r, 7000, (const uint8_t *)"hello", 5, 1, &m), FGX_REASM_ACCEPT);
    cr_assert_eq(segn(&r, 7005, decoy, len, 2, &m), FGX_REASM_ACCEPT);
    cr_assert_eq(segn(&r, 7005, real, len, 3, &m), FGX_REASM_DROP, "size %zu", len);
    cr_assert_eq(m.inconsistent, 1, "size %zu", len);
    cr_assert_not(m.matched);
    /* An honest retransmission of the same bytes still passes, whole or in part. */
    cr_assert_eq(segn(&r, 7005, decoy, len, 4, &m), FGX_REASM_ACCEPT, "size %zu", len);
    cr_assert_eq(segn(&r, 7006, decoy + 1, len - 1, 5, &m), FGX_REASM_ACCEPT);
    cr_assert_eq(m.inconsistent + m.uncompared, 0);
}

Test(keep, decoys_of_every_size_are_compared_whole)
{
    cr_assert_eq(fgx_reasm_set_db(ctx, &r, db_evil, 1), 0);
    decoy_then_real(8);
    decoy_then_real(300);
    decoy_then_real(1200);
    decoy_then_real(5000); /* over two kept chunks */
}

Test(keep, held_segment_compared_beyond_the_ring)
{
    static uint8_t a[2000], b[600];
    struct fgx_reasm_match m;

    memset(a, 'a', sizeof(a));
    memset(b, 'a', sizeof(b));
    b[0] = 'b';
    cr_assert_eq(fgx_reasm_set_db(ctx, &r, db_evil, 1), 0);
    cr_assert_eq(fgx_reasm_start(ctx, &r, 1000), 0);
    cr_assert_eq(segn(&r, 1100, b, sizeof(b), 1, &m), FGX_REASM_HOLD);
    /* passes 1000..2999 over the held segment's place; the ring then holds 2744.. only */
    cr_assert_eq(segn(&r, 1000, a, sizeof(a), 2, &m), FGX_REASM_ACCEPT);
    cr_assert_eq(m.inconsistent, 1);
    cr_assert_eq(seen.n, 1);
    cr_assert_not(seen.accept[0]);
}

Test(keep, acknowledged_bytes_need_no_comparison)
{
    static uint8_t a[100], b[100];
    struct fgx_reasm_match m;

    memset(a, 'a', sizeof(a));
    memcpy(b, a, sizeof(b));
    cr_assert_eq(fgx_reasm_set_db(ctx, &r, db_evil, 1), 0);
    cr_assert_eq(fgx_reasm_start(ctx, &r, 0), 0);
    cr_assert_eq(segn(&r, 0, a, sizeof(a), 1, &m), FGX_REASM_ACCEPT);
    cr_assert_eq(fgx_reasm_ctx_kept(ctx), 100);
    fgx_reasm_acked(ctx, &r, 50);
    cr_assert_eq(fgx_reasm_ctx_kept(ctx), 50);
    /* the receiver holds 0..49 and trims them: what they say does not matter */
    b[10] = 'x';
    cr_assert_eq(segn(&r, 0, b, sizeof(b), 2, &m), FGX_REASM_ACCEPT);
    cr_assert_eq(m.inconsistent + m.uncompared, 0);
    b[60] = 'x';
    cr_assert_eq(segn(&r, 0, b, sizeof(b), 3, &m), FGX_REASM_DROP);
    cr_assert_eq(m.inconsistent, 1);
    /* an ack beyond what passed counts up to what passed; an older one changes nothing */
    fgx_reasm_acked(ctx, &r, 5000);
    cr_assert_eq(r.ack_seq, 100);
    cr_assert_eq(fgx_reasm_ctx_kept(ctx), 0);
    fgx_reasm_acked(ctx, &r, 10);
    cr_assert_eq(r.ack_seq, 100);
    cr_assert_eq(segn(&r, 0, b, sizeof(b), 4, &m), FGX_REASM_ACCEPT);
}

Test(keep, bytes_that_left_the_keep_unacknowledged_are_never_passed_again)
{
    static uint8_t a[3 * KEEP_CHUNK];
    struct fgx_reasm_match m;

    memset(a, 'a', sizeof(a));
    cr_assert_eq(fgx_reasm_set_db(ctx, &r, db_evil, 1), 0);
    cr_assert_eq(fgx_reasm_start(ctx, &r, 0), 0);
    /* a direction keeps 2 chunks: the first one's bytes go */
    cr_assert_eq(segn(&r, 0, a, sizeof(a), 1, &m), FGX_REASM_ACCEPT);
    cr_assert_eq(fgx_reasm_ctx_kept(ctx), 2 * KEEP_CHUNK);
    cr_assert_eq(fgx_reasm_ctx_kept_lost(ctx), KEEP_CHUNK);
    cr_assert_eq(r.keep_seq, KEEP_CHUNK);
    /* identical, but it cannot be shown to be: dropped (the sender retransmits) */
    cr_assert_eq(segn(&r, KEEP_CHUNK - 1, a, 10, 2, &m), FGX_REASM_DROP);
    cr_assert_eq(m.uncompared, 1);
    cr_assert_eq(m.inconsistent, 0);
    /* within what is kept: compared, passed */
    cr_assert_eq(segn(&r, KEEP_CHUNK, a, 10, 3, &m), FGX_REASM_ACCEPT);
    cr_assert_eq(m.uncompared + m.inconsistent, 0);
    /* once acknowledged, the receiver holds those bytes: a retransmission is harmless */
    fgx_reasm_acked(ctx, &r, KEEP_CHUNK);
    cr_assert_eq(segn(&r, 0, a, 10, 4, &m), FGX_REASM_ACCEPT);
    cr_assert_eq(segn(&r, KEEP_CHUNK - 5, a, 10, 5, &m), FGX_REASM_ACCEPT);
}

Test(keep, a_full_pool_takes_the_oldest_kept_bytes_of_any_direction)
{
    static uint8_t a[2 * KEEP_CHUNK], b[2 * KEEP_CHUNK];
    struct fgx_reasm r3;
    struct fgx_reasm_match m;

    memset(a, 'a', sizeof(a));
    memset(b, 'b', sizeof(b));
    fgx_reasm_init(&r3);
    cr_assert_eq(fgx_reasm_set_db(ctx, &r, db_evil, 1), 0);
    cr_assert_eq(fgx_reasm_set_db(ctx, &r2, db_evil, 1), 0);
    cr_assert_eq(fgx_reasm_set_db(ctx, &r3, db_evil, 1), 0);
    cr_assert_eq(fgx_reasm_start(ctx, &r, 0), 0);
    cr_assert_eq(fgx_reasm_start(ctx, &r2, 0), 0);
    cr_assert_eq(fgx_reasm_start(ctx, &r3, 0), 0);
    cr_assert_eq(segn(&r, 0, a, sizeof(a), 1, &m), FGX_REASM_ACCEPT);
    cr_assert_eq(segn(&r2, 0, b, sizeof(b), 2, &m), FGX_REASM_ACCEPT);
    /* the pool (4 chunks) is full: r3's first byte takes the oldest chunk, r's first */
    cr_assert_eq(segn(&r3, 0, b, 10, 3, &m), FGX_REASM_ACCEPT);
    cr_assert_eq(r.keep_seq, KEEP_CHUNK);
    cr_assert_eq(r2.keep_seq, 0);
    cr_assert_eq(fgx_reasm_ctx_kept_lost(ctx), KEEP_CHUNK);
    cr_assert_eq(segn(&r, 0, a, 1, 4, &m), FGX_REASM_DROP);
    cr_assert_eq(m.uncompared, 1);
    cr_assert_eq(segn(&r, KEEP_CHUNK, a, 1, 5, &m), FGX_REASM_ACCEPT);
    cr_assert_eq(segn(&r2, 0, b, 10, 6, &m), FGX_REASM_ACCEPT);
    cr_assert_eq(segn(&r3, 0, b, 10, 7, &m), FGX_REASM_ACCEPT);
    cr_assert_eq(m.uncompared + m.inconsistent, 0);
    /* a restart forgets what was kept */
    cr_assert_eq(fgx_reasm_start(ctx, &r2, 100), 0);
    cr_assert_eq(fgx_reasm_ctx_kept(ctx), KEEP_CHUNK + 10);
    fgx_reasm_release(ctx, &r3);
}

Test(keep, acks_of_unsent_bytes_and_old_timestamps)
{
    struct fgx_reasm_match m;

    cr_assert_eq(fgx_reasm_set_db(ctx, &r, db_evil, 1), 0);
    cr_assert_not(fgx_reasm_ack_unsent(&r, 12345)); /* nothing known */
    cr_assert_eq(fgx_reasm_start(ctx, &r, 0xfffffff0), 0); /* e.g. a SYN-ACK's seq + 1 */
    cr_assert_not(fgx_reasm_ack_unsent(&r, 0xfffffff0));
    cr_assert_not(fgx_reasm_ack_unsent(&r, 0xfffffff1)); /* a FIN the rules did not queue */
    cr_assert(fgx_reasm_ack_unsent(&r, 0xfffffff2));
    /* held or passed, a segment seen was sent: across the wrap */
    cr_assert_eq(segn(&r, 0x10, (const uint8_t *)"later", 5, 1, &m), FGX_REASM_HOLD);
    cr_assert_not(fgx_reasm_ack_unsent(&r, 0x16));
    cr_assert(fgx_reasm_ack_unsent(&r, 0x17));

    cr_assert_not(fgx_reasm_paws_old(&r, 1)); /* no timestamp seen */
    fgx_reasm_ts_passed(&r, 100000);
    cr_assert_not(fgx_reasm_paws_old(&r, 100000));
    cr_assert_not(fgx_reasm_paws_old(&r, 99999)); /* one tick tolerated */
    cr_assert(fgx_reasm_paws_old(&r, 99998));
    cr_assert(fgx_reasm_paws_old(&r, 1));
    fgx_reasm_ts_passed(&r, 50); /* never back */
    cr_assert(fgx_reasm_paws_old(&r, 1));
    cr_assert_eq(fgx_reasm_start(ctx, &r, 0), 0);
    cr_assert_not(fgx_reasm_paws_old(&r, 1)); /* a restart forgets it */
    fgx_reasm_ts_passed(&r, 0xfffffff0u);
    fgx_reasm_ts_passed(&r, 5); /* forward across the wrap */
    cr_assert_not(fgx_reasm_paws_old(&r, 5));
    cr_assert(fgx_reasm_paws_old(&r, 0xffffffe0u));
}

Test(keep, a_direction_without_a_database_keeps_nothing)
{
    static uint8_t a[2000], b[2000];
    struct fgx_reasm_match m;

    memset(a, 'a', sizeof(a));
    memset(b, 'b', sizeof(b));
    cr_assert_eq(fgx_reasm_start(ctx, &r, 0), 0); /* no database: nothing is scanned */
    cr_assert_eq(segn(&r, 0, a, sizeof(a), 1, &m), FGX_REASM_ACCEPT);
    cr_assert_eq(fgx_reasm_ctx_kept(ctx), 0);
    cr_assert_eq(segn(&r, 0, b, sizeof(b), 2, &m), FGX_REASM_ACCEPT);
    cr_assert_eq(m.inconsistent + m.uncompared, 0);
    /* a filter from now on: the bytes from here are kept and compared */
    cr_assert_eq(fgx_reasm_set_db(ctx, &r, db_evil, 1), 0);
    cr_assert_eq(segn(&r, 2000, a, sizeof(a), 3, &m), FGX_REASM_ACCEPT);
    cr_assert_eq(fgx_reasm_ctx_kept(ctx), sizeof(a));
    cr_assert_eq(segn(&r, 1000, b, sizeof(b), 4, &m), FGX_REASM_DROP);
    cr_assert_eq(m.inconsistent, 1);
}

Test(keep, a_direction_restored_from_a_snapshot_keeps_its_ring_and_refuses_older_overlaps)
{
    static uint8_t a[1000];
    struct fgx_reasm_match m;

    memset(a, 'a', sizeof(a));
    cr_assert_eq(fgx_reasm_set_db(ctx, &r, db_evil, 1), 0);
    /* what a flow handover does: position and ring set directly, nothing else */
    r.active = true;
    r.next_seq = 0xfffffff0u + 1000;
    r.floor_seq = 0xfffffff0u;
    r.ring_len = FGX_REASM_RING;
    r.ring_pos = 0;
    memset(r.ring, 'a', sizeof(r.ring));
    /* nothing known of what it sent: no ACK is taken for unsent data yet */
    cr_assert_not(fgx_reasm_ack_unsent(&r, 0x12345678));
    /* the ring's bytes are compared; what lies before them cannot be */
    cr_assert_eq(segn(&r, r.next_seq - 10, a, 10, 1, &m), FGX_REASM_ACCEPT);
    cr_assert_eq(segn(&r, r.next_seq - 10, (const uint8_t *)"bbbbbbbbbb", 10, 2, &m),
                 FGX_REASM_DROP);
    cr_assert_eq(m.inconsistent, 1);
    cr_assert_eq(segn(&r, 0xfffffff0u, a, 10, 3, &m), FGX_REASM_DROP);
    cr_assert_eq(m.uncompared, 1);
    cr_assert(fgx_reasm_ack_unsent(&r, 0xfffffff0u + 1002));
    /* once the receiver acknowledges them, they are its */
    fgx_reasm_acked(ctx, &r, 0xfffffff0u + 500);
    cr_assert_eq(segn(&r, 0xfffffff0u, a, 10, 4, &m), FGX_REASM_ACCEPT);
}
