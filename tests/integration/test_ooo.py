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
    # Crafted decoys of 5000 bytes go out as one segment.
    it.sh("ip", "-n", env.srv, "link", "set", it.SRV_IF, "mtu", "9000")
    it.sh("ip", "-n", env.cli, "link", "set", CLI_IF, "mtu", "9000")
    env.next_sport = 40000


def crafted(env, src, dst, dport, segments, fin=True, retransmit=0.5):
    return crafted_result(crafted_start(env, src, dst, dport, segments, fin, retransmit))


def crafted_start(env, src, dst, dport, segments, fin=True, retransmit=0.5):
    """crafted's first half: the helper starts; flows started together run at once."""
    env.next_sport += 1
    h = env.helper(env.cli, "ooo", "--iface", CLI_IF, "--src", src, "--dst", dst, "--sport",
                   env.next_sport, "--dport", dport, "--segments",
                   json.dumps([[off, data.hex()] for off, data in segments]),
                   "--pause", 0.2, "--retransmit", retransmit, "--linger", 0.5,
                   *(["--fin"] if fin else []))
    return h, src, dst, env.next_sport


def crafted_result(started):
    """crafted's second half: the helper's result (adds "sport")."""
    h, src, dst, sport = started
    res = it.client_result(h, 30)
    check(res.get("handshake"), "crafted handshake %s -> %s failed: %r %s", src, dst, res,
          h.stderr.decode(errors="replace")[-300:])
    return dict(res, sport=sport)


@test
def ooo_clean_payload_delivered_whole(env):
    _, port = env.service("ooo-clean", "tcp")
    env.filter("ooo-clean")
    srv = env.tcp_server(port)
    # both families at once, each on its own client port
    started = [crafted_start(env, src, dst, port, [(2, b"xx1337"), (0, b"ev")])
               for src, dst in FAMS]
    for st in started:
        res = crafted_result(st)
        s = it.server_conn_of(srv, res["sport"])
        check(s["data"] == b"evxx1337" and s["end"] == "eof",
              "clean out-of-order payload over %s: server got %r, end %s", st[2], s["data"],
              s["end"])


@test
def ooo_match_blocked(env):
    _, port = env.service("ooo-evil", "tcp")
    env.filter("ooo-evil")
    srv = env.tcp_server(port)
    started = [crafted_start(env, src, dst, port, [(2, b"il1337"), (0, b"ev")])
               for src, dst in FAMS]
    for st in started:
        dst = st[2]
        res = crafted_result(st)
        s = it.server_conn_of(srv, res["sport"])
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
    # the four batteries at once: each its own family and port, none waits for an answer
    hs = [env.helper(env.cli, "malformed", "--src", src, "--dst", dst, "--dport", port)
          for src, dst in FAMS for port in (tport, uport)]
    for h in hs:
        res = it.client_result(h, 20)
        check(res.get("sent") == 3 * res.get("kinds", -1), "malformed packets not all sent: %r %s",
              res, h.stderr.decode(errors="replace")[-300:])
    pid2, w = env.worker_pid()
    check(pid2 == pid and it.pid_alive(pid) and w.get("state") == "running",
          "the worker did not survive malformed packets: pid %d -> %d, %r", pid, pid2, w)
    srv = env.tcp_server(tport)
    for n, host in enumerate((SRV4, SRV6), start=1):
        c = env.tcp_client(host, tport, [b"x evil1337"])
        it.assert_blocked(c, it.server_conn(srv, 2 * n - 1))
        c = env.tcp_client(host, tport, [b"clean"])
        it.assert_passed(c, it.server_conn(srv, 2 * n), b"clean")


# ---- evasion: bytes the receiver discards must not make the real ones look already passed ----

