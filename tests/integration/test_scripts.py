#!/usr/bin/python3
"""Integration: script filters (issue 16), Python filter files with Firegex's API: a file is
checked when it is set (refused with FILE:LINE, nothing stored), stored, listed, kept in
backups; `script test` runs a file offline over a pcap written with scapy."""
import base64
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fgxit as it  # noqa: E402
from fgxit import check, test  # noqa: E402
from scriptfiles import (FAULTY, FIREGEX_EXAMPLE, firegex_example_judges, http,  # noqa: E402
                         keepalive_gzip_judged, keepalive_probe_dropped, keepalive_third_rejected,
                         loop_started, pcap_conns,
                         regex_and_script_judge, regex_service_filters, script_counters, write)


def refused(env, svc, text, line, words):
    p = write(text, "bad.py")
    r = env.ctl_raw("script", "set", svc, p, json_out=False)
    check(r.returncode == 4, "a bad file was accepted (rc %d): %s%s", r.returncode, r.stdout,
          r.stderr)
    check("bad.py:%d:" % line in r.stderr, "the refusal does not name bad.py:%d: %r", line,
          r.stderr)
    for w in words:
        check(w in r.stderr, "the refusal does not say %r: %r", w, r.stderr)
    return r.stderr


@test
def firegex_example_loads_and_lists(env):
    env.service("fgxex", "tcp", extra=("--layer", "proxy"))
    doc = env.ctl("script", "set", "fgxex", FIREGEX_EXAMPLE)
    fns = doc["functions"]
    check([f["name"] for f in fns] == ["filter_with_args"], "functions %r", fns)
    check(fns[0]["line"] == 6 and fns[0]["params"] == ["HttpRequest"] and fns[0]["active"],
          "function entry %r", fns[0])
    check(doc["deadline_ms"] == 100, "default deadline %r", doc)
    lst = env.ctl("script", "list", "fgxex")
    check(lst["functions"][0]["name"] == "filter_with_args" and
          lst["functions"][0]["blocked"] == 0, "script list %r", lst)
    # get gives the file back byte for byte
    r = env.ctl_raw("script", "get", "fgxex", json_out=False)
    with open(FIREGEX_EXAMPLE) as f:
        check(r.stdout == f.read(), "script get is not the file: %r", r.stdout[:200])
    r = env.ctl_raw("script", "list", "fgxex", json_out=False)
    check("filter_with_args" in r.stdout and "HttpRequest" in r.stdout, "list: %r", r.stdout)


@test
def bad_files_refused_with_line(env):
    env.service("badf", "tcp", extra=("--layer", "proxy"))
    hdr = "from firegex.nfproxy import pyfilter, ACCEPT, REJECT\n" \
          "from firegex.nfproxy.models import RawPacket, HttpRequest\n"
    refused(env, "badf", hdr + "@pyfilter\ndef f(p: RawPacket)\n    return ACCEPT\n", 4,
            ["syntax error"])
    refused(env, "badf", hdr + "\n@pyfilter\ndef f(p):\n    return ACCEPT\n", 5,
            ["no annotation", "p"])
    refused(env, "badf", hdr + "@pyfilter\ndef f(p: int):\n    return ACCEPT\n", 4,
            ["unknown annotation", "int"])
    # (two functions of one name, a bad setting, l4_data: loaded, test_scripts_firegex.py)
    refused(env, "badf", hdr + "import nosuchmodule_fgx\n", 3, ["ModuleNotFoundError"])
    # nothing was stored by any of them
    r = env.ctl_raw("script", "list", "badf")
    check(r.returncode == 3, "a refused file was stored: %s %s", r.stdout, r.stderr)
    # a module-level endless loop is cut by the check's time limit, and controld answers
    r = env.ctl_raw("script", "set", "badf", write(hdr + "while True:\n    pass\n"),
                    json_out=False, timeout=30)
    check(r.returncode == 4 and "did not finish loading" in r.stderr, "loop: %d %r",
          r.returncode, r.stderr)
    env.ctl("status")


