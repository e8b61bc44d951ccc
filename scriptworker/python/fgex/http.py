"""HTTP/1.1 of one direction of a connection, parsed from its reassembled bytes with h11
(Debian's python3-h11): keep-alive with several messages, chunked bodies (h11 removes the
framing), Content-Encoding decoded on demand for body_decoded.

h11 parses a whole conversation; fgex feeds each direction to its own parser and starts a fresh
h11 connection for each message with the bytes left over from the previous one, so requests
are parsed without their responses and the other way round. A response parser is told the
method of the request it answers (a HEAD response has no body)."""
import zlib

import h11

try:
    import brotli  # Debian's python3-brotli
except ImportError:  # pragma: no cover - a run-time dependency, listed in install-deps.sh
    brotli = None
try:
    import zstandard  # optional: python3-zstandard
except ImportError:
    zstandard = None
try:
    # Debian's python3-websockets: its frame parser and permessage-deflate, for ws_stream
    from websockets.exceptions import WebSocketException
    from websockets.extensions.permessage_deflate import PerMessageDeflate
    from websockets.frames import Frame
    from websockets.streams import StreamReader
except ImportError:  # pragma: no cover - a run-time dependency, listed in install-deps.sh
    Frame = None


def ws_deflate_params(value):
    """The permessage-deflate parameters a 101 response's Sec-WebSocket-Extensions agreed on,
    or None: {name: value or True}."""
    for ext in (value or "").split(","):
        parts = [p.strip() for p in ext.split(";")]
        if parts[0].lower() != "permessage-deflate":
            continue
        params = {}
        for p in parts[1:]:
            k, _, v = p.partition("=")
            params[k.strip().lower()] = v.strip().strip('"') or True
        return params
    return None


class WsDecoder:
    """One direction's WebSocket frames (RFC 6455), decoded with websockets' parser as they
    arrive; masked from the client; permessage-deflate undone when the handshake agreed on it.
    A frame it cannot parse stops it (error says why); the raw bytes stay in stream."""

    def __init__(self, from_client, deflate):
        self.error = None
        self.frames = []
        self.reader = StreamReader()
        self.exts = []
        if deflate is not None:
            side = "client" if from_client else "server"

            def bits(k):
                v = deflate.get(k)
                return int(v) if isinstance(v, str) and v.isdigit() else 15
            # decoding as the receiver: the remote end is the sender
            other = "server" if from_client else "client"
            self.exts = [PerMessageDeflate(
                remote_no_context_takeover=side + "_no_context_takeover" in deflate,
                local_no_context_takeover=other + "_no_context_takeover" in deflate,
                remote_max_window_bits=bits(side + "_max_window_bits"),
                local_max_window_bits=bits(other + "_max_window_bits"))]
        self.mask = from_client
        self.gen = None

    def feed(self, data):
        """The frames completed by data, in order."""
        if self.error is not None or Frame is None:
            return []
        out = []
        self.reader.feed_data(data)
        try:
            while True:
                if self.gen is None:
                    self.gen = Frame.parse(self.reader.read_exact, mask=self.mask,
                                           extensions=self.exts)
                try:
                    next(self.gen)
                    break  # it waits for more bytes
                except StopIteration as done:
                    self.gen = None
                    out.append(done.value)
        except (WebSocketException, ValueError, EOFError) as e:
            self.error = "%s: %s" % (type(e).__name__, e)
        self.frames.extend(out)
        return out


