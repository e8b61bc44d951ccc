"""Benchmark harness library: network namespaces with guaranteed teardown, controld and fgexctl,
load generators, /proc sampling, and the median/range tables and CSV every bench script prints.

Stage: measurement only. Every byte of traffic runs inside namespaces created here (names
fgx-bench-<pid>-*), so the host's own firewall and network are never touched; stale namespaces
of runs whose process is gone are removed at start.

Topologies:
  loopback  one namespace; client and server talk over its lo (MTU 64 KiB, 127.0.0.1)
  veth      a server namespace (controld, servers) and a client namespace joined by a veth pair
            at MTU 1500 (10.78.0.1 server, 10.78.0.2 client)
"""
import atexit
import csv
import json
import os
import random
import re
import shutil
import signal
import statistics
import string
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PY = "/usr/bin/python3"
NS_PREFIX = "fgx-bench-"
SRV4, CLI4 = "10.78.0.1", "10.78.0.2"
SRV_IF, CLI_IF = "fgxb-s", "fgxb-c"
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def log(msg):
    sys.stderr.write("[bench %s] %s\n" % (time.strftime("%H:%M:%S"), msg))
    sys.stderr.flush()


def sh(*argv, check=True, timeout=30, input=None):
    p = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=timeout,
                       input=input)
    if check and p.returncode != 0:
        raise RuntimeError("%s -> %d: %s" % (" ".join(map(str, argv)), p.returncode,
                                              p.stderr.strip()))
    return p


# ---- binaries ------------------------------------------------------------------------------------

def fgx_bin(explicit=None):
    """Where controld/nfqworker/fgexctl are: --bin, $FGX_BIN, else build/bin."""
    d = explicit or os.environ.get("FGX_BIN") or os.path.join(ROOT, "build", "bin")
    return os.path.abspath(d)


def bench_bin(name):
    """A C helper built by bench/build.sh into build/bench/bin (built on demand)."""
    d = os.environ.get("FGX_BENCH_BIN") or os.path.join(ROOT, "build", "bench", "bin")
    path = os.path.join(d, name)
    src = os.path.join(HERE, name + ".c")
    if not os.path.exists(path) or (os.path.exists(src) and
                                    os.path.getmtime(src) > os.path.getmtime(path)):
        log("building %s" % name)
        sh(os.path.join(HERE, "build.sh"), name, timeout=300)
    return path


# ---- namespaces with guaranteed teardown -------------------------------------------------------

