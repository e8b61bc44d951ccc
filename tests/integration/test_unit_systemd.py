#!/usr/bin/python3
# fgx-it-timeout: 600
"""Integration (issue 25): deploy/fgex.service run by a real systemd, with every sandboxing
setting it has (the bounding set, the system call filter, ProtectProc=invisible, ProtectSystem,
PrivateTmp, ...), not an emulation of some of them.

The test machines have no systemd as PID 1, so the unit goes to a systemd user manager run as
root (`systemd --user`, which applies them as the system manager does), in a network and mount
namespace of its own: a fresh /run (with the /run/systemd/system a booted system has, and the
inaccessible nodes PID 1 would have made) and /var/lib, a session bus of its own. ExecStart
points at the build's controld; its log goes to a file. Nothing of it reaches the host: the
manager and the bus are killed at the end of each test, the namespaces go with them.

Each test is one shell session inside those namespaces (sh below, fed the test's commands); it
prints KEY=VALUE lines that the test reads."""
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fgxit as it  # noqa: E402
from fgxit import check, test  # noqa: E402
import unitexec  # noqa: E402

UNIT = os.path.join(it.HERE, "..", "..", "deploy", "fgex.service")
CAP_NAMES = [c[4:] for c in unitexec.CAPS]  # linux/capability.h order, without "cap_"

SESSION = r'''
set -u
mount -t tmpfs tmpfs /run
mkdir -p /run/systemd/system /run/fgex
I=/run/systemd/inaccessible
mkdir -p $I/dir; touch $I/reg; mknod $I/chr c 0 0; mknod $I/blk b 0 0; mkfifo $I/fifo
python3 -c "import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])" $I/sock
chmod 0000 $I/dir $I/reg $I/chr $I/blk $I/fifo $I/sock
mount -t tmpfs tmpfs /var/lib
mkdir -p /var/lib/fgex
ip link set lo up
export XDG_RUNTIME_DIR=$T/xdg XDG_CONFIG_HOME=$T/cfg
export DBUS_SESSION_BUS_ADDRESS=unix:path=$XDG_RUNTIME_DIR/bus
mkdir -p -m 700 $XDG_RUNTIME_DIR
mkdir -p $XDG_CONFIG_HOME/systemd/user
cp $T/*.service $XDG_CONFIG_HOME/systemd/user/
printf '[Unit]\nDescription=nothing\n' > $XDG_CONFIG_HOME/systemd/user/idle.target
dbus-daemon --session --address=$DBUS_SESSION_BUS_ADDRESS --fork --print-pid > $T/dbus.pid
/lib/systemd/systemd --user --unit=idle.target --log-target=console > $T/manager.log 2>&1 &
echo $! > $T/manager.pid
for i in $(seq 50); do systemctl --user is-system-running >/dev/null 2>&1 && break; \
  [ "$(systemctl --user is-system-running 2>/dev/null)" = degraded ] && break; sleep 0.1; done
# this namespace's processes only (the harness's own controld runs the same binaries)
NS=$(readlink /proc/self/ns/net)
ours() { for p in $(pgrep -f "$1"); do [ "$(readlink /proc/$p/ns/net)" = "$NS" ] && echo $p; done; }
workers() { ours "^$BIN/(nfq|proxy|script)worker" | tr '\n' ' '; }
ctld() { ours "^$BIN/controld --foreground"; }
# the pids that still run: a killed worker its parent has not reaped yet (a zombie) does not
alive() { for p in "$@"; do s=$(sed 's/.*) //' /proc/$p/stat 2>/dev/null | cut -c1)
  [ -n "$s" ] && [ "$s" != Z ] && printf ' %s' $p; done; }
up() {
  for i in $(seq 100); do
    n=$($BIN/fgexctl status 2>/dev/null | grep -cE '^(nfq|proxy|script) +[0-9]+ +running')
    [ "$n" = 3 ] && return 0; sleep 0.1
  done; return 1
}
status() { for p in "$@"; do echo "STATUS_$p=$(grep -E '^(Uid|CapEff|CapBnd|NoNewPrivs|Seccomp):' \
  /proc/$p/status | tr -s '\t\n' '  ')"; \
  echo "CORE_$p=$(sed -n 's/^Max core file size *\([^ ]*\) *\([^ ]*\).*/\1:\2/p' \
  /proc/$p/limits)"; done; }
trap 'timeout 30 systemctl --user stop fgex.service >/dev/null 2>&1; \
  kill $(cat $T/manager.pid); kill $(cat $T/dbus.pid)' EXIT
'''


