/* Unit tests: controld's reading of the kernel's seccomp audit line (ctl_priv.c). */
#include <criterion/criterion.h>

#include "controld/ctl_priv.h"

static const char rec[] =
    "5,1234,567890,-;audit: type=1326 audit(1764633838.951:12): auid=4294967295 uid=999 "
    "gid=995 ses=4294967295 subj=unconfined pid=15335 comm=\"nfqworker\" "
    "exe=\"/work/build/bin/nfqworker\" sig=31 arch=c000003e syscall=163 compat=0 "
    "ip=0x7f0000001234 code=0x80000000\n";

Test(ctl_priv, audit_line_names_the_syscall_of_that_pid)
{
    cr_assert_eq(ctl_priv_audit_syscall(rec, 15335), 163);
}

Test(ctl_priv, another_pid_or_another_record_is_not_it)
{
    cr_assert_eq(ctl_priv_audit_syscall(rec, 1533), -1);
    cr_assert_eq(ctl_priv_audit_syscall(rec, 153350), -1);
    cr_assert_eq(ctl_priv_audit_syscall("6,1,2,-;eth0: link up pid=15335 syscall=1\n", 15335),
                 -1);
    cr_assert_eq(ctl_priv_audit_syscall("", 15335), -1);
}