def _pid_alive(pid):
    """True while pid runs; a zombie (killed, not yet reaped) counts as gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            st = f.read()
    except OSError:
        return False
    return st[st.rindex(")") + 2:][:1] not in ("Z", "X")


def _kill_ns_pids(ns):
    p = sh("ip", "netns", "pids", ns, check=False)
    for tok in p.stdout.split():
        try:
            os.kill(int(tok), signal.SIGKILL)
        except (ValueError, ProcessLookupError):
            pass


def _del_ns(ns):
    _kill_ns_pids(ns)
    for _ in range(50):
        if sh("ip", "netns", "del", ns, check=False).returncode == 0:
            return
        time.sleep(0.1)
    log("warning: could not delete namespace %s" % ns)


def cleanup_stale():
    """Remove fgx-bench-<pid>-* namespaces whose creating process is gone."""
    for line in sh("ip", "netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        m = re.match(re.escape(NS_PREFIX) + r"(\d+)-", name)
        if m and not _pid_alive(int(m.group(1))):
            log("removing stale namespace %s" % name)
            _del_ns(name)
    # Temp dirs (controld state, logs) of runs that were killed outright.
    tmp = tempfile.gettempdir()
    for name in os.listdir(tmp):
        m = re.match(re.escape(NS_PREFIX) + r"(\d+)-", name)
        if m and not _pid_alive(int(m.group(1))):
            shutil.rmtree(os.path.join(tmp, name), ignore_errors=True)


_cleanups = []
_cleanup_lock = threading.Lock()


def _run_cleanups():
    with _cleanup_lock:
        while _cleanups:
            fn = _cleanups.pop()
            try:
                fn()
            except Exception as e:  # noqa: BLE001 - teardown must go on
                log("teardown: %s" % e)


def _on_signal(signum, _frame):
    # SystemExit unwinds every `with` and then atexit runs: teardown on Ctrl-C and kill alike.
    raise SystemExit(128 + signum)


atexit.register(_run_cleanups)
for _s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(_s, _on_signal)


def on_teardown(fn):
    """Run fn at teardown (LIFO), however the process ends short of SIGKILL."""
    with _cleanup_lock:
        _cleanups.append(fn)
    return fn


class World:
    """The namespaces of one run. srv/cli are namespace names (equal for loopback); addr is
    where the client reaches the server."""

    def __init__(self, topology, tag="run"):
        if topology not in ("loopback", "veth"):
            raise ValueError("topology must be loopback or veth")
        self.topology = topology
        base = "%s%d-%s" % (NS_PREFIX, os.getpid(), tag[:8])
        if topology == "loopback":
            self.srv = self.cli = base + "-lo"
            self.addr = "127.0.0.1"
        else:
            self.srv, self.cli = base + "-s", base + "-c"
            self.addr = SRV4
        self.made = []
        self.tmp = tempfile.mkdtemp(prefix="%s%d-" % (NS_PREFIX, os.getpid()))
        # searchable by the workers' user (fgex), who dial controld in run/ after their drop
        os.chmod(self.tmp, 0o711)
        on_teardown(lambda: shutil.rmtree(self.tmp, ignore_errors=True))

    def __enter__(self):
        self.up()
        return self

    def __exit__(self, *exc):
        self.down()
        return False

    def up(self):
        cleanup_stale()
        on_teardown(self.down)
        for ns in dict.fromkeys((self.srv, self.cli)):
            sh("ip", "netns", "add", ns)
            self.made.append(ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            # The namespace's own sysctls, never the host's: short-connection load needs many
            # ports and TIME_WAIT reuse, and deep accept queues. (The proxy's onward ports are
            # privileged now, 1-1023, px_accept.c: any client port range works; this one is
            # kept so that results compare with earlier runs.)
            for k, v in (("net.ipv4.ip_local_port_range", "32768 65000"),
                         ("net.ipv4.tcp_tw_reuse", "1"),
                         ("net.core.somaxconn", "8192"),
                         ("net.ipv4.tcp_max_syn_backlog", "8192")):
                sh("ip", "netns", "exec", ns, "sysctl", "-q", "-w", "%s=%s" % (k, v), check=False)
        if self.topology == "veth":
            sh("ip", "-n", self.srv, "link", "add", SRV_IF, "mtu", "1500", "type", "veth",
               "peer", "name", CLI_IF, "mtu", "1500", "netns", self.cli)
            mac = {}
            for ns, ifn, a4 in ((self.srv, SRV_IF, SRV4), (self.cli, CLI_IF, CLI4)):
                sh("ip", "-n", ns, "addr", "add", a4 + "/24", "dev", ifn)
                sh("ip", "-n", ns, "link", "set", ifn, "up")
                mac[ns] = json.loads(sh("ip", "-n", ns, "-j", "link", "show", ifn).stdout)[0][
                    "address"]
            # Static neighbours: no ARP in the first packets of a measurement.
            sh("ip", "-n", self.srv, "neigh", "replace", CLI4, "lladdr", mac[self.cli], "dev",
               SRV_IF, "nud", "permanent")
            sh("ip", "-n", self.cli, "neigh", "replace", SRV4, "lladdr", mac[self.srv], "dev",
               CLI_IF, "nud", "permanent")
        return self

    def down(self):
        while self.made:
            _del_ns(self.made.pop())

    def argv(self, ns, *argv):
        return ["ip", "netns", "exec", ns] + [str(a) for a in argv]

    def on_srv(self, *argv):
        return self.argv(self.srv, *argv)

    def on_cli(self, *argv):
        return self.argv(self.cli, *argv)

    def spawn(self, ns, *argv, log_name=None, **kw):
        """A long-lived process in ns, killed at teardown. Its output goes to a log file in the
        run's temp dir (never a pipe nobody drains)."""
        out = open(os.path.join(self.tmp, log_name or "%s.log" % os.path.basename(str(argv[0]))),
                   "ab")
        p = subprocess.Popen(self.argv(ns, *argv), stdin=subprocess.DEVNULL, stdout=out,
                             stderr=subprocess.STDOUT, **kw)
        out.close()
        on_teardown(lambda: stop_proc(p))
        return p

    def nfq_counters(self):
        return nfq_counters(self.srv)


