/* Unit tests for fgexctl's firewall rule files (fgexctl/cmd_fw.c): what `fw import` reads,
 * what `fw export` writes, and that one reads back the other. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fgexctl/cmd_fw.h"

static int parse(const char *text, Fgx__Ctl__FwImport *imp, char *err, size_t len, char **buf)
{
    *buf = strdup(text);
    cr_assert_not_null(*buf);
    return cli_fw_file_parse(*buf, strlen(*buf), imp, err, len);
}

Test(cli_fw, file_lines_comments_and_fields)
{
    Fgx__Ctl__FwImport imp;
    char err[256] = "", *buf;
    const Fgx__Ctl__FwRule *r;

    cr_assert_eq(parse("# header\n\n  --name ssh --proto tcp --src 10.0.0.0/8 --dport 22 "
                       "--action accept   # the team\n"
                       "--dir out --proto udp --sport=100-200 --dst eth0 --action reject "
                       "--disabled\r\n",
                       &imp, err, sizeof(err), &buf),
                 0, "%s", err);
    cr_assert_eq(imp.n_rules, 2);
    r = imp.rules[0];
    cr_assert_str_eq(r->name, "ssh");
    cr_assert(r->has_proto && r->proto == FGX__CTL__FW_PROTO__FW_PROTO_TCP);
    cr_assert_str_eq(r->src, "10.0.0.0/8");
    cr_assert(r->has_dport_lo && r->dport_lo == 22 && r->dport_hi == 22);
    cr_assert_eq(r->action, FGX__CTL__FW_ACTION__FW_ACCEPT);
    cr_assert_eq(r->line, 3);
    cr_assert(!r->has_active);
    r = imp.rules[1];
    cr_assert(r->has_dir && r->dir == FGX__CTL__FW_DIR__FW_DIR_OUT);
    cr_assert(r->sport_lo == 100 && r->sport_hi == 200);
    cr_assert_str_eq(r->dst, "eth0");
    cr_assert_eq(r->action, FGX__CTL__FW_ACTION__FW_REJECT);
    cr_assert(r->has_active && !r->active);
    cr_assert_eq(r->line, 4);
    cli_fw_file_release(&imp);
    free(buf);
}

Test(cli_fw, bad_line_is_named)
{
    static const struct {
        const char *text, *want;
    } cases[] = {
        {"--dport 22 --action accept\n--dport 70000 --action drop\n", "line 2:"},
        {"--dport 22\n", "line 1: a rule needs --action"},
        {"# ok\n--action drop --at 1\n", "line 2: --at has no place"},
        {"--action drop --confirm 5\n", "line 1: --confirm has no place"},
        {"--action maybe\n", "line 1: --action 'maybe'"},
        {"--dir sideways --action drop\n", "line 1: --dir"},
        {"\n\n--proto sctp --action drop\n", "line 3: --proto"},
        {"--dport 9-3 --action drop\n", "line 1: --dport"},
        {"--action drop extra\n", "line 1: unexpected 'extra'"},
        {"--action drop --name\n", "line 1: option --name needs a value"},
        {"--dport 1 --action drop\n--action drop --action accept\n",
         "line 2: option --action given twice"},
        {"--dport 25 --dport=26 --action drop\n", "line 1: option --dport given twice"},
        {"--src a0 --action drop --src=a1\n", "line 1: option --src given twice"},
        {"--disabled --action drop --disabled\n", "line 1: option --disabled given twice"},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        Fgx__Ctl__FwImport imp;
        char err[256] = "", *buf;

        cr_assert_eq(parse(cases[i].text, &imp, err, sizeof(err), &buf), -EINVAL, "%s",
                     cases[i].text);
        cr_assert(strstr(err, cases[i].want), "%s: got '%s'", cases[i].text, err);
        cr_assert_eq(imp.rules, NULL);
        free(buf);
    }
}

Test(cli_fw, export_reads_back)
{
    const char *text = "--name a --proto tcp --src 10.0.0.0/8 --dport 22 --action accept\n"
                       "--dir forward --src eth* --dst fgxit-s --action drop --disabled\n"
                       "--dir out --proto both --sport 7 --dport 1-1024 --action reject\n";
    Fgx__Ctl__FwImport a, b;
    Fgx__Ctl__FwConfig cfg = FGX__CTL__FW_CONFIG__INIT;
    char err[256] = "", *buf, *buf2, *out = NULL;
    size_t len = 0;
    FILE *f;

    cr_assert_eq(parse(text, &a, err, sizeof(err), &buf), 0, "%s", err);
    cfg.rules = a.rules;
    cfg.n_rules = a.n_rules;
    f = open_memstream(&out, &len);
    cr_assert_eq(cli_fw_file_write(f, &cfg), 0);
    fclose(f);
    cr_assert_eq(parse(out, &b, err, sizeof(err), &buf2), 0, "%s\n%s", err, out);
    cr_assert_eq(b.n_rules, a.n_rules);
    for (size_t i = 0; i < a.n_rules; i++) {
        const Fgx__Ctl__FwRule *x = a.rules[i], *y = b.rules[i];

        cr_assert_eq(!x->name, !y->name);
        if (x->name)
            cr_assert_str_eq(x->name, y->name);
        cr_assert_str_eq(x->src ? x->src : "", y->src ? y->src : "");
        cr_assert_str_eq(x->dst ? x->dst : "", y->dst ? y->dst : "");
        cr_assert_eq(x->dport_lo, y->dport_lo);
        cr_assert_eq(x->dport_hi, y->dport_hi);
        cr_assert_eq(x->sport_lo, y->sport_lo);
        cr_assert_eq(x->action, y->action);
        cr_assert_eq(x->dir, y->dir);
        cr_assert_eq(!x->has_active || x->active, !y->has_active || y->active);
    }
    cli_fw_file_release(&a);
    cli_fw_file_release(&b);
    free(buf);
    free(buf2);
    free(out);
}
