"""Integration-test framework: network namespaces, controld, fgexctl and the helper processes.

Each test module builds one world of its own: a server namespace `srv` (controld, its nfqworker,
the test servers) and a client namespace `cli`, joined by a veth pair
(10.77.0.1/24 + fd77::1/64 in srv, 10.77.0.2/24 + fd77::2/64 in cli). Names start with
fgx-it-<pid>- so concurrent runs never collide, and stale ones whose pid is gone are removed at
start. Everything is torn down on the way out, failure or not.

A module declares its tests with @test and ends with run_module(); it prints one line per test
and a closing `RESULT passed=N failed=N skipped=N` that run.sh adds up.
"""
import atexit
import base64
import errno
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
HELPER = os.path.join(HERE, "fgxhelper.py")
PY = "/usr/bin/python3"

SRV4, CLI4 = "10.77.0.1", "10.77.0.2"
SRV6, CLI6 = "fd77::1", "fd77::2"
SRV_IF, CLI_IF = "fgxit-s", "fgxit-c"

EVIL = b"evil1337"
REGEX = "evil[0-9]+"


def fgx_bin():
    return os.path.abspath(os.environ.get("FGX_BIN", os.path.join(HERE, "..", "..", "build", "bin")))


_SANITIZED = {}


def sanitized_build():
    """True when the binaries under test are a sanitizer build (controld links libasan): their
    exits (a leak check of the whole heap) take seconds more."""
    exe = os.path.join(fgx_bin(), "controld")
    if exe not in _SANITIZED:
        try:
            with open(exe, "rb") as f:
                _SANITIZED[exe] = b"libasan.so" in f.read()
        except OSError:
            _SANITIZED[exe] = False
    return _SANITIZED[exe]


def sh(*argv, check=True, timeout=10, input=None):
    """Run a command, return CompletedProcess (text). Raises on non-zero when check."""
    p = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, input=input)
    if check and p.returncode != 0:
        raise RuntimeError("%s -> %d: %s" % (" ".join(argv), p.returncode, p.stderr.strip()))
    return p


def pid_alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def kill_ns_pids(ns):
    p = sh("ip", "netns", "pids", ns, check=False)
    for tok in p.stdout.split():
        try:
            os.kill(int(tok), signal.SIGKILL)
        except (ValueError, ProcessLookupError):
            pass


def cleanup_stale():
    """Remove fgx-it-<pid>-* namespaces left by runs whose process is gone."""
    out = sh("ip", "netns", "list", check=False).stdout
    for line in out.splitlines():
        name = line.split()[0] if line.split() else ""
        m = re.match(r"fgx-it-(\d+)-", name)
        if m and not pid_alive(int(m.group(1))):
            kill_ns_pids(name)
            sh("ip", "netns", "del", name, check=False)


class CtlError(Exception):
    def __init__(self, rc, stderr, argv):
        super().__init__("fgexctl %s -> exit %d: %s" % (" ".join(argv), rc, stderr.strip()))
        self.rc = rc
        self.stderr = stderr


# ---- helper processes ---------------------------------------------------------------------------

