#!/usr/bin/python3
"""Integration: log-only filters, filter labels, the offline `regex test` and `events --top src`
(issues 13 and 14), with real traffic between the module's namespaces.

A log filter never drops: its match is an event marked log and counted as `matched` (filter
list, stats, metrics), while the service got every byte; switching it to block with `filter set
--action block` blocks the very next connection; a log filter and a block filter on one service
both act, on the NFQUEUE and on the proxy layer. Labels travel through the filter list, events,
ruleset files and whole-configuration backups. `regex test` runs with no controld at all."""
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fgxit as it  # noqa: E402
from fgxit import CLI4, CLI6, EVIL, SRV4, SRV6, check, test  # noqa: E402

METRICS_ADDR = "127.0.0.1:9478"  # inside the module's own srv namespace
LABEL = "team12 sqli ✓"


def events(env, *args):
    doc = env.ctl("events", *args)
    check(isinstance(doc, list), "events --json is not an array: %r", doc)
    return doc


def wait_events(env, name, pred, n=1, timeout=4):
    got = it.wait_until(lambda: [e for e in events(env, name) if pred(e)], timeout=timeout)
    check(len(got) == n, "%d event(s) of %s, expected %d: %s", len(got), name, n,
          json.dumps(events(env, name))[:800])
    return got


def flt(env, svc, fid):
    for f in env.filters(svc):
        if f["id"] == fid:
            return f
    raise AssertionError("filter %d not in filter list %s" % (fid, svc))


def add(env, svc, regex, *extra):
    doc = env.ctl("filter", "add", svc, regex, *extra)
    check(isinstance(doc, dict) and "id" in doc, "filter add --json: %r", doc)
    return doc


def metric(env, name, key):
    h = env.helper(env.srv, "http-get", "--url", "http://%s/metrics" % METRICS_ADDR)
    r = it.client_result(h, 10)
    for line in it.d64(r.get("body")).decode().splitlines():
        if line.startswith(name + key + " "):
            return float(line.split(" ")[-1])
    return None


@test
def log_filter_passes_traffic_and_records_the_match(env):
    sid, port = env.service("lg", "tcp")
    doc = add(env, "lg", "evil[0-9]+", "--log")
    fid = doc["id"]
    check(doc["action"] == "log" and doc["matched"] == 0 and doc["label"] is None,
          "filter add --log --json: %r", doc)
    srv = env.tcp_server(port, reply=b"pong")
    sent = b"GET /?q=" + EVIL + b" HTTP/1.0\r\n" + b"A" * 3000 + b"more " + EVIL + b" tail"
    t0 = time.time_ns()
    c, sport = env.tcp_conn(SRV4, port, [sent[:20], 0.1, sent[20:], ("read", 0.5)])
    # the service logs what it read: it got every byte, and the client the reply
    it.assert_passed(c, it.server_conn_of(srv, sport), sent, reply=b"pong")
    (e,) = wait_events(env, "lg", lambda x: x["sport"] == sport)
    check(e["action"] == "log" and e["filter_id"] == fid and e["service_id"] == sid,
          "log event %r", e)
    check(e["src"] == CLI4 and e["dst"] == SRV4 and e["dport"] == port and e["dir"] == "c2s",
          "log event flow %r", e)
    check(e["time_ns"] >= t0 - 10**9, "log event time %r", e["time_ns"])
    x = bytes.fromhex(e["excerpt_hex"])
    check(x.startswith(b"GET /?q=evil1") and e["match_end"] == len(b"GET /?q=evil1"),
          "log excerpt %r, match_end %r", x, e.get("match_end"))
    # one event per filter and direction of a connection: the second evil1337 gave none
    it.wait_until(lambda: flt(env, "lg", fid)["matched"] == 1, timeout=3)
    f = flt(env, "lg", fid)
    check(f["matched"] == 1 and f["blocked"] == 0 and f["action"] == "log",
          "filter list after one log match: %r", f)
    st = env.ctl("stats", "lg")
    check(st[0]["blocked"] == 0 and st[0]["matched"] == 1,
          "stats: a log match is matched, not blocked: %r", st[0])
    p = env.ctl_raw("stats", "lg", json_out=False)
    check(p.stdout.split()[7] == "MATCHED" and p.stdout.split()[-1] == "1",
          "stats text: %s", p.stdout)
    # the text table shows the action and the count
    p = env.ctl_raw("filter", "list", "lg", json_out=False)
    head = p.stdout.splitlines()[0].split()
    check(head == ["ID", "DIR", "NOCASE", "ACTIVE", "ACTION", "BLOCKED", "MATCHED", "LABEL",
                   "REGEX"], "filter list header %r", head)
    row = p.stdout.splitlines()[1].split()
    check(row[4] == "log" and row[6] == "1", "filter list row %r", row)
    key = '{service="lg",filter="%d",action="log"}' % fid
    v = it.wait_until(lambda: metric(env, "fgex_filter_matched_total", key) == 1, timeout=4,
                      step=0.3)
    check(v, "fgex_filter_matched_total%s = %r", key, metric(env, "fgex_filter_matched_total",
                                                              key))
    p = env.ctl_raw("events", "lg", json_out=False)
    check("%d/log" % fid in p.stdout, "events table does not mark the log event: %s", p.stdout)

    # UDP: the datagram reaches the service, the match is an event marked log
    _, uport = env.service("lg-udp", "udp")
    ufid = add(env, "lg-udp", "evil[0-9]+", "--log")["id"]
    usrv = env.udp_server(uport)
    env.udp_client(SRV6, uport, [b"dgram " + EVIL, b"fine"])
    it.wait_until(lambda: len(it.dgrams(usrv)) == 2, timeout=2)
    check(it.dgrams(usrv) == [b"dgram " + EVIL, b"fine"], "udp server got %r", it.dgrams(usrv))
    (ue,) = wait_events(env, "lg-udp", lambda x: True)
    check(ue["action"] == "log" and ue["filter_id"] == ufid and ue["src"] == CLI6
          and ue["proto"] == "udp", "udp log event %r", ue)


