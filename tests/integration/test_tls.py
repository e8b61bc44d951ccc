#!/usr/bin/python3
"""Integration: TLS services on the proxy layer. Real TLS clients in the client namespace
(Python's ssl, `openssl s_client`, curl with and without --http2) against real TLS services in
the server namespace (a Python ssl server that records SNI, ALPN, version, peer and every byte;
nginx with http2 for curl): the proxy terminates the client's TLS with the service's
certificate, filters the plaintext and speaks TLS to the service. Harmless requests pass,
matching plaintext is blocked both ways (also split over two TLS records), SNI and ALPN pass
end to end, TLS 1.2 and 1.3, the service sees the client's address; a non-TLS client, a stalled
handshake and a service that refuses TLS are closed and counted (tls_failed); bad certificate
files are refused, nfqueue + TLS is refused, export leaves the key out."""
import base64
import json
import os
import shutil
import stat
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fgxit as it  # noqa: E402
from fgxit import CLI4, CLI6, SRV4, SRV6, check, test  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
TLSPY = os.path.join(HERE, "fgxtls.py")
FIRST_BYTE_S = 2  # the proxy's first-byte timeout here, which bounds a TLS handshake too


class TlsHelper(it.Helper):
    """fgxtls.py in a namespace, its JSON lines collected as fgxit.Helper does."""

    def __init__(self, ns, *argv):  # noqa: super().__init__ would start fgxhelper.py
        self.argv = [str(a) for a in argv]
        self.proc = subprocess.Popen(["ip", "netns", "exec", ns, it.PY, TLSPY] + self.argv,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE)
        self.events = []
        self.cond = threading.Condition()
        self.stderr = b""
        self.t_out = threading.Thread(target=self._read, daemon=True)
        self.t_out.start()
        self.t_err = threading.Thread(target=self._read_err, daemon=True)
        self.t_err.start()


def certs(env):
    return it.tls_certs(env, ("proxy", "service", "expired"))


def tls_server(env, port, alpn="h2,http/1.1", host=SRV4):
    c = certs(env)["service"]
    h = TlsHelper(env.srv, "server", "--host", host, "--port", port, "--cert", c[0], "--key",
                  c[1], "--alpn", alpn)
    env.helpers.append(h)
    if h.wait_event(lambda e: e.get("event") == "listening", 5) is None:
        raise RuntimeError("TLS server did not start: %s" % h.stderr)
    return h


def tls_client(env, port, chunks=(), sni="", alpn="", tls="", plain=False, until="",
               pause=0.2, timeout=3.0, hold=False, host=SRV4):
    argv = ["ip", "netns", "exec", env.cli, it.PY, TLSPY, "client", "--host", host, "--port",
            str(port), "--chunks", json.dumps([c.hex() for c in chunks]), "--pause", str(pause),
            "--timeout", str(timeout)]
    for opt, v in (("--sni", sni), ("--alpn", alpn), ("--tls", tls), ("--until", until)):
        if v:
            argv += [opt, v]
    if plain:
        argv.append("--plain")
    if hold:
        argv.append("--hold")
    p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout * 3 + 10)
    for line in p.stdout.splitlines():
        ev = json.loads(line)
        if ev.get("event") == "result":
            ev["received"] = base64.b64decode(ev["received"])
            return ev
    raise AssertionError("TLS client printed no result: %s" % p.stderr[-400:])


def tls_service(env, name, port=None, extra=()):
    c = certs(env)["proxy"]
    return env.service(name, "tcp", port, ("--layer", "proxy", "--tls-cert", c[0], "--tls-key",
                                           c[1]) + tuple(extra))


def stats_of(env, name):
    for s in env.ctl("stats"):
        if s.get("name") == name:
            return s
    raise AssertionError("no stats for %s" % name)


def wait_tls_failed(env, name, at_least, timeout=6.0):
    got = it.wait_until(lambda: stats_of(env, name).get("tls_failed", 0) >= at_least,
                        timeout=timeout, step=0.3)
    n = stats_of(env, name).get("tls_failed", 0)
    check(got, "tls_failed of %s is %s, want at least %d", name, n, at_least)
    return n


def server_ends(h, n_min=1, timeout=4.0):
    it.wait_until(lambda: len(h.all("end")) >= n_min, timeout=timeout)
    return h.all("end")


