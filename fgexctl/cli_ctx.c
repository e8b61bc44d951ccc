/* fgexctl contexts stage: the store of named controlds (cli_ctx.h). The file is JSON through
 * jansson, like everything else fgexctl reads, and is rewritten whole and atomically with mode
 * 0600 (cli_pin_write_file), since it names the --ca files and the hosts a team trusts. */
#include "cli_ctx.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cli_args.h"
#include "cli_json.h"
#include "cli_pin.h"

static const struct cli_ctx ctx_local = {
    .name = (char *)CLI_CTX_LOCAL, .url = (char *)CLI_DEFAULT_URL, .ca = NULL, .builtin = true};

bool cli_ctx_url_valid(const char *url)
{
    struct cli_pin_target t;
    unsigned port;

    if (strncmp(url, "ipc://", 6) == 0)
        return url[6] != '\0';
    if (cli_pin_target(url, &t) < 0)
        return false;
    return cli_args_port(t.port, &port) == 0;
}

int cli_ctx_name_check(const char *name, char *err, size_t errlen)
{
    size_t n = strlen(name);

    if (n == 0 || n > CLI_CTX_NAME_MAX) {
        (void)snprintf(err, errlen, "a context name has 1 to %d characters", CLI_CTX_NAME_MAX);
        return -EINVAL;
    }
    if (strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != n ||
        name[0] == '-' || name[0] == '.') {
        /* The name is a directory under contexts/ and a word of `-C a,b`. */
        (void)snprintf(err, errlen,
                       "invalid context name '%.80s': use letters, digits, '.', '_' and '-', not "
                       "first '-' or '.'",
                       name);
        return -EINVAL;
    }
    if (strcmp(name, CLI_CTX_ALL) == 0 || strcmp(name, CLI_CTX_LOCAL) == 0) {
        (void)snprintf(err, errlen, "'%s' is a reserved context name (%s)", name,
                       name[0] == 'a' ? "-C all means every context"
                                      : "the built-in context of the local socket");
        return -EINVAL;
    }
    return 0;
}

void cli_ctx_store_release(struct cli_ctx_store *s)
{
    for (size_t i = 0; i < s->n; i++) {
        free(s->v[i].name);
        free(s->v[i].url);
        free(s->v[i].ca);
    }
    free(s->v);
    free(s->current);
    memset(s, 0, sizeof(*s));
}

const struct cli_ctx *cli_ctx_find(const struct cli_ctx_store *s, const char *name)
{
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->v[i].name, name) == 0)
            return &s->v[i];
    if (strcmp(name, CLI_CTX_LOCAL) == 0)
        return &ctx_local;
    return NULL;
}

int cli_ctx_add(struct cli_ctx_store *s, const char *name, const char *url, const char *ca,
                bool replace)
{
    char why[160];
    struct cli_ctx *c = NULL, *nv;
    char *nname, *nurl, *nca = NULL;

    if (cli_ctx_name_check(name, why, sizeof(why)) < 0)
        return -EINVAL;
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->v[i].name, name) == 0)
            c = &s->v[i];
    if (c && !replace)
        return -EEXIST;
    nname = strdup(name);
    nurl = strdup(url);
    if (ca)
        nca = strdup(ca);
    if (!nname || !nurl || (ca && !nca))
        goto nomem;
    if (!c) {
        nv = realloc(s->v, (s->n + 1) * sizeof(*nv));
        if (!nv)
            goto nomem;
        s->v = nv;
        c = &s->v[s->n++];
        memset(c, 0, sizeof(*c));
    }
    free(c->name);
    free(c->url);
    free(c->ca);
    c->name = nname;
    c->url = nurl;
    c->ca = nca;
    return 0;
nomem:
    free(nname);
    free(nurl);
    free(nca);
    return -ENOMEM;
}

int cli_ctx_remove(struct cli_ctx_store *s, const char *name)
{
    for (size_t i = 0; i < s->n; i++) {
        if (strcmp(s->v[i].name, name) != 0)
            continue;
        free(s->v[i].name);
        free(s->v[i].url);
        free(s->v[i].ca);
        memmove(&s->v[i], &s->v[i + 1], (s->n - i - 1) * sizeof(s->v[0]));
        s->n--;
        if (s->current && strcmp(s->current, name) == 0) {
            free(s->current);
            s->current = NULL;
        }
        return 0;
    }
    return -ENOENT;
}

/* ---- the file ---------------------------------------------------------------------------- */

