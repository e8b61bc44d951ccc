#!/usr/bin/python3
"""Integration: the web dashboard's HTTPS server and API (issue 18, docs/web.md). controld in the
server namespace serves https://10.77.0.1:8443 for 10.77.0.2 only (--allow) and plain /metrics
on 127.0.0.1; python's ssl and http.client (webclient.py) run in the client namespace, a real
TLS client as a browser is one.

Covers: the page's files and their headers; the certificate is `fgexctl cert`'s; requests
without a session (401); login, a wrong password refused (401) then locked out (429 with
Retry-After); the session cookie's flags; CSRF (a missing or forged token 403) and a foreign
Origin (403); a GET of a changing command (405); a client outside --allow refused before TLS;
/api/live delivering the block event of a real connection, a change, resuming with
Last-Event-ID, a firewall change made with fgexctl and its revert, a script's log entry, and `logout` when the session ends; /metrics on both listeners; controld keeps
answering fgexctl while web requests and live streams are open; logout."""
import base64
import json
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fgxit as it  # noqa: E402
import fgxweb  # noqa: E402
from fgxit import CLI_IF, EVIL, SRV4, check, test  # noqa: E402

WEB_PORT = 8443
METRICS = "127.0.0.1:9187"
OTHER4 = "10.77.0.3"  # a client address outside --allow
ARGS = ["--web-listen", "%s:%d" % (SRV4, WEB_PORT), "--allow", "10.77.0.2/32",
        "--metrics-listen", METRICS]
PASSWORD = "web-test-password-1"
HERE = os.path.dirname(os.path.abspath(__file__))
S = {}
Web, expect = fgxweb.Web, fgxweb.expect


def login(w=None):
    w = w or W()
    r = expect(w.req("POST", "/api/login", {"password": PASSWORD}), 200, "login")
    cookie = r["hdr"]["set-cookie"]
    tok = cookie.split(";")[0].split("=", 1)[1]
    return tok, r["json"]["csrf"], cookie


def setup(env):
    pw = os.path.join(env.tmp, "pw")
    with open(pw, "w") as f:
        f.write(PASSWORD + "\n")
    env.ctl("passwd", "--password-file", pw)
    S["env"] = env


def W():
    """The client namespace's webclient (the runner stops helpers after each test)."""
    w = S.get("w")
    if w is None or w.p.poll() is not None or w.p.stdin.closed:
        w = S["w"] = Web(S["env"], S["env"].cli, SRV4, WEB_PORT)
    return w


SEC = {"content-security-policy":
       "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
       "x-content-type-options": "nosniff", "referrer-policy": "no-referrer"}


def check_sec(r, what, api):
    for k, v in SEC.items():
        check(r["hdr"].get(k) == v, "%s: header %s = %r", what, k, r["hdr"].get(k))
    if api:
        check(r["hdr"].get("cache-control") == "no-store", "%s: Cache-Control %r", what,
              r["hdr"].get("cache-control"))


@test
def web_static_files_headers_and_certificate(env):
    w = W()
    r = expect(w.req("GET", "/"), 200, "GET /")
    check(r["hdr"].get("content-type", "").startswith("text/html"), "GET /: %r",
          r["hdr"].get("content-type"))
    with open(os.path.join(HERE, "..", "..", "web", "index.html"), "rb") as f:
        check(r["body"] == f.read(), "GET / is not web/index.html")
    check_sec(r, "GET /", False)
    for path, ctype in (("/app.js", "text/javascript"), ("/lib/api.js", "text/javascript"),
                        ("/style.css", "text/css"), ("/index.html", "text/html")):
        r = expect(w.req("GET", path), 200, "GET " + path)
        check(r["hdr"].get("content-type", "").startswith(ctype), "GET %s: %r", path,
              r["hdr"].get("content-type"))
        with open(os.path.join(HERE, "..", "..", "web", path[1:]), "rb") as f:
            check(r["body"] == f.read(), "GET %s differs from web%s", path, path)
        check_sec(r, "GET " + path, False)
    r = expect(w.req("GET", "/nope.js"), 404, "GET /nope.js")
    check_sec(r, "404", False)
    expect(w.req("GET", "/../Makefile"), 404, "GET /../Makefile")
    expect(w.req("POST", "/index.html", b""), 405, "POST /index.html")
    fp = env.ctl("cert").get("fingerprint", "")
    got = r["cert_sha256"]
    check(fp.replace(":", "").lower() == got, "the web certificate %s is not fgexctl cert's %s",
          got, fp)
    check(fp in open(env.log_path, errors="replace").read(), "fingerprint not logged")


