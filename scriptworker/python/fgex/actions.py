"""The verdicts and the settings' values, with Firegex's names and numbers."""
from enum import Enum


class Action(Enum):
    ACCEPT = 0
    DROP = 1
    REJECT = 2
    MANGLE = 3


class ExceptionAction(Enum):
    ACCEPT = 0
    DROP = 1
    REJECT = 2
    NOACTION = 3


class FullStreamAction(Enum):
    FLUSH = 0
    ACCEPT = 1
    REJECT = 2
    DROP = 3
