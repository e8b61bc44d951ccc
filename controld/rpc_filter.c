/* controld control API, the filter family: add, list, enable, disable, set, rm, import, export.
 * A regex is checked (compiled, linted) before it is stored; a ruleset import replaces or adds a
 * service's filters in one transaction and carries each line's warnings back. */
#include "controld/ctl_rpc_cmd.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fgx/log.h"

/* A filter identical to one the service has (ctl_filter_same()) is refused, naming that one. */
static int refuse_duplicate(struct ctl_rpc *r, struct ctl_txn *t, const struct ctl_filter *f,
                            const char *service)
{
    struct ctl_filter *fs = NULL;
    size_t n = 0;
    long i;
    int rv = ctl_store_filter_list(t, f->service_id, &fs, &n);

    if (rv < 0) {
        ctl_rpc_store_fail(r, rv);
        return rv;
    }
    i = ctl_diff_find_same(fs, n, f);
    if (i >= 0) {
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_EXISTS,
                     "identical to filter %u of service %s (same regex, direction, case and action)",
                     fs[i].id, service);
        r->reply.has_duplicate_of = 1;
        r->reply.duplicate_of = fs[i].id;
        rv = -EEXIST;
    }
    ctl_filters_free(fs, n);
    return rv;
}

static int extra_check(struct ctl_rpc *r, bool has_action, int action, const char *label)
{
    char why[256];

    if (ctl_config_filter_extra_check(has_action, action, label, why, sizeof(why)) < 0) {
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID, "%s", why);
        return -EINVAL;
    }
    return 0;
}

/* ctl_rpc_filter_breadth() of a stored filter, named by its id. */
static int filter_breadth(struct ctl_rpc *r, struct ctl_txn *t, const struct ctl_filter *f,
                          const char *verb)
{
    struct ctl_service svc;
    char what[32];
    int rv = ctl_store_service_get(t, f->service_id, &svc);

    if (rv < 0) {
        ctl_rpc_store_fail(r, rv);
        return rv;
    }
    (void)snprintf(what, sizeof(what), "filter %u", f->id);
    return ctl_rpc_filter_breadth(r, t, &svc, f, what, verb);
}

static void do_filter_add(struct ctl_rpc *r, const Fgx__Ctl__Request *q)
{
    const Fgx__Ctl__FilterAdd *a = q->filter_add;
    struct ctl_filter f = {0};
    struct ctl_service svc;
    struct ctl_txn *t = NULL;
    int rv;

    if (ctl_rpc_txn_begin(r, true, &t) < 0)
        return;
    if (ctl_rpc_service_resolve(r, t, a->service, &svc) < 0)
        goto out;
    if (svc.layer == CTL_LAYER_EXTERNAL) {
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID,
                     "service %s is on the external layer: %s", svc.name, CTL_EXTERNAL_NO_FILTER);
        goto out;
    }
    f.nocase = a->has_nocase && a->nocase;
    if (ctl_rpc_check_regex(r, a->regex, f.nocase, svc.ipproto, &r->add_warn) < 0)
        goto out;
    if (extra_check(r, a->has_action, a->action, a->label) < 0)
        goto out;
    f.log = a->has_action && a->action == FGX__CTL__FILTER_ACTION__FILTER_ACTION_LOG;
    if (a->label && a->label[0] != '\0') {
        f.label = strdup(a->label);
        if (!f.label) {
            ctl_rpc_store_fail(r, -ENOMEM);
            goto out;
        }
    }
    f.service_id = svc.id;
    f.dir = !a->has_dir                         ? FGX_DIR_BOTH
            : a->dir == FGX__CTL__DIR__DIR_C2S  ? FGX_DIR_C2S
            : a->dir == FGX__CTL__DIR__DIR_S2C  ? FGX_DIR_S2C
            : a->dir == FGX__CTL__DIR__DIR_BOTH ? FGX_DIR_BOTH
                                                : 0;
    if (f.dir == 0) {
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID, "invalid direction: use c2s, s2c or both");
        goto out;
    }
    f.active = true;
    f.regex = strdup(a->regex);
    if (!f.regex) {
        ctl_rpc_store_fail(r, -ENOMEM);
        goto out;
    }
    if (refuse_duplicate(r, t, &f, svc.name) < 0)
        goto out;
    if (ctl_rpc_filter_breadth(r, t, &svc, &f, "the filter", "add it") < 0)
        goto out;
    rv = ctl_store_filter_put(t, &f);
    if (rv < 0) {
        ctl_rpc_store_fail(r, rv);
        goto out;
    }
    if (ctl_rpc_reply_filter(r, t, &f) < 0)
        goto out;
    for (size_t i = 0; i < r->add_warn.n; i++)
        r->add_warn_ptrs[i] = r->add_warn.text[i];
    r->flt_msgs[0].n_warnings = r->add_warn.n;
    r->flt_msgs[0].warnings = r->add_warn_ptrs;
    ctl_rpc_finish(r, &t, true);
    if (!ctl_rpc_failed(r) || r->reply.code == FGX__CTL__CODE__CODE_UNAVAILABLE)
        fgx_info("filter %u added to service %s%s%s", r->flts[0].id, svc.name,
                 r->flts[0].log ? " (log only)" : "",
                 r->add_warn.n ? " (with a warning: likely to block honest traffic)" : "");
