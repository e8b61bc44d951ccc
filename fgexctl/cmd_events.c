/* fgexctl, the events command: the latest blocks, with an excerpt, once or followed
 * (--follow, driven by cli_loop.c). */
#include "cmd.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli_fmt.h"
#include "cli_json.h"
#include "fgx/ruleset.h"
#include "fgx/svcaddr.h"

/* ---- usage ---- */

/* clang-format off */
static const char usage_events[] =
    "usage: fgexctl events [SERVICE] [--limit N] [--follow] [--flags] [--json]\n"
    "       fgexctl events show SEQ [--raw [--dir c2s|s2c]] [--json]\n"
    "\n"
    "`events show SEQ`: one block with what its connection carried, as hex and\n"
    "ASCII per direction (the blocked bytes marked); --raw writes the client's bytes\n"
    "(--dir s2c: the server's) as they are, ready to replay with nc.\n"
    "\n"
    "--flags: only the flag-out events, flags of the game's format (`fgexctl game\n"
    "set`) sent to an address outside the checker's; FILTER says flag-out.\n"
    "\n"
    "The latest blocks (of every service, or only SERVICE), oldest first: the event's\n"
    "SEQ (for `events show SEQ`), when, which service and filter, the direction of\n"
    "the matching bytes, the connection's client (SRC: the attacker, whichever way\n"
    "the bytes went) and service (DST), and the bytes around the end of the match\n"
    "(printable ASCII as is, other bytes as \\xNN).\n"
    "\n"
    "  --limit N    show the newest N events (default: controld's, 100)\n"
    "  --follow     then keep printing new events as they arrive, until interrupted\n"
    "               (Ctrl-C); with --json, one JSON object per line\n"
    "\n"
    "--json without --follow prints an array of {seq, time, time_ns, service_id,\n"
    "service, filter_id, dir, proto, src, sport, dst, dport, excerpt (or excerpt_b64),\n"
    "excerpt_hex, match_end}: the match ends before byte match_end of the excerpt.\n"
    "Blocks whose event was lost (a worker's event queue was full) are said after the\n"
    "table (on stderr with --json). A log filter's match is an event too: FILTER shows\n"
    "it as ID/log (JSON: \"action\": \"log\"; a block's is \"block\"). A filter's label\n"
    "(as the filter has it now) is shown in a LABEL column (with --follow beside the\n"
    "filter id, so that every batch keeps the columns; JSON: \"label\", or null).\n"
    "A script call past its deadline or one that raised is an event too: FILTER\n"
    "shows \"script timeout FUNCTION\" (or exception); JSON: \"action\": \"script\",\n"
    "script_kind and script_function (absent from a filter's match), filter_id 0.\n"
    "A connection a script rejected or dropped is a block: FILTER shows \"script\n"
    "reject FUNCTION\" (or drop), the excerpt is the start of the bytes it judged;\n"
    "JSON: \"action\": \"block\", script_kind \"reject\" or \"drop\", script_function.\n"
    "\n"
    "usage: fgexctl events [SERVICE] --top src [--since DURATION] [--json]\n"
    "\n"
    "Who is attacking: the blocks of the event store (every service, or SERVICE) per\n"
    "client address (the attacker, of an s2c block too) and filter (a script's:\n"
    "\"script FUNCTION\"), the most recent first: SRC, FILTER, LABEL, SERVICE,\n"
    "BLOCKS, FIRST, LAST. controld folds the events it keeps (--events-keep, 100,000 by\n"
    "default) in one request; log matches are not blocks and are not counted.\n"
    "\n"
    "  --since D    only blocks of the last D: 90s, 30m, 2h, 1d (a number alone: seconds)\n"
    "\n"
    "--json prints {events, rows: [{src, filter_id, label, service_id, service, blocks,\n"
    "first, first_ns, last, last_ns}]}: events is how many stored events were read; a\n"
    "script's row has filter_id 0 and script_function.\n"
    "\n" CLI_SERVICE_HELP_NOTE;
/* clang-format on */

/* ---- building the request ---- */