@test
def web_requests_without_session_401(env):
    w = W()
    for method, path in (("GET", "/api/cmd/status"), ("GET", "/api/session"),
                         ("GET", "/api/live"), ("POST", "/api/logout"),
                         ("GET", "/api/cmd/service/list")):
        r = expect(w.req(method, path, b"" if method == "POST" else None), 401,
                   "%s %s without a cookie" % (method, path))
        check(r["json"] and r["json"].get("exit") == 7, "%s %s: %r", method, path, r["json"])
        check_sec(r, path, True)
    fake = "ab" * 32
    r = expect(w.req("GET", "/api/cmd/status", cookie=fake), 401, "a made-up session")
    check("login" in r["json"].get("error", "") or "session" in r["json"].get("error", ""),
          "401 body: %r", r["json"])
    expect(w.req("GET", "/api/session", cookie=fake), 401, "session with a made-up cookie")


@test
def web_login_wrong_password_then_locked_out(env):
    w = W()
    r = expect(w.req("POST", "/api/login", {"password": "wrong-password"}), 401, "wrong password")
    check(r["json"].get("exit") == 7 and "wrong password" in r["json"].get("error", ""),
          "wrong password body: %r", r["json"])
    check("set-cookie" not in r["hdr"], "a cookie for a wrong password")
    r = expect(w.req("POST", "/api/login", {"password": PASSWORD}), 429, "login while locked out")
    ra = r["hdr"].get("retry-after")
    check(ra is not None and ra.isdigit() and 1 <= int(ra) <= 60, "Retry-After %r", ra)
    check("too many failed logins" in r["json"].get("error", ""), "429 body %r", r["json"])
    # the lockout is controld's own: the remote control's history names the address
    time.sleep(int(ra) + 0.2)
    expect(w.req("POST", "/api/login", {"password": 12}), 400, "a password that is no string")
    tok, csrf, cookie = login()
    attrs = [a.strip() for a in cookie.split(";")]
    check(attrs[0] == "fgex_session=" + tok and len(tok) == 64, "cookie %r", cookie)
    for a in ("Path=/", "HttpOnly", "Secure", "SameSite=Strict"):
        check(a in attrs, "cookie %r lacks %s", cookie, a)
    check(len(csrf) == 64 and csrf != tok, "csrf %r", csrf)
    r = expect(w.req("GET", "/api/session", cookie=tok), 200, "session")
    check(r["json"].get("csrf") == csrf, "session csrf %r != login's %r", r["json"], csrf)
    check(abs(r["json"].get("expires", 0) - (time.time() + 12 * 3600)) < 120, "expires %r",
          r["json"])
    S["tok"], S["csrf"] = tok, csrf
    log = open(env.log_path, errors="replace").read()
    check("failed login from 10.77.0.2" in log and "login from 10.77.0.2" in log,
          "the web logins were not the browser address's")


