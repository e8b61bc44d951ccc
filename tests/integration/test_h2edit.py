#!/usr/bin/python3
"""Integration: a filter file's edits and its DROP on HTTP/2 streams of an HTTP service
(--proto http, proxy layer). The file (scripts/h2_edit_filter.py) edits the HTTP/1.1 rendering
as it would edit an HTTP/1.1 connection's bytes: the request line, a header and the body of a
request (the body longer than it came), the body of an answer. Real clients (curl --http2 over
TLS, --http2-prior-knowledge, nghttp with several streams on one connection) against nginx-light
(h2 over TLS and h2c: its log says what it was sent, headers, Content-Length and body) and
against an HTTP/1.1-only service (--upstream http1, fgxh1.py): the service gets exactly the
edited request, as HTTP/2 with its length made right, or as HTTP/1.1; the other streams of the
connection are untouched. A DROP ends its stream, answered nothing, while the connection's other
streams complete."""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fgxit as it  # noqa: E402
from h2util import nghttp, stream_ids  # noqa: E402
from fgxit import SRV4, check, test  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "scripts", "h2_edit_filter.py")
EDITED_BODY = "a=1&q=EDITED-and-longer"
EDITED_ANSWER = "an answer the filter file edited, longer\n"


def nginx(env, tls_port, h2c_port):
    """nginx-light, h2 over TLS and h2c, proxying to itself so that it reads each body: its log
    has, per request, the port, the protocol, the target, X-Tag, Content-Length, the body."""
    if shutil.which("nginx") is None:
        raise AssertionError("nginx is not installed (deploy/install-deps.sh test)")
    c = it.tls_certs(env)["service"]
    d = os.path.join(env.tmp, "nginx-h2edit-%d" % tls_port)
    os.makedirs(d, exist_ok=True)
    inner = env.port()
    locs = "location / { proxy_pass http://127.0.0.1:%d; }" % inner
    conf = os.path.join(d, "nginx.conf")
    with open(conf, "w") as f:
        f.write("""daemon off; worker_processes 1; pid %(d)s/nginx.pid; error_log %(d)s/error.log;
events { worker_connections 64; }
http {
  log_format t '$server_port|$server_protocol|$request_uri|$http_x_tag|$content_length|'
               '$request_body';
  access_log %(d)s/access.log t;
  client_body_temp_path %(d)s; proxy_temp_path %(d)s; fastcgi_temp_path %(d)s;
  uwsgi_temp_path %(d)s; scgi_temp_path %(d)s;
  server { listen %(ip)s:%(tls)d ssl http2; ssl_certificate %(cert)s;
           ssl_certificate_key %(key)s; %(locs)s }
  server { listen %(ip)s:%(h2c)d http2; %(locs)s }
  server { listen 127.0.0.1:%(inner)d; access_log off;
           location / { return 200 "hello from nginx\\n"; }
           location /edit-resp { return 200 "answer to be edited\\n"; } }
}
""" % {"d": d, "ip": SRV4, "tls": tls_port, "h2c": h2c_port, "inner": inner, "cert": c[0],
            "key": c[1], "locs": locs})
    p = it.nginx_start(env, conf, d, (tls_port, h2c_port))
    return os.path.join(d, "access.log"), p


def access(log):
    time.sleep(0.3)
    with open(log) as f:
        return [ln.rstrip("\n").split("|") for ln in f if ln.strip()]


def curl(env, url, mode, *args):
    argv = ["ip", "netns", "exec", env.cli, "curl", "-sk", "--max-time", "5", "-w",
            "\n%{http_version}", mode, url] + list(args)
    p = subprocess.run(argv, capture_output=True, text=True, timeout=20)
    return p.returncode, p.stdout


def scripted(env, name, port, tls, extra=()):
    args = ("--layer", "proxy") + tuple(extra)
    if tls:
        c = it.tls_certs(env)["proxy"]
        args += ("--tls-cert", c[0], "--tls-key", c[1])
    env.service(name, "http", port, args)
    r = env.ctl_raw("script", "set", name, SCRIPT, json_out=False)
    check(r.returncode == 0, "script set %s: %r", name, r.stderr)


