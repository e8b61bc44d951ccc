#!/usr/bin/python3
"""Integration: named contexts and one command on several vulnboxes (issue 14), and the
confirmation of `service rm`.

Three real controlds, each in a network namespace of its own, all remote-controlled over TLS
with a password: box1 is the module's own (srv, tls+tcp://10.77.0.1:7443), box2 and box3 live in
namespaces this module adds, each joined to the client namespace by a veth pair of its own
(10.78.N.1 <-> 10.78.N.2). fgexctl runs in the client namespace with a HOME of its own, as a
player's laptop does. Each box has a service named after it, so that a reply says which box it
came from.

Covers: context add/use/list/show/rm (the file, the per-context pins, mode 0600, and the
sessions a context shares with -c URL of the same box); -C NAME; -C a,b,c with one box failing (exit status, one line per box, which failed);
-C all, text and --json; running in parallel (four silent servers cost one timeout, not four);
a changed certificate on one box refused for that box only, and re-pinned for it only; the
commands that need a terminal refused on several contexts; a local ipc:// context; service rm
with --yes, without a terminal (refused) and on a pseudo-terminal (asked, no, then yes)."""
import atexit
import json
import os
import pty
import re
import select
import signal
import stat
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fgxit as it  # noqa: E402
from fgxit import EVIL, SRV4, check, test  # noqa: E402

PORT = 7443
BOX1_URL = "tls+tcp://%s:%d" % (SRV4, PORT)
ARGS = ["--listen", BOX1_URL, "--allow", "10.77.0.2/32"]
FP_RE = re.compile(r"TLS certificate SHA-256 fingerprint ((?:[0-9A-F]{2}:){31}[0-9A-F]{2})")
FP_ANY = re.compile(r"(?:[0-9A-F]{2}:){31}[0-9A-F]{2}")
PASSWORD = "ctx-pw-4242"

S = {}


def latest_fp(log_path):
    with open(log_path, "rb") as f:
        found = FP_RE.findall(f.read().decode(errors="replace"))
    check(found, "controld printed no certificate fingerprint in %s", log_path)
    return found[-1]


class Box:
    """One more controld, in a namespace of its own, reached from the client namespace over a
    veth pair of its own."""

    def __init__(self, env, idx):
        self.env = env
        self.idx = idx
        self.name = "box%d" % idx
        self.ns = "fgx-it-%d-ctx-b%d" % (os.getpid(), idx)
        self.addr = "10.78.%d.1" % idx
        self.peer = "10.78.%d.2" % idx
        self.url = "tls+tcp://%s:%d" % (self.addr, PORT)
        self.dir = os.path.join(env.tmp, self.name)
        self.state = os.path.join(self.dir, "state")
        self.run = os.path.join(self.dir, "run")
        self.log_path = os.path.join(self.dir, "controld.log")
        self.local = "ipc://" + os.path.join(self.run, "control.sock")
        self.proc = None
        os.makedirs(self.state)
        os.makedirs(self.run)

    def up(self):
        it.sh("ip", "netns", "add", self.ns)
        self.env.ns_made.append(self.ns)
        s_if, c_if = "fgxb%d" % self.idx, "fgxc%d" % self.idx
        it.sh("ip", "-n", self.ns, "link", "add", s_if, "type", "veth", "peer", "name", c_if,
              "netns", self.env.cli)
        it.sh("ip", "-n", self.ns, "link", "set", "lo", "up")
        it.sh("ip", "-n", self.ns, "addr", "add", self.addr + "/24", "dev", s_if)
        it.sh("ip", "-n", self.ns, "link", "set", s_if, "up")
        it.sh("ip", "-n", self.env.cli, "addr", "add", self.peer + "/24", "dev", c_if)
        it.sh("ip", "-n", self.env.cli, "link", "set", c_if, "up")

    def start(self, extra=()):
        exe = os.path.join(self.env.bin, "controld")
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            ["ip", "netns", "exec", self.ns, exe, "--config", "/dev/null", "--state-dir",
             self.state, "--run-dir", self.run, "--threads", "1", "--foreground", "--log-level",
             "debug", "--listen", self.url, "--allow", self.peer + "/32"] + list(extra),
            stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        log.close()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            check(self.proc.poll() is None, "%s's controld exited with %s", self.name,
                  self.proc.returncode)
            p = self.ctl_raw("status")
            if p.returncode == 0:
                return
            time.sleep(0.1)
        raise AssertionError("%s's controld did not answer within 10 s" % self.name)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(2)
        self.proc = None

    def ctl_raw(self, *args):
        """fgexctl --json over this box's local socket (trusted: no login)."""
        return subprocess.run([os.path.join(self.env.bin, "fgexctl"), "-c", self.local, "--json"]
                              + [str(a) for a in args], capture_output=True, text=True,
                              timeout=15, stdin=subprocess.DEVNULL)

    def ctl(self, *args):
        p = self.ctl_raw(*args)
        check(p.returncode == 0, "%s: fgexctl %s -> %d: %s", self.name, " ".join(map(str, args)),
              p.returncode, p.stderr.strip())
        return json.loads(p.stdout)

    def fingerprint(self):
        return latest_fp(self.log_path)

    def service_names(self):
        return sorted(s["name"] for s in self.ctl("service", "list"))


