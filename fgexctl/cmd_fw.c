/* fgexctl, the firewall commands: fw rule add/rm/move/enable/disable/list, fw list, policy,
 * set, enable/disable, import/export (rule files: one rule a line with `fw rule add`'s
 * options), apply (an import with --confirm), confirm. The commands scan their own options
 * (CLI_CMD_RAW), so a rule file line and `fw rule add` share one parser. */
#include "cmd.h"
#include "cmd_fw.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "cli_fmt.h"
#include "cli_json.h"

/* ---- usage ---- */

/* clang-format off */
#define FW_RULE_OPTS \
    "  --name N            a name to refer to the rule by (else its id)\n" \
    "  --proto P           tcp, udp, both or any (default: any; both when a port is given)\n" \
    "  --src X, --dst X    an address, a prefix (CIDR) or an interface name (eth0, or\n" \
    "                      veth* for every name that starts so): the input interface for\n" \
    "                      --src, the output interface for --dst\n" \
    "  --sport A[-B], --dport A[-B]   a port or a range\n" \
    "  --dir D             in (to the box, default), out (from it) or forward\n" \
    "  --action A          accept, drop or reject (a TCP reset, else ICMP port unreachable)\n" \
    "  --disabled          stored but not in force (fw rule enable)\n"

#define FW_CONFIRM_NOTE \
    "--confirm SECS: the change is undone after SECS seconds unless `fgexctl fw confirm`\n" \
    "comes first (so a rule that cuts you off undoes itself).\n"

static const char usage_fw[] =
    "usage: fgexctl fw COMMAND ...\n"
    "\n"
    "The firewall: an ordered list of rules, first match wins, then a policy.\n"
    "\n"
    "Commands:\n"
    "  rule add [OPTIONS] --action accept|drop|reject [--at POSITION]\n"
    "  rule rm|enable|disable RULE\n"
    "  rule move RULE POSITION\n"
    "  rule list        (or: fw list)\n"
    "  policy accept|drop [--dir in|out|forward]\n"
    "  set loopback|established|invalid|icmp|dhcp on|off\n"
    "  enable | disable\n"
    "  import FILE | export FILE\n"
    "  apply FILE --confirm SECS\n"
    "  confirm\n"
    "\n"
    "Every change takes --confirm SECS. `fgexctl fw COMMAND --help` for one command.\n";

static const char usage_rule_add[] =
    "usage: fgexctl fw rule add [OPTIONS] --action accept|drop|reject [--at POSITION]\n"
    "                           [--confirm SECS]\n"
    "\n"
    "Add a rule at POSITION (1 is the first; default: the end). A packet takes the\n"
    "action of the first rule that matches every field the rule gives.\n"
    FW_RULE_OPTS
    FW_CONFIRM_NOTE;

static const char usage_rule_rm[] =
    "usage: fgexctl fw rule rm RULE [--confirm SECS]\n\nRemove a rule (RULE: its id or name).\n"
    FW_CONFIRM_NOTE;
static const char usage_rule_enable[] =
    "usage: fgexctl fw rule enable RULE [--confirm SECS]\n\nPut a disabled rule back in force.\n"
    FW_CONFIRM_NOTE;
static const char usage_rule_disable[] =
    "usage: fgexctl fw rule disable RULE [--confirm SECS]\n\n"
    "Take a rule out of force, keeping it in the list.\n" FW_CONFIRM_NOTE;
static const char usage_rule_move[] =
    "usage: fgexctl fw rule move RULE POSITION [--confirm SECS]\n\n"
    "Move a rule to POSITION (1 is the first).\n" FW_CONFIRM_NOTE;
static const char usage_list[] =
    "usage: fgexctl fw list   (or: fgexctl fw rule list)\n"
    "\n"
    "The firewall: on or off, the policies, the options, what the kernel holds (maps,\n"
    "elements, the most lookups a packet costs), a change waiting for confirmation, and\n"
    "the rules in order (POS ID NAME DIR PROTO SRC SPORT DST DPORT ACTION ACTIVE).\n"
    "With --json: {enabled, policy: {in, out, forward}, options: {loopback, established,\n"
    "invalid, icmp, dhcp}, state: {mode, lookups, pieces, maps, elements, compile_us,\n"
    "apply_us, pending_secs}, rules: [{id, name, active, proto, src, dst, sport, dport,\n"
    "dir, action}]} (sport, dport: \"A\" or \"A-B\", or null).\n";
static const char usage_policy[] =
    "usage: fgexctl fw policy accept|drop [--dir in|out|forward] [--confirm SECS]\n"
    "\n"
    "What happens to a packet no rule matches (default: accept), per direction\n"
    "(default: in). controld's --listen port stays reachable from its --allow peers\n"
    "and from lo whatever the policy.\n" FW_CONFIRM_NOTE;
static const char usage_set[] =
    "usage: fgexctl fw set OPTION on|off [--confirm SECS]\n"
    "\n"
    "Options, tried before the rules:\n"
    "  loopback     accept what goes in or out by lo (default on)\n"
    "  established  accept packets of connections already accepted, and related ones\n"
    "               such as ICMP errors (default on)\n"
    "  invalid      drop packets conntrack finds invalid (default off)\n"
    "  icmp         accept ICMP and ICMPv6, which IPv6 needs to work (default off)\n"
    "  dhcp         accept DHCP and DHCPv6 (UDP 67-68, 546-547) (default off)\n" FW_CONFIRM_NOTE;