@test
def web_commands_csrf_and_origin(env):
    w, tok, csrf = W(), S["tok"], S["csrf"]
    r = expect(w.req("GET", "/api/cmd/status", cookie=tok), 200, "GET status")
    st = env.ctl("status")
    check(r["json"].get("version") == st.get("version"), "status %r vs %r", r["json"], st)
    check_sec(r, "status", True)
    r = expect(w.req("POST", "/api/cmd/status", {}, cookie=tok), 403, "POST without CSRF")
    check(r["json"] == {"error": "csrf"}, "403 body %r", r["json"])
    expect(w.req("POST", "/api/cmd/status", {}, cookie=tok, csrf="0" * 64), 403, "forged CSRF")
    other = login()  # another session's token is no good for this one
    expect(w.req("POST", "/api/cmd/status", {}, cookie=tok, csrf=other[1]), 403,
           "another session's CSRF")
    expect(w.req("POST", "/api/cmd/status", {}, cookie=tok, csrf=csrf), 200, "POST with CSRF")
    expect(w.req("POST", "/api/cmd/status", {}, cookie=tok, csrf=csrf,
                 headers={"Origin": "https://evil.example"}), 403, "a foreign Origin")
    expect(w.req("POST", "/api/login", {"password": PASSWORD},
                 headers={"Origin": "https://evil.example"}), 403, "login from a foreign Origin")
    expect(w.req("POST", "/api/cmd/status", {}, cookie=tok, csrf=csrf,
                 headers={"Origin": "https://%s:%d" % (SRV4, WEB_PORT)}), 200, "own Origin")
    r = expect(w.req("GET", "/api/cmd/service/add", cookie=tok), 405, "GET of a change")
    check("POST" in r["hdr"].get("allow", ""), "405 Allow %r", r["hdr"].get("allow"))
    expect(w.req("GET", "/api/cmd/no/such", cookie=tok), 404, "unknown command")
    expect(w.req("GET", "/api/cmd/context", cookie=tok), 404, "a local command")
    expect(w.req("POST", "/api/cmd/service/list", b"{not json", cookie=tok, csrf=csrf), 400,
           "a body that is no JSON")
    port = env.port()
    r = expect(w.req("POST", "/api/cmd/service/add", {"name": "wapi", "proto": "tcp", "port": port}, cookie=tok,
                     csrf=csrf), 200, "service add")
    names = [s["name"] for s in env.services()]
    check("wapi" in names, "service add through the web did not add: %r", names)
    hist = env.ctl("history")
    rows = hist if isinstance(hist, list) else hist.get("changes", [])
    who = [c.get("who", "") for c in rows if "wapi" in c.get("what", "")]
    check(who and who[-1].startswith("10.77.0.2 session "), "history who %r", who)
    r = expect(w.req("POST", "/api/cmd/service/add", {"name": "wapi", "proto": "tcp", "port": port}, cookie=tok,
                     csrf=csrf), 409, "a duplicate service")
    check(r["json"].get("exit") == 5, "duplicate: %r", r["json"])


@test
def web_client_outside_allow_refused(env):
    it.sh("ip", "-n", env.cli, "addr", "add", OTHER4 + "/32", "dev", CLI_IF)
    try:
        # refused before TLS: the connection is accepted by the kernel, then closed without
        # one byte of ServerHello, whatever the ClientHello said
        r = W().op(op="hello", source=OTHER4)
        got = base64.b64decode(r.get("received_b64", ""))
        check(r.get("connected") and r.get("end") in ("eof", "reset") and got == b"",
              "a client outside --allow was not closed before TLS: %r (received %r)",
              {k: r.get(k) for k in ("connected", "end", "error")}, got[:40])
        r = W().req("GET", "/metrics", source=OTHER4)
        check("error" in r and "status" not in r, "/metrics outside --allow got %r", r)
    finally:
        it.sh("ip", "-n", env.cli, "addr", "del", OTHER4 + "/32", "dev", CLI_IF, check=False)
    # the same probe from the allowed address gets a ServerHello (a handshake record, 0x16)
    r = W().op(op="hello")
    got = base64.b64decode(r.get("received_b64", ""))
    check(r.get("connected") and got[:1] == b"\x16", "the allowed client's ClientHello got %r",
          {k: r.get(k) for k in ("connected", "end", "error")} | {"received": got[:40]})
    expect(W().req("GET", "/"), 200, "the allowed client afterwards")


