#!/usr/bin/python3
"""Integration: UDP services on the proxy layer (issue 27): proxyworker relays each datagram
(tproxy to its UDP listener), from a socket bound to the client's own address and port, so the
service sees the real client; the replies come back from the service's address and port. The
regexes judge each datagram alone in its direction (a blocked one never arrives, the honest
ones around it do, the flow goes on), a script judges each datagram as a RawPacket with a state
per flow, and a script's edit is sent. Real datagrams between namespaces, IPv4 and IPv6."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fgxit as it  # noqa: E402
from fgxit import CLI4, CLI6, EVIL, SRV4, SRV6, check, test  # noqa: E402
from scriptfiles import script_counters, write  # noqa: E402

JUDGE = """
from firegex.nfproxy import pyfilter, ACCEPT, REJECT, DROP
from firegex.nfproxy.models import RawPacket

marked = False

@pyfilter
def datagrams(packet: RawPacket):
    global marked
    if packet.is_stream or packet.l4 != "udp" or packet.client_ip not in ("CLI4", "CLI6"):
        return REJECT
    if b"DENY" in packet.data:
        return REJECT
    if packet.is_input and b"MARK" in packet.data:
        marked = True
    if packet.is_input and marked and b"after" in packet.data:
        return DROP
    if b"EDIT" in packet.data:
        packet.data = packet.data.replace(b"EDIT", b"done")
    return ACCEPT
