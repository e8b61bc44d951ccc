/* fgexctl output stage: a control.proto Reply rendered for a human (aligned tables, key/value
 * blocks) or for a script (one JSON document), with no I/O but the FILE* it is given. Each
 * command's renderers live with its family (cmd.h); what they share is declared here. */
#ifndef CLI_FMT_H
#define CLI_FMT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "control.pb-c.h"

/* Print the result of req carried by rep (code OK, or UNAVAILABLE: stored but unconfirmed) to
 * f, as JSON when json is set. Returns 0, or -EIO when f reports a write error. */
int cli_fmt_reply(FILE *f, const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep, bool json);

/* Print "fgexctl: REASON\n" for a reply whose code is not OK: controld's one-line error with
 * control bytes escaped, or a generic reason for the code when it sent none. */
void cli_fmt_error(FILE *f, const Fgx__Ctl__Reply *rep);
/* One stderr line per warning that the reply's filters carry (filter add and import: the regex
 * was stored but is likely to block honest traffic). */
void cli_fmt_warnings(FILE *f, const Fgx__Ctl__Reply *rep);

/* cli_fmt_error() for a reply to a request sent to url: a refused login-protected request says
 * the whole command to run, `fgexctl -c URL login` (no -c for the default socket). */
void cli_fmt_error_at(FILE *f, const Fgx__Ctl__Reply *rep, const char *url);
/* The same with the options that reach the server spelt out in via ("-C box2", "-c URL", or ""
 * for the default socket). */
void cli_fmt_error_via(FILE *f, const Fgx__Ctl__Reply *rep, const char *via);

enum cli_color {
    CLI_COLOR_NONE,
    CLI_COLOR_ERR,  /* bold red: the "fgexctl:" of an error */
    CLI_COLOR_WARN, /* yellow */
    CLI_COLOR_OK,   /* green */
    CLI_COLOR_BOLD,
    CLI_COLOR_OFF,
};

/* Whether output on fd should be coloured: a terminal, no --json, NO_COLOR unset or empty. */
bool cli_fmt_color_wanted(int fd, bool json);
/* Switch colours on or off for everything cli_fmt prints (off by default). */
void cli_fmt_set_color(bool on);
/* The escape sequence for c, or "" when colours are off. */
const char *cli_fmt_paint(enum cli_color c);

/* fgexctl's exit status (enum cli_exit) for a reply code. */
int cli_fmt_exit_code(Fgx__Ctl__Code code);

/* Copy s to buf (always terminated, truncated to fit), with bytes that are not printable ASCII
 * written as \xNN, so a regex or name cannot garble a terminal. Returns the length the full
 * escaped text needs, as snprintf does. */
size_t cli_fmt_escape(const char *s, char *buf, size_t len);
/* A filter's label as a cell: as is (it is UTF-8 text), "-" when none, escaped if it is not a
 * valid label. */
struct cli_table;
void cli_fmt_table_add_label(struct cli_table *t, const char *label);
/* A filter's action: whether it is log-only, and "block" or "log". */
bool cli_fmt_filter_is_log(const Fgx__Ctl__Filter *fl);
const char *cli_fmt_action_name(const Fgx__Ctl__Filter *fl);

/* "3d 4h 5m 6s", leading zero units left out ("42s", "5m 0s"). */
void cli_fmt_duration(uint64_t secs, char *buf, size_t len);

/* Bytes for a human: "512 B", then one decimal in binary units: "1.5 KiB", "12.0 MiB". */
void cli_fmt_bytes(uint64_t v, char *buf, size_t len);

/* Unix time in ns as ISO-8601 with milliseconds: local time ("2024-05-01T12:34:56.789") or,
 * with utc, UTC marked as such ("2024-05-01T10:34:56.789Z"). */
void cli_fmt_time(uint64_t ns, bool utc, char *buf, size_t len);

/* One filter as a JSON object: the shape every command that prints filters uses; the filters
 * of rep as an array of them. A new reference, or NULL when out of memory. */
json_t *cli_fmt_json_filter(const Fgx__Ctl__Filter *fl);
json_t *cli_fmt_json_filters(const Fgx__Ctl__Reply *rep);

/* ---- for the command families' renderers (cmd.h) ---- */
const char *cli_fmt_proto_name(Fgx__Ctl__Proto p);
const char *cli_fmt_layer_name(Fgx__Ctl__Layer l);
const char *cli_fmt_midstream_name(const Fgx__Ctl__Service *s);
const char *cli_fmt_dir_name(Fgx__Ctl__Dir d);
const char *cli_fmt_yesno(bool b);
/* "any" for the empty address. */
const char *cli_fmt_ip_text(const char *ip);
/* "10.0.0.1:80", or "[fd00::1]:80". */
void cli_fmt_addr_port(const char *ip, uint32_t port, char *buf, size_t len);
/* len bytes escaped as cli_fmt_escape() does, NUL included; malloc'd, owned by the caller. */
char *cli_fmt_escape_bytes_dup(const uint8_t *p, size_t len);

/* "key:      value" lines of a one-object block; kv_str escapes the value. */
void cli_fmt_kv(FILE *f, const char *key, const char *val);
void cli_fmt_kv_u64(FILE *f, const char *key, uint64_t v);
void cli_fmt_kv_str(FILE *f, const char *key, const char *s);

/* An aligned table: cells added row by row, printed at once. */
#define CLI_TABLE_MAX_COLS 12

struct cli_table {
    size_t ncols;
    const char *const *heads;
    unsigned right;     /* bit i: column i is right-aligned (numbers) */
    const size_t *minw; /* NULL, or a width per column that rows printed later can share */
    bool headless;      /* rows only: a later batch of a table already printed */
    char **cells;       /* row-major, malloc'd */
    size_t n, cap;
    bool oom;
};

void cli_fmt_table_init(struct cli_table *t, const char *const *heads, size_t ncols,
                        unsigned right);
/* Takes ownership of cell (NULL records the failure). */
void cli_fmt_table_push(struct cli_table *t, char *cell);
void cli_fmt_table_addf(struct cli_table *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* s escaped for the terminal. */
void cli_fmt_table_add_str(struct cli_table *t, const char *s);
/* An optional counter: "-" when the worker has not reported it. */
void cli_fmt_table_add_opt(struct cli_table *t, bool has, uint64_t v);
void cli_fmt_table_add_bytes(struct cli_table *t, uint64_t v);
/* Returns 0, or -ENOMEM when a cell could not be made. */
int cli_fmt_table_print(FILE *f, struct cli_table *t);
/* The line that says blocks went without an event (a worker's event queue was full), when
 * lost > 0; nothing otherwise. Never silent: events and stats print it. */
void cli_fmt_events_lost(FILE *f, uint64_t lost);
void cli_fmt_table_release(struct cli_table *t);

/* The filters of rep as a table (filter list, service show). Returns 0, -ENOMEM or -EIO. */
int cli_fmt_filter_table(FILE *f, const Fgx__Ctl__Reply *rep);
/* The service or filter a rm removed: from the reply, else the id given on the command line.
 * Returns false when neither says. */
bool cli_fmt_removed_id(const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep, uint32_t *out);
/* {"removed": ID or null}, for service rm and filter rm. */
json_t *cli_fmt_json_removed(const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep);
/* Each item of v[0..n) rendered by fn, as an array; NULL when out of memory. */
json_t *cli_fmt_json_list(void *const *v, size_t n, json_t *(*fn)(const void *));

#endif