@test
def web_metrics_on_both_listeners(env):
    r = expect(W().req("GET", "/metrics"), 200, "/metrics on the web listener")
    check(b"fgex_worker_up" in r["body"], "web /metrics: %r", r["body"][:200])
    check(r["hdr"].get("content-type", "").startswith("text/plain; version=0.0.4"),
          "content type %r", r["hdr"].get("content-type"))
    check_sec(r, "/metrics", False)
    m = Web(env, env.srv, "127.0.0.1", int(METRICS.split(":")[1]))
    r = expect(m.req("GET", "/metrics", tls=False), 200, "/metrics on --metrics-listen")
    check(b"fgex_worker_up" in r["body"], "plain /metrics: %r", r["body"][:200])
    expect(m.req("GET", "/", tls=False), 404, "/ on --metrics-listen")
    expect(m.req("POST", "/metrics", b"", tls=False), 405, "POST /metrics")
    r = m.req("GET", "/metrics", tls=True)
    check("error" in r, "TLS on the plain metrics listener: %r", r)
    # and the web listener never speaks plain HTTP
    r = W().req("GET", "/", tls=False)
    check("error" in r and "status" not in r, "plain HTTP on the web listener: %r", r)
    r = W().req("GET", "/metrics", tls=False)
    check("error" in r and "status" not in r, "plain HTTP /metrics on the web listener: %r", r)


def live_wait(w, sid, pred, timeout, what):
    deadline = time.monotonic() + timeout
    ev = {}
    while time.monotonic() < deadline:
        ev = w.op(op="live_events", id=sid)
        hit = [e for e in ev["events"] if pred(e)]
        if hit:
            return hit[0], ev
        time.sleep(0.1)
    check(False, "%s: not seen in %ss: %r", what, timeout, ev)


@test
def web_live_block_event_change_and_resume(env):
    w, tok = W(), S["tok"]
    r = w.op(op="live_open", id="a", headers={"Cookie": "fgex_session=" + tok})
    check(r.get("status") == 200, "live: %r", r)
    hdr = {k.lower(): v for k, v in r["headers"]}
    check(hdr.get("content-type", "").startswith("text/event-stream"), "live type %r", hdr)
    check(hdr.get("cache-control") == "no-store", "live Cache-Control %r", hdr)
    hello, _ = live_wait(w, "a", lambda e: e.get("event") == "hello", 5, "hello")
    last = json.loads(hello["data"]).get("last_seq")
    check(isinstance(last, int), "hello %r", hello)
    _, port = env.service("wlive", "tcp")
    ch, _ = live_wait(w, "a", lambda e: e.get("event") == "change", 5, "change for service add")
    check(json.loads(ch["data"]).get("what") == "services", "change %r", ch)
    fid = env.filter("wlive")
    live_wait(w, "a", lambda e: e.get("event") == "change" and
              json.loads(e["data"]).get("what") == "filters", 5, "change for filter add")
    env.ctl("auth", "on")  # a setting: recorded in the history too
    live_wait(w, "a", lambda e: e.get("event") == "change" and
              json.loads(e["data"]).get("what") == "auth", 5, "change for auth on")
    srv = env.tcp_server(port)
    c, sport = env.tcp_conn(SRV4, port, [b"x " + EVIL])
    it.assert_blocked(c, it.server_conn_of(srv, sport))
    ev, _ = live_wait(w, "a", lambda e: e.get("event") == "event", 10, "the block event")
    d = json.loads(ev["data"])
    check(d.get("service") == "wlive" and d.get("filter_id") == fid, "event %r", d)
    check(d.get("sport") == sport or d.get("dport") == sport, "event ports %r (client %d)", d,
          sport)
    check(ev.get("id") == str(d.get("seq")) and d["seq"] > last, "event id %r, seq %r",
          ev.get("id"), d.get("seq"))
    live_wait(w, "a", lambda e: e.get("event") == "stats", 5, "stats")
    # a page that reconnects with Last-Event-ID gets what it missed, and only that
    r = w.op(op="live_open", id="b", headers={"Cookie": "fgex_session=" + tok,
                                              "Last-Event-ID": str(d["seq"] - 1)})
    check(r.get("status") == 200, "live b: %r", r)
    ev2, evs = live_wait(w, "b", lambda e: e.get("event") == "event", 5, "replayed event")
    check(ev2.get("id") == ev.get("id"), "replayed %r, expected %r", ev2, ev)
    r = w.op(op="live_open", id="c", headers={"Cookie": "fgex_session=" + tok,
                                              "Last-Event-ID": str(d["seq"])})
    time.sleep(1.5)
    evs = w.op(op="live_events", id="c")["events"]
    check(not [e for e in evs if e.get("event") == "event"], "replayed past Last-Event-ID: %r",
          evs)
    for sid in ("a", "b", "c"):
        w.op(op="live_close", id=sid)


