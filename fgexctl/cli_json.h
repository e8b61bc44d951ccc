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
void cli_json_u64(struct cli_json *j, uint64_t v);
void cli_json_i64(struct cli_json *j, int64_t v);
void cli_json_bool(struct cli_json *j, bool v);
void cli_json_null(struct cli_json *j);
/* Ends the document with a newline. */
void cli_json_end(struct cli_json *j);

/* Write s escaped as a JSON string (with its quotes) to f. */
void cli_json_write_string(FILE *f, const char *s);
void cli_json_write_bytes(FILE *f, const void *s, size_t len);

#endif
