"""A data-path thread's side of scriptworker's frames (fgx/swproto.h), for tests: its
sockets straight to each interpreter (PATH.i) and to the parent (PATH), as libcommon/swlink.c
has them, so a test drives the real scriptworker without a proxy."""
import os
import select
import socket
import struct
import time

HDR = struct.Struct("<BBHIQII")
(T_SCRIPT, T_UNSCRIPT, T_OPEN, T_DATA, T_CLOSE, T_VERDICT, T_LOG, T_ACK, T_HELLO) = range(1, 10)
VERDICTS = {0: "accept", 1: "reject", 2: "drop", 3: "error", 4: "timeout"}


class SwClient:
    def __init__(self, url, timeout_ms=5000, link_id=0x5157):
        self.path = url[6:] if url.startswith("ipc://") else url
        self.timeout_ms = timeout_ms
        self.id = link_id
        deadline = time.monotonic() + 5
        while True:
            try:
                self.ctl = self._connect(self.path)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        n = 0
        while os.path.exists("%s.%d" % (self.path, n)):
            n += 1
        self.py = [self._connect("%s.%d" % (self.path, i)) for i in range(n)]
        self.seq = 0
        self.logs = []
        self.files = []  # SCRIPT payloads, for an interpreter connected again
        self.frames = []  # read, not yet taken
        self.pending = [[] for _ in self.py]  # DATA sent to each, not yet answered

    def _connect(self, path):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        s.connect(path)
        s.send(HDR.pack(T_HELLO, 0, 0, 0, self.id, 0, 0))
        return s

    def _py(self, hash_):
        i = hash_ % len(self.py)
        if self.py[i] is None:
            # it was replaced: a new socket, and every file again first
            self.py[i] = self._connect("%s.%d" % (self.path, i))
            for svc, conn, seq, payload in self.files:
                self.py[i].send(HDR.pack(T_SCRIPT, 0, 0, svc, conn, seq, len(payload)) + payload)
        return self.py[i]

    def send(self, t, service, conn=0, code=0, hash_=0, seq=0, payload=b""):
        b = HDR.pack(t, code, hash_, service, conn, seq, len(payload)) + payload
        if t in (T_SCRIPT, T_UNSCRIPT):
            for i in range(len(self.py)):
                self._py(i).send(b)
        else:
            i = hash_ % len(self.py)
            try:
                self._py(hash_).send(b)
            except OSError:
                pass  # replaced meanwhile: answered below, as a data-path thread does
            if t == T_DATA:
                self.pending[i].append((service, conn, seq))

    def recv(self, timeout_ms=None):
        """The next frame from any socket: ((type, code, flags, service, conn, seq, len),
        payload)."""
        deadline = time.monotonic() + (timeout_ms or self.timeout_ms) / 1000.0
        while not self.frames:
            socks = [self.ctl] + [s for s in self.py if s is not None]
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no frame from scriptworker")
            r, _, _ = select.select(socks, [], [], left)
            # the parent's socket first: its TIMEOUT comes before an interpreter's end
            for s in sorted(r, key=lambda x: x is not self.ctl):
                try:
                    m = s.recv(1 << 22)
                except ConnectionResetError:
                    m = b""
                if not m:
                    if s is self.ctl:
                        raise OSError("scriptworker went")
                    # an interpreter replaced: its unanswered calls are errors (libcommon/swlink.c)
                    i = self.py.index(s)
                    self.py[i] = None
                    s.close()
                    for svc, conn, seq in self.pending[i]:
                        if not any(f[0][0] == T_VERDICT and f[0][4] == conn and f[0][5] == seq
                                   for f in self.frames):
                            self.frames.append(((T_VERDICT, 3, 0, svc, conn, seq, 21),
                                                b"\0interpreter replaced"))
                    self.pending[i] = []
                    continue
                src = self.py.index(s) if s in self.py else -1
                off = 0
                while off + HDR.size <= len(m):
                    h = HDR.unpack_from(m, off)
                    self.frames.append((h, m[off + HDR.size:off + HDR.size + h[6]]))
                    off += HDR.size + h[6]
                    if h[0] == T_VERDICT:  # from the parent: a TIMEOUT of any of them
                        for k in ([src] if src >= 0 else range(len(self.py))):
                            self.pending[k] = [x for x in self.pending[k]
                                               if (x[1], x[2]) != (h[4], h[5])]
        return self.frames.pop(0)

    def wait(self, t, seq=None):
        """The next frame of type t (and seq); logs met on the way are kept in self.logs."""
        while True:
            h, p = self.recv()
            if h[0] == T_LOG:
                kind, fn, text = p.split(b"\0", 2)
                self.logs.append((h[3], kind.decode(), fn.decode(), text.decode()))
                if t == T_LOG:
                    return h, p
                continue
            if h[0] == t and (seq is None or h[5] == seq):
                return h, p

    def script(self, service, source, deadline_ms=100, disabled=()):
        pl = struct.pack("<H", len(disabled))
        for d in disabled:
            pl += struct.pack("<H", len(d)) + d.encode()
        self.seq += 1
        payload = pl + source.encode()
        self.files.append((service, deadline_ms, self.seq, payload))
        self.send(T_SCRIPT, service, conn=deadline_ms, seq=self.seq, payload=payload)
        ok = True
        for _ in self.py:  # each interpreter loads it
            h, _ = self.wait(T_ACK, self.seq)
            ok = ok and h[1] == 0
        return ok

    def open(self, service, conn, hash_=0):
        self.send(T_OPEN, service, conn=conn, hash_=hash_)

    def data(self, service, conn, c2s, data, hash_=0):
        """(verdict, function, detail) of one chunk."""
        self.seq += 1
        self.send(T_DATA, service, conn=conn, code=0 if c2s else 1, hash_=hash_, seq=self.seq,
                  payload=data)
        h, p = self.wait(T_VERDICT, self.seq)
        fn, _, detail = p.partition(b"\0")
        return VERDICTS[h[1]], fn.decode(), detail.decode()

    def drain(self, quiet_ms=300):
        """Take every frame still coming (logs are kept) until none came for quiet_ms."""
        while True:
            try:
                h, p = self.recv(quiet_ms)
            except TimeoutError:
                return
            if h[0] == T_LOG:
                kind, fn, text = p.split(b"\0", 2)
                self.logs.append((h[3], kind.decode(), fn.decode(), text.decode()))

    def close(self):
        for s in [self.ctl] + self.py:
            if s is not None:
                s.close()
