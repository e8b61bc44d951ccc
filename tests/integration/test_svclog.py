#!/usr/bin/python3
"""Integration: `fgexctl service log` (issue 24), each service's health log. What a player does
to a service (add, stop, start, a layer switch, an address added, fail_open on) shows in its
log in order, as a table and as JSON; the box's own entries (controld started, a worker
restarted) show in every service's log, marked; the log survives a controld restart in its
order and continues its numbering; --follow prints a new entry within 1 s; a limit the proxy
worker hits (its per-source limit, real connections between namespaces) shows with its count,
and the counts add up to the worker's own counter; a dead worker's gap says, per service,
whether its traffic passed unfiltered (fail_open) or was not served, and when it ended."""
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fgxit as it  # noqa: E402
from fgxit import CLI4, SRV4, check, test  # noqa: E402


def log(env, *args):
    doc = env.ctl("service", "log", *args)
    check(isinstance(doc, list), "service log --json is no array: %r", doc)
    return doc


def kinds_of(entries, sid):
    return [e["kind"] for e in entries if e["service_id"] == sid]


@test
def changes_appear_in_order_as_text_and_json(env):
    sid, port = env.service("sl-web", "tcp")
    env.ctl("service", "stop", "sl-web")
    env.ctl("service", "start", "sl-web")
    env.ctl("service", "set", "sl-web", "--layer", "proxy")
    env.ctl("service", "set", "sl-web", "--layer", "nfqueue")
    env.ctl("service", "addr", "add", "sl-web", "%s:%d" % (SRV4, env.port()))
    env.ctl("service", "set", "sl-web", "--fail-open", "on")
    entries = log(env, "sl-web")
    mine = [e for e in entries if e["service_id"] == sid]
    check([e["kind"] for e in mine] ==
          ["added", "stopped", "started", "layer", "layer", "addresses", "fail-open"],
          "the service's entries: %r", [(e["kind"], e["text"]) for e in mine])
    check([e["seq"] for e in entries] == sorted(e["seq"] for e in entries) and
          len({e["seq"] for e in entries}) == len(entries), "not in seq order: %r",
          [e["seq"] for e in entries])
    check("from the nfqueue layer to the proxy layer" in mine[3]["text"] and
          "from the proxy layer to the nfqueue layer" in mine[4]["text"],
          "the layer switches say from and to: %r", [mine[3]["text"], mine[4]["text"]])
    check(SRV4 in mine[5]["text"], "the address change names it: %r", mine[5]["text"])
    check(mine[6]["level"] == "warn" and "fail_open on" in mine[6]["text"],
          "fail_open on is a warning that says so: %r", mine[6])
    check(all(e["service"] == "sl-web" and not e["box"] for e in mine),
          "entries name their service: %r", mine[0])
    # the table: a header, one line each, warnings marked
    p = env.ctl_raw("service", "log", "sl-web", json_out=False)
    check(p.returncode == 0, "service log failed: %s", p.stderr)
    lines = p.stdout.splitlines()
    check(lines and lines[0].split()[:4] == ["TIME", "LEVEL", "SERVICE", "KIND"] and
          "TEXT" in lines[0], "no table header: %r", lines[:1])
    order = [k for k in ("added", "stopped", "started", "layer", "addresses", "fail-open")]
    at = [next((i for i, ln in enumerate(lines) if " %s " % k in ln), None) for k in order]
    check(None not in at and at == sorted(at), "the table's order: %r\n%s", at, p.stdout)
    fo = next(ln for ln in lines if " fail-open " in ln)
    check(" WARN " in fo and "sl-web" in fo, "the fail_open line: %r", fo)
    # --limit: the newest N
    check([e["seq"] for e in log(env, "sl-web", "--limit", 2)] ==
          [e["seq"] for e in entries[-2:]], "--limit 2 is not the newest two")
    check(log(env, "sl-web", "--since", "1h") == entries, "--since 1h left something out")


@test
def a_box_entry_shows_in_every_services_log(env):
    a, _ = env.service("sl-a", "tcp")
    b, _ = env.service("sl-b", "udp")
    la, lb = log(env, "sl-a"), log(env, "sl-b")
    # controld's start is the box's: noted with service 0
    for name, lg in (("sl-a", la), ("sl-b", lb)):
        box = [e for e in lg if e["box"]]
        check(any(e["kind"] == "controld-started" and e["service_id"] == 0 and
                  e["service"] is None for e in box),
              "%s's log has no box entry of controld's start: %r", name, lg)
    check(b not in [e["service_id"] for e in la] and a not in [e["service_id"] for e in lb],
          "a service's log shows another's entries")
    p = env.ctl_raw("service", "log", "sl-a", json_out=False)
    check(any("(box)" in ln and "controld-started" in ln for ln in p.stdout.splitlines()),
          "the table does not mark the box's entry:\n%s", p.stdout)
    # a worker's restart, as the supervisor sees it, is the box's too
    st = env.ctl("worker", "list")
    nfq = next(w for w in (st if isinstance(st, list) else st.get("workers", []))
               if w.get("kind") == "nfq")
    os.kill(nfq["pid"], signal.SIGKILL)
    got = it.wait_until(lambda: [e for e in log(env, "sl-b") if e["kind"] == "worker-restart"],
                        timeout=5)
    check(got and got[-1]["box"] and got[-1]["level"] == "warn" and
          "killed by signal 9" in got[-1]["text"], "no worker restart in sl-b's log: %r",
          log(env, "sl-b")[-3:])
    check(any(e["kind"] == "worker-restart" for e in log(env, "sl-a")),
          "the restart is not in sl-a's log")
    # without SERVICE: the box's whole log, every service's entries
    every = log(env)
    check(a in [e["service_id"] for e in every] and b in [e["service_id"] for e in every],
          "service log without SERVICE misses a service")
    it.wait_until(lambda: any(w.get("kind") == "nfq" and w.get("state") == "running"
                              for w in env.ctl("status").get("workers", [])), timeout=5)


