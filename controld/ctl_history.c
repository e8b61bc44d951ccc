/* controld change history (ctl_history.h): Change records keyed by seq in the store's history
 * db, each with the packed configuration before it. */
#include "controld/ctl_history.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "controld/ctl_config.h"
#include "fgx/log.h"

static const char key_history_seq[] = "history_seq";

long ctl_history_undo_pick(const struct ctl_hist_meta *v, size_t n)
{
    for (size_t i = n; i-- > 0;)
        if (v[i].kind == CTL_HIST_CHANGE && !v[i].reverted)
            return (long)i;
    return -1;
}

long ctl_history_redo_pick(const struct ctl_hist_meta *v, size_t n)
{
    for (size_t i = n; i-- > 0;) {
        /* A change made since the undos: redoing them would overwrite it. */
        if (v[i].kind == CTL_HIST_CHANGE)
            return -1;
        if (v[i].kind == CTL_HIST_UNDO && !v[i].reverted)
            return (long)i;
    }
    return -1;
}

static int pack_config(const Fgx__Ctl__Config *cfg, uint8_t **buf, size_t *len)
{
    size_t n = fgx__ctl__config__get_packed_size(cfg);

    *buf = malloc(n ? n : 1);
    if (!*buf)
        return -ENOMEM;
    fgx__ctl__config__pack(cfg, *buf);
    *len = n;
    return 0;
}

int ctl_history_plain(struct ctl_txn *t, uint8_t **buf, size_t *len)
{
    struct ctl_config_export e;
    int rv = ctl_config_export(t, &e);

    if (rv == 0) {
        e.cfg.has_auth_enabled = 0; /* not part of what undo restores */
        rv = pack_config(&e.cfg, buf, len);
    }
    ctl_config_export_release(&e);
    return rv;
}

int ctl_history_snapshot(struct ctl_txn *t, struct ctl_stats *stats, uint8_t **buf, size_t *len)
{
    struct ctl_config_export e;
    int rv = ctl_config_export(t, &e);

    /* TLS services with their certificate and key: an undo that brings back a removed TLS
     * service needs its key, which went with it (the history is in the same root-only store). */
    if (rv == 0)
        rv = ctl_config_export_tls(t, &e, true);
    if (rv < 0)
        goto out;
    e.cfg.has_auth_enabled = 0;
    for (size_t i = 0; i < e.nflts; i++) {
        Fgx__Ctl__Filter *m = &e.flt_msgs[i];

        m->has_blocked = 1;
        if (stats) {
            m->blocked = ctl_stats_blocked(stats, m->id);
            /* Before a change: the statistics learn whose filter it is while it exists. */
            ctl_stats_filter_service(stats, m->id, m->service_id);
        } else if ((rv = ctl_store_blocked_get(t, m->id, &m->blocked)) < 0)
            goto out;
    }
    for (size_t i = 0; i < e.nsvcs; i++) {
        Fgx__Ctl__Service *m = &e.svc_msgs[i];
        struct ctl_svc_totals tot;

        rv = ctl_store_retired_get(t, m->id, &m->blocked_removed);
        if (rv < 0)
            goto out;
        m->has_blocked_removed = 1;
        if (stats) {
            struct ctl_svc_counters c;

            ctl_stats_service(stats, m->id, &c);
            tot = (struct ctl_svc_totals){c.packets, c.bytes, c.accepted, c.dropped};
        } else if ((rv = ctl_store_svc_totals_get(t, m->id, &tot)) < 0) {
            goto out;
        }
        m->has_packets = m->has_bytes = m->has_accepted = m->has_dropped = 1;
        m->packets = tot.packets;
        m->bytes = tot.bytes;
        m->accepted = tot.accepted;
        m->dropped = tot.dropped;
    }
    rv = pack_config(&e.cfg, buf, len);
out:
    ctl_config_export_release(&e);
    return rv;
}

static const char *kind_name(enum ctl_hist_kind k)
{
    return k == CTL_HIST_UNDO      ? "undo"
           : k == CTL_HIST_REDO    ? "redo"
           : k == CTL_HIST_SETTING ? "setting"
                                   : "change";
}

