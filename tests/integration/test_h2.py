#!/usr/bin/python3
"""Integration: the HTTP service kind (--proto http) on the proxy layer. Real clients in the
client namespace (curl --http1.1, --http2 over TLS, --http2-prior-knowledge; nghttp with several
streams on one connection) against real services in the server namespace (nginx-light: TLS with
http2 and HTTP/1.1, cleartext h2c, cleartext HTTP/1.1). One regex, written for HTTP/1.1, blocks
the same request over HTTP/1.1, h2 over TLS and h2c, while the innocent request passes on each;
a block resets that stream only, and another stream on the same connection completes. One filter
file (Python, written for HTTP/1.1) does the same over the three."""
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

# Only the HTTP/1.1 rendering has these bytes: on the wire h2 sends "x-pwn" in lowercase, HPACK
# coded, and has no request line at all.
HDR_REGEX = r"X-Pwn: evil[0-9]+"
LINE_REGEX = r"GET /evil[0-9]+ HTTP/1\.1"
BODY_REGEX = r"q=evil[0-9]+"
BIG = bytes(range(256)) * (6 << 12)  # 6 MiB, no match in it
RESP_REGEX = r"HTTP/1\.1 200 OK\r\n(.*\r\n)*\r\nFLAG\{"


def certs(env):
    return it.tls_certs(env)


def nginx(env, tls_port, h2c_port, h1_port):
    """nginx-light: TLS with http2 (and HTTP/1.1 by ALPN), h2c, plain HTTP/1.1."""
    if shutil.which("nginx") is None:
        raise AssertionError("nginx is not installed (deploy/install-deps.sh test)")
    c = certs(env)["service"]
    d = os.path.join(env.tmp, "nginx-h2-%d" % tls_port)
    os.makedirs(d, exist_ok=True)
    conf = os.path.join(d, "nginx.conf")
    locs = """
    location / { return 200 "hello from nginx\\n"; }
    location /leak { return 200 "FLAG{from-nginx}\\n"; }
    # answered once the whole body is in (proxy_request_buffering): a `return` could answer
    # from the HEADERS frame before the DATA frame that matches is even sent
    location /post { proxy_pass http://127.0.0.1:%d/; }
    location /big { alias %s/big.bin; }
""" % (h1_port + 1000, d)
    with open(os.path.join(d, "big.bin"), "wb") as f:
        f.write(BIG)
    with open(conf, "w") as f:
        f.write("""daemon off; worker_processes 1; pid %(d)s/nginx.pid; error_log %(d)s/error.log;
events { worker_connections 64; }
http {
  log_format t '$server_port|$server_protocol|$request_uri|$status';
  access_log %(d)s/access.log t; client_max_body_size 64m;
  client_body_temp_path %(d)s; proxy_temp_path %(d)s; fastcgi_temp_path %(d)s;
  uwsgi_temp_path %(d)s; scgi_temp_path %(d)s;
  server { listen %(ip)s:%(tls)d ssl http2; ssl_certificate %(cert)s;
           ssl_certificate_key %(key)s; %(locs)s }
  server { listen %(ip)s:%(h2c)d http2; %(locs)s }
  server { listen %(ip)s:%(h1)d; %(locs)s }
  server { listen 127.0.0.1:%(inner)d; access_log off;
           location / { return 200 "hello from nginx\\n"; } }
}
""" % {"d": d, "ip": SRV4, "tls": tls_port, "h2c": h2c_port, "h1": h1_port, "inner": h1_port + 1000, "cert": c[0],
            "key": c[1], "locs": locs})
    p = it.nginx_start(env, conf, d, (tls_port, h2c_port, h1_port))
    return os.path.join(d, "access.log"), p


def curl(env, url, mode, headers=(), body=None):
    argv = ["ip", "netns", "exec", env.cli, "curl", "-sk", "--max-time", "5", "-w",
            "\n%{http_version}", mode, url]
    if body is not None:
        argv += ["--data-binary", body]
    for h in headers:
        argv += ["-H", h]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=15)
    return p.returncode, p.stdout


def http_service(env, name, port, tls=False):
    extra = ("--layer", "proxy")
    if tls:
        c = certs(env)["proxy"]
        extra += ("--tls-cert", c[0], "--tls-key", c[1])
    sid, _ = env.service(name, "http", port, extra)
    env.filter(name, HDR_REGEX, dir="c2s")
    env.filter(name, LINE_REGEX, dir="c2s")
    env.filter(name, BODY_REGEX, dir="c2s")
    env.filter(name, RESP_REGEX, dir="s2c")
    return sid


