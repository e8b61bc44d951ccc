/* controld control API, the firewall family: fw rule add/rm/move/enable/disable, list (and
 * export), policy, set, enable/disable, import, confirm. Every change loads the stored
 * configuration, edits a copy, compiles and installs it in the kernel (one transaction), and
 * commits it; a change the kernel refuses stores nothing, and one whose commit fails puts the
 * kernel back. With Request.fw_confirm_secs the change is reverted unless `fw confirm` comes
 * in time (ctl_fw.c). Backups carry the configuration through ctl_rpc_fw_export/import. */
#include "controld/ctl_rpc_cmd.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "controld/ctl_fw.h"
#include "fgx/log.h"

/* What a reply points into, freed with the request (ctl_rpc_fw_release()). */
struct ctl_rpc_fw {
    struct ctl_fw_conf conf;
    Fgx__Ctl__FwConfig msg;
    Fgx__Ctl__FwState state;
    bool has_msg;
    /* config import: the configuration to install once committed */
    bool import_pending;
    struct ctl_fw_conf imported;
};

static struct ctl_rpc_fw *rpc_fw(struct ctl_rpc *r)
{
    if (!r->fw) {
        r->fw = calloc(1, sizeof(*r->fw));
        if (r->fw) {
            ctl_fw_conf_init(&r->fw->conf);
            ctl_fw_conf_init(&r->fw->imported);
        }
    }
    return r->fw;
}

void ctl_rpc_fw_release(struct ctl_rpc *r)
{
    if (!r->fw)
        return;
    if (r->fw->has_msg)
        ctl_fw_msg_release(&r->fw->msg);
    ctl_fw_conf_release(&r->fw->conf);
    ctl_fw_conf_release(&r->fw->imported);
    free(r->fw);
    r->fw = NULL;
}

/* The configuration c (moved into the reply) and the kernel's state. */
static void reply_conf(struct ctl_rpc *r, struct ctl_fw_conf *c)
{
    struct ctl_rpc_fw *f = rpc_fw(r);
    const struct ctl_fw_state *st;

    if (!f) {
        ctl_rpc_store_fail(r, -ENOMEM);
        ctl_fw_conf_release(c);
        return;
    }
    ctl_fw_conf_release(&f->conf);
    f->conf = *c;
    memset(c, 0, sizeof(*c));
    if (ctl_fw_conf_to_msg(&f->conf, &f->msg) < 0) {
        ctl_rpc_store_fail(r, -ENOMEM);
        return;
    }
    f->has_msg = true;
    r->reply.fw = &f->msg;
    fgx__ctl__fw_state__init(&f->state);
    st = ctl_fw_state(r->ctx->fw);
    f->state.mode = (char *)st->mode;
    f->state.has_lookups = f->state.has_pieces = f->state.has_maps = true;
    f->state.has_elements = f->state.has_compile_us = f->state.has_apply_us = true;
    f->state.lookups = st->lookups;
    f->state.pieces = st->pieces;
    f->state.maps = st->maps;
    f->state.elements = st->elements;
    f->state.compile_us = st->compile_us;
    f->state.apply_us = st->apply_us;
    f->state.has_elements_changed = true;
    f->state.elements_changed = st->changed;
    f->state.has_pending_secs = true;
    f->state.pending_secs = ctl_fw_pending_secs(r->ctx->fw);
    r->reply.fw_state = &f->state;
}

static bool fw_available(struct ctl_rpc *r)
{
    if (r->ctx->fw)
        return true;
    ctl_rpc_fail(r, FGX__CTL__CODE__CODE_ERROR, "the firewall is not available in this controld");
    return false;
}

typedef int (*fw_edit_fn)(struct ctl_rpc *r, const Fgx__Ctl__Request *q, struct ctl_fw_conf *c);

