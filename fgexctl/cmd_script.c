/* fgexctl, the script commands (issue 16): a service's Python filter file (set, get, rm),
 * its functions (list, enable, disable), its log (tracebacks, timeouts, prints; --follow), and
 * `script test`, which runs a file offline over a pcap (without controld) or over a service's
 * capture (fetched as `capture --pcap` fetches it). */
#include "cmd.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli_fmt.h"
#include "cli_json.h"
#include "cli_loop.h"
#include "cli_rpc.h"
#include "cli_sproxy.h"
#include "fgx/python.h"

#define CLI_SCRIPT_FOLLOW_MS 500

/* clang-format off */
static const char usage_script[] =
    "usage: fgexctl script COMMAND ...\n"
    "\n"
    "Commands:\n"
    "  set SERVICE FILE.py [--deadline MS] [--dry-run]\n"
    "  get SERVICE\n"
    "  rm SERVICE\n"
    "  list SERVICE\n"
    "  enable SERVICE FUNCTION\n"
    "  disable SERVICE FUNCTION\n"
    "  log SERVICE [--follow]\n"
    "  test FILE.py --pcap FILE [--port PORT]\n"
    "  proxy FILE.py --listen ADDR:PORT --to ADDR:PORT [--deadline MS] [--fail-open]\n"
    "\n"
    "A script is a Python filter file written for Firegex's Python filters (nfproxy,\n"
    "pyfilters) or for fgex: @pyfilter functions whose parameters' annotations\n"
    "(RawPacket, TCPInputStream, HttpRequest, ...) choose what they receive and\n"
    "which return ACCEPT, REJECT or DROP. See docs/scripts.md.\n"
    CLI_SERVICE_HELP_NOTE "`fgexctl script COMMAND --help` for one command.\n";

static const char usage_script_set[] =
    "usage: fgexctl script set SERVICE FILE.py [--deadline MS] [--dry-run]\n"
    "\n"
    "Set (or replace) a TCP service's Python filter file. The file is checked first,\n"
    "in a Python process of its own: a syntax error, a parameter without a known\n"
    "annotation, two functions of one name, a bad setting value or a feature fgex\n"
    "leaves out (packet mangling) is refused with FILE:LINE and the reason, and\n"
    "nothing is stored. Functions disabled in the previous file stay disabled.\n"
    "\n"
    "  --deadline MS   how long one call may take before its verdict is the\n"
    "                  service's fail-open choice (default 100, or the previous file's)\n"
    "  --dry-run       check the file only (the page's Check): its functions are\n"
    "                  listed as set would list them, nothing is stored\n"
    "\n" CLI_SERVICE_HELP_NOTE;

static const char usage_script_get[] =
    "usage: fgexctl script get SERVICE\n"
    "\n"
    "Print a service's filter file on stdout, byte for byte as it was set (with\n"
    "--json: an object with its functions and the file as source or source_b64).\n"
    CLI_SERVICE_HELP_NOTE;

static const char usage_script_rm[] =
    "usage: fgexctl script rm SERVICE\n"
    "\n"
    "Remove a service's filter file: its connections are no longer given to scripts.\n"
    CLI_SERVICE_HELP_NOTE;

static const char usage_script_list[] =
    "usage: fgexctl script list SERVICE\n"
    "\n"
    "List the filter functions of a service's file: where each is defined, whether it\n"
    "runs, and its counters: connections it blocked, calls that raised an exception,\n"
    "calls past the deadline. A call that failed for every connection of the\n"
    "service (its file not loaded where the call went) is shown above the table as\n"
    "ERROR, with how often and when last (--json: error {text, time_ns, count}).\n"
    CLI_SERVICE_HELP_NOTE;

static const char usage_script_enable[] =
    "usage: fgexctl script enable SERVICE FUNCTION\n"
    "\n"
    "Run a disabled filter function again.\n" CLI_SERVICE_HELP_NOTE;

