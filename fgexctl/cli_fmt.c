/* fgexctl output stage: what controld replied, printed. Humans get aligned tables and
 * key/value blocks with every string escaped for the terminal; `--json` gets one document
 * whose shape is fixed per command (docs/fgexctl.md), for scripts. */
#include "cli_fmt.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli_args.h"
#include "cli_json.h"

/* ---- small conversions ------------------------------------------------------------------- */

static const char *proto_name(Fgx__Ctl__Proto p)
{
    return p == FGX__CTL__PROTO__PROTO_UDP ? "udp" : "tcp";
}

static const char *layer_name(Fgx__Ctl__Layer l)
{
    return l == FGX__CTL__LAYER__LAYER_PROXY ? "proxy" : "nfqueue";
}

/* Absent (an older controld): that controld knew no other policy than scanning on. */
static const char *midstream_name(const Fgx__Ctl__Service *s)
{
    if (!s->has_midstream)
        return "scan";
    return s->midstream == FGX__CTL__MIDSTREAM__MIDSTREAM_SCAN ? "scan" : "reset";
}

static const char *dir_name(Fgx__Ctl__Dir d)
{
    switch (d) {
    case FGX__CTL__DIR__DIR_C2S:
        return "c2s";
    case FGX__CTL__DIR__DIR_S2C:
        return "s2c";
    default:
        return "both";
    }
}

/* ANSI colours, set once by main for a terminal (never for --json or with NO_COLOR). */
static bool use_color;

void cli_fmt_set_color(bool on)
{
    use_color = on;
}

bool cli_fmt_color_wanted(int fd, bool json)
{
    const char *nc = getenv("NO_COLOR");

    return !json && !(nc && *nc) && isatty(fd) == 1;
}

const char *cli_fmt_paint(enum cli_color c)
{
    static const char *const codes[] = {"",         "\033[1;31m", "\033[33m",
                                        "\033[32m", "\033[1m",    "\033[0m"};

    return use_color ? codes[c] : "";
}

static const char *yesno(bool b)
{
    return b ? "yes" : "no";
}

int cli_fmt_exit_code(Fgx__Ctl__Code code)
{
    switch (code) {
    case FGX__CTL__CODE__CODE_OK:
        return CLI_EXIT_OK;
    case FGX__CTL__CODE__CODE_INVALID:
        return CLI_EXIT_INVALID;
    case FGX__CTL__CODE__CODE_NOT_FOUND:
        return CLI_EXIT_NOT_FOUND;
    case FGX__CTL__CODE__CODE_EXISTS:
        return CLI_EXIT_EXISTS;
    case FGX__CTL__CODE__CODE_UNAVAILABLE:
        return CLI_EXIT_UNAVAILABLE;
    case FGX__CTL__CODE__CODE_AUTH:
        return CLI_EXIT_AUTH;
    default:
        return CLI_EXIT_ERROR;
    }
}

size_t cli_fmt_escape(const char *s, char *buf, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    size_t n = 0;

    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        char tmp[4];
        size_t k = 0;

        if (*p >= 0x20 && *p < 0x7f) {
            tmp[k++] = (char)*p;
        } else {
            tmp[k++] = '\\';
            tmp[k++] = 'x';
            tmp[k++] = hex[*p >> 4];
            tmp[k++] = hex[*p & 0xf];
        }
        for (size_t i = 0; i < k; i++, n++)
            if (len > 0 && n < len - 1)
                buf[n] = tmp[i];
    }
    if (len > 0)
        buf[n < len ? n : len - 1] = '\0';
    return n;
}

/* The escaped copy of s, malloc'd and owned by the caller; NULL when out of memory. */
static char *escape_dup(const char *s)
{
    size_t need = cli_fmt_escape(s, NULL, 0) + 1;
    char *buf = malloc(need);

    if (buf)
        cli_fmt_escape(s, buf, need);
    return buf;
}

void cli_fmt_duration(uint64_t secs, char *buf, size_t len)
{
    uint64_t d = secs / 86400, h = secs / 3600 % 24, m = secs / 60 % 60, s = secs % 60;

    if (d)
        (void)snprintf(buf, len, "%" PRIu64 "d %" PRIu64 "h %" PRIu64 "m %" PRIu64 "s", d, h, m, s);
    else if (h)
        (void)snprintf(buf, len, "%" PRIu64 "h %" PRIu64 "m %" PRIu64 "s", h, m, s);
    else if (m)
        (void)snprintf(buf, len, "%" PRIu64 "m %" PRIu64 "s", m, s);
    else
        (void)snprintf(buf, len, "%" PRIu64 "s", s);
}

void cli_fmt_bytes(uint64_t v, char *buf, size_t len)
{
    static const char *const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    double x;
    size_t u = 0;

    if (v < 1024) {
        (void)snprintf(buf, len, "%" PRIu64 " B", v);
        return;
    }
    /* Move up a unit before the one decimal would round to "1024.0". */
    for (x = (double)v / 1024; x >= 1023.95 && u + 1 < sizeof(units) / sizeof(units[0]); u++)
        x /= 1024;
    (void)snprintf(buf, len, "%.1f %s", x, units[u]);
}