class Crafter(it.Helper):
    """it.Helper running this file's `craft` mode (below) instead of fgxhelper.py: one process
    in the client namespace serves every crafted flow of a test (evade: one at a time;
    evade_start: several at once)."""

    def __init__(self, ns, *argv):  # pylint: disable=super-init-not-called
        self.argv = [str(a) for a in argv]
        self.proc = it.subprocess.Popen(["ip", "netns", "exec", ns, it.PY,
                                         os.path.abspath(__file__), "craft"] + self.argv,
                                        stdin=it.subprocess.PIPE, stdout=it.subprocess.PIPE,
                                        stderr=it.subprocess.PIPE)
        self.events = []
        self.cond = it.threading.Condition()
        self.stderr = b""
        self.t_out = it.threading.Thread(target=self._read, daemon=True)
        self.t_out.start()
        self.t_err = it.threading.Thread(target=self._read_err, daemon=True)
        self.t_err.start()
        self.flows = 0


def crafter(env):
    """This test's Crafter, started at its first flow (the runner stops env.helpers after each
    test)."""
    h = getattr(env, "crafter", None)
    if h is None or h not in env.helpers or h.proc.poll() is not None:
        h = Crafter(env.cli, "--iface", CLI_IF)
        env.helpers.append(h)
        env.crafter = h
    return h


def evade(env, src, dst, dport, segments, timestamps=False, sport=None, close=False):
    """segments: [(offset, bytes, kind)], kind "" (honest), "badsum" (a wrong TCP checksum),
    "noack" (no ACK flag), "paws" (a timestamp older than the last one: PAWS discards it),
    "syn" (a SYN, no payload, whose sequence number + 1 is offset: the established server
    answers it with a challenge ACK), or one the server's kernel discards after the hook that
    queues it: "md5" (a TCP MD5 option, no key), "lsrr"/"ssrr" (IPv4 source route), "dstopt"
    (IPv6 destination option of an unknown type whose top bits say discard), "rh0" (IPv6
    routing header type 0 with a segment left), "ackunsent" (acknowledges bytes the server never
    sent), "oldack" (acknowledges bytes long before what the server had acknowledged, RFC 5961),
    "pawsunseen" (a pure ACK the rules do not queue moves the server's newest timestamp on, then
    the segment carries an older one); or "urg:N" (URG set, urgent pointer N), "urgack:N" (a
    pure ACK at offset with URG and urgent pointer N). sport: reuse that client port (default: a new one);
    close: wait for the server's FIN and acknowledge it, so that the server forgets the
    connection and the 4-tuple can be used again at once."""
    return evade_result(env, evade_start(env, src, dst, dport, segments, timestamps, sport,
                                         close))


def evade_start(env, src, dst, dport, segments, timestamps=False, sport=None, close=False):
    """evade's first half: the flow starts; returns what evade_result waits for. Flows
    started together run at once (each on its own client port)."""
    if sport is None:
        env.next_sport += 1
        sport = env.next_sport
    h = crafter(env)
    h.flows += 1
    seq = h.flows
    h.tell(json.dumps({"seq": seq, "src": src, "dst": dst, "sport": sport, "dport": dport,
                       "segments": [[off, data.hex(), kind] for off, data, kind in segments],
                       "timestamps": timestamps, "close": close}))
    return h, seq, src, dst, sport


def evade_result(env, started):
    """evade's second half: the flow's result, once it ended (adds "sport")."""
    h, seq, src, dst, sport = started
    res = h.wait_event(lambda e: e.get("event") == "result" and e.get("seq") == seq, 30)
    check(res is not None, "the crafter gave no result for %s -> %s: %s", src, dst,
          h.stderr.decode(errors="replace")[-500:])
    check(res.get("handshake"), "crafted handshake %s -> %s failed: %r %s", src, dst, res,
          h.stderr.decode(errors="replace")[-300:])
    return dict(res, sport=sport)


def evasion_count(env):
    """The nfq worker's count of segments dropped as evasion attempts (`evasion`)."""
    return sum(int(w.get("evasion", 0)) for w in env.ctl("worker", "list")
               if w.get("kind") == "nfq")


def wait_evasion(env, before, want):
    """The worker's evasion counter (it counts the segments dropped here) grew by want."""
    deadline = it.time.monotonic() + 4
    got = evasion_count(env) - before
    while got < want and it.time.monotonic() < deadline:
        it.time.sleep(0.05)
        got = evasion_count(env) - before
    check(got >= want, "the worker counted %d dropped evasion segment(s), expected %d", got, want)


