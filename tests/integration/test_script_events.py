#!/usr/bin/python3
"""Integration: a connection a script rejects or drops is an event (issue 16), as a regex
block is: in `fgexctl events` (service, addresses, direction, the start of the bytes the
script judged, the function where a filter's id would be), counted in the service's blocked
total and in `events --top src`, kept across a controld restart, and shown with its capture by
`events show SEQ`, and blocked in the capture as a regex block is (the connection and the
judged bytes' segment, in `events show` and in `capture --pcap --blocked`). Real connections through the proxy layer and the NFQUEUE layer between
namespaces."""
import base64
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fgxit as it  # noqa: E402
from fgxit import CLI4, CLI6, SRV4, SRV6, check, test  # noqa: E402

JUDGE = """
from firegex.nfproxy import pyfilter, REJECT, DROP
from firegex.nfproxy.models import HttpRequestHeader, TCPOutputStream

@pyfilter
def export_without_checker(req: HttpRequestHeader):
    if req.url.startswith("/api/export") and req.get_header("x-checker") != "sla":
        return REJECT

@pyfilter
def probe(req: HttpRequestHeader):
    if req.get_header("x-probe") == "1":
        return DROP

@pyfilter
def leaky_reply(out: TCPOutputStream):
    if b"FLAG{" in out.data:
        return REJECT
"""


def write(text):
    d = tempfile.mkdtemp(prefix="fgx-script-ev-")
    p = os.path.join(d, "judge.py")
    with open(p, "w") as f:
        f.write(text)
    return p


def req(path, headers=b""):
    return b"GET %s HTTP/1.1\r\nHost: svc\r\n%s\r\n" % (path, headers)


def script_events(env, svc):
    return [e for e in env.ctl("events", svc) if e.get("script_kind") in ("reject", "drop")]


def wait_script_event(env, svc, sport):
    got = it.wait_until(lambda: [e for e in script_events(env, svc) if e["sport"] == sport or
                                 e["dport"] == sport], timeout=5)
    check(got, "no script event for port %d: %r", sport, env.ctl("events", svc))
    check(len(got) == 1, "one block gave %d events: %r", len(got), got)
    return got[0]


def excerpt(e):
    return bytes.fromhex(e["excerpt_hex"])


BLOCK_MAC = "02:42:4c:4f:43:4b"  # the pcap's mark of a blocked payload (test_capture.py)


def cap_bytes(cap, d):
    if d in cap:
        return cap[d].encode()
    return base64.b64decode(cap[d + "_b64"])


def assert_capture_blocked(env, svc, e, judged, sport, reset, later=b""):
    """The script's block shows in the capture as a regex block does: `events show` has the
    connection blocked and exactly the judged bytes' segment(s) blocked, and `capture --pcap
    --blocked` lists the connection with that payload marked blocked, followed by the resets
    of a REJECT, none for a DROP (it tells nobody)."""
    cap = env.ctl("events", "show", e["seq"])["capture"]
    check(cap is not None and cap["blocked"] is True, "the capture is not blocked: %r", cap)
    check(cap["silent"] is (not reset), "a %s's capture silent %r", e["script_kind"],
          cap["silent"])
    d = e["dir"]
    data = cap_bytes(cap, d)
    segs = [s for s in cap["segments"] if s["dir"] == d and s["len"] > 0]
    got = b"".join(data[s["offset"]:s["offset"] + s["len"]] for s in segs if s["blocked"])
    # later: what the client sent after a DROP, blocked too once the proxy read it; whether it
    # was read before the event's capture was taken is the scheduler's call
    check(got == judged or (later and got == judged + later),
          "the blocked segments hold %r, not the judged %r: %r", got, judged, cap["segments"])
    passed = [data[s["offset"]:s["offset"] + s["len"]] for s in segs if not s["blocked"]]
    check(all(judged not in p for p in passed), "the judged bytes also passed: %r",
          cap["segments"])
    # filter test over the capture: the connection already blocked, by no filter (a script)
    hits = [h for h in env.ctl("filter", "test", svc, "x", "--dir", "c2s")["hits"]
            if h["sport"] == sport]
    check(hits and all(h["blocked"] and h["filter_id"] == 0 and h["event_seq"] == e["seq"]
                       for h in hits), "filter test's hits of the connection %r", hits)
    r = env.ctl_raw("filter", "test", svc, "x", "--dir", "c2s", json_out=False)
    check("script" in r.stdout, "filter test's table does not name the script:\n%s", r.stdout)

    from scapy.all import TCP, Ether, rdpcap  # noqa: PLC0415 - scapy is slow to import
    fd, path = tempfile.mkstemp(suffix=".pcap")
    os.close(fd)
    doc = env.ctl("capture", svc, "--pcap", path, "--blocked")
    check(doc["blocked"] >= 1 and doc["connections"] == doc["blocked"],
          "capture --blocked summary %r", doc)
    to_srv = d == "c2s"
    pkts = [p for p in rdpcap(path) if TCP in p and
            (p[TCP].sport if to_srv else p[TCP].dport) == sport or
            TCP in p and (p[TCP].dport if to_srv else p[TCP].sport) == sport]
    os.unlink(path)
    pl = [(bytes(p[TCP].payload), p[Ether].src == BLOCK_MAC) for p in pkts
          if bytes(p[TCP].payload) and (p[TCP].sport if to_srv else p[TCP].dport) == sport]
    rst = [p for p in pkts if p[TCP].flags & 0x04]
    check(len(rst) == (2 if reset else 0), "%d resets in the pcap of a %s: %r", len(rst),
          e["script_kind"], [p.summary() for p in pkts])
    check(pl, "capture --blocked does not list the connection from %d", sport)
    blk_pl = b"".join(b for b, blk in pl if blk)
    check((blk_pl == judged or (later and blk_pl == judged + later)) and
          all(judged not in b for b, blk in pl if not blk),
          "the pcap's blocked payload of the connection: %r", pl)


