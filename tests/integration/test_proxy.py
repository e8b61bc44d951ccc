#!/usr/bin/python3
"""Integration: the proxy layer. The NFQUEUE layer's TCP tests (test_tcp.py, test_swap.py) run
again here with every TCP service on the proxy layer: one test body, parameterised by the layer
that Env.service() gives a TCP service. Then what only the proxy layer has: the service sees the
client's own address, half-close, backpressure against a slow reader, the UDP refusal, switching
a running service between layers, the proxy worker and its own counters in the worker list,
and fail_open when the proxy worker is stopped."""
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fgxit as it  # noqa: E402
from fgxit import CLI4, CLI6, EVIL, SRV4, SRV6, check, test  # noqa: E402

LAYER = "proxy"

# The shared bodies: importing a module registers its @test functions in order.
import test_tcp  # noqa: E402,F401
import test_swap  # noqa: E402,F401

# Tests about the nfqueue layer itself, not about filtering: they stay in their own module.
# Bodies that are about NFQUEUE itself (queue trips, the nfq worker, packets already in flight).
_NFQ_ONLY = {"status_lists_nfq_worker", "connection_open_before_service_is_inspected",
             "service_list_fields", "short_connection_costs_two_queue_trips",
             "without_the_log_expression_the_synack_is_queued"}
it._TESTS[:] = [t for t in it._TESTS if t.__name__ not in _NFQ_ONLY]

_service = it.Env.service


def _service_on_layer(self, name, proto="tcp", port=None, extra=()):
    extra = tuple(str(a) for a in extra)
    if proto == "tcp" and "--layer" not in extra:
        extra += ("--layer", LAYER)
    return _service(self, name, proto, port, extra)


it.Env.service = _service_on_layer

# The service sees the client's address but not its port: the proxy's upstream connection takes
# a port of its own, since the client's 4-tuple is the proxy's own accepted connection when the
# service runs on this box. So a client's connection is found on the server by its address: the
# oldest one from that address not yet claimed.
_clients = []
_claimed = {}
_tcp_client = it.Env.tcp_client


def _tcp_client_recorded(self, host, port, steps, timeout=3.0, ns=None, wait=True):
    h = _tcp_client(self, host, port, steps, timeout=timeout, ns=ns, wait=False)
    _clients.append((h, host))
    if not wait:
        return h
    return it.client_result(h, timeout * 3 + 5)


def _server_conn_of(h, sport, timeout=6.0):
    host = None
    for c, hst in _clients:
        ev = c.wait_event(lambda e: e.get("event") == "connected", 0)
        if ev and ev.get("sport") == sport:
            host = hst
    if host is None:
        raise AssertionError("no client connected from port %d" % sport)
    want = CLI6 if ":" in host else CLI4
    claimed = _claimed.setdefault(id(h), set())

    def pick():
        for e in h.all("accept"):
            if e["peer"].rsplit(":", 1)[0] == want and e["id"] not in claimed:
                return e
        return None
    acc = it.wait_until(pick, timeout=timeout)
    if acc is None:
        raise AssertionError("the server never accepted a connection from %s" % want)
    claimed.add(acc["id"])
    return it.server_conn(h, acc["id"], timeout)


it.Env.tcp_client = _tcp_client_recorded
it.server_conn_of = _server_conn_of


def proxy_worker(env):
    for w in env.ctl("status").get("workers", []):
        if w.get("kind") == "proxy":
            return w
    return None


@test
def status_lists_proxy_worker(env):
    w = it.wait_until(lambda: (proxy_worker(env) or {}).get("state") == "running" and
                      proxy_worker(env), timeout=5)
    check(w, "no running proxy worker in status: %r", env.ctl("status").get("workers"))
    with open("/proc/%d/comm" % w["pid"]) as f:
        check("proxyworker" in f.read(), "pid %d is not a proxyworker", w["pid"])


def proxy_in_worker_list(env):
    for w in env.ctl("worker", "list"):
        if w.get("kind") == "proxy":
            return w
    return None


@test
def worker_list_shows_the_proxy_counters(env):
    _, port = env.service("px-wl", "tcp")
    env.tcp_server(port, idle=6.0)
    # Two connections held open for a while, then closed by their clients.
    hs = [env.tcp_client(host, port, [b"hello", 2.5], wait=False) for host in (SRV4, SRV6)]
    w = it.wait_until(lambda: (lambda x: x if x and x.get("flows", 0) >= 2 else None)(
        proxy_in_worker_list(env)), timeout=4)
    check(w, "the proxy worker never showed 2 open connections: %r", proxy_in_worker_list(env))
    check(w["rss_bytes"] > 1 << 20, "proxy rss_bytes %r", w["rss_bytes"])
    check(w.get("conns_refused") == 0 and w.get("scan_errors") == 0,
          "the proxy's own failure counters: %r", w)
    with open("/proc/%d/statm" % w["pid"]) as f:
        rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    check(rss / 2 <= w["rss_bytes"] <= rss * 2, "proxy rss_bytes %d, /proc says %d",
          w["rss_bytes"], rss)
    for h in hs:
        it.client_result(h, 15)
    w = it.wait_until(lambda: (lambda x: x if x and x.get("flows") == 0 else None)(
        proxy_in_worker_list(env)), timeout=4)
    check(w, "connections still counted open after they closed: %r", proxy_in_worker_list(env))


@test
def service_sees_the_client_address(env):
    _, port = env.service("px-addr", "tcp")
    check(env.service_doc("px-addr").get("layer") == "proxy", "layer: %r",
          env.service_doc("px-addr"))
    srv = env.tcp_server(port)
    for n, (host, cli) in enumerate(((SRV4, CLI4), (SRV6, CLI6)), start=1):
        c, sport = env.tcp_conn(host, port, [b"hello"])
        s = it.server_conn(srv, n)
        it.assert_passed(c, s, b"hello")
        check(s["peer"].rsplit(":", 1)[0] == cli, "the service saw %s, not the client %s",
              s["peer"], cli)


