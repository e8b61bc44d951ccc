/* controld control API, the regex family (issue 27): `regex match`, the page's pattern tester.
 * Each pattern is judged as `filter add` judges it (its own error, its warnings), then compiled
 * once more with start-of-match tracking (block mode, a filter's flags without SINGLEMATCH) and
 * run over the sample, and every match is reported with its start and end. Nothing is stored;
 * the workers never see these databases. */
#include "controld/ctl_rpc_cmd.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hs/hs.h>

#include "controld/ctl_config.h"
#include "fgx/log.h"

#define RX_PATTERNS_MAX 16
#define RX_SAMPLE_MAX (1u << 20)
#define RX_MATCHES_MAX 1000

/* What the reply points into, freed with the request (ctl_rpc_regex_free()). */
struct ctl_rpc_regex {
    Fgx__Ctl__RegexMatchResult res[RX_PATTERNS_MAX];
    Fgx__Ctl__RegexMatchResult *resp[RX_PATTERNS_MAX];
    char err[RX_PATTERNS_MAX][768];
    struct fgx_pattern_warnings warn[RX_PATTERNS_MAX];
    char *warnp[RX_PATTERNS_MAX][FGX_PATTERN_WARN_MAX];
    Fgx__Ctl__RegexMatchSpan *spans[RX_PATTERNS_MAX];
    Fgx__Ctl__RegexMatchSpan **spanp[RX_PATTERNS_MAX];
};

void ctl_rpc_regex_free(struct ctl_rpc_regex *x)
{
    if (!x)
        return;
    for (size_t i = 0; i < RX_PATTERNS_MAX; i++) {
        free(x->spans[i]);
        free(x->spanp[i]);
    }
    free(x);
}

struct rx_scan {
    Fgx__Ctl__RegexMatchResult *res;
    Fgx__Ctl__RegexMatchSpan *spans;
    bool som;
};

static int on_match(unsigned id, unsigned long long from, unsigned long long to, unsigned flags,
                    void *ctx)
{
    struct rx_scan *s = ctx;
    Fgx__Ctl__RegexMatchSpan *m;

    (void)id;
    (void)flags;
    if (s->res->n_matches == RX_MATCHES_MAX) {
        s->res->has_truncated = s->res->truncated = 1;
        return 1; /* stop: enough to mark */
    }
    m = &s->spans[s->res->n_matches++];
    fgx__ctl__regex_match_span__init(m);
    m->start = s->som ? from : to;
    m->end = to;
    return 0;
}

/* One pattern over the sample into res (its spans in x's arrays at i). */
static int match_one(struct ctl_rpc_regex *x, size_t i, const char *regex, bool nocase,
                     const ProtobufCBinaryData *sample)
{
    Fgx__Ctl__RegexMatchResult *res = &x->res[i];
    unsigned base = HS_FLAG_DOTALL | (nocase ? HS_FLAG_CASELESS : 0);
    hs_database_t *db = NULL;
    hs_scratch_t *scr = NULL;
    hs_compile_error_t *cerr = NULL;
    struct rx_scan s = {.res = res, .som = true};
    int rv = 0;

    /* start tracking can be refused for a pattern that compiles without it ("too large"):
     * its matches then carry their ends only */
    if (hs_compile(regex, base | HS_FLAG_SOM_LEFTMOST, HS_MODE_BLOCK, NULL, &db, &cerr) !=
        HS_SUCCESS) {
        hs_free_compile_error(cerr);
        cerr = NULL;
        s.som = false;
        if (hs_compile(regex, base, HS_MODE_BLOCK, NULL, &db, &cerr) != HS_SUCCESS) {
            (void)snprintf(x->err[i], sizeof(x->err[i]), "invalid regex \"%.200s\": %s", regex,
                           cerr && cerr->message ? cerr->message : "hyperscan compile failed");
            hs_free_compile_error(cerr);
            res->error = x->err[i];
            return 0;
        }
        res->has_start_unknown = res->start_unknown = 1;
    }
    x->spans[i] = calloc(RX_MATCHES_MAX, sizeof(*x->spans[i]));
    x->spanp[i] = calloc(RX_MATCHES_MAX, sizeof(*x->spanp[i]));
    if (!x->spans[i] || !x->spanp[i] || hs_alloc_scratch(db, &scr) != HS_SUCCESS) {
        rv = -ENOMEM;
        goto out;
    }
    s.spans = x->spans[i];
    if (sample->len > 0 && hs_scan(db, (const char *)sample->data, (unsigned)sample->len, 0, scr,
                                   on_match, &s) == HS_INVALID) {
        rv = -EIO;
        goto out;
    }
    for (size_t k = 0; k < res->n_matches; k++)
        x->spanp[i][k] = &x->spans[i][k];
    res->matches = x->spanp[i];
out:
    hs_free_scratch(scr);
    hs_free_database(db);
    return rv;
}

static void do_regex_match(struct ctl_rpc *r, const Fgx__Ctl__Request *req)
{
    const Fgx__Ctl__RegexMatch *q = req->regex_match;
    bool nocase = q->has_nocase && q->nocase;
    uint8_t ipproto =
        q->has_proto && q->proto == FGX__CTL__PROTO__PROTO_UDP ? IPPROTO_UDP : IPPROTO_TCP;
    struct ctl_rpc_regex *x;

    if (q->n_regex == 0 || q->n_regex > RX_PATTERNS_MAX) {
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID, "regex match: give 1 to %d patterns, not %zu",
                     RX_PATTERNS_MAX, q->n_regex);
        return;
    }
    if (q->sample.len > RX_SAMPLE_MAX) {
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID,
                     "regex match: the sample is %zu bytes, at most %u", q->sample.len,
                     RX_SAMPLE_MAX);
        return;
    }
    x = calloc(1, sizeof(*x));
    if (!x) {
        ctl_rpc_store_fail(r, -ENOMEM);
        return;
    }
    r->regex = x;
    for (size_t i = 0; i < q->n_regex; i++) {
        Fgx__Ctl__RegexMatchResult *res = &x->res[i];
        int rv;

        fgx__ctl__regex_match_result__init(res);
        res->regex = q->regex[i];
        x->resp[i] = res;
        /* the filter's own judgement first: what `filter add` would refuse is refused here in
         * its words, and what it warns about is said */
        if (ctl_config_regex_lint_cached(q->regex[i], nocase, ipproto, &x->warn[i], x->err[i],
                                         sizeof(x->err[i])) < 0) {
            res->error = x->err[i];
            continue;
        }
        for (size_t k = 0; k < x->warn[i].n; k++)
            x->warnp[i][k] = x->warn[i].text[k];
        res->n_warnings = x->warn[i].n;
        res->warnings = x->warnp[i];
        rv = match_one(x, i, q->regex[i], nocase, &q->sample);
        if (rv < 0) {
            ctl_rpc_fail(r, FGX__CTL__CODE__CODE_ERROR, "regex match: %s",
                         rv == -ENOMEM ? "out of memory" : "hyperscan failed to scan");
            return;
        }
    }
    r->reply.n_regex_match = q->n_regex;
    r->reply.regex_match = x->resp;
}

const struct ctl_rpc_cmd ctl_rpc_regex_cmds[] = {
    {FGX__CTL__REQUEST__REQ_REGEX_MATCH, do_regex_match, 0},
    {0, NULL, 0},
};
