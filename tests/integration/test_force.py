#!/usr/bin/python3
"""Integration: a block filter that would block (nearly) every connection needs --force (issue
24, item 8). `\\b` was accepted with a warning and the checker got nothing until it was removed.
Now a block filter whose regex matches any stream (it can match without consuming a byte, or a
few equal bytes of any value match it), or that matches at least 90% of at least 10 of the
service's captured connections (or all of at least 3), is refused with the reason and nothing
stored, in `filter add`, `filter enable`, `filter set --action block` and `filter import` (the
whole file, naming the line); --force stores it, and then it really blocks. A filter that matches
few connections, or a log filter, never needs it."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fgxit as it  # noqa: E402
from fgxit import CLI4, EVIL, SRV4, check, test  # noqa: E402

HONEST = b"GET /index.html HTTP/1.1\r\nHost: box\r\n\r\n"


def refused(env, *args):
    """fgexctl ARGS refused for --force: rc 4, the reason and the way out in one line."""
    p = env.ctl_raw(*args)
    check(p.returncode == 4, "%r: rc %d, expected a refusal (out %r err %r)", args,
          p.returncode, p.stdout, p.stderr)
    check("--force" in p.stderr and "Nothing was stored" in p.stderr,
          "%r: the refusal does not say why or how: %r", args, p.stderr)
    return p.stderr


def added(env, *args):
    p = env.ctl_raw(*args)
    check(p.returncode == 0, "%r refused: %r", args, p.stderr)
    return json.loads(p.stdout)


@test
def any_stream_regex_needs_force(env):
    _, port = env.service("fany", "tcp")
    srv = env.tcp_server(port)
    for regex, why in (("\\b", "without consuming a byte"), ("^", "without consuming a byte"),
                       ("(?m)^", "without consuming a byte"), (".", "within its first 4 bytes"),
                       ("(?s).", "within its first 4 bytes"), ("[^x]", "within its first 4")):
        err = refused(env, "filter", "add", "fany", regex)
        check("on service fany: it matches any connection" in err and why in err,
              "%r: reason %r", regex, err)
        check(env.filters("fany") == [], "%r: refused, yet stored: %r", regex,
              env.filters("fany"))
    # a direction changes nothing: any stream of that direction
    refused(env, "filter", "add", "fany", "\\b", "--dir", "s2c")
    # an ordinary filter, and a log filter (blocks nothing): no --force
    fid = added(env, "filter", "add", "fany", "evil[0-9]+")["id"]
    lid = added(env, "filter", "add", "fany", "\\b", "--log")["id"]
    # made to block: judged as a new block filter
    err = refused(env, "filter", "set", lid, "--action", "block")
    check("filter %d on service fany: it matches any connection" % lid in err and
          "make it block" in err, "set: %r", err)
    check([f["action"] for f in env.filters("fany") if f["id"] == lid] == ["log"],
          "set refused, yet changed: %r", env.filters("fany"))
    added(env, "filter", "set", lid, "--action", "block", "--force")
    env.ctl("filter", "disable", lid)
    err = refused(env, "filter", "enable", lid)
    check("filter %d" % lid in err and "enable it" in err, "enable: %r", err)
    check([f["active"] for f in env.filters("fany") if f["id"] == lid] == [False],
          "enable refused, yet enabled: %r", env.filters("fany"))
    added(env, "filter", "enable", lid, "--force")
    env.ctl("filter", "rm", lid)
    # forced, it is stored and blocks an honest request, as it said it would
    doc = added(env, "filter", "add", "fany", "\\b", "--force")
    c, sport = env.tcp_conn(SRV4, port, [b"hello world"])
    it.assert_blocked(c, it.server_conn_of(srv, sport), forbidden=b"hello world")
    env.ctl("filter", "rm", doc["id"])
    env.ctl("filter", "rm", fid)
    # UDP: any datagram
    _, uport = env.service("fany-u", "udp")
    err = refused(env, "filter", "add", "fany-u", "\\b")
    check("it matches any datagram" in err, "udp: %r", err)
    added(env, "filter", "add", "fany-u", "\\b", "--force")


@test
def filter_matching_every_captured_connection_needs_force(env):
    _, port = env.service("fcap", "tcp")
    srv = env.tcp_server(port, reply=b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
    for i in range(12):
        c, sport = env.tcp_conn(SRV4, port, [HONEST, ("read", 0.3)])
        check(c.get("error") is None, "honest connection %d failed: %r", i, c)
    # an admin request among them: a filter for it matches 1 of 13
    c, _ = env.tcp_conn(SRV4, port, [b"GET /admin?x=" + EVIL + b" HTTP/1.1\r\n\r\n", 0.3])
    # the rings hold the connections once they ended
    total = it.wait_until(lambda: (lambda t: t if t >= 13 else None)(
        env.ctl("filter", "test", "fcap", "GET")["total"]), timeout=5)
    check(total == 13, "the capture holds %r connections, expected 13", total)
    err = refused(env, "filter", "add", "fcap", "GET /index")
    check("would have blocked 12 of the 13 connections captured on service fcap (92%)" in err,
          "the count: %r", err)
    check(env.filters("fcap") == [], "refused, yet stored: %r", env.filters("fcap"))
    # the server's side too: every reply carries "200 OK"
    err = refused(env, "filter", "add", "fcap", "200 OK", "--dir", "s2c")
    check("of the 13 connections" in err, "s2c: %r", err)
    # c2s only: the replies' bytes are not scanned, the requests do not carry it
    added(env, "filter", "add", "fcap", "200 OK", "--dir", "c2s")
    # a filter matching few connections needs nothing
    added(env, "filter", "add", "fcap", "GET /admin")
    # an import is judged line by line against the same capture, in one look
    path = os.path.join(env.tmp, "fcap.rules")
    with open(path, "w") as f:
        f.write("c2s /GET \\/adm/\nc2s /Host: box/\n")
    err = refused(env, "filter", "import", "fcap", path)
    check("line 2 (/Host: box/) would have blocked 12 of the 13 connections" in err,
          "import: %r", err)
    check(len(env.filters("fcap")) == 2, "a refused import changed: %r", env.filters("fcap"))
    # forced, stored and blocking
    doc = added(env, "filter", "add", "fcap", "GET /index", "--force")
    c, sport = env.tcp_conn(SRV4, port, [HONEST])
    it.assert_blocked(c, it.server_conn_of(srv, sport), forbidden=HONEST)
    env.ctl("filter", "rm", doc["id"])


@test
def import_line_needing_force_refuses_the_file(env):
    _, port = env.service("fimp", "tcp")
    path = os.path.join(env.tmp, "force.rules")
    with open(path, "w") as f:
        f.write("# game start\nc2s /evil[0-9]+/\n\nboth /\\b/\nlog /./\n")
    for mode in ((), ("--sync",), ("--replace",)):
        err = refused(env, "filter", "import", "fimp", path, *mode)
        check("line 4 (/\\b/)" in err and "import the file" in err, "%r: %r", mode, err)
        check(env.filters("fimp") == [], "%r: refused, yet imported: %r", mode,
              env.filters("fimp"))
    added(env, "filter", "import", "fimp", path, "--sync", "--force")
    got = sorted(f["regex"] for f in env.filters("fimp"))
    check(got == [".", "\\b", "evil[0-9]+"], "forced import %r", got)
    # synced again: the filters it has already need nothing
    added(env, "filter", "import", "fimp", path, "--sync")


if __name__ == "__main__":
    sys.exit(it.run_module("test_force"))