static int build_events(struct cli_cmd *cmd, const struct cli_cmd_def *spec,
                        const struct cli_args_raw *raw)
{
    Fgx__Ctl__EventsQuery *m = &cmd->m.events;
    const char *v;
    int rc;

    fgx__ctl__events_query__init(m);
    /* `events show SEQ`: one block and its capture (cmd_capture.c). A service named "show"
     * is still `events show` alone. */
    if (raw->npos == 2 && strcmp(raw->pos[0], "show") == 0)
        return cli_cmd_event_show_build(cmd, spec, raw);
    if (raw->npos == 2)
        return cli_args_fail_usage(cmd, spec, "one SERVICE at most (or: events show SEQ)");
    if (cli_args_opt(raw, CLI_OPT_RAW) || cli_args_opt(raw, CLI_OPT_DIR))
        return cli_args_fail_usage(cmd, spec, "--raw and --dir go with events show SEQ");
    if (raw->npos > 0) {
        rc = cli_args_check_ref(cmd, spec, raw->pos[0]);
        if (rc < 0)
            return rc;
        m->service = (char *)raw->pos[0];
    }
    if ((v = cli_args_opt(raw, CLI_OPT_LIMIT))) {
        rc = cli_cmd_parse_limit(cmd, v, "events", &m->limit);
        if (rc < 0)
            return rc;
        m->has_limit = 1;
    }
    cmd->follow = cli_args_opt(raw, CLI_OPT_FOLLOW) != NULL;
    if (cli_args_opt(raw, CLI_OPT_FLAGS)) {
        if (cli_args_opt(raw, CLI_OPT_TOP))
            return cli_args_fail_usage(cmd, spec, "--flags does not go with --top");
        m->has_flags = m->flags = 1; /* only flag-out events (the game's, issue 28) */
    }
    if ((v = cli_args_opt(raw, CLI_OPT_TOP))) {
        if (strcmp(v, "src") != 0)
            return cli_args_fail(cmd, CLI_EXIT_INVALID, "invalid --top '%.60s': only src is known",
                                 v);
        if (cmd->follow || m->has_limit)
            return cli_args_fail_usage(cmd, spec, "--top takes neither --follow nor --limit");
        m->top = (char *)v;
    }
    if ((v = cli_args_opt(raw, CLI_OPT_SINCE))) {
        uint64_t secs;
        struct timespec now;

        if (!m->top)
            return cli_args_fail_usage(cmd, spec, "--since goes with --top src");
        if (cli_cmd_parse_duration(v, &secs) < 0)
            return cli_args_fail(cmd, CLI_EXIT_INVALID,
                                 "invalid --since '%.60s': expected a duration such as 90s, 30m, "
                                 "2h or 1d",
                                 v);
        clock_gettime(CLOCK_REALTIME, &now);
        m->has_since_ns = 1;
        m->since_ns = (uint64_t)now.tv_sec * 1000000000ull + (uint64_t)now.tv_nsec;
        m->since_ns = secs * 1000000000ull >= m->since_ns ? 0 : m->since_ns - secs * 1000000000ull;
    }
    cmd->req.events = m;
    return 0;
}

int cli_cmd_parse_limit(struct cli_cmd *cmd, const char *v, const char *what, uint32_t *out)
{
    unsigned long n;

    /* Same digit-only rule as ports: strtoul would take "-1" as a huge number. */
    if (!cli_args_all_digits(v) || strlen(v) > 9 || (n = strtoul(v, NULL, 10)) < 1)
        return cli_args_fail(cmd, CLI_EXIT_INVALID,
                             "invalid --limit '%.60s': expected a number of %s, at least 1", v,
                             what);
    *out = (uint32_t)n;
    return 0;
}

int cli_cmd_parse_duration(const char *s, uint64_t *secs)
{
    uint64_t v = 0, mul = 1;
    size_t n = strlen(s), digits = 0;

    while (digits < n && s[digits] >= '0' && s[digits] <= '9')
        digits++;
    if (digits == 0 || digits > 9)
        return -EINVAL;
    if (n - digits > 1)
        return -EINVAL;
    if (n - digits == 1) {
        switch (s[digits]) {
        case 's':
            mul = 1;
            break;
        case 'm':
            mul = 60;
            break;
        case 'h':
            mul = 3600;
            break;
        case 'd':
            mul = 86400;
            break;
        default:
            return -EINVAL;
        }
    }
    for (size_t i = 0; i < digits; i++)
        v = v * 10 + (uint64_t)(s[i] - '0');
    *secs = v * mul;
    return 0;
}

/* ---- output ---- */

static const char *event_dir(Fgx__Ctl__Dir d)
{
    return d == FGX__CTL__DIR__DIR_S2C ? "s2c" : "c2s";
}

