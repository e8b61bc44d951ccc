#!/usr/bin/python3
"""Integration: `fgexctl interfaces` (issue 27) in the module's server namespace: its loopback
and its veth with the addresses the test gave it, up and running, with the services that
listen on each by name or address; an interface taken down is said so."""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fgxit as it  # noqa: E402
from fgxit import SRV4, SRV6, SRV_IF, check, test  # noqa: E402


def ifaces(env):
    return {i["name"]: i for i in env.ctl("interfaces")}


@test
def interfaces_with_their_addresses_state_and_services(env):
    env.service("by-name", "tcp", extra=("--addr", "%s:8080" % SRV_IF))
    env.service("by-addr", "tcp", extra=("--addr", "%s:8081" % SRV4))
    env.service("anywhere", "tcp")
    got = ifaces(env)
    check(set(got) >= {"lo", SRV_IF}, "interfaces: %r", sorted(got))
    lo, v = got["lo"], got[SRV_IF]
    check(lo["loopback"] and lo["up"] and "127.0.0.1/8" in lo["addrs"] and lo["services"] == [],
          "lo: %r", lo)
    check(v["up"] and v["running"] and not v["loopback"] and v["index"] > 0, "%s: %r", SRV_IF, v)
    check(any(a.startswith(SRV4 + "/") for a in v["addrs"]) and
          any(a.startswith(SRV6 + "/") for a in v["addrs"]), "%s addresses: %r", SRV_IF,
          v["addrs"])
    check(sorted(v["services"]) == ["by-addr", "by-name"], "%s services: %r", SRV_IF,
          v["services"])
    p = env.ctl_raw("interfaces", json_out=False)
    line = [x for x in p.stdout.splitlines() if x.startswith(SRV_IF)]
    check(p.returncode == 0 and line and " up " in line[0] and "running" in line[0] and
          SRV4 in line[0] and "services: " in line[0], "interfaces:\n%s", p.stdout)
    # a new veth pair, not up yet: said so
    subprocess.run(["ip", "-n", env.srv, "link", "add", "fgxit-d", "type", "veth", "peer", "name", "fgxit-e"], check=True)
    try:
        d = ifaces(env).get("fgxit-d")
        check(d is not None and not d["up"] and d["addrs"] == [], "a down interface: %r", d)
    finally:
        subprocess.run(["ip", "-n", env.srv, "link", "del", "fgxit-d"], check=False)


if __name__ == "__main__":
    sys.exit(it.run_module("interfaces"))