static enum ctl_hist_kind kind_from(const char *s)
{
    if (s && strcmp(s, "undo") == 0)
        return CTL_HIST_UNDO;
    if (s && strcmp(s, "redo") == 0)
        return CTL_HIST_REDO;
    if (s && strcmp(s, "setting") == 0)
        return CTL_HIST_SETTING;
    return CTL_HIST_CHANGE;
}

static int change_put(struct ctl_txn *t, const Fgx__Ctl__Change *c)
{
    size_t n = fgx__ctl__change__get_packed_size(c);
    uint8_t *buf = malloc(n ? n : 1);
    int rv;

    if (!buf)
        return -ENOMEM;
    fgx__ctl__change__pack(c, buf);
    rv = ctl_store_history_put(t, c->seq, buf, n);
    free(buf);
    return rv;
}

int ctl_history_get(struct ctl_txn *t, uint64_t seq, Fgx__Ctl__Change **out)
{
    void *buf;
    size_t len;
    int rv = ctl_store_history_get(t, seq, &buf, &len);

    if (rv < 0)
        return rv;
    *out = fgx__ctl__change__unpack(NULL, len, buf);
    free(buf);
    if (!*out) {
        fgx_err("state store: an undecodable history record (seq %llu)", (unsigned long long)seq);
        return -EINVAL;
    }
    return 0;
}

int ctl_history_mark(struct ctl_txn *t, uint64_t seq, bool reverted)
{
    Fgx__Ctl__Change *c;
    int rv = ctl_history_get(t, seq, &c);

    if (rv < 0)
        return rv;
    c->has_undone = 1;
    c->undone = reverted;
    rv = change_put(t, c);
    fgx__ctl__change__free_unpacked(c, NULL);
    return rv;
}

int ctl_history_record(struct ctl_txn *t, enum ctl_hist_kind kind, uint64_t target, const char *who,
                       const char *what, const uint8_t *before, size_t blen, size_t keep,
                       uint64_t *seq_out)
{
    Fgx__Ctl__Change c = FGX__CTL__CHANGE__INIT;
    uint64_t seq, *seqs = NULL;
    size_t n = 0;
    int rv;

    rv = ctl_store_u64_get(t, key_history_seq, &seq);
    if (rv < 0)
        return rv;
    seq++;
    c.seq = seq;
    c.time = (uint64_t)time(NULL);
    c.who = (char *)who;
    c.what = (char *)what;
    c.kind = (char *)kind_name(kind);
    if (kind != CTL_HIST_CHANGE) {
        c.has_target = 1;
        c.target = target;
    }
    c.has_undone = 1;
    if (before) {
        c.has_before = 1;
        c.before.data = (uint8_t *)before;
        c.before.len = blen;
    }
    rv = change_put(t, &c);
    if (rv == 0)
        rv = ctl_store_u64_put(t, key_history_seq, seq);
    if (rv == 0)
        rv = ctl_store_history_seqs(t, &seqs, &n);
    /* Bounded: each entry holds a whole configuration. */
    for (size_t i = 0; rv == 0 && n > keep && i < n - keep; i++)
        rv = ctl_store_history_del(t, seqs[i]);
    free(seqs);
    if (rv == 0 && seq_out)
        *seq_out = seq;
    return rv;
}

int ctl_history_metas(struct ctl_txn *t, struct ctl_hist_meta **out, size_t *n)
{
    struct ctl_hist_meta *v = NULL;
    uint64_t *seqs = NULL;
    size_t ns = 0;
    int rv;

    *out = NULL;
    *n = 0;
    rv = ctl_store_history_seqs(t, &seqs, &ns);
    if (rv < 0)
        return rv;
    v = calloc(ns ? ns : 1, sizeof(*v));
    if (!v) {
        free(seqs);
        return -ENOMEM;
    }
    for (size_t i = 0; i < ns; i++) {
        Fgx__Ctl__Change *c;

        rv = ctl_history_get(t, seqs[i], &c);
        if (rv < 0)
            break;
        v[i] = (struct ctl_hist_meta){.seq = c->seq,
                                      .kind = kind_from(c->kind),
                                      .target = c->has_target ? c->target : 0,
                                      .reverted = c->has_undone && c->undone};
        fgx__ctl__change__free_unpacked(c, NULL);
    }
    free(seqs);
    if (rv < 0) {
        free(v);
        return rv;
    }
    *out = v;
    *n = ns;
    return 0;
}

