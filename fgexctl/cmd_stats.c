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
    "       fgexctl stats [SERVICE] --from T [--to T] [--step S] [--json]\n"
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
    "  --from T --to T   the blocks of an exact window (within the last 48 hours), in\n"
    "                    buckets of --step S (whole minutes: 60s, 5m, 1h; default 60s):\n"
    "                    every bucket is printed, a quiet one as 0 and one before the\n"
    "                    service began filtering (its first filter) as '-'; then each\n"
    "                    filter's share of the service's blocks. T: unix seconds, now,\n"
    "                    -DURATION (-30m: that long ago) or YYYY-MM-DDTHH:MM[:SS]Z (UTC);\n"
    "                    --to defaults to now\n"
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

    if (cli_args_opt(raw, CLI_OPT_HISTORY) || cli_args_opt(raw, CLI_OPT_FROM) ||
        cli_args_opt(raw, CLI_OPT_TO) || cli_args_opt(raw, CLI_OPT_STEP))
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
        /* '*': its regex was edited in place, the footnote says when (issue 27) */
        (void)snprintf(label, sizeof(label), "  #%" PRIu32 "%s /%.20s/", s->id,
                       fl && fl->revision > 0 ? "*" : "", rx);
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

/* ---- stats --from T --to T --step S (issue 27) ---- */

/* One service's window: its blocks per bucket, and each of its filters' (nf of them, in the
 * reply's order); filtering: the start of the first bucket that can hold a block (the service
 * began filtering: its first filter's creation, or an earlier block), 0 for never. */
struct win {
    uint64_t from, until, step;
    size_t nb, nf;
    const Fgx__Ctl__Filter **flt;
    uint64_t *svc;  /* [nb] */
    uint64_t *cnt;  /* [nf * nb] */
    uint64_t *ftot; /* [nf] */
    uint64_t total, filtering;
};

static void win_free(struct win *w)
{
    free(w->flt);
    free(w->svc);
    free(w->cnt);
    free(w->ftot);
}

static void win_add(struct win *w, uint64_t *row, const Fgx__Ctl__RateSeries *s, uint64_t *tot,
                    uint64_t *first)
{
    for (size_t k = 0; k < hist_npoints(s); k++) {
        uint64_t t = (uint64_t)s->minutes[k] * 60, v = hist_count(s, k);

        if (v > 0 && (*first == 0 || t < *first))
            *first = t;
        if (t < w->from || t >= w->until)
            continue;
        row[(t - w->from) / w->step] += v;
        *tot += v;
    }
}

static int win_build(const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep,
                     const Fgx__Ctl__Service *sv, struct win *w)
{
    const Fgx__Ctl__StatsHistoryQuery *q = req->stats_history;
    uint64_t first = 0;

    memset(w, 0, sizeof(*w));
    w->from = q->since;
    w->until = q->until;
    w->step = q->step;
    w->nb = (size_t)((w->until - w->from + w->step - 1) / w->step);
    w->flt = calloc(rep->n_filters + 1, sizeof(*w->flt));
    w->svc = calloc(w->nb, sizeof(*w->svc));
    w->ftot = calloc(rep->n_filters + 1, sizeof(*w->ftot));
    w->cnt = calloc((rep->n_filters + 1) * w->nb, sizeof(*w->cnt));
    if (!w->flt || !w->svc || !w->ftot || !w->cnt) {
        win_free(w);
        return -ENOMEM;
    }
    for (size_t i = 0; i < rep->n_filters; i++) {
        const Fgx__Ctl__Filter *fl = rep->filters[i];

        if (fl->service_id != sv->id)
            continue;
        if (fl->has_created && fl->created > 0 && (first == 0 || fl->created < first))
            first = fl->created;
        w->flt[w->nf++] = fl;
    }
    for (size_t i = 0; i < rep->n_rates; i++) {
        const Fgx__Ctl__RateSeries *s = rep->rates[i];
        uint64_t dummy = 0;

        if (strcmp(s->kind, "blocked") != 0 || hist_service_of(s) != sv->id)
            continue;
        if (strcmp(s->obj, "service") == 0) {
            win_add(w, w->svc, s, &w->total, &first);
            continue;
        }
        for (size_t j = 0; j < w->nf; j++)
            if (w->flt[j]->id == s->id)
                win_add(w, &w->cnt[j * w->nb], s, &w->ftot[j], &dummy);
    }
    /* the bucket the first filter (or block) falls in is drawn, the ones before are not */
    w->filtering = first == 0 ? 0 : first - first % 60;
    return 0;
}