def arrived(env, srv, h, logged_in, first):
    """Wait until the open connection of client h delivered `first` to the server (the worker
    passed it) and, with logged_in, its log event is in that service's events."""
    conn = h.wait_event(lambda e: e.get("event") == "connected", 5)
    check(conn, "the client did not connect: %s", h.stderr.decode(errors="replace")[-300:])
    got = srv.wait_event(lambda e: e.get("event") == "data" and
                         it.d64(e["data"]).startswith(first), 5)
    check(got, "the server did not receive %r", first)
    if logged_in:
        wait_events(env, logged_in, lambda x: x["sport"] == conn["sport"])


@test
def switching_log_to_block_live_blocks_the_next_connection(env):
    _, port = env.service("sw", "tcp")
    fid = add(env, "sw", "evil[0-9]+", "--log")["id"]
    # idle connections wait here while the filter changes, however long that takes
    srv = env.tcp_server(port, idle=15.0)
    c, sport = env.tcp_conn(SRV4, port, [b"one " + EVIL])
    it.assert_passed(c, it.server_conn_of(srv, sport), b"one " + EVIL)
    doc = env.ctl("filter", "set", str(fid), "--action", "block")
    check(doc["id"] == fid and doc["action"] == "block", "filter set --json: %r", doc)
    # the command returned once the worker applied it: the very next connection is blocked
    c, sport2 = env.tcp_conn(SRV4, port, [b"two " + EVIL])
    it.assert_blocked(c, it.server_conn_of(srv, sport2))
    (b,) = wait_events(env, "sw", lambda x: x["sport"] == sport2)
    check(b["action"] == "block" and b["filter_id"] == fid, "block event %r", b)
    it.wait_until(lambda: flt(env, "sw", fid)["blocked"] == 1, timeout=3)
    f = flt(env, "sw", fid)
    check(f["blocked"] == 1 and f["matched"] == 1, "counters after the switch: %r", f)
    # and back: log again, the next connection passes
    env.ctl("filter", "set", str(fid), "--action", "log")
    c, sport3 = env.tcp_conn(SRV4, port, [b"three " + EVIL])
    it.assert_passed(c, it.server_conn_of(srv, sport3), b"three " + EVIL)
    # an open connection that the log filter already logged: switched to block, its next
    # occurrence is blocked (the stream is reopened on the new database)
    # (the client holds its second send until the test says go: "wait")
    h = env.tcp_client(SRV4, port, [b"four " + EVIL, "wait", b" again " + EVIL + b"X"],
                       wait=False)
    arrived(env, srv, h, "sw", b"four ")
    # every connection of the capture matched it (3 of 3): making it block needs --force
    env.ctl("filter", "set", str(fid), "--action", "block", "--force")
    h.tell()
    c = it.client_result(h, 10)
    check(c["end"] == "reset", "an open connection was not blocked after the switch: %r", c)
    got = b"".join(it.d64(e["data"]) for e in srv.all("data"))
    check(b"four " + EVIL in got and b"again" not in got, "server got %r", got[-80:])
    # and an open connection switched block -> log is not dropped at its next match
    h = env.tcp_client(SRV4, port, [b"hello ", "wait", b"five " + EVIL], wait=False)
    arrived(env, srv, h, None, b"hello ")
    env.ctl("filter", "set", str(fid), "--action", "log")
    h.tell()
    c = it.client_result(h, 10)
    check(c["end"] == "eof", "an open connection was cut after the switch to log: %r", c)
    # bad values are refused, nothing changes
    p = env.ctl_raw("filter", "set", str(fid), "--action", "drop")
    check(p.returncode == 4, "--action drop: rc %d %s", p.returncode, p.stderr)
    p = env.ctl_raw("filter", "set", str(fid))
    check(p.returncode == 2, "filter set without a change: rc %d %s", p.returncode, p.stderr)
    check(flt(env, "sw", fid)["action"] == "log", "a refused set changed the filter")


