#!/usr/bin/python3
"""Integration: every endpoint family of the web API's /api/cmd/... (issue 18, docs/web.md),
through the real HTTPS server, logged in as a page, from the client namespace: services,
filters (with a regex tested on the capture, import and export), events and a blocked
connection's pcap and raw bytes, stats and their history, the change history with undo, the
firewall, a script file refused at its line, backup export and import, workers, status and
the certificate, a password change, and every session ending with --expire-sessions. Each
JSON reply is compared with `fgexctl --json`'s for the same command where it is fixed (one
definition serves both); a change the page makes is seen by fgexctl. A change that compiles
does not hold the page's other requests."""
import base64
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fgxit as it  # noqa: E402
from fgxit import EVIL, SRV4, check, test  # noqa: E402
import fgxweb as wa  # noqa: E402

WEB_PORT = 8444
ARGS = ["--web-listen", "%s:%d" % (SRV4, WEB_PORT), "--allow", "10.77.0.2/32"]
PASSWORD = "web-cmds-password-1"
S = {}
NSLOW = 600  # patterns of the compile that other requests must not wait for


def W():
    w = S.get("w")
    if w is None or w.p.poll() is not None or w.p.stdin.closed:
        w = S["w"] = wa.Web(S["env"], S["env"].cli, SRV4, WEB_PORT)
    return w


def setup(env):
    S["env"] = env
    S["pwfile"] = os.path.join(env.tmp, "pw")
    with open(S["pwfile"], "w") as f:
        f.write(PASSWORD + "\n")
    env.ctl("passwd", "--password-file", S["pwfile"])
    login()


def login(password=PASSWORD):
    r = wa.expect(W().req("POST", "/api/login", {"password": password}), 200, "login")
    S["tok"] = r["hdr"]["set-cookie"].split(";")[0].split("=", 1)[1]
    S["csrf"] = r["json"]["csrf"]


def get(cmd, status=200, **params):
    from urllib.parse import urlencode
    q = ("?" + urlencode(params)) if params else ""
    r = W().req("GET", "/api/cmd/" + cmd + q, cookie=S["tok"])
    return wa.expect(r, status, "GET " + cmd + q)


def post(cmd, params=None, status=200):
    r = W().req("POST", "/api/cmd/" + cmd, params if params is not None else {},
                cookie=S["tok"], csrf=S["csrf"])
    return wa.expect(r, status, "POST %s %r" % (cmd, params))


def same(web, cli, what):
    check(web == cli, "%s: the web's JSON differs from fgexctl --json's:\n web %r\n cli %r",
          what, web, cli)


@test
def web_cmd_services(env):
    port = env.port()
    r = post("service/add", {"name": "wsvc", "proto": "tcp", "port": port})
    check(r["json"].get("name") == "wsvc" and r["json"].get("port") == port, "add %r", r["json"])
    same(get("service/list")["json"], env.ctl("service", "list"), "service list")
    same(get("service/show", service="wsvc")["json"], env.ctl("service", "show", "wsvc"),
         "service show")
    r = post("service/set", {"service": "wsvc", "fail_open": "on"})
    check(env.service_doc("wsvc").get("fail_open") is True, "service set not applied: %r",
          env.service_doc("wsvc"))
    post("service/stop", {"service": "wsvc"})
    check(env.service_doc("wsvc").get("status") == "stopped", "service stop: %r",
          env.service_doc("wsvc"))
    post("service/start", {"service": "wsvc"})
    check(env.service_doc("wsvc").get("status") != "stopped", "service start: %r",
          env.service_doc("wsvc"))
    r = post("service/add", {"name": "wsvc", "proto": "tcp", "port": port}, status=409)
    check(r["json"].get("exit") == 5 and r["json"].get("error"), "duplicate %r", r["json"])
    r = get("service/show", status=404, service="nosuch")
    check(r["json"].get("exit") == 3, "unknown service %r", r["json"])
    r = post("service/add", {"name": "bad", "proto": "tcp", "port": "x"}, status=400)
    check(r["json"].get("exit") in (2, 4), "a bad port %r", r["json"])
    post("service/rm", {"service": "wsvc"})  # no "yes": the page asks first
    check("wsvc" not in [s["name"] for s in env.services()], "service rm did not remove")