class Box1:
    """The module's own controld (srv namespace) with the same interface as Box."""

    def __init__(self, env):
        self.env = env
        self.name = "box1"
        self.url = BOX1_URL
        self.local = env.url
        self.log_path = env.log_path

    def ctl(self, *args):
        return self.env.ctl(*args)

    def fingerprint(self):
        return latest_fp(self.log_path)

    def service_names(self):
        return sorted(s["name"] for s in self.env.services())


class Client:
    """fgexctl in the client namespace with a HOME of its own: no -c, so contexts decide."""

    def __init__(self, env, name):
        self.env = env
        self.home = os.path.join(env.tmp, "home-" + name)
        os.makedirs(self.home, exist_ok=True)
        self.cfg = os.path.join(self.home, ".config", "fgex")

    def argv(self, args, fgex_url=None):
        a = ["ip", "netns", "exec", self.env.cli, "env", "-u", "FGEX_CONFIG_DIR", "-u",
             "FGEX_URL", "HOME=" + self.home]
        if fgex_url:
            a.append("FGEX_URL=" + fgex_url)
        return a + [os.path.join(self.env.bin, "fgexctl")] + [str(x) for x in args]

    def run(self, *args, timeout=40, fgex_url=None):
        return subprocess.run(self.argv(args, fgex_url), capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)

    def expect(self, code, *args, **kw):
        p = self.run(*args, **kw)
        check(p.returncode == code, "fgexctl %s -> exit %d, expected %d (stdout %r, stderr %r)",
              " ".join(map(str, args)), p.returncode, code, p.stdout[:600], p.stderr[:800])
        return p

    def doc(self, code, *args, **kw):
        p = self.expect(code, "--json", *args, **kw)
        try:
            return json.loads(p.stdout)
        except ValueError as e:
            raise AssertionError("fgexctl --json %s printed %r (%s)" %
                                 (" ".join(map(str, args)), p.stdout[:300], e)) from e

    def contexts_file(self):
        with open(os.path.join(self.cfg, "contexts.json")) as f:
            return json.load(f)

    def known_hosts(self, ctx=None):
        path = os.path.join(self.cfg, "contexts", ctx, "known_hosts") if ctx else \
            os.path.join(self.cfg, "known_hosts")
        try:
            with open(path) as f:
                return [ln.split() for ln in f if ln.strip() and not ln.startswith("#")]
        except FileNotFoundError:
            return []


def hostport(url):
    return url.split("://", 1)[1]


