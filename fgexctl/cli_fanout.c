/* fgexctl fan-out stage (cli_fanout.h). A process per context rather than a thread: nng, the
 * pin directory and the session token are all per process in fgexctl, and a context that hangs
 * or crashes takes nothing of the others with it. The children write into temporary files, so
 * no child ever blocks on a pipe the parent is not reading yet. */
#include "cli_fanout.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "cli_fmt.h"
#include "cli_json.h"
#include "cmd.h"

int cli_fanout_check(const struct cli_cmd *cmd, char *err, size_t errlen)
{
    const char *why = NULL;

    switch (cmd->req.req_case) {
    case FGX__CTL__REQUEST__REQ_LOGIN:
    case FGX__CTL__REQUEST__REQ_PASSWD:
        if (!cmd->password_file)
            why = "it reads the password from the terminal: give --password-file F";
        break;
    case FGX__CTL__REQUEST__REQ_CONFIG_IMPORT:
    case FGX__CTL__REQUEST__REQ_FILTER_IMPORT:
        if (cmd->file && strcmp(cmd->file, "-") == 0)
            why = "it reads stdin, which only one context could have: give a FILE";
        break;
    case FGX__CTL__REQUEST__REQ_CONFIG_EXPORT:
        why = "it writes one file: run it with -C NAME for each context";
        break;
    default:
        break;
    }
    if (cmd->fingerprint)
        why = "--fingerprint is one certificate's: pin it with -C NAME for each context";
    if (cmd->follow)
        why = "--follow runs until interrupted: follow one context at a time";
    if (cmd->watch)
        why = "--watch runs until interrupted: watch one context at a time";
    if (!why)
        return 0;
    if (cmd->def && cmd->def->group)
        (void)snprintf(err, errlen, "%s %s cannot run on several contexts: %s", cmd->def->group,
                       cmd->def->name, why);
    else
        (void)snprintf(err, errlen, "%s cannot run on several contexts: %s",
                       cmd->def ? cmd->def->name : "this command", why);
    return -EINVAL;
}

/* The whole content of f (rewound), NUL-terminated; NULL when out of memory. */
static char *slurp(FILE *f)
{
    char *buf = NULL;
    size_t len = 0;
    long end;

    if (fflush(f) == EOF || fseek(f, 0, SEEK_END) != 0 || (end = ftell(f)) < 0 ||
        fseek(f, 0, SEEK_SET) != 0)
        return strdup("");
    buf = malloc((size_t)end + 1);
    if (!buf)
        return NULL;
    len = fread(buf, 1, (size_t)end, f);
    buf[len] = '\0';
    return buf;
}

