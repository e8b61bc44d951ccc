/* controld configuration stage: the whole configuration as one Config message (`fgexctl export`
 * / `import`) and one service's filters as a ruleset file (`fgexctl filter import` / `export`).
 * An import is checked whole, then written into the caller's write transaction; any error leaves
 * the transaction to be aborted, so nothing changes. The caller then builds the ruleset (the
 * full compile) in the same transaction, commits and applies it. */
#ifndef CTL_CONFIG_H
#define CTL_CONFIG_H

#include <stdbool.h>
#include <stddef.h>

#include "control.pb-c.h"
#include "controld/ctl_diff.h"
#include "controld/ctl_script.h"
#include "controld/ctl_store.h"
#include "controld/ctl_svcaddr.h"
#include "fgx/ruleset.h"

#define CTL_CONFIG_SERVICES_MAX 4096
#define CTL_CONFIG_FILTERS_MAX 65536
#define CTL_CONFIG_REGEX_MAX FGX_FILTER_REGEX_MAX
/* Meta counter holding 1 when the password requirement is off (absent: on). */
#define CTL_CONFIG_AUTH_OFF_KEY "auth_off"

/* A Config message and the memory it points into. */
struct ctl_config_export {
    Fgx__Ctl__Config cfg;
    struct ctl_service *svcs;
    size_t nsvcs;
    struct ctl_svcmsg *ips; /* what each service message's strings point into */
    Fgx__Ctl__Service *svc_msgs, **svc_ptrs;
    struct ctl_filter *flts;
    size_t nflts;
    Fgx__Ctl__Filter *flt_msgs, **flt_ptrs;
    struct ctl_tls_pem *pems; /* per service: TLS certificates (keys: with_secrets only) */
    struct ctl_script_export scripts; /* the services' script filter files (ctl_script.c) */
};

/* Every service and filter of t (ids, flags and creation times; no counters), and the password
 * switch as stored. Released with ctl_config_export_release() (also after a failure). */
int ctl_config_export(struct ctl_txn *t, struct ctl_config_export *out);
void ctl_config_export_release(struct ctl_config_export *e);
/* After ctl_config_export() (same t): the TLS services' certificates, and their keys when
 * with_secrets. A stored key is never exported otherwise. */
int ctl_config_export_tls(struct ctl_txn *t, struct ctl_config_export *e, bool with_secrets);

/* Replace every service and filter in t by cfg's, with their ids, and store the password switch
 * when cfg has one. Returns 0; -EINVAL (or -EEXIST) with a one-line reason in err, naming the
 * offending service or filter; or a store error. */
int ctl_config_import(struct ctl_txn *t, const Fgx__Ctl__Config *cfg, char *err, size_t errlen);

/* How an import treats counters, and where its diff goes (all optional: ctl_config_import() is
 * ctl_config_import_ex() with none). */
struct ctl_import_fset {
    uint32_t id;
    uint64_t blocked;
};
struct ctl_import_sset {
    uint32_t id;
    struct ctl_svc_totals totals;
};
struct ctl_import_opts {
    /* Take counters from the file for what it brings back (Filter.blocked, Service.packets...,
     * blocked_removed): a history snapshot. A backup's are ignored (they may be stale). */
    bool counters;
    /* The live count of a filter (controld's running total); NULL: what the store saved. */
    uint64_t (*blocked_of)(void *arg, uint32_t filter_id);
    void *arg;
    struct ctl_diff *diff; /* NULL, or where each service's and filter's fate goes */
    /* out: the counters the import set, for the in-memory statistics after the commit */
    struct ctl_import_fset *fset;
    size_t nfset;
    struct ctl_import_sset *sset;
    size_t nsset;
    uint32_t duplicate_of; /* out, filter import refused: the existing identical filter */
};
void ctl_import_opts_release(struct ctl_import_opts *o);

/* ctl_config_import(), keeping what the file leaves as it is (see ctl_config.c). */
int ctl_config_import_ex(struct ctl_txn *t, const Fgx__Ctl__Config *cfg,
                         struct ctl_import_opts *o, char *err, size_t errlen);

/* Add the ruleset file's filters to imp->service (with imp->replace, its other filters go). Each
 * line's regex is checked, then the service's resulting set compiled whole; the first failure
 * gives -EINVAL and "line N: ..." in err (N from FilterSpec.line, else its position from 1).
 * The service is found by id or name: -ENOENT with the reason in err. *svc_id gets its id. */
int ctl_config_filter_import(struct ctl_txn *t, const Fgx__Ctl__FilterImport *imp, uint32_t *svc_id,
                             char *err, size_t errlen);

