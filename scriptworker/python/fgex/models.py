"""What a filter function receives, chosen by its parameters' annotations (Firegex's models).
Each class has a _fetch(ctx) the engine calls once per chunk of bytes: it returns the value
(or a list of values: the function is called once for each), or raises NotReady (not called
this time) or StreamVerdict (a setting decided the connection)."""
import zlib
from collections import deque

from fgex.actions import Action, ExceptionAction, FullStreamAction
from fgex.errors import NotReady, StreamVerdict
from fgex.http import GRPC_MSG_MAX, HttpError, Parser


def _full(ctx, what):
    """The configured action when what (a stream or a body) outgrows FGEX_STREAM_MAX_SIZE;
    returns normally for FLUSH."""
    a = ctx.full_stream_action
    if a is FullStreamAction.FLUSH:
        return
    if a is FullStreamAction.ACCEPT:
        raise StreamVerdict(None, what + " past FGEX_STREAM_MAX_SIZE: accepted as is")
    raise StreamVerdict(Action.REJECT if a is FullStreamAction.REJECT else Action.DROP,
                        "@MAX_STREAM_SIZE_REACHED")


class RawPacket:
    """One chunk of a connection's bytes as fgex received it: on the NFQUEUE layer one TCP
    segment's payload in stream order, on the proxy layer one read. fgex hands no IP or TCP
    header to a filter: raw_packet is the payload (raw_packet_header_len 0), as l4_data is.

    Editing (Firegex's mangling): assign l4_data (or raw_packet) and return UNSTABLE_MANGLE
    (4.0.2), or assign data (5.0.0); the chunk goes on as the new bytes, of any length, unless
    a later function refuses it. The proxy layer sends them; the NFQUEUE layer cannot (see
    docs/scripts.md) and gives the chunk the service's fail policy, said in the script log."""

    def __init__(self, data, is_input, is_ipv6, is_tcp=True, src_ip="", dst_ip="", src_port=0,
                 dst_port=0, l4=None):
        self._data = bytes(data)
        self._is_input = bool(is_input)
        self._is_ipv6 = bool(is_ipv6)
        self._l4 = str(l4) if l4 else ("tcp" if is_tcp else "udp")
        self._src = (str(src_ip), int(src_port))
        self._dst = (str(dst_ip), int(dst_port))
        self._edited = False   # l4_data / raw_packet / data assigned
        self._data_by = None   # the function that assigned data (5.0.0: that is the edit)
        self._current = None   # the function being called (the engine sets it)

    is_input = property(lambda self: self._is_input)
    is_output = property(lambda self: not self._is_input)
    is_ipv6 = property(lambda self: self._is_ipv6)
    is_tcp = property(lambda self: self._l4 == "tcp")
    l4 = property(lambda self: self._l4)
    is_stream = property(lambda self: self._l4 in ("tcp", "quic"))
    src_ip = property(lambda self: self._src[0])
    src_port = property(lambda self: self._src[1])
    dst_ip = property(lambda self: self._dst[0])
    dst_port = property(lambda self: self._dst[1])
    client_ip = property(lambda self: (self._src if self._is_input else self._dst)[0])
    client_port = property(lambda self: (self._src if self._is_input else self._dst)[1])
    server_ip = property(lambda self: (self._dst if self._is_input else self._src)[0])
    server_port = property(lambda self: (self._dst if self._is_input else self._src)[1])
    data_size = property(lambda self: len(self._data))
    l4_size = property(lambda self: len(self._data))
    raw_packet_header_len = property(lambda self: 0)

    def _set(self, v, what):
        if not isinstance(v, (bytes, bytearray, memoryview)):
            raise TypeError("%s must be bytes, not %s" % (what, type(v).__name__))
        v = bytes(v)
        if len(v) > 1 << 16:
            raise ValueError("%s: %d bytes, more than the 65536 a packet can carry" % (
                what, len(v)))
        self._data = v
        self._edited = True

    @property
    def data(self):
        return self._data

    @data.setter
    def data(self, v):
        self._set(v, "data")
        self._data_by = self._current

    @property
    def l4_data(self):
        return self._data

    @l4_data.setter
    def l4_data(self, v):
        self._set(v, "l4_data")

    @property
    def raw_packet(self):
        return self._data

    @raw_packet.setter
    def raw_packet(self, v):
        self._set(v, "raw_packet")

    @classmethod
    def _fetch(cls, ctx):
        return ctx.pkt

    def __repr__(self):
        return "RawPacket(data=%r, is_input=%r, %s:%d -> %s:%d, %s)" % (
            self._data, self._is_input, self._src[0], self._src[1], self._dst[0],
            self._dst[1], self._l4)


