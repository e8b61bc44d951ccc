/* controld, script filters at run time: counters and logs (ctl_script_rt.h). controld is
 * single-threaded: plain tables, no locks. */
#include "controld/ctl_script_rt.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "controld/ctl_health.h"
#include "controld/ctl_store.h"
#include "fgx/dp.h"
#include "fgx/log.h"

struct rt_fn {
    uint32_t service_id;
    char name[128];
    uint64_t n[CTL_SCRIPT_NCOUNTS];
};

struct rt_entry {
    uint64_t seq, time_ns;
    char function[128];
    char kind[16];
    char *text;
};

struct rt_log {
    uint32_t service_id;
    struct rt_entry ring[CTL_SCRIPT_LOG_MAX];
    uint64_t next_seq; /* the seq the next entry gets; entries next_seq-N .. next_seq-1 kept */
};

/* A call that failed for the whole service (the interpreter had no file for it): the last one,
 * until the file is set again. */
struct rt_svcerr {
    uint32_t service_id;
    char text[256];
    uint64_t time_ns, count;
    uint64_t noted_ns; /* the last health note about it */
};

#define RT_SVCERR_NOTE_NS (10ull * 1000000000u) /* one health note per service per 10 s */

static struct rt_svcerr *rt_errs;
static size_t rt_nerrs;
static struct rt_fn *rt_fns;
static size_t rt_nfns, rt_capfns;
static struct rt_log **rt_logs;
static size_t rt_nlogs;
static bool rt_dirty; /* counters changed since they were saved */

static struct rt_fn *fn_find(uint32_t service_id, const char *name, bool add)
{
    struct rt_fn *grown;

    for (size_t i = 0; i < rt_nfns; i++)
        if (rt_fns[i].service_id == service_id && strcmp(rt_fns[i].name, name) == 0)
            return &rt_fns[i];
    if (!add)
        return NULL;
    if (rt_nfns == rt_capfns) {
        size_t cap = rt_capfns ? rt_capfns * 2 : 16;

        grown = realloc(rt_fns, cap * sizeof(*rt_fns));
        if (!grown)
            return NULL;
        rt_fns = grown;
        rt_capfns = cap;
    }
    memset(&rt_fns[rt_nfns], 0, sizeof(rt_fns[0]));
    rt_fns[rt_nfns].service_id = service_id;
    (void)snprintf(rt_fns[rt_nfns].name, sizeof(rt_fns[0].name), "%s", name);
    return &rt_fns[rt_nfns++];
}

void ctl_script_rt_count(uint32_t service_id, const char *function, enum ctl_script_count which,
                         uint64_t delta)
{
    struct rt_fn *f = fn_find(service_id, function ? function : "", true);

    if (f && delta) {
        f->n[which] += delta;
        rt_dirty = true;
    }
}

/* The record: a version byte (1), then per function: service id (u32), name length (u8), the
 * name, and the three counters (u64), all little-endian. */
/* 1: blocked, errors, timeouts per function; 2: and edited */
#define RT_REC_VERSION 2

