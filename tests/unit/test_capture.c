/* Unit tests for the capture rings (libcommon/capture.c): the bounds (connections per ring,
 * bytes per direction, segment marks), the ring's reuse of the oldest slot and its skipping of
 * pinned (blocked) ones, stale references, stream offsets from sequence numbers, the
 * encoding round trip, and the client port of an HTTP/2 exchange's capture. */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fgx/capture.h"
#include "fgx/wcfg.h"

static const uint8_t cli[4] = {10, 0, 0, 2}, srv[4] = {10, 0, 0, 1};

static struct fgx_cap_ref open_conn(struct fgx_cap_ring *r, uint16_t cport)
{
    struct fgx_cap_ref ref;

    fgx_cap_open(r, 6, 4, cli, cport, srv, 80, 1000, &ref);
    return ref;
}

/* Every capture the ring holds, decoded, by client port. */
struct seen {
    size_t n;
    uint16_t cport[64];
    size_t len0[64];
};

static int collect(void *arg, uint8_t *buf, size_t len)
{
    struct seen *s = arg;
    struct fgx_cap c;

    cr_assert_eq(fgx_cap_decode(buf, len, &c), 0);
    s->cport[s->n] = c.cport;
    s->len0[s->n] = c.len[0];
    s->n++;
    fgx_cap_release(&c);
    free(buf);
    return 0;
}

Test(capture, bounds_refused)
{
    struct fgx_cap_ring *r = (void *)1;

    cr_assert_eq(fgx_cap_ring_new(1, 0, 16, &r), -EINVAL);
    cr_assert_null(r);
    cr_assert_eq(fgx_cap_ring_new(1, 4, 0, &r), -EINVAL);
    cr_assert_eq(fgx_cap_ring_new(1, FGX_CAP_CONNS_MAX + 1, 16, &r), -EINVAL);
    cr_assert_eq(fgx_cap_ring_new(1, 4, FGX_CAP_BYTES_MAX + 1, &r), -EINVAL);
    fgx_cap_ring_free(NULL);
}

Test(capture, bytes_bounded_per_direction)
{
    struct fgx_cap_ring *r;
    struct fgx_cap_ref ref;
    struct fgx_cap c;
    uint8_t *buf;
    size_t len;

    cr_assert_eq(fgx_cap_ring_new(7, 2, 8, &r), 0);
    ref = open_conn(r, 1000);
    cr_assert_neq(ref.gen, 0);
    fgx_cap_add(r, &ref, 0, 5000, 5000, (const uint8_t *)"hello ", 6, 1, false);
    fgx_cap_add(r, &ref, 0, 5000, 5006, (const uint8_t *)"world!", 6, 2, false);
    fgx_cap_add(r, &ref, 1, 9000, 9000, (const uint8_t *)"ok", 2, 3, false);
    cr_assert(fgx_cap_pin(r, &ref, 42));
    cr_assert_eq(fgx_cap_take(r, &ref, &buf, &len), 0);
    cr_assert_eq(fgx_cap_decode(buf, len, &c), 0);
    cr_assert_eq(c.len[0], 8, "kept %zu bytes of a direction bounded at 8", c.len[0]);
    cr_assert_eq(memcmp(c.data[0], "hello wo", 8), 0);
    cr_assert_eq(c.seen[0], 12, "seen counts what passed the bound");
    cr_assert_eq(c.len[1], 2);
    cr_assert_eq(c.isn[0], 5000);
    cr_assert_eq(c.isn[1], 9000);
    cr_assert(c.blocked);
    cr_assert_eq(c.filter_id, 42);
    cr_assert_eq(c.service_id, 7);
    /* marks: [0,6) c2s, [6,8) c2s (cut to the bound), [0,2) s2c, in time order */
    cr_assert_eq(c.nseg, 3);
    cr_assert_eq(c.seg[1].off, 6);
    cr_assert_eq(c.seg[1].len, 2);
    cr_assert_eq(c.seg_dir[2], 1);
    fgx_cap_release(&c);
    free(buf);
    fgx_cap_ring_free(r);
}

/* A flag leaving (issue 28): the capture so far goes with the event, unblocked, and the
 * connection goes on being recorded in its slot. */
