/* fgexctl, the context commands: add, use, list, rm, show. They send nothing: they edit the
 * store of named controlds (cli_ctx.c), the per-context pins and the boxes' sessions. */
#include "cmd.h"

#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli_ctx.h"
#include "cli_fmt.h"
#include "cli_json.h"
#include "cli_pin.h"
#include "cli_session.h"

/* ---- usage ---- */

/* clang-format off */
static const char usage_context[] =
    "usage: fgexctl context COMMAND ...\n"
    "\n"
    "Named controlds, as kubectl's contexts: `fgexctl -C NAME COMMAND` runs a command on\n"
    "one, `-C a,b,c` or `-C all` on several at once.\n"
    "\n"
    "Commands:\n"
    "  add NAME URL [--fingerprint FP] [--ca FILE] [--replace]\n"
    "  use NAME\n"
    "  list\n"
    "  show [NAME]\n"
    "  rm NAME\n"
    "\n"
    "`fgexctl context COMMAND --help` for one command.\n";

static const char usage_context_add[] =
    "usage: fgexctl context add NAME URL [--fingerprint FP] [--ca FILE] [--replace]\n"
    "\n"
    "Name a controld: URL is tls+tcp://HOST:PORT (a remote one) or ipc://PATH (a local\n"
    "socket). NAME: letters, digits, '.', '_', '-'; `all` and `local` are reserved (`local`\n"
    "is built in: " CLI_DEFAULT_URL ").\n"
    "Each context keeps its own certificate pin in ~/.config/fgex/contexts/NAME/\n"
    "(known_hosts, certs/). Its login is the box's: -c URL of the same HOST:PORT with\n"
    "the same pinned certificate uses it too (~/.config/fgex/sessions/).\n"
    "\n"
    "  --fingerprint FP   pin this SHA-256 now (else the first connection pins what the\n"
    "                     server presents, or a pin ~/.config/fgex/known_hosts already\n"
    "                     holds for HOST:PORT is taken over)\n"
    "  --ca FILE          verify the server against this PEM certificate or CA\n"
    "  --replace          change the context NAME if it exists\n";

static const char usage_context_use[] =
    "usage: fgexctl context use NAME\n"
    "\n"
    "Make NAME the current context: commands without -c or -C go to it. `context use\n"
    "local` goes back to the local socket. $FGEX_URL, when set, still comes first.\n";

static const char usage_context_list[] =
    "usage: fgexctl context list\n"
    "\n"
    "List the contexts, the current one marked '*'.\n";

static const char usage_context_show[] =
    "usage: fgexctl context show [NAME]\n"
    "\n"
    "Show a context (default: the current one): its URL, --ca, pinned certificate and\n"
    "whether a session is stored.\n";

static const char usage_context_rm[] =
    "usage: fgexctl context rm NAME\n"
    "\n"
    "Forget a context, with its pin. Its box's login stays for -c URL (`logout` ends it).\n";
/* clang-format on */

static int build_context(struct cli_cmd *cmd, const struct cli_cmd_def *def,
                         const struct cli_args_raw *raw)
{
    char why[200];

    if (raw->npos > 0 && strcmp(def->name, "add") == 0 &&
        cli_ctx_name_check(raw->pos[0], why, sizeof(why)) < 0)
        return cli_args_fail(cmd, CLI_EXIT_INVALID, "context add: %s", why);
    if (raw->npos > 1 && !cli_ctx_url_valid(raw->pos[1]))
        return cli_args_fail(cmd, CLI_EXIT_INVALID,
                             "context add: invalid URL '%.200s': expected ipc://PATH or "
                             "tls+tcp://HOST:PORT",
                             raw->pos[1]);
    cmd->ctx_replace = cli_args_opt(raw, CLI_OPT_REPLACE) != NULL;
    return 0;
}

/* ---- running ---- */

