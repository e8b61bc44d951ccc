"""The checks of bench/soak, as pure functions of what a run recorded, so that each can be fed a
synthetic series and shown to fail (bench/soak --selftest, run by tests/integration/test_soak.py).

Every check returns (ok, detail). What a run records:
  honest   [{svc, t0, t1, ok, err}]       every honest request (monotonic seconds)
  windows  [{what, svcs, start, end}]     a restart window: from the kill until the status said
                                          running again; a request is excused when it overlaps
                                          [start, end + GRACE] and its service is in svcs
  conns    {svc: [bytes]}                 what each backend connection read, in order
  events   [{seq, service, action}]       every event seen during the run
  series   {key: [(t, value)]}            a cumulative counter, sampled
  procs    {kind: [(t, rss, fds, threads)]}
"""
import re
import statistics

GRACE = 1.0           # s after a window's end: a request started before it may still fail
RSS_ABS = 4 * 2**20   # flat memory: last-quarter median at most this much (or RSS_REL) above Q2's
RSS_REL = 0.10
FD_MED = 2            # fds: last-quarter median at most this many above Q2's ...
FD_MAX = 16           # ... and its largest at most this many above Q2's largest
THR_MAX = 2           # threads: last quarter's largest at most this many above Q2's largest
RECOVER_S = 5.0       # a killed worker (or controld) is back within this
EVIL_RES = (re.compile(rb"evil[0-9]"), re.compile(rb"pyevil"))


def excused(req, windows, grace=GRACE):
    """The window that excuses a failed request, or None."""
    for w in windows:
        if req["svc"] in w["svcs"] and req["t0"] <= w["end"] + grace and req["t1"] >= w["start"]:
            return w
    return None


def check_honest(honest, windows, expected=None, min_share=0.8):
    """No honest request failed outside a window of its service; and the load really ran
    (each service made at least min_share of the requests its rate asked for)."""
    bad, inwin, per = [], 0, {}
    for r in honest:
        per[r["svc"]] = per.get(r["svc"], 0) + 1
        if r["ok"]:
            continue
        if excused(r, windows):
            inwin += 1
        else:
            bad.append(r)
    short = ["%s %d/%d" % (s, per.get(s, 0), n) for s, n in sorted((expected or {}).items())
             if per.get(s, 0) < min_share * n]
    detail = "%d requests, %d failed inside a restart window, %d outside" % (
        len(honest), inwin, len(bad))
    if bad:
        detail += "; first outside: " + "; ".join(
            "%s t=%.1f %s" % (r["svc"], r["t0"], r.get("err")) for r in bad[:5])
    if short:
        detail += "; too few requests made: " + ", ".join(short)
    if not honest:
        detail += "; no honest request at all"
    return not bad and not short and bool(honest), detail


def evil_hits(data):
    return [m.group(0) for rx in EVIL_RES for m in [rx.search(data)] if m]


def check_evil(conns, detector_hits):
    """No backend connection read a forbidden byte sequence (the bytes that complete a match of
    a blocked regex, or the script's marker). detector_hits: what the same parser found on the
    control port no service covers, where the attacker's bytes must show: proof it sees them."""
    hits = []
    n = 0
    for svc, lst in sorted(conns.items()):
        for i, data in enumerate(lst):
            n += 1
            for h in evil_hits(data):
                hits.append("%s conn %d: %r in %r" % (svc, i + 1, h, data[:80]))
    detail = "%d backend connections read, %d with forbidden bytes; the parser found %d on the "\
        "unfiltered control port" % (n, len(hits), detector_hits)
    if hits:
        detail += ": " + "; ".join(hits[:5])
    return not hits and detector_hits > 0 and n > 0, detail


