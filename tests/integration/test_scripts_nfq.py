#!/usr/bin/python3
"""Integration: script filters (issue 16) on NFQUEUE-layer TCP services, with real traffic: a
packet's verdict waits for the script (held, in stream order); REJECT resets both ends as a
regex block does, DROP black-holes the connection; keep-alive with several requests; chunked
and gzip bodies decoded for body_decoded; regexes
and the script both judge; a script's endless loop gets the fail_open verdict while another
NFQUEUE service keeps filtering."""
import json
import subprocess
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fgxit as it  # noqa: E402
from fgxit import check, test  # noqa: E402
from scriptfiles import (FAULTY, FIREGEX_EXAMPLE, REPLY, firegex_example_judges,  # noqa: E402
                         http, keepalive_gzip_judged, keepalive_probe_dropped,
                         keepalive_third_rejected, loop_started,
                         regex_and_script_judge, regex_service_filters, script_counters, write)


def nfq_service(env, name, extra=()):
    sid, port = env.service(name, "tcp", extra=tuple(extra))
    check(env.service_doc(name)["layer"] == "nfqueue", "%s is not on NFQUEUE", name)
    return sid, port


@test
def nfq_firegex_example_blocks_what_it_should(env):
    _, port = nfq_service(env, "nqfg")
    srv, bad, s = firegex_example_judges(env, "nqfg", port, 0.2)
    # over IPv6, the body in a second segment: the first passes, the second is held and
    # rejected
    check(s["data"] == bad[:-10], "the server got %r, expected the first segment", s["data"])
    # a big body in many segments passes whole, in order
    big = http(b"POST", b"/bulk", b"x" * 40000)
    c = env.tcp_client(it.SRV4, port, [big, 0.5], timeout=10.0)
    it.assert_passed(c, it.server_conn(srv, 4, timeout=10), big, REPLY)


@test
def nfq_keepalive_chunked_gzip_reject_and_drop(env):
    _, port = nfq_service(env, "nqka")
    srv = keepalive_third_rejected(env, "nqka", port, 0.2)
    keepalive_gzip_judged(env, srv, port, 3, 0.2)
    keepalive_probe_dropped(env, srv, port, 5)
    cnt = it.wait_until(lambda: (lambda d: d if d["third_request"]["blocked"] >= 1 and
                                 d["decoded_body"]["blocked"] >= 1 and
                                 d["drop_probe"]["blocked"] >= 1 else None)(
        script_counters(env, "nqka")))
    check(cnt, "counters %r", script_counters(env, "nqka"))


@test
def nfq_regex_and_script_both_judge(env):
    _, port = nfq_service(env, "nqboth")
    srv = regex_and_script_judge(env, "nqboth", port)
    # the regex blocks a segment behind one the script still holds: neither reaches the server
    first = http(b"POST", b"/", b"y" * 20)[:-5]
    c = env.tcp_client(it.SRV4, port, [first, 0.3, b"yyyyy", 0.2, it.EVIL, 0.3])
    s = it.server_conn(srv, 4)
    it.assert_blocked(c, s)
    # without the script the body passes again: the command returned once the worker had it
    env.ctl("script", "rm", "nqboth")
    ill = http(b"POST", b"/", b"ILLEGAL")
    c = env.tcp_client(it.SRV4, port, [ill, 0.3])
    it.assert_passed(c, it.server_conn(srv, 5), ill)


@test
def nfq_loop_and_exception_get_fail_open_while_regex_service_filters(env):
    _, port = nfq_service(env, "nqloop", extra=("--fail-open",))
    _, cport = nfq_service(env, "nqclosed")          # fail-closed (the default)
    _, rport = nfq_service(env, "nqregex")           # regexes only
    env.filter("nqregex")
    env.ctl("script", "set", "nqloop", write(FAULTY), "--deadline", "3000")
    env.ctl("script", "set", "nqclosed", write(FAULTY))
    srv = env.tcp_server(port, idle=20.0)
    csrv = env.tcp_server(cport)
    rsrv = env.tcp_server(rport)
    hl, t0, loop = loop_started(env, port, 6.0, 15.0, 0.3)
    # while the interpreter spins, the regex-only NFQUEUE service keeps filtering
    regex_service_filters(env, rsrv, rport)
    check(time.monotonic() - t0 < 2.9, "the regex checks took past the loop's deadline")
    s = it.server_conn(srv, 1, timeout=20)
    c = it.client_result(hl, 20)
    # fail-open: past the deadline the held request passes
    it.assert_passed(c, s, loop)
    check(time.monotonic() - t0 >= 2.9, "the loop was cut before its deadline")
    cnt = it.wait_until(lambda: (lambda d: d if d["faulty"]["timeouts"] >= 1 else None)(
        script_counters(env, "nqloop")), timeout=5)
    check(cnt, "timeouts counter %r", script_counters(env, "nqloop"))
    # an exception on a fail-closed service: reset, as a block
    c = env.tcp_client(it.SRV4, cport, [http(b"GET", b"/boom"), 0.3])
    it.assert_blocked(c, it.server_conn(csrv, 1), forbidden=b"/boom")
    ok = http(b"GET", b"/fine")
    c = env.tcp_client(it.SRV4, cport, [ok, 0.3])
    it.assert_passed(c, it.server_conn(csrv, 2), ok)
    r = env.ctl_raw("script", "log", "nqclosed", json_out=False)
    check("KeyError" in r.stdout, "script log:\n%s", r.stdout)