def evasion_case(env, name, kind, blocked, timestamps=False):
    """An honest "hello", then "xxxxxxxx" the receiver discards (kind), then "evil1337" honest
    at the same place. "hello" reaching the server proves the crafted connection works."""
    _, port = env.service(name, "tcp")
    env.filter(name)
    srv = env.tcp_server(port, idle=1.5)
    for n, (src, dst) in enumerate(FAMS, start=1):
        before = evasion_count(env)
        res = evade(env, src, dst, port, [(0, b"hello", ""), (5, b"xxxxxxxx", kind),
                                          (5, b"evil1337", "")], timestamps)
        s = it.server_conn(srv, n)
        check(b"evil1337" not in s["data"], "%s: server received %r over %s", kind, s["data"],
              dst)
        check(s["data"] == b"hello", "%s: server got %r over %s, expected only the honest "
              "\"hello\" (the receiver should discard the crafted segment)", kind, s["data"],
              dst)
        # Scanned and matched (a reset) when the worker dropped the discarded segment itself;
        # refused unscanned as an inconsistent retransmission otherwise.
        check(res["reset"] == blocked, "%s over %s: reset %s, expected %s", kind, dst,
              res["reset"], blocked)
        wait_evasion(env, before, 1)


@test
def bad_checksum_then_real_bytes_is_blocked(env):
    evasion_case(env, "ev-csum", "badsum", True)


@test
def data_without_ack_then_real_bytes_is_blocked(env):
    evasion_case(env, "ev-noack", "noack", True)


@test
def paws_discarded_then_real_bytes_is_blocked(env):
    # PAWS-old segments are refused before they reach the stream, so the real bytes are scanned.
    evasion_case(env, "ev-paws", "paws", True, timestamps=True)


# Largest first: on a worker that compares only a 256-byte ring, the first case already shows
# the real bytes reaching the server.
DECOY_SIZES = (5000, 1200, 300, 8)


def decoy_case(env, name, kind, blocked, fams=FAMS, timestamps=False):
    """The issue's decoy, at every size: an honest "hello", then a decoy of SIZE bytes that the
    server's kernel discards (kind), then the real SIZE bytes at the same sequence numbers:
    "evil1337" first, the rest the same as the decoy's (so its last 300 bytes, beyond the old
    256-byte ring, too). blocked: the worker knows the kind and refuses the decoy itself, so
    the real bytes are scanned and matched (a reset); otherwise the decoy passes, the receiver
    discards it, and the real bytes must be refused as an overlap that differs from what
    passed. Either way the server reads "hello" and nothing else."""
    _, port = env.service(name, "tcp")
    env.filter(name)
    srv = env.tcp_server(port, idle=1.5)
    n = 0
    sent = []
    for src, dst in fams:
        for size in DECOY_SIZES:
            n += 1
            decoy = bytes(0x61 + i % 23 for i in range(size))
            real = b"evil1337" + decoy[8:]
            before = evasion_count(env)
            res = evade(env, src, dst, port, [(0, b"hello", ""), (5, decoy, kind),
                                              (5, real, "")], timestamps)
            check(res["reset"] == blocked, "%s, %d bytes, over %s: reset %s, expected %s", kind,
                  size, dst, res["reset"], blocked)
            wait_evasion(env, before, 1)
            sent.append((n, size, dst))
    # The server's side of each connection, once it ended: unless a reset ended them, they end
    # when the server has waited idle (1.5 s) for more, and those waits run side by side
    # rather than one after another; the flows themselves went one at a time, as above.
    for n, size, dst in sent:
        s = it.server_conn(srv, n)
        check(b"evil1337" not in s["data"], "%s, %d bytes: server received %r over %s",
              kind, size, s["data"][:40], dst)
        check(s["data"] == b"hello", "%s, %d bytes, over %s: server got %r, expected only "
              "the honest \"hello\" (its kernel should discard the decoy)", kind, size, dst,
              s["data"][:40])


@test
def decoy_paws_of_every_size(env):
    decoy_case(env, "dc-paws", "paws", True, timestamps=True)


