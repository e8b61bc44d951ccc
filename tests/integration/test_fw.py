#!/usr/bin/python3
"""Integration: the firewall (fgexctl fw ...). Real TCP, UDP, ICMP and crafted packets between
the test's namespaces meet the rules controld compiled into its table inet fgex_fw: each rule
field, each option, first-match order, policies, reject answers, interface names, forwarding
through srv, confirm-or-revert, 10,000 rules, rule files, backups and restarts."""
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fgxit as it  # noqa: E402
from fgxit import CLI4, CLI6, CLI_IF, SRV4, SRV6, SRV_IF, check, test  # noqa: E402

CLI4B = "10.77.0.3"      # a second client address
SRV4B = "10.77.0.10"     # a second server address
FAR4 = "10.78.0.2"       # a host behind srv, for forwarded traffic
FAR_IF_S, FAR_IF_F = "fgxit-fs", "fgxit-ff"

PROBE = r"""
import socket, sys
kind, host, port, src, sport, t = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5]), float(sys.argv[6])
fam = socket.AF_INET6 if ":" in host else socket.AF_INET
s = socket.socket(fam, socket.SOCK_STREAM if kind == "tcp" else socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.settimeout(t)
if src != "-" or sport:
    s.bind((src if src != "-" else "", sport))
try:
    s.connect((host, port))
    if kind == "udp":
        s.send(b"probe")
        s.recv(100)
        print("reply")
    else:
        print("open")
except ConnectionRefusedError:
    print("refused")
except socket.timeout:
    print("timeout")
except PermissionError:
    print("eperm")  # the box's own packet dropped in its output hook
except OSError as e:
    print("error:%d" % e.errno)
"""


def probe(env, kind, host, port, ns=None, src=None, sport=0, t=1.0):
    """From ns (default cli): "open"/"reply", "refused" (RST or ICMP unreachable), "timeout"."""
    p = subprocess.run(["ip", "netns", "exec", ns or env.cli, it.PY, "-c", PROBE, kind, host,
                        str(port), src or "-", str(sport), str(t)],
                       capture_output=True, text=True, timeout=t + 10)
    return p.stdout.strip() or ("error:" + p.stderr.strip()[-200:])


def fw(env, *args):
    return env.ctl("fw", *args)


def fw_fails(env, *args):
    p = env.ctl_raw("fw", *args, json_out=False)
    check(p.returncode != 0, "fgexctl fw %s succeeded, expected a refusal", " ".join(args))
    return p


def reset(env):
    """Back to the defaults: no rules, accept policies, loopback and established on."""
    with tempfile.NamedTemporaryFile("w", suffix=".rules", delete=False) as f:
        f.write("# nothing\n")
    try:
        fw(env, "import", f.name)
    finally:
        os.unlink(f.name)
    for d in ("in", "out", "forward"):
        fw(env, "policy", "accept", "--dir", d)
    for opt, on in (("loopback", "on"), ("established", "on"), ("invalid", "off"),
                    ("icmp", "off"), ("dhcp", "off")):
        fw(env, "set", opt, on)
    fw(env, "enable")


def rule(env, *args):
    return fw(env, "rule", "add", *args)


def expect(env, kind, host, port, want, **kw):
    got = probe(env, kind, host, port, **kw)
    check(got == want, "%s to %s port %s (%r): %s, expected %s", kind, host, port, kw, got, want)


def E(kind, host, port, want, **kw):
    """One probe of expect_all: expect's arguments."""
    return kind, host, port, want, kw


