#!/usr/bin/python3
"""Integration-test helper processes: the servers and clients the tests run inside the test
network namespaces (`ip netns exec NS python3 fgxhelper.py MODE ...`).

Every helper reports on stdout as JSON lines, flushed at once, so the test reading the pipe sees
exactly what reached each end and how each connection ended. Only the stdlib is used here, except
for the `ooo` mode, which imports scapy to hand-craft out-of-order TCP segments.
"""
import argparse
import base64
import errno
import hashlib
import json
import os
import random
import re
import select
import socket
import struct
import sys
import threading
import time

_out_lock = threading.Lock()


def emit(**kw):
    line = json.dumps(kw, sort_keys=True)
    with _out_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def b64(data):
    return base64.b64encode(data).decode()


def classify(exc):
    """How a socket error says the connection ended."""
    if isinstance(exc, (ConnectionResetError, BrokenPipeError)):
        return "reset"
    if isinstance(exc, ConnectionRefusedError):
        return "refused"
    if isinstance(exc, socket.timeout):
        return "timeout"
    if isinstance(exc, OSError) and exc.errno in (errno.ECONNRESET, errno.EPIPE, errno.ENOTCONN):
        return "reset"
    if isinstance(exc, OSError) and exc.errno == errno.ETIMEDOUT:
        return "timeout"
    return "error:%s" % exc


def listen_socket(kind, bind, port):
    """A dual-stack socket on "::" (v4 clients arrive as mapped addresses) unless bind says
    otherwise."""
    fam = socket.AF_INET6 if ":" in bind else socket.AF_INET
    s = socket.socket(fam, kind)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if fam == socket.AF_INET6:
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    s.bind((bind, port))
    return s


def peer_str(addr):
    host = addr[0]
    if host.startswith("::ffff:"):
        host = host[7:]
    return "%s:%d" % (host, addr[1])


# ---- TCP server -------------------------------------------------------------------------------

def tcp_conn(conn, cid, peer, args):
    """Record every byte one connection delivers and how it ended. With --reply, answer once
    after the first data (for server->client tests)."""
    data = bytearray()
    h = hashlib.sha256()
    total = 0
    replied = False
    end = None
    conn.settimeout(args.idle)
    emit(event="accept", id=cid, peer=peer)
    try:
        while True:
            chunk = conn.recv(262144)
            if not chunk:
                end = "eof"
                break
            total += len(chunk)
            h.update(chunk)
            if not args.sink:
                data += chunk
                emit(event="data", id=cid, data=b64(chunk))
            if args.reply is not None and not replied:
                replied = True
                reply = bytes.fromhex(args.reply)
                if args.oob_at is None:
                    conn.sendall(reply)
                else:
                    # the byte at --oob-at goes as urgent data (MSG_OOB), between pauses
                    k = args.oob_at
                    conn.sendall(reply[:k])
                    time.sleep(0.2)
                    conn.send(reply[k:k + 1], socket.MSG_OOB)
                    time.sleep(0.2)
                    conn.sendall(reply[k + 1:])
    except Exception as e:  # noqa: BLE001 - the kind of ending is the result
        end = classify(e)
    try:
        conn.close()
    except OSError:
        pass
    emit(event="conn", id=cid, peer=peer, data=b64(bytes(data)), bytes=total,
         sha256=h.hexdigest(), end=end)


def run_tcp_server(args):
    s = listen_socket(socket.SOCK_STREAM, args.bind, args.port)
    s.listen(64)
    emit(event="listening", port=args.port)
    cid = 0
    while True:
        conn, addr = s.accept()
        cid += 1
        t = threading.Thread(target=tcp_conn, args=(conn, cid, peer_str(addr), args), daemon=True)
        t.start()


# ---- UDP server -------------------------------------------------------------------------------

def run_udp_server(args):
    s = listen_socket(socket.SOCK_DGRAM, args.bind, args.port)
    emit(event="listening", port=args.port)
    while True:
        data, addr = s.recvfrom(65535)
        emit(event="dgram", peer=peer_str(addr), data=b64(data))
        if args.echo:
            s.sendto(data, addr)
        elif args.reply is not None:
            s.sendto(bytes.fromhex(args.reply), addr)


# ---- TCP client -------------------------------------------------------------------------------

