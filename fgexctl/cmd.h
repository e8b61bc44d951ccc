/* fgexctl's commands, by family (git's builtin/ with its commands[] table): each
 * cmd_<family>.c holds its commands' usage texts, argument specs, request builders and
 * renderers (text and JSON), in a table of struct cli_cmd_def; cmd.c lists the families, and
 * the parse (cli_args.c) and the output (cli_fmt.c) walk that one list. A new command adds an
 * entry to its family's table and its messages to proto/. */
#ifndef CLI_CMD_H
#define CLI_CMD_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "cli_args.h"
#include "control.pb-c.h"

#define CLI_SERVICE_HELP_NOTE "SERVICE is a service id or name.\n"

/* The options a command may take (struct cli_cmd_def.opts, a mask of these bits);
 * cli_args.c knows their names. More than 32, so 64-bit. */
#define CLI_OPT_PROTO (UINT64_C(1) << 0)
#define CLI_OPT_PORT (UINT64_C(1) << 1)
#define CLI_OPT_IP (UINT64_C(1) << 2)
#define CLI_OPT_LAYER (UINT64_C(1) << 3)
#define CLI_OPT_FAIL_OPEN_FLAG (UINT64_C(1) << 4) /* service add: --fail-open [=on|off] */
#define CLI_OPT_FAIL_OPEN_ARG (UINT64_C(1) << 5) /* service set: --fail-open on|off */
#define CLI_OPT_DIR (UINT64_C(1) << 6)
#define CLI_OPT_NOCASE (UINT64_C(1) << 7)
#define CLI_OPT_WATCH (UINT64_C(1) << 8)
#define CLI_OPT_INTERVAL (UINT64_C(1) << 9)
#define CLI_OPT_LIMIT (UINT64_C(1) << 10)
#define CLI_OPT_FOLLOW (UINT64_C(1) << 11)
#define CLI_OPT_PASSWORD_FILE (UINT64_C(1) << 12)
#define CLI_OPT_EXPIRE (UINT64_C(1) << 13)
#define CLI_OPT_REPLACE (UINT64_C(1) << 14)
#define CLI_OPT_MIDSTREAM (UINT64_C(1) << 15)
#define CLI_OPT_SYNC (UINT64_C(1) << 16) /* filter import --sync */
#define CLI_OPT_DRY_RUN (UINT64_C(1) << 17) /* filter import, import: --dry-run */
#define CLI_OPT_SINCE (UINT64_C(1) << 18) /* history, stats --history, events --top: --since DURATION */
#define CLI_OPT_HISTORY (UINT64_C(1) << 19) /* stats --history */
#define CLI_OPT_LOG (UINT64_C(1) << 20) /* filter add --log */
#define CLI_OPT_ACTION (UINT64_C(1) << 21) /* filter set --action block|log */
#define CLI_OPT_LABEL (UINT64_C(1) << 22) /* filter add|set --label TEXT */
#define CLI_OPT_TOP (UINT64_C(1) << 23) /* events --top src */
#define CLI_OPT_ADDR (UINT64_C(1) << 24) /* service add: --addr ADDR[:PORT], repeatable */
#define CLI_OPT_TO (UINT64_C(1) << 25) /* service add|set: --to ADDR:PORT (layer external) */
#define CLI_OPT_TLS_CERT (UINT64_C(1) << 26)
#define CLI_OPT_TLS_KEY (UINT64_C(1) << 27)
#define CLI_OPT_NO_TLS (UINT64_C(1) << 28)
#define CLI_OPT_UPSTREAM (UINT64_C(1) << 29)
#define CLI_OPT_WITH_SECRETS (UINT64_C(1) << 30)
/* capture (cmd_capture.c) */
#define CLI_OPT_CAPTURE (UINT64_C(1) << 31) /* The same pcap in memory for the web API: *buf malloc'd. Returns 0 or -errno with err set. */
int cli_cmd_capture_pcap(const Fgx__Ctl__Reply *rep, uint8_t **buf, size_t *len, char *err,
                         size_t errlen);
/* `events show SEQ --raw [--dir s2c]`'s bytes in memory: one direction of the event's capture,
 * *buf malloc'd. Returns 0, -ENOENT (no capture kept) or -ENOMEM. */