def pwfile(env):
    path = os.path.join(env.tmp, "pw")
    with open(path, "w") as f:
        f.write(PASSWORD + "\n")
    return path


def lines_of(text, prefix):
    return [ln for ln in text.splitlines() if ln.startswith(prefix)]


def setup(env):
    S["pw"] = pwfile(env)
    b1 = Box1(env)
    boxes = [b1]
    for i in (2, 3):
        b = Box(env, i)
        b.up()
        boxes.append(b)
    atexit.register(lambda: [b.stop() for b in boxes[1:]])
    for b in boxes[1:]:
        b.start()
    for b in boxes:
        b.ctl("passwd", "--password-file", S["pw"])
        b.ctl("service", "add", "svc-" + b.name, "--proto", "tcp", "--port", env.port())
    S["boxes"] = boxes
    S["by"] = {b.name: b for b in boxes}
    S["a"] = Client(env, "a")


@test
def add_use_list_show(env):
    a = S["a"]
    for b in S["boxes"]:
        d = a.doc(0, "context", "add", b.name, b.url)
        check(d["name"] == b.name and d["url"] == b.url and d["fingerprint"] is None,
              "context add --json: %r", d)
    a.expect(5, "context", "add", "box1", "ipc:///elsewhere")
    p = a.expect(4, "context", "add", "all", "ipc:///x")
    check("reserved" in p.stderr, "%r", p.stderr)
    a.expect(4, "context", "add", "boxx", "tcp://10.0.0.1:1")
    path = os.path.join(a.cfg, "contexts.json")
    mode = stat.S_IMODE(os.stat(path).st_mode)
    check(mode == 0o600, "contexts.json mode %o", mode)
    f = a.contexts_file()
    check([c["name"] for c in f["contexts"]] == ["box1", "box2", "box3"] and
          f["current"] is None, "contexts.json: %r", f)

    lst = a.doc(0, "context", "list")
    check([c["name"] for c in lst] == ["box1", "box2", "box3", "local"], "list: %r", lst)
    check([c["name"] for c in lst if c["current"]] == ["local"], "current: %r", lst)
    a.expect(0, "context", "use", "box2")
    p = a.expect(0, "context", "list")
    marked = [ln.split()[1] for ln in p.stdout.splitlines() if ln.startswith("*")]
    check(marked == ["box2"], "context list marks %r:\n%s", marked, p.stdout)

    # the current context: no -c, no -C; it needs its own login
    p = a.expect(7, "service", "list")
    check("login" in p.stderr, "no hint to log in: %r", p.stderr)
    a.expect(0, "login", "--password-file", S["pw"])
    names = [s["name"] for s in a.doc(0, "service", "list")]
    check(names == ["svc-box2"], "the current context box2 answered %r", names)
    # its pin is its own (nothing in the base known_hosts); its session is the box's, in the
    # base sessions/, keyed by the address and the pinned certificate (issue 24)
    b2 = S["by"]["box2"]
    check(a.known_hosts("box2") == [[hostport(b2.url), b2.fingerprint()]],
          "box2's known_hosts %r", a.known_hosts("box2"))
    check(a.known_hosts() == [], "the base known_hosts got %r", a.known_hosts())
    check(not os.path.exists(os.path.join(a.cfg, "contexts", "box2", "sessions")),
          "a session in the context's directory")
    sess = os.listdir(os.path.join(a.cfg, "sessions"))
    want = "%s@%s" % (hostport(b2.url).replace(":", "_"),
                      b2.fingerprint().replace(":", "").lower())
    check(sess == [want], "sessions %r, expected [%r]", sess, want)
    mode = stat.S_IMODE(os.stat(os.path.join(a.cfg, "sessions", sess[0])).st_mode)
    check(mode == 0o600, "session mode %o", mode)
    d = a.doc(0, "context", "show")
    check(d["name"] == "box2" and d["current"] and d["session"] is True and
          d["fingerprint"] == b2.fingerprint(), "context show: %r", d)
    d = a.doc(0, "context", "show", "box3")
    check(d["session"] is False and d["fingerprint"] is None and not d["current"],
          "context show box3: %r", d)
    # $FGEX_URL comes before the current context (and context use says so)
    p = a.expect(0, "context", "use", "box2", fgex_url=S["by"]["box3"].url)
    check("FGEX_URL" in p.stderr, "no note about $FGEX_URL: %r", p.stderr)
    p = a.expect(7, "service", "list", fgex_url=S["by"]["box3"].url)
    # back to the local socket: the client namespace has no controld there
    a.expect(0, "context", "use", "local")
    check(a.contexts_file()["current"] is None, "use local left %r", a.contexts_file())
    d = a.doc(0, "context", "show")
    check(d["name"] == "local" and d["builtin"] and d["url"] == "ipc:///run/fgex/control.sock",
          "context show after use local: %r", d)
    a.expect(0, "context", "use", "box2")


