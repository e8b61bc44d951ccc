"""Internal signals of the models to the engine (not for filter files)."""


class NotReady(Exception):
    """The data a parameter needs is not there yet: the function is not called this time."""


class StreamVerdict(Exception):
    """A setting decided the connection (full stream, invalid encoding): carries the Action,
    or None for "stop calling the filters, accept the rest"."""

    def __init__(self, action, why):
        super().__init__(why)
        self.action = action
        self.why = why