@test
def enable_disable_rm_and_backup(env):
    env.service("ed", "tcp", extra=("--layer", "proxy"))
    src = ("from fgex import *\n@pyfilter\ndef one(p: RawPacket):\n    pass\n\n"
           "@pyfilter\ndef two(s: TCPInputStream):\n    pass\n")
    p = write(src)
    env.ctl("script", "set", "ed", p, "--deadline", "250")
    doc = env.ctl("script", "disable", "ed", "two")
    check([f["active"] for f in doc["functions"]] == [True, False], "after disable %r", doc)
    # a new version keeps the switch and the deadline
    doc = env.ctl("script", "set", "ed", p)
    check([f["active"] for f in doc["functions"]] == [True, False] and doc["deadline_ms"] == 250,
          "after set again %r", doc)
    r = env.ctl_raw("script", "enable", "ed", "three")
    check(r.returncode == 3, "enable of an unknown function: %d %s", r.returncode, r.stderr)
    env.ctl("script", "enable", "ed", "two")
    # export carries the file byte for byte; import brings it back
    d = tempfile.mkdtemp(prefix="fgx-script-")
    bk = os.path.join(d, "backup.json")
    r = env.ctl_raw("export", bk, json_out=False)
    check(r.returncode == 0, "export: %s", r.stderr)
    with open(bk) as f:
        cfg = json.load(f)
    scripts = [sv["script"] for sv in cfg["services"] if sv["name"] == "ed" and "script" in sv]
    check(len(scripts) == 1, "the backup has no script for ed: %r", cfg["services"])
    check([f["active"] for f in scripts[0]["functions"]] == [True, True] and
          scripts[0]["deadline_ms"] == 250, "the backup's script %r", scripts[0])
    mine = [s for s in scripts if s.get("source") == src or
            (s.get("source_b64") and base64.b64decode(s["source_b64"]) == src.encode())]
    check(mine, "the backup does not hold the file: %r", scripts)
    env.ctl("script", "rm", "ed")
    r = env.ctl_raw("script", "get", "ed")
    check(r.returncode == 3, "script get after rm: %d", r.returncode)
    r = env.ctl_raw("import", bk, json_out=False)
    check(r.returncode == 0, "import: %s", r.stderr)
    r = env.ctl_raw("script", "get", "ed", json_out=False)
    check(r.stdout == src, "after import the file is %r", r.stdout)
    # scripts run on both layers: an NFQUEUE service takes one, and a scripted service moves
    # to NFQUEUE and back with it (test_scripts_nfq has the traffic)
    env.service("en", "tcp")
    env.ctl("script", "set", "en", p)
    r = env.ctl_raw("service", "set", "ed", "--layer", "nfqueue", json_out=False)
    check(r.returncode == 0, "layer switch: %d %s", r.returncode, r.stderr)
    check(env.service_doc("ed")["layer"] == "nfqueue", "the switch was not stored")
    r = env.ctl_raw("script", "get", "ed", json_out=False)
    check(r.stdout == src, "the file did not move with the service: %r", r.stdout[:80])
    env.ctl("service", "set", "ed", "--layer", "proxy")
    udp, _ = env.service("eu", "udp")
    r = env.ctl_raw("script", "set", "eu", p, json_out=False)
    # (UDP takes scripts of RawPacket only: test_udp_scripts; this file reads HTTP)
    check(r.returncode == 4 and "UDP" in r.stderr and "RawPacket only" in r.stderr,
          "a UDP service took a file of stream models: %s", r.stderr)


def engine(env):
    """fgex's engine as the build installs it (the Python package next to the binaries)."""
    d = os.path.join(env.bin, "fgex-python")
    if d not in sys.path:
        sys.path.insert(0, d)
    import fgex.engine
    return fgex.engine