def log_and_block_both_act(env, name, layer):
    extra = ("--layer", layer) if layer else ()
    _, port = env.service(name, "tcp", extra=extra)
    lfid = add(env, name, "GET /admin", "--log", "--label", "admin probe")["id"]
    bfid = add(env, name, "evil[0-9]+")["id"]
    srv = env.tcp_server(port)
    # both in one connection, the log filter's match first: logged, then blocked
    c = env.tcp_client(SRV4, port, [b"GET /admin?x=" + EVIL + b" HTTP/1.0"])
    check(c["end"] == "reset", "%s: the block filter did not block after a log match: %r", name,
          c)
    got = b"".join(it.d64(e["data"]) for e in srv.all("data"))
    check(EVIL not in got, "%s: the service received the blocked bytes: %r", name, got)
    # only the log filter: passes whole
    c2 = env.tcp_client(SRV4, port, [b"GET /admin/ok HTTP/1.0"])
    check(c2["end"] == "eof", "%s: a log-only match was cut: %r", name, c2)
    s2 = it.server_conn_starting(srv, b"GET /admin/ok")
    check(s2["data"] == b"GET /admin/ok HTTP/1.0" and s2["end"] == "eof",
          "%s: the service got %r (%s)", name, s2["data"], s2["end"])
    evs = it.wait_until(lambda: len(events(env, name)) >= 3 and events(env, name), timeout=4)
    logs = [e for e in evs if e["action"] == "log"]
    blocks = [e for e in evs if e["action"] == "block"]
    check(len(logs) == 2 and all(e["filter_id"] == lfid for e in logs),
          "%s: log events %r", name, logs)
    check(len(blocks) == 1 and blocks[0]["filter_id"] == bfid, "%s: block events %r", name,
          blocks)
    check(all(e["label"] == "admin probe" for e in logs) and blocks[0]["label"] is None,
          "%s: labels in events %r", name, evs)
    check(all(e["src"] == CLI4 for e in evs), "%s: event sources %r", name, evs)
    it.wait_until(lambda: flt(env, name, lfid)["matched"] == 2, timeout=3)
    check(flt(env, name, lfid)["matched"] == 2 and flt(env, name, lfid)["blocked"] == 0,
          "%s: log filter counters %r", name, flt(env, name, lfid))
    check(flt(env, name, bfid)["blocked"] == 1, "%s: block filter counters %r", name,
          flt(env, name, bfid))


def one_byte_many_filters(env, name, layer):
    """Filters whose matches all end at one byte: every log filter logs, the block is the oldest
    block filter's, whatever order hyperscan reports them in (libcommon/reasm.c)."""
    extra = ("--layer", layer) if layer else ()
    _, port = env.service(name, "tcp", extra=extra)
    old = add(env, name, "il1")["id"]
    lg1 = add(env, name, "vil1", "--log")["id"]
    add(env, name, "evil1")
    lg2 = add(env, name, "l1", "--log")["id"]
    srv = env.tcp_server(port)
    for n in range(3):
        c = env.tcp_client(SRV4, port, [b"GET /evil1 HTTP/1.0"])
        check(c["end"] == "reset", "%s: not blocked: %r", name, c)
    evs = it.wait_until(lambda: len(events(env, name)) >= 9 and events(env, name),
                        timeout=5) or events(env, name)
    logs = sorted(e["filter_id"] for e in evs if e["action"] == "log")
    blocks = [e["filter_id"] for e in evs if e["action"] == "block"]
    check(logs == sorted([lg1, lg2] * 3), "%s: log events at the block's byte: %r", name, logs)
    check(blocks == [old] * 3, "%s: blocks not the oldest filter's (%d): %r", name, old, blocks)
    got = b"".join(it.d64(e["data"]) for e in srv.all("data"))
    check(b"evil1" not in got, "%s: the service received the blocked bytes: %r", name, got)


