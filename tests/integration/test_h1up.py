#!/usr/bin/python3
"""Integration: the HTTP service kind toward an HTTP/1.1-only service (--upstream http1). Real
clients in the client namespace (curl --http2 over TLS and --http2-prior-knowledge, nghttp with
several streams on one connection) against a real HTTP/1.1 service in the server namespace
(fgxh1.py, python's http.server, keep-alive), which logs what it was sent. Each HTTP/2 stream
reaches it as an HTTP/1.1 request (Host from :authority, the body with its Content-Length or
chunked); its answers come back as HTTP/2 (a chunked one with its trailer, one that ends with the
connection). The regexes, written for HTTP/1.1, still block one stream, the others complete."""
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fgxit as it  # noqa: E402
from h2util import nghttp, stream_ids  # noqa: E402
from fgxit import SRV4, check, test  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
BIG = bytes(range(256)) * (6 << 12)  # fgxh1.BIG
# test_h2's regexes (importing it would register its tests here): bytes only the HTTP/1.1
# rendering has
HDR_REGEX = r"X-Pwn: evil[0-9]+"
LINE_REGEX = r"GET /evil[0-9]+ HTTP/1\.1"
BODY_REGEX = r"q=evil[0-9]+"
RESP_REGEX = r"HTTP/1\.1 200 OK\r\n(.*\r\n)*\r\nFLAG\{"


def certs(env):
    return it.tls_certs(env)


