#!/usr/bin/python3
"""Integration: capture (issue 13). The workers keep the first bytes of each direction of each
service's last connections; a blocked connection's capture, with the bytes that never reached
the service, is kept by controld with its event. `fgexctl capture --pcap` writes them as a pcap
(read back here with scapy's rdpcap: real addresses, ports, sequence numbers, the blocked
payload marked by its Ethernet source), `events show SEQ` prints one, `--raw` gives its bytes,
and `filter test` runs a candidate regex over the capture."""
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fgxit as it  # noqa: E402
from fgxit import CLI4, CLI6, EVIL, SRV4, SRV6, check, test  # noqa: E402

BLOCK_MAC = "02:42:4c:4f:43:4b"


def rdpcap(path):
    from scapy.all import rdpcap as rd  # noqa: PLC0415 - scapy is slow to import
    return rd(path)


def write_pcap(env, svc, *args):
    fd, path = tempfile.mkstemp(suffix=".pcap")
    os.close(fd)
    doc = env.ctl("capture", svc, "--pcap", path, *args)
    check(doc["file"] == path, "capture --json file %r", doc)
    return path, doc


def wait_event(env, svc, pred, timeout=3):
    got = it.wait_until(lambda: [e for e in env.ctl("events", svc) if pred(e)], timeout=timeout)
    check(got, "no event of %s within %ss", svc, timeout)
    return got[0]


def tcp_payloads(pkts, sport, to_server=True):
    """(seq, payload, blocked) of the TCP segments with data of the connection from sport."""
    from scapy.all import TCP, Ether  # noqa: PLC0415
    out = []
    for p in pkts:
        if TCP not in p or not bytes(p[TCP].payload):
            continue
        if (p[TCP].sport if to_server else p[TCP].dport) != sport:
            continue
        out.append((p[TCP].seq, bytes(p[TCP].payload), p[Ether].src == BLOCK_MAC))
    return out


