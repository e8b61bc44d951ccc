#!/usr/bin/python3
"""Integration: a service's own limits (issue 27), `service set SVC --max-conns N --over-limit
forward|refuse --first-byte-timeout S`, enforced by the proxy layer with real connections
between the module's namespaces.

N connections open, the next one is refused (reset at once, never reaching the service) and
counted; with forward it is relayed and counted; the count of hits with its first and last time
is in `service show` and survives a restart of controld. A connection that sends nothing is
closed after the service's first-byte timeout while one that talks stays. A UDP service's
flows count as its connections. The NFQUEUE layer refuses the limits with the reason."""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fgxit as it  # noqa: E402
from fgxit import SRV4, check, test  # noqa: E402


def limits(env, name):
    return env.ctl("service", "show", name)["limits"]


def hold(env, port, srv, tag):
    """A connection that sent tag and stays open until told (h.tell())."""
    h = env.tcp_client(SRV4, port, [tag, "wait", b" bye"], wait=False, timeout=15.0)
    check(h.wait_event(lambda e: e.get("event") == "connected", 5), "%r did not connect", tag)
    check(srv.wait_event(lambda e: e.get("event") == "data" and
                         it.d64(e["data"]).startswith(tag), 5),
          "the service did not get %r", tag)
    return h


@test
def max_conns_refuses_the_next_and_counts_it(env):
    _, port = env.service("lim", "tcp", extra=("--layer", "proxy"))
    env.filter("lim")
    doc = env.ctl("service", "set", "lim", "--max-conns", 2)
    check(doc["limits"] == {"max_conns": 2, "over_limit": "refuse", "first_byte_timeout": 0,
                            "hits": 0, "first_hit": None, "last_hit": None},
          "service set --max-conns: %r", doc.get("limits"))
    srv = env.tcp_server(port, idle=15.0)
    t0 = int(time.time())
    held = [hold(env, port, srv, b"held %d" % i) for i in range(2)]
    # the third, past the limit: reset, and the service never sees it
    # (reset at accept: the client may see it before its connect() returns)
    c = env.tcp_client(SRV4, port, [b"third one"], timeout=5.0)
    check(c["end"] == "reset" and not c["received"], "the connection past the limit: %r", c)
    got = b"".join(it.d64(e["data"]) for e in srv.all("data"))
    check(b"third" not in got, "the service got the refused connection's bytes: %r", got)
    lim = it.wait_until(lambda: limits(env, "lim")["hits"] == 1 and limits(env, "lim"),
                        timeout=4)
    check(lim and lim["first_hit"] >= t0 and lim["last_hit"] >= lim["first_hit"],
          "the hit is not counted: %r", limits(env, "lim"))
    p = env.ctl_raw("service", "show", "lim", json_out=False)
    check("2 connections, over it refuse" in p.stdout and "at limit:  1 (first " in p.stdout,
          "service show:\n%s", p.stdout)
    # one goes: there is room again
    held[0].tell()
    check(it.client_result(held[0], 10)["end"] == "eof", "the held connection was cut")
    ok = it.wait_until(lambda: env.tcp_client(SRV4, port, [b"fourth", ("read", 0.2)])["end"] ==
                       "eof", timeout=4, step=0.3)
    check(ok, "a connection under the limit again was refused")
    # forward: past the limit it is relayed (and filtered) all the same, and counted
    env.ctl("service", "set", "lim", "--over-limit", "forward")
    h2 = hold(env, port, srv, b"held again")
    c = env.tcp_client(SRV4, port, [b"fifth passes"], timeout=5.0)
    check(c["end"] == "eof", "forward: the connection past the limit: %r", c)
    s = it.server_conn_starting(srv, b"fifth passes")
    check(s["data"] == b"fifth passes", "forward: the service got %r", s["data"])
    c = env.tcp_client(SRV4, port, [b"sixth " + it.EVIL], timeout=5.0)
    check(c["end"] == "reset", "forward: a connection past the limit is not filtered: %r", c)
    lim = it.wait_until(lambda: limits(env, "lim")["hits"] == 3 and limits(env, "lim"),
                        timeout=4)
    check(lim and lim["over_limit"] == "forward", "forward hits: %r", limits(env, "lim"))
    for h in (held[1], h2):
        h.tell()
        it.client_result(h, 10)
    # kept across a restart of controld
    env.stop_controld()
    env.start_controld()
    lim = limits(env, "lim")
    check(lim["hits"] == 3 and lim["first_hit"] >= t0 and lim["max_conns"] == 2,
          "after a restart: %r", lim)
    # a backup keeps the limits (and one without them, as every older one, loads without)
    path = os.path.join(env.tmp, "lim.backup")
    env.ctl("export", path)
    with open(path) as f:
        doc = json.load(f)
    bl = [x for x in doc["services"] if x["name"] == "lim"][0]["limits"]
    check(bl == {"max_conns": 2, "over_limit": "forward", "first_byte_timeout": 0},
          "the backup's limits: %r", bl)
    env.ctl("service", "set", "lim", "--max-conns", 5, "--over-limit", "refuse")
    env.ctl("import", path)
    lim = limits(env, "lim")
    check(lim["max_conns"] == 2 and lim["over_limit"] == "forward" and lim["hits"] == 3,
          "after the backup's import: %r", lim)
    # 0 removes it
    doc = env.ctl("service", "set", "lim", "--max-conns", 0)
    check(doc["limits"]["max_conns"] == 0, "--max-conns 0: %r", doc["limits"])