def setup(env):
    # as test_ooo: the client kernel's resets for the connections scapy crafts are dropped
    ruleset = ("table inet fgxit {\n chain out {\n  type filter hook output priority 0;\n"
               "  tcp sport 40000-49999 tcp flags & rst == rst drop\n }\n}\n")
    it.sh("ip", "netns", "exec", env.cli, "nft", "-f", "-", input=ruleset)
    env.next_sport = 40000


def crafted_start(env, src, dst, dport, segments):
    """A crafted flow starts (fgxhelper's ooo mode); flows started together run at once."""
    env.next_sport += 1
    h = env.helper(env.cli, "ooo", "--iface", it.CLI_IF, "--src", src, "--dst", dst, "--sport",
                   env.next_sport, "--dport", dport, "--segments",
                   json.dumps([[off, data.hex()] for off, data in segments]),
                   "--pause", 0.3, "--retransmit", 0.5, "--linger", 0.8, "--fin")
    return h, src, dst, env.next_sport


def crafted_result(started):
    """The crafted flow's result, once it ended (adds "sport")."""
    h, src, dst, sport = started
    res = it.client_result(h, 30)
    check(res.get("handshake"), "crafted handshake %s -> %s failed: %r %s", src, dst, res,
          h.stderr.decode(errors="replace")[-300:])
    return dict(res, sport=sport)


@test
def nfq_script_out_of_order_segments_judged_in_order(env):
    """A segment ahead of a gap is not held on a scripted flow (its bytes could not reach the
    script in order): dropped, and the sender's in-order retransmission is judged."""
    _, port = nfq_service(env, "nqooo")
    env.ctl("script", "set", "nqooo", FIREGEX_EXAMPLE)
    srv = env.tcp_server(port)
    ok = http(b"POST", b"/", b"a fine body here")
    cut = len(ok) - 9
    bad = http(b"POST", b"/", b"an ILLEGAL body")
    bcut = len(bad) - 6
    # the three flows at once, each on its own client port
    started = [crafted_start(env, src, dst, port, [(cut, ok[cut:]), (0, ok[:cut])])
               for src, dst in ((it.CLI4, it.SRV4), (it.CLI6, it.SRV6))]
    evil = crafted_start(env, it.CLI4, it.SRV4, port, [(bcut, bad[bcut:]), (0, bad[:bcut])])
    for st in started:
        s = it.server_conn_of(srv, crafted_result(st)["sport"])
        check(s["data"] == ok and s["end"] == "eof",
              "out-of-order clean request over %s: server got %r, end %s", st[2], s["data"],
              s["end"])
    res = crafted_result(evil)
    s = it.server_conn_of(srv, res["sport"])
    check(b"ILLEGAL" not in s["data"] and s["end"] == "reset" and res["reset"],
          "out-of-order ILLEGAL: server got %r, end %s, client reset %r", s["data"], s["end"],
          res["reset"])


ACCEPT_RAW = """
from firegex.nfproxy import pyfilter, ACCEPT
from firegex.nfproxy.models import RawPacket

@pyfilter
def accept_all(pkt: RawPacket):
    return ACCEPT
"""

# past 256 KiB of client bytes the connection is decided (Firegex: stop calling the filters)
STREAM_ACCEPT = """
from firegex.nfproxy import pyfilter, REJECT, FullStreamAction
from firegex.nfproxy.models import TCPInputStream

FGEX_STREAM_MAX_SIZE = 262144
FGEX_FULL_STREAM_ACTION = FullStreamAction.ACCEPT

@pyfilter
def no_flag(s: TCPInputStream):
    if b"FLAG{" in s.data:
        return REJECT
"""