def run_tcp_client(args):
    """Run a script of steps on one connection:
         send:HEX   send these bytes
         oob:HEX    send these bytes as urgent data (MSG_OOB)
         sleep:S    pause S seconds
         wait       block until a line arrives on stdin (the test's go signal)
         read:S     read what arrives for S seconds (stops early on EOF or reset)
         shut       shutdown(SHUT_WR), then read until EOF / reset / --timeout
       and print one JSON result: connected, end (eof/reset/timeout/refused/...), received."""
    steps = json.loads(args.steps)
    fam = socket.AF_INET6 if ":" in args.host else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.settimeout(args.timeout)
    received = bytearray()
    res = {"connected": False, "end": None, "sent": 0}
    try:
        if args.sport:
            # this very source port (a NAT's choice, say); SO_REUSEADDR so that a port this
            # namespace left in TIME_WAIT a moment ago can be taken again
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("::" if fam == socket.AF_INET6 else "0.0.0.0", args.sport))
        s.connect((args.host, args.port))
        res["connected"] = True
        emit(event="connected", sport=s.getsockname()[1])
        for step in steps:
            op, _, val = step.partition(":")
            if op == "send":
                payload = bytes.fromhex(val)
                s.sendall(payload)
                res["sent"] += len(payload)
            elif op == "oob":
                payload = bytes.fromhex(val)
                s.send(payload, socket.MSG_OOB)
                res["sent"] += len(payload)
            elif op == "sleep":
                time.sleep(float(val))
            elif op == "wait":
                sys.stdin.readline()
            elif op == "read" or op == "shut":
                if op == "shut":
                    try:
                        s.shutdown(socket.SHUT_WR)
                    except OSError as e:
                        # only an aborted connection is "not connected" once connected
                        if e.errno == errno.ENOTCONN:
                            raise ConnectionResetError() from e
                        raise
                    deadline = time.monotonic() + args.timeout
                else:
                    deadline = time.monotonic() + float(val)
                while True:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        if op == "shut":
                            raise socket.timeout()
                        break
                    s.settimeout(left)
                    try:
                        chunk = s.recv(65536)
                    except socket.timeout:
                        if op == "shut":
                            raise
                        break
                    if not chunk:
                        res["end"] = "eof"
                        break
                    received += chunk
                s.settimeout(args.timeout)
                if res["end"] == "eof":
                    break
            else:
                raise ValueError("bad step %r" % step)
        if res["end"] is None:
            res["end"] = "open"
    except Exception as e:  # noqa: BLE001
        res["end"] = classify(e)
        if not res["connected"] and res["end"] == "timeout":
            res["end"] = "connect-timeout"
    finally:
        s.close()
    res["received"] = b64(bytes(received))
    emit(event="result", **res)


# ---- bulk TCP client (large transfers) ---------------------------------------------------------

def run_bulk_client(args):
    """Send --size bytes of a reproducible pseudo-random stream (optionally with --insert HEX at
    --at), then shut down and wait for the server's EOF; report the sha256 of what was sent."""
    fam = socket.AF_INET6 if ":" in args.host else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.settimeout(args.timeout)
    h = hashlib.sha256()
    res = {"connected": False, "end": None, "sent": 0}
    block = random.Random(1337).randbytes(65536)
    if re.search(rb"evil[0-9]", block, re.I):
        raise SystemExit("the bulk pattern block contains a match")
    insert = bytes.fromhex(args.insert) if args.insert else b""
    try:
        s.connect((args.host, args.port))
        res["connected"] = True
        sent = 0
        while sent < args.size:
            n = min(len(block), args.size - sent)
            chunk = bytearray(block[:n])
            if insert and sent <= args.at < sent + n:
                off = args.at - sent
                chunk[off:off + len(insert)] = insert
                chunk = chunk[:n]
            s.sendall(chunk)
            h.update(chunk)
            sent += n
            res["sent"] = sent
        s.shutdown(socket.SHUT_WR)
        while True:
            chunk = s.recv(65536)
            if not chunk:
                res["end"] = "eof"
                break
    except Exception as e:  # noqa: BLE001
        res["end"] = classify(e)
    finally:
        s.close()
    res["sha256"] = h.hexdigest()
    emit(event="result", **res)


# ---- UDP client -------------------------------------------------------------------------------

def run_udp_client(args):
    """Send each datagram of --dgrams (hex list) with --pause between them, then collect the
    replies that arrive within --wait seconds."""
    fam = socket.AF_INET6 if ":" in args.host else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_DGRAM)
    if args.sport:
        # the same 4-tuple as an earlier client's: one flow for the firewall
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("::" if fam == socket.AF_INET6 else "0.0.0.0", args.sport))
    s.connect((args.host, args.port))
    replies = []
    for i, d in enumerate(json.loads(args.dgrams)):
        if i:
            time.sleep(args.pause)
        s.send(bytes.fromhex(d))
    deadline = time.monotonic() + args.wait
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        r, _, _ = select.select([s], [], [], left)
        if not r:
            break
        try:
            replies.append(b64(s.recv(65535)))
        except OSError:
            # ICMP port unreachable from an earlier datagram: nothing to record
            pass
    emit(event="result", replies=replies)