static void le_put(uint8_t *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t le_get(const uint8_t *p, int n)
{
    uint64_t v = 0;

    for (int i = 0; i < n; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

int ctl_script_rt_save(struct ctl_store *st)
{
    struct ctl_txn *t = NULL;
    size_t len = 1, off = 1;
    uint8_t *buf;
    int rv;

    if (!rt_dirty)
        return 0;
    for (size_t i = 0; i < rt_nfns; i++)
        len += 4 + 1 + strlen(rt_fns[i].name) + CTL_SCRIPT_NCOUNTS * 8;
    buf = malloc(len);
    if (!buf)
        return -ENOMEM;
    buf[0] = RT_REC_VERSION;
    for (size_t i = 0; i < rt_nfns; i++) {
        size_t nl = strlen(rt_fns[i].name); /* < 128: fn_find cuts it */

        le_put(buf + off, rt_fns[i].service_id, 4);
        buf[off + 4] = (uint8_t)nl;
        memcpy(buf + off + 5, rt_fns[i].name, nl);
        off += 5 + nl;
        for (int k = 0; k < CTL_SCRIPT_NCOUNTS; k++, off += 8)
            le_put(buf + off, rt_fns[i].n[k], 8);
    }
    rv = ctl_txn_begin(st, true, &t);
    if (rv == 0)
        rv = ctl_store_bytes_put(t, CTL_SCRIPT_RT_KEY, buf, len);
    if (rv == 0) {
        rv = ctl_txn_commit(t);
        t = NULL;
    }
    if (t)
        ctl_txn_abort(t);
    free(buf);
    if (rv == 0)
        rt_dirty = false;
    return rv;
}

int ctl_script_rt_load(struct ctl_store *st)
{
    struct ctl_txn *t;
    void *data = NULL;
    size_t len = 0, off = 1, ncounts;
    const uint8_t *p;
    int rv = ctl_txn_begin(st, false, &t);

    if (rv < 0)
        return rv;
    rv = ctl_store_bytes_get(t, CTL_SCRIPT_RT_KEY, &data, &len);
    ctl_txn_abort(t);
    if (rv < 0 || !data)
        return rv;
    p = data;
    if (len < 1 || (p[0] != 1 && p[0] != RT_REC_VERSION)) {
        fgx_warn("state store: the script counters' record is of an unknown version: they "
                 "start from zero");
        goto out;
    }
    /* a version 1 record (before edited was counted): its three counters, edited from 0 */
    ncounts = p[0] == 1 ? 3 : CTL_SCRIPT_NCOUNTS;
    while (off < len) {
        char name[128];
        uint32_t sid;
        size_t nl;
        struct rt_fn *f;

        if (len - off < 5 || (nl = p[off + 4]) >= sizeof(name) || len - off < 5 + nl + ncounts * 8) {
            fgx_warn("state store: the script counters' record is cut short: the rest start "
                     "from zero");
            break;
        }
        sid = (uint32_t)le_get(p + off, 4);
        memcpy(name, p + off + 5, nl);
        name[nl] = '\0';
        off += 5 + nl;
        f = fn_find(sid, name, true);
        for (size_t k = 0; k < ncounts; k++, off += 8)
            if (f)
                f->n[k] = le_get(p + off, 8);
    }
out:
    free(data);
    rt_dirty = false;
    return 0;
}

static struct rt_log *log_find(uint32_t service_id, bool add)
{
    struct rt_log **grown, *l;

    for (size_t i = 0; i < rt_nlogs; i++)
        if (rt_logs[i]->service_id == service_id)
            return rt_logs[i];
    if (!add)
        return NULL;
    l = calloc(1, sizeof(*l));
    grown = l ? realloc(rt_logs, (rt_nlogs + 1) * sizeof(*rt_logs)) : NULL;
    if (!grown) {
        free(l);
        return NULL;
    }
    rt_logs = grown;
    l->service_id = service_id;
    l->next_seq = 1;
    rt_logs[rt_nlogs++] = l;
    return l;
}

static uint64_t rt_log_count;

uint64_t ctl_script_rt_log_count(void)
{
    return rt_log_count;
}

void ctl_script_rt_log_add(uint32_t service_id, const char *function, const char *kind,
                           const char *text, size_t len)
{
    struct rt_log *l = log_find(service_id, true);
    struct rt_entry *e;
    struct timespec ts;

    if (!l)
        return;
    e = &l->ring[l->next_seq % CTL_SCRIPT_LOG_MAX];
    free(e->text);
    memset(e, 0, sizeof(*e));
    if (len > CTL_SCRIPT_LOG_TEXT)
        len = CTL_SCRIPT_LOG_TEXT;
    e->text = malloc(len + 1);
    if (e->text) {
        memcpy(e->text, text, len);
        e->text[len] = '\0';
    }
    clock_gettime(CLOCK_REALTIME, &ts);
    e->time_ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    e->seq = l->next_seq++;
    rt_log_count++;
    (void)snprintf(e->function, sizeof(e->function), "%s", function ? function : "");
    (void)snprintf(e->kind, sizeof(e->kind), "%s", kind);
}

static struct rt_svcerr *err_find(uint32_t service_id, bool add)
{
    struct rt_svcerr *grown;

    for (size_t i = 0; i < rt_nerrs; i++)
        if (rt_errs[i].service_id == service_id)
            return &rt_errs[i];
    if (!add || !(grown = realloc(rt_errs, (rt_nerrs + 1) * sizeof(*rt_errs))))
        return NULL;
    rt_errs = grown;
    memset(&rt_errs[rt_nerrs], 0, sizeof(rt_errs[0]));
    rt_errs[rt_nerrs].service_id = service_id;
    return &rt_errs[rt_nerrs++];
}

/* A whole-service failure reported by an interpreter: kept for `script list`, and a health note
 * (the interpreter says it at most every 5 s; this notes it at most every 10 s). */
static void err_add(uint32_t service_id, const char *text)
{
    struct rt_svcerr *e = err_find(service_id, true);
    struct timespec ts;
    uint64_t now;

    if (!e)
        return;
    clock_gettime(CLOCK_REALTIME, &ts);
    now = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    (void)snprintf(e->text, sizeof(e->text), "%s", text);
    e->time_ns = now;
    e->count++;
    if (e->noted_ns == 0 || now - e->noted_ns >= RT_SVCERR_NOTE_NS) {
        e->noted_ns = now;
        ctl_health_note(service_id, CTL_HEALTH_ERROR, "script-error", e->count,
                        "the script failed for every connection: %s", text);
    }
}

void ctl_script_rt_error_clear(uint32_t service_id)
{
    struct rt_svcerr *e = err_find(service_id, false);

    if (e)
        *e = rt_errs[--rt_nerrs];
}

void ctl_script_rt_fill(struct ctl_ctx *ctx, Fgx__Ctl__Script *s)
{
    const struct rt_svcerr *e = err_find(s->service_id, false);

    (void)ctx;
    if (e && e->count > 0 && (s->error = strdup(e->text)) != NULL) {
        s->has_error_time_ns = s->has_error_count = 1;
        s->error_time_ns = e->time_ns;
        s->error_count = e->count;
    }
    for (size_t i = 0; i < s->n_functions; i++) {
        Fgx__Ctl__ScriptFunction *m = s->functions[i];
        struct rt_fn *f = fn_find(s->service_id, m->name, false);

        m->has_blocked = m->has_errors = m->has_timeouts = m->has_edited = 1;
        m->edited = f ? f->n[CTL_SCRIPT_EDITED] : 0;
        m->blocked = f ? f->n[CTL_SCRIPT_BLOCKED] : 0;
        m->errors = f ? f->n[CTL_SCRIPT_ERRORS] : 0;
        m->timeouts = f ? f->n[CTL_SCRIPT_TIMEOUTS] : 0;
    }
}

int ctl_script_rt_log(struct ctl_ctx *ctx, uint32_t service_id, uint64_t after,
                      struct ctl_script_reply *out, uint64_t *last)
{
    struct rt_log *l = log_find(service_id, false);
    uint64_t first, n;

    (void)ctx;
    *last = l ? l->next_seq - 1 : 0;
    if (!l || l->next_seq == 1)
        return 0;
    first = l->next_seq > CTL_SCRIPT_LOG_MAX ? l->next_seq - CTL_SCRIPT_LOG_MAX : 1;
    if (after + 1 > first)
        first = after + 1;
    if (first >= l->next_seq)
        return 0;
    n = l->next_seq - first;
    out->entries = calloc(n, sizeof(*out->entries));
    out->entry_ptrs = calloc(n, sizeof(*out->entry_ptrs));
    out->texts = calloc(n * 3, sizeof(*out->texts));
    if (!out->entries || !out->entry_ptrs || !out->texts)
        return -ENOMEM;
    for (uint64_t seq = first; seq < l->next_seq; seq++) {
        const struct rt_entry *e = &l->ring[seq % CTL_SCRIPT_LOG_MAX];
        Fgx__Ctl__ScriptLogEntry *m = &out->entries[out->nentries];

        fgx__ctl__script_log_entry__init(m);
        m->seq = e->seq;
        m->time_ns = e->time_ns;
        /* the reply's strings are its own: the ring may move on before it leaves */
        out->texts[out->nentries * 3] = m->function = strdup(e->function);
        out->texts[out->nentries * 3 + 1] = m->kind = strdup(e->kind);
        out->texts[out->nentries * 3 + 2] = m->text = strdup(e->text ? e->text : "");
        out->entry_ptrs[out->nentries++] = m;
    }
    return 0;
}

uint64_t ctl_script_rt_blocked(uint32_t service_id)
{
    uint64_t n = 0;

    for (size_t i = 0; i < rt_nfns; i++)
        if (rt_fns[i].service_id == service_id)
            n += rt_fns[i].n[CTL_SCRIPT_BLOCKED];
    return n;
}

void ctl_script_rt_forget(uint32_t service_id)
{
    size_t j = 0;

    for (size_t i = 0; i < rt_nfns; i++)
        if (rt_fns[i].service_id != service_id)
            rt_fns[j++] = rt_fns[i];
    if (j != rt_nfns)
        rt_dirty = true;
    rt_nfns = j;
    ctl_script_rt_error_clear(service_id);
    for (size_t i = 0; i < rt_nlogs; i++) {
        if (rt_logs[i]->service_id != service_id)
            continue;
        for (size_t k = 0; k < CTL_SCRIPT_LOG_MAX; k++)
            free(rt_logs[i]->ring[k].text);
        free(rt_logs[i]);
        rt_logs[i] = rt_logs[--rt_nlogs];
        break;
    }
}

void ctl_script_rt_ingest(const struct fgx_dp_stats *st)
{
    for (size_t i = 0; i < st->nscript_logs; i++) {
        const struct fgx_dp_script_log *e = &st->script_logs[i];

        if (strcmp(e->kind, "block") == 0)
            ctl_script_rt_count(e->service_id, e->function, CTL_SCRIPT_BLOCKED, 1);
        else if (strcmp(e->kind, "exception") == 0)
            ctl_script_rt_count(e->service_id, e->function, CTL_SCRIPT_ERRORS, 1);
        else if (strcmp(e->kind, "timeout") == 0)
            ctl_script_rt_count(e->service_id, e->function, CTL_SCRIPT_TIMEOUTS, 1);
        else if (strcmp(e->kind, "edit") == 0)
            ctl_script_rt_count(e->service_id, e->function, CTL_SCRIPT_EDITED, 1);
        else if (strcmp(e->kind, "error") == 0)
            err_add(e->service_id, e->text);
        ctl_script_rt_log_add(e->service_id, e->function, e->kind, e->text, strlen(e->text));
    }
    if (st->script_logs_lost > 0) {
        static uint64_t reported;

        if (st->script_logs_lost > reported)
            fgx_warn("%llu script log entries lost (the worker's queue was full)",
                     (unsigned long long)(st->script_logs_lost - reported));
        reported = st->script_logs_lost;
    }
}
