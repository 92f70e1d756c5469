"""The plug-in paths of the last release (``simulator.policies``, ``simulator.acceptance``,
``simulator.engine_rules``) keep working for one release; importing one warns once and names the stable import."""

from __future__ import annotations

import warnings


def warn_moved(old: str, names: str) -> None:
    # FutureWarning, not DeprecationWarning: Python hides the latter outside __main__, and a plug-in author runs
    # their class through `simulate`, never as __main__.
    warnings.warn(f"{old} is deprecated and goes away in the next release: use `from simulator import {names}`",
                  FutureWarning, stacklevel=3)
