/* fgexctl, the regex family: `regex test`, offline. The regex is judged and compiled by
 * libcommon's filter path (fgx/regex_test.h), the very code controld runs for `filter add`, so
 * a refusal reads the same and a regex that matches here matches there; the bytes come from a
 * file or stdin, and no controld is asked. */
#include "cmd.h"

#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "cli_fmt.h"
#include "cli_json.h"
#include "fgx/regex_test.h"

/* Exit statuses, as grep's: a script tells a match from none from a failure. */
enum { RT_MATCH = 0, RT_NOMATCH = 1, RT_FAIL = 2 };

#define RT_READ 65536

/* clang-format off */
static const char usage_regex[] =
    "usage: fgexctl regex COMMAND ...\n"
    "\n"
    "Commands:\n"
    "  test REGEX [--nocase] [--dir c2s|s2c|both] [--proto tcp|udp] FILE|-\n"
    "\n"
    "`fgexctl regex test --help` for details.\n";

static const char usage_regex_test[] =
    "usage: fgexctl regex test REGEX [--nocase] [--dir c2s|s2c|both] [--proto tcp|udp] FILE|-\n"
    "\n"
    "Try a regex on bytes before adding it, offline (no controld needed): the regex is\n"
    "judged and compiled exactly as `filter add` does it (the same flags, the same\n"
    "refusals and warnings in the same words), then FILE's bytes (- for stdin) are\n"
    "scanned as one direction of a TCP connection (stream mode, the default), or with\n"
    "--proto udp as one datagram (block mode, at most 65507 bytes). A filter acts on\n"
    "its first match in a stream, so that is the match shown: the offset where it ends\n"
    "and the bytes around it (up to 64 before and 32 after, as an event shows them).\n"
    "--dir is accepted as `filter add` takes it and only echoed: the input is the bytes\n"
    "of one direction.\n"
    "\n"
    "Exit status: 0 it matched, 1 it did not, 2 the regex is refused or the input\n"
    "cannot be read (or a usage error).\n"
    "\n"
    "--json prints {matched, bytes, proto, dir, nocase, regex (or regex_b64),\n"
    "warnings, and when it matched: end, excerpt (or excerpt_b64), excerpt_hex,\n"
    "match_end}; a refused regex prints its reason on stderr only.\n";
/* clang-format on */

static int build_regex_test(struct cli_cmd *cmd, const struct cli_cmd_def *spec,
                            const struct cli_args_raw *raw)
{
    const char *v;
    int rc;

    (void)spec;
    /* A usage error exits 2 like every failure of this command. */
    if (!raw->pos[0] || raw->pos[0][0] == '\0')
        return cli_args_fail(cmd, RT_FAIL, "regex test: the regex is empty");
    if (!raw->pos[1] || raw->pos[1][0] == '\0')
        return cli_args_fail(cmd, RT_FAIL, "regex test: the file name is empty");
    cmd->rtest.regex = raw->pos[0];
    cmd->file = raw->pos[1];
    cmd->rtest.nocase = cli_args_opt(raw, CLI_OPT_NOCASE) != NULL;
    cmd->rtest.dir = FGX__CTL__DIR__DIR_BOTH;
    if ((v = cli_args_opt(raw, CLI_OPT_DIR))) {
        rc = cli_args_parse_dir(cmd, v, &cmd->rtest.dir);
        if (rc < 0) {
            cmd->exit_code = RT_FAIL;
            return rc;
        }
    }
    if ((v = cli_args_opt(raw, CLI_OPT_PROTO))) {
        Fgx__Ctl__Proto p;

        rc = cli_args_parse_proto(cmd, v, &p);
        if (rc < 0) {
            cmd->exit_code = RT_FAIL;
            return rc;
        }
        cmd->rtest.udp = p == FGX__CTL__PROTO__PROTO_UDP;
    }
    return 0;
}

