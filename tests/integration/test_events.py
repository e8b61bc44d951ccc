#!/usr/bin/python3
"""Integration: match events (issues 3 and 13). Every block becomes an event with its time,
service, filter, direction, the flow's addresses and ports and the bytes around the match end;
`fgexctl events --json` lists them and `events --follow --json` streams new ones. A burst of
thousands of blocks gives exactly as many events as the filters counted blocks.

The excerpt holds up to 64 bytes before the point where hyperscan reported the match end (for
`evil[0-9]+` after its first digit) and up to 32 after it, as far as the matching segment or
datagram goes: the short payloads here are in it whole."""
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fgxit as it  # noqa: E402
from fgxit import CLI4, CLI6, EVIL, SRV4, SRV6, check, test  # noqa: E402

FIELDS = ("seq", "time", "time_ns", "service_id", "service", "filter_id", "dir", "proto", "src",
          "sport", "dst", "dport", "excerpt_hex")
LEAK_RE = r"leak\{[a-z]+\}"


def events(env, *args):
    doc = env.ctl("events", *args)
    check(isinstance(doc, list), "events --json is not an array: %r", doc)
    for e in doc:
        for k in FIELDS:
            check(k in e, "event has no %r: %r", k, e)
        # the excerpt's bytes: a string when they are valid UTF-8, else base64
        check(("excerpt" in e) != ("excerpt_b64" in e), "event has not exactly one of "
              "excerpt, excerpt_b64: %r", e)
    return doc


def wait_event(env, name, pred, timeout=3):
    """The first event of service name that satisfies pred, polling until it arrives."""
    got = it.wait_until(lambda: [e for e in events(env, name) if pred(e)], timeout=timeout)
    check(got, "no such event of %s within %ss; events: %s", name, timeout,
          json.dumps(events(env, name))[:600])
    check(len(got) == 1, "one block gave %d events: %r", len(got), got)
    return got[0]


def excerpt(e):
    return bytes.fromhex(e["excerpt_hex"])


@test
def block_recorded_as_event(env):
    sid, port = env.service("ev-tcp", "tcp")
    fid = env.filter("ev-tcp")
    fleak = env.filter("ev-tcp", LEAK_RE, dir="c2s")
    srv = env.tcp_server(port)
    t0 = time.time_ns()
    c, sport4 = env.tcp_conn(SRV4, port, [b"GET /?q=" + EVIL + b" HTTP/1.0\r\n"])
    it.assert_blocked(c, it.server_conn_of(srv, sport4))
    c, sport6 = env.tcp_conn(SRV6, port, [b"POST /x leak{secret} tail"])
    it.assert_blocked(c, it.server_conn_of(srv, sport6), forbidden=b"leak{secret}")
    t1 = time.time_ns()

    e = wait_event(env, "ev-tcp", lambda x: x["sport"] == sport4)
    check(e["service"] == "ev-tcp" and e["service_id"] == sid, "event service %r/%r",
          e["service"], e["service_id"])
    check(e["filter_id"] == fid, "event filter %r, expected %r", e["filter_id"], fid)
    check(e["dir"] == "c2s" and e["proto"] == "tcp", "event dir/proto %r/%r", e["dir"],
          e["proto"])
    check(e["src"] == CLI4 and e["dst"] == SRV4 and e["dport"] == port,
          "event flow %s:%s -> %s:%s, expected %s:%d -> %s:%d", e["src"], e["sport"], e["dst"],
          e["dport"], CLI4, sport4, SRV4, port)
    check(t0 - 10**9 <= e["time_ns"] <= t1 + 10**9, "event time %d outside [%d, %d]",
          e["time_ns"], t0, t1)
    check(excerpt(e) == b"GET /?q=" + EVIL + b" HTTP/1.0\r\n",
          "excerpt %r is not the payload around the match end", excerpt(e))
    check("evil1" in e["excerpt"], "printable excerpt %r", e["excerpt"])
    # match_end marks where in the excerpt hyperscan reported the end of the match: the first
    # point where evil[0-9]+ matches, after "evil1"
    check(e.get("match_end") == len(b"GET /?q=evil1"),
          "match_end %r is not where evil[0-9]+ first matches in %r", e.get("match_end"),
          excerpt(e))

    e6 = wait_event(env, "ev-tcp", lambda x: x["sport"] == sport6)
    check(e6["filter_id"] == fleak and e6["dir"] == "c2s", "v6 event filter/dir %r/%r",
          e6["filter_id"], e6["dir"])
    check(e6["src"] == CLI6 and e6["dst"] == SRV6 and e6["dport"] == port,
          "v6 event flow %s:%s -> %s:%s", e6["src"], e6["sport"], e6["dst"], e6["dport"])
    check(excerpt(e6) == b"POST /x leak{secret} tail", "v6 excerpt %r", excerpt(e6))
    check(e6["seq"] > e["seq"], "seq %r after %r", e6["seq"], e["seq"])

    # --limit keeps the newest; SERVICE filters
    last = events(env, "ev-tcp", "--limit", "1")
    check(len(last) == 1 and last[0]["seq"] == e6["seq"], "events --limit 1: %r", last)
    env.service("ev-quiet", "tcp")
    check(events(env, "ev-quiet") == [], "a service without blocks has events")
    every = events(env)
    check({e["seq"], e6["seq"]} <= {x["seq"] for x in every}, "events without SERVICE: %r",
          every)
    p = env.ctl_raw("events", "--limit", "0")
    check(p.returncode != 0, "events --limit 0 accepted")