/* The common path of every change: edit a copy, install it, commit it. */
static void fw_change(struct ctl_rpc *r, const Fgx__Ctl__Request *q, fw_edit_fn edit)
{
    struct ctl_fw_conf old, c;
    struct ctl_txn *t = NULL;
    uint32_t secs = q->has_fw_confirm_secs ? q->fw_confirm_secs : 0;
    char err[512];
    int rv;

    ctl_fw_conf_init(&old);
    ctl_fw_conf_init(&c);
    if (!fw_available(r))
        return;
    if (q->has_fw_confirm_secs && (secs == 0 || secs > CTL_FW_CONFIRM_MAX)) {
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID, "--confirm takes 1 to %u seconds",
                     CTL_FW_CONFIRM_MAX);
        return;
    }
    /* The window's revert goes back to the configuration before it: a change made without
     * --confirm meanwhile would be undone with it, unasked. It is refused instead; one with
     * --confirm joins the window (its deadline the new one) and goes or stays with it. */
    if (secs == 0 && ctl_fw_pending_secs(r->ctx->fw) > 0) {
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID,
                     "a firewall change waits for confirmation (%u s left) and its revert would "
                     "undo this one: run `fgexctl fw confirm` first, or give this change "
                     "--confirm too; nothing was changed",
                     (unsigned)ctl_fw_pending_secs(r->ctx->fw));
        return;
    }
    if (ctl_rpc_txn_begin(r, true, &t) < 0)
        return;
    rv = ctl_fw_conf_load(t, &old);
    if (rv == 0)
        rv = ctl_fw_conf_copy(&old, &c);
    if (rv < 0) {
        ctl_rpc_store_fail(r, rv);
        goto out;
    }
    if (edit(r, q, &c) < 0)
        goto out;
    if (c.n > CTL_FW_RULES_MAX) {
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID,
                     "%zu firewall rules: a list holds at most %d; nothing was changed", c.n,
                     CTL_FW_RULES_MAX);
        goto out;
    }
    rv = ctl_fw_conf_check_names(&c, err, sizeof(err));
    if (rv < 0) {
        ctl_rpc_fail(r, rv == -EEXIST ? FGX__CTL__CODE__CODE_EXISTS : FGX__CTL__CODE__CODE_ERROR,
                     "%s", rv == -ENOMEM ? "out of memory" : err);
        goto out;
    }
    if (secs > 0 && (rv = ctl_fw_pending_begin(r->ctx->fw, t, &old, secs)) < 0) {
        ctl_rpc_store_fail(r, rv);
        goto out;
    }
    rv = ctl_fw_conf_save(t, &c);
    if (rv < 0) {
        ctl_rpc_store_fail(r, rv);
        goto out;
    }
    /* The kernel first: a table it refuses leaves everything as it was. */
    rv = ctl_fw_apply(r->ctx->fw, &c, err, sizeof(err));
    if (rv < 0) {
        ctl_rpc_fail(r,
                     rv == -EINVAL || rv == -E2BIG ? FGX__CTL__CODE__CODE_INVALID
                                                   : FGX__CTL__CODE__CODE_ERROR,
                     "%s; nothing was changed", err);
        goto out;
    }
    rv = ctl_txn_commit(t);
    t = NULL;
    if (rv < 0) {
        if (ctl_fw_apply(r->ctx->fw, &old, err, sizeof(err)) < 0)
            fgx_err("fw: the store refused the change and the old rules could not be put "
                    "back: %s",
                    err);
        ctl_rpc_store_fail(r, rv);
        goto out;
    }
    if (secs > 0) {
        ctl_fw_pending_arm(r->ctx->fw, &old, secs);
        fgx_info("fw: change applied; reverted in %u s unless confirmed (fgexctl fw confirm)",
                 (unsigned)secs);
    }
    reply_conf(r, &c);
out:
    ctl_txn_abort(t);
    ctl_fw_conf_release(&old);
    ctl_fw_conf_release(&c);
}

static int find_rule(struct ctl_rpc *r, const struct ctl_fw_conf *c, const Fgx__Ctl__FwRuleRef *ref,
                     size_t *pos)
{
    if (!ref || !ref->ref) {
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID, "which rule? give its id or name");
        return -EINVAL;
    }
    if (ctl_fw_conf_find(c, ref->ref, pos) < 0) {
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_NOT_FOUND, "no firewall rule \"%s\"", ref->ref);
        return -ENOENT;
    }
    return 0;
}

