/* controld control API, inside: what ctl_rpc.c (decode, admit, dispatch, encode) shares with
 * the command families' handlers (rpc_service.c, rpc_filter.c, rpc_worker.c, rpc_stats.c,
 * rpc_admin.c). Each family lists its commands in a table of struct ctl_rpc_cmd that the
 * dispatcher walks, so a new command touches its family's file and proto/ only. */
#ifndef CTL_RPC_CMD_H
#define CTL_RPC_CMD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "control.pb-c.h"
#include "controld/ctl_apply.h"
#include "controld/ctl_auth.h"
#include "controld/ctl_config.h"
#include "controld/ctl_diff.h"
#include "controld/ctl_history.h"
#include "controld/ctl_script.h"
#include "controld/ctl_store.h"
#include "controld/ctl_svcaddr.h"
#include "fgx/chan_tls.h"
#include "fgx/ruleset.h"

/* How long a reading command waits for fresh worker counters before it reports the last ones. */
#define CTL_RPC_STATS_TIMEOUT_MS 300

/* One request's reply and everything it points into, freed together when the reply has left. */
struct ctl_rpc {
    struct ctl_ctx *ctx;
    Fgx__Ctl__Reply reply;
    char err[1024];
    struct ctl_service *svcs;
    struct ctl_svcmsg *ips; /* what each service message's strings point into */
    Fgx__Ctl__Service *svc_msgs;
    Fgx__Ctl__Service **svc_ptrs;
    size_t nsvcs;
    struct ctl_filter *flts;
    Fgx__Ctl__Filter *flt_msgs;
    Fgx__Ctl__Filter **flt_ptrs;
    size_t nflts;
    Fgx__Ctl__Status status;
    Fgx__Ctl__Worker worker, px_worker, sw_worker;
    Fgx__Ctl__Worker *workers[3];
    Fgx__Ctl__Listener listeners[2]; /* status: the TLS listeners (ctl_listen.h) */
    Fgx__Ctl__Listener *listener_ptrs[2];
    Fgx__Ctl__ServiceStats *sst_msgs;
    Fgx__Ctl__ServiceStats **sst_ptrs;
    Fgx__Ctl__Event *ev_msgs;
    Fgx__Ctl__Event **ev_ptrs;
    const struct ctl_event **evs;
    const struct fgx_peer *peer;        /* who sent the request */
    char token[CTL_AUTH_TOKEN_LEN + 1]; /* login: the new session's token */
    struct ctl_config_export cfg_exp;   /* config_export */
    bool deferred; /* a probe that needs the compile session: nothing stored, no reply */
    /* filter add: the regex's warnings; filter import: each line's, as "line N: ..." */
    struct fgx_pattern_warnings add_warn;
    char *add_warn_ptrs[FGX_PATTERN_WARN_MAX];
    struct ctl_config_warning *imp_warn; /* ascending filter ids */
    size_t nimp_warn;
    char (*imp_text)[FGX_PATTERN_WARN_LEN + 16];
    char **imp_ptrs;
    /* imports and undo (issue 14): the diff reported, and the counters the import set, given
     * to the in-memory statistics once the transaction is committed */
    struct ctl_diff diff;
    struct ctl_import_opts imp;
    Fgx__Ctl__DiffEntry *diff_msgs, **diff_ptrs;
    /* the change history (rpc_history.c): the request, the configuration before it (with
     * counters, and plain to tell whether anything changed), how ctl_rpc_finish records it */
    const Fgx__Ctl__Request *req;
    uint8_t *hist_before, *hist_plain;
    size_t hist_blen, hist_plen;
    bool hist_on;     /* record this request when it commits a change */
    bool hist_force;  /* record even if the configuration compares equal (undo, redo) */
    enum ctl_hist_kind hist_kind;
    uint64_t hist_target;
    Fgx__Ctl__Change **hist_list; /* history: unpacked entries (their before dropped) */
    size_t nhist;
    Fgx__Ctl__Change *hist_new; /* undo/redo: the entry recorded */
    Fgx__Ctl__Change hist_new_msg;
    char hist_who[96], hist_what[512];
    Fgx__Ctl__RateSeries *rate_msgs, **rate_ptrs;
    uint32_t **rate_bufs;
    size_t nrates;
    struct ctl_rpc_logfil *logfil; /* labels and events --top (rpc_logfil.c), or NULL */
    struct ctl_rpc_fw *fw; /* the firewall family's reply (rpc_fw.c); NULL when unused */
    struct ctl_rpc_game *game; /* the game family's reply (rpc_game.c); NULL when unused */
    bool game_imported;        /* config import stored a game: the statistics learn it */
    /* service add/set: a warning about the TLS certificate (expired), and what service replies
     * say about stored certificates (subjects) */
    char tls_warn[384];
    char *tls_warn_ptr;
    char (*tls_subj)[256];
    /* capture, event show, filter test (rpc_capture.c): encoded captures and the test's
     * result, freed by ctl_rpc_capture_release() */
    ProtobufCBinaryData *caps;
    size_t ncaps;
    void *cap_extra;
    struct ctl_script_reply *script; /* the script family's reply contents (ctl_script.h) */
    struct ctl_rpc_health *health;   /* service log (rpc_health.c), or NULL */
    struct ctl_rpc_ifaces *ifaces;   /* interfaces (rpc_admin.c), or NULL */
    struct ctl_rpc_regex *regex;     /* regex match (rpc_regex.c), or NULL */
    char busy_what[256];             /* a change refused as busy: what compiles meanwhile */
};