# ---- hand-crafted out-of-order TCP (scapy) ------------------------------------------------------

def run_ooo(args):
    """Do the TCP handshake by hand and send the payload segments in the order given, each at its
    own sequence offset. The cli kernel knows nothing of this connection and would answer the
    server's SYN-ACK with a reset: the test installs an nft rule in the client namespace that
    drops those. Reports whether the handshake completed and whether a reset came back."""
    import logging
    logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
    from scapy.all import IP, IPv6, TCP, AsyncSniffer, conf, raw  # noqa: E402

    conf.verb = 0
    v6 = ":" in args.dst
    # Our own raw socket: IPPROTO_RAW carries the header we built, routed and neighbour-resolved
    # by the kernel (scapy's L3RawSocket6 cannot send here).
    out = socket.socket(socket.AF_INET6 if v6 else socket.AF_INET, socket.SOCK_RAW,
                        socket.IPPROTO_RAW)

    def send(pkt):
        out.sendto(raw(pkt), (args.dst, 0))

    def ip():
        return IPv6(src=args.src, dst=args.dst) if v6 else IP(src=args.src, dst=args.dst)

    def ours(p):
        t = p.getlayer(TCP)
        return t is not None and t.sport == args.dport and t.dport == args.sport

    seen = []
    # lfilter, not a BPF filter: scapy would need tcpdump to compile one. prn, because an
    # AsyncSniffer's results exist only once it is stopped.
    sniffer = AsyncSniffer(iface=args.iface, lfilter=ours, prn=seen.append, store=False)
    sniffer.start()
    time.sleep(0.3)
    res = {"handshake": False, "reset": False}
    isn = 1000000
    try:
        send(ip() / TCP(sport=args.sport, dport=args.dport, flags="S", seq=isn, window=65535))
        synack = None
        deadline = time.monotonic() + args.timeout
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
        send(ip() / TCP(sport=args.sport, dport=args.dport, flags="A", seq=isn + 1, ack=ack,
                        window=65535))
        time.sleep(0.1)
        segs = json.loads(args.segments)  # [[offset, hex], ...] in sending order
        end = 0
        for off, hx in segs:
            payload = bytes.fromhex(hx)
            end = max(end, off + len(payload))
            send(ip() / TCP(sport=args.sport, dport=args.dport, flags="PA", seq=isn + 1 + off,
                            ack=ack, window=65535) / payload)
            time.sleep(args.pause)
        if args.retransmit:
            # what a real stack does when the gap is not acknowledged: send it all again, in
            # order (a worker may drop out-of-order segments instead of holding them)
            time.sleep(args.retransmit)
            for off, hx in sorted(segs):
                send(ip() / TCP(sport=args.sport, dport=args.dport, flags="PA",
                                seq=isn + 1 + off, ack=ack, window=65535) / bytes.fromhex(hx))
            time.sleep(args.pause)
        if args.fin:
            send(ip() / TCP(sport=args.sport, dport=args.dport, flags="FA", seq=isn + 1 + end,
                            ack=ack, window=65535))
        # up to --linger for a reset to come back; one that came ends the wait (no later
        # packet takes it back)
        deadline = time.monotonic() + args.linger
        while time.monotonic() < deadline:
            if any(p.getlayer(TCP).flags & 0x04 for p in list(seen)):
                break
            time.sleep(0.02)
    finally:
        sniffer.stop()
        for p in seen:
            t = p.getlayer(TCP)
            if t is not None and t.flags & 0x04:
                res["reset"] = True
        emit(event="result", **res)


# ---- SYN flood from spoofed sources --------------------------------------------------------------

def _csum(data):
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    while s >> 16:
        s = (s & 0xffff) + (s >> 16)
    return ~s & 0xffff


