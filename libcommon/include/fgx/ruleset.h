/* Rulesets: a service's active filters compiled into hyperscan databases, one per direction.
 * TCP services are compiled in stream mode, UDP services in block mode. Every pattern is
 * compiled with HS_FLAG_DOTALL | HS_FLAG_SINGLEMATCH (and HS_FLAG_CASELESS for nocase); its
 * hyperscan id is the filter id, so a match names its filter directly.
 *
 * The compile half (fgx_ruleset_compile.c) needs libhs and is linked into controld only; the
 * load half (fgx_hsdb.c) needs libhs_runtime and is what the workers use. */
#ifndef FGX_RULESET_H
#define FGX_RULESET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum fgx_dir {
    FGX_DIR_C2S = 1,
    FGX_DIR_S2C = 2,
    FGX_DIR_BOTH = 3,
};

struct fgx_pattern {
    uint32_t filter_id; /* its hyperscan id; with FGX_FILTER_ID_LOG for a log filter */
    const char *regex;  /* borrowed */
    enum fgx_dir dir;
    bool nocase;
};

/* A log filter's hyperscan id is its filter id with this bit set (fgx_pattern.filter_id
 * carries it), so that the match callback tells log from block by the id alone: no table to
 * look up, nothing per flow, and a service with only block filters compiles, caches and scans
 * exactly as before. Filter ids stay below it (controld allocates them from 1 up). */
#define FGX_FILTER_ID_LOG 0x80000000u
/* A filter whose regex was edited in place (`filter set --regex`) keeps its id, but is compiled
 * under its revision too (bits 24..30, the edit count modulo 128), so that an open flow's old
 * stream, which still holds the old regex under that id, is believed only for the revision
 * listed now (fgx_reasm's ids): the old pattern stops blocking at once, on open flows too.
 * Filter ids are below 2^24. */
#define FGX_FILTER_ID_REV 0x7f000000u
#define FGX_FILTER_ID_REV_SHIFT 24
#define FGX_FILTER_ID_MASK 0x00ffffffu

/* The longest regex a filter may have. */
#define FGX_FILTER_REGEX_MAX 65536

/* A filter's label: UTF-8 text of at most this many bytes, no control characters. */
#define FGX_LABEL_MAX 64
/* 0 when s is a valid label (NULL and "" are: no label), else -EINVAL with the reason in err. */
int fgx_label_check(const char *s, char *err, size_t errlen);

/* A serialized database, as stored in LMDB and pushed to workers. */
struct fgx_blob {
    void *data; /* malloc'd, owned by whoever holds the struct; NULL when len == 0 */
    size_t len;
    uint64_t hash; /* fgx_hash64 of the compile input, identifies the database */
};

/* ---- compile side (libhs): controld ---- */

/* What fgx_pattern_lint() says of a pattern that it accepts but that is likely to block honest
 * traffic: up to FGX_PATTERN_WARN_MAX one-line reasons. */
#define FGX_PATTERN_WARN_MAX 4
#define FGX_PATTERN_WARN_LEN 256
/* A pattern that can match this few bytes (or none) is warned about. */
#define FGX_PATTERN_SHORT 2

/* The probe of "matches any stream": a stream (or datagram) of FGX_PATTERN_PROBE_LEN equal
 * bytes, for each of the 256 byte values; a pattern that matches at least FGX_PATTERN_ANY_PCT
 * percent of them, or of the 98 text ones (printable ASCII, tab, CR, LF), matches at the very
 * first bytes of nearly any stream. */
#define FGX_PATTERN_PROBE_LEN 4
#define FGX_PATTERN_ANY_PCT 90

struct fgx_pattern_warnings {
    size_t n;
    char text[FGX_PATTERN_WARN_MAX][FGX_PATTERN_WARN_LEN];
    /* It would block (nearly) every connection whatever it carries: it can match without
     * consuming a byte (\b, ^, (?m)^ ...: every stream has such a place), or it matches the
     * probe above. text[0] says which; controld refuses it as a block filter without --force. */
    bool any_stream;
};

/* Check one pattern as it would be compiled for a service of this IP protocol (IPPROTO_TCP or
 * IPPROTO_UDP). Returns 0, or -EINVAL with the reason in err: hyperscan's message, or fgex's
 * own for what hyperscan accepts but cannot work where fgex uses it (on a TCP stream, a pattern
 * that matches only at the end of the data: the stream never ends while it can be blocked).
 * When w is not NULL it receives the warnings of an accepted pattern (none when refused): it
 * matches any stream (w->any_stream), it can match at most FGX_PATTERN_SHORT bytes, it is
 * anchored at the start of a TCP stream, or part of it needs the end of a TCP stream. */
int fgx_pattern_lint(const char *regex, bool nocase, int ipproto, struct fgx_pattern_warnings *w,
                     char *err, size_t errlen);
/* fgx_pattern_lint() as `filter add` judges a regex, with the message controld replies:
 * "invalid regex \"RE\": REASON" (also "empty regex", "regex longer than N bytes"). Shared by
 * controld and `fgexctl regex test`, so that both refuse the same regexes in the same words. */
int fgx_filter_regex_lint(const char *regex, bool nocase, int ipproto,
                          struct fgx_pattern_warnings *w, char *err, size_t errlen);

/* fgx_pattern_lint() without the warnings. */
int fgx_pattern_check(const char *regex, bool nocase, int ipproto, char *err, size_t errlen);

/* Cache key for the database of one direction: a hash of the mode and of every pattern of that
 * direction (id, flags, text), in order. Two inputs with equal keys compile to equal databases. */
uint64_t fgx_ruleset_key(const struct fgx_pattern *pats, size_t n, enum fgx_dir dir, int ipproto);

/* Compile the patterns of pats[] that apply to dir (C2S or S2C; a BOTH pattern applies to both)
 * into a serialized database in *out (caller owns out->data; free with fgx_blob_release()).
 * No pattern for dir gives out->len == 0 and returns 0. On a compile error returns -EINVAL
 * with hyperscan's message, naming the offending filter id, in err. */
int fgx_ruleset_compile(const struct fgx_pattern *pats, size_t n, enum fgx_dir dir, int ipproto,
                        struct fgx_blob *out, char *err, size_t errlen);

void fgx_blob_release(struct fgx_blob *b);

/* ---- load side (libhs_runtime): workers ---- */

struct hs_database;

/* Deserialize a database. *out is owned by the caller (fgx_hsdb_free()). Returns 0 or -EINVAL
 * with the reason logged (a truncated or foreign blob is refused, never trusted). */
int fgx_hsdb_load(const void *data, size_t len, struct hs_database **out);
void fgx_hsdb_free(struct hs_database *db);

/* 64-bit FNV-1a; used for cache keys and database identity. */
uint64_t fgx_hash64(const void *data, size_t len, uint64_t seed);
#define FGX_HASH64_SEED 0xcbf29ce484222325ULL

#endif