@test
def engine_connection_globals_without_rerunning_the_module(env):
    """Each connection has its own globals, as if the module code ran again for it: a plain
    file (imports, @pyfilter functions, literals) gets them from its first run (shared when
    nothing can change them, copied with its functions rebuilt when a function may), any
    other file runs its module code again."""
    e = engine(env)
    pre = ("from firegex.nfproxy import pyfilter, REJECT, ExceptionAction\n"
           "from firegex.nfproxy.models import RawPacket\n")
    fn = "@pyfilter\ndef f(p: RawPacket):\n"
    shared = e.Script(pre + "LIMIT = 3\nMODE = ExceptionAction.ACCEPT\n" + fn +
                      "    return REJECT if len(p.data) > LIMIT else None\n", "a.py")
    check(shared.plan == "shared", "plan %r", shared.plan)
    a, b = e.Conn(shared), e.Conn(shared)
    check(a.feed(True, b"ab").action == "accept" and b.feed(True, b"abcd").action == "reject",
          "shared verdicts")
    # a counter with `global`, a list mutated without it, a helper reading them
    copied = e.Script(pre + "n = 0\nseen = []\ndef total():\n    return n + len(seen)\n" +
                      fn + "    global n\n    n += 1\n    seen.append(p.data)\n"
                      "    return REJECT if total() >= 4 else None\n", "b.py")
    check(copied.plan == {"seen"}, "plan %r", copied.plan)
    a, b = e.Conn(copied), e.Conn(copied)
    check(a.feed(True, b"1").action == "accept" and a.feed(True, b"2").action == "reject",
          "a's own counter")
    check(b.feed(True, b"1").action == "accept", "b starts from zero: %r %r", b.glob["n"],
          b.glob["seen"])
    check(a.glob["seen"] == [b"1", b"2"] and b.glob["seen"] == [b"1"] and
          copied.template["seen"] == [] and copied.template["n"] == 0,
          "globals shared across connections: %r %r", a.glob["seen"], b.glob["seen"])
    # an attribute set on the file's own function: each connection has its own function
    attr = e.Script(pre + fn + "    f.n = getattr(f, 'n', 0) + 1\n"
                    "    return REJECT if f.n >= 2 else None\n", "d.py")
    check(attr.plan == set(), "plan %r", attr.plan)
    a, b = e.Conn(attr), e.Conn(attr)
    check(a.feed(True, b"1").action == "accept" and a.feed(True, b"2").action == "reject" and
          b.feed(True, b"1").action == "accept", "a function's attribute shared")
    # a module-level call: run again per connection, as Firegex does
    rerun = e.Script(pre + "import itertools\nids = itertools.count()\nmine = next(ids)\n" +
                     fn + "    return None\n", "c.py")
    check(rerun.plan is None, "plan %r", rerun.plan)
    check(e.Conn(rerun).glob["mine"] == 0 and e.Conn(rerun).glob["mine"] == 0,
          "the module code ran again")


