/* fgexctl: parse the command line (cli_args.c, with the command families listed in cmd.c),
 * read what the command needs locally (cli_local.c), send it to controld (cli_rpc.c; over
 * tls+tcp after the certificate check of cli_tls.c), print the reply (the command's renderers
 * through cli_fmt.c, or cli_local.c for the commands that write files) and exit with a status a
 * script can act on (enum cli_exit). `stats --watch` and `events --follow` poll until
 * interrupted instead (cli_loop.c). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli_args.h"
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

/* A URL fgexctl can dial: ipc://PATH or tls+tcp[46]://HOST:PORT. Checked before anything is
 * sent, so that a typo is an invalid argument (exit 4) rather than controld out of reach. */
static bool url_valid(const char *url)
{
    struct cli_pin_target t;
    unsigned long port;
    char *end;

    if (strncmp(url, "ipc://", 6) == 0)
        return url[6] != '\0';
    if (cli_pin_target(url, &t) < 0)
        return false;
    port = strtoul(t.port, &end, 10);
    return *end == '\0' && port >= 1 && port <= 65535;
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

int main(int argc, char **argv)
{
    struct cli_cmd cmd;
    struct cli_local local;
    struct cli_rpc rpc;
    Fgx__Ctl__Reply *rep = NULL;
    bool local_ready = false;
    int status = CLI_EXIT_ERROR, rc;

    /* libcommon logs only what it cannot hand back; fgexctl speaks in its own one-liners. */
    fgx_log_init(CLI_PROG, FGX_LOG_ERROR);
    cli_rpc_init(&rpc, NULL);
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
    if ((cmd.fingerprint || cmd.ca) && !cli_pin_is_tls(cmd.url)) {
        print_err("--fingerprint and --ca apply to tls+tcp://HOST:PORT URLs only");
        status = CLI_EXIT_USAGE;
        goto out;
    }
    if (cmd.fingerprint && cmd.ca) {
        print_err("give --fingerprint or --ca, not both");
        status = CLI_EXIT_USAGE;
        goto out;
    }
    if (!url_valid(cmd.url)) {
        char msg[512];

        (void)snprintf(msg, sizeof(msg),
                       "invalid URL '%.200s': expected ipc://PATH or tls+tcp://HOST:PORT", cmd.url);
        print_err(msg);
        status = CLI_EXIT_INVALID;
        goto out;
    }
    if (cmd.fingerprint) {
        char fp[CLI_FP_SIZE], msg[512];

        if (cli_pin_fp_normalize(cmd.fingerprint, fp) < 0) {
            (void)snprintf(msg, sizeof(msg),
                           "invalid --fingerprint '%.100s': expected 32 hex byte pairs (AB:CD:...)",
                           cmd.fingerprint);
            print_err(msg);
            status = CLI_EXIT_INVALID;
            goto out;
        }
    }
    if (cmd.run_local) {
        status = cmd.run_local(&cmd);
        goto out;
    }
    if (cmd.watch || cmd.follow) {
        status = cli_loop_run(&cmd, stdout);
        goto out;
    }
    rc = cli_local_prepare(&cmd, &local);
    local_ready = true;
    if (rc < 0) {
        print_err(local.err);
        status = local.exit_code;
        goto out;
    }
    if (cmd.version && !cmd.json)
        (void)printf(CLI_PROG " %s\n", FGX_VERSION);
    cli_rpc_init(&rpc, cmd.url);
    cli_rpc_set_trust(&rpc, cmd.fingerprint, cmd.ca);
    rc = cli_rpc_request(&rpc, &cmd.req, request_timeout_ms(&cmd.req), &rep);
    if (rc < 0) {
        print_err(rpc.err);
        status = rc == -EKEYREJECTED ? CLI_EXIT_CERT : CLI_EXIT_ERROR;
        goto out;
    }

    status = cli_fmt_exit_code(rep->code);
    /* UNAVAILABLE: the change is stored, so what it stored is still worth printing. */
    if (rep->code == FGX__CTL__CODE__CODE_OK || rep->code == FGX__CTL__CODE__CODE_UNAVAILABLE) {
        cli_fmt_warnings(stderr, rep);
        if (cmd.version) {
            if (print_versions(stdout, rep, cmd.json) < 0) {
                print_err("cannot write the output");
                status = CLI_EXIT_ERROR;
            }
        } else if (cli_local_prints(&cmd)) {
            if (cli_local_finish(&cmd, &local, rep, stdout) < 0) {
                print_err(local.err[0] ? local.err : "cannot write the output");
                status = local.exit_code ? local.exit_code : CLI_EXIT_ERROR;
            }
        } else if (cli_fmt_reply(stdout, &cmd.req, rep, cmd.json) < 0) {
            print_err("cannot write the output");
            status = CLI_EXIT_ERROR;
        }
    }
    if (rep->code == FGX__CTL__CODE__CODE_AUTH && rpc.token &&
        cmd.req.req_case != FGX__CTL__REQUEST__REQ_LOGIN)
        cli_local_auth_failed(&cmd);
    if (rep->code != FGX__CTL__CODE__CODE_OK)
        cli_fmt_error_at(stderr, rep,
                         cmd.req.req_case == FGX__CTL__REQUEST__REQ_LOGIN ? NULL : cmd.url);
out:
    if (rep)
        fgx__ctl__reply__free_unpacked(rep, NULL);
    if (local_ready)
        cli_local_release(&cmd, &local);
    cli_rpc_release(&rpc);
    return status;
}
