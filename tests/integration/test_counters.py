#!/usr/bin/python3
"""Integration: counters that mean what they say (issue 14), with a real controld, its worker
and real TCP connections between two namespaces.

Covers: a removed filter's blocks stay in its service's total (also across a controld
restart); flows_active counts open connections only (blocked, reset and closed ones leave it);
`import` of a backup and `filter import --replace` keep the ids and counters of what they leave
as it was; `filter import --sync` ends with exactly the file's filters, prints the diff, and
loading the same file twice changes nothing; `--dry-run` (filter import and import) prints the
diff and changes nothing; a filter identical to one the service has is refused with its id;
`stats --history` shows the blocks per minute per service and filter, across a restart."""
import json
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fgxit as it  # noqa: E402
from fgxit import EVIL, SRV4, check, test  # noqa: E402

BAD = b"bad4242"


def stats_of(env, name):
    doc = env.ctl("stats", name)
    check(isinstance(doc, list) and len(doc) == 1, "stats %s: %r", name, doc)
    return doc[0]


def blocked_of(env, name):
    return stats_of(env, name)["blocked"]


def wait_blocked(env, name, n, timeout=5):
    it.wait_until(lambda: blocked_of(env, name) >= n, timeout=timeout)
    got = blocked_of(env, name)
    check(got == n, "service %s blocked %d, expected %d", name, got, n)


def block(env, srv, port, payload=EVIL, n=1):
    for i in range(n):
        c, sport = env.tcp_conn(SRV4, port, [b"x%d " % i + payload])
        it.assert_blocked(c, it.server_conn_of(srv, sport), forbidden=payload)


def passes(env, srv, port, payload):
    c, sport = env.tcp_conn(SRV4, port, [payload])
    it.assert_passed(c, it.server_conn_of(srv, sport), payload)


def filters_by_id(env, svc):
    return {f["id"]: f for f in env.filters(svc)}


