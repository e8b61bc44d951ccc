#!/usr/bin/python3
"""Run a command under the process restrictions of a systemd unit file, without systemd as PID
1 (the test machines have none): `unitexec.py UNIT -- PROGRAM ARGS...` execs PROGRAM (same
pid) as systemd would start the unit's ExecStart as root, for the settings fgex's privilege
code depends on:

  Group=, UMask=           the primary group (no supplementary ones), the umask
  CapabilityBoundingSet=   the bounding set (root's exec then leaves only these permitted)
  NoNewPrivileges=yes      PR_SET_NO_NEW_PRIVS
  SystemCallFilter=        one seccomp filter: the allow-list (groups expanded by
                           `systemd-analyze syscall-filter`, the ~ lines taken out of it),
                           anything else kills the process (SIGSYS), as systemd's does
  RestrictNamespaces=      clone/unshare/setns with another namespace type fail with EPERM,
                           clone3 with ENOSYS (systemd's own way: its flags are out of reach)
  RestrictAddressFamilies= socket() of another family fails with EAFNOSUPPORT

Each as a filter of its own, as systemd stacks them. The file-system settings (ProtectSystem,
PrivateTmp, ...) are not emulated: the tests keep their state under /tmp. libseccomp through
ctypes (the runtime's libseccomp2, which the workers link already)."""
import ctypes
import ctypes.util
import errno
import grp
import os
import re
import socket
import subprocess
import sys

PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 24, 38
ACT_KILL_PROCESS, ACT_ALLOW = 0x80000000, 0x7fff0000
CMP_MASKED_EQ = 7
NS_FLAGS = {"cgroup": 0x02000000, "ipc": 0x08000000, "net": 0x40000000, "mnt": 0x00020000,
            "pid": 0x20000000, "user": 0x10000000, "uts": 0x04000000}
# linux/capability.h, in number order
CAPS = ["cap_" + n for n in (
    "chown dac_override dac_read_search fowner fsetid kill setgid setuid setpcap "
    "linux_immutable net_bind_service net_broadcast net_admin net_raw ipc_lock ipc_owner "
    "sys_module sys_rawio sys_chroot sys_ptrace sys_pacct sys_admin sys_boot sys_nice "
    "sys_resource sys_time sys_tty_config mknod lease audit_write audit_control setfcap "
    "mac_override mac_admin syslog wake_alarm block_suspend audit_read perfmon bpf "
    "checkpoint_restore").split()]


def act_errno(e):
    return 0x00050000 | (e & 0xffff)


class ArgCmp(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("datum_a", ctypes.c_uint64),
                ("datum_b", ctypes.c_uint64)]


def settings(path):
    """The [Service] settings: name -> list of values, one per line, in order."""
    out = {}
    for line in open(path):
        line = line.strip()
        if not line or line[0] in "#;[" or "=" not in line:
            continue
        k, v = line.split("=", 1)
        out.setdefault(k.strip(), []).append(v.strip())
    return out


def syscall_groups():
    """`systemd-analyze syscall-filter`: group -> its members (names and @groups)."""
    text = subprocess.run(["systemd-analyze", "syscall-filter", "--no-pager"],
                          capture_output=True, text=True, check=True).stdout
    groups, cur = {}, None
    for line in text.splitlines():
        if line.startswith("@"):
            cur = groups.setdefault(line.split()[0], [])
        elif cur is not None and line.strip() and not line.strip().startswith("#"):
            cur.append(line.strip())
    return groups


def expand(names, groups, seen=None):
    seen = set() if seen is None else seen
    out = set()
    for n in names:
        if n.startswith("@"):
            if n not in seen:
                seen.add(n)
                out |= expand(groups[n], groups, seen)
        else:
            out.add(n)
    return out


