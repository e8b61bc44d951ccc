#!/usr/bin/python3
"""Integration: connections whose earlier bytes fgex did not scan (issue 11, item 4), on the
nfqueue layer, IPv4 and IPv6, with real sockets against a server that logs what it reads.

`ev` is sent, then something happens in the middle of the connection (the worker restarts or
crashes, the service stops and starts, it is created only now), then `il1337`. A direction whose
earlier bytes were not scanned must not go on as a fresh stream: under the default policy
(--midstream reset) the connection is reset when it next sends, so the server never reads
`evil1337`; under --midstream scan it is scanned from there on (today's behaviour, documented:
`il1337` alone matches nothing and passes). A stop and start with nothing sent in between keeps
the flow, so the match across it is still found."""
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fgxit as it  # noqa: E402
from fgxit import EVIL, SRV4, SRV6, check, test  # noqa: E402

HOSTS = (("v4", SRV4), ("v6", SRV6))


def server_got(srv, sport, want, timeout=5):
    """Wait until the server read `want` (a prefix of what it got) on the connection from
    client port sport."""
    suffix = ":%d" % sport
    acc = srv.wait_event(lambda e: e.get("event") == "accept" and
                         e.get("peer", "").endswith(suffix), timeout)
    check(acc is not None, "the server never accepted the connection from port %d", sport)

    def got():
        return b"".join(it.d64(e["data"]) for e in srv.all("data") if e.get("id") == acc["id"])
    check(it.wait_until(lambda: got().startswith(want), timeout), "the server read %r, not %r",
          got()[:80], want)


def across(env, srv, port, host, event, first=b"ev", second=b"il1337"):
    """One connection: send `first`, let the server read it, run event(), send `second`.
    Returns (client result, server record)."""
    h = env.tcp_client(host, port, [first, "wait", second, ("read", 1.0)], timeout=4,
                       wait=False)
    ev = h.wait_event(lambda e: e.get("event") == "connected", 5)
    check(ev is not None, "the client did not connect to %s:%d: %s", host, port,
          h.stderr.decode(errors="replace")[-300:])
    server_got(srv, ev["sport"], first)
    event()
    h.tell()
    c = it.client_result(h, 20)
    return c, it.server_conn_of(srv, ev["sport"], timeout=10)


def assert_reset(c, s, first, what, forbidden=EVIL):
    check(forbidden not in s["data"], "%s: the server read %r", what, s["data"][:80])
    check(s["data"].startswith(first), "%s: the server read %r, not the bytes before", what,
          s["data"][:80])
    check(c["end"] == "reset", "%s: the client's connection ended by %s, expected a reset", what,
          c["end"])
    check(s["end"] == "reset", "%s: the server's connection ended by %s, expected a reset", what,
          s["end"])


def wait_worker_running(env, old_pid, timeout=10):
    def new_running():
        pid, w = env.worker_pid()
        return pid != old_pid and w.get("state") == "running"
    check(it.wait_until(new_running, timeout, 0.1), "no new running nfq worker after %d", old_pid)


def counters(env):
    for w in env.ctl("worker", "list"):
        if w.get("kind") == "nfq":
            return w
    raise AssertionError("no nfq worker in worker list")


def restart(env):
    env.ctl("worker", "restart", "nfq", timeout=20)


def crash(env):
    pid, _ = env.worker_pid()
    os.kill(pid, signal.SIGKILL)
    wait_worker_running(env, pid)


@test
def worker_restart_hands_the_flows_over(env):
    """A planned restart passes the flows on: the match across it is found, and a clean
    connection goes on untouched."""
    _, port = env.service("ms-restart", "tcp")
    env.filter("ms-restart")
    srv = env.tcp_server(port, idle=15)
    for fam, host in HOSTS:
        c, s = across(env, srv, port, host, lambda: restart(env))
        it.assert_blocked(c, s)
        check(s["data"] == b"ev", "ev | worker restart | il1337 over %s: server read %r", fam,
              s["data"])
        c, s = across(env, srv, port, host, lambda: restart(env), first=b"hello ",
                      second=b"world")
        check(s["data"] == b"hello world" and s["end"] == "eof" and c["end"] == "eof",
              "a clean connection across a restart over %s: %r end %s/%s", fam, s["data"],
              s["end"], c["end"])
    check(counters(env).get("midstream_resets", 0) == 0, "a connection handed over was reset: %r",
          counters(env))


@test
def worker_crash_mid_connection_resets(env):
    """A crash cannot hand anything over: the policy (reset)."""
    _, port = env.service("ms-crash", "tcp")
    env.filter("ms-crash")
    srv = env.tcp_server(port, idle=15)
    for fam, host in HOSTS:
        c, s = across(env, srv, port, host, lambda: crash(env))
        assert_reset(c, s, b"ev", "ev | kill -9 of the worker | il1337 over " + fam)
    check(counters(env).get("midstream_resets", 0) >= 1, "midstream_resets not counted: %r",
          counters(env))