def proxy_cn(env, r):
    """The client saw the proxy's certificate (the service's own is only seen by the proxy)."""
    from cryptography import x509
    der = base64.b64decode(r.get("peer_cert_b64") or "")
    check(der, "the client got no certificate: %r", r)
    cn = x509.load_der_x509_certificate(der).subject.rfc4514_string()
    check("fgex-proxy" in cn, "the client saw certificate %s, not the proxy's", cn)


# ---- the basics ---------------------------------------------------------------------------------

@test
def harmless_request_passes_with_the_proxys_certificate(env):
    sid, port = tls_service(env, "t-pass")
    env.filter("t-pass", it.REGEX)
    h = tls_server(env, port)
    r = tls_client(env, port, [b"hello PING"], until="PONG")
    check(r["ok"] and b"PONG" in r["received"], "harmless request did not pass: %r", r)
    proxy_cn(env, r)
    ends = server_ends(h)
    tls_ev = h.all("tls")
    check(tls_ev and tls_ev[0]["peer"] == CLI4,
          "the service saw %r, not the client's address %s", tls_ev, CLI4)
    check(any(b"hello PING" in base64.b64decode(e["data"]) for e in ends),
          "the service did not get the plaintext: %r", ends)


@test
def matching_plaintext_is_blocked_client_to_server(env):
    sid, port = tls_service(env, "t-c2s")
    env.filter("t-c2s", it.REGEX, dir="c2s")
    h = tls_server(env, port)
    r = tls_client(env, port, [b"GET /?q=" + it.EVIL + b" PING"], until="PONG")
    check(b"PONG" not in r["received"], "a blocked request got its reply: %r", r)
    check(r["how"] in ("reset", "ssl", "eof", "error"), "client not closed: %r", r)
    got = b"".join(base64.b64decode(e["data"]) for e in h.all("data"))
    check(it.EVIL not in got, "the service received the matching bytes: %r", got)
    ends = server_ends(h)
    check(ends and ends[0]["how"] == "reset", "the service's side was not reset: %r", ends)
    # The event shows the plaintext, not ciphertext.
    evs = it.wait_until(lambda: [e for e in env.ctl("events", "--limit", "20")
                                 if e.get("service") == "t-c2s"], timeout=5)
    check(evs, "no event for the block")
    check(it.EVIL in bytes.fromhex(evs[-1]["excerpt_hex"]),
          "the event's excerpt is not the plaintext: %r", evs[-1])


@test
def matching_plaintext_is_blocked_server_to_client(env):
    sid, port = tls_service(env, "t-s2c")
    env.filter("t-s2c", r"FLAG\{", dir="s2c")
    h = tls_server(env, port)
    r = tls_client(env, port, [b"LEAK"], until="}")
    check(b"FLAG{" not in r["received"], "the flag left through TLS: %r", r)
    ends = server_ends(h)
    check(ends and ends[0]["how"] == "reset", "the service's side was not reset: %r", ends)
    check(r["how"] in ("reset", "ssl", "eof"), "the client was not closed: %r", r)


@test
def match_split_over_two_tls_records_is_blocked(env):
    sid, port = tls_service(env, "t-split")
    env.filter("t-split", it.REGEX, dir="c2s")
    h = tls_server(env, port)
    r = tls_client(env, port, [b"xx evi", b"l1337 PING"], pause=0.3, until="PONG")
    check(b"PONG" not in r["received"], "a match split over two records passed: %r", r)
    got = b"".join(base64.b64decode(e["data"]) for e in h.all("data"))
    check(b"xx evi" in got, "the first record (harmless alone) should have passed: %r", got)
    check(b"l1337" not in got, "the second half reached the service: %r", got)


@test
def sni_and_alpn_pass_end_to_end_tls13_and_tls12(env):
    sid, port = tls_service(env, "t-alpn")
    h = tls_server(env, port, alpn="h2,http/1.1")
    for ver, alpn, want in (("1.3", "h2,http/1.1", "h2"), ("1.2", "http/1.1", "http/1.1"),
                            ("1.3", "spdy/1", None)):
        r = tls_client(env, port, [b"PING"], sni="svc.test", alpn=alpn, tls=ver, until="PONG")
        check(r["ok"] and b"PONG" in r["received"], "TLS %s, ALPN %s: %r", ver, alpn, r)
        check(r["version"] == "TLSv" + ver, "client negotiated %s, asked %s", r["version"], ver)
        check(r["alpn"] == want, "client got ALPN %r, want %r (offered %s)", r["alpn"], want,
              alpn)
        ev = it.wait_until(lambda: h.all("tls")[-1:] if len(h.all("tls")) >= 1 else None)
        last = h.all("tls")[-1]
        check(last["sni"] == "svc.test", "the service saw SNI %r", last["sni"])
        check(last["alpn"] == want, "the service chose %r, the client got %r", last["alpn"],
              want)
        check(ev, "no handshake on the service")
        h.events.clear()