@test
def script_block_is_an_event(env):
    sid, port = env.service("sev", "tcp", extra=("--layer", "proxy"))
    env.ctl("script", "set", "sev", write(JUDGE))
    srv = env.tcp_server(port, reply=b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
    # an honest request passes and is no event
    # (the proxy's onward connection has a port of its own: server records by their order)
    ok = req(b"/api/export", b"x-checker: sla\r\n")
    c = env.tcp_client(SRV4, port, [ok, 0.3])
    it.assert_passed(c, it.server_conn(srv, 1), ok,
                     b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
    check(script_events(env, "sev") == [], "an accepted connection is an event")

    bad = req(b"/api/export?all=1")
    c, sport_rej = env.tcp_conn(SRV4, port, [bad, 0.3])
    it.assert_blocked(c, it.server_conn(srv, 2), forbidden=b"/api/export")
    e = wait_script_event(env, "sev", sport_rej)
    check(e["action"] == "block" and e["script_kind"] == "reject" and
          e["script_function"] == "export_without_checker" and e["filter_id"] == 0,
          "the reject's event %r", e)
    check(e["service"] == "sev" and e["service_id"] == sid and e["dir"] == "c2s" and
          e["proto"] == "tcp", "service/dir %r", e)
    check(e["src"] == CLI4 and e["dst"] == SRV4 and e["dport"] == port,
          "flow %s:%s -> %s:%s", e["src"], e["sport"], e["dst"], e["dport"])
    check(excerpt(e) == bad, "the excerpt is not the judged request: %r", excerpt(e))

    # DROP over IPv6: a black hole, and an event of kind drop
    probe = req(b"/", b"x-probe: 1\r\n")
    c, sport_drop = env.tcp_conn(SRV6, port, [probe, 0.5, b"after", 0.3])
    check(c["connected"] and not c.get("received"), "a dropped connection got bytes: %r", c)
    e6 = wait_script_event(env, "sev", sport_drop)
    check(e6["script_kind"] == "drop" and e6["script_function"] == "probe" and
          e6["src"] == CLI6 and e6["dst"] == SRV6 and e6["dir"] == "c2s",
          "the drop's event %r", e6)
    check(excerpt(e6) == probe, "drop excerpt %r", excerpt(e6))
    # in the capture, blocked as a regex block is: the connection and the judged read
    # (the proxy reads on after a DROP: what it read goes nowhere, blocked too)
    assert_capture_blocked(env, "sev", e, bad, sport_rej, reset=True)
    assert_capture_blocked(env, "sev", e6, probe, sport_drop, reset=False, later=b"after")

    # the server's reply judged: an s2c event, its attacker (src) the client
    _, port2 = env.service("sev2", "tcp", extra=("--layer", "proxy"))
    env.tcp_server(port2, reply=b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nFLAG{abc}")
    env.ctl("script", "set", "sev2", write(JUDGE))
    c, sport_s2c = env.tcp_conn(SRV4, port2, [req(b"/"), 0.5])
    check(b"FLAG{" not in c.get("received", b""), "the leaking reply reached the client: %r", c)
    es = wait_script_event(env, "sev2", sport_s2c)
    check(es["dir"] == "s2c" and es["src"] == CLI4 and es["sport"] == sport_s2c and
          es["dst"] == SRV4 and es["dport"] == port2 and es["script_function"] == "leaky_reply",
          "the reply's event %r", es)
    check(b"FLAG{abc}" in excerpt(es), "s2c excerpt %r", excerpt(es))

    # the human table names the function where a filter's id would be
    r = env.ctl_raw("events", "sev", json_out=False)
    check("script reject export_without_checker" in r.stdout and "script drop probe" in r.stdout,
          "events table:\n%s", r.stdout)

    # counted: the service's blocked total, the function's counter, --top src
    def stats():
        s = env.ctl("stats", "sev")
        return s[0] if s and s[0]["blocked"] >= 2 else None
    st = it.wait_until(stats, timeout=5)
    check(st and st["blocked"] == 2, "the service's blocked total %r", st)
    svc = [s for s in env.ctl("service", "list") if s["name"] == "sev"][0]
    check(svc["blocked"] == 2, "service list blocked %r", svc)
    top = env.ctl("events", "sev", "--top", "src")
    rows = {(r["src"], r.get("script_function")): r for r in top["rows"]}
    check((CLI4, "export_without_checker") in rows and (CLI6, "probe") in rows,
          "--top src rows %r", top)
    check(rows[(CLI4, "export_without_checker")]["blocks"] == 1 and
          rows[(CLI4, "export_without_checker")]["filter_id"] == 0, "--top row %r", rows)
    r = env.ctl_raw("events", "sev", "--top", "src", json_out=False)
    check("script export_without_checker" in r.stdout, "--top table:\n%s", r.stdout)

    # events show: the event with its connection's capture
    show = env.ctl("events", "show", e["seq"])
    check(show["event"]["seq"] == e["seq"] and show["event"]["script_kind"] == "reject",
          "events show event %r", show["event"])
    check(show["capture"] is not None and show["capture"].get("c2s") == bad.decode(),
          "events show capture %r", show.get("capture"))

    # kept in the store: the same after a controld restart
    env.stop_controld()
    env.start_controld()
    after = {x["seq"]: x for x in script_events(env, "sev")}
    check(e["seq"] in after and after[e["seq"]]["script_function"] == "export_without_checker"
          and excerpt(after[e["seq"]]) == bad and e6["seq"] in after,
          "script events after a restart %r", after)
    show = env.ctl("events", "show", e["seq"])
    check(show["capture"] is not None and show["capture"].get("c2s") == bad.decode(),
          "events show capture after a restart %r", show.get("capture"))


@test
def nfq_script_block_is_an_event(env):
    """The same on the NFQUEUE layer: the held packets' verdict is the script's, and its block
    is an event from nfqworker's regex-block path (addresses, direction, the start of the bytes
    the judged segment carried, the function), with the flow's capture."""
    sid, port = env.service("nqev", "tcp")
    check(env.service_doc("nqev")["layer"] == "nfqueue", "nqev is not on NFQUEUE")
    env.ctl("script", "set", "nqev", write(JUDGE))
    srv = env.tcp_server(port, reply=b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
    ok = req(b"/api/export", b"x-checker: sla\r\n")
    c, sport_ok = env.tcp_conn(SRV4, port, [ok, 0.3])
    it.assert_passed(c, it.server_conn_of(srv, sport_ok), ok,
                     b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
    check(script_events(env, "nqev") == [], "an accepted connection is an event")

    # REJECT over IPv4: both ends reset, the event c2s
    bad = req(b"/api/export?all=1")
    c, sport_rej = env.tcp_conn(SRV4, port, [bad, 0.3])
    it.assert_blocked(c, it.server_conn_of(srv, sport_rej), forbidden=b"/api/export")
    e = wait_script_event(env, "nqev", sport_rej)
    check(e["action"] == "block" and e["script_kind"] == "reject" and
          e["script_function"] == "export_without_checker" and e["filter_id"] == 0,
          "the reject's event %r", e)
    check(e["service"] == "nqev" and e["service_id"] == sid and e["dir"] == "c2s" and
          e["proto"] == "tcp", "service/dir %r", e)
    check(e["src"] == CLI4 and e["sport"] == sport_rej and e["dst"] == SRV4 and
          e["dport"] == port, "flow %s:%s -> %s:%s", e["src"], e["sport"], e["dst"], e["dport"])
    check(excerpt(e) == bad, "the excerpt is not the judged request: %r", excerpt(e))

    # DROP over IPv6: a black hole (nobody reset), an event of kind drop
    probe = req(b"/", b"x-probe: 1\r\n")
    c, sport_drop = env.tcp_conn(SRV6, port, [probe, 0.5], timeout=2.0)
    check(c["connected"] and not c.get("received") and c.get("end") != "reset",
          "a dropped connection got bytes or a reset: %r", c)
    e6 = wait_script_event(env, "nqev", sport_drop)
    check(e6["script_kind"] == "drop" and e6["script_function"] == "probe" and
          e6["src"] == CLI6 and e6["dst"] == SRV6 and e6["dport"] == port and
          e6["dir"] == "c2s", "the drop's event %r", e6)
    check(excerpt(e6) == probe, "drop excerpt %r", excerpt(e6))
    # in the capture, blocked as a regex block is: the flow and the judged segment
    assert_capture_blocked(env, "nqev", e, bad, sport_rej, reset=True)
    assert_capture_blocked(env, "nqev", e6, probe, sport_drop, reset=False)

    # the server's reply judged, over both families: s2c events, the client their src
    _, port2 = env.service("nqev2", "tcp")
    env.tcp_server(port2, reply=b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nFLAG{abc}")
    env.ctl("script", "set", "nqev2", write(JUDGE))
    for cli, srvaddr in ((CLI6, SRV6), (CLI4, SRV4)):
        c, sport_s2c = env.tcp_conn(srvaddr, port2, [req(b"/"), 0.5])
        check(b"FLAG{" not in c.get("received", b""), "the leaking reply reached the client: %r",
              c)
        es = wait_script_event(env, "nqev2", sport_s2c)
        check(es["dir"] == "s2c" and es["src"] == cli and es["sport"] == sport_s2c and
              es["dst"] == srvaddr and es["dport"] == port2 and
              es["script_kind"] == "reject" and es["script_function"] == "leaky_reply",
              "the reply's event %r", es)
        check(excerpt(es).startswith(b"HTTP/1.1 200 OK") and b"FLAG{abc}" in excerpt(es),
              "s2c excerpt %r", excerpt(es))

    # DROP of the server's reply (IPv6): nobody told, the event s2c
    _, port3 = env.service("nqev3", "tcp")
    env.tcp_server(port3, reply=b"SECRET reply")
    env.ctl("script", "set", "nqev3", write("""
from firegex.nfproxy import pyfilter, DROP
from firegex.nfproxy.models import TCPOutputStream

@pyfilter
def hush(out: TCPOutputStream):
    if b"SECRET" in out.data:
        return DROP
"""))
    c, sport3 = env.tcp_conn(SRV6, port3, [b"hello", 0.5], timeout=2.0)
    check(c["connected"] and b"SECRET" not in c.get("received", b"") and
          c.get("end") != "reset", "the dropped reply reached the client or reset it: %r", c)
    ed = wait_script_event(env, "nqev3", sport3)
    check(ed["dir"] == "s2c" and ed["script_kind"] == "drop" and ed["script_function"] == "hush"
          and ed["src"] == CLI6 and ed["sport"] == sport3 and ed["dst"] == SRV6 and
          ed["dport"] == port3 and excerpt(ed) == b"SECRET reply", "the s2c drop's event %r", ed)

    r = env.ctl_raw("events", "nqev", json_out=False)
    check("script reject export_without_checker" in r.stdout and "script drop probe" in r.stdout,
          "events table:\n%s", r.stdout)

    # counted: the service's blocked total, --top src
    st = it.wait_until(lambda: (lambda s: s[0] if s and s[0]["blocked"] >= 2 else None)(
        env.ctl("stats", "nqev")), timeout=5)
    check(st and st["blocked"] == 2, "the service's blocked total %r", env.ctl("stats", "nqev"))
    st2 = env.ctl("stats", "nqev2")[0]
    check(st2["blocked"] == 2, "the s2c service's blocked total %r", st2)
    top = env.ctl("events", "nqev", "--top", "src")
    rows = {(r["src"], r.get("script_function")): r for r in top["rows"]}
    check(set(rows) == {(CLI4, "export_without_checker"), (CLI6, "probe")},
          "--top src rows %r", top)
    top2 = env.ctl("events", "nqev2", "--top", "src")
    rows2 = {(r["src"], r.get("script_function")): r for r in top2["rows"]}
    check(set(rows2) == {(CLI4, "leaky_reply"), (CLI6, "leaky_reply")},
          "--top src rows of the s2c service %r", top2)
    check(rows[(CLI4, "export_without_checker")]["blocks"] == 1 and
          rows[(CLI4, "export_without_checker")]["filter_id"] == 0 and
          rows[(CLI4, "export_without_checker")]["service"] == "nqev", "--top row %r", rows)

    # events show: the event with its connection's capture
    show = env.ctl("events", "show", e["seq"])
    check(show["event"]["seq"] == e["seq"] and show["event"]["script_kind"] == "reject",
          "events show event %r", show["event"])
    check(show["capture"] is not None and show["capture"].get("c2s") == bad.decode(),
          "events show capture %r", show.get("capture"))
    show6 = env.ctl("events", "show", e6["seq"])
    check(show6["capture"] is not None and show6["capture"].get("c2s") == probe.decode(),
          "events show capture of the drop %r", show6.get("capture"))

    # kept in the store: the same after a controld restart
    env.stop_controld()
    env.start_controld()
    after = {x["seq"]: x for x in script_events(env, "nqev")}
    check(e["seq"] in after and after[e["seq"]]["script_function"] == "export_without_checker"
          and excerpt(after[e["seq"]]) == bad and e6["seq"] in after and
          after[e6["seq"]]["script_kind"] == "drop", "script events after a restart %r", after)
    show = env.ctl("events", "show", e["seq"])
    check(show["capture"] is not None and show["capture"].get("c2s") == bad.decode(),
          "events show capture after a restart %r", show.get("capture"))


@test
def failures_stay_apart_from_blocks(env):
    """A call that raised is an event of its own (action script), not a block: not in --top,
    not in the blocked total; with fail-open its connection passes."""
    _, port = env.service("sevx", "tcp", extra=("--layer", "proxy", "--fail-open"))
    env.ctl("script", "set", "sevx", write("""
from firegex.nfproxy import pyfilter
from firegex.nfproxy.models import HttpRequestHeader

@pyfilter
def broken(req: HttpRequestHeader):
    raise ValueError("no")
"""))
    srv = env.tcp_server(port)
    c = env.tcp_client(SRV4, port, [req(b"/"), 0.3])
    it.assert_passed(c, it.server_conn(srv, 1), req(b"/"))
    evs = it.wait_until(lambda: [e for e in env.ctl("events", "sevx")
                                 if e.get("script_kind") == "exception"], timeout=5)
    check(evs and evs[0]["action"] == "script", "the exception's event %r", evs)
    check(env.ctl("events", "sevx", "--top", "src")["rows"] == [], "a failure in --top")
    st = env.ctl("stats", "sevx")[0]
    check(st["blocked"] == 0, "a failure counted as a block %r", st)



@test
def nfq_fail_closed_failure_is_no_block_event(env):
    """On NFQUEUE, a call that raised on a fail-closed service resets the flow, yet it is the
    failure's event (action script), not a block: no reject event, not in --top, not in the
    blocked total."""
    _, port = env.service("nqevx", "tcp")
    env.ctl("script", "set", "nqevx", write("""
from firegex.nfproxy import pyfilter
from firegex.nfproxy.models import HttpRequestHeader

@pyfilter
def broken(req: HttpRequestHeader):
    raise ValueError("no")
"""))
    srv = env.tcp_server(port)
    c, sport = env.tcp_conn(SRV4, port, [req(b"/"), 0.3])
    it.assert_blocked(c, it.server_conn_of(srv, sport), forbidden=b"GET /")
    evs = it.wait_until(lambda: [e for e in env.ctl("events", "nqevx")
                                 if e.get("script_kind") == "exception"], timeout=5)
    check(evs and evs[0]["action"] == "script", "the exception's event %r", evs)
    check(script_events(env, "nqevx") == [], "a failure made a block event: %r",
          env.ctl("events", "nqevx"))
    check(env.ctl("events", "nqevx", "--top", "src")["rows"] == [], "a failure in --top")
    st = env.ctl("stats", "nqevx")[0]
    check(st["blocked"] == 0, "a failure counted as a block %r", st)
    # nor a block in the capture: the flow is there, not marked blocked
    fd, path = tempfile.mkstemp(suffix=".pcap")
    os.close(fd)
    doc = env.ctl("capture", "nqevx", "--pcap", path)
    check(doc["connections"] >= 1 and doc["blocked"] == 0, "the failure's capture %r", doc)
    doc = env.ctl("capture", "nqevx", "--pcap", path, "--blocked")
    os.unlink(path)
    check(doc["connections"] == 0, "a failure's capture listed as blocked %r", doc)


if __name__ == "__main__":
    sys.exit(it.run_module("script_events"))