/* Whether bucket b can hold a block (it ends after the service began filtering). */
static bool win_live(const struct win *w, size_t b)
{
    return w->filtering != 0 && w->from + (b + 1) * w->step > w->filtering;
}

static void win_time(uint64_t t, char *buf, size_t len)
{
    time_t ts = (time_t)t;
    struct tm tm;

    if (!gmtime_r(&ts, &tm) || strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
        (void)snprintf(buf, len, "%" PRIu64, t);
}

static int human_window(FILE *f, const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep)
{
    const Fgx__Ctl__StatsHistoryQuery *q = req->stats_history;
    char a[32], b[32], rx[64];

    win_time(q->since, a, sizeof(a));
    win_time(q->until, b, sizeof(b));
    (void)fprintf(f, "blocks from %s to %s, %" PRIu32 " s a bucket (UTC)\n", a, b, q->step);
    for (size_t v = 0; v < rep->n_services; v++) {
        const Fgx__Ctl__Service *sv = rep->services[v];
        struct win w;

        if (win_build(req, rep, sv, &w) < 0)
            return -ENOMEM;
        cli_fmt_escape(sv->name, rx, sizeof(rx));
        (void)fprintf(f, "\n%s: %" PRIu64 " blocked", rx, w.total);
        if (w.filtering == 0) {
            (void)fputs(", never filtering (no filter yet)\n", f);
        } else {
            win_time(w.filtering, a, sizeof(a));
            (void)fprintf(f, ", filtering since %s\n", a);
        }
        (void)fprintf(f, "%-20s %8s", "BUCKET", "BLOCKED");
        for (size_t j = 0; j < w.nf; j++) {
            char id[16];

            (void)snprintf(id, sizeof(id), "#%" PRIu32, w.flt[j]->id);
            (void)fprintf(f, " %8s", id);
        }
        (void)fputc('\n', f);
        for (size_t k = 0; k < w.nb; k++) {
            win_time(w.from + k * w.step, a, sizeof(a));
            if (!win_live(&w, k)) {
                (void)fprintf(f, "%-20s %8s  (before the service filtered)\n", a, "-");
                continue;
            }
            (void)fprintf(f, "%-20s %8" PRIu64, a, w.svc[k]);
            for (size_t j = 0; j < w.nf; j++)
                (void)fprintf(f, " %8" PRIu64, w.cnt[j * w.nb + k]);
            (void)fputc('\n', f);
        }
        (void)fputs("share of the blocks:", f);
        for (size_t j = 0; j < w.nf; j++) {
            cli_fmt_escape(w.flt[j]->regex ? w.flt[j]->regex : "", rx, sizeof(rx));
            (void)fprintf(f, "%s #%" PRIu32 " /%.30s/ %.1f%% (%" PRIu64 ")", j ? "," : "",
                          w.flt[j]->id, rx,
                          w.total ? 100.0 * (double)w.ftot[j] / (double)w.total : 0.0,
                          w.ftot[j]);
        }
        (void)fputs(w.nf ? "\n" : " no filter\n", f);
        win_free(&w);
    }
    return ferror(f) ? -EIO : 0;
}

static json_t *json_window(const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep)
{
    const Fgx__Ctl__StatsHistoryQuery *q = req->stats_history;
    json_t *svcs = json_array(), *doc;

    for (size_t v = 0; svcs && v < rep->n_services; v++) {
        const Fgx__Ctl__Service *sv = rep->services[v];
        json_t *bk = json_array(), *fl = json_array(), *o;
        struct win w;

        if (!bk || !fl || win_build(req, rep, sv, &w) < 0) {
            json_decref(bk);
            json_decref(fl);
            json_decref(svcs);
            return NULL;
        }
        for (size_t k = 0; k < w.nb; k++) {
            bool live = win_live(&w, k);
            json_t *per = json_array();

            for (size_t j = 0; per && j < w.nf; j++)
                (void)json_array_append_new(per, live ? json_integer((json_int_t)w.cnt[j * w.nb + k])
                                                      : json_null());
            (void)json_array_append_new(
                bk, json_pack("{s:I, s:o, s:o}", "time", cli_json_int(w.from + k * w.step),
                              "blocked", live ? json_integer((json_int_t)w.svc[k]) : json_null(),
                              "filters", per ? per : json_null()));
        }
        for (size_t j = 0; j < w.nf; j++) {
            json_t *x = json_pack("{s:I, s:I, s:f}", "id", cli_json_int(w.flt[j]->id), "blocked",
                                  cli_json_int(w.ftot[j]), "share",
                                  w.total ? (double)w.ftot[j] / (double)w.total : 0.0);

            if (x)
                (void)cli_json_set_bytes(x, "regex", w.flt[j]->regex,
                                         w.flt[j]->regex ? strlen(w.flt[j]->regex) : 0);
            (void)json_array_append_new(fl, x);
        }
        o = json_pack("{s:I, s:o, s:I, s:o, s:o, s:o}", "id", cli_json_int(sv->id), "name",
                      cli_json_str_or_null(sv->name), "blocked", cli_json_int(w.total),
                      "filtering_since",
                      w.filtering ? json_integer((json_int_t)w.filtering) : json_null(),
                      "filters", fl, "buckets", bk);
        (void)json_array_append_new(svcs, o);
        win_free(&w);
    }
    doc = json_pack("{s:I, s:I, s:I, s:o}", "from", cli_json_int(q->since), "to",
                    cli_json_int(q->until), "step", cli_json_int(q->step), "services", svcs);
    return doc;
}

static int human_history(FILE *f, const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep);

static int human_stats_history(FILE *f, const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep)
{
    if (req->stats_history && req->stats_history->has_step)
        return human_window(f, req, rep);
    return human_history(f, req, rep);
}

static int human_history(FILE *f, const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep)
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
    /* The edits in the window: where a filter's one timeline changes regex. */
    for (size_t i = 0; i < rep->n_filters; i++) {
        const Fgx__Ctl__Filter *fl = rep->filters[i];
        char at[40];

        if (fl->revision == 0 || fl->edited < since)
            continue;
        cli_fmt_time(fl->edited * UINT64_C(1000000000), true, at, sizeof(at));
        (void)fprintf(f, "  #%" PRIu32 "* regex edited at %s (revision %" PRIu32
                         "): its counts before then are its earlier regex's\n",
                      fl->id, at, fl->revision);
    }
    return ferror(f) ? -EIO : 0;
}

