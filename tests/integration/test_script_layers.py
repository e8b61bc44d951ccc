#!/usr/bin/python3
"""Integration: a scripted service moved between the NFQUEUE and proxy layers (issue 24, item
1) keeps its script working after every switch, whatever the sequence and with connections
open across it: honest requests pass, the script's REJECT and DROP still block, each
connection's globals start afresh. A script call that fails for a whole service (its file not
loaded where the call went) is never silent: a `script log` entry, a health note and `script
list` say so. And after a switch, `filter test` and `script test --service` read the captures
made on both layers (item 9)."""
import os
import socket
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fgxit as it  # noqa: E402
from fgxit import check, test  # noqa: E402
from scriptfiles import http, script_counters, write  # noqa: E402

# REJECT on an evil url, DROP on a probe, and per-connection state: the third request of a
# connection is rejected.
SCRIPT = """
from firegex.nfproxy import pyfilter, REJECT, DROP
from firegex.nfproxy.models import HttpRequestHeader
requests = 0

@pyfilter
def no_evil(req: HttpRequestHeader):
    if "evil" in req.url:
        return REJECT

@pyfilter
def drop_probe(req: HttpRequestHeader):
    if req.get_header("x-probe") == "1":
        return DROP

@pyfilter
def third_request(req: HttpRequestHeader):
    global requests
    requests += 1
    if requests >= 3:
        return REJECT
"""

HDR = struct.Struct("<BBHIQII")  # fgx/swproto.h's frame header
REPLY = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
_n = [0]


def req(path, headers=()):
    """A request of its own (a number in its path): the server's connection is found by its
    first bytes, as the proxy layer does not keep the client's port."""
    _n[0] += 1
    return http(b"GET", b"%s?n=%d" % (path, _n[0]), headers=headers)


def scripted(env, name, layer="nfqueue"):
    sid, port = env.service(name, "tcp", extra=("--layer", layer))
    env.ctl("script", "set", name, write(SCRIPT))
    srv = env.tcp_server(port, reply=REPLY, idle=4.0)
    return sid, port, srv


def switch(env, name, layer):
    r = env.ctl_raw("service", "set", name, "--layer", layer, json_out=False)
    check(r.returncode == 0, "switch to %s: %d %s", layer, r.returncode, r.stderr)
    check(env.service_doc(name)["layer"] == layer, "%s is not on %s", name, layer)


def never_received(srv, what):
    return not any(what in it.d64(e["data"]) for e in srv.all("data"))


def judged(env, port, srv, layer, full=True):
    """The script judges port's connections: an honest request passes with its reply, an evil
    one resets the client and never reaches the server, and (full) a probe is dropped without
    a reset and the third request of a connection is rejected while the first two pass."""
    ok, evil = req(b"/fine"), req(b"/evil1337")
    hs = [env.tcp_client(it.SRV4, port, [ok, 0.4], wait=False),
          env.tcp_client(it.SRV4, port, [evil, 0.4], wait=False)]
    if full:
        p1, probe = req(b"/p"), req(b"/", headers=((b"X-Probe", b"1"),))
        t1, t2, t3 = req(b"/t"), req(b"/t"), req(b"/t")
        hs.append(env.tcp_client(it.SRV4, port, [p1, 0.2, probe, 0.3, b"more", 0.3],
                                 timeout=2.0, wait=False))
        hs.append(env.tcp_client(it.SRV4, port, [t1, 0.2, t2, 0.2, t3, 0.4], wait=False))
    res = [it.client_result(h, 15) for h in hs]
    c, s = res[0], it.server_conn_starting(srv, ok, timeout=10)
    check(c["end"] == "eof" and s["data"] == ok and c["received"] == REPLY,
          "on %s an honest request did not pass: client %s %r, server %s %r", layer, c["end"],
          c.get("received"), s["end"], s["data"])
    check(res[1]["end"] == "reset" and never_received(srv, evil.split(b"\r\n")[0]),
          "on %s the script's REJECT did not block: client %s", layer, res[1]["end"])
    if full:
        cp, sp = res[2], it.server_conn_starting(srv, p1, timeout=10)
        check(sp["data"] == p1 and cp["end"] != "reset" and sp["end"] != "reset",
              "on %s the script's DROP did not black-hole: client %s, server %s %r", layer,
              cp["end"], sp["end"], sp["data"])
        ct, st = res[3], it.server_conn_starting(srv, t1, timeout=10)
        check(st["data"] == t1 + t2 and ct["end"] == "reset",
              "on %s the connection's globals: server got %r, client %s", layer, st["data"],
              ct["end"])