class _TCPStream:
    _input = True

    def __init__(self, data, is_ipv6):
        self._data = bytes(data)
        self._is_ipv6 = is_ipv6

    data = property(lambda self: self._data)
    total_stream_size = property(lambda self: len(self._data))
    is_ipv6 = property(lambda self: self._is_ipv6)

    @classmethod
    def _fetch(cls, ctx):
        if ctx.pkt.is_input != cls._input:
            raise NotReady()
        key = "stream_in" if cls._input else "stream_out"
        obj = ctx.call_mem.get(key)
        if obj is None:
            buf = ctx.in_buf if cls._input else ctx.out_buf
            if len(buf) + len(ctx.pkt.data) > ctx.stream_max_size:
                _full(ctx, "the stream")
                del buf[:]  # FLUSH: start again from this chunk
            buf += ctx.pkt.data
            obj = ctx.call_mem[key] = cls(buf, ctx.is_ipv6)
        return obj

    def __repr__(self):
        return "%s(%d bytes)" % (type(self).__name__, len(self._data))


class TCPInputStream(_TCPStream):
    """The client-to-server bytes so far (bounded by FGEX_STREAM_MAX_SIZE)."""
    _input = True


class TCPOutputStream(_TCPStream):
    """The server-to-client bytes so far."""
    _input = False


TCPClientStream = TCPInputStream
TCPServerStream = TCPOutputStream


class HttpHistory:
    """The requests and responses completed earlier on this connection (at most
    FGEX_MAX_HISTORY_SIZE of each, the oldest dropped first)."""

    def __init__(self, requests=None, responses=None):
        self._requests = list(requests or [])
        self._responses = list(responses or [])

    @property
    def requests(self):
        return list(self._requests)

    @property
    def responses(self):
        return list(self._responses)

    @classmethod
    def _fetch(cls, ctx):
        """The history before the message being given to the function (Firegex's: the
        message's own snapshot), whichever order the parameters come in."""
        if not ctx.http_broken:
            try:
                evs = _http_events(ctx)
            except NotReady:
                evs = []
            snaps = [snap for m, head, done, snap in evs if head or done]
            if snaps:
                return snaps[0] if len(snaps) == 1 else snaps
        return cls(ctx.hist_req, ctx.hist_resp)

    def __repr__(self):
        return "<HttpHistory requests=%d responses=%d>" % (len(self._requests), len(self._responses))


HttpStreamHistory = HttpHistory


def _http_events(ctx, quiet=False):
    """Parse this chunk once, whichever HTTP models ask: [(message, headers_now, complete_now,
    history snapshot)]. quiet: a request model's look at a server chunk (only to learn of a
    101): bytes that are not HTTP stop the response parser without a verdict, which a
    response model asking for the same chunk still gives."""
    evs = ctx.call_mem.get("http")
    if evs is not None:
        return evs
    if ctx.http_broken:
        raise NotReady()
    inp = ctx.pkt.is_input
    p = ctx.http_parser(inp)
    try:
        e = ctx.call_mem.get("http_err")
        if e is not None:
            raise e
        if not inp and ctx.resp_broken:
            raise NotReady()
        got = p.feed(ctx.pkt.data)
    except HttpError as e:
        if quiet:
            ctx.call_mem["http_err"] = e
            ctx.resp_broken = True
            raise NotReady() from None
        ctx.http_broken = True
        a = ctx.invalid_encoding_action
        if a in (ExceptionAction.REJECT, Action.REJECT):
            raise StreamVerdict(Action.REJECT, "invalid HTTP: %s" % e) from None
        if a in (ExceptionAction.DROP, Action.DROP):
            raise StreamVerdict(Action.DROP, "invalid HTTP: %s" % e) from None
        if a is ExceptionAction.NOACTION:
            raise StreamVerdict(None, "invalid HTTP: %s" % e) from None
        raise NotReady() from None  # ACCEPT: this chunk passes, the HTTP models stop
    if not inp and p.ws_deflate is not None:
        # the client's frames are compressed as the server's 101 agreed
        ctx.http_parser(True).ws_deflate = p.ws_deflate
    if not inp and p.upgraded:
        # only the server's 101 switches the client's side to the new protocol
        ctx.http_parser(True).confirm_upgrade()
    evs = []
    for m, head, done in got:
        if inp and head and not done:
            pass
        if inp and head and m.method is not None:
            ctx.resp_methods_push((m.method, m.lheaders.get("upgrade") if m.should_upgrade
                                   else None))
        if m.truncated and not (m.message_complete and not done):
            _full(ctx, "a body")  # at its end, and at each chunk of it past the limit
        snap = HttpHistory(ctx.hist_req, ctx.hist_resp)
        evs.append((m, head, done, snap))
        if done and not m.added_to_history:
            m.added_to_history = True
            full = (HttpFullRequest if inp else HttpFullResponse)(m, None)
            full._history = snap
            (ctx.hist_req if inp else ctx.hist_resp).append(full)
    if not got and p.msg is not None and p.msg.truncated and not p.msg.message_complete:
        _full(ctx, "a body")
    ctx.call_mem["http"] = evs
    return evs


