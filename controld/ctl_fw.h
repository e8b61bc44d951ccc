/* controld stage: the firewall. Holds the rule model (an ordered first-match list, a policy
 * per direction, the usual options), checks rules, keeps the configuration in the state store
 * (one record, so a change is one write), compiles it (libcommon/fwc.c) and hands the result
 * to ctl_fw_nft.c. Also the confirm-or-revert of a change that could lock its author out. */
#ifndef CTL_FW_H
#define CTL_FW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "control.pb-c.h"
#include "controld/ctl_fw_nft.h"
#include "controld/ctl_store.h"
#include "fgx/addr.h"

#define CTL_FW_NAME_MAX 64
#define CTL_FW_ADDR_MAX 64
#define CTL_FW_ALLOW_MAX 64
#define CTL_FW_CONFIRM_MAX (24u * 3600u)
/* The longest rule list a change may make: refused before anything is compiled or stored, so
 * that controld answers its other clients meanwhile (compiling 100,000 rules of one source and
 * one port each takes ~1.5 s, and they would need one map each: CTL_FW_MAPS_MAX). */
#define CTL_FW_RULES_MAX 65536

enum ctl_fw_proto { CTL_FW_ANY = 0, CTL_FW_TCP = 1, CTL_FW_UDP = 2, CTL_FW_BOTH = 3 };
enum ctl_fw_opt {
    CTL_FW_OPT_LOOPBACK,
    CTL_FW_OPT_ESTABLISHED,
    CTL_FW_OPT_INVALID,
    CTL_FW_OPT_ICMP,
    CTL_FW_OPT_DHCP,
    CTL_FW_NOPTS
};

struct ctl_fw_rule {
    uint32_t id;
    char name[CTL_FW_NAME_MAX];
    bool active;
    uint8_t proto;  /* enum ctl_fw_proto */
    char src[CTL_FW_ADDR_MAX], dst[CTL_FW_ADDR_MAX]; /* "" any; canonical address or a name */
    bool has_sport, has_dport;
    uint16_t sport_lo, sport_hi, dport_lo, dport_hi;
    uint8_t dir;    /* enum ctl_fw_hook */
    uint8_t action; /* enum ctl_fw_verdict */
};

struct ctl_fw_conf {
    bool enabled;
    struct ctl_fw_rule *rules;
    size_t n, cap;
    bool policy_drop[CTL_FW_NHOOKS];
    bool opt[CTL_FW_NOPTS];
    uint32_t next_id;
};

/* What the kernel holds after the last apply, for replies. */
struct ctl_fw_state {
    const char *mode; /* "off", "empty", "compiled" */
    uint32_t lookups, pieces, maps, elements;
    uint32_t changed; /* elements the last change sent (added or removed) */
    uint64_t compile_us, apply_us;
};

struct ctl_fw_guard {
    uint16_t ctl_port; /* --listen's port, 0 without --listen */
    uint16_t web_port; /* --web-listen's port (the dashboard), 0 without */
    struct fgx_cidr allow[CTL_FW_ALLOW_MAX];
    size_t nallow;
};

/* Keep the dashboard's port (web_listen "ADDR:PORT", NULL: none) reachable too, for the same
 * peers. -EINVAL for an address without a port. */
int ctl_fw_guard_web(struct ctl_fw_guard *g, const char *web_listen);

struct ctl_fw;

/* The guard from controld's options: listen "tls+tcp://ADDR:PORT" (NULL: no remote control),
 * the --allow prefixes. -EINVAL for a listen URL without a port or more than
 * CTL_FW_ALLOW_MAX prefixes. */
int ctl_fw_guard_init(struct ctl_fw_guard *g, const char *listen, const char *const *allow,
                      size_t nallow);

/* The option's name as `fw set` takes it ("loopback", ...); -1 when unknown. */
int ctl_fw_opt_parse(const char *name);
const char *ctl_fw_opt_name(int opt);

/* The defaults: on, no rules, policies accept, loopback and established allowed. */
void ctl_fw_conf_init(struct ctl_fw_conf *c);
void ctl_fw_conf_release(struct ctl_fw_conf *c);
/* Insert r at 0-based position pos (clamped to the end). Returns 0 or -ENOMEM. */
int ctl_fw_conf_insert(struct ctl_fw_conf *c, const struct ctl_fw_rule *r, size_t pos);
/* The position of a rule by id (all digits) or name; -ENOENT. */
int ctl_fw_conf_find(const struct ctl_fw_conf *c, const char *ref, size_t *pos);

/* A rule from its message, checked and made canonical: 0, or -EINVAL with the reason in err. */
int ctl_fw_rule_from_msg(const Fgx__Ctl__FwRule *m, struct ctl_fw_rule *out, char *err,
                         size_t len);
