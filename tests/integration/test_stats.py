#!/usr/bin/python3
"""Integration: traffic statistics (issue 3). `fgexctl stats --json` counts a service's packets,
bytes, accepted and dropped packets and blocked connections after known traffic, and the totals
survive a worker killed with SIGKILL and a controld restart (controld keeps and persists them).

The workers report at least once a second, so each check polls until the count it expects has
arrived, then demands exact values where the traffic fixes them (blocked) and bounds elsewhere
(the worker also sees the handshake and teardown packets it queues)."""
import json
import os
import signal
import subprocess
import sys
import threading
import queue
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fgxit as it  # noqa: E402
from fgxit import EVIL, SRV4, SRV6, check, test  # noqa: E402

FIELDS = ("id", "name", "packets", "bytes", "accepted", "dropped", "flows_active", "blocked")
COUNTERS = ("packets", "bytes", "accepted", "dropped", "blocked")


def stats_of(env, name):
    doc = env.ctl("stats", name)
    check(isinstance(doc, list) and len(doc) == 1, "stats %s --json: %r", name, doc)
    st = doc[0]
    for k in FIELDS:
        check(k in st, "stats entry has no %r: %r", k, st)
        if k != "name":
            check(isinstance(st[k], int) and st[k] >= 0, "stats %s is %r", k, st[k])
    check(st["name"] == name, "stats for %s named %r", name, st["name"])
    return st


def wait_blocked(env, name, n, timeout=4):
    st = it.wait_until(lambda: (lambda s: s if s["blocked"] >= n else None)(stats_of(env, name)),
                       timeout=timeout)
    st = stats_of(env, name)
    check(st["blocked"] == n, "stats %s blocked=%r, expected %d", name, st["blocked"], n)
    return st


def traffic(env, srv, port, n_blocked, n_clean, tag):
    """n_blocked matching connections and n_clean clean ones; returns the payload bytes sent."""
    total = 0
    for i in range(n_blocked):
        payload = b"%s %d " % (tag, i) + EVIL
        c, sport = env.tcp_conn(SRV4 if i % 2 == 0 else SRV6, port, [payload])
        it.assert_blocked(c, it.server_conn_of(srv, sport))
        total += len(payload)
    for i in range(n_clean):
        payload = b"%s clean %d" % (tag, i)
        c, sport = env.tcp_conn(SRV6 if i % 2 == 0 else SRV4, port, [payload])
        it.assert_passed(c, it.server_conn_of(srv, sport), payload)
        total += len(payload)
    return total


def check_plausible(st, n_blocked, n_clean, payload):
    check(st["packets"] == st["accepted"] + st["dropped"],
          "packets %d != accepted %d + dropped %d", st["packets"], st["accepted"], st["dropped"])
    check(st["packets"] >= n_blocked + n_clean, "packets %d < %d connections with data",
          st["packets"], n_blocked + n_clean)
    check(st["dropped"] >= n_blocked, "dropped %d < %d blocked connections", st["dropped"],
          n_blocked)
    check(st["accepted"] >= n_clean, "accepted %d < %d clean connections", st["accepted"],
          n_clean)
    check(st["bytes"] >= payload, "bytes %d < the %d payload bytes sent", st["bytes"], payload)
    # a few packets per connection on a 1500-byte veth, headers included
    check(st["packets"] <= 12 * (n_blocked + n_clean), "packets %d for %d connections",
          st["packets"], n_blocked + n_clean)
    check(st["bytes"] <= st["packets"] * 1600, "bytes %d for %d packets", st["bytes"],
          st["packets"])


def at_least(after, before, what):
    for k in COUNTERS:
        check(after[k] >= before[k], "%s: %s went back from %d to %d", what, k, before[k],
              after[k])


