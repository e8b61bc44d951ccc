/* controld's web API over fgexctl's command table (ctl_webapi.h). A request's parameters are
 * sorted into the struct cli_args_raw that fgexctl's argument scan fills, and the command's own
 * builder (cmd_*.c) makes the Request; fgexctl's local stage (cli_local.c) reads the files it
 * needs from blobs in memory (struct cli_cmd.in_memory), never from a path. The Reply goes
 * through fgexctl's own --json printer (cli_fmt_reply, or cli_local_finish for the commands
 * whose output is written there) into memory. What fgexctl keeps per process for one command
 * (the pcap path, the --raw choice) is not touched: the request carries what the reply needs. */
#include "ctl_webapi.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fgexctl/cli_args.h"
#include "fgexctl/cli_fmt.h"
#include "fgexctl/cli_json.h"
#include "fgexctl/cli_local.h"
#include "fgexctl/cmd.h"
#include "fgx/version.h"

#define WEBAPI_MAX 160
#define WEB_PARAMS_MAX 64    /* parameters in one request: more is no command of fgexctl's */
#define WEB_WORDS_MAX (2 + 2 * WEB_PARAMS_MAX)
#define WEB_BLOBS_MAX 4

struct ctl_webapi_cmd {
    const struct cli_cmd_def *def;
    char path[64];
    int npos;
    const char *pos[2];   /* the web names of its positionals (NULL: a fixed word) */
    const char *fixed[2]; /* a positional that is always the same word ("show" of events show) */
    bool file_in;         /* its positional "file" is a file it reads: the parameter's content */
    bool file_out;        /* its FILE is where it writes: the reply's body instead */
};

static struct ctl_webapi_cmd table[WEBAPI_MAX];
static size_t ntable;
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

/* The firewall's commands scan their own words (CLI_CMD_RAW): their positionals, by name. */
static const struct {
    const char *name;
    int npos;
    const char *pos[2];
} fw_pos[] = {
    {"rule rm", 1, {"rule"}},       {"rule enable", 1, {"rule"}},
    {"rule disable", 1, {"rule"}},  {"rule move", 2, {"rule", "position"}},
    {"policy", 1, {"policy"}},      {"set", 2, {"option", "value"}},
    {"import", 1, {"file"}},        {"apply", 1, {"file"}},
    {"export", 1, {"file"}},
};

/* Not in the API: what runs on fgexctl's machine alone, the session of fgexctl's own (the page
 * has /api/login), and `script test` and `script proxy`, which run a script engine where
 * fgexctl runs. */
static bool excluded(const struct cli_cmd_def *d)
{
    if (d->flags & (CLI_CMD_LOCAL | CLI_CMD_OFFLINE))
        return true;
    if (!d->build || d->req == FGX__CTL__REQUEST__REQ_LOGIN ||
        d->req == FGX__CTL__REQUEST__REQ_LOGOUT)
        return true;
    /* `reset` (issue 27): the page has no such button, and the API asks nobody first */
    if (!d->group && strcmp(d->name, "reset") == 0)
        return true;
    /* `script proxy` runs a proxy and a scriptworker where fgexctl runs */
    return d->group && strcmp(d->group, "script") == 0 &&
           (strcmp(d->name, "test") == 0 || strcmp(d->name, "proxy") == 0);
}

/* A positional's web name: "SERVICE" is "service", "ADDR[:PORT]" is "addr"; "on|off" is
 * "value". */
static const char *pos_web_name(const char *n, char *buf, size_t len)
{
    size_t i;

    for (i = 0; n[i] && n[i] != '[' && i + 1 < len; i++) {
        char ch = n[i];

        if (ch >= 'A' && ch <= 'Z')
            ch = (char)(ch - 'A' + 'a');
        if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_'))
            return "value";
        buf[i] = ch;
    }
    buf[i] = '\0';
    return buf;
}

static bool all_lower(const char *s)
{
    if (!*s)
        return false;
    for (; *s; s++)
        if (*s < 'a' || *s > 'z')
            return false;
    return true;
}

/* Names that live as long as the table (pos_web_name's results). */
static char names[WEBAPI_MAX][2][24];