@test
def the_log_survives_a_controld_restart_in_order(env):
    sid, _ = env.service("sl-keep", "tcp")
    env.ctl("service", "stop", "sl-keep")
    env.ctl("service", "set", "sl-keep", "--layer", "proxy")
    before = log(env, "sl-keep")
    env.stop_controld()
    env.start_controld()
    after = log(env, "sl-keep")
    check(after[:len(before)] == before, "the entries before the restart changed:\nbefore %r\n"
          "after %r", [(e["seq"], e["kind"]) for e in before],
          [(e["seq"], e["kind"]) for e in after[:len(before)]])
    new = after[len(before):]
    check([e["kind"] for e in new] == ["controld-stopped", "controld-started"],
          "after the restart: %r", [(e["seq"], e["kind"]) for e in new])
    check(new[0]["seq"] > before[-1]["seq"] and new[1]["seq"] > new[0]["seq"],
          "the numbering does not continue: %r then %r", before[-1]["seq"],
          [e["seq"] for e in new])
    # and what happens next is numbered after them
    env.ctl("service", "start", "sl-keep")
    last = log(env, "sl-keep")[-1]
    check(last["kind"] == "started" and last["seq"] > new[1]["seq"], "the next entry: %r", last)


@test
def follow_prints_a_new_entry_within_a_second(env):
    env.service("sl-follow", "tcp")
    argv = [os.path.join(env.bin, "fgexctl"), "-c", env.url, "--json", "service", "log",
            "sl-follow", "--follow"]
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        import json
        import selectors
        sel = selectors.DefaultSelector()
        sel.register(p.stdout, selectors.EVENT_READ)
        buf = [b""]

        def read_until(pred, timeout):
            # the pipe's own bytes, split here: a buffered reader would hide a line from select
            end = time.monotonic() + timeout
            while True:
                while b"\n" in buf[0]:
                    line, buf[0] = buf[0].split(b"\n", 1)
                    e = json.loads(line)
                    if pred(e):
                        return e, time.monotonic()
                left = end - time.monotonic()
                if left <= 0 or not sel.select(left):
                    return None, None
                chunk = os.read(p.stdout.fileno(), 65536)
                if not chunk:
                    return None, None
                buf[0] += chunk

        first, _ = read_until(lambda e: e["kind"] == "added", 5)
        if not first:
            p.kill()
            check(False, "--follow did not print the log so far: %r %r", p.stdout.read(),
                  p.stderr.read())
        time.sleep(0.5)
        env.ctl("service", "stop", "sl-follow")
        t0 = time.monotonic()
        e, t1 = read_until(lambda e: e["kind"] == "stopped", 3)
        check(e and e["service"] == "sl-follow", "--follow never printed the stop")
        check(t1 - t0 < 1.0, "--follow printed the stop %.2f s after it", t1 - t0)
    finally:
        p.kill()
        p.wait(5)


@test
def a_worker_gap_says_whether_traffic_passed_unfiltered(env):
    op, _ = env.service("sl-open", "tcp", extra=("--fail-open",))
    cl, _ = env.service("sl-closed", "udp")
    seq0 = max(e["seq"] for e in log(env))
    nfq = next(w for w in env.ctl("status").get("workers", []) if w.get("kind") == "nfq")
    os.kill(nfq["pid"], signal.SIGKILL)

    def new(name, kind):
        return [e for e in log(env, name) if e["seq"] > seq0 and e["kind"] == kind]
    back = it.wait_until(lambda: new("sl-open", "filtered-again") and
                         new("sl-closed", "filtered-again"), timeout=8)
    check(back, "no end of the gap: %r", [(e["kind"], e["text"]) for e in log(env)
                                          if e["seq"] > seq0])
    u, n = new("sl-open", "unfiltered"), new("sl-closed", "not-served")
    check(len(u) == 1 and u[0]["level"] == "error" and u[0]["service_id"] == op and
          "passes unfiltered" in u[0]["text"], "the fail_open service's gap: %r", u)
    check(len(n) == 1 and n[0]["level"] == "warn" and n[0]["service_id"] == cl and
          "not served" in n[0]["text"], "the fail-closed service's gap: %r", n)
    check(not new("sl-open", "not-served") and not new("sl-closed", "unfiltered"),
          "a service got the other's entry")
    a = new("sl-open", "filtered-again")[0]
    check(a["seq"] > u[0]["seq"] and " ms" in a["text"], "the gap's end: %r", a)


