"""Firegex compatibility: `firegex.nfproxy` and `firegex.pyfilters` are fgex's script API."""
