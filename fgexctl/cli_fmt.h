/* fgexctl output stage: a control.proto Reply rendered for a human (aligned tables, key/value
 * blocks) or for a script (one JSON document), with no I/O but the FILE* it is given. */
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

/* "3d 4h 5m 6s", leading zero units left out ("42s", "5m 0s"). */
void cli_fmt_duration(uint64_t secs, char *buf, size_t len);

/* Bytes for a human: "512 B", then one decimal in binary units: "1.5 KiB", "12.0 MiB". */
void cli_fmt_bytes(uint64_t v, char *buf, size_t len);

/* Unix time in ns as ISO-8601 with milliseconds: local time ("2024-05-01T12:34:56.789") or,
 * with utc, UTC marked as such ("2024-05-01T10:34:56.789Z"). */
void cli_fmt_time(uint64_t ns, bool utc, char *buf, size_t len);

/* `stats --watch`, one refresh: the stats table of cur with, beside each total, its rate per
 * second since prev, taken secs earlier ("-" where prev is NULL or has no such service).
 * Returns 0, -ENOMEM or -EIO. */
int cli_fmt_stats_watch(FILE *f, const Fgx__Ctl__Reply *cur, const Fgx__Ctl__Reply *prev,
                        double secs);

/* `events --follow`, one batch: the events of rep as table rows of fixed minimum widths (so
 * batches line up; the header first when head is set), or one JSON object per line. Returns 0,
 * -ENOMEM or -EIO. */
int cli_fmt_events_follow(FILE *f, const Fgx__Ctl__Reply *rep, bool json, bool head);

/* One filter as a JSON object: the shape every command that prints filters uses; the filters
 * of rep as an array of them. A new reference, or NULL when out of memory. */
json_t *cli_fmt_json_filter(const Fgx__Ctl__Filter *fl);
json_t *cli_fmt_json_filters(const Fgx__Ctl__Reply *rep);

#endif
