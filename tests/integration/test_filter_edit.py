#!/usr/bin/python3
"""Integration: `filter set FILTER --regex R [--dir D] [--nocase]` edits a filter in place
(issue 27), with real traffic between the module's namespaces, on the NFQUEUE and the proxy
layer.

The filter keeps its id, its blocked count and its timeline (stats --history's series of that
id); its revision goes up and `history` keeps the old text. Once the command returns the old
regex blocks nothing, on a connection that was open across the edit too, even one that had sent
the first half of the old pattern (the worker's old stream still holds the old regex under that
id: it is believed for the revision listed now only), and the new one blocks the next
connection, within a second of the command. An invalid regex is refused and nothing changes.
A regex of bytes that are not UTF-8 goes through argv, --json and the ruleset export exactly."""
import base64
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fgxit as it  # noqa: E402
import scriptfiles  # noqa: E402
from fgxit import EVIL, SRV4, check, test  # noqa: E402

NEW = b"pwn4242"


def flt(env, svc, fid):
    for f in env.filters(svc):
        if f["id"] == fid:
            return f
    raise AssertionError("filter %d not in filter list %s" % (fid, svc))


def blocked(c, srv, forbidden=EVIL):
    """A block on either layer: the client is reset and no connection of the server got the
    matching bytes (the proxy layer may never have connected to it)."""
    check(c["connected"] and c["end"] == "reset", "not blocked: %r", c)
    got = b"".join(it.d64(e["data"]) for e in srv.all("data"))
    check(forbidden not in got, "the server received the matching bytes: %r", got[-80:])


def arrived(srv, h, first):
    conn = h.wait_event(lambda e: e.get("event") == "connected", 5)
    check(conn, "the client did not connect: %s", h.stderr.decode(errors="replace")[-300:])
    got = srv.wait_event(lambda e: e.get("event") == "data" and
                         it.d64(e["data"]).startswith(first), 5)
    check(got, "the server did not receive %r", first)


def edit_in_place(env, name, layer):
    extra = ("--layer", layer) if layer else ()
    _, port = env.service(name, "tcp", extra=extra)
    fid = env.filter(name, "evil[0-9]+")
    # a filter left as it is: the worker keeps an open flow's old stream for it
    env.filter(name, "keep[0-9]+")
    srv = env.tcp_server(port, idle=15.0)
    c, sport = env.tcp_conn(SRV4, port, [b"one " + EVIL])
    blocked(c, srv)
    it.wait_until(lambda: flt(env, name, fid)["blocked"] == 1, timeout=4)
    # open across the edit, with the first half of the old pattern already sent and passed
    h = env.tcp_client(SRV4, port, [b"hello ev", "wait", b"il1337 and more"], wait=False)
    arrived(srv, h, b"hello ev")
    t0 = time.monotonic()
    doc = env.ctl("filter", "set", str(fid), "--regex", "pwn[0-9]+", "--dir", "c2s")
    check(doc["id"] == fid and doc["regex"] == "pwn[0-9]+" and doc["dir"] == "c2s" and
          doc["revision"] == 1 and doc["edited"] and doc["blocked"] == 1 and doc["active"],
          "%s: filter set --regex --json: %r", name, doc)
    # the new regex blocks the very next connection
    c, sport = env.tcp_conn(SRV4, port, [b"two " + NEW])
    blocked(c, srv, NEW)
    took = time.monotonic() - t0
    check(took < 1.0 + 0.5, "%s: the new regex blocked %.2f s after the edit began", name, took)
    # the old one blocks nothing: not a new connection, not the one open across the edit
    c, sport = env.tcp_conn(SRV4, port, [b"three " + EVIL])
    check(c["end"] == "eof", "%s: the old regex still blocks a new connection: %r", name, c)
    it.assert_passed(c, it.server_conn_starting(srv, b"three "), b"three " + EVIL)
    h.tell()
    c = it.client_result(h, 10)
    check(c["end"] == "eof", "%s: the old regex still cut an open connection: %r", name, c)
    s = it.server_conn_starting(srv, b"hello ev")
    check(s["data"] == b"hello evil1337 and more", "%s: the server got %r", name, s["data"])
    # the counter went on from where it was, under the same id
    it.wait_until(lambda: flt(env, name, fid)["blocked"] == 2, timeout=4)
    f = flt(env, name, fid)
    check(f["blocked"] == 2 and f["revision"] == 1, "%s: counters after the edit %r", name, f)
    evs = [e for e in env.ctl("events", name) if e["action"] == "block"]
    check(sorted(e["filter_id"] for e in evs) == [fid, fid], "%s: block events %r", name, evs)
    return fid, port, srv