static const char usage_enable[] =
    "usage: fgexctl fw enable [--confirm SECS]\n\nPut the firewall's rules in force.\n"
    FW_CONFIRM_NOTE;
static const char usage_disable[] =
    "usage: fgexctl fw disable [--confirm SECS]\n\n"
    "Remove the firewall's rules from the kernel (they stay stored).\n" FW_CONFIRM_NOTE;
static const char usage_import[] =
    "usage: fgexctl fw import FILE [--confirm SECS]\n"
    "\n"
    "Replace the whole rule list with FILE's (\"-\": standard input), in one transaction.\n"
    "One rule a line, with `fw rule add`'s options (no --at); '#' starts a comment.\n"
    "A bad line refuses the file and names the line; nothing is changed.\n"
    "The policies and options stay as they are.\n" FW_CONFIRM_NOTE;
static const char usage_export[] =
    "usage: fgexctl fw export FILE\n"
    "\n"
    "Write the rule list to FILE (\"-\": standard output) as `fw import` reads it.\n";
static const char usage_apply[] =
    "usage: fgexctl fw apply FILE --confirm SECS\n"
    "\n"
    "`fw import FILE` that undoes itself after SECS seconds unless `fgexctl fw confirm`\n"
    "comes first, as careful routers do.\n";
static const char usage_confirm[] =
    "usage: fgexctl fw confirm\n\nKeep the change made with --confirm.\n";
/* clang-format on */

/* ---- scanning ---- */