static int cfail(FILE *err, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int cfail(FILE *err, int code, const char *fmt, ...)
{
    va_list ap;

    (void)fprintf(err, "%s" CLI_PROG ":%s ", cli_fmt_paint(CLI_COLOR_ERR),
                  cli_fmt_paint(CLI_COLOR_OFF));
    va_start(ap, fmt);
    (void)vfprintf(err, fmt, ap);
    va_end(ap);
    (void)fputc('\n', err);
    return code;
}

/* The pin a context holds for its URL ("" for none, or an ipc:// URL). */
static void ctx_pin(const struct cli_ctx *c, char fp[CLI_FP_SIZE])
{
    struct cli_pin_target t;
    char dir[PATH_MAX], kh[PATH_MAX + 16];
    unsigned line;

    fp[0] = '\0';
    if (cli_pin_target(c->url, &t) < 0)
        return;
    if ((c->builtin ? cli_pin_base_dir(dir, sizeof(dir))
                    : cli_ctx_dir_path(c->name, dir, sizeof(dir))) < 0)
        return;
    (void)snprintf(kh, sizeof(kh), "%s/known_hosts", dir);
    if (cli_pin_lookup(kh, t.hostport, fp, &line) < 0)
        fp[0] = '\0';
}

/* The session file of a context's box (shared with -c URL: cli_session.h), when one is
 * stored. */
static bool ctx_session(const struct cli_ctx *c, char *path, size_t len)
{
    char dir[PATH_MAX];

    if ((c->builtin ? cli_pin_base_dir(dir, sizeof(dir))
                    : cli_ctx_dir_path(c->name, dir, sizeof(dir))) < 0)
        return false;
    if (cli_session_path_in(c->url, dir, path, len) < 0)
        return false;
    return access(path, F_OK) == 0;
}

static const char *current_name(const struct cli_ctx_store *s)
{
    return s->current ? s->current : CLI_CTX_LOCAL;
}

static json_t *ctx_json(const struct cli_ctx_store *s, const struct cli_ctx *c, bool details)
{
    json_t *o = json_pack("{s:o, s:o, s:o, s:b, s:b}", "name", cli_json_str(c->name), "url",
                          cli_json_str(c->url), "ca", cli_json_str_or_null(c->ca), "current",
                          strcmp(current_name(s), c->name) == 0, "builtin", c->builtin);
    char fp[CLI_FP_SIZE], path[PATH_MAX];
    bool sess;

    if (!o || !details)
        return o;
    ctx_pin(c, fp);
    sess = ctx_session(c, path, sizeof(path));
    if (json_object_set_new(o, "fingerprint", cli_json_str_or_null(fp[0] ? fp : NULL)) < 0 ||
        json_object_set_new(o, "session", json_boolean(sess)) < 0) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static int print_doc(FILE *out, FILE *err, json_t *doc)
{
    if (cli_json_print(out, doc, false) < 0)
        return cfail(err, CLI_EXIT_ERROR, "cannot write the output");
    return CLI_EXIT_OK;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path) == -1 && errno != ENOENT ? -1 : 0;
}

static int run_add(struct cli_cmd *cmd, struct cli_ctx_store *s, FILE *out, FILE *err)
{
    const char *name = cmd->pos[0], *url = cmd->pos[1];
    char ca[PATH_MAX], fp[CLI_FP_SIZE] = "", dir[PATH_MAX], kh[PATH_MAX + 16], why[1024];
    const char *pinned_from = NULL;
    struct cli_pin_target t;
    const struct cli_ctx *c;
    bool tls = cli_pin_is_tls(url);
    unsigned line;
    int rc;

    if ((cmd->fingerprint || cmd->ca) && !tls)
        return cfail(err, CLI_EXIT_USAGE,
                     "context add: --fingerprint and --ca apply to tls+tcp://HOST:PORT URLs only");
    if (cmd->fingerprint && cmd->ca)
        return cfail(err, CLI_EXIT_USAGE, "context add: give --fingerprint or --ca, not both");
    if (cmd->fingerprint && cli_pin_fp_normalize(cmd->fingerprint, fp) < 0)
        return cfail(err, CLI_EXIT_INVALID,
                     "context add: invalid --fingerprint '%.100s': expected 32 hex byte pairs "
                     "(AB:CD:...)",
                     cmd->fingerprint);
    /* Commands run from anywhere: the context keeps the file by its absolute path. */
    if (cmd->ca && (!realpath(cmd->ca, ca) || access(ca, R_OK) != 0))
        return cfail(err, CLI_EXIT_INVALID, "context add: cannot read --ca %s: %s", cmd->ca,
                     strerror(errno));
    rc = cli_ctx_add(s, name, url, cmd->ca ? ca : NULL, cmd->ctx_replace);
    if (rc == -EEXIST)
        return cfail(err, CLI_EXIT_EXISTS,
                     "context add: context %s exists (--replace to change it)", name);
    if (rc < 0)
        return cfail(err, CLI_EXIT_ERROR, "context add: %s", strerror(-rc));
    rc = cli_ctx_dir_path(name, dir, sizeof(dir));
    if (rc < 0)
        return cfail(err, CLI_EXIT_ERROR, "context add: %s", strerror(-rc));
    (void)snprintf(kh, sizeof(kh), "%s/known_hosts", dir);
    if (tls && cli_pin_target(url, &t) == 0) {
        if (fp[0]) {
            pinned_from = "--fingerprint";
        } else {
            /* A pin made before contexts existed was checked by someone: keep it. */
            char base[PATH_MAX], bkh[PATH_MAX + 16];

            if (cli_pin_base_dir(base, sizeof(base)) == 0) {
                (void)snprintf(bkh, sizeof(bkh), "%s/known_hosts", base);
                if (cli_pin_lookup(bkh, t.hostport, fp, &line) == 0)
                    pinned_from = "~/.config/fgex/known_hosts";
            }
        }
        if (fp[0]) {
            rc = cli_pin_store(kh, t.hostport, fp);
            if (rc < 0)
                return cfail(err, CLI_EXIT_ERROR, "context add: cannot write %s: %s", kh,
                             strerror(-rc));
        }
    }
    rc = cli_ctx_save(s, why, sizeof(why));
    if (rc < 0)
        return cfail(err, CLI_EXIT_ERROR, "context add: %s", why);
    c = cli_ctx_find(s, name);
    if (cmd->json)
        return print_doc(out, err, ctx_json(s, c, true));
    (void)fprintf(out, "context %s: %s\n", name, url);
    if (pinned_from)
        (void)fprintf(out, "  pinned SHA-256 %s (from %s)\n", fp, pinned_from);
    return fflush(out) == EOF ? CLI_EXIT_ERROR : CLI_EXIT_OK;
}

int cli_cmd_context_run(struct cli_cmd *cmd, FILE *out, FILE *err)
{
    struct cli_ctx_store s;
    const struct cli_ctx *c = NULL;
    const char *what = cmd->def->name, *env = getenv("FGEX_URL");
    char why[1024], path[PATH_MAX];
    int rc, status = CLI_EXIT_OK;

    if (cmd->context || cmd->url_given)
        return cfail(err, CLI_EXIT_USAGE, "context %s: -c and -C do not apply to it", what);
    if ((cmd->fingerprint || cmd->ca) && strcmp(what, "add") != 0)
        return cfail(err, CLI_EXIT_USAGE,
                     "context %s: --fingerprint and --ca belong to "
                     "`context add`",
                     what);
    rc = cli_ctx_load(&s, why, sizeof(why));
    if (rc < 0)
        return cfail(err, CLI_EXIT_ERROR, "%s", why);
    if (strcmp(what, "add") == 0) {
        status = run_add(cmd, &s, out, err);
        goto out;
    }
    if (strcmp(what, "list") == 0) {
        json_t *arr = cmd->json ? json_array() : NULL;
        size_t w = strlen(CLI_CTX_LOCAL);

        for (size_t i = 0; i < s.n; i++)
            if (strlen(s.v[i].name) > w)
                w = strlen(s.v[i].name);
        /* The stored ones, then the built-in local one ("local" is reserved). */
        for (size_t i = 0; i <= s.n; i++) {
            const struct cli_ctx *e = i < s.n ? &s.v[i] : cli_ctx_find(&s, CLI_CTX_LOCAL);

            if (arr) {
                json_array_append_new(arr, ctx_json(&s, e, false));
                continue;
            }
            (void)fprintf(out, "%s %-*s  %s%s\n",
                          strcmp(current_name(&s), e->name) == 0 ? "*" : " ", (int)w, e->name,
                          e->url, e->builtin ? "  (built in)" : "");
        }
        if (arr)
            status = print_doc(out, err, arr);
        if (env && *env)
            (void)fprintf(err,
                          CLI_PROG ": note: $FGEX_URL is set (%s): commands without -c or "
                                   "-C go there, not to the current context\n",
                          env);
        goto out;
    }
    if (cmd->pos[0]) {
        c = cli_ctx_find(&s, cmd->pos[0]);
        if (!c) {
            status = cfail(err, CLI_EXIT_NOT_FOUND,
                           "context %s: no such context '%.80s' (see `fgexctl context list`)", what,
                           cmd->pos[0]);
            goto out;
        }
    } else {
        c = cli_ctx_find(&s, current_name(&s));
    }
    if (strcmp(what, "show") == 0) {
        char fp[CLI_FP_SIZE];
        bool sess = ctx_session(c, path, sizeof(path));

        if (cmd->json) {
            status = print_doc(out, err, ctx_json(&s, c, true));
            goto out;
        }
        ctx_pin(c, fp);
        (void)fprintf(out, "name:        %s%s%s\n", c->name, c->builtin ? " (built in)" : "",
                      strcmp(current_name(&s), c->name) == 0 ? " (current)" : "");
        (void)fprintf(out, "url:         %s\n", c->url);
        if (c->ca)
            (void)fprintf(out, "ca:          %s\n", c->ca);
        if (cli_pin_is_tls(c->url))
            (void)fprintf(out, "fingerprint: %s\n",
                          fp[0] ? fp : "(none pinned yet: the first connection pins it)");
        (void)fprintf(out, "session:     %s%s\n", sess ? path : "none",
                      sess ? "" : (cli_pin_is_tls(c->url) ? " (`fgexctl login` stores one)" : ""));
        goto out;
    }
    if (strcmp(what, "use") == 0) {
        char *cur = NULL;

        if (!c->builtin && !(cur = strdup(c->name))) {
            status = cfail(err, CLI_EXIT_ERROR, "out of memory");
            goto out;
        }
        free(s.current);
        s.current = cur; /* NULL for "local": the default */
        rc = cli_ctx_save(&s, why, sizeof(why));
        if (rc < 0) {
            status = cfail(err, CLI_EXIT_ERROR, "context use: %s", why);
            goto out;
        }
        if (cmd->json)
            status = print_doc(out, err, ctx_json(&s, c, false));
        else
            (void)fprintf(out, "switched to context %s (%s)\n", c->name, c->url);
        if (env && *env)
            (void)fprintf(err,
                          CLI_PROG ": note: $FGEX_URL is set (%s) and comes before the "
                                   "current context; unset it to use %s\n",
                          env, c->name);
        goto out;
    }
    /* rm */
    if (c->builtin) {
        status = cfail(err, CLI_EXIT_INVALID, "context rm: '%s' is built in", c->name);
        goto out;
    }
    {
        bool was_current = s.current && strcmp(s.current, c->name) == 0;
        char name[CLI_CTX_NAME_MAX + 1];

        (void)snprintf(name, sizeof(name), "%s", c->name);
        rc = cli_ctx_dir_path(name, path, sizeof(path));
        if (rc == 0 && access(path, F_OK) == 0 &&
            nftw(path, rm_entry, 8, FTW_DEPTH | FTW_PHYS) != 0) {
            status = cfail(err, CLI_EXIT_ERROR, "context rm: cannot remove %s: %s", path,
                           strerror(errno));
            goto out;
        }
        (void)cli_ctx_remove(&s, name);
        rc = cli_ctx_save(&s, why, sizeof(why));
        if (rc < 0) {
            status = cfail(err, CLI_EXIT_ERROR, "context rm: %s", why);
            goto out;
        }
        if (cmd->json)
            status = print_doc(
                out, err, json_pack("{s:s, s:b}", "removed", name, "was_current", was_current));
        else
            (void)fprintf(out, "removed context %s%s\n", name,
                          was_current ? "; the current context is local again" : "");
    }
out:
    cli_ctx_store_release(&s);
    if (fflush(out) == EOF && status == CLI_EXIT_OK)
        status = CLI_EXIT_ERROR;
    return status;
}

/* ---- the commands ---- */

#define CONTEXT_CMD .group = "context", .build = build_context, .flags = CLI_CMD_LOCAL

static const struct cli_cmd_def context_cmds[] = {
    {CONTEXT_CMD, .name = "add", .npos = 2, .pos_names = {"NAME", "URL"}, .opts = CLI_OPT_REPLACE,
     .usage = usage_context_add},
    {CONTEXT_CMD, .name = "use", .npos = 1, .pos_names = {"NAME"}, .usage = usage_context_use},
    {CONTEXT_CMD, .name = "list", .usage = usage_context_list},
    {CONTEXT_CMD, .name = "show", .npos = 1, .pos_names = {"NAME"}, .pos_optional = true,
     .usage = usage_context_show},
    {CONTEXT_CMD, .name = "rm", .npos = 1, .pos_names = {"NAME"}, .usage = usage_context_rm},
    {.name = NULL},
};

const struct cli_cmd_family cli_cmd_context = {
    .group = "context", .usage = usage_context, .cmds = context_cmds};