void ctl_rpc_capture_release(struct ctl_rpc *r);

typedef void (*ctl_rpc_handler_fn)(struct ctl_rpc *r, const Fgx__Ctl__Request *q);

enum ctl_rpc_flags {
    CTL_RPC_CHANGE = 1u << 0, /* changes services or filters: may need the compiler */
    CTL_RPC_OPEN = 1u << 1,   /* answered without a session (login, the certificate) */
};

struct ctl_rpc_cmd {
    Fgx__Ctl__Request__ReqCase req;
    ctl_rpc_handler_fn handle; /* NULL ends a table */
    unsigned flags;            /* enum ctl_rpc_flags */
};

/* The families' tables, each ended by an entry with no handler. */
extern const struct ctl_rpc_cmd ctl_rpc_admin_cmds[];
extern const struct ctl_rpc_cmd ctl_rpc_service_cmds[];
extern const struct ctl_rpc_cmd ctl_rpc_filter_cmds[];
extern const struct ctl_rpc_cmd ctl_rpc_worker_cmds[];
extern const struct ctl_rpc_cmd ctl_rpc_stats_cmds[];
extern const struct ctl_rpc_cmd ctl_rpc_history_cmds[];
extern const struct ctl_rpc_cmd ctl_rpc_regex_cmds[];
void ctl_rpc_regex_free(struct ctl_rpc_regex *x);

/* ---- log filters and labels (rpc_logfil.c) ---- */
struct ctl_rpc_logfil;
void ctl_rpc_logfil_free(struct ctl_rpc_logfil *lf);
/* The label of filter_id as stored now (NULL: none, or the filter is gone), valid until the
 * request is answered. t: a transaction of the request's. */
const char *ctl_rpc_filter_label(struct ctl_rpc *r, struct ctl_txn *t, uint32_t filter_id);
/* events --top: q->top is "src"; sid / name: the service asked for (0 / NULL: all). */
void ctl_rpc_events_top(struct ctl_rpc *r, const Fgx__Ctl__EventsQuery *q, uint32_t sid,
                        const char *name);
extern const struct ctl_rpc_cmd ctl_rpc_fw_cmds[];

/* ---- the firewall in backups (rpc_fw.c) ---- */
/* Add the stored firewall configuration to an export. */
int ctl_rpc_fw_export(struct ctl_rpc *r, struct ctl_txn *t, Fgx__Ctl__Config *cfg);
/* Check and store cfg's firewall configuration in t (none in cfg: left as it is); -EINVAL with
 * the reason in err. ctl_rpc_fw_imported() installs it once t is committed. */
int ctl_rpc_fw_import(struct ctl_rpc *r, struct ctl_txn *t, const Fgx__Ctl__Config *cfg,
                      char *err, size_t len);
void ctl_rpc_fw_imported(struct ctl_rpc *r);
void ctl_rpc_fw_release(struct ctl_rpc *r);
extern const struct ctl_rpc_cmd ctl_rpc_capture_cmds[];
extern const struct ctl_rpc_cmd ctl_rpc_script_cmds[];

/* ---- the game (rpc_game.c): its facts in backups, as the firewall's ---- */
extern const struct ctl_rpc_cmd ctl_rpc_game_cmds[];
/* Add the stored game to an export (an empty message when none is set). */
int ctl_rpc_game_export(struct ctl_rpc *r, struct ctl_txn *t, Fgx__Ctl__Config *cfg);
/* Check and store cfg's game in t (no game message in cfg: left as it is; an empty one: none
 * from now on); -EINVAL with the reason in err. */
