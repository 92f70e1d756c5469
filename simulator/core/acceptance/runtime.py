"""The extension of the acceptance-source interface for sources that generate real tokens (a runtime in the loop).

A statistical or replaying source decides acceptance by numbers alone and needs only the core calls of
``AcceptanceSource``. A source that runs real models (the runtime's ``live``; docs/hil.md) holds real caches and
samples real tokens, so it also has to hear of what the engine does to requests between steps: a prefill that
completes (its sampled token may be the end token), a prompt prefilled by a disaggregated pool, a recompute
preemption. It may also time its forwards and record what it generated. The engine checks once, when a run is
built, whether its source is a ``RuntimeSource``, and calls these hooks only then.

Construction: the keyword arguments of every source (``AcceptanceSource``) plus the engine facts a runtime sizes
its caches by, which it must not read from the scenario (the engine may be built in code):

- ``slots``: the most requests that can hold a cache at once (every replica's ``max_running``, all replicas);
- ``disaggregated``: a separate pool prefills prompts, so ``prefilled_elsewhere`` will be called.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import numpy as np

from simulator.core.acceptance.base import AcceptanceSource

#: the keyword arguments a RuntimeSource is given beyond those of every source
ENGINE_FACTS = ("slots", "disaggregated")


class RuntimeSource(AcceptanceSource):
    """An acceptance source that generates real tokens; the hooks below default to doing nothing."""

    #: the drafter-less system (``ar``) is served by this source too (propose gives (R, 0), verify lengths 0)
    decodes_without_drafter: ClassVar[bool] = False
    #: ``step_ms`` measures the step's real forwards, which ``hardware.clock: live`` uses as the step's time
    measures_time: ClassVar[bool] = False

    def prefilled(self, ids: np.ndarray) -> np.ndarray | None:
        """These requests' prefill on a replica completed: the engine counts the token it yields (the first token,
        or the next one after a recompute). Sample it here and return (n,) bool: the requests that token ended
        (end-of-sequence), which the engine finishes in this step; None when none did."""
        return None

    def prefilled_elsewhere(self, ids: np.ndarray) -> np.ndarray | None:
        """A disaggregated prefill pool finished these requests' prefill and emitted their first token (before they
        join a replica). Sample that token here and return (n,) bool: the requests it ended (end-of-sequence),
        which the engine finishes with their one token; None when none did."""
        return None

    def preempt(self, ids: np.ndarray) -> None:
        """Requests evicted by recompute preemption; they return later through ``propose`` (and finish with
        ``detach``). Free their real caches here."""

    def step_ms(self) -> float:
        """Milliseconds the step's forwards took since the last call (sources with ``measures_time``)."""
        raise NotImplementedError(f"{type(self).__name__} measures no time (measures_time is False)")

    def measured_tables(self) -> dict:
        """What a ``measures_time`` source measured, as step-time table rows: {"target": [...], "drafter": [...],
        "meta": {...}} (written by simulator/outputs/live_tables.py)."""
        raise NotImplementedError(f"{type(self).__name__} measures no time (measures_time is False)")

    def start_recording(self) -> bool:
        """Begin recording each step's full-block outcome for ``write_trace`` (``simulate --records``); False
        when nothing will be recorded."""
        return False

    def write_trace(self, path: Path) -> None:
        """Write what was recorded in the trace format that ``source: trace`` reads."""
