#!/usr/bin/python3
"""Integration: IP fragments against nfqueue-layer services only, crafted with scapy.

No proxy-layer service exists in this module's namespaces, so nothing loads the kernel's
defragmenter there (conntrack and tproxy would): the NFQUEUE rules see the fragments themselves,
as they arrive, while the server's own stack still reassembles them for the service. Only the
first fragment carries the ports, so it alone meets a service's rules; fgex must drop it,
whatever it holds, or the later fragments (which match no rule and pass) complete a payload
nobody scanned. The service must never read evil1337 however it is cut: split across
fragments, header-only first fragments, 8-byte fragments, out of order, overlapping with other
content, IPv4 and IPv6 fragment headers, TCP and UDP.

The client kernel would reset the connection scapy opens behind its back: an nft table in the
CLIENT namespace (never the host) drops its resets for the crafted flows."""
import json
import time
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fgxit as it  # noqa: E402
from fgxit import CLI4, CLI6, CLI_IF, EVIL, SRV4, SRV6, check, test  # noqa: E402

FAMS = (("v4", CLI4, SRV4), ("v6", CLI6, SRV6))
LEAD = b"hello "
# The same 16-bit words as evil1337 in another order: the same TCP/UDP checksum, so an overlap
# of the two contents gives a valid segment whichever copy the receiver keeps. No match.
ALT = b"1337evil"


def setup(env):
    # Later IPv4 fragments are let through first: in this output hook the reset rule was seen
    # to drop some of the test's own fragments (sendto: EPERM, at random: it depends on the
    # bytes at the fragment's start, as if they were a TCP header).
    ruleset = ("table inet fgxit {\n chain out {\n  type filter hook output priority 0;\n"
               "  ip frag-off & 0x1fff != 0 accept\n"
               "  tcp sport 40000-49999 tcp flags & rst == rst drop\n }\n}\n")
    it.sh("ip", "netns", "exec", env.cli, "nft", "-f", "-", input=ruleset)
    env.next_sport = 40000


def send_frags(env, src, dst, dport, cases, proto="tcp"):
    """cases: [(payload, fragments, tcp_opts)], one connection (or datagram) each, in order."""
    return send_frags_result(send_frags_start(env, src, dst, dport, cases, proto))


def send_frags_start(env, src, dst, dport, cases, proto="tcp", parallel=False):
    """send_frags' first half: the helper starts. parallel: its cases go at once, each on a
    connection of its own; helpers started together run at once too."""
    sport = env.next_sport + 1
    env.next_sport += len(cases)
    doc = [{"payload": p.hex(), "alt": ALT.hex(), "tcp_opts": o, "frags": f}
           for p, f, o in cases]
    h = env.helper(env.cli, "frag", "--iface", CLI_IF, "--src", src, "--dst", dst, "--sport",
                   sport, "--dport", dport, "--proto", proto, "--lead",
                   LEAD.hex() if proto == "tcp" else "", "--cases", json.dumps(doc), "--fin",
                   *(["--parallel"] if parallel else []))
    return h, src, dst, sport, len(cases)


def send_frags_result(started):
    """send_frags' second half: the result; "sports" lists each case's client port."""
    h, src, dst, sport, count = started
    res = it.client_result(h, 10 + 3 * count)
    if not res.get("handshake"):
        time.sleep(0.5)  # the traceback, if any, follows the result
    check(res.get("handshake"), "crafted handshakes %s -> %s failed: %r %s", src, dst, res,
          h.stderr.decode(errors="replace")[-2000:])
    return dict(res, sports=list(range(sport, sport + count)))


def send_frags_all(env, dport, cases, fams=None):
    """Every case over each family, all at once (TCP); [(fam, result)] in FAMS' order."""
    started = [(fam, send_frags_start(env, src, dst, dport, cases, parallel=True))
               for fam, src, dst in (fams or FAMS)]
    return [(fam, send_frags_result(st)) for fam, st in started]


def tcp_cases():
    return [(EVIL, plan, opts) for _, opts, plan in TCP_PLANS]


def v6_keeps(opts, plan):
    """Linux drops an IPv6 first fragment that does not hold the whole TCP header (RFC 7112)."""
    return all(length >= 20 + opts for off, length, _, _ in plan if off == 0)


def even(seg_len, size):
    """The segment cut into fragments of size bytes (a multiple of 8), in order."""
    return [[off, size, None, None] for off in range(0, seg_len, size)]


# (name, TCP NOP option bytes, fragments [offset, length, "alt" or None, more or None]).
# A 20-byte TCP header + evil1337 is 28 bytes. With 12 NOP bytes the header alone is 32 bytes
# (doff 8, Linux's usual length), with 4 it is 24 (doff 6): a first fragment that is exactly a
# header looks like a segment with no payload.
TCP_PLANS = (
    ("split in the payload", 0, [[0, 24, None, None], [24, 4, None, None]]),
    ("header-only first fragment, doff 8", 12, [[0, 32, None, None], [32, 8, None, None]]),
    ("header-only first fragment, doff 6", 4, [[0, 24, None, None], [24, 8, None, None]]),
    ("8-byte fragments", 0, even(28, 8)),
    ("8-byte fragments, doff 8", 12, even(40, 8)),
    ("last fragment first", 0, [[24, 4, None, None], [0, 24, None, None]]),
    ("ports-only first fragment, sent last", 12, [[8, 32, None, None], [0, 8, None, None]]),
    # overlaps (header 24 bytes, payload at 24..32): the two copies of the payload differ,
    # evil1337 and 1337evil; whichever the receiver keeps, it must not read evil1337
    ("overlap, evil copy second", 4,
     [[0, 24, None, True], [24, 8, "alt", False], [24, 8, None, False]]),
    ("overlap, evil copy first", 4,
     [[24, 8, None, False], [16, 16, "alt", False], [0, 16, None, True]]),
    ("overlap, header-only first fragment twice", 4,
     [[0, 24, None, True], [0, 24, "alt", True], [24, 8, None, False]]),
)

