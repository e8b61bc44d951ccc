#!/usr/bin/python3
"""Integration: no request hides from a script's HTTP model (issue 26, point 8). A red team's
shapes, each against an HttpRequest filter that refuses `evil1337` in the url, the headers or
the body, on both layers, against a service that logs every byte it read: (a) a request after
one that proposed `Upgrade: h2c` / `websocket` and got a 200, not a 101; (b) a body shorter
than its Content-Length (and an absurd Content-Length); (c) an HTTP/1.0 POST with a body and
no length. The evil bytes never reach the service; honest pipelined and keep-alive requests,
and an honest 101 upgrade followed by WebSocket frames, still do. Before the fix every evil
shape reached the service on both layers (the same tests, run against the earlier build)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fgxit as it  # noqa: E402
from fgxit import check, test  # noqa: E402
from scriptfiles import REPLY, script_counters, write  # noqa: E402

EVIL_FILTER = """
from firegex.nfproxy import pyfilter, REJECT
from firegex.nfproxy.models import HttpRequest

@pyfilter
def no_evil(req: HttpRequest):
    heads = "".join(k + ":" + (" ".join(v) if isinstance(v, list) else v)
                    for k, v in req.headers.items())
    if "evil1337" in (req.url or "") or "evil1337" in heads or \\
            (req.body is not None and b"evil1337" in req.body):
        return REJECT