static int fw_fail(struct cli_cmd *cmd, int code, char *err, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int fw_fail(struct cli_cmd *cmd, int code, char *err, size_t len, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    if (cmd) {
        (void)vsnprintf(cmd->err, sizeof(cmd->err), fmt, ap);
        cmd->exit_code = code;
    } else {
        (void)vsnprintf(err, len, fmt, ap);
    }
    va_end(ap);
    return -EINVAL;
}

static int parse_u32(const char *s, uint32_t max, uint32_t *out)
{
    char *end;
    unsigned long v;

    if (!s || *s < '0' || *s > '9')
        return -EINVAL;
    errno = 0;
    v = strtoul(s, &end, 10);
    if (errno || *end || v > max)
        return -EINVAL;
    *out = (uint32_t)v;
    return 0;
}

static int parse_ports(const char *s, uint32_t *lo, uint32_t *hi)
{
    const char *dash = strchr(s, '-');
    char a[16];

    if (!dash)
        return parse_u32(s, 65535, lo) == 0 ? (*hi = *lo, 0) : -EINVAL;
    if ((size_t)(dash - s) >= sizeof(a))
        return -EINVAL;
    memcpy(a, s, (size_t)(dash - s));
    a[dash - s] = '\0';
    if (parse_u32(a, 65535, lo) < 0 || parse_u32(dash + 1, 65535, hi) < 0 || *lo > *hi)
        return -EINVAL;
    return 0;
}

static int parse_dir(const char *s, Fgx__Ctl__FwDir *out)
{
    if (strcmp(s, "in") == 0)
        *out = FGX__CTL__FW_DIR__FW_DIR_IN;
    else if (strcmp(s, "out") == 0)
        *out = FGX__CTL__FW_DIR__FW_DIR_OUT;
    else if (strcmp(s, "forward") == 0 || strcmp(s, "fwd") == 0)
        *out = FGX__CTL__FW_DIR__FW_DIR_FORWARD;
    else
        return -EINVAL;
    return 0;
}

/* What a command line or a rule file line may carry besides the rule. */
struct fw_extra {
    bool file; /* a rule file line: no --at, --confirm, --json */
    bool has_at, has_confirm;
    uint32_t at, confirm;
};

/* The value of --opt VALUE or --opt=VALUE at w[*i]; NULL when w[*i] is not opt. */
static const char *opt_value(char **w, int n, int *i, const char *opt, bool *missing)
{
    size_t ol = strlen(opt);
    const char *a = w[*i];

    *missing = false;
    if (strncmp(a, opt, ol) != 0)
        return NULL;
    if (a[ol] == '=')
        return a + ol + 1;
    if (a[ol] != '\0')
        return NULL;
    if (*i + 1 >= n) {
        *missing = true;
        return NULL;
    }
    return w[++*i];
}

/* w[0..n): `fw rule add`'s options into r. cmd NULL: a file line, errors into err. */
static int rule_parse(struct cli_cmd *cmd, char **w, int n, Fgx__Ctl__FwRule *r,
                      struct fw_extra *x, char *err, size_t len)
{
    static const char *const opts[] = {"--name", "--proto",  "--src",    "--dst",   "--sport",
                                       "--dport", "--dir",   "--action", "--at",    "--confirm"};

    /* an option given twice is refused, not taken with its last value: "--action drop
     * --action accept" is a typo or a merge gone wrong, and either reading opens or shuts a
     * port the author did not mean to (bit k: opts[k], the last bit: --disabled) */
    unsigned seen = 0;

    fgx__ctl__fw_rule__init(r);
    for (int i = 0; i < n; i++) {
        const char *v = NULL;
        bool missing = false;
        size_t k;

        if (!x->file && strcmp(w[i], "--json") == 0) {
            cmd->json = true;
            continue;
        }
        if (strcmp(w[i], "--disabled") == 0) {
            if (seen & 1u << 15)
                return fw_fail(cmd, CLI_EXIT_USAGE, err, len, "option --disabled given twice");
            seen |= 1u << 15;
            r->has_active = true;
            r->active = false;
            continue;
        }
        for (k = 0; k < sizeof(opts) / sizeof(opts[0]); k++) {
            v = opt_value(w, n, &i, opts[k], &missing);
            if (v || missing)
                break;
        }
        if (missing)
            return fw_fail(cmd, CLI_EXIT_USAGE, err, len, "option %s needs a value", opts[k]);
        if (!v)
            return fw_fail(cmd, CLI_EXIT_USAGE, err, len, "unexpected '%.60s'", w[i]);
        if (seen & 1u << k)
            return fw_fail(cmd, CLI_EXIT_USAGE, err, len, "option %s given twice", opts[k]);
        seen |= 1u << k;
        switch (k) {
        case 0:
            r->name = (char *)v;
            break;
        case 1:
            r->has_proto = true;
            if (strcmp(v, "tcp") == 0)
                r->proto = FGX__CTL__FW_PROTO__FW_PROTO_TCP;
            else if (strcmp(v, "udp") == 0)
                r->proto = FGX__CTL__FW_PROTO__FW_PROTO_UDP;
            else if (strcmp(v, "both") == 0)
                r->proto = FGX__CTL__FW_PROTO__FW_PROTO_BOTH;
            else if (strcmp(v, "any") == 0)
                r->proto = FGX__CTL__FW_PROTO__FW_PROTO_ANY;
            else
                return fw_fail(cmd, CLI_EXIT_INVALID, err, len,
                               "--proto '%.40s': tcp, udp, both or any", v);
            break;
        case 2:
            r->src = (char *)v;
            break;
        case 3:
            r->dst = (char *)v;
            break;
        case 4:
        case 5: {
            uint32_t lo, hi;

            if (parse_ports(v, &lo, &hi) < 0)
                return fw_fail(cmd, CLI_EXIT_INVALID, err, len,
                               "%s '%.40s': a port 0-65535 or a range A-B", opts[k], v);
            if (k == 4) {
                r->has_sport_lo = r->has_sport_hi = true;
                r->sport_lo = lo;
                r->sport_hi = hi;
            } else {
                r->has_dport_lo = r->has_dport_hi = true;
                r->dport_lo = lo;
                r->dport_hi = hi;
            }
            break;
        }
        case 6:
            r->has_dir = true;
            if (parse_dir(v, &r->dir) < 0)
                return fw_fail(cmd, CLI_EXIT_INVALID, err, len,
                               "--dir '%.40s': in, out or forward", v);
            break;
        case 7:
            r->has_action = true;
            if (strcmp(v, "accept") == 0)
                r->action = FGX__CTL__FW_ACTION__FW_ACCEPT;
            else if (strcmp(v, "drop") == 0)
                r->action = FGX__CTL__FW_ACTION__FW_DROP;
            else if (strcmp(v, "reject") == 0)
                r->action = FGX__CTL__FW_ACTION__FW_REJECT;
            else
                return fw_fail(cmd, CLI_EXIT_INVALID, err, len,
                               "--action '%.40s': accept, drop or reject", v);
            break;
        case 8:
        case 9:
            if (x->file)
                return fw_fail(cmd, CLI_EXIT_USAGE, err, len, "%s has no place in a rule file",
                               opts[k]);
            if (parse_u32(v, k == 8 ? 1000000 : 86400, k == 8 ? &x->at : &x->confirm) < 0 ||
                (k == 8 ? x->at : x->confirm) == 0)
                return fw_fail(cmd, CLI_EXIT_INVALID, err, len, "%s '%.40s': %s", opts[k], v,
                               k == 8 ? "a position from 1" : "1 to 86400 seconds");
            if (k == 8)
                x->has_at = true;
            else
                x->has_confirm = true;
            break;
        default:
            break;
        }
    }
    if (!r->has_action)
        return fw_fail(cmd, CLI_EXIT_USAGE, err, len, "a rule needs --action accept|drop|reject");
    return 0;
}

/* The positionals and the common options (--confirm, --json, and --dir for policy). */
static int scan_simple(struct cli_cmd *cmd, const struct cli_cmd_def *def,
                       const struct cli_args_raw *raw, const char **pos, int npos, bool dir_ok,
                       const char **dir)
{
    int got = 0;

    for (int i = 0; i < raw->nrest; i++) {
        char **w = raw->rest;
        const char *v;
        bool missing;

        if (strcmp(w[i], "--json") == 0) {
            cmd->json = true;
            continue;
        }
        if ((v = opt_value(w, raw->nrest, &i, "--confirm", &missing)) || missing) {
            if (missing || parse_u32(v, 86400, &cmd->req.fw_confirm_secs) < 0 ||
                cmd->req.fw_confirm_secs == 0)
                return cli_args_fail(cmd, CLI_EXIT_INVALID, "--confirm takes 1 to 86400 seconds");
            cmd->req.has_fw_confirm_secs = true;
            continue;
        }
        if (dir_ok && ((v = opt_value(w, raw->nrest, &i, "--dir", &missing)) || missing)) {
            if (missing)
                return cli_args_fail_usage(cmd, def, "option --dir needs a value");
            *dir = v;
            continue;
        }
        if (w[i][0] == '-' && w[i][1] != '\0')
            return cli_args_fail_usage(cmd, def, "unknown option");
        if (got >= npos)
            return cli_args_fail_usage(cmd, def, "unexpected argument");
        pos[got++] = w[i];
    }
    if (got < npos)
        return cli_args_fail_usage(cmd, def, "missing argument");
    return 0;
}

/* ---- building the requests ---- */

static int build_rule_add(struct cli_cmd *cmd, const struct cli_cmd_def *def,
                          const struct cli_args_raw *raw)
{
    struct fw_extra x = {0};
    int rc;

    (void)def;
    fgx__ctl__fw_rule_add__init(&cmd->m.fw.add);
    rc = rule_parse(cmd, raw->rest, raw->nrest, &cmd->m.fw.rule, &x, NULL, 0);
    if (rc < 0)
        return rc;
    cmd->m.fw.add.rule = &cmd->m.fw.rule;
    cmd->m.fw.add.has_at = x.has_at;
    cmd->m.fw.add.at = x.at;
    cmd->req.has_fw_confirm_secs = x.has_confirm;
    cmd->req.fw_confirm_secs = x.confirm;
    cmd->req.fw_rule_add = &cmd->m.fw.add;
    return 0;
}

static int build_rule_ref(struct cli_cmd *cmd, const struct cli_cmd_def *def,
                          const struct cli_args_raw *raw)
{
    const char *pos[2] = {NULL, NULL};
    bool move = def->req == FGX__CTL__REQUEST__REQ_FW_RULE_MOVE;
    int rc = scan_simple(cmd, def, raw, pos, move ? 2 : 1, false, NULL);

    if (rc < 0)
        return rc;
    fgx__ctl__fw_rule_ref__init(&cmd->m.fw.ref);
    cmd->m.fw.ref.ref = (char *)pos[0];
    if (move) {
        if (parse_u32(pos[1], 1000000, &cmd->m.fw.ref.to) < 0 || cmd->m.fw.ref.to == 0)
            return cli_args_fail(cmd, CLI_EXIT_INVALID, "position '%.40s': a number from 1",
                                 pos[1]);
        cmd->m.fw.ref.has_to = true;
    }
    cmd->req.fw_rule_rm = &cmd->m.fw.ref; /* every FwRuleRef member shares its place */
    return 0;
}

static int build_list(struct cli_cmd *cmd, const struct cli_cmd_def *def,
                      const struct cli_args_raw *raw)
{
    int rc = scan_simple(cmd, def, raw, NULL, 0, false, NULL);

    if (rc < 0)
        return rc;
    if (cmd->req.has_fw_confirm_secs)
        return cli_args_fail_usage(cmd, def, "--confirm is for changes");
    return cli_args_build_empty(cmd, def, raw);
}

static int build_policy(struct cli_cmd *cmd, const struct cli_cmd_def *def,
                        const struct cli_args_raw *raw)
{
    const char *pos[1] = {NULL}, *dir = NULL;
    int rc = scan_simple(cmd, def, raw, pos, 1, true, &dir);

    if (rc < 0)
        return rc;
    fgx__ctl__fw_policy__init(&cmd->m.fw.policy);
    if (strcmp(pos[0], "accept") == 0)
        cmd->m.fw.policy.action = FGX__CTL__FW_ACTION__FW_ACCEPT;
    else if (strcmp(pos[0], "drop") == 0)
        cmd->m.fw.policy.action = FGX__CTL__FW_ACTION__FW_DROP;
    else
        return cli_args_fail(cmd, CLI_EXIT_INVALID, "policy '%.40s': accept or drop", pos[0]);
    if (dir) {
        cmd->m.fw.policy.has_dir = true;
        if (parse_dir(dir, &cmd->m.fw.policy.dir) < 0)
            return cli_args_fail(cmd, CLI_EXIT_INVALID, "--dir '%.40s': in, out or forward", dir);
    }
    cmd->req.fw_policy = &cmd->m.fw.policy;
    return 0;
}

static int build_set(struct cli_cmd *cmd, const struct cli_cmd_def *def,
                     const struct cli_args_raw *raw)
{
    const char *pos[2] = {NULL, NULL};
    protobuf_c_boolean on;
    int rc = scan_simple(cmd, def, raw, pos, 2, false, NULL);

    if (rc < 0)
        return rc;
    if (cli_args_parse_onoff(cmd, pos[1], &on) < 0)
        return -EINVAL;
    fgx__ctl__fw_set__init(&cmd->m.fw.set);
    cmd->m.fw.set.option = (char *)pos[0];
    cmd->m.fw.set.on = on;
    cmd->req.fw_set = &cmd->m.fw.set;
    return 0;
}

static int build_switch(struct cli_cmd *cmd, const struct cli_cmd_def *def,
                        const struct cli_args_raw *raw)
{
    int rc = scan_simple(cmd, def, raw, NULL, 0, false, NULL);

    if (rc < 0)
        return rc;
    fgx__ctl__fw_switch__init(&cmd->m.fw.sw);
    cmd->m.fw.sw.enabled = strcmp(def->name, "enable") == 0;
    cmd->req.fw_switch = &cmd->m.fw.sw;
    return 0;
}

/* import, apply: the file is read and parsed by cli_local.c before anything is sent. */
static int build_import(struct cli_cmd *cmd, const struct cli_cmd_def *def,
                        const struct cli_args_raw *raw)
{
    const char *pos[1] = {NULL};
    int rc = scan_simple(cmd, def, raw, pos, 1, false, NULL);

    if (rc < 0)
        return rc;
    if (strcmp(def->name, "apply") == 0 && !cmd->req.has_fw_confirm_secs)
        return cli_args_fail_usage(cmd, def, "fw apply needs --confirm SECS");
    fgx__ctl__fw_import__init(&cmd->m.fw.imp);
    cmd->file = pos[0];
    cmd->req.fw_import = &cmd->m.fw.imp;
    return 0;
}

static int build_export(struct cli_cmd *cmd, const struct cli_cmd_def *def,
                        const struct cli_args_raw *raw)
{
    const char *pos[1] = {NULL};
    int rc = scan_simple(cmd, def, raw, pos, 1, false, NULL);

    if (rc < 0)
        return rc;
    if (cmd->req.has_fw_confirm_secs)
        return cli_args_fail_usage(cmd, def, "--confirm is for changes");
    cmd->file = pos[0];
    return cli_args_build_empty(cmd, def, raw);
}

static int build_confirm(struct cli_cmd *cmd, const struct cli_cmd_def *def,
                         const struct cli_args_raw *raw)
{
    return build_list(cmd, def, raw);
}

/* ---- rule files ---- */

int cli_fw_file_parse(char *text, size_t len, Fgx__Ctl__FwImport *imp, char *err, size_t errlen)
{
    Fgx__Ctl__FwRule **ptrs = NULL, *msgs = NULL;
    size_t n = 0, cap = 0, line = 0;
    char *p = text, *end = text + len, *w[64];
    int rc = 0;

    fgx__ctl__fw_import__init(imp);
    /* the messages grow in one array; the pointers to them are made once it is complete */
    while (p < end) {
        char *eol = memchr(p, '\n', (size_t)(end - p)), *q;
        struct fw_extra x = {.file = true};
        char why[300];
        int nw = 0;

        line++;
        if (!eol)
            eol = end;
        *eol = '\0';
        if (memchr(p, '\0', (size_t)(eol - p))) {
            (void)snprintf(err, errlen, "line %zu: a NUL byte", line);
            rc = -EINVAL;
            goto fail;
        }
        /* '#' at the start of a word begins a comment */
        for (q = p; *q;) {
            while (*q == ' ' || *q == '\t' || *q == '\r')
                *q++ = '\0';
            if (!*q || *q == '#')
                break;
            if (nw == (int)(sizeof(w) / sizeof(w[0]))) {
                (void)snprintf(err, errlen, "line %zu: too many words", line);
                rc = -EINVAL;
                goto fail;
            }
            w[nw++] = q;
            while (*q && *q != ' ' && *q != '\t' && *q != '\r')
                q++;
        }
        p = eol + 1;
        if (nw == 0)
            continue;
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : 64;
            Fgx__Ctl__FwRule *nm = realloc(msgs, ncap * sizeof(*nm));

            if (!nm) {
                rc = -ENOMEM;
                goto fail;
            }
            msgs = nm;
            cap = ncap;
        }
        if (rule_parse(NULL, w, nw, &msgs[n], &x, why, sizeof(why)) < 0) {
            (void)snprintf(err, errlen, "line %zu: %s", line, why);
            rc = -EINVAL;
            goto fail;
        }
        msgs[n].has_line = true;
        msgs[n].line = (uint32_t)line;
        n++;
    }
    ptrs = malloc((n ? n : 1) * sizeof(*ptrs));
    if (!ptrs) {
        rc = -ENOMEM;
        goto fail;
    }
    for (size_t i = 0; i < n; i++)
        ptrs[i] = &msgs[i];
    if (n == 0) {
        free(msgs);
        msgs = NULL;
    }
    imp->rules = ptrs;
    imp->n_rules = n;
    return 0;
fail:
    free(msgs);
    free(ptrs);
    return rc;
}

