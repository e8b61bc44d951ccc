/* controld's "who is attacking" view: events -> rows per (source address, filter). Sorting the
 * events by key and counting runs is O(n log n) for the 100,000 events kept by default (a few
 * milliseconds), with no table to size for the attackers' address space. */
#include "controld/ctl_top.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* A script's block: "reject" or "drop" (its failures, "timeout" and "exception", are not). */
static bool script_block(const struct ctl_event *e)
{
    return strcmp(e->script_kind, "reject") == 0 || strcmp(e->script_kind, "drop") == 0;
}

static int key_cmp(const void *a, const void *b)
{
    const struct ctl_event *x = *(const struct ctl_event *const *)a;
    const struct ctl_event *y = *(const struct ctl_event *const *)b;
    int c = strcmp(x->src, y->src);

    if (c != 0)
        return c;
    if (x->filter_id != y->filter_id)
        return x->filter_id < y->filter_id ? -1 : 1;
    if (x->filter_id != 0)
        return 0;
    /* a script's blocks: a function's name is its file's, so per service */
    if (x->service_id != y->service_id)
        return x->service_id < y->service_id ? -1 : 1;
    return strcmp(x->script_fn, y->script_fn);
}

static int row_cmp(const void *a, const void *b)
{
    const struct ctl_top_row *x = a, *y = b;
    int c;

    if (x->last_ns != y->last_ns)
        return x->last_ns > y->last_ns ? -1 : 1;
    if (x->blocks != y->blocks)
        return x->blocks > y->blocks ? -1 : 1;
    c = strcmp(x->src, y->src);
    if (c != 0)
        return c;
    if (x->filter_id != y->filter_id)
        return x->filter_id < y->filter_id ? -1 : 1;
    return strcmp(x->script_fn, y->script_fn);
}

int ctl_top_src(const struct ctl_event *const *evs, size_t n, uint64_t since_ns,
                struct ctl_top_row **out, size_t *nout)
{
    const struct ctl_event **v = NULL;
    struct ctl_top_row *rows = NULL;
    size_t m = 0, nr = 0;

    *out = NULL;
    *nout = 0;
    if (n == 0)
        return 0;
    v = malloc(n * sizeof(*v));
    if (!v)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++)
        if (!evs[i]->log && (!evs[i]->script_kind[0] || script_block(evs[i])) &&
            evs[i]->time_ns >= since_ns)
            v[m++] = evs[i];
    if (m == 0) {
        free(v);
        return 0;
    }
    qsort(v, m, sizeof(*v), key_cmp);
    for (size_t i = 0; i < m; i++) /* one row per run of equal keys */
        nr += i == 0 || key_cmp(&v[i - 1], &v[i]) != 0;
    rows = calloc(nr, sizeof(*rows));
    nr = 0;
    if (!rows) {
        free(v);
        return -ENOMEM;
    }
    for (size_t i = 0; i < m; i++) {
        const struct ctl_event *e = v[i];
        struct ctl_top_row *r = nr > 0 ? &rows[nr - 1] : NULL;

        if (!r || key_cmp(&v[i - 1], &v[i]) != 0) {
            r = &rows[nr++];
            memcpy(r->src, e->src, sizeof(r->src));
            r->filter_id = e->filter_id;
            r->first_ns = e->time_ns;
            memcpy(r->script_fn, e->script_fn, sizeof(r->script_fn));
        }
        r->blocks++;
        if (e->time_ns < r->first_ns)
            r->first_ns = e->time_ns;
        if (e->time_ns >= r->last_ns) {
            r->last_ns = e->time_ns;
            r->service_id = e->service_id;
            memcpy(r->service, e->service, sizeof(r->service));
        }
    }
    free(v);
    qsort(rows, nr, sizeof(*rows), row_cmp);
    *out = rows;
    *nout = nr;
    return 0;
}
