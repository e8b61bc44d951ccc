#!/usr/bin/python3
"""Integration (issue 25, least privilege): the workers run as the fgex user with only the
capabilities docs/architecture.md lists, no_new_privs and a seccomp filter; a system call
outside the list kills the worker and controld brings the service back within 2 s; a filter
file's code (module level at `script set` as well as its functions) runs sandboxed: what it
tries against the box fails with its error in `script log`, while a regex service filters on.

The seccomp test uses the test-only trigger of libcommon/priv.c: with FGEX_TEST_SECCOMP_SIGUSR2
in a worker's environment (set here for controld, which passes its environment on), SIGUSR2
makes the worker call acct(2), which no list allows."""
import os
import pwd
import shutil
import signal
import sys
import tempfile
import time

os.environ["FGEX_TEST_SECCOMP_SIGUSR2"] = "1"
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fgxit as it  # noqa: E402
import unitexec  # noqa: E402
from fgxit import check, test  # noqa: E402
from scriptfiles import (firegex_example_judges, http, regex_service_filters,  # noqa: E402
                         write)

CAP_NET_BIND_SERVICE, CAP_NET_ADMIN, CAP_NET_RAW = 10, 12, 13
WORKER_CAPS = {"nfq": 1 << CAP_NET_ADMIN,
               "proxy": (1 << CAP_NET_RAW) | (1 << CAP_NET_BIND_SERVICE)}
SYS_ACCT = 163  # x86_64


def workers(env):
    return {w["kind"]: w for w in env.ctl("status")["workers"]}


def proc_status(pid):
    with open("/proc/%d/status" % pid) as f:
        return dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)


@test
def workers_run_as_fgex_with_their_capabilities_only(env):
    fgex = pwd.getpwnam("fgex")
    for kind, caps in WORKER_CAPS.items():
        st = proc_status(workers(env)[kind]["pid"])
        uids = st["Uid"].split()
        check(uids == [str(fgex.pw_uid)] * 4, "%s uids %r, not fgex's %d", kind, uids,
              fgex.pw_uid)
        check(st["Gid"].split() == [str(fgex.pw_gid)] * 4, "%s gids %r", kind, st["Gid"])
        check(st["Groups"].strip() == "", "%s supplementary groups %r", kind, st["Groups"])
        for k in ("CapEff", "CapPrm", "CapBnd"):
            check(int(st[k], 16) == caps, "%s %s %s, expected %x", kind, k, st[k], caps)
        check(int(st["CapInh"], 16) == 0 and int(st["CapAmb"], 16) == 0, "%s inh/amb %r %r",
              kind, st["CapInh"], st["CapAmb"])
        check(st["NoNewPrivs"].strip() == "1", "%s NoNewPrivs %r", kind, st["NoNewPrivs"])
        check(st["Seccomp"].strip() == "2", "%s Seccomp %r", kind, st["Seccomp"])


def back_after_seccomp_kill(env, kind, name, layer):
    """SIGUSR2 to the kind worker: it dies by seccomp; within 2 s the service filters again."""
    _, port = env.service(name, "tcp", extra=("--layer", layer))
    env.filter(name)
    srv = env.tcp_server(port)
    c = env.tcp_client(it.SRV4, port, [b"before", 0.1])
    it.assert_passed(c, it.server_conn(srv, 1), b"before")
    old = workers(env)[kind]
    os.kill(old["pid"], signal.SIGUSR2)
    t0 = time.monotonic()

    def back():
        w = workers(env)[kind]
        return w if w["pid"] != old["pid"] and w["state"] == "running" else None

    w = it.wait_until(back, timeout=2.0, step=0.05)
    took = time.monotonic() - t0
    check(w, "%s not back within 2 s: %r", kind, workers(env)[kind])
    check(w["restarts"] == old["restarts"] + 1, "restarts %r -> %r", old, w)
    c = env.tcp_client(it.SRV4, port, [it.EVIL, 0.1])
    it.assert_blocked(c, it.server_conn(srv, 2))
    c = env.tcp_client(it.SRV4, port, [b"after", 0.1])
    it.assert_passed(c, it.server_conn(srv, 3), b"after")
    log = it.wait_until(lambda: (lambda t: t if "%sworker killed by seccomp" % kind in t
                                 else None)(env.log_tail(200)), timeout=2)
    # under the unit's restrictions /dev/kmsg is not readable (no CAP_SYSLOG): no number
    said = "(a system call outside its list)" if env.controld_unit else "(syscall %d)" % SYS_ACCT
    check(log and "worker-seccomp" in log and said in log,
          "the health note of the kill:\n%s", env.log_tail(30))
    st = proc_status(w["pid"])
    check(st["Seccomp"].strip() == "2" and st["NoNewPrivs"].strip() == "1",
          "the new %s worker runs unfiltered", kind)
    return took


