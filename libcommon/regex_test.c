/* Offline regex trial: the filter's own compile path (lint, compile, serialize, load) and a
 * scan of the input as a worker scans a stream or a datagram. Nothing here is on a packet path:
 * it serves `fgexctl regex test`. */
#include "fgx/regex_test.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hs.h>

#include "hs_err.h"

/* The filter id the trial compiles its regex under: any id does, the flags are what matter. */
#define TRIAL_ID 1u

struct fgx_regex_test {
    hs_database_t *db;
    hs_scratch_t *scratch;
    hs_stream_t *stream; /* TCP */
    bool udp, fed;
    uint64_t total; /* bytes fed */
    /* The last FGX_REGEX_TEST_BEFORE bytes fed before the current piece, oldest first. */
    uint8_t tail[FGX_REGEX_TEST_BEFORE];
    size_t tail_len;
    struct fgx_regex_test_match m;
    size_t after_want; /* excerpt bytes after the end still to take from later pieces */
};

struct trial_hit {
    bool hit;
    unsigned long long end;
};

static int on_match(unsigned int id, unsigned long long from, unsigned long long to,
                    unsigned int flags, void *arg)
{
    struct trial_hit *h = arg;

    (void)id;
    (void)from;
    (void)flags;
    h->hit = true;
    h->end = to;
    return 1; /* a filter acts on its first match */
}

int fgx_regex_test_new(const char *regex, bool nocase, int ipproto, struct fgx_pattern_warnings *w,
                       char *err, size_t errlen, struct fgx_regex_test **out)
{
    struct fgx_pattern p = {
        .filter_id = TRIAL_ID, .regex = regex, .dir = FGX_DIR_BOTH, .nocase = nocase};
    struct fgx_blob b = {0};
    struct fgx_regex_test *rt;
    hs_error_t rc;
    int ret;

    *out = NULL;
    ret = fgx_filter_regex_lint(regex, nocase, ipproto, w, err, errlen);
    if (ret < 0)
        return ret;
    rt = calloc(1, sizeof(*rt));
    if (rt == NULL)
        return -ENOMEM;
    rt->udp = ipproto == IPPROTO_UDP;
    ret = fgx_ruleset_compile(&p, 1, FGX_DIR_C2S, ipproto, &b, err, errlen);
    if (ret == 0)
        ret = fgx_hsdb_load(b.data, b.len, (struct hs_database **)&rt->db);
    fgx_blob_release(&b);
    if (ret < 0) {
        if (err != NULL && errlen > 0 && err[0] == '\0')
            (void)snprintf(err, errlen, "cannot load the compiled database");
        goto err;
    }
    rc = hs_alloc_scratch(rt->db, &rt->scratch);
    if (rc == HS_SUCCESS && !rt->udp)
        rc = hs_open_stream(rt->db, 0, &rt->stream);
    if (rc != HS_SUCCESS) {
        (void)snprintf(err, errlen, "hyperscan: %s", fgx_hs_strerror(rc));
        ret = rc == HS_NOMEM ? -ENOMEM : -EIO;
        goto err;
    }
    *out = rt;
    return 0;
err:
    fgx_regex_test_free(rt);
    return ret;
}

void fgx_regex_test_free(struct fgx_regex_test *rt)
{
    if (rt == NULL)
        return;
    if (rt->stream != NULL)
        hs_close_stream(rt->stream, NULL, NULL, NULL);
    hs_free_scratch(rt->scratch);
    hs_free_database(rt->db);
    free(rt);
}

/* The excerpt of a match ending at piece offset end: bytes before from the tail and the piece,
 * bytes after from the piece (and, for a stream, from later pieces: after_want). */
static void excerpt_start(struct fgx_regex_test *rt, const uint8_t *d, size_t len, size_t end)
{
    struct fgx_regex_test_match *m = &rt->m;
    size_t in_piece = end < FGX_REGEX_TEST_BEFORE ? end : FGX_REGEX_TEST_BEFORE;
    size_t from_tail = FGX_REGEX_TEST_BEFORE - in_piece, after;

    if (from_tail > rt->tail_len)
        from_tail = rt->tail_len;
    memcpy(m->excerpt, rt->tail + rt->tail_len - from_tail, from_tail);
    memcpy(m->excerpt + from_tail, d + end - in_piece, in_piece);
    m->match_end = from_tail + in_piece;
    after = len - end < FGX_REGEX_TEST_AFTER ? len - end : FGX_REGEX_TEST_AFTER;
    memcpy(m->excerpt + m->match_end, d + end, after);
    m->excerpt_len = m->match_end + after;
    rt->after_want = FGX_REGEX_TEST_AFTER - after;
}

static void tail_push(struct fgx_regex_test *rt, const uint8_t *d, size_t len)
{
    if (len >= FGX_REGEX_TEST_BEFORE) {
        memcpy(rt->tail, d + len - FGX_REGEX_TEST_BEFORE, FGX_REGEX_TEST_BEFORE);
        rt->tail_len = FGX_REGEX_TEST_BEFORE;
        return;
    }
    if (rt->tail_len + len > FGX_REGEX_TEST_BEFORE) {
        size_t drop = rt->tail_len + len - FGX_REGEX_TEST_BEFORE;

        memmove(rt->tail, rt->tail + drop, rt->tail_len - drop);
        rt->tail_len -= drop;
    }
    memcpy(rt->tail + rt->tail_len, d, len);
    rt->tail_len += len;
}

int fgx_regex_test_feed(struct fgx_regex_test *rt, const void *data, size_t len, char *err,
                        size_t errlen)
{
    const uint8_t *d = data;
    struct trial_hit h = {0};
    hs_error_t rc;

    if (rt->udp && (rt->fed || len > FGX_REGEX_TEST_DGRAM_MAX)) {
        (void)snprintf(err, errlen, "a UDP datagram carries at most %d bytes",
                       FGX_REGEX_TEST_DGRAM_MAX);
        return -EINVAL;
    }
    rt->fed = true;
    if (rt->m.matched) {
        /* Only the excerpt's bytes after the match are still wanted. */
        size_t take = len < rt->after_want ? len : rt->after_want;

        memcpy(rt->m.excerpt + rt->m.excerpt_len, d, take);
        rt->m.excerpt_len += take;
        rt->after_want -= take;
        rt->total += len;
        return 0;
    }
    if (rt->udp)
        rc = hs_scan(rt->db, (const char *)d, (unsigned int)len, 0, rt->scratch, on_match, &h);
    else
        rc = hs_scan_stream(rt->stream, (const char *)d, (unsigned int)len, 0, rt->scratch,
                            on_match, &h);
    if (h.hit) {
        size_t end = h.end >= rt->total ? (size_t)(h.end - rt->total) : 0;

        if (end > len)
            end = len;
        rt->m.matched = true;
        rt->m.end = rt->total + end;
        excerpt_start(rt, d, len, end);
    } else if (rc != HS_SUCCESS) {
        (void)snprintf(err, errlen, "hyperscan scan: %s", fgx_hs_strerror(rc));
        return -EIO;
    } else {
        tail_push(rt, d, len);
    }
    rt->total += len;
    return 0;
}

void fgx_regex_test_result(const struct fgx_regex_test *rt, struct fgx_regex_test_match *m)
{
    *m = rt->m;
}

uint64_t fgx_regex_test_bytes(const struct fgx_regex_test *rt)
{
    return rt->total;
}