static void table_build(void)
{
    for (size_t f = 0; cli_cmd_families[f]; f++) {
        for (const struct cli_cmd_def *d = cli_cmd_families[f]->cmds; d->name; d++) {
            struct ctl_webapi_cmd *c;
            size_t n;

            if (excluded(d) || ntable >= WEBAPI_MAX)
                continue;
            c = &table[ntable];
            c->def = d;
            n = (size_t)snprintf(c->path, sizeof(c->path), "%s%s%s", d->group ? d->group : "",
                                 d->group ? "/" : "", d->name);
            if (n >= sizeof(c->path))
                continue;
            for (char *p = c->path; *p; p++)
                if (*p == ' ')
                    *p = '/';
            /* `stats --history` has an entry of its own, after stats's: one path, the first */
            for (size_t k = 0; k < ntable; k++)
                if (strcmp(table[k].path, c->path) == 0)
                    n = 0;
            if (n == 0) {
                memset(c, 0, sizeof(*c));
                continue;
            }
            if (d->flags & CLI_CMD_RAW) {
                for (size_t k = 0; k < sizeof(fw_pos) / sizeof(fw_pos[0]); k++) {
                    if (d->group && strcmp(d->group, "fw") == 0 &&
                        strcmp(fw_pos[k].name, d->name) == 0) {
                        c->npos = fw_pos[k].npos;
                        c->pos[0] = fw_pos[k].pos[0];
                        c->pos[1] = fw_pos[k].pos[1];
                    }
                }
            } else {
                c->npos = d->npos;
                for (int i = 0; i < d->npos && i < 2; i++) {
                    if (all_lower(d->pos_names[i]))
                        c->fixed[i] = d->pos_names[i];
                    else
                        c->pos[i] = pos_web_name(d->pos_names[i], names[ntable][i],
                                                 sizeof(names[ntable][i]));
                }
            }
            switch (d->req) {
            case FGX__CTL__REQUEST__REQ_CONFIG_IMPORT:
            case FGX__CTL__REQUEST__REQ_FILTER_IMPORT:
            case FGX__CTL__REQUEST__REQ_FW_IMPORT:
            case FGX__CTL__REQUEST__REQ_SCRIPT_SET:
            case FGX__CTL__REQUEST__REQ_REGEX_MATCH:
                c->file_in = true;
                break;
            case FGX__CTL__REQUEST__REQ_CONFIG_EXPORT:
                c->file_out = true;
                break;
            case FGX__CTL__REQUEST__REQ_FW_LIST:
                c->file_out = c->npos == 1; /* fw export FILE */
                break;
            default:
                break;
            }
            ntable++;
        }
    }
}

static void table_init(void)
{
    (void)pthread_once(&table_once, table_build);
}

const struct ctl_webapi_cmd *ctl_webapi_find(const char *path)
{
    table_init();
    if (!path)
        return NULL;
    while (*path == '/')
        path++;
    for (size_t i = 0; i < ntable; i++)
        if (strcmp(table[i].path, path) == 0)
            return &table[i];
    return NULL;
}

const struct ctl_webapi_cmd *ctl_webapi_at(size_t i)
{
    table_init();
    return i < ntable ? &table[i] : NULL;
}

const char *ctl_webapi_path(const struct ctl_webapi_cmd *c)
{
    return c->path;
}

const char *ctl_webapi_pos_name(const struct ctl_webapi_cmd *c, int i)
{
    if (i < 0 || i >= c->npos || c->file_out)
        return NULL;
    return c->pos[i] ? c->pos[i] : c->fixed[i];
}

bool ctl_webapi_read_only(const struct ctl_webapi_cmd *c)
{
    switch (c->def->req) {
    case FGX__CTL__REQUEST__REQ_STATUS:
    case FGX__CTL__REQUEST__REQ_SERVICE_LIST:
    case FGX__CTL__REQUEST__REQ_SERVICE_SHOW:
    case FGX__CTL__REQUEST__REQ_FILTER_LIST:
    case FGX__CTL__REQUEST__REQ_FILTER_EXPORT:
    case FGX__CTL__REQUEST__REQ_WORKER_LIST:
    case FGX__CTL__REQUEST__REQ_STATS:
    case FGX__CTL__REQUEST__REQ_STATS_HISTORY:
    case FGX__CTL__REQUEST__REQ_EVENTS:
    case FGX__CTL__REQUEST__REQ_EVENT_SHOW:
    case FGX__CTL__REQUEST__REQ_HISTORY:
    case FGX__CTL__REQUEST__REQ_CONFIG_EXPORT:
    case FGX__CTL__REQUEST__REQ_CAPTURE:
    case FGX__CTL__REQUEST__REQ_FILTER_TEST:
    case FGX__CTL__REQUEST__REQ_REGEX_MATCH:
    case FGX__CTL__REQUEST__REQ_SCRIPT_GET:
    case FGX__CTL__REQUEST__REQ_SCRIPT_LIST:
    case FGX__CTL__REQUEST__REQ_SCRIPT_LOG:
    case FGX__CTL__REQUEST__REQ_SERVICE_LOG:
    case FGX__CTL__REQUEST__REQ_FW_LIST:
    case FGX__CTL__REQUEST__REQ_CERT:
    case FGX__CTL__REQUEST__REQ_INTERFACES:
    case FGX__CTL__REQUEST__REQ_GAME_SHOW:
        return true;
    default:
        return false;
    }
}