def access(log):
    time.sleep(0.3)
    with open(log) as f:
        return [ln.strip().split("|") for ln in f if ln.strip()]


@test
def one_regex_blocks_http11_h2_and_h2c(env):
    tls_port, h2c_port, h1_port = env.port(), env.port(), env.port()
    http_service(env, "h-tls", tls_port, tls=True)
    http_service(env, "h-h2c", h2c_port)
    http_service(env, "h-h1", h1_port)
    doc = env.service_doc("h-tls")
    check(doc.get("proto") == "http", "service list shows proto %r, want http", doc.get("proto"))
    log, p = nginx(env, tls_port, h2c_port, h1_port)
    try:
        cases = (("https://%s:%d" % (SRV4, tls_port), "--http1.1", "1.1"),
                 ("https://%s:%d" % (SRV4, tls_port), "--http2", "2"),
                 ("http://%s:%d" % (SRV4, h2c_port), "--http2-prior-knowledge", "2"),
                 ("http://%s:%d" % (SRV4, h1_port), "--http1.1", "1.1"))
        for base, mode, ver in cases:
            rc, out = curl(env, base + "/", mode, ["X-Pwn: harmless"])
            check(rc == 0 and "hello from nginx" in out, "innocent %s %s: rc %d %r", base, mode,
                  rc, out)
            check(out.strip().splitlines()[-1] == ver, "%s %s spoke HTTP %r", base, mode,
                  out.strip().splitlines()[-1])
            rc, out = curl(env, base + "/", mode, ["X-Pwn: evil1337"])
            check(rc != 0 and "hello" not in out, "header match passed %s %s: %r", base, mode,
                  out)
            rc, out = curl(env, base + "/evil1337", mode)
            check(rc != 0 and "hello" not in out, "request line match passed %s %s: %r", base,
                  mode, out)
            rc, out = curl(env, base + "/post", mode, body="a=1&q=harmless")
            check(rc == 0 and "hello from nginx" in out, "innocent POST %s %s: rc %d %r", base,
                  mode, rc, out)
            rc, out = curl(env, base + "/post", mode, body="a=1&q=evil1337")
            check(rc != 0 and "hello" not in out, "body match passed %s %s: %r", base, mode, out)
            rc, out = curl(env, base + "/leak", mode)
            check(rc != 0 and "FLAG{" not in out, "the flag left %s %s: %r", base, mode, out)
        lines = access(log)
        for port, proto in ((tls_port, "HTTP/1.1"), (tls_port, "HTTP/2.0"), (h2c_port, "HTTP/2.0"),
                            (h1_port, "HTTP/1.1")):
            uris = [ln[2] for ln in lines if ln[0] == str(port) and ln[1] == proto]
            check("/" in uris, "nginx got no innocent %s request on %d: %r", proto, port, lines)
            check("/evil1337" not in uris, "nginx got the evil request (%s on %d): %r", proto,
                  port, lines)
        # nginx saw h2 from the proxy where the client spoke it: what the client spoke goes on
        check({ln[1] for ln in lines if ln[0] == str(h2c_port)} == {"HTTP/2.0"},
              "h2c upstream protocols: %r", lines)
    finally:
        p.terminate()
        p.wait(5)


