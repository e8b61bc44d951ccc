#!/usr/bin/python3
"""Integration: Firegex's filter files and their documented verdicts (issue 27), with filter
files of our own that use Firegex's API (none of Firegex's own files are copied here):
loading as tolerant as Firegex (two functions of one name, bad settings, l4_data), edits
(UNSTABLE_MANGLE, l4_data, 5.0.0's data) sent at any length on the proxy layer and refused at
the edit on the NFQUEUE layer with the service's fail policy, Firegex's status_code, history and
total_size, the 5.0.0 RawPacket members, and firegex.*.internals (compile, handle_packet)."""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fgxit as it  # noqa: E402
from fgxit import check, test  # noqa: E402
from scriptfiles import http, pcap_conns, script_counters, write  # noqa: E402

TOLERANT = """\
from firegex.nfproxy import pyfilter, REJECT, UNSTABLE_MANGLE
from firegex.nfproxy.models import RawPacket, HttpRequest
FGEX_MAX_HISTORY_SIZE = "invalid"
FGEX_STREAM_MAX_SIZE = -5
FGEX_FULL_STREAM_ACTION = "REJECT"
FGEX_INVALID_ENCODING_ACTION = 3

@pyfilter
def pick(req: HttpRequest):
    if req.url == "/first":
        return REJECT

@pyfilter
def pick(req: HttpRequest):
    if req.url == "/second":
        return REJECT

@pyfilter
def edit_on_a_path_never_taken(p: RawPacket):
    if b"never-sent" in p.data:
        p.l4_data = b"x"
        return UNSTABLE_MANGLE
"""

# Edits of both directions at lengths other than the original; a later function still
# refuses an edited chunk; RawPacket's 5.0.0 members printed for the script log.
EDITS = """\
from firegex.nfproxy import pyfilter, REJECT, UNSTABLE_MANGLE
from firegex.nfproxy.models import RawPacket

@pyfilter
def where(p: RawPacket):
    if p.is_input and p.data_size:
        print("chunk from %s:%d to %s:%d over %s stream=%s out=%s" % (
            p.client_ip, p.client_port, p.server_ip, p.server_port, p.l4, p.is_stream,
            p.is_output))

@pyfilter
def swap(p: RawPacket):
    if p.is_input and b"flag{" in p.l4_data:
        p.l4_data = p.l4_data.replace(b"flag{", b"FLAG-REDACTED-AND-LONGER{")
        return UNSTABLE_MANGLE
    if p.is_output and b"secret" in p.l4_data:
        p.l4_data = p.l4_data.replace(b"secret ", b"")
        return UNSTABLE_MANGLE

@pyfilter
def still_refused(p: RawPacket):
    if b"LONGER{evil" in p.data:
        return REJECT
"""


def engine(env):
    d = os.path.join(env.bin, "fgex-python")
    if d not in sys.path:
        sys.path.insert(0, d)
    import fgex.engine
    return fgex.engine


def log_entries(env, svc, pred, timeout=8):
    got = it.wait_until(lambda: [e for e in env.ctl("script", "log", svc) if pred(e)] or None,
                        timeout=timeout)
    return got or []