const char *ctl_webapi_changes(const struct ctl_webapi_cmd *c)
{
    switch (c->def->req) {
    case FGX__CTL__REQUEST__REQ_SERVICE_ADD:
    case FGX__CTL__REQUEST__REQ_SERVICE_START:
    case FGX__CTL__REQUEST__REQ_SERVICE_STOP:
    case FGX__CTL__REQUEST__REQ_SERVICE_RM:
    case FGX__CTL__REQUEST__REQ_SERVICE_RENAME:
    case FGX__CTL__REQUEST__REQ_SERVICE_SET:
    case FGX__CTL__REQUEST__REQ_SERVICE_ADDR_ADD:
    case FGX__CTL__REQUEST__REQ_SERVICE_ADDR_RM:
    case FGX__CTL__REQUEST__REQ_CONFIG_IMPORT:
    case FGX__CTL__REQUEST__REQ_UNDO:
    case FGX__CTL__REQUEST__REQ_REDO:
        return "services";
    case FGX__CTL__REQUEST__REQ_FILTER_ADD:
    case FGX__CTL__REQUEST__REQ_FILTER_ENABLE:
    case FGX__CTL__REQUEST__REQ_FILTER_DISABLE:
    case FGX__CTL__REQUEST__REQ_FILTER_RM:
    case FGX__CTL__REQUEST__REQ_FILTER_IMPORT:
    case FGX__CTL__REQUEST__REQ_FILTER_SET:
        return "filters";
    case FGX__CTL__REQUEST__REQ_FW_RULE_ADD:
    case FGX__CTL__REQUEST__REQ_FW_RULE_RM:
    case FGX__CTL__REQUEST__REQ_FW_RULE_MOVE:
    case FGX__CTL__REQUEST__REQ_FW_RULE_ENABLE:
    case FGX__CTL__REQUEST__REQ_FW_RULE_DISABLE:
    case FGX__CTL__REQUEST__REQ_FW_POLICY:
    case FGX__CTL__REQUEST__REQ_FW_SET:
    case FGX__CTL__REQUEST__REQ_FW_SWITCH:
    case FGX__CTL__REQUEST__REQ_FW_IMPORT:
    case FGX__CTL__REQUEST__REQ_FW_CONFIRM:
        return "fw";
    case FGX__CTL__REQUEST__REQ_SCRIPT_SET:
    case FGX__CTL__REQUEST__REQ_SCRIPT_RM:
    case FGX__CTL__REQUEST__REQ_SCRIPT_ENABLE:
    case FGX__CTL__REQUEST__REQ_SCRIPT_DISABLE:
        return "script";
    case FGX__CTL__REQUEST__REQ_PASSWD:
    case FGX__CTL__REQUEST__REQ_AUTH_SET:
        return "auth";
    case FGX__CTL__REQUEST__REQ_GAME_SET:
        return "game";
    default:
        return NULL;
    }
}

int ctl_webapi_http_status(int exit_code, bool busy)
{
    switch (exit_code) {
    case CLI_EXIT_OK:
        return 200;
    case CLI_EXIT_USAGE:
    case CLI_EXIT_INVALID:
        return 400;
    case CLI_EXIT_NOT_FOUND:
        return 404;
    case CLI_EXIT_EXISTS:
        return 409;
    case CLI_EXIT_AUTH:
        return 401;
    case CLI_EXIT_UNAVAILABLE:
        return 504;
    case CLI_EXIT_ERROR:
        return busy ? 503 : 500;
    default:
        return 500;
    }
}

static json_t *err_json(const char *msg, int exit_code)
{
    return json_pack("{s:o, s:i}", "error", cli_json_str(msg), "exit", exit_code);
}

/* ---- the request ---------------------------------------------------------------------- */

/* One request's build: the arguments as fgexctl's scan would have sorted them. */
struct web_build {
    struct cli_cmd cmd;
    struct cli_args_raw raw;
    struct cli_blob blobs[WEB_BLOBS_MAX];
    size_t nblobs;
    char *owned[WEB_PARAMS_MAX * 2 + CLI_ADDRS_MAX]; /* strings made here, freed at the end */
    size_t nowned;
    char *words[WEB_WORDS_MAX]; /* CLI_CMD_RAW: the words of its command line */
    int nwords;
};

static char *own(struct web_build *wb, char *s)
{
    if (!s)
        return NULL;
    if (wb->nowned >= sizeof(wb->owned) / sizeof(wb->owned[0])) {
        free(s);
        return NULL;
    }
    wb->owned[wb->nowned++] = s;
    return s;
}

/* A parameter's value as fgexctl would have read it from argv, bytes when b64 (*len says how
 * many: a file's content may hold NULs). NULL with *absent for false/null (not given), NULL
 * with cmd->err set for a value that cannot be one. "" with *flag for true. */