static const char usage_script_disable[] =
    "usage: fgexctl script disable SERVICE FUNCTION\n"
    "\n"
    "Stop calling one filter function of the file, without changing the file.\n"
    CLI_SERVICE_HELP_NOTE;

static const char usage_script_log[] =
    "usage: fgexctl script log SERVICE [--follow]\n"
    "\n"
    "Print a service's script log: the tracebacks of exceptions, the calls past the\n"
    "deadline, interpreters replaced, and what the scripts print.\n"
    "\n"
    "  --follow   then keep printing new entries as they arrive, until interrupted\n"
    "\n" CLI_SERVICE_HELP_NOTE;

static const char usage_script_test[] =
    "usage: fgexctl script test FILE.py (--pcap FILE | --service SERVICE) [--port PORT]\n"
    "                           [--json]\n"
    "\n"
    "Run a filter file offline over the TCP connections of a capture (pcap or\n"
    "pcapng) and print each connection's verdict and the function that gave it:\n"
    "would this file drop the checker? The file is checked as `script set` checks\n"
    "it. Each direction is put in stream order and given to the file segment by\n"
    "segment, as on the NFQUEUE layer. With --pcap nothing is sent to controld;\n"
    "with --service the file runs here over the service's capture (what `capture\n"
    "--pcap` writes: the workers' recent connections and the blocked ones kept).\n"
    "\n"
    "  --pcap FILE        the capture\n"
    "  --service SERVICE  the service's capture, fetched from controld\n"
    "  --port PORT        only connections to this server port\n"
    "  --json             an array of {client, sport, server, dport, verdict,\n"
    "                     function, detail, c2s_bytes, s2c_bytes}\n";
static const char usage_script_proxy[] =
    "usage: fgexctl script proxy FILE.py --listen ADDR:PORT --to ADDR:PORT\n"
    "                            [--deadline MS] [--fail-open]\n"
    "\n"
    "Run a filter file as a local TCP proxy in front of a service, to try it on real\n"
    "traffic before `script set`: clients connect to --listen, each connection goes\n"
    "on to --to, and every chunk of both directions is given to the file first, as\n"
    "on the proxy layer. Each verdict is printed (accepted, edited, or REJECT/DROP:\n"
    "the connection is cut), with what the file prints and its exceptions. When the\n"
    "file changes it is loaded again: new connections use the new version once it\n"
    "loaded, open ones finish under the one they began with, and a version that does\n"
    "not load is said with its line and reason (the previous one stays).\n"
    "\n"
    "Nothing is sent to controld. The file runs where scripts run for a service: in\n"
    "fgex's scriptworker, sandboxed (its own namespaces, no network, a script uid),\n"
    "which needs root to set up. ^C stops.\n"
    "\n"
    "  --listen ADDR:PORT  where clients connect ([V6]:PORT for IPv6)\n"
    "  --to ADDR:PORT      the service\n"
    "  --deadline MS       how long one call may take (default 100)\n"
    "  --fail-open         an exception or a call past the deadline lets the chunk\n"
    "                      through (default: the connection is cut)\n";
/* clang-format on */

/* ---- building the requests ---- */

static int build_set(struct cli_cmd *cmd, const struct cli_cmd_def *spec,
                     const struct cli_args_raw *raw)
{
    Fgx__Ctl__ScriptSet *m = &cmd->m.script_set;
    const char *v;
    int rc;

    fgx__ctl__script_set__init(m);
    rc = cli_args_check_ref(cmd, spec, raw->pos[0]);
    if (rc < 0)
        return rc;
    if (!raw->pos[1] || !*raw->pos[1])
        return cli_args_fail(cmd, CLI_EXIT_INVALID, "script set: the file name is empty");
    m->service = (char *)raw->pos[0];
    cmd->file = raw->pos[1];
    /* the name controld puts in its messages: the file's own, without the directories */
    m->filename = strrchr(raw->pos[1], '/') ? strrchr(raw->pos[1], '/') + 1 : (char *)raw->pos[1];
    if ((v = cli_args_opt(raw, CLI_OPT_DEADLINE))) {
        char *end;
        unsigned long ms = strtoul(v, &end, 10);

        if (!cli_args_all_digits(v) || *end || ms == 0 || ms > 10000)
            return cli_args_fail(cmd, CLI_EXIT_INVALID,
                                 "script set: --deadline takes 1 to 10000 (ms), not '%s'", v);
        m->has_deadline_ms = 1;
        m->deadline_ms = (uint32_t)ms;
    }
    if (cli_args_opt(raw, CLI_OPT_DRY_RUN))
        cmd->req.has_dry_run = cmd->req.dry_run = 1;
    cmd->req.script_set = m;
    return 0;
}