class _HttpBase:
    _request = True

    def __init__(self, msg, history):
        self._message = msg
        self._history = history

    history = property(lambda self: self._history if self._history is not None else HttpHistory())
    url = property(lambda self: self._message.url)
    headers = property(lambda self: self._message.headers)
    user_agent = property(lambda self: self._message.user_agent)
    content_encoding = property(lambda self: self._message.content_encoding)
    content_type = property(lambda self: self._message.content_type)
    content_length = property(lambda self: self._message.content_length)
    body = property(lambda self: self._message.body)
    body_decoded = property(lambda self: self._message.body_decoded())
    headers_complete = property(lambda self: self._message.headers_complete)
    message_complete = property(lambda self: self._message.message_complete)
    http_version = property(lambda self: self._message.http_version)
    keep_alive = property(lambda self: self._message.keep_alive)
    should_upgrade = property(lambda self: self._message.should_upgrade)
    upgrading_to_h2 = property(lambda self: self._message.upgrading_to("h2c"))
    upgrading_to_ws = property(lambda self: self._message.upgrading_to("websocket"))
    stream = property(lambda self: self._message.stream)
    # Firegex's count: the url (a response: its reason phrase), each header's name and value,
    # the body and what streamed after the head; raw_size: every byte on the wire for it
    total_size = property(lambda self: self._message.fg_size + len(self._message.stream))
    raw_size = property(lambda self: self._message.total_size)
    # after a WebSocket upgrade: this direction's frames so far (websockets' Frame: opcode,
    # data, fin), permessage-deflate undone; ws_error: why decoding stopped, if it did
    ws_stream = property(lambda self: list(self._message.ws.frames) if self._message.ws else [])
    ws_error = property(lambda self: self._message.ws.error if self._message.ws else None)

    def get_header(self, header, default=None):
        return self._message.lheaders.get(header.lower(), default)

    @classmethod
    def _want(cls, head, done):
        return True  # the headers, the end, and each chunk of a stream after an upgrade

    @classmethod
    def _fetch(cls, ctx):
        if ctx.pkt.is_input != cls._request:
            if cls._request and not ctx.pkt.is_input:
                _http_events(ctx, quiet=True)  # a 101 switches the requests' side
            raise NotReady()
        out = [cls(m, snap) for m, head, done, snap in _http_events(ctx) if cls._want(head, done)]
        if not out:
            raise NotReady()
        return out[0] if len(out) == 1 else out

    def __repr__(self):
        m = self._message
        what = ("%r %s" % (m.method, m.url)) if m.is_request else str(m.status_code)
        return "<%s %s complete=%s>" % (type(self).__name__, what, m.message_complete)


class HttpRequest(_HttpBase):
    """The current request: called when its headers are complete and again when its body is
    (once when both arrive together)."""
    _request = True
    method = property(lambda self: None if self._message.method is None else Method(
        self._message.method.decode("latin-1")))


