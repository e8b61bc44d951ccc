#!/usr/bin/python3
"""Integration: what fgex keeps of an HTTP/2 connection follows the rendering. Real clients in
the client namespace (nghttp: two POST streams on one h2 connection over TLS, two on an h2c
one) against nginx-light (h2 over TLS, h2c) in the server namespace, through
an HTTP service (--proto http). The capture holds each exchange as its own HTTP/1.1 connection:
`capture --pcap` read back with scapy (and tshark's HTTP dissector when it is installed) shows
the rendered request lines, bodies and answers, one TCP stream per exchange; `filter test` runs
on the rendered bytes; a block's event and `events show` carry the rendered request."""
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fgxit as it  # noqa: E402
from h2util import nghttp, stream_ids  # noqa: E402
from fgxit import SRV4, check, test  # noqa: E402

BODY = b"q=body-of-the-post"
EVIL_REGEX = r"GET /evil[0-9]+ HTTP/1\.1"


def certs(env):
    return it.tls_certs(env)


def nginx(env, tls_port, h2c_port):
    """nginx-light: h2 over TLS and h2c; /one and /two proxied to an inner server (so the body is
    read before the answer), each with its own answer."""
    if shutil.which("nginx") is None:
        raise AssertionError("nginx is not installed (deploy/install-deps.sh test)")
    c = certs(env)["service"]
    d = os.path.join(env.tmp, "nginx-h2cap-%d" % tls_port)
    os.makedirs(d, exist_ok=True)
    conf = os.path.join(d, "nginx.conf")
    inner = tls_port + 1000
    locs = "location / { proxy_pass http://127.0.0.1:%d; }" % inner
    with open(conf, "w") as f:
        f.write("""daemon off; worker_processes 1; pid %(d)s/nginx.pid; error_log %(d)s/error.log;
events { worker_connections 64; }
http {
  access_log off;
  client_body_temp_path %(d)s; proxy_temp_path %(d)s; fastcgi_temp_path %(d)s;
  uwsgi_temp_path %(d)s; scgi_temp_path %(d)s;
  server { listen %(ip)s:%(tls)d ssl http2; ssl_certificate %(cert)s;
           ssl_certificate_key %(key)s; %(locs)s }
  server { listen %(ip)s:%(h2c)d http2; %(locs)s }
  server { listen 127.0.0.1:%(inner)d;
           location /one { return 200 "answer one\\n"; }
           location /two { return 200 "answer two\\n"; }
           location / { return 200 "hello\\n"; } }
}
""" % {"d": d, "ip": SRV4, "tls": tls_port, "h2c": h2c_port, "inner": inner, "cert": c[0],
            "key": c[1], "locs": locs})
    p = it.nginx_start(env, conf, d, (tls_port, h2c_port))
    return p


def post_two(env, base):
    """POST BODY to /one and /two on one connection (nghttp -d: curl 7.88 fails the second POST
    on a reused h2c connection, nginx direct too); the streams' ids."""
    path = os.path.join(env.tmp, "h2cap-body")
    with open(path, "wb") as f:
        f.write(BODY)
    argv = ["ip", "netns", "exec", env.cli, "nghttp", "-nv", "-t", "5", "-d", path,
            base + "/one", base + "/two"]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=20)
    out = p.stdout + p.stderr
    ids = stream_ids(out)
    check(set(ids) == {"/one", "/two"}, "nghttp sent %r on %s: %s", ids, base, out[-2000:])
    for path in ids:
        check("recv (stream_id=%d) :status: 200" % ids[path] in out, "%s did not pass on %s: %s",
              path, base, out[-2000:])
    return ids


def write_pcap(env, svc):
    fd, path = tempfile.mkstemp(suffix=".pcap")
    os.close(fd)
    doc = env.ctl("capture", svc, "--pcap", path)
    check(doc["file"] == path, "capture --json file %r", doc)
    return path


def tcp_streams(path):
    """{client port: {"syn": bool, "c2s": bytes, "s2c": bytes}} of the pcap, read with scapy;
    the payloads in sequence order."""
    from scapy.all import TCP, rdpcap  # noqa: PLC0415 - scapy is slow to import
    out = {}
    segs = {}
    for p in rdpcap(path):
        if TCP not in p:
            continue
        t = p[TCP]
        to_srv = t.sport >= 1024 and t.sport != t.dport and t.dport < t.sport
        cport = t.sport if to_srv else t.dport
        s = out.setdefault(cport, {"syn": False, "c2s": b"", "s2c": b""})
        if t.flags & 0x02 and not t.flags & 0x10:
            s["syn"] = True
        if bytes(t.payload):
            segs.setdefault((cport, to_srv), []).append((t.seq, bytes(t.payload)))
    for (cport, to_srv), lst in segs.items():
        out[cport]["c2s" if to_srv else "s2c"] = b"".join(d for _, d in sorted(lst))
    return out