def bases(tls_port, h2c_port):
    return (("https://%s:%d" % (SRV4, tls_port), "--http2", tls_port),
            ("http://%s:%d" % (SRV4, h2c_port), "--http2-prior-knowledge", h2c_port))


def edits_go_out(env, base, mode):
    """The edits' requests from curl (one stream a connection) and nghttp (three streams on one,
    one of them edited); what the client got back."""
    rc, out = curl(env, base + "/orig-path", mode, "-H", "X-Tag: orig")
    check(rc == 0 and out.strip().endswith("2"), "edited GET %s: rc %d %r", base, rc, out)
    rc, out = curl(env, base + "/post", mode, "-H", "X-Tag: kept", "--data-binary", "a=1&q=orig")
    check(rc == 0 and out.strip().endswith("2"), "edited POST %s: rc %d %r", base, rc, out)
    rc, out = nghttp(env, [base + "/a", base + "/orig-path", base + "/b"])
    ids = stream_ids(out)
    check(set(ids) == {"/a", "/orig-path", "/b"}, "nghttp sent %r on %s", ids, base)
    for path in ids:
        check("recv (stream_id=%d) :status: 200" % ids[path] in out,
              "%s did not complete on %s: %s", path, base, out[-3000:])
    check("recv RST_STREAM" not in out, "a stream was reset on %s: %s", base, out[-2000:])


@test
def an_edit_reaches_an_h2_service_as_h2(env):
    tls_port, h2c_port = env.port(), env.port()
    scripted(env, "e-tls", tls_port, True)
    scripted(env, "e-h2c", h2c_port, False)
    log, p = nginx(env, tls_port, h2c_port)
    try:
        for base, mode, port in bases(tls_port, h2c_port):
            edits_go_out(env, base, mode)
            # an answer edited longer than its Content-Length said: the length made right
            # (curl refuses an HTTP/2 body that is not as long as it says)
            rc, out = curl(env, base + "/edit-resp", mode)
            check(rc == 0 and out == EDITED_ANSWER + "\n2", "edited answer %s: rc %d %r", base,
                  rc, out)
            rc, out = curl(env, base + "/", mode, "-H", "X-Tag: other")
            check(rc == 0 and out == "hello from nginx\n\n2", "unedited %s: rc %d %r", base, rc,
                  out)
            # an edit that is no HTTP/1.1: the service's fail policy (closed: that stream reset),
            # the connection's other streams go on
            rc, out = nghttp(env, [base + "/a", base + "/bad-edit", base + "/b"])
            ids = stream_ids(out)
            check("recv RST_STREAM frame <length=4, flags=0x00, stream_id=%d>" % ids["/bad-edit"]
                  in out and "recv (stream_id=%d) :status" % ids["/bad-edit"] not in out,
                  "the unparsable edit was not reset on %s: %s", base, out[-2000:])
            for path in ("/a", "/b"):
                check("recv (stream_id=%d) :status: 200" % ids[path] in out,
                      "%s did not complete beside the reset stream on %s", path, base)
        lines = access(log)
        for port in (tls_port, h2c_port):
            mine = [ln[1:] for ln in lines if ln[0] == str(port)]
            check({ln[0] for ln in mine} == {"HTTP/2.0"}, "nginx was not sent h2 on %d: %r",
                  port, mine)
            want = [["HTTP/2.0", "/edited/longer-path", "edited-tag", "-", "-"],
                    ["HTTP/2.0", "/post", "kept", str(len(EDITED_BODY)), EDITED_BODY]]
            check(mine[:2] == want, "nginx got %r on %d, want %r", mine[:2], port, want)
            # nghttp's three streams: the edited one, the two others as they were sent
            three = sorted(ln[1:3] for ln in mine[2:5])
            check(three == [["/a", "-"], ["/b", "-"], ["/edited/longer-path", "-"]],
                  "nghttp's streams reached nginx as %r on %d", three, port)
            check(mine[6][1:3] == ["/", "other"], "the unedited request: %r", mine[6:])
            check(sorted(ln[1] for ln in mine[7:]) == ["/a", "/b"],
                  "beside the unparsable edit nginx got %r", mine[7:])
            check(not [ln for ln in mine if "orig" in "|".join(ln)],
                  "an unedited byte reached nginx on %d: %r", port, mine)
        # the edits are counted under the function (script list's EDITED)
        # (the GET's head, the POST's body, nghttp's request, the answer)
        fns = {f["name"]: f for f in env.ctl("script", "list", "e-h2c")["functions"]}
        check(fns["edit"].get("edited", 0) >= 4, "script list does not count the edits: %r",
              fns)
    finally:
        p.terminate()
        p.wait(5)