Test(capture, pin_keep_leaves_the_connection_unblocked)
{
    struct fgx_cap_ring *r;
    struct fgx_cap_ref ref;
    struct fgx_cap c;
    uint8_t *buf;
    size_t len;

    cr_assert_eq(fgx_cap_ring_new(7, 2, 64, &r), 0);
    ref = open_conn(r, 1000);
    fgx_cap_add(r, &ref, 0, 5000, 5000, (const uint8_t *)"get\n", 4, 1, false);
    fgx_cap_add(r, &ref, 1, 9000, 9000, (const uint8_t *)"FLAG", 4, 2, false);
    cr_assert(fgx_cap_pin_keep(r, &ref));
    cr_assert(!fgx_cap_pin_keep(r, &ref), "pinned twice");
    cr_assert_eq(fgx_cap_take(r, &ref, &buf, &len), 0);
    cr_assert_eq(fgx_cap_decode(buf, len, &c), 0);
    cr_assert(!c.blocked);
    cr_assert_eq(c.len[0], 4);
    cr_assert_eq(c.len[1], 4);
    fgx_cap_release(&c);
    free(buf);
    /* the slot is the connection's still: more bytes land in it */
    fgx_cap_add(r, &ref, 1, 9000, 9004, (const uint8_t *)"more", 4, 3, false);
    cr_assert(fgx_cap_pin(r, &ref, 5));
    cr_assert_eq(fgx_cap_take(r, &ref, &buf, &len), 0);
    cr_assert_eq(fgx_cap_decode(buf, len, &c), 0);
    cr_assert_eq(c.len[1], 8);
    fgx_cap_release(&c);
    free(buf);
    fgx_cap_ring_free(r);
}

Test(capture, out_of_order_lands_in_stream_order)
{
    struct fgx_cap_ring *r;
    struct fgx_cap_ref ref;
    struct fgx_cap c;
    uint8_t *buf;
    size_t len;

    cr_assert_eq(fgx_cap_ring_new(1, 1, 64, &r), 0);
    ref = open_conn(r, 1);
    /* The second segment first (held by the worker), then the first; a retransmission of the
     * first adds no mark; bytes from before the stream's start are cut off. */
    fgx_cap_add(r, &ref, 0, 100, 104, (const uint8_t *)"1337", 4, 1, false);
    fgx_cap_add(r, &ref, 0, 100, 100, (const uint8_t *)"evil", 4, 2, false);
    fgx_cap_add(r, &ref, 0, 100, 100, (const uint8_t *)"evil", 4, 3, false);
    fgx_cap_add(r, &ref, 0, 100, 98, (const uint8_t *)"xxev", 4, 4, false);
    cr_assert(fgx_cap_pin(r, &ref, 1));
    cr_assert_eq(fgx_cap_take(r, &ref, &buf, &len), 0);
    cr_assert_eq(fgx_cap_decode(buf, len, &c), 0);
    cr_assert_eq(c.len[0], 8);
    cr_assert_eq(memcmp(c.data[0], "evil1337", 8), 0);
    cr_assert_eq(c.nseg, 2, "%zu marks", c.nseg);
    fgx_cap_release(&c);
    free(buf);
    fgx_cap_ring_free(r);
}

Test(capture, marks_bounded)
{
    struct fgx_cap_ring *r;
    struct fgx_cap_ref ref;
    struct fgx_cap c;
    uint8_t *buf;
    size_t len;

    cr_assert_eq(fgx_cap_ring_new(1, 1, 4096, &r), 0);
    ref = open_conn(r, 1);
    for (uint32_t i = 0; i < 3 * FGX_CAP_SEGS; i++)
        fgx_cap_append(r, &ref, 0, (const uint8_t *)"ab", 2, i, false);
    cr_assert(fgx_cap_pin(r, &ref, 1));
    cr_assert_eq(fgx_cap_take(r, &ref, &buf, &len), 0);
    cr_assert_eq(fgx_cap_decode(buf, len, &c), 0);
    cr_assert_eq(c.nseg, FGX_CAP_SEGS);
    cr_assert_eq(c.len[0], 6 * FGX_CAP_SEGS, "every byte kept, under fewer marks");
    cr_assert_eq(c.seg[FGX_CAP_SEGS - 1].off + c.seg[FGX_CAP_SEGS - 1].len, c.len[0],
                 "the last mark covers the rest");
    fgx_cap_release(&c);
    free(buf);
    fgx_cap_ring_free(r);
}