static int edit_add(struct ctl_rpc *r, const Fgx__Ctl__Request *q, struct ctl_fw_conf *c)
{
    const Fgx__Ctl__FwRuleAdd *a = q->fw_rule_add;
    struct ctl_fw_rule rule;
    char why[400];
    size_t pos;

    if (!a || !a->rule) {
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID, "no rule given");
        return -EINVAL;
    }
    if (ctl_fw_rule_from_msg(a->rule, &rule, why, sizeof(why)) < 0) {
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID, "%s", why);
        return -EINVAL;
    }
    pos = c->n;
    if (a->has_at && a->at > 0) {
        if (a->at > c->n + 1) {
            ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID,
                         "--at %u is past the end: the list has %zu rules", (unsigned)a->at, c->n);
            return -EINVAL;
        }
        pos = a->at - 1;
    }
    rule.id = c->next_id++;
    if (ctl_fw_conf_insert(c, &rule, pos) < 0) {
        ctl_rpc_store_fail(r, -ENOMEM);
        return -ENOMEM;
    }
    return 0;
}

static int edit_rm(struct ctl_rpc *r, const Fgx__Ctl__Request *q, struct ctl_fw_conf *c)
{
    size_t pos;

    if (find_rule(r, c, q->fw_rule_rm, &pos) < 0)
        return -ENOENT;
    memmove(&c->rules[pos], &c->rules[pos + 1], (c->n - pos - 1) * sizeof(*c->rules));
    c->n--;
    return 0;
}

static int edit_move(struct ctl_rpc *r, const Fgx__Ctl__Request *q, struct ctl_fw_conf *c)
{
    const Fgx__Ctl__FwRuleRef *ref = q->fw_rule_move;
    struct ctl_fw_rule rule;
    size_t pos;

    if (find_rule(r, c, ref, &pos) < 0)
        return -ENOENT;
    if (!ref->has_to || ref->to == 0 || ref->to > c->n) {
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID, "move to a position from 1 to %zu", c->n);
        return -EINVAL;
    }
    rule = c->rules[pos];
    memmove(&c->rules[pos], &c->rules[pos + 1], (c->n - pos - 1) * sizeof(*c->rules));
    c->n--;
    return ctl_fw_conf_insert(c, &rule, ref->to - 1);
}

static int set_active(struct ctl_rpc *r, const Fgx__Ctl__FwRuleRef *ref, struct ctl_fw_conf *c,
                      bool on)
{
    size_t pos;

    if (find_rule(r, c, ref, &pos) < 0)
        return -ENOENT;
    c->rules[pos].active = on;
    return 0;
}

static int edit_enable(struct ctl_rpc *r, const Fgx__Ctl__Request *q, struct ctl_fw_conf *c)
{
    return set_active(r, q->fw_rule_enable, c, true);
}

static int edit_disable(struct ctl_rpc *r, const Fgx__Ctl__Request *q, struct ctl_fw_conf *c)
{
    return set_active(r, q->fw_rule_disable, c, false);
}

static int edit_policy(struct ctl_rpc *r, const Fgx__Ctl__Request *q, struct ctl_fw_conf *c)
{
    const Fgx__Ctl__FwPolicy *p = q->fw_policy;
    unsigned dir;

    if (!p || (p->action != FGX__CTL__FW_ACTION__FW_ACCEPT &&
               p->action != FGX__CTL__FW_ACTION__FW_DROP)) {
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID, "the policy is accept or drop");
        return -EINVAL;
    }
    dir = p->has_dir ? (unsigned)p->dir : CTL_FW_IN;
    if (dir >= CTL_FW_NHOOKS) {
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID, "unknown direction");
        return -EINVAL;
    }
    c->policy_drop[dir] = p->action == FGX__CTL__FW_ACTION__FW_DROP;
    return 0;
}