out:
    ctl_filter_release(&f);
    ctl_txn_abort(t);
}

static void do_filter_list(struct ctl_rpc *r, const char *ref)
{
    struct ctl_filter *fs = NULL;
    struct ctl_service svc;
    struct ctl_txn *t;
    size_t n = 0;
    int rv;

    ctl_stats_refresh(r->ctx, CTL_RPC_STATS_TIMEOUT_MS);
    if (ctl_rpc_txn_begin(r, false, &t) < 0)
        return;
    if (ctl_rpc_service_resolve(r, t, ref, &svc) < 0)
        goto out;
    rv = ctl_store_filter_list(t, svc.id, &fs, &n);
    if (rv < 0) {
        ctl_rpc_store_fail(r, rv);
        goto out;
    }
    ctl_rpc_reply_filters(r, t, fs, n);
out:
    ctl_txn_abort(t);
}

/* --dir as a filter's direction, or 0 when invalid. */
static enum fgx_dir dir_of(protobuf_c_boolean has_dir, Fgx__Ctl__Dir d)
{
    return !has_dir                       ? FGX_DIR_BOTH
           : d == FGX__CTL__DIR__DIR_C2S  ? FGX_DIR_C2S
           : d == FGX__CTL__DIR__DIR_S2C  ? FGX_DIR_S2C
           : d == FGX__CTL__DIR__DIR_BOTH ? FGX_DIR_BOTH
                                          : 0;
}

/* `filter set --regex R [--dir D] [--nocase]`: the pattern of f edited in place, checked as an
 * add checks one (compiled and linted, not identical to another filter of the service). The
 * filter keeps its id, counters, timeline and enabled state; its revision goes up, so that the
 * workers believe the old regex nowhere, not even in an open flow's old stream
 * (FGX_FILTER_ID_REV). The old text goes into the change's history line. Sets *changed. */
static int pattern_edit(struct ctl_rpc *r, struct ctl_txn *t, const Fgx__Ctl__FilterSet *a,
                        struct ctl_filter *f, bool *changed)
{
    struct ctl_service svc;
    enum fgx_dir dir = a->has_dir ? dir_of(1, a->dir) : f->dir;
    bool nocase = a->has_nocase ? (bool)a->nocase : f->nocase;
    const char *regex = a->regex && a->regex[0] ? a->regex : f->regex;
    char *old = f->regex, *copy;
    enum fgx_dir old_dir = f->dir;
    bool old_nocase = f->nocase;
    size_t hl;
    int rv;

