/* fgexctl, the administration commands: status, version, login, logout, passwd, auth, cert,
 * and the whole configuration's export and import. The ones that read or write local files
 * and sessions are finished by cli_local.c. */
#include "cmd.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli_fmt.h"
#include "cli_json.h"

/* ---- usage ---- */

/* clang-format off */
static const char usage_status[] =
    "usage: fgexctl status\n"
    "\n"
    "Show controld's version and uptime, the number of services, and its workers;\n"
    "rules: how often controld put its nftables rules back after another program\n"
    "removed them (the last gap, what was removed); store: ok, or DEGRADED while\n"
    "the state store cannot write for want of room (events wait in memory).\n";

static const char usage_version[] =
    "usage: fgexctl version\n"
    "\n"
    "Show fgexctl's version, then the version of the controld it reaches.\n"
    "With --json: {client, server}.\n";

static const char usage_export[] =
    "usage: fgexctl export FILE [--with-secrets]\n"
    "\n"
    "Save controld's whole configuration (services, their filters, settings; never the\n"
    "password hash or sessions) as one JSON document in FILE (mode 0600), or on stdout\n"
    "for `-`. `fgexctl import FILE` restores it. The format is in docs/fgexctl.md.\n"
    "TLS services' certificates are included, their keys only with --with-secrets.\n";

static const char usage_import[] =
    "usage: fgexctl import FILE [--dry-run]\n"
    "\n"
    "Replace controld's whole configuration with FILE (or - for stdin), as written by\n"
    "`fgexctl export`, atomically: a file that is malformed (its line and column are\n"
    "named) or asks for something impossible changes nothing and says why. What the\n"
    "file leaves as it was keeps its ids and counters: a service with the same id\n"
    "stays that service, a filter with the same id, service, regex, direction and case\n"
    "stays that filter. A removed filter's blocks stay in its service's total. The\n"
    "diff is printed.\n"
    "\n"
    "  --dry-run   print the diff and change nothing\n";

static const char usage_login[] =
    "usage: fgexctl [-c URL] login [--password-file F]\n"
    "\n"
    "Log in to controld with its password (the first line of F, else stdin; not echoed\n"
    "on a terminal). The session token is kept in ~/.config/fgex/sessions/ (mode 0600)\n"
    "and sent with every later request to the same URL.\n";

static const char usage_logout[] =
    "usage: fgexctl [-c URL] logout\n"
    "\n"
    "End the session with controld and forget its token.\n";

static const char usage_passwd[] =
    "usage: fgexctl passwd [--password-file F] [--expire-sessions]\n"
    "\n"
    "Set controld's password: the first line of F, else from stdin (asked twice on a\n"
    "terminal). Over the local socket, or by a logged-in remote client.\n"
    "\n"
    "  --expire-sessions   log out every other session\n";

static const char usage_auth[] =
    "usage: fgexctl auth on|off\n"
    "\n"
    "Require the password from remote clients (on), or not (off), from now on.\n";

static const char usage_cert[] =
    "usage: fgexctl cert\n"
    "\n"
    "Print the SHA-256 fingerprint of controld's TLS certificate, to compare with what\n"
    "a client pinned on first use.\n";
static const char usage_interfaces[] =
    "usage: fgexctl interfaces [--json]\n"
    "\n"
    "The network interfaces of controld's box: name, state (up or down, and whether\n"
    "its link is running), addresses, and the fgex services that listen on it, by its\n"
    "name (service addr add web eth1:80) or by one of its addresses or a prefix that\n"
    "holds one (services on every address, *, are not listed under each).\n";
static const char usage_reset[] =
    "usage: fgexctl reset [--keep-firewall] [--yes] [--json]\n"
    "\n"
    "Start afresh: remove every service with its filters and script, and the\n"
    "firewall's rules (switched off, its policies back to accept), in one change,\n"
    "as importing an empty backup would. The password, sessions, events and the\n"
    "change history stay, and `undo` brings the services, filters and scripts back\n"
    "with their counters, but not the firewall, which the change history does not\n"
    "hold (`fgexctl export FILE` first to keep it). Asks first on a terminal; --yes\n"
    "does not ask (and is needed without a terminal).\n"
    "\n"
    "  --keep-firewall   leave the firewall as it is\n";
/* clang-format on */

/* ---- building the request ---- */

static int build_login(struct cli_cmd *cmd, const struct cli_cmd_def *def,
                       const struct cli_args_raw *raw)
{
    (void)def;
    fgx__ctl__login__init(&cmd->m.login);
    cmd->password_file = cli_args_opt(raw, CLI_OPT_PASSWORD_FILE);
    cmd->req.login = &cmd->m.login;
    return 0;
}

