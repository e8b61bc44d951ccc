"""The interpreter side of scriptworker: one Python process, its C parent's child. The
data-path threads connect to it directly (fgx/swproto.h): fd 4 is its listening
SOCK_SEQPACKET socket (the parent's, kept across the interpreters it replaces), each thread a
socket of its own, read as messages of one or more frames and answered in order, one message
per batch. fd 3 is a small shared page (fgx_sw_page) naming the call being run, so that a
parent that has to kill this process past the deadline knows whose call it was. stdin is the
parent's life: it ends, this ends.

A frame is a header (type u8, code u8, flags u16, service u32, conn u64, seq u32, len u32,
little-endian) and len bytes."""
import io
import mmap
import os
import select
import socket
import struct
import sys
import time
import traceback

HDR = struct.Struct("<BBHIQII")
(T_SCRIPT, T_UNSCRIPT, T_OPEN, T_DATA, T_CLOSE, T_VERDICT, T_LOG, T_ACK, T_HELLO) = range(1, 10)
V_ACCEPT, V_REJECT, V_DROP, V_ERROR, V_TIMEOUT, V_EDIT = range(6)
D_OPEN, D_V6, D_ADDR, D_NOEDIT, D_UDP = 2, 4, 8, 16, 32  # DATA code bits (fgx/swproto.h)
ADDR = struct.Struct("<16s16sHH")  # FGX_SW_DATA_ADDR: client, server addresses and ports
EDIT_MAX = 60000  # an EDIT verdict's bytes: its frame fits in FGX_SW_REPLY_MAX
F_FINAL = 1  # VERDICT flag (fgx/swproto.h FGX_SW_VERDICT_FINAL): later chunks need no call
F_NOFILE = 2  # VERDICT flag (FGX_SW_VERDICT_NOFILE): ERROR because the service has no file here
NOFILE_LOG_S = 5.0  # a service's "no file here" log entry: at most one per interval
CODES = {"accept": V_ACCEPT, "reject": V_REJECT, "drop": V_DROP, "error": V_ERROR}
# fgx_sw_page: start_ns u64, link u64, conn u64, seq u32, service u32, deadline_ms u32,
# calls u32, nscripts u32, function char[128]
PAGE_CALL = struct.Struct("<QQIIII")  # link, conn, seq, service, deadline_ms, calls: at 8
PAGE_START = struct.Struct("<Q")
PAGE_NSCRIPTS = struct.Struct("<I")
OFF_NSCRIPTS, OFF_FN = 40, 44
MSG_MAX = (1 << 21) + 65536  # FGX_SW_MSG_MAX
REPLY_MAX = 65536  # FGX_SW_REPLY_MAX: a thread reads no longer message
LOG_TEXT_MAX = 8192
BATCH = 64  # messages read before the answers waiting go, even if more are there


class _Out:
    """What the scripts print: gathered per call, sent as one log frame."""

    def __init__(self):
        self.buf = io.StringIO()

    def write(self, s):
        self.buf.write(s)
        return len(s)

    def flush(self):
        pass

    def take(self):
        v = self.buf.getvalue()
        if v:
            self.buf = io.StringIO()
        return v


class Link:
    """One data-path thread's socket: its id (HELLO), its number here, what goes back."""

    def __init__(self, sock, no):
        self.sock = sock
        self.no = no
        self.id = 0
        self.out = []
        self.outlen = 0


