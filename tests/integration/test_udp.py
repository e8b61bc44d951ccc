#!/usr/bin/python3
"""Integration: UDP services on the nfqueue layer, IPv4 and IPv6. A UDP block drops only the
matching datagram; the ones around it pass."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fgxit as it  # noqa: E402
from fgxit import CLI4, CLI6, EVIL, SRV4, SRV6, check, test  # noqa: E402

HOSTS = (("v4", SRV4), ("v6", SRV6))


def new_dgrams(srv, before):
    return it.dgrams(srv)[before:]


def exchange(env, srv, host, port, dgrams, settle=0.3):
    """Send dgrams; return (datagrams the server got, replies the client got)."""
    before = len(it.dgrams(srv))
    c = env.udp_client(host, port, dgrams, pause=0.1, wait_s=0.5)
    it.wait_until(lambda: len(it.dgrams(srv)) - before >= len(dgrams), timeout=settle)
    return new_dgrams(srv, before), c["replies"]


def exchange_all(env, srv, cases, settle=0.3):
    """exchange for each (host, dgrams) at once (IPv4 and IPv6 clients: the server tells them
    apart by their address); [(datagrams the server got from that client, its replies)]."""
    before = len(it.dgrams(srv))
    hs = [env.helper(env.cli, "udp-client", "--host", host, "--port", srv.port, "--dgrams",
                     json.dumps([d.hex() for d in dgrams]), "--pause", 0.1, "--wait", 0.5)
          for host, dgrams in cases]
    res = [it.client_result(h, len(dgrams) * 0.1 + 0.5 + 5) for h, (_, dgrams) in zip(hs, cases)]
    client = {SRV4: CLI4, SRV6: CLI6}

    def got(host):
        return [it.d64(e["data"]) for e in srv.all("dgram")[before:]
                if e["peer"].rpartition(":")[0] == client[host]]
    it.wait_until(lambda: all(len(got(host)) >= len(dgrams) for host, dgrams in cases),
                  timeout=settle)
    return [(got(host), r["replies"]) for (host, _), r in zip(cases, res)]


def server(env, port, **kw):
    srv = env.udp_server(port, **kw)
    srv.port = port
    return srv


@test
def udp_no_filter_passes(env):
    _, port = env.service("u-none", "udp")
    srv = server(env, port, echo=True)
    sent = [(host, [b"one " + fam.encode(), b"two " + EVIL]) for fam, host in HOSTS]
    for (host, d), (got, replies) in zip(sent, exchange_all(env, srv, sent)):
        check(got == d, "server got %r from %s, expected %r", got, host, d)
        check(replies == d, "client got replies %r from %s, expected %r", replies, host, d)


@test
def udp_only_matching_datagram_dropped(env):
    _, port = env.service("u-block", "udp")
    env.filter("u-block")
    srv = server(env, port, echo=True)
    sent = [(host, [b"before " + fam.encode(), b"x " + EVIL + b" y", b"after " + fam.encode()])
            for fam, host in HOSTS]
    for (host, d), (got, replies) in zip(sent, exchange_all(env, srv, sent, settle=1.0)):
        check(got == [d[0], d[2]], "server got %r over %s, expected only the clean datagrams",
              got, host)
        check(replies == [d[0], d[2]], "client replies %r over %s", replies, host)


@test
def udp_end_anchor_is_the_datagram_end(env):
    # refused on TCP streams, '$' works in block mode: the end of each datagram
    _, port = env.service("u-eod", "udp")
    env.filter("u-eod", "evil[0-9]+$")
    srv = server(env, port, echo=True)
    sent = [(host, [b"x " + EVIL, EVIL + b" y " + fam.encode(), b"z " + EVIL + b"\n!"])
            for fam, host in HOSTS]
    for (host, d), (got, _) in zip(sent, exchange_all(env, srv, sent, settle=1.0)):
        check(got == d[1:], "server got %r over %s, expected all but the one ending in the "
              "match", got, host)


@test
def udp_no_reassembly_across_datagrams(env):
    _, port = env.service("u-split", "udp")
    env.filter("u-split")
    srv = env.udp_server(port)
    d = [b"ev", b"il1337"]
    got, _ = exchange(env, srv, SRV4, port, d, settle=1.0)
    check(got == d, "datagrams are matched one by one; server got %r", got)


@test
def udp_nocase_and_case_sensitive(env):
    _, port = env.service("u-nocase", "udp")
    env.filter("u-nocase", "EVIL[0-9]+", nocase=True)
    srv = env.udp_server(port)
    d = [b"eViL1337", b"clean"]
    got, _ = exchange(env, srv, SRV6, port, d, settle=1.0)
    check(got == [b"clean"], "nocase: server got %r", got)
    _, port = env.service("u-case", "udp")
    env.filter("u-case", "evil[0-9]+")
    srv = env.udp_server(port)
    d = [b"EVIL1337", b"evil1337"]
    got, _ = exchange(env, srv, SRV4, port, d, settle=1.0)
    check(got == [b"EVIL1337"], "case-sensitive: server got %r", got)


@test
def udp_dir_s2c_drops_reply_only(env):
    _, port = env.service("u-s2c", "udp")
    env.filter("u-s2c", dir="s2c")
    srv = server(env, port, echo=True)
    sent = [(host, [b"a " + EVIL, b"clean"]) for _, host in HOSTS]
    for (host, d), (got, replies) in zip(sent, exchange_all(env, srv, sent, settle=1.0)):
        check(got == d, "s2c filter dropped client data over %s: server got %r", host, got)
        check(replies == [b"clean"], "client replies %r over %s, expected only the clean echo",
              replies, host)


@test
def udp_dir_c2s_passes_reply(env):
    _, port = env.service("u-c2s", "udp")
    env.filter("u-c2s", dir="c2s")
    # the server's own datagram carries the pattern; the client's does not
    srv = env.udp_server(port, reply=b"r " + EVIL)
    got, replies = exchange(env, srv, SRV4, port, [b"ask"], settle=1.0)
    check(got == [b"ask"], "server got %r", got)
    check(replies == [b"r " + EVIL], "a c2s filter dropped the reply: %r", replies)
    got, replies = exchange(env, srv, SRV4, port, [b"ask " + EVIL], settle=1.0)
    check(got == [], "c2s datagram with the pattern reached the server: %r", got)


@test
def udp_counters_count_dropped_datagrams(env):
    _, port = env.service("u-count", "udp")
    fid = env.filter("u-count")
    srv = env.udp_server(port)
    d = [EVIL, b"ok", b"1 " + EVIL, b"2 " + EVIL, b"ok2"]
    got, _ = exchange(env, srv, SRV4, port, d, settle=1.0)
    check(got == [b"ok", b"ok2"], "server got %r", got)

    def blocked():
        return [f for f in env.filters("u-count") if f["id"] == fid][0]["blocked"]

    it.wait_until(lambda: blocked() >= 3, timeout=4)
    check(blocked() == 3, "filter blocked=%r, expected 3 dropped datagrams", blocked())
    it.wait_until(lambda: env.service_doc("u-count")["blocked"] >= 3, timeout=2)
    check(env.service_doc("u-count")["blocked"] == 3, "service blocked=%r",
          env.service_doc("u-count")["blocked"])


@test
def udp_disable_enable_rm(env):
    _, port = env.service("u-toggle", "udp")
    fid = env.filter("u-toggle")
    srv = env.udp_server(port)
    got, _ = exchange(env, srv, SRV6, port, [EVIL], settle=0.8)
    check(got == [], "active filter: server got %r", got)
    env.ctl("filter", "disable", fid)
    got, _ = exchange(env, srv, SRV6, port, [EVIL])
    check(got == [EVIL], "disabled filter: server got %r", got)
    env.ctl("filter", "enable", fid)
    got, _ = exchange(env, srv, SRV6, port, [EVIL], settle=0.8)
    check(got == [], "re-enabled filter: server got %r", got)
    env.ctl("filter", "rm", fid)
    got, _ = exchange(env, srv, SRV6, port, [EVIL])
    check(got == [EVIL], "removed filter: server got %r", got)


if __name__ == "__main__":
    sys.exit(it.run_module("udp"))