# one HTTP function: every request of a connection is judged (its state matters)
HTTP_ONE = """
from firegex.nfproxy import pyfilter, REJECT
from firegex.nfproxy.models import HttpRequestHeader

@pyfilter
def no_admin(r: HttpRequestHeader):
    if r.url.startswith("/admin"):
        return REJECT
"""

STREAM_REJECT = STREAM_ACCEPT.replace("FullStreamAction.ACCEPT", "FullStreamAction.REJECT")


def nfq_worker(env):
    ws = [w for w in env.ctl("worker", "list") if w.get("kind") == "nfq"]
    check(len(ws) == 1 and "script_refused" in ws[0], "worker list: %r", ws)
    return ws[0]


FAILS = ("script_errors", "script_timeouts", "script_blocked")


def fails_since(env, before):
    """The worker's failed or blocking script verdicts since before (its counters are the
    module's, shared by its tests)."""
    w = nfq_worker(env)
    return {k: w[k] - before[k] for k in FAILS if w[k] != before[k]}


def ns_sh(env, ns, *argv):
    return it.sh("ip", "netns", "exec", ns, *argv, check=False, timeout=10).stdout


def bulk(env, port, size, host=it.SRV4, timeout=60):
    """size bytes from the client to a sink server through port; both results."""
    srv = env.tcp_server(port, sink=True, idle=timeout)
    h = env.helper(env.cli, "bulk-client", "--host", host, "--port", port, "--size", size,
                   "--timeout", timeout)
    return srv, h


@test
def nfq_script_bulk_transfer_completes_with_the_senders_bytes(env):
    """20 MiB through a service whose script judges every segment (RawPacket, ACCEPT): the
    transfer completes and the server's bytes hash as the client's; a regex-only service on
    the same worker keeps filtering meanwhile, at its usual speed. Then a script decided past
    FGEX_STREAM_MAX_SIZE (FullStreamAction.ACCEPT): its flow stops costing calls (script_final)
    and the bytes still arrive whole."""
    _, port = nfq_service(env, "nqbulk")
    _, rport = nfq_service(env, "nqbrx")
    env.filter("nqbrx")
    rsrv = env.tcp_server(rport)
    env.ctl("script", "set", "nqbulk", write(ACCEPT_RAW))
    before = nfq_worker(env)
    size = 20 << 20
    for n, host in enumerate((it.SRV4, it.SRV6), start=1):
        srv, h = bulk(env, port, size, host)
        if n == 1:
            # while the script judges the bulk stream's segments
            t0 = time.monotonic()
            c = env.tcp_client(it.SRV4, rport, [b"clean", 0.1])
            it.assert_passed(c, it.server_conn(rsrv, 1), b"clean")
            c = env.tcp_client(it.SRV4, rport, [it.EVIL, 0.1])
            it.assert_blocked(c, it.server_conn(rsrv, 2))
            check(time.monotonic() - t0 < 5, "the regex service took %.1f s beside the bulk "
                  "stream", time.monotonic() - t0)
        c = it.client_result(h, 120)
        s = it.server_conn(srv, 1, timeout=60)
        check(c["end"] == "eof" and s["end"] == "eof", "bulk over %s: client %s, server %s",
              host, c["end"], s["end"])
        check(s["bytes"] == size and s["sha256"] == c["sha256"], "bulk over %s: the server got "
              "%d bytes (hash %s), the client sent %d (%s)", host, s["bytes"], s["sha256"][:12],
              c["sent"], c["sha256"][:12])
        srv.stop()
    check(not fails_since(env, before), "script verdicts failed on the bulk streams: %r",
          fails_since(env, before))
    check(it.wait_until(lambda: nfq_worker(env)["script_held"] == 0), "packets still held: %r",
          nfq_worker(env))
    # decided past the limit: later segments pass without a call
    env.ctl("script", "set", "nqbulk", write(STREAM_ACCEPT))
    final0 = nfq_worker(env)["script_final"]
    srv, h = bulk(env, port, size)
    c = it.client_result(h, 120)
    s = it.server_conn(srv, 1, timeout=60)
    check(s["end"] == "eof" and s["bytes"] == size and s["sha256"] == c["sha256"],
          "bulk past the stream limit: server got %d bytes (%s), end %s", s["bytes"], s["end"],
          s["sha256"][:12])
    check(nfq_worker(env)["script_final"] > final0, "no final verdict counted: %r",
          nfq_worker(env))