Test(capture, ring_reuses_oldest_and_skips_pinned)
{
    struct fgx_cap_ring *r;
    struct fgx_cap_ref a, b, c, d, e;
    struct seen s = {0};
    uint8_t *buf;
    size_t len;

    cr_assert_eq(fgx_cap_ring_new(1, 3, 16, &r), 0);
    a = open_conn(r, 1);
    b = open_conn(r, 2);
    c = open_conn(r, 3);
    fgx_cap_append(r, &a, 0, (const uint8_t *)"a", 1, 1, false);
    fgx_cap_append(r, &b, 0, (const uint8_t *)"b", 1, 1, false);
    fgx_cap_append(r, &c, 0, (const uint8_t *)"c", 1, 1, false);
    cr_assert(fgx_cap_pin(r, &a, 9)); /* blocked: kept until taken */
    d = open_conn(r, 4);              /* the ring is full: the oldest unpinned (b) goes */
    cr_assert_eq(d.slot, b.slot);
    fgx_cap_append(r, &d, 0, (const uint8_t *)"d", 1, 1, false);
    /* b's ref is stale: writes to it go nowhere, and it cannot be pinned or taken */
    fgx_cap_append(r, &b, 0, (const uint8_t *)"XXXX", 4, 2, false);
    cr_assert_not(fgx_cap_pin(r, &b, 9));
    cr_assert_eq(fgx_cap_take(r, &b, &buf, &len), -ENOENT);
    cr_assert_eq(fgx_cap_ring_collect(r, collect, &s), 0);
    cr_assert_eq(s.n, 3, "the ring holds %zu connections, bounded at 3", s.n);
    for (size_t i = 0; i < s.n; i++) {
        cr_assert_neq(s.cport[i], 2, "the evicted connection is still there");
        cr_assert_eq(s.len0[i], 1, "a stale write reached connection %u", s.cport[i]);
    }
    /* Everything pinned: a new connection gets no slot (and nothing is overwritten). */
    cr_assert(fgx_cap_pin(r, &c, 9));
    cr_assert(fgx_cap_pin(r, &d, 9));
    e = open_conn(r, 5);
    cr_assert_eq(e.gen, 0);
    /* Taking a pinned capture frees its slot for the next connection. */
    cr_assert_eq(fgx_cap_take(r, &a, &buf, &len), 0);
    free(buf);
    e = open_conn(r, 5);
    cr_assert_eq(e.slot, a.slot);
    fgx_cap_ring_free(r);
}

Test(capture, udp_runs_join_until_blocked)
{
    struct fgx_cap_ring *r;
    struct fgx_cap_ref a, b, c;

    cr_assert_eq(fgx_cap_ring_new(1, 4, 64, &r), 0);
    fgx_cap_udp(r, 4, cli, 5353, srv, 53, 1, &a);
    fgx_cap_udp(r, 4, cli, 5353, srv, 53, 2, &b);
    cr_assert_eq(a.slot, b.slot, "datagrams of one 4-tuple in a row are one capture");
    cr_assert_eq(a.gen, b.gen);
    cr_assert(fgx_cap_pin(r, &b, 3));
    fgx_cap_udp(r, 4, cli, 5353, srv, 53, 3, &c);
    cr_assert_neq(c.slot, a.slot, "a datagram after a blocked one starts a new capture");
    fgx_cap_ring_free(r);
}

Test(capture, decode_refuses_garbage)
{
    struct fgx_cap c;
    uint8_t junk[] = {0xff, 0xff, 0xff, 0x01, 0x02};

    cr_assert_eq(fgx_cap_decode(junk, sizeof(junk), &c), -EINVAL);
    cr_assert_null(c.msg);
}

/* A script's verdict comes after the regex stage recorded its bytes as passed: the marks that
 * hold the judged bytes turn blocked (by sequence number, and as a stream's last bytes), the
 * others and the other direction stay as they were, a DROP's block is silent (no reset in a
 * pcap) and survives the encoding, and a stale ref changes nothing. */