@test
def an_edit_reaches_an_http11_service_as_http11(env):
    tls_port, h2c_port = env.port(), env.port()
    scripted(env, "e1-tls", tls_port, True, ("--upstream", "plain,http1"))
    scripted(env, "e1-h2c", h2c_port, False, ("--upstream", "http1"))
    log = os.path.join(env.tmp, "h1-edit.log")
    open(log, "w").close()
    p = subprocess.Popen(["ip", "netns", "exec", env.srv, it.PY, os.path.join(HERE, "fgxh1.py"),
                          log, str(tls_port), str(h2c_port)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    check(p.stdout.readline().strip() == "ready", "fgxh1.py did not start")
    try:
        for base, mode, port in bases(tls_port, h2c_port):
            edits_go_out(env, base, mode)
        time.sleep(0.3)
        with open(log) as f:
            reqs = [json.loads(ln) for ln in f if ln.strip()]
        for port in (tls_port, h2c_port):
            mine = [q for q in reqs if q["port"] == port]
            check({q["version"] for q in mine} == {"HTTP/1.1"}, "versions %r", mine)
            got = [(q["path"], q["tag"]) for q in mine[:2]]
            check(got == [("/edited/longer-path", "edited-tag"), ("/post", "kept")],
                  "the service got %r on %d", got, port)
            post = mine[1]
            check(post["body"] == EDITED_BODY and post["cl"] == str(len(EDITED_BODY)) and
                  post["te"] is None and
                  post["sha"] == hashlib.sha256(EDITED_BODY.encode()).hexdigest(),
                  "the edited body reached the service as %r", post)
            three = sorted((q["path"], q["tag"]) for q in mine[2:5])
            check(three == [("/a", None), ("/b", None), ("/edited/longer-path", None)],
                  "nghttp's streams reached the service as %r on %d", three, port)
    finally:
        p.terminate()
        p.wait(5)


@test
def a_drop_ends_its_stream_and_the_others_complete(env):
    tls_port, h2c_port = env.port(), env.port()
    scripted(env, "d-tls", tls_port, True)
    scripted(env, "d-h2c", h2c_port, False)
    log, p = nginx(env, tls_port, h2c_port)
    drop_ids = set()
    try:
        for base, mode, port in bases(tls_port, h2c_port):
            rc, out = nghttp(env, [base + "/a", base + "/drop-me", base + "/b"])
            ids = stream_ids(out)
            check(set(ids) == {"/a", "/drop-me", "/b"}, "nghttp sent %r on %s", ids, base)
            drop = ids["/drop-me"]
            drop_ids.add(drop)
            for path in ("/a", "/b"):
                check("recv (stream_id=%d) :status: 200" % ids[path] in out,
                      "%s did not complete beside the dropped stream on %s: %s", path, base,
                      out[-3000:])
            # answered nothing: no head, no reset (a dropped connection's peer is told nothing)
            check("recv (stream_id=%d) :status" % drop not in out,
                  "the dropped stream got an answer on %s", base)
            check("recv RST_STREAM" not in out, "a stream was reset on %s: %s", base,
                  out[-2000:])
        lines = access(log)
        check(not [ln for ln in lines if ln[2] == "/drop-me"], "nginx got /drop-me: %r", lines)
        check(len([ln for ln in lines if ln[2] in ("/a", "/b")]) == 4, "nginx log %r", lines)
        evs = [e for e in env.ctl("events") if e.get("service") in ("d-tls", "d-h2c")]
        check({e.get("script_function") for e in evs} == {"drop_me"} and
              {e.get("h2_stream") for e in evs} == drop_ids,
              "the drops are not events of drop_me naming streams %r: %r", drop_ids, evs)
    finally:
        p.terminate()
        p.wait(5)


if __name__ == "__main__":
    rc = it.run_module("test_h2edit")
    sys.exit(rc)
