"""fgex as a system service: `make install DESTDIR=...` lays down the binaries, the workers
where controld finds them, the systemd unit (checked by systemd-analyze verify), the man pages,
the completions and the sample configuration; the installed controld reads its configuration
file (a key per option, the command line winning, a bad line refused with its line); the bash
completion completes the running controld's services and filters; `make uninstall` removes it
all again."""
import os
import re
import shutil
import signal
import subprocess
import sys
import pwd
import shlex
import tempfile

import fgxit as it
from fgxit import check, test  # noqa

ROOT = os.path.abspath(os.path.join(it.HERE, "..", ".."))
PREFIX = "/usr/local"
S = {}


def build_dir():
    """The build directory whose bin/ the tests run (build, or build/san-* for SANITIZE)."""
    return os.path.dirname(it.fgx_bin())


def make(*args, timeout=600):
    p = subprocess.run(["make", "--no-print-directory", "-C", ROOT, "BUILD=" + build_dir()]
                       + list(args), capture_output=True, text=True, timeout=timeout)
    check(p.returncode == 0, "make %s -> %d: %s", " ".join(args), p.returncode,
          (p.stdout + p.stderr)[-1500:])
    return p


def dest(path):
    return os.path.join(S["dest"], path.lstrip("/"))


def run(*argv, timeout=10, **kw):
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True,
                          timeout=timeout, **kw)


def setup(env):
    S["dest"] = tempfile.mkdtemp(prefix="fgx-it-install-", dir=env.tmp)


LAID_DOWN = {
    "usr/local/sbin/controld": 0o755,
    "usr/local/bin/fgexctl": 0o755,
    "usr/local/lib/fgex/nfqworker": 0o755,
    "usr/local/lib/fgex/proxyworker": 0o755,
    "usr/local/lib/fgex/scriptworker": 0o755,
    "usr/local/lib/fgex/python/fgex/engine.py": 0o644,
    "usr/local/lib/systemd/system/fgex.service": 0o644,
    "usr/local/share/man/man8/controld.8": 0o644,
    "usr/local/share/man/man1/fgexctl.1": 0o644,
    "usr/local/share/man/man5/fgex-rules.5": 0o644,
    "usr/local/share/bash-completion/completions/fgexctl": 0o644,
    "usr/local/share/zsh/vendor-completions/_fgexctl": 0o644,
    "etc/fgex/controld.conf": 0o644,
}