class HttpRequestHeader(HttpRequest):
    """Called once per request, when its headers are complete; body is None."""
    body = property(lambda self: None)
    body_decoded = property(lambda self: None)

    @classmethod
    def _want(cls, head, done):
        return head


class HttpFullRequest(HttpRequest):
    """Called once per request, when it is complete."""

    @classmethod
    def _want(cls, head, done):
        return done


class HttpResponse(_HttpBase):
    """The current response, called as HttpRequest is."""
    _request = False
    # the reason phrase equal to its number too (StatusCode); the two apart
    status_code = property(lambda self: None if self._message.status_code is None else
                           StatusCode(self._message.reason, self._message.status_code))
    status_phrase = property(lambda self: self._message.reason)
    status_number = property(lambda self: self._message.status_code)


class HttpResponseHeader(HttpResponse):
    body = property(lambda self: None)
    body_decoded = property(lambda self: None)

    @classmethod
    def _want(cls, head, done):
        return head


class HttpFullResponse(HttpResponse):
    @classmethod
    def _want(cls, head, done):
        return done


def _grpc_inflate(payload, encoding):
    """A compressed message's bytes undone (gzip, deflate: zlib's format or gzip's, at most
    GRPC_MSG_MAX); False when they do not inflate or the encoding is another."""
    if encoding not in ("gzip", "deflate"):
        return False
    d = zlib.decompressobj(16 + zlib.MAX_WBITS if encoding == "gzip" else 32 + zlib.MAX_WBITS)
    try:
        out = d.decompress(payload, GRPC_MSG_MAX + 1)
    except zlib.error:
        return False
    if not d.eof or d.unused_data or len(out) > GRPC_MSG_MAX:
        return False
    return out


def _grpc_events(ctx):
    """The gRPC messages this chunk completed (each once, whichever gRPC models ask)."""
    got = ctx.call_mem.get("grpc")
    if got is not None:
        return got
    got = []
    for m, head, done, snap in _http_events(ctx):
        if m.grpc is None:
            continue
        if m.is_request and head:
            ctx.grpc_method = m.url
        status = m.trailers.get("grpc-status", m.lheaders.get("grpc-status"))
        try:
            status = int(status) if status is not None else None
        except ValueError:
            status = None
        for compressed, payload in m.grpc.ready:
            got.append(GrpcMessage(payload, compressed, m.is_request, ctx.grpc_method,
                                   status if not m.is_request else None, m.grpc.encoding))
    ctx.call_mem["grpc"] = got
    return got


class GrpcMessage:
    """One gRPC message (Firegex 5.0.0's model), called for each as it completes, both ways:
    payload without its 5-byte prefix, as sent (compressed says whether its flag byte says so;
    payload_decoded, fgex's, is it inflated: grpc-encoding gzip or deflate, False when it does
    not inflate); method is the call's path; grpc_status the response's status where it was
    known (trailers that came with the message's chunk, or a trailers-only head). Not called
    on a body that is not gRPC."""
    _request = None

    def __init__(self, payload, compressed, is_request, method, grpc_status, encoding):
        self._payload = payload
        self._compressed = compressed
        self._is_request = is_request
        self._method = method
        self._grpc_status = grpc_status
        self._encoding = encoding
        self._decoded = None

    payload = property(lambda self: self._payload)
    compressed = property(lambda self: self._compressed)
    is_request = property(lambda self: self._is_request)
    is_response = property(lambda self: not self._is_request)
    method = property(lambda self: self._method)
    grpc_status = property(lambda self: self._grpc_status)
    encoding = property(lambda self: self._encoding)

    @property
    def payload_decoded(self):
        if not self._compressed:
            return self._payload
        if self._decoded is None:
            self._decoded = _grpc_inflate(self._payload, self._encoding)
        return self._decoded

    @classmethod
    def _fetch(cls, ctx):
        if cls._request is not None and ctx.pkt.is_input != cls._request:
            raise NotReady()
        out = [g for g in _grpc_events(ctx) if cls._request is None or g.is_request == cls._request]
        if not out:
            raise NotReady()
        return [cls._narrow(g) for g in out] if len(out) > 1 else cls._narrow(out[0])

    @classmethod
    def _narrow(cls, g):
        if type(g) is cls:
            return g
        n = cls.__new__(cls)
        n.__dict__.update(g.__dict__)
        return n

    def __repr__(self):
        return "<%s %s %s %d bytes%s>" % (type(self).__name__, self._method,
                                          "request" if self._is_request else "response",
                                          len(self._payload),
                                          " compressed" if self._compressed else "")