static const char *param_text(struct web_build *wb, const char *key, const json_t *v, bool b64,
                              size_t *len, bool *absent, bool *flag)
{
    char buf[32];
    const char *s;

    *absent = *flag = false;
    *len = 0;
    if (json_is_null(v) || json_is_false(v)) {
        *absent = true;
        return NULL;
    }
    if (json_is_true(v) && !b64) {
        *flag = true;
        return "";
    }
    if (json_is_integer(v) && !b64) {
        (void)snprintf(buf, sizeof(buf), "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        s = own(wb, strdup(buf));
        if (!s)
            (void)cli_args_fail(&wb->cmd, CLI_EXIT_ERROR, "out of memory");
        *len = s ? strlen(s) : 0;
        return s;
    }
    if (!json_is_string(v)) {
        (void)cli_args_fail(&wb->cmd, CLI_EXIT_USAGE, "parameter '%.60s': expected %s", key,
                            b64 ? "a base64 string" : "a string, an integer or true");
        return NULL;
    }
    s = json_string_value(v);
    *len = json_string_length(v);
    if (b64) {
        unsigned char *out = malloc(*len / 4 * 3 + 3);
        size_t n = 0;

        if (!out || own(wb, (char *)out) == NULL) {
            (void)cli_args_fail(&wb->cmd, CLI_EXIT_ERROR, "out of memory");
            return NULL;
        }
        if (cli_b64_decode(s, *len, out, &n) < 0) {
            (void)cli_args_fail(&wb->cmd, CLI_EXIT_INVALID, "parameter '%.60s': invalid base64",
                                key);
            return NULL;
        }
        out[n] = '\0';
        *len = n;
        return (const char *)out;
    }
    return s;
}

/* A flag given as a string (a GET's query): "true" or "" is given, "false" is not; -1 for
 * anything else. */
static int str_bool(const char *s)
{
    if (*s == '\0' || strcmp(s, "true") == 0)
        return 1;
    return strcmp(s, "false") == 0 ? 0 : -1;
}

/* Text that goes where a C string goes (a name, a regex): no NUL inside. */
static int check_text(struct web_build *wb, const char *key, const char *s, size_t len)
{
    if (strlen(s) != len)
        return cli_args_fail(&wb->cmd, CLI_EXIT_INVALID, "parameter '%.60s': contains a NUL byte",
                             key);
    return 0;
}

static int add_blob(struct web_build *wb, const char *name, const char *data, size_t len)
{
    if (wb->nblobs >= WEB_BLOBS_MAX)
        return cli_args_fail(&wb->cmd, CLI_EXIT_USAGE, "too many files");
    wb->blobs[wb->nblobs].name = name;
    wb->blobs[wb->nblobs].data = (const uint8_t *)data;
    wb->blobs[wb->nblobs].len = len;
    wb->nblobs++;
    wb->cmd.nblobs = wb->nblobs;
    return 0;
}

/* The web name of an option ("--capture-bytes" is "capture_bytes") equals key. */
static bool opt_is(const char *optname, const char *key)
{
    const char *o = optname + 2;

    for (; *o && *key; o++, key++)
        if (*key != (*o == '-' ? '_' : *o))
            return false;
    return *o == '\0' && *key == '\0';
}

/* The options fgexctl has for a terminal, which the page has /api/live for. */
#define WEB_OPTS_OFF (CLI_OPT_WATCH | CLI_OPT_INTERVAL | CLI_OPT_FOLLOW)
/* The options whose value is a file fgexctl reads: here, the file's content. */
#define WEB_OPTS_FILE (CLI_OPT_PASSWORD_FILE | CLI_OPT_TLS_CERT | CLI_OPT_TLS_KEY)

static int param_option(struct web_build *wb, const struct ctl_webapi_cmd *c, const char *key,
                        const char *base, const json_t *v, bool b64)
{
    const struct cli_cmd_def *d = c->def;
    const char *name = NULL, *s;
    uint64_t bit = 0;
    size_t k, len;
    bool absent, flag;
    int arg = 0;

    for (k = 0; k < CLI_NOPTS; k++) {
        cli_args_opt_info(k, &name, &bit, &arg);
        if ((bit & d->opts) && opt_is(name, base))
            break;
    }
    if (k == CLI_NOPTS)
        return cli_args_fail_usage(&wb->cmd, d, "unknown parameter");
    if (bit & WEB_OPTS_OFF)
        return cli_args_fail(&wb->cmd, CLI_EXIT_USAGE,
                             "%s is not in the web API: the page has /api/live", name);
    if (bit == CLI_OPT_ADDR && json_is_array(v)) {
        size_t i;
        const json_t *e;

        json_array_foreach(v, i, e) {
            if (wb->raw.naddrs >= CLI_ADDRS_MAX)
                return cli_args_fail_usage(&wb->cmd, d, "at most 32 --addr");
            s = param_text(wb, key, e, false, &len, &absent, &flag);
            if (!s && !absent)
                return -EINVAL;
            if (absent || flag)
                return cli_args_fail_usage(&wb->cmd, d, "option --addr needs a value");
            if (check_text(wb, key, s, len) < 0)
                return -EINVAL;
            wb->raw.addrs[wb->raw.naddrs++] = s;
            wb->raw.val[k] = s;
        }
        return 0;
    }
    s = param_text(wb, key, v, b64, &len, &absent, &flag);
    if (!s && !absent)
        return -EINVAL;
    if (!absent && !flag && !b64 && (arg != 1 || bit == CLI_OPT_PCAP)) {
        int b = str_bool(s);

        absent = b == 0;
        flag = b == 1;
    }
    if (absent)
        return 0;
    if (bit & WEB_OPTS_FILE) {
        /* the content, under the option's name ("tls-cert"): the builder "reads" that name */
        if (add_blob(wb, name + 2, s, len) < 0)
            return -EINVAL;
        wb->raw.val[k] = name + 2;
        return 0;
    }
    if (bit == CLI_OPT_PCAP) {
        /* the pcap is the reply's body */
        if (!flag)
            return cli_args_fail_usage(&wb->cmd, d, "pcap takes true: the pcap is the reply");
        wb->raw.val[k] = "-";
        return 0;
    }
    if (check_text(wb, key, s, len) < 0)
        return -EINVAL;
    if (arg == 0) {
        if (!flag) {
            char what[96];

            (void)snprintf(what, sizeof(what), "option %s takes no value", name);
            return cli_args_fail_usage(&wb->cmd, d, what);
        }
        wb->raw.val[k] = "";
        return 0;
    }
    if (arg == 1 && flag) {
        char what[96];

        (void)snprintf(what, sizeof(what), "option %s needs a value", name);
        return cli_args_fail_usage(&wb->cmd, d, what);
    }
    if (arg == 2 && flag)
        s = "";
    if (bit == CLI_OPT_ADDR) {
        if (wb->raw.naddrs >= CLI_ADDRS_MAX)
            return cli_args_fail_usage(&wb->cmd, d, "at most 32 --addr");
        wb->raw.addrs[wb->raw.naddrs++] = s;
    }
    wb->raw.val[k] = s;
    return 0;
}

/* A CLI_CMD_RAW command's option: one word --NAME=VALUE (or --NAME for true), which its own
 * scanner judges as it judges argv. */
static int param_word(struct web_build *wb, const char *key, const char *base, const json_t *v,
                      bool b64)
{
    const char *s;
    size_t len, n;
    bool absent, flag;
    char *w;

    s = param_text(wb, key, v, b64, &len, &absent, &flag);
    if (!s && !absent)
        return -EINVAL;
    if (absent)
        return 0;
    if (check_text(wb, key, s, len) < 0)
        return -EINVAL;
    if (wb->nwords >= WEB_WORDS_MAX)
        return cli_args_fail(&wb->cmd, CLI_EXIT_USAGE, "too many parameters");
    n = strlen(base) + len + 4;
    w = own(wb, malloc(n));
    if (!w)
        return cli_args_fail(&wb->cmd, CLI_EXIT_ERROR, "out of memory");
    if (flag)
        (void)snprintf(w, n, "--%s", base);
    else
        (void)snprintf(w, n, "--%s=%s", base, s);
    for (char *p = w + 2; *p && *p != '='; p++)
        if (*p == '_')
            *p = '-';
    wb->words[wb->nwords++] = w;
    return 0;
}

/* Sort params into wb->raw (or wb->words); errors in wb->cmd. */
static int params_scan(struct web_build *wb, const struct ctl_webapi_cmd *c, const json_t *params)
{
    const struct cli_cmd_def *d = c->def;
    const char *pos[2] = {NULL, NULL};
    const char *key, *fname = "-";
    const json_t *v;
    size_t nparams = 0;
    int npos = 0;

    if (params && !json_is_object(params))
        return cli_args_fail(&wb->cmd, CLI_EXIT_USAGE, "the parameters must be a JSON object");
    if (params && c->file_in && (v = json_object_get(params, "file_name"))) {
        /* the uploaded file's name: what fgexctl's messages (and controld's, for a script)
         * call it; only a name, never opened */
        if (!json_is_string(v) || json_string_length(v) == 0 ||
            strlen(json_string_value(v)) != json_string_length(v))
            return cli_args_fail(&wb->cmd, CLI_EXIT_USAGE,
                                 "parameter 'file_name': expected a file name");
        fname = json_string_value(v);
    }
    if (params) {
        json_object_foreach((json_t *)params, key, v) {
            char base[64];
            size_t kl = strlen(key);
            bool b64 = kl > 4 && strcmp(key + kl - 4, "_b64") == 0;
            int i, rc;

            if (c->file_in && strcmp(key, "file_name") == 0)
                continue;
            if (++nparams > WEB_PARAMS_MAX)
                return cli_args_fail(&wb->cmd, CLI_EXIT_USAGE, "too many parameters");
            if ((b64 ? kl - 4 : kl) >= sizeof(base) || kl == 0)
                return cli_args_fail_usage(&wb->cmd, d, "unknown parameter");
            memcpy(base, key, b64 ? kl - 4 : kl);
            base[b64 ? kl - 4 : kl] = '\0';
            for (i = 0; i < c->npos && !c->file_out; i++)
                if (c->pos[i] && strcmp(c->pos[i], base) == 0)
                    break;
            if (i < c->npos && !c->file_out) {
                size_t len;
                bool absent, flag;
                const char *s = param_text(wb, key, v, b64, &len, &absent, &flag);

                if (!s && !absent)
                    return -EINVAL;
                if (absent)
                    continue;
                if (flag)
                    return cli_args_fail(&wb->cmd, CLI_EXIT_USAGE,
                                         "parameter '%.60s' takes a value", key);
                if (c->file_in && strcmp(c->pos[i], "file") == 0) {
                    /* "-" as `import -` reads stdin: the content came with the request */
                    if (add_blob(wb, fname, s, len) < 0)
                        return -EINVAL;
                    s = fname;
                } else if (check_text(wb, key, s, len) < 0) {
                    return -EINVAL;
                }
                pos[i] = s;
                continue;
            }
            rc = (d->flags & CLI_CMD_RAW) ? param_word(wb, key, base, v, b64)
                                          : param_option(wb, c, key, base, v, b64);
            if (rc < 0)
                return rc;
        }
    }
    for (int i = 0; i < c->npos; i++) {
        if (c->fixed[i])
            pos[i] = c->fixed[i];
        if (c->file_out && i == 0)
            pos[i] = "-"; /* the file is the reply */
    }
    /* fgexctl's positionals come in order: a later one without an earlier one is missing it */
    for (int i = 0; i < c->npos; i++) {
        if (pos[i]) {
            npos = i + 1;
            continue;
        }
        if (i + 1 < c->npos && pos[i + 1]) {
            char what[96];

            (void)snprintf(what, sizeof(what), "missing %s",
                           (d->flags & CLI_CMD_RAW) ? c->pos[i] : d->pos_names[i]);
            return cli_args_fail_usage(&wb->cmd, d, what);
        }
    }
    if (d->flags & CLI_CMD_RAW) {
        /* positionals first, as they are written; fw's scanner says what is missing */
        if (npos > 0) {
            if (wb->nwords + npos > WEB_WORDS_MAX)
                return cli_args_fail(&wb->cmd, CLI_EXIT_USAGE, "too many parameters");
            memmove(wb->words + npos, wb->words, (size_t)wb->nwords * sizeof(wb->words[0]));
            for (int i = 0; i < npos; i++)
                wb->words[i] = (char *)pos[i];
            wb->nwords += npos;
        }
        wb->raw.rest = wb->words;
        wb->raw.nrest = wb->nwords;
        return 0;
    }
    if (npos < d->npos && !d->pos_optional) {
        char what[96];

        (void)snprintf(what, sizeof(what), "missing %s", d->pos_names[npos]);
        return cli_args_fail_usage(&wb->cmd, d, what);
    }
    wb->raw.pos[0] = pos[0];
    wb->raw.pos[1] = pos[1];
    wb->raw.npos = npos;
    return 0;
}

static void web_build_free(struct web_build *wb)
{
    for (size_t i = 0; i < wb->nowned; i++)
        free(wb->owned[i]);
    free(wb);
}

int ctl_webapi_request(const struct ctl_webapi_cmd *c, const json_t *params, const char *token,
                       void **req, size_t *reqlen, int *status, json_t **err)
{
    struct web_build *wb;
    struct cli_local local;
    bool local_ready = false;
    const char *msg;
    int rc = -EINVAL, code;
    size_t len;
    uint8_t *buf;

    *req = NULL;
    *reqlen = 0;
    *status = 400;
    *err = NULL;
    wb = calloc(1, sizeof(*wb));
    if (!wb) {
        *status = 500;
        *err = err_json("out of memory", CLI_EXIT_ERROR);
        return -ENOMEM;
    }
    fgx__ctl__request__init(&wb->cmd.req);
    wb->cmd.url = CLI_DEFAULT_URL;
    wb->cmd.json = true;
    wb->cmd.yes = true; /* the page asks before a removal (docs/web.md) */
    wb->cmd.in_memory = true;
    wb->cmd.blobs = wb->blobs;
    wb->cmd.exit_code = CLI_EXIT_USAGE;
    msg = wb->cmd.err;

    if (params_scan(wb, c, params) < 0 || cli_args_build(&wb->cmd, c->def, &wb->raw) < 0) {
        code = wb->cmd.exit_code ? wb->cmd.exit_code : CLI_EXIT_USAGE;
        goto fail;
    }
    if (wb->cmd.run_local || wb->cmd.watch || wb->cmd.follow) {
        (void)cli_args_fail(&wb->cmd, CLI_EXIT_USAGE, "%s: not in the web API", c->path);
        code = CLI_EXIT_USAGE;
        goto fail;
    }
    rc = cli_local_prepare(&wb->cmd, &local);
    local_ready = true;
    if (rc < 0) {
        code = local.exit_code ? local.exit_code : CLI_EXIT_ERROR;
        msg = local.err;
        rc = -EINVAL;
        goto fail;
    }
    wb->cmd.req.token = (char *)token;
    len = fgx__ctl__request__get_packed_size(&wb->cmd.req);
    buf = malloc(len ? len : 1);
    if (!buf) {
        (void)snprintf(wb->cmd.err, sizeof(wb->cmd.err), "out of memory");
        code = CLI_EXIT_ERROR;
        rc = -ENOMEM;
        goto fail;
    }
    (void)fgx__ctl__request__pack(&wb->cmd.req, buf);
    *req = buf;
    *reqlen = len;
    *status = 200;
    cli_local_release(&wb->cmd, &local);
    web_build_free(wb);
    return 0;
fail:
    *status = ctl_webapi_http_status(code, false);
    *err = err_json(msg, code);
    if (local_ready)
        cli_local_release(&wb->cmd, &local);
    web_build_free(wb);
    return rc == -ENOMEM ? -ENOMEM : -EINVAL;
}

/* ---- the reply ------------------------------------------------------------------------ */

static int set_json_body(json_t *v, void **body, size_t *bodylen)
{
    char *data = NULL;
    size_t n = 0;
    FILE *mf = open_memstream(&data, &n);
    int rc;

    if (!mf) {
        json_decref(v);
        return -ENOMEM;
    }
    rc = cli_json_print(mf, v, false);
    if (fclose(mf) == EOF && rc == 0)
        rc = -ENOMEM;
    if (rc < 0) {
        free(data);
        return -ENOMEM;
    }
    *body = data;
    *bodylen = n;
    return 0;
}

static int error_body(const char *msg, int code, int http, int *status, void **body,
                      size_t *bodylen)
{
    *status = http;
    return set_json_body(err_json(msg, code), body, bodylen);
}

/* controld's refusal as fgexctl reports it: its line (without "fgexctl: "), its exit status. */
static int reply_error(const Fgx__Ctl__Reply *rep, json_t *result, int *status, void **body,
                       size_t *bodylen)
{
    char *line = NULL;
    size_t n = 0;
    FILE *mf = open_memstream(&line, &n);
    int code = cli_fmt_exit_code(rep->code);
    bool busy = rep->has_busy && rep->busy;
    const char *msg;
    json_t *o;

    if (!mf)
        return -ENOMEM;
    cli_fmt_error(mf, rep);
    if (fclose(mf) == EOF) {
        free(line);
        return -ENOMEM;
    }
    msg = line;
    if (strncmp(msg, CLI_PROG ": ", sizeof(CLI_PROG ": ") - 1) == 0)
        msg += sizeof(CLI_PROG ": ") - 1;
    if (n > 0 && line[n - 1] == '\n')
        line[n - 1] = '\0';
    o = err_json(msg, code);
    free(line);
    if (o && rep->has_duplicate_of &&
        json_object_set_new(o, "duplicate_of", json_integer(rep->duplicate_of)) < 0) {
        json_decref(o);
        o = NULL;
    }
    /* the page asks, then sends the same command with force */
    if (o && rep->has_needs_force && rep->needs_force &&
        json_object_set_new(o, "needs_force", json_true()) < 0) {
        json_decref(o);
        o = NULL;
    }
    /* for the page: it sends the change again while another one compiles (app.js) */
    if (o && busy &&
        (json_object_set_new(o, "busy", json_true()) < 0 ||
         json_object_set_new(o, "busy_what", cli_json_str_or_null(rep->busy_what)) < 0 ||
         json_object_set_new(o, "busy_secs", json_integer(rep->busy_secs)) < 0)) {
        json_decref(o);
        o = NULL;
    }
    if (o && result && json_object_set(o, "result", result) < 0) {
        json_decref(o);
        o = NULL;
    }
    *status = ctl_webapi_http_status(code, busy);
    return set_json_body(o, body, bodylen);
}

/* An attachment's Content-Disposition, named fgex-NAME.EXT: what is not [A-Za-z0-9._-] in
 * NAME becomes '_'. */
static char *disposition_for(const char *name, const char *ext)
{
    char safe[80], *out = NULL;
    size_t i;

    for (i = 0; name && name[i] && i + 1 < sizeof(safe); i++) {
        char ch = name[i];

        safe[i] = ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                   (ch >= '0' && ch <= '9') || ch == '.' || ch == '-' || ch == '_')
                      ? ch
                      : '_';
    }
    safe[i] = '\0';
    if (asprintf(&out, "attachment; filename=\"fgex-%s.%s\"", safe, ext) < 0)
        return NULL;
    return out;
}

