#!/usr/bin/python3
"""Integration: out-of-order TCP segments, hand-crafted with scapy from the client namespace.

The client kernel would reset the connection scapy opens behind its back, so an nft table in the
CLIENT namespace (never the host) drops its resets for the crafted flows. Each case first proves
the crafted connection works (a clean out-of-order payload is delivered whole), so a blocked case
cannot pass just because the handshake failed."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fgxit as it  # noqa: E402
from fgxit import CLI4, CLI6, CLI_IF, SRV4, SRV6, check, test  # noqa: E402

FAMS = ((CLI4, SRV4), (CLI6, SRV6))


def setup(env):
    ruleset = ("table inet fgxit {\n chain out {\n  type filter hook output priority 0;\n"
               "  tcp sport 40000-49999 tcp flags & rst == rst drop\n }\n}\n")
    it.sh("ip", "netns", "exec", env.cli, "nft", "-f", "-", input=ruleset)
    env.next_sport = 40000


def crafted(env, src, dst, dport, segments, fin=True, retransmit=0.5):
    env.next_sport += 1
    h = env.helper(env.cli, "ooo", "--iface", CLI_IF, "--src", src, "--dst", dst, "--sport",
                   env.next_sport, "--dport", dport, "--segments",
                   json.dumps([[off, data.hex()] for off, data in segments]),
                   "--pause", 0.2, "--retransmit", retransmit, "--linger", 0.5,
                   *(["--fin"] if fin else []))
    res = it.client_result(h, 30)
    check(res.get("handshake"), "crafted handshake %s -> %s failed: %r %s", src, dst, res,
          h.stderr.decode(errors="replace")[-300:])
    return res


@test
def ooo_clean_payload_delivered_whole(env):
    _, port = env.service("ooo-clean", "tcp")
    env.filter("ooo-clean")
    srv = env.tcp_server(port)
    for n, (src, dst) in enumerate(FAMS, start=1):
        crafted(env, src, dst, port, [(2, b"xx1337"), (0, b"ev")])
        s = it.server_conn(srv, n)
        check(s["data"] == b"evxx1337" and s["end"] == "eof",
              "clean out-of-order payload over %s: server got %r, end %s", dst, s["data"],
              s["end"])


@test
def ooo_match_blocked(env):
    _, port = env.service("ooo-evil", "tcp")
    env.filter("ooo-evil")
    srv = env.tcp_server(port)
    for n, (src, dst) in enumerate(FAMS, start=1):
        res = crafted(env, src, dst, port, [(2, b"il1337"), (0, b"ev")])
        s = it.server_conn(srv, n)
        check(b"evil1337" not in s["data"], "server received %r over %s", s["data"], dst)
        check(s["end"] == "reset", "matching bytes held back (server got only %r), but the server "
              "connection ended by %s over %s, expected reset", s["data"], s["end"], dst)
        check(res["reset"], "the crafted client saw no reset over %s", dst)


@test
def ooo_match_three_segments_reversed(env):
    _, port = env.service("ooo-rev", "tcp")
    env.filter("ooo-rev", "flag\\{[a-z]+\\}")
    srv = env.tcp_server(port)
    res = crafted(env, CLI4, SRV4, port, [(8, b"zz}"), (4, b"{abc"), (0, b"flag")])
    s = it.server_conn(srv, 1)
    check(b"flag{abczz}" not in s["data"], "server received %r", s["data"])
    check(s["end"] == "reset" and res["reset"], "no reset: server %s, client %r", s["end"], res)


@test
def malformed_packets_get_a_safe_verdict(env):
    _, tport = env.service("bad-tcp", "tcp")
    env.filter("bad-tcp")
    _, uport = env.service("bad-udp", "udp")
    env.filter("bad-udp")
    pid, _ = env.worker_pid()
    for src, dst in FAMS:
        for port in (tport, uport):
            h = env.helper(env.cli, "malformed", "--src", src, "--dst", dst, "--dport", port)
            res = it.client_result(h, 20)
            check(res.get("sent") == 3 * res.get("kinds", -1), "malformed packets not all sent: %r %s", res,
                  h.stderr.decode(errors="replace")[-300:])
    pid2, w = env.worker_pid()
    check(pid2 == pid and it.pid_alive(pid) and w.get("state") == "running",
          "the worker did not survive malformed packets: pid %d -> %d, %r", pid, pid2, w)
    srv = env.tcp_server(tport)
    for n, host in enumerate((SRV4, SRV6), start=1):
        c = env.tcp_client(host, tport, [b"x evil1337"])
        it.assert_blocked(c, it.server_conn(srv, 2 * n - 1))
        c = env.tcp_client(host, tport, [b"clean"])
        it.assert_passed(c, it.server_conn(srv, 2 * n), b"clean")


if __name__ == "__main__":
    sys.exit(it.run_module("ooo", setup=setup))
