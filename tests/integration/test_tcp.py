#!/usr/bin/python3
"""Integration: TCP services on the nfqueue layer, IPv4 and IPv6, driven through fgexctl.

Each test adds a service of its own on a port of its own, so tests do not see each other's
filters; a filtered exchange always runs right after the fgexctl command that set it up, which
also checks that a change is applied when the command returns."""
import json
import os
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fgxit as it  # noqa: E402
from fgxit import EVIL, SRV4, SRV6, check, test  # noqa: E402

MIB = 1024 * 1024


class Conv:
    """A TCP server on one port and the connections the test makes to it."""

    def __init__(self, env, port, reply=None):
        self.env = env
        self.port = port
        self.srv = env.tcp_server(port, reply=reply)
        self.n = 0

    def run(self, host, steps):
        self.n += 1
        c = self.env.tcp_client(host, self.port, steps)
        if not c["connected"]:
            raise AssertionError("client could not connect to %s:%d: %s" %
                                 (host, self.port, c["end"]))
        return c, it.server_conn(self.srv, self.n)


def hosts():
    return (("v4", SRV4), ("v6", SRV6))


@test
def status_lists_nfq_worker(env):
    st = env.ctl("status")
    for k in ("version", "uptime", "services", "workers"):
        check(k in st, "status --json has no %r: %r", k, st)
    nfq = [w for w in st["workers"] if w.get("kind") == "nfq"]
    check(len(nfq) == 1, "expected one nfq worker, got %r", st["workers"])
    w = nfq[0]
    check(isinstance(w.get("pid"), int) and w["pid"] > 0, "worker pid %r", w.get("pid"))
    check(it.pid_alive(w["pid"]), "worker pid %d is not a live process", w["pid"])
    check(w.get("state") == "running", "worker state %r", w.get("state"))
    with open("/proc/%d/comm" % w["pid"]) as f:
        check("nfqworker" in f.read(), "pid %d is not an nfqworker", w["pid"])


@test
def service_list_fields(env):
    sid, port = env.service("fields", "tcp")
    env.filter("fields")
    s = env.service_doc("fields")
    for k in ("id", "name", "proto", "ip", "port", "layer", "status", "fail_open", "midstream",
              "filters", "blocked"):
        check(k in s, "service list entry has no %r: %r", k, s)
    check(s["id"] == sid, "id %r != %r", s["id"], sid)
    check(s["proto"] == "tcp" and s["port"] == port, "proto/port %r", s)
    check(s["layer"] == "nfqueue", "default layer %r", s["layer"])
    check(s["status"] == "active", "a new service is %r, expected active", s["status"])
    check(s["fail_open"] is False, "fail_open default %r", s["fail_open"])
    check(s["midstream"] == "reset", "midstream default %r, expected reset", s["midstream"])
    check(s["filters"] == 1 and s["blocked"] == 0, "filters/blocked %r", s)
    f = env.filters("fields")
    check(len(f) == 1, "filter list %r", f)
    for k in ("id", "regex", "dir", "nocase", "active", "blocked"):
        check(k in f[0], "filter list entry has no %r: %r", k, f[0])
    check(f[0]["regex"] == it.REGEX and f[0]["dir"] == "both" and f[0]["nocase"] is False
          and f[0]["active"] is True and f[0]["blocked"] == 0, "filter entry %r", f[0])
    shown = env.ctl("service", "show", sid)
    shown = shown[0] if isinstance(shown, list) else shown
    check(shown.get("name") == "fields", "service show by id: %r", shown)
    # the human-readable table, and the URL taken from $FGEX_URL
    p = subprocess.run([os.path.join(env.bin, "fgexctl"), "service", "list"], capture_output=True,
                       text=True, timeout=10, env=dict(os.environ, FGEX_URL=env.url))
    check(p.returncode == 0 and "fields" in p.stdout and str(port) in p.stdout,
          "fgexctl service list via $FGEX_URL: exit %d, %r %r", p.returncode, p.stdout[:300],
          p.stderr[:200])
    env.ctl("service", "rm", "--yes", "--yes", "fields")
    check(all(x.get("name") != "fields" for x in env.services()), "service rm left it listed")