/* Widths that fit most rows, so batches printed apart by --follow line up. */
static const size_t event_minw[] = {5, 23, 10, 6, 3, 21, 21, 0};

static int human_events(FILE *f, const Fgx__Ctl__Reply *rep, bool fixed, bool head)
{
    /* SEQ first: what `events show SEQ` takes. */
    static const char *const heads[] = {"SEQ", "TIME", "SERVICE", "FILTER",
                                        "DIR", "SRC",  "DST",     "EXCERPT"};
    static const char *const lheads[] = {"SEQ", "TIME", "SERVICE", "FILTER", "DIR",
                                         "SRC", "DST",  "LABEL",   "EXCERPT"};
    struct cli_table t;
    char buf[INET6_ADDRSTRLEN * 4 + 16];
    bool labels = false;
    int rc;

    /* A LABEL column only when an event of these has one. Batches of --follow keep one layout
     * (their header is printed once): a label goes into the FILTER cell there instead. */
    for (size_t i = 0; i < rep->n_events && !fixed; i++)
        labels |= rep->events[i]->label && rep->events[i]->label[0];
    if (labels)
        cli_fmt_table_init(&t, lheads, 9, 1u << 0 | 1u << 3);
    else
        cli_fmt_table_init(&t, heads, 8, 1u << 0 | 1u << 3);
    t.minw = fixed ? event_minw : NULL;
    t.headless = !head;
    for (size_t i = 0; i < rep->n_events; i++) {
        const Fgx__Ctl__Event *e = rep->events[i];

        cli_fmt_table_addf(&t, "%" PRIu64, e->seq);
        cli_fmt_time(e->time_ns, false, buf, sizeof(buf));
        cli_fmt_table_addf(&t, "%s", buf);
        if (e->service && *e->service)
            cli_fmt_table_add_str(&t, e->service);
        else
            cli_fmt_table_addf(&t, "%" PRIu32, e->service_id);
        if (e->has_flag_out && e->flag_out)
            cli_fmt_table_addf(&t, "flag-out");
        else if (e->script_kind && e->script_kind[0])
            /* a script call's failure, not a filter's match */
            cli_fmt_table_addf(&t, "script %s %s", e->script_kind,
                               e->script_function && e->script_function[0] ? e->script_function
                                                                           : "-");
        else if (fixed && e->label && e->label[0] &&
                 fgx_label_check(e->label, buf, sizeof(buf)) == 0)
            cli_fmt_table_addf(&t, "%" PRIu32 "%s (%s)", e->filter_id,
                               e->has_log && e->log ? "/log" : "", e->label);
        else
            cli_fmt_table_addf(&t, "%" PRIu32 "%s", e->filter_id,
                               e->has_log && e->log ? "/log" : "");
        /* the stream of an HTTP/2 connection, the edge the client came by (issue 26) */
        {
            char h2[24] = "";

            if (e->has_h2_stream)
                (void)snprintf(h2, sizeof(h2), " h2#%" PRIu32, e->h2_stream);
            cli_fmt_table_addf(&t, "%s%s%s%s", event_dir(e->dir), h2, e->has_edge ? " " : "",
                               e->has_edge ? fgx_edge_name(e->edge) : "");
        }
        cli_fmt_addr_port(e->src, e->sport, buf, sizeof(buf));
        cli_fmt_table_addf(&t, "%s", buf);
        cli_fmt_addr_port(e->dst, e->dport, buf, sizeof(buf));
        cli_fmt_table_addf(&t, "%s", buf);
        if (labels) {
            cli_fmt_table_add_label(&t, e->label);
        }
        cli_fmt_table_push(&t, cli_fmt_escape_bytes_dup(e->has_excerpt ? e->excerpt.data : NULL,
                                                        e->has_excerpt ? e->excerpt.len : 0));
    }
    rc = cli_fmt_table_print(f, &t);
    cli_fmt_table_release(&t);
    return rc;
}

/* Excerpts are at most ~64 bytes (control.proto); a longer one is cut in the hex form only. */
#define EXCERPT_HEX_MAX 1024

/* A script call's failure (timeout, exception): an event, not a block. A script's block has
 * script_kind "reject" or "drop". */
static bool script_failure(const Fgx__Ctl__Event *e)
{
    return e->script_kind && e->script_kind[0] && strcmp(e->script_kind, "reject") != 0 &&
           strcmp(e->script_kind, "drop") != 0;
}