void cli_fw_file_release(Fgx__Ctl__FwImport *imp)
{
    if (imp->n_rules > 0)
        free(imp->rules[0]);
    free(imp->rules);
    imp->rules = NULL;
    imp->n_rules = 0;
}

static const char *proto_word(Fgx__Ctl__FwProto p)
{
    switch (p) {
    case FGX__CTL__FW_PROTO__FW_PROTO_TCP:
        return "tcp";
    case FGX__CTL__FW_PROTO__FW_PROTO_UDP:
        return "udp";
    case FGX__CTL__FW_PROTO__FW_PROTO_BOTH:
        return "both";
    default:
        return "any";
    }
}

static const char *dir_word(Fgx__Ctl__FwDir d)
{
    return d == FGX__CTL__FW_DIR__FW_DIR_OUT       ? "out"
           : d == FGX__CTL__FW_DIR__FW_DIR_FORWARD ? "forward"
                                                   : "in";
}

static const char *action_word(Fgx__Ctl__FwAction a)
{
    return a == FGX__CTL__FW_ACTION__FW_DROP     ? "drop"
           : a == FGX__CTL__FW_ACTION__FW_REJECT ? "reject"
                                                 : "accept";
}

static void ports_text(bool has, uint32_t lo, uint32_t hi, char *buf, size_t len)
{
    if (!has)
        (void)snprintf(buf, len, "-");
    else if (lo == hi)
        (void)snprintf(buf, len, "%u", (unsigned)lo);
    else
        (void)snprintf(buf, len, "%u-%u", (unsigned)lo, (unsigned)hi);
}