@test
def forbidden_syscall_kills_nfqworker_and_it_is_back_within_2s(env):
    back_after_seccomp_kill(env, "nfq", "seccnfq", "nfqueue")


@test
def forbidden_syscall_kills_proxyworker_and_it_is_back_within_2s(env):
    back_after_seccomp_kill(env, "proxy", "seccpx", "proxy")


EVILFILE = r'''
import os, socket, time
from firegex.nfproxy import pyfilter, ACCEPT
from firegex.nfproxy.models import HttpRequestHeader

try:
    with open(MARKER, "w") as f:
        f.write("module code ran with write access\n")
except OSError as e:
    print("module-level write refused:", e)

@pyfilter
def attempt(req: HttpRequestHeader):
    u = req.url
    if u == "/state":
        print(os.listdir(STATE))
    elif u == "/varlib":
        print(os.listdir("/var/lib/fgex"))
    elif u == "/shadow":
        print(open("/etc/shadow").read()[:10])
    elif u == "/etc":
        open("/etc/fgex-sandbox-test", "w").write("x")
    elif u == "/connect":
        socket.create_connection((SRV, PORT), timeout=1).close()
    elif u == "/fork":
        for i in range(1000):
            if os.fork() == 0:
                time.sleep(20)
                os._exit(0)
    elif u == "/alloc":
        b = bytearray(8 << 30)
        print(len(b))
    elif u == "/fill":
        with open("/tmp/fill", "wb") as f:
            while True:
                f.write(b"x" * (1 << 20))
    return ACCEPT
'''

# what each attempt must leave in `script log`
# (the tests' state dir is under /tmp, which the scratch tmpfs covers: it is not found)
ATTEMPTS = [("/state", "FileNotFoundError"), ("/varlib", "/var/lib/fgex"),
            ("/shadow", "PermissionError: [Errno 13] Permission denied: '/etc/shadow'"),
            ("/etc", "Read-only file system"), ("/connect", "Network is unreachable"),
            ("/fork", "BlockingIOError"), ("/alloc", "MemoryError"),
            ("/fill", "No space left on device")]


@test
def a_filter_file_cannot_reach_the_box(env, name="sbx"):
    # outside /tmp (the sandbox's own scratch there would take the write): beside the binaries
    mdir = tempfile.mkdtemp(prefix="fgx-sandbox-marker-", dir=os.path.dirname(env.bin))
    os.chmod(mdir, 0o777)  # only the sandbox's read-only file system stands in the way
    try:
        cannot_reach(env, os.path.join(mdir, "marker"), name)
    finally:
        shutil.rmtree(mdir, ignore_errors=True)


def cannot_reach(env, marker, name):
    _, port = env.service(name, "tcp", extra=("--layer", "proxy"))
    _, lport = env.service(name + "listen", "tcp")
    _, rport = env.service(name + "regex", "tcp")
    env.filter(name + "regex")
    src = EVILFILE.replace("MARKER", repr(marker)).replace("STATE", repr(env.state_dir)) \
        .replace("SRV", repr(it.SRV4)).replace("PORT", str(lport))
    env.ctl("script", "set", name, write(src), "--deadline", "5000")
    check(not os.path.exists(marker), "the module code at script set wrote %s", marker)
    srv = env.tcp_server(port)
    lsrv = env.tcp_server(lport)
    rsrv = env.tcp_server(rport)
    for n, (path, _) in enumerate(ATTEMPTS, 1):
        req = http(b"GET", path.encode())
        c = env.tcp_client(it.SRV4, port, [req, 0.3], timeout=10)
        # an exception on a fail-closed service: the connection is blocked
        it.assert_blocked(c, it.server_conn(srv, n, timeout=10), forbidden=path.encode())
    regex_service_filters(env, rsrv, rport)
    check(lsrv.all("conn") == [], "the script reached the box's listener: %r", lsrv.all("conn"))
    log = it.wait_until(lambda: (lambda t: t if all(w in t for _, w in ATTEMPTS) else None)(
        env.ctl_raw("script", "log", name, json_out=False).stdout), timeout=5)
    text = env.ctl_raw("script", "log", name, json_out=False).stdout
    check("attempt" in text and text.count("exception attempt") >= len(ATTEMPTS),
          "not every attempt is an exception in script log:\n%s", text[-3000:])
    for path, word in ATTEMPTS:
        check(word in text, "%s: no %r in script log:\n%s", path, word, text[-3000:])
    check(log, "script log")
    check("module-level write refused" in text, "the module code's refusal is not logged")
    check(not os.path.exists(marker), "an interpreter's module code wrote %s", marker)
    # the service works on once the attempts are over
    ok = http(b"GET", b"/fine")
    c = env.tcp_client(it.SRV4, port, [ok, 0.3])
    it.assert_passed(c, it.server_conn(srv, len(ATTEMPTS) + 1), ok)


