"""Firegex's module name for its Python filters, served by fgex's implementation."""
from fgex import *  # noqa: F401,F403
from fgex import __all__, collect_pyfilters, get_pyfilters, clear_pyfilter_registry  # noqa: F401