@test
def one_byte_every_log_logs_oldest_block_blocks_nfqueue(env):
    one_byte_many_filters(env, "byte-nfq", None)


@test
def one_byte_every_log_logs_oldest_block_blocks_proxy(env):
    one_byte_many_filters(env, "byte-px", "proxy")


@test
def log_and_block_filters_both_act_nfqueue(env):
    log_and_block_both_act(env, "both-nfq", None)


@test
def log_and_block_filters_both_act_proxy(env):
    log_and_block_both_act(env, "both-px", "proxy")


@test
def labels_round_trip_list_events_ruleset_backup(env):
    _, port = env.service("lbl", "tcp")
    doc = add(env, "lbl", "evil[0-9]+", "--label", LABEL, "--dir", "c2s")
    fid = doc["id"]
    check(doc["label"] == LABEL, "filter add --label: %r", doc)
    lfid = add(env, "lbl", "l0g/me", "--log", "--nocase", "--label", 'q"uote\\ /x')["id"]
    p = env.ctl_raw("filter", "list", "lbl", json_out=False)
    check(LABEL in p.stdout and "l0g/me" in p.stdout, "filter list text: %s", p.stdout)
    srv = env.tcp_server(port)
    c, sport = env.tcp_conn(SRV4, port, [b"x " + EVIL])
    it.assert_blocked(c, it.server_conn_of(srv, sport))
    (e,) = wait_events(env, "lbl", lambda x: x["sport"] == sport)
    check(e["label"] == LABEL, "event label %r", e)
    p = env.ctl_raw("events", "lbl", json_out=False)
    check(LABEL in p.stdout and "LABEL" in p.stdout.splitlines()[0], "events text: %s",
          p.stdout)
    # bad labels are refused by fgexctl and by controld alike
    for bad in ("a\tb", "x" * 65):
        p = env.ctl_raw("filter", "set", str(fid), "--label", bad)
        check(p.returncode == 4 and "label" in p.stderr, "label %r: rc %d %s", bad,
              p.returncode, p.stderr)

    # ruleset file: export, then import into another service
    p = env.ctl_raw("filter", "export", "lbl", json_out=False)
    check(p.returncode == 0, "filter export: %s", p.stderr)
    check('c2s label="%s" /evil[0-9]+/' % LABEL in p.stdout, "export text:\n%s", p.stdout)
    check('both nocase log label="q\\"uote\\\\ /x" /l0g/me/' in p.stdout, "export text:\n%s",
          p.stdout)
    path = os.path.join(env.tmp, "lbl.rules")
    with open(path, "w") as f:
        f.write(p.stdout)
    env.service("lbl2", "tcp")
    env.ctl("filter", "import", "lbl2", path)
    got = sorted((f["regex"], f["action"], f["label"], f["nocase"], f["dir"])
                 for f in env.filters("lbl2"))
    want = sorted((f["regex"], f["action"], f["label"], f["nocase"], f["dir"])
                  for f in env.filters("lbl"))
    check(got == want, "ruleset round trip:\n%r\n%r", got, want)
    # a label can be changed and removed in place
    env.ctl("filter", "set", str(fid), "--label", "renamed")
    check(flt(env, "lbl", fid)["label"] == "renamed", "set --label: %r", flt(env, "lbl", fid))
    env.ctl("filter", "set", str(fid), "--label", "")
    check(flt(env, "lbl", fid)["label"] is None, "set --label '': %r", flt(env, "lbl", fid))
    env.ctl("filter", "set", str(fid), "--label", LABEL)

    # the whole-configuration backup keeps actions and labels, and a restore filters by them
    cfg = os.path.join(env.tmp, "backup.json")
    env.ctl("export", cfg)
    with open(cfg) as f:
        raw = json.load(f)
    fl = [x for s in raw["services"] for x in s["filters"] if x["id"] in (fid, lfid)]
    check(sorted((x["id"], x["action"], x.get("label")) for x in fl) ==
          sorted([(fid, "block", LABEL), (lfid, "log", 'q"uote\\ /x')]), "backup: %r", fl)
    before = {f["id"]: (f["action"], f["label"]) for s in ("lbl", "lbl2") for f in
              env.filters(s)}
    env.ctl("import", cfg)
    after = {f["id"]: (f["action"], f["label"]) for s in ("lbl", "lbl2") for f in
             env.filters(s)}
    check(after == before, "after restore:\n%r\nbefore:\n%r", after, before)
    c, sport = env.tcp_conn(SRV4, port, [b"GET /L0G/ME " + b"x" * 10])
    it.assert_passed(c, it.server_conn_of(srv, sport), b"GET /L0G/ME " + b"x" * 10)
    (e,) = wait_events(env, "lbl", lambda x: x["sport"] == sport)
    check(e["action"] == "log" and e["filter_id"] == lfid and e["label"] == 'q"uote\\ /x',
          "restored log filter's event %r", e)
    # a backup with a bad label or action is refused whole
    raw["services"][0]["filters"][0]["action"] = "drop"
    bad = os.path.join(env.tmp, "bad.json")
    with open(bad, "w") as f:
        json.dump(raw, f)
    p = env.ctl_raw("import", bad)
    check(p.returncode != 0 and "action" in p.stderr, "bad action imported: %d %s",
          p.returncode, p.stderr)
    raw["services"][0]["filters"][0]["action"] = "log"
    raw["services"][0]["filters"][0]["id"] = 2**31  # the bit that marks a log filter's id
    with open(bad, "w") as f:
        json.dump(raw, f)
    p = env.ctl_raw("import", bad)
    check(p.returncode == 4 and "too large" in p.stderr, "id 2^31 imported: %d %s",
          p.returncode, p.stderr)
    check({f["id"]: (f["action"], f["label"]) for s in ("lbl", "lbl2") for f in
           env.filters(s)} == before, "a refused import changed the filters")