@test
def half_close_passes_through(env):
    _, port = env.service("px-half", "tcp")
    srv = env.tcp_server(port, reply=b"answer after your FIN")
    # The client sends, shuts its side (steps end with "shut"), and reads the answer.
    c = env.tcp_client(SRV4, port, [b"request", "shut", ("read", 1.0)])
    s = it.server_conn(srv, 1)
    check(s["data"] == b"request" and s["end"] == "eof", "server: %r", s)
    check(c["received"] == b"answer after your FIN", "client received %r", c["received"])


@test
def udp_service_refused_on_the_proxy_layer(env):
    try:
        env.ctl("service", "add", "px-udp", "--proto", "udp", "--port", env.port(), "--layer",
                "proxy")
    except it.CtlError as e:
        check("tcp" in str(e).lower() or "udp" in str(e).lower(), "unclear refusal: %s", e)
        return
    raise AssertionError("a UDP service was accepted on the proxy layer")


@test
def switch_layers_of_a_running_service(env):
    _, port = env.service("px-switch", "tcp", extra=("--layer", "nfqueue"))
    env.filter("px-switch")
    srv = env.tcp_server(port)
    n = 0
    for layer in ("proxy", "nfqueue", "proxy"):
        env.ctl("service", "set", "px-switch", "--layer", layer)
        check(env.service_doc("px-switch").get("layer") == layer, "layer not %s", layer)
        n += 1
        c = env.tcp_client(SRV4, port, [b"x " + EVIL])
        it.assert_blocked(c, it.server_conn(srv, n))
        n += 1
        c = env.tcp_client(SRV6, port, [b"clean"])
        it.assert_passed(c, it.server_conn(srv, n), b"clean")


@test
def fail_open_and_fail_closed_with_the_proxy_stopped(env):
    _, pc = env.service("px-closed", "tcp")
    _, po = env.service("px-open", "tcp", extra=("--fail-open",))
    env.filter("px-closed")
    env.filter("px-open")
    sc, so = env.tcp_server(pc), env.tcp_server(po)
    w = proxy_worker(env)
    check(w and w.get("pid"), "no proxy worker: %r", w)
    os.kill(w["pid"], signal.SIGSTOP)
    try:
        # A stopped process still has its listening sockets: the kernel completes handshakes
        # into its backlog, but nothing is relayed, so nothing unfiltered reaches either service.
        c = env.tcp_client(SRV4, pc, [b"hello"], timeout=1.5)
        check(not sc.all("data"), "data reached the fail-closed service: %r", sc.all("data"))
    finally:
        os.kill(w["pid"], signal.SIGCONT)
    # No listener at all now: fail-open goes straight to the service, fail-closed nowhere,
    # until the worker is back. controld is stopped meanwhile, so that the gap lasts (it would
    # restart the worker within 100 ms) and the test sees the gap, not a race with the restart.
    cpid = env.controld_pid()
    os.kill(cpid, signal.SIGSTOP)
    try:
        os.kill(w["pid"], signal.SIGKILL)
        # (a zombie until controld reaps it, but its sockets are gone at once)
        time.sleep(0.2)
        c = env.tcp_client(SRV4, po, [b"while the proxy is down"], timeout=1.5)
        check(c["connected"], "fail-open: no connection while the proxy is down: %r", c)
        s = it.server_conn(so, 1)
        check(s["data"] == b"while the proxy is down", "fail-open: %r", s)
        c = env.tcp_client(SRV4, pc, [b"hello again"], timeout=1.5)
        got = b"".join(it.d64(e["data"]) for e in sc.all("data"))
        check(b"hello again" not in got, "data reached the fail-closed service: %r", got)
    finally:
        os.kill(cpid, signal.SIGCONT)
    def back():
        x = proxy_worker(env)
        return x and x.get("pid") != w["pid"] and x.get("state") == "running"
    check(it.wait_until(back, timeout=8, step=0.2), "the proxy worker was not restarted")
    n = len(sc.all("accept"))
    c = env.tcp_client(SRV4, pc, [b"x " + EVIL])
    it.assert_blocked(c, it.server_conn(sc, n + 1))


_REUSE_CLIENT = r"""
import socket, sys
host, port, sport = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def once(payload):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((sys.argv[4], sport))
    s.settimeout(3)
    try:
        s.connect((host, port))
        s.sendall(payload)
        return "eof" if s.recv(100) == b"" else "data"
    except ConnectionResetError:
        return "reset"
    except OSError as e:
        return type(e).__name__
    finally:
        s.close()
print(once(b"hello"), once(b"x evil42"))
"""


@test
def reused_client_port_is_proxied_again(env):
    # The server closes first (idle), so the proxy holds the client side in TIME_WAIT; the
    # client then connects again from the same port. Its SYN must go through tproxy to the
    # proxy (and be filtered), not slip past it on the TIME_WAIT socket to the service.
    _, port = env.service("px-reuse", "tcp")
    env.filter("px-reuse")
    srv = env.tcp_server(port, idle=0.3)
    out = it.sh("ip", "netns", "exec", env.cli, "/usr/bin/python3", "-c", _REUSE_CLIENT, SRV4,
                str(port), "47001", CLI4, timeout=15).stdout.split()
    check(out == ["eof", "reset"], "first connection, then the same port again: %r", out)
    got = b"".join(it.d64(e["data"]) for e in srv.all("data"))
    check(b"evil42" not in got, "the reused port's matching bytes reached the service: %r", got)


if __name__ == "__main__":
    sys.exit(it.run_module("proxy"))
