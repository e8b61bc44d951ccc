/* fgexctl, the stats command: traffic counters per service, once or redrawn with rates
 * (--watch, driven by cli_loop.c), and `stats --history`'s renderers: blocks and log matches
 * per minute per service and filter, and each service's traffic (bytes each way, connections)
 * per minute. */
#include "cmd.h"

#include <errno.h>
#include <inttypes.h>
#include <langinfo.h>
#include <locale.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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
    "  --history         per minute over the last 48 hours (kept across restarts): blocks\n"
    "                    (and log matches) per service and per filter, and each\n"
    "                    service's traffic: bytes client->server, bytes server->client\n"
    "                    and connections; one sparkline a row, its total and its peak;\n"
    "                    --json gives every minute that had any\n"
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
    for (size_t i = 0; i < rep->n_service_stats; i++)
        if (rep->service_stats[i]->flags_out > 0 || rep->service_stats[i]->flags_to_checker > 0)
            (void)fprintf(f, "%s: flags sent in %" PRIu64 " connection(s) outside the checker "
                          "(flag-out), %" PRIu64 " to the checker\n",
                          rep->service_stats[i]->name, rep->service_stats[i]->flags_out,
                          rep->service_stats[i]->flags_to_checker);
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
    /* the game's flags (issue 28) */
    if (o != NULL && (json_object_set_new(o, "flags_out",
                                          json_integer(cli_json_int(st->flags_out))) < 0 ||
                      json_object_set_new(o, "flags_to_checker",
                                          json_integer(cli_json_int(st->flags_to_checker))) < 0)) {
        json_decref(o);
        return NULL;
    }
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

/* ---- stats --history ---- */

#define SPARK_COLS 60

static const Fgx__Ctl__Service *hist_svc(const Fgx__Ctl__Reply *rep, uint32_t id)
{
    for (size_t i = 0; i < rep->n_services; i++)
        if (rep->services[i]->id == id)
            return rep->services[i];
    return NULL;
}

static const Fgx__Ctl__Filter *hist_flt(const Fgx__Ctl__Reply *rep, uint32_t id)
{
    for (size_t i = 0; i < rep->n_filters; i++)
        if (rep->filters[i]->id == id)
            return rep->filters[i];
    return NULL;
}

/* The byte kinds carry 64-bit counts (counts64), the others 32-bit ones. */
static size_t hist_npoints(const Fgx__Ctl__RateSeries *s)
{
    size_t nc = s->n_counts64 > 0 ? s->n_counts64 : s->n_counts;

    return s->n_minutes < nc ? s->n_minutes : nc;
}

static uint64_t hist_count(const Fgx__Ctl__RateSeries *s, size_t i)
{
    return s->n_counts64 > 0 ? s->counts64[i] : s->counts[i];
}

static bool hist_bytes(const Fgx__Ctl__RateSeries *s)
{
    return strncmp(s->kind, "bytes_", 6) == 0;
}

/* The service a series belongs to. */
static uint32_t hist_service_of(const Fgx__Ctl__RateSeries *s)
{
    return strcmp(s->obj, "filter") == 0 ? s->service_id : s->id;
}

static uint64_t hist_since(const Fgx__Ctl__Request *req, uint64_t now)
{
    const Fgx__Ctl__StatsHistoryQuery *q = req->stats_history;
    uint64_t def = now - 2880 * 60 + 60;

    return q && q->has_since && q->since > def ? q->since : def;
}

static bool hist_utf8(FILE *f)
{
    const char *cs;

    if (!isatty(fileno(f)))
        return false;
    (void)setlocale(LC_CTYPE, "");
    cs = nl_langinfo(CODESET);
    return cs && strcmp(cs, "UTF-8") == 0;
}

