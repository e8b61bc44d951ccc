/* Trying a regex on bytes, offline (`fgexctl regex test`): the regex is judged, compiled,
 * serialized and loaded exactly as a filter's is (fgx_filter_regex_lint(), fgx_ruleset_compile()
 * with the filter's flags and mode, fgx_hsdb_load()), then the bytes are scanned as one TCP
 * direction's stream (fed in pieces of any size, as a worker feeds segments) or, for UDP, as
 * one datagram. Compile side: links libhs. */
#ifndef FGX_REGEX_TEST_H
#define FGX_REGEX_TEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fgx/ruleset.h"

#define FGX_REGEX_TEST_BEFORE 64 /* excerpt bytes before the match end, as an event's */
#define FGX_REGEX_TEST_AFTER 32
/* A UDP datagram's payload can be no longer (65535 - 8 - 20). */
#define FGX_REGEX_TEST_DGRAM_MAX 65507

struct fgx_regex_test;

struct fgx_regex_test_match {
    bool matched;
    uint64_t end; /* offset in the input just past the match's last byte */
    /* Up to FGX_REGEX_TEST_BEFORE bytes before the end and FGX_REGEX_TEST_AFTER after it, as
     * far as the input goes; the match ends before excerpt[match_end]. */
    uint8_t excerpt[FGX_REGEX_TEST_BEFORE + FGX_REGEX_TEST_AFTER];
    size_t excerpt_len, match_end;
};

/* Judge and compile regex as a filter of a service of ipproto (IPPROTO_TCP: stream mode,
 * IPPROTO_UDP: block mode). A refused regex gives -EINVAL with the very message `filter add`
 * replies in err; an accepted one its warnings in *w (may be NULL). *out owned by the caller
 * (fgx_regex_test_free()). */
int fgx_regex_test_new(const char *regex, bool nocase, int ipproto, struct fgx_pattern_warnings *w,
                       char *err, size_t errlen, struct fgx_regex_test **out);
void fgx_regex_test_free(struct fgx_regex_test *rt);

/* The next len bytes of the input. TCP: any number of calls, in order; a filter matches once
 * per stream, so the first match is the one kept and later bytes only fill its excerpt. UDP:
 * the whole datagram in one call (a second is -EINVAL, and so is more than
 * FGX_REGEX_TEST_DGRAM_MAX bytes). Returns 0 or -EIO when hyperscan fails (err says why). */
int fgx_regex_test_feed(struct fgx_regex_test *rt, const void *data, size_t len, char *err,
                        size_t errlen);

/* The match (m->matched false: none) after the whole input was fed. */
void fgx_regex_test_result(const struct fgx_regex_test *rt, struct fgx_regex_test_match *m);
uint64_t fgx_regex_test_bytes(const struct fgx_regex_test *rt);

#endif
