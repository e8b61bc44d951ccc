#!/usr/bin/python3
"""Integration: a UDP flow's state ends after controld's --udp-idle without a datagram (issue
27), on both layers: a script's globals of a 4-tuple last while its datagrams come, and the
same 4-tuple after the idle time starts afresh. Real datagrams between namespaces."""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fgxit as it  # noqa: E402
from fgxit import SRV4, check, test  # noqa: E402
from scriptfiles import write  # noqa: E402

IDLE_S = 1

REMEMBER = """
from firegex.nfproxy import pyfilter, ACCEPT, DROP
from firegex.nfproxy.models import RawPacket

marked = False

@pyfilter
def remember(packet: RawPacket):
    global marked
    if packet.is_input and b"MARK" in packet.data:
        marked = True
    elif packet.is_input and marked:
        return DROP
    return ACCEPT
"""


def got_from(env, srv, port, dgrams, sport):
    before = len(srv.all("dgram"))
    env.udp_client(SRV4, port, dgrams, pause=0.1, wait_s=0.3, sport=sport)
    it.wait_until(lambda: len(srv.all("dgram")) - before >= len(dgrams), timeout=0.5)
    return [it.d64(e["data"]) for e in srv.all("dgram")[before:]]


@test
def udp_flow_state_ends_after_the_idle_time(env):
    for layer, sport in (("nfqueue", 43001), ("proxy", 43002)):
        name = "idle-" + layer
        _, port = env.service(name, "udp", extra=("--layer", layer))
        env.ctl("script", "set", name, write(REMEMBER))
        srv = env.udp_server(port)
        got = got_from(env, srv, port, [b"MARK", b"kept"], sport)
        check(got == [b"MARK"], "%s: the flow's state did not hold: %r", layer, got)
        time.sleep(IDLE_S + 2.5)  # the idle time, the worker's 1 s tick, and room
        got = got_from(env, srv, port, [b"afresh"], sport)
        check(got == [b"afresh"], "%s: the flow kept its state past --udp-idle: %r", layer, got)


if __name__ == "__main__":
    sys.exit(it.run_module("udp_idle", controld_args=("--udp-idle", IDLE_S)))
