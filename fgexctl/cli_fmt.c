/* fgexctl output stage: what controld replied, printed by the command's own renderers (its
 * family's cmd_<family>.c). Humans get aligned tables and key/value blocks with every string
 * escaped for the terminal; `--json` gets one document whose shape is fixed per command
 * (docs/fgexctl.md), for scripts. What the renderers share is here: names of enumerations,
 * escaping, tables, key/value lines, the filter shape, errors and warnings. */
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
#include "cmd.h"
#include "fgx/ruleset.h"

/* ---- small conversions ------------------------------------------------------------------- */

const char *cli_fmt_proto_name(Fgx__Ctl__Proto p)
{
    return p == FGX__CTL__PROTO__PROTO_UDP ? "udp" : "tcp";
}

const char *cli_fmt_layer_name(Fgx__Ctl__Layer l)
{
    return l == FGX__CTL__LAYER__LAYER_PROXY      ? "proxy"
           : l == FGX__CTL__LAYER__LAYER_EXTERNAL ? "external"
                                                  : "nfqueue";
}

/* Absent (an older controld): that controld knew no other policy than scanning on. */
const char *cli_fmt_midstream_name(const Fgx__Ctl__Service *s)
{
    if (!s->has_midstream)
        return "scan";
    return s->midstream == FGX__CTL__MIDSTREAM__MIDSTREAM_SCAN ? "scan" : "reset";
}

const char *cli_fmt_dir_name(Fgx__Ctl__Dir d)
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

const char *cli_fmt_yesno(bool b)
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
char *cli_fmt_escape_bytes_dup(const uint8_t *p, size_t len)
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
void cli_fmt_addr_port(const char *ip, uint32_t port, char *buf, size_t len)
{
    char esc[INET6_ADDRSTRLEN * 4 + 1];

    if (!ip || !*ip) {
        /* no address known (a script call's failure): "-", never ":0" */
        (void)snprintf(buf, len, "-");
        return;
    }
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
    char via[320];

    if (!url) {
        cli_fmt_error(f, rep);
        return;
    }
    via[0] = '\0';
    if (strcmp(url, CLI_DEFAULT_URL) != 0)
        (void)snprintf(via, sizeof(via), "-c %.300s", url);
    cli_fmt_error_via(f, rep, via);
}