int ctl_rpc_game_import(struct ctl_rpc *r, struct ctl_txn *t, const Fgx__Ctl__Config *cfg,
                        char *err, size_t len);
void ctl_rpc_game_release(struct ctl_rpc *r);
/* After a committed import: the statistics take the imported game's checker. */
void ctl_rpc_game_imported(struct ctl_rpc *r);

/* ---- the health log (rpc_health.c) ---- */
extern const struct ctl_rpc_cmd ctl_rpc_health_cmds[];
struct ctl_rpc_health;
struct ctl_rpc_ifaces;
void ctl_rpc_ifaces_free(struct ctl_rpc_ifaces *x);
void ctl_rpc_health_free(struct ctl_rpc_health *h);
/* A service set committed: its health log says what changed that a player must know of (the
 * layer, fail_open, the addresses). */
void ctl_rpc_health_service_changed(const struct ctl_service *before,
                                    const struct ctl_service *after);

/* The reference a Ref carries, or NULL. */
static inline const char *ctl_rpc_ref(const Fgx__Ctl__Ref *ref)
{
    return ref ? ref->ref : NULL;
}

/* ---- the reply's code and message ---- */
/* Set the reply's code and one-line message; a refused request reports nothing it was about
 * to (except UNAVAILABLE: stored, but not confirmed). */
