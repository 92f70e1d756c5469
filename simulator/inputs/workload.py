"""Requests: when they arrive, how long their prompts and outputs are, and which domain they belong to.

Open loop: all arrivals are drawn up front (Poisson at a constant or piecewise-constant rate, or replayed from an
Azure-format trace). Closed loop: N users each keep one request in flight; ``RequestMaker`` draws the next request
whenever one finishes. Everything is vectorised and driven by the run's seeded generator.

A workload with a shared prefix (``workload.shared_prefix``) also draws each request's prefix group (0..G-1, uniform,
or, with ``prompts_per_group`` P, its prompt's id 0..G x P - 1 in one shuffled cycle of a benchmark's prompt pool);
then ``RequestMaker.draw`` and the open-loop arrivals carry a fourth array, ``prefix`` (int64), and prompts no
longer than the prefix are lengthened to the prefix plus one token. Without one, nothing is drawn for it and the
draws are the three arrays they always were (the same numbers, seed for seed).

Benchmark stages: ``traffic.repeat: false`` stops arrivals at the end of the last segment, and
``traffic.exact_counts`` sends exactly round(rate x duration) requests per segment, their exponential gaps scaled
to span it (inference-perf's constant-rate stages).

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
    prefix: np.ndarray | None = None  # shared-prefix group per request (workload.shared_prefix), else None


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
        self.shared_prefix = workload.shared_prefix
        self._block: tuple[np.ndarray, ...] | None = None
        self._next = 0
        pool = self.shared_prefix.prompts_per_group if self.shared_prefix is not None else None
        # a benchmark's finite pool of whole prompts, in one shuffled order, cycled (inference-perf's shared_prefix)
        self._pool = None if pool is None else rng.permutation(self.shared_prefix.groups * pool).astype(np.int64)
        self._cycled = 0

    def _fresh(self, n: int) -> tuple[np.ndarray, ...]:
        mix = self.rng.choice(len(self.keys), size=n, p=self.weights)
        prompt, output = self.prompt.sample(n, self.rng), self.output.sample(n, self.rng)
        if self.shared_prefix is None:
            return prompt, output, mix
        if self._pool is not None:  # the prompt itself: its id in the pool
            prefix = self._pool[(self._cycled + np.arange(n)) % len(self._pool)]
            self._cycled += n
            return prompt, output, mix, prefix
        # drawn after the rest, so that the lengths and mix are those of the same workload without a prefix
        prefix = self.rng.integers(0, self.shared_prefix.groups, n, dtype=np.int64)
        return self.fit_prompt(prompt), output, mix, prefix

    def fit_prompt(self, prompt: np.ndarray) -> np.ndarray:
        """Prompts with a shared prefix hold it and at least one token of their own."""
        if self.shared_prefix is None:
            return prompt
        return np.maximum(prompt, self.shared_prefix.tokens + 1)

    def draw(self, n: int) -> tuple[np.ndarray, ...]:
        """(prompt, output, mix) of ``n`` new requests, plus ``prefix`` (their shared-prefix groups) when the
        workload has a shared prefix."""
        if n > self.BLOCK:
            return self._fresh(n)
        if self._block is None or self._next + n > self.BLOCK:
            self._block, self._next = self._fresh(self.BLOCK), 0
        i = self._next
        self._next = i + n
        return tuple(a[i : i + n] for a in self._block)


def poisson_times(rate_segments: list[tuple[float, float]], duration: float, rng: np.random.Generator,
                  repeat: bool = True, exact_counts: bool = False) -> np.ndarray:
    """Arrival times of a Poisson process whose rate is piecewise constant: [(segment seconds, rate)], cycled until
    ``duration`` (``repeat``; else one pass, arrivals stopping at the end of the last segment). ``exact_counts``:
    see ``stage_times``."""
    if not repeat or exact_counts:
        return stage_times(rate_segments, duration, rng, repeat, exact_counts)
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


def stage_times(rate_segments: list[tuple[float, float]], duration: float, rng: np.random.Generator,
                repeat: bool, exact_counts: bool) -> np.ndarray:
    """Arrival times of benchmark-style stages: segments in order (cycled when ``repeat``), cut at ``duration``.
    A segment [t0, t1) sends a Poisson number of requests at its rate, uniform over it; with ``exact_counts`` it
    sends exactly n = round(rate x (t1 - t0)), with n + 1 exponential gaps scaled to sum to t1 - t0, so that its n
    arrivals are a Poisson stream's conditioned on the count and fall inside the segment."""
    period = sum(d for d, _ in rate_segments)
    if period <= 0:
        return np.zeros(0)
    times = []
    t0 = 0.0
    while t0 < duration:
        for seg, rate in rate_segments:
            end = min(t0 + seg, duration)
            if end > t0 and rate > 0:
                if exact_counts:
                    n = round(rate * (end - t0))
                    gaps = rng.exponential(1.0, n + 1)
                    times.append(t0 + np.cumsum(gaps[:n]) / gaps.sum() * (end - t0))
                else:
                    n = rng.poisson(rate * (end - t0))
                    times.append(np.sort(rng.uniform(t0, end, n)))
            t0 += seg
            if t0 >= duration:
                break
        if not repeat:
            break
    return np.concatenate(times) if times else np.zeros(0)


def segment_bounds(traffic: Traffic) -> np.ndarray:
    """Start times of the traffic's segments on the run's clock (one pass, ``time_scale`` applied) and the end of
    the last: len(segments) + 1 edges."""
    durations = [s.duration_s / traffic.time_scale for s in traffic.segments or []]
    return np.concatenate([[0.0], np.cumsum(durations)])


def _split(drawn: tuple[np.ndarray, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    prompt, output, mix, *rest = drawn
    return prompt, output, mix, (rest[0] if rest else None)


def open_loop_arrivals(traffic: Traffic, maker: RequestMaker, duration: float, resolve,
                       rng: np.random.Generator) -> Arrivals:
    if traffic.kind == "poisson":
        segments = [(duration, traffic.rate)] if traffic.rate is not None else [
            (s.duration_s / traffic.time_scale, s.rate) for s in traffic.segments
        ]
        t = poisson_times(segments, duration, rng, traffic.repeat, traffic.exact_counts)
        return Arrivals(t, *_split(maker.draw(len(t))))
    trace = read_azure_trace(resolve(traffic.trace))
    t = (trace["t"].to_numpy() - traffic.start_s) / traffic.rate_scale
    keep = (t >= 0) & (t < duration)
    t = t[keep]
    prompt, output, mix, prefix = _split(maker.draw(len(t)))
    if traffic.lengths_from_trace:
        prompt = maker.fit_prompt(maker.prompt.capped(trace["prompt"].to_numpy()[keep]))
        output = maker.output.capped(trace["output"].to_numpy()[keep])
    return Arrivals(t, prompt, output, mix, prefix)