class Helper:
    """One fgxhelper.py process (or another helper script printing JSON lines: script) in a
    namespace; its JSON-line events are collected by a thread."""

    def __init__(self, ns, *argv, script=None):
        self.argv = [str(a) for a in argv]
        self.proc = subprocess.Popen(["ip", "netns", "exec", ns, PY, script or HELPER] +
                                     self.argv,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE)
        self.events = []
        self.cond = threading.Condition()
        self.stderr = b""
        self.t_out = threading.Thread(target=self._read, daemon=True)
        self.t_out.start()
        self.t_err = threading.Thread(target=self._read_err, daemon=True)
        self.t_err.start()

    def _read(self):
        for line in self.proc.stdout:
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            with self.cond:
                self.events.append(ev)
                self.cond.notify_all()
        with self.cond:
            self.events.append({"event": "exit"})
            self.cond.notify_all()

    def _read_err(self):
        self.stderr = self.proc.stderr.read()

    def wait_event(self, pred, timeout):
        """First event (in arrival order) that satisfies pred, or None after timeout."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                for ev in self.events:
                    if pred(ev):
                        return ev
                    if ev.get("event") == "exit":
                        return None
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.cond.wait(left)

    def all(self, kind):
        with self.cond:
            return [e for e in self.events if e.get("event") == kind]

    def tell(self, line="go"):
        self.proc.stdin.write((line + "\n").encode())
        self.proc.stdin.flush()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(2)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(2)
        self.t_out.join(2)
        self.t_err.join(2)


def d64(s):
    return base64.b64decode(s) if s else b""


# ---- the world ------------------------------------------------------------------------------------

class Env:
    def __init__(self, module):
        tag = "fgx-it-%d-%s" % (os.getpid(), module[:12])
        self.srv = tag + "-s"
        self.cli = tag + "-c"
        self.tmp = tempfile.mkdtemp(prefix="fgx-it-%s-" % module)
        self.state_dir = os.path.join(self.tmp, "state")
        self.run_dir = os.path.join(self.tmp, "run")
        os.makedirs(self.state_dir, mode=0o700)
        os.makedirs(self.run_dir)
        # the workers run as the fgex user (issue 25) and dial their sockets in run_dir:
        # the world's directory lets them through, the state stays controld's
        os.chmod(self.tmp, 0o711)
        self.url = "ipc://" + os.path.join(self.run_dir, "control.sock")
        self.log_path = os.path.join(self.tmp, "controld.log")
        self.controld = None
        self.helpers = []
        self.next_port = 31000
        self.bin = fgx_bin()
        self.ns_made = []
        self.log_offset = 0
        # options every start of controld adds (run_module's controld_args), e.g.
        # ["--metrics-listen", "127.0.0.1:9100"]: the runner's restarts keep them too
        self.controld_args = []
        # a systemd unit file whose process restrictions controld starts under
        # (tests/integration/unitexec.py: bounding set, no_new_privs, system call filter,
        # namespaces, address families), as under systemd; FGX_IT_UNIT=deploy/fgex.service
        # runs a whole module so
        self.controld_unit = os.environ.get("FGX_IT_UNIT") or None

    # -- namespaces
    def up(self):
        for ns in (self.srv, self.cli):
            sh("ip", "netns", "add", ns)
            self.ns_made.append(ns)
        sh("ip", "-n", self.srv, "link", "add", SRV_IF, "type", "veth", "peer", "name", CLI_IF,
           "netns", self.cli)
        for ns, ifn, a4, a6 in ((self.srv, SRV_IF, SRV4, SRV6), (self.cli, CLI_IF, CLI4, CLI6)):
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            sh("ip", "-n", ns, "addr", "add", a4 + "/24", "dev", ifn)
            sh("ip", "-n", ns, "addr", "add", a6 + "/64", "dev", ifn, "nodad")
            sh("ip", "-n", ns, "link", "set", ifn, "up")
        # Static neighbours: no ND/ARP races in the first packet of a test.
        mac = {}
        for ns, ifn in ((self.srv, SRV_IF), (self.cli, CLI_IF)):
            out = sh("ip", "-n", ns, "-j", "link", "show", ifn).stdout
            mac[ns] = json.loads(out)[0]["address"]
        for ns, ifn, peer4, peer6, other in ((self.srv, SRV_IF, CLI4, CLI6, self.cli),
                                             (self.cli, CLI_IF, SRV4, SRV6, self.srv)):
            for a in (peer4, peer6):
                sh("ip", "-n", ns, "neigh", "replace", a, "lladdr", mac[other], "dev", ifn,
                   "nud", "permanent")

    def down(self):
        if self.tmp is None:
            return
        for h in self.helpers:
            try:
                h.stop()
            except Exception:  # noqa: BLE001 - teardown must go on
                pass
        self.helpers = []
        self.stop_controld(signal.SIGTERM, check=False)
        for ns in self.ns_made:
            kill_ns_pids(ns)
            sh("ip", "netns", "del", ns, check=False)
        self.ns_made = []
        if os.environ.get("FGX_IT_KEEP"):
            sys.stdout.write("  (kept %s)\n" % self.tmp)
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)
        self.tmp = None

    def port(self):
        self.next_port += 1
        return self.next_port

    # -- controld
    def start_controld(self, threads=2, timeout=10, extra_args=None):
        """Start controld in srv and wait for its running nfq worker. extra_args: options
        added to the command line (default: self.controld_args)."""
        extra = [str(a) for a in (self.controld_args if extra_args is None else extra_args)]
        exe = os.path.join(self.bin, "controld")
        if not os.access(exe, os.X_OK):
            raise RuntimeError("no controld binary at %s" % exe)
        log = open(self.log_path, "ab")
        self.log_offset = os.path.getsize(self.log_path)
        wrap = ([sys.executable, os.path.join(HERE, "unitexec.py"),
                 os.path.abspath(self.controld_unit), "--"] if self.controld_unit else [])
        env = None
        if self.controld_unit:
            # LeakSanitizer's exit check ptrace()s the process's threads, which the unit's
            # system call filter (no @debug) refuses: in a sanitizer build it then spins in
            # sched_yield() for ever and controld never exits. Leaks are checked everywhere else.
            env = dict(os.environ)
            env["ASAN_OPTIONS"] = ":".join(o for o in (env.get("ASAN_OPTIONS"), "detect_leaks=0")
                                           if o)
        self.controld = subprocess.Popen(
            # --config /dev/null: an installed /etc/fgex/controld.conf is not the test's
            ["ip", "netns", "exec", self.srv] + wrap + [exe, "--config", "/dev/null", "--state-dir",
             self.state_dir, "--run-dir", self.run_dir, "--threads", str(threads), "--foreground", "--log-level", "debug"]
            + extra,
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env)
        log.close()
        sock = os.path.join(self.run_dir, "control.sock")
        deadline = time.monotonic() + timeout
        last = "socket never appeared"
        while time.monotonic() < deadline:
            if self.controld.poll() is not None:
                raise RuntimeError("controld exited with %d:\n%s" %
                                   (self.controld.returncode, self.log_tail()))
            if os.path.exists(sock):
                try:
                    st = self.ctl("status")
                    if any(w.get("kind") == "nfq" and w.get("state") == "running"
                           for w in st.get("workers", [])):
                        return st
                    last = "no running nfq worker in status: %s" % json.dumps(st)
                except (CtlError, ValueError, subprocess.TimeoutExpired) as e:
                    last = str(e)
            time.sleep(0.1)
        raise RuntimeError("controld not ready after %ss (%s):\n%s" % (timeout, last,
                                                                       self.log_tail()))

    def stop_controld(self, sig=signal.SIGTERM, check=True, timeout=None):
        p = self.controld
        if p is None:
            return None
        if timeout is None:
            timeout = 20 if sanitized_build() else 5
        if p.poll() is None:
            p.send_signal(sig)
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(2)
                if check:
                    raise AssertionError("controld did not exit within %ss of signal %d" %
                                         (timeout, sig))
        self.controld = None
        return p.returncode

    SANITIZER_MARKS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
                       "ERROR: ThreadSanitizer", "WARNING: ThreadSanitizer")

    def sanitizer_report(self, n=30):
        try:
            with open(self.log_path, "rb") as f:
                lines = f.read().decode(errors="replace").splitlines()
        except OSError:
            return ""
        for i, line in enumerate(lines):
            if any(m in line for m in self.SANITIZER_MARKS):
                return "\n".join("    | " + x for x in lines[i:i + n])
        return ""

    def log_tail(self, n=40):
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self.log_offset)
                lines = f.read().decode(errors="replace").splitlines()
        except OSError:
            return "(no controld log)"
        return "\n".join("    | " + line for line in lines[-n:])

    # -- fgexctl
    def ctl_raw(self, *args, json_out=True, timeout=15):
        argv = [os.path.join(self.bin, "fgexctl"), "-c", self.url]
        if json_out:
            argv.append("--json")
        argv += [str(a) for a in args]
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)

    def ctl(self, *args, timeout=15):
        """fgexctl --json ARGS; returns the parsed document or raises CtlError."""
        p = self.ctl_raw(*args, timeout=timeout)
        if p.returncode != 0:
            raise CtlError(p.returncode, p.stderr, [str(a) for a in args])
        try:
            return json.loads(p.stdout)
        except ValueError as e:
            raise AssertionError("fgexctl %s printed no JSON document: %r (%s)" %
                                 (" ".join(map(str, args)), p.stdout[:300], e)) from e

    # -- objects
    def service(self, name, proto="tcp", port=None, extra=()):
        """service add; returns (id, port)."""
        port = port or self.port()
        doc = self.ctl("service", "add", name, "--proto", proto, "--port", port, *extra)
        if not isinstance(doc, dict) or "id" not in doc:
            raise AssertionError("service add --json has no id: %r" % (doc,))
        return doc["id"], port

    def filter(self, svc, regex=REGEX, dir=None, nocase=False):
        """filter add; returns the filter id."""
        extra = (["--dir", dir] if dir else []) + (["--nocase"] if nocase else [])
        doc = self.ctl("filter", "add", svc, regex, *extra)
        if not isinstance(doc, dict) or "id" not in doc:
            raise AssertionError("filter add --json has no id: %r" % (doc,))
        return doc["id"]

    def filters(self, svc):
        doc = self.ctl("filter", "list", svc)
        if not isinstance(doc, list):
            raise AssertionError("filter list --json is not an array: %r" % (doc,))
        return doc

    def services(self):
        doc = self.ctl("service", "list")
        if not isinstance(doc, list):
            raise AssertionError("service list --json is not an array: %r" % (doc,))
        return doc

    def service_doc(self, name):
        for s in self.services():
            if s.get("name") == name:
                return s
        raise AssertionError("service %s not in service list" % name)

    def worker_pid(self):
        st = self.ctl("status")
        for w in st.get("workers", []):
            if w.get("kind") == "nfq":
                return int(w["pid"]), w
        raise AssertionError("no nfq worker in status: %r" % (st,))

    # -- helpers
    def helper(self, ns, *argv):
        h = Helper(ns, *argv)
        self.helpers.append(h)
        return h

    def tcp_server(self, port, reply=None, idle=3.0, sink=False, ns=None):
        argv = ["tcp-server", "--port", port, "--idle", idle]
        if reply is not None:
            argv += ["--reply", reply.hex()]
        if sink:
            argv.append("--sink")
        h = self.helper(ns or self.srv, *argv)
        if h.wait_event(lambda e: e.get("event") == "listening", 5) is None:
            raise RuntimeError("tcp server on %d did not start: %s" % (port, h.stderr))
        return h

    def udp_server(self, port, echo=False, reply=None, ns=None):
        argv = ["udp-server", "--port", port] + (["--echo"] if echo else [])
        if reply is not None:
            argv += ["--reply", reply.hex()]
        h = self.helper(ns or self.srv, *argv)
        if h.wait_event(lambda e: e.get("event") == "listening", 5) is None:
            raise RuntimeError("udp server on %d did not start: %s" % (port, h.stderr))
        return h

    def tcp_client(self, host, port, steps, timeout=3.0, ns=None, wait=True, sport=None):
        """steps: list of bytes (send), float (sleep), "wait", ("read", S), "shut" (added last
        unless present). Returns the client's result event (or the Helper when wait=False)."""
        enc = []
        for st in steps:
            if isinstance(st, bytes):
                enc.append("send:" + st.hex())
            elif isinstance(st, (int, float)):
                enc.append("sleep:%s" % st)
            elif isinstance(st, tuple):
                enc.append("%s:%s" % st)
            else:
                enc.append(st)
        if "shut" not in enc:
            enc.append("shut")
        h = self.helper(ns or self.cli, "tcp-client", "--host", host, "--port", port,
                        "--steps", json.dumps(enc), "--timeout", timeout,
                        *(["--sport", sport] if sport else []))
        if not wait:
            return h
        return client_result(h, timeout * 3 + 5)

    def tcp_conn(self, host, port, steps, timeout=3.0, ns=None):
        """tcp_client, also returning the client's source port (None if it never connected),
        so the server's side of this very connection can be found with server_conn_of."""
        h = self.tcp_client(host, port, steps, timeout=timeout, ns=ns, wait=False)
        c = client_result(h, timeout * 3 + 5)
        ev = h.wait_event(lambda e: e.get("event") == "connected", 0)
        return c, (ev["sport"] if ev else None)

    def controld_pid(self):
        """controld's own pid: `ip netns exec` execs it, so it is the Popen's."""
        check(self.controld is not None and self.controld.poll() is None, "controld not running")
        with open("/proc/%d/comm" % self.controld.pid) as f:
            comm = f.read().strip()
        check(comm == "controld", "pid %d is %r, not controld", self.controld.pid, comm)
        return self.controld.pid

    def udp_client(self, host, port, dgrams, pause=0.1, wait_s=0.5, ns=None, sport=0):
        h = self.helper(ns or self.cli, "udp-client", "--host", host, "--port", port, "--dgrams",
                        json.dumps([d.hex() for d in dgrams]), "--pause", pause, "--wait", wait_s,
                        "--sport", sport)
        return client_result(h, len(dgrams) * pause + wait_s + 5)