static int build_passwd(struct cli_cmd *cmd, const struct cli_cmd_def *def,
                        const struct cli_args_raw *raw)
{
    (void)def;
    fgx__ctl__passwd__init(&cmd->m.passwd);
    cmd->password_file = cli_args_opt(raw, CLI_OPT_PASSWORD_FILE);
    if (cli_args_opt(raw, CLI_OPT_EXPIRE)) {
        cmd->m.passwd.has_expire_sessions = 1;
        cmd->m.passwd.expire_sessions = 1;
    }
    cmd->req.passwd = &cmd->m.passwd;
    return 0;
}

static int build_auth(struct cli_cmd *cmd, const struct cli_cmd_def *def,
                      const struct cli_args_raw *raw)
{
    int rc = 0;

    (void)def;
    fgx__ctl__auth_set__init(&cmd->m.auth_set);
    if (raw->pos[0] && strcmp(raw->pos[0], "on") == 0)
        cmd->m.auth_set.enabled = 1;
    else if (!raw->pos[0] || strcmp(raw->pos[0], "off") != 0)
        rc = cli_args_fail(cmd, CLI_EXIT_INVALID, "auth: '%.60s' must be on or off", raw->pos[0]);
    cmd->req.auth_set = &cmd->m.auth_set;
    return rc;
}

static int build_export(struct cli_cmd *cmd, const struct cli_cmd_def *def,
                        const struct cli_args_raw *raw)
{
    (void)cli_args_build_empty(cmd, def, raw);
    cmd->file = raw->pos[0];
    if (!cmd->file || !*cmd->file)
        return cli_args_fail(cmd, CLI_EXIT_INVALID, "export: the file name is empty");
    /* TLS keys leave controld only when asked for. */
    cmd->req.has_with_secrets = cli_args_opt(raw, CLI_OPT_WITH_SECRETS) != NULL;
    cmd->req.with_secrets = cmd->req.has_with_secrets;
    return 0;
}

/* The Config is read from the file by cli_local.c, before sending. */
static int build_import(struct cli_cmd *cmd, const struct cli_cmd_def *def,
                        const struct cli_args_raw *raw)
{
    (void)def;
    cmd->file = raw->pos[0];
    if (!cmd->file || !*cmd->file)
        return cli_args_fail(cmd, CLI_EXIT_INVALID, "import: the file name is empty");
    if (cli_args_opt(raw, CLI_OPT_DRY_RUN)) {
        cmd->req.has_dry_run = 1;
        cmd->req.dry_run = 1;
    }
    return 0;
}

/* ---- output ---- */

/* The TLS listeners' limits and what they closed (issue 24). */
static void human_status_listeners(FILE *f, const Fgx__Ctl__Status *st)
{
    for (size_t i = 0; i < st->n_listeners; i++) {
        const Fgx__Ctl__Listener *l = st->listeners[i];
        char key[32], line[400];
        int k;

        (void)snprintf(key, sizeof(key), "%s listener:", l->name);
        k = snprintf(line, sizeof(line),
                     "%" PRIu32 " open (%" PRIu32 " before a request), limits %" PRIu32
                     " in all, %" PRIu32 " per address, %" PRIu32
                     " s to a request; closed: %" PRIu64 " late, %" PRIu64 " per address, %" PRIu64
                     " full",
                     l->open, l->pending, l->max, l->per_src, l->handshake_s, l->closed_timeout,
                     l->closed_per_src, l->closed_full);
        if (l->has_streams && k > 0 && (size_t)k < sizeof(line))
            (void)snprintf(line + k, sizeof(line) - (size_t)k,
                           "; live streams %" PRIu32 " open, %" PRIu64 " refused", l->streams,
                           l->streams_refused);
        cli_fmt_kv(f, key, line);
    }
}