def run_synflood(args):
    """Send --count SYNs to --dst:--dport, each from its own address of --src-net (an IPv4 /16
    or an IPv6 /64 the server routes back through the client namespace, which drops the
    SYN-ACKs: nobody answers them, as in a spoofed flood). Built by hand for speed: a python
    loop sends some 30,000 a second where scapy sends some 2,000."""
    v6 = ":" in args.dst
    fam = socket.AF_INET6 if v6 else socket.AF_INET
    out = socket.socket(fam, socket.SOCK_RAW, socket.IPPROTO_RAW)
    out.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    dst = socket.inet_pton(fam, args.dst)
    net = socket.inet_pton(fam, args.src_net)
    t0 = time.monotonic()
    sent = 0
    for i in range(args.count):
        n = i + 1
        if v6:
            src = net[:8] + struct.pack("!Q", n)
        else:
            src = net[:2] + struct.pack("!H", n % 65534 + 1)
        sport = 1024 + (i * 7) % 60000
        tcp = struct.pack("!HHIIBBHHH", sport, args.dport, (i * 2654435761) & 0xffffffff, 0,
                          5 << 4, 0x02, 65535, 0, 0)
        if v6:
            pseudo = src + dst + struct.pack("!IxxxB", len(tcp), socket.IPPROTO_TCP)
        else:
            pseudo = src + dst + struct.pack("!xBH", socket.IPPROTO_TCP, len(tcp))
        tcp = tcp[:16] + struct.pack("!H", _csum(pseudo + tcp)) + tcp[18:]
        if v6:
            ip = struct.pack("!IHBB", 6 << 28, len(tcp), socket.IPPROTO_TCP, 64) + src + dst
        else:
            ip = struct.pack("!BBHHHBBH", 0x45, 0, 20 + len(tcp), 0, 0, 64,
                             socket.IPPROTO_TCP, 0) + src + dst
        while True:
            try:
                out.sendto(ip + tcp, (args.dst, 0))
                break
            except (BlockingIOError, OSError) as e:
                if getattr(e, "errno", None) not in (errno.ENOBUFS, errno.EAGAIN):
                    raise
                time.sleep(0.001)
        sent += 1
        if args.rate and sent % 16 == 0:
            ahead = sent / args.rate - (time.monotonic() - t0)
            if ahead > 0:
                time.sleep(ahead)
    emit(event="result", sent=sent, secs=round(time.monotonic() - t0, 3))


# ---- idle connections ---------------------------------------------------------------------------

def run_idle_conns(args):
    """Open --count TCP connections to host:port; the first --send-count of them send --send
    (hex) once, the others nothing. Report "connected", then watch them: when each is closed by
    the other end (EOF or reset), in seconds since it was opened, or null if still open at
    --wait seconds."""
    import select
    socks, t0, errors = [], [], []
    for i in range(args.count):
        fam = socket.AF_INET6 if ":" in args.host else socket.AF_INET
        s = socket.socket(fam, socket.SOCK_STREAM)
        s.settimeout(3)
        try:
            s.connect((args.host, args.port))
        except OSError as e:
            errors.append(str(e))
            s.close()
            continue
        if i < args.send_count and args.send:
            s.sendall(bytes.fromhex(args.send))
        s.setblocking(False)
        socks.append(s)
        t0.append(time.monotonic())
    emit(event="connected", n=len(socks), errors=errors[:5])
    closed = [None] * len(socks)
    deadline = time.monotonic() + args.wait
    while time.monotonic() < deadline and any(c is None for c in closed):
        live = [s for s, c in zip(socks, closed) if c is None]
        r, _, _ = select.select(live, [], [], 0.1)
        for s in r:
            i = socks.index(s)
            try:
                data = s.recv(65536)
            except (ConnectionResetError, BrokenPipeError):
                data = b""
            except BlockingIOError:
                continue
            if not data:
                closed[i] = round(time.monotonic() - t0[i], 2)
    for s in socks:
        s.close()
    emit(event="result", closed=closed, errors=errors[:5])


def run_flood_conns(args):
    """Idle TCP connections from several source addresses at once (issue 24's flood): --from
    ADDR:COUNT,... connections bound to each ADDR, opened non-blocking all together, sending
    nothing. Report "connected" (per source: how many connected, and errors) once every connect
    finished, then watch them for --wait seconds: when each was closed by the other end (EOF or
    reset), in seconds since its connect; null if still open."""
    import resource
    import selectors
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    sel = selectors.DefaultSelector()
    conns = []  # [src, sock, t0, state]: "connecting", "open", "closed"
    errors = []
    fam = socket.AF_INET6 if ":" in args.host else socket.AF_INET
    for part in args.sources.split(","):
        src, _, count = part.rpartition(":")
        for _ in range(int(count)):
            s = socket.socket(fam, socket.SOCK_STREAM)
            s.setblocking(False)
            try:
                s.bind((src, 0))
                rc = s.connect_ex((args.host, args.port))
            except OSError as e:
                errors.append("%s: %s" % (src, e))
                s.close()
                continue
            c = [src, s, time.monotonic(), "connecting", None]
            if rc not in (0, errno.EINPROGRESS):
                errors.append("%s: connect: %s" % (src, os.strerror(rc)))
                s.close()
                continue
            conns.append(c)
            sel.register(s, selectors.EVENT_WRITE, c)
    connected = {}
    deadline = time.monotonic() + 15
    waiting = len(conns)
    closed_early = []
    while waiting and time.monotonic() < deadline:
        for key, ev in sel.select(0.2):
            c = key.data
            if c[3] != "connecting":
                continue
            err = c[1].getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            waiting -= 1
            if err:
                errors.append("%s: %s" % (c[0], os.strerror(err)))
                c[3] = "failed"
                sel.unregister(c[1])
                continue
            c[3] = "open"
            connected[c[0]] = connected.get(c[0], 0) + 1
            sel.modify(c[1], selectors.EVENT_READ, c)
    emit(event="connected", n=sum(connected.values()), per_src=connected,
         pending=waiting, errors=errors[:5], nerrors=len(errors))
    deadline = time.monotonic() + args.wait
    live = sum(1 for c in conns if c[3] == "open")
    while live and time.monotonic() < deadline:
        for key, ev in sel.select(0.1):
            c = key.data
            if c[3] != "open":
                continue
            try:
                data = c[1].recv(65536)
            except (ConnectionResetError, BrokenPipeError):
                data = b""
            except BlockingIOError:
                continue
            if not data:
                c[3] = "closed"
                c[4] = round(time.monotonic() - c[2], 2)
                sel.unregister(c[1])
                live -= 1
    closed = {}
    for c in conns:
        if c[3] in ("open", "closed"):
            closed.setdefault(c[0], []).append(c[4])
        c[1].close()
    emit(event="result", closed=closed, errors=errors[:5])


