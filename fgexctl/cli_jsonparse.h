/* fgexctl input stage: a small strict JSON parser (RFC 8259) for `fgexctl import`. It builds a
 * tree that cli_config.c turns into a Config request; every value keeps the line and column it
 * started at, so a file that parses but means something impossible is refused by position too. */
#ifndef CLI_JSONPARSE_H
#define CLI_JSONPARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CLI_JSONPARSE_MAX_DEPTH 64

enum cli_jv_type {
    CLI_JV_NULL,
    CLI_JV_BOOL,
    CLI_JV_NUM,
    CLI_JV_STR,
    CLI_JV_ARR,
    CLI_JV_OBJ,
};

struct cli_jv {
    enum cli_jv_type type;
    unsigned line, col;    /* where the value starts, 1-based; the column counts bytes */
    bool b;                /* BOOL */
    char *s;               /* STR: the decoded UTF-8, NUL-terminated (it may hold NULs: len);
                            * NUM: the literal as written */
    size_t len;            /* STR, NUM: bytes in s */
    /* STR whose text holds \u0080..\u00ff escapes: the same string with each such escape read
     * as the one byte it names, which is what version 1 of `fgexctl export` meant by them (it
     * wrote every byte outside valid UTF-8 that way). NULL otherwise. NUL-terminated. */
    char *legacy;
    size_t legacy_len;
    size_t n;              /* ARR, OBJ: number of items */
    struct cli_jv **items; /* ARR, OBJ: the values, in document order */
    char **keys;           /* OBJ: keys[i] names items[i]; no key appears twice */
};

/* Where and why a parse failed: "line L, column C: MSG". */
struct cli_jerr {
    size_t offset; /* byte offset of the offending byte */
    unsigned line, col;
    char msg[160];
};

/* Parse text[0..len) as exactly one JSON value with nothing but whitespace around it. On
 * success *out is owned by the caller (cli_jv_free). Returns 0, -EINVAL with *err set, or
 * -ENOMEM. Strict: no comments, trailing commas, leading zeros, unescaped control characters,
 * invalid UTF-8, lone surrogates or duplicate keys. */
int cli_jsonparse(const char *text, size_t len, struct cli_jv **out, struct cli_jerr *err);

/* NULL is a no-op. */
void cli_jv_free(struct cli_jv *v);

/* The member of an object named key, or NULL (also when obj is not an object). */
const struct cli_jv *cli_jv_get(const struct cli_jv *obj, const char *key);

/* A number that is a non-negative integer written without fraction or exponent, up to max.
 * Returns 0 or -ERANGE / -EINVAL (not such a number). */
int cli_jv_uint(const struct cli_jv *v, uint64_t max, uint64_t *out);

/* "number", "string", ... for messages. */
const char *cli_jv_type_name(enum cli_jv_type t);

#endif
