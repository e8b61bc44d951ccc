#!/usr/bin/python3
"""Integration: script filters (issue 16) on NFQUEUE-layer TCP services, with real traffic: a
packet's verdict waits for the script (held, in stream order); REJECT resets both ends as a
regex block does, DROP black-holes the connection; keep-alive with several requests; regexes
and the script both judge; a script's endless loop gets the fail_open verdict while another
NFQUEUE service keeps filtering."""
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fgxit as it  # noqa: E402
from fgxit import check, test  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
FIREGEX_EXAMPLE = os.path.join(HERE, "scripts", "firegex_http_example.py")


def write(text, name="f.py"):
    d = tempfile.mkdtemp(prefix="fgx-script-")
    p = os.path.join(d, name)
    with open(p, "w") as f:
        f.write(text)
    return p


def http(method, path, body=b"", headers=()):
    h = b"".join(b"%s: %s\r\n" % (k, v) for k, v in headers)
    if body:
        h += b"Content-Length: %d\r\n" % len(body)
    return b"%s %s HTTP/1.1\r\nHost: svc\r\n%s\r\n" % (method, path, h) + body


def script_counters(env, svc):
    doc = env.ctl("script", "list", svc)
    return {f["name"]: f for f in doc["functions"]}


def nfq_service(env, name, extra=()):
    sid, port = env.service(name, "tcp", extra=tuple(extra))
    check(env.service_doc(name)["layer"] == "nfqueue", "%s is not on NFQUEUE", name)
    return sid, port


@test
def nfq_firegex_example_blocks_what_it_should(env):
    _, port = nfq_service(env, "nqfg")
    env.ctl("script", "set", "nqfg", FIREGEX_EXAMPLE)
    reply = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    srv = env.tcp_server(port, reply=reply)
    ok = http(b"POST", b"/note", b"hello")
    c = env.tcp_client(it.SRV4, port, [ok, 0.3])
    it.assert_passed(c, it.server_conn(srv, 1), ok, reply)
    bad = http(b"POST", b"/note", b"an ILLEGAL body")
    c = env.tcp_client(it.SRV4, port, [bad, 0.3])
    it.assert_blocked(c, it.server_conn(srv, 2), forbidden=b"ILLEGAL")
    # IPv6 too, the body in a second segment: the first passes, the second is held and
    # rejected
    c = env.tcp_client(it.SRV6, port, [bad[:-10], 0.2, bad[-10:], 0.3])
    s = it.server_conn(srv, 3)
    it.assert_blocked(c, s, forbidden=b"ILLEGAL")
    check(s["data"] == bad[:-10], "the server got %r, expected the first segment", s["data"])
    fn = it.wait_until(lambda: script_counters(env, "nqfg")["filter_with_args"]["blocked"] >= 2)
    check(fn, "blocked counter: %r", script_counters(env, "nqfg"))
    # a big body in many segments passes whole, in order
    big = http(b"POST", b"/bulk", b"x" * 40000)
    c = env.tcp_client(it.SRV4, port, [big, 0.5], timeout=10.0)
    it.assert_passed(c, it.server_conn(srv, 4, timeout=10), big, reply)


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
def drop_probe(req: HttpRequestHeader):
    if req.get_header("x-probe") == "1":
        return DROP
"""


@test
def nfq_keepalive_reject_and_drop(env):
    _, port = nfq_service(env, "nqka")
    env.ctl("script", "set", "nqka", write(KEEPALIVE))
    srv = env.tcp_server(port, idle=4.0)
    r1, r2, r3 = (http(b"GET", b"/%d" % i) for i in (1, 2, 3))
    c = env.tcp_client(it.SRV4, port, [r1, 0.2, r2, 0.2, r3, 0.3])
    s = it.server_conn(srv, 1)
    check(s["data"] == r1 + r2, "two requests pass, the third not: %r", s["data"])
    check(c["end"] == "reset" and s["end"] == "reset", "the third resets: %r %r", c["end"],
          s["end"])
    # per-connection globals: a new connection starts counting again
    c = env.tcp_client(it.SRV4, port, [r1, 0.2, r2, 0.3])
    it.assert_passed(c, it.server_conn(srv, 2), r1 + r2)
    # DROP: nothing more reaches the server, and nobody is told (no reset)
    probe = http(b"GET", b"/", headers=((b"X-Probe", b"1"),))
    c = env.tcp_client(it.SRV4, port, [r1, 0.2, probe, 0.3, b"more", 0.3], timeout=2.0)
    s = it.server_conn(srv, 3, timeout=10)
    check(s["data"] == r1, "after DROP the server got %r", s["data"])
    check(c["end"] != "reset" and s["end"] != "reset", "DROP reset a side: %r %r", c["end"],
          s["end"])
    cnt = it.wait_until(lambda: (lambda d: d if d["third_request"]["blocked"] >= 1 and
                                 d["drop_probe"]["blocked"] >= 1 else None)(
        script_counters(env, "nqka")))
    check(cnt, "counters %r", script_counters(env, "nqka"))


@test
def nfq_regex_and_script_both_judge(env):
    _, port = nfq_service(env, "nqboth")
    env.filter("nqboth")                              # the regex of fgxit (EVIL)
    env.ctl("script", "set", "nqboth", FIREGEX_EXAMPLE)
    srv = env.tcp_server(port)
    c = env.tcp_client(it.SRV4, port, [http(b"POST", b"/", it.EVIL), 0.3])
    it.assert_blocked(c, it.server_conn(srv, 1))
    c = env.tcp_client(it.SRV4, port, [http(b"POST", b"/", b"ILLEGAL"), 0.3])
    it.assert_blocked(c, it.server_conn(srv, 2), forbidden=b"ILLEGAL")
    ok = http(b"POST", b"/", b"fine")
    c = env.tcp_client(it.SRV4, port, [ok, 0.3])
    it.assert_passed(c, it.server_conn(srv, 3), ok)
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


LOOP = """
from firegex.nfproxy import pyfilter, REJECT
from firegex.nfproxy.models import HttpRequestHeader