# ---- IP fragments (scapy) ----------------------------------------------------------------------

def run_frag(args):
    """Send TCP segments or UDP datagrams cut into IP fragments (IPv4, or IPv6 fragment
    headers). --cases is a JSON list, one connection (or datagram) each, from --sport on:
    {"payload": hex, "alt": hex, "tcp_opts": N, "frags": [[offset, length, "alt" or null, more
    or null], ...]}, fragments in sending order. Offset and length are in bytes of the transport
    header + payload; the bytes are the real segment's, or with "alt" those of the same segment
    carrying alt instead of payload (overlaps with other content); "more" defaults to whether
    bytes follow; tcp_opts NOP bytes make the TCP header 20+N bytes. TCP: the handshake by hand
    first (as run_ooo), then --lead as one ordinary segment (proof that the connection carries
    data), then the fragmented segment, then a FIN."""
    import logging
    logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
    from scapy.all import (IP, TCP, UDP, AsyncSniffer, IPv6, IPv6ExtHdrFragment, Raw,  # noqa: E402
                           conf, raw)

    conf.verb = 0
    v6 = ":" in args.dst
    hl = 40 if v6 else 20
    out = socket.socket(socket.AF_INET6 if v6 else socket.AF_INET, socket.SOCK_RAW,
                        socket.IPPROTO_RAW)
    proto = socket.IPPROTO_TCP if args.proto == "tcp" else socket.IPPROTO_UDP
    cases = json.loads(args.cases)
    sports = set(range(args.sport, args.sport + len(cases)))

    send_errors = []

    def send(pkt):
        for _ in range(5):
            try:
                out.sendto(raw(pkt), (args.dst, 0))
                return
            except OSError as e:  # reported with the result, and tried again
                send_errors.append("%s: %s" % (pkt.summary(), e))
                time.sleep(0.05)

    def ip():
        return IPv6(src=args.src, dst=args.dst) if v6 else IP(src=args.src, dst=args.dst)

    def fragment(ident, off, data, more):
        if v6:
            return (IPv6(src=args.src, dst=args.dst, nh=44) /
                    IPv6ExtHdrFragment(nh=proto, offset=off // 8, m=1 if more else 0, id=ident) /
                    Raw(data))
        return IP(src=args.src, dst=args.dst, proto=proto, id=ident & 0xffff,
                  flags="MF" if more else 0, frag=off // 8) / Raw(data)

    def ours(p):
        t = p.getlayer(TCP)
        return t is not None and t.sport == args.dport and t.dport in sports

    def one(sport, case):
        r = {"handshake": args.proto == "udp"}
        payload = bytes.fromhex(case["payload"])
        altp = bytes.fromhex(case.get("alt") or case["payload"])
        if args.proto == "udp":
            seg = raw(ip() / UDP(sport=sport, dport=args.dport) / payload)[hl:]
            alt = raw(ip() / UDP(sport=sport, dport=args.dport) / altp)[hl:]
        else:
            isn = 2000000
            send(ip() / TCP(sport=sport, dport=args.dport, flags="S", seq=isn, window=65535))
            synack = None
            deadline = time.monotonic() + args.timeout
            while time.monotonic() < deadline and synack is None:
                time.sleep(0.02)
                for p in list(seen):
                    t = p.getlayer(TCP)
                    if t is not None and t.dport == sport and (t.flags & 0x12) == 0x12:
                        synack = t
                        break
            if synack is None:
                r["error"] = "no SYN-ACK"
                return r
            r["handshake"] = True
            ack = synack.seq + 1
            send(ip() / TCP(sport=sport, dport=args.dport, flags="A", seq=isn + 1, ack=ack,
                            window=65535))
            lead = bytes.fromhex(args.lead)
            seq = isn + 1
            if lead:
                send(ip() / TCP(sport=sport, dport=args.dport, flags="PA", seq=seq, ack=ack,
                                window=65535) / lead)
                seq += len(lead)
                time.sleep(args.pause)
            opts = [("NOP", None)] * case.get("tcp_opts", 0)
            seg, alt = (raw(ip() / TCP(sport=sport, dport=args.dport, flags="PA", seq=seq,
                                       ack=ack, window=65535, options=opts) / pl)[hl:]
                        for pl in (payload, altp))
        ident = 0x4242 + sport
        for off, length, which, more in case["frags"]:
            data = (alt if which == "alt" else seg)[off:off + length]
            if more is None:
                more = off + len(data) < len(seg)
            send(fragment(ident, off, data, more))
            time.sleep(args.pause)
        if args.proto == "tcp" and args.fin:
            time.sleep(args.pause)
            send(ip() / TCP(sport=sport, dport=args.dport, flags="FA", seq=seq + len(payload),
                            ack=ack, window=65535))
        return r

    seen = []
    sniffer = None
    results = []
    try:
        if args.proto == "tcp":
            sniffer = AsyncSniffer(iface=args.iface, lfilter=ours, prn=seen.append, store=False)
            sniffer.start()
            time.sleep(0.3)
        if args.parallel:
            # every case on a connection of its own at once: they share nothing (own port,
            # own fragment id)
            results = [None] * len(cases)

            def run(i, case):
                results[i] = one(args.sport + i, case)

            threads = [threading.Thread(target=run, args=(i, c)) for i, c in enumerate(cases)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            results = [r if r is not None else {"handshake": False, "error": "case died"}
                       for r in results]
        else:
            for i, case in enumerate(cases):
                results.append(one(args.sport + i, case))
        time.sleep(args.linger)
    finally:
        if sniffer is not None:
            sniffer.stop()
        emit(event="result", results=results, send_errors=send_errors[:10],
             handshake=len(results) == len(cases) and all(r["handshake"] for r in results))


# ---- malformed packets (scapy) ------------------------------------------------------------------

def run_malformed(args):
    """Send a battery of malformed TCP and UDP packets at the service port (valid IP headers, so
    the kernel hands them to netfilter; nonsense above that) through an IPPROTO_RAW socket."""
    import logging
    logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
    from scapy.all import IP, UDP, IPv6, TCP, Raw, raw  # noqa: E402

    v6 = ":" in args.dst
    out = socket.socket(socket.AF_INET6 if v6 else socket.AF_INET, socket.SOCK_RAW,
                        socket.IPPROTO_RAW)

    def ip(**kw):
        return IPv6(src=args.src, dst=args.dst, **kw) if v6 else IP(src=args.src, dst=args.dst,
                                                                     **kw)

    evil = b"evil1337"
    sp, dp = 39000, args.dport  # outside the 40000-49999 whose resets test_ooo drops
    pkts = [
        ip() / TCP(sport=sp, dport=dp, dataofs=15, flags="PA") / evil,       # header past the end
        ip() / TCP(sport=sp, dport=dp, dataofs=1, flags="PA") / evil,        # header too short
        ip() / TCP(sport=sp, dport=dp, dataofs=15, flags="PA"),              # 20 of 60 bytes
        ip() / TCP(sport=sp, dport=dp, flags="FSRPAUEC") / evil,             # every flag
        ip() / TCP(sport=sp, dport=dp, flags="SF", seq=5) / (evil * 8),      # SYN+FIN with data
        ip() / TCP(sport=sp, dport=dp, flags="PA", seq=0xfffffffc) / (evil * 4),  # seq wraps
        ip() / TCP(sport=sp, dport=dp, flags="A", options=[("MSS", 0), ("WScale", 255),
                                                            ("NOP", None)] * 3) / evil,
        ip() / UDP(sport=sp, dport=dp, len=200) / evil,                     # length past the end
        ip() / UDP(sport=sp, dport=dp, len=3) / evil,                       # length < header
        ip() / UDP(sport=sp, dport=dp),                                     # empty datagram
    ]
    raws = [raw(p) for p in pkts]
    # truncated transport headers: the IP header announces what is there
    for proto_pkt in (ip() / TCP(sport=sp, dport=dp), ip() / UDP(sport=sp, dport=dp)):
        b = bytearray(raw(proto_pkt))
        hl = 40 if v6 else 20
        cut = bytes(b[:hl + 6])
        if v6:
            cut = cut[:4] + (6).to_bytes(2, "big") + cut[6:]
        else:
            cut = cut[:2] + (hl + 6).to_bytes(2, "big") + cut[4:10] + b"\0\0" + cut[12:]
            # IPv4 header checksum over the edited header
            cs = 0
            for i in range(0, 20, 2):
                cs += (cut[i] << 8) | cut[i + 1]
            cs = (cs & 0xffff) + (cs >> 16)
            cs = (cs & 0xffff) + (cs >> 16)
            cut = cut[:10] + ((~cs) & 0xffff).to_bytes(2, "big") + cut[12:]
        raws.append(cut)
    sent, errors = 0, []
    for _ in range(args.rounds):
        for i, r in enumerate(raws):
            try:
                out.sendto(r, (args.dst, 0))
                sent += 1
            except OSError as e:
                errors.append("%d: %s" % (i, e))
    emit(event="result", sent=sent, kinds=len(raws), errors=errors[:5])


# ---- HTTP GET (the metrics endpoint) ------------------------------------------------------------

def run_http_get(args):
    """One GET with urllib; reports the status, the content type and the body (an HTTP error
    status is a result too, not a failure)."""
    import urllib.error
    import urllib.request
    res = {}
    try:
        with urllib.request.urlopen(args.url, timeout=args.timeout) as r:
            res.update(status=r.status, ctype=r.headers.get("Content-Type", ""), body=r.read())
    except urllib.error.HTTPError as e:
        res.update(status=e.code, ctype=e.headers.get("Content-Type", ""), body=e.read())
    except Exception as e:  # noqa: BLE001 - the kind of failure is the result
        res.update(status=None, error=str(e), body=b"")
    res["body"] = b64(res["body"])
    emit(event="result", **res)



# ---- bursts of short connections (test_events) ------------------------------------------------

def run_burst_server(args):
    """Accept and read every connection until it ends, printing nothing per connection (there
    are thousands)."""
    import selectors
    sel = selectors.DefaultSelector()
    s = listen_socket(socket.SOCK_STREAM, args.bind, args.port)
    s.listen(1024)
    s.setblocking(False)
    sel.register(s, selectors.EVENT_READ)
    emit(event="listening", port=args.port)
    while True:
        for key, _ in sel.select(1.0):
            if key.fileobj is s:
                try:
                    c, _ = s.accept()
                except OSError:
                    continue
                c.setblocking(False)
                sel.register(c, selectors.EVENT_READ)
                continue
            try:
                data = key.fileobj.recv(65536)
            except OSError:
                data = b""
            if not data:
                sel.unregister(key.fileobj)
                key.fileobj.close()


def run_burst_client(args):
    """--count connections, --parallel at a time and --rate a second at most: each connects,
    sends --send (hex) and waits until the connection ends (reset: blocked; EOF; or --timeout).
    One JSON result. bench/events uses it too."""
    import selectors
    payload = bytes.fromhex(args.send)
    fam = socket.AF_INET6 if ":" in args.host else socket.AF_INET
    sel = selectors.DefaultSelector()
    started = done = 0
    ends = {"reset": 0, "eof": 0, "timeout": 0, "refused": 0, "error": 0}
    t0 = time.monotonic()

    def start():
        nonlocal started
        c = socket.socket(fam, socket.SOCK_STREAM)
        c.setblocking(False)
        try:
            c.connect((args.host, args.port))
        except BlockingIOError:
            pass
        started += 1
        sel.register(c, selectors.EVENT_WRITE, [time.monotonic(), False])

    def finish(c, how):
        nonlocal done
        sel.unregister(c)
        c.close()
        ends[how] += 1
        done += 1

    while done < args.count:
        while (started < args.count and started - done < args.parallel and
               (args.rate <= 0 or started < (time.monotonic() - t0) * args.rate)):
            start()
        now = time.monotonic()
        for key, mask in sel.select(0.05):
            c, st = key.fileobj, key.data
            if not st[1]:
                err = c.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if err:
                    finish(c, "refused" if err == errno.ECONNREFUSED else "error")
                    continue
                try:
                    c.send(payload)
                except OSError as e:
                    finish(c, classify(e) if classify(e) in ends else "error")
                    continue
                st[1] = True
                sel.modify(c, selectors.EVENT_READ, st)
                continue
            try:
                data = c.recv(65536)
            except OSError as e:
                finish(c, "reset" if isinstance(e, ConnectionResetError) else "error")
                continue
            if not data:
                finish(c, "eof")
        for key in list(sel.get_map().values()):
            if now - key.data[0] > args.timeout:
                finish(key.fileobj, "timeout")
    emit(event="result", seconds=time.monotonic() - t0, **ends)

def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="mode", required=True)
    p = sub.add_parser("tcp-server")
    p.add_argument("--bind", default="::")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--reply", help="hex bytes sent once after the first data")
    p.add_argument("--oob-at", type=int, help="send the reply's byte at this index as urgent data")
    p.add_argument("--idle", type=float, default=5.0)
    p.add_argument("--sink", action="store_true", help="count and hash only (large transfers)")
    p = sub.add_parser("udp-server")
    p.add_argument("--bind", default="::")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--reply", help="hex bytes sent back for every datagram")
    p.add_argument("--echo", action="store_true", help="send every datagram back")
    p = sub.add_parser("tcp-client")
    p.add_argument("--host", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--steps", required=True)
    p.add_argument("--timeout", type=float, default=3.0)
    p.add_argument("--sport", type=int, default=0, help="bind this source port first")
    p = sub.add_parser("bulk-client")
    p.add_argument("--host", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--size", type=int, required=True)
    p.add_argument("--insert")
    p.add_argument("--at", type=int, default=0)
    p.add_argument("--timeout", type=float, default=5.0)
    p = sub.add_parser("udp-client")
    p.add_argument("--host", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--dgrams", required=True)
    p.add_argument("--pause", type=float, default=0.1)
    p.add_argument("--wait", type=float, default=0.5)
    p.add_argument("--sport", type=int, default=0, help="bind this source port first")
    p = sub.add_parser("ooo")
    p.add_argument("--iface", required=True)
    p.add_argument("--src", required=True)
    p.add_argument("--dst", required=True)
    p.add_argument("--sport", type=int, required=True)
    p.add_argument("--dport", type=int, required=True)
    p.add_argument("--segments", required=True)
    p.add_argument("--pause", type=float, default=0.2)
    p.add_argument("--fin", action="store_true")
    p.add_argument("--retransmit", type=float, default=0.0,
                   help="after this pause, resend every segment in order")
    p.add_argument("--linger", type=float, default=0.5)
    p.add_argument("--timeout", type=float, default=3.0)
    p = sub.add_parser("synflood")
    p.add_argument("--dst", required=True)
    p.add_argument("--dport", type=int, required=True)
    p.add_argument("--src-net", required=True)
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--rate", type=float, default=0.0, help="SYNs per second at most (0: flat out)")
    p = sub.add_parser("idle-conns")
    p.add_argument("--host", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--send", default="", help="hex, sent once by the first --send-count")
    p.add_argument("--send-count", type=int, default=0)
    p.add_argument("--wait", type=float, required=True)
    p = sub.add_parser("flood-conns")
    p.add_argument("--host", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--sources", required=True, help="ADDR:COUNT,...")
    p.add_argument("--wait", type=float, required=True)
    p = sub.add_parser("frag")
    p.add_argument("--iface", required=True)
    p.add_argument("--src", required=True)
    p.add_argument("--dst", required=True)
    p.add_argument("--sport", type=int, required=True, help="the first case's; then +1 each")
    p.add_argument("--dport", type=int, required=True)
    p.add_argument("--proto", choices=("tcp", "udp"), default="tcp")
    p.add_argument("--lead", default="", help="hex: one ordinary segment first (TCP)")
    p.add_argument("--cases", required=True)
    p.add_argument("--parallel", action="store_true", help="send every case at once")
    p.add_argument("--pause", type=float, default=0.05)
    p.add_argument("--fin", action="store_true")
    p.add_argument("--linger", type=float, default=0.5)
    p.add_argument("--timeout", type=float, default=3.0)
    p = sub.add_parser("malformed")
    p.add_argument("--src", required=True)
    p.add_argument("--dst", required=True)
    p.add_argument("--dport", type=int, required=True)
    p.add_argument("--rounds", type=int, default=3)
    p = sub.add_parser("burst-server")
    p.add_argument("--bind", default="::")
    p.add_argument("--port", type=int, required=True)
    p = sub.add_parser("burst-client")
    p.add_argument("--host", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--parallel", type=int, default=64)
    p.add_argument("--send", required=True, help="hex")
    p.add_argument("--rate", type=float, default=0.0, help="connections per second at most")
    p.add_argument("--timeout", type=float, default=5.0)
    p = sub.add_parser("http-get")
    p.add_argument("--url", required=True)
    p.add_argument("--timeout", type=float, default=3.0)
    args = ap.parse_args()
    {
        "tcp-server": run_tcp_server,
        "udp-server": run_udp_server,
        "tcp-client": run_tcp_client,
        "bulk-client": run_bulk_client,
        "udp-client": run_udp_client,
        "ooo": run_ooo,
        "idle-conns": run_idle_conns,
        "flood-conns": run_flood_conns,
        "frag": run_frag,
        "malformed": run_malformed,
        "synflood": run_synflood,
        "http-get": run_http_get,
        "burst-server": run_burst_server,
        "burst-client": run_burst_client,
    }[args.mode](args)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        pass