    if (a->regex && a->regex[0] == '\0') {
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID, "filter set: the regex is empty");
        return -EINVAL;
    }
    if (dir == 0) {
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID, "invalid direction: use c2s, s2c or both");
        return -EINVAL;
    }
    if (strcmp(regex, f->regex) == 0 && dir == f->dir && nocase == f->nocase)
        return 0; /* the same pattern: nothing to edit */
    rv = ctl_store_service_get(t, f->service_id, &svc);
    if (rv < 0) {
        ctl_rpc_store_fail(r, rv);
        return rv;
    }
    if (ctl_rpc_check_regex(r, regex, nocase, svc.ipproto, &r->add_warn) < 0)
        return -EINVAL;
    copy = strdup(regex);
    if (!copy) {
        ctl_rpc_store_fail(r, -ENOMEM);
        return -ENOMEM;
    }
    f->regex = copy;
    f->dir = dir;
    f->nocase = nocase;
    rv = refuse_duplicate(r, t, f, svc.name);
    /* A block filter with a new pattern is judged as a new block filter. */
    if (rv == 0 && f->active && !f->log)
        rv = filter_breadth(r, t, f, "edit it");
    if (rv < 0) {
        free(copy);
        f->regex = old;
        f->dir = old_dir;
        f->nocase = old_nocase;
        return rv;
    }
    /* The change's history line keeps what it was: "... (was c2s '/old/')". */
    hl = strlen(r->hist_what);
    if (hl < sizeof(r->hist_what))
        (void)snprintf(r->hist_what + hl, sizeof(r->hist_what) - hl, " (was %s%s '%.200s')",
                       old_dir == FGX_DIR_C2S   ? "c2s"
                       : old_dir == FGX_DIR_S2C ? "s2c"
                                                : "both",
                       old_nocase ? " nocase" : "", old);
    free(old);
    f->revision++;
    f->edited = (uint64_t)time(NULL);
    *changed = true;
    return 0;
}

/* `filter set FILTER [--action block|log] [--label L] [--regex R [--dir D] [--nocase]]`: the
 * filter keeps its id, counters and database place; a change of action or pattern is a new
 * generation pushed as enable/disable push one (the reply waits for the workers'
 * acknowledgement), a label alone changes no database. */
static void do_filter_set(struct ctl_rpc *r, const Fgx__Ctl__Request *q)
{
    const Fgx__Ctl__FilterSet *a = q->filter_set;
    struct ctl_filter f = {0};
    struct ctl_txn *t = NULL;
    bool changed = false, edit;
    int rv;

    if (!a || !a->ref) {
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID, "no filter given");
        return;
    }
    edit = a->regex || a->has_dir || a->has_nocase;
    if (!a->has_action && !a->label && !edit) {
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID,
                     "nothing to set: give --regex R, --dir, --nocase, --action block|log or "
                     "--label TEXT");
        return;
    }
    if (extra_check(r, a->has_action, a->action, a->label) < 0)
        return;
    if (ctl_rpc_txn_begin(r, true, &t) < 0)
        return;
    if (ctl_rpc_filter_resolve(r, t, a->ref, &f) < 0)
        goto out;
    if (a->has_action) {
        bool log = a->action == FGX__CTL__FILTER_ACTION__FILTER_ACTION_LOG;
        bool switched = f.log != log;

        changed |= switched;
        f.log = log;
        /* A log filter that starts blocking is judged as a new block filter (unless its
         * pattern changes too: then it is judged once, with the new one). */
        if (switched && !log && !edit && filter_breadth(r, t, &f, "make it block") < 0)
            goto out;
    }
    if (edit && pattern_edit(r, t, a, &f, &changed) < 0)
        goto out;
    if (a->label) {
        const char *old = f.label ? f.label : "";

        if (strcmp(old, a->label) != 0) {
            free(f.label);
            f.label = a->label[0] ? strdup(a->label) : NULL;
            if (a->label[0] && !f.label) {
                ctl_rpc_store_fail(r, -ENOMEM);
                goto out;
            }
            changed = true;
        }
    }
    if (changed) {
        rv = ctl_store_filter_put(t, &f);
        if (rv < 0) {
            ctl_rpc_store_fail(r, rv);
            goto out;
        }
    }
    if (ctl_rpc_reply_filter(r, t, &f) < 0)
        goto out;
    for (size_t i = 0; i < r->add_warn.n; i++)
        r->add_warn_ptrs[i] = r->add_warn.text[i];
    r->flt_msgs[0].n_warnings = r->add_warn.n;
    r->flt_msgs[0].warnings = r->add_warn_ptrs;
    ctl_rpc_finish(r, &t, true);
    if ((!ctl_rpc_failed(r) || r->reply.code == FGX__CTL__CODE__CODE_UNAVAILABLE) && changed)
        fgx_info("filter %s set: action %s%s%s%s", a->ref, r->flts[0].log ? "log" : "block",
                 r->flts[0].label ? ", label " : "", r->flts[0].label ? r->flts[0].label : "",
                 edit && r->flts[0].revision ? ", pattern edited" : "");
