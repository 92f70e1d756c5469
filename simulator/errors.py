"""The one exception type for user mistakes. The CLI prints it as a single line and exits with code 2;
anything else is a bug and keeps its traceback."""

from __future__ import annotations


class UserError(Exception):
    """Bad input: the message names the file (or command-line flag), the field and what was expected."""


class PolicyError(UserError):
    """A verification policy that cannot be loaded or that returned an invalid plan."""


class SourceError(UserError):
    """An acceptance source that cannot be loaded or that returned an invalid outcome."""
