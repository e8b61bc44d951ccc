#!/usr/bin/python3
"""Integration: a proxy-layer service takes a client from any source port (a NAT's clients come
from anything in 1024-65535).

The proxy's onward connection to the service speaks from the client's address, so its 4-tuple
(client address, onward port, service address, service port) must never be a client's: the
service's socket of the onward leg would then share its address pair with the proxy's accepted
socket of that client, and one of the two connections dies by a reset nobody sent (seen before:
onward ports came from 10000-32767, and a client from a port the proxy held there failed). The
onward ports are below 1024 now: with connections held open (their onward ports taken), clients
from the old range's edges, from the ports those onward connections use, and from ports across
1024-65535 each get through, and each is filtered (a match resets it). The same for a TLS
service (the proxy terminates TLS, filters the plaintext, speaks TLS onward)."""
import base64
import json
import os
import random
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fgxit as it  # noqa: E402
from fgxit import CLI4, CLI6, EVIL, SRV4, SRV6, check, test  # noqa: E402

REPLY = b"pong"
HELD = 24
EDGES = [1024, 1025, 9999, 10000, 10001, 16383, 16384, 32766, 32767, 32768, 32769, 49151,
         49152, 60999, 61000, 65534, 65535]


def peer_port(e):
    return int(e["peer"].rsplit(":", 1)[1])


def hold(env, host, port, srv, n):
    """n connections left open (each waits for a line on stdin); returns their helpers and the
    onward ports the service saw them from."""
    before = len(srv.all("accept"))
    hs = [env.tcp_client(host, port, [b"hold%d" % i, "wait"], timeout=20, wait=False)
          for i in range(n)]
    acc = it.wait_until(lambda: len(srv.all("accept")) >= before + n and srv.all("accept"),
                        timeout=10)
    check(acc, "the service accepted %d of %d held connections", len(srv.all("accept")) - before,
          n)
    return hs, [peer_port(e) for e in acc[before:]]


def release(hs):
    for h in hs:
        h.tell()
    for h in hs:
        c = it.client_result(h, 20)
        check(c["end"] == "eof" and c["received"] == REPLY, "a held connection ended %r", c)


def one(env, host, port, srv, sport, payload):
    c, got = env.tcp_conn_from(host, port, [payload], sport)
    check(got == sport, "client bound %s, asked for %d", got, sport)
    return c


def through_and_filtered(env, host, want_peer):
    sid, port = env.service("ports%d" % len(want_peer), extra=("--layer", "proxy"))
    srv = env.tcp_server(port, reply=REPLY, idle=30)
    env.filter("ports%d" % len(want_peer), "evil[0-9]+")
    held, onward = hold(env, host, port, srv, HELD)
    for q in onward:
        check(1 <= q <= 1023, "onward port %d: not below 1024, where no client port is", q)
    rnd = random.Random(port)
    ports = EDGES + sorted(rnd.sample(range(1024, 65536), 24))
    # the held onward ports themselves, as a client's, were the collision (below 1024 now)
    ports += [q for q in onward if q >= 1024]
    seen = set()
    for i, sport in enumerate(ports):
        if sport in seen:
            continue
        seen.add(sport)
        payload = b"hello from %d " % sport
        c = one(env, host, port, srv, sport, payload)
        s = it.server_conn_starting(srv, payload)
        it.assert_passed(c, s, payload, REPLY)
        check(s["peer"].rsplit(":", 1)[0] == want_peer, "the service saw %s, not the client %s",
              s["peer"], want_peer)
    # filtered from any port too: a match resets the client, the service never sees it
    for sport in (1026, 10002, 32765, 32770, 65533):
        c = one(env, host, port, srv, sport, b"x " + EVIL)
        check(c["connected"] and c["end"] == "reset" and EVIL not in c["received"],
              "a match from port %d: %r", sport, c)
    check(not [e for e in srv.all("data") if EVIL in it.d64(e["data"])],
          "the service received the matching bytes")
    release(held)
    env.ctl("service", "rm", "--yes", sid)


def _tcp_conn_from(self, host, port, steps, sport, timeout=3.0):
    h = self.tcp_client(host, port, steps, timeout=timeout, wait=False, sport=sport)
    c = it.client_result(h, timeout * 3 + 5)
    ev = h.wait_event(lambda e: e.get("event") == "connected", 0)
    return c, (ev["sport"] if ev else None)


it.Env.tcp_conn_from = _tcp_conn_from


@test
def ipv4_clients_from_any_port(env):
    through_and_filtered(env, SRV4, CLI4)


@test
def ipv6_clients_from_any_port(env):
    through_and_filtered(env, SRV6, CLI6)


TLSPY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fgxtls.py")


def tls_from(env, port, sport, chunks):
    p = subprocess.run(["ip", "netns", "exec", env.cli, it.PY, TLSPY, "client", "--host", SRV4,
                        "--port", str(port), "--chunks", json.dumps([c.hex() for c in chunks]),
                        "--until", "PONG", "--sport", str(sport)],
                       capture_output=True, text=True, timeout=20)
    for line in p.stdout.splitlines():
        ev = json.loads(line)
        if ev.get("event") == "result":
            ev["received"] = base64.b64decode(ev["received"])
            return ev
    raise AssertionError("TLS client printed no result: %s" % p.stderr[-400:])


@test
def tls_clients_from_any_port(env):
    d = os.path.join(env.tmp, "certs")
    os.makedirs(d, exist_ok=True)
    it.sh(it.PY, TLSPY, "certs", d)
    sid, port = env.service("pxtls", "tcp", None,
                            ("--layer", "proxy", "--tls-cert", os.path.join(d, "proxy.pem"),
                             "--tls-key", os.path.join(d, "proxy.key")))
    srv = it.Helper(env.srv, "server", "--host", SRV4, "--port", port, "--cert",
                    os.path.join(d, "service.pem"), "--key", os.path.join(d, "service.key"),
                    script=TLSPY)
    env.helpers.append(srv)
    check(srv.wait_event(lambda e: e.get("event") == "listening", 5), "no TLS server")
    env.filter("pxtls", "evil[0-9]+")
    for sport in (1024, 9999, 10000, 20000, 32767, 32768, 49152, 60999, 65535):
        r = tls_from(env, port, sport, [b"hello PING"])
        check(r["ok"] and b"PONG" in r["received"], "TLS from port %d: %r", sport, r)
    for sport in (10001, 32766):
        r = tls_from(env, port, sport, [b"x " + EVIL + b" PING"])
        check(b"PONG" not in r["received"] and r["how"] in ("reset", "eof", "ssl", "error"),
              "a match over TLS from port %d: %r", sport, r)
    ends = [it.d64(e["data"]) for e in srv.all("end")]
    check(not [x for x in ends if EVIL in x], "the TLS service received the matching bytes")
    env.ctl("service", "rm", "--yes", sid)


if __name__ == "__main__":
    sys.exit(it.run_module("pxports"))