static int edit_set(struct ctl_rpc *r, const Fgx__Ctl__Request *q, struct ctl_fw_conf *c)
{
    const Fgx__Ctl__FwSet *s = q->fw_set;
    int opt = s ? ctl_fw_opt_parse(s->option) : -1;

    if (opt < 0) {
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID,
                     "unknown option \"%s\": loopback, established, invalid, icmp or dhcp",
                     s && s->option ? s->option : "");
        return -EINVAL;
    }
    c->opt[opt] = s->on;
    return 0;
}

static int edit_switch(struct ctl_rpc *r, const Fgx__Ctl__Request *q, struct ctl_fw_conf *c)
{
    (void)r;
    c->enabled = q->fw_switch && q->fw_switch->enabled;
    return 0;
}

static int edit_import(struct ctl_rpc *r, const Fgx__Ctl__Request *q, struct ctl_fw_conf *c)
{
    const Fgx__Ctl__FwImport *imp = q->fw_import;
    char why[400];

    c->n = 0;
    for (size_t i = 0; imp && i < imp->n_rules; i++) {
        const Fgx__Ctl__FwRule *m = imp->rules[i];
        struct ctl_fw_rule rule;

        if (ctl_fw_rule_from_msg(m, &rule, why, sizeof(why)) < 0) {
            ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID, "line %u: %s; nothing was changed",
                         m->has_line ? (unsigned)m->line : (unsigned)(i + 1), why);
            return -EINVAL;
        }
        rule.id = c->next_id++;
        if (ctl_fw_conf_insert(c, &rule, c->n) < 0) {
            ctl_rpc_store_fail(r, -ENOMEM);
            return -ENOMEM;
        }
    }
    return 0;
}

static void do_fw_change(struct ctl_rpc *r, const Fgx__Ctl__Request *q)
{
    static const struct {
        Fgx__Ctl__Request__ReqCase req;
        fw_edit_fn edit;
    } edits[] = {
        {FGX__CTL__REQUEST__REQ_FW_RULE_ADD, edit_add},
        {FGX__CTL__REQUEST__REQ_FW_RULE_RM, edit_rm},
        {FGX__CTL__REQUEST__REQ_FW_RULE_MOVE, edit_move},
        {FGX__CTL__REQUEST__REQ_FW_RULE_ENABLE, edit_enable},
        {FGX__CTL__REQUEST__REQ_FW_RULE_DISABLE, edit_disable},
        {FGX__CTL__REQUEST__REQ_FW_POLICY, edit_policy},
        {FGX__CTL__REQUEST__REQ_FW_SET, edit_set},
        {FGX__CTL__REQUEST__REQ_FW_SWITCH, edit_switch},
        {FGX__CTL__REQUEST__REQ_FW_IMPORT, edit_import},
    };

    for (size_t i = 0; i < sizeof(edits) / sizeof(edits[0]); i++) {
        if (edits[i].req == q->req_case) {
            fw_change(r, q, edits[i].edit);
            return;
        }
    }
}

static void do_fw_list(struct ctl_rpc *r, const Fgx__Ctl__Request *q)
{
    struct ctl_fw_conf c;
    struct ctl_txn *t;
    int rv;

    (void)q;
    if (!fw_available(r) || ctl_rpc_txn_begin(r, false, &t) < 0)
        return;
    rv = ctl_fw_conf_load(t, &c);
    ctl_txn_abort(t);
    if (rv < 0) {
        ctl_rpc_store_fail(r, rv);
        return;
    }
    reply_conf(r, &c);
}

static void do_fw_confirm(struct ctl_rpc *r, const Fgx__Ctl__Request *q)
{
    struct ctl_txn *t = NULL;
    int rv;

    if (!fw_available(r) || ctl_rpc_txn_begin(r, true, &t) < 0)
        return;
    rv = ctl_fw_pending_confirm(r->ctx->fw, t);
    if (rv == -ENOENT) {
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_INVALID,
                     "no firewall change is waiting for confirmation");
        ctl_txn_abort(t);
        return;
    }
    if (rv == 0)
        rv = ctl_txn_commit(t);
    else
        ctl_txn_abort(t);
    if (rv < 0) {
        ctl_rpc_store_fail(r, rv);
        return;
    }
    ctl_fw_pending_clear(r->ctx->fw);
    fgx_info("fw: the pending firewall change is confirmed");
    do_fw_list(r, q);
}