@test
def one_context_with_C(env):
    a = S["a"]
    a.expect(7, "-C", "box3", "status")
    p = a.expect(0, "-C", "box3", "login", "--password-file", S["pw"])
    b3 = S["by"]["box3"]
    sess = os.path.join(a.cfg, "sessions", "%s@%s" % (hostport(b3.url).replace(":", "_"),
                                                      b3.fingerprint().replace(":", "").lower()))
    check(p.stdout == "logged in to %s (session kept in %s)\n" % (b3.url, sess),
          "-C box3 login did not log in to box3's URL with its session: %r", p.stdout)
    check([s["name"] for s in a.doc(0, "-C", "box3", "service", "list")] == ["svc-box3"],
          "-C box3 did not reach box3")
    # -C after the command works too; the current context (box2) is untouched
    check([s["name"] for s in a.doc(0, "service", "list", "-C", "box3")] == ["svc-box3"],
          "service list -C box3")
    check([s["name"] for s in a.doc(0, "service", "list")] == ["svc-box2"], "current changed")
    p = a.expect(2, "-c", BOX1_URL, "-C", "box3", "status")
    check("not both" in p.stderr, "%r", p.stderr)
    p = a.expect(3, "-C", "nope", "status")
    check("no such context: nope" in p.stderr, "%r", p.stderr)
    # box1 over its context: login for it alone
    a.expect(7, "-C", "box1", "status")
    a.expect(0, "-C", "box1", "login", "--password-file", S["pw"])
    a.expect(0, "-C", "box1", "status")


