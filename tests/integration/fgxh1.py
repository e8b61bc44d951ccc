#!/usr/bin/python3
"""An HTTP/1.1-only service for test_h1up (python's http.server, keep-alive): fgxh1.py LOG
PORT[:1.0]... (:1.0: that port answers HTTP/1.0 and closes after each answer). Each request is one JSON line in LOG: what the service saw (its request line's version,
Host, Content-Length, Transfer-Encoding, X-Tag, the body's first 200 bytes, its length
and sha256). It speaks no HTTP/2: a
client preface is a bad request line.
  /           "hello from h1"
  /big        6 MiB (Content-Length)
  /chunked    "hello chunked world" in three chunks, then an X-Trail trailer
  /close      "closing body", no length: the body ends with the connection
  /leak       a flag
  /post       "got N sha256" of the request body (Content-Length or chunked)"""
import hashlib
import http.server
import json
import sys
import threading

BIG = bytes(range(256)) * (6 << 12)  # test_h1up.BIG
LOG = sys.argv[1]
lock = threading.Lock()


class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return out
                out += self.rfile.read(size)
                self.rfile.readline()
        n = int(self.headers.get("Content-Length", "0"))
        return self.rfile.read(n) if n else b""

    def note(self, body):
        rec = {"port": self.server.server_port, "method": self.command, "path": self.path,
               "version": self.request_version, "host": self.headers.get("Host"),
               "hosts": len(self.headers.get_all("Host") or []),
               "cl": self.headers.get("Content-Length"),
               "te": self.headers.get("Transfer-Encoding"),
               "tag": self.headers.get("X-Tag"), "body": body[:200].decode("latin-1"),
               "len": len(body), "sha": hashlib.sha256(body).hexdigest()}
        with lock, open(LOG, "a") as f:
            f.write(json.dumps(rec) + "\n")

    def send(self, code, data, ctype="text/plain"):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def handle_any(self):
        b = self.body()
        self.note(b)
        if self.path == "/big":
            self.send(200, BIG, "application/octet-stream")
        elif self.path == "/chunked":
            self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                             b"Transfer-Encoding: chunked\r\nTrailer: X-Trail\r\n\r\n"
                             b"6\r\nhello \r\n8\r\nchunked \r\n5\r\nworld\r\n"
                             b"0\r\nX-Trail: done\r\n\r\n")
        elif self.path == "/close":
            self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                             b"Connection: close\r\n\r\nclosing body")
            self.close_connection = True
        elif self.path == "/leak":
            self.send(200, b"FLAG{from-h1}\n")
        elif self.path == "/post":
            self.send(200, ("got %d %s\n" % (len(b), hashlib.sha256(b).hexdigest())).encode())
        else:
            self.send(200, b"hello from h1\n")

    do_GET = do_POST = do_PUT = do_HEAD = handle_any


class S(http.server.ThreadingHTTPServer):
    daemon_threads = True


class H10(H):
    """PORT:1.0: an HTTP/1.0 service, which closes the connection after each answer."""
    protocol_version = "HTTP/1.0"


servers = [S(("0.0.0.0", int(p.split(":")[0])), H10 if p.endswith(":1.0") else H)
           for p in sys.argv[2:]]
for s in servers[1:]:
    threading.Thread(target=s.serve_forever, daemon=True).start()
print("ready", flush=True)
servers[0].serve_forever()
