"""What a filter function receives, chosen by its parameters' annotations (Firegex's models).
Each class has a _fetch(ctx) the engine calls once per chunk of bytes: it returns the value
(or a list of values: the function is called once for each), or raises NotReady (not called
this time) or StreamVerdict (a setting decided the connection)."""
from collections import deque

from fgex.actions import Action, ExceptionAction, FullStreamAction
from fgex.errors import NotReady, StreamVerdict
from fgex.http import HttpError, Parser


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
    segment's payload in stream order, on the proxy layer one read. fgex does not mangle
    packets: l4_data and raw_packet are read-only and raw_packet holds the payload only."""

    def __init__(self, data, is_input, is_ipv6, is_tcp=True):
        self._data = bytes(data)
        self._is_input = bool(is_input)
        self._is_ipv6 = bool(is_ipv6)
        self._is_tcp = bool(is_tcp)

    is_input = property(lambda self: self._is_input)
    is_ipv6 = property(lambda self: self._is_ipv6)
    is_tcp = property(lambda self: self._is_tcp)
    data = property(lambda self: self._data)
    l4_data = property(lambda self: self._data)
    raw_packet = property(lambda self: self._data)
    l4_size = property(lambda self: len(self._data))
    raw_packet_header_len = property(lambda self: 0)

    @classmethod
    def _fetch(cls, ctx):
        return ctx.pkt

    def __repr__(self):
        return "RawPacket(data=%r, is_input=%r)" % (self._data, self._is_input)


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
        return cls(ctx.hist_req, ctx.hist_resp)

    def __repr__(self):
        return "<HttpHistory requests=%d responses=%d>" % (len(self._requests), len(self._responses))


HttpStreamHistory = HttpHistory


def _http_events(ctx):
    """Parse this chunk once, whichever HTTP models ask: [(message, headers_now, complete_now,
    history snapshot)]."""
    evs = ctx.call_mem.get("http")
    if evs is not None:
        return evs
    if ctx.http_broken:
        raise NotReady()
    inp = ctx.pkt.is_input
    p = ctx.http_parser(inp)
    try:
        got = p.feed(ctx.pkt.data)
    except HttpError as e:
        ctx.http_broken = True
        a = ctx.invalid_encoding_action
        if a in (ExceptionAction.REJECT, Action.REJECT):
            raise StreamVerdict(Action.REJECT, "invalid HTTP: %s" % e) from None
        if a in (ExceptionAction.DROP, Action.DROP):
            raise StreamVerdict(Action.DROP, "invalid HTTP: %s" % e) from None
        if a is ExceptionAction.NOACTION:
            raise StreamVerdict(None, "invalid HTTP: %s" % e) from None
        raise NotReady() from None  # ACCEPT: this chunk passes, the HTTP models stop
    evs = []
    for m, head, done in got:
        if inp and head and not done:
            pass
        if inp and head and m.method is not None:
            ctx.resp_methods_push(m.method)
        if done and m.truncated:
            _full(ctx, "a body")
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
    total_size = property(lambda self: self._message.total_size)
    # fgex does not decode WebSocket frames: the raw bytes are in stream
    ws_stream = property(lambda self: [])

    def get_header(self, header, default=None):
        return self._message.lheaders.get(header.lower(), default)

    @classmethod
    def _want(cls, head, done):
        return head or done

    @classmethod
    def _fetch(cls, ctx):
        if ctx.pkt.is_input != cls._request:
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
    method = property(lambda self: self._message.method)


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
    status_code = property(lambda self: self._message.status_code)


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
        self.pkt = None
        self.call_mem = {}

    def http_parser(self, is_input):
        i = 0 if is_input else 1
        if self._parsers[i] is None:
            self._parsers[i] = Parser(is_input, self.stream_max_size)
        return self._parsers[i]

    def resp_methods_push(self, method):
        self.http_parser(False).req_methods.append(method)


MODELS = {
    RawPacket, TCPInputStream, TCPOutputStream, HttpRequest, HttpRequestHeader,
    HttpFullRequest, HttpResponse, HttpResponseHeader, HttpFullResponse, HttpHistory,
}

__all__ = [
    "RawPacket", "TCPInputStream", "TCPOutputStream", "TCPClientStream", "TCPServerStream",
    "HttpRequest", "HttpResponse", "HttpRequestHeader", "HttpResponseHeader",
    "HttpFullRequest", "HttpFullResponse", "HttpHistory", "HttpStreamHistory",
]