int cli_cmd_event_raw(const Fgx__Ctl__Reply *rep, bool s2c, uint8_t **buf, size_t *len);
/* One script log entry as `script log --follow --json` prints it (cmd_script.c). */
json_t *cli_cmd_script_log_entry_json(const Fgx__Ctl__ScriptLogEntry *e);
/* service add/set --capture on|off */
#define CLI_OPT_CAPTURE_BYTES (UINT64_C(1) << 32) /* --capture-bytes N */
#define CLI_OPT_CAPTURE_CONNS (UINT64_C(1) << 33) /* --capture-conns N */
#define CLI_OPT_PCAP (UINT64_C(1) << 34) /* capture --pcap FILE */
#define CLI_OPT_BLOCKED (UINT64_C(1) << 35)
#define CLI_OPT_SRC (UINT64_C(1) << 36)
#define CLI_OPT_FILTER (UINT64_C(1) << 37)
#define CLI_OPT_RAW (UINT64_C(1) << 38) /* events show SEQ --raw */
#define CLI_OPT_DEADLINE (UINT64_C(1) << 39) /* script set --deadline MS */
#define CLI_OPT_SERVICE (UINT64_C(1) << 40)  /* script test --service SERVICE */
#define CLI_OPT_FORCE (UINT64_C(1) << 41)    /* filter add|set|enable|import --force */
#define CLI_OPT_REGEX (UINT64_C(1) << 42)    /* filter set --regex R */
#define CLI_OPT_MAX_CONNS (UINT64_C(1) << 43)  /* service set --max-conns N */
#define CLI_OPT_OVER_LIMIT (UINT64_C(1) << 44) /* service set --over-limit forward|refuse */
#define CLI_OPT_FIRST_BYTE (UINT64_C(1) << 45) /* service set --first-byte-timeout S */
#define CLI_OPT_FROM (UINT64_C(1) << 46)       /* stats --from T (--to T: CLI_OPT_TO) */
#define CLI_OPT_STEP (UINT64_C(1) << 47)       /* stats --step S */
#define CLI_OPT_KEEP_FW (UINT64_C(1) << 48)    /* reset --keep-firewall */
#define CLI_OPT_FLAGS (UINT64_C(1) << 49)      /* events --flags */
#define CLI_OPT_LISTEN (UINT64_C(1) << 60)     /* script proxy --listen ADDR:PORT */
#define CLI_NOPTS 64
/* --addr given more than this is refused by fgexctl (controld's bound is the same). */
#define CLI_ADDRS_MAX 32

/* What the scan of a command's arguments found, before any value is interpreted. */
struct cli_args_raw {
    const char *pos[2];
    int npos;
    const char *val[CLI_NOPTS]; /* NULL: option not given; "" for a flag given without value */
    const char *addrs[CLI_ADDRS_MAX]; /* every --addr, in order (val holds the last) */
    int naddrs;
    /* CLI_CMD_RAW commands: every word after the command's, unscanned (borrowed from argv) */
    char **rest;
    int nrest;
};

struct cli_cmd_def;

/* Fill cmd->m and the request's member from raw. Returns 0, or -EINVAL with cmd->err set
 * (cli_args_fail). */
typedef int (*cli_cmd_build_fn)(struct cli_cmd *cmd, const struct cli_cmd_def *def,
                                const struct cli_args_raw *raw);
/* The reply for a human. Returns 0, -ENOMEM or -EIO. */
typedef int (*cli_cmd_human_fn)(FILE *f, const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep);
/* The reply as one JSON value (a new reference; NULL when out of memory). */
typedef json_t *(*cli_cmd_json_fn)(const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep);

enum cli_cmd_flags {
    CLI_CMD_CHANGE = 1u << 0,  /* changes services or filters: controld may compile for long */
    CLI_CMD_VERSION = 1u << 1, /* `fgexctl version`: a status request, printed as versions */
    CLI_CMD_LOCAL = 1u << 2,   /* sends nothing: run on this machine (`context ...`) */
    CLI_CMD_OFFLINE = 1u << 3, /* runs in fgexctl alone, no request (cli_cmd.offline) */
    /* The builder scans its own arguments (raw->rest): options of the family's own, as the
     * firewall's rule options, which a rule file shares (cmd_fw.c). */
    CLI_CMD_RAW = 1u << 4,
};