@test
def web_cmd_filters_test_import_export(env):
    _, port = env.service("wflt", "tcp")
    srv = env.tcp_server(port)
    # traffic first: the capture the regex is tested on
    c, sport = env.tcp_conn(SRV4, port, [b"hello " + EVIL + b" tail"])
    it.assert_passed(c, it.server_conn_of(srv, sport), b"hello " + EVIL + b" tail")
    r = get("filter/test", service="wflt", regex=it.REGEX)
    same(r["json"], env.ctl("filter", "test", "wflt", it.REGEX), "filter test")
    hits = r["json"].get("hits") or []
    check(r["json"].get("would_block") == 1 and len(hits) == 1 and hits[0]["sport"] == sport
          and "evil1337" in hits[0]["excerpt"],
          "the web's filter test did not find the one connection with the hit: %r", r["json"])
    r = post("filter/add", {"service": "wflt", "regex": it.REGEX, "dir": "c2s",
                            "label": "from the web"})
    fid = r["json"]["id"]
    check(r["json"].get("regex") == it.REGEX and r["json"].get("label") == "from the web",
          "filter add %r", r["json"])
    # bytes that are not UTF-8 go as regex_b64, and arrive as bytes
    raw = b"\xff\xfe[0-9]"
    r = post("filter/add", {"service": "wflt", "regex_b64": base64.b64encode(raw).decode()})
    check(base64.b64decode(r["json"].get("regex_b64", "")) == raw, "regex_b64 %r", r["json"])
    same(get("filter/list", service="wflt")["json"], env.ctl("filter", "list", "wflt"),
         "filter list")
    c, sport = env.tcp_conn(SRV4, port, [b"x " + EVIL])
    it.assert_blocked(c, it.server_conn_of(srv, sport))
    post("filter/set", {"filter": fid, "action": "log"})
    check([f for f in env.filters("wflt") if f["id"] == fid][0].get("action") == "log",
          "filter set: %r", env.filters("wflt"))
    # the regex edited in place (issue 27), as bytes: the same id, the next revision
    edited = b"\xfdweb[0-9]+"
    r = post("filter/set", {"filter": fid, "regex_b64": base64.b64encode(edited).decode(),
                            "dir": "both", "nocase": True})
    f = [f for f in env.filters("wflt") if f["id"] == fid][0]
    check(r["json"].get("id") == fid and base64.b64decode(f.get("regex_b64", "")) == edited and
          f["revision"] == 1 and f["dir"] == "both" and f["nocase"], "filter set --regex: %r %r",
          r["json"], f)
    r = post("filter/set", {"filter": fid, "regex": "web(["}, status=400)
    check(r["json"].get("exit") == 4, "an invalid regex from the web: %r", r["json"])
    post("filter/set", {"filter": fid, "regex": it.REGEX, "dir": "c2s"})
    post("filter/disable", {"filter": fid})
    post("filter/enable", {"filter": fid})
    r = get("filter/export", service="wflt")
    cli = subprocess.run([os.path.join(env.bin, "fgexctl"), "-c", env.url, "--json", "filter",
                          "export", "wflt"], capture_output=True, timeout=15).stdout
    check(r["body"] == cli and b"from the web" in cli and b"//5bMC05XQ==" in cli,
          "filter export %r vs fgexctl --json's %r", r["body"][:300], cli[:300])
    post("filter/rm", {"filter": fid})
    check(fid not in [f["id"] for f in env.filters("wflt")], "filter rm did not remove")
    r = post("filter/import", {"service": "wflt", "file": "c2s /import[0-9]+/\nboth /two/\n",
                               "replace": True})
    regs = sorted(f["regex"] for f in env.filters("wflt"))
    check(regs == ["import[0-9]+", "two"], "filter import --replace: %r (%r)", regs, r["json"])
    r = post("filter/import", {"service": "wflt", "file": "c2s /ok/\nnonsense here\n"},
             status=400)
    check("2" in r["json"].get("error", ""), "a bad ruleset line is not named: %r", r["json"])
    check(sorted(f["regex"] for f in env.filters("wflt")) == regs, "a refused import changed")


