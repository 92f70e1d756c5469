"""The acceptance-source interface (see the package docstring)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np


@dataclass
class Proposal:
    """One step's drafts for R requests.

    confidence: (R, gamma) conditional confidences the policy sees (calibrated or raw, as the scenario says).
    outcome:    (R,) accepted draft tokens if all gamma were verified, when the source draws it in advance (the
                oracle needs it); None otherwise.
    truth:      (R, gamma) true conditional acceptance probabilities where the source knows them; None otherwise.
    ended:      (R,) bool, set by ``verify`` of a source that generates real tokens: the request's emitted tokens
                reached its end-of-sequence token, so it finishes now whatever its drawn length; None otherwise.
    """

    confidence: np.ndarray
    outcome: np.ndarray | None = None
    truth: np.ndarray | None = None
    ended: np.ndarray | None = None


@runtime_checkable
class AcceptanceSource(Protocol):
    gamma: int

    def attach(self, ids: np.ndarray, mix_index: np.ndarray) -> None: ...

    def propose(self, ids: np.ndarray) -> Proposal: ...

    def verify(self, proposal: Proposal, lengths: np.ndarray) -> np.ndarray: ...

    def detach(self, ids: np.ndarray) -> None: ...


class GrowingArrays:
    """Per-request state indexed by request id, grown geometrically (ids are dense and increasing).

    Each field is a dtype, or (dtype, width) for a row of ``width`` values per request."""

    def __init__(self, **fields: type | tuple[type, int]):
        self._fields = {k: (v, ()) if not isinstance(v, tuple) else (v[0], (v[1],)) for k, v in fields.items()}
        self._cap = 0
        for name, (dt, row) in self._fields.items():
            setattr(self, name, np.zeros((0, *row), dtype=dt))

    def ensure(self, max_id: int) -> None:
        if max_id < self._cap:
            return
        cap = max(1024, 2 * (max_id + 1))
        for name, (dt, row) in self._fields.items():
            old = getattr(self, name)
            new = np.zeros((cap, *row), dtype=dt)
            new[: len(old)] = old
            setattr(self, name, new)
        self._cap = cap


class NoDrafts:
    """The source of the drafter-less system: nothing is ever proposed."""

    gamma = 0

    def attach(self, ids: np.ndarray, mix_index: np.ndarray) -> None:
        pass

    def propose(self, ids: np.ndarray) -> Proposal:
        raise RuntimeError("a system without a drafter proposes nothing")

    def verify(self, proposal: Proposal, lengths: np.ndarray) -> np.ndarray:
        raise RuntimeError("a system without a drafter verifies nothing")

    def detach(self, ids: np.ndarray) -> None:
        pass
