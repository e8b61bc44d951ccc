/* fgexctl, the service commands: add, list, show, start, stop, rm, rename, set. */
#include "cmd.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cli_fmt.h"
#include "cli_json.h"

/* ---- usage ---- */

/* clang-format off */
static const char usage_service[] =
    "usage: fgexctl service COMMAND ...\n"
    "\n"
    "Commands:\n"
    "  add NAME --proto tcp|udp --port N [--ip ADDR|CIDR] [--layer nfqueue|proxy] [--fail-open]\n"
    "      [--midstream reset|scan] [--capture on|off] [--capture-conns N] [--capture-bytes N]\n"
    "  list\n"
    "  show SERVICE\n"
    "  start SERVICE\n"
    "  stop SERVICE\n"
    "  rm SERVICE\n"
    "  rename SERVICE NEWNAME\n"
    "  set SERVICE [--port N] [--ip ADDR|CIDR|any] [--proto tcp|udp] [--layer nfqueue|proxy]\n"
    "      [--fail-open on|off] [--midstream reset|scan] [--capture on|off]\n"
    "      [--capture-conns N] [--capture-bytes N]\n"
    "\n" CLI_SERVICE_HELP_NOTE "`fgexctl service COMMAND --help` for one command.\n";

static const char usage_service_add[] =
    "usage: fgexctl service add NAME --proto tcp|udp --port N [--ip ADDR|CIDR]\n"
    "                           [--layer nfqueue|proxy] [--fail-open]\n"
    "                           [--midstream reset|scan] [--capture on|off]\n"
    "                           [--capture-conns N] [--capture-bytes N]\n"
    "\n"
    "Define a service (it starts active) and print it.\n"
    "\n"
    "  --proto tcp|udp         the service's transport protocol (required)\n"
    "  --port N                its port, 1..65535 (required)\n"
    "  --ip ADDR|CIDR          only this address or prefix (default: every address of\n"
    "                          both families)\n"
    "  --layer nfqueue|proxy   where its traffic is filtered (default: nfqueue)\n"
    "  --fail-open             let traffic pass unfiltered when the worker cannot take it\n"
    "                          (default: drop it)\n"
    "  --midstream reset|scan  a connection whose earlier bytes fgex did not see (open\n"
    "                          before the service started, across a worker restart, bytes\n"
    "                          sent while it was stopped): reset it when it next sends\n"
    "                          (default), or scan it from then on, missing what it sent\n"
    "  --capture on|off        keep the first bytes of each direction of the service's\n"
    "                          last connections (default on; see fgexctl capture)\n"
    "  --capture-conns N       how many connections the worker keeps (default 128)\n"
    "  --capture-bytes N       bytes kept per direction (default 16384)\n";

static const char usage_service_list[] =
    "usage: fgexctl service list\n"
    "\n"
    "List every service with its status, filter count and blocked count.\n";

static const char usage_service_show[] =
    "usage: fgexctl service show SERVICE\n"
    "\n"
    "Show one service: its settings, status and counters.\n" CLI_SERVICE_HELP_NOTE;

static const char usage_service_start[] =
    "usage: fgexctl service start SERVICE\n"
    "\n"
    "Start filtering a service's traffic.\n" CLI_SERVICE_HELP_NOTE;

static const char usage_service_stop[] =
    "usage: fgexctl service stop SERVICE\n"
    "\n"
    "Stop filtering a service: its traffic passes untouched, "
    "its filters are kept.\n" CLI_SERVICE_HELP_NOTE;

static const char usage_service_rm[] =
    "usage: fgexctl service rm SERVICE\n"
    "\n"
    "Remove a service and all its filters.\n" CLI_SERVICE_HELP_NOTE;

static const char usage_service_rename[] =
    "usage: fgexctl service rename SERVICE NEWNAME\n"
    "\n"
    "Rename a service.\n" CLI_SERVICE_HELP_NOTE;