@test
def edit_regex_in_place_nfqueue(env):
    fid, port, srv = edit_in_place(env, "ed-nfq", None)
    # the change is in the history, with the old text
    hist = env.ctl("history")
    last = [h for h in hist if h["what"].startswith("filter set %d" % fid)]
    check(last and "--regex 'pwn[0-9]+'" in last[-1]["what"] and
          "(was both 'evil[0-9]+')" in last[-1]["what"], "history: %r", hist[-3:])
    # the timeline: the one series of that id holds both blocks, before and after the edit
    sh = env.ctl("stats", "--history", "ed-nfq")
    series = [s for s in sh["series"] if s["obj"] == "filter" and s["id"] == fid and
              s["kind"] == "blocked"]
    check(len(series) == 1 and series[0]["total"] == 2 and series[0]["edited"],
          "stats --history: %r", series)
    p = env.ctl_raw("stats", "--history", "ed-nfq", json_out=False)
    check("#%d* /pwn" % fid in p.stdout and "#%d* regex edited at " % fid in p.stdout,
          "stats --history does not mark the edit:\n%s", p.stdout)
    # undo takes the edit back: the old regex blocks again, the new one not
    env.ctl("undo")
    f = flt(env, "ed-nfq", fid)
    check(f["regex"] == "evil[0-9]+" and f["dir"] == "both" and f["revision"] == 0,
          "after undo: %r", f)
    c, sport = env.tcp_conn(SRV4, port, [b"four " + EVIL])
    it.assert_blocked(c, it.server_conn_of(srv, sport))
    c, sport = env.tcp_conn(SRV4, port, [b"five " + NEW])
    it.assert_passed(c, it.server_conn_of(srv, sport), b"five " + NEW)


@test
def edit_regex_in_place_proxy(env):
    edit_in_place(env, "ed-px", "proxy")


@test
def invalid_or_duplicate_regex_is_refused_and_nothing_changes(env):
    _, port = env.service("ed-bad", "tcp")
    fid = env.filter("ed-bad", "evil[0-9]+")
    other = env.filter("ed-bad", "other[0-9]+")
    p = env.ctl_raw("filter", "set", str(fid), "--regex", "evil([0-9]+")
    check(p.returncode == 4 and "evil([0-9]+" in p.stderr, "an invalid regex: rc %d %s",
          p.returncode, p.stderr)
    p = env.ctl_raw("filter", "set", str(fid), "--regex", "other[0-9]+")
    check(p.returncode == 5 and "identical to filter %d" % other in p.stderr,
          "a duplicate: rc %d %s", p.returncode, p.stderr)
    p = env.ctl_raw("filter", "set", str(fid), "--nocase")
    check(p.returncode == 2, "--nocase without --regex: rc %d %s", p.returncode, p.stderr)
    f = flt(env, "ed-bad", fid)
    check(f["regex"] == "evil[0-9]+" and f["revision"] == 0 and f["edited"] is None,
          "a refused edit changed the filter: %r", f)
    check(not [h for h in env.ctl("history") if h["what"].startswith("filter set %d" % fid)],
          "a refused edit is in the history")
    srv = env.tcp_server(port)
    c, sport = env.tcp_conn(SRV4, port, [b"x " + EVIL])
    it.assert_blocked(c, it.server_conn_of(srv, sport))
    # the same pattern again is no change: no revision, nothing recorded
    env.ctl("filter", "set", str(fid), "--regex", "evil[0-9]+")
    check(flt(env, "ed-bad", fid)["revision"] == 0, "an edit to the same pattern counted")


