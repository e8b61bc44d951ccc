"""Firegex's internals.data: the per-connection context and the packet model."""
from fgex.compat import DataStreamCtx, RawPacket  # noqa: F401