@test
def nfq_script_stream_limit_reject_stops_at_the_limit(env):
    """FullStreamAction.REJECT past FGEX_STREAM_MAX_SIZE (256 KiB): both ends are reset, and the
    server never read a byte the script did not judge within the limit."""
    _, port = nfq_service(env, "nqlim")
    env.ctl("script", "set", "nqlim", write(STREAM_REJECT))
    srv, h = bulk(env, port, 4 << 20, timeout=10)
    c = it.client_result(h, 40)
    s = it.server_conn(srv, 1, timeout=30)
    check(c["end"] == "reset" and s["end"] == "reset", "client %s, server %s", c["end"], s["end"])
    check(0 < s["bytes"] <= 262144, "the server read %d bytes past a 262144-byte limit",
          s["bytes"])


MANY_CLIENT = r"""
import socket, sys, threading
host, port, n, par = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
req = b"POST /x HTTP/1.1\r\nHost: svc\r\nX-Checker: sla-bot\r\nContent-Length: 5\r\n\r\nhello"
ok, bad, lock, it_ = [0], [], threading.Lock(), iter(range(n))
def one():
    while True:
        with lock:
            i = next(it_, None)
        if i is None:
            return
        try:
            s = socket.create_connection((host, port), timeout=10)
            s.sendall(req)
            s.shutdown(socket.SHUT_WR)
            got = b""
            while True:
                b = s.recv(4096)
                if not b:
                    break
                got += b
            s.close()
            with lock:
                if got.startswith(b"HTTP/1.1 200"):
                    ok[0] += 1
                else:
                    bad.append(repr(got[:40]))
        except Exception as e:
            with lock:
                bad.append(type(e).__name__)
ts = [threading.Thread(target=one) for _ in range(par)]
[t.start() for t in ts]
[t.join() for t in ts]
print(ok[0], len(bad), " ".join(bad[:5]))
"""


@test
def nfq_script_many_short_connections_all_complete(env):
    """200 short HTTP connections, 16 at a time, through an HTTP script: every one completes,
    nothing stays held, no verdict failed."""
    _, port = nfq_service(env, "nqmany")
    env.ctl("script", "set", "nqmany", FIREGEX_EXAMPLE)
    reply = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    env.tcp_server(port, reply=reply, idle=10)
    before = nfq_worker(env)
    t0 = time.monotonic()
    out = it.sh("ip", "netns", "exec", env.cli, "python3", "-c", MANY_CLIENT, it.SRV4, str(port),
                "200", "16", timeout=120).stdout.split()
    el = time.monotonic() - t0
    check(out[:2] == ["200", "0"], "of 200 connections: %s in %.1f s", " ".join(out), el)
    w = it.wait_until(lambda: (lambda w: w if w["script_held"] == 0 else None)(nfq_worker(env)),
                      timeout=5)
    check(w, "packets left held: %r", nfq_worker(env))
    check(not fails_since(env, before), "failed verdicts: %r", fails_since(env, before))