@test
def pcap_has_blocked_payload_and_real_flow(env):
    _, port = env.service("cap-tcp", "tcp")
    fid = env.filter("cap-tcp")
    srv = env.tcp_server(port, reply=b"HELLO-FROM-SERVER\n")
    # An honest connection (request, reply) and an attack whose second segment is blocked.
    # read half a second for the reply, then shut: the server sees the end at once (its idle
    # timeout would end a longer read)
    c, sport_ok = env.tcp_conn(SRV4, port, [b"GET /honest\r\n", ("read", 0.5)])
    it.assert_passed(c, it.server_conn_of(srv, sport_ok), b"GET /honest\r\n",
                     b"HELLO-FROM-SERVER\n")
    t0 = time.time_ns()
    c, sport_bad = env.tcp_conn(SRV4, port, [b"LOGIN admin\r\n", 0.2, b"x " + EVIL + b" payload"])
    it.assert_blocked(c, it.server_conn_of(srv, sport_bad))
    e = wait_event(env, "cap-tcp", lambda x: x["sport"] == sport_bad)

    path, doc = write_pcap(env, "cap-tcp")
    check(doc["connections"] >= 2 and doc["blocked"] >= 1, "capture summary %r", doc)
    pkts = rdpcap(path)
    from scapy.all import IP, TCP  # noqa: PLC0415
    bad = tcp_payloads(pkts, sport_bad)
    check([p for _, p, _ in bad] == [b"LOGIN admin\r\n", b"x " + EVIL + b" payload"],
          "the attack's segments in the pcap: %r", bad)
    check(not bad[0][2] and bad[1][2], "only the blocking segment is marked blocked: %r", bad)
    check(bad[1][0] - bad[0][0] == len(b"LOGIN admin\r\n"),
          "sequence numbers do not follow the stream: %r", bad)
    flow = [p for p in pkts if TCP in p and p[TCP].sport == sport_bad]
    check(all(p[IP].src == CLI4 and p[IP].dst == SRV4 and p[TCP].dport == port for p in flow),
          "the attack's packets do not carry the real addresses and ports")
    syn = [p for p in flow if p[TCP].flags == "S"]
    check(len(syn) == 1 and syn[0][TCP].seq == bad[0][0] - 1,
          "one SYN one before the stream's first byte: %r", [(p[TCP].flags, p[TCP].seq) for p in flow])
    # the SYN-ACK carries the server's real first sequence number (the worker's anchor), so
    # the client's first segment, sent before the server said anything, acknowledges it, and
    # the blocked one acknowledges the server's 18-byte greeting after it
    synack = [p for p in pkts if TCP in p and p[TCP].dport == sport_bad and p[TCP].flags == "SA"]
    data = [p for p in flow if p[TCP].flags == "PA"]
    check(len(synack) == 1 and synack[0][TCP].ack == bad[0][0] and
          [p[TCP].ack - synack[0][TCP].seq - 1 for p in data] == [0, 18],
          "the handshake's numbers: %r", [(p[TCP].flags, p[TCP].seq, p[TCP].ack) for p in pkts
                                           if TCP in p and sport_bad in (p[TCP].sport, p[TCP].dport)])
    check(abs(float(syn[0].time) * 1e9 - t0) < 5e9, "pcap time %s far from %d", syn[0].time, t0)
    ok = tcp_payloads(pkts, sport_ok)
    check([p for _, p, _ in ok] == [b"GET /honest\r\n"], "the honest request: %r", ok)
    reply = tcp_payloads(pkts, sport_ok, to_server=False)
    check([p for _, p, _ in reply] == [b"HELLO-FROM-SERVER\n"], "the server's reply: %r", reply)

    # --blocked: only the attack; --filter the same; --src of another address: nothing.
    path, doc = write_pcap(env, "cap-tcp", "--blocked")
    check(doc["connections"] == 1 and doc["blocked"] == 1, "--blocked summary %r", doc)
    check(not tcp_payloads(rdpcap(path), sport_ok), "--blocked wrote the honest connection")
    path, doc = write_pcap(env, "cap-tcp", "--filter", fid, "--since", "10m")
    check(doc["connections"] == 1, "--filter %d summary %r", fid, doc)
    path, doc = write_pcap(env, "cap-tcp", "--src", CLI6)
    check(doc["connections"] == 0, "--src %s summary %r", CLI6, doc)
    # the event's capture has the same bytes
    show = env.ctl("events", "show", e["seq"])
    check(show["capture"] is not None, "events show has no capture: %r", show)
    check(show["capture"]["c2s"] == "LOGIN admin\r\nx " + EVIL.decode() + " payload",
          "events show c2s %r", show["capture"].get("c2s"))
    check(show["event"]["seq"] == e["seq"], "events show event %r", show["event"])


@test
def events_show_hex_and_raw(env):
    _, port = env.service("cap-show", "tcp")
    env.filter("cap-show")
    srv = env.tcp_server(port)
    attack = b"\x00\x01binary\xff " + EVIL + b" tail"
    c, sport = env.tcp_conn(SRV6, port, [attack])
    it.assert_blocked(c, it.server_conn_of(srv, sport))
    e = wait_event(env, "cap-show", lambda x: x["sport"] == sport)
    p = env.ctl_raw("events", "show", e["seq"], json_out=False)
    check(p.returncode == 0, "events show failed: %s", p.stderr)
    check("blocked from here" in p.stdout and "00 01 62 69 6e 61 72 79" in p.stdout,
          "events show text lacks the hex dump or the blocked marker:\n%s", p.stdout)
    argv = [os.path.join(env.bin, "fgexctl"), "-c", env.url, "events", "show", str(e["seq"]),
            "--raw"]
    import subprocess  # noqa: PLC0415
    raw = subprocess.run(argv, capture_output=True, timeout=10)
    check(raw.returncode == 0 and raw.stdout == attack, "--raw gave %r (rc %d, %s)", raw.stdout,
          raw.returncode, raw.stderr)
    # an unknown seq is a clear error
    p = env.ctl_raw("events", "show", "999999", json_out=False)
    check(p.returncode == 3 and "no event" in p.stderr, "unknown seq: rc %d %s", p.returncode,
          p.stderr)