Test(capture, judged_bytes_blocked_after_the_fact)
{
    struct fgx_cap_ring *r;
    struct fgx_cap_ref ref, ref2, stale;
    struct fgx_cap c;
    uint8_t *buf;
    size_t len;

    cr_assert_eq(fgx_cap_ring_new(1, 2, 64, &r), 0);
    ref = open_conn(r, 1000);
    fgx_cap_add(r, &ref, 0, 5000, 5000, (const uint8_t *)"GET / ", 6, 1, false);
    fgx_cap_add(r, &ref, 1, 9000, 9000, (const uint8_t *)"hi", 2, 2, false);
    fgx_cap_add(r, &ref, 0, 5000, 5006, (const uint8_t *)"evil", 4, 3, false);
    fgx_cap_add(r, &ref, 0, 5000, 5010, (const uint8_t *)"more", 4, 4, false);
    /* the judged segment is the second c2s one, [5006, 5010); a range reaching back before
     * the direction's start marks nothing there */
    cr_assert(fgx_cap_block_seq(r, &ref, 0, 5006, 4, false));
    cr_assert(fgx_cap_block_seq(r, &ref, 1, 8990, 5, false));
    cr_assert(fgx_cap_pin(r, &ref, 0));
    cr_assert_eq(fgx_cap_take(r, &ref, &buf, &len), 0);
    cr_assert_eq(fgx_cap_decode(buf, len, &c), 0);
    cr_assert(c.blocked && !c.silent);
    cr_assert_eq(c.nseg, 4);
    /* time order: c2s [0,6), s2c [0,2), c2s [6,10), c2s [10,14) */
    cr_assert(!c.seg[0].blocked, "a passed segment before the judged one marked blocked");
    cr_assert(!c.seg[1].blocked, "a range before the direction's start marked its bytes");
    cr_assert(c.seg[2].blocked && c.seg[2].off == 6 && c.seg_dir[2] == 0,
              "the judged segment is not blocked");
    cr_assert(!c.seg[3].blocked, "a segment after the judged one marked blocked");
    fgx_cap_release(&c);
    free(buf);

    /* a stream (the proxy's): its last read judged; a range that overlaps two marks marks both */
    ref2 = open_conn(r, 1001);
    fgx_cap_append(r, &ref2, 0, (const uint8_t *)"abc", 3, 1, false);
    fgx_cap_append(r, &ref2, 1, (const uint8_t *)"reply", 5, 2, false);
    fgx_cap_append(r, &ref2, 0, (const uint8_t *)"defgh", 5, 3, false);
    cr_assert(fgx_cap_block_tail(r, &ref2, 0, 5, true));
    cr_assert(fgx_cap_pin(r, &ref2, 0));
    cr_assert_eq(fgx_cap_take(r, &ref2, &buf, &len), 0);
    cr_assert_eq(fgx_cap_decode(buf, len, &c), 0);
    cr_assert(c.blocked && c.silent, "a silent block (a DROP) lost its mark");
    cr_assert_eq(c.nseg, 3);
    cr_assert(!c.seg[0].blocked && !c.seg[1].blocked && c.seg[2].blocked &&
              c.seg[2].len == 5 && c.seg_dir[2] == 0, "the last read of c2s is not the one blocked");
    fgx_cap_release(&c);
    free(buf);

    /* two marks overlapped by one range; the stale ref of a reused slot touches nothing */
    stale = ref;
    ref = open_conn(r, 1002);
    cr_assert_eq(ref.slot, stale.slot, "the ring did not reuse the oldest slot");
    fgx_cap_append(r, &ref, 0, (const uint8_t *)"12", 2, 1, false);
    fgx_cap_append(r, &ref, 0, (const uint8_t *)"34", 2, 2, false);
    fgx_cap_append(r, &ref, 0, (const uint8_t *)"56", 2, 3, false);
    cr_assert(!fgx_cap_block_seq(r, &stale, 0, 1, 6, false));
    cr_assert(!fgx_cap_block_tail(r, &stale, 0, 6, false));
    cr_assert(fgx_cap_block_seq(r, &ref, 0, 2, 2, false)); /* stream offsets [1, 3): isn 1 */
    cr_assert(fgx_cap_pin(r, &ref, 0));
    cr_assert_eq(fgx_cap_take(r, &ref, &buf, &len), 0);
    cr_assert_eq(fgx_cap_decode(buf, len, &c), 0);
    cr_assert_eq(c.nseg, 3);
    cr_assert(!c.silent, "a reused slot kept the last one's silent mark");
    cr_assert(c.seg[0].blocked && c.seg[1].blocked && !c.seg[2].blocked,
              "a range across two marks: %d %d %d", c.seg[0].blocked, c.seg[1].blocked,
              c.seg[2].blocked);
    fgx_cap_release(&c);
    free(buf);
    fgx_cap_ring_free(r);
}

