#!/usr/bin/python3
"""Integration: controld killed mid-game (issue 24, item 4). The workers outlive an unclean
death of controld (SIGKILL): both layers keep blocking evil and passing honest traffic with
their last ruleset, and the next controld adopts them (same pids, no service connection reset,
the health log says "adopted ... pid N (generation G)"), with the filters' counters going on
from where they were, blocks made while controld was away included. A worker that dies while
controld is away leaves the rules in place (fail-closed: nothing passes) and the next controld
starts a fresh one. A clean stop still stops every worker and removes the rules."""
import os
import re
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fgxit as it  # noqa: E402
from fgxit import EVIL, SRV4, check, test  # noqa: E402

REPLY = b"ok"
LAYERS = (("ad-nfq", "nfqueue"), ("ad-px", "proxy"))


def workers(env):
    doc = env.ctl("worker", "list")
    check(isinstance(doc, list), "worker list --json: %r", doc)
    return {w["kind"]: w for w in doc}


def blocked_count(env, svc):
    fs = env.filters(svc)
    check(len(fs) == 1 and "blocked" in fs[0], "filter list %s: %r", svc, fs)
    return fs[0]["blocked"]


def evil_blocked(env, port):
    c, _ = env.tcp_conn(SRV4, port, [b"x " + EVIL, 0.3], timeout=1.5)
    return c["connected"] and c["end"] == "reset"


def kill_controld(env):
    pid = env.controld_pid()
    os.kill(pid, signal.SIGKILL)
    env.controld.wait(5)
    env.controld = None


def log_since(env):
    with open(env.log_path, "rb") as f:
        f.seek(env.log_offset)
        return f.read().decode(errors="replace")


def services(env):
    """The two services (nfqueue, proxy), each with the filter and a server: {name: port}."""
    ports = {}
    for name, layer in LAYERS:
        try:
            env.service_doc(name)
            ports[name] = env.service_doc(name)["port"]
        except AssertionError:
            _, ports[name] = env.service(name, "tcp", extra=("--layer", layer))
            env.filter(name)
    return ports


@test
def workers_outlive_controld_and_are_adopted(env):
    ports = services(env)
    srvs = {n: env.tcp_server(p, idle=15, reply=REPLY) for n, p in ports.items()}
    for n, p in ports.items():
        check(evil_blocked(env, p), "%s: evil passed before", n)
    it.wait_until(lambda: all(blocked_count(env, n) >= 1 for n in ports), timeout=4)
    before = {n: blocked_count(env, n) for n in ports}
    w0 = workers(env)
    # a long connection through each layer: a chunk every 0.4 s for ~8 s
    chunks = [b"chunk-%02d;" % i for i in range(20)]
    steps = []
    for c in chunks:
        steps += [c, 0.4]
    longs = {n: env.tcp_client(SRV4, p, steps, timeout=5, wait=False) for n, p in ports.items()}
    checkers = {n: it.Checker(env, p, REPLY) for n, p in ports.items()}
    try:
        time.sleep(1.0)
        kill_controld(env)
        t_kill = time.monotonic()
        # controld is away: both layers keep filtering with their last rules
        down_blocks = 2
        for n, p in ports.items():
            for _ in range(down_blocks):
                check(evil_blocked(env, p), "%s: evil passed while controld was away", n)
        for k in ("nfq", "proxy", "script"):
            check(it.pid_alive(w0[k]["pid"]) and it.proc_state(w0[k]["pid"]) != "Z",
                  "the %s worker %d died with controld", k, w0[k]["pid"])
        time.sleep(max(0.0, 2.0 - (time.monotonic() - t_kill)))
        env.start_controld()
        log = log_since(env)
        for k, name in (("nfq", "nfqworker"), ("proxy", "proxyworker")):
            m = re.search(r"health: service 0 worker-adopted: adopted %s pid %d \(generation "
                          r"(\d+)\)" % (name, w0[k]["pid"]), log)
            check(m and int(m.group(1)) > 0, "no adoption of %s %d in the log:\n%s", name,
                  w0[k]["pid"], env.log_tail(40))
        check(re.search(r"adopted scriptworker pid %d" % w0["script"]["pid"], log),
              "scriptworker not adopted:\n%s", env.log_tail(40))
        w1 = workers(env)
        for k in ("nfq", "proxy", "script"):
            check(w1[k]["pid"] == w0[k]["pid"] and w1[k]["adopted"] is True,
                  "%s: %r after the restart (was pid %d)", k, w1[k], w0[k]["pid"])
            check(w1[k]["restarts"] == 0 or w1[k]["restarts"] == w0[k]["restarts"],
                  "%s restarted: %r", k, w1[k])
        for n, p in ports.items():
            check(evil_blocked(env, p), "%s: evil passed after the restart", n)
        time.sleep(1.0)
    finally:
        for c in checkers.values():
            c.stop()
    for n, c in checkers.items():
        check(len(c.runs) >= 10 and all(r[2] for r in c.runs), "%s: the checker failed %d of "
              "%d times", n, len([r for r in c.runs if not r[2]]), len(c.runs))
    for n, h in longs.items():
        res = it.client_result(h, 30)
        s = it.server_conn_starting(srvs[n], chunks[0], timeout=10)
        check(res["connected"] and res["end"] == "eof" and s["end"] == "eof",
              "%s: the long connection ended by %s / %s", n, res["end"], s["end"])
        check(s["data"] == b"".join(chunks), "%s: the server got %r", n, s["data"][-60:])
    # the counters go on: what was counted before, plus the blocks while away and after
    for n in ports:
        want = before[n] + down_blocks + 1
        got = it.wait_until(lambda n=n: (lambda b: b if b >= want else None)(blocked_count(env, n)),
                            timeout=5)
        check(got and got >= want, "%s: blocked %r after the restart, expected >= %d (%d "
              "before, %d while away, 1 after)", n, blocked_count(env, n), want, before[n],
              down_blocks)