/* The command as fgexctl had it after its parse, rebuilt from the request sent: what its
 * printers look at besides the request and the reply. */
static void cmd_rebuild(const struct ctl_webapi_cmd *c, Fgx__Ctl__Request *rq,
                        struct cli_cmd *cmd, struct cli_local *l)
{
    memset(cmd, 0, sizeof(*cmd));
    memset(l, 0, sizeof(*l));
    cmd->req = *rq;
    cmd->def = c->def;
    cmd->url = CLI_DEFAULT_URL;
    cmd->json = true;
    cmd->in_memory = true;
    cmd->version = (c->def->flags & CLI_CMD_VERSION) != 0;
    if (c->file_in || c->file_out)
        cmd->file = "-";
    switch (rq->req_case) {
    case FGX__CTL__REQUEST__REQ_PASSWD:
        if (rq->passwd)
            cmd->m.passwd = *rq->passwd;
        break;
    case FGX__CTL__REQUEST__REQ_AUTH_SET:
        if (rq->auth_set)
            cmd->m.auth_set = *rq->auth_set;
        break;
    case FGX__CTL__REQUEST__REQ_FILTER_IMPORT:
        if (rq->filter_import)
            cmd->m.filter_import = *rq->filter_import;
        break;
    case FGX__CTL__REQUEST__REQ_FILTER_EXPORT:
        if (rq->filter_export)
            cmd->m.ref = *rq->filter_export;
        break;
    case FGX__CTL__REQUEST__REQ_CONFIG_IMPORT:
        l->config = rq->config_import; /* borrowed: l is never released */
        break;
    default:
        break;
    }
}