/* What fgex put right by itself, and a store short of room (issue 24). */
static void human_status_health(FILE *f, const Fgx__Ctl__Status *st)
{
    char line[512], when[64], dur[64];

    if (st->has_rules_restored) {
        if (st->rules_restored == 0) {
            cli_fmt_kv(f, "rules:", "in place (never restored)");
        } else {
            cli_fmt_time(st->rules_restored_last * 1000000000ull, false, when, sizeof(when));
            (void)snprintf(line, sizeof(line),
                           "restored %" PRIu64 " times, last at %s after a gap of %" PRIu64
                           " ms (longest %" PRIu64 " ms)%s",
                           st->rules_restored, when, st->rules_gap_ms, st->rules_gap_max_ms,
                           st->rules_fight ? "; another program keeps removing them: restored "
                                             "at most once a second"
                                           : "");
            cli_fmt_kv(f, "rules:", line);
            if (st->rules_removed && *st->rules_removed)
                cli_fmt_kv_str(f, "removed:", st->rules_removed);
        }
    }
    if (st->has_store_degraded && st->store_degraded) {
        cli_fmt_time(st->store_since * 1000000000ull, false, when, sizeof(when));
        cli_fmt_duration((uint64_t)time(NULL) > st->store_since
                             ? (uint64_t)time(NULL) - st->store_since
                             : 0,
                         dur, sizeof(dur));
        (void)snprintf(line, sizeof(line),
                       "DEGRADED since %s (%s): %s; last refused: %s (%" PRIu64 " refused)",
                       when, dur, st->store_error ? st->store_error : "writes fail",
                       st->store_failed ? st->store_failed : "a write", st->store_failures);
        cli_fmt_kv(f, "store:", line);
    } else if (st->has_store_degraded) {
        cli_fmt_kv(f, "store:", "ok");
    }
    if (st->has_events_unsaved && st->events_unsaved > 0) {
        (void)snprintf(line, sizeof(line),
                       "%" PRIu64 " in memory only, written when the store has room again",
                       st->events_unsaved);
        cli_fmt_kv(f, "events:", line);
    }
}

static int human_status(FILE *f, const Fgx__Ctl__Status *st)
{
    static const char *const heads[] = {"KIND", "PID", "STATE", "GENERATION", "RESTARTS"};
    struct cli_table t;
    char up[64], line[64];
    int rc;

    cli_fmt_duration(st->uptime, up, sizeof(up));
    cli_fmt_kv_str(f, "version:", st->version);
    cli_fmt_kv(f, "uptime:", up);
    (void)snprintf(line, sizeof(line), "%" PRIu32 " (%" PRIu32 " active)", st->services,
                   st->services_active);
    cli_fmt_kv(f, "services:", line);
    if (st->queue_mode && *st->queue_mode)
        cli_fmt_kv_str(f, "queue:", st->queue_mode);
    if (st->has_threads)
        cli_fmt_kv_u64(f, "threads:", st->threads);
    human_status_listeners(f, st);
    human_status_health(f, st);
    if (st->n_workers == 0) {
        cli_fmt_kv(f, "workers:", "none");
        return 0;
    }
    (void)fputc('\n', f);
    cli_fmt_table_init(&t, heads, 5, 1u << 1 | 1u << 3 | 1u << 4);
    for (size_t i = 0; i < st->n_workers; i++) {
        const Fgx__Ctl__Worker *w = st->workers[i];

        cli_fmt_table_add_str(&t, w->kind);
        cli_fmt_table_addf(&t, "%" PRId32, w->pid);
        cli_fmt_table_add_str(&t, w->state);
        cli_fmt_table_addf(&t, "%" PRIu64, w->generation);
        cli_fmt_table_addf(&t, "%" PRIu32, w->restarts);
    }
    rc = cli_fmt_table_print(f, &t);
    cli_fmt_table_release(&t);
    return rc;
}

static json_t *json_status_listener(const void *p)
{
    const Fgx__Ctl__Listener *l = p;
    json_t *o = json_pack(
        "{s:o, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "name", cli_json_str(l->name), "open",
        (json_int_t)l->open, "pending", (json_int_t)l->pending, "max", (json_int_t)l->max,
        "per_src", (json_int_t)l->per_src, "handshake_s", (json_int_t)l->handshake_s,
        "closed_timeout", cli_json_int(l->closed_timeout), "closed_per_src",
        cli_json_int(l->closed_per_src), "closed_full", cli_json_int(l->closed_full));

    if (o && l->has_streams) {
        json_object_set_new(o, "streams", json_integer(l->streams));
        json_object_set_new(o, "streams_per_session", json_integer(l->streams_per_session));
        json_object_set_new(o, "streams_per_src", json_integer(l->streams_per_src));
        json_object_set_new(o, "streams_max", json_integer(l->streams_max));
        json_object_set_new(o, "streams_refused", json_integer(cli_json_int(l->streams_refused)));
    }
    return o;
}

static json_t *json_status_worker(const void *p)
{
    const Fgx__Ctl__Worker *w = p;

    return json_pack("{s:o, s:I, s:o, s:I, s:I}", "kind", cli_json_str(w->kind), "pid",
                     (json_int_t)w->pid, "state", cli_json_str(w->state), "generation",
                     cli_json_int(w->generation), "restarts", cli_json_int(w->restarts));
}