static const char usage_service_set[] =
    "usage: fgexctl service set SERVICE [--port N] [--ip ADDR|CIDR|any] [--proto tcp|udp]\n"
    "                               [--layer nfqueue|proxy] [--fail-open on|off]\n"
    "                               [--midstream reset|scan] [--capture on|off]\n"
    "                               [--capture-conns N] [--capture-bytes N]\n"
    "\n"
    "Change a service's settings; at least one option is needed. `--ip any` (or\n"
    "`--ip ''`) matches every address of both families. The capture options are\n"
    "those of service add; new bounds start the service's capture afresh.\n" CLI_SERVICE_HELP_NOTE;
/* clang-format on */

/* ---- building the request ---- */

static int build_service_add(struct cli_cmd *cmd, const struct cli_cmd_def *spec,
                             const struct cli_args_raw *raw)
{
    Fgx__Ctl__ServiceAdd *m = &cmd->m.service_add;
    bool cap_any = false;
    const char *v;
    int rc;

    fgx__ctl__service_add__init(m);
    rc = cli_args_check_name(cmd, raw->pos[0]);
    if (rc < 0)
        return rc;
    m->name = (char *)raw->pos[0];
    if (!cli_args_opt(raw, CLI_OPT_PROTO))
        return cli_args_fail_usage(cmd, spec, "missing --proto tcp|udp");
    if (!cli_args_opt(raw, CLI_OPT_PORT))
        return cli_args_fail_usage(cmd, spec, "missing --port N");
    rc = cli_args_parse_proto(cmd, cli_args_opt(raw, CLI_OPT_PROTO), &m->proto);
    if (rc == 0)
        rc = cli_args_parse_port(cmd, cli_args_opt(raw, CLI_OPT_PORT), &m->port);
    if (rc == 0 && (v = cli_args_opt(raw, CLI_OPT_IP)))
        rc = cli_args_parse_ip(cmd, v, &m->ip);
    if (rc == 0 && (v = cli_args_opt(raw, CLI_OPT_LAYER))) {
        rc = cli_args_parse_layer(cmd, v, &m->layer);
        m->has_layer = 1;
    }
    if (rc == 0 && (v = cli_args_opt(raw, CLI_OPT_FAIL_OPEN_FLAG))) {
        m->fail_open = 1;
        if (*v)
            rc = cli_args_parse_onoff(cmd, v, &m->fail_open);
        m->has_fail_open = 1;
    }
    if (rc == 0 && (v = cli_args_opt(raw, CLI_OPT_MIDSTREAM))) {
        rc = cli_args_parse_midstream(cmd, v, &m->midstream);
        m->has_midstream = 1;
    }
    if (rc == 0)
        rc = cli_cmd_capture_opts(cmd, raw, &m->has_capture, &m->capture, &m->has_capture_conns,
                                  &m->capture_conns, &m->has_capture_bytes, &m->capture_bytes,
                                  &cap_any);
    if (rc < 0)
        return rc;
    cmd->req.service_add = m;
    return 0;
}

