"""The one exception type for user mistakes in hw_profile (a bad flag value, an unknown GPU or model, a file that
cannot be read). The CLI prints its message as one line and exits with code 2; programming errors are not caught.

``TableError`` (hw_profile.tables.step_table) is a subclass so that a bad table file reads the same way."""

from __future__ import annotations

import json
from pathlib import Path


class HwProfileError(ValueError):
    """A user-facing error; the message names the flag or file, the field and what was expected."""


def read_json_object(path: Path, what: str, error: type[HwProfileError] = HwProfileError) -> dict:
    """The JSON object in ``path`` (a config.json, a sidecar); one that cannot be read, or holds no object, is an
    ``error`` naming the file and ``what`` it should be."""
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise error(f"{path}: not a readable {what} ({exc})") from None
    if not isinstance(data, dict):
        raise error(f"{path}: a {what} must hold a JSON object")
    return data
