"""Measuring a live step: wall time of its forwards (CUDA events on a GPU, a monotonic clock on the CPU), NVML
telemetry around each step where a GPU has it, and the step-time tables the measurements make.

``StepTimer.span(kind)`` brackets one forward. On a GPU the spans are pairs of CUDA events read once per step
(``end_step``, one synchronisation), so timing adds no stall between forwards; on the CPU the forwards are
synchronous and ``time.perf_counter`` brackets them (a dry run of the GPU script takes the event path on the CPU
with ``standins.HOST_EVENTS``). Only the spans count: the Python between them (the
simulator's own work, bookkeeping) is not what the hardware would spend.

``MeasuredTable`` collects one point per step (target: B verified tokens, K context tokens read, ms; drafter:
R x gamma tokens, its context, ms) and turns them into hw_profile's table format: points binned on a B x K grid,
median per bin with p10/p90 and the repeat count; throttled steps are flagged and kept out of the medians when
unthrottled ones exist for the bin.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections import defaultdict

import numpy as np
import torch

from .standins import CUDA_EVENTS, Events


class StepTimer:
    """``events``: None times with ``time.perf_counter`` (the CPU); an ``Events`` pairs events around each forward
    and reads them once per step (``CUDA_EVENTS``, the default on a GPU; ``HOST_EVENTS``, the CPU stand-in a dry
    run of the GPU script uses)."""

    def __init__(self, device: torch.device, events: Events | None = None):
        self.events = events if events is not None else (CUDA_EVENTS if device.type == "cuda" else None)
        self._spans: dict[str, list] = defaultdict(list)

    @contextlib.contextmanager
    def span(self, kind: str):
        if self.events is not None:
            start, stop = self.events.event(), self.events.event()
            start.record()
            yield
            stop.record()
            self._spans[kind].append((start, stop))
        else:
            t0 = time.perf_counter()
            yield
            self._spans[kind].append(time.perf_counter() - t0)

    def end_step(self) -> dict[str, float]:
        """Milliseconds per kind of forward since the last call (prefill, draft, verify)."""
        out: dict[str, float] = {}
        if self.events is not None and self._spans:
            self.events.synchronize()
        for kind, spans in self._spans.items():
            if self.events is not None:
                out[kind] = float(sum(a.elapsed_time(b) for a, b in spans))
            else:
                out[kind] = 1000.0 * float(sum(spans))
        self._spans.clear()
        return out


def _bins(values: np.ndarray, ratio: float) -> np.ndarray:
    """Geometric bin representatives: each value to the nearest point of 1, ratio, ratio^2, ... (rounded)."""
    v = np.maximum(values.astype(float), 1.0)
    return np.round(ratio ** np.round(np.log(v) / np.log(ratio))).astype(np.int64)


class MeasuredTable:
    """Per-step measurements of one kind of forward, binned into a step-time table's rows."""

    TELEMETRY = ("sm_clock_mhz", "mem_clock_mhz", "power_w", "temp_c", "util_pct")

    def __init__(self):
        # B, K, requests, ms, throttled, then the telemetry fields (NaN without NVML)
        self.rows: list[tuple[float, ...]] = []
        self.reasons: list[str] = []

    def add(self, batch_tokens: int, kv_tokens: int, requests: int, ms: float, telemetry=None) -> None:
        """One step's forward; ``telemetry`` is hw_profile's PointTelemetry for the step (or None)."""
        if ms <= 0 or batch_tokens <= 0:
            return
        tel = [getattr(telemetry, f, math.nan) for f in self.TELEMETRY]
        throttled = bool(telemetry is not None and telemetry.throttled)
        self.rows.append((batch_tokens, kv_tokens, requests, ms, throttled, *tel))
        self.reasons.append(telemetry.throttle_reasons if throttled else "")

    def throttled_steps(self) -> int:
        return int(sum(1 for row in self.rows if row[4]))

    def points(self) -> list[dict]:
        if not self.rows:
            return []
        a = np.array(self.rows, dtype=float)
        b_bin = _bins(a[:, 0], 2 ** 0.5)
        k_bin = _bins(a[:, 1], 2.0)
        out = []
        for b, k in sorted(set(zip(b_bin.tolist(), k_bin.tolist(), strict=True))):
            sel = (b_bin == b) & (k_bin == k)
            clean = sel & (a[:, 4] == 0)
            use = clean if clean.any() else sel
            ms = a[use, 3]
            req = float(np.median(a[use, 2]))
            tel = {f: (float(np.nanmedian(a[use, 5 + i])) if np.isfinite(a[use, 5 + i]).any() else math.nan)
                   for i, f in enumerate(self.TELEMETRY)}
            reasons = sorted({r for r, s in zip(self.reasons, sel, strict=True) if s and r})
            out.append({
                "batch_tokens": int(b), "kv_tokens": int(k), "requests": round(req),
                "context": round(k / max(req, 1.0)), "status": "ok",
                "step_ms": float(np.median(ms)), "step_ms_p10": float(np.percentile(ms, 10)),
                "step_ms_p90": float(np.percentile(ms, 90)), "repeats": int(use.sum()),
                "throttled": bool(not clean.any()), "throttle_reasons": "|".join(reasons), **tel,
                "energy_j": math.nan,
            })
        return out