int cli_ctx_parse(const char *text, size_t len, struct cli_ctx_store *s, char *err, size_t errlen)
{
    json_t *doc = NULL, *arr, *cur, *fmt;
    char why[160];
    int rc = 0;

    memset(s, 0, sizeof(*s));
    rc = cli_json_load(text, len, &doc, err, errlen);
    if (rc < 0)
        return rc;
    if (!json_is_object(doc)) {
        rc = (snprintf(err, errlen, "the document is not a JSON object"), -EINVAL);
        goto out;
    }
    fmt = json_object_get(doc, "format");
    if (fmt && (!json_is_string(fmt) || strcmp(json_string_value(fmt), CLI_CTX_FORMAT) != 0)) {
        rc = (snprintf(err, errlen, "\"format\" is not \"" CLI_CTX_FORMAT "\""), -EINVAL);
        goto out;
    }
    arr = json_object_get(doc, "contexts");
    if (arr && !json_is_array(arr)) {
        rc = (snprintf(err, errlen, "\"contexts\" is not an array"), -EINVAL);
        goto out;
    }
    for (size_t i = 0; arr && i < json_array_size(arr); i++) {
        const json_t *c = json_array_get(arr, i);
        const json_t *n = json_object_get(c, "name"), *u = json_object_get(c, "url");
        const json_t *ca = json_object_get(c, "ca");

        if (!json_is_object(c) || !json_is_string(n) || !json_is_string(u) ||
            (ca && !json_is_null(ca) && !json_is_string(ca))) {
            rc = (snprintf(err, errlen, "contexts[%zu] needs a string \"name\" and \"url\"", i),
                  -EINVAL);
            goto out;
        }
        if (cli_ctx_name_check(json_string_value(n), why, sizeof(why)) < 0) {
            rc = (snprintf(err, errlen, "contexts[%zu]: %s", i, why), -EINVAL);
            goto out;
        }
        if (!cli_ctx_url_valid(json_string_value(u))) {
            rc = (snprintf(err, errlen, "contexts[%zu]: invalid URL '%.200s'", i,
                           json_string_value(u)),
                  -EINVAL);
            goto out;
        }
        rc = cli_ctx_add(s, json_string_value(n), json_string_value(u),
                         json_is_string(ca) ? json_string_value(ca) : NULL, false);
        if (rc == -EEXIST) {
            rc = (snprintf(err, errlen, "contexts[%zu]: the name '%s' is used twice", i,
                           json_string_value(n)),
                  -EINVAL);
            goto out;
        }
        if (rc < 0)
            goto out;
    }
    cur = json_object_get(doc, "current");
    if (cur && !json_is_null(cur)) {
        if (!json_is_string(cur) || !cli_ctx_find(s, json_string_value(cur))) {
            rc = (snprintf(err, errlen, "\"current\" names no context"), -EINVAL);
            goto out;
        }
        s->current = strdup(json_string_value(cur));
        if (!s->current)
            rc = -ENOMEM;
    }
out:
    json_decref(doc);
    if (rc < 0)
        cli_ctx_store_release(s);
    return rc;
}

char *cli_ctx_format(const struct cli_ctx_store *s)
{
    json_t *arr = json_array(), *doc;
    char *text = NULL;
    size_t len = 0;
    FILE *f;

    if (!arr)
        return NULL;
    for (size_t i = 0; i < s->n; i++) {
        json_t *c = json_pack("{s:o, s:o}", "name", cli_json_str(s->v[i].name), "url",
                              cli_json_str(s->v[i].url));

        if (c && s->v[i].ca && json_object_set_new(c, "ca", cli_json_str(s->v[i].ca)) < 0) {
            json_decref(c);
            c = NULL;
        }
        if (!c || json_array_append_new(arr, c) < 0) {
            json_decref(arr);
            return NULL;
        }
    }
    doc = json_pack("{s:s, s:o, s:o}", "format", CLI_CTX_FORMAT, "current",
                    cli_json_str_or_null(s->current), "contexts", arr);
    if (!doc)
        return NULL;
    f = open_memstream(&text, &len);
    if (!f) {
        json_decref(doc);
        return NULL;
    }
    if (cli_json_print(f, doc, true) < 0 || fclose(f) == EOF) {
        free(text);
        return NULL;
    }
    return text;
}

int cli_ctx_file_path(char *buf, size_t len)
{
    char dir[PATH_MAX];
    int rc = cli_pin_base_dir(dir, sizeof(dir));

    if (rc < 0)
        return rc;
    return snprintf(buf, len, "%s/" CLI_CTX_FILE, dir) >= (int)len ? -ENAMETOOLONG : 0;
}

int cli_ctx_dir_path(const char *name, char *buf, size_t len)
{
    char dir[PATH_MAX];
    int rc = cli_pin_base_dir(dir, sizeof(dir));

    if (rc < 0)
        return rc;
    return snprintf(buf, len, "%s/contexts/%s", dir, name) >= (int)len ? -ENAMETOOLONG : 0;
}