@test
def worker_dead_while_controld_away_is_replaced(env):
    ports = services(env)
    srv = env.tcp_server(ports["ad-nfq"], idle=5, reply=REPLY)
    w0 = workers(env)
    kill_controld(env)
    os.kill(w0["nfq"]["pid"], signal.SIGKILL)
    check(it.wait_until(lambda: it.proc_state(w0["nfq"]["pid"]) in (None, "Z"), timeout=3),
          "the nfq worker did not die")
    # the rules stay: the fail-closed service passes nothing, evil included
    p = it.sh("ip", "netns", "exec", env.srv, "nft", "list", "table", "inet", "fgex", check=False)
    check(p.returncode == 0, "the rules went with controld: %s", p.stderr)
    c = env.tcp_client(SRV4, ports["ad-nfq"], [b"honest", 0.3], timeout=1.0)
    c2 = env.tcp_client(SRV4, ports["ad-nfq"], [b"y " + EVIL, 0.3], timeout=1.0)
    check(not srv.all("data"), "bytes passed with no worker: %r", srv.all("data"))
    check(c["end"] != "eof" and c2["end"] != "eof", "an exchange completed: %r %r", c, c2)
    env.start_controld()
    w1 = workers(env)
    check(w1["nfq"]["pid"] != w0["nfq"]["pid"] and not w1["nfq"]["adopted"],
          "nfq: %r (the dead one was %d)", w1["nfq"], w0["nfq"]["pid"])
    check(w1["proxy"]["pid"] == w0["proxy"]["pid"] and w1["proxy"]["adopted"],
          "the living proxy worker was not adopted: %r", w1["proxy"])
    c, sport = env.tcp_conn(SRV4, ports["ad-nfq"], [b"after", ("read", 0.3)], timeout=2)
    check(c["received"] == REPLY, "honest traffic after: %r", c)
    check(evil_blocked(env, ports["ad-nfq"]), "evil passes with the fresh worker")


@test
def clean_stop_still_stops_every_worker(env):
    services(env)
    w0 = workers(env)
    rc = env.stop_controld(signal.SIGTERM)
    check(rc == 0, "controld exited with %r on SIGTERM", rc)
    for k in ("nfq", "proxy", "script"):
        pid = w0[k]["pid"]
        check(it.wait_until(lambda pid=pid: it.proc_state(pid) in (None, "Z"), timeout=3),
              "the %s worker %d lives on after a clean stop", k, pid)
    p = it.sh("ip", "netns", "exec", env.srv, "nft", "list", "tables", check=False)
    check("fgex" not in p.stdout, "fgex rules left after a clean stop: %r", p.stdout)
    left = [f for f in os.listdir(env.run_dir) if f.endswith(".pid") and f != "controld.pid"]
    check(not left, "pid files left: %r", left)
    env.start_controld()
    w1 = workers(env)
    for k in ("nfq", "proxy", "script"):
        check(w1[k]["pid"] != w0[k]["pid"] and not w1[k]["adopted"], "%s: %r", k, w1[k])


if __name__ == "__main__":
    sys.exit(it.run_module("test_adopt"))
