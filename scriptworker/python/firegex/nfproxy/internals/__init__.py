"""Firegex's internals module (compile, handle_packet, get_filter_names), over fgex's engine."""
from fgex.compat import *  # noqa: F401,F403
from fgex.compat import (DataStreamCtx, FilterError, NotReadyToRun, RawPacket,  # noqa: F401
                         compile, get_filter_names, get_filters_info, handle_packet)
from fgex.actions import Action, ExceptionAction, FullStreamAction  # noqa: F401