@test
def web_cmd_events_capture_and_pcap(env):
    _, port = env.service("wev", "tcp")
    env.filter("wev")
    srv = env.tcp_server(port)
    c, sport = env.tcp_conn(SRV4, port, [b"LOGIN x\r\n", 0.2, b"give " + EVIL + b" now"])
    it.assert_blocked(c, it.server_conn_of(srv, sport))
    it.wait_until(lambda: env.ctl("events", "wev"), timeout=5)
    r = get("events", service="wev")
    same(r["json"], env.ctl("events", "wev"), "events")
    seq = r["json"][-1]["seq"]
    same(get("events/show", seq=seq)["json"], env.ctl("events", "show", seq), "events show")
    r = get("events/show", seq=seq, raw="true", dir="c2s")
    check(EVIL in r["body"] and r["hdr"].get("content-type") == "application/octet-stream",
          "events show raw: %r %r", r["hdr"].get("content-type"), r["body"][:100])
    r = get("events", top="src")
    same(r["json"], env.ctl("events", "--top", "src"), "events --top src")
    r = get("capture", service="wev", pcap="true", blocked="true")
    check(r["hdr"].get("content-type") == "application/vnd.tcpdump.pcap", "pcap type %r",
          r["hdr"].get("content-type"))
    disp = r["hdr"].get("content-disposition", "")
    check("attachment" in disp and "fgex-wev.pcap" in disp, "pcap disposition %r", disp)
    check(r["body"][:4] in (b"\xd4\xc3\xb2\xa1", b"\xa1\xb2\xc3\xd4", b"\x4d\x3c\xb2\xa1",
                            b"\xa1\xb2\x3c\x4d"), "not a pcap: %r", r["body"][:16])
    check(EVIL in r["body"], "the pcap lacks the blocked bytes")
    get("capture", status=404, service="nosuch", pcap="true")


@test
def web_cmd_filter_force_and_s2c_pcap_link(env):
    """A filter that matches any stream is refused with needs_force (the page asks, then sends
    force); an s2c block's event names the client, and the page's pcap link for it (built as
    web/views/events.js builds it) is a pcap of that very connection."""
    from urllib.parse import urlencode
    _, port = env.service("wfrc", "tcp")
    r = post("filter/add", {"service": "wfrc", "regex": "\\b"}, status=400)
    check(r["json"].get("needs_force") is True and "--force" in r["json"].get("error", ""),
          "no needs_force: %r", r["json"])
    check(env.filters("wfrc") == [], "refused, yet stored: %r", env.filters("wfrc"))
    r = post("filter/add", {"service": "wfrc", "regex": "\\b", "force": True})
    env.ctl("filter", "rm", r["json"]["id"])
    fid = post("filter/add", {"service": "wfrc", "regex": it.REGEX, "dir": "s2c"})["json"]["id"]
    srv = env.tcp_server(port, reply=b"flag=" + EVIL)
    c, sport = env.tcp_conn(SRV4, port, [b"hello", ("read", 0.5)])
    check(EVIL not in c.get("received", b""), "the leak reached the client: %r", c)
    ev = it.wait_until(lambda: [e for e in get("events", service="wfrc")["json"]
                                if e["filter_id"] == fid], timeout=5)
    check(ev and ev[0]["src"] == it.CLI4 and ev[0]["sport"] == sport, "the event %r", ev)
    e = ev[0]
    q = {"service": str(e["service_id"]), "pcap": "true", "src": e["src"]}
    if e["action"] == "block":
        q["blocked"] = "true"
    if e["filter_id"]:
        q["filter"] = str(e["filter_id"])
    r = W().req("GET", "/api/cmd/capture?" + urlencode(q), cookie=S["tok"])
    wa.expect(r, 200, "the event's pcap link")
    path = os.path.join(env.tmp, "wfrc.pcap")
    with open(path, "wb") as f:
        f.write(r["body"])
    from scapy.all import IP, TCP, Raw, rdpcap  # noqa: PLC0415
    pk = [p for p in rdpcap(path) if IP in p and TCP in p]
    mine = [p for p in pk if {(p[IP].src, p[TCP].sport), (p[IP].dst, p[TCP].dport)} ==
            {(it.CLI4, sport), (SRV4, port)}]
    check(mine and len(mine) == len(pk), "the pcap holds %d packets, %d of the connection",
          len(pk), len(mine))
    down = b"".join(bytes(p[Raw].load) for p in mine if Raw in p and p[IP].src == SRV4)
    check(EVIL in down, "the blocked reply is not in the pcap: %r", down)