class Filter:
    def __init__(self, lib, default):
        self.lib, self.ctx = lib, lib.seccomp_init(ctypes.c_uint32(default))
        if not self.ctx:
            raise OSError("seccomp_init failed")

    def nr(self, name):
        return self.lib.seccomp_syscall_resolve_name(name.encode())

    def rule(self, action, name, *cmps):
        nr = self.nr(name)
        if nr < 0:
            return  # not on this architecture
        arr = (ArgCmp * max(len(cmps), 1))(*[ArgCmp(a, op, x, y) for a, op, x, y in cmps])
        rv = self.lib.seccomp_rule_add_array(self.ctx, ctypes.c_uint32(action), nr,
                                             ctypes.c_uint(len(cmps)), arr)
        if rv < 0 and rv != -errno.EEXIST:
            raise OSError(-rv, "seccomp_rule_add %s" % name)

    def load(self):
        rv = self.lib.seccomp_load(self.ctx)
        if rv < 0:
            raise OSError(-rv, "seccomp_load")


def main(argv):
    if len(argv) < 4 or argv[2] != "--":
        sys.stderr.write("usage: unitexec.py UNIT -- PROGRAM ARGS...\n")
        return 2
    s = settings(argv[1])
    libc = ctypes.CDLL(None, use_errno=True)
    lib = ctypes.CDLL(ctypes.util.find_library("seccomp"), use_errno=True)
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int,
                                           ctypes.c_uint, ctypes.c_void_p]
    lib.seccomp_load.argtypes = [ctypes.c_void_p]

    # the identity and the umask (no User=: root, nothing to change; Group= the primary group, no
    # supplementary ones: the sockets controld makes are that group's without CAP_CHOWN)
    for v in s.get("Group", [])[-1:]:
        os.setgroups([])
        os.setgid(grp.getgrnam(v).gr_gid)
    for v in s.get("UMask", [])[-1:]:
        os.umask(int(v, 8))
    # the bounding set
    for v in s.get("CapabilityBoundingSet", []):
        keep = {c.lower() for c in v.split()}
        for cap, name in enumerate(CAPS):
            if name not in keep and libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
                e = ctypes.get_errno()
                if e != errno.EINVAL:  # beyond the kernel's last capability
                    raise OSError(e, "PR_CAPBSET_DROP %s" % name)
    if s.get("NoNewPrivileges", ["no"])[-1] in ("yes", "true", "1", "on"):
        if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "PR_SET_NO_NEW_PRIVS")

    filters = []
    lines = s.get("SystemCallFilter", [])
    if lines:
        groups = syscall_groups()
        allow = set()
        for v in lines:
            deny = v.startswith("~")
            names = expand(v.lstrip("~").split(), groups)
            allow = allow - names if deny else allow | names
        # what systemd's exec of the program itself needs, allowed by it whatever the list
        allow |= {"execve", "exit", "exit_group", "getrlimit", "rt_sigreturn", "sigreturn"}
        f = Filter(lib, ACT_KILL_PROCESS)
        for name in sorted(allow):
            f.rule(ACT_ALLOW, name)
        filters.append(f)  # loaded last: seccomp(2) itself is not in the list
    for v in s.get("RestrictNamespaces", []):
        ok = set(v.split())
        f = Filter(lib, ACT_ALLOW)
        f.rule(act_errno(errno.ENOSYS), "clone3")
        for ns, flag in NS_FLAGS.items():
            if ns in ok:
                continue
            f.rule(act_errno(errno.EPERM), "unshare", (0, CMP_MASKED_EQ, flag, flag))
            f.rule(act_errno(errno.EPERM), "clone", (0, CMP_MASKED_EQ, flag, flag))
            f.rule(act_errno(errno.EPERM), "setns", (1, CMP_MASKED_EQ, flag, flag))
        f.rule(act_errno(errno.EPERM), "setns", (1, 4, 0, 0))  # 0: any type
        filters.append(f)
    for v in s.get("RestrictAddressFamilies", []):
        ok = {getattr(socket, a) for a in v.split()}
        f = Filter(lib, ACT_ALLOW)
        for af in range(64):
            if af not in ok:
                f.rule(act_errno(errno.EAFNOSUPPORT), "socket", (0, 4, af, 0))
        filters.append(f)
    for f in filters[1:] + filters[:1] if lines else filters:
        f.load()
    os.execv(argv[3], argv[3:])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