int cli_ctx_load(struct cli_ctx_store *s, char *err, size_t errlen)
{
    char path[PATH_MAX], why[512], *text = NULL;
    size_t len;
    int rc;

    memset(s, 0, sizeof(*s));
    rc = cli_ctx_file_path(path, sizeof(path));
    if (rc < 0) {
        (void)snprintf(err, errlen, "no place for contexts: set $HOME or $FGEX_CONFIG_DIR");
        return rc;
    }
    rc = cli_pin_read_file(path, CLI_PIN_FILE_MAX, &text, &len);
    if (rc == -ENOENT)
        return 0;
    if (rc < 0) {
        (void)snprintf(err, errlen, "cannot read %s: %s", path, strerror(-rc));
        return rc;
    }
    rc = cli_ctx_parse(text, len, s, why, sizeof(why));
    free(text);
    if (rc == -EINVAL)
        (void)snprintf(err, errlen, "%s: %s (fix or remove the file)", path, why);
    else if (rc < 0)
        (void)snprintf(err, errlen, "cannot read %s: %s", path, strerror(-rc));
    return rc;
}

int cli_ctx_save(const struct cli_ctx_store *s, char *err, size_t errlen)
{
    char path[PATH_MAX], *text;
    int rc = cli_ctx_file_path(path, sizeof(path));

    if (rc < 0) {
        (void)snprintf(err, errlen, "no place for contexts: set $HOME or $FGEX_CONFIG_DIR");
        return rc;
    }
    text = cli_ctx_format(s);
    if (!text) {
        (void)snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    rc = cli_pin_write_file(path, text, strlen(text));
    free(text);
    if (rc < 0)
        (void)snprintf(err, errlen, "cannot write %s: %s", path, strerror(-rc));
    return rc;
}

/* ---- choosing ---------------------------------------------------------------------------- */

int cli_ctx_select(const struct cli_ctx_store *s, const char *spec, const struct cli_ctx ***out,
                   size_t *n, char *err, size_t errlen)
{
    const struct cli_ctx **v;
    size_t k = 0, cap = 1, unknown = 0;
    char missing[256] = "";
    const char *p;

    for (p = spec; *p; p++)
        cap += *p == ',';
    if (strcmp(spec, CLI_CTX_ALL) == 0)
        cap = s->n ? s->n : 1;
    v = calloc(cap, sizeof(const struct cli_ctx *));
    if (!v)
        return -ENOMEM;
    if (strcmp(spec, CLI_CTX_ALL) == 0) {
        if (s->n == 0) {
            free(v);
            (void)snprintf(err, errlen,
                           "-C all: no context is defined (add one with `fgexctl context add "
                           "NAME URL`)");
            return -ENOENT;
        }
        for (size_t i = 0; i < s->n; i++)
            v[k++] = &s->v[i];
        goto done;
    }
    for (p = spec;;) {
        size_t len = strcspn(p, ","), used;
        char name[CLI_CTX_NAME_MAX + 2];
        const struct cli_ctx *c;
        bool dup = false;

        if (len == 0 || len > CLI_CTX_NAME_MAX) {
            free(v);
            (void)snprintf(err, errlen, "-C '%.100s': %s", spec,
                           len ? "a context name is too long" : "an empty context name");
            return -EINVAL;
        }
        memcpy(name, p, len);
        name[len] = '\0';
        if (strcmp(name, CLI_CTX_ALL) == 0) {
            free(v);
            (void)snprintf(err, errlen, "-C '%.100s': 'all' stands alone", spec);
            return -EINVAL;
        }
        c = cli_ctx_find(s, name);
        if (!c) {
            used = strlen(missing);
            if (used + len + 3 < sizeof(missing))
                (void)snprintf(missing + used, sizeof(missing) - used, "%s%s", unknown ? ", " : "",
                               name);
            unknown++;
        }
        for (size_t j = 0; c && j < k; j++)
            dup |= v[j] == c;
        if (c && !dup)
            v[k++] = c;
        p += len;
        if (*p == '\0')
            break;
        p++;
    }
    if (unknown) {
        free(v);
        (void)snprintf(err, errlen, "no such context%s: %s (see `fgexctl context list`)",
                       unknown > 1 ? "s" : "", missing);
        return -ENOENT;
    }
done:
    *out = v;
    *n = k;
    return 0;
}

int cli_ctx_apply(struct cli_cmd *cmd, const struct cli_ctx *c)
{
    char dir[PATH_MAX];
    int rc;

    cmd->url = c->url;
    cmd->ctx_name = c->builtin ? NULL : c->name;
    if (!cmd->ca)
        cmd->ca = c->ca;
    if (c->builtin)
        return cli_pin_dir_set(NULL);
    rc = cli_ctx_dir_path(c->name, dir, sizeof(dir));
    if (rc == 0)
        rc = cli_pin_dir_set(dir);
    return rc;
}