/* One rule as a rule file line (no newline). */
static void rule_line(FILE *f, const Fgx__Ctl__FwRule *r)
{
    char sp[16], dp[16];

    ports_text(r->has_sport_lo, r->sport_lo, r->sport_hi, sp, sizeof(sp));
    ports_text(r->has_dport_lo, r->dport_lo, r->dport_hi, dp, sizeof(dp));
    if (r->name)
        (void)fprintf(f, "--name %s ", r->name);
    (void)fprintf(f, "--dir %s --proto %s", dir_word(r->dir), proto_word(r->proto));
    if (r->src)
        (void)fprintf(f, " --src %s", r->src);
    if (r->has_sport_lo)
        (void)fprintf(f, " --sport %s", sp);
    if (r->dst)
        (void)fprintf(f, " --dst %s", r->dst);
    if (r->has_dport_lo)
        (void)fprintf(f, " --dport %s", dp);
    (void)fprintf(f, " --action %s%s", action_word(r->action),
                  r->has_active && !r->active ? " --disabled" : "");
}

int cli_fw_file_write(FILE *f, const Fgx__Ctl__FwConfig *c)
{
    (void)fprintf(f, "# fgex firewall rules, first match wins (fgexctl fw import)\n");
    for (size_t i = 0; i < c->n_rules; i++) {
        rule_line(f, c->rules[i]);
        (void)fputc('\n', f);
    }
    return ferror(f) ? -EIO : 0;
}

