#!/usr/bin/python3
"""Integration: script filters on UDP services (issue 27) on the NFQUEUE layer, with real
datagrams between namespaces: each datagram is one RawPacket (l4 "udp", is_stream False, the
client's and server's addresses), judged alone (REJECT and DROP refuse that datagram only),
in a state per 4-tuple flow that later datagrams of the flow meet and other flows do not; both
directions; a block is an event and counts against its function; an edit is refused at the
moment of the edit (the service's fail policy, said in the script log); a file whose function
takes a stream model is refused on a UDP service."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fgxit as it  # noqa: E402
from fgxit import CLI4, CLI6, SRV4, SRV6, check, test  # noqa: E402
from scriptfiles import script_counters, write  # noqa: E402

# PORT is the service's: the addresses a datagram carries are checked by the file itself
JUDGE = """
from firegex.nfproxy import pyfilter, ACCEPT, REJECT, DROP
from firegex.nfproxy.models import RawPacket

marked = False  # module level: each flow has globals of its own

@pyfilter
def datagrams(packet: RawPacket):
    global marked
    if packet.is_stream or packet.l4 != "udp" or packet.data_size != len(packet.data):
        return REJECT
    if packet.is_input and packet.server_port != PORT:
        return REJECT
    if b"WHO" in packet.data and packet.client_ip not in ("CLI4", "CLI6"):
        return REJECT
    if b"DENY" in packet.data:
        return REJECT
    if b"HUSH" in packet.data:
        return DROP
    if not packet.is_input and b"SECRET" in packet.data:
        return DROP
    if packet.is_input and b"MARK" in packet.data:
        marked = True
        return ACCEPT
    if packet.is_input and marked and b"after" in packet.data:
        return REJECT
    return ACCEPT
"""

EDIT = """
from firegex.nfproxy import pyfilter, ACCEPT
from firegex.nfproxy.models import RawPacket

@pyfilter
def rewrite(packet: RawPacket):
    if b"EDIT" in packet.data:
        packet.data = packet.data.replace(b"EDIT", b"edited, longer than it came")
    elif b"CUT" in packet.data:
        packet.data = b"cut"
    return ACCEPT
"""

STREAM = """
from firegex.nfproxy import pyfilter, REJECT
from firegex.nfproxy.models import RawPacket, HttpRequest

@pyfilter
def fine(packet: RawPacket):
    return None

@pyfilter
def wants_http(req: HttpRequest):
    return REJECT