static int build_service_set(struct cli_cmd *cmd, const struct cli_cmd_def *spec,
                             const struct cli_args_raw *raw)
{
    Fgx__Ctl__ServiceSet *m = &cmd->m.service_set;
    bool cap_any = false;
    const char *v;
    int rc;

    fgx__ctl__service_set__init(m);
    rc = cli_args_check_ref(cmd, spec, raw->pos[0]);
    if (rc < 0)
        return rc;
    m->ref = (char *)raw->pos[0];
    if ((v = cli_args_opt(raw, CLI_OPT_PORT))) {
        rc = cli_args_parse_port(cmd, v, &m->port);
        m->has_port = 1;
    }
    if (rc == 0 && (v = cli_args_opt(raw, CLI_OPT_IP)))
        rc = cli_args_parse_ip(cmd, v, &m->ip);
    if (rc == 0 && (v = cli_args_opt(raw, CLI_OPT_PROTO))) {
        rc = cli_args_parse_proto(cmd, v, &m->proto);
        m->has_proto = 1;
    }
    if (rc == 0 && (v = cli_args_opt(raw, CLI_OPT_LAYER))) {
        rc = cli_args_parse_layer(cmd, v, &m->layer);
        m->has_layer = 1;
    }
    if (rc == 0 && (v = cli_args_opt(raw, CLI_OPT_FAIL_OPEN_ARG))) {
        rc = cli_args_parse_onoff(cmd, v, &m->fail_open);
        m->has_fail_open = 1;
    }
    if (rc == 0 && (v = cli_args_opt(raw, CLI_OPT_MIDSTREAM))) {
        rc = cli_args_parse_midstream(cmd, v, &m->midstream);
        m->has_midstream = 1;
    }
    if (rc == 0)
        rc = cli_cmd_capture_opts(cmd, raw, &m->has_capture, &m->capture, &m->has_capture_conns,
                                  &m->capture_conns, &m->has_capture_bytes, &m->capture_bytes,
                                  &cap_any);
    if (rc < 0)
        return rc;
    if (!m->has_port && !m->ip && !m->has_proto && !m->has_layer && !m->has_fail_open &&
        !m->has_midstream && !cap_any)
        return cli_args_fail_usage(cmd, spec, "nothing to change");
    cmd->req.service_set = m;
    return 0;
}

static int build_service_rename(struct cli_cmd *cmd, const struct cli_cmd_def *spec,
                                const struct cli_args_raw *raw)
{
    int rc;

    fgx__ctl__service_rename__init(&cmd->m.service_rename);
    rc = cli_args_check_ref(cmd, spec, raw->pos[0]);
    if (rc == 0)
        rc = cli_args_check_name(cmd, raw->pos[1]);
    cmd->m.service_rename.ref = (char *)raw->pos[0];
    cmd->m.service_rename.name = (char *)raw->pos[1];
    cmd->req.service_rename = &cmd->m.service_rename;
    return rc;
}

/* ---- output ---- */

static void human_service(FILE *f, const Fgx__Ctl__Service *s)
{
    cli_fmt_kv_u64(f, "id:", s->id);
    cli_fmt_kv_str(f, "name:", s->name);
    cli_fmt_kv(f, "proto:", cli_fmt_proto_name(s->proto));
    cli_fmt_kv_str(f, "ip:", cli_fmt_ip_text(s->ip));
    cli_fmt_kv_u64(f, "port:", s->port);
    cli_fmt_kv(f, "layer:", cli_fmt_layer_name(s->layer));
    /* The value ends the line, so colour codes cannot shift the alignment. */
    (void)fprintf(f, "%-11s%s%s%s\n",
                  "status:", cli_fmt_paint(s->active ? CLI_COLOR_OK : CLI_COLOR_WARN),
                  s->active ? "active" : "stopped", cli_fmt_paint(CLI_COLOR_OFF));
    cli_fmt_kv(f, "fail-open:", cli_fmt_yesno(s->fail_open));
    cli_fmt_kv(f, "midstream:", cli_fmt_midstream_name(s));
    /* controld always says; a reply without it is from a controld before capture. */
    if (s->has_capture && !s->capture) {
        cli_fmt_kv(f, "capture:", "off");
    } else if (s->has_capture) {
        char cap[64];

        (void)snprintf(cap, sizeof(cap), "on (%u connections, %u bytes each way)",
                       s->capture_conns ? s->capture_conns : 128,
                       s->capture_bytes ? s->capture_bytes : 16384);
        cli_fmt_kv(f, "capture:", cap);
    }
    cli_fmt_kv_u64(f, "filters:", s->filters);
    cli_fmt_kv_u64(f, "blocked:", s->blocked);
}