@test
def honest_connection_after_restart_works(env):
    _, port = env.service("ms-honest", "tcp")
    env.filter("ms-honest")
    srv = env.tcp_server(port, idle=15)
    restart(env)
    n = 0
    for fam, host in HOSTS:
        c = env.tcp_client(host, port, [b"hello ", 0.2, b"world " + fam.encode()])
        n += 1
        it.assert_passed(c, it.server_conn(srv, n), b"hello world " + fam.encode())
        c = env.tcp_client(host, port, [b"x" + EVIL])
        n += 1
        it.assert_blocked(c, it.server_conn(srv, n))


@test
def scan_policy_goes_on_from_the_next_packet(env):
    """--midstream scan: today's behaviour, kept on request. What comes after the crash is
    scanned as a new stream: `il1337` alone passes, a whole match after it is still blocked."""
    _, port = env.service("ms-scan", "tcp", extra=("--midstream", "scan"))
    env.filter("ms-scan")
    srv = env.tcp_server(port, idle=15)
    for fam, host in HOSTS:
        c, s = across(env, srv, port, host, lambda: crash(env))
        check(s["data"] == b"evil1337" and s["end"] == "eof" and c["end"] == "eof",
              "scan policy over %s: the server read %r (end %s), client end %s", fam,
              s["data"], s["end"], c["end"])
        c, s = across(env, srv, port, host, lambda: crash(env), second=b" x" + EVIL)
        check(EVIL not in s["data"] and c["end"] == "reset",
              "scan policy over %s: a whole match after the restart was not blocked: %r %s",
              fam, s["data"], c["end"])


@test
def stop_start_with_nothing_sent_keeps_the_flow(env):
    _, port = env.service("ms-stop", "tcp")
    env.filter("ms-stop")
    srv = env.tcp_server(port, idle=15)

    def stop_start():
        env.ctl("service", "stop", "ms-stop")
        time.sleep(0.3)
        env.ctl("service", "start", "ms-stop")

    for fam, host in HOSTS:
        c, s = across(env, srv, port, host, stop_start)
        it.assert_blocked(c, s)
        check(s["data"] == b"ev", "stop/start over %s: the server read %r", fam, s["data"])
    # and a clean connection across a stop and start goes on untouched
    for fam, host in HOSTS:
        c, s = across(env, srv, port, host, stop_start, first=b"hello ", second=b"world")
        check(s["data"] == b"hello world" and s["end"] == "eof" and c["end"] == "eof",
              "a clean stream across stop/start over %s: %r end %s/%s", fam, s["data"],
              s["end"], c["end"])


@test
def stop_send_start_resets(env):
    _, port = env.service("ms-stopsend", "tcp")
    env.filter("ms-stopsend")
    srv = env.tcp_server(port, idle=15)
    for fam, host in HOSTS:
        h = env.tcp_client(host, port, [b"ev", "wait", b"xx", "wait", b"il1337", ("read", 1.0)],
                           timeout=4, wait=False)
        ev = h.wait_event(lambda e: e.get("event") == "connected", 5)
        check(ev is not None, "no connection over %s", fam)
        server_got(srv, ev["sport"], b"ev")
        env.ctl("service", "stop", "ms-stopsend")
        h.tell()
        server_got(srv, ev["sport"], b"evxx")
        env.ctl("service", "start", "ms-stopsend")
        h.tell()
        c = it.client_result(h, 20)
        s = it.server_conn_of(srv, ev["sport"], timeout=10)
        check(b"il1337" not in s["data"], "ev | stop | xx | start | il1337 over %s: server read %r",
              fam, s["data"])
        assert_reset(c, s, b"evxx", "ev | stop | xx | start | il1337 over " + fam)


@test
def connection_older_than_its_service_resets(env):
    port = env.port()
    srv = env.tcp_server(port, idle=15)
    for fam, host in HOSTS:
        name = "ms-late-" + fam

        def create():
            env.service(name, "tcp", port=port)
            env.filter(name, "zzz[0-9]+")
        c, s = across(env, srv, port, host, create, first=b"zz", second=b"z123")
        assert_reset(c, s, b"zz", "zz | service add | z123 over " + fam, forbidden=b"zzz123")
        env.ctl("service", "rm", "--yes", "--yes", name)


@test
def service_removed_and_added_again_resets(env):
    port = env.port()
    srv = env.tcp_server(port, idle=15)
    env.service("ms-again", "tcp", port=port)
    env.filter("ms-again")
    for fam, host in HOSTS:
        def again():
            env.ctl("service", "rm", "--yes", "--yes", "ms-again")
            env.service("ms-again", "tcp", port=port)
            env.filter("ms-again")
        c, s = across(env, srv, port, host, again)
        assert_reset(c, s, b"ev", "ev | service rm + add | il1337 over " + fam)


if __name__ == "__main__":
    sys.exit(it.run_module("midstream"))
