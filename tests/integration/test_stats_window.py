#!/usr/bin/python3
"""Integration: `stats --from T --to T --step S` (issue 27) over known traffic between the
module's namespaces: every bucket of the window is there, quiet ones with 0, the ones before the
service began filtering with none (null, `-`); the blocks add up to the traffic's; each filter's
share of them."""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fgxit as it  # noqa: E402
from fgxit import SRV4, check, test  # noqa: E402


@test
def window_draws_every_bucket_and_each_filters_share(env):
    _, port = env.service("win", "tcp")
    t_added = int(time.time())
    a = env.filter("win", "aaa[0-9]+")
    b = env.filter("win", "bbb[0-9]+")
    srv = env.tcp_server(port)
    for payload in (b"x aaa1", b"x aaa2", b"x aaa3", b"x bbb1"):
        c = env.tcp_client(SRV4, port, [payload])
        check(c["end"] == "reset", "%r was not blocked: %r", payload, c)
    c = env.tcp_client(SRV4, port, [b"honest"])
    check(c["end"] == "eof", "honest traffic was cut: %r", c)

    def window():
        return env.ctl("stats", "win", "--from", "-10m", "--step", "2m")

    doc = it.wait_until(lambda: window()["services"][0]["blocked"] == 4 and window(), timeout=5)
    check(doc, "the window never held the 4 blocks: %r", window())
    check(doc["step"] == 120 and doc["from"] % 60 == 0 and doc["to"] - doc["from"] <= 600 + 60,
          "the window: %r", {k: doc[k] for k in ("from", "to", "step")})
    (s,) = doc["services"]
    bk = s["buckets"]
    n = (doc["to"] - doc["from"] + 119) // 120
    check(len(bk) == n and [x["time"] for x in bk] == [doc["from"] + 120 * k for k in range(n)],
          "not every bucket is drawn: %r", [x["time"] for x in bk])
    check(s["filtering_since"] == t_added - t_added % 60, "filtering since %r, filters added %d",
          s["filtering_since"], t_added)
    before = [x for x in bk if x["time"] + 120 <= s["filtering_since"]]
    live = [x for x in bk if x["time"] + 120 > s["filtering_since"]]
    check(before and all(x["blocked"] is None and x["filters"] == [None, None] for x in before),
          "buckets before the service filtered: %r", before)
    check(live and all(isinstance(x["blocked"], int) for x in live), "live buckets: %r", live)
    check(sum(x["blocked"] for x in live) == 4 and
          sum(x["filters"][0] for x in live) == 3 and sum(x["filters"][1] for x in live) == 1,
          "bucket counts: %r", live)
    check(any(x["blocked"] == 0 for x in live) or len(live) == 1, "no quiet bucket drawn: %r",
          live)
    fl = {f["id"]: f for f in s["filters"]}
    check(fl[a]["blocked"] == 3 and abs(fl[a]["share"] - 0.75) < 1e-9 and
          fl[b]["blocked"] == 1 and abs(fl[b]["share"] - 0.25) < 1e-9 and
          fl[a]["regex"] == "aaa[0-9]+", "shares: %r", s["filters"])
    p = env.ctl_raw("stats", "win", "--from", "-10m", "--step", "2m", json_out=False)
    check(p.returncode == 0 and "(before the service filtered)" in p.stdout and
          "#%d /aaa[0-9]+/ 75.0%% (3)" % a in p.stdout and
          "#%d /bbb[0-9]+/ 25.0%% (1)" % b in p.stdout and "win: 4 blocked" in p.stdout,
          "stats --from:\n%s", p.stdout)
    # a window that ends before the blocks holds none of them
    doc = env.ctl("stats", "win", "--from", "-10m", "--to", str(t_added - 120), "--step", "60s")
    check(doc["services"][0]["blocked"] == 0, "an earlier window: %r", doc["services"][0])
    for bad in (("--step", "90s"), ("--to", "-1m", "--from", "now"), ("--from", "-3d")):
        p = env.ctl_raw("stats", "win", *(bad if "--from" in bad else ("--from", "-5m") + bad))
        check(p.returncode == 4, "%r: rc %d %s", bad, p.returncode, p.stderr)


if __name__ == "__main__":
    sys.exit(it.run_module("stats_window"))