@test
def engine_done_says_when_no_call_can_change_the_verdict(env):
    """Conn.done() (the VERDICT's FGX_SW_VERDICT_FINAL): a per-packet function never makes a
    connection final; FGEX_FULL_STREAM_ACTION ACCEPT past the limit does, and so does an HTTP
    function on a connection whose HTTP broke off (FGEX_INVALID_ENCODING_ACTION ACCEPT); a
    well-formed HTTP connection stays open to the functions."""
    d = os.path.join(env.bin, "fgex-python")
    if d not in sys.path:
        sys.path.insert(0, d)
    import fgex.engine as e
    c = e.Conn(e.Script(ACCEPT_RAW, "raw.py"))
    for _ in range(3):
        check(c.feed(True, b"x" * 1000).action == "accept" and not c.done(), "RawPacket done")
    c = e.Conn(e.Script(STREAM_ACCEPT, "lim.py"))
    check(c.feed(True, b"a" * 200000).action == "accept" and not c.done(), "done below the limit")
    check(c.feed(True, b"a" * 100000).action == "accept" and c.done(), "not done past the limit")
    check(c.feed(True, b"FLAG{x}").action == "accept", "a decided connection judged again")
    c = e.Conn(e.Script(STREAM_REJECT, "rej.py"))
    c.feed(True, b"a" * 200000)
    v = c.feed(True, b"a" * 100000)
    check(v.action == "reject" and not c.done(), "REJECT past the limit: %r", v)
    http_src = """
from firegex.nfproxy import pyfilter, REJECT, ExceptionAction
from firegex.nfproxy.models import HttpRequestHeader
FGEX_INVALID_ENCODING_ACTION = ExceptionAction.ACCEPT

@pyfilter
def hdr(r: HttpRequestHeader):
    if r.get_header("x-bad"):
        return REJECT
"""
    c = e.Conn(e.Script(http_src, "h.py"))
    check(c.feed(True, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").action == "accept" and
          not c.done(), "HTTP connection done")
    c = e.Conn(e.Script(http_src, "h.py"))
    v = c.feed(True, bytes(range(256)) * 100)
    check(v.action == "accept" and c.done(), "broken HTTP: %r, done %r", v, c.done())


HOLD_CLIENT = r"""
import errno, socket, sys, threading, time
host, port, n, idle = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
ends = [None] * n
def one(i):
    try:
        s = socket.create_connection((host, port), timeout=15)
        s.sendall(b"GET /a HTTP/1.1\r\nHost: svc\r\n\r\n")
        time.sleep(idle)
        s.sendall(b"GET /later HTTP/1.1\r\nHost: svc\r\n\r\n")
        time.sleep(0.5)
        s.shutdown(socket.SHUT_WR)
        while s.recv(4096):
            pass
        ends[i] = "eof"
    except OSError as e:  # a reset shows as ECONNRESET, EPIPE, or ENOTCONN at the shutdown
        ends[i] = "reset" if e.errno in (errno.ECONNRESET, errno.EPIPE, errno.ENOTCONN) \
            else type(e).__name__
ts = [threading.Thread(target=one, args=(i,)) for i in range(n)]
[t.start() for t in ts]
[t.join() for t in ts]
print(" ".join(ends))
"""


@test
def nfq_script_full_table_reclaims_idle_flows_and_never_stalls(env):
    """A worker with room for 16 scripted flows per thread (--nfq-script-flows 16, 2 threads):
    60 connections held open after a request fill it; those that found no slot get the
    service's fail-open choice at once (fail-closed here: reset), not a silent stall. A new
    connection once the old ones idled 2 s takes the slot of one (script_reclaimed) and
    completes; the old one, speaking again without its script state, is reset: its bytes never
    pass unjudged. Every other old connection's second request reaches the server."""
    env.stop_controld()
    env.start_controld(extra_args=["--nfq-script-flows", "16"])
    try:
        full_table(env)
    finally:  # the module's later tests get the default table again
        env.stop_controld(check=False)
        env.start_controld()


def full_table(env):
    _, port = nfq_service(env, "nqfull")
    env.ctl("script", "set", "nqfull", write(HTTP_ONE))
    srv = env.tcp_server(port, idle=30)
    start = nfq_worker(env)
    n = 60
    p = subprocess.Popen(["ip", "netns", "exec", env.cli, "python3", "-c", HOLD_CLIENT, it.SRV4,
                          str(port), str(n), "6"], stdout=subprocess.PIPE, text=True)
    time.sleep(3.5)  # every old one sent its first request and idles
    before = nfq_worker(env)
    unslotted = before["script_errors"] - start["script_errors"]
    check(before["script_flows"] == 32 and unslotted == n - 32,
          "the table should be full (2 x 16) and %d refused a slot: %r", n - 32, before)
    for k in range(5):
        c = env.tcp_client(it.SRV4, port, [http(b"GET", b"/new"), 0.3])
        check(c["end"] == "eof", "new connection %d: %r", k, c)
    reclaimed = nfq_worker(env)["script_reclaimed"] - before["script_reclaimed"]
    check(reclaimed >= 1, "no slot reclaimed: %r", nfq_worker(env))
    out, _ = p.communicate(timeout=60)
    ends = out.split()
    check(len(ends) == n and ends.count("reset") == unslotted + reclaimed and
          ends.count("eof") == n - unslotted - reclaimed,
          "old connections ended %r (%d without a slot, %d reclaimed)", ends, unslotted,
          reclaimed)
    later = [e for e in srv.all("conn") if b"/later" in it.d64(e["data"])]
    check(len(later) == n - unslotted - reclaimed, "%d second requests reached the server, "
          "expected %d", len(later), n - unslotted - reclaimed)


if __name__ == "__main__":
    sys.exit(it.run_module("scripts_nfq", setup=setup))
