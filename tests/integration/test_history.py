#!/usr/bin/python3
"""Integration: change history and undo (issue 14), with a real controld listening on the
local socket and on TLS, and real TCP connections between two namespaces.

Covers: every change is recorded with who made it (local, or the remote peer's address and
session) and the request in words, across a restart; `undo` of `filter rm` brings the filter
back with its id and counters and it blocks again, without counting its blocks twice in the
service's total; `undo` of `service rm` brings the service back with its filters; repeated
undo walks back; `redo` (the undo of an undo) goes forward again; nothing to undo or redo is a
clear error."""
import os
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fgxit as it  # noqa: E402
from fgxit import EVIL, SRV4, check, test  # noqa: E402

PORT = 7443
URL = "tls+tcp://%s:%d" % (SRV4, PORT)
ARGS = ["--listen", URL, "--allow", "10.77.0.2/32"]
BAD = b"bad4242"
S = {}


def remote(env, *args):
    """fgexctl --json in the client namespace, over TLS, with a HOME of its own."""
    argv = ["ip", "netns", "exec", env.cli, "env", "-u", "FGEX_CONFIG_DIR", "-u", "FGEX_URL",
            "HOME=" + S["home"], os.path.join(env.bin, "fgexctl"), "-c", URL, "--json"]
    return subprocess.run(argv + [str(a) for a in args], capture_output=True, text=True,
                          timeout=20, stdin=subprocess.DEVNULL)


def setup(env):
    S["home"] = os.path.join(env.tmp, "home-remote")
    os.makedirs(S["home"], exist_ok=True)
    pw = os.path.join(env.tmp, "pw")
    with open(pw, "w") as f:
        f.write("pw-123456\n")
    env.ctl("passwd", "--password-file", pw)
    p = remote(env, "login", "--password-file", pw)
    check(p.returncode == 0, "remote login: %s", p.stderr)


def stats_of(env, name):
    return env.ctl("stats", name)[0]


def wait_blocked(env, name, n, timeout=5):
    it.wait_until(lambda: stats_of(env, name)["blocked"] >= n, timeout=timeout)
    got = stats_of(env, name)["blocked"]
    check(got == n, "service %s blocked %d, expected %d", name, got, n)


def block(env, srv, port, payload=EVIL, n=1):
    for i in range(n):
        c, sport = env.tcp_conn(SRV4, port, [b"x%d " % i + payload])
        it.assert_blocked(c, it.server_conn_of(srv, sport), forbidden=payload)


def passes(env, srv, port, payload):
    c, sport = env.tcp_conn(SRV4, port, [payload])
    it.assert_passed(c, it.server_conn_of(srv, sport), payload)


def history(env):
    doc = env.ctl("history", "--limit", "1000")
    check(isinstance(doc, list), "history --json is not an array: %r", doc)
    return doc


def last(env):
    return history(env)[-1]


@test
def history_lists_who_and_what(env):
    # the set-up's passwd: a setting, recorded without a snapshot (undo passes over it)
    check(any(h["what"] == "passwd" and h["kind"] == "setting" and h["who"] == "local"
              for h in history(env)), "passwd not recorded: %r", history(env))
    sid, port = env.service("hist")
    fid = env.filter("hist", "evil[0-9]+", dir="c2s")
    h = last(env)
    check(h["who"] == "local", "a local change recorded as by %r", h["who"])
    check(h["what"] == "filter add hist 'evil[0-9]+' --dir c2s", "what: %r", h["what"])
    check(h["kind"] == "change" and h["undone"] is False, "entry: %r", h)
    for k in ("seq", "time"):
        check(isinstance(h[k], int) and h[k] > 0, "%s: %r", k, h[k])
    # a remote player's change: its address and its session
    p = remote(env, "filter", "rm", fid)
    check(p.returncode == 0, "remote filter rm: %s", p.stderr)
    h = last(env)
    check(h["who"].startswith("10.77.0.2 session ") and len(h["who"]) == len(
        "10.77.0.2 session ") + 8, "a remote change recorded as by %r", h["who"])
    check(h["what"] == "filter rm %d" % fid, "what: %r", h["what"])
    # a request that changes nothing is not a change
    n = len(history(env))
    p = env.ctl_raw("filter", "rm", fid)
    check(p.returncode == 3, "rm of a removed filter: exit %d", p.returncode)
    check(len(history(env)) == n, "a refused request was recorded")
    # --since filters, and the text form lists the same
    check(env.ctl("history", "--since", "1h")[-1]["seq"] == h["seq"], "--since 1h lost it")
    p = env.ctl_raw("history", json_out=False)
    check(p.returncode == 0 and "10.77.0.2 session" in p.stdout and "SEQ" in p.stdout,
          "history text: %r", p.stdout)
    # kept across a restart (LMDB)
    env.stop_controld(signal.SIGTERM)
    env.start_controld()
    check(last(env)["seq"] == h["seq"], "the history did not survive a restart")
    env.ctl("service", "rm", "--yes", sid)