def expect_all(env, *cases):
    """expect for every case (E(...)), the probes at once: each has its own socket and port,
    so a "timeout" costs its wait once for the lot, not once each."""
    procs = []
    for kind, host, port, want, kw in cases:
        t = kw.get("t", 1.0)
        procs.append(subprocess.Popen(
            ["ip", "netns", "exec", kw.get("ns") or env.cli, it.PY, "-c", PROBE, kind, host,
             str(port), kw.get("src") or "-", str(kw.get("sport", 0)), str(t)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    bad = []
    for (kind, host, port, want, kw), pr in zip(cases, procs):
        try:
            so, se = pr.communicate(timeout=kw.get("t", 1.0) + 10)
        except subprocess.TimeoutExpired:
            pr.kill()
            so, se = pr.communicate()
        got = so.strip() or ("error:" + se.strip()[-200:])
        if got != want:
            bad.append("%s to %s port %s (%r): %s, expected %s" % (kind, host, port, kw, got,
                                                                   want))
    check(not bad, "%s", "; ".join(bad))


def ports(env, n):
    return [env.port() for _ in range(n)]


def servers(env):
    """Four TCP listeners and two UDP echo servers in srv, on fresh ports."""
    tcp, udp = ports(env, 4), ports(env, 2)
    for p in tcp:
        env.tcp_server(p, idle=30)
    for p in udp:
        env.udp_server(p, echo=True)
    return tcp, udp


def setup(env):
    sh = it.sh
    sh("ip", "-n", env.cli, "addr", "add", CLI4B + "/24", "dev", CLI_IF)
    sh("ip", "-n", env.srv, "addr", "add", SRV4B + "/24", "dev", SRV_IF)
    # a third namespace behind srv, reached through it (forwarding)
    env.far = env.srv[:-2] + "-f"
    sh("ip", "netns", "add", env.far)
    env.ns_made.append(env.far)
    sh("ip", "-n", env.srv, "link", "add", FAR_IF_S, "type", "veth", "peer", "name", FAR_IF_F,
       "netns", env.far)
    sh("ip", "-n", env.srv, "addr", "add", "10.78.0.1/24", "dev", FAR_IF_S)
    sh("ip", "-n", env.far, "addr", "add", FAR4 + "/24", "dev", FAR_IF_F)
    for ns, ifn in ((env.srv, FAR_IF_S), (env.far, FAR_IF_F), (env.far, "lo")):
        sh("ip", "-n", ns, "link", "set", ifn, "up")
    sh("ip", "-n", env.far, "route", "add", "default", "via", "10.78.0.1")
    sh("ip", "-n", env.cli, "route", "add", "10.78.0.0/24", "via", SRV4)
    sh("ip", "netns", "exec", env.srv, "sysctl", "-qw", "net.ipv4.ip_forward=1")


# ---- rule fields ------------------------------------------------------------------------------

@test
def fw_dport_and_proto(env):
    reset(env)
    (ta, tb, _, _), (ua, _) = servers(env)
    rule(env, "--proto", "tcp", "--dport", ta, "--action", "drop")
    rule(env, "--proto", "udp", "--dport", ua, "--action", "drop")
    expect_all(env,
               E("tcp", SRV4, ta, "timeout"),
               E("tcp", SRV6, ta, "timeout"),
               E("tcp", SRV4, tb, "open"),
               E("udp", SRV4, ua, "timeout"))
    # a TCP rule says nothing about UDP on the same port, and the other way round
    reset(env)
    rule(env, "--proto", "udp", "--dport", ta, "--action", "drop")
    rule(env, "--proto", "tcp", "--dport", ua, "--action", "drop")
    expect_all(env,
               E("tcp", SRV4, ta, "open"),
               E("udp", SRV4, ua, "reply"))
    # a port range, and "both" (the default with a port)
    reset(env)
    rule(env, "--dport", "%d-%d" % (min(ta, tb), max(ta, tb)), "--action", "drop")
    expect_all(env,
               E("tcp", SRV4, ta, "timeout"),
               E("tcp", SRV4, tb, "timeout"),
               E("udp", SRV4, ua, "reply"))


@test
def fw_source_and_destination_addresses(env):
    reset(env)
    (ta, _, _, _), _ = servers(env)
    rule(env, "--src", CLI4B, "--action", "drop")
    expect_all(env,
               E("tcp", SRV4, ta, "open", src=CLI4),
               E("tcp", SRV4, ta, "timeout", src=CLI4B),
               E("tcp", SRV6, ta, "open"))  # an IPv4 rule leaves IPv6 alone
    reset(env)
    rule(env, "--src", "10.77.0.2/31", "--action", "drop")  # .2 and .3
    expect_all(env,
               E("tcp", SRV4, ta, "timeout", src=CLI4),
               E("tcp", SRV4, ta, "timeout", src=CLI4B))
    reset(env)
    rule(env, "--dst", SRV4B, "--proto", "tcp", "--dport", ta, "--action", "drop")
    expect_all(env,
               E("tcp", SRV4B, ta, "timeout"),
               E("tcp", SRV4, ta, "open"))
    reset(env)
    rule(env, "--src", CLI6, "--action", "drop")
    expect_all(env,
               E("tcp", SRV6, ta, "timeout"),
               E("tcp", SRV4, ta, "open"))


@test
def fw_source_port(env):
    reset(env)
    (ta, _, _, _), _ = servers(env)
    rule(env, "--proto", "tcp", "--sport", "41000-41099", "--action", "drop")
    expect_all(env,
               E("tcp", SRV4, ta, "timeout", sport=41050),
               E("tcp", SRV4, ta, "open", sport=41100),
               E("tcp", SRV4, ta, "timeout", sport=41000),
               E("tcp", SRV4, ta, "open", sport=40999))


@test
def fw_interface_names(env):
    reset(env)
    (ta, _, _, _), _ = servers(env)
    rule(env, "--src", SRV_IF, "--proto", "tcp", "--dport", ta, "--action", "drop")
    expect_all(env,
               E("tcp", SRV4, ta, "timeout"),
               E("tcp", SRV6, ta, "timeout"))
    reset(env)
    rule(env, "--src", "nope0", "--action", "drop")
    expect(env, "tcp", SRV4, ta, "open")
    reset(env)
    rule(env, "--src", "fgxit-*", "--action", "drop")  # every name that starts so
    expect(env, "tcp", SRV4, ta, "timeout")
    # an incoming packet has no output interface yet: refused with the reason
    p = fw_fails(env, "rule", "add", "--dst", SRV_IF, "--action", "drop")
    check("output interface" in p.stderr, "refusal says why: %r", p.stderr)


@test
def fw_direction_out(env):
    reset(env)
    port = env.port()
    env.udp_server(port, echo=True, ns=env.cli)
    expect(env, "udp", CLI4, port, "reply", ns=env.srv)
    rule(env, "--dir", "out", "--proto", "udp", "--dst", CLI4, "--dport", port, "--action", "drop")
    expect(env, "udp", CLI4, port, "eperm", ns=env.srv)
    # the same rule for "in" does not touch what the box sends
    reset(env)
    rule(env, "--dir", "in", "--proto", "udp", "--dport", port, "--action", "drop")
    expect(env, "udp", CLI4, port, "reply", ns=env.srv)
    reset(env)
    rule(env, "--dir", "out", "--dst", SRV_IF, "--proto", "udp", "--action", "drop")
    expect(env, "udp", CLI4, port, "eperm", ns=env.srv)


@test
def fw_direction_forward(env):
    reset(env)
    port = env.port()
    env.tcp_server(port, idle=10, ns=env.far)
    expect(env, "tcp", FAR4, port, "open")
    rule(env, "--dir", "forward", "--dst", FAR4, "--proto", "tcp", "--dport", port,
         "--action", "drop")
    expect(env, "tcp", FAR4, port, "timeout")
    # forwarded packets do not pass the input chain
    reset(env)
    rule(env, "--dir", "in", "--dport", port, "--action", "drop")
    expect(env, "tcp", FAR4, port, "open")
    # both interfaces of a forwarded packet
    reset(env)
    rule(env, "--dir", "forward", "--src", SRV_IF, "--dst", FAR_IF_S, "--action", "reject")
    expect(env, "tcp", FAR4, port, "refused")
    # a drop policy with one port let through: the replies pass as established
    reset(env)
    rule(env, "--dir", "forward", "--src", SRV_IF, "--proto", "tcp", "--dport", port,
         "--action", "accept")
    fw(env, "policy", "drop", "--dir", "forward")
    expect(env, "tcp", FAR4, port, "open")
    fw(env, "set", "established", "off")
    expect(env, "tcp", FAR4, port, "timeout")


# ---- actions, order, policy ---------------------------------------------------------------------

@test
def fw_reject_answers_rst_and_icmp(env):
    reset(env)
    (ta, _, _, _), (ua, _) = servers(env)
    rule(env, "--dport", ta, "--proto", "tcp", "--action", "reject")
    rule(env, "--dport", ua, "--proto", "udp", "--action", "reject")
    t0 = time.monotonic()
    # one after another: together they answer within 2.5 s
    expect(env, "tcp", SRV4, ta, "refused", t=3.0)
    expect(env, "tcp", SRV6, ta, "refused", t=3.0)
    expect(env, "udp", SRV4, ua, "refused", t=3.0)
    expect(env, "udp", SRV6, ua, "refused", t=3.0)
    check(time.monotonic() - t0 < 2.5, "the rejects answered at once, not after a timeout")


@test
def fw_first_match_order(env):
    reset(env)
    (ta, tb, _, _), _ = servers(env)
    doc = rule(env, "--name", "all", "--proto", "tcp", "--action", "drop")
    doc = rule(env, "--name", "web", "--proto", "tcp", "--dport", ta, "--action", "accept")
    names = [r["name"] for r in doc["rules"]]
    check(names == ["all", "web"], "order %r", names)
    expect(env, "tcp", SRV4, ta, "timeout")  # the drop comes first
    doc = fw(env, "rule", "move", "web", "1")
    check([r["name"] for r in doc["rules"]] == ["web", "all"], "after move: %r", doc["rules"])
    expect_all(env,
               E("tcp", SRV4, ta, "open"),
               E("tcp", SRV4, tb, "timeout"))
    # --at puts a rule before the others
    rule(env, "--name", "rej", "--proto", "tcp", "--dport", ta, "--action", "reject", "--at", "1")
    expect(env, "tcp", SRV4, ta, "refused")
    fw(env, "rule", "disable", "rej")
    expect(env, "tcp", SRV4, ta, "open")
    fw(env, "rule", "enable", "rej")
    expect(env, "tcp", SRV4, ta, "refused")
    doc = fw(env, "rule", "rm", "rej")
    check([r["name"] for r in doc["rules"]] == ["web", "all"], "after rm: %r", doc["rules"])
    expect(env, "tcp", SRV4, ta, "open")


@test
def fw_policy_drop_with_an_allowed_port(env):
    reset(env)
    (ta, tb, _, _), (ua, ub) = servers(env)
    rule(env, "--proto", "tcp", "--dport", ta, "--action", "accept")
    rule(env, "--proto", "udp", "--dport", ua, "--action", "accept")
    fw(env, "policy", "drop")
    expect_all(env,
               E("tcp", SRV4, ta, "open"),
               E("tcp", SRV6, ta, "open"),
               E("udp", SRV4, ua, "reply"),
               E("tcp", SRV4, tb, "timeout"),
               E("udp", SRV4, ub, "timeout"))
    fw(env, "policy", "accept")
    expect(env, "tcp", SRV4, tb, "open")


# ---- options ---------------------------------------------------------------------------------------

@test
def fw_option_loopback(env):
    reset(env)
    (ta, _, _, _), _ = servers(env)
    fw(env, "policy", "drop")
    expect(env, "tcp", "127.0.0.1", ta, "open", ns=env.srv)
    fw(env, "set", "loopback", "off")
    expect(env, "tcp", "127.0.0.1", ta, "timeout", ns=env.srv)
    # the local CLI talks over a unix socket: still answered
    check(fw(env, "list")["options"]["loopback"] is False, "loopback shows off")


@test
def fw_option_established(env):
    reset(env)
    (ta, _, _, _), _ = servers(env)
    rule(env, "--proto", "tcp", "--dport", ta, "--action", "accept")
    fw(env, "policy", "drop", "--dir", "out")
    fw(env, "policy", "drop", "--dir", "in")
    expect(env, "tcp", SRV4, ta, "open")  # the SYN-ACK leaves as part of an accepted connection
    fw(env, "set", "established", "off")
    expect(env, "tcp", SRV4, ta, "timeout")


ECHO = r"""
import sys
from scapy.all import IP, IPv6, ICMP, ICMPv6EchoRequest, sr1, conf
conf.verb = 0
h = sys.argv[1]
pkt = IPv6(dst=h) / ICMPv6EchoRequest(id=int(sys.argv[2])) if ":" in h else IP(dst=h) / ICMP(id=int(sys.argv[2]))
print("answer" if sr1(pkt, timeout=1) is not None else "none")
"""


@test
def fw_option_icmp(env):
    reset(env)
    fw(env, "policy", "drop")
    ident = [7000]

    def ping(*hosts):
        """Whether each host answered an echo request; the probes (own ids) go at once."""
        procs = []
        for host in hosts:
            ident[0] += 1
            procs.append(subprocess.Popen(["ip", "netns", "exec", env.cli, it.PY, "-c", ECHO,
                                           host, str(ident[0])], stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True))
        answered = []
        for p in procs:
            so, se = p.communicate(timeout=20)
            out = so.strip()
            check(out in ("answer", "none"), "the echo probe failed: %s", se[-300:])
            answered.append(out == "answer")
        return answered
    v4, v6 = ping(SRV4, SRV6)
    check(not v4, "ping passed a drop policy")
    check(not v6, "ping6 passed a drop policy")
    fw(env, "set", "icmp", "on")
    v4, v6 = ping(SRV4, SRV6)
    check(v4, "ping did not pass with icmp on")
    check(v6, "ping6 did not pass with icmp on")


@test
def fw_option_dhcp(env):
    reset(env)
    srv = env.udp_server(67, echo=True)
    fw(env, "policy", "drop")
    expect(env, "udp", SRV4, 67, "timeout", sport=68)
    fw(env, "set", "dhcp", "on")
    expect(env, "udp", SRV4, 67, "reply", sport=68)
    check(len(it.dgrams(srv)) == 1, "the server saw the second datagram only")


@test
def fw_option_invalid(env):
    reset(env)
    port = env.port()  # nothing listens: the kernel answers a SYN with a reset
    code = r"""
import sys
from scapy.all import IP, TCP, sr1, conf
conf.verb = 0
r = sr1(IP(dst=sys.argv[1]) / TCP(sport=int(sys.argv[3]), dport=int(sys.argv[2]), flags="SF"), timeout=1)
print("answer" if r is not None else "none")
"""

    def synfin(sport):
        p = subprocess.run(["ip", "netns", "exec", env.cli, it.PY, "-c", code, SRV4, str(port),
                            str(sport)], capture_output=True, text=True, timeout=20)
        return p.stdout.strip() or p.stderr.strip()[-200:]
    # conntrack takes SYN+FIN for invalid
    check(synfin(42001) == "answer", "without the option the kernel answers SYN+FIN")
    fw(env, "set", "invalid", "on")
    check(synfin(42002) == "none", "with the option the invalid packet is dropped")


# ---- the module as a whole ---------------------------------------------------------------------

@test
def fw_disable_removes_its_rules(env):
    reset(env)
    (ta, _, _, _), _ = servers(env)
    rule(env, "--proto", "tcp", "--dport", ta, "--action", "drop")

    def tables():
        return it.sh("ip", "netns", "exec", env.srv, "nft", "list", "tables").stdout
    check("inet fgex_fw" in tables(), "the table is there")
    expect(env, "tcp", SRV4, ta, "timeout")
    doc = fw(env, "disable")
    check(doc["enabled"] is False and doc["state"]["mode"] == "off", "off: %r", doc["state"])
    check("fgex_fw" not in tables(), "disable leaves the table: %s", tables())
    expect(env, "tcp", SRV4, ta, "open")
    fw(env, "enable")
    expect(env, "tcp", SRV4, ta, "timeout")
    check(len(fw(env, "list")["rules"]) == 1, "the rule was kept while off")


@test
def fw_confirm_or_revert(env):
    reset(env)
    (ta, tb, _, _), _ = servers(env)
    rule(env, "--proto", "tcp", "--dport", ta, "--action", "accept")
    doc = fw(env, "policy", "drop", "--confirm", "2")
    check(doc["state"]["pending_secs"] in (1, 2), "pending: %r", doc["state"])
    expect(env, "tcp", SRV4, tb, "timeout")
    it.wait_until(lambda: fw(env, "list")["policy"]["in"] == "accept", timeout=5)
    doc = fw(env, "list")
    check(doc["policy"]["in"] == "accept" and doc["state"]["pending_secs"] == 0,
          "not reverted: %r", doc)
    expect(env, "tcp", SRV4, tb, "open")
    # confirmed in time (the shortest deadline: the very next command confirms), it stays
    # past its deadline
    fw(env, "policy", "drop", "--confirm", "1")
    fw(env, "confirm")
    time.sleep(1.5)
    check(fw(env, "list")["policy"]["in"] == "drop", "a confirmed change was reverted")
    expect(env, "tcp", SRV4, tb, "timeout")
    fw_fails(env, "confirm")  # nothing waits any more
    # a whole file applied with a deadline goes back to the list before it
    with tempfile.NamedTemporaryFile("w", suffix=".rules", delete=False) as f:
        f.write("--proto tcp --dport %d --action drop\n" % ta)
    try:
        fw(env, "apply", f.name, "--confirm", "2")
        expect(env, "tcp", SRV4, ta, "timeout")
        it.wait_until(lambda: len(fw(env, "list")["rules"]) == 1 and
                      fw(env, "list")["rules"][0]["action"] == "accept", timeout=5)
        expect(env, "tcp", SRV4, ta, "open")
    finally:
        os.unlink(f.name)


def chain_policy(env, chain="input"):
    """The policy of the firewall's base chain as the kernel holds it (None: no table)."""
    r = subprocess.run(["ip", "netns", "exec", env.srv, "nft", "list", "chain", "inet", "fgex_fw",
                        chain], capture_output=True, text=True)
    if r.returncode:
        return None
    return "drop" if "policy drop;" in r.stdout else "accept"


@test
def fw_confirm_reverts_on_time_without_controld(env):
    """The revert of an unconfirmed change fires on time when controld is SIGKILLed in the
    window, and when it is stopped (hung) through the deadline: the window's watchdog writes
    the old rules; the peer reaches the port again."""
    reset(env)
    (ta, tb, _, _), _ = servers(env)
    rule(env, "--proto", "tcp", "--dport", ta, "--action", "accept")
    for how in ("kill", "hang"):
        t0 = time.monotonic()
        fw(env, "policy", "drop", "--confirm", "3")
        check(chain_policy(env) == "drop", "%s: the change is not in force", how)
        expect(env, "tcp", SRV4, tb, "timeout", t=0.5)
        pid = env.controld.pid
        if how == "kill":
            env.stop_controld(signal.SIGKILL)
        else:
            os.kill(pid, signal.SIGSTOP)
        try:
            back = it.wait_until(lambda: chain_policy(env) == "accept", timeout=8, step=0.1)
            took = time.monotonic() - t0
            check(back, "%s: the chain still says policy drop %.1f s after --confirm 3", how,
                  took)
            check(took < 4.5, "%s: reverted %.1f s after --confirm 3", how, took)
            expect_all(env,
                       E("tcp", SRV4, tb, "open"),
                       E("tcp", SRV4, ta, "open"))
        finally:
            if how == "hang":
                os.kill(pid, signal.SIGCONT)
        if how == "kill":
            env.start_controld()
        # controld (restarted, or woken) agrees: the change is gone from the store too
        it.wait_until(lambda: fw(env, "list")["state"]["pending_secs"] == 0, timeout=5)
        doc = fw(env, "list")
        check(doc["policy"]["in"] == "accept" and doc["state"]["pending_secs"] == 0,
              "%s: controld still holds the change: %r", how, doc["policy"])
        expect(env, "tcp", SRV4, tb, "open")
    # a confirmed window's watchdog stands down: the change outlives its deadline
    fw(env, "policy", "drop", "--confirm", "1")
    fw(env, "confirm")
    time.sleep(2.0)
    check(chain_policy(env) == "drop", "a confirmed change was reverted in the kernel")
    left = [f for f in os.listdir(env.run_dir) if f.startswith("fw-watchdog")]
    check(not left, "the watchdog's pid file stayed: %r", left)
    reset(env)


@test
def fw_unconfirmed_change_reverted_at_restart(env):
    reset(env)
    fw(env, "policy", "drop", "--confirm", "600")
    env.stop_controld()
    env.start_controld()
    doc = fw(env, "list")
    check(doc["policy"]["in"] == "accept", "an unconfirmed change survived a restart: %r",
          doc["policy"])


@test
def fw_change_in_a_window_is_refused_not_undone(env):
    """A change without --confirm while another change's window is open is refused, saying
    so (its revert would undo it); one with --confirm joins the window; once the window is
    confirmed, the change goes in and outlives the old deadline."""
    reset(env)
    (ta, tb, _, _), _ = servers(env)
    rule(env, "--proto", "tcp", "--dport", tb, "--action", "drop", "--confirm", "3")
    p = fw_fails(env, "rule", "add", "--src", CLI4B, "--action", "drop")
    check("waits for confirmation" in p.stderr and "fw confirm" in p.stderr,
          "the refusal does not say a window is open: %r", p.stderr)
    check(len(fw(env, "list")["rules"]) == 1, "the refused change was stored")
    expect(env, "tcp", SRV4, ta, "open", src=CLI4B)
    fw(env, "confirm")
    rule(env, "--src", CLI4B, "--action", "drop")
    time.sleep(3.5)  # past the first change's deadline
    doc = fw(env, "list")
    check(len(doc["rules"]) == 2, "a change made after the confirm went: %r", doc["rules"])
    expect_all(env,
               E("tcp", SRV4, ta, "timeout", src=CLI4B),
               E("tcp", SRV4, ta, "open", src=CLI4),
               E("tcp", SRV4, tb, "timeout", src=CLI4, t=0.5))
    # a change with --confirm in the window joins it: both go at its deadline
    reset(env)
    fw(env, "policy", "drop", "--confirm", "2")
    rule(env, "--src", CLI4B, "--action", "drop", "--confirm", "2")
    it.wait_until(lambda: fw(env, "list")["state"]["pending_secs"] == 0, timeout=5)
    doc = fw(env, "list")
    check(doc["policy"]["in"] == "accept" and doc["rules"] == [], "not both reverted: %r", doc)
    expect(env, "tcp", SRV4, ta, "open", src=CLI4B)


@test
def fw_stays_in_force_while_controld_is_stopped(env):
    """SIGTERM (make stop, systemctl stop) and a crash alike leave the firewall table in
    force until controld starts again; the services' table goes (they fail open or closed by
    their own setting)."""
    reset(env)
    (ta, tb, _, _), _ = servers(env)
    rule(env, "--proto", "tcp", "--dport", ta, "--action", "drop")
    for sig in (signal.SIGTERM, signal.SIGKILL):
        env.stop_controld(sig)
        r = subprocess.run(["ip", "netns", "exec", env.srv, "nft", "list", "table", "inet",
                            "fgex_fw"], capture_output=True, text=True)
        check(r.returncode == 0, "signal %d: the firewall table went with controld: %s", sig,
              r.stderr)
        expect_all(env,
                   E("tcp", SRV4, ta, "timeout", t=0.5),
                   E("tcp", SRV4, tb, "open"))
        env.start_controld()
        expect_all(env,
                   E("tcp", SRV4, ta, "timeout", t=0.5),
                   E("tcp", SRV4, tb, "open"))
    # `fw disable` is how it goes
    fw(env, "disable")
    expect(env, "tcp", SRV4, ta, "open")
    reset(env)


@test
def fw_rules_survive_restart(env):
    reset(env)
    (ta, _, _, _), _ = servers(env)
    rule(env, "--name", "keep", "--proto", "tcp", "--dport", ta, "--action", "reject")
    env.stop_controld()
    env.start_controld()
    doc = fw(env, "list")
    check([r["name"] for r in doc["rules"]] == ["keep"], "after restart: %r", doc["rules"])
    expect(env, "tcp", SRV4, ta, "refused")


@test
def fw_control_port_stays_reachable(env):
    reset(env)
    cport, wport = env.port(), env.port()
    env.stop_controld()
    env.start_controld(extra_args=["--listen", "tls+tcp://0.0.0.0:%d" % cport,
                                   "--web-listen", "0.0.0.0:%d" % wport,
                                   "--allow", CLI4 + "/32"] + env.controld_args)
    try:
        rule(env, "--proto", "tcp", "--dport", cport, "--action", "drop")
        rule(env, "--proto", "tcp", "--dport", wport, "--action", "drop")
        fw(env, "policy", "drop")
        fw(env, "set", "loopback", "off")
        # the remote control's port and the dashboard's
        expect_all(env, *[p for port in (cport, wport) for p in (
            E("tcp", SRV4, port, "open", src=CLI4),
            E("tcp", SRV4, port, "timeout", src=CLI4B),  # not an --allow peer
            E("tcp", "127.0.0.1", port, "open", ns=env.srv))])
    finally:
        reset(env)
        env.stop_controld()
        env.start_controld()


def forget_neighbours(env):
    """Both namespaces' neighbour caches empty (the static entries Env makes go too): the next
    packet each way needs neighbour discovery (IPv6) or ARP (IPv4) first."""
    for ns, ifn, peers in ((env.srv, SRV_IF, (CLI4, CLI6)), (env.cli, CLI_IF, (SRV4, SRV6))):
        for a in peers:
            it.sh("ip", "-n", ns, "neigh", "del", a, "dev", ifn, check=False)
        it.sh("ip", "-n", ns, "neigh", "flush", "dev", ifn)
        out = it.sh("ip", "-n", ns, "neigh", "show", "dev", ifn).stdout
        check("lladdr" not in out, "a neighbour is still known in %s: %r", ns, out)


def static_neighbours(env):
    """Env's static neighbour entries back."""
    mac = {ns: json.loads(it.sh("ip", "-n", ns, "-j", "link", "show", ifn).stdout)[0]["address"]
           for ns, ifn in ((env.srv, SRV_IF), (env.cli, CLI_IF))}
    for ns, ifn, peers, other in ((env.srv, SRV_IF, (CLI4, CLI6), env.cli),
                                  (env.cli, CLI_IF, (SRV4, SRV6), env.srv)):
        for a in peers:
            it.sh("ip", "-n", ns, "neigh", "replace", a, "lladdr", mac[other], "dev", ifn, "nud",
                  "permanent")


@test
def fw_guard_holds_on_ipv6_after_a_neighbour_flush(env):
    """Under a drop policy with icmp off, an IPv6 --allow peer still reaches the control port
    once both neighbour caches are flushed: neighbour discovery (ICMPv6 133-136) passes, before
    the rules; so does ARP for an IPv4 peer (an inet table never sees ARP)."""
    reset(env)
    cport = env.port()
    env.stop_controld()
    env.start_controld(extra_args=["--listen", "tls+tcp://[::]:%d" % cport,
                                   "--allow", CLI6 + "/128", "--allow", CLI4 + "/32"] +
                       env.controld_args)
    try:
        fw(env, "policy", "drop")
        fw(env, "set", "loopback", "off")
        forget_neighbours(env)
        expect_all(env,
                   E("tcp", SRV6, cport, "open", t=4.0),
                   E("tcp", SRV4, cport, "open", src=CLI4, t=4.0))
        # the rule list cannot take it away either
        rule(env, "--src", CLI6, "--action", "drop")
        rule(env, "--proto", "any", "--action", "drop")
        forget_neighbours(env)
        expect_all(env,
                   E("tcp", SRV6, cport, "open", t=4.0),
                   E("tcp", SRV4, cport, "open", src=CLI4, t=4.0),
                   E("tcp", SRV4, cport, "timeout", src=CLI4B))  # not an --allow peer
    finally:
        static_neighbours(env)
        reset(env)
        env.stop_controld()
        env.start_controld()


@test
def fw_lets_fgex_own_connections_out(env):
    """A drop policy on what the box sends: the proxy's own connection to the service (marked by
    fgex) still goes out, so a proxy-layer service keeps working under it."""
    reset(env)
    _, port = env.service("fw-px", "tcp", extra=("--layer", "proxy"))
    try:
        srv = env.tcp_server(port)
        rule(env, "--proto", "tcp", "--dport", port, "--action", "accept")
        fw(env, "policy", "drop")
        fw(env, "policy", "drop", "--dir", "out")
        fw(env, "set", "loopback", "off")  # the upstream connection goes by lo otherwise
        c = env.tcp_client(SRV4, port, [b"through the proxy"])
        it.assert_passed(c, it.server_conn(srv, 1), b"through the proxy")
        # and a port no rule opens stays shut
        expect(env, "tcp", SRV4, env.port(), "timeout")
    finally:
        env.ctl("service", "rm", "--yes", "fw-px")
        reset(env)


def nft_dump(env):
    """The firewall table as the kernel lists it, in a canonical order (None: no table)."""
    r = subprocess.run(["ip", "netns", "exec", env.srv, "nft", "-j", "list", "table", "inet",
                        "fgex_fw"], capture_output=True, text=True)
    if r.returncode:
        return None
    out = []
    for o in json.loads(r.stdout)["nftables"]:
        if "map" in o:
            m = o["map"]
            out.append("map %s %s %s" % (m["name"], m.get("flags"),
                                         json.dumps(m.get("elem", []), sort_keys=True)))
        elif "rule" in o:
            out.append("rule %s %s" % (o["rule"]["chain"],
                                       json.dumps(o["rule"]["expr"], sort_keys=True)))
        elif "chain" in o:
            out.append("chain %s %s" % (o["chain"]["name"], o["chain"].get("policy")))
    return sorted(out)


@test
def fw_changes_by_difference_equal_a_rebuild(env):
    """Random adds, removes, moves and toggles of overlapping rules (ports, port ranges,
    prefixes, interfaces, IPv6): after each change, sent as a difference, the kernel's table is
    the one a full rebuild writes, and no difference was refused."""
    reset(env)
    rnd = random.Random(17)

    def rand_rule():
        k = rnd.random()
        if k < 0.3:
            a = ["--proto", "tcp", "--dport", rnd.randint(1, 40)]
        elif k < 0.5:
            lo = rnd.randint(1, 40)
            a = ["--proto", "udp", "--dport", "%d-%d" % (lo, lo + rnd.randint(0, 10))]
        elif k < 0.7:
            a = ["--src", "10.0.%d.0/24" % rnd.randint(0, 3)]
        elif k < 0.8:
            a = ["--src", "10.%d.0.0/16" % rnd.randint(0, 2), "--dport", rnd.randint(1, 30)]
        elif k < 0.9:
            a = ["--src", rnd.choice(["eth0", "eth1", "veth*"])]
        else:
            a = ["--dst", "fd00::%x" % rnd.randint(1, 5)]
        return a + ["--action", rnd.choice(["accept", "drop", "reject"])]
    offset = os.path.getsize(env.log_path)
    n = 0
    for step in range(40):
        op = rnd.random()
        if op < 0.55 or n == 0:
            doc = rule(env, *rand_rule(), "--at", rnd.randint(1, n + 1))
        elif op < 0.8:
            doc = fw(env, "rule", "rm", rnd.choice(fw(env, "list")["rules"])["id"])
        elif op < 0.9:
            rs = fw(env, "list")["rules"]
            doc = fw(env, "rule", "move", rnd.choice(rs)["id"], rnd.randint(1, len(rs)))
        else:
            doc = fw(env, "rule", rnd.choice(["enable", "disable"]),
                     rnd.choice(fw(env, "list")["rules"])["id"])
        n = len(doc["rules"])
        inc = nft_dump(env)
        fw(env, "disable")
        fw(env, "enable")
        full = nft_dump(env)
        check(inc == full, "step %d: the table after the difference is not the rebuilt one:\n%s",
              step, "\n".join(sorted(set(inc or []) ^ set(full or [])))[:1500])
    with open(env.log_path, errors="replace") as f:
        f.seek(offset)
        refused = [line for line in f if "refused" in line]
    check(not refused, "the kernel refused differences:\n%s", "".join(refused[:5]))
    reset(env)


@test
def fw_ten_thousand_rules_last_one_matches(env):
    reset(env)
    (ta, tb, _, _), (ua, _) = servers(env)
    n = 10000
    with tempfile.NamedTemporaryFile("w", suffix=".rules", delete=False) as f:
        f.write("# 9,999 misses, then the rule that matches\n")
        for i in range(n - 1):
            f.write("--proto tcp --dport %d --action drop\n" % (33000 + 2 * i))
        f.write("--proto tcp --dport %d --action reject\n" % ta)
    try:
        t0 = time.monotonic()
        doc = fw(env, "import", f.name)
        took = time.monotonic() - t0
    finally:
        os.unlink(f.name)
    check(len(doc["rules"]) == n, "%d rules stored", len(doc["rules"]))
    st = doc["state"]
    import_compile_ms = st["compile_us"] / 1000.0
    check(st["lookups"] <= 3, "a packet costs %d lookups", st["lookups"])
    check(st["compile_us"] < 1000000, "compiling took %d us", st["compile_us"])
    expect_all(env,
               E("tcp", SRV4, ta, "refused"),   # matched by the last rule
               E("tcp", SRV4, tb, "open"),      # matched by none
               E("udp", SRV4, ua, "reply"),
               E("tcp", SRV4, 33000 + 2 * 17, "timeout", t=0.5))  # a drop rule, no listener
    # one more rule: a few elements, not the list again
    doc = rule(env, "--proto", "tcp", "--dport", tb, "--action", "drop", "--at", "1")
    st = doc["state"]
    check(st["elements_changed"] <= 8, "adding one rule sent %d elements", st["elements_changed"])
    check(st["apply_us"] < 100000, "adding one rule to 10,000 took %d us in the kernel",
          st["apply_us"])
    expect(env, "tcp", SRV4, tb, "timeout")
    sys.stdout.write("    (10,000 rules: import %.2f s, compile %.1f ms; one more: compile %.1f ms, "
                     "kernel %.1f ms)\n" % (took, import_compile_ms, st["compile_us"] / 1000.0,
                                            st["apply_us"] / 1000.0))


FLOOD = r"""
import socket, sys, time
hosts, port, n, secs = sys.argv[1].split(","), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
socks = []
for h in hosts:
    for _ in range(n):
        s = socket.socket(socket.AF_INET6 if ":" in h else socket.AF_INET, socket.SOCK_DGRAM)
        s.setblocking(False)
        s.connect((h, port))
        socks.append(s)
sent, end = 0, time.monotonic() + secs
while time.monotonic() < end:
    for s in socks:
        try:
            s.send(b"flood")
            sent += 1
        except OSError:
            pass
print(sent)
"""


def switch_files(port, rnd):
    """Two rule files that both drop UDP to port, at different places among other rules (ports,
    ranges, prefixes, IPv6; one with an accept for a checker's address before the drop)."""
    def others(k):
        out = []
        for _ in range(k):
            c = rnd.random()
            if c < 0.35:
                out.append("--proto udp --dport %d --action drop" % rnd.randint(20000, 29999))
            elif c < 0.6:
                lo = rnd.randint(30000, 39000)
                out.append("--proto tcp --dport %d-%d --action %s" %
                           (lo, lo + rnd.randint(1, 50), rnd.choice(["accept", "drop"])))
            elif c < 0.8:
                out.append("--src 10.%d.%d.0/24 --action %s" % (rnd.randint(100, 200),
                                                               rnd.randint(0, 255),
                                                               rnd.choice(["accept", "reject"])))
            else:
                out.append("--proto udp --src fd%02x::%x --dport %d --action accept" %
                           (rnd.randint(0, 99), rnd.randint(1, 999), rnd.randint(1, 9999)))
        return out
    drop = "--proto udp --dport %d --action drop" % port
    # after the drop, accepts that cover the port too (ranges and prefixes cut differently in
    # each file): the drop must win at every moment of a switch
    after_a = ["--proto udp --dport %d-%d --action accept" % (port - 5, port + 5),
               "--src 10.77.0.0/24 --action accept", "--src fd77::/64 --action accept"]
    after_b = ["--proto udp --dport %d-%d --action accept" % (port - 2, port + 9),
               "--proto both --src 10.77.0.0/16 --action accept", "--src fd77::/48 --action accept"]
    a = others(20) + [drop] + others(10) + after_a + others(20)
    b = others(45) + ["--proto udp --src 10.99.0.7 --dport %d --action accept" % port, drop] + \
        after_b + others(10)
    return "\n".join(a) + "\n", "\n".join(b) + "\n"


@test
def fw_switching_rule_files_lets_no_packet_through(env):
    """A UDP flood (v4 and v6, many flows) to a port both rule files drop, while fw apply
    switches between the two again and again (confirmed each time), under an accept and a drop
    policy: no datagram reaches the port. Every packet meets the whole old list or the whole new
    one."""
    reset(env)
    port = env.port()
    usrv = env.udp_server(port)
    rnd = random.Random(33)
    with tempfile.TemporaryDirectory() as d:
        paths = []
        for k, text in enumerate(switch_files(port, rnd)):
            paths.append(os.path.join(d, "%s.rules" % "ab"[k]))
            with open(paths[-1], "w") as f:
                f.write(text)
        for policy in ("accept", "drop"):
            fw(env, "import", paths[1])
            fw(env, "policy", policy)
            flood = subprocess.Popen(["ip", "netns", "exec", env.cli, it.PY, "-c", FLOOD,
                                      SRV4 + "," + SRV6, str(port), "150", "10"],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            try:
                for i in range(5):
                    for path in paths:
                        fw(env, "apply", path, "--confirm", "60")
                        fw(env, "confirm")
                    # and the single changes: a rule added before the drop, moved, removed;
                    # an import; the policy there and back
                    doc = rule(env, "--proto", "udp", "--dport", "%d-%d" % (port - 1, port + 1),
                               "--src", "10.99.%d.0/24" % i, "--action", "accept", "--at", "1")
                    fw(env, "rule", "move", doc["rules"][0]["id"], len(doc["rules"]))
                    fw(env, "rule", "rm", doc["rules"][-1]["id"])
                    fw(env, "import", paths[i % 2])
                    fw(env, "policy", "drop" if policy == "accept" else "accept")
                    fw(env, "policy", policy)
            finally:
                so, se = flood.communicate(timeout=30)
            check(so.strip().isdigit() and int(so) > 1000, "the flood did not run: %r %r", so,
                  se[-300:])
            time.sleep(0.3)
            got = len(it.dgrams(usrv))
            check(got == 0, "policy %s: %d of %s datagrams reached the dropped port during the "
                  "switches", policy, got, so.strip())
    reset(env)


def one_map_each(path, n, last_port=None):
    """n rules that each name their own source and port (one map per rule): the last one's port
    last_port when given."""
    with open(path, "w") as f:
        for i in range(n):
            port = last_port if last_port and i == n - 1 else 1024 + i % 60000
            f.write("--proto tcp --src 10.%d.%d.%d --dport %d --action drop\n" %
                    (100 + i // 65536, i // 256 % 256, i % 256, port))


@test
def fw_a_list_of_one_map_per_rule_is_refused_above_the_limit(env):
    """100,000 rules of one source and one port each: past the rule limit, refused at once with
    the number and the limit, controld answering another client all along; 6,000 would be
    6,000 maps (the kernel's cost grows with their square): refused by the map limit; the rules
    in force kept; 2,000 of them go in."""
    reset(env)
    (ta, tb, _, _), _ = servers(env)
    rule(env, "--proto", "tcp", "--dport", ta, "--action", "drop")
    slow, stop = [], [False]

    def poll_status():
        while not stop[0]:
            t = time.monotonic()
            env.ctl("status")
            slow.append(time.monotonic() - t)
            time.sleep(0.1)
    th = threading.Thread(target=poll_status)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "big.rules")
        one_map_each(path, 100000)
        th.start()
        try:
            t0 = time.monotonic()
            p = env.ctl_raw("fw", "import", path, json_out=False)
            took = time.monotonic() - t0
        finally:
            time.sleep(0.3)
            stop[0] = True
            th.join()
        check(p.returncode == 4 and "at most 65536" in p.stderr, "exit %d: %s", p.returncode,
              p.stderr[-400:])
        check(took < 10, "the refusal took %.1f s", took)
        check(slow and max(slow) < 1.0, "status took up to %.2f s meanwhile", max(slow or [0]))
        # under the rule limit, the map limit: 6,000 of them would be 6,000 maps
        one_map_each(path, 6000)
        p = env.ctl_raw("fw", "import", path, json_out=False)
        check(p.returncode == 4 and "maps" in p.stderr and "4096" in p.stderr,
              "exit %d: %s", p.returncode, p.stderr[-400:])
        check(len(fw(env, "list")["rules"]) == 1, "a refused list was stored")
        expect_all(env,
                   E("tcp", SRV4, ta, "timeout", t=0.5),
                   E("tcp", SRV4, tb, "open"))
        # below the limit the same shape goes in, and its last rule matches
        one_map_each(path, 2000, last_port=tb)
        t0 = time.monotonic()
        doc = fw(env, "import", path)
        took2 = time.monotonic() - t0
        check(doc["state"]["maps"] <= 4096, "maps: %r", doc["state"])
        expect_all(env,
                   E("tcp", SRV4, tb, "open"),  # 10.100.7.207 is not the client
                   E("tcp", SRV4, ta, "open"))
    sys.stdout.write("    (100,000 one-map rules refused in %.2f s, status at most %.2f s; "
                     "2,000 applied in %.2f s, %d maps)\n" % (took, max(slow), took2,
                                                              doc["state"]["maps"]))
    reset(env)


@test
def fw_import_export_round_trip(env):
    reset(env)
    rule(env, "--name", "a", "--proto", "tcp", "--src", "10.0.0.0/8", "--dport", "22",
         "--action", "accept")
    rule(env, "--proto", "udp", "--sport", "100-200", "--dst", "fd00::/64", "--dport", "53",
         "--action", "reject", "--disabled")
    rule(env, "--dir", "forward", "--src", "eth*", "--dst", SRV_IF, "--action", "drop")
    rule(env, "--dir", "out", "--proto", "both", "--dport", "1-1024", "--action", "accept")
    before = fw(env, "list")["rules"]
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "fw.rules")
        fw(env, "export", path)
        text = open(path).read()
        reset(env)
        check(fw(env, "list")["rules"] == [], "reset left rules")
        doc = fw(env, "import", path)
    strip = [{k: v for k, v in r.items() if k != "id"} for r in before]
    got = [{k: v for k, v in r.items() if k != "id"} for r in doc["rules"]]
    check(got == strip, "round trip:\n%r\n%r\nfile:\n%s", got, strip, text)


@test
def fw_bad_line_refuses_the_file(env):
    reset(env)
    rule(env, "--name", "stays", "--dport", "80", "--action", "accept")
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "bad.rules")
        with open(path, "w") as f:
            f.write("# a comment\n--dport 22 --action accept   # ssh\n\n"
                    "--dport 99999 --action drop\n--dport 25 --action drop\n")
        p = env.ctl_raw("fw", "import", path, json_out=False)
        check(p.returncode == 4, "exit %d: %s", p.returncode, p.stderr)
        check("line 4" in p.stderr, "the error names the line: %r", p.stderr)
        # a line only controld can judge (host bits set) is refused by line too
        with open(path, "w") as f:
            f.write("--dport 22 --action accept\n--src 10.0.0.1/8 --action drop\n")
        p = env.ctl_raw("fw", "import", path, json_out=False)
        check(p.returncode == 4 and "line 2" in p.stderr, "exit %d: %s", p.returncode, p.stderr)
        # an option given twice, whichever value comes last
        for dup in ("--action drop --action accept", "--dport 25 --dport=26 --action drop",
                    "--action drop --disabled --disabled"):
            with open(path, "w") as f:
                f.write("--dport 22 --action accept\n# two\n%s\n" % dup)
            p = env.ctl_raw("fw", "import", path, json_out=False)
            check(p.returncode != 0 and "line 3" in p.stderr and "twice" in p.stderr,
                  "%r: exit %d: %s", dup, p.returncode, p.stderr)
    check([r["name"] for r in fw(env, "list")["rules"]] == ["stays"], "the list changed")


@test
def fw_in_backups(env):
    reset(env)
    rule(env, "--name", "bk", "--proto", "tcp", "--dport", "2222", "--action", "reject")
    fw(env, "policy", "drop", "--dir", "out")
    fw(env, "set", "icmp", "on")
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "backup.json")
        env.ctl("export", path)
        doc = json.load(open(path))
        check("firewall" in doc, "no firewall in the backup: %r", list(doc))
        reset(env)
        env.ctl("import", path)
    doc = fw(env, "list")
    check([r["name"] for r in doc["rules"]] == ["bk"], "rules after import: %r", doc["rules"])
    check(doc["policy"]["out"] == "drop" and doc["options"]["icmp"] is True,
          "policy and options after import: %r", doc)
    reset(env)


@test
def fw_bad_rules_refused(env):
    reset(env)
    for args, what in ((["--dport", "80"], "action"),
                       (["--proto", "any", "--dport", "80", "--action", "drop"], "ports"),
                       (["--src", "10.0.0.300", "--action", "drop"], "address"),
                       (["--src", "10.0.0.1", "--dst", "fd00::1", "--action", "drop"], "famil"),
                       (["--dir", "out", "--src", "eth0", "--action", "drop"], "input"),
                       (["--name", "123", "--action", "drop"], "number"),
                       (["--action", "drop", "--action", "accept"], "--action given twice"),
                       (["--src", CLI4, "--src", CLI4B, "--action", "drop"], "--src given twice")):
        p = fw_fails(env, "rule", "add", *args)
        check(what in p.stderr, "%r: %r", args, p.stderr)
    rule(env, "--name", "dup", "--action", "accept")
    p = fw_fails(env, "rule", "add", "--name", "dup", "--action", "accept")
    check(p.returncode == 5, "a duplicate name: exit %d", p.returncode)
    check(len(fw(env, "list")["rules"]) == 1, "a refused rule was stored")


if __name__ == "__main__":
    sys.exit(it.run_module("test_fw", setup=setup))
