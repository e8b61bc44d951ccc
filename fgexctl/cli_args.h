/* fgexctl input stage: the command line, turned into one control.proto Request (or a help
 * text), with no I/O, so tests can check it argument by argument: the command is found in the
 * families' tables (cmd.h), its arguments scanned here and its request built by its family.
 * cli_rpc.c sends what it builds; cli_fmt.c prints the Reply. */
#ifndef CLI_ARGS_H
#define CLI_ARGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cli_sproxy.h"
#include "control.pb-c.h"

#define CLI_DEFAULT_URL "ipc:///run/fgex/control.sock"
#define CLI_WAIT_DEFAULT_S 30 /* --wait: how long a change waits for a busy controld */
#define CLI_WAIT_MAX_S 86400
#define CLI_PROG "fgexctl"
#define CLI_WATCH_MS 1000         /* stats --watch: default refresh */
#define CLI_WATCH_MIN_MS 100      /* --interval below this would only load controld */
#define CLI_WATCH_MAX_MS 86400000 /* a day: anything longer is a typo */

/* fgexctl's exit status (docs/fgexctl.md). */
enum cli_exit {
    CLI_EXIT_OK = 0,
    CLI_EXIT_ERROR = 1,       /* controld failed, or could not be reached */
    CLI_EXIT_USAGE = 2,       /* the command line does not parse */
    CLI_EXIT_NOT_FOUND = 3,   /* no such service or filter */
    CLI_EXIT_INVALID = 4,     /* a value is invalid: bad port, bad regex, ... */
    CLI_EXIT_EXISTS = 5,      /* name or port already taken */
    CLI_EXIT_UNAVAILABLE = 6, /* stored, but the worker did not confirm it */
    CLI_EXIT_AUTH = 7,        /* login required, or a wrong password or session */
    CLI_EXIT_CERT = 8,        /* the server's certificate does not match its pin */
};