@test
def install_lays_down_everything(env):
    # what the script filters' interpreters leave when they run from build/bin (the tests run
    # them there): make install must not lay it down
    stray = os.path.join(build_dir(), "bin", "fgex-python", "fgex", "__pycache__")
    os.makedirs(stray, exist_ok=True)
    open(os.path.join(stray, "engine.cpython-311.pyc"), "wb").close()
    make("install", "DESTDIR=" + S["dest"])
    for top, dirs, files in os.walk(S["dest"]):
        check("__pycache__" not in dirs and ".stamp" not in files,
              "make install laid down %s", os.path.join(top, "__pycache__" if "__pycache__" in dirs
                                                         else ".stamp"))
    for rel, mode in LAID_DOWN.items():
        p = dest(rel)
        check(os.path.isfile(p), "make install did not lay down /%s", rel)
        got = os.stat(p).st_mode & 0o777
        check(got == mode, "/%s has mode %o, expected %o", rel, got, mode)
    # the version from its one place (git describe or VERSION: `make version`), in both
    version = make("-s", "version").stdout.strip()
    check(re.fullmatch(r"\d+\.\d+\.\d+(\+[0-9a-z+]+)?", version), "make version: %r", version)
    for b, name in (("usr/local/sbin/controld", "controld"), ("usr/local/bin/fgexctl", "fgexctl")):
        p = run(dest(b), "--version")
        check(p.returncode == 0 and p.stdout == "%s %s\n" % (name, version),
              "%s --version -> %d %r %r (make version: %s)", b, p.returncode, p.stdout, p.stderr,
              version)
    unit = open(dest("usr/local/lib/systemd/system/fgex.service")).read()
    for line in (r"ExecStart=%s/sbin/controld --foreground" % PREFIX, r"StateDirectory=fgex",
                 r"RuntimeDirectory=fgex", r"Restart=on-failure",
                 r"After=(.* )?network-online\.target( .*)?", r"Wants=network-online\.target",
                 r"KillMode=process", r"RuntimeDirectoryPreserve=restart"):
        check(re.search("^%s$" % line, unit, re.M), "the unit lacks %r:\n%s", line, unit)
    check(re.search(r"^ExecStopPost=.*nft delete table inet fgex", unit, re.M),
          "the unit does not remove a table left behind:\n%s", unit)
    # the firewall's table stays in force however controld stopped (docs/install.md)
    check(not re.search(r"^Exec.*fgex_fw", unit, re.M),
          "the unit touches the firewall's table inet fgex_fw:\n%s", unit)
    # Issue 24: after an unclean death the workers and the table stay for the next controld to
    # adopt; after a stop that timed out, the workers it left are killed too.
    check(re.search(r"^ExecStopPost=.*SERVICE_RESULT.*signal\|core-dump\|exit-code.*exit 0", unit,
                    re.M), "the unit's stop-post does not leave an unclean death alone:\n%s", unit)
    check(re.search(r"^ExecStopPost=.*nfqworker\.pid.*kill -9", unit, re.M),
          "the unit's stop-post does not kill workers left behind:\n%s", unit)
    # Man pages built from scdoc, and readable by man (man-db: a run dependency, which
    # install-deps.sh test installs too: without it the check fails rather than pass unchecked)
    check(shutil.which("man"), "no man to read the pages with: run deploy/install-deps.sh test")
    for page in ("man8/controld.8", "man1/fgexctl.1", "man5/fgex-rules.5"):
        text = open(dest("usr/local/share/man/" + page)).read()
        check(text.startswith('.\\" Generated by scdoc') and "\n.TH " in text,
              "%s is not a built man page: %r", page, text[:200])
        p = run("man", "-l", dest("usr/local/share/man/" + page), env={"MANWIDTH": "80",
                "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"})
        check(p.returncode == 0 and "NAME" in p.stdout, "man -l %s -> %d: %s", page,
              p.returncode, p.stderr[-300:])
    p = run("bash", "-n", dest("usr/local/share/bash-completion/completions/fgexctl"))
    check(p.returncode == 0, "bash completion does not parse: %s", p.stderr)
    # The sample configuration is a valid configuration (everything in it commented out).
    p = run(dest("usr/local/sbin/controld"), "--config", dest("etc/fgex/controld.conf"),
            "--version")
    check(p.returncode == 0, "the sample controld.conf is refused: %s", p.stderr)


@test
def unit_passes_systemd_analyze_verify(env):
    if not shutil.which("systemd-analyze"):
        raise AssertionError("systemd-analyze is not installed (deploy/install-deps.sh test "
                             "installs systemd)")
    # verify wants ExecStart's binary and the Documentation= pages where the unit names them:
    # a copy of the installed unit pointed into DESTDIR, and MANPATH into DESTDIR's pages.
    d = tempfile.mkdtemp(prefix="verify-", dir=env.tmp)
    unit = open(dest("usr/local/lib/systemd/system/fgex.service")).read()
    with open(os.path.join(d, "fgex.service"), "w") as f:
        f.write(unit.replace(PREFIX + "/", dest(PREFIX) + "/"))
    e = dict(os.environ, MANPATH=dest(PREFIX + "/share/man"), SYSTEMD_LOG_LEVEL="notice")
    p = run("systemd-analyze", "verify", os.path.join(d, "fgex.service"), env=e, timeout=30)
    check(p.returncode == 0 and "fgex.service" not in p.stderr,
          "systemd-analyze verify -> %d:\n%s%s", p.returncode, p.stdout, p.stderr)


