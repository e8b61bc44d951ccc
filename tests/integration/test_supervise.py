#!/usr/bin/python3
"""Integration: worker supervision (issue 3). A worker killed with SIGKILL leaves a gap until
controld restarts it: on a fail-closed service nothing passes in that gap, on a fail-open one
traffic passes unfiltered, and in both cases filtering is back within 2 s. `worker list` and
`status` count the restart; `worker restart nfq` returns with a worker that filters.

The gap is made deterministic by stopping controld (SIGSTOP) before the kill, so it cannot
restart the worker while the test sends traffic; the 2 s are then counted from SIGCONT, when
controld can first see the death. One test also times a plain kill, from the kill itself.
controld backs its restarts off (100 ms, doubling, reset after 30 s of a stable worker), so the
kills of this module come before anything else that could lengthen it."""
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fgxit as it  # noqa: E402
from fgxit import EVIL, SRV4, SRV6, check, test  # noqa: E402

RECOVERY_S = 2.0


def nfq_entry(docs):
    nfq = [w for w in docs if w.get("kind") == "nfq"]
    check(len(nfq) == 1, "expected one nfq worker, got %r", docs)
    return nfq[0]


def worker_list(env):
    doc = env.ctl("worker", "list")
    check(isinstance(doc, list), "worker list --json is not an array: %r", doc)
    w = nfq_entry(doc)
    for k in ("kind", "pid", "state", "generation", "restarts", "queue_drops", "flows",
              "rss_bytes"):
        check(k in w, "worker list entry has no %r: %r", k, w)
    return w


def status_worker(env):
    w = nfq_entry(env.ctl("status").get("workers", []))
    for k in ("pid", "state", "generation", "restarts"):
        check(k in w, "status --json worker has no %r: %r", k, w)
    return w


def blocked_once(env, port, host, timeout=0.6):
    """One connection sending a match: True when it was blocked (reset), False otherwise
    (passed, or its bytes dropped while no worker runs)."""
    c, _ = env.tcp_conn(host, port, [b"probe " + EVIL], timeout=timeout)
    return c["connected"] and c["end"] == "reset"


def wait_filtering(env, port, t0, host=SRV4):
    """Poll with matching connections until one is blocked; returns the seconds since t0."""
    deadline = t0 + RECOVERY_S + 3  # poll a little past the limit, to report how late it was
    while time.monotonic() < deadline:
        if blocked_once(env, port, host):
            return time.monotonic() - t0
    raise AssertionError("filtering not back %.1f s after the worker was killed" %
                         (time.monotonic() - t0))


def check_restarted(env, before, old_pid):
    def new_running():
        try:
            x = worker_list(env)
        except (AssertionError, it.CtlError):  # between two workers
            return None
        return x if x["pid"] != old_pid and x["state"] == "running" else None

    w = it.wait_until(new_running, timeout=3)
    check(w, "worker list shows no new running worker: %r", worker_list(env))
    check(w["restarts"] == before["restarts"] + 1, "worker list restarts %r, expected %d",
          w["restarts"], before["restarts"] + 1)
    check(w["generation"] >= before["generation"] and w["generation"] > 0,
          "worker list generation %r after a restart (was %r)", w["generation"],
          before["generation"])
    check(it.pid_alive(w["pid"]), "worker list pid %d is not alive", w["pid"])
    st = status_worker(env)
    check(st["pid"] == w["pid"] and st["restarts"] == w["restarts"]
          and st["generation"] == w["generation"], "status %r disagrees with worker list %r",
          st, w)
    return w


def kill_in_gap(env, wpid, traffic):
    """Stop controld, SIGKILL the worker, run traffic() in the gap, let controld go on.
    Returns (traffic()'s value, the monotonic time of SIGCONT)."""
    cpid = env.controld_pid()
    os.kill(cpid, signal.SIGSTOP)
    try:
        os.kill(wpid, signal.SIGKILL)
        # a stopped parent cannot reap: the worker stays a zombie, which is dead enough
        gone = it.wait_until(lambda: it.proc_state(wpid) in (None, "Z"), timeout=3, step=0.02)
        check(gone, "worker %d still running after SIGKILL", wpid)
        res = traffic()
    finally:
        os.kill(cpid, signal.SIGCONT)
    return res, time.monotonic()