@test
def several_with_one_failing(env):
    a = S["a"]
    web_port = env.port()
    for b in S["boxes"][:2]:
        b.ctl("service", "add", "web", "--proto", "tcp", "--port", web_port)
    # box3 has no service web: the command fails there, and only there
    p = a.expect(3, "-C", "box1,box2,box3", "filter", "add", "web", it.REGEX)
    for name in ("box1", "box2"):
        got = lines_of(p.stdout, name + ": ")
        check(len(got) == 1 and "regex: " + it.REGEX in got[0], "%s's result line %r in:\n%s",
              name, got, p.stdout)
    check(not lines_of(p.stdout, "box3"), "box3 printed on stdout: %r", p.stdout)
    err3 = lines_of(p.stderr, "box3: ")
    check(err3 and "web" in err3[0], "box3's error line %r in %r", err3, p.stderr)
    check("failed on 1 of 3 contexts: box3 (exit 3)" in p.stderr, "no summary: %r", p.stderr)
    # it really was added on box1 and box2, and box1's blocks real traffic
    for b in S["boxes"][:2]:
        regs = [f["regex"] for f in b.ctl("filter", "list", "web")]
        check(regs == [it.REGEX], "%s's filters %r", b.name, regs)
    check("web" not in S["by"]["box3"].service_names(), "box3 got a service web")
    srv = env.tcp_server(web_port)
    c = env.tcp_client(SRV4, web_port, [b"GET /?q=" + EVIL])
    it.assert_blocked(c, it.server_conn(srv, 1))
    # --json: one array, an entry per box in the order given
    d = a.doc(3, "-C", "box3,box1,box2", "filter", "list", "web")
    check([x["context"] for x in d] == ["box3", "box1", "box2"], "order %r", d)
    check(d[0]["ok"] is False and d[0]["exit"] == 3 and "result" not in d[0] and
          any("web" in m for m in d[0]["messages"]), "box3 entry %r", d[0])
    for x in d[1:]:
        check(x["ok"] is True and x["exit"] == 0 and x["url"] == S["by"][x["context"]].url and
              [f["regex"] for f in x["result"]] == [it.REGEX], "entry %r", x)
    # an unreachable box: exit 1 for it, the others still done
    S["by"]["box3"].stop()
    try:
        d = a.doc(1, "-C", "box1,box3", "service", "list")
        check(d[0]["ok"] and not d[1]["ok"] and d[1]["exit"] == 1 and
              any("10.78.3.1" in m and "refused" in m for m in d[1]["messages"]), "with box3 down: %r", d)
    finally:
        S["by"]["box3"].start()
    # sessions do not outlive a controld: log in again
    a.expect(0, "-C", "box3", "login", "--password-file", S["pw"])


@test
def all_contexts_in_parallel(env):
    a = S["a"]
    a.expect(0, "-C", "all", "login", "--password-file", S["pw"])
    d = a.doc(0, "-C", "all", "service", "list")
    check([x["context"] for x in d] == ["box1", "box2", "box3"], "-C all: %r", d)
    for x in d:
        names = [s["name"] for s in x["result"]]
        check("svc-" + x["context"] in names and
              all(not n.startswith("svc-") or n == "svc-" + x["context"] for n in names),
              "%s answered %r", x["context"], names)
    p = a.expect(0, "-C", "all", "status")
    for b in S["boxes"]:
        check(lines_of(p.stdout, b.name + ": "), "no line for %s:\n%s", b.name, p.stdout)
    # parallel: four contexts whose servers accept and never answer cost one TLS timeout
    # (5 s), not four after each other
    port = env.port()
    env.tcp_server(port, idle=60, sink=True, ns=env.cli)
    slow = []
    for i in range(4):
        a.expect(0, "context", "add", "slow%d" % i, "tls+tcp://127.0.0.1:%d" % port)
        slow.append("slow%d" % i)
    try:
        t0 = time.monotonic()
        p = a.expect(1, "-C", ",".join(slow), "status", timeout=60)
        took = time.monotonic() - t0
        check(took < 15, "4 silent contexts took %.1f s (5 s each): not in parallel", took)
        check("failed on 4 of 4 contexts" in p.stderr, "%r", p.stderr)
    finally:
        for s in slow:
            a.expect(0, "context", "rm", s)