def stop_proc(p, timeout=3):
    if p.poll() is None:
        p.terminate()
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout)


# ---- kernel queue counters -----------------------------------------------------------------------

def nfq_counters(ns):
    """{queue: {total, dropped, user_dropped, copy_range}} from the namespace's
    /proc/net/netfilter/nfnetlink_queue (empty when no queue is bound)."""
    p = sh("ip", "netns", "exec", ns, "cat", "/proc/net/netfilter/nfnetlink_queue", check=False)
    res = {}
    for line in p.stdout.splitlines():
        f = line.split()
        if len(f) < 7:
            continue
        res[int(f[0])] = {"total": int(f[2]), "copy_range": int(f[4]), "dropped": int(f[5]),
                          "user_dropped": int(f[6]), "id_sequence": int(f[7])}
    return res


def nfq_drops(before, after):
    """Kernel drops (queue full + netlink send failures) between two readings. A queue that was
    re-bound (worker restarted) starts again from zero: a counter that went down counts from 0."""
    total = 0
    for q, a in after.items():
        b = before.get(q, {"dropped": 0, "user_dropped": 0})
        for k in ("dropped", "user_dropped"):
            total += a[k] - b[k] if a[k] >= b[k] else a[k]
    return total


def nfq_queued(before, after):
    """Packets queued between two readings (the queues' id_sequence advances by one per packet):
    proof that a row really went through the queue, and that the baseline did not."""
    total = 0
    for q, a in after.items():
        b = before.get(q, {"id_sequence": 0})["id_sequence"]
        total += a["id_sequence"] - b if a["id_sequence"] >= b else a["id_sequence"]
    return total


# ---- controld and fgexctl ------------------------------------------------------------------------

class CtlError(RuntimeError):
    pass