@test
def decoy_md5_option_of_every_size(env):
    decoy_case(env, "dc-md5", "md5", True)


@test
def decoy_ipv4_loose_source_route_of_every_size(env):
    decoy_case(env, "dc-lsrr", "lsrr", True, fams=((CLI4, SRV4),))


@test
def decoy_ipv4_strict_source_route_of_every_size(env):
    decoy_case(env, "dc-ssrr", "ssrr", True, fams=((CLI4, SRV4),))


@test
def decoy_ipv6_destination_option_discard_of_every_size(env):
    decoy_case(env, "dc-dstopt", "dstopt", True, fams=((CLI6, SRV6),))


@test
def decoy_ipv6_routing_header_type_0_of_every_size(env):
    decoy_case(env, "dc-rh0", "rh0", True, fams=((CLI6, SRV6),))


@test
def decoy_ack_of_unsent_data_of_every_size(env):
    decoy_case(env, "dc-ackunsent", "ackunsent", True)


# Kinds the worker does not refuse itself: the bytes kept until acknowledged catch the real
# ones, whatever the size.

@test
def decoy_too_old_ack_is_caught_by_the_comparison(env):
    decoy_case(env, "dc-oldack", "oldack", False)


@test
def decoy_paws_from_an_unseen_timestamp_is_caught_by_the_comparison(env):
    decoy_case(env, "dc-pawsunseen", "pawsunseen", False, timestamps=True)


def retrans_segs(env):
    """Segments the client namespace's TCP retransmitted so far."""
    out = it.sh("ip", "netns", "exec", env.cli, "nstat", "-az", "TcpRetransSegs").stdout
    for line in out.splitlines():
        if line.startswith("TcpRetransSegs"):
            return int(line.split()[1])
    raise AssertionError("no TcpRetransSegs in nstat: %r" % out)


@test
def honest_retransmissions_pass(env):
    """Identical bytes sent again pass, however far back they reach: scapy duplicates and
    overlaps, then a real transfer whose segments are lost after the worker passed them (an nft
    rule in the server namespace drops one in ten at the input hook), so the client's kernel
    retransmits them."""
    _, port = env.service("retx", "tcp")
    env.filter("retx")
    srv = env.tcp_server(port, idle=1.5)
    a = bytes(0x61 + i % 23 for i in range(3000))
    # both families at once: neither may count an evasion, so the count over both must stay
    before = evasion_count(env)
    started = [(dst, evade_start(env, src, dst, port, [(0, a, ""), (0, a, ""),
                                                       (100, a[100:2000], ""),
                                                       (2900, a[2900:] + b"tail", "")]))
               for src, dst in FAMS]
    for dst, st in started:
        res = evade_result(env, st)
        s = it.server_conn_of(srv, res["sport"])
        check(s["data"] == a + b"tail" and not res["reset"], "duplicates over %s: server got %d "
              "bytes (%r...), reset %s", dst, len(s["data"]), s["data"][:20], res["reset"])
    check(evasion_count(env) == before, "honest duplicates counted as evasion (IPv4 and IPv6): "
          "%d", evasion_count(env) - before)
    n = 2
    srv.stop()
    srv = env.tcp_server(port, sink=True, idle=5)
    rules = ("table inet fgxit {\n chain in {\n  type filter hook input priority 0;\n"
             "  tcp dport %d numgen random mod 10 == 0 drop\n }\n}\n" % port)
    it.sh("ip", "netns", "exec", env.srv, "nft", "-f", "-", input=rules)
    try:
        for host in (SRV4, SRV6):
            n += 1
            before = evasion_count(env)
            retrans = retrans_segs(env)
            # 12 MiB: more than a direction keeps (4 MiB), so the oldest kept bytes go while
            # the transfer runs, and the retransmissions must still find theirs
            h = env.helper(env.cli, "bulk-client", "--host", host, "--port", port, "--size",
                           12 << 20, "--timeout", 30)
            c = it.client_result(h, 60)
            s = it.server_conn(srv, n - 2, timeout=30)
            check(c["end"] == "eof" and s["end"] == "eof", "lossy transfer over %s: client %s, "
                  "server %s", host, c["end"], s["end"])
            check(s["bytes"] == 12 << 20 and s["sha256"] == c["sha256"], "lossy transfer over %s: "
                  "server got %d bytes (hash %s), client sent %d (%s)", host, s["bytes"],
                  s["sha256"][:12], c["sent"], c["sha256"][:12])
            check(retrans_segs(env) > retrans, "no segment was retransmitted over %s", host)
            check(evasion_count(env) == before, "honest retransmissions counted as evasion over "
                  "%s: %d", host, evasion_count(env) - before)
    finally:
        it.sh("ip", "netns", "exec", env.srv, "nft", "delete", "table", "inet", "fgxit",
              check=False)


