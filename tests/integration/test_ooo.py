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


# ---- evasion: bytes the receiver discards must not make the real ones look already passed ----

class Crafter(it.Helper):
    """it.Helper running this file's `craft` mode (below) instead of fgxhelper.py."""

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


def evade(env, src, dst, dport, segments, timestamps=False, sport=None, close=False):
    """segments: [(offset, bytes, kind)], kind "" (honest), "badsum" (a wrong TCP checksum),
    "noack" (no ACK flag), "paws" (a timestamp older than the last one: PAWS discards it) or
    "syn" (a SYN, no payload, whose sequence number + 1 is offset: the established server
    answers it with a challenge ACK). sport: reuse that client port (default: a new one);
    close: wait for the server's FIN and acknowledge it, so that the server forgets the
    connection and the 4-tuple can be used again at once."""
    if sport is None:
        env.next_sport += 1
        sport = env.next_sport
    h = Crafter(env.cli, "--iface", CLI_IF, "--src", src, "--dst", dst, "--sport",
                sport, "--dport", dport, "--segments",
                json.dumps([[off, data.hex(), kind] for off, data, kind in segments]),
                *(["--timestamps"] if timestamps else []), *(["--close"] if close else []))
    env.helpers.append(h)
    res = it.client_result(h, 30)
    check(res.get("handshake"), "crafted handshake %s -> %s failed: %r %s", src, dst, res,
          h.stderr.decode(errors="replace")[-300:])
    return res


def evasion_count(env):
    """The nfq worker's count of segments dropped as evasion attempts (`evasion`)."""
    return sum(int(w.get("evasion", 0)) for w in env.ctl("worker", "list")
               if w.get("kind") == "nfq")


def wait_evasion(env, before, want):
    """The worker's evasion counter (it counts the segments dropped here) grew by want."""
    deadline = it.time.monotonic() + 4
    got = evasion_count(env) - before
    while got < want and it.time.monotonic() < deadline:
        it.time.sleep(0.25)
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
def paws_discarded_then_different_bytes_not_delivered(env):
    evasion_case(env, "ev-paws", "paws", False, timestamps=True)


def syn_inside_case(env, name):
    """A SYN on an established 4-tuple placed so that a restarted scan would begin right after
    "ev": the server only answers it with a challenge ACK and goes on to receive "evil1337".
    The worker must go on scanning the stream it has: a SYN is not a new connection until the
    server's SYN-ACK says so."""
    _, port = env.service(name, "tcp")
    env.filter(name)
    srv = env.tcp_server(port, idle=1.5)
    for n, (src, dst) in enumerate(FAMS, start=1):
        res = evade(env, src, dst, port, [(0, b"ev", ""), (2, b"", "syn"), (2, b"il1337", "")])
        s = it.server_conn(srv, n)
        check(b"evil1337" not in s["data"], "server received %r over %s", s["data"], dst)
        check(s["data"] == b"ev" and res["reset"], "over %s: server got %r, reset %s; expected "
              "\"ev\" and a reset", dst, s["data"], res["reset"])


