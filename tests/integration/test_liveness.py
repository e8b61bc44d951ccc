#!/usr/bin/python3
"""Integration: hung workers (issue 24, item 2). A worker that is alive but does not work
(SIGSTOP: the whole process; ptrace's PTRACE_INTERRUPT: one data-path thread only, the others
and the control thread going on) is noticed by controld's heartbeat within 1 s and replaced
(SIGKILL, a new process with the full state) within 2 s: a TCP checker through the service
works again within ~3 s of the stop, the health log says why, `worker list` shows the new pid
and one more restart, evil is still blocked after, and `worker restart` on a hung worker exits
0 saying what it replaced."""
import ctypes
import json
import os
import re
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fgxit as it  # noqa: E402
from fgxit import EVIL, SRV4, check, test  # noqa: E402

REPLY = b"ok"
BACK_S = 3.0  # the checker passes again within this of the stop (1 s to notice, 2 s to replace)


def workers(env):
    doc = env.ctl("worker", "list")
    check(isinstance(doc, list), "worker list --json: %r", doc)
    return {w["kind"]: w for w in doc}


def health_entry(env, kind, pattern, timeout=4.0):
    """The first controld log line `health: service 0 KIND: ...` matching pattern since the
    test began (the note is logged as it is made)."""
    rx = re.compile(r"health: service 0 %s: (.*%s.*)" % (re.escape(kind), pattern))

    def find():
        with open(env.log_path, "rb") as f:
            f.seek(env.log_offset)
            for line in f.read().decode(errors="replace").splitlines():
                m = rx.search(line)
                if m:
                    return m
        return None

    m = it.wait_until(find, timeout=timeout)
    check(m, "no health entry %s /%s/ in controld's log:\n%s", kind, pattern, env.log_tail(30))
    return m


def new_worker(env, kind, old_pid, timeout=4.0):
    def running():
        try:
            w = workers(env).get(kind)
        except it.CtlError:
            return None
        return w if w and w["pid"] not in (0, old_pid) and w["state"] == "running" else None

    w = it.wait_until(running, timeout=timeout)
    check(w, "no new running %s worker: %r", kind, workers(env))
    return w


def blocked(env, port):
    c, _ = env.tcp_conn(SRV4, port, [b"x " + EVIL, 0.3], timeout=1.5)
    return c["connected"] and c["end"] == "reset"


def stop_and_replace(env, kind, name, layer):
    """SIGSTOP the worker of `kind` while a checker runs through a `layer` service; checks
    everything the issue asks of a replacement. Returns the health entry's match."""
    _, port = env.service(name, "tcp", extra=("--layer", layer))
    env.filter(name)
    srv = env.tcp_server(port, idle=5, reply=REPLY)
    check(blocked(env, port), "evil passed before the stop")
    before = workers(env)[kind]
    chk = it.Checker(env, port, REPLY)
    try:
        it.wait_until(lambda: len(chk.runs) >= 2 and all(r[2] for r in chk.runs), timeout=3)
        check(chk.runs and all(r[2] for r in chk.runs), "checker failed before the stop: %r",
              chk.runs)
        os.kill(before["pid"], signal.SIGSTOP)
        t_stop = time.monotonic()
        m = health_entry(env, "worker-hung", r"pid %d replaced: no heartbeat for" % before["pid"])
        w = new_worker(env, kind, before["pid"])
        it.wait_until(lambda: chk.back_after(t_stop) is not None, timeout=BACK_S + 3)
    finally:
        chk.stop()
    took = chk.back_after(t_stop)
    check(took is not None and took <= BACK_S, "the checker passed again %s s after the stop",
          took)
    secs = float(re.search(r"no heartbeat for ([0-9.]+) s", m.group(1)).group(1))
    check(1.0 <= secs < 2.0, "noticed after %.1f s: %s", secs, m.group(1))
    check(w["restarts"] == before["restarts"] + 1, "restarts %r -> %r", before["restarts"],
          w["restarts"])
    w = it.wait_until(lambda: (lambda x: x if x.get("heartbeat_age_ms") is not None else None)(
        workers(env)[kind]), timeout=2) or w
    check(w.get("heartbeat_age_ms") is not None and w["heartbeat_age_ms"] < 1000,
          "the new worker's heartbeat: %r", w)
    check("no heartbeat" in (w.get("replaced_why") or ""), "replaced_why: %r", w)
    check(it.wait_until(lambda: it.proc_state(before["pid"]) in (None, "Z"), timeout=2),
          "the hung worker %d was not killed", before["pid"])
    check(blocked(env, port), "evil passes after the replacement")
    del srv
    return m


