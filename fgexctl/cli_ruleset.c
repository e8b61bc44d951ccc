/* fgexctl ruleset-file stage: ruleset lines <-> FilterSpec / Filter (format in cli_ruleset.h).
 * The client checks the syntax of every line before anything is sent, so a typo on line 40
 * refuses the whole file; controld then checks each regex and names the line it came from. */
#include "cli_ruleset.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "fgx/ruleset.h"

static int line_err(char *err, size_t errlen, unsigned line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int line_err(char *err, size_t errlen, unsigned line, const char *fmt, ...)
{
    char what[200];
    va_list ap;

    va_start(ap, fmt);
    (void)vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    (void)snprintf(err, errlen, "line %u: %s", line, what);
    return -EINVAL;
}

static bool blank(char c)
{
    return c == ' ' || c == '\t';
}

/* label="TEXT" at *pp (past `label=`, at the opening quote): TEXT may hold blanks and '/', with
 * \" and \\ for a quote and a backslash. Moves *pp past the closing quote. */
static int parse_label(const char **pp, const char *end, unsigned line, Fgx__Ctl__FilterSpec *spec,
                       char *err, size_t errlen)
{
    const char *p = *pp + 1;
    char buf[FGX_LABEL_MAX + 1], why[128];
    size_t n = 0;

    if (spec->label)
        return line_err(err, errlen, line, "the label is given twice");
    for (;; p++) {
        if (p >= end)
            return line_err(err, errlen, line, "the label has no closing '\"'");
        if (*p == '"')
            break;
        if (*p == '\\' && p + 1 < end && (p[1] == '"' || p[1] == '\\'))
            p++;
        if (n >= FGX_LABEL_MAX)
            return line_err(err, errlen, line, "label longer than %d bytes", FGX_LABEL_MAX);
        buf[n++] = *p;
    }
    buf[n] = '\0';
    if (p + 1 < end && !blank(p[1]) && p[1] != '/')
        return line_err(err, errlen, line, "text right after the label's closing '\"'");
    if (fgx_label_check(buf, why, sizeof(why)) < 0)
        return line_err(err, errlen, line, "%s", why);
    spec->label = strdup(buf);
    if (!spec->label)
        return -ENOMEM;
    *pp = p + 1;
    return 0;
}

/* One non-comment line s[0..len) (no line break) into spec. */
static int parse_line(const char *s, size_t len, unsigned line, Fgx__Ctl__FilterSpec *spec,
                      char *err, size_t errlen)
{
    const char *p = s, *end = s + len, *open, *close;
    bool have_dir = false;

    while (p < end && *p != '/') {
        const char *w;
        size_t wl;

        while (p < end && blank(*p))
            p++;
        if (p >= end || *p == '/')
            break;
        w = p;
        if (end - p >= 7 && memcmp(p, "label=\"", 7) == 0) {
            const char *q = p + 6;
            int rc = parse_label(&q, end, line, spec, err, errlen);

            if (rc < 0)
                return rc;
            p = q;
            continue;
        }
        while (p < end && !blank(*p) && *p != '/')
            p++;
        wl = (size_t)(p - w);
#define WORD(x) (wl == sizeof(x) - 1 && memcmp(w, x, wl) == 0)
        if (WORD("c2s") || WORD("s2c") || WORD("both")) {
            if (have_dir)
                return line_err(err, errlen, line, "the direction is given twice");
            have_dir = true;
            spec->has_dir = 1;
            spec->dir = WORD("c2s")   ? FGX__CTL__DIR__DIR_C2S
                        : WORD("s2c") ? FGX__CTL__DIR__DIR_S2C
                                      : FGX__CTL__DIR__DIR_BOTH;
        } else if (WORD("nocase")) {
            if (spec->has_nocase)
                return line_err(err, errlen, line, "'nocase' is given twice");
            spec->has_nocase = 1;
            spec->nocase = 1;
        } else if (WORD("log") || WORD("block")) {
            if (spec->has_action)
                return line_err(err, errlen, line, "the action (log or block) is given twice");
            spec->has_action = 1;
            spec->action =
                WORD("log") ? FGX__CTL__FILTER_ACTION__FILTER_ACTION_LOG : FGX__CTL__FILTER_ACTION__FILTER_ACTION_BLOCK;
        } else if (WORD("disabled")) {
            if (spec->has_active)
                return line_err(err, errlen, line, "'disabled' is given twice");
            spec->has_active = 1;
            spec->active = 0;
        } else {
            return line_err(err, errlen, line,
                            "unknown word '%.*s' (expected c2s, s2c, both, nocase, disabled, "
                            "log, label=\"TEXT\", then /REGEX/)",
                            (int)(wl > 40 ? 40 : wl), w);
        }
#undef WORD
    }
    if (p >= end)
        return line_err(err, errlen, line, "no /REGEX/ on the line");
    open = p;
    close = end - 1;
    while (close > open && *close != '/')
        close--;
    if (close == open)
        return line_err(err, errlen, line, "the regex has no closing '/'");
    for (const char *q = close + 1; q < end; q++)
        if (!blank(*q))
            return line_err(err, errlen, line,
                            "text after the closing '/' (the regex ends at the last '/')");
    if (close == open + 1)
        return line_err(err, errlen, line, "the regex is empty");
    spec->regex = strndup(open + 1, (size_t)(close - open - 1));
    if (!spec->regex)
        return -ENOMEM;
    spec->has_line = 1;
    spec->line = line;
    return 0;
}

void cli_ruleset_release(Fgx__Ctl__FilterImport *fi)
{
    for (size_t i = 0; i < fi->n_filters; i++) {
        free(fi->filters[i]->regex);
        free(fi->filters[i]->label);
        free(fi->filters[i]);
    }
    free(fi->filters);
    fi->filters = NULL;
    fi->n_filters = 0;
}

int cli_ruleset_parse(const char *text, size_t len, Fgx__Ctl__FilterImport *fi, char *err,
                      size_t errlen)
{
    const char *p = text, *end = text + len;
    size_t cap = 0;
    unsigned line = 0;
    int rc = 0;

    fi->filters = NULL;
    fi->n_filters = 0;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end, *q = p;
        Fgx__Ctl__FilterSpec *spec;

        line++;
        if (memchr(p, '\0', (size_t)(le - p))) {
            rc = line_err(err, errlen, line, "a NUL byte (is this a text file?)");
            goto fail;
        }
        /* Files written on Windows end their lines with CR LF. */
        if (le > p && le[-1] == '\r')
            le--;
        while (q < le && blank(*q))
            q++;
        if (q < le && *q != '#') {
            if (fi->n_filters == cap) {
                size_t ncap = cap ? cap * 2 : 16;
                Fgx__Ctl__FilterSpec **n =
                    realloc(fi->filters, ncap * sizeof(Fgx__Ctl__FilterSpec *));

                if (!n) {
                    rc = -ENOMEM;
                    goto fail;
                }
                fi->filters = n;
                cap = ncap;
            }
            spec = malloc(sizeof(*spec));
            if (!spec) {
                rc = -ENOMEM;
                goto fail;
            }
            fgx__ctl__filter_spec__init(spec);
            fi->filters[fi->n_filters++] = spec;
            rc = parse_line(q, (size_t)(le - q), line, spec, err, errlen);
            if (rc < 0)
                goto fail;
        }
        p = nl ? nl + 1 : end;
    }
    return 0;
fail:
    cli_ruleset_release(fi);
    return rc;
}