@test
def web_cmd_stats_and_history(env):
    _, port = env.service("wst", "tcp")
    env.filter("wst")
    srv = env.tcp_server(port)
    c, sport = env.tcp_conn(SRV4, port, [b"x " + EVIL])
    it.assert_blocked(c, it.server_conn_of(srv, sport))
    it.wait_until(lambda: env.ctl("stats", "wst")[0]["blocked"] >= 1, timeout=5)
    r = get("stats", service="wst")
    cli = env.ctl("stats", "wst")
    check(r["json"][0]["blocked"] == cli[0]["blocked"] == 1 and
          sorted(r["json"][0]) == sorted(cli[0]), "stats %r vs %r", r["json"], cli)
    r = get("stats", history="true", since="1h")
    cli = env.ctl("stats", "--history", "--since", "1h")
    check(sorted(r["json"]) == sorted(cli) if isinstance(cli, dict) else
          type(r["json"]) is type(cli), "stats --history %r vs %r", r["json"], cli)
    same(get("history")["json"], env.ctl("history"), "history")


@test
def web_cmd_history_undo(env):
    port = env.port()
    post("service/add", {"name": "wundo", "proto": "tcp", "port": port})
    hist = get("history")["json"]
    rows = hist if isinstance(hist, list) else hist.get("changes", [])
    check(rows and "wundo" in rows[-1]["what"] and rows[-1]["who"].startswith("10.77.0.2 "),
          "history %r", rows[-1:])
    r = post("undo")
    check("wundo" not in [s["name"] for s in env.services()], "undo did not remove: %r",
          r["json"])
    post("redo")
    check("wundo" in [s["name"] for s in env.services()], "redo did not restore")
    env.ctl("service", "rm", "--yes", "wundo")


