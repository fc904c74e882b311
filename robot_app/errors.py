"""Errors shared across the app: the command line's and the operator's requests (a leaf module: imports nothing
of the project)."""


class UsageError(Exception):
    """Bad input given on the command line or in a file it names (exit status 2)."""


class RequestError(ValueError):
    """An operator's request the robot cannot carry out as asked (the message says why, for the screen).

    ``bad_input=True`` marks a request that is malformed or names what does not exist (the UI answers
    HTTP 400); otherwise the robot's state refuses it (busy, no fix, not connected: HTTP 409). The jobs'
    errors (route, task, recording) are its subclasses.
    """

    def __init__(self, message: str, *, bad_input: bool = False) -> None:
        super().__init__(message)
        self.bad_input = bool(bad_input)