def no_silent_error(env, name):
    """Nothing said the script failed for the whole service during the test."""
    text = env.log_tail(2000)
    check("connection state lost" not in text and "script-error" not in text,
          "a script call failed for %s:\n%s", name, text[-1500:])
    doc = env.ctl("script", "list", name)
    check(not doc.get("error"), "script list shows an error: %r", doc.get("error"))


def sequence(env, name, first, layers, open_across=False):
    _, port, srv = scripted(env, name, first)
    judged(env, port, srv, first, full=False)
    for i, layer in enumerate(layers):
        held = None
        if open_across:
            # a connection open across the switch: an honest request before it, an evil one
            # after
            hold = req(b"/held")
            held = env.tcp_client(it.SRV4, port, [hold, 1.2, req(b"/evil1337"), 0.4],
                                  timeout=4.0, wait=False)
            time.sleep(0.5)
        switch(env, name, layer)
        judged(env, port, srv, layer, full=(i < 2 or i == len(layers) - 1))
        if held is not None:
            c = it.client_result(held, 15)
            s = it.server_conn_starting(srv, hold, timeout=10)
            check(b"evil" not in s["data"], "the evil request on a connection open across "
                  "the switch to %s reached the server: %r (client %s)", layer, s["data"],
                  c["end"])
    no_silent_error(env, name)


@test
def nfq_to_proxy_keeps_script(env):
    sequence(env, "slnp", "nfqueue", ["proxy"])


@test
def proxy_to_nfq_keeps_script(env):
    sequence(env, "slpn", "proxy", ["nfqueue"])


@test
def nfq_proxy_nfq_repeated_keeps_script(env):
    sequence(env, "slrep", "nfqueue", ["proxy", "nfqueue", "proxy", "nfqueue"])


@test
def switches_with_connections_open_keep_script(env):
    sequence(env, "slopen", "proxy", ["nfqueue", "proxy", "nfqueue"], open_across=True)


# Rejects a request whose path has "mark": script test --service's verdicts over a capture.
MARKS = """
from firegex.nfproxy import pyfilter, REJECT
from firegex.nfproxy.models import HttpRequestHeader

@pyfilter
def marked(req: HttpRequestHeader):
    if "/mark" in req.url:
        return REJECT
"""


@test
def filter_and_script_test_read_both_layers_captures(env):
    """After a switch, and after a switch back, `filter test` and `script test --service`
    see the connections captured on both layers (the old layer's worker keeps its ring)."""
    _, port = env.service("slcap", "tcp")
    srv = env.tcp_server(port, reply=REPLY)
    marks = []

    def send(n):
        for _ in range(n):
            r = req(b"/mark")
            marks.append(r.split(b" ")[1].decode())
            it.assert_passed(env.tcp_client(it.SRV4, port, [r, 0.3]),
                             it.server_conn_starting(srv, r), r, REPLY)

    def seen(what):
        ft = env.ctl("filter", "test", "slcap", "mark\\?n=[0-9]+", "--dir", "c2s")
        st = env.ctl("script", "test", write(MARKS), "--service", "slcap")
        rejected = [c for c in st if c["verdict"] == "reject" and c["function"] == "marked"]
        check(ft["would_block"] == len(marks) and len(rejected) == len(marks),
              "%s: filter test saw %d, script test %d of the %d connections sent",
              what, ft["would_block"], len(rejected), len(marks))

    send(2)
    seen("on nfqueue")
    switch(env, "slcap", "proxy")
    send(1)
    seen("after the switch to proxy")
    switch(env, "slcap", "nfqueue")
    send(1)
    seen("after the switch back to nfqueue")


BOOM = SCRIPT + """
@pyfilter
def boom(req: HttpRequestHeader):
    if "boom" in req.url:
        raise KeyError("no")
"""