static json_t *json_history(const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep);

static json_t *json_stats_history(const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep)
{
    if (req->stats_history && req->stats_history->has_step)
        return json_window(req, rep);
    return json_history(req, rep);
}

static json_t *json_history(const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep)
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
            if (fl) {
                (void)cli_json_set_bytes(o, "regex", fl->regex, strlen(fl->regex));
                /* the regex's last edit in place (issue 27): null when never */
                (void)json_object_set_new(o, "edited", fl->has_edited
                                                           ? json_integer((json_int_t)fl->edited)
                                                           : json_null());
            }
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
     .opts = CLI_OPT_WATCH | CLI_OPT_INTERVAL | CLI_OPT_HISTORY | CLI_OPT_SINCE | CLI_OPT_FROM |
             CLI_OPT_TO | CLI_OPT_STEP,
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
     .opts = CLI_OPT_HISTORY | CLI_OPT_SINCE | CLI_OPT_FROM | CLI_OPT_TO | CLI_OPT_STEP,
     .usage = NULL,
     .pos_optional = true,
     .build = cli_cmd_stats_history_build,
     .human = human_stats_history,
     .json = json_stats_history},
    {.name = NULL},
};

const struct cli_cmd_family cli_cmd_stats = {.group = NULL, .usage = NULL, .cmds = stats_cmds};