static int reply_ok(const struct ctl_webapi_cmd *c, Fgx__Ctl__Request *rq,
                    const Fgx__Ctl__Reply *rp, int *status, const char **ctype, void **body,
                    size_t *bodylen, char **disposition)
{
    struct cli_cmd *cmd;
    struct cli_local l;
    char *data = NULL, err[512];
    size_t n = 0;
    FILE *mf;
    int rc;

    if (c->def->req == FGX__CTL__REQUEST__REQ_CAPTURE &&
        rq->req_case == FGX__CTL__REQUEST__REQ_CAPTURE) {
        /* `capture --pcap FILE`: the file is the body */
        uint8_t *pcap;

        rc = cli_cmd_capture_pcap(rp, &pcap, &n, err, sizeof(err));
        if (rc == -ENOMEM)
            return rc;
        if (rc < 0)
            return error_body(err, CLI_EXIT_ERROR, 500, status, body, bodylen);
        *body = pcap;
        *bodylen = n;
        *ctype = "application/vnd.tcpdump.pcap";
        *disposition = disposition_for(rq->capture ? rq->capture->service : "capture", "pcap");
        *status = 200;
        return 0;
    }
    if (rq->req_case == FGX__CTL__REQUEST__REQ_EVENT_SHOW && rq->event_show &&
        rq->event_show->raw) {
        /* `events show SEQ --raw`: one direction's bytes */
        uint8_t *bytes;
        char name[64];

        rc = cli_cmd_event_raw(rp, rq->event_show->raw_s2c, &bytes, &n);
        if (rc == -ENOMEM)
            return rc;
        if (rc < 0) {
            (void)snprintf(err, sizeof(err),
                           "event %" PRIu64 " has no capture (capture off, or older than "
                           "controld's --captures-keep)",
                           rq->event_show->seq);
            return error_body(err, CLI_EXIT_NOT_FOUND, 404, status, body, bodylen);
        }
        *body = bytes;
        *bodylen = n;
        *ctype = "application/octet-stream";
        (void)snprintf(name, sizeof(name), "event-%" PRIu64 "-%s", rq->event_show->seq,
                       rq->event_show->raw_s2c ? "s2c" : "c2s");
        *disposition = disposition_for(name, "bin");
        *status = 200;
        return 0;
    }
    cmd = calloc(1, sizeof(*cmd));
    mf = open_memstream(&data, &n);
    if (!cmd || !mf) {
        free(cmd);
        if (mf)
            (void)fclose(mf);
        free(data);
        return -ENOMEM;
    }
    cmd_rebuild(c, rq, cmd, &l);
    if (cmd->version) {
        /* as `fgexctl --json version` */
        const char *server = rp->status && rp->status->version ? rp->status->version : "?";

        rc = cli_json_print(mf, json_pack("{s:s, s:o}", "client", FGX_VERSION, "server",
                                          cli_json_str(server)),
                            false);
    } else if (cli_local_prints(cmd)) {
        rc = cli_local_finish(cmd, &l, rp, mf);
    } else {
        rc = cli_fmt_reply(mf, &cmd->req, rp, true);
    }
    if (fclose(mf) == EOF && rc == 0)
        rc = -ENOMEM;
    if (rc < 0) {
        int code = l.exit_code ? l.exit_code : CLI_EXIT_ERROR;

        free(data);
        rc = error_body(l.err[0] ? l.err : "cannot write the output", code,
                        ctl_webapi_http_status(code, false), status, body, bodylen);
        free(cmd);
        return rc;
    }
    *body = data;
    *bodylen = n;
    *status = 200;
    if (c->def->req == FGX__CTL__REQUEST__REQ_CONFIG_EXPORT) {
        *disposition = disposition_for("export", "json");
    } else if (c->file_out) {
        /* fw export: the rule file, text */
        *ctype = "application/octet-stream";
        *disposition = disposition_for("fw", "rules");
    }
    free(cmd);
    return 0;
}

