#!/usr/bin/python3
"""Integration: `fgexctl script proxy FILE --listen --to` (issue 27), a filter file run as a local
TCP proxy in front of a service, with no controld involved: honest bytes pass, a connection
whose bytes the file rejects is cut before they reach the service, the file's prints and every
verdict are printed, the file runs sandboxed under a script uid (not root), and an edit of the
file is loaded without restarting the command (new connections get the new verdict; a broken
edit is said with its line and the last good version stays)."""
import os
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fgxit as it  # noqa: E402
from fgxit import check, test  # noqa: E402

HEAD = ("import os\n"
        "from firegex.nfproxy import pyfilter, ACCEPT, REJECT\n"
        "from firegex.nfproxy.models import RawPacket\n\n"
        "@pyfilter\n"
        "def no_word(pkt: RawPacket):\n"
        "    print('judged by uid', os.getuid(), 'bytes', len(pkt.data))\n")


def rejecting(word):
    return HEAD + ("    if %r in pkt.data:\n"
                   "        return REJECT\n"
                   "    return ACCEPT\n" % word.encode())


class Proxy:
    """`fgexctl script proxy` in the server's namespace, its output gathered line by line."""

    def __init__(self, env, path, lport, sport, extra=()):
        self.lines = []
        self.lock = threading.Lock()
        self.p = subprocess.Popen(
            ["ip", "netns", "exec", env.srv, os.path.join(env.bin, "fgexctl"), "script",
             "proxy", path, "--listen", "%s:%d" % (it.SRV4, lport), "--to",
             "127.0.0.1:%d" % sport, *extra],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.t = threading.Thread(target=self._read, daemon=True)
        self.t.start()

    def _read(self):
        for ln in self.p.stdout:
            with self.lock:
                self.lines.append(ln.decode(errors="replace").rstrip("\n"))

    def text(self):
        with self.lock:
            return "\n".join(self.lines)

    def wait_for(self, words, timeout=10.0):
        """A line with every one of words, printed after start (its index), or None."""
        def find():
            with self.lock:
                for ln in self.lines:
                    if all(w in ln for w in words):
                        return ln
            return None
        return it.wait_until(find, timeout=timeout)

    def stop(self):
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.t.join(timeout=5)
        return self.p.returncode


def edit(path, text):
    # written whole, then renamed over the file, as editors save: the proxy never reads half
    tmp = path + ".new"
    with open(tmp, "w") as f:
        f.write(text)
    os.rename(tmp, path)


@test
def proxy_judges_and_reloads(env):
    sport, lport = env.port(), env.port()
    srv = env.tcp_server(sport, reply=b"pong")
    path = os.path.join(env.tmp, "proxied.py")
    edit(path, rejecting("evil"))
    px = Proxy(env, path, lport, sport)
    kids = []
    try:
        check(px.wait_for(["version 1 loaded"]), "the file did not load:\n%s", px.text())
        pid = px.p.pid
        # honest bytes pass both ways, judged: each verdict and the file's prints are printed
        c = env.tcp_client(it.SRV4, lport, [b"hello there", ("read", 0.5)])
        it.assert_passed(c, it.server_conn(srv, 1), b"hello there", b"pong")
        check(px.wait_for(["c2s 11 bytes: accept"]), "no accept verdict:\n%s", px.text())
        line = px.wait_for(["print", "judged by uid"])
        check(line, "the file's print was not shown:\n%s", px.text())
        uid = int(line.split("judged by uid")[1].split()[0])
        check(uid != 0 and uid != os.getuid(), "the file ran as uid %d (root?)", uid)
        # the evil bytes are cut before the service sees them
        c = env.tcp_client(it.SRV4, lport, [b"some evil here", 1.0])
        it.assert_blocked(c, it.server_conn(srv, 2), forbidden=b"evil")
        check(px.wait_for(["c2s 14 bytes: REJECT by no_word", "connection cut"]),
              "no REJECT verdict:\n%s", px.text())
        # the file changes: the new verdict holds, with the same command running
        edit(path, rejecting("nasty"))
        check(px.wait_for(["version 2 loaded"]), "the edit was not loaded:\n%s", px.text())
        check(px.p.poll() is None and px.p.pid == pid, "the command restarted or ended")
        c = env.tcp_client(it.SRV4, lport, [b"evil is fine now", ("read", 0.5)])
        it.assert_passed(c, it.server_conn(srv, 3), b"evil is fine now", b"pong")
        c = env.tcp_client(it.SRV4, lport, [b"a nasty one", 1.0])
        it.assert_blocked(c, it.server_conn(srv, 4), forbidden=b"nasty")
        # a broken edit is said with its line; new connections keep the version that loaded
        edit(path, rejecting("nasty") + "def broken(:\n")
        check(px.wait_for(["version 3 did not load", "keep the version"]),
              "the broken edit was not said:\n%s", px.text())
        check(px.wait_for(["the file did not load: line 11", "syntax"]),
              "no line and reason for the broken edit:\n%s", px.text())
        c = env.tcp_client(it.SRV4, lport, [b"nasty again", 1.0])
        it.assert_blocked(c, it.server_conn(srv, 5), forbidden=b"nasty")
        check(px.wait_for(["#5 ", "connected (version 2)"]),
              "a new connection did not keep version 2:\n%s", px.text())
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            kids = [int(k) for k in f.read().split()]
        check(kids and all("scriptworker" in open("/proc/%d/cmdline" % k).read() for k in kids),
              "the proxy's children %r are not its scriptworker", kids)
    finally:
        rc = px.stop()
        if os.environ.get("FGX_IT_VERBOSE"):
            print(px.text())
    check(rc == 0 and "stopped" in px.text(), "the command did not stop cleanly (rc %r):\n%s",
          rc, px.text()[-2000:])
    # its scriptworker went with it
    check(all(it.proc_state(k) is None for k in kids), "its scriptworker %r stayed", kids)


@test
def proxy_passes_a_files_edit(env):
    """A file that edits a chunk (UNSTABLE_MANGLE): the service reads the edited bytes, longer
    than the chunk, the client the edited answer, and the edit is printed."""
    sport, lport = env.port(), env.port()
    srv = env.tcp_server(sport, reply=b"secret answer")
    path = os.path.join(env.tmp, "editing.py")
    edit(path, "from firegex.nfproxy import pyfilter, UNSTABLE_MANGLE\n"
               "from firegex.nfproxy.models import RawPacket\n\n"
               "@pyfilter\n"
               "def swap(pkt: RawPacket):\n"
               "    n = pkt.l4_data.replace(b'cat', b'a longer dog').replace(b'secret', b'public')\n"
               "    if n != pkt.l4_data:\n"
               "        pkt.l4_data = n\n"
               "        return UNSTABLE_MANGLE\n")
    px = Proxy(env, path, lport, sport)
    try:
        check(px.wait_for(["version 1 loaded"]), "the file did not load:\n%s", px.text())
        c = env.tcp_client(it.SRV4, lport, [b"the cat sat", ("read", 0.5)])
        it.assert_passed(c, it.server_conn(srv, 1), b"the a longer dog sat", b"public answer")
        check(px.wait_for(["c2s 11 bytes: edited by swap to 20 bytes"]),
              "no edit verdict:\n%s", px.text())
        check(px.wait_for(["s2c 13 bytes: edited by swap to 13 bytes"]),
              "no edit verdict for the answer:\n%s", px.text())
    finally:
        px.stop()


@test
def proxy_refused_without_root(env):
    path = os.path.join(env.tmp, "any.py")
    edit(path, rejecting("evil"))
    os.chmod(env.tmp, 0o755)
    os.chmod(path, 0o644)
    # (HOME: fgexctl reads the caller's contexts; root's are not nobody's to read)
    r = subprocess.run(["env", "HOME=/", "setpriv", "--reuid", "65534", "--regid", "65534",
                        "--clear-groups", os.path.join(env.bin, "fgexctl"), "script", "proxy", path, "--listen",
                        "127.0.0.1:%d" % env.port(), "--to", "127.0.0.1:9"],
                       capture_output=True, text=True, timeout=20)
    os.chmod(env.tmp, 0o711)
    check(r.returncode != 0 and "run it as root" in r.stderr and "sandbox" in r.stderr,
          "not root: rc %d %r", r.returncode, r.stderr)
    r = env.ctl_raw("script", "proxy", path, "--listen", "nowhere", "--to", "127.0.0.1:9",
                    json_out=False)
    check(r.returncode == 4 and "--listen takes ADDR:PORT" in r.stderr, "bad --listen: %d %r",
          r.returncode, r.stderr)


if __name__ == "__main__":
    sys.exit(it.run_module("script_proxy"))
