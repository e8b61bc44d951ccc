#!/usr/bin/python3
"""Integration: flags leaving (issue 28, point 2). With the game set, every TCP service's replies
are scanned for the flag format as one more log pattern of its s2c database: a service that
sends a flag to the checker's address counts it in flags_to_checker, with no event; to any other
address (an attacker at 10.77.0.3, a second address of the client namespace) it is a flag-out
event (`events --flags`), counted in flags_out, in `stats` and Prometheus; the flag is never
dropped. On the NFQUEUE layer, the proxy layer, a TLS service and h2/h2c services (after the
HTTP/2 rendering) of the proxy, one count per
connection however many flags it carries."""
import hashlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fgxit as it  # noqa: E402
from fgxit import CLI4, CLI_IF, SRV4, check, test  # noqa: E402


# test_tls's TLS server and client, without its tests (importing registers a module's @test)
_saved = list(it._TESTS)
import test_tls  # noqa: E402
import test_h2  # noqa: E402  (nginx-light, curl and the HTTP service kind)
it._TESTS[:] = _saved

ATTACKER4 = "10.77.0.3"
FLAG = b"FLAG{" + b"A1B2C3D4E5F6G7H8I9J0K1L2M3N4O5PQ}"
FLAG_RE = r"FLAG\{[A-Z0-9]{32}\}"
REPLY = b"id 7: " + FLAG + b" " + FLAG + b"\n"  # the first flag at offset 6
METRICS_ADDR = "127.0.0.1:9478"


class Attacker:
    """The client namespace reaches the server from ATTACKER4, not the checker's CLI4."""

    def __init__(self, env):
        self.env = env

    def __enter__(self):
        it.sh("ip", "-n", self.env.cli, "addr", "add", ATTACKER4 + "/32", "dev", CLI_IF)
        it.sh("ip", "-n", self.env.cli, "route", "replace", SRV4, "dev", CLI_IF, "src", ATTACKER4)
        return self

    def __exit__(self, *exc):
        it.sh("ip", "-n", self.env.cli, "route", "del", SRV4, "dev", CLI_IF, check=False)
        it.sh("ip", "-n", self.env.cli, "addr", "del", ATTACKER4 + "/32", "dev", CLI_IF,
              check=False)
        return False


def scrape(env):
    """GET /metrics from the server namespace: {name: {labels: value}}, {name: type}."""
    h = env.helper(env.srv, "http-get", "--url", "http://%s/metrics" % METRICS_ADDR)
    r = it.client_result(h, 10)
    check(r["status"] == 200, "GET /metrics: %r", r)
    samples, types = {}, {}
    for line in it.d64(r.get("body")).decode().splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            types[name] = kind
        elif line and not line.startswith("#"):
            name_labels, value = line.rsplit(" ", 1)
            name, _, labels = name_labels.partition("{")
            samples.setdefault(name, {})["{" + labels if labels else ""] = float(value)
    return samples, types


def svc_stats(env, name):
    return env.ctl("stats", name)[0]


def read_flag(env, port, srv, n):
    """The n-th connection to srv, that asks and reads the answer: two flags in one reply.
    (The proxy's upstream connection has a port of its own: the server's n-th is this one.)"""
    c, sport = env.tcp_conn(SRV4, port, [b"get\n", 0.3])
    s = it.server_conn(srv, n)
    it.assert_passed(c, s, b"get\n", REPLY)
    return sport


def flags_case(env, name, layer):
    sid, port = env.service(name, "tcp", extra=("--layer", layer))
    srv = env.tcp_server(port, reply=REPLY)
    read_flag(env, port, srv, 1)  # the checker, from CLI4
    it.wait_until(lambda: svc_stats(env, name)["flags_to_checker"] >= 1, timeout=4)
    st = svc_stats(env, name)
    check(st["flags_to_checker"] == 1 and st["flags_out"] == 0,
          "%s after the checker's read: %r", layer, st)
    check(env.ctl("events", name, "--flags") == [] and env.ctl("events", name) == [],
          "the checker's read made an event: %r", env.ctl("events", name))
    with Attacker(env):
        sport = read_flag(env, port, srv, 2)
    it.wait_until(lambda: svc_stats(env, name)["flags_out"] >= 1, timeout=4)
    st = svc_stats(env, name)
    check(st["flags_out"] == 1 and st["flags_to_checker"] == 1, "%s after the attacker's: %r",
          layer, st)
    check(st["blocked"] == 0 and st["dropped"] == 0, "a flag was dropped: %r", st)
    evs = env.ctl("events", name, "--flags")
    check(len(evs) == 1, "%s: events --flags %r", layer, evs)
    e = evs[0]
    check(e["action"] == "flag-out" and e["src"] == ATTACKER4 and e["sport"] == sport and
          e["dir"] == "s2c", "%s: the flag-out event %r", layer, e)
    check(e.get("flag_sha256") == hashlib.sha256(FLAG).hexdigest() and e.get("flag_offset") == 6,
          "%s: the flag's hash and offset in %r", layer, e)
    # the connection's capture is kept with the event, as a block's: the request that got it
    show = env.ctl("events", "show", e["seq"])
    cap = show.get("capture")
    check(cap is not None and cap.get("c2s") == "get\n" and not cap.get("blocked"),
          "%s: the flag-out's capture %r", layer, cap)
    check(FLAG[-12:] in it.d64(e.get("excerpt_b64")) or FLAG[-12:].decode() in
          (e.get("excerpt") or ""), "%s: the excerpt %r", layer, e)
    p = env.ctl_raw("stats", name, json_out=False)
    check("1 connection(s) outside the checker (flag-out), 1 to the checker" in p.stdout,
          "stats for a human: %r", p.stdout)
    return name, sid


