/* fgexctl's JSON, through jansson: the few conventions fgexctl adds on top of the library.
 * Output (`--json`, `fgexctl export`): strings that may hold any bytes, regexes and excerpts as
 * a string or base64 (docs/fgexctl.md "Bytes in JSON"), counters as integers, and the printed
 * form (compact, or indented by two for export files). Input (`fgexctl import`): a parse whose
 * errors say "line L, column C", and the position of any value of the tree, so that a file that
 * parses but means something impossible is refused by position too. */
#ifndef CLI_JSON_H
#define CLI_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

/* A counter for json_pack's "I". jansson's integer is a signed 64-bit json_int_t; the counters
 * fgexctl prints (packets, bytes, ids) cannot reach 2^63, so the clamp never bites in practice
 * and only keeps a corrupt value from printing as a negative one. */
static inline json_int_t cli_json_int(uint64_t v)
{
    return v > (uint64_t)INT64_MAX ? (json_int_t)INT64_MAX : (json_int_t)v;
}

/* A new string value for s (NULL: ""). s may hold any bytes: a byte that is not part of valid
 * UTF-8 becomes the character U+0080..U+00FF of the same number, so the document stays valid
 * (strings whose bytes must come back exactly go through cli_json_set_bytes instead). Returns
 * a new reference, or NULL when out of memory. */
json_t *cli_json_str(const char *s);
/* As cli_json_str, or null when s is NULL. */
json_t *cli_json_str_or_null(const char *s);

/* Bytes that must come back exactly (regexes, event excerpts): the member "key": "..." when
 * they are valid UTF-8 (NULs included), else "key_b64": "..." with the bytes in base64
 * (RFC 4648, padded), never both. Any JSON library reads either losslessly, and the usual,
 * readable regex stays a plain string. Returns 0 or -ENOMEM. */
int cli_json_set_bytes(json_t *obj, const char *key, const void *s, size_t len);

/* Print v to f as one line (or, with pretty, indented by two spaces per level) and a newline,
 * members in the order they were set. Control characters are written \u00xx in lower case and
 * DEL as \u007f, as fgexctl always wrote them. Takes over v (NULL, from a failed json_pack:
 * nothing is printed). Returns 0, -ENOMEM or -EIO. */
int cli_json_print(FILE *f, json_t *v, bool pretty);

/* Parse text[0..len) as exactly one JSON value (any type at the top), strictly: duplicate keys
 * are refused, NULs inside strings are kept (json_string_length). On success *out is owned by
 * the caller (json_decref). On -EINVAL err holds "line L, column C: what is wrong", the column
 * counting bytes. Returns 0, -EINVAL or -ENOMEM. */
int cli_json_load(const char *text, size_t len, json_t **out, char *err, size_t errlen);

/* Where each value of a parsed tree starts in the text it was parsed from. */
struct cli_json_pos {
    const char *text; /* borrowed, as is the tree */
    size_t len;
    struct cli_json_pos_ent *ents; /* sorted by value */
    size_t n;
};

/* Index every value of root, parsed by cli_json_load from text[0..len). Returns 0 or -ENOMEM. */
int cli_json_pos_init(struct cli_json_pos *ix, const char *text, size_t len, const json_t *root);
void cli_json_pos_release(struct cli_json_pos *ix);
/* Byte offset of v in the text, and its line and column (1-based, the column counting bytes).
 * true, false and null are one shared value each in jansson: find those by their place with
 * cli_json_pos_in. Returns 0, or -ENOENT when v is not in the tree. */
int cli_json_pos_of(const struct cli_json_pos *ix, const json_t *v, size_t *off, unsigned *line,
                    unsigned *col);
/* As cli_json_pos_of, for the member key of the object in (key not NULL), or item idx of the
 * array in, or (in NULL) the root. */
int cli_json_pos_in(const struct cli_json_pos *ix, const json_t *in, const char *key, size_t idx,
                    unsigned *line, unsigned *col);

/* "number", "string", ... for messages. */
const char *cli_json_type_name(const json_t *v);

/* Base64 (RFC 4648, standard alphabet, '=' padding). cli_b64_encode writes
 * CLI_B64_LEN(len) + 1 bytes (NUL-terminated) to out and returns the length without the NUL.
 * cli_b64_decode is strict: only the alphabet, length a multiple of 4, padding only at the end
 * and unused bits zero, so each byte string has exactly one accepted text; out needs
 * len / 4 * 3 bytes. Returns 0 with *outlen set, or -EINVAL. */
#define CLI_B64_LEN(n) (((n) + 2) / 3 * 4)
size_t cli_b64_encode(const void *in, size_t len, char *out);
int cli_b64_decode(const char *in, size_t len, unsigned char *out, size_t *outlen);

#endif