void cli_fmt_time(uint64_t ns, bool utc, char *buf, size_t len)
{
    time_t secs = (time_t)(ns / 1000000000u);
    unsigned ms = (unsigned)(ns / 1000000u % 1000u);
    struct tm tm;
    char day[32];

    if (!(utc ? gmtime_r(&secs, &tm) : localtime_r(&secs, &tm)) ||
        strftime(day, sizeof(day), "%Y-%m-%dT%H:%M:%S", &tm) == 0) {
        (void)snprintf(buf, len, "?");
        return;
    }
    (void)snprintf(buf, len, "%s.%03u%s", day, ms, utc ? "Z" : "");
}

/* len bytes escaped as cli_fmt_escape() does, NUL included; malloc'd, owned by the caller. */
static char *escape_bytes_dup(const uint8_t *p, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    char *buf = malloc(len * 4 + 1), *o = buf;

    if (!buf)
        return NULL;
    for (size_t i = 0; i < len; i++) {
        if (p[i] >= 0x20 && p[i] < 0x7f) {
            *o++ = (char)p[i];
        } else {
            *o++ = '\\';
            *o++ = 'x';
            *o++ = hex[p[i] >> 4];
            *o++ = hex[p[i] & 0xf];
        }
    }
    *o = '\0';
    return buf;
}

/* "10.0.0.1:80", or "[fd00::1]:80" so the port stays readable after an IPv6 address. */
static void addr_port(const char *ip, uint32_t port, char *buf, size_t len)
{
    char esc[INET6_ADDRSTRLEN * 4 + 1];

    cli_fmt_escape(ip, esc, sizeof(esc));
    (void)snprintf(buf, len, strchr(esc, ':') ? "[%s]:%" PRIu32 : "%s:%" PRIu32, esc, port);
}

void cli_fmt_warnings(FILE *f, const Fgx__Ctl__Reply *rep)
{
    char line[512];

    for (size_t i = 0; i < rep->n_filters; i++) {
        const Fgx__Ctl__Filter *fl = rep->filters[i];

        for (size_t k = 0; k < fl->n_warnings; k++) {
            cli_fmt_escape(fl->warnings[k], line, sizeof(line));
            (void)fprintf(f, "%s" CLI_PROG ": warning:%s filter %" PRIu32 ": %s\n",
                          cli_fmt_paint(CLI_COLOR_WARN), cli_fmt_paint(CLI_COLOR_OFF), fl->id,
                          line);
        }
    }
}

void cli_fmt_error(FILE *f, const Fgx__Ctl__Reply *rep)
{
    const char *why = rep->error;
    char line[512];

    if (!why || !*why) {
        switch (rep->code) {
        case FGX__CTL__CODE__CODE_INVALID:
            why = "invalid argument";
            break;
        case FGX__CTL__CODE__CODE_NOT_FOUND:
            why = "not found";
            break;
        case FGX__CTL__CODE__CODE_EXISTS:
            why = "already exists";
            break;
        case FGX__CTL__CODE__CODE_UNAVAILABLE:
            why = "stored, but the worker did not confirm the change";
            break;
        case FGX__CTL__CODE__CODE_AUTH:
            why = "login required (fgexctl -c URL login)";
            break;
        default:
            why = "controld failed without a reason";
            break;
        }
    }
    /* A regex quoted in the reason must not break the one line (or the terminal). */
    cli_fmt_escape(why, line, sizeof(line));
    (void)fprintf(f, "%s" CLI_PROG ":%s %s\n", cli_fmt_paint(CLI_COLOR_ERR),
                  cli_fmt_paint(CLI_COLOR_OFF), line);
}

void cli_fmt_error_at(FILE *f, const Fgx__Ctl__Reply *rep, const char *url)
{
    static const char hint[] = "run fgexctl login";
    Fgx__Ctl__Reply r = *rep;
    char why[512];
    size_t len;

    if (rep->code != FGX__CTL__CODE__CODE_AUTH || !url) {
        cli_fmt_error(f, rep);
        return;
    }
    /* controld cannot know the URL this client reached it by: replace its generic advice. */
    (void)snprintf(why, sizeof(why), "%s",
                   rep->error && *rep->error ? rep->error : "login required");
    len = strlen(why);
    if (len >= sizeof(hint) - 1 && strcmp(why + len - (sizeof(hint) - 1), hint) == 0) {
        len -= sizeof(hint) - 1;
        while (len > 0 && (why[len - 1] == ' ' || why[len - 1] == ':'))
            len--;
        why[len] = '\0';
    }
    if (strcmp(url, CLI_DEFAULT_URL) == 0)
        (void)snprintf(why + len, sizeof(why) - len, ": run fgexctl login");
    else
        (void)snprintf(why + len, sizeof(why) - len, ": run fgexctl -c %.300s login", url);
    r.error = why;
    cli_fmt_error(f, &r);
}

/* ---- tables ------------------------------------------------------------------------------ */

#define TABLE_MAX_COLS 12