@test
def changed_certificate_refused_for_its_box_only(env):
    a = S["a"]
    b2 = S["by"]["box2"]
    old_fp = b2.fingerprint()
    crt = os.path.join(env.tmp, "new-cert.pem")
    key = os.path.join(env.tmp, "new-key.pem")
    it.sh("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
          "-nodes", "-subj", "/CN=fgx-it-ctx", "-days", "2", "-keyout", key, "-out", crt)
    out = it.sh("openssl", "x509", "-in", crt, "-noout", "-fingerprint", "-sha256").stdout
    new_fp = FP_ANY.search(out.upper()).group(0)
    b2.stop()
    b2.start(["--cert", crt, "--key", key])
    try:
        check(b2.fingerprint() == new_fp, "box2 presents %s, not %s", b2.fingerprint(), new_fp)
        p = a.expect(8, "-C", "all", "service", "list")
        for name in ("box1", "box3"):
            check(lines_of(p.stdout, name + ": "), "no result for %s:\n%s", name, p.stdout)
        check(any("CHANGED" in ln for ln in lines_of(p.stderr, "box2: ")),
              "box2's refusal: %r", p.stderr)
        check("failed on 1 of 3 contexts: box2 (exit 8)" in p.stderr, "%r", p.stderr)
        check(a.known_hosts("box2") == [[hostport(b2.url), old_fp]], "box2's pin changed: %r",
              a.known_hosts("box2"))
        # the message names box2's own known_hosts
        check(os.path.join("contexts", "box2", "known_hosts") in p.stderr, "%r", p.stderr)
        # re-pin box2 alone; the others keep theirs
        others = {n: a.known_hosts(n) for n in ("box1", "box3")}
        a.expect(0, "-C", "box2", "--fingerprint", new_fp, "cert")
        check(a.known_hosts("box2") == [[hostport(b2.url), new_fp]], "re-pin %r",
              a.known_hosts("box2"))
        check({n: a.known_hosts(n) for n in ("box1", "box3")} == others, "other pins moved")
        a.expect(0, "-C", "box2", "login", "--password-file", S["pw"])
        a.expect(0, "-C", "all", "status")
    finally:
        b2.stop()
        b2.start()
    a.expect(0, "-C", "box2", "--fingerprint", old_fp, "cert")
    a.expect(0, "-C", "box2", "login", "--password-file", S["pw"])


@test
def terminal_commands_refused_on_several(env):
    a = S["a"]
    for args, why in ((["events", "--follow"], "--follow"), (["stats", "--watch"], "--watch"),
                      (["login"], "--password-file"), (["passwd"], "--password-file"),
                      (["import", "-"], "stdin"), (["export", "/tmp/x.json"], "one file")):
        p = a.expect(2, "-C", "box1,box2", *args)
        check("several contexts" in p.stderr and why in p.stderr, "%s: %r", args, p.stderr)
        check(p.stdout == "", "%s printed %r", args, p.stdout)
    check(not os.path.exists("/tmp/x.json"), "export wrote a file")


@test
def local_ipc_context(env):
    a = S["a"]
    # a unix socket is a path, so the client namespace reaches box3's local socket
    b3 = S["by"]["box3"]
    a.expect(0, "context", "add", "here", b3.local)
    p = a.expect(2, "context", "add", "here2", b3.local, "--fingerprint", "AB" * 32)
    check("tls+tcp" in p.stderr, "%r", p.stderr)
    d = a.doc(0, "-C", "here,box1", "service", "list")
    check(d[0]["ok"] and [s["name"] for s in d[0]["result"]] == ["svc-box3"], "%r", d[0])
    check(d[1]["ok"] and "svc-box1" in [s["name"] for s in d[1]["result"]], "%r", d[1])
    a.expect(0, "context", "rm", "here")


@test
def bash_completion_of_contexts(env):
    """deploy/fgexctl.bash-completion completes context names (after -C, also after a comma),
    and a -C on the line sends its service-name lookups to that context."""
    a = S["a"]
    comp = os.path.join(it.HERE, "..", "..", "deploy", "fgexctl.bash-completion")
    script = r'''
source "$1"
comp() { COMP_WORDS=("$@"); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); COMPREPLY=(); _fgexctl
         echo "${COMPREPLY[*]}"; }
comp "$2" -C b
comp "$2" -C box1,b
comp "$2" context rm ""
comp "$2" -C box2 service rm ""
comp "$2" service rm web --y
comp "$2" con
'''
    p = subprocess.run(["ip", "netns", "exec", env.cli, "env", "-u", "FGEX_URL", "-u",
                        "FGEX_CONFIG_DIR", "HOME=" + a.home, "bash", "-c", script, "-", comp,
                        os.path.join(env.bin, "fgexctl")], capture_output=True, text=True,
                       timeout=60)
    lines = p.stdout.splitlines()
    check(p.returncode == 0 and len(lines) == 6, "completion -> %d %r %s", p.returncode,
          p.stdout, p.stderr)
    check(sorted(lines[0].split()) == ["box1", "box2", "box3"], "-C b: %r", lines[0])
    check(sorted(lines[1].split()) == ["box1,box1", "box1,box2", "box1,box3"], "-C box1,b: %r",
          lines[1])
    check(sorted(lines[2].split()) == ["box1", "box2", "box3", "local"], "context rm: %r",
          lines[2])
    check("svc-box2" in lines[3].split() and "svc-box1" not in lines[3].split(),
          "-C box2 service rm: %r", lines[3])
    check(lines[4] == "--yes", "service rm --y: %r", lines[4])
    check(lines[5] == "context", "con: %r", lines[5])