/* One row: the series' points binned into SPARK_COLS columns of per minutes each. */
static void hist_spark(FILE *f, const Fgx__Ctl__RateSeries *s, uint32_t first, uint32_t per,
                       bool utf8)
{
    static const char *const blocks[] = {"\u2581", "\u2582", "\u2583", "\u2584",
                                         "\u2585", "\u2586", "\u2587", "\u2588"};
    static const char ramp[] = ".:-=+*#@";
    uint64_t bins[SPARK_COLS] = {0}, max = 0;
    size_t n = hist_npoints(s);

    for (size_t i = 0; i < n; i++) {
        uint64_t v = hist_count(s, i);
        size_t c;

        if (s->minutes[i] < first)
            continue;
        c = (s->minutes[i] - first) / per;
        if (c >= SPARK_COLS)
            c = SPARK_COLS - 1;
        bins[c] = v > UINT64_MAX - bins[c] ? UINT64_MAX : bins[c] + v;
    }
    for (size_t c = 0; c < SPARK_COLS; c++)
        if (bins[c] > max)
            max = bins[c];
    for (size_t c = 0; c < SPARK_COLS; c++) {
        double x;
        size_t lvl;

        if (bins[c] == 0) {
            (void)fputc(' ', f);
            continue;
        }
        /* 0..7 (in doubles: byte counts times 8 could pass 64 bits); any count shows */
        x = (double)bins[c] * 8 / (double)max;
        lvl = x <= 1 ? 0 : x >= 8 ? 7 : (size_t)(x + 0.999999) - 1;
        if (utf8)
            (void)fputs(blocks[lvl], f);
        else
            (void)fputc(ramp[lvl], f);
    }
}

/* A total or peak: bytes in binary units for the byte kinds. */
static void hist_num(const Fgx__Ctl__RateSeries *s, uint64_t v, char *buf, size_t len)
{
    if (hist_bytes(s))
        cli_fmt_bytes(v, buf, len);
    else
        (void)snprintf(buf, len, "%" PRIu64, v);
}

static void hist_row(FILE *f, const Fgx__Ctl__Reply *rep, const Fgx__Ctl__RateSeries *s,
                     uint32_t first, uint32_t per, bool utf8)
{
    char label[96], rx[64], tot[32], pk[32];
    uint64_t total = 0, peak = 0;
    size_t n = hist_npoints(s);

    for (size_t k = 0; k < n; k++) {
        uint64_t v = hist_count(s, k);

        total = v > UINT64_MAX - total ? UINT64_MAX : total + v;
        if (v > peak)
            peak = v;
    }
    if (strcmp(s->obj, "filter") == 0) {
        const Fgx__Ctl__Filter *fl = hist_flt(rep, s->id);

        cli_fmt_escape(fl && fl->regex ? fl->regex : "", rx, sizeof(rx));
        (void)snprintf(label, sizeof(label), "  #%" PRIu32 " /%.20s/", s->id, rx);
    } else {
        const Fgx__Ctl__Service *sv = hist_svc(rep, s->id);

        cli_fmt_escape(sv ? sv->name : "?", rx, sizeof(rx));
        (void)snprintf(label, sizeof(label), "%s", rx);
    }
    if (strcmp(s->kind, "bytes_c2s") == 0)
        (void)snprintf(label + strlen(label), sizeof(label) - strlen(label), " bytes c->s");
    else if (strcmp(s->kind, "bytes_s2c") == 0)
        (void)snprintf(label + strlen(label), sizeof(label) - strlen(label), " bytes s->c");
    else if (strcmp(s->kind, "flows") == 0)
        (void)snprintf(label + strlen(label), sizeof(label) - strlen(label), " connections");
    else if (strcmp(s->kind, "blocked") != 0)
        (void)snprintf(label + strlen(label), sizeof(label) - strlen(label), " (%s)", s->kind);
    hist_num(s, total, tot, sizeof(tot));
    hist_num(s, peak, pk, sizeof(pk));
    (void)fprintf(f, "%-28.28s %10s %10s  |", label, tot, pk);
    hist_spark(f, s, first, per, utf8);
    (void)fputs("|\n", f);
}