static int build_fn(struct cli_cmd *cmd, const struct cli_cmd_def *spec,
                    const struct cli_args_raw *raw)
{
    Fgx__Ctl__ScriptFunctionRef *m = &cmd->m.script_fn;
    int rc;

    fgx__ctl__script_function_ref__init(m);
    rc = cli_args_check_ref(cmd, spec, raw->pos[0]);
    if (rc < 0)
        return rc;
    if (!raw->pos[1] || !*raw->pos[1])
        return cli_args_fail(cmd, CLI_EXIT_INVALID, "script %s: the function name is empty",
                             spec->name);
    m->service = (char *)raw->pos[0];
    m->function = (char *)raw->pos[1];
    cmd->req.script_enable = m;
    return 0;
}

static int run_follow(struct cli_cmd *cmd);
static int run_test(struct cli_cmd *cmd);
static int run_proxy(struct cli_cmd *cmd);

static int build_log(struct cli_cmd *cmd, const struct cli_cmd_def *spec,
                     const struct cli_args_raw *raw)
{
    Fgx__Ctl__ScriptLogQuery *m = &cmd->m.script_log;
    int rc;

    fgx__ctl__script_log_query__init(m);
    rc = cli_args_check_ref(cmd, spec, raw->pos[0]);
    if (rc < 0)
        return rc;
    m->service = (char *)raw->pos[0];
    cmd->req.script_log = m;
    if (cli_args_opt(raw, CLI_OPT_FOLLOW))
        cmd->run_local = run_follow;
    return 0;
}

static int build_test(struct cli_cmd *cmd, const struct cli_cmd_def *spec,
                      const struct cli_args_raw *raw)
{
    const char *v;

    if (!raw->pos[0] || !*raw->pos[0])
        return cli_args_fail(cmd, CLI_EXIT_INVALID, "script test: the file name is empty");
    cmd->file = raw->pos[0];
    cmd->pcap = cli_args_opt(raw, CLI_OPT_PCAP);
    v = cli_args_opt(raw, CLI_OPT_SERVICE);
    if (cmd->pcap && v)
        return cli_args_fail(cmd, CLI_EXIT_USAGE,
                             "script test: give --pcap FILE or --service "
                             "SERVICE, not both");
    if ((!cmd->pcap || !*cmd->pcap) && !v)
        return cli_args_fail(cmd, CLI_EXIT_USAGE,
                             "script test: give the capture with --pcap FILE or --service "
                             "SERVICE (see `fgexctl script test --help`)");
    cmd->script_port = NULL;
    if (v) {
        Fgx__Ctl__CaptureQuery *m = &cmd->m.capture;
        int rc = cli_args_check_ref(cmd, spec, v);

        if (rc < 0)
            return rc;
        /* the capture `capture --pcap` reads: everything kept, blocked or not */
        fgx__ctl__capture_query__init(m);
        m->service = (char *)v;
        cmd->req.capture = m;
        cmd->req.req_case = FGX__CTL__REQUEST__REQ_CAPTURE;
    } else {
        /* nothing goes to controld: an Empty keeps the request well-formed */
        fgx__ctl__empty__init(&cmd->m.empty);
        cmd->req.req_case = FGX__CTL__REQUEST__REQ_SCRIPT_LIST;
    }
    if ((v = cli_args_opt(raw, CLI_OPT_PORT))) {
        unsigned port;

        if (cli_args_port(v, &port) < 0)
            return cli_args_fail(cmd, CLI_EXIT_INVALID, "invalid port '%s'", v);
        cmd->script_port = v;
    }
    cmd->run_local = run_test;
    return 0;
}