class Fgex:
    """One controld in the server namespace, with state and run dirs of its own."""

    def __init__(self, world, bindir=None, threads=1, log_level="warn", extra=()):
        self.w = world
        self.extra = [str(a) for a in extra]  # more controld options (bench/web-idle)
        self.bin = fgx_bin(bindir)
        for b in ("controld", "nfqworker", "fgexctl"):
            if not os.access(os.path.join(self.bin, b), os.X_OK):
                raise SystemExit("missing %s/%s: build first (make, or --bin DIR)" % (self.bin, b))
        self.threads = threads
        self.log_level = log_level
        self.state = os.path.join(world.tmp, "state")
        self.run = os.path.join(world.tmp, "run")
        os.makedirs(self.state, exist_ok=True)
        os.makedirs(self.run, exist_ok=True)
        self.url = "ipc://" + os.path.join(self.run, "control.sock")
        self.proc = None

    def start(self, timeout=20):
        self.proc = self.w.spawn(self.w.srv, os.path.join(self.bin, "controld"), "--config",
                                 "/dev/null", "--state-dir",
                                 self.state, "--run-dir", self.run, "--threads", self.threads,
                                 "--foreground", "--log-level", self.log_level, *self.extra,
                                 log_name="controld.log")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit("controld exited (%d); log: %s" % (
                    self.proc.returncode, os.path.join(self.w.tmp, "controld.log")))
            try:
                st = self.status()
                if any(w.get("kind") == "nfq" and w.get("state") == "running"
                       for w in st.get("workers", [])):
                    return self
            except CtlError:
                pass
            time.sleep(0.1)
        raise SystemExit("controld did not come up with a running nfq worker in %ds" % timeout)

    def stop(self):
        if self.proc:
            stop_proc(self.proc, 10)
            self.proc = None

    def ctl(self, *args, json_out=True, check=True, timeout=120):
        argv = [os.path.join(self.bin, "fgexctl"), "-c", self.url]
        if json_out:
            argv.append("--json")
        argv += [str(a) for a in args]
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        if check and p.returncode != 0:
            raise CtlError("fgexctl %s -> %d: %s" % (" ".join(map(str, args)), p.returncode,
                                                      p.stderr.strip()))
        if json_out and p.returncode == 0 and p.stdout.strip():
            return json.loads(p.stdout)
        return p

    def status(self):
        return self.ctl("status", timeout=10)

    def workers(self, kind="nfq"):
        return [w for w in self.status().get("workers", []) if w.get("kind") == kind]

    def worker_pids(self, kind="nfq"):
        """The worker's pid and its threads' parent: one process per kind."""
        return [w["pid"] for w in self.workers(kind) if w.get("pid", 0) > 0]

    def service_add(self, name, port, layer="nfqueue", proto="tcp"):
        # fail_open stays off: every packet must go through the filter. Capture as --capture
        # says (on by default, as fgex's own default).
        extra = ["--capture", CAPTURE] if CAPTURE else []
        return self.ctl("service", "add", name, "--proto", proto, "--port", port, "--layer", layer,
                        *extra)

    def filters_add(self, svc, patterns, progress=True):
        """Add patterns in one `fgexctl filter import` (a ruleset file; all or nothing). Call it
        while the service is stopped: a stopped service is not compiled, so the import costs n
        pattern checks, not a compile. Returns the new filters' ids in the patterns' order."""
        if not patterns:
            return []
        t0 = time.monotonic()
        with tempfile.NamedTemporaryFile("w", suffix=".rules", delete=False) as f:
            for pat in patterns:
                if "\n" in pat:
                    raise ValueError("a ruleset file cannot hold a line break: %r" % pat)
                f.write("both /%s/\n" % pat)
            path = f.name
        try:
            r = self.ctl("filter", "import", svc, path, timeout=600)
        finally:
            os.unlink(path)
        filters = r if isinstance(r, list) else r.get("filters", [])
        by_regex = {x["regex"]: x["id"] for x in filters}
        if progress:
            log("  %s: %d filters imported (%.1fs)" % (svc, len(patterns), time.monotonic() - t0))
        return [by_regex[p] for p in patterns]

    def restart_workers(self, kind="nfq", timeout=30):
        """`fgexctl worker restart KIND` (it returns once the new worker applied the state);
        then wait until status shows it running under a new pid."""
        old = self.workers(kind)
        self.ctl("worker", "restart", kind, json_out=False, timeout=timeout)
        old_pids = {w.get("pid") for w in old}
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                ws = self.workers(kind)
            except CtlError:
                ws = []
            if ws and all(w.get("state") == "running" and w.get("pid") not in old_pids
                          for w in ws):
                time.sleep(0.3)  # let it bind its queues and apply the pushed ruleset
                return ws
            time.sleep(0.1)
        raise CtlError("the %s worker did not come back within %ds" % (kind, timeout))

    def worker_counters(self):
        """The nfq worker's own counters from `worker list --json` (truncated, queue_drops, ...),
        counted since that worker process started. Keys it does not carry are simply absent."""
        keys = ("truncated", "queue_drops", "verdict_errors", "malformed", "rss_bytes")
        out = {}
        try:
            for w in self.ctl("worker", "list", timeout=10):
                if w.get("kind") != "nfq":
                    continue
                for k in keys:
                    if k in w:
                        out[k] = out.get(k, 0) + int(w[k])
        except CtlError:
            pass
        return out


# ---- patterns ------------------------------------------------------------------------------------

