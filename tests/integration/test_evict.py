#!/usr/bin/python3
"""Integration: a SYN flood from spoofed sources must not cost a connection its scan state
(issue 11, item 3), IPv4 and IPv6.

`ev` on a real connection, then thousands of SYNs from other addresses (the server answers
each with a SYN-ACK, whose copy anchors an embryonic flow in the worker), then `il1337` on the
first connection: it must still be matched, so the server never reads `evil1337`. The worker's
flow table is made small (--nfq-flows) so that a few thousand SYNs overflow it many times over,
as 200,000 do the default one. The spoofed sources (10.78.0.0/16, fd78::/64) are routed back
through the client namespace, which drops the SYN-ACKs: nobody answers them. Honest connections
made during and after the flood work."""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fgxit as it  # noqa: E402
from fgxit import CLI4, CLI6, SRV4, SRV6, check, test  # noqa: E402

# Per worker thread (the module's controld runs 2 threads). FGX_IT_NFQ_FLOWS=0 keeps the
# worker's default table (65,536) and floods it with 200,000 SYNs, as in the issue (slow; it
# also prints the worker's memory after the flood).
FLOWS = int(os.environ.get("FGX_IT_NFQ_FLOWS", "256"))
FLOOD = 4000 if FLOWS else 200000
TABLE = FLOWS or 65536
HOSTS = (("v4", SRV4, CLI4, "10.78.0.0"), ("v6", SRV6, CLI6, "fd78::"))


def setup(env):
    it.sh("ip", "-n", env.srv, "route", "add", "10.78.0.0/16", "via", CLI4)
    it.sh("ip", "-n", env.srv, "-6", "route", "add", "fd78::/64", "via", CLI6)


def flood(env, dst, port, net, count=FLOOD, rate=0, wait=True):
    h = env.helper(env.cli, "synflood", "--dst", dst, "--dport", port, "--src-net", net,
                   "--count", count, "--rate", rate)
    if not wait:
        return h
    res = h.wait_event(lambda e: e.get("event") == "result", 120)
    check(res is not None and res.get("sent") == count, "the flood did not run: %r %s", res,
          h.stderr.decode(errors="replace")[-300:])
    # let the worker take the last SYN-ACK copies
    time.sleep(0.5)
    return res


def nfq_worker(env):
    for w in env.ctl("worker", "list"):
        if w.get("kind") == "nfq":
            return w
    raise AssertionError("no nfq worker in worker list")


def server_got(srv, sport, want, timeout=5):
    suffix = ":%d" % sport
    acc = srv.wait_event(lambda e: e.get("event") == "accept" and
                         e.get("peer", "").endswith(suffix), timeout)
    check(acc is not None, "the server never accepted the connection from port %d", sport)

    def got():
        return b"".join(it.d64(e["data"]) for e in srv.all("data") if e.get("id") == acc["id"])
    check(it.wait_until(lambda: got().startswith(want), timeout), "the server read %r, not %r",
          got()[:80], want)


@test
def syn_flood_keeps_the_scan_state_of_an_open_connection(env):
    _, port = env.service("ev-flood", "tcp")
    env.filter("ev-flood")
    srv = env.tcp_server(port, idle=60)
    for fam, host, _, net in HOSTS:
        h = env.tcp_client(host, port, [b"ev", "wait", b"il1337", ("read", 1.0)], timeout=4,
                           wait=False)
        ev = h.wait_event(lambda e: e.get("event") == "connected", 5)
        check(ev is not None, "no connection over %s", fam)
        server_got(srv, ev["sport"], b"ev")
        res = flood(env, host, port, net)
        w = nfq_worker(env)
        if not FLOWS:
            print("    %s: %d SYNs in %.1fs: %d flows, worker RSS %.1f MiB" %
                  (fam, res["sent"], res["secs"], w["flows"], w["rss_bytes"] / 2**20))
        check(w["flows"] <= 2 * TABLE, "%d flows tracked, more than the table's %d", w["flows"],
              2 * TABLE)
        check(w["flows"] >= 2 * TABLE // 4, "the flood made only %d flows: did it reach the "
              "worker?", w["flows"])
        h.tell()
        c = it.client_result(h, 20)
        s = it.server_conn_of(srv, ev["sport"], timeout=10)
        it.assert_blocked(c, s)
        check(s["data"] == b"ev", "over %s the server read %r", fam, s["data"])
    w = nfq_worker(env)
    check(w.get("flows_evicted") == 0 and w.get("midstream_resets") == 0,
          "the flood pushed out a flow with stream state: %r", w)