@test
def flags_nfqueue_layer(env):
    env.ctl("game", "set", "--flag", FLAG_RE, "--checker", CLI4 + "/32")
    name, sid = flags_case(env, "fq", "nfqueue")
    key = '{service="%s",id="%d"}' % (name, sid)
    it.wait_until(lambda: scrape(env)[0].get("fgex_flags_out_total", {}).get(key) == 1,
                  timeout=3, step=0.3)
    samples, types = scrape(env)
    check(samples.get("fgex_flags_out_total", {}).get(key) == 1 and
          samples.get("fgex_flags_to_checker_total", {}).get(key) == 1 and
          types.get("fgex_flags_out_total") == "counter",
          "Prometheus: %r %r", samples.get("fgex_flags_out_total"),
          samples.get("fgex_flags_to_checker_total"))


@test
def flags_proxy_layer(env):
    env.ctl("game", "set", "--flag", FLAG_RE, "--checker", CLI4)
    flags_case(env, "fpx", "proxy")


@test
def flags_tls_proxy_service(env):
    """After TLS: the proxy terminates it, the plaintext reply holds the flag."""
    env.ctl("game", "set", "--flag", r"FLAG\{[a-z-]+\}", "--checker", CLI4)
    sid, port = test_tls.tls_service(env, "ftls")
    test_tls.tls_server(env, port)
    r = test_tls.tls_client(env, port, [b"LEAK"], until="}")
    check(b"FLAG{leaked-secret}" in r["received"], "the checker's TLS read: %r", r)
    with Attacker(env):
        r = test_tls.tls_client(env, port, [b"LEAK"], until="}")
    check(b"FLAG{leaked-secret}" in r["received"], "the attacker's TLS read: %r", r)
    it.wait_until(lambda: svc_stats(env, "ftls")["flags_out"] >= 1, timeout=4)
    st = svc_stats(env, "ftls")
    check(st["flags_out"] == 1 and st["flags_to_checker"] == 1, "TLS: %r", st)
    evs = env.ctl("events", "ftls", "--flags")
    check(len(evs) == 1 and evs[0]["src"] == ATTACKER4 and
          b"FLAG{leaked-secret}" in (evs[0].get("excerpt") or "").encode(),
          "TLS: events --flags %r", evs)
    check(evs[0].get("flag_sha256") == hashlib.sha256(b"FLAG{leaked-secret}").hexdigest() and
          evs[0].get("flag_offset") == 0,
          "TLS: the flag's hash in %r", evs[0])


@test
def flags_h2_service(env):
    """After the HTTP/2 rendering: nginx's /leak answer over h2 (TLS) and h2c, read by the
    checker and by an attacker; each connection counted once."""
    env.ctl("game", "set", "--flag", r"FLAG\{[a-z-]+\}", "--checker", CLI4)
    tls_port, h2c_port, h1_port = env.port(), env.port(), env.port()
    c = test_h2.certs(env)["proxy"]
    # the HTTP kind without test_h2's filters (one of them blocks this very flag)
    env.service("fh2", "http", tls_port, ("--layer", "proxy", "--tls-cert", c[0], "--tls-key",
                                          c[1]))
    env.service("fh2c", "http", h2c_port, ("--layer", "proxy"))
    _, p = test_h2.nginx(env, tls_port, h2c_port, h1_port)
    try:
        for name, url, mode in (("fh2", "https://%s:%d/leak" % (SRV4, tls_port), "--http2"),
                                ("fh2c", "http://%s:%d/leak" % (SRV4, h2c_port),
                                 "--http2-prior-knowledge")):
            rc, out = test_h2.curl(env, url, mode)
            check(rc == 0 and "FLAG{from-nginx}" in out, "the checker's %s read: %r", name, out)
            with Attacker(env):
                rc, out = test_h2.curl(env, url, mode)
            check(rc == 0 and "FLAG{from-nginx}" in out, "the attacker's %s read: %r", name, out)
            it.wait_until(lambda: svc_stats(env, name)["flags_out"] >= 1, timeout=4)
            st = svc_stats(env, name)
            check(st["flags_out"] == 1 and st["flags_to_checker"] == 1, "%s: %r", name, st)
            evs = env.ctl("events", name, "--flags")
            check(len(evs) == 1 and evs[0]["src"] == ATTACKER4 and evs[0].get("h2_stream") and
                  evs[0].get("flag_sha256") == hashlib.sha256(b"FLAG{from-nginx}").hexdigest(),
                  "%s: events --flags %r", name, evs)
    finally:
        p.terminate()
        p.wait(5)


