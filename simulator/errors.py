"""The one exception type for user mistakes. The CLI prints it as a single line and exits with code 2;
anything else is a bug and keeps its traceback."""

from __future__ import annotations


class UserError(Exception):
    """Bad input: the message names the file (or command-line flag), the field and what was expected."""


class PolicyError(UserError):
    """A verification policy that cannot be loaded or that returned an invalid plan."""


class SourceError(UserError):
    """An acceptance source that cannot be loaded or that returned an invalid outcome."""


class PluginCrash(UserError):
    """A plug-in (a policy, acceptance source or engine rule named as ``module:Class`` or an entry point) raised
    during a run: one line names it, the system and the load point; ``detail`` keeps the traceback, which
    ``simulate --debug`` prints (it travels with the error from a worker process, where the traceback object
    cannot)."""

    def __init__(self, message: str, detail: str = ""):
        super().__init__(message)
        self.detail = detail