int ctl_webapi_reply(const struct ctl_webapi_cmd *c, const void *req, size_t reqlen,
                     const void *rep, size_t replen, int *status, const char **ctype,
                     void **body, size_t *bodylen, char **disposition)
{
    Fgx__Ctl__Request *rq;
    Fgx__Ctl__Reply *rp;
    int rc;

    *status = 500;
    *ctype = "application/json";
    *body = NULL;
    *bodylen = 0;
    *disposition = NULL;
    rq = fgx__ctl__request__unpack(NULL, reqlen, req);
    rp = fgx__ctl__reply__unpack(NULL, replen, rep);
    if (!rq || !rp) {
        rc = error_body(!rq ? "the request does not parse" : "controld's reply does not parse",
                        CLI_EXIT_ERROR, 500, status, body, bodylen);
    } else if (rp->code == FGX__CTL__CODE__CODE_UNAVAILABLE) {
        /* stored, but unconfirmed: an error for a page to show, with what fgexctl prints of
         * the change stored as "result" */
        json_t *result = NULL;

        rc = reply_ok(c, rq, rp, status, ctype, body, bodylen, disposition);
        if (rc == 0 && *status == 200 && strcmp(*ctype, "application/json") == 0)
            result = json_loadb(*body, *bodylen, JSON_DECODE_ANY, NULL);
        free(*body);
        free(*disposition);
        *body = NULL;
        *bodylen = 0;
        *disposition = NULL;
        *ctype = "application/json";
        rc = rc == -ENOMEM ? rc : reply_error(rp, result, status, body, bodylen);
        json_decref(result);
    } else if (rp->code != FGX__CTL__CODE__CODE_OK) {
        rc = reply_error(rp, NULL, status, body, bodylen);
    } else {
        rc = reply_ok(c, rq, rp, status, ctype, body, bodylen, disposition);
    }
    if (rq)
        fgx__ctl__request__free_unpacked(rq, NULL);
    if (rp)
        fgx__ctl__reply__free_unpacked(rp, NULL);
    if (rc < 0) {
        free(*body);
        free(*disposition);
        *body = NULL;
        *bodylen = 0;
        *disposition = NULL;
    }
    return rc < 0 ? -ENOMEM : 0;
}