@test
def unit_is_hardened(env):
    """The unit's systemd hardening (issue 25): the options docs/install.md lists are there, and
    systemd-analyze's offline exposure is the 3.0 recorded there (9.6 at first, then 3.2)."""
    unit = open(dest("usr/local/lib/systemd/system/fgex.service")).read()
    for line in ("ProtectSystem=strict", "ReadWritePaths=/var/lib/fgex /run/fgex",
                 "ProtectHome=yes", "PrivateTmp=yes", "NoNewPrivileges=yes", "Group=fgex",
                 "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK",
                 "RestrictNamespaces=mnt net pid", "MemoryDenyWriteExecute=yes",
                 "ProtectKernelTunables=yes", "LockPersonality=yes",
                 "CapabilityBoundingSet=CAP_NET_ADMIN CAP_NET_RAW CAP_NET_BIND_SERVICE "
                 "CAP_SETUID CAP_SETGID CAP_SETPCAP CAP_SYS_ADMIN",
                 "SystemCallFilter=@system-service @mount @privileged @setuid seccomp"):
        check(re.search("^%s$" % re.escape(line), unit, re.M), "the unit lacks %r", line)
    d = tempfile.mkdtemp(prefix="security-", dir=env.tmp)
    with open(os.path.join(d, "fgex.service"), "w") as f:
        f.write(unit)
    p = run("systemd-analyze", "security", "--offline=true", os.path.join(d, "fgex.service"),
            timeout=30)
    m = re.search(r"Overall exposure level for fgex\.service: (\d+\.\d)", p.stdout)
    check(m and float(m.group(1)) <= 3.0, "exposure %s:\n%s", m and m.group(1),
          p.stdout[-500:] + p.stderr[-500:])


def stop_post_argv(unit, run_dir):
    """The unit's ExecStopPost= as systemd runs it ($$ -> $, one argument per quoted word),
    its /run/fgex moved to run_dir."""
    line = re.search(r"^ExecStopPost=(.*)$", unit, re.M).group(1)
    return shlex.split(line.replace("$$", "$").replace("/run/fgex", run_dir))


@test
def unit_stop_post_kills_a_worker_left_behind_without_cap_kill(env):
    """The unit's ExecStopPost, run under the unit's own restrictions (unitexec.py: its bounding
    set has no CAP_KILL) in a network namespace of its own (its nft has no table to remove):
    a worker of the fgex user that a pid file names is killed (as that user: setpriv) and the
    pid file goes; one whose start time differs is another process and is left alone; after an
    unclean death (SERVICE_RESULT=signal) nothing is touched."""
    unit = open(dest("usr/local/lib/systemd/system/fgex.service")).read()
    ufile = os.path.join(env.tmp, "stoppost.service")
    with open(ufile, "w") as f:
        f.write(unit)
    rdir = tempfile.mkdtemp(prefix="stoppost-", dir=env.tmp)
    argv = stop_post_argv(unit, rdir)

    def worker():
        return subprocess.Popen(["setpriv", "--reuid=fgex", "--regid=fgex", "--clear-groups",
                                 "sleep", "60"])

    def pidfile(name, p, start=None):
        uid = pwd.getpwnam("fgex").pw_uid
        check(it.wait_until(lambda: "Uid:\t%d\t" % uid in open("/proc/%d/status" % p.pid).read(),
                            timeout=2), "pid %d never became fgex", p.pid)
        with open("/proc/%d/stat" % p.pid) as f:
            real = f.read().rsplit(")", 1)[1].split()[19]
        with open(os.path.join(rdir, name + ".pid"), "w") as f:
            # controld's format (ctl_proc_pidfile_write): pid, start time, config hash
            f.write("%d %s 1234abcd\n" % (p.pid, start or real))

    def stop_post(result):
        e = dict(os.environ, SERVICE_RESULT=result)
        return run("unshare", "--net", sys.executable, os.path.join(it.HERE, "unitexec.py"),
                   ufile, "--", *argv, env=e, timeout=20)

    left, other = worker(), worker()
    try:
        pidfile("nfqworker", left)
        pidfile("proxyworker", other, start="1")
        p = stop_post("signal")
        check(p.returncode == 0 and left.poll() is None and other.poll() is None and
              os.path.exists(os.path.join(rdir, "nfqworker.pid")),
              "after an unclean death the stop-post touched something: %d %s", p.returncode,
              p.stderr)
        p = stop_post("timeout")
        check(p.returncode == 0, "stop-post -> %d: %s", p.returncode, p.stderr)
        check(it.wait_until(lambda: left.poll() is not None, timeout=2) and
              left.returncode == -signal.SIGKILL, "the worker left behind lives on (%r): %s",
              left.returncode, p.stderr)
        check(other.poll() is None, "a process whose start time differs was killed")
        check(os.listdir(rdir) == [], "pid files left: %r", os.listdir(rdir))
    finally:
        for w in (left, other):
            if w.poll() is None:
                w.kill()
            w.wait()


