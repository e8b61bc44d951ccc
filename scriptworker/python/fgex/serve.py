"""The interpreter side of scriptworker: one Python process, fed by its C parent over a pipe.
stdin carries frames from the parent, stdout frames back; fd 3 is a small shared page where
the function being called is written before each call, so that a parent that had to kill this
process past the deadline knows whose timeout it was.

A frame is a header (scriptworker/sw_proto.h: type u8, code u8, flags u16, service u32,
conn u64, seq u32, len u32, little-endian) and len bytes."""
import io
import mmap
import os
import struct
import sys
import traceback

HDR = struct.Struct("<BBHIQII")
(T_SCRIPT, T_UNSCRIPT, T_OPEN, T_DATA, T_CLOSE, T_VERDICT, T_LOG, T_ACK) = range(1, 9)
V_ACCEPT, V_REJECT, V_DROP, V_ERROR, V_TIMEOUT = range(5)
F_FINAL = 1  # VERDICT flag (fgx/swproto.h FGX_SW_VERDICT_FINAL): later chunks need no call
CODES = {"accept": V_ACCEPT, "reject": V_REJECT, "drop": V_DROP, "error": V_ERROR}


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


def main():
    rfd = sys.stdin.buffer
    wfd = os.fdopen(os.dup(1), "wb", buffering=0)
    cap = _Out()
    sys.stdout = sys.stderr = cap  # a script's prints become log entries, never frames
    try:
        cur = mmap.mmap(3, 256)
    except (OSError, ValueError):
        cur = None
    from fgex.engine import Conn, Script, ScriptError
    import fgex.engine as engine

    scripts = {}  # service id -> Script
    conns = {}    # conn id -> (service id, Conn)

    pending = []  # frames of one call's answer: written together, one write, one wake-up

    def send(t, code, svc, conn, seq, payload=b"", flags=0):
        pending.append(HDR.pack(t, code, flags, svc, conn, seq, len(payload)) + payload)
        if t != T_LOG:  # a verdict or an ack ends an answer (its logs went first)
            wfd.write(b"".join(pending))
            del pending[:]

    def log(svc, kind, fn, text):
        send(T_LOG, 0, svc, 0, 0, b"%s\0%s\0%s" % (kind.encode(), fn.encode(),
                                                   text.encode("utf-8", "replace")))

    def mark(svc, fn):
        if cur is not None:
            b = ("%d\0%s\0" % (svc, fn)).encode()[:255]
            cur[0:len(b)] = b

    # the engine calls each function through here, so the page names it while it runs
    orig_call_all = engine.Conn._call_all

    def call_all(self, name, func, args):
        mark(self.fgx_svc, name)
        return orig_call_all(self, name, func, args)

    engine.Conn._call_all = call_all
    send(T_ACK, 0, 0, 0, 0)  # ready: the parent starts its calls' clocks from now

    while True:
        h = rfd.read(HDR.size)
        if len(h) < HDR.size:
            return 0
        t, code, _fl, svc, conn, seq, ln = HDR.unpack(h)
        payload = rfd.read(ln) if ln else b""
        if t == T_SCRIPT:
            # payload: u16 count of disabled names, each u16 len + name, then the source
            n = struct.unpack_from("<H", payload, 0)[0]
            off, off_names = 2, []
            for _ in range(n):
                k = struct.unpack_from("<H", payload, off)[0]
                off_names.append(payload[off + 2:off + 2 + k].decode())
                off += 2 + k
            try:
                scripts[svc] = Script(payload[off:].decode("utf-8", "replace"),
                                      "service-%d.py" % svc, off_names)
                send(T_ACK, 0, svc, 0, seq)
            except ScriptError as e:
                log(svc, "exception", "", "the file did not load: line %d: %s" % (e.line,
                                                                                  e.reason))
                scripts.pop(svc, None)
                send(T_ACK, 1, svc, 0, seq)
            for cid in [k for k, (s_, _) in conns.items() if s_ == svc]:
                del conns[cid]  # open connections keep no state of the old file
        elif t == T_UNSCRIPT:
            scripts.pop(svc, None)
            send(T_ACK, 0, svc, 0, seq)
        elif t == T_OPEN:
            # its module code runs with its first chunk, inside that call's deadline
            if svc in scripts:
                conns[conn] = (svc, bool(code))
        elif t == T_DATA:
            ent = conns.get(conn)
            if ent is None and code & 2 and svc in scripts:  # the first chunk opens it
                ent = conns[conn] = (svc, bool(code & 4))
            if ent is None:
                send(T_VERDICT, V_ERROR, svc, conn, seq, b"\0connection state lost")
                continue
            if not isinstance(ent[1], Conn):
                try:
                    c = Conn(scripts[svc], is_ipv6=ent[1])
                except Exception:
                    log(svc, "exception", "", traceback.format_exc())
                    conns.pop(conn, None)
                    send(T_VERDICT, V_ERROR, svc, conn, seq, b"\0the file's module code failed")
                    continue
                c.fgx_svc = svc
                ent = conns[conn] = (svc, c)
            v = ent[1].feed((code & 1) == 0, payload)
            mark(svc, "")
            out = cap.take()
            if out:
                log(svc, "print", v.function, out)
            if v.action == "error":
                log(svc, "exception", v.function, v.detail)
            if v.action in ("reject", "drop"):
                # before its verdict, in the same write: who waits for the verdict finds it
                log(svc, "block", v.function, v.action + (": " + v.detail if v.detail else ""))
                conns.pop(conn, None)
            send(T_VERDICT, CODES[v.action], svc, conn, seq,
                 v.function.encode() + b"\0" + v.detail.encode("utf-8", "replace")[:200],
                 F_FINAL if v.action == "accept" and ent[1].done() else 0)
        elif t == T_CLOSE:
            conns.pop(conn, None)


if __name__ == "__main__":
    sys.exit(main())