static int build_proxy(struct cli_cmd *cmd, const struct cli_cmd_def *spec,
                       const struct cli_args_raw *raw)
{
    const char *v;

    if (!raw->pos[0] || !*raw->pos[0])
        return cli_args_fail(cmd, CLI_EXIT_INVALID, "script proxy: the file name is empty");
    cmd->file = raw->pos[0];
    memset(&cmd->sproxy, 0, sizeof(cmd->sproxy));
    cmd->sproxy.file = raw->pos[0];
    cmd->sproxy.listen = cli_args_opt(raw, CLI_OPT_LISTEN);
    cmd->sproxy.to = cli_args_opt(raw, CLI_OPT_TO);
    if (!cmd->sproxy.listen || !cmd->sproxy.to)
        return cli_args_fail_usage(cmd, spec, "give --listen ADDR:PORT and --to ADDR:PORT");
    if (cli_sproxy_addr_check(cmd->sproxy.listen) < 0)
        return cli_args_fail(cmd, CLI_EXIT_INVALID,
                             "script proxy: --listen takes ADDR:PORT or [V6]:PORT, not '%s'",
                             cmd->sproxy.listen);
    if (cli_sproxy_addr_check(cmd->sproxy.to) < 0)
        return cli_args_fail(cmd, CLI_EXIT_INVALID,
                             "script proxy: --to takes ADDR:PORT or [V6]:PORT, not '%s'",
                             cmd->sproxy.to);
    cmd->sproxy.deadline_ms = 100;
    if ((v = cli_args_opt(raw, CLI_OPT_DEADLINE))) {
        char *end;
        unsigned long ms = strtoul(v, &end, 10);

        if (!cli_args_all_digits(v) || *end || ms == 0 || ms > 10000)
            return cli_args_fail(cmd, CLI_EXIT_INVALID,
                                 "script proxy: --deadline takes 1 to 10000 (ms), not '%s'", v);
        cmd->sproxy.deadline_ms = (unsigned)ms;
    }
    if ((v = cli_args_opt(raw, CLI_OPT_FAIL_OPEN_FLAG))) {
        protobuf_c_boolean on = 1;

        if (*v && cli_args_parse_onoff(cmd, v, &on) < 0)
            return -EINVAL;
        cmd->sproxy.fail_open = on;
    }
    /* nothing goes to controld: an Empty keeps the request well-formed */
    fgx__ctl__empty__init(&cmd->m.empty);
    cmd->req.req_case = FGX__CTL__REQUEST__REQ_SCRIPT_LIST;
    cmd->run_local = run_proxy;
    return 0;
}

/* ---- running here ---- */

/* Where the fgex Python package is, as controld finds it (controld/ctl_script.c). */
static void pydir(char *dir, size_t len)
{
    const char *env = getenv("FGEX_PYTHON_DIR");
    char exe[PATH_MAX];
    ssize_t n;
    char *slash;

    if (env && *env) {
        (void)snprintf(dir, len, "%s", env);
        return;
    }
    n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n == -1)
        n = 0;
    exe[n] = '\0';
    slash = strrchr(exe, '/');
    if (slash)
        *slash = '\0';
    (void)snprintf(dir, len, "%.4000s/fgex-python", slash ? exe : ".");
    if (access(dir, R_OK) == -1)
        (void)snprintf(dir, len, "%.4000s/../lib/fgex/python", slash ? exe : ".");
}

/* The engine is Python (scriptworker/python/fgex/offline.py), run over pcap; its output is
 * the command's. With a pcap of the caller's fgexctl becomes it (exec); over a service's
 * capture it runs as a child, and the temporary pcap goes when it is done. */
