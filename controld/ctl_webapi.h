/* controld's web API: /api/cmd/PATH is fgexctl's command PATH ("filter/add"), run through the
 * very code fgexctl runs it with (its command table, fgexctl/cmd.h, in build/libcli.a): the
 * request is built by the command's own builder from a JSON object of parameters instead of
 * argv, and the reply printed by fgexctl's own --json printer, so the two cannot drift apart
 * (docs/web.md "Commands"). Pure functions: no I/O, no threads, no state but the table, which
 * is built once. Files a command reads come from the parameters; nothing is opened. */
#ifndef CTL_WEBAPI_H
#define CTL_WEBAPI_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* One command of the API: a fgexctl command (wraps its const struct cli_cmd_def *). */
struct ctl_webapi_cmd;

/* The command that /api/cmd/PATH names (PATH: "filter/add", "fw/rule/add", "events"), or
 * NULL: unknown, or one of fgexctl's local commands, which the API has not (docs/web.md). */
const struct ctl_webapi_cmd *ctl_webapi_find(const char *path);
/* The command changes nothing (a GET may run it). */
bool ctl_webapi_read_only(const struct ctl_webapi_cmd *c);
/* It changes services/filters/fw/scripts (what the live `change` event names; NULL: nothing). */
const char *ctl_webapi_changes(const struct ctl_webapi_cmd *c);

/* Build the serialized control.proto Request for c from params (a JSON object: docs/web.md
 * "Parameters"; a GET's query string arrives as an object of strings, "true" for a flag),
 * with token (the session token, may be NULL) in Request.token. On success 0 and *req, *reqlen
 * (malloc'd). On a bad parameter -EINVAL with *status 400 and *err the reply body
 * {"error": "...", "exit": 2 or 4} (a new reference), as fgexctl would refuse it. */
int ctl_webapi_request(const struct ctl_webapi_cmd *c, const json_t *params, const char *token,
                       void **req, size_t *reqlen, int *status, json_t **err);

/* The HTTP reply for controld's serialized Reply rep to the request req built above: *status
 * (200, or the error mapping of docs/web.md), *ctype ("application/json", or for downloads
 * "application/vnd.tcpdump.pcap" / "application/octet-stream"), *body, *bodylen malloc'd: the
 * JSON exactly as `fgexctl --json` prints it for that command (one line), or the download's
 * bytes. *disposition: NULL or a Content-Disposition value (malloc'd). Returns 0 or -ENOMEM. */
int ctl_webapi_reply(const struct ctl_webapi_cmd *c, const void *req, size_t reqlen,
                     const void *rep, size_t replen, int *status, const char **ctype,
                     void **body, size_t *bodylen, char **disposition);

/* For /api/live (websrv builds the requests itself, runs them in the control loop): one event of
 * an events Reply as `fgexctl --json events --follow` prints it; a stats Reply as
 * `fgexctl --json stats` prints it; a script log entry as `script log --follow --json` does.
 * New references, NULL when out of memory. */
json_t *ctl_webapi_event_json(const void *event /* const Fgx__Ctl__Event * */);
json_t *ctl_webapi_stats_json(const void *rep, size_t replen);
json_t *ctl_webapi_script_log_json(const void *entry /* const Fgx__Ctl__ScriptLogEntry * */);
/* One health log entry as `service log --follow --json` prints it (the page's `health`). */
json_t *ctl_webapi_health_json(const void *entry /* const Fgx__Ctl__HealthEntry * */);

/* ---- for the tests and the documentation ---- */
/* The i-th command of the API in table order (NULL past the end), its PATH, and the web names
 * of its positional parameters (NULL past its number). */
const struct ctl_webapi_cmd *ctl_webapi_at(size_t i);
const char *ctl_webapi_path(const struct ctl_webapi_cmd *c);
const char *ctl_webapi_pos_name(const struct ctl_webapi_cmd *c, int i);
/* The HTTP status for fgexctl's exit status (docs/web.md): busy is an error that says so. */
int ctl_webapi_http_status(int exit_code, bool busy);

#endif