static int human_stats_history(FILE *f, const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep)
{
    uint64_t now = (uint64_t)time(NULL), since = hist_since(req, now);
    uint32_t first = (uint32_t)(since / 60), last = (uint32_t)(now / 60);
    uint32_t span = last - first + 1, per = (span + SPARK_COLS - 1) / SPARK_COLS;
    bool utf8 = hist_utf8(f);
    time_t ts = (time_t)since;
    char when[32];
    struct tm tm;

    if (per == 0)
        per = 1;
    if (!gmtime_r(&ts, &tm) || strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", &tm) == 0)
        (void)snprintf(when, sizeof(when), "%" PRIu64, since);
    (void)fprintf(f, "per minute since %s UTC, %" PRIu32 " min a column, now at the right\n", when,
                  per);
    if (rep->n_rates == 0) {
        (void)fputs("no blocks and no traffic in that time\n", f);
        return ferror(f) ? -EIO : 0;
    }
    (void)fprintf(f, "%-28s %10s %10s  |%-*s|\n", "SERVICE / FILTER", "TOTAL", "PEAK/MIN",
                  SPARK_COLS, "");
    /* A service's rows together: its blocks, its filters', its traffic. */
    for (size_t v = 0; v < rep->n_services; v++)
        for (size_t i = 0; i < rep->n_rates; i++)
            if (hist_service_of(rep->rates[i]) == rep->services[v]->id)
                hist_row(f, rep, rep->rates[i], first, per, utf8);
    for (size_t i = 0; i < rep->n_rates; i++)
        if (!hist_svc(rep, hist_service_of(rep->rates[i])))
            hist_row(f, rep, rep->rates[i], first, per, utf8);
    return ferror(f) ? -EIO : 0;
}

static json_t *json_stats_history(const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep)
{
    uint64_t now = (uint64_t)time(NULL);
    json_t *arr = json_array(), *doc;

    if (!arr)
        return NULL;
    for (size_t i = 0; i < rep->n_rates; i++) {
        const Fgx__Ctl__RateSeries *s = rep->rates[i];
        json_t *pts = json_array(), *o;
        size_t n = hist_npoints(s);
        uint64_t total = 0;

        for (size_t k = 0; k < n; k++) {
            (void)json_array_append_new(pts, json_pack("{s:I, s:I}", "time",
                                                       cli_json_int((uint64_t)s->minutes[k] * 60),
                                                       "count", cli_json_int(hist_count(s, k))));
            total += hist_count(s, k);
        }
        o = json_pack("{s:s, s:s, s:I, s:I, s:o}", "kind", s->kind, "obj", s->obj, "id",
                      cli_json_int(s->id), "total", cli_json_int(total), "minutes", pts);
        if (!o) {
            json_decref(arr);
            return NULL;
        }
        if (strcmp(s->obj, "filter") == 0) {
            const Fgx__Ctl__Filter *fl = hist_flt(rep, s->id);

            (void)json_object_set_new(o, "service_id", json_integer(cli_json_int(s->service_id)));
            if (fl)
                (void)cli_json_set_bytes(o, "regex", fl->regex, strlen(fl->regex));
        } else {
            const Fgx__Ctl__Service *sv = hist_svc(rep, s->id);

            (void)json_object_set_new(o, "name", cli_json_str_or_null(sv ? sv->name : NULL));
        }
        (void)json_array_append_new(arr, o);
    }
    doc = json_pack("{s:I, s:I, s:o}", "since", cli_json_int(hist_since(req, now) / 60 * 60),
                    "until", cli_json_int(now), "series", arr);
    return doc;
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
    /* `stats --history`: parsed as `stats` above (cli_cmd_stats_history_build in cmd_history.c
     * switches the request), rendered from here (cli_cmd_of_req finds this entry). */
    {.name = "stats",
     .req = FGX__CTL__REQUEST__REQ_STATS_HISTORY,
     .npos = 1,
     .pos_names = {"SERVICE"},
     .opts = CLI_OPT_HISTORY | CLI_OPT_SINCE,
     .usage = NULL,
     .pos_optional = true,
     .build = cli_cmd_stats_history_build,
     .human = human_stats_history,
     .json = json_stats_history},
    {.name = NULL},
};

const struct cli_cmd_family cli_cmd_stats = {.group = NULL, .usage = NULL, .cmds = stats_cmds};
