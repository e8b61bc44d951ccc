/* fgexctl, the worker commands: list the data-path workers with their counters, restart one. */
#include "cmd.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cli_fmt.h"
#include "cli_json.h"

/* ---- usage ---- */

/* clang-format off */
static const char usage_worker[] =
    "usage: fgexctl worker COMMAND ...\n"
    "\n"
    "Commands:\n"
    "  list\n"
    "  restart nfq|proxy|script|all\n"
    "\n"
    "`fgexctl worker COMMAND --help` for one command.\n";

static const char usage_worker_list[] =
    "usage: fgexctl worker list\n"
    "\n"
    "List controld's data-path workers: kind, pid, state, the last generation of the\n"
    "rules each acknowledged, how often it was restarted, the flows it tracks, the\n"
    "packets the kernel dropped from its queues, its memory (RSS), and how long ago it\n"
    "last answered controld's heartbeat (HEARTBEAT; a worker that misses it for 1 s, or\n"
    "whose packet threads stop moving for 1 s, is replaced: state `replacing`). A worker\n"
    "taken over from an earlier controld (controld restarted while it ran) is marked\n"
    "`adopted` in NOTE; a worker replaced as hung says why there.\n"
    "With --json: an array of {kind, pid, state, generation, restarts, queue_drops,\n"
    "flows, rss_bytes, truncated, verdict_errors, malformed}, with evasion,\n"
    "midstream_resets, flows_evicted and script_{refused,errors,timeouts,blocked,final,held,\n"
    "flows,reclaimed} for kind nfq, and conns_refused, unclassified,\n"
    "connect_failed, scan_errors, src_refused, evicted, silent_closed, midstream_resets,\n"
    "midstream_rescan for kind proxy. The script worker (kind script, the Python\n"
    "filters) has pid, state, restarts and started only. Every kind has heartbeat_age_ms\n"
    "(null: no answer yet), adopted and replaced_why.\n";

static const char usage_worker_restart[] =
    "usage: fgexctl worker restart nfq|proxy|script|all\n"
    "\n"
    "Restart the NFQUEUE worker, the proxy worker, both (all), or the script worker.\n"
    "A worker that does not answer a heartbeat within 1 s (stopped, hung) is killed and\n"
    "replaced at once. Returns once each is back and has applied the current rules,\n"
    "says which pid it replaced with which, then lists the workers as `worker list`\n"
    "does. Exit status 0 when every worker asked for was replaced and is running.\n";
/* clang-format on */

/* ---- building the request ---- */

static int build_worker_restart(struct cli_cmd *cmd, const struct cli_cmd_def *def,
                                const struct cli_args_raw *raw)
{
    const char *kind = raw->pos[0];

    (void)def;
    fgx__ctl__worker_restart__init(&cmd->m.worker_restart);
    if (strcmp(kind, "nfq") != 0 && strcmp(kind, "proxy") != 0 && strcmp(kind, "script") != 0 &&
        strcmp(kind, "all") != 0)
        return cli_args_fail(cmd, CLI_EXIT_INVALID,
                             "invalid worker kind '%.60s': must be nfq, proxy, script or all",
                             kind);
    cmd->m.worker_restart.kind = (char *)kind;
    cmd->req.worker_restart = &cmd->m.worker_restart;
    return 0;
}

/* ---- output ---- */

static int human_worker_table(FILE *f, const Fgx__Ctl__Reply *rep)
{
    static const char *const heads[] = {"KIND",  "PID",    "STATE", "GENERATION", "RESTARTS",
                                        "FLOWS", "QDROPS", "RSS",   "REFUSED",    "HEARTBEAT",
                                        "NOTE"};
    struct cli_table t;
    char rss[32];
    int rc;

    if (rep->n_workers == 0) {
        (void)fputs("no workers\n", f);
        return 0;
    }
    cli_fmt_table_init(&t, heads, 11,
                       1u << 1 | 1u << 3 | 1u << 4 | 1u << 5 | 1u << 6 | 1u << 7 | 1u << 8 |
                           1u << 9);
    for (size_t i = 0; i < rep->n_workers; i++) {
        const Fgx__Ctl__Worker *w = rep->workers[i];

        cli_fmt_table_add_str(&t, w->kind);
        cli_fmt_table_addf(&t, "%" PRId32, w->pid);
        cli_fmt_table_add_str(&t, w->state);
        cli_fmt_table_add_opt(&t, w->has_generation, w->generation);
        cli_fmt_table_addf(&t, "%" PRIu32, w->restarts);
        cli_fmt_table_add_opt(&t, w->has_flows, w->flows);
        cli_fmt_table_add_opt(&t, w->has_queue_drops, w->queue_drops);
        if (w->has_rss_bytes) {
            cli_fmt_bytes(w->rss_bytes, rss, sizeof(rss));
            cli_fmt_table_addf(&t, "%s", rss);
        } else {
            cli_fmt_table_addf(&t, "-");
        }
        cli_fmt_table_add_opt(&t, w->has_conns_refused, w->conns_refused);
        if (w->has_heartbeat_age_ms)
            cli_fmt_table_addf(&t, "%.1fs ago", (double)w->heartbeat_age_ms / 1000.0);
        else
            cli_fmt_table_addf(&t, "-");
        if (w->adopted)
            cli_fmt_table_addf(&t, "adopted");
        else if (w->replaced_why && w->replaced_why[0])
            cli_fmt_table_addf(&t, "last replaced: %s", w->replaced_why);
        else
            cli_fmt_table_addf(&t, "-");
    }
    rc = cli_fmt_table_print(f, &t);
    cli_fmt_table_release(&t);
    return rc;
}