@test
def first_byte_timeout_closes_a_silent_connection(env):
    _, port = env.service("fbt", "tcp", extra=("--layer", "proxy"))
    env.ctl("service", "set", "fbt", "--first-byte-timeout", 1)
    srv = env.tcp_server(port, idle=15.0)
    talker = hold(env, port, srv, b"talking")
    t0 = time.monotonic()
    c = env.tcp_client(SRV4, port, [4.0, b"too late"], timeout=8.0)
    took = time.monotonic() - t0
    check(c["connected"] and c["end"] == "reset", "a silent connection was not closed: %r", c)
    got = b"".join(it.d64(e["data"]) for e in srv.all("data"))
    check(b"too late" not in got, "the service got the silent connection's bytes: %r", got)
    check(took < 4.0 + 3, "the silent connection took %.1f s", took)
    # the one that talked stays open well past the timeout
    talker.tell()
    r = it.client_result(talker, 10)
    check(r["end"] == "eof", "a connection that talked was closed: %r", r)
    s = it.server_conn_starting(srv, b"talking")
    check(s["data"] == b"talking bye", "the talker's bytes: %r", s["data"])


@test
def udp_flows_count_against_max_conns(env):
    """On a proxy-layer UDP service each flow (client address and port) is one of its
    connections: past --max-conns a new flow's datagrams are dropped and counted, with forward
    relayed; the flows open keep going."""
    _, port = env.service("ulim", "udp", extra=("--layer", "proxy"))
    env.ctl("service", "set", "ulim", "--max-conns", 1)
    srv = env.udp_server(port, echo=True)
    a = env.udp_client(SRV4, port, [b"flow a 1"], sport=41001)
    check(a["replies"] == [b"flow a 1"], "the first flow: %r", a)
    # flow a stays open (--udp-idle 30 s): a second flow is past the limit
    b = env.udp_client(SRV4, port, [b"flow b 1", b"flow b 2"], sport=41002)
    check(b["replies"] == [], "a flow past the limit got replies: %r", b)
    got = it.dgrams(srv)
    check(not any(d.startswith(b"flow b") for d in got), "the service got %r", got)
    a = env.udp_client(SRV4, port, [b"flow a 2"], sport=41001)
    check(a["replies"] == [b"flow a 2"], "the open flow stopped: %r", a)
    lim = it.wait_until(lambda: limits(env, "ulim")["hits"] >= 1 and limits(env, "ulim"),
                        timeout=4)
    check(lim and lim["hits"] == 2, "each refused datagram is a hit: %r", limits(env, "ulim"))
    # forward: past the limit, relayed (and counted)
    env.ctl("service", "set", "ulim", "--over-limit", "forward")
    c = env.udp_client(SRV4, port, [b"flow c 1"], sport=41003)
    check(c["replies"] == [b"flow c 1"], "forward did not relay: %r", c)
    check(it.wait_until(lambda: limits(env, "ulim")["hits"] == 3, timeout=4),
          "the forwarded flow is not counted: %r", limits(env, "ulim"))


@test
def nfqueue_layer_refuses_limits(env):
    env.service("nfq-lim", "tcp")
    for opt in (("--max-conns", 3), ("--first-byte-timeout", 5)):
        p = env.ctl_raw("service", "set", "nfq-lim", *opt)
        check(p.returncode == 4 and "proxy layer" in p.stderr, "%s on nfqueue: rc %d %s", opt,
              p.returncode, p.stderr)
    p = env.ctl_raw("service", "set", "nfq-lim", "--over-limit", "drop")
    check(p.returncode == 4, "--over-limit drop: rc %d %s", p.returncode, p.stderr)
    check(limits(env, "nfq-lim")["max_conns"] == 0, "a refused limit was stored")


if __name__ == "__main__":
    sys.exit(it.run_module("svc_limits"))
