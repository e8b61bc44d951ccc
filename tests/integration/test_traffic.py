#!/usr/bin/python3
"""Integration: each service's traffic history (issue 18, the dashboard's charts), with a real
controld, its workers and real TCP connections between two namespaces.

`stats --history` has, per service and minute, the bytes client->server (bytes_c2s), server->
client (bytes_s2c) and the connections seen (flows): on the NFQUEUE layer the bytes are the
packets' (IP headers included, so at least the payload and at most a few headers more a
packet) and add up to the service's `bytes` in `stats`; on the proxy layer they are exactly the
bytes relayed. A blocked connection is a connection too. Kept across a controld restart, and
drawn as sparkline rows by the text output."""
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fgxit as it  # noqa: E402
from fgxit import EVIL, SRV4, check, test  # noqa: E402

UP = bytes(range(256)) * 20 + b"tail"       # 5124 bytes from each client
DOWN = b"R" * 3000                          # the server's answer to each
N = 4
# A connection's packets on the NFQUEUE layer, headers only: handshake, ACKs, FIN; the payload
# in MSS-sized segments. Generous: a header (60 bytes with options) for each of 40 packets.
HEADERS_MAX = 40 * 60


def traffic(env, name, sid):
    doc = env.ctl("stats", "--history", name, "--since", "1h")
    check(isinstance(doc, dict) and "series" in doc, "stats --history --json: %r", doc)
    out = {}
    for s in doc["series"]:
        if s["obj"] == "service" and s["id"] == sid and s["kind"] in ("bytes_c2s", "bytes_s2c",
                                                                     "flows"):
            check(s.get("name") == name, "a traffic series without its service's name: %r", s)
            check(s["total"] == sum(p["count"] for p in s["minutes"]), "total != sum: %r", s)
            now = time.time()
            for p in s["minutes"]:
                check(now - 600 < p["time"] <= now and p["time"] % 60 == 0 and p["count"] > 0,
                      "a minute out of place: %r", p)
            out[s["kind"]] = s["total"]
    return out


def stats_bytes(env, name):
    doc = env.ctl("stats", name)
    check(isinstance(doc, list) and len(doc) == 1, "stats %s: %r", name, doc)
    return doc[0]["bytes"]


def run_connections(env, srv, port, n, payload=UP, reply=DOWN):
    """n connections one after the other; the server's record of each found by its order, not
    by the client's port (the proxy layer's onward connection has a port of its own)."""
    for _ in range(n):
        before = len(srv.all("accept"))
        c, _sport = env.tcp_conn(SRV4, port, [payload])
        # the server's record of this one: the next accept, once the server has told of it
        # (the client can be done before that event is in)
        check(it.wait_until(lambda: len(srv.all("accept")) > before, timeout=6),
              "the server never accepted connection %d", before + 1)
        it.assert_passed(c, it.server_conn(srv, before + 1), payload, reply)


def restart(env):
    env.stop_controld(signal.SIGTERM)
    env.start_controld()


def settled(env, name, sid, flows):
    """The history once every connection is in, and the stats total of the same moment."""
    def ready():
        t = traffic(env, name, sid)
        return t if t.get("flows") == flows else None
    t = it.wait_until(ready, timeout=6)
    check(t, "connections in the history: %r, expected %d", traffic(env, name, sid), flows)
    return t


@test
def nfqueue_service_bytes_each_way_and_connections(env):
    sid, port = env.service("trafq")
    srv = env.tcp_server(port, reply=DOWN)
    env.filter("trafq", "evil[0-9]+")
    run_connections(env, srv, port, N)
    t = settled(env, "trafq", sid, N)
    check(N * len(UP) <= t["bytes_c2s"] <= N * (len(UP) + HEADERS_MAX),
          "client->server bytes %d for %d x %d payload bytes", t["bytes_c2s"], N, len(UP))
    check(N * len(DOWN) <= t["bytes_s2c"] <= N * (len(DOWN) + HEADERS_MAX),
          "server->client bytes %d for %d x %d payload bytes", t["bytes_s2c"], N, len(DOWN))
    # the same reports as the service's total: both ways add up to it, to the byte
    total = it.wait_until(lambda: (lambda b, h: b if b == h["bytes_c2s"] + h["bytes_s2c"]
                                   else None)(stats_bytes(env, "trafq"),
                                              traffic(env, "trafq", sid)), timeout=4)
    check(total, "stats bytes %d, history %r", stats_bytes(env, "trafq"),
          traffic(env, "trafq", sid))
    # a blocked connection was a connection: counted
    c, sport = env.tcp_conn(SRV4, port, [b"x " + EVIL])
    it.assert_blocked(c, it.server_conn_of(srv, sport))
    settled(env, "trafq", sid, N + 1)
    # across a restart, then growing again
    before = traffic(env, "trafq", sid)
    restart(env)
    after = traffic(env, "trafq", sid)
    check(after == before, "after a restart: %r, before %r", after, before)
    run_connections(env, srv, port, 1)
    t = settled(env, "trafq", sid, N + 2)
    check(t["bytes_c2s"] >= before["bytes_c2s"] + len(UP), "no growth after the restart: %r", t)
    # the text output: one sparkline row each, the bytes in binary units
    p = env.ctl_raw("stats", "--history", "trafq", json_out=False)
    check(p.returncode == 0, "stats --history: %d %r", p.returncode, p.stderr)
    rows = {r.split("|")[0].split("  ")[0].strip(): r for r in p.stdout.splitlines() if "|" in r}
    for label in ("trafq bytes c->s", "trafq bytes s->c", "trafq connections"):
        row = rows.get(label)
        check(row is not None, "no row %r in %r", label, p.stdout)
        spark = row.split("|")[1]
        check(len(spark) == 60 and "@" in spark, "row %r: no sparkline peak: %r", label, row)
    check("KiB" in rows["trafq bytes c->s"], "bytes not in binary units: %r",
          rows["trafq bytes c->s"])
    check(rows["trafq connections"].split()[2] == str(N + 2), "connections total: %r",
          rows["trafq connections"])
    env.ctl("service", "rm", "--yes", sid)


@test
def proxy_service_bytes_are_the_bytes_relayed(env):
    sid, port = env.service("trafp", extra=("--layer", "proxy"))
    srv = env.tcp_server(port, reply=DOWN)
    env.filter("trafp", "evil[0-9]+")
    run_connections(env, srv, port, N)
    t = settled(env, "trafp", sid, N)
    check(t["bytes_c2s"] == N * len(UP), "client->server bytes %d, relayed %d", t["bytes_c2s"],
          N * len(UP))
    check(t["bytes_s2c"] == N * len(DOWN), "server->client bytes %d, relayed %d",
          t["bytes_s2c"], N * len(DOWN))
    env.ctl("service", "rm", "--yes", sid)


@test
def traffic_history_of_one_service_only(env):
    a, pa = env.service("trafa")
    b, pb = env.service("trafb")
    sa = env.tcp_server(pa, reply=DOWN)
    env.tcp_server(pb, reply=DOWN)
    run_connections(env, sa, pa, 2)
    settled(env, "trafa", a, 2)
    doc = env.ctl("stats", "--history", "trafb", "--since", "1h")
    check(not [s for s in doc["series"] if s["id"] == a and s["obj"] == "service"],
          "another service's series in trafb's history: %r", doc)
    check(traffic(env, "trafb", b) == {}, "traffic for a service nobody used: %r",
          traffic(env, "trafb", b))
    env.ctl("service", "rm", "--yes", a)
    env.ctl("service", "rm", "--yes", b)


if __name__ == "__main__":
    sys.exit(it.run_module("traffic"))
