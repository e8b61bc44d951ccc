/* fgexctl, the game commands (issue 28): game set --flag REGEX --checker CIDR... [--team
 * CIDR...] | --clear, game show. set scans its own words (CLI_CMD_RAW) so that --checker and
 * --team take several addresses each (and repeat, and take A,B as one word: the web API's). */
#include "cmd.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cli_fmt.h"
#include "cli_json.h"

static const char usage_game[] =
    "usage: fgexctl game set --flag REGEX --checker CIDR... [--team CIDR...]\n"
    "       fgexctl game set --clear\n"
    "       fgexctl game show\n"
    "\n"
    "The game's facts, set once: the flag format (a regex, as a filter's) and the addresses of\n"
    "the game's checker, whose flag reads are the SLA, and of the teams. `fgexctl game set\n"
    "--help` says more.\n";
static const char usage_set[] =
    "usage: fgexctl game set --flag REGEX --checker CIDR... [--team CIDR...]\n"
    "       fgexctl game set --clear\n"
    "\n"
    "Set the game's facts, replacing the ones set before:\n"
    "  --flag REGEX      the flag format, a hyperscan regex like a filter's\n"
    "                    (e.g. '[A-Z0-9]{31}='), matched case-sensitively; its bytes\n"
    "                    are kept exactly\n"
    "  --checker CIDR... the game checker's addresses or prefixes (one at least); its\n"
    "                    reads of flags are the SLA, not stolen flags\n"
    "  --team CIDR...    the teams' addresses (optional)\n"
    "  --clear           no game from now on\n"
    "Each of --checker and --team takes one or more addresses, may repeat, and takes\n"
    "A,B as one word. The game is kept in controld's state and in `fgexctl export`.\n";
static const char usage_show[] =
    "usage: fgexctl game show\n\nThe game's facts as `game set` left them.\n";

#define GAME_ADDRS_MAX 64 /* controld's bound (CTL_GAME_ADDRS_MAX), cli_cmd's room */

/* The addresses of one word (A or A,B,...) onto option which's list, copied into cmd. */
static int addr_push(struct cli_cmd *cmd, int which, const char *w)
{
    const char *names[2] = {"--checker", "--team"};
    size_t len = strlen(w), *used = &cmd->m.game.used;
    char *copy, *save = NULL;

    if (len + 1 > sizeof(cmd->m.game.text) - *used)
        return cli_args_fail(cmd, CLI_EXIT_INVALID, "too many addresses");
    copy = cmd->m.game.text + *used;
    memcpy(copy, w, len + 1);
    *used += len + 1;
    for (char *a = strtok_r(copy, ",", &save); a; a = strtok_r(NULL, ",", &save)) {
        size_t *n = which ? &cmd->m.game.set.n_team : &cmd->m.game.set.n_checker;

        if (!cli_args_ip_valid(a))
            return cli_args_fail(cmd, CLI_EXIT_INVALID,
                                 "%s takes addresses or prefixes (ADDR[/LEN]), not \"%s\"",
                                 names[which], a);
        if (*n >= GAME_ADDRS_MAX)
            return cli_args_fail(cmd, CLI_EXIT_INVALID, "at most %d %s addresses", GAME_ADDRS_MAX,
                                 names[which] + 2);
        cmd->m.game.addrs[which][(*n)++] = a;
    }
    return 0;
}

static int build_set(struct cli_cmd *cmd, const struct cli_cmd_def *def,
                     const struct cli_args_raw *raw)
{
    Fgx__Ctl__GameSet *s = &cmd->m.game.set;
    const char *flag = NULL;
    bool clear = false;
    int list = -1; /* the option whose addresses follow: 0 checker, 1 team */

    fgx__ctl__game_set__init(s);
    cmd->m.game.used = 0;
    for (int i = 0; i < raw->nrest; i++) {
        const char *w = raw->rest[i];
        int opt = -1;
        const char *eq = NULL;

        if (strcmp(w, "--json") == 0) {
            cmd->json = true;
            continue;
        }
        if (strcmp(w, "--clear") == 0) {
            clear = true;
            list = -1;
            continue;
        }
        if (strncmp(w, "--flag", 6) == 0 && (w[6] == '\0' || w[6] == '=')) {
            if (w[6] == '=') {
                flag = w + 7;
            } else if (i + 1 < raw->nrest) {
                flag = raw->rest[++i];
            } else {
                return cli_args_fail_usage(cmd, def, "option --flag needs a value");
            }
            list = -1;
            continue;
        }
        if (strncmp(w, "--checker", 9) == 0 && (w[9] == '\0' || w[9] == '='))
            opt = 0, eq = w[9] == '=' ? w + 10 : NULL;
        else if (strncmp(w, "--team", 6) == 0 && (w[6] == '\0' || w[6] == '='))
            opt = 1, eq = w[6] == '=' ? w + 7 : NULL;
        if (opt >= 0) {
            list = opt;
            if (eq && addr_push(cmd, opt, eq) < 0)
                return -EINVAL;
            if (!eq && (i + 1 >= raw->nrest || raw->rest[i + 1][0] == '-'))
                return cli_args_fail_usage(cmd, def,
                                           opt ? "option --team needs a value"
                                               : "option --checker needs a value");
            continue;
        }
        if (w[0] == '-' && w[1] != '\0')
            return cli_args_fail_usage(cmd, def, "unknown option");
        if (list < 0)
            return cli_args_fail_usage(cmd, def, "unexpected argument");
        if (addr_push(cmd, list, w) < 0)
            return -EINVAL;
    }
    if (clear && (flag || s->n_checker || s->n_team))
        return cli_args_fail_usage(cmd, def, "--clear takes no other option");
    if (!clear && !flag)
        return cli_args_fail_usage(cmd, def, "--flag REGEX is missing");
    if (!clear && flag[0] == '\0')
        return cli_args_fail(cmd, CLI_EXIT_INVALID, "--flag: the regex is empty");
    if (!clear && s->n_checker == 0)
        return cli_args_fail_usage(cmd, def,
                                   "--checker CIDR is missing (the checker's reads "
                                   "are the SLA)");
    if (clear) {
        s->has_clear = s->clear = 1;
    } else {
        s->has_flag = 1;
        s->flag.data = (uint8_t *)flag;
        s->flag.len = strlen(flag);
        s->checker = cmd->m.game.addrs[0];
        s->team = cmd->m.game.addrs[1];
    }
    cmd->req.game_set = s;
    return 0;
}

