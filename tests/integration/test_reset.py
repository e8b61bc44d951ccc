#!/usr/bin/python3
"""Integration: `fgexctl reset [--keep-firewall]` (issue 27): refused without a terminal or
--yes; with --yes every service, filter and script goes in one change (traffic that was blocked
passes: the service is gone) and the firewall is off and empty, unless --keep-firewall; undo
brings the services back, blocking again (not the firewall: it is not in the change
history)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fgxit as it  # noqa: E402
from fgxit import EVIL, SRV4, check, test  # noqa: E402


@test
def reset_asks_removes_everything_and_undo_brings_it_back(env):
    _, port = env.service("rs", "tcp")
    fid = env.filter("rs")
    env.service("rs2", "udp")
    env.ctl("fw", "rule", "add", "--proto", "tcp", "--dport", 9, "--action", "drop")
    srv = env.tcp_server(port)
    c = env.tcp_client(SRV4, port, [b"x " + EVIL])
    check(c["end"] == "reset", "not blocked before the reset: %r", c)
    # no terminal, no --yes: refused, nothing changed
    p = env.ctl_raw("reset")
    check(p.returncode != 0 and len(env.services()) == 2, "reset without --yes: rc %d %s",
          p.returncode, p.stderr)
    # --keep-firewall: the services go, the rule stays
    env.ctl("reset", "--yes", "--keep-firewall")
    check(env.services() == [] and len(env.ctl("fw", "list")["rules"]) == 1,
          "after reset --keep-firewall: %r %r", env.services(), env.ctl("fw", "list"))
    env.ctl("undo")
    check(sorted(s["name"] for s in env.services()) == ["rs", "rs2"], "undo: %r", env.services())
    doc = env.ctl("reset", "--yes")
    check(doc["reset"] and not doc["keep_firewall"] and
          any(d["op"] == "rm" and d["kind"] == "filter" and d["id"] == fid for d in doc["diff"]),
          "reset --json: %r", doc)
    fwl = env.ctl("fw", "list")
    check(env.services() == [] and fwl["rules"] == [] and fwl["enabled"] is False,
          "after reset: %r %r", env.services(), fwl)
    c = env.tcp_client(SRV4, port, [b"y " + EVIL])
    check(c["end"] == "eof", "the removed service still filters: %r", c)
    # undo brings the services, filters and scripts back; the firewall is not in the change
    # history (its own changes have fw confirm), which reset's question and help say
    env.ctl("undo")
    check(len(env.filters("rs")) == 1 and env.ctl("fw", "list")["rules"] == [],
          "undo after reset: %r %r", env.services(), env.ctl("fw", "list"))
    c = env.tcp_client(SRV4, port, [b"z " + EVIL])
    check(c["end"] == "reset", "not blocked again after undo: %r", c)
    del srv


if __name__ == "__main__":
    sys.exit(it.run_module("reset"))