@test
def script_events_named_by_function(env):
    """A script's block is named by its function in the events table, `events show` and
    --top; a call's failure (an exception) carries its connection's addresses, on both
    layers."""
    for name, layer in (("slev", "proxy"), ("slevn", "nfqueue")):
        _, port = env.service(name, "tcp", extra=("--layer", layer, "--fail-open"))
        env.ctl("script", "set", name, write(BOOM))
        srv = env.tcp_server(port, reply=REPLY)
        evil = req(b"/evil1337")
        c = env.tcp_client(it.SRV4, port, [evil, 0.3])
        check(c["end"] == "reset", "the evil request passed: %r", c)
        boom = req(b"/boom")
        c, sport = env.tcp_conn(it.SRV4, port, [boom, 0.3])
        it.assert_passed(c, it.server_conn_starting(srv, boom), boom, REPLY)
        evs = it.wait_until(lambda: (lambda l: l if len(l) >= 2 else None)(
            [e for e in env.ctl("events", name) if e.get("script_kind")]), timeout=5)
        check(evs, "no script events: %r", env.ctl("events", name))
        blk = [e for e in evs if e["script_kind"] == "reject"][0]
        exc = [e for e in evs if e["script_kind"] == "exception"][0]
        check(blk["script_function"] == "no_evil" and blk["filter_id"] == 0 and
              exc["script_function"] == "boom", "JSON %r", evs)
        check(exc["src"] == it.CLI4 and exc["sport"] == sport and exc["dst"] == it.SRV4 and
              exc["dport"] == port, "on %s the exception's event has no connection: %r",
              layer, exc)
        table = env.ctl_raw("events", name, json_out=False).stdout
        check("script reject no_evil" in table and "script exception boom" in table and
              "%s:%d" % (it.CLI4, sport) in table and " :0 " not in table,
              "events table:\n%s", table)
        show = env.ctl_raw("events", "show", str(blk["seq"]), json_out=False).stdout
        check("script reject no_evil" in show and "filter:     0" not in show,
              "events show of the block:\n%s", show)
        show = env.ctl_raw("events", "show", str(exc["seq"]), json_out=False).stdout
        check("script exception boom" in show and
              "%s:%d -> %s:%d" % (it.CLI4, sport, it.SRV4, port) in show,
              "events show of the failure:\n%s", show)
        top = env.ctl_raw("events", name, "--top", "src", json_out=False).stdout
        check("script no_evil" in top and "boom" not in top, "events --top src:\n%s", top)
        # filter test names the function that already blocked a connection
        hits = it.wait_until(lambda: [x for x in env.ctl("filter", "test", name, "evil1337")[
            "hits"] if x["blocked"]], timeout=5)
        check(hits and hits[0].get("script_function") == "no_evil" and
              hits[0]["filter_id"] == 0, "filter test hits %r", hits)
        ft = env.ctl_raw("filter", "test", name, "evil1337", json_out=False).stdout
        check("script no_evil" in ft, "filter test's table:\n%s", ft)


def interpreters_lose(env, sid):
    """Fault injection: a link of our own to each script interpreter (as a data-path thread
    connects) sends a file for service sid that does not load, so the interpreters no longer
    have the file the workers' threads sent them. The sockets (kept open, as a thread's)."""
    bad = struct.pack("<H", 0) + b"def broken(:\n"
    socks = []
    for i in range(8):
        path = os.path.join(env.run_dir, "script.sock.%d" % i)
        if not os.path.exists(path):
            break
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        s.connect(path)
        s.send(HDR.pack(9, 0, 0, 0, 0x7777000 + i, 0, 0))  # HELLO
        s.send(HDR.pack(1, 0, 0, sid, 100, 1, len(bad)) + bad)  # SCRIPT
        s.settimeout(5)
        got = s.recv(65536)
        check(len(got) >= HDR.size, "interpreter %d did not answer the file", i)
        socks.append(s)
    check(socks, "no interpreter socket in %s", env.run_dir)
    return socks


@test
def lost_file_is_said_and_mended(env):
    """When the interpreters lose a service's file, the failure is said within a second (a
    `script log` entry, a health note, `script list`'s error) and the file the worker sent is
    loaded again: the very next connection is judged by the script."""
    for name, layer in (("slbrokep", "proxy"), ("slbroken", "nfqueue")):
        sid, port, srv = scripted(env, name, layer)
        judged(env, port, srv, layer, full=False)
        socks = interpreters_lose(env, sid)
        t0 = time.monotonic()
        ok = req(b"/first")
        c = env.tcp_client(it.SRV4, port, [ok, 0.3])
        it.assert_passed(c, it.server_conn_starting(srv, ok), ok, REPLY)
        log = it.wait_until(lambda: [e for e in env.ctl("script", "log", name)
                                     if e.get("kind") == "error"], timeout=3)
        check(log and "loaded again" in log[0]["text"], "no script log entry: %r",
              env.ctl("script", "log", name))
        err = it.wait_until(lambda: env.ctl("script", "list", name).get("error"), timeout=3)
        check(err and err["count"] >= 1 and "loaded again" in err["text"],
              "script list shows no error: %r", err)
        note = it.wait_until(lambda: "health: service %d script-error" % sid in
                             env.log_tail(3000), timeout=3)
        check(note, "no health note:\n%s", env.log_tail(20))
        check(time.monotonic() - t0 < 4, "said only after %.1fs", time.monotonic() - t0)
        judged(env, port, srv, layer, full=False)
        for s_ in socks:
            s_.close()
        time.sleep(1.5)  # every entry of the calls above reported
        # the error is history once the file is set again
        env.ctl("script", "set", name, write(SCRIPT))
        e2 = env.ctl("script", "list", name).get("error")
        check(not e2, "the error stayed: %r (was %r)", e2, err)


if __name__ == "__main__":
    sys.exit(it.run_module("test_script_layers"))