static const char *dir_word(bool has, Fgx__Ctl__Dir d)
{
    if (!has || d == FGX__CTL__DIR__DIR_BOTH)
        return "";
    return d == FGX__CTL__DIR__DIR_C2S ? " --dir c2s" : " --dir s2c";
}

static const char *ref_of(const Fgx__Ctl__Ref *r)
{
    return r && r->ref ? r->ref : "?";
}

/* Every request's command, by its member of Request's oneof: a request with no row here would be
 * recorded as a number (tests/unit/test_history.c walks the descriptor so none is missed). */
static const struct {
    Fgx__Ctl__Request__ReqCase req;
    const char *name;
} req_names[] = {
    {FGX__CTL__REQUEST__REQ_STATUS, "status"},
    {FGX__CTL__REQUEST__REQ_SERVICE_ADD, "service add"},
    {FGX__CTL__REQUEST__REQ_SERVICE_LIST, "service list"},
    {FGX__CTL__REQUEST__REQ_SERVICE_SHOW, "service show"},
    {FGX__CTL__REQUEST__REQ_SERVICE_START, "service start"},
    {FGX__CTL__REQUEST__REQ_SERVICE_STOP, "service stop"},
    {FGX__CTL__REQUEST__REQ_SERVICE_RM, "service rm"},
    {FGX__CTL__REQUEST__REQ_SERVICE_RENAME, "service rename"},
    {FGX__CTL__REQUEST__REQ_SERVICE_SET, "service set"},
    {FGX__CTL__REQUEST__REQ_SERVICE_ADDR_ADD, "service addr add"},
    {FGX__CTL__REQUEST__REQ_SERVICE_ADDR_RM, "service addr rm"},
    {FGX__CTL__REQUEST__REQ_FILTER_ADD, "filter add"},
    {FGX__CTL__REQUEST__REQ_FILTER_LIST, "filter list"},
    {FGX__CTL__REQUEST__REQ_FILTER_ENABLE, "filter enable"},
    {FGX__CTL__REQUEST__REQ_FILTER_DISABLE, "filter disable"},
    {FGX__CTL__REQUEST__REQ_FILTER_RM, "filter rm"},
    {FGX__CTL__REQUEST__REQ_FILTER_SET, "filter set"},
    {FGX__CTL__REQUEST__REQ_FILTER_IMPORT, "filter import"},
    {FGX__CTL__REQUEST__REQ_FILTER_EXPORT, "filter export"},
    {FGX__CTL__REQUEST__REQ_FILTER_TEST, "filter test"},
    {FGX__CTL__REQUEST__REQ_REGEX_MATCH, "regex match"},
    {FGX__CTL__REQUEST__REQ_INTERFACES, "interfaces"},
    {FGX__CTL__REQUEST__REQ_WORKER_LIST, "worker list"},
    {FGX__CTL__REQUEST__REQ_WORKER_RESTART, "worker restart"},
    {FGX__CTL__REQUEST__REQ_STATS, "stats"},
    {FGX__CTL__REQUEST__REQ_STATS_HISTORY, "stats --history"},
    {FGX__CTL__REQUEST__REQ_EVENTS, "events"},
    {FGX__CTL__REQUEST__REQ_EVENT_SHOW, "events show"},
    {FGX__CTL__REQUEST__REQ_CAPTURE, "capture"},
    {FGX__CTL__REQUEST__REQ_LOGIN, "login"},
    {FGX__CTL__REQUEST__REQ_LOGOUT, "logout"},
    {FGX__CTL__REQUEST__REQ_PASSWD, "passwd"},
    {FGX__CTL__REQUEST__REQ_AUTH_SET, "auth"},
    {FGX__CTL__REQUEST__REQ_CERT, "cert"},
    {FGX__CTL__REQUEST__REQ_CONFIG_EXPORT, "export"},
    {FGX__CTL__REQUEST__REQ_CONFIG_IMPORT, "import"},
    {FGX__CTL__REQUEST__REQ_HISTORY, "history"},
    {FGX__CTL__REQUEST__REQ_UNDO, "undo"},
    {FGX__CTL__REQUEST__REQ_REDO, "redo"},
    {FGX__CTL__REQUEST__REQ_FW_RULE_ADD, "fw rule add"},
    {FGX__CTL__REQUEST__REQ_FW_RULE_RM, "fw rule rm"},
    {FGX__CTL__REQUEST__REQ_FW_RULE_MOVE, "fw rule move"},
    {FGX__CTL__REQUEST__REQ_FW_RULE_ENABLE, "fw rule enable"},
    {FGX__CTL__REQUEST__REQ_FW_RULE_DISABLE, "fw rule disable"},
    {FGX__CTL__REQUEST__REQ_FW_LIST, "fw list"},
    {FGX__CTL__REQUEST__REQ_FW_POLICY, "fw policy"},
    {FGX__CTL__REQUEST__REQ_FW_SET, "fw set"},
    {FGX__CTL__REQUEST__REQ_FW_SWITCH, "fw enable|disable"},
    {FGX__CTL__REQUEST__REQ_FW_IMPORT, "fw import"},
    {FGX__CTL__REQUEST__REQ_FW_CONFIRM, "fw confirm"},
    {FGX__CTL__REQUEST__REQ_SCRIPT_SET, "script set"},
    {FGX__CTL__REQUEST__REQ_SCRIPT_GET, "script get"},
    {FGX__CTL__REQUEST__REQ_SCRIPT_RM, "script rm"},
    {FGX__CTL__REQUEST__REQ_SCRIPT_LIST, "script list"},
    {FGX__CTL__REQUEST__REQ_SCRIPT_ENABLE, "script enable"},
    {FGX__CTL__REQUEST__REQ_SCRIPT_DISABLE, "script disable"},
    {FGX__CTL__REQUEST__REQ_SCRIPT_LOG, "script log"},
    {FGX__CTL__REQUEST__REQ_SERVICE_LOG, "service log"},
    {FGX__CTL__REQUEST__REQ_GAME_SET, "game set"},
    {FGX__CTL__REQUEST__REQ_GAME_SHOW, "game show"},
};

