"""fgex's nftables tables removed by another program are put back (issue 24, item 3).

`nft flush ruleset` (what a restart of Debian's nftables unit runs), `nft delete table`, one
rule deleted, the proxy layer's ip rule deleted: within 1 s the evil connection is blocked again
(the server never reads its bytes) and an honest one passes, on both layers; status counts the
restore and shows the gap; the health entry is in controld's log. A program that keeps deleting
the table does not make controld spin, and a clean stop (SIGTERM, deploy/stop.sh) removes the
rules without restoring them.
"""
import os
import re
import signal
import subprocess
import sys
import time

import fgxit as it
from fgxit import EVIL, SRV4, SRV6, check, test

ROOT = os.path.abspath(os.path.join(it.HERE, "..", ".."))
BOUND = 1.0  # seconds: the bound from the removal to the rules being back
_svc = {}


def nft(env, *args, check_rc=True):
    return it.sh("ip", "netns", "exec", env.srv, "nft", *args, check=check_rc)


def service_on(env, layer):
    """One service per layer with the evil filter, and its server (made once)."""
    if layer not in _svc or _svc[layer][2].proc.poll() is not None:
        name = "nw-" + layer
        if layer not in _svc:
            _, port = env.service(name, "tcp", extra=("--layer", layer))
            env.filter(name)
        else:
            port = _svc[layer][1]
        _svc[layer] = (name, port, None)
        _svc[layer] = (name, port, env.tcp_server(port, idle=30))
    return _svc[layer]


def server_read(srv):
    """Everything the server read, per connection."""
    got = {}
    for e in srv.all("data"):
        got.setdefault(e["id"], b"")
        got[e["id"]] += it.d64(e["data"])
    return got


_tag = [0]


def evil_blocked(env, srv, port, host=SRV4):
    _tag[0] += 1
    payload = b"t%d " % _tag[0] + EVIL
    c = env.tcp_client(host, port, [payload], timeout=3)
    check(c["connected"], "the client could not connect: %r", c)
    time.sleep(0.2)
    read = [d for d in server_read(srv).values() if EVIL in d and d.startswith(payload[:4])]
    check(not read, "the server read the evil bytes: %r (client: %s)", read, c["end"])
    check(c["end"] == "reset", "the evil connection ended by %s, not a reset", c["end"])


def honest_passes(env, srv, port, host=SRV6):
    _tag[0] += 1
    payload = b"honest %d" % _tag[0]
    c = env.tcp_client(host, port, [payload], timeout=3)
    it.assert_passed(c, it.server_conn_starting(srv, payload), payload)


def rules_status(env):
    r = env.ctl("status").get("rules")
    check(isinstance(r, dict), "status --json has no rules object: %r", r)
    return r


def log_since(env):
    with open(env.log_path, "rb") as f:
        f.seek(env.log_offset)
        return f.read().decode(errors="replace")


def removed_then_back(env, layer, remove, what):
    """remove() takes fgex's rules (or part of them) away; within BOUND the evil connection is
    blocked again and an honest one passes; status counted it; the log has the health entry."""
    _, port, srv = service_on(env, layer)
    evil_blocked(env, srv, port)
    before = rules_status(env)
    t0 = time.monotonic()
    remove()
    left = t0 + BOUND - time.monotonic()
    check(left > 0, "removing took %.2fs, past the bound itself", BOUND - left)
    time.sleep(left)
    evil_blocked(env, srv, port)
    honest_passes(env, srv, port)
    after = it.wait_until(lambda: (lambda r: r if r["restored"] > before["restored"] else None)(
        rules_status(env)), timeout=2)
    check(after, "status did not count a restore: %r before, %r now", before, rules_status(env))
    check(0 <= after["gap_ms"] < BOUND * 1000, "the gap %r ms is past the bound", after["gap_ms"])
    check(after["last"] >= int(time.time()) - 10, "the last restore's time is %r", after["last"])
    check(after["removed"] and re.search(what, after["removed"]),
          "status says %r was removed, expected /%s/", after["removed"], what)
    check(after["fight"] is False, "a single removal counted as a fight")
    log = log_since(env)
    check(re.search(r"health: service 0 rules-restored: .*" + what, log),
          "no rules-restored health entry matching /%s/ in controld's log:\n%s", what, log[-1500:])
    txt = env.ctl_raw("status", json_out=False).stdout
    check(re.search(r"^rules: +restored %d times" % after["restored"], txt, re.M),
          "fgexctl status does not show the restores: %r", txt)