@test
def a_new_certificate_applies_to_new_connections(env):
    sid, port = tls_service(env, "t-renew")
    tls_server(env, port)
    c = certs(env)["service"]
    env.ctl("service", "set", "t-renew", "--tls-cert", c[0], "--tls-key", c[1])
    r = tls_client(env, port, [b"PING"], until="PONG")
    check(b"PONG" in r["received"], "no reply after the change: %r", r)
    from cryptography import x509
    cn = x509.load_der_x509_certificate(base64.b64decode(r["peer_cert_b64"])).subject
    check("CN=service" in cn.rfc4514_string(), "the client still sees %s", cn.rfc4514_string())
    doc = env.ctl("service", "show", "t-renew")
    check("CN=service" in (doc.get("tls_subject") or ""), "service show: %r", doc)


@test
def ipv6_client_is_terminated_filtered_and_seen(env):
    sid, port = tls_service(env, "t-v6")
    env.filter("t-v6", it.REGEX, dir="c2s")
    h = tls_server(env, port, host=SRV6)
    r = tls_client(env, port, [b"PING"], until="PONG", host=SRV6)
    check(b"PONG" in r["received"], "IPv6 harmless request: %r", r)
    check(h.all("tls") and h.all("tls")[0]["peer"] == CLI6, "the service saw %r, not %s",
          h.all("tls"), CLI6)
    r = tls_client(env, port, [it.EVIL + b" PING"], until="PONG", host=SRV6)
    check(b"PONG" not in r["received"], "IPv6 matching request passed: %r", r)


@test
def no_sni_passes_as_none(env):
    sid, port = tls_service(env, "t-nosni")
    h = tls_server(env, port)
    r = tls_client(env, port, [b"PING"], until="PONG")
    check(b"PONG" in r["received"], "no reply: %r", r)
    check(h.all("tls") and h.all("tls")[0]["sni"] is None,
          "the service saw a server name the client never sent: %r", h.all("tls"))


@test
def openssl_s_client_both_versions(env):
    sid, port = tls_service(env, "t-sclient")
    env.filter("t-sclient", it.REGEX)
    tls_server(env, port)
    for ver in ("-tls1_2", "-tls1_3"):
        p = subprocess.run(["ip", "netns", "exec", env.cli, "openssl", "s_client", "-connect",
                            "%s:%d" % (SRV4, port), "-servername", "svc.test", ver,
                            "-alpn", "http/1.1", "-ign_eof"],
                           input=b"PING CLOSE\n", capture_output=True, timeout=15)
        out = p.stdout.decode(errors="replace")
        check("PONG" in out, "s_client %s got no PONG: %s", ver, out[-600:])
        check("fgex-proxy" in out, "s_client %s did not see the proxy's certificate", ver)
        want = "TLSv1.2" if ver == "-tls1_2" else "TLSv1.3"
        check(want in out, "s_client %s: protocol %s not in its output", ver, want)
        check("ALPN protocol: http/1.1" in out, "s_client %s: ALPN not negotiated: %s", ver,
              out[-400:])


# ---- curl against nginx (HTTP/1.1 and HTTP/2) -----------------------------------------------------

