"""`fgexctl script test FILE.py --pcap FILE`: runs a filter file over the TCP connections of a
capture, offline, and prints each connection's verdict. The pcap is read with dpkt (Debian's
python3-dpkt); each direction is put in stream order (held segments wait for the gap to fill,
retransmitted bytes are cut) and fed to the file chunk by chunk, in the capture's order, as
the NFQUEUE layer would."""
import json
import signal
import socket
import sys

import dpkt

from fgex.engine import Conn, Script, ScriptError


class _Deadline(BaseException):  # not caught as a filter's exception
    pass


def _alarm(_sig, _frm):
    raise _Deadline()


class _Dir:
    def __init__(self):
        self.next = None
        self.held = {}

    def take(self, seq, data, syn):
        """Bytes now in order, from a segment (seq of its first byte)."""
        if syn:
            self.next = (seq + 1) & 0xFFFFFFFF
            seq = self.next
        if not data:
            return b""
        if self.next is None:  # no SYN seen: start where the capture starts
            self.next = seq
        out = []
        self.held[seq] = data
        progressed = True
        while progressed:
            progressed = False
            for s in list(self.held):
                d = self.held[s]
                off = (self.next - s) & 0xFFFFFFFF
                if off < 0x80000000:  # starts at or before next
                    del self.held[s]
                    if off < len(d):
                        out.append(d[off:])
                        self.next = (self.next + len(d) - off) & 0xFFFFFFFF
                    progressed = True
        return b"".join(out)


class _Flow:
    def __init__(self, script, client, server, v6):
        self.client, self.server = client, server
        self.conn = Conn(script, v6, (_addr(client[0], v6), client[1], _addr(server[0], v6),
                                      server[1]))
        self.dirs = {True: _Dir(), False: _Dir()}
        self.verdict = None
        self.bytes = {True: 0, False: 0}
        self.chunks = 0


def _addr(ip, v6):
    return socket.inet_ntop(socket.AF_INET6 if v6 else socket.AF_INET, ip)


def _packets(f):
    pcap = dpkt.pcap.UniversalReader(f)
    dl = pcap.datalink()
    for _ts, buf in pcap:
        try:
            if dl == dpkt.pcap.DLT_EN10MB:
                ip = dpkt.ethernet.Ethernet(buf).data
            elif dl == dpkt.pcap.DLT_LINUX_SLL:
                ip = dpkt.sll.SLL(buf).data
            elif dl in (dpkt.pcap.DLT_RAW, 101, 228, 229):
                ip = dpkt.ip.IP(buf) if (buf[0] >> 4) == 4 else dpkt.ip6.IP6(buf)
            elif dl == dpkt.pcap.DLT_NULL or dl == dpkt.pcap.DLT_LOOP:
                ip = dpkt.loopback.Loopback(buf).data
            else:
                raise SystemExit("unsupported link type %d" % dl)
        except (dpkt.UnpackError, IndexError):
            continue
        if isinstance(ip, (dpkt.ip.IP, dpkt.ip6.IP6)) and isinstance(ip.data, dpkt.tcp.TCP):
            yield ip, ip.data


def run(script, pcap_path, port=None, deadline_ms=100):
    flows, order = {}, []
    signal.signal(signal.SIGALRM, _alarm)
    with open(pcap_path, "rb") as f:
        for ip, tcp in _packets(f):
            v6 = isinstance(ip, dpkt.ip6.IP6)
            a, b = (ip.src, tcp.sport), (ip.dst, tcp.dport)
            key = (min(a, b), max(a, b))
            fl = flows.get(key)
            syn = bool(tcp.flags & dpkt.tcp.TH_SYN)
            if fl is None:
                if syn and tcp.flags & dpkt.tcp.TH_ACK:  # a SYN-ACK: b is the client
                    a, b = b, a
                if port is not None and b[1] != port:
                    continue
                fl = flows[key] = _Flow(script, a, b, v6)
                order.append(fl)
            is_input = (ip.src, tcp.sport) == fl.client
            data = fl.dirs[is_input].take(tcp.seq, bytes(tcp.data), syn)
            if not data or fl.verdict is not None:
                continue
            fl.bytes[is_input] += len(data)
            fl.chunks += 1
            signal.setitimer(signal.ITIMER_REAL, deadline_ms / 1000.0)
            try:
                v = fl.conn.feed(is_input, data)
            except _Deadline:
                fl.verdict = ("timeout", "", "past the %d ms deadline" % deadline_ms)
                continue
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            if v.action == "mangle":
                continue  # counted by the Conn (edits): the capture's next bytes are as sent
            if v.action != "accept":
                fl.verdict = (v.action, v.function, v.detail)
    out = []
    for fl in order:
        act, fn, detail = fl.verdict or ("accept", "", "")
        out.append({
            "client": _addr(fl.client[0], fl.conn.ctx.is_ipv6), "sport": fl.client[1],
            "server": _addr(fl.server[0], fl.conn.ctx.is_ipv6), "dport": fl.server[1],
            "verdict": act, "function": fn, "detail": detail,
            "c2s_bytes": fl.bytes[True], "s2c_bytes": fl.bytes[False],
            "edited": fl.conn.edits,
        })
    return out


def main(argv):
    """ARGV: FILE.py PCAP [--port N] [--json] [--deadline-ms N]. Exit 0 when every connection
    was judged (whatever the verdicts), 4 when the file is refused, 1 on an unreadable pcap."""
    args, port, js, deadline = [], None, False, 100
    it = iter(argv)
    for a in it:
        if a == "--port":
            port = int(next(it))
        elif a == "--json":
            js = True
        elif a == "--deadline-ms":
            deadline = int(next(it))
        else:
            args.append(a)
    path, pcap = args[0], args[1]
    with open(path, "rb") as f:
        src = f.read().decode("utf-8", errors="replace")
    out, sys.stdout = sys.stdout, sys.stderr  # the file's prints go to stderr
    try:
        try:
            s = Script(src, path)
        except ScriptError as e:
            print("fgexctl: %s:%d: %s" % (path, e.line, e.reason), file=sys.stderr)
            return 4
        for line, text in s.warnings:
            print("fgexctl: %s:%d: warning: %s" % (path, line, text), file=sys.stderr)
        try:
            res = run(s, pcap, port, deadline)
        except (OSError, ValueError, dpkt.NeedData) as e:
            print("fgexctl: script test: %s: %s" % (pcap, e), file=sys.stderr)
            return 1
    finally:
        sys.stdout = out
    if js:
        print(json.dumps(res, indent=2))
        return 0
    print("%-22s %-22s %-8s %-20s %8s %8s" % ("CLIENT", "SERVER", "VERDICT", "FUNCTION",
                                              "C2S", "S2C"))
    for r in res:
        print("%-22s %-22s %-8s %-20s %8d %8d" % (
            "%s:%d" % (r["client"], r["sport"]), "%s:%d" % (r["server"], r["dport"]),
            r["verdict"], r["function"] or "-", r["c2s_bytes"], r["s2c_bytes"]))
        if r["verdict"] in ("error", "timeout") and r["detail"]:
            for ln in r["detail"].rstrip().splitlines():
                print("    " + ln)
        if r["edited"]:
            print("    %d chunk%s edited by the file: sent edited on the proxy layer; on the "
                  "NFQUEUE layer each gets the service's fail policy" % (
                      r["edited"], "" if r["edited"] == 1 else "s"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