def unit_for(path, log, **extra):
    """The unit of path with ExecStart the build's controld (log: its output), plus extra
    settings (name -> value, replacing the unit's own)."""
    u = open(path).read()
    u = re.sub(r"^ExecStart=.*$", "ExecStart=%s/controld --foreground --log-level debug\n"
               "StandardOutput=append:%s\nStandardError=inherit" % (it.fgx_bin(), log),
               u, count=1, flags=re.M)
    if it.sanitized_build():
        # LeakSanitizer's exit check ptraces the threads, which the unit's system call filter
        # refuses: a sanitizer build's processes would spin at exit until killed
        u = u.replace("[Service]\n", "[Service]\nEnvironment=ASAN_OPTIONS=detect_leaks=0\n", 1)
    for k, v in extra.items():
        u = re.sub(r"^%s=.*\n" % k, "", u, flags=re.M)
        u = u.replace("[Service]\n", "[Service]\n%s=%s\n" % (k, v), 1)
    return u


def reap(t):
    """Whatever a session left (it timed out, or its trap did not run): every process in the
    manager's network namespace (the manager, controld and its workers), then the bus."""
    def pid_of(name):
        """The pid the file names while it is still this session's (T=t in its environment:
        not a pid reused since)."""
        try:
            pid = int(open(os.path.join(t, name)).read().split()[0])
            env = open("/proc/%d/environ" % pid, "rb").read().split(b"\0")
        except (OSError, ValueError, IndexError):
            return 0
        return pid if ("T=" + t).encode() in env else 0
    mgr, bus = pid_of("manager.pid"), pid_of("dbus.pid")
    try:
        ns = os.readlink("/proc/%d/ns/net" % mgr) if mgr else None
    except OSError:
        ns = None
    if ns and ns != os.readlink("/proc/self/ns/net"):
        for d in os.listdir("/proc"):
            try:
                if d.isdigit() and os.readlink("/proc/%s/ns/net" % d) == ns:
                    os.kill(int(d), signal.SIGKILL)
            except OSError:
                pass
    if bus:
        try:
            os.kill(bus, signal.SIGKILL)
        except OSError:
            pass


def session(env, commands, units):
    """Run commands (sh) in a fresh manager with units (file name -> text) installed; its
    KEY=VALUE lines as a dict, and the whole output."""
    if not shutil.which("dbus-daemon") or not os.path.exists("/lib/systemd/systemd"):
        raise AssertionError("no dbus-daemon or systemd (deploy/install-deps.sh test)")
    if not os.listdir("/sys/fs/cgroup"):
        # no cgroup tree (unified or hybrid) mounted: the manager exits at once and systemctl
        # only says the bus peer went away
        raise AssertionError("no cgroup file system at /sys/fs/cgroup: systemd --user cannot "
                             "run here")
    t = tempfile.mkdtemp(prefix="unit-", dir=env.tmp)
    for name, text in units.items():
        with open(os.path.join(t, name), "w") as f:
            f.write(text)
    script = os.path.join(t, "session.sh")
    with open(script, "w") as f:
        f.write(SESSION + commands)
    e = dict(os.environ, T=t, BIN=it.fgx_bin())
    try:
        p = subprocess.run(["unshare", "--net", "--mount", "--propagation", "private", "sh",
                            script], capture_output=True, text=True, timeout=150, env=e)
    finally:
        reap(t)
    out = p.stdout + p.stderr
    kv = dict(m.groups() for m in re.finditer(r"^([A-Z][A-Z0-9_]*)=(.*)$", p.stdout, re.M))
    return kv, out, t


def caps(names):
    return sum(1 << CAP_NAMES.index(n.lower()[4:]) for n in names)


def unit_caps():
    line = re.search(r"^CapabilityBoundingSet=(.*)$", open(UNIT).read(), re.M).group(1)
    return caps(line.split())