json_t *cli_fw_config_to_json(const Fgx__Ctl__FwConfig *c)
{
    json_t *rules = json_array();

    for (size_t i = 0; rules && i < c->n_rules; i++) {
        char *line = NULL;
        size_t len = 0;
        FILE *mf = open_memstream(&line, &len);

        if (!mf) {
            json_decref(rules);
            return NULL;
        }
        rule_line(mf, c->rules[i]);
        if (fclose(mf) == EOF || json_array_append_new(rules, json_string(line)) < 0) {
            free(line);
            json_decref(rules);
            return NULL;
        }
        free(line);
    }
    return json_pack("{s:b, s:{s:s, s:s, s:s}, s:{s:b, s:b, s:b, s:b, s:b}, s:o}", "enabled",
                     !c->has_enabled || c->enabled, "policy", "in", action_word(c->policy_in),
                     "out", action_word(c->policy_out), "forward",
                     action_word(c->policy_forward), "options", "loopback",
                     !c->has_allow_loopback || c->allow_loopback, "established",
                     !c->has_allow_established || c->allow_established, "invalid",
                     c->drop_invalid, "icmp", c->allow_icmp, "dhcp", c->allow_dhcp, "rules",
                     rules);
}

static char *dup_or_null(const char *s)
{
    return s ? strdup(s) : NULL;
}

/* A parsed rule (strings into a line) as a message that owns its strings. */
static Fgx__Ctl__FwRule *rule_own(const Fgx__Ctl__FwRule *r)
{
    Fgx__Ctl__FwRule *m = malloc(sizeof(*m));

    if (!m)
        return NULL;
    *m = *r;
    m->name = dup_or_null(r->name);
    m->src = dup_or_null(r->src);
    m->dst = dup_or_null(r->dst);
    if ((r->name && !m->name) || (r->src && !m->src) || (r->dst && !m->dst)) {
        free(m->name);
        free(m->src);
        free(m->dst);
        free(m);
        return NULL;
    }
    return m;
}

static int json_policy(const json_t *pol, const char *dir, protobuf_c_boolean *has,
                       Fgx__Ctl__FwAction *a, char *err, size_t len)
{
    const json_t *v = pol ? json_object_get(pol, dir) : NULL;
    const char *s;

    if (!v)
        return 0;
    s = json_string_value(v);
    if (!s || (strcmp(s, "accept") != 0 && strcmp(s, "drop") != 0)) {
        (void)snprintf(err, len, "firewall.policy.%s must be \"accept\" or \"drop\"", dir);
        return -EINVAL;
    }
    *has = 1;
    *a = strcmp(s, "drop") == 0 ? FGX__CTL__FW_ACTION__FW_DROP : FGX__CTL__FW_ACTION__FW_ACCEPT;
    return 0;
}