MAX_CONTENT_LENGTH = (1 << 63) - 1
_TCHARS = frozenset(b"!#$%&'*+-.^_`|~0123456789"
                    b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")  # RFC 9110 tchar
_VERSION = b"HTTP/1.1"


def could_start_request(buf):
    """Whether buf, the bytes a request parser holds while it waits for a request's head, can
    still become a request line (`METHOD TARGET HTTP/d.d`): h11 judges a head only once it is
    whole, and what waits meanwhile would pass the filters unjudged (a WebSocket frame after a
    200, a body HTTP/1.x does not frame)."""
    line, nl, _ = buf.partition(b"\n")
    if nl:
        line = line[:-1] if line.endswith(b"\r") else line
    parts = line.split(b" ")
    if len(parts) > 3 or not all(c in _TCHARS for c in parts[0]) or (nl and len(parts) < 3):
        return False
    if parts[0] == b"" and (nl or len(parts) > 1):
        return False
    if len(parts) > 1 and any(c <= 0x20 or c == 0x7f for c in parts[1]):
        return False
    if len(parts) > 2:
        v = parts[2]
        if nl and len(v) != len(_VERSION):
            return False
        for i, c in enumerate(v[:len(_VERSION) + 1]):
            if i >= len(_VERSION) or (chr(c).isdigit() if i in (5, 7) else c == _VERSION[i]) \
                    is False:
                return False
    return True


class HttpError(Exception):
    """The bytes are not HTTP/1.x, or break its framing."""


GRPC_MSG_MAX = 4 << 20  # gRPC's own default receive limit, as the proxy's (px_grpc.c)


def is_grpc(content_type):
    """application/grpc, alone or as application/grpc+proto and the like (not grpc-web, whose
    body frames its trailers too)."""
    ct = content_type.strip().lower()
    return ct == "application/grpc" or ct.startswith(("application/grpc+", "application/grpc;"))


class GrpcDeframer:
    """A gRPC body's length-prefixed messages (flag byte, 4-byte big-endian length, message):
    ready holds those the chunk being parsed completed, as (compressed, payload)."""

    def __init__(self, encoding):
        self.encoding = encoding
        self.buf = bytearray()
        self.ready = []

    def feed(self, data):
        self.buf += data
        while len(self.buf) >= 5:
            flag, n = self.buf[0], int.from_bytes(self.buf[1:5], "big")
            if flag > 1:
                raise HttpError("a gRPC message with flag byte %d" % flag)
            if n > GRPC_MSG_MAX:
                raise HttpError("a gRPC message of %d bytes, past 4 MiB" % n)
            if len(self.buf) < 5 + n:
                break
            self.ready.append((flag == 1, bytes(self.buf[5:5 + n])))
            del self.buf[:5 + n]


class Message:
    """One request or response as far as it has arrived."""

    __slots__ = ("is_request", "method", "url", "status_code", "reason", "headers", "lheaders",
                 "http_version", "body", "_body_parts", "_body_len", "headers_complete",
                 "message_complete", "total_size", "keep_alive", "should_upgrade",
                 "content_length", "content_encoding", "user_agent", "content_type",
                 "added_to_history", "_decoded", "stream", "truncated", "fg_size", "ws",
                 "chunk_mark", "grpc", "trailers")

    def __init__(self, is_request):
        self.is_request = is_request
        self.method = None
        self.url = None
        self.status_code = None
        self.reason = None
        self.headers = {}
        self.lheaders = {}
        self.http_version = None
        self.body = None
        self._body_parts = []
        self._body_len = 0
        self.headers_complete = False
        self.message_complete = False
        self.total_size = 0  # raw bytes: start line, headers, framing, body
        self.fg_size = 0     # Firegex's count: url or reason, each header's name and value, body
        self.ws = None       # after a WebSocket upgrade: this direction's WsDecoder
        self.keep_alive = True
        self.should_upgrade = False
        self.content_length = None
        self.content_encoding = ""
        self.user_agent = ""
        self.content_type = ""
        self.added_to_history = False
        self._decoded = None
        self.stream = b""
        self.truncated = False
        self.chunk_mark = 0  # _body_parts[chunk_mark:] arrived with the chunk being parsed
        self.grpc = None     # a gRPC body: its messages (GrpcDeframer)
        self.trailers = {}   # a chunked body's trailer section, names lower-cased

    def set_head(self, ev, raw_len):
        for name, value in ev.headers.raw_items():
            self.fg_size += len(name) + len(value)
            k = name.decode("latin-1")
            v = value.decode("utf-8", errors="replace")
            old = self.headers.get(k)
            if old is None:
                self.headers[k] = v
            elif isinstance(old, list):
                old.append(v)
            else:
                self.headers[k] = [old, v]
            kl = k.lower()
            self.lheaders[kl] = self.lheaders[kl] + ", " + v if kl in self.lheaders else v
        self.http_version = ev.http_version.decode("ascii", errors="replace")
        if self.is_request:
            self.method = bytes(ev.method)
            self.url = ev.target.decode("utf-8", errors="replace")
            self.fg_size += len(ev.target)
        else:
            self.status_code = ev.status_code
            self.reason = ev.reason.decode("latin-1")
            self.fg_size += len(ev.reason)
        conn = self.lheaders.get("connection", "").lower()
        self.keep_alive = ("close" not in conn) if self.http_version == "1.1" else ("keep-alive" in conn)
        upgrade = "upgrade" in conn and "upgrade" in self.lheaders
        self.should_upgrade = upgrade if self.is_request else (upgrade and self.status_code == 101)
        cl = self.lheaders.get("content-length")
        try:
            self.content_length = int(cl) if cl is not None else None
        except ValueError:
            self.content_length = None
        self.content_encoding = self.lheaders.get("content-encoding", "")
        self.user_agent = self.lheaders.get("user-agent", "")
        self.content_type = self.lheaders.get("content-type", "")
        if is_grpc(self.content_type):
            self.grpc = GrpcDeframer(self.lheaders.get("grpc-encoding", "identity").lower())
        self.headers_complete = True
        self.total_size += raw_len

    def add_body(self, data, limit, flush=False):
        """Returns False when the body went past limit: with flush (FullStreamAction.FLUSH)
        the body starts again from the chunk being parsed, as a stream does, so that every
        body byte is in the body of a call; otherwise the bytes beyond are not kept."""
        self.total_size += len(data)
        self.fg_size += len(data)
        if self.grpc is not None:
            self.grpc.feed(data)  # every byte, whatever the body keeps
        if flush and self._body_len + len(data) > limit:
            self.truncated = True
            self._body_parts = self._body_parts[self.chunk_mark:] + [bytes(data)]
            self.chunk_mark = 0
            self._body_len = sum(len(p) for p in self._body_parts)
            return False
        room = limit - self._body_len
        if room <= 0:
            self.truncated = True
            return False
        if len(data) > room:
            data = data[:room]
            self.truncated = True
        self._body_parts.append(bytes(data))
        self._body_len += len(data)
        return not self.truncated

    def partial_body(self):
        """body as far as it arrived, for the call on a chunk that carries some of it: no
        body byte is forwarded before a filter that reads bodies saw it."""
        self.body = b"".join(self._body_parts)
        self._body_parts = [self.body]
        self._decoded = None

    def finish(self):
        self.body = b"".join(self._body_parts)
        self._body_parts = []
        self._decoded = None
        self.message_complete = True

    def upgrading_to(self, proto):
        return self.should_upgrade and proto in self.lheaders.get("upgrade", "").lower()

    def body_decoded(self):
        """The body with its Content-Encoding undone; None before the body, False when it
        does not decode."""
        if self.body is None:
            return None
        if self._decoded is None:
            self._decoded = decode_body(self.body, self.content_encoding)
        return self._decoded


def _decode_one(data, enc):
    if enc in ("", "identity"):
        return data
    if enc in ("gzip", "x-gzip"):
        return zlib.decompress(data, 16 + zlib.MAX_WBITS)
    if enc == "deflate":
        try:
            return zlib.decompress(data)
        except zlib.error:  # raw deflate, as some servers send it
            return zlib.decompress(data, -zlib.MAX_WBITS)
    if enc == "br" and brotli is not None:
        return brotli.decompress(data)
    if enc == "zstd" and zstandard is not None:
        return zstandard.ZstdDecompressor().decompress(data)
    raise ValueError("unsupported encoding " + enc)


def decode_body(body, content_encoding):
    encs = [e.strip().lower() for e in content_encoding.split(",") if e.strip()]
    data = body
    try:
        for enc in reversed(encs):  # the last encoding applied comes off first
            data = _decode_one(data, enc)
    except Exception:  # zlib.error, brotli.error, ValueError: not decodable
        return False
    return data


class Parser:
    """One direction's parser. feed() returns the messages whose headers or whose end arrived
    with these bytes, as (message, headers_now, complete_now)."""

    def __init__(self, is_request, body_limit, flush=False):
        self.is_request = is_request
        self.body_limit = body_limit
        self.flush = flush  # FGEX_FULL_STREAM_ACTION is FLUSH: see Message.add_body
        self.req_methods = []  # response side: methods of the requests seen, oldest first
        self.msg = None
        self.upgraded = False
        self.conn = None
        self.head_len = 0
        self.ws_deflate = None  # what the handshake agreed on (the connection's models set it)
        # request side: the last request that proposed an upgrade; until the server's 101
        # confirms it (confirm_upgrade) what follows is parsed as requests
        self.proposed = None
        self.closing = None  # request side: why no request may follow (HTTP/1.0, close)

    def _new_conn(self, pending):
        # made when the message's first byte is there, so that a response parser knows the
        # method of the request it answers by then
        self.conn = h11.Connection(h11.SERVER if self.is_request else h11.CLIENT,
                                   max_incomplete_event_size=16384)
        if not self.is_request:
            method = self.req_methods.pop(0) if self.req_methods else b"GET"
            # h11 takes a 101 only for a request that proposed an upgrade: the request's own
            # Upgrade when it was parsed ((method, Upgrade)), else a proposal all the same (a
            # file with response models only has its requests parsed by no one); a response
            # that is not a 101 reads the same either way
            up = "websocket"
            if isinstance(method, tuple):
                method, up = method[0], method[1] or "websocket"
            self.conn.send(h11.Request(method=method, target="/", headers=[
                ("Host", "x"), ("Connection", "Upgrade"), ("Upgrade", up)]))
        self.msg = None
        self.head_len = len(pending)
        if pending:
            self.conn.receive_data(pending)

    def confirm_upgrade(self):
        """Request side: the server answered 101. The client's bytes from now on, and those
        not yet placed in a request, are the new protocol's: the proposing request's stream
        (its WebSocket frames, when it asked for one)."""
        if self.upgraded:
            return
        m = self.proposed or self.msg or Message(True)
        self.msg = m
        self.upgraded = True
        if self.conn is not None:
            m.stream = bytes(self.conn.trailing_data[0])
            self.conn = None
            self._ws(m.stream)

    def _ws(self, data):
        """Bytes after the upgrade: into the message's stream (and its WebSocket frames, when
        it was a WebSocket upgrade). Returns the event that calls HttpRequest / HttpResponse
        again (neither headers nor end: a stream chunk), as Firegex does while a stream goes
        on."""
        m = self.msg
        if m is None or not data:
            return []
        if m.upgrading_to("websocket") and Frame is not None:  # no python3-websockets: []
            if m.ws is None:
                m.ws = WsDecoder(self.is_request, self.ws_deflate)
            m.ws.feed(data)
        return [(m, False, False)]

    def feed(self, data, eof=False):
        out = []
        if self.msg is not None:
            self.msg.chunk_mark = len(self.msg._body_parts)
            if self.msg.grpc is not None:
                self.msg.grpc.ready = []
        if self.upgraded:
            if self.msg is not None:
                self.msg.stream += data
            return self._ws(data)
        if self.conn is None:
            if not data:
                return out
            if self.closing is not None:
                raise HttpError("bytes after a request that ends the connection (%s): no "
                                "request can hold them" % self.closing)
            self._new_conn(data)
        elif data:
            self.conn.receive_data(data)
            self.head_len += len(data)
        if eof:
            self.conn.receive_data(b"")
        while True:
            try:
                ev = self.conn.next_event()
            except h11.RemoteProtocolError as e:
                raise HttpError(str(e)) from None
            if ev is h11.NEED_DATA or ev is h11.PAUSED or isinstance(ev, h11.ConnectionClosed):
                if ev is h11.PAUSED and not self.is_request and self.msg is not None and \
                        self.msg.should_upgrade:
                    self.upgraded = True
                    self.msg.stream = bytes(self.conn.trailing_data[0])
                    out += self._ws(self.msg.stream)
                break
            if isinstance(ev, h11.InformationalResponse):
                if ev.status_code == 101:
                    m = Message(False)
                    m.set_head(ev, 0)
                    m.should_upgrade = True
                    m.finish()
                    self.msg = m
                    out.append((m, True, True))
                    self.upgraded = True
                    m.stream = bytes(self.conn.trailing_data[0])
                    self.ws_deflate = ws_deflate_params(m.lheaders.get("sec-websocket-extensions"))
                    self._ws(m.stream)  # the 101 itself is this chunk's event
                    break
                continue
            if isinstance(ev, (h11.Request, h11.Response)):
                m = Message(self.is_request)
                # the head's size: what was fed minus what h11 still buffers
                m.set_head(ev, max(0, self.head_len - len(self.conn.trailing_data[0])))
                if m.content_length is not None and m.content_length > MAX_CONTENT_LENGTH:
                    # past what any server's integer holds: each reads its own number of
                    # body bytes out of it (or none), so no request can be placed after it
                    raise HttpError("Content-Length %d past 2^63 - 1" % m.content_length)
                self.msg = m
                out.append((m, True, False))
            elif isinstance(ev, h11.Data):
                self.msg.add_body(ev.data, self.body_limit, self.flush)
                if not out or out[-1][0] is not self.msg:
                    out.append((self.msg, False, False))  # body bytes: the partial body
            elif isinstance(ev, h11.EndOfMessage):
                m = self.msg
                for name, value in ev.headers.raw_items():
                    m.trailers[name.decode("latin-1").lower()] = value.decode("latin-1")
                if m.grpc is not None and m.grpc.buf:
                    raise HttpError("a gRPC message cut short by the end of its body")
                m.finish()
                if out and out[-1][0] is m:
                    out[-1] = (m, True, True)
                else:
                    out.append((m, False, True))
                pending = bytes(self.conn.trailing_data[0])
                if self.is_request:
                    if m.should_upgrade:
                        # h11 pauses after an Upgrade request; fgex does not take it as a
                        # switch: the server may answer 200 and read what follows as
                        # requests, so it is parsed as requests until the 101 comes
                        self.proposed = m
                    elif not m.keep_alive:
                        self.closing = "HTTP/%s%s" % (m.http_version, ", Connection: close"
                                                       if m.http_version == "1.1" else "")
                        if pending:
                            raise HttpError("bytes after a request that ends the connection "
                                            "(%s): no request can hold them" % self.closing)
                self.conn = None
                if not pending:
                    break
                self._new_conn(pending)
        if self.is_request and self.conn is not None and self.msg is None and \
                not could_start_request(bytes(self.conn.trailing_data[0][:8192])):
            raise HttpError("bytes that start no request: %r" % bytes(
                self.conn.trailing_data[0][:40]))
        for m, _, done in out:
            if not done and m._body_parts:
                m.partial_body()
        return out
