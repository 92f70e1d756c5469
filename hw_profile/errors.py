"""The one exception type for user mistakes in hw_profile (a bad flag value, an unknown GPU or model, a file that
cannot be read). The CLI prints its message as one line and exits with code 2; programming errors are not caught.

``TableError`` (hw_profile.tables.step_table) is a subclass so that a bad table file reads the same way."""

from __future__ import annotations


class HwProfileError(ValueError):
    """A user-facing error; the message names the flag or file, the field and what was expected."""