static int run_engine(struct cli_cmd *cmd, const char *pcap, bool child)
{
    static const char prog[] = "import sys; sys.path.insert(0, sys.argv[1]); "
                               "import fgex.offline as o; sys.exit(o.main(sys.argv[2:]))";
    char dir[PATH_MAX];
    const char *argv[12];
    int n = 0, st;
    pid_t pid = 0;

    pydir(dir, sizeof(dir));
    argv[n++] = "-c";
    argv[n++] = prog;
    argv[n++] = dir;
    argv[n++] = cmd->file;
    argv[n++] = pcap;
    if (cmd->script_port) {
        argv[n++] = "--port";
        argv[n++] = cmd->script_port;
    }
    if (cmd->json)
        argv[n++] = "--json";
    argv[n] = NULL;
    (void)fflush(stdout);
    if (child)
        pid = fork();
    if (pid == -1) {
        (void)fprintf(stderr, CLI_PROG ": script test: fork: %s\n", strerror(errno));
        return CLI_EXIT_ERROR;
    }
    if (pid == 0) {
        int e = fgx_python_exec(argv);

        (void)fprintf(stderr, CLI_PROG ": script test: cannot run %s: %s\n", FGX_PYTHON,
                      strerror(-e));
        if (child)
            _exit(CLI_EXIT_ERROR);
        return CLI_EXIT_ERROR;
    }
    while (waitpid(pid, &st, 0) == -1)
        if (errno != EINTR)
            return CLI_EXIT_ERROR;
    return WIFEXITED(st) ? WEXITSTATUS(st) : CLI_EXIT_ERROR;
}

/* --service: the capture reply, as `capture --pcap` has it, into a private temporary pcap. */
static int run_test_service(struct cli_cmd *cmd)
{
    char path[] = "/tmp/fgexctl-script-test-XXXXXX", err[512];
    Fgx__Ctl__Reply *rep = NULL;
    struct cli_rpc rpc;
    int status, fd;

    cli_rpc_init(&rpc, cmd->url);
    cli_rpc_set_trust(&rpc, cmd->fingerprint, cmd->ca);
    if (cli_rpc_request(&rpc, &cmd->req, CLI_RPC_TIMEOUT_MS, &rep) < 0) {
        (void)fprintf(stderr, CLI_PROG ": %s\n", rpc.err);
        return CLI_EXIT_ERROR;
    }
    if (rep->code != FGX__CTL__CODE__CODE_OK) {
        cli_fmt_error(stderr, rep);
        status = cli_fmt_exit_code(rep->code);
        goto out;
    }
    fd = mkstemp(path);
    if (fd == -1) {
        (void)fprintf(stderr, CLI_PROG ": script test: %s: %s\n", path, strerror(errno));
        status = CLI_EXIT_ERROR;
        goto out;
    }
    (void)close(fd);
    if (cli_cmd_capture_write(rep, path, NULL, err, sizeof(err)) < 0) {
        (void)fprintf(stderr, CLI_PROG ": script test: %s\n", err);
        status = CLI_EXIT_ERROR;
    } else {
        status = run_engine(cmd, path, true);
    }
    (void)unlink(path);
out:
    fgx__ctl__reply__free_unpacked(rep, NULL);
    return status;
}

static int run_proxy(struct cli_cmd *cmd)
{
    char dir[PATH_MAX];

    pydir(dir, sizeof(dir));
    cmd->sproxy.pydir = dir;
    return cli_sproxy_run(&cmd->sproxy, stdout);
}

static int run_test(struct cli_cmd *cmd)
{
    if (cmd->req.req_case == FGX__CTL__REQUEST__REQ_CAPTURE)
        return run_test_service(cmd);
    return run_engine(cmd, cmd->pcap, false);
}

json_t *cli_cmd_script_log_entry_json(const Fgx__Ctl__ScriptLogEntry *e)
{
    json_t *o = json_object();

    if (o) {
        (void)json_object_set_new(o, "seq", json_integer((json_int_t)e->seq));
        (void)json_object_set_new(o, "time_ns", json_integer((json_int_t)e->time_ns));
        (void)json_object_set_new(o, "kind", cli_json_str(e->kind));
        (void)json_object_set_new(o, "function", cli_json_str(e->function));
        (void)json_object_set_new(o, "text", cli_json_str(e->text));
    }
    return o;
}

