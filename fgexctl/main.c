/* fgexctl: parse the command line (cli_args.c, with the command families listed in cmd.c),
 * read what the command needs locally (cli_local.c), send it to controld (cli_rpc.c; over
 * tls+tcp after the certificate check of cli_tls.c), print the reply (the command's renderers
 * through cli_fmt.c, or cli_local.c for the commands that write files) and exit with a status a
 * script can act on (enum cli_exit). `stats --watch` and `events --follow` poll until
 * interrupted instead (cli_loop.c). The controld is the -c URL, else a named context (-C NAME,
 * or the current one: cli_ctx.c); with several (-C a,b, -C all) the same run happens once per
 * context in a process of its own (cli_fanout.c). `context ...` commands send nothing. A command
 * that removes asks first on a terminal (cli_confirm.c). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli_args.h"
#include "cli_confirm.h"
#include "cli_ctx.h"
#include "cli_fanout.h"
#include "cli_fmt.h"
#include "cli_json.h"
#include "cli_local.h"
#include "cli_loop.h"
#include "cli_pin.h"
#include "cli_rpc.h"
#include "cmd.h"
#include "fgx/log.h"
#include "fgx/version.h"

/* How long to wait for the reply: an import of thousands of filters takes controld longer
 * than one change (each regex is compiled on its own to name a bad one), and any change may
 * compile for as long as controld's --compile-timeout allows. */
static int request_timeout_ms(const Fgx__Ctl__Request *req)
{
    const struct cli_cmd_def *def = cli_cmd_of_req(req->req_case);
    bool change = def && (def->flags & CLI_CMD_CHANGE);
    size_t n = 0;

    if (req->req_case == FGX__CTL__REQUEST__REQ_FILTER_IMPORT)
        n = req->filter_import ? req->filter_import->n_filters : 0;
    else if (req->req_case == FGX__CTL__REQUEST__REQ_CONFIG_IMPORT)
        n = req->config_import ? req->config_import->n_filters : 0;
    if (n > 1000000)
        n = 1000000;
    /* A change may compile for up to controld's --compile-timeout before it is refused. */
    return CLI_RPC_TIMEOUT_MS + (int)n * CLI_RPC_MS_PER_FILTER +
           (change ? CLI_RPC_COMPILE_WAIT_MS : 0);
}

static void print_err(const char *msg)
{
    (void)fprintf(stderr, "%s" CLI_PROG ":%s %s\n", cli_fmt_paint(CLI_COLOR_ERR),
                  cli_fmt_paint(CLI_COLOR_OFF), msg);
}

/* `fgexctl version`: the server's version from its status reply, after this client's (printed
 * before the request in text, so that it shows even when controld is out of reach). */
static int print_versions(FILE *f, const Fgx__Ctl__Reply *rep, bool json)
{
    const char *server = rep->status && rep->status->version ? rep->status->version : "?";
    if (!json)
        (void)fprintf(f, "controld %s\n", server);
    else if (cli_json_print(
                 f, json_pack("{s:s, s:o}", "client", FGX_VERSION, "server", cli_json_str(server)),
                 false) < 0)
        return -EIO;
    return fflush(f) == EOF || ferror(f) ? -EIO : 0;
}

/* One command on one controld (cmd->url): the checks that need the URL, the request, and its
 * output. Returns fgexctl's exit status. Also what each process of a fan-out runs. */
