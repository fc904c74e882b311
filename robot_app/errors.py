"""Errors shared by the command line and the modules it runs (a leaf module: imports nothing of the project)."""


class UsageError(Exception):
    """Bad input given on the command line or in a file it names (exit status 2)."""