out:
    ctl_filter_release(&f);
    ctl_txn_abort(t);
}

static void do_filter_active(struct ctl_rpc *r, const char *ref, bool active)
{
    struct ctl_filter f = {0};
    struct ctl_txn *t = NULL;
    int rv;

    if (ctl_rpc_txn_begin(r, true, &t) < 0)
        return;
    if (ctl_rpc_filter_resolve(r, t, ref, &f) < 0)
        goto out;
    if (f.active != active) {
        f.active = active;
        if (active && filter_breadth(r, t, &f, "enable it") < 0)
            goto out;
        rv = ctl_store_filter_put(t, &f);
        if (rv < 0) {
            ctl_rpc_store_fail(r, rv);
            goto out;
        }
    }
    if (ctl_rpc_reply_filter(r, t, &f) < 0)
        goto out;
    ctl_rpc_finish(r, &t, true);
    if (!ctl_rpc_failed(r))
        fgx_info("filter %s %s", ref, active ? "enabled" : "disabled");
out:
    ctl_filter_release(&f);
    ctl_txn_abort(t);
}

static void do_filter_rm(struct ctl_rpc *r, const Fgx__Ctl__Request *q)
{
    const char *ref = ctl_rpc_ref(q->filter_rm);
    struct ctl_filter f = {0};
    struct ctl_txn *t = NULL;
    uint64_t b = 0, retired = 0;
    uint32_t id, sid;
    int rv;

    if (ctl_rpc_txn_begin(r, true, &t) < 0)
        return;
    if (ctl_rpc_filter_resolve(r, t, ref, &f) < 0)
        goto out;
    id = f.id;
    sid = f.service_id;
    if (ctl_rpc_reply_filter(r, t, &f) < 0)
        goto out;
    /* A total never goes down: the filter's blocks stay in its service's. */
    rv = ctl_rpc_blocked_of(r, t, id, &b);
    if (rv == 0)
        rv = ctl_store_retired_get(t, sid, &retired);
    if (rv == 0)
        rv = ctl_store_retired_set(t, sid, retired + b);
    if (rv == 0)
        rv = ctl_store_filter_del(t, id);
    if (rv < 0) {
        ctl_rpc_store_fail(r, rv);
        goto out;
    }
    ctl_rpc_finish(r, &t, true);
    if (!ctl_rpc_failed(r))
        fgx_info("filter %u removed", id);
out:
    ctl_filter_release(&f);
    ctl_txn_abort(t);
}

static int warn_cmp(const void *key, const void *elem)
{
    uint32_t id = *(const uint32_t *)key;
    const struct ctl_config_warning *w = elem;

    return id < w->filter_id ? -1 : id > w->filter_id;
}

