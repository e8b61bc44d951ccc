"""Firegex's models module, served by fgex's implementation."""
from fgex.models import *  # noqa: F401,F403
from fgex.models import __all__  # noqa: F401