struct table {
    size_t ncols;
    const char *const *heads;
    unsigned right;     /* bit i: column i is right-aligned (numbers) */
    const size_t *minw; /* NULL, or a width per column that rows printed later can share */
    bool headless;      /* rows only: a later batch of a table already printed */
    char **cells;       /* row-major, malloc'd */
    size_t n, cap;
    bool oom;
};

static void table_init(struct table *t, const char *const *heads, size_t ncols, unsigned right)
{
    memset(t, 0, sizeof(*t));
    t->heads = heads;
    t->ncols = ncols < TABLE_MAX_COLS ? ncols : TABLE_MAX_COLS;
    t->right = right;
}

/* Takes ownership of cell (NULL records the failure). */
static void table_push(struct table *t, char *cell)
{
    if (!cell || t->oom) {
        t->oom = true;
        free(cell);
        return;
    }
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 64;
        char **cells = realloc(t->cells, cap * sizeof(*cells));
        if (!cells) {
            t->oom = true;
            free(cell);
            return;
        }
        t->cells = cells;
        t->cap = cap;
    }
    t->cells[t->n++] = cell;
}

static void table_addf(struct table *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void table_addf(struct table *t, const char *fmt, ...)
{
    va_list ap;
    char *cell = NULL;

    va_start(ap, fmt);
    if (vasprintf(&cell, fmt, ap) == -1)
        cell = NULL;
    va_end(ap);
    table_push(t, cell);
}

static void table_add_str(struct table *t, const char *s)
{
    table_push(t, escape_dup(s));
}

static int table_print(FILE *f, struct table *t)
{
    size_t w[TABLE_MAX_COLS] = {0};

    if (t->oom)
        return -ENOMEM;
    if (t->ncols == 0)
        return 0;
    for (size_t c = 0; c < t->ncols; c++) {
        w[c] = strlen(t->heads[c]);
        if (t->minw && t->minw[c] > w[c])
            w[c] = t->minw[c];
    }
    for (size_t i = 0; i < t->n; i++) {
        size_t l = strlen(t->cells[i]);
        if (l > w[i % t->ncols])
            w[i % t->ncols] = l;
    }
    for (size_t i = t->headless ? t->ncols : 0; i < t->n + t->ncols; i++) {
        size_t c = i % t->ncols;
        const char *s = i < t->ncols ? t->heads[c] : t->cells[i - t->ncols];
        bool last = c == t->ncols - 1;

        if (t->right & (1u << c))
            (void)fprintf(f, "%*s", (int)w[c], s);
        else if (last)
            (void)fputs(s, f); /* no trailing blanks after the last column (the regex) */
        else
            (void)fprintf(f, "%-*s", (int)w[c], s);
        (void)fputs(last ? "\n" : "  ", f);
    }
    return 0;
}

static void table_release(struct table *t)
{
    for (size_t i = 0; i < t->n; i++)
        free(t->cells[i]);
    free(t->cells);
    t->cells = NULL;
    t->n = t->cap = 0;
}

/* ---- human output ------------------------------------------------------------------------ */

static void kv(FILE *f, const char *key, const char *val)
{
    (void)fprintf(f, "%-11s%s\n", key, val);
}

static void kv_u64(FILE *f, const char *key, uint64_t v)
{
    (void)fprintf(f, "%-11s%" PRIu64 "\n", key, v);
}

static void kv_str(FILE *f, const char *key, const char *s)
{
    char buf[1024];

    cli_fmt_escape(s, buf, sizeof(buf));
    kv(f, key, buf);
}

static const char *ip_text(const char *ip)
{
    return (ip && *ip) ? ip : "any";
}

static void human_service(FILE *f, const Fgx__Ctl__Service *s)
{
    kv_u64(f, "id:", s->id);
    kv_str(f, "name:", s->name);
    kv(f, "proto:", proto_name(s->proto));
    kv_str(f, "ip:", ip_text(s->ip));
    kv_u64(f, "port:", s->port);
    kv(f, "layer:", layer_name(s->layer));
    /* The value ends the line, so colour codes cannot shift the alignment. */
    (void)fprintf(f, "%-11s%s%s%s\n",
                  "status:", cli_fmt_paint(s->active ? CLI_COLOR_OK : CLI_COLOR_WARN),
                  s->active ? "active" : "stopped", cli_fmt_paint(CLI_COLOR_OFF));
    kv(f, "fail-open:", yesno(s->fail_open));
    kv(f, "midstream:", midstream_name(s));
    kv_u64(f, "filters:", s->filters);
    kv_u64(f, "blocked:", s->blocked);
}

static void human_filter(FILE *f, const Fgx__Ctl__Filter *fl)
{
    kv_u64(f, "id:", fl->id);
    kv_u64(f, "service:", fl->service_id);
    kv_str(f, "regex:", fl->regex);
    kv(f, "dir:", dir_name(fl->dir));
    kv(f, "nocase:", yesno(fl->nocase));
    kv(f, "active:", yesno(fl->active));
    kv_u64(f, "blocked:", fl->blocked);
}

static int human_service_table(FILE *f, const Fgx__Ctl__Reply *rep)
{
    static const char *const heads[] = {"ID",        "NAME",    "PROTO",  "IP",
                                        "PORT",      "LAYER",   "STATUS", "FAIL-OPEN",
                                        "MIDSTREAM", "FILTERS", "BLOCKED"};
    struct table t;
    int rc;

    if (rep->n_services == 0) {
        (void)fputs("no services (add one with 'fgexctl service add')\n", f);
        return 0;
    }
    table_init(&t, heads, 11, 1u << 0 | 1u << 4 | 1u << 9 | 1u << 10);
    for (size_t i = 0; i < rep->n_services; i++) {
        const Fgx__Ctl__Service *s = rep->services[i];

        table_addf(&t, "%" PRIu32, s->id);
        table_add_str(&t, s->name);
        table_addf(&t, "%s", proto_name(s->proto));
        table_add_str(&t, ip_text(s->ip));
        table_addf(&t, "%" PRIu32, s->port);
        table_addf(&t, "%s", layer_name(s->layer));
        table_addf(&t, "%s", s->active ? "active" : "stopped");
        table_addf(&t, "%s", yesno(s->fail_open));
        table_addf(&t, "%s", midstream_name(s));
        table_addf(&t, "%" PRIu32, s->filters);
        table_addf(&t, "%" PRIu64, s->blocked);
    }
    rc = table_print(f, &t);
    table_release(&t);
    return rc;
}

static int human_filter_table(FILE *f, const Fgx__Ctl__Reply *rep)
{
    static const char *const heads[] = {"ID", "DIR", "NOCASE", "ACTIVE", "BLOCKED", "REGEX"};
    struct table t;
    int rc;

    if (rep->n_filters == 0) {
        (void)fputs("no filters (add one with 'fgexctl filter add')\n", f);
        return 0;
    }
    table_init(&t, heads, 6, 1u << 0 | 1u << 4);
    for (size_t i = 0; i < rep->n_filters; i++) {
        const Fgx__Ctl__Filter *fl = rep->filters[i];

        table_addf(&t, "%" PRIu32, fl->id);
        table_addf(&t, "%s", dir_name(fl->dir));
        table_addf(&t, "%s", yesno(fl->nocase));
        table_addf(&t, "%s", yesno(fl->active));
        table_addf(&t, "%" PRIu64, fl->blocked);
        table_add_str(&t, fl->regex);
    }
    rc = table_print(f, &t);
    table_release(&t);
    return rc;
}

static int human_status(FILE *f, const Fgx__Ctl__Status *st)
{
    static const char *const heads[] = {"KIND", "PID", "STATE", "GENERATION", "RESTARTS"};
    struct table t;
    char up[64], line[64];
    int rc;

    cli_fmt_duration(st->uptime, up, sizeof(up));
    kv_str(f, "version:", st->version);
    kv(f, "uptime:", up);
    (void)snprintf(line, sizeof(line), "%" PRIu32 " (%" PRIu32 " active)", st->services,
                   st->services_active);
    kv(f, "services:", line);
    if (st->queue_mode && *st->queue_mode)
        kv_str(f, "queue:", st->queue_mode);
    if (st->has_threads)
        kv_u64(f, "threads:", st->threads);
    if (st->n_workers == 0) {
        kv(f, "workers:", "none");
        return 0;
    }
    (void)fputc('\n', f);
    table_init(&t, heads, 5, 1u << 1 | 1u << 3 | 1u << 4);
    for (size_t i = 0; i < st->n_workers; i++) {
        const Fgx__Ctl__Worker *w = st->workers[i];

        table_add_str(&t, w->kind);
        table_addf(&t, "%" PRId32, w->pid);
        table_add_str(&t, w->state);
        table_addf(&t, "%" PRIu64, w->generation);
        table_addf(&t, "%" PRIu32, w->restarts);
    }
    rc = table_print(f, &t);
    table_release(&t);
    return rc;
}

/* An optional counter: "-" when the worker has not reported it. */
static void table_add_opt(struct table *t, bool has, uint64_t v)
{
    if (has)
        table_addf(t, "%" PRIu64, v);
    else
        table_addf(t, "-");
}

static int human_worker_table(FILE *f, const Fgx__Ctl__Reply *rep)
{
    static const char *const heads[] = {"KIND",  "PID",    "STATE", "GENERATION", "RESTARTS",
                                        "FLOWS", "QDROPS", "RSS",   "REFUSED"};
    struct table t;
    char rss[32];
    int rc;

    if (rep->n_workers == 0) {
        (void)fputs("no workers\n", f);
        return 0;
    }
    table_init(&t, heads, 9, 1u << 1 | 1u << 3 | 1u << 4 | 1u << 5 | 1u << 6 | 1u << 7 | 1u << 8);
    for (size_t i = 0; i < rep->n_workers; i++) {
        const Fgx__Ctl__Worker *w = rep->workers[i];

        table_add_str(&t, w->kind);
        table_addf(&t, "%" PRId32, w->pid);
        table_add_str(&t, w->state);
        table_add_opt(&t, w->has_generation, w->generation);
        table_addf(&t, "%" PRIu32, w->restarts);
        table_add_opt(&t, w->has_flows, w->flows);
        table_add_opt(&t, w->has_queue_drops, w->queue_drops);
        if (w->has_rss_bytes) {
            cli_fmt_bytes(w->rss_bytes, rss, sizeof(rss));
            table_addf(&t, "%s", rss);
        } else {
            table_addf(&t, "-");
        }
        table_add_opt(&t, w->has_conns_refused, w->conns_refused);
    }
    rc = table_print(f, &t);
    table_release(&t);
    return rc;
}

static void table_add_bytes(struct table *t, uint64_t v)
{
    char b[32];

    cli_fmt_bytes(v, b, sizeof(b));
    table_addf(t, "%s", b);
}

static int human_stats_table(FILE *f, const Fgx__Ctl__Reply *rep)
{
    static const char *const heads[] = {"SERVICE", "PACKETS", "BYTES",  "ACCEPTED",
                                        "DROPPED", "FLOWS",   "BLOCKED"};
    struct table t;
    int rc;

    if (rep->n_service_stats == 0) {
        (void)fputs("no services (add one with 'fgexctl service add')\n", f);
        return 0;
    }
    table_init(&t, heads, 7, 0x7eu);
    for (size_t i = 0; i < rep->n_service_stats; i++) {
        const Fgx__Ctl__ServiceStats *st = rep->service_stats[i];

        table_add_str(&t, st->name);
        table_addf(&t, "%" PRIu64, st->packets);
        table_add_bytes(&t, st->bytes);
        table_addf(&t, "%" PRIu64, st->accepted);
        table_addf(&t, "%" PRIu64, st->dropped);
        table_addf(&t, "%" PRIu64, st->flows_active);
        table_addf(&t, "%" PRIu64, st->blocked);
    }
    rc = table_print(f, &t);
    table_release(&t);
    return rc;
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
static void table_add_rate(struct table *t, uint64_t now, const uint64_t *then, double secs,
                           bool bytes)
{
    char b[32];
    double r;

    if (!then || secs <= 0 || now < *then) {
        table_addf(t, "-");
        return;
    }
    r = (double)(now - *then) / secs;
    if (bytes) {
        cli_fmt_bytes((uint64_t)(r + 0.5), b, sizeof(b));
        table_addf(t, "%s/s", b);
    } else {
        table_addf(t, "%.0f", r);
    }
}

#define OLD(field) (old ? &old->field : NULL)

int cli_fmt_stats_watch(FILE *f, const Fgx__Ctl__Reply *cur, const Fgx__Ctl__Reply *prev,
                        double secs)
{
    static const char *const heads[] = {"SERVICE", "PACKETS",  "PKT/S",   "BYTES",
                                        "BYTES/S", "ACCEPTED", "ACC/S",   "DROPPED",
                                        "DROP/S",  "FLOWS",    "BLOCKED", "BLK/S"};
    struct table t;
    int rc;

    if (cur->n_service_stats == 0) {
        (void)fputs("no services (add one with 'fgexctl service add')\n", f);
        return 0;
    }
    table_init(&t, heads, 12, 0xffeu);
    for (size_t i = 0; i < cur->n_service_stats; i++) {
        const Fgx__Ctl__ServiceStats *st = cur->service_stats[i];
        const Fgx__Ctl__ServiceStats *old = stats_find(prev, st->service_id);

        table_add_str(&t, st->name);
        table_addf(&t, "%" PRIu64, st->packets);
        table_add_rate(&t, st->packets, OLD(packets), secs, false);
        table_add_bytes(&t, st->bytes);
        table_add_rate(&t, st->bytes, OLD(bytes), secs, true);
        table_addf(&t, "%" PRIu64, st->accepted);
        table_add_rate(&t, st->accepted, OLD(accepted), secs, false);
        table_addf(&t, "%" PRIu64, st->dropped);
        table_add_rate(&t, st->dropped, OLD(dropped), secs, false);
        table_addf(&t, "%" PRIu64, st->flows_active);
        table_addf(&t, "%" PRIu64, st->blocked);
        table_add_rate(&t, st->blocked, OLD(blocked), secs, false);
    }
    rc = table_print(f, &t);
    table_release(&t);
    if (rc == 0 && (fflush(f) == EOF || ferror(f)))
        rc = -EIO;
    return rc;
}

static const char *event_dir(Fgx__Ctl__Dir d)
{
    return d == FGX__CTL__DIR__DIR_S2C ? "s2c" : "c2s";
}

/* Widths that fit most rows, so batches printed apart by --follow line up. */
static const size_t event_minw[] = {23, 10, 6, 3, 21, 21, 0};

static int human_events(FILE *f, const Fgx__Ctl__Reply *rep, bool fixed, bool head)
{
    static const char *const heads[] = {"TIME", "SERVICE", "FILTER", "DIR",
                                        "SRC",  "DST",     "EXCERPT"};
    struct table t;
    char buf[INET6_ADDRSTRLEN * 4 + 16];
    int rc;

    table_init(&t, heads, 7, 1u << 2);
    t.minw = fixed ? event_minw : NULL;
    t.headless = !head;
    for (size_t i = 0; i < rep->n_events; i++) {
        const Fgx__Ctl__Event *e = rep->events[i];

        cli_fmt_time(e->time_ns, false, buf, sizeof(buf));
        table_addf(&t, "%s", buf);
        if (e->service && *e->service)
            table_add_str(&t, e->service);
        else
            table_addf(&t, "%" PRIu32, e->service_id);
        table_addf(&t, "%" PRIu32, e->filter_id);
        table_addf(&t, "%s", event_dir(e->dir));
        addr_port(e->src, e->sport, buf, sizeof(buf));
        table_addf(&t, "%s", buf);
        addr_port(e->dst, e->dport, buf, sizeof(buf));
        table_addf(&t, "%s", buf);
        table_push(&t, escape_bytes_dup(e->has_excerpt ? e->excerpt.data : NULL,
                                        e->has_excerpt ? e->excerpt.len : 0));
    }
    rc = table_print(f, &t);
    table_release(&t);
    return rc;
}

/* The service or filter a rm removed: from the reply, else the id given on the command line.
 * Returns false when neither says. */
static bool removed_id(const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep, uint32_t *out)
{
    const char *ref = req->service_rm->ref; /* filter_rm shares the union slot */
    char *end;
    unsigned long v;

    if (req->req_case == FGX__CTL__REQUEST__REQ_SERVICE_RM && rep->n_services > 0) {
        *out = rep->services[0]->id;
        return true;
    }
    if (req->req_case == FGX__CTL__REQUEST__REQ_FILTER_RM && rep->n_filters > 0) {
        *out = rep->filters[0]->id;
        return true;
    }
    if (!ref || *ref < '0' || *ref > '9')
        return false;
    errno = 0;
    v = strtoul(ref, &end, 10);
    if (*end || errno || v > UINT32_MAX)
        return false;
    *out = (uint32_t)v;
    return true;
}

static int human_reply(FILE *f, const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep)
{
    uint32_t id;

    switch (req->req_case) {
    case FGX__CTL__REQUEST__REQ_STATUS:
        return rep->status ? human_status(f, rep->status) : 0;
    case FGX__CTL__REQUEST__REQ_SERVICE_LIST:
        return human_service_table(f, rep);
    case FGX__CTL__REQUEST__REQ_FILTER_LIST:
        return human_filter_table(f, rep);
    case FGX__CTL__REQUEST__REQ_WORKER_LIST:
    case FGX__CTL__REQUEST__REQ_WORKER_RESTART:
        return human_worker_table(f, rep);
    case FGX__CTL__REQUEST__REQ_STATS:
        return human_stats_table(f, rep);
    case FGX__CTL__REQUEST__REQ_EVENTS:
        if (rep->n_events == 0) {
            (void)fputs("no events\n", f);
            return 0;
        }
        return human_events(f, rep, false, true);
    case FGX__CTL__REQUEST__REQ_SERVICE_RM:
        if (rep->n_services > 0) {
            char name[256];
            cli_fmt_escape(rep->services[0]->name, name, sizeof(name));
            (void)fprintf(f, "removed service %" PRIu32 " (%s)\n", rep->services[0]->id, name);
        } else if (removed_id(req, rep, &id)) {
            (void)fprintf(f, "removed service %" PRIu32 "\n", id);
        } else {
            (void)fputs("removed\n", f);
        }
        return 0;
    case FGX__CTL__REQUEST__REQ_FILTER_RM:
        if (removed_id(req, rep, &id))
            (void)fprintf(f, "removed filter %" PRIu32 "\n", id);
        else
            (void)fputs("removed\n", f);
        return 0;
    case FGX__CTL__REQUEST__REQ_SERVICE_ADD:
    case FGX__CTL__REQUEST__REQ_SERVICE_SHOW:
    case FGX__CTL__REQUEST__REQ_SERVICE_START:
    case FGX__CTL__REQUEST__REQ_SERVICE_STOP:
    case FGX__CTL__REQUEST__REQ_SERVICE_RENAME:
    case FGX__CTL__REQUEST__REQ_SERVICE_SET:
        if (rep->n_services > 0)
            human_service(f, rep->services[0]);
        /* show: the service's filters too, when controld sends them. */
        if (req->req_case == FGX__CTL__REQUEST__REQ_SERVICE_SHOW && rep->n_filters > 0) {
            (void)fputc('\n', f);
            return human_filter_table(f, rep);
        }
        return 0;
    case FGX__CTL__REQUEST__REQ_FILTER_ADD:
    case FGX__CTL__REQUEST__REQ_FILTER_ENABLE:
    case FGX__CTL__REQUEST__REQ_FILTER_DISABLE:
        if (rep->n_filters > 0)
            human_filter(f, rep->filters[0]);
        return 0;
    default:
        return 0;
    }
}

/* ---- JSON output ------------------------------------------------------------------------- */

static json_t *json_service(const Fgx__Ctl__Service *s)
{
    return json_pack("{s:I, s:o, s:s, s:o, s:I, s:s, s:s, s:b, s:s, s:I, s:I}", "id",
                     cli_json_int(s->id), "name", cli_json_str(s->name), "proto",
                     proto_name(s->proto), "ip", cli_json_str(s->ip), "port", cli_json_int(s->port),
                     "layer", layer_name(s->layer), "status", s->active ? "active" : "stopped",
                     "fail_open", s->fail_open, "midstream", midstream_name(s), "filters",
                     cli_json_int(s->filters), "blocked", cli_json_int(s->blocked));
}

json_t *cli_fmt_json_filter(const Fgx__Ctl__Filter *fl)
{
    json_t *o = json_pack("{s:I, s:I}", "id", cli_json_int(fl->id), "service_id",
                          cli_json_int(fl->service_id));
    json_t *w = NULL;

    if (!o || cli_json_set_bytes(o, "regex", fl->regex, fl->regex ? strlen(fl->regex) : 0) < 0 ||
        json_object_update_new(o, json_pack("{s:s, s:b, s:b, s:I}", "dir", dir_name(fl->dir),
                                            "nocase", fl->nocase, "active", fl->active, "blocked",
                                            cli_json_int(fl->blocked))) < 0)
        goto fail;
    /* Only add and import say why a regex is likely to block honest traffic. */
    if (fl->n_warnings > 0) {
        w = json_array();
        for (size_t i = 0; w && i < fl->n_warnings; i++)
            if (json_array_append_new(w, cli_json_str(fl->warnings[i])) < 0)
                goto fail;
        if (json_object_set_new(o, "warnings", w) < 0) {
            w = NULL;
            goto fail;
        }
    }
    return o;
fail:
    json_decref(w);
    json_decref(o);
    return NULL;
}

/* Each item of v[0..n) rendered by fn, as an array; NULL when out of memory. */
static json_t *json_list(void *const *v, size_t n, json_t *(*fn)(const void *))
{
    json_t *a = json_array();

    for (size_t i = 0; a && i < n; i++) {
        if (json_array_append_new(a, fn(v[i])) < 0) {
            json_decref(a);
            a = NULL;
        }
    }
    return a;
}

static json_t *json_filter_any(const void *fl)
{
    return cli_fmt_json_filter(fl);
}

json_t *cli_fmt_json_filters(const Fgx__Ctl__Reply *rep)
{
    return json_list((void *const *)rep->filters, rep->n_filters, json_filter_any);
}

static json_t *json_status_worker(const void *p)
{
    const Fgx__Ctl__Worker *w = p;

    return json_pack("{s:o, s:I, s:o, s:I, s:I}", "kind", cli_json_str(w->kind), "pid",
                     (json_int_t)w->pid, "state", cli_json_str(w->state), "generation",
                     cli_json_int(w->generation), "restarts", cli_json_int(w->restarts));
}

static json_t *json_status(const Fgx__Ctl__Status *st)
{
    return json_pack(
        "{s:o, s:I, s:I, s:I, s:o, s:o, s:o}", "version", cli_json_str(st->version), "uptime",
        cli_json_int(st->uptime), "services", cli_json_int(st->services), "services_active",
        cli_json_int(st->services_active), "queue_mode", cli_json_str_or_null(st->queue_mode),
        "threads", st->has_threads ? json_integer(cli_json_int(st->threads)) : json_null(),
        "workers", json_list((void *const *)st->workers, st->n_workers, json_status_worker));
}

static json_t *json_worker(const void *p)
{
    const Fgx__Ctl__Worker *w = p;
    json_t *o = json_pack(
        "{s:o, s:I, s:o, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "kind", cli_json_str(w->kind),
        "pid", (json_int_t)w->pid, "state", cli_json_str(w->state), "generation",
        cli_json_int(w->generation), "restarts", cli_json_int(w->restarts), "queue_drops",
        cli_json_int(w->queue_drops), "flows", cli_json_int(w->flows), "rss_bytes",
        cli_json_int(w->rss_bytes), "truncated", cli_json_int(w->truncated), "verdict_errors",
        cli_json_int(w->verdict_errors), "malformed", cli_json_int(w->malformed));
    int rc = o ? 0 : -1;

    if (rc == 0 && w->has_evasion) /* the nfq worker's */
        rc = json_object_set_new(o, "evasion", json_integer(cli_json_int(w->evasion)));
    if (rc == 0 && w->has_midstream_resets) /* the nfq worker's */
        rc = json_object_update_new(o, json_pack("{s:I, s:I}", "midstream_resets",
                                                 cli_json_int(w->midstream_resets), "flows_evicted",
                                                 cli_json_int(w->flows_evicted)));
    if (rc == 0 && w->has_conns_refused) /* the proxy's own: absent for the nfq worker */
        rc = json_object_update_new(
            o,
            json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "conns_refused",
                      cli_json_int(w->conns_refused), "unclassified", cli_json_int(w->unclassified),
                      "connect_failed", cli_json_int(w->connect_failed), "scan_errors",
                      cli_json_int(w->scan_errors), "src_refused", cli_json_int(w->src_refused),
                      "evicted", cli_json_int(w->evicted), "silent_closed",
                      cli_json_int(w->silent_closed), "midstream_resets",
                      cli_json_int(w->midstream_reset), "midstream_rescan",
                      cli_json_int(w->midstream_rescan)));
    if (rc < 0) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static json_t *json_stats_one(const void *p)
{
    const Fgx__Ctl__ServiceStats *st = p;

    return json_pack("{s:I, s:o, s:I, s:I, s:I, s:I, s:I, s:I}", "id", cli_json_int(st->service_id),
                     "name", cli_json_str(st->name), "packets", cli_json_int(st->packets), "bytes",
                     cli_json_int(st->bytes), "accepted", cli_json_int(st->accepted), "dropped",
                     cli_json_int(st->dropped), "flows_active", cli_json_int(st->flows_active),
                     "blocked", cli_json_int(st->blocked));
}

/* Excerpts are at most ~64 bytes (control.proto); a longer one is cut in the hex form only. */
#define EXCERPT_HEX_MAX 1024

static json_t *json_event(const void *p)
{
    static const char hex[] = "0123456789abcdef";
    const Fgx__Ctl__Event *e = p;
    const uint8_t *x = e->has_excerpt ? e->excerpt.data : NULL;
    size_t xlen = e->has_excerpt ? e->excerpt.len : 0;
    char t[64], h[2 * EXCERPT_HEX_MAX + 1];
    json_t *o;

    cli_fmt_time(e->time_ns, true, t, sizeof(t));
    o = json_pack(
        "{s:I, s:s, s:I, s:I, s:o, s:I, s:s, s:s, s:o, s:I, s:o, s:I}", "seq", cli_json_int(e->seq),
        "time", t, "time_ns", cli_json_int(e->time_ns), "service_id", cli_json_int(e->service_id),
        "service", cli_json_str_or_null(e->service), "filter_id", cli_json_int(e->filter_id), "dir",
        event_dir(e->dir), "proto", proto_name(e->proto), "src", cli_json_str(e->src), "sport",
        cli_json_int(e->sport), "dst", cli_json_str(e->dst), "dport", cli_json_int(e->dport));
    /* Hex too, always, for a script that wants one field whatever the bytes. */
    for (size_t i = 0; i < xlen && i < EXCERPT_HEX_MAX; i++) {
        h[2 * i] = hex[x[i] >> 4];
        h[2 * i + 1] = hex[x[i] & 0xf];
    }
    h[2 * (xlen < EXCERPT_HEX_MAX ? xlen : EXCERPT_HEX_MAX)] = '\0';
    if (!o || cli_json_set_bytes(o, "excerpt", x, xlen) < 0 ||
        json_object_set_new(o, "excerpt_hex", json_string(h)) < 0) {
        json_decref(o);
        return NULL;
    }
    return o;
}

int cli_fmt_events_follow(FILE *f, const Fgx__Ctl__Reply *rep, bool json, bool head)
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

static json_t *json_service_any(const void *s)
{
    return json_service(s);
}

static json_t *json_reply(const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep)
{
    uint32_t id;

    switch (req->req_case) {
    case FGX__CTL__REQUEST__REQ_STATUS:
        return rep->status ? json_status(rep->status) : json_null();
    case FGX__CTL__REQUEST__REQ_SERVICE_LIST:
        return json_list((void *const *)rep->services, rep->n_services, json_service_any);
    case FGX__CTL__REQUEST__REQ_FILTER_LIST:
        return cli_fmt_json_filters(rep);
    case FGX__CTL__REQUEST__REQ_WORKER_LIST:
    case FGX__CTL__REQUEST__REQ_WORKER_RESTART:
        return json_list((void *const *)rep->workers, rep->n_workers, json_worker);
    case FGX__CTL__REQUEST__REQ_STATS:
        return json_list((void *const *)rep->service_stats, rep->n_service_stats, json_stats_one);
    case FGX__CTL__REQUEST__REQ_EVENTS:
        return json_list((void *const *)rep->events, rep->n_events, json_event);
    case FGX__CTL__REQUEST__REQ_SERVICE_RM:
    case FGX__CTL__REQUEST__REQ_FILTER_RM:
        return json_pack("{s:o}", "removed",
                         removed_id(req, rep, &id) ? json_integer(id) : json_null());
    case FGX__CTL__REQUEST__REQ_FILTER_ADD:
    case FGX__CTL__REQUEST__REQ_FILTER_ENABLE:
    case FGX__CTL__REQUEST__REQ_FILTER_DISABLE:
        return rep->n_filters > 0 ? cli_fmt_json_filter(rep->filters[0]) : json_null();
    default:
        /* The service commands: the service concerned. */
        return rep->n_services > 0 ? json_service(rep->services[0]) : json_null();
    }
}

int cli_fmt_reply(FILE *f, const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep, bool json)
{
    int rc = 0;

    if (req->req_case == FGX__CTL__REQUEST__REQ__NOT_SET)
        return 0;
    if (json) {
        rc = cli_json_print(f, json_reply(req, rep), false);
    } else {
        rc = human_reply(f, req, rep);
    }
    if (rc == 0 && (fflush(f) == EOF || ferror(f)))
        rc = -EIO;
    return rc;
}