def _flush(env):
    return lambda: nft(env, "flush", "ruleset")


def _delete_table(env):
    return lambda: nft(env, "delete", "table", "inet", "fgex")


def _delete_lookup_rule(env, chain, setname):
    def go():
        out = nft(env, "-a", "list", "chain", "inet", "fgex", chain).stdout
        m = re.search(r"@%s\b.*# handle (\d+)" % setname, out)
        check(m, "no rule looking up @%s in chain %s: %s", setname, chain, out)
        nft(env, "delete", "rule", "inet", "fgex", chain, "handle", m.group(1))
    return go


for _layer, _chain, _set in (("nfqueue", "pre", "c2s_4"), ("proxy", "pxpre", "px_4")):
    def _mk(layer, chain, setname):
        def flush_ruleset(env):
            removed_then_back(env, layer, _flush(env), r"table inet fgex deleted by nft")

        def delete_table(env):
            removed_then_back(env, layer, _delete_table(env), r"table inet fgex deleted by nft")

        def delete_one_rule(env):
            removed_then_back(env, layer, _delete_lookup_rule(env, chain, setname),
                              r"a rule of chain %s \(table inet fgex\) deleted" % chain)
        for fn in (flush_ruleset, delete_table, delete_one_rule):
            fn.__name__ = "%s_%s_is_undone_within_1s" % (fn.__name__, layer)
            test(fn)
    _mk(_layer, _chain, _set)


def ip_rules(env, fam):
    return it.sh("ip", "-n", env.srv, fam, "rule", "list").stdout


@test
def proxy_layer_ip_rule_deleted_is_put_back_within_1s(env):
    _, port, srv = service_on(env, "proxy")
    check("9066:" in ip_rules(env, "-4"), "no proxy ip rule: %s", ip_rules(env, "-4"))

    def remove():
        it.sh("ip", "-n", env.srv, "-4", "rule", "del", "pref", "9066")
        it.sh("ip", "-n", env.srv, "-4", "route", "flush", "table", "4066")
    removed_then_back(env, "proxy", remove, r"the proxy layer's (ip rule|local route)")
    check("9066:" in ip_rules(env, "-4"), "the ip rule is not back: %s", ip_rules(env, "-4"))
    routes = it.sh("ip", "-n", env.srv, "-4", "route", "show", "table", "4066").stdout
    check("local default dev lo" in routes, "the local route is not back: %r", routes)


@test
def firewall_table_deleted_is_put_back_within_1s(env):
    port = env.port()
    env.ctl("fw", "rule", "add", "--name", "nw-drop", "--proto", "tcp", "--dport", port,
            "--action", "reject")
    srv = env.tcp_server(port)
    try:
        def refused():
            c = env.tcp_client(SRV4, port, [b"through the firewall"], timeout=2)
            check(not c["connected"], "a connection to the firewalled port %d got through: %r",
                  port, c)
        refused()
        before = rules_status(env)
        t0 = time.monotonic()
        nft(env, "delete", "table", "inet", "fgex_fw")
        time.sleep(max(0, t0 + BOUND - time.monotonic()))
        refused()
        check(not srv.all("accept"), "the server accepted a connection the firewall drops")
        after = rules_status(env)
        check(after["restored"] == before["restored"] + 1, "restores %r -> %r", before, after)
        check("table inet fgex_fw deleted" in (after["removed"] or ""), "removed: %r",
              after["removed"])
    finally:
        env.ctl("fw", "rule", "rm", "nw-drop")