@test
def fail_closed_nothing_passes_while_worker_down(env):
    _, port = env.service("sv-closed", "tcp")
    env.filter("sv-closed")
    srv = env.tcp_server(port, idle=5)
    c, sport = env.tcp_conn(SRV4, port, [b"warm " + EVIL])
    it.assert_blocked(c, it.server_conn_of(srv, sport))
    before = worker_list(env)

    def traffic():
        hs = [env.tcp_client(host, port, [payload], timeout=1.5, wait=False)
              for host, payload in ((SRV4, b"clean while down"), (SRV6, b"x " + EVIL),
                                    (SRV4, b"y " + EVIL))]
        res = [it.client_result(h, 10) for h in hs]
        time.sleep(0.2)
        return res, list(srv.all("data"))

    (res, data), t_cont = kill_in_gap(env, before["pid"], traffic)
    check(not data, "bytes reached the server while the worker was down: %r",
          [it.d64(e["data"]) for e in data])
    for c in res:
        check(c["end"] not in ("eof",), "a client completed an exchange in the gap: %r", c)
    took = wait_filtering(env, port, t_cont)
    check(took <= RECOVERY_S, "filtering back %.2f s after controld could see the kill", took)
    check_restarted(env, before, before["pid"])
    c, sport = env.tcp_conn(SRV6, port, [b"clean after"])
    it.assert_passed(c, it.server_conn_of(srv, sport), b"clean after")


@test
def fail_open_traffic_passes_while_worker_down(env):
    _, port = env.service("sv-open", "tcp", extra=("--fail-open",))
    env.filter("sv-open")
    check(env.service_doc("sv-open")["fail_open"] is True, "fail_open not set")
    srv = env.tcp_server(port, idle=5)
    c, sport = env.tcp_conn(SRV4, port, [b"warm " + EVIL])
    it.assert_blocked(c, it.server_conn_of(srv, sport))
    before = worker_list(env)

    def traffic():
        out = []
        for host in (SRV4, SRV6):
            sent = b"gap " + EVIL + b" " + host.encode()
            c, sport = env.tcp_conn(host, port, [sent], timeout=2)
            out.append((c, sport, sent))
        return out

    res, t_cont = kill_in_gap(env, before["pid"], traffic)
    for c, sport, sent in res:
        check(sport is not None, "no connection in the fail-open gap: %r", c)
        it.assert_passed(c, it.server_conn_of(srv, sport), sent)
    took = wait_filtering(env, port, t_cont, host=SRV6)
    check(took <= RECOVERY_S, "filtering back %.2f s after controld could see the kill", took)
    check_restarted(env, before, before["pid"])


@test
def filtering_back_within_2s_of_kill(env):
    _, port = env.service("sv-timed", "tcp")
    env.filter("sv-timed")
    env.tcp_server(port, idle=5)
    before = worker_list(env)
    os.kill(before["pid"], signal.SIGKILL)
    t_kill = time.monotonic()
    took = wait_filtering(env, port, t_kill)
    check(took <= RECOVERY_S, "filtering back %.2f s after the kill", took)
    check_restarted(env, before, before["pid"])


@test
def worker_restart_nfq_returns_filtering(env):
    _, port = env.service("sv-restart", "tcp")
    env.filter("sv-restart")
    srv = env.tcp_server(port)
    for kind in ("nfq", "all"):
        before = worker_list(env)
        doc = env.ctl("worker", "restart", kind, timeout=20)
        check(isinstance(doc, list), "worker restart --json is not an array: %r", doc)
        w = nfq_entry(doc)
        check(w["pid"] != before["pid"], "worker restart %s kept pid %d", kind, before["pid"])
        check(w["state"] == "running", "worker restart %s returned state %r", kind, w["state"])
        check(it.pid_alive(w["pid"]), "restarted worker %d is not alive", w["pid"])
        check(not it.pid_alive(before["pid"]) or it.proc_state(before["pid"]) == "Z",
              "old worker %d still running", before["pid"])
        check(w["generation"] >= before["generation"], "generation went back: %r -> %r",
              before["generation"], w["generation"])
        check(w["restarts"] >= before["restarts"], "restarts went back: %r -> %r",
              before["restarts"], w["restarts"])
        # no polling: filtering at once when the command returns
        for host in (SRV4, SRV6):
            c, sport = env.tcp_conn(host, port, [b"x " + EVIL])
            it.assert_blocked(c, it.server_conn_of(srv, sport))
        c, sport = env.tcp_conn(SRV4, port, [b"clean"])
        it.assert_passed(c, it.server_conn_of(srv, sport), b"clean")
    p = env.ctl_raw("worker", "restart", "bogus")
    check(p.returncode != 0 and p.stderr.strip(), "worker restart bogus: exit %d", p.returncode)


if __name__ == "__main__":
    sys.exit(it.run_module("supervise"))