int cli_fw_config_from_json(const json_t *j, Fgx__Ctl__FwConfig **out, char *err, size_t len)
{
    static const char *const opt_keys[] = {"loopback", "established", "invalid", "icmp", "dhcp"};
    Fgx__Ctl__FwConfig *c;
    const json_t *pol, *opts, *rules, *v;
    int rc = 0;

    if (!json_is_object(j)) {
        (void)snprintf(err, len, "\"firewall\" must be an object");
        return -EINVAL;
    }
    c = malloc(sizeof(*c));
    if (!c)
        return -ENOMEM;
    fgx__ctl__fw_config__init(c);
    v = json_object_get(j, "enabled");
    if (v) {
        if (!json_is_boolean(v)) {
            (void)snprintf(err, len, "firewall.enabled must be true or false");
            rc = -EINVAL;
            goto out;
        }
        c->has_enabled = 1;
        c->enabled = json_is_true(v);
    }
    pol = json_object_get(j, "policy");
    if ((rc = json_policy(pol, "in", &c->has_policy_in, &c->policy_in, err, len)) < 0 ||
        (rc = json_policy(pol, "out", &c->has_policy_out, &c->policy_out, err, len)) < 0 ||
        (rc = json_policy(pol, "forward", &c->has_policy_forward, &c->policy_forward, err,
                          len)) < 0)
        goto out;
    opts = json_object_get(j, "options");
    for (size_t k = 0; opts && k < 5; k++) {
        protobuf_c_boolean *has[] = {&c->has_allow_loopback, &c->has_allow_established,
                                     &c->has_drop_invalid, &c->has_allow_icmp,
                                     &c->has_allow_dhcp};
        protobuf_c_boolean *val[] = {&c->allow_loopback, &c->allow_established,
                                     &c->drop_invalid, &c->allow_icmp, &c->allow_dhcp};

        v = json_object_get(opts, opt_keys[k]);
        if (!v)
            continue;
        if (!json_is_boolean(v)) {
            (void)snprintf(err, len, "firewall.options.%s must be true or false", opt_keys[k]);
            rc = -EINVAL;
            goto out;
        }
        *has[k] = 1;
        *val[k] = json_is_true(v);
    }
    rules = json_object_get(j, "rules");
    if (rules && !json_is_array(rules)) {
        (void)snprintf(err, len, "firewall.rules must be an array of rule lines");
        rc = -EINVAL;
        goto out;
    }
    if (rules && json_array_size(rules) > 0) {
        c->rules = calloc(json_array_size(rules), sizeof(*c->rules));
        if (!c->rules) {
            rc = -ENOMEM;
            goto out;
        }
    }
    for (size_t i = 0; rules && i < json_array_size(rules); i++) {
        const char *line = json_string_value(json_array_get(rules, i));
        Fgx__Ctl__FwImport imp;
        char *text, why[300];

        if (!line) {
            (void)snprintf(err, len, "firewall.rules[%zu] must be a string", i);
            rc = -EINVAL;
            goto out;
        }
        text = strdup(line);
        if (!text) {
            rc = -ENOMEM;
            goto out;
        }
        rc = cli_fw_file_parse(text, strlen(text), &imp, why, sizeof(why));
        if (rc == 0 && imp.n_rules != 1) {
            (void)snprintf(why, sizeof(why), "not one rule");
            rc = -EINVAL;
        }
        if (rc == 0) {
            imp.rules[0]->has_line = 0;
            c->rules[c->n_rules] = rule_own(imp.rules[0]);
            if (!c->rules[c->n_rules])
                rc = -ENOMEM;
            else
                c->n_rules++;
        }
        if (rc == -EINVAL)
            (void)snprintf(err, len, "firewall.rules[%zu]: %s", i,
                           strncmp(why, "line 1: ", 8) == 0 ? why + 8 : why);
        if (rc == 0 || imp.rules)
            cli_fw_file_release(&imp);
        free(text);
        if (rc < 0)
            goto out;
    }
out:
    if (rc < 0) {
        fgx__ctl__fw_config__free_unpacked(c, NULL);
        return rc;
    }
    *out = c;
    return 0;
}

/* ---- output ---- */

static int human_fw(FILE *f, const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep)
{
    static const char *const heads[] = {"POS", "ID",  "NAME",  "DIR",    "PROTO", "SRC",
                                        "SPORT", "DST", "DPORT", "ACTION", "ACTIVE"};
    const Fgx__Ctl__FwConfig *c = rep->fw;
    const Fgx__Ctl__FwState *s = rep->fw_state;
    struct cli_table t;
    int rc;

    (void)req;
    if (!c)
        return 0;
    (void)fprintf(f, "firewall %s; policy in %s, out %s, forward %s\n",
                  c->enabled ? "on" : "off", action_word(c->policy_in), action_word(c->policy_out),
                  action_word(c->policy_forward));
    (void)fprintf(f, "options: loopback %s, established %s, invalid %s, icmp %s, dhcp %s\n",
                  c->allow_loopback ? "on" : "off", c->allow_established ? "on" : "off",
                  c->drop_invalid ? "on" : "off", c->allow_icmp ? "on" : "off",
                  c->allow_dhcp ? "on" : "off");
    if (s && s->mode && strcmp(s->mode, "compiled") == 0)
        (void)fprintf(f,
                      "in the kernel: %u maps, %u elements, at most %u lookups a packet (%u "
                      "piece%s); last change: %u elements, compiled in %.1f ms, applied in "
                      "%.1f ms\n",
                      s->maps, s->elements, s->lookups, s->pieces, s->pieces == 1 ? "" : "s",
                      s->elements_changed,
                      (double)s->compile_us / 1000.0, (double)s->apply_us / 1000.0);
    else if (s && s->mode)
        (void)fprintf(f, "in the kernel: nothing (%s)\n",
                      strcmp(s->mode, "off") == 0 ? "the firewall is off"
                                                  : "no rule, accept policies");
    if (s && s->pending_secs)
        (void)fprintf(f, "%spending%s: undone in %u s unless `fgexctl fw confirm`\n",
                      cli_fmt_paint(CLI_COLOR_WARN), cli_fmt_paint(CLI_COLOR_OFF),
                      s->pending_secs);
    if (c->n_rules == 0) {
        (void)fputs("no rules\n", f);
        return 0;
    }
    cli_fmt_table_init(&t, heads, 11, 1u << 0 | 1u << 1);
    for (size_t i = 0; i < c->n_rules; i++) {
        const Fgx__Ctl__FwRule *r = c->rules[i];
        char sp[16], dp[16];

        ports_text(r->has_sport_lo, r->sport_lo, r->sport_hi, sp, sizeof(sp));
        ports_text(r->has_dport_lo, r->dport_lo, r->dport_hi, dp, sizeof(dp));
        cli_fmt_table_addf(&t, "%zu", i + 1);
        cli_fmt_table_addf(&t, "%u", (unsigned)r->id);
        cli_fmt_table_add_str(&t, r->name ? r->name : "-");
        cli_fmt_table_add_str(&t, dir_word(r->dir));
        cli_fmt_table_add_str(&t, proto_word(r->proto));
        cli_fmt_table_add_str(&t, r->src ? r->src : "any");
        cli_fmt_table_add_str(&t, sp);
        cli_fmt_table_add_str(&t, r->dst ? r->dst : "any");
        cli_fmt_table_add_str(&t, dp);
        cli_fmt_table_add_str(&t, action_word(r->action));
        cli_fmt_table_add_str(&t, cli_fmt_yesno(!r->has_active || r->active));
    }
    rc = cli_fmt_table_print(f, &t);
    cli_fmt_table_release(&t);
    return rc;
}