static int build_show(struct cli_cmd *cmd, const struct cli_cmd_def *def,
                      const struct cli_args_raw *raw)
{
    for (int i = 0; i < raw->nrest; i++) {
        if (strcmp(raw->rest[i], "--json") == 0)
            cmd->json = true;
        else
            return cli_args_fail_usage(cmd, def, "unexpected argument");
    }
    fgx__ctl__empty__init(&cmd->m.empty);
    cmd->req.game_show = &cmd->m.empty;
    return 0;
}

static void print_list(FILE *f, const char *key, char **v, size_t n)
{
    char line[1024];
    size_t off = 0;

    line[0] = '\0';
    for (size_t i = 0; i < n && off < sizeof(line); i++) {
        int w = snprintf(line + off, sizeof(line) - off, "%s%s", i ? " " : "", v[i]);

        if (w < 0)
            break;
        off += (size_t)w;
    }
    cli_fmt_kv(f, key, n ? line : "-");
}

static int human_game(FILE *f, const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep)
{
    const Fgx__Ctl__GameConfig *g = rep->game;
    char *flag, when[64];

    (void)req;
    if (!g || !g->has_flag || g->flag.len == 0) {
        fprintf(f, "no game set (fgexctl game set --flag REGEX --checker CIDR...)\n");
        return ferror(f) ? -EIO : 0;
    }
    flag = cli_fmt_escape_bytes_dup(g->flag.data, g->flag.len);
    if (!flag)
        return -ENOMEM;
    cli_fmt_kv(f, "flag", flag);
    free(flag);
    print_list(f, "checker", g->checker, g->n_checker);
    print_list(f, "team", g->team, g->n_team);
    if (g->has_set_time && g->set_time) {
        cli_fmt_time(g->set_time * 1000000000ull, false, when, sizeof(when));
        cli_fmt_kv(f, "set", when);
    }
    return ferror(f) ? -EIO : 0;
}

/* {"set": false} when there is no game; else the flag ("flag", or "flag_b64" for bytes that
 * are not UTF-8), the addresses and the time of the set. */
json_t *cli_cmd_game_json(const Fgx__Ctl__GameConfig *g)
{
    bool set = g && g->has_flag && g->flag.len > 0;
    json_t *o = json_object(), *ck = json_array(), *tm = json_array();
    bool ok = o && ck && tm && json_object_set_new(o, "set", json_boolean(set)) == 0;

    for (size_t i = 0; ok && set && i < g->n_checker; i++)
        ok = json_array_append_new(ck, cli_json_str(g->checker[i])) == 0;
    for (size_t i = 0; ok && set && i < g->n_team; i++)
        ok = json_array_append_new(tm, cli_json_str(g->team[i])) == 0;
    if (ok && set)
        ok = cli_json_set_bytes(o, "flag", g->flag.data, g->flag.len) == 0 &&
             json_object_set_new(
                 o, "set_time", json_integer((json_int_t)(g->has_set_time ? g->set_time : 0))) == 0;
    ok = ok && json_object_set(o, "checker", ck) == 0 && json_object_set(o, "team", tm) == 0;
    json_decref(ck);
    json_decref(tm);
    if (!ok) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static json_t *json_game(const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep)
{
    (void)req;
    return cli_cmd_game_json(rep->game);
}

static const struct cli_cmd_def game_cmds[] = {
    {.group = "game",
     .name = "set",
     .req = FGX__CTL__REQUEST__REQ_GAME_SET,
     .usage = usage_set,
     .build = build_set,
     .human = human_game,
     .json = json_game,
     .flags = CLI_CMD_RAW},
    {.group = "game",
     .name = "show",
     .req = FGX__CTL__REQUEST__REQ_GAME_SHOW,
     .usage = usage_show,
     .build = build_show,
     .human = human_game,
     .json = json_game,
     .flags = CLI_CMD_RAW},
    {0},
};

const struct cli_cmd_family cli_cmd_game = {
    .group = "game",
    .usage = usage_game,
    .cmds = game_cmds,
};