def fw_changes(w, sid):
    return [e for e in w.op(op="live_events", id=sid)["events"]
            if e.get("event") == "change" and json.loads(e["data"]).get("what") == "fw"]


@test
def web_live_fw_change_by_fgexctl(env):
    """The history does not record firewall changes: one made with fgexctl reaches open pages
    all the same, its automatic revert too, and nothing comes while nothing changes."""
    w, tok = W(), S["tok"]
    r = w.op(op="live_open", id="f", headers={"Cookie": "fgex_session=" + tok})
    check(r.get("status") == 200, "live: %r", r)
    live_wait(w, "f", lambda e: e.get("event") == "hello", 5, "hello")
    time.sleep(3)
    evs = w.op(op="live_events", id="f")["events"]
    check(not [e for e in evs if e.get("event") == "change"], "a change while none was made: %r",
          evs)
    check(not [e for e in evs if e.get("event") not in ("hello", "stats")],
          "quiet stream: %r", evs)
    t0 = time.monotonic()
    env.ctl("fw", "rule", "add", "--name", "wlivefw", "--proto", "tcp", "--dport", "9",
            "--action", "drop")
    it.wait_until(lambda: fw_changes(w, "f"), 3)
    check(len(fw_changes(w, "f")) == 1, "fw change after rule add: %r (%.1fs)",
          w.op(op="live_events", id="f")["events"], time.monotonic() - t0)
    # a change with a deadline left to run out: announced, then its revert
    doc = env.ctl("fw", "rule", "rm", "wlivefw", "--confirm", "1")
    check(doc["state"]["pending_secs"] == 1, "pending: %r", doc["state"])
    it.wait_until(lambda: len(fw_changes(w, "f")) >= 2, 3)
    check(len(fw_changes(w, "f")) == 2, "fw change after rule rm --confirm: %r",
          fw_changes(w, "f"))
    it.wait_until(lambda: env.ctl("fw", "list")["state"]["pending_secs"] == 0, 4)
    doc = env.ctl("fw", "list")
    check([x["name"] for x in doc["rules"]] == ["wlivefw"], "not reverted: %r", doc["rules"])
    it.wait_until(lambda: len(fw_changes(w, "f")) >= 3, 3)
    check(len(fw_changes(w, "f")) == 3, "fw change after the revert: %r", fw_changes(w, "f"))
    # a change with a deadline, then kept: both heard (an option this time)
    env.ctl("fw", "set", "icmp", "on", "--confirm", "30")
    it.wait_until(lambda: len(fw_changes(w, "f")) >= 4, 3)
    check(len(fw_changes(w, "f")) == 4, "fw change after set --confirm: %r", fw_changes(w, "f"))
    check(env.ctl("fw", "confirm")["state"]["pending_secs"] == 0, "not kept")
    it.wait_until(lambda: len(fw_changes(w, "f")) >= 5, 3)
    check(len(fw_changes(w, "f")) == 5, "fw change after confirm: %r", fw_changes(w, "f"))
    # a burst: the first at once, then one a second at most
    time.sleep(1.2)
    t0 = time.monotonic()
    env.ctl("fw", "set", "icmp", "off")
    env.ctl("fw", "rule", "rm", "wlivefw")
    env.ctl("fw", "policy", "accept")
    took = time.monotonic() - t0
    it.wait_until(lambda: len(fw_changes(w, "f")) >= 6, 3)
    time.sleep(2.2)  # whatever the burst left is sent by now
    n = len(fw_changes(w, "f")) - 5
    check(1 <= n <= 1 + int(took) + 1, "%d fw changes for a burst of 3 in %.2fs", n, took)
    time.sleep(1.5)
    check(len(fw_changes(w, "f")) == 5 + n, "fw change after the burst ended: %r",
          fw_changes(w, "f"))
    w.op(op="live_close", id="f")