struct cli_cmd_def {
    const char *group; /* its family's group word ("service"), or NULL at the top level */
    const char *name;  /* NULL ends a table; "rule add": two words after the group */
    Fgx__Ctl__Request__ReqCase req;
    int npos; /* number of positional arguments */
    const char *pos_names[2];
    uint64_t opts; /* CLI_OPT_* bits */
    const char *usage;
    bool pos_optional; /* the positionals may be left out ([SERVICE]) */
    cli_cmd_build_fn build;
    cli_cmd_human_fn human; /* NULL: prints nothing, or cli_local.c prints (files, sessions) */
    cli_cmd_json_fn json;
    unsigned flags; /* enum cli_cmd_flags */
    /* Set: the command undoes what cannot be had back, so it asks first on a terminal and
     * takes --yes (cli_confirm.c); what it does, with %s for its first positional. */
    const char *confirm;
};

struct cli_cmd_family {
    const char *group; /* "service", "filter", "worker", or NULL: top-level commands */
    const char *usage; /* the group's own help (`fgexctl service --help`), NULL without group */
    const struct cli_cmd_def *cmds;
};

extern const struct cli_cmd_family cli_cmd_admin, cli_cmd_service, cli_cmd_filter, cli_cmd_worker,
    cli_cmd_stats, cli_cmd_events, cli_cmd_history, cli_cmd_fw,
    cli_cmd_capture, cli_cmd_script;
extern const struct cli_cmd_family cli_cmd_context;

/* Run a CLI_CMD_LOCAL command of the context family (cmd_context.c), printing on out, errors
 * on err. Returns fgexctl's exit status. */
int cli_cmd_context_run(struct cli_cmd *cmd, FILE *out, FILE *err);

extern const struct cli_cmd_family cli_cmd_regex;

/* ---- the game (cmd_game.c) ---- */
extern const struct cli_cmd_family cli_cmd_game;
/* The game as `game show --json` prints it (the page's too). */
json_t *cli_cmd_game_json(const Fgx__Ctl__GameConfig *g);

/* A duration as --since takes it: digits with an optional unit s, m, h or d (seconds without).
 * Returns 0 or -EINVAL. (cmd_events.c) */
int cli_cmd_parse_duration(const char *s, uint64_t *secs);
/* --limit N: 1..999999999, else a usage error naming what is counted ("events"). (cmd_events.c) */
int cli_cmd_parse_limit(struct cli_cmd *cmd, const char *v, const char *what, uint32_t *out);

/* An offline command (CLI_CMD_OFFLINE: `regex test`): run it, printing to out and err, and
 * return the exit status. (cmd_regex.c) */
int cli_cmd_offline_run(const struct cli_cmd *cmd, FILE *out, FILE *err);

/* ---- capture (cmd_capture.c) ---- */
/* A capture reply's connections as a pcap at path, as `capture --pcap` writes it (`script test
 * --service` runs a file over it). Returns 0 or -errno with err set; *conns: how many. */
int cli_cmd_capture_write(const Fgx__Ctl__Reply *rep, const char *path, size_t *conns, char *err,
                          size_t errlen);
/* The same pcap in memory for the web API: *buf malloc'd. Returns 0 or -errno with err set. */
int cli_cmd_capture_pcap(const Fgx__Ctl__Reply *rep, uint8_t **buf, size_t *len, char *err,
                         size_t errlen);
/* `events show SEQ --raw [--dir s2c]`'s bytes in memory: one direction of the event's capture,
 * *buf malloc'd. Returns 0, -ENOENT (no capture kept) or -ENOMEM. */
int cli_cmd_event_raw(const Fgx__Ctl__Reply *rep, bool s2c, uint8_t **buf, size_t *len);
/* One script log entry as `script log --follow --json` prints it (cmd_script.c). */
json_t *cli_cmd_script_log_entry_json(const Fgx__Ctl__ScriptLogEntry *e);
/* service add/set --capture on|off --capture-bytes N --capture-conns N into the message's
 * capture fields (the same three in ServiceAdd and ServiceSet). Returns 0 or -EINVAL; *any set
 * when one was given. */