static json_t *json_worker(const void *p)
{
    const Fgx__Ctl__Worker *w = p;
    json_t *o = json_pack(
        "{s:o, s:I, s:o, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "kind", cli_json_str(w->kind),
        "pid", (json_int_t)w->pid, "state", cli_json_str(w->state), "generation",
        cli_json_int(w->generation), "restarts", cli_json_int(w->restarts), "queue_drops",
        cli_json_int(w->queue_drops), "flows", cli_json_int(w->flows), "rss_bytes",
        cli_json_int(w->rss_bytes), "truncated", cli_json_int(w->truncated), "verdict_errors",
        cli_json_int(w->verdict_errors), "malformed", cli_json_int(w->malformed));
    int rc = o ? 0 : -1;

    if (rc == 0 && w->has_evasion) /* the nfq worker's */
        rc = json_object_set_new(o, "evasion", json_integer(cli_json_int(w->evasion)));
    if (rc == 0 && w->has_midstream_resets) /* the nfq worker's */
        rc = json_object_update_new(o, json_pack("{s:I, s:I}", "midstream_resets",
                                                 cli_json_int(w->midstream_resets), "flows_evicted",
                                                 cli_json_int(w->flows_evicted)));
    if (rc == 0 && w->has_script_refused) /* the nfq worker's script filters */
        rc = json_object_update_new(
            o, json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "script_refused",
                         cli_json_int(w->script_refused), "script_errors",
                         cli_json_int(w->script_errors), "script_timeouts",
                         cli_json_int(w->script_timeouts), "script_blocked",
                         cli_json_int(w->script_blocked), "script_final",
                         cli_json_int(w->script_final), "script_held", cli_json_int(w->script_held),
                         "script_flows", cli_json_int(w->script_flows), "script_reclaimed",
                         cli_json_int(w->script_reclaimed)));
    if (rc == 0 && w->has_conns_refused) /* the proxy's own: absent for the nfq worker */
        rc = json_object_update_new(
            o,
            json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "conns_refused",
                      cli_json_int(w->conns_refused), "unclassified", cli_json_int(w->unclassified),
                      "connect_failed", cli_json_int(w->connect_failed), "scan_errors",
                      cli_json_int(w->scan_errors), "src_refused", cli_json_int(w->src_refused),
                      "evicted", cli_json_int(w->evicted), "silent_closed",
                      cli_json_int(w->silent_closed), "midstream_resets",
                      cli_json_int(w->midstream_reset), "midstream_rescan",
                      cli_json_int(w->midstream_rescan)));
    if (rc == 0) /* liveness (issue 24), every kind */
        rc = json_object_update_new(
            o, json_pack("{s:o, s:b, s:o}", "heartbeat_age_ms",
                         w->has_heartbeat_age_ms ? json_integer(cli_json_int(w->heartbeat_age_ms))
                                                 : json_null(),
                         "adopted", (int)w->adopted, "replaced_why",
                         w->replaced_why ? cli_json_str(w->replaced_why) : json_null()));
    if (rc == 0 && w->has_old_pid)
        rc = json_object_set_new(o, "old_pid", json_integer(w->old_pid));
    if (rc < 0) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static int human_list(FILE *f, const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep)
{
    (void)req;
    return human_worker_table(f, rep);
}

/* worker restart: which pid became which, then the table */
static int human_restart(FILE *f, const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep)
{
    for (size_t i = 0; i < rep->n_workers; i++) {
        const Fgx__Ctl__Worker *w = rep->workers[i];

        if (w->has_old_pid && w->pid > 0 && w->pid != w->old_pid)
            (void)fprintf(f, "%s: replaced pid %" PRId32 " with pid %" PRId32 " (%s)\n", w->kind,
                          w->old_pid, w->pid, w->state);
        else if (w->has_old_pid)
            (void)fprintf(f, "%s: pid %" PRId32 " not replaced yet (%s)\n", w->kind, w->old_pid,
                          w->state);
    }
    return human_list(f, req, rep);
}

static json_t *json_list(const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep)
{
    (void)req;
    return cli_fmt_json_list((void *const *)rep->workers, rep->n_workers, json_worker);
}

/* ---- the commands ---- */

static const struct cli_cmd_def worker_cmds[] = {
    {.group = "worker",
     .name = "list",
     .req = FGX__CTL__REQUEST__REQ_WORKER_LIST,
     .usage = usage_worker_list,
     .build = cli_args_build_empty,
     .human = human_list,
     .json = json_list},
    /* the workers as they are after the restart */
    {.group = "worker",
     .name = "restart",
     .req = FGX__CTL__REQUEST__REQ_WORKER_RESTART,
     .npos = 1,
     .pos_names = {"KIND"},
     .usage = usage_worker_restart,
     .build = build_worker_restart,
     .human = human_restart,
     .json = json_list},
    {.name = NULL},
};

const struct cli_cmd_family cli_cmd_worker = {
    .group = "worker", .usage = usage_worker, .cmds = worker_cmds};