@test
def web_controld_answers_fgexctl_while_web_is_busy(env):
    w, tok, csrf = W(), S["tok"], S["csrf"]
    # ten open pages, and another client hammering the API meanwhile
    for i in range(10):
        r = w.op(op="live_open", id="p%d" % i, headers={"Cookie": "fgex_session=" + tok})
        check(r.get("status") == 200, "page %d: %r", i, r)
    other = Web(env, env.cli, SRV4, WEB_PORT)
    t0 = time.monotonic()
    for i in range(20):
        expect(other.req("GET", "/api/cmd/service/list", cookie=tok), 200, "service list %d" % i)
        st = env.ctl("status")
        check(st.get("version"), "fgexctl status while web requests run: %r", st)
    check(time.monotonic() - t0 < 30, "40 requests took %.1fs", time.monotonic() - t0)
    for i in range(10):
        ev = w.op(op="live_events", id="p%d" % i)
        check(not ev["closed"] and ev["events"][0].get("event") == "hello", "page %d: %r", i, ev)
        w.op(op="live_close", id="p%d" % i)
    expect(w.req("POST", "/api/cmd/status", {}, cookie=tok, csrf=csrf), 200, "after")


@test
def web_logout_ends_session_and_stream(env):
    w = W()
    tok, csrf, _ = login()
    r = w.op(op="live_open", id="l", headers={"Cookie": "fgex_session=" + tok})
    check(r.get("status") == 200, "live: %r", r)
    expect(w.req("POST", "/api/logout", b"", cookie=tok), 403, "logout without CSRF")
    r = expect(w.req("POST", "/api/logout", b"", cookie=tok, csrf=csrf), 200, "logout")
    check(r["json"] == {}, "logout body %r", r["json"])
    ck = [a.strip() for a in r["hdr"].get("set-cookie", "").split(";")]
    check(ck[0] == "fgex_session=" and "Max-Age=0" in ck, "logout cookie %r", ck)
    expect(w.req("GET", "/api/session", cookie=tok), 401, "session after logout")
    expect(w.req("GET", "/api/cmd/status", cookie=tok), 401, "status after logout")
    live_wait(w, "l", lambda e: e.get("event") == "logout", 5, "logout on the live stream")
    it.wait_until(lambda: w.op(op="live_events", id="l")["closed"], 5)
    check(w.op(op="live_events", id="l")["closed"], "the stream stayed open after logout")
    w.op(op="live_close", id="l")
    # every session ends with passwd --expire-sessions on the vulnbox: its streams hear it
    tok2, _, _ = login()
    r = w.op(op="live_open", id="m", headers={"Cookie": "fgex_session=" + tok2})
    pw = os.path.join(env.tmp, "pw")
    env.ctl("passwd", "--password-file", pw, "--expire-sessions")
    live_wait(w, "m", lambda e: e.get("event") == "logout", 5, "logout after expire-sessions")
    expect(w.req("GET", "/api/session", cookie=tok2), 401, "session after expire")
    w.op(op="live_close", id="m")
    S["tok"], S["csrf"] = login()[:2]


PRINTING = """
from firegex.nfproxy import pyfilter
from firegex.nfproxy.models import HttpRequestHeader

@pyfilter
def shout(req: HttpRequestHeader):
    print("web saw", req.url)
"""