@test
def no_filter_passes(env):
    _, port = env.service("nofilter", "tcp")
    conv = Conv(env, port, reply=b"pong evil1337 reply")
    for fam, host in hosts():
        sent = b"hello " + EVIL + b" " + fam.encode()
        c, s = conv.run(host, [sent, ("read", 0.3)])
        it.assert_passed(c, s, sent, reply=b"pong evil1337 reply")


@test
def match_blocked_both_ends_reset(env):
    _, port = env.service("block", "tcp")
    env.filter("block")
    conv = Conv(env, port)
    for fam, host in hosts():
        c, s = conv.run(host, [b"GET /flag?x=" + EVIL + b"\n"])
        it.assert_blocked(c, s)
        # the same service still carries clean traffic
        clean = b"GET /index " + fam.encode() + b"\n"
        c, s = conv.run(host, [clean])
        it.assert_passed(c, s, clean)


@test
def match_split_over_two_segments(env):
    _, port = env.service("split", "tcp")
    env.filter("split")
    conv = Conv(env, port)
    for _, host in hosts():
        c, s = conv.run(host, [b"ev", 0.2, b"il1337"])
        it.assert_blocked(c, s)
        check(b"il1337" not in s["data"], "server got the segment that completed the match")


@test
def nocase_and_case_sensitive(env):
    _, p1 = env.service("nocase", "tcp")
    env.filter("nocase", "EVIL[0-9]+", nocase=True)
    conv = Conv(env, p1)
    for _, host in hosts():
        c, s = conv.run(host, [b"x eViL1337 y"])
        it.assert_blocked(c, s, forbidden=b"eViL1337")
    _, p2 = env.service("case", "tcp")
    env.filter("case", "evil[0-9]+")
    conv = Conv(env, p2)
    for _, host in hosts():
        sent = b"x EVIL1337 eVil42 y"
        c, s = conv.run(host, [sent])
        it.assert_passed(c, s, sent)
        c, s = conv.run(host, [b"x evil1337 y"])
        it.assert_blocked(c, s)


@test
def dir_c2s_blocks_client_data_only(env):
    _, port = env.service("c2s", "tcp")
    env.filter("c2s", dir="c2s")
    check(env.filters("c2s")[0]["dir"] == "c2s", "filter list dir: %r", env.filters("c2s"))
    conv = Conv(env, port, reply=b"flag " + EVIL)
    for _, host in hosts():
        # the server's reply carries the pattern: a c2s filter lets it through
        c, s = conv.run(host, [b"hello", ("read", 0.5)])
        it.assert_passed(c, s, b"hello", reply=b"flag " + EVIL)
        c, s = conv.run(host, [b"hello " + EVIL])
        it.assert_blocked(c, s)


@test
def dir_s2c_blocks_server_reply(env):
    _, port = env.service("s2c", "tcp")
    env.filter("s2c", dir="s2c")
    conv = Conv(env, port, reply=b"flag " + EVIL)
    for _, host in hosts():
        c, s = conv.run(host, [b"hello", ("read", 0.5)])
        it.assert_blocked(c, s)
    _, port = env.service("s2c-ok", "tcp")
    env.filter("s2c-ok", dir="s2c")
    conv = Conv(env, port, reply=b"fine")
    for _, host in hosts():
        # client data matching an s2c filter passes
        sent = b"hello " + EVIL
        c, s = conv.run(host, [sent, ("read", 0.3)])
        it.assert_passed(c, s, sent, reply=b"fine")


@test
def dir_both_blocks_server_reply(env):
    _, port = env.service("both", "tcp")
    env.filter("both")
    conv = Conv(env, port, reply=b"flag " + EVIL)
    c, s = conv.run(SRV4, [b"hello", ("read", 0.5)])
    it.assert_blocked(c, s)


@test
def filter_disable_enable_rm(env):
    _, port = env.service("toggle", "tcp")
    fid = env.filter("toggle")
    conv = Conv(env, port)
    sent = b"x " + EVIL
    c, s = conv.run(SRV4, [sent])
    it.assert_blocked(c, s)
    env.ctl("filter", "disable", fid)
    check(env.filters("toggle")[0]["active"] is False, "disabled filter still active")
    c, s = conv.run(SRV4, [sent])
    it.assert_passed(c, s, sent)
    env.ctl("filter", "enable", fid)
    check(env.filters("toggle")[0]["active"] is True, "enabled filter not active")
    c, s = conv.run(SRV6, [sent])
    it.assert_blocked(c, s)
    env.ctl("filter", "rm", fid)
    check(env.filters("toggle") == [], "filter list after rm: %r", env.filters("toggle"))
    c, s = conv.run(SRV6, [sent])
    it.assert_passed(c, s, sent)