@test
def a_connection_picked_up_midstream_shows_with_its_count(env):
    """nfqueue layer: a connection open before its service was added is reset when it next
    sends (--midstream reset); the nfq worker counts it, and the box's log says so."""
    port = env.port()
    srv = env.tcp_server(port, idle=15)
    seq0 = max(e["seq"] for e in log(env))
    h = env.tcp_client(SRV4, port, [b"zz", "wait", b"z123", ("read", 1.0)], timeout=4,
                       wait=False)
    check(h.wait_event(lambda e: e.get("event") == "connected", 5), "the client did not connect")
    check(it.wait_until(lambda: srv.all("data"), 5), "the server read nothing before the add")
    env.service("sl-mid", "tcp", port=port)
    h.tell()
    c = it.client_result(h, 20)
    check(c["end"] == "reset", "the midstream connection was not reset: %r", c)
    got = it.wait_until(lambda: [e for e in log(env, "sl-mid")
                                 if e["seq"] > seq0 and e["kind"] == "midstream"], timeout=5)
    check(got and got[0]["box"] and got[0]["count"] >= 1 and
          "picked up midstream" in got[0]["text"], "no midstream entry: %r",
          [(e["kind"], e["text"]) for e in log(env, "sl-mid") if e["seq"] > seq0])


FLOOD = r"""
import socket, sys
host, port, n, src = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
socks = []
for i in range(n):
    s = socket.socket()
    s.bind((src, 0))
    s.settimeout(3)
    try:
        s.connect((host, port))
        socks.append(s)
    except OSError:
        pass
print(len(socks), flush=True)
sys.stdin.readline()
"""


def restart_with(env, *args):
    env.stop_controld()
    env.start_controld(extra_args=list(env.controld_args) + [str(a) for a in args])
    check(it.wait_until(lambda: any(w.get("kind") == "proxy" and w.get("state") == "running"
                                    for w in env.ctl("status").get("workers", [])), timeout=8),
          "the proxy worker did not start")


def proxy_worker(env):
    doc = env.ctl("worker", "list")
    ws = doc if isinstance(doc, list) else doc.get("workers", [])
    return next((w for w in ws if w.get("kind") == "proxy"), {})


@test
def a_limit_hit_shows_with_its_count(env):
    sid, port = env.service("sl-px", "tcp", extra=("--layer", "proxy"))
    restart_with(env, "--proxy-max-conns-per-src", 4)
    try:
        seq0 = max(e["seq"] for e in log(env, "sl-px"))
        srv = env.tcp_server(port, idle=15)
        flood = subprocess.Popen(["ip", "netns", "exec", env.cli, it.PY, "-c", FLOOD, SRV4,
                                  str(port), "30", CLI4], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True)
        try:
            connected = int(flood.stdout.readline() or 0)
            check(connected == 30, "the flood connected %d of 30", connected)
            w = it.wait_until(lambda: (lambda x: x if x.get("evicted", 0) >= 20 else None)(
                proxy_worker(env)), timeout=5)
            check(w, "the proxy evicted too few: %r", proxy_worker(env))

            def limit_entries():
                return [e for e in log(env, "sl-px")
                        if e["seq"] > seq0 and e["kind"] == "limit-evicted"]
            got = it.wait_until(limit_entries, timeout=3)
            check(got, "no limit entry in the service's log: %r", log(env, "sl-px")[-5:])
            e = got[0]
            check(e["box"] and e["level"] == "warn" and e["count"] > 0 and
                  e["text"].startswith("%d " % e["count"]) and "in the last" in e["text"],
                  "the limit entry: %r", e)
            # the counts coalesced over 5 s add up to the worker's own counter
            total = proxy_worker(env).get("evicted", 0)
            ok = it.wait_until(lambda: sum(x["count"] for x in limit_entries()) == total,
                               timeout=8)
            check(ok, "the entries count %d, the worker %d: %r",
                  sum(x["count"] for x in limit_entries()), total,
                  [(x["count"], x["text"]) for x in limit_entries()])
            check(len(limit_entries()) <= 3, "one entry per report, not coalesced: %d",
                  len(limit_entries()))
            p = env.ctl_raw("service", "log", "sl-px", json_out=False)
            row = next((ln for ln in p.stdout.splitlines() if "limit-evicted" in ln), "")
            check(" %d " % e["count"] in row, "the table has no COUNT: %r", row)
        finally:
            flood.kill()
            flood.wait(5)
            srv.stop()
    finally:
        restart_with(env)


if __name__ == "__main__":
    sys.exit(it.run_module("test_svclog"))
