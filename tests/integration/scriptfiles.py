"""Script filter files and checks that the script tests of both layers share (test_scripts.py
on the proxy layer, test_scripts_nfq.py on NFQUEUE): the same files, judging the same traffic,
must give the same verdicts whichever layer holds the bytes."""
import gzip
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fgxit as it  # noqa: E402
from fgxit import check  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
FIREGEX_EXAMPLE = os.path.join(HERE, "scripts", "firegex_http_example.py")


def write(text, name="f.py"):
    """text (str or bytes) into a new file of its own directory; its path."""
    d = tempfile.mkdtemp(prefix="fgx-script-")
    p = os.path.join(d, name)
    with open(p, "wb") as f:
        f.write(text.encode() if isinstance(text, str) else text)
    return p


def http(method, path, body=b"", headers=()):
    h = b"".join(b"%s: %s\r\n" % (k, v) for k, v in headers)
    if body and not any(k.lower() == b"transfer-encoding" for k, _ in headers):
        h += b"Content-Length: %d\r\n" % len(body)
    return b"%s %s HTTP/1.1\r\nHost: svc\r\n%s\r\n" % (method, path, h) + body


def script_counters(env, svc):
    doc = env.ctl("script", "list", svc)
    return {f["name"]: f for f in doc["functions"]}


REPLY = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


def firegex_example_judges(env, svc, port, gap):
    """FIREGEX_EXAMPLE on svc: a clean POST passes and the server's REPLY comes back (the
    server's connection 1), one with ILLEGAL in its body is blocked (connection 2), and so is
    it over IPv6 with the body's end in a second segment gap seconds later (connection 3); the
    function counts the blocks. (The server, the blocked request, connection 3 there.)"""
    env.ctl("script", "set", svc, FIREGEX_EXAMPLE)
    srv = env.tcp_server(port, reply=REPLY)
    ok = http(b"POST", b"/note", b"hello")
    c = env.tcp_client(it.SRV4, port, [ok, 0.3])
    it.assert_passed(c, it.server_conn(srv, 1), ok, REPLY)
    bad = http(b"POST", b"/note", b"an ILLEGAL body")
    c = env.tcp_client(it.SRV4, port, [bad, 0.3])
    it.assert_blocked(c, it.server_conn(srv, 2), forbidden=b"ILLEGAL")
    c = env.tcp_client(it.SRV6, port, [bad[:-10], gap, bad[-10:], 0.3])
    s = it.server_conn(srv, 3)
    it.assert_blocked(c, s, forbidden=b"ILLEGAL")
    fn = it.wait_until(lambda: script_counters(env, svc)["filter_with_args"]["blocked"] >= 2)
    check(fn, "blocked counter: %r", script_counters(env, svc))
    return srv, bad, s


# Per-connection globals (third_request), a decoded body (decoded_body: the proxy's test sends
# one) and DROP (drop_probe).
KEEPALIVE = """
from firegex.nfproxy import pyfilter, ACCEPT, REJECT, DROP
from firegex.nfproxy.models import HttpFullRequest, HttpRequestHeader
requests = 0

@pyfilter
def third_request(req: HttpFullRequest):
    global requests
    requests += 1
    if requests >= 3:
        return REJECT

@pyfilter
def decoded_body(req: HttpFullRequest):
    if req.body_decoded and b"secret-export" in req.body_decoded:
        return REJECT

@pyfilter
def drop_probe(req: HttpRequestHeader):
    if req.get_header("x-probe") == "1":
        return DROP
"""


# An exception (/boom) and an endless loop (/loop): the fail_open verdict, while other services
# keep filtering; every call logs a line.
FAULTY = """
from firegex.nfproxy import pyfilter, REJECT
from firegex.nfproxy.models import HttpRequestHeader

@pyfilter
def faulty(req: HttpRequestHeader):
    print("checking", req.url)
    if req.url == "/boom":
        raise KeyError("no such thing")
    if req.url == "/loop":
        while True:
            pass
"""


def loop_started(env, port, hold, timeout, settle):
    """FAULTY's /loop to port from a client that stays hold seconds (timeout in all), not
    waited for; settle seconds later: (the client, when it was sent, the request)."""
    loop = http(b"GET", b"/loop")
    t0 = time.monotonic()
    hl = env.tcp_client(it.SRV4, port, [loop, hold], timeout=timeout, wait=False)
    time.sleep(settle)
    return hl, t0, loop


def regex_service_filters(env, rsrv, rport):
    """rport's service (fgxit's regex, no script) passes a clean connection and blocks EVIL:
    connections 1 and 2 of rsrv."""
    c = env.tcp_client(it.SRV4, rport, [b"clean", 0.1])
    it.assert_passed(c, it.server_conn(rsrv, 1), b"clean")
    c = env.tcp_client(it.SRV4, rport, [it.EVIL, 0.1])
    it.assert_blocked(c, it.server_conn(rsrv, 2))


def keepalive_third_rejected(env, svc, port, gap):
    """KEEPALIVE on svc, and its third_request on the server's connections 1 and 2: of three
    requests on one connection (gap seconds apart) two pass and the third resets both ends; a
    new connection counts from nothing again. The server (kept-alive connections: idle 4 s)."""
    env.ctl("script", "set", svc, write(KEEPALIVE))
    srv = env.tcp_server(port, idle=4.0)
    r1, r2, r3 = (http(b"GET", b"/%d" % i) for i in (1, 2, 3))
    c = env.tcp_client(it.SRV4, port, [r1, gap, r2, gap, r3, 0.3])
    s = it.server_conn(srv, 1)
    check(s["data"] == r1 + r2, "two requests pass, the third not: %r", s["data"])
    check(c["end"] == "reset" and s["end"] == "reset", "the third resets: %r %r", c["end"],
          s["end"])
    # per-connection globals: a new connection starts counting again
    c = env.tcp_client(it.SRV4, port, [r1, gap, r2, 0.3])
    it.assert_passed(c, it.server_conn(srv, 2), r1 + r2)
    return srv