void cli_fmt_error_via(FILE *f, const Fgx__Ctl__Reply *rep, const char *via)
{
    static const char hint[] = "run fgexctl login";
    Fgx__Ctl__Reply r = *rep;
    char why[512];
    size_t len;

    if (rep->code != FGX__CTL__CODE__CODE_AUTH || !via) {
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
    (void)snprintf(why + len, sizeof(why) - len, ": run fgexctl %.320s%slogin", via,
                   via[0] ? " " : "");
    r.error = why;
    cli_fmt_error(f, &r);
}

/* ---- tables ------------------------------------------------------------------------------ */

void cli_fmt_table_init(struct cli_table *t, const char *const *heads, size_t ncols, unsigned right)
{
    memset(t, 0, sizeof(*t));
    t->heads = heads;
    t->ncols = ncols < CLI_TABLE_MAX_COLS ? ncols : CLI_TABLE_MAX_COLS;
    t->right = right;
}

/* Takes ownership of cell (NULL records the failure). */
void cli_fmt_table_push(struct cli_table *t, char *cell)
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

void cli_fmt_table_addf(struct cli_table *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

void cli_fmt_table_addf(struct cli_table *t, const char *fmt, ...)
{
    va_list ap;
    char *cell = NULL;

    va_start(ap, fmt);
    if (vasprintf(&cell, fmt, ap) == -1)
        cell = NULL;
    va_end(ap);
    cli_fmt_table_push(t, cell);
}

void cli_fmt_table_add_str(struct cli_table *t, const char *s)
{
    cli_fmt_table_push(t, escape_dup(s));
}

void cli_fmt_events_lost(FILE *f, uint64_t lost)
{
    if (lost > 0)
        (void)fprintf(f, "%" PRIu64 " block%s had no event recorded (a worker's event queue was full)\n",
                      lost, lost == 1 ? "" : "s");
}

/* Columns a cell takes on a terminal: its UTF-8 characters (escaped cells are ASCII; a label
 * is UTF-8 text), not its bytes. */
static size_t cell_width(const char *s)
{
    size_t n = 0;

    for (; *s; s++)
        n += ((unsigned char)*s & 0xc0) != 0x80;
    return n;
}

static void pad(FILE *f, size_t n)
{
    while (n-- > 0)
        (void)fputc(' ', f);
}

void cli_fmt_table_add_label(struct cli_table *t, const char *label)
{
    char why[64];

    if (!label || !label[0])
        cli_fmt_table_addf(t, "-");
    else if (fgx_label_check(label, why, sizeof(why)) == 0)
        cli_fmt_table_addf(t, "%s", label); /* text already: shown as is */
    else
        cli_fmt_table_add_str(t, label);
}

int cli_fmt_table_print(FILE *f, struct cli_table *t)
{
    size_t w[CLI_TABLE_MAX_COLS] = {0};

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
        size_t l = cell_width(t->cells[i]);
        if (l > w[i % t->ncols])
            w[i % t->ncols] = l;
    }
    for (size_t i = t->headless ? t->ncols : 0; i < t->n + t->ncols; i++) {
        size_t c = i % t->ncols;
        const char *s = i < t->ncols ? t->heads[c] : t->cells[i - t->ncols];
        bool last = c == t->ncols - 1;

        size_t sw = cell_width(s);

        if (t->right & (1u << c)) {
            pad(f, w[c] > sw ? w[c] - sw : 0);
            (void)fputs(s, f);
        } else if (last) {
            (void)fputs(s, f); /* no trailing blanks after the last column (the regex) */
        } else {
            (void)fputs(s, f);
            pad(f, w[c] > sw ? w[c] - sw : 0);
        }
        (void)fputs(last ? "\n" : "  ", f);
    }
    return 0;
}

void cli_fmt_table_release(struct cli_table *t)
{
    for (size_t i = 0; i < t->n; i++)
        free(t->cells[i]);
    free(t->cells);
    t->cells = NULL;
    t->n = t->cap = 0;
}

/* ---- human output ------------------------------------------------------------------------ */

void cli_fmt_kv(FILE *f, const char *key, const char *val)
{
    (void)fprintf(f, "%-11s%s\n", key, val);
}

void cli_fmt_kv_u64(FILE *f, const char *key, uint64_t v)
{
    (void)fprintf(f, "%-11s%" PRIu64 "\n", key, v);
}

void cli_fmt_kv_str(FILE *f, const char *key, const char *s)
{
    char buf[1024];

    cli_fmt_escape(s, buf, sizeof(buf));
    cli_fmt_kv(f, key, buf);
}

const char *cli_fmt_ip_text(const char *ip)
{
    return (ip && *ip) ? ip : "any";
}

bool cli_fmt_filter_is_log(const Fgx__Ctl__Filter *fl)
{
    return fl->has_action && fl->action == FGX__CTL__FILTER_ACTION__FILTER_ACTION_LOG;
}

const char *cli_fmt_action_name(const Fgx__Ctl__Filter *fl)
{
    return cli_fmt_filter_is_log(fl) ? "log" : "block";
}

int cli_fmt_filter_table(FILE *f, const Fgx__Ctl__Reply *rep)
{
    static const char *const heads[] = {"ID",      "DIR",     "NOCASE", "ACTIVE", "ACTION",
                                        "BLOCKED", "MATCHED", "LABEL",  "REGEX"};
    static const char *const plain[] = {"ID", "DIR", "NOCASE", "ACTIVE", "BLOCKED", "REGEX"};
    bool extra = false, labels = false;
    struct cli_table t;
    int rc;

    if (rep->n_filters == 0) {
        (void)fputs("no filters (add one with 'fgexctl filter add')\n", f);
        return 0;
    }
    /* The action, matched and label columns only where a filter uses them: a service of
     * block filters prints as it always did. */
    for (size_t i = 0; i < rep->n_filters; i++) {
        extra |= cli_fmt_filter_is_log(rep->filters[i]) || rep->filters[i]->matched > 0;
        labels |= rep->filters[i]->label && rep->filters[i]->label[0];
    }
    if (extra || labels) {
        cli_fmt_table_init(&t, heads, 9, 1u << 0 | 1u << 5 | 1u << 6);
    } else {
        cli_fmt_table_init(&t, plain, 6, 1u << 0 | 1u << 4);
    }
    for (size_t i = 0; i < rep->n_filters; i++) {
        const Fgx__Ctl__Filter *fl = rep->filters[i];

        cli_fmt_table_addf(&t, "%" PRIu32, fl->id);
        cli_fmt_table_addf(&t, "%s", cli_fmt_dir_name(fl->dir));
        cli_fmt_table_addf(&t, "%s", cli_fmt_yesno(fl->nocase));
        cli_fmt_table_addf(&t, "%s", cli_fmt_yesno(fl->active));
        if (extra || labels)
            cli_fmt_table_addf(&t, "%s", cli_fmt_action_name(fl));
        cli_fmt_table_addf(&t, "%" PRIu64, fl->blocked);
        if (extra || labels) {
            cli_fmt_table_addf(&t, "%" PRIu64, fl->matched);
            cli_fmt_table_add_label(&t, fl->label);
        }
        cli_fmt_table_add_str(&t, fl->regex);
    }
    rc = cli_fmt_table_print(f, &t);
    cli_fmt_table_release(&t);
    return rc;
}

/* An optional counter: "-" when the worker has not reported it. */
void cli_fmt_table_add_opt(struct cli_table *t, bool has, uint64_t v)
{
    if (has)
        cli_fmt_table_addf(t, "%" PRIu64, v);
    else
        cli_fmt_table_addf(t, "-");
}

void cli_fmt_table_add_bytes(struct cli_table *t, uint64_t v)
{
    char b[32];

    cli_fmt_bytes(v, b, sizeof(b));
    cli_fmt_table_addf(t, "%s", b);
}

/* The service or filter a rm removed: from the reply, else the id given on the command line.
 * Returns false when neither says. */
bool cli_fmt_removed_id(const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep, uint32_t *out)
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

/* ---- JSON output ------------------------------------------------------------------------- */

json_t *cli_fmt_json_filter(const Fgx__Ctl__Filter *fl)
{
    json_t *o = json_pack("{s:I, s:I}", "id", cli_json_int(fl->id), "service_id",
                          cli_json_int(fl->service_id));
    json_t *w = NULL;

    if (!o || cli_json_set_bytes(o, "regex", fl->regex, fl->regex ? strlen(fl->regex) : 0) < 0 ||
        json_object_update_new(o,
                               json_pack("{s:s, s:b, s:b, s:I}", "dir", cli_fmt_dir_name(fl->dir),
                                         "nocase", fl->nocase, "active", fl->active, "blocked",
                                         cli_json_int(fl->blocked))) < 0 ||
        json_object_update_new(
            o, json_pack("{s:s, s:I, s:o}", "action", cli_fmt_action_name(fl), "matched",
                         cli_json_int(fl->matched), "label",
                         cli_json_str_or_null(fl->label && fl->label[0] ? fl->label : NULL))) < 0)
        goto fail;
    /* issue 27: how many times its pattern was edited in place, and when last (null: never) */
    if (json_object_update_new(
            o, json_pack("{s:I, s:o}", "revision", cli_json_int(fl->revision), "edited",
                         fl->has_edited ? json_integer((json_int_t)fl->edited) : json_null())) < 0)
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
json_t *cli_fmt_json_list(void *const *v, size_t n, json_t *(*fn)(const void *))
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
    return cli_fmt_json_list((void *const *)rep->filters, rep->n_filters, json_filter_any);
}

json_t *cli_fmt_json_removed(const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep)
{
    uint32_t id;

    return json_pack("{s:o}", "removed",
                     cli_fmt_removed_id(req, rep, &id) ? json_integer(id) : json_null());
}

int cli_fmt_reply(FILE *f, const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep, bool json)
{
    const struct cli_cmd_def *def = cli_cmd_of_req(req->req_case);
    int rc = 0;

    if (req->req_case == FGX__CTL__REQUEST__REQ__NOT_SET)
        return 0;
    if (json) {
        rc = cli_json_print(f, def && def->json ? def->json(req, rep) : json_null(), false);
    } else if (def && def->human) {
        rc = def->human(f, req, rep);
    }
    if (rc == 0 && (fflush(f) == EOF || ferror(f)))
        rc = -EIO;
    return rc;
}