@test
def undo_filter_rm_restores_id_counters_and_blocking(env):
    sid, port = env.service("undo-f")
    srv = env.tcp_server(port)
    f1 = env.filter("undo-f", "evil[0-9]+")
    f2 = env.filter("undo-f", "bad[0-9]+")
    block(env, srv, port, EVIL, 2)
    block(env, srv, port, BAD, 1)
    wait_blocked(env, "undo-f", 3)
    env.ctl("filter", "rm", f1)
    passes(env, srv, port, b"y " + EVIL)
    doc = env.ctl("undo")
    check(doc["change"]["kind"] == "undo" and doc["change"]["what"].startswith("undo of #"),
          "undo reply: %r", doc)
    check([(d["op"], d["id"]) for d in doc["diff"] if d["op"] != "keep"] == [("add", f1)],
          "undo diff: %r", doc["diff"])
    fs = {f["id"]: f for f in env.filters("undo-f")}
    check(sorted(fs) == sorted([f1, f2]), "filters after undo: %r", sorted(fs))
    check(fs[f1]["blocked"] == 2, "filter %d came back with blocked %d, not 2", f1,
          fs[f1]["blocked"])
    st = stats_of(env, "undo-f")
    check(st["blocked"] == 3 and st["blocked_removed"] == 0,
          "service total %d (removed %d) after the undo: its blocks counted twice or lost",
          st["blocked"], st["blocked_removed"])
    block(env, srv, port, EVIL, 1)  # it blocks again, at once
    wait_blocked(env, "undo-f", 4)
    check({f["id"]: f for f in env.filters("undo-f")}[f1]["blocked"] == 3,
          "the restored filter does not count on")
    env.ctl("service", "rm", "--yes", sid)


@test
def undo_service_rm_restores_its_filters(env):
    sid, port = env.service("undo-s", extra=("--midstream", "scan"))
    srv = env.tcp_server(port)
    f1 = env.filter("undo-s", "evil[0-9]+")
    f2 = env.filter("undo-s", "bad[0-9]+", nocase=True)
    block(env, srv, port, EVIL, 2)
    wait_blocked(env, "undo-s", 2)
    env.ctl("service", "rm", "--yes", "undo-s")
    check(all(s["name"] != "undo-s" for s in env.services()), "service still there")
    env.ctl("undo")
    svc = env.service_doc("undo-s")
    check(svc["id"] == sid and svc["port"] == port and svc["midstream"] == "scan",
          "service after undo: %r", svc)
    fs = {f["id"]: f for f in env.filters("undo-s")}
    check(sorted(fs) == sorted([f1, f2]), "its filters after undo: %r", sorted(fs))
    check(fs[f1]["blocked"] == 2 and fs[f2]["nocase"], "filters came back changed: %r", fs)
    check(svc["blocked"] == 2, "its total after undo: %d", svc["blocked"])
    block(env, srv, port, BAD.upper(), 1)  # its nocase filter blocks again
    wait_blocked(env, "undo-s", 3)
    env.ctl("service", "rm", "--yes", "undo-s")


@test
def repeated_undo_walks_back_and_redo_goes_forward(env):
    sid, port = env.service("walk")
    srv = env.tcp_server(port)
    f1 = env.filter("walk", "evil[0-9]+")
    f2 = env.filter("walk", "bad[0-9]+")

    def ids():
        return sorted(f["id"] for f in env.filters("walk"))

    env.ctl("undo")
    check(ids() == [f1], "first undo: %r", ids())
    env.ctl("undo")
    check(ids() == [], "second undo: %r", ids())
    passes(env, srv, port, b"a " + EVIL)
    # redo: the undo of the last undo, then of the one before
    doc = env.ctl("redo")
    check(doc["change"]["kind"] == "redo", "redo reply: %r", doc["change"])
    check(ids() == [f1], "first redo: %r", ids())
    block(env, srv, port, EVIL, 1)
    env.ctl("redo")
    check(ids() == [f1, f2], "second redo: %r", ids())
    p = env.ctl_raw("redo")
    check(p.returncode == 3 and "nothing to redo" in p.stderr, "a third redo: %d %r",
          p.returncode, p.stderr)
    # undo after redo reverts the redone change; a new change ends the redo chain
    env.ctl("undo")
    check(ids() == [f1], "undo after redo: %r", ids())
    f3 = env.filter("walk", "new[0-9]+")
    p = env.ctl_raw("redo")
    check(p.returncode == 3, "redo after a new change: exit %d", p.returncode)
    check(ids() == [f1, f3], "filters: %r", ids())
    hist = history(env)
    undone = [h for h in hist if h["undone"]]
    check(any(h["what"].startswith("filter add walk 'bad") for h in undone),
          "the undone add is not marked: %r", hist[-8:])
    # everything can be undone, back to before the service: then nothing is left to undo
    for _ in range(len(hist) + 2):
        if env.ctl_raw("undo").returncode != 0:
            break
    p = env.ctl_raw("undo")
    check(p.returncode == 3 and "nothing to undo" in p.stderr, "undo with nothing left: %d %r",
          p.returncode, p.stderr)
    check(all(s["name"] != "walk" for s in env.services()), "undo did not reach the service add")


if __name__ == "__main__":
    sys.exit(it.run_module("history", setup=setup, controld_args=ARGS))