@test
def service_stop_start_rm(env):
    _, port = env.service("stopme", "tcp")
    env.filter("stopme")
    conv = Conv(env, port)
    sent = b"x " + EVIL
    c, s = conv.run(SRV4, [sent])
    it.assert_blocked(c, s)
    env.ctl("service", "stop", "stopme")
    check(env.service_doc("stopme")["status"] == "stopped", "status after stop")
    c, s = conv.run(SRV4, [sent])
    it.assert_passed(c, s, sent)
    c, s = conv.run(SRV6, [sent])
    it.assert_passed(c, s, sent)
    env.ctl("service", "start", "stopme")
    check(env.service_doc("stopme")["status"] == "active", "status after start")
    c, s = conv.run(SRV4, [sent])
    it.assert_blocked(c, s)
    env.ctl("service", "rm", "--yes", "--yes", "stopme")
    check(all(x.get("name") != "stopme" for x in env.services()), "service still listed")
    c, s = conv.run(SRV4, [sent])
    it.assert_passed(c, s, sent)


@test
def service_set_rename_and_fail_open(env):
    sid, p1 = env.service("setme", "tcp")
    env.filter("setme")
    p2 = env.port()
    conv1, conv2 = Conv(env, p1), Conv(env, p2)
    env.ctl("service", "set", "setme", "--port", p2)
    check(env.service_doc("setme")["port"] == p2, "port not changed")
    c, s = conv2.run(SRV4, [b"x " + EVIL])
    it.assert_blocked(c, s)
    c, s = conv1.run(SRV4, [b"x " + EVIL])
    it.assert_passed(c, s, b"x " + EVIL)
    env.ctl("service", "rename", "setme", "renamed")
    s = env.service_doc("renamed")
    check(s["id"] == sid, "rename changed the id: %r", s)
    env.ctl("service", "set", "renamed", "--fail-open", "on")
    check(env.service_doc("renamed")["fail_open"] is True, "fail_open not set")
    c, s = conv2.run(SRV6, [b"y " + EVIL])
    it.assert_blocked(c, s)
    env.ctl("service", "set", sid, "--fail-open", "off")
    check(env.service_doc("renamed")["fail_open"] is False, "fail_open not cleared")
    fo, _ = env.service("fo", "tcp", extra=("--fail-open",))
    check(env.service_doc("fo")["fail_open"] is True, "service add --fail-open not stored")
    env.ctl("service", "set", "renamed", "--midstream", "scan")
    check(env.service_doc("renamed")["midstream"] == "scan", "--midstream scan not stored")
    env.ctl("service", "set", "renamed", "--midstream", "reset")
    check(env.service_doc("renamed")["midstream"] == "reset", "--midstream reset not stored")
    env.service("ms", "tcp", extra=("--midstream", "scan"))
    check(env.service_doc("ms")["midstream"] == "scan", "service add --midstream not stored")
    p = env.ctl_raw("service", "set", "ms", "--midstream", "pass")
    check(p.returncode != 0 and "reset or scan" in p.stderr, "--midstream pass: %d %r",
          p.returncode, p.stderr)
    p = env.ctl_raw("service", "add", "dup", "--proto", "tcp", "--port", p2)
    check(p.returncode != 0 and p.stderr.strip(), "a second service on port %d was accepted", p2)
    p = env.ctl_raw("service", "add", "renamed", "--proto", "tcp", "--port", env.port())
    check(p.returncode != 0, "a second service named 'renamed' was accepted")