int cli_ruleset_write(FILE *f, const char *service, Fgx__Ctl__Filter *const *filters, size_t n,
                      char *err, size_t errlen)
{
    for (size_t i = 0; i < n; i++) {
        if (strpbrk(filters[i]->regex, "\r\n")) {
            (void)snprintf(err, errlen,
                           "filter %u: its regex holds a line break, which a ruleset line "
                           "cannot hold",
                           filters[i]->id);
            return -EINVAL;
        }
    }
    (void)fprintf(f, "# fgex ruleset of service %s (fgexctl filter export)\n", service);
    (void)fputs("# [c2s|s2c|both] [nocase] [disabled] [log] [label=\"TEXT\"] /REGEX/\n", f);
    for (size_t i = 0; i < n; i++) {
        const Fgx__Ctl__Filter *fl = filters[i];
        const char *dir = fl->dir == FGX__CTL__DIR__DIR_C2S   ? "c2s"
                          : fl->dir == FGX__CTL__DIR__DIR_S2C ? "s2c"
                                                              : "both";

        (void)fprintf(f, "%s%s%s%s", dir, fl->nocase ? " nocase" : "",
                      fl->active ? "" : " disabled",
                      fl->has_action && fl->action == FGX__CTL__FILTER_ACTION__FILTER_ACTION_LOG ? " log" : "");
        if (fl->label && fl->label[0]) {
            (void)fputs(" label=\"", f);
            for (const char *c = fl->label; *c; c++) {
                if (*c == '"' || *c == '\\')
                    (void)fputc('\\', f);
                (void)fputc(*c, f);
            }
            (void)fputc('"', f);
        }
        (void)fprintf(f, " /%s/\n", fl->regex);
    }
    return (fflush(f) == EOF || ferror(f)) ? -EIO : 0;
}