@test
def a_program_that_keeps_deleting_the_table_does_not_make_controld_spin(env):
    _, port, srv = service_on(env, "nfqueue")
    before = rules_status(env)["restored"]
    env.log_offset = os.path.getsize(env.log_path)
    # 40 deletes, one every 100 ms: a fight
    fighter = subprocess.Popen(
        ["ip", "netns", "exec", env.srv, "bash", "-c",
         "for i in $(seq 1 40); do nft delete table inet fgex 2>/dev/null; sleep 0.1; done"])
    slow, fight_seen = [], False
    t0 = time.monotonic()
    try:
        while fighter.poll() is None:
            s0 = time.monotonic()
            st = env.ctl("status")
            took = time.monotonic() - s0
            if took > 1.0:
                slow.append(round(took, 2))
            fight_seen |= bool(st["rules"]["fight"])
            time.sleep(0.2)
    finally:
        fighter.wait(30)
    dur = time.monotonic() - t0
    check(not slow, "status took over a second during the fight: %r", slow)
    check(fight_seen, "status never said that another program keeps removing the rules")
    n = rules_status(env)["restored"] - before
    # a burst of 5, then at most one a second (+2 for the edges)
    check(5 <= n <= 5 + dur + 2, "%d restores in %.1fs of a fight", n, dur)
    t_end = time.monotonic()
    time.sleep(max(0, t_end + 1.5 - time.monotonic()))
    evil_blocked(env, srv, port)
    honest_passes(env, srv, port)
    log = log_since(env)
    check("health: service 0 rules-fight: another program keeps removing fgex's rules" in log,
          "no rules-fight health entry:\n%s", log[-1500:])
    entries = len(re.findall(r"health: service 0 rules-restored", log))
    check(entries <= 6, "%d rules-restored entries in a fight: the log is flooded", entries)
    check(it.wait_until(lambda: not rules_status(env)["fight"], timeout=13, step=0.5),
          "the fight never ended in status")


def _stop_leaves_no_rules(env, stop):
    _, port, _ = service_on(env, "nfqueue")
    service_on(env, "proxy")
    env.log_offset = os.path.getsize(env.log_path)
    check("fgex" in nft(env, "list", "tables").stdout, "no fgex table before the stop")
    stop()
    log = log_since(env)
    check("stopping" in log, "controld did not log its stop:\n%s", log[-800:])
    check("rules-restored" not in log and "put back" not in log,
          "a clean stop restored the rules:\n%s", log[-1500:])
    tables = nft(env, "list", "tables").stdout
    check("fgex" not in tables, "fgex tables left after a clean stop: %r", tables)
    check("9066:" not in ip_rules(env, "-4"), "the proxy ip rule stayed: %s", ip_rules(env, "-4"))
    # and nothing comes back by itself
    time.sleep(1.0)
    check("fgex" not in nft(env, "list", "tables").stdout, "an fgex table came back")
    env.helpers = [h for h in env.helpers if h.proc.poll() is None]
    env.controld = None
    env.start_controld()
    check(rules_status(env)["restored"] == 0, "a fresh controld counts restores: %r",
          rules_status(env))


@test
def a_clean_stop_removes_the_rules_without_restoring_them(env):
    def stop():
        rc = env.stop_controld(signal.SIGTERM)
        check(rc == 0, "controld exited with %r", rc)
    _stop_leaves_no_rules(env, stop)


@test
def make_stop_removes_the_rules_without_restoring_them(env):
    def stop():
        # the test's controld is its child, not a daemon: reaped here while stop.sh waits, or
        # stop.sh would see a zombie that never goes
        p = subprocess.Popen(["ip", "netns", "exec", env.srv,
                              os.path.join(ROOT, "deploy", "stop.sh"), "RUN_DIR=" + env.run_dir],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        rc = env.controld.wait(10)
        out, _ = p.communicate(timeout=20)
        check(rc == 0, "controld exited with %r", rc)
        check(p.returncode == 0 and "controld stopped" in out, "stop.sh: %d %r", p.returncode,
              out)
    _stop_leaves_no_rules(env, stop)


if __name__ == "__main__":
    sys.exit(it.run_module("nftwatch"))