class Checker:
    """A periodic TCP checker, as a game's: a new honest connection every `every` seconds to
    port in srv, expecting the server's reply; records (start, end, ok) of each."""

    def __init__(self, env, port, reply, every=0.3, timeout=1.0):
        self.env, self.port, self.reply = env, port, reply
        self.every, self.timeout = every, timeout
        self.runs = []
        self.stop_ev = threading.Event()
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self):
        n = 0
        while not self.stop_ev.is_set():
            n += 1
            payload = b"honest %d" % n
            t0 = time.monotonic()
            try:
                c = self.env.tcp_client(SRV4, self.port, [payload, ("read", 0.3)],
                                        timeout=self.timeout)
                ok = c["connected"] and c["received"] == self.reply
            except Exception:  # noqa: BLE001 - a failed probe is a failed probe
                ok = False
            self.runs.append((t0, time.monotonic(), ok))
            time.sleep(max(0.0, self.every - (time.monotonic() - t0)))

    def stop(self):
        self.stop_ev.set()
        self.t.join(10)

    def back_after(self, t_stop):
        """Seconds from t_stop to the end of the first probe that passed and started after
        it (None: none did)."""
        for t0, t1, ok in self.runs:
            if t0 >= t_stop and ok:
                return t1 - t_stop
        return None

    def failures_before(self, t):
        return [r for r in self.runs if r[1] < t and not r[2]]