@test
def a_block_resets_one_stream_and_the_others_complete(env):
    tls_port, h2c_port, h1_port = env.port(), env.port(), env.port()
    http_service(env, "m-tls", tls_port, tls=True)
    http_service(env, "m-h2c", h2c_port)
    log, p = nginx(env, tls_port, h2c_port, h1_port)
    evil_ids = set()
    try:
        for base in ("https://%s:%d" % (SRV4, tls_port), "http://%s:%d" % (SRV4, h2c_port)):
            rc, out = nghttp(env, [base + "/a", base + "/evil1337", base + "/b"])
            ids = stream_ids(out)
            check(set(ids) == {"/a", "/evil1337", "/b"}, "nghttp sent %r on %s: %s", ids, base,
                  out[-2000:])
            evil = ids["/evil1337"]
            evil_ids.add(evil)
            for path in ("/a", "/b"):
                check("recv (stream_id=%d) :status: 200" % ids[path] in out,
                      "%s did not complete beside the reset stream on %s: %s", path, base,
                      out[-3000:])
            check("recv RST_STREAM frame <length=4, flags=0x00, stream_id=%d>" % evil in out,
                  "no RST_STREAM for stream %d on %s: %s", evil, base, out[-2000:])
            check("recv (stream_id=%d) :status" % evil not in out,
                  "the evil stream got an answer on %s", base)
            check(out.count("recv RST_STREAM") == 1, "more than the one stream reset on %s", base)
        lines = access(log)
        check(not [ln for ln in lines if ln[2] == "/evil1337"], "nginx got /evil1337: %r", lines)
        check(len([ln for ln in lines if ln[2] in ("/a", "/b")]) == 4, "nginx log %r", lines)
        # the block is an event naming its stream
        evs = [e for e in env.ctl("events") if e.get("service") in ("m-tls", "m-h2c")]
        check(len(evs) >= 2, "events: %r", evs)
        check({e.get("h2_stream") for e in evs} == evil_ids, "the events name streams %r, want %r",
              [e.get("h2_stream") for e in evs], evil_ids)
        txt = env.ctl_raw("events", json_out=False).stdout
        check(any("h2#%d" % i in txt for i in evil_ids), "events does not name the stream: %s",
              txt[-800:])
    finally:
        p.terminate()
        p.wait(5)


def h2_frame(ftype, flags, sid, payload):
    return len(payload).to_bytes(3, "big") + bytes([ftype, flags]) + sid.to_bytes(4, "big") + payload


def h2_get(path):
    """A client preface, an empty SETTINGS and stream 1's GET (HPACK by hand: static-table
    indexes, literals without Huffman), END_STREAM."""
    hdrs = b"\x82\x86"  # :method GET, :scheme http
    hdrs += b"\x84" if path == "/" else b"\x44" + bytes([len(path)]) + path.encode()
    hdrs += b"\x41\x01x"  # :authority x
    return (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + h2_frame(4, 0, 0, b"") +
            h2_frame(1, 5, 1, hdrs))


@test
def bulk_both_ways_over_h2_and_h2c(env):
    """6 MiB down and up through one stream: flow control, the queues' pause and resume, and
    writes the socket does not take at once."""
    import hashlib
    tls_port, h2c_port, h1_port = env.port(), env.port(), env.port()
    http_service(env, "b-tls", tls_port, tls=True)
    http_service(env, "b-h2c", h2c_port)
    log, p = nginx(env, tls_port, h2c_port, h1_port)
    up = os.path.join(env.tmp, "up.bin")
    with open(up, "wb") as f:
        f.write(BIG)
    try:
        for base, mode in (("https://%s:%d" % (SRV4, tls_port), "--http2"),
                           ("http://%s:%d" % (SRV4, h2c_port), "--http2-prior-knowledge")):
            r = subprocess.run(["ip", "netns", "exec", env.cli, "curl", "-sk", "--max-time", "20",
                                mode, base + "/big"], capture_output=True, timeout=40)
            check(r.returncode == 0 and hashlib.sha256(r.stdout).digest() ==
                  hashlib.sha256(BIG).digest(), "download %s: rc %d, %d bytes", base,
                  r.returncode, len(r.stdout))
            r = subprocess.run(["ip", "netns", "exec", env.cli, "curl", "-sk", "--max-time", "20",
                                mode, "--data-binary", "@" + up, "-w", "%{size_upload}",
                                base + "/post"], capture_output=True, text=True, timeout=40)
            check(r.returncode == 0 and "hello from nginx" in r.stdout and
                  r.stdout.endswith(str(len(BIG))), "upload %s: rc %d %r", base, r.returncode,
                  r.stdout[-200:])
    finally:
        p.terminate()
        p.wait(5)


