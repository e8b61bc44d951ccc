/* controld start-up: the configuration file, read before the options are parsed. Each line
 * becomes the command-line argument of the same name, put in front of the real ones; main.c's
 * one getopt pass then checks every value the same way whichever side gave it, and a bad value
 * is traced back to its line through ctl_conffile_origin(). */
#include "ctl_conffile.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static char *trim(char *s)
{
    char *end;

    while (isspace((unsigned char)*s))
        s++;
    end = s + strlen(s);
    while (end > s && isspace((unsigned char)end[-1]))
        *--end = '\0';
    return s;
}

static int parse_flag(const char *v, bool *out)
{
    static const char *const yes[] = {"true", "yes", "1", "on"};
    static const char *const no[] = {"false", "no", "0", "off"};

    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
        if (strcasecmp(v, yes[i]) == 0) {
            *out = true;
            return 0;
        }
        if (strcasecmp(v, no[i]) == 0) {
            *out = false;
            return 0;
        }
    }
    return -EINVAL;
}

static int add_arg(struct ctl_conffile *c, size_t *cap, char *arg, unsigned line)
{
    if ((size_t)c->argc + 2 > *cap) {
        size_t ncap = *cap ? *cap * 2 : 16;
        char **nargv = realloc(c->argv, ncap * sizeof(*nargv));
        unsigned *nline;

        if (!nargv) {
            free(arg);
            return -ENOMEM;
        }
        c->argv = nargv;
        nline = realloc(c->line, ncap * sizeof(*nline));
        if (!nline) {
            free(arg);
            return -ENOMEM;
        }
        c->line = nline;
        *cap = ncap;
    }
    c->argv[c->argc] = arg;
    c->line[c->argc] = line;
    c->argc++;
    c->argv[c->argc] = NULL;
    return 0;
}

static int add_copy(struct ctl_conffile *c, size_t *cap, const char *s, unsigned line)
{
    char *d = strdup(s);

    return d ? add_arg(c, cap, d, line) : -ENOMEM;
}

static int opt_index(const struct option *opts, const char *name)
{
    for (int i = 0; opts[i].name; i++)
        if (strcmp(opts[i].name, name) == 0)
            return i;
    return -1;
}

/* Which options the command line gives, and its --config FILE. getopt's state is reset
 * afterwards, so the caller's own pass starts afresh; its errors are left to that pass. */
static int scan_cmdline(const struct option *opts, int argc, char **argv, bool *given,
                        const char **config)
{
    char **copy = calloc((size_t)argc + 1, sizeof(*copy));
    int cfg = opt_index(opts, CTL_CONFFILE_OPTION), saved_opterr = opterr, idx;

    if (!copy)
        return -ENOMEM;
    memcpy(copy, argv, (size_t)argc * sizeof(*copy));
    opterr = 0;
    optind = 0;
    for (;;) {
        idx = -1;
        if (getopt_long(argc, copy, "-", opts, &idx) == -1)
            break;
        if (idx < 0)
            continue;
        given[idx] = true;
        if (idx == cfg)
            *config = optarg;
    }
    opterr = saved_opterr;
    optind = 0;
    free(copy);
    return 0;
}

