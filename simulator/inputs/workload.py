"""Requests: when they arrive, how long their prompts and outputs are, and which domain they belong to.

Open loop: all arrivals are drawn up front (Poisson at a constant or piecewise-constant rate, or replayed from an
Azure-format trace). Closed loop: N users each keep one request in flight; ``RequestMaker`` draws the next request
whenever one finishes. Everything is vectorised and driven by the run's seeded generator.

A trace replay covers only a window of the recording (``trace_window``). When the open loop takes its lengths from
that trace, lengths drawn from the same trace (the closed-loop frontier's) come from the same window, so the
frontier and the operating point describe one workload; a length spec's ``max`` caps replayed lengths too.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from simulator.errors import UserError
from simulator.inputs.config import (
    EmpiricalLength,
    FixedLength,
    LognormalLength,
    RecordedLength,
    Traffic,
    UniformLength,
    Workload,
)

AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


@lru_cache(maxsize=8)
def read_azure_trace(path: Path) -> pd.DataFrame:
    """An Azure LLM inference trace: seconds since its first request, prompt and output tokens."""
    if not path.is_file():
        raise UserError(f"{path}: trace not found")
    try:
        df = pd.read_csv(path)
    except Exception as exc:  # pandas raises many kinds for unreadable files
        raise UserError(f"{path}: not a readable CSV ({type(exc).__name__}: {exc})") from None
    missing = [c for c in AZURE_COLUMNS if c not in df.columns]
    if missing:
        raise UserError(f"{path}: missing column(s) {', '.join(missing)}; expected {','.join(AZURE_COLUMNS)}")
    ts = pd.to_datetime(df["TIMESTAMP"], errors="coerce")
    if ts.isna().any():
        line = int(np.flatnonzero(ts.isna().to_numpy())[0]) + 2
        raise UserError(f"{path}: line {line}: TIMESTAMP is not a date-time")
    out = pd.DataFrame({
        "t": (ts - ts.min()).dt.total_seconds().to_numpy(),
        "prompt": pd.to_numeric(df["ContextTokens"], errors="coerce"),
        "output": pd.to_numeric(df["GeneratedTokens"], errors="coerce"),
    })
    bad = out[["prompt", "output"]].isna().any(axis=1) | (out["prompt"] < 0) | (out["output"] < 0)
    if bad.any():
        line = int(np.flatnonzero(bad.to_numpy())[0]) + 2
        raise UserError(f"{path}: line {line}: ContextTokens and GeneratedTokens must be non-negative integers")
    out = out.sort_values("t", kind="stable").reset_index(drop=True)
    out["prompt"] = out["prompt"].clip(lower=1).astype(np.int64)
    out["output"] = out["output"].clip(lower=1).astype(np.int64)
    return out


def trace_window(traffic: Traffic, duration: float) -> tuple[float, float]:
    """The span of the recording (seconds since its first request) that a replay of ``duration`` seconds covers."""
    return traffic.start_s, traffic.start_s + duration * traffic.rate_scale


class LengthSampler:
    """Lengths of one spec. ``window`` (trace path, from, to): an empirical spec reading that trace draws only
    from the requests recorded in [from, to)."""

    def __init__(self, spec, resolve, window: tuple[Path, float, float] | None = None):
        self.spec = spec
        if isinstance(spec, EmpiricalLength):
            col = "prompt" if spec.column == "ContextTokens" else "output"
            path = resolve(spec.trace)
            trace = read_azure_trace(path)
            if window is not None and Path(window[0]) == Path(path):
                inside = (trace["t"] >= window[1]) & (trace["t"] < window[2])
                if not inside.any():
                    raise UserError(f"{path}: no request recorded in the replayed window "
                                    f"[{window[1]:g}, {window[2]:g}) s")
                trace = trace[inside]
            self.values = trace[col].to_numpy()
        elif isinstance(spec, RecordedLength):
            self.values = recorded_output_lengths(resolve(spec.trace))

    @property
    def cap(self) -> int | None:
        return getattr(self.spec, "max", None)

    def capped(self, lengths: np.ndarray) -> np.ndarray:
        return np.minimum(lengths, self.cap) if self.cap else lengths

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        s = self.spec
        if isinstance(s, FixedLength):
            out = np.full(n, s.value, dtype=np.int64)
        elif isinstance(s, UniformLength):
            out = rng.integers(s.low, s.high + 1, n)
        elif isinstance(s, LognormalLength):
            out = np.maximum(1, np.round(s.median * np.exp(s.sigma * rng.standard_normal(n)))).astype(np.int64)
        else:
            out = self.values[rng.integers(0, len(self.values), n)]
        return self.capped(out)


def recorded_output_lengths(path: Path) -> np.ndarray:
    """The real output lengths of the requests a live run's trace saw finish (at their end token or their drawn
    length); requests still running when the run stopped are left out, their lengths being cut short."""
    from simulator.core.acceptance.trace import read_trace, recorded_ends

    ends = recorded_ends(read_trace(path))
    if ends is None or "finished" not in ends.columns:
        raise UserError(f"{path}: workload.output: dist 'recorded' needs a trace that records where its requests "
                        "ended (columns request, output, eos, finished: a live run's `simulate --records`)")
    done = ends[ends["finished"]]
    if done.empty:
        raise UserError(f"{path}: workload.output: no request finished in the recorded run")
    return done["output"].to_numpy(dtype=np.int64)


@dataclass
class Arrivals:
    """Requests drawn up front, sorted by arrival time (seconds)."""

    time: np.ndarray
    prompt: np.ndarray
    output: np.ndarray
    mix: np.ndarray


class RequestMaker:
    """Draws prompt/output lengths and mix entries for new requests.

    Closed loops ask for a few requests at a time, so draws come from a block drawn ``BLOCK`` requests at a time
    (the per-call cost of numpy's samplers would otherwise dominate)."""

    BLOCK = 4096

    def __init__(self, workload: Workload, resolve, rng: np.random.Generator,
                 window: tuple[Path, float, float] | None = None):
        self.keys = list(workload.mix)
        w = np.array(list(workload.mix.values()), dtype=float)
        self.weights = w / w.sum()
        self.prompt = LengthSampler(workload.prompt, resolve, window)
        self.output = LengthSampler(workload.output, resolve, window)
        self.rng = rng
        self._block: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._next = 0

    def _fresh(self, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        mix = self.rng.choice(len(self.keys), size=n, p=self.weights)
        return self.prompt.sample(n, self.rng), self.output.sample(n, self.rng), mix

    def draw(self, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if n > self.BLOCK:
            return self._fresh(n)
        if self._block is None or self._next + n > self.BLOCK:
            self._block, self._next = self._fresh(self.BLOCK), 0
        i = self._next
        self._next = i + n
        prompt, output, mix = self._block
        return prompt[i : i + n], output[i : i + n], mix[i : i + n]


def poisson_times(rate_segments: list[tuple[float, float]], duration: float, rng: np.random.Generator) -> np.ndarray:
    """Arrival times of a Poisson process whose rate is piecewise constant: [(segment seconds, rate)], cycled until
    ``duration``."""
    times = []
    t0 = 0.0
    period = sum(d for d, _ in rate_segments)
    if period <= 0:
        return np.zeros(0)
    while t0 < duration:
        for seg, rate in rate_segments:
            end = min(t0 + seg, duration)
            if end > t0 and rate > 0:
                n = rng.poisson(rate * (end - t0))
                times.append(np.sort(rng.uniform(t0, end, n)))
            t0 += seg
            if t0 >= duration:
                break
    return np.concatenate(times) if times else np.zeros(0)


def open_loop_arrivals(traffic: Traffic, maker: RequestMaker, duration: float, resolve,
                       rng: np.random.Generator) -> Arrivals:
    if traffic.kind == "poisson":
        segments = [(duration, traffic.rate)] if traffic.rate is not None else [
            (s.duration_s / traffic.time_scale, s.rate) for s in traffic.segments
        ]
        t = poisson_times(segments, duration, rng)
        prompt, output, mix = maker.draw(len(t))
        return Arrivals(t, prompt, output, mix)
    trace = read_azure_trace(resolve(traffic.trace))
    t = (trace["t"].to_numpy() - traffic.start_s) / traffic.rate_scale
    keep = (t >= 0) & (t < duration)
    t = t[keep]
    prompt, output, mix = maker.draw(len(t))
    if traffic.lengths_from_trace:
        prompt = maker.prompt.capped(trace["prompt"].to_numpy()[keep])
        output = maker.output.capped(trace["output"].to_numpy()[keep])
    return Arrivals(t, prompt, output, mix)