@test
def web_cmd_firewall(env):
    same(get("fw/list")["json"], env.ctl("fw", "list"), "fw list")
    time.sleep(1.1)  # the history counts seconds: what came before is a second older
    r = W().op(op="live_open", id="fw", headers={"Cookie": "fgex_session=" + S["tok"]})
    check(r.get("status") == 200, "live: %r", r)
    time.sleep(0.5)
    post("fw/rule/add", {"name": "wssh", "proto": "tcp", "dport": 2222, "action": "accept"})
    names = [r["name"] for r in env.ctl("fw", "list")["rules"]]
    check("wssh" in names, "fw rule add: %r", names)
    # every open page hears of it
    deadline, evs = time.monotonic() + 5, []
    while time.monotonic() < deadline:
        evs = [json.loads(e["data"]) for e in W().op(op="live_events", id="fw")["events"]
               if e.get("event") == "change"]
        if any(e.get("what") == "fw" for e in evs):
            break
        time.sleep(0.1)
    check(any(e.get("what") == "fw" for e in evs), "no fw change on the live stream: %r", evs)
    check(not any(e.get("what") == "auth" for e in evs),
          "a change from before the page opened was sent as news: %r", evs)
    W().op(op="live_close", id="fw")
    post("fw/rule/add", {"name": "wdrop", "proto": "tcp", "dport": 2223, "action": "drop"})
    post("fw/rule/move", {"rule": "wdrop", "position": 1})
    names = [r["name"] for r in env.ctl("fw", "list")["rules"]]
    check(names.index("wdrop") < names.index("wssh"), "fw rule move: %r", names)
    post("fw/rule/disable", {"rule": "wssh"})
    post("fw/rule/rm", {"rule": "wssh"})
    post("fw/rule/rm", {"rule": "wdrop"})
    post("fw/rule/rm", {"rule": "wdrop"}, status=404)
    get("fw/rule/add", status=405)


@test
def web_cmd_script_refused_at_its_line(env):
    env.service("wpy", "tcp", extra=("--layer", "proxy"))
    bad = "from firegex.nfproxy import pyfilter\n\n@pyfilter\ndef f(req)\n    pass\n"
    r = post("script/set", {"service": "wpy", "file": bad, "file_name": "mine.py"}, status=400)
    check(":4" in r["json"].get("error", ""), "the refusal names no line: %r", r["json"])
    get("script/get", status=404, service="wpy")
    good = ("from firegex.nfproxy import pyfilter\nfrom firegex.nfproxy.models import "
            "HttpRequestHeader\n\n@pyfilter\ndef f(req: HttpRequestHeader):\n    pass\n")
    post("script/set", {"service": "wpy", "file": good})
    same(get("script/list", service="wpy")["json"], env.ctl("script", "list", "wpy"),
         "script list")
    post("script/rm", {"service": "wpy"})


@test
def web_cmd_export_import_workers_status_cert(env):
    exp = get("export")
    cli = env.ctl_raw("export", "-", json_out=False).stdout
    check(json.loads(exp["body"]) == json.loads(cli), "export differs from fgexctl export -")
    post("service/add", {"name": "wimp", "proto": "tcp", "port": env.port()})
    r = post("import", {"file": exp["body"].decode()})
    check("wimp" not in [s["name"] for s in env.services()], "import did not restore: %r",
          r["json"])
    r = post("import", {"file": "{not json"}, status=400)
    check(r["json"].get("exit") in (2, 4) and "nothing was changed" in r["json"]["error"],
          "a bad import %r", r["json"])
    w = get("worker/list")["json"]
    cli = env.ctl("worker", "list")
    check([x.get("kind") for x in w] == [x.get("kind") for x in cli] and
          [x.get("pid") for x in w] == [x.get("pid") for x in cli], "worker list %r vs %r",
          w, cli)
    st = get("status")["json"]
    check(st.get("version") and "workers" in json.dumps(st), "status %r", st)
    same(get("cert")["json"], env.ctl("cert"), "cert")
    # local-only commands and follow modes are not in the API
    get("context/list", status=404)
    get("regex/test", status=404)