int cli_cmd_capture_opts(struct cli_cmd *cmd, const struct cli_args_raw *raw,
                         protobuf_c_boolean *has_on, protobuf_c_boolean *on,
                         protobuf_c_boolean *has_conns, uint32_t *conns,
                         protobuf_c_boolean *has_bytes, uint32_t *bytes, bool *any);
/* `events show SEQ`: events' build hands over to it when its first word is "show". */
int cli_cmd_event_show_build(struct cli_cmd *cmd, const struct cli_cmd_def *spec,
                             const struct cli_args_raw *raw);
/* One event as `fgexctl --json events` prints it (cmd_events.c). */
json_t *cli_cmd_event_json(const Fgx__Ctl__Event *e);
/* SERVICE REGEX [--dir D] [--nocase] of filter add and filter test (cmd_filter.c): checked into
 * the message's fields; what names the command in errors. Returns 0 or -EINVAL. */
int cli_cmd_regex_args(struct cli_cmd *cmd, const struct cli_cmd_def *spec,
                       const struct cli_args_raw *raw, const char *what, char **service,
                       char **regex, protobuf_c_boolean *has_dir, Fgx__Ctl__Dir *dir,
                       protobuf_c_boolean *has_nocase, protobuf_c_boolean *nocase);
/* `filter test`, in the filter family's table. */
extern const char cli_cmd_usage_filter_test[];
int cli_cmd_filter_test_build(struct cli_cmd *cmd, const struct cli_cmd_def *spec,
                              const struct cli_args_raw *raw);
int cli_cmd_filter_test_human(FILE *f, const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep);
json_t *cli_cmd_filter_test_json(const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep);

/* `service log` (cmd_svclog.c), in the service family's table; one entry as its --follow
 * --json prints it (the page's live messages too). */
extern const char cli_cmd_usage_service_log[];
int cli_cmd_service_log_build(struct cli_cmd *cmd, const struct cli_cmd_def *spec,
                              const struct cli_args_raw *raw);
int cli_cmd_service_log_human(FILE *f, const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep);
json_t *cli_cmd_service_log_json(const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep);
json_t *cli_cmd_health_entry_json(const Fgx__Ctl__HealthEntry *e);

/* Every family, NULL-terminated (cmd.c). */
extern const struct cli_cmd_family *const cli_cmd_families[];

/* The first command that sends req (status before version), or NULL. */
const struct cli_cmd_def *cli_cmd_of_req(Fgx__Ctl__Request__ReqCase req);

/* `stats --watch`, one refresh: the stats table of cur with, beside each total, its rate per
 * second since prev, taken secs earlier ("-" where prev is NULL or has no such service).
 * Returns 0, -ENOMEM or -EIO. (cmd_stats.c) */
int cli_cmd_stats_watch(FILE *f, const Fgx__Ctl__Reply *cur, const Fgx__Ctl__Reply *prev,
                        double secs);

/* `events --follow`, one batch: the events of rep as table rows of fixed minimum widths (so
 * batches line up; the header first when head is set), or one JSON object per line. Returns 0,
 * -ENOMEM or -EIO. (cmd_events.c) */
int cli_cmd_events_follow(FILE *f, const Fgx__Ctl__Reply *rep, bool json, bool head);

/* ---- issue 14 (cmd_history.c) ---- */
/* --since DURATION ("90s", "30m", "1h", "2d", or seconds) as the unix time that long ago. */
int cli_cmd_parse_since(struct cli_cmd *cmd, const char *s, uint64_t *out);
/* An import's diff (Reply.diff): one line per change ("+ filter 12 web c2s /evil/"), then a
 * summary line; "no change" when there is none. Returns 0 or -EIO. */
int cli_cmd_diff_print(FILE *f, const Fgx__Ctl__Reply *rep);
/* The same as a JSON array of DiffEntry objects (docs/fgexctl.md). */
json_t *cli_cmd_diff_json(const Fgx__Ctl__Reply *rep);
/* `stats --history`: build its request (the stats command's builder hands over). */
int cli_cmd_stats_history_build(struct cli_cmd *cmd, const struct cli_cmd_def *spec,
                                const struct cli_args_raw *raw);

#endif