@test
def server_reply_block_is_s2c_event(env):
    _, port = env.service("ev-s2c", "tcp")
    fid = env.filter("ev-s2c", dir="s2c")
    srv = env.tcp_server(port, reply=b"flag=" + EVIL)
    c, sport = env.tcp_conn(SRV4, port, [b"hello", ("read", 0.5)])
    it.assert_blocked(c, it.server_conn_of(srv, sport))
    e = wait_event(env, "ev-s2c", lambda x: sport in (x["sport"], x["dport"]))
    check(e["dir"] == "s2c" and e["filter_id"] == fid, "event dir/filter %r/%r", e["dir"],
          e["filter_id"])
    check({e["src"], e["dst"]} == {CLI4, SRV4} and {e["sport"], e["dport"]} == {sport, port},
          "event flow %s:%s %s:%s", e["src"], e["sport"], e["dst"], e["dport"])
    check(excerpt(e) == b"flag=" + EVIL, "excerpt %r", excerpt(e))


@test
def udp_drop_recorded_as_event(env):
    _, port = env.service("ev-udp", "udp")
    fid = env.filter("ev-udp")
    usrv = env.udp_server(port)
    env.udp_client(SRV4, port, [b"dgram " + EVIL, b"fine"])
    it.wait_until(lambda: it.dgrams(usrv), timeout=1)
    check(it.dgrams(usrv) == [b"fine"], "udp server got %r", it.dgrams(usrv))
    e = wait_event(env, "ev-udp", lambda x: True)
    check(e["proto"] == "udp" and e["dir"] == "c2s" and e["filter_id"] == fid,
          "udp event %r", e)
    check(e["src"] == CLI4 and e["dst"] == SRV4 and e["dport"] == port, "udp event flow %r", e)
    check(excerpt(e) == b"dgram " + EVIL, "udp excerpt %r", excerpt(e))


