#!/usr/bin/python3
"""Integration: services on several addresses (`--addr`, `service addr add|rm`) on both layers,
and the external hand-off layer (`--layer external --to`), with real traffic between the test's
namespaces.

The server namespace gets more addresses on its veth (10.77.0.11-.13, .20, fd77::11) and a
second link of its own (fgxa-s2 10.78.0.1 <-> fgxa-c2 10.78.0.2), so that addresses, a prefix
and an interface name each select exactly their own traffic. Each test uses ports of its own."""
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fgxit as it  # noqa: E402
from fgxit import CLI4, EVIL, check, test  # noqa: E402

A1, A2, A3, A4 = "10.77.0.11", "10.77.0.12", "10.77.0.13", "10.77.0.20"
A6 = "fd77::11"
IF2_SRV, IF2_CLI = "fgxa-s2", "fgxa-c2"
B_SRV, B_CLI = "10.78.0.1", "10.78.0.2"


def setup(env):
    for a in (A1, A2, A3, A4):
        it.sh("ip", "-n", env.srv, "addr", "add", a + "/32", "dev", it.SRV_IF)
    it.sh("ip", "-n", env.srv, "addr", "add", A6 + "/128", "dev", it.SRV_IF, "nodad")
    it.sh("ip", "-n", env.srv, "link", "add", IF2_SRV, "type", "veth", "peer", "name", IF2_CLI,
          "netns", env.cli)
    it.sh("ip", "-n", env.srv, "addr", "add", B_SRV + "/24", "dev", IF2_SRV)
    it.sh("ip", "-n", env.cli, "addr", "add", B_CLI + "/24", "dev", IF2_CLI)
    it.sh("ip", "-n", env.srv, "link", "set", IF2_SRV, "up")
    it.sh("ip", "-n", env.cli, "link", "set", IF2_CLI, "up")
    # the client reaches the extra addresses on its link; the veth's own are enough for ARP,
    # the IPv6 one needs its neighbour (no DAD, no ND race)
    mac = json.loads(it.sh("ip", "-n", env.srv, "-j", "link", "show", it.SRV_IF).stdout)[0]
    it.sh("ip", "-n", env.cli, "neigh", "replace", A6, "lladdr", mac["address"], "dev", it.CLI_IF,
          "nud", "permanent")


def ctl_fails(env, *args):
    """fgexctl ARGS must fail; returns (exit status, stderr)."""
    p = env.ctl_raw(*args)
    check(p.returncode != 0, "fgexctl %s succeeded: %s", " ".join(map(str, args)), p.stdout[:300])
    return p.returncode, p.stderr


def exchange(env, srv, host, port, payload, n):
    """One connection carrying payload to host:port; returns (client, server) results. n: the
    server's connection number."""
    c = env.tcp_client(host, port, [payload])
    check(c["connected"], "client could not connect to %s:%d: %r", host, port, c)
    return c, it.server_conn(srv, n)


def both_layers(fn):
    """One test body per layer, registered as NAME_nfqueue and NAME_proxy."""
    for layer in ("nfqueue", "proxy"):
        def body(env, layer=layer):
            fn(env, layer)
        body.__name__ = "%s_%s" % (fn.__name__, layer)
        test(body)
    return fn


# ---- several addresses ---------------------------------------------------------------------

