#!/usr/bin/python3
"""Integration: rule changes on connections that are already open (hot swap, issue 3).

A connection is opened and carries some bytes, then waits on its helper's stdin while the test
changes the service's filters through fgexctl; when fgexctl has returned, the connection sends
the rest. What the server received and how both ends saw the connection end say whether the
new generation applied to that open flow from its next packet on (docs/architecture.md, "Rule
changes on open connections").

Server connections are found by their first bytes (unique per connection) or by accept order,
never by the client's source port, so test_proxy.py can run these bodies on the proxy layer."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fgxit as it  # noqa: E402
from fgxit import EVIL, SRV4, SRV6, check, test  # noqa: E402

# long enough that a server connection never times out while its client waits for a change
IDLE = 15.0


class Open:
    """One client connection that sent `first` and now waits for the test's go."""

    def __init__(self, env, srv, host, port, first, rest):
        self.srv = srv
        self.cl = env.tcp_client(host, port, [first, "wait"] + list(rest), timeout=3,
                                 wait=False)
        ev = self.cl.wait_event(lambda e: e.get("event") in ("connected", "result"), 5)
        check(ev is not None and ev.get("event") == "connected",
              "the client did not connect to %s:%d: %r", host, port, ev)
        got = srv.wait_event(lambda e: e.get("event") == "data" and it.d64(e["data"]) == first,
                             5)
        check(got is not None, "the open connection's first bytes %r did not reach the server",
              first)
        self.id = got["id"]

    def finish(self):
        """Let the client send the rest; returns (client result, server connection)."""
        self.cl.tell()
        c = it.client_result(self.cl, 15)
        return c, it.server_conn(self.srv, self.id, timeout=IDLE + 5)


@test
def added_filter_applies_to_open_connection(env):
    _, port = env.service("sw-add", "tcp")
    env.filter("sw-add", "unrelated[0-9]+")
    srv = env.tcp_server(port, idle=IDLE)
    fid = None
    for host in (SRV4, SRV6):
        first = b"hello %s " % host.encode()
        conn = Open(env, srv, host, port, first, [b"now " + EVIL])
        fid = env.filter("sw-add")
        c, s = conn.finish()
        check(s["data"] == first, "server data %r, expected only the bytes before the add",
              s["data"])
        it.assert_blocked(c, s)
        env.ctl("filter", "rm", fid)


@test
def enabled_filter_applies_to_open_connection(env):
    _, port = env.service("sw-enable", "tcp")
    fid = env.filter("sw-enable")
    env.ctl("filter", "disable", fid)
    srv = env.tcp_server(port, idle=IDLE)
    for host in (SRV4, SRV6):
        first = b"hello %s " % host.encode()
        conn = Open(env, srv, host, port, first, [b"now " + EVIL])
        env.ctl("filter", "enable", fid)
        c, s = conn.finish()
        check(s["data"] == first, "server data %r, expected only the bytes before the enable",
              s["data"])
        it.assert_blocked(c, s)
        env.ctl("filter", "disable", fid)


@test
def partial_match_survives_change_of_other_filter(env):
    _, port = env.service("sw-keep", "tcp")
    env.filter("sw-keep")
    other = env.filter("sw-keep", "other[0-9]+x")
    srv = env.tcp_server(port, idle=IDLE)
    state = {}

    def add():
        state["new"] = env.filter("sw-keep", "second[a-z]+[0-9]")

    changes = (
        ("add another filter", add),
        ("disable another filter", lambda: env.ctl("filter", "disable", other)),
        ("enable another filter", lambda: env.ctl("filter", "enable", other)),
        ("remove another filter", lambda: env.ctl("filter", "rm", state["new"])),
        ("add one with --nocase", lambda: env.filter("sw-keep", "third[0-9]", nocase=True)),
    )
    for i, (what, change) in enumerate(changes):
        host = SRV6 if i % 2 else SRV4
        conn = Open(env, srv, host, port, b"%d ev" % i, [b"il1337 tail"])
        change()
        c, s = conn.finish()
        check(b"il1337" not in s["data"], "after '%s' the completion of the match reached the "
              "server over %s: %r", what, host, s["data"])
        check(c["end"] == "reset", "after '%s' over %s the client ended by %s, expected reset",
              what, host, c["end"])
        check(s["end"] == "reset", "after '%s' over %s the server ended by %s, expected reset",
              what, host, s["end"])


@test
def long_partial_match_survives_change_of_other_filter(env):
    # The match began 1000+ bytes before the change, far beyond the window that primes the new
    # stream: only the flow's old stream, kept beside the new one, still holds it.
    _, port = env.service("sw-long", "tcp")
    env.filter("sw-long", "BEGIN[^\\n]{0,4000}END")
    other = env.filter("sw-long", "other[0-9]+x")
    srv = env.tcp_server(port, idle=IDLE)
    changes = (
        ("add another filter", lambda: env.filter("sw-long", "second[a-z]+[0-9]")),
        ("disable another filter", lambda: env.ctl("filter", "disable", other)),
    )
    for i, (what, change) in enumerate(changes):
        host = SRV6 if i % 2 else SRV4
        first = b"%d BEGIN " % i + b"a" * 1000
        conn = Open(env, srv, host, port, first, [b" END tail"])
        change()
        c, s = conn.finish()
        check(s["data"] == first, "after '%s' over %s the server got %d bytes past the first %d",
              what, host, len(s["data"]) - len(first), len(first))
        it.assert_blocked(c, s, forbidden=b"END")