"""


def judge(port):
    return JUDGE.replace("PORT", str(port)).replace("CLI4", CLI4).replace("CLI6", CLI6)


def send(env, srv, host, port, dgrams, sport=0, settle=1.0):
    """dgrams from one client socket (one flow; sport: that source port); (what the server
    got from it, the replies it got)."""
    before = len(srv.all("dgram"))
    c = env.udp_client(host, port, dgrams, pause=0.1, wait_s=0.6, sport=sport)

    def got():
        return [it.d64(e["data"]) for e in srv.all("dgram")[before:]]
    it.wait_until(lambda: len(got()) >= len(dgrams), timeout=settle)
    return got(), c["replies"]


def udp_script_service(env, name, text, extra=()):
    _, port = env.service(name, "udp", extra=tuple(extra))
    check(env.service_doc(name)["layer"] == "nfqueue", "%s is not on NFQUEUE", name)
    env.ctl("script", "set", name, write(text(port) if callable(text) else text))
    return port


@test
def udp_script_judges_each_datagram_in_its_flows_state(env):
    port = udp_script_service(env, "us", judge)
    srv = env.udp_server(port, echo=True)
    d = [b"hello", b"x DENY", b"y HUSH", b"WHO am I", b"MARK", b"after the mark"]
    got, replies = send(env, srv, SRV4, port, d, sport=41001)
    want = [b"hello", b"WHO am I", b"MARK"]
    check(got == want, "the server got %r, expected %r (each refused datagram alone)", got, want)
    check(replies == want, "the client got replies %r, expected %r", replies, want)
    # another flow has state of its own: "after" passes there
    got, _ = send(env, srv, SRV4, port, [b"after, another flow"], sport=41002)
    check(got == [b"after, another flow"], "a new flow met the first one's state: %r", got)
    # the first flow again (the same 4-tuple from a new socket): its state is still there
    got, _ = send(env, srv, SRV4, port, [b"after, again", b"fine"], sport=41001)
    check(got == [b"fine"], "the marked flow lost its state: the server got %r", got)
    # IPv6: the addresses the script reads are the real ones
    got, replies = send(env, srv, SRV6, port, [b"WHO v6", b"v6 DENY", b"v6 ok"], sport=41003)
    check(got == [b"WHO v6", b"v6 ok"], "over IPv6 the server got %r", got)
    check(replies == got, "over IPv6 the replies were %r", replies)
    # the blocks are counted against the function and are events with the client's address
    cnt = it.wait_until(lambda: (lambda f: f if f["blocked"] >= 5 else None)(
        script_counters(env, "us")["datagrams"]), timeout=5)
    check(cnt and cnt["blocked"] == 5, "counters %r", script_counters(env, "us"))
    evs = it.wait_until(lambda: (lambda e: e if len(e) >= 5 else None)(
        [e for e in env.ctl("events", "us") if e.get("script_kind") in ("reject", "drop")]),
        timeout=5)
    check(evs and len(evs) == 5, "script events %r", env.ctl("events", "us"))
    kinds = sorted(e["script_kind"] for e in evs)
    check(kinds == ["drop", "reject", "reject", "reject", "reject"], "event kinds %r", kinds)
    check(all(e["sport"] in (41001, 41003) and e["dport"] == port for e in evs),
          "event addresses %r", [(e["src"], e["sport"], e["dst"], e["dport"]) for e in evs])


@test
def udp_script_judges_the_servers_datagrams(env):
    port = udp_script_service(env, "usr", judge)
    srv = env.udp_server(port, echo=True)
    got, replies = send(env, srv, SRV4, port, [b"ask SECRET", b"ask"])
    check(got == [b"ask SECRET", b"ask"], "the server got %r", got)
    check(replies == [b"ask"], "the client got %r, expected the honest reply only", replies)


@test
def udp_script_edit_is_sent_with_its_lengths_and_checksums(env):
    """An edit (5.0.0's data =) goes on as the new bytes, longer or shorter: the IP and UDP
    lengths and checksums are made anew (the receiving kernel drops a datagram whose UDP
    checksum is wrong), over IPv4 and IPv6, in both directions."""
    port = udp_script_service(env, "ued", EDIT)
    srv = env.udp_server(port, echo=True)
    for host in (SRV4, SRV6):
        d = [b"plain", b"please EDIT me", b"CUT this long datagram short", b"plain again"]
        want = [b"plain", b"please edited, longer than it came me", b"cut", b"plain again"]
        got, replies = send(env, srv, host, port, d)
        check(got == want, "over %s the server got %r, expected %r", host, got, want)
        check(replies == want, "over %s the client got %r", host, replies)
    cnt = it.wait_until(lambda: (lambda f: f if f.get("edited", 0) >= 4 else None)(
        script_counters(env, "ued")["rewrite"]), timeout=5)
    check(cnt, "edited counter %r", script_counters(env, "ued"))


@test
def udp_script_stream_model_refused(env):
    _, port = env.service("ust", "udp")
    r = env.ctl_raw("script", "set", "ust", write(STREAM), json_out=False)
    check(r.returncode != 0, "a file taking HttpRequest was set on a UDP service")
    check("UDP" in r.stderr and "HttpRequest" in r.stderr and "wants_http" in r.stderr,
          "the refusal does not name the protocol, the model and the function: %s", r.stderr)
    check(env.ctl_raw("script", "show", "ust", json_out=False).returncode != 0,
          "a refused file was stored")
    # a backup that gives a UDP service such a function is refused the same way at import
    env.ctl("script", "set", "ust", write(EDIT))
    bk = os.path.join(env.tmp, "ust.json")
    check(env.ctl_raw("export", bk, json_out=False).returncode == 0, "export failed")
    with open(bk) as f:
        cfg = json.load(f)
    sc = [sv["script"] for sv in cfg["services"] if sv["name"] == "ust"][0]
    sc["functions"][0]["params"] = ["HttpRequest"]
    with open(bk, "w") as f:
        json.dump(cfg, f)
    r = env.ctl_raw("import", bk, json_out=False)
    check(r.returncode != 0 and "UDP" in r.stderr and "HttpRequest" in r.stderr,
          "the import took a stream model on a UDP service: %d %s", r.returncode, r.stderr)


if __name__ == "__main__":
    sys.exit(it.run_module("udp_scripts"))