# ---- urgent data: the receiver reads the stream without the urgent byte ----

URG_CASES = (
    # one segment, the urgent pointer at X (Linux: the byte before the pointer)
    ([(0, b"evXil1337", "urg:3")], b"evXil1337"),
    # a pointer beyond its segment names a byte of the next one
    ([(0, b"ev", "urg:3"), (2, b"Xil1337", "")], b"evXil1337"),
    # a pure ACK (never queued) names a byte still to come
    ([(0, b"", "urgack:3"), (0, b"evXil1337", "")], b"evXil1337"),
    # several urgent segments
    ([(0, b"evX", "urg:3"), (3, b"Yil1337", "urg:1")], b"evXYil1337"),
)


@test
def urgent_byte_stays_in_the_stream(env):
    """The server reads exactly the bytes sent, urgent ones included (the rules clear URG and
    the urgent pointer), so what it reads is what the worker scanned: never "evil1337" from
    "evXil1337"."""
    _, port = env.service("urg", "tcp")
    env.filter("urg")
    srv = env.tcp_server(port, idle=1.5)
    bad = []
    for src, dst in FAMS:
        # every case of a family on a connection of its own, all at once
        started = [(segs, whole, evade_start(env, src, dst, port, segs))
                   for segs, whole in URG_CASES]
        # the match itself still blocks when a byte of it is sent urgent
        match = evade_start(env, src, dst, port, [(0, b"ev", ""), (2, b"il1337", "urg:2")])
        for segs, whole, st in started:
            res = evade_result(env, st)
            s = it.server_conn_of(srv, res["sport"])
            if s["data"] != whole or res["reset"]:
                bad.append("%r over %s: server read %r, reset %s" % (segs, dst, s["data"],
                                                                      res["reset"]))
        check(not bad, "urgent data not read as sent (expected every byte, in order): %s",
              "; ".join(bad))
        res = evade_result(env, match)
        s = it.server_conn_of(srv, res["sport"])
        check(b"evil1337" not in s["data"] and res["reset"], "urgent match over %s: server read "
              "%r, reset %s", dst, s["data"], res["reset"])


@test
def urgent_byte_sent_with_msg_oob_stays_in_the_stream(env):
    _, port = env.service("oob", "tcp")
    env.filter("oob")
    srv = env.tcp_server(port, idle=1.5)
    for host in (SRV4, SRV6):
        c, sport = env.tcp_conn(host, port, [b"ev", 0.2, ("oob", b"X".hex()), 0.2, b"il1337"])
        s = it.server_conn_of(srv, sport)
        check(b"evil1337" not in s["data"], "MSG_OOB over %s: server read %r", host, s["data"])
        check(s["data"] == b"evXil1337" and c["end"] == "eof", "MSG_OOB over %s: server read %r "
              "(end %s), client end %s", host, s["data"], s["end"], c["end"])
        # an honest connection is unchanged
        c, sport = env.tcp_conn(host, port, [b"hello world"])
        it.assert_passed(c, it.server_conn_of(srv, sport), b"hello world")