# How long an honest client waits for the server's end after its own. Under the flood on a
# loaded machine a queued segment may be dropped by the kernel (the worker's queue full) and sent
# again by TCP after 0.2, 0.6, 1.4, 3.0, 6.2 s (its doubling backoff): 3 s allowed four tries.
# A stall (a segment the worker never passes) still ends the client, as a timeout, and fails.
HONEST_TIMEOUT = 10.0


def honest_conn(env, srv, host, port, steps, what):
    """One connection, found on the server by its source port (not by its rank among the
    server's connections, which a connection that never connected would shift: the server's
    n-th connection was then waited for in vain, saying only that it "did not end"). A client
    that did not connect or timed out says so, with the worker's counters."""
    c, sport = env.tcp_conn(host, port, steps, timeout=HONEST_TIMEOUT)
    if not c["connected"] or c["end"] == "timeout":
        w = nfq_worker(env)
        raise AssertionError("%s: the client %s (%r); worker: %r" % (
            what, "timed out" if c["connected"] else "did not connect", c,
            {k: w.get(k) for k in ("queue_drops", "flows", "flows_evicted", "midstream_resets",
                                   "verdict_errors")}))
    return c, it.server_conn_of(srv, sport)


@test
def honest_connections_during_and_after_a_flood(env):
    _, port = env.service("ev-honest", "tcp")
    env.filter("ev-honest")
    srv = env.tcp_server(port, idle=30)
    n = 0
    for fam, host, _, net in HOSTS:
        h = flood(env, host, port, net, count=4000, rate=2000, wait=False)
        # during: each sends as soon as it is connected, as clients do
        while h.wait_event(lambda e: e.get("event") == "result", 0) is None:
            sent = b"hello " + fam.encode() + b" %d" % n
            n += 1
            c, s = honest_conn(env, srv, host, port, [sent], "honest connection %d" % n)
            it.assert_passed(c, s, sent)
            if n > 200:
                break
        check(n >= 2, "no honest connection during the flood over %s", fam)
        # after: clean data passes, a match is still blocked
        c, s = honest_conn(env, srv, host, port, [b"after ", 0.2, b"the flood"], "after")
        it.assert_passed(c, s, b"after the flood")
        c, s = honest_conn(env, srv, host, port, [b"ev", 0.2, b"il1337"], "the attack after")
        it.assert_blocked(c, s)
    w = nfq_worker(env)
    check(w.get("midstream_resets") == 0, "an honest connection was reset: %r", w)


@test
def flow_pushed_out_of_a_full_table_is_reset_not_restarted(env):
    """A table full of flows with stream state must push one out: that connection's next bytes
    are not scanned as a fresh stream (`il1337` alone matches nothing) but reset."""
    env.stop_controld()
    env.start_controld(extra_args=["--nfq-flows", 16])
    try:
        _, port = env.service("ev-full", "tcp")
        env.filter("ev-full")
        srv = env.tcp_server(port, idle=30)
        conns = []
        for i in range(40):
            h = env.tcp_client(SRV4 if i % 2 else SRV6, port, [b"ev", "wait", b"il1337",
                                                               ("read", 1.0)],
                               timeout=6, wait=False)
            ev = h.wait_event(lambda e: e.get("event") == "connected", 5)
            check(ev is not None, "connection %d did not connect", i)
            server_got(srv, ev["sport"], b"ev")
            conns.append((h, ev["sport"]))
        w = nfq_worker(env)
        check(w.get("flows_evicted", 0) > 0, "40 connections did not overflow 2 x 16 flows: %r",
              w)
        for h, _ in conns:
            h.tell()
        for i, (h, sport) in enumerate(conns):
            c = it.client_result(h, 20)
            s = it.server_conn_of(srv, sport, timeout=10)
            it.assert_blocked(c, s)
            check(s["data"] == b"ev", "connection %d: the server read %r", i, s["data"])
        w = nfq_worker(env)
        check(w.get("midstream_resets", 0) > 0, "no connection pushed out was reset: %r", w)
    finally:
        env.stop_controld()
        env.start_controld()


if __name__ == "__main__":
    sys.exit(it.run_module("evict", setup=setup,
                           controld_args=("--nfq-flows", FLOWS) if FLOWS else ()))
