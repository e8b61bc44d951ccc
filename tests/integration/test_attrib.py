#!/usr/bin/python3
"""Integration: what fgex shows of a block names what happened (issue 24, item 9). The attacker
of an s2c block is the connection's client, not the vulnbox that sent the matching bytes: in the
event (src/sport the client, dst/dport the service), in `events --top src`, and in the pcap the
page's link asks for (`capture --pcap --blocked --src EVENT_SRC --filter ID`), which holds the
connection's packets with its real 5-tuple, on both layers, over TCP and UDP. `events` shows a
SEQ column that `events show SEQ` takes, and `history` names a `script set` (it said
`request 340`)."""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fgxit as it  # noqa: E402
from fgxit import CLI4, CLI6, EVIL, SRV4, SRV6, check, test  # noqa: E402

LEAK = b"flag=" + EVIL


def rdpcap(path):
    from scapy.all import rdpcap as rd  # noqa: PLC0415 - scapy is slow to import
    return rd(path)


def wait_event(env, svc, pred, timeout=4):
    got = it.wait_until(lambda: [e for e in env.ctl("events", svc) if pred(e)], timeout=timeout)
    check(got, "no event of %s within %ss: %r", svc, timeout, env.ctl("events", svc))
    check(len(got) == 1, "one block gave %d events: %r", len(got), got)
    return got[0]


def page_pcap_args(e):
    """The capture the page's pcap link of event e asks for (web/views/events.js)."""
    args = ["--src", e["src"]]
    if e["action"] == "block":
        args.append("--blocked")
    if e["filter_id"]:
        args += ["--filter", e["filter_id"]]
    return args


def flow_packets(pkts, proto, cli, cport, srv, sport):
    """The packets of the connection (cli:cport <-> srv:sport) in pkts, each way."""
    from scapy.all import IP, TCP, UDP, IPv6  # noqa: PLC0415
    L4 = TCP if proto == "tcp" else UDP
    up, down = [], []
    for p in pkts:
        ip = p[IP] if IP in p else p[IPv6] if IPv6 in p else None
        if ip is None or L4 not in p:
            continue
        t = (ip.src, p[L4].sport, ip.dst, p[L4].dport)
        if t == (cli, cport, srv, sport):
            up.append(p)
        elif t == (srv, sport, cli, cport):
            down.append(p)
    return up, down


def check_event_pcap(env, svc, e, proto, cli, cport, srv, sport, payload_s2c):
    fd, path = tempfile.mkstemp(suffix=".pcap")
    os.close(fd)
    doc = env.ctl("capture", svc, "--pcap", path, *page_pcap_args(e))
    check(doc["connections"] >= 1, "%s: the event's pcap is empty: %r", svc, doc)
    pkts = rdpcap(path)
    os.unlink(path)
    up, down = flow_packets(pkts, proto, cli, cport, srv, sport)
    check(up and down, "%s: the pcap lacks the connection %s:%d <-> %s:%d (%d packets)", svc,
          cli, cport, srv, sport, len(pkts))
    from scapy.all import Raw  # noqa: PLC0415
    got = b"".join(bytes(p[Raw].load) for p in down if Raw in p)
    check(payload_s2c in got, "%s: the server's blocked bytes are not in the pcap: %r", svc, got)


def s2c_tcp_block(env, name, extra, srv_addr, cli_addr):
    _, port = env.service(name, "tcp", extra=extra)
    fid = env.filter(name, dir="s2c")
    srv = env.tcp_server(port, reply=LEAK)
    c, sport = env.tcp_conn(srv_addr, port, [b"hello", ("read", 0.5)])
    check(LEAK not in c.get("received", b""), "%s: the leak reached the client: %r", name, c)
    e = wait_event(env, name, lambda x: sport in (x["sport"], x["dport"]))
    check(e["dir"] == "s2c" and e["filter_id"] == fid, "%s: event %r", name, e)
    check(e["src"] == cli_addr and e["sport"] == sport and e["dst"] == srv_addr and
          e["dport"] == port, "%s: the event names %s:%s -> %s:%s, not the client %s:%d -> %s:%d",
          name, e["src"], e["sport"], e["dst"], e["dport"], cli_addr, sport, srv_addr, port)
    top = env.ctl("events", name, "--top", "src")
    check([(r["src"], r["filter_id"], r["blocks"]) for r in top["rows"]] == [(cli_addr, fid, 1)],
          "%s: --top src names %r, not the client %s", name, top["rows"], cli_addr)
    check_event_pcap(env, name, e, "tcp", cli_addr, sport, srv_addr, port, LEAK)
    return e


