"""Firegex's internals.models: the verdicts and the settings' values."""
from fgex.actions import Action, ExceptionAction, FullStreamAction  # noqa: F401