@test
def web_cmd_compile_does_not_hold_other_requests(env):
    _, port = env.service("wslow", "tcp")
    # many patterns in one import: a compile that takes a while
    pats = "".join("both /slow%d[a-z]{2,9}x%d(ab|cd){1,4}z/\n" % (i, i) for i in range(NSLOW))
    from concurrent.futures import ThreadPoolExecutor
    w2 = wa.Web(env, env.cli, SRV4, WEB_PORT)
    t0 = time.monotonic()
    with ThreadPoolExecutor(1) as ex:
        fut = ex.submit(w2.req, "POST", "/api/cmd/filter/import",
                        {"service": "wslow", "file": pats}, None, S["tok"], S["csrf"],
                        timeout=120)
        time.sleep(0.3)
        quick = []
        while not fut.done() and len(quick) < 20:
            t1 = time.monotonic()
            wa.expect(W().req("GET", "/api/cmd/status", cookie=S["tok"]), 200, "status")
            quick.append(time.monotonic() - t1)
        r = fut.result()
    took = time.monotonic() - t0
    check(r.get("status") == 200, "the import: %r %r", r.get("status"), r.get("body", b"")[:300])
    # The loop itself is busy for the request's probe and its final run (storing, pushing the
    # ruleset to the workers), as for fgexctl; while the regexes compile (children on every
    # core: the box is slow, not the loop blocked) it answers each request in its turn. A
    # blocked loop would answer none of them before the import.
    fast = [q for q in quick if q < 1.5]
    check(len(quick) >= 5 and len(fast) >= len(quick) - 2,
          "status while the import compiled: %r (import %.1fs)", quick, took)
    check(len(env.filters("wslow")) == NSLOW, "import stored %d", len(env.filters("wslow")))
    env.ctl("service", "rm", "--yes", "wslow")


@test
def web_change_while_busy_says_what_compiles(env):
    """Issue 24: a change the page sends while another compiles is refused 503 with busy,
    what compiles and for how long, which the page (api.js) waits on and shows."""
    env.service("wbusy", "tcp")
    env.service("wbig", "tcp")
    rules = os.path.join(env.tmp, "wbig.rules")
    with open(rules, "w") as f:
        for i in range(1500):
            f.write("both /pat%05d[0-9]+x/\n" % i)
    imp = subprocess.Popen([os.path.join(env.bin, "fgexctl"), "-c", env.url, "filter", "import",
                            "wbig", rules], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    seen = None
    try:
        n = 0
        while imp.poll() is None and seen is None and n < 400:
            r = W().req("POST", "/api/cmd/filter/add",
                        {"service": "wbusy", "regex": "webwait%d[0-9]+" % n},
                        cookie=S["tok"], csrf=S["csrf"])
            n += 1
            if r.get("status") == 503:
                seen = r
            else:
                time.sleep(0.05)
    finally:
        _, ierr = imp.communicate(timeout=700)
    check(seen is not None, "no busy refusal while the import compiled")
    j = seen["json"]
    check(j.get("busy") is True and j.get("exit") == 1 and
          j.get("busy_what") == "filter import wbig (1500 filters)" and
          isinstance(j.get("busy_secs"), int) and "busy" in j.get("error", ""),
          "the busy refusal: %r", j)
    # on a loaded machine the import itself may run past controld's --compile-timeout (60 s)
    check(imp.returncode == 0 or (imp.returncode == 4 and b"--compile-timeout" in ierr),
          "the import failed: %d (%r)", imp.returncode, ierr)
    env.ctl("service", "rm", "--yes", "wbig")
    env.ctl("service", "rm", "--yes", "wbusy")


@test
def web_cmd_password_change_and_expire_sessions(env):
    other_tok = S["tok"]
    login()  # this session changes the password; other_tok is another page's
    post("passwd", {"password_file": "a-new-web-password\n"})
    wa.expect(W().req("POST", "/api/login", {"password": PASSWORD}), 401, "the old password")
    time.sleep(1.2)  # the failed login's lockout
    login("a-new-web-password")
    post("passwd", {"password_file": PASSWORD + "\n", "expire_sessions": True})
    wa.expect(W().req("GET", "/api/session", cookie=other_tok), 401, "another session kept")
    # the session that expired the others lives on
    wa.expect(W().req("GET", "/api/session", cookie=S["tok"]), 200, "own session")
    time.sleep(1.2)
    login()


if __name__ == "__main__":
    sys.exit(it.run_module("web_cmds", setup=setup, controld_args=ARGS))