@test
def run_dir_the_workers_cannot_reach_is_refused_at_start(env):
    """A --run-dir under a directory the fgex user cannot search: the workers could never dial
    controld after their drop (they stayed "starting" for ever, silently). controld refuses to
    start and says why."""
    top = tempfile.mkdtemp(dir=env.tmp)  # mode 0700: root's alone
    os.makedirs(os.path.join(top, "run"))
    os.makedirs(os.path.join(top, "state"))
    p = it.sh("ip", "netns", "exec", env.srv, os.path.join(it.fgx_bin(), "controld"),
              "--config", "/dev/null", "--state-dir", os.path.join(top, "state"),
              "--run-dir", os.path.join(top, "run"), "--foreground", check=False, timeout=20)
    check(p.returncode != 0, "controld started with an unreachable run dir")
    check("cannot reach the run directory" in p.stderr, "no reason given: %s", p.stderr[-500:])


@test
def fgex_python_package_under_root_still_serves_scripts(env):
    """fgex run from a checkout under /root (hidden in the sandbox, and 0700): the sandboxed
    check and interpreters still load fgex's package (given as a directory descriptor)."""
    d = tempfile.mkdtemp(prefix="fgx-py-", dir="/root")
    pkg = os.path.join(d, "fgex-python")
    shutil.copytree(os.path.join(env.bin, "fgex-python"), pkg)
    env.stop_controld()
    os.environ["FGEX_PYTHON_DIR"] = pkg
    try:
        env.start_controld()
    finally:
        del os.environ["FGEX_PYTHON_DIR"]
    try:
        _, port = env.service("rootpy", "tcp", extra=("--layer", "proxy"))
        firegex_example_judges(env, "rootpy", port, 0.3)
    finally:
        env.stop_controld()
        env.start_controld()
        shutil.rmtree(d, ignore_errors=True)


UNIT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "deploy",
                    "fgex.service")
CAP_KILL = 5


def unit_caps(path):
    """CapabilityBoundingSet= of the unit file, as a mask."""
    names = [c.upper() for c in unitexec.CAPS]
    for line in open(path):
        if line.startswith("CapabilityBoundingSet="):
            return sum(1 << names.index(c) for c in line.split("=", 1)[1].split())
    raise AssertionError("no CapabilityBoundingSet in %s" % path)


@test
def fgex_works_under_the_units_restrictions(env):
    """controld started as deploy/fgex.service starts it (unitexec.py: its bounding set, which
    has no CAP_KILL, no_new_privs, its system call filter, namespaces and address families):
    the workers come up and drop; every sandbox attempt fails with its error in script log; a
    stopped worker is killed and replaced, and a clean stop ends the workers, both signals to
    processes of the fgex user sent without CAP_KILL."""
    env.stop_controld()
    env.controld_unit = UNIT
    try:
        env.start_controld()
        st = proc_status(env.controld.pid)
        want = unit_caps(UNIT)
        check(not want & (1 << CAP_KILL), "the unit keeps CAP_KILL")
        check(int(st["CapBnd"], 16) == want and int(st["CapEff"], 16) == want,
              "controld's capabilities %s/%s, the unit's %x", st["CapBnd"], st["CapEff"], want)
        check(st["NoNewPrivs"].strip() == "1" and st["Seccomp"].strip() == "2",
              "controld not filtered: %r %r", st["NoNewPrivs"], st["Seccomp"])
        it.wait_until(lambda: workers(env)["proxy"]["state"] == "running", timeout=5)
        workers_run_as_fgex_with_their_capabilities_only(env)
        a_filter_file_cannot_reach_the_box(env, "unitsbx")
        before = workers(env)["proxy"]
        os.kill(before["pid"], signal.SIGSTOP)
        p = env.ctl_raw("worker", "restart", "proxy", json_out=False, timeout=20)
        check(p.returncode == 0 and "replaced pid %d" % before["pid"] in p.stdout,
              "worker restart of a stopped proxyworker -> %d: %s %s", p.returncode, p.stdout,
              p.stderr)
        check(it.wait_until(lambda: it.proc_state(before["pid"]) in (None, "Z"), timeout=2),
              "the stopped proxyworker %d lives on", before["pid"])
        pids = [w["pid"] for w in workers(env).values()]
        check(env.stop_controld() == 0, "controld's clean stop failed:\n%s", env.log_tail(20))
        check(it.wait_until(lambda: all(it.proc_state(q) in (None, "Z") for q in pids),
                            timeout=5),
              "workers left after a clean stop: %r", [q for q in pids if it.proc_state(q)])
    finally:
        env.stop_controld(check=False)
        env.controld_unit = os.environ.get("FGX_IT_UNIT") or None
        env.start_controld()


if __name__ == "__main__":
    sys.exit(it.run_module("test_privilege"))