@test
def edit_carries_bytes_that_are_not_utf8(env):
    _, port = env.service("ed-raw", "tcp")
    fid = env.filter("ed-raw", "evil[0-9]+")
    raw = b"\xff\xfe[0-9]+"
    fgexctl = os.path.join(env.bin, "fgexctl")
    p = subprocess.run([fgexctl.encode(), b"-c", env.url.encode(), b"--json", b"filter", b"set",
                        str(fid).encode(), b"--regex", raw, b"--nocase"], capture_output=True,
                       timeout=15)
    check(p.returncode == 0, "filter set with raw bytes: rc %d %r", p.returncode, p.stderr)
    f = flt(env, "ed-raw", fid)
    check("regex" not in f and base64.b64decode(f["regex_b64"]) == raw and f["nocase"],
          "filter list --json of the edited filter: %r", f)
    p = subprocess.run([fgexctl, "-c", env.url, "filter", "export", "ed-raw"],
                       capture_output=True, timeout=15)
    check(p.returncode == 0 and b"nocase /" + raw + b"/" in p.stdout, "export %r", p.stdout)
    srv = env.tcp_server(port)
    c, sport = env.tcp_conn(SRV4, port, [b"x \xff\xfe42 y"])
    it.assert_blocked(c, it.server_conn_of(srv, sport), forbidden=b"\xff\xfe42")
    c, sport = env.tcp_conn(SRV4, port, [b"x " + EVIL])
    it.assert_passed(c, it.server_conn_of(srv, sport), b"x " + EVIL)
    # a whole-configuration backup keeps the revision, and loads back
    path = os.path.join(env.tmp, "ed.backup")
    env.ctl("export", path)
    with open(path) as fh:
        bf = [x for s in json.load(fh)["services"] if s["name"] == "ed-raw"
              for x in s["filters"]][0]
    check(bf["revision"] == 1 and bf["edited"] == f["edited"] and
          base64.b64decode(bf["regex_b64"]) == raw, "the backup's filter %r", bf)
    env.ctl("filter", "rm", str(fid))
    env.ctl("import", path)
    f = flt(env, "ed-raw", fid)
    check(f["revision"] == 1 and base64.b64decode(f["regex_b64"]) == raw and f["nocase"],
          "after the backup's import: %r", f)
    # a backup made before edits existed (no revision, no edited) loads as never edited
    with open(path) as fh:
        doc = json.load(fh)
    for s in doc["services"]:
        for x in s["filters"]:
            x.pop("revision", None)
            x.pop("edited", None)
    with open(path, "w") as fh:
        json.dump(doc, fh)
    env.ctl("filter", "rm", str(fid))
    env.ctl("import", path)
    f = flt(env, "ed-raw", fid)
    check(f["revision"] == 0 and f["edited"] is None and
          base64.b64decode(f["regex_b64"]) == raw, "an older backup's filter: %r", f)


@test
def service_show_gives_what_judges_in_its_order(env):
    _, port = env.service("ed-show", "tcp", extra=("--layer", "proxy"))
    bfid = env.filter("ed-show", "evil[0-9]+")
    lfid = env.ctl("filter", "add", "ed-show", "GET /admin", "--log")["id"]
    doc = env.ctl("service", "show", "ed-show")
    check(doc["judges"] == {"filters": [bfid, lfid], "script": None},
          "service show --json judges without a script: %r", doc.get("judges"))
    env.ctl("script", "set", "ed-show", scriptfiles.write(scriptfiles.KEEPALIVE, "ka.py"))
    doc = env.ctl("service", "show", "ed-show")
    sc = doc["judges"]["script"]
    check(sc and sc["filename"] == "ka.py" and
          [f["name"] for f in sc["functions"]] == ["third_request", "decoded_body", "drop_probe"]
          and all(f["active"] for f in sc["functions"]) and
          [f["line"] for f in sc["functions"]] == sorted(f["line"] for f in sc["functions"]),
          "service show --json judges with a script: %r", doc["judges"])
    p = env.ctl_raw("service", "show", "ed-show", json_out=False)
    out = p.stdout
    check(p.returncode == 0 and "1. its regex filters, all in one scan (their order has no "
          "effect): 1 block, 1 log" in out and "2. script ka.py" in out and
          out.index("third_request") < out.index("decoded_body") < out.index("drop_probe"),
          "service show:\n%s", out)
    # a log filter and a block filter both act on one connection, whatever their ids' order
    srv = env.tcp_server(port)
    c = env.tcp_client(SRV4, port, [b"GET /admin?q=" + EVIL + b" HTTP/1.1\r\n\r\n"])
    blocked(c, srv)
    evs = it.wait_until(lambda: len(env.ctl("events", "ed-show")) >= 2 and
                        env.ctl("events", "ed-show"), timeout=4)
    check(evs and sorted((e["filter_id"], e["action"]) for e in evs) ==
          [(bfid, "block"), (lfid, "log")], "events %r", evs)


if __name__ == "__main__":
    sys.exit(it.run_module("filter_edit"))