@test
def first_bytes_split_anywhere_are_judged(env):
    tls_port, h2c_port, h1_port = env.port(), env.port(), env.port()
    http_service(env, "s-h2c", h2c_port)
    http_service(env, "s-h1", h1_port)
    log, p = nginx(env, tls_port, h2c_port, h1_port)
    try:
        # HTTP/1.1 whose first read ("P") could still be the HTTP/2 preface: kept, then judged
        # with what follows
        for xpwn, passes in (("harmless", True), ("evil1337", False)):
            c = env.tcp_client(SRV4, h1_port, [b"P", 0.3, ("OST /post HTTP/1.1\r\nHost: x\r\n"
                                                         "X-Pwn: %s\r\nContent-Length: 0\r\n"
                                                         "Connection: close\r\n\r\n" % xpwn)
                                               .encode(), ("read", 1.5)])
            got = b"hello from nginx" in c.get("received", b"")
            check(got == passes, "split HTTP/1.1 with X-Pwn %s: %r", xpwn, c)
        # the HTTP/2 preface itself split over two reads
        for path, passes in (("/", True), ("/evil1337", False)):
            req = h2_get(path)
            c = env.tcp_client(SRV4, h2c_port, [req[:9], 0.3, req[9:], ("read", 1.5)])
            rx = c.get("received", b"")
            check((b"hello from nginx" in rx) == passes, "split preface, GET %s: %r", path, rx)
            if not passes:
                check(h2_frame(3, 0, 1, (8).to_bytes(4, "big")) in rx,
                      "no RST_STREAM(CANCEL) for stream 1: %r", rx)
        uris = [ln[2] for ln in access(log)]
        check("/evil1337" not in uris and uris.count("/") == 1, "nginx log %r", uris)
    finally:
        p.terminate()
        p.wait(5)


@test
def tls_with_plain_upstream_speaks_h2c_to_the_service(env):
    tls_port, h2c_port, h1_port = env.port(), env.port(), env.port()
    # the fgex service is TLS on nginx's cleartext h2c port: the proxy chooses h2 by ALPN
    c = certs(env)["proxy"]
    env.service("p-up", "http", h2c_port, ("--layer", "proxy", "--tls-cert", c[0], "--tls-key",
                                           c[1], "--upstream", "plain"))
    env.filter("p-up", LINE_REGEX, dir="c2s")
    log, p = nginx(env, tls_port, h2c_port, h1_port)
    try:
        base = "https://%s:%d" % (SRV4, h2c_port)
        rc, out = curl(env, base + "/", "--http2")
        check(rc == 0 and "hello from nginx" in out and out.strip().endswith("2"),
              "h2 over TLS to an h2c service: rc %d %r", rc, out)
        rc, out = curl(env, base + "/evil1337", "--http2")
        check(rc != 0 and "hello" not in out, "the evil request passed: %r", out)
        lines = access(log)
        check([ln[2] for ln in lines] == ["/"] and lines[0][1] == "HTTP/2.0", "nginx log %r",
              lines)
    finally:
        p.terminate()
        p.wait(5)