@test
def s2c_block_names_the_client_nfqueue(env):
    s2c_tcp_block(env, "at-nfq", (), SRV4, CLI4)
    s2c_tcp_block(env, "at-nfq6", (), SRV6, CLI6)


@test
def s2c_block_names_the_client_proxy(env):
    s2c_tcp_block(env, "at-px", ("--layer", "proxy"), SRV4, CLI4)


@test
def c2s_block_pcap_link_finds_its_connection(env):
    for name, extra in (("at-c-nfq", ()), ("at-c-px", ("--layer", "proxy"))):
        _, port = env.service(name, "tcp", extra=extra)
        env.filter(name)
        srv = env.tcp_server(port, reply=b"WELCOME\n")
        c, sport = env.tcp_conn(SRV4, port, [b"LOGIN\n", ("read", 0.3), b"x " + EVIL, 0.3])
        check(c.get("end") == "reset" and c.get("received") == b"WELCOME\n",
              "%s: not blocked as expected: %r", name, c)
        check(EVIL not in b"".join(it.d64(x["data"]) for x in srv.all("data")),
              "%s: the attack reached the server", name)
        e = wait_event(env, name, lambda x: x["sport"] == sport)
        check(e["src"] == CLI4 and e["dir"] == "c2s", "%s: event %r", name, e)
        check_event_pcap(env, name, e, "tcp", CLI4, sport, SRV4, port, b"WELCOME\n")


@test
def udp_s2c_block_names_the_client(env):
    _, port = env.service("at-udp", "udp")
    fid = env.filter("at-udp", dir="s2c")
    env.udp_server(port, reply=LEAK)
    c = env.udp_client(SRV4, port, [b"ask"])
    check(not any(LEAK in r for r in c.get("replies", [])), "the leak reached the client: %r", c)
    e = wait_event(env, "at-udp", lambda x: x["filter_id"] == fid)
    check(e["dir"] == "s2c" and e["src"] == CLI4 and e["dst"] == SRV4 and e["dport"] == port,
          "udp event %r", e)
    top = env.ctl("events", "at-udp", "--top", "src")
    check([r["src"] for r in top["rows"]] == [CLI4], "udp --top src %r", top["rows"])
    check_event_pcap(env, "at-udp", e, "udp", CLI4, e["sport"], SRV4, port, LEAK)


@test
def events_table_has_seq_for_events_show(env):
    _, port = env.service("at-seq", "tcp")
    env.filter("at-seq")
    srv = env.tcp_server(port)
    c, sport = env.tcp_conn(SRV4, port, [b"x " + EVIL])
    it.assert_blocked(c, it.server_conn_of(srv, sport))
    e = wait_event(env, "at-seq", lambda x: x["sport"] == sport)
    p = env.ctl_raw("events", "at-seq", json_out=False)
    lines = p.stdout.splitlines()
    check(p.returncode == 0 and lines and lines[0].split()[0] == "SEQ",
          "events table has no SEQ column:\n%s", p.stdout)
    seqs = [ln.split()[0] for ln in lines[1:]]
    check(seqs == [str(e["seq"])], "SEQ cells %r, the event's seq %d", seqs, e["seq"])
    p = env.ctl_raw("events", "show", seqs[0], json_out=False)
    check(p.returncode == 0 and "evil1337" in p.stdout, "events show %s: %r %r", seqs[0],
          p.stdout[:300], p.stderr)


@test
def history_names_a_script_set(env):
    _, port = env.service("at-hist", "tcp", extra=("--layer", "proxy"))
    d = tempfile.mkdtemp(prefix="fgx-script-")
    path = os.path.join(d, "judge.py")
    with open(path, "w") as f:
        f.write("from firegex.nfproxy import pyfilter, REJECT\n"
                "from firegex.nfproxy.models import HttpRequestHeader\n\n"
                "@pyfilter\n"
                "def nothing(req: HttpRequestHeader):\n"
                "    return None\n")
    env.ctl("script", "set", "at-hist", path)
    whats = [c["what"] for c in env.ctl("history")]
    check(any(w.startswith("script set at-hist") for w in whats),
          "history does not name the script set: %r", whats[-5:])
    check(not any(w.startswith("request ") for w in whats), "history has a bare number: %r",
          whats)
    p = env.ctl_raw("history", json_out=False)
    check("script set at-hist" in p.stdout, "history text:\n%s", p.stdout)


if __name__ == "__main__":
    sys.exit(it.run_module("test_attrib"))
