#!/usr/bin/python3
"""Integration: Prometheus metrics (issue 3). controld runs with --metrics-listen on an address
of the server namespace; a real HTTP GET from inside that namespace reads the text format and
finds the counters of known traffic, and any other path is a 404."""
import os
import re
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fgxit as it  # noqa: E402
from fgxit import EVIL, SRV4, SRV6, check, test  # noqa: E402

METRICS_ADDR = "127.0.0.1:9477"  # inside the module's own srv namespace
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? ([0-9.eE+-]+|NaN|[+-]Inf)$")


def http_get(env, path):
    h = env.helper(env.srv, "http-get", "--url", "http://%s%s" % (METRICS_ADDR, path))
    r = it.client_result(h, 10)
    r["body"] = it.d64(r.get("body"))
    return r


def scrape(env):
    """GET /metrics: {name: {labels-string: value}}, and the # TYPE lines."""
    r = http_get(env, "/metrics")
    check(r["status"] == 200, "GET /metrics: status %r (%s)", r["status"], r.get("error"))
    check(r["ctype"].startswith("text/plain"), "GET /metrics content type %r", r["ctype"])
    samples, types = {}, {}
    for line in r["body"].decode().splitlines():
        if not line:
            continue
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            types[name] = kind
            continue
        if line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        check(m, "not a Prometheus sample line: %r", line)
        samples.setdefault(m.group(1), {})[m.group(2) or ""] = float(m.group(3))
    return samples, types


def wait_blocked(env, name, n):
    it.wait_until(lambda: env.ctl("stats", name)[0]["blocked"] >= n, timeout=4)
    st = env.ctl("stats", name)[0]
    check(st["blocked"] == n, "stats blocked %r, expected %d", st["blocked"], n)
    return st


@test
def metrics_count_blocks(env):
    sid, port = env.service("pm", "tcp")
    fid = env.filter("pm")
    idle = env.filter("pm", "never[0-9]matches")
    srv = env.tcp_server(port)
    for host in (SRV4, SRV6):
        c, sport = env.tcp_conn(host, port, [b"x " + EVIL])
        it.assert_blocked(c, it.server_conn_of(srv, sport))
    c, sport = env.tcp_conn(SRV4, port, [b"clean"])
    it.assert_passed(c, it.server_conn_of(srv, sport), b"clean")
    st = wait_blocked(env, "pm", 2)

    # controld renders the page once a second (STATS_PERIOD_MS): wait for a render after the
    # blocks, then demand exact values
    key = '{service="pm",filter="%d"}' % fid
    it.wait_until(lambda: scrape(env)[0].get("fgex_filter_blocked_total", {}).get(key) == 2,
                  timeout=3, step=0.3)
    samples, types = scrape(env)
    check(samples.get("fgex_up", {}).get("") == 1, "fgex_up: %r", samples.get("fgex_up"))
    check(types.get("fgex_up") == "gauge", "fgex_up type %r", types.get("fgex_up"))
    blocked = samples.get("fgex_filter_blocked_total", {})
    check(types.get("fgex_filter_blocked_total") == "counter", "blocked type %r",
          types.get("fgex_filter_blocked_total"))
    check(blocked.get(key) == 2,
          "fgex_filter_blocked_total for filter %d: %r", fid, blocked)
    check(blocked.get('{service="pm",filter="%d"}' % idle) == 0,
          "fgex_filter_blocked_total for the idle filter %d: %r", idle, blocked)
    lab = '{service="pm",id="%d"}' % sid
    for name, key in (("fgex_service_packets_total", "packets"),
                      ("fgex_service_bytes_total", "bytes"),
                      ("fgex_service_accepted_total", "accepted"),
                      ("fgex_service_dropped_total", "dropped")):
        v = samples.get(name, {}).get(lab)
        check(v is not None and v >= st[key] > 0, "%s%s = %r, stats --json %s = %d", name, lab,
              v, key, st[key])
    check(samples.get("fgex_worker_up", {}).get('{kind="nfq"}') == 1, "fgex_worker_up: %r",
          samples.get("fgex_worker_up"))


@test
def metrics_other_path_is_404(env):
    for path in ("/", "/other", "/metricsx"):
        r = http_get(env, path)
        check(r["status"] == 404, "GET %s: status %r, expected 404 (%s)", path, r["status"],
              r.get("error"))


@test
def metrics_served_again_after_controld_restart(env):
    _, port = env.service("pm-restart", "tcp")
    fid = env.filter("pm-restart")
    srv = env.tcp_server(port)
    c, sport = env.tcp_conn(SRV4, port, [b"x " + EVIL])
    it.assert_blocked(c, it.server_conn_of(srv, sport))
    wait_blocked(env, "pm-restart", 1)
    check(env.stop_controld(signal.SIGTERM) == 0, "controld did not exit cleanly")
    r = http_get(env, "/metrics")
    check(r["status"] is None, "metrics still served with controld stopped: %r", r["status"])
    env.start_controld()  # with the module's --metrics-listen again
    key = '{service="pm-restart",filter="%d"}' % fid

    def served():
        try:
            return scrape(env)[0].get("fgex_filter_blocked_total", {}).get(key) == 1
        except AssertionError:  # not listening yet
            return False

    it.wait_until(served, timeout=3, step=0.3)
    samples, _ = scrape(env)
    v = samples.get("fgex_filter_blocked_total", {}).get(key)
    check(v == 1, "fgex_filter_blocked_total after a controld restart: %r", v)
    check(samples.get("fgex_worker_restarts_total", {}).get('{kind="nfq"}') is not None,
          "no fgex_worker_restarts_total: %r", sorted(samples))


if __name__ == "__main__":
    sys.exit(it.run_module("metrics", controld_args=["--metrics-listen", METRICS_ADDR]))