@test
def stats_count_known_traffic(env):
    sid, port = env.service("st-count", "tcp")
    fid = env.filter("st-count")
    env.filter("st-count", "never[0-9]matches")
    env.service("st-other", "tcp")
    srv = env.tcp_server(port)
    st = stats_of(env, "st-count")
    check(st["id"] == sid, "stats id %r, service id %r", st["id"], sid)
    check(all(st[k] == 0 for k in COUNTERS), "a new service has counters: %r", st)
    payload = traffic(env, srv, port, 3, 2, b"a")
    st = wait_blocked(env, "st-count", 3)
    check_plausible(st, 3, 2, payload)
    # the same totals in the list of every service; the untouched service saw nothing
    every = {s["name"]: s for s in env.ctl("stats")}
    check("st-count" in every and "st-other" in every, "stats without SERVICE: %r", every)
    check(every["st-count"]["blocked"] == 3, "stats (all) blocked %r", every["st-count"])
    check(all(every["st-other"][k] == 0 for k in COUNTERS), "idle service counted: %r",
          every["st-other"])
    check(env.ctl("stats", sid)[0]["name"] == "st-count", "stats by id")
    flt = {f["id"]: f for f in env.filters("st-count")}
    check(flt[fid]["blocked"] == 3, "filter list blocked %r", flt[fid]["blocked"])
    p = env.ctl_raw("stats", "no-such-service")
    check(p.returncode != 0 and p.stderr.strip(), "stats of an unknown service: exit %d",
          p.returncode)
    # more traffic adds exactly what it blocks
    before = st
    payload = traffic(env, srv, port, 2, 1, b"b")
    st = wait_blocked(env, "st-count", 5)
    at_least(st, before, "after more traffic")
    check(st["dropped"] >= before["dropped"] + 2, "dropped %d, was %d before 2 more blocks",
          st["dropped"], before["dropped"])
    check(st["bytes"] >= before["bytes"] + payload, "bytes grew by %d < %d payload bytes",
          st["bytes"] - before["bytes"], payload)


@test
def stats_survive_worker_kill_and_controld_restart(env):
    _, port = env.service("st-keep", "tcp")
    fid = env.filter("st-keep")
    srv = env.tcp_server(port)
    traffic(env, srv, port, 3, 1, b"k")
    before = wait_blocked(env, "st-keep", 3)
    w = env.worker_pid()[0]
    os.kill(w, signal.SIGKILL)

    def restarted():
        try:
            pid, doc = env.worker_pid()
        except (AssertionError, it.CtlError):  # between two workers
            return False
        return pid != w and doc.get("state") == "running"

    ok = it.wait_until(restarted, timeout=5)
    check(ok, "no new worker after killing %d", w)
    st = stats_of(env, "st-keep")
    check(st["blocked"] == 3, "blocked %r after the worker was killed, expected 3", st["blocked"])
    at_least(st, before, "after the worker was killed")
    # the new worker counts on top of the totals
    traffic(env, srv, port, 2, 1, b"w")
    before = wait_blocked(env, "st-keep", 5)

    check(env.stop_controld(signal.SIGTERM) == 0, "controld did not exit cleanly")
    env.start_controld()
    st = stats_of(env, "st-keep")
    check(st["blocked"] == 5, "blocked %r after a controld restart, expected 5", st["blocked"])
    at_least(st, before, "after a controld restart")
    check({f["id"]: f for f in env.filters("st-keep")}[fid]["blocked"] == 5,
          "filter list blocked after a controld restart: %r", env.filters("st-keep"))
    traffic(env, srv, port, 1, 0, b"r")
    wait_blocked(env, "st-keep", 6)


@test
def stats_watch_json_prints_a_document_per_refresh(env):
    _, port = env.service("st-watch", "tcp")
    env.filter("st-watch")
    srv = env.tcp_server(port)
    argv = [os.path.join(env.bin, "fgexctl"), "-c", env.url, "--json", "stats", "st-watch",
            "--watch", "--interval", "0.3"]
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = queue.Queue()
    t = threading.Thread(target=lambda: [lines.put(x) for x in p.stdout], daemon=True)
    t.start()
    try:
        docs = []
        deadline = time.monotonic() + 3
        while len(docs) < 2 and time.monotonic() < deadline:
            try:
                docs.append(json.loads(lines.get(timeout=max(0.05, deadline - time.monotonic()))))
            except queue.Empty:
                break
        check(len(docs) >= 2, "stats --watch --json printed %d documents in 3 s", len(docs))
        for d in docs:
            check(isinstance(d, list) and len(d) == 1 and d[0].get("name") == "st-watch",
                  "stats --watch --json document %r", d)
        # a block shows up in a later refresh
        traffic(env, srv, port, 1, 0, b"w")
        deadline = time.monotonic() + 3
        seen = None
        while time.monotonic() < deadline:
            try:
                d = json.loads(lines.get(timeout=max(0.05, deadline - time.monotonic())))
            except queue.Empty:
                break
            if d and d[0].get("blocked") == 1:
                seen = d
                break
        check(seen, "no stats --watch refresh showed the block within 3 s")
        check(p.poll() is None, "stats --watch exited by itself (%r)", p.returncode)
    finally:
        p.send_signal(signal.SIGINT)
        try:
            p.wait(3)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(2)
            raise AssertionError("stats --watch did not stop on SIGINT")