def check_events(events, blocked_delta, lost_delta):
    """No event lost: the sequence numbers seen are contiguous, every service's block events
    equal its blocked counter's growth, and no service counted a lost event."""
    seqs = sorted({e["seq"] for e in events})
    gaps = []
    for a, b in zip(seqs, seqs[1:]):
        if b != a + 1:
            gaps.append("%d..%d" % (a + 1, b - 1))
    per = {}
    for e in {e["seq"]: e for e in events}.values():
        if e.get("action") == "block":
            per[e["service"]] = per.get(e["service"], 0) + 1
    diff = ["%s: %d block events, blocked +%d" % (s, per.get(s, 0), d)
            for s, d in sorted(blocked_delta.items()) if per.get(s, 0) != d]
    lost = ["%s +%d" % (s, d) for s, d in sorted(lost_delta.items()) if d]
    detail = "%d events (seq %s..%s)" % (len(seqs), seqs[0] if seqs else "-",
                                          seqs[-1] if seqs else "-")
    if gaps:
        detail += "; gaps: " + ", ".join(gaps[:5])
    if diff:
        detail += "; " + "; ".join(diff)
    if lost:
        detail += "; events_lost: " + ", ".join(lost)
    return not gaps and not diff and not lost and bool(seqs), detail


def check_monotonic(series):
    """Every cumulative counter never goes down. Also not vacuous: some counter moved."""
    drops, moved = [], 0
    for key, pts in sorted(series.items()):
        for (t0, a), (t1, b) in zip(pts, pts[1:]):
            if b < a:
                drops.append("%s %d -> %d at t=%.1f" % (key, a, b, t1))
                break
        if pts and pts[-1][1] > pts[0][1]:
            moved += 1
    detail = "%d counters, %d of them moved, %d went down" % (len(series), moved, len(drops))
    if drops:
        detail += ": " + "; ".join(drops[:6])
    return not drops and moved > 0, detail