def keepalive_gzip_judged(env, srv, port, n, gap):
    """KEEPALIVE's decoded_body on srv's connections n and n+1: a chunked gzip body split over
    two segments (gap seconds apart) is decoded and rejected before its second segment reaches
    the server; honest bodies, a gzip one then a chunked one on one connection, pass whole."""
    gz = gzip.compress(b"please do the secret-export now")
    chunked = (b"%x\r\n" % 10 + gz[:10] + b"\r\n" + b"%x\r\n" % (len(gz) - 10) + gz[10:] +
               b"\r\n0\r\n\r\n")
    bad = http(b"POST", b"/x", chunked, headers=((b"Transfer-Encoding", b"chunked"),
                                                  (b"Content-Encoding", b"gzip")))
    c = env.tcp_client(it.SRV4, port, [bad[:60], gap, bad[60:], 0.3])
    s = it.server_conn(srv, n)
    check(c["end"] == "reset" and gz[10:] not in s["data"], "gzip+chunked: %r %r", c["end"],
          s["data"][-40:])
    ok1 = http(b"POST", b"/x", gzip.compress(b"an honest body"),
               headers=((b"Content-Encoding", b"gzip"),))
    ok2 = http(b"POST", b"/y", b"5\r\nhello\r\n0\r\n\r\n",
               headers=((b"Transfer-Encoding", b"chunked"),))
    c = env.tcp_client(it.SRV4, port, [ok1, gap, ok2, 0.3])
    it.assert_passed(c, it.server_conn(srv, n + 1), ok1 + ok2)


def keepalive_probe_dropped(env, srv, port, n):
    """KEEPALIVE's drop_probe on srv's connection n: after the DROP nothing more reaches the
    server, and nobody is told (no reset)."""
    r1 = http(b"GET", b"/1")
    probe = http(b"GET", b"/", headers=((b"X-Probe", b"1"),))
    c = env.tcp_client(it.SRV4, port, [r1, 0.2, probe, 0.3, b"more", 0.3], timeout=2.0)
    s = it.server_conn(srv, n, timeout=10)
    check(s["data"] == r1, "after DROP the server got %r", s["data"])
    check(c["end"] != "reset" and s["end"] != "reset", "DROP reset a side: %r %r", c["end"],
          s["end"])


def regex_and_script_judge(env, svc, port):
    """svc gets fgxit's regex (EVIL) and FIREGEX_EXAMPLE; on its server's connections 1 to 3
    the regex blocks, the script blocks, and a body neither minds passes. The server."""
    env.filter(svc)
    env.ctl("script", "set", svc, FIREGEX_EXAMPLE)
    srv = env.tcp_server(port)
    c = env.tcp_client(it.SRV4, port, [http(b"POST", b"/", it.EVIL), 0.3])
    it.assert_blocked(c, it.server_conn(srv, 1))
    c = env.tcp_client(it.SRV4, port, [http(b"POST", b"/", b"ILLEGAL"), 0.3])
    it.assert_blocked(c, it.server_conn(srv, 2), forbidden=b"ILLEGAL")
    ok = http(b"POST", b"/", b"fine")
    c = env.tcp_client(it.SRV4, port, [ok, 0.3])
    it.assert_passed(c, it.server_conn(srv, 3), ok)
    return srv


def pcap_conns(path):
    """Two HTTP connections to port 80 and one to 81, written with scapy's wrpcap."""
    from scapy.all import IP, TCP, Raw, wrpcap
    pk = []

    def conn(sport, dport, msgs):
        c, s = "10.9.0.1", "10.9.0.2"
        seq, sseq = 1000, 5000
        pk.append(IP(src=c, dst=s) / TCP(sport=sport, dport=dport, flags="S", seq=seq - 1))
        pk.append(IP(src=s, dst=c) / TCP(sport=dport, dport=sport, flags="SA", seq=sseq - 1,
                                          ack=seq))
        for req, segs in msgs:
            # the request in segments, the second before the first (held until the gap fills)
            parts = [req[i:i + segs] for i in range(0, len(req), segs)]
            offs = [sum(len(x) for x in parts[:i]) for i in range(len(parts))]
            order = list(range(len(parts)))
            if len(order) > 1:
                order[0], order[1] = order[1], order[0]
            for i in order:
                pk.append(IP(src=c, dst=s) / TCP(sport=sport, dport=dport, flags="PA",
                                                  seq=seq + offs[i], ack=sseq) / Raw(parts[i]))
            seq += len(req)
            resp = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
            pk.append(IP(src=s, dst=c) / TCP(sport=dport, dport=sport, flags="PA", seq=sseq,
                                              ack=seq) / Raw(resp))
            sseq += len(resp)

    ok = b"GET /index HTTP/1.1\r\nHost: a\r\n\r\n"
    body = gzip.compress(b"this is ILLEGAL")
    bad = (b"POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n" +
           b"%x\r\n" % 5 + b"ILLEG\r\n" + b"2\r\nAL\r\n0\r\n\r\n")
    conn(40001, 80, [(ok, 1000)])
    conn(40002, 80, [(ok, 1000), (bad, 20)])   # keep-alive: the second request is chunked
    conn(40003, 81, [(ok, 1000)])
    wrpcap(path, pk)
    return body