static int human_service_table(FILE *f, const Fgx__Ctl__Reply *rep)
{
    static const char *const heads[] = {"ID",        "NAME",    "PROTO",  "IP",
                                        "PORT",      "LAYER",   "STATUS", "FAIL-OPEN",
                                        "MIDSTREAM", "FILTERS", "BLOCKED"};
    struct cli_table t;
    int rc;

    if (rep->n_services == 0) {
        (void)fputs("no services (add one with 'fgexctl service add')\n", f);
        return 0;
    }
    cli_fmt_table_init(&t, heads, 11, 1u << 0 | 1u << 4 | 1u << 9 | 1u << 10);
    for (size_t i = 0; i < rep->n_services; i++) {
        const Fgx__Ctl__Service *s = rep->services[i];

        cli_fmt_table_addf(&t, "%" PRIu32, s->id);
        cli_fmt_table_add_str(&t, s->name);
        cli_fmt_table_addf(&t, "%s", cli_fmt_proto_name(s->proto));
        cli_fmt_table_add_str(&t, cli_fmt_ip_text(s->ip));
        cli_fmt_table_addf(&t, "%" PRIu32, s->port);
        cli_fmt_table_addf(&t, "%s", cli_fmt_layer_name(s->layer));
        cli_fmt_table_addf(&t, "%s", s->active ? "active" : "stopped");
        cli_fmt_table_addf(&t, "%s", cli_fmt_yesno(s->fail_open));
        cli_fmt_table_addf(&t, "%s", cli_fmt_midstream_name(s));
        cli_fmt_table_addf(&t, "%" PRIu32, s->filters);
        cli_fmt_table_addf(&t, "%" PRIu64, s->blocked);
    }
    rc = cli_fmt_table_print(f, &t);
    cli_fmt_table_release(&t);
    return rc;
}

static json_t *json_service_base(const Fgx__Ctl__Service *s)
{
    return json_pack("{s:I, s:o, s:s, s:o, s:I, s:s, s:s, s:b, s:s, s:I, s:I}", "id",
                     cli_json_int(s->id), "name", cli_json_str(s->name), "proto",
                     cli_fmt_proto_name(s->proto), "ip", cli_json_str(s->ip), "port",
                     cli_json_int(s->port), "layer", cli_fmt_layer_name(s->layer), "status",
                     s->active ? "active" : "stopped", "fail_open", s->fail_open, "midstream",
                     cli_fmt_midstream_name(s), "filters", cli_json_int(s->filters), "blocked",
                     cli_json_int(s->blocked));
}

