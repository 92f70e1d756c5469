"""Peers' adaptive schemes: confidence thresholds, batch-size tables and goodput-driven k."""

from __future__ import annotations

from collections import deque
from typing import ClassVar

import numpy as np

from simulator.core.policies.base import Policy, PolicyView, register


@register
class Threshold(Policy):
    """``threshold-x``: cut each request's block at the first position whose confidence falls below x (DeepSpec
    ``--confidence-threshold``, SpecDec++, HF assistants). ``on: a`` thresholds prefix survival instead of the
    conditional confidence. Reads this step's confidences, so it pays the scheduling stall."""

    name = "threshold"
    positional = "value"
    sync_stall = True

    def __init__(self, value: float, on: str = "c"):
        if not 0.0 <= float(value) <= 1.0:
            raise ValueError(f"value must be in [0, 1], got {value!r}")
        if on not in ("c", "a"):
            raise ValueError(f"on must be 'c' (conditional confidence) or 'a' (prefix survival), got {on!r}")
        self.value = float(value)
        self.on = on

    def choose(self, view: PolicyView) -> np.ndarray:
        x = view.confidence if self.on == "c" else np.cumprod(view.confidence, axis=1)
        below = x < self.value
        first = np.where(below.any(axis=1), below.argmax(axis=1), view.gamma)
        return np.minimum(first, view.max_lengths)


@register
class BatchTable(Policy):
    """``batch-table``: k looked up from the running batch size (vLLM dynamic speculation, TensorRT-LLM
    ``draft_len_schedule``): the entry with the largest batch size not above R."""

    name = "batch-table"
    reads_confidence = False
    DEFAULT: ClassVar[dict[int, int]] = {1: 7, 16: 5, 64: 3, 128: 2, 192: 1}

    def __init__(self, table: dict | list | None = None):
        items = dict(table if table is not None else self.DEFAULT)
        try:
            pairs = sorted((int(b), int(k)) for b, k in items.items())
        except (TypeError, ValueError):
            raise ValueError(f"table must map batch sizes to k, got {table!r}") from None
        if not pairs or pairs[0][0] > 1 or any(k < 0 for _, k in pairs):
            raise ValueError("table needs an entry for batch size 1 and non-negative k")
        self.sizes = np.array([b for b, _ in pairs])
        self.ks = np.array([k for _, k in pairs])

    def choose(self, view: PolicyView) -> np.ndarray:
        rows = view.remaining.shape[0]
        k = int(self.ks[np.searchsorted(self.sizes, rows, side="right") - 1]) if rows else 0
        return np.minimum(k, view.max_lengths)


@register
class GoodputK(Policy):
    """``goodput-k``: one k for the whole batch maximising expected tokens per second (SmartSpec/TurboSpec,
    SGLang's throughput-aware controller). Acceptance is a single per-token rate alpha estimated from a sliding
    window of the last ``window`` verified request-steps, as the maximum-likelihood rate of a geometric prefix:
    accepted / (accepted + rejections). History only, no stall; a prior of ``prior_accepts`` accepts and one
    rejection starts it."""

    name = "goodput-k"
    reads_confidence = False

    def __init__(self, window: int = 2048, prior_accepts: float = 3.0):
        self.window = int(window)
        self.prior = float(prior_accepts)
        self._hist: deque[tuple[int, int, int]] = deque()
        self._acc = 0
        self._rej = 0
        self._n = 0

    @property
    def alpha(self) -> float:
        a = (self._acc + self.prior) / (self._acc + self._rej + self.prior + 1.0)
        return min(a, 0.999)

    def choose(self, view: PolicyView) -> np.ndarray:
        maxl = view.max_lengths
        ks = np.arange(view.gamma + 1)
        lengths = np.minimum(ks[:, None], maxl[None, :])  # (gamma+1, R)
        alpha = self.alpha
        emitted = (1.0 + (alpha - alpha ** (lengths + 1)) / (1.0 - alpha)).sum(axis=1)
        batch = (1 + lengths).sum(axis=1)
        theta = emitted * np.asarray(view.sps(batch), dtype=float)
        return lengths[int(np.argmax(theta))]

    def observe(self, lengths: np.ndarray, accepted: np.ndarray) -> None:
        verified = lengths > 0
        n = int(verified.sum())
        if n == 0:
            return
        acc = int(accepted[verified].sum())
        rej = int((accepted[verified] < lengths[verified]).sum())
        self._hist.append((n, acc, rej))
        self._n += n
        self._acc += acc
        self._rej += rej
        while self._n - self._hist[0][0] >= self.window:
            n0, a0, r0 = self._hist.popleft()
            self._n -= n0
            self._acc -= a0
            self._rej -= r0
