/* controld configuration stage, pure part: filter identity, the mapping a sync makes, and the
 * diff lines imports report (ctl_diff.h). */
#include "controld/ctl_diff.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fgx/addr.h"

bool ctl_filter_same(const struct ctl_filter *a, const struct ctl_filter *b)
{
    /* Regexes are compared as bytes: "a" and "(?:a)" are two filters, as a player wrote them. */
    return a->dir == b->dir && a->nocase == b->nocase && a->log == b->log && a->regex && b->regex &&
           strcmp(a->regex, b->regex) == 0;
}

bool ctl_filter_same_pattern(const struct ctl_filter *a, const struct ctl_filter *b)
{
    return a->dir == b->dir && a->nocase == b->nocase && a->regex && b->regex &&
           strcmp(a->regex, b->regex) == 0;
}

static bool same_by(const struct ctl_filter *a, const struct ctl_filter *b, bool by_pattern)
{
    return by_pattern ? ctl_filter_same_pattern(a, b) : ctl_filter_same(a, b);
}

long ctl_diff_find_same(const struct ctl_filter *fs, size_t n, const struct ctl_filter *f)
{
    for (size_t i = 0; i < n; i++)
        if ((f->id == 0 || fs[i].id != f->id) && ctl_filter_same(&fs[i], f))
            return (long)i;
    return -1;
}

int ctl_diff_filters(const struct ctl_filter *cur, size_t ncur, const struct ctl_filter *want,
                     size_t nwant, bool by_pattern, long *match, bool *kept, size_t *dup_a,
                     size_t *dup_b)
{
    for (size_t i = 0; i < nwant; i++) {
        for (size_t j = 0; j < i; j++) {
            if (same_by(&want[i], &want[j], by_pattern)) {
                *dup_a = j;
                *dup_b = i;
                return -EEXIST;
            }
        }
    }
    for (size_t j = 0; j < ncur; j++)
        kept[j] = false;
    for (size_t i = 0; i < nwant; i++) {
        match[i] = -1;
        /* The lowest id first: of two identical filters already there (stored before the
         * refusal existed), the older one stays. */
        for (size_t j = 0; j < ncur; j++) {
            if (!kept[j] && same_by(&cur[j], &want[i], by_pattern)) {
                kept[j] = true;
                match[i] = (long)j;
                break;
            }
        }
    }
    return 0;
}

int ctl_diff_push(struct ctl_diff *d, const struct ctl_diff_line *l)
{
    struct ctl_diff_line *x;

    if (d->n == d->cap) {
        size_t ncap = d->cap ? d->cap * 2 : 16;
        struct ctl_diff_line *nv = realloc(d->v, ncap * sizeof(*nv));

        if (!nv)
            return -ENOMEM;
        d->v = nv;
        d->cap = ncap;
    }
    x = &d->v[d->n];
    *x = *l;
    x->regex = NULL;
    x->label = NULL;
    if (l->regex) {
        x->regex = strdup(l->regex);
        if (!x->regex)
            return -ENOMEM;
    }
    if (l->label) {
        x->label = strdup(l->label);
        if (!x->label) {
            free(x->regex);
            return -ENOMEM;
        }
    }
    d->n++;
    return 0;
}

size_t ctl_diff_changes(const struct ctl_diff *d)
{
    size_t n = 0;

    for (size_t i = 0; i < d->n; i++)
        n += d->v[i].op != CTL_DIFF_KEEP;
    return n;
}

void ctl_diff_release(struct ctl_diff *d)
{
    if (!d)
        return;
    for (size_t i = 0; i < d->n; i++) {
        free(d->v[i].regex);
        free(d->v[i].label);
    }
    free(d->v);
    memset(d, 0, sizeof(*d));
}

const char *ctl_diff_op_name(enum ctl_diff_op op)
{
    switch (op) {
    case CTL_DIFF_ADD:
        return "add";
    case CTL_DIFF_RM:
        return "rm";
    case CTL_DIFF_KEEP:
        return "keep";
    default:
        return "change";
    }
}

/* Append piece to buf, after ", " when something is there already. */
static void say(char *buf, size_t len, size_t *at, const char *piece)
{
    int n;

    if (*at >= len)
        return;
    n = snprintf(buf + *at, len - *at, "%s%s", *at ? ", " : "", piece);
    if (n > 0)
        *at += (size_t)n;
}

void ctl_diff_service(const struct ctl_service *a, const struct ctl_service *b, char *buf,
                      size_t len)
{
    char x[64], y[64], piece[160];
    size_t at = 0;

    buf[0] = '\0';
    if (strcmp(a->name, b->name) != 0) {
        snprintf(piece, sizeof(piece), "name %s -> %s", a->name, b->name);
        say(buf, len, &at, piece);
    }
    if (a->ipproto != b->ipproto || a->port != b->port) {
        snprintf(piece, sizeof(piece), "port %u -> %u", a->port, b->port);
        say(buf, len, &at, piece);
    }
    if (memcmp(&a->addr, &b->addr, sizeof(a->addr)) != 0) {
        if (fgx_cidr_format(&a->addr, x, sizeof(x)) < 0 || !x[0])
            snprintf(x, sizeof(x), "any");
        if (fgx_cidr_format(&b->addr, y, sizeof(y)) < 0 || !y[0])
            snprintf(y, sizeof(y), "any");
        snprintf(piece, sizeof(piece), "ip %s -> %s", x, y);
        say(buf, len, &at, piece);
    }
    if (a->layer != b->layer)
        say(buf, len, &at, b->layer == CTL_LAYER_PROXY ? "layer proxy" : "layer nfqueue");
    if (a->active != b->active)
        say(buf, len, &at, b->active ? "started" : "stopped");
    if (a->fail_open != b->fail_open)
        say(buf, len, &at, b->fail_open ? "fail-open" : "fail-closed");
    if (a->midstream != b->midstream)
        say(buf, len, &at,
            b->midstream == FGX_MIDSTREAM_SCAN ? "midstream scan" : "midstream reset");
    if (a->http != b->http)
        say(buf, len, &at, b->http ? "proto http" : "proto tcp");
    if (a->upstream_http1 != b->upstream_http1)
        say(buf, len, &at, b->upstream_http1 ? "upstream http1" : "upstream h2");
    if (a->max_conns != b->max_conns || a->over_limit_forward != b->over_limit_forward ||
        a->first_byte_timeout != b->first_byte_timeout)
        say(buf, len, &at, "limits");
}

static void label_words(const char *l, char *buf, size_t len)
{
    if (l && *l)
        snprintf(buf, len, "'%.60s'", l);
    else
        snprintf(buf, len, "none");
}

void ctl_diff_filter(const struct ctl_filter *a, const struct ctl_filter *b, bool with_active,
                     char *buf, size_t len)
{
    char x[72], y[72], piece[160];
    size_t at = 0;

    buf[0] = '\0';
    if (a->log != b->log) {
        snprintf(piece, sizeof(piece), "action %s -> %s", a->log ? "log" : "block",
                 b->log ? "log" : "block");
        say(buf, len, &at, piece);
    }
    if (strcmp(a->label ? a->label : "", b->label ? b->label : "") != 0) {
        label_words(a->label, x, sizeof(x));
        label_words(b->label, y, sizeof(y));
        snprintf(piece, sizeof(piece), "label %s -> %s", x, y);
        say(buf, len, &at, piece);
    }
    if (with_active && a->active != b->active)
        say(buf, len, &at, b->active ? "enabled" : "disabled");
}