def nginx_server(env, port):
    if shutil.which("nginx") is None:
        raise AssertionError("nginx is not installed (deploy/install-deps.sh test)")
    c = certs(env)["service"]
    d = os.path.join(env.tmp, "nginx-%d" % port)
    os.makedirs(d, exist_ok=True)
    conf = os.path.join(d, "nginx.conf")
    with open(conf, "w") as f:
        f.write("""daemon off; worker_processes 1; pid %(d)s/nginx.pid; error_log %(d)s/error.log;
events { worker_connections 64; }
http {
  log_format t '$remote_addr|$ssl_server_name|$ssl_protocol|$server_protocol|$request_uri';
  access_log %(d)s/access.log t;
  client_body_temp_path %(d)s; proxy_temp_path %(d)s; fastcgi_temp_path %(d)s;
  uwsgi_temp_path %(d)s; scgi_temp_path %(d)s;
  server {
    listen %(ip)s:%(port)d ssl http2;
    ssl_certificate %(cert)s; ssl_certificate_key %(key)s;
    location / { return 200 "hello from nginx\\n"; }
    location /leak { return 200 "FLAG{from-nginx}\\n"; }
    # Answered only once the whole body is in (proxy_request_buffering): over h2 a `return`
    # could answer from the HEADERS frame before the DATA frame that matches is even sent.
    location /post { proxy_pass http://127.0.0.1:%(inner)d/; }
  }
  server {
    listen 127.0.0.1:%(inner)d; access_log off;
    location / { return 200 "hello from nginx\\n"; }
  }
}
""" % {"d": d, "ip": SRV4, "port": port, "cert": c[0], "key": c[1], "inner": port + 1})
    p = it.nginx_start(env, conf, d, (port,))
    return os.path.join(d, "access.log"), p


def curl(env, port, path="/", http2=False, body=None):
    argv = ["ip", "netns", "exec", env.cli, "curl", "-sk", "--max-time", "5", "--resolve",
            "svc.test:%d:%s" % (port, SRV4), "-w", "\n%{http_version}",
            "--http2" if http2 else "--http1.1", "https://svc.test:%d%s" % (port, path)]
    if body is not None:
        argv += ["--data-binary", body]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=15)
    return p.returncode, p.stdout


@test
def curl_http11_and_http2_through_the_proxy(env):
    sid, port = tls_service(env, "t-curl")
    env.filter("t-curl", it.REGEX, dir="c2s")
    env.filter("t-curl", r"FLAG\{", dir="s2c")
    log, p = nginx_server(env, port)
    try:
        for h2, ver in ((False, "1.1"), (True, "2")):
            rc, out = curl(env, port, "/", http2=h2)
            check(rc == 0 and "hello from nginx" in out, "curl (http %s): rc %d %r", ver, rc,
                  out)
            check(out.strip().splitlines()[-1] == ver, "curl negotiated HTTP %r, want %s",
                  out.strip().splitlines()[-1], ver)
            # A body: HTTP/2 compresses headers (HPACK, Huffman), so a header's bytes are not
            # on the wire as typed; bodies are (docs/user-guide.md).
            rc, out = curl(env, port, "/post", http2=h2, body="q=" + it.EVIL.decode())
            check(rc != 0 and "hello" not in out, "a matching request passed (http %s): %r",
                  ver, out)
            rc, out = curl(env, port, "/leak", http2=h2)
            check(rc != 0 and "FLAG{" not in out, "the flag left (http %s): %r", ver, out)
        time.sleep(0.3)
        with open(log) as f:
            lines = [ln.strip().split("|") for ln in f if ln.strip()]
        check(lines, "nginx logged nothing")
        check(all(ln[0] == CLI4 for ln in lines), "nginx saw %r, not %s", lines, CLI4)
        check(all(ln[1] == "svc.test" for ln in lines), "SNI not passed: %r", lines)
        check({ln[3] for ln in lines} == {"HTTP/1.1", "HTTP/2.0"}, "protocols: %r", lines)
        # Over HTTP/1.1 the matching POST never reached nginx: its head and body travel
        # together. Over h2 its HEADERS frame may arrive before the DATA frame that matches and
        # is cut, so nginx may log an aborted /post; the client never got an answer (above).
        h1 = [ln[4] for ln in lines if ln[3] == "HTTP/1.1"]
        check(h1 == ["/", "/leak"], "nginx logged %r over HTTP/1.1, want / and /leak", h1)
        h2 = [ln[4] for ln in lines if ln[3] == "HTTP/2.0"]
        check(h2.count("/leak") == 1 and h2.count("/") == 1 and h2.count("/post") <= 1,
              "over h2 nginx logged %r", h2)
    finally:
        p.terminate()
        p.wait(5)


# ---- failures: counted, closed -----------------------------------------------------------------