static json_t *json_status_base(const Fgx__Ctl__Status *st);

static json_t *json_status_rules(const Fgx__Ctl__Status *st)
{
    if (!st->has_rules_restored)
        return json_null();
    return json_pack("{s:I, s:I, s:I, s:I, s:o, s:b}", "restored", cli_json_int(st->rules_restored),
                     "last", cli_json_int(st->rules_restored_last), "gap_ms",
                     cli_json_int(st->rules_gap_ms), "gap_max_ms",
                     cli_json_int(st->rules_gap_max_ms), "removed",
                     cli_json_str_or_null(st->rules_removed), "fight", st->rules_fight);
}

static json_t *json_status_store(const Fgx__Ctl__Status *st)
{
    if (!st->has_store_degraded)
        return json_null();
    return json_pack("{s:b, s:o, s:o, s:I, s:I, s:I}", "degraded", st->store_degraded, "error",
                     cli_json_str_or_null(st->store_error), "failed",
                     cli_json_str_or_null(st->store_failed), "since",
                     cli_json_int(st->store_since), "failures", cli_json_int(st->store_failures),
                     "events_unsaved", cli_json_int(st->events_unsaved));
}

static json_t *json_status(const Fgx__Ctl__Status *st)
{
    json_t *o = json_status_base(st);

    /* only from a controld that reports them */
    if (o && st->has_rules_restored)
        json_object_set_new(o, "rules", json_status_rules(st));
    if (o && st->has_store_degraded)
        json_object_set_new(o, "store", json_status_store(st));
    return o;
}

static json_t *json_status_base(const Fgx__Ctl__Status *st)
{
    return json_pack(
        "{s:o, s:I, s:I, s:I, s:o, s:o, s:o, s:o}", "version", cli_json_str(st->version), "uptime",
        cli_json_int(st->uptime), "services", cli_json_int(st->services), "services_active",
        cli_json_int(st->services_active), "queue_mode", cli_json_str_or_null(st->queue_mode),
        "threads", st->has_threads ? json_integer(cli_json_int(st->threads)) : json_null(),
        "workers", cli_fmt_json_list((void *const *)st->workers, st->n_workers, json_status_worker),
        "listeners",
        cli_fmt_json_list((void *const *)st->listeners, st->n_listeners, json_status_listener));
}

static int human_status_reply(FILE *f, const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep)
{
    (void)req;
    return rep->status ? human_status(f, rep->status) : 0;
}

static json_t *json_status_reply(const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep)
{
    (void)req;
    return rep->status ? json_status(rep->status) : json_null();
}

/* ---- the commands ---- */

/* ---- interfaces (issue 27) ---- */

static int human_interfaces(FILE *f, const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep)
{
    char esc[256];

    (void)req;
    if (rep->n_interfaces == 0)
        (void)fputs("no interfaces\n", f);
    for (size_t i = 0; i < rep->n_interfaces; i++) {
        const Fgx__Ctl__Interface *it = rep->interfaces[i];

        cli_fmt_escape(it->name, esc, sizeof(esc));
        (void)fprintf(f, "%-16s %-4s %-8s", esc, it->up ? "up" : "down",
                      it->loopback ? "loopback" : it->running ? "running" : "no-link");
        for (size_t k = 0; k < it->n_addrs; k++)
            (void)fprintf(f, " %s", it->addrs[k]);
        for (size_t k = 0; k < it->n_services; k++) {
            cli_fmt_escape(it->services[k], esc, sizeof(esc));
            (void)fprintf(f, "%s%s", k ? ", " : "   services: ", esc);
        }
        (void)fputc('\n', f);
    }
    return ferror(f) ? -EIO : 0;
}

/* [{name, index, up, running, loopback, addrs: ["10.0.0.2/24", ...], services: [names]}] */
static json_t *json_interfaces(const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep)
{
    json_t *a = json_array();

    (void)req;
    for (size_t i = 0; a && i < rep->n_interfaces; i++) {
        const Fgx__Ctl__Interface *it = rep->interfaces[i];
        json_t *ad = json_array(), *sv = json_array();

        for (size_t k = 0; ad && k < it->n_addrs; k++)
            (void)json_array_append_new(ad, cli_json_str(it->addrs[k]));
        for (size_t k = 0; sv && k < it->n_services; k++)
            (void)json_array_append_new(sv, cli_json_str(it->services[k]));
        if (!ad || !sv ||
            json_array_append_new(
                a, json_pack("{s:o, s:I, s:b, s:b, s:b, s:o, s:o}", "name", cli_json_str(it->name),
                             "index", cli_json_int(it->index), "up", it->up, "running",
                             it->running, "loopback", it->loopback, "addrs", ad, "services",
                             sv)) < 0) {
            json_decref(a);
            return NULL;
        }
    }
    return a;
}