static int read_file(const struct option *opts, const bool *given, FILE *f, struct ctl_conffile *c,
                     size_t *cap, char *err, size_t errlen)
{
    char *buf = NULL, *s, *eq, *key, *val, *arg;
    size_t bufcap = 0, alen;
    unsigned line = 0;
    int idx, rc = 0;
    bool on;

    while (getline(&buf, &bufcap, f) != -1) {
        line++;
        s = trim(buf);
        if (*s == '\0' || *s == '#')
            continue;
        eq = strchr(s, '=');
        if (!eq) {
            (void)snprintf(err, errlen, "%s:%u: expected 'key = value', not '%.100s'", c->path,
                           line, s);
            rc = -EINVAL;
            break;
        }
        *eq = '\0';
        key = trim(s);
        val = trim(eq + 1);
        idx = opt_index(opts, key);
        if (idx < 0) {
            (void)snprintf(err, errlen,
                           "%s:%u: unknown key '%.100s' (the keys are controld's long options, "
                           "see controld --help)",
                           c->path, line, key);
            rc = -EINVAL;
            break;
        }
        if (strcmp(key, CTL_CONFFILE_OPTION) == 0) {
            (void)snprintf(err, errlen, "%s:%u: '%s' names a file on the command line only",
                           c->path, line, key);
            rc = -EINVAL;
            break;
        }
        if (opts[idx].has_arg == no_argument) {
            if (parse_flag(val, &on) < 0) {
                (void)snprintf(err, errlen,
                               "%s:%u: '%s' is a flag: true or false (yes/no, 1/0), not '%.100s'",
                               c->path, line, key, val);
                rc = -EINVAL;
                break;
            }
            if (!on)
                continue;
        } else if (*val == '\0') {
            (void)snprintf(err, errlen, "%s:%u: '%s' needs a value", c->path, line, key);
            rc = -EINVAL;
            break;
        }
        if (given[idx]) /* the command line wins, for a repeatable option too */
            continue;
        alen = strlen(key) + strlen(val) + 4;
        arg = malloc(alen);
        if (!arg) {
            rc = -ENOMEM;
            break;
        }
        if (opts[idx].has_arg == no_argument)
            (void)snprintf(arg, alen, "--%s", key);
        else
            (void)snprintf(arg, alen, "--%s=%s", key, val);
        rc = add_arg(c, cap, arg, line);
        if (rc < 0)
            break;
    }
    if (rc == 0 && ferror(f)) {
        rc = -EIO;
        (void)snprintf(err, errlen, "cannot read %s", c->path);
    }
    if (rc == -ENOMEM)
        (void)snprintf(err, errlen, "out of memory reading %s", c->path);
    free(buf);
    return rc;
}

int ctl_conffile_load(const struct option *opts, int argc, char **argv, const char *default_path,
                      struct ctl_conffile *out, char *err, size_t errlen)
{
    const char *config = NULL, *path;
    size_t nopts = 0, cap = 0;
    bool *given;
    FILE *f = NULL;
    int rc;

    memset(out, 0, sizeof(*out));
    while (opts[nopts].name)
        nopts++;
    given = calloc(nopts + 1, sizeof(*given));
    if (!given) {
        (void)snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    rc = scan_cmdline(opts, argc, argv, given, &config);
    if (rc == 0)
        rc = add_copy(out, &cap, argc > 0 ? argv[0] : "controld", 0);
    if (rc < 0) {
        (void)snprintf(err, errlen, "out of memory");
        goto out;
    }
    path = config ? config : default_path;
    if (path && *path) {
        f = fopen(path, "re");
        if (!f && (config || errno != ENOENT)) {
            rc = -errno;
            (void)snprintf(err, errlen, "cannot read the configuration file %s: %s", path,
                           strerror(errno));
            goto out;
        }
    }
    if (f) {
        (void)snprintf(out->path, sizeof(out->path), "%s", path);
        rc = read_file(opts, given, f, out, &cap, err, errlen);
        if (rc < 0)
            goto out;
    }
    for (int i = 1; i < argc; i++) {
        rc = add_copy(out, &cap, argv[i], 0);
        if (rc < 0) {
            (void)snprintf(err, errlen, "out of memory");
            goto out;
        }
    }
out:
    if (f)
        (void)fclose(f);
    free(given);
    if (rc < 0)
        ctl_conffile_release(out);
    return rc;
}

void ctl_conffile_release(struct ctl_conffile *c)
{
    for (int i = 0; i < c->argc; i++)
        free(c->argv[i]);
    free(c->argv);
    free(c->line);
    c->argv = NULL;
    c->line = NULL;
    c->argc = 0;
}

const char *ctl_conffile_origin(const struct ctl_conffile *c, int i, char *buf, size_t len)
{
    const char *a;

    if (i < 0 || i >= c->argc || c->line[i] == 0)
        return NULL;
    a = c->argv[i] + 2; /* "--key=value" */
    (void)snprintf(buf, len, "%s line %u: %.*s = %s", c->path, c->line[i], (int)strcspn(a, "="), a,
                   strchr(a, '=') ? strchr(a, '=') + 1 : "true");
    return buf;
}
