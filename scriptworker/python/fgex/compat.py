"""Firegex's internals, the names its own tests and tools import (firegex.nfproxy.internals in
4.0.2, firegex.pyfilters.internals in 5.0.0), over fgex's engine. Firegex's caller runs a
filter file into a dict (glob), calls compile(glob) once per connection, then, per packet,
puts the packet in glob["__firegex_packet_info"] and calls handle_packet(glob), which leaves
{"action", "matched_by", "mangled_packet"} in glob["__firegex_pyfilter_result"]. Here the
connection's state is an fgex Conn kept in glob["__firegex_pyfilter_ctx"]."""
import functools

import fgex
from fgex.actions import Action, ExceptionAction, FullStreamAction  # noqa: F401
from fgex.engine import Conn, Script, ScriptError
from fgex.errors import NotReady as NotReadyToRun  # noqa: F401
from fgex.models import RawPacket

CTX = "__firegex_pyfilter_ctx"
RESULT = "__firegex_pyfilter_result"
_ACTIONS = {"accept": Action.ACCEPT, "drop": Action.DROP, "reject": Action.REJECT,
            "mangle": Action.MANGLE}


class FilterError(Exception):
    """A filter raised, or returned something that is not a verdict."""


def _packet(info):
    """A RawPacket from Firegex's packet info: 5.0.0's keys (data, is_input, is_ipv6, is_tcp,
    src_ip, dst_ip, src_port, dst_port, l4) or 4.0.2's (data, raw_packet, ..., l4_size)."""
    keys = ("is_tcp", "src_ip", "dst_ip", "src_port", "dst_port", "l4")
    return RawPacket(info.get("data", b""), info.get("is_input", True),
                     info.get("is_ipv6", False), **{k: info[k] for k in keys if k in info})


class DataStreamCtx:
    """What a connection keeps between packets, read from the Conn compile() left in glob."""

    def __init__(self, glob, init_pkt=True):
        self.filter_glob = glob
        self.store = glob.setdefault(CTX, {})
        self.call_mem = {}
        info = glob.get("__firegex_packet_info")
        self.current_pkt = _packet(info) if init_pkt and info is not None else None

    def _setting(self, name):
        conn = self.store.get("conn")
        if conn is not None:
            return conn.script.settings[name]
        from fgex.engine import DEFAULTS
        return DEFAULTS[name]

    stream_max_size = property(lambda self: self._setting("FGEX_STREAM_MAX_SIZE"))
    full_stream_action = property(lambda self: self._setting("FGEX_FULL_STREAM_ACTION"))
    invalid_encoding_action = property(lambda self: self._setting("FGEX_INVALID_ENCODING_ACTION"))
    max_history_size = property(lambda self: self._setting("FGEX_MAX_HISTORY_SIZE"))

    @property
    def filter_call_info(self):
        conn = self.store.get("conn")
        return [] if conn is None else [n for n, _, _ in conn.funcs]

    @property
    def data_handler_context(self):
        return self.store.setdefault("data_handler_context", {})


def _names(glob):
    defined = fgex.collect_pyfilters(glob)
    enabled = glob.get("__firegex_pyfilter_enabled")
    if enabled is None:
        return defined
    # a name the file no longer defines is passed over, as 5.0.0 does
    wanted = set(enabled)
    return [n for n in defined if n in wanted]


def compile(glob):  # noqa: A001 - Firegex's name
    """Prepares glob (a filter file's globals) for its connection's packets."""
    glob["print"] = functools.partial(print, flush=True)
    try:
        script = Script.from_globals(glob, _names(glob))
    except ScriptError as e:
        raise Exception(e.reason) from None
    for line, text in script.warnings:
        print("WARNING: %s" % text, flush=True)
    glob.setdefault(CTX, {})["conn"] = Conn(script, False)
    glob[RESULT] = None


def handle_packet(glob):
    """Judges the packet in glob["__firegex_packet_info"]; the verdict goes in
    glob["__firegex_pyfilter_result"]. A filter's exception is raised, as in Firegex."""
    conn = glob.get(CTX, {}).get("conn")
    if conn is None:
        compile(glob)
        conn = glob[CTX]["conn"]
    pkt = _packet(glob["__firegex_packet_info"])
    conn.ctx.is_ipv6 = pkt.is_ipv6
    conn.addrs = (pkt.client_ip, pkt.client_port, pkt.server_ip, pkt.server_port)
    v = conn.feed(pkt.is_input, pkt.data)
    if v.action == "error":
        raise FilterError(v.detail)
    glob[RESULT] = {"action": _ACTIONS[v.action].value, "matched_by": v.function or None,
                    "mangled_packet": v.data if v.action == "mangle" else None}
    return glob[RESULT]


def get_filters_info(code, proto=None):
    """(name, line, [model names]) of each filter code defines."""
    return Script(code, "<script>").info()


def get_filter_names(code, proto=None):
    return [f["name"] for f in get_filters_info(code, proto)]