/* ---- reset (issue 27) ---- */

/* An import of an empty configuration: controld's one way to change everything at once,
 * recorded and undoable like any import. Without --keep-firewall the backup's firewall is the
 * default one, off and empty. */
static int build_reset(struct cli_cmd *cmd, const struct cli_cmd_def *spec,
                       const struct cli_args_raw *raw)
{
    (void)spec;
    fgx__ctl__config__init(&cmd->m.reset.cfg);
    if (!cli_args_opt(raw, CLI_OPT_KEEP_FW)) {
        fgx__ctl__fw_config__init(&cmd->m.reset.fw);
        cmd->m.reset.fw.has_enabled = 1;
        cmd->m.reset.fw.enabled = 0;
        cmd->m.reset.cfg.fw = &cmd->m.reset.fw;
    }
    cmd->req.config_import = &cmd->m.reset.cfg;
    return 0;
}

static int human_reset(FILE *f, const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep)
{
    (void)req;
    return cli_cmd_diff_print(f, rep);
}

static json_t *json_reset(const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep)
{
    (void)req;
    return json_pack("{s:b, s:b, s:o}", "reset", 1, "keep_firewall", !req->config_import->fw,
                     "diff", cli_cmd_diff_json(rep));
}

static const struct cli_cmd_def admin_cmds[] = {
    {.name = "status",
     .req = FGX__CTL__REQUEST__REQ_STATUS,
     .usage = usage_status,
     .build = cli_args_build_empty,
     .human = human_status_reply,
     .json = json_status_reply},
    /* a status request, printed as the two versions by main.c */
    {.name = "version",
     .req = FGX__CTL__REQUEST__REQ_STATUS,
     .usage = usage_version,
     .build = cli_args_build_empty,
     .flags = CLI_CMD_VERSION},
    {.name = "login",
     .req = FGX__CTL__REQUEST__REQ_LOGIN,
     .opts = CLI_OPT_PASSWORD_FILE,
     .usage = usage_login,
     .build = build_login},
    {.name = "logout",
     .req = FGX__CTL__REQUEST__REQ_LOGOUT,
     .usage = usage_logout,
     .build = cli_args_build_empty},
    {.name = "passwd",
     .req = FGX__CTL__REQUEST__REQ_PASSWD,
     .opts = CLI_OPT_PASSWORD_FILE | CLI_OPT_EXPIRE,
     .usage = usage_passwd,
     .build = build_passwd},
    {.name = "auth",
     .req = FGX__CTL__REQUEST__REQ_AUTH_SET,
     .npos = 1,
     .pos_names = {"on|off"},
     .usage = usage_auth,
     .build = build_auth},
    {.name = "reset",
     .req = FGX__CTL__REQUEST__REQ_CONFIG_IMPORT,
     .opts = CLI_OPT_KEEP_FW,
     .usage = usage_reset,
     .build = build_reset,
     .human = human_reset,
     .json = json_reset,
     .flags = CLI_CMD_CHANGE,
     .confirm = "remove every service, filter and script, and the firewall's rules unless "
                "--keep-firewall (undo cannot bring the firewall back)%s"},
    {.name = "interfaces",
     .req = FGX__CTL__REQUEST__REQ_INTERFACES,
     .usage = usage_interfaces,
     .build = cli_args_build_empty,
     .human = human_interfaces,
     .json = json_interfaces},
    {.name = "cert",
     .req = FGX__CTL__REQUEST__REQ_CERT,
     .usage = usage_cert,
     .build = cli_args_build_empty},
    {.name = "export",
     .req = FGX__CTL__REQUEST__REQ_CONFIG_EXPORT,
     .npos = 1,
     .pos_names = {"FILE"},
     .opts = CLI_OPT_WITH_SECRETS,
     .usage = usage_export,
     .build = build_export},
    {.name = "import",
     .req = FGX__CTL__REQUEST__REQ_CONFIG_IMPORT,
     .npos = 1,
     .pos_names = {"FILE"},
     .opts = CLI_OPT_DRY_RUN,
     .usage = usage_import,
     .build = build_import,
     .flags = CLI_CMD_CHANGE},
    {.name = NULL},
};

const struct cli_cmd_family cli_cmd_admin = {.group = NULL, .usage = NULL, .cmds = admin_cmds};