@test
def non_tls_client_is_closed_and_counted(env):
    sid, port = tls_service(env, "t-plain")
    h = tls_server(env, port)
    before = stats_of(env, "t-plain").get("tls_failed", 0)
    r = tls_client(env, port, [b"GET / HTTP/1.0\r\n\r\n"], plain=True)
    check(r["received"] == b"" or b"HTTP" not in r["received"],
          "a plaintext client got an answer: %r", r)
    # Reset before or after its own shutdown (ENOTCONN, EPIPE: the reset came first).
    check(r["how"] in ("eof", "reset") or (r["how"] == "error" and ("Errno 107" in r["error"] or
                                                                   "Errno 32" in r["error"])),
          "not closed: %r", r)
    wait_tls_failed(env, "t-plain", before + 1)
    check(not h.all("data"), "the service got bytes of a failed handshake")


@test
def stalled_handshake_times_out_and_is_counted(env):
    sid, port = tls_service(env, "t-stall")
    tls_server(env, port)
    before = stats_of(env, "t-stall").get("tls_failed", 0)
    t0 = time.monotonic()
    # The first bytes of a ClientHello, then nothing: the handshake waits for the rest.
    r = tls_client(env, port, [b"\x16\x03\x01"], plain=True, hold=True,
                   timeout=FIRST_BYTE_S + 6)
    took = time.monotonic() - t0
    check(r["how"] in ("eof", "reset"), "a stalled handshake was not closed: %r", r)
    check(FIRST_BYTE_S - 0.5 < took < FIRST_BYTE_S + 4, "closed after %.1fs, the timeout is %ds",
          took, FIRST_BYTE_S)
    wait_tls_failed(env, "t-stall", before + 1)


@test
def service_refusing_tls_is_counted(env):
    sid, port = tls_service(env, "t-refuse")
    srv = env.tcp_server(port, reply=b"220 plain text here\r\n")
    before = stats_of(env, "t-refuse").get("tls_failed", 0)
    r = tls_client(env, port, [b"PING"], until="PONG")
    check(not r["ok"] or b"PONG" not in r["received"], "got a reply: %r", r)
    wait_tls_failed(env, "t-refuse", before + 1)
    srv.stop()


@test
def upstream_plain_speaks_plaintext_to_the_service(env):
    sid, port = tls_service(env, "t-up", extra=("--upstream", "plain"))
    env.filter("t-up", it.REGEX, dir="c2s")
    srv = env.tcp_server(port, reply=b"plain PONG\n")
    r = tls_client(env, port, [b"hello"], until="PONG")
    check(b"plain PONG" in r["received"], "no reply through upstream plain: %r", r)
    c = it.server_conn(srv, 1)
    check(c["data"] == b"hello", "the service got %r, not the plaintext", c["data"])
    r = tls_client(env, port, [it.EVIL], until="PONG")
    check(b"PONG" not in r["received"], "blocked bytes got a reply: %r", r)
    doc = env.ctl("service", "show", "t-up")
    check(doc["tls"] is True and doc["upstream"] == "plain", "service show: %r", doc)


# ---- certificates: checks, storage, export -----------------------------------------------------

@test
def bad_certificate_files_are_refused_and_nothing_stored(env):
    c = certs(env)
    junk = os.path.join(env.tmp, "junk.pem")
    with open(junk, "w") as f:
        f.write("this is not PEM\n")
    cases = [
        (("/nonexistent/cert.pem", c["proxy"][1]), "cannot read"),
        ((junk, c["proxy"][1]), "not a PEM certificate"),
        ((c["proxy"][0], junk), "not an unencrypted PEM private key"),
        ((c["proxy"][0], c["service"][1]), "does not match"),
    ]
    for (cert, key), msg in cases:
        p = env.ctl_raw("service", "add", "t-bad", "--proto", "tcp", "--port", env.port(),
                        "--layer", "proxy", "--tls-cert", cert, "--tls-key", key)
        check(p.returncode != 0, "accepted %s / %s", cert, key)
        check(msg in p.stderr, "for %s / %s the message is %r, want %r", cert, key, p.stderr,
              msg)
    check(not [s for s in env.services() if s["name"] == "t-bad"], "a refused service stored")
    # An existing service keeps its certificate when a new one is refused.
    sid, port = tls_service(env, "t-keep")
    p = env.ctl_raw("service", "set", "t-keep", "--tls-cert", c["proxy"][0], "--tls-key",
                    c["service"][1])
    check(p.returncode != 0 and "does not match" in p.stderr, "set accepted a mismatch: %r",
          p.stderr)
    doc = env.ctl("service", "show", "t-keep")
    check(doc["tls"] and "fgex-proxy" in (doc.get("tls_subject") or ""),
          "the stored certificate changed: %r", doc)