def client_result(h, timeout):
    ev = h.wait_event(lambda e: e.get("event") == "result", timeout)
    if ev is None:
        raise AssertionError("client gave no result within %ss: %s" %
                             (timeout, h.stderr.decode(errors="replace")[-500:]))
    if "received" in ev:
        ev["received"] = d64(ev["received"])
    if "replies" in ev:
        ev["replies"] = [d64(r) for r in ev["replies"]]
    return ev


def server_conn(h, n=1, timeout=6.0):
    """The n-th finished connection on a TCP server (data decoded), or an AssertionError."""
    ev = h.wait_event(lambda e: e.get("event") == "conn" and e.get("id") == n, timeout)
    if ev is None:
        accepted = h.all("accept")
        got = b"".join(d64(e["data"]) for e in h.all("data") if e.get("id") == n)
        raise AssertionError("server connection %d did not end within %ss (accepted: %d, "
                             "received so far %r)" % (n, timeout, len(accepted), got[:80]))
    ev = dict(ev)
    ev["data"] = d64(ev["data"])
    return ev


def server_conn_of(h, sport, timeout=6.0):
    """The server's record of the connection from client port sport, once it ended."""
    if sport is None:
        raise AssertionError("the client never connected, so the server has no connection")
    suffix = ":%d" % sport
    acc = h.wait_event(lambda e: e.get("event") == "accept" and e.get("peer", "").endswith(suffix),
                       timeout)
    if acc is None:
        raise AssertionError("the server never accepted the connection from port %d" % sport)
    return server_conn(h, acc["id"], timeout)