static void say(FILE *err, const char *what, const char *msg)
{
    char line[1024];

    cli_fmt_escape(msg, line, sizeof(line));
    (void)fprintf(err, "%s" CLI_PROG ":%s %s%s\n", cli_fmt_paint(CLI_COLOR_ERR),
                  cli_fmt_paint(CLI_COLOR_OFF), what, line);
}

/* Feed the whole input to rt. Returns 0, or -1 with the reason said on err. */
static int feed_input(struct fgx_regex_test *rt, const char *file, bool udp, FILE *err)
{
    FILE *in = strcmp(file, "-") == 0 ? stdin : fopen(file, "rb");
    uint8_t *buf = malloc(udp ? FGX_REGEX_TEST_DGRAM_MAX + 1 : RT_READ);
    char why[512];
    int ret = -1;

    if (!in) {
        (void)snprintf(why, sizeof(why), "cannot open %s: %s", file, strerror(errno));
        say(err, "", why);
        free(buf);
        return -1;
    }
    if (!buf) {
        say(err, "", "out of memory");
        goto out;
    }
    if (udp) {
        size_t n = fread(buf, 1, FGX_REGEX_TEST_DGRAM_MAX + 1, in);

        if (ferror(in))
            goto read_err;
        if (fgx_regex_test_feed(rt, buf, n, why, sizeof(why)) < 0) {
            say(err, "", why);
            goto out;
        }
        ret = 0;
        goto out;
    }
    for (;;) {
        size_t n = fread(buf, 1, RT_READ, in);

        if (n > 0 && fgx_regex_test_feed(rt, buf, n, why, sizeof(why)) < 0) {
            say(err, "", why);
            goto out;
        }
        if (n < RT_READ) {
            if (ferror(in))
                goto read_err;
            break;
        }
    }
    ret = 0;
    goto out;
read_err:
    (void)snprintf(why, sizeof(why), "cannot read %s: %s", file, strerror(errno));
    say(err, "", why);
out:
    free(buf);
    if (in != stdin)
        (void)fclose(in);
    return ret;
}

static void hex_dump(FILE *f, const uint8_t *b, size_t n, size_t mark)
{
    for (size_t off = 0; off < n; off += 16) {
        (void)fprintf(f, "  %04zx ", off);
        for (size_t i = off; i < off + 16; i++) {
            if (i < n)
                (void)fprintf(f, "%c%02x", i == mark ? '|' : ' ', b[i]);
            else
                (void)fputs("   ", f);
        }
        (void)fputs("  ", f);
        for (size_t i = off; i < off + 16 && i < n; i++)
            (void)fputc(b[i] >= 0x20 && b[i] < 0x7f ? b[i] : '.', f);
        (void)fputc('\n', f);
    }
}

static int print_human(FILE *out, const struct cli_cmd *cmd, const struct fgx_regex_test *rt,
                       const struct fgx_regex_test_match *m)
{
    char *esc;

    if (!m->matched) {
        (void)fprintf(out, "no match in %" PRIu64 " bytes (%s)\n", fgx_regex_test_bytes(rt),
                      cmd->rtest.udp ? "one UDP datagram" : "one TCP stream");
        return 0;
    }
    (void)fprintf(out, "match: ends at offset %" PRIu64 " of %" PRIu64 " bytes (%s)\n", m->end,
                  fgx_regex_test_bytes(rt), cmd->rtest.udp ? "one UDP datagram" : "one TCP stream");
    esc = cli_fmt_escape_bytes_dup(m->excerpt, m->excerpt_len);
    if (!esc)
        return -ENOMEM;
    (void)fprintf(out, "excerpt: %s\n", esc);
    free(esc);
    (void)fprintf(out, "the match ends before excerpt byte %zu (marked |):\n", m->match_end);
    hex_dump(out, m->excerpt, m->excerpt_len, m->match_end);
    return 0;
}