def main():
    cap = _Out()
    sys.stdout = sys.stderr = cap  # a script's prints become log entries, never frames
    try:
        page = mmap.mmap(3, 256)
    except (OSError, ValueError):
        page = None
    lsock = socket.socket(fileno=4)
    lsock.setblocking(False)
    from fgex.engine import Conn, Script, ScriptError
    import fgex.engine as engine

    scripts = {}   # service id -> (Script, payload it came from, deadline ms)
    refused = {}   # service id -> (payload, deadline ms) of a file that did not load
    # service id -> {link number here: (payload, deadline) it sent last}, for the links that
    # sent the service's file and no UNSCRIPT since. The tables above are this interpreter's,
    # shared by every thread of both workers: a service moved from one layer to the other is
    # UNSCRIPTed by the old layer's threads while the new layer's have sent it (in either
    # order), so a file goes only when the last link that sent it takes it back (or goes).
    # A call for a service with no file loaded loads the one its link sent again (said: it
    # should not happen), or asks the link for it (F_NOFILE).
    holders = {}
    nofile_logged = {}  # service id -> when its last "no file here" entry was logged
    conns = {}     # (link no << 48) ^ conn -> (service id, Conn or is_ipv6 until its first chunk)
    links = {}     # fd -> Link
    buf = bytearray(MSG_MAX)
    view = memoryview(buf)
    ep = select.epoll()
    ep.register(lsock.fileno(), select.EPOLLIN)
    ep.register(0, select.EPOLLIN)
    serial = [0]
    ncalls = [0]

    def put(link, t, code, svc, conn, seq, payload=b"", flags=0):
        b = HDR.pack(t, code, flags, svc, conn, seq, len(payload)) + payload
        if link.outlen + len(b) > REPLY_MAX:
            flush(link)
        link.out.append(b)
        link.outlen += len(b)

    def flush(link):
        if not link.out:
            return
        data = b"".join(link.out)
        link.out = []
        link.outlen = 0
        try:
            link.sock.send(data)
        except BlockingIOError:
            # a thread that lags: a little wait, then its own timers decide
            select.select([], [link.sock], [], 0.2)
            try:
                link.sock.send(data)
            except OSError:
                pass
        except OSError:
            pass  # it went: its socket's end is read next

    def log(link, svc, kind, fn, text, conn=0):
        """conn: the call's connection (the thread adds its addresses to the entry)."""
        t = text.encode("utf-8", "replace")
        if len(t) > LOG_TEXT_MAX:
            t = t[:LOG_TEXT_MAX // 2] + b"\n...\n" + t[-LOG_TEXT_MAX // 2:]
        put(link, T_LOG, 0, svc, conn, 0, b"%s\0%s\0%s" % (kind.encode(), fn.encode(), t))

    def mark_fn(fn):
        if page is not None:
            b = fn.encode()[:126] + b"\0"
            page[OFF_FN:OFF_FN + len(b)] = b

    # the engine calls each function through here, so the page names it while it runs
    orig_call_all = engine.Conn._call_all

    def call_all(self, name, func, args):
        mark_fn(name)
        return orig_call_all(self, name, func, args)

    engine.Conn._call_all = call_all

    def set_nscripts():
        if page is not None:
            PAGE_NSCRIPTS.pack_into(page, OFF_NSCRIPTS, len(scripts))

    def forget(svc):
        scripts.pop(svc, None)
        refused.pop(svc, None)
        holders.pop(svc, None)
        set_nscripts()
        for cid in [k for k, (s_, _) in conns.items() if s_ == svc]:
            del conns[cid]

    def let_go(link, svc):
        h = holders.get(svc)
        if h is not None:
            h.pop(link.no, None)
        if not h:
            forget(svc)

    def say_error(link, svc, text):
        """A call failed for every connection of the service: said (a log entry, "error":
        controld notes it and `script list` shows it), at most once per NOFILE_LOG_S."""
        now = time.monotonic()
        if now - nofile_logged.get(svc, -NOFILE_LOG_S) >= NOFILE_LOG_S:
            nofile_logged[svc] = now
            log(link, svc, "error", "", text)

    def load(link, svc, payload, deadline):
        """payload (the SCRIPT frame's) as svc's file; False (logged) when it does not load.
        Open connections keep no state of the old file."""
        refused.pop(svc, None)
        # payload: u16 count of disabled names, each u16 len + name, then the source
        n = struct.unpack_from("<H", payload, 0)[0]
        off, off_names = 2, []
        for _ in range(n):
            k = struct.unpack_from("<H", payload, off)[0]
            off_names.append(payload[off + 2:off + 2 + k].decode())
            off += 2 + k
        ok = True
        try:
            scripts[svc] = (Script(payload[off:].decode("utf-8", "replace"),
                                   "service-%d.py" % svc, off_names), payload, deadline)
            for line, text in scripts[svc][0].warnings:
                log(link, svc, "warning", "", "line %d: %s" % (line, text))
        except ScriptError as e:
            log(link, svc, "exception", "", "the file did not load: line %d: %s" % (e.line,
                                                                                   e.reason))
            scripts.pop(svc, None)
            refused[svc] = (payload, deadline)
            ok = False
        set_nscripts()
        for cid in [k for k, (s_, _) in conns.items() if s_ == svc]:
            del conns[cid]
        return ok

    def on_script(link, svc, seq, deadline, payload):
        mine = holders.setdefault(svc, {})
        old = scripts.get(svc)
        # every thread sends the same file: it is loaded once, and the connections already
        # under it keep their state
        if old is not None and old[1] == payload and old[2] == deadline:
            mine[link.no] = (old[1], old[2])
            put(link, T_ACK, 0, svc, 0, seq)
            return
        mine[link.no] = (payload, deadline)
        if refused.get(svc) == (payload, deadline):
            put(link, T_ACK, 1, svc, 0, seq)  # said once, to the thread that sent it first
            return
        put(link, T_ACK, 0 if load(link, svc, payload, deadline) else 1, svc, 0, seq)

    def file_back(link, svc, conn, seq):
        """A call for a service with no file loaded here: the file this link sent is loaded
        again (True), or the call fails (said, and with F_NOFILE when the link sent none
        here: it sends its files again)."""
        mine = holders.get(svc, {}).get(link.no)
        if mine is not None and refused.get(svc) != mine and load(link, svc, *mine):
            say_error(link, svc, "the service's file was not loaded in the script interpreter "
                      "(lost track of): loaded again from what the worker had sent")
            return True
        bad = mine is not None
        why = ("the service's file did not load in the script interpreter" if bad else
               "the service's file is not loaded in the script interpreter")
        say_error(link, svc, why + ": its connections get the service's fail-open choice" +
                  ("" if bad else "; the worker sends the file again"))
        put(link, T_VERDICT, V_ERROR, svc, conn, seq, b"\0" + why.encode(),
            0 if bad else F_NOFILE)
        return False

    def on_data(link, code, svc, conn, seq, payload):
        key = (link.no << 48) ^ conn
        if svc not in scripts:
            conns.pop(key, None)
            if not file_back(link, svc, conn, seq):
                return
        sc = scripts[svc]
        ent = conns.get(key)
        addrs = None
        if code & D_ADDR and len(payload) >= ADDR.size:
            ca, sa, cp, sp = ADDR.unpack_from(payload, 0)
            payload = payload[ADDR.size:]
            fam, n = (socket.AF_INET6, 16) if code & D_V6 else (socket.AF_INET, 4)
            addrs = (socket.inet_ntop(fam, ca[:n]), cp, socket.inet_ntop(fam, sa[:n]), sp)
        if ent is None and code & D_OPEN:  # the first chunk opens it
            ent = conns[key] = (svc, (bool(code & D_V6), addrs))
        if ent is None:
            put(link, T_VERDICT, V_ERROR, svc, conn, seq, b"\0connection state lost")
            return
        if page is not None:
            ncalls[0] = (ncalls[0] + 1) & 0xffffffff
            PAGE_CALL.pack_into(page, 8, link.id, conn, seq, svc, sc[2], ncalls[0])
            PAGE_START.pack_into(page, 0, time.monotonic_ns())  # last: the call is named
        try:
            c = ent[1]
            if not isinstance(c, Conn):
                try:
                    c = Conn(sc[0], is_ipv6=c[0], addrs=c[1] or addrs,
                             l4="udp" if code & D_UDP else "tcp")
                except Exception:
                    log(link, svc, "exception", "", traceback.format_exc(), conn)
                    conns.pop(key, None)
                    put(link, T_VERDICT, V_ERROR, svc, conn, seq,
                        b"\0the file's module code failed")
                    return
                c.fgx_svc = svc
                conns[key] = (svc, c)
            v = c.feed((code & 1) == 0, payload)
        finally:
            if page is not None:
                PAGE_START.pack_into(page, 0, 0)
        out = cap.take()
        if out:
            log(link, svc, "print", v.function, out)
        if v.action == "mangle":
            if code & D_NOEDIT and code & D_UDP:
                v = engine.Verdict("error", v.function, "%s edited the datagram (UNSTABLE_MANGLE "
                                   "/ l4_data / data): its IP and UDP headers pass what the "
                                   "NFQUEUE layer keeps to rewrite it (IP options, IPv6 "
                                   "extension headers): it gets the service's fail policy; put "
                                   "the service on the proxy layer to edit" % v.function)
            elif code & D_NOEDIT:
                v = engine.Verdict("error", v.function, "%s edited the chunk (UNSTABLE_MANGLE / "
                                   "l4_data): the NFQUEUE layer cannot rewrite a TCP segment "
                                   "(the sequence numbers of the rest of the flow would need "
                                   "adjusting): the chunk gets the service's fail policy; "
                                   "put the service on the proxy layer to edit" % v.function)
            elif len(v.data) > EDIT_MAX:
                v = engine.Verdict("error", v.function, "%s edited a chunk to %d bytes: at most "
                                   "%d go back per chunk: the chunk gets the service's fail "
                                   "policy" % (v.function, len(v.data), EDIT_MAX))
        if v.action == "error":
            log(link, svc, "exception", v.function, v.detail, conn)
        if v.action == "mangle":
            log(link, svc, "edit", v.function, "%d bytes in, %d out" % (len(payload),
                                                                         len(v.data)), conn)
            put(link, T_VERDICT, V_EDIT, svc, conn, seq, v.function.encode() + b"\0" + v.data)
            return
        if v.action in ("reject", "drop"):
            # before its verdict, in the same message: who waits for the verdict finds it
            log(link, svc, "block", v.function, v.action + (": " + v.detail if v.detail else ""))
            if not c.udp:  # a refused datagram ends nothing: the flow's state goes on
                conns.pop(key, None)
        put(link, T_VERDICT, CODES[v.action], svc, conn, seq,
            v.function.encode() + b"\0" + v.detail.encode("utf-8", "replace")[:200],
            F_FINAL if v.action == "accept" and c.done() else 0)

    def on_message(link, n):
        off = 0
        while off + HDR.size <= n:
            t, code, _fl, svc, conn, seq, ln = HDR.unpack_from(buf, off)
            off += HDR.size
            if off + ln > n:
                return
            if t == T_DATA:
                on_data(link, code, svc, conn, seq, bytes(view[off:off + ln]))
            elif t == T_CLOSE:
                conns.pop((link.no << 48) ^ conn, None)
            elif t == T_OPEN:
                # its module code runs with its first chunk, inside that call's deadline
                if svc in scripts:
                    conns[(link.no << 48) ^ conn] = (svc, (bool(code), None))
            elif t == T_SCRIPT:
                on_script(link, svc, seq, conn, bytes(view[off:off + ln]))
            elif t == T_UNSCRIPT:
                let_go(link, svc)
                put(link, T_ACK, 0, svc, 0, seq)
            elif t == T_HELLO:
                link.id = conn
            off += ln

    def drop(link):
        waiting.discard(link)
        ep.unregister(link.sock.fileno())
        del links[link.sock.fileno()]
        for k in [k for k in conns if k >> 48 == link.no]:
            del conns[k]
        for svc in [s_ for s_, h in holders.items() if link.no in h]:
            let_go(link, svc)
        link.sock.close()

    def serve(link):
        """One message: epoll is level-triggered, so the next waits for the next round. A
        socket read to its end raises no BlockingIOError this way (an exception, with its
        strerror, per batch cost more than the poll)."""
        try:
            n = link.sock.recv_into(buf, MSG_MAX)
        except BlockingIOError:
            return
        except OSError:
            n = 0
        if n == 0:
            drop(link)
            return
        on_message(link, n)
        if link.out:
            waiting.add(link)

    waiting = set()  # links with answers not yet sent
    lfd = lsock.fileno()
    since = 0  # messages read since the answers last went
    while True:
        # answers go once nothing more is there to read (one message per thread for a batch),
        # or after BATCH messages: a thread that keeps sending still hears back
        try:
            events = ep.poll(0 if waiting else -1)
        except InterruptedError:
            continue
        if not events or since >= BATCH:
            for link in waiting:
                if link.sock.fileno() >= 0:
                    flush(link)
            waiting.clear()
            since = 0
            if not events:
                continue
        for fd, _ev in events:
            link = links.get(fd)
            if link is not None:
                serve(link)
                since += 1
            elif fd == 0:
                return 0  # the parent went
            elif fd == lfd:
                while True:
                    try:
                        s, _ = lsock.accept()
                    except (BlockingIOError, InterruptedError):
                        break
                    s.setblocking(False)
                    serial[0] = (serial[0] + 1) & 0x7fff
                    links[s.fileno()] = Link(s, serial[0])
                    ep.register(s.fileno(), select.EPOLLIN)

if __name__ == "__main__":
    sys.exit(main())