@both_layers
def two_addresses_filter_on_both(env, layer):
    p1, p2 = env.port(), env.port()
    name = "two-" + layer
    doc = env.ctl("service", "add", name, "--proto", "tcp", "--addr", "%s:%d" % (A1, p1),
                  "--addr", "%s:%d" % (A2, p2), "--layer", layer)
    check([a["text"] for a in doc["addrs"]] == ["%s:%d" % (A1, p1), "%s:%d" % (A2, p2)],
          "addresses in the reply: %r", doc["addrs"])
    check(doc["ip"] == A1 and doc["port"] == p1, "first address as ip/port: %r", doc)
    env.filter(name)
    s1, s2 = env.tcp_server(p1), env.tcp_server(p2)
    c, s = exchange(env, s1, A1, p1, b"GET " + EVIL, 1)
    it.assert_blocked(c, s)
    c, s = exchange(env, s2, A2, p2, b"GET " + EVIL, 1)
    it.assert_blocked(c, s)
    # clean traffic on both passes
    c, s = exchange(env, s1, A1, p1, b"hello", 2)
    it.assert_passed(c, s, b"hello")
    c, s = exchange(env, s2, A2, p2, b"hello", 2)
    it.assert_passed(c, s, b"hello")
    # an address of the box that is not the service's: not filtered
    c, s = exchange(env, s1, A3, p1, EVIL, 3)
    it.assert_passed(c, s, EVIL)
    blocked = env.service_doc(name)["blocked"]
    check(blocked == 2, "blocked %r, expected 2", blocked)


@both_layers
def address_added_and_removed_while_a_connection_stays_open(env, layer):
    p = env.port()
    name = "live-" + layer
    env.ctl("service", "add", name, "--proto", "tcp", "--addr", "%s:%d" % (A1, p), "--layer",
            layer)
    env.filter(name)
    srv = env.tcp_server(p, idle=10.0)
    # a connection on the first address, open across both changes
    h = env.tcp_client(A1, p, [b"first;", "wait", b"second;", "wait", b"third"], timeout=8.0,
                       wait=False)
    check(h.wait_event(lambda e: e.get("event") == "connected", 5) is not None,
          "the long connection did not connect")
    it.wait_until(lambda: any(it.d64(e["data"]) == b"first;" for e in srv.all("data")), 3)
    doc = env.ctl("service", "addr", "add", name, A2)  # the port defaults to the service's
    check("%s:%d" % (A2, p) in [a["text"] for a in doc["addrs"]], "added: %r", doc["addrs"])
    h.tell()
    # the new address is filtered at once
    c, s = exchange(env, srv, A2, p, EVIL, 2)
    it.assert_blocked(c, s)
    doc = env.ctl("service", "addr", "rm", name, "%s:%d" % (A2, p))
    check([a["text"] for a in doc["addrs"]] == ["%s:%d" % (A1, p)], "after rm: %r", doc["addrs"])
    h.tell()
    c = it.client_result(h, 30)
    s = it.server_conn(srv, 1)
    it.assert_passed(c, s, b"first;second;third")
    # the removed address is no longer the service's: unfiltered
    c, s = exchange(env, srv, A2, p, EVIL, 3)
    it.assert_passed(c, s, EVIL)
    # the one left still filters
    c, s = exchange(env, srv, A1, p, EVIL, 4)
    it.assert_blocked(c, s)


@test
def ipv6_and_mapped_addresses(env):
    p = env.port()
    doc = env.ctl("service", "add", "six", "--proto", "tcp", "--addr", "[%s]:%d" % (A6, p),
                  "--addr", "[::ffff:%s]:%d" % (A3, p))
    texts = [a["text"] for a in doc["addrs"]]
    check(texts == ["[%s]:%d" % (A6, p), "%s:%d" % (A3, p)], "IPv4-mapped taken as IPv4: %r",
          texts)
    env.filter("six")
    srv = env.tcp_server(p)
    c, s = exchange(env, srv, A6, p, EVIL, 1)
    it.assert_blocked(c, s)
    c, s = exchange(env, srv, A3, p, EVIL, 2)
    it.assert_blocked(c, s)
    c, s = exchange(env, srv, it.SRV6, p, EVIL, 3)
    it.assert_passed(c, s, EVIL)