@test
def counters_count_blocked_connections(env):
    _, port = env.service("count", "tcp")
    f_evil = env.filter("count")
    f_other = env.filter("count", "bad[a-z]{3}stuff")
    conv = Conv(env, port)
    for host in (SRV4, SRV6, SRV4):
        c, s = conv.run(host, [b"a " + EVIL, 0.1, b" more " + EVIL])
        it.assert_blocked(c, s)
    c, s = conv.run(SRV6, [b"clean"])
    it.assert_passed(c, s, b"clean")

    def blocked():
        return {f["id"]: f["blocked"] for f in env.filters("count")}

    # statistics stream back from the worker: give them a moment, then demand the exact count
    it.wait_until(lambda: blocked()[f_evil] >= 3, timeout=4)
    got = blocked()
    check(got[f_evil] == 3, "filter blocked=%r, expected 3 blocked connections", got[f_evil])
    check(got[f_other] == 0, "untouched filter blocked=%r", got[f_other])
    it.wait_until(lambda: env.service_doc("count")["blocked"] >= 3, timeout=2)
    sv = env.service_doc("count")
    check(sv["blocked"] == 3, "service list blocked=%r, expected 3", sv["blocked"])


@test
def invalid_regex_refused(env):
    env.service("badre", "tcp")
    env.filter("badre")
    before = env.filters("badre")
    for bad in ("evil(", "a{2,1}", "[z-a]"):
        p = env.ctl_raw("filter", "add", "badre", bad)
        check(p.returncode != 0, "invalid regex %r accepted: %r", bad, p.stdout)
        err = p.stderr.strip()
        check(err and len(err.splitlines()) == 1, "stderr is not one line: %r", p.stderr)
        p = env.ctl_raw("filter", "add", "badre", bad, json_out=False)
        check(p.returncode != 0, "invalid regex %r accepted without --json", bad)
    check(env.filters("badre") == before, "filter list changed: %r", env.filters("badre"))
    check(env.service_doc("badre")["filters"] == 1, "service counts a refused filter")
    p = env.ctl_raw("filter", "add", "no-such-service", "x")
    check(p.returncode != 0 and p.stderr.strip(), "filter on an unknown service: rc %d",
          p.returncode)


@test
def regex_that_cannot_work_on_a_stream_refused(env):
    env.service("eod", "tcp")
    env.service("eod-u", "udp")
    before = env.filters("eod")
    # '$' is the end of the data: a TCP stream never gets there while it can be blocked
    for bad in ("$", "evil[0-9]+$", "evil\\z", "evil\\Z"):
        for json_out in (True, False):
            p = env.ctl_raw("filter", "add", "eod", bad, json_out=json_out)
            check(p.returncode == 4, "%r accepted on a TCP service (rc %d): %r", bad,
                  p.returncode, p.stdout)
            check("end of the data" in p.stderr and len(p.stderr.strip().splitlines()) == 1,
                  "%r: reason %r", bad, p.stderr)
        # on UDP a datagram is scanned whole: there '$' is its end and works ('$' alone matches
        # every datagram: it needs --force)
        env.ctl("filter", "add", "eod-u", bad, *(["--force"] if bad == "$" else []))
    check(env.filters("eod") == before, "a refused filter was stored: %r", env.filters("eod"))
    # the empty-match refusal speaks of what it would do, not of a hyperscan flag
    p = env.ctl_raw("filter", "add", "eod", ".*")
    check(p.returncode == 4 and "would match every connection" in p.stderr
          and "ALLOWEMPTY" not in p.stderr, "'.*': rc %d %r", p.returncode, p.stderr)
    # service set --proto udp -> tcp re-checks the filters under stream mode
    p = env.ctl_raw("service", "set", "eod-u", "--proto", "tcp")
    check(p.returncode == 4 and "end of the data" in p.stderr, "set --proto tcp: rc %d %r",
          p.returncode, p.stderr)
    for n in ("eod", "eod-u"):
        env.ctl("service", "rm", "--yes", "--yes", n)