int cli_fanout_run(struct cli_cmd *cmd, const struct cli_ctx *const *ctxs, size_t n,
                   cli_fanout_fn fn, struct cli_fanout_result *res)
{
    FILE **files = calloc(2 * n + 1, sizeof(FILE *));
    pid_t *pids = calloc(n + 1, sizeof(*pids));
    int rc = 0;

    memset(res, 0, n * sizeof(*res));
    if (!files || !pids) {
        rc = -ENOMEM;
        goto out;
    }
    (void)fflush(stdout);
    (void)fflush(stderr);
    for (size_t i = 0; i < n; i++) {
        res[i].name = ctxs[i]->name;
        res[i].url = ctxs[i]->url;
        res[i].status = CLI_EXIT_ERROR;
        files[2 * i] = tmpfile();
        files[2 * i + 1] = tmpfile();
        if (!files[2 * i] || !files[2 * i + 1]) {
            res[i].err = strdup(CLI_PROG ": cannot create a temporary file\n");
            continue;
        }
        pids[i] = fork();
        if (pids[i] == -1) {
            pids[i] = 0;
            res[i].err = strdup(CLI_PROG ": cannot start a process for this context\n");
            continue;
        }
        if (pids[i] == 0) {
            int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
            int status;

            /* Nobody may read the terminal from several processes at once. */
            if (devnull != -1)
                (void)dup2(devnull, STDIN_FILENO);
            if (dup2(fileno(files[2 * i]), STDOUT_FILENO) == -1 ||
                dup2(fileno(files[2 * i + 1]), STDERR_FILENO) == -1)
                _exit(CLI_EXIT_ERROR);
            cli_fmt_set_color(false);
            status = cli_ctx_apply(cmd, ctxs[i]) < 0 ? CLI_EXIT_ERROR : fn(cmd);
            (void)fflush(stdout);
            (void)fflush(stderr);
            _exit(status);
        }
    }
    for (size_t i = 0; i < n; i++) {
        int ws;

        if (pids[i] <= 0)
            continue;
        while (waitpid(pids[i], &ws, 0) == -1) {
            if (errno != EINTR) {
                ws = 0x100; /* as exit 1 */
                break;
            }
        }
        res[i].status = WIFEXITED(ws) ? WEXITSTATUS(ws) : CLI_EXIT_ERROR;
        res[i].out = slurp(files[2 * i]);
        res[i].err = slurp(files[2 * i + 1]);
        if (WIFSIGNALED(ws)) {
            char *e = NULL;

            if (asprintf(&e, "%s" CLI_PROG ": killed by signal %d\n", res[i].err ? res[i].err : "",
                         WTERMSIG(ws)) >= 0) {
                free(res[i].err);
                res[i].err = e;
            }
        }
    }
out:
    for (size_t i = 0; files && i < 2 * n; i++)
        if (files[i])
            (void)fclose(files[i]);
    free(files);
    free(pids);
    return rc;
}

/* The next line of *p (without its newline), advancing *p; NULL at the end. */
static const char *next_line(const char **p, size_t *len)
{
    const char *s = *p, *nl;

    if (!s || *s == '\0')
        return NULL;
    nl = strchr(s, '\n');
    *len = nl ? (size_t)(nl - s) : strlen(s);
    *p = nl ? nl + 1 : s + *len;
    return s;
}

/* A message line without the "fgexctl: " every line of an error starts with. */
static const char *unprefixed(const char *l, size_t *len)
{
    static const char pre[] = CLI_PROG ": ";

    if (*len >= sizeof(pre) - 1 && strncmp(l, pre, sizeof(pre) - 1) == 0) {
        *len -= sizeof(pre) - 1;
        return l + sizeof(pre) - 1;
    }
    return l;
}

/* A "key:      value" line as cli_fmt_kv prints it (the key, its colon, padding to column 11),
 * with where its value starts. */
static bool kv_line(const char *l, size_t len, size_t *klen, size_t *voff)
{
    size_t k = 0;

    while (k < len && k < 10 &&
           ((l[k] >= 'a' && l[k] <= 'z') || (l[k] >= '0' && l[k] <= '9') || l[k] == '_' ||
            l[k] == '-' || l[k] == ' '))
        k++;
    if (k == 0 || k >= len || l[k] != ':' || l[0] == ' ')
        return false;
    *klen = k;
    *voff = k + 1;
    while (*voff < len && *voff < 11 && l[*voff] == ' ')
        (*voff)++;
    return *voff == 11 || *voff == len;
}

/* True when every line of text is a key-value line: one object, shown on one line. */
static bool all_kv(const char *text)
{
    const char *p = text, *l;
    size_t len, k, v;
    int n = 0;

    while ((l = next_line(&p, &len)) != NULL) {
        if (!kv_line(l, len, &k, &v))
            return false;
        n++;
    }
    return n > 1;
}

/* One object as "key: value, key: value". */
static void print_kv_joined(FILE *out, const char *text)
{
    const char *p = text, *l;
    size_t len, k, v;
    bool first = true;

    while ((l = next_line(&p, &len)) != NULL) {
        (void)kv_line(l, len, &k, &v);
        (void)fprintf(out, "%s%.*s: %.*s", first ? "" : ", ", (int)k, l, (int)(len - v), l + v);
        first = false;
    }
    (void)fputc('\n', out);
}