@both_layers
def prefix_and_interface_addresses(env, layer):
    p, q = env.port(), env.port()
    name = "netif-" + layer
    doc = env.ctl("service", "add", name, "--proto", "tcp", "--addr", "10.77.0.16/28:%d" % p,
                  "--addr", "%s:%d" % (IF2_SRV, q), "--layer", layer)
    kinds = [a["kind"] for a in doc["addrs"]]
    check(kinds == ["prefix", "interface"], "address kinds %r", kinds)
    env.filter(name)
    sp, sq = env.tcp_server(p), env.tcp_server(q)
    c, s = exchange(env, sp, A4, p, EVIL, 1)          # 10.77.0.20 is in 10.77.0.16/28
    it.assert_blocked(c, s)
    c, s = exchange(env, sp, A1, p, EVIL, 2)          # 10.77.0.11 is not
    it.assert_passed(c, s, EVIL)
    c, s = exchange(env, sq, B_SRV, q, EVIL, 1)       # in on fgxa-s2
    it.assert_blocked(c, s)
    c, s = exchange(env, sq, it.SRV4, q, EVIL, 2)     # in on the other link: not the service's
    it.assert_passed(c, s, EVIL)
    c, s = exchange(env, sq, B_SRV, q, b"hello", 3)
    it.assert_passed(c, s, b"hello")


@test
def overlapping_addresses_are_refused(env):
    p = env.port()
    env.ctl("service", "add", "net", "--proto", "tcp", "--addr", "10.77.0.0/24:%d" % p)
    rc, err = ctl_fails(env, "service", "add", "host", "--proto", "tcp", "--addr",
                        "%s:%d" % (A1, p))
    check(rc == 5 and "overlaps" in err and "net" in err, "no clear conflict message: %d %r", rc,
          err)
    rc, err = ctl_fails(env, "service", "add", "nic", "--proto", "tcp", "--addr",
                        "%s:%d" % (IF2_SRV, p))
    check("overlaps" in err and "interface" in err, "interface conflict message: %r", err)
    # another port, another protocol, or another network: no conflict
    env.ctl("service", "add", "host", "--proto", "tcp", "--addr", "%s:%d" % (A1, p + 1000))
    env.ctl("service", "add", "hostu", "--proto", "udp", "--addr", "%s:%d" % (A1, p))
    env.ctl("service", "add", "other", "--proto", "tcp", "--addr", "%s:%d" % (B_SRV, p))
    # addr add refuses the same way, and stores nothing
    rc, err = ctl_fails(env, "service", "addr", "add", "host", "%s:%d" % (A2, p))
    check("overlaps" in err, "addr add conflict message: %r", err)
    check(len(env.ctl("service", "show", "host")["addrs"]) == 1, "a refused address was stored")
    # the same address twice in one service
    rc, err = ctl_fails(env, "service", "addr", "add", "net", "10.77.0.128/25:%d" % p)
    check("overlap" in err, "self overlap message: %r", err)
    # bad text and the last address
    rc, err = ctl_fails(env, "service", "addr", "add", "net", "10.77.0.300:%d" % p)
    check(rc == 4 and "invalid address" in err, "bad address: %d %r", rc, err)
    rc, err = ctl_fails(env, "service", "addr", "rm", "net", "10.77.0.0/24:%d" % p)
    check("only address" in err, "last address removed: %r", err)
    rc, err = ctl_fails(env, "service", "addr", "rm", "net", "10.77.9.0/24:%d" % p)
    check(rc == 3 and "no address" in err, "unknown address: %d %r", rc, err)