@test
def urgent_byte_from_the_server_stays_in_the_stream(env):
    # The other direction (the rules' postrouting chain, a server-built packet): a reply
    # "evXil1337" with X sent as MSG_OOB must reach the client whole, as scanned.
    _, port = env.service("oob-s2c", "tcp")
    env.filter("oob-s2c", dir="s2c")
    srv = env.helper(env.srv, "tcp-server", "--port", port, "--reply", b"evXil1337".hex(),
                     "--oob-at", 2, "--idle", 2)
    check(srv.wait_event(lambda e: e.get("event") == "listening", 5) is not None,
          "tcp server did not start")
    for host in (SRV4, SRV6):
        c = env.tcp_client(host, port, [b"hi", ("read", 1.0)])
        check(c["connected"] and b"evil1337" not in c["received"], "MSG_OOB reply over %s: client "
              "read %r", host, c["received"])
        check(c["received"] == b"evXil1337", "MSG_OOB reply over %s: client read %r, end %s", host,
              c["received"], c["end"])


def syn_inside_case(env, name):
    """A SYN on an established 4-tuple placed so that a restarted scan would begin right after
    "ev": the server only answers it with a challenge ACK and goes on to receive "evil1337".
    The worker must go on scanning the stream it has: a SYN is not a new connection until the
    server's SYN-ACK says so."""
    _, port = env.service(name, "tcp")
    env.filter(name)
    srv = env.tcp_server(port, idle=1.5)
    # both families at once, each found on the server by its client port
    started = [(dst, evade_start(env, src, dst, port, [(0, b"ev", ""), (2, b"", "syn"),
                                                       (2, b"il1337", "")]))
               for src, dst in FAMS]
    for dst, st in started:
        res = evade_result(env, st)
        s = it.server_conn_of(srv, res["sport"])
        check(b"evil1337" not in s["data"], "server received %r over %s", s["data"], dst)
        check(s["data"] == b"ev" and res["reset"], "over %s: server got %r, reset %s; expected "
              "\"ev\" and a reset", dst, s["data"], res["reset"])


def server_conn_nth_of(srv, sport, k, timeout=6.0):
    """The k-th (from 1) connection the server accepted from client port sport, once it
    ended."""
    suffix = ":%d" % sport

    def accepted(e):
        return e.get("event") == "accept" and e.get("peer", "").endswith(suffix)
    check(it.wait_until(lambda: len([e for e in srv.all("accept") if accepted(e)]) >= k,
                        timeout=timeout, step=0.05),
          "the server accepted fewer than %d connections from port %d", k, sport)
    acc = [e for e in srv.all("accept") if accepted(e)][k - 1]
    return it.server_conn(srv, acc["id"], timeout)


def reused_port_case(env, name):
    """A connection that passed 300 clean bytes, closed on both sides, then a new connection on
    the same 4-tuple and the same initial sequence number: its bytes sit where the old ones
    did, far enough back that they could not be compared with what passed. They are a new
    connection's (the server's SYN-ACK restarts the flow) and must be scanned."""
    _, port = env.service(name, "tcp")
    env.filter(name)
    srv = env.tcp_server(port, idle=1.5)
    # the two families side by side (a port of their own each); in each, the second
    # connection starts once the first one ended on the server
    fams = []
    for src, dst in FAMS:
        env.next_sport += 1
        fams.append((src, dst, env.next_sport))
    firsts = [evade_start(env, src, dst, port, [(0, b"a" * 300, "")], sport=sport, close=True)
              for src, dst, sport in fams]
    for (_, dst, sport), st in zip(fams, firsts):
        evade_result(env, st)
        s = server_conn_nth_of(srv, sport, 1)
        check(s["data"] == b"a" * 300 and s["end"] == "eof", "first connection over %s: server "
              "got %d bytes, end %s", dst, len(s["data"]), s["end"])
    seconds = [evade_start(env, src, dst, port, [(0, b"evil1337", "")], sport=sport)
               for src, dst, sport in fams]
    for (_, dst, sport), st in zip(fams, seconds):
        res = evade_result(env, st)
        s = server_conn_nth_of(srv, sport, 2)
        check(b"evil1337" not in s["data"], "reused port over %s: server received %r", dst,
              s["data"])
        check(res["reset"], "reused port over %s: no reset", dst)


@test
def syn_inside_a_connection_does_not_restart_the_scan(env):
    syn_inside_case(env, "ev-syn")