static void print_entry(FILE *f, const Fgx__Ctl__ScriptLogEntry *e, bool json)
{
    char when[64];

    if (json) {
        (void)cli_json_print(f, cli_cmd_script_log_entry_json(e), false);
        return;
    }
    cli_fmt_time(e->time_ns, false, when, sizeof(when));
    (void)fprintf(f, "%s %s%s%s\n", when, e->kind ? e->kind : "",
                  e->function && *e->function ? " " : "", e->function ? e->function : "");
    if (e->text && *e->text) {
        const char *p = e->text;

        while (*p) {
            const char *nl = strchr(p, '\n');
            int len = nl ? (int)(nl - p) : (int)strlen(p);

            (void)fprintf(f, "    %.*s\n", len, p);
            p += len + (nl ? 1 : 0);
        }
    }
}

static uint64_t follow_print(const struct cli_cmd *cmd, const Fgx__Ctl__Reply *rep, uint64_t last)
{
    if (rep->has_script_log_last && rep->script_log_last < last)
        last = 0; /* controld restarted: its log starts again */
    for (size_t i = 0; i < rep->n_script_log; i++)
        if (rep->script_log[i]->seq > last) {
            print_entry(stdout, rep->script_log[i], cmd->json);
            last = rep->script_log[i]->seq;
        }
    return last;
}

static int run_follow(struct cli_cmd *cmd)
{
    Fgx__Ctl__ScriptLogQuery q = *cmd->req.script_log;
    Fgx__Ctl__Request req = cmd->req;

    req.script_log = &q;
    return cli_loop_follow(cmd, &req, &q.has_after_seq, &q.after_seq, CLI_SCRIPT_FOLLOW_MS,
                           follow_print);
}

/* ---- output ---- */