class GrpcRequest(GrpcMessage):
    """GrpcMessage, client to service only."""
    _request = True


class GrpcResponse(GrpcMessage):
    """GrpcMessage, service to client only."""
    _request = False


class StatusCode(str):
    """HttpResponse.status_code. Firegex 4.0.2's code (and the tests of both versions) give
    the reason phrase, "OK", as the status; 5.0.0's documentation gives the number, 404, with
    the phrase as status_phrase. A file written for either compares right: this is the phrase
    (a str) that also equals, orders against and converts to its number."""

    def __new__(cls, phrase, number):
        self = super().__new__(cls, phrase or "")
        self.number = number
        return self

    def _num(self, other):
        return isinstance(other, int) and not isinstance(other, bool) and self.number is not None

    def __eq__(self, other):
        return self.number == other if self._num(other) else str.__eq__(self, other)

    def __ne__(self, other):
        return not self.__eq__(other)

    def __lt__(self, other):
        return self.number < other if self._num(other) else str.__lt__(self, other)

    def __le__(self, other):
        return self.number <= other if self._num(other) else str.__le__(self, other)

    def __gt__(self, other):
        return self.number > other if self._num(other) else str.__gt__(self, other)

    def __ge__(self, other):
        return self.number >= other if self._num(other) else str.__ge__(self, other)

    __hash__ = str.__hash__

    def __int__(self):
        return self.number

    def __index__(self):
        return self.number


class Method(str):
    """HttpRequest.method: a str as Firegex gives it ("GET"); it also equals the same bytes
    (b"GET"), as fgex documented it before."""

    def __eq__(self, other):
        if isinstance(other, (bytes, bytearray)):
            return self.encode("latin-1") == other
        return str.__eq__(self, other)

    def __ne__(self, other):
        return not self.__eq__(other)

    __hash__ = str.__hash__


class ConnCtx:
    """One connection's state for the models: stream buffers, the two HTTP parsers, the
    history, the file's settings; pkt and call_mem are the chunk being judged."""

    def __init__(self, settings, is_ipv6):
        self.stream_max_size = settings["FGEX_STREAM_MAX_SIZE"]
        self.full_stream_action = settings["FGEX_FULL_STREAM_ACTION"]
        self.invalid_encoding_action = settings["FGEX_INVALID_ENCODING_ACTION"]
        n = settings["FGEX_MAX_HISTORY_SIZE"]
        self.hist_req = deque(maxlen=n)
        self.hist_resp = deque(maxlen=n)
        self.is_ipv6 = is_ipv6
        self.in_buf = bytearray()
        self.out_buf = bytearray()
        self._parsers = [None, None]
        self.http_broken = False
        self.resp_broken = False  # the server's bytes stopped parsing (see _http_events)
        self.pkt = None
        self.call_mem = {}
        self.grpc_method = None  # the gRPC call's path, for its answers' messages

    def http_parser(self, is_input):
        i = 0 if is_input else 1
        if self._parsers[i] is None:
            self._parsers[i] = Parser(is_input, self.stream_max_size,
                                      self.full_stream_action is FullStreamAction.FLUSH)
        return self._parsers[i]

    def resp_methods_push(self, method):
        self.http_parser(False).req_methods.append(method)


MODELS = {
    RawPacket, TCPInputStream, TCPOutputStream, HttpRequest, HttpRequestHeader,
    HttpFullRequest, HttpResponse, HttpResponseHeader, HttpFullResponse, HttpHistory,
    GrpcMessage, GrpcRequest, GrpcResponse,
}

__all__ = [
    "RawPacket", "TCPInputStream", "TCPOutputStream", "TCPClientStream", "TCPServerStream",
    "HttpRequest", "HttpResponse", "HttpRequestHeader", "HttpResponseHeader",
    "HttpFullRequest", "HttpFullResponse", "HttpHistory", "HttpStreamHistory",
    "GrpcMessage", "GrpcRequest", "GrpcResponse",
]