@test
def udp_datagrams_in_pcap(env):
    _, port = env.service("cap-udp", "udp")
    env.filter("cap-udp")
    srv = env.udp_server(port, echo=True)
    env.udp_client(SRV4, port, [b"hello udp", b"x " + EVIL], pause=0.1, wait_s=0.5)
    it.wait_until(lambda: it.dgrams(srv), timeout=2)
    wait_event(env, "cap-udp", lambda x: x["proto"] == "udp")
    path, doc = write_pcap(env, "cap-udp")
    from scapy.all import IP, UDP, Ether  # noqa: PLC0415
    dg = [(bytes(p[UDP].payload), p[Ether].src == BLOCK_MAC, p[IP].src, p[UDP].dport)
          for p in rdpcap(path) if UDP in p]
    to_srv = [d for d in dg if d[3] == port]
    check((b"hello udp", False, CLI4, port) in to_srv, "the clean datagram: %r", dg)
    check((b"x " + EVIL, True, CLI4, port) in to_srv, "the blocked datagram, marked: %r", dg)
    check(any(d[0] == b"hello udp" and d[2] == SRV4 for d in dg),
          "the server's echo is not in the pcap: %r", dg)
    # filter test on UDP scans each datagram alone (block mode), as the worker does: '$' is
    # the end of a datagram there (a TCP service refuses it)
    doc = env.ctl("filter", "test", "cap-udp", "hello udp$")
    check(doc["would_block"] == 1, "block-mode filter test on the datagrams: %r", doc)
    check(env.ctl("filter", "test", "cap-udp", "udpx")["would_block"] == 0, "a match across "
          "two datagrams")


@test
def filter_test_finds_and_spares(env):
    _, port = env.service("cap-ft", "tcp")
    srv = env.tcp_server(port)
    # both connections passed and ended on the server's side before the capture is tested
    bad, good = b"GET /flag?id=../../etc/passwd\r\n", b"GET /index.html\r\n"
    c, s1 = env.tcp_conn(SRV4, port, [bad])
    it.assert_passed(c, it.server_conn_of(srv, s1), bad)
    c, s2 = env.tcp_conn(SRV4, port, [good])
    it.assert_passed(c, it.server_conn_of(srv, s2), good)
    doc = env.ctl("filter", "test", "cap-ft", r"\.\./\.\./", "--dir", "c2s")
    check(doc["total"] >= 2, "filter test looked at %r", doc)
    hits = doc["hits"]
    check(len(hits) == 1 and hits[0]["sport"] == s1 and hits[0]["src"] == CLI4,
          "filter test hits %r, expected the connection from %d only", hits, s1)
    check(doc["spared"] == doc["total"] - 1, "spared %r", doc)
    check("../../" in hits[0]["excerpt"], "excerpt %r", hits[0]["excerpt"])
    # the same flags as filter add: --nocase matters, and s2c does not look at requests
    check(env.ctl("filter", "test", "cap-ft", "INDEX", "--nocase")["would_block"] == 1,
          "--nocase found nothing")
    check(env.ctl("filter", "test", "cap-ft", "INDEX")["would_block"] == 0, "case ignored")
    check(env.ctl("filter", "test", "cap-ft", "index", "--dir", "s2c")["would_block"] == 0,
          "--dir s2c matched a request")
    # an invalid regex: the same message and code as filter add, nothing stored
    bad = env.ctl_raw("filter", "test", "cap-ft", "a(b", json_out=False)
    add = env.ctl_raw("filter", "add", "cap-ft", "a(b", json_out=False)
    check(bad.returncode == add.returncode == 4 and bad.stderr == add.stderr,
          "filter test said %r (%d), filter add %r (%d)", bad.stderr, bad.returncode, add.stderr,
          add.returncode)
    check(env.filters("cap-ft") == [], "filter test stored a filter")
    p = env.ctl_raw("filter", "test", "cap-ft", "index", json_out=False)
    check(p.returncode == 0 and "would block 1 of" in p.stdout, "text output %r", p.stdout)


@test
def capture_off(env):
    _, port = env.service("cap-off", "tcp", extra=("--capture", "off"))
    check(env.service_doc("cap-off")["capture"] is False, "service shows capture on")
    env.filter("cap-off")
    srv = env.tcp_server(port)
    c, sport = env.tcp_conn(SRV4, port, [b"hello"])
    c, sport2 = env.tcp_conn(SRV4, port, [b"x " + EVIL])
    it.assert_blocked(c, it.server_conn_of(srv, sport2))
    e = wait_event(env, "cap-off", lambda x: x["sport"] == sport2)
    path, doc = write_pcap(env, "cap-off")
    check(doc["connections"] == 0, "capture off still captured: %r", doc)
    check(env.ctl("events", "show", e["seq"])["capture"] is None, "a capture with capture off")
    # switched on, the next connection is captured
    env.ctl("service", "set", "cap-off", "--capture", "on", "--capture-bytes", "4")
    c, sport3 = env.tcp_conn(SRV4, port, [b"abcdefgh"])
    path, doc = write_pcap(env, "cap-off")
    got = tcp_payloads(rdpcap(path), sport3)
    check([p for _, p, _ in got] == [b"abcd"], "capture on with 4 bytes kept: %r", got)