@test
def one_filter_file_blocks_http11_h2_and_h2c(env):
    """A filter file written for HTTP/1.1 (HttpRequest: url, a header, the body;
    HttpFullResponse: the answer's body) judges the h2 and h2c streams as rendered: the same
    requests blocked and passed over HTTP/1.1, h2 over TLS and h2c; a block resets that stream
    only, and the next stream on the connection completes."""
    tls_port, h2c_port, h1_port = env.port(), env.port(), env.port()
    c = certs(env)["proxy"]
    env.service("f-tls", "http", tls_port, ("--layer", "proxy", "--tls-cert", c[0], "--tls-key",
                                            c[1]))
    env.service("f-h2c", "http", h2c_port, ("--layer", "proxy"))
    env.service("f-h1", "http", h1_port, ("--layer", "proxy"))
    script = os.path.join(HERE, "scripts", "h2_http_filter.py")
    for name in ("f-tls", "f-h2c", "f-h1"):
        r = env.ctl_raw("script", "set", name, script, json_out=False)
        check(r.returncode == 0, "script set %s: %r", name, r.stderr)
    log, p = nginx(env, tls_port, h2c_port, h1_port)
    try:
        cases = (("https://%s:%d" % (SRV4, tls_port), "--http1.1", "1.1"),
                 ("https://%s:%d" % (SRV4, tls_port), "--http2", "2"),
                 ("http://%s:%d" % (SRV4, h2c_port), "--http2-prior-knowledge", "2"),
                 ("http://%s:%d" % (SRV4, h1_port), "--http1.1", "1.1"))
        for base, mode, ver in cases:
            rc, out = curl(env, base + "/", mode, ["X-Pwn: harmless"])
            check(rc == 0 and "hello from nginx" in out, "innocent %s %s: rc %d %r", base, mode,
                  rc, out)
            check(out.strip().splitlines()[-1] == ver, "%s %s spoke HTTP %r", base, mode,
                  out.strip().splitlines()[-1])
            rc, out = curl(env, base + "/", mode, ["X-Pwn: evil1337"])
            check(rc != 0 and "hello" not in out, "header passed the file %s %s: %r", base,
                  mode, out)
            rc, out = curl(env, base + "/evil1337", mode)
            check(rc != 0 and "hello" not in out, "url passed the file %s %s: %r", base, mode,
                  out)
            rc, out = curl(env, base + "/post", mode, body="a=1&q=harmless")
            check(rc == 0 and "hello from nginx" in out, "innocent POST %s %s: rc %d %r", base,
                  mode, rc, out)
            rc, out = curl(env, base + "/post", mode, body="a=1&q=evil1337")
            check(rc != 0 and "hello" not in out, "body passed the file %s %s: %r", base, mode,
                  out)
            rc, out = curl(env, base + "/leak", mode)
            check(rc != 0 and "FLAG{" not in out, "the flag left %s %s: %r", base, mode, out)
        lines = access(log)
        for port, proto in ((tls_port, "HTTP/1.1"), (tls_port, "HTTP/2.0"), (h2c_port, "HTTP/2.0"),
                            (h1_port, "HTTP/1.1")):
            uris = [ln[2] for ln in lines if ln[0] == str(port) and ln[1] == proto]
            check("/" in uris and "/post" in uris, "nginx got no innocent %s request on %d: %r",
                  proto, port, lines)
            check("/evil1337" not in uris, "nginx got the evil request (%s on %d): %r", proto,
                  port, lines)
        # several streams on one connection: the blocked one reset, the others complete
        evil_ids = set()
        for base in ("https://%s:%d" % (SRV4, tls_port), "http://%s:%d" % (SRV4, h2c_port)):
            rc, out = nghttp(env, [base + "/a", base + "/evil1337", base + "/b"])
            ids = stream_ids(out)
            check(set(ids) == {"/a", "/evil1337", "/b"}, "nghttp sent %r on %s: %s", ids, base,
                  out[-2000:])
            evil_ids.add(ids["/evil1337"])
            for path in ("/a", "/b"):
                check("recv (stream_id=%d) :status: 200" % ids[path] in out,
                      "%s did not complete beside the reset stream on %s: %s", path, base,
                      out[-3000:])
            check("recv RST_STREAM frame <length=4, flags=0x00, stream_id=%d>" % ids["/evil1337"]
                  in out, "no RST_STREAM for the evil stream on %s: %s", base, out[-2000:])
        # the file's blocks are events naming the function, and the stream
        evs = [e for e in env.ctl("events") if e.get("service") in ("f-tls", "f-h2c") and
               e.get("h2_stream")]
        check({e.get("script_function") for e in evs} == {"no_evil", "no_flag"},
              "the file's h2 blocks are not events of its functions: %r", evs)
        check(evil_ids <= {e.get("h2_stream") for e in evs}, "the events name %r, want %r",
              [e.get("h2_stream") for e in evs], evil_ids)
    finally:
        p.terminate()
        p.wait(5)


@test
def http_kind_needs_the_proxy_layer_and_is_kept(env):
    port = env.port()
    r = env.ctl_raw("service", "add", "bad-h", "--proto", "http", "--port", port,
                    json_out=False)
    check(r.returncode != 0 and "--layer proxy" in r.stderr, "nfqueue + http: %r", r.stderr)
    # a web port on the nfqueue layer is accepted with a warning naming the way out
    r = env.ctl_raw("service", "add", "web-nfq", "--proto", "tcp", "--port", "8443",
                    json_out=False)
    check(r.returncode == 0 and "--layer proxy --proto http" in r.stderr, "hint: %r", r.stderr)
    env.service("keep-h", "http", port, ("--layer", "proxy"))
    check(env.ctl("service", "show", "keep-h").get("proto") == "http", "show: not http")
    out = os.path.join(env.tmp, "h2-export.json")
    r = env.ctl_raw("export", out, json_out=False)
    check(r.returncode == 0, "export: %r", r.stderr)
    env.ctl("service", "set", "keep-h", "--proto", "tcp")
    check(env.ctl("service", "show", "keep-h").get("proto") == "tcp", "set --proto tcp")
    env.ctl("service", "rm", "keep-h", "--yes")
    r = env.ctl_raw("import", out, json_out=False)
    check(r.returncode == 0, "import: %r", r.stderr)
    check(env.ctl("service", "show", "keep-h").get("proto") == "http", "import lost the kind")


if __name__ == "__main__":
    rc = it.run_module("test_h2")
    sys.exit(rc)