def regex_test(env, *args, stdin=None):
    argv = [os.path.join(env.bin, "fgexctl"), "regex", "test"] + [str(a) for a in args]
    # no controld at this URL: the command must not need one
    return subprocess.run(argv, input=stdin, capture_output=True, timeout=20,
                          env=dict(os.environ, FGEX_URL="ipc:///nonexistent/control.sock"))


@test
def regex_test_offline_file_and_stdin(env):
    path = os.path.join(env.tmp, "capture.bin")
    data = b"\x00\x01HELLO\r\n" + b"z" * 100 + b"GET /?q=" + EVIL + b" HTTP/1.0\r\n\xff"
    with open(path, "wb") as f:
        f.write(data)
    p = regex_test(env, "evil[0-9]+", path)
    check(p.returncode == 0, "match on a file: rc %d %s", p.returncode, p.stderr)
    end = data.index(b"evil1") + len(b"evil1")
    check(("ends at offset %d" % end).encode() in p.stdout, "human output: %s", p.stdout)
    p = regex_test(env, "--json", "evil[0-9]+", "-", stdin=data)
    check(p.returncode == 0, "match on stdin: rc %d %s", p.returncode, p.stderr)
    doc = json.loads(p.stdout)
    check(doc["matched"] is True and doc["end"] == end and doc["bytes"] == len(data),
          "regex test --json: %r", doc)
    x = bytes.fromhex(doc["excerpt_hex"])
    check(x == data[end - 64:end + 32] and doc["match_end"] == 64, "excerpt %r / %r", x,
          doc["match_end"])
    # nocase as a filter's
    p = regex_test(env, "--nocase", "HTTP/1\\.0", "-", stdin=b"get http/1.0")
    check(p.returncode == 0, "--nocase: rc %d", p.returncode)
    # no match
    p = regex_test(env, "--json", "flag\\{", path)
    check(p.returncode == 1 and json.loads(p.stdout)["matched"] is False,
          "no match: rc %d %s", p.returncode, p.stdout)
    p = regex_test(env, "flag\\{", "-", stdin=b"")
    check(p.returncode == 1, "empty stdin: rc %d", p.returncode)
    # an invalid regex: exit 2, with the very words `filter add` gets from controld
    p = regex_test(env, "a(b", path)
    check(p.returncode == 2 and p.stdout == b"", "invalid regex: rc %d %r", p.returncode,
          p.stdout)
    env.service("rt", "tcp")
    q = env.ctl_raw("filter", "add", "rt", "a(b", json_out=False)
    check(q.returncode == 4, "filter add a(b: rc %d", q.returncode)
    check(p.stderr.decode() == q.stderr, "regex test and filter add differ:\n%r\n%r",
          p.stderr.decode(), q.stderr)
    p = regex_test(env, "evil$", path)
    q = env.ctl_raw("filter", "add", "rt", "evil$", json_out=False)
    check(p.returncode == 2 and p.stderr.decode() == q.stderr,
          "evil$: rc %d\n%r\n%r", p.returncode, p.stderr.decode(), q.stderr)
    # the same warnings as filter add
    p = regex_test(env, "ab", "-", stdin=b"xxab")
    check(p.returncode == 0 and b"warning:" in p.stderr and b"as few as 2 bytes" in p.stderr,
          "warning: rc %d %r", p.returncode, p.stderr)
    # UDP: block mode, one datagram ('$' is the end of the datagram there)
    p = regex_test(env, "--proto", "udp", "evil[0-9]+$", "-", stdin=b"x " + EVIL)
    check(p.returncode == 0, "udp block mode: rc %d %s", p.returncode, p.stderr)
    p = regex_test(env, "--proto", "udp", "x", "-", stdin=b"x" * 70000)
    check(p.returncode == 2 and b"65507" in p.stderr, "oversized datagram: rc %d %s",
          p.returncode, p.stderr)
    p = regex_test(env, "x", os.path.join(env.tmp, "missing"))
    check(p.returncode == 2 and b"cannot open" in p.stderr, "missing file: rc %d %s",
          p.returncode, p.stderr)


