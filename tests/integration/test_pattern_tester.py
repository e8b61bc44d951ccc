#!/usr/bin/python3
"""Integration: what the page's pattern tester and script check ask controld (issue 27):
`regex match` gives every match of several patterns in a sample with its start and end, each
pattern judged as `filter add` judges it (its own error, the others still run), over any bytes;
`script set --dry-run` checks a file as `script set` does and stores nothing."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fgxit as it  # noqa: E402
from fgxit import check, test  # noqa: E402


def sample(env, data, name="sample.bin"):
    p = os.path.join(env.tmp, name)
    with open(p, "wb") as f:
        f.write(data)
    return p


@test
def regex_match_every_match_with_its_own_error(env):
    p = sample(env, b"GET /evil1 HTTP/1.1\r\nX: EVIL22\r\n\r\n")
    doc = env.ctl("regex", "match", "evil[0-9]+\n(?i)evil[0-9]+\n([a-\nHTTP/1\\.1", p)
    check([d["regex"] for d in doc] == ["evil[0-9]+", "(?i)evil[0-9]+", "([a-", "HTTP/1\\.1"],
          "patterns in order: %r", doc)
    # hyperscan reports every end, each with its leftmost start
    check(doc[0]["matches"] == [{"start": 5, "end": 10}], "evil[0-9]+: %r", doc[0])
    check(doc[1]["matches"] == [{"start": 5, "end": 10}, {"start": 24, "end": 29},
                                {"start": 24, "end": 30}], "(?i): %r", doc[1])
    check("error" in doc[2] and "invalid regex" in doc[2]["error"] and "matches" not in doc[2],
          "the bad pattern's own error: %r", doc[2])
    check(doc[3]["matches"] == [{"start": 11, "end": 19}], "after the bad one: %r", doc[3])
    # --nocase for all; binary bytes; the table for a human
    p = sample(env, b"\x00\xffAbC\x00abc", "bin.bin")
    doc = env.ctl("regex", "match", "abc\n\\x00", p, "--nocase")
    check(doc[0]["matches"] == [{"start": 2, "end": 5}, {"start": 6, "end": 9}], "nocase %r",
          doc[0])
    check([m["start"] for m in doc[1]["matches"]] == [0, 5], "\\x00: %r", doc[1])
    r = env.ctl_raw("regex", "match", "abc", p, json_out=False)
    check(r.returncode == 0 and "1 match: 6-9" in r.stdout, "human: %r %r", r.stdout, r.stderr)
    # the filter's own refusals: a pattern that matches everything
    doc = env.ctl("regex", "match", "x*\nabc", p)
    check("error" in doc[0] and "empty string" in doc[0]["error"] and doc[1]["matches"],
          "x*: %r", doc)
    r = env.ctl_raw("regex", "match", "\n".join("a%d" % i for i in range(17)), p)
    check(r.returncode == 4 and "at most 16" in r.stderr, "17 patterns: %d %r", r.returncode,
          r.stderr)


@test
def script_check_stores_nothing(env):
    env.service("chk", "tcp", extra=("--layer", "proxy"))
    good = sample(env, b"from firegex.nfproxy import pyfilter, REJECT\n"
                  b"from firegex.nfproxy.models import RawPacket\n\n"
                  b"@pyfilter\ndef f(p: RawPacket):\n    return REJECT\n", "good.py")
    bad = sample(env, b"from firegex.nfproxy import pyfilter\n\n@pyfilter\ndef f(p: Nope):\n"
                 b"    pass\n", "bad.py")
    doc = env.ctl("script", "set", "chk", good, "--dry-run")
    check([f["name"] for f in doc["functions"]] == ["f"] and doc["functions"][0]["line"] == 5,
          "checked: %r", doc)
    r = env.ctl_raw("script", "get", "chk")
    check(r.returncode == 3, "a checked file was stored: %r", r.stdout)
    r = env.ctl_raw("script", "set", "chk", bad, "--dry-run", json_out=False)
    check(r.returncode == 4 and "bad.py:4:" in r.stderr and "Nope" in r.stderr, "bad: %d %r",
          r.returncode, r.stderr)
    # set for real, then a check of another file leaves the stored one as it was
    env.ctl("script", "set", "chk", good)
    env.ctl_raw("script", "set", "chk", bad, "--dry-run")
    r = env.ctl_raw("script", "get", "chk", json_out=False)
    check(r.stdout.startswith("from firegex.nfproxy import pyfilter, REJECT"), "stored: %r",
          r.stdout)


if __name__ == "__main__":
    sys.exit(it.run_module("pattern_tester"))
