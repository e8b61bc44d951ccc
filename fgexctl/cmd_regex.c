/* fgexctl, the regex family: `regex match` (every match of several patterns in a sample, by
 * controld's hyperscan: rpc_regex.c) and `regex test`, offline. The regex is judged and compiled by
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
    "  match PATTERNS FILE|- [--nocase] [--proto tcp|udp]\n"
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
static const char usage_regex_match[] =
    "usage: fgexctl regex match PATTERNS FILE|- [--nocase] [--proto tcp|udp]\n"
    "\n"
    "Every match of several patterns in a sample, with where each starts and ends (the\n"
    "page's pattern tester). PATTERNS is one or more regexes, one per line (at most\n"
    "16; a pattern's own (?i) makes it case-insensitive alone). controld judges each as\n"
    "`filter add` would for a service of --proto (default tcp), so a pattern it would\n"
    "refuse shows that error, and the others still run; then it scans FILE's bytes (-\n"
    "for stdin; at most 1 MiB) with hyperscan, as a filter's flags do but reporting\n"
    "every match, not just the first: one line per pattern with its matches as\n"
    "START-END byte offsets (END just past the last byte; at most 1000 a pattern).\n"
    "hyperscan reports each end at which a match ends, with the leftmost start for it:\n"
    "`a+` over \"aaa\" is 0-1, 0-2 and 0-3.\n"
    "\n"
    "--json prints an array, one object a pattern: {regex, error} or {regex, matches:\n"
    "[{start, end}], truncated, start_unknown, warnings}.\n";
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

static int build_regex_match(struct cli_cmd *cmd, const struct cli_cmd_def *spec,
                             const struct cli_args_raw *raw)
{
    Fgx__Ctl__RegexMatch *m = &cmd->m.regex_match.m;
    char *t = cmd->m.regex_match.text;
    const char *v;
    size_t len;
    int rc;

    fgx__ctl__regex_match__init(m);
    if (!raw->pos[0] || raw->pos[0][0] == '\0')
        return cli_args_fail(cmd, CLI_EXIT_INVALID, "regex match: no pattern");
    if (!raw->pos[1] || raw->pos[1][0] == '\0')
        return cli_args_fail(cmd, CLI_EXIT_INVALID, "regex match: the file name is empty");
    len = strlen(raw->pos[0]);
    if (len >= sizeof(cmd->m.regex_match.text))
        return cli_args_fail(cmd, CLI_EXIT_INVALID, "regex match: the patterns are longer than %zu "
                             "bytes", sizeof(cmd->m.regex_match.text) - 1);
    memcpy(t, raw->pos[0], len + 1);
    /* one a line; blank lines (a trailing newline) are no pattern */
    for (char *line = t, *nl; line; line = nl) {
        nl = strchr(line, '\n');
        if (nl)
            *nl++ = '\0';
        if (line[0] != '\0' && strcmp(line, "\r") != 0) {
            size_t l = strlen(line);

            if (l > 0 && line[l - 1] == '\r')
                line[l - 1] = '\0';
            if (m->n_regex == 16)
                return cli_args_fail(cmd, CLI_EXIT_INVALID, "regex match: at most 16 patterns");
            cmd->m.regex_match.regex[m->n_regex++] = line;
        }
    }
    if (m->n_regex == 0)
        return cli_args_fail(cmd, CLI_EXIT_INVALID, "regex match: no pattern");
    m->regex = cmd->m.regex_match.regex;
    cmd->file = raw->pos[1];
    if (cli_args_opt(raw, CLI_OPT_NOCASE))
        m->has_nocase = m->nocase = 1;
    if ((v = cli_args_opt(raw, CLI_OPT_PROTO))) {
        rc = cli_args_parse_proto(cmd, v, &m->proto);
        if (rc < 0)
            return rc;
        m->has_proto = 1;
    }
    (void)spec;
    cmd->req.regex_match = m;
    return 0;
}

static json_t *json_match(const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep)
{
    json_t *a = json_array();

    (void)req;
    for (size_t i = 0; a && i < rep->n_regex_match; i++) {
        const Fgx__Ctl__RegexMatchResult *r = rep->regex_match[i];
        json_t *o = json_object(), *ms = json_array(), *ws = json_array();

        if (!o || !ms || !ws) {
            json_decref(o);
            json_decref(ms);
            json_decref(ws);
            continue;
        }
        (void)json_object_set_new(o, "regex", cli_json_str(r->regex));
        if (r->error) {
            (void)json_object_set_new(o, "error", cli_json_str(r->error));
            json_decref(ms);
            json_decref(ws);
        } else {
            for (size_t k = 0; k < r->n_matches; k++)
                (void)json_array_append_new(ms, json_pack("{s:I,s:I}", "start",
                                                          (json_int_t)r->matches[k]->start, "end",
                                                          (json_int_t)r->matches[k]->end));
            for (size_t k = 0; k < r->n_warnings; k++)
                (void)json_array_append_new(ws, cli_json_str(r->warnings[k]));
            (void)json_object_set_new(o, "matches", ms);
            (void)json_object_set_new(o, "truncated", json_boolean(r->truncated));
            (void)json_object_set_new(o, "start_unknown", json_boolean(r->start_unknown));
            (void)json_object_set_new(o, "warnings", ws);
        }
        (void)json_array_append_new(a, o);
    }
    return a;
}

static int human_match(FILE *f, const Fgx__Ctl__Request *req, const Fgx__Ctl__Reply *rep)
{
    (void)req;
    for (size_t i = 0; i < rep->n_regex_match; i++) {
        const Fgx__Ctl__RegexMatchResult *r = rep->regex_match[i];

        (void)fprintf(f, "%s\n", r->regex);
        if (r->error) {
            (void)fprintf(f, "    error: %s\n", r->error);
            continue;
        }
        for (size_t k = 0; k < r->n_warnings; k++)
            (void)fprintf(f, "    warning: %s\n", r->warnings[k]);
        (void)fprintf(f, "    %zu match%s%s%s", r->n_matches, r->n_matches == 1 ? "" : "es",
                      r->truncated ? " (the first 1000)" : "",
                      r->start_unknown ? " (ends only: hyperscan cannot track its starts)" : "");
        for (size_t k = 0; k < r->n_matches; k++)
            (void)fprintf(f, "%s %" PRIu64 "-%" PRIu64, k ? "," : ":", r->matches[k]->start,
                          r->matches[k]->end);
        (void)fputc('\n', f);
    }
    return 0;
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
    {.group = "regex",
     .name = "match",
     .req = FGX__CTL__REQUEST__REQ_REGEX_MATCH,
     .npos = 2,
     .pos_names = {"PATTERNS", "FILE"},
     .opts = CLI_OPT_NOCASE | CLI_OPT_PROTO,
     .usage = usage_regex_match,
     .build = build_regex_match,
     .human = human_match,
     .json = json_match},
    {.name = NULL},
};

const struct cli_cmd_family cli_cmd_regex = {
    .group = "regex", .usage = usage_regex, .cmds = regex_cmds};