static int print_json(const struct cli_fanout_result *res, size_t n, FILE *out)
{
    json_t *arr = json_array();

    if (!arr)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        const struct cli_fanout_result *r = &res[i];
        json_t *o = json_pack("{s:o, s:o, s:i, s:b}", "context", cli_json_str(r->name), "url",
                              cli_json_str(r->url), "exit", r->status, "ok", r->status == 0);
        json_t *msgs = json_array(), *doc = NULL;
        const char *p = r->err, *l;
        size_t len;

        if (!o || !msgs || json_array_append_new(arr, o) < 0) {
            json_decref(o);
            json_decref(msgs);
            json_decref(arr);
            return -ENOMEM;
        }
        if (r->out && r->out[0]) {
            doc = json_loads(r->out, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
            if (doc)
                (void)json_object_set_new(o, "result", doc);
            else
                (void)json_object_set_new(o, "output", cli_json_str(r->out));
        }
        while ((l = next_line(&p, &len)) != NULL) {
            char *m;

            l = unprefixed(l, &len);
            m = strndup(l, len);
            if (m)
                (void)json_array_append_new(msgs, cli_json_str(m));
            free(m);
        }
        if (json_array_size(msgs) > 0)
            (void)json_object_set_new(o, "messages", msgs);
        else
            json_decref(msgs);
    }
    return cli_json_print(out, arr, false);
}

int cli_fanout_print(const struct cli_fanout_result *res, size_t n, bool json, FILE *out, FILE *err)
{
    size_t w = 0, nfail = 0;
    int common = -1;
    char failed[1024] = "";

    for (size_t i = 0; i < n; i++)
        if (strlen(res[i].name) > w)
            w = strlen(res[i].name);
    if (json) {
        if (print_json(res, n, out) < 0)
            (void)fprintf(err, CLI_PROG ": cannot write the output\n");
    }
    for (size_t i = 0; i < n; i++) {
        const struct cli_fanout_result *r = &res[i];
        const char *p, *l;
        size_t len, used;
        int pad = (int)(w - strlen(r->name));
        bool said = false;

        if (!json && r->out && all_kv(r->out)) {
            (void)fprintf(out, "%s:%*s ", r->name, pad, "");
            print_kv_joined(out, r->out);
            said = true;
        } else if (!json) {
            p = r->out;
            while ((l = next_line(&p, &len)) != NULL) {
                (void)fprintf(out, "%s:%*s %.*s\n", r->name, pad, "", (int)len, l);
                said = true;
            }
        }
        if (!json) {
            if (r->status == 0 && !said)
                (void)fprintf(out, "%s:%*s ok\n", r->name, pad, "");
            p = r->err;
            while ((l = next_line(&p, &len)) != NULL) {
                l = unprefixed(l, &len);
                (void)fprintf(err, "%s:%*s %.*s\n", r->name, pad, "", (int)len, l);
                said = true;
            }
            if (r->status != 0 && !said)
                (void)fprintf(err, "%s:%*s failed (exit %d)\n", r->name, pad, "", r->status);
        }
        if (r->status == 0)
            continue;
        nfail++;
        common = common == -1 || common == r->status ? r->status : CLI_EXIT_ERROR;
        used = strlen(failed);
        (void)snprintf(failed + used, sizeof(failed) - used, "%s%s (exit %d)", used ? ", " : "",
                       r->name, r->status);
    }
    (void)fflush(out);
    if (nfail == 0)
        return CLI_EXIT_OK;
    (void)fprintf(err, "%s" CLI_PROG ":%s failed on %zu of %zu contexts: %s\n",
                  cli_fmt_paint(CLI_COLOR_ERR), cli_fmt_paint(CLI_COLOR_OFF), nfail, n, failed);
    (void)fflush(err);
    return common;
}

void cli_fanout_release(struct cli_fanout_result *res, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(res[i].out);
        free(res[i].err);
        res[i].out = res[i].err = NULL;
    }
}