const char *ctl_history_req_name(int req_case)
{
    for (size_t i = 0; i < sizeof(req_names) / sizeof(req_names[0]); i++)
        if ((int)req_names[i].req == req_case)
            return req_names[i].name;
    return NULL;
}

/* The words after a command's name: its member's plain text fields that name what it acts on
 * (never a password, a token or a script's source), in the message's order. */
static void describe_args(const Fgx__Ctl__Request *q, char *buf, size_t len)
{
    static const char *const named[] = {"ref",  "service", "name",    "function",
                                        "addr", "kind",    "option", "filename"};
    const ProtobufCFieldDescriptor *fd =
        protobuf_c_message_descriptor_get_field(&fgx__ctl__request__descriptor, q->req_case);
    const ProtobufCMessage *m;
    size_t off = strlen(buf);

    if (!fd || fd->type != PROTOBUF_C_TYPE_MESSAGE)
        return;
    m = *(const ProtobufCMessage *const *)((const char *)q + fd->offset);
    if (!m)
        return;
    for (unsigned i = 0; i < m->descriptor->n_fields && off + 1 < len; i++) {
        const ProtobufCFieldDescriptor *f = &m->descriptor->fields[i];
        const char *v;
        bool want = false;
        int n;

        if (f->type != PROTOBUF_C_TYPE_STRING || f->label == PROTOBUF_C_LABEL_REPEATED)
            continue;
        for (size_t k = 0; k < sizeof(named) / sizeof(named[0]); k++)
            want |= strcmp(f->name, named[k]) == 0;
        v = *(const char *const *)((const char *)m + f->offset);
        if (!want || !v || !*v)
            continue;
        n = snprintf(buf + off, len - off, " %.64s", v);
        if (n < 0)
            break;
        off += (size_t)n < len - off ? (size_t)n : len - off - 1;
    }
}