@test
def reused_port_at_the_same_sequence_numbers_is_scanned(env):
    reused_port_case(env, "ev-reuse")


@test
def without_the_log_expression_syn_and_reused_port_are_the_same(env):
    # On a kernel without the nftables log expression (forced: --no-synack-log) the server's
    # SYN-ACK is queued rather than copied; it must anchor and restart flows just the same.
    env.stop_controld()
    env.start_controld(extra_args=["--no-synack-log"])
    try:
        syn_inside_case(env, "nolog-syn")
        reused_port_case(env, "nolog-reuse")
    finally:
        env.stop_controld()
        env.start_controld()


def craft_main(argv):
    """Client side of the evasion tests, in the client namespace: one process per test serves
    every crafted flow of it (scapy's import and the sniffer's start are paid once). Each line
    on stdin is a flow, {"seq", "src", "dst", "sport", "dport", "segments", "timestamps",
    "close"}: handshake, then each segment as its kind says; then a "result" event of that seq
    (like fgxhelper's ooo mode)."""
    import argparse
    import logging
    import socket
    import threading
    import time
    logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
    from scapy.all import (IP, IPv6, TCP, AsyncSniffer, HBHOptUnknown, IPOption_LSRR,  # noqa: E402
                           IPOption_SSRR, IPv6ExtHdrDestOpt, IPv6ExtHdrRouting, conf, raw)
    from fgxhelper import emit  # noqa: E402

    ap = argparse.ArgumentParser()
    ap.add_argument("--iface", required=True)
    args = ap.parse_args(argv)
    conf.verb = 0
    socks = {}
    # every TCP packet to a crafted port (40000-49999), in arrival order; a flow reads only
    # those that came after it started (a reused 4-tuple must not see the old connection's)
    seen = []
    arrived = threading.Condition()

    def keep(p):
        with arrived:
            seen.append(p)
            arrived.notify_all()

    def crafted_port(p):
        t = p.getlayer(TCP)
        return t is not None and 40000 <= t.dport <= 49999

    sniffer = AsyncSniffer(iface=args.iface, lfilter=crafted_port, prn=keep, store=False)
    sniffer.start()
    time.sleep(0.3)

    def flow(f):
        v6 = ":" in f["dst"]
        fam = socket.AF_INET6 if v6 else socket.AF_INET
        if fam not in socks:
            socks[fam] = socket.socket(fam, socket.SOCK_RAW, socket.IPPROTO_RAW)
        out = socks[fam]
        src, dst, sport, dport = f["src"], f["dst"], f["sport"], f["dport"]
        timestamps = f.get("timestamps", False)
        tsval = [100000]
        first = len(seen)

        def ours():
            with arrived:
                pkts = seen[first:]
            return [t for t in (p.getlayer(TCP) for p in pkts)
                    if t.sport == dport and t.dport == sport]

        def wait_for(pred, timeout):
            """The first packet of this flow pred accepts, waiting up to timeout."""
            deadline = time.monotonic() + timeout
            while True:
                for t in ours():
                    if pred(t):
                        return t
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                with arrived:
                    arrived.wait(min(left, 0.05))

        def ip(kind=""):
            if v6:
                base = IPv6(src=src, dst=dst)
                if kind == "dstopt":
                    return base / IPv6ExtHdrDestOpt(options=[HBHOptUnknown(otype=0x7e,
                                                                           optdata=b"\0" * 4)])
                if kind == "rh0":
                    return base / IPv6ExtHdrRouting(type=0, addresses=[dst], segleft=1)
                return base
            if kind == "lsrr":
                return IP(src=src, dst=dst, options=[IPOption_LSRR(routers=[dst])])
            if kind == "ssrr":
                return IP(src=src, dst=dst, options=[IPOption_SSRR(routers=[dst])])
            return IP(src=src, dst=dst)

        def tcp(flags, seq, ack=0, ts=None, ecr=0, md5=False, urg=0, window=65535):
            opts = []
            if timestamps:
                if ts is None:
                    tsval[0] += 10
                    ts = tsval[0]
                opts = [("NOP", None), ("NOP", None), ("Timestamp", (ts, ecr))]
            if md5:
                opts += [("MD5", b"\0" * 16), ("NOP", None), ("NOP", None)]
            return TCP(sport=sport, dport=dport, flags=flags, seq=seq, ack=ack,
                       window=window, options=opts, urgptr=urg)

        def send(pkt):
            out.sendto(raw(pkt), (dst, 0))

        def is_reset(t):
            return bool(t.flags & 0x04)

        res = {"seq": f["seq"], "handshake": False, "reset": False}
        isn = 2000000
        try:
            send(ip() / tcp("S", isn))
            synack = wait_for(lambda t: (t.flags & 0x12) == 0x12, 3)
            if synack is None:
                res["error"] = "no SYN-ACK"
                return res
            res["handshake"] = True
            ack = synack.seq + 1
            ecr = dict(synack.options).get("Timestamp", (0, 0))[0]
            send(ip() / tcp("A", isn + 1, ack, ecr=ecr))
            time.sleep(0.1)
            end = 0
            for off, hx, kind in f["segments"]:
                payload = bytes.fromhex(hx)
                end = max(end, off + len(payload))
                if kind == "syn":
                    send(ip() / tcp("S", isn + off))
                    time.sleep(0.2)
                    continue
                kname, _, karg = kind.partition(":")
                if kname == "urgack":
                    send(ip() / tcp("AU", isn + 1 + off, ack, ecr=ecr, urg=int(karg)))
                    time.sleep(0.2)
                    continue
                ts = 1 if kind == "paws" else None
                if kind == "pawsunseen":
                    tsval[0] += 100
                    send(ip() / tcp("A", isn + 1 + off, ack, ecr=ecr))
                    time.sleep(0.1)
                    ts = tsval[0] - 50
                segack = ack
                if kind == "ackunsent":
                    segack = (ack + 100000) & 0xffffffff
                elif kind == "oldack":
                    segack = (ack - 1000) & 0xffffffff
                # a window of its own keeps the old-ACK decoy off Linux's fast path, which
                # queues data before it looks at the ACK
                seg = tcp("P" if kind == "noack" else ("PAU" if kname == "urg" else "PA"),
                          isn + 1 + off, segack, ts=ts, ecr=ecr, md5=kind == "md5",
                          urg=int(karg) if kname == "urg" else 0,
                          window=1000 if kind == "oldack" else 65535)
                pkt = ip(kind) / seg / payload
                if kind == "badsum":
                    seg.chksum = (IPv6 if v6 else IP)(raw(pkt))[TCP].chksum ^ 0x5555
                    pkt = ip() / seg / payload
                if kind == "pawsunseen":
                    tsval[0] += 100
                send(pkt)
                time.sleep(0.2)
            send(ip() / tcp("FA", isn + 1 + end, ack, ecr=ecr))
            if f.get("close"):
                fin = wait_for(lambda t: bool(t.flags & 0x01), 4)
                if fin is None:
                    res["error"] = "no FIN from the server"
                    return res
                send(ip() / tcp("A", isn + 2 + end, fin.seq + len(fin.payload) + 1, ecr=ecr))
                time.sleep(0.2)
            else:
                # half a second for a reset to come back; one that came ends the wait (a
                # later packet cannot take it back)
                wait_for(is_reset, 0.5)
            return res
        finally:
            res["reset"] = any(is_reset(t) for t in ours())

    def run(f):
        emit(event="result", **flow(f))

    # each flow in a thread of its own: the test decides whether it waits for one flow's
    # result before it sends the next (evade) or lets independent flows run at once
    threads = []
    try:
        for line in sys.stdin:
            if line.strip():
                t = threading.Thread(target=run, args=(json.loads(line),), daemon=True)
                t.start()
                threads.append(t)
        for t in threads:
            t.join(30)
    finally:
        sniffer.stop()


if __name__ == "__main__":
    if sys.argv[1:2] == ["craft"]:
        sys.exit(craft_main(sys.argv[2:]))
    sys.exit(it.run_module("ooo", setup=setup))