/* ---- backups ---- */

int ctl_rpc_fw_export(struct ctl_rpc *r, struct ctl_txn *t, Fgx__Ctl__Config *cfg)
{
    struct ctl_rpc_fw *f = rpc_fw(r);
    int rv;

    if (!f)
        return -ENOMEM;
    rv = ctl_fw_conf_load(t, &f->conf);
    if (rv == 0)
        rv = ctl_fw_conf_to_msg(&f->conf, &f->msg);
    if (rv < 0)
        return rv;
    f->has_msg = true;
    cfg->fw = &f->msg;
    return 0;
}

int ctl_rpc_fw_import(struct ctl_rpc *r, struct ctl_txn *t, const Fgx__Ctl__Config *cfg,
                      char *err, size_t len)
{
    struct ctl_rpc_fw *f;
    int rv;

    if (!cfg->fw)
        return 0; /* an older backup: the firewall stays as it is */
    if (r->ctx->fw && ctl_fw_pending_secs(r->ctx->fw) > 0) {
        (void)snprintf(err, len,
                       "a firewall change waits for confirmation (%u s left) and its revert "
                       "would undo the backup's firewall: run `fgexctl fw confirm` first",
                       (unsigned)ctl_fw_pending_secs(r->ctx->fw));
        return -EINVAL; /* exit 4, as fw_change()'s refusal */
    }
    if (cfg->fw->n_rules > CTL_FW_RULES_MAX) {
        (void)snprintf(err, len, "%zu firewall rules: a list holds at most %d", cfg->fw->n_rules,
                       CTL_FW_RULES_MAX);
        return -EINVAL;
    }
    f = rpc_fw(r);
    if (!f)
        return -ENOMEM;
    ctl_fw_conf_release(&f->imported);
    rv = ctl_fw_conf_from_msg(cfg->fw, &f->imported, err, len);
    if (rv == 0)
        rv = ctl_fw_conf_save(t, &f->imported);
    if (rv == 0)
        f->import_pending = true;
    return rv;
}

void ctl_rpc_fw_imported(struct ctl_rpc *r)
{
    char err[512];

    if (!r->fw || !r->fw->import_pending || !r->ctx->fw)
        return;
    r->fw->import_pending = false;
    if (ctl_fw_apply(r->ctx->fw, &r->fw->imported, err, sizeof(err)) < 0)
        ctl_rpc_fail(r, FGX__CTL__CODE__CODE_ERROR,
                     "stored, but the firewall rules could not be installed: %s", err);
}

const struct ctl_rpc_cmd ctl_rpc_fw_cmds[] = {
    {FGX__CTL__REQUEST__REQ_FW_RULE_ADD, do_fw_change, 0},
    {FGX__CTL__REQUEST__REQ_FW_RULE_RM, do_fw_change, 0},
    {FGX__CTL__REQUEST__REQ_FW_RULE_MOVE, do_fw_change, 0},
    {FGX__CTL__REQUEST__REQ_FW_RULE_ENABLE, do_fw_change, 0},
    {FGX__CTL__REQUEST__REQ_FW_RULE_DISABLE, do_fw_change, 0},
    {FGX__CTL__REQUEST__REQ_FW_LIST, do_fw_list, 0},
    {FGX__CTL__REQUEST__REQ_FW_POLICY, do_fw_change, 0},
    {FGX__CTL__REQUEST__REQ_FW_SET, do_fw_change, 0},
    {FGX__CTL__REQUEST__REQ_FW_SWITCH, do_fw_change, 0},
    {FGX__CTL__REQUEST__REQ_FW_IMPORT, do_fw_change, 0},
    {FGX__CTL__REQUEST__REQ_FW_CONFIRM, do_fw_confirm, 0},
    {0, NULL, 0},
};