static json_t *json_event(const void *p)
{
    static const char hex[] = "0123456789abcdef";
    const Fgx__Ctl__Event *e = p;
    const uint8_t *x = e->has_excerpt ? e->excerpt.data : NULL;
    size_t xlen = e->has_excerpt ? e->excerpt.len : 0;
    char t[64], h[2 * EXCERPT_HEX_MAX + 1];
    json_t *o;

    cli_fmt_time(e->time_ns, true, t, sizeof(t));
    o = json_pack("{s:I, s:s, s:I, s:I, s:o, s:I, s:s, s:s, s:o, s:I, s:o, s:I}", "seq",
                  cli_json_int(e->seq), "time", t, "time_ns", cli_json_int(e->time_ns),
                  "service_id", cli_json_int(e->service_id), "service",
                  cli_json_str_or_null(e->service), "filter_id", cli_json_int(e->filter_id), "dir",
                  event_dir(e->dir), "proto", cli_fmt_proto_name(e->proto), "src",
                  cli_json_str(e->src), "sport", cli_json_int(e->sport), "dst",
                  cli_json_str(e->dst), "dport", cli_json_int(e->dport));
    /* Hex too, always, for a script that wants one field whatever the bytes. */
    for (size_t i = 0; i < xlen && i < EXCERPT_HEX_MAX; i++) {
        h[2 * i] = hex[x[i] >> 4];
        h[2 * i + 1] = hex[x[i] & 0xf];
    }
    h[2 * (xlen < EXCERPT_HEX_MAX ? xlen : EXCERPT_HEX_MAX)] = '\0';
    if (!o || cli_json_set_bytes(o, "excerpt", x, xlen) < 0 ||
        json_object_set_new(o, "excerpt_hex", json_string(h)) < 0 ||
        (e->has_match_end && json_object_set_new(o, "match_end", json_integer(e->match_end)) < 0) ||
        json_object_set_new(o, "action",
                            json_string(script_failure(e)              ? "script"
                                        : e->has_flag_out && e->flag_out ? "flag-out"
                                        : e->has_log && e->log           ? "log"
                                                                         : "block")) < 0 ||
        json_object_set_new(o, "label",
                            cli_json_str_or_null(e->label && e->label[0] ? e->label : NULL)) < 0) {
        json_decref(o);
        return NULL;
    }
    /* a flag-out's flag, by its hash (absent when not located) */
    if (e->flag_sha256 &&
        (json_object_set_new(o, "flag_sha256", json_string(e->flag_sha256)) < 0 ||
         json_object_set_new(o, "flag_offset", json_integer((json_int_t)e->flag_offset)) < 0)) {
        json_decref(o);
        return NULL;
    }
    /* the HTTP/2 stream of a match in an HTTP service's rendering (absent otherwise) */
    if (e->has_h2_stream && json_object_set_new(o, "h2_stream", json_integer(e->h2_stream)) < 0) {
        json_decref(o);
        return NULL;
    }
    /* the edge of the service's address the client came by, when the address named one */
    if (e->has_edge && json_object_set_new(o, "edge", json_string(fgx_edge_name(e->edge))) < 0) {
        json_decref(o);
        return NULL;
    }
    /* a script's event: absent from a filter's event, whose shape stays as it was */
    if (e->script_kind && e->script_kind[0] &&
        (json_object_set_new(o, "script_kind", json_string(e->script_kind)) < 0 ||
         json_object_set_new(o, "script_function", cli_json_str(e->script_function)) < 0)) {
        json_decref(o);
        return NULL;
    }
    return o;
}

int cli_cmd_events_follow(FILE *f, const Fgx__Ctl__Reply *rep, bool json, bool head)
{
    int rc = 0;

    if (json) {
        for (size_t i = 0; i < rep->n_events && rc == 0; i++)
            rc = cli_json_print(f, json_event(rep->events[i]), false);
    } else if (rep->n_events > 0 || head) {
        rc = human_events(f, rep, true, head);
    }
    if (rc == 0 && (fflush(f) == EOF || ferror(f)))
        rc = -EIO;
    return rc;
}