def ctl_pty(client, args, answer):
    """fgexctl with a pseudo-terminal as stdin: wait for its question on stderr, answer it,
    return (exit status, stdout, stderr)."""
    master, slave = pty.openpty()
    p = subprocess.Popen(client.argv(args), stdin=slave, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    os.close(slave)
    err = b""
    deadline = time.monotonic() + 20
    try:
        while b"[y/N]" not in err and time.monotonic() < deadline:
            r, _, _ = select.select([p.stderr], [], [], 0.5)
            if r:
                chunk = os.read(p.stderr.fileno(), 4096)
                if not chunk:
                    break
                err += chunk
        check(b"[y/N]" in err, "no question asked: %r", err)
        os.write(master, answer.encode() + b"\n")
        out, rest = p.communicate(timeout=30)
        return p.returncode, out.decode(), (err + rest).decode()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        os.close(master)


@test
def service_rm_confirmation(env):
    a = S["a"]
    b1 = S["by"]["box1"]
    b1.ctl("service", "add", "rm-me", "--proto", "tcp", "--port", env.port())
    # no terminal, no --yes: refused, naming --yes; nothing removed
    p = a.expect(2, "-C", "box1", "service", "rm", "rm-me")
    check("--yes" in p.stderr and "nothing was removed" in p.stderr, "%r", p.stderr)
    check("rm-me" in b1.service_names(), "removed without confirmation")
    # on a terminal: asked; "n" keeps it
    rc, out, err = ctl_pty(a, ["-C", "box1", "service", "rm", "rm-me"], "n")
    check(rc == 1 and "not confirmed" in err, "answer n: exit %d, %r", rc, err)
    check("remove service rm-me and all its filters on box1 (%s)? [y/N]" % BOX1_URL in err,
          "the question: %r", err)
    check("rm-me" in b1.service_names(), "removed after answering n")
    rc, out, err = ctl_pty(a, ["-C", "box1", "service", "rm", "rm-me"], "y")
    check(rc == 0 and "removed service" in out, "answer y: exit %d, %r %r", rc, out, err)
    check("rm-me" not in b1.service_names(), "not removed after answering y")
    # --yes: no question, even on a terminal's absence
    b1.ctl("service", "add", "rm-me2", "--proto", "tcp", "--port", env.port())
    d = a.doc(0, "-C", "box1", "service", "rm", "rm-me2", "--yes")
    check(isinstance(d.get("removed"), int), "service rm --json: %r", d)
    check("rm-me2" not in b1.service_names(), "--yes did not remove it")
    # several contexts: one question naming them all, then removed on each
    port = env.port()
    for b in S["boxes"][:2]:
        b.ctl("service", "add", "rm-both", "--proto", "tcp", "--port", port)
    a.expect(2, "-C", "box1,box2", "service", "rm", "rm-both")
    rc, out, err = ctl_pty(a, ["-C", "box1,box2", "service", "rm", "rm-both"], "yes")
    check("on 2 contexts (box1, box2)?" in err, "the question: %r", err)
    check(rc == 0 and lines_of(out, "box1: ") and lines_of(out, "box2: "), "exit %d, %r %r", rc,
          out, err)
    for b in S["boxes"][:2]:
        check("rm-both" not in b.service_names(), "%s kept rm-both", b.name)


@test
def a_context_and_c_url_share_one_login(env):
    """Issue 24: a context's login is the login of -c URL of the same box, both ways."""
    c = Client(env, "share")
    b1 = S["by"]["box1"]
    c.expect(0, "context", "add", "sb1", b1.url)
    c.expect(7, "-C", "sb1", "status")
    c.expect(7, "-c", b1.url, "status")
    c.expect(0, "-c", b1.url, "login", "--password-file", S["pw"])
    c.expect(0, "-c", b1.url, "status")
    c.expect(0, "-C", "sb1", "status")
    check([x["name"] for x in c.doc(0, "-C", "sb1", "service", "list")] ==
          [x["name"] for x in c.doc(0, "-c", b1.url, "service", "list")],
          "the context and -c URL reached different boxes")
    check(len(os.listdir(os.path.join(c.cfg, "sessions"))) == 1, "more than one session: %r",
          os.listdir(os.path.join(c.cfg, "sessions")))
    # a logout through the context logs -c URL out too; a login through it logs it in
    c.expect(0, "-C", "sb1", "logout")
    c.expect(7, "-c", b1.url, "status")
    c.expect(0, "-C", "sb1", "login", "--password-file", S["pw"])
    c.expect(0, "-c", b1.url, "status")
    d = c.doc(0, "context", "show", "sb1")
    check(d["session"] is True, "context show: %r", d)
    # a context pinned to another certificate for that address is another box: its own login
    other = "AB:" * 31 + "AB"
    c.expect(0, "context", "add", "imposter", b1.url, "--fingerprint", other)
    d = c.doc(0, "context", "show", "imposter")
    check(d["session"] is False, "a context with another pin shares the session: %r", d)
    c.expect(8, "-C", "imposter", "status")
    # removing the context leaves the box's login to -c URL
    c.expect(0, "context", "rm", "sb1")
    c.expect(0, "-c", b1.url, "status")


@test
def context_rm(env):
    a = S["a"]
    # a pin the base known_hosts holds (box3's, from the $FGEX_URL run) is taken over
    b3 = S["by"]["box3"]
    p = a.expect(0, "context", "add", "gone", b3.url)
    check("pinned SHA-256 %s (from ~/.config/fgex/known_hosts)" % b3.fingerprint() in p.stdout,
          "the base pin was not taken over: %r", p.stdout)
    check(a.known_hosts("gone") == [[hostport(b3.url), b3.fingerprint()]], "%r",
          a.known_hosts("gone"))
    a.expect(0, "-C", "gone", "login", "--password-file", S["pw"])
    # -C with a comma (or all) prints per context even for one: the same shape for scripts
    d = a.doc(0, "-C", "gone,gone", "service", "list")
    check(isinstance(d, list) and len(d) == 1 and d[0]["context"] == "gone" and
          [x["name"] for x in d[0]["result"]] == ["svc-box3"], "%r", d)
    d = os.path.join(a.cfg, "contexts", "gone")
    check(os.path.exists(os.path.join(d, "known_hosts")), "no pin for gone")
    a.expect(0, "context", "use", "gone")
    p = a.expect(0, "context", "rm", "gone")
    check("current context is local" in p.stdout, "%r", p.stdout)
    check(not os.path.exists(d), "its directory %s stayed", d)
    check(a.contexts_file()["current"] is None, "%r", a.contexts_file())
    a.expect(3, "-C", "gone", "status")
    a.expect(3, "context", "rm", "gone")
    a.expect(4, "context", "rm", "local")
    # the others are untouched
    a.expect(0, "-C", "all", "status")


if __name__ == "__main__":
    sys.exit(it.run_module("contexts", setup=setup, controld_args=ARGS))
