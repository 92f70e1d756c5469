"""The acceptance-source interface (see the package docstring)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from simulator.core.batch_kernels import within
from simulator.core.plugins import registrar
from simulator.errors import SourceError


@dataclass
class Proposal:
    """One step's drafts for R requests.

    confidence: (R, gamma) conditional confidences the policy sees (calibrated or raw, as the scenario says).
    outcome:    (R,) accepted draft tokens if all gamma were verified, when the source draws it in advance (the
                oracle needs it); None otherwise.
    ended:      (R,) bool, set by ``verify`` of a source that generates real tokens: the request's emitted tokens
                reached its end-of-sequence token, so it finishes now whatever its drawn length; None otherwise.
    """

    confidence: np.ndarray
    outcome: np.ndarray | None = None
    ended: np.ndarray | None = None


class AcceptanceSource:
    """Base class of acceptance sources (built-in and plug-in); see the package docstring for the calls.

    The engine calls, with arrays across the batch: ``attach`` when requests are created (then ``end_positions``),
    ``propose`` every step for the decoding requests, ``verify`` with the lengths the policy chose, ``detach`` when
    requests finish. ``gamma`` is the block length the system drafts; ``propose`` returns (R, gamma) confidences.

    Every source, built in or plug-in, is constructed once per run with keyword arguments: ``scenario`` (the
    LoadedScenario), ``drafter`` (name), ``gamma``, ``mix`` (the workload's mix keys, in order), ``calibrated``
    (bool), ``rng`` (a numpy Generator it must draw all its randomness from), plus the scenario's
    ``acceptance.options``. A bad option value should raise ValueError (reported as one line naming the field).
    A source that generates real tokens subclasses ``simulator.core.acceptance.runtime.RuntimeSource`` instead.
    """

    #: the name a built-in registers under (``simulator.core.acceptance.register``); plug-ins are named by their spec
    name: ClassVar[str] = ""
    gamma: int = 0
    #: ``propose`` fills Proposal.outcome (the accepted prefix were the whole block verified): policies that
    #: read it (``needs_outcome``, the oracle) can run on this source
    draws_outcome: ClassVar[bool] = False
    #: False when ``propose``'s confidences are zeros standing in for a confidence head the drafter lacks (a trace
    #: recorded without one): policies that read confidences (``reads_confidence``) are refused on this source
    has_confidence: bool = True

    @classmethod
    def input_digest(cls, options: dict) -> str:
        """A short string that changes whenever data this source would read with these ``acceptance`` options
        changes, beyond the scenario, its named files and the code (which the run key already hashes): e.g. a
        built model it loads. Stored runs are reused only while it is unchanged. '' when there is no such data."""
        return ""

    def attach(self, ids: np.ndarray, mix_index: np.ndarray) -> None:
        """New requests: ids (n,) request ids (dense, increasing), mix_index (n,) index of their mix entry."""

    def propose(self, ids: np.ndarray) -> Proposal:
        raise NotImplementedError

    def verify(self, proposal: Proposal, lengths: np.ndarray) -> np.ndarray:
        """Accepted draft tokens (R,) int, each in 0..lengths[r], when lengths (R,) were verified."""
        raise NotImplementedError

    def detach(self, ids: np.ndarray) -> None:
        """Requests that finished (their state may be dropped)."""

    def end_positions(self, ids: np.ndarray) -> np.ndarray | None:
        """Where these just-attached requests end, for a source that knows it before they run (a replayed trace's
        recorded ends, a profile's fitted end model): (n,) int, the position in the output of each one's
        end-of-sequence token (1 = the first token), ``simulator.core.acceptance.ends.NEVER`` for none. The engine ends
        each at the earlier of that and its drawn length. None (the default): the drawn lengths stand (a source
        that generates real tokens ends requests as they come, through ``Proposal.ended``)."""
        return None


#: the built-in sources by name (each registers itself with ``register``; simulator.core.acceptance.resolve_source
#: looks names up here before plug-ins)
REGISTRY: dict[str, type[AcceptanceSource]] = {}
register = registrar(REGISTRY)


def checked_confidence(source: AcceptanceSource, confidence: object, rows: int, gamma: int) -> np.ndarray:
    """A source's ``Proposal.confidence`` as a C-contiguous (rows, gamma) float64 array, or a SourceError that names
    the source and what is wrong."""
    if (type(confidence) is np.ndarray and confidence.dtype == np.float64 and confidence.shape == (rows, gamma)
            and confidence.flags.c_contiguous):
        return confidence
    name = type(source).__name__
    try:
        arr = np.ascontiguousarray(confidence, dtype=np.float64)
    except Exception as exc:  # a plug-in may return anything
        raise SourceError(f"acceptance source {name}: propose() returned confidence of type "
                          f"{type(confidence).__name__}, expected a float array ({exc})") from None
    if arr.shape != (rows, gamma):
        raise SourceError(f"acceptance source {name}: propose() returned confidence of shape {arr.shape}, expected "
                          f"({rows}, {gamma}) (one row of gamma per request)")
    return arr


def checked_accepted(source: AcceptanceSource, accepted: object, lengths: np.ndarray) -> np.ndarray:
    """A source's verify() answer as an int64 array with 0 <= accepted <= lengths, or a SourceError that names the
    source and what is wrong. lengths: (R,) int64 >= 0, what the policy verified."""
    if type(accepted) is np.ndarray and accepted.dtype == np.int64 and accepted.shape == lengths.shape:
        if within(accepted, lengths):  # the common case, one compiled pass
            return accepted
    name = type(source).__name__
    try:
        arr = np.asarray(accepted)
    except Exception as exc:  # a plug-in may return anything
        raise SourceError(f"acceptance source {name}: verify() returned {type(accepted).__name__}, expected an int "
                          f"array ({exc})") from None
    if arr.shape != lengths.shape:
        raise SourceError(f"acceptance source {name}: verify() returned shape {arr.shape}, expected {lengths.shape} "
                          "(one count per verified request)")
    if arr.dtype.kind not in "iub":
        raise SourceError(f"acceptance source {name}: verify() returned dtype {arr.dtype}, expected integer counts")
    arr = arr.astype(np.int64, copy=False)
    bad = (arr < 0) | (arr > lengths)
    if bad.any():
        r = int(np.flatnonzero(bad)[0])
        raise SourceError(f"acceptance source {name}: {int(arr[r])} draft tokens accepted for request {r}, outside "
                          f"0..{int(lengths[r])} (a source accepts at most the tokens verified)")
    return arr


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


class NoDrafts(AcceptanceSource):
    """The source of the drafter-less system: nothing is ever proposed."""

    gamma = 0

    def propose(self, ids: np.ndarray) -> Proposal:
        raise RuntimeError("a system without a drafter proposes nothing")

    def verify(self, proposal: Proposal, lengths: np.ndarray) -> np.ndarray:
        raise RuntimeError("a system without a drafter verifies nothing")