@test
def addresses_survive_restart_and_backup(env):
    p, pi = env.port(), env.port()
    env.ctl("service", "add", "keep", "--proto", "tcp", "--port", p, "--addr", A1, "--addr",
            "[%s]" % A6, "--addr", "%s:%d" % (IF2_SRV, pi))
    want = [a["text"] for a in env.ctl("service", "show", "keep")["addrs"]]
    check(want == ["%s:%d" % (A1, p), "[%s]:%d" % (A6, p), "%s:%d" % (IF2_SRV, pi)],
          "addresses %r", want)
    path = os.path.join(env.tmp, "backup.json")
    p1 = env.ctl_raw("export", path, json_out=False)
    check(p1.returncode == 0, "export: %s", p1.stderr)
    # changed after the backup, then the backup restored (import replaces everything)
    env.ctl("service", "addr", "rm", "keep", "[%s]" % A6)
    p2 = env.ctl_raw("import", path, json_out=False)
    check(p2.returncode == 0, "import: %s", p2.stderr)
    got = [a["text"] for a in env.ctl("service", "show", "keep")["addrs"]]
    check(got == want, "after import %r, expected %r", got, want)
    env.stop_controld()
    env.start_controld()
    got = [a["text"] for a in env.ctl("service", "show", "keep")["addrs"]]
    check(got == want, "after restart %r, expected %r", got, want)
    # and it filters after the restart, on its second address
    env.filter("keep")
    srv = env.tcp_server(p)
    c, s = exchange(env, srv, A6, p, EVIL, 1)
    it.assert_blocked(c, s)


# ---- the external layer ---------------------------------------------------------------------

# The team's own tool: a transparent listener (IP_TRANSPARENT), as tproxy requires. It records
# each connection's peer and local address and what it received, and answers.
TPROXY_LISTENER = r"""
import json, socket, sys
IP_TRANSPARENT = 19
host, port = sys.argv[1], int(sys.argv[2])
IPV6_TRANSPARENT = 75
v6 = ":" in host
s = socket.socket(socket.AF_INET6 if v6 else socket.AF_INET, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
if v6:
    s.setsockopt(socket.IPPROTO_IPV6, IPV6_TRANSPARENT, 1)
else:
    s.setsockopt(socket.SOL_IP, IP_TRANSPARENT, 1)
s.bind((host, port))
s.listen(8)
print(json.dumps({"event": "listening"}), flush=True)
while True:
    c, peer = s.accept()
    c.settimeout(5)
    data = b""
    try:
        while not data.endswith(b"\n"):
            chunk = c.recv(4096)
            if not chunk:
                break
            data += chunk
        c.sendall(b"seen by the team's proxy\n")
    except OSError:
        pass
    local = c.getsockname()
    c.close()
    fmt = "[%s]:%d" if ":" in local[0] else "%s:%d"
    print(json.dumps({"event": "conn", "peer": peer[0], "local": fmt % local[:2],
                      "data": data.decode(errors="replace")}), flush=True)
"""


