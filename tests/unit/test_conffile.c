/* Unit tests for controld/ctl_conffile.c: every option of a getopt table is a key, the file's
 * lines become arguments in front of the command line's (which win, for repeatable options
 * too), flags take true/false, and a bad line is refused naming the file and the line. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "controld/ctl_conffile.h"

/* The shapes of controld's table: values, flags, a repeatable option, and --config. */
static const struct option opts[] = {
    {"state-dir", required_argument, NULL, 's'},
    {"threads", required_argument, NULL, 't'},
    {"foreground", no_argument, NULL, 'f'},
    {"allow", required_argument, NULL, 'A'},
    {"local-auth", no_argument, NULL, 'a'},
    {"config", required_argument, NULL, 'c'},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

static char path[64];

static void write_conf(const char *text)
{
    FILE *f;

    (void)snprintf(path, sizeof(path), "/tmp/fgx-conffile-%d.conf", (int)getpid());
    f = fopen(path, "w");
    cr_assert_not_null(f);
    cr_assert_eq(fputs(text, f) >= 0, true);
    cr_assert_eq(fclose(f), 0);
}

static void cleanup(void)
{
    if (path[0])
        (void)unlink(path);
}

/* out's arguments after argv[0], " "-joined. */
static void joined(const struct ctl_conffile *c, char *buf, size_t len)
{
    size_t off = 0;

    buf[0] = '\0';
    for (int i = 1; i < c->argc; i++)
        off += (size_t)snprintf(buf + off, len - off, "%s%s", i > 1 ? " " : "", c->argv[i]);
    cr_assert_null(c->argv[c->argc]);
}

static int load(int argc, char **argv, struct ctl_conffile *c, char *err, size_t errlen)
{
    return ctl_conffile_load(opts, argc, argv, "/nonexistent/fgex/controld.conf", c, err, errlen);
}

TestSuite(conffile, .fini = cleanup);

Test(conffile, every_option_is_a_key)
{
    char text[1024] = "", got[1024], want[1024] = "", err[256];
    char *argv[] = {"controld", "--config", path, NULL};
    struct ctl_conffile c;
    size_t off = 0, woff = 0;

    (void)snprintf(path, sizeof(path), "/tmp/fgx-conffile-%d.conf", (int)getpid());
    /* Generated from the table, as controld's keys are: none is listed by hand. */
    for (int i = 0; opts[i].name; i++) {
        if (strcmp(opts[i].name, CTL_CONFFILE_OPTION) == 0)
            continue;
        if (opts[i].has_arg == no_argument) {
            off += (size_t)snprintf(text + off, sizeof(text) - off, "%s = true\n", opts[i].name);
            woff += (size_t)snprintf(want + woff, sizeof(want) - woff, "--%s ", opts[i].name);
        } else {
            off += (size_t)snprintf(text + off, sizeof(text) - off, "%s = v%d\n", opts[i].name, i);
            woff +=
                (size_t)snprintf(want + woff, sizeof(want) - woff, "--%s=v%d ", opts[i].name, i);
        }
    }
    (void)snprintf(want + woff, sizeof(want) - woff, "--config %s", path);
    write_conf(text);
    cr_assert_eq(load(3, argv, &c, err, sizeof(err)), 0, "%s", err);
    joined(&c, got, sizeof(got));
    cr_assert_str_eq(got, want);
    cr_assert_str_eq(c.path, path);
    ctl_conffile_release(&c);
}

Test(conffile, comments_blanks_spaces_and_flags)
{
    char got[512], err[256];
    char *argv[] = {"controld", "--config", path, NULL};
    struct ctl_conffile c;

    write_conf("# fgex\n"
               "\n"
               "   state-dir   =   /var/lib/my fgex  \n"
               "\t# indented comment\n"
               "foreground = no\n"
               "local-auth=YES\n"
               "allow = 10.0.0.0/8\n"
               "allow = fd00::/64\n"
               "threads = 1\n"
               "threads = 2\n");
    cr_assert_eq(load(3, argv, &c, err, sizeof(err)), 0, "%s", err);
    joined(&c, got, sizeof(got));
    /* false leaves the flag out; repeated keys stay in order (getopt: the last one wins). */
    {
        char want[512];

        (void)snprintf(want, sizeof(want),
                       "--state-dir=/var/lib/my fgex --local-auth --allow=10.0.0.0/8 "
                       "--allow=fd00::/64 --threads=1 --threads=2 --config %s",
                       path);
        cr_assert_str_eq(got, want);
    }
    /* Lines are traced back for error messages; the command line's are not. */
    cr_assert_eq(c.line[1], 3);
    cr_assert_eq(c.line[6], 10);
    cr_assert_eq(c.line[7], 0);
    {
        char buf[256];

        cr_assert_not_null(ctl_conffile_origin(&c, 6, buf, sizeof(buf)));
        cr_assert(strstr(buf, " line 10: threads = 2"), "%s", buf);
        cr_assert_not_null(ctl_conffile_origin(&c, 2, buf, sizeof(buf)));
        cr_assert(strstr(buf, " line 6: local-auth = true"), "%s", buf);
        cr_assert_null(ctl_conffile_origin(&c, 7, buf, sizeof(buf)));
    }
    ctl_conffile_release(&c);
}

Test(conffile, the_command_line_wins)
{
    char got[512], want[512], err[256];
    char *argv[] = {"controld", "--threads", "8", "--config", path, "--allow=192.0.2.0/24",
                    "--fore",   NULL};
    struct ctl_conffile c;

    write_conf("threads = 2\n"
               "allow = 10.0.0.0/8\n"
               "allow = fd00::/64\n"
               "state-dir = /srv/fgex\n"
               "foreground = true\n");
    cr_assert_eq(load(7, argv, &c, err, sizeof(err)), 0, "%s", err);
    joined(&c, got, sizeof(got));
    /* threads and both allow lines give way to the command line's (an abbreviation counts);
     * state-dir, which it does not give, stays. */
    (void)snprintf(want, sizeof(want),
                   "--state-dir=/srv/fgex --threads 8 --config %s --allow=192.0.2.0/24 --fore",
                   path);
    cr_assert_str_eq(got, want);
    ctl_conffile_release(&c);
    /* getopt's state is left for the caller's own pass. */
    cr_assert_eq(optind, 0);
}

Test(conffile, a_bad_line_is_refused_with_its_line)
{
    static const struct {
        const char *text, *msg;
    } cases[] = {
        {"threads = 2\n# ok\nthreds = 3\n", ":3: unknown key 'threds'"},
        {"\n\nforeground = maybe\n", ":3: 'foreground' is a flag"},
        {"threads =\n", ":1: 'threads' needs a value"},
        {"state-dir /srv\n", ":1: expected 'key = value'"},
        {"config = /etc/other.conf\n", ":1: 'config' names a file on the command line only"},
        {"= 3\n", ":1: unknown key ''"},
    };
    char *argv[] = {"controld", "--config", path, NULL};
    struct ctl_conffile c;
    char err[256];

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        write_conf(cases[i].text);
        err[0] = '\0';
        cr_assert_eq(load(3, argv, &c, err, sizeof(err)), -EINVAL, "case %zu", i);
        cr_assert(strstr(err, path) && strstr(err, cases[i].msg), "case %zu: %s", i, err);
        cr_assert_null(c.argv, "case %zu", i);
    }
}

Test(conffile, a_missing_default_is_fine_a_missing_config_is_not)
{
    char *none[] = {"controld", "--threads", "2", NULL};
    char *named[] = {"controld", "--config", "/nonexistent/fgex/other.conf", NULL};
    struct ctl_conffile c;
    char got[128], err[256];

    cr_assert_eq(load(3, none, &c, err, sizeof(err)), 0, "%s", err);
    joined(&c, got, sizeof(got));
    cr_assert_str_eq(got, "--threads 2");
    cr_assert_str_eq(c.path, "");
    ctl_conffile_release(&c);

    cr_assert_eq(load(3, named, &c, err, sizeof(err)), -ENOENT);
    cr_assert(strstr(err, "/nonexistent/fgex/other.conf"), "%s", err);
    /* The default is read when present. */
    write_conf("threads = 4\n");
    cr_assert_eq(ctl_conffile_load(opts, 1, none, path, &c, err, sizeof(err)), 0, "%s", err);
    joined(&c, got, sizeof(got));
    cr_assert_str_eq(got, "--threads=4");
    ctl_conffile_release(&c);
}