@test
def expired_certificate_is_a_warning(env):
    c = certs(env)["expired"]
    p = env.ctl_raw("service", "add", "t-exp", "--proto", "tcp", "--port", env.port(),
                    "--layer", "proxy", "--tls-cert", c[0], "--tls-key", c[1])
    check(p.returncode == 0, "an expired certificate was refused: %s", p.stderr)
    check("expired" in p.stderr, "no warning about the expiry: %r", p.stderr)


@test
def tls_on_nfqueue_is_refused(env):
    c = certs(env)["proxy"]
    p = env.ctl_raw("service", "add", "t-nfq", "--proto", "tcp", "--port", env.port(),
                    "--tls-cert", c[0], "--tls-key", c[1])
    check(p.returncode != 0 and "proxy layer" in p.stderr, "nfqueue + TLS: %r", p.stderr)
    sid, port = tls_service(env, "t-nfq2")
    p = env.ctl_raw("service", "set", "t-nfq2", "--layer", "nfqueue")
    check(p.returncode != 0 and "proxy layer" in p.stderr, "moving a TLS service to nfqueue: %r",
          p.stderr)
    env.ctl("service", "set", "t-nfq2", "--no-tls")
    env.ctl("service", "set", "t-nfq2", "--layer", "nfqueue")
    doc = env.ctl("service", "show", "t-nfq2")
    check(doc["tls"] is False and doc["layer"] == "nfqueue", "after --no-tls: %r", doc)


@test
def key_kept_root_only_and_left_out_of_export(env):
    sid, port = tls_service(env, "t-exp2")
    key = open(certs(env)["proxy"][1]).read()
    for name in os.listdir(env.state_dir):
        mode = os.stat(os.path.join(env.state_dir, name)).st_mode
        check(stat.S_IMODE(mode) & 0o077 == 0, "%s is mode %o: others can read the key",
              name, stat.S_IMODE(mode))
    out = os.path.join(env.tmp, "export.json")
    env.ctl_raw("export", out, json_out=False)
    doc = json.load(open(out))
    svc = [s for s in doc["services"] if s["name"] == "t-exp2"][0]
    check(svc["tls"] is True and "BEGIN CERTIFICATE" in svc["tls_cert_pem"], "export: %r", svc)
    check("tls_key_pem" not in svc and "PRIVATE KEY" not in open(out).read(),
          "the export holds the key")
    out2 = os.path.join(env.tmp, "export-secrets.json")
    env.ctl_raw("export", out2, "--with-secrets", json_out=False)
    svc2 = [s for s in json.load(open(out2))["services"] if s["name"] == "t-exp2"][0]
    check(svc2.get("tls_key_pem") == key, "--with-secrets did not export the key")
    # Import of the keyless export on this box: the key this box holds for it is kept.
    p = env.ctl_raw("import", out, json_out=False)
    check(p.returncode == 0, "import of the keyless export failed: %s", p.stderr)
    h = tls_server(env, port)
    r = tls_client(env, port, [b"PING"], until="PONG")
    check(b"PONG" in r["received"], "after the import TLS does not work: %r", r)
    h.stop()
    # Without the key on the box (its TLS turned off meanwhile, which deletes the key), it is
    # refused, nothing lost.
    env.ctl("service", "set", "t-exp2", "--no-tls")
    before = env.services()
    p = env.ctl_raw("import", out, json_out=False)
    check(p.returncode != 0 and "with-secrets" in p.stderr, "keyless import: %r", p.stderr)
    check(env.services() == before, "a refused import changed the services")
    p = env.ctl_raw("import", out2, json_out=False)
    check(p.returncode == 0, "import with the key failed: %s", p.stderr)
    check(env.ctl("service", "show", "t-exp2")["tls"], "imported service without TLS")


if __name__ == "__main__":
    rc = it.run_module("test_tls", controld_args=("--proxy-first-byte-timeout", FIRST_BYTE_S))
    sys.exit(rc)