/* Names unique among the rules (empty names aside): 0 or -EEXIST with the reason. */
int ctl_fw_conf_check_names(const struct ctl_fw_conf *c, char *err, size_t len);

/* The configuration as a message: every string points into c, which must outlive *out.
 * ctl_fw_msg_release() frees what this allocated. */
int ctl_fw_conf_to_msg(const struct ctl_fw_conf *c, Fgx__Ctl__FwConfig *out);
void ctl_fw_msg_release(Fgx__Ctl__FwConfig *m);
/* From a message (a backup, a stored record): every rule checked; -EINVAL with the reason. */
int ctl_fw_conf_from_msg(const Fgx__Ctl__FwConfig *m, struct ctl_fw_conf *out, char *err,
                         size_t len);

/* The stored configuration (the defaults when none is stored), and its replacement. */
int ctl_fw_conf_load(struct ctl_txn *t, struct ctl_fw_conf *out);
int ctl_fw_conf_save(struct ctl_txn *t, const struct ctl_fw_conf *c);
/* dst: a copy of src with rules of its own. 0 or -ENOMEM. */
int ctl_fw_conf_copy(const struct ctl_fw_conf *src, struct ctl_fw_conf *dst);

/* table NULL: "fgex_fw". *out owned by the caller (ctl_fw_free()). */
int ctl_fw_new(const char *table, const struct ctl_fw_guard *g, struct ctl_fw **out);
/* Closes; the table stays in the kernel, in force while controld is stopped. NULL: no-op. */
void ctl_fw_free(struct ctl_fw *fw);
/* Compile c and replace the kernel's table with it in one transaction. 0, or a negative
 * errno with the reason in err (nothing changed in the kernel). */
int ctl_fw_apply(struct ctl_fw *fw, const struct ctl_fw_conf *c, char *err, size_t len);
const struct ctl_fw_state *ctl_fw_state(const struct ctl_fw *fw);
/* Counts the changes applied (ctl_fw_apply()) and the confirm deadlines set, kept or run out:
 * the dashboard compares it to announce a change whoever made it. The loop's own, as is every
 * call here. 0 for fw NULL. */
uint64_t ctl_fw_gen(const struct ctl_fw *fw);

/* ---- confirm or revert ---- */
/* Seconds left before an unconfirmed change is reverted (0: none waits). */
uint32_t ctl_fw_pending_secs(const struct ctl_fw *fw);
/* A change about to be committed in t, with a deadline of secs: the first one saves prev (the
 * configuration to go back to) in t, later ones keep it and move the deadline. */
int ctl_fw_pending_begin(struct ctl_fw *fw, struct ctl_txn *t, const struct ctl_fw_conf *prev,
                         uint32_t secs);
/* The caller committed t: the deadline counts from now. prev: the configuration the change
 * replaced (the first change of a window: what the window goes back to). Forks the window's
 * watchdog: a process of its own that holds that configuration and writes it to the kernel
 * 500 ms past the deadline unless told the window closed (confirmed, or reverted by controld),
 * so the revert does not wait for controld's loop, nor for controld being alive. */
void ctl_fw_pending_arm(struct ctl_fw *fw, const struct ctl_fw_conf *prev, uint32_t secs);
/* Where the watchdog's pid file goes (RUN_DIR/fw-watchdog.pid), so that the next controld ends
 * one its predecessor left; NULL: none. Before ctl_fw_start(). */
int ctl_fw_set_run_dir(struct ctl_fw *fw, const char *run_dir);
/* The netlink port id of the watchdog's socket (0: none yet): its change is fgex's own. */
uint32_t ctl_fw_watchdog_portid(const struct ctl_fw *fw);
/* fw confirm, inside t: -ENOENT when nothing waits. ctl_fw_pending_clear() once committed. */
int ctl_fw_pending_confirm(struct ctl_fw *fw, struct ctl_txn *t);
void ctl_fw_pending_clear(struct ctl_fw *fw);
/* At start: revert an unconfirmed change left by a previous run, then apply what is stored.
 * From the loop: revert once the deadline passed. */
int ctl_fw_start(struct ctl_fw *fw, struct ctl_store *s);
void ctl_fw_tick(struct ctl_fw *fw, struct ctl_store *s);
/* The firewall's nftables table, for the watch (ctl_nftwatch.c): NULL when fw is. */
struct ctl_fw_nft *ctl_fw_nft_of(struct ctl_fw *fw);
/* Someone else changed or removed the table: write the stored configuration whole again.
 * 0, or a negative errno (logged). */
int ctl_fw_restore(struct ctl_fw *fw, struct ctl_store *s);

#endif