@test
def disabled_or_removed_filter_stops_matching_at_once(env):
    _, port = env.service("sw-off", "tcp")
    fid = env.filter("sw-off")
    env.filter("sw-off", "bad[a-z]{3}stuff")
    srv = env.tcp_server(port, idle=IDLE)

    # disabled: the next matching bytes of the open connection pass, the other filter still
    # applies to that same connection
    conn = Open(env, srv, SRV4, port, b"hello ", [EVIL, 0.2, b" then badxyzstuff"])
    env.ctl("filter", "disable", fid)
    c, s = conn.finish()
    check(s["data"].startswith(b"hello " + EVIL), "with the filter disabled the server got %r",
          s["data"])
    check(b"badxyzstuff" not in s["data"], "the filter that stayed active let its match through")
    check(c["end"] == "reset", "the other filter did not block: client ended by %s", c["end"])

    # a partial match of the disabled filter completes on the open connection and passes
    env.ctl("filter", "enable", fid)
    conn = Open(env, srv, SRV6, port, b"1 ev", [b"il1337"])
    env.ctl("filter", "disable", fid)
    c, s = conn.finish()
    it.assert_passed(c, s, b"1 evil1337")

    # removed: same, from the next packet on
    env.ctl("filter", "enable", fid)
    for host, first, rest in ((SRV4, b"2 hello ", EVIL), (SRV6, b"3 ev", b"il1337")):
        conn = Open(env, srv, host, port, first, [rest])
        if fid is not None:
            env.ctl("filter", "rm", fid)
            fid = None
        else:
            # the filter is gone already: a change of the other filter must not revive it
            env.filter("sw-off", "fourth[0-9]")
        c, s = conn.finish()
        it.assert_passed(c, s, first + rest)


@test
def change_is_applied_when_fgexctl_returns(env):
    _, port = env.service("sw-ret", "tcp")
    srv = env.tcp_server(port)
    fids = []
    for i in range(10):
        fids.append(env.filter("sw-ret", "tok%d[0-9]+" % i))
        # no wait at all: the very next connection must meet the filter
        payload = b"x tok%d42 y" % i
        # one connection at a time: it is the server's next one (the blocked segment is the
        # only data, so there are no first bytes to find it by)
        n = len(srv.all("accept")) + 1
        c = env.tcp_client(SRV4 if i % 2 == 0 else SRV6, port, [payload])
        check(c["connected"], "round %d: no connection: %r", i, c)
        it.assert_blocked(c, it.server_conn(srv, n), forbidden=b"tok%d42" % i)
    for i in (0, 5, 9):
        env.ctl("filter", "disable", fids[i])
        payload = b"x tok%d42 y" % i
        c = env.tcp_client(SRV4, port, [payload])
        it.assert_passed(c, it.server_conn_starting(srv, payload), payload)


@test
def swaps_under_traffic_lose_and_pass_nothing(env):
    """Filters change again and again while two paced connections are open: the clean one
    arrives whole and in order, the one that sends a match late is blocked at that segment."""
    _, port = env.service("sw-live", "tcp")
    env.filter("sw-live")
    srv = env.tcp_server(port, idle=IDLE)
    n, at = 40, 30
    chunks = [(b"C%03d:" % i) + bytes(range(65, 91)) * 19 for i in range(n)]
    dirty = [b"D" + c[1:] for c in chunks]
    dirty[at] = dirty[at][:100] + EVIL + dirty[at][100 + len(EVIL):]

    def paced(data):
        steps = []
        for c in data:
            steps += [c, 0.04]
        return steps

    clean = env.tcp_client(SRV4, port, paced(chunks), timeout=5, wait=False)
    evil = env.tcp_client(SRV6, port, paced(dirty), timeout=5, wait=False)
    changes, extra = 0, []
    while changes < 60 and (clean.wait_event(lambda e: e.get("event") == "result", 0) is None
                            or evil.wait_event(lambda e: e.get("event") == "result", 0) is None):
        if len(extra) < 3:
            extra.append(env.filter("sw-live", "live%d[0-9]+x" % changes))
        else:
            env.ctl("filter", "rm" if changes % 2 else "disable", extra.pop(0))
        changes += 1
    check(changes >= 5, "only %d changes while the connections ran", changes)
    c = it.client_result(clean, 15)
    it.assert_passed(c, it.server_conn_starting(srv, b"C000:", timeout=IDLE + 5),
                     b"".join(chunks))
    c = it.client_result(evil, 15)
    s = it.server_conn_starting(srv, b"D000:", timeout=IDLE + 5)
    it.assert_blocked(c, s)
    before = b"".join(dirty[:at])
    check(before.startswith(s["data"]) and len(s["data"]) >= len(b"".join(dirty[:at - 5])),
          "server got %d bytes of the %d sent before the match (or other bytes)", len(s["data"]),
          len(before))


if __name__ == "__main__":
    sys.exit(it.run_module("swap"))