static int run_one(struct cli_cmd *cmd)
{
    struct cli_local local;
    struct cli_rpc rpc;
    Fgx__Ctl__Reply *rep = NULL;
    bool local_ready = false;
    int status = CLI_EXIT_ERROR, rc;

    cli_rpc_init(&rpc, NULL);
    if ((cmd->fingerprint || cmd->ca) && !cli_pin_is_tls(cmd->url)) {
        print_err("--fingerprint and --ca apply to tls+tcp://HOST:PORT URLs only");
        status = CLI_EXIT_USAGE;
        goto out;
    }
    if (cmd->fingerprint && cmd->ca) {
        print_err("give --fingerprint or --ca, not both");
        status = CLI_EXIT_USAGE;
        goto out;
    }
    if (!cli_ctx_url_valid(cmd->url)) {
        char msg[512];

        (void)snprintf(msg, sizeof(msg),
                       "invalid URL '%.200s': expected ipc://PATH or tls+tcp://HOST:PORT",
                       cmd->url);
        print_err(msg);
        status = CLI_EXIT_INVALID;
        goto out;
    }
    if (cmd->fingerprint) {
        char fp[CLI_FP_SIZE], msg[512];

        if (cli_pin_fp_normalize(cmd->fingerprint, fp) < 0) {
            (void)snprintf(msg, sizeof(msg),
                           "invalid --fingerprint '%.100s': expected 32 hex byte pairs (AB:CD:...)",
                           cmd->fingerprint);
            print_err(msg);
            status = CLI_EXIT_INVALID;
            goto out;
        }
    }
    if (cmd->run_local) {
        /* script test, script log --follow: the command runs here, not as one request */
        status = cmd->run_local(cmd);
        goto out;
    }
    if (cmd->watch || cmd->follow) {
        status = cli_loop_run(cmd, stdout);
        goto out;
    }
    rc = cli_local_prepare(cmd, &local);
    local_ready = true;
    if (rc < 0) {
        print_err(local.err);
        status = local.exit_code;
        goto out;
    }
    if (cmd->version && !cmd->json)
        (void)printf(CLI_PROG " %s\n", FGX_VERSION);
    cli_rpc_init(&rpc, cmd->url);
    cli_rpc_set_trust(&rpc, cmd->fingerprint, cmd->ca);
    cli_rpc_set_wait(&rpc, cmd->wait_s);
    rc = cli_rpc_request(&rpc, &cmd->req, request_timeout_ms(&cmd->req), &rep);
    if (rc < 0) {
        print_err(rpc.err);
        status = rc == -EKEYREJECTED ? CLI_EXIT_CERT : CLI_EXIT_ERROR;
        goto out;
    }

    status = cli_fmt_exit_code(rep->code);
    /* UNAVAILABLE: the change is stored, so what it stored is still worth printing. */
    if (rep->code == FGX__CTL__CODE__CODE_OK || rep->code == FGX__CTL__CODE__CODE_UNAVAILABLE) {
        cli_fmt_warnings(stderr, rep);
        if (cmd->version) {
            if (print_versions(stdout, rep, cmd->json) < 0) {
                print_err("cannot write the output");
                status = CLI_EXIT_ERROR;
            }
        } else if (cli_local_prints(cmd)) {
            if (cli_local_finish(cmd, &local, rep, stdout) < 0) {
                print_err(local.err[0] ? local.err : "cannot write the output");
                status = local.exit_code ? local.exit_code : CLI_EXIT_ERROR;
            }
        } else if (cli_fmt_reply(stdout, &cmd->req, rep, cmd->json) < 0) {
            print_err("cannot write the output");
            status = CLI_EXIT_ERROR;
        }
    }
    if (rep->code == FGX__CTL__CODE__CODE_AUTH && rpc.token &&
        cmd->req.req_case != FGX__CTL__REQUEST__REQ_LOGIN)
        cli_local_auth_failed(cmd);
    if (rep->code != FGX__CTL__CODE__CODE_OK && cmd->ctx_name &&
        cmd->req.req_case != FGX__CTL__REQUEST__REQ_LOGIN) {
        char via[CLI_CTX_NAME_MAX + 8];

        (void)snprintf(via, sizeof(via), "-C %s", cmd->ctx_name);
        cli_fmt_error_via(stderr, rep, via);
    } else if (rep->code != FGX__CTL__CODE__CODE_OK) {
        cli_fmt_error_at(stderr, rep,
                         cmd->req.req_case == FGX__CTL__REQUEST__REQ_LOGIN ? NULL : cmd->url);
    }
out:
    if (rep)
        fgx__ctl__reply__free_unpacked(rep, NULL);
    if (local_ready)
        cli_local_release(cmd, &local);
    cli_rpc_release(&rpc);
    return status;
}

/* The contexts the command goes to: those of -C, else the current one unless -c URL or
 * $FGEX_URL says where (docker's order: the environment before the stored choice). *n is 0
 * when no context applies (cmd->url as parsed). Returns 0, or an exit status with the reason
 * printed. */
static int pick_contexts(struct cli_cmd *cmd, struct cli_ctx_store *store,
                         const struct cli_ctx ***ctxs, size_t *n)
{
    const char *env = getenv("FGEX_URL");
    char why[1024];
    int rc;

    *ctxs = NULL;
    *n = 0;
    if (cmd->context && cmd->url_given) {
        print_err("give -c URL or -C CONTEXT, not both");
        return CLI_EXIT_USAGE;
    }
    if (!cmd->context && (cmd->url_given || (env && *env)))
        return 0;
    rc = cli_ctx_load(store, why, sizeof(why));
    if (rc == -ENOENT && !cmd->context)
        return 0; /* no home and no $FGEX_CONFIG_DIR: no contexts, the default socket */
    if (rc < 0) {
        print_err(why);
        return CLI_EXIT_ERROR;
    }
    if (!cmd->context && !store->current)
        return 0;
    rc = cli_ctx_select(store, cmd->context ? cmd->context : store->current, ctxs, n, why,
                        sizeof(why));
    if (rc == -ENOMEM) {
        print_err("out of memory");
        return CLI_EXIT_ERROR;
    }
    if (rc < 0) {
        print_err(why);
        return rc == -ENOENT ? CLI_EXIT_NOT_FOUND : CLI_EXIT_USAGE;
    }
    return 0;
}