struct cli_cmd {
    const char *url;           /* -c URL, else $FGEX_URL, else CLI_DEFAULT_URL; borrowed */
    const char *fingerprint;   /* --fingerprint FP: pin this certificate (tls+tcp) */
    const char *ca;            /* --ca FILE: verify the server against this CA (tls+tcp) */
    const char *file;          /* export/import FILE, filter import SERVICE FILE ("-": stdio) */
    const char *password_file; /* login/passwd --password-file F */
    bool json;                 /* --json */
    unsigned wait_s;           /* --wait SECS: how long a change waits for a busy controld */
    const char *help;          /* set: print this on stdout and exit 0; req is not set */
    bool version;              /* `fgexctl version`: req is a status request, printed as versions */
    bool watch;                /* stats --watch: refresh until interrupted (cli_loop.c) */
    bool follow;               /* events --follow: poll for new events until interrupted */
    unsigned interval_ms;      /* stats --watch --interval SEC, in ms (default CLI_WATCH_MS) */
    /* `regex test` (offline: no request is sent; cmd_regex.c runs it) */
    bool offline;
    struct {
        const char *regex;
        bool nocase, udp;
        Fgx__Ctl__Dir dir;
    } rtest;
    int exit_code;             /* after a failed parse: CLI_EXIT_USAGE or CLI_EXIT_INVALID */
    char err[320];             /* after a failed parse: the one-line reason, without "fgexctl: " */
    /* Contexts (cli_ctx.c), the confirmation (cli_confirm.c), the local commands. */
    bool url_given;                /* -c URL was on the command line */
    const char *context;           /* -C NAME[,NAME...] or -C all, or NULL */
    const char *ctx_name;          /* the stored context cmd was pointed at, or NULL */
    bool yes;                      /* --yes: do what a confirmation would have been asked */
    bool ctx_replace;              /* context add --replace */
    const struct cli_cmd_def *def; /* the command parsed (NULL with help) */
    const char *pos[2];            /* its positional arguments as given */
    /* Ready to pack. Its strings point into argv and its sub-message into m below, so the
     * cli_cmd and argv must outlive it; nothing in it is to be freed. */
    Fgx__Ctl__Request req;
    union {
        Fgx__Ctl__Empty empty;
        Fgx__Ctl__Ref ref;
        Fgx__Ctl__ServiceAdd service_add;
        Fgx__Ctl__ServiceRename service_rename;
        Fgx__Ctl__ServiceSet service_set;
        Fgx__Ctl__FilterAdd filter_add;
        Fgx__Ctl__WorkerRestart worker_restart;
        Fgx__Ctl__StatsQuery stats;
        Fgx__Ctl__EventsQuery events;
        Fgx__Ctl__Login login;
        Fgx__Ctl__Passwd passwd;
        Fgx__Ctl__AuthSet auth_set;
        Fgx__Ctl__FilterImport filter_import;
        Fgx__Ctl__HistoryQuery history;
        Fgx__Ctl__StatsHistoryQuery stats_history;
        Fgx__Ctl__FilterSet filter_set;
        Fgx__Ctl__ServiceAddrChange service_addr;
        struct {
            Fgx__Ctl__FwRuleAdd add;
            Fgx__Ctl__FwRule rule;
            Fgx__Ctl__FwRuleRef ref;
            Fgx__Ctl__FwPolicy policy;
            Fgx__Ctl__FwSet set;
            Fgx__Ctl__FwSwitch sw;
            Fgx__Ctl__FwImport imp;
        } fw; /* cmd_fw.c */
        Fgx__Ctl__CaptureQuery capture;
        Fgx__Ctl__EventShow event_show;
        Fgx__Ctl__FilterTest filter_test;
        Fgx__Ctl__ScriptSet script_set;
        Fgx__Ctl__ScriptFunctionRef script_fn;
        Fgx__Ctl__ScriptLogQuery script_log;
        Fgx__Ctl__HealthLogQuery service_log;
        struct {
            Fgx__Ctl__Config cfg;
            Fgx__Ctl__FwConfig fw;
        } reset; /* cmd_admin.c */
        struct {
            Fgx__Ctl__GameSet set;
            char *addrs[2][64]; /* --checker, --team: each address, pointing into text */
            char text[4096];    /* the addresses' words, split at their commas */
            size_t used;
        } game; /* cmd_game.c */
        struct {
            Fgx__Ctl__RegexMatch m;
            char *regex[16];  /* pointing into text */
            char text[16384]; /* the patterns, split at their newlines */
        } regex_match; /* cmd_regex.c */
    } m;
    char *addrs[32]; /* service add --addr, pointing into argv (CLI_ADDRS_MAX) */
    /* script commands: set, the command runs here instead of one request (script test, script
     * log --follow); returns the exit status. */
    int (*run_local)(struct cli_cmd *cmd);
    const char *pcap;        /* script test --pcap FILE */
    const char *script_port; /* script test --port PORT, or NULL */
    struct cli_sproxy_opts sproxy; /* script proxy (cli_sproxy.h) */
    /* Set by controld's web API (controld/ctl_webapi.c), which runs the builders and the
     * printers with no terminal, stdin or file of its own: every file the command would read
     * is one of blobs (by the name its argument gives), nothing is opened, and nothing is kept
     * in this file's process-wide state. Zero in fgexctl. */
    bool in_memory;
    const struct cli_blob *blobs;
    size_t nblobs;
};

/* A file's bytes handed over in memory (struct cli_cmd.blobs), under the name a command's
 * argument gives it. */
struct cli_blob {
    const char *name;
    const uint8_t *data;
    size_t len;
};

/* The one way the commands read a file (cli_blob.c): path's bytes, "-" standing for stdin, at
 * most max bytes (-EFBIG beyond), NUL-terminated and malloc'd. With cmd->in_memory, the blob
 * of that name instead (-ENOENT when there is none): nothing is opened. */