/* The warnings of one imported line (fgx_pattern_lint()), for the filter it became. */
struct ctl_config_warning {
    uint32_t filter_id;
    uint32_t line;
    struct fgx_pattern_warnings w;
};

/* ctl_config_filter_import(), and the warnings of the lines that have any in *warns (*nwarns
 * of them, malloc'd, the caller frees; NULL and 0 on failure). */
int ctl_config_filter_import_warn(struct ctl_txn *t, const Fgx__Ctl__FilterImport *imp,
                                  uint32_t *svc_id, struct ctl_config_warning **warns,
                                  size_t *nwarns, char *err, size_t errlen);

/* ctl_config_filter_import_warn() with options: under replace or sync, the file's lines with
 * the regex, direction and case of a filter the service has keep that filter (id, counters;
 * --sync: enabled state too) and give it their action and label, a "change" in the diff; two
 * such lines are refused. Otherwise a line identical to a filter the service has is refused
 * (-EEXIST, o->duplicate_of), as are two identical lines. */
int ctl_config_filter_import_ex(struct ctl_txn *t, const Fgx__Ctl__FilterImport *imp,
                                struct ctl_import_opts *o, uint32_t *svc_id,
                                struct ctl_config_warning **warns, size_t *nwarns, char *err,
                                size_t errlen);

/* The password switch as stored (true when never set). */
int ctl_config_auth_enabled(struct ctl_txn *t, bool *out);
int ctl_config_auth_enabled_put(struct ctl_txn *t, bool enabled);

/* The checks a service name must pass (letters, digits, '-', '_', '.'; 1 to CTL_NAME_MAX; not
 * all digits, since that is an id): 0 or -EINVAL with the reason in err. */
int ctl_config_name_check(const char *name, char *err, size_t errlen);
/* A filter's regex, as a service of this IP protocol compiles it: non-empty, at most
 * CTL_CONFIG_REGEX_MAX bytes, accepted by hyperscan. Returns 0 or -EINVAL with the reason. */
int ctl_config_regex_check(const char *regex, bool nocase, uint8_t ipproto, char *err,
                           size_t errlen);
/* The same check through the compile session (ctl_compile.h): its result when a compile child
 * made it, recorded for one while a change request is probed, else made now. What requests
 * call, so that no regex is compiled on the control loop. */
int ctl_config_regex_check_cached(const char *regex, bool nocase, uint8_t ipproto, char *err,
                                  size_t errlen);
/* ctl_config_regex_check_cached(), with the warnings of an accepted regex in *w (none when
 * refused; w may be NULL): see fgx_pattern_lint(). */
int ctl_config_regex_lint_cached(const char *regex, bool nocase, uint8_t ipproto,
                                 struct fgx_pattern_warnings *w, char *err, size_t errlen);
/* ctl_config_regex_check(), and what is likely to block honest traffic in *w (none when
 * refused): see fgx_pattern_lint(). */
/* A filter's action (a Fgx__Ctl__FilterAction) and label as they come in a request or a file: 0, or
 * -EINVAL with the reason ("invalid action ...", fgx_label_check()'s). */
int ctl_config_filter_extra_check(bool has_action, int action, const char *label, char *err,
                                  size_t errlen);
/* The action (always set) and label (when there is one) of f into m; m borrows f's label. */
void ctl_config_filter_extra_to_msg(const struct ctl_filter *f, Fgx__Ctl__Filter *m);

int ctl_config_regex_lint(const char *regex, bool nocase, uint8_t ipproto,
                          struct fgx_pattern_warnings *w, char *err, size_t errlen);

/* A block filter that would block (nearly) every captured connection needs --force: at least
 * CTL_FORCE_SHARE_PCT percent of at least CTL_FORCE_MIN_CONNS of the service's captured
 * connections, or all of at least CTL_FORCE_ALL_MIN. Fewer captures prove nothing. */
#define CTL_FORCE_MIN_CONNS 10
#define CTL_FORCE_SHARE_PCT 90
#define CTL_FORCE_ALL_MIN 3
/* Whether a filter that matches hits of the total captured connections needs --force. */
bool ctl_config_reach_too_wide(uint32_t hits, uint32_t total);
/* ctl_config_regex_lint(), with the warnings as text in err, one a line ("" when none): what
 * a compile child records for ctl_config_regex_lint_cached(). Returns 1 (not 0) for a regex
 * that matches any stream (fgx_pattern_warnings.any_stream, its reason the first line). */
int ctl_config_regex_lint_text(const char *regex, bool nocase, uint8_t ipproto, char *err,
                               size_t errlen);

#endif