static json_t *json_ports(bool has, uint32_t lo, uint32_t hi)
{
    char buf[16];

    if (!has)
        return json_null();
    ports_text(true, lo, hi, buf, sizeof(buf));
    return json_string(buf);
}

static json_t *json_rule(const void *p)
{
    const Fgx__Ctl__FwRule *r = p;

    return json_pack("{s:I, s:o, s:b, s:s, s:o, s:o, s:o, s:o, s:s, s:s}", "id",
                     cli_json_int(r->id), "name", r->name ? cli_json_str(r->name) : json_null(),
                     "active", !r->has_active || r->active, "proto", proto_word(r->proto), "src",
                     r->src ? cli_json_str(r->src) : json_null(), "dst",
                     r->dst ? cli_json_str(r->dst) : json_null(), "sport",
                     json_ports(r->has_sport_lo, r->sport_lo, r->sport_hi), "dport",
                     json_ports(r->has_dport_lo, r->dport_lo, r->dport_hi), "dir",
                     dir_word(r->dir), "action", action_word(r->action));
}

static json_t *json_fw(const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep)
{
    const Fgx__Ctl__FwConfig *c = rep->fw;
    const Fgx__Ctl__FwState *s = rep->fw_state;
    json_t *state;

    (void)req;
    if (!c)
        return json_null();
    state = s ? json_pack("{s:I, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "elements_changed",
                          cli_json_int(s->elements_changed), "mode",
                          s->mode ? s->mode : "off", "lookups", cli_json_int(s->lookups), "pieces",
                          cli_json_int(s->pieces), "maps", cli_json_int(s->maps), "elements",
                          cli_json_int(s->elements), "compile_us", cli_json_int(s->compile_us),
                          "apply_us", cli_json_int(s->apply_us), "pending_secs",
                          cli_json_int(s->pending_secs))
              : json_null();
    return json_pack("{s:b, s:{s:s, s:s, s:s}, s:{s:b, s:b, s:b, s:b, s:b}, s:o, s:o}",
                     "enabled", c->enabled, "policy", "in", action_word(c->policy_in), "out",
                     action_word(c->policy_out), "forward", action_word(c->policy_forward),
                     "options", "loopback", c->allow_loopback, "established",
                     c->allow_established, "invalid", c->drop_invalid, "icmp", c->allow_icmp,
                     "dhcp", c->allow_dhcp, "state", state, "rules",
                     cli_fmt_json_list((void *const *)c->rules, c->n_rules, json_rule));
}

/* ---- the table ---- */

#define FW_CMD(nm, rq, use, bld)                                                                  \
    {.group = "fw", .name = nm, .req = FGX__CTL__REQUEST__REQ_##rq, .usage = use, .build = bld,   \
     .human = human_fw, .json = json_fw, .flags = CLI_CMD_RAW}

static const struct cli_cmd_def fw_cmds[] = {
    FW_CMD("rule add", FW_RULE_ADD, usage_rule_add, build_rule_add),
    FW_CMD("rule rm", FW_RULE_RM, usage_rule_rm, build_rule_ref),
    FW_CMD("rule move", FW_RULE_MOVE, usage_rule_move, build_rule_ref),
    FW_CMD("rule enable", FW_RULE_ENABLE, usage_rule_enable, build_rule_ref),
    FW_CMD("rule disable", FW_RULE_DISABLE, usage_rule_disable, build_rule_ref),
    FW_CMD("list", FW_LIST, usage_list, build_list),
    FW_CMD("rule list", FW_LIST, usage_list, build_list),
    FW_CMD("policy", FW_POLICY, usage_policy, build_policy),
    FW_CMD("set", FW_SET, usage_set, build_set),
    FW_CMD("enable", FW_SWITCH, usage_enable, build_switch),
    FW_CMD("disable", FW_SWITCH, usage_disable, build_switch),
    FW_CMD("import", FW_IMPORT, usage_import, build_import),
    FW_CMD("apply", FW_IMPORT, usage_apply, build_import),
    FW_CMD("export", FW_LIST, usage_export, build_export),
    FW_CMD("confirm", FW_CONFIRM, usage_confirm, build_confirm),
    {0},
};

const struct cli_cmd_family cli_cmd_fw = {
    .group = "fw",
    .usage = usage_fw,
    .cmds = fw_cmds,
};