void ctl_rpc_fail(struct ctl_rpc *r, Fgx__Ctl__Code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void ctl_rpc_store_fail(struct ctl_rpc *r, int err);
bool ctl_rpc_failed(const struct ctl_rpc *r);
/* An import's error (-EINVAL, -EEXIST, -ENOENT, else an error) as a reply code. */
Fgx__Ctl__Code ctl_rpc_config_code(int rv);
const char *ctl_rpc_proto_name(uint8_t ipproto);
uint64_t ctl_rpc_mono_ms(void);
/* A store transaction; a failure is already in the reply. */
int ctl_rpc_txn_begin(struct ctl_rpc *r, bool write, struct ctl_txn **t);

/* ---- references and validation: each failure is in the reply, with its code ---- */
bool ctl_rpc_all_digits(const char *s);
/* A decimal id 1..UINT32_MAX. Returns 0 or -EINVAL. */
int ctl_rpc_ref_id(const char *ref, uint32_t *id);
/* A service by id or name, a filter by id. */
int ctl_rpc_service_resolve(struct ctl_rpc *r, struct ctl_txn *t, const char *ref,
                            struct ctl_service *out);
int ctl_rpc_filter_resolve(struct ctl_rpc *r, struct ctl_txn *t, const char *ref,
                           struct ctl_filter *out);
int ctl_rpc_check_name(struct ctl_rpc *r, const char *name);
int ctl_rpc_check_port(struct ctl_rpc *r, uint32_t port);
int ctl_rpc_check_proto(struct ctl_rpc *r, Fgx__Ctl__Proto proto, uint8_t *ipproto);
int ctl_rpc_check_layer(struct ctl_rpc *r, Fgx__Ctl__Layer layer, enum ctl_layer *out);
int ctl_rpc_check_midstream(struct ctl_rpc *r, Fgx__Ctl__Midstream m, uint8_t *out);
/* The capture settings a service add or set carries, into svc (rpc_capture.c). */
int ctl_rpc_check_capture(struct ctl_rpc *r, bool has_on, bool on, bool has_conns, uint32_t conns,
                          bool has_bytes, uint32_t bytes, struct ctl_service *svc);
int ctl_rpc_check_ip(struct ctl_rpc *r, const char *ip, struct fgx_cidr *out);
/* w: NULL, or where the warnings of an accepted regex go. */
/* Whether the block filter f of svc may be stored without the request's --force (rpc_capture.c):
 * refused when its regex matches any stream, or when it matches nearly all of svc's captured
 * connections (ctl_config_reach_too_wide(), over the workers' rings: connections already
 * blocked are the attacks, not the traffic to spare). 0: fine (or forced, or its database is
 * still to compile: the request is then deferred and this runs again); else the reply says why,
 * naming the filter as `what` ("line 3") and what --force would do (`verb`: "add it"), with
 * Reply.needs_force set. t is the request's (write) transaction. */
int ctl_rpc_filter_breadth(struct ctl_rpc *r, struct ctl_txn *t, const struct ctl_service *svc,
                           const struct ctl_filter *f, const char *what, const char *verb);
/* The same for fs[n] at once (an import: one compile of them all and one look at the
 * captures), naming the first that needs --force by whats[i]. */
int ctl_rpc_filters_breadth(struct ctl_rpc *r, struct ctl_txn *t, const struct ctl_service *svc,
                            const struct ctl_filter *fs, size_t n, const char *const *whats,
                            const char *verb);
int ctl_rpc_check_regex(struct ctl_rpc *r, const char *regex, bool nocase, uint8_t ipproto,
                        struct fgx_pattern_warnings *w);
/* Names unique; (proto, port) unique among services. */
int ctl_rpc_check_unique(struct ctl_rpc *r, struct ctl_txn *t, const struct ctl_service *svc);

/* ---- TLS services (rpc_tls.c) ---- */
/* A request's certificate and key for service name on layer: both or neither given, the proxy
 * layer, PEM that parses, a key that matches (an expired certificate: a warning in the reply).
 * Fills *out (ctl_tls_pem_release()); a refusal is in the reply. */
int ctl_rpc_tls_take(struct ctl_rpc *r, const char *name, bool has_cert,
                     const ProtobufCBinaryData *cert, bool has_key, const ProtobufCBinaryData *key,
                     enum ctl_layer layer, struct ctl_tls_pem *out);

/* ---- reply contents ---- */
/* A filter's blocked count: the running total when controld keeps one, else the last saved. */
int ctl_rpc_blocked_of(struct ctl_rpc *r, struct ctl_txn *t, uint32_t filter_id, uint64_t *out);
/* The workers as supervised now, into r->workers. Returns how many. */
size_t ctl_rpc_reply_workers(struct ctl_rpc *r);
/* Copies svcs; fills the computed fields (filter count, blocked sum) from t. */
int ctl_rpc_reply_services(struct ctl_rpc *r, struct ctl_txn *t, const struct ctl_service *svcs,
                           size_t n);
/* Takes ownership of fs (an array from ctl_store_filter_list() or one malloc'd filter). */
int ctl_rpc_reply_filters(struct ctl_rpc *r, struct ctl_txn *t, struct ctl_filter *fs, size_t n);
/* One filter; its regex moves into the reply. */
int ctl_rpc_reply_filter(struct ctl_rpc *r, struct ctl_txn *t, struct ctl_filter *f);
void ctl_rpc_reply_auth_state(struct ctl_rpc *r);

/* ---- imports, dry runs and history (issue 14) ---- */
/* Prepare r->imp for an import: live counters from the statistics, the diff into r->diff. */
void ctl_rpc_import_opts(struct ctl_rpc *r, bool counters);
/* r->diff into the reply. */
int ctl_rpc_reply_diff(struct ctl_rpc *r);
/* A dry run's end: the new state is built (checked whole, as a change would be), then *t is
 * aborted; nothing is stored or applied. */
void ctl_rpc_dry_finish(struct ctl_rpc *r, struct ctl_txn **t);
/* The in-memory statistics take the counters an import set (after its commit). */
void ctl_rpc_import_counters(struct ctl_rpc *r);
/* "local", or the peer's address and its session ("10.0.0.5 session 3fa2c1d0"). */
void ctl_rpc_who(const struct ctl_rpc *r, char *buf, size_t len);
/* Before a change request's handler: the configuration before it (rpc_history.c). */
void ctl_rpc_history_begin(struct ctl_rpc *r, const Fgx__Ctl__Request *q);
/* In ctl_rpc_finish(), before the commit: record the change in *t when it changed anything.
 * Returns 0 or a store error (the change is then refused). */
int ctl_rpc_history_commit(struct ctl_rpc *r, struct ctl_txn *t);
void ctl_rpc_history_release(struct ctl_rpc *r);
/* Record a change of a setting (passwd, auth), done in a transaction of its own: what, by whom
 * (r's peer). A failure is logged; the setting stays changed. */
void ctl_rpc_history_setting(struct ctl_rpc *r, const Fgx__Ctl__Request *q, const char *what);

/* ---- commit and apply ---- */
/* Validate the whole new state by building its ruleset in the request's transaction (when
 * rebuild), commit, then carry it to the data path. *t is consumed. */
void ctl_rpc_finish(struct ctl_rpc *r, struct ctl_txn **t, bool rebuild);

#endif
