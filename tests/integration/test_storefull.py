"""A full disk under the state store (issue 24, item 7): status and the health log say that the
store is degraded (what failed, since when), the events wait in memory and are all written once
there is room again, and a clean stop on a full disk loses none of them.

Each test puts controld's state directory on a small tmpfs it mounts under its own temp
directory and unmounts at the end, fills it with a file, and makes blocks (events) with a burst
of connections that each send the evil bytes.
"""
import os
import signal
import sys
import time

import fgxit as it
from fgxit import EVIL, SRV4, check, test


_fill = it.fill_disk


class SmallDisk:
    """controld restarted with its state on a tmpfs of `size`; put back as it was on exit."""

    def __init__(self, env, tag, size="8m"):
        self.env, self.dir = env, os.path.join(env.tmp, "disk-" + tag)
        self.size, self.saved = size, env.state_dir
        self.filler = os.path.join(self.dir, "filler")

    def __enter__(self):
        self.env.stop_controld(signal.SIGTERM)
        os.makedirs(self.dir)
        it.sh("mount", "-t", "tmpfs", "-o", "size=%s,mode=0700" % self.size, "fgx-it-sf",
              self.dir)
        self.env.state_dir = self.dir
        self.env.start_controld()
        return self

    def fill(self):
        _fill(self.filler)

    def free(self):
        os.unlink(self.filler)

    def __exit__(self, *exc):
        self.env.stop_controld(signal.SIGTERM, check=False)
        it.sh("umount", "-l", self.dir, check=False)
        self.env.state_dir = self.saved
        self.env.start_controld()


def blocks(env, port, count):
    """count connections that each send the evil bytes; returns how many were reset."""
    h = env.helper(env.cli, "burst-client", "--host", SRV4, "--port", port, "--count", count,
                   "--parallel", 32, "--send", (b"GET /?q=" + EVIL + b" HTTP/1.0\r\n").hex())
    r = h.wait_event(lambda e: e.get("event") == "result", 120)
    check(r is not None, "burst client gave no result: %s", h.stderr)
    check(r["reset"] >= count * 0.95, "only %d of %d connections were reset", r["reset"], count)
    return r["reset"]


def service(env, name):
    _, port = env.service(name, "tcp")
    fid = env.filter(name)
    env.helper(env.srv, "burst-server", "--port", port).wait_event(
        lambda e: e.get("event") == "listening", 5)
    return port, fid


def counted(env, name, fid):
    return sum(f.get("blocked", 0) for f in env.filters(name) if f.get("id") == fid)


def events(env, name):
    return env.ctl("events", name, "--limit", 100000)


def settle(env, name, fid):
    """Until every block counted is an event (the workers' reports are in): the count."""
    state = {}

    def ok():
        state["b"], state["e"] = counted(env, name, fid), len(events(env, name))
        return state["b"] > 0 and state["b"] == state["e"]
    it.wait_until(ok, timeout=10, step=0.5)
    check(state["b"] == state["e"], "%d blocks counted, %d events", state["b"], state["e"])
    return state["b"]


def store(env):
    s = env.ctl("status").get("store")
    check(isinstance(s, dict), "status --json has no store object: %r", s)
    return s


def log_text(env):
    with open(env.log_path, "rb") as f:
        return f.read().decode(errors="replace")


@test
def a_full_disk_shows_in_status_and_every_event_is_written_when_room_returns(env):
    with SmallDisk(env, "deg") as disk:
        port, fid = service(env, "sf-deg")
        blocks(env, port, 20)
        first = settle(env, "sf-deg", fid)
        check(not store(env)["degraded"], "degraded before the disk filled: %r", store(env))
        t_full = int(time.time())
        disk.fill()
        blocks(env, port, 400)
        total = settle(env, "sf-deg", fid)
        check(total >= first + 380, "only %d blocks after the burst", total - first)
        st = it.wait_until(lambda: (lambda s: s if s["degraded"] else None)(store(env)),
                           timeout=8)
        check(st, "status never said the store is degraded: %r", store(env))
        check("no space left" in (st["error"] or ""), "store error %r", st["error"])
        check(st["failed"] == "saving events and counters", "what failed: %r", st["failed"])
        check(t_full - 5 <= st["since"] <= int(time.time()), "since %r (filled at %d)",
              st["since"], t_full)
        check(st["failures"] >= 1, "failures %r", st["failures"])
        check(st["events_unsaved"] > 0, "no event waits in memory: %r", st)
        txt = env.ctl_raw("status", json_out=False).stdout
        check("store:     DEGRADED since" in txt and "no space left" in txt,
              "fgexctl status does not show it: %r", txt)
        check("events:    %d in memory only" % st["events_unsaved"] in txt or
              "in memory only" in txt, "fgexctl status does not show the unsaved events: %r", txt)
        check("health: service 0 store-full: the state store cannot write" in log_text(env),
              "no store-full health entry in controld's log")
        check(len(events(env, "sf-deg")) == total, "events listed on a full disk: %d of %d",
              len(events(env, "sf-deg")), total)

        disk.free()
        ok = it.wait_until(lambda: not store(env)["degraded"], timeout=10, step=0.5)
        check(ok, "status still degraded after the space came back: %r", store(env))
        check(store(env)["events_unsaved"] == 0, "events still unsaved: %r", store(env))
        check("health: service 0 store-ok: the state store writes again" in log_text(env),
              "no store-ok health entry in controld's log")
        check("store:     ok" in env.ctl_raw("status", json_out=False).stdout,
              "fgexctl status does not say the store is ok again")
        # written, not only in memory: a restarted controld reads them all from the store
        rc = env.stop_controld(signal.SIGTERM)
        check(rc == 0, "controld exited with %r", rc)
        env.start_controld()
        evs = events(env, "sf-deg")
        check(len(evs) == total, "%d events stored of %d blocks", len(evs), total)
        check(len({e["seq"] for e in evs}) == total, "an event seq twice")


@test
def a_clean_stop_on_a_full_disk_loses_no_event(env):
    with SmallDisk(env, "stop") as disk:
        port, fid = service(env, "sf-stop")
        disk.fill()
        blocks(env, port, 355)
        total = settle(env, "sf-stop", fid)
        check(it.wait_until(lambda: store(env)["degraded"], timeout=8),
              "the store never degraded: %r", store(env))
        check(store(env)["events_unsaved"] > 0, "nothing waits in memory: %r", store(env))
        env.log_offset = os.path.getsize(env.log_path)
        rc = env.stop_controld(signal.SIGTERM)
        check(rc == 0, "controld exited with %r on a full disk", rc)
        tail = log_text(env)[-20000:]
        check("events-lost" not in tail, "controld says it lost events at the stop:\n%s",
              tail[-1500:])
        check("were written at the stop" in tail, "no word of the events written at the stop:\n%s",
              tail[-1500:])
        # the disk is still full: the events were written, not kept somewhere for later
        env.start_controld()
        evs = events(env, "sf-stop")
        check(len(evs) == total, "after a stop on a full disk %d events of %d blocks are stored "
              "(lost %d)", len(evs), total, total - len(evs))
        check(counted(env, "sf-stop", fid) == total, "the block counter fell back: %d of %d",
              counted(env, "sf-stop", fid), total)
        disk.free()


if __name__ == "__main__":
    sys.exit(it.run_module("storefull"))