def quarters(pts, t_start, t_end):
    q = (t_end - t_start) / 4.0
    out = [[], [], [], []]
    for p in pts:
        i = int((p[0] - t_start) // q) if q > 0 else 0
        if 0 <= i < 4:
            out[i].append(p)
        elif i == 4:
            out[3].append(p)
    return out


def check_flat(procs, t_start, t_end, rss=True):
    """Memory and fds flat after warm-up (the first quarter): per process kind, the last
    quarter's median RSS at most max(RSS_ABS, RSS_REL of it) above the second quarter's; its
    fds' median at most FD_MED and largest at most FD_MAX above the second quarter's; its
    threads' largest at most THR_MAX above. rss=False: RSS is not checked (a sanitizer build,
    whose allocator keeps freed memory in quarantine)."""
    bad, parts = [], []
    for kind, pts in sorted(procs.items()):
        qs = quarters(pts, t_start, t_end)
        if not qs[1] or not qs[3]:
            bad.append("%s: too few samples (Q2 %d, Q4 %d)" % (kind, len(qs[1]), len(qs[3])))
            continue
        r2 = statistics.median(p[1] for p in qs[1])
        r4 = statistics.median(p[1] for p in qs[3])
        f2 = statistics.median(p[2] for p in qs[1])
        f4 = statistics.median(p[2] for p in qs[3])
        fm2, fm4 = max(p[2] for p in qs[1]), max(p[2] for p in qs[3])
        tm2, tm4 = max(p[3] for p in qs[1]), max(p[3] for p in qs[3])
        parts.append("%s rss %.1f->%.1f MiB fds %g->%g (max %d->%d) threads max %d->%d" % (
            kind, r2 / 2**20, r4 / 2**20, f2, f4, fm2, fm4, tm2, tm4))
        if rss and r4 - r2 > max(RSS_ABS, RSS_REL * r2):
            bad.append("%s rss grew %.1f MiB (%.1f -> %.1f)" % (kind, (r4 - r2) / 2**20,
                                                                r2 / 2**20, r4 / 2**20))
        if f4 - f2 > FD_MED or fm4 - fm2 > FD_MAX:
            bad.append("%s fds grew (median %g -> %g, max %d -> %d)" % (kind, f2, f4, fm2, fm4))
        if tm4 - tm2 > THR_MAX:
            bad.append("%s threads grew (max %d -> %d)" % (kind, tm2, tm4))
    detail = "; ".join(bad) if bad else "; ".join(parts)
    if not rss:
        detail = "RSS not checked (a sanitizer build); " + detail
    return not bad and bool(procs), detail


def check_windows(windows, limit=RECOVER_S):
    """Every kill and restart came back, within limit seconds."""
    slow = ["%s at t=%.1f: %s" % (w["what"], w["start"],
                                  "never back" if w.get("back") is False
                                  else "%.1f s" % (w["end"] - w["start"]))
            for w in windows if w.get("back") is False or w["end"] - w["start"] > limit]
    durs = [w["end"] - w["start"] for w in windows if w.get("back") is not False]
    detail = "%d windows, longest %.2f s" % (len(windows), max(durs) if durs else 0)
    if slow:
        detail += "; slow: " + "; ".join(slow[:5])
    return not slow, detail


def check_adopted(restarts):
    """After every controld restart the workers it found were adopted: same pids, 'adopted'."""
    bad = []
    for r in restarts:
        for kind, pid in sorted(r["before"].items()):
            after = r["after"].get(kind)
            if not after or after["pid"] != pid or not after.get("adopted"):
                bad.append("t=%.1f %s pid %d -> %s" % (r["t"], kind, pid, after))
    detail = "%d restarts, %d workers not adopted" % (len(restarts), len(bad))
    if bad:
        detail += ": " + "; ".join(bad[:5])
    return not bad, detail


STORED = "stored, but"  # fgexctl exit 6: the change is stored, the worker did not confirm it


def check_churn(ops, windows):
    """Every rule change, kill, restart and import succeeded. Excused: a control call refused
    while controld was being restarted, and a change stored but not confirmed (exit 6) by a
    worker being killed, inside that kill's window (a window that ran long is "recovery"'s)."""
    def excused_op(o):
        for w in windows:
            if not w["start"] - GRACE <= o["t"] <= w["end"] + GRACE:
                continue
            if w["what"] == "controld" or STORED in o.get("err", ""):
                return True
        return False
    bad = [o for o in ops if not o["ok"] and not excused_op(o)]
    kinds = {}
    for o in ops:
        kinds[o["kind"]] = kinds.get(o["kind"], 0) + 1
    detail = "%s; %d failed outside a controld restart" % (
        ", ".join("%s %d" % kv for kv in sorted(kinds.items())) or "none", len(bad))
    if bad:
        detail += ": " + "; ".join("%s t=%.1f %s" % (o["kind"], o["t"], o.get("err", ""))
                                   for o in bad[:5])
    return not bad and bool(ops), detail


# ---- self-test: every check passes on a clean synthetic run and fails on a broken one ------------

def _clean():
    honest = [{"svc": s, "t0": t * 1.0, "t1": t + 0.01, "ok": True, "err": None}
              for s in ("a", "b") for t in range(100)]
    windows = [{"what": "nfq", "svcs": ["a"], "start": 50.0, "end": 50.5}]
    procs = {"w": [(t, 20 * 2**20 + (t % 3) * 4096, 10 + t % 2, 4) for t in range(100)]}
    series = {"a.packets": [(t, 10 * t) for t in range(100)]}
    events = [{"seq": 100 + i, "service": "a", "action": "block"} for i in range(20)]
    return honest, windows, procs, series, events


def selftest():
    """[(name, passed_as_expected, detail)]: each check on clean data must pass, on data with
    the fault it exists to find must fail."""
    out = []

    def expect(name, res, want):
        out.append((name, res[0] == want, ("pass" if res[0] else "FAIL") + ": " + res[1]))

    honest, windows, procs, series, events = _clean()
    expect("honest clean", check_honest(honest, windows, {"a": 100, "b": 100}), True)
    h = [dict(r) for r in honest]
    h[50]["ok"] = False  # a, t=50: inside the nfq window
    expect("honest failure in window excused", check_honest(h, windows), True)
    h[150]["ok"] = False  # b, t=50: the window is not b's
    expect("honest failure outside its service's window", check_honest(h, windows), False)
    h = [dict(r) for r in honest]
    h[60]["ok"] = False  # a, t=60: after window end + grace
    expect("honest failure after the grace", check_honest(h, windows), False)
    expect("honest load short", check_honest(honest[:150], windows, {"a": 100, "b": 100}), False)

    conns = {"a": [b"GET /x", b"ev"], "b": [b"honest"]}
    expect("evil clean (a match's prefix is fine)", check_evil(conns, 1), True)
    expect("evil byte reached", check_evil(dict(conns, b=[b"GET /?q=evil1"]), 1), False)
    expect("script marker reached", check_evil(dict(conns, b=[b"..pyevil.."]), 1), False)
    expect("evil parser blind", check_evil(conns, 0), False)

    bd, ld = {"a": 20}, {"a": 0}
    expect("events clean", check_events(events, bd, ld), True)
    expect("event gap", check_events(events[:5] + events[6:], {"a": 19}, ld), False)
    expect("events fewer than blocks", check_events(events, {"a": 21}, ld), False)
    expect("events_lost counted", check_events(events, bd, {"a": 1}), False)

    expect("monotonic clean", check_monotonic(series), True)
    s = {"a.packets": series["a.packets"][:50] + [(50, 3)] + series["a.packets"][51:]}
    expect("counter went down", check_monotonic(s), False)
    expect("no counter moved", check_monotonic({"x": [(0, 5), (1, 5)]}), False)

    expect("flat clean", check_flat(procs, 0, 100), True)
    leak = {"w": [(t, 20 * 2**20 + t * 100 * 1024, 10, 4) for t in range(100)]}  # 100 KiB/s
    expect("rss leak", check_flat(leak, 0, 100), False)
    expect("rss leak not checked in a sanitizer build", check_flat(leak, 0, 100, rss=False),
           True)
    fdl = {"w": [(t, 20 * 2**20, 10 + t // 10, 4) for t in range(100)]}  # one fd per 10 s
    expect("fd leak", check_flat(fdl, 0, 100), False)
    thl = {"w": [(t, 20 * 2**20, 10, 4 + t // 10) for t in range(100)]}
    expect("thread leak", check_flat(thl, 0, 100), False)

    expect("windows clean", check_windows(windows), True)
    expect("window slow", check_windows(windows + [{"what": "proxy", "svcs": [], "start": 1.0,
                                                     "end": 9.0}]), False)
    expect("window never back", check_windows([{"what": "proxy", "svcs": [], "start": 1.0,
                                                "end": 2.0, "back": False}]), False)

    rs = [{"t": 5.0, "before": {"nfq": 10}, "after": {"nfq": {"pid": 10, "adopted": True}}}]
    expect("adopted clean", check_adopted(rs), True)
    rs2 = [{"t": 5.0, "before": {"nfq": 10}, "after": {"nfq": {"pid": 11, "adopted": False}}}]
    expect("worker not adopted", check_adopted(rs2), False)

    ops = [{"kind": "filter add", "t": 1.0, "ok": True}]
    expect("churn clean", check_churn(ops, []), True)
    w = [{"what": "controld", "svcs": [], "start": 2.0, "end": 3.0}]
    expect("churn error in a controld restart excused",
           check_churn(ops + [{"kind": "filter rm", "t": 2.5, "ok": False}], w), True)
    expect("churn error", check_churn(ops + [{"kind": "filter rm", "t": 9.0, "ok": False,
                                              "err": "x"}], w), False)
    kw = [{"what": "nfq", "svcs": [], "start": 2.0, "end": 3.0}]
    st = {"kind": "filter add", "t": 2.5, "ok": False, "err": "-> 6: stored, but the nfq worker"}
    expect("churn change stored, unconfirmed, in a kill window", check_churn(ops + [st], kw),
           True)
    expect("churn change stored, unconfirmed, outside a window",
           check_churn(ops + [dict(st, t=9.0)], kw), False)
    expect("churn change refused in a kill window",
           check_churn(ops + [dict(st, err="-> 4: bad regex")], kw), False)
    return out