@test
def regex_likely_to_block_honest_traffic_warned(env):
    _, port = env.service("lint", "tcp")
    # (\\b and . need --force now: test_force.py)
    cases = (("\\b", "it matches any connection", "--force"), ("a", "as few as 1 byte"),
             ("ab", "as few as 2 bytes"), ("^GET /flag", "start of the connection's stream"),
             ("evil[0-9]+(\\n|$)", "never match on a TCP stream"))
    for regex, why, *force in cases:
        p = env.ctl_raw("filter", "add", "lint", regex, *force)
        check(p.returncode == 0, "%r refused: %r", regex, p.stderr)
        doc = json.loads(p.stdout)
        check(any(why in w for w in doc.get("warnings", [])), "%r: --json warnings %r", regex,
              doc.get("warnings"))
        check("warning" in p.stderr and why in p.stderr, "%r: stderr %r", regex, p.stderr)
        check(p.stderr.count("\n") == len(doc["warnings"]), "one line per warning: %r",
              p.stderr)
        env.ctl("filter", "rm", doc["id"])
        p = env.ctl_raw("filter", "add", "lint", regex, *force, json_out=False)
        check(p.returncode == 0 and why in p.stderr and "id:" in p.stdout,
              "%r without --json: rc %d out %r err %r", regex, p.returncode, p.stdout, p.stderr)
        env.ctl("filter", "rm", p.stdout.split("id:")[1].split()[0])
    # an ordinary filter: no warnings at all
    p = env.ctl_raw("filter", "add", "lint", "evil[0-9]+")
    check(p.returncode == 0 and p.stderr == "" and "warnings" not in json.loads(p.stdout),
          "a plain filter warned: %r %r", p.stdout, p.stderr)
    # what the warning is about: \b blocks an honest request
    fid = json.loads(env.ctl_raw("filter", "add", "lint", "\\b", "--force").stdout)["id"]
    conv = Conv(env, port)
    c, s = conv.run(SRV4, [b"hello world"])
    it.assert_blocked(c, s, forbidden=b"hello world")
    env.ctl("filter", "rm", fid)
    # a ruleset file: each line's warnings, named by line, on the filter it became
    path = os.path.join(env.tmp, "lint.rules")
    with open(path, "w") as f:
        f.write("# game start\nc2s /evil[0-9]+x/\n\nboth /^PUT /\ns2c /a/\n")
    p = env.ctl_raw("filter", "import", "lint", path)
    check(p.returncode == 0, "import refused: %r", p.stderr)
    doc = json.loads(p.stdout)
    byre = {f["regex"]: f.get("warnings", []) for f in doc}
    check(byre.get("evil[0-9]+x") == [], "clean line warned: %r", byre)
    check(len(byre.get("^PUT ", [])) == 1 and byre["^PUT "][0].startswith("line 4: "),
          "line 4: %r", byre)
    check(len(byre.get("a", [])) == 1 and byre["a"][0].startswith("line 5: ")
          and "1 byte" in byre["a"][0], "line 5: %r", byre)
    check(p.stderr.count("warning") == 2 and "line 4" in p.stderr and "line 5" in p.stderr,
          "import stderr %r", p.stderr)
    p = env.ctl_raw("filter", "import", "lint", path, "--replace", json_out=False)
    check(p.returncode == 0 and "line 5" in p.stderr and "imported 3 filters" in p.stdout,
          "import without --json: %r %r", p.stdout, p.stderr)
    env.ctl("service", "rm", "--yes", "--yes", "lint")


@test
def service_ip_scope(env):
    _, port = env.service("scoped", "tcp", extra=("--ip", SRV4))
    env.filter("scoped")
    conv = Conv(env, port)
    c, s = conv.run(SRV4, [b"x " + EVIL])
    it.assert_blocked(c, s)
    sent = b"y " + EVIL
    c, s = conv.run(SRV6, [sent])
    it.assert_passed(c, s, sent)


@test
def service_ip_v4mapped_filters_ipv4(env):
    # ::ffff:10.77.0.1 is how a dual-stack socket names an IPv4 peer; the packets on the wire
    # are IPv4, so the service must be the IPv4 address, not an IPv6 rule that never matches.
    for n, ip in enumerate(("::ffff:" + SRV4, "::ffff:10.77.0.0/120")):
        name = "mapped%d" % n
        _, port = env.service(name, "tcp", extra=("--ip", ip))
        want = SRV4 if n == 0 else "10.77.0.0/24"
        check(env.service_doc(name)["ip"] == want, "--ip %s stored as %r", ip,
              env.service_doc(name)["ip"])
        env.filter(name)
        conv = Conv(env, port)
        c, s = conv.run(SRV4, [b"x " + EVIL])
        it.assert_blocked(c, s)
        sent = b"y " + EVIL
        c, s = conv.run(SRV6, [sent])
        it.assert_passed(c, s, sent)
        env.ctl("service", "rm", "--yes", "--yes", name)
    # service set --ip takes the same path
    _, port = env.service("mapped-set", "tcp")
    env.ctl("service", "set", "mapped-set", "--ip", "::ffff:" + SRV4)
    check(env.service_doc("mapped-set")["ip"] == SRV4, "service set stored %r",
          env.service_doc("mapped-set")["ip"])
    env.ctl("service", "rm", "--yes", "--yes", "mapped-set")