@test
def stopped_nfqworker_is_replaced(env):
    stop_and_replace(env, "nfq", "lv-nfq", "nfqueue")


@test
def stopped_proxyworker_is_replaced(env):
    stop_and_replace(env, "proxy", "lv-px", "proxy")


@test
def stopped_scriptworker_is_replaced(env):
    """The script worker's parent answers on its own socket; a stopped one is replaced, and
    scripts judge again (a scripted nfqueue service blocks by its script after)."""
    import scriptfiles as sf  # noqa: E402

    before = workers(env)["script"]
    os.kill(before["pid"], signal.SIGSTOP)
    t_stop = time.monotonic()
    m = health_entry(env, "worker-hung", r"scriptworker pid %d replaced: no heartbeat for" %
                     before["pid"])
    w = new_worker(env, "script", before["pid"])
    took = time.monotonic() - t_stop
    check(took <= BACK_S, "the new script worker ran %.1f s after the stop", took)
    check(w["restarts"] == before["restarts"] + 1, "restarts %r -> %r", before["restarts"],
          w["restarts"])
    check("no heartbeat" in m.group(1), "%s", m.group(1))
    _, port = env.service("lv-sw", "tcp", extra=("--layer", "nfqueue"))
    sf.firegex_example_judges(env, "lv-sw", port, 0.2)


PTRACE_SEIZE, PTRACE_INTERRUPT, PTRACE_DETACH = 0x4206, 0x4207, 17


def thread_of(pid, name):
    for tid in os.listdir("/proc/%d/task" % pid):
        with open("/proc/%d/task/%s/comm" % (pid, tid)) as f:
            if f.read().strip() == name:
                return int(tid)
    raise AssertionError("no thread %s in %d: %r" % (name, pid, os.listdir("/proc/%d/task" % pid)))


@test
def one_stuck_packet_thread_is_noticed(env):
    """A real stuck thread: ptrace stops one packet thread (PTRACE_SEIZE, PTRACE_INTERRUPT:
    no group stop, the process's other threads run on and the control side answers the
    heartbeat), as a deadlock or a spin inside one loop turn would leave it. The heartbeat's
    per-thread progress names it, and the worker is replaced."""
    _, port = env.service("lv-thr", "tcp", extra=("--layer", "nfqueue"))
    env.filter("lv-thr")
    env.tcp_server(port, idle=5, reply=REPLY)
    before = workers(env)["nfq"]
    tid = thread_of(before["pid"], "nfq-pkt-1")
    libc = ctypes.CDLL(None, use_errno=True)
    libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
    if libc.ptrace(PTRACE_SEIZE, tid, None, None) != 0:
        raise AssertionError("PTRACE_SEIZE %d: %s" % (tid, os.strerror(ctypes.get_errno())))
    try:
        check(libc.ptrace(PTRACE_INTERRUPT, tid, None, None) == 0, "PTRACE_INTERRUPT failed")
        t_stop = time.monotonic()
        m = health_entry(env, "worker-hung", r"pid %d replaced: thread 1 made no progress for"
                         % before["pid"])
        took = time.monotonic() - t_stop
    finally:
        # SIGKILL ends the tracee too, but its process is reaped only once its tracer (this
        # process) has waited for it
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                if os.waitpid(tid, os.WNOHANG | 0x40000000)[0] == tid:  # __WALL
                    break
            except ChildProcessError:
                break
            time.sleep(0.02)
    w = new_worker(env, "nfq", before["pid"])
    secs = float(re.search(r"no progress for ([0-9.]+) s", m.group(1)).group(1))
    check(1.0 <= secs < 2.5 and took <= BACK_S, "noticed after %.1f s (%.1f s): %s", secs, took,
          m.group(1))
    check(w["restarts"] == before["restarts"] + 1, "restarts %r -> %r", before["restarts"],
          w["restarts"])
    c, _ = env.tcp_conn(SRV4, port, [b"hello", ("read", 0.3)], timeout=2)
    check(c["received"] == REPLY, "after: %r", c)
    check(blocked(env, port), "evil passes after the replacement")