""".replace("CLI4", CLI4).replace("CLI6", CLI6)


def px_udp(env, name, extra=()):
    _, port = env.service(name, "udp", extra=("--layer", "proxy") + tuple(extra))
    check(env.service_doc(name)["layer"] == "proxy", "%s is not on the proxy layer", name)
    return port


def send(env, srv, host, port, dgrams, sport=0, settle=1.0, pause=0.1):
    """dgrams from one client socket; (what the server got from it with the peer it saw, the
    replies the client got)."""
    before = len(srv.all("dgram"))
    c = env.udp_client(host, port, dgrams, pause=pause, wait_s=0.6, sport=sport)

    def got():
        return [(e["peer"], it.d64(e["data"])) for e in srv.all("dgram")[before:]]
    it.wait_until(lambda: len(got()) >= len(dgrams), timeout=settle)
    return got(), c["replies"]


@test
def udp_proxy_keeps_the_client_address_and_filters_each_datagram(env):
    port = px_udp(env, "pu")
    env.filter("pu")                      # both directions
    env.filter("pu", "s2c-only", dir="s2c")
    srv = env.udp_server(port, echo=True)
    for host, cli, sport in ((SRV4, CLI4, 42001), (SRV6, CLI6, 42002)):
        d = [b"hello", b"x " + EVIL, b"after the block", b"say s2c-only"]
        got, replies = send(env, srv, host, port, d, sport=sport)
        peers = {p for p, _ in got}
        check([x for _, x in got] == [d[0], d[2], d[3]],
              "over %s the server got %r: the blocked datagram arrived or an honest one did "
              "not", host, got)
        check(peers == {"%s:%d" % (cli, sport)},
              "over %s the server saw %r, not the client %s:%d", host, peers, cli, sport)
        # the replies come from the address and port the client sent to (a connected client
        # socket takes no other), s2c judged too
        check(replies == [d[0], d[2]], "over %s the client got replies %r", host, replies)
    fid = [f for f in env.filters("pu") if f["regex"] != "s2c-only"][0]["id"]
    blocked = it.wait_until(lambda: (lambda f: f if f["blocked"] >= 2 else None)(
        [f for f in env.filters("pu") if f["id"] == fid][0]), timeout=5)
    check(blocked and blocked["blocked"] == 2, "filter counters %r", env.filters("pu"))
    evs = it.wait_until(lambda: (lambda e: e if len(e) >= 4 else None)(env.ctl("events", "pu")),
                        timeout=5)
    check(evs and len(evs) == 4 and all(e["proto"] == "udp" for e in evs), "events %r", evs)
    check(sorted((e["dir"], e["sport"] if e["sport"] != port else e["dport"]) for e in evs) ==
          [("c2s", 42001), ("c2s", 42002), ("s2c", 42001), ("s2c", 42002)],
          "events' directions and client ports %r", evs)


@test
def udp_proxy_script_judges_datagrams_with_flow_state_and_edits(env):
    port = px_udp(env, "pus")
    env.ctl("script", "set", "pus", write(JUDGE))
    srv = env.udp_server(port, echo=True)
    d = [b"one", b"a DENY", b"please EDIT", b"MARK", b"after the mark", b"two"]
    got, replies = send(env, srv, SRV4, port, d, sport=42011)
    data = [x for _, x in got]
    check(data == [b"one", b"please done", b"MARK", b"two"], "the server got %r", data)
    check({p for p, _ in got} == {"%s:%d" % (CLI4, 42011)}, "peers %r", got)
    check(replies == [b"one", b"please done", b"MARK", b"two"], "replies %r", replies)
    # another flow has its own state
    got, _ = send(env, srv, SRV6, port, [b"after, another flow"], sport=42012)
    check([x for _, x in got] == [b"after, another flow"], "a new flow met another's state: %r",
          got)
    # a burst: the datagrams that come while one waits for its verdict wait behind it
    burst = [b"b%d" % i for i in range(12)]
    burst[5] = b"b5 DENY"
    got, replies = send(env, srv, SRV4, port, burst, sport=42013, pause=0.0, settle=2.0)
    want = burst[:5] + burst[6:]
    check([x for _, x in got] == want, "a burst: the server got %r, expected %r", got, want)
    check(replies == want, "a burst: the replies were %r", replies)
    cnt = it.wait_until(lambda: (lambda f: f if f["blocked"] >= 3 else None)(
        script_counters(env, "pus")["datagrams"]), timeout=5)
    check(cnt and cnt["blocked"] == 3, "counters %r", script_counters(env, "pus"))


@test
def udp_proxy_filters_the_boxs_own_clients(env):
    """A client on the box itself (the service's namespace) goes through the proxy too: its
    blocked datagram never arrives, the honest ones and their replies do, from its address."""
    port = px_udp(env, "pub")
    env.filter("pub")
    srv = env.udp_server(port, echo=True)
    for host in (SRV4, SRV6):
        before = len(srv.all("dgram"))
        d = [b"local one", b"local " + EVIL, b"local two"]
        c = env.udp_client(host, port, d, pause=0.1, wait_s=0.6, ns=env.srv)
        it.wait_until(lambda: len(srv.all("dgram")) - before >= 2, timeout=1.0)
        got = [(e["peer"], it.d64(e["data"])) for e in srv.all("dgram")[before:]]
        check([x for _, x in got] == [d[0], d[2]], "over %s the server got %r", host, got)
        check(all(p.rpartition(":")[0].strip("[]") == host for p, _ in got),
              "over %s the server saw %r", host, got)
        check(c["replies"] == [d[0], d[2]], "over %s the local client got %r", host,
              c["replies"])
    ev = it.wait_until(lambda: (lambda e: e if len(e) >= 2 else None)(env.ctl("events", "pub")),
                       timeout=5)
    check(ev and len(ev) == 2, "the local clients' blocks are not events: %r",
          env.ctl("events", "pub"))


@test
def udp_proxy_tcp_and_udp_services_share_a_port(env):
    """The proxy's maps key the protocol: a TCP and a UDP service on one port are two
    services, each filtered on its own."""
    p = env.port()
    env.service("sh-tcp", "tcp", port=p, extra=("--layer", "proxy"))
    env.service("sh-udp", "udp", port=p, extra=("--layer", "proxy"))
    env.filter("sh-udp")
    tsrv = env.tcp_server(p)
    usrv = env.udp_server(p, echo=True)
    c = env.tcp_client(SRV4, p, [b"over tcp " + EVIL])
    it.assert_passed(c, it.server_conn(tsrv, 1), b"over tcp " + EVIL)
    got, replies = send(env, usrv, SRV4, p, [b"over udp", b"udp " + EVIL])
    check([x for _, x in got] == [b"over udp"] and replies == [b"over udp"],
          "the UDP service got %r, replies %r", got, replies)


if __name__ == "__main__":
    sys.exit(it.run_module("udp_proxy"))