@test
def connection_open_before_service_is_inspected(env):
    port = env.port()
    srv = env.tcp_server(port)
    for n, host in enumerate((SRV4, SRV6), start=1):
        name = "late%d" % n
        cl = env.tcp_client(host, port, [b"hello", "wait", b"now " + EVIL], timeout=3,
                            wait=False)
        got = srv.wait_event(lambda e: e.get("event") == "data" and e.get("id") == n, 4)
        check(got is not None, "the pre-existing connection carried no data")
        env.service(name, "tcp", port=port)
        env.filter(name)
        cl.tell()
        c = it.client_result(cl, 15)
        s = it.server_conn(srv, n)
        check(s["data"].startswith(b"hello"), "server data %r", s["data"])
        it.assert_blocked(c, s)
        env.ctl("service", "rm", "--yes", "--yes", name)


@test
def large_transfer_loopback_intact(env):
    # loopback's 64 KiB segments exceed the NFQUEUE copy range
    _, port = env.service("bulk", "tcp")
    env.filter("bulk")
    env.filter("bulk", "x{3}y[0-9]+z", dir="s2c")
    srv = env.tcp_server(port, sink=True)
    n = 0
    for host in ("127.0.0.1", "::1"):
        n += 1
        h = env.helper(env.srv, "bulk-client", "--host", host, "--port", port, "--size",
                       5 * MIB, "--timeout", 20)
        c = it.client_result(h, 30)
        s = it.server_conn(srv, n, timeout=20)
        check(c["end"] == "eof" and c["sent"] == 5 * MIB, "client %r", c)
        check(s["end"] == "eof" and s["bytes"] == 5 * MIB, "server got %d bytes, end %s",
              s["bytes"], s["end"])
        check(s["sha256"] == c["sha256"], "checksum differs over %s", host)


@test
def large_transfer_veth_intact(env):
    _, port = env.service("bulk6", "tcp")
    env.filter("bulk6")
    srv = env.tcp_server(port, sink=True)
    for n, host in enumerate((SRV6, SRV4), start=1):
        h = env.helper(env.cli, "bulk-client", "--host", host, "--port", port, "--size",
                       5 * MIB, "--timeout", 20)
        c = it.client_result(h, 30)
        s = it.server_conn(srv, n, timeout=20)
        check(c["end"] == "eof" and s["bytes"] == 5 * MIB and s["sha256"] == c["sha256"],
              "transfer over %s: client %r, server %d bytes end %s", host, c, s["bytes"],
              s["end"])


@test
def large_transfer_with_match_deep_inside_blocked(env):
    _, port = env.service("bulkevil", "tcp")
    env.filter("bulkevil")
    srv = env.tcp_server(port, sink=True)
    at = 3 * MIB + 12345
    for n, (ns, host) in enumerate(((env.srv, "127.0.0.1"), (env.cli, SRV6)), start=1):
        h = env.helper(ns, "bulk-client", "--host", host, "--port", port, "--size", 5 * MIB,
                       "--insert", EVIL.hex(), "--at", at, "--timeout", 20)
        c = it.client_result(h, 30)
        s = it.server_conn(srv, n, timeout=20)
        check(s["bytes"] < at + len(EVIL), "server received %d bytes, past the match at %d (%s)",
              s["bytes"], at, host)
        check(c["end"] == "reset", "client ended by %s over %s, expected reset", c["end"], host)
        check(s["end"] == "reset", "server ended by %s over %s, expected reset", s["end"], host)