@test
def no_metrics_listener_by_default(env):
    # this module starts controld without --metrics-listen: it must not listen on TCP at all
    p = it.sh("ip", "netns", "exec", env.srv, "ss", "-Hltnp")
    check("controld" not in p.stdout, "controld listens without --metrics-listen: %r", p.stdout)
    check(env.controld_pid() > 0, "controld not running")


def proc_queue_drops(env):
    """queue_dropped + user_dropped over the server namespace's queues (all of them fgex's)."""
    out = it.sh("ip", "netns", "exec", env.srv, "cat", "/proc/net/netfilter/nfnetlink_queue")
    return sum(int(f[5]) + int(f[6]) for f in (ln.split() for ln in out.stdout.splitlines())
               if len(f) >= 7)


@test
def kernel_queue_drops_reach_the_workers_counters(env):
    """Packets the kernel drops because the NFQUEUE worker's queue is full count in its
    queue_drops (worker list). The worker reads them from /proc after its privilege drop, where
    its seccomp filter refuses open(): read 0 for ever until the file was opened before it."""
    _, port = env.service("st-qdrop", "udp", extra=("--layer", "nfqueue"))
    env.filter("st-qdrop")  # a service without filters is not queued at all
    env.udp_server(port)
    # the rules are in place: a datagram reaches the worker
    check(it.wait_until(lambda: env.udp_client(SRV4, port, [b"probe"]) is not None and
                        stats_of(env, "st-qdrop")["packets"] > 0, timeout=4),
          "no datagram reached the worker: %r", stats_of(env, "st-qdrop"))
    w = {x["kind"]: x for x in env.ctl("worker", "list")}["nfq"]
    check(w.get("queue_drops") == 0, "queue_drops before: %r", w)
    # Stopped for well under the heartbeat's 1 s (12,000 datagrams, at most 0.6 s on a loaded
    # machine), while more datagrams than the queue holds (8192) arrive: the kernel drops the rest. The sender is started first and
    # sends when told, so that its start is not inside the stop.
    send = ("import socket,sys,time\n"
            "s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n"
            "print('ready',flush=True); sys.stdin.readline()\n"
            "t=time.monotonic()\n"
            "n=0\n"
            "while n<12000 and time.monotonic()-t<0.6:\n"
            "    for i in range(200): s.sendto(b'x'*16,('%s',%d))\n"
            "    n+=200\n" % (SRV4, port))
    p = subprocess.Popen(["ip", "netns", "exec", env.cli, "python3", "-c", send],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    check(p.stdout.readline().strip() == "ready", "the sender did not start")
    os.kill(w["pid"], signal.SIGSTOP)
    try:
        p.stdin.write("go\n")
        p.stdin.flush()
        p.wait(timeout=10)
    finally:
        os.kill(w["pid"], signal.SIGCONT)
    kernel = proc_queue_drops(env)
    check(kernel > 0, "the kernel dropped nothing: the test sent too little: %s %s\n%s",
          it.sh("ip", "netns", "exec", env.srv, "cat", "/proc/net/netfilter/nfnetlink_queue").stdout,
          stats_of(env, "st-qdrop"), env.log_tail(20))

    def counted():
        x = {x["kind"]: x for x in env.ctl("worker", "list")}["nfq"]
        return x if x["pid"] == w["pid"] and x.get("queue_drops", 0) >= kernel else None

    got = it.wait_until(counted, timeout=4)
    now = {x["kind"]: x for x in env.ctl("worker", "list")}["nfq"]
    check(got, "the kernel dropped %d, the worker says %r (pid %d, was %d)\n%s", kernel,
          now.get("queue_drops"), now["pid"], w["pid"], env.log_tail(15))


if __name__ == "__main__":
    sys.exit(it.run_module("stats"))