static int human_top(FILE *f, const Fgx__Ctl__Reply *rep)
{
    static const char *const heads[] = {"SRC",    "FILTER", "LABEL", "SERVICE",
                                        "BLOCKS", "FIRST",  "LAST"};
    struct cli_table t;
    char buf[64];
    int rc;

    if (rep->n_top == 0) {
        (void)fputs("no blocks\n", f);
        return 0;
    }
    cli_fmt_table_init(&t, heads, 7, 1u << 1 | 1u << 4);
    for (size_t i = 0; i < rep->n_top; i++) {
        const Fgx__Ctl__TopRow *r = rep->top[i];

        cli_fmt_table_add_str(&t, r->src);
        if (r->script_function && r->script_function[0])
            cli_fmt_table_addf(&t, "script %s", r->script_function);
        else
            cli_fmt_table_addf(&t, "%" PRIu32, r->filter_id);
        cli_fmt_table_add_label(&t, r->label);
        if (r->service && r->service[0])
            cli_fmt_table_add_str(&t, r->service);
        else
            cli_fmt_table_addf(&t, "%" PRIu32, r->service_id);
        cli_fmt_table_addf(&t, "%" PRIu64, r->blocks);
        cli_fmt_time(r->first_ns, false, buf, sizeof(buf));
        cli_fmt_table_addf(&t, "%s", buf);
        cli_fmt_time(r->last_ns, false, buf, sizeof(buf));
        cli_fmt_table_addf(&t, "%s", buf);
    }
    rc = cli_fmt_table_print(f, &t);
    cli_fmt_table_release(&t);
    return rc;
}

static json_t *json_top_row(const void *p)
{
    const Fgx__Ctl__TopRow *r = p;
    char first[64], last[64];

    json_t *o;

    cli_fmt_time(r->first_ns, true, first, sizeof(first));
    cli_fmt_time(r->last_ns, true, last, sizeof(last));
    o = json_pack("{s:o, s:I, s:o, s:I, s:o, s:I, s:s, s:I, s:s, s:I}", "src", cli_json_str(r->src),
                  "filter_id", cli_json_int(r->filter_id), "label",
                  cli_json_str_or_null(r->label && r->label[0] ? r->label : NULL), "service_id",
                  cli_json_int(r->service_id), "service", cli_json_str_or_null(r->service),
                  "blocks", cli_json_int(r->blocks), "first", first, "first_ns",
                  cli_json_int(r->first_ns), "last", last, "last_ns", cli_json_int(r->last_ns));
    /* a script's blocks (filter_id 0): the function; absent from a filter's row */
    if (o && r->script_function && r->script_function[0] &&
        json_object_set_new(o, "script_function", json_string(r->script_function)) < 0) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static int human_events_reply(FILE *f, const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep)
{
    int rc = 0;

    if (req->events && req->events->top) {
        rc = human_top(f, rep);
        cli_fmt_events_lost(f, rep->events_lost);
        return rc;
    }
    if (rep->n_events == 0)
        (void)fputs("no events\n", f);
    else
        rc = human_events(f, rep, false, true);
    cli_fmt_events_lost(f, rep->events_lost);
    return rc;
}

static json_t *json_events(const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep)
{
    /* The array stays what scripts expect; the loss is said on stderr. */
    cli_fmt_events_lost(stderr, rep->events_lost);
    if (req->events && req->events->top)
        return json_pack("{s:I, s:o}", "events", cli_json_int(rep->top_events), "rows",
                         cli_fmt_json_list((void *const *)rep->top, rep->n_top, json_top_row));
    return cli_fmt_json_list((void *const *)rep->events, rep->n_events, json_event);
}

/* ---- the commands ---- */

static const struct cli_cmd_def events_cmds[] = {
    {.name = "events",
     .req = FGX__CTL__REQUEST__REQ_EVENTS,
     .npos = 2,
     .pos_names = {"SERVICE", "SEQ"},
     .opts = CLI_OPT_LIMIT | CLI_OPT_FOLLOW | CLI_OPT_TOP | CLI_OPT_SINCE | CLI_OPT_RAW | CLI_OPT_DIR |
             CLI_OPT_FLAGS,
     .usage = usage_events,
     .pos_optional = true,
     .build = build_events,
     .human = human_events_reply,
     .json = json_events},
    {.name = NULL},
};

const struct cli_cmd_family cli_cmd_events = {.group = NULL, .usage = NULL, .cmds = events_cmds};

json_t *cli_cmd_event_json(const Fgx__Ctl__Event *e)
{
    return json_event(e);
}