/* ---- for /api/live -------------------------------------------------------------------- */

json_t *ctl_webapi_event_json(const void *event)
{
    return cli_cmd_event_json(event);
}

json_t *ctl_webapi_stats_json(const void *rep, size_t replen)
{
    const struct cli_cmd_def *d = cli_cmd_of_req(FGX__CTL__REQUEST__REQ_STATS);
    Fgx__Ctl__Reply *rp = fgx__ctl__reply__unpack(NULL, replen, rep);
    Fgx__Ctl__Request rq;
    Fgx__Ctl__StatsQuery q;
    json_t *o;

    if (!rp || !d || !d->json) {
        if (rp)
            fgx__ctl__reply__free_unpacked(rp, NULL);
        return NULL;
    }
    fgx__ctl__request__init(&rq);
    fgx__ctl__stats_query__init(&q);
    rq.req_case = FGX__CTL__REQUEST__REQ_STATS;
    rq.stats = &q;
    o = d->json(&rq, rp);
    fgx__ctl__reply__free_unpacked(rp, NULL);
    return o;
}

json_t *ctl_webapi_script_log_json(const void *entry)
{
    return cli_cmd_script_log_entry_json(entry);
}

json_t *ctl_webapi_health_json(const void *entry)
{
    return cli_cmd_health_entry_json(entry);
}