int cli_args_read_file(const struct cli_cmd *cmd, const char *path, size_t max, char **text,
                       size_t *len);
/* The blob named name of an in-memory cmd, or NULL. */
const struct cli_blob *cli_args_blob(const struct cli_cmd *cmd, const char *name);

/* Parse argv (argv[0] is the program). env_url is $FGEX_URL or NULL (passed in so the parse
 * depends on nothing but its arguments). Returns 0 with cmd->req set or cmd->help set, or
 * -EINVAL with cmd->exit_code and cmd->err set. */
int cli_args_parse(int argc, char **argv, const char *env_url, struct cli_cmd *cmd);

/* Parse a port, 1..65535, digits only. Returns 0 or -EINVAL. */
int cli_args_port(const char *s, unsigned *out);

/* An IPv4 or IPv6 address, or a prefix ADDR/LEN (controld checks host bits). */
bool cli_args_ip_valid(const char *s);

struct cli_cmd_def;
struct cli_args_raw;

/* Build cmd's request for the command spec from arguments already sorted into raw (as the
 * parse does after its scan; the web API fills raw from a JSON object). Returns 0 or -EINVAL
 * with cmd->err and cmd->exit_code set. */
int cli_args_build(struct cli_cmd *cmd, const struct cli_cmd_def *spec, struct cli_args_raw *raw);
/* Option k (0..CLI_NOPTS) of the table the scan reads: its name ("--capture-bytes"), its
 * CLI_OPT_* bit, and whether it takes a value: 0 never, 1 always, 2 only as --opt=VALUE. */
void cli_args_opt_info(size_t k, const char **name, uint64_t *bit, int *arg);

/* The top-level usage text. */
const char *cli_args_usage(void);

/* ---- for the command families' builders (cmd.h) ---- */
struct cli_cmd_def;
struct cli_args_raw;

/* Set cmd->err and cmd->exit_code; returns -EINVAL. */
int cli_args_fail(struct cli_cmd *cmd, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A usage error in a known command, with a pointer to its help. */
int cli_args_fail_usage(struct cli_cmd *cmd, const struct cli_cmd_def *spec, const char *what);
bool cli_args_is_help(const char *a);
bool cli_args_all_digits(const char *s);
/* The value of option bit (CLI_OPT_*) as scanned: NULL when not given, "" for a bare flag. */
const char *cli_args_opt(const struct cli_args_raw *raw, uint64_t bit);
/* Values as the options and positionals give them; each failure is in cmd->err. */
int cli_args_parse_ip(struct cli_cmd *cmd, const char *s, char **out);
int cli_args_parse_port(struct cli_cmd *cmd, const char *s, uint32_t *out);
int cli_args_parse_proto(struct cli_cmd *cmd, const char *s, Fgx__Ctl__Proto *out);
int cli_args_parse_layer(struct cli_cmd *cmd, const char *s, Fgx__Ctl__Layer *out);
int cli_args_parse_midstream(struct cli_cmd *cmd, const char *s, Fgx__Ctl__Midstream *out);
int cli_args_parse_dir(struct cli_cmd *cmd, const char *s, Fgx__Ctl__Dir *out);
int cli_args_parse_onoff(struct cli_cmd *cmd, const char *s, protobuf_c_boolean *out);
int cli_args_check_name(struct cli_cmd *cmd, const char *name);
int cli_args_check_ref(struct cli_cmd *cmd, const struct cli_cmd_def *spec, const char *ref);
/* Builders for the commands that send an Empty, or one Ref (the first positional). */
int cli_args_build_empty(struct cli_cmd *cmd, const struct cli_cmd_def *def,
                         const struct cli_args_raw *raw);
int cli_args_build_ref(struct cli_cmd *cmd, const struct cli_cmd_def *def,
                       const struct cli_args_raw *raw);

#endif