def exchanges_in_pcap(env, svc, port, ids):
    path = write_pcap(env, svc)
    streams = tcp_streams(path)
    got = {}
    for cport, s in streams.items():
        m = re.match(rb"POST (/one|/two) HTTP/1\.1\r\nHost: [^\r]+\r\n", s["c2s"])
        if m:
            got[m.group(1).decode()] = (cport, s)
    check(set(got) == {"/one", "/two"}, "%s: the pcap's exchanges %r", svc,
          {k: v["c2s"][:60] for k, v in streams.items()})
    for name, (cport, s) in got.items():
        check(s["syn"], "%s %s: no handshake of its own in the pcap", svc, name)
        head, _, body = s["c2s"].partition(b"\r\n\r\n")
        check(body == BODY, "%s %s: request body %r", svc, name, body)
        check(b"\r\nContent-Length: %d" % len(BODY) in head, "%s %s: head %r", svc, name, head)
        check(s["s2c"].startswith(b"HTTP/1.1 200 OK\r\n") and
              s["s2c"].endswith(b"\r\n\r\nanswer %s\n" % name[1:].encode()),
              "%s %s: the answer %r", svc, name, s["s2c"])
    ports = (got["/one"][0], got["/two"][0])
    # one TCP stream per exchange: the connection's port for stream 1, one up for each client
    # stream after it
    check(ports[1] - ports[0] == (ids["/two"] - ids["/one"]) // 2,
          "%s: the exchanges' client ports %r for streams %r", svc, ports, ids)
    if shutil.which("tshark"):
        p = subprocess.run(["tshark", "-r", path, "-d", "tcp.port==%d,http" % port, "-Y",
                            "http.request", "-T", "fields", "-e", "tcp.stream", "-e",
                            "http.request.method", "-e", "http.request.uri", "-e",
                            "http.file_data"], capture_output=True, text=True, timeout=60)
        rows = [ln.split("\t") for ln in p.stdout.splitlines() if ln.strip()]
        posts = {r[2]: r for r in rows if len(r) >= 4 and r[1] == "POST"}
        check(set(posts) == {"/one", "/two"}, "tshark's HTTP requests %r (%s)", rows,
              p.stderr[-300:])
        check(posts["/one"][0] != posts["/two"][0], "tshark put both in one TCP stream %r", rows)
        for r in posts.values():
            data = r[3].replace(":", "")
            check(data in (BODY.decode(), BODY.hex()), "tshark's request body %r", r)
    return got


@test
def h2_and_h2c_captures_are_http11_exchanges(env):
    tls_port, h2c_port = env.port(), env.port()
    c = certs(env)["proxy"]
    env.service("cap-h2", "http", tls_port, ("--layer", "proxy", "--tls-cert", c[0],
                                             "--tls-key", c[1]))
    env.service("cap-h2c", "http", h2c_port, ("--layer", "proxy"))
    p = nginx(env, tls_port, h2c_port)
    try:
        ids_tls = post_two(env, "https://%s:%d" % (SRV4, tls_port))
        ids = post_two(env, "http://%s:%d" % (SRV4, h2c_port))
        exchanges_in_pcap(env, "cap-h2", tls_port, ids_tls)
        got = exchanges_in_pcap(env, "cap-h2c", h2c_port, ids)
        # filter test runs on the rendered bytes: a request line with its Host, which the h2
        # on the wire never had
        doc = env.ctl("filter", "test", "cap-h2c", r"POST /two HTTP/1\.1\r\nHost: ", "--dir",
                      "c2s")
        hits = doc["hits"]
        check(len(hits) == 1 and hits[0]["sport"] == got["/two"][0],
              "filter test hits %r, want the exchange from %d", hits, got["/two"][0])
        check(doc["total"] >= 2, "filter test looked at %r", doc)
        check(env.ctl("filter", "test", "cap-h2c", r"PRI \* HTTP/2")["would_block"] == 0,
              "the capture holds the raw HTTP/2")
    finally:
        p.terminate()
        p.wait(5)


@test
def a_blocked_streams_event_shows_its_rendering(env):
    tls_port, h2c_port = env.port(), env.port()  # the TLS one unused
    env.service("ev-h2c", "http", h2c_port, ("--layer", "proxy"))
    env.filter("ev-h2c", EVIL_REGEX, dir="c2s")
    p = nginx(env, tls_port, h2c_port)
    try:
        base = "http://%s:%d" % (SRV4, h2c_port)
        rc, out = nghttp(env, [base + "/one", base + "/evil1337"])
        ids = stream_ids(out)
        check("recv (stream_id=%d) :status: 200" % ids.get("/one", 0) in out,
              "/one did not complete: %s", out[-2000:])
        evs = it.wait_until(lambda: [e for e in env.ctl("events", "ev-h2c")
                                     if e.get("h2_stream") == ids.get("/evil1337")], timeout=3)
        check(evs, "no event naming stream %r: %r", ids.get("/evil1337"),
              env.ctl("events", "ev-h2c"))
        e = evs[0]
        check("GET /evil1337 HTTP/1.1" in e["excerpt"], "the event's excerpt %r", e["excerpt"])
        show = it.wait_until(lambda: (lambda s: s if s.get("capture") else None)(
            env.ctl("events", "show", e["seq"])), timeout=3)
        check(show, "events show has no capture")
        c2s = show["capture"]["c2s"]
        check("GET /evil1337 HTTP/1.1\r\nHost: %s:%d\r\n" % (SRV4, h2c_port) in c2s and
              "/one" not in c2s and "PRI *" not in c2s,
              "events show's capture is not the blocked stream's rendering: %r", c2s)
        txt = env.ctl_raw("events", "show", e["seq"], json_out=False).stdout
        check("-- blocked from here" in txt and "|GET /evil1337 HT|" in txt,
              "events show text:\n%s", txt[-1500:])
    finally:
        p.terminate()
        p.wait(5)


if __name__ == "__main__":
    rc = it.run_module("test_h2cap")
    sys.exit(rc)
