/* controld, script filters: the file check in a Python process of its own, and the stored
 * record (ctl_script.h). */
#include "controld/ctl_script.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "controld/ctl_priv.h"
#include "fgx/log.h"
#include "fgx/priv.h"
#include "fgx/python.h"

const char *ctl_script_pydir(void)
{
    static char dir[PATH_MAX];
    char exe[PATH_MAX];
    const char *env = getenv("FGEX_PYTHON_DIR");
    ssize_t n;
    char *slash;

    if (dir[0])
        return dir;
    if (env && *env) {
        (void)snprintf(dir, sizeof(dir), "%s", env);
        return dir;
    }
    n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n == -1)
        n = 0;
    exe[n] = '\0';
    slash = strrchr(exe, '/');
    if (slash)
        *slash = '\0';
    (void)snprintf(dir, sizeof(dir), "%.4000s/fgex-python", slash ? exe : ".");
    if (access(dir, R_OK) == -1)
        (void)snprintf(dir, sizeof(dir), "%.4000s/../lib/fgex/python", slash ? exe : ".");
    return dir;
}

static uint64_t mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Run the check process with src on its stdin; its stdout (one JSON line) into *out. */
static int check_run(const void *src, size_t len, const char *filename, char **out, char *err,
                     size_t errlen)
{
    static const char prog[] = "import sys; sys.path.insert(0, sys.argv[1]); "
                               "import fgex.check as c; sys.exit(c.main(sys.argv[2:]))";
    int in = -1, pfd[2] = {-1, -1}, status, rv = 0;
    size_t cap = 4096, used = 0;
    char *buf = NULL;
    struct fgx_sandbox sb = {.pydir_fd = -1};
    const char *pydir;
    uint64_t end;
    pid_t pid;

    in = memfd_create("fgex-script", MFD_CLOEXEC);
    if (in == -1 || pipe2(pfd, O_CLOEXEC) == -1) {
        rv = -errno;
        fgx_err_set(err, errlen, "cannot start the script check: %s", strerror(errno));
        goto out;
    }
    for (size_t off = 0; off < len;) {
        ssize_t w = write(in, (const char *)src + off, len - off);
        if (w == -1) {
            rv = -errno;
            fgx_err_set(err, errlen, "cannot start the script check: %s", strerror(errno));
            goto out;
        }
        off += (size_t)w;
    }
    if (lseek(in, 0, SEEK_SET) == -1) {
        rv = -errno;
        goto out;
    }
    buf = malloc(cap);
    if (!buf) {
        rv = -ENOMEM;
        goto out;
    }
    /* a file's module code runs here: in the sandbox the interpreters have, uid its own */
    ctl_priv_check_sandbox(&sb);
    pydir = ctl_script_pydir();
    sb.pydir_fd = fgx_sandbox_pydir_open(pydir);
    if (sb.pydir_fd < 0) {
        rv = sb.pydir_fd;
        fgx_err_set(err, errlen, "cannot open %s: %s", pydir, strerror(-rv));
        goto out;
    }
    pid = fgx_sandbox_fork();
    if (pid < 0) {
        rv = pid;
        fgx_err_set(err, errlen, "cannot start the script check: %s", strerror(-pid));
        goto out;
    }
    if (pid == 0) {
        int devnull = open("/dev/null", O_WRONLY);

        (void)dup2(in, 0);
        (void)dup2(pfd[1], 1);
        if (devnull != -1)
            (void)dup2(devnull, 2);
        /* pid 1 of its own namespace: a timeout's kill takes whatever the file started */
        if (fgx_sandbox_enter(&sb) < 0)
            _exit(126);
        {
            const char *args[] = {"-c", prog, FGX_SANDBOX_PYDIR, filename, NULL};

            (void)fgx_python_exec(args);
        }
        _exit(127);
    }
    close(pfd[1]);
    pfd[1] = -1;
    end = mono_ms() + CTL_SCRIPT_CHECK_MS;
    for (;;) {
        struct pollfd p = {.fd = pfd[0], .events = POLLIN};
        uint64_t now = mono_ms();
        ssize_t r;
        int pr;

        if (now >= end) {
            rv = -ETIMEDOUT;
            break;
        }
        pr = poll(&p, 1, (int)(end - now));
        if (pr == -1 && errno == EINTR)
            continue;
        if (pr <= 0) {
            rv = pr == 0 ? -ETIMEDOUT : -errno;
            break;
        }
        if (used + 1024 > cap) {
            char *grown;

            if (cap >= (1u << 20)) {
                rv = -EFBIG;
                break;
            }
            grown = realloc(buf, cap * 2);
            if (!grown) {
                rv = -ENOMEM;
                break;
            }
            buf = grown;
            cap *= 2;
        }
        r = read(pfd[0], buf + used, cap - used - 1);
        if (r == -1 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        used += (size_t)r;
    }
    if (rv < 0)
        (void)fgx_signal_as(pid, -1, sb.uid, SIGKILL); /* its script uid: no CAP_KILL */
    while (waitpid(pid, &status, 0) == -1 && errno == EINTR)
        ;
    if (rv == -ETIMEDOUT) {
        fgx_err_set(err, errlen,
                "%s: the file did not finish loading within %d ms (an endless loop at module "
                "level?); nothing was stored",
                filename, CTL_SCRIPT_CHECK_MS);
        goto out;
    }
    if (rv < 0) {
        fgx_err_set(err, errlen, "the script check failed: %s", strerror(-rv));
        goto out;
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        rv = -EIO;
        fgx_err_set(err, errlen,
                "the script check did not run (%s %s: exit %d): is python3 with fgex's "
                "package installed?",
                FGX_PYTHON, ctl_script_pydir(),
                WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        goto out;
    }
    buf[used] = '\0';
    *out = buf;
    buf = NULL;
out:
    free(buf);
    if (sb.pydir_fd >= 0)
        close(sb.pydir_fd);
    if (in != -1)
        close(in);
    if (pfd[0] != -1)
        close(pfd[0]);
    if (pfd[1] != -1)
        close(pfd[1]);
    return rv;
}

/* A Script built here, field by field. */
static void handmade_free(Fgx__Ctl__Script *s)
{
    for (size_t i = 0; s->functions && i < s->n_functions; i++) {
        if (!s->functions[i])
            continue;
        free(s->functions[i]->name);
        for (size_t j = 0; s->functions[i]->params && j < s->functions[i]->n_params; j++)
            free(s->functions[i]->params[j]);
        free(s->functions[i]->params);
        free(s->functions[i]);
    }
    free(s->functions);
    free(s->filename);
    free(s->source.data);
    free(s);
}

/* A hand-made Script as protobuf-c's own (packed and unpacked), so that one free fits all. */
static int script_repack(const Fgx__Ctl__Script *s, Fgx__Ctl__Script **out)
{
    size_t n = fgx__ctl__script__get_packed_size(s);
    uint8_t *buf = malloc(n ? n : 1);

    if (!buf)
        return -ENOMEM;
    fgx__ctl__script__pack(s, buf);
    *out = fgx__ctl__script__unpack(NULL, n, buf);
    free(buf);
    return *out ? 0 : -ENOMEM;
}

static char *json_strdup(json_t *o, const char *key)
{
    const char *s = json_string_value(json_object_get(o, key));

    return strdup(s ? s : "");
}

int ctl_script_check(const void *src, size_t len, const char *filename, Fgx__Ctl__Script **out,
                     char *err, size_t errlen)
{
    Fgx__Ctl__Script *s = NULL;
    json_t *root = NULL, *fns;
    json_error_t jerr;
    char *text = NULL;
    int rv;

    *out = NULL;
    if (len > CTL_SCRIPT_SOURCE_MAX) {
        fgx_err_set(err, errlen, "%s: larger than %u bytes", filename, CTL_SCRIPT_SOURCE_MAX);
        return -EINVAL;
    }
    if (memchr(src, '\0', len)) {
        fgx_err_set(err, errlen, "%s: contains a NUL byte: not a Python file", filename);
        return -EINVAL;
    }
    rv = check_run(src, len, filename, &text, err, errlen);
    if (rv < 0)
        return rv == -ETIMEDOUT ? -EINVAL : rv;
    root = json_loads(text, 0, &jerr);
    if (!root || !json_is_object(root)) {
        fgx_err_set(err, errlen, "the script check answered nonsense: %s", jerr.text);
        rv = -EIO;
        goto out;
    }
    if (!json_is_true(json_object_get(root, "ok"))) {
        json_int_t line = json_integer_value(json_object_get(root, "line"));
        const char *why = json_string_value(json_object_get(root, "reason"));

        if (line > 0)
            fgx_err_set(err, errlen, "%s:%lld: %s; nothing was stored", filename, (long long)line,
                    why ? why : "refused");
        else
            fgx_err_set(err, errlen, "%s: %s; nothing was stored", filename, why ? why : "refused");
        rv = -EINVAL;
        goto out;
    }
    s = calloc(1, sizeof(*s));
    if (!s) {
        rv = -ENOMEM;
        goto out;
    }
    fgx__ctl__script__init(s);
    fns = json_object_get(root, "functions");
    s->n_functions = json_array_size(fns);
    s->functions = calloc(s->n_functions ? s->n_functions : 1, sizeof(*s->functions));
    if (!s->functions) {
        rv = -ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < s->n_functions; i++) {
        json_t *f = json_array_get(fns, i), *ps = json_object_get(f, "params");
        Fgx__Ctl__ScriptFunction *m = calloc(1, sizeof(*m));

        if (!m) {
            rv = -ENOMEM;
            goto out;
        }
        s->functions[i] = m;
        fgx__ctl__script_function__init(m);
        m->name = json_strdup(f, "name");
        m->has_line = 1;
        m->line = (uint32_t)json_integer_value(json_object_get(f, "line"));
        m->has_active = 1;
        m->active = 1;
        m->n_params = json_array_size(ps);
        m->params = calloc(m->n_params ? m->n_params : 1, sizeof(*m->params));
        if (!m->name || !m->params) {
            rv = -ENOMEM;
            goto out;
        }
        for (size_t j = 0; j < m->n_params; j++) {
            m->params[j] = strdup(json_string_value(json_array_get(ps, j)) ?: "");
            if (!m->params[j]) {
                rv = -ENOMEM;
                goto out;
            }
        }
    }
    s->filename = strdup(filename);
    s->has_source = 1;
    s->source.len = len;
    s->source.data = malloc(len ? len : 1);
    if (!s->filename || !s->source.data) {
        rv = -ENOMEM;
        goto out;
    }
    memcpy(s->source.data, src, len);
    rv = script_repack(s, out);
out:
    if (s)
        handmade_free(s);
    json_decref(root);
    free(text);
    return rv;
}

void ctl_script_free(Fgx__Ctl__Script *s)
{
    if (s)
        fgx__ctl__script__free_unpacked(s, NULL);
}

int ctl_script_load(struct ctl_txn *t, uint32_t service_id, Fgx__Ctl__Script **out)
{
    void *data = NULL;
    size_t len = 0;
    int rv;

    *out = NULL;
    rv = ctl_store_script_get(t, service_id, &data, &len);
    if (rv < 0)
        return rv;
    *out = fgx__ctl__script__unpack(NULL, len, data);
    free(data);
    return *out ? 0 : -EINVAL;
}

int ctl_script_save(struct ctl_txn *t, const Fgx__Ctl__Script *s)
{
    size_t n = fgx__ctl__script__get_packed_size(s);
    uint8_t *buf = malloc(n ? n : 1);
    int rv;

    if (!buf)
        return -ENOMEM;
    fgx__ctl__script__pack(s, buf);
    rv = ctl_store_script_put(t, s->service_id, buf, n);
    free(buf);
    return rv;
}

int ctl_script_export(struct ctl_txn *t, Fgx__Ctl__Config *cfg, struct ctl_script_export *keep)
{
    uint32_t *ids = NULL;
    size_t n = 0;
    int rv;

    memset(keep, 0, sizeof(*keep));
    rv = ctl_store_script_ids(t, &ids, &n);
    if (rv < 0)
        return rv;
    keep->scripts = calloc(n ? n : 1, sizeof(*keep->scripts));
    if (!keep->scripts) {
        free(ids);
        return -ENOMEM;
    }
    for (size_t i = 0; i < n && rv == 0; i++) {
        rv = ctl_script_load(t, ids[i], &keep->scripts[keep->n]);
        if (rv == 0)
            keep->n++;
    }
    free(ids);
    if (rv < 0)
        return rv;
    cfg->n_scripts = keep->n;
    cfg->scripts = keep->scripts;
    return 0;
}

void ctl_script_export_release(struct ctl_script_export *keep)
{
    if (!keep)
        return;
    for (size_t i = 0; i < keep->n; i++)
        ctl_script_free(keep->scripts[i]);
    free(keep->scripts);
    memset(keep, 0, sizeof(*keep));
}

int ctl_script_check_proto(const Fgx__Ctl__Script *s, const struct ctl_service *svc, char *err,
                           size_t errlen)
{
    if (svc->ipproto != IPPROTO_UDP)
        return 0;
    for (size_t i = 0; i < s->n_functions; i++)
        for (size_t j = 0; j < s->functions[i]->n_params; j++)
            if (strcmp(s->functions[i]->params[j], "RawPacket") != 0) {
                fgx_err_set(err, errlen,
                        "service %s is UDP: function %s (line %u) takes %s, which needs a TCP "
                        "stream; on UDP a function takes RawPacket only (one datagram)",
                        svc->name, s->functions[i]->name, s->functions[i]->line,
                        s->functions[i]->params[j]);
                return -EINVAL;
            }
    return 0;
}

int ctl_script_import(struct ctl_txn *t, const Fgx__Ctl__Config *cfg, char *err, size_t errlen)
{
    int rv;

    /* A service the import keeps keeps its record, not its script: the file says whether it has
     * one (an import replaces the whole configuration). */
    for (size_t i = 0; i < cfg->n_services; i++) {
        rv = ctl_store_script_del(t, cfg->services[i]->id);
        if (rv < 0 && rv != -ENOENT) {
            fgx_err_set(err, errlen, "script of service %u: %s", cfg->services[i]->id,
                    ctl_store_strerror(rv));
            return rv;
        }
    }
    for (size_t i = 0; i < cfg->n_scripts; i++) {
        const Fgx__Ctl__Script *s = cfg->scripts[i];
        struct ctl_service svc;

        if (ctl_store_service_get(t, s->service_id, &svc) < 0) {
            fgx_err_set(err, errlen, "script of service %u: no such service in the file",
                    s->service_id);
            return -EINVAL;
        }
        if (!s->has_source || s->n_functions == 0) {
            fgx_err_set(err, errlen, "script of service %u: no source or no functions",
                    s->service_id);
            return -EINVAL;
        }
        rv = ctl_script_check_proto(s, &svc, err, errlen);
        if (rv < 0)
            return rv;
        rv = ctl_script_save(t, s);
        if (rv < 0) {
            fgx_err_set(err, errlen, "script of service %u: %s", s->service_id,
                    ctl_store_strerror(rv));
            return rv;
        }
    }
    return 0;
}

void ctl_script_reply_free(struct ctl_script_reply *sr)
{
    if (!sr)
        return;
    ctl_script_free(sr->script);
    for (size_t i = 0; sr->texts && i < sr->nentries * 3; i++)
        free(sr->texts[i]);
    free(sr->texts);
    free(sr->entries);
    free(sr->entry_ptrs);
    free(sr);
}

/* Which directions a model looks at: 1 client->server, 2 server->client, 3 both. A request
 * model reads the server's side too: only its 101 turns the client's bytes from requests into
 * the new protocol's stream (an Upgrade request the server answers 200 is followed by more
 * requests, which must not pass unjudged). */
static uint8_t model_dirs(const char *m)
{
    if (strncmp(m, "HttpRe", 6) == 0)
        return strncmp(m, "HttpRequest", 11) == 0 ? 3 : 2;
    if (strcmp(m, "HttpFullRequest") == 0)
        return 3;
    if (strcmp(m, "TCPInputStream") == 0)
        return 1;
    if (strcmp(m, "HttpFullResponse") == 0 || strcmp(m, "TCPOutputStream") == 0)
        return 2;
    return 3; /* RawPacket, HttpHistory, anything new */
}

int ctl_script_payload(struct ctl_txn *t, uint32_t service_id, struct fgx_blob *out,
                       uint32_t *deadline_ms, uint8_t *dirs)
{
    Fgx__Ctl__Script *s;
    size_t len = 2, n = 0;
    uint8_t *p;
    int rv;

    memset(out, 0, sizeof(*out));
    rv = ctl_script_load(t, service_id, &s);
    if (rv < 0)
        return rv;
    for (size_t i = 0; i < s->n_functions; i++)
        if (s->functions[i]->has_active && !s->functions[i]->active) {
            len += 2 + strlen(s->functions[i]->name);
            n++;
        }
    len += s->source.len;
    p = malloc(len);
    if (!p) {
        ctl_script_free(s);
        return -ENOMEM;
    }
    out->data = p;
    out->len = len;
    out->hash = fgx_hash64(s->source.data, s->source.len, 0);
    *p++ = (uint8_t)n;
    *p++ = (uint8_t)(n >> 8);
    for (size_t i = 0; i < s->n_functions; i++) {
        size_t k = strlen(s->functions[i]->name);

        if (!s->functions[i]->has_active || s->functions[i]->active)
            continue;
        *p++ = (uint8_t)k;
        *p++ = (uint8_t)(k >> 8);
        memcpy(p, s->functions[i]->name, k);
        p += k;
    }
    memcpy(p, s->source.data, s->source.len);
    *deadline_ms = s->has_deadline_ms ? s->deadline_ms : CTL_SCRIPT_DEADLINE_MS;
    /* A direction no active function looks at never goes to scriptworker. A function of
     * several parameters is called once all are there: it needs every direction they name. */
    *dirs = 0;
    for (size_t i = 0; i < s->n_functions; i++) {
        if (s->functions[i]->has_active && !s->functions[i]->active)
            continue;
        for (size_t j = 0; j < s->functions[i]->n_params; j++)
            *dirs |= model_dirs(s->functions[i]->params[j]);
        if (s->functions[i]->n_params == 0)
            *dirs |= 3; /* called for every chunk */
    }
    ctl_script_free(s);
    return 0;
}
