/* fgexctl, the stats command: traffic counters per service, once or redrawn with rates
 * (--watch, driven by cli_loop.c). */
#include "cmd.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cli_fmt.h"
#include "cli_json.h"

/* ---- usage ---- */

/* clang-format off */
static const char usage_stats[] =
    "usage: fgexctl stats [SERVICE] [--json] [--watch [--interval SEC]]\n"
    "       fgexctl stats --history [SERVICE] [--since DURATION] [--json]\n"
    "\n"
    "Traffic counters per service (every service, or only SERVICE): packets and bytes\n"
    "seen, packets accepted and dropped, flows open now, and connections blocked.\n"
    "Totals survive worker and controld restarts.\n"
    "\n"
    "  --watch           redraw every SEC seconds with the rate per second beside each\n"
    "                    total, until interrupted (Ctrl-C); with --json, print one JSON\n"
    "                    document per line per refresh instead\n"
    "  --interval SEC    the refresh period for --watch (default: 1; e.g. 0.5)\n"
    "  --history         blocks per minute, per service and per filter, over the last\n"
    "                    48 hours (kept across restarts): one sparkline a row, its\n"
    "                    total and its peak; --json gives every minute that had any\n"
    "  --since DURATION  --history from this long ago (90s, 30m, 1h, 2d; default 48h)\n"
    "\n"
    "The table shows bytes in binary units (KiB, MiB, ...); --json gives exact numbers:\n"
    "an array of {id, name, packets, bytes, accepted, dropped, flows_active, blocked,\n"
    "blocked_removed, events_lost}. flows_active counts connections open now (not the\n"
    "blocked or closed ones the worker still tracks); blocked never goes down: it keeps\n"
    "the blocks of removed filters (blocked_removed of them). Blocks whose event was lost (a worker's event queue was full) are\n"
    "counted in events_lost and said under the table.\n"
    "\n" CLI_SERVICE_HELP_NOTE;
/* clang-format on */

/* ---- building the request ---- */

/* Seconds, with a fraction ("0.5"), to milliseconds within the bounds --watch accepts. */
static int parse_interval(struct cli_cmd *cmd, const char *s, unsigned *out)
{
    char *end;
    double v;

    errno = 0;
    v = strtod(s, &end);
    /* strtod would also take "inf", "nan", hex floats and leading blanks. */
    if (!*s || *end || errno || s[strspn(s, "0123456789.")] != '\0' ||
        v * 1000 < CLI_WATCH_MIN_MS || v * 1000 > CLI_WATCH_MAX_MS)
        return cli_args_fail(cmd, CLI_EXIT_INVALID,
                             "invalid --interval '%.60s': expected seconds, from 0.1 to 86400", s);
    *out = (unsigned)(v * 1000 + 0.5);
    return 0;
}

static int build_stats(struct cli_cmd *cmd, const struct cli_cmd_def *spec,
                       const struct cli_args_raw *raw)
{
    Fgx__Ctl__StatsQuery *m = &cmd->m.stats;
    const char *v;
    int rc;

    if (cli_args_opt(raw, CLI_OPT_HISTORY))
        return cli_cmd_stats_history_build(cmd, spec, raw);
    if (cli_args_opt(raw, CLI_OPT_SINCE))
        return cli_args_fail_usage(cmd, spec, "--since goes with --history");
    fgx__ctl__stats_query__init(m);
    if (raw->npos > 0) {
        rc = cli_args_check_ref(cmd, spec, raw->pos[0]);
        if (rc < 0)
            return rc;
        m->service = (char *)raw->pos[0];
    }
    cmd->watch = cli_args_opt(raw, CLI_OPT_WATCH) != NULL;
    cmd->interval_ms = CLI_WATCH_MS;
    if ((v = cli_args_opt(raw, CLI_OPT_INTERVAL))) {
        if (!cmd->watch)
            return cli_args_fail_usage(cmd, spec, "--interval goes with --watch");
        rc = parse_interval(cmd, v, &cmd->interval_ms);
        if (rc < 0)
            return rc;
    }
    cmd->req.stats = m;
    return 0;
}

/* ---- output ---- */

static int human_stats_table(FILE *f, const Fgx__Ctl__Reply *rep)
{
    static const char *const heads[] = {"SERVICE", "PACKETS", "BYTES",   "ACCEPTED",
                                        "DROPPED", "FLOWS",   "BLOCKED", "MATCHED"};
    struct cli_table t;
    bool matched = false;
    int rc;

    if (rep->n_service_stats == 0) {
        (void)fputs("no services (add one with 'fgexctl service add')\n", f);
        return 0;
    }
    /* MATCHED (log filters' matches) only once a service has some. */
    for (size_t i = 0; i < rep->n_service_stats; i++)
        matched |= rep->service_stats[i]->matched > 0;
    cli_fmt_table_init(&t, heads, matched ? 8 : 7, 0xfeu);
    for (size_t i = 0; i < rep->n_service_stats; i++) {
        const Fgx__Ctl__ServiceStats *st = rep->service_stats[i];

        cli_fmt_table_add_str(&t, st->name);
        cli_fmt_table_addf(&t, "%" PRIu64, st->packets);
        cli_fmt_table_add_bytes(&t, st->bytes);
        cli_fmt_table_addf(&t, "%" PRIu64, st->accepted);
        cli_fmt_table_addf(&t, "%" PRIu64, st->dropped);
        cli_fmt_table_addf(&t, "%" PRIu64, st->flows_active);
        cli_fmt_table_addf(&t, "%" PRIu64, st->blocked);
        if (matched)
            cli_fmt_table_addf(&t, "%" PRIu64, st->matched);
    }
    rc = cli_fmt_table_print(f, &t);
    cli_fmt_table_release(&t);
    cli_fmt_events_lost(f, rep->events_lost);
    for (size_t i = 0; i < rep->n_service_stats; i++)
        if (rep->service_stats[i]->has_tls_failed && rep->service_stats[i]->tls_failed > 0)
            (void)fprintf(f, "%s: %" PRIu64 " TLS handshake(s) failed or timed out\n",
                          rep->service_stats[i]->name, rep->service_stats[i]->tls_failed);
    return rc;
}