@test
def proxy_layer_capture(env):
    _, port = env.service("cap-px", "tcp", extra=("--layer", "proxy"))
    env.filter("cap-px")
    srv = env.tcp_server(port, reply=b"WELCOME\n")
    c, sport_ok = env.tcp_conn(SRV4, port, [b"HELO\r\n", ("read", 0.5)])
    # the proxy's upstream connection has a port of its own: the server's first connection
    it.assert_passed(c, it.server_conn(srv, 1), b"HELO\r\n", b"WELCOME\n")
    c, sport = env.tcp_conn(SRV4, port, [b"USER x\r\n", 0.2, b"PASS " + EVIL])
    # the proxy's upstream connection has a port of its own: the server's second connection
    it.assert_blocked(c, it.server_conn(srv, 2))
    e = wait_event(env, "cap-px", lambda x: x["sport"] == sport)
    show = env.ctl("events", "show", e["seq"])
    check(show["capture"] and show["capture"]["c2s"] == "USER x\r\nPASS " + EVIL.decode(),
          "proxy capture %r", show.get("capture"))
    path, doc = write_pcap(env, "cap-px")
    pkts = rdpcap(path)
    bad = tcp_payloads(pkts, sport)
    check([p for _, p, b in bad] == [b"USER x\r\n", b"PASS " + EVIL] and bad[1][2],
          "the proxied attack in the pcap: %r", bad)
    check(bad[1][0] - bad[0][0] == 8, "made-up sequence numbers follow the stream: %r", bad)
    reply = tcp_payloads(pkts, sport_ok, to_server=False)
    check([p for _, p, _ in reply] == [b"WELCOME\n"], "the proxied reply: %r", reply)


@test
def bounds_hold_end_to_end(env):
    # 4 connections kept by the worker (2 per thread), 1 KiB each way: 12 connections of 4 KiB
    # leave the newest few, each cut at 1 KiB with what was seen counted.
    _, port = env.service("cap-bound", "tcp", extra=("--capture-conns", "4",
                                                     "--capture-bytes", "1024"))
    srv = env.tcp_server(port)
    for i in range(12):
        sent = bytes([65 + i]) * 4096
        c, sport = env.tcp_conn(SRV4, port, [sent])
        it.assert_passed(c, it.server_conn_of(srv, sport), sent)
    path, doc = write_pcap(env, "cap-bound")
    check(doc["connections"] <= 4, "the worker kept %d connections, bounded at 4",
          doc["connections"])
    from scapy.all import TCP  # noqa: PLC0415
    got = {}
    for p in rdpcap(path):
        if TCP in p and bytes(p[TCP].payload):
            got.setdefault(p[TCP].sport, b"")
            got[p[TCP].sport] += bytes(p[TCP].payload)
    check(got and all(len(v) == 1024 for v in got.values()), "bytes kept per connection: %r",
          {k: len(v) for k, v in got.items()})
    letters = sorted(set(v[:1] for v in got.values()))
    check(b"L" in letters, "the newest connection is not kept: %r", letters)


@test
def capture_persisted_across_restart(env):
    _, port = env.service("cap-keep", "tcp")
    env.filter("cap-keep")
    srv = env.tcp_server(port)
    c, sport = env.tcp_conn(SRV4, port, [b"keep " + EVIL])
    it.assert_blocked(c, it.server_conn_of(srv, sport))
    e = wait_event(env, "cap-keep", lambda x: x["sport"] == sport)
    env.stop_controld()
    env.start_controld()
    show = env.ctl("events", "show", e["seq"])
    check(show["capture"] and show["capture"]["c2s"] == "keep " + EVIL.decode(),
          "after a restart: %r", show.get("capture"))


if __name__ == "__main__":
    sys.exit(it.run_module("capture"))
