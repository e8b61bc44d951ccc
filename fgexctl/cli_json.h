/* fgexctl output stage: a small streaming JSON writer for `--json`. It tracks commas itself so
 * that cli_fmt.c reads as the shape of the document it prints. */
#ifndef CLI_JSON_H
#define CLI_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define CLI_JSON_MAX_DEPTH 16

struct cli_json {
    FILE *f; /* borrowed */
    int depth;
    bool after_key; /* the next value follows a key: no comma */
    bool pretty;    /* one member per line, indented by two spaces (export files) */
    bool first[CLI_JSON_MAX_DEPTH];
};

void cli_json_init(struct cli_json *j, FILE *f);
void cli_json_obj_begin(struct cli_json *j);
void cli_json_obj_end(struct cli_json *j);
void cli_json_arr_begin(struct cli_json *j);
void cli_json_arr_end(struct cli_json *j);
void cli_json_key(struct cli_json *j, const char *key);
/* s may hold any bytes: quotes, backslashes and control bytes are escaped, valid UTF-8 is kept,
 * and a byte that is not part of valid UTF-8 becomes \u00XX so the document stays valid. NULL is
 * written as "". */
void cli_json_str(struct cli_json *j, const char *s);
/* As cli_json_str, for len bytes that may include NUL (written \u0000). */
void cli_json_bytes(struct cli_json *j, const void *s, size_t len);
/* Bytes that must come back exactly (regexes, event excerpts): the member "key": "..." when
 * they are valid UTF-8 (control bytes escaped, NUL as \u0000), else "key_b64": "..." with the
 * bytes in base64 (RFC 4648, padded), never both. Any JSON library reads either losslessly, and
 * the usual, readable regex stays a plain string. Writes the key itself (no cli_json_key). */
void cli_json_key_bytes(struct cli_json *j, const char *key, const void *s, size_t len);
void cli_json_u64(struct cli_json *j, uint64_t v);
void cli_json_i64(struct cli_json *j, int64_t v);
void cli_json_bool(struct cli_json *j, bool v);
void cli_json_null(struct cli_json *j);
/* Ends the document with a newline. */
void cli_json_end(struct cli_json *j);

/* Write s escaped as a JSON string (with its quotes) to f. */
void cli_json_write_string(FILE *f, const char *s);
void cli_json_write_bytes(FILE *f, const void *s, size_t len);

/* true when s[0..len) is valid UTF-8 as JSON parsers accept it (no overlong forms, surrogates or
 * code points above U+10FFFF). */
bool cli_json_utf8_valid(const void *s, size_t len);

/* Base64 (RFC 4648, standard alphabet, '=' padding). cli_b64_encode writes
 * CLI_B64_LEN(len) + 1 bytes (NUL-terminated) to out and returns the length without the NUL.
 * cli_b64_decode is strict: only the alphabet, length a multiple of 4, padding only at the end
 * and unused bits zero, so each byte string has exactly one accepted text; out needs
 * len / 4 * 3 bytes. Returns 0 with *outlen set, or -EINVAL. */
#define CLI_B64_LEN(n) (((n) + 2) / 3 * 4)
size_t cli_b64_encode(const void *in, size_t len, char *out);
int cli_b64_decode(const char *in, size_t len, unsigned char *out, size_t *outlen);

#endif