def reused_port_case(env, name):
    """A connection that passed 300 clean bytes, closed on both sides, then a new connection on
    the same 4-tuple and the same initial sequence number: its bytes sit where the old ones
    did, far enough back that they could not be compared with what passed. They are a new
    connection's (the server's SYN-ACK restarts the flow) and must be scanned."""
    _, port = env.service(name, "tcp")
    env.filter(name)
    srv = env.tcp_server(port, idle=1.5)
    for n, (src, dst) in enumerate(FAMS):
        env.next_sport += 1
        sport = env.next_sport
        evade(env, src, dst, port, [(0, b"a" * 300, "")], sport=sport, close=True)
        s = it.server_conn(srv, 2 * n + 1)
        check(s["data"] == b"a" * 300 and s["end"] == "eof", "first connection over %s: server "
              "got %d bytes, end %s", dst, len(s["data"]), s["end"])
        res = evade(env, src, dst, port, [(0, b"evil1337", "")], sport=sport)
        s = it.server_conn(srv, 2 * n + 2)
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
    """Client side of the evasion tests, in the client namespace: handshake, then each segment
    as its kind says. Reports like fgxhelper's ooo mode."""
    import argparse
    import logging
    import socket
    import time
    logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
    from scapy.all import IP, IPv6, TCP, AsyncSniffer, conf, raw  # noqa: E402
    from fgxhelper import emit  # noqa: E402

    ap = argparse.ArgumentParser()
    for a in ("--iface", "--src", "--dst", "--segments"):
        ap.add_argument(a, required=True)
    ap.add_argument("--sport", type=int, required=True)
    ap.add_argument("--dport", type=int, required=True)
    ap.add_argument("--timestamps", action="store_true")
    ap.add_argument("--close", action="store_true")
    args = ap.parse_args(argv)
    conf.verb = 0
    v6 = ":" in args.dst
    out = socket.socket(socket.AF_INET6 if v6 else socket.AF_INET, socket.SOCK_RAW,
                        socket.IPPROTO_RAW)
    tsval = [100000]

    def ip():
        return IPv6(src=args.src, dst=args.dst) if v6 else IP(src=args.src, dst=args.dst)

    def tcp(flags, seq, ack=0, ts=None, ecr=0):
        opts = []
        if args.timestamps:
            if ts is None:
                tsval[0] += 10
                ts = tsval[0]
            opts = [("NOP", None), ("NOP", None), ("Timestamp", (ts, ecr))]
        return TCP(sport=args.sport, dport=args.dport, flags=flags, seq=seq, ack=ack,
                   window=65535, options=opts)

    def send(pkt):
        out.sendto(raw(pkt), (args.dst, 0))

    def ours(p):
        t = p.getlayer(TCP)
        return t is not None and t.sport == args.dport and t.dport == args.sport

    seen = []
    sniffer = AsyncSniffer(iface=args.iface, lfilter=ours, prn=seen.append, store=False)
    sniffer.start()
    time.sleep(0.3)
    res = {"handshake": False, "reset": False}
    isn = 2000000
    try:
        send(ip() / tcp("S", isn))
        synack = None
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline and synack is None:
            time.sleep(0.05)
            for p in list(seen):
                t = p.getlayer(TCP)
                if t is not None and (t.flags & 0x12) == 0x12:
                    synack = t
                    break
        if synack is None:
            res["error"] = "no SYN-ACK"
            return
        res["handshake"] = True
        ack = synack.seq + 1
        ecr = dict(synack.options).get("Timestamp", (0, 0))[0]
        send(ip() / tcp("A", isn + 1, ack, ecr=ecr))
        time.sleep(0.1)
        end = 0
        for off, hx, kind in json.loads(args.segments):
            payload = bytes.fromhex(hx)
            end = max(end, off + len(payload))
            if kind == "syn":
                send(ip() / tcp("S", isn + off))
                time.sleep(0.2)
                continue
            seg = tcp("P" if kind == "noack" else "PA", isn + 1 + off, ack,
                      ts=1 if kind == "paws" else None, ecr=ecr)
            pkt = ip() / seg / payload
            if kind == "badsum":
                seg.chksum = (IPv6 if v6 else IP)(raw(pkt))[TCP].chksum ^ 0x5555
                pkt = ip() / seg / payload
            send(pkt)
            time.sleep(0.2)
        send(ip() / tcp("FA", isn + 1 + end, ack, ecr=ecr))
        time.sleep(0.5)
        if args.close:
            fin = None
            deadline = time.monotonic() + 4
            while time.monotonic() < deadline and fin is None:
                for p in list(seen):
                    t = p.getlayer(TCP)
                    if t is not None and t.flags & 0x01:
                        fin = t
                        break
                time.sleep(0.05)
            if fin is None:
                res["error"] = "no FIN from the server"
                return
            send(ip() / tcp("A", isn + 2 + end, fin.seq + len(fin.payload) + 1, ecr=ecr))
            time.sleep(0.2)
    finally:
        sniffer.stop()
        res["reset"] = any(p.getlayer(TCP) is not None and p.getlayer(TCP).flags & 0x04
                           for p in seen)
        emit(event="result", **res)


if __name__ == "__main__":
    if sys.argv[1:2] == ["craft"]:
        sys.exit(craft_main(sys.argv[2:]))
    sys.exit(it.run_module("ooo", setup=setup))
