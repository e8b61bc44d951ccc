/* Unit tests for controld/ctl_fw.c: how a rule is checked and made canonical before it is
 * stored, and the configuration's message round trip (the state store's record, backups). */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "controld/ctl_fw.h"

static int check_rule(Fgx__Ctl__FwRule *m, struct ctl_fw_rule *out, char *err, size_t len)
{
    if (!m->has_action) {
        m->has_action = true;
        m->action = FGX__CTL__FW_ACTION__FW_DROP;
    }
    return ctl_fw_rule_from_msg(m, out, err, len);
}

Test(ctl_fw, rule_checks)
{
    struct ctl_fw_rule r;
    char err[256];
    Fgx__Ctl__FwRule m = FGX__CTL__FW_RULE__INIT;

    /* a port without a protocol means TCP or UDP */
    m.has_dport_lo = true;
    m.dport_lo = 80;
    cr_assert_eq(check_rule(&m, &r, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(r.proto, CTL_FW_BOTH);
    cr_assert(r.has_dport && r.dport_lo == 80 && r.dport_hi == 80);
    cr_assert_eq(r.dir, CTL_FW_IN);
    cr_assert(r.active);
    /* ... but not with --proto any */
    m.has_proto = true;
    m.proto = FGX__CTL__FW_PROTO__FW_PROTO_ANY;
    cr_assert_eq(check_rule(&m, &r, err, sizeof(err)), -EINVAL);
    cr_assert(strstr(err, "ports"), "%s", err);
    /* addresses are made canonical; host bits are refused; a name is an interface */
    m = (Fgx__Ctl__FwRule)FGX__CTL__FW_RULE__INIT;
    m.src = "FD00:0:0:0:0:0:0:1";
    cr_assert_eq(check_rule(&m, &r, err, sizeof(err)), 0, "%s", err);
    cr_assert_str_eq(r.src, "fd00::1");
    m.src = "10.0.0.1/8";
    cr_assert_eq(check_rule(&m, &r, err, sizeof(err)), -EINVAL);
    m.src = "10.0.0.300";
    cr_assert_eq(check_rule(&m, &r, err, sizeof(err)), -EINVAL);
    m.src = "veth*";
    cr_assert_eq(check_rule(&m, &r, err, sizeof(err)), 0, "%s", err);
    m.src = "a/b";
    cr_assert_eq(check_rule(&m, &r, err, sizeof(err)), -EINVAL);
    m.src = "averyverylongname";
    cr_assert_eq(check_rule(&m, &r, err, sizeof(err)), -EINVAL);
    /* interfaces a direction does not have */
    m.src = NULL;
    m.dst = "eth0";
    cr_assert_eq(check_rule(&m, &r, err, sizeof(err)), -EINVAL);
    cr_assert(strstr(err, "output interface"), "%s", err);
    m.has_dir = true;
    m.dir = FGX__CTL__FW_DIR__FW_DIR_OUT;
    cr_assert_eq(check_rule(&m, &r, err, sizeof(err)), 0, "%s", err);
    m.src = "eth1";
    cr_assert_eq(check_rule(&m, &r, err, sizeof(err)), -EINVAL);
    m.dir = FGX__CTL__FW_DIR__FW_DIR_FORWARD;
    cr_assert_eq(check_rule(&m, &r, err, sizeof(err)), 0, "%s", err);
    /* families that cannot meet */
    m = (Fgx__Ctl__FwRule)FGX__CTL__FW_RULE__INIT;
    m.src = "10.0.0.1";
    m.dst = "fd00::1";
    cr_assert_eq(check_rule(&m, &r, err, sizeof(err)), -EINVAL);
    /* names */
    m = (Fgx__Ctl__FwRule)FGX__CTL__FW_RULE__INIT;
    m.name = "42";
    cr_assert_eq(check_rule(&m, &r, err, sizeof(err)), -EINVAL);
    m.name = "a b";
    cr_assert_eq(check_rule(&m, &r, err, sizeof(err)), -EINVAL);
    /* no action */
    m = (Fgx__Ctl__FwRule)FGX__CTL__FW_RULE__INIT;
    cr_assert_eq(ctl_fw_rule_from_msg(&m, &r, err, sizeof(err)), -EINVAL);
}

Test(ctl_fw, conf_message_round_trip_and_names)
{
    struct ctl_fw_conf c, back;
    struct ctl_fw_rule r = {.active = true, .proto = CTL_FW_TCP, .action = CTL_FW_REJECT};
    Fgx__Ctl__FwConfig m;
    char err[256];
    size_t pos;

    ctl_fw_conf_init(&c);
    c.policy_drop[CTL_FW_OUT] = true;
    c.opt[CTL_FW_OPT_ICMP] = true;
    c.opt[CTL_FW_OPT_LOOPBACK] = false;
    for (int i = 0; i < 3; i++) {
        r.id = c.next_id++;
        (void)snprintf(r.name, sizeof(r.name), "r%d", i);
        r.has_dport = true;
        r.dport_lo = r.dport_hi = (uint16_t)(100 + i);
        cr_assert_eq(ctl_fw_conf_insert(&c, &r, 0), 0);
    }
    cr_assert_eq(ctl_fw_conf_find(&c, "r0", &pos), 0);
    cr_assert_eq(pos, 2, "inserted at the front each time");
    cr_assert_eq(ctl_fw_conf_find(&c, "2", &pos), 0);
    cr_assert_eq(pos, 1);
    cr_assert_eq(ctl_fw_conf_find(&c, "nope", &pos), -ENOENT);
    cr_assert_eq(ctl_fw_conf_to_msg(&c, &m), 0);
    cr_assert_eq(ctl_fw_conf_from_msg(&m, &back, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(back.n, 3);
    cr_assert_str_eq(back.rules[0].name, "r2");
    cr_assert_eq(back.rules[2].dport_lo, 100);
    cr_assert(back.policy_drop[CTL_FW_OUT] && !back.policy_drop[CTL_FW_IN]);
    cr_assert(back.opt[CTL_FW_OPT_ICMP] && !back.opt[CTL_FW_OPT_LOOPBACK]);
    cr_assert_eq(back.next_id, c.next_id);
    ctl_fw_conf_release(&back);
    /* a repeated name is refused */
    (void)snprintf(c.rules[1].name, sizeof(c.rules[1].name), "r2");
    cr_assert_eq(ctl_fw_conf_check_names(&c, err, sizeof(err)), -EEXIST);
    ctl_fw_msg_release(&m);
    ctl_fw_conf_release(&c);
}

Test(ctl_fw, option_names)
{
    cr_assert_eq(ctl_fw_opt_parse("loopback"), CTL_FW_OPT_LOOPBACK);
    cr_assert_eq(ctl_fw_opt_parse("allow-established"), CTL_FW_OPT_ESTABLISHED);
    cr_assert_eq(ctl_fw_opt_parse("drop-invalid"), CTL_FW_OPT_INVALID);
    cr_assert_eq(ctl_fw_opt_parse("dhcp"), CTL_FW_OPT_DHCP);
    cr_assert_eq(ctl_fw_opt_parse("nat"), -1);
}