@test
def follow_shows_new_block_within_2s(env):
    _, port = env.service("ev-follow", "tcp")
    fid = env.filter("ev-follow")
    srv = env.tcp_server(port)
    # history first: --follow may print it, then must go on with the new ones
    c, old_sport = env.tcp_conn(SRV6, port, [b"old " + EVIL])
    it.assert_blocked(c, it.server_conn_of(srv, old_sport))
    wait_event(env, "ev-follow", lambda x: x["sport"] == old_sport)
    argv = [os.path.join(env.bin, "fgexctl"), "-c", env.url, "--json", "events", "ev-follow",
            "--follow"]
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in p.stdout], daemon=True).start()

    def next_event(deadline):
        try:
            line = lines.get(timeout=max(0.01, deadline - time.monotonic()))
        except queue.Empty:
            return None
        try:
            return json.loads(line)
        except ValueError as e:
            raise AssertionError("events --follow --json printed %r" % line) from e

    try:
        time.sleep(0.5)  # let it subscribe
        if p.poll() is not None:
            raise AssertionError("events --follow exited with %d: %r" %
                                 (p.returncode, p.stderr.read()[:300]))
        c, sport = env.tcp_conn(SRV4, port, [b"new " + EVIL])
        t_block = time.monotonic()
        it.assert_blocked(c, it.server_conn_of(srv, sport))
        deadline = t_block + 2.0
        seen = []
        while True:
            e = next_event(deadline)
            if e is None:
                break
            seen.append(e)
            if e.get("sport") == sport:
                break
        check(seen and seen[-1].get("sport") == sport,
              "events --follow showed no event for port %d within 2 s of the block: %r",
              sport, seen)
        e = seen[-1]
        for k in FIELDS:
            check(k in e, "followed event has no %r: %r", k, e)
        check(e["filter_id"] == fid and e["service"] == "ev-follow" and e["src"] == CLI4,
              "followed event %r", e)
        check(excerpt(e) == b"new " + EVIL, "followed excerpt %r", excerpt(e))
        check(all(x.get("sport") != old_sport for x in seen[1:]), "old event repeated: %r",
              seen)
    finally:
        p.send_signal(signal.SIGINT)
        try:
            p.wait(3)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(2)
            raise AssertionError("events --follow did not stop on SIGINT")


def burst(env, name, count, parallel, extra=()):
    """count connections to a new service that each send a blocked payload, as fast as the
    client goes; then every block counted must be an event in controld's store."""
    _, port = env.service(name, "tcp", extra=extra)
    fid = env.filter(name)
    env.helper(env.srv, "burst-server", "--port", port).wait_event(
        lambda e: e.get("event") == "listening", 5)
    before = b"A" * 80 + b"GET /?q="
    after = b" and what came next, beyond 32 bytes"
    h = env.helper(env.cli, "burst-client", "--host", SRV4, "--port", port, "--count", count,
                   "--parallel", parallel, "--send", (before + EVIL + after).hex())
    r = h.wait_event(lambda e: e.get("event") == "result", 120)
    check(r is not None, "burst client gave no result: %s", h.stderr)
    check(r["reset"] >= count * 0.95, "only %d of %d connections were reset: %r", r["reset"],
          count, r)

    def blocked():
        fl = env.filters(name)
        return sum(f.get("blocked", 0) for f in fl if f.get("id") == fid)

    # The counters and the events come with the same reports: wait until both settle.
    state = {}

    def settled():
        b = blocked()
        evs = env.ctl("events", name, "--limit", count * 2)
        state.update(blocked=b, events=evs)
        return b >= r["reset"] and len(evs) == b

    it.wait_until(settled, timeout=10, step=0.5)
    b, evs = state["blocked"], state["events"]
    check(b >= r["reset"], "filter counted %d blocks for %d resets", b, r["reset"])
    check(len(evs) == b, "%d events stored for %d blocks counted (%.1f s burst): lost %d",
          len(evs), b, r["seconds"], b - len(evs))
    check(len({e["seq"] for e in evs}) == len(evs), "an event listed twice")
    x = excerpt(evs[-1])
    # 64 bytes before the match end (just after "evil1") and 32 after it
    check(x == (before + EVIL + after)[len(before) + 5 - 64:len(before) + 5 + 32],
          "excerpt %r is not 64 bytes before the match end and 32 after", x)
    return r


@test
def burst_of_blocks_all_stored_nfqueue(env):
    r = burst(env, "ev-burst", 2000, 64)
    sys.stderr.write("    nfqueue: 2000 blocked connections in %.1f s, all stored\n" %
                     r["seconds"])


@test
def burst_of_blocks_all_stored_proxy(env):
    r = burst(env, "ev-burst-px", 500, 32, extra=("--layer", "proxy"))
    sys.stderr.write("    proxy: 500 blocked connections in %.1f s, all stored\n" %
                     r["seconds"])


if __name__ == "__main__":
    sys.exit(it.run_module("events"))
