"""The acceptance length at which speculation breaks even: a planner who does not know (or doubts) how much their
drafter accepts can still ask where, at their load, each speculative system stops beating no speculation.

For each system on the scenario's drafter and each closed-loop concurrency, the system's output throughput per
GPU over plain decoding's (``ar``, the same load, seeds and workload) is taken as a function of the drafter's
acceptance, set as ``acceptance.acceptance_length`` (the profile's entry scaled to it, at
``acceptance_length_at`` drafts verified a step: ``simulator/core/acceptance/scaling.py``). Speculation gains with
what it accepts, so the ratio rises with the length: evaluated at the two ends of the range, then bisected to the
crossing of 1. At one concurrency a ratio of throughputs is also one of per-user speeds (Little's law, the same
users in flight), so above the crossing the system is faster for every user too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from simulator.core.acceptance.pooled import lognormal_output_pmf
from simulator.core.acceptance.profile import load_profile, output_lengths, scaled_to_length
from simulator.core.acceptance.scaling import benchmark_lengths, mix_weights, pooled_over_mix
from simulator.errors import UserError
from simulator.inputs.config import LoadedScenario, acceptance_length_at, load_scenario
from simulator.inputs.systems import SystemSpec, resolve_systems
from simulator.runs.run import LoadPoint, RunSpec, load_points, run_one

TOLERANCE = 0.05  # default precision of a crossing, in accepted tokens a step
EDGE = 0.1  # the default range keeps this far inside (1, 1 + drafts), where a profile's scaling still reaches


def crossing(ratio: Callable[[float], float], low: float, high: float,
             tolerance: float = TOLERANCE) -> tuple[float, float, float | None]:
    """(ratio at ``low``, at ``high``, the length in between where it crosses 1, or None where it does not):
    bisection, ``ratio`` taken as rising with the length."""
    at_low, at_high = ratio(low), ratio(high)
    if not at_low < 1.0 < at_high:
        return at_low, at_high, None
    a, b = low, high
    while b - a > tolerance:
        mid = (a + b) / 2.0
        a, b = (mid, b) if ratio(mid) < 1.0 else (a, mid)
    return at_low, at_high, (a + b) / 2.0


def crossing_text(length: float | None, low: float, high: float, ratio_low: float) -> str:
    """A crossing as tables print it: the length, or which side of the searched range it lies on."""
    if length is not None:
        return f"{length:.2f}"
    return f"below {low:g}" if ratio_low >= 1.0 else f"above {high:g}"


@dataclass(frozen=True)
class BreakEven:
    system: str
    concurrency: int
    plain_tps_per_gpu: float  # no speculation's output tok/s per GPU at this load
    as_set: float  # the system's ratio to it at the scenario's own acceptance
    low: float
    high: float
    ratio_low: float
    ratio_high: float
    length: float | None  # where the ratio crosses 1; None: it does not inside [low, high]

    @property
    def verdict(self) -> str:
        return crossing_text(self.length, self.low, self.high, self.ratio_low)


@dataclass(frozen=True)
class Search:
    """What one command asks: the scenario (path and overrides), the range, the precision and the runs."""

    path: Path
    sets: tuple[str, ...]
    low: float
    high: float
    tolerance: float
    seeds: tuple[int, ...]
    quick: bool
    with_plain: tuple[str, ...] = ("systems+=ar",)  # the override that adds no speculation, where it is missing


def _throughput(search: Search, extra: list[str], name: str, concurrency: int) -> float:
    """Output tok/s per GPU of system ``name`` at ``concurrency``, mean over the seeds, on the scenario with the
    overrides ``extra`` (after the command's own): the scenario's finite prompt list at that load where its frontier
    has one (``frontier.requests``), else a steady closed loop."""
    scn = load_scenario(search.path, [*search.sets, *search.with_plain, *extra])
    system = next(s for s in resolve_systems(scn) if s.name == name)
    point = next((p for p in load_points(scn) if p.concurrency == concurrency), LoadPoint(concurrency))
    return float(np.mean([run_one(scn, RunSpec(system, point, seed, search.quick))[0]["throughput_per_gpu"]
                          for seed in search.seeds]))


def one_point(search: Search, name: str, concurrency: int) -> BreakEven:
    """The break-even of system ``name`` at ``concurrency`` (module docstring)."""
    plain = _throughput(search, [], "ar", concurrency)

    def ratio(length: float) -> float:
        return _throughput(search, [f"acceptance.acceptance_length={length:.6g}"], name, concurrency) / plain

    as_set = _throughput(search, [], name, concurrency) / plain
    at_low, at_high, length = crossing(ratio, search.low, search.high, search.tolerance)
    return BreakEven(name, concurrency, plain, as_set, search.low, search.high, at_low, at_high, length)


def scenario_length(scn: LoadedScenario) -> float:
    """The accepted length the scenario sets for its drafter, counted as the break-even lengths are (a fixed block
    of ``acceptance_length_at`` drafts, pooled over its workload): ``acceptance.acceptance_length`` where given,
    else the profile's own."""
    m = scn.model
    if m.acceptance.acceptance_length is not None:
        return float(m.acceptance.acceptance_length)
    drafter = m.drafter.name
    profile = load_profile(m.acceptance.profile, scn.base)
    if drafter not in profile.drafters:
        raise UserError(f"{scn.path}: acceptance.profile: {profile.name!r} has no {drafter!r} drafter to scale "
                        f"(it has {', '.join(profile.drafters)})")
    profile = scaled_to_length(scn, profile, drafter)
    lengths = benchmark_lengths(profile, drafter, profile.drafters[drafter].conditional, acceptance_length_at(m),
                                lognormal_output_pmf(*output_lengths(scn)))
    return pooled_over_mix(lengths, mix_weights(profile, drafter, dict(m.workload.mix)))


def eligible(systems: list[SystemSpec], drafter: str) -> tuple[list[SystemSpec], list[str]]:
    """(the systems a scaled acceptance moves: those drafting with the scenario's drafter, lines saying why each
    other one is left out)."""
    keep, left = [], []
    for s in systems:
        if s.policy == "ar":
            continue
        if s.drafter != drafter:
            left.append(f"{s.name}: drafts with {s.drafter}, not the scenario's drafter ({drafter}), whose acceptance "
                        "the length sets")
        else:
            keep.append(s)
    return keep, left


def plan_search(path: Path, sets: tuple[str, ...], systems: tuple[str, ...], concurrency: tuple[int, ...],
                low: float | None, high: float | None, tolerance: float, seed: int | None, replicates: int,
                quick: bool) -> tuple[Search, list[tuple[str, int]], list[str], int, float]:
    """The search a command asks for, checked: (search, (system, concurrency) pairs, lines on systems left out,
    the drafts the lengths are counted at, the scenario's own length so counted). Raises UserError on a scenario
    or option it cannot serve."""
    scn = load_scenario(path, sets)
    m = scn.model
    if m.acceptance.source != "profile":
        raise UserError(f"{path}: acceptance.source: break-even scales a profile's acceptance; expected 'profile', "
                        f"got {m.acceptance.source!r}")
    at = acceptance_length_at(m)
    lo = 1.0 + EDGE if low is None else low
    hi = 1.0 + at - EDGE if high is None else high
    if not 1.0 < lo < hi < 1.0 + at:
        raise UserError(f"--range: expected 1 < LOW < HIGH < {1 + at:g} (one token plus the {at} drafts verified "
                        f"a step, acceptance_length_at or the drafter's gamma), got {lo:g} {hi:g}")
    loads = list(concurrency) or list(m.frontier.concurrency if m.frontier else [])
    if not loads:
        raise UserError(f"{path}: no closed-loop load: give --concurrency N or frontier.concurrency")
    asked = resolve_systems(scn)
    unknown = [n for n in systems if n not in {s.name for s in asked}]
    if unknown:
        raise UserError(f"--systems: {unknown[0]!r} is not one of the scenario's systems "
                        f"({', '.join(sorted(s.name for s in asked))})")
    candidates, left = eligible([s for s in asked if not systems or s.name in systems], m.drafter.name)
    if not candidates:
        raise UserError(f"{path}: no system drafts with the scenario's drafter ({m.drafter.name}) among those asked")
    first = m.seed if seed is None else seed
    plain = () if any(s.policy == "ar" and s.name == "ar" for s in asked) else ("systems+=ar",)
    search = Search(path, tuple(sets), lo, hi, tolerance, tuple(range(first, first + replicates)), quick, plain)
    return search, [(s.name, c) for s in candidates for c in loads], left, at, scenario_length(scn)


def run_search(search: Search, pairs: list[tuple[str, int]], jobs: int) -> Iterator[BreakEven]:
    """Each pair's break-even as it is found, on ``jobs`` processes (one: in this one)."""
    if jobs <= 1 or len(pairs) <= 1:
        for name, c in pairs:
            yield one_point(search, name, c)
        return
    with ProcessPoolExecutor(max_workers=min(jobs, len(pairs))) as pool:
        futures = [pool.submit(one_point, search, name, c) for name, c in pairs]
        for done in as_completed(futures):
            yield done.result()


def rows(found: list[BreakEven], at: int, own: float) -> list[dict]:
    """break_even.csv's rows, by system then load; ``at``: the drafts a step the lengths are counted at, ``own``:
    the scenario's own length so counted."""
    out = []
    for b in sorted(found, key=lambda b: (b.system, b.concurrency)):
        row = {**asdict(b), "length_at": at, "scenario_length": own}
        row["length"] = np.nan if b.length is None else b.length
        row["break_even"] = b.verdict
        out.append(row)
    return out