@test
def web_live_script_log(env):
    w, tok = W(), S["tok"]
    _, port = env.service("wscript", "tcp", extra=("--layer", "proxy"))
    d = os.path.join(env.tmp, "scripts")
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "shout.py")
    with open(path, "w") as f:
        f.write(PRINTING)
    env.ctl("script", "set", "wscript", path)
    r = w.op(op="live_open", id="s", headers={"Cookie": "fgex_session=" + tok})
    check(r.get("status") == 200, "live: %r", r)
    live_wait(w, "s", lambda e: e.get("event") == "hello", 5, "hello")
    srv = env.tcp_server(port)
    req = b"GET /from-the-web HTTP/1.1\r\nHost: svc\r\n\r\n"
    c = env.tcp_client(SRV4, port, [req, 0.3])
    it.assert_passed(c, it.server_conn(srv, 1), req)
    ev, _ = live_wait(w, "s", lambda e: e.get("event") == "script_log" and
                      "/from-the-web" in e.get("data", ""), 10, "the script's print")
    dd = json.loads(ev["data"])
    check(dd.get("service") == "wscript" and "web saw /from-the-web" in dd.get("text", ""),
          "script_log %r", dd)
    w.op(op="live_close", id="s")


def compiling(env):
    """True once controld logged a compile off its loop (since the test began) and one of its
    compile children (forks, so named controld like it) runs."""
    with open(env.log_path, "rb") as f:
        f.seek(env.log_offset)
        if b"compiling off the control loop" not in f.read():
            return False
    cpid = env.controld_pid()
    for d in os.listdir("/proc"):
        try:
            with open("/proc/%s/stat" % d) as f:
                st = f.read()
        except (OSError, ValueError):
            continue
        comm, rest = st[st.find("(") + 1:st.rfind(")")], st[st.rfind(")") + 2:].split()
        if comm == "controld" and rest[1:2] == [str(cpid)]:
            return True
    return False


@test
def web_controld_stops_cleanly_with_open_pages(env):
    """SIGTERM with live streams open and a change compiling for the page: controld answers
    the change, ends the streams and exits 0 (libmicrohttpd may stop only with no connection
    suspended)."""
    from concurrent.futures import ThreadPoolExecutor
    w, tok, csrf = W(), S["tok"], S["csrf"]
    for i in range(3):
        r = w.op(op="live_open", id="z%d" % i, headers={"Cookie": "fgex_session=" + tok})
        check(r.get("status") == 200, "live z%d: %r", i, r)
    env.service("wstop", "tcp")
    pats = "".join("both /stop%d[a-z]{2,9}x%d(ab|cd){1,4}z/\n" % (i, i) for i in range(600))
    w2 = Web(env, env.cli, SRV4, WEB_PORT)
    with ThreadPoolExecutor(1) as ex:
        fut = ex.submit(w2.req, "POST", "/api/cmd/filter/import",
                        {"service": "wstop", "file": pats}, None, tok, csrf, timeout=60)
        # SIGTERM once the regexes compile in controld's children (forks, named controld): the
        # change then waits in the loop for them
        if not it.wait_until(lambda: compiling(env), timeout=10, step=0.05):
            raise AssertionError("the import did not start compiling: %r" % (
                fut.result(timeout=60).get("status") if fut.done() else env.log_tail(5)))
        t0 = time.monotonic()
        rc = env.stop_controld(signal.SIGTERM)
        check(rc == 0, "controld exited with %r", rc)
        check(time.monotonic() - t0 < 5, "controld took %.1fs to stop", time.monotonic() - t0)
        r = fut.result(timeout=20)
    # an answer, not a dropped connection: the page says why the change was not made
    err = (r.get("json") or {}).get("error", "")
    check(r.get("status") == 500 and "controld is stopping" in err,
          "the change waiting in the loop: %r", {k: r.get(k) for k in ("status", "error")})
    it.wait_until(lambda: all(w.op(op="live_events", id="z%d" % i)["closed"] for i in range(3)),
                  timeout=5)
    check(all(w.op(op="live_events", id="z%d" % i)["closed"] for i in range(3)),
          "streams still open after controld stopped")
    env.start_controld()
    check(env.filters("wstop") == [], "the import answered as not made was made: %d filters",
          len(env.filters("wstop")))
    expect(W().req("GET", "/"), 200, "the page after the restart")
    # the session outlives the restart (issue 24); its CSRF token is new, the old one refused
    # as "csrf", which the page (api.js) answers by asking /api/session again
    r = expect(W().req("GET", "/api/session", cookie=tok), 200, "a session across a restart")
    new_csrf = r["json"]["csrf"]
    check(new_csrf != csrf, "the CSRF token did not change with the restart")
    r = expect(W().req("POST", "/api/cmd/service/rm", {"service": "wstop"}, cookie=tok,
                       csrf=csrf), 403, "a change with the old CSRF token")
    check(r["json"].get("error") == "csrf", "the old CSRF token's refusal: %r", r["json"])
    expect(W().req("POST", "/api/cmd/service/rm", {"service": "wstop"}, cookie=tok,
                   csrf=new_csrf), 200, "a change with the new CSRF token")
    S["csrf"] = new_csrf