/* A service's ring kept across its absence from the ruleset (a layer switch): collected while
 * away, taken back (with its captures) when it returns with the same bounds, freed when it
 * returns with other bounds; a set keeps at most FGX_CAP_RETIRED_MAX. */
Test(capture, set_keeps_rings_of_services_that_left)
{
    size_t nsvc = FGX_CAP_RETIRED_MAX + 2;
    struct fgx_wcfg *c = calloc(1, sizeof(*c) + nsvc * sizeof(c->svc[0])), none = {0};
    struct fgx_wsvc *svc = c->svc;
    struct fgx_cap_set s;
    struct fgx_cap_ring *r;
    struct fgx_blob *caps = NULL;
    size_t n = 0, cap = 0;
    struct fgx_cap_ref ref;

    for (size_t i = 0; i < nsvc; i++) {
        svc[i].id = (uint32_t)i + 1;
        svc[i].capture_conns = 4;
        svc[i].capture_bytes = 64;
    }
    c->nservices = 1;
    fgx_cap_set_init(&s, false);
    fgx_cap_set_switch(&s, c, 1);
    r = fgx_cap_set_ring(&s, 1);
    cr_assert_not_null(r);
    ref = open_conn(r, 40001);
    fgx_cap_add(r, &ref, 0, 5000, 5000, (const uint8_t *)"GET /", 5, 1, false);
    /* service 1 leaves: no ring to write to, its captures still collected */
    fgx_cap_set_switch(&s, &none, 1);
    cr_assert_null(fgx_cap_set_ring(&s, 1));
    cr_assert_eq(s.nretired, 1);
    cr_assert_eq(fgx_cap_set_collect(&s, 1, &caps, &n, &cap), 0);
    cr_assert_eq(n, 1);
    free(caps[0].data);
    /* back with the same bounds: the same ring */
    fgx_cap_set_switch(&s, c, 1);
    cr_assert_eq(fgx_cap_set_ring(&s, 1), r);
    cr_assert_eq(s.nretired, 0);
    n = 0;
    cr_assert_eq(fgx_cap_set_collect(&s, 1, &caps, &n, &cap), 0);
    cr_assert_eq(n, 1);
    free(caps[0].data);
    /* away, then back with other bounds: a new, empty ring */
    fgx_cap_set_switch(&s, &none, 1);
    svc[0].capture_conns = 8;
    fgx_cap_set_switch(&s, c, 1);
    cr_assert_eq(s.nretired, 0);
    n = 0;
    cr_assert_eq(fgx_cap_set_collect(&s, 1, &caps, &n, &cap), 0);
    cr_assert_eq(n, 0);
    /* more services leave than are kept: the oldest go */
    c->nservices = nsvc;
    fgx_cap_set_switch(&s, c, 1);
    fgx_cap_set_switch(&s, &none, 1);
    cr_assert_eq(s.nretired, FGX_CAP_RETIRED_MAX);
    free(caps);
    fgx_cap_set_release(&s);
    free(c);
}

/* Each exchange of an h2 connection is a capture of its own: stream 1 keeps the connection's
 * client port, each client stream after it (odd ids) one up, no two of a connection's first
 * streams alike, and the top wraps into 1024..65535, never onto 0 or a privileged port. */
Test(capture, stream_port_per_exchange)
{
    cr_assert_eq(fgx_cap_stream_port(40000, 1), 40000);
    cr_assert_eq(fgx_cap_stream_port(40000, 3), 40001);
    cr_assert_eq(fgx_cap_stream_port(40000, 15), 40007);
    cr_assert_eq(fgx_cap_stream_port(40000, 0), 40000);
    cr_assert_eq(fgx_cap_stream_port(65535, 1), 65535);
    cr_assert_eq(fgx_cap_stream_port(65535, 3), 1024);
    cr_assert_eq(fgx_cap_stream_port(65534, 7), 1025);
    for (uint32_t sid = 1; sid < (1u << 31); sid = sid * 3 + 2) {
        uint16_t p = fgx_cap_stream_port(60000, sid);

        cr_assert(p >= 1024, "stream %u: port %u", sid, p);
    }
    for (uint32_t a = 1; a < 2000; a += 2)
        for (uint32_t b = a + 2; b < 2000; b += 2)
            cr_assert_neq(fgx_cap_stream_port(65000, a), fgx_cap_stream_port(65000, b));
}