/* Each imported line's warnings onto the reply's filter it became, as "line N: ...". */
static int reply_import_warnings(struct ctl_rpc *r)
{
    size_t total = 0, k = 0;

    for (size_t i = 0; i < r->nimp_warn; i++)
        total += r->imp_warn[i].w.n;
    if (total == 0)
        return 0;
    r->imp_text = calloc(total, sizeof(*r->imp_text));
    r->imp_ptrs = calloc(total, sizeof(*r->imp_ptrs));
    if (!r->imp_text || !r->imp_ptrs) {
        ctl_rpc_store_fail(r, -ENOMEM);
        return -ENOMEM;
    }
    for (size_t i = 0; i < r->nflts; i++) {
        const struct ctl_config_warning *w =
            bsearch(&r->flts[i].id, r->imp_warn, r->nimp_warn, sizeof(*r->imp_warn), warn_cmp);

        if (!w)
            continue;
        r->flt_msgs[i].warnings = &r->imp_ptrs[k];
        r->flt_msgs[i].n_warnings = w->w.n;
        for (size_t j = 0; j < w->w.n; j++, k++) {
            snprintf(r->imp_text[k], sizeof(r->imp_text[k]), "line %u: %s", w->line, w->w.text[j]);
            r->imp_ptrs[k] = r->imp_text[k];
        }
    }
    return 0;
}

/* Every line of a ruleset that would become a block filter the service does not have blocking
 * already is judged as `filter add` judges one (ctl_rpc_filters_breadth(), all at once): one
 * that needs --force refuses the whole file, naming its line. Lines the import refuses for
 * another reason are left to it. */
static int import_breadth(struct ctl_rpc *r, struct ctl_txn *t, const Fgx__Ctl__FilterImport *imp)
{
    bool sync = imp->has_sync && imp->sync, replace = imp->has_replace && imp->replace;
    struct ctl_filter *old = NULL, *fs = NULL;
    char (*what)[96] = NULL;
    const char **whats = NULL;
    struct ctl_service svc;
    size_t nold = 0, n = 0;
    int rv;

    if ((r->req && r->req->has_force && r->req->force) || imp->n_filters == 0)
        return 0;
    if (ctl_rpc_service_resolve(r, t, imp->service, &svc) < 0)
        return -ENOENT;
    if (svc.layer == CTL_LAYER_EXTERNAL)
        return 0; /* no filters at all: the import says so */
    rv = ctl_store_filter_list(t, svc.id, &old, &nold);
    if (rv < 0) {
        ctl_rpc_store_fail(r, rv);
        return rv;
    }
    fs = calloc(imp->n_filters, sizeof(*fs));
    what = calloc(imp->n_filters, sizeof(*what));
    whats = calloc(imp->n_filters, sizeof(*whats));
    if (!fs || !what || !whats) {
        ctl_rpc_store_fail(r, -ENOMEM);
        rv = -ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < imp->n_filters; i++) {
        const Fgx__Ctl__FilterSpec *s = imp->filters[i];
        struct ctl_filter f = {.service_id = svc.id, .regex = s->regex,
                               .nocase = s->has_nocase && s->nocase,
                               .active = !s->has_active || s->active,
                               .log = s->has_action &&
                                      s->action == FGX__CTL__FILTER_ACTION__FILTER_ACTION_LOG,
                               .dir = !s->has_dir || s->dir == FGX__CTL__DIR__DIR_BOTH
                                          ? FGX_DIR_BOTH
                                      : s->dir == FGX__CTL__DIR__DIR_C2S ? FGX_DIR_C2S
                                                                         : FGX_DIR_S2C};
        char why[768];
        long same;

        if (!s->regex || !*s->regex || f.log || !f.active ||
            ctl_config_regex_lint_cached(s->regex, f.nocase, svc.ipproto, NULL, why,
                                         sizeof(why)) < 0)
            continue; /* a refused regex: the import names its line */
        same = ctl_diff_find_same(old, nold, &f);
        /* kept as it is: --sync keeps the service's enabled state, --replace takes the line's */
        if (same >= 0 && (old[same].active || sync || !replace))
            continue;
        (void)snprintf(what[n], sizeof(what[n]), "line %u (/%.40s%s/)",
                       s->has_line ? s->line : (uint32_t)(i + 1), s->regex,
                       strlen(s->regex) > 40 ? "..." : "");
        whats[n] = what[n];
        fs[n++] = f;
    }
    rv = ctl_rpc_filters_breadth(r, t, &svc, fs, n, whats, "import the file");
out:
    free(fs); /* its strings are the request's */
    free(what);
    free(whats);
    ctl_filters_free(old, nold);
    return rv;
}