def controld_keys(exe):
    """The long options controld --help lists: every one is a configuration key."""
    p = run(exe, "--help")
    check(p.returncode == 0, "controld --help -> %d", p.returncode)
    return sorted(set(re.findall(r"--([a-z][a-z-]+)", p.stdout)))


# A valid value for each key whose option takes one; a flag takes "true". An option added
# later without a value here still has to be a known key (see below).
VALUES = {"state-dir": "/tmp", "run-dir": "/tmp", "threads": "2", "log-level": "debug",
          "queue-base": "7000", "proxy-port": "15001", "proxy-max-conns": "100",
          "metrics-listen": "127.0.0.1:9100", "listen": "tls+tcp://127.0.0.1:7443",
          "cert": "/tmp/c.pem", "key": "/tmp/k.pem", "allow": "10.0.0.0/8",
          "compile-timeout": "10", "nfq-flows": "65536", "handshake-timeout": "5",
          "proxy-max-conns-per-src": "64", "proxy-first-byte-timeout": "10",
          "web-listen": "127.0.0.1:8443", "user": "fgex", "script-uid": "2147352576",
          "script-memory": "512"}


@test
def config_file_has_a_key_per_option(env):
    exe = dest("usr/local/sbin/controld")
    conf = os.path.join(env.tmp, "keys.conf")
    keys = controld_keys(exe)
    for k in ("listen", "allow", "metrics-listen", "threads", "proxy-port", "no-synack-log",
              "config", "version"):
        check(k in keys, "controld --help does not list --%s: %r", k, keys)
    for k in keys:
        if k == "config":
            continue
        with open(conf, "w") as f:
            f.write("# key %s\n%s = %s\n" % (k, k, VALUES.get(k, "true")))
        # --version after the file's lines: it exits 0 once every line was accepted.
        p = run(exe, "--config", conf, "--version")
        check("unknown key" not in p.stderr, "key %r is unknown: %s", k, p.stderr)
        if k in VALUES or k in ("foreground", "local-auth", "init-password", "no-synack-log",
                                "version", "help"):
            check(p.returncode == 0, "key %s -> %d: %s", k, p.returncode, p.stderr)
    # A bad key, or a bad value, is refused naming the file and the line.
    with open(conf, "w") as f:
        f.write("threads = 2\n\n# a typo below\nthreds = 2\n")
    p = run(exe, "--config", conf, "--version")
    check(p.returncode == 2 and "%s:4: unknown key 'threds'" % conf in p.stderr,
          "bad key -> %d: %s", p.returncode, p.stderr)
    with open(conf, "w") as f:
        f.write("allow = 10.0.0.0/8\nthreads = many\n")
    p = run(exe, "--config", conf, "--version")
    check(p.returncode == 2 and "%s line 2: threads = many" % conf in p.stderr,
          "bad value -> %d: %s", p.returncode, p.stderr)
    # The command line wins: its --threads replaces the file's (bad) one.
    p = run(exe, "--config", conf, "--threads", "2", "--version")
    check(p.returncode == 0, "the command line's --threads did not win: %s", p.stderr)
    # A missing --config is an error, not the defaults.
    p = run(exe, "--config", conf + ".missing", "--version")
    check(p.returncode == 2 and "cannot read the configuration file" in p.stderr,
          "missing --config -> %d: %s", p.returncode, p.stderr)