static json_t *json_stats_one(const void *p)
{
    const Fgx__Ctl__ServiceStats *st = p;
    json_t *o;

    o = json_pack("{s:I, s:o, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "id",
                     cli_json_int(st->service_id), "name", cli_json_str(st->name), "packets",
                     cli_json_int(st->packets), "bytes", cli_json_int(st->bytes), "accepted",
                     cli_json_int(st->accepted), "dropped", cli_json_int(st->dropped),
                     "flows_active", cli_json_int(st->flows_active), "blocked",
                     cli_json_int(st->blocked), "blocked_removed",
                     cli_json_int(st->blocked_removed), "events_lost",
                     cli_json_int(st->events_lost), "matched", cli_json_int(st->matched));
    /* TLS services only: handshakes failed or stalled. */
    if (o != NULL && st->has_tls_failed &&
        json_object_set_new(o, "tls_failed", json_integer(cli_json_int(st->tls_failed))) < 0) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static const Fgx__Ctl__ServiceStats *stats_find(const Fgx__Ctl__Reply *rep, uint32_t id)
{
    for (size_t i = 0; rep && i < rep->n_service_stats; i++)
        if (rep->service_stats[i]->service_id == id)
            return rep->service_stats[i];
    return NULL;
}

/* The per-second rate from *then to now; "-" when there is none to show: no earlier sample
 * (then NULL), or a counter that went back (the service was removed and its id reused). */
static void table_add_rate(struct cli_table *t, uint64_t now, const uint64_t *then, double secs,
                           bool bytes)
{
    char b[32];
    double r;

    if (!then || secs <= 0 || now < *then) {
        cli_fmt_table_addf(t, "-");
        return;
    }
    r = (double)(now - *then) / secs;
    if (bytes) {
        cli_fmt_bytes((uint64_t)(r + 0.5), b, sizeof(b));
        cli_fmt_table_addf(t, "%s/s", b);
    } else {
        cli_fmt_table_addf(t, "%.0f", r);
    }
}

#define OLD(field) (old ? &old->field : NULL)

int cli_cmd_stats_watch(FILE *f, const Fgx__Ctl__Reply *cur, const Fgx__Ctl__Reply *prev,
                        double secs)
{
    static const char *const heads[] = {"SERVICE", "PACKETS",  "PKT/S",   "BYTES",
                                        "BYTES/S", "ACCEPTED", "ACC/S",   "DROPPED",
                                        "DROP/S",  "FLOWS",    "BLOCKED", "BLK/S"};
    struct cli_table t;
    int rc;

    if (cur->n_service_stats == 0) {
        (void)fputs("no services (add one with 'fgexctl service add')\n", f);
        return 0;
    }
    cli_fmt_table_init(&t, heads, 12, 0xffeu);
    for (size_t i = 0; i < cur->n_service_stats; i++) {
        const Fgx__Ctl__ServiceStats *st = cur->service_stats[i];
        const Fgx__Ctl__ServiceStats *old = stats_find(prev, st->service_id);

        cli_fmt_table_add_str(&t, st->name);
        cli_fmt_table_addf(&t, "%" PRIu64, st->packets);
        table_add_rate(&t, st->packets, OLD(packets), secs, false);
        cli_fmt_table_add_bytes(&t, st->bytes);
        table_add_rate(&t, st->bytes, OLD(bytes), secs, true);
        cli_fmt_table_addf(&t, "%" PRIu64, st->accepted);
        table_add_rate(&t, st->accepted, OLD(accepted), secs, false);
        cli_fmt_table_addf(&t, "%" PRIu64, st->dropped);
        table_add_rate(&t, st->dropped, OLD(dropped), secs, false);
        cli_fmt_table_addf(&t, "%" PRIu64, st->flows_active);
        cli_fmt_table_addf(&t, "%" PRIu64, st->blocked);
        table_add_rate(&t, st->blocked, OLD(blocked), secs, false);
    }
    rc = cli_fmt_table_print(f, &t);
    cli_fmt_table_release(&t);
    if (rc == 0 && (fflush(f) == EOF || ferror(f)))
        rc = -EIO;
    return rc;
}

static int human_stats(FILE *f, const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep)
{
    (void)req;
    return human_stats_table(f, rep);
}

static json_t *json_stats(const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep)
{
    (void)req;
    return cli_fmt_json_list((void *const *)rep->service_stats, rep->n_service_stats,
                             json_stats_one);
}

/* ---- the commands ---- */

static const struct cli_cmd_def stats_cmds[] = {
    {.name = "stats",
     .req = FGX__CTL__REQUEST__REQ_STATS,
     .npos = 1,
     .pos_names = {"SERVICE"},
     .opts = CLI_OPT_WATCH | CLI_OPT_INTERVAL | CLI_OPT_HISTORY | CLI_OPT_SINCE,
     .usage = usage_stats,
     .pos_optional = true,
     .build = build_stats,
     .human = human_stats,
     .json = json_stats},
    {.name = NULL},
};

const struct cli_cmd_family cli_cmd_stats = {.group = NULL, .usage = NULL, .cmds = stats_cmds};