"""

UP_H2C = (b"GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade, HTTP2-Settings\r\n"
          b"Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n")
UP_WS = (b"GET /chat HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
         b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
WS_101 = (b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
          b"Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n")
EVIL_REQ = b"GET /evil1337 HTTP/1.1\r\nHost: a\r\n\r\n"
CL_HEAD = b"POST /up HTTP/1.1\r\nHost: a\r\nContent-Length: %s\r\n\r\n"
H10_HEAD = b"POST / HTTP/1.0\r\nHost: a\r\n\r\n"


def engine(env):
    d = os.path.join(env.bin, "fgex-python")
    if d not in sys.path:
        sys.path.insert(0, d)
    import fgex.engine
    return fgex.engine


def verdicts(e, chunks, src=EVIL_FILTER):
    c = e.Conn(e.Script(src, "evil.py"))
    return [c.feed(inp, data) for inp, data in chunks]


def ws_frame(data):
    from websockets.frames import OP_TEXT, Frame
    return Frame(OP_TEXT, data).serialize(mask=True)


@test
def engine_upgrade_waits_for_the_101(env):
    """An Upgrade request is a proposal: until the server's 101 the client's bytes are judged
    as requests; after it they are the stream (ws_stream for a WebSocket)."""
    e = engine(env)
    for up in (UP_H2C, UP_WS):
        v = verdicts(e, [(True, up), (False, REPLY), (True, EVIL_REQ)])
        check([x.action for x in v] == ["accept", "accept", "reject"] and
              v[2].function == "no_evil", "%r then a 200: %r", up[:40], v)
        v = verdicts(e, [(True, up + EVIL_REQ)])
        check(v[0].action == "reject", "%r with a request pipelined in its chunk: %r", up[:40], v)
    # a request-only file still learns of the 101: the frames are the stream, not requests
    v = verdicts(e, [(True, UP_WS), (False, WS_101), (True, ws_frame(b"hello evil1337"))])
    check([x.action for x in v] == ["accept"] * 3, "frames after a 101: %r", v)
    # an honest h2c upgrade: after the 101 the client's preface and frames are the stream
    h2c_101 = b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n"
    preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
    v = verdicts(e, [(True, UP_H2C), (False, h2c_101 + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"),
                     (True, preface)])
    check([x.action for x in v] == ["accept"] * 3, "h2c after its 101: %r", v)
    # frames after a 200 are no request: the invalid-encoding action (REJECT by default)
    v = verdicts(e, [(True, UP_WS), (False, REPLY), (True, ws_frame(b"hi"))])
    check(v[2].action == "reject" and "start no request" in v[2].detail, "frames after a 200: "
          "%r", v)
    src = EVIL_FILTER + "FGEX_INVALID_ENCODING_ACTION = ExceptionAction.DROP\n"
    src = src.replace("import pyfilter, REJECT", "import pyfilter, REJECT, ExceptionAction")
    v = verdicts(e, [(True, UP_WS), (False, REPLY), (True, ws_frame(b"hi"))], src)
    check(v[2].action == "drop", "FGEX_INVALID_ENCODING_ACTION DROP: %r", v)


@test
def engine_partial_body_judged_as_it_comes(env):
    """HttpRequest is called at each chunk of a body with the body so far (message_complete
    False): a body shorter than its Content-Length is judged; an absurd Content-Length is
    invalid HTTP; HttpFullRequest is still called once, on the whole body."""
    e = engine(env)
    v = verdicts(e, [(True, CL_HEAD % b"100"), (True, b"x=evil1337")])
    check([x.action for x in v] == ["accept", "reject"], "split partial body: %r", v)
    v = verdicts(e, [(True, CL_HEAD % b"100" + b"x=evil1337")])
    check(v[0].action == "reject", "head and partial body together: %r", v)
    v = verdicts(e, [(True, CL_HEAD % b"99999999999999999999" + b"x=hello")])
    check(v[0].action == "reject" and "Content-Length" in v[0].detail, "absurd length: %r", v)
    v = verdicts(e, [(True, CL_HEAD % b"9223372036854775807" + b"x=hello")])
    check(v[0].action == "accept", "the largest length is HTTP: %r", v)
    src = ("from fgex import *\nseen = []\n@pyfilter\ndef r(q: HttpRequest):\n"
           "    seen.append((q.message_complete, q.body))\n"
           "@pyfilter\ndef f(q: HttpFullRequest):\n    seen.append(('full', q.body))\n")
    c = e.Conn(e.Script(src, "seen.py"))
    for chunk in (CL_HEAD % b"6" + b"ab", b"cd", b"ef"):
        check(c.feed(True, chunk).action == "accept", "honest body")
    check(c.glob["seen"] == [(False, b"ab"), (False, b"abcd"), (True, b"abcdef"),
                             ("full", b"abcdef")], "seen %r", c.glob["seen"])
    # past FGEX_STREAM_MAX_SIZE with FLUSH (the default) the body starts again from the
    # chunk, as a stream does: every body byte is in the body of a call
    small = EVIL_FILTER + "FGEX_STREAM_MAX_SIZE = 16\n"
    body = b"a" * 30 + b"evil1337" + b"zz"
    chunks = [(True, CL_HEAD % b"40")] + [(True, body[i:i + 10]) for i in range(0, 40, 10)]
    v = verdicts(e, chunks, small)
    check([x.action for x in v] == ["accept"] * 4 + ["reject"], "past the limit: %r", v)
    v = verdicts(e, [(True, CL_HEAD % b"40")] + [(True, b"b" * 10)] * 4 +
                 [(True, b"GET /next HTTP/1.1\r\nHost: a\r\n\r\n")], small)
    check([x.action for x in v] == ["accept"] * 6, "an honest body past the limit: %r", v)


@test
def engine_no_request_after_the_last(env):
    """Bytes after a request that ends its connection (HTTP/1.0 without keep-alive,
    Connection: close) or that can start no request line are invalid HTTP; honest HTTP/1.0,
    keep-alive and pipelined requests are not."""
    e = engine(env)
    v = verdicts(e, [(True, H10_HEAD + b"x=evil1337")])
    check(v[0].action == "reject" and "ends the connection" in v[0].detail, "1.0 body: %r", v)
    v = verdicts(e, [(True, H10_HEAD), (True, b"x=evil1337")])
    check(v[1].action == "reject", "1.0 body later: %r", v)
    close = b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"
    v = verdicts(e, [(True, close + b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")])
    check(v[0].action == "reject", "a request after Connection: close: %r", v)
    v = verdicts(e, [(True, b"GET / HTTP/1.0\r\nHost: a\r\n\r\n"),
                     (False, b"HTTP/1.0 200 OK\r\n\r\nbody")])
    check([x.action for x in v] == ["accept"] * 2, "honest 1.0: %r", v)
    ka = (b"GET /1 HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /2 HTTP/1.1\r\nHost: a\r\n\r\n"
          b"POST /3 HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n")
    v = verdicts(e, [(True, ka[:30]), (True, ka[30:70]), (True, ka[70:])])
    check([x.action for x in v] == ["accept"] * 3, "honest keep-alive and pipelined: %r", v)
    for junk in (b"x=evil1337", b"\x81\x85garbage", b"GET / HTTP/9.99\r\n"):
        v = verdicts(e, [(True, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n" + junk)])
        check(v[0].action == "reject" and "start no request" in v[0].detail, "%r: %r", junk, v)


LAYERS = (("proxy", ("--layer", "proxy")), ("nfq", ()))


def smuggle_service(env, name, extra, reply):
    _, port = env.service(name, "tcp", extra=extra)
    env.ctl("script", "set", name, write(EVIL_FILTER, "evil.py"))
    return port, env.tcp_server(port, reply=reply)


def evil_refused(env, svc, srv, n, port, steps, what, leaks):
    """One evil connection: a leak (the service read the evil bytes, or no reset) is noted in
    leaks, so that one run names every shape that got through, on both layers."""
    c = env.tcp_client(it.SRV4, port, steps, timeout=3.0)
    s = it.server_conn(srv, n, timeout=10)
    try:
        it.assert_blocked(c, s, forbidden=b"evil1337")
    except AssertionError as e:
        leaks.append("%s: %s: %s" % (svc, what, e))
    return s


@test
def smuggled_requests_refused_on_both_layers(env):
    """Each shape against a service that answers 200 and logs what it read: the evil bytes
    never reach it, and the connection is reset; an honest keep-alive connection (pipelined
    requests, a chunked body, a body in several sends) reaches it whole."""
    leaks = []
    for layer, extra in LAYERS:
        svc = "smug" + layer
        port, srv = smuggle_service(env, svc, extra, REPLY)
        n = 0
        for up in (UP_H2C, UP_WS):
            n += 1
            s = evil_refused(env, svc, srv, n, port, [up, ("read", 0.5), EVIL_REQ, 0.5],
                             "(a) a request after %s answered 200" % up.split(b"\r\n")[3 if
                                                                        up is UP_H2C else 2],
                             leaks)
            check(s["data"].startswith(up), "%s: the upgrade request itself did not pass: %r",
                  svc, s["data"])
        for cl in (b"100", b"99999999999999999999"):
            n += 1
            evil_refused(env, svc, srv, n, port, [CL_HEAD % cl, 0.3, b"x=evil1337", 0.5],
                         "(b) a body short of Content-Length " + cl.decode(), leaks)
        n += 1
        evil_refused(env, svc, srv, n, port, [H10_HEAD, 0.3, b"x=evil1337", 0.5],
                     "(c) an HTTP/1.0 body without a length", leaks)
        honest = [b"GET /1 HTTP/1.1\r\nHost: a\r\n\r\nGET /2 HTTP/1.1\r\nHost: a\r\n\r\n",
                  ("read", 0.5),
                  b"POST /3 HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\nhello", 0.3,
                  b"world", 0.3,
                  b"POST /4 HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
                  b"5\r\nhello\r\n0\r\n\r\n", 0.3]
        n += 1
        c = env.tcp_client(it.SRV4, port, honest, timeout=3.0)
        s = it.server_conn(srv, n, timeout=10)
        want = b"".join(x for x in honest if isinstance(x, bytes))
        check(s["data"] == want and s["end"] == "eof" and c["end"] == "eof",
              "%s: the honest connection: %r (%s)", svc, s["data"], s["end"])
    check(not leaks, "%d shapes got through:\n  %s", len(leaks), "\n  ".join(leaks))
    for layer, _ in LAYERS:
        svc = "smug" + layer
        cnt = it.wait_until(lambda: script_counters(env, svc)["no_evil"]["blocked"] >= 3)
        check(cnt, "%s: counters %r", svc, script_counters(env, svc))


@test
def honest_websocket_upgrade_passes_on_both_layers(env):
    """A 101 switches the client's side: its WebSocket frames (evil1337 in one: no url, header
    or body of a request) reach the service after the handshake."""
    frames = ws_frame(b"hello") + ws_frame(b"evil1337 is only a chat line here")
    for layer, extra in LAYERS:
        svc = "smugws" + layer
        port, srv = smuggle_service(env, svc, extra, WS_101)
        c = env.tcp_client(it.SRV4, port, [UP_WS, ("read", 0.5), frames, 0.5], timeout=3.0)
        s = it.server_conn(srv, 1, timeout=10)
        check(s["data"] == UP_WS + frames and s["end"] == "eof", "%s: the service read %r (%s)",
              svc, s["data"], s["end"])
        check(c["received"] == WS_101, "%s: the client got %r", svc, c["received"])


if __name__ == "__main__":
    sys.exit(it.run_module("script_smuggle"))