@test
def events_top_src_two_sources(env):
    _, port = env.service("top", "tcp")
    f1 = add(env, "top", "evil[0-9]+", "--label", "t12 rce")["id"]
    f2 = add(env, "top", "leak\\{")["id"]
    lf = add(env, "top", "probe", "--log")["id"]
    srv = env.tcp_server(port)
    for host, payload in ((SRV4, b"a " + EVIL), (SRV4, b"b " + EVIL), (SRV4, b"leak{x}"),
                          (SRV6, b"c " + EVIL), (SRV4, b"probe only")):
        c = env.tcp_client(host, port, [payload])
    it.wait_until(lambda: len(events(env, "top")) == 5, timeout=4)
    c, sport = env.tcp_conn(SRV6, port, [b"d " + EVIL])  # the newest block: from CLI6
    it.assert_blocked(c, it.server_conn_of(srv, sport))
    it.wait_until(lambda: len(events(env, "top")) == 6, timeout=4)
    doc = env.ctl("events", "top", "--top", "src")
    rows = [(r["src"], r["filter_id"], r["blocks"]) for r in doc["rows"]]
    check(doc["events"] == 6, "events read %r", doc["events"])
    check(rows[0] == (CLI6, f1, 2), "newest first: %r", rows)
    check(sorted(rows) == sorted([(CLI6, f1, 2), (CLI4, f1, 2), (CLI4, f2, 1)]),
          "rows %r (the log match is not a block)", rows)
    check(all(r["filter_id"] != lf for r in doc["rows"]), "a log match counted: %r", rows)
    r0 = doc["rows"][0]
    check(r0["label"] == "t12 rce" and r0["service"] == "top" and r0["last_ns"] >=
          r0["first_ns"], "row %r", r0)
    # --since: a window that excludes everything so far
    time.sleep(2.2)
    doc = env.ctl("events", "top", "--top", "src", "--since", "2s")
    check(doc["rows"] == [], "--since 2s: %r", doc["rows"])
    doc = env.ctl("events", "--top", "src", "--since", "30m")
    check({(r["src"], r["filter_id"]) for r in doc["rows"]} >=
          {(CLI6, f1), (CLI4, f1), (CLI4, f2)}, "every service, --since 30m: %r", doc["rows"])
    p = env.ctl_raw("events", "top", "--top", "src", json_out=False)
    lines = p.stdout.splitlines()
    check(lines[0].split()[:5] == ["SRC", "FILTER", "LABEL", "SERVICE", "BLOCKS"] and
          lines[1].split()[0] == CLI6, "events --top text:\n%s", p.stdout)
    for bad in (("--top", "dst"), ("--top", "src", "--since", "5x"), ("--since", "5m")):
        p = env.ctl_raw("events", "top", *bad)
        check(p.returncode in (2, 4), "events %r accepted: %d", bad, p.returncode)
    p = env.ctl_raw("events", "nosuch", "--top", "src")
    check(p.returncode == 3, "events --top of no such service: rc %d", p.returncode)


if __name__ == "__main__":
    sys.exit(it.run_module("logfil", controld_args=["--metrics-listen", METRICS_ADDR]))