def server_conn_starting(h, first, timeout=6.0):
    """The server's record of the connection whose first bytes received were `first`, once it
    ended. Unlike server_conn_of it does not rely on the client's source port, which a proxy
    layer does not keep."""
    ev = h.wait_event(lambda e: e.get("event") == "data" and d64(e["data"]).startswith(first),
                      timeout)
    if ev is None:
        raise AssertionError("no server connection received %r first" % first)
    return server_conn(h, ev["id"], timeout)


def proc_state(pid):
    """The state letter of /proc/PID/stat (R, S, T, Z, ...), or None once the pid is gone: a
    killed child of a stopped parent stays a zombie, which kill(pid, 0) still finds."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def dgrams(h):
    return [d64(e["data"]) for e in h.all("dgram")]


def fill_disk(path):
    """Write path until its file system says it is full (the full-disk tests)."""
    chunk = b"\0" * 65536
    with open(path, "wb", buffering=0) as f:
        while True:
            try:
                f.write(chunk)
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                chunk = chunk[:len(chunk) // 2]
                if not chunk:
                    return


def tls_certs(env, names=("proxy", "service")):
    """fgxtls.py's certificates (`fgxtls.py certs`: the proxy's, the service's, an expired one),
    made once in the test's directory: name -> (certificate, key)."""
    d = os.path.join(env.tmp, "certs")
    if not os.path.isdir(d):
        os.makedirs(d)
        sh(PY, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fgxtls.py"), "certs", d)
    return {n: (os.path.join(d, n + ".pem"), os.path.join(d, n + ".key")) for n in names}



def nginx_start(env, conf, prefix, ports):
    """nginx with the configuration file conf (its prefix directory prefix) in the server's
    namespace; returns its Popen once every port in ports listens there (fails after 5 s)."""
    p = subprocess.Popen(["ip", "netns", "exec", env.srv, "nginx", "-c", conf, "-p", prefix],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def listening():
        return all(subprocess.run(["ip", "netns", "exec", env.srv, "ss", "-Htln",
                                   "sport = :%d" % pt], capture_output=True,
                                  text=True).stdout.strip() != "" for pt in ports)

    if not wait_until(listening, timeout=5):
        p.kill()
        raise AssertionError("nginx did not start: %s" % p.communicate()[1][-500:])
    return p

# ---- assertions -----------------------------------------------------------------------------------

def check(cond, msg, *fmt):
    if not cond:
        raise AssertionError(msg % fmt if fmt else msg)


def assert_passed(c, s, sent, reply=b""):
    check(c["connected"], "client could not connect: %r", c)
    check(s["data"] == sent, "server received %r, expected %r (end %s)", s["data"][:200],
          sent[:200], s["end"])
    check(s["end"] == "eof", "server connection ended by %s, expected eof", s["end"])
    check(c["end"] == "eof", "client connection ended by %s, expected eof", c["end"])
    if reply:
        check(c["received"] == reply, "client received %r, expected %r", c["received"], reply)


def assert_blocked(c, s, forbidden=EVIL, server_reset=True):
    """A TCP block: the matching bytes never reach the other end, and both ends see a reset."""
    check(c["connected"], "client could not connect: %r", c)
    check(forbidden not in s["data"], "server received the matching bytes: %r", s["data"][:200])
    check(forbidden not in c.get("received", b""), "client received the matching bytes: %r",
          c.get("received", b"")[:200])
    check(c["end"] == "reset", "client connection ended by %s, expected reset", c["end"])
    if server_reset:
        check(s["end"] == "reset", "server connection ended by %s, expected reset", s["end"])


def wait_until(fn, timeout=3.0, step=0.1):
    """Poll fn() until it returns a true value; returns the last value."""
    deadline = time.monotonic() + timeout
    while True:
        v = fn()
        if v or time.monotonic() >= deadline:
            return v
        time.sleep(step)


# ---- the runner ------------------------------------------------------------------------------------

_TESTS = []


def test(fn):
    _TESTS.append(fn)
    return fn


def run_module(module, setup=None, controld_args=()):
    """Run every @test of the calling module in order against one Env; print results.
    controld_args: extra options for every start of controld in this module."""
    sys.stdout.reconfigure(line_buffering=True)
    only = os.environ.get("FGX_IT_ONLY")
    tests = [t for t in _TESTS if not only or re.search(only, t.__name__)]
    counts = {"passed": 0, "failed": 0, "skipped": 0}

    def finish():
        print("RESULT passed=%d failed=%d skipped=%d" %
              (counts["passed"], counts["failed"], counts["skipped"]))

    if os.geteuid() != 0:
        print("  SKIP %s: integration tests need root (network namespaces, nftables)" % module)
        counts["skipped"] = len(tests)
        finish()
        return 0
    cleanup_stale()
    env = Env(module)
    env.controld_args = [str(a) for a in controld_args]
    atexit.register(env.down)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: sys.exit(1))
    try:
        try:
            env.up()
            env.start_controld()
            if setup:
                setup(env)
        except Exception as e:  # noqa: BLE001 - every test of the module fails with the reason
            for t in tests:
                print("  FAIL %s.%s: set-up failed: %s" % (module, t.__name__,
                                                          str(e).splitlines()[0]))
            print("    set-up: %s" % e)
            counts["failed"] = len(tests)
            return 1
        for t in tests:
            t0 = time.monotonic()
            env.log_offset = os.path.getsize(env.log_path) if os.path.exists(env.log_path) else 0
            try:
                t(env)
                counts["passed"] += 1
                print("  PASS %s.%s (%.1fs)" % (module, t.__name__, time.monotonic() - t0))
            except Exception as e:  # noqa: BLE001
                counts["failed"] += 1
                print("  FAIL %s.%s (%.1fs): %s" % (module, t.__name__, time.monotonic() - t0,
                                                    e))
                if not isinstance(e, AssertionError) or os.environ.get("FGX_IT_VERBOSE"):
                    traceback.print_exc(file=sys.stdout)
                if os.environ.get("FGX_IT_VERBOSE"):
                    print(env.log_tail(25))
            finally:
                for h in env.helpers:
                    h.stop()
                env.helpers = []
                if env.controld is None or env.controld.poll() is not None:
                    if env.controld is not None:
                        print("    controld died during %s (exit %s):\n%s" %
                              (t.__name__, env.controld.returncode, env.log_tail(15)))
                    # a test that left controld dead: bring it back for the next one
                    try:
                        env.controld = None
                        env.start_controld()
                    except Exception as e:  # noqa: BLE001
                        print("    controld could not be restarted: %s" % e)
        # A sanitizer build reports memory errors and leaks of the daemons in their log, often
        # only at exit: stop controld (and with it the worker) and read the whole log.
        env.stop_controld(signal.SIGTERM, check=False)
        report = env.sanitizer_report()
        if report:
            counts["failed"] += 1
            print("  FAIL %s: sanitizer report in the daemons' log:\n%s" % (module, report))
        return 1 if counts["failed"] else 0
    finally:
        finish()
        env.down()