@test
def idle_worker_is_not_replaced(env):
    """An idle box (threads blocked in poll/epoll) is alive: nothing is replaced in 3 s."""
    before = workers(env)
    time.sleep(3)
    after = workers(env)
    for k in ("nfq", "proxy", "script"):
        check(after[k]["pid"] == before[k]["pid"] and after[k]["restarts"] == before[k]["restarts"],
              "%s replaced while idle: %r -> %r", k, before[k], after[k])
        check(after[k].get("heartbeat_age_ms") is not None and after[k]["heartbeat_age_ms"] < 1000,
              "%s heartbeat: %r", k, after[k])


@test
def restart_of_a_stopped_worker_says_replaced(env):
    """worker restart on a stopped worker (the issue's rc 6): exit 0, the old and new pid."""
    for kind in ("nfq", "proxy", "script"):
        before = workers(env)[kind]
        os.kill(before["pid"], signal.SIGSTOP)
        p = env.ctl_raw("worker", "restart", kind, json_out=False, timeout=20)
        check(p.returncode == 0, "worker restart %s -> %d: %s %s", kind, p.returncode, p.stdout,
              p.stderr)
        now = workers(env)[kind]
        check(re.search(r"%s: replaced pid %d with pid %d" % (kind, before["pid"], now["pid"]),
                        p.stdout), "worker restart %s said:\n%s", kind, p.stdout)
        check(now["pid"] != before["pid"] and now["state"] == "running", "%r", now)
        check(it.wait_until(lambda: it.proc_state(before["pid"]) in (None, "Z"), timeout=2),
              "the stopped %s worker %d lives on", kind, before["pid"])
    # and a healthy one: restarted the planned way, exit 0 too
    before = workers(env)["nfq"]
    p = env.ctl_raw("worker", "restart", "nfq", json_out=False, timeout=20)
    check(p.returncode == 0 and "nfq: replaced pid %d" % before["pid"] in p.stdout,
          "worker restart nfq -> %d: %s %s", p.returncode, p.stdout, p.stderr)


@test
def worker_killed_while_a_change_waits_is_seen_at_once(env):
    """A worker that dies while controld waits for it to confirm a change (bench/soak found
    this: the push waited out its timeout, and the NFQUEUE services stayed unserved 5-8 s) is
    seen at once: a new worker runs within 1 s of the kill, the change's client hears within
    that time, and the change is in force on the new worker."""
    import threading

    _, port = env.service("lv-push", "tcp", extra=("--layer", "nfqueue"))
    env.filter("lv-push")
    srv = env.tcp_server(port, idle=5, reply=REPLY)
    check(blocked(env, port), "evil passed before the stop")
    before = workers(env)["nfq"]
    os.kill(before["pid"], signal.SIGSTOP)  # it takes the push and never answers
    res = {}

    def add():
        res["p"] = env.ctl_raw("filter", "add", "lv-push", "second[0-9]+", timeout=30)
        res["t"] = time.monotonic()

    th = threading.Thread(target=add)
    th.start()
    time.sleep(0.4)  # the push is on its way, well before any heartbeat verdict (1 s)
    os.kill(before["pid"], signal.SIGKILL)
    t_kill = time.monotonic()
    w = new_worker(env, "nfq", before["pid"], timeout=10)
    t_new = time.monotonic() - t_kill
    th.join(30)
    check("p" in res, "filter add did not return")
    p, t_ans = res["p"], res["t"] - t_kill
    check(t_new <= 1.0, "the new nfq worker ran %.2f s after the kill", t_new)
    check(t_ans <= 1.0, "filter add answered %.2f s after the kill: %s %s", t_ans, p.stdout,
          p.stderr)
    check(p.returncode in (0, 6), "filter add -> %d: %s %s", p.returncode, p.stdout, p.stderr)
    check(w["restarts"] == before["restarts"] + 1, "restarts %r -> %r", before["restarts"],
          w["restarts"])
    check(any(f["regex"] == "second[0-9]+" for f in env.filters("lv-push")),
          "the change is not stored: %r", env.filters("lv-push"))

    def second_blocked():
        c, _ = env.tcp_conn(SRV4, port, [b"x second1337", 0.3], timeout=1.5)
        return c["connected"] and c["end"] == "reset"

    check(it.wait_until(second_blocked, timeout=3), "the change is not in force after the kill")
    check(blocked(env, port), "evil passes after the replacement")
    del srv