@test
def sla_safe_filters(env):
    """Point 3: filter test says what a regex would break of the checker's captured connections
    and what it would stop of the flag-outs; filter add refuses a regex that breaks one checker
    connection (or matches any stream) unless --force."""
    env.ctl("game", "set", "--flag", FLAG_RE, "--checker", CLI4)
    _, port = env.service("sla", "tcp")
    srv = env.tcp_server(port, reply=FLAG + b"\n")
    n = 0
    for _ in range(4):  # the checker's reads
        n += 1
        c, _ = env.tcp_conn(SRV4, port, [b"GET /flag agent=checker\n", 0.2])
        it.assert_passed(c, it.server_conn(srv, n), b"GET /flag agent=checker\n")
    with Attacker(env):
        for _ in range(2):  # the exploit's
            n += 1
            c, _ = env.tcp_conn(SRV4, port, [b"GET /flag agent=x' OR 1=1\n", 0.2])
            it.assert_passed(c, it.server_conn(srv, n), b"GET /flag agent=x' OR 1=1\n")
    it.wait_until(lambda: svc_stats(env, "sla")["flags_out"] >= 2, timeout=4)
    wide = env.ctl("filter", "test", "sla", "GET /flag", "--dir", "c2s")
    check(wide["total"] == 6 and wide["would_block"] == 6 and wide["checker_total"] == 4 and
          wide["checker_broken"] == 4 and wide["flags_out_total"] == 2 and
          wide["flags_out_stopped"] == 2, "filter test of a regex that breaks the checker: %r",
          {k: v for k, v in wide.items() if k != "hits"})
    p = env.ctl_raw("filter", "test", "sla", "GET /flag", json_out=False)
    check("would break 4 of 4 connection(s) of the game's checker; would stop 2 of 2 flag-out"
          in p.stdout, "filter test for a human: %r", p.stdout)
    narrow = env.ctl("filter", "test", "sla", "OR 1=1", "--dir", "c2s")
    check(narrow["would_block"] == 2 and narrow["checker_broken"] == 0 and
          narrow["flags_out_stopped"] == 2, "the exploit's regex: %r",
          {k: v for k, v in narrow.items() if k != "hits"})
    # one checker connection broken: refused, with the numbers, nothing stored
    p = env.ctl_raw("filter", "add", "sla", "agent=checker", "--dir", "c2s", json_out=False)
    check(p.returncode == 4 and "would have broken 4 of the 4 connections of the game's checker"
          in p.stderr and "--force" in p.stderr, "filter add breaking the checker: %r", p.stderr)
    check(env.filters("sla") == [], "a refused filter was stored: %r", env.filters("sla"))
    p = env.ctl_raw("filter", "add", "sla", "\\b", json_out=False)
    check(p.returncode == 4 and "--force" in p.stderr, "filter add \\b: %r", p.stderr)
    # the exploit's regex goes in; a forced one too
    env.ctl("filter", "add", "sla", "OR 1=1", "--dir", "c2s")
    env.ctl("filter", "add", "sla", "agent=checker", "--dir", "c2s", "--force")
    check(len(env.filters("sla")) == 2, "filters: %r", env.filters("sla"))


@test
def no_game_no_flag_counts(env):
    env.ctl("game", "set", "--clear")
    _, port = env.service("fnone", "tcp")
    srv = env.tcp_server(port, reply=REPLY)
    with Attacker(env):
        read_flag(env, port, srv, 1)
    it.wait_until(lambda: svc_stats(env, "fnone")["packets"] > 0, timeout=3)
    st = svc_stats(env, "fnone")
    check(st["flags_out"] == 0 and st["flags_to_checker"] == 0, "no game, yet %r", st)


if __name__ == "__main__":
    sys.exit(it.run_module("flags", controld_args=["--metrics-listen", METRICS_ADDR]))