def start_installed(env, conf, *extra):
    """The installed controld in env's server namespace, on env's state and run directories."""
    log = open(os.path.join(env.tmp, "installed.log"), "ab")
    p = subprocess.Popen(["ip", "netns", "exec", env.srv, dest("usr/local/sbin/controld"),
                          "--config", conf, "--state-dir", env.state_dir, "--run-dir",
                          env.run_dir, "--foreground"] + list(extra),
                         stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    log.close()
    st = it.wait_until(lambda: _status(env), timeout=10)
    check(st, "the installed controld does not answer")
    return p, st


def _status(env):
    p = env.ctl_raw("status")
    if p.returncode != 0:
        return None
    st = __import__("json").loads(p.stdout)
    nfq = [w for w in st.get("workers", []) if w.get("kind") == "nfq"]
    return st if nfq and nfq[0].get("state") == "running" else None


def stop_installed(p):
    p.send_signal(signal.SIGTERM)
    p.wait(10)
    check(p.returncode == 0, "the installed controld exited %d", p.returncode)


@test
def installed_controld_reads_its_config_and_finds_its_workers(env):
    env.stop_controld()
    conf = os.path.join(env.tmp, "controld.conf")
    with open(conf, "w") as f:
        f.write("# as an operator writes it\nthreads = 1\nproxy-port = 15077\n")
    try:
        p, st = start_installed(env, conf)
        try:
            check(st["threads"] == 1, "threads = 1 from the file, status says %r", st["threads"])
            for w in st["workers"]:
                # The file itself, not its name: in a chroot (make check-fresh) the link reads
                # as seen from the host.
                exe = "/proc/%d/exe" % int(w["pid"])
                want = dest("usr/local/lib/fgex/%sworker" % w["kind"])
                a, b = os.stat(exe), os.stat(want)
                check((a.st_dev, a.st_ino) == (b.st_dev, b.st_ino),
                      "worker %s runs %s, not the installed %s", w["kind"], os.readlink(exe),
                      want)
        finally:
            stop_installed(p)
        p, st = start_installed(env, conf, "--threads", "2")
        try:
            check(st["threads"] == 2, "--threads 2 on the command line, status says %r",
                  st["threads"])
        finally:
            stop_installed(p)
    finally:
        env.start_controld()


@test
def bash_completion_completes_services_and_filters(env):
    web, _ = env.service("web")
    env.service("dns", proto="udp")
    fid = env.filter(web, "evil")
    comp = dest("usr/local/share/bash-completion/completions/fgexctl")
    script = r'''
source "$1"
comp() { COMP_WORDS=("$@"); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); COMPREPLY=(); _fgexctl
         echo "${COMPREPLY[*]}"; }
comp "$2" -c "$3" service stop ""
comp "$2" -c "$3" filter rm ""
comp "$2" -c "$3" filter add w
comp "$2" --connect "$3" stats d
'''
    p = run("bash", "-c", script, "-", comp, os.path.join(env.bin, "fgexctl"), env.url,
            timeout=30)
    lines = p.stdout.splitlines()
    check(p.returncode == 0 and len(lines) == 4, "completion -> %d %r %s", p.returncode,
          p.stdout, p.stderr)
    check(sorted(lines[0].split()) == ["dns", "web"], "service names: %r", lines[0])
    check(str(fid) in lines[1].split(), "filter ids %r lack %d", lines[1], fid)
    check(lines[2] == "web", "service names starting with w: %r", lines[2])
    check(lines[3] == "dns", "service names starting with d: %r", lines[3])


@test
def uninstall_removes_it_again(env):
    make("uninstall", "DESTDIR=" + S["dest"])
    left = [rel for rel in LAID_DOWN if os.path.lexists(dest(rel))]
    check(not left, "make uninstall left %r", left)
    # An edited configuration file is the operator's: it stays.
    make("install", "DESTDIR=" + S["dest"])
    with open(dest("etc/fgex/controld.conf"), "a") as f:
        f.write("threads = 1\n")
    make("uninstall", "DESTDIR=" + S["dest"])
    check(os.path.exists(dest("etc/fgex/controld.conf")), "uninstall removed an edited config")


if __name__ == "__main__":
    sys.exit(it.run_module("install", setup=setup))