def h1_service(env, *ports):
    """fgxh1.py on ports in the server namespace; its request log."""
    log = os.path.join(env.tmp, "h1-%s.log" % ports[0])
    open(log, "w").close()
    p = subprocess.Popen(["ip", "netns", "exec", env.srv, it.PY, os.path.join(HERE, "fgxh1.py"),
                          log] + [str(pt) for pt in ports],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    check(p.stdout.readline().strip() == "ready", "fgxh1.py did not start: %s",
          p.stderr.read() if p.poll() is not None else "")
    return log, p


def seen(log):
    time.sleep(0.3)
    with open(log) as f:
        return [json.loads(ln) for ln in f if ln.strip()]


def stop(p):
    p.terminate()
    p.wait(5)


def http1_service(env, name, port, tls=False, filters=True):
    extra = ("--layer", "proxy", "--upstream", "plain,http1" if tls else "http1")
    if tls:
        c = certs(env)["proxy"]
        extra += ("--tls-cert", c[0], "--tls-key", c[1])
    env.service(name, "http", port, extra)
    if filters:
        env.filter(name, HDR_REGEX, dir="c2s")
        env.filter(name, LINE_REGEX, dir="c2s")
        env.filter(name, BODY_REGEX, dir="c2s")
        env.filter(name, RESP_REGEX, dir="s2c")


def curl(env, url, mode, *args, timeout=5):
    argv = ["ip", "netns", "exec", env.cli, "curl", "-sk", "--max-time", str(timeout), "-w",
            "\n%{http_version}", mode, url] + list(args)
    p = subprocess.run(argv, capture_output=True, timeout=timeout + 20)
    return p.returncode, p.stdout


def bases(tls_port, h2c_port):
    return (("https://%s:%d" % (SRV4, tls_port), "--http2", tls_port),
            ("http://%s:%d" % (SRV4, h2c_port), "--http2-prior-knowledge", h2c_port))


@test
def h2_and_h2c_reach_an_http11_service_and_the_regexes_still_block(env):
    tls_port, h2c_port = env.port(), env.port()
    http1_service(env, "u-tls", tls_port, tls=True)
    http1_service(env, "u-h2c", h2c_port)
    log, p = h1_service(env, tls_port, h2c_port)
    try:
        for base, mode, port in bases(tls_port, h2c_port):
            rc, out = curl(env, base + "/", mode, "-H", "X-Pwn: harmless")
            check(rc == 0 and out.endswith(b"hello from h1\n\n2"),
                  "innocent GET %s: rc %d %r", base, rc, out)
            rc, out = curl(env, base + "/", mode, "-H", "X-Pwn: evil1337")
            check(rc != 0 and b"hello" not in out, "header match passed %s: %r", base, out)
            rc, out = curl(env, base + "/evil1337", mode)
            check(rc != 0 and b"hello" not in out, "request line match passed %s: %r", base, out)
            rc, out = curl(env, base + "/post", mode, "--data-binary", "a=1&q=harmless")
            want = "got 14 %s" % hashlib.sha256(b"a=1&q=harmless").hexdigest()
            check(rc == 0 and want.encode() in out, "innocent POST %s: rc %d %r", base, rc, out)
            rc, out = curl(env, base + "/post", mode, "--data-binary", "a=1&q=evil1337")
            check(rc != 0 and b"got" not in out, "body match passed %s: %r", base, out)
            rc, out = curl(env, base + "/leak", mode)
            check(rc != 0 and b"FLAG{" not in out, "the flag left %s: %r", base, out)
            # a body of no length said (curl -T - over HTTP/2): chunked to the service
            r = subprocess.run(["ip", "netns", "exec", env.cli, "curl", "-sk", "--max-time", "5",
                                mode, "-T", "-", base + "/post"], input=b"streamed body",
                               capture_output=True, timeout=20)
            want = "got 13 %s" % hashlib.sha256(b"streamed body").hexdigest()
            check(r.returncode == 0 and want.encode() in r.stdout, "chunked PUT %s: rc %d %r",
                  base, r.returncode, r.stdout)
        reqs = seen(log)
        evil_sha = hashlib.sha256(b"a=1&q=evil1337").hexdigest()
        for port in (tls_port, h2c_port):
            mine = [q for q in reqs if q["port"] == port]
            check({q["version"] for q in mine} == {"HTTP/1.1"}, "versions %r", mine)
            paths = [q["path"] for q in mine]
            # /leak is asked (its answer is what is blocked); the evil requests never reach it.
            # The evil POST's head may (its body, which matches, comes after it): never its body.
            check("/evil1337" not in paths and not [q for q in mine if q["sha"] == evil_sha],
                  "an evil request reached the service on %d: %r", port, mine)
            check(paths[:2] == ["/", "/post"] and "/leak" in paths, "the service got %r on %d",
                  paths, port)
            check(all(q["host"] == "%s:%d" % (SRV4, port) and q["hosts"] == 1 for q in mine),
                  "Host is not :authority: %r", mine)
            check(mine[1]["cl"] == "14" and mine[1]["te"] is None and mine[1]["len"] == 14,
                  "POST framing %r", mine[1])
            check(mine[-1]["path"] == "/post" and mine[-1]["te"] == "chunked" and
                  mine[-1]["cl"] is None and mine[-1]["len"] == 13, "PUT framing %r", mine[-1])
    finally:
        stop(p)


@test
def several_streams_on_one_connection_one_reset_the_others_complete(env):
    tls_port, h2c_port = env.port(), env.port()
    http1_service(env, "s-tls", tls_port, tls=True)
    http1_service(env, "s-h2c", h2c_port)
    log, p = h1_service(env, tls_port, h2c_port)
    try:
        for base, _, port in bases(tls_port, h2c_port):
            # /leak's answer is blocked: read to its end and dropped, so that /c's, after it on
            # the same service connection, is still in step
            paths = ["/a", "/evil1337", "/b", "/leak", "/chunked", "/c"]
            rc, out = nghttp(env, [base + x for x in paths])
            ids = stream_ids(out)
            check(set(ids) == set(paths), "nghttp sent %r on %s: %s", ids, base, out[-2000:])
            for path in ("/a", "/b", "/chunked", "/c"):
                check("recv (stream_id=%d) :status: 200" % ids[path] in out,
                      "%s did not complete beside the reset stream on %s: %s", path, base,
                      out[-3000:])
            for path in ("/evil1337", "/leak"):
                check("recv RST_STREAM frame <length=4, flags=0x00, stream_id=%d>" % ids[path]
                      in out, "no RST_STREAM for %s on %s: %s", path, base, out[-2000:])
            check("FLAG{" not in out, "the flag left on %s", base)
            check(out.count("recv RST_STREAM") == 2, "not just the two streams reset on %s", base)
            # the chunked answer's trailer arrives as HTTP/2 trailers on its stream
            check("recv (stream_id=%d) x-trail: done" % ids["/chunked"] in out,
                  "no x-trail trailer on %s: %s", base, out[-3000:])
            check("transfer-encoding" not in out.lower().split("recv settings")[-1],
                  "a hop-by-hop field reached the client on %s", base)
            got = sorted(q["path"] for q in seen(log) if q["port"] == port)
            check(got == ["/a", "/b", "/c", "/chunked", "/leak"], "the service got %r on %d", got,
                  port)
        evs = [e for e in env.ctl("events") if e.get("service") in ("s-tls", "s-h2c")]
        check(len(evs) == 4 and all(e.get("h2_stream") for e in evs),
              "events (one per evil stream, naming it): %r", evs)
    finally:
        stop(p)


@test
def chunked_and_close_delimited_answers(env):
    tls_port, h2c_port = env.port(), env.port()
    http1_service(env, "c-tls", tls_port, tls=True)
    http1_service(env, "c-h2c", h2c_port)
    log, p = h1_service(env, tls_port, h2c_port)
    try:
        for base, mode, _ in bases(tls_port, h2c_port):
            rc, out = curl(env, base + "/chunked", mode)
            check(rc == 0 and out == b"hello chunked world\n2", "chunked %s: rc %d %r", base,
                  rc, out)
            # an answer whose end is the service's close: complete, then the connection ends
            rc, out = curl(env, base + "/close", mode)
            check(rc == 0 and out == b"closing body\n2", "close-delimited %s: rc %d %r", base,
                  rc, out)
            rc, out = curl(env, base + "/", mode)
            check(rc == 0 and b"hello from h1" in out, "after a close %s: rc %d %r", base, rc,
                  out)
    finally:
        stop(p)


@test
def bulk_both_ways(env):
    """6 MiB down and up through one stream: the service's answer parsed while the client
    drains it (the queues' pause and resume), the request body written as the socket takes it."""
    tls_port, h2c_port = env.port(), env.port()
    http1_service(env, "b-tls", tls_port, tls=True)
    http1_service(env, "b-h2c", h2c_port)
    log, p = h1_service(env, tls_port, h2c_port)
    up = os.path.join(env.tmp, "up.bin")
    with open(up, "wb") as f:
        f.write(BIG)
    sha = hashlib.sha256(BIG).hexdigest()
    try:
        for base, mode, _ in bases(tls_port, h2c_port):
            r = subprocess.run(["ip", "netns", "exec", env.cli, "curl", "-sk", "--max-time", "30",
                                mode, base + "/big"], capture_output=True, timeout=60)
            check(r.returncode == 0 and hashlib.sha256(r.stdout).hexdigest() == sha,
                  "download %s: rc %d, %d bytes", base, r.returncode, len(r.stdout))
            for framing in ((), ("-H", "Transfer-Encoding: chunked")):
                r = subprocess.run(["ip", "netns", "exec", env.cli, "curl", "-sk", "--max-time",
                                    "30", mode, "--data-binary", "@" + up, *framing,
                                    base + "/post"], capture_output=True, timeout=60)
                check(r.returncode == 0 and
                      ("got %d %s" % (len(BIG), sha)).encode() in r.stdout,
                      "upload %s %r: rc %d %r", base, framing, r.returncode, r.stdout[-200:])
    finally:
        stop(p)


@test
def tls_both_ways_to_an_http11_tls_service(env):
    """--upstream http1 on a TLS service (upstream TLS): nginx-light, TLS without http2, is
    offered ALPN http/1.1 alone and sent HTTP/1.1; the client gets h2 from the proxy."""
    if shutil.which("nginx") is None:
        raise AssertionError("nginx is not installed (deploy/install-deps.sh test)")
    port = env.port()
    c = certs(env)
    env.service("n-tls", "http", port, ("--layer", "proxy", "--tls-cert", c["proxy"][0],
                                        "--tls-key", c["proxy"][1], "--upstream", "tls,http1"))
    env.filter("n-tls", LINE_REGEX, dir="c2s")
    d = os.path.join(env.tmp, "nginx-h1-%d" % port)
    os.makedirs(d, exist_ok=True)
    conf = os.path.join(d, "nginx.conf")
    with open(conf, "w") as f:
        f.write("""daemon off; worker_processes 1; pid %(d)s/nginx.pid; error_log %(d)s/error.log;
events { worker_connections 64; }
http {
  log_format t '$server_protocol|$request_uri|$ssl_protocol';
  access_log %(d)s/access.log t;
  client_body_temp_path %(d)s; proxy_temp_path %(d)s; fastcgi_temp_path %(d)s;
  uwsgi_temp_path %(d)s; scgi_temp_path %(d)s;
  server { listen %(ip)s:%(port)d ssl; ssl_certificate %(cert)s; ssl_certificate_key %(key)s;
           location / { return 200 "hello from nginx h1\\n"; } }
}
""" % {"d": d, "ip": SRV4, "port": port, "cert": c["service"][0], "key": c["service"][1]})
    p = it.nginx_start(env, conf, d, (port,))
    try:
        base = "https://%s:%d" % (SRV4, port)
        for _ in range(2):
            rc, out = curl(env, base + "/x", "--http2")
            check(rc == 0 and out == b"hello from nginx h1\n\n2", "h2 to nginx h1: rc %d %r",
                  rc, out)
        rc, out = curl(env, base + "/evil1337", "--http2")
        check(rc != 0 and b"hello" not in out, "the evil request passed: %r", out)
        time.sleep(0.3)
        with open(os.path.join(d, "access.log")) as f:
            lines = [ln.strip().split("|") for ln in f if ln.strip()]
        check([ln[:2] for ln in lines] == [["HTTP/1.1", "/x"]] * 2 and
              all(ln[2].startswith("TLS") for ln in lines), "nginx log %r", lines)
    finally:
        p.terminate()
        p.wait(5)


@test
def two_large_uploads_on_one_connection_do_not_stall(env):
    """The second upload waits its turn while the first is written; the first needs the client
    read all along: the waiting one is refused (REFUSED_STREAM) once too much of it waits,
    rather than the client left unread (a stall). What completes is whole."""
    h2c_port = env.port()
    http1_service(env, "l-h2c", h2c_port, filters=False)
    log, p = h1_service(env, h2c_port)
    up = os.path.join(env.tmp, "up2.bin")
    with open(up, "wb") as f:
        f.write(BIG)
    try:
        base = "http://%s:%d" % (SRV4, h2c_port)
        t0 = time.monotonic()
        argv = ["ip", "netns", "exec", env.cli, "nghttp", "-nv", "-t", "20", "-d", up,
                base + "/post", base + "/post?2"]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        out = r.stdout + r.stderr
        took = time.monotonic() - t0
        ids = stream_ids(out)
        check(set(ids) == {"/post", "/post?2"}, "nghttp sent %r: %s", ids, out[-1500:])
        check(took < 15, "the uploads stalled (%.1f s): %s", took, out[-1500:])
        check("recv (stream_id=%d) :status: 200" % ids["/post"] in out,
              "the first upload did not complete: %s", out[-2000:])
        second_ok = "recv (stream_id=%d) :status: 200" % ids["/post?2"] in out
        second_refused = re.search(r"recv RST_STREAM frame <[^>]*stream_id=%d>\s*"
                                   r"\(error_code=REFUSED_STREAM" % ids["/post?2"], out)
        check(second_ok or second_refused, "the second upload neither completed nor was "
              "refused: %s", out[-2000:])
        whole = [q for q in seen(log) if q["len"] == len(BIG) and
                 q["sha"] == hashlib.sha256(BIG).hexdigest()]
        check(len(whole) == (2 if second_ok else 1), "the service got %r", seen(log))
    finally:
        stop(p)


@test
def a_service_that_closes_after_each_answer(env):
    """An HTTP/1.0 service (python's http.server default) closes after each answer: the proxy
    opens a new connection for the next stream, so every stream of the client's one connection
    is answered, in turn, and the client's connection stays."""
    h2c_port = env.port()
    http1_service(env, "z-h2c", h2c_port, filters=False)
    log, p = h1_service(env, "%d:1.0" % h2c_port)
    try:
        base = "http://%s:%d" % (SRV4, h2c_port)
        t0 = time.monotonic()
        rc, out = nghttp(env, [base + "/a", base + "/b", base + "/chunked", base + "/c"])
        check(time.monotonic() - t0 < 4, "nghttp hung: %s", out[-1500:])
        ids = stream_ids(out)
        for path in ("/a", "/b", "/chunked", "/c"):
            check("recv (stream_id=%d) :status: 200" % ids[path] in out, "%s unanswered: %s",
                  path, out)
        check("recv RST_STREAM" not in out and "recv GOAWAY" not in out,
              "a stream reset or the connection ended: %s", out[-2000:])
        check(sorted(q["path"] for q in seen(log)) == ["/a", "/b", "/c", "/chunked"],
              "the service got %r", seen(log))
        # a POST written when the service closes without a byte of answer (after a chunked
        # answer, which does not say it closes) is reset, never sent twice
        body = os.path.join(env.tmp, "small.bin")
        with open(body, "wb") as f:
            f.write(b"x=1")
        r = subprocess.run(["ip", "netns", "exec", env.cli, "nghttp", "-nv", "-t", "5", "-d",
                            body, base + "/chunked", base + "/post"], capture_output=True,
                           text=True, timeout=20)
        out = r.stdout + r.stderr
        ids = stream_ids(out)
        check("recv (stream_id=%d) :status: 200" % ids["/chunked"] in out, "/chunked: %s",
              out[-2000:])
        check(re.search(r"recv RST_STREAM frame <[^>]*stream_id=%d>\s*"
                        r"\(error_code=INTERNAL_ERROR" % ids["/post"], out),
              "the POST in flight was not reset: %s", out[-2000:])
        check([q["path"] for q in seen(log)].count("/post") <= 1, "the POST was sent twice: %r",
              seen(log))
    finally:
        stop(p)


@test
def a_filter_file_judges_the_streams_toward_an_http11_service(env):
    """test_h2's filter file (written for HTTP/1.1) on h2 and h2c streams that reach an
    HTTP/1.1 service: the same requests and answer refused, the innocent ones (a chunked
    upload and a chunked answer with its trailer among them) pass."""
    tls_port, h2c_port = env.port(), env.port()
    http1_service(env, "fs-tls", tls_port, tls=True, filters=False)
    http1_service(env, "fs-h2c", h2c_port, filters=False)
    for name in ("fs-tls", "fs-h2c"):
        r = env.ctl_raw("script", "set", name, os.path.join(HERE, "scripts", "h2_http_filter.py"),
                        json_out=False)
        check(r.returncode == 0, "script set %s: %r", name, r.stderr)
    log, p = h1_service(env, tls_port, h2c_port)
    try:
        for base, mode, port in bases(tls_port, h2c_port):
            rc, out = curl(env, base + "/", mode, "-H", "X-Pwn: harmless")
            check(rc == 0 and out.endswith(b"hello from h1\n\n2"), "innocent GET %s: rc %d %r",
                  base, rc, out)
            rc, out = curl(env, base + "/chunked", mode)
            check(rc == 0 and out == b"hello chunked world\n2", "chunked %s: rc %d %r", base,
                  rc, out)
            r = subprocess.run(["ip", "netns", "exec", env.cli, "curl", "-sk", "--max-time", "5",
                                mode, "-T", "-", base + "/post"], input=b"streamed body",
                               capture_output=True, timeout=20)
            want = "got 13 %s" % hashlib.sha256(b"streamed body").hexdigest()
            check(r.returncode == 0 and want.encode() in r.stdout, "chunked PUT %s: rc %d %r",
                  base, r.returncode, r.stdout)
            for args, what in ((["-H", "X-Pwn: evil1337"], "header"), ([], "url"),
                               (["--data-binary", "a=1&q=evil1337"], "body")):
                url = base + ("/evil1337" if what == "url" else "/post" if what == "body" else
                              "/")
                rc, out = curl(env, url, mode, *args)
                check(rc != 0 and b"hello" not in out and b"got" not in out,
                      "the %s passed the file %s: %r", what, base, out)
            rc, out = curl(env, base + "/leak", mode)
            check(rc != 0 and b"FLAG{" not in out, "the flag left %s: %r", base, out)
            rc, out = curl(env, base + "/", mode)
            check(rc == 0 and b"hello from h1" in out, "after the blocks %s: rc %d %r", base,
                  rc, out)
        paths = [q.get("path") for q in seen(log)]
        check("/evil1337" not in paths, "the service got /evil1337: %r", paths)
    finally:
        stop(p)


@test
def upstream_http1_is_shown_kept_and_checked(env):
    port = env.port()
    r = env.ctl_raw("service", "add", "t-tcp", "--proto", "tcp", "--port", port, "--layer",
                    "proxy", "--upstream", "http1", json_out=False)
    check(r.returncode != 0 and "--proto http" in r.stderr, "tcp + http1: %r", r.stderr)
    r = env.ctl_raw("service", "add", "t-bad", "--proto", "http", "--port", port, "--layer",
                    "proxy", "--upstream", "http3", json_out=False)
    check(r.returncode != 0 and "http1" in r.stderr, "--upstream http3: %r", r.stderr)
    env.service("k-h", "http", port, ("--layer", "proxy", "--upstream", "http1"))
    check(env.ctl("service", "show", "k-h").get("upstream_http") == "http1", "show: not http1")
    txt = env.ctl_raw("service", "show", "k-h", json_out=False).stdout
    check(re.search(r"http: .*upstream http1", txt), "show text: %s", txt)
    out = os.path.join(env.tmp, "h1-export.json")
    r = env.ctl_raw("export", out, json_out=False)
    check(r.returncode == 0, "export: %r", r.stderr)
    with open(out) as f:
        svc = [s for s in json.load(f)["services"] if s["name"] == "k-h"][0]
    check(svc.get("upstream_http") == "http1", "export: %r", svc)
    env.ctl("service", "set", "k-h", "--upstream", "h2")
    check(env.ctl("service", "show", "k-h").get("upstream_http") == "h2", "set --upstream h2")
    env.ctl("service", "rm", "k-h", "--yes")
    r = env.ctl_raw("import", out, json_out=False)
    check(r.returncode == 0, "import: %r", r.stderr)
    check(env.ctl("service", "show", "k-h").get("upstream_http") == "http1",
          "import lost upstream http1")
    # --proto tcp drops the kind and its upstream with it
    env.ctl("service", "set", "k-h", "--proto", "tcp")
    check("upstream_http" not in env.ctl("service", "show", "k-h"), "tcp kept upstream_http")


if __name__ == "__main__":
    rc = it.run_module("test_h1up")
    sys.exit(rc)