@test
def the_unit_runs_fgex_under_systemd(env):
    """Up under the unit: controld with the unit's bounding set, no_new_privs and its filter;
    the workers as fgex with their own; no process may write a core file (soft and hard limit
    0); the loaded unit's exposure is the offline one (at most 3.0); a clean stop leaves no
    worker."""
    # systemd 255+ takes CAP_SETUID from a unit that names User= (root too) beside its system
    # call filter and NoNewPrivileges: Debian 13's controld then cannot drop its workers
    check(not re.search(r"^User=", open(UNIT).read(), re.M), "the unit names User=")
    log = os.path.join(env.tmp, "unit-controld.log")
    kv, out, _ = session(env, r'''
timeout 30 systemctl --user start fgex.service; echo START=$?
up; echo UP=$?
echo CONTROLD=$(ctld)
W=$(workers); echo WORKERS=$W
status $(ctld) $W
echo EXPOSURE=$(timeout 30 systemd-analyze --user security fgex.service | sed -n 's/.*exposure level for fgex.service: \([0-9.]*\).*/\1/p')
timeout 30 systemctl --user stop fgex.service; echo STOP=$?
sleep 0.5
L=$(alive $W); echo LEFT=$L
''', {"fgex.service": unit_for(UNIT, log)})
    check(kv.get("START") == "0" and kv.get("UP") == "0", "fgex did not come up under the "
          "unit:\n%s\n%s", out[-2000:], open(log).read()[-2000:] if os.path.exists(log) else "")
    ctl = kv["STATUS_" + kv["CONTROLD"]]
    want = unit_caps()
    check(re.search(r"Uid: 0 0 0 0 ", ctl) and "CapEff: %016x" % want in ctl and
          "CapBnd: %016x" % want in ctl and "NoNewPrivs: 1" in ctl and "Seccomp: 2" in ctl,
          "controld under the unit: %s (the unit's set %x)", ctl, want)
    check(not want & (1 << CAP_NAMES.index("kill")), "the unit keeps CAP_KILL")
    # the workers are dumpable (libcommon/priv.c): no core file, soft or hard, from any of them
    cores = {p: kv.get("CORE_" + p) for p in [kv["CONTROLD"]] + kv["WORKERS"].split()}
    check(all(c == "0:0" for c in cores.values()), "core file limits (soft:hard): %r", cores)
    fgex = pwd.getpwnam("fgex").pw_uid
    dropped = [kv["STATUS_" + w] for w in kv["WORKERS"].split()
               if "Uid: %d " % fgex in kv["STATUS_" + w]]
    check(len(dropped) == 2 and all("Seccomp: 2" in s and "NoNewPrivs: 1" in s
                                    for s in dropped),
          "the two data-path workers as fgex, filtered: %r", kv)
    offline = subprocess.run(["systemd-analyze", "security", "--offline=true", UNIT],
                             capture_output=True, text=True).stdout
    m = re.search(r"exposure level for fgex\.service: ([0-9.]+)", offline)
    check(m and kv.get("EXPOSURE") == m.group(1) and float(m.group(1)) <= 3.0,
          "loaded %r, offline %r", kv.get("EXPOSURE"), m and m.group(1))
    check(kv.get("STOP") == "0" and kv.get("LEFT") == "", "after the stop: %r", kv)


@test
def workers_are_adopted_under_the_unit(env):
    """controld killed (SIGKILL): systemd restarts it (Restart=on-failure) and the new one
    adopts the workers through ProtectProc=invisible: the same pids, still running."""
    log = os.path.join(env.tmp, "unit-adopt.log")
    kv, out, _ = session(env, r'''
timeout 30 systemctl --user start fgex.service; up; echo UP=$?
W=$(workers); echo BEFORE=$W
kill -9 $(ctld)
sleep 4; up; echo UP2=$?
echo AFTER=$(workers)
''', {"fgex.service": unit_for(UNIT, log, RestartSec="1")})
    text = open(log).read() if os.path.exists(log) else ""
    check(kv.get("UP") == "0" and kv.get("UP2") == "0", "not up:\n%s\n%s", out[-1500:],
          text[-2000:])
    check(sorted(kv["BEFORE"].split()) == sorted(kv["AFTER"].split()),
          "workers %r before, %r after the restart:\n%s", kv["BEFORE"], kv["AFTER"],
          text[-2000:])
    for kind in ("nfqworker", "proxyworker", "scriptworker"):
        check(re.search(r"worker-adopted: adopted %s pid" % kind, text),
              "%s not adopted:\n%s", kind, text[-2000:])


@test
def stop_post_kills_workers_left_behind_under_the_unit(env):
    """The unit's ExecStopPost after a stop that timed out (SERVICE_RESULT=timeout), with the
    unit's sandbox (a oneshot unit of the same settings runs it while fgex runs): it sees and
    kills the fgex user's workers the pid files name, through ProtectProc and without
    CAP_KILL."""
    unit = open(UNIT).read()
    post = re.search(r"^ExecStopPost=(.*)$", unit, re.M).group(1)
    probe = re.sub(r"^ExecStart=.*$", lambda _: "ExecStart=" + post +
                   "\nEnvironment=SERVICE_RESULT=timeout", unit, count=1, flags=re.M)
    probe = re.sub(r"^(ExecStopPost|Restart|RestartSec|RuntimeDirectory\w*|StateDirectory\w*|"
                   r"ConfigurationDirectory|KillMode|KillSignal|TimeoutStopSec)=.*\n", "",
                   probe, flags=re.M).replace("Type=exec", "Type=oneshot")
    log = os.path.join(env.tmp, "unit-stoppost.log")
    kv, out, _ = session(env, r'''
timeout 30 systemctl --user start fgex.service; up; echo UP=$?
W=$(ours "^$BIN/(nfq|proxy)worker" | tr '\n' ' '); echo WORKERS=$W
timeout 30 systemctl --user start probe.service; echo PROBE=$?
sleep 0.5
L=$(alive $W); echo LEFT=$L
''', {"fgex.service": unit_for(UNIT, log), "probe.service": probe})
    check(kv.get("UP") == "0" and len(kv.get("WORKERS", "").split()) == 2, "not up: %s",
          out[-1500:])
    check(kv.get("PROBE") == "0" and kv.get("LEFT") == "",
          "the stop-post left %r of %r:\n%s", kv.get("LEFT"), kv.get("WORKERS"), out[-1500:])


if __name__ == "__main__":
    sys.exit(it.run_module("test_unit_systemd"))