static json_t *json_script(const Fgx__Ctl__Script *s)
{
    json_t *o = json_object(), *fns = json_array();

    if (!o || !fns) {
        json_decref(o);
        json_decref(fns);
        return NULL;
    }
    (void)json_object_set_new(o, "service_id", json_integer(s->service_id));
    if (s->service)
        (void)json_object_set_new(o, "service", cli_json_str(s->service));
    (void)json_object_set_new(o, "filename", cli_json_str(s->filename));
    if (s->has_updated)
        (void)json_object_set_new(o, "updated", json_integer((json_int_t)s->updated));
    (void)json_object_set_new(o, "deadline_ms",
                              json_integer(s->has_deadline_ms ? s->deadline_ms : 100));
    /* a call that failed for every connection of the service, since the file was set */
    if (s->error && s->error[0]) {
        json_t *e = json_pack("{s:s, s:I, s:I}", "text", s->error, "time_ns",
                              (json_int_t)s->error_time_ns, "count", (json_int_t)s->error_count);

        if (e)
            (void)json_object_set_new(o, "error", e);
    }
    for (size_t i = 0; i < s->n_functions; i++) {
        const Fgx__Ctl__ScriptFunction *f = s->functions[i];
        json_t *fo = json_object(), *ps = json_array();

        if (!fo || !ps) {
            json_decref(fo);
            json_decref(ps);
            continue;
        }
        (void)json_object_set_new(fo, "name", cli_json_str(f->name));
        (void)json_object_set_new(fo, "line", json_integer(f->line));
        (void)json_object_set_new(fo, "active", json_boolean(!f->has_active || f->active));
        for (size_t j = 0; j < f->n_params; j++)
            (void)json_array_append_new(ps, cli_json_str(f->params[j]));
        (void)json_object_set_new(fo, "params", ps);
        (void)json_object_set_new(fo, "blocked", json_integer((json_int_t)f->blocked));
        (void)json_object_set_new(fo, "errors", json_integer((json_int_t)f->errors));
        (void)json_object_set_new(fo, "timeouts", json_integer((json_int_t)f->timeouts));
        (void)json_object_set_new(fo, "edited", json_integer((json_int_t)f->edited));
        (void)json_array_append_new(fns, fo);
    }
    (void)json_object_set_new(o, "functions", fns);
    if (s->has_source && cli_json_set_bytes(o, "source", s->source.data, s->source.len) < 0) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static json_t *json_one(const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep)
{
    (void)req;
    return rep->script ? json_script(rep->script) : json_null();
}

static int human_list(FILE *f, const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep)
{
    static const char *const heads[] = {"FUNCTION", "LINE",     "ACTIVE",  "BLOCKED",
                                        "EDITED",   "ERRORS",   "TIMEOUTS", "RECEIVES"};
    const Fgx__Ctl__Script *s = rep->script;
    struct cli_table t;
    int rc;

    (void)req;
    if (!s)
        return 0;
    (void)fprintf(f, "%s (deadline %" PRIu32 " ms)\n", s->filename ? s->filename : "script",
                  s->has_deadline_ms ? s->deadline_ms : 100);
    if (s->error && s->error[0]) {
        char when[64];
        time_t sec = (time_t)(s->error_time_ns / 1000000000u);
        struct tm tm;

        if (!localtime_r(&sec, &tm) || !strftime(when, sizeof(when), "%H:%M:%S", &tm))
            (void)snprintf(when, sizeof(when), "?");
        (void)fprintf(f, "ERROR: %s (%" PRIu64 " time%s, last at %s)\n", s->error, s->error_count,
                      s->error_count == 1 ? "" : "s", when);
    }
    cli_fmt_table_init(&t, heads, 8, 1u << 1 | 1u << 3 | 1u << 4 | 1u << 5 | 1u << 6);
    for (size_t i = 0; i < s->n_functions; i++) {
        const Fgx__Ctl__ScriptFunction *fn = s->functions[i];
        char params[256] = "";
        size_t used = 0;

        for (size_t j = 0; j < fn->n_params && used < sizeof(params); j++)
            used += (size_t)snprintf(params + used, sizeof(params) - used, "%s%s", j ? "," : "",
                                     fn->params[j]);
        cli_fmt_table_add_str(&t, fn->name);
        cli_fmt_table_addf(&t, "%" PRIu32, fn->line);
        cli_fmt_table_addf(&t, "%s", cli_fmt_yesno(!fn->has_active || fn->active));
        cli_fmt_table_addf(&t, "%" PRIu64, fn->blocked);
        cli_fmt_table_addf(&t, "%" PRIu64, fn->edited);
        cli_fmt_table_addf(&t, "%" PRIu64, fn->errors);
        cli_fmt_table_addf(&t, "%" PRIu64, fn->timeouts);
        cli_fmt_table_add_str(&t, fn->n_params ? params : "-");
    }
    rc = cli_fmt_table_print(f, &t);
    cli_fmt_table_release(&t);
    return rc;
}

static int human_get(FILE *f, const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep)
{
    (void)req;
    if (!rep->script || !rep->script->has_source)
        return 0;
    return fwrite(rep->script->source.data, 1, rep->script->source.len, f) ==
                   rep->script->source.len
               ? 0
               : -EIO;
}

static int human_rm(FILE *f, const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep)
{
    (void)req;
    (void)fprintf(f, "removed the script of service %s\n",
                  rep->script && rep->script->service ? rep->script->service : "");
    return 0;
}

static int human_log(FILE *f, const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep)
{
    (void)req;
    if (rep->n_script_log == 0)
        (void)fputs("the script log is empty\n", f);
    for (size_t i = 0; i < rep->n_script_log; i++)
        print_entry(f, rep->script_log[i], false);
    return 0;
}

static json_t *json_log(const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep)
{
    json_t *a = json_array();

    (void)req;
    for (size_t i = 0; a && i < rep->n_script_log; i++) {
        const Fgx__Ctl__ScriptLogEntry *e = rep->script_log[i];

        (void)json_array_append_new(
            a, json_pack("{s:I,s:I,s:o,s:o,s:o}", "seq", (json_int_t)e->seq, "time_ns",
                         (json_int_t)e->time_ns, "kind", cli_json_str(e->kind), "function",
                         cli_json_str(e->function), "text", cli_json_str(e->text)));
    }
    return a;
}

/* ---- the commands ---- */

static const struct cli_cmd_def script_cmds[] = {
    {.group = "script",
     .name = "set",
     .req = FGX__CTL__REQUEST__REQ_SCRIPT_SET,
     .npos = 2,
     .pos_names = {"SERVICE", "FILE"},
     .opts = CLI_OPT_DEADLINE | CLI_OPT_DRY_RUN,
     .usage = usage_script_set,
     .build = build_set,
     .human = human_list,
     .json = json_one,
     .flags = CLI_CMD_CHANGE},
    {.group = "script",
     .name = "get",
     .req = FGX__CTL__REQUEST__REQ_SCRIPT_GET,
     .npos = 1,
     .pos_names = {"SERVICE"},
     .usage = usage_script_get,
     .build = cli_args_build_ref,
     .human = human_get,
     .json = json_one},
    {.group = "script",
     .name = "rm",
     .req = FGX__CTL__REQUEST__REQ_SCRIPT_RM,
     .npos = 1,
     .pos_names = {"SERVICE"},
     .usage = usage_script_rm,
     .build = cli_args_build_ref,
     .human = human_rm,
     .json = json_one,
     .flags = CLI_CMD_CHANGE},
    {.group = "script",
     .name = "list",
     .req = FGX__CTL__REQUEST__REQ_SCRIPT_LIST,
     .npos = 1,
     .pos_names = {"SERVICE"},
     .usage = usage_script_list,
     .build = cli_args_build_ref,
     .human = human_list,
     .json = json_one},
    {.group = "script",
     .name = "enable",
     .req = FGX__CTL__REQUEST__REQ_SCRIPT_ENABLE,
     .npos = 2,
     .pos_names = {"SERVICE", "FUNCTION"},
     .usage = usage_script_enable,
     .build = build_fn,
     .human = human_list,
     .json = json_one,
     .flags = CLI_CMD_CHANGE},
    {.group = "script",
     .name = "disable",
     .req = FGX__CTL__REQUEST__REQ_SCRIPT_DISABLE,
     .npos = 2,
     .pos_names = {"SERVICE", "FUNCTION"},
     .usage = usage_script_disable,
     .build = build_fn,
     .human = human_list,
     .json = json_one,
     .flags = CLI_CMD_CHANGE},
    {.group = "script",
     .name = "log",
     .req = FGX__CTL__REQUEST__REQ_SCRIPT_LOG,
     .npos = 1,
     .pos_names = {"SERVICE"},
     .opts = CLI_OPT_FOLLOW,
     .usage = usage_script_log,
     .build = build_log,
     .human = human_log,
     .json = json_log},
    {.group = "script",
     .name = "test",
     .req = FGX__CTL__REQUEST__REQ_SCRIPT_LIST,
     .npos = 1,
     .pos_names = {"FILE"},
     .opts = CLI_OPT_PCAP | CLI_OPT_PORT | CLI_OPT_SERVICE,
     .usage = usage_script_test,
     .build = build_test},
    {.group = "script",
     .name = "proxy",
     .req = FGX__CTL__REQUEST__REQ_SCRIPT_LIST,
     .npos = 1,
     .pos_names = {"FILE"},
     .opts = CLI_OPT_LISTEN | CLI_OPT_TO | CLI_OPT_DEADLINE | CLI_OPT_FAIL_OPEN_FLAG,
     .usage = usage_script_proxy,
     .build = build_proxy},
    {.name = NULL},
};

const struct cli_cmd_family cli_cmd_script = {
    .group = "script", .usage = usage_script, .cmds = script_cmds};