class StoreWriter:
    """Another process's write transaction on controld's own state store (liblmdb through
    ctypes, as controld opens it): while it is open, controld's next write waits in the kernel
    (a futex) as long as it lasts: a real block of the control thread in a system call, the
    data path going on, the shape of the soak's 41 s of silence."""

    def __init__(self, state_dir):
        self.lib = ctypes.CDLL("liblmdb.so.0", use_errno=True)
        self.env, self.txn = ctypes.c_void_p(), ctypes.c_void_p()
        check(self.lib.mdb_env_create(ctypes.byref(self.env)) == 0, "mdb_env_create")
        self.lib.mdb_env_set_maxdbs(self.env, 16)
        rc = self.lib.mdb_env_open(self.env, state_dir.encode(), 0, 0o600)
        check(rc == 0, "mdb_env_open %s: %d", state_dir, rc)

    def __enter__(self):
        rc = self.lib.mdb_txn_begin(self.env, None, 0, ctypes.byref(self.txn))
        check(rc == 0, "mdb_txn_begin: %d", rc)
        return self

    def __exit__(self, *exc):
        self.lib.mdb_txn_abort(self.txn)
        self.lib.mdb_env_close(self.env)


@test
def blocked_control_loop_is_said_and_answers(env):
    """controld's control thread blocked in a system call for 5 s (its store's write lock held
    by another process while a change waits for it): the data path goes on; within ~2 s the
    log says the loop does not turn and where the thread waits; every request meanwhile gets
    an answer at once (busy, saying so; nothing done), not fgexctl's timeout as in the soak:
    with --wait 0 fgexctl fails at once, by default it says it waits and sends the request
    again until the loop goes on; afterwards the change completes, requests are served again
    and the health log says how long the loop was blocked."""
    _, port = env.service("lv-blk", "tcp")
    env.filter("lv-blk")
    srv = env.tcp_server(port, reply=REPLY)
    w = StoreWriter(env.state_dir)
    with w:
        t0 = time.monotonic()
        change = subprocess.Popen([os.path.join(env.bin, "fgexctl"), "-c", env.url, "filter",
                                   "add", "lv-blk", "blk-never[0-9]"], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        line = it.wait_until(lambda: re.search(
            r"control loop has not turned for [0-9.]+ s \(in a request \(filter add\); the "
            r"control thread is [a-z ]+, system call (futex|[0-9]+)", env.log_tail(50)),
            timeout=4.0, step=0.1)
        check(line, "no report of the blocked loop in controld's log:\n%s", env.log_tail(30))
        # the data path goes on meanwhile
        check(blocked(env, port), "evil passes while the control loop is blocked")
        c, sport = env.tcp_conn(SRV4, port, [b"honest"])
        it.assert_passed(c, it.server_conn_of(srv, sport), b"honest")
        waiter = subprocess.Popen([os.path.join(env.bin, "fgexctl"), "-c", env.url, "--json",
                                   "status"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True)
        for _ in range(3):
            t = time.monotonic()
            p = env.ctl_raw("--wait", "0", "status", timeout=15)
            took = time.monotonic() - t
            check(took < 1.5, "status took %.1f s while the loop was blocked (no answer)", took)
            check(p.returncode != 0 and "control loop has been blocked for" in p.stderr and
                  "was not run" in p.stderr, "status while blocked: exit %d %r", p.returncode,
                  p.stderr)
        held = time.monotonic() - t0
        time.sleep(max(0.0, 5.0 - held))
    out, err = change.communicate(timeout=15)
    check(change.returncode == 0, "the change that waited: exit %d %s", change.returncode, err)
    out, err = waiter.communicate(timeout=15)
    check(waiter.returncode == 0 and json.loads(out).get("version") and
          "waiting for controld: its control loop is blocked" in err,
          "status sent while blocked, with the default --wait: exit %d %r %r",
          waiter.returncode, out[:200], err)
    m = health_entry(env, "control-blocked", r"was blocked for")
    time.sleep(0.2)  # past the watch's last receive (10 ms) once the loop went on
    st = env.ctl("status")
    check(st.get("version"), "status after the block: %r", st)
    secs = float(re.search(r"blocked for ([0-9.]+) s", m.group(1)).group(1))
    check(4.5 <= secs <= 8.0, "blocked for %.1f s, not ~5: %s", secs, m.group(1))
    check("in a request (filter add)" in m.group(1) and "answered with an error" in m.group(1), "%s",
          m.group(1))
    check(int(re.search(r", (\d+) request", m.group(1)).group(1)) >= 3, "%s", m.group(1))
    del srv


if __name__ == "__main__":
    sys.exit(it.run_module("test_liveness"))
