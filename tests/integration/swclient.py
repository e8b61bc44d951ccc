"""A data-path worker's side of scriptworker's frames (fgx/swproto.h), for tests: nng pair1
through ctypes on Debian's libnng, so a test drives the real scriptworker without a proxy."""
import ctypes
import struct
import time

HDR = struct.Struct("<BBHIQII")
(T_SCRIPT, T_UNSCRIPT, T_OPEN, T_DATA, T_CLOSE, T_VERDICT, T_LOG, T_ACK) = range(1, 9)
VERDICTS = {0: "accept", 1: "reject", 2: "drop", 3: "error", 4: "timeout"}

_nng = ctypes.CDLL("libnng.so.1")


class _Sock(ctypes.Structure):
    _fields_ = [("id", ctypes.c_uint32)]


_nng.nng_strerror.restype = ctypes.c_char_p


class SwClient:
    def __init__(self, url, timeout_ms=5000):
        self.s = _Sock()
        self.timeout_ms = timeout_ms
        rc = _nng.nng_pair1_open(ctypes.byref(self.s))
        if rc == 0:
            rc = _nng.nng_socket_set_ms(self.s, b"recv-timeout", ctypes.c_int32(timeout_ms))
        deadline = time.monotonic() + 5
        while rc == 0:
            rc = _nng.nng_dial(self.s, (url + "-0").encode(), None, 0)
            if rc == 0 or time.monotonic() > deadline:
                break
            rc = 0
            time.sleep(0.05)
        if rc != 0:
            raise OSError("nng: %s" % _nng.nng_strerror(rc).decode())
        self.seq = 0
        self.logs = []

    def send(self, t, service, conn=0, code=0, hash_=0, seq=0, payload=b""):
        b = HDR.pack(t, code, hash_, service, conn, seq, len(payload)) + payload
        rc = _nng.nng_send(self.s, ctypes.c_char_p(b), ctypes.c_size_t(len(b)), 0)
        if rc != 0:
            raise OSError("nng send: %s" % _nng.nng_strerror(rc).decode())

    def recv(self):
        buf = ctypes.c_void_p()
        sz = ctypes.c_size_t()
        rc = _nng.nng_recv(self.s, ctypes.byref(buf), ctypes.byref(sz), 1)  # NNG_FLAG_ALLOC
        if rc != 0:
            raise TimeoutError("nng recv: %s" % _nng.nng_strerror(rc).decode())
        data = ctypes.string_at(buf, sz.value)
        _nng.nng_free(buf, sz)
        h = HDR.unpack(data[:HDR.size])
        return h, data[HDR.size:]

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
        self.send(T_SCRIPT, service, conn=deadline_ms, seq=self.seq,
                  payload=pl + source.encode())
        h, _ = self.wait(T_ACK, self.seq)
        return h[1] == 0

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
        _nng.nng_socket_set_ms(self.s, b"recv-timeout", ctypes.c_int32(quiet_ms))
        try:
            while True:
                try:
                    h, p = self.recv()
                except TimeoutError:
                    return
                if h[0] == T_LOG:
                    kind, fn, text = p.split(b"\0", 2)
                    self.logs.append((h[3], kind.decode(), fn.decode(), text.decode()))
        finally:
            _nng.nng_socket_set_ms(self.s, b"recv-timeout", ctypes.c_int32(self.timeout_ms))

    def close(self):
        # Debian 12's libnng (1.5.2) can hang in nng_close() for good when it closes an ipc
        # pipe while a message is arriving on it: the pipe's receive callback, having read a
        # frame's length, posts the read of its body after the close began, that read never
        # completes and the pipe is never reaped (the race nng fixed for its tcp transport
        # after 1.5.2, #1636). scriptworker sends a "block" log entry after a REJECT's verdict,
        # so a test that closes right after reading that verdict can meet it in flight (the
        # sanitizer build, slower, met it most). Closing once nothing comes any more cannot.
        self.drain()
        _nng.nng_close(self.s)