static json_t *json_service(const Fgx__Ctl__Service *s)
{
    json_t *o = json_service_base(s);

    /* Capture: 0 bounds are controld's defaults. Absent from a controld before capture. */
    if (o && s->has_capture &&
        (json_object_set_new(o, "capture", json_boolean(s->capture)) < 0 ||
         json_object_set_new(o, "capture_conns", json_integer(s->capture_conns)) < 0 ||
         json_object_set_new(o, "capture_bytes", json_integer(s->capture_bytes)) < 0)) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static json_t *json_service_any(const void *s)
{
    return json_service(s);
}

static int human_list(FILE *f, const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep)
{
    (void)req;
    return human_service_table(f, rep);
}

static json_t *json_list(const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep)
{
    (void)req;
    return cli_fmt_json_list((void *const *)rep->services, rep->n_services, json_service_any);
}

/* The commands that print the service concerned. */
static int human_one(FILE *f, const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep)
{
    if (rep->n_services > 0)
        human_service(f, rep->services[0]);
    /* show: the service's filters too, when controld sends them. */
    if (req->req_case == FGX__CTL__REQUEST__REQ_SERVICE_SHOW && rep->n_filters > 0) {
        (void)fputc('\n', f);
        return cli_fmt_filter_table(f, rep);
    }
    return 0;
}

static json_t *json_one(const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep)
{
    (void)req;
    return rep->n_services > 0 ? json_service(rep->services[0]) : json_null();
}

static int human_rm(FILE *f, const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep)
{
    uint32_t id;

    if (rep->n_services > 0) {
        char name[256];
        cli_fmt_escape(rep->services[0]->name, name, sizeof(name));
        (void)fprintf(f, "removed service %" PRIu32 " (%s)\n", rep->services[0]->id, name);
    } else if (cli_fmt_removed_id(req, rep, &id)) {
        (void)fprintf(f, "removed service %" PRIu32 "\n", id);
    } else {
        (void)fputs("removed\n", f);
    }
    return 0;
}

/* ---- the commands ---- */

#define SERVICE_ONE .human = human_one, .json = json_one

static const struct cli_cmd_def service_cmds[] = {
    {.group = "service",
     .name = "add",
     .req = FGX__CTL__REQUEST__REQ_SERVICE_ADD,
     .npos = 1,
     .pos_names = {"NAME"},
     .opts = CLI_OPT_PROTO | CLI_OPT_PORT | CLI_OPT_IP | CLI_OPT_LAYER | CLI_OPT_FAIL_OPEN_FLAG |
             CLI_OPT_MIDSTREAM | CLI_OPT_CAPTURE | CLI_OPT_CAPTURE_BYTES | CLI_OPT_CAPTURE_CONNS,
     .usage = usage_service_add,
     .build = build_service_add,
     SERVICE_ONE,
     .flags = CLI_CMD_CHANGE},
    {.group = "service",
     .name = "list",
     .req = FGX__CTL__REQUEST__REQ_SERVICE_LIST,
     .usage = usage_service_list,
     .build = cli_args_build_empty,
     .human = human_list,
     .json = json_list},
    {.group = "service",
     .name = "show",
     .req = FGX__CTL__REQUEST__REQ_SERVICE_SHOW,
     .npos = 1,
     .pos_names = {"SERVICE"},
     .usage = usage_service_show,
     .build = cli_args_build_ref,
     SERVICE_ONE},
    {.group = "service",
     .name = "start",
     .req = FGX__CTL__REQUEST__REQ_SERVICE_START,
     .npos = 1,
     .pos_names = {"SERVICE"},
     .usage = usage_service_start,
     .build = cli_args_build_ref,
     SERVICE_ONE,
     .flags = CLI_CMD_CHANGE},
    {.group = "service",
     .name = "stop",
     .req = FGX__CTL__REQUEST__REQ_SERVICE_STOP,
     .npos = 1,
     .pos_names = {"SERVICE"},
     .usage = usage_service_stop,
     .build = cli_args_build_ref,
     SERVICE_ONE,
     .flags = CLI_CMD_CHANGE},
    {.group = "service",
     .name = "rm",
     .req = FGX__CTL__REQUEST__REQ_SERVICE_RM,
     .npos = 1,
     .pos_names = {"SERVICE"},
     .usage = usage_service_rm,
     .build = cli_args_build_ref,
     .human = human_rm,
     .json = cli_fmt_json_removed,
     .flags = CLI_CMD_CHANGE},
    {.group = "service",
     .name = "rename",
     .req = FGX__CTL__REQUEST__REQ_SERVICE_RENAME,
     .npos = 2,
     .pos_names = {"SERVICE", "NEWNAME"},
     .usage = usage_service_rename,
     .build = build_service_rename,
     SERVICE_ONE,
     .flags = CLI_CMD_CHANGE},
    {.group = "service",
     .name = "set",
     .req = FGX__CTL__REQUEST__REQ_SERVICE_SET,
     .npos = 1,
     .pos_names = {"SERVICE"},
     .opts = CLI_OPT_PORT | CLI_OPT_IP | CLI_OPT_PROTO | CLI_OPT_LAYER | CLI_OPT_FAIL_OPEN_ARG |
             CLI_OPT_MIDSTREAM | CLI_OPT_CAPTURE | CLI_OPT_CAPTURE_BYTES | CLI_OPT_CAPTURE_CONNS,
     .usage = usage_service_set,
     .build = build_service_set,
     SERVICE_ONE,
     .flags = CLI_CMD_CHANGE},
    {.name = NULL},
};

const struct cli_cmd_family cli_cmd_service = {
    .group = "service", .usage = usage_service, .cmds = service_cmds};