static void do_filter_import(struct ctl_rpc *r, const Fgx__Ctl__Request *q)
{
    const Fgx__Ctl__FilterImport *imp = q->filter_import;
    struct ctl_filter *fs = NULL;
    struct ctl_txn *t = NULL;
    uint32_t sid = 0;
    size_t n = 0;
    char err[1024];
    int rv;

    if (!imp) {
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID, "no ruleset given");
        return;
    }
    if (ctl_rpc_txn_begin(r, true, &t) < 0)
        return;
    ctl_rpc_import_opts(r, false);
    if (import_breadth(r, t, imp) < 0)
        goto out;
    rv = ctl_config_filter_import_ex(t, imp, &r->imp, &sid, &r->imp_warn, &r->nimp_warn, err,
                                     sizeof(err));
    if (rv < 0) {
        ctl_rpc_fail(r, ctl_rpc_config_code(rv), "%s", err);
        if (r->imp.duplicate_of) {
            r->reply.has_duplicate_of = 1;
            r->reply.duplicate_of = r->imp.duplicate_of;
        }
        goto out;
    }
    if (ctl_rpc_reply_diff(r) < 0)
        goto out;
    rv = ctl_store_filter_list(t, sid, &fs, &n);
    if (rv < 0) {
        ctl_rpc_store_fail(r, rv);
        goto out;
    }
    if (ctl_rpc_reply_filters(r, t, fs, n) < 0 || reply_import_warnings(r) < 0)
        goto out;
    if (q->has_dry_run && q->dry_run) {
        ctl_rpc_dry_finish(r, &t);
        goto out;
    }
    ctl_rpc_finish(r, &t, true);
    if (!ctl_rpc_failed(r) || r->reply.code == FGX__CTL__CODE__CODE_UNAVAILABLE)
        fgx_info("%zu filter(s) imported into service %s%s", imp->n_filters, imp->service,
                 imp->has_replace && imp->replace ? ", replacing the others" : "");
out:
    ctl_txn_abort(t);
}

static void filter_list(struct ctl_rpc *r, const Fgx__Ctl__Request *q)
{
    do_filter_list(r, ctl_rpc_ref(q->filter_list));
}

static void filter_enable(struct ctl_rpc *r, const Fgx__Ctl__Request *q)
{
    do_filter_active(r, ctl_rpc_ref(q->filter_enable), true);
}

static void filter_disable(struct ctl_rpc *r, const Fgx__Ctl__Request *q)
{
    do_filter_active(r, ctl_rpc_ref(q->filter_disable), false);
}

/* An export is the list; fgexctl writes it as a ruleset file. */
static void filter_export(struct ctl_rpc *r, const Fgx__Ctl__Request *q)
{
    do_filter_list(r, ctl_rpc_ref(q->filter_export));
}

const struct ctl_rpc_cmd ctl_rpc_filter_cmds[] = {
    {FGX__CTL__REQUEST__REQ_FILTER_ADD, do_filter_add, CTL_RPC_CHANGE},
    {FGX__CTL__REQUEST__REQ_FILTER_LIST, filter_list, 0},
    {FGX__CTL__REQUEST__REQ_FILTER_ENABLE, filter_enable, CTL_RPC_CHANGE},
    {FGX__CTL__REQUEST__REQ_FILTER_DISABLE, filter_disable, CTL_RPC_CHANGE},
    {FGX__CTL__REQUEST__REQ_FILTER_RM, do_filter_rm, CTL_RPC_CHANGE},
    {FGX__CTL__REQUEST__REQ_FILTER_SET, do_filter_set, CTL_RPC_CHANGE},
    {FGX__CTL__REQUEST__REQ_FILTER_IMPORT, do_filter_import, CTL_RPC_CHANGE},
    {FGX__CTL__REQUEST__REQ_FILTER_EXPORT, filter_export, 0},
    {0, NULL, 0},
};