def _queued(env):
    """Packets that went through the namespace's NFQUEUE queues (their id_sequence)."""
    out = it.sh("ip", "netns", "exec", env.srv, "cat", "/proc/net/netfilter/nfnetlink_queue")
    return sum(int(line.split()[7]) for line in out.stdout.splitlines() if line.strip())


def _worker_counter(env, key):
    return sum(int(w.get(key, 0)) for w in env.ctl("worker", "list") if w.get("kind") == "nfq")


@test
def bulk_whole_gso_packets_never_truncated(env):
    # The worker asks for whole GSO packets (up to 64 KiB each) and the copy range is 65531:
    # honest bulk traffic must arrive whole (the MSS clamp keeps loopback's segments under it),
    # over far fewer queue trips than 1500-byte segments would take.
    _, port = env.service("gso", "tcp")
    env.filter("gso")
    srv = env.tcp_server(port, sink=True)
    t0, q0 = _worker_counter(env, "truncated"), _queued(env)
    for n, (ns, host) in enumerate(((env.cli, SRV4), (env.srv, "127.0.0.1")), start=1):
        h = env.helper(ns, "bulk-client", "--host", host, "--port", port, "--size", 8 * MIB,
                       "--timeout", 20)
        c = it.client_result(h, 30)
        s = it.server_conn(srv, n, timeout=20)
        check(c["end"] == "eof" and s["bytes"] == 8 * MIB and s["sha256"] == c["sha256"],
              "transfer over %s: client %r, server %d bytes end %s", host, c, s["bytes"],
              s["end"])
        if n == 1:
            q = _queued(env) - q0
            check(q < (8 * MIB // 1448) // 2, "veth: %d packets queued for %d segments' worth: "
                  "GSO packets are not queued whole", q, 8 * MIB // 1448)
    check(_worker_counter(env, "truncated") == t0, "the worker saw truncated packets")


def short_connection_trips(env, conv, host, want):
    """One short request/reply connection over host passes, through exactly want queue trips."""
    q0 = _queued(env)
    c, s = conv.run(host, [b"hello", ("read", 0.5)])
    it.assert_passed(c, s, b"hello", reply=b"fine")
    q = _queued(env) - q0
    check(q == want, "a short connection over %s took %d queue trips, expected %d", host, q, want)


@test
def short_connection_costs_two_queue_trips(env):
    # Queued: the request and the reply. Not queued: the handshake (the server's SYN-ACK is
    # copied to the worker through NFLOG, and anchors both streams), pure ACKs, FINs.
    _, port = env.service("short", "tcp")
    env.filter("short")
    env.filter("short", dir="s2c")
    conv = Conv(env, port, reply=b"fine")
    for _, host in hosts():
        short_connection_trips(env, conv, host, 2)
    # The reply direction is still scanned from its first byte.
    conv = Conv(env, env.service("short2", "tcp")[1], reply=b"flag " + EVIL)
    env.filter("short2", dir="s2c")
    for _, host in hosts():
        c, s = conv.run(host, [b"hello", ("read", 0.5)])
        it.assert_blocked(c, s)



@test
def without_the_log_expression_the_synack_is_queued(env):
    # What controld does on a kernel without the nftables log expression (forced here with
    # --no-synack-log): no SYN-ACK copies, the server's SYN-ACK queued instead, and filtering
    # the same.
    env.stop_controld(signal.SIGTERM)
    env.start_controld(extra_args=["--no-synack-log"])
    try:
        _, port = env.service("nolog", "tcp")
        env.filter("nolog")
        rules = it.sh("ip", "netns", "exec", env.srv, "nft", "list", "table", "inet",
                      "fgex").stdout
        check("synack" not in rules and "log group" not in rules,
              "SYN-ACKs are still copied:\n%s", rules)
        with open("/proc/%d/cmdline" % env.worker_pid()[0], "rb") as f:
            check(b"--no-synack-log" in f.read(), "the worker was not told")
        conv = Conv(env, port, reply=b"fine")
        for _, host in hosts():
            short_connection_trips(env, conv, host, 3)
            c, s = conv.run(host, [b"ev", ("sleep", 0.1), b"il1337"])
            it.assert_blocked(c, s)
    finally:
        env.stop_controld(signal.SIGTERM)
        env.start_controld()

if __name__ == "__main__":
    sys.exit(it.run_module("tcp"))