@pyfilter
def looping(req: HttpRequestHeader):
    if req.url == "/loop":
        while True:
            pass
    if req.url == "/boom":
        raise KeyError("no such thing")
"""


@test
def nfq_loop_and_exception_get_fail_open_while_regex_service_filters(env):
    _, port = nfq_service(env, "nqloop", extra=("--fail-open",))
    _, cport = nfq_service(env, "nqclosed")          # fail-closed (the default)
    _, rport = nfq_service(env, "nqregex")           # regexes only
    env.filter("nqregex")
    env.ctl("script", "set", "nqloop", write(LOOP), "--deadline", "3000")
    env.ctl("script", "set", "nqclosed", write(LOOP))
    srv = env.tcp_server(port, idle=20.0)
    csrv = env.tcp_server(cport)
    rsrv = env.tcp_server(rport)
    loop = http(b"GET", b"/loop")
    t0 = time.monotonic()
    hl = env.tcp_client(it.SRV4, port, [loop, 6.0], timeout=15.0, wait=False)
    time.sleep(0.3)
    # while the interpreter spins, the regex-only NFQUEUE service keeps filtering
    c = env.tcp_client(it.SRV4, rport, [b"clean", 0.1])
    it.assert_passed(c, it.server_conn(rsrv, 1), b"clean")
    c = env.tcp_client(it.SRV4, rport, [it.EVIL, 0.1])
    it.assert_blocked(c, it.server_conn(rsrv, 2))
    check(time.monotonic() - t0 < 2.9, "the regex checks took past the loop's deadline")
    s = it.server_conn(srv, 1, timeout=20)
    c = it.client_result(hl, 20)
    # fail-open: past the deadline the held request passes
    it.assert_passed(c, s, loop)
    check(time.monotonic() - t0 >= 2.9, "the loop was cut before its deadline")
    cnt = it.wait_until(lambda: (lambda d: d if d["looping"]["timeouts"] >= 1 else None)(
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


def crafted(env, src, dst, dport, segments):
    env.next_sport += 1
    h = env.helper(env.cli, "ooo", "--iface", it.CLI_IF, "--src", src, "--dst", dst, "--sport",
                   env.next_sport, "--dport", dport, "--segments",
                   json.dumps([[off, data.hex()] for off, data in segments]),
                   "--pause", 0.3, "--retransmit", 0.5, "--linger", 0.8, "--fin")
    res = it.client_result(h, 30)
    check(res.get("handshake"), "crafted handshake %s -> %s failed: %r %s", src, dst, res,
          h.stderr.decode(errors="replace")[-300:])
    return res


@test
def nfq_script_out_of_order_segments_judged_in_order(env):
    """A segment ahead of a gap is not held on a scripted flow (its bytes could not reach the
    script in order): dropped, and the sender's in-order retransmission is judged."""
    _, port = nfq_service(env, "nqooo")
    env.ctl("script", "set", "nqooo", FIREGEX_EXAMPLE)
    srv = env.tcp_server(port)
    ok = http(b"POST", b"/", b"a fine body here")
    cut = len(ok) - 9
    for n, (src, dst) in enumerate(((it.CLI4, it.SRV4), (it.CLI6, it.SRV6)), start=1):
        crafted(env, src, dst, port, [(cut, ok[cut:]), (0, ok[:cut])])
        s = it.server_conn(srv, n)
        check(s["data"] == ok and s["end"] == "eof",
              "out-of-order clean request over %s: server got %r, end %s", dst, s["data"],
              s["end"])
    bad = http(b"POST", b"/", b"an ILLEGAL body")
    cut = len(bad) - 6
    res = crafted(env, it.CLI4, it.SRV4, port, [(cut, bad[cut:]), (0, bad[:cut])])
    s = it.server_conn(srv, 3)
    check(b"ILLEGAL" not in s["data"] and s["end"] == "reset" and res["reset"],
          "out-of-order ILLEGAL: server got %r, end %s, client reset %r", s["data"], s["end"],
          res["reset"])


if __name__ == "__main__":
    sys.exit(it.run_module("scripts_nfq", setup=setup))