def never_patterns(n, seed=6):
    """n distinct regexes that never match the traffic the benchmarks send (random bytes from
    iperf3, fixed 'q'/'r' filler from connload): a random 8-character alphanumeric literal, a
    short bounded digit run, and a random 4-character tail. Deterministic for a seed."""
    rng = random.Random(seed)
    alnum = string.ascii_letters + string.digits
    seen = set()
    out = []
    while len(out) < n:
        head = "".join(rng.choice(alnum) for _ in range(8))
        tail = "".join(rng.choice(string.ascii_lowercase) for _ in range(4))
        pat = "%s[0-9]{1,3}%s" % (head, tail)
        if pat not in seen:
            seen.add(pat)
            out.append(pat)
    return out


# ---- /proc sampling ------------------------------------------------------------------------------

def _proc_ticks(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            s = f.read()
    except OSError:
        return None
    f = s[s.rindex(")") + 2:].split()
    return int(f[11]) + int(f[12])  # utime + stime (fields 14, 15)


def _machine_ticks():
    """(idle + iowait, all) ticks of every CPU together, from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return v[3] + v[4], sum(v[:8])  # user..steal; guest time is counted in user already


def _proc_rss(pid):
    rss = hwm = 0
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1]) * 1024
                elif line.startswith("VmHWM:"):
                    hwm = int(line.split()[1]) * 1024
    except OSError:
        pass
    return rss, hwm


class ProcSampler:
    """CPU% (all threads, user+system, 100% = one core) and peak RSS of some processes, sampled
    every interval from /proc while a measurement runs."""

    def __init__(self, pids, interval=0.1):
        self.pids = [p for p in pids if p]
        self.interval = interval
        self.stop_ev = threading.Event()
        self.peak_rss = 0
        self.t0 = self.ticks0 = self.idle0 = None
        self.cpu_pct = float("nan")
        self.idle_pct = float("nan")  # the whole machine's idle time over the run
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _ticks(self):
        return sum(_proc_ticks(p) or 0 for p in self.pids)

    def _run(self):
        while not self.stop_ev.wait(self.interval):
            self._sample_rss()

    def _sample_rss(self):
        rss = sum(_proc_rss(p)[0] for p in self.pids)
        self.peak_rss = max(self.peak_rss, rss)

    def __enter__(self):
        self.t0 = time.monotonic()
        self.ticks0 = self._ticks()
        self.idle0 = _machine_ticks()
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop_ev.set()
        self.thread.join()
        self._sample_rss()
        wall = time.monotonic() - self.t0
        if self.pids and wall > 0:
            self.cpu_pct = 100.0 * (self._ticks() - self.ticks0) / CLK_TCK / wall
        idle1 = _machine_ticks()
        if idle1[1] > self.idle0[1]:
            self.idle_pct = 100.0 * (idle1[0] - self.idle0[0]) / (idle1[1] - self.idle0[1])
        # VmHWM is the process's own lifetime peak: with a worker restarted per run it bounds the
        # run's peak from above, so report the larger of the two.
        self.peak_rss = max(self.peak_rss, sum(_proc_rss(p)[1] for p in self.pids))
        return False


# ---- load generators -----------------------------------------------------------------------------

def iperf3_server(world, port):
    p = world.spawn(world.srv, "iperf3", "-s", "-p", port, log_name="iperf3-%d.log" % port)
    wait_listen(world, world.srv, port)
    return p


def wait_listen(world, ns, port, timeout=10):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = sh(*world.argv(ns, "ss", "-Htln", "sport = :%d" % port), check=False).stdout
        if out.strip():
            return
        time.sleep(0.05)
    raise SystemExit("nothing listens on port %d in %s" % (port, ns))


def iperf3_start(world, port, seconds, streams):
    """An iperf3 client (-J) from the client namespace, started in the background."""
    argv = world.on_cli("iperf3", "-c", world.addr, "-p", port, "-t", seconds, "-P", streams,
                        "-J", "--connect-timeout", "3000")
    return subprocess.Popen([str(x) for x in argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def iperf3_finish(p, seconds):
    """Wait for an iperf3_start() client. Returns {mbps (MB/s received, 10^6 bytes),
    retransmits, snd_cpu, rcv_cpu, error}: snd_cpu and rcv_cpu are iperf3's own CPU% of the
    client and the server (100% = one core), which say which side bounded the run."""
    failed = {"mbps": float("nan"), "retransmits": None, "snd_cpu": None, "rcv_cpu": None}
    try:
        # communicate() reads stdout and stderr concurrently until exit: a long -J document never
        # fills the pipe and blocks iperf3.
        out, err = p.communicate(timeout=float(seconds) + 30)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        return dict(failed, error="timeout")
    try:
        doc = json.loads(out)
    except ValueError:
        return dict(failed, error=(err.strip() or "no JSON output")[:200])
    if "error" in doc:
        return dict(failed, error=doc["error"][:200])
    end = doc.get("end", {})
    rx = end.get("sum_received", {})
    tx = end.get("sum_sent", {})
    cpu = end.get("cpu_utilization_percent", {})
    return {"mbps": rx.get("bits_per_second", float("nan")) / 8e6,
            "retransmits": tx.get("retransmits"), "snd_cpu": cpu.get("host_total"),
            "rcv_cpu": cpu.get("remote_total"), "error": None}


def iperf3_run(world, port, seconds, streams):
    """One iperf3 client run, to its end (see iperf3_finish for what it returns)."""
    return iperf3_finish(iperf3_start(world, port, seconds, streams), seconds)


def connload(world, ns, *args, timeout=60):
    """Run the connload client in ns; it prints one JSON document."""
    p = subprocess.run(world.argv(ns, bench_bin("connload"), *args), capture_output=True,
                       text=True, timeout=timeout)
    try:
        return json.loads(p.stdout)
    except ValueError:
        return {"error": (p.stderr.strip() or "exit %d" % p.returncode)[:200]}


# ---- results -------------------------------------------------------------------------------------

def med_range(vals):
    v = [x for x in vals if x == x]  # drop NaN (failed runs)
    if not v:
        return float("nan"), float("nan"), float("nan")
    return statistics.median(v), min(v), max(v)


def fmt(x, digits=1):
    if x is None or x != x:
        return "n/a"
    if abs(x) >= 1000:
        return "{:,.0f}".format(x)
    return "%.*f" % (digits, x)


def overlap(a, b):
    """True when two (median, lo, hi) ranges overlap: no measurable difference."""
    return not (a[2] < b[1] or b[2] < a[1])


def print_table(title, header, rows):
    """rows: lists of strings. Columns padded to their widest cell."""
    cols = [header] + rows
    widths = [max(len(str(r[i])) for r in cols) for i in range(len(header))]
    print()
    print(title)
    line = "  ".join(str(h).rjust(w) if i else str(h).ljust(w)
                     for i, (h, w) in enumerate(zip(header, widths)))
    print(line)
    print("-" * len(line))
    for r in rows:
        print("  ".join(str(c).rjust(w) if i else str(c).ljust(w)
                        for i, (c, w) in enumerate(zip(r, widths))))
    sys.stdout.flush()


def write_csv(path, fields, records):
    if not path:
        return
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    with open(path, "w", newline="") as f:
        wr = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        wr.writeheader()
        for r in records:
            wr.writerow(r)
    log("wrote %s (%d rows)" % (path, len(records)))


def run_header(argv):
    """One line naming what ran, when, and on what, for the record."""
    return "# %s  %s  kernel %s  %d cpus" % (time.strftime("%Y-%m-%d %H:%M:%S %Z"),
                                           " ".join(argv), os.uname().release, os.cpu_count())


def parse_list(s, conv=int):
    return [conv(x) for x in s.split(",") if x.strip()]


# ---- layers measured side by side ---------------------------------------------------------------

class Row:
    """One thing measured in every pass: the unfiltered baseline or a layer, at a port."""

    def __init__(self, layer, port, service=None):
        self.layer, self.port, self.service = layer, port, service


# service add --capture for every service the benches make (None: fgex's default, on).
CAPTURE = None


def add_capture_arg(ap):
    ap.add_argument("--capture", choices=["on", "off"], default=None,
                    help="the services' capture (default: fgex's, on); compare the two")


def set_capture(a):
    global CAPTURE
    CAPTURE = a.capture


def add_layer_args(ap, layers_default="nfqueue"):
    ap.add_argument("-t", "--layers", default=layers_default,
                    help="layers measured against the baseline: nfqueue,proxy (or none)")
    ap.add_argument("-d", "--seconds", type=float, default=5)
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--topology", choices=["loopback", "veth"], default="veth")
    ap.add_argument("--patterns", type=int, default=50, help="never-matching patterns per service")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                    help="worker threads (controld --threads; default: online CPUs, as controld)")
    ap.add_argument("-o", "--csv", default=None)
    ap.add_argument("--bin", default=None, help="directory of controld/nfqworker/fgexctl")
    ap.add_argument("--seed", type=int, default=6)
    add_capture_arg(ap)


def layer_rows(a, world, port0, start_server):
    """Start a server per row (start_server(port)) and, unless only the baseline is asked for,
    controld with one active service per layer holding a.patterns never-matching patterns.
    Returns (fgex or None, rows); rows[0] is the baseline."""
    layers = [x for x in a.layers.split(",") if x and x != "none"]
    set_capture(a)
    rows = [Row("none", port0)]
    start_server(port0)
    fx = None
    if layers:
        fx = Fgex(world, a.bin, threads=a.threads).start()
        pats = never_patterns(a.patterns, a.seed)
        for i, layer in enumerate(layers):
            port = port0 + 1 + i
            name = "bench-%s" % layer
            try:
                fx.service_add(name, port, layer=layer)
            except CtlError as e:
                # A layer this build cannot run yet is reported and left out, not fatal.
                print("# skipped layer %s: %s" % (layer, e))
                continue
            fx.ctl("service", "stop", name)
            log("%s: adding %d patterns" % (name, len(pats)))
            fx.filters_add(name, pats)
            fx.ctl("service", "start", name, timeout=600)
            start_server(port)
            rows.append(Row(layer, port, name))
    return fx, rows


def run_passes(a, world, fx, rows, measure):
    """Every pass: restart the workers, then measure each row once, in alternating order
    (forward on odd passes, reversed on even), so drift lands on all rows as spread rather than
    as a winner. measure(row) -> dict of metrics. Adds pass, layer, queue counters, worker CPU%
    and peak RSS to each record."""
    records = []
    kinds = ["nfq"] + (["proxy"] if any(r.layer == "proxy" for r in rows) else [])
    for p in range(1, a.passes + 1):
        for kind in kinds if fx else []:
            fx.restart_workers(kind)
        for row in (rows if p % 2 else list(reversed(rows))):
            kind = "proxy" if row.layer == "proxy" else "nfq"
            pids = fx.worker_pids(kind) if fx and row.service else []
            c0 = world.nfq_counters()
            k0 = fx.worker_counters() if fx else {}
            with ProcSampler(pids) as smp:
                rec = measure(row)
            c1 = world.nfq_counters()
            k1 = fx.worker_counters() if fx else {}
            rec.update({"pass": p, "layer": row.layer, "topology": a.topology,
                        "patterns": a.patterns if row.service else 0,
                        "queued_pkts": nfq_queued(c0, c1), "queue_drops": nfq_drops(c0, c1),
                        "truncated": (k1["truncated"] - k0.get("truncated", 0)
                                      if "truncated" in k1 else None),
                        "worker_cpu_pct": smp.cpu_pct if pids else None,
                        "worker_peak_rss_mib": smp.peak_rss / 2**20 if pids else None})
            log("pass %d %-8s %s" % (p, row.layer, " ".join(
                "%s=%s" % (k, fmt(v) if isinstance(v, float) else v) for k, v in rec.items()
                if k not in ("pass", "layer", "topology"))))
            records.append(rec)
    return records


def per_pass_ratio(records, key, layer):
    """Ratio of layer's key to the baseline's in the same pass, one per pass."""
    base = {r["pass"]: r.get(key) for r in records if r["layer"] == "none"}
    out = []
    for r in records:
        if r["layer"] == layer:
            b, v = base.get(r["pass"]), r.get(key)
            out.append(v / b if b and v is not None and v == v else float("nan"))
    return out


def num(v):
    return float("nan") if v is None else float(v)
