"""The policy interface: what a verification policy sees each step and what it must return.

A policy is a class constructed once per replica with its scenario parameters as keyword arguments. Each engine
step it is called with a read-only ``PolicyView`` and returns l (R,) ints in 0..min(gamma, remaining - 1): how many
of each request's draft tokens the target verifies. After verification it is told the outcome (``observe``), which
history-based policies use.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import numpy as np

from simulator.core.batch_kernels import within
from simulator.core.plugins import registrar
from simulator.errors import PolicyError


class PolicyView:
    """One step's read-only state of a replica's decoding batch (R running requests past prefill).

    confidence: (R, gamma) float, conditional confidences the drafter reports, 0 where a position may not be
                verified (past the request's remaining tokens).
    remaining:  (R,) int, tokens each request still has to emit (>= 1).
    context:    (R,) int, each request's context length (prompt + generated).
    sps:        callable, int array of total verification tokens B (anchors included) -> engine steps per second
                for this step (draft, scheduling and prefill costs of this step included).
    gamma:      the drafter's proposal length.
    step:       the replica's step counter.
    outcome:    (R,) int accepted-prefix length if everything were verified; only for policies that declare
                ``needs_outcome`` (the oracle), otherwise None.
    ids:        (R,) int the requests' ids (stable across steps), for a policy that keeps per-request history;
                None where the caller has none (a policy then takes row r to be the same request every step).
    """

    __slots__ = ("confidence", "context", "gamma", "ids", "max_lengths", "outcome", "remaining", "sps", "step")

    def __init__(self, confidence: np.ndarray, remaining: np.ndarray, context: np.ndarray,
                 sps: Callable[[np.ndarray], np.ndarray], gamma: int, step: int, outcome: np.ndarray | None = None,
                 max_lengths: np.ndarray | None = None, ids: np.ndarray | None = None):
        if max_lengths is None:
            max_lengths = np.minimum(gamma, remaining - 1)
        for arr in (confidence, remaining, context, outcome, max_lengths, ids):
            if arr is not None:
                arr.flags.writeable = False
        self.confidence = confidence
        self.remaining = remaining
        self.context = context
        self.sps = sps
        self.gamma = gamma
        self.step = step
        self.outcome = outcome
        #: (R,) min(gamma, remaining - 1): the largest valid length per request
        self.max_lengths = max_lengths
        self.ids = ids


class Policy:
    """Base class. Subclasses set ``name`` and implement ``choose``."""

    name: ClassVar[str] = ""
    #: the name's optional numeric suffix binds to this parameter ("static-3" -> k=3)
    positional: ClassVar[str | None] = None
    #: needs this step's confidences before the verify can launch: pays the scenario's scheduling stall
    sync_stall: ClassVar[bool] = False
    #: reads view.outcome (realised acceptance): only sources that pre-draw outcomes can serve it
    needs_outcome: ClassVar[bool] = False
    #: reads view.confidence (a trace without confidences can still drive a policy that does not)
    reads_confidence: ClassVar[bool] = True

    def choose(self, view: PolicyView) -> np.ndarray:
        raise NotImplementedError

    def observe(self, lengths: np.ndarray, accepted: np.ndarray) -> None:
        """Called after verification with the lengths chosen and the draft tokens accepted (both (R,))."""


#: the built-in policies by name (each registers itself with ``register``; simulator.core.policies.resolve looks names
#: up here before plug-ins)
REGISTRY: dict[str, type[Policy]] = {}
register = registrar(REGISTRY)


def checked_lengths(policy: Policy, label: str, lengths: object, view: PolicyView) -> np.ndarray:
    """The policy's answer as an int64 array, or a PolicyError that names the policy and what is wrong."""
    rows = view.remaining.shape[0]
    hi = view.max_lengths
    if type(lengths) is np.ndarray and lengths.dtype == np.int64 and lengths.shape == (rows,):
        if within(lengths, hi):  # the common case, one compiled pass
            return lengths
    try:
        arr = np.asarray(lengths)
    except Exception as exc:  # a policy may return anything
        raise PolicyError(f"policy {label!r}: choose() returned {type(lengths).__name__}, expected an int array ({exc})") from None
    if arr.shape != (rows,):
        raise PolicyError(f"policy {label!r}: choose() returned shape {arr.shape}, expected ({rows},) for {rows} requests")
    if arr.dtype.kind not in "iub":
        if arr.dtype.kind == "f" and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)):
            arr = arr.astype(np.int64)
        else:
            raise PolicyError(f"policy {label!r}: choose() returned dtype {arr.dtype}, expected integer lengths")
    arr = arr.astype(np.int64, copy=False)
    bad = (arr < 0) | (arr > hi)
    if bad.any():
        r = int(np.flatnonzero(bad)[0])
        raise PolicyError(
            f"policy {label!r}: length {int(arr[r])} for request {r} is outside 0..{int(hi[r])} "
            f"(min(gamma={view.gamma}, remaining-1={int(view.remaining[r]) - 1}))"
        )
    return arr