void ctl_history_describe(const Fgx__Ctl__Request *q, char *buf, size_t len)
{
    switch (q->req_case) {
    case FGX__CTL__REQUEST__REQ_SERVICE_ADD: {
        const Fgx__Ctl__ServiceAdd *a = q->service_add;
        snprintf(buf, len, "service add %s %s/%u", a->name,
                 a->proto == FGX__CTL__PROTO__PROTO_UDP ? "udp" : "tcp", a->port);
        break;
    }
    case FGX__CTL__REQUEST__REQ_SERVICE_START:
        snprintf(buf, len, "service start %s", ref_of(q->service_start));
        break;
    case FGX__CTL__REQUEST__REQ_SERVICE_STOP:
        snprintf(buf, len, "service stop %s", ref_of(q->service_stop));
        break;
    case FGX__CTL__REQUEST__REQ_SERVICE_RM:
        snprintf(buf, len, "service rm %s", ref_of(q->service_rm));
        break;
    case FGX__CTL__REQUEST__REQ_SERVICE_RENAME:
        snprintf(buf, len, "service rename %s %s", q->service_rename->ref, q->service_rename->name);
        break;
    case FGX__CTL__REQUEST__REQ_SERVICE_SET:
        snprintf(buf, len, "service set %s", q->service_set->ref);
        break;
    case FGX__CTL__REQUEST__REQ_FILTER_ADD: {
        const Fgx__Ctl__FilterAdd *a = q->filter_add;
        /* The regex as the player typed it, cut to fit: history is for reading. */
        snprintf(buf, len, "filter add %s '%.200s'%s%s%s%s%.64s%s", a->service, a->regex,
                 dir_word(a->has_dir, a->dir), a->has_nocase && a->nocase ? " --nocase" : "",
                 a->has_action && a->action == FGX__CTL__FILTER_ACTION__FILTER_ACTION_LOG
                     ? " --log"
                     : "",
                 a->label && a->label[0] ? " --label '" : "", a->label ? a->label : "",
                 a->label && a->label[0] ? "'" : "");
        break;
    }
    case FGX__CTL__REQUEST__REQ_FILTER_SET: {
        const Fgx__Ctl__FilterSet *a = q->filter_set;
        snprintf(buf, len, "filter set %s%s%.200s%s%s%s%s%s%.64s%s", a->ref,
                 a->regex ? " --regex '" : "", a->regex ? a->regex : "", a->regex ? "'" : "",
                 !a->has_dir                         ? ""
                 : a->dir == FGX__CTL__DIR__DIR_BOTH ? " --dir both"
                                                     : dir_word(1, a->dir),
                 a->has_nocase && a->nocase ? " --nocase" : "",
                 !a->has_action                                                     ? ""
                 : a->action == FGX__CTL__FILTER_ACTION__FILTER_ACTION_LOG ? " --action log"
                                                                           : " --action block",
                 a->label ? " --label '" : "", a->label ? a->label : "", a->label ? "'" : "");
        break;
    }
    case FGX__CTL__REQUEST__REQ_FILTER_ENABLE:
        snprintf(buf, len, "filter enable %s", ref_of(q->filter_enable));
        break;
    case FGX__CTL__REQUEST__REQ_FILTER_DISABLE:
        snprintf(buf, len, "filter disable %s", ref_of(q->filter_disable));
        break;
    case FGX__CTL__REQUEST__REQ_FILTER_RM:
        snprintf(buf, len, "filter rm %s", ref_of(q->filter_rm));
        break;
    case FGX__CTL__REQUEST__REQ_FILTER_IMPORT: {
        const Fgx__Ctl__FilterImport *f = q->filter_import;
        snprintf(buf, len, "filter import %s (%zu filters%s)", f ? f->service : "?",
                 f ? f->n_filters : 0,
                 f && f->has_sync && f->sync         ? ", --sync"
                 : f && f->has_replace && f->replace ? ", --replace"
                                                     : "");
        break;
    }
    case FGX__CTL__REQUEST__REQ_CONFIG_IMPORT: {
        const Fgx__Ctl__Config *c = q->config_import;
        snprintf(buf, len, "import (%zu services, %zu filters)", c ? c->n_services : 0,
                 c ? c->n_filters : 0);
        break;
    }
    case FGX__CTL__REQUEST__REQ_UNDO:
        snprintf(buf, len, "undo");
        break;
    case FGX__CTL__REQUEST__REQ_REDO:
        snprintf(buf, len, "redo");
        break;
    default:
        if (ctl_history_req_name(q->req_case)) {
            snprintf(buf, len, "%s", ctl_history_req_name(q->req_case));
            describe_args(q, buf, len);
        } else {
            snprintf(buf, len, "request %d", (int)q->req_case);
        }
        break;
    }
}