static json_t *result_json(const struct cli_cmd *cmd, const struct fgx_regex_test *rt,
                           const struct fgx_regex_test_match *m,
                           const struct fgx_pattern_warnings *w)
{
    static const char hexd[] = "0123456789abcdef";
    json_t *o =
        json_pack("{s:b, s:I, s:s, s:s, s:b}", "matched", m->matched, "bytes",
                  cli_json_int(fgx_regex_test_bytes(rt)), "proto", cmd->rtest.udp ? "udp" : "tcp",
                  "dir", cli_fmt_dir_name(cmd->rtest.dir), "nocase", cmd->rtest.nocase);
    json_t *wa = json_array();
    char h[2 * sizeof(m->excerpt) + 1];

    if (!o || !wa || cli_json_set_bytes(o, "regex", cmd->rtest.regex, strlen(cmd->rtest.regex)) < 0)
        goto fail;
    for (size_t i = 0; i < w->n; i++)
        if (json_array_append_new(wa, cli_json_str(w->text[i])) < 0)
            goto fail;
    if (json_object_set_new(o, "warnings", wa) < 0) {
        wa = NULL;
        goto fail;
    }
    wa = NULL;
    if (m->matched) {
        for (size_t i = 0; i < m->excerpt_len; i++) {
            h[2 * i] = hexd[m->excerpt[i] >> 4];
            h[2 * i + 1] = hexd[m->excerpt[i] & 0xf];
        }
        h[2 * m->excerpt_len] = '\0';
        if (json_object_set_new(o, "end", json_integer((json_int_t)m->end)) < 0 ||
            cli_json_set_bytes(o, "excerpt", m->excerpt, m->excerpt_len) < 0 ||
            json_object_set_new(o, "excerpt_hex", json_string(h)) < 0 ||
            json_object_set_new(o, "match_end", json_integer((json_int_t)m->match_end)) < 0)
            goto fail;
    }
    return o;
fail:
    json_decref(wa);
    json_decref(o);
    return NULL;
}

int cli_cmd_offline_run(const struct cli_cmd *cmd, FILE *out, FILE *err)
{
    struct fgx_pattern_warnings w;
    struct fgx_regex_test_match m;
    struct fgx_regex_test *rt = NULL;
    char why[1024];
    int status = RT_FAIL, rc;

    rc = fgx_regex_test_new(cmd->rtest.regex, cmd->rtest.nocase,
                            cmd->rtest.udp ? IPPROTO_UDP : IPPROTO_TCP, &w, why, sizeof(why), &rt);
    if (rc < 0) {
        /* The words controld replies to `filter add` with, printed as fgexctl prints those. */
        say(err, "", why);
        return RT_FAIL;
    }
    for (size_t i = 0; i < w.n; i++) {
        char line[512];

        cli_fmt_escape(w.text[i], line, sizeof(line));
        (void)fprintf(err, "%s" CLI_PROG ": warning:%s %s\n", cli_fmt_paint(CLI_COLOR_WARN),
                      cli_fmt_paint(CLI_COLOR_OFF), line);
    }
    if (feed_input(rt, cmd->file, cmd->rtest.udp, err) < 0)
        goto out;
    fgx_regex_test_result(rt, &m);
    if (cmd->json)
        rc = cli_json_print(out, result_json(cmd, rt, &m, &w), false);
    else
        rc = print_human(out, cmd, rt, &m);
    if (rc < 0 || fflush(out) == EOF || ferror(out)) {
        say(err, "", "cannot write the output");
        goto out;
    }
    status = m.matched ? RT_MATCH : RT_NOMATCH;
out:
    fgx_regex_test_free(rt);
    return status;
}

static const struct cli_cmd_def regex_cmds[] = {
    {.group = "regex",
     .name = "test",
     .npos = 2,
     .pos_names = {"REGEX", "FILE"},
     .opts = CLI_OPT_NOCASE | CLI_OPT_DIR | CLI_OPT_PROTO,
     .usage = usage_regex_test,
     .build = build_regex_test,
     .flags = CLI_CMD_OFFLINE},
    {.name = NULL},
};

const struct cli_cmd_family cli_cmd_regex = {
    .group = "regex", .usage = usage_regex, .cmds = regex_cmds};