@test
def web_status_shows_rules_restored_and_the_store(env):
    # issue 24: what the page's status bar and admin view read
    _, port = env.service("web-nw", "tcp")
    env.filter("web-nw")
    tok, _, _ = login()
    r = expect(W().req("GET", "/api/cmd/status", cookie=tok), 200, "GET status")
    before = r["json"]["rules"]["restored"]
    check(r["json"]["store"]["degraded"] is False, "store: %r", r["json"]["store"])
    it.sh("ip", "netns", "exec", env.srv, "nft", "flush", "ruleset")

    def restored():
        j = expect(W().req("GET", "/api/cmd/status", cookie=tok), 200, "GET status")["json"]
        return j if j["rules"]["restored"] > before else None
    j = it.wait_until(restored, timeout=3)
    check(j, "the page's status never showed the restore")
    check("table inet fgex deleted" in j["rules"]["removed"], "removed: %r", j["rules"])
    check(j["rules"]["gap_ms"] < 1000, "gap %r", j["rules"]["gap_ms"])
    env.ctl("service", "rm", "--yes", "web-nw")


@test
def game_through_the_web(env):
    """game set / game show (issue 28) as the page sends them: the flag format's bytes exact
    (flag_b64), the addresses as one comma list; a GET of game set is refused."""
    tok, csrf, _ = login()
    w = W()
    flag = b"F\xffLAG[0-9]{4}"
    r = expect(w.req("POST", "/api/cmd/game/set",
                     {"flag_b64": base64.b64encode(flag).decode(),
                      "checker": "10.77.0.9,fd00:77::9", "team": "10.60.0.0/16"},
                     cookie=tok, csrf=csrf), 200, "game set")
    check(it.d64(r["json"].get("flag_b64")) == flag, "game set's reply: %r", r["json"])
    r = expect(w.req("GET", "/api/cmd/game/show", cookie=tok), 200, "game show")
    g = r["json"]
    check(g["set"] and it.d64(g.get("flag_b64")) == flag and
          g["checker"] == ["10.77.0.9", "fd00:77::9"] and g["team"] == ["10.60.0.0/16"],
          "game show through the web: %r", g)
    check(env.ctl("game", "show") == g, "fgexctl sees %r", env.ctl("game", "show"))
    expect(w.req("GET", "/api/cmd/game/set?flag=x&checker=10.77.0.9", cookie=tok), 405,
           "a GET of game set")
    r = expect(w.req("POST", "/api/cmd/game/set", {"flag": "ab(c", "checker": "10.77.0.9"},
                     cookie=tok, csrf=csrf), 400, "a bad flag format")
    check("invalid flag format" in r["json"].get("error", ""), "the refusal: %r", r["json"])
    expect(w.req("POST", "/api/cmd/game/set", {"clear": True}, cookie=tok, csrf=csrf), 200,
           "game set --clear")
    check(not env.ctl("game", "show")["set"], "the web's clear left %r", env.ctl("game", "show"))


if __name__ == "__main__":
    sys.exit(it.run_module("web_api", setup=setup, controld_args=ARGS))