class Listener:
    def __init__(self, env, host, port):
        self.p = subprocess.Popen(["ip", "netns", "exec", env.srv, it.PY, "-c", TPROXY_LISTENER,
                                   host, str(port)], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        line = self.p.stdout.readline()
        check("listening" in line, "the transparent listener did not start: %s %s", line,
              self.p.stderr.read() if self.p.poll() is not None else "")

    def conn(self):
        line = self.p.stdout.readline()
        check(line, "the listener saw no connection")
        return json.loads(line)

    def stop(self):
        self.p.kill()
        self.p.wait()


@test
def external_layer_hands_connections_to_the_teams_proxy(env):
    p, q = env.port(), env.port()
    lis = Listener(env, "127.0.0.1", q)
    try:
        doc = env.ctl("service", "add", "ext", "--proto", "tcp", "--addr", "%s:%d" % (A1, p),
                      "--addr", "%s:%d" % (A2, p), "--layer", "external", "--to",
                      "127.0.0.1:%d" % q)
        check(doc["layer"] == "external" and doc["to"] == "127.0.0.1:%d" % q, "reply %r", doc)
        # the real service listens too: it must see nothing
        srv = env.tcp_server(p)
        for n, host in enumerate((A1, A2), 1):
            c = env.tcp_client(host, p, [b"hello " + EVIL + b"\n", ("read", 1.0)])
            check(c["connected"], "client could not connect to %s: %r", host, c)
            got = lis.conn()
            check(got["peer"] == CLI4, "the team's proxy saw %r, not the client %s", got["peer"],
                  CLI4)
            check(got["local"] == "%s:%d" % (host, p), "local address %r", got["local"])
            check(got["data"] == "hello evil1337\n", "the proxy received %r", got["data"])
            check(c["received"] == b"seen by the team's proxy\n", "client got %r", c["received"])
        check(not srv.all("accept"), "the real service was reached: %r", srv.all("accept"))
        # no fgex worker in the path: nothing to filter, and a filter is refused
        rc, err = ctl_fails(env, "filter", "add", "ext", "evil")
        check(rc == 4 and "nothing in fgex sees" in err, "filter on external: %d %r", rc, err)
        check(env.service_doc("ext")["filters"] == 0, "a filter was stored")
        # an address added to it is handed off as well
        env.ctl("service", "addr", "add", "ext", "%s:%d" % (A3, p))
        c = env.tcp_client(A3, p, [b"third\n", ("read", 1.0)])
        got = lis.conn()
        check(got["peer"] == CLI4 and got["data"] == "third\n", "third address: %r", got)
        # a backup keeps the layer and where it hands off
        path = os.path.join(env.tmp, "ext.json")
        p1 = env.ctl_raw("export", path, json_out=False)
        check(p1.returncode == 0, "export: %s", p1.stderr)
        with open(path) as f:
            saved = [x for x in json.load(f)["services"] if x["name"] == "ext"][0]
        check(saved["layer"] == "external" and saved["to"] == "127.0.0.1:%d" % q and
              saved["addrs"] == ["%s:%d" % (a, p) for a in (A1, A2, A3)], "backup: %r", saved)
        # stopped: the service's own traffic goes to the real service again
        env.ctl("service", "stop", "ext")
        c, s = exchange(env, srv, A1, p, b"direct", 1)
        it.assert_passed(c, s, b"direct")
    finally:
        lis.stop()


# The team's own UDP tool: a transparent socket that records each datagram's client and the
# address it was sent to (IP_ORIGDSTADDR), and answers from the service's address and port.
TPROXY_UDP = r"""
import json, socket, struct, sys
IP_TRANSPARENT, IP_RECVORIGDSTADDR = 19, 20
host, port = sys.argv[1], int(sys.argv[2])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_IP, IP_TRANSPARENT, 1)
s.setsockopt(socket.SOL_IP, IP_RECVORIGDSTADDR, 1)
s.bind((host, port))
print(json.dumps({"event": "listening"}), flush=True)
while True:
    data, anc, _, peer = s.recvmsg(65535, 256)
    dst = None
    for lvl, typ, val in anc:
        if lvl == socket.SOL_IP and typ == IP_RECVORIGDSTADDR:
            dport = struct.unpack("!H", val[2:4])[0]
            dst = "%s:%d" % (socket.inet_ntoa(val[4:8]), dport)
    r = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    r.setsockopt(socket.SOL_IP, IP_TRANSPARENT, 1)
    r.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        a, p = dst.rsplit(":", 1)
        r.bind((a, int(p)))
        r.sendto(b"seen by the team's proxy", peer)
    except OSError as e:
        print(json.dumps({"event": "error", "why": str(e)}), flush=True)
    r.close()
    print(json.dumps({"event": "dgram", "peer": "%s:%d" % peer[:2], "dst": dst,
                      "data": data.decode(errors="replace")}), flush=True)
"""


@test
def external_layer_hands_udp_datagrams_to_the_teams_tool(env):
    p, q = env.port(), env.port()
    lis = subprocess.Popen(["ip", "netns", "exec", env.srv, it.PY, "-c", TPROXY_UDP, "127.0.0.1",
                            str(q)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        check("listening" in lis.stdout.readline(), "the team's UDP tool did not start")
        env.ctl("service", "add", "extu", "--proto", "udp", "--addr", "%s:%d" % (A1, p),
                "--layer", "external", "--to", "127.0.0.1:%d" % q)
        # the service is there too, bound on every address: it must get nothing
        srv = env.udp_server(p)
        c = env.udp_client(A1, p, [b"hello " + EVIL], wait_s=1.0)
        got = json.loads(lis.stdout.readline())
        check(got["peer"].rpartition(":")[0] == CLI4, "the team's tool saw %r, not the client %s",
              got["peer"], CLI4)
        check(got["dst"] == "%s:%d" % (A1, p), "original destination %r", got["dst"])
        check(got["data"] == "hello evil1337", "the tool received %r", got["data"])
        check(c["replies"] == [b"seen by the team's proxy"], "the client got %r", c["replies"])
        check(not srv.all("dgram"), "the real service was reached: %r", srv.all("dgram"))
        env.ctl("service", "stop", "extu")
        c = env.udp_client(A1, p, [b"direct"], wait_s=0.5)
        it.wait_until(lambda: srv.all("dgram"), timeout=2)
        check([it.d64(e["data"]) for e in srv.all("dgram")] == [b"direct"],
              "stopped: the service got %r", srv.all("dgram"))
    finally:
        lis.kill()
        lis.wait()


@test
def external_layer_over_ipv6(env):
    p, q = env.port(), env.port()
    lis = Listener(env, "::1", q)
    try:
        env.ctl("service", "add", "ext6", "--proto", "tcp", "--addr", "[%s]:%d" % (A6, p),
                "--layer", "external", "--to", "[::1]:%d" % q)
        c = env.tcp_client(A6, p, [b"six\n", ("read", 1.0)])
        check(c["connected"], "client could not connect: %r", c)
        got = lis.conn()
        check(got["peer"] == it.CLI6, "the team's proxy saw %r, not the client %s", got["peer"],
              it.CLI6)
        check(got["local"] == "[%s]:%d" % (A6, p) and got["data"] == "six\n", "got %r", got)
        check(c["received"] == b"seen by the team's proxy\n", "client got %r", c["received"])
    finally:
        lis.stop()


@test
def switching_a_filtered_service_to_external_is_refused(env):
    p = env.port()
    env.ctl("service", "add", "sw", "--proto", "tcp", "--addr", "%s:%d" % (A1, p))
    env.filter("sw")
    rc, err = ctl_fails(env, "service", "set", "sw", "--layer", "external", "--to",
                        "127.0.0.1:%d" % env.port())
    check(rc == 4 and "nothing in fgex sees" in err and "filter" in err, "refusal: %d %r", rc,
          err)
    check(env.service_doc("sw")["layer"] == "nfqueue", "layer changed anyway")
    # without its filter the switch is taken, and the running service is handed off at once
    fid = env.filters("sw")[0]["id"]
    env.ctl("filter", "rm", fid)
    q = env.port()
    lis = Listener(env, "127.0.0.1", q)
    try:
        doc = env.ctl("service", "set", "sw", "--layer", "external", "--to", "127.0.0.1:%d" % q)
        check(doc["layer"] == "external" and doc["to"] == "127.0.0.1:%d" % q, "set: %r", doc)
        c = env.tcp_client(A1, p, [b"moved\n", ("read", 1.0)])
        got = lis.conn()
        check(got["peer"] == CLI4 and got["data"] == "moved\n", "after the switch: %r", got)
        # and back: the real service again, --to forgotten
        doc = env.ctl("service", "set", "sw", "--layer", "nfqueue")
        check("to" not in doc, "--to kept on the nfqueue layer: %r", doc)
        srv = env.tcp_server(p)
        c, s = exchange(env, srv, A1, p, b"back", 1)
        it.assert_passed(c, s, b"back")
    finally:
        lis.stop()
    rc, err = ctl_fails(env, "service", "add", "noto", "--proto", "tcp", "--port", env.port(),
                        "--layer", "external")
    check("--to" in err, "external without --to: %r", err)
    rc, err = ctl_fails(env, "service", "add", "tox", "--proto", "tcp", "--port", env.port(),
                        "--to", "127.0.0.1:9")
    check("external" in err, "--to without the external layer: %r", err)


if __name__ == "__main__":
    sys.exit(it.run_module("test_addrs", setup=setup))