@test
def firegex_habits_load_and_warn(env):
    """Two functions of one name (the last one is called), bad values of each setting
    (Firegex's defaults taken), l4_data assigned on a path: the file loads, warnings in the
    script log, the verdicts as Firegex gives them."""
    _, port = env.service("fgtol", "tcp", extra=("--layer", "proxy"))
    doc = env.ctl("script", "set", "fgtol", write(TOLERANT, "tolerant.py"))
    fns = [(f["name"], f["line"]) for f in doc["functions"]]
    check(fns == [("pick", 14), ("edit_on_a_path_never_taken", 19)], "functions %r", fns)
    srv = env.tcp_server(port, reply=b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
    first = http(b"GET", b"/first")
    c = env.tcp_client(it.SRV4, port, [first, 0.3])
    it.assert_passed(c, it.server_conn(srv, 1), first)
    c = env.tcp_client(it.SRV4, port, [http(b"GET", b"/second"), 0.3])
    it.assert_blocked(c, it.server_conn(srv, 2), forbidden=b"/second")
    warns = log_entries(env, "fgtol", lambda e: e["kind"] == "warning")
    text = "\n".join(e["text"] for e in warns)
    for w in ("two functions named pick (the first at line 9): the last one is used",
              "FGEX_MAX_HISTORY_SIZE = 'invalid': not a number; 100 used instead",
              "FGEX_STREAM_MAX_SIZE = -5: not a size above 0; 1048576 used instead",
              "FGEX_FULL_STREAM_ACTION = 'REJECT'", "FGEX_INVALID_ENCODING_ACTION = 3"):
        check(w in text, "no warning %r in the script log:\n%s", w, text)
    # the offline test says the same, on stderr, and runs the file
    d = tempfile.mkdtemp(prefix="fgx-fg-")
    pcap = os.path.join(d, "t.pcap")
    pcap_conns(pcap)
    r = subprocess.run([os.path.join(env.bin, "fgexctl"), "--json", "script", "test",
                        write(TOLERANT, "tolerant.py"), "--pcap", pcap],
                       capture_output=True, text=True, timeout=30)
    check(r.returncode == 0 and "tolerant.py:14: warning: two functions named pick" in r.stderr
          and "tolerant.py:3: warning: FGEX_MAX_HISTORY_SIZE" in r.stderr,
          "script test: %d %s", r.returncode, r.stderr)
    check([c["verdict"] for c in json.loads(r.stdout)] == ["accept"] * 3, "verdicts %s",
          r.stdout)


@test
def engine_settings_fall_back_as_firegex(env):
    e = engine(env)
    base = ("from fgex import *\n@pyfilter\ndef f(p: RawPacket):\n    pass\n")
    cases = [("FGEX_MAX_HISTORY_SIZE = 'invalid'", "FGEX_MAX_HISTORY_SIZE", 100),
             ("FGEX_MAX_HISTORY_SIZE = -5", "FGEX_MAX_HISTORY_SIZE", 0),
             ("FGEX_MAX_HISTORY_SIZE = '7'", "FGEX_MAX_HISTORY_SIZE", 7),
             ("FGEX_STREAM_MAX_SIZE = 'big'", "FGEX_STREAM_MAX_SIZE", 1 << 20),
             ("FGEX_STREAM_MAX_SIZE = 0", "FGEX_STREAM_MAX_SIZE", 1 << 20),
             ("FGEX_STREAM_MAX_SIZE = '2048'", "FGEX_STREAM_MAX_SIZE", 2048),
             ("FGEX_FULL_STREAM_ACTION = 1", "FGEX_FULL_STREAM_ACTION",
              e.FullStreamAction.FLUSH),
             ("FGEX_INVALID_ENCODING_ACTION = None", "FGEX_INVALID_ENCODING_ACTION",
              e.ExceptionAction.REJECT)]
    for line, name, want in cases:
        s = e.Script(line + "\n" + base, "s.py")
        check(s.settings[name] == want, "%s: %r", line, s.settings[name])
        check(any(ln == 1 for ln, _ in s.warnings) == (not line.endswith(("'7'", "'2048'"))),
              "%s: warnings %r", line, s.warnings)
    s = e.Script("FGEX_NO_SUCH = 1\n" + base, "s.py")
    check(s.warnings and "unknown setting FGEX_NO_SUCH" in s.warnings[0][1], "%r", s.warnings)
    # -5 keeps no history at all
    src = ("from fgex import *\nFGEX_MAX_HISTORY_SIZE = -5\nn = []\n@pyfilter\n"
           "def f(r: HttpFullRequest, h: HttpHistory):\n    n.append(len(h.requests))\n")
    c = e.Conn(e.Script(src, "h.py"))
    for u in (b"/a", b"/b", b"/c"):
        c.feed(True, b"GET " + u + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    check(c.glob["n"] == [0, 0, 0], "history with size 0: %r", c.glob["n"])


@test
def engine_firegex_http_semantics(env):
    """status_code is the reason phrase (status_number the number); HttpHistory is what came
    before the message, whichever parameter comes first; total_size is url (or reason) +
    header names and values + body; raw_size the bytes on the wire."""
    e = engine(env)
    src = ("from firegex.nfproxy import pyfilter\n"
           "from firegex.nfproxy.models import HttpFullRequest, HttpFullResponse, HttpHistory\n"
           "seen = []\n"
           "@pyfilter\ndef req(h: HttpHistory, r: HttpFullRequest):\n"
           "    seen.append(('req', r.url, r.total_size, r.raw_size,"
           " [x.url for x in h.requests], [x.status_code for x in h.responses]))\n"
           "@pyfilter\ndef resp(r: HttpFullResponse, h: HttpHistory):\n"
           "    seen.append(('resp', r.status_code, r.status_number, r.total_size,"
           " [x.url for x in h.requests], [x.status_code for x in h.responses],"
           " len(r.history.requests)))\n")
    c = e.Conn(e.Script(src, "sem.py"))
    r1 = b"GET /short HTTP/1.1\r\nHost: test\r\n\r\n"
    r2 = b"POST /large_path HTTP/1.1\r\nHost: test\r\nContent-Length: 5\r\n\r\nHELLO"
    for inp, data in ((True, r1), (False, b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nOK"),
                      (True, r2), (False, b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")):
        v = c.feed(inp, data)
        check(v.action == "accept", "verdict %r", v)
    want = [("req", "/short", 6 + 8, len(r1), [], []),
            ("resp", "OK", 200, 2 + 14 + 1 + 2, ["/short"], [], 1),
            ("req", "/large_path", 11 + 8 + 15 + 5, len(r2), ["/short"], ["OK"]),
            ("resp", "Not Found", 404, 9 + 14 + 1, ["/short", "/large_path"], ["OK"], 2)]
    check(c.glob["seen"] == want, "got\n%r\nwant\n%r", c.glob["seen"], want)


@test
def engine_status_and_method_compare_as_both_versions(env):
    """4.0.2 gives the reason phrase as status_code and method as a str; 5.0.0 documents
    status_code as the number (status_phrase the phrase); fgex documented method as bytes. A
    file written for any of them decides the same."""
    e = engine(env)
    src = """\
from fgex import *
seen = []

@pyfilter
def r(q: HttpFullRequest):
    seen.append((q.method == 'POST', q.method == b'POST', q.method != 'GET', q.method.lower()))

@pyfilter
def s(p: HttpFullResponse):
    c = p.status_code
    seen.append((c == 404, c == 'Not Found', c >= 400, c < 500, c != 200, int(c),
                 p.status_phrase, p.status_number, {c: 1}.get('Not Found')))
    if c == 404:
        return REJECT
"""
    c = e.Conn(e.Script(src, "st.py"))
    check(c.feed(True, b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n").action ==
          "accept", "request")
    v = c.feed(False, b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
    check(v.action == "reject", "status_code == 404 did not reject: %r", v)
    check(c.glob["seen"] == [(True, True, True, "post"),
                             (True, True, True, True, True, 404, "Not Found", 404, 1)],
          "seen %r", c.glob["seen"])


@test
def engine_rawpacket_members_and_edits(env):
    e = engine(env)
    src = ("from fgex import *\nseen = []\n"
           "@pyfilter\ndef m(p: RawPacket):\n"
           "    seen.append((p.src_ip, p.src_port, p.dst_ip, p.dst_port, p.client_ip,"
           " p.client_port, p.server_ip, p.server_port, p.l4, p.is_tcp, p.is_stream,"
           " p.is_output, p.data_size))\n"
           "    if p.data == b'old':\n        p.l4_data = b'a longer new text'\n"
           "        return UNSTABLE_MANGLE\n"
           "    if p.data == b'accepted':\n        p.l4_data = b'not sent'\n"
           "    if p.data == b'five':\n        p.data = b'5.0.0 style'\n"
           "    if p.data == b'bad':\n        p.l4_data = 'a str'\n"
           "@pyfilter\ndef later(p: RawPacket):\n"
           "    if p.data == b'5.0.0 style' and p.is_output:\n        return REJECT\n")
    c = e.Conn(e.Script(src, "m.py"), False, ("10.0.0.9", 51000, "10.0.0.1", 80))
    v = c.feed(True, b"old")
    check((v.action, v.function, v.data) == ("mangle", "m", b"a longer new text"), "%r", v)
    check(c.glob["seen"][0] == ("10.0.0.9", 51000, "10.0.0.1", 80, "10.0.0.9", 51000,
                                "10.0.0.1", 80, "tcp", True, True, False, 3),
          "members %r", c.glob["seen"][0])
    v = c.feed(False, b"accepted")  # l4_data assigned, ACCEPT returned: 4.0.2 sends nothing new
    check(v.action == "accept" and v.data is None, "%r", v)
    check(c.glob["seen"][1][:8] == ("10.0.0.1", 80, "10.0.0.9", 51000, "10.0.0.9", 51000,
                                    "10.0.0.1", 80) and c.glob["seen"][1][11],
          "the reply's members %r", c.glob["seen"][1])
    v = c.feed(True, b"five")
    check((v.action, v.data) == ("mangle", b"5.0.0 style"), "data assigned %r", v)
    check(c.edits == 2, "edits %d", c.edits)
    v = c.feed(True, b"bad")
    check(v.action == "error" and "l4_data must be bytes" in v.detail, "%r", v)
    c = e.Conn(e.Script(src, "m.py"))
    check(c.feed(False, b"five").action == "reject", "a later function refuses the edit")
    c = e.Conn(e.Script("from fgex import *\n@pyfilter\ndef f(p: RawPacket):\n    exit(3)\n",
                        "x.py"))
    v = c.feed(True, b"x")
    check(v.action == "error" and "SystemExit" in v.detail, "exit() in a filter: %r", v)


WS = """\
from firegex.nfproxy import pyfilter, REJECT
from firegex.nfproxy.models import HttpRequest, HttpResponse
seen = []

@pyfilter
def client_frames(req: HttpRequest):
    seen.append(("c", [(f.opcode.name, f.data) for f in req.ws_stream]))
    if any(b"rm -rf" in f.data for f in req.ws_stream):
        return REJECT

@pyfilter
def server_frames(resp: HttpResponse):
    seen.append(("s", resp.status_code, [f.data for f in resp.ws_stream]))
"""


@test
def engine_websocket_messages_decoded(env):
    """ws_stream: each direction's frames after the upgrade, masked from the client,
    permessage-deflate undone; HttpRequest / HttpResponse called again for each chunk of the
    stream, as Firegex does."""
    e = engine(env)
    from websockets.extensions.permessage_deflate import PerMessageDeflate
    from websockets.frames import OP_TEXT, Frame
    c = e.Conn(e.Script(WS, "ws.py"))
    c.feed(True, b"GET /chat HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\n"
                 b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                 b"Sec-WebSocket-Version: 13\r\n"
                 b"Sec-WebSocket-Extensions: permessage-deflate\r\n\r\n")
    c.feed(False, b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                  b"Connection: Upgrade\r\n"
                  b"Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n"
                  b"Sec-WebSocket-Extensions: permessage-deflate\r\n\r\n")
    cli = [PerMessageDeflate(False, False, 15, 15)]  # the client's own encoder
    hello = Frame(OP_TEXT, b"hello hello hello").serialize(mask=True, extensions=cli)
    bad = Frame(OP_TEXT, b"please rm -rf /").serialize(mask=True, extensions=cli)
    # a frame split across two chunks, then a second one
    check(c.feed(True, hello[:5]).action == "accept", "a half frame")
    check(c.feed(True, hello[5:]).action == "accept", "hello")
    check(c.feed(False, Frame(OP_TEXT, b"hi").serialize(mask=False)).action == "accept", "hi")
    v = c.feed(True, bad)
    check((v.action, v.function) == ("reject", "client_frames"), "the command: %r", v)
    seen = c.glob["seen"]
    check(("c", [("TEXT", b"hello hello hello")]) in seen and ("c", []) in seen and
          ("s", "Switching Protocols", [b"hi"]) in seen and
          seen[-1] == ("c", [("TEXT", b"hello hello hello"), ("TEXT", b"please rm -rf /")]),
          "seen %r", seen)
    # a file with response models only: its requests are parsed by no one, and the 101 and
    # the server's compressed frames are still read
    only = WS[:WS.index("@pyfilter")] + WS[WS.index("@pyfilter\ndef server_frames"):]
    c = e.Conn(e.Script(only, "ws2.py"))
    check(c.feed(True, b"GET /chat HTTP/1.1\r\nHost: a\r\n\r\n").action == "accept", "req")
    srv = [PerMessageDeflate(False, False, 15, 15)]
    v = c.feed(False, b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                      b"Connection: Upgrade\r\nSec-WebSocket-Extensions: permessage-deflate\r\n\r\n" +
               Frame(OP_TEXT, b"compressed hi").serialize(mask=False, extensions=srv))
    check(v.action == "accept" and c.glob["seen"][-1] == ("s", "Switching Protocols",
                                                          [b"compressed hi"]),
          "response-only file: %r %r", v, c.glob["seen"])


WS_REQ = (b"GET /chat HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
          b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
WS_101 = (b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
          b"Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n")


@test
def websocket_message_judged_live(env):
    """On both layers: a WebSocket message the script refuses resets the connection before
    the service gets it; the handshake and an earlier message pass (the frames are masked:
    the service receiving exactly the handshake and the first frame is the check)."""
    engine(env)
    from websockets.frames import OP_TEXT, Frame
    ok = Frame(OP_TEXT, b"ls").serialize(mask=True)
    bad = Frame(OP_TEXT, b"please rm -rf /").serialize(mask=True)
    for svc, extra in (("fgwsp", ("--layer", "proxy")), ("fgwsn", ())):
        _, port = env.service(svc, "tcp", extra=extra)
        env.ctl("script", "set", svc, write(WS, "ws.py"))
        srv = env.tcp_server(port, reply=WS_101)
        c = env.tcp_client(it.SRV4, port, [WS_REQ, ("read", 0.5), ok, 0.3, bad, 0.5])
        s = it.server_conn(srv, 1)
        check(s["data"] == WS_REQ + ok, "%s: the service got %r", svc, s["data"])
        check(c["received"] == WS_101, "%s: the client got %r", svc, c["received"])
        it.assert_blocked(c, s, forbidden=b"rm -rf")
        cnt = it.wait_until(lambda: script_counters(env, svc)["client_frames"]["blocked"] >= 1)
        check(cnt, "%s: counters %r", svc, script_counters(env, svc))


@test
def script_test_counts_edits(env):
    d = tempfile.mkdtemp(prefix="fgx-fg-")
    pcap = os.path.join(d, "t.pcap")
    pcap_conns(pcap)
    src = ("from firegex.nfproxy import pyfilter, UNSTABLE_MANGLE\n"
           "from firegex.nfproxy.models import RawPacket\n"
           "@pyfilter\ndef up(p: RawPacket):\n    if p.is_input:\n"
           "        p.l4_data = p.l4_data.upper()\n        return UNSTABLE_MANGLE\n")
    fgexctl = os.path.join(env.bin, "fgexctl")
    r = subprocess.run([fgexctl, "--json", "script", "test", write(src), "--pcap", pcap],
                       capture_output=True, text=True, timeout=30)
    check(r.returncode == 0, "script test %d %s", r.returncode, r.stderr)
    got = [(c["sport"], c["verdict"], c["edited"]) for c in json.loads(r.stdout)]
    # 40002's second request comes in 20-byte segments, each its own chunk
    check([g[:2] for g in got] == [(40001, "accept"), (40002, "accept"), (40003, "accept")]
          and got[0][2] == 1 and got[1][2] > 2 and got[2][2] == 1, "edits %r", got)
    r = subprocess.run([fgexctl, "script", "test", write(src), "--pcap", pcap],
                       capture_output=True, text=True, timeout=30)
    check("1 chunk edited by the file: sent edited on the proxy layer" in r.stdout,
          "table: %s", r.stdout)


@test
def firegex_internals_drive_fgex(env):
    """compile(glob) / handle_packet(glob), as Firegex's tests and tools call them, in both
    module names, with 4.0.2's and 5.0.0's packet info."""
    engine(env)
    import firegex.nfproxy.internals as i4
    import firegex.pyfilters.internals as i5
    from firegex.pyfilters import pyfilter, collect_pyfilters
    from firegex.pyfilters.internals.data import DataStreamCtx
    from firegex.nfproxy.internals.models import Action, ExceptionAction
    code = ("from firegex.pyfilters import pyfilter, REJECT, UNSTABLE_MANGLE, ExceptionAction\n"
            "from firegex.pyfilters.models import HttpFullRequest, RawPacket\n"
            "FGEX_INVALID_ENCODING_ACTION = ExceptionAction.DROP\n"
            "log = []\n"
            "@pyfilter\ndef zeta(p: RawPacket):\n    log.append((p.client_ip, p.server_port))\n"
            "    if b'swap' in p.data:\n        p.l4_data = b'swapped'\n"
            "        return UNSTABLE_MANGLE\n"
            "@pyfilter\ndef alpha(r: HttpFullRequest):\n    if r.url == '/no':\n"
            "        return REJECT\n")
    check(i5.get_filter_names(code) == ["zeta", "alpha"], "names %r", i5.get_filter_names(code))
    f = lambda p: None  # noqa: E731
    check(pyfilter(f) is f, "pyfilter wraps")
    for mod in (i4, i5):
        glob = {"__firegex_pyfilter_enabled": ["alpha", "zeta"], "__firegex_proto": "http"}
        exec(code, glob, glob)  # noqa: S102
        check(collect_pyfilters(glob) == ["zeta", "alpha"], "collect %r", collect_pyfilters(glob))
        mod.compile(glob)
        check(DataStreamCtx(glob, init_pkt=False).invalid_encoding_action is
              ExceptionAction.DROP, "setting not read")
        # the service's side: no HTTP request parsed from it
        glob["__firegex_packet_info"] = {"data": b"swap", "is_input": False, "is_ipv6": False,
                                         "is_tcp": True, "src_ip": "10.0.0.1",
                                         "dst_ip": "10.0.0.9", "src_port": 80, "dst_port": 5}
        res = mod.handle_packet(glob)
        check(res == {"action": Action.MANGLE.value, "matched_by": "zeta",
                      "mangled_packet": b"swapped"} and glob["__firegex_pyfilter_result"] == res,
              "mangle %r", res)
        glob["__firegex_packet_info"] = {"data": b"GET /no HTTP/1.1\r\nHost: a\r\n\r\n",
                                         "raw_packet": b"\0" * 40, "is_input": True,
                                         "is_ipv6": False, "is_tcp": True, "l4_size": 30}
        res = mod.handle_packet(glob)
        check(res["action"] == Action.REJECT.value and res["matched_by"] == "alpha", "%r", res)
        check(glob["log"] == [("10.0.0.9", 80), ("", 0)], "log %r", glob["log"])


PX_REPLY = b"the secret answer is 42"


@test
def proxy_edits_sent_at_any_length(env):
    _, port = env.service("fgpx", "tcp", extra=("--layer", "proxy"))
    env.ctl("script", "set", "fgpx", write(EDITS, "edits.py"))
    srv = env.tcp_server(port, reply=PX_REPLY)
    c = env.tcp_client(it.SRV4, port, [b"give flag{abc} back", 0.5])
    s = it.server_conn(srv, 1)
    check(s["data"] == b"give FLAG-REDACTED-AND-LONGER{abc} back", "the server got %r (log %r)",
          s["data"], env.ctl("script", "log", "fgpx"))
    check(c["received"] == b"the answer is 42", "the client got %r", c["received"])
    c = env.tcp_client(it.SRV4, port, [b"flag{evil}", 0.5])
    it.assert_blocked(c, it.server_conn(srv, 2), forbidden=b"evil")
    cnt = it.wait_until(lambda: (lambda d: d if d["swap"]["edited"] >= 2 and
                                 d["still_refused"]["blocked"] >= 1 else None)(
        script_counters(env, "fgpx")))
    check(cnt and cnt["swap"]["blocked"] == 0 and cnt["where"]["edited"] == 0,
          "counters %r", script_counters(env, "fgpx"))
    r = env.ctl_raw("script", "list", "fgpx", json_out=False)
    check("EDITED" in r.stdout, "no EDITED column: %s", r.stdout)
    edits = log_entries(env, "fgpx", lambda e: e["kind"] == "edit" and e["function"] == "swap")
    check(edits, "no edit entry in the script log")
    prints = log_entries(env, "fgpx", lambda e: e["kind"] == "print" and
                         ("chunk from %s:" % it.CLI4) in e["text"])
    check(prints and (" to %s:%d over tcp stream=True out=False" % (it.SRV4, port))
          in prints[0]["text"], "RawPacket members printed %r", prints[:1])


@test
def nfqueue_edit_refused_at_the_edit(env):
    """The NFQUEUE layer does not rewrite segments: the file loads, and a chunk a function
    edits gets the service's fail policy (reset fail-closed; passed as sent fail-open), with a
    script-log line saying why."""
    _, port = env.service("fgnq", "tcp")
    _, oport = env.service("fgnqo", "tcp", extra=("--fail-open",))
    for svc in ("fgnq", "fgnqo"):
        check(env.service_doc(svc)["layer"] == "nfqueue", "%s is not on NFQUEUE", svc)
        env.ctl("script", "set", svc, write(EDITS, "edits.py"))
    srv = env.tcp_server(port)
    osrv = env.tcp_server(oport)
    plain = b"nothing to edit"
    c = env.tcp_client(it.SRV4, port, [plain, 0.3])
    it.assert_passed(c, it.server_conn(srv, 1), plain)
    c = env.tcp_client(it.SRV4, port, [b"give flag{abc} back", 0.5])
    it.assert_blocked(c, it.server_conn(srv, 2), forbidden=b"flag{")
    c = env.tcp_client(it.SRV4, oport, [b"give flag{abc} back", 0.5])
    it.assert_passed(c, it.server_conn(osrv, 1), b"give flag{abc} back")
    for svc in ("fgnq", "fgnqo"):
        ex = log_entries(env, svc, lambda e: e["kind"] == "exception" and
                         e["function"] == "swap")
        check(ex and "the NFQUEUE layer cannot rewrite a TCP segment" in ex[0]["text"] and
              "fail policy" in ex[0]["text"], "%s: script log %r", svc, ex[:1])
        cnt = script_counters(env, svc)
        check(cnt["swap"]["edited"] == 0 and cnt["swap"]["errors"] >= 1, "%s: %r", svc, cnt)
    prints = log_entries(env, "fgnq", lambda e: e["kind"] == "print" and
                         ("chunk from %s:" % it.CLI4) in e["text"])
    check(prints and (" to %s:%d over tcp" % (it.SRV4, port)) in prints[0]["text"],
          "RawPacket members on NFQUEUE %r", prints[:1])


if __name__ == "__main__":
    sys.exit(it.run_module("scripts_firegex"))