def write(env, name, text):
    path = os.path.join(env.tmp, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def restart(env):
    env.stop_controld(signal.SIGTERM)
    env.start_controld()


@test
def filter_rm_keeps_service_total(env):
    sid, port = env.service("rmtotal")
    srv = env.tcp_server(port)
    f1 = env.filter("rmtotal", "evil[0-9]+")
    f2 = env.filter("rmtotal", "bad[0-9]+")
    block(env, srv, port, EVIL, 2)
    block(env, srv, port, BAD, 1)
    wait_blocked(env, "rmtotal", 3)
    env.ctl("filter", "rm", f1)
    # the total stays at 3 in stats and in service list; the removed filter's share is named
    st = stats_of(env, "rmtotal")
    check(st["blocked"] == 3, "after filter rm the service total is %d, not 3", st["blocked"])
    check(st.get("blocked_removed") == 2, "blocked_removed %r, expected 2", st.get("blocked_removed"))
    svc = env.service_doc("rmtotal")
    check(svc["blocked"] == 3, "service show says blocked %r after filter rm", svc["blocked"])
    check(list(filters_by_id(env, "rmtotal")) == [f2], "filters left: %r", env.filters("rmtotal"))
    passes(env, srv, port, b"x " + EVIL)  # the filter is really gone
    block(env, srv, port, BAD, 1)
    wait_blocked(env, "rmtotal", 4)
    # and it is kept across a controld restart (LMDB)
    restart(env)
    check(blocked_of(env, "rmtotal") == 4, "after a restart blocked is %d, not 4",
          blocked_of(env, "rmtotal"))
    env.ctl("service", "rm", "--yes", sid)


@test
def flows_active_counts_open_flows_only(env):
    sid, port = env.service("flows")
    srv = env.tcp_server(port, idle=6.0)
    env.filter("flows", "evil[0-9]+")
    # 5 connections that close cleanly, 3 that are blocked (reset at both ends)
    for i in range(5):
        passes(env, srv, port, b"clean %d" % i)
    block(env, srv, port, EVIL, 3)
    it.wait_until(lambda: stats_of(env, "flows")["flows_active"] == 0, timeout=4)
    st = stats_of(env, "flows")
    check(st["flows_active"] == 0, "flows_active %d with no connection open (8 closed)",
          st["flows_active"])
    # one connection held open: counted while it is open, and only then
    h = env.tcp_client(SRV4, port, [b"hello", 2.5], wait=False)
    got = it.wait_until(lambda: stats_of(env, "flows")["flows_active"] == 1, timeout=2)
    check(got, "flows_active %d while one connection is open",
          stats_of(env, "flows")["flows_active"])
    c = it.client_result(h, 10)
    check(c["end"] == "eof", "the open connection ended by %s", c["end"])
    it.wait_until(lambda: stats_of(env, "flows")["flows_active"] == 0, timeout=4)
    check(stats_of(env, "flows")["flows_active"] == 0, "flows_active %d after it closed",
          stats_of(env, "flows")["flows_active"])
    env.ctl("service", "rm", "--yes", sid)


@test
def proxy_flows_active_counts_open_connections(env):
    sid, port = env.service("pxflows", extra=("--layer", "proxy"))
    srv = env.tcp_server(port, idle=6.0)
    env.filter("pxflows", "evil[0-9]+")
    # the proxy connects upstream from ports of its own: only the client's side is checked
    for i in range(3):
        c = env.tcp_client(SRV4, port, [b"clean %d" % i])
        check(c["connected"] and c["end"] == "eof", "clean connection: %r", c)
    for i in range(2):
        c = env.tcp_client(SRV4, port, [b"x " + EVIL])
        check(c["connected"] and c["end"] == "reset", "blocked connection: %r", c)
    wait_blocked(env, "pxflows", 2)
    it.wait_until(lambda: stats_of(env, "pxflows")["flows_active"] == 0, timeout=4)
    check(stats_of(env, "pxflows")["flows_active"] == 0, "proxy flows_active %d with none open",
          stats_of(env, "pxflows")["flows_active"])
    h = env.tcp_client(SRV4, port, [b"hello", 2.5], wait=False)
    check(it.wait_until(lambda: stats_of(env, "pxflows")["flows_active"] == 1, timeout=2),
          "proxy flows_active %d while one is open", stats_of(env, "pxflows")["flows_active"])
    it.client_result(h, 10)
    it.wait_until(lambda: stats_of(env, "pxflows")["flows_active"] == 0, timeout=4)
    check(stats_of(env, "pxflows")["flows_active"] == 0, "proxy flows_active after the close")
    env.ctl("service", "rm", "--yes", sid)


@test
def import_keeps_ids_and_counters(env):
    a_id, a_port = env.service("imp-a")
    b_id, b_port = env.service("imp-b")
    sa = env.tcp_server(a_port)
    sb = env.tcp_server(b_port)
    fa = env.filter("imp-a", "evil[0-9]+")
    fb1 = env.filter("imp-b", "evil[0-9]+")
    fb2 = env.filter("imp-b", "bad[0-9]+")
    block(env, sa, a_port, EVIL, 2)
    block(env, sb, b_port, EVIL, 1)
    block(env, sb, b_port, BAD, 3)
    wait_blocked(env, "imp-a", 2)
    wait_blocked(env, "imp-b", 4)
    backup = os.path.join(env.tmp, "backup.json")
    env.ctl("export", backup)
    # the same backup back: nothing changes, no counter is zeroed
    doc = env.ctl("import", backup)
    check(all(d["op"] == "keep" for d in doc["diff"]), "a re-import changed %r",
          [d for d in doc["diff"] if d["op"] != "keep"])
    check(filters_by_id(env, "imp-a")[fa]["blocked"] == 2, "filter %d lost its count", fa)
    check(filters_by_id(env, "imp-b")[fb2]["blocked"] == 3, "filter %d lost its count", fb2)
    check(blocked_of(env, "imp-a") == 2 and blocked_of(env, "imp-b") == 4,
          "service totals after a re-import: %d, %d", blocked_of(env, "imp-a"),
          blocked_of(env, "imp-b"))
    # a backup in which imp-b's second filter is gone: imp-a keeps everything; imp-b keeps
    # its first filter and its total
    with open(backup) as f:
        cfg = json.load(f)
    for s in cfg["services"]:
        s["filters"] = [x for x in s["filters"] if x["id"] != fb2]
    edited = write(env, "edited.json", json.dumps(cfg))
    doc = env.ctl("import", edited)
    changed = [(d["op"], d["kind"], d["id"]) for d in doc["diff"] if d["op"] != "keep"]
    check(changed == [("rm", "filter", fb2)], "diff of the edited backup: %r", changed)
    check(filters_by_id(env, "imp-a")[fa]["blocked"] == 2, "imp-a's filter changed")
    fbs = filters_by_id(env, "imp-b")
    check(list(fbs) == [fb1] and fbs[fb1]["blocked"] == 1, "imp-b's filters: %r", fbs)
    check(blocked_of(env, "imp-b") == 4, "imp-b's total went to %d", blocked_of(env, "imp-b"))
    passes(env, sb, b_port, b"y " + BAD)
    block(env, sb, b_port, EVIL, 1)  # the kept filter still blocks, and counts on
    wait_blocked(env, "imp-b", 5)
    check(filters_by_id(env, "imp-b")[fb1]["blocked"] == 2, "the kept filter counts from zero")
    # a new filter later gets an id above every id the backup had
    check(env.filter("imp-a", "later[0-9]+") > fb2, "an id was reused")
    env.ctl("service", "rm", "--yes", a_id)
    env.ctl("service", "rm", "--yes", b_id)


@test
def filter_import_replace_keeps_identical_filters(env):
    sid, port = env.service("repl")
    srv = env.tcp_server(port)
    rules = write(env, "repl.rules", "c2s /evil[0-9]+/\nboth nocase /bad[0-9]+/\n")
    env.ctl("filter", "import", "repl", rules, "--replace")
    first = filters_by_id(env, "repl")
    block(env, srv, port, EVIL, 2)
    wait_blocked(env, "repl", 2)
    env.ctl("filter", "import", "repl", rules, "--replace")
    again = filters_by_id(env, "repl")
    check(sorted(again) == sorted(first), "replace renumbered: %r -> %r", sorted(first),
          sorted(again))
    evil = [f for f in again.values() if f["regex"] == "evil[0-9]+"][0]
    check(evil["blocked"] == 2, "replace zeroed the count: %r", evil)
    env.ctl("service", "rm", "--yes", sid)


@test
def sync_twice_changes_nothing(env):
    sid, port = env.service("sync")
    srv = env.tcp_server(port)
    old = env.filter("sync", "gone[0-9]+")
    rules = write(env, "sync.rules", "c2s /evil[0-9]+/\n/bad[0-9]+/\n")
    p = env.ctl_raw("filter", "import", "sync", rules, "--sync", json_out=False)
    check(p.returncode == 0, "sync: %s", p.stderr)
    check("- filter %d sync" % old in p.stdout, "the removed filter is not in the diff: %r",
          p.stdout)
    check(p.stdout.count("+ filter") == 2, "two added filters expected in: %r", p.stdout)
    fs = filters_by_id(env, "sync")
    check(sorted(f["regex"] for f in fs.values()) == ["bad[0-9]+", "evil[0-9]+"],
          "after sync: %r", fs)
    bad_id = [i for i, f in fs.items() if f["regex"] == "bad[0-9]+"][0]
    block(env, srv, port, EVIL, 2)
    wait_blocked(env, "sync", 2)
    env.ctl("filter", "disable", bad_id)
    hist = len(env.ctl("history", "--limit", "1000"))
    # the same file again: no change at all (ids, counters, the disabled state; no history)
    p = env.ctl_raw("filter", "import", "sync", rules, "--sync", json_out=False)
    check(p.returncode == 0 and p.stdout.startswith("no change"), "second sync: %r %r",
          p.stdout, p.stderr)
    doc = env.ctl("filter", "import", "sync", rules, "--sync")
    check(all(d["op"] == "keep" for d in doc["diff"]), "third sync changed: %r", doc["diff"])
    fs2 = filters_by_id(env, "sync")
    check(sorted(fs2) == sorted(fs), "ids changed: %r -> %r", sorted(fs), sorted(fs2))
    check(not fs2[bad_id]["active"], "sync re-enabled a disabled filter")
    check(sum(f["blocked"] for f in fs2.values()) == 2, "counts changed: %r", fs2)
    check(len(env.ctl("history", "--limit", "1000")) == hist, "a sync that changed nothing "
          "was recorded")
    passes(env, srv, port, b"z " + BAD)  # still disabled
    block(env, srv, port, EVIL, 1)
    env.ctl("service", "rm", "--yes", sid)


@test
def sync_of_only_an_action_keeps_the_filter(env):
    """Issue 24: a --sync that only switches a line to log (or gives it a label) keeps the
    filter (its id, its BLOCKED count) and reports one change, in words."""
    sid, port = env.service("syncact")
    srv = env.tcp_server(port)
    env.ctl("filter", "import", "syncact", write(env, "act1.rules", "c2s /evil[0-9]+/\n"),
            "--sync")
    fs = env.filters("syncact")
    check(len(fs) == 1, "after the first sync: %r", fs)
    fid = fs[0]["id"]
    block(env, srv, port, EVIL, 2)
    wait_blocked(env, "syncact", 2)
    rules = write(env, "act2.rules", 'c2s log label="watch it" /evil[0-9]+/\n')
    p = env.ctl_raw("filter", "import", "syncact", rules, "--sync", json_out=False)
    check(p.returncode == 0, "sync: %r", p.stderr)
    check("0 added, 0 removed, 1 changed, 0 unchanged" in p.stdout, "the summary: %r", p.stdout)
    check("~ filter %d syncact c2s /evil[0-9]+/ log: action block -> log, label none -> "
          "'watch it'" % fid in p.stdout, "the change line: %r", p.stdout)
    check("+ filter" not in p.stdout and "- filter" not in p.stdout,
          "the action change shows as a removal and an addition: %r", p.stdout)
    fs = env.filters("syncact")
    check(len(fs) == 1 and fs[0]["id"] == fid, "the filter got a new id: %d -> %r", fid, fs)
    check(fs[0]["blocked"] == 2, "its BLOCKED count was not kept: %r", fs[0])
    check(fs[0].get("action") == "log" and fs[0].get("label") == "watch it",
          "the action or label was not taken: %r", fs[0])
    # it really is log-only now: the exploit passes (and is counted as matched)
    passes(env, srv, port, b"y " + EVIL)
    # and back, in JSON: one change, the same id again
    doc = env.ctl("filter", "import", "syncact", write(env, "act3.rules", "c2s /evil[0-9]+/\n"),
                  "--sync")
    ch = [d for d in doc["diff"] if d["op"] != "keep"]
    check(len(ch) == 1 and ch[0]["op"] == "change" and ch[0]["id"] == fid and
          ch[0]["action"] == "block" and "action log -> block" in ch[0]["what"],
          "the way back: %r", doc["diff"])
    block(env, srv, port, EVIL, 1)
    it.wait_until(lambda: env.filters("syncact")[0]["blocked"] >= 3, timeout=5)
    check(env.filters("syncact")[0]["blocked"] == 3, "counts: %r", env.filters("syncact"))
    env.ctl("service", "rm", "--yes", sid)


@test
def dry_run_changes_nothing(env):
    sid, port = env.service("dry")
    srv = env.tcp_server(port)
    keep = env.filter("dry", "evil[0-9]+")
    before = env.filters("dry")
    rules = write(env, "dry.rules", "/bad[0-9]+/\n")
    doc = env.ctl("filter", "import", "dry", rules, "--sync", "--dry-run")
    check(doc["dry_run"] is True, "not a dry run: %r", doc)
    ops = sorted((d["op"], d.get("regex")) for d in doc["diff"])
    check(ops == [("add", "bad[0-9]+"), ("rm", "evil[0-9]+")], "dry-run diff: %r", ops)
    check(env.filters("dry") == before, "a dry run changed the filters")
    block(env, srv, port, EVIL, 1)   # the old filter still blocks
    passes(env, srv, port, b"w " + BAD)  # the new one was never applied
    # a whole-configuration import with --dry-run: the diff, nothing done
    backup = os.path.join(env.tmp, "dry.json")
    env.ctl("export", backup)
    with open(backup) as f:
        cfg = json.load(f)
    cfg["services"] = [s for s in cfg["services"] if s["id"] != sid]
    smaller = write(env, "smaller.json", json.dumps(cfg))
    p = env.ctl_raw("import", smaller, "--dry-run", json_out=False)
    check(p.returncode == 0, "import --dry-run: %s", p.stderr)
    check("- service %d dry" % sid in p.stdout and "dry run" in p.stdout,
          "import --dry-run printed %r", p.stdout)
    check(env.service_doc("dry")["id"] == sid, "import --dry-run removed the service")
    check(list(filters_by_id(env, "dry")) == [keep], "import --dry-run changed the filters")
    block(env, srv, port, EVIL, 1)
    env.ctl("service", "rm", "--yes", sid)


@test
def duplicate_refused_with_id(env):
    sid, port = env.service("dup")
    fid = env.filter("dup", "evil[0-9]+", dir="c2s")
    p = env.ctl_raw("filter", "add", "dup", "evil[0-9]+", "--dir", "c2s")
    check(p.returncode == 5, "an identical filter: exit %d (%s)", p.returncode, p.stderr)
    check("identical to filter %d" % fid in p.stderr, "the error does not name %d: %r", fid,
          p.stderr)
    # another direction or case is another filter
    env.filter("dup", "evil[0-9]+", dir="s2c")
    env.filter("dup", "evil[0-9]+", dir="c2s", nocase=True)
    # through a ruleset import too (adding, not replacing)
    rules = write(env, "dup.rules", "/ok/\nc2s /evil[0-9]+/\n")
    p = env.ctl_raw("filter", "import", "dup", rules)
    check(p.returncode == 5 and "line 2: identical to filter %d" % fid in p.stderr,
          "import of a duplicate: exit %d, %r", p.returncode, p.stderr)
    check(len(env.filters("dup")) == 3, "a refused import added something")
    twice = write(env, "twice.rules", "/a1/\n/a1/\n")
    p = env.ctl_raw("filter", "import", "dup", twice, "--sync")
    check(p.returncode == 5 and "identical to line 1" in p.stderr, "duplicate lines: %d %r",
          p.returncode, p.stderr)
    env.ctl("service", "rm", "--yes", sid)


@test
def stats_history_after_blocks_and_restart(env):
    sid, port = env.service("rates")
    srv = env.tcp_server(port)
    f1 = env.filter("rates", "evil[0-9]+")
    f2 = env.filter("rates", "bad[0-9]+")
    block(env, srv, port, EVIL, 3)
    block(env, srv, port, BAD, 1)
    wait_blocked(env, "rates", 4)

    def series():
        doc = env.ctl("stats", "--history", "rates", "--since", "1h")
        return {(s["obj"], s["id"]): s for s in doc["series"] if s["kind"] == "blocked"}

    s = series()
    check(s.get(("service", sid), {}).get("total") == 4, "service series: %r", s)
    check(s.get(("filter", f1), {}).get("total") == 3, "filter %d series: %r", f1, s)
    check(s.get(("filter", f2), {}).get("total") == 1, "filter %d series: %r", f2, s)
    # a filter removed right after its block (before the rates are written, every 5 s): its
    # block stays in the service's rate, as in its total
    f3 = env.filter("rates", "gone[0-9]+")
    block(env, srv, port, b"gone77", 1)
    wait_blocked(env, "rates", 5)
    env.ctl("filter", "rm", f3)
    s = series()
    check(s.get(("service", sid), {}).get("total") == 5, "service series after rm: %r", s)
    check(("filter", f3) not in s, "a removed filter's series listed: %r", s)
    now = time.time()
    for pt in s[("service", sid)]["minutes"]:
        check(now - 180 < pt["time"] <= now, "a minute outside the last minutes: %r", pt)
    restart(env)
    s2 = series()
    check(s2.get(("service", sid), {}).get("total") == 5, "after a restart: %r", s2)
    block(env, srv, port, EVIL, 1)
    wait_blocked(env, "rates", 6)
    check(series()[("filter", f1)]["total"] == 4, "a block after the restart not counted")
    p = env.ctl_raw("stats", "--history", "rates", json_out=False)
    check(p.returncode == 0 and "rates" in p.stdout and "#%d" % f1 in p.stdout,
          "the table: %r %r", p.stdout, p.stderr)
    env.ctl("service", "rm", "--yes", sid)


if __name__ == "__main__":
    sys.exit(it.run_module("counters"))