/* A removal asked for on the terminal: 0 to go on, else the exit status (reason printed). */
static int confirm(struct cli_cmd *cmd, const struct cli_ctx *const *ctxs, size_t n)
{
    char what[400], where[600], msg[800];
    size_t used;
    int rc;

    if (!cli_confirm_needed(cmd, what, sizeof(what)))
        return 0;
    if (n == 0) {
        (void)snprintf(where, sizeof(where), "%.500s", cmd->url);
    } else if (n == 1) {
        (void)snprintf(where, sizeof(where), "%s (%.400s)", ctxs[0]->name, ctxs[0]->url);
    } else {
        used = (size_t)snprintf(where, sizeof(where), "%zu contexts (", n);
        for (size_t i = 0; i < n && used < sizeof(where); i++)
            used += (size_t)snprintf(where + used, sizeof(where) - used, "%s%s", i ? ", " : "",
                                     ctxs[i]->name);
        if (used < sizeof(where))
            (void)snprintf(where + used, sizeof(where) - used, ")");
    }
    rc = cli_confirm_ask(what, where, STDIN_FILENO, stderr);
    if (rc == 1) {
        cmd->yes = true;
        return 0;
    }
    if (rc == -ENOTTY) {
        (void)snprintf(msg, sizeof(msg),
                       "%s %s asks before it removes, and stdin is not a terminal: pass --yes "
                       "to %.400s; nothing was removed",
                       cmd->def->group ? cmd->def->group : "", cmd->def->name, what);
        print_err(msg);
        return CLI_EXIT_USAGE;
    }
    print_err("not confirmed: nothing was removed");
    return CLI_EXIT_ERROR;
}

int main(int argc, char **argv)
{
    struct cli_cmd cmd;
    struct cli_ctx_store store = {0};
    const struct cli_ctx **ctxs = NULL;
    struct cli_fanout_result *res = NULL;
    size_t n = 0;
    char why[512];
    bool many;
    int status = CLI_EXIT_ERROR;

    /* libcommon logs only what it cannot hand back; fgexctl speaks in its own one-liners. */
    fgx_log_init(CLI_PROG, FGX_LOG_ERROR);
    if (cli_args_parse(argc, argv, getenv("FGEX_URL"), &cmd) < 0) {
        cli_fmt_set_color(cli_fmt_color_wanted(STDERR_FILENO, false));
        print_err(cmd.err);
        status = cmd.exit_code;
        goto out;
    }
    cli_fmt_set_color(cli_fmt_color_wanted(STDERR_FILENO, cmd.json) && isatty(STDOUT_FILENO));
    if (cmd.help) {
        (void)fputs(cmd.help, stdout);
        status = fflush(stdout) == EOF ? CLI_EXIT_ERROR : CLI_EXIT_OK;
        goto out;
    }
    if (cmd.offline) {
        /* `regex test`: nothing to ask controld, so no URL is looked at either. */
        status = cli_cmd_offline_run(&cmd, stdout, stderr);
        goto out;
    }
    if (cmd.def && (cmd.def->flags & CLI_CMD_LOCAL)) {
        status = cli_cmd_context_run(&cmd, stdout, stderr);
        goto out;
    }
    status = pick_contexts(&cmd, &store, &ctxs, &n);
    if (status != 0)
        goto out;
    /* `-C a,b` and `-C all` print per context even when they come to one, so that a script
     * gets the same shape whatever the number of boxes. */
    many = n > 1 || (cmd.context && (strchr(cmd.context, ',') || strcmp(cmd.context, CLI_CTX_ALL) == 0));
    if (many && cli_fanout_check(&cmd, why, sizeof(why)) < 0) {
        print_err(why);
        status = CLI_EXIT_USAGE;
        goto out;
    }
    status = confirm(&cmd, ctxs, n);
    if (status != 0)
        goto out;
    if (!many) {
        if (n == 1 && cli_ctx_apply(&cmd, ctxs[0]) < 0) {
            print_err("the directory of the context is too long a path");
            status = CLI_EXIT_ERROR;
            goto out;
        }
        status = run_one(&cmd);
        goto out;
    }
    res = calloc(n, sizeof(*res));
    if (!res || cli_fanout_run(&cmd, ctxs, n, run_one, res) < 0) {
        print_err("cannot start the processes for the contexts");
        status = CLI_EXIT_ERROR;
        goto out;
    }
    status = cli_fanout_print(res, n, cmd.json, stdout, stderr);
out:
    if (res)
        cli_fanout_release(res, n);
    free(res);
    free(ctxs);
    cli_ctx_store_release(&store);
    return status;
}