UDP_PLANS = (
    ("header-only first fragment", b"evil1337", [[0, 8, None, None], [8, 8, None, None]]),
    ("last fragment first", b"evil1337", [[8, 8, None, None], [0, 8, None, None]]),
    ("split in the payload", b"x evil1337", [[0, 16, None, None], [16, 2, None, None]]),
    ("overlap, evil copy second", b"evil1337",
     [[0, 8, None, True], [8, 8, "alt", False], [8, 8, None, False]]),
)


@test
def nfqueue_only_fragments_reach_fgex_unreassembled(env):
    # The world this module tests: with no proxy-layer service, nothing reassembles fragments
    # before fgex's rules, so the worker sees the first fragment itself and drops it (a clean
    # one too). Without a service on the port, the same fragments reach the server whole: the
    # crafted fragments are good, and the server's stack reassembles them.
    port = env.port()
    srv = env.tcp_server(port)
    plan = [(b"harmless", [[0, 24, None, None], [24, 8, None, None]], 0)]
    for fam, res in send_frags_all(env, port, plan):
        s = it.server_conn_of(srv, res["sports"][0])
        check(s["data"] == LEAD + b"harmless", "%s: no service: server got %r", fam, s["data"])
    env.service("frag-clean", "tcp", port=port)
    env.filter("frag-clean")
    for fam, res in send_frags_all(env, port, plan):
        s = it.server_conn_of(srv, res["sports"][0])
        check(s["data"] == LEAD, "%s: a fragmented segment passed fgex (server got %r): were "
              "the fragments reassembled before the rules?", fam, s["data"])
    env.ctl("service", "rm", "--yes", "--yes", "frag-clean")


@test
def tcp_fragments_never_deliver_the_match(env):
    _, port = env.service("frag-tcp", "tcp")
    env.filter("frag-tcp")
    srv = env.tcp_server(port)
    bad = []
    for fam, res in send_frags_all(env, port, tcp_cases()):
        for (name, _, _), sport in zip(TCP_PLANS, res["sports"]):
            s = it.server_conn_of(srv, sport)
            if EVIL in s["data"]:
                bad.append("%s %s: server read %r" % (fam, name, s["data"]))
            elif s["data"] != LEAD:
                bad.append("%s %s: server read %r, expected the lead segment only" %
                           (fam, name, s["data"]))
    check(not bad, "fragments delivered the match:\n    %s", "\n    ".join(bad))


@test
def tcp_fragment_plans_deliver_without_fgex(env):
    # The plans above are real attacks: with no service on the port, those the receiver
    # reassembles (all but the differing overlaps, which Linux discards whole, and over IPv6
    # a first fragment without the whole TCP header) deliver evil1337.
    port = env.port()
    srv = env.tcp_server(port)
    missing = []
    for fam, res in send_frags_all(env, port, tcp_cases()):
        for (name, opts, plan), sport in zip(TCP_PLANS, res["sports"]):
            s = it.server_conn_of(srv, sport)
            want = not name.startswith("overlap, evil") and (fam == "v4" or v6_keeps(opts, plan))
            if want and s["data"] != LEAD + EVIL:
                missing.append("%s %s: %r" % (fam, name, s["data"]))
    check(not missing, "plans that did not deliver without fgex:\n    %s",
          "\n    ".join(missing))


@test
def udp_fragments_never_deliver_the_match(env):
    _, port = env.service("frag-udp", "udp")
    env.filter("frag-udp")
    srv = env.udp_server(port)
    bad = []
    for fam, src, dst in FAMS:
        before = len(it.dgrams(srv))
        send_frags(env, src, dst, port, [(p, f, 0) for _, p, f in UDP_PLANS], proto="udp")
        it.wait_until(lambda: len(it.dgrams(srv)) > before, timeout=0.5)
        got = it.dgrams(srv)[before:]
        if any(EVIL in d for d in got):
            bad.append("%s: server read %r" % (fam, got))
    # the datagrams themselves are good: unfragmented, a clean one passes and evil1337 drops;
    # with no service, the fragments deliver
    for fam, src, dst in FAMS:
        before = len(it.dgrams(srv))
        env.udp_client(dst, port, [b"clean " + fam.encode(), b"x " + EVIL])
        it.wait_until(lambda: len(it.dgrams(srv)) > before, timeout=1.0)
        got = it.dgrams(srv)[before:]
        check(got == [b"clean " + fam.encode()], "%s: unfragmented datagrams: %r", fam, got)
    free = env.port()
    srv2 = env.udp_server(free)
    send_frags(env, CLI4, SRV4, free, [(p, f, 0) for _, p, f in UDP_PLANS[:3]], proto="udp")
    it.wait_until(lambda: len(it.dgrams(srv2)) >= 3, timeout=1.0)
    check(sorted(it.dgrams(srv2)) == sorted([p for _, p, _ in UDP_PLANS[:3]]),
          "no service: the fragments delivered %r", it.dgrams(srv2))
    check(not bad, "fragments delivered the match:\n    %s", "\n    ".join(bad))


if __name__ == "__main__":
    sys.exit(it.run_module("frag", setup=setup))