@test
def engine_models_settings_history(env):
    """The models' semantics, through the engine directly: headers as sent and get_header,
    HttpHistory, a HEAD response without body, FGEX_FULL_STREAM_ACTION, invalid HTTP."""
    e = engine(env)
    src = ("from firegex.nfproxy import pyfilter, REJECT, DROP, FullStreamAction\n"
           "from firegex.nfproxy.models import HttpRequest, HttpFullResponse, HttpHistory,"
           " TCPInputStream\n"
           "seen = []\n"
           "@pyfilter\ndef heads(r: HttpRequest):\n"
           "    seen.append((r.headers.get('X-Mixed'), r.get_header('x-mixed'),"
           " r.get_header('x-two'), r.body))\n"
           "@pyfilter\ndef resp(r: HttpFullResponse):\n"
           "    seen.append((r.status_number, r.body))\n"
           # the history before the message (Firegex's): at the third request, two
           "@pyfilter\ndef hist(h: HttpHistory):\n"
           "    if len(h.requests) >= 2 and len(h.responses) >= 1:\n        return DROP\n")
    s = e.Script(src, "t.py")
    c = e.Conn(s)
    v = c.feed(True, b"HEAD / HTTP/1.1\r\nHost: a\r\nX-Mixed: One\r\nx-two: a\r\n"
                     b"X-Two: b\r\n\r\n")
    check(v.action == "accept", "first request %r", v)
    # headers and end in one chunk: one call, with the (empty) body complete
    check(c.glob["seen"] == [("One", "One", "a, b", b"")], "headers %r", c.glob["seen"])
    v = c.feed(False, b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n")  # HEAD: no body
    check(v.action == "accept" and c.glob["seen"][-1] == (200, b""), "HEAD response %r %r", v,
          c.glob["seen"])
    v = c.feed(True, b"POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc")
    check(v.action == "accept" and c.glob["seen"][-1][3] == b"abc", "second %r %r", v,
          c.glob["seen"])
    v = c.feed(True, b"GET /3 HTTP/1.1\r\nHost: a\r\n\r\n")
    check((v.action, v.function) == ("drop", "hist"), "history-based drop %r", v)
    full = ("from fgex import *\nFGEX_STREAM_MAX_SIZE = 10\n"
            "FGEX_FULL_STREAM_ACTION = FullStreamAction.REJECT\n"
            "@pyfilter\ndef f(s: TCPInputStream):\n    pass\n")
    c = e.Conn(e.Script(full, "full.py"))
    check(c.feed(True, b"12345").action == "accept", "under the limit")
    v = c.feed(True, b"678901")
    check(v.action == "reject" and "MAX_STREAM" in v.detail, "full stream %r", v)
    flush = full.replace("FullStreamAction.REJECT", "FullStreamAction.FLUSH").replace(
        "pass", "return REJECT if s.data == b'678901' else None")
    c = e.Conn(e.Script(flush, "flush.py"))
    c.feed(True, b"12345")
    check(c.feed(True, b"678901").action == "reject", "FLUSH starts again from the chunk")
    inval = ("from fgex import *\n@pyfilter\ndef f(r: HttpRequest):\n    pass\n")
    c = e.Conn(e.Script(inval, "inval.py"))
    check(c.feed(True, b"\x16\x03\x01 not http\r\n\r\n").action == "reject",
          "invalid HTTP rejects by default")
    c = e.Conn(e.Script(inval + "FGEX_INVALID_ENCODING_ACTION = ExceptionAction.ACCEPT\n",
                        "inval2.py"))
    check(c.feed(True, b"\x16\x03\x01 not http\r\n\r\n").action == "accept",
          "ExceptionAction.ACCEPT")


@test
def script_test_on_pcap(env):
    d = tempfile.mkdtemp(prefix="fgx-script-")
    pcap = os.path.join(d, "t.pcap")
    pcap_conns(pcap)
    fgexctl = os.path.join(env.bin, "fgexctl")
    r = subprocess.run([fgexctl, "--json", "script", "test", FIREGEX_EXAMPLE, "--pcap", pcap],
                       capture_output=True, text=True, timeout=30)
    check(r.returncode == 0, "script test: %d %s", r.returncode, r.stderr)
    res = json.loads(r.stdout)
    got = [(c["sport"], c["verdict"], c["function"]) for c in res]
    check(got == [(40001, "accept", ""), (40002, "reject", "filter_with_args"),
                  (40003, "accept", "")], "verdicts %r", got)
    r = subprocess.run([fgexctl, "script", "test", FIREGEX_EXAMPLE, "--pcap", pcap, "--port",
                        "81"], capture_output=True, text=True, timeout=30)
    lines = r.stdout.splitlines()
    check(r.returncode == 0 and len(lines) == 2 and "10.9.0.1:40003" in lines[1] and
          "accept" in lines[1], "--port 81: %r %s", r.stdout, r.stderr)
    # a gzip body decoded for body_decoded, an exception, an endless loop, each per connection
    src = ("from firegex.nfproxy import pyfilter, REJECT, DROP\n"
           "from firegex.nfproxy.models import HttpFullRequest\n"
           "@pyfilter\ndef boom(r: HttpFullRequest):\n"
           "    if r.method == b'POST':\n        raise ValueError('no')\n")
    r = subprocess.run([fgexctl, "script", "test", write(src), "--pcap", pcap],
                       capture_output=True, text=True, timeout=30)
    check(r.returncode == 0 and "error" in r.stdout and "ValueError: no" in r.stdout,
          "exception: %r %s", r.stdout, r.stderr)
    r = subprocess.run([fgexctl, "script", "test", write(src.replace(
        "raise ValueError('no')", "while True: pass")), "--pcap", pcap],
        capture_output=True, text=True, timeout=30)
    check(r.returncode == 0 and "timeout" in r.stdout, "loop: %r %s", r.stdout, r.stderr)
    r = subprocess.run([fgexctl, "script", "test", write("def x(:\n"), "--pcap", pcap],
                       capture_output=True, text=True, timeout=30)
    check(r.returncode == 4 and ":1:" in r.stderr, "bad file: %d %r", r.returncode, r.stderr)


SW_SRC = """
from firegex.nfproxy import pyfilter, REJECT, DROP
from firegex.nfproxy.models import HttpRequest
seen = 0
@pyfilter
def f(r: HttpRequest):
    global seen
    seen += 1
    print("request", seen, r.url)
    if r.url == "/evil":
        return REJECT
    if r.url == "/drop":
        return DROP
    if r.url == "/loop":
        while True:
            pass
    if r.url == "/boom":
        raise ValueError("boom")
"""


@test
def scriptworker_verdicts_and_isolation(env):
    """The real scriptworker, driven over its sockets as a data-path thread drives it: verdicts,
    per-connection globals, an exception (traceback in the log), an endless loop (timeout,
    the function named, the interpreter replaced, its connections' state lost), and the
    other interpreter's connections unharmed."""
    from swclient import SwClient
    url = "ipc://%s/sw-test.sock" % tempfile.mkdtemp(prefix="fgx-sw-")
    p = subprocess.Popen([os.path.join(env.bin, "scriptworker"), "--listen", url,
                          "--python-dir", os.path.join(env.bin, "fgex-python"), "--procs", "2"],
                         stderr=subprocess.DEVNULL)
    c = None
    try:
        c = SwClient(url, timeout_ms=10000)
        check(c.script(7, SW_SRC, deadline_ms=200), "the file was not loaded")

        def req(conn, url_, hash_):
            return c.data(7, conn, True, b"GET %s HTTP/1.1\r\nHost: a\r\n\r\n" %
                          url_.encode(), hash_=hash_)

        for conn, h in ((1, 0), (2, 1), (3, 0)):
            c.open(7, conn, hash_=h)
        check(req(1, "/ok", 0)[0] == "accept", "accept")
        check(req(1, "/ok", 0)[0] == "accept", "accept on keep-alive")
        v = req(1, "/evil", 0)
        check(v[:2] == ("reject", "f"), "reject: %r", v)
        check(req(2, "/drop", 1)[:2] == ("drop", "f"), "drop")
        c.open(7, 4, hash_=1)
        v = req(4, "/boom", 1)
        check(v[:2] == ("error", "f"), "an exception is an error verdict: %r", v)
        check(req(3, "/ok", 0)[0] == "accept", "conn 3")
        # per-connection globals: conn 3 has seen one request, whatever conn 1 saw
        prints = [t for (_, k, _, t) in c.logs if k == "print"]
        check("request 1 /ok\n" in prints and "request 3 /evil\n" in prints, "prints %r",
              prints)
        exc = [t for (_, k, fn, t) in c.logs if k == "exception" and fn == "f"]
        check(exc and "ValueError: boom" in exc[0] and "line 18" in exc[0] and "engine.py" not in exc[0],
              "traceback %r", exc)
        c.open(7, 5, hash_=1)
        c.open(7, 6, hash_=1)
        req(6, "/ok", 1)
        t0 = __import__("time").monotonic()
        v = req(5, "/loop", 1)
        took = __import__("time").monotonic() - t0
        check(v[:2] == ("timeout", "f") and 0.15 < took < 2.0, "loop: %r after %.2fs", v, took)
        check(any(k == "timeout" and fn == "f" for (_, k, fn, _) in c.logs), "no timeout log")
        # conn 6 lived in the replaced interpreter: its state is gone (fail-open verdict)
        check(req(6, "/ok", 1)[0] == "error", "state of the replaced interpreter")
        # the other interpreter never stopped; the new one runs the file too
        check(req(3, "/evil", 0)[:2] == ("reject", "f"), "interpreter 0 after the loop")
        c.open(7, 7, hash_=1)
        check(req(7, "/evil", 1)[:2] == ("reject", "f"), "the new interpreter")
    finally:
        if c:
            c.close()
        p.terminate()
        p.wait(timeout=5)


# ---- the proxy layer, with real traffic ----

def px_service(env, name, extra=()):
    sid, port = env.service(name, "tcp", extra=("--layer", "proxy") + tuple(extra))
    return sid, port


@test
def proxy_firegex_example_blocks_what_it_should(env):
    _, port = px_service(env, "pxfg")
    firegex_example_judges(env, "pxfg", port, 0.1)


@test
def proxy_keepalive_chunked_gzip_and_drop(env):
    _, port = px_service(env, "pxka")
    srv = keepalive_third_rejected(env, "pxka", port, 0.1)
    keepalive_gzip_judged(env, srv, port, 3, 0.1)
    keepalive_probe_dropped(env, srv, port, 5)
    cnt = it.wait_until(lambda: script_counters(env, "pxka"))
    check(cnt["third_request"]["blocked"] >= 1 and cnt["decoded_body"]["blocked"] >= 1 and
          cnt["drop_probe"]["blocked"] >= 1, "counters %r", cnt)


@test
def proxy_exception_and_loop_leave_regex_filtering_alone(env):
    _, port = px_service(env, "pxbad")               # fail-closed (the default)
    _, oport = px_service(env, "pxopen", extra=("--fail-open",))
    _, rport = env.service("regexonly", "tcp")        # NFQUEUE, regexes only
    env.filter("regexonly")
    # a long deadline, so that the regex service is seen filtering while the loop runs
    env.ctl("script", "set", "pxbad", write(FAULTY), "--deadline", "6000")
    env.ctl("script", "set", "pxopen", write(FAULTY))
    srv = env.tcp_server(port, idle=40.0)
    osrv = env.tcp_server(oport)
    rsrv = env.tcp_server(rport)
    boom = http(b"GET", b"/boom")
    c = env.tcp_client(it.SRV4, port, [boom, 0.3])
    it.assert_blocked(c, it.server_conn(srv, 1), forbidden=b"/boom")
    c = env.tcp_client(it.SRV4, oport, [boom, 0.3])
    it.assert_passed(c, it.server_conn(osrv, 1), boom)
    # an endless loop: past the call's deadline (6 s here), while the regex service keeps
    # filtering
    hl, t0, loop = loop_started(env, port, 25.0, 30.0, 0.2)
    regex_service_filters(env, rsrv, rport)
    check(hl.wait_event(lambda e: e.get("event") == "result", 0) is None and
          time.monotonic() - t0 < 5.9, "the loop's connection ended before the regex checks")
    it.assert_blocked(it.client_result(hl, 60), it.server_conn(srv, 2, timeout=40),
                     forbidden=b"/loop")
    check(time.monotonic() - t0 >= 5.9, "the loop was cut before its deadline")
    c = env.tcp_client(it.SRV4, oport, [loop, 1.0])
    it.assert_passed(c, it.server_conn(osrv, 2), loop)
    # the replaced interpreter works: the next connections are judged again
    ok = http(b"GET", b"/fine")
    c = env.tcp_client(it.SRV4, port, [ok, 0.3])
    it.assert_passed(c, it.server_conn(srv, 3), ok)
    cnt = it.wait_until(lambda: (lambda d: d if d["faulty"]["errors"] >= 1 and
                                 d["faulty"]["timeouts"] >= 1 else None)(
        script_counters(env, "pxbad")), timeout=5)
    check(cnt, "errors/timeouts counters %r", script_counters(env, "pxbad"))
    r = env.ctl_raw("script", "log", "pxbad", json_out=False)
    check("KeyError" in r.stdout and "no such thing" in r.stdout and "timeout" in r.stdout and
          "checking /fine" in r.stdout, "script log:\n%s", r.stdout)
    ev = env.ctl("script", "log", "pxbad")
    check(any(e["kind"] == "exception" and e["function"] == "faulty" for e in ev),
          "script log --json %r", ev[:3])


@test
def proxy_regex_and_script_both_judge(env):
    _, port = px_service(env, "pxboth")
    srv = regex_and_script_judge(env, "pxboth", port)
    # without the script the body passes again: the command returned once the worker had it
    env.ctl("script", "rm", "pxboth")
    ill = http(b"POST", b"/", b"ILLEGAL")
    c = env.tcp_client(it.SRV4, port, [ill, 0.3])
    it.assert_passed(c, it.server_conn(srv, 4), ill)


def scriptworker_pid(env):
    """controld's scriptworker child, from /proc (to check `worker list` against)."""
    cpid = env.controld_pid()
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                st = f.read()
            with open("/proc/%s/comm" % d) as f:
                comm = f.read().strip()
        except OSError:
            continue
        if comm == "scriptworker" and int(st.rsplit(")", 1)[1].split()[1]) == cpid:
            return int(d)
    return None


@test
def scriptworker_restarted_by_controld_gets_the_files_again(env):
    _, port = px_service(env, "pxrestart")
    env.ctl("script", "set", "pxrestart", FIREGEX_EXAMPLE)
    srv = env.tcp_server(port)
    bad = http(b"POST", b"/", b"ILLEGAL")
    c = env.tcp_client(it.SRV4, port, [bad, 0.3])
    it.assert_blocked(c, it.server_conn(srv, 1), forbidden=b"ILLEGAL")
    old = scriptworker_pid(env)
    check(old, "no scriptworker under controld")
    os.kill(old, 9)
    new = it.wait_until(lambda: (lambda p: p if p and p != old else None)(scriptworker_pid(env)),
                        timeout=10)
    check(new, "controld did not restart scriptworker")
    time.sleep(1.0)  # its interpreters start; the proxy threads' sockets reconnect
    n = 1
    for _ in range(3):  # whichever proxy thread takes it: the file is there again
        n += 1
        c = env.tcp_client(it.SRV4, port, [bad, 0.3])
        s = it.server_conn(srv, n)
        check(b"ILLEGAL" not in s["data"] and c["end"] == "reset",
              "after the restart the file is not applied: %r %r", c["end"], s["data"])
    ok = http(b"POST", b"/", b"fine")
    c = env.tcp_client(it.SRV4, port, [ok, 0.3])
    it.assert_passed(c, it.server_conn(srv, n + 1), ok)

# ---- script test over a service's capture ----

@test
def script_test_on_service_capture(env):
    """`script test FILE --service SVC` runs the file over what the service captured: real
    connections, through the same capture request as `capture --pcap`."""
    _, port = env.service("stcap", "tcp")             # no script, no filter: both pass
    srv = env.tcp_server(port, reply=b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
    ok = http(b"POST", b"/note", b"hello")
    bad = http(b"POST", b"/note", b"an ILLEGAL body")
    c = env.tcp_client(it.SRV4, port, [ok, 0.3])
    it.assert_passed(c, it.server_conn(srv, 1), ok)
    c = env.tcp_client(it.SRV4, port, [bad[:-12], 0.1, bad[-12:], 0.3])
    it.assert_passed(c, it.server_conn(srv, 2), bad)
    res = it.wait_until(lambda: (lambda r: r if len(r) >= 2 else None)(
        env.ctl("script", "test", FIREGEX_EXAMPLE, "--service", "stcap")), timeout=5)
    check(res, "script test --service saw fewer than 2 connections")
    got = sorted((c["verdict"], c["function"], c["c2s_bytes"]) for c in res)
    check(got == [("accept", "", len(ok)), ("reject", "filter_with_args", len(bad))],
          "verdicts over the capture %r", res)
    check(all(c["server"] == it.SRV4 and c["dport"] == port for c in res), "addresses %r", res)
    r = env.ctl_raw("script", "test", FIREGEX_EXAMPLE, "--service", "stcap", json_out=False)
    lines = r.stdout.splitlines()
    check(r.returncode == 0 and len(lines) == 3 and
          sum("reject" in ln and "filter_with_args" in ln for ln in lines) == 1,
          "human output %r %s", r.stdout, r.stderr)
    # a file that would not have dropped anything says so; an unknown service is an error
    r = env.ctl_raw("script", "test", write("from fgex import *\n@pyfilter\n"
                                            "def f(p: RawPacket):\n    pass\n"),
                    "--service", "stcap")
    check(r.returncode == 0 and {c["verdict"] for c in json.loads(r.stdout)} == {"accept"},
          "a pass-all file %r %s", r.stdout, r.stderr)
    r = env.ctl_raw("script", "test", FIREGEX_EXAMPLE, "--service", "nosuch")
    check(r.returncode == 3, "unknown service: %d %s", r.returncode, r.stderr)
    r = env.ctl_raw("script", "test", FIREGEX_EXAMPLE, "--service", "stcap", "--pcap", "x")
    check(r.returncode == 2, "--service with --pcap: %d %s", r.returncode, r.stderr)

@test
def script_timeout_and_exception_are_events(env):
    _, port = px_service(env, "pxev", extra=("--fail-open",))
    env.ctl("script", "set", "pxev", write(FAULTY), "--deadline", "200")
    srv = env.tcp_server(port)
    c = env.tcp_client(it.SRV4, port, [http(b"GET", b"/boom"), 0.3])
    it.assert_passed(c, it.server_conn(srv, 1), http(b"GET", b"/boom"))
    c = env.tcp_client(it.SRV4, port, [http(b"GET", b"/loop"), 1.5], timeout=10.0)
    it.assert_passed(c, it.server_conn(srv, 2, timeout=10), http(b"GET", b"/loop"))

    def both():
        evs = env.ctl("events", "pxev")
        kinds = {(e["script_kind"], e["script_function"]) for e in evs
                 if e["action"] == "script"}
        return evs if {("exception", "faulty"), ("timeout", "faulty")} <= kinds else None
    evs = it.wait_until(both, timeout=8)
    check(evs, "no script events: %r", env.ctl("events", "pxev"))
    check(all(e["filter_id"] == 0 and e["service"] == "pxev" for e in evs), "events %r", evs)
    r = env.ctl_raw("events", "pxev", json_out=False)
    check("script timeout faulty" in r.stdout and "script exception faulty" in r.stdout,
          "events table:\n%s", r.stdout)
    # the log has them as well
    ev = env.ctl("script", "log", "pxev")
    check(any(e["kind"] == "timeout" and e["function"] == "faulty" for e in ev), "log %r", ev)
    # kept in the store: still there after a controld restart
    env.stop_controld()
    env.start_controld()
    evs = env.ctl("events", "pxev")
    check({e["script_kind"] for e in evs} >= {"timeout", "exception"},
          "script events after a restart %r", evs)

COUNTED = FAULTY + """
@pyfilter
def denier(req: HttpRequestHeader):
    if req.url == "/deny":
        return REJECT
"""


def sw_entry(env):
    ws = [w for w in env.ctl("worker", "list") if w["kind"] == "script"]
    check(len(ws) == 1, "worker list has %d script workers", len(ws))
    return ws[0]


@test
def script_counters_survive_restart_and_worker_list_shows_scriptworker(env):
    _, port = px_service(env, "pxkeep")
    env.ctl("script", "set", "pxkeep", write(COUNTED), "--deadline", "200")
    srv = env.tcp_server(port)
    n = 0
    for path in (b"/deny", b"/boom", b"/loop", b"/deny"):
        n += 1
        c = env.tcp_client(it.SRV4, port, [http(b"GET", path), 1.0], timeout=10.0)
        it.assert_blocked(c, it.server_conn(srv, n, timeout=10), forbidden=path)
    want = {"faulty": (0, 1, 1), "denier": (2, 0, 0)}

    def counts():
        d = script_counters(env, "pxkeep")
        return {k: (f["blocked"], f["errors"], f["timeouts"]) for k, f in d.items()}
    check(it.wait_until(lambda: counts() == want, timeout=8), "counters %r", counts())
    # the scriptworker in worker list, as the other workers
    w = sw_entry(env)
    check(w["state"] == "running" and w["pid"] == scriptworker_pid(env) and
          w["restarts"] == 0, "script worker entry %r (pid %r)", w, scriptworker_pid(env))
    os.kill(w["pid"], 9)
    w2 = it.wait_until(lambda: (lambda e: e if e["pid"] not in (0, w["pid"]) else None)(
        sw_entry(env)), timeout=10)
    check(w2 and w2["state"] == "running" and w2["restarts"] == 1 and
          w2["pid"] == scriptworker_pid(env), "after a kill %r", w2)
    r = env.ctl_raw("worker", "list", json_out=False)
    check(any(ln.split()[:3] == ["script", str(w2["pid"]), "running"]
              for ln in r.stdout.splitlines()), "worker list table:\n%s", r.stdout)
    # a controld restart keeps the counters (stored), and they go on counting
    env.stop_controld()
    env.start_controld()
    check(counts() == want, "after a restart %r", counts())
    time.sleep(1.0)  # the proxy threads dial the new scriptworker
    n += 1
    c = env.tcp_client(it.SRV4, port, [http(b"GET", b"/deny"), 1.0], timeout=10.0)
    it.assert_blocked(c, it.server_conn(srv, n, timeout=10), forbidden=b"/deny")
    check(it.wait_until(lambda: counts()["denier"][0] == 3, timeout=8),
          "counting on after the restart %r", counts())
    env.stop_controld()
    env.start_controld()
    check(counts()["denier"] == (3, 0, 0), "after a second restart %r", counts())


if __name__ == "__main__":
    sys.exit(it.run_module("scripts"))
